"""Measuring probe configurations: one isolated child per probe, every input checked.

For a round of probe configurations (:class:`wcetfit.split.placement.ProbeLayout`) one child
process (:func:`wcetfit.isolate.run_isolated`) loads the binary, builds the call harness,
writes every probe's stubs (patches go into the child's memory only: the parent never
runs patched code), pins itself to one CPU, and then for every input, for every probe
whose point the input reaches (installed for the input, removed after it: the
configurations are interleaved, so a drift of the machine's speed — this VM shares its
cores — shifts them alike)

1. builds the arguments (the same bytes as every other command: ``generate`` with the
   input's own generator) and takes the restore table before any call touches them;
2. runs the differential check: the original function without the probe and the probed
   call through the wrapper, from the same argument bytes and the same writable data of
   the binary, must return the same value and leave the same memory;
3. times ``warmup`` + ``repeats`` calls through :func:`wcetfit.split.install.InstalledProbe.time`
   (the C loop of ``instrument/wf_probe.c``), arguments restored and probe re-armed
   before each, outside the timed region.

A crash or hang of the target is reported for the input and the probe; the inputs
measured before are kept.  A failed differential check stops the probe (it is a wcetfit
bug, never a warning).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from wcetfit.isolate import InputFailure, run_isolated
from wcetfit.loader import WritableData
from wcetfit.split.install import InstalledProbe, RestoreTable, differential_check
from wcetfit.split.joint import ConfigTimes
from wcetfit.split.placement import ProbeLayout
from wcetfit.target import Target, describe_args, generate_input, load_inputs_module

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]     # (probe key, inputs done, inputs wanted)


@dataclass(frozen=True)
class ProbeRun:
    """What measuring one probe gave."""

    times: ConfigTimes
    fired: int                 # timed calls in which the probe read the clock
    migrated: int              # timed calls discarded: two readings from two CPUs
    failures: tuple[InputFailure, ...]
    seconds: float             # wall time of the whole round it was measured in


class _RoundWorker:
    """Child side: every probe of a round ready (stubs written), installed one at a time;
    inputs handled in order, each input's probes back to back (interleaved), so a slow
    drift of the machine shifts every configuration alike instead of biasing one."""

    def __init__(self, target: Target, function: str, proto: str, root_link: int,
                 layouts: Sequence[ProbeLayout], wanted: Sequence[frozenset[int]],
                 method: str, repeats: int, warmup: int, check: bool, whole: bool) -> None:
        from wcetfit.timing import tsc
        from wcetfit.loader import load_binary
        from wcetfit.timing.thunk import build_harness

        self.target = target
        self.function = function
        self.proto = proto
        self.repeats = repeats
        self.warmup = warmup
        self.check = check
        self.wanted = wanted
        self.whole = whole
        self.method = method
        self.harness = build_harness(target.prototype, target.cdef)
        self.generate = load_inputs_module(target)
        self.binary = load_binary(target.binary)
        self.original = self.binary.runtime(root_link)
        self.data = WritableData(self.binary)
        self.probes = [InstalledProbe(self.binary, lay, root_link, method) for lay in layouts]
        self._pin = tsc.pinned()
        self._pin.__enter__()

    def run(self, index: int, start: Callable[[str], None]
            ) -> tuple[list[tuple[np.ndarray, int, int] | None], tuple[np.ndarray, int] | None]:
        args = generate_input(self.generate, self.target, self.harness.ffi, self.function,
                              index)
        pack = self.harness.pack(self.proto, args)
        table = RestoreTable(self.harness, pack)     # before any call changes the memory
        summary = describe_args(self.harness.ffi, args)
        out: list[tuple[np.ndarray, int, int] | None] = [None] * len(self.probes)
        whole = None
        n = len(self.probes) + (1 if self.whole else 0)
        # rotate the order per input: no configuration always runs right after the same
        # other one (k == len(probes): the whole call, exactly as the timing run times it)
        for j in range(n):
            k = (j + index) % n
            if k == len(self.probes):
                from wcetfit.timing.calls import prime_timing, time_input
                start(f"{summary} (whole call)")
                saved = self.data.save()
                if prime_timing(self.harness, self.proto, self.original, pack, self.method):
                    self.data.restore(saved)
                t = time_input(self.harness, self.proto, self.original, pack, self.repeats,
                               self.warmup, self.method)
                self.data.restore(saved)
                whole = (t.ticks, t.migrated)
                continue
            if index not in self.wanted[k]:
                continue
            ip = self.probes[k]
            start(f"{summary} under probe {ip.layout.probe.key}")
            saved = self.data.save()
            ip.install()
            try:
                if self.check:
                    differential_check(ip, self.harness, self.proto, pack, self.original,
                                       self.data, index)
                s = ip.time(self.harness, self.proto, pack, table, self.repeats, self.warmup)
            finally:
                ip.remove()
                self.data.restore(saved)
            out[k] = (s.ticks, s.fired, s.migrated)
        return out, whole


@dataclass(frozen=True)
class RoundRun:
    """A round's measurements: every probe's, and the whole calls' (config 0)."""

    probes: list[ProbeRun]
    whole_indices: np.ndarray
    whole_ticks: np.ndarray        # float64 [inputs, repeats], NaN = migrated
    whole_migrated: int
    failures: tuple[InputFailure, ...]
    seconds: float


def measure_round(target: Target, function: str, root_link: int,
                  layouts: Sequence[ProbeLayout], indices: Sequence[Sequence[int]], *,
                  method: str, repeats: int | None = None, warmup: int | None = None,
                  check: bool = True, whole: Sequence[int] = (),
                  progress: Progress | None = None) -> RoundRun:
    """Time every probe configuration of a round on its inputs (``indices[k]`` for
    ``layouts[k]``) and the whole call on the inputs ``whole``, interleaved input by
    input in one isolated worker."""
    from wcetfit.measurements import prototype_name
    from wcetfit.timing.thunk import build_harness

    m = target.measure
    repeats = m.repeats if repeats is None else repeats
    warmup = m.warmup if warmup is None else warmup
    proto = prototype_name(build_harness(target.prototype, target.cdef), function)
    wanted = [frozenset(int(i) for i in ix) for ix in indices]
    whole_set = frozenset(int(i) for i in whole)
    todo = sorted(set(whole_set).union(*wanted))
    rows: list[dict[int, np.ndarray]] = [{} for _ in layouts]
    fired = [0] * len(layouts)
    migrated = [0] * len(layouts)
    failures: list[InputFailure] = []
    whole_rows: dict[int, np.ndarray] = {}
    whole_mig = 0
    done = 0

    def on_result(index: int, result: tuple[list[tuple[np.ndarray, int, int] | None],
                                            tuple[np.ndarray, int] | None]) -> None:
        nonlocal done, whole_mig
        per_probe, w = result
        if w is not None and index in whole_set:
            whole_rows[index] = w[0]
            whole_mig += w[1]
        for k, r in enumerate(per_probe):
            if r is not None:
                rows[k][index] = r[0]
                fired[k] += r[1]
                migrated[k] += r[2]
        done += 1
        if progress:
            progress("probes", done, len(todo))

    def on_failure(f: InputFailure) -> None:
        nonlocal done
        failures.append(f)
        done += 1

    t0 = time.monotonic()
    timeout = m.timeout * (repeats + warmup + 3) * max(1, len(layouts))
    from wcetfit.locks import timing_lock
    with timing_lock(target.directory):     # one timing run per machine
        run = run_isolated(lambda: _RoundWorker(target, function, proto, root_link, layouts,
                                                wanted, method, repeats, warmup, check,
                                                bool(whole_set)),
                           todo, timeout=timeout, per_call=m.timeout, on_result=on_result,
                           on_failure=on_failure)
    if run.interrupted:
        raise KeyboardInterrupt
    seconds = time.monotonic() - t0
    out = []
    for k, lay in enumerate(layouts):
        idx = np.array(sorted(rows[k]), dtype=np.int64)
        ticks = np.stack([rows[k][i] for i in idx]) if idx.size else np.zeros((0, repeats))
        mine = tuple(f for f in failures if f.index in wanted[k])
        out.append(ProbeRun(ConfigTimes(lay.probe, idx, ticks), fired[k], migrated[k], mine,
                            seconds))
    widx = np.array(sorted(whole_rows), dtype=np.int64)
    wticks = np.stack([whole_rows[i] for i in widx]) if widx.size else np.zeros((0, repeats))
    return RoundRun(out, widx, wticks, whole_mig, tuple(failures), seconds)


def measure_probe(target: Target, function: str, root_link: int, layout: ProbeLayout, *,
                  method: str, indices: Sequence[int], repeats: int | None = None,
                  warmup: int | None = None, check: bool = True,
                  progress: Progress | None = None) -> ProbeRun:
    """Time one probe configuration on ``indices`` (isolated; see the module docstring)."""
    return measure_round(target, function, root_link, [layout], [indices], method=method,
                         repeats=repeats, warmup=warmup, check=check,
                         progress=progress).probes[0]
