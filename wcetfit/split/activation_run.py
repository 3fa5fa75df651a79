"""The per-activation timing run: every input's call, probed at every timed function's
entry and return (:mod:`wcetfit.split.actprobe`), in an isolated child; the events
turned into activation rows (:mod:`wcetfit.timing.activations`) and stored.

Per input, in one child (pinned, the binary loaded, the probes' stubs written once):

1. the arguments from ``generate`` (the same bytes as every other command) and the
   restore table, before any call touches them;
2. the differential check: the original unprobed and the probed call, from the same
   argument bytes and writable data, return the same value and leave the same memory;
3. ``warmup`` + ``repeats`` probed calls in the C loop of ``wf_probe.c``;
4. ``repeats`` unprobed calls exactly as the timing run makes them (the probes' cost is
   the difference, reported per activation).

The parent matches each call's events with the count run's trace of the same input
(:func:`wcetfit.timing.activations.trace_activations`): an input whose activations
disagree is refused with the reason, never attributed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from wcetfit.errors import MeasurementError, NothingMeasured
from wcetfit.isolate import InputFailure
from wcetfit.measurements import Progress, load_counts, measure_saving, prototype_name
from wcetfit.store import Store
from wcetfit.target import Target, describe_args, generate_input, load_inputs_module
from wcetfit.timing.activations import (ActivationMismatch, ActivationSet, TraceTree,
                                        event_activations, save_activations, split_calls,
                                        trace_activations)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Closure:
    """What the parent and the child both derive from the model: the count run's closure
    (its compact ids, its transfers) and which of its functions are timed."""

    names: tuple[str, ...]
    models: dict[str, Any]
    id_names: tuple[tuple[str, int], ...]
    transfers: dict[tuple[str, int], tuple[str, str]]
    regions: dict[str, Any]           # timed function -> displaced region at its entry
    untimed: dict[str, str]           # function -> why it is not timed


def closure_of(target: Target, model: Any, root: str) -> Closure:
    from wcetfit.count.relocate import plan_copy
    from wcetfit.count.run import relocatable_closures
    from wcetfit.loader import read_elf
    from wcetfit.split.actprobe import probe_regions

    fns, _skipped = relocatable_closures(target, model, [root], trace=True)[root]
    read = read_elf(target.binary).read
    plan = plan_copy(fns, read, trace=True)
    others = {callee: fn for (fn, _b), (kind, callee) in plan.transfers.items()
              if kind not in ("call", "tail")}
    regions, untimed = probe_regions(fns, read, others)
    return Closure(tuple(plan.functions), {f.name: f for f in fns}, tuple(plan.id_names()),
                   dict(plan.transfers), regions, untimed)


class _ActivationWorker:
    """Child side: probes written once, installed around each input's probed calls."""

    def __init__(self, target: Target, model: Any, root: str, method: str, repeats: int,
                 warmup: int, expected: dict[int, int], check: bool) -> None:
        from wcetfit.loader import WritableData, load_binary
        from wcetfit.split.actprobe import ActivationProbes
        from wcetfit.timing import tsc
        from wcetfit.timing.thunk import build_harness

        self.target = target
        self.root = root
        self.method = method
        self.repeats = repeats
        self.warmup = warmup
        self.expected = expected
        self.check = check
        self.harness = build_harness(target.prototype, target.cdef)
        self.proto = prototype_name(self.harness, root)
        self.generate = load_inputs_module(target)
        cl = closure_of(target, model, root)
        self.binary = load_binary(target.binary)
        self.original = self.binary.runtime(model.function(root).entry)
        self.data = WritableData(self.binary)
        ids = {name: k for k, name in enumerate(cl.names)}
        self.probes = ActivationProbes(self.binary, cl.regions, ids, method)
        # Installed here and again at the end of every input: writing the patches splits
        # the binary's executable mapping, and the isolation layer compares the mappings
        # before and after each input (a target that rewrites its code is refused).
        self.probes.install()
        self._pin = tsc.pinned()
        self._pin.__enter__()
        # ε and δ of these stubs, in this process, on this CPU (wcetfit.split.actcalib);
        # sent with the first input's result
        from wcetfit.split.actcalib import calibrate
        try:
            self.calibration: dict[str, Any] | None = calibrate(method, self.binary.span())
        except MeasurementError as exc:
            log.warning("activation probe calibration failed: %s", exc)
            self.calibration = {"error": str(exc)}

    def run(self, index: int, start: Callable[[str], None]) -> dict[str, Any]:
        from wcetfit.split.actprobe import differential_check
        from wcetfit.split.install import RestoreTable
        from wcetfit.timing.calls import prime_timing, time_input

        args = generate_input(self.generate, self.target, self.harness.ffi, self.root, index)
        pack = self.harness.pack(self.proto, args)
        table = RestoreTable(self.harness, pack)
        start(describe_args(self.harness.ffi, args))
        acts = self.expected.get(index, 1)
        saved = self.data.save()
        self.probes.install()
        try:
            if self.check:
                differential_check(self.probes, self.harness, self.proto, self.original,
                                   pack, acts, self.data, index)
            ev = self.probes.time(self.harness, self.proto, self.original, pack, table,
                                  self.repeats, self.warmup, acts)
            self.data.restore(saved)
            self.probes.remove()
            if prime_timing(self.harness, self.proto, self.original, pack, self.method):
                self.data.restore(saved)
            plain = time_input(self.harness, self.proto, self.original, pack, self.repeats,
                               self.warmup, self.method)
        finally:
            self.probes.install()
            self.data.restore(saved)
        out = {"events": ev.events, "t_start": ev.t_start, "t_stop": ev.t_stop,
               "migrated": ev.migrated, "dropped": ev.dropped, "plain": plain.ticks}
        if self.calibration is not None:
            out["calibration"], self.calibration = self.calibration, None
        return out


def match_input(tree: TraceTree, result: dict[str, Any], root_fid: int, root_timed: bool,
                repeats: int) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Inclusive ticks [acts, repeats] (NaN where a call was discarded) and the whole
    probed call's ticks per repeat; an ActivationMismatch when the probed original's
    activations differ from the trace's."""
    ev = result["events"]
    if result["dropped"]:
        raise ActivationMismatch(f"the probes met more activations than the count run's "
                                 f"trace shows ({result['dropped']} beyond the room for "
                                 f"{len(tree.function)} per call)")
    tsc = ev["tsc"]
    incl = np.full((len(tree.function), repeats), np.nan)
    whole = (result["t_stop"].astype(np.int64) - result["t_start"].astype(np.int64)) \
        .astype(np.float64)
    note = None
    for r, (lo, hi) in enumerate(split_calls(tsc, result["t_start"], result["t_stop"])):
        fid, kind, t = ev["fid"][lo:hi], ev["kind"][lo:hi], tsc[lo:hi]
        if not root_timed:       # the loop's own readings stand for the root's probes
            fid = np.concatenate([[root_fid], fid, [root_fid]]).astype(np.uint32)
            kind = np.concatenate([[0], kind, [1]]).astype(np.uint32)
            t = np.concatenate([[result["t_start"][r]], t, [result["t_stop"][r]]])
        got = event_activations(fid, kind, t)
        if isinstance(got, str):
            note = got
            whole[r] = np.nan
            continue
        fids, depth, ticks = got
        if len(fids) != len(tree.function) or np.any(fids != tree.function) \
                or np.any(depth != tree.depth):
            k = next((i for i in range(min(len(fids), len(tree.function)))
                      if fids[i] != tree.function[i] or depth[i] != tree.depth[i]),
                     min(len(fids), len(tree.function)))
            raise ActivationMismatch(
                f"the probed original made {len(fids)} timed activations, the count run's "
                f"trace {len(tree.function)}; they first differ at activation {k}")
        if result["migrated"][r]:
            whole[r] = np.nan
            continue
        incl[:, r] = ticks
    return incl, whole, note


def run_activations(target: Target, store: Store, model: Any, root: str, *,
                    method: str | None = None, repeats: int | None = None,
                    warmup: int | None = None, check: bool = True,
                    progress: Progress | None = None) -> ActivationSet:
    """Time every activation of every input counted with a trace; store and return them."""
    from wcetfit.locks import timing_lock
    from wcetfit.timing import tsc
    from wcetfit.timing.run import resolve_method

    m = target.measure
    method = method or resolve_method(target)[0]
    repeats = m.repeats if repeats is None else repeats
    warmup = m.warmup if warmup is None else warmup
    counts = load_counts(store, root, m.seed)
    if counts is None or not counts.trace:
        raise MeasurementError(f"{root}: per-activation timing needs the count run's block "
                               f"trace: run `wcetfit count --trace {target.directory}` first")
    cl = closure_of(target, model, root)
    if [fc.name for fc in counts.functions] != list(cl.names):
        raise MeasurementError(f"{root}: the stored counts cover {len(counts.functions)} "
                               "functions, not the closure of the current model: count again")
    timed = frozenset(cl.regions) | {cl.names[0]}
    fname = model.function(root).name
    trees: dict[int, TraceTree] = {}
    failures: list[InputFailure] = list()
    for i, tr in sorted(counts.trace.items()):
        try:
            trees[i] = trace_activations(tr, cl.id_names, cl.transfers, cl.models, cl.names,
                                         timed, fname)
        except ActivationMismatch as exc:
            failures.append(InputFailure(i, "activations", str(exc), ""))
    for name, why in cl.untimed.items():
        log.warning("%s: %s is not timed per activation (its blocks stay in its callers' "
                    "rows): %s", root, name, why)
    results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    notes: list[str] = []
    root_fid = cl.names.index(fname)
    root_timed = fname in cl.regions
    calibrations: list[dict[str, Any]] = []

    def store_result(index: int, result: dict[str, Any]) -> None:
        if result.get("calibration"):
            calibrations.append(result["calibration"])
        try:
            incl, whole, note = match_input(trees[index], result, root_fid, root_timed,
                                            repeats)
        except ActivationMismatch as exc:
            failures.append(InputFailure(index, "activations", f"input {index} refused: "
                                         f"{exc}", ""))
            return
        if note:
            notes.append(f"input {index}: {note}")
        results[index] = (incl, whole, result["plain"])

    def snapshot() -> ActivationSet:
        idx = sorted(results)
        rows_in, fn, par, site, incl = [], [], [], [], []
        c_row, c_id, c_val = [], [], []
        base = 0
        for i in idx:
            t = trees[i]
            k = len(t.function)
            rows_in.append(np.full(k, i, np.int64))
            fn.append(t.function)
            par.append(np.where(t.parent >= 0, t.parent + base, -1))
            site.append(t.call_site)
            incl.append(results[i][0])
            c_row.append(t.owner + base)
            c_id.append(t.ids)
            c_val.append(t.counts)
            base += k

        def cat(parts: list, dtype: Any, shape: tuple = (0,)) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(shape, dtype)

        return ActivationSet(
            root, m.seed, method, tsc.tsc_frequency().hz, cl.names,
            tuple(cl.models[n].address for n in cl.names), cl.id_names,
            tuple(n for n in cl.names if n in timed), dict(cl.untimed),
            cat(rows_in, np.int64), cat(fn, np.int32), cat(par, np.int64),
            cat(site, np.uint64), cat(incl, np.float64, (0, repeats)), cat(c_row, np.int64),
            cat(c_id, np.int32), cat(c_val, np.int64), np.array(idx, np.int64),
            np.stack([results[i][1] for i in idx]) if idx else np.zeros((0, repeats)),
            np.stack([results[i][2] for i in idx]) if idx else np.zeros((0, repeats)),
            tuple(failures), {"warmup": warmup, "notes": notes[:20],
                              "env": tsc.environment(method).to_dict()},
            pooled_calibration(calibrations))

    todo = sorted(trees)
    expected = {i: len(t.function) for i, t in trees.items()}
    t0 = time.monotonic()
    with timing_lock(target.directory):
        measure_saving(lambda: _ActivationWorker(target, model, root, method, repeats, warmup,
                                                 expected, check), todo,
                       timeout=m.timeout * 2 * (repeats + warmup + 2), per_call=m.timeout,
                       store_result=store_result, failures=failures,
                       save=lambda: save_activations(store, snapshot()),
                       done=lambda: len(results), wanted=len(todo), progress=progress)
    log.info("%s: %d inputs timed per activation in %.1f s", root, len(results),
             time.monotonic() - t0)
    out = snapshot()
    if not len(out.indices) and todo:
        first = "; ".join(f.describe() for f in failures[:3]) or "no result"
        raise NothingMeasured(f"{root}: no input could be timed per activation: {first}")
    return out


def pooled_calibration(cals: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first successful calibration of the run's children (one per child process; a
    restarted child calibrates again), with how many there were; the spread of the
    others' ε + δ is kept beside it.  None when no child calibrated."""
    good = [c for c in cals if "epsilon" in c]
    if not good:
        return {"error": cals[0]["error"]} if cals else None
    out = dict(good[0])
    out["children_calibrated"] = len(good)
    out["kappa_all_ticks"] = [c["kappa"]["value_ticks"] for c in good]
    return out


def overhead(s: ActivationSet) -> dict[str, float]:
    """The probes' cost: (median probed − median unprobed whole call) per activation, in
    ticks, over the inputs (median of the per-input figures)."""
    n_act = np.bincount(np.searchsorted(s.indices, s.input_index), minlength=len(s.indices))
    probed = np.nanmedian(s.whole_probed, axis=1)
    plain = np.nanmedian(s.whole_plain, axis=1)
    per = (probed - plain) / np.maximum(n_act, 1)
    ok = np.isfinite(per)
    return {"ticks_per_activation": float(np.median(per[ok])) if ok.any() else float("nan"),
            "activations_per_call": float(np.median(n_act)) if len(n_act) else 0.0,
            "probed_median_ticks": float(np.nanmedian(probed)) if len(probed) else float("nan"),
            "plain_median_ticks": float(np.nanmedian(plain)) if len(plain) else float("nan")}


def activation_inputs(s: ActivationSet) -> Sequence[int]:
    return [int(i) for i in s.indices]
