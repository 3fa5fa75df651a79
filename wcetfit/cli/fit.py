"""`wcetfit fit`: per-block costs from the stored counts and times."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fit", help="fit per-block costs to the stored counts and times",
        description="Solve time = Σ count·cost + ε by robust least squares on the stored "
                    "measurements; say which costs the data determine (and which only in "
                    "combination), with 95%% confidence intervals and held-out errors.")
    p.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    p.add_argument("--seed", type=int, metavar="S", help="which stored inputs (default: "
                   "[measure] seed)")
    p.add_argument("--repeats", type=int, metavar="R", help="which stored timing set "
                   "(default: [measure] repeats)")
    p.add_argument("--bootstrap", action="store_true",
                   help="with [fit] costs = \"linear\": also give bootstrap intervals "
                        "over inputs (slower); the physical fit's intervals are a "
                        "bootstrap already")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' = stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.cli.common import check_output_path, write_json
    from wcetfit.fit.result import FitOptions
    from wcetfit.pipeline import (fit_stage, open_session, stored_measurements,
                                  with_stored_repeats)

    check_output_path(args.json)
    s = open_session(args.target, seed=args.seed, repeats=args.repeats)
    if args.repeats is None:
        s = with_stored_repeats(s)
    options = FitOptions(intervals="both" if args.bootstrap else "sandwich")
    results = {}
    for root in s.target.functions:
        counts, times = stored_measurements(s, root)
        system, fit = fit_stage(s, root, counts, times, options)
        results[root] = (system, fit)
    out = sys.stdout if args.json != "-" else sys.stderr
    for root, (system, fit) in results.items():
        _summary(out, root, system, fit)
    write_json(args.json, fit_json(s, results))
    return 0


def _summary(out: Any, root: str, system: Any, fit: Any) -> None:
    from wcetfit.timing.tsc import ticks_to_ns

    hz = system.tsc_hz
    estimable = sum(b.estimable for b in fit.blocks)
    out.write(f"{root}: {fit.rows_used} of {fit.rows_total} inputs used, {len(fit.blocks)} blocks "
              f"({estimable} estimable alone), rank {fit.rank}"
              f"{'' if fit.max_rank is None else f' of at most {fit.max_rank}'}; "
              f"intervals: {fit.interval_method}\n")
    for b in fit.blocks:
        if b.estimable and b.cost_ticks is not None:
            out.write(f"  {b.address:#x}: {b.cost_ticks:9.1f} ± {b.ci95_ticks:.1f} ticks "
                      f"({ticks_to_ns(b.cost_ticks, hz):.1f} ± {ticks_to_ns(b.ci95_ticks, hz):.1f}"
                      " ns)\n")
    for g in fit.groups:
        out.write(f"  group {g.id} ({g.kind}, {len(g.blocks)} blocks):\n")
        for c in g.combinations:
            out.write(f"    {c.text}\n")
        if g.advice:
            out.write(f"    advice: {g.advice}\n")
    for w in fit.fit_warnings:
        out.write(f"  warning ({w.code}): {w.message}\n    remedy: {w.remedy}\n")
    v = fit.validation
    if v is not None:
        out.write(f"  held-out ({v.folds}-fold over {v.heldout_inputs} inputs): median relative "
                  f"error {100 * v.median_rel_error:.2f}%, p95 {100 * v.p95_rel_error:.2f}%, "
                  f"R² {v.r2:.4f}\n")


def fit_json(session: Any, results: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """Schema wcetfit.fit/1: per function its own blocks; groups with any of its blocks."""
    from wcetfit.model import hexaddr

    out: dict[str, Any] = {"schema": "wcetfit.fit/1", "measured": []}
    for root, (system, fit) in results.items():
        j = fit.to_json()
        by_addr = {b["address"]: b for b in j["blocks"]}
        functions = []
        for name in dict.fromkeys(n for n, _ in system.columns):
            mine = [hexaddr(a) for n, a in system.columns if n == name]
            fn = session.model.function(name)
            entry: dict[str, Any] = {
                "name": name, "address": hexaddr(fn.address),
                "blocks": [by_addr[a] for a in mine],
                "groups": [g for g in j["groups"] if set(g["blocks"]) & set(mine)],
            }
            functions.append(entry)
        rest = {k: v for k, v in j.items() if k not in ("blocks", "groups")}
        out["measured"].append({"function": root, "inputs": int(system.indices.size),
                                "functions": functions, **rest})
    return out
