"""The bound's confidence margin; the dispersion of single calls beside it.

**Confidence margin.**  The bound is computed with the point costs (the particular
solution), then widened by ``z · sqrt(x*ᵀ Σ x*)`` where x* is the worst-case count vector
(callees inlined) and Σ the covariance of the fitted solution: the standard error of the
predicted time of the worst path.  This is well defined because x* lies in the count space.
It is the upper confidence bound of the worst path found with the point costs, not the
maximum over all paths of their upper bounds (a non-convex problem); with costs whose
intervals are small against the differences between paths they coincide.

**Dispersion.**  The fit predicts the mean time of a call; a WCET must cover single calls.
``WcetResult.dispersion`` (set by ``wcetfit.wcet.dispersion.call_dispersion``) is the relative
excess of one undisturbed call over its prediction, exceeded with probability
``exceedance`` per call; the bound is (point + margin) × (1 + dispersion)
(:attr:`wcetfit.wcet.result.WcetResult.upper_ticks`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import FunctionModel
from wcetfit.wcet.result import OVERHEAD, describe_block


def path_margin(x: np.ndarray, cov: np.ndarray, z: float) -> float:
    """z · the standard error of Σ cost·x, for costs of covariance ``cov``.

    A covariance that is not finite along the path (a cost the fit gives no interval, an
    overflow) is an error, never a margin of NaN: the bound would print as a number it
    is not."""
    used = np.flatnonzero(x)
    if used.size and not math.isfinite(z):
        # t95 of a fit with no residual degrees of freedom: a margin of inf would print
        # as a bound of "—" beside a ratio of inf
        raise WcetError("the fit leaves no residual degrees of freedom (as many estimable "
                        "quantities as distinct inputs): its costs have no confidence "
                        "interval, so the bound has no margin (time more inputs)")
    with np.errstate(over="ignore", invalid="ignore"):
        sub = cov[np.ix_(used, used)]
        var = float(x[used] @ sub @ x[used]) if used.size else 0.0
    if not math.isfinite(var):
        bad = [int(i) for i in used if not np.all(np.isfinite(cov[i, used]))]
        what = (f"{len(bad)} of its {used.size} costs have no finite interval" if bad else
                f"the variance of its {used.size} costs overflows: their intervals are "
                f"astronomically wide (largest standard error "
                f"{math.sqrt(float(np.max(np.abs(np.diag(sub))))):.3g} ticks)")
        raise WcetError(f"the fit's covariance is not finite along the worst-case path "
                        f"({what}): no confidence margin; the inputs do not determine "
                        "those costs (add inputs, or more of them)")
    return float(z * math.sqrt(max(0.0, var)))


def inlined_margin(functions: Mapping[str, FunctionModel],
                   inlined: Mapping[tuple[str, int], float], cov: np.ndarray,
                   cov_index: Sequence[tuple[str, int] | str] | None, z: float,
                   entry_cost: float) -> float:
    """The margin of the root's worst path with its callees inlined: ``inlined`` is its
    count vector over (function, address), ``cov``/``cov_index`` the fit's covariance over
    all functions' blocks (and optionally :data:`OVERHEAD`)."""
    if cov_index is None:
        raise WcetError("a covariance needs cov_index: the (function, address) of each row")
    cov = np.asarray(cov, dtype=float)
    if cov.shape != (len(cov_index), len(cov_index)):
        raise WcetError(f"covariance has shape {cov.shape}, but cov_index has "
                        f"{len(cov_index)} entries")
    pos = {k: i for i, k in enumerate(cov_index)}
    # A block shared by two functions has one row, under either name.
    by_addr = {k[1]: i for i, k in enumerate(cov_index) if isinstance(k, tuple)}
    x = np.zeros(len(cov_index))
    for k, v in inlined.items():
        i = pos.get(k, by_addr.get(k[1]))
        if i is None:
            raise WcetError(f"covariance has no row for block "
                            f"{describe_block(functions[k[0]], k[1])} of the worst-case path")
        x[i] += v
    if OVERHEAD in pos and entry_cost:
        x[pos[OVERHEAD]] = 1.0
    return path_margin(x, cov, z)


def joint_excess(ticks: np.ndarray, keep: np.ndarray, predicted: np.ndarray, *,
                 exceedance: float, quantile,  # type: ignore[no-untyped-def]
                 per: np.ndarray | None = None) -> float:
    """One timed call over its input's prediction, as the calls measured it: the factor
    single calls pass with probability at most ``exceedance`` (``quantile(values,
    exceedance=…)``, an extreme-value fit such as ``wcetfit.wcet.dispersion.gumbel_quantile``),
    and at least the largest seen.

    ``ticks`` [input, repeat] are the calls as timed (the machine's slow periods left in),
    ``keep`` the calls the repeat statistic does not treat as interrupted, ``predicted``
    the fit's mean time per input at the machine's fast end.  The three factors of the
    dispersion (worst misfit, call noise, slowest machine speed) are each the worst seen
    on its own, and their product assumes the worst-fitting input, its most disturbed call
    and the machine's slowest period come together.  Under load each is large (adpcm on a
    shared 2-core VM: 1.25 × 2.38 × 2.01 = 5.97) while no call measured came near their
    product (the slowest call 2.75× its prediction): the joint factor is measured where
    they do come together, on every call, so it is never below what a call showed.

    ``per``: what each input's excess over its prediction is relative to (default the
    prediction itself; the point for inputs predicted short: wcetfit.wcet.dispersion.call_dispersion)."""
    t = np.asarray(ticks, dtype=float)
    p = np.asarray(predicted, dtype=float)[:, None]
    q = p if per is None else np.asarray(per, dtype=float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.asarray(keep, dtype=bool) & np.isfinite(t) & (p > 0) & (q > 0),
                         1.0 + (t - p) / q, np.nan)
    ratio = ratio[np.isfinite(ratio)]
    if ratio.size == 0:
        return math.inf
    return max(1.0, float(ratio.max()), float(quantile(ratio, exceedance=exceedance)))
