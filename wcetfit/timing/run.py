"""The timing run: TSC ticks of every timed call of the original code, per input.

A child process (:mod:`wcetfit.isolate`) pins itself, loads the binary, and times each
input's call through the per-prototype harness (:mod:`wcetfit.timing.thunk`,
:mod:`wcetfit.timing.calls`); the ticks are saved to the store as they come
(:mod:`wcetfit.measurements`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.isolate import InputFailure, run_isolated
from wcetfit.measurements import (TIMED_STATE, Progress, TimeSet, load_counts, load_times,
                                  measure_saving, nothing_ran, prototype_name, save_times)
from wcetfit.store import Store
from wcetfit.target import Target, describe_args, generate_input, load_inputs_module

log = logging.getLogger(__name__)


# --- timing run -------------------------------------------------------------------------

# Inputs a timing worker calls untimed before its first timed call.  A fresh worker process
# runs the function slower for its first tens of inputs: SHA256 (libcrypto), 300 inputs a
# pass, a call over its input's median at pass positions 0–5 ×1.3–1.5, 5–20 ×1.2, later
# ×1.0; in one process, passes after the first showed nothing, and a fork per pass showed
# it every pass, with the analyzer's heap loaded or not.  Fifty calls of one input first
# left it (×1.26–1.30 at 0–5 in two passes of four), 0.3 s of them too; fifty calls of as
# many other inputs removed it (×0.99–1.04 at 0–20).  Every pass is a fresh worker, and the
# slow stretch fell on the first inputs of each pass: the misfit of zlib crc32's input 1
# (×1.53), and all of the worst-case search's 20 candidates, timed in passes of their own,
# ×1.6 over their prediction against ×1.05 for the others (SHA256's "slowest input").
WORKER_WARMUP_INPUTS = 50


class _TimingWorker:
    """Child-process side of the timing run: the original code, pinned, restored args."""

    def __init__(self, target: Target, functions: Sequence[tuple[str, int]], method: str,
                 repeats: int | None = None, inputs: Callable[..., tuple] | None = None):
        from wcetfit.timing import tsc
        from wcetfit.loader import load_binary
        from wcetfit.timing.thunk import build_harness

        self.target = target
        self.method = method
        self.repeats = target.measure.repeats if repeats is None else repeats
        self.harness = build_harness(target.prototype, target.cdef)
        self.generate = load_inputs_module(target)
        self.inputs = inputs or generate_input     # as in the count run's worker
        binary = load_binary(target.binary)
        self.functions = [(name, prototype_name(self.harness, name), binary.runtime(addr))
                          for name, addr in functions]
        # Pin for the whole life of the worker: a migration inside a timed region
        # mixes two TSCs and two caches.  Samples that migrate anyway are discarded.
        self._pin = tsc.pinned()
        self._pin.__enter__()

    @property
    def warm_up_inputs(self) -> int:
        """Untimed calls before the first timed one (:data:`WORKER_WARMUP_INPUTS`), of the
        worker's inputs in turn: the worker is then in the state its later calls are
        timed in."""
        return WORKER_WARMUP_INPUTS

    @property
    def settles(self) -> bool:
        """Whether each timed input follows an untimed call of the input timed before it,
        made right before (``[measure] warmup = 0``): what the worker did in between
        (checking that the call left the process as it was, reporting to the analyzer)
        evicts the caches, and the timed call is to follow the previous input's call, as
        in a stream of data.  Measured on libcrypto's SHA256 (3,573 bytes): 4,750 ticks
        after the previous input's call alone, 8,300 with the process check before and
        after, 10,300 with the messages too, 17,500 in the timing run; in a hot C loop
        5,400–5,900.  With warm-up calls the input's own come right before."""
        return self.target.measure.warmup == 0

    def untimed(self, index: int, start: Callable[[str], None]) -> None:
        """One untimed call of input ``index`` (of each measured function), on arguments of
        its own; the process's first goes through prime_timing (lazy binding and page
        faults paid, and the timed calls need no discarded call of their own after it)."""
        from wcetfit.timing.calls import prime_timing

        prepared = self.prepare(index)
        for name, proto, address in self.functions:
            args, pack = prepared[name]
            start(describe_args(self.harness.ffi, args))
            if not prime_timing(self.harness, proto, address, pack, self.method):
                self.harness.time(proto, address, pack, repeats=1, warmup=0,
                                  method=self.method)

    def prepare(self, index: int) -> dict[str, tuple[Any, Any]]:
        """Input ``index``'s arguments for every measured function, built and packed, for
        :meth:`run` to time after the untimed call that settles the worker."""
        return {name: self._arguments(name, proto, index)
                for name, proto, _address in self.functions}

    def _arguments(self, name: str, proto: Any, index: int) -> tuple[Any, Any]:
        """Input ``index``'s arguments for ``name``, fresh from generate(), and packed."""
        args = self.inputs(self.generate, self.target, self.harness.ffi, name, index)
        return args, self.harness.pack(proto, args)

    def run(self, index: int, start: Callable[[str], None],
            prepared: Mapping[str, tuple[Any, Any]] | None = None
            ) -> dict[str, tuple[np.ndarray, int, Any]]:
        """Per function: (ticks, migrated samples, (first, last) return values or None).
        With warm-up calls, the first is made on its own for its return value
        (wcetfit.timing.state); without, the timed call is the first on arguments
        generate() just made, as the counted call was, and there is nothing to compare."""
        from wcetfit.timing.calls import needs_priming, prime_timing, time_input
        from wcetfit.timing.state import comparable

        out = {}
        m = self.target.measure
        for name, proto, address in self.functions:
            if needs_priming(self.harness, proto):
                # the worker's first call pays for lazy binding and page faults: made on
                # arguments of its own, so that state it changes behind them (expat's
                # parser, finished by it) is not the timed call's (input 0 of every
                # worker was timed on the error return of a finished parser)
                prime_timing(self.harness, proto, address,
                             self._arguments(name, proto, index)[1], self.method)
            args, pack = prepared[name] if prepared is not None and name in prepared \
                else self._arguments(name, proto, index)
            start(describe_args(self.harness.ffi, args))
            check = m.warmup >= 1 and comparable(self.harness.signature(proto).result)
            if m.warmup >= 1:
                first = (self.harness.time(proto, address, pack, repeats=0, warmup=1,
                                           method=self.method).result if check else None)
                timed = time_input(self.harness, proto, address, pack, self.repeats,
                                   m.warmup - 1 if check else m.warmup, self.method)
                returns = (first, timed.result)
            else:
                # no call of this input before the timed one (the stream state), on the
                # arguments generate() made for this pass: the counted call's situation
                timed = time_input(self.harness, proto, address, pack, self.repeats, 0,
                                   self.method)
                returns = None
            value = timed.result if comparable(self.harness.signature(proto).result) \
                else None
            out[name] = (timed.ticks, timed.migrated, returns if check else None, value)
        return out


def resolve_method(target: Target) -> tuple[str, str]:
    """The fence method to use and why: the target's; for "auto", the one the store's
    times were taken with, else the calibration's choice.  A calibration runs again in
    another cache (a new boot, another WCETFIT_CACHE_DIR) and may choose another method
    on a noisy machine: `report` then found no times for it ("no times stored ... method
    cpuid" for a store timed with lfence), and new inputs would have been timed apart."""
    if target.measure.method != "auto":
        return target.measure.method, "set in the target file or on the command line"
    from wcetfit.measurements import stored_methods
    stored = sorted({m for name in target.functions
                     for m in stored_methods(target.store_dir, name, target.measure.seed)})
    if len(stored) == 1:
        return stored[0], "auto: the method the stored times were taken with"
    from wcetfit.timing.calibrate import auto_method
    return auto_method()


def load_warning(load: Mapping[str, Any]) -> str | None:
    """The warning the fit and report carry when something else ran during timing."""
    others = int(load.get("others_max", 0) or 0)
    if others <= 0:
        return None
    return (f"up to {others} other runnable process(es) on the machine during the timing "
            f"run ({load.get('busy_samples', '?')} of {len(load.get('samples', []))} samples "
            "of /proc/stat procs_running): the times may be disturbed; time again on a quiet "
            "machine for a tighter bound")


def _record_load(load: dict[str, Any], when: str) -> None:
    """One sample of the machine's runnable processes, this process not counted."""
    from wcetfit.locks import machine_load

    sample = dict(machine_load(), when=when)
    if "procs_running" in sample:
        sample["others"] = max(0, int(sample["procs_running"]) - 1)
    load.setdefault("samples", []).append(sample)
    others = [int(x.get("others", 0)) for x in load["samples"]]
    load["others_max"] = max(others)
    load["busy_samples"] = sum(1 for o in others if o > 0)
    load["warning"] = load_warning(load)


def run_times(target: Target, store: Store, functions: Mapping[str, int], *,
              progress: Progress | None = None, wait: bool = True) -> dict[str, TimeSet]:
    """Time every input of every measured function (name → link-time address).

    Repeats are taken in passes, not back to back: pass r times each input once, then
    pass r+1 starts over, at another input (:func:`wcetfit.timing.speed.pass_start`: what
    is left of a pass's slow start falls on other inputs each time).  By default
    (``[measure] warmup = 0``) nothing of the input runs before its timed call: the call
    follows an untimed call of the previous input made right before it
    (:attr:`_TimingWorker.settles`), as in a stream of different data.  Untimed calls
    of the same input first (``warmup`` ≥ 1) train the branch predictor on the very data
    timed: measured on the bench's stores, 60
    inputs each, a call after the previous input's against one after 3 of its own took
    ×3.0 at the median on adpcm, ×2.5 statemachine, ×1.8 bsearch, ×1.3 isort and calls,
    ×1.1 zlib's uncompress and crc32, ×1.0 crc, chain and adler32 (no branch on the
    data); adpcm's slowest input ×2.2.  A bound made of warmed calls was below calls
    of the same inputs in a stream (libm's remquo: 7,727 ticks timed, 15,030 in a C loop
    over other operands).  On a
    shared machine the speed drifts for seconds at a time (another process, the host):
    with back-to-back repeats one input would get all its repeats in a slow episode and
    look like a slow input; spread over passes, a slow episode touches one repeat of
    many inputs, and the repeat statistic (wcetfit.fit.robust) sets it aside as a disturbed
    call.  Repeats already in the store are not measured again; results are saved as
    they come.

    The passes run under the machine-wide timing lock (:func:`wcetfit.locks.timing_lock`;
    ``wait`` False: refuse instead of waiting), and the machine's load is sampled before
    and after each pass into ``environment["load"]`` (with a warning when anything else
    was runnable).
    """
    from wcetfit.locks import timing_lock
    from wcetfit.timing import tsc
    from wcetfit.timing.state import record as record_state
    from wcetfit.timing.state import record_return

    m = target.measure
    method, why = resolve_method(target)
    log.info("timing method %s (%s)", method, why)
    tsc_hz = tsc.tsc_frequency().hz
    env = tsc.environment(method).to_dict()
    env["warmup"] = m.warmup        # what the calls followed (load_times compares it)
    env["timed_state"] = TIMED_STATE
    # where each pass starts (wcetfit.timing.speed.pass_start), for the speed profile's
    # time order (call_positions)
    from wcetfit.timing.speed import pass_start
    env["passes"] = {"inputs": m.inputs,
                     "starts": [pass_start(m.inputs, m.repeats, r) for r in range(m.repeats)]}
    n = m.inputs
    ticks = {f: np.full((n, m.repeats), np.nan) for f in functions}
    done = np.zeros((n, m.repeats), dtype=bool)
    migrated = {f: 0 for f in functions}
    failures: list[InputFailure] = []
    for f in functions:
        old = load_times(store, f, m.seed, method, m.repeats, warmup=m.warmup)
        if old is None:
            continue
        keep = old.indices < n
        if not keep.all():
            # (a check's 200 fresh inputs, shown by `time --seed S` as the first 80 with
            # nothing said)
            log.warning("%s: %d more input(s) of seed %d are stored beyond the first %d "
                        "asked for (--inputs %d shows them all)", f, int((~keep).sum()),
                        m.seed, n, int(old.indices.max()) + 1)
        ticks[f][old.indices[keep]] = old.ticks[keep]
        done[old.indices[keep]] |= old.done[keep]
        migrated[f] = old.migrated
        failures.extend(x for x in old.failures if x not in failures)
        old_samples = (old.environment.get("load") or {}).get("samples") or []
        if old_samples and "load" not in env:
            env["load"] = {"samples": list(old_samples)}
        old_state = (old.environment.get("state") or {}).get(f)
        if old_state:
            env.setdefault("state", {})[f] = dict(old_state)
        if old.environment.get("target_output") and "target_output" not in env:
            env["target_output"] = dict(old.environment["target_output"])
        old_returns = (old.environment.get("returns") or {}).get(f)
        if old_returns:
            env.setdefault("returns", {})[f] = dict(old_returns)
    # inputs the count run of the same seed saw fail (crash, hang, a check): the same
    # arguments fail the original code the same way, and without counts they are no row
    # of the fit.  Timing them cost a worker each (libpng's png_get_uint_31, 52 of 80
    # inputs aborting: a fresh worker and its 50 warm-up calls per abort), and the
    # failures are stored with the times too, so that every input is in the one or the
    # other
    uncounted = set()
    for f in functions:
        cs = load_counts(store, f, m.seed)
        if cs is not None:
            mine = [x for x in cs.failures if x.index < n]   # of this run's inputs
            uncounted |= {x.index for x in mine}
            known = {x.index for x in failures}
            failures.extend(x for x in mine if x.index not in known)
    if uncounted and not done.any() and uncounted >= set(range(n)):
        # nothing to time: a run of no input would store nothing and say "0 inputs"
        from wcetfit.errors import NothingMeasured
        raise NothingMeasured(nothing_ran(", ".join(functions), failures,
                                          "no input to time, the count run saw every one fail"))
    load = env.setdefault("load", {})
    # whether each input's timed calls returned what its first call did (wcetfit.timing.state)
    state = env.setdefault("state", {})
    # what each input's timed call returned (wcetfit.timing.state.record_return)
    returned = env.setdefault("returns", {})

    def snapshot() -> dict[str, TimeSet]:
        measured = np.flatnonzero(done.any(axis=1))
        return {f: TimeSet(f, m.seed, measured.astype(np.int64), ticks[f][measured], method,
                           tsc_hz, migrated[f], env, tuple(failures), done[measured])
                for f in functions}

    def save() -> None:
        for ts in snapshot().values():
            save_times(store, ts)

    machine = None
    try:
        for r in range(m.repeats):
            failed = {x.index for x in failures} | uncounted
            start = env["passes"]["starts"][r]
            todo = [i for i in (*range(start, n), *range(start))
                    if not done[i, r] and i not in failed]
            if not todo:
                continue
            if machine is None:
                machine = timing_lock(target.directory, wait=wait)
            _record_load(load, f"before pass {r}")

            def store_result(index: int, result: dict[str, tuple[np.ndarray, int, Any]],
                             r: int = r) -> None:
                for f, (row, mig, returns, value) in result.items():
                    ticks[f][index, r] = row[0]
                    migrated[f] += mig
                    if returns is not None:
                        record_state(state, f, index, *returns)
                    record_return(returned, f, index, value)
                done[index, r] = True

            wrote = measure_saving(
                lambda: _TimingWorker(target, list(functions.items()), method, repeats=1),
                todo, timeout=m.timeout * (m.warmup + 2), per_call=m.timeout,
                store_result=store_result,
                failures=failures, save=save, done=lambda: int(done.sum()),
                wanted=n * m.repeats, progress=progress)
            if wrote is not None:
                # what the function printed while timed, for the report (libgcrypt's
                # "DBG: md_hash_buffer: algorithm 35 not available": most calls took
                # that error path, and the report never said so)
                said = env.setdefault("target_output", {"lines": 0, "first": wrote.first})
                said["lines"] += wrote.lines
            _record_load(load, f"after pass {r}")
    finally:
        if machine is not None:
            machine.release()
    if machine is not None:
        save()          # the last load sample, with the times
    return snapshot()


# --- straight-line timing (Moreno & Fischmeister §4) -------------------------------------

class _StraightLineWorker(_TimingWorker):
    """k = 1..M back-to-back calls per region; the slope is the call's time without ε."""

    settles = False       # its regions are calls of one input back to back

    def __init__(self, target: Target, functions: Sequence[tuple[str, int]], method: str,
                 kmax: int, rounds: int):
        super().__init__(target, functions, method)
        self.kmax = kmax
        self.rounds = rounds

    def run(self, index: int, start: Callable[[str], None]) -> dict[str, tuple[float, ...]]:
        from wcetfit.timing.calls import straight_line

        out = {}
        for name, proto, address in self.functions:
            args = generate_input(self.generate, self.target, self.harness.ffi, name, index)
            pack = self.harness.pack(proto, args)
            start(describe_args(self.harness.ffi, args))
            sl = straight_line(self.harness, proto, address, pack, M=self.kmax,
                               rounds=self.rounds, method=self.method)
            out[name] = (sl.fit.slope, sl.fit.slope_se, sl.fit.intercept, sl.fit.n_rejected)
        return out


def run_straight_line(target: Target, functions: Mapping[str, int], *, kmax: int = 16,
                      rounds: int = 20, progress: Progress | None = None
                      ) -> tuple[dict[str, dict[int, tuple[float, ...]]], list[InputFailure], str]:
    """Per input and function: (slope ± se, intercept ε, rejected points) in ticks.

    Only for functions whose calls need no restore (checked per input: a function that
    changes its own inputs is refused with a MeasurementError).  Not stored: it is a
    cross-check of the per-call timings, not an input of the fit."""
    method, _ = resolve_method(target)
    rows: dict[str, dict[int, tuple[float, ...]]] = {f: {} for f in functions}
    failures: list[InputFailure] = []

    def on_result(index: int, result: dict[str, tuple[float, ...]]) -> None:
        for f, v in result.items():
            rows[f][index] = v
        if progress:
            progress(len(rows[next(iter(functions))]), target.measure.inputs)

    from wcetfit.locks import timing_lock
    with timing_lock(target.directory):
        run = run_isolated(lambda: _StraightLineWorker(target, list(functions.items()), method,
                                                       kmax, rounds),
                           range(target.measure.inputs),
                           timeout=target.measure.timeout * kmax * (kmax + 1) / 2 * rounds,
                           per_call=target.measure.timeout,
                           on_result=on_result, on_failure=failures.append)
    if run.interrupted:
        raise KeyboardInterrupt
    return rows, failures, method
