"""`wcetfit cfg` end to end, in a subprocess: output, JSON, dot, and every kind of bad input
(one line on stderr, exit status 2, no traceback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a test binary")

SOURCE = r"""
int helper(int x) { return x * 3 + 1; }
int work(int n) { int r = 0; for (int i = 0; i < n; i++) r += helper(i) & 5 ? 1 : 2; return r; }
int pick(int k, int a) { switch (k) { case 0: return a + 3; case 1: return a * 9; case 2: return a - 27;
                  case 3: return a ^ 81; case 4: return a << 5; case 5: return a / 7; default: return 0; } }
int jump_through(int (*f)(int), int x) { return f(x); }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "t.c").write_text(SOURCE)
    so = d / "libt.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "t.c", "-o", str(so)], cwd=d, check=True)
    stripped = d / "libt-stripped.so"
    shutil.copy(so, stripped)
    subprocess.run(["strip", "--strip-all", str(stripped)], check=True)
    return {"so": str(so), "stripped": str(stripped), "dir": d}


def wcetfit(*args, cache_dir, check_rc=None):
    env = dict(os.environ, WCETFIT_CACHE_DIR=str(cache_dir))
    env.pop("WCETFIT_NO_CACHE", None)
    r = subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True, text=True,
                       env=env)
    if check_rc is not None:
        assert r.returncode == check_rc, (r.stdout, r.stderr)
    return r


def assert_one_line_error(r, *fragments):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def test_summary_lists_every_function(lib, tmp_path):
    r = wcetfit("cfg", lib["so"], cache_dir=tmp_path, check_rc=0)
    out = r.stdout
    for name in ("helper", "work", "pick", "jump_through"):
        assert name in out
    nm = subprocess.run(["nm", "--defined-only", lib["so"]], capture_output=True, text=True).stdout
    addr = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" work"))
    assert any(line.split()[:2] == ["work", f"{addr:#x}"] for line in out.splitlines())


def test_second_run_is_served_from_the_cache(lib, tmp_path):
    wcetfit("cfg", lib["so"], cache_dir=tmp_path, check_rc=0)
    r = wcetfit("-v", "cfg", lib["so"], cache_dir=tmp_path, check_rc=0)
    assert "served from the cache" in r.stderr
    r = wcetfit("-v", "cfg", lib["so"], "--function", "work", cache_dir=tmp_path, check_rc=0)
    assert "CFGFast" not in r.stderr


def test_function_model_text_json_and_dot(lib, tmp_path):
    dot = tmp_path / "dots"
    js = tmp_path / "m.json"
    r = wcetfit("cfg", lib["so"], "--function", "work", "--function", "pick", "--json", str(js),
                "--dot", str(dot), "--disassembly", cache_dir=tmp_path / "c", check_rc=0)
    assert "function work at 0x" in r.stdout and "loops:" in r.stdout
    assert "jump tables:" in r.stdout
    data = json.loads(js.read_text())
    assert data["schema"] == "wcetfit.cfg/1"
    assert data["binary"]["kind"] == "shared-object" and len(data["binary"]["sha256"]) == 64
    names = [f["name"] for f in data["functions"]]
    assert names[:2] == ["work", "pick"] and "helper" in names
    for f in data["functions"]:
        for key in ("name", "address", "blocks", "edges", "loops", "calls", "coexec_classes",
                    "max_rank", "jump_tables"):
            assert key in f
        assert f["address"].startswith("0x")
        assert all("disassembly" in b for b in f["blocks"])
    files = sorted(os.listdir(dot))
    assert "work.dot" in files and "pick.dot" in files
    text = (dot / "work.dot").read_text()
    assert text.startswith('digraph "work"') and "->" in text


def test_json_to_stdout(lib, tmp_path):
    r = wcetfit("cfg", lib["so"], "-f", "helper", "--json", "-", cache_dir=tmp_path, check_rc=0)
    data = json.loads(r.stdout)
    assert data["functions"][0]["name"] == "helper"


def test_stripped_binary_accepts_addresses(lib, tmp_path):
    nm = subprocess.run(["nm", "--defined-only", lib["so"]], capture_output=True, text=True).stdout
    addr = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" work"))
    r = wcetfit("cfg", lib["stripped"], "--function", f"{addr:#x}", cache_dir=tmp_path, check_rc=0)
    assert f"at {addr:#x}" in r.stdout


def test_jump_through_a_pointer_is_an_indirect_tail_call(lib, tmp_path):
    # `return f(x)` is `jmp *%rdi` (no table): a tail call through a pointer, no warning
    r = wcetfit("cfg", lib["so"], "--function", "jump_through", "--json", "-",
                cache_dir=tmp_path, check_rc=0)
    assert "unresolved indirect jump" not in r.stderr and "Traceback" not in r.stderr
    fn = next(f for f in json.loads(r.stdout)["functions"] if f["name"] == "jump_through")
    tails = [c for c in fn["calls"] if c["tail"]]
    assert [c["kind"] for c in tails] == ["indirect"] and not fn["unresolved_jumps"]


def test_missing_file(tmp_path):
    r = wcetfit("cfg", str(tmp_path / "nothing.so"), cache_dir=tmp_path)
    assert_one_line_error(r, "no such file")


def test_not_an_elf(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("just text\n")
    r = wcetfit("cfg", str(p), cache_dir=tmp_path)
    assert_one_line_error(r, "not an ELF")


def _header(machine, elfclass=2):
    h = bytearray(64)
    h[:4] = b"\x7fELF"
    h[4], h[5], h[6] = elfclass, 1, 1
    h[16:18] = (3).to_bytes(2, "little")
    h[18:20] = machine.to_bytes(2, "little")
    return bytes(h)


@pytest.mark.parametrize("machine,elfclass,what", [(183, 2, "AArch64"), (3, 1, "i386")])
def test_other_architecture(tmp_path, machine, elfclass, what):
    p = tmp_path / "other.so"
    p.write_bytes(_header(machine, elfclass))
    r = wcetfit("cfg", str(p), cache_dir=tmp_path)
    assert_one_line_error(r, what, "x86-64")


def test_unknown_function_suggests(lib, tmp_path):
    r = wcetfit("cfg", lib["so"], "--function", "wrok", cache_dir=tmp_path)
    assert_one_line_error(r, "no function named 'wrok'", "did you mean work")


def test_stripped_binary_unknown_name(lib, tmp_path):
    r = wcetfit("cfg", lib["stripped"], "--function", "zzz_nothing_like_it", cache_dir=tmp_path)
    assert_one_line_error(r, "stripped", "0x")


def test_bad_output_paths_fail_before_work(lib, tmp_path):
    r = wcetfit("cfg", lib["so"], "--json", str(tmp_path / "no" / "dir" / "x.json"),
                cache_dir=tmp_path)
    assert_one_line_error(r, "does not exist")
    f = tmp_path / "file"
    f.write_text("")
    r = wcetfit("cfg", lib["so"], "--dot", str(f), cache_dir=tmp_path)
    assert_one_line_error(r, "not a directory")
