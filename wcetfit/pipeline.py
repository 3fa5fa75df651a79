"""The stages of an analysis, composed: what ``wcetfit analyze`` and the per-stage
commands share.

Each stage reads what earlier stages left in the target's store and saves what it
measures, so the commands can run one by one (``count``, ``time``, ``fit``, ``report``)
or all together (``analyze``) and an interrupted run continues where it stopped.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from wcetfit.model import BinaryModel, FunctionModel, ObservedTarget, hexaddr
from wcetfit.store import Store
from wcetfit.target import Target, load_target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Session:
    """A target with its static model and store, ready for measuring."""

    target: Target
    model: BinaryModel
    store: Store
    roots: dict[str, int]          # measured function (as named in the target) -> link address
    # The indirect call targets the model was built with (observed_indirect).
    indirect: dict[int, tuple[ObservedTarget, ...]] = field(default_factory=dict)

    def root_model(self, name: str) -> FunctionModel:
        return self.model.function(self.roots[name])

    def functions_of(self, name: str) -> dict[str, FunctionModel]:
        """The measured function and the binary's own functions it reaches, transitively."""
        root = self.root_model(name)
        out = {root.name: root}
        todo = [root]
        while todo:
            fn = todo.pop()
            for call in fn.calls:
                targets = [call.target] if call.kind == "internal" and call.target is not None \
                    else list(call.observed_internal)      # an indirect call's, observed
                for t in targets:
                    try:
                        callee = self.model.function(t)
                    except KeyError:
                        continue          # an observed target the model could not load
                    if callee.name not in out:
                        out[callee.name] = callee
                        todo.append(callee)
        return out


def open_session(target_dir: str, *, fresh: bool = False, **overrides: Any) -> Session:
    """Load and validate the target, model its functions, open (or start) its store."""
    from wcetfit.static import binary
    from wcetfit.measurements import open_store

    target = load_target(target_dir, **overrides)
    store = open_store(target, fresh=fresh)
    indirect = observed_indirect(store, target)
    model = binary.load_model(target.binary, list(target.functions), with_callees=True,
                              indirect=indirect)
    roots = {name: model.function(name).address for name in target.functions}
    return Session(target, model, store, roots, indirect)


def observed_indirect(store: Store, target: Target) -> dict[int, tuple[ObservedTarget, ...]]:
    """The targets the stored count runs saw each indirect call site take (all measured
    functions together; a target's ``inputs`` is the most inputs of one function's run)."""
    from wcetfit.measurements import load_counts

    seen: dict[int, dict[int | str, int]] = {}
    for name in target.functions:
        cs = load_counts(store, name, target.measure.seed)
        for site, targets in ((cs.indirect or {}) if cs is not None else {}).items():
            for t, ins in targets.items():
                per = seen.setdefault(site, {})
                per[t] = max(per.get(t, 0), len(ins))
    return {site: tuple(ObservedTarget(t if isinstance(t, int) else None,
                                       hexaddr(t) if isinstance(t, int) else t, n)
                        for t, n in sorted(ts.items(), key=lambda kv: (-kv[1], str(kv[0]))))
            for site, ts in sorted(seen.items())}


# Count runs that may follow newly observed indirect targets: a callee found in one run
# can itself call through a pointer into yet other functions.
FOLLOW_ROUNDS = 8
# Inputs counted in the rounds that look for new indirect targets (liblzma's decoders
# call each other through next.code, one more level found per round: 5 rounds).
PROBE_INPUTS = 16


def count_following_indirect(session: Session, roots: list[str], **kwargs: Any) -> Session:
    """The count run; then, while it saw indirect calls go to functions of the binary the
    model did not have as their callees, the model with them and the count run again.

    Indirect targets are known only once the code has run: the first run's copy leaves
    them as original code (uncounted, their time in the calling block) and records
    them; the second run's copy holds them and counts them (the stored counts' block
    layout changed, so every input is counted again).  The targets stay in the store
    with the counts, so a later session builds its model with them from the start."""
    from wcetfit.count.run import run_counts
    from wcetfit.errors import NothingMeasured
    from wcetfit.static import binary

    s = session
    m = s.target.measure
    # Finding the targets needs few inputs: while a run finds new callees (each round
    # counts every input again), the rounds count the first PROBE_INPUTS inputs only;
    # the full run follows, and if it finds more, the rounds go on with every input.
    probe = replace(s.target, measure=replace(m, inputs=PROBE_INPUTS)) \
        if m.inputs > PROBE_INPUTS else None
    for _ in range(FOLLOW_ROUNDS):
        try:
            run_counts(probe or s.target, s.store, s.model, roots, **kwargs)
        except NothingMeasured:
            if probe is None:
                raise
            probe = None               # the first inputs fail: the others may not
            continue
        seen = observed_indirect(s.store, s.target)
        built = {(site, t.address) for site, ts in s.indirect.items() for t in ts}
        new = sorted({(site, t.address) for site, ts in seen.items() for t in ts
                      if t.address is not None} - built)
        if seen != s.indirect:
            model = binary.load_model(s.target.binary, list(s.target.functions),
                                      with_callees=True, indirect=seen)
            s = replace(s, model=model, indirect=seen)
        for site, addr in new:
            log.info("indirect call at %s -> %s: modelled and counted as its callee",
                     hexaddr(site), hexaddr(addr))
        if not new:
            if probe is None:
                return s               # only outside targets or input numbers changed
            probe = None               # the probe found them all: count every input
    log.warning("indirect calls still found new callees after %d count runs: the last "
                "ones found run uncounted (their time in the calling block)", FOLLOW_ROUNDS)
    if probe is not None:
        run_counts(s.target, s.store, s.model, roots, **kwargs)     # every input counted
    return s


Progress = Callable[[str, int, int], None]   # (stage, done, total)


@dataclass(frozen=True)
class Analysis:
    """Everything the report of one measured function is made of."""

    root: str
    functions: dict[str, FunctionModel]
    system: Any          # wcetfit.fit.system.LinearSystem
    fit: Any             # wcetfit.fit.result.FitResult
    wcet: Any            # wcetfit.wcet.result.WcetResult, or the WcetError that prevented it
    report: Any          # wcetfit.report.Report


def fit_stage(session: Session, root: str, counts: Any, times: Any,
              options: Any = None) -> tuple[Any, Any]:
    """(LinearSystem, FitResult) of one measured function."""
    from dataclasses import replace

    from wcetfit.fit.result import FitOptions
    from wcetfit.fit.solve import fit_function
    from wcetfit.fit.robust import detect_quantum
    from wcetfit.timing.speed import flat_profile, speed_profile
    from wcetfit.fit.system import build_system, refuse_shared_blocks

    options = replace(options or FitOptions(), costs=session.target.fit_costs)
    if options.overhead_floor_ticks == 0.0 and getattr(times, "method", None):
        # the calibrated empty timed region: the overhead's physical floor, for the fit's
        # plausibility warnings (wcetfit.fit.checks); it changes no estimate
        from wcetfit.timing.calibrate import empty_region_floor
        floor = empty_region_floor(times.method)
        if floor is not None and floor > 0:
            options = replace(options, overhead_floor_ticks=float(floor))
    functions = session.functions_of(root)
    refuse_shared_blocks(root, functions)
    system = build_system(functions, counts, times)
    if session.target.follow_speed:
        if options.quantum_ticks is None:       # detected once, for the profile and the fit
            options = replace(options, quantum_ticks=detect_quantum(system.ticks))
        speed = speed_profile(system.ticks, options.quantum_ticks)
    else:
        speed = flat_profile(system.ticks, "not followed: [fit] follow_speed = false")
    system = replace(system, speed=speed)
    fit = fit_function(system.counts, system.ticks, system.addresses,
                       structural_basis=system.structural_basis, tsc_hz=system.tsc_hz,
                       speed=speed, options=options)
    rows, calibration = activation_data(session, root)
    if rows:
        # per-function fits from the functions' own activations cost the blocks they
        # cover; the whole calls check their sum (wcetfit.fit.activation_root)
        from wcetfit.fit.activation_root import apply_activation_fits, fit_root_activations
        analysis = fit_root_activations(system, fit, rows, quantum=fit.quantum_ticks,
                                        folds=options.folds, seed=options.seed,
                                        calibration=calibration)
        fit = apply_activation_fits(fit, analysis)
    return system, fit


def activation_rows(session: Session, root: str) -> dict[str, Any] | None:
    """The per-activation rows (wcetfit.measurements.ActivationRows per timed function) the
    store holds for ``root``, or None: then the fit is the whole-call one alone."""
    return activation_data(session, root)[0]


def activation_data(session: Session, root: str) -> tuple[dict[str, Any] | None, Any]:
    """(rows as :func:`activation_rows`, the probes' ε/δ calibration stored with them)."""
    from wcetfit.timing.activations import load_activations
    from wcetfit.timing.run import resolve_method

    # the same seed, method and repeats as the whole-call times they are checked against
    method, _ = resolve_method(session.target)
    m = session.target.measure
    s = load_activations(session.store, root, m.seed, method, m.repeats)
    return (None, None) if s is None else (s.rows(), s.calibration)


def wants_activations(session: Session, root: str) -> str | None:
    """Why ``analyze`` takes per-activation rows of ``root`` ([timing] activations), or None
    when it does not: "auto" takes them when the root reaches own functions that can be
    timed (a root alone has nothing the whole calls do not already give), "on" always."""
    mode = session.target.activations
    if mode == "off":
        return None
    if mode == "on":
        return "[timing] activations = true"
    if len(session.functions_of(root)) < 2:
        return None
    from wcetfit.errors import WcetfitError
    from wcetfit.split.activation_run import closure_of

    try:
        cl = closure_of(session.target, session.model, root)
    except WcetfitError as exc:
        log.warning("%s: per-activation probes cannot be placed (%s): whole calls only",
                    root, exc)
        return None
    fname = session.root_model(root).name
    others = [n for n in cl.regions if n != fname]
    if not others:
        log.info("%s: no callee can be timed per activation (%s): whole calls only", root,
                 "; ".join(f"{n}: {why}" for n, why in cl.untimed.items()) or "none")
        return None
    return f"{len(others)} own callee(s) can be timed per activation"


def activation_step(session: Session, root: str, progress: Progress | None = None,
                    *, required: bool = False) -> str | None:
    """Take ``root``'s per-activation rows unless the store holds them for every input the
    count run traced.  The counts must have been taken with a trace (``run_counts(…,
    trace=True)``).  Errors are raised when ``required`` ([timing] activations = true);
    otherwise the reason is returned, for the report (the fit is then the whole-call one),
    and None when the rows are there."""
    from wcetfit.errors import WcetfitError
    from wcetfit.measurements import load_counts
    from wcetfit.split.activation_run import run_activations
    from wcetfit.timing.activations import load_activations
    from wcetfit.timing.run import resolve_method

    m = session.target.measure
    try:
        method, _ = resolve_method(session.target)
        counts = load_counts(session.store, root, m.seed)
        traced = set((counts.trace or {}) if counts is not None else ())
        old = load_activations(session.store, root, m.seed, method, m.repeats)
        if old is not None:
            done = {int(i) for i in old.indices} | {f.index for f in old.failures}
            if traced <= done:
                return None
        from wcetfit.split.install import native_lib
        native_lib()
        run_activations(session.target, session.store, session.model, root,
                        progress=(lambda d, t: progress("activations", d, t))
                        if progress else None)
        return None
    except WcetfitError as exc:
        if required:
            raise
        log.warning("%s: per-activation timing failed, the fit uses whole calls only: %s",
                    root, exc)
        return (f"per-activation timing failed ({exc}); the fit uses whole calls only")


def wcet_stage(session: Session, root: str, system: Any, fit: Any) -> Any:
    """The IPET bound, or the WcetError that prevented it (shown in the report).

    A function the model reaches but the counts do not hold (it ran uncounted) has no
    costs: the bound is refused, unless every block calling it no input ran and
    ``[wcet] unreached`` is "observed": the bound then leaves it out with those blocks,
    and says so among the root's warnings."""
    from wcetfit.errors import WcetError
    from wcetfit.wcet.analyze import analyze_wcet, fit_inputs

    from dataclasses import replace

    from wcetfit.blasthreads import limited

    functions = session.functions_of(root)
    counted = {c[0] for c in system.columns}
    absent = [n for n in functions if n not in counted]
    left_out: tuple[str, ...] = ()
    if absent:
        sites = _absent_call_sites(functions, absent, system)
        ran = [n for n in absent if sites[n][0]]
        if ran or session.target.unreached != "observed":
            # the IPET would stop at the first such function with "no cost for N blocks"
            exc = WcetError(_absent_reason(session, root, absent, sites,
                                           session.target.unreached))
            log.warning("%s: no WCET bound: %s", root, exc)
            return exc
        # every call of them is in a block no input ran, which the "observed" policy
        # forces to 0 in the IPET: without those calls the bound is the same program's
        left_out = (_left_out_note(session, root, absent, sites),)
        functions = _without_calls_to(functions, absent)
    fi = fit_inputs(fit, functions)
    try:
        # one BLAS thread, as in the fit: the observed span's SVD (wcetfit.wcet.analyze) then
        # comes out the same to the last bit whatever the machine's thread settings
        with limited(1):
                result = analyze_wcet(functions, session.root_model(root).name, fi.costs,
                                  system.counts, system.columns,
                                  loop_facts=session.target.loops,
                                  recursion=session.target.recursion, entry_cost=fi.entry_cost,
                                  cov=fi.cov, cov_index=fi.cov_index, z=fi.z,
                                  observed_paths=session.target.observed_paths,
                                  flow_facts=session.target.flow,
                                  unreached=session.target.unreached)
    except WcetError as exc:
        log.warning("%s: no WCET bound: %s", root, exc)
        return exc
    if left_out:
        # after the note on the blocks no input ran (the first warning), which it extends
        first = tuple(result.warnings[:1]) if result.unreached else ()
        result = replace(result, warnings=first + left_out
                         + tuple(result.warnings[len(first):]))
    p = session.target.exceedance
    d = call_dispersion(system, fit, exceedance=p, point=result.bound_ticks)
    return replace(result, dispersion=d.excess, dispersion_factors=d.to_dict(), exceedance=p)


def _absent_call_sites(functions: dict[str, FunctionModel], absent: list[str],
                       system: Any) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """Per function without counts: the blocks calling it that an input ran, those no
    input ran (as "fn+0xOFF", in the counted functions), and the uncounted functions
    calling it.  A block counts as unexecuted only if its count is 0 on every row and
    every block of its function has a column (so the IPET, under the "observed" policy,
    forces it to 0); a block without a column counts as executed."""
    import numpy as np

    from wcetfit.model import CALL_INDIRECT, CALL_INTERNAL
    from wcetfit.wcet.result import loop_key

    entry = {}
    for n in absent:
        entry[functions[n].address] = n
        entry.setdefault(functions[n].entry, n)
    col = {c: j for j, c in enumerate(system.columns)}
    C = np.asarray(system.counts)
    out: dict[str, tuple[list[str], list[str], list[str]]] = {n: ([], [], []) for n in absent}
    for name, fn in functions.items():
        whole = all((name, a) in col for a in fn.block_addresses)
        for cs in fn.calls:
            if cs.kind == CALL_INTERNAL:
                targets = [cs.target] if cs.target is not None else []
            elif cs.kind == CALL_INDIRECT:
                targets = list(cs.observed_internal)
            else:
                continue
            for callee in dict.fromkeys(entry[t] for t in targets if t in entry):
                ran, unran, via = out[callee]
                if name in absent:
                    if name not in via:
                        via.append(name)
                    continue
                j = col.get((name, cs.block))
                where = loop_key(fn, cs.block)
                executed = not whole or j is None or bool(C.size and C[:, j].any())
                lst = ran if executed else unran
                if where not in lst:
                    lst.append(where)
    return out


def _without_calls_to(functions: dict[str, FunctionModel],
                      absent: list[str]) -> dict[str, FunctionModel]:
    """The counted functions, their calls of the ``absent`` ones taken out (all made from
    blocks no input ran: the IPET forces those blocks to 0 under the "observed" policy,
    so the calls change nothing in the bound, but the IPET needs a callee for each)."""
    gone = {functions[n].address for n in absent} | {functions[n].entry for n in absent}

    def keeps(cs: Any) -> bool:
        targets = [cs.target] if cs.kind == "internal" else list(cs.observed_internal)
        return not any(t in gone for t in targets if t is not None)

    out = {}
    for name, fn in functions.items():
        if name in absent:
            continue
        calls = tuple(cs for cs in fn.calls if keeps(cs))
        out[name] = fn if len(calls) == len(fn.calls) else replace(fn, calls=calls)
    return out


def _uncounted_why(session: Session, root: str, absent: list[str]) -> dict[str, str | None]:
    """Why each function the model reaches has no counts: the reason the instrumented copy
    cannot hold it (it runs as original code; counting again changes nothing), or None:
    an indirect target observed after the counts were taken (counting again helps)."""
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import read_elf

    try:
        _, skipped = relocatable_closure(session.model.functions,
                                         [session.root_model(root).name],
                                         read_elf(session.target.binary).read)
    except Exception as exc:  # noqa: BLE001 -- only the wording depends on it
        log.info("%s: why its callees run uncounted not found: %s", root, exc)
        skipped = {}
    return {n: skipped.get(n) for n in absent}


def _names(names: list[str]) -> str:
    return ", ".join(names)


def _listed(items: list[str], most: int = 4) -> str:
    return ", ".join(items[:most]) + (", …" if len(items) > most else "")


def _callers(root: str, site: tuple[list[str], list[str], list[str]]) -> str:
    """Where a function without counts is called from, for the messages."""
    ran, unran, via = site
    if ran:
        text = f"called by {root} (in blocks the inputs ran: {_listed(ran)})"
        if unran:
            text += f" and from blocks no input ran ({_listed(unran)})"
    elif unran:
        text = f"called only from blocks no input ran ({_listed(unran)})"
    else:
        text = ""
    if via:
        runs = "runs" if len(via) == 1 else "run"
        text += (f", and by {_names(via)}, which {runs} uncounted too" if text else
                 f"called only by {_names(via)}, which {runs} uncounted too")
    return text or f"reached by {root} in the model"


def _left_out_note(session: Session, root: str, absent: list[str],
                   sites: dict[str, tuple[list[str], list[str], list[str]]]) -> str:
    """The root's warning on functions left out of the bound with the unexecuted blocks
    that call them."""
    why = _uncounted_why(session, root, absent)
    parts = []
    for n in absent:
        reason = (f"the copy cannot hold it: {why[n]}" if why[n] else
                  "an indirect target observed after the counts were taken")
        like = "those blocks" if sites[n][1] else "its callers"
        parts.append(f"{n}: {_callers(root, sites[n])}; it runs uncounted ({reason}), and "
                     f"like {like} it is left out of the bound")
    return "; ".join(parts)


def _absent_reason(session: Session, root: str, absent: list[str],
                   sites: dict[str, tuple[list[str], list[str], list[str]]] | None = None,
                   policy: str = "observed") -> str:
    """Why functions the model reaches have no counts, and so no bound: the instrumented
    copy cannot hold them (they run as original code; counting again changes nothing), or
    they are indirect targets observed after the counts were taken (counting again
    helps).  ``sites``: :func:`_absent_call_sites`; ``policy``: ``[wcet] unreached``."""
    why = _uncounted_why(session, root, absent)
    sites = sites or {n: ([], [], []) for n in absent}
    uncopied = [n for n in absent if why[n]]
    later = [n for n in absent if not why[n]]
    parts = []
    for n in uncopied:
        site = sites[n]
        text = f"{n}: {_callers(root, site)}, but the instrumented copy cannot hold it " \
               f"({why[n]}), so it runs as original code, uncounted: its blocks have no cost"
        if site[0]:
            text += ", and its time in the calling block is a mean over the inputs, not a " \
                    "worst case"
        elif policy != "observed":
            text += (f", and [wcet] unreached = \"{policy}\" bounds the blocks no input ran "
                     "(with \"observed\", the default, they and it would be left out of "
                     "the bound)")
        parts.append(text)
    for n in later:
        parts.append(
            f"{n}: {_callers(root, sites[n])}, but not in its stored counts: a target of "
            "indirect calls observed after these counts were taken (count again: "
            "`wcetfit count` and `wcetfit analyze` count it as a callee)")
    return "; ".join(parts)


@dataclass(frozen=True)
class Dispersion:
    """How much one undisturbed call may exceed its predicted time, as factors that
    multiply: ``excess`` = misfit × call × machine_speed − 1 (≥ 0)."""

    misfit: float = 1.0          # worst input mean over its prediction seen (≥ 1)
    call: float = 1.0            # one call over its input's mean, at the exceedance
    machine_speed: float = 1.0   # slowest sustained speed of the run over its fast end
    # one call as timed over its input's prediction, at the exceedance: the three together
    # as they came together (wcetfit.wcet.margin.joint_excess); taken when below their product
    joint: float = math.inf

    @property
    def excess(self) -> float:
        return max(0.0, min(self.misfit * self.call * self.machine_speed, self.joint) - 1.0)

    def to_dict(self) -> dict[str, float]:
        d = {"misfit": self.misfit, "call": self.call, "machine_speed": self.machine_speed}
        if math.isfinite(self.joint):
            d["joint"] = self.joint
        return d


def call_dispersion(system: Any, fit: Any, long_share: float = 0.25,
                    min_quanta: float = 40.0, exceedance: float | None = None,
                    point: float | None = None) -> Dispersion:
    """Relative excess of one undisturbed timed call over its predicted time, in three
    factors (:class:`Dispersion`): the worst misfit of an input's mean seen; the
    call-to-call excess over an input's mean that single calls pass with probability at
    most ``exceedance`` (default :data:`EXCEEDANCE_PER_CALL`; :func:`gumbel_quantile`,
    and at least the largest seen); and the slowest sustained speed of the machine seen
    in the timing run (wcetfit.timing.speed; 1 when the speed was not followed).

    The fit predicts the mean time of a call with given counts at the run's fast end; a
    single call of the same input runs longer or shorter (branch predictor and cache
    state) and the whole machine slows for seconds at a time (a co-runner on the same
    core).  A WCET bound must cover single calls, so the IPET bound is scaled by the
    worst of each seen in the measurements.  Calls the repeat statistic treats as
    interrupted (the same rule as the fit's: far from the input's median) are left out;
    so are short calls (below ``long_share`` of the longest prediction, and below
    ``min_quanta`` TSC steps) where one quantum alone is a large fraction and which say
    little about the long paths a bound is made of.

    Inputs the fit rejected as outliers stay in.  The fit leaves them out so that they
    do not pull the costs; but they were measured, and a bound below a measured input is
    wrong whatever the reason the model missed it (a data-dependent cost, a disturbed
    timing pass).  Their misfit is part of what single calls may show.

    ``point``: the IPET point the factors multiply (default: the longest prediction).  An
    input predicted at least ``long_share`` of it is a long path, and its excess over its
    prediction is taken relative to that prediction: a model that misses a share of a
    long path's time misses that share of the worst path's.  An input predicted shorter
    shows that the model misses a cost of so many ticks, not which share of a long path
    that is: its excess counts in ticks, relative to the point (liblzma's encoder: an
    input predicted 4 M ticks and measured 110 M, taken as a share, multiplied the whole
    bound by 27, 82× the slowest input).  Either way the bound stays above every
    measured input: point × (1 + excess / point) ≥ prediction + excess.
    """
    import numpy as np

    from wcetfit.fit.robust import summarize_repeats

    speed = getattr(system, "speed", None)
    machine = float(speed.max_factor) if speed is not None and speed.followed else 1.0
    ticks = getattr(system, "ticks_at_reference", system.ticks)
    summary = summarize_repeats(ticks, quantum=fit.quantum_ticks)
    predicted = np.asarray(fit.predict(system.counts, unknown="zero"), dtype=float)
    floor = max(min_quanta * (fit.quantum_ticks or 1.0),
                long_share * float(np.nanmax(predicted, initial=0.0)))
    # A call predicted short but measured long is a misfit the bound must cover, not a
    # short call: the floor applies to what was predicted and what was measured alike.
    measured = np.nan_to_num(np.asarray(summary.value, dtype=float), nan=0.0)
    rows = np.isfinite(predicted) & (predicted > 0) & ((predicted >= floor) | (measured >= floor))
    if rows.sum() < 10:
        # a short function: every call is "short", so take them all but the ones within
        # two TSC steps of nothing (their relative excess is pure quantization)
        rows = np.isfinite(predicted) & (predicted >= 2 * (fit.quantum_ticks or 1))
    if not rows.any():
        return Dispersion(machine_speed=machine)
    # Two different things make a call exceed its prediction, and they extrapolate
    # differently: the model's misfit for an input (its mean over the prediction:
    # data-dependent costs; a property of the input, bounded by the worst seen, like an
    # observed loop bound), and the call's own noise around its input's mean (random from
    # call to call: extrapolated to the 1e-6 quantile by extreme-value theory).
    means = summary.value[rows]
    # what an excess over the prediction is relative to: the prediction of a long path,
    # the point for a short one (docstring)
    reference = max(float(point or 0.0), float(np.nanmax(predicted, initial=0.0)))
    per = np.where(predicted[rows] >= long_share * reference, predicted[rows], reference)
    misfit = 1.0 + (means - predicted[rows]) / per
    keep = _not_interrupted(summary, ticks, getattr(system, "tsc_hz", None))[rows]
    calls = np.where(keep, ticks[rows], np.nan)
    noise = (calls / means[:, None]).ravel()
    noise = noise[np.isfinite(noise)]
    misfit = misfit[np.isfinite(misfit)]
    if noise.size == 0 or misfit.size == 0:
        return Dispersion(machine_speed=machine)
    p = EXCEEDANCE_PER_CALL if exceedance is None else exceedance
    per_call = max(float(noise.max()), gumbel_quantile(noise, exceedance=p))
    from wcetfit.wcet.margin import joint_excess
    joint = joint_excess(system.ticks[rows], keep, predicted[rows],
                         exceedance=p, quantile=gumbel_quantile, per=per)
    return Dispersion(misfit=max(1.0, float(misfit.max())), call=max(1.0, per_call),
                      machine_speed=machine, joint=joint)


# The least time an interrupt or a preemption adds to a timed call.  The repeat statistic
# flags calls far from their input's median by a relative rule, and on a short function
# with quiet repeats that flags a call one cache miss slower (expat's XML_Parse: 96
# ticks against 68 and 70, with a TSC step of 2).  No interrupt is that cheap: entering
# and leaving the kernel costs microseconds (the cheapest trap measured on this VM, a
# kernel uprobe, 13 µs), so a call less than this much above its input's median is the
# function's own time, and the bound must cover it.
MIN_INTERRUPT_NS = 500.0


def _not_interrupted(summary: Any, ticks: Any, tsc_hz: float | None) -> Any:
    """The calls that are the function's own time: those the repeat statistic keeps, and
    those it flags whose excess over the input's median is below :data:`MIN_INTERRUPT_NS`
    (all it flags when the TSC rate is unknown)."""
    import numpy as np

    if not tsc_hz:
        return summary.keep
    t = np.asarray(ticks, dtype=float)
    with np.errstate(invalid="ignore"):
        excess = t - np.nanmedian(t, axis=1)[:, None]
        cheap = np.isfinite(t) & (excess < MIN_INTERRUPT_NS * 1e-9 * float(tsc_hz))
    return summary.keep | cheap


# Exceedance probability per call that the dispersion is set for.  The training data
# hold thousands of calls; a user's system makes millions, so the observed maximum
# alone is exceeded by a fresh run of the same size about half the time (measured:
# crc and chain, 3–4% above every training call).  1e-6 per call is the order of
# exceedance probability measurement-based probabilistic timing analysis works with.
# A target sets its own with [wcet] exceedance (wcetfit.target).
EXCEEDANCE_PER_CALL = 1e-6


def gumbel_quantile(values: Any, block: int = 50,
                    exceedance: float = EXCEEDANCE_PER_CALL) -> float:
    """The value single calls exceed with probability ``exceedance``, from a Gumbel law
    fitted to maxima of blocks of ``block`` calls (extreme value theory, as MBPTA does).

    The blocks are taken in a fixed random order, so slow spells of the machine do not
    line up with blocks; the Gumbel law is fitted by moments (mean and standard
    deviation of the block maxima).  Fewer than 10 blocks: the observed maximum."""
    import math

    import numpy as np

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    nblocks = v.size // block
    if nblocks < 10:
        return float(v.max(initial=0.0))
    v = np.random.default_rng(0).permutation(v)[:nblocks * block].reshape(nblocks, block)
    maxima = v.max(axis=1)
    beta = float(maxima.std(ddof=1)) * math.sqrt(6) / math.pi
    mu = float(maxima.mean()) - 0.5772156649 * beta
    p_block = min(0.5, block * exceedance)
    return mu - beta * math.log(-math.log1p(-p_block))


def analyze_stage(session: Session, root: str, counts: Any, times: Any,
                  notes: tuple[Any, ...] = ()) -> Analysis:
    """Fit, WCET and report of one measured function from its stored measurements.
    ``notes``: findings of the measuring steps (e.g. why per-activation timing failed),
    added to the root's warnings."""
    from dataclasses import replace

    from wcetfit.report import build_report

    system, fit = fit_stage(session, root, counts, times)
    wcet = wcet_stage(session, root, system, fit)
    functions = session.functions_of(root)
    from wcetfit.search.store import load_search_rows

    searched = load_search_rows(session.store, root, session.target.measure.seed)
    sequences = dict(zip(searched.indices.tolist(), searched.sequences)) if searched else {}

    from wcetfit.search.witness import REACH_BASE, describe_reached, load_reach_rows
    reached = load_reach_rows(session.store, root, session.target.measure.seed)

    def describe(number: int) -> str | None:
        from wcetfit.search.candidates import describe_input
        if number >= REACH_BASE:
            return describe_reached(session.target, reached, number) if reached else None
        return describe_input(session.target, root, number, sequences)

    report = build_report(functions, session.root_model(root).name, fit, system.counts,
                          system.columns, system.ticks, wcet, system.tsc_hz,
                          speed=system.speed, input_numbers=system.indices,
                          describe_input=describe)
    report = _with_load_warning(report, times)
    report = _with_failures(report, counts, times)
    report = _with_reach_verdicts(report, reached)
    if notes:
        from wcetfit.report import Finding
        report = replace(report, warnings=tuple(report.warnings)
                         + tuple(Finding.of(n) for n in notes))
    return Analysis(root, functions, system, fit, wcet, report)


def _with_failures(report: Any, counts: Any, times: Any) -> Any:
    """The inputs the measuring runs left out (crashed, hung, failed a check) among the
    root's warnings, first: a report over the inputs that ran says nothing of the others."""
    from dataclasses import replace

    from wcetfit.report.failures import failed_inputs_finding

    finding = failed_inputs_finding(counts, times)
    if finding is None:
        return report
    return replace(report, warnings=(finding,) + tuple(report.warnings))


def _with_load_warning(report: Any, times: Any) -> Any:
    """The timing run's load warning (wcetfit.timing.run.load_warning) among the root's
    warnings: the user reads there that something else ran while the times were taken."""
    from dataclasses import replace

    from wcetfit.report import Finding

    text = ((getattr(times, "environment", None) or {}).get("load") or {}).get("warning")
    if not text:
        return report
    return replace(report, warnings=tuple(report.warnings) + (
        Finding(text, "run `wcetfit time --fresh` when the machine is quiet"),))


def _with_reach_verdicts(report: Any, reached: Any) -> Any:
    """What `wcetfit reach` concluded per unexecuted block and unseparated group, among the
    root's warnings (where the user reads what the bound rests on)."""
    from dataclasses import replace

    from wcetfit.report import Finding
    from wcetfit.search.reaching import verdict_text

    text = verdict_text(reached.verdicts) if reached is not None else None
    if not text:
        return report
    return replace(report, warnings=tuple(report.warnings) + (
        Finding(text, "`wcetfit reach TARGET_DIR` prints each block's verdict"),))


def with_stored_repeats(session: Session) -> Session:
    """The session reading the timing sets ``analyze --repeats R`` stored when wcetfit.toml
    asks for a number of repeats none was timed with, and one other number was (for
    every measured function alike): `report` after `analyze --repeats 3` reports what
    analyze measured, and says so.  Otherwise the session as it is (the error then names
    the option).  For commands whose --repeats was not given."""
    from wcetfit.measurements import load_times, stored_repeats
    from wcetfit.timing.run import resolve_method

    m = session.target.measure
    method, _ = resolve_method(session.target)
    found = set()
    for root in session.target.functions:
        if load_times(session.store, root, m.seed, method, m.repeats) is not None:
            return session
        found.add(tuple(stored_repeats(session.store, root, m.seed, method)))
    if len(found) != 1 or len(next(iter(found))) != 1:
        return session
    repeats = next(iter(found))[0]
    log.warning("wcetfit.toml asks for %d repeats, and none were timed: using the timing "
                "set of %d repeats stored (as `analyze --repeats %d` took them); pass "
                "--repeats to choose", m.repeats, repeats, repeats)
    return replace(session, target=replace(session.target,
                                           measure=replace(m, repeats=repeats)))


def stored_measurements(session: Session, root: str, *,
                        require_times: bool = True) -> tuple[Any, Any]:
    """The counts and times of ``root`` in the store (searched and reached inputs
    included), or a clear error saying what to run; without ``require_times``, times not
    stored yet are None and the counts are the generated inputs' alone."""
    from wcetfit.errors import FitError
    from wcetfit.measurements import load_counts, load_times
    from wcetfit.timing.run import resolve_method

    m = session.target.measure
    counts = load_counts(session.store, root, m.seed)
    if counts is None:
        raise FitError(f"{root}: no counts stored for seed {m.seed}: run `wcetfit count "
                       f"{session.target.directory}` (or `wcetfit analyze`) first")
    method, _ = resolve_method(session.target)
    times = load_times(session.store, root, m.seed, method, m.repeats)
    if times is None and not require_times:
        return counts, None
    if times is None:
        from wcetfit.measurements import stored_repeats
        other = stored_repeats(session.store, root, m.seed, method)
        hint = (f" (stored: {', '.join(str(r) for r in other)} repeats, e.g. from `analyze "
                f"--repeats {other[-1]}`: pass --repeats {other[-1]})" if other else "")
        raise FitError(f"{root}: no times stored for seed {m.seed}, method {method}, "
                       f"{m.repeats} repeats{hint}: run `wcetfit time "
                       f"{session.target.directory}` (or `wcetfit analyze`) first")
    # Inputs the worst-case search found and timed (wcetfit.search) are rows like the others,
    # and so are those symbolic execution reached (wcetfit reach).
    from wcetfit.search.store import load_search_rows, with_search_rows
    from wcetfit.search.witness import load_reach_rows, with_reach_rows
    counts, times = with_search_rows(counts, times, load_search_rows(session.store, root, m.seed))
    return with_reach_rows(counts, times, load_reach_rows(session.store, root, m.seed))
