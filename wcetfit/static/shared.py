"""Code two functions share, made a function of its own that both tail-call.

Hand-written assembly jumps into another function's body: glibc's ``mempcpy`` sets its
return value and jumps past ``memcpy``'s first instruction into the copy loop that both
use; ``wmemset`` enters ``memset`` at two points.  Each function's model is built from its
entry alone, so both models hold the same blocks, and the fit, which keeps one cost per
block and function, could not place them (a malloc-using libc function such as strdup or
qsort reaches memcpy and mempcpy both, through realloc).

The shared blocks are cut out: every shared block entered from outside the shared code
becomes the entry of a function of its own, named after the function whose body it lies
in (``memcpy@impl+0x16d800.shared+0x3``), and a jump or fall-through into it becomes a
tail call.  Repeated until no block is in two functions (a block reached from two of the new
entries is cut out in turn).  Counting is unchanged: the copy's blocks are the same
blocks at the same addresses, and a tail call into a relocated function already jumps to
its copy.  What a user reads changes only in that the shared code's blocks and loops are
listed under the new function's name.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import replace
from typing import Collection, Mapping

from wcetfit.model import CALL_INTERNAL, CallSite, FunctionModel, hexaddr

log = logging.getLogger(__name__)

# More rounds than any shared code needs (each round cuts at least one block out): a
# bound on the loop, not a tuning knob.
_MAX_ROUNDS = 64


def shared_blocks(functions: Mapping[str, FunctionModel]) -> dict[int, list[str]]:
    """Block address -> the functions holding it, for the blocks more than one holds."""
    holders: dict[int, list[str]] = defaultdict(list)
    for name, fn in functions.items():
        for a in fn.block_addresses:
            holders[a].append(name)
    return {a: names for a, names in holders.items() if len(names) > 1}


def separate_shared_code(functions: Mapping[str, FunctionModel],
                         observed: Collection[str] = ()) -> dict[str, FunctionModel]:
    """``functions`` (by name) with the code two or more of them share made functions of
    their own (module docstring); unchanged when none is shared, or when the shared
    blocks do not look the same in every function holding them (then
    wcetfit.fit.system.refuse_shared_blocks says so).

    ``observed``: functions that are targets a count run saw an indirect jump or call
    take.  They are left as they are, and so is what they share: those entries are known
    only as far as the inputs took them, so cuts made by them would move from one count
    run to the next and the stored counts with them (libgmp's mul_basecase jumps into
    its unrolled loops at a point computed from the length, each target entering the
    same code).  The others' shared code is cut apart all the same."""
    if observed:
        kept = {n: fn for n, fn in functions.items() if n in observed}
        out = separate_shared_code({n: fn for n, fn in functions.items() if n not in kept})
        return {**out, **kept}
    shared = shared_blocks(functions)
    if not shared:
        return dict(functions)
    # only the functions that hold shared code change (the rest of a libc reach, 300
    # functions for strdup, is kept as it is)
    involved = {n for names in shared.values() for n in names}
    if len(involved) < len(functions):
        out = separate_shared_code({n: functions[n] for n in involved})
        return {**{n: fn for n, fn in functions.items() if n not in involved}, **out}
    graph = _UnionGraph(functions)
    if graph.inconsistent:
        log.info("shared blocks differ between the functions holding them (%s): left "
                 "shared", graph.inconsistent)
        return dict(functions)
    entries = {fn.entry for fn in functions.values()}
    for _ in range(_MAX_ROUNDS):
        regions = {e: graph.region(e, entries) for e in entries}
        seen: dict[int, int] = defaultdict(int)
        for blocks in regions.values():
            for b in blocks:
                seen[b] += 1
        twice = {b for b, k in seen.items() if k > 1}
        if not twice:
            break
        # where control enters the shared code from code that is not shared
        cuts = {b for b in twice if any(p not in twice for p in graph.pred[b])}
        entries |= cuts or {min(twice)}
    else:
        return dict(functions)
    after_call = graph.returns_into(entries - {fn.entry for fn in functions.values()})
    if after_call is not None:
        log.info("shared code entered where a call at %s returns: left shared",
                 hexaddr(after_call))
        return dict(functions)
    by_entry = {fn.entry: fn for fn in functions.values()}
    names = {e: (by_entry[e].name if e in by_entry else _name_inside(e, functions))
             for e in entries}
    out: dict[str, FunctionModel] = {}
    for e in sorted(entries):
        out[names[e]] = graph.function(e, regions[e], names, by_entry.get(e), functions)
    for e in sorted(set(entries) - set(by_entry)):
        # said where the report is read: the names of its blocks and loops are this
        # function's, not the ones the user asked about
        holders = sorted(n for n, fn in functions.items() if e in fn.block_addresses)
        note = (f"{names[e]}: code {' and '.join(holders)} share (entered at {hexaddr(e)}), "
                f"modelled as a function of its own that they tail-call")
        out[names[e]] = replace(out[names[e]], warnings=(note,))
    return out


def _name_inside(address: int, functions: Mapping[str, FunctionModel]) -> str:
    """``owner.shared+0xoff``: after the function whose entry is nearest below
    ``address`` among those holding it (its body, by the layout)."""
    holders = [fn for fn in functions.values() if address in fn.block_addresses
               and fn.entry <= address]
    if not holders:
        holders = [fn for fn in functions.values() if address in fn.block_addresses]
    owner = max(holders, key=lambda fn: fn.entry)
    return f"{owner.name}.shared+{address - owner.entry:#x}"


class _UnionGraph:
    """The blocks, edges, calls, exits and tables of all the functions together: a shared
    block's facts are the same in each function that holds it."""

    def __init__(self, functions: Mapping[str, FunctionModel]) -> None:
        self.block = {}
        self.succ: dict[int, set[int]] = defaultdict(set)
        self.pred: dict[int, set[int]] = defaultdict(set)
        self.calls: dict[int, dict[tuple, CallSite]] = defaultdict(dict)
        self.exits: set[int] = set()
        self.tables = {}
        self.unresolved: dict[int, int] = {}
        self.inconsistent = ""
        facts: dict[int, tuple] = {}
        for fn in functions.values():
            own = set(fn.block_addresses)
            out: dict[int, set[int]] = defaultdict(set)
            for s, d in fn.edges:
                out[s].add(d)
            calls: dict[int, set[tuple]] = defaultdict(set)
            for c in fn.calls:
                calls[c.block].add((c.instruction, c.kind, c.target, c.tail))
            for b in fn.blocks:
                # a jump back to the function's own entry is an edge in it, a tail call in
                # another: compared without the edges to an entry
                key = (frozenset(d for d in out[b.address] if d != fn.entry),
                       frozenset(calls[b.address]))
                if facts.setdefault(b.address, key) != key:
                    self.inconsistent = f"block {hexaddr(b.address)} of {fn.name}"
                self.block[b.address] = b
            for s, d in fn.edges:
                self.succ[s].add(d)
                self.pred[d].add(s)
            for c in fn.calls:
                self.calls[c.block][(c.instruction, c.kind, c.target, c.tail)] = c
            self.exits |= set(fn.exits) & own
            for t in fn.jump_tables:
                self.tables[t.block] = t
            for i in fn.unresolved_jumps:
                self.unresolved[i] = next(b.address for b in fn.blocks
                                          if b.address <= i < b.address + b.size)

    def last_instruction(self, block: int) -> int:
        b = self.block[block]
        return b.instructions[-1].address if b.instructions else b.address

    def returns_into(self, entries: set[int]) -> int | None:
        """A block whose call returns into one of ``entries`` (the call's fall-through):
        a call and a tail call at one instruction, which the count run's copy cannot make."""
        for s, sites in self.calls.items():
            if any(not c.tail for c in sites.values()) and self.succ[s] & entries:
                return s
        return None

    def region(self, entry: int, entries: set[int]) -> set[int]:
        """The blocks reached from ``entry`` without entering another entry."""
        seen, todo = {entry}, [entry]
        while todo:
            for d in self.succ[todo.pop()]:
                if d not in seen and d not in entries:
                    seen.add(d)
                    todo.append(d)
        return seen

    def function(self, entry: int, blocks: set[int], names: Mapping[int, str],
                 original: FunctionModel | None,
                 functions: Mapping[str, FunctionModel]) -> FunctionModel:
        from wcetfit.static import structure

        edges, exits = [], set(self.exits & blocks)
        calls = {k: c for b in blocks for k, c in self.calls[b].items()}
        for s in blocks:
            for d in self.succ[s]:
                if d in blocks:
                    edges.append((s, d))
                else:
                    # control leaves for another function's entry: a tail call, as the
                    # static model makes a jump (or fall-through) into one
                    last = self.last_instruction(s)
                    calls[(last, CALL_INTERNAL, d, True)] = CallSite(
                        s, last, CALL_INTERNAL, d, names[d], tail=True)
                    exits.add(s)
        st = structure.analyze(sorted(blocks), edges, entry, sorted(exits))
        base = original or next(fn for fn in functions.values() if entry in fn.block_addresses)
        return replace(
            base, name=names[entry], address=entry, entry=entry,
            blocks=tuple(self.block[a] for a in sorted(blocks)),
            edges=tuple(sorted(set(edges))), exits=tuple(sorted(exits)), loops=st.loops,
            calls=tuple(sorted(calls.values(), key=lambda c: (c.instruction, c.tail,
                                                              c.target or 0))),
            jump_tables=tuple(self.tables[b] for b in sorted(blocks) if b in self.tables),
            coexec_classes=st.coexec_classes, max_rank=st.max_rank,
            unresolved_jumps=tuple(sorted(i for i, b in self.unresolved.items()
                                          if b in blocks)),
            warnings=base.warnings if original is not None else (),
            ifunc=base.ifunc if original is not None else None)
