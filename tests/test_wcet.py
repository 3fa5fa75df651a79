"""IPET on hand-built CFGs whose worst case is known by construction or by brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.linalg import null_space

from wcetfit.errors import TargetError, WcetError
from wcetfit.model import (CALL_IMPORTED, CALL_INTERNAL, Block, CallSite, FunctionModel,
                           Instruction, Loop)
from wcetfit.wcet.analyze import analyze_wcet
from wcetfit.wcet.interproc import wcet_bound
from wcetfit.wcet.ipet import ipet
from wcetfit.wcet.loops import merge_loop_bounds, observed_loop_bounds, parse_loop_facts
from wcetfit.wcet.relations import count_space_residual
from wcetfit.wcet.result import (OVERHEAD, SOURCE_FACT, SOURCE_OBSERVED, Z95, InfeasibleError,
                                 LoopBound, RecursionBoundError, UnboundedLoopError)


# --- building CFGs by hand ---------------------------------------------------------------

def make_fn(name: str, base: int, n_blocks: int, edges, exits, loops=(), calls=(),
            entry: int = 0) -> FunctionModel:
    """Blocks are numbered 0..n-1 at base + 0x10·i; edges/exits/loops use those numbers."""
    A = lambda i: base + 0x10 * i  # noqa: E731
    blocks = tuple(Block(A(i), 0x10, (Instruction(A(i), 0x10, "nop", ""),))
                   for i in range(n_blocks))
    lps = []
    for header, body, back, entries, parent, depth in loops:
        lps.append(Loop(A(header), tuple(sorted(A(b) for b in body)),
                        tuple((A(s), A(d)) for s, d in back),
                        tuple((A(s), A(d)) for s, d in entries),
                        None if parent is None else A(parent), depth))
    cs = tuple(CallSite(A(b), A(b) + 0xb, kind, target, tname)
               for b, kind, target, tname in calls)
    return FunctionModel(name=name, address=base, blocks=blocks,
                         edges=tuple((A(s), A(d)) for s, d in edges), entry=A(entry),
                         exits=tuple(A(e) for e in exits), loops=tuple(lps), calls=cs,
                         jump_tables=(), coexec_classes=(), max_rank=0)


def costs_of(fn: FunctionModel, values) -> dict[int, float]:
    return {b.address: float(v) for b, v in zip(fn.blocks, values)}


def addr(fn: FunctionModel, i: int) -> int:
    return fn.blocks[i].address


def simulate(fn: FunctionModel, choices) -> np.ndarray:
    """Counts of one execution that follows ``choices`` (successor index per branch)."""
    counts = np.zeros(len(fn.blocks), dtype=np.int64)
    pos = {b.address: i for i, b in enumerate(fn.blocks)}
    cur = fn.entry
    it = iter(choices)
    while True:
        counts[pos[cur]] += 1
        succ = fn.successors(cur)
        if not succ:
            return counts
        cur = succ[next(it)] if len(succ) > 1 else succ[0]


# 0 entry -> 1 header; 1 -> 2 body -> 1 (back); 1 -> 3 exit  (test at the top)
def top_tested_loop():
    return make_fn("f", 0x1000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                   loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])


# 0 entry -> 1 body (header) -> 1 (back) | 2 exit  (rotated: test at the bottom)
def rotated_loop():
    return make_fn("g", 0x2000, 3, [(0, 1), (1, 1), (1, 2)], [2],
                   loops=[(1, [1], [(1, 1)], [(0, 1)], None, 1)])


# 0 -> 1 outer header; 1 -> 2 inner header; 2 -> 3 inner body -> 2; 2 -> 4 latch -> 1;
# 1 -> 5 exit
def nested_loops():
    return make_fn("n", 0x3000, 6,
                   [(0, 1), (1, 2), (2, 3), (3, 2), (2, 4), (4, 1), (1, 5)], [5],
                   loops=[(1, [1, 2, 3, 4], [(4, 1)], [(0, 1)], None, 1),
                          (2, [2, 3], [(3, 2)], [(1, 2)], 1, 2)])


# --- intraprocedural ------------------------------------------------------------------------

def test_straight_line():
    fn = make_fn("s", 0x1000, 3, [(0, 1), (1, 2)], [2])
    r = ipet(fn, costs_of(fn, [1, 2, 3]), {})
    assert r.bound_ticks == 6
    assert r.status == "optimal"
    assert [p.block for p in r.path] == [addr(fn, i) for i in range(3)]
    assert all(p.count == 1 for p in r.path)
    assert r.margin_ticks is None and r.upper_ticks == 6


def test_entry_cost_added_once():
    fn = make_fn("s", 0x1000, 2, [(0, 1)], [1])
    assert ipet(fn, costs_of(fn, [1, 2]), {}, entry_cost=50).bound_ticks == 53


@pytest.mark.parametrize("b,c,expect_via", [(5, 3, 1), (3, 5, 2)])
def test_diamond_takes_max_branch(b, c, expect_via):
    fn = make_fn("d", 0x1000, 4, [(0, 1), (0, 2), (1, 3), (2, 3)], [3])
    r = ipet(fn, costs_of(fn, [1, b, c, 1]), {})
    assert r.bound_ticks == 2 + max(b, c)
    assert r.block_counts[addr(fn, expect_via)] == 1
    assert r.block_counts[addr(fn, 3 - expect_via)] == 0
    assert r.edge_flows[(addr(fn, 0), addr(fn, expect_via))] == 1


def test_loop_bound_counts_back_edges_top_tested():
    fn = top_tested_loop()
    r = ipet(fn, costs_of(fn, [1, 2, 5, 1]), {addr(fn, 1): 10})
    # back edge taken 10 times: body 10x, header 11x
    assert r.block_counts[addr(fn, 2)] == 10
    assert r.block_counts[addr(fn, 1)] == 11
    assert r.bound_ticks == 1 + 2 * 11 + 5 * 10 + 1
    (lo,) = r.loops
    assert lo.binding and lo.back_edges == 10 and lo.entries == 1
    assert lo.name == "f+0x10"


def test_loop_bound_counts_back_edges_rotated():
    fn = rotated_loop()
    r = ipet(fn, costs_of(fn, [1, 7, 1]), {addr(fn, 1): 10})
    assert r.block_counts[addr(fn, 1)] == 11          # header = body: N + 1 executions
    assert r.bound_ticks == 1 + 7 * 11 + 1


def test_loop_with_cheap_body_is_not_binding():
    # A negative (fitted) body cost: the worst path does not iterate; the bound is not tight.
    fn = top_tested_loop()
    r = ipet(fn, costs_of(fn, [1, 1, -3, 1]), {addr(fn, 1): 10})
    assert r.block_counts[addr(fn, 2)] == 0
    assert r.bound_ticks == 3
    assert r.binding_loops == ()


def test_nested_loops_inner_per_entry_times_outer():
    fn = nested_loops()
    cost = [1, 2, 3, 10, 4, 1]
    r = ipet(fn, costs_of(fn, cost), {addr(fn, 1): 5, addr(fn, 2): 3})
    n = [r.block_counts[addr(fn, i)] for i in range(6)]
    # outer: 5 back edges → header 6x, latch 5x; inner entered 5x, 3 back edges each
    assert n == [1, 6, 5 * 4, 5 * 3, 5, 1]
    assert r.bound_ticks == sum(c * k for c, k in zip(cost, n))
    assert {lo.name for lo in r.binding_loops} == {"n+0x10", "n+0x20"}


def test_nested_loops_against_brute_force():
    """Every execution with outer ≤ 3 back edges and inner ≤ 2 per entry, enumerated."""
    fn = nested_loops()
    rng = np.random.default_rng(7)
    for _ in range(5):
        cost = rng.integers(-5, 20, 6).astype(float)
        best = -math.inf
        for outer in range(4):
            for inner in itertools.product(range(3), repeat=outer):
                # choices: header 1 has succ (2, 5); header 2 has succ (3, 4)
                ch = []
                for k in inner:
                    ch += [0] + [0] * k + [1]
                ch += [1]
                x = simulate(fn, ch)
                best = max(best, float(cost @ x))
        r = ipet(fn, costs_of(fn, cost), {addr(fn, 1): 3, addr(fn, 2): 2})
        assert r.bound_ticks == pytest.approx(best)


def test_total_bound_per_call():
    fn = nested_loops()
    cost = [1, 2, 3, 10, 4, 1]
    b = LoopBound(total=7)
    r = ipet(fn, costs_of(fn, cost), {addr(fn, 1): 5, addr(fn, 2): b})
    assert r.block_counts[addr(fn, 3)] == 7              # inner body: the total, not 5 x 3
    assert r.block_counts[addr(fn, 2)] == 5 + 7


def test_random_dags_equal_longest_path():
    """Without loops the bound is the longest entry→exit path (dynamic programming)."""
    rng = np.random.default_rng(3)
    for trial in range(20):
        n = int(rng.integers(3, 12))
        edges = [(i, i + 1) for i in range(n - 1)]
        edges += [(i, j) for i in range(n) for j in range(i + 2, n) if rng.random() < 0.3]
        fn = make_fn("r", 0x1000, n, edges, [n - 1])
        cost = rng.normal(10, 5, n)
        best = np.full(n, -np.inf)
        best[n - 1] = cost[n - 1]
        for i in range(n - 2, -1, -1):
            best[i] = cost[i] + max(best[j] for (s, j) in edges if s == i)
        r = ipet(fn, costs_of(fn, cost), {})
        assert r.bound_ticks == pytest.approx(best[0]), trial


def test_unbounded_loop_names_the_header():
    fn = top_tested_loop()
    with pytest.raises(UnboundedLoopError) as ei:
        ipet(fn, costs_of(fn, [1, 2, 5, 1]), {})
    assert "f+0x10" in str(ei.value) and "0x1010" in str(ei.value)
    assert ei.value.loops == ("f+0x10",)
    assert isinstance(ei.value, WcetError)


def test_unreachable_loop_needs_no_bound():
    # block 4 -> 5 -> 4 is a loop nobody reaches
    fn = make_fn("u", 0x1000, 6, [(0, 1), (4, 5), (5, 4), (5, 1)], [1],
                 loops=[(4, [4, 5], [(5, 4)], [], None, 1)])
    r = ipet(fn, costs_of(fn, [1, 1, 100, 100, 100, 100]), {})
    assert r.bound_ticks == 2


def test_cycle_outside_natural_loops_is_refused():
    # irreducible: 0 -> 1, 0 -> 2, 1 <-> 2 with no loop in the model
    fn = make_fn("i", 0x1000, 4, [(0, 1), (0, 2), (1, 2), (2, 1), (2, 3)], [3])
    with pytest.raises(UnboundedLoopError, match="irreducible"):
        ipet(fn, costs_of(fn, [1, 1, 1, 1]), {})


def test_infeasible_when_no_exit_reachable():
    fn = make_fn("x", 0x1000, 3, [(0, 1), (1, 2), (2, 1)], [],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    # 2 has a successor and no block is an exit: no execution returns
    with pytest.raises(InfeasibleError, match="no exit"):
        ipet(fn, costs_of(fn, [1, 1, 1]), {addr(fn, 1): 3})


def test_bound_on_non_header_is_an_error():
    fn = top_tested_loop()
    with pytest.raises(WcetError, match="not a loop header"):
        ipet(fn, costs_of(fn, [1, 2, 5, 1]), {addr(fn, 1): 3, addr(fn, 2): 3})


def test_missing_cost_is_an_error():
    fn = make_fn("s", 0x1000, 3, [(0, 1), (1, 2)], [2])
    with pytest.raises(WcetError, match="no cost"):
        ipet(fn, {addr(fn, 0): 1.0, addr(fn, 1): 1.0}, {})


def test_margin_is_standard_error_of_the_worst_path():
    fn = top_tested_loop()
    cov = np.diag([1.0, 4.0, 9.0, 1.0])
    r = ipet(fn, costs_of(fn, [1, 2, 5, 1]), {addr(fn, 1): 10}, cov=cov)
    x = np.array([1, 11, 10, 1])
    assert r.margin_ticks == pytest.approx(Z95 * math.sqrt(x @ cov @ x))
    assert r.upper_ticks == pytest.approx(r.bound_ticks + r.margin_ticks)


# --- the invariance on non-estimable directions -------------------------------------------

def structural_null_directions(fn: FunctionModel) -> np.ndarray:
    """Cost directions orthogonal to every count vector the CFG allows, computed from the
    cycle space of the CFG closed by a return edge (independent of wcetfit.wcet)."""
    idx = {b.address: i for i, b in enumerate(fn.blocks)}
    nb = len(fn.blocks)
    V = nb                                   # the virtual caller: V -> entry, exits -> V
    edges = [(idx[s], idx[d]) for s, d in fn.edges]
    edges += [(V, idx[fn.entry])] + [(idx[e], V) for e in fn.exits]
    inc = np.zeros((nb + 1, len(edges)))
    for k, (s, d) in enumerate(edges):
        inc[s, k] -= 1
        inc[d, k] += 1
    cycles = null_space(inc)                 # every conservative flow is a combination
    into = np.zeros((nb, len(edges)))        # x_b = Σ in-flows of b
    for k, (_, d) in enumerate(edges):
        if d < nb:
            into[d, k] = 1
    count_space = into @ cycles
    return null_space(count_space.T)         # costs c with c·x = 0 for all such x


def test_bound_invariant_on_non_estimable_cost_directions():
    # a diamond inside a loop inside a loop, plus a call-free tail: N_test = N_A + N_B etc.
    # 0 -> 1 outer hdr; 1 -> 2 inner hdr; 2 -> 3 | 4 (diamond); 3,4 -> 5 latch -> 2;
    # 2 -> 6 -> 1; 1 -> 7 exit
    fn = make_fn("v", 0x1000, 8,
                 [(0, 1), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5), (5, 2), (2, 6), (6, 1),
                  (1, 7)], [7],
                 loops=[(1, [1, 2, 3, 4, 5, 6], [(6, 1)], [(0, 1)], None, 1),
                        (2, [2, 3, 4, 5], [(5, 2)], [(1, 2)], 1, 2)])
    bounds = {addr(fn, 1): 4, addr(fn, 2): 6}
    base_cost = np.array([3.0, 2.0, 5.0, 11.0, 7.0, 1.0, 2.0, 4.0])
    r0 = ipet(fn, costs_of(fn, base_cost), bounds)
    null = structural_null_directions(fn)
    assert null.shape[1] >= 2                # the CFG really has non-estimable directions
    rng = np.random.default_rng(11)
    for _ in range(10):
        pert = null @ rng.normal(0, 50, null.shape[1])
        r = ipet(fn, costs_of(fn, base_cost + pert), bounds)
        assert r.bound_ticks == pytest.approx(r0.bound_ticks, rel=1e-9, abs=1e-6)
    # ... and the test can fail: a direction inside the count space does change the bound
    pert = np.zeros(8)
    pert[3] = 5.0
    assert ipet(fn, costs_of(fn, base_cost + pert), bounds).bound_ticks != \
        pytest.approx(r0.bound_ticks)


# --- observed bounds and flow facts -----------------------------------------------------------

def test_observed_bound_single_entry_loop():
    fn = top_tested_loop()
    # inputs iterate 0, 3, 7, 2 times
    runs = [simulate(fn, [0] * k + [1]) for k in (0, 3, 7, 2)]
    counts = np.array(runs)
    ob = observed_loop_bounds(fn, counts, fn.block_addresses)
    b = ob[addr(fn, 1)]
    assert b.per_entry == 7 and b.total == 7 and b.source == SOURCE_OBSERVED
    assert b.witness == 2
    cost = np.array([1, 2, 5, 1.0])
    r = ipet(fn, costs_of(fn, cost), ob)
    assert r.bound_ticks == pytest.approx(max(counts @ cost))


def test_observed_bound_nested_uses_total_per_call():
    fn = nested_loops()
    # input A: outer 2 iterations with inner 1 and 6; input B: outer 3 with inner 2,2,2
    def run(inner):
        ch = []
        for k in inner:
            ch += [0] + [0] * k + [1]
        return simulate(fn, ch + [1])
    counts = np.array([run([1, 6]), run([2, 2, 2])])
    ob = observed_loop_bounds(fn, counts, fn.block_addresses)
    outer, inner = ob[addr(fn, 1)], ob[addr(fn, 2)]
    assert outer.per_entry == 3                     # top-tested: 3 iterations, 3 back edges
    assert inner.per_entry is None and inner.total == 7 and inner.witness == 0
    assert "not observable" in inner.note
    cost = np.array([1, 2, 3, 10, 4, 1.0])
    r = ipet(fn, costs_of(fn, cost), ob)
    assert r.bound_ticks >= max(counts @ cost)
    assert r.block_counts[addr(fn, 3)] == 7


def test_observed_bound_when_edges_are_not_determined():
    # 0 -> 1 | 3; 1 -> 2; 2 -> 1 (back) | 3.  Entry and back-edge sources both branch.
    fn = make_fn("w", 0x1000, 4, [(0, 1), (0, 3), (1, 2), (2, 1), (2, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    counts = np.array([simulate(fn, [0] + [0] * k + [1]) for k in (4, 1)] +
                      [simulate(fn, [1])])
    ob = observed_loop_bounds(fn, counts, fn.block_addresses)
    b = ob[addr(fn, 1)]
    assert b.total == 4 and b.per_entry is None     # conservative: header − 1
    assert "not determined" in b.note


def test_observed_bounds_ignore_foreign_columns_and_unentered_loops():
    # the loop of "w" is skipped by every input (0 -> 3): no bound, and the IPET says so
    fn = make_fn("w", 0x1000, 4, [(0, 1), (0, 3), (1, 2), (2, 1), (2, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    counts = np.array([simulate(fn, [1]), simulate(fn, [1])])
    # extra column of another function in front
    cols = (0x9999,) + fn.block_addresses
    counts = np.hstack([np.ones((2, 1), dtype=int), counts])
    ob = observed_loop_bounds(fn, counts, cols)
    assert ob == {}
    with pytest.raises(UnboundedLoopError, match="w\\+0x10"):
        ipet(fn, costs_of(fn, [1, 1, 1, 1]), ob)


def test_loop_facts_by_offset_and_address():
    fn = nested_loops()
    fns = {"n": fn}
    facts = parse_loop_facts({"n+0x10": 2048, "0x3020": {"max": 3, "total": 50}}, fns)
    assert facts[("n", 0x3010)].per_entry == 2048
    assert facts[("n", 0x3010)].source == SOURCE_FACT
    assert facts[("n", 0x3020)] .total == 50 and facts[("n", 0x3020)].per_entry == 3


def test_loop_fact_on_non_header_suggests_nearest():
    fns = {"n": nested_loops()}
    with pytest.raises(TargetError) as ei:
        parse_loop_facts({"n+0x18": 5}, fns)
    assert "not a loop header" in str(ei.value) and "n+0x10" in str(ei.value)
    with pytest.raises(TargetError, match="nearest loop headers"):
        parse_loop_facts({"0x3030": 5}, fns)
    with pytest.raises(TargetError, match="no function"):
        parse_loop_facts({"m+0x10": 5}, fns)
    with pytest.raises(TargetError, match=">= 0"):
        parse_loop_facts({"n+0x10": -1}, fns)
    with pytest.raises(TargetError, match="different bound"):
        parse_loop_facts({"n+0x10": 5, "0x3010": 6}, fns)


def test_facts_override_observed_bounds():
    fn = top_tested_loop()
    counts = np.array([simulate(fn, [0] * k + [1]) for k in (1, 3)])
    observed = {"f": observed_loop_bounds(fn, counts, fn.block_addresses)}
    facts = parse_loop_facts({"f+0x10": 100}, {"f": fn})
    cost = costs_of(fn, [1, 2, 5, 1])
    merged = merge_loop_bounds({"f": fn}, facts, observed)
    r_obs = ipet(fn, cost, observed["f"])
    r_fact = ipet(fn, cost, merged["f"])
    assert r_obs.bound_ticks == 1 + 2 * 4 + 5 * 3 + 1
    assert r_fact.bound_ticks == 1 + 2 * 101 + 5 * 100 + 1
    assert r_fact.loops[0].bound.source == SOURCE_FACT


# --- interprocedural ---------------------------------------------------------------------

def caller_and_callee():
    # g: 0 -> 1 | 2 -> 3 (diamond), costs decide its WCET
    g = make_fn("g", 0x5000, 4, [(0, 1), (0, 2), (1, 3), (2, 3)], [3])
    # f: 0 -> 1 loop header; 1 -> 2 (calls g) -> 1; 1 -> 3 (calls puts, imported) -> 4 exit
    f = make_fn("f", 0x4000, 5, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4)], [4],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INTERNAL, 0x5000, "g"), (3, CALL_IMPORTED, 0x400, "puts")])
    return f, g


def test_call_blocks_add_callee_wcet():
    f, g = caller_and_callee()
    costs = {"f": costs_of(f, [1, 2, 3, 4, 1]), "g": costs_of(g, [1, 10, 20, 1])}
    res = wcet_bound({"f": f, "g": g}, "f", costs, {"f": {addr(f, 1): 5}})
    wg = 1 + 20 + 1
    assert res.functions["g"].bound_ticks == wg
    assert res.bound_ticks == 1 + 2 * 6 + (3 + wg) * 5 + 4 + 1
    assert res.order.index("g") < res.order.index("f")
    call = next(c for c in res.functions["f"].calls if c.kind == CALL_INTERNAL)
    assert call.callee_wcet_ticks == wg and call.count == 5
    assert any("imported" in w and "puts" in w for w in res.warnings)
    # inlined counts: g's worst path once per call
    assert res.inlined_counts[("g", addr(g, 2))] == 5
    assert ("g", addr(g, 1)) not in res.inlined_counts


def test_interprocedural_margin_uses_inlined_counts():
    f, g = caller_and_callee()
    costs = {"f": costs_of(f, [1, 2, 3, 4, 1]), "g": costs_of(g, [1, 10, 20, 1])}
    index = [("f", b.address) for b in f.blocks] + [("g", b.address) for b in g.blocks] \
        + [OVERHEAD]
    cov = np.eye(len(index))
    res = wcet_bound({"f": f, "g": g}, "f", costs, {"f": {addr(f, 1): 5}},
                     entry_cost=30, cov=cov, cov_index=index)
    x = np.array([1, 6, 5, 1, 1] + [5, 0, 5, 5] + [1], dtype=float)
    assert res.margin_ticks == pytest.approx(Z95 * math.sqrt(x @ x))
    assert res.bound_ticks == 30 + 1 + 12 + 5 * (3 + 22) + 4 + 1


def test_missing_callee_model_is_an_error():
    f, _ = caller_and_callee()
    with pytest.raises(WcetError, match="not loaded"):
        wcet_bound({"f": f}, "f", {"f": costs_of(f, [1] * 5)}, {"f": {addr(f, 1): 5}})


def self_recursive(always: bool = False):
    # r: 0 -> 1 (calls r) -> 2 exit; 0 -> 2 unless ``always``
    edges = [(0, 1), (1, 2)] + ([] if always else [(0, 2)])
    return make_fn("r", 0x6000, 3, edges, [2], calls=[(1, CALL_INTERNAL, 0x6000, "r")])


def test_recursion_refused_without_bound():
    r = self_recursive()
    with pytest.raises(RecursionBoundError) as ei:
        wcet_bound({"r": r}, "r", {"r": costs_of(r, [1, 2, 1])}, {})
    assert "r -> r" in str(ei.value) and "[recursion]" in str(ei.value)
    assert ei.value.cycle == ("r", "r")


def test_recursion_accepted_with_depth():
    r = self_recursive()
    res = wcet_bound({"r": r}, "r", {"r": costs_of(r, [1, 2, 1])}, {}, {"r": 3})
    # W1 = 2 (no recursion), Wd = 1 + 2 + W(d-1) + 1
    assert res.bound_ticks == 2 + 4 + 4
    assert res.recursion == {"r": 3}
    assert res.inlined_counts[("r", addr(r, 0))] == 3


def test_tree_recursion():
    # t: 0 -> 1 (calls t) -> 2 (calls t) -> 3 exit; 0 -> 3
    t = make_fn("t", 0x7000, 4, [(0, 1), (1, 2), (2, 3), (0, 3)], [3],
                calls=[(1, CALL_INTERNAL, 0x7000, "t"), (2, CALL_INTERNAL, 0x7000, "t")])
    res = wcet_bound({"t": t}, "t", {"t": costs_of(t, [1, 1, 1, 1])}, {}, {"t": 4})
    w = 2.0
    for _ in range(3):
        w = 4 + 2 * w
    assert res.bound_ticks == w
    assert res.inlined_counts[("t", addr(t, 0))] == 1 + 2 + 4 + 8


def test_a_tree_recursion_whose_levels_multiply_past_any_machine_is_refused_in_words():
    """libc's qsort: msort calls itself twice, and a depth taken from ~2,000 observed
    activations doubled its cost level by level until the solver's costs overflowed, a
    traceback from scipy after five minutes of measuring.  Past 1e15 ticks the levels stop
    and the refusal says what to give."""
    t = make_fn("t", 0x7000, 4, [(0, 1), (1, 2), (2, 3), (0, 3)], [3],
                calls=[(1, CALL_INTERNAL, 0x7000, "t"), (2, CALL_INTERNAL, 0x7000, "t")])
    f = make_fn("f", 0x1000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x7000, "t")])
    costs = {"t": costs_of(t, [1, 1, 1, 1]), "f": costs_of(f, [1, 1])}
    with pytest.raises(RecursionBoundError, match=r"recursion of t: bounded level by level "
                       r"its WCET passes 1e\+15 ticks .*activations = A"):
        wcet_bound({"f": f, "t": t}, "f", costs, {}, {"t": 2_000})
    with pytest.raises(RecursionBoundError, match=r"recursion t -> t: bounded level by level "
                       r"its WCET passes 1e\+15 ticks after \d+ of 2000 levels"):
        wcet_bound({"t": t}, "t", {"t": costs["t"]}, {}, {"t": 2_000})


def test_mutual_recursion_depth_named_on_one_member():
    # f: 0 -> 1 (calls g) -> 2; 0 -> 2.   g: 0 -> 1 (calls f) -> 2
    f = make_fn("f", 0x1000, 3, [(0, 1), (1, 2), (0, 2)], [2],
                calls=[(1, CALL_INTERNAL, 0x2000, "g")])
    g = make_fn("g", 0x2000, 3, [(0, 1), (1, 2), (0, 2)], [2],
                calls=[(1, CALL_INTERNAL, 0x1000, "f")])
    fns = {"f": f, "g": g}
    costs = {"f": costs_of(f, [1, 10, 1]), "g": costs_of(g, [1, 100, 1])}
    with pytest.raises(RecursionBoundError, match="f -> g -> f"):
        wcet_bound(fns, "f", costs, {})
    res = wcet_bound(fns, "f", costs, {}, {"g": 3})
    # depth 3 = f, g, f nested: f3 = 1+10+g2+1, g2 = 1+100+f1+1, f1 = 2
    assert res.bound_ticks == 12 + (102 + 2)


def test_recursion_that_cannot_stop():
    r = self_recursive(always=True)
    with pytest.raises(RecursionBoundError, match="unbounded on every path"):
        wcet_bound({"r": r}, "r", {"r": costs_of(r, [1, 2, 1])}, {}, {"r": 5})


def always_calls_g():
    # f: 0 -> 1 (calls g) -> 2, always.   g: 0 -> 1 (calls f) -> 2; 0 -> 2
    # (liblzma's decoders through next.code: a member that always calls the next one)
    f = make_fn("f", 0x1000, 3, [(0, 1), (1, 2)], [2], calls=[(1, CALL_INTERNAL, 0x2000, "g")])
    g = make_fn("g", 0x2000, 3, [(0, 1), (1, 2), (0, 2)], [2],
                calls=[(1, CALL_INTERNAL, 0x1000, "f")])
    return {"f": f, "g": g}, {"f": costs_of(f, [1, 10, 1]), "g": costs_of(g, [1, 100, 1])}


def test_mutual_recursion_with_a_member_that_always_recurses():
    """A member with no path around its call into the cycle has no WCET at depth 1; it
    used to stop the bound ("cannot return without recursing").  Depth 3 (f, g, f) cannot
    hold f → g → f (the inner f calls g again): f3 = 1 + 10 + g2 + 1 with g2 = 2 (g
    skips its call, f1 having none) = 14.  Depth 4: f4 = 12 + g3, g3 = 1 + 100 + f2 + 1,
    f2 = 12 + g1 = 14: 12 + 116 = 128."""
    fns, costs = always_calls_g()
    assert wcet_bound(fns, "f", costs, {}, {"f": 3}).bound_ticks == 14
    assert wcet_bound(fns, "f", costs, {}, {"f": 4}).bound_ticks == 128
    with pytest.raises(RecursionBoundError, match="depth of 1 is too small"):
        wcet_bound(fns, "f", costs, {}, {"f": 1})


def test_recursion_depth_observed_from_the_inputs():
    """No [recursion] entry: the depth is the most activations of the cycle's functions
    in one call of the root (their entry counts, summed), said as observed; a given depth
    still wins."""
    fns, costs = always_calls_g()
    f, g = fns["f"], fns["g"]
    cols = [("f", b.address) for b in f.blocks] + [("g", b.address) for b in g.blocks]
    # input 0: f → g (g skips): f [1,1,1], g [1,0,1]; input 1: f → g → f → g: 2 and 2
    counts = np.array([[1, 1, 1, 1, 0, 1], [2, 2, 2, 2, 1, 2]])
    res = analyze_wcet(fns, "f", costs, counts, cols)
    assert res.recursion == {"f": 4, "g": 4}
    assert res.bound_ticks == 128            # as with "f" = 4 given
    said = [w for w in res.warnings if "taken as depth 4, the most activations" in w]
    assert said and "the inputs showed" in said[0] and "[recursion]" in said[0]
    given = analyze_wcet(fns, "f", costs, counts, cols, recursion={"f": 3})
    assert given.bound_ticks == 14 and not any("the inputs showed" in w
                                               for w in given.warnings)



def test_a_cycle_through_a_function_no_input_called_is_no_recursion():
    """g calls h only from a block no input ran, and h calls g back: a cycle in the call
    graph, but under the "observed" policy that block is off the worst path, so g is
    bounded as a plain callee.  Before, h's level-1 IPET (its entry forbidden) failed and
    the whole bound with it ("a depth of 1 is too small"; libcrypto's SHA256, whose
    inputs reach BIO_vsnprintf's cycle through the error functions nowhere)."""
    f = make_fn("f", 0x1000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x2000, "g")])
    g = make_fn("g", 0x2000, 4, [(0, 1), (0, 2), (1, 3), (2, 3)], [3],
                calls=[(2, CALL_INTERNAL, 0x3000, "h")])
    h = make_fn("h", 0x3000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x2000, "g")])
    fns = {"f": f, "g": g, "h": h}
    costs = {"f": costs_of(f, [1, 2]), "g": costs_of(g, [3, 4, 50, 5]),
             "h": costs_of(h, [60, 70])}
    cols = [(fn.name, b.address) for fn in fns.values() for b in fn.blocks]
    counts = np.array([[1, 1, 1, 1, 0, 1, 0, 0]] * 3)
    res = analyze_wcet(fns, "f", costs, counts, cols)
    assert res.bound_ticks == pytest.approx(1 + 2 + 3 + 4 + 5)
    assert not res.recursion
    assert any("no input reached" in w for w in res.warnings)

# --- estimability of a prediction --------------------------------------------------------

def test_count_space_residual():
    fn = make_fn("d", 0x1000, 4, [(0, 1), (0, 2), (1, 3), (2, 3)], [3])
    only_left = np.array([simulate(fn, [0])] * 3)
    both = np.array([simulate(fn, [0]), simulate(fn, [1])])
    right = simulate(fn, [1])
    assert count_space_residual(right, both) < 1e-12
    assert count_space_residual(right, only_left) > 0.1


# --- the glue from pipeline data ------------------------------------------------------------

def test_analyze_wcet_observed_bounds_and_facts_over_columns():
    f, g = caller_and_callee()
    fns = {"f": f, "g": g}
    # three inputs iterating f's loop 1, 4 and 2 times; g takes its 0x10 branch
    rows = []
    for k in (1, 4, 2):
        cf = simulate(f, [0] * k + [1])
        cg = np.array([k, k, 0, k])
        rows.append(np.concatenate([cg, cf]))        # g's columns first: order is free
    counts = np.array(rows)
    cols = [("g", b.address) for b in g.blocks] + [("f", b.address) for b in f.blocks]
    costs = {"f": costs_of(f, [1, 2, 3, 4, 1]), "g": costs_of(g, [1, 10, 20, 1])}
    res = analyze_wcet(fns, "f", costs, counts, cols, entry_cost=5, unreached="require")
    assert res.functions["f"].loops[0].bound.per_entry == 4
    assert res.functions["f"].loops[0].bound.source == SOURCE_OBSERVED
    assert res.bound_ticks == 5 + 1 + 2 * 5 + (3 + 22) * 4 + 4 + 1
    # by default g's branch no input took (cost 20) is left out, and said
    res = analyze_wcet(fns, "f", costs, counts, cols, entry_cost=5)
    assert res.bound_ticks == 5 + 1 + 2 * 5 + (3 + 12) * 4 + 4 + 1
    assert res.unreached == {"g": (addr(g, 2),)} and "no input reached" in res.warnings[0]
    # a fact replaces the observation; decimal offsets work too
    res2 = analyze_wcet(fns, "f", costs, counts, cols, loop_facts={"f+16": 9})
    assert res2.functions["f"].loops[0].bound.per_entry == 9
    assert res2.functions["f"].loops[0].bound.source == SOURCE_FACT
    # table form: a total per call
    res3 = analyze_wcet(fns, "f", costs, counts, cols,
                        loop_facts={"f+0x10": {"max": 9, "total": 3}})
    assert res3.functions["f"].block_counts[addr(f, 2)] == 3


def test_loop_whose_header_is_the_function_entry():
    # 0 -> 0 (self loop, the entry is the header) | 1 exit
    fn = make_fn("e", 0x1000, 2, [(0, 0), (0, 1)], [1],
                 loops=[(0, [0], [(0, 0)], [], None, 1)])
    r = ipet(fn, costs_of(fn, [3, 1]), {addr(fn, 0): 5})
    assert r.block_counts[addr(fn, 0)] == 6 and r.bound_ticks == 3 * 6 + 1
    counts = np.array([simulate(fn, [0] * k + [1]) for k in (2, 5, 0)])
    ob = observed_loop_bounds(fn, counts, fn.block_addresses)
    assert ob[addr(fn, 0)].per_entry == 5 and ob[addr(fn, 0)].note.startswith("max")


def test_invariance_with_structure_count_space_basis():
    """The same invariance, with the null directions taken from wcetfit.static.structure (written
    by another hand) — and a check that both computations of the count space agree."""
    structure = pytest.importorskip("wcetfit.static.structure")
    if not hasattr(structure, "count_space_basis"):
        pytest.skip("wcetfit.static.structure.count_space_basis not available")
    fn = nested_loops()
    bounds = {addr(fn, 1): 5, addr(fn, 2): 3}
    basis = structure.count_space_basis(fn)               # rows span the count space
    ours = structural_null_directions(fn)
    assert np.allclose(basis @ ours, 0, atol=1e-9)         # same space, two derivations
    null = null_space(basis)
    cost = np.array([1.0, 2, 3, 10, 4, 1])
    r0 = ipet(fn, costs_of(fn, cost), bounds)
    rng = np.random.default_rng(2)
    for _ in range(5):
        r = ipet(fn, costs_of(fn, cost + null @ rng.normal(0, 30, null.shape[1])), bounds)
        assert r.bound_ticks == pytest.approx(r0.bound_ticks, abs=1e-6)


def test_observed_relations_exact_and_keep_ipet_in_observed_span():
    """A loop body whose output block runs once every two iterations (like adpcm's
    nibble packing): the CFG allows it every iteration, the inputs never do."""
    import numpy as np

    from wcetfit.wcet.relations import observed_relations

    # columns: entry, header, half (every other iteration), exit
    rows = []
    for n in range(0, 40, 2):
        rows.append([1, n + 1, n // 2, 1])
    rel = observed_relations(np.array(rows), [0x10, 0x20, 0x30, 0x40])
    texts = {r.text() for r in rel}
    # entry = 1, exit = 1, header = 2·half + 1: all exact integer relations
    assert any("N(0x20)" in t and "2·N(0x30)" in t for t in texts), texts
    for r in rel:
        for row in rows:
            assert sum(c * row[[0x10, 0x20, 0x30, 0x40].index(a)] for a, c in r.coefficients) == r.rhs
    # an unexecuted column gives no "count = 0" relation
    rows0 = [row + [0] for row in rows]
    rel0 = observed_relations(np.array(rows0), [0x10, 0x20, 0x30, 0x40, 0x50])
    assert all(a != 0x50 for r in rel0 for a, _ in r.coefficients)


def test_tree_recursion_bounded_by_observed_activations_when_smaller():
    # root m calls t once; t is a tree recursion (two self-calls per activation)
    t = make_fn("t", 0x7000, 4, [(0, 1), (1, 2), (2, 3), (0, 3)], [3],
                calls=[(1, CALL_INTERNAL, 0x7000, "t"), (2, CALL_INTERNAL, 0x7000, "t")])
    m = make_fn("m", 0x1000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x7000, "t")])
    fns = {"m": m, "t": t}
    costs = {"m": costs_of(m, [5, 5]), "t": costs_of(t, [1, 1, 1, 1])}
    by_depth = wcet_bound(fns, "m", costs, {}, {"t": 8})
    # depth 8: 2^8 - 1 activations of t; the inputs never made more than 7.  All 7 at
    # once: each but the outermost is entered from one of the two call blocks, so
    # 2·(activations through blocks 1, 2) = 7 − 1: 3 inner activations and 4 leaves,
    # 7 × (1 + 1) for blocks 0 and 3 plus 3 × (1 + 1) for blocks 1 and 2
    with_obs = wcet_bound(fns, "m", costs, {}, {"t": 8}, activation_bounds={"t": 7})
    assert with_obs.bound_ticks == 10 + 7 * 2 + 3 * 2
    assert with_obs.inlined_counts[("t", addr(t, 1))] == 3
    assert with_obs.bound_ticks < by_depth.bound_ticks
    assert any("observed" in w for w in with_obs.warnings)
    # an observed count larger than the depth allows changes nothing
    big = wcet_bound(fns, "m", costs, {}, {"t": 8}, activation_bounds={"t": 10**6})
    assert big.bound_ticks == by_depth.bound_ticks


def test_recursion_with_a_loop_bounded_by_observed_totals_over_all_activations():
    # t: 0 entry -> 1 loop header <-> 2 body; 1 -> 3 -> 4 (calls t) -> 5 exit; 0 -> 5.
    # A chain recursion: each activation that runs the loop calls t once more.
    t = make_fn("t", 0x7000, 6, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4), (4, 5), (0, 5)],
                [5], loops=[(1, (1, 2), [(2, 1)], [(0, 1)], None, 1)],
                calls=[(4, CALL_INTERNAL, 0x7000, "t")])
    m = make_fn("m", 0x1000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x7000, "t")])
    fns = {"m": m, "t": t}
    costs = {"m": costs_of(m, [0, 0]), "t": costs_of(t, [1, 1, 10, 1, 1, 1])}
    bounds = {"t": {addr(t, 1): 10}}
    # 5 activations, 4 of them through the loop: 10 iterations each at most ...
    loops = wcet_bound(fns, "m", costs, bounds, {"t": 8}, activation_bounds={"t": 5})
    assert loops.bound_ticks == 5 + 5 + (4 + 40) + 4 + 4 + 40 * 10
    # ... but never more than 12 iterations in all on any input (observed)
    totals = {"t": {addr(t, 2): 12}}
    obs = wcet_bound(fns, "m", costs, bounds, {"t": 8}, activation_bounds={"t": 5},
                     total_bounds=totals)
    assert obs.bound_ticks == 5 + 5 + (4 + 12) + 4 + 4 + 12 * 10
    assert obs.inlined_counts[("t", addr(t, 2))] == 12
    assert any("observed" in w for w in obs.warnings)
    # totals that no execution with that many activations can meet fall back to depth
    odd = {"t": {addr(t, 0): 0}}
    fall = wcet_bound(fns, "m", costs, bounds, {"t": 8}, activation_bounds={"t": 5},
                      total_bounds=odd)
    assert fall.bound_ticks == wcet_bound(fns, "m", costs, bounds, {"t": 8}).bound_ticks


def test_a_recursion_bounded_level_by_level_says_so_and_a_fact_on_its_activations_bounds_it():
    """The calls sample: tree_sum's left-child call sits in gcc's loop over the right
    child; with its observed activations released (its calls run in a loop a [loops]
    fact takes beyond the inputs), 9 calls per level over 10 levels made a bound of
    2.4e10 ticks, 442,000× the slowest input, and nothing said why.  The warning names
    the way out, and [recursion]'s activations is that bound."""
    from wcetfit.wcet.analyze import analyze_wcet

    t = make_fn("t", 0x7000, 6, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4), (4, 5), (0, 5)],
                [5], loops=[(1, (1, 2), [(2, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INTERNAL, 0x7000, "t")])        # the call inside the loop
    m = make_fn("m", 0x1000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x7000, "t")])
    fns = {"m": m, "t": t}
    costs = {"m": costs_of(m, [0, 0]), "t": costs_of(t, [1, 1, 10, 1, 1, 1])}
    bounds = {"t": {addr(t, 1): 3}}
    per_level = wcet_bound(fns, "m", costs, bounds, {"t": 6})
    said = [w for w in per_level.warnings if "bounded level by level" in w]
    assert said and '[recursion] "t" = { depth = 6, activations = A }' in said[0]
    with_fact = wcet_bound(fns, "m", costs, bounds, {"t": 6}, activation_bounds={"t": 9},
                           activation_facts=frozenset({"t"}))
    assert with_fact.bound_ticks < per_level.bound_ticks
    assert any("at most 9 per call of m (from [recursion])" in w for w in with_fact.warnings)
    assert not any("bounded level by level" in w for w in with_fact.warnings)
    # through the pipeline's entry: the fact stands even where a [loops] fact beyond the
    # inputs released t's observed activations
    cols = [(f.name, b.address) for f in (m, t) for b in f.blocks]
    # per call of m: t once without its loop; t twice (one loop pass calling t again)
    rows = np.array([[1, 1, 1, 0, 0, 0, 0, 1], [1, 1, 2, 2, 1, 1, 1, 2]])
    res = analyze_wcet(fns, "m", costs, rows, cols, loop_facts={"t+0x10": 3},
                       recursion={"t": 6}, recursion_activations={"t": 9})
    assert res.bound_ticks == pytest.approx(with_fact.bound_ticks)


# --- observed path envelopes -------------------------------------------------------------------

def test_upper_line_lies_above_every_point_and_is_tightest_at_the_longest_input():
    from wcetfit.wcet.envelope import upper_line

    rng = np.random.default_rng(0)
    h = rng.integers(1, 2049, 300).astype(float)
    y = np.floor(0.05 * h + rng.integers(0, 3, 300))
    slope, icpt = upper_line(h, y)
    assert np.all(y <= icpt + slope * h + 1e-9)
    top = y[h == h.max()].max()
    assert icpt + slope * h.max() == pytest.approx(top)        # touches the longest input
    # falling with length: flat at the largest count
    assert upper_line(np.array([1.0, 5, 10]), np.array([7.0, 3, 1])) == (0.0, 7.0)
    assert upper_line(np.array([4.0, 4]), np.array([2.0, 3])) == (0.0, 3.0)


def _two_clamps():
    """A loop (header 1) whose body has two optional blocks, 3 and 5 (clamps), then 6
    back to the header; 7 is the exit.  Edges: 1→2, 2→3, 2→4, 3→4, 4→5, 4→6, 5→6, 6→1,
    1→7, 0→1."""
    fn = make_fn("f", 0x1000, 8,
                 [(0, 1), (1, 2), (2, 3), (2, 4), (3, 4), (4, 5), (4, 6), (5, 6), (6, 1),
                  (1, 7)], [7],
                 loops=[(1, (1, 2, 3, 4, 5, 6), [(6, 1)], [(0, 1)], None, 1)])
    return fn


def test_envelopes_keep_the_worst_path_to_what_the_inputs_did():
    from wcetfit.wcet.envelope import observed_envelopes

    fn = _two_clamps()
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(200):
        n = int(rng.integers(1, 101))
        # each clamp in a few percent of the iterations, never both in one
        which = rng.choice([0, 1, 2], size=n, p=[0.9, 0.05, 0.05])
        a, b = int((which == 1).sum()), int((which == 2).sum())
        rows.append([1, n + 1, n, a, n, b, n, 1])
    C = np.array(rows)
    addrs = [blk.address for blk in fn.blocks]
    envs = observed_envelopes(fn, C, addrs)
    counts_of = [dict(zip(addrs, r)) for r in C]
    assert envs and all(e.holds(c) for e in envs for c in counts_of)   # true on every input
    cost = costs_of(fn, [1, 1, 1, 10, 1, 10, 1, 1])
    free = ipet(fn, cost, {addr(fn, 1): 100})
    held = ipet(fn, cost, {addr(fn, 1): 100}, envelopes=envs)
    assert free.block_counts[addr(fn, 3)] == free.block_counts[addr(fn, 5)] == 100
    # no more clamps together than the most any input made (their number does not grow
    # with the iterations beyond the longest inputs here, so the envelope is flat)
    both = C[:, 3] + C[:, 5]
    assert held.block_counts[addr(fn, 3)] + held.block_counts[addr(fn, 5)] <= both.max()
    assert held.bound_ticks < 0.5 * free.bound_ticks
    assert held.binding_envelopes
    # and every input's own counts stay feasible: the bound is at least each prediction
    for c in counts_of:
        assert held.bound_ticks >= sum(cost[a] * c[a] for a in addrs) - 1e-9


def test_envelopes_hold_on_the_inputs_that_skipped_the_loop():
    """A loop some inputs skip (0 → 8 → 7, an expensive other way), whose optional block 3
    ran up to two fewer times than the header on the inputs that entered it.  The line
    over the entered inputs alone, N(3) ≤ −2 + N(1), passes below (0, 0): it forced the
    loop to run, and the bound left out the skipping inputs' path (zlib's compress2:
    deflate_fast's envelopes excluded every level-9 call and the bound fell back to ×19
    the slowest input)."""
    from wcetfit.wcet.envelope import observed_envelopes

    fn = make_fn("f", 0x1000, 9,
                 [(0, 1), (0, 8), (8, 7), (1, 2), (2, 3), (2, 4), (3, 4), (4, 5), (4, 6),
                  (5, 6), (6, 1), (1, 7)], [7],
                 loops=[(1, (1, 2, 3, 4, 5, 6), [(6, 1)], [(0, 1)], None, 1)])
    rng = np.random.default_rng(2)
    rows = []
    for k in range(120):
        if k % 4 == 0:
            rows.append([1, 0, 0, 0, 0, 0, 0, 1, 1])         # skipped the loop
            continue
        n = 100 if k == 1 else int(rng.integers(2, 100))
        a = n - 1 if k == 1 else n - 1 - int(rng.integers(0, 2))
        rows.append([1, n + 1, n, a, n, int(rng.integers(0, 3)), n, 1, 0])
    C = np.array(rows)
    addrs = [blk.address for blk in fn.blocks]
    envs = observed_envelopes(fn, C, addrs)
    counts_of = [dict(zip(addrs, r)) for r in C]
    assert envs and all(e.holds(c) for e in envs for c in counts_of)
    assert all(e.intercept >= 0 for e in envs)
    cost = costs_of(fn, [1, 1, 1, 5, 1, 5, 1, 1, 10_000])
    held = ipet(fn, cost, {addr(fn, 1): 100}, envelopes=envs)
    for c in counts_of:       # the skipping inputs (10,003 ticks) are worst
        assert held.bound_ticks >= sum(cost[a] * c[a] for a in addrs) - 1e-9


def test_observed_paths_off_bounds_by_the_cfg_alone():
    fn = _two_clamps()
    addrs = [blk.address for blk in fn.blocks]
    C = np.array([[1, n + 1, n, n // 20, n, n // 20, n, 1] for n in range(1, 101)])
    cost = {"f": costs_of(fn, [1, 1, 1, 10, 1, 10, 1, 1])}
    cols = [("f", a) for a in addrs]
    on = analyze_wcet({"f": fn}, "f", cost, C, cols, loop_facts={"0x1010": 100})
    off = analyze_wcet({"f": fn}, "f", cost, C, cols, loop_facts={"0x1010": 100},
                       observed_paths=False)
    assert on.bound_ticks < off.bound_ticks
    assert on.envelopes and not off.envelopes
    assert any("path envelope" in w for w in on.warnings)


def test_a_conditional_tail_call_calls_on_its_exit_edge_only():
    """SHA512's entry block ends in ``jne <its XOP variant>`` and falls through to the
    generic code: the variant is called on the block's exit edge only.  With a cap of 0
    calls (no input ran the variant) the cap on the block's count forbade the entry block
    ("no execution satisfies the constraints"), and every execution of the block was
    charged the variant's WCET."""
    from dataclasses import replace

    # 0 entry: jne variant (tail, exit) | fall through to 1 -> 2 exit
    f = make_fn("f", 0x1000, 3, [(0, 1), (1, 2)], [0, 2],
                calls=[(0, CALL_INTERNAL, 0x9000, "variant")])
    f = replace(f, calls=tuple(replace(c, tail=True) for c in f.calls))
    costs = costs_of(f, [10, 20, 30])
    # with the variant's calls capped at 0 (never seen), the generic path: 10 + 20 + 30
    r = ipet(f, costs, {}, callee_wcet={0x9000: 1000.0}, call_caps={0x9000: 0})
    assert r.bound_ticks == pytest.approx(60.0)
    assert r.block_counts[addr(f, 0)] == 1
    # uncapped, the worst path takes the tail call: 10 + 1000, never both
    r = ipet(f, costs, {}, callee_wcet={0x9000: 1000.0})
    assert r.bound_ticks == pytest.approx(1010.0)
    assert r.block_counts[addr(f, 1)] == 0
    assert [c.count for c in r.calls if c.target == 0x9000] == [1]
    # an unconditional tail call is charged per execution, as before
    g = make_fn("g", 0x2000, 2, [(0, 1)], [1], calls=[(1, CALL_INTERNAL, 0x9000, "v")])
    g = replace(g, calls=tuple(replace(c, tail=True) for c in g.calls))
    r = ipet(g, costs_of(g, [5, 7]), {}, callee_wcet={0x9000: 100.0})
    assert r.bound_ticks == pytest.approx(112.0)


def test_only_a_fact_beyond_the_inputs_releases_its_loop_from_the_observed_limits():
    from wcetfit.wcet.analyze import _beyond_observed
    from wcetfit.wcet.result import LoopBound

    seen = LoopBound(per_entry=127, total=127, source="observed")
    assert not _beyond_observed(LoopBound(per_entry=127, source="fact"), seen)
    assert not _beyond_observed(LoopBound(per_entry=100, total=120, source="fact"), seen)
    assert _beyond_observed(LoopBound(per_entry=128, source="fact"), seen)
    assert _beyond_observed(LoopBound(per_entry=None, total=200, source="fact"), seen)
    # per entry not observable (a loop entered several times per call): any figure is new
    assert _beyond_observed(LoopBound(per_entry=9, source="fact"),
                            LoopBound(per_entry=None, total=127, source="observed"))
    assert _beyond_observed(LoopBound(per_entry=9, source="fact"), None)


def test_require_lets_the_blocks_no_input_ran_run_whatever_the_inputs_kept():
    """libdeflate's crc32 under ``[wcet] unreached = "require"``: every input took the long
    path, the relation N(long) = N(entry) they kept forbade the early return no input ran,
    and its ceiling cost never reached the bound.  Under "require" the root's observed
    count relations are not used while one of its blocks never ran."""
    fn = make_fn("r", 0x1000, 4, [(0, 1), (0, 2), (1, 3), (2, 3)], [3])
    X = np.array([simulate(fn, [1])] * 4)              # block 1 never runs
    cols = [("r", b.address) for b in fn.blocks]
    costs = {"r": costs_of(fn, [1, 50, 5, 1])}
    assert analyze_wcet({"r": fn}, "r", costs, X, cols).bound_ticks == 1 + 5 + 1
    assert analyze_wcet({"r": fn}, "r", costs, X, cols,
                        unreached="require").bound_ticks == 1 + 50 + 1
