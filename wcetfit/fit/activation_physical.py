"""One function's per-activation costs held to values a machine can have: every block cost
and every estimable probe overhead ≥ 0 ticks (``[fit] costs = "physical"``, the default, as
for the whole-call fit: :mod:`wcetfit.fit.physical`).

Why.  A function with many blocks and few activations (liblzma's LZMA decoder: 215
activations, one per input, against hundreds of block columns) fits its activations
equally well with costs that trade thousands of ticks between blocks that run together.
Unconstrained, the particular solution put −9,068 ticks on single blocks, predicted
activations below zero, and its bound was 609× the slowest input: the IPET maximises over
the costs and finds every block that noise made too expensive, its negative partner left
off the worst path.  Held to ≥ 0, one error cannot hide behind another.

Which solution.  The particular solution of the linear fit keeps the overheads the rows
cannot separate from blocks at 0 (the probe overhead stays in the blocks it is confounded
with; the root check estimates it per activation from whole calls).  The constrained one
keeps that convention: it is solved over the blocks and the estimable overheads only.

Intervals.  When an equally good physical solution exists (the weighted residual sum of
squares rises by less than :data:`wcetfit.fit.physical.NOTED_RISE`), the two differ only
along directions the activations do not determine, and the sandwich still describes every
estimable quantity.  When the constraints overrule the data, the covariance is a bootstrap
over inputs (activations of one input share its state) of the constrained fit, fewer
replicates for large functions (each replicate is one eigensolve of the unknowns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from wcetfit.fit.physical import NOTED_RISE, constrained_solve

# one eigensolve of p unknowns costs ~p³ flops: replicates × p³ stays below this budget
# (200 replicates up to ~100 unknowns, 50 at ~600, never fewer than MIN_REPLICATES)
_REPLICATE_FLOPS = 2e8
MIN_REPLICATES = 30


@dataclass(frozen=True)
class HeldActivations:
    """The constrained particular solution and what the constraints did."""

    solution: np.ndarray            # [q] design coordinates, overheads held 0 where confounded
    covariance: np.ndarray | None   # [q, q] bootstrap; None: the sandwich still holds
    replicates: int
    held_blocks: int                # blocks at 0 that the linear solution put below 0
    rise: float                     # relative rise of the weighted residual sum of squares


def constrained_particular(G: np.ndarray, b: np.ndarray, sub: np.ndarray, nb: int
                           ) -> np.ndarray:
    """argmin of the weighted squared residual over the columns ``sub`` with every unknown
    ≥ 0 (blocks ridged as in :func:`wcetfit.fit.physical.constrained_solve`), the other
    columns 0."""
    out = np.zeros(b.size)
    if sub.size:
        out[sub] = constrained_solve(G[np.ix_(sub, sub)], b[sub], np.zeros(sub.size),
                                     int(np.sum(sub < nb)))
    return out


def hold_to_physical(G: np.ndarray, b: np.ndarray, yy: float, linear: np.ndarray,
                     sub: np.ndarray, nb: int, D: Any, merged: Any, inputs: np.ndarray,
                     replicates: int, seed: int) -> HeldActivations | None:
    """The physical solution when the linear particular solution ``linear`` has a value
    below 0 (else None: nothing to hold).  ``yy``: the weighted sum of squared times (so
    that residual sums of squares compare); ``D``/``merged``/``inputs``: the merged design,
    its rows and each activation's input, for the bootstrap."""
    tol = 1e-9 * max(float(np.max(np.abs(linear), initial=0.0)), 1.0)
    if not np.any(linear[sub] < -tol):
        return None
    theta = constrained_particular(G, b, sub, nb)

    def sse(th: np.ndarray) -> float:
        return float(th @ G @ th - 2.0 * b @ th) + yy

    s_lin = sse(linear)
    rise = (sse(theta) - s_lin) / s_lin if s_lin > 0 else 0.0
    held = int(np.sum(linear[:nb] < -tol))
    if rise < NOTED_RISE or replicates <= 0:
        # (replicates 0: the point is all the caller uses)
        return HeldActivations(theta, None, 0, held, rise)
    q = b.size
    B = max(MIN_REPLICATES, min(int(replicates), int(_REPLICATE_FLOPS / max(sub.size, 1) ** 3)))
    samples = [constrained_particular(Gb, bb, sub, nb)
               for Gb, bb in _input_resamples(D, merged, inputs, B, seed)]
    cov = (np.cov(np.array(samples), rowvar=False).reshape(q, q) if len(samples) >= 2
           else np.full((q, q), np.inf))
    return HeldActivations(theta, cov, len(samples), held, rise)


def _input_resamples(D: Any, merged: Any, inputs: np.ndarray, B: int, seed: int):  # type: ignore[no-untyped-def]
    """(G, b) of ``B`` bootstrap resamples of the inputs: each merged row weighs the
    activations of the drawn inputs it holds (an input drawn twice counts twice)."""
    from wcetfit.fit.activations import _weighted_gram

    uniq, inp_id = np.unique(inputs, return_inverse=True)
    inp_id = inp_id.ravel()
    g = merged.rep.size
    shape = (g, uniq.size)
    per_n = sp.csr_matrix((np.ones(inp_id.size), (merged.inv, inp_id)), shape=shape)
    per_s = sp.csr_matrix((merged.y, (merged.inv, inp_id)), shape=shape)
    rng = np.random.default_rng(seed + 1)
    for _ in range(B):
        w = np.bincount(rng.integers(0, uniq.size, uniq.size),
                        minlength=uniq.size).astype(np.float64)
        n_b = per_n @ w
        s_b = per_s @ w
        yield _weighted_gram(D, n_b), np.asarray(D.T @ s_b).ravel()


def held_note(function: str, held: HeldActivations, residual_dof: int) -> str:
    """The report's words for what holding to physical values did to one function.  With
    few residual degrees of freedom noise alone raises the residual a lot: a constraint
    that only undoes noise adds about one residual variance, so k held costs over d degrees
    of freedom raise it by about k/d, which is said beside the rise."""
    what = (f"{held.held_blocks} block cost(s) the unconstrained fit put below 0"
            if held.held_blocks else "an overhead the unconstrained fit put below 0")
    rise = 100.0 * held.rise
    effect = (f"the weighted residual sum of squares rises by {rise:.1f} %" if rise >= 0.1
              else "the activations fit as well")
    if rise >= 0.1 and residual_dof >= 1:
        noise = 100.0 * max(held.held_blocks, 1) / residual_dof
        effect += (f", against about {noise:.0f} % from noise alone over "
                   f"{residual_dof} residual degrees of freedom")
    how = (f"intervals from a bootstrap over inputs ({held.replicates} replicates)"
           if held.covariance is not None else "intervals from the sandwich")
    return (f"{function}: the per-activation costs are held to physical values ({what}; "
            f"{effect}; {how})")
