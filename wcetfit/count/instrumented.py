"""The count run: per-input block counts from the instrumented copy, with self-checks.

Two levels:

* :class:`InstrumentedCopy` — built once per process from the loaded binary and the
  static models of the functions to relocate (see :mod:`wcetfit.count.relocate`).  It owns the
  copy's memory (code RX, counters RW, all within ±2 GiB of the binary) and the trace
  buffer.  ``reset()`` zeroes the counters, ``counts()`` reads them, ``trace()`` returns
  the block trace; ``entry(name)`` is the address of a function's copy, which the
  harness calls instead of the original.
* :func:`count_inputs` — the whole per-input procedure, through the per-prototype call
  harness (:mod:`wcetfit.timing.thunk`): for every input, count one call of the copy, run the
  original on the same argument bytes (the harness restores them before every call),
  and check

  - **differential**: same return value, same argument memory afterwards, same
    writable data of the binary afterwards (the binary's writable pages are restored
    between the two calls, so both start from the same global state);
  - **flow conservation** (:func:`check_flow`): for every function reached, the block
    counts admit a non-negative flow over the CFG edges in which the function's entry
    receives exactly its number of activations (1 for the measured function plus its
    direct internal call sites' counts) and its exits return as often.  This is the
    strongest check block counts allow: it holds iff some edge-count vector is
    consistent with the CFG (a transportation problem, decided by Hall's conditions
    precomputed per CFG, or max-flow for large components);
  - **trace** (trace mode, :func:`check_trace`): every consecutive pair of block ids is
    a CFG edge, or a call into / return from a relocated function matching a call stack;
    per-block occurrence counts equal the counters.  The trace yields exact edge counts.

  A failed check raises :class:`~wcetfit.errors.SelfCheckError` naming the function,
  the block and the input: it is a wcetfit bug, never a warning.

Crash and hang isolation are not done here: :mod:`wcetfit.isolate` runs this in a child.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from wcetfit.errors import MeasurementError, SelfCheckError
from wcetfit.loader import (PROT_EXEC, PROT_READ, PAGE, LoadedBinary, NearMemory,
                            WritableData, alloc_near, load_binary)
from wcetfit.model import FunctionModel, hexaddr
from wcetfit.count.compare import (Outcome, ReturnKind, check_same_memory,
                                   check_same_result, outcome)
from wcetfit.count.relocate import CopyPlan, plan_copy, relocatable_closure

log = logging.getLogger(__name__)

DEFAULT_TRACE_CAP = 1 << 22


class TraceOverflow(MeasurementError):
    """One input's block trace needs more entries than the configured cap."""


class Harness(Protocol):
    """What :func:`count_inputs` needs from :class:`wcetfit.timing.thunk.CallHarness`."""

    def pack(self, function: str, args: tuple) -> Any: ...
    def snapshot(self, pack: Any) -> tuple[bytes, ...]: ...
    def call(self, function: str, fn_address: int, pack: Any) -> Any:
        """Restores the pack's argument memory, then calls."""


# --- the copy in memory -------------------------------------------------------------------

class InstrumentedCopy:
    """The relocated, instrumented code of ``functions`` in this process.

    ``functions`` are the static models of every function to relocate (typically the
    measured function and its internal callees, see :func:`wcetfit.count.relocate.closure`),
    all of the binary ``binary``.  With ``trace`` every block start also appends the
    block's compact id (``plan.block_id``) to a buffer of ``trace_cap`` uint32 entries.
    """

    def __init__(self, binary: LoadedBinary, functions: Sequence[FunctionModel], *,
                 trace: bool = False, trace_cap: int = DEFAULT_TRACE_CAP) -> None:
        if trace_cap < 1:
            raise MeasurementError(f"trace_cap must be at least 1, got {trace_cap}")
        self.binary = binary
        self.models: dict[str, FunctionModel] = {f.name: f for f in functions}
        self.plan: CopyPlan = plan_copy(functions, binary.read, trace=trace)
        self.trace_enabled = trace
        self.trace_cap = trace_cap
        code_pages = (self.plan.code_size + PAGE - 1) // PAGE * PAGE
        data_pages = (self.plan.data_size + PAGE - 1) // PAGE * PAGE
        lo, hi = binary.span()
        self._mem: NearMemory | None = alloc_near(lo, hi, code_pages + data_pages)
        self.code_address = self._mem.address
        self.data_address = self._mem.address + code_pages
        try:
            code = self.plan.emit(binary.bias, self.code_address, self.data_address)
            self._mem.write(0, code)
            # W^X: the code was written while RW; from now on it is read+execute only.
            self._mem.protect(0, code_pages, PROT_READ | PROT_EXEC)
        except BaseException:
            self.close()
            raise
        n = self.plan.n_blocks
        self._counters = np.ctypeslib.as_array(
            (ctypes.c_int64 * n).from_address(self.data_address)) if n else np.zeros(0, np.int64)
        self._state = np.ctypeslib.as_array(
            (ctypes.c_uint64 * 3).from_address(self.data_address + self.plan.trace_state_offset))
        self._trace_buf = np.zeros(trace_cap if trace else 0, dtype=np.uint32)
        log.debug("instrumented copy of %s at %#x: %d blocks (%d fast counters), "
                  "%d code bytes for %d original", ", ".join(self.plan.functions),
                  self.code_address, n, self.plan.fast_counters, self.plan.code_size,
                  self.plan.original_bytes)
        self.reset()

    # -- addresses --
    def entry(self, name: str) -> int:
        """Runtime address of the copy of function ``name`` (what the harness calls)."""
        return self.code_address + self.plan.entry_offsets[name]

    def original(self, name: str) -> int:
        """Runtime address of the original function ``name``."""
        return self.binary.runtime(self.models[name].entry)

    def block_addresses(self, name: str) -> tuple[int, ...]:
        """Link-time block addresses of ``name``: the columns of ``counts()[name]``."""
        return self.plan.slots[name].blocks

    def id_names(self) -> list[tuple[str, int]]:
        """(function, block address) of every compact trace id, in id order."""
        return self.plan.id_names()

    # -- counters --
    def reset(self) -> None:
        self._counters[:] = 0
        if self.trace_enabled:
            start = self._trace_buf.ctypes.data
            self._state[0] = start
            self._state[1] = start + 4 * self.trace_cap
        else:
            # An empty buffer: any append would overflow (never happens without tracing).
            self._state[0] = self._state[1] = 0
        self._state[2] = 0

    def counts(self) -> dict[str, np.ndarray]:
        """Counts since the last reset: function → int64 array aligned with its blocks."""
        out = {}
        snapshot = self._counters.copy()
        for name in self.plan.functions:
            slot = self.plan.slots[name]
            out[name] = snapshot[slot.first_id:slot.first_id + len(slot.blocks)]
        return out

    def trace(self) -> np.ndarray:
        """The block trace since the last reset (uint32 compact ids, execution order).

        Raises TraceOverflow, naming the cap and the length needed, if entries were dropped.
        """
        if not self.trace_enabled:
            raise MeasurementError("this instrumented copy was built without trace")
        used = (int(self._state[0]) - self._trace_buf.ctypes.data) // 4
        dropped = int(self._state[2])
        if dropped:
            raise TraceOverflow(f"the block trace needs {used + dropped} entries, more than "
                                f"trace_cap = {self.trace_cap}; raise [measure] trace_cap or "
                                "use smaller inputs")
        return self._trace_buf[:used].copy()

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def __enter__(self) -> "InstrumentedCopy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- results ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class CountResult:
    """One input's counts.

    ``counts[name]`` is int64, aligned with ``FunctionModel.blocks`` of that function;
    ``activations[name]`` how often the function was entered (in the copy);
    ``trace`` (trace mode) the compact block ids in execution order (id → (function,
    block) by ``CopyPlan.id_names()``); ``edges[name][(src, dst)]`` exact edge counts
    (trace mode only; a call block's edge to its fall-through counts the returns).
    """

    index: int
    counts: Mapping[str, np.ndarray]
    activations: Mapping[str, int]
    return_value: Any = None
    trace: np.ndarray | None = None
    edges: Mapping[str, Mapping[tuple[int, int], int]] | None = None


# --- flow conservation ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Transfers:
    """Per block, the relocated function it enters by a call or tail jump (from the plan)."""

    calls: Mapping[tuple[str, int], str]        # block ends with a call to function
    tails: Mapping[tuple[str, int], str]        # block ends with an unconditional tail jump
    others: Mapping[tuple[str, int], str]       # conditional tail call, or a jump into the
                                                # middle of another function (gcc's .cold)
    inexact: frozenset[str]                     # functions entered in ways we cannot count


def _transfers(models: Mapping[str, FunctionModel], plan: CopyPlan) -> _Transfers:
    calls: dict[tuple[str, int], str] = {}
    tails: dict[tuple[str, int], str] = {}
    others: dict[tuple[str, int], str] = {}
    inexact: set[str] = set()
    for (fn, block), (kind, callee) in plan.transfers.items():
        if kind == "call":
            calls[(fn, block)] = callee
        elif kind == "tail":
            tails[(fn, block)] = callee
        else:                     # conditional tail call or a jump into another function
            others[(fn, block)] = callee
            inexact.add(callee)
    return _Transfers(calls, tails, others, frozenset(inexact))


def activations(models: Mapping[str, FunctionModel], plan: CopyPlan,
                counts: Mapping[str, np.ndarray], root: str, calls: int = 1,
                transfers: _Transfers | None = None) -> dict[str, int]:
    """How often each function was entered: ``calls`` for the root plus every executed
    call site or tail jump into it from relocated code.  (Entries by a conditional tail
    call or a jump into a function's middle are not included; such functions are
    flow-checked without a known activation count.)"""
    tr = transfers or _transfers(models, plan)
    out = {name: 0 for name in plan.functions}
    out[root] += calls
    for table in (tr.calls, tr.tails):
        for (fn, block), callee in table.items():
            slot = plan.slots[fn]
            out[callee] += int(counts[fn][slot.blocks.index(block)])
    return out


def check_flow(models: Mapping[str, FunctionModel], plan: CopyPlan,
               counts: Mapping[str, np.ndarray], entries: Mapping[str, int],
               index: int | None = None, transfers: _Transfers | None = None,
               structures: Mapping[str, "FlowStructure"] | None = None) -> None:
    """Raise SelfCheckError unless every function's counts admit a conserved flow.

    For a function with counts c and activations E: there must be a non-negative flow on
    the CFG's edges plus a virtual entry edge (carrying exactly E into the entry block)
    and virtual return edges (from the exit blocks, E in total) such that every block's
    inflow and outflow equal its count.  That is a balanced transportation problem
    (supplies: blocks' outflows and the entry; demands: blocks' inflows and the
    returns).  By Gale's theorem it is feasible iff, in every connected component of the
    bipartite supply/demand graph, the sums agree and no set X of demand nodes needs
    more than its neighbours N(X) can supply.  The structure of these conditions is
    fixed by the CFG (:class:`FlowStructure`, built once), so each input costs a few
    small matrix products.  Where a function is entered in ways we cannot count (a
    conditional tail call into it, a jump into its middle), E is unknown and the CFG is
    closed by exit → entry edges instead.
    """
    tr = transfers or _transfers(models, plan)
    where = "" if index is None else f" for input {index}"
    for name in plan.functions:
        st = structures[name] if structures is not None else FlowStructure(
            models[name], plan.slots[name].blocks, name not in tr.inexact)
        st.check(np.asarray(counts[name], dtype=np.int64), int(entries[name]), where)


# Components with at most this many nodes on their smaller side get every subset's
# Hall condition precomputed (2^k - 2 rows); larger ones go through max-flow.
_HALL_MAX = 12


class FlowStructure:
    """The flow-feasibility conditions of one function's CFG, independent of counts.

    Supply nodes: each block's outflow (index i), the entry (index n).  Demand nodes:
    each block's inflow (index i), the returns (index n).  Arcs: CFG edges, entry →
    entry block, exit blocks → returns (or exit → entry block when activations are
    unknown).  Per component: an equality row (sum of supplies = sum of demands), and
    unless the component is complete bipartite, one inequality row per subset of its
    smaller side (Hall's condition), or a max-flow when that side is large.
    """

    def __init__(self, f: FunctionModel, blocks: Sequence[int], exact: bool) -> None:
        self.function = f
        self.blocks = tuple(blocks)
        self.exact = exact
        n = len(self.blocks)
        idx = {a: i for i, a in enumerate(self.blocks)}
        arcs: set[tuple[int, int]] = {(idx[s], idx[d]) for s, d in f.edges
                                      if s in idx and d in idx}
        exits = [idx[a] for a in f.exits if a in idx]
        if f.entry not in idx:
            raise SelfCheckError(f"{f.name}: entry {hexaddr(f.entry)} is not a block")
        entry = idx[f.entry]
        if exact:
            arcs.add((n, entry))
            arcs.update((x, n) for x in exits)
        else:
            arcs.update((x, entry) for x in exits)
        parent = list(range(2 * (n + 1)))     # supply j -> j, demand j -> n + 1 + j

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for u, v in arcs:
            parent[find(u)] = find(n + 1 + v)
        comps: dict[int, tuple[list[int], list[int]]] = {}
        for j in range(n + 1):
            comps.setdefault(find(j), ([], []))[0].append(j)
            comps.setdefault(find(n + 1 + j), ([], []))[1].append(j)
        succ: dict[int, set[int]] = {}
        pred: dict[int, set[int]] = {}
        for u, v in arcs:
            succ.setdefault(u, set()).add(v)
            pred.setdefault(v, set()).add(u)
        eq_s, eq_d, le_s, le_d = [], [], [], []
        self._eq_parts: list[tuple[list[int], list[int]]] = []
        self._le_parts: list[tuple[str, list[int], list[int]]] = []
        self._maxflow: list[tuple[list[int], list[int], list[tuple[int, int]]]] = []
        width = n + 1
        for left, right in comps.values():
            row_s = np.zeros(width, np.int64)
            row_s[left] = 1
            row_d = np.zeros(width, np.int64)
            row_d[right] = 1
            eq_s.append(row_s)
            eq_d.append(row_d)
            self._eq_parts.append((left, right))
            n_arcs = sum(len(succ.get(u, ())) for u in left)
            if n_arcs == len(left) * len(right) or not left or not right:
                continue                      # complete bipartite: equal sums suffice
            small_is_right = len(right) <= len(left)
            side = right if small_is_right else left
            if len(side) > _HALL_MAX:
                comp_arcs = [(u, v) for u in left for v in succ.get(u, ())]
                self._maxflow.append((left, right, comp_arcs))
                continue
            for mask in range(1, (1 << len(side)) - 1):
                members = [side[k] for k in range(len(side)) if mask >> k & 1]
                if small_is_right:            # demand(X) <= supply(pred(X))
                    nb = sorted(set().union(*(pred.get(v, set()) for v in members)))
                    rs = np.zeros(width, np.int64)
                    rs[nb] = 1
                    rd = np.zeros(width, np.int64)
                    rd[members] = 1
                    self._le_parts.append(("in", members, nb))
                else:                         # supply(Y) <= demand(succ(Y))
                    nb = sorted(set().union(*(succ.get(u, set()) for u in members)))
                    # rows read "rd·demand - rs·supply <= 0": negate both sides here
                    rs = np.zeros(width, np.int64)
                    rs[members] = -1
                    rd = np.zeros(width, np.int64)
                    rd[nb] = -1
                    self._le_parts.append(("out", members, nb))
                le_s.append(rs)
                le_d.append(rd)
        self._eq_s = np.array(eq_s, np.int64).reshape(-1, width)
        self._eq_d = np.array(eq_d, np.int64).reshape(-1, width)
        self._le_s = np.array(le_s, np.int64).reshape(-1, width)
        self._le_d = np.array(le_d, np.int64).reshape(-1, width)

    def _label(self, j: int, side: str) -> str:
        if j < len(self.blocks):
            return hexaddr(self.blocks[j])
        return "the entry" if side == "supply" else "the returns"

    def check(self, c: np.ndarray, entries: int, where: str = "") -> None:
        name = self.function.name
        if len(c) != len(self.blocks):
            raise SelfCheckError(f"{name}: {len(c)} counts for {len(self.blocks)} blocks")
        if (c < 0).any():
            k = int(np.nonzero(c < 0)[0][0])
            raise SelfCheckError(f"flow conservation: {name} block "
                                 f"{hexaddr(self.blocks[k])} has a negative count{where}")
        e = entries if self.exact else 0
        supply = np.append(c, e)
        demand = np.append(c, e)
        lhs, rhs = self._eq_s @ supply, self._eq_d @ demand
        bad = np.nonzero(lhs != rhs)[0]
        if len(bad):
            left, right = self._eq_parts[int(bad[0])]
            raise SelfCheckError(
                f"flow conservation violated in {name}{where}: "
                f"{self._describe(right, demand, 'demand')} are entered "
                f"{int(rhs[bad[0]])} times in all, but {self._describe(left, supply, 'supply')} "
                f"leave towards them {int(lhs[bad[0]])} times")
        if len(self._le_s):
            gap = self._le_d @ demand - self._le_s @ supply
            bad = np.nonzero(gap > 0)[0]
            if len(bad):
                kind, members, nb = self._le_parts[int(bad[0])]
                if kind == "in":
                    raise SelfCheckError(
                        f"flow conservation violated in {name}{where}: "
                        f"{self._describe(members, demand, 'demand')} executed "
                        f"{int(sum(demand[members]))} times in all but the predecessors "
                        f"{self._describe(nb, supply, 'supply')} can lead there at most "
                        f"{int(sum(supply[nb]))} times")
                raise SelfCheckError(
                    f"flow conservation violated in {name}{where}: "
                    f"{self._describe(members, supply, 'supply')} executed "
                    f"{int(sum(supply[members]))} times in all but the successors "
                    f"{self._describe(nb, demand, 'demand')} are entered only "
                    f"{int(sum(demand[nb]))} times")
        for left, right, arcs in self._maxflow:
            self._maxflow_check(left, right, arcs, supply, demand, where)

    def _describe(self, nodes: Sequence[int], values: np.ndarray, side: str) -> str:
        parts = [f"{self._label(j, side)} ({int(values[j])})" for j in nodes]
        head = "block" if len(parts) == 1 and nodes[0] < len(self.blocks) else "blocks"
        return f"{head} {', '.join(parts)}"

    def _maxflow_check(self, left: list[int], right: list[int], arcs: list[tuple[int, int]],
                       supply: np.ndarray, demand: np.ndarray, where: str) -> None:
        import networkx as nx

        total = int(sum(supply[left]))
        if total == 0:
            return
        g = nx.DiGraph()
        for u in left:
            g.add_edge("S", ("L", u), capacity=int(supply[u]))
        for v in right:
            g.add_edge(("R", v), "T", capacity=int(demand[v]))
        for u, v in arcs:
            g.add_edge(("L", u), ("R", v))      # no capacity attribute = unbounded
        value, flow = nx.maximum_flow(g, "S", "T")
        if value == total:
            return
        v = next(v for v in right if flow[("R", v)]["T"] < demand[v])
        preds = sorted(u for u, w in arcs if w == v)
        raise SelfCheckError(
            f"flow conservation violated in {self.function.name}{where}: "
            f"{self._describe([v], demand, 'demand')} executed {int(demand[v])} times but "
            f"at most {flow[('R', v)]['T']} arrivals fit the counts of its predecessors "
            f"{self._describe(preds, supply, 'supply')}")


# --- trace check -------------------------------------------------------------------------------

def check_trace(models: Mapping[str, FunctionModel], plan: CopyPlan, trace: np.ndarray,
                counts: Mapping[str, np.ndarray], root: str, index: int | None = None,
                transfers: _Transfers | None = None) -> dict[str, dict[tuple[int, int], int]]:
    """Validate a block trace against the CFGs and the counters; return edge counts.

    Each consecutive pair (a, b) must be an intraprocedural CFG edge, a call from a call
    block into the callee's entry (pushing the call block), or a return from an exit
    block to the fall-through successor of the innermost pending call block, or a jump
    the plan made into another function's code (``transfers`` "other": gcc's ``.cold``
    parts, conditional tail calls).  The trace must start at the root's entry and end in
    an exit block with no call pending.
    """
    tr = transfers or _transfers(models, plan)
    where = "" if index is None else f" for input {index}"
    names = plan.id_names()
    n = len(names)
    ids = trace.astype(np.int64)
    # Counters agree with occurrences in the trace.
    occ = np.bincount(ids, minlength=n) if len(ids) else np.zeros(n, np.int64)
    for name in plan.functions:
        slot = plan.slots[name]
        mine = occ[slot.first_id:slot.first_id + len(slot.blocks)]
        if not np.array_equal(mine, counts[name]):
            k = int(np.nonzero(mine != counts[name])[0][0])
            raise SelfCheckError(f"trace check{where}: {name} block "
                                 f"{hexaddr(slot.blocks[k])} counted {int(counts[name][k])} "
                                 f"times but appears {int(mine[k])} times in the trace")
    edges: dict[str, dict[tuple[int, int], int]] = {name: {} for name in plan.functions}
    if len(ids) == 0:
        raise SelfCheckError(f"trace check{where}: the trace is empty")
    first = names[ids[0]]
    if first != (root, models[root].entry):
        raise SelfCheckError(f"trace check{where}: starts at {first[0]} "
                             f"{hexaddr(first[1])}, not at the entry of {root}")
    # Intraprocedural edges as (src_id, dst_id) codes.
    edge_codes = []
    for name in plan.functions:
        for s, d in models[name].edges:
            if (name, s) in tr.calls:
                continue                 # the call block's next block is the callee's entry
            try:
                edge_codes.append(plan.block_id(name, s) * n + plan.block_id(name, d))
            except ValueError:
                continue
    edge_codes_arr = np.unique(np.array(edge_codes, dtype=np.int64))
    pairs = ids[:-1] * n + ids[1:]
    is_edge = np.isin(pairs, edge_codes_arr)
    # Intraprocedural edge counts.
    codes, cnt = np.unique(pairs[is_edge], return_counts=True)
    for code, k in zip(codes.tolist(), cnt.tolist()):
        (fa, a), (fb, b) = names[code // n], names[code % n]
        edges[fa][(a, b)] = edges[fa].get((a, b), 0) + k
    # Calls and returns, with a stack.
    exits = {name: set(models[name].exits) for name in plan.functions}
    edge_sets = {name: set(models[name].edges) for name in plan.functions}
    stack: list[tuple[str, int]] = []
    for pos in np.nonzero(~is_edge)[0].tolist():
        (fa, a), (fb, b) = names[ids[pos]], names[ids[pos + 1]]
        callee = tr.calls.get((fa, a))
        tail = tr.tails.get((fa, a))
        if callee is not None and (fb, b) == (callee, models[callee].entry):
            stack.append((fa, a))
            continue
        if tail is not None and (fb, b) == (tail, models[tail].entry):
            continue
        if tr.others.get((fa, a)) == fb:
            continue                     # the activation goes on in another function's code
        if a in exits[fa] and stack:
            cf, cb = stack.pop()
            # The return lands on the call block's fall-through.
            if fb == cf and (cb, b) in edge_sets[cf]:
                edges[cf][(cb, b)] = edges[cf].get((cb, b), 0) + 1
                continue
            raise SelfCheckError(f"trace check{where}: {fa} returns from "
                                 f"{hexaddr(a)} to {fb} {hexaddr(b)}, but the pending call "
                                 f"is at {cf} {hexaddr(cb)}")
        raise SelfCheckError(f"trace check{where}: {fa} block {hexaddr(a)} is followed by "
                             f"{fb} block {hexaddr(b)}, which is neither a CFG edge, nor a "
                             "call, nor a return")
    last = names[ids[-1]]
    if last[1] not in exits[last[0]] or stack:
        raise SelfCheckError(f"trace check{where}: ends at {last[0]} {hexaddr(last[1])} "
                             f"with {len(stack)} call(s) pending")
    return edges


# --- the per-input procedure -------------------------------------------------------------------

class Counter:
    """Counts inputs of one measured function: an :class:`InstrumentedCopy` and its checks."""

    def __init__(self, copy: InstrumentedCopy, function: str, harness: Harness, *,
                 differential: bool = True, flow: bool = True,
                 call_name: str | None = None) -> None:
        self.copy = copy
        self.function = function
        # The prototype's name for it: the model's canonical name may differ (an IFUNC
        # symbol ``strlen`` is modelled as its selected implementation).
        self.call_name = call_name or function
        self.harness = harness
        self.differential = differential
        self.flow = flow
        self._transfers = _transfers(copy.models, copy.plan)
        self._flow = {name: FlowStructure(copy.models[name], copy.plan.slots[name].blocks,
                                          name not in self._transfers.inexact)
                      for name in copy.plan.functions}
        self._data = WritableData(copy.binary)
        self._warmed = False
        sig = getattr(harness, "signature", None)
        self._returns = ReturnKind.of(harness.ffi, sig(self.call_name).result) \
            if sig is not None and hasattr(harness, "ffi") else None

    def _warm_up(self, pack: Any) -> None:
        """One untimed, uncounted call of the original before the first comparison.

        A library may initialise state once per process on first use (json-c draws its
        hash seed from /dev/urandom): without this call the instrumented copy would run
        the initialisation and the original, after the restore of the writable pages,
        would run it again with another draw, and the two would leave different data.
        After it, both calls see initialised state.  Skipped (with a note) when an
        argument's memory cannot be restored: the call would change the input."""
        self._warmed = True
        if getattr(pack, "unrestored", ()):
            log.info("%s: no warm-up call (an argument is not restorable): state the library "
                     "initialises on first use may make the first comparison differ",
                     self.function)
            return
        self.harness.call(self.call_name, self.copy.original(self.function), pack)

    def count(self, index: int, pack: Any, fresh_pack: Any | None = None,
              start: Callable[[], None] | None = None) -> CountResult:
        """Count one call of the copy with ``pack`` (a harness ArgPack).

        Differential check: right before the copy's call this process forks; the child
        calls the original on the same bytes (argument memory, heap, the binary's data,
        its libc's malloc state: the whole process as it was) and sends back what the
        call left (:class:`~wcetfit.count.compare.Outcome`); this process runs the copy
        and compares.  Nothing is ever written back into memory, so no state the
        analyzer uses can be corrupted, and an allocating function gets the same fresh
        addresses in both.  ``fresh_pack`` is accepted for compatibility and unused (the
        child has its own copy of every argument, restorable or not).  ``start()`` is
        called right before the copy runs (the isolation layer's "about to call" notice).
        """
        h, fn, copy = self.harness, self.function, self.copy
        if self.differential and not self._warmed:
            self._warm_up(pack)
        reference = self._fork_original(pack) if self.differential else None
        copy.reset()
        if start is not None:
            start()
        ret = h.call(self.call_name, copy.entry(fn), pack)
        counts = copy.counts()
        trace = copy.trace() if copy.trace_enabled else None
        if reference is not None:
            mine = outcome(self._returns, ret, pack, h.snapshot(pack), self._data.save())
            theirs = _collect(*reference, index, fn)
            check_same_result(self._returns, mine, theirs, index, fn)
            check_same_memory(mine, theirs, self._data.ranges, copy.binary, index, fn)
        acts = activations(copy.models, copy.plan, counts, fn, 1, self._transfers)
        edges = None
        if self.flow:
            check_flow(copy.models, copy.plan, counts, acts, index, self._transfers,
                       self._flow)
        if trace is not None:
            edges = check_trace(copy.models, copy.plan, trace, counts, fn, index,
                                self._transfers)
        return CountResult(index=index, counts=counts, activations=acts, return_value=ret,
                           trace=trace, edges=edges)


    def _fork_original(self, pack: Any) -> tuple[int, int]:
        """Start the original's call in a forked child; (pid, read end of its pipe)."""
        h = self.harness
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                    # the child: never returns
            code = 0
            try:
                os.close(r)
                # Die with the counting process (the isolation layer kills it on a hang).
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                ret = h.call(self.call_name, self.copy.original(self.function), pack)
                msg = ("ok", outcome(self._returns, ret, pack, h.snapshot(pack),
                                     self._data.save()))
            except BaseException as exc:  # noqa: BLE001 - reported by the parent
                msg = ("error", f"{type(exc).__name__}: {exc}")
            try:
                data = pickle.dumps(msg)
                with os.fdopen(w, "wb") as fh:
                    fh.write(data)
            except BaseException:  # noqa: BLE001
                code = 70
            os._exit(code)
        os.close(w)
        return pid, r


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_PR_SET_PDEATHSIG = 1


def _collect(pid: int, r: int, index: int, fn: str) -> Outcome:
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise SelfCheckError(f"differential check for input {index}: the original {fn} died "
                             f"of {signal.Signals(sig).name} where the instrumented copy "
                             "returned")
    if not data:
        raise SelfCheckError(f"differential check for input {index}: the original {fn}'s "
                             f"process exited (status {status:#x}) without a result")
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise SelfCheckError(f"differential check for input {index}: calling the original "
                             f"{fn} failed: {value}")
    return value


def count_inputs(model: Any, functions: Sequence[str], harness: Harness,
                 inputs: Iterable[tuple[int, Callable[[], tuple]]] | Callable[[int], tuple],
                 indices: Sequence[int] | None = None, *, binary: LoadedBinary | None = None,
                 trace: bool = False, trace_cap: int = DEFAULT_TRACE_CAP,
                 differential: bool = True, uncounted: Sequence[str] = ()
                 ) -> Iterator[CountResult]:
    """Count every input of every measured function; yields one CountResult per
    (function, input), in order.

    ``model`` is a :class:`wcetfit.model.BinaryModel` (``.info.path``, ``.functions``:
    name → FunctionModel, callees included); ``functions`` are names or ``0x…`` entry
    addresses of the measured functions.  ``inputs`` is either a callable ``make_args(index)
    -> args`` (used with ``indices``) or an iterable of ``(index, make_args)`` pairs where
    ``make_args()`` builds the arguments.  The harness restores argument memory before
    every call, so the original (differential check) runs on the same bytes; only when
    a pointer argument is not restorable is ``make_args()`` called a second time for an
    independent copy (it must then be deterministic per index, as
    wcetfit.target.generate_input is).  One
    :class:`InstrumentedCopy` per measured function is built first (relocation errors
    surface before any input runs).  ``uncounted`` names callees to leave as original
    code (run, not counted), e.g. one that the copy refuses to relocate.
    """
    if binary is None:
        info = getattr(model, "info", None)
        binary = load_binary(info.path if info is not None else model.path)
    if callable(inputs):
        if indices is None:
            raise MeasurementError("count_inputs: a make_args callable needs indices")
        make = inputs
        pairs: list[tuple[int, Callable[[], tuple]]] = [
            (i, (lambda i=i: make(i))) for i in indices]
    else:
        pairs = list(inputs)
    counters = []
    for requested in functions:
        fn = model.function(requested).name if hasattr(model, "function") else requested
        fns, skipped = relocatable_closure(model.functions, [fn], binary.read, trace=trace,
                                           uncounted=uncounted)
        for name, why in skipped.items():
            log.warning("%s: callee %s runs as original code, uncounted: %s", fn, name, why)
        copy = InstrumentedCopy(binary, fns, trace=trace, trace_cap=trace_cap)
        names = getattr(harness, "functions", ())
        counters.append(Counter(copy, fn, harness, differential=differential,
                                call_name=requested if requested in names else fn))
    try:
        for counter in counters:
            for index, make_args in pairs:
                pack = harness.pack(counter.call_name, make_args())
                fresh = None
                if differential and getattr(pack, "unrestored", ()):
                    fresh = harness.pack(counter.call_name, make_args())
                yield counter.count(index, pack, fresh)
    finally:
        for counter in counters:
            counter.copy.close()
