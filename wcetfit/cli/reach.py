"""`wcetfit reach`: look for inputs reaching the blocks no stored input executed."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reach", help="symbolic execution towards the blocks no measured input executed",
        description="For each measured function, take the blocks of the function itself that "
                    "no stored input executed and explore paths from its entry with angr "
                    "(integers within the range the generated inputs span, buffers of input "
                    "0's sizes with symbolic contents).  Each block is reported reached (with "
                    "a witness), proven unreachable from this entry under that template, or "
                    "not found within the budget.  Found inputs are only printed, not stored.")
    p.add_argument("target", help="target directory (with wcetfit.toml); run `wcetfit count` "
                                   "first")
    p.add_argument("--budget", type=float, default=30.0, metavar="S",
                   help="seconds of exploration per function (default 30)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.errors import FitError, TargetError
    from wcetfit.measurements import load_counts
    from wcetfit.pipeline import open_session
    from wcetfit.static.reach import reach_blocks

    if not args.budget > 0:
        raise TargetError(f"--budget must be positive, got {args.budget}")
    s = open_session(args.target)
    out = sys.stdout
    for root in s.target.functions:
        counts = load_counts(s.store, root, s.target.measure.seed)
        if counts is None:
            raise FitError(f"{root}: no counts stored for seed {s.target.measure.seed}: run "
                           f"`wcetfit count {s.target.directory}` first")
        model = s.root_model(root)
        fc = counts.of(model.name)
        if len(counts.indices) == 0:
            never = list(fc.blocks)
        else:
            total = fc.counts.sum(axis=0)
            never = [b for b, c in zip(fc.blocks, total) if c == 0]
        if not never:
            out.write(f"{root}: every block executed by the {len(counts.indices)} stored "
                      "inputs\n")
            continue
        template, why = _template(s, root, [int(i) for i in counts.indices])
        if template is None:
            out.write(f"{root}: {len(never)} block(s) never executed; not explored: {why}\n")
            continue
        out.write(f"{root}: {len(never)} block(s) never executed; exploring with "
                  f"{template.describe()} for at most {args.budget:g} s\n")
        for r in reach_blocks(s.target.binary, model.address, never, template, args.budget):
            where = f"{model.name}+{r.address - model.address:#x} ({r.address:#x})"
            if r.status == "reached":
                out.write(f"  {where}: reached after {r.seconds:.2f} s by "
                          f"{r.witness.describe()}\n")
            elif r.status == "unreachable":
                out.write(f"  {where}: proven unreachable from the entry ({r.note})\n")
            else:
                out.write(f"  {where}: not found within the budget ({r.note})\n")
    return 0


def _template(s, root: str, indices: list[int]):  # type: ignore[no-untyped-def]
    """The argument template: input 0's buffer sizes (contents symbolic), integers within the
    range the stored inputs span.  (None, reason) when an argument has another kind."""
    from wcetfit.static.reach import ArgTemplate, BufParam, IntParam
    from wcetfit.target import generate_input, load_inputs_module
    from wcetfit.timing.thunk import build_harness

    h = build_harness(s.target.prototype, s.target.cdef)
    ffi = h.ffi
    generate = load_inputs_module(s.target)
    rows = [generate_input(generate, s.target, ffi, root, i) for i in (indices or [0])]
    first = generate_input(generate, s.target, ffi, root, 0)
    params = []
    for k, a in enumerate(first):
        if isinstance(a, bool) or isinstance(a, int):
            vals = [int(r[k]) for r in rows]
            params.append(IntParam(min(vals), max(vals)))
        elif isinstance(a, ffi.CData):
            t = ffi.typeof(a)
            if t.kind == "array":
                size = ffi.sizeof(a)
            elif t.kind == "pointer" and t.item.kind != "void":
                size = ffi.sizeof(t.item)
            else:
                return None, f"argument {k} is a {t.cname}, neither array nor typed pointer"
            params.append(BufParam(size))
        else:
            return None, f"argument {k} is a {type(a).__name__} (only integers and buffers)"
    return ArgTemplate(tuple(params)), ""
