"""`wcetfit search`: look for the slowest inputs with the fitted model, time the best."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "search", help="search inputs the model predicts to be slow; time and keep the best",
        description="Mutate the draws generate(ctx) takes from ctx.rng (starting from the "
                    "slowest measured inputs), count each candidate natively, score it by "
                    "the fitted model's predicted time, then time the best candidates and "
                    "keep them as inputs of the store: the fit, the WCET and the report "
                    "use them from then on.  Needs counts and times (`wcetfit analyze`).")
    p.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    # which stored measurements the fit starts from, and how many repeats the candidates
    # get: those of an `analyze --inputs N --repeats R` run (else the kept candidates'
    # rows are not comparable with the measured ones, and the fit leaves them out)
    p.add_argument("--inputs", type=int, metavar="N",
                   help="number of generated inputs (default: [measure] inputs)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the inputs (default: [measure] seed)")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="which stored timing set, and the timed calls per candidate "
                        "(default: [measure] repeats)")
    p.add_argument("--budget", type=int, metavar="N",
                   help="candidates to count (default: [search] budget, or 300 where "
                        "that is 0)")
    p.add_argument("--timed", type=int, metavar="K",
                   help="best candidates of each phase to time and keep (default: "
                        "[search] timed, 10)")
    p.add_argument("--timed-budget", type=int, metavar="N",
                   help="candidates the second phase times, ranked by measured time "
                        "(finds costs that depend on the data, which the counts cannot "
                        "rank; default: [search] timed_budget, 60; 0: none)")
    p.add_argument("--random", action="store_true",
                   help="spend the budget on fresh inputs of generate instead (the "
                        "reference the search is measured against); nothing is kept")
    p.add_argument("--function", metavar="NAME", help="only this measured function")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' = stdout)")
    from wcetfit.locks import add_wait_option
    add_wait_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.cli.common import check_output_path, measure_overrides, write_json
    from wcetfit.cli.progress import progress_bars
    from wcetfit.errors import TargetError
    from wcetfit.pipeline import open_session, with_stored_repeats
    from wcetfit.search.engine import SearchOptions
    from wcetfit.search.workflow import run_search

    if (args.budget is not None and args.budget < 1) or (args.timed or 0) < 0 \
            or (args.timed_budget or 0) < 0:
        raise TargetError("--budget must be at least 1, --timed and --timed-budget at "
                          "least 0")
    check_output_path(args.json)
    s = open_session(args.target, **measure_overrides(args))
    from wcetfit.pipeline import check_facts
    check_facts(s)                  # a misspelt fact refused before measuring, not after
    t = s.target
    # the command line's, else wcetfit.toml's [search] settings (its budget 0 turns off
    # the search step of `analyze`, not a search asked for by name)
    budget = args.budget if args.budget is not None else (t.search_budget or 300)
    timed = args.timed if args.timed is not None else t.search_timed
    timed_budget = (args.timed_budget if args.timed_budget is not None
                    else t.search_timed_budget)
    if args.repeats is None:
        s = with_stored_repeats(s)
    roots = [args.function] if args.function else list(s.target.functions)
    unknown = [r for r in roots if r not in s.target.functions]
    if unknown:
        raise TargetError(f"{unknown[0]} is not a measured function of {args.target} "
                          f"(those are: {', '.join(s.target.functions)})")
    options = SearchOptions(budget=budget, timed=timed, timed_budget=timed_budget,
                            strategy="random" if args.random else "mutate")
    out = sys.stdout if args.json != "-" else sys.stderr
    reports = {}
    with progress_bars() as update:
        for root in roots:
            reports[root] = run_search(s, root, options, keep=not args.random,
                                       progress=lambda d, n: update("search", d, n),
                                       wait=not args.no_wait)
    for root, rep in reports.items():
        _summary(out, root, rep, kept=not args.random)
    write_json(args.json, {"schema": "wcetfit.search/1",
                           "functions": [search_json(root, rep) for root, rep in reports.items()]})
    return 0


def _summary(out: Any, root: str, rep: Any, *, kept: bool) -> None:
    from wcetfit.timing.tsc import ticks_to_ns

    o, hz = rep.outcome, rep.tsc_hz
    best = o.best[0].predicted_ticks if o.best else float("nan")
    new = sum(c.new_blocks > 0 for c in o.best)
    out.write(f"{root}: {o.counted} candidates counted ({o.strategy}), {o.rejected} rejected "
              f"by generate(), {len(o.failures)} left out (crashed, hung or failed a check)\n")
    out.write(f"  predicted: best candidate {best:,.0f} ticks ({ticks_to_ns(best, hz):,.0f} ns)"
              f" vs {o.start_predicted_ticks:,.0f} ticks "
              f"({ticks_to_ns(o.start_predicted_ticks, hz):,.0f} ns), the highest prediction "
              f"among the measured inputs\n")
    tp = rep.timed_phase
    if tp is not None:
        what = ("fresh inputs" if o.strategy == "random"
                else "mutated candidates, each generation timed beside its parents")
        if tp.best:
            slow = tp.best[0][2]
            kept = (f"its slowest {slow:,.0f} ticks ({ticks_to_ns(slow, hz):,.0f} ns), a "
                    f"median of 3 calls in its own pass; timed again below")
        else:
            kept = "none timed"
        out.write(f"  by measured time: {tp.timed} {what}, {tp.generations} generation(s), "
                  f"{len(tp.failures)} failed; {kept}\n")
    found = rep.found_max_ticks
    if len(rep.timed_indices):
        out.write(f"  measured:  {len(rep.timed_indices)} candidates timed, slowest median "
                  f"{found:,.0f} ticks ({ticks_to_ns(found, hz):,.0f} ns) vs "
                  f"{rep.measured_max_ticks:,.0f} ticks "
                  f"({ticks_to_ns(rep.measured_max_ticks, hz):,.0f} ns) for the slowest "
                  f"measured input\n")
    else:
        out.write("  measured:  no candidate timed\n")
    if new:
        out.write(f"  {new} of the best candidates reach blocks no measured input ran\n")
    for f in o.failures[:5]:
        out.write(f"  failed: {f.describe()}\n")
    out.write("  kept as inputs of the store\n" if kept and len(rep.timed_indices)
              else "  nothing kept\n")


def search_json(root: str, rep: Any) -> dict[str, Any]:
    from wcetfit.timing.tsc import ticks_to_ns

    o, hz = rep.outcome, rep.tsc_hz
    return {"function": root, "strategy": o.strategy, "counted": o.counted,
            "rejected": o.rejected,
            "failures": [{"index": f.index, "kind": f.kind, "message": f.message,
                          "arguments": f.arguments} for f in o.failures],
            "start_predicted_ticks": o.start_predicted_ticks,
            "best_predicted_ticks": [c.predicted_ticks for c in o.best],
            "history_predicted_ticks": list(o.history),
            "timed": [{"index": int(k), "predicted_ticks": float(p),
                       "median_ticks": float(_nanmedian(t)),
                       "median_ns": ticks_to_ns(float(_nanmedian(t)), hz)}
                      for k, t, p in zip(rep.timed_indices, rep.timed_ticks, rep.timed_predicted)],
            "measured_max_ticks": rep.measured_max_ticks,
            "found_max_ticks": rep.found_max_ticks,
            # the measured-time phase (wcetfit.search.timed), null when it did not run
            "timed_phase": None if rep.timed_phase is None else {
                "timed": rep.timed_phase.timed, "generations": rep.timed_phase.generations,
                "failures": len(rep.timed_phase.failures),
                "best": [{"index": int(k), "median_ticks": float(t),
                          "median_ns": ticks_to_ns(float(t), hz)}
                         for k, _s, t in rep.timed_phase.best]}}


def _nanmedian(row: Any) -> float:
    import numpy as np
    return float(np.nanmedian(row)) if np.isfinite(row).any() else float("nan")
