"""Count runs and timing runs of a target, isolated, resumable, saved as they go.

This module connects the pieces: the target (:mod:`wcetfit.target`), the per-prototype
call harness (:mod:`wcetfit.thunk`), the loader and instrumented copy
(:mod:`wcetfit.loader`, :mod:`wcetfit.counting`), the TSC timing core
(:mod:`wcetfit.timing`), the child-process runner (:mod:`wcetfit.isolate`) and the store
(:mod:`wcetfit.store`).

Every input ``i`` is the same call in every command: its arguments come from
``generate(ctx)`` with ``ctx.rng = default_rng([seed, i])``.  Results are saved to the
store every few seconds and when the run ends or is interrupted; a later run measures
only the inputs that are still missing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.errors import MeasurementError
from wcetfit.isolate import InputFailure, run_isolated
from wcetfit.model import hexaddr
from wcetfit.store import Store, StoreIdentity, machine_fingerprint
from wcetfit.target import Target, describe_args, generate_input, load_inputs_module

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]   # (inputs done, inputs wanted)

# Save partial results at most this often: often enough that Ctrl-C or a crash of the
# analyzer itself loses little, rarely enough that rewriting the .npz costs nothing.
_SAVE_INTERVAL_S = 3.0


# --- data -----------------------------------------------------------------------------

@dataclass(frozen=True)
class FunctionCounts:
    name: str
    address: int
    blocks: tuple[int, ...]       # link-time block addresses, the columns of ``counts``
    counts: np.ndarray            # int64 [inputs, blocks]


@dataclass(frozen=True)
class CountSet:
    """Block counts of every input of one measured function (and its callees)."""

    function: str                 # the measured (root) function
    seed: int
    indices: np.ndarray           # input indices, ascending; rows of every ``counts``
    functions: tuple[FunctionCounts, ...]   # root first, then callees reached
    failures: tuple[InputFailure, ...] = ()
    trace: dict[int, np.ndarray] | None = None   # input -> compact block ids (split workflow)

    def of(self, name: str) -> FunctionCounts:
        for fc in self.functions:
            if fc.name == name:
                return fc
        raise KeyError(name)


@dataclass(frozen=True)
class TimeSet:
    """TSC ticks of every timed call of one measured function."""

    function: str
    seed: int
    indices: np.ndarray           # input indices, ascending
    ticks: np.ndarray             # float64 [inputs, repeats]; NaN = discarded (migrated)
    method: str
    tsc_hz: float
    migrated: int                 # samples discarded because the call changed CPU
    environment: dict[str, Any] = field(default_factory=dict)
    failures: tuple[InputFailure, ...] = ()
    done: np.ndarray | None = None   # bool [inputs, repeats]: measured (NaN may be discarded)


def _failures_to_json(failures: Sequence[InputFailure]) -> list[dict[str, Any]]:
    return [{"index": f.index, "kind": f.kind, "message": f.message, "arguments": f.arguments}
            for f in failures]


def _failures_from_json(data: Sequence[dict[str, Any]]) -> list[InputFailure]:
    return [InputFailure(int(d["index"]), d["kind"], d["message"], d["arguments"])
            for d in data]


# --- the store's view of counts and times ----------------------------------------------

def counts_name(function: str, seed: int) -> str:
    return f"counts-{_safe(function)}-s{seed}"


def times_name(function: str, seed: int, method: str, repeats: int) -> str:
    return f"times-{_safe(function)}-s{seed}-{method}-r{repeats}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)


def open_store(target: Target, *, fresh: bool = False) -> Store:
    return Store(target.store_dir, StoreIdentity.of(target.binary, target.cdef, target.prototype),
                 fresh=fresh)


def save_counts(store: Store, cs: CountSet) -> None:
    arrays: dict[str, np.ndarray] = {"indices": cs.indices}
    meta = {"kind": "counts", "function": cs.function, "seed": cs.seed,
            "functions": [{"name": fc.name, "address": hexaddr(fc.address)}
                          for fc in cs.functions],
            "failures": _failures_to_json(cs.failures)}
    for i, fc in enumerate(cs.functions):
        arrays[f"blocks{i}"] = np.asarray(fc.blocks, dtype=np.uint64)
        arrays[f"counts{i}"] = fc.counts
    if cs.trace:
        order = sorted(cs.trace)
        arrays["trace_indices"] = np.asarray(order, dtype=np.int64)
        arrays["trace_offsets"] = np.cumsum([0] + [len(cs.trace[i]) for i in order])
        arrays["trace_data"] = (np.concatenate([cs.trace[i] for i in order])
                                if order else np.zeros(0, np.int32))
    store.save(counts_name(cs.function, cs.seed), meta, arrays)


def load_counts(store: Store, function: str, seed: int) -> CountSet | None:
    got = store.load(counts_name(function, seed))
    if got is None:
        return None
    meta, arrays = got
    fcs = tuple(FunctionCounts(f["name"], int(f["address"], 16),
                               tuple(int(a) for a in arrays[f"blocks{i}"]), arrays[f"counts{i}"])
                for i, f in enumerate(meta["functions"]))
    trace = None
    if "trace_indices" in arrays:
        off = arrays["trace_offsets"]
        trace = {int(idx): arrays["trace_data"][off[k]:off[k + 1]]
                 for k, idx in enumerate(arrays["trace_indices"])}
    return CountSet(function, seed, arrays["indices"], fcs,
                    tuple(_failures_from_json(meta["failures"])), trace)


def save_times(store: Store, ts: TimeSet) -> None:
    meta = {"kind": "times", "function": ts.function, "seed": ts.seed, "method": ts.method,
            "tsc_hz": ts.tsc_hz, "migrated": ts.migrated, "environment": ts.environment,
            "machine": machine_fingerprint(), "failures": _failures_to_json(ts.failures)}
    done = ts.done if ts.done is not None else np.isfinite(ts.ticks)
    store.save(times_name(ts.function, ts.seed, ts.method, ts.ticks.shape[1]), meta,
               {"indices": ts.indices, "ticks": ts.ticks, "done": done})


def load_times(store: Store, function: str, seed: int, method: str,
               repeats: int) -> TimeSet | None:
    got = store.load(times_name(function, seed, method, repeats), machine=True)
    if got is None:
        return None
    meta, arrays = got
    return TimeSet(function, seed, arrays["indices"], arrays["ticks"], meta["method"],
                   float(meta["tsc_hz"]), int(meta["migrated"]), meta.get("environment", {}),
                   tuple(_failures_from_json(meta["failures"])),
                   arrays.get("done", np.isfinite(arrays["ticks"])))


class _Saver:
    """Accumulates per-input results and saves them now and then (and at the end)."""

    def __init__(self, save: Callable[[], None]):
        self._save = save
        self._last = time.monotonic()
        self.dirty = False

    def touch(self) -> None:
        self.dirty = True
        if time.monotonic() - self._last >= _SAVE_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self.dirty:
            self._save()
            self.dirty = False
        self._last = time.monotonic()


def _measure_saving(make_worker: Callable[[], Any], todo: Sequence[int], *, timeout: float,
                    store_result: Callable[[int, Any], None], failures: list[InputFailure],
                    save: Callable[[], None], done: Callable[[], int], wanted: int,
                    progress: Progress | None) -> None:
    """Run the worker on ``todo`` in a child; keep results and failures as they arrive,
    save now and then and whatever happens at the end; KeyboardInterrupt after saving."""
    saver = _Saver(save)

    def on_result(index: int, result: Any) -> None:
        store_result(index, result)
        saver.touch()
        if progress:
            progress(done(), wanted)

    def on_failure(failure: InputFailure) -> None:
        failures.append(failure)
        saver.touch()

    if progress:
        progress(done(), wanted)
    try:
        run = run_isolated(make_worker, todo, timeout=timeout, on_result=on_result,
                           on_failure=on_failure)
    finally:
        saver.dirty = True
        saver.flush()
    if run.interrupted:
        raise KeyboardInterrupt


# --- which prototype belongs to which measured function ----------------------------------

def prototype_name(harness: Any, function: str) -> str:
    """The name under which ``function`` is declared in the target's prototype.

    A function given by ``0x…`` address (a stripped or static function) is declared
    under any name; the prototype must then declare exactly one function.
    """
    if function in harness.functions:
        return function
    if len(harness.functions) == 1:
        return next(iter(harness.functions))
    raise MeasurementError(f"the prototype declares {', '.join(harness.functions)} but not "
                           f"{function}: declare every measured function")


# --- timing run -------------------------------------------------------------------------

class _TimingWorker:
    """Child-process side of the timing run: the original code, pinned, restored args."""

    def __init__(self, target: Target, functions: Sequence[tuple[str, int]], method: str,
                 repeats: int | None = None):
        from wcetfit import tsc
        from wcetfit.loader import load_binary
        from wcetfit.thunk import build_harness

        self.target = target
        self.method = method
        self.repeats = target.measure.repeats if repeats is None else repeats
        self.harness = build_harness(target.prototype, target.cdef)
        self.generate = load_inputs_module(target)
        binary = load_binary(target.binary)
        self.functions = [(name, prototype_name(self.harness, name), binary.runtime(addr))
                          for name, addr in functions]
        # Pin for the whole life of the worker: a migration inside a timed region
        # mixes two TSCs and two caches.  Samples that migrate anyway are discarded.
        self._pin = tsc.pinned()
        self._pin.__enter__()

    def run(self, index: int, start: Callable[[str], None]) -> dict[str, tuple[np.ndarray, int]]:
        from wcetfit.timing import time_input

        out = {}
        m = self.target.measure
        for name, proto, address in self.functions:
            args = generate_input(self.generate, self.target, self.harness.ffi, name, index)
            pack = self.harness.pack(proto, args)
            start(describe_args(self.harness.ffi, args))
            timed = time_input(self.harness, proto, address, pack, self.repeats, m.warmup,
                               self.method)
            out[name] = (timed.ticks, timed.migrated)
        return out


def resolve_method(target: Target) -> tuple[str, str]:
    """The fence method to use and why (the calibration's choice for "auto")."""
    if target.measure.method != "auto":
        return target.measure.method, "set in the target file or on the command line"
    from wcetfit.calibrate import auto_method
    return auto_method()


def run_times(target: Target, store: Store, functions: Mapping[str, int], *,
              progress: Progress | None = None) -> dict[str, TimeSet]:
    """Time every input of every measured function (name → link-time address).

    Repeats are taken in passes, not back to back: pass r times each input once (after
    ``warmup`` untimed calls of that same input), then pass r+1 starts over.  On a
    shared machine the speed drifts for seconds at a time (another process, the host):
    with back-to-back repeats one input would get all its repeats in a slow episode and
    look like a slow input; spread over passes, a slow episode touches one repeat of
    many inputs, and the repeat statistic (wcetfit.robust) sets it aside as a disturbed
    call.  Repeats already in the store are not measured again; results are saved as
    they come.
    """
    from wcetfit import tsc

    m = target.measure
    method, why = resolve_method(target)
    log.info("timing method %s (%s)", method, why)
    tsc_hz = tsc.tsc_frequency().hz
    env = tsc.environment(method).to_dict()
    n = m.inputs
    ticks = {f: np.full((n, m.repeats), np.nan) for f in functions}
    done = np.zeros((n, m.repeats), dtype=bool)
    migrated = {f: 0 for f in functions}
    failures: list[InputFailure] = []
    for f in functions:
        old = load_times(store, f, m.seed, method, m.repeats)
        if old is None:
            continue
        keep = old.indices < n
        ticks[f][old.indices[keep]] = old.ticks[keep]
        done[old.indices[keep]] |= old.done[keep]
        migrated[f] = old.migrated
        failures.extend(x for x in old.failures if x not in failures)

    def snapshot() -> dict[str, TimeSet]:
        measured = np.flatnonzero(done.any(axis=1))
        return {f: TimeSet(f, m.seed, measured.astype(np.int64), ticks[f][measured], method,
                           tsc_hz, migrated[f], env, tuple(failures), done[measured])
                for f in functions}

    def save() -> None:
        for ts in snapshot().values():
            save_times(store, ts)

    for r in range(m.repeats):
        failed = {x.index for x in failures}
        todo = [i for i in range(n) if not done[i, r] and i not in failed]
        if not todo:
            continue

        def store_result(index: int, result: dict[str, tuple[np.ndarray, int]],
                         r: int = r) -> None:
            for f, (row, mig) in result.items():
                ticks[f][index, r] = row[0]
                migrated[f] += mig
            done[index, r] = True

        _measure_saving(lambda: _TimingWorker(target, list(functions.items()), method,
                                              repeats=1), todo,
                        timeout=m.timeout * (m.warmup + 2), store_result=store_result,
                        failures=failures, save=save, done=lambda: int(done.sum()),
                        wanted=n * m.repeats, progress=progress)
    return snapshot()


# --- count run --------------------------------------------------------------------------

class _CountWorker:
    """Child-process side of the count run: one instrumented copy per measured function."""

    def __init__(self, target: Target, model: Any, roots: Sequence[str], trace: bool):
        from wcetfit.counting import Counter, InstrumentedCopy
        from wcetfit.loader import load_binary
        from wcetfit.relocate import closure
        from wcetfit.thunk import build_harness

        self.target = target
        self.harness = build_harness(target.prototype, target.cdef)
        self.generate = load_inputs_module(target)
        binary = load_binary(target.binary)
        self.counters = []
        for root in roots:
            fn = model.function(root).name
            if prototype_name(self.harness, fn) != fn:
                raise MeasurementError(f"{root}: the count run needs the prototype to declare "
                                       f"the function under its symbol name {fn}")
            copy = InstrumentedCopy(binary, closure(model.functions, [fn]), trace=trace,
                                    trace_cap=target.measure.trace_cap)
            self.counters.append((root, Counter(copy, fn, self.harness)))

    def run(self, index: int, start: Callable[[str], None]) -> dict[str, Any]:
        out = {}
        for root, counter in self.counters:
            args = generate_input(self.generate, self.target, self.harness.ffi,
                                  counter.function, index)
            pack = self.harness.pack(counter.function, args)
            fresh = None
            if getattr(pack, "unrestored", ()):
                fresh = self.harness.pack(counter.function, generate_input(
                    self.generate, self.target, self.harness.ffi, counter.function, index))
            summary = describe_args(self.harness.ffi, args)
            res = counter.count(index, pack, fresh, start=lambda: start(summary))
            out[root] = ({k: np.asarray(v, dtype=np.int64) for k, v in res.counts.items()},
                         None if res.trace is None else np.asarray(res.trace, np.uint32))
        return out


def run_counts(target: Target, store: Store, model: Any, roots: Sequence[str], *,
               trace: bool = False, progress: Progress | None = None) -> dict[str, CountSet]:
    """Block counts of every input of every measured function (and of its callees).

    Inputs already in the store are not counted again (with ``trace``, inputs stored
    without a trace are counted again to get one).
    """
    m = target.measure
    wanted = np.arange(m.inputs)
    per_root: dict[str, dict[int, dict[str, np.ndarray]]] = {r: {} for r in roots}
    traces: dict[str, dict[int, np.ndarray]] = {r: {} for r in roots}
    layout: dict[str, list[tuple[str, int, tuple[int, ...]]]] = {}
    failures: list[InputFailure] = []
    from wcetfit.relocate import closure
    for r in roots:
        fn = model.function(r).name
        fns = closure(model.functions, [fn])
        layout[r] = [(f.name, f.address, f.block_addresses) for f in fns]
        old = load_counts(store, r, m.seed)
        if old is None:
            continue
        if [(fc.name, fc.blocks) for fc in old.functions] != [(n, b) for n, _, b in layout[r]]:
            log.warning("stored counts of %s have another block layout: counting again", r)
            continue
        if trace and old.trace is None:
            continue
        for k, i in enumerate(old.indices):
            per_root[r][int(i)] = {fc.name: fc.counts[k] for fc in old.functions}
        if old.trace:
            traces[r].update(old.trace)
        failures.extend(x for x in old.failures if x not in failures)
    failed = {x.index for x in failures}
    first = roots[0]
    todo = [int(i) for i in wanted if int(i) not in per_root[first] and int(i) not in failed]

    def snapshot() -> dict[str, CountSet]:
        out = {}
        for r in roots:
            idx = np.array(sorted(per_root[r]), dtype=np.int64)
            fcs = tuple(FunctionCounts(name, addr, blocks, (
                np.stack([per_root[r][i][name] for i in idx]) if len(idx)
                else np.zeros((0, len(blocks)), np.int64)))
                for name, addr, blocks in layout[r])
            out[r] = CountSet(r, m.seed, idx, fcs, tuple(failures),
                              dict(traces[r]) if trace else None)
        return out

    def save() -> None:
        for cs in snapshot().values():
            save_counts(store, cs)

    def store_result(index: int, result: dict[str, Any]) -> None:
        for r, (counts, tr) in result.items():
            per_root[r][index] = counts
            if tr is not None:
                traces[r][index] = tr

    # Counting runs each input twice (the copy, then the original for the differential
    # check): the hang timeout covers both.
    _measure_saving(lambda: _CountWorker(target, model, list(roots), trace), todo,
                    timeout=3 * target.measure.timeout, store_result=store_result,
                    failures=failures, save=save, done=lambda: len(per_root[first]),
                    wanted=len(wanted), progress=progress)
    return snapshot()


# --- straight-line timing (Moreno & Fischmeister §4) -------------------------------------

class _StraightLineWorker(_TimingWorker):
    """k = 1..M back-to-back calls per region; the slope is the call's time without ε."""

    def __init__(self, target: Target, functions: Sequence[tuple[str, int]], method: str,
                 kmax: int, rounds: int):
        super().__init__(target, functions, method)
        self.kmax = kmax
        self.rounds = rounds

    def run(self, index: int, start: Callable[[str], None]) -> dict[str, tuple[float, ...]]:
        from wcetfit.timing import straight_line

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

    run = run_isolated(lambda: _StraightLineWorker(target, list(functions.items()), method,
                                                   kmax, rounds),
                       range(target.measure.inputs),
                       timeout=target.measure.timeout * kmax * (kmax + 1) / 2 * rounds,
                       on_result=on_result, on_failure=failures.append)
    if run.interrupted:
        raise KeyboardInterrupt
    return rows, failures, method
