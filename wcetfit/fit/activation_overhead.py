"""The activation probes' overhead taken out of the activation-fitted costs where it sits
(issue #15 item 2), for :mod:`wcetfit.fit.activation_root`: the calibration's ε and δ
(:mod:`wcetfit.split.actcalib`), the split of the root check's κ (:func:`_applied`), the
removal where each function's fit put each term (:func:`_removal`), the check of the
prediction as made, and the warnings (ε + δ against κ; a block left negative).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, Mapping

import numpy as np
from scipy import stats

from wcetfit.fit.activations import DELTA, ActivationFit
from wcetfit.fit.result import WARN_NEGATIVE_COST, WARN_OVERHEAD, FitWarning
from wcetfit.model import hexaddr

log = logging.getLogger(__name__)


def _calibration(c: Mapping[str, Any] | None) -> tuple[float, float, float, float,
                                                        float, float] | None:
    """(ε, ±, δ, ±, ε + δ, ±) in ticks from a stored calibration, or None."""
    if not c or "epsilon" not in c or "delta" not in c:
        return None
    e, d, k = c["epsilon"], c["delta"], c.get("kappa") or {}
    kv = k.get("value_ticks", e["value_ticks"] + d["value_ticks"])
    kc = k.get("ci95_ticks", math.hypot(e["ci95_ticks"], d["ci95_ticks"]))
    return (float(e["value_ticks"]), float(e["ci95_ticks"]), float(d["value_ticks"]),
            float(d["ci95_ticks"]), float(kv), float(kc))


def _removal(columns: tuple[tuple[str, int], ...], source: list[str | None],
             fits: Mapping[str, ActivationFit], rows: Mapping[str, Any], eps: float,
             delta: float, absolute: bool = False) -> np.ndarray:
    """Ticks of probe overhead each column's activation-fitted cost holds, taken out where
    the fit put it: a confounded ε[c] or δ is 0 in the particular solution and its value
    went into the blocks it is confounded with — ε into the entry block (or the set of
    once-per-activation blocks it cannot be told from), δ into each block whose calls
    are timed, once per timed call (``overhead_shares``: that attribution per tick).  An
    overhead the fit separated is not in the blocks: nothing is removed for it."""
    out = np.zeros(len(columns))
    for j, (col, src) in enumerate(zip(columns, source)):
        if src is None:
            continue
        f = fits[src]
        k = f.columns.index(col)
        for label, share in f.overhead_shares.items():
            w = abs(float(share[k])) if absolute else float(share[k])
            out[j] += (delta if label == DELTA else eps) * w
    return out


def _applied(cal: tuple, kappa: float | None, kappa_ci: float | None
             ) -> tuple[float, float, float, float]:
    """(ε, ±, δ, ±) taken out of the blocks.  The whole calls the bound answers to fix the
    total per activation: with the root check's κ (ε + δ as the whole calls see it), ε and
    δ are κ split in the calibration's proportion; the calibration's own sum drifts with
    the VM's speed by more than its interval says (151–164 ticks over runs on actree, κ of
    the same runs 142–151), and per activation that drift would be multiplied by every
    activation of a call.  Without κ (every input the same activations) or with κ ≤ 0,
    the calibration's figures themselves.  Intervals: relative, κ's and the split's."""
    e, ec, d, dc, k, kc = cal
    if kappa is None or kappa <= 0 or k <= 0:
        return e, ec, d, dc
    f = kappa / k
    rk = (kappa_ci or 0.0) / kappa
    return (e * f, e * f * math.hypot(rk, ec / max(e, 1e-9)), d * f,
            d * f * math.hypot(rk, dc / max(d, 1e-9)))


def _apply_check(check: Any, cal: tuple, applied: tuple, y: np.ndarray,
                 pred: np.ndarray, quantum: float) -> Any:
    """The root check of the prediction as made: probe-free costs (calibrated ε and δ
    removed) and the whole call's overhead fitted with them (one unknown, the mean
    residual; interval t95 × its standard error)."""
    ok = np.isfinite(y) & np.isfinite(pred)
    e, ec, d, dc, k, kc = cal
    out = replace(check, epsilon_ticks=e, epsilon_ci95_ticks=ec, delta_ticks=d,
                  delta_ci95_ticks=dc, calibrated_kappa_ticks=k, calibrated_kappa_ci95_ticks=kc,
                  removal="calibration", applied_epsilon_ticks=applied[0],
                  applied_epsilon_ci95_ticks=applied[1], applied_delta_ticks=applied[2],
                  applied_delta_ci95_ticks=applied[3])
    if ok.sum() < 2:
        return out
    r = y[ok] - pred[ok]
    c = float(r.mean())
    ci = float(stats.t.ppf(0.975, r.size - 1) * r.std(ddof=1) / math.sqrt(r.size))
    err = np.abs(pred[ok] + c - y[ok]) / np.maximum(np.abs(y[ok]), max(quantum, 1.0))
    return replace(out, applied_intercept_ticks=c, applied_intercept_ci95_ticks=ci,
                   applied_median_rel_error=float(np.median(err)),
                   applied_p95_rel_error=float(np.percentile(err, 95)))


def _kappa_agreement(root: str, check: Any) -> list[FitWarning]:
    """ε + δ of the calibration against κ of the root check: apart by more than both
    intervals is a warning (the calibration's code is not the real functions' code)."""
    k, kc = check.kappa_ticks, check.kappa_ci95_ticks
    c, cc = check.calibrated_kappa_ticks, check.calibrated_kappa_ci95_ticks
    if k is None or c is None or abs(k - c) <= (kc or 0.0) + (cc or 0.0):
        return []
    w = FitWarning(
        WARN_OVERHEAD,
        f"{root}: the probes' overhead per activation measured by the calibration, ε + δ = "
        f"{c:.1f} ± {cc:.1f} ticks, differs from the root check's κ = {k:.1f} ± {kc:.1f} "
        f"ticks by {c - k:+.1f} ticks (beyond both intervals)",
        "the calibration's two small functions do not run the stubs exactly as the real "
        "functions do (pipeline state, caches) or the whole-call and activation runs saw "
        "different machine speeds; the costs keep the root check's κ, split in the "
        "calibration's proportion between entry (ε) and calling blocks (δ)",
        estimate_ticks=c - k, ci95_ticks=(kc or 0.0) + (cc or 0.0))
    log.warning("%s", w.message)
    return [w]


# a cost this far below 0 after the removal is rounding, not a shortfall worth a warning
_ROUNDING_TICKS = 0.05


def _negative_after_removal(root: str, columns: tuple[tuple[str, int], ...],
                            source: list[str | None], base: np.ndarray, removed: np.ndarray,
                            costs: np.ndarray, cal: tuple | None,
                            check: Any) -> list[FitWarning]:
    """Blocks whose cost the overhead removal took below 0: one warning with the count,
    the worst block and the reason (never a silently negative cost; a shortfall within
    rounding is none).  The costs stay as they are: without a calibration κ comes out of
    entry blocks although δ sits in the callers' call blocks, so an entry block below 0
    is balanced by its callers' and the sum predicts the calls (holding it at 0 would
    not); with one, the share of ε a block held at 0 gets is the linear fit's."""
    raw = base - removed
    bad = np.flatnonzero((removed > 0) & (raw < -_ROUNDING_TICKS))
    if not bad.size:
        return []
    worst = int(bad[np.argmin(raw[bad])])
    fn, a = columns[worst]
    what = ("ε and δ (the calibration's split of κ)" if cal is not None else
            "κ = ε + δ of the root check")
    funcs = sorted({str(source[j]) for j in bad})
    w = FitWarning(
        WARN_NEGATIVE_COST,
        f"{root}: {bad.size} block(s) of {', '.join(funcs)} would cost below 0 ticks after "
        f"the probe overhead is removed, down to {raw[worst]:.1f} ticks ({fn} block "
        f"{hexaddr(a)}: {base[worst]:.1f} ticks from {source[worst]}'s activations less "
        f"{removed[worst]:.1f} ticks of {what})",
        "the probes cost less in these blocks' code than the overhead removed there (the "
        "calibration's or the root check's figure does not fit these functions, or the "
        "fit held the blocks at 0 and the overhead sits elsewhere): the blocks' costs are "
        "low by up to this much",
        blocks=tuple(columns[j][1] for j in bad), estimate_ticks=float(raw[worst]))
    log.warning("%s", w.message)
    return [w]
