"""Co-execution classes, rank bound, loops: checked against brute-force path enumeration.

The independent truth is the definition itself: enumerate executions (walks entry -> exit,
each edge used at most K times), take their block-count vectors, and see which blocks
always share a count and what rank the count matrix (with the ones column) has.  K = 2 is
enough: for any simple cycle C there is a walk P touching it and P + C, whose difference
is C, and the simple cycles span the cycle space.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from wcetfit.model import Block, FunctionModel
from wcetfit.static.structure import (analyze, count_space_basis, count_space_constraints,
                               edge_flow_constraints)

K = 2


# --- brute force ------------------------------------------------------------------------

def enumerate_runs(nodes, edges, entry, exits, k=K, limit=300_000):
    """Count vectors (per node, sorted order) and edge-use vectors of every bounded walk."""
    nodes = sorted(nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    edges = sorted(set(edges))
    epos = {e: i for i, e in enumerate(edges)}
    succ = {n: [] for n in nodes}
    for s, d in edges:
        succ[s].append(d)
    exits = set(exits)
    runs = []
    counts = [0] * len(nodes)
    uses = [0] * len(edges)

    def walk(n):
        if len(runs) >= limit:
            return
        counts[pos[n]] += 1
        if n in exits:
            runs.append((tuple(counts), tuple(uses), n))
        for m in succ[n]:
            j = epos[(n, m)]
            if uses[j] < k:
                uses[j] += 1
                walk(m)
                uses[j] -= 1
        counts[pos[n]] -= 1

    walk(entry)
    assert len(runs) < limit, "graph too large for brute force"
    return nodes, edges, runs


def brute_classes(nodes, runs):
    """Partition of the blocks that occur in some run by 'equal count in every run'.
    Blocks in no run at all are singletons (they are not live)."""
    if not runs:
        return sorted((n,) for n in nodes)
    M = np.array([r[0] for r in runs])
    cols = {}
    for j, n in enumerate(nodes):
        if M[:, j].any():
            cols.setdefault(tuple(M[:, j]), []).append(n)
        else:
            cols[("dead", n)] = [n]
    return sorted(tuple(v) for v in cols.values())


def brute_rank(runs):
    M = np.array([list(r[0]) + [1] for r in runs], dtype=float)
    return int(np.linalg.matrix_rank(M))


def check_against_brute_force(nodes, edges, entry, exits):
    nodes_s, edges_s, runs = enumerate_runs(nodes, edges, entry, exits)
    st = analyze(nodes, edges, entry, exits)
    assert sorted(st.coexec_classes) == brute_classes(nodes_s, runs), (nodes, edges, entry, exits)
    if runs:
        assert st.max_rank == brute_rank(runs), (nodes, edges, entry, exits)
    # The count space from the constraints: every run satisfies them, and the dimensions
    # agree with the brute-force matrices (with and without the ones column).
    fn = as_function(nodes, edges, entry, exits, st)
    C = count_space_constraints(fn)
    if runs:
        V = np.array([list(r[0]) + [1] for r in runs])
        assert not (C @ V.T).any()
        B1 = count_space_basis(fn, epsilon=True)
        assert B1.shape == (st.max_rank, len(nodes_s) + 1)
        # rows of V lie in span(B1)
        resid = V - (V @ B1.T) @ B1
        assert np.abs(resid).max() < 1e-8
        B0 = count_space_basis(fn)
        M0 = np.array([r[0] for r in runs], dtype=float)
        assert B0.shape[0] == int(np.linalg.matrix_rank(M0))
        net = edge_flow_constraints(fn)
        check_flows(net, nodes_s, edges_s, runs)
    return st


def check_flows(net, nodes, edges, runs):
    col = {e: j for j, e in enumerate(net.edges)}
    for counts, uses, last in runs[:200]:
        f = np.zeros(len(net.edges), dtype=np.int64)
        f[net.start_edge] = 1
        for e, u in zip(edges, uses):
            f[col[e]] += u
        f[col[(last, None)]] += 1
        assert (net.inflow @ f == np.array(counts)).all()
        assert (net.inflow @ f == net.outflow @ f).all()


def as_function(nodes, edges, entry, exits, st) -> FunctionModel:
    blocks = tuple(Block(a, 1, ()) for a in sorted(nodes))
    return FunctionModel(name="f", address=entry, blocks=blocks, edges=tuple(sorted(set(edges))),
                         entry=entry, exits=tuple(sorted(exits)), loops=st.loops, calls=(),
                         jump_tables=(), coexec_classes=st.coexec_classes,
                         max_rank=st.max_rank)


# --- hand-built CFGs ----------------------------------------------------------------------

def test_diamond():
    st = check_against_brute_force([1, 2, 3, 4], [(1, 2), (1, 3), (2, 4), (3, 4)], 1, [4])
    assert st.coexec_classes == ((1, 4), (2,), (3,))
    assert st.max_rank == 2
    assert st.loops == ()


def test_loop_with_if_else_in_body_design_example():
    # entry 0 -> header 1 -> test 2 -> A 3 | B 4 -> latch 5 -> 1 ; 1 -> exit 6
    edges = [(0, 1), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5), (5, 1), (1, 6)]
    st = check_against_brute_force(range(7), edges, 0, [6])
    # The header runs once more than the body: dominance + post-dominance would wrongly
    # group it with the entry.
    assert (0, 6) in st.coexec_classes and (1,) in st.coexec_classes
    assert (2, 5) in st.coexec_classes
    assert st.max_rank == 3          # N_test = N_A + N_B: counts have 3 free parameters
    (lp,) = st.loops
    assert lp.header == 1 and lp.body == (1, 2, 3, 4, 5)
    assert lp.back_edges == ((5, 1),) and lp.entry_edges == ((0, 1),)
    assert lp.parent is None and lp.depth == 1
    assert st.once_per_call == (0, 6)


def test_nested_loops():
    # 0 -> 1 (outer hdr) -> 2 (inner hdr) -> 3 -> 2 ; 2 -> 4 -> 1 ; 1 -> 5 exit
    edges = [(0, 1), (1, 2), (2, 3), (3, 2), (2, 4), (4, 1), (1, 5)]
    st = check_against_brute_force(range(6), edges, 0, [5])
    outer, inner = st.loops
    assert outer.header == 1 and outer.body == (1, 2, 3, 4) and outer.depth == 1
    assert inner.header == 2 and inner.body == (2, 3) and inner.parent == 1 and inner.depth == 2
    assert inner.entry_edges == ((1, 2),) and inner.back_edges == ((3, 2),)
    assert (2,) in st.coexec_classes and (1,) in st.coexec_classes
    assert (0, 5) in st.coexec_classes and (3,) in st.coexec_classes


def test_early_returns_multiple_exits():
    # 0 -> 1 | 2(ret) ; 1 -> 3(ret) | 4 -> 5(ret)
    edges = [(0, 1), (0, 2), (1, 3), (1, 4), (4, 5)]
    st = check_against_brute_force(range(6), edges, 0, [2, 3, 5])
    assert (1,) in st.coexec_classes and (4, 5) in st.coexec_classes
    assert st.max_rank == 3


def test_loop_with_break_and_continue_two_back_edges():
    # 0 -> 1 hdr ; 1 -> 2 ; 2 -> 1 (continue) ; 2 -> 3 ; 3 -> 1 ; 3 -> 4 (break) ; 1 -> 4 ; 4 exit
    edges = [(0, 1), (1, 2), (2, 1), (2, 3), (3, 1), (3, 4), (1, 4)]
    st = check_against_brute_force(range(5), edges, 0, [4])
    (lp,) = st.loops
    assert lp.back_edges == ((2, 1), (3, 1)) and lp.body == (1, 2, 3)
    assert lp.entry_edges == ((0, 1),)


def test_entry_is_loop_header():
    # tail recursion turned into a jump back to the entry
    edges = [(0, 1), (1, 0), (0, 2)]
    st = check_against_brute_force(range(3), edges, 0, [2])
    assert st.loops[0].header == 0 and st.loops[0].entry_edges == ()
    assert (0,) in st.coexec_classes and st.once_per_call == (2,)


def test_self_loop_and_exit_with_successor():
    # a conditional tail call: block 1 leaves the function and also falls through
    edges = [(0, 1), (1, 1), (1, 2)]
    st = check_against_brute_force(range(3), edges, 0, [1, 2])
    assert st.loops[0].header == 1 and st.loops[0].back_edges == ((1, 1),)


def test_irreducible_region_is_a_loop_entered_twice():
    # two ways into the cycle 2 <-> 3
    edges = [(0, 1), (1, 2), (1, 3), (2, 3), (3, 2), (2, 4), (3, 4)]
    st = check_against_brute_force(range(5), edges, 0, [4])
    (lp,) = st.loops
    assert not lp.reducible and st.irreducible == (lp.header,)
    assert lp.header in (2, 3) and lp.body == (2, 3)
    assert lp.entry_edges == ((1, 2), (1, 3))
    other = 5 - lp.header
    assert lp.back_edges == ((other, lp.header),)


def _acyclic_without_back_edges(nodes, edges, entry, loops):
    back = {e for lp in loops for e in lp.back_edges}
    succ = {n: [] for n in nodes}
    for s, d in set(edges):
        if (s, d) not in back:
            succ[s].append(d)
    state = {}

    def visit(n):                      # recursion is fine on these small graphs
        state[n] = 1
        for m in succ[n]:
            if state.get(m) == 1 or (m not in state and not visit(m)):
                return False
        state[n] = 2
        return True

    return visit(entry)


@pytest.mark.parametrize("seed", range(200))
def test_loop_forest_breaks_every_cycle(seed):
    nodes, edges, entry, exits = random_general(seed, n=random.Random(seed).randrange(3, 10))
    st = analyze(nodes, edges, entry, exits)
    assert _acyclic_without_back_edges(nodes, edges, entry, st.loops)
    for lp in st.loops:
        assert lp.header in lp.body
        assert all(d in lp.body and s not in lp.body for s, d in lp.entry_edges)
        assert all(s in lp.body and d == lp.header for s, d in lp.back_edges)
        assert lp.reducible == all(d == lp.header for _, d in lp.entry_edges) or lp.header == entry


def test_loop_forest_equals_natural_loops_on_reducible_graphs():
    from wcetfit.static.structure import _adjacency, loop_forest, natural_loops

    for seed in range(300):
        nodes, edges, entry, exits = random_structured(seed)
        succ, pred = _adjacency(nodes, edges)
        nat, irreducible = natural_loops(succ, pred, entry)
        assert irreducible == ()
        forest = loop_forest(succ, pred, entry)
        assert forest == nat, seed


def test_unreachable_and_dead_end_blocks_are_singletons():
    # 5 unreachable; 3 -> 4 -> 3 never reaches the exit
    edges = [(0, 1), (1, 2), (1, 3), (3, 4), (4, 3), (5, 2)]
    st = analyze(range(6), edges, 0, [2])
    assert st.unreachable == (5,)
    assert st.dead_ends == (3, 4)
    for b in (3, 4, 5):
        assert (b,) in st.coexec_classes
    assert (0, 1, 2) in st.coexec_classes
    assert st.max_rank == 1
    check_against_brute_force(range(6), edges, 0, [2])


def test_classes_partition_all_blocks():
    edges = [(0, 1), (1, 2), (2, 1), (1, 3)]
    st = analyze([0, 1, 2, 3, 9], edges, 0, [3])
    flat = sorted(a for c in st.coexec_classes for a in c)
    assert flat == [0, 1, 2, 3, 9]


# --- random CFGs ----------------------------------------------------------------------------

class _Builder:
    """Structured (hence reducible) random CFGs: seq, if, if-else, switch, while,
    do-while, early return, break."""

    def __init__(self, rng: random.Random, budget: int):
        self.rng = rng
        self.budget = budget
        self.n = 0
        self.edges: list[tuple[int, int]] = []
        self.exits: list[int] = []

    def node(self) -> int:
        self.n += 1
        self.budget -= 1
        return self.n - 1

    def region(self, depth: int, brk: int | None) -> tuple[int, int]:
        """Returns (entry, last) of a single-entry region that falls through from last."""
        r = self.rng.random()
        if depth > 3 or self.budget <= 1 or (depth > 0 and r < 0.2):
            a = self.node()
            return a, a
        if r < 0.40:
            a, b = self.region(depth + 1, brk)
            c, d = self.region(depth + 1, brk)
            self.edges.append((b, c))
            return a, d
        if r < 0.55:                       # if / if-else
            c = self.node()
            t0, t1 = self.region(depth + 1, brk)
            j = self.node()
            self.edges += [(c, t0), (t1, j)]
            if self.rng.random() < 0.5:
                e0, e1 = self.region(depth + 1, brk)
                self.edges += [(c, e0), (e1, j)]
            else:
                self.edges.append((c, j))
            return c, j
        if r < 0.62:                       # switch with 3 arms
            c = self.node()
            j = self.node()
            for _ in range(3):
                a0, a1 = self.region(depth + 1, brk)
                self.edges += [(c, a0), (a1, j)]
            return c, j
        if r < 0.75:                       # while
            h = self.node()
            after = self.node()
            b0, b1 = self.region(depth + 1, after)
            self.edges += [(h, b0), (b1, h), (h, after)]
            return h, after
        if r < 0.85:                       # do-while
            b0, b1 = self.region(depth + 1, None)
            after = self.node()
            self.edges += [(b1, b0), (b1, after)]
            return b0, after
        if r < 0.93:                       # early return
            c = self.node()
            ret = self.node()
            nxt = self.node()
            self.exits.append(ret)
            self.edges += [(c, ret), (c, nxt)]
            return c, nxt
        c = self.node()                    # break out of the enclosing loop, if any
        nxt = self.node()
        self.edges.append((c, nxt))
        if brk is not None:
            self.edges.append((c, brk))
        return c, nxt


def random_structured(seed: int, budget: int = 12):
    rng = random.Random(seed)
    b = _Builder(rng, budget)
    entry, last = b.region(0, None)
    b.exits.append(last)
    return list(range(b.n)), b.edges, entry, b.exits


def random_general(seed: int, n: int = 7):
    """Arbitrary digraphs (often irreducible): every node reachable and reaching an exit."""
    rng = random.Random(seed)
    edges = set()
    for v in range(1, n):
        edges.add((rng.randrange(v), v))
    for _ in range(rng.randrange(1, n)):
        edges.add((rng.randrange(n), rng.randrange(n)))
    exits = {n - 1} | {v for v in range(n) if rng.random() < 0.15}
    return list(range(n)), sorted(edges), 0, sorted(exits)


@pytest.mark.parametrize("seed", range(300))
def test_random_structured_cfgs_against_brute_force(seed):
    nodes, edges, entry, exits = random_structured(seed)
    st = check_against_brute_force(nodes, edges, entry, exits)
    assert st.irreducible == ()


@pytest.mark.parametrize("seed", range(200))
def test_random_general_cfgs_against_brute_force(seed):
    nodes, edges, entry, exits = random_general(seed, n=random.Random(seed).randrange(3, 8))
    check_against_brute_force(nodes, edges, entry, exits)


def test_random_structured_loops_nest_properly():
    for seed in range(300):
        nodes, edges, entry, exits = random_structured(seed)
        st = analyze(nodes, edges, entry, exits)
        by_header = {lp.header: lp for lp in st.loops}
        for lp in st.loops:
            for u, h in lp.back_edges:
                assert h == lp.header and u in lp.body
            for u, h in lp.entry_edges:
                assert u not in lp.body
            if lp.parent is not None:
                outer = by_header[lp.parent]
                assert set(lp.body) < set(outer.body)
                assert lp.depth == outer.depth + 1
            else:
                assert lp.depth == 1
            # every edge into the body from outside enters at the header
            for s, d in edges:
                if d in lp.body and s not in lp.body:
                    assert d == lp.header


def test_generators_produce_interesting_graphs():
    """Guard against a degenerate generator that would make the random tests vacuous."""
    n_loops = n_classes_merged = 0
    for seed in range(300):
        nodes, edges, entry, exits = random_structured(seed)
        st = analyze(nodes, edges, entry, exits)
        n_loops += len(st.loops) > 0
        n_classes_merged += any(len(c) > 1 for c in st.coexec_classes)
    assert n_loops > 60 and n_classes_merged > 100
