"""`wcetfit calibrate`: validate the TSC fence methods on this machine and choose one."""

from __future__ import annotations

import argparse
import sys

# Kept in sync with wcetfit.timing.tsc.METHODS (not imported here: --help stays light).
METHOD_NAMES = ("lfence", "mfence", "cpuid", "rdtscp", "cpuid_inside")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="validate the TSC fence methods (Paoloni) and choose one",
        description="Measure empty regions and a resolution test with every TSC fence "
                    "method, pinned to one CPU; report Paoloni's validation statistics, "
                    "the TSC quantum and frequency, and the method chosen (with the reason).")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' = stdout)")
    p.add_argument("--method", choices=METHOD_NAMES,
                   help="use this method whatever the rule would choose")
    p.add_argument("--cpu", type=int, default=None,
                   help="CPU to measure on (default: the highest allowed one)")
    p.add_argument("--quick", action="store_true",
                   help="smaller ensembles (about 10x faster, less stable statistics)")
    from wcetfit.locks import add_wait_option
    add_wait_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.timing.calibrate import Settings, calibrate
    from wcetfit.cli.common import check_output_path, write_json

    from wcetfit.locks import timing_lock

    check_output_path(args.json)
    # Under the machine's timing slot, like every timing run: a calibration measured while
    # another run times calls (or that disturbs one) would validate the wrong figures.
    with timing_lock("none (a calibration)", wait=not args.no_wait):
        cal = calibrate(override=args.method, cpu=args.cpu,
                        settings=Settings.quick() if args.quick else Settings())
    if args.json != "-":
        _print_table(cal, sys.stdout)
    write_json(args.json, cal.to_json())
    return 0


def _print_table(cal, out) -> None:  # type: ignore[no-untyped-def]
    from wcetfit.timing.tsc import ticks_to_ns

    env = cal.environment
    q = cal.quantum_ticks
    out.write(f"TSC {cal.tsc_hz / 1e6:.3f} MHz ({env.tsc_hz_source}); quantum {q} ticks "
              f"({ticks_to_ns(q, cal.tsc_hz):.1f} ns); pinned to CPU {env.pinned_cpu}; "
              f"{env.cpu_model}, {env.kernel}\n")
    out.write("overheads are empty-region TSC ticks (not core cycles)\n\n")
    head = (f"{'method':<13}{'min':>7}{'median':>8}{'p99':>8}{'variance':>10}{'var(var)':>11}"
            f"{'var(min)':>10}{'max dev':>10}{'tick/smpl':>10}  {'resolution tick/iter':<22}"
            f"{'valid':<6}")
    out.write(head + "\n")
    for m in cal.methods:
        s = m.stats
        r = m.resolution
        res = (f"{r.ticks_per_iteration:.3f} ± {r.ticks_per_iteration_se:.3f}"
               f"{'' if r.monotone else ' !mono'}") if r else "-"
        mark = "*" if m.name == cal.chosen else " "
        out.write(f"{mark}{m.name:<12}{s.overhead_min:>7.0f}{s.overhead_median:>8.0f}"
                  f"{s.overhead_p99:>8.0f}{s.variance:>10.1f}{s.var_of_variances:>11.3g}"
                  f"{s.var_of_minima:>10.3g}{s.max_deviation:>10.3g}{m.cost_per_sample:>10.0f}  "
                  f"{res:<22}{'yes' if m.valid else 'no':<6}\n")
        for f in m.failures:
            out.write(f"{'':<13}- {f}\n")
        if s.n_migrated or s.n_outliers:
            out.write(f"{'':<13}  {s.n_migrated} migrated samples discarded, {s.n_outliers} "
                      f"interrupted samples left out of the variances\n")
    out.write(f"\nchosen: {cal.chosen}\n{cal.reason}\n")
