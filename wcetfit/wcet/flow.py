"""The flow graph of one function: the variables of its linear programs.

One variable per CFG edge, one for the virtual edge calling the function and one per exit
returning from it; plus the cycles no natural loop covers (irreducible flow).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import FunctionModel, hexaddr

log = logging.getLogger(__name__)

SOURCE = "source"   # the virtual block calling the function
SINK = "sink"       # the virtual block every exit returns to


class Flow:
    """Edge variables of a function: its CFG edges, one source edge into the entry, and one
    sink edge out of every exit (and out of every dead end, which must be a way out)."""

    def __init__(self, fn: FunctionModel):
        self.fn = fn
        addrs = fn.block_addresses
        self.blocks = addrs
        self.index = {a: i for i, a in enumerate(addrs)}
        if fn.entry not in self.index:
            raise WcetError(f"{fn.name}: entry {hexaddr(fn.entry)} is not one of its blocks")
        seen: set[tuple[int, int]] = set()
        edges: list[tuple[Any, Any]] = []
        for s, d in fn.edges:
            if s not in self.index or d not in self.index:
                bad = s if s not in self.index else d
                raise WcetError(f"{fn.name}: edge {hexaddr(s)}->{hexaddr(d)} names "
                                f"{hexaddr(bad)}, which is not a block of the function")
            if (s, d) not in seen:
                seen.add((s, d))
                edges.append((s, d))
        self.n_cfg = len(edges)
        self.source_var = len(edges)
        edges.append((SOURCE, fn.entry))
        has_succ = {s for s, _ in fn.edges}
        self.dead_ends = tuple(a for a in addrs if a not in has_succ and a not in fn.exits)
        if self.dead_ends:
            # A block with no successor that the model does not call an exit (a call that
            # never returns, an unresolved jump): flow must be able to leave it, or the
            # program would silently forbid the paths through it.
            log.info("%s: blocks without successors treated as exits: %s", fn.name,
                     ", ".join(hexaddr(a) for a in self.dead_ends))
        for lp in fn.loops:
            if lp.header not in self.index:
                raise WcetError(f"{fn.name}: loop header {hexaddr(lp.header)} is not one of "
                                f"its blocks")
        for a in tuple(fn.exits) + self.dead_ends:
            if a not in self.index:
                raise WcetError(f"{fn.name}: exit {hexaddr(a)} is not one of its blocks")
            edges.append((a, SINK))
        self.edges = edges
        self.var = {e: i for i, e in enumerate(edges)}
        self.ins: dict[int, list[int]] = {a: [] for a in addrs}
        self.outs: dict[int, list[int]] = {a: [] for a in addrs}
        for i, (s, d) in enumerate(edges):
            if d != SINK:
                self.ins[d].append(i)
            if s != SOURCE:
                self.outs[s].append(i)
        self.succ: dict[int, list[int]] = {a: [] for a in addrs}
        for s, d in edges[: self.n_cfg]:
            self.succ[s].append(d)

    def reachable(self, forbidden: Iterable[int] = ()) -> set[int]:
        banned = set(forbidden)
        if self.fn.entry in banned:
            return set()
        seen = {self.fn.entry}
        stack = [self.fn.entry]
        while stack:
            b = stack.pop()
            for d in self.succ[b]:
                if d not in seen and d not in banned:
                    seen.add(d)
                    stack.append(d)
        return seen

    def loop_vars(self, lp) -> tuple[list[int], list[int]]:
        """(back-edge variables, entry-edge variables) of a loop.  Entry edges are the
        header's in-edges from outside the body, plus the source edge when the header is
        the function's entry."""
        body = set(lp.body)
        back, entry = [], []
        for i in self.ins[lp.header]:
            s, _ = self.edges[i]
            if s == SOURCE or s not in body:
                entry.append(i)
            else:
                back.append(i)
        if not getattr(lp, "reducible", True):
            # An irreducible loop is also entered at blocks other than its header: every
            # edge from outside the body into it is an entry (else the bound would forbid
            # real paths and be unsafe).
            entry = [i for a in body for i in self.ins.get(a, ())
                     if self.edges[i][0] == SOURCE or self.edges[i][0] not in body]
        return back, entry

    def conservation_matrix(self) -> np.ndarray:
        """Rows: blocks; Σ in − Σ out = 0."""
        A = np.zeros((len(self.blocks), len(self.edges)))
        for a, r in self.index.items():
            for i in self.ins[a]:
                A[r, i] += 1.0
            for i in self.outs[a]:
                A[r, i] -= 1.0
        return A

    def topo_order(self, blocks: set[int]) -> list[int]:
        """Blocks in an order along the flow: topological after removing back edges
        (Kahn); stable by address among ties."""
        back = {e for lp in self.fn.loops for e in lp.back_edges}
        indeg = {b: 0 for b in blocks}
        for s, d in self.edges[: self.n_cfg]:
            if s in blocks and d in blocks and (s, d) not in back:
                indeg[d] += 1
        ready = sorted(b for b, k in indeg.items() if k == 0)
        order: list[int] = []
        while ready:
            b = ready.pop(0)
            order.append(b)
            for d in sorted(self.succ[b]):
                if d in blocks and (b, d) not in back:
                    indeg[d] -= 1
                    if indeg[d] == 0:
                        ready.append(d)
            ready.sort()
        rest = sorted(blocks - set(order))   # only on cycles that are not natural loops
        return order + rest


def irreducible_blocks(flow: Flow, blocks: set[int]) -> list[int]:
    """Blocks on cycles that use no natural loop's back edge (irreducible flow)."""
    import networkx as nx

    back = {e for lp in flow.fn.loops for e in lp.back_edges}
    g = nx.DiGraph()
    g.add_nodes_from(blocks)
    g.add_edges_from((s, d) for s in blocks for d in flow.succ[s]
                     if d in blocks and (s, d) not in back)
    out: list[int] = []
    for comp in nx.strongly_connected_components(g):
        if len(comp) > 1 or any(g.has_edge(a, a) for a in comp):
            out.extend(comp)
    return sorted(out)


def cycle_outside_loops(flow: Flow, blocks: set[int]) -> list[int] | None:
    """A cycle among ``blocks`` that uses no back edge of a natural loop, if any.  Loop
    bounds only constrain natural loops; such a cycle (irreducible flow) would be
    unbounded."""
    back = {e for lp in flow.fn.loops for e in lp.back_edges}
    color: dict[int, int] = {}
    for start in sorted(blocks):
        if start in color:
            continue
        stack: list[tuple[int, Iterable[int]]] = [(start, iter(flow.succ[start]))]
        color[start] = 1
        path = [start]
        while stack:
            node, it = stack[-1]
            advanced = False
            for d in it:
                if d not in blocks or (node, d) in back:
                    continue
                if color.get(d) == 1:
                    return path[path.index(d):]
                if d not in color:
                    color[d] = 1
                    stack.append((d, iter(flow.succ[d])))
                    path.append(d)
                    advanced = True
                    break
            if not advanced:
                color[node] = 2
                stack.pop()
                path.pop()
    return None
