"""A loop the inputs entered but never iterated: the bound takes 0 iterations, which holds
only for calls that never iterate it either; the report says so first."""

from __future__ import annotations

import json
import os
import sys


sys.path.insert(0, os.path.dirname(__file__))
from smalltarget import build_library, write_target   # noqa: E402



CMP_SOURCE = r"""
/* compare from the top: the loop goes on only while the operands agree */
int cmp_top(const unsigned *a, const unsigned *b, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (a[i] != b[i]) return a[i] > b[i] ? 1 : -1;
    return 0;
}
"""


def test_a_loop_no_input_iterated_is_the_first_warning(tmp_path):
    """Random operands differ in their top word, so the comparison loop never iterates
    and the bound takes 0 iterations (libgmp's __gmpn_cmp on init's inputs: a bound 16×
    below a call whose operands agree): said first among the function's warnings, with
    the remedy."""
    from wcetfit.cli import main

    lib = build_library(tmp_path, CMP_SOURCE, "c_cmp")
    d = write_target(tmp_path / "cmp", str(lib), "cmp_top",
                     "int cmp_top(const unsigned *a, const unsigned *b, int n);",
                     "    n = int(ctx.rng.integers(1, 64))\n"
                     "    a = ctx.rng.integers(0, 2**32, n, dtype='uint32')\n"
                     "    b = a.copy()\n"
                     "    b[n - 1] ^= 1\n"
                     "    return (ctx.ffi.new('unsigned[]', a.tolist()), "
                     "ctx.ffi.new('unsigned[]', b.tolist()), n)")
    out = tmp_path / "cmp.json"
    assert main(["analyze", str(d), "--json", str(out), "--no-wait"]) == 0
    fn = json.loads(out.read_text())["functions"][0]
    first = fn["warnings"][0]
    assert "never iterated on any input" in first["message"], fn["warnings"][:2]
    assert "[loops]" in first["advice"]
    # the list of what the bound rests on says it in the same words, not "≤ 0 iterations
    # per entry and ≤ 0 per call (the most the inputs reached)" beside the loops that ran
    import subprocess
    text = " ".join(subprocess.run([sys.executable, "-m", "wcetfit", "report", str(d)],
                                   capture_output=True, text=True, check=True).stdout.split())
    assert ("never iterated on any input, so the bound takes it not to iterate (add a "
            "[loops] bound if inputs can)") in text, text
    assert "≤ 0 iterations" not in text
