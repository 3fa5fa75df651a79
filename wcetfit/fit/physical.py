"""Costs a machine can have: the least-squares fit held to every block ≥ 0 ticks and every
configuration's overhead ε ≥ its floor (``FitOptions.costs = "physical"``, the default), and
each block to at most what its instructions can take (wcetfit.fit.ceilings), where known.

Why.  On library code that calls a dozen functions (zlib's ``uncompress``, libbz2's
``BZ2_bzBuffToBuffDecompress``, 300 inputs) the inputs move whole groups of block counts
together, so plain least squares trades cost between a block and those that run with it,
and between ε and the blocks every call runs many times.  The solution it predicted with
had costs down to −12,477 ticks (120 inputs), it predicted held-out calls below zero, and
its worst path was 1.5–2.2× the slowest input, with a point that moved by 48 % between two
sessions: the IPET maximises over the costs, so it finds every direction where noise made
a cost too high, and a negative partner elsewhere hid it from the residuals.  Costs held
to physical values cannot hide one error behind another.  Measured on the same stored
timings of two sessions each (300 inputs × 10; 5-fold held-out median / p95 per timed call;
the worst path's point), linear → physical: uncompress 1.9/23.8 % and 6.6/40.3 % →
1.7/12.5 % and 5.5/28.3 %, points 62,272 and 92,051 → 43,888 and 47,334 ticks; BZ2
7.6/41.4 % and 7.1/40.4 % → 7.5/30.5 % and 7.9/33.1 %, points 591,590 and 702,779 →
449,578 and 464,316 ticks (README, "Costs held to physical values").

The problem.  min Σ_i ω_i (y_i − x_iᵀθ)² subject to θ_block ≥ 0 (a class of identical
columns is one unknown, its sum) and θ_ε ≥ floor, with the same rows, outlier rejection
and relative weights ω as the linear fit.  Solved from the normal matrix, so its size does
not grow with the rows: in the scaled coordinates where G has a unit diagonal,
G = VΛVᵀ gives a factor A = Λ^½Vᵀ with AᵀA = G, and the problem is a non-negative least
squares in the shifted unknowns θ − floor (Lawson–Hanson active set, scipy ``nnls``; ~5 ms
for 165 unknowns).  Many θ fit equally well where the inputs do not separate blocks; a
ridge of 1e-6 on the scaled block unknowns (not ε) picks the smallest among them, as the
linear fit's particular solution does (the blocks run once per call get 0 and ε carries
their time), and moves a fitted value by less than 1e-6 of its scale.

Intervals.  Where a physical solution fits as well as the unconstrained one (the weighted
residual sum of squares rises by less than :data:`NOTED_RISE`), the two differ only along
directions the inputs do not determine, every estimable quantity is the linear estimate,
and the linear sandwich is its covariance.  Where the constraints overrule the data, the
sandwich describes an estimator that is no longer the one reported: the covariance is then
a bootstrap over inputs of the constrained fit (``FitOptions.bootstrap`` replicates,
seeded, each replicate's row weights held fixed as in
:func:`wcetfit.fit.intervals.bootstrap`), an interval t₉₅ × the replicates' standard
deviation.  A cost held at 0 has an interval that reaches above it as far as the
replicates go.  Coverage of known costs: tests/test_fit_physical.py.

Held-out figures come from each fold's constrained fit.  When the constraints overrule the
data the fit says so (:attr:`PhysicalFit.note`, a ``held_to_physical`` warning): the data
pulled a cost or ε to a value no machine has, which means the model (one fixed cost per
block) misses something the timings show, and the constrained costs are the closest
physical ones.

Size.  Each replicate solves an eigenproblem of the unknowns: beyond ``MAX_UNKNOWNS``
reduced unknowns the fit stays linear and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear, nnls

from wcetfit.fit.intervals import resampled_normals
from wcetfit.fit.result import WARN_HELD, WARN_UNCONSTRAINED, FitWarning

# Ridge on the scaled block unknowns: picks one solution among those the inputs cannot
# tell apart, and changes a fitted value by less than this fraction of its scale.
RIDGE = 1e-6
# Reduced unknowns beyond which the constrained fit and its bootstrap (one p×p
# eigendecomposition and one NNLS per replicate, ~10 ms at 165, ~1 s at 1,000) are not run.
MAX_UNKNOWNS = 600
# Rise of the weighted residual sum of squares below which the constraints are taken to
# overrule nothing the data say (the ridge alone moves it by ~1e-6).
NOTED_RISE = 1e-4


@dataclass(frozen=True)
class PhysicalFit:
    """The constrained estimate in the fit's reduced coordinates (classes, then configs)."""

    theta: np.ndarray          # [pr]
    # [pr, pr] bootstrap over inputs, when the constraints overruled the data; None when
    # an equally good physical solution existed: the linear fit's covariance then holds
    covariance: np.ndarray | None
    fold_theta: np.ndarray | None   # [p, folds] in design coordinates, or None
    replicates: int
    at_bound: np.ndarray       # [pr] bool: the constraint is active
    note: str | None           # what the constraints overruled (held_warning's text)


def lower_bounds(fx: Any) -> np.ndarray:
    """0 for every block class, the overhead floor for every configuration's ε."""
    pr = fx.reps.size
    lower = np.zeros(pr)
    lower[fx.n_cls:] = max(float(fx.opts.overhead_floor_ticks), 0.0)
    return lower


def upper_bounds(fx: Any) -> np.ndarray:
    """Per reduced unknown: the most its blocks can cost per execution (a class of
    identical columns is one unknown, their sum: the sum of their ceilings), inf for a
    block without a limit and for every ε (wcetfit.fit.ceilings; all inf without them)."""
    upper = np.full(fx.reps.size, np.inf)
    ceilings = getattr(fx, "ceilings", None)
    if ceilings is None:
        return upper
    for j, members in enumerate(fx.classes):
        upper[j] = float(np.sum(ceilings[fx.design.active[members]]))
    return upper


def constrained_solve(G: np.ndarray, b: np.ndarray, lower: np.ndarray, n_blocks: int,
                      upper: np.ndarray | None = None) -> np.ndarray:
    """argmin θᵀGθ − 2bᵀθ + ridge subject to lower ≤ θ ≤ upper (module docstring);
    ``G``/``b`` are a (weighted) normal matrix and right-hand side in reduced
    coordinates, the first ``n_blocks`` unknowns blocks (ridged), the rest ε.  The upper
    limits are far above any cost the data support: the solution is the one without them
    unless it passes one, and only then is the problem solved with both."""
    p = b.size
    diag = np.diag(G).copy()
    live = diag > 0
    D = np.where(live, np.sqrt(np.where(live, diag, 1.0)), 1.0)
    Gs = G / D[:, None] / D[None, :]
    bs = b / D
    lam, V = np.linalg.eigh(Gs)
    keep = lam > max(float(lam[-1]), 0.0) * p * np.finfo(float).eps
    lam, V = lam[keep], V[:, keep]
    sq = np.sqrt(lam)
    A = sq[:, None] * V.T                       # AᵀA = Gs on its range
    rhs = (V.T @ bs) / sq
    ridge = np.zeros((n_blocks, p))
    ridge[np.arange(n_blocks), np.arange(n_blocks)] = math.sqrt(RIDGE)
    # an unknown no row carries is held at its bound by a unit row
    dead = np.flatnonzero(~live)
    pin = np.zeros((dead.size, p))
    pin[np.arange(dead.size), dead] = 1.0
    M = np.vstack([A, ridge, pin])
    r = np.concatenate([rhs, np.zeros(n_blocks + dead.size)])
    shift = D * lower                           # scaled unknowns u = D·θ − D·lower ≥ 0
    r = r - M @ shift
    try:
        u, _ = nnls(M, r, maxiter=max(50 * p, 1000))
    except RuntimeError:
        # the active set did not settle: the bounded-variable solver always returns
        res = lsq_linear(M, r, bounds=(0.0, np.inf), method="bvls")
        u = res.x
    # an unknown at its bound is the bound itself, not the bound scaled there and back
    # (ε one bit below its floor would be "below the floor")
    theta = np.where(u > 0.0, (u + shift) / D, lower)
    if upper is None or not np.any(theta > upper):
        return theta
    # scaled: u ≤ D·upper − D·lower (inf stays inf)
    room = np.where(np.isfinite(upper), D * upper - shift, np.inf)
    u = lsq_linear(M, r, bounds=(np.zeros(p), np.maximum(room, 0.0)), method="bvls").x
    theta = np.where(u > 0.0, (u + shift) / D, lower)
    return np.minimum(theta, upper)


def physical_fit(fx: Any, kept: np.ndarray, theta_linear: np.ndarray) -> PhysicalFit:
    """The constrained estimate on the final rows and weights of the linear fit ``fx``
    (:class:`wcetfit.fit.solve._Fitter`, whose estimate is ``theta_linear``), the folds'
    constrained solutions and, when the constraints overrule the data, the bootstrap
    covariance and the note saying so.

    When the weighted residual sum of squares rises by less than :data:`NOTED_RISE`, a
    physical solution fits as well as the unconstrained one: the two differ only along
    directions the inputs do not determine (and by the ridge), every estimable quantity is
    the linear estimate, and so is its covariance (no bootstrap is run)."""
    reps = fx.reps
    lower = lower_bounds(fx)
    upper = upper_bounds(fx)
    n_cls = fx.n_cls
    Gw = fx.Gwtot[np.ix_(reps, reps)]
    bw = fx.bwtot[reps]
    theta = constrained_solve(Gw, bw, lower, n_cls, upper)
    fold_theta = None
    if fx.F > 1:
        fold_theta = np.zeros((fx.design.p, fx.F))
        for k in range(fx.F):
            Gk = (fx.Gwtot - fx.Gw[k])[np.ix_(reps, reps)]
            bk = (fx.bwtot - fx.bw[k])[reps]
            fold_theta[reps, k] = constrained_solve(Gk, bk, lower, n_cls, upper)
    tol = 1e-9 * np.maximum(np.abs(lower), 1.0)
    at_bound = np.abs(theta - lower) <= tol
    finite = np.isfinite(upper)
    at_ceiling = finite & (theta >= np.where(finite, upper * (1.0 - 1e-9), np.inf))
    broke = int(np.sum(theta_linear < lower - tol) + np.sum(theta_linear > upper))
    yy = float(np.sum((fx.w * fx.v * fx.y ** 2)[fx.w > 0]))

    def sse(th: np.ndarray) -> float:
        return float(th @ Gw @ th - 2.0 * bw @ th) + yy

    s_lin = sse(theta_linear)
    # An exact unconstrained fit leaves a residual of rounding, of either sign (the
    # normal-equation form cancels): measured against the timings' own sum of squares, not
    # divided by.  Its sign had decided whether an overruled fit was said at all (liblzma's
    # encoder case, as many unknowns as inputs: said on one CPU, silent on another).
    exact = s_lin <= EXACT_SHARE * yy
    rise = ((sse(theta) - s_lin) / s_lin if not exact else
            math.inf if sse(theta) > EXACT_SHARE * yy else 0.0)
    if not broke or rise < NOTED_RISE:
        return PhysicalFit(theta, None, fold_theta, 0, at_bound | at_ceiling, None)
    samples = [constrained_solve(Gb, bb, lower, n_cls, upper)
               for Gb, bb in resampled_normals(fx, kept)]
    cov = (np.cov(np.array(samples), rowvar=False).reshape(reps.size, reps.size)
           if len(samples) >= 2 else np.full((reps.size, reps.size), np.inf))
    n_blocks = int(at_bound[:n_cls].sum())
    n_eps = int(at_bound[n_cls:].sum())
    n_top = int(at_ceiling[:n_cls].sum())
    held = ", ".join(x for x in (f"{n_blocks} block cost(s) at 0" if n_blocks else "",
                                 f"{n_top} at the most their instructions can take "
                                 f"({_ceiling_names(fx, at_ceiling, upper)})" if n_top else "",
                                 f"ε at its floor of {lower[n_cls]:,.0f} ticks" if n_eps
                                 else "") if x)
    if not exact:
        effect = f"which raises the weighted residual sum of squares by {_percent(rise)} %"
    else:
        # Least squares reproduces the timings (as many unknowns as inputs): a rise over
        # nothing is no figure (liblzma's encoder on 70 inputs: "11876182777.6 %").
        effect = (f"which leaves a residual of {100.0 * math.sqrt(max(sse(theta), 0.0) / yy):.1f} "
                  f"% of the timings (root mean square); unconstrained least squares "
                  f"reproduces them exactly (as many unknowns as inputs: time more inputs)")
    note = (f"unconstrained least squares gives {broke} of the fitted costs values no "
            f"machine has "
            f"(a cost below 0 or above what its instructions can take, or ε below its "
            f"floor); the costs are fitted held to physical "
            f"values ({held or 'none held at a bound'}), {effect}")
    return PhysicalFit(theta, cov, fold_theta, len(samples), at_bound | at_ceiling, note)


def _ceiling_names(fx: Any, at_ceiling: np.ndarray, upper: np.ndarray, limit: int = 3) -> str:
    """The blocks held at their ceiling (``upper``), by address, with the ceiling in ticks."""
    out = []
    for j in np.flatnonzero(at_ceiling[:fx.n_cls]):
        addrs = [fx.addrs[fx.design.active[m]] for m in fx.classes[j]]
        out.append(f"{'+'.join(hex(a) for a in addrs)} ≤ {upper[j]:,.0f} ticks")
    more = f", … {len(out) - limit} more" if len(out) > limit else ""
    return ", ".join(out[:limit]) + more


# An unconstrained residual sum of squares below this share of the timings' own sum of
# squares is an exact fit (rounding): a rise relative to it is not reported as a figure.
EXACT_SHARE = 1e-9


def _percent(rise: float) -> str:
    """A rise as a percentage with the digits it needs: one decimal from 0.1 % up, two
    significant digits below (a rise noted at all, ≥ NOTED_RISE, never prints as "0.0")."""
    pct = 100.0 * rise
    return f"{pct:.1f}" if pct >= 0.1 else f"{pct:.2g}"


def unconstrained_warning(unknowns: int, negative: int) -> FitWarning:
    """The report's warning when the fit has more unknowns than :data:`MAX_UNKNOWNS`: the
    costs are unconstrained least squares, ``negative`` of the block costs below zero."""
    return FitWarning(
        WARN_UNCONSTRAINED,
        f"{unknowns} unknowns, more than the {MAX_UNKNOWNS} the physically held fit and its "
        f"bootstrap are run for: the costs are unconstrained least squares"
        + (f", {negative} block cost(s) below zero (no machine has them; the sums the "
           f"inputs determine are what the bound uses)" if negative else ""),
        "fewer functions or blocks in one fit (measure a callee as a target of its own), "
        "or inputs that separate more blocks (fewer unknowns remain in the groups)")


def held_warning(note: str) -> FitWarning:
    """The report's warning for :attr:`PhysicalFit.note`."""
    return FitWarning(
        WARN_HELD, note,
        "a rise of a few percent is the noise; a large one means one fixed cost per block "
        "does not describe these timings (costs that depend on the data: look at the "
        "worst-predicted inputs), and the physical costs are the closest ones; "
        "[fit] costs = \"linear\" shows the unconstrained estimate")
