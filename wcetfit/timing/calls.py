"""The timing run's core: timed calls of the original code, and straight-line fitting.

This module knows nothing about child processes (wcetfit.isolate runs it in one) nor
about targets and stores: it takes a compiled :class:`~wcetfit.timing.harness.CallHarness`, a
run-time function address and packed arguments, and returns plain results.

Ticks are raw ``stop - start`` TSC differences of the chosen fence method: they include
the method's overhead ε (the empty-region time).  Nothing here subtracts ε — the solver
fits it as an intercept, and :func:`straight_line` cancels it by construction (Moreno &
Fischmeister §4: time k back-to-back calls for k = 1..M; the slope is the call time).

The caller pins the thread (:func:`wcetfit.timing.tsc.pinned`) before timing; samples whose
start and stop readings came from different CPUs compare two counters and are dropped
here (NaN in the row, counted in ``migrated``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from wcetfit.errors import MeasurementError
from wcetfit.timing.harness import ArgPack, CallHarness

log = logging.getLogger(__name__)

# Robust line fit (Moreno & Fischmeister §4.1): a point is an outlier when its residual
# exceeds REJECT_Z robust standard deviations.  The robust s.d. is 1.4826 x the median
# absolute residual (the MAD of a normal sample estimates 0.6745 sigma), with a floor of
# one quantum: quantized readings sit up to a quantum off the true line, and a median
# residual of 0 (all points exactly on a step) must not make every off-step point an
# outlier.  3.5 is Iglewicz & Hoaglin's cut-off for modified z-scores.
REJECT_Z = 3.5
MAD_TO_SD = 1.4826
REJECT_ROUNDS = 3


@dataclass(frozen=True)
class TimedInput:
    """One input's timed repeats, migrated samples removed."""

    ticks: np.ndarray        # float64 [repeats]; NaN where the sample migrated
    migrated: int            # samples discarded because start and stop CPUs differ
    cpu: int | None          # CPU number (TSC_AUX & 0xfff) of the kept samples
    result: Any              # return value of the last call

    @property
    def valid(self) -> np.ndarray:
        return self.ticks[~np.isnan(self.ticks)]

    def ticks_list(self) -> list[int | None]:
        """JSON form: ints, None for discarded samples."""
        return [None if np.isnan(t) else int(t) for t in self.ticks]


# The first timed call a process makes runs the timing path itself cold (the thunk's timed
# region and what it touches, none of which the untimed warm-up calls run): measured on
# libm's cbrt, the first input of every fresh worker had one call 286–374 ticks above its
# input's median (122–126 ticks), in three runs of three, while no other input went
# more than 50–120 above its own; with one discarded timed call first, none did.  Below
# an interrupt's cost, such a call counts as the function's own time, and it set the
# call factor of short functions (cbrt, sin: ×5).  Keyed by process: a forked worker
# inherits the parent's set but not its warm caches and page tables.
_primed: set[tuple[int, int, str]] = set()


def needs_priming(harness: CallHarness, function: str) -> bool:
    """Whether :func:`prime_timing` would make its call (the process's first of
    ``function`` through ``harness``)."""
    return (os.getpid(), id(harness), function) not in _primed


def prime_timing(harness: CallHarness, function: str, fn_address: int, pack: ArgPack,
                 method: str | int = "lfence") -> bool:
    """One discarded timed call of ``function``, the first time this process times it
    through ``harness`` (:data:`_primed`); True when it made one.  Give it arguments of
    its own: a call that changes state behind them (expat's parser, finished by it)
    leaves the timed call another path."""
    key = (os.getpid(), id(harness), function)
    if key in _primed:
        return False
    harness.time(function, fn_address, pack, repeats=1, warmup=0, method=method)
    _primed.add(key)
    return True


def time_input(harness: CallHarness, function: str, fn_address: int, pack: ArgPack,
               repeats: int, warmup: int = 2, method: str | int = "lfence") -> TimedInput:
    """``warmup`` untimed and ``repeats`` timed calls of one input, arguments restored
    before each; a migrated sample becomes NaN and is counted."""
    from wcetfit.timing.tsc import aux_cpu, pinned_cpu

    if pinned_cpu() is None:
        log.debug("timing %s without pinning: migrated samples will be discarded", function)
    raw = harness.time(function, fn_address, pack, repeats=repeats, warmup=warmup,
                       method=method)
    migrated = raw.migrated
    ticks = raw.ticks.astype(np.float64)
    ticks[migrated] = np.nan
    kept = aux_cpu(raw.cpu_stop[~migrated])
    cpu = int(np.bincount(kept).argmax()) if kept.size else None
    return TimedInput(ticks=ticks, migrated=int(migrated.sum()), cpu=cpu, result=raw.result)


# ---- straight-line fitting ---------------------------------------------------------------

@dataclass(frozen=True)
class LineFit:
    """y = slope * x + intercept by least squares, after residual-based rejection."""

    slope: float
    slope_se: float
    intercept: float
    intercept_se: float
    n_used: int
    n_rejected: int
    rms: float               # root mean square residual of the used points

    def to_dict(self) -> dict[str, float | int]:
        return {"slope": self.slope, "slope_se": self.slope_se, "intercept": self.intercept,
                "intercept_se": self.intercept_se, "n_used": self.n_used,
                "n_rejected": self.n_rejected, "rms": self.rms}


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float, np.ndarray]:
    n = x.size
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    if sxx == 0:
        raise MeasurementError("a line fit needs at least two distinct x values")
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    resid = y - (slope * x + intercept)
    s2 = float((resid ** 2).sum() / (n - 2)) if n > 2 else 0.0
    return slope, float(np.sqrt(s2 / sxx)), intercept, \
        float(np.sqrt(s2 * (1.0 / n + xm * xm / sxx))), resid


def fit_line(x: Any, y: Any, quantum: float = 0.0, reject: bool = True) -> LineFit:
    """Least-squares line with standard errors; NaN points are ignored.  With ``reject``,
    points whose residual exceeds REJECT_Z robust s.d. (floored at ``quantum``) are
    dropped and the line refitted, up to REJECT_ROUNDS times (Moreno §4.1)."""
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise MeasurementError("fit_line: x and y differ in length")
    keep = ~(np.isnan(x) | np.isnan(y))
    total = int(keep.sum())
    if total < 2:
        raise MeasurementError("a line fit needs at least two points")
    for _ in range(REJECT_ROUNDS if reject else 0):
        slope, _, intercept, _, _ = _ols(x[keep], y[keep])
        resid = np.abs(y - (slope * x + intercept))
        scale = max(MAD_TO_SD * float(np.median(resid[keep])), float(quantum))
        if scale == 0:
            break
        new_keep = keep & (resid <= REJECT_Z * scale)
        if new_keep.sum() < 2 or np.array_equal(new_keep, keep):
            break
        keep = new_keep
    slope, slope_se, intercept, intercept_se, resid = _ols(x[keep], y[keep])
    return LineFit(slope=slope, slope_se=slope_se, intercept=intercept,
                   intercept_se=intercept_se, n_used=int(keep.sum()),
                   n_rejected=total - int(keep.sum()),
                   rms=float(np.sqrt((resid ** 2).mean())))


def needs_restore(harness: CallHarness, function: str, fn_address: int, pack: ArgPack) -> bool:
    """Whether back-to-back calls would see different inputs: one call from the packed
    state, then a second on what the first left; if the second changes the argument
    memory again or returns something else, every call needs its own restore.  (Memory
    not reachable from cffi-owned arguments is not checked.)"""
    first = harness.call(function, fn_address, pack, restore=True)
    after_first = harness.snapshot(pack)
    second = harness.call(function, fn_address, pack, restore=False)
    after_second = harness.snapshot(pack)
    harness.restore(pack)
    return first != second or after_first != after_second


@dataclass(frozen=True)
class StraightLine:
    """Per-call time by straight-line fitting: ``fit.slope`` ticks per call."""

    fit: LineFit
    kmax: int
    rounds: int
    migrated: int

    @property
    def slope(self) -> float:
        return self.fit.slope

    @property
    def slope_se(self) -> float:
        return self.fit.slope_se

    @property
    def intercept(self) -> float:
        return self.fit.intercept


def straight_line(harness: CallHarness, function: str, fn_address: int, pack: ArgPack,
                  M: int = 16, rounds: int = 200, method: str | int = "lfence",
                  quantum: float | None = None, check: bool = True) -> StraightLine:
    """Time k = 1..M back-to-back calls in one region (``rounds`` times each) and fit
    T = k * t_call + ε; returns t_call ± se and ε.  Only for calls that need no restore
    (checked with :func:`needs_restore` unless ``check`` is False)."""
    if check and needs_restore(harness, function, fn_address, pack):
        raise MeasurementError(
            f"{function} changes its argument memory (or result) from one call to the next: "
            f"straight-line fitting needs calls that need no restore; time single calls")
    if pack.unrestored:
        log.warning("%s: pointer argument(s) %s are not cffi-owned and were not checked for "
                    "changes between back-to-back calls", function,
                    [i + 1 for i in pack.unrestored])
    if quantum is None:
        from wcetfit.timing.tsc import quantum_ticks
        quantum = quantum_ticks()
    seq = harness.time_seq(function, fn_address, pack, kmax=M, rounds=rounds, method=method)
    harness.restore(pack)
    ks = np.broadcast_to(np.arange(1, M + 1, dtype=float), seq.ticks.shape)
    y = seq.ticks.astype(float)
    y[seq.migrated] = np.nan
    fit = fit_line(ks, y, quantum=quantum, reject=True)
    return StraightLine(fit=fit, kmax=M, rounds=rounds, migrated=int(seq.migrated.sum()))
