"""Measurements as plain data, in the store: block counts and TSC ticks per input.

The count run (:mod:`wcetfit.count.run`) and the timing run (:mod:`wcetfit.timing.run`)
produce a :class:`CountSet` and a :class:`TimeSet`; the fit reads them.  This module holds
what both runs share: the data, its place in the store, the saving loop that runs a
worker in a child process (:mod:`wcetfit.isolate`) and keeps what arrives.

Every input ``i`` is the same call in every command: its arguments come from
``generate(ctx)`` with ``ctx.rng = default_rng([seed, i])``.  Results are saved to the
store every few seconds and when the run ends or is interrupted; a later run measures
only the inputs that are still missing.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.errors import MeasurementError, NothingMeasured
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
    # Indirect call sites (call instruction, link-time) -> target -> the inputs on which
    # the site called it: a target in the binary by its link-time entry (int), one outside
    # by "symbol (library)" (str).  Recorded by the instrumented copy (wcetfit.count).
    indirect: dict[int, dict[int | str, tuple[int, ...]]] | None = None
    # input -> what the counted call returned (repr of a number; inputs whose call returned
    # nothing or an object are absent), to tell a timed call that took another path
    # (wcetfit.timing.state.counted_other_path); None: not recorded (older stores)
    returns: dict[int, str] | None = None

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


@dataclass(frozen=True)
class ActivationRows:
    """Exclusive-time rows of one function's timed activations (per-activation probes).

    The interface between the per-activation timing run and the fit.  One row per timed
    activation of ``function`` (its entry to its return, on one input); every repeat of
    the input's call gives one column of ``ticks``.  A row's time is *exclusive*: the
    activation's exit reading minus its entry reading, minus the inclusive time of each
    timed child activation, so it holds the activation's own blocks plus, per timed
    child, one probe pair's overhead (``children``).  Callees that are not timed (too
    short, or not probeable) stay in the row: their blocks are columns too.
    """

    function: str
    address: int
    columns: tuple[tuple[str, int], ...]   # (function, link-time block address) per column
    counts: Any                   # scipy.sparse.csr_matrix [rows, columns], exclusive counts
    ticks: np.ndarray             # float64 [rows, repeats]; NaN = not measured/discarded
    children: np.ndarray          # int32 [rows]: timed child activations subtracted
    input_index: np.ndarray       # int64 [rows]: the input whose call made the activation
    call_site: np.ndarray         # uint64 [rows]: link-time address of the call (0: root call)
    # csr [rows, columns]: timed child activations called from each column's block (where
    # each child's δ sits); None when not known
    child_calls: Any = None


def _failures_to_json(failures: Sequence[InputFailure]) -> list[dict[str, Any]]:
    return [{"index": f.index, "kind": f.kind, "message": f.message, "arguments": f.arguments}
            for f in failures]


def _failures_from_json(data: Sequence[dict[str, Any]]) -> list[InputFailure]:
    return [InputFailure(int(d["index"]), d["kind"], d["message"], d["arguments"])
            for d in data]


# --- the store's view of counts and times ----------------------------------------------

def first_generated(cs: CountSet, ts: TimeSet | None, n: int
                    ) -> tuple[CountSet, TimeSet | None, int]:
    """The counts and times of generated inputs 0..n-1 (and every searched or reached
    input, numbered from ``wcetfit.search.candidates.SEARCH_BASE``), and how many generated
    inputs were stored: ``report --inputs N`` over a store that holds more."""
    from wcetfit.search.candidates import SEARCH_BASE

    def keep(indices: np.ndarray) -> np.ndarray:
        return (indices < n) | (indices >= SEARCH_BASE)

    stored = int(np.sum(cs.indices < SEARCH_BASE))
    k = keep(cs.indices)
    cs = replace(cs, indices=cs.indices[k],
                 functions=tuple(replace(fc, counts=fc.counts[k]) for fc in cs.functions))
    if ts is not None:
        t = keep(ts.indices)
        ts = replace(ts, indices=ts.indices[t], ticks=ts.ticks[t],
                     done=ts.done[t] if ts.done is not None else None)
    return cs, ts, stored


def counts_name(function: str, seed: int) -> str:
    return f"counts-{_safe(function)}-s{seed}"


def times_name(function: str, seed: int, method: str, repeats: int) -> str:
    return f"times-{_safe(function)}-s{seed}-{method}-r{repeats}"


def stored_repeats(store: Store, function: str, seed: int, method: str) -> list[int]:
    """The repeat counts of the timing sets stored for ``function``, ``seed``, ``method``."""
    prefix = times_name(function, seed, method, 0)[:-1]
    return sorted(int(n[len(prefix):]) for n in store.names()
                  if n.startswith(prefix) and n[len(prefix):].isdigit())


def stored_methods(store_dir: str, function: str, seed: int) -> set[str]:
    """The fence methods of the timing sets stored in ``store_dir`` for ``function`` and
    ``seed`` (read from the file names: the method is chosen before a store is opened)."""
    prefix = times_name(function, seed, "", 0)[:-len("-r0")]
    try:
        names = os.listdir(store_dir)
    except OSError:
        return set()
    found = set()
    for n in names:
        if n.startswith(prefix) and n.endswith(".npz"):
            method, sep, repeats = n[len(prefix):-len(".npz")].rpartition("-r")
            if sep and method and repeats.isdigit():
                found.add(method)
    return found


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)


def open_store(target: Target, *, fresh: bool = False, wait: bool = True) -> Store:
    return Store(target.store_dir, StoreIdentity.of(target.binary, target.cdef, target.prototype),
                 fresh=fresh, wait=wait)


def save_counts(store: Store, cs: CountSet) -> None:
    arrays: dict[str, np.ndarray] = {"indices": cs.indices}
    meta = {"kind": "counts", "function": cs.function, "seed": cs.seed,
            "functions": [{"name": fc.name, "address": hexaddr(fc.address)}
                          for fc in cs.functions],
            "failures": _failures_to_json(cs.failures)}
    if cs.indirect:
        meta["indirect"] = {hexaddr(site): [[hexaddr(t) if isinstance(t, int) else t, list(ins)]
                                            for t, ins in targets.items()]
                            for site, targets in cs.indirect.items()}
    if cs.returns:
        meta["returns"] = {str(int(i)): v for i, v in sorted(cs.returns.items())}
    for i, fc in enumerate(cs.functions):
        arrays[f"blocks{i}"] = np.asarray(fc.blocks, dtype=np.uint64)
        arrays[f"counts{i}"] = fc.counts
    if cs.trace:
        order = sorted(cs.trace)
        arrays["trace_indices"] = np.asarray(order, dtype=np.int64)
        arrays["trace_offsets"] = np.cumsum([0] + [len(cs.trace[i]) for i in order])
        arrays["trace_data"] = (np.concatenate([cs.trace[i] for i in order])
                                if order else np.zeros(0, np.int32))
    store.save(counts_name(cs.function, cs.seed), meta, arrays,
               measured=len(cs.indices) > 0)


def stored_function_counts(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
                           ) -> tuple[FunctionCounts, ...]:
    """The per-function counts a dataset holds (``functions`` in its meta, ``blocks<i>`` and
    ``counts<i>`` among its arrays): counts sets and the search's rows share the layout."""
    return tuple(FunctionCounts(f["name"], int(f["address"], 16),
                                tuple(int(a) for a in arrays[f"blocks{i}"]),
                                arrays[f"counts{i}"])
                 for i, f in enumerate(meta["functions"]))


def load_counts(store: Store, function: str, seed: int) -> CountSet | None:
    got = store.load(counts_name(function, seed))
    if got is None:
        return None
    meta, arrays = got
    fcs = stored_function_counts(meta, arrays)
    trace = None
    if "trace_indices" in arrays:
        off = arrays["trace_offsets"]
        trace = {int(idx): arrays["trace_data"][off[k]:off[k + 1]]
                 for k, idx in enumerate(arrays["trace_indices"])}
    indirect = {int(site, 16): {(int(t, 16) if t.startswith("0x") else t): tuple(ins)
                                for t, ins in targets}
                for site, targets in meta.get("indirect", {}).items()} or None
    returns = {int(i): str(v) for i, v in meta.get("returns", {}).items()} or None
    return CountSet(function, seed, arrays["indices"], fcs,
                    tuple(_failures_from_json(meta["failures"])), trace, indirect, returns)


def save_times(store: Store, ts: TimeSet) -> None:
    meta = {"kind": "times", "function": ts.function, "seed": ts.seed, "method": ts.method,
            "tsc_hz": ts.tsc_hz, "migrated": ts.migrated, "environment": ts.environment,
            "machine": machine_fingerprint(), "failures": _failures_to_json(ts.failures)}
    done = ts.done if ts.done is not None else np.isfinite(ts.ticks)
    store.save(times_name(ts.function, ts.seed, ts.method, ts.ticks.shape[1]), meta,
               {"indices": ts.indices, "ticks": ts.ticks, "done": done},
               measured=bool(np.any(done)))


# The warm-up a timing set was taken with when its environment does not say: the default
# before timed calls followed the previous input's (wcetfit.timing.run).
WARMUP_BEFORE_RECORDED = 3


# What the worker did before a timed call, as a version a timing set records
# (``environment["timed_state"]``, a search set ``timed_state``): 2 since a worker warms up
# on 50 of its inputs and a timed call follows an untimed call of the previous input made
# right before it (wcetfit.timing.run._TimingWorker); 1, every set that does not say, the
# worker's own checks and messages between the previous input's call and the timed one
# (SHA256: ×3.7 the time).  Sets of another version are another measurement.
TIMED_STATE = 2
TIMED_STATE_BEFORE_RECORDED = 1


def other_measurement(recorded: Mapping[str, Any], warmup: int | None) -> str | None:
    """Why a set whose environment (or search metadata) is ``recorded`` is not the
    measurement a target with [measure] ``warmup`` takes now, or None when it is."""
    taken = recorded.get("warmup", WARMUP_BEFORE_RECORDED)
    if warmup is not None and int(taken) != int(warmup):
        return (f"taken with {taken} warm-up call(s) of each input before its timed call, "
                f"and [measure] warmup is {warmup}")
    state = int(recorded.get("timed_state", TIMED_STATE_BEFORE_RECORDED))
    if warmup is not None and state != TIMED_STATE:
        return ("taken before timed calls followed an untimed call of the previous input "
                "made right before them (wcetfit before 2026-11-27: the worker's own work "
                "between calls was in the times)")
    return None


def load_times(store: Store, function: str, seed: int, method: str,
               repeats: int, *, warmup: int | None = None) -> TimeSet | None:
    """The stored timing set, or None.  ``warmup``: the target's [measure] warmup; a set
    taken with another, or in another state (:data:`TIMED_STATE`), is not the same
    measurement (calls after warm-up calls of their own input run up to 3× faster than
    in a stream) and counts as absent."""
    got = store.load(times_name(function, seed, method, repeats), machine=True)
    if got is None:
        return None
    meta, arrays = got
    why = other_measurement(meta.get("environment") or {}, warmup)
    if why is not None:
        log.info("%s: the stored times were %s: timed again", function, why)
        return None
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


def nothing_ran(function: str, failures: Sequence[InputFailure],
                lead: str = "no input ran") -> str:
    """The error when no input of ``function`` ran (every one failed: ``failures``, the
    stored InputFailure records): ``lead``, how many failed, how, the first, and what to
    do."""
    from collections import Counter

    by_input = {f.index: f for f in failures}
    kinds = Counter(f.kind for f in by_input.values())
    first = by_input[min(by_input)]
    return (f"{function}: {lead}: {len(by_input)} failed ("
            + ", ".join(f"{k} ×{n}" for k, n in kinds.most_common())
            + f"), the first {first.describe()}: make generate() give arguments the "
              f"function accepts, then `wcetfit analyze --fresh`")


# Inputs in a row that fail the same way (kind and message) before any succeeds: the
# set-up or the function is broken for every input, not one input; the run stops.
EARLY_STOP_FAILURES = 20


def measure_saving(make_worker: Callable[[], Any], todo: Sequence[int], *, timeout: float,
                   per_call: float | None = None,
                   store_result: Callable[[int, Any], None], failures: list[InputFailure],
                   save: Callable[[], None], done: Callable[[], int], wanted: int,
                   progress: Progress | None) -> Any:
    """Run the worker on ``todo`` in a child; keep results and failures as they arrive,
    save now and then and whatever happens at the end; KeyboardInterrupt after saving.
    Returns what the target wrote to standard output and error
    (wcetfit.isolate.TargetOutput), or None."""
    saver = _Saver(save)
    this_run: list[InputFailure] = []
    succeeded = False

    def on_result(index: int, result: Any) -> None:
        nonlocal succeeded
        succeeded = True
        store_result(index, result)
        saver.touch()
        if progress:
            progress(done(), wanted)

    def on_returned(index: int) -> None:
        # an untimed call of this input returned (a timing worker's warm-up): the function
        # runs on some inputs, which is what the early stop asks (libpng's
        # png_get_uint_31, 52 of 80 inputs aborting: each worker's 50 warm-up calls met
        # one, and the 20 failures before any timed call stopped a run that had inputs
        # to time)
        nonlocal succeeded
        succeeded = True

    def on_failure(failure: InputFailure) -> None:
        failures.append(failure)
        this_run.append(failure)
        saver.touch()
        if not succeeded and len(this_run) >= EARLY_STOP_FAILURES and \
                len({(f.kind, f.message) for f in this_run}) == 1 and len(todo) > len(this_run):
            # A fresh worker per failed input costs a fork and the set-up (0.4 s on
            # liblzma): 500 identical crashes took 3.7 min to report what the first said.
            raise NothingMeasured(
                f"the first {len(this_run)} inputs all failed the same way, none succeeded: "
                f"stopped before the other {len(todo) - len(this_run)} (the failures are "
                f"stored: a run with the same seed does not try them again): "
                f"{this_run[0].describe()}")

    if progress:
        progress(done(), wanted)
    try:
        run = run_isolated(make_worker, todo, timeout=timeout, per_call=per_call,
                           on_result=on_result,
                           on_failure=on_failure, on_returned=on_returned)
    finally:
        saver.dirty = True
        saver.flush()
    if run.interrupted:
        raise KeyboardInterrupt
    return run.output


# --- which prototype belongs to which measured function ----------------------------------

def prototype_name(harness: Any, function: str) -> str:
    """The name under which ``function`` (as wcetfit.toml names it) is declared in the
    target's prototype.  Count, timing and split runs all ask here.

    A function named by symbol is declared under that name.  A function given by
    ``0x…`` address (a stripped or static function) is declared under any name: its own
    if the prototype has it, else the one function the prototype declares.
    """
    declared = list(harness.functions)
    if function in declared:
        return function
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", function):
        if len(declared) == 1:
            return declared[0]
        raise MeasurementError(f"{function} is named by address and the prototype declares "
                               f"{', '.join(declared)}: a function named by address takes "
                               "any name only when the prototype declares just one function")
    raise MeasurementError(f"the prototype declares {', '.join(declared)} but not {function}: "
                           "declare every measured function under the name wcetfit.toml "
                           "gives it (only one named by 0x… address may have another name)")
