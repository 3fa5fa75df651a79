"""The bound's confidence margin; the dispersion of single calls beside it.

**Confidence margin.**  The bound is computed with the point costs (the particular
solution), then widened by ``z · sqrt(x*ᵀ Σ x*)`` where x* is the worst-case count vector
(callees inlined) and Σ the covariance of the fitted solution: the standard error of the
predicted time of the worst path.  This is well defined because x* lies in the count space.
It is the upper confidence bound of the worst path found with the point costs, not the
maximum over all paths of their upper bounds (a non-convex problem); with costs whose
intervals are small against the differences between paths they coincide.

**Dispersion.**  The fit predicts the mean time of a call; a WCET must cover single calls.
``WcetResult.dispersion`` (set by ``wcetfit.pipeline.call_dispersion``) is the relative
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
    """z · the standard error of Σ cost·x, for costs of covariance ``cov``."""
    return float(z * math.sqrt(max(0.0, float(x @ cov @ x))))


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
