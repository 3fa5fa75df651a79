"""The machine's speed over a timing run, followed from the timings themselves.

On the shared VMs this project runs on, the same call of the same input takes up to
twice as long for seconds at a time, then returns to its old time.  Measured
(2026-11-22, one process pinned to one CPU, one fixed input, 3,000 calls a process):
isort's call ran at 18.4k ticks in some periods and 26–34k in others while a dependent
``imul`` chain timed just before each call did not move (2,158–2,184 ticks);
throughput-bound code slows, latency-bound code does not, which is what a busy
sibling hyperthread of another tenant does.  In the timing run the periods show up as
whole stretches of a pass at one speed: isort's passes ran at 0.62× and 1.0–1.18× the
inputs' medians, fir's at 0.84× and 1.03–1.21×, switching mid-pass
(tests/data/isort_timings.npz keeps that run's timings).

Left in the data, the periods do two kinds of harm.  The fit sees one input's repeats
spread by the speed ratio and discards the minority as interrupted calls, differently
for every input, so its held-out errors grow (isort 13 %, fir 14 %); and the WCET's
call-to-call noise mixes a property of the machine (how slow it gets) with a property
of single calls.  So the speed is estimated as a function of time and divided out:

* each call's *ratio* is its time over its input's typical time (the median over
  repeats of the speed-corrected times);
* in time order (the timing run takes repeat r of every input, each pass starting at
  another input, then repeat r+1: ``wcetfit.timing.run.run_times``, :func:`call_positions`)
  a running median over ``window`` consecutive calls
  of the ratios is the speed at that moment: a median, so interrupted calls do not move
  it, and a switch between periods stays a step (the calls within half a window of
  the switch may take the other side's speed: one-sided windows chosen by agreement
  with the calls around were tried, and cost more accuracy away from switches, where
  most calls are, than they gained next to them);
* the two steps alternate a few times; the factors are scaled so that the fast end of
  the run (the 5th percentile over time) is 1.

Calls shorter than ``min_quanta`` TSC steps do not take part (their ratio is mostly
quantization); their factor is interpolated from the calls around them in time.  When
too few calls are long enough to follow the speed, every factor is 1 and the profile
says it was not followed.

What the fit sees is then the time each call would have taken at the run's fast end;
the costs it reports are at that speed, and the WCET multiplies by the slowest
sustained factor seen (:attr:`SpeedProfile.max_factor`), an observed quantity like an
observed loop bound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# Calls in the running median: a slow period lasts thousands of calls, so 51 follows it
# with a lag of 25 calls at its edges, and with 2 % noise per call the median of 51 moves
# by 0.35 % (sd) where the machine does not.
WINDOW_CALLS = 51
MIN_QUANTA = 30            # calls shorter than this many TSC steps are not used
REFERENCE_QUANTILE = 0.05  # the run's fast end: factor 1
ITERATIONS = 3


@dataclass(frozen=True)
class SpeedProfile:
    """Speed factor of every timed call: how much slower than the run's fast end the
    machine ran at that moment (1 = fast end; NaN where the call is missing)."""

    factors: np.ndarray = field(repr=False)   # float [inputs, repeats]
    followed: bool
    calls_used: int                           # calls long enough to take part
    window: int
    reason: str = ""                          # why not followed

    @property
    def max_factor(self) -> float:
        """The slowest sustained speed seen (the running median's maximum)."""
        f = self.factors[np.isfinite(self.factors)]
        return float(f.max()) if f.size else 1.0

    def at_reference(self, ticks: np.ndarray) -> np.ndarray:
        """``ticks`` (the ones profiled) with the speed divided out: each call as it would
        have run at the run's fast end."""
        t = np.asarray(ticks, dtype=np.float64)
        if t.shape != self.factors.shape:
            raise ValueError(f"speed factors have shape {self.factors.shape}, the ticks "
                             f"{t.shape}")
        f = self.factors
        with np.errstate(invalid="ignore", divide="ignore"):
            return t / np.where(np.isfinite(f) & (f > 0), f, 1.0)

    def quantile(self, q: float) -> float:
        f = self.factors[np.isfinite(self.factors)]
        return float(np.quantile(f, q)) if f.size else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "followed": self.followed,
            "reference": "fast end of the run (5th percentile over time) = 1",
            "factor_median": self.quantile(0.5),
            "factor_p95": self.quantile(0.95),
            "factor_max": self.max_factor,
            "calls_used": self.calls_used,
            "window_calls": self.window,
            **({"reason": self.reason} if self.reason else {}),
        }


def flat_profile(ticks: np.ndarray, reason: str) -> SpeedProfile:
    t = np.asarray(ticks, dtype=np.float64)
    return SpeedProfile(np.where(np.isfinite(t), 1.0, np.nan), False, 0, WINDOW_CALLS,
                        reason)


def speed_profile(ticks: np.ndarray, quantum: float, *, window: int = WINDOW_CALLS,
                  min_quanta: float = MIN_QUANTA,
                  positions: np.ndarray | None = None) -> SpeedProfile:
    """The speed factors of ``ticks`` [inputs, repeats]; ``quantum`` is the TSC step.
    ``positions`` [inputs, repeats]: when each call was made, as any increasing key
    (:func:`call_positions`); default the order of a run without rotated passes, repeat
    by repeat and inputs in row order within a repeat."""
    from scipy.ndimage import median_filter

    t = np.asarray(ticks, dtype=np.float64)
    if t.ndim != 2:
        raise ValueError(f"ticks must be [inputs, repeats], got shape {t.shape}")
    n, reps = t.shape
    valid = np.isfinite(t) & (t > 0)
    if reps < 2:
        return flat_profile(t, "one repeat per input: no input's time to compare a call with")
    floor = min_quanta * max(float(quantum), 1.0)
    if positions is None:
        positions = np.arange(reps)[None, :] * n + np.arange(n)[:, None]
    when = np.asarray(positions, dtype=np.float64)
    if when.shape != t.shape:
        raise ValueError(f"positions have shape {when.shape}, the ticks {t.shape}")
    when = when.ravel()
    in_time = np.argsort(when, kind="stable")       # the calls in the order they were made
    factor = np.ones_like(t)
    used = 0
    for _ in range(ITERATIONS):
        with np.errstate(invalid="ignore", divide="ignore"):
            typical = np.nanmedian(np.where(valid, t / factor, np.nan), axis=1)
            ratio = t / typical[:, None]
        long_enough = np.isfinite(typical) & (typical >= floor)
        take = (valid & long_enough[:, None]).ravel()[in_time]
        series = ratio.ravel()[in_time]
        k = when[in_time][take]
        used = int(k.size)
        if used < 4 * window:
            return flat_profile(t, f"its calls are too short to follow the speed by: "
                                   f"{used} of them last {min_quanta:g} TSC steps or more, "
                                   f"and following it needs {4 * window} such calls; the "
                                   f"machine's slower periods stay in the calls' own excess "
                                   f"over their input's level, which the bound's call factor "
                                   f"covers")
        # mirrored at the ends: padding with the end value would weigh one call many times
        smooth = median_filter(series[take], size=window, mode="mirror")
        factor = np.interp(when, k, smooth).reshape(n, reps)
    ref = float(np.quantile(factor[valid], REFERENCE_QUANTILE))
    factor = np.where(valid, factor / ref, np.nan)
    log.debug("speed factors: median %.3f, p95 %.3f, max %.3f over %d calls",
              np.nanmedian(factor), np.nanquantile(factor, 0.95), np.nanmax(factor), used)
    return SpeedProfile(factor, True, used, window)



def pass_start(inputs: int, repeats: int, r: int) -> int:
    """The input pass ``r`` of a timing run over ``inputs`` inputs starts at: the passes
    start evenly spread over the inputs.  Every pass in input order from input 0 gave the
    same inputs the start of every pass, where calls run slower for a while (a fresh
    worker process, its caches and predictor cold: over the bench's targets the first 50
    inputs' medians were 4–8 % above their predictions at the median, zlib crc32's input
    1 ×1.53, and the misfit factor took it); spread over the inputs, that stretch is a
    slow period of the machine the profile follows, not a property of some inputs."""
    return (r * inputs) // repeats if inputs > 0 and repeats > 0 else 0


def call_positions(indices: np.ndarray, repeats: int, environment: Any) -> np.ndarray | None:
    """When each call of the rows ``indices`` [rows] was made, as [rows, repeats] keys for
    :func:`speed_profile`, from what the timing run recorded (``environment["passes"]``:
    its input count and each pass's first input, :func:`pass_start`); None for a run
    whose passes all started at input 0 (the default order).  Rows beyond the run's
    inputs (the worst-case search's, timed in runs of their own) come after each pass's
    inputs, in row order."""
    passes = environment.get("passes") if hasattr(environment, "get") else None
    if not isinstance(passes, dict) or not passes.get("starts"):
        return None
    n = int(passes.get("inputs", 0))
    starts = [int(x) for x in passes["starts"]]
    idx = np.asarray(indices, dtype=np.int64)
    rows = idx.size
    inside = (idx >= 0) & (idx < n)
    extra = np.cumsum(~inside) - 1                  # rank of a row beyond the run's inputs
    span = n + int((~inside).sum())
    out = np.empty((rows, repeats), dtype=np.float64)
    for r in range(repeats):
        start = starts[r] if r < len(starts) else 0
        out[:, r] = r * span + np.where(inside, (idx - start) % max(n, 1), n + extra)
    return out

