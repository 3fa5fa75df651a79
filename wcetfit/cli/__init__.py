"""Command line: the one place that prints errors and chooses exit codes.

Each subcommand lives in its own module of this package with ``register(subparsers)``
(adds its parser and sets ``func``) and a ``run(args) -> int``.  Modules keep their
imports light at module level so that ``wcetfit --help`` stays fast; the heavy work is
imported inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from wcetfit.errors import WcetfitError

# Order of the subcommands in --help.
COMMANDS = ["analyze", "cfg", "count", "time", "calibrate", "fit", "report", "split", "search",
            "reach"]

EXIT_USAGE = 2  # bad input of any kind: usage, target file, binary, store


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``error: ...`` line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"error: {self.prog}: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="wcetfit", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"wcetfit.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"wcetfit.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("wcetfit")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # angr and its friends are chatty at WARNING; only show them when asked.
    for noisy in ("angr", "cle", "pyvex", "claripy"):
        logging.getLogger(noisy).setLevel(logging.ERROR if verbosity < 2 else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except WcetfitError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: measurements taken so far are kept in the store\n")
        return 130
    except BrokenPipeError:
        return 0
