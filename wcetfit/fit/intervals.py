"""The 95 % intervals of the fit: the covariance of the estimate (sandwich HC3/HC1, bootstrap).

Intervals.  95 % intervals (half-widths, ± value) from the heteroscedasticity-consistent
sandwich (XᵀΩX)⁺ XᵀΩ Σ ΩX (XᵀΩX)⁺ with the weights ω of the estimate — timing noise grows
with the call's length and the model error (data-dependent costs) is not homoscedastic
either, so the classic s²(X'X)⁻¹ would be too narrow for long calls and too wide for short
ones, and the sandwich stays right for any weights, including wrong ones.  HC3
(Σ = r²/(1−h)², h = ω·xᵀ(XᵀΩX)⁺x, leverage-corrected, good in small samples) when the
leverages are affordable, else HC1 (Σ = r²·n/(n−r)); with n ≫ p the two agree to O(p/n).
A row of leverage > 0.9 (one input alone determining a quantity) has a residual near 0
whatever its noise: its Σ is taken from the robust residual scale of the other rows at the
same predicted time instead (else such a quantity would show "± 0").  With
``intervals="bootstrap"`` the interval is from a bootstrap over inputs (seeded, the row
weights held fixed): t_{.975} × the replicates' standard deviation; ``"both"`` takes the
wider of the two per quantity.  Critical values from Student's t with n − rank degrees of
freedom (no interval at all without degrees of freedom).  Measured coverage of the truth
(bench/fit.py): 0.96 (sandwich, 200 small systems), 0.92 (bootstrap, 50), 0.95–0.96 at
1,000 blocks × 100,000 rows; with per-input errors of 3 % of the call 0.93 weighted and
unweighted (random CFGs, tests/test_fit.py), 0.93 weighted and 0.96 unweighted (bench),
and the weighted interval of ε + the once-per-call blocks (what the short calls
determine) is less than half as wide.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.linalg as sla

from wcetfit.fit import robust

# Rows whose leverage exceeds this carry (almost) no information on their own noise:
# the residual of a row that alone determines a direction is 0 whatever the noise, and
# HC3's r²/(1−h)² is then 0/0.  Their noise variance is taken from the robust local
# residual scale of the other rows at the same predicted time instead.
H_CUT = 0.9
# HC1 mode computes leverages only for rows that execute a rarely executed column
# (the usual way a single row comes to determine a direction).
RARE = 50


def sandwich(fx: Any, theta_full: np.ndarray, kept: np.ndarray,
              n_used: int, rank: int, fold_theta: np.ndarray | None):
    """One pass: residuals of every timed input, leverages and the meat.

    With row weights ω = w·v (v = 1 without weighting) the estimate is
    (XᵀΩX)⁺XᵀΩy, so its covariance is (XᵀΩX)⁺ XᵀΩ Σ ΩX (XᵀΩX)⁺: the meat sums
    (ω·r)²·xxᵀ, the leverage of a row is ω·xᵀ(XᵀΩX)⁺x, both from the same weights
    as the estimate, whatever they are."""
    d = fx.design
    reps = fx.reps
    pr = reps.size
    sol = fx.sol
    D = sol.scale
    lam = sol.lam
    Z = (sol.V / np.sqrt(lam)).T * D[None, :] if rank else np.zeros((0, pr))   # [r, pr]
    hc3 = float(n_used) * pr * max(rank, 1) <= fx.opts.hc3_budget
    rare = np.zeros(pr, dtype=bool)
    blocks_r = reps < d.pb
    rare[blocks_r] = fx.col_nnz[reps[blocks_r]] <= RARE
    M = np.zeros((pr, pr))
    cand = np.flatnonzero(fx.has)
    resid = np.full(fx.n, np.nan)
    fx.fold_pred = np.full(fx.n, np.nan) if fold_theta is not None else None
    fx.lever = np.full(fx.n, np.nan)
    deferred: list[np.ndarray] = []
    identity = reps.size == d.p and bool(np.all(reps == np.arange(d.p)))
    for rows, X in d.chunks(cand):
        pred = X @ theta_full
        resid[rows] = fx.y[rows] - pred
        if fold_theta is not None:
            fp = X @ fold_theta
            fx.fold_pred[rows] = fp[np.arange(rows.size), d.fold[rows]]
        w = fx.w[rows] * fx.v[rows]
        m = w > 0
        if not m.any():
            continue
        Xm = X[m] if identity else np.take(X[m], reps, axis=1)
        rm = rows[m]
        h = np.zeros(rm.size)
        if hc3:
            look = np.ones(rm.size, dtype=bool)
        else:
            look = (Xm[:, rare] != 0).any(axis=1) if rare.any() else np.zeros(rm.size, bool)
        if look.any():
            XZ = Xm[look] @ Z.T
            h[look] = w[m][look] * np.einsum("ij,ij->i", XZ, XZ)
            fx.lever[rm[look]] = h[look]
        high = h > H_CUT
        if high.any():
            deferred.append(rm[high])
        u = w[m] * resid[rm]
        if hc3:
            u = u / (1.0 - np.minimum(h, H_CUT))
        u[high] = 0.0
        # the meat needs no exactness: single precision halves the pass
        U = np.empty(Xm.shape, dtype=np.float32)
        np.multiply(Xm, u[:, None], out=U, casting="unsafe")
        M += (U.T @ U).astype(np.float64)
    if not hc3:
        M *= n_used / max(n_used - rank, 1)
    if deferred:
        hi = np.concatenate(deferred)
        lo = np.setdiff1d(kept, hi)
        fitted = fx.y - resid
        reps_n = np.maximum(fx.call_keep[hi].sum(axis=1), 1)
        floor = np.maximum(1e-9 * float(np.sqrt(np.mean(fx.y[kept] ** 2))),
                           0.5 * fx.quantum / np.sqrt(reps_n))
        if lo.size >= 2:
            s_hat = robust.local_scale(resid[lo], fitted[lo], 0.0, at=fitted[hi])
        else:
            s_hat = np.zeros(hi.size)
        s_hat = np.maximum(s_hat, floor)
        Xh = d.rows(hi)[:, reps]
        U = Xh * (fx.w[hi] * fx.v[hi] * s_hat)[:, None]
        M += U.T @ U
        fx.high_leverage = int(hi.size)
        fx._warn(f"{hi.size} input(s) alone determine some estimable quantities "
                   "(leverage > 0.9): their noise is taken from similar inputs; add "
                   "inputs that exercise the same paths")
    Ms = M * D[:, None] * D[None, :]
    Gp = sol.pinv_scaled()
    cov_s = Gp @ Ms @ Gp
    fx.meat_method = "hc3" if hc3 else "hc1"
    return cov_s, f"sandwich-{'hc3' if hc3 else 'hc1'}", resid


def bootstrap(fx: Any, kept: np.ndarray) -> np.ndarray:
    """Covariance of the reduced solution over a bootstrap of the used inputs (with
    the full fit's row weights held fixed: re-deriving them per replicate would cost
    an IRLS per replicate for a second-order effect)."""
    D = fx.sol.scale
    Vr = fx.sol.V
    pr = fx.reps.size
    reps_out = []
    for Gb, bb in resampled_normals(fx, kept):
        gs = Vr.T @ (Gb * D[:, None] * D[None, :]) @ Vr
        rhs = Vr.T @ (D * bb)
        gs[np.diag_indices_from(gs)] += 1e-9
        try:
            z = sla.solve(gs, rhs, assume_a="pos", check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            z = np.linalg.lstsq(gs, rhs, rcond=None)[0]
        reps_out.append(D * (Vr @ z))
    return np.cov(np.array(reps_out), rowvar=False).reshape(pr, pr)


def resampled_normals(fx: Any, kept: np.ndarray):  # type: ignore[no-untyped-def]
    """The weighted normal matrix and right-hand side (reduced columns) of each bootstrap
    resample of the used inputs, the full fit's row weights held fixed
    (``FitOptions.bootstrap`` replicates, seeded with ``seed + 1``)."""
    o = fx.opts
    d = fx.design
    reps = fx.reps
    pr = reps.size
    B = max(int(o.bootstrap), 2)
    nk = kept.size
    if float(nk) * pr * pr * B > 5e11:
        fx._warn(f"bootstrap of {B} replicates over {nk} rows × {pr} columns is very "
                   "slow")
    rng = np.random.default_rng(o.seed + 1)
    small = float(nk) * pr <= 5e7
    Xr = d.rows(kept)[:, reps] if small else None
    w = fx.w[kept] * fx.v[kept]
    y = fx.y[kept]
    for _ in range(B):
        m = np.bincount(rng.integers(0, nk, nk), minlength=nk).astype(np.float64)
        gw = m * w
        if small:
            yield (Xr * gw[:, None]).T @ Xr, Xr.T @ (gw * y)
            continue
        Gf = np.zeros((1, d.p, d.p))
        bf = np.zeros((1, d.p))
        gw_full = np.zeros(fx.n)
        gw_full[kept] = gw
        bw_full = np.zeros(fx.n)
        bw_full[kept] = gw * y
        saved = d.fold
        d.fold = np.zeros(fx.n, dtype=np.int64)
        save_nf = d.n_folds
        d.n_folds = 1
        try:
            d.accumulate(Gf, bf, gw_full, bw_full, kept)
        finally:
            d.fold, d.n_folds = saved, save_nf
        yield Gf[0][np.ix_(reps, reps)], bf[0][reps]


def quantity_variance(fx: Any, c: np.ndarray) -> float:
    """Variance of the reduced combination c·θ (the wider method if two were asked)."""
    nz = np.flatnonzero(c)
    cc = c[nz]
    v = float(cc @ fx.cov_theta[np.ix_(nz, nz)] @ cc)
    alt = getattr(fx, "_cov_alt", None)
    if alt is not None:
        v = max(v, float(cc @ alt[np.ix_(nz, nz)] @ cc))
    return max(v, 0.0)


def half_width(t95: float, var: float) -> float:
    """Interval half-width; infinite without degrees of freedom."""
    return math.inf if math.isinf(t95) else t95 * math.sqrt(var)
