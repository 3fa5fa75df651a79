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
import textwrap

from wcetfit.errors import WcetfitError

# Order of the subcommands in --help: the pipeline's ("init" and others not built yet are
# skipped).
COMMANDS = ["init", "analyze", "cfg", "count", "calibrate", "time", "fit", "search", "reach",
            "report", "check", "split"]

EXIT_USAGE = 2  # bad input of any kind: usage, target file, binary, store


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``error: ...`` line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"error: {self.prog}: {message}\n")
        raise SystemExit(EXIT_USAGE)


# What `wcetfit --help` tells its user (the module docstring above is for developers).
DESCRIPTION = """\
wcetfit bounds the worst-case execution time (WCET) of functions in an x86-64 Linux
binary or shared library by measuring them.  It counts how often every basic block of the
function runs for each of many generated inputs, times the real calls with the
time-stamp counter (TSC), fits a cost per block by least squares, and bounds the worst
path through the control-flow graph (IPET) with those costs and your loop bounds.
Times are in TSC ticks (the counter's fixed-rate unit, not core cycles) and ns."""

def _epilog(commands: list[str]) -> str:
    first = ("`wcetfit init TARGET_DIR` writes a starting wcetfit.toml and inputs module; "
             if "init" in commands else
             "write TARGET_DIR/wcetfit.toml and an inputs module (README: \"Analysing your "
             "own library\"); ")
    return (first + "then `wcetfit analyze TARGET_DIR` runs every "
            "stage and prints one screen per function: the WCET bound, what it rests on, "
            "the fit, the warnings.  `wcetfit report TARGET_DIR --full` shows every table, "
            "--html FILE a browsable page.  `wcetfit COMMAND --help` gives a command's "
            "options.")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="wcetfit", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                title="commands (analyze runs cfg → count → time → fit → "
                                      "report in one resumable run)")
    built = []
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"wcetfit.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"wcetfit.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
        built.append(name)
    parser.epilog = "where to start:\n" + textwrap.fill(_epilog(built), width=88,
                                                      initial_indent="  ",
                                                      subsequent_indent="  ")
    return parser


class _Formatter(logging.Formatter):
    """A logged error reads like the CLI's own: one ``error: ...`` line."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.ERROR and not record.exc_info:
            return f"error: {record.getMessage()}"
        return super().format(record)


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("wcetfit")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # angr and its friends are chatty at WARNING; only show them when asked.
    for noisy in ("angr", "cle", "pyvex", "claripy"):
        logging.getLogger(noisy).setLevel(logging.ERROR if verbosity < 2 else logging.WARNING)


def _remedy(args: argparse.Namespace, exc: Exception) -> str:
    """What the command the user ran offers against a run whose inputs all failed: its
    own option, not another command's (`check` has no --fresh; its inputs are of a seed
    of their own)."""
    from wcetfit.errors import NothingMeasured
    if not isinstance(exc, NothingMeasured) or "--fresh" in str(exc):
        return ""
    if hasattr(args, "fresh"):
        return "; fix generate() in the target's inputs module and start over with --fresh"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    from wcetfit.cli import interrupt
    interrupt.install()
    try:
        status = int(args.func(args) or 0)
        # a Ctrl-C that something swallowed and no progress callback acted on (the last
        # input was past) still ends the run as interrupted, not as a success
        interrupt.raise_if_interrupted()
        return status
    except WcetfitError as exc:
        # one line, whatever the message echoes of the user's input
        sys.stderr.write("error: " + " ".join(str(exc).splitlines()) + _remedy(args, exc)
                         + "\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: measurements taken so far are kept in the store\n")
        return 130
    except BrokenPipeError:
        return 0
