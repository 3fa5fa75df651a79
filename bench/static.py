"""Static-model figures: `wcetfit cfg` on the system math and crypto libraries.

* ``static.libm.summary.cold``: `wcetfit cfg libm.so.6` (every function summarised) with an
  empty cache.  Goal <= 20 s (a default angr CFGFast of libm takes about 40 s here).
* ``static.libm.summary.warm``: the same, served from the cache.
* ``static.libm.function.cold``: `wcetfit cfg libm.so.6 --function lgamma` (lgamma and the
  functions it calls, without recovering the whole binary) with an empty cache.
  Goal <= 3 s.
* ``static.libm.function.warm``: the same, served from the cache.

* ``static.libcrypto.summary.cold``: `wcetfit cfg libcrypto.so.3` (10,920 functions) with an
  empty cache.  Goal <= 20 s on this 2-core VM when quiet (angr's CFGFast made it 53 s).
* ``static.libcrypto.summary.warm``: the same, served from the cache.  Goal <= 0.5 s.
* ``static.recovery.speedup``: CPU time of angr's CFGFast (the reference, measured in the
  same run) over that of our recursive descent (:mod:`wcetfit.static.descent`), both
  recovering the graph from the same 400 function starts of libcrypto.  Goal >= 4.

Each figure is the wall time of a fresh ``python -m wcetfit`` process (what a user waits
for), the median of several runs; ``cpu_s`` beside it is the process's user+system time,
which the other load on the machine disturbs less.  ``load`` is the 1-minute load average
when the figure was taken.  Run alone: ``python -m bench.static [BINARY [FUNCTION]]``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CRYPTO_CANDIDATES = ["/lib/x86_64-linux-gnu/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"]
SPEEDUP_STARTS = 400

_SPEEDUP_CODE = """
import sys, time, logging
logging.disable(logging.ERROR)
from wcetfit.static import elfinfo
from wcetfit.static.symbols import SymbolIndex
from wcetfit.static.whole import _known_starts
which, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
elf = elfinfo.read_elf(path, with_fdes=True)
index = SymbolIndex(elf)
starts = sorted(_known_starts(elf, index))
starts = starts[len(starts) // 3:len(starts) // 3 + n]
if which == "angr":
    from wcetfit.static.binary import recover_raw as rec
    import angr  # noqa: F401 -- the import is not part of the recovery
    c0 = time.process_time(); raw = rec(path, starts, elf)
else:
    from wcetfit.static.descent import recover
    c0 = time.process_time(); raw = recover(path, starts, elf, index)
print(time.process_time() - c0, len(raw.blocks))
"""


def _recovery_cpu(which: str, lib: str, n: int) -> tuple[float, int]:
    r = subprocess.run([sys.executable, "-c", _SPEEDUP_CODE, which, lib, str(n)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{which} recovery of {lib} failed: {r.stderr.strip()[-300:]}")
    cpu, blocks = r.stdout.split()
    return float(cpu), int(blocks)


def run_crypto(repeats: int = 3) -> list[dict]:
    lib = next((p for p in CRYPTO_CANDIDATES if os.path.exists(p)), None)
    if lib is None:
        return [{"figure": "static.libcrypto", "value": None, "unit": "", "goal": None,
                 "ok": None, "skipped": "no libcrypto.so.3 found"}]
    figs = []
    tmp = tempfile.mkdtemp(prefix="wcetfit-bench-static-")
    try:
        load = os.getloadavg()[0]
        cache = os.path.join(tmp, "crypto")
        wall, cpu, out = _run_cfg([lib], cache)
        n_functions = sum(1 for line in out.splitlines()[2:] if line.strip())
        figs.append(_fig("static.libcrypto.summary.cold", [wall], [cpu], 20.0, load,
                         functions=n_functions, binary=lib))
        warm = [_run_cfg([lib], cache)[:2] for _ in range(repeats)]
        figs.append(_fig("static.libcrypto.summary.warm", [w for w, _ in warm],
                         [c for _, c in warm], 0.5, os.getloadavg()[0]))
        load = os.getloadavg()[0]
        ref, ref_blocks = _recovery_cpu("angr", lib, SPEEDUP_STARTS)
        own, own_blocks = _recovery_cpu("descent", lib, SPEEDUP_STARTS)
        figs.append({"figure": "static.recovery.speedup", "value": round(ref / own, 2),
                     "unit": "x", "goal": ">= 4", "ok": ref / own >= 4,
                     "reference": f"angr CFGFast, {ref:.2f} s CPU, {ref_blocks} blocks",
                     "cpu_s": round(own, 3), "blocks": own_blocks,
                     "starts": SPEEDUP_STARTS, "load": round(load, 2)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figs


LIBM_CANDIDATES = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                   "/lib64/libm.so.6"]
FUNCTION = "lgamma"


def _run_cfg(args: list[str], cache_dir: str) -> tuple[float, float, str]:
    env = dict(os.environ, WCETFIT_CACHE_DIR=cache_dir)
    env.pop("WCETFIT_NO_CACHE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "wcetfit", "cfg", *args], env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"wcetfit cfg {' '.join(args)} failed: {r.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stdout


def _fig(figure: str, walls: list[float], cpus: list[float], goal: float, load: float,
         **extra) -> dict:
    value = statistics.median(walls)
    return {"figure": figure, "value": round(value, 3), "unit": "s", "goal": f"<= {goal:g}",
            "ok": value <= goal, "cpu_s": round(statistics.median(cpus), 3),
            "runs": [round(w, 3) for w in walls], "load": round(load, 2), **extra}


def run(binary: str | None = None, function: str = FUNCTION, repeats: int = 3) -> list[dict]:
    lib = binary or next((p for p in LIBM_CANDIDATES if os.path.exists(p)), None)
    if lib is None:
        return [{"figure": "static.libm", "value": None, "unit": "", "goal": None, "ok": None,
                 "skipped": "no libm.so.6 found"}]
    figs = []
    tmp = tempfile.mkdtemp(prefix="wcetfit-bench-static-")
    try:
        # Whole binary: one cold run (each is ~10-20 s), then warm ones.
        load = os.getloadavg()[0]
        cache = os.path.join(tmp, "whole")
        wall, cpu, out = _run_cfg([lib], cache)
        n_functions = sum(1 for line in out.splitlines()[2:] if line.strip())
        figs.append(_fig("static.libm.summary.cold", [wall], [cpu], 20.0, load,
                         functions=n_functions, binary=lib))
        warm = [_run_cfg([lib], cache)[:2] for _ in range(repeats)]
        figs.append(_fig("static.libm.summary.warm", [w for w, _ in warm], [c for _, c in warm],
                         1.0, os.getloadavg()[0]))
        # One function: every cold run with an empty cache of its own.
        load = os.getloadavg()[0]
        cold = [_run_cfg([lib, "--function", function], os.path.join(tmp, f"fn{i}"))[:2]
                for i in range(repeats)]
        figs.append(_fig("static.libm.function.cold", [w for w, _ in cold], [c for _, c in cold],
                         3.0, load, function=function))
        warm = [_run_cfg([lib, "--function", function], os.path.join(tmp, "fn0"))[:2]
                for _ in range(repeats)]
        figs.append(_fig("static.libm.function.warm", [w for w, _ in warm], [c for _, c in warm],
                         1.0, os.getloadavg()[0], function=function))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if binary is None:
        figs += run_crypto(repeats)
    return figs


if __name__ == "__main__":
    args = sys.argv[1:]
    for fig in run(args[0] if args else None, args[1] if len(args) > 1 else FUNCTION):
        print(json.dumps(fig))
