"""The stages of an analysis, composed: what ``wcetfit analyze`` and the per-stage
commands share.

Each stage reads what earlier stages left in the target's store and saves what it
measures, so the commands can run one by one (``count``, ``time``, ``fit``, ``report``)
or all together (``analyze``) and an interrupted run continues where it stopped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from wcetfit.model import BinaryModel, FunctionModel, ObservedTarget, hexaddr
from wcetfit.store import Store
from wcetfit.target import Target, load_target

log = logging.getLogger(__name__)

# wcet_stage's ``searched`` when the caller did not read them: read from the store
_STORED = object()


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
        from wcetfit.model import reached_functions
        return reached_functions(self.model, self.root_model(name))


def open_session(target_dir: str, *, fresh: bool = False, inputs_changed: str = "refuse",
                 **overrides: Any) -> Session:
    """Load and validate the target, model its functions, open (or start) its store.

    ``inputs_changed``: what to do when the store's measurements were taken with another
    version of the inputs module (:class:`wcetfit.store.Store`): "refuse" (a StoreError,
    the store untouched) for every command that measures or fits, "warn" for ``report``
    (the note is then ``session.store.inputs_changed_note``)."""
    from wcetfit.static import binary
    from wcetfit.store import InputsFingerprint, StoreIdentity

    target = load_target(target_dir, **overrides)
    from wcetfit.isolate import forget_said_failures
    forget_said_failures()
    if fresh:
        # --fresh discards the store for good: the functions and generate() must work
        # first, or a typo in inputs.py costs every measurement the user had
        from wcetfit.inputs_check import check_generate
        model = binary.load_model(target.binary, list(target.functions), with_callees=True,
                                  indirect={})
        # every input it will measure, not the first few: generate() raising at input 250
        # stopped the count run after the store was gone
        check_generate(target, target.measure.inputs)
    # Not measurements.open_store: the store must know what generates the inputs, or
    # measurements of an edited generate() are mixed with (or reported as) the old ones.
    store = Store(target.store_dir,
                  StoreIdentity.of(target.binary, target.cdef, target.prototype),
                  fresh=fresh,
                  inputs=InputsFingerprint.of(target.inputs_module, target.directory),
                  inputs_changed=inputs_changed)
    indirect = observed_indirect(store, target)
    if not fresh:       # (after --fresh the store holds no indirect targets yet)
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
    # counted and timed calls that cannot have run the same path (wcetfit.fit.too_fast)
    from wcetfit.fit.too_fast import too_fast_rows, too_fast_warning, without_rows
    too_fast = too_fast_rows(system, functions)
    too_fast_note = too_fast_warning(system, functions, too_fast) if too_fast.any() else None
    if too_fast.all():
        from wcetfit.errors import FitError
        raise FitError(f"{root}: no input's timed calls ran the counted path: "
                       + too_fast_note.split(": ", 1)[1])
    if too_fast.any():
        system = without_rows(system, too_fast)
    if session.target.follow_speed:
        if options.quantum_ticks is None:       # detected once, for the profile and the fit
            options = replace(options, quantum_ticks=detect_quantum(system.ticks))
        from wcetfit.timing.speed import call_positions
        speed = speed_profile(system.ticks, options.quantum_ticks,
                              positions=call_positions(system.indices, system.ticks.shape[1],
                                                       getattr(times, "environment", {})))
    else:
        speed = flat_profile(system.ticks, "not followed: [fit] follow_speed = false")
    system = replace(system, speed=speed)
    from wcetfit.fit.ceilings import block_ceiling_ticks
    fit = fit_function(system.counts, system.ticks, system.addresses,
                       structural_basis=system.structural_basis, tsc_hz=system.tsc_hz,
                       speed=speed, options=options,
                       ceilings=block_ceiling_ticks(functions, system.columns, system.tsc_hz))
    rows, calibration = activation_data(session, root)
    if rows:
        # per-function fits from the functions' own activations cost the blocks they
        # cover; the whole calls check their sum (wcetfit.fit.activation_root)
        from wcetfit.fit.activation_root import apply_activation_fits, fit_root_activations
        analysis = fit_root_activations(system, fit, rows, quantum=fit.quantum_ticks,
                                        folds=options.folds, seed=options.seed,
                                        calibration=calibration, cost_model=options.costs,
                                        bootstrap=options.bootstrap)
        fit = apply_activation_fits(fit, analysis)
    if too_fast_note is not None:
        fit = replace(fit, warnings=(too_fast_note, *fit.warnings))
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


def wcet_stage(session: Session, root: str, system: Any, fit: Any,
               searched: Any = _STORED) -> Any:
    """The IPET bound, or the WcetError that prevented it (shown in the report).
    ``searched``: the store's searched rows of ``root`` (their adopted calls hold the
    bound above them), read from the store unless given (None: there are none).

    A function the model reaches but the counts do not hold (it ran uncounted) has no
    costs: the bound is refused, unless every block calling it no input ran and
    ``[wcet] unreached`` is "observed": the bound then leaves it out with those blocks,
    and says so among the root's warnings."""
    from wcetfit.errors import WcetError
    from wcetfit.uncounted import (absent_call_sites, absent_reason, left_out_note,
                                   without_calls_to)
    from wcetfit.wcet.analyze import analyze_wcet, fit_inputs
    from wcetfit.blasthreads import limited
    from wcetfit.wcet.dispersion import CURVE_EXCEEDANCES, call_dispersion, exceedance_curve

    functions = session.functions_of(root)
    loop_facts, flow_facts = own_facts(session, root)
    counted = {c[0] for c in system.columns}
    absent = [n for n in functions if n not in counted]
    left_out: tuple[str, ...] = ()
    if absent:
        def describe(number: int) -> str | None:
            # a generated input only: a searched one is rebuilt from its stored draws,
            # which the report's own description loads (generate() alone would make
            # another call's arguments)
            from wcetfit.numbering import SEARCH_BASE
            from wcetfit.search.candidates import describe_input
            if number >= SEARCH_BASE:
                return None
            return describe_input(session.target, root, number)

        sites = absent_call_sites(functions, absent, system, describe)
        ran = [n for n in absent if sites[n][0]]
        if ran or session.target.unreached != "observed":
            # the IPET would stop at the first such function with "no cost for N blocks"
            exc = WcetError(absent_reason(session, root, absent, sites,
                                           session.target.unreached))
            log.warning("%s: no WCET bound: %s", root, exc)
            return exc
        # every call of them is in a block no input ran, which the "observed" policy
        # forces to 0 in the IPET: without those calls the bound is the same program's
        left_out = (left_out_note(session, root, absent, sites),)
        functions = without_calls_to(functions, absent)
    fi = fit_inputs(fit, functions)
    given: dict[Any, float] = {}
    unlimited: list[str] = []
    try:
        if session.target.unreached == "require":
            # the blocks no input ran, costed at the most their instructions can take
            from wcetfit.wcet.unreached import ceiling_costs
            fi, given, unlimited = ceiling_costs(fi, functions, system.tsc_hz)
        # one BLAS thread, as in the fit: the observed span's SVD (wcetfit.wcet.analyze) then
        # comes out the same to the last bit whatever the machine's thread settings
        with limited(1):
                result = analyze_wcet(functions, session.root_model(root).name, fi.costs,
                                  system.counts, system.columns,
                                  loop_facts=loop_facts,
                                  recursion=session.target.recursion,
                                  recursion_activations=session.target.recursion_activations,
                                  entry_cost=fi.entry_cost,
                                  cov=fi.cov, cov_index=fi.cov_index, z=fi.z,
                                  observed_paths=session.target.observed_paths,
                                  flow_facts=flow_facts,
                                  unreached=session.target.unreached)
    except WcetError as exc:
        log.warning("%s: no WCET bound: %s", root, exc)
        return exc
    if given:
        from wcetfit.wcet.unreached import ceiling_note
        note = ceiling_note(given, unlimited, result, system.tsc_hz)
        if note:
            result = replace(result, warnings=(note,) + tuple(result.warnings))
    if left_out:
        # after the note on the blocks no input ran (the first warning), which it extends
        first = tuple(result.warnings[:1]) if result.unreached else ()
        result = replace(result, warnings=first + left_out
                         + tuple(result.warnings[len(first):]))
    p = session.target.exceedance
    options = dict(misfit_scope=session.target.misfit,
                   machine_speed=session.target.machine_speed,
                   adopted_calls=_adopted_calls(
                       _search_rows(session, root) if searched is _STORED else searched,
                       system))
    d = call_dispersion(system, fit, exceedance=p, point=result.bound_ticks, **options)
    curve = exceedance_curve(system, fit, point=result.bound_ticks,
                             exceedances=CURVE_EXCEEDANCES + (p,), **options)
    result = replace(result, dispersion=d.excess, dispersion_factors=d.to_dict(),
                     exceedance=p, exceedance_curve=curve, dispersion_calls=d.calls,
                     dispersion_driver=dict(d.driver), slowest_call=dict(d.slowest_call),
                     misfit_scope=d.scope.to_dict() if d.scope else {},
                     call_growth=d.call_growth, machine_speed_measured=d.measured_speed,
                     machine_speed_declared=d.declared_speed)
    from wcetfit.wcet.set_aside import set_aside_of
    aside = set_aside_of(system, fit)
    if aside is None:
        return result
    return replace(result, set_aside=aside.to_dict(result.upper_ticks))


def check_facts(session: Session) -> None:
    """Refuse a [loops], [flow] or [recursion] fact that names no function (or no loop,
    no block) of the binary, before anything is measured
    (:func:`wcetfit.wcet.fact_names.check_fact_names`)."""
    from wcetfit.wcet.fact_names import check_fact_names
    check_fact_names(session.target, {root: session.functions_of(root)
                                      for root in session.target.functions})


def own_facts(session: Session, root: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The target's [loops] and [flow] facts that concern ``root``: with several measured
    functions, a fact about another one's callee is left out of this one's bound."""
    from wcetfit.wcet.fact_names import facts_reaching
    from wcetfit.wcet.flowfacts import parse_flow_facts
    from wcetfit.wcet.loops import parse_loop_facts, parse_site_loop_facts

    functions = session.functions_of(root)
    elsewhere: dict[str, Any] = {}
    for other in session.target.functions:
        if other != root:
            elsewhere.update(session.functions_of(other))
    loops = facts_reaching(session.target.loops,
                           lambda spec: (parse_loop_facts(spec, functions),
                                         parse_site_loop_facts(spec, functions)),
                           functions, elsewhere)
    flow = facts_reaching(session.target.flow, lambda spec: parse_flow_facts(spec, functions),
                          functions, elsewhere)
    return loops, flow


def _search_rows(session: Session, root: str) -> Any:
    """The store's searched (and adopted) rows of ``root``, or None."""
    from wcetfit.search.store import load_search_rows

    return load_search_rows(session.store, root, session.target.measure.seed,
                            warmup=session.target.measure.warmup)


def _adopted_calls(rows: Any, system: Any) -> tuple[Any, ...]:
    """The calls checks timed above the bound, of the inputs ``check --adopt`` made rows
    (``rows``: the searched rows) of the system (wcetfit.search.store.AdoptedCall)."""
    if rows is None or not rows.adopted_calls:
        return ()
    present = {int(i) for i in list(system.indices)}
    return tuple(c for c in rows.adopted_calls if int(c.row) in present)


def analyze_stage(session: Session, root: str, counts: Any, times: Any,
                  notes: tuple[Any, ...] = ()) -> Analysis:
    """Fit, WCET and report of one measured function from its stored measurements.
    ``notes``: findings of the measuring steps (e.g. why per-activation timing failed),
    added to the root's warnings."""
    from dataclasses import replace

    from wcetfit.report import build_report

    system, fit = fit_stage(session, root, counts, times)
    searched = _search_rows(session, root)
    wcet = wcet_stage(session, root, system, fit, searched)
    from wcetfit.numbering import input_label
    from wcetfit.timing.state import COUNTED_REMEDY, REMEDY

    changed, remedy = state_changed(root, times), REMEDY
    other = counted_changed(root, counts, times)
    if changed is None and other is not None and other.refuses:
        changed, remedy = other.describe(root, input_label), COUNTED_REMEDY
    if changed is not None:
        # the counts and the times are of different paths: no bound from them
        from wcetfit.errors import WcetError
        log.warning("%s: no WCET bound: %s", root, changed)
        wcet = WcetError(changed)
    functions = session.functions_of(root)
    sequences = dict(zip(searched.indices.tolist(), searched.sequences)) if searched else {}

    from wcetfit.search.witness import REACH_BASE, describe_reached, load_reach_rows
    reached = load_reach_rows(session.store, root, session.target.measure.seed)

    def describe(number: int) -> str | None:
        from wcetfit.search.candidates import describe_input
        if number >= REACH_BASE:
            return describe_reached(session.target, reached, number) if reached else None
        return describe_input(session.target, root, number, sequences)

    from wcetfit.search.witness import reach_refusal
    report = build_report(functions, session.root_model(root).name, fit, system.counts,
                          system.columns, system.ticks, wcet, system.tsc_hz,
                          speed=system.speed, input_numbers=system.indices,
                          describe_input=describe,
                          reach_refusal=reach_refusal(session.target, root))
    report = _with_load_warning(_with_target_output(report, times), times)
    if changed is not None:
        from wcetfit.report import Finding
        report = replace(report, warnings=(Finding(changed, remedy),) + tuple(report.warnings),
                         functions=(replace(report.functions[0], timed_other_path=True),)
                         + tuple(report.functions[1:]))
    elif other is not None:
        # a few inputs only: their rows are of another path than their counts, said
        from wcetfit.report import Finding
        report = replace(report, warnings=(Finding(other.describe(root, input_label),
                                                   COUNTED_REMEDY),) + tuple(report.warnings))
    report = _with_error_returns(report, root, times, session.target.measure.error_returns)
    report = _with_split_rounds(report, session, root)
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

    from wcetfit.report.failures import failed_inputs, failed_inputs_finding

    finding = failed_inputs_finding(counts, times)
    if finding is None:
        return report
    return replace(report, warnings=(finding,) + tuple(report.warnings),
                   failed_inputs=len(failed_inputs(counts, times)))


def counted_changed(root: str, counts: Any, times: Any) -> Any:
    """The inputs whose timed call returned another value than their counted call
    (wcetfit.timing.state.counted_other), or None."""
    from wcetfit.timing.state import counted_other

    timed = ((getattr(times, "environment", None) or {}).get("returns") or {}).get(root)
    return counted_other(getattr(counts, "returns", None), timed)


def state_changed(root: str, times: Any) -> str | None:
    """Why the timed calls do not repeat the counted one (wcetfit.timing.state), or None."""
    from wcetfit.numbering import input_label
    from wcetfit.timing.state import changed_text

    entry = ((getattr(times, "environment", None) or {}).get("state") or {}).get(root)
    return changed_text(root, entry or {}, input_label)


def _with_split_rounds(report: Any, session: Any, root: str) -> Any:
    """The split rounds stored for ``root``, said among the root's warnings: their joint
    fit separates blocks the whole calls do not, and is `wcetfit split`'s own; the bound
    is fitted from the whole calls (a new user's report was the same before and after
    `split --auto`, and nothing said the rounds were not in it)."""
    from dataclasses import replace

    from wcetfit.report import Finding
    from wcetfit.split.rounds import round_numbers

    try:
        numbers = round_numbers(session.store)
    except Exception:  # noqa: BLE001 -- a store without rounds, or unreadable names
        return report
    if not numbers:
        return report
    from wcetfit.split.rounds import load_rounds

    mine = load_rounds(session.store, root)
    if not mine:
        return report
    finding = Finding(
        f"{len(mine)} split round(s) are stored for {root} (`wcetfit split --list`): the "
        f"costs their probes separate are `wcetfit split`'s joint fit (its --json), not in "
        f"this bound, which is fitted from whole calls",
        "read the separated costs with `wcetfit split TARGET_DIR --json -`; the blocks "
        "they separate stay grouped here")
    return replace(report, warnings=tuple(report.warnings) + (finding,))


def _with_error_returns(report: Any, root: str, times: Any,
                        declared: tuple[tuple[str, int], ...] = ()) -> Any:
    """Most timed inputs returned a value that reads as an error code (one of ``declared``,
    the target's [measure] error_returns, or below zero): said first among the root's
    warnings and under its headline (wcetfit.timing.state.error_returns)."""
    from dataclasses import replace

    from wcetfit.report import Finding
    from wcetfit.timing.state import error_returns

    returned = ((getattr(times, "environment", None) or {}).get("returns") or {}).get(root)
    found = error_returns(returned, declared)
    if found is None:
        return report
    finding = Finding(
        f"{found.describe()}: error codes most likely, so the calls stopped at a check, and "
        f"the bound is mostly the time of those rejections",
        "generate arguments the function accepts (a decompressor needs compressed data: "
        "make it in generate() with the library's compressor through ctx.lib; a handle or "
        "mode must be valid); unless the rejections are what is to be timed")
    functions = (replace(report.functions[0], error_returns=found),) \
        + tuple(report.functions[1:])
    return replace(report, functions=functions,
                   warnings=(finding,) + tuple(report.warnings))


def _with_target_output(report: Any, times: Any) -> Any:
    """What the function wrote to standard output and error while timed, among the
    root's warnings: a function that prints is mostly on an error or diagnostic path
    (libgcrypt's gcry_md_hash_buffer with algorithm numbers it lacks, "DBG: … not
    available"), and the analyzer's stderr, where the run said it, is gone by then."""
    from dataclasses import replace

    from wcetfit.report import Finding

    said = (getattr(times, "environment", None) or {}).get("target_output") or {}
    if not said.get("lines"):
        return report
    # first (with the load warning before it): it explains what the others say
    return replace(report, warnings=(Finding(
        f"the function wrote {said['lines']:,} line(s) to its standard output or error "
        f"while timed; the first: {said.get('first', '')}",
        "a function that prints is mostly on an error or diagnostic path: narrow "
        "generate() to the arguments it accepts, unless that path is what is to be "
        "timed"),) + tuple(report.warnings))


def _with_load_warning(report: Any, times: Any) -> Any:
    """The timing run's load warning (wcetfit.timing.run.load_warning) among the root's
    warnings: the user reads there that something else ran while the times were taken."""
    from dataclasses import replace

    from wcetfit.report import RETIME, Finding

    text = ((getattr(times, "environment", None) or {}).get("load") or {}).get("warning")
    if not text:
        return report
    # first (after failed inputs, which _with_failures puts before it): a loaded machine
    # explains much of what the other warnings say (preempted calls, a wide dispersion),
    # and BZ2_bzBuffToBuffCompress's report hid it behind "… 23 more"
    return replace(report, warnings=(
        Finding(text, f"time again when the machine is quiet: {RETIME}"),)
        + tuple(report.warnings))


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
        # (a set of the asked repeats timed with another warm-up is one to time again,
        # said by stored_measurements, not a reason to take another number of repeats)
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
        # the remedy with the options this command was given (--seed 7 said `wcetfit
        # count DIR`, which counts seed 1's inputs)
        raise FitError(f"{root}: no counts stored for seed {m.seed}: run `wcetfit count "
                       f"{session.target.directory} --seed {m.seed}` (or `wcetfit analyze "
                       f"--seed {m.seed}`) first")
    if not len(counts.indices) and counts.failures:
        # every input failed in the count run: there is nothing to time, and "run `wcetfit
        # time` first" sent the user to a run with nothing to do
        from wcetfit.measurements import nothing_ran
        raise FitError(nothing_ran(root, counts.failures))
    method, _ = resolve_method(session.target)
    times = load_times(session.store, root, m.seed, method, m.repeats,
                      warmup=m.warmup)
    if times is None and not require_times:
        return counts, None
    if times is None:
        from wcetfit.measurements import stored_repeats
        taken = load_times(session.store, root, m.seed, method, m.repeats)
        if taken is not None:
            # stored, but timed after warm-up calls of each input (wcetfit before the
            # stream order, or another [measure] warmup), or in the state before the
            # previous input's call was made right before: another measurement
            from wcetfit.measurements import WARMUP_BEFORE_RECORDED, other_measurement
            was = taken.environment.get("warmup", WARMUP_BEFORE_RECORDED)
            why = other_measurement(taken.environment, m.warmup)
            # (their own warm-up is an option only when nothing else differs)
            other = (f", or set warmup = {was} under [measure] to use them"
                     if other_measurement(taken.environment, int(was)) is None else "")
            raise FitError(f"{root}: the stored times were {why}: time again (`wcetfit "
                           f"analyze {session.target.directory}`; the counts are kept)"
                           f"{other}")
        other = stored_repeats(session.store, root, m.seed, method)
        hint = (f" (stored: {', '.join(str(r) for r in other)} repeats, e.g. from `analyze "
                f"--repeats {other[-1]}`: pass --repeats {other[-1]})" if other else "")
        raise FitError(f"{root}: no times stored for seed {m.seed}, method {method}, "
                       f"{m.repeats} repeats{hint}: run `wcetfit time "
                       f"{session.target.directory} --seed {m.seed} --repeats {m.repeats}` "
                       f"(or `wcetfit analyze` with the same options) first")
    # Inputs the worst-case search found and timed (wcetfit.search) are rows like the others,
    # and so are those symbolic execution reached (wcetfit reach).
    from wcetfit.search.store import load_search_rows, with_search_rows
    from wcetfit.search.witness import load_reach_rows, with_reach_rows
    counts, times = with_search_rows(counts, times, load_search_rows(session.store, root, m.seed,
                                                                  warmup=m.warmup))
    return with_reach_rows(counts, times, load_reach_rows(session.store, root, m.seed))
