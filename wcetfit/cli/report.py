"""`wcetfit report`: the per-function report from stored measurements."""

from __future__ import annotations

import argparse
from typing import Any, Sequence


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="per-function report: block costs, groups, WCET bound, worst path",
        description="Fit the stored measurements, bound the WCET by IPET and print the "
                    "report; optionally as JSON (wcetfit.report/1) and as one self-contained "
                    "HTML file.")
    p.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    add_output_args(p)
    p.set_defaults(func=run)


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", help="write the report as JSON ('-' = stdout)")
    p.add_argument("--html", metavar="FILE", help="write the report as one HTML file")
    p.add_argument("--max-blocks", type=int, metavar="N",
                   help="show at most N blocks per function in the terminal")


def run(args: argparse.Namespace) -> int:
    from wcetfit.pipeline import analyze_stage, open_session, stored_measurements

    check_outputs(args)
    s = open_session(args.target)
    analyses = []
    for root in s.target.functions:
        counts, times = stored_measurements(s, root)
        analyses.append(analyze_stage(s, root, counts, times))
    emit(analyses, args)
    return 0


def check_outputs(args: argparse.Namespace) -> None:
    from wcetfit.cli.common import check_output_path

    check_output_path(args.json)
    check_output_path(args.html)


def emit(analyses: Sequence[Any], args: argparse.Namespace) -> None:
    """Print the reports; write JSON and HTML where asked."""
    import sys

    from rich.console import Console

    from wcetfit.cli.common import write_json
    from wcetfit.report import html, json as report_json, text

    out = sys.stderr if args.json == "-" else sys.stdout
    # A file or a pipe gets lines wide enough for the block table (a terminal its own width).
    console = Console(file=out, width=None if out.isatty() else 140)
    for a in analyses:
        text.render(a.report, console, max_blocks=args.max_blocks)
    if args.json:
        docs = [report_json.to_json(a.report) for a in analyses]
        # One measured function: its report.  Several: the same schema, one report each.
        write_json(args.json, docs[0] if len(docs) == 1 else
                   {"schema": docs[0]["schema"], "reports": docs})
    if args.html:
        pages = [html.render_html(a.report) for a in analyses]
        page = pages[0]
        for extra in pages[1:]:   # one file: the other reports' bodies appended
            body = extra[extra.index("<body>") + len("<body>"):extra.rindex("</body>")]
            page = page.replace("</body>", f"<hr>{body}</body>", 1)
        with open(args.html, "w") as f:
            f.write(page)
        console.print(f"HTML report written to {args.html}")
