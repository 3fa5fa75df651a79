"""A callee the instrumented copy cannot hold, called only from blocks no input ran, does
not stop the bound under ``[wcet] unreached = "observed"`` (the default).

A new user's libm ``atan2`` and ``fmod`` got no bound: glibc's ``__kernel_standard`` (the
SVID error path) held an unresolved ``jmp rdx``, so it ran as original code, uncounted,
and the bound was refused.  Its only call site in atan2 is in a block no input executed,
which the "observed" policy leaves out of the worst path: the callee is left out with it,
and the report says so.  "require" still refuses.  (That jump is modelled now, a table
with no bounds check: wcetfit.static.jumptables.unguarded_entries, so libm no longer has
such a callee.  The known-answer library below has one: a callee holding an XBEGIN, which
the copy cannot retarget, in a branch no call takes.)"""

from __future__ import annotations

import pytest

from smalltarget import analyzed_root, build_library, write_target

SOURCE = r"""
__attribute__((noinline)) int handler(int x) {
    if (x == -77777)
        __asm__ volatile("xbegin 1f\n\txend\n1:" ::: "memory", "eax");
    return x / 2 + 1;
}
int entry(int x, int rare) {
    int s = 0;
    for (int i = 0; i < (x & 15); i++)
        s += i * x;
    if (rare == 12345)
        s += handler(x);
    return s;
}
"""
PROTOTYPE = "int entry(int x, int rare);"
# rare is never 12345: the block calling handler runs on no input
GENERATE = "    return (int(ctx.rng.integers(0, 1000)), 0)"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    d = tmp_path_factory.mktemp("uncounted")
    lib = build_library(d, SOURCE, "unc")
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import read_elf
    from wcetfit.static import binary

    model = binary.load_model(str(lib), ["entry"], with_callees=True)
    _, skipped = relocatable_closure(model.functions, ["entry"], read_elf(str(lib)).read)
    assert "handler" in skipped and "xbegin" in skipped["handler"]
    return lib


def test_uncounted_callee_of_unexecuted_blocks_is_left_out_with_them(library, tmp_path):
    d = write_target(tmp_path / "t", str(library), "entry", PROTOTYPE, GENERATE)
    fn = analyzed_root(d, tmp_path / "report.json")
    w = fn["wcet"]
    assert w["error"] is None, w["error"]
    assert w["ipet_ticks"] is not None
    assert w["ipet_ticks"] >= w["max_observed_ticks"], (w["ipet_ticks"],
                                                        w["max_observed_ticks"])
    notes = [x["message"] for x in fn["warnings"]
             if "called only from blocks no input ran" in x["message"]]
    assert notes, [x["message"] for x in fn["warnings"]]
    assert "handler" in notes[0]
    assert "entry+0x" in notes[0]                 # the calling block, named
    assert "the copy cannot hold it" in notes[0]
    assert "left out of the bound" in notes[0]

    # [wcet] unreached = "require": bounds are demanded for those blocks, so it refuses,
    # naming the callee in the singular and the policy
    write_target(d, str(library), "entry", PROTOTYPE, GENERATE,
                 extra='[wcet]\nunreached = "require"\n')
    w2 = analyzed_root(d, tmp_path / "require.json", "report")["wcet"]
    assert w2["error"] is not None
    assert "handler" in w2["error"]
    assert "called only from blocks no input ran" in w2["error"]
    assert "unreached = \"require\"" in w2["error"]
    assert "reached by entry" not in w2["error"] and "so they run" not in w2["error"]


def test_an_uncounted_callee_an_input_called_is_refused_with_a_remedy(library, tmp_path):
    """Inputs that run the calling block (libm's fmod for y = 0 did): the callee's time is
    in the calls and no bound can include it.  The refusal says how to get a bound
    without that path."""
    d = write_target(tmp_path / "t", str(library), "entry", PROTOTYPE,
                     "    rare = 12345 if ctx.index % 6 == 0 else 0\n"
                     "    return (int(ctx.rng.integers(0, 1000)), rare)")
    w = analyzed_root(d, tmp_path / "called.json")["wcet"]
    assert w["error"] is not None
    assert "handler" in w["error"]
    assert "called by entry (in blocks the inputs ran: entry+0x" in w["error"]
    assert "make generate() avoid the inputs that run entry+0x" in w["error"]
    # rare = 12345: every 6th; the first with its arguments, what generate() must avoid
    assert ", input 6, input 12 and 2 more)" in w["error"]
    assert "(input 0: (" in w["error"] and ", 12345)" in w["error"], w["error"]
