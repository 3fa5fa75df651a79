"""The robust IPET (issue #15): observed totals, irreducible regions, the solver's answer
checked, every missing bound in one error, the unreached-code policy.  Hand-built CFGs
whose worst case is known by construction or by enumerating the paths."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from test_wcet import addr, costs_of, make_fn, simulate
from wcetfit import target as tg
from wcetfit.errors import TargetError, WcetError
from wcetfit.model import CALL_INTERNAL, Block, FunctionModel, Instruction
from wcetfit.static.structure import loop_forest
from wcetfit.wcet import solve as wsolve
from wcetfit.wcet.analyze import analyze_wcet
from wcetfit.wcet.flow import Flow
from wcetfit.wcet.interproc import wcet_bound
from wcetfit.wcet.ipet import ipet
from wcetfit.wcet.loops import observed_loop_bounds
from wcetfit.wcet.result import SOURCE_OBSERVED, LoopBound, UnboundedLoopError


# --- observed totals ---------------------------------------------------------------------------

def gated_inner_loop():
    """0 -> 1 (outer header M) -> 2 branch -> 3 (cheap) -> 1 | 4 -> 5 (inner loop L, a self
    loop) -> 7 -> 1; 1 -> 6 exit."""
    return make_fn("m", 0x6000, 8,
                   [(0, 1), (1, 2), (1, 6), (2, 3), (2, 4), (3, 1), (4, 5), (5, 5), (5, 7),
                    (7, 1)], [6],
                   loops=[(1, [1, 2, 3, 4, 5, 7], [(3, 1), (7, 1)], [(0, 1)], None, 1),
                          (5, [5], [(5, 5)], [(4, 5)], 1, 2)])


def test_observed_total_stops_one_inputs_run_times_anothers_entries():
    fn = gated_inner_loop()
    # successors in edge order: 1: [2, 6]; 2: [3, 4]; 5: [5, 7]
    x = simulate(fn, [0, 0] * 10 + [1])                     # M 10 times, never into L
    y = simulate(fn, [0, 1] + [0] * 50 + [1] + [1])         # M once, L 50 back edges
    counts = np.array([x, y])
    ob = observed_loop_bounds(fn, counts, fn.block_addresses)
    m, l_ = ob[addr(fn, 1)], ob[addr(fn, 5)]
    assert (m.per_entry, m.total) == (10, 10) and (l_.per_entry, l_.total) == (50, 50)
    assert m.source == l_.source == SOURCE_OBSERVED
    cost = np.array([1, 1, 1, 1, 1, 10, 1, 1.0])
    r = ipet(fn, costs_of(fn, cost), ob)
    # The worst path under these limits, built by hand: ten passes through L's branch,
    # L's 50 back edges all in the first; its cost is the bound.
    worst = simulate(fn, [0, 1] + [0] * 50 + [1] + [0, 1, 1] * 9 + [1])
    assert r.bound_ticks == pytest.approx(worst @ cost) == 643
    assert r.bound_ticks >= max(counts @ cost)
    assert r.block_counts[addr(fn, 5)] == 60
    # per entry alone: 10 entries × 50 (one input's run × the other's entries)
    alone = {h: LoopBound(per_entry=b.per_entry) for h, b in ob.items()}
    assert ipet(fn, costs_of(fn, cost), alone).block_counts[addr(fn, 5)] == 510


# --- irreducible regions ------------------------------------------------------------------------

def forest_fn(name, base, n, edges, exits):
    """A model whose loops come from the static stage's loop_forest (irreducible included)."""
    A = lambda i: base + 0x10 * i  # noqa: E731
    succ = {A(i): [] for i in range(n)}
    pred = {A(i): [] for i in range(n)}
    for s, d in edges:
        succ[A(s)].append(A(d))
        pred[A(d)].append(A(s))
    loops = loop_forest(succ, pred, A(0))
    blocks = tuple(Block(A(i), 0x10, (Instruction(A(i), 0x10, "nop", ""),)) for i in range(n))
    return FunctionModel(name=name, address=base, blocks=blocks,
                         edges=tuple((A(s), A(d)) for s, d in edges), entry=A(0),
                         exits=tuple(A(e) for e in exits), loops=loops, calls=(),
                         jump_tables=(), coexec_classes=(), max_rank=0)


def enumerate_paths(fn, limit_back):
    """Every execution as counts, the loops' back edges (into their headers from inside)
    taken at most ``limit_back`` times in all."""
    back = {e for lp in fn.loops for e in lp.back_edges}
    pos = {b.address: i for i, b in enumerate(fn.blocks)}
    out = []

    def walk(b, counts, used):
        counts = counts.copy()
        counts[pos[b]] += 1
        if b in fn.exits:
            out.append(counts)
        for d in fn.successors(b):
            k = used + ((b, d) in back)
            if k <= limit_back:
                walk(d, counts, k)
    walk(fn.entry, np.zeros(len(fn.blocks), dtype=np.int64), 0)
    return out


def test_irreducible_region_bounded_from_observed_behaviour():
    # 0 -> 1 | 2; 1 <-> 2 (a cycle entered at both blocks); 1 -> 3, 2 -> 3 exit
    fn = forest_fn("irr", 0x7000, 4, [(0, 1), (0, 2), (1, 2), (2, 1), (1, 3), (2, 3)], [3])
    (lp,) = fn.loops
    assert not lp.reducible
    # inputs: 0 1 2 1 2 3 (two back edges into the header), 0 2 3, 0 2 1 3 (one)
    pos = {b.address: i for i, b in enumerate(fn.blocks)}

    def run(path):
        c = np.zeros(4, dtype=np.int64)
        for i in path:
            c[pos[addr(fn, i)]] += 1
        return c
    counts = np.array([run([0, 1, 2, 1, 2, 3]), run([0, 2, 3]), run([0, 2, 1, 3])])
    cost = np.array([1, 7, 3, 1.0])
    res = analyze_wcet({"irr": fn}, "irr", {"irr": costs_of(fn, cost)}, counts,
                       [("irr", a) for a in fn.block_addresses], observed_paths=False,
                       use_relations=False)
    b = res.functions["irr"].loops[0].bound
    assert b.source == SOURCE_OBSERVED and b.total is not None
    # the truth: the best path taking the header's back edges at most as often as observed
    paths = enumerate_paths(fn, b.total)
    assert res.bound_ticks == pytest.approx(max(p @ cost for p in paths))
    assert res.bound_ticks >= max(counts @ cost)


def test_cycle_outside_loops_bounded_per_region_not_per_block():
    # the model has no loop for the cycle 1 <-> 2: only the observed block limits bound it
    fn = make_fn("c", 0x7800, 4, [(0, 1), (0, 2), (1, 2), (2, 1), (1, 3), (2, 3)], [3])
    cols = [("c", a) for a in fn.block_addresses]
    a = np.array([1, 2, 1, 1])            # 0 1 2 1 3
    b = np.array([1, 1, 2, 1])            # 0 2 1 2 3
    cost = np.array([1, 5, 5, 1.0])
    res = analyze_wcet({"c": fn}, "c", {"c": costs_of(fn, cost)}, np.array([a, b]), cols,
                       observed_paths=False, use_relations=False)
    # each block at its own maximum (2 and 2) would be 4 region executions; the region's
    # observed total is 3
    assert res.bound_ticks == 1 + 3 * 5 + 1
    assert any("irreducible" in w for w in res.warnings)


# --- the solver's answer is checked ---------------------------------------------------------

def test_violations_recomputes_every_constraint():
    p = wsolve.Problem(np.array([1.0, 1.0]), np.zeros(2), np.array([np.inf, 0.0]),
                       [wsolve.Row({0: 1.0, 1: 1.0}, -np.inf, 3.0, "loop L: ≤ 3 (observed)")])
    assert wsolve.violations(p, np.array([3, 0])) == []
    bad = wsolve.violations(p, np.array([4, 0]))
    assert len(bad) == 1 and bad[0].startswith("loop L")
    assert any("variable bounds" in v for v in wsolve.violations(p, np.array([1, 1])))
    assert "integrality" in wsolve.violations(p, np.array([1.5, 0]))


class _Wrong:
    """A solver answer: flows as given, status optimal."""

    def __init__(self, x):
        self.x, self.status, self.message = np.asarray(x, dtype=float), 0, "wrong on purpose"
        self.mip_dual_bound = None


def test_a_wrong_solver_answer_is_rejected_and_solved_again(monkeypatch):
    fn = make_fn("f", 0x1000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    cost = np.array([1, 2, 5, 1.0])
    truth = ipet(fn, costs_of(fn, cost), {addr(fn, 1): 4})
    real = wsolve._milp
    flow = Flow(fn)
    calls = []

    def first_wrong(p, **kw):
        calls.append(kw.get("presolve"))
        if len(calls) == 1:
            # the loop taken 9 times: breaks its bound of 4 per entry
            f = np.zeros(len(flow.edges))
            for e, v in {(0x1000, 0x1010): 1, (0x1010, 0x1020): 9, (0x1020, 0x1010): 9,
                         (0x1010, 0x1030): 1}.items():
                f[flow.var[e]] = v
            f[flow.source_var] = 1
            f[flow.var[(0x1030, "sink")]] = 1
            return _Wrong(f), 1.0
        return real(p, **kw)
    monkeypatch.setattr(wsolve, "_milp", first_wrong)
    r = ipet(fn, costs_of(fn, cost), {addr(fn, 1): 4})
    assert r.bound_ticks == truth.bound_ticks == 1 + 5 * 2 + 4 * 5 + 1
    assert calls[:2] == [True, False]
    assert any("rejected" in w and "per entry" in w for w in r.warnings)


def test_an_optimum_below_a_measured_input_is_a_solver_failure(monkeypatch):
    fn = make_fn("f", 0x1000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    cost = np.array([1, 2, 5, 1.0])
    flow = Flow(fn)
    zero_trips = np.zeros(len(flow.edges))             # feasible, but not the maximum
    for e in [(0x1000, 0x1010), (0x1010, 0x1030), (0x1030, "sink")]:
        zero_trips[flow.var[e]] = 1
    zero_trips[flow.source_var] = 1
    monkeypatch.setattr(wsolve, "_milp", lambda p, **kw: (_Wrong(zero_trips), 1.0))
    measured = np.array([simulate(fn, [0, 0, 1])])     # two trips: 1+2·3+5·2+1
    with pytest.raises(WcetError, match="below input 0"):
        ipet(fn, costs_of(fn, cost), {addr(fn, 1): 4}, inputs=measured)
    # without the measured input the wrong answer cannot be told from a right one
    r = ipet(fn, costs_of(fn, cost), {addr(fn, 1): 4})
    assert r.bound_ticks == 1 + 2 + 1


def test_infeasible_names_the_input_and_the_constraint():
    fn = make_fn("f", 0x1000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    cost = np.array([1, 2, 5, 1.0])
    # a total bound of 3 with a relation forcing 5 trips: no execution satisfies both
    from wcetfit.wcet.result import CountRelation
    rel = CountRelation(((addr(fn, 2), 1),), 5)
    measured = np.array([simulate(fn, [0] * 5 + [1])])
    from wcetfit.wcet.result import InfeasibleError
    with pytest.raises(InfeasibleError, match=r"input 0 breaks loop f\+0x10: ≤ 3 back edges"):
        ipet(fn, costs_of(fn, cost), {addr(fn, 1): LoopBound(total=3)}, relations=(rel,),
             inputs=measured)
    # more broken inputs are counted, not listed as "breaks a constraint", and the
    # solver's status stays in the log
    three = np.array([simulate(fn, [0] * k + [1]) for k in (5, 6, 7)])
    with pytest.raises(InfeasibleError) as e:
        ipet(fn, costs_of(fn, cost), {addr(fn, 1): LoopBound(total=3)}, relations=(rel,),
             inputs=three)
    msg = str(e.value)
    assert "2 more of the 3 inputs predicted slowest break the constraints too" in msg
    assert "HiGHS" not in msg and "presolve" not in msg


def test_unbounded_cycle_names_the_blocks_no_constraint_limits():
    fn = make_fn("f", 0x1000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    flow = Flow(fn)
    rows = [wsolve.Row({i: 1.0 for i in flow.ins[a]} | {i: -1.0 for i in flow.outs[a]},
                       0.0, 0.0, f"flow conservation at {a:#x}") for a in flow.blocks]
    cost = np.array([1.0 if s != "source" else 0.0 for s, _ in flow.edges])
    ub = np.full(len(flow.edges), np.inf)
    lb = np.zeros(len(flow.edges))
    lb[flow.source_var] = ub[flow.source_var] = 1
    p = wsolve.Problem(cost, lb, ub, rows)            # no loop bound: 1 <-> 2 runs away
    assert wsolve.solve(p).status == "unbounded"
    assert wsolve.unbounded_cycle(p, flow) == [addr(fn, 1), addr(fn, 2)]


# --- every missing bound at once; the unreached policy ---------------------------------------

def two_functions_three_loops():
    # g: 0 -> 1 self loop -> 2 exit
    g = make_fn("g", 0x5000, 3, [(0, 1), (1, 1), (1, 2)], [2],
                loops=[(1, [1], [(1, 1)], [(0, 1)], None, 1)])
    # f: 0 -> 1 loop (1 -> 2 -> 1) -> 3 -> 4 loop (4 -> 4) -> 5 calls g -> 6 exit
    f = make_fn("f", 0x4000, 7, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4), (4, 4), (4, 5),
                                  (5, 6)], [6],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1),
                       (4, [4], [(4, 4)], [(3, 4)], None, 1)],
                calls=[(5, CALL_INTERNAL, 0x5000, "g")])
    return f, g


def test_all_missing_loop_bounds_in_one_error():
    f, g = two_functions_three_loops()
    costs = {"f": costs_of(f, [1] * 7), "g": costs_of(g, [1] * 3)}
    with pytest.raises(UnboundedLoopError) as ei:
        wcet_bound({"f": f, "g": g}, "f", costs, {})
    assert set(ei.value.loops) == {"f+0x10", "f+0x40", "g+0x10"}
    assert "3 in all" in str(ei.value)


def unreached_case():
    # f: 0 -> 1 | 2; 1 -> 3; 2 -> 2 (a loop no input enters) | 3; 3 exit
    f = make_fn("u", 0x8000, 4, [(0, 1), (0, 2), (1, 3), (2, 2), (2, 3)], [3],
                loops=[(2, [2], [(2, 2)], [(0, 2)], None, 1)])
    counts = np.array([[1, 1, 0, 1]] * 3)
    cols = [("u", a) for a in f.block_addresses]
    return f, counts, cols


def test_unreached_observed_leaves_blocks_out_and_says_so():
    f, counts, cols = unreached_case()
    res = analyze_wcet({"u": f}, "u", {"u": costs_of(f, [1, 2, 100, 1])}, counts, cols)
    assert res.bound_ticks == 1 + 2 + 1
    assert res.unreached == {"u": (addr(f, 2),)} and res.unreached_policy == "observed"
    assert "no input reached" in res.warnings[0] and "u+0x20" in res.warnings[0]
    assert 'unreached = "require"' in res.warnings[0]


def test_unreached_require_asks_for_their_bounds():
    f, counts, cols = unreached_case()
    costs = {"u": costs_of(f, [1, 2, 100, 1])}
    with pytest.raises(UnboundedLoopError, match=r"u\+0x20"):
        analyze_wcet({"u": f}, "u", costs, counts, cols, unreached="require")
    res = analyze_wcet({"u": f}, "u", costs, counts, cols, unreached="require",
                       loop_facts={"u+0x20": 3}, use_relations=False, observed_paths=False)
    assert res.bound_ticks == 1 + 100 * 4 + 1 and res.unreached == {}
    assert res.unreached_policy == "require"


def test_unreached_callee_is_not_analysed():
    f, g = two_functions_three_loops()
    # f's loops run, the call block 5 and g never run: g is not analysed, its loop needs
    # no bound
    fcounts = np.array([1, 3, 2, 1, 2, 0, 1])
    cols = [("f", a) for a in f.block_addresses] + [("g", a) for a in g.block_addresses]
    counts = np.array([np.concatenate([fcounts, [0, 0, 0]])])
    # as f, with a way around the call: 4 -> 6
    f2 = make_fn("f", 0x4000, 7, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4), (4, 4), (4, 6),
                                   (4, 5), (5, 6)], [6],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1),
                        (4, [4], [(4, 4)], [(3, 4)], None, 1)],
                 calls=[(5, CALL_INTERNAL, 0x5000, "g")])
    costs = {"f": costs_of(f2, [1] * 7), "g": costs_of(g, [1] * 3)}
    res = analyze_wcet({"f": f2, "g": g}, "f", costs, counts, cols)
    assert "g" not in res.functions and res.bound_ticks == float(fcounts.sum())


def test_callee_calls_capped_by_observed_activations():
    # f's loop runs up to 10 times and may call g on each pass; the inputs called g at
    # most 3 times per call of f
    g = make_fn("g", 0x5000, 2, [(0, 1)], [1])
    f = make_fn("f", 0x4000, 5, [(0, 1), (1, 2), (2, 3), (2, 1), (3, 1), (1, 4)], [4],
                loops=[(1, [1, 2, 3], [(2, 1), (3, 1)], [(0, 1)], None, 1)],
                calls=[(3, CALL_INTERNAL, 0x5000, "g")])
    # successors: 1: [2, 4]; 2: [3, 1]
    runs = [simulate(f, [0, 1] * 10 + [1]),                  # 10 passes, no call
            simulate(f, [0, 0] * 3 + [1])]                   # 3 passes, 3 calls
    rows = [np.concatenate([r, [r[3], r[3]]]) for r in runs]
    cols = [("f", a) for a in f.block_addresses] + [("g", a) for a in g.block_addresses]
    costs = {"f": costs_of(f, [1, 1, 1, 1, 1]), "g": costs_of(g, [50, 50])}
    res = analyze_wcet({"f": f, "g": g}, "f", costs, np.array(rows), cols,
                       observed_paths=False, use_relations=False)
    top = res.functions["f"]
    (call,) = top.calls
    assert call.cap == 3 and call.count == 3
    # 11 headers, 10 branch blocks, 3 calling blocks each + g's 100, entry and exit
    assert res.bound_ticks == 1 + 11 + 10 + 3 * (1 + 100) + 1
    assert any("activations of it seen" in w for w in res.warnings)


# --- the target file ----------------------------------------------------------------------------

GOOD = """
binary = "lib.so"
functions = ["f"]
prototype = "int f(int *a, int n);"
inputs = "inputs.py"
"""


def _target(tmp_path, extra):
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    (tmp_path / "inputs.py").write_text("def generate(ctx):\n    return (ctx.ffi.NULL, 0)\n")
    (tmp_path / "wcetfit.toml").write_text(textwrap.dedent(GOOD + extra))
    return str(tmp_path)


def test_target_unreached_policy(tmp_path):
    assert tg.load_target(_target(tmp_path, "")).unreached == "observed"
    assert tg.load_target(_target(tmp_path, '[wcet]\nunreached = "require"\n')).unreached \
        == "require"
    with pytest.raises(TargetError, match=r"\[wcet\] 'unreached' is \"observed\"") as ei:
        tg.load_target(_target(tmp_path, '[wcet]\nunreached = "ignore"\n'))
    assert "\n" not in str(ei.value)


def test_callee_called_several_times_bounded_over_all_its_activations():
    # f calls g on each of its (up to 3) loop passes; g's loop runs 10 times in total per
    # call of f on input 0 (all in one activation), 3 on input 1 (once per activation)
    g = make_fn("g", 0x5000, 3, [(0, 1), (1, 1), (1, 2)], [2],
                loops=[(1, [1], [(1, 1)], [(0, 1)], None, 1)])
    f = make_fn("f", 0x4000, 4, [(0, 1), (1, 2), (1, 3), (2, 1)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INTERNAL, 0x5000, "g")])
    fc = simulate(f, [0, 0, 0, 1])
    rows = np.array([np.concatenate([fc, [3, 13, 3]]), np.concatenate([fc, [3, 6, 3]])])
    cols = [("f", a) for a in f.block_addresses] + [("g", a) for a in g.block_addresses]
    costs = {"f": costs_of(f, [1, 1, 1, 1]), "g": costs_of(g, [1, 10, 1])}
    res = analyze_wcet({"f": f, "g": g}, "f", costs, rows, cols, observed_paths=False,
                       use_relations=False)
    per_call = 1 + 11 * 10 + 1                       # g's loop total (10) in every call
    assert 9 + 3 * per_call == 345                   # what charging per call would give
    # all of g's activations at once: 3 entries, 10 back edges, 13 loop-block runs
    assert res.bound_ticks == 9 + 3 + 13 * 10 + 3 == 145
    # ... which is input 0's own predicted time: the bound is tight here
    assert res.bound_ticks == rows[0] @ np.array([1, 1, 1, 1, 1, 10, 1.0])
    assert any("all its activations bounded at once" in w for w in res.warnings)
    assert res.inlined_counts[("g", addr(g, 1))] == 13


def test_a_false_unbounded_verdict_is_called_a_solver_failure(monkeypatch):
    fn = make_fn("f", 0x1000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                 loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    real = wsolve._milp

    class _Unbounded:
        x, status, message = None, 3, "model_status is Unbounded"

    def lying(p, **kw):
        return (_Unbounded(), 1.0) if kw.get("integral", True) else real(p, **kw)
    monkeypatch.setattr(wsolve, "_milp", lying)
    with pytest.raises(WcetError, match="no cycle runs away: a solver failure") as ei:
        ipet(fn, costs_of(fn, [1, 2, 5, 1]), {addr(fn, 1): 4})
    assert not isinstance(ei.value, UnboundedLoopError)
