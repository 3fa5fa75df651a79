"""Robust statistics for the fit: one value per input from its repeated timings, and
residual-based rejection of rows that the linear model does not explain.

Two kinds of disturbance reach the timings (DESIGN.md, "Facts"):

* the TSC advances in steps of ``q`` ticks (26 here).  A timed call is the difference of
  two readings whose phase inside a step is random, so a call of true length ``d`` reads
  ``q·floor(d/q)`` or ``q·ceil(d/q)`` with probabilities that make the *mean* exactly ``d``.
  An average over repeats therefore resolves less than a step; a median or a trimmed
  mean does not (both snap towards the more frequent of the two levels: with 90 % of the
  repeats at the lower level, a 20 %-trimmed mean keeps only lower-level values and is
  ``0.1·q`` low);
* rare, large positive disturbances (an interrupt or a preemption inside the timed region:
  thousands of ticks).

The default statistic, ``"clipped_mean"``, answers both: discard the repeats that deviate
from the input's median by much more than the median deviation (Moreno & Fischmeister
§4.1), then average the rest.  The clipping half-width never drops below two quantization
steps, so both levels of the quantized distribution (and their neighbours) always stay in
and the mean keeps its sub-step resolution.  bench/fit.py measures the four statistics on
synthetic quantized, noisy, interrupted timings (figures ``rowstat_*``): the clipped mean
has the smallest error of the four; the plain mean is ruined by interrupts and the median
and trimmed mean by the quantization bias.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

log = logging.getLogger(__name__)

# 1.4826·MAD estimates the standard deviation of a normal sample.  A modified z-score of
# 3.5 (Iglewicz & Hoaglin's recommendation for outlier labelling) therefore means 3.5
# standard deviations: a normal sample loses 0.05 % of its points to the cut, and the cut
# is symmetric, so the mean of what stays is unbiased for symmetric noise.
MAD_TO_SIGMA = 1.4826
Z_CUT = 3.5

STATISTICS = ("clipped_mean", "median", "trimmed_mean", "mean")


@dataclass(frozen=True)
class RepeatSummary:
    """Per-input summary of the repeated timings."""

    value: np.ndarray        # float [n_inputs]; NaN where no repeat is valid
    n_valid: np.ndarray      # int [n_inputs]: non-NaN repeats
    n_used: np.ndarray       # int [n_inputs]: repeats that entered the statistic
    keep: np.ndarray         # bool [n_inputs, n_repeats]: repeats that entered it


def detect_quantum(ticks: np.ndarray, sample: int = 200_000) -> float:
    """The TSC step: the gcd of the (integer) timings, or 0 when they are not integers.

    Robust to a few stray values (a timing from another clock, a corrupted record): the
    gcd is taken over blocks of 64 values and the median of the block gcds wins, then
    confirmed on ≥ 90 % of all values.  A result of 1 simply means "no visible step"."""
    flat = np.asarray(ticks, dtype=np.float64).ravel()
    flat = flat[np.isfinite(flat)]
    if flat.size > sample:
        flat = flat[:: flat.size // sample + 1]
    ints = flat[(flat == np.round(flat)) & (np.abs(flat) < 2.0 ** 62)]
    if ints.size < 0.9 * max(flat.size, 1) or ints.size == 0:
        return 0.0
    iv = np.abs(ints.astype(np.int64))
    iv = iv[iv > 0]
    if iv.size == 0:
        return 0.0
    blocks = [int(np.gcd.reduce(iv[k:k + 64])) for k in range(0, iv.size, 64)]
    q = int(np.median(blocks))
    if q <= 1:
        return 1.0
    if np.mean(iv % q == 0) < 0.9:
        return 1.0
    return float(q)


def summarize_repeats(ticks: np.ndarray, statistic: str = "clipped_mean", *,
                      quantum: float = 0.0, trim: float = 0.2) -> RepeatSummary:
    """One value per input (row of ``ticks``) from its repeats; NaN marks a missing repeat."""
    t = np.asarray(ticks, dtype=np.float64)
    if t.ndim == 1:
        t = t[:, None]
    valid = np.isfinite(t)
    n_valid = valid.sum(axis=1)
    has = n_valid > 0
    value = np.full(t.shape[0], np.nan)
    keep = valid.copy()
    if statistic == "mean":
        value[has] = np.nanmean(t[has], axis=1)
    elif statistic == "median":
        value[has] = np.nanmedian(t[has], axis=1)
    elif statistic == "trimmed_mean":
        value[has], keep[has] = _trimmed_mean(t[has], n_valid[has], trim)
    elif statistic == "clipped_mean":
        value[has], keep[has] = _clipped_mean(t[has], quantum)
    else:
        raise ValueError(f"unknown statistic {statistic!r}; expected one of {STATISTICS}")
    return RepeatSummary(value, n_valid, keep.sum(axis=1), keep)


def _clipped_mean(t: np.ndarray, quantum: float) -> tuple[np.ndarray, np.ndarray]:
    med = np.nanmedian(t, axis=1)
    dev = np.abs(t - med[:, None])
    mad = np.nanmedian(dev, axis=1)
    # The MAD of a handful of repeats is itself very noisy (with 5 repeats it is below
    # half the true value one time in four), and a cut at 3.5 of it then discards honest
    # calls.  So the scale is never below a pooled one from inputs of similar length.
    scale = np.maximum(MAD_TO_SIGMA * mad, _pooled_sigma(med, t))
    # Floor of two steps: the two levels a quantized call can read are one step apart, and
    # the median sits on one of them, so both (and one more level each side) stay in.
    # Without quantization, a tiny relative floor keeps identical repeats from being
    # "outliers" of a zero MAD.
    floor = np.maximum(2.0 * quantum, 1e-9 * np.abs(med))
    half = np.maximum(Z_CUT * scale, floor)
    with np.errstate(invalid="ignore"):
        keep = np.isfinite(t) & (dev <= half[:, None])
    value = np.where(keep, t, 0.0).sum(axis=1) / np.maximum(keep.sum(axis=1), 1)
    return value, keep


def _pooled_sigma(med: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Noise σ pooled over inputs of similar median time (quantile bins, interpolated):
    from the differences of successive repeats, whose absolute median is 0.954σ for normal
    noise — unbiased for any number of repeats (deviations from a per-input median are
    not: one of them is 0 by construction), and an interrupt spoils only two differences."""
    n = med.size
    if t.shape[1] < 2 or n == 0:
        return np.zeros(n)
    diff = np.abs(np.diff(t, axis=1))
    bins = int(np.clip(n // 50, 1, 20))
    order = np.argsort(med, kind="stable")
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    centres, values = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        idx = order[a:b]
        d = diff[idx]
        d = d[np.isfinite(d)]
        if d.size == 0:
            continue
        centres.append(float(np.median(med[idx])))
        values.append(float(np.median(d)) / 0.9539)
    if not centres:
        return np.zeros(n)
    c, first = np.unique(np.asarray(centres), return_index=True)
    v = np.asarray(values)[first]
    return np.interp(med, c, v) if c.size > 1 else np.full(n, v[0])


def _trimmed_mean(t: np.ndarray, n_valid: np.ndarray, trim: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(np.where(np.isfinite(t), t, np.inf), axis=1)
    srt = np.take_along_axis(t, order, axis=1)
    g = np.floor(trim * n_valid).astype(np.int64)
    ranks = np.arange(t.shape[1])[None, :]
    inside = (ranks >= g[:, None]) & (ranks < (n_valid - g)[:, None])
    value = np.where(inside, srt, 0.0).sum(axis=1) / np.maximum(inside.sum(axis=1), 1)
    keep = np.zeros_like(inside)
    np.put_along_axis(keep, order, inside, axis=1)
    return value, keep


# --- rows of the linear system ---------------------------------------------------------------

def rejection_threshold(n: int) -> float:
    """|z| above which a row's residual is rejected.

    At least :data:`Z_CUT`; for many rows, raised to Chauvenet's criterion (the |z| that a
    normal sample of ``n`` exceeds with probability 0.5 in total) so that clean data loses
    fewer than one row on average however many rows there are: with 100,000 rows a flat
    3.5 would discard ~47 good rows, the raised cut (4.6) about 0.5."""
    if n <= 1:
        return math.inf
    return max(Z_CUT, float(stats.norm.isf(0.25 / n)))


def local_scale(resid: np.ndarray, fitted: np.ndarray, floor: float,
                at: np.ndarray | None = None, bins: int | None = None) -> np.ndarray:
    """Robust residual scale as a function of the predicted time, evaluated at ``at``
    (default: at ``fitted``).

    Timing noise grows with the length of a call (more interrupts, cache and branch
    events), so one global MAD would flag long calls and miss outliers among short ones.
    Rows are binned by predicted time (quantile bins of ~50+ rows), each bin's scale is
    1.4826·MAD of its residuals about their median, and the scale at a predicted time is
    interpolated between bin centres (constant beyond the outer ones)."""
    if at is None:
        at = fitted
    n = resid.size
    if n == 0:
        return np.full(np.shape(at), float(floor))
    if bins is None:
        bins = int(np.clip(n // 50, 1, 20))
    order = np.argsort(fitted, kind="stable")
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    centres, scales = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        idx = order[a:b]
        r = resid[idx]
        centres.append(float(np.median(fitted[idx])))
        scales.append(MAD_TO_SIGMA * float(np.median(np.abs(r - np.median(r)))))
    c = np.asarray(centres)
    s = np.asarray(scales)
    # A bin whose MAD collapses (many rows predicted exactly) must not make its rows look
    # like outliers: never go below a tenth of the typical bin scale.
    s = np.maximum(s, 0.1 * float(np.median(s)))
    if c.size == 1:
        out = np.full(np.shape(at), s[0])
    else:
        c, first = np.unique(c, return_index=True)
        s = s[first]
        out = np.interp(at, c, s) if c.size > 1 else np.full(np.shape(at), s[0])
    return np.maximum(out, floor)


def modified_z(resid: np.ndarray, scale: np.ndarray, centre: float | None = None
               ) -> np.ndarray:
    """Residual in units of the local robust scale, about ``centre`` (default: the median
    residual)."""
    if centre is None:
        centre = float(np.median(resid)) if resid.size else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (resid - centre) / scale
    return np.where(np.isfinite(z), z, 0.0)
