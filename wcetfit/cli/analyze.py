"""`wcetfit analyze`: the whole pipeline on one target, resumable."""

from __future__ import annotations

import argparse
import logging


def register(subparsers: argparse._SubParsersAction) -> None:
    from wcetfit.cli.common import add_measure_args
    from wcetfit.cli.report import add_cache_arg, add_output_args

    p = subparsers.add_parser(
        "analyze", help="static model → count run → timing run → per-activation timing → "
                        "fit → WCET → report",
        description="Run every stage on TARGET_DIR and print the per-function report.  "
                    "Measurements are kept in TARGET_DIR/.wcetfit/; an interrupted run "
                    "(Ctrl-C, crash) continues where it stopped, and a second run reuses "
                    "what is stored.  The TSC method is calibrated once per boot.  Where "
                    "the function reaches own functions that can be timed, every "
                    "activation is timed too and each function fitted from its own "
                    "activations ([timing] activations = \"auto\" | true | false).")
    add_measure_args(p, json=False)   # --json (the report's) comes with the output options
    add_output_args(p)
    add_cache_arg(p)
    from wcetfit.locks import add_wait_option
    add_wait_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.cli.common import measure_overrides
    from wcetfit.cli.progress import progress_bars, still_working
    from wcetfit.cli.report import check_outputs, emit
    from wcetfit.timing.run import run_times
    from wcetfit.fit.system import refuse_shared_blocks
    from wcetfit.pipeline import (activation_step, analyze_stage, check_facts,
                                  count_following_indirect, open_session, stored_measurements,
                                  wants_activations)

    check_outputs(args)
    from wcetfit.locks import lock_target_store
    _lock = lock_target_store(args.target, wait=not args.no_wait)  # held to the end
    s = open_session(args.target, fresh=args.fresh, **measure_overrides(args))
    roots = list(s.target.functions)
    for root in roots:                      # before minutes of measuring, not after
        refuse_shared_blocks(root, s.functions_of(root))
    check_facts(s)
    # per-activation rows ([timing] activations) need the count run's block trace
    per_activation = [root for root in roots if wants_activations(s, root)]
    notes: dict[str, tuple[str, ...]] = {}
    with progress_bars() as update:
        s = count_following_indirect(s, roots, trace=bool(per_activation),
                                     progress=lambda d, t: update("count", d, t))
        for root in roots:                  # callees reached through pointers, now modelled
            refuse_shared_blocks(root, s.functions_of(root))
        run_times(s.target, s.store, s.roots, wait=not args.no_wait,
                  progress=lambda d, t: update("time", d, t))
        for root in per_activation:
            why = activation_step(s, root, update, required=s.target.activations == "on")
            if why:
                notes[root] = (why,)
        _search(s, roots, update, wait=not args.no_wait)
    from wcetfit.analysis_cache import ReportOf, cached_report
    from wcetfit.cli.report import bound_status, report_cache_extra

    def analysis(root):  # type: ignore[no-untyped-def]
        # kept for the `wcetfit report` that follows (wcetfit.analysis_cache); read back
        # when this run measured nothing new
        with still_working(f"analysing {root} (fit, bound, report)"):
            report, _ = cached_report(
                s, root, lambda: analyze_stage(s, root, *stored_measurements(s, root),
                                               notes=notes.get(root, ())),
                extra=report_cache_extra(None, notes.get(root, ())),
                use_cache=not args.no_cache)
        return ReportOf(root, report)

    analyses = [analysis(root) for root in roots]
    emit(analyses, args, session=s)
    return bound_status(analyses)


# The worst-case search mutates the stored inputs: when more than this share of them
# failed (crashed, hung, failed a check), it is not run.
MAX_FAILED_FOR_SEARCH = 0.5


def _mostly_failed(s, root: str) -> str | None:  # type: ignore[no-untyped-def]
    """Why the search would mutate mostly failing inputs ("58 of 60 inputs failed when
    counted"), or None."""
    from wcetfit.measurements import load_counts

    cs = load_counts(s.store, root, s.target.measure.seed)
    if cs is None:
        return None
    failed = len({f.index for f in cs.failures})
    total = failed + len(cs.indices)
    if total and failed > MAX_FAILED_FOR_SEARCH * total:
        return f"{failed} of {total} inputs failed when counted"
    return None


def _search(s, roots, update, wait: bool = True) -> None:  # type: ignore[no-untyped-def]
    """The worst-case search step ([search] budget; once per target: a later analyze
    reuses the inputs it kept, `wcetfit search` searches again)."""
    from wcetfit.search.engine import SearchOptions
    from wcetfit.search.store import load_search_rows
    from wcetfit.search.workflow import run_search

    t = s.target
    if t.search_budget == 0 or t.search_timed == 0:
        return
    # The search scores candidates with a fit of the inputs measured so far; the analysis
    # fits again with the inputs the search adds, and its report carries every warning of
    # the fit: said once, there, not once per fit (the machine's speed was said twice).
    fit_log = logging.getLogger("wcetfit.fit")
    level = fit_log.level
    fit_log.setLevel(logging.ERROR)
    try:
        from wcetfit.errors import TimedAnotherPath, TimingSlotBusy
        for root in roots:
            if load_search_rows(s.store, root, t.measure.seed,
                                warmup=t.measure.warmup) is not None:
                continue
            broken = _mostly_failed(s, root)
            if broken:
                # mutations of inputs that crash crash too (58 of 60 inputs: 300 crashing
                # candidates, a minute and a hundred warning lines)
                logging.getLogger(__name__).warning(
                    "%s: the worst-case search step is skipped: %s; make generate() give "
                    "arguments the function takes, then `wcetfit search %s`", root, broken,
                    t.directory)
                continue
            try:
                run_search(s, root, SearchOptions(budget=t.search_budget,
                                                  timed=t.search_timed,
                                                  timed_budget=t.search_timed_budget),
                           progress=lambda d, n: update("search", d, n), wait=wait)
            except TimedAnotherPath:
                continue    # no bound from these times either: the report says why
            except TimingSlotBusy as exc:
                # --no-wait: this run measured and stored its counts and times; another
                # run took the slot since.  Refusing now would throw away the report of
                # what is stored (libm's cosh: timed, then "error: ... in use by pid
                # 24826" after 13.5 s), so the search is left for later, and said.
                logging.getLogger(__name__).warning(
                    "%s: the worst-case search step is skipped (--no-wait): %s; `wcetfit "
                    "search %s` runs it later", root, exc, t.directory)
                continue
    finally:
        fit_log.setLevel(level)
