"""The static model of real binaries, against independent truth: objdump, nm, the bytes.

Each test builds its own tiny C programs with gcc in a temporary directory, so it does not
depend on samples/.  objdump -d is the independent disassembler (instruction boundaries,
PLT stubs, the address a jump table is loaded from), nm the independent symbol reader, and
the jump table entries are read back from the file with pyelftools.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from wcetfit.static import binary

from wcetfit.static import elfinfo
from wcetfit.static.cfgcache import CfgCache
from wcetfit.errors import BinaryError, FunctionNotFound
from wcetfit.model import CALL_IMPORTED, CALL_INDIRECT, CALL_INTERNAL

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("objdump") is None,
                                reason="needs gcc and binutils (objdump, nm, strip)")

SOURCE = r"""
#include <stdlib.h>
#include <string.h>

int helper(int x) { return x * 3 + 1; }          /* exported: others call it via the PLT */
static int __attribute__((noinline)) sq(int x) { return x * x; }

int loop_user(int n, const char *s) {
    int r = 0;
    for (int i = 0; i < n; i++) r += helper(i) + sq(i);
    return r + (int)strlen(s);
}

int dense_switch(int k, int a) {
    switch (k) {
    case 0: return a + 11;   case 1: return a * 27;  case 2: return sq(a) + 5;
    case 3: return a - 9;    case 4: return helper(a); case 5: return a ^ 77;
    case 6: return a << 3;   case 7: return a / 3;   default: return -1;
    }
}

int via_pointer(int (*f)(int), int x) { return f(x) + 1; }
int tail_pointer(int (*f)(int), int x) { return f(x); }
int tail_helper(int x) { return helper(x + 1); }

int nested(int n, int m) {
    int s = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            s += (i ^ j) & 7;
    return s;
}

__attribute__((noreturn, noinline)) static void die(int c) { exit(c); }
int checked(int x) { if (x < 0) die(3); return x + 1; }

void fill(char *d, int c, unsigned long n) {
    __asm__ volatile ("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
}

static int __attribute__((noinline)) count_bits(unsigned v) { int c = 0; while (v) { c += v & 1; v >>= 1; } return c; }
int uses_static(unsigned v) { return count_bits(v) + count_bits(v >> 3); }
"""

MAIN = r"""
int loop_user(int n, const char *s);
int nested(int n, int m);
int main(int argc, char **argv) { return loop_user(argc, argv[0]) + nested(argc, 3); }
"""


def _gcc(out, *args, cwd):
    subprocess.run(["gcc", *args, "-o", out], check=True, cwd=cwd, capture_output=True)
    return os.path.join(cwd, out)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("bin")
    (d / "t.c").write_text(SOURCE)
    (d / "main.c").write_text(MAIN)
    so = _gcc("libt.so", "-O2", "-shared", "-fPIC", "t.c", cwd=d)
    pie = _gcc("tpie", "-O2", "-fPIE", "-pie", "t.c", "main.c", cwd=d)
    exe = _gcc("texe", "-O2", "-fno-pie", "-no-pie", "t.c", "main.c", cwd=d)
    stripped = str(d / "libt-stripped.so")
    shutil.copy(so, stripped)
    subprocess.run(["strip", "--strip-all", stripped], check=True)
    return {"so": so, "pie": pie, "exe": exe, "stripped": stripped, "dir": str(d)}


@pytest.fixture()
def cache(tmp_path):
    return CfgCache(str(tmp_path / "cache"), enabled=True)


# --- independent truth ----------------------------------------------------------------------

_INSN = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
_LABEL = re.compile(r"^([0-9a-f]+) <(.+)>:$")


def objdump(path):
    """{address: (size, text)} of every instruction, and {label: address}."""
    out = subprocess.run(["objdump", "-d", "-w", path], check=True, capture_output=True,
                         text=True).stdout
    insns, labels = {}, {}
    for line in out.splitlines():
        m = _INSN.match(line)
        if m:
            insns[int(m.group(1), 16)] = (len(m.group(2).split()), m.group(3))
            continue
        m = _LABEL.match(line)
        if m:
            labels[m.group(2)] = int(m.group(1), 16)
    return insns, labels


def nm(path, dynamic=False):
    args = ["nm", "-D"] if dynamic else ["nm"]
    out = subprocess.run(args + ["--defined-only", path], check=True, capture_output=True,
                         text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWiI":
            syms[parts[2].split("@")[0]] = int(parts[0], 16)
    return syms


def check_boundaries(fn, insns):
    ends = []
    for b in fn.blocks:
        assert b.address in insns, f"{fn.name}: block {b.address:#x} is not an instruction start"
        total = 0
        for ins in b.instructions:
            assert ins.address in insns, f"{fn.name}: {ins.address:#x} is not an instruction"
            assert ins.size == insns[ins.address][0], f"{fn.name}: size at {ins.address:#x}"
            total += ins.size
        assert total == b.size
        ends.append((b.address, b.end))
    ends.sort()
    for (a0, e0), (a1, _) in zip(ends, ends[1:]):
        assert e0 <= a1, f"{fn.name}: blocks {a0:#x} and {a1:#x} overlap"


# --- tests ----------------------------------------------------------------------------------

def test_every_block_starts_at_an_instruction_boundary(built, cache):
    insns, _ = objdump(built["so"])
    bm = binary.load_model(built["so"], None, use_cache=cache)
    assert len(bm.functions) >= 10
    for fn in bm.functions.values():
        check_boundaries(fn, insns)
        blocks = set(fn.block_addresses)
        assert fn.entry in blocks and set(fn.exits) <= blocks
        for s, d in fn.edges:
            assert s in blocks and d in blocks


def test_function_addresses_are_link_time_addresses(built, cache):
    syms = nm(built["so"])
    summaries = {s.name: s for s in binary.list_functions(built["so"], use_cache=cache)}
    for name in ("helper", "sq", "loop_user", "dense_switch", "nested", "checked", "fill"):
        assert summaries[name].address == syms[name], name
    bm = binary.load_model(built["so"], ["loop_user"], use_cache=cache)
    assert bm.function("loop_user").address == syms["loop_user"]
    assert bm.function(syms["loop_user"]).name == "loop_user"


def test_calls_are_classified(built, cache):
    syms = nm(built["so"])
    _, labels = objdump(built["so"])
    bm = binary.load_model(built["so"], ["loop_user", "via_pointer", "tail_helper"], use_cache=cache)
    lu = bm.function("loop_user")
    by_name = {c.target_name: c for c in lu.calls}
    # helper is exported, so the call goes through this binary's own PLT: internal.
    assert by_name["helper"].kind == CALL_INTERNAL and by_name["helper"].target == syms["helper"]
    assert by_name["sq"].kind == CALL_INTERNAL and by_name["sq"].target == syms["sq"]
    assert by_name["strlen"].kind == CALL_IMPORTED
    assert by_name["strlen"].target == labels["strlen@plt"]
    # the call instruction really is where objdump says a call is
    insns, _ = objdump(built["so"])
    for c in lu.calls:
        assert insns[c.instruction][1].startswith("call")
        assert c.block in lu.block_addresses and lu.block_at(c.block).last.address == c.instruction
    (vp,) = bm.function("via_pointer").calls
    assert vp.kind == CALL_INDIRECT and vp.target is None and not vp.tail
    (th,) = bm.function("tail_helper").calls
    assert th.tail and th.kind == CALL_INTERNAL and th.target == syms["helper"]
    assert th.block in bm.function("tail_helper").exits
    # callees are modelled too (the count run relocates them)
    assert {"helper", "sq"} <= set(bm.functions)
    assert "strlen" not in bm.functions


def test_dense_switch_has_a_jump_table_read_back_from_the_file(built, cache):
    insns, _ = objdump(built["so"])
    fn = binary.load_model(built["so"], ["dense_switch"], use_cache=cache).function("dense_switch")
    (jt,) = fn.jump_tables
    assert insns[jt.instruction][1].startswith("jmp") and "*" in insns[jt.instruction][1]
    # objdump annotates the lea that loads the table: "# 2004 <...>"
    lea_targets = [int(m.group(1), 16) for a, (_, t) in insns.items()
                   if fn.address <= a < jt.instruction and t.startswith("lea")
                   for m in [re.search(r"# ([0-9a-f]+)", t)] if m]
    assert jt.table_address in lea_targets
    assert jt.entry_size == 4 and jt.base == jt.table_address   # gcc's PIC pattern
    from elftools.elf.elffile import ELFFile

    with open(built["so"], "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            h = seg.header
            if h.p_type == "PT_LOAD" and h.p_vaddr <= jt.table_address < h.p_vaddr + h.p_filesz:
                f.seek(h.p_offset + jt.table_address - h.p_vaddr)
                raw = f.read(4 * len(jt.targets))
    entries = [int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, len(raw), 4)]
    assert len(jt.targets) == 8
    assert list(jt.targets) == [jt.table_address + e for e in entries]
    for t in jt.targets:
        assert (jt.block, t) in fn.edges
    assert not fn.unresolved_jumps


def test_jump_through_a_function_pointer_is_an_indirect_tail_call(built, cache):
    # `return f(x)` compiles to `jmp *%rdi` (objdump): not a jump table, so a tail call
    # through a pointer that ends its block, not an unresolved jump.
    bm = binary.load_model(built["so"], ["tail_pointer"], use_cache=cache)
    fn = bm.function("tail_pointer")
    insns, _ = objdump(built["so"])
    lo, hi = fn.address, max(b.end for b in fn.blocks)
    jmps = [a for a, (_, text) in sorted(insns.items())
            if lo <= a < hi and re.match(r"(notrack )?jmp\s+\*%", text)]
    assert not fn.unresolved_jumps
    tails = [c for c in fn.calls if c.tail and c.kind == CALL_INDIRECT]
    assert len(tails) == 1
    blk = fn.block_at(tails[0].block)
    assert blk.last.address == tails[0].instruction and blk.address in fn.exits
    assert blk.last.mnemonic.endswith("jmp") and not fn.successors(blk.address)
    assert jmps == [tails[0].instruction]


def test_loops_and_nesting(built, cache):
    bm = binary.load_model(built["so"], ["loop_user", "nested"], use_cache=cache)
    (lp,) = bm.function("loop_user").loops
    assert lp.depth == 1 and lp.back_edges
    nest = bm.function("nested")
    depths = sorted(lp.depth for lp in nest.loops)
    assert depths[-1] == 2
    inner = next(lp for lp in nest.loops if lp.depth == 2)
    outer = next(lp for lp in nest.loops if lp.header == inner.parent)
    assert set(inner.body) < set(outer.body)


def test_noreturn_callee_ends_the_block(built, cache):
    fn = binary.load_model(built["so"], ["checked"], use_cache=cache).function("checked")
    (c,) = [c for c in fn.calls if c.target_name and c.target_name.startswith("die")]
    assert c.block in fn.exits and fn.successors(c.block) == ()
    assert not fn.warnings


def test_rep_string_instruction_is_not_a_loop(built, cache):
    fn = binary.load_model(built["so"], ["fill"], use_cache=cache).function("fill")
    reps = [b for b in fn.blocks if any(i.mnemonic.startswith("rep") for i in b.instructions)]
    assert reps
    assert fn.loops == ()
    for b in reps:
        assert (b.address, b.address) not in fn.edges


def test_coexec_classes_and_rank_on_a_real_function(built, cache):
    fn = binary.load_model(built["so"], ["loop_user"], use_cache=cache).function("loop_user")
    (lp,) = fn.loops
    cls = next(c for c in fn.coexec_classes if lp.header in c)
    assert fn.entry not in cls              # the loop runs n times, the entry once
    assert set(cls) <= set(lp.body)
    entry_cls = next(c for c in fn.coexec_classes if fn.entry in c)
    assert all(e in entry_cls for e in fn.exits if len(fn.exits) == 1)
    flat = sorted(a for c in fn.coexec_classes for a in c)
    assert flat == sorted(fn.block_addresses)
    assert 2 <= fn.max_rank <= len(fn.edges) - len(fn.blocks) + 2 + len(fn.exits)


@pytest.mark.parametrize("kind", ["pie", "exe"])
def test_executables(built, cache, kind):
    path = built[kind]
    info = binary.binary_info(path)
    assert info.kind == {"pie": "pie-executable", "exe": "executable"}[kind]
    if kind == "pie":
        assert info.extra["df_1_pie"] is True
    syms = nm(path)
    insns, _ = objdump(path)
    bm = binary.load_model(path, ["main", "nested"], use_cache=cache)
    for name in ("main", "nested", "loop_user"):
        fn = bm.function(name)
        assert fn.address == syms[name]
        check_boundaries(fn, insns)
    main = bm.function("main")
    # in an executable, calls to its own functions are direct
    assert {c.target_name for c in main.calls if c.kind == CALL_INTERNAL} >= {"loop_user", "nested"}


def test_shared_object_kind_and_symbols(built):
    info = binary.binary_info(built["so"])
    assert info.kind == "shared-object" and not info.stripped
    elf = elfinfo.read_elf(built["so"])
    _, labels = objdump(built["so"])
    plt = {v.name: k for k, v in elf.plt.items()}
    for label, addr in labels.items():
        if label.endswith("@plt"):
            assert plt[label[:-4]] == addr


def test_stripped_binary_by_address(built, cache):
    syms = nm(built["so"])
    info = binary.binary_info(built["stripped"])
    assert info.stripped
    # exported names survive in .dynsym; static functions are named by address
    summ = {s.address: s.name for s in binary.list_functions(built["stripped"], use_cache=cache)}
    assert summ[syms["loop_user"]] == "loop_user"
    assert summ[syms["sq"]] == f"sub_{syms['sq']:x}"
    addr = f"{syms['uses_static']:#x}"
    bm = binary.load_model(built["stripped"], [addr], use_cache=cache)
    fn = bm.function(syms["uses_static"])
    assert fn.name == "uses_static"
    callee = next(c for c in fn.calls if c.kind == CALL_INTERNAL)
    assert callee.target_name == f"sub_{syms['count_bits']:x}"
    assert bm.function(f"sub_{syms['count_bits']:x}").loops
    # same model as the unstripped binary, names aside
    full = binary.load_model(built["so"], ["uses_static"], use_cache=cache).function("uses_static")
    assert full.blocks == fn.blocks and full.edges == fn.edges
    assert full.coexec_classes == fn.coexec_classes
    with pytest.raises(FunctionNotFound, match="stripped|did you mean"):
        binary.load_model(built["stripped"], ["count_bits"], use_cache=cache)


def test_cache_round_trip_and_second_run_without_angr(built, tmp_path, monkeypatch):
    cache = CfgCache(str(tmp_path / "c"), enabled=True)
    first = binary.load_model(built["so"], ["loop_user", "dense_switch"], use_cache=cache)

    def boom(*a, **k):
        raise AssertionError("angr must not run: the models are cached")

    monkeypatch.setattr(binary, "recover_raw", boom)
    second = binary.load_model(built["so"], ["loop_user", "dense_switch"], use_cache=cache)
    assert second.functions == first.functions
    assert second.requested == first.requested
    # a changed binary is a different cache entry
    other = str(tmp_path / "copy.so")
    shutil.copy(built["so"], other)
    with open(other, "ab") as f:
        f.write(b"\0")
    with pytest.raises(AssertionError, match="angr must not run"):
        binary.load_model(other, ["loop_user"], use_cache=cache)


def test_aliases_find_the_same_function(built, cache):
    bm = binary.load_model(built["so"], ["loop_user"], use_cache=cache)
    assert bm.function("0x%x" % bm.function("loop_user").address) is bm.function("loop_user")


# --- bad input --------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(BinaryError, match="no such file"):
        binary.load_model(str(tmp_path / "nope.so"), ["f"])


def test_not_an_elf(tmp_path):
    p = tmp_path / "x.so"
    p.write_text("hello\n")
    with pytest.raises(BinaryError, match="not an ELF"):
        binary.list_functions(str(p))


def _elf_header(machine: int, elfclass: int = 2, etype: int = 3) -> bytes:
    h = bytearray(64)
    h[:4] = b"\x7fELF"
    h[4], h[5], h[6] = elfclass, 1, 1
    h[16:18] = etype.to_bytes(2, "little")
    h[18:20] = machine.to_bytes(2, "little")
    return bytes(h)


def test_other_architecture_aarch64(tmp_path):
    p = tmp_path / "arm.so"
    p.write_bytes(_elf_header(183))
    with pytest.raises(BinaryError, match="AArch64.*x86-64 binaries only"):
        binary.load_model(str(p), ["f"])


def test_other_architecture_i386(tmp_path):
    src = tmp_path / "a.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    r = subprocess.run(["gcc", "-m32", "-c", str(src), "-o", str(tmp_path / "a32.o")],
                       capture_output=True)
    if r.returncode != 0:
        p = tmp_path / "a32.so"                     # no 32-bit toolchain: a header suffices
        p.write_bytes(_elf_header(3, elfclass=1))
    else:
        p = tmp_path / "a32.o"
    with pytest.raises(BinaryError, match="32-bit ELF for i386"):
        binary.list_functions(str(p))


def test_relocatable_object(tmp_path):
    src = tmp_path / "a.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    subprocess.run(["gcc", "-c", str(src), "-o", str(tmp_path / "a.o")], check=True)
    with pytest.raises(BinaryError, match="relocatable object"):
        binary.list_functions(str(tmp_path / "a.o"))


def test_unknown_function_suggests_close_names(built):
    with pytest.raises(FunctionNotFound, match=r"no function named 'loop_usr'.*loop_user"):
        binary.load_model(built["so"], ["loop_usr"])
    with pytest.raises(FunctionNotFound, match="not in an executable section"):
        binary.load_model(built["so"], ["0x10"])


def test_errors_are_one_line(tmp_path, built):
    for call in (lambda: binary.load_model(str(tmp_path / "missing"), ["f"]),
                 lambda: binary.load_model(built["so"], ["no_such_function_at_all"])):
        with pytest.raises(BinaryError) as ei:
            call()
        assert "\n" not in str(ei.value)


# --- third-party code -----------------------------------------------------------------------------

SYSTEM_LIBS = ["/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1"]


@pytest.mark.slow
def test_third_party_library_block_boundaries(tmp_path):
    lib = next((p for p in SYSTEM_LIBS if os.path.exists(p)), None)
    if lib is None:
        pytest.skip("no system libz to test a third-party binary on")
    cache = CfgCache(str(tmp_path / "c"), enabled=True)
    insns, _ = objdump(lib)
    dyn = nm(lib, dynamic=True)
    bm = binary.load_model(lib, None, use_cache=cache)
    assert len(bm.functions) > 50
    for fn in bm.functions.values():
        check_boundaries(fn, insns)
    for name in ("inflate", "deflate", "crc32", "adler32"):
        assert bm.function(name).address == dyn[name]
    # the parallel whole-binary recovery gives the same models as the serial one
    os.environ["WCETFIT_JOBS"] = "2"
    try:
        par = binary.load_model(lib, None, use_cache=False)
    finally:
        del os.environ["WCETFIT_JOBS"]
    assert set(par.functions) == set(bm.functions)
    assert all(par.functions[n] == bm.functions[n] for n in bm.functions)


# --- real executions: counts from gdb breakpoints satisfy the model ---------------------------

DRIVEN = r"""
#include <stdlib.h>
__attribute__((noinline)) int target(int n, int m) {
    int s = 0;
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (i & 1) s += i * m; else s -= m;
        if (s > 1000) break;
        for (int j = 0; j < (i % 3); j++) {
            switch ((i + j) % 6) { case 0: s += 1; break; case 1: s ^= 3; break; case 2: s -= 7; break;
                                   case 3: s *= 3; break; case 4: s += j; break; default: s--; }
        }
    }
    return s;
}
int main(int argc, char **argv) { return target(atoi(argv[1]), atoi(argv[2])) & 0xff; }
"""


def _gdb_counts(exe, addrs, args):
    """How often each address is reached in one run: gdb breakpoints that never stop."""
    cmds = ["-ex", "set pagination off", "-ex", "set confirm off"]
    for a in addrs:
        cmds += ["-ex", f"break *{a:#x}", "-ex", "ignore $bpnum 100000000"]
    cmds += ["-ex", "run", "-ex", "info breakpoints"]
    r = subprocess.run(["gdb", "-nx", "-batch", *cmds, "--args", exe, *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    hits, cur = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"^\d+\s+breakpoint\s+keep\s+y\s+(0x[0-9a-f]+)", line)
        if m:
            cur = int(m.group(1), 16)
            hits[cur] = 0
            continue
        m = re.search(r"already hit (\d+) time", line)
        if m and cur is not None:
            hits[cur] = int(m.group(1))
    if set(hits) != set(addrs):
        pytest.skip(f"gdb could not run the program here: {r.stderr.strip()[:200]}")
    return [hits[a] for a in addrs]


def test_counts_of_real_runs_satisfy_the_model(tmp_path):
    """Block counts of real executions (gdb, independent of angr and of wcetfit) obey the
    model: every structural relation holds (so no edge is missing), co-executed blocks
    always share a count, and the rank stays within max_rank."""
    import numpy as np

    from wcetfit.static.structure import count_space_constraints

    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed")
    (tmp_path / "g.c").write_text(DRIVEN)
    exe = _gcc("g", "-O2", "-fno-pie", "-no-pie", "g.c", cwd=tmp_path)
    fn = binary.load_model(exe, ["target"], use_cache=False).function("target")
    # the switch is a jump table of absolute 8-byte entries (gcc, non-PIC): read it back
    (jt,) = fn.jump_tables
    assert jt.entry_size == 8 and jt.base is None
    raw = elfinfo.read_elf(exe).read(jt.table_address, 8 * len(jt.targets))
    assert list(jt.targets) == [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
    addrs = [b.address for b in fn.blocks]
    runs = [(0, 1), (-3, 2), (1, 5), (7, 3), (12, 100), (30, 1), (5, -4), (9, 0), (40, 7)]
    M = np.array([_gdb_counts(exe, addrs, a) for a in runs])
    V = np.hstack([M, np.ones((len(runs), 1), dtype=int)])
    C = count_space_constraints(fn)
    assert not (C @ V.T).any()
    for cls in fn.coexec_classes:
        cols = [addrs.index(a) for a in cls]
        assert all((M[:, c] == M[:, cols[0]]).all() for c in cols)
    assert np.linalg.matrix_rank(V) <= fn.max_rank
    # and the runs do tell apart blocks of different classes somewhere
    assert M[:, addrs.index(fn.loops[0].header)].max() > 1


def test_relative_jump_table_with_hoisted_base(tmp_path):
    """PIC code: gcc loads the table's address once, outside the loop (angr's resolver
    misses this one; wcetfit's own resolves it), entries relative to the table."""
    (tmp_path / "g.c").write_text(DRIVEN)
    exe = _gcc("gpie", "-O2", "-fPIE", "-pie", "g.c", cwd=tmp_path)
    insns, _ = objdump(exe)
    fn = binary.load_model(exe, ["target"], use_cache=False).function("target")
    assert not fn.unresolved_jumps and not fn.warnings
    (jt,) = fn.jump_tables
    assert jt.entry_size == 4 and jt.base == jt.table_address
    raw = elfinfo.read_elf(exe).read(jt.table_address, 4 * len(jt.targets))
    vals = [int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, len(raw), 4)]
    assert list(jt.targets) == [jt.table_address + v for v in vals]
    assert all(t in insns for t in jt.targets)
    assert {d for s, d in fn.edges if s == jt.block} == set(jt.targets)


def test_callees_model_warnings_are_one_line_the_roots_each_their_own(caplog):
    """libc's fnmatch printed ten warnings about calloc, malloc_trim and stdio internals it
    can reach, and a user could not tell whether they mattered: the requested function's
    are said one by one, the callees' in one line that names them (each still at info)."""
    import logging
    from types import SimpleNamespace

    models = {"root": SimpleNamespace(name="root", warnings=("root: unresolved jump",)),
              **{f"c{i}": SimpleNamespace(name=f"c{i}", warnings=(f"c{i}: falls through",))
                 for i in range(8)},
              "quiet": SimpleNamespace(name="quiet", warnings=())}
    with caplog.at_level(logging.INFO, logger="wcetfit.static.binary"):
        binary._log_model_warnings(models, {"root"})
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned[0] == "root: unresolved jump"
    assert len(warned) == 2 and warned[1].startswith("8 callee(s) have warnings"), warned
    assert "(c0, c1, c2, c3, c4, c5 …)" in warned[1] and "quiet" not in warned[1]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "c7: falls through" in infos


def test_an_address_inside_a_function_is_refused_naming_the_function():
    """liblzma's 0x13a24, four bytes into lzma_crc32 (inside an instruction): init took
    it, and every input "crashed" with advice to fix generate()."""
    import os

    from wcetfit.errors import FunctionNotFound
    from wcetfit.static.elfinfo import read_elf
    from wcetfit.static.symbols import SymbolIndex

    lib = "/lib/x86_64-linux-gnu/liblzma.so.5"
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is absent")
    index = SymbolIndex(read_elf(lib))
    start = index.resolve("lzma_crc32")
    assert index.resolve(hex(start)) == start
    with pytest.raises(FunctionNotFound) as e:
        index.resolve(hex(start + 4))
    assert f"is inside lzma_crc32 ({start:#x}+0x4), not where a function starts" in str(e.value)
