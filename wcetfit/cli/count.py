"""`wcetfit count`: per-input block counts from the instrumented copy."""

from __future__ import annotations

import argparse
import sys

from wcetfit.cli.common import add_measure_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "count", help="count block executions per input (instrumented copy, native speed)",
        description="Run a relocated copy of the function (and of the binary's own "
                    "functions it calls) with a counter at every block, natively, for every "
                    "input; check flow conservation and that the copy returns exactly what "
                    "the original does.  Inputs already stored are not counted again.")
    add_measure_args(p, repeats=False)
    p.add_argument("--trace", action="store_true",
                   help="also record each input's block trace (for `wcetfit split`)")
    from wcetfit.locks import add_wait_option
    add_wait_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.cli.common import check_output_path, measure_overrides, write_json
    from wcetfit.cli.progress import progress_bars
    from wcetfit.measurements import load_counts
    from wcetfit.model import indirect_call_notes
    from wcetfit.pipeline import count_following_indirect, open_session

    check_output_path(args.json)
    from wcetfit.locks import lock_target_store
    _lock = lock_target_store(args.target, wait=not args.no_wait)  # held to the end
    s = open_session(args.target, fresh=args.fresh, **measure_overrides(args))
    with progress_bars() as update:
        roots = list(s.target.functions)
        s = count_following_indirect(s, roots, trace=args.trace,
                                     progress=lambda d, t: update("count", d, t))
    sets = {r: load_counts(s.store, r, s.target.measure.seed) for r in roots}
    out = sys.stdout if args.json != "-" else sys.stderr
    for root, cs in sets.items():
        failed = f"; {len(cs.failures)} failed (below)" if cs.failures else ""
        out.write(f"{root}: {len(cs.indices)} inputs counted, flow conservation and "
                  f"differential checks passed on each of them{failed}\n")
        for fc in cs.functions:
            never = int((fc.counts.sum(axis=0) == 0).sum()) if len(cs.indices) else len(fc.blocks)
            out.write(f"  {fc.name}: {len(fc.blocks)} blocks, {never} never executed\n")
        for f in cs.failures:
            out.write(f"  {f.describe()}\n")
        for name in s.functions_of(root):
            for note in indirect_call_notes(s.model.functions[name]):
                out.write(f"  {note}\n")
    write_json(args.json, counts_json(sets))
    return 0


def counts_json(sets):  # type: ignore[no-untyped-def]
    """Schema wcetfit.counts/1: one entry per function reached, rows = ``indices``."""
    from wcetfit.model import hexaddr

    first = next(iter(sets.values()))
    return {
        "schema": "wcetfit.counts/1",
        "seed": first.seed,
        "indices": [int(i) for i in first.indices],
        "functions": [{"name": fc.name, "address": hexaddr(fc.address), "measured": root,
                       "blocks": [hexaddr(b) for b in fc.blocks],
                       "counts": fc.counts.tolist()}
                      for root, cs in sets.items() for fc in cs.functions],
        "traces": {root: {str(i): t.tolist() for i, t in sorted(cs.trace.items())}
                   for root, cs in sets.items() if cs.trace is not None} or None,
        "failures": [{"index": f.index, "kind": f.kind, "message": f.message,
                      "arguments": f.arguments} for f in first.failures],
    }
