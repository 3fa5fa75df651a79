"""`wcetfit split`: iterative block splitting with timing probes at block boundaries."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, TextIO


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "split", help="separate co-executed blocks with timing probes, round by round",
        description="Show the groups of blocks that whole-call timings cannot tell apart, "
                    "and propose timing probes that can (the clock stopped at the first "
                    "arrival at a block, or started there), best first by the rank they add "
                    "to the fit.  Without --apply or --auto it prints the current groups and "
                    "the proposals only.  --apply measures them and refits jointly; "
                    "--auto repeats rounds until every block is estimable alone or no probe "
                    "helps.  Rounds are kept in the target's store (--list, --drop N).  "
                    "Splitting uses the block trace of every input and the timing run: "
                    "what the store lacks (the traces, after `wcetfit analyze`) is measured "
                    "first and stored.")
    p.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    p.add_argument("--function", help="measured function (default: the target's first)")
    p.add_argument("--inputs", type=int, metavar="N",
                   help="number of generated inputs (default: those of the stored timing "
                        "run, as `wcetfit analyze --inputs N` measured them; without one, "
                        "[measure] inputs)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the inputs (default: [measure] seed)")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="timed calls per input, as in the timing run (default: [measure] "
                        "repeats)")
    p.add_argument("--apply", action="store_true",
                   help="measure the proposed probes (one round), then refit jointly")
    p.add_argument("--auto", action="store_true",
                   help="apply rounds until every block is estimable alone or no probe adds "
                        "rank (at most --max-rounds)")
    p.add_argument("--at", action="append", default=[], metavar="0xADDR",
                   help="split the block holding this instruction address there and probe "
                        "the cut (repeatable); measured with --apply/--auto")
    p.add_argument("--list", action="store_true", help="list the stored rounds (measures nothing)")
    p.add_argument("--drop", type=int, metavar="N",
                   help="drop round N: the probes it introduced leave every later fit")
    p.add_argument("--max-probes", type=int, default=8, metavar="K",
                   help="probes per round (default 8)")
    p.add_argument("--max-rounds", type=int, default=10, metavar="R",
                   help="rounds at most with --auto (default 10)")
    p.add_argument("--no-entry-probe", action="store_true",
                   help="do not probe at the function entry (the probe overheads ε and the "
                        "always-once entry block then stay together)")
    p.add_argument("--no-check", action="store_true",
                   help="skip the per-input differential check (same return value and memory "
                        "with the probe as without); faster, not recommended")
    p.add_argument("--json", metavar="FILE", help="write wcetfit.split/1 JSON ('-' = stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from wcetfit.split import configs as CF, rounds as RD
    from wcetfit.split import workflow as R
    from wcetfit.cli.common import check_output_path, write_json
    from wcetfit.errors import WcetfitError
    from wcetfit.model import parse_addr
    from wcetfit.pipeline import open_session

    check_output_path(args.json)
    out: TextIO = sys.stdout if args.json != "-" else sys.stderr
    t_start = time.monotonic()
    s = open_session(args.target, seed=args.seed, repeats=args.repeats, inputs=args.inputs)
    from wcetfit.pipeline import check_facts
    check_facts(s)                  # a misspelt fact refused before measuring, not after
    function = args.function or s.target.functions[0]
    if function not in s.roots:
        raise WcetfitError(f"{function} is not a measured function of {args.target} "
                           f"(measured: {', '.join(s.roots)})")
    if args.inputs is None:
        # the inputs the analysis was made with: after `analyze --inputs 200` on a target
        # of 500, the count run with traces counted 500 inputs, 300 of them never timed
        stored = R.stored_generated_inputs(s, function)
        if stored and stored != s.target.measure.inputs:
            out.write(f"{function}: splitting the {stored} inputs of the stored timing run "
                      f"(wcetfit.toml's [measure] inputs = {s.target.measure.inputs}; "
                      f"--inputs N chooses)\n")
            s = R.with_inputs(s, stored)

    if args.drop is not None:
        ok = RD.drop_round(s.store, args.drop)
        if not ok:
            raise WcetfitError(f"there is no round {args.drop} in {s.store.directory}")
        out.write(f"dropped round {args.drop}\n")

    if args.list:
        rounds = RD.load_rounds(s.store, function, s.target.measure.seed)
        _print_rounds(rounds, out)
        write_json(args.json, RD.split_json(s.target.directory, function, rounds))
        return 0
    if args.drop is not None and not (args.apply or args.auto or args.at):
        rounds = RD.load_rounds(s.store, function, s.target.measure.seed)
        write_json(args.json, RD.split_json(s.target.directory, function, rounds))
        return 0

    _gather(s, function, out)
    st = R.load_state(s, function)
    for text in args.at:
        try:
            addr = parse_addr(text)
        except ValueError:
            raise WcetfitError(f"--at {text!r}: not an address") from None
        lay = R.split_at(st, addr)
        out.write(f"split at {text}: probe {lay.probe.key} ({lay.probe.mechanism})\n")

    _res, _js, current = R.fit(st)
    source = (f"round {st.latest.number}'s session" if st.latest is not None
              else "the timing run")
    out.write(f"{function}: {len(st.count_indices)} inputs with block traces, "
              f"{len(st.rounds)} stored round(s), {len(st.columns.segments)} blocks; "
              f"rows from {source}\n")
    _print_fit(current, out, "current fit")
    plan = R.make_plan(st, max_probes=args.max_probes, entry=not args.no_entry_probe)
    at_probes = [st.layouts[CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, parse_addr(t)).key].probe
                 for t in args.at]
    _print_plan(plan, out, at_probes)

    doc_rounds: list[dict[str, Any]] = []
    if args.apply or args.auto:
        rounds_left = args.max_rounds if args.auto else 1
        previous = current
        probes = list(at_probes) + [p.probe for p in plan.proposals
                                    if p.probe.key not in {q.key for q in at_probes}]
        probes = probes[:max(args.max_probes, len(at_probes))]
        at_splits = [parse_addr(t) for t in args.at]
        while rounds_left > 0 and probes:
            out.write(f"\nround: measuring {len(probes)} new probe(s): "
                      f"{', '.join(p.key for p in probes)}\n")
            from wcetfit.cli.progress import progress_bars
            with progress_bars() as update:
                rnd, summary, cmp = R.apply_round(
                    st, probes, splits=at_splits, previous=previous,
                    check=not args.no_check, progress=lambda key, d, t: update(key, d, t))
            at_splits = []
            _print_round_result(rnd, summary, cmp, out)
            doc_rounds.append({"round": rnd.number, "comparison": cmp})
            rounds_left -= 1
            probes, why = R.next_probes(st, summary, max_probes=args.max_probes,
                                        entry=not args.no_entry_probe)
            previous = summary
            if not args.auto:
                break
            if not probes:
                out.write(f"stop: {why}\n")
            else:
                out.write(f"next: {why}\n")
        if not (args.apply or args.auto) or not doc_rounds:
            out.write("nothing to measure: no probe adds rank\n")
        current = previous
        plan = R.make_plan(st, max_probes=args.max_probes, entry=not args.no_entry_probe)
    elapsed = time.monotonic() - t_start
    out.write(f"time spent: {elapsed:.1f} s\n")
    write_json(args.json, RD.split_json(s.target.directory, function, st.rounds, current, plan,
                                        {"applied": doc_rounds, "time_s": elapsed}))
    return 0


def _gather(s: Any, function: str, out: TextIO) -> None:
    """Measure what splitting needs and the store lacks, with the other commands' progress
    bars, and say so: counting every input again takes as long as the count run did."""
    from wcetfit.cli.progress import progress_bars
    from wcetfit.split import workflow as R

    missing = R.missing_measurements(s, function)
    if not missing:
        return
    m = s.target.measure
    if R.MISSING_TRACES in missing:
        out.write(f"{function}: no block traces stored; running the count run with traces "
                  f"on the {m.inputs} inputs\n")
    if R.MISSING_TIMES in missing:
        out.write(f"{function}: no whole-call times stored; running the timing run "
                  f"({m.inputs} inputs, {m.repeats} repeats)\n")
    with progress_bars() as update:
        done = R.gather_measurements(s, function, missing, progress=update)
    if "count" in done:
        cs = done["count"]
        out.write(f"  {len(cs.trace or {})} inputs counted with block traces (stored)"
                  + (f"; {len(cs.failures)} failed" if cs.failures else "") + "\n")
        for f in cs.failures:
            out.write(f"  {f.describe()}\n")
    if "time" in done:
        ts = done["time"]
        out.write(f"  {len(ts.indices)} inputs timed (stored)"
                  + (f"; {len(ts.failures)} failed" if ts.failures else "") + "\n")


# --- printing ----------------------------------------------------------------------------

def _fmt(v: Any, ci: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.1f} ± {ci:.1f}" if ci is not None else f"{v:.1f}"


def _below_zero(combination: dict[str, Any]) -> str:
    """What to add to a sum of times the fit put below zero.  The rounds' fit holds no cost
    at zero or above (a biased probe shows by the impossible costs its rows force), so a
    sum of times can come out below zero: within its interval that is zero to the data's
    precision, beyond it no machine's time (libxxhash's XXH64: "0x22a8 + 0x22fa = -9.174 ±
    11.65 ticks" printed with no word)."""
    if not combination.get("sum_of_times"):
        return ""
    return _negative_time(combination.get("value_ticks"), combination.get("ci95_ticks"),
                          "a sum of times")


def _negative_time(value: float | None, ci: float | None, what: str) -> str:
    """What to add to a time (a block's cost, a sum of costs) printed below zero: within
    its interval, how far above zero the data allow it; beyond it, that no machine has it
    (libbsd's strlcpy: a block at -18.8 ± 5.6 ticks)."""
    if value is None or value >= 0.0:
        return ""
    if value + (ci or 0.0) >= 0.0:
        return f" — {what}, below zero only within its interval: at most {value + (ci or 0.0):.3g} ticks"
    return (f" — {what} below zero beyond its interval, a time no machine has: the probes' "
            "rows and the whole calls disagree about it (a time that depends on what ran "
            "before, or on the probe), not a cost to use")


def _print_fit(summary: dict[str, Any], out: TextIO, title: str) -> None:
    est = [b for b in summary["blocks"] if b["estimable"]]
    # the rounds' own fit, not the report's: unconstrained, on the rows of the rounds'
    # sessions, and no part of the bound (the same group read 155 ± 6.1 ticks here and
    # 144.7 ± 7.0 in the report, with no word of why)
    out.write(f"{title}: rank {summary['rank']} of {summary['unknowns']} unknowns; "
              f"{len(est)} of {len(summary['blocks'])} columns estimable alone "
              f"(split's own fit, costs not held ≥ 0; the report's costs and bound are "
              f"the timing run's fit)\n")
    # the groups of one block no input ran: one line (zstd's compressor: 1,755 of the
    # 2,016 lines of `split --auto`, repeated every round)
    unexecuted = [g for g in summary["groups"] if g["kind"] == "unexecuted"]
    if unexecuted:
        names = [b for g in unexecuted for b in g["blocks"]]
        out.write(f"  {len(names)} block(s) no input ran (unexecuted, no cost): "
                  f"{', '.join(names[:8])}{' …' if len(names) > 8 else ''}\n")
    for g in summary["groups"]:
        if g["kind"] == "unexecuted":
            continue
        blocks = ", ".join(g["blocks"])
        out.write(f"  group {g['id']} ({g['kind']}): {blocks}\n")
        for c in g["combinations"][:6]:
            # the fit's text holds the value
            out.write(f"      {c['text']}{_below_zero(c)}\n")
        if len(g["combinations"]) > 6:
            out.write(f"      … {len(g['combinations']) - 6} more combinations\n")


# the kinds of reason a point cannot be patched shown, most frequent first ("see --json
# for why" was all the survey's user got, for every point)
MAX_REASON_KINDS = 4


def _reason_kinds(reasons: dict[str, str]) -> list[tuple[int, str]]:
    """The reasons probe points cannot be patched, by kind (the reason with its addresses,
    instructions and figures taken out), most frequent first: (how many, one reason of
    that kind as given)."""
    kinds: dict[str, list[str]] = {}
    for reason in reasons.values():
        kind = re.sub(r"`[^`]*`", "`…`", reason)
        kind = re.sub(r"[\w.@]*\+?0x[0-9a-fA-F]+|\b\d+\b", "…", kind)
        kinds.setdefault(kind, []).append(reason)
    return sorted(((len(v), v[0]) for v in kinds.values()), key=lambda kv: -kv[0])


def _print_plan(plan: Any, out: TextIO, forced: list[Any]) -> None:
    if forced:
        out.write("requested probes: " + ", ".join(p.key for p in forced) + "\n")
    if not plan.proposals:
        out.write("proposals: none — no placeable probe adds rank\n")
    else:
        out.write(f"proposals (greedy, by net rank gain; nullity now {plan.nullity}):\n")
        for p in plan.proposals:
            newly = ", ".join(f"{a:#x}" for a in p.newly_estimable) or "-"
            out.write(f"  {p.probe.key:<22} {p.probe.mechanism:<8} +{p.rank_gain} rank, "
                      f"{p.new_unknowns} new unknown(s), net {p.net_gain:+d}; newly estimable: "
                      f"{newly}  ({p.reached} inputs reach it)\n")
        out.write("  after these: " + ("every executed block estimable alone\n"
                                       if plan.complete_after else "groups remain\n"))
    if plan.unprobeable:
        out.write(f"{len(plan.unprobeable)} probe point(s) cannot be patched:\n")
        for count, example in _reason_kinds(plan.unprobeable)[:MAX_REASON_KINDS]:
            out.write(f"  {count} like {example}\n")
        if len(_reason_kinds(plan.unprobeable)) > MAX_REASON_KINDS:
            out.write("  … (--json lists every point with its reason)\n")


def _print_round_result(rnd: Any, summary: dict[str, Any], cmp: dict[str, Any],
                        out: TextIO) -> None:
    out.write(f"round {rnd.number}: {len(rnd.probes)} probe(s) measured in {rnd.time_s:.1f} s\n")
    for n in rnd.notes:
        out.write(f"  note: {n}\n")
    for f in rnd.failures:
        out.write(f"  failure: {f['probe']} input {f['index']} {f['arguments']}: "
                  f"{f['kind']}: {f['message']}\n")
    for sep in cmp["separated"]:
        out.write(f"  separated group {sep['group']} ({', '.join(sep['blocks'])}): "
                  f"now alone {', '.join(sep['now_estimable']) or '-'}; "
                  f"in groups {sep['now_in_groups'] or '-'}\n")
    by = {b["address"]: b for b in summary["blocks"]}
    for a in cmp["newly_estimable"]:
        b = by[a]
        cost, ci = b["cost_ticks"], b["ci95_ticks"]
        out.write(f"  {a}: {_fmt(cost, ci)} ticks{_negative_time(cost, ci, 'its cost')}\n")
    for key in rnd.excluded:
        out.write(f"  left out: probe {key} (its rows disagree with the whole calls)\n")
    if rnd.baseline is not None:
        out.write("  estimates the whole calls alone determine, against this session's "
                  "whole calls: " + ("all agree within their intervals\n"
                                     if not cmp["disagreements"] else "\n"))
    for d in cmp["disagreements"]:
        out.write(f"  WARNING {d['address']}: {d['before']:.1f} from the whole calls, "
                  f"{d['after']:.1f} ticks in the joint fit (beyond the combined interval "
                  f"±{d['combined_ci95']:.1f})\n")
    _print_fit(summary, out, "fit after the round")


def _print_rounds(rounds: list[Any], out: TextIO) -> None:
    if not rounds:
        out.write("no rounds stored\n")
        return
    have = {r.number for r in rounds}
    for r in rounds:
        fit = r.fit or {}
        est = sum(1 for b in fit.get("blocks", []) if b["estimable"])
        stale = [n for n in r.based_on if n not in have]
        out.write(f"round {r.number} ({r.created}): {len(r.probes)} probe(s) "
                  f"[{', '.join(ct.probe.key for ct in r.probes)}], {r.time_s:.1f} s; fit "
                  f"after: rank {fit.get('rank', '?')}, {est} estimable alone, "
                  f"{len(fit.get('groups', []))} group(s)"
                  + (f" (computed with dropped round(s) {stale})" if stale else "") + "\n")
