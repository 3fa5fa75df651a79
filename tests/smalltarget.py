"""Small targets for end-to-end tests on real libraries: a wcetfit.toml and an inputs.py
written in one call, and ``analyze`` run to its JSON report."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any


def build_library(d: Path, source: str, name: str, opt: str = "-O1") -> Path:
    """``d``/lib``name``.so compiled from the C ``source`` (the test is skipped, saying so,
    where gcc is absent)."""
    import pytest

    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test library")
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.c").write_text(source)
    lib = d / f"lib{name}.so"
    subprocess.run(["gcc", opt, "-fPIC", "-shared", "-o", str(lib), str(d / f"{name}.c")],
                   check=True)
    return lib


def write_target(d: Path, binary: str, function: str, prototype: str, generate_body: str,
                 *, inputs: int = 30, repeats: int = 3, budget: int = 0, seed: int = 1,
                 extra: str = "") -> Path:
    """``d`` holding a target of ``function``; ``generate_body``: the statements of
    ``generate(ctx)``, indented by four spaces; ``extra``: more TOML at the end."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "wcetfit.toml").write_text(
        f'binary = "{binary}"\nfunctions = ["{function}"]\nprototype = "{prototype}"\n'
        f'inputs = "inputs.py"\n[measure]\ninputs = {inputs}\nrepeats = {repeats}\n'
        f'seed = {seed}\n[search]\nbudget = {budget}\n{extra}')
    (d / "inputs.py").write_text(f"def generate(ctx):\n{generate_body}\n")
    return d


LIBZ = Path("/lib/x86_64-linux-gnu/libz.so.1")


def zlib_crc32_target(d: Path, max_len: int, *, inputs: int, repeats: int) -> Path:
    """``d`` holding a target of the system zlib's ``crc32`` on random buffers of
    0..``max_len`` bytes (the caller skips where LIBZ is absent)."""
    return write_target(d, str(LIBZ), "crc32",
                        "unsigned long crc32(unsigned long crc, const unsigned char *buf, "
                        "unsigned int len);",
                        f"    n = int(ctx.rng.integers(0, {max_len}))\n"
                        "    data = ctx.rng.integers(0, 256, max(n, 1)).astype('uint8')\n"
                        "    return (0, ctx.ffi.from_buffer('unsigned char[]', data), n)",
                        inputs=inputs, repeats=repeats)


def report_json_and_text(d: Path, out: Path) -> tuple[dict[str, Any], str]:
    """The root of ``wcetfit report``'s JSON (written to ``out``) and its text summary,
    of the stored measurements (``report`` only reads the store)."""
    import sys

    from wcetfit.cli import main

    assert main(["report", str(d), "--json", str(out)]) == 0
    text = subprocess.run([sys.executable, "-m", "wcetfit", "report", str(d)],
                          capture_output=True, text=True, check=True).stdout
    return json.loads(out.read_text())["functions"][0], text


def analyzed_root(d: Path, out: Path, command: str = "analyze") -> dict[str, Any]:
    """The first function of the JSON report ``wcetfit analyze`` (or ``report``) writes."""
    from wcetfit.cli import main

    args = [command, str(d), "--json", str(out)] + (["--no-wait"] if command == "analyze"
                                                    else [])
    status = main(args)
    root = json.loads(out.read_text())["functions"][0]
    # exit status 1 exactly when the measured function got no bound
    w = root["wcet"]
    assert status == (1 if w["error"] or w["ipet_ticks"] is None else 0), (status, w["error"])
    return root


def measured_for_search(d: Path, function: str) -> tuple[Any, Any, Any]:
    """(session, normaliser, arguments) of target ``d`` once its inputs are counted and
    timed, the fit a search starts from; ``arguments(sequence)`` is the tuple that
    ``generate`` builds when it replays that choice sequence (the truth a search test
    computes its figure from, beside the model's prediction)."""
    from wcetfit.count.run import run_counts
    from wcetfit.pipeline import open_session
    from wcetfit.search.candidates import Normaliser, Replay
    from wcetfit.timing.run import run_times

    s = open_session(str(d))
    run_counts(s.target, s.store, s.model, [function])
    run_times(s.target, s.store, s.roots)
    norm = Normaliser(s.target, function)

    def arguments(sequence: Any) -> Any:
        return Replay({0: sequence})(norm._generate, s.target, norm._ffi, function, 0)
    return s, norm, arguments
