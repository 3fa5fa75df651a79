"""`wcetfit init`: write a working target for one function of a library."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "init", help="write a target (wcetfit.toml + inputs.py) for one library function",
        description="Write TARGET_DIR/wcetfit.toml and TARGET_DIR/inputs.py for FUNCTION of "
                    "LIB: the prototype and the types it needs from --header (parsed after "
                    "gcc -E), else from LIB's DWARF; an inputs.py that fills every parameter "
                    "by its type (buffers sized from their length parameter); the loops the "
                    "static model found as commented [loops] entries.  Then run "
                    "`wcetfit analyze TARGET_DIR`.")
    p.add_argument("target", metavar="TARGET_DIR", help="folder to write (created if absent)")
    p.add_argument("--binary", required=True, metavar="LIB",
                   help="x86-64 ELF shared object or executable")
    p.add_argument("--function", required=True, metavar="NAME|0xADDR",
                   help="the function: its symbol, or its link-time address")
    p.add_argument("--header", metavar="FILE.h",
                   help="C header declaring the function (needed unless LIB has DWARF)")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing wcetfit.toml and inputs.py")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    from wcetfit.model import hexaddr
    from wcetfit.scaffold.create import create_target

    t = create_target(args.target, args.binary, args.function, args.header, force=args.force)
    shown = args.target
    what = (f"{t.function} ({hexaddr(t.address)})" if t.function == t.declaration.function
            else f"{t.function} (declared as {t.declaration.function})")
    print(f"wrote {os.path.join(shown, 'wcetfit.toml')} and {os.path.join(shown, 'inputs.py')} "
          f"for {what}")
    print(f"  prototype ({t.declaration.source}): {t.declaration.prototype}")
    if t.ifunc:
        # the address above is not the symbol's (nm shows the resolver): say which code
        # is measured (libm's sin: the FMA variant this CPU's resolver picks)
        print(f"  IFUNC: {t.ifunc}; that implementation is what is measured")
    bounded = [lp for lp in t.loops if lp.reducible]
    if t.loops:
        print(f"  loops: {len(t.loops)} found, listed commented in [loops]; until you give "
              f"bounds, each is bounded by the most the inputs showed"
              + ("" if len(bounded) == len(t.loops) else
                 f"; {len(t.loops) - len(bounded)} entered at several blocks (bounded "
                 f"by returns to the header per entry)"))
    else:
        print("  loops: none found" + (" in the code known before it runs" if t.indirect_sites
                                       else ""))
    if t.indirect_sites:
        shown_sites = ", ".join(t.indirect_sites[:3]) + (" …" if len(t.indirect_sites) > 3
                                                         else "")
        print(f"  calls through a pointer at {shown_sites}: `analyze` follows the functions "
              f"the inputs reach there, and the report names their loops for [loops]")
    for note in t.notes:
        print(f"  check: {note}")
    print(f"next: edit the ranges in inputs.py if you know them, then "
          f"`wcetfit analyze {shown}`")
    return 0
