"""The activation probes' overhead taken out where it sits (#15 item 2): ε from each timed
activation's entry block, δ from the parent's block that made each timed call.

Truth: the synthetic program of tests/actsim.py (known block costs, ε = 30 and δ = 22
ticks, which differ, so removing κ = ε + δ at the entry shows), fitted through the same
code the pipeline uses; the calibration handed to the fit is the simulator's truth with
intervals (the measured calibration is checked against the real stubs in
tests/test_actcalib.py).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from actsim import ADDR, CALL_A, CALL_B, CALL_REC, CALL_REC_REC, block, simulate  # noqa: E402

from wcetfit.fit.activation_root import (_alone_with_overhead, apply_activation_fits,  # noqa
                                         fit_root_activations)
from wcetfit.fit.solve import fit_function  # noqa: E402
from wcetfit.fit.system import LinearSystem  # noqa: E402


def _system(root):
    cols = root["columns"]
    return LinearSystem("main", cols, root["indices"], root["counts"], root["ticks"],
                        np.zeros((0, len(cols))), 2.4e9)


def _cal(eps, delta, ci=1.0):
    return {"epsilon": {"value_ticks": eps, "ci95_ticks": ci},
            "delta": {"value_ticks": delta, "ci95_ticks": ci},
            "kappa": {"value_ticks": eps + delta, "ci95_ticks": ci}}


def _analysis(seed, cal, **kw):
    rows, tr, root = simulate(200, seed, **kw)
    system = _system(root)
    whole = fit_function(system.counts, system.ticks, system.addresses, tsc_hz=2.4e9)
    an = fit_root_activations(system, whole, rows, seed=seed, calibration=cal)
    return rows, tr, root, system, whole, an


def test_eps_and_delta_removed_where_they_sit():
    entries = {block(f, 0) for f in ("main", "leaf", "rec")}
    calls = {("main", CALL_A), ("main", CALL_B), ("main", CALL_REC), ("rec", CALL_REC_REC)}
    hit = tot = checked = 0
    for seed in range(4):
        rows, tr, root, system, whole, an = _analysis(400 + seed, None, short_leaf=False)
        # every leaf call is timed: δ is confounded with each call block, ε with each entry
        rows, tr, root, system, whole, an = _analysis(400 + seed, _cal(tr.eps, tr.delta),
                                                      short_leaf=False)
        fit = apply_activation_fits(whole, an)
        ch = an.check
        assert ch.removal == "calibration"
        assert ch.epsilon_ticks == tr.eps and ch.delta_ticks == tr.delta
        col = {c: j for j, c in enumerate(an.columns)}
        # what is removed from each function's activations is ε + δ per timed child,
        # activation by activation (ε among the once-per-activation blocks it cannot be
        # told from, entry first)
        for fn, f in an.fits.items():
            r = rows[fn]
            rem = np.zeros(len(f.columns))
            for lab, share in f.overhead_shares.items():
                rem += (tr.delta if lab == "δ" else tr.eps) * share
            per_act = r.counts @ rem
            assert np.allclose(per_act, tr.eps + tr.delta * r.children), fn
            assert any(rem[f.columns.index(c)] > 0 for c in entries if c[0] == fn)
            # δ sits in the blocks that made the timed calls, as the trace says
            # (child_calls), one δ per call (every call is timed here), wherever the fit
            # can tell such a block from its neighbours ("block + δ" is known alone)
            execs = np.asarray(r.counts.sum(axis=0)).ravel()
            calls_at = np.asarray(r.child_calls.sum(axis=0)).ravel()
            for k in np.flatnonzero(calls_at > 0):
                if _alone_with_overhead(f, f.columns[k]) is not None:
                    checked += 1
                    assert abs(f.overhead_shares["δ"][k] - calls_at[k] / execs[k]) < 1e-6
        for c in calls:
            assert an.removed[col[c]] > 0, c
        # the probe-free costs are the true ones, within their intervals
        for j, b in enumerate(fit.blocks):
            c = an.columns[j]
            if an.source[j] is None or an.removed[j] == 0:
                continue
            assert b.solution_ticks > 0
            if b.estimable:
                tot += 1
                hit += abs(b.cost_ticks - tr.costs[c]) <= b.ci95_ticks
                assert b.cost_ticks == b.solution_ticks
        # ε + δ agrees with the root check's κ: no warning about it
        assert abs(ch.kappa_ticks - ch.calibrated_kappa_ticks) <= ch.kappa_ci95_ticks + 1.0
        assert not any("calibration" in w.message for w in an.warnings)
        # the prediction as made: probe-free costs and the whole call's overhead fitted
        # with them, against the true probe-free whole call
        true = root["counts"] @ np.array([tr.costs[c] for c in root["columns"]]) + tr.eps_call
        pred = fit.predict(system.counts)
        assert np.median(np.abs(pred - true) / true) < 0.01
        assert abs(fit.overhead_ticks[0] - ch.applied_intercept_ticks) < 1e-9
        assert abs(ch.applied_intercept_ticks - tr.eps_call) \
            <= ch.applied_intercept_ci95_ticks + 2.0
        json.dumps(fit.to_json())
    assert tot >= 4 and hit >= 0.85 * tot and checked >= 4


def test_partly_timed_call_block_gets_its_share():
    # leaf(1) is too short to time at site A: block A's calls are timed only sometimes,
    # δ is then separable in main's rows (not in the blocks) or removed by the share
    rows, tr, root, system, whole, an = _analysis(7, _cal(30.0, 22.0), short_leaf=True)
    col = {c: j for j, c in enumerate(an.columns)}
    main = an.fits["main"]
    r = rows["main"]
    ja = r.columns.index(("main", CALL_A))
    share = r.child_calls[:, ja].sum() / r.counts[:, ja].sum()
    assert 0 < share < 1
    # δ is separable from block A when only some of its calls are timed: it is then
    # not in the blocks, and nothing of it is removed from them
    if main.overhead("δ").estimable:
        assert "δ" not in main.overhead_shares
    rem = sum((22.0 if lab == "δ" else 30.0) * sh for lab, sh in main.overhead_shares.items())
    assert np.allclose(r.counts @ rem, 30.0 + (0.0 if main.overhead("δ").estimable
                                               else 22.0 * r.children))
    assert np.all(apply_activation_fits(whole, an).predict(system.counts) > 0)


def test_old_behaviour_without_calibration_is_named():
    rows, tr, root, system, whole, an = _analysis(3, None, short_leaf=False)
    assert an.check.removal == "kappa"
    assert any("not measured" in n for n in an.notes)
    col = {c: j for j, c in enumerate(an.columns)}
    assert abs(an.removed[col[block("leaf", 0)]] - an.check.kappa_ticks) < 1e-9
    assert an.removed[col[("main", CALL_A)]] == 0.0


def test_calibration_far_from_kappa_is_a_warning_and_kappa_is_split():
    # a calibration whose ε + δ is five times what the whole calls say: a warning, and
    # the costs keep the root check's κ, split in the calibration's proportion; any block
    # the removal makes negative is named in a warning, never silently negative
    for seed in range(5, 9):
        rows, tr, root, system, whole, an = _analysis(seed, _cal(200.0, 50.0),
                                                      short_leaf=False)
        ch = an.check
        assert any("differs from the root check" in w.message for w in an.warnings)
        assert abs(ch.applied_epsilon_ticks + ch.applied_delta_ticks - ch.kappa_ticks) < 1e-6
        assert abs(ch.applied_epsilon_ticks / ch.applied_delta_ticks - 4.0) < 1e-6
        neg = {b for w in an.warnings if w.code == "negative_cost" for b in w.blocks}
        for j in np.flatnonzero((an.removed > 0) & (an.costs < 0)):
            assert an.columns[j][1] in neg
        fit = apply_activation_fits(whole, an)
        assert {w.code for w in an.warnings} <= {w.code for w in fit.fit_warnings}
