"""The time-stamp counter: its facts on this machine, and the environment of a measurement.

Everything wcetfit times is in TSC ticks.  The TSC runs at a fixed rate (``constant_tsc``)
that is *not* the core clock, so ticks are never called cycles; :func:`ticks_to_ns`
converts them with the TSC frequency, which comes from the kernel when it exports it
(``/sys/devices/system/cpu/cpu0/tsc_freq_khz``, absent on many kernels) and otherwise is
calibrated against ``CLOCK_MONOTONIC`` the way Etsion & Feitelson's TSC library does it:
count ticks across a known span of the OS clock (here the median of several spans).

The fence methods themselves are C (``instrument/wf_tsc.h``); this module names them.
The counter is per CPU: :func:`pinned` keeps the calling thread on one CPU while it
measures, and samples whose start and stop TSC_AUX differ are discarded by the callers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import numpy as np

from wcetfit.machine import CpuInfo, cpu_info, parse_cpuinfo  # noqa: F401 (re-exported)
from wcetfit.errors import MeasurementError, NativeBuildError, WcetfitError

log = logging.getLogger(__name__)

SYSFS_TSC_KHZ = "/sys/devices/system/cpu/cpu0/tsc_freq_khz"
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
AUX_CPU_MASK = 0xFFF  # Linux keeps (node << 12) | cpu in TSC_AUX

# Flags of /proc/cpuinfo that say whether ticks are a usable clock.
TSC_FLAGS = ("tsc", "rdtscp", "constant_tsc", "nonstop_tsc", "tsc_known_freq",
             "tsc_reliable", "hypervisor", "rdpid")


@dataclass(frozen=True)
class Method:
    """A fence method of wf_tsc.h: how the region's start and stop readings are taken."""

    name: str
    start: str
    stop: str
    fenced: bool       # the measured code can neither start before the first reading
                       # nor finish after the second
    note: str


# In order of preference when everything else is equal.  The numbers are enum
# wf_tsc_method (wf_tsc.h); :func:`method_id` checks them against the built module.
METHODS: dict[str, Method] = {
    m.name: m for m in (
        Method("lfence", "LFENCE; RDTSC; LFENCE", "RDTSCP; LFENCE", True,
               "cheap; LFENCE orders both readings"),
        Method("mfence", "MFENCE; LFENCE; RDTSC; LFENCE", "MFENCE; RDTSCP; LFENCE", True,
               "drains pending stores before the start and the measured code's own at the stop"),
        Method("cpuid", "CPUID; RDTSC", "RDTSCP; CPUID", True,
               "Paoloni 2010 s3.2.1; CPUID outside the region, but a VM exit under a hypervisor"),
        Method("rdtscp", "RDTSCP", "RDTSCP", False,
               "no fence: the measured code may start before the first reading"),
        Method("cpuid_inside", "CPUID; RDTSC", "CPUID; RDTSC", True,
               "Paoloni 2010 s3.1, the negative reference: the stop CPUID is measured too"),
    )
}
_ENUM = {"lfence": "WF_TSC_LFENCE", "cpuid": "WF_TSC_CPUID", "rdtscp": "WF_TSC_RDTSCP",
         "mfence": "WF_TSC_MFENCE", "cpuid_inside": "WF_TSC_CPUID_INSIDE"}
DEFAULT_METHOD = "lfence"


@functools.lru_cache(maxsize=1)
def native() -> tuple[Any, Any]:
    """(ffi, lib) of wcetfit._native, checked against the header's ABI number."""
    try:
        from wcetfit import _native  # type: ignore[attr-defined]
    except ImportError as exc:  # pragma: no cover - install problem
        raise NativeBuildError(f"wcetfit._native is not built ({exc}); run `make setup`") from exc
    if _native.lib.wf_native_abi() < 2 or not hasattr(_native.lib, "WF_TSC_NMETHODS"):
        raise NativeBuildError("wcetfit._native is stale (older ABI); run `make setup`")
    return _native.ffi, _native.lib


def method_id(method: str | int) -> int:
    """The C enum value of a method given by name (or already as a number)."""
    _, lib = native()
    if isinstance(method, (int, np.integer)):
        if 0 <= int(method) < lib.WF_TSC_NMETHODS:
            return int(method)
        raise WcetfitError(f"unknown timing method number {method}")
    try:
        return int(getattr(lib, _ENUM[method]))
    except KeyError:
        raise WcetfitError(
            f"unknown timing method {method!r}; choose one of {', '.join(METHODS)}") from None


def method_name(method: str | int) -> str:
    if isinstance(method, str):
        method_id(method)
        return method
    ident = method_id(method)
    for name in METHODS:
        if method_id(name) == ident:
            return name
    raise WcetfitError(f"unknown timing method number {method}")  # pragma: no cover


def aux_cpu(aux: int | np.ndarray) -> int | np.ndarray:
    """CPU number from a TSC_AUX value (Linux layout)."""
    return aux & AUX_CPU_MASK


# ---- conversions --------------------------------------------------------------------

def ticks_to_ns(ticks: float | np.ndarray, tsc_hz: float) -> float | np.ndarray:
    """TSC ticks to nanoseconds at the TSC's (fixed) rate."""
    if tsc_hz <= 0:
        raise ValueError("tsc_hz must be positive")
    if isinstance(ticks, np.ndarray):
        return ticks.astype(float) * (1e9 / tsc_hz)
    return float(ticks) * 1e9 / tsc_hz


def ns_to_ticks(ns: float | np.ndarray, tsc_hz: float) -> float | np.ndarray:
    """Nanoseconds to TSC ticks (the inverse of :func:`ticks_to_ns`)."""
    if tsc_hz <= 0:
        raise ValueError("tsc_hz must be positive")
    if isinstance(ns, np.ndarray):
        return ns.astype(float) * (tsc_hz / 1e9)
    return float(ns) * tsc_hz / 1e9


# ---- /proc/cpuinfo ------------------------------------------------------------------

def check_tsc_usable(info: CpuInfo | None = None) -> None:
    """Refuse machines whose TSC cannot be read from user space; warn when it is no clock."""
    info = info or cpu_info()
    if info.flags and "rdtscp" not in info.flags:
        raise MeasurementError("this CPU has no RDTSCP (flag 'rdtscp' missing in /proc/cpuinfo): "
                               "wcetfit needs it to read the TSC and the CPU number together")
    if info.flags and "constant_tsc" not in info.flags:
        log.warning("TSC rate is not constant (no 'constant_tsc' flag): ticks follow the core "
                    "clock and are not comparable across frequency changes")
    if info.flags and "nonstop_tsc" not in info.flags:
        log.warning("TSC may stop in deep idle states (no 'nonstop_tsc' flag)")


# ---- affinity -----------------------------------------------------------------------

_MASK_WORDS = 16  # 1024 CPUs


def allowed_cpus() -> list[int]:
    """CPUs the calling thread may run on."""
    ffi, lib = native()
    mask = ffi.new("uint64_t[]", _MASK_WORDS)
    rc = lib.wf_get_affinity(mask, _MASK_WORDS)
    if rc < 0:
        raise MeasurementError(f"sched_getaffinity failed: {os.strerror(-rc)}")
    return [c for c in range(_MASK_WORDS * 64) if mask[c // 64] >> (c % 64) & 1]


def pinned_cpu() -> int | None:
    """The one CPU the calling thread is pinned to, None when it may run on several."""
    _, lib = native()
    cpu = lib.wf_pinned_cpu()
    return cpu if cpu >= 0 else None


def current_cpu() -> int:
    _, lib = native()
    cpu = lib.wf_current_cpu()
    if cpu < 0:
        raise MeasurementError(f"sched_getcpu failed: {os.strerror(-cpu)}")
    return cpu


def default_cpu() -> int:
    """The CPU to measure on: the highest allowed one, because Linux routes most device
    interrupts and housekeeping work to CPU 0 unless told otherwise."""
    cpus = allowed_cpus()
    return cpus[-1]


@contextlib.contextmanager
def pinned(cpu: int | None = None) -> Iterator[int]:
    """Pin the calling thread to ``cpu`` (default :func:`default_cpu`) for the block, then
    restore the previous affinity.  Yields the CPU."""
    ffi, lib = native()
    saved = ffi.new("uint64_t[]", _MASK_WORDS)
    rc = lib.wf_get_affinity(saved, _MASK_WORDS)
    if rc < 0:
        raise MeasurementError(f"sched_getaffinity failed: {os.strerror(-rc)}")
    cpu = default_cpu() if cpu is None else cpu
    rc = lib.wf_pin_cpu(cpu)
    if rc < 0:
        raise MeasurementError(f"cannot pin to CPU {cpu}: {os.strerror(-rc)}")
    try:
        yield cpu
    finally:
        lib.wf_set_affinity(saved, _MASK_WORDS)


# ---- counter facts ------------------------------------------------------------------

def quantum_from_deltas(deltas: np.ndarray) -> int:
    """The counter's update step: the smallest nonzero difference of back-to-back reads."""
    d = np.asarray(deltas, dtype=np.int64)
    d = d[d > 0]
    if d.size == 0:
        raise MeasurementError("the TSC did not advance across the back-to-back readings")
    return int(d.min())


def read_steps(n: int = 20000) -> np.ndarray:
    """Differences of n+1 back-to-back LFENCE;RDTSC readings (C, one tight loop)."""
    ffi, lib = native()
    out = np.zeros(n, dtype=np.uint64)
    if lib.wf_tsc_steps(n, ffi.from_buffer("uint64_t[]", out)) != 0:
        raise MeasurementError("wf_tsc_steps failed")
    return out.astype(np.int64)


@functools.lru_cache(maxsize=1)
def quantum_ticks() -> int:
    """Smallest nonzero TSC step seen in back-to-back readings (26 on this project's VMs)."""
    return quantum_from_deltas(read_steps())


@dataclass(frozen=True)
class TscFrequency:
    hz: float
    source: str            # where it came from, for the record
    spread: float = 0.0    # calibration: (max - min) / median of the rounds; 0 from the kernel


def _sysfs_tsc_hz() -> float | None:
    try:
        with open(SYSFS_TSC_KHZ) as f:
            khz = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return khz * 1e3 if khz > 0 else None


def calibrate_frequency(duration_s: float = 0.06, rounds: int = 5,
                        clock: int = time.CLOCK_MONOTONIC) -> TscFrequency:
    """TSC rate from ``rounds`` spans of ``duration_s`` of ``clock``, median of the rounds.

    Each span's ends bracket one clock reading between two RDTSCPs (the tightest of a
    few tries), so the error per end is half a bracket (~20 ns) against a 60 ms span:
    below 1 ppm; the median discards a round disturbed by preemption."""
    ffi, lib = native()
    ticks = ffi.new("uint64_t *")
    ns = ffi.new("int64_t *")
    rates: list[float] = []
    attempts = 0
    with pinned(pinned_cpu()):
        while len(rates) < rounds:
            attempts += 1
            if attempts > 4 * rounds:
                raise MeasurementError("TSC frequency calibration kept failing "
                                       "(clock unreadable or the thread kept migrating)")
            rc = lib.wf_tsc_calibrate(clock, int(duration_s * 1e9), ticks, ns)
            if rc == 0 and ns[0] > 0:
                rates.append(ticks[0] * 1e9 / ns[0])
    med = statistics.median(rates)
    name = {time.CLOCK_MONOTONIC: "CLOCK_MONOTONIC"}.get(clock, f"clock {clock}")
    return TscFrequency(hz=med, source=f"calibrated against {name} ({rounds} x "
                        f"{duration_s * 1e3:g} ms, median)",
                        spread=(max(rates) - min(rates)) / med)


@functools.lru_cache(maxsize=1)
def tsc_frequency() -> TscFrequency:
    """The TSC rate: the kernel's figure when exported, else calibrated (cached per process)."""
    hz = _sysfs_tsc_hz()
    if hz:
        return TscFrequency(hz=hz, source=SYSFS_TSC_KHZ)
    return calibrate_frequency()


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ---- the environment of a measurement set ------------------------------------------

@dataclass(frozen=True)
class Environment:
    """Recorded with each measurement set so a figure can be traced to its conditions."""

    cpu_model: str
    cpu_vendor: str
    tsc_flags: tuple[str, ...]       # those of TSC_FLAGS the CPU has
    constant_tsc: bool
    nonstop_tsc: bool
    rdtscp: bool
    tsc_hz: float
    tsc_hz_source: str
    kernel: str
    clocksource: str | None
    n_cpus: int
    pinned_cpu: int | None = None
    method: str | None = None
    quantum_ticks: int | None = None
    python: str = field(default_factory=lambda: platform.python_version())
    wcetfit: str = field(default_factory=lambda: _wcetfit_version())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tsc_flags"] = list(self.tsc_flags)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Environment":
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["tsc_flags"] = tuple(kwargs.get("tsc_flags", ()))
        return cls(**kwargs)

    def ticks_to_ns(self, ticks: float | np.ndarray) -> float | np.ndarray:
        return ticks_to_ns(ticks, self.tsc_hz)


def _wcetfit_version() -> str:
    from wcetfit import __version__
    return __version__


def environment(method: str | None = None, quantum: int | None = None,
                cpu: int | None = None) -> Environment:
    """The environment now (``cpu`` defaults to the CPU the calling thread is pinned to)."""
    info = cpu_info()
    freq = tsc_frequency()
    return Environment(
        cpu_model=info.model,
        cpu_vendor=info.vendor,
        tsc_flags=tuple(f for f in TSC_FLAGS if f in info.flags),
        constant_tsc="constant_tsc" in info.flags,
        nonstop_tsc="nonstop_tsc" in info.flags,
        rdtscp="rdtscp" in info.flags,
        tsc_hz=freq.hz,
        tsc_hz_source=freq.source,
        kernel=f"{platform.system()} {platform.release()}",
        clocksource=_read_text(CLOCKSOURCE),
        n_cpus=info.n_cpus,
        pinned_cpu=cpu if cpu is not None else pinned_cpu(),
        method=method,
        quantum_ticks=quantum,
        python=sys.version.split()[0],
    )
