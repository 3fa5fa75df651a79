"""`wcetfit check`: the bound against fresh inputs, timed now (wcetfit.wcet.fresh)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import Any, Iterator

# exit status when a call of the function's own time was above the bound (2 stays bad
# input, as everywhere)
EXIT_NOT_COVERED = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check", help="time fresh inputs and compare every call with the bound",
        description="Time inputs the bound was not made from (another seed: they do not "
                    "join the fit) and compare every call with the WCET bound of the "
                    "stored measurements; count them too, and compare each loop they run "
                    "with the loop bounds the bound rests on.  Calls the bound's own rule "
                    "takes for interrupts are counted and left out.  A call above the bound "
                    "is told apart by cause: the machine slower than the speed the bound "
                    "covers (every call below it at that speed), or an input the model "
                    "misses.  Exit status 0: every call covered and every loop within the "
                    "bound's; 1: some call above the bound, or a loop run further than the "
                    "bound takes; 2: bad input.")
    p.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    p.add_argument("--inputs", type=int, metavar="N",
                   help="fresh inputs to time (default: [measure] inputs)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="their seed (default: a new one each run, printed); a seed already "
                        "checked reuses its stored times, which are then not of this session")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="timed calls per input (default: [measure] repeats)")
    p.add_argument("--adopt", action="store_true",
                   help="make the fresh inputs the bound misses (a call above it at the "
                        "machine speed it covers) inputs of the training: counted and timed "
                        "now, kept with the searched inputs; the next report bounds them")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' = stdout)")
    from wcetfit.locks import add_wait_option
    add_wait_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.cli.common import check_output_path, write_json
    from wcetfit.errors import TargetError
    from wcetfit.locks import lock_target_store

    check_output_path(args.json)
    for name in ("inputs", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise TargetError(f"--{name} must be at least 1, found {value}")
    if args.seed is not None and args.seed < 0:
        raise TargetError(f"--seed must be >= 0, found {args.seed}")
    _lock = lock_target_store(args.target, wait=not args.no_wait)  # held to the end
    from wcetfit.target import load_target
    training = load_target(args.target).measure.seed      # refused before any analysis
    if args.seed == training:
        raise TargetError(f"--seed {args.seed} is the seed of the measurements the bound is "
                          f"made from ([measure] seed): a check needs inputs of another "
                          f"seed (without --seed, a new one)")
    seed = args.seed if args.seed is not None else _new_seed(training)
    session, bounds, warned, premises, reports = _bounds(args.target)
    from wcetfit.errors import MeasurementError
    try:
        checks, earlier, failures, arguments = _time_and_check(args, seed, bounds)
    except MeasurementError as exc:
        # the fresh inputs' seed, which nothing printed yet: what was timed is stored
        # under it, and --seed goes on from there
        more = f" --inputs {args.inputs}" if args.inputs is not None else ""
        raise type(exc)(f"{exc} (fresh inputs of seed {seed}: `wcetfit check --seed "
                        f"{seed}{more}` goes on with what is stored)") from exc
    beyond, left_out = _beyond_bounds(args, seed, reports)
    out = sys.stdout if args.json != "-" else sys.stderr
    from wcetfit.search.adopt import adopted_before
    for root, check in checks.items():
        out.write(describe(check, bounds[root][2], earlier=earlier.get(root, 0),
                           failures=failures[root], arguments=arguments[root],
                           adopted=adopted_before(session, root, seed)))
        for text in premises.get(root, ()):
            out.write(f"  {text}\n")
        found = beyond.get(root, ())
        if found:
            # below the bound in time, beyond it in the counts: the bound does not hold for
            # them, whatever their time (libxxhash's XXH64: a loop bounded at 6 (observed)
            # ran 127 times on a fresh input, and the check said "covered")
            out.write(f"  BEYOND THE BOUND'S LOOP BOUNDS: {len(found)} loop(s) ran further "
                      f"on fresh inputs than the bound takes; the bound does not hold for "
                      f"those inputs, whatever their time:\n")
            for b in found[:6]:
                out.write(f"    - {b.describe()}\n")
            if len(found) > 6:
                out.write(f"    - … and {len(found) - 6} more (--json lists them)\n")
            out.write(f"    → `wcetfit check {args.target} --seed {seed}{_inputs_option(args)} "
                      f"--adopt` makes those inputs inputs of the training (the next bound "
                      f"takes their loops); or give the loops [loops] facts\n")
        ran = left_out.get(root, ())
        if ran:
            # (libm's lgamma: fresh input 55 ran two blocks no training input ran, which
            # the bound leaves out, and the check said "covered")
            out.write(f"  BEYOND THE BOUND'S BLOCKS: fresh inputs ran blocks no training "
                      f"input ran, which the bound leaves out ([wcet] unreached = "
                      f"\"observed\"); the bound does not hold for those inputs, whatever "
                      f"their time:\n")
            for b in ran[:6]:
                out.write(f"    - {b.describe()}\n")
            out.write(f"    → `wcetfit check {args.target} --seed {seed}{_inputs_option(args)} "
                      f"--adopt` makes those inputs inputs of the training (the next bound "
                      f"costs their blocks)\n")
        if warned.get(root):
            # (the count of lines the analysis logged, not of the report's warnings: a user
            # read "2 warning(s)" here and "Warnings (104)" in the report)
            out.write(f"  (the analysis logged {warned[root]} warning line(s), held back "
                      f"here; the report lists all its warnings: `wcetfit report "
                      f"{args.target}`)\n")
    adopted = _adopt(args, session, seed, checks, out, beyond, left_out) if args.adopt \
        else {}
    write_json(args.json, {"schema": "wcetfit.check/1", "seed": seed,
                           "checks": [dict(c.to_dict(), slowest_arguments=arguments[r],
                                           adopted={str(i): k for i, k in
                                                    adopted.get(r, {}).items()},
                                           loops_beyond=[b.to_dict()
                                                         for b in beyond.get(r, ())],
                                           blocks_beyond=[b.to_dict()
                                                          for b in left_out.get(r, ())])
                                      for r, c in checks.items()]})
    ok = all(c.covered and c.calls for c in checks.values()) and \
        not any(beyond.get(r) or left_out.get(r) for r in checks)
    return 0 if ok else EXIT_NOT_COVERED


def _inputs_option(args: argparse.Namespace) -> str:
    """" --inputs N" as the check was given it: the same fresh inputs again, not more."""
    return f" --inputs {args.inputs}" if args.inputs is not None else ""


def _beyond_bounds(args: argparse.Namespace, seed: int, reports: dict
                  ) -> tuple[dict, dict]:
    """Per measured function, the loops fresh inputs ran further than its bound takes,
    and the blocks the bound leaves out that they ran (wcetfit.wcet.premises): the fresh
    inputs counted (the count run, stored under their seed), their counts against the
    report's loop bounds and never-executed blocks."""
    from wcetfit.cli.progress import progress_bars
    from wcetfit.count.run import run_counts
    from wcetfit.pipeline import open_session
    from wcetfit.errors import NothingMeasured
    from wcetfit.wcet.premises import blocks_beyond, loops_beyond

    fs = open_session(args.target, seed=seed, inputs=args.inputs, repeats=args.repeats)
    try:
        with progress_bars() as update:
            counts = run_counts(fs.target, fs.store, fs.model, list(fs.roots),
                                progress=lambda d, t: update("count", d, t))
    except NothingMeasured as exc:
        # the timing check stands on its own: what could not be counted is said, and
        # the loops are not compared
        logging.getLogger(__name__).warning("the fresh inputs' loops and blocks are not "
                                            "compared with the bound's: %s", exc)
        return {}, {}
    return ({root: loops_beyond(reports[root].functions, fs.model, counts[root])
             for root in reports if root in counts},
            {root: blocks_beyond(reports[root].functions, counts[root])
             for root in reports if root in counts})


def _adopt(args: argparse.Namespace, session: Any, seed: int, checks: dict,
           out: Any, beyond: dict | None = None, left_out: dict | None = None) -> dict:
    """``--adopt``: the fresh inputs each function's bound missed, and those that ran a
    loop further than it takes (``beyond``), counted and timed now and kept among the
    training's searched inputs (wcetfit.search.adopt); what became of them, said.
    Returns function → {fresh input: its search input number}."""
    from wcetfit.numbering import input_label
    from wcetfit.search.adopt import adopt_fresh

    done: dict = {}
    for root, c in checks.items():
        loops = sorted(({i for b in (beyond or {}).get(root, ()) for i in b.numbers}
                        | {i for b in (left_out or {}).get(root, ()) for i in b.numbers})
                       - set(c.missed_inputs))
        wanted = tuple(c.missed_inputs) + tuple(loops)
        if not wanted:
            out.write(f"{root}: --adopt: nothing to adopt, no call is above the bound at the "
                      f"machine speed it covers, no loop beyond its bounds and no block it "
                      f"leaves out ran\n")
            continue
        a = adopt_fresh(session, root, seed, wanted, wait=not args.no_wait,
                        missed_calls=c.missed_calls)
        done[root] = a.numbers
        if a.before:
            shown = ", ".join(f"fresh input {i} ({input_label(k)})"
                              for i, k in list(a.before.items())[:4])
            out.write(f"{root}: --adopt: {len(a.before)} of them adopted before, not again: "
                      f"{shown}\n")
            if not a.numbers:
                continue
        pairs = ", ".join(f"fresh input {i} → {input_label(k)}"
                          for i, k in list(a.numbers.items())[:4])
        more = " …" if len(a.numbers) > 4 else ""
        what = " and ".join(x for x in (
            f"{len(c.missed_inputs)} the bound missed" if c.missed_inputs else "",
            f"{len(loops)} that ran a loop beyond its bounds or blocks it left out"
            if loops else "") if x)
        out.write(f"{root}: adopted {len(a.numbers)} of the fresh input(s) ({what}) into the "
                  f"training ({pairs}{more}): `wcetfit report {args.target}` bounds them; "
                  f"check again with a new seed\n")
        for f in a.failures[:3]:
            out.write(f"  left out, failed when counted or timed: {f.describe()}\n")
    return done


def _new_seed(training: int) -> int:
    """A seed for inputs nobody timed: random, never the training seed."""
    import secrets

    seed = training
    while seed == training:
        seed = secrets.randbelow(2**31)
    return seed


@contextlib.contextmanager
def _warnings_held_back() -> Iterator[list]:
    """The analysis's warnings are the report's (``wcetfit report`` shows them, and the
    analysis cache keeps them for it); a check prints its verdict.  Without -v they are
    held back from the terminal only (a filter on its handlers, not the logger's level, so
    that the cache still records them); the list collects what was held back."""
    held: list = []
    logger = logging.getLogger("wcetfit")
    if logger.getEffectiveLevel() < logging.WARNING:       # -v: the user asked for more
        yield held
        return

    def below_errors(record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            held.append(record)
            return False
        return True
    handlers = list(logger.handlers)
    for h in handlers:
        h.addFilter(below_errors)
    try:
        yield held
    finally:
        for h in handlers:
            h.removeFilter(below_errors)


def _bounds(target: str) -> tuple[Any, dict[str, tuple[float, float, float | None]],
                                  dict[str, int], dict[str, list[str]], dict[str, Any]]:
    """The training's session (``--adopt`` joins its rows); per measured function: (bound
    ticks, the machine speed it covers, TSC rate), from the analysis of the stored
    measurements (the report's, cached as ``report`` keeps it); per function, how many of
    the analysis's warnings were held back."""
    from wcetfit.analysis_cache import cached_report
    from wcetfit.cli.report import report_cache_extra
    from wcetfit.errors import WcetfitError
    from wcetfit.cli.progress import still_working
    from wcetfit.pipeline import analyze_stage, open_session, stored_measurements, \
        with_stored_repeats

    s = with_stored_repeats(open_session(target))
    bounds, warned, premises, reports = {}, {}, {}, {}
    for root in s.target.functions:
        counts, times = stored_measurements(s, root)
        with _warnings_held_back() as held:
            with still_working(f"analysing {root} (fit, bound, report)"):
                report, _ = cached_report(s, root,
                                          lambda: analyze_stage(s, root, counts, times),
                                          extra=report_cache_extra(None))
        warned[root] = len(held)
        w = report.functions[0].wcet
        if w.ipet_ticks is None:
            raise WcetfitError(f"{root}: no WCET bound to check ({w.error or 'no result'}): "
                               f"`wcetfit report {target}` says why")
        speed = float((w.dispersion_factors or {}).get("machine_speed", 1.0))
        bounds[root] = (float(w.ipet_ticks), speed, report.tsc_hz)
        premises[root] = bound_premises(report)
        reports[root] = report
    return s, bounds, warned, premises, reports


def bound_premises(report: Any) -> list[str]:
    """What the bound covers, as its report says, that fresh inputs of the same generate()
    cannot test: the one path every training input ran, the blocks none ran.  libuuid's
    uuid_parse on printable text: every input rejected at the length test, "covered" here
    with nothing else said, and valid UUIDs took longer than the bound."""
    from wcetfit.report import reach_advice

    fr = report.functions[0]
    out = []
    if fr.inputs_one_path:
        ran = sum(1 for b in fr.blocks if b.executed)
        out.append(f"the bound is of the one path every training input ran ({ran} of "
                   f"{len(fr.blocks)} blocks of {fr.name}); fresh inputs of the same "
                   f"generate() run it too, and a call that takes another path is not "
                   f"covered by it (the report's warnings say how to vary the inputs)")
    never = sum(1 for f in report.functions for b in f.blocks if not b.executed)
    if never and not fr.inputs_one_path:
        total = sum(len(f.blocks) for f in report.functions)
        out.append(f"{never} of {total} blocks no training input ran are left out of the "
                   f"bound; fresh inputs of the same generate() rarely run them ("
                   f"{reach_advice(report.reach_refusal, 'inputs that do')})")
    return out


def _time_and_check(args: argparse.Namespace, seed: int,
                    bounds: dict[str, tuple[float, float, float | None]]) -> tuple[dict, set, dict]:
    """Time the fresh inputs (stored under their seed) and check each function's calls;
    also the functions whose fresh times were already stored (timed in an earlier run),
    and each function's failed fresh inputs, described."""
    import numpy as np

    from wcetfit.cli.progress import progress_bars
    from wcetfit.measurements import load_times
    from wcetfit.pipeline import open_session
    from wcetfit.timing.run import resolve_method, run_times
    from wcetfit.timing.speed import call_positions
    from wcetfit.wcet.fresh import check_fresh

    fs = open_session(args.target, seed=seed, inputs=args.inputs, repeats=args.repeats)
    method, _ = resolve_method(fs.target)
    m = fs.target.measure
    # how many of the fresh inputs each function had timed in an earlier run (a check of
    # the same seed with more --inputs times the rest now: "500 … stored by an earlier
    # check" where 300 were timed in this one)
    earlier: dict[str, int] = {}
    for root in bounds:
        old = load_times(fs.store, root, seed, method, m.repeats, warmup=m.warmup)
        if old is not None:
            done = old.done if old.done is not None else np.isfinite(old.ticks)
            earlier[root] = int(np.count_nonzero(done.all(axis=1)
                                                 & (old.indices < m.inputs)))
    with progress_bars() as update:
        times = run_times(fs.target, fs.store, fs.roots, wait=not args.no_wait,
                          progress=lambda d, t: update("time", d, t))
    from wcetfit.search.candidates import describe_input
    checks, failures, arguments = {}, {}, {}
    for root, (bound, speed, hz) in bounds.items():
        ts = times[root]
        positions = call_positions(ts.indices, ts.ticks.shape[1], ts.environment)
        checks[root] = check_fresh(root, seed, ts.indices, ts.ticks, bound_ticks=bound,
                                   bound_speed=speed, tsc_hz=hz or ts.tsc_hz,
                                   failed_inputs=tuple(f.index for f in ts.failures),
                                   positions=positions, load_warning=(
                                       (ts.environment or {}).get("load") or {}).get("warning"))
        failures[root] = tuple(f.describe() for f in ts.failures)
        # the slowest call's input in short, what the user makes more inputs like
        slowest = checks[root].slowest
        arguments[root] = (describe_input(fs.target, root, slowest.input)
                           if slowest is not None else None)
    return checks, earlier, failures, arguments


def describe(check: Any, hz: float | None, *, earlier: int = 0,
             failures: tuple[str, ...] = (), arguments: str | None = None,
             adopted: Any = None) -> str:
    """The check in a few lines: what was timed, covered or not and why, the slowest call,
    the machine's speed against the bound's, what to do, and the fresh inputs that
    failed (``failures``: their descriptions).  ``earlier``: how many of the fresh inputs
    an earlier run had timed."""
    from wcetfit.report._format import both
    from wcetfit.wcet.fresh import speed_to_declare

    c = check
    when = ("stored by an earlier check" if earlier >= c.inputs else
            f"timed now ({earlier:,} of them stored by an earlier check)" if earlier else
            "timed now")
    some = 0 < earlier < c.inputs
    failed = (f" ({len(c.failed_inputs):,} more failed, not timed: below)"
              if c.failed_inputs else "")
    lines = [f"{c.function}: {c.inputs:,} fresh inputs{failed} (seed {c.seed}) × {c.repeats} "
             f"calls {when}, against the bound {both(c.bound_ticks, hz)}"]
    if earlier:
        lines.append(f"  {'the stored' if some else 'those'} times are of that session's "
                     f"machine, not this one's (a new --seed times new inputs)")
    own = c.calls - c.interrupted
    left = f"; {c.interrupted:,} taken for interrupts, left out" if c.interrupted else ""
    if c.interrupted_above:
        # shown, not hidden, and on the verdict's own line: the rule is the bound's, and a
        # user who knows the machine was quiet reads these as calls the bound does not
        # hold for (liblzma's encoder: "61 of them above the bound" at the end of a line of
        # 400 characters that began "covered")
        worst = c.slowest_interrupted
        left += (f", {c.interrupted_above:,} of them ABOVE the bound (the slowest "
                 f"{both(worst.ticks, hz)}, fresh input {worst.input})")
    if not c.calls:
        lines.append("  nothing compared: no call was timed")
    elif c.covered:
        lines.append(f"  covered: every one of the {own:,} calls of the function's own time "
                     f"is below the bound{left}")
    else:
        lines.append(f"  NOT COVERED: {c.above:,} of {own:,} calls of the function's own time "
                     f"above the bound{left}")
    if c.calls and c.interrupted:
        lines.append("    (taken for interrupts, as the bound takes them: far from their "
                     "input's other calls and at least 500 ns above their median, or "
                     "preempted: over twice their input's fastest call and 100 µs above it)")
    if c.calls and c.unresolved:
        # read above the bound by at most one TSC step: the timer cannot tell them from
        # calls at the bound, said so that nobody reads them as covered with room
        lines.append(f"  {c.unresolved:,} call(s) read above the bound by no more than one "
                     f"TSC step ({c.quantum_ticks:g} ticks), the timer's resolution: not told "
                     f"apart from calls at the bound, not counted above it")
    if c.slowest is not None:
        lines.append(f"  slowest call: {both(c.slowest.ticks, hz)}, fresh input "
                     f"{c.slowest.input}; bound / slowest = {c.bound_ticks / c.slowest.ticks:.2f}")
        if arguments:
            lines.append(f"    arguments {arguments}")
    if c.fresh_speed is not None:
        run = "that" if earlier and not some else "this"
        lines.append(f"  machine speed: {run} run's slowest period "
                     f"×{c.fresh_speed:.2f} its fast end; the bound covers ×{c.bound_speed:.2f}")
    if c.slower_machine:
        lines.append(f"  every call above the bound is below it slowed to ×{c.bound_speed:.2f} "
                     f"(the slowest call then {both(c.slowest.at_bound_speed, hz)}): the "
                     f"machine ran slower than the bound was made for, the model held")
        declare = speed_to_declare(c)
        if declare is not None:
            lines.append(f"  → to cover such periods, declare [wcet] machine_speed = "
                         f"{declare:g} in wcetfit.toml (the bound grows with it)")
    # (before the load's diagnosis: png_get_uint_32's one call above the bound was "the
    # model misses those inputs, or the machine was slower" in one check and "not an input
    # the model misses" when the same stored times were read again without the load)
    elif c.above and c.missed_inputs and \
            set(c.single_call_inputs) >= set(int(i) for i in c.missed_inputs):
        # each a single call of an input whose other calls are below the bound: the
        # calls' excess beyond the bound's single-call factor, not a model miss (libtasn1's
        # asn1_get_length_der, a 40 ns function: one call of 1,248 ticks among 52–104,
        # read as "the model misses those inputs", and --adopt taught the fit nothing)
        worst = max(c.missed_calls, key=lambda m: m.at_bound_speed, default=None)
        which = (f" (fresh input {worst.input}: {both(worst.ticks, hz)})" if worst else "")
        lines.append(f"  {c.above_at_bound_speed:,} of them are above it at the bound's own "
                     f"speed, each a single call of an input whose calls' median is below "
                     f"it{which}: one call's excess beyond the bound's factor for single "
                     f"calls (a cache or TLB refill, an event on the machine), not an input "
                     f"the model misses"
                     + (f" ({c.load_warning.split(': the times', 1)[0]})"
                        if c.load_warning else ""))
        lines.append(f"  → the factor for single calls rests on the training's calls: more "
                     f"[measure] repeats see more such calls, [wcet] exceedance sets how rare "
                     f"a call the bound covers; `--adopt` would hold the bound above these "
                     f"calls without teaching the fit anything")
    elif c.above and c.load_warning:
        # a machine slower throughout: the speed is followed against the run's own fast
        # end, which the other workload slowed too (liblzma's lzma_crc32, checked beside
        # another session's test suite: 4 calls up to 27 % above the bound, speed ×1.01)
        shared = c.load_warning.split(": the times", 1)[0]
        lines.append(f"  {c.above_at_bound_speed:,} of them are above it at the bound's own "
                     f"speed: the model misses those inputs, or the machine was slower all "
                     f"along ({shared}; the speed is followed against the run's own fast "
                     f"end, which that slows too)")
        lines.append(f"  → check again on a quiet machine, with a new seed; calls still above "
                     f"the bound are inputs the model misses: `--adopt` makes them inputs of "
                     f"the training, and more [measure] inputs or [search] budget finds more "
                     f"like fresh input {c.slowest.input if c.slowest else '?'} (seed "
                     f"{c.seed})")
    elif c.above and adopted and c.missed_inputs and \
            all(int(i) in adopted for i in c.missed_inputs):
        # an earlier --adopt of this seed made them training inputs, and the bound made
        # with them still misses these calls: adopting them again adds nothing
        from wcetfit.numbering import input_label
        ins = ", ".join(f"fresh input {i} ({input_label(adopted[int(i)])})"
                        for i in list(c.missed_inputs)[:3])
        lines.append(f"  {c.above_at_bound_speed:,} of them are above it at the bound's own "
                     f"speed, all of inputs already in the training ({ins}): their calls "
                     f"there, timed again, stayed below these; a single call's excess the "
                     f"training did not see again")
        lines.append(f"  → a run with more repeats ([measure] repeats) sees more such calls; "
                     f"[wcet] exceedance and machine_speed set how rare a call the bound "
                     f"covers; check with a new seed")
    elif c.above:
        lines.append(f"  {c.above_at_bound_speed:,} of them are above it at the bound's own "
                     f"speed: the model misses those inputs (costs that depend on the data, "
                     f"or a path the training inputs did not try)")
        lines.append(f"  → the bound does not hold for inputs like fresh input "
                     f"{c.slowest.input if c.slowest else '?'} (seed {c.seed}): `wcetfit "
                     f"check --seed {c.seed} --inputs {c.inputs + len(c.failed_inputs)} "
                     f"--adopt` makes the ones it missed inputs of the "
                     f"training; raise [measure] inputs, or [search] budget, for more like "
                     f"them; then check with a new seed")
    elif c.load_warning:
        lines.append(f"  the run shared the machine: "
                     f"{c.load_warning.split(': the times', 1)[0]}")
    for text in failures[:5]:
        lines.append(f"  failed, not timed: {text}")
    if len(failures) > 5:
        lines.append(f"  … {len(failures) - 5} more fresh inputs failed")
    return "\n".join(lines) + "\n"
