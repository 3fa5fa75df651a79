"""`wcetfit reach`: inputs for the blocks no stored input executed and the groups the
inputs left unseparated, by symbolic execution; found inputs are counted, timed and kept."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reach", help="symbolic execution towards unexecuted blocks and unseparated groups; "
                      "found inputs are counted, timed and kept",
        description="For each measured function, take the blocks (its own and its counted "
                    "callees') that no stored input executed, and the fit's groups the inputs "
                    "left unseparated, and explore paths from its entry with angr: integers "
                    "within the range the generated inputs span (a length argument also "
                    "within its buffer), buffers of the generated inputs' types, as long as "
                    "the longest stored one up to --max-buffer bytes, contents symbolic.  "
                    "Each input found is rebuilt, run by the count run (a block is reached "
                    "only when the real run executed it, a group separated only when the "
                    "real counts leave the measured rows' span), timed, and kept as an input "
                    "of the store (the fit, the WCET and the report use it from then on).  "
                    "Each block is reported reached (by which input), proven unreachable from "
                    "this entry under that template, or not found within the budget.")
    p.add_argument("target", help="target directory (with wcetfit.toml); run `wcetfit count` "
                                   "(and for the groups `wcetfit time`) first")
    p.add_argument("--budget", type=float, default=30.0, metavar="S",
                   help="seconds of exploration per function (default 30)")
    p.add_argument("--max-buffer", type=int, default=None, metavar="B",
                   help="longest buffer explored, in bytes (default 64)")
    p.add_argument("--no-keep", action="store_true",
                   help="count and time the inputs found, but do not store them")
    p.add_argument("--no-groups", action="store_true",
                   help="only the unexecuted blocks, not the unseparated groups")
    p.add_argument("--function", metavar="NAME", help="only this measured function")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' = stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.cli.common import check_output_path, write_json
    from wcetfit.errors import TargetError
    from wcetfit.pipeline import open_session
    from wcetfit.search.reaching import run_reach
    from wcetfit.search.witness import MAX_BUFFER

    if not args.budget > 0:
        raise TargetError(f"--budget must be positive, got {args.budget}")
    max_buffer = MAX_BUFFER if args.max_buffer is None else args.max_buffer
    if max_buffer < 1:
        raise TargetError(f"--max-buffer must be at least 1, got {args.max_buffer}")
    check_output_path(args.json)
    s = open_session(args.target)
    roots = [args.function] if args.function else list(s.target.functions)
    unknown = [r for r in roots if r not in s.target.functions]
    if unknown:
        raise TargetError(f"{unknown[0]} is not a measured function of {args.target} "
                          f"(those are: {', '.join(s.target.functions)})")
    out = sys.stdout if args.json != "-" else sys.stderr
    reports = []
    for root in roots:
        rep = run_reach(s, root, args.budget, keep=not args.no_keep, max_buffer=max_buffer,
                        groups=not args.no_groups)
        _print(out, s, root, rep, kept=not args.no_keep)
        reports.append(rep)
    write_json(args.json, {"schema": "wcetfit.reach/1",
                           "functions": [reach_json(r) for r in reports]})
    return 0


def _where(s: Any, fn: str, address: int) -> str:
    off = address - s.model.function(fn).address
    # (a block below its function's start, a cold part: "sub_105b0+-0xbfe3")
    return f"{fn}{'+' if off >= 0 else '-'}{abs(off):#x} ({address:#x})"


# the blocks named on one line of those not found for the same reason
MAX_NAMED = 6


def _print(out: Any, s: Any, root: str, rep: Any, *, kept: bool) -> None:
    from wcetfit.numbering import input_label
    from wcetfit.timing.tsc import ticks_to_ns

    never = len(rep.blocks)
    if rep.skipped:
        out.write(f"{root}: {never} block(s) never executed; {rep.skipped}\n")
        return
    # (groups of the fit's kind "observed" only: a group the CFG forces is no input's to
    # separate, and "no unseparated group" contradicted the report's "2 block(s) the
    # inputs do not separate"; `wcetfit split` separates those)
    if not never and not rep.groups:
        out.write(f"{root}: every block executed by the stored inputs, and no group the "
                  f"inputs could separate (groups the control flow forces are "
                  f"`wcetfit split`'s)\n")
        return
    out.write(f"{root}: {never} block(s) never executed, {len(rep.groups)} group(s) the "
              f"inputs could separate; explored {rep.seconds:.1f} s with {rep.template}\n")
    ticks = {int(k): t for k, t in zip(rep.kept, rep.ticks)}

    def timed(k: int) -> str:
        if k not in ticks or not any(t == t for t in ticks[k]):
            return ""
        import numpy as np
        med = float(np.nanmedian(ticks[k]))
        return f", {med:,.0f} ticks ({ticks_to_ns(med, rep.tsc_hz):,.0f} ns)"

    # blocks not found for one reason are one line (liblzma's decoder: 371 lines, each
    # "not found within the budget (2 path(s) stopped by an angr error …)")
    missed: dict[str, list[str]] = {}
    for b in rep.blocks:
        where = _where(s, b.function, b.address)
        if b.status == "not found":
            missed.setdefault(b.note, []).append(where)
            continue
        if b.status == "reached":
            out.write(f"  {where}: reached by {input_label(b.input)}: {b.arguments} (the count run "
                      f"executed it{timed(b.input)})\n")
        elif b.status == "unreachable":
            out.write(f"  {where}: proven unreachable from the entry ({b.note})\n")
        else:
            out.write(f"  {where}: {b.status}: input {b.input}: {b.note}\n")
    for note, places in missed.items():
        if len(places) == 1:
            out.write(f"  {places[0]}: not found within the budget ({note})\n")
            continue
        shown = ", ".join(places[:MAX_NAMED]) + (f" and {len(places) - MAX_NAMED} more "
                                                  f"(--json lists them)"
                                                  if len(places) > MAX_NAMED else "")
        out.write(f"  {len(places)} blocks not found within the budget ({note}): {shown}\n")
    for g in rep.groups:
        blocks = ", ".join(f"{a:#x}" for a in g.blocks[:4]) + \
            (f" and {len(g.blocks) - 4} more" if len(g.blocks) > 4 else "")
        if g.status == "separated":
            out.write(f"  group {g.group} ({blocks}): separated by {input_label(g.input)} (counts "
                      f"{list(g.counts)} in the count run{timed(g.input)})\n")
        elif g.status == "inseparable":
            out.write(f"  group {g.group} ({blocks}): no input from the entry separates it "
                      f"({g.note})\n")
        else:
            out.write(f"  group {g.group} ({blocks}): {g.status} ({g.note})\n")
    summ = rep.summary()
    if summ:
        out.write("  summary: " + ", ".join(f"{n} {k}" for k, n in summ.items()) + "\n")
    out.write(f"  blocks executed: {rep.executed_before} -> {rep.executed_after} of "
              f"{rep.total_blocks}\n")
    for n in rep.notes:
        out.write(f"  note: {n}\n")
    if len(rep.kept):
        out.write(f"  {len(rep.kept)} input(s) {'kept in the store' if kept else 'not kept'}"
                  "\n")


def reach_json(rep: Any) -> dict[str, Any]:
    def med(k: int) -> float | None:
        import numpy as np
        for kk, t in zip(rep.kept, rep.ticks):
            if int(kk) == k and np.isfinite(t).any():
                return float(np.nanmedian(t))
        return None

    return {"function": rep.function, "template": rep.template, "seconds": rep.seconds,
            "skipped": rep.skipped or None,
            "blocks": [{"function": b.function, "address": hex(b.address), "status": b.status,
                        "input": b.input, "arguments": b.arguments or None,
                        "note": b.note} for b in rep.blocks],
            "groups": [{"group": g.group, "blocks": [hex(a) for a in g.blocks],
                        "status": g.status, "input": g.input,
                        "counts": list(g.counts) if g.counts else None, "note": g.note}
                       for g in rep.groups],
            "inputs": [{"index": int(k), "median_ticks": med(int(k))} for k in rep.kept],
            "executed_before": rep.executed_before, "executed_after": rep.executed_after,
            "total_blocks": rep.total_blocks, "notes": list(rep.notes)}
