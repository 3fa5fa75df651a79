"""The machine the analyzer runs on, as /proc/cpuinfo describes it.

Shared by the stages that depend on it: the TSC's facts (:mod:`wcetfit.timing.tsc`), the
IFUNC choices the loader makes on this CPU (:mod:`wcetfit.static.ifunc`) and the store's
rule that times of different machines are not mixed (:mod:`wcetfit.store`).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str
    flags: frozenset[str]
    n_cpus: int

    def has(self, flag: str) -> bool:
        return flag in self.flags


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's model, vendor and flags, and the processor count."""
    model = vendor = ""
    flags: frozenset[str] = frozenset()
    n = 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            n += 1
        elif key == "model name" and not model:
            model = value
        elif key == "vendor_id" and not vendor:
            vendor = value
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return CpuInfo(model=model or "unknown", vendor=vendor or "unknown", flags=flags,
                   n_cpus=max(n, 1))


@functools.lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    try:
        with open("/proc/cpuinfo") as f:
            return parse_cpuinfo(f.read())
    except OSError:  # pragma: no cover - not Linux
        return CpuInfo("unknown", "unknown", frozenset(), os.cpu_count() or 1)


def available_memory_bytes() -> int | None:
    """The memory the kernel says can be had without swapping (MemAvailable), or None
    where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
