"""A function without a branch (libpng's png_get_uint_32: one block) runs one path on
every input; the report said "vary the inputs; an argument left NULL … often stops the
function at its first check", advice that cannot apply.  It now says the function has
one path.  A function with branches whose inputs all took one path keeps the advice."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

C = r"""
unsigned get32(const unsigned char *p) {
    return ((unsigned)p[0] << 24) | ((unsigned)p[1] << 16) | ((unsigned)p[2] << 8) | p[3];
}
int pick(int x) { if (x > 1000000) return x / 3; return x * 2; }
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the target")
@pytest.mark.parametrize("function, prototype, generate, words", [
    ("get32", "unsigned get32(const unsigned char *p);",
     "return (ctx.ffi.new('unsigned char[]', [1, 2, 3, 4]),)", "it has one path (1 block"),
    ("pick", "int pick(int x);", "return (int(ctx.rng.integers(0, 100)),)",
     "ran the same blocks the same number of times"),
])
def test_one_path_is_said_as_what_it_is(tmp_path, function, prototype, generate, words):
    from wcetfit.cli import main

    (tmp_path / "one.c").write_text(C)
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-o", str(tmp_path / "libone.so"),
                    str(tmp_path / "one.c")], check=True)
    (tmp_path / "wcetfit.toml").write_text(f"""
binary = "libone.so"
functions = ["{function}"]
prototype = "{prototype}"
inputs = "inputs.py"
[measure]
inputs = 20
repeats = 3
[search]
budget = 0
""")
    (tmp_path / "inputs.py").write_text(f"def generate(ctx):\n    {generate}\n")
    out = tmp_path / "r.json"
    assert main(["analyze", str(tmp_path), "--no-wait", "--json", str(out)]) == 0
    fn = json.loads(out.read_text())["functions"][0]
    said = [w for w in fn["warnings"] if words in w["message"]]
    assert len(said) == 1, [w["message"] for w in fn["warnings"]]
    if function == "get32":
        assert "NULL" not in said[0]["advice"]
        assert not any("ran the same blocks" in w["message"] for w in fn["warnings"])
    else:
        assert "vary the inputs" in said[0]["advice"]
