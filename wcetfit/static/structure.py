"""Graph algorithms on a function's control-flow graph, on plain data only.

Nodes are block addresses (ints), edges ``(src, dst)`` pairs, ``entry`` the block a call
enters and ``exits`` the blocks a call can leave from.  Everything here is deterministic.

Counting model
--------------
One call of the function is a walk ``entry -> ... -> exit``.  Closing the graph with a
virtual node X (every exit -> X, and X -> entry) turns every call into a cycle through the
closing edge X->entry, whose flow is the number of calls: the overhead (epsilon) column of
the count matrix.  Over any set of calls the edge counts form a circulation of this closed
graph, and a block's count is the sum of its in-edges' counts.  When every block is
reachable from the entry and reaches an exit (the "live" blocks), the non-negative
circulations span the whole cycle space, so the feasible count vectors span exactly
``{(H f, f_close) : f in cycle space}`` (H: in-incidence).  Two facts follow.

*Rank bound.*  Split each block v into v_in -> v_out (the internal edge carries the count
of v).  Circulations that are zero on every internal edge and on the closing edge live on
the bipartite graph B whose edges join u_out to v_in for every CFG edge u->v (and e_out to X
for every exit e); their space has dimension ``|E_B| - |V_B| + c(B)``.  Subtracting it from
the closed graph's cyclomatic number leaves

    max_rank = n_live + 2 - c(B)

with c(B) the number of connected components of B (isolated nodes count).  Each component
K of B is one linear relation (flow out of K's out-copies = flow into its in-copies), and
these relations are all there is: :func:`count_space_constraints` returns them, so the
structural count space is their null space, of dimension ``max_rank``.  This is the
E - V + 2 bound of DESIGN.md made exact (it counts a relation only once however many edges
imply it).

*Co-execution classes.*  Two blocks execute equally often in every execution iff their
internal edges are cycle-equivalent in the closed, split graph: every directed cycle
contains both or neither (in a strongly connected graph directed and undirected cycle
equivalence coincide, Johnson-Pearson-Pingali 1994).  Dominance plus post-dominance is not
enough: a loop header is dominated and post-dominated by the entry yet runs more often.
We decide it by fundamental-cycle signatures: take any spanning tree of the (undirected)
closed graph, give every non-tree edge a random weight; a fundamental cycle's coefficient
on a tree edge is +-1 when the tree path crosses it, and a block's count in that cycle is
the sum over its in-edges.  A block's signature is the weighted sum of its counts over all
fundamental cycles (computed in O(E) with subtree sums).  Two blocks have equal counts in
every feasible vector iff their rows over the fundamental cycles are equal, and unequal
rows collide with probability <= 1/p per weight set; we use two independent sets modulo
the prime p = 2^61 - 1, so a wrong merge has probability below 2^-120 per pair.  This is
simpler than the O(E) bracket-set algorithm of Johnson-Pearson-Pingali and just as
linear; the tests check it against brute-force path enumeration.

Loops
-----
:func:`loop_forest` gives the loops: on reducible graphs exactly the natural loops (back
edges to a dominator, merged per header; :func:`natural_loops` is the textbook version,
kept as the tests' reference), and on irreducible ones (gcc's jump threading makes them
from state machines) loops with several entries, marked ``reducible=False``, so that
every cycle of the CFG crosses a back edge of some loop and a bound per loop bounds all
flow (what IPET needs).
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from wcetfit.model import Loop

if TYPE_CHECKING:  # numpy only for the count-space functions; keep import light
    import numpy as np

    from wcetfit.model import FunctionModel

_P = (1 << 61) - 1          # Mersenne prime modulus of the signatures
_SEED = 0x5EED_C0E7         # fixed: results are reproducible from run to run


@dataclass(frozen=True)
class Structure:
    """Everything :func:`analyze` derives from the graph alone."""

    loops: tuple[Loop, ...]
    coexec_classes: tuple[tuple[int, ...], ...]   # a partition of all blocks
    max_rank: int
    unreachable: tuple[int, ...]                  # not reachable from the entry
    dead_ends: tuple[int, ...]                    # reachable, but never reach an exit
    irreducible: tuple[int, ...]                  # headers of the irreducible loops
    once_per_call: tuple[int, ...]                # blocks executed exactly once per call


# --- basic graph helpers ----------------------------------------------------------------

def _adjacency(nodes: Iterable[int], edges: Iterable[tuple[int, int]]):
    succ: dict[int, list[int]] = {n: [] for n in nodes}
    pred: dict[int, list[int]] = {n: [] for n in succ}
    for s, d in dict.fromkeys(edges):          # dedupe, keep order
        if s in succ and d in succ:
            succ[s].append(d)
            pred[d].append(s)
    for lst in succ.values():
        lst.sort()
    for lst in pred.values():
        lst.sort()
    return succ, pred


def reachable(succ: dict[int, list[int]], starts: Iterable[int]) -> set[int]:
    seen = set()
    todo = [s for s in starts if s in succ]
    seen.update(todo)
    while todo:
        n = todo.pop()
        for m in succ[n]:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _dfs(succ: dict[int, list[int]], entry: int):
    """Iterative DFS: (reverse postorder, retreating edges u->v with v on the stack)."""
    post: list[int] = []
    retreating: list[tuple[int, int]] = []
    on_stack = {entry}
    seen = {entry}
    stack = [(entry, iter(succ[entry]))]
    while stack:
        node, it = stack[-1]
        for m in it:
            if m not in seen:
                seen.add(m)
                on_stack.add(m)
                stack.append((m, iter(succ[m])))
                break
            if m in on_stack:
                retreating.append((node, m))
        else:
            stack.pop()
            on_stack.discard(node)
            post.append(node)
    post.reverse()
    return post, retreating


def dominators(succ: dict[int, list[int]], pred: dict[int, list[int]], entry: int) -> dict[int, int]:
    """Immediate dominators of the nodes reachable from ``entry`` (entry maps to itself).

    Cooper, Harvey & Kennedy, "A Simple, Fast Dominance Algorithm" (2001): iterate the
    intersection of predecessors' dominator-tree paths in reverse postorder.
    """
    rpo, _ = _dfs(succ, entry)
    order = {n: i for i, n in enumerate(rpo)}
    idom: dict[int, int] = {entry: entry}

    def intersect(a: int, b: int) -> int:
        while a != b:
            while order[a] > order[b]:
                a = idom[a]
            while order[b] > order[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for n in rpo[1:]:
            new = None
            for p in pred[n]:
                if p in idom:
                    new = p if new is None else intersect(p, new)
            if new is not None and idom.get(n) != new:
                idom[n] = new
                changed = True
    return idom


def dominates(idom: dict[int, int], a: int, b: int) -> bool:
    """Does ``a`` dominate ``b`` (both reachable)?"""
    while True:
        if a == b:
            return True
        nxt = idom[b]
        if nxt == b:
            return False
        b = nxt


# --- loops ------------------------------------------------------------------------------

def natural_loops(succ, pred, entry: int) -> tuple[tuple[Loop, ...], tuple[tuple[int, int], ...]]:
    """Natural loops (back edges merged per header) with nesting, and the retreating edges
    that are not back edges (irreducible flow, which natural loops leave unbounded).  The
    model uses :func:`loop_forest`; this is the reference it is tested against."""
    idom = dominators(succ, pred, entry)
    _, retreating = _dfs(succ, entry)
    back: dict[int, list[tuple[int, int]]] = defaultdict(list)
    irreducible = []
    for u, h in retreating:
        if dominates(idom, h, u):
            back[h].append((u, h))
        else:
            irreducible.append((u, h))
    # Every back edge is retreating in any DFS, so this finds them all.
    bodies: dict[int, frozenset[int]] = {}
    for h, bes in back.items():
        body = {h}
        todo = [u for u, _ in bes if u != h]
        body.update(todo)
        while todo:
            n = todo.pop()
            for p in pred[n]:
                if p not in body and p in idom:
                    body.add(p)
                    todo.append(p)
        bodies[h] = frozenset(body)
    headers = sorted(bodies)
    parent: dict[int, int | None] = {}
    for h in headers:
        enclosing = [g for g in headers if g != h and h in bodies[g]]
        # Natural loops with distinct headers are nested or disjoint: the innermost
        # enclosing loop is the smallest one containing this header.
        parent[h] = min(enclosing, key=lambda g: len(bodies[g])) if enclosing else None

    def depth(h: int) -> int:
        d = 1
        while parent[h] is not None:
            h = parent[h]  # type: ignore[assignment]
            d += 1
        return d

    loops = []
    for h in headers:
        body = bodies[h]
        entries = tuple(sorted((p, h) for p in pred[h] if p not in body and p in idom))
        loops.append(Loop(header=h, body=tuple(sorted(body)),
                          back_edges=tuple(sorted(back[h])), entry_edges=entries,
                          parent=parent[h], depth=depth(h)))
    return tuple(loops), tuple(sorted(irreducible))


def _sccs(nodes: set[int], succ) -> list[list[int]]:
    """Strongly connected components of the subgraph induced by ``nodes`` (iterative
    Tarjan), each sorted; only those containing a cycle (size > 1, or a self-loop)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter([m for m in succ[root] if m in nodes]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter([m for m in succ[w] if m in nodes])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in succ[v]:
                        out.append(sorted(comp))
    return out


def loop_forest(succ, pred, entry: int) -> tuple[Loop, ...]:
    """Loops of the blocks reachable from ``entry``, nested, covering every cycle.

    Each non-trivial strongly connected component is a loop; its header is its only entry
    block (then it is exactly the natural loop of that header, all its back edges merged)
    or, for an irreducible component entered at several blocks, the entry first reached
    from the function's entry (smallest DFS preorder).  Removing the header and
    repeating inside the component gives the nested loops (Havlak 1997 / Ramalingam 2002
    loop nesting forest).  Every cycle passes through the header of the innermost loop
    containing it, so bounding back edges bounds all flow.
    """
    reach = reachable(succ, [entry])
    preorder = {n: i for i, n in enumerate(_preorder(succ, entry))}
    loops: list[Loop] = []
    todo: list[tuple[set[int], int | None, int]] = [(reach, None, 1)]
    while todo:
        region, parent, depth = todo.pop()
        for comp in _sccs(region, succ):
            body = set(comp)
            entries = {v for v in comp if v == entry or any(p not in body for p in pred[v] if p in reach)}
            header = min(entries or body, key=lambda v: preorder[v])
            back = tuple(sorted((u, header) for u in pred[header] if u in body))
            into = tuple(sorted((p, v) for v in comp for p in pred[v] if p in reach and p not in body))
            loops.append(Loop(header=header, body=tuple(comp), back_edges=back, entry_edges=into,
                              parent=parent, depth=depth, reducible=len(entries) <= 1))
            todo.append((body - {header}, header, depth + 1))
    loops.sort(key=lambda lp: (lp.header, lp.depth))
    return tuple(loops)


def _preorder(succ, entry: int) -> list[int]:
    order = []
    seen = {entry}
    stack = [entry]
    while stack:
        n = stack.pop()
        order.append(n)
        for m in reversed(succ[n]):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return order


# --- counts: live part, rank, classes -------------------------------------------------

def live_blocks(succ, pred, entry: int, exits: Iterable[int]) -> set[int]:
    """Blocks that can appear in a completed call: reachable, and reaching an exit."""
    fwd = reachable(succ, [entry])
    bwd = reachable(pred, [e for e in exits if e in fwd])
    return fwd & bwd


def _components(live: set[int], succ, exits: Iterable[int]):
    """Connected components of B.  Returns (component id per B node, node list) where B's
    nodes are ("o", v) and ("i", v) for each live block v, and "X" for the virtual exit."""
    order = sorted(live)
    nodes: list[object] = ["X"] + [("o", v) for v in order] + [("i", v) for v in order]
    index = {n: i for i, n in enumerate(nodes)}
    parent = list(range(len(nodes)))

    def find(a: int) -> int:
        root = a
        while parent[root] != root:
            root = parent[root]
        while parent[a] != root:
            parent[a], a = root, parent[a]
        return root

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    for u in order:
        for v in succ[u]:
            if v in live:
                union(index[("o", u)], index[("i", v)])
    for e in exits:
        if e in live:
            union(index[("o", e)], 0)
    return [find(i) for i in range(len(nodes))], nodes


def rank_bound(live: set[int], succ, exits: Iterable[int]) -> int:
    """``n_live + 2 - c(B)`` (module doc); 1 (the calls alone) when nothing is live."""
    if not live:
        return 1
    comp, _ = _components(live, succ, exits)
    return len(live) + 2 - len(set(comp))


def _signatures(live: set[int], succ, entry: int, exits: Iterable[int], seed: int):
    """Two cycle-space signatures modulo _P per live block, and those of X (module doc)."""
    rng = random.Random(seed)
    order = sorted(live)
    idx = {v: i + 1 for i, v in enumerate(order)}       # node 0 is X
    nn = len(order) + 1
    # Closed graph: live edges, exit -> X, X -> entry.
    edges: list[tuple[int, int]] = [(idx[u], idx[v]) for u in order for v in succ[u] if v in live]
    edges += [(idx[e], 0) for e in sorted(set(exits) & live)]
    edges.append((0, idx[entry]))
    adj: list[list[int]] = [[] for _ in range(nn)]       # undirected incidence
    for i, (a, b) in enumerate(edges):
        if a != b:
            adj[a].append(i)
            adj[b].append(i)
    # BFS spanning tree from X (every live node is connected to X).
    tree_edge = [-1] * nn
    visit = [0]
    seen = [False] * nn
    seen[0] = True
    q = deque([0])
    while q:
        n = q.popleft()
        for i in adj[n]:
            a, b = edges[i]
            m = b if a == n else a
            if not seen[m]:
                seen[m] = True
                tree_edge[m] = i
                visit.append(m)
                q.append(m)
    in_tree = set(tree_edge[1:])
    K = 2
    sig_edge: list[tuple[int, ...]] = [()] * len(edges)
    # D(y): weights of non-tree edges ending at y minus those starting at y.
    D = [[0] * K for _ in range(nn)]
    for i, (a, b) in enumerate(edges):
        if i in in_tree:
            continue
        w = tuple(rng.randrange(1, _P) for _ in range(K))
        sig_edge[i] = w
        for k in range(K):
            D[b][k] = (D[b][k] + w[k]) % _P
            D[a][k] = (D[a][k] - w[k]) % _P
    # Subtree sums, children before parents; a tree edge's count in the fundamental
    # cycles is +S(child) oriented child -> parent, -S(child) the other way.
    S = D
    for n in reversed(visit[1:]):
        i = tree_edge[n]
        a, b = edges[i]
        p = b if a == n else a
        sig_edge[i] = tuple(S[n]) if a == n else tuple((-s) % _P for s in S[n])
        for k in range(K):
            S[p][k] = (S[p][k] + S[n][k]) % _P
    sig = [[0] * K for _ in range(nn)]
    for i, (a, b) in enumerate(edges):
        for k in range(K):
            sig[b][k] = (sig[b][k] + sig_edge[i][k]) % _P
    out = {v: tuple(sig[idx[v]]) for v in order}
    return out, tuple(sig[0])


def analyze(nodes: Sequence[int], edges: Iterable[tuple[int, int]], entry: int,
            exits: Iterable[int]) -> Structure:
    """Loops, co-execution classes and the rank bound of one function's CFG."""
    nodes = sorted(set(nodes))
    if entry not in set(nodes):
        raise ValueError(f"entry {entry:#x} is not a block")
    succ, pred = _adjacency(nodes, edges)
    exits = sorted(set(exits) & set(nodes))
    fwd = reachable(succ, [entry])
    live = live_blocks(succ, pred, entry, exits)
    loops = loop_forest(succ, pred, entry)

    classes: list[tuple[int, ...]] = []
    once: tuple[int, ...] = ()
    if live:
        sig, sig_x = _signatures(live, succ, entry, exits, _SEED)
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for v in sorted(live):
            groups[sig[v]].append(v)
        classes = [tuple(g) for g in groups.values()]
        once = tuple(groups.get(sig_x, ()))
    classes += [(v,) for v in nodes if v not in live]
    classes.sort()
    return Structure(
        loops=loops,
        coexec_classes=tuple(classes),
        max_rank=rank_bound(live, succ, exits),
        unreachable=tuple(v for v in nodes if v not in fwd),
        dead_ends=tuple(v for v in nodes if v in fwd and v not in live),
        irreducible=tuple(lp.header for lp in loops if not lp.reducible),
        once_per_call=once,
    )


# --- count space as matrices (for fit and IPET) ----------------------------------------

def count_space_constraints(fn: "FunctionModel") -> "np.ndarray":
    """Integer matrix C [k, n_blocks + 1] with C @ (counts, calls) = 0 for every feasible
    count vector: one row per component of B (see module doc), plus ``x_v = 0`` for blocks
    that cannot be part of a completed call.  Columns follow ``fn.blocks``; the last
    column is the number of calls (the epsilon column).  Its null space has dimension
    ``fn.max_rank``; rows may be redundant.
    """
    import numpy as np

    addrs = [b.address for b in fn.blocks]
    col = {a: i for i, a in enumerate(addrs)}
    n = len(addrs)
    succ, pred = _adjacency(addrs, fn.edges)
    live = live_blocks(succ, pred, fn.entry, fn.exits)
    rows: list[np.ndarray] = []
    if live:
        cid, bnodes = _components(live, succ, fn.exits)
        comp: dict[int, np.ndarray] = {}
        for c, node in zip(cid, bnodes):
            r = comp.setdefault(c, np.zeros(n + 1, dtype=np.int64))
            if node == "X":
                r[n] -= 1
            elif node[0] == "o":
                r[col[node[1]]] += 1
            else:
                r[col[node[1]]] -= 1
                if node[1] == fn.entry:
                    r[n] += 1
        rows += [r for r in comp.values() if r.any()]
    for a in addrs:
        if a not in live:
            r = np.zeros(n + 1, dtype=np.int64)
            r[col[a]] = 1
            rows.append(r)
    if not live:                      # no completed call at all: nothing is feasible but 0
        r = np.zeros(n + 1, dtype=np.int64)
        r[n] = 1
        rows.append(r)
    return np.array(rows, dtype=np.int64).reshape(len(rows), n + 1)


def count_space_basis(fn: "FunctionModel", epsilon: bool = False) -> "np.ndarray":
    """Orthonormal basis (rows) of the structural count space.

    ``epsilon=False``: shape [dim, n_blocks], the span of the block-count vectors alone
    (dim is ``max_rank`` or ``max_rank - 1``: one less when the calls column is itself a
    combination of block counts, e.g. the entry is not a loop header).
    ``epsilon=True``: shape [max_rank, n_blocks + 1], last column the calls (epsilon).
    An observed count matrix whose rank is below the dimension lacks input variety; its
    row space always lies inside this one (a self-check).
    """
    import numpy as np
    from scipy.linalg import null_space, orth

    C = count_space_constraints(fn).astype(float)
    n = len(fn.blocks)
    N = null_space(C) if C.shape[0] else np.eye(n + 1)   # [n+1, max_rank]
    if epsilon:
        return N.T.copy()
    if N.shape[1] == 0:
        return np.zeros((0, n))
    return orth(N[:n, :]).T.copy()


@dataclass(frozen=True)
class FlowNetwork:
    """Edge-flow formulation for IPET: ``counts = inflow @ f`` and ``inflow @ f ==
    outflow @ f`` for each block, ``f[start_edge] == calls``.  Edge ``(None, entry)`` is the
    call entering, ``(b, None)`` leaves the function from exit block ``b``."""

    blocks: tuple[int, ...]
    edges: tuple[tuple[int | None, int | None], ...]
    inflow: "np.ndarray"       # [n_blocks, n_edges] 0/1
    outflow: "np.ndarray"      # [n_blocks, n_edges] 0/1
    start_edge: int
    exit_edges: tuple[int, ...]


def edge_flow_constraints(fn: "FunctionModel") -> FlowNetwork:
    import numpy as np

    blocks = tuple(b.address for b in fn.blocks)
    row = {a: i for i, a in enumerate(blocks)}
    edges: list[tuple[int | None, int | None]] = [(None, fn.entry)]
    edges += list(dict.fromkeys((s, d) for s, d in fn.edges if s in row and d in row))
    exit_idx = []
    for e in fn.exits:
        exit_idx.append(len(edges))
        edges.append((e, None))
    inflow = np.zeros((len(blocks), len(edges)), dtype=np.int64)
    outflow = np.zeros_like(inflow)
    for j, (s, d) in enumerate(edges):
        if d is not None:
            inflow[row[d], j] = 1
        if s is not None:
            outflow[row[s], j] = 1
    return FlowNetwork(blocks, tuple(edges), inflow, outflow, 0, tuple(exit_idx))
