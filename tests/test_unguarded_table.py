"""Jump tables no bounds check guards, sized by where their entries stop landing in the
function, with known answers.

gcc drops a switch's bounds check where it takes the index to be in range (a default that
is ``__builtin_unreachable()``; glibc's ``__kernel_standard``, libm's SVID error handler,
switching on its argument).  Such a jump was "unresolved" and the function had no model
past it: every libm wrapper whose input reached a domain error (atanh of |x| > 1, cosh
overflowing, lgamma at a pole) had no bound.  Here two functions of a compiled library
switch over 8 and 5 cases with no check, their tables back to back in .rodata: each table
has exactly its cases (the second's entries, read from the first's base, land outside the
first function), in both recoveries (per function and whole binary), and the count run
over every case passes its flow and differential checks.  libm's handler is checked
against objdump: every entry is an instruction of the function and the one after the
last is not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from smalltarget import build_library
from wcetfit.static import binary, elfinfo
from wcetfit.static.cfgcache import CfgCache

C = r"""
volatile int sink;
int first(int k, int x) {
    switch (k) {
    case 0: sink = x; x += 3; break;
    case 1: sink = x * 7; x ^= 5; break;
    case 2: sink = x - 9; x *= 11; break;
    case 3: sink = x << 2; x -= 13; break;
    case 4: sink = x >> 1; x += 17; break;
    case 5: sink = ~x; x *= 19; break;
    case 6: sink = x + 23; x ^= 29; break;
    case 7: sink = x - 31; x += 37; break;
    default: __builtin_unreachable();
    }
    return x + sink;
}
int second(int k, int x) {
    switch (k) {
    case 0: sink = x * 41; x -= 43; break;
    case 1: sink = x + 47; x ^= 53; break;
    case 2: sink = x - 59; x += 61; break;
    case 3: sink = x * 67; x -= 71; break;
    case 4: sink = x ^ 73; x *= 79; break;
    default: __builtin_unreachable();
    }
    return x - sink;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("unguarded")
    build_library(d, C, "ung", opt="-O2")
    return d


def _entries(path: str, table: int, n: int) -> list[int]:
    data = elfinfo.read_elf(path, with_fdes=False)
    raw = data.read(table, 4 * n)
    return [table + int.from_bytes(raw[i:i + 4], "little", signed=True)
            for i in range(0, 4 * n, 4)]


@pytest.mark.parametrize("name, cases", [("first", 8), ("second", 5)])
def test_each_table_has_its_cases_in_both_recoveries(lib, tmp_path, name, cases):
    path = str(lib / "libung.so")
    cache = CfgCache(str(tmp_path / "cache"), enabled=True)
    for model in (binary.load_model(path, [name], with_callees=False, use_cache=cache),
                  binary.load_model(path, use_cache=cache)):
        fn = model.function(name)
        assert not fn.unresolved_jumps, fn.warnings
        assert len(fn.jump_tables) == 1
        jt = fn.jump_tables[0]
        assert len(jt.targets) == cases
        assert list(jt.targets) == _entries(path, jt.table_address, cases)
        # the entry after the last is the next table's: not a target of this function
        after = _entries(path, jt.table_address, cases + 1)[-1]
        assert not (fn.address <= after < fn.address + 0x100) or after not in \
            {i.address for b in fn.blocks for i in b.instructions}


def test_the_count_run_over_every_case_passes_its_checks(lib):
    d = lib / "target"
    d.mkdir(exist_ok=True)
    (d / "wcetfit.toml").write_text(
        f'binary = "{lib / "libung.so"}"\nfunctions = ["first"]\n'
        'prototype = "int first(int k, int x);"\ninputs = "inputs.py"\n'
        "[measure]\ninputs = 24\nrepeats = 2\n")
    (d / "inputs.py").write_text("def generate(ctx):\n    return (ctx.index % 8, ctx.index)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               WCETFIT_MACHINE_LOCK=str(lib / "timing.lock"))
    res = subprocess.run([sys.executable, "-m", "wcetfit", "count", str(d)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert "flow conservation and differential checks passed on each of them" in res.stdout
    assert "0 never executed" in res.stdout


def test_libm_error_handler_table_ends_where_its_entries_leave_the_function(tmp_path):
    path = "/lib/x86_64-linux-gnu/libm.so.6"
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    model = binary.load_model(path, ["atanh"], with_callees=True,
                              use_cache=CfgCache(str(tmp_path / "cache"), enabled=True))
    calls = [c for c in model.function("atanh").calls if c.target is not None]
    handler = next((model.function(c.target) for c in calls
                    if any(j for j in model.function(c.target).jump_tables)), None)
    if handler is None:
        pytest.skip("this libm's atanh calls no error handler with a jump table")
    assert not handler.unresolved_jumps
    jt = handler.jump_tables[0]
    n = len(jt.targets) if jt.entry_size == 4 else pytest.skip("an absolute table")
    elf = elfinfo.read_elf(path, with_fdes=True)
    lo, size = next((s, z) for s, z in elf.fdes if s <= handler.address < s + z)
    out = subprocess.run(["objdump", "-d", "-w", "--no-show-raw-insn",
                          f"--start-address={lo:#x}", f"--stop-address={lo + size:#x}", path],
                         capture_output=True, text=True, check=True).stdout
    starts = {int(line.split(":")[0], 16) for line in out.splitlines()
              if line.strip() and line.split(":")[0].strip().isalnum()
              and ":" in line and line.startswith(" ")}
    entries = _entries(path, jt.table_address, n + 1)
    assert n >= 2 and all(t in starts for t in entries[:n])
    assert entries[n] not in starts      # the next word is no entry of this table


def _libm():
    path = "/lib/x86_64-linux-gnu/libm.so.6"
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    return path


def test_the_handler_is_modelled_alike_whoever_calls_it(tmp_path):
    """acos's wrapper tail-calls the handler after a "cmp; ja" of its own, which was read
    as the table's guard: 2 entries as acos's callee, 251 as atanh's.  Every target
    sharing the model cache then had the other's model ("stored counts do not match its
    static model").  A guard is never read in another function's code now."""
    path = _libm()

    def handler(root):
        model = binary.load_model(path, [root], with_callees=True,
                                  use_cache=CfgCache(str(tmp_path / root), enabled=True))
        fn = next((f for f in model.functions.values()
                   if f.jump_tables and f.jump_tables[0].entry_size == 4
                   and any(c.target == f.address for g in model.functions.values()
                           for c in g.calls)), None)
        if fn is None:
            pytest.skip(f"this libm's {root} reaches no handler with a table of offsets")
        return fn.address, len(fn.blocks), fn.jump_tables[0].targets

    assert handler("acos") == handler("atanh") == handler("cosh")


def test_a_whole_binary_listing_keeps_the_models_targets_were_counted_with(tmp_path):
    """`wcetfit cfg libm` (the whole binary: more function entries known, so some
    functions cut elsewhere) overwrote the per-function models in the shared cache, and
    every libm target measured before could no longer be reported."""
    path = _libm()
    cache = CfgCache(str(tmp_path / "cache"), enabled=True)
    binary.load_model(path, ["acos"], with_callees=True, use_cache=cache)
    d = cache.directory(elfinfo.read_elf(path, with_fdes=False).sha256, binary.cache_options())
    before = {p.name: p.read_bytes() for p in (tmp_path / "cache").rglob("fn/*.json")}
    assert before
    binary.load_model(path, use_cache=cache)               # the whole binary
    after = {p.name: p.read_bytes() for p in (tmp_path / "cache").rglob("fn/*.json")}
    assert all(after[name] == data for name, data in before.items())
    assert len(after) > len(before)                        # the others are cached too
    assert os.path.isdir(d)
