"""The splitting workflow on a target: load what is stored, fit jointly, plan, measure.

The pure part is :mod:`wcetfit.split.configs` (probes and their rows),
:mod:`wcetfit.split.joint` (the joint system), :mod:`wcetfit.split.planner` (with the exact rank
of :mod:`wcetfit.split.rank`), :mod:`wcetfit.split.rounds` (rounds as data) and
:mod:`wcetfit.split.checks` (comparing fits); this module wires it to the store (counts
with block traces from the count run, whole-call times from the timing run, earlier
rounds), to the static model (where probes can be placed, see
:func:`wcetfit.split.placement.placements`) and to the measuring child process
(:mod:`wcetfit.split.probe_run`).

Which rows a fit uses.  Before any round: the timing run's whole calls.  After round n:
the rows measured in round n — its whole calls and its timings of every active probe
(introduced by a round still stored), all taken input by input in one session.  Rows
from sessions minutes apart are not mixed: on this kind of machine (a VM sharing its
cores) the same call's time moves by tens of percent between sessions, while
back-to-back timings agree to a few percent.

Consistency.  Each round also fits its whole calls alone (the round's ``baseline``).
Probe rows must not move what those rows determine: a probe's region (up to or from a
first arrival) can run differently from the average call, e.g. a loop's first
iteration with cold predictors.  A probe whose rows pull such estimates beyond
their intervals is left out of the fit (and recorded as excluded; it is not measured
again), see :func:`inconsistent_probes`.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.split import checks as CK, configs as CF, joint as JS, planner as PL
from wcetfit.split import rounds as RD
from wcetfit.errors import StoreError, WcetfitError
from wcetfit.model import FunctionModel, hexaddr
from wcetfit.split.placement import ProbeLayout, place_probe, placements

log = logging.getLogger(__name__)


@dataclass
class SplitState:
    """Everything the workflow needs about one measured function."""

    target: Any
    store: Any
    function: str
    root_link: int
    models: Mapping[str, FunctionModel]
    columns: CF.Columns
    traces: Mapping[int, np.ndarray]
    count_indices: np.ndarray         # inputs with counts and a trace
    counts: np.ndarray                # int64 [inputs, n_blocks] (trace-id order)
    timing_indices: np.ndarray        # the timing run's inputs (subset of count_indices)
    timing_ticks: np.ndarray          # float [inputs, repeats]
    method: str
    tsc_hz: float | None
    rounds: list[RD.Round]
    layouts: dict[str, ProbeLayout] = field(default_factory=dict)
    unprobeable: dict[str, str] = field(default_factory=dict)

    @property
    def latest(self) -> RD.Round | None:
        return self.rounds[-1] if self.rounds else None

    @property
    def excluded_keys(self) -> set[str]:
        """Probes a stored round found inconsistent with its whole calls."""
        return {k for r in self.rounds for k in r.excluded}

    @property
    def active_keys(self) -> list[str]:
        """Probes introduced by a round still stored and not excluded by one, in order
        of introduction."""
        out: list[str] = []
        gone = self.excluded_keys
        for r in self.rounds:
            for k in r.introduced:
                if k not in out and k not in gone:
                    out.append(k)
        return out

    @property
    def active_probes(self) -> list[CF.Probe]:
        keys = self.active_keys
        found: dict[str, CF.Probe] = {}
        for r in self.rounds:
            for ct in r.probes:
                if ct.probe.key in keys:
                    found[ct.probe.key] = ct.probe
        return [found[k] for k in keys if k in found]

    def counts_of(self, indices: Sequence[int]) -> np.ndarray:
        pos = {int(i): k for k, i in enumerate(self.count_indices)}
        return self.counts[[pos[int(i)] for i in indices]] if len(indices) else \
            np.zeros((0, self.counts.shape[1]), np.int64)


def _block_order(cs: Any) -> tuple[list[int], np.ndarray]:
    """Compact trace ids → block addresses (the count set's functions, in order), and
    the concatenated counts [inputs, blocks]."""
    blocks: list[int] = []
    parts = []
    for fc in cs.functions:
        blocks.extend(int(a) for a in fc.blocks)
        parts.append(np.asarray(fc.counts, dtype=np.int64))
    return blocks, (np.hstack(parts) if parts else np.zeros((len(cs.indices), 0), np.int64))


MISSING_TRACES = "traces"   # no count set with block traces (`wcetfit analyze` keeps none)
MISSING_TIMES = "times"     # no whole-call times for the target's method and repeats


def stored_generated_inputs(session: Any, function: str) -> int | None:
    """How many generated inputs the stored timing run of ``function`` holds (at the
    target's seed, repeats and timing method), None when there is none."""
    from wcetfit.measurements import load_times
    from wcetfit.search.candidates import SEARCH_BASE
    from wcetfit.timing.run import resolve_method

    m = session.target.measure
    method, _why = resolve_method(session.target)
    ts = load_times(session.store, function, m.seed, method, m.repeats, warmup=m.warmup)
    if ts is None:
        return None
    return int(np.sum(np.asarray(ts.indices) < SEARCH_BASE)) or None


def with_inputs(session: Any, inputs: int) -> Any:
    """The session measuring ``inputs`` generated inputs instead of the target's number."""
    from dataclasses import replace

    target = session.target
    return replace(session, target=replace(target, measure=replace(target.measure,
                                                                   inputs=inputs)))


def missing_measurements(session: Any, function: str) -> list[str]:
    """What :func:`load_state` needs of ``function`` and the store lacks, in the order
    :func:`gather_measurements` measures it: :data:`MISSING_TRACES`, :data:`MISSING_TIMES`."""
    from wcetfit.measurements import load_counts, load_times
    from wcetfit.timing.run import resolve_method

    target, store = session.target, session.store
    m = target.measure
    missing = []
    cs = load_counts(store, function, m.seed)
    if cs is None or not cs.trace:
        missing.append(MISSING_TRACES)
    method, _why = resolve_method(target)
    if load_times(store, function, m.seed, method, m.repeats, warmup=m.warmup) is None:
        missing.append(MISSING_TIMES)
    return missing


def gather_measurements(session: Any, function: str, missing: Sequence[str], *,
                        progress: Callable[[str, int, int], None] | None = None
                        ) -> dict[str, Any]:
    """Measure what :func:`missing_measurements` named, for every input of the target, and
    save it to the store as it comes (an interruption keeps what was measured): the count
    run with block traces (inputs counted without a trace are counted again: the counts
    are the same, the trace is new) and the timing run.  ``progress(stage, done, total)``
    with stage ``"count"`` or ``"time"``.  Returns ``{"count": CountSet, "time": TimeSet}``
    for the runs made."""
    done: dict[str, Any] = {}

    def stage(name: str) -> Callable[[int, int], None] | None:
        return None if progress is None else (lambda d, t: progress(name, d, t))

    if MISSING_TRACES in missing:
        from wcetfit.count.run import run_counts
        done["count"] = run_counts(session.target, session.store, session.model, [function],
                                   trace=True, progress=stage("count"))[function]
    if MISSING_TIMES in missing:
        from wcetfit.timing.run import run_times
        done["time"] = run_times(session.target, session.store,
                                 {function: session.roots[function]},
                                 progress=stage("time"))[function]
    return done


def load_state(session: Any, function: str, *, place: bool = True) -> SplitState:
    """Counts with traces, whole-call times, rounds and probe placements of ``function``."""
    from wcetfit.measurements import load_counts, load_times
    from wcetfit.timing.run import resolve_method

    target, store = session.target, session.store
    m = target.measure
    cs = load_counts(store, function, m.seed)
    if cs is None:
        raise StoreError(f"no counts of {function} (seed {m.seed}) in {store.directory}: run "
                         f"`wcetfit count {target.directory} --trace` first")
    if not cs.trace:
        raise StoreError(f"the counts of {function} have no block traces: block splitting "
                         f"needs them; run `wcetfit count {target.directory} --trace`")
    method, _why = resolve_method(target)
    ts = load_times(store, function, m.seed, method, m.repeats, warmup=m.warmup)
    if ts is None:
        raise StoreError(f"no whole-call times of {function} (seed {m.seed}, method {method}, "
                         f"{m.repeats} repeats) in {store.directory}: run "
                         f"`wcetfit time {target.directory}` first")
    blocks, counts = _block_order(cs)
    # the inputs asked for (--inputs N: generated inputs 0 … N−1): the store may hold the
    # traces of more, and the planner's memory grows with every one it reads (libexpat's
    # XML_Parse: refused at 500 inputs, told --inputs 164, and read all 500 again)
    from wcetfit.numbering import SEARCH_BASE
    traces = {int(i): np.asarray(t, dtype=np.int64) for i, t in cs.trace.items()
              if int(i) < m.inputs or int(i) >= SEARCH_BASE}
    row_of = {int(i): k for k, i in enumerate(cs.indices)}
    n = len(blocks)
    for i, tr in traces.items():
        if i in row_of and not np.array_equal(np.bincount(tr, minlength=n)[:n],
                                              counts[row_of[i]]):
            raise StoreError(f"the block trace of input {i} does not match its counts: the "
                             "stored trace ids are not in the count set's block order")
    with_trace = [int(i) for i in cs.indices if int(i) in traces]
    cidx = np.asarray(with_trace, dtype=np.int64)
    ccounts = counts[[row_of[i] for i in with_trace]] if with_trace else \
        np.zeros((0, n), np.int64)
    common = [int(i) for i in ts.indices if int(i) in traces]
    t_row = {int(i): k for k, i in enumerate(ts.indices)}
    tticks = ts.ticks[[t_row[i] for i in common]] if common else np.zeros((0, m.repeats))
    models = session.functions_of(function)
    by_addr = {b.address: b for f in models.values() for b in f.blocks}
    ends = tuple(by_addr[a].end if a in by_addr else a + 1 for a in blocks)
    rounds = RD.load_rounds(store, function, m.seed)
    splits = sorted({s for r in rounds for s in r.splits})
    columns = CF.Columns(tuple(blocks), tuple(splits), ends)
    st = SplitState(target, store, function, session.roots[function], models, columns,
                    traces, cidx, ccounts, np.asarray(common, dtype=np.int64), tticks, method,
                    ts.tsc_hz, rounds)
    if place:
        place_all(st)
    return st


def place_all(st: SplitState) -> None:
    from wcetfit.loader import read_elf

    elf = read_elf(st.target.binary)
    root_name = next((f.name for f in st.models.values() if f.address == st.root_link),
                     st.function)
    ok, bad = placements(st.models, root_name, st.columns.blocks, st.columns.splits, elf.read)
    st.layouts, st.unprobeable = ok, bad


def joint(st: SplitState, *, probes: bool = True,
          leave_out: Sequence[str] = ()) -> JS.JointSystem:
    """The rows of the current fit: the latest round's session, or the timing run.

    ``probes`` False: the whole calls alone; ``leave_out``: probe keys not to use."""
    rnd = st.latest
    if rnd is None or rnd.whole is None:
        return JS.build_joint(st.columns, st.timing_indices, st.counts_of(st.timing_indices),
                              st.timing_ticks, st.traces, [])
    active = set(st.active_keys) - set(leave_out)
    widx = [int(i) for i in rnd.whole.indices if int(i) in st.traces]
    keep = [k for k, i in enumerate(rnd.whole.indices) if int(i) in st.traces]
    measured = [ct for ct in rnd.probes if ct.probe.key in active] if probes else []
    return JS.build_joint(st.columns, np.asarray(widx, np.int64), st.counts_of(widx),
                          np.asarray(rnd.whole.ticks)[keep], st.traces, measured)


def fit(st: SplitState, *, probes: bool = True, leave_out: Sequence[str] = (),
        options: Any = None) -> tuple[Any, JS.JointSystem, dict[str, Any]]:
    """The joint fit of the current rows (see :func:`joint`)."""
    from wcetfit.fit.result import FitOptions
    from wcetfit.fit.solve import fit_function

    js = joint(st, probes=probes, leave_out=leave_out)
    # Unconstrained: the round's checks compare estimates with the whole calls' and find a
    # biased probe by the impossible costs its rows force, which constraints would hide.
    res = fit_function(js.counts, js.ticks, js.addresses, config_ids=js.config_ids,
                       tsc_hz=st.tsc_hz, options=options or FitOptions(costs="linear"))
    return res, js, CK.fit_summary(res, js)


def _distance(reference: Mapping[str, Any], summary: Mapping[str, Any]) -> float:
    """Sum of squared differences, in combined intervals, over the blocks estimable
    alone in both fits: how far ``summary`` sits from ``reference`` as a whole."""
    ref = {b["address"]: b for b in reference["blocks"]
           if b["estimable"] and b["cost_ticks"] is not None}
    total = 0.0
    for b in summary["blocks"]:
        r = ref.get(b["address"])
        if r is None or not b["estimable"] or b["cost_ticks"] is None:
            continue
        half = math.hypot(r["ci95_ticks"] or 0.0, b["ci95_ticks"] or 0.0)
        total += ((b["cost_ticks"] - r["cost_ticks"]) / max(half, 1e-9)) ** 2
    return total


def inconsistent_probes(st: SplitState, baseline: Mapping[str, Any],
                        summary: Mapping[str, Any], candidates: Sequence[str], *,
                        max_drop: int = 3) -> tuple[list[str], dict[str, Any]]:
    """Probes whose rows pull estimates the same session's whole calls determine beyond
    their intervals, and the fit without them.

    A probe measures only up to (or from) the first arrival at its point: that part of
    the call may run differently from the average the whole calls see (the loop's first
    iteration with cold predictors, a rare branch taken once).  Greedily, the probe
    whose removal leaves the least disagreement (then the fewest physically impossible
    costs, the most blocks estimable alone, the smallest distance) is left out, as long as that removal helps, at
    most ``max_drop`` of them, among ``candidates`` (every probe measured in the round:
    each round measures all of them again, in a session of its own)."""
    from wcetfit.fit.result import FitOptions

    # trials compare estimates only (unconstrained, as in fit)
    trial_options = FitOptions(folds=0, max_iterations=4, costs="linear")
    dropped: list[str] = []
    current = dict(summary)
    dis = CK.disagreements(baseline, current)
    while dis and len(dropped) < max_drop:
        best = None
        for key in candidates:
            if key in dropped:
                continue
            res, _j, trial = fit(st, leave_out=dropped + [key], options=trial_options)
            d = CK.disagreements(baseline, trial)
            # Where several removals restore agreement, the probe to blame is the one whose
            # rows, kept, force a cost no block can have (a whole 95 % interval below zero):
            # a biased region pulls its blocks' costs until one turns physically impossible.
            # Among those, the one whose removal keeps the most blocks estimable alone: it
            # loses the least of what the probes measured.
            impossible = sum(1 for w in getattr(res, "fit_warnings", ())
                             if w.code == "negative_cost")
            kept = sum(1 for b in trial["blocks"] if b["estimable"])
            score = (len(d), impossible, -kept, _distance(baseline, trial))
            if best is None or score < best[0]:
                best = (score, key, trial, d)
        if best is None or (best[0][0], best[0][3]) >= (len(dis), _distance(baseline, current)):
            break
        _score, key, current, dis = best
        dropped.append(key)
        log.info("probe %s left out: its rows disagree with the whole calls", key)
    if dropped:
        _r, _j, current = fit(st, leave_out=dropped)      # with validation, as reported
    return dropped, current


def make_plan(st: SplitState, *, max_probes: int = 8, entry: bool = True,
              kinds: Sequence[str] = CF.KINDS) -> PL.Plan:
    have = set(st.active_keys) | st.excluded_keys
    cands = [lay.probe for key, lay in st.layouts.items()
             if key not in have and lay.probe.kind in kinds
             and (entry or lay.probe.site != CF.SITE_ENTRY)]
    return PL.plan(st.columns, st.counts, st.traces, st.active_probes, cands,
                   unprobeable=st.unprobeable, max_probes=max_probes)


# Candidates whose rows precision_probes holds at once.
PRECISION_CHUNK = 256


def precision_probes(st: SplitState, summary: Mapping[str, Any], *, max_probes: int = 8
                     ) -> list[CF.Probe]:
    """Probes that add no exact rank but shorter rows for the blocks the fit still groups.

    The planner's ranks are exact; the fit declares a direction undetermined when its
    standard error exceeds the signal (noise).  Then more rows help, and the short ones
    help most: stop probes at the grouped blocks not measured yet, shortest regions
    first.  Where the stop probe at a block was left out as inconsistent (or cannot be
    placed), the start probe there instead: it measures the rest of the call rather than
    its first part.  (Start probes everywhere add long rows, which carry the
    data-dependent misfit of whole calls: on statemachine they left more blocks grouped,
    not fewer.)"""
    grouped = {int(a, 16) for g in summary.get("groups", []) if g.get("kind") != "unexecuted"
               for a in g["blocks"] if a.startswith("0x")}
    have = set(st.active_keys) | st.excluded_keys
    stop_ok = {lay.probe.address for key, lay in st.layouts.items()
               if lay.probe.kind == CF.KIND_STOP and key not in st.excluded_keys}

    def wanted(p: CF.Probe) -> bool:
        return p.kind == CF.KIND_STOP or p.address not in stop_ok

    cands = [lay.probe for key, lay in st.layouts.items()
             if key not in have and lay.probe.site == CF.SITE_BLOCK
             and lay.probe.address in grouped and wanted(lay.probe)]
    if not cands:
        return []
    # only each probe's mean region size is kept: a few hundred probes' rows at a time
    sized = []
    for lo in range(0, len(cands), PRECISION_CHUNK):
        chunk = cands[lo:lo + PRECISION_CHUNK]
        rows = CF.probe_rows_many(chunk, st.columns, st.traces)
        sized += [(float(np.mean(r.counts.sum(axis=1) + r.passes)), p.key, p)
                  for p, r in zip(chunk, rows) if r.indices.size]
    sized.sort(key=lambda t: t[:2])
    return [p for _s, _k, p in sized[:max_probes]]


def estimable_blocks(summary: Mapping[str, Any]) -> int:
    return sum(1 for b in summary["blocks"] if b["estimable"] and b["address"].startswith("0x"))


def complete(summary: Mapping[str, Any]) -> bool:
    """Every executed block estimable alone."""
    return all(b["estimable"] for b in summary["blocks"]
               if b["address"].startswith("0x") and (b.get("executions") or 0) > 0)


def next_probes(st: SplitState, summary: Mapping[str, Any], *, max_probes: int = 8,
                entry: bool = True) -> tuple[list[CF.Probe], str]:
    """What the next ``--auto`` round measures, and why (empty: stop, with the reason).

    Probes that add exact rank first; once the rank is complete, short probes for the
    blocks the fit still groups (noise), until two such rounds in a row made no more
    blocks estimable (:func:`stalled_rounds`)."""
    if complete(summary):
        return [], "every executed block is estimable alone"
    plan = make_plan(st, max_probes=max_probes, entry=entry)
    if plan.proposals:
        return [p.probe for p in plan.proposals], "they add rank"
    noise = ("; the groups left are directions these inputs determine too weakly for "
             "their noise (data-dependent costs): more inputs help ([measure] inputs, then "
             "`wcetfit count --trace` and `wcetfit time` again)")
    extra = precision_probes(st, summary, max_probes=max_probes)
    if not extra:
        return [], ("no probe adds rank"
                    + (f" ({len(st.unprobeable)} probe points cannot be patched)"
                       if st.unprobeable else "") + noise)
    if stalled_rounds(st) >= 2:
        return [], ("no probe adds rank, and two rounds of short probes in a row did not help"
                    + noise)
    # (after "rank 12 of 13 unknowns", "exact rank is complete" read as a contradiction:
    # the rank left is what the noise hides, not what the counts lack)
    return extra, ("no probe adds rank the counts lack; shorter rows for the blocks the "
                   "fit still groups, whose timing noise hides what the counts separate")


def stalled_rounds(st: SplitState) -> int:
    """Trailing rounds that made no more blocks estimable than the round before them.

    Whether the fit resolves a weak direction depends on the session's noise (this VM's
    varies from round to round), so one round of short probes that did not help is not
    yet a reason to stop; two in a row are."""
    fits = [r.fit for r in st.rounds if r.fit]
    n = 0
    for a, b in zip(reversed(fits[:-1]), reversed(fits[1:])):
        if estimable_blocks(b) > estimable_blocks(a):
            break
        n += 1
    return n


def split_at(st: SplitState, address: int, kind: str = CF.KIND_STOP) -> ProbeLayout:
    """Cut the block holding ``address`` there (an instruction boundary) and place a
    probe at the cut."""
    from wcetfit.loader import read_elf

    owner = None
    for f in st.models.values():
        for b in f.blocks:
            if b.address < address < b.end:
                owner = f
    if owner is None:
        if address in st.columns.blocks:
            raise WcetfitError(f"{hexaddr(address)} is a block start already: probe it "
                               "without --at")
        raise WcetfitError(f"{hexaddr(address)} is inside no block of {st.function} or its "
                           "callees")
    elf = read_elf(st.target.binary)
    entries = frozenset(f.entry for f in st.models.values())
    lay = place_probe(owner, kind, address, elf.read, entries=entries, edges=False)
    st.columns = st.columns.with_splits([address])
    st.layouts[lay.probe.key] = lay
    return lay


def apply_round(st: SplitState, new: Sequence[CF.Probe], *, splits: Sequence[int] = (),
                previous: Mapping[str, Any] | None = None, check: bool = True,
                progress: Callable[[str, int, int], None] | None = None
                ) -> tuple[RD.Round, dict[str, Any], dict[str, Any]]:
    """Measure the active probes and ``new`` ones with the whole call, input by input;
    save the next round with the joint fit after it.

    Returns (round, fit summary, comparison with ``previous``)."""
    from wcetfit.split.probe_run import measure_round

    if not new:
        raise WcetfitError("no new probe to measure")
    t0 = time.monotonic()
    notes: list[str] = []
    keys = set()
    probes: list[CF.Probe] = []
    for p in list(st.active_probes) + list(new):
        if p.key not in keys:
            keys.add(p.key)
            probes.append(p)
    rows = CF.probe_rows_many(probes, st.columns, st.traces)
    layouts, indices, kept = [], [], []
    for p, pr in zip(probes, rows):
        lay = st.layouts.get(p.key)
        if lay is None:
            raise WcetfitError(f"probe {p.key} cannot be placed: "
                               f"{st.unprobeable.get(p.key, 'unknown point')}")
        if not pr.indices.size:
            notes.append(f"{p.key}: no input reaches the probe point; not measured")
            continue
        layouts.append(lay)
        indices.append([int(i) for i in pr.indices])
        kept.append(p)
    run = measure_round(st.target, st.function, st.root_link, layouts, indices,
                        method=st.method, check=check, whole=st.count_indices,
                        progress=progress)
    measured: list[JS.ConfigTimes] = []
    for pr in run.probes:
        key = pr.times.probe.key
        measured.append(pr.times)
        if pr.migrated:
            notes.append(f"{key}: {pr.migrated} migrated samples discarded")
        expected = pr.times.ticks.size
        if pr.fired + pr.migrated < expected:
            notes.append(f"{key}: {expected - pr.fired - pr.migrated} timed calls without a "
                         "probe reading although the trace says they reach it")
    if run.whole_migrated:
        notes.append(f"whole call: {run.whole_migrated} migrated samples discarded")
    failures = tuple({"index": f.index, "kind": f.kind, "message": f.message,
                      "arguments": f.arguments} for f in run.failures)
    number = RD.next_round_number(st.store)
    introduced = tuple(p.key for p in new if p.key in {q.key for q in kept})
    whole = JS.ConfigTimes(CF.Probe(CF.KIND_STOP, CF.SITE_RETURN, None, CF.MECH_WRAPPER),
                           run.whole_indices, run.whole_ticks)
    rnd = RD.Round(number=number, function=st.function, seed=st.target.measure.seed,
                   method=st.method, probes=tuple(measured), introduced=introduced,
                   whole=whole, splits=tuple(splits), time_s=time.monotonic() - t0,
                   created=_dt.datetime.now().isoformat(timespec="seconds"),
                   tsc_hz=st.tsc_hz, notes=tuple(notes), failures=failures)
    st.rounds.append(rnd)
    _res, _js, baseline = fit(st, probes=False)
    _res, _js, summary = fit(st)
    excluded: list[str] = []
    if CK.disagreements(baseline, summary):
        excluded, summary = inconsistent_probes(st, baseline, summary, st.active_keys)
        for key in excluded:
            notes.append(f"{key}: left out of the fit and not measured again — its rows "
                         "move estimates the same session's whole calls determine beyond "
                         "their intervals (the part of the call it times runs differently "
                         "from the average call)")
    based = tuple(r.number for r in st.rounds if r.introduced)
    rnd = replace(rnd, fit=summary, based_on=based, baseline=baseline,
                  excluded=tuple(excluded), notes=tuple(notes))
    st.rounds[-1] = rnd
    RD.save_round(st.store, rnd)
    return rnd, summary, CK.compare_fits(previous, summary, baseline)


def drop(st: SplitState, number: int) -> bool:
    ok = RD.drop_round(st.store, number)
    st.rounds = [r for r in st.rounds if r.number != number]
    return ok
