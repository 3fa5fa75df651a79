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

from pathlib import Path

import pytest

from smalltarget import analyzed_root, write_target

LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")

# finite, non-zero arguments: atan2 never takes its SVID error path (__kernel_standard)
GENERATE = """\
    rng = ctx.rng
    y = float(rng.uniform(-1000.0, 1000.0)) or 1.0
    x = float(rng.uniform(-1000.0, 1000.0)) or 1.0
    if ctx.index % 5 == 0:
        x = -abs(x)
    return (y, x)"""
PROTOTYPE = "double atan2(double y, double x);"


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
    d = write_target(tmp_path_factory.mktemp("atan2"), str(LIBM), "atan2", PROTOTYPE,
                     GENERATE)
    return d, skipped


def test_uncounted_callee_of_unexecuted_blocks_is_left_out_with_them(atan2_target, tmp_path):
    d, skipped = atan2_target
    fn = analyzed_root(d, tmp_path / "report.json")
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
    write_target(d, str(LIBM), "atan2", PROTOTYPE, GENERATE,
                 extra='[wcet]\nunreached = "require"\n')
    w2 = analyzed_root(d, tmp_path / "require.json", "report")["wcet"]
    assert w2["error"] is not None
    assert any(n in w2["error"] for n in skipped), w2["error"]
    assert "called only from blocks no input ran" in w2["error"]
    assert "unreached = \"require\"" in w2["error"]
    assert "reached by atan2" not in w2["error"] and "so they run" not in w2["error"]


def test_an_uncounted_callee_an_input_called_is_refused_with_a_remedy(atan2_target, tmp_path):
    """libm's fmod calls glibc's error handler for y = 0: a calling block an input ran, so
    the callee's time is in the calls and no bound can include it.  The refusal says how
    to get a bound without that path."""
    _, skipped = atan2_target
    d = write_target(tmp_path / "fmod", str(LIBM), "fmod", "double fmod(double x, double y);",
                     "    x = float(ctx.rng.uniform(-1000.0, 1000.0))\n"
                     "    y = 0.0 if ctx.index % 6 == 0 else float(ctx.rng.uniform(0.5, 50.0))\n"
                     "    return (x, y)")
    w = analyzed_root(d, tmp_path / "fmod.json")["wcet"]
    if w["error"] is None:
        pytest.skip("this libm's fmod calls nothing uncounted for y = 0: nothing refused")
    assert any(n in w["error"] for n in skipped), w["error"]
    assert "called by fmod (in blocks the inputs ran: fmod+0x" in w["error"]
    assert "make generate() avoid the inputs that run fmod+0x" in w["error"]
    # y = 0: every 6th; the first with its arguments, what generate() must avoid
    assert ", input 6, input 12 and 2 more)" in w["error"]
    assert "(input 0: (" in w["error"] and ", 0.0)" in w["error"], w["error"]
