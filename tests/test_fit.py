"""Tests of the fit (wcetfit.fit.solve) against known truth: simulated CFG executions (tests/cfgsim.py),
known block costs and overheads, Gaussian noise, 26-tick TSC quantization, interrupts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wcetfit.errors import FitError
from wcetfit.fit.result import (KIND_OBSERVED, KIND_OVERHEAD, KIND_STRUCTURAL, KIND_UNCLASSIFIED,
                          KIND_UNEXECUTED, FitOptions)
from wcetfit.fit.solve import fit_function

import cfgsim

QUIET = FitOptions(folds=0)
# the unconstrained fit, for the tests of its own machinery (nonneg, intervals, weights)
LINEAR = FitOptions(folds=0, costs="linear")


def addrs_for(n: int) -> list[int]:
    return [0x1140 + 0x10 * k for k in range(n)]


def spans_equal(a: np.ndarray, b: np.ndarray, tol: float = 1e-8) -> bool:
    """Whether the rows of a and b span the same space."""
    ra = np.linalg.matrix_rank(a, tol)
    rb = np.linalg.matrix_rank(b, tol)
    return ra == rb == np.linalg.matrix_rank(np.vstack([a, b]), tol)


def combo_vector(c, addrs, configs=(0,)) -> np.ndarray:
    pos = {a: i for i, a in enumerate(addrs)}
    v = np.zeros(len(addrs) + len(configs))
    for a, x in c.coefficients:
        v[pos[a]] = x
    for k, x in c.overhead_coefficients:
        v[len(addrs) + list(configs).index(k)] = x
    return v


def spanning_counts(cfg, rng, n_inputs=200, **kw):
    """Simulated counts that exercise the whole structural space (the test's job: make
    sure any deficiency the fit reports is the CFG's, not the sample's)."""
    R = cfg.structural_row_space()
    for _ in range(20):
        counts = cfgsim.simulate_counts(cfg, n_inputs, rng, **kw)
        X = np.hstack([counts, np.ones((n_inputs, 1))])
        if np.linalg.matrix_rank(X) == R.shape[1]:
            return counts
        n_inputs *= 2
    pytest.fail("could not simulate spanning inputs")


def group_sets(res, addrs) -> list[list[int]]:
    """The fit's groups as sorted lists of block indices, -1 standing for the overhead ε,
    in the order of :func:`expected_structure`'s comparison."""
    got = []
    for g in res.groups:
        s = {addrs.index(a) for a in g.blocks}
        if g.configs:
            s.add(-1)
        got.append(sorted(s))
    return sorted(got)


def expected_structure(cfg):
    """From the CFG alone: rank, blocks estimable alone, and groups (sets of block
    indices, with -1 standing for ε) — components of the structural null projector."""
    R = cfg.structural_row_space()               # [n_blocks+1, rank]
    p = R.shape[0]
    Q = np.eye(p) - R @ R.T
    est_alone = [k for k in range(p - 1) if Q[k, k] < 1e-9]
    idx = [k for k in range(p) if Q[k, k] >= 1e-9]
    groups: list[set[int]] = []
    seen: set[int] = set()
    for k in idx:
        if k in seen:
            continue
        comp, todo = {k}, [k]
        while todo:
            i = todo.pop()
            for j in idx:
                if j not in comp and abs(Q[i, j]) > 1e-9:
                    comp.add(j)
                    todo.append(j)
        seen |= comp
        groups.append({(-1 if j == p - 1 else j) for j in comp})
    return R.shape[1], set(est_alone), groups


# --- the DESIGN.md example -----------------------------------------------------------------

def diamond_in_loop_counts(rng, n_inputs=80):
    """for (i < n) { if (i&1) A else B } with the entry block: columns entry, test, A, B;
    N_test = N_A + N_B in every input."""
    n = rng.integers(0, 40, n_inputs)
    a = rng.binomial(n, rng.uniform(0.2, 0.8, n_inputs))
    return np.column_stack([np.ones(n_inputs, dtype=np.int64), n, a, n - a])


def test_design_example_only_paths_through_the_body_are_estimable():
    rng = np.random.default_rng(7)
    counts = diamond_in_loop_counts(rng)
    costs = np.array([40.0, 9.0, 13.0, 21.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 60.0, rng)
    addrs = [0x1149, 0x1160, 0x1170, 0x1180]
    basis = np.array([[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, -1]])
    res = fit_function(counts, ticks, addrs, structural_basis=basis, options=QUIET)
    assert res.rank == 3 and res.max_rank == 3
    assert not any(b.estimable for b in res.blocks)
    body = [g for g in res.groups if set(g.blocks) == {0x1160, 0x1170, 0x1180}]
    assert len(body) == 1 and body[0].kind == KIND_STRUCTURAL
    texts = sorted(c.text.split(" = ")[0] for c in body[0].combinations)
    # the two paths through the body, test + A and test + B, in the user's words
    assert texts == ["0x1160 + 0x1170", "0x1160 + 0x1180"]
    truth = {0x1149: 40.0, 0x1160: 9.0, 0x1170: 13.0, 0x1180: 21.0}
    for c in body[0].combinations:
        assert abs(c.value_ticks - c.truth(truth, {0: 60.0})) <= c.ci95_ticks
    over = [g for g in res.groups if g.kind == KIND_OVERHEAD]
    assert len(over) == 1 and over[0].blocks == (0x1149,) and over[0].configs == (0,)
    (o,) = res.overhead
    assert o.blocks == ((0x1149, 1.0),)
    assert abs(o.value_ticks - 100.0) <= o.ci95_ticks
    assert "confounded" in o.text
    # the particular solution gives the always-once block 0: its time is in the overhead
    assert res.block(0x1149).solution_ticks == pytest.approx(0.0, abs=1e-9)
    assert res.overhead_ticks[0] == pytest.approx(o.value_ticks)


# --- random CFGs: rank and groups match the construction exactly ---------------------------

@pytest.mark.parametrize("seed", range(25))
def test_rank_and_groups_match_the_cfg(seed):
    rng = np.random.default_rng(1000 + seed)
    cfg = cfgsim.make_cfg(cfgsim.random_tree(rng))
    counts = spanning_counts(cfg, rng)
    costs = rng.uniform(3.0, 60.0, cfg.n_blocks)
    ticks = cfgsim.simulate_ticks(counts, costs, 80.0, rng)
    addrs = addrs_for(cfg.n_blocks)
    res = fit_function(counts, ticks, addrs, structural_basis=cfg.structural_basis(),
                       options=QUIET)
    rank, alone, groups = expected_structure(cfg)
    assert res.rank == rank == res.max_rank
    assert {k for k, b in enumerate(res.blocks) if b.estimable} == alone
    for g in res.groups:
        assert g.kind in (KIND_STRUCTURAL, KIND_OVERHEAD)
        assert (g.kind == KIND_OVERHEAD) == bool(g.configs)
        assert g.observed_deficiency == 0
    assert group_sets(res, addrs) == sorted(map(sorted, groups))
    # the combinations of each group span exactly the structural row space on it
    R = cfg.structural_row_space()
    allc = [combo_vector(c, addrs) for g in res.groups for c in g.combinations]
    allc += [np.eye(cfg.n_blocks + 1)[k] for k in alone]
    assert spans_equal(np.array(allc), R.T, tol=1e-6)


# --- coverage ---------------------------------------------------------------------------------

def random_trial(trial: int):
    """(rng, cfg, counts, costs, ε) of seeded coverage trial ``trial``: a random CFG of
    budget 3, 60 inputs of up to 5 iterations, costs 2–50 ticks, ε 40–120; ``rng``
    continues the same stream for the timings."""
    rng = np.random.default_rng(5000 + trial)
    cfg = cfgsim.make_cfg(cfgsim.random_tree(rng, budget=3))
    counts = cfgsim.simulate_counts(cfg, 60, rng, max_trip=5)
    costs = rng.uniform(2.0, 50.0, cfg.n_blocks)
    eps = float(rng.uniform(40, 120))
    return rng, cfg, counts, costs, eps


def test_intervals_cover_the_truth_in_200_trials():
    """95 % intervals of every estimable quantity cover the truth in ≥ 90 % of cases."""
    covered = total = 0
    trial_ok = 0
    for trial in range(200):
        rng, cfg, counts, costs, eps = random_trial(trial)
        ticks = cfgsim.simulate_ticks(counts, costs, eps, rng)
        addrs = addrs_for(cfg.n_blocks)
        res = fit_function(counts, ticks, addrs, options=QUIET)
        truth = dict(zip(addrs, costs))
        hits = [abs(q.value_ticks - q.truth(truth, {0: eps})) <= q.ci95_ticks
                for q in res.estimable_quantities()]
        covered += sum(hits)
        total += len(hits)
        trial_ok += all(hits)
    rate = covered / total
    assert total > 400
    assert rate >= 0.90, f"coverage {rate:.3f} over {total} quantities"


# --- identical columns, observed vs structural, unexecuted -----------------------------------

def test_identical_columns_merge_into_one_unknown():
    rng = np.random.default_rng(3)
    n = 100
    m = rng.integers(0, 30, n)
    k = rng.integers(0, 30, n)
    # entry (once), two blocks that always run together m times, one block k times
    counts = np.column_stack([np.ones(n, np.int64), m, m, k])
    costs = np.array([30.0, 7.0, 11.0, 5.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 50.0, rng)
    addrs = [0x2000, 0x2010, 0x2020, 0x2030]
    basis = np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]])
    res = fit_function(counts, ticks, addrs, structural_basis=basis, options=QUIET)
    assert res.unknowns == 4                     # entry, {0x2010, 0x2020}, 0x2030, ε
    assert res.rank == 3
    assert res.block(0x2030).estimable
    assert abs(res.block(0x2030).cost_ticks - 5.0) <= res.block(0x2030).ci95_ticks
    for a in (0x2010, 0x2020):
        assert not res.block(a).estimable and res.block(a).cost_ticks is None
    g = res.groups[res.block(0x2010).group]
    assert g.blocks == (0x2010, 0x2020) and g.kind == KIND_STRUCTURAL
    (c,) = g.combinations
    assert c.text.startswith("0x2010 + 0x2020 = ")
    assert abs(c.value_ticks - 18.0) <= c.ci95_ticks
    # identical blocks share their sum in the particular solution
    assert res.block(0x2010).solution_ticks == pytest.approx(res.block(0x2020).solution_ticks)


def tied_loop():
    """do { if (..) A1 else B1; if (..) A2 else B2 } while (..): the CFG lets the two
    tests differ; the tied inputs below never make them."""
    return cfgsim.make_cfg(("dowhile", ("seq", ("ifelse", ("block",), ("block",)),
                                        ("ifelse", ("block",), ("block",)))))


def test_observed_group_gets_advice_and_structural_does_not():
    cfg = tied_loop()
    names = {v: k for k, v in cfg.names.items()}
    t1, t2 = names["testd.0"], names["testd.1"]
    a1, a2 = names["bd.0t"], names["bd.1t"]
    rng = np.random.default_rng(11)
    counts = cfgsim.simulate_counts(cfg, 150, rng, tied={t2: t1})
    assert np.array_equal(counts[:, a1], counts[:, a2])
    costs = rng.uniform(5, 40, cfg.n_blocks)
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng)
    addrs = addrs_for(cfg.n_blocks)
    res = fit_function(counts, ticks, addrs, structural_basis=cfg.structural_basis(),
                       options=QUIET)
    obs = [g for g in res.groups if g.kind == KIND_OBSERVED]
    assert len(obs) == 1
    g = obs[0]
    assert addrs[a1] in g.blocks and addrs[a2] in g.blocks
    # A1 = A2 in every input (and so B1 = B2: A + B = the loop count, structurally)
    assert g.observed_deficiency == 1
    assert g.advice.startswith("vary the inputs so that")
    b1, b2 = names["bd.0e"], names["bd.1e"]
    pair_a = f"{addrs[a1]:#x}" in g.advice and f"{addrs[a2]:#x}" in g.advice
    pair_b = f"{addrs[b1]:#x}" in g.advice and f"{addrs[b2]:#x}" in g.advice
    assert pair_a or pair_b
    assert len(g.relations) == 1 and g.relations[0].count("N(") == 2
    # with independent tests the same CFG has no observed group
    counts2 = spanning_counts(cfg, rng, 150)
    ticks2 = cfgsim.simulate_ticks(counts2, costs, 70.0, rng)
    res2 = fit_function(counts2, ticks2, addrs, structural_basis=cfg.structural_basis(),
                        options=QUIET)
    assert all(g.kind in (KIND_STRUCTURAL, KIND_OVERHEAD) for g in res2.groups)
    assert all(g.advice is None for g in res2.groups)
    assert res2.rank == res.rank + 1
    # without a structural basis nobody can tell: "unclassified", with a conditional advice
    res3 = fit_function(counts, ticks, addrs, options=QUIET)
    kinds = {g.kind for g in res3.groups}
    assert KIND_UNCLASSIFIED in kinds and KIND_OBSERVED not in kinds
    assert res3.max_rank is None


def test_unexecuted_block_is_its_own_kind():
    cfg = cfgsim.make_cfg(("seq", ("if", ("block",)), ("while", ("block",))))
    names = {v: k for k, v in cfg.names.items()}
    t = names["test.0"]
    never = names["b.0t"]
    rng = np.random.default_rng(5)
    counts = cfgsim.simulate_counts(cfg, 80, rng, fixed={t: 0.0})
    assert counts[:, never].sum() == 0
    costs = rng.uniform(5, 40, cfg.n_blocks)
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng)
    addrs = addrs_for(cfg.n_blocks)
    res = fit_function(counts, ticks, addrs, structural_basis=cfg.structural_basis(),
                       options=QUIET)
    b = res.block(addrs[never])
    assert not b.estimable and b.cost_ticks is None and b.solution_ticks is None
    g = res.groups[b.group]
    assert g.kind == KIND_UNEXECUTED and g.blocks == (addrs[never],)
    assert "no input executed" in g.advice
    x = counts[0].copy()
    assert np.isfinite(res.predict(x))
    x[never] = 1
    assert math.isnan(res.predict(x))
    assert not res.predictable(x)
    assert res.predict(x, unknown="zero") == pytest.approx(res.predict(counts[0]) +
                                                           0.0 * x[never])


# --- non-negativity ----------------------------------------------------------------------------

def test_nonneg_never_touches_non_estimable_directions():
    rng = np.random.default_rng(21)
    counts = diamond_in_loop_counts(rng, 120)
    # test + A = 30, test + B = 2: the minimum-norm split makes B negative although every
    # estimable quantity is positive; non-negativity must not change anything
    costs = np.array([40.0, 1.0, 29.0, 1.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 60.0, rng, sigma0=1.0, quantum=0.0,
                                  outlier_rate=0.0)
    addrs = [0x10, 0x20, 0x30, 0x40]
    plain = fit_function(counts, ticks, addrs, options=LINEAR)
    nn = fit_function(counts, ticks, addrs, options=FitOptions(folds=0, costs="linear", nonneg=True))
    assert plain.block(0x40).solution_ticks < 0          # the arbitrary split is negative
    assert nn.nonneg_active == 0
    np.testing.assert_allclose(nn.solution, plain.solution, atol=1e-6)
    np.testing.assert_allclose(nn.overhead_solution, plain.overhead_solution, atol=1e-6)


def test_nonneg_clamps_an_estimable_block():
    rng = np.random.default_rng(22)
    n = 60
    counts = np.column_stack([np.ones(n, np.int64), rng.integers(0, 50, n),
                              rng.integers(0, 50, n)])
    costs = np.array([30.0, 10.0, 0.0])              # a free block, true cost 0
    found_negative = False
    for seed in range(40):
        r = np.random.default_rng(seed)
        ticks = cfgsim.simulate_ticks(counts, costs, 50.0, r, sigma0=20.0, quantum=0.0,
                                      outlier_rate=0.0)
        plain = fit_function(counts, ticks, [1, 2, 3], options=LINEAR)
        if plain.block(3).cost_ticks < 0:
            found_negative = True
            nn = fit_function(counts, ticks, [1, 2, 3], options=FitOptions(folds=0, costs="linear", nonneg=True))
            assert nn.nonneg_active >= 1
            assert nn.block(3).cost_ticks == pytest.approx(0.0, abs=1e-6)
            assert nn.block(2).cost_ticks >= 0
            break
    assert found_negative


# --- prediction ------------------------------------------------------------------------------

def test_predict_is_invariant_to_the_particular_solution():
    rng = np.random.default_rng(31)
    cfg = cfgsim.make_cfg(("seq", ("ifelse", ("block",), ("block",)),
                           ("while", ("ifelse", ("block",), ("block",)))))
    counts = spanning_counts(cfg, rng, 150)
    costs = rng.uniform(3, 50, cfg.n_blocks)
    ticks = cfgsim.simulate_ticks(counts, costs, 90.0, rng)
    addrs = addrs_for(cfg.n_blocks)
    res = fit_function(counts, ticks, addrs, options=QUIET)
    X = np.hstack([counts, np.ones((counts.shape[0], 1))])
    _, s, vt = np.linalg.svd(X)
    null = vt[np.sum(s > 1e-9):]                      # directions the data cannot see
    assert null.shape[0] == cfg.n_blocks + 1 - res.rank
    sol = np.concatenate([res.solution, res.overhead_solution])
    other = sol + rng.normal(0, 50, null.shape[0]) @ null
    fresh = cfgsim.simulate_counts(cfg, 30, rng)      # new inputs, same count space
    pred = res.predict(fresh)
    alt = np.hstack([fresh, np.ones((30, 1))]) @ other
    np.testing.assert_allclose(pred, alt, rtol=1e-9, atol=1e-6)
    assert np.all(res.predictable(fresh))
    true = fresh @ costs + 90.0
    half = res.predict_ci95(fresh)
    # one fit's errors are shared by all its predictions: a loose check here, the coverage
    # of prediction intervals over many fits is measured by bench/fit.py
    assert np.all(np.abs(pred - true) <= 3 * half)
    assert res.predict(fresh[0]) == pytest.approx(pred[0])


# --- configurations ----------------------------------------------------------------------------

def test_two_configurations_have_separate_overheads():
    rng = np.random.default_rng(41)
    cfg = cfgsim.make_cfg(("while", ("ifelse", ("block",), ("block",))))
    c0 = spanning_counts(cfg, rng, 120)
    c1 = c0.copy()
    c1[:, cfg.exit] = 0          # configuration 1 stops the clock before the exit block
    costs = rng.uniform(5, 40, cfg.n_blocks)
    eps = {0: 60.0, 5: 140.0}
    t0 = cfgsim.simulate_ticks(c0, costs, eps[0], rng)
    t1 = cfgsim.simulate_ticks(c1, costs, eps[5], rng)
    counts = np.vstack([c0, c1])
    ticks = np.vstack([t0, t1])
    cfg_ids = np.array([0] * 120 + [5] * 120)
    addrs = addrs_for(cfg.n_blocks)
    res = fit_function(counts, ticks, addrs, config_ids=cfg_ids, options=QUIET)
    assert res.configs == (0, 5)
    assert set(res.overhead_ticks) == {0, 5}
    truth = dict(zip(addrs, costs))
    for o in res.overhead:
        v = sum(c * truth[a] for a, c in o.blocks) + eps[o.config]
        assert abs(o.value_ticks - v) <= o.ci95_ticks, o.text
    by = {o.config: o for o in res.overhead}
    assert addrs[cfg.exit] in dict(by[0].blocks) and addrs[cfg.exit] not in dict(by[5].blocks)
    assert "ε[5]" in by[5].text
    # the exit block is now separable from the entry: splitting did its job
    assert res.rank == 4
    # predictions per configuration
    p0 = res.predict(c0[:5], 0)
    p1 = res.predict(c1[:5], 5)
    assert np.all(np.abs(p0 - (c0[:5] @ costs + 60.0)) < 10)
    assert np.all(np.abs(p1 - (c1[:5] @ costs + 140.0)) < 10)
    with pytest.raises(FitError):
        res.predict(c0[:1], 3)


# --- robustness ------------------------------------------------------------------------------

def single_loop(rng, n=200):
    k = rng.integers(0, 60, n)
    m = rng.integers(0, 30, n)
    return np.column_stack([np.ones(n, np.int64), k, m])


def test_outlier_rows_are_rejected_with_reasons():
    rng = np.random.default_rng(51)
    counts = single_loop(rng)
    costs = np.array([25.0, 12.0, 31.0])
    # one repeat per input: interrupts cannot be clipped inside inputs, only as rows
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, repeats=1, outlier_rate=0.03)
    res = fit_function(counts, ticks, [1, 2, 3], options=QUIET)
    assert res.rejected, "interrupted rows must be rejected"
    assert all(r.reason.startswith("residual") for r in res.rejected)
    true_t = counts @ costs + 70.0
    bad = np.flatnonzero(ticks[:, 0] - true_t > 500)
    assert set(bad) <= {r.input for r in res.rejected}
    assert len(res.rejected) <= len(bad) + 3
    for a, c in ((2, 12.0), (3, 31.0)):
        b = res.block(a)
        assert abs(b.cost_ticks - c) <= b.ci95_ticks
    raw = fit_function(counts, ticks, [1, 2, 3], options=FitOptions(folds=0, robust="none"))
    assert not raw.rejected
    assert max(abs(raw.block(2).cost_ticks - 12.0), abs(raw.block(3).cost_ticks - 31.0)) > \
        max(abs(res.block(2).cost_ticks - 12.0), abs(res.block(3).cost_ticks - 31.0))


def test_interrupted_repeats_are_clipped_inside_inputs():
    rng = np.random.default_rng(52)
    counts = single_loop(rng)
    costs = np.array([25.0, 12.0, 31.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, repeats=7, outlier_rate=0.02)
    res = fit_function(counts, ticks, [1, 2, 3], options=QUIET)
    n_int = int(np.sum(ticks - (counts @ costs + 70.0)[:, None] > 500))
    assert n_int > 0 and res.repeats_discarded >= n_int
    assert res.repeats_total == ticks.size


def test_call_rows_agree_with_input_rows():
    rng = np.random.default_rng(53)
    counts = single_loop(rng, 150)
    costs = np.array([25.0, 12.0, 31.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, repeats=5)
    ticks[3, 2] = np.nan
    a = fit_function(counts, ticks, [1, 2, 3], options=QUIET)
    b = fit_function(counts, ticks, [1, 2, 3], options=FitOptions(folds=0, rows="call"))
    assert b.row_mode == "call" and b.rows_total == ticks.size - 1
    assert any(r.call is not None for r in b.rejected)
    for addr, c in ((2, 12.0), (3, 31.0)):
        assert abs(b.block(addr).cost_ticks - c) <= 3 * b.block(addr).ci95_ticks
        # equal repeats per input: the same estimate, whichever rows
        assert abs(a.block(addr).cost_ticks - b.block(addr).cost_ticks) < \
            0.2 * a.block(addr).ci95_ticks
        assert b.block(addr).ci95_ticks == pytest.approx(a.block(addr).ci95_ticks, rel=0.3)


def test_missing_timings():
    rng = np.random.default_rng(54)
    counts = single_loop(rng, 80)
    ticks = cfgsim.simulate_ticks(counts, np.array([25.0, 12.0, 31.0]), 70.0, rng)
    ticks[5, :] = np.nan
    ticks[6, 1:] = np.nan
    res = fit_function(counts, ticks, [1, 2, 3], options=QUIET)
    assert [r.input for r in res.rejected if r.reason.startswith("no valid")] == [5]
    assert res.rows_used <= 79


# --- intervals -------------------------------------------------------------------------------

def test_bootstrap_intervals():
    rng = np.random.default_rng(61)
    counts = single_loop(rng, 120)
    costs = np.array([25.0, 12.0, 31.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng)
    s = fit_function(counts, ticks, [1, 2, 3], options=LINEAR)
    b = fit_function(counts, ticks, [1, 2, 3],
                     options=FitOptions(folds=0, costs="linear", intervals="bootstrap", bootstrap=300, seed=4))
    b2 = fit_function(counts, ticks, [1, 2, 3],
                      options=FitOptions(folds=0, costs="linear", intervals="bootstrap", bootstrap=300, seed=4))
    both = fit_function(counts, ticks, [1, 2, 3],
                        options=FitOptions(folds=0, costs="linear", intervals="both", bootstrap=300, seed=4))
    assert s.interval_method == "sandwich-hc3" and b.interval_method == "bootstrap"
    assert both.interval_method.startswith("max(")
    for addr in (2, 3):
        assert b.block(addr).ci95_ticks == b2.block(addr).ci95_ticks      # seeded
        r = b.block(addr).ci95_ticks / s.block(addr).ci95_ticks
        assert 0.5 < r < 2.0
        assert both.block(addr).ci95_ticks >= max(b.block(addr).ci95_ticks,
                                                  s.block(addr).ci95_ticks) - 1e-9
        assert b.block(addr).cost_ticks == pytest.approx(s.block(addr).cost_ticks)


def test_a_quantity_determined_by_one_input_gets_an_honest_interval():
    """A block only one input executes: its residual is 0 whatever the noise, so the
    sandwich alone would claim ± 0; the interval must reflect the noise instead."""
    rng = np.random.default_rng(62)
    n = 80
    counts = single_loop(rng, n)
    rare = np.zeros((n, 1), np.int64)
    rare[17] = 1
    counts = np.hstack([counts, rare])
    costs = np.array([25.0, 12.0, 31.0, 40.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, sigma0=8.0, quantum=0.0,
                                  outlier_rate=0.0, repeats=1)
    res = fit_function(counts, ticks, [1, 2, 3, 4], options=QUIET)
    b = res.block(4)
    assert b.estimable
    # the noise of one call is 8 + 0.2 % of ~700 ticks ≈ 9.4 ticks
    assert 5.0 < b.ci95_ticks < 60.0
    assert any("leverage" in w for w in res.warnings)


def test_rejections_at_the_start_of_the_run_are_flagged():
    rng = np.random.default_rng(63)
    counts = single_loop(rng, 200)
    costs = np.array([25.0, 12.0, 31.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, quantum=0.0, outlier_rate=0.0)
    # the first inputs ran at another speed: slower (a faster row predicted among the
    # longest is kept, wcetfit.fit.iteration.TOP_SHARE; warm-up slows calls anyway)
    ticks[:8] *= 2.0
    res = fit_function(counts, ticks, [1, 2, 3], options=QUIET)
    assert {r.input for r in res.rejected} >= set(range(8))
    assert any("warm-up" in w for w in res.warnings)
    clean = fit_function(counts, cfgsim.simulate_ticks(counts, costs, 70.0, rng), [1, 2, 3],
                         options=QUIET)
    assert not any("warm-up" in w for w in clean.warnings)


def test_heteroscedastic_noise_sandwich_covers():
    """Noise proportional to call length: the sandwich keeps its coverage."""
    covered = total = 0
    for seed in range(60):
        rng = np.random.default_rng(700 + seed)
        counts = single_loop(rng, 80)
        costs = np.array([25.0, 12.0, 31.0])
        ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, sigma0=0.5, sigma_rel=0.03,
                                      repeats=3, quantum=0.0, outlier_rate=0.0)
        res = fit_function(counts, ticks, [1, 2, 3], options=QUIET)
        for q in res.estimable_quantities():
            total += 1
            covered += abs(q.value_ticks - q.truth({1: 25.0, 2: 12.0, 3: 31.0}, {0: 70.0})) \
                <= q.ci95_ticks
    assert covered / total >= 0.88


# --- sub-quantum resolution ----------------------------------------------------------------------

def test_chain_ratios_below_the_quantum():
    """Blocks of 3, 6, 12, 24 ticks (all below the 26-tick TSC step) come out in the
    ratio 1:2:4:8 within 2 % from enough rows."""
    rng = np.random.default_rng(71)
    n = 2000
    counts = np.column_stack([np.ones(n, np.int64)] +
                             [rng.integers(0, 40, n) for _ in range(4)])
    costs = np.array([50.0, 3.0, 6.0, 12.0, 24.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 80.0, rng, repeats=5, sigma0=3.0)
    res = fit_function(counts, ticks, [1, 2, 3, 4, 5], options=QUIET)
    c = np.array([res.block(a).cost_ticks for a in (2, 3, 4, 5)])
    np.testing.assert_allclose(c / c[0], [1, 2, 4, 8], rtol=0.02)


# --- validation, units, JSON, errors -------------------------------------------------------------

def test_validation_and_units():
    rng = np.random.default_rng(81)
    counts = single_loop(rng, 200)
    costs = np.array([25.0, 12.0, 31.0])
    ticks = cfgsim.simulate_ticks(counts, costs, 70.0, rng, quantum=0.0, outlier_rate=0.0)
    res = fit_function(counts, ticks, [1, 2, 3], tsc_hz=2.6e9, options=FitOptions(folds=5))
    v = res.validation
    assert v.folds == 5 and v.heldout_inputs == 200
    assert v.heldout_calls + v.discarded_calls == ticks.size
    assert v.discarded_calls < 0.01 * ticks.size          # no interrupts simulated here
    assert v.median_rel_error < 0.01 and v.r2 > 0.99
    assert len(v.worst) == 10 and v.worst[0].rel_error >= v.worst[-1].rel_error
    assert v.outside_space == 0
    b = res.block(2)
    assert b.cost_ns == pytest.approx(b.cost_ticks / 2.6)
    assert b.ci95_ns == pytest.approx(b.ci95_ticks / 2.6)
    assert "ns)" in res.overhead[0].text


def test_json_document():
    rng = np.random.default_rng(82)
    counts = diamond_in_loop_counts(rng)
    ticks = cfgsim.simulate_ticks(counts, np.array([40.0, 9.0, 13.0, 21.0]), 60.0, rng)
    res = fit_function(counts, ticks, [0x1149, 0x1160, 0x1170, 0x1180], tsc_hz=2.6e9)
    doc = json.loads(json.dumps(res.to_json()))
    assert [b["address"] for b in doc["blocks"]] == ["0x1149", "0x1160", "0x1170", "0x1180"]
    for b in doc["blocks"]:
        assert set(b) >= {"address", "estimable", "cost_ticks", "ci95_ticks", "group",
                          "solution_ticks"}
        assert b["cost_ticks"] is None and b["group"] is not None
    for g in doc["groups"]:
        assert set(g) >= {"id", "blocks", "kind", "combinations"}
        for c in g["combinations"]:
            assert " = " in c["text"] and "±" in c["text"]
    assert set(doc["overhead_ticks"]) == {"0"}
    assert set(doc["validation"]) >= {"heldout_inputs", "median_rel_error", "p95_rel_error", "r2"}
    # the prediction formula of the document reproduces predict()
    sol = {int(b["address"], 16): b["solution_ticks"] for b in doc["blocks"]}
    x = counts[7]
    manual = sum(n * sol[a] for n, a in zip(x, [0x1149, 0x1160, 0x1170, 0x1180]))
    assert manual + doc["overhead_ticks"]["0"] == pytest.approx(res.predict(x))


@pytest.mark.parametrize("bad, match", [
    (dict(counts=np.zeros((3,))), "2-D"),
    (dict(ticks=np.zeros((4, 2))), "ticks"),
    (dict(block_addresses=[1, 1]), "unique"),
    (dict(block_addresses=[1]), "addresses"),
    (dict(counts=-np.ones((3, 2), np.int64)), "non-negative"),
    (dict(counts=np.full((3, 2), 0.5)), "whole"),
    (dict(ticks=np.full((3, 2), np.nan)), "no input"),
    (dict(config_ids=np.array([0.0, 1.0, 0.0])), "config_ids"),
    (dict(structural_basis=np.ones((2, 3))), "structural basis"),
])
def test_bad_input_raises_fit_error(bad, match):
    args = dict(counts=np.ones((3, 2), np.int64), ticks=np.ones((3, 2)),
                block_addresses=[1, 2])
    bad = dict(bad)
    kw = {k: bad.pop(k) for k in ("config_ids", "structural_basis") if k in bad}
    args.update(bad)
    with pytest.raises(FitError, match=match):
        fit_function(args["counts"], args["ticks"], args["block_addresses"], **kw)


def test_blas_threads_are_limited_and_restored():
    import ctypes

    import scipy.linalg  # noqa: F401  (load scipy's OpenBLAS too)

    from wcetfit import blasthreads

    libs = blasthreads._libraries()
    if not libs:
        pytest.skip("no OpenBLAS loaded in this process (another BLAS: nothing to limit)")

    def threads():
        out = []
        for lib, pat in libs:
            g = getattr(lib, pat % "get_num_threads")
            g.restype = ctypes.c_int
            out.append(int(g()))
        return out

    before = threads()
    with blasthreads.limited(1):
        assert threads() == [1] * len(libs)
    assert threads() == before
    with blasthreads.limited(None):
        assert threads() == before


def test_bad_options_raise():
    with pytest.raises(FitError):
        FitOptions(rows="every")
    with pytest.raises(FitError):
        FitOptions(intervals="magic")


# --- row weights (relative error) ----------------------------------------------------------------

def wide_loop(rng, n=150):
    """Calls from ~80 to ~20,000 ticks: a quarter of the inputs run the loop 0–3 times."""
    k = np.where(rng.random(n) < 0.25, rng.integers(0, 4, n), rng.integers(0, 600, n))
    m = rng.binomial(k, rng.uniform(0.1, 0.9, n))
    return np.column_stack([np.ones(n, np.int64), k, m])


def misfit_ticks(counts, costs, eps, rng, rel=0.03, **kw):
    """Timings whose per-input error grows with the call: each input's time is off by
    its own factor 1 + N(0, rel) (data-dependent costs the counts do not show), then
    the usual call noise, TSC quantization and interrupts."""
    true = counts @ costs + eps
    return true, cfgsim.simulate_ticks(counts, costs, eps + rel * rng.standard_normal(true.size)
                                       * true, rng, **kw)


def irls_reference(X, y, floor, rounds=60):
    """Independent IRLS: numpy lstsq with weights 1/max(fitted, floor)², to convergence."""
    v = np.ones(y.size)
    th = None
    for _ in range(rounds):
        sw = np.sqrt(v)
        th = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]
        v = 1.0 / np.maximum(X @ th, floor) ** 2
    return th


def test_relative_weights_cut_the_relative_error_of_short_calls():
    """Per-input errors proportional to the call (3 %): unweighted least squares lets the
    long calls' large absolute errors swamp the short calls; weighting by the predicted
    time predicts the short ones far better, against the noise-free truth and held out."""
    rows = {"none": [], "relative": []}
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        counts = wide_loop(rng)
        true, ticks = misfit_ticks(counts, np.array([20.0, 11.0, 23.0]), 60.0, rng)
        for w in rows:
            res = fit_function(counts, ticks, [1, 2, 3], options=FitOptions(weights=w))
            rel = np.abs(res.predict(counts) - true) / true
            once = [q for q in res.estimable_quantities() if q.overhead_coefficients]
            rows[w].append((np.percentile(rel, 95), res.validation.p95_rel_error,
                            once[0].ci95_ticks))
    a, b = np.array(rows["none"]), np.array(rows["relative"])
    assert b[:, 0].mean() < 0.3 * a[:, 0].mean()          # measured: 0.013 against 0.114
    assert b[:, 1].mean() < 0.8 * a[:, 1].mean()          # held out: 0.136 against 0.218
    assert np.sum(b[:, 1] < a[:, 1]) >= 8
    # the once-per-call quantity (ε + entry block) is what the short calls determine
    assert np.median(b[:, 2] / a[:, 2]) < 0.5


def test_relative_weights_match_an_independent_irls():
    rng = np.random.default_rng(120)
    counts = wide_loop(rng)
    _, ticks = misfit_ticks(counts, np.array([20.0, 11.0, 23.0]), 60.0, rng, quantum=0.0,
                            outlier_rate=0.0)
    res = fit_function(counts, ticks, [1, 2, 3],
                       options=FitOptions(folds=0, costs="linear", robust="none", statistic="mean",
                                          weight_floor_quanta=5.0))
    assert res.weights == "relative" and res.weight_floor_ticks == 5.0   # no TSC step: 1 tick
    X = np.hstack([counts[:, 1:], np.ones((counts.shape[0], 1))])       # entry ≡ ε: merge
    th = irls_reference(X, ticks.mean(axis=1), 5.0)
    # the fit refreshes a weight only when it moves by > 10 %: measured 1e-4 off the
    # converged IRLS; weights from the measured times instead are 2e-3 off, OLS 5e-3–4 %
    assert res.block(2).cost_ticks == pytest.approx(th[0], rel=5e-4)
    assert res.block(3).cost_ticks == pytest.approx(th[1], rel=5e-4)
    np.testing.assert_allclose(res.predict(counts), X @ th, rtol=5e-4)
    ols = fit_function(counts, ticks, [1, 2, 3],
                       options=FitOptions(folds=0, costs="linear", robust="none", statistic="mean",
                                          weights="none"))
    th0 = np.linalg.lstsq(X, ticks.mean(axis=1), rcond=None)[0]
    assert ols.block(2).cost_ticks == pytest.approx(th0[0], rel=1e-9)
    assert ols.weights == "none" and ols.weight_floor_ticks is None


def test_relative_weights_keep_interval_coverage():
    """95 % intervals of every estimable quantity, weighted fit, per-input errors
    proportional to the call: ≥ 90 % coverage over 200 seeded random CFGs (measured
    0.93; unweighted 0.93 too)."""
    covered = total = 0
    for trial in range(200):
        rng, cfg, counts, costs, eps = random_trial(trial)
        _, ticks = misfit_ticks(counts, costs, eps, rng)
        addrs = addrs_for(cfg.n_blocks)
        res = fit_function(counts, ticks, addrs, options=FitOptions(folds=0, weights="relative"))
        truth = dict(zip(addrs, costs))
        for q in res.estimable_quantities():
            total += 1
            covered += abs(q.value_ticks - q.truth(truth, {0: eps})) <= q.ci95_ticks
    assert total > 400
    assert covered / total >= 0.90, f"coverage {covered / total:.3f} over {total} quantities"


@pytest.mark.parametrize("seed", range(8))
def test_weights_do_not_change_rank_or_groups(seed):
    """Positive row weights leave the row space alone: rank, estimable blocks and groups
    are those of the construction under either weighting (decided on the exact
    unweighted normal matrix)."""
    rng = np.random.default_rng(1000 + seed)
    cfg = cfgsim.make_cfg(cfgsim.random_tree(rng))
    counts = spanning_counts(cfg, rng)
    costs = rng.uniform(3.0, 60.0, cfg.n_blocks)
    _, ticks = misfit_ticks(counts, costs, 80.0, rng)
    addrs = addrs_for(cfg.n_blocks)
    rank, alone, groups = expected_structure(cfg)
    for w in ("none", "relative"):
        res = fit_function(counts, ticks, addrs, structural_basis=cfg.structural_basis(),
                           options=FitOptions(folds=0, weights=w))
        assert res.rank == rank == res.max_rank
        assert {k for k, b in enumerate(res.blocks) if b.estimable} == alone
        assert group_sets(res, addrs) == sorted(map(sorted, groups))


def test_weighted_validation_folds_and_json():
    rng = np.random.default_rng(121)
    counts = wide_loop(rng, 200)
    _, ticks = misfit_ticks(counts, np.array([20.0, 11.0, 23.0]), 60.0, rng)
    res = fit_function(counts, ticks, [1, 2, 3], tsc_hz=2.6e9)
    v = res.validation
    assert v.folds == 5 and v.heldout_inputs == 200
    assert v.median_rel_error_kept <= v.median_rel_error + 1e-12 or not res.rejected
    doc = json.loads(json.dumps(res.to_json()))
    assert doc["rows"]["weights"] == "relative"
    assert doc["rows"]["weight_floor_ticks"] == pytest.approx(5 * 26.0)
    assert doc["rows"]["weight_iterations"] >= 1
    assert {"median_rel_error_kept", "p95_rel_error_kept"} <= set(doc["validation"])
    with pytest.raises(FitError):
        FitOptions(weights="inverse")
    with pytest.raises(FitError):
        FitOptions(weight_floor_quanta=0.0)


def test_a_groups_advice_names_a_few_relations_and_counts_the_rest():
    """libbz2's largest group (784 blocks) had one "vary the inputs so that …" per count
    relation: 13,254 lines of one cell in `report --full`."""
    from wcetfit.fit.wording import MAX_ADVICE, relations_text

    pairs = [([(f"0x{i:x}", 1.0)], [(f"0x{i + 1:x}", 2.0), (f"0x{i + 2:x}", 1.0)])
             for i in range(0, 40, 4)]
    texts, advice = relations_text(pairs, True)
    assert len(texts) == 10                          # the relations are all kept
    assert advice.count("vary the inputs so that") == MAX_ADVICE == 3
    assert advice.endswith("and 7 more relations of their counts like these")
    # the first of many written out, all counted (brotli's encoder: thousands of
    # relations, each tested with an SVD, took a report a quarter of an hour)
    texts, advice = relations_text(pairs, True, total=1234)
    assert len(texts) == 10 and advice.endswith("and 1,231 more relations of their counts "
                                                "like these")


def test_a_relation_of_many_blocks_with_fractional_weights_is_advised_in_words():
    """libc's strdup: "vary the inputs so that N(0x167b90) + 9.381·N(0x98a70) + 72.64·
    N(0x97539) + … = 190.8·N(0x16d81c) + … does not hold" — the blocks are named, the
    weights left to the relation itself."""
    from wcetfit.fit.wording import relations_text

    lhs = [("0x167b90", 1.0), ("0x98a70", 9.381), ("0x97539", 72.64)]
    rhs = [("0x16d81c", 190.8), ("0x16d85e", 592.6)]
    texts, advice = relations_text([(lhs, rhs)], True)
    assert texts == ["N(0x167b90) + 9.381·N(0x98a70) + 72.64·N(0x97539) = "
                     "190.8·N(0x16d81c) + 592.6·N(0x16d85e)"]
    assert advice == ("vary the inputs so that 0x167b90, 0x98a70, 0x97539 and 2 more blocks "
                      "run in other proportions to each other")


def test_the_structural_basis_without_activation_rows_is_orths():
    """``orthonormal_rows_left`` gives the span ``scipy.linalg.orth`` gives of a matrix
    with orthonormal columns less a few rows (what structural_basis drops: the
    activations), orthonormal, the rank cut where orth cuts it: an SVD of the whole matrix
    took 8 minutes on libc's fnmatch, most of its analysis."""
    from scipy.linalg import orth, qr

    from wcetfit.fit.system import orthonormal_rows_left

    rng = np.random.default_rng(0)
    for m, k, d in ((50, 20, 5), (200, 80, 30), (30, 25, 10), (20, 5, 15), (40, 40, 10)):
        N, _ = qr(rng.normal(size=(m, k)), mode="economic")
        drop = sorted(rng.choice(m, d, replace=False).tolist())
        keep = [i for i in range(m) if i not in drop]
        q, o = orthonormal_rows_left(N, keep, drop), orth(N[keep])
        assert q.shape == o.shape, (m, k, d)
        assert np.allclose(q.T @ q, np.eye(q.shape[1]), atol=1e-12)
        assert np.allclose(q @ q.T, o @ o.T, atol=1e-12)
    # a direction wholly in the dropped rows is no direction of the rest
    N = np.zeros((10, 4))
    N[0, 0], N[1:5, 1], N[5, 2], N[6, 3], N[7, 3] = 1.0, 0.5, 1.0, 0.6, 0.8
    q = orthonormal_rows_left(N, [1, 2, 3, 4, 5, 7, 8, 9], [0, 6])
    assert q.shape == (8, 3) and np.allclose(q.T @ q, np.eye(3))
