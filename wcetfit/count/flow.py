"""The count run's self-checks on one input's counts: flow conservation over every
CFG reached (:func:`check_flow`) and, in trace mode, the block trace against the CFGs
(:func:`check_trace`).  Used by :class:`wcetfit.count.instrumented.Counter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from wcetfit.count.copyplan import CopyPlan
from wcetfit.errors import SelfCheckError
from wcetfit.model import FunctionModel, hexaddr

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
    # Indirect call / tail-call sites: any relocated function's entry may follow them.
    ind = {(f, blk): t for f, blk, _insn, t in getattr(plan, "indirect_sites", ())}
    for pos in np.nonzero(~is_edge)[0].tolist():
        (fa, a), (fb, b) = names[ids[pos]], names[ids[pos + 1]]
        callee = tr.calls.get((fa, a))
        tail = tr.tails.get((fa, a))
        if callee is not None and (fb, b) == (callee, models[callee].entry):
            stack.append((fa, a))
            continue
        if tail is not None and (fb, b) == (tail, models[tail].entry):
            continue
        if (fa, a) in ind and b == models[fb].entry:
            if not ind[(fa, a)]:
                stack.append((fa, a))    # a call: its return comes back to the fall-through
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
