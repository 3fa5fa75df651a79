"""`wcetfit report`: the per-function report from stored measurements."""

from __future__ import annotations

import argparse
from typing import Any, Sequence


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="the WCET bound of each function and what it rests on",
        description="Fit the stored measurements, bound the WCET by IPET and print the "
                    "report: one screen per target (the bound, what it rests on, the "
                    "slowest measured input, the fit, the blocks that matter, warnings); "
                    "--full or --function NAME for every table; optionally as JSON "
                    "(wcetfit.report/3) and as one self-contained HTML file.")
    p.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    # which stored measurements: those of an `analyze --inputs N --repeats R` run
    p.add_argument("--inputs", type=int, metavar="N",
                   help="report generated inputs 0..N-1 of those stored, searched and "
                        "reached ones included (default: every stored input)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the inputs (default: [measure] seed)")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="which stored timing set (default: [measure] repeats)")
    add_output_args(p)
    add_cache_arg(p)
    p.set_defaults(func=run)


def add_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true",
                   help="fit and bound again even when an earlier report of the same "
                        "measurements, settings and wcetfit is cached (wcetfit.analysis_cache; "
                        "WCETFIT_NO_CACHE=1 for every command)")


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE",
                   help="write the report as JSON ('-' = stdout; the text report then goes "
                        "to stderr, so that stdout is the JSON alone)")
    p.add_argument("--html", metavar="FILE", help="write the report as one HTML file")
    p.add_argument("--full", action="store_true",
                   help="print every table (worst-case path, loops, blocks, groups, fit "
                        "quality) of every function instead of the one-screen summary")
    p.add_argument("--function", metavar="NAME",
                   help="print every table of this function only (a measured function or "
                        "one of its callees); with --html, that function's page, nothing "
                        "of it left out")
    p.add_argument("--max-blocks", type=int, metavar="N",
                   help="with --full or --function: at most N blocks per block table")


def run(args: argparse.Namespace) -> int:
    from wcetfit.analysis_cache import ReportOf, cached_report
    from wcetfit.pipeline import (analyze_stage, open_session, stored_measurements,
                                  with_stored_repeats)

    check_outputs(args)
    # An edited inputs module does not stop the report (every measuring command refuses
    # it): what is stored is still what was measured, of the inputs generate() built
    # then, and the user who edited inputs.py may want to read that report before
    # measuring again.  It is flagged where the results are read instead.
    s = open_session(args.target, inputs=args.inputs, seed=args.seed, repeats=args.repeats,
                     inputs_changed="warn")
    if args.repeats is None:
        s = with_stored_repeats(s)
    if args.function is not None and not args.json and not args.html:
        # refused before the analysis, which may take a minute, when there is nothing
        # else to write (with --json or --html those are written first, then refused)
        _known_before_analysis(s, args.function)
    from wcetfit.cli.progress import still_working

    analyses = []
    for root in s.target.functions:
        counts, times = stored_measurements(s, root)
        if args.inputs is not None:
            counts, times = _first_inputs(root, counts, times, args.inputs)
        with still_working(f"analysing {root} (fit, bound, report)"):
            report, _ = cached_report(
                s, root, lambda: analyze_stage(s, root, counts, times),
                extra=report_cache_extra(args.inputs), use_cache=not args.no_cache)
        analyses.append(_flag_changed_inputs(ReportOf(root, report),
                                             s.store.inputs_changed_note))
    emit(analyses, args, session=s)
    return bound_status(analyses)


def _known_before_analysis(session: Any, asked: str) -> None:
    """Refuse ``--function ASKED`` when no measured function reaches a function of that
    name (the report's functions are the measured ones and their callees)."""
    import difflib

    from wcetfit.errors import WcetfitError

    known: list[str] = []
    for root in session.target.functions:
        known += [n for n in session.functions_of(root) if n not in known]
    fn = _model_function(session, asked)
    if asked in known or asked in session.target.functions or \
            (fn is not None and fn.name in known):
        return
    toml = {session.root_model(r).name: r for r in session.target.functions}
    listed = [f"{k} ({toml[k]} in wcetfit.toml)" if k in toml and toml[k] != k else k
              for k in known]
    if len(listed) <= MAX_NAMES_LISTED:
        raise WcetfitError(f"--function {asked}: not a measured function or one of their "
                           f"callees; the report has {', '.join(listed)}")
    close = difflib.get_close_matches(asked, known, n=3)
    raise WcetfitError(f"--function {asked}: not a measured function or one of their "
                       f"callees; " + "; ".join(
                           ([f"did you mean {', '.join(close)}?"] if close else [])
                           + [f"measured: {', '.join(session.target.functions)}",
                              f"{len(known)} functions in all (--full lists them)"]))


# An unknown --function lists the report's functions when there are at most this many;
# beyond, the closest names and the measured ones.
MAX_NAMES_LISTED = 12


def report_cache_extra(inputs: int | None, notes: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """What a command adds to an analysis beyond the store and the target (the key's
    ``extra``, the same for ``report`` and ``analyze``): ``--inputs N`` and the measuring
    steps' notes."""
    return ("inputs", inputs, "notes", tuple(notes))


def _flag_changed_inputs(analysis, note: str | None):  # type: ignore[no-untyped-def]
    """The analysis of a store whose inputs module changed since it was measured: the
    change first among the warnings (text, JSON and HTML alike), and no input's
    arguments shown -- they are rebuilt by the current generate(), so they would be
    another call's than the one timed."""
    from dataclasses import replace

    from wcetfit.report import Finding

    if note is None:
        return analysis
    r = analysis.report
    functions = tuple(replace(f, wcet=replace(f.wcet, slowest_arguments=None))
                      for f in r.functions)
    finding = Finding(note, "run `wcetfit analyze --fresh` to measure the current inputs "
                            "(what is stored is discarded), or restore the inputs module "
                            "the measurements were taken with")
    return replace(analysis, report=replace(r, functions=functions,
                                            warnings=(finding,) + tuple(r.warnings)))


def _first_inputs(root: str, counts, times, n: int):  # type: ignore[no-untyped-def]
    """``--inputs N``: the report of generated inputs 0..N-1 (searched and reached ones
    stay), said when the store holds fewer."""
    import logging

    from wcetfit.measurements import first_generated

    counts, times, stored = first_generated(counts, times, n)
    if stored < n:
        logging.getLogger(__name__).warning(
            "%s: --inputs %d, but %d generated inputs are stored: reporting those (`wcetfit "
            "analyze --inputs %d` measures the rest)", root, n, stored, n)
    return counts, times


def check_outputs(args: argparse.Namespace) -> None:
    from wcetfit.cli.common import check_output_path

    check_output_path(args.json)
    check_output_path(args.html)


def function_names(analyses: Sequence[Any]) -> dict[str, str]:
    """Each measured function as wcetfit.toml names it -> the name the report has, where
    they differ: libm's ``powf`` is an IFUNC, measured as the implementation its resolver
    selects (``powf@impl+0x72ec0``); ``remainder`` shares its address with ``drem``, the
    name the model prefers (wcetfit.static.symbols)."""
    out: dict[str, str] = {}
    for a in analyses:
        asked = getattr(a, "root", None)
        if asked is not None and asked != a.report.root:
            out[asked] = a.report.root
    return out


def _resolve_function(name: str, known: Sequence[str], names: dict[str, str],
                      session: Any) -> str:
    """The report's name of ``--function NAME``: the report's own names, then the
    measured functions as wcetfit.toml names them, then (with the session) any other
    name the model knows for a reported function -- a symbol alias, a ``0x…`` entry
    address.  NAME itself when none finds it: the caller refuses it, listing the names."""
    if name in known:
        return name
    if name in names:
        return names[name]
    fn = _model_function(session, name)
    if fn is not None and fn.name in known:            # e.g. "0x72ec0"
        return fn.name
    return name


def _model_function(session: Any, name: str) -> Any:
    """The session's model of the function ``name`` names, or None (no session, or no
    such function)."""
    model = getattr(session, "model", None)
    if model is None:
        return None
    try:
        return model.function(name)
    except KeyError:
        return None


def _which_function(asked: str, shown: str, session: Any) -> str:
    """One line saying which function ``--function ASKED`` shows, when the report names
    it otherwise: the implementation an IFUNC selects, or the alias the model prefers."""
    fn = _model_function(session, shown)
    ifunc = getattr(fn, "ifunc", None)
    if ifunc is not None and asked == ifunc.symbol:
        return f"--function {asked}: {ifunc.describe()}; reported as {shown}"
    where = f", at {fn.address:#x}" if fn is not None else ""
    return f"--function {asked}: reported as {shown} ({asked} names the same function{where})"


def bound_status(analyses: Sequence[Any]) -> int:
    """The exit status of a command that printed ``analyses``: 0 when every measured
    function got a bound, 1 when one did not (its report says why).  libgmp's mpz_powm,
    "WCET bound: not computed" after two minutes of measuring, exited 0, and a script
    read success."""
    for a in analyses:
        fns = getattr(a.report, "functions", ())
        w = fns[0].wcet if fns else None
        if w is None or w.error or w.ipet_ticks is None:
            return 1
    return 0


def emit(analyses: Sequence[Any], args: argparse.Namespace, *, session: Any = None) -> None:
    """Print the reports; write JSON and HTML where asked.  ``session``: the analyses'
    (:class:`wcetfit.pipeline.Session`), for the other names ``--function`` takes."""
    import sys

    from rich.console import Console

    from wcetfit.cli.common import write_json
    from wcetfit.errors import WcetfitError
    from wcetfit.report import html, json as report_json, summary, text

    out = sys.stderr if args.json == "-" else sys.stdout
    # A file or a pipe gets lines wide enough for the block table (a terminal its own width).
    console = Console(file=out, width=None if out.isatty() else 140)
    reports = [a.report for a in analyses]
    asked = getattr(args, "function", None)
    known = list(dict.fromkeys(f.name for r in reports for f in r.functions))
    names = function_names(analyses)
    name = None if asked is None else _resolve_function(asked, known, names, session)
    if asked is not None and name != asked and name in known:
        console.print(_which_function(asked, name, session), highlight=False)
    if name is None and getattr(args, "full", False):
        for r in reports:
            text.render(r, console, max_blocks=args.max_blocks)
    elif name is None:
        summary.render(reports, console, asked={v: k for k, v in names.items()})
    elif name in known:
        r = next(r for r in reports if any(f.name == name for f in r.functions))
        text.render(r, console, max_blocks=args.max_blocks, function=name)
    if args.json:
        docs = [report_json.to_json(r) for r in reports]
        # One measured function: its report.  Several: the same schema, one report each.
        write_json(args.json, docs[0] if len(docs) == 1 else
                   {"schema": docs[0]["schema"], "reports": docs})
    if args.html:
        # --function: the page of the root(s) reaching it, that function's parts all kept
        shown = [r for r in reports if name is None or name not in known
                 or any(f.name == name for f in r.functions)]
        page = html.render_html(shown, focus=name)
        with open(args.html, "w") as f:
            f.write(page)
        console.print(f"HTML report written to {args.html}")
    if name is not None and name not in known:    # said after the files are written
        other = {v: k for k, v in names.items() if any(getattr(a, "root", None) == k
                                                      for a in analyses)}
        listed = [f"{k} ({other[k]} in wcetfit.toml)" if k in other else k for k in known]
        if len(listed) > MAX_NAMES_LISTED:
            # libcrypto's SHA256 reaches 300 functions: one line of 6.8 KB named them all
            import difflib
            close = difflib.get_close_matches(asked, list(known), n=3)
            measured = {r.root for r in reports}
            roots = [x for x in listed if x.split(" (")[0] in measured]
            listed = (([f"did you mean {', '.join(close)}?"] if close else [])
                      + [f"measured: {', '.join(roots)}"]
                      + [f"{len(known)} functions in all (--full lists them)"])
            raise WcetfitError(f"--function {asked}: not a measured function or one of "
                               f"their callees; " + "; ".join(listed))
        raise WcetfitError(f"--function {asked}: not a measured function or one of their "
                           f"callees; the report has {', '.join(listed)}")
