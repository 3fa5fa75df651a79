"""The count run: block counts of every input from the instrumented copy, in a child.

A child process (:mod:`wcetfit.isolate`) loads the binary, builds the instrumented copy of
each measured function and the binary's own functions it reaches
(:mod:`wcetfit.count.instrumented`), and counts each input's call, checked against the
original; the counts are saved to the store as they come (:mod:`wcetfit.measurements`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.errors import NothingMeasured
from wcetfit.isolate import COPY_CRASH, InputFailure, run_isolated
from wcetfit.measurements import (CountSet, FunctionCounts, Progress, load_counts,
                                  measure_saving, prototype_name, save_counts)
from wcetfit.numbering import input_label
from wcetfit.store import Store
from wcetfit.target import Target, describe_args, generate_input, load_inputs_module

log = logging.getLogger(__name__)


# --- count run --------------------------------------------------------------------------

class _CountWorker:
    """Child-process side of the count run: one instrumented copy per measured function."""

    def __init__(self, target: Target, model: Any, roots: Sequence[str], trace: bool,
                 uncounted: Mapping[str, Sequence[str]] | None = None,
                 inputs: Callable[..., tuple] | None = None):
        from wcetfit.count.instrumented import Counter, InstrumentedCopy
        from wcetfit.loader import load_binary
        from wcetfit.count.relocate import closure
        from wcetfit.timing.thunk import build_harness

        self.target = target
        self.harness = build_harness(target.prototype, target.cdef)
        self.generate = load_inputs_module(target)
        # ``inputs(generate, target, ffi, function, index)`` builds one input's arguments:
        # generate_input by default, replayed choice sequences for the worst-case search.
        self.inputs = inputs or generate_input
        binary = load_binary(target.binary)
        self.counters = []
        for root in roots:
            fn = model.function(root).name
            name = prototype_name(self.harness, root)
            # The callees the parent found not relocatable (same model, same bytes).
            fns = closure(model.functions, [fn], (uncounted or {}).get(root, ()))
            copy = InstrumentedCopy(binary, fns, trace=trace,
                                    trace_cap=target.measure.trace_cap)
            self.counters.append((root, Counter(copy, fn, self.harness, call_name=name)))

    def run(self, index: int, start: Callable[[str], None]) -> dict[str, Any]:
        out = {}
        for root, counter in self.counters:
            args = self.inputs(self.generate, self.target, self.harness.ffi, root, index)
            pack = self.harness.pack(counter.call_name, args)
            summary = describe_args(self.harness.ffi, args)
            res = counter.count(index, pack, start=lambda: start(summary))
            out[root] = ({k: np.asarray(v, dtype=np.int64) for k, v in res.counts.items()},
                         None if res.trace is None else np.asarray(res.trace, np.uint32),
                         {site: sorted(targets) for site, targets in (res.indirect or {}).items()},
                         _number(res.return_value))
        return out


class _OriginalWorker:
    """Child-process side of the count run's second look at an input it lost to a crash:
    the original function called on it, nothing counted.  Whether the input crashes the
    function, or only the instrumented copy (libgmp's mpz_powm: 27 of 200 inputs "crash:
    SIGILL" in the count run, every one of which the library computes right)."""

    def __init__(self, target: Target, model: Any, roots: Sequence[str]):
        from wcetfit.loader import load_binary
        from wcetfit.timing.thunk import build_harness

        self.target = target
        self.harness = build_harness(target.prototype, target.cdef)
        self.generate = load_inputs_module(target)
        binary = load_binary(target.binary)
        self.calls = [(root, prototype_name(self.harness, root),
                       binary.runtime(model.function(root).entry)) for root in roots]

    def run(self, index: int, start: Callable[[str], None]) -> str:
        for root, name, address in self.calls:
            args = generate_input(self.generate, self.target, self.harness.ffi, root, index)
            pack = self.harness.pack(name, args)
            start(describe_args(self.harness.ffi, args))
            self.harness.call(name, address, pack)
        return "returned"


# Crashes of the count run looked at again (the original called alone), at most so many.
MAX_CRASHES_CHECKED = 50


def copy_crashes(target: Target, model: Any, roots: Sequence[str],
                 failures: Sequence[InputFailure]) -> list[InputFailure]:
    """``failures`` with each crash the original does not share said to be the
    instrumented copy's: the original, called alone on the input, returns.  Its counts are
    missing all the same, but the function is not what crashed, and the input is not the
    user's to change."""
    crashed = [f for f in failures if f.kind == "crash"][:MAX_CRASHES_CHECKED]
    if not crashed:
        return list(failures)
    run = run_isolated(lambda: _OriginalWorker(target, model, roots),
                       [f.index for f in crashed], timeout=3 * target.measure.timeout,
                       per_call=target.measure.timeout)
    returned = set(run.results)
    out = []
    for f in failures:
        if f.kind == "crash" and f.index in returned:
            f = InputFailure(f.index, COPY_CRASH,
                             f"the instrumented copy died of {f.message} where the original "
                             f"{' and '.join(roots)}, called alone on this input, returns: a "
                             f"defect of wcetfit's copy (its relocation of the code this "
                             f"input runs), not the function's crash; the input has no "
                             f"counts",
                             f.arguments)
        out.append(f)
    return out


def _number(value: Any) -> str | None:
    """A counted call's return value as the timing run keeps it (wcetfit.timing.state.
    record_return: the repr of a number), None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return repr(value)


def relocatable_closures(target: Target, model: Any, roots: Sequence[str], *,
                         trace: bool = False) -> dict[str, tuple[list[Any], dict[str, str]]]:
    """Per measured function: the functions its instrumented copy holds, and the callees
    that cannot be copied (name → why), which run as original code, uncounted."""
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import read_elf
    read = read_elf(target.binary).read
    out = {}
    for r in roots:
        fn = model.function(r).name
        fns, skipped = relocatable_closure(model.functions, [fn], read, trace=trace)
        out[r] = (list(fns), dict(skipped))
        for name, why in skipped.items():
            # Said where the user reads the counts: these callees run, uncounted (once
            # per process: analyze plans the copy several times)
            if (target.binary, r, name) not in _SAID_UNCOUNTED:
                _SAID_UNCOUNTED.add((target.binary, r, name))
                log.warning("%s: callee %s runs as original code, uncounted (its time stays "
                            "in the calling block, as an imported call's): %s", r, name, why)
    return out


_SAID_UNCOUNTED: set[tuple[str, str, str]] = set()


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
    # root -> call site -> target -> inputs on which the site called it
    indirect: dict[str, dict[int, dict[int | str, set[int]]]] = {r: {} for r in roots}
    returns: dict[str, dict[int, str]] = {r: {} for r in roots}
    layout: dict[str, list[tuple[str, int, tuple[int, ...]]]] = {}
    failures: list[InputFailure] = []
    closures = relocatable_closures(target, model, roots, trace=trace)
    uncounted = {r: list(skipped) for r, (_fns, skipped) in closures.items()}
    for r in roots:
        fns, _skipped = closures[r]
        layout[r] = [(f.name, f.address, f.block_addresses) for f in fns]
        old = load_counts(store, r, m.seed)
        if old is None:
            continue
        # the functions' order follows the model's (its indirect targets, most inputs
        # first) and is no part of the layout: the counts are kept by name
        stored = {(fc.name, tuple(fc.blocks)) for fc in old.functions}
        now = {(n, tuple(b)) for n, _, b in layout[r]}
        if stored != now:
            if stored < now:
                # the expected case: the last count run found callees through indirect
                # calls, and the model now holds them (wcetfit.pipeline)
                log.info("%s: %d more callee(s) to count (found through indirect calls): "
                         "counting every input again", r, len(now - stored))
            else:
                log.warning("stored counts of %s have another block layout (the binary's "
                            "model changed): counting again", r)
            continue
        for k, i in enumerate(old.indices):
            if trace and int(i) not in (old.trace or {}):
                continue        # counted again for its trace
            per_root[r][int(i)] = {fc.name: fc.counts[k] for fc in old.functions}
        if old.trace:
            traces[r].update(old.trace)
        returns[r].update({i: v for i, v in (old.returns or {}).items() if i in per_root[r]})
        for site, targets in (old.indirect or {}).items():
            for t, ins in targets.items():
                indirect[r].setdefault(site, {}).setdefault(t, set()).update(
                    i for i in ins if i in per_root[r])
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
                              dict(traces[r]) if trace or traces[r] else None,  # kept
                              {site: {t: tuple(sorted(ins)) for t, ins in ts.items()}
                               for site, ts in indirect[r].items()} or None,
                              dict(returns[r]) or None)
        return out

    def save() -> None:
        for cs in snapshot().values():
            save_counts(store, cs)

    def store_result(index: int, result: dict[str, Any]) -> None:
        for r, (counts, tr, targets, returned) in result.items():
            per_root[r][index] = counts
            if returned is not None:
                returns[r][index] = returned
            if tr is not None:
                traces[r][index] = tr
            for site, ts in targets.items():
                for t in ts:
                    indirect[r].setdefault(site, {}).setdefault(t, set()).add(index)

    # Counting runs each input twice (the copy, then the original for the differential
    # check): the hang timeout covers both.
    measure_saving(lambda: _CountWorker(target, model, list(roots), trace, uncounted), todo,
                   timeout=3 * target.measure.timeout, per_call=target.measure.timeout,
                   store_result=store_result,
                   failures=failures, save=save, done=lambda: len(per_root[first]),
                   wanted=len(wanted), progress=progress)
    crashed = [f for f in failures if f.kind == "crash"]
    if crashed:
        # the copy and the original run in one process each; a crash of either is the
        # input's; the original alone tells which (saved with the counts)
        failures[:] = copy_crashes(target, model, list(roots), failures)
        said = [f for f in failures if f.kind == COPY_CRASH]
        if said:
            log.warning("%d of the %d crash(es) of the count run are the instrumented "
                        "copy's, not the function's: the original returns on %s", len(said),
                        len(crashed), ", ".join(input_label(f.index) for f in said[:5])
                        + (" …" if len(said) > 5 else ""))
        save()
    result = snapshot()
    for r, cs in result.items():
        if len(cs.indices) == 0 and len(wanted):
            # Saved above (failures included), but a run with no row is no measurement:
            # never report it as "0 inputs counted, checks passed".
            first_ones = "; ".join(f.describe() for f in cs.failures[:3]) or "no result"
            more = f" (and {len(cs.failures) - 3} more)" if len(cs.failures) > 3 else ""
            raise NothingMeasured(f"{r}: no input could be counted: {first_ones}{more}")
    return result
