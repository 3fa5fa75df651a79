"""The estimate's solutions: the non-negative one (``nonneg=True``) and the particular
solution used for prediction.

Non-negativity (``nonneg=True``).  The blocks and merged classes estimable alone and the
reported combinations without negative coefficient are constrained to ≥ 0 (scipy
``lsq_linear`` in the coordinates of the estimable space); directions of the null space
are never touched.  Intervals stay the unconstrained ones.

Under ``costs="physical"`` (:mod:`wcetfit.fit.physical`) the constrained fit has chosen
its own solution among the equal ones, inside constraints a step along the null space
could break: it is taken as it is (``move_null=False``).

Particular solution (``solution_ticks``).  Among all solutions, the one with the smallest
Σ_k T_k² over the blocks, ε left free.  So the always-once blocks get 0 and their time is
in ``overhead_ticks`` (which then equals the estimable ε + Σ always-once blocks), identical
blocks share their sum equally, and a call is predicted as Σ count·solution + overhead.
That prediction is the same for every solution whenever the count vector lies in the
space the inputs exercised (:meth:`FitResult.predictable`); beyond it (blocks never
executed, or combinations the inputs did not separate) it is an arbitrary choice.  The
step from the estimate moves only along the numerically exact null space, never along the
weak directions the noise tolerance left out of the estimate (the inputs do run those),
and never moves a block estimable alone: every estimable quantity the fit reports is
exactly what the solution predicts with (:func:`exact_null_basis`; on zlib's
``uncompress`` they differed by up to 14 ticks (median 4) on its 4 estimable blocks in
one session here, and issue #15
saw thousands).  Figures no machine can produce (a cost or ε below zero, a call predicted
below zero) are not clamped here: :mod:`wcetfit.fit.checks` turns them into warnings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.optimize import lsq_linear

from wcetfit.fit import estimability as est
from wcetfit.fit.groups import blocks_of, readable_rows


def nonneg_solution(fx: Any, an: est.Analysis, theta: np.ndarray) -> tuple[np.ndarray, int]:
    """(Weighted) least squares with estimable quantities ≥ 0: the blocks (and merged
    classes) estimable alone and the group combinations with no negative coefficient.
    Only directions of the row space move; the null space is never touched."""
    rank = an.rank
    if rank == 0:
        return theta, 0
    # the objective in the solver's coordinates, where it is diagonal
    D = fx.sol.scale
    Vr = fx.sol.V
    lam = fx.sol.lam
    cons: list[np.ndarray] = []
    for j in np.flatnonzero(an.estimable):
        e = np.zeros(D.size)
        e[j] = 1.0
        cons.append(e)
    for comp in an.components:
        row, _ = est.component_spaces(an, comp)
        rows = readable_rows(fx, comp, row)
        for r in rows:
            if np.all(r >= -1e-9):
                c = np.zeros(D.size)
                c[comp] = r
                cons.append(c)
    if not cons:
        return theta, 0
    A = np.array([(D * c) @ Vr for c in cons])          # constraints on z, [k, r]
    # keep an independent subset (they are by construction; guard anyway)
    q, rr, piv = sla.qr(A.T, pivoting=True, mode="economic")
    k_ind = int(np.sum(np.abs(np.diag(rr)) > 1e-10 * max(abs(rr[0, 0]), 1e-300)))
    A = A[np.sort(piv[:k_ind])]
    k = A.shape[0]
    # complete A to an invertible T with the orthogonal complement of its rows
    _, _, vt = np.linalg.svd(A)
    T = np.vstack([A, vt[k:]])
    Tinv = np.linalg.inv(T)
    z0 = Vr.T @ (theta / D)
    sq = np.sqrt(lam)
    lb = np.full(rank, -np.inf)
    lb[:k] = 0.0
    res = lsq_linear(sq[:, None] * Tinv, sq * z0, bounds=(lb, np.full(rank, np.inf)),
                     method="bvls" if rank <= 200 else "trf", lsmr_tol="auto")
    qv = res.x
    z = Tinv @ qv
    active = int(np.sum(qv[:k] <= 1e-9 * max(1.0, float(np.max(np.abs(T @ z0))))))
    new = D * (Vr @ z)
    # keep whatever θ had in the null space (nothing, for the minimum-norm θ)
    null_part = theta - D * (Vr @ (Vr.T @ (theta / D)))
    return new + null_part, active


def particular_solution(fx: Any, an: est.Analysis, theta: np.ndarray, cov_theta: np.ndarray,
                        move_null: bool = True
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The particular solution of the module docstring in (blocks, configs) coordinates:
    (solution [nb] NaN = never run, overhead solution [ncfg], their covariance, the row
    space, which blocks ran).  ``move_null=False``: ``theta`` is taken as it is (the
    physical fit chose its own solution among the equal ones, inside the constraints a
    step along the null space could break)."""
    d = fx.design
    n_cls = fx.n_cls
    pr = fx.reps.size
    # particular solution: min Σ_blocks T² with ε free (see module docstring)
    sizes = np.array([c.size for c in fx.classes] + [0] * (pr - n_cls), dtype=np.float64)
    wdiag = np.where(sizes > 0, 1.0 / np.maximum(sizes, 1.0), 0.0)
    N = exact_null_basis(an) if move_null else np.zeros((pr, 0))
    if N.shape[1]:
        A = N.T @ (wdiag[:, None] * N)
        L = np.eye(pr) - N @ np.linalg.pinv(A) @ (N.T * wdiag[None, :])
    else:
        L = np.eye(pr)
    theta_p = L @ theta
    cov_p = L @ cov_theta @ L.T
    if getattr(fx, "_cov_alt", None) is not None:
        # "both": each reported interval takes the wider method; the covariance (for
        # predict_ci95 and the WCET margin) must stay a covariance: the larger trace
        alt = L @ fx._cov_alt @ L.T
        if np.trace(alt) > np.trace(cov_p):
            cov_p = alt
    # expansion: reduced column -> (blocks..., configs...)
    E = np.zeros((fx.nb + fx.n_cfg, pr))
    for j in range(n_cls):
        for k in blocks_of(fx, j):
            E[int(k), j] = 1.0 / sizes[j]
    for j in range(n_cls, pr):
        E[fx.nb + d.cfg_of_col(fx.reps[j]), j] = 1.0
    sol_all = E @ theta_p
    executed = np.zeros(fx.nb, dtype=bool)
    for j in range(n_cls):
        executed[blocks_of(fx, j)] = True
    solution = np.where(executed, sol_all[:fx.nb], np.nan)
    live_cfg = np.zeros(fx.n_cfg, dtype=bool)
    for j in range(n_cls, pr):
        live_cfg[d.cfg_of_col(fx.reps[j])] = True
    overhead_solution = np.where(live_cfg, sol_all[fx.nb:], np.nan)
    covariance = E @ cov_p @ E.T
    # row space in (blocks, configs) coordinates, for predictable()
    # row space of the full design: a reduced row-space vector a gives the block vector
    # with a_j on every member of class j (identical columns carry equal counts)
    E1 = (E > 0).astype(np.float64)
    if an.rank:
        row_space = np.linalg.qr(E1 @ (an.Vr / an.scale[:, None]))[0]
    else:
        row_space = np.zeros((fx.nb + fx.n_cfg, 0))
    return solution, overhead_solution, covariance, row_space, executed


def exact_null_basis(an: est.Analysis) -> np.ndarray:
    """Unscaled basis of the directions the particular solution may move along: the
    numerically exact null space of the design (σ ≤ the eigensolver's own tolerance), with
    the rows of the columns estimable alone set to exactly zero.

    Not the analysis's whole null space: that one also holds the weak directions the noise
    tolerance dropped (:func:`estimability.analyze`), which the inputs do exercise.  Moving
    along them changes the predicted times of measured inputs, and an estimable column
    has small but non-zero entries in them (its Q[j,j] is below the tolerance, not zero):
    the minimum-Σ T² step then moved estimable blocks by up to thousands of ticks on
    multi-function code (issue #15), so the cost a block was reported with was not the
    cost it predicted with.  On the exact null space the entries of estimable columns are
    rounding errors; zeroing them makes the particular solution carry every estimable
    block's estimate exactly."""
    lam, vec = an.eig if an.eig is not None else (an.eigvals, None)
    p = an.scale.size
    if vec is None or p == 0:
        N = an.V0 * an.scale[:, None]
    else:
        sig = np.sqrt(np.clip(lam, 0.0, None))
        tol = an.sigma_max * float(np.sqrt(100.0 * p * est.EPS))
        N = vec[:, sig <= min(tol, an.sigma_tol)] * an.scale[:, None]
    N = N.copy()
    N[an.estimable] = 0.0
    return N
