"""`wcetfit time`: TSC ticks of every timed call of the original code, per input."""

from __future__ import annotations

import argparse
import sys

from wcetfit.cli.common import add_measure_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "time", help="time the original code: ticks[input, repeat]",
        description="Call the original (uninstrumented) function for every input, "
                    "[measure] repeats times, reading the TSC around each call with the "
                    "calibrated fence; argument memory is restored before each call, "
                    "outside the timed region.  Inputs already stored are not measured "
                    "again.")
    add_measure_args(p)
    p.add_argument("--method", help="TSC fence method (default: [measure] method, "
                                    "'auto' = the calibrated choice)")
    p.add_argument("--straight-line", type=int, nargs="?", const=16, metavar="M",
                   help="instead: time k = 1..M back-to-back calls per region and report "
                        "the slope, the call's time with the overhead ε removed (Moreno & "
                        "Fischmeister §4; only for calls that need no argument restore)")
    p.add_argument("--activations", action="store_true",
                   help="instead: time every activation of the binary's own functions the "
                        "measured function reaches (a TSC reading at each entry and return, "
                        "per-activation rows for the fit); counts with a block trace first "
                        "when the store has none")
    from wcetfit.locks import add_wait_option
    add_wait_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from wcetfit.cli.common import check_output_path, measure_overrides, write_json
    from wcetfit.cli.progress import progress_bars
    from wcetfit.timing.run import run_times
    from wcetfit.pipeline import open_session
    from wcetfit.timing.tsc import ticks_to_ns

    check_output_path(args.json)
    from wcetfit.locks import lock_target_store
    _lock = lock_target_store(args.target, wait=not args.no_wait)  # held to the end
    s = open_session(args.target, fresh=args.fresh, method=args.method,
                     **measure_overrides(args))
    if args.straight_line:
        return _straight_line(s, args)
    if args.activations:
        from wcetfit.cli.activations import run_activations_cli
        return run_activations_cli(s)
    with progress_bars() as update:
        times = run_times(s.target, s.store, s.roots, wait=not args.no_wait,
                          progress=lambda d, t: update("time", d, t))
    out = sys.stdout if args.json != "-" else sys.stderr
    for name, ts in times.items():
        med = np.nanmedian(ts.ticks, axis=1) if ts.ticks.size else np.zeros(0)
        out.write(f"{name}: {len(ts.indices)} inputs × {ts.ticks.shape[1]} calls, method "
                  f"{ts.method}, TSC {ts.tsc_hz / 1e6:.3f} MHz; {ts.migrated} migrated samples "
                  "discarded\n")
        if med.size:
            lo, mid, hi = np.percentile(med, [0, 50, 100])
            out.write(f"  per-input median ticks: min {lo:.0f} ({ticks_to_ns(lo, ts.tsc_hz):.0f}"
                      f" ns), median {mid:.0f} ({ticks_to_ns(mid, ts.tsc_hz):.0f} ns), max "
                      f"{hi:.0f} ({ticks_to_ns(hi, ts.tsc_hz):.0f} ns)\n")
        for f in ts.failures:
            out.write(f"  {f.describe()}\n")
    write_json(args.json, times_json(times, s.roots))
    return 0


def times_json(times, roots):  # type: ignore[no-untyped-def]
    from wcetfit.model import hexaddr

    def row(r):  # type: ignore[no-untyped-def]
        return [None if x != x else int(x) for x in r]   # NaN (discarded) -> null

    first = next(iter(times.values()))
    return {
        "schema": "wcetfit.times/1",
        "method": first.method, "tsc_hz": first.tsc_hz, "seed": first.seed,
        "environment": first.environment,
        "functions": [{"name": n, "address": hexaddr(roots[n]),
                       "indices": [int(i) for i in ts.indices],
                       "ticks": [row(r) for r in ts.ticks], "migrated": ts.migrated}
                      for n, ts in times.items()],
        "failures": [{"index": f.index, "kind": f.kind, "message": f.message,
                      "arguments": f.arguments} for f in first.failures],
    }


def _straight_line(s, args):  # type: ignore[no-untyped-def]
    from wcetfit.cli.common import write_json
    from wcetfit.cli.progress import progress_bars
    from wcetfit.timing.run import run_straight_line
    from wcetfit.model import hexaddr
    from wcetfit.timing.tsc import ticks_to_ns, tsc_frequency

    if args.straight_line < 2:
        from wcetfit.errors import WcetfitError
        raise WcetfitError("--straight-line needs M >= 2 calls per region")
    hz = tsc_frequency().hz
    with progress_bars() as update:
        rows, failures, method = run_straight_line(
            s.target, s.roots, kmax=args.straight_line,
            progress=lambda d, t: update("time", d, t))
    out = sys.stdout if args.json != "-" else sys.stderr
    for name, per in rows.items():
        out.write(f"{name}: straight-line fit over k = 1..{args.straight_line} back-to-back "
                  f"calls, method {method}\n")
        for i, (slope, se, icpt, rej) in sorted(per.items())[:20]:
            out.write(f"  input {i}: {slope:.1f} ± {se:.1f} ticks per call "
                      f"({ticks_to_ns(slope, hz):.1f} ns), ε {icpt:.1f} ticks\n")
        if len(per) > 20:
            out.write(f"  … {len(per) - 20} more inputs (see --json)\n")
    for f in failures:
        out.write(f"  {f.describe()}\n")
    write_json(args.json, {
        "schema": "wcetfit.times/1", "mode": "straight-line", "method": method, "tsc_hz": hz,
        "kmax": args.straight_line,
        "functions": [{"name": n, "address": hexaddr(s.roots[n]),
                       "indices": sorted(per),
                       "slope_ticks": [per[i][0] for i in sorted(per)],
                       "slope_se_ticks": [per[i][1] for i in sorted(per)],
                       "intercept_ticks": [per[i][2] for i in sorted(per)]}
                      for n, per in rows.items()],
        "failures": [{"index": f.index, "kind": f.kind, "message": f.message,
                      "arguments": f.arguments} for f in failures]})
    return 0
