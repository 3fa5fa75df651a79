"""Outlier rejection that cycles between sets of rows (found on libgmp ``__gmpn_sub_n``):
after the stop the fit must be in one consistent state — the rows (calls) left out of the
fit are exactly the ones reported as rejected, each with the reason of the step that
rejected it — and the warning must say what the cycle means and what to do.

The data are synthetic and real (no forced cycle): a linear system whose inputs run at
data-dependent speeds the counts do not see (log-normal or a slow subgroup), so that
leaving one group out makes another the outliers and vice versa."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest

import wcetfit.fit.solve as solve_mod
from wcetfit.fit import iteration
from wcetfit.fit.result import FitOptions
from wcetfit.fit.solve import fit_function


def dataset(seed: int):
    """Counts (an always-once block plus 1–3 varying ones) and 5 rounded repeats per
    input; times per input scaled (slow subgroup, extra per-count cost or log-normal)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 150))
    nb = int(rng.integers(1, 4))
    counts = rng.integers(1, 60, size=(n, nb))
    counts = np.hstack([np.ones((n, 1), dtype=np.int64), counts])
    costs = rng.uniform(5, 40, size=nb + 1)
    base = counts @ costs
    frac = rng.uniform(0.05, 0.3)
    slow = rng.random(n) < frac
    factor = rng.uniform(1.05, 1.6)
    mode = int(rng.integers(0, 3))
    t = base.copy()
    if mode == 0:
        t[slow] *= factor
    elif mode == 1:
        t[slow] += rng.uniform(20, 400) * counts[slow, 1] / 30
    else:
        t = t * rng.lognormal(0, rng.uniform(0.02, 0.2), n)
    ticks = np.round(t[:, None] + rng.normal(0, rng.uniform(0.5, 8), (n, 5)))
    addrs = [0x1000 + 16 * k for k in range(nb + 1)]
    return counts, ticks, addrs


def fit_capturing(monkeypatch, counts, ticks, addrs, opts):
    """The fit, and the fitter's state right after the rejection loop."""
    box = {}

    def spy(fx):
        iteration.iterate(fx)
        box["fx"] = fx
        box["w"] = fx.w.copy()
        box["call_keep"] = fx.call_keep.copy()

    monkeypatch.setattr(solve_mod, "iterate", spy)
    res = fit_function(counts, ticks, addrs, options=opts)
    return res, box


def cycle_warning(res) -> str:
    hits = [w for w in res.warnings if "cycled" in w]
    assert len(hits) == 1, res.warnings
    return hits[0]


def check_normal_equations(fx):
    """G, b (exact) and Gw, bw (weighted) are those of the rows' current w, S, v."""
    F, p = fx.G.shape[0], fx.G.shape[1]
    G = np.zeros((F, p, p))
    b = np.zeros((F, p))
    fx.design.accumulate(G, b, fx.w, fx.S)
    np.testing.assert_allclose(G, fx.G, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(b, fx.b, rtol=1e-9, atol=1e-6)
    if fx.weighted:
        Gw = np.zeros_like(G)
        bw = np.zeros_like(b)
        fx.design.accumulate(Gw, bw, fx.w * fx.v, fx.S * fx.v, exact=False)
        scale = max(float(np.abs(Gw).max()), 1e-300)
        np.testing.assert_allclose(Gw, fx.Gw, rtol=1e-7, atol=1e-9 * scale)
        np.testing.assert_allclose(bw, fx.bw, rtol=1e-7,
                                   atol=1e-9 * max(float(np.abs(bw).max()), 1e-300))


@pytest.mark.parametrize("seed, weights", [(160, "relative"), (389, "none"),
                                           (292, "relative")])
def test_input_rows_consistent_after_cycle(monkeypatch, caplog, seed, weights):
    counts, ticks, addrs = dataset(seed)
    opts = FitOptions(folds=0, weights=weights)
    with caplog.at_level(logging.INFO):
        res, box = fit_capturing(monkeypatch, counts, ticks, addrs, opts)
    text = cycle_warning(res)
    # the warning says what it kept, what it means and what to do
    assert re.search(r"cycled (between|among) sets of [\d, ]+ and \d+ rejected rows", text)
    assert "kept" in text and "more inputs or repeats" in text
    # logged at info level: the report lists the fit's warnings, stderr does not repeat them
    assert any("cycled" in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records)

    zero_weight = set(np.flatnonzero(box["w"] == 0).tolist())
    reported = {r.input for r in res.rejected}
    assert len(reported) == len(res.rejected)          # one entry per row
    assert zero_weight == reported
    assert zero_weight                                  # the cycle did reject rows
    fx = box["fx"]
    assert set(np.flatnonzero(fx.rejected_rows).tolist()) == reported
    assert set(fx.rej_reason) == reported
    # every reason is that of a step that rejected the row: its |z| over the cut
    for r in res.rejected:
        m = re.match(r"residual: [-+][\d.]+ ticks, \|z\| = ([\d.]+) > ([\d.]+)$", r.reason)
        assert m, r.reason
        assert float(m.group(1)) >= float(m.group(2))   # shown to 0.1
    check_normal_equations(fx)

    rows = json.loads(json.dumps(res.to_json()))["rows"]
    assert rows["used"] + rows["rejected"] == rows["total"] == counts.shape[0]
    assert sum(rows["rejected_by_reason"].values()) == rows["rejected"]
    assert rows["rejected_by_reason"] == {"residual": rows["rejected"]}


@pytest.mark.parametrize("seed, weights", [(344, "relative"), (309, "none")])
def test_call_rows_consistent_after_cycle(monkeypatch, seed, weights):
    counts, ticks, addrs = dataset(seed)
    opts = FitOptions(folds=0, weights=weights, rows="call")
    res, box = fit_capturing(monkeypatch, counts, ticks, addrs, opts)
    text = cycle_warning(res)
    assert re.search(r"rejected calls; kept", text) and "more inputs or repeats" in text

    fx = box["fx"]
    left_out = {(int(i), int(k)) for i, k in zip(*np.nonzero(fx.valid_calls
                                                             & ~box["call_keep"]))}
    reported = {(r.input, r.call) for r in res.rejected if r.call is not None}
    assert left_out == reported and reported
    assert res.rows_used + len(reported) == res.rows_total
    for r in res.rejected:
        if r.call is None:
            continue
        m = re.match(r"call residual: \|z\| = ([\d.]+) > ([\d.]+)$", r.reason)
        assert m, r.reason
        assert float(m.group(1)) >= float(m.group(2))   # shown to 0.1
    check_normal_equations(fx)
