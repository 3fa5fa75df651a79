"""Plain, immutable data describing a binary's functions: the static model.

This is the contract between the static layer (:mod:`wcetfit.static.binary`, which uses angr)
and everything downstream (instrumentation, fit, IPET, report).  No angr object ever
appears here: only ints, strings and tuples, so the model can be cached as JSON and
handed to child processes.

Addresses are the binary's own link-time addresses, as ``objdump -d`` and ``nm`` print
them (a shared object starts at 0), never a loader's rebased ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

SCHEMA_CFG = "wcetfit.cfg/1"


def hexaddr(addr: int) -> str:
    """Addresses travel as "0x…" strings in every JSON wcetfit writes."""
    return f"{addr:#x}"


def parse_addr(text: str | int) -> int:
    if isinstance(text, int):
        return text
    return int(text, 16) if text.lower().startswith("0x") else int(text)


@dataclass(frozen=True)
class Instruction:
    address: int
    size: int
    mnemonic: str
    op_str: str

    def text(self) -> str:
        return f"{self.mnemonic} {self.op_str}".strip()


@dataclass(frozen=True)
class Block:
    """A basic block: straight-line code entered only at its first instruction."""

    address: int
    size: int
    instructions: tuple[Instruction, ...]

    @property
    def end(self) -> int:
        return self.address + self.size

    @property
    def n_instructions(self) -> int:
        return len(self.instructions)

    @property
    def last(self) -> Instruction:
        return self.instructions[-1]


@dataclass(frozen=True)
class Loop:
    """A natural loop.  ``bound_key`` is how a user names it in [loops] of wcetfit.toml."""

    header: int
    body: tuple[int, ...]            # block addresses, header included, sorted
    back_edges: tuple[tuple[int, int], ...]
    entry_edges: tuple[tuple[int, int], ...]   # edges from outside the loop into the header
    parent: int | None               # header of the innermost enclosing loop
    depth: int                       # 1 for an outermost loop
    # False for an irreducible loop (a cycle entered at more than one block, as gcc's jump
    # threading makes): ``header`` is then the entry first reached from the function's
    # entry, ``back_edges`` the edges returning to it from inside, and ``entry_edges`` ALL
    # edges entering the body from outside (some do not go to the header).  For a natural
    # loop both definitions agree.  Every cycle of the CFG contains a back edge of some loop.
    reducible: bool = True


# Kinds of call site.
CALL_INTERNAL = "internal"   # a function of this binary (directly, or through its own PLT)
CALL_IMPORTED = "imported"   # resolved by the dynamic loader to another object
CALL_INDIRECT = "indirect"   # through a register or memory: target unknown statically


@dataclass(frozen=True)
class ObservedTarget:
    """A function an indirect call site (CALL_INDIRECT) was seen calling in the count run:
    the instrumented copy records every indirect call's target (wcetfit.count)."""

    address: int | None          # link-time entry in this binary; None: outside it
    name: str                    # the function's name, or "symbol (library)" outside
    inputs: int                  # inputs of the count run on which the site called it

    def describe(self) -> str:
        where = f" at {hexaddr(self.address)}" if self.address is not None else ""
        return f"{self.name}{where} (observed on {self.inputs} input{'s' * (self.inputs != 1)})"


@dataclass(frozen=True)
class CallSite:
    block: int                   # block that ends with the call
    instruction: int             # address of the call instruction
    kind: str                    # CALL_INTERNAL / CALL_IMPORTED / CALL_INDIRECT
    target: int | None           # callee's entry (internal) or PLT stub (imported)
    target_name: str | None
    tail: bool = False           # a jump that leaves the function (tail call)
    # CALL_INDIRECT only: the targets the count run saw (observed, not every possible one).
    observed: tuple[ObservedTarget, ...] = ()

    @property
    def observed_internal(self) -> tuple[int, ...]:
        """Entries in this binary the site was seen calling (modelled and counted)."""
        return tuple(t.address for t in self.observed if t.address is not None)

    @property
    def entries(self) -> tuple[int, ...]:
        """The entries in this binary the site calls: a direct call's callee, or the
        targets an indirect call was seen taking (observed); none for an import."""
        if self.kind == CALL_INTERNAL:
            return () if self.target is None else (self.target,)
        return self.observed_internal


def indirect_call_notes(fn: "FunctionModel") -> list[str]:
    """One line per indirect call site of ``fn`` the count run saw: where its targets are
    and how they are treated ("indirect call at 0x… → f (observed on N inputs)")."""
    out = []
    for c in fn.calls:
        if c.kind != CALL_INDIRECT or not c.observed:
            continue
        what = "indirect tail call" if c.tail else "indirect call"
        inside = [t.describe() for t in c.observed if t.address is not None]
        outside = [t.describe() for t in c.observed if t.address is None]
        text = f"{fn.name}: {what} at {hexaddr(c.instruction)} \u2192 " + ", ".join(inside + outside)
        if inside:
            text += ("; the callees in this binary are modelled, counted and fitted as its "
                     "callees (only the targets observed: another input may call another)")
        if outside:
            text += ("; outside this binary: time stays in the calling block, as an "
                     "imported call's")
        out.append(text)
    return out


@dataclass(frozen=True)
class JumpTable:
    """An indirect jump resolved through a table in the binary's data."""

    block: int                   # block ending with the indirect jump
    instruction: int             # the indirect jmp
    table_address: int
    entry_size: int              # 4 (offsets relative to ``base``) or 8 (absolute)
    base: int | None             # relative tables: address entries are relative to
    targets: tuple[int, ...]     # one per table entry, in table order


@dataclass(frozen=True)
class IfuncChoice:
    """An IFUNC symbol (``sin``) stands for the implementation its resolver selects when the
    dynamic loader binds it: the model (and the count and timing runs) are of that code,
    as selected on the machine that built the model."""

    symbol: str                  # the exported IFUNC name
    resolver: int                # the symbol's value: the resolver's entry
    implementation: int          # the selected implementation's entry (link-time)
    implementation_name: str     # its symbol (.symtab) or ``<symbol>@impl+0x…``

    def describe(self) -> str:
        return (f"{self.symbol} \u2192 {self.implementation_name} at {hexaddr(self.implementation)}, "
                f"selected by its IFUNC resolver ({hexaddr(self.resolver)}) on this CPU")


@dataclass(frozen=True)
class FunctionModel:
    name: str
    address: int
    blocks: tuple[Block, ...]                  # sorted by address; blocks[0] need not be the entry
    edges: tuple[tuple[int, int], ...]         # intraprocedural control flow (a call block's
                                               # edge goes to its fall-through)
    entry: int
    exits: tuple[int, ...]                     # blocks that return (or tail-call, or never return)
    loops: tuple[Loop, ...]
    calls: tuple[CallSite, ...]
    jump_tables: tuple[JumpTable, ...]
    coexec_classes: tuple[tuple[int, ...], ...]  # blocks that execute equally often in every run
    max_rank: int                              # upper bound on rank of counts (with the ε column)
    unresolved_jumps: tuple[int, ...] = ()     # indirect jumps (instruction addresses) not resolved
    warnings: tuple[str, ...] = ()
    ifunc: IfuncChoice | None = None           # set when this is an IFUNC's selected implementation

    def block_at(self, address: int) -> Block:
        for b in self.blocks:
            if b.address == address:
                return b
        raise KeyError(hexaddr(address))

    @property
    def block_addresses(self) -> tuple[int, ...]:
        return tuple(b.address for b in self.blocks)

    def successors(self, address: int) -> tuple[int, ...]:
        return tuple(d for s, d in self.edges if s == address)

    def predecessors(self, address: int) -> tuple[int, ...]:
        return tuple(s for s, d in self.edges if d == address)

    def loop_of(self, header: int) -> Loop:
        for lp in self.loops:
            if lp.header == header:
                return lp
        raise KeyError(hexaddr(header))


@dataclass(frozen=True)
class FunctionSummary:
    """One line of ``wcetfit cfg BINARY`` without --function."""

    name: str
    address: int
    blocks: int
    loops: int
    calls: int


@dataclass(frozen=True)
class BinaryInfo:
    path: str
    sha256: str
    kind: str                    # "shared-object", "pie-executable", "executable"
    stripped: bool
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class BinaryModel:
    """What :func:`wcetfit.static.binary.load_model` returns: the requested functions and (by
    default) the binary's own functions they call, directly or in tail position,
    transitively.  ``functions`` is keyed by each function's canonical name."""

    info: BinaryInfo
    functions: dict[str, FunctionModel]
    requested: tuple[str, ...]                 # canonical names, in the order asked for
    aliases: dict[str, str] = field(default_factory=dict, compare=False)
    # other names of these functions (symbol aliases, the names asked for) -> canonical

    def function(self, name_or_address: str | int) -> FunctionModel:
        """By canonical name, alias, or entry address (int or "0x..." string)."""
        if isinstance(name_or_address, str):
            if name_or_address in self.functions:
                return self.functions[name_or_address]
            if name_or_address in self.aliases:
                return self.functions[self.aliases[name_or_address]]
        try:
            addr = parse_addr(name_or_address)
        except ValueError:
            raise KeyError(name_or_address) from None
        for fn in self.functions.values():
            if fn.address == addr:
                return fn
        raise KeyError(name_or_address)

    @property
    def entry_functions(self) -> tuple[FunctionModel, ...]:
        return tuple(self.functions[n] for n in self.requested)


# --- JSON (schema wcetfit.cfg/1) --------------------------------------------------------

def _callees(model: "BinaryModel", fn: FunctionModel) -> Iterator[FunctionModel]:
    """The binary's functions ``fn`` calls (an indirect call's targets as observed)."""
    for _, callee in _calls(model, fn):
        yield callee


def _calls(model: "BinaryModel", fn: FunctionModel) -> Iterator[tuple[CallSite, FunctionModel]]:
    """Each call site of ``fn`` with each of the binary's functions it calls."""
    for call in fn.calls:
        for t in call.entries:
            try:
                yield call, model.function(t)
            except KeyError:
                continue          # an observed target the model could not load


def reached_functions(model: "BinaryModel", root: FunctionModel) -> dict[str, FunctionModel]:
    """``root`` and the binary's own functions it reaches through its calls, transitively,
    by name."""
    out = {root.name: root}
    todo = [root]
    while todo:
        for callee in _callees(model, todo.pop()):
            if callee.name not in out:
                out[callee.name] = callee
                todo.append(callee)
    return out


def calls_away(model: "BinaryModel", root: FunctionModel) -> dict[str, int]:
    """How many calls from ``root`` each function it reaches is, at the fewest (0: root).
    A tail call adds none: it leaves the caller, as a jump does (memcpy's body, a
    function of its own since mempcpy jumps into it, was listed "2 calls away" from a
    strdup that calls memcpy)."""
    import heapq

    away = {root.name: 0}
    queue = [(0, root.name)]
    while queue:
        d, name = heapq.heappop(queue)
        if d > away[name]:
            continue
        for call, callee in _calls(model, model.function(name)):
            step = d + (0 if call.tail else 1)
            if step < away.get(callee.name, step + 1):
                away[callee.name] = step
                heapq.heappush(queue, (step, callee.name))
    return away


def function_to_json(fn: FunctionModel, disassembly: bool = False) -> dict[str, Any]:
    def block_json(b: Block) -> dict[str, Any]:
        d: dict[str, Any] = {"address": hexaddr(b.address), "size": b.size,
                             "instructions": b.n_instructions}
        if disassembly:
            d["disassembly"] = [[hexaddr(i.address), i.size, i.text()] for i in b.instructions]
        return d

    return {
        "name": fn.name,
        "address": hexaddr(fn.address),
        "entry": hexaddr(fn.entry),
        "exits": [hexaddr(a) for a in fn.exits],
        "blocks": [block_json(b) for b in fn.blocks],
        "edges": [[hexaddr(s), hexaddr(d)] for s, d in fn.edges],
        "loops": [{"header": hexaddr(lp.header), "body": [hexaddr(a) for a in lp.body],
                   "back_edges": [[hexaddr(s), hexaddr(d)] for s, d in lp.back_edges],
                   "entry_edges": [[hexaddr(s), hexaddr(d)] for s, d in lp.entry_edges],
                   "parent": None if lp.parent is None else hexaddr(lp.parent),
                   "depth": lp.depth, "reducible": lp.reducible} for lp in fn.loops],
        "calls": [{"block": hexaddr(c.block), "instruction": hexaddr(c.instruction),
                   "kind": c.kind, "target": None if c.target is None else hexaddr(c.target),
                   "target_name": c.target_name, "tail": c.tail,
                   **({"observed": [{"address": None if t.address is None
                                     else hexaddr(t.address), "name": t.name,
                                     "inputs": t.inputs} for t in c.observed]}
                      if c.observed else {})} for c in fn.calls],
        "jump_tables": [{"block": hexaddr(j.block), "instruction": hexaddr(j.instruction),
                         "table_address": hexaddr(j.table_address),
                         "entry_size": j.entry_size,
                         "base": None if j.base is None else hexaddr(j.base),
                         "targets": [hexaddr(t) for t in j.targets]} for j in fn.jump_tables],
        "coexec_classes": [[hexaddr(a) for a in cls] for cls in fn.coexec_classes],
        "max_rank": fn.max_rank,
        "unresolved_jumps": [hexaddr(a) for a in fn.unresolved_jumps],
        "warnings": list(fn.warnings),
        "ifunc": None if fn.ifunc is None else {
            "symbol": fn.ifunc.symbol, "resolver": hexaddr(fn.ifunc.resolver),
            "implementation": hexaddr(fn.ifunc.implementation),
            "implementation_name": fn.ifunc.implementation_name,
            "note": fn.ifunc.describe()},
    }


def function_from_json(d: dict[str, Any]) -> FunctionModel:
    """Inverse of :func:`function_to_json` (needs ``disassembly=True`` for instructions)."""
    A = parse_addr

    def block(bd: dict[str, Any]) -> Block:
        insns = tuple(Instruction(A(a), int(s), *(t.split(" ", 1) + [""])[:2])
                      for a, s, t in bd.get("disassembly", []))
        return Block(A(bd["address"]), int(bd["size"]), insns)

    return FunctionModel(
        name=d["name"], address=A(d["address"]),
        blocks=tuple(block(b) for b in d["blocks"]),
        edges=tuple((A(s), A(t)) for s, t in d["edges"]),
        entry=A(d["entry"]), exits=tuple(A(a) for a in d["exits"]),
        loops=tuple(Loop(A(lp["header"]), tuple(A(a) for a in lp["body"]),
                         tuple((A(s), A(t)) for s, t in lp["back_edges"]),
                         tuple((A(s), A(t)) for s, t in lp["entry_edges"]),
                         None if lp["parent"] is None else A(lp["parent"]), int(lp["depth"]),
                         bool(lp.get("reducible", True)))
                    for lp in d["loops"]),
        calls=tuple(CallSite(A(c["block"]), A(c["instruction"]), c["kind"],
                             None if c["target"] is None else A(c["target"]),
                             c["target_name"], bool(c.get("tail", False)),
                             tuple(ObservedTarget(None if t["address"] is None
                                                  else A(t["address"]), t["name"],
                                                  int(t["inputs"]))
                                   for t in c.get("observed", ())))
                    for c in d["calls"]),
        jump_tables=tuple(JumpTable(A(j["block"]), A(j["instruction"]), A(j["table_address"]),
                                    int(j["entry_size"]),
                                    None if j["base"] is None else A(j["base"]),
                                    tuple(A(t) for t in j["targets"]))
                          for j in d["jump_tables"]),
        coexec_classes=tuple(tuple(A(a) for a in cls) for cls in d["coexec_classes"]),
        max_rank=int(d["max_rank"]),
        unresolved_jumps=tuple(A(a) for a in d.get("unresolved_jumps", [])),
        warnings=tuple(d.get("warnings", [])),
        ifunc=None if not d.get("ifunc") else IfuncChoice(
            d["ifunc"]["symbol"], A(d["ifunc"]["resolver"]), A(d["ifunc"]["implementation"]),
            d["ifunc"]["implementation_name"]),
    )


# Calls no correct call reaches: the stack protector's and the fortified functions'
# failures (libpng's png_sig_cmp+0x87, a call of __stack_chk_fail).
FAILURE_CALLS = frozenset({"__stack_chk_fail", "__stack_chk_fail_local", "__fortify_fail",
                           "__chk_fail"})
# Calls that end the program rather than return: an assertion that failed, a fatal error
# (nettle's base64 encoder: two `call __assert_fail` blocks were "blocks an input reaching
# them can take longer on: add such inputs", and `reach` spent its budget on them).
ABORT_CALLS = frozenset({"__assert_fail", "__assert_perror_fail", "__libc_fatal"})


def failure_exits(fn: "FunctionModel", blocks: Sequence[int]) -> dict[int, str]:
    """Of ``blocks``, those that call a failure function (:data:`FAILURE_CALLS`,
    :data:`ABORT_CALLS`), with its name."""
    wanted = set(blocks)
    out: dict[int, str] = {}
    for cs in fn.calls:
        name = (cs.target_name or "").split("@", 1)[0].split(" ")[0]
        if cs.block in wanted and name in FAILURE_CALLS | ABORT_CALLS:
            out[cs.block] = name
    return out
