"""Functions that share blocks (hand-written assembly that jumps into another function's
body: libgmp's __gmpn_add_nc into __gmpn_add_n's loop) are refused before anything is
measured, with the functions and the first shared block named.  The fit keys a cost by
block address; a new user's `analyze` of __gmpn_mul stopped after two minutes of
measuring with "block addresses are not unique"."""

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
def test_gmp_mul_is_refused_before_measuring(tmp_path):
    from wcetfit.cli import main

    (tmp_path / "wcetfit.toml").write_text(f"""binary = "{GMP}"
functions = ["__gmpn_mul"]
prototype = "unsigned long __gmpn_mul(unsigned long *rp, const unsigned long *up, long un, const unsigned long *vp, long vn);"
inputs = "inputs.py"
""")
    (tmp_path / "inputs.py").write_text("""
def generate(ctx):
    n = 4
    ffi = ctx.ffi
    return (ffi.new("unsigned long[]", 2 * n), ffi.new("unsigned long[]", [1] * n), n,
            ffi.new("unsigned long[]", [1] * n), n)
""")
    from wcetfit.pipeline import open_session
    s = open_session(str(tmp_path))
    fns = s.functions_of("__gmpn_mul")
    shared = {a for n, f in fns.items() for a in f.block_addresses}
    if sum(len(f.block_addresses) for f in fns.values()) == len(shared):
        pytest.skip("this libgmp's __gmpn_mul reaches no shared code")
    assert main(["analyze", str(tmp_path), "--no-wait"]) == 2
    assert not (tmp_path / ".wcetfit").exists() or not any(
        p.suffix == ".npz" for p in (tmp_path / ".wcetfit").rglob("*"))
