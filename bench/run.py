"""Run every benchmark module and print its figures (``make bench``).

Each module of this package that defines ``run() -> list[dict]`` contributes figures,
dicts with at least ``figure``, ``value`` and ``unit``, and where there is one,
``goal`` (a human-readable target such as "<= 1.5"), ``ok`` (bool) and ``reference``
(what a ratio is measured against, in the same run).  Results go to the terminal and
to bench/results.json.  Speed goals live here, never in the tests.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

MODULES = ["static", "corpus", "timing", "count", "fit", "samples", "split", "search", "reach",
           "bracket", "multi", "reliability"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help=f"modules to run (default: all of {MODULES})")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results.json"))
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    figures: list[dict] = []
    failed: list[str] = []
    for name in args.only or MODULES:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.{name}":
                console.print(f"[yellow]bench.{name}: not written yet[/yellow]")
                continue
            raise
        console.print(f"[bold]bench.{name}[/bold] …")
        start = time.perf_counter()
        try:
            got = module.run()
        except Exception:
            failed.append(name)
            console.print(f"[red]bench.{name} failed:[/red]\n{traceback.format_exc()}")
            continue
        for fig in got:
            fig.setdefault("module", name)
        figures.extend(got)
        console.print(f"  {len(got)} figures in {time.perf_counter() - start:.1f} s")

    table = Table(title="wcetfit benchmark figures")
    for col in ("module", "figure", "value", "unit", "goal", "ok"):
        table.add_column(col)
    for fig in figures:
        value = fig.get("value")
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        ok = fig.get("ok")
        table.add_row(fig["module"], fig["figure"], text, str(fig.get("unit", "")),
                      str(fig.get("goal", "")),
                      "" if ok is None else ("[green]yes[/green]" if ok else "[red]NO[/red]"))
    console.print(table)
    with open(args.json, "w") as f:
        json.dump({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "figures": figures,
                   "failed_modules": failed}, f, indent=1, default=str)
    console.print(f"written {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
