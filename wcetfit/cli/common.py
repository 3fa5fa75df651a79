"""Helpers shared by the subcommands: JSON output destinations."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from wcetfit.errors import WcetfitError


def check_output_path(path: str | None) -> None:
    """Fail before measuring, not after, when an output file cannot be written."""
    if path in (None, "-"):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise WcetfitError(f"cannot write {path}: directory {parent} does not exist")
    if os.path.isdir(path):
        raise WcetfitError(f"cannot write {path}: it is a directory")


def write_json(path: str | None, data: Any) -> None:
    """Write ``data`` to ``path`` ('-' is stdout); nothing when ``path`` is None."""
    if path is None:
        return
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def add_measure_args(parser: Any, *, repeats: bool = True, json: bool = True) -> None:
    """TARGET_DIR and the options that choose which inputs are measured."""
    parser.add_argument("target", metavar="TARGET_DIR", help="folder holding wcetfit.toml")
    parser.add_argument("--inputs", type=int, metavar="N",
                        help="number of generated inputs (default: [measure] inputs)")
    parser.add_argument("--seed", type=int, metavar="S",
                        help="seed of the inputs (default: [measure] seed)")
    if repeats:
        parser.add_argument("--repeats", type=int, metavar="R",
                            help="timed calls per input (default: [measure] repeats)")
    parser.add_argument("--fresh", action="store_true",
                        help="discard everything stored for this target and start over")
    if json:
        parser.add_argument("--json", metavar="FILE",
                            help="write the result as JSON ('-' = stdout)")


def measure_overrides(args: Any) -> dict[str, Any]:
    return {"inputs": args.inputs, "seed": args.seed, "repeats": getattr(args, "repeats", None)}
