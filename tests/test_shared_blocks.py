"""Functions that share blocks the static model cannot cut apart (code entered through
jumps the count run observed: libgmp's mul_basecase into its unrolled loops) are refused,
with the functions and the first shared block named.  The fit keys a cost by block
address; a new user's `analyze` of __gmpn_mul stopped after two minutes of measuring with
"block addresses are not unique".  What the static model can cut apart is in
tests/test_shared_code.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from wcetfit.errors import BinaryError
from wcetfit.fit.system import refuse_shared_blocks

GMP = Path("/lib/x86_64-linux-gnu/libgmp.so.10")


def test_shared_blocks_are_named():
    fns = {"f": SimpleNamespace(block_addresses=(0x10, 0x20, 0x30)),
           "g": SimpleNamespace(block_addresses=(0x40, 0x20, 0x30)),
           "h": SimpleNamespace(block_addresses=(0x50,))}
    with pytest.raises(BinaryError, match=r"root: f and g share 2 block\(s\) \(from 0x20"):
        refuse_shared_blocks("root", fns)
    refuse_shared_blocks("root", {"f": fns["f"], "h": fns["h"]})     # nothing shared


@pytest.mark.skipif(not GMP.exists(), reason="libgmp.so.10 absent: shared blocks are "
                    "checked on synthetic models only")
def test_gmp_mul_is_refused_once_the_count_run_sees_computed_jumps_into_shared_loops(
        tmp_path, capsys):
    """__gmpn_add_nc's jump into __gmpn_add_n's loop is cut apart in the static model
    (wcetfit.static.shared); mul_basecase's jumps into its own unrolled loops, at points
    computed from the length, are known only as the inputs take them, and those are not
    cut by: the analysis stops with the functions and the first shared block named."""
    from wcetfit.cli import main

    (tmp_path / "wcetfit.toml").write_text(f"""binary = "{GMP}"
functions = ["__gmpn_mul"]
prototype = "unsigned long __gmpn_mul(unsigned long *rp, const unsigned long *up, long un, const unsigned long *vp, long vn);"
inputs = "inputs.py"
[measure]
inputs = 8
repeats = 2
""")
    (tmp_path / "inputs.py").write_text("""
def generate(ctx):
    n = (4, 20, 11, 30)[ctx.index % 4]
    ffi = ctx.ffi
    return (ffi.new("unsigned long[]", 2 * n), ffi.new("unsigned long[]", [3] * n), n,
            ffi.new("unsigned long[]", [5] * n), n)
""")
    from wcetfit.pipeline import open_session
    fns = open_session(str(tmp_path)).functions_of("__gmpn_mul")
    owners = [a for f in fns.values() for a in f.block_addresses]
    assert len(owners) == len(set(owners))          # add_n and add_nc cut apart
    capsys.readouterr()
    assert main(["analyze", str(tmp_path), "--no-wait"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "__gmpn_mul_basecase" in err[0] and "share" in err[0], err
