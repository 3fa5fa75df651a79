"""Outlier rejection never takes the fit's last residual degrees of freedom: with as many
inputs as a few more than the estimable quantities, setting aside every row that looks
far off left none, the costs no interval and the bound refused (libbz2's
BZ2_bzBuffToBuffCompress, 110 inputs against 104 quantities, 6 rejected: "no WCET bound
... time more inputs")."""

from __future__ import annotations

import numpy as np

from wcetfit.fit.iteration import MIN_REJECTION_DOF
from wcetfit.fit.solve import fit_function


def test_rejection_leaves_residual_degrees_of_freedom():
    rng = np.random.default_rng(7)
    p = 34
    # 34 distinct count vectors, six of them timed twice: the six pairs are all the
    # residual degrees of freedom, every other row is fitted exactly, and each pair's
    # disagreement looks far off beside them
    distinct = rng.integers(0, 6, (p, p))
    distinct[:, 0] = 1
    counts = np.vstack([distinct, distinct[:6]])
    n = counts.shape[0]
    costs = rng.uniform(5.0, 30.0, p)
    ticks = (counts @ costs)[:, None] + rng.normal(0.0, 2.0, (n, 5))
    ticks[p:] *= 1.05
    fit = fit_function(counts, ticks, [0x1000 + 16 * k for k in range(p)], tsc_hz=2.6e9)
    assert fit.rows_used - fit.rank >= MIN_REJECTION_DOF, (fit.rows_used, fit.rank)
    assert fit.rows_total - fit.rows_used <= n - p - MIN_REJECTION_DOF


def test_rejection_is_unchanged_when_rows_are_plenty():
    rng = np.random.default_rng(8)
    n, p = 300, 10
    counts = rng.integers(0, 6, (n, p))
    costs = rng.uniform(5.0, 30.0, p)
    ticks = (counts @ costs + 40.0)[:, None] + rng.normal(0.0, 1.0, (n, 5))
    ticks[:6] *= 3.0
    fit = fit_function(counts, ticks, [0x1000 + 16 * k for k in range(p)], tsc_hz=2.6e9)
    assert fit.rows_total - fit.rows_used >= 6      # the six outliers are still set aside
