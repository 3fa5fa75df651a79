"""A callee the instrumented copy cannot hold, called only from blocks no input ran, does
not stop the bound under ``[wcet] unreached = "observed"`` (the default).

A new user's libm ``atan2`` and ``fmod`` got no bound: glibc's ``__kernel_standard`` (the
SVID error path, ``sub_13ac0``) holds an unresolved ``jmp rdx``, so it runs as original
code, uncounted, and the bound was refused ("reached by atan2, but the instrumented copy
cannot hold it … so they run as original code").  Its only call site in atan2 is in a
block no input executed, which the "observed" policy leaves out of the worst path: the
callee is left out with it, and the report says so.  "require" still refuses.

Skips, saying so, when libm is absent or its atan2 has no such uncounted callee."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")

TOML = f"""binary = "{LIBM}"
functions = ["atan2"]
prototype = "double atan2(double y, double x);"
inputs = "inputs.py"
[measure]
inputs = 30
repeats = 3
seed = 1
[search]
budget = 0
"""

# finite, non-zero arguments: atan2 never takes its SVID error path (__kernel_standard)
INPUTS = """
def generate(ctx):
    rng = ctx.rng
    y = float(rng.uniform(-1000.0, 1000.0)) or 1.0
    x = float(rng.uniform(-1000.0, 1000.0)) or 1.0
    if ctx.index % 5 == 0:
        x = -abs(x)
    return (y, x)
"""


def _uncounted_callees() -> list[str]:
    """The functions libm's atan2 reaches that the instrumented copy cannot hold."""
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import read_elf
    from wcetfit.static import binary

    model = binary.load_model(str(LIBM), ["atan2"], with_callees=True)
    _, skipped = relocatable_closure(model.functions, [model.function("atan2").name],
                                     read_elf(str(LIBM)).read)
    return sorted(skipped)


@pytest.fixture(scope="module")
def atan2_target(tmp_path_factory):
    if not LIBM.exists():
        pytest.skip(f"{LIBM} is absent")
    try:
        skipped = _uncounted_callees()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"libm's atan2 could not be modelled here: {exc}")
    if not skipped:
        pytest.skip("this libm's atan2 reaches no callee the instrumented copy cannot "
                    "hold: nothing to leave out")
    d = tmp_path_factory.mktemp("atan2")
    (d / "wcetfit.toml").write_text(TOML)
    (d / "inputs.py").write_text(INPUTS)
    return d, skipped


def test_uncounted_callee_of_unexecuted_blocks_is_left_out_with_them(atan2_target, tmp_path):
    from wcetfit.cli import main

    d, skipped = atan2_target
    out = tmp_path / "report.json"
    assert main(["analyze", str(d), "--no-wait", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    fn = doc["functions"][0]
    w = fn["wcet"]
    assert w["error"] is None, w["error"]
    assert w["ipet_ticks"] is not None
    assert w["ipet_ticks"] >= w["max_observed_ticks"], (w["ipet_ticks"],
                                                        w["max_observed_ticks"])
    notes = [x["message"] for x in fn["warnings"]
             if "called only from blocks no input ran" in x["message"]]
    assert notes, [x["message"] for x in fn["warnings"]]
    assert any(n in notes[0] for n in skipped), (skipped, notes[0])
    assert "atan2+0x" in notes[0]                 # the calling block, named
    assert "the copy cannot hold it" in notes[0]
    assert "left out of the bound" in notes[0]

    # [wcet] unreached = "require": bounds are demanded for those blocks, so it refuses,
    # naming the callee in the singular and the policy
    (d / "wcetfit.toml").write_text(TOML + '[wcet]\nunreached = "require"\n')
    out2 = tmp_path / "require.json"
    assert main(["report", str(d), "--json", str(out2)]) == 0
    w2 = json.loads(out2.read_text())["functions"][0]["wcet"]
    assert w2["error"] is not None
    assert any(n in w2["error"] for n in skipped), w2["error"]
    assert "called only from blocks no input ran" in w2["error"]
    assert "unreached = \"require\"" in w2["error"]
    assert "reached by atan2" not in w2["error"] and "so they run" not in w2["error"]


def test_an_uncounted_callee_an_input_called_is_refused_with_a_remedy(atan2_target, tmp_path):
    """libm's fmod calls glibc's error handler for y = 0: a calling block an input ran, so
    the callee's time is in the calls and no bound can include it.  The refusal says how
    to get a bound without that path."""
    from wcetfit.cli import main

    _, skipped = atan2_target
    d = tmp_path / "fmod"
    d.mkdir()
    (d / "wcetfit.toml").write_text(TOML.replace('"atan2"', '"fmod"').replace(
        "double atan2(double y, double x);", "double fmod(double x, double y);"))
    (d / "inputs.py").write_text("""
def generate(ctx):
    x = float(ctx.rng.uniform(-1000.0, 1000.0))
    y = 0.0 if ctx.index % 6 == 0 else float(ctx.rng.uniform(0.5, 50.0))
    return (x, y)
""")
    out = tmp_path / "fmod.json"
    assert main(["analyze", str(d), "--no-wait", "--json", str(out)]) == 0
    w = json.loads(out.read_text())["functions"][0]["wcet"]
    if w["error"] is None:
        pytest.skip("this libm's fmod calls nothing uncounted for y = 0: nothing refused")
    assert any(n in w["error"] for n in skipped), w["error"]
    assert "called by fmod (in blocks the inputs ran: fmod+0x" in w["error"]
    assert "make generate() avoid the inputs that run fmod+0x" in w["error"]
