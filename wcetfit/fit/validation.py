"""The fit's held-out figures: k-fold solutions, prediction errors, inputs outside the
training space, rejections crowded at the start of the run.

Validation.  k-fold over inputs (default 5, seeded): every input with a timing is
predicted by the model fitted without its fold — rejected inputs included, a mispredicted
input must show — and compared per timed call (interrupted calls, those the clipped mean
discards, excluded and counted) and per input; R² on the per-input statistic; the per-call
figures are given over the kept inputs too.  Outlier rejection and the row weights are
decided once, on all rows (a held-out row's own weight never enters its prediction).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wcetfit.fit import robust
from wcetfit.fit.result import Validation, WorstInput
from wcetfit.fit.iteration import ridge_theta


def fold_solutions(fx: Any) -> np.ndarray:
    """Each fold's training solution, with the same row weights as the full fit (the
    weights come from the full fit's values: a held-out row's own weight never enters
    its prediction, and its influence on the training rows' fitted values is that of
    one row among all)."""
    G, b = fx.Gwtot, fx.bwtot
    out = np.zeros((fx.design.p, fx.F))
    Vr = fx.an.Vr
    D = fx.an.scale
    for k in range(fx.F):
        th = ridge_theta(fx, G - fx.Gw[k], b - fx.bw[k])
        # keep the training solution inside the full fit's estimable space
        red = th[fx.reps] / D
        red = Vr @ (Vr.T @ red)
        out[fx.reps, k] = D * red
    return out


def warn_clustered_rejections(fx: Any) -> None:
    """Rejected inputs crowding the start of the run point at the measurement (warm-up,
    frequency ramp), not at the inputs: say so."""
    cand = np.flatnonzero(fx.has)
    if fx.opts.rows == "input":
        bad = fx.rejected_rows[cand]
    else:
        bad = fx.call_rejected[cand].any(axis=1)
    n = cand.size
    k = int(bad.sum())
    head = max(n // 10, 1)
    k_head = int(bad[:head].sum())
    if n < 50 or k < 3 or k_head < 3:
        return
    rate_head = k_head / head
    rate_rest = (k - k_head) / max(n - head, 1)
    if rate_head > 3.0 * rate_rest:
        fx._warn(f"{k_head} of the {k} rejected inputs are among the first {head} of "
                   f"{n} (inputs {int(cand[0])}–{int(cand[head - 1])}): a warm-up or "
                   "frequency effect in the timing run rather than the inputs?")


def heldout_validation(fx: Any, resid_all: np.ndarray) -> Validation:
    """Held-out figures: each input predicted by the model fitted without its fold.

    Per call: every valid timed call of every input with a timing (rejected inputs
    included: a mispredicted input must show), except the calls the clipped mean
    discards as interrupted (counted in ``discarded_calls``).  R² and the worst inputs
    use the per-input statistic."""
    o = fx.opts
    cand = np.flatnonzero(fx.has)
    pred = fx.fold_pred[cand]
    y = fx.y[cand]
    T = fx.ticks[cand]
    valid = fx.valid_calls[cand]
    summ = robust.summarize_repeats(T, "clipped_mean", quantum=fx.quantum)
    clean = summ.keep & valid
    # rows="call": an input whose calls were all rejected has no row value; its
    # per-input figure uses the clipped mean of its calls
    y = np.where(np.isfinite(y), y, summ.value)
    P = np.broadcast_to(pred[:, None], T.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_all = np.abs(P - T) / np.abs(T)
        rel_in = np.abs(pred - y) / np.abs(y)
    rel_calls = rel_all[clean]
    rel_calls = rel_calls[np.isfinite(rel_calls)]
    kept_calls = rel_all[clean & ~fx.rejected_rows[cand][:, None]]
    kept_calls = kept_calls[np.isfinite(kept_calls)]
    rel_in = np.where(np.isfinite(rel_in), rel_in, 0.0)

    def q(v: np.ndarray, p: float) -> float:
        return float(np.percentile(v, p)) if v.size else float("nan")

    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - np.mean(y)) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    tv, pv = T[clean], P[clean]
    ss_tot_c = float(np.sum((tv - np.mean(tv)) ** 2)) if tv.size else 0.0
    r2c = 1.0 - float(np.sum((tv - pv) ** 2)) / ss_tot_c if ss_tot_c > 0 else float("nan")
    outside = outside_count(fx, cand)
    top = np.argsort(-rel_in)[:o.worst]
    worst = tuple(WorstInput(int(cand[i]), float(y[i]), float(pred[i]), float(rel_in[i]),
                             bool(fx.rejected_rows[cand[i]])) for i in top)
    return Validation(fx.F, int(cand.size), int(clean.sum()), q(rel_calls, 50),
                      q(rel_calls, 95), r2, r2c, worst,
                      outside_space=outside[0], outside_space_weak=outside[1],
                      discarded_calls=int((valid & ~clean).sum()),
                      median_rel_error_inputs=q(rel_in, 50),
                      p95_rel_error_inputs=q(rel_in, 95),
                      median_rel_error_kept=q(kept_calls, 50),
                      p95_rel_error_kept=q(kept_calls, 95))


def outside_count(fx: Any, cand: np.ndarray) -> tuple[int, int]:
    """Held-out inputs whose count vector is not in their training folds' row space (their
    prediction depends on the choice of solution), and how many of those are outside only
    because a direction the training inputs do span is too weak for the timing noise (the
    rank tolerance's noise term, wcetfit.fit.estimability: treated as not estimable, but
    more varied inputs are not what it lacks).  (-1, -1) when not computed (one
    eigendecomposition per fold: skipped for more than 400 unknowns)."""
    d = fx.design
    if fx.reps.size > 400:
        return -1, -1
    G = fx.Gtot
    tau = max(fx.an.sigma_tol / max(fx.an.sigma_max, 1e-300), 1e-8)
    # the numerical part of the tolerance alone (estimability.analyze's τ_num)
    tau_num = min(tau, max(float(np.sqrt(100.0 * fx.reps.size * np.finfo(float).eps)), 1e-8))
    count = weak = 0
    for k in range(fx.F):
        rows = cand[d.fold[cand] == k]
        if rows.size == 0:
            continue
        Gt = (G - fx.G[k])[np.ix_(fx.reps, fx.reps)]
        diag = np.diag(Gt)
        good = diag > 0
        X = d.rows(rows)[:, fx.reps]
        out = (X[:, ~good] != 0).any(axis=1)
        unspanned = out.copy()
        if good.any():
            dd = 1.0 / np.sqrt(diag[good])
            gs = Gt[np.ix_(good, good)] * dd[:, None] * dd[None, :]
            lam, V = np.linalg.eigh(gs)
            top = max(float(lam[-1]), 0.0)
            Xs = X[:, good] * dd[None, :]     # coefficient vector, in scaled coords
            nrm = np.maximum(np.linalg.norm(Xs, axis=1), 1e-300)
            for t, into in ((tau, out), (tau_num, unspanned)):
                V0 = V[:, lam <= top * t ** 2]
                if V0.shape[1]:
                    into |= np.linalg.norm(Xs @ V0, axis=1) > 1e-6 * nrm
        count += int(out.sum())
        weak += int((out & ~unspanned).sum())
    return count, weak