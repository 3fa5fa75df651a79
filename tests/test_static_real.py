"""The static model of the system's own libraries, against independent truth.

objdump -d finds the concrete code (an IFUNC'ed libm function, a call through an IRELATIVE
slot, an indirect tail call, SHA-extension instructions, guarded switches) and gives its
instruction boundaries; the dynamic loader (ctypes: dlsym, dladdr) says which IFUNC
implementation it selected; jump-table entries are read back from the file with
pyelftools.  Each test skips, with the reason, when its library (or objdump) is absent.
"""

from __future__ import annotations

import ctypes
import io
import os
import re
import shutil
import subprocess
from functools import lru_cache

import pytest

from wcetfit.model import CALL_INDIRECT, CALL_INTERNAL
from wcetfit.static import binary, elfinfo
from wcetfit.static.cfgcache import CfgCache

LIB = "/lib/x86_64-linux-gnu"


def need(name: str) -> str:
    path = os.path.join(LIB, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    if shutil.which("objdump") is None:
        pytest.skip("needs objdump (binutils)")
    return path


@pytest.fixture()
def cache(tmp_path):
    return CfgCache(str(tmp_path / "cache"), enabled=True)


@lru_cache(maxsize=None)
def objdump(path: str, start: int | None = None, stop: int | None = None
            ) -> tuple[tuple[int, str, str], ...]:
    """(address, mnemonic, operands with objdump's comment) of each instruction."""
    args = ["objdump", "-d", "-w", "--no-show-raw-insn", path]
    if start is not None:
        args += [f"--start-address={start:#x}", f"--stop-address={stop:#x}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if m:
            rows.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return tuple(rows)


def fde_of(path: str, address: int) -> tuple[int, int]:
    """The .eh_frame range (start, end) covering ``address``: the function it belongs to."""
    elf = elfinfo.read_elf(path, with_fdes=True)
    for s, size in elf.fdes:
        if s <= address < s + size:
            return s, s + size
    pytest.skip(f"no .eh_frame entry covers {address:#x} in {path}")


def load_base(handle_symbol_address: int) -> int:
    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    libc = ctypes.CDLL(None)
    info = DlInfo()
    assert libc.dladdr(ctypes.c_void_p(handle_symbol_address), ctypes.byref(info)) != 0
    return info.dli_fbase


def test_ifunc_sin_is_the_implementation_dlsym_returns(cache):
    path = need("libm.so.6")
    lib = ctypes.CDLL(path)
    runtime = ctypes.cast(lib.sin, ctypes.c_void_p).value
    expected = runtime - load_base(runtime)
    model = binary.load_model(path, ["sin"], use_cache=cache)
    fn = model.function("sin")
    assert fn.address == fn.entry == expected
    assert fn.ifunc is not None and fn.ifunc.symbol == "sin"
    assert fn.ifunc.implementation == expected
    # the resolver is what the symbol table holds for sin
    dyn = subprocess.run(["objdump", "-T", path], capture_output=True, text=True).stdout
    resolver = next(int(line.split()[0], 16) for line in dyn.splitlines()
                    if line.split()[-1:] == ["sin"] and "iD" in line)
    assert fn.ifunc.resolver == resolver != expected
    # the user reads it in `wcetfit cfg`
    from wcetfit.cli.cfg import print_function

    out = io.StringIO()
    print_function(out, fn)
    assert f"sin \u2192 {fn.name} at {expected:#x}, selected by its IFUNC resolver" in out.getvalue()
    # and the model of the implementation is the code at that address (objdump's boundaries)
    first = fn.block_at(fn.entry)
    assert [i.address for i in first.instructions] == \
        [a for a, _, _ in objdump(path, expected, first.end + 16) if a < first.end]


def test_irelative_call_in_exp_is_an_internal_call_to_the_selected_implementation(cache):
    path = need("libm.so.6")
    lib = ctypes.CDLL(path)
    runtime_exp = ctypes.cast(lib.exp, ctypes.c_void_p).value
    base = load_base(runtime_exp)
    exp = runtime_exp - base
    # objdump: the first call of exp goes to a PLT stub of an IRELATIVE slot (*ABS*+0x...)
    calls = [(a, ops) for a, m, ops in objdump(path, exp, exp + 64) if m == "call"]
    if not calls or "*ABS*" not in calls[0][1]:
        pytest.skip("exp's first call is not through an IRELATIVE PLT stub in this libm")
    call_at, ops = calls[0]
    stub = int(ops.split()[0], 16)
    jmp = [x for x in objdump(path, stub, stub + 16) if x[1] in ("jmp", "bnd")][0]
    slot = int(re.search(r"#\s*([0-9a-f]+)", jmp[2]).group(1), 16)
    selected = int.from_bytes(ctypes.string_at(base + slot, 8), "little") - base

    model = binary.load_model(path, ["exp"], use_cache=cache)
    fn = model.function("exp")
    site = next(c for c in fn.calls if c.instruction == call_at)
    assert site.kind == CALL_INTERNAL and site.target == selected and not site.tail
    assert any(f.address == selected for f in model.functions.values())   # followed


@pytest.mark.parametrize("lib,pattern", [
    ("liblzma.so.5", ("pop", "jmp")),
    ("libcrypto.so.3", ("add", "jmp")),
])
def test_indirect_tail_call_is_a_tail_call_not_a_refusal(cache, lib, pattern):
    path = need(lib)
    rows = objdump(path)
    hit = next((rows[i + 1][0] for i in range(len(rows) - 1)
                if rows[i][1] == pattern[0] and rows[i + 1][1] == pattern[1]
                and re.fullmatch(r"\*%r(ax|cx|dx|11)", rows[i + 1][2].strip())
                and (pattern[0] != "add" or rows[i][2].startswith("$0x8,%rsp"))), None)
    if hit is None:
        pytest.skip(f"no `{pattern[0]} ...; jmp *%reg` in {path}")
    start, _ = fde_of(path, hit)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    assert hit not in fn.unresolved_jumps
    site = [c for c in fn.calls if c.instruction == hit]
    assert len(site) == 1 and site[0].kind == CALL_INDIRECT and site[0].tail
    block = next(b for b in fn.blocks if b.address <= hit < b.end)
    assert block.last.address == hit and block.address in fn.exits
    assert not fn.successors(block.address)


def test_a_table_of_function_pointers_with_empty_slots_is_a_tail_call(cache):
    """libc's __woverflow jumps through a stdio vtable whose unused slots hold no code
    address (read relocated, 0 minus the load base): the jump is a tail call through a
    pointer, no table target lies outside the binary's code, and the model comes back
    from the cache (a target at -0x400000 made every run warn of a corrupt entry and
    build the model again)."""
    path = need("libc.so.6")
    elf = elfinfo.read_elf(path, with_fdes=False)
    if "__woverflow" not in {s.name for s in elf.symbols}:
        pytest.skip(f"{path} has no __woverflow")
    fn = binary.load_model(path, ["__woverflow"], with_callees=False,
                           use_cache=cache).function("__woverflow")
    assert all(0 <= t for j in fn.jump_tables for t in j.targets)
    assert any(c.kind == CALL_INDIRECT and c.tail for c in fn.calls)
    assert not fn.unresolved_jumps
    d = cache.directory(elf.sha256, binary.cache_options())
    back = cache.get_function(d, fn.address)
    assert back is not None and back[0].jump_tables == fn.jump_tables


def test_sha256rnds2_function_is_modelled_to_its_real_end(cache):
    path = need("libcrypto.so.3")
    rows = objdump(path)
    hit = next((a for a, m, _ in rows if m == "sha256rnds2"), None)
    if hit is None:
        pytest.skip("no sha256rnds2 in this libcrypto")
    start, end = fde_of(path, hit)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    assert not fn.warnings, fn.warnings
    mine = {i.address: i for b in fn.blocks for i in b.instructions}
    theirs = [(a, m) for a, m, _ in rows if start <= a < end]
    last_ret = max(a for a, m in theirs if m.endswith("ret") or m == "repz")
    # every instruction objdump shows from the function's start to its last return is in
    # the model, with objdump's mnemonic for the SHA ones, and nothing is modelled after it
    for a, m in theirs:
        if a <= last_ret and not m.startswith(("nop", "data16", "xchg", "cs")):  # padding
            assert a in mine, f"{a:#x} {m} not modelled"
            if m.startswith("sha256"):
                assert mine[a].mnemonic == m
    assert max(b.end for b in fn.blocks) == max(i.address + i.size for i in mine.values())
    assert max(mine) == last_ret
    assert sum(1 for i in mine.values() if i.mnemonic == "sha256rnds2") == \
        sum(1 for a, m in theirs if m == "sha256rnds2" and a <= last_ret)


def _table_entries(path: str, table: int, n: int) -> list[int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= table < seg["p_vaddr"] + seg["p_filesz"]:
                f.seek(seg["p_offset"] + table - seg["p_vaddr"])
                raw = f.read(4 * n)
                return [table + int.from_bytes(raw[i:i + 4], "little", signed=True)
                        for i in range(0, 4 * n, 4)]
    raise AssertionError(f"{table:#x} not in the file")


def _switch(path: str, guard: str):
    """objdump: ``cmp $N,<guard>; ja ...`` followed within 6 instructions by a
    ``lea TABLE(%rip)`` and a ``jmp *%reg``: (N + 1, table, jmp address)."""
    rows = objdump(path)
    for i in range(len(rows) - 8):
        a, m, ops = rows[i]
        mm = re.fullmatch(rf"\$0x([0-9a-f]+),{re.escape(guard)}", ops.strip())
        if m != "cmp" or not mm or rows[i + 1][1] != "ja":
            continue
        window = rows[i + 2:i + 8]
        lea = next((r for r in window if r[1] == "lea" and "(%rip)" in r[2]), None)
        jmp = next((r for r in window if r[1] == "jmp" and r[2].startswith("*%")), None)
        if lea and jmp:
            return int(mm.group(1), 16) + 1, int(re.search(r"#\s*([0-9a-f]+)", lea[2]).group(1), 16), jmp[0]
    pytest.skip(f"no switch guarded by `cmp $N,{guard}; ja` in {path}")


def _check_table(path: str, fn, n: int, table: int, jmp: int) -> None:
    tabs = [j for j in fn.jump_tables if j.instruction == jmp]
    assert len(tabs) == 1, f"{fn.name}: {len(fn.jump_tables)} jump tables, none at {jmp:#x}"
    jt = tabs[0]
    assert jt.table_address == table and jt.entry_size == 4 and jt.base == table
    assert list(jt.targets) == _table_entries(path, table, n)
    assert set(fn.successors(jt.block)) == set(jt.targets)
    assert jmp not in fn.unresolved_jumps


def test_switch_guarded_by_an_8_bit_compare_has_the_guards_entries(cache):
    path = need("libexpat.so.1")
    n, table, jmp = _switch(path, "%al")
    start, _ = fde_of(path, jmp)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    _check_table(path, fn, n, table, jmp)
    assert n == 8


def test_switch_with_its_lea_in_another_block_records_its_table(cache):
    path = need("libexpat.so.1")
    n, table, jmp = _switch(path, "%edi")        # XML_ErrorString: 44 cases
    start, _ = fde_of(path, jmp)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    _check_table(path, fn, n, table, jmp)
    block = next(b for b in fn.blocks if b.address <= jmp < b.end)
    lea_at = next(a for a, m, ops in objdump(path, start, jmp + 2) if m == "lea" and f"# {table:x}" in ops)
    # the guard's `ja` ends the entry block: the table's lea is in a block of its own or
    # with the jmp; either way the table is recorded (checked above)
    assert block.address <= jmp and lea_at < jmp


def test_switch_guarded_on_the_copys_source_after_the_copy(cache):
    """``movzbl %bpl,%eax; cmp $7,%bpl; ja``: the index is a copy whose source is compared
    after the copy (libpng's png_set_filter); the guard bounds the table to n entries."""
    path = need("libpng16.so.16")
    rows = objdump(path)
    for i in range(len(rows) - 8):
        a, m, ops = rows[i]
        mz = re.fullmatch(r"%(\w+l),%(e\w+)", ops.strip()) if m == "movzbl" else None
        mc = re.fullmatch(rf"\$0x([0-9a-f]+),%{mz.group(1)}", rows[i + 1][2].strip()) \
            if mz and rows[i + 1][1] == "cmp" else None
        if not mc or rows[i + 2][1] != "ja":
            continue
        window = rows[i + 3:i + 8]
        lea = next((r for r in window if r[1] == "lea" and "(%rip)" in r[2]), None)
        jmp = next((r for r in window if r[1] == "jmp" and r[2].startswith("*%")), None)
        if lea and jmp:
            break
    else:
        pytest.skip(f"no `movzbl %Xl; cmp $N,%Xl; ja` switch in {path}")
    n = int(mc.group(1), 16) + 1
    table = int(re.search(r"#\s*([0-9a-f]+)", lea[2]).group(1), 16)
    start, _ = fde_of(path, jmp[0])
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    _check_table(path, fn, n, table, jmp[0])
    # and in the whole-library recovery (wcetfit's own descent, not angr's resolver)
    _check_table(path, binary.load_model(path, use_cache=cache).function(start), n, table, jmp[0])


def test_byte_indexed_table_without_a_guard_has_256_entries(cache):
    """``movzbl %dil,%edi; movslq (%rdx,%rdi,4),%rax; ...; jmp *%rax`` with no comparison:
    a byte index has 256 values, so the table has 256 entries (libexpat)."""
    path = need("libexpat.so.1")
    rows = objdump(path)
    for i in range(len(rows) - 4):
        a, m, ops = rows[i]
        mz = re.fullmatch(r"%(\w+l),%(e\w+)", ops.strip()) if m == "movzbl" else None
        if not mz or rows[i + 1][1] != "movslq" or rows[i + 3][1] != "jmp" \
                or not rows[i + 3][2].startswith("*%"):
            continue
        if f"%r{mz.group(2)[1:]},4)" not in rows[i + 1][2]:
            continue
        lea = next((r for r in rows[max(i - 3, 0):i] if r[1] == "lea" and "(%rip)" in r[2]), None)
        if lea is None or any(r[1] == "cmp" for r in rows[max(i - 3, 0):i]):
            continue
        break
    else:
        pytest.skip(f"no unguarded byte-indexed switch in {path}")
    table = int(re.search(r"#\s*([0-9a-f]+)", lea[2]).group(1), 16)
    jmp = rows[i + 3][0]
    start, _ = fde_of(path, jmp)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    _check_table(path, fn, 256, table, jmp)
    _check_table(path, binary.load_model(path, use_cache=cache).function(start), 256, table, jmp)


def test_computed_index_without_a_guard_is_bounded_by_its_value_range(cache):
    """libgmp's hand-written __gmpn_redc_1: ``and $3,%eax; lea 4(%rax),%r9; cmp $4,%ecx;
    cmovg %r9,%rax`` then the table: no comparison guards the index, its range does
    (0..3 or 4..7, so 8 entries), in both recoveries."""
    path = need("libgmp.so.10")
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    m = re.search(r"^([0-9a-f]+) T __gmpn_redc_1$", out, re.M)
    if m is None:
        pytest.skip(f"no __gmpn_redc_1 in {path}")
    start = int(m.group(1), 16)
    # hand-written: no .eh_frame entry; the dispatch is in its first instructions
    rows = objdump(path, start, start + 0x60)
    jmp = next((r for r in rows if r[1] == "jmp" and r[2].startswith("*%")), None)
    mask = next((r for r in rows if r[1] == "and" and re.fullmatch(r"\$0x[0-9a-f]+,%eax", r[2])), None)
    lea4 = next((r for r in rows if r[1] == "lea" and re.fullmatch(r"0x[0-9a-f]+\(%rax\),%\w+", r[2])), None)
    lea = next((r for r in rows if r[1] == "lea" and "(%rip)" in r[2]), None)
    if not (jmp and mask and lea4 and lea and any(r[1].startswith("cmov") for r in rows)):
        pytest.skip(f"__gmpn_redc_1 in {path} is not the and/lea/cmov form")
    n = int(mask[2][1:].split(",")[0], 16) + int(lea4[2].split("(")[0], 16) + 1
    table = int(re.search(r"#\s*([0-9a-f]+)", lea[2]).group(1), 16)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    _check_table(path, fn, n, table, jmp[0])
    _check_table(path, binary.load_model(path, use_cache=cache).function(start), n, table, jmp[0])


def test_switch_guarded_on_the_memory_slot_its_index_is_loaded_from(cache):
    """liblzma's range encoder: ``cmpl $4,0x30(%rax,%rdx,4); lea 0xc(%rdx),%rcx; ja; mov
    (%rax,%rcx,4),%ecx; movslq (%r9,%rcx,4),%rcx; ...; jmp *%rcx``.  The guard compares
    the slot the index is loaded from, under another spelling of its address (rcx = rdx +
    12), so the table has N + 1 entries.  Unresolved, the function could not be copied and
    no lzma encoder was counted or bounded."""
    path = need("liblzma.so.5")
    rows = objdump(path)
    for i in range(len(rows) - 8):
        a, m, ops = rows[i]
        mc = re.fullmatch(r"\$0x([0-9a-f]+),0x([0-9a-f]+)\(%(\w+),%(\w+),4\)", ops.strip()) \
            if m == "cmpl" else None
        if mc is None:
            continue
        window = rows[i + 1:i + 9]
        lea = next((r for r in window if r[1] == "lea" and re.fullmatch(
            rf"0x([0-9a-f]+)\(%{mc.group(4)}\),%\w+", r[2].strip())), None)
        jmp = next((r for r in window if r[1] == "jmp" and r[2].startswith("*%")), None)
        table = next((r for r in window if r[1] == "lea" and "(%rip)" in r[2]), None)
        if lea and jmp and int(lea[2].split("(")[0], 16) * 4 == int(mc.group(2), 16):
            break
    else:
        pytest.skip(f"no switch guarded on its index's memory slot in {path}")
    n = int(mc.group(1), 16) + 1
    start, _ = fde_of(path, jmp[0])
    if table is None:      # the table base is loaded before the guard, in the entry block
        table = next(r for r in objdump(path, start, jmp[0]) if r[1] == "lea"
                     and "(%rip)" in r[2])
    base = int(re.search(r"#\s*([0-9a-f]+)", table[2]).group(1), 16)
    fn = binary.load_model(path, [start], with_callees=False, use_cache=cache).function(start)
    _check_table(path, fn, n, base, jmp[0])
    _check_table(path, binary.load_model(path, use_cache=cache).function(start), n, base, jmp[0])


@pytest.mark.slow
def test_whole_library_switches_and_tail_calls(cache):
    """In a whole-library recovery, every other function's code is around: a misread
    table no longer splits blocks (XML_ErrorString's lea and jmp end up in two blocks
    once another table's bogus entries land between them)."""
    path = need("libexpat.so.1")
    model = binary.load_model(path, use_cache=cache)
    for guard in ("%al", "%edi"):
        n, table, jmp = _switch(path, guard)
        start, _ = fde_of(path, jmp)
        _check_table(path, model.function(start), n, table, jmp)
