"""`wcetfit cfg`: the static model of a binary's functions."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, TextIO


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cfg", help="static model: blocks, loops, calls, co-executed groups",
        description="Without --function: one line per function of BINARY (name, address, "
                    "blocks, loops, calls).  With --function: the full model of each named "
                    "function and of the binary's own functions it calls.  Addresses are "
                    "link-time addresses, as objdump -d and nm print them.  Models are cached "
                    "by the binary's sha256 ($WCETFIT_CACHE_DIR, else $XDG_CACHE_HOME/wcetfit "
                    "or ~/.cache/wcetfit).")
    p.add_argument("binary", metavar="BINARY", help="x86-64 ELF shared object or executable")
    p.add_argument("--function", "-f", action="append", dest="functions", metavar="NAME|0xADDR",
                   help="function to model in full (repeatable); a stripped binary's "
                        "functions are named by address")
    p.add_argument("--json", metavar="FILE",
                   help="write the models as JSON (schema wcetfit.cfg/1; '-' = stdout)")
    p.add_argument("--dot", metavar="DIR", help="write one graphviz .dot file per function into DIR")
    p.add_argument("--disassembly", action="store_true",
                   help="include every block's instructions (text, JSON and dot)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the model cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wcetfit.static import binary
    from wcetfit.cli.common import check_output_path, write_json
    from wcetfit.model import SCHEMA_CFG, function_to_json

    check_output_path(args.json)
    if args.dot:
        _check_dot_dir(args.dot)
    use_cache = not args.no_cache
    out = sys.stdout if args.json != "-" else sys.stderr

    info = binary.binary_info(args.binary)
    if args.functions:
        bm = binary.load_model(args.binary, args.functions, with_callees=True, use_cache=use_cache)
        requested = [bm.functions[n] for n in bm.requested]
        for fn in requested:
            print_function(out, fn, disassembly=args.disassembly, binary_path=args.binary)
        callees = [n for n in bm.functions if n not in bm.requested]
        if callees:
            out.write(f"also modelled (called, directly or not): {', '.join(callees)}\n")
        models = list(requested) + [bm.functions[n] for n in callees]
        names = list(bm.requested)
    else:
        models = None
        if args.json or args.dot:       # every model is needed: summarise them
            bm = binary.load_model(args.binary, None, use_cache=use_cache)
            models = list(bm.functions.values())
            summaries = [binary.summary_of(fn) for fn in models]
        else:
            summaries = binary.list_functions(args.binary, use_cache=use_cache)
        print_summary(out, info, summaries)
        names = [s.name for s in summaries]

    if args.json:
        write_json(args.json, {
            "schema": SCHEMA_CFG,
            "binary": {"path": info.path, "sha256": info.sha256, "kind": info.kind,
                       "stripped": info.stripped, **info.extra},
            "requested": names if args.functions else None,
            "functions": [function_to_json(fn, disassembly=args.disassembly) for fn in models or []],
        })
    if args.dot and models:
        for fn in models:
            path = os.path.join(args.dot, _file_name(fn.name) + ".dot")
            with open(path, "w") as f:
                f.write(to_dot(fn, disassembly=args.disassembly))
        out.write(f"wrote {len(models)} .dot file(s) to {args.dot}\n")
    return 0


def _check_dot_dir(path: str) -> None:
    from wcetfit.errors import WcetfitError

    if os.path.exists(path) and not os.path.isdir(path):
        raise WcetfitError(f"--dot {path}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise WcetfitError(f"--dot {path}: directory {parent} does not exist")
    os.makedirs(path, exist_ok=True)


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", name) or "function"


# --- text -----------------------------------------------------------------------------------

def print_summary(out: TextIO, info: Any, summaries: list) -> None:
    from wcetfit.model import hexaddr

    rows = sorted(summaries, key=lambda s: s.address)
    head = (f"{info.path}: {info.kind}{', stripped' if info.stripped else ''}, "
            f"sha256 {info.sha256[:16]}…, {len(rows)} functions")
    if out.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=head, title_justify="left")
        table.add_column("function")
        table.add_column("address", justify="right")
        table.add_column("blocks", justify="right")
        table.add_column("loops", justify="right")
        table.add_column("calls", justify="right")
        for s in rows:
            table.add_row(s.name, hexaddr(s.address), str(s.blocks), str(s.loops), str(s.calls))
        Console(file=out).print(table)
        return
    width = max([len("function")] + [len(s.name) for s in rows])
    out.write(head + "\n")
    out.write(f"{'function':<{width}}  {'address':>10}  {'blocks':>6}  {'loops':>5}  {'calls':>5}\n")
    for s in rows:
        out.write(f"{s.name:<{width}}  {hexaddr(s.address):>10}  {s.blocks:>6}  {s.loops:>5}  "
                  f"{s.calls:>5}\n")


def print_function(out: TextIO, fn: Any, *, disassembly: bool = False, binary_path: str = "") -> None:
    from wcetfit.model import hexaddr as H

    cls_of = {}
    for i, cls in enumerate(fn.coexec_classes):
        for a in cls:
            cls_of[a] = i
    headers = {lp.header: lp for lp in fn.loops}
    exits = set(fn.exits)
    w = out.write
    w(f"function {fn.name} at {H(fn.address)}"
      f"{' in ' + binary_path if binary_path else ''}\n")
    if getattr(fn, "ifunc", None) is not None:
        w(f"  IFUNC: {fn.ifunc.describe()}\n")
    w(f"  {len(fn.blocks)} blocks, {len(fn.edges)} edges, {len(fn.loops)} loops, "
      f"{len(fn.calls)} call sites, {len(fn.jump_tables)} jump tables; "
      f"{len(fn.coexec_classes)} co-execution classes, max_rank {fn.max_rank}\n")
    w(f"  entry {H(fn.entry)}; exits {' '.join(H(a) for a in fn.exits)}\n")
    w("  blocks (address, bytes, instructions, successors):\n")
    for b in fn.blocks:
        marks = []
        if b.address == fn.entry:
            marks.append("entry")
        if b.address in headers:
            marks.append(f"loop header d{headers[b.address].depth}")
        if b.address in exits:
            marks.append("exit")
        succ = " ".join(H(d) for d in fn.successors(b.address)) or "-"
        w(f"    {H(b.address):>10} {b.size:>4} B {b.n_instructions:>3} ins  -> {succ}"
          f"{'  [' + ', '.join(marks) + ']' if marks else ''}\n")
        if disassembly:
            for ins in b.instructions:
                w(f"        {H(ins.address):>10}  {ins.text()}\n")
    if fn.loops:
        w("  loops:\n")
        for lp in fn.loops:
            entered = ", ".join(f"{H(s)}->{H(d)}" for s, d in lp.entry_edges) or "(function entry)"
            w(f"    header {H(lp.header)} depth {lp.depth}"
              f"{' in ' + H(lp.parent) if lp.parent is not None else ''}"
              f"{' IRREDUCIBLE' if not lp.reducible else ''}: "
              f"{len(lp.body)} blocks; back edges "
              f"{', '.join(f'{H(s)}->{H(d)}' for s, d in lp.back_edges)}; entered by {entered}\n")
    if fn.calls:
        w("  calls:\n")
        for c in fn.calls:
            tgt = H(c.target) if c.target is not None else "?"
            w(f"    {H(c.instruction):>10} {'tail ' if c.tail else ''}{c.kind:<8} "
              f"{c.target_name or '(unknown)'} {tgt}\n")
    if fn.jump_tables:
        w("  jump tables:\n")
        for j in fn.jump_tables:
            rel = f", relative to {H(j.base)}" if j.base is not None else ", absolute"
            w(f"    {H(j.instruction):>10} table {H(j.table_address)}: {len(j.targets)} x "
              f"{j.entry_size} B{rel} -> {' '.join(H(t) for t in j.targets)}\n")
    w("  co-execution classes (blocks that execute equally often in every call):\n")
    for cls in fn.coexec_classes:
        if len(cls) > 1:
            w(f"    {{{' '.join(H(a) for a in cls)}}}\n")
    singles = [a for cls in fn.coexec_classes if len(cls) == 1 for a in cls]
    if singles:
        w(f"    alone: {' '.join(H(a) for a in singles)}\n")
    if fn.unresolved_jumps:
        w(f"  unresolved indirect jumps: {' '.join(H(a) for a in fn.unresolved_jumps)}\n")
    for msg in fn.warnings:
        w(f"  warning: {msg}\n")


# --- graphviz -------------------------------------------------------------------------------

_PALETTE = ["#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d3f8e2", "#fce1d4",
            "#cddafd", "#f1e3c5", "#d9f0ff"]


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(fn: Any, *, disassembly: bool = False) -> str:
    """Graphviz text: loop headers bold, exits double-bordered, co-executed blocks (classes
    of two or more) share a fill colour, back edges dashed."""
    from wcetfit.model import hexaddr as H

    colour = {}
    k = 0
    for cls in fn.coexec_classes:
        if len(cls) > 1:
            for a in cls:
                colour[a] = _PALETTE[k % len(_PALETTE)]
            k += 1
    headers = {lp.header for lp in fn.loops}
    back = {e for lp in fn.loops for e in lp.back_edges}
    exits = set(fn.exits)
    lines = [f"digraph {_q(fn.name)} {{",
             f"  label={_q(f'{fn.name} @ {H(fn.address)}  max_rank {fn.max_rank}')};",
             '  node [shape=box, fontname="monospace", style=filled, fillcolor=white];',
             '  start [shape=point];',
             f"  start -> {_q(H(fn.entry))};"]
    for b in fn.blocks:
        label = f"{H(b.address)}  ({b.n_instructions} ins)\\l"
        if disassembly:
            label += "".join(f"{ins.text()}\\l".replace('"', "'") for ins in b.instructions)
        attrs = [f'label="{label}"']
        if b.address in colour:
            attrs.append(f'fillcolor="{colour[b.address]}"')
        if b.address in headers:
            attrs.append("penwidth=3")
        if b.address in exits:
            attrs.append("peripheries=2")
        lines.append(f"  {_q(H(b.address))} [{', '.join(attrs)}];")
    for s, d in fn.edges:
        style = " [style=dashed]" if (s, d) in back else ""
        lines.append(f"  {_q(H(s))} -> {_q(H(d))}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"
