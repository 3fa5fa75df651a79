"""Inputs that crash are left out of the fit, and the report says so where the result is
read.  A new user's EVP_EncodeBlock target crashed on 58 of 100 inputs; the report
described the 42 others ("42 inputs × 3 timed calls") and none of its warnings said that
most inputs could not be called."""

from __future__ import annotations

import json
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from test_hostile import HOSTILE_C
from wcetfit.isolate import InputFailure
from wcetfit.report.failures import failed_inputs_finding


def test_one_finding_counts_and_names_the_failures():
    f = [InputFailure(i, "crash", "SIGABRT (signal 6)", f"({i}, 3)") for i in (3, 8, 13, 18)]
    f.append(InputFailure(21, "hang", "no return after 1.0 s", "(21, 3)"))
    counts = SimpleNamespace(failures=tuple(f[:2]))
    times = SimpleNamespace(failures=tuple(f[1:]), indices=np.arange(25))
    w = failed_inputs_finding(counts, times)
    assert w is not None
    assert w.message.startswith("5 input(s) failed and are left out of the fit")
    assert "crash: SIGABRT (signal 6) ×4" in w.message and "hang: no return ×1" in w.message
    assert "25 were measured" in w.message
    assert "input 3 (3, 3): crash" in w.message and w.message.endswith("; …")
    assert "generate()" in w.advice
    assert failed_inputs_finding(SimpleNamespace(failures=()), times=None) is None


def _hostile_target(d, *, inputs: int, budget: int) -> None:
    """The hostile sample built in ``d``, a target of its ``hostile`` function there (its
    inputs.py is the test's)."""
    (d / "hostile.c").write_text(HOSTILE_C)
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-pthread", "-o",
                    str(d / "libhostile.so"), str(d / "hostile.c")], check=True)
    (d / "wcetfit.toml").write_text(f"""
binary = "libhostile.so"
functions = ["hostile"]
prototype = "long hostile(int kind, int x);"
inputs = "inputs.py"
[measure]
inputs = {inputs}
repeats = 3
[search]
budget = {budget}
""")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the target")
def test_the_report_of_a_target_with_crashing_inputs_says_so(tmp_path):
    from wcetfit.cli import main

    _hostile_target(tmp_path, inputs=30, budget=0)
    # kind 2 aborts when x == 3: inputs 3, 8, 13, 18, 23 and 28
    (tmp_path / "inputs.py").write_text("def generate(ctx):\n    return (2, ctx.index % 5)\n")
    out = tmp_path / "r.json"
    assert main(["analyze", str(tmp_path), "--no-wait", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    said = [w["message"] for w in doc["warnings"] if "failed and are left out" in w["message"]]
    assert len(said) == 1, [w["message"] for w in doc["warnings"]]
    assert said[0].startswith("6 input(s) failed") and "SIGABRT" in said[0]
    assert "input 3 " in said[0]
    # the summary on the screen shows it first
    from wcetfit.cli import main as cli
    import contextlib, io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli(["report", str(tmp_path)]) == 0
    text = buf.getvalue()
    assert "6 input(s) failed" in text, text[-3000:]
    # and the header says that the figures are of the others
    assert doc["failed_inputs"] == 6
    assert "(6 more failed and are in no figure: the first warning)" in \
        " ".join(text.splitlines()[0:2])


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the target")
def test_the_search_is_not_run_on_inputs_that_mostly_fail(tmp_path, capsys):
    """zstd's decompressor with 58 of 60 inputs crashing: the worst-case search mutated
    them into 300 crashing candidates, a minute and a hundred warning lines.  With most
    inputs failing, the search step is skipped and said."""
    from wcetfit.cli import main
    from wcetfit.measurements import open_store
    from wcetfit.search.store import load_search_rows
    from wcetfit.target import load_target

    _hostile_target(tmp_path, inputs=20, budget=40)
    # kind 2 aborts when x == 3: 15 of the 20 inputs
    (tmp_path / "inputs.py").write_text(
        "def generate(ctx):\n    return (2, 3 if ctx.index % 4 else 0)\n")
    main(["analyze", str(tmp_path), "--no-wait"])
    said = [ln for ln in capsys.readouterr().err.splitlines()
            if "search step is skipped" in ln]
    assert said and "15 of 20 inputs failed when counted" in said[0], said
    target = load_target(str(tmp_path))
    assert load_search_rows(open_store(target), "hostile", target.measure.seed) is None


def test_a_generate_that_does_not_return_gets_its_own_advice_and_whole_words():
    """A generate() looping forever on inputs 5 and 17: the summary was cut mid-word
    ("took mo ×2") and the advice was the crash one ("a buffer too small for what the
    function writes")."""
    msg = ("building its arguments (generate() and packing them) took more than 60 s, "
           "before any call")
    f = [InputFailure(i, "hang", msg, "(not built)") for i in (5, 17)]
    w = failed_inputs_finding(SimpleNamespace(failures=tuple(f)),
                              SimpleNamespace(failures=(), indices=np.arange(28)))
    assert "hang: building its arguments (generate() and packing them) took … ×2" in w.message
    assert "took mo ×" not in w.message
    assert w.advice.startswith("generate() itself did not return for input(s) 5, 17")
    assert "buffer too small" not in w.advice
