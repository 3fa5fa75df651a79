"""Validation of the TSC fence methods (Paoloni 2010) and the choice of one.

For each method of :data:`wcetfit.timing.tsc.METHODS`:

1. **Empty-region ensembles** (Paoloni §3.1–3.2): ``n_ensembles`` ensembles of
   ``ensemble_size`` back-to-back start/stop readings with nothing between them.  Per
   ensemble: minimum, variance, max deviation (max − min).  Across ensembles: the total
   variance (mean of the ensemble variances), the variance of the variances and the
   variance of the minima — both tend to zero for an ergodic measuring process, and a
   stable minimum is the overhead ε one can subtract.  Overall: min / median / p99.
2. **Resolution test** (Paoloni §3.3): the region holds a dependent loop of k iterations
   for k = 0..K; the minimum over repeats must rise monotonically with k; the ticks per
   added iteration come from a straight-line fit over the minima (Moreno & Fischmeister
   §4) with its standard error.

User space cannot disable interrupts as Paoloni's kernel module did, so an ensemble can
hold interrupted samples thousands of times the overhead; they would make every variance
meaningless.  Samples beyond a robust cut-off (see OUTLIER_Z) are counted as ``outliers``
and left out of the variance statistics (not out of min/median/p99 or max deviation).

The choice rule is :func:`choose`'s docstring; the result says why in one sentence.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from wcetfit.errors import MeasurementError, WcetfitError
from wcetfit.timing.calls import LineFit, fit_line

log = logging.getLogger(__name__)

SCHEMA = "wcetfit.calibration/1"
# Version history of SCHEMA:
#   1  first version.

# Interrupted-sample cut-off: a modified z-score 0.6745 (x - median) / MAD above 3.5
# (Iglewicz & Hoaglin) marks an outlier.  The MAD is floored at one quantum: readings are
# quantized, so the MAD of a clean empty region is often 0 and every sample one step off
# the median would otherwise count; with the floor the cut-off is median + 5.2 quanta.
OUTLIER_Z = 3.5
MAD_TO_Z = 0.6745

# Validation limits (each failing check is named in the result):
#  - minima stable:    s.d. of the ensemble minima <= one quantum (Paoloni wants 0; one
#                      quantum allows the counter's phase to land a step lower sometimes);
#  - variance stable:  s.d. of the ensemble variances <= max(0.5 x total variance,
#                      quantum^2 / 4).  Paoloni rejects a method whose s.d. of variances
#                      is as large as the variance itself; quantum^2/4 is the variance
#                      of a reading that is one step off half of the time, the sampling
#                      noise quantized readings always have;
#  - monotone:         no resolution minimum more than one quantum below an earlier one;
#  - resolves:         ticks per added iteration > 0 by more than 2 standard errors;
#  - migrated:         fewer than 1% of the samples discarded for migration.
VAR_SD_RATIO = 0.5
MAX_MIGRATED_FRACTION = 0.01


# ---- statistics (pure functions of arrays) -------------------------------------------

@dataclass(frozen=True)
class EnsembleStats:
    n_ensembles: int
    ensemble_size: int
    n_samples: int          # valid (not migrated)
    n_migrated: int
    n_outliers: int
    overhead_min: float
    overhead_median: float
    overhead_p99: float
    variance: float         # Paoloni's total variance: mean of the ensemble variances
    max_deviation: float    # Paoloni's absolute max deviation: max over ensembles of max-min
    var_of_variances: float
    var_of_minima: float
    minima: tuple[float, ...] = field(repr=False, default=())
    variances: tuple[float, ...] = field(repr=False, default=())


def outlier_cutoff(samples: np.ndarray, quantum: float) -> float:
    """Samples above this are outliers (interrupted); see OUTLIER_Z."""
    med = float(np.median(samples))
    mad = float(np.median(np.abs(samples - med)))
    return med + OUTLIER_Z / MAD_TO_Z * max(mad, float(quantum))


def ensemble_stats(ticks: np.ndarray, quantum: float = 0.0) -> EnsembleStats:
    """Paoloni's statistics of ``ticks[ensemble, sample]``; NaN marks a migrated sample."""
    t = np.asarray(ticks, dtype=float)
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise MeasurementError("ensemble_stats needs a 2-D array [ensemble, sample]")
    valid = ~np.isnan(t)
    flat = t[valid]
    if flat.size == 0:
        raise MeasurementError("every sample migrated: pin the process to one CPU")
    cut = outlier_cutoff(flat, quantum)
    inlier = valid & (t <= cut)
    minima, variances, maxdev = [], [], []
    for e in range(t.shape[0]):
        row_all = t[e][valid[e]]
        row = t[e][inlier[e]]
        if row.size == 0:
            continue
        minima.append(float(row.min()))
        variances.append(float(row.var()))
        maxdev.append(float(row_all.max() - row_all.min()))
    mins = np.array(minima)
    vars_ = np.array(variances)
    return EnsembleStats(
        n_ensembles=t.shape[0], ensemble_size=t.shape[1],
        n_samples=int(flat.size), n_migrated=int((~valid).sum()),
        n_outliers=int((valid & ~inlier).sum()),
        overhead_min=float(flat.min()), overhead_median=float(np.median(flat)),
        overhead_p99=float(np.percentile(flat, 99)),
        variance=float(vars_.mean()), max_deviation=float(max(maxdev)),
        var_of_variances=float(vars_.var()), var_of_minima=float(mins.var()),
        minima=tuple(minima), variances=tuple(variances),
    )


@dataclass(frozen=True)
class Resolution:
    iters: tuple[int, ...]
    minima: tuple[float, ...]
    repeats: int
    n_migrated: int
    drops: int               # minima more than one quantum below an earlier minimum
    spurious: int            # Paoloni's count: minima below the previous step's
    fit: LineFit             # minima against iterations
    quantum: float           # the counter's step the tolerances refer to

    @property
    def monotone(self) -> bool:
        return self.drops == 0

    @property
    def ticks_per_iteration(self) -> float:
        return self.fit.slope

    @property
    def ticks_per_iteration_se(self) -> float:
        return self.fit.slope_se

    @property
    def resolves(self) -> bool:
        return self.fit.slope > 0 and self.fit.slope > 2 * self.fit.slope_se

    def to_dict(self, arrays: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ticks_per_iteration": self.fit.slope,
            "ticks_per_iteration_se": self.fit.slope_se,
            "intercept": self.fit.intercept,
            "monotone": self.monotone,
            "drops": self.drops,
            "spurious": self.spurious,
            "iterations_per_quantum": None,
            "repeats": self.repeats,
            "n_migrated": self.n_migrated,
        }
        if self.fit.slope > 0 and self.quantum > 0:
            # Paoloni's "resolution": how much added work moves a minimum by one step
            d["iterations_per_quantum"] = self.quantum / self.fit.slope
        if arrays:
            d["iters"] = list(self.iters)
            d["minima"] = [float(m) for m in self.minima]
        return d


def resolution_stats(iters: Sequence[int], ticks: np.ndarray, quantum: float) -> Resolution:
    """Resolution test statistics of ``ticks[step, repeat]`` (NaN = migrated)."""
    t = np.asarray(ticks, dtype=float)
    iters = tuple(int(k) for k in iters)
    if t.ndim != 2 or t.shape[0] != len(iters) or len(iters) < 2:
        raise MeasurementError("resolution_stats needs ticks[step, repeat] for >= 2 steps")
    with np.errstate(all="ignore"):
        minima = np.nanmin(np.where(np.isnan(t), np.inf, t), axis=1)
    if np.isinf(minima).any():
        raise MeasurementError("a resolution step has no unmigrated sample")
    running = np.maximum.accumulate(minima)
    drops = int((minima[1:] < running[:-1] - quantum).sum())
    spurious = int((np.diff(minima) < 0).sum())
    fit = fit_line(np.array(iters, dtype=float), minima, reject=False)
    return Resolution(iters=iters, minima=tuple(float(m) for m in minima),
                      repeats=t.shape[1], n_migrated=int(np.isnan(t).sum()), drops=drops,
                      spurious=spurious, fit=fit, quantum=float(quantum))


# ---- one method's result and the choice ----------------------------------------------

@dataclass(frozen=True)
class MethodResult:
    name: str
    fenced: bool
    stats: EnsembleStats
    resolution: Resolution | None
    cost_per_sample: float          # wall ticks per empty-region sample, fences included
    failures: tuple[str, ...] = ()  # failed validation checks, human-readable

    @property
    def valid(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        s = self.stats
        return {
            "name": self.name,
            "overhead_min": s.overhead_min,
            "overhead_median": s.overhead_median,
            "overhead_p99": s.overhead_p99,
            "variance": s.variance,
            "var_of_variances": s.var_of_variances,
            "var_of_minima": s.var_of_minima,
            "max_deviation": s.max_deviation,
            "ensembles": s.n_ensembles,
            "ensemble_size": s.ensemble_size,
            "n_samples": s.n_samples,
            "n_migrated": s.n_migrated,
            "n_outliers": s.n_outliers,
            "cost_per_sample_ticks": self.cost_per_sample,
            "fenced": self.fenced,
            "valid": self.valid,
            "failed_checks": list(self.failures),
            "resolution": self.resolution.to_dict(arrays=False) if self.resolution else None,
        }


def validate(stats: EnsembleStats, resolution: Resolution | None, quantum: float) -> tuple[str, ...]:
    """The failed checks of one method (empty when it passes); limits at the top."""
    fails = []
    sd_min = float(np.sqrt(stats.var_of_minima))
    if sd_min > quantum:
        fails.append(f"minima vary across ensembles (s.d. {sd_min:.1f} ticks > one quantum, "
                     f"{quantum:g})")
    sd_var = float(np.sqrt(stats.var_of_variances))
    limit = max(VAR_SD_RATIO * stats.variance, quantum * quantum / 4)
    if sd_var > limit:
        fails.append(f"variance varies across ensembles (s.d. {sd_var:.1f} > {limit:.1f})")
    total = stats.n_samples + stats.n_migrated
    if total and stats.n_migrated / total >= MAX_MIGRATED_FRACTION:
        fails.append(f"{stats.n_migrated} of {total} samples migrated")
    if resolution is not None:
        if not resolution.monotone:
            fails.append(f"resolution minima drop by more than a quantum at "
                         f"{resolution.drops} step(s)")
        if not resolution.resolves:
            fails.append(f"resolution test sees no added work (slope "
                         f"{resolution.fit.slope:.3f} ± {resolution.fit.slope_se:.3f})")
    return tuple(fails)


def choose(results: Sequence[MethodResult], quantum: float,
           override: str | None = None) -> tuple[str, str]:
    """The method to time with, and why (one sentence).

    Rule: (1) candidates are the methods that pass validation and are fenced (the
    unfenced RDTSCP lets the measured code start before the first reading); if none,
    the valid ones; if none, all.  (2) Among candidates, those whose p99 empty-region
    overhead is within one quantum of the lowest are equivalent — one quantum is the
    counter's step, and the p99 of quantized readings moves by whole steps with
    sub-step changes of the true overhead.  (3) Of those, the cheapest per sample (wall
    ticks including the fences outside the region: a serializer that exits to the
    hypervisor costs ~10^4 ticks and runs the measured code right after the hypervisor
    did), then the lower median, then the order of :data:`wcetfit.timing.tsc.METHODS`.
    ``override`` picks a method by name and says what the rule would have chosen.
    """
    if not results:
        raise MeasurementError("no method was measured")
    by_name = {r.name: r for r in results}
    order = {r.name: i for i, r in enumerate(results)}
    valid = [r for r in results if r.valid]
    fenced_valid = [r for r in valid if r.fenced]
    pool = fenced_valid or valid or list(results)
    best_p99 = min(r.stats.overhead_p99 for r in pool)
    near = [r for r in pool if r.stats.overhead_p99 <= best_p99 + quantum]
    near.sort(key=lambda r: (r.cost_per_sample, r.stats.overhead_median, order[r.name]))
    pick = near[0]
    lowest = min(pool, key=lambda r: (r.stats.overhead_p99, r.cost_per_sample, order[r.name]))

    if fenced_valid:
        why = (f"{pick.name}: passes Paoloni's validation and fences both readings, and ")
    elif valid:
        why = (f"{pick.name}: no fenced method passes validation; among those that pass, ")
    else:
        why = (f"{pick.name}: no method passes validation "
               f"({'; '.join(f'{r.name}: {r.failures[0]}' for r in results)}); ")
    if lowest.name == pick.name:
        why += f"its p99 empty-region overhead ({pick.stats.overhead_p99:g} ticks) is the lowest"
        others = [r for r in near if r.name != pick.name]
        if others:
            why += (f", tied within one quantum with {', '.join(r.name for r in others)}, "
                    f"which cost more per sample")
    else:
        why += (f"its p99 overhead ({pick.stats.overhead_p99:g} ticks) is within one quantum "
                f"({quantum:g}) of the lowest ({lowest.name}, {lowest.stats.overhead_p99:g}) "
                f"while a sample costs {pick.cost_per_sample:,.0f} ticks against "
                f"{lowest.cost_per_sample:,.0f} for {lowest.name}")
    in_pool = {p.name for p in pool}
    excluded = [f"{r.name} {'fails validation' if not r.valid else 'is unfenced'}"
                for r in results if r.name not in in_pool]
    if excluded:
        why += f"; not considered: {', '.join(excluded)}"
    why += "."
    if override is None:
        return pick.name, why
    if override not in by_name:
        raise WcetfitError(f"--method {override}: not measured (measured: "
                           f"{', '.join(by_name)})")
    chosen = by_name[override]
    reason = f"{override}: chosen by --method (the rule would choose {pick.name})"
    if not chosen.valid:
        reason += f"; it fails validation: {'; '.join(chosen.failures)}"
    return override, reason + "."


# ---- measuring -------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """Sizes of the calibration runs (the defaults take ~3 s on this project's VMs)."""

    n_ensembles: int = 100          # Paoloni: 1000 (his kernel module had the CPU alone)
    max_ensemble_size: int = 10000  # Paoloni: 100,000
    min_ensemble_size: int = 50
    budget_s: float = 0.3           # wall time per method for the ensembles, ditto resolution
    k_max: int = 256                # resolution test: k = 0..k_max loop iterations
    k_step: int = 1
    max_repeats: int = 2000         # resolution repeats per step
    min_repeats: int = 20

    @classmethod
    def quick(cls) -> "Settings":
        return cls(n_ensembles=20, max_ensemble_size=2000, min_ensemble_size=20,
                   budget_s=0.05, k_max=128, k_step=2, max_repeats=300, min_repeats=10)


def _arrays(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(n, np.uint64), np.zeros(n, np.uint32), np.zeros(n, np.uint32)


def measure_empty(method: str, n_ensembles: int, ensemble_size: int
                  ) -> tuple[np.ndarray, float]:
    """ticks[ensemble, sample] (NaN = migrated) and wall ticks per sample."""
    from wcetfit.timing.tsc import method_id, native

    ffi, lib = native()
    n = n_ensembles * ensemble_size
    t, c0, c1 = _arrays(n)
    aux = ffi.new("uint32_t *")
    w0 = lib.wf_rdtscp(aux)
    rc = lib.wf_tsc_empty(method_id(method), n_ensembles, ensemble_size,
                          ffi.from_buffer("uint64_t[]", t), ffi.from_buffer("uint32_t[]", c0),
                          ffi.from_buffer("uint32_t[]", c1))
    w1 = lib.wf_rdtscp(aux)
    if rc != 0:
        raise MeasurementError(f"wf_tsc_empty({method}) failed")
    ticks = t.astype(float)
    ticks[c0 != c1] = np.nan
    return ticks.reshape(n_ensembles, ensemble_size), (w1 - w0) / max(n, 1)


def measure_resolution(method: str, iters: Sequence[int], repeats: int) -> np.ndarray:
    """ticks[step, repeat] of the resolution test (NaN = migrated)."""
    from wcetfit.timing.tsc import method_id, native

    ffi, lib = native()
    it = np.asarray(iters, dtype=np.uint32)
    n = it.size * repeats
    t, c0, c1 = _arrays(n)
    rc = lib.wf_tsc_resolution(method_id(method), ffi.from_buffer("uint32_t[]", it), it.size,
                               repeats, ffi.from_buffer("uint64_t[]", t),
                               ffi.from_buffer("uint32_t[]", c0),
                               ffi.from_buffer("uint32_t[]", c1))
    if rc != 0:
        raise MeasurementError(f"wf_tsc_resolution({method}) failed")
    ticks = t.astype(float)
    ticks[c0 != c1] = np.nan
    return ticks.reshape(it.size, repeats)


def measure_method(name: str, quantum: float, tsc_hz: float, settings: Settings,
                   resolution: bool = True) -> MethodResult:
    from wcetfit.timing.tsc import METHODS

    # a short probe sizes the run to the time budget (CPUID samples cost ~10^4x more)
    _, probe_cost = measure_empty(name, 1, 200)
    budget_ticks = settings.budget_s * tsc_hz
    size = int(budget_ticks / (probe_cost * settings.n_ensembles))
    size = max(settings.min_ensemble_size, min(settings.max_ensemble_size, size))
    ticks, cost = measure_empty(name, settings.n_ensembles, size)
    stats = ensemble_stats(ticks, quantum)
    res = None
    if resolution:
        iters = list(range(0, settings.k_max + 1, settings.k_step))
        per_round = len(iters) * (cost + settings.k_max / 2)
        repeats = int(budget_ticks / per_round)
        repeats = max(settings.min_repeats, min(settings.max_repeats, repeats))
        res = resolution_stats(iters, measure_resolution(name, iters, repeats), quantum)
    return MethodResult(name=name, fenced=METHODS[name].fenced, stats=stats, resolution=res,
                        cost_per_sample=cost, failures=validate(stats, res, quantum))


@dataclass(frozen=True)
class Calibration:
    methods: tuple[MethodResult, ...]
    chosen: str
    reason: str
    quantum_ticks: int
    tsc_hz: float
    environment: Any        # wcetfit.timing.tsc.Environment

    def method(self, name: str) -> MethodResult:
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        chosen = self.method(self.chosen)
        return {
            "schema": SCHEMA,
            "methods": [m.to_dict() for m in self.methods],
            "chosen": self.chosen,
            "reason": self.reason,
            "quantum_ticks": self.quantum_ticks,
            "tsc_hz": self.tsc_hz,
            "resolution": dict(method=self.chosen, **chosen.resolution.to_dict())
            if chosen.resolution else None,
            "environment": self.environment.to_dict(),
        }


def calibrate(methods: Sequence[str] | None = None, override: str | None = None,
              cpu: int | None = None, settings: Settings | None = None) -> Calibration:
    """Measure every method pinned to one CPU, validate, choose (or take ``override``)."""
    from wcetfit.timing.tsc import (METHODS, check_tsc_usable, environment, pinned, quantum_ticks,
                             tsc_frequency)

    settings = settings or Settings()
    names = list(methods) if methods else list(METHODS)
    for n in names:
        if n not in METHODS:
            raise WcetfitError(f"unknown timing method {n!r}; choose one of {', '.join(METHODS)}")
    if override is not None and override not in METHODS:
        raise WcetfitError(f"--method {override}: unknown; choose one of {', '.join(METHODS)}")
    if override is not None and override not in names:
        names.append(override)
    check_tsc_usable()
    with pinned(cpu) as where:
        freq = tsc_frequency()
        quantum = quantum_ticks()
        results = []
        for name in names:
            log.info("calibrating %s", name)
            results.append(measure_method(name, quantum, freq.hz, settings))
        chosen, reason = choose(results, quantum, override)
        env = environment(method=chosen, quantum=quantum, cpu=where)
    return Calibration(methods=tuple(results), chosen=chosen, reason=reason,
                       quantum_ticks=quantum, tsc_hz=freq.hz, environment=env)


# ---- the calibrated choice, once per boot ---------------------------------------------

def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:  # pragma: no cover - not Linux
        return "unknown-boot"


def auto_method(cache_dir: str | None = None, refresh: bool = False) -> tuple[str, str]:
    """The method `wcetfit calibrate` would choose, and its reason, for ``method = "auto"``.

    A quick calibration (~0.3 s) runs once per boot of the machine: its JSON is kept in
    ``<cache>/calibration/<boot_id>.json`` (the cache root of :func:`wcetfit.timing.thunk.cache_root`
    unless ``cache_dir``) and reused while the boot, the CPU model and the wcetfit version
    are the same."""
    import json
    import os
    from pathlib import Path

    from wcetfit import __version__
    from wcetfit.timing.thunk import cache_root
    from wcetfit.timing.tsc import cpu_info

    path = Path(cache_dir) if cache_dir is not None else cache_root()
    path = path / "calibration" / f"{_boot_id()}.json"
    model = cpu_info().model
    if not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            env = data["environment"]
            if (data["schema"] == SCHEMA and env["cpu_model"] == model
                    and env["wcetfit"] == __version__):
                return data["chosen"], data["reason"]
        except (OSError, ValueError, KeyError, TypeError):
            log.debug("ignoring unreadable calibration cache %s", path)
    # The quick ensembles (~0.3 s instead of ~3 s) choose the same method here (measured:
    # lfence in every run); `wcetfit calibrate` runs the full statistics on request.
    result = calibrate(settings=Settings.quick())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(result.to_json(), indent=1))
    os.replace(tmp, path)
    return result.chosen, result.reason


def empty_region_floor(method: str, cache_dir: str | None = None) -> float | None:
    """The least empty timed region of ``method`` (its ``overhead_min``, in TSC ticks) that
    this boot's calibration measured: no timed call can cost less, so it is the physical
    floor of the fit's overhead ε.  Taken from the per-boot calibration of
    :func:`auto_method` (which runs it, ~0.3 s, when this boot has none); None when the
    method is not among those calibrated or the calibration cannot run."""
    import json
    from pathlib import Path

    from wcetfit.timing.thunk import cache_root

    path = (Path(cache_dir) if cache_dir is not None else cache_root()) / "calibration" \
        / f"{_boot_id()}.json"
    for attempt in range(2):
        try:
            data = json.loads(path.read_text())
            for m in data.get("methods", ()):
                if m.get("name") == method and m.get("overhead_min") is not None:
                    return float(m["overhead_min"])
            return None
        except (OSError, ValueError, TypeError, AttributeError):
            if attempt:
                return None
        try:
            auto_method(cache_dir)
        except WcetfitError as exc:
            log.info("no calibration for the overhead floor: %s", exc)
            return None
    return None


__all__ = ["SCHEMA", "EnsembleStats", "Resolution", "MethodResult", "Calibration", "Settings",
           "ensemble_stats", "resolution_stats", "validate", "choose", "calibrate",
           "measure_empty", "measure_resolution", "measure_method", "outlier_cutoff",
           "auto_method", "empty_region_floor"]
