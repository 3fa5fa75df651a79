"""The instrumented copy: encoder, relocation plan, and runs of relocated asm snippets.

Independent truth here: capstone decodes every emitted instruction (the encoder must say
what we meant); the relocated snippets must return what the originals return; their
block counts must equal counts derived by hand from the snippets' control flow.

The static models of the snippets are built by :func:`mini_model` below — a small
capstone recursive-descent CFG builder written for the tests, independent of
wcetfit.static.binary (angr).  Jump tables are declared by the test.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import capstone
import pytest
from capstone import x86_const as X

from wcetfit.count import x86enc as enc
from wcetfit.errors import RelocationError
from wcetfit.model import (CALL_IMPORTED, CALL_INDIRECT, CALL_INTERNAL, Block, CallSite,
                           FunctionModel, Instruction, JumpTable)

MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
MD.detail = True


def decode(code: bytes, at: int) -> list:
    return list(MD.disasm(code, at))


# ============================================================================================
# helpers shared with test_counting.py / test_count_oracle.py
# ============================================================================================

def have_gcc() -> bool:
    return shutil.which("gcc") is not None


def build_so(tmp_path, sources: dict[str, str], name: str = "snip", flags=("-O2",)) -> str:
    """Compile ``sources`` (file name → text; .c or .S) into tmp_path/lib<name>.so."""
    if not have_gcc():
        pytest.skip("gcc is not installed")
    files = []
    for fname, text in sources.items():
        p = tmp_path / fname
        p.write_text(textwrap.dedent(text))
        files.append(str(p))
    out = str(tmp_path / f"lib{name}.so")
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", out, *files], check=True,
                   capture_output=True, text=True)
    return out


class ElfInfo:
    """Symbols and PLT of a shared object, via pyelftools (test-side, independent of angr)."""

    def __init__(self, path: str) -> None:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.relocation import RelocationSection

        self.path = path
        self.symbols: dict[str, tuple[int, int]] = {}
        self.plt: dict[int, str] = {}           # PLT stub address → symbol name
        self.defined: set[str] = set()
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            self.segments = [(s["p_vaddr"], s["p_filesz"], s["p_offset"])
                             for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            for secname in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(secname)
                if sec is None:
                    continue
                for sym in sec.iter_symbols():
                    if sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF":
                        self.symbols.setdefault(sym.name, (sym["st_value"], sym["st_size"]))
                        self.defined.add(sym.name)
            got_names: dict[int, str] = {}
            for sec in elf.iter_sections():
                if isinstance(sec, RelocationSection):
                    symtab = elf.get_section(sec["sh_link"])
                    for rel in sec.iter_relocations():
                        if rel["r_info_sym"]:
                            got_names[rel["r_offset"]] = symtab.get_symbol(
                                rel["r_info_sym"]).name
            self.got_names = got_names
            for secname in (".plt", ".plt.sec", ".plt.got"):
                sec = elf.get_section_by_name(secname)
                if sec is None:
                    continue
                for insn in MD.disasm(sec.data(), sec["sh_addr"]):
                    if insn.mnemonic.endswith("jmp") and insn.operands \
                            and insn.operands[0].type == X.X86_OP_MEM \
                            and insn.operands[0].mem.base == X.X86_REG_RIP:
                        slot = insn.address + insn.size + insn.operands[0].mem.disp
                        if slot in got_names:
                            # The stub starts at the 16-byte slot holding this jmp.
                            self.plt[insn.address & ~15] = got_names[slot]

    def read(self, address: int, size: int) -> bytes:
        for vaddr, filesz, offset in self.segments:
            if vaddr <= address and address + size <= vaddr + filesz:
                with open(self.path, "rb") as fh:
                    fh.seek(offset + address - vaddr)
                    return fh.read(size)
        raise KeyError(hex(address))


def find_jump_tables(info: ElfInfo, name: str) -> tuple[JumpTable, ...]:
    """gcc's PIC switch tables in a function, found the way gcc writes them (tests only):
    ``cmp idx, N-1; ja default`` … ``lea base, [rip+T]`` … ``movsxd r, [base+idx*4]``;
    ``add r, base``; ``jmp r``."""
    import struct

    start, size = info.symbols[name]
    insns = list(MD.disasm(info.read(start, size), start))
    out = []
    for k, i in enumerate(insns):
        if not (i.mnemonic.split()[-1] == "jmp" and i.operands[0].type == X.X86_OP_REG):
            continue
        jreg = i.operands[0].reg
        try:
            add = next(j for j in reversed(insns[:k]) if j.mnemonic == "add"
                       and j.operands[0].type == X.X86_OP_REG and j.operands[0].reg == jreg)
            breg = add.operands[1].reg
            lea = next(j for j in reversed(insns[:insns.index(add)]) if j.mnemonic == "lea"
                       and j.operands[0].reg == breg
                       and j.operands[1].mem.base == X.X86_REG_RIP)
            ja = next(j for j in reversed(insns[:k]) if j.mnemonic == "ja")
        except (StopIteration, IndexError):
            continue                      # not gcc's table pattern
        table = lea.address + lea.size + lea.operands[1].mem.disp
        cmp = insns[insns.index(ja) - 1]
        if cmp.mnemonic != "cmp" or cmp.operands[1].type != X.X86_OP_IMM:
            continue
        n = cmp.operands[1].imm + 1
        raw = info.read(table, 4 * n)
        targets = tuple(table + struct.unpack_from("<i", raw, 4 * e)[0] for e in range(n))
        out.append(JumpTable(0, i.address, table, 4, table, targets))
    return tuple(out)


def mini_model(info: ElfInfo, name: str, jump_tables=(), unresolved=()) -> FunctionModel:
    """A FunctionModel by recursive descent over the symbol's bytes (calls end blocks)."""
    start, size = info.symbols[name]
    code = info.read(start, size)
    insns = {i.address: i for i in MD.disasm(code, start)}
    end = start + size
    tables = {jt.instruction: jt for jt in jump_tables}
    func_starts = {a: n for n, (a, _s) in info.symbols.items()}

    def _is_jump(i) -> bool:
        # capstone puts LOOP* in BRANCH_RELATIVE only, not in JUMP.
        return X.X86_GRP_JUMP in i.groups or i.mnemonic.startswith("loop")

    def succs(i) -> tuple[list[int], bool]:
        """(successor addresses inside the function, is an exit)."""
        m = i.mnemonic.split()[-1]
        nxt = i.address + i.size
        if X.X86_GRP_RET in i.groups:
            return [], True
        if X.X86_GRP_CALL in i.groups:
            return [nxt], False
        if _is_jump(i):
            op = i.operands[0]
            if op.type == X.X86_OP_IMM:
                tgt = op.imm
                inside = start <= tgt < end
                if m == "jmp":
                    return ([tgt], False) if inside else ([], True)
                return ([tgt] if inside else []) + [nxt], not inside
            if i.address in tables:
                return list(tables[i.address].targets), False
            return [], True
        if m in ("hlt", "ud2"):
            return [], True
        return [nxt], False

    leaders = {start}
    seen = set()
    todo = [start]
    while todo:
        a = todo.pop()
        while a in insns and a not in seen:
            seen.add(a)
            i = insns[a]
            ss, _exit = succs(i)
            ends = (_is_jump(i) or X.X86_GRP_RET in i.groups
                    or X.X86_GRP_CALL in i.groups or i.mnemonic in ("hlt", "ud2"))
            if ends:
                for s in ss:
                    leaders.add(s)
                    todo.append(s)
                break
            a = ss[0]
    blocks = []
    edges = []
    exits = []
    calls = []
    for lead in sorted(leaders):
        if lead not in seen:
            continue
        members = []
        a = lead
        while True:
            i = insns[a]
            members.append(i)
            ss, is_exit = succs(i)
            nxt = a + i.size
            ends = (_is_jump(i) or X.X86_GRP_RET in i.groups
                    or X.X86_GRP_CALL in i.groups or i.mnemonic in ("hlt", "ud2"))
            if ends or nxt in leaders or nxt not in insns:
                break
            a = nxt
        last = members[-1]
        ss, is_exit = succs(last)
        edges.extend((lead, s) for s in ss)
        if is_exit:
            exits.append(lead)
        if X.X86_GRP_CALL in last.groups or (X.X86_GRP_JUMP in last.groups and is_exit):
            op = last.operands[0]
            tail = X.X86_GRP_JUMP in last.groups
            if op.type == X.X86_OP_IMM:
                tgt = op.imm
                if tgt in info.plt:
                    sym = info.plt[tgt]
                    if sym in info.defined:
                        calls.append(CallSite(lead, last.address, CALL_INTERNAL,
                                              info.symbols[sym][0], sym, tail))
                    else:
                        calls.append(CallSite(lead, last.address, CALL_IMPORTED, tgt, sym, tail))
                elif tgt in func_starts:
                    calls.append(CallSite(lead, last.address, CALL_INTERNAL, tgt,
                                          func_starts[tgt], tail))
                elif not tail:
                    calls.append(CallSite(lead, last.address, CALL_INTERNAL, tgt, None, tail))
            elif last.address not in tables and last.address not in unresolved:
                calls.append(CallSite(lead, last.address, CALL_INDIRECT, None, None, tail))
        blocks.append(Block(lead, sum(i.size for i in members),
                            tuple(Instruction(i.address, i.size, i.mnemonic, i.op_str)
                                  for i in members)))
    return FunctionModel(
        name=name, address=start, blocks=tuple(blocks), edges=tuple(edges), entry=start,
        exits=tuple(exits), loops=(), calls=tuple(calls), jump_tables=tuple(jump_tables),
        coexec_classes=(), max_rank=0, unresolved_jumps=tuple(unresolved))


def models_for(path: str, roots) -> dict[str, FunctionModel]:
    """Static models of ``roots`` and their internal callees.

    From wcetfit.static.binary (angr) when it is available, else from :func:`mini_model` (with
    gcc-pattern jump tables), so the count tests run either way."""
    try:
        from wcetfit.static import binary
        load = binary.load_model
    except (ImportError, AttributeError):
        load = None
    if load is not None:
        return dict(load(path, list(roots), with_callees=True).functions)
    info = ElfInfo(path)
    models: dict[str, FunctionModel] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in models:
            continue
        models[name] = m = mini_model(info, name, jump_tables=find_jump_tables(info, name))
        for c in m.calls:
            if c.kind == CALL_INTERNAL and c.target_name in info.symbols:
                todo.append(c.target_name)
    return models


def symbol_address(info: ElfInfo, name: str) -> int:
    return info.symbols[name][0]


def local_label(path: str, label: str) -> int:
    """Address of a (local) symbol of any type, from nm."""
    out = subprocess.run(["nm", path], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == label:
            return int(parts[0], 16)
    raise KeyError(label)


# ============================================================================================
# encoder
# ============================================================================================

@pytest.mark.parametrize("at,target", [(0x1000, 0x1000), (0x1000, 0x7fff0000),
                                        (0x7fff0000, 0x1000), (0x5000, 0x4000)])
def test_branches_decode_to_their_targets(at, target):
    i, = decode(enc.jmp_rel32(at, target), at)
    assert (i.mnemonic, i.operands[0].imm, i.size) == ("jmp", target, 5)
    i, = decode(enc.call_rel32(at, target), at)
    assert (i.mnemonic, i.operands[0].imm, i.size) == ("call", target, 5)
    for cc, name in enumerate(enc.CONDITIONS):
        i, = decode(enc.jcc_rel32(cc, at, target), at)
        assert i.size == 6 and i.operands[0].imm == target
        assert enc.JCC_CODES[i.mnemonic] == cc, (name, i.mnemonic)


def test_rel32_out_of_range_is_refused():
    with pytest.raises(enc.EncodingError):
        enc.jmp_rel32(0, 1 << 32)
    with pytest.raises(enc.EncodingError):
        enc.mov_rax_from(1 << 33, 0)


def test_every_jcc_spelling_maps_to_capstones_name():
    # Whatever spelling a model uses, the encoded jcc decodes to the same condition.
    for spelling, cc in enc.JCC_CODES.items():
        i, = decode(enc.jcc_rel32(spelling, 0x100, 0x200), 0x100)
        assert enc.JCC_CODES[i.mnemonic] == cc


def _ripabs(i) -> int:
    for op in i.operands:
        if op.type == X.X86_OP_MEM and op.mem.base == X.X86_REG_RIP:
            return i.address + i.size + op.mem.disp
    raise AssertionError(i)


def test_counter_sequences_decode_as_intended():
    at, ctr = 0x40001000, 0x40008010
    fast = decode(enc.counter_fast(at, ctr), at)
    assert [(i.mnemonic, i.op_str.split(",")[0]) for i in fast] == [("inc", f"qword ptr [rip + {hex(ctr - at - 7)}]")]
    assert _ripabs(fast[0]) == ctr and len(enc.counter_fast(at, ctr)) == enc.COUNTER_FAST_SIZE
    safe_bytes = enc.counter_safe(at, ctr)
    assert len(safe_bytes) == enc.COUNTER_SAFE_SIZE
    safe = decode(safe_bytes, at)
    assert [i.mnemonic for i in safe] == ["lea", "push", "mov", "lea", "mov", "pop", "lea"]
    assert safe[0].op_str == "rsp, [rsp - 0x80]" and safe[-1].op_str == "rsp, [rsp + 0x80]"
    assert _ripabs(safe[2]) == ctr and _ripabs(safe[4]) == ctr
    assert safe[3].op_str == "rax, [rax + 1]"
    # Nothing in the flag-preserving sequence writes a status flag.
    assert all(i.eflags == 0 for i in safe)
    assert sum(i.size for i in safe) == len(safe_bytes)


@pytest.mark.parametrize("save_flags", [False, True])
def test_trace_sequence_decodes_as_intended(save_flags):
    at, ctr, state = 0x10000, 0x20008, 0x30000
    code = enc.trace_append(at, 0xABCDE, ctr, state, save_flags)
    assert len(code) == enc.trace_append_size(save_flags)
    insns = decode(code, at)
    assert sum(i.size for i in insns) == len(code)
    names = [i.mnemonic for i in insns]
    core = ["push", "inc", "mov", "cmp", "jae", "mov", "add", "mov", "jmp", "inc", "pop"]
    if save_flags:
        core = ["pushfq"] + core + ["popfq"]
    assert names == ["lea"] + core + ["lea"]
    by_name = {i.address: i for i in insns}
    jae = next(i for i in insns if i.mnemonic == "jae")
    jmp = next(i for i in insns if i.mnemonic == "jmp")
    full = by_name[jae.operands[0].imm]
    assert full.mnemonic == "inc" and _ripabs(full) == state + 16
    done = by_name[jmp.operands[0].imm]
    assert done.mnemonic == "pop"
    store = next(i for i in insns if i.mnemonic == "mov" and i.op_str.startswith("dword"))
    assert store.op_str == f"dword ptr [rax], {hex(0xABCDE)}"
    assert _ripabs(insns[2 + save_flags]) == ctr


def test_lea_rsp_forms():
    for delta in (-128, 127, 128, -4096):
        i, = decode(enc.lea_rsp(delta), 0)
        assert i.mnemonic == "lea" and i.operands[1].mem.disp == delta
        assert i.operands[1].mem.base == X.X86_REG_RSP


# ============================================================================================
# relocation of asm snippets, run for real
# ============================================================================================

ASM = r"""
    .intel_syntax noprefix
    .text

    # sum of 1..n with a short backward jcc and a short forward jmp.
    .globl loop_sum
    .type loop_sum, @function
loop_sum:
    xor eax, eax
    test rdi, rdi
    jle 2f
1:  add rax, rdi
    dec rdi
    jne 1b
2:  ret
    .size loop_sum, .-loop_sum

    # RIP-relative load, store and read-modify-write of a data word.
    .globl rip_data
    .type rip_data, @function
rip_data:
    mov rax, qword ptr [rip + data_word]
    add rax, rdi
    mov qword ptr [rip + data_word], rax
    add qword ptr [rip + data_word], 1
    cmp dword ptr [rip + data_word], 100000
    mov rax, qword ptr [rip + data_word]
    ret
    .size rip_data, .-rip_data

    # flags live across a block boundary: the counter at label 3 must preserve them.
    .globl flags_across
    .type flags_across, @function
flags_across:
    cmp rdi, rsi
    jl 3f
    mov eax, 1
    jg 4f
    mov eax, 2
    ret
3:  mov eax, 3
    ret
4:  ret
    .size flags_across, .-flags_across

    # only CF live across a block boundary: INC may count there, the trace may not
    # append without saving the flags (its CMP/ADD write CF).
    .globl cf_only
    .type cf_only, @function
cf_only:
    cmp rdi, rsi
    mov eax, 0
    jmp 7f
7:  adc eax, 0
    ret
    .size cf_only, .-cf_only

    # red zone: a leaf keeps a value below rsp across a block boundary.
    .globl red_zone
    .type red_zone, @function
red_zone:
    mov qword ptr [rsp - 8], rdi
    mov qword ptr [rsp - 128], rsi
    test rdi, rdi
    je 5f
    add qword ptr [rsp - 8], 10
5:  mov rax, qword ptr [rsp - 8]
    add rax, qword ptr [rsp - 128]
    ret
    .size red_zone, .-red_zone

    # calls: a direct call, a call through our own PLT, and a recursive call.
    .globl helper
    .hidden helper
    .type helper, @function
helper:
    lea rax, [rdi + rdi]
    ret
    .size helper, .-helper

    .globl exported
    .type exported, @function
exported:
    lea rax, [rdi + 7]
    ret
    .size exported, .-exported

    .globl caller
    .type caller, @function
caller:
    push rbx
    mov rbx, rdi
    call helper
    mov rdi, rax
    call exported@PLT
    add rax, rbx
    pop rbx
    ret
    .size caller, .-caller

    .globl fact
    .hidden fact
    .type fact, @function
fact:
    cmp rdi, 1
    jbe 6f
    push rbx
    mov rbx, rdi
    lea rdi, [rdi - 1]
    call fact
    imul rax, rbx
    pop rbx
    ret
6:  mov eax, 1
    ret
    .size fact, .-fact

    # a tail call to another function.
    .globl tail
    .type tail, @function
tail:
    add rdi, 1
    jmp helper
    .size tail, .-tail

    # a jump table with 4-byte entries relative to the table (gcc's PIC form).
    .globl switch4
    .type switch4, @function
switch4:
    cmp rdi, 3
    ja 17f
    lea rdx, [rip + table4]
    movsxd rax, dword ptr [rdx + rdi*4]
    add rax, rdx
switch4_jmp:
    jmp rax
10: mov eax, 100
    ret
11: mov eax, 101
    ret
12: mov eax, 102
    ret
13: mov eax, 103
    ret
17: mov rax, -1
    ret
    .size switch4, .-switch4

    # a jump table of 8-byte absolute addresses (relocated at load time).
    .globl switch8
    .type switch8, @function
switch8:
    cmp rdi, 2
    ja 47f
    lea rdx, [rip + table8]
switch8_jmp:
    jmp qword ptr [rdx + rdi*8]
40: mov eax, 200
    ret
41: mov eax, 201
    ret
42: mov eax, 202
    ret
47: mov rax, -2
    ret
    .size switch8, .-switch8

    # a loop around a switch whose table address is loaded once, outside the loop.
    .globl switchloop
    .type switchloop, @function
switchloop:
    xor eax, eax
    lea r8, [rip + table_loop]
20: test rdi, rdi
    je 29f
    mov rcx, rdi
    and ecx, 3
    movsxd rdx, dword ptr [r8 + rcx*4]
    add rdx, r8
switchloop_jmp:
    jmp rdx
21: add rax, 1
    jmp 28f
22: add rax, 10
    jmp 28f
23: add rax, 100
    jmp 28f
24: add rax, 1000
28: dec rdi
    jmp 20b
29: ret
    .size switchloop, .-switchloop

    # an indirect jump through a register that nobody resolved.
    .globl wild
    .type wild, @function
wild:
    test rdi, rdi
    jne 30f
    lea rax, [rip + 30f]
wild_jmp:
    jmp rax
30: ret
    .size wild, .-wild

    # LOOP has no rel32 form.
    .globl uses_loop
    .type uses_loop, @function
uses_loop:
    mov rcx, rdi
    xor eax, eax
31: inc rax
    loop 31b
    ret
    .size uses_loop, .-uses_loop

    .globl uses_jrcxz
    .type uses_jrcxz, @function
uses_jrcxz:
    mov rcx, rdi
    stc
    jrcxz 93f
    mov eax, 10
    adc rax, 0
    ret
93: mov eax, 20
    adc rax, 0
    ret
    .size uses_jrcxz, .-uses_jrcxz

    .globl uses_loopne
    .type uses_loopne, @function
uses_loopne:
    mov rcx, rdi
    xor eax, eax
94: inc rax
    cmp rax, 5
    loopne 94b
    ret
    .size uses_loopne, .-uses_loopne

    .section .rodata
    .p2align 2
table4:
    .long 10b - table4
    .long 11b - table4
    .long 12b - table4
    .long 13b - table4
table_loop:
    .long 24b - table_loop
    .long 21b - table_loop
    .long 22b - table_loop
    .long 23b - table_loop

    .section .data.rel.ro,"aw"
    .p2align 3
table8:
    .quad 40b
    .quad 41b
    .quad 42b

    .data
    .p2align 3
data_word:
    .quad 5
    .section .note.GNU-stack,"",@progbits
"""


@pytest.fixture(scope="module")
def snippets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("snip")
    path = build_so(tmp, {"snip.S": ASM})
    return path, ElfInfo(path)


def _table(info: ElfInfo, path: str, fn: str, jmp_label: str, table_label: str,
           n: int) -> JumpTable:
    table = local_label(path, table_label)
    raw = info.read(table, 4 * n)
    import struct
    targets = tuple(table + struct.unpack_from("<i", raw, 4 * k)[0] for k in range(n))
    jmp = local_label(path, jmp_label)
    return JumpTable(block=0, instruction=jmp, table_address=table, entry_size=4, base=table,
                     targets=targets)


def _models(snippets, names, **tables):
    path, info = snippets
    out = {}
    for name in names:
        jts = tables.get(name, ())
        out[name] = mini_model(info, name, jump_tables=jts)
    return out


def _copy(snippets, functions, trace=False):
    from wcetfit.count.instrumented import InstrumentedCopy
    from wcetfit.loader import load_binary

    path, _info = snippets
    return InstrumentedCopy(load_binary(path), functions, trace=trace, trace_cap=1 << 16)


def _fn(address: int, proto: str = "long(*)(long)"):
    import cffi
    return cffi.FFI().cast(proto, address)


def _counts_by_address(copy, name):
    blocks = copy.plan.slots[name].blocks
    return dict(zip(blocks, copy.counts()[name].tolist()))


@pytest.mark.parametrize("trace", [False, True])
def test_loop_with_short_jumps(snippets, trace):
    m = _models(snippets, ["loop_sum"])
    with _copy(snippets, [m["loop_sum"]], trace) as copy:
        f = _fn(copy.entry("loop_sum"))
        orig = _fn(copy.original("loop_sum"))
        for n in (0, 1, 5, 1000):
            copy.reset()
            assert f(n) == orig(n) == n * (n + 1) // 2
            c = _counts_by_address(copy, "loop_sum")
            fm = m["loop_sum"]
            entry, body, done = (b.address for b in fm.blocks)
            assert c == {entry: 1, body: n, done: 1}
            if trace:
                ids = copy.trace().tolist()
                bid = lambda a: copy.plan.block_id("loop_sum", a)  # noqa: E731
                assert ids == [bid(entry)] + [bid(body)] * n + [bid(done)]


def test_rip_relative_operands_keep_their_targets(snippets):
    from wcetfit.loader import load_binary

    m = _models(snippets, ["rip_data"])
    path, info = snippets
    lb = load_binary(path)
    word = ctypes.c_int64.from_address(lb.runtime(local_label(path, "data_word")))
    with _copy(snippets, [m["rip_data"]]) as copy:
        f = _fn(copy.entry("rip_data"))
        word.value = 5
        assert f(10) == 16 and word.value == 16
        assert f(1) == 18 and word.value == 18


def test_flags_preserved_across_the_counter(snippets):
    m = _models(snippets, ["flags_across"])
    with _copy(snippets, [m["flags_across"]]) as copy:
        # the block after `jl` starts with a mov and reads the flags at its jg: the plan
        # must have chosen the flag-preserving counter there.
        assert copy.plan.safe_counters >= 1
        f = _fn(copy.entry("flags_across"), "long(*)(long, long)")
        orig = _fn(copy.original("flags_across"), "long(*)(long, long)")
        for a, b in [(1, 2), (2, 1), (2, 2), (-5, 7), (7, -5)]:
            assert f(a, b) == orig(a, b)
        assert [f(1, 2), f(3, 2), f(2, 2)] == [3, 1, 2]


@pytest.mark.parametrize("trace", [False, True])
def test_carry_flag_preserved_across_the_counter(snippets, trace):
    m = _models(snippets, ["cf_only"])
    with _copy(snippets, [m["cf_only"]], trace) as copy:
        # counting: CF alone is live, INC keeps it, so every counter is the fast one
        if not trace:
            assert copy.plan.safe_counters == 0
        else:
            assert copy.plan.safe_counters == 1
        f = _fn(copy.entry("cf_only"), "long(*)(long, long)")
        assert [f(1, 2), f(2, 1), f(3, 3), f(-1, 0)] == [1, 0, 0, 0]


def test_red_zone_survives_the_counter(snippets):
    m = _models(snippets, ["red_zone"])
    with _copy(snippets, [m["red_zone"]]) as copy:
        f = _fn(copy.entry("red_zone"), "long(*)(long, long)")
        assert f(1, 100) == 111 and f(0, 100) == 100


def test_calls_internal_plt_and_recursion(snippets):
    from wcetfit.count.relocate import closure

    m = _models(snippets, ["caller", "helper", "exported", "fact", "tail"])
    fns = closure(m, ["caller"])
    assert [f.name for f in fns] == ["caller", "helper", "exported"]
    with _copy(snippets, fns) as copy:
        f = _fn(copy.entry("caller"))
        assert f(5) == 2 * 5 + 7 + 5
        c = copy.counts()
        # The PLT call went to the relocated `exported`, not to the original.
        assert c["helper"].tolist() == [1] and c["exported"].tolist() == [1]
        assert sum(c["caller"].tolist()) == 3
        assert copy.plan.transfers  # call sites noted for activations
    with _copy(snippets, closure(m, ["fact"])) as copy:
        f = _fn(copy.entry("fact"))
        assert f(10) == 3628800
        c = _counts_by_address(copy, "fact")
        fm = m["fact"]
        assert c[fm.entry] == 10
        assert sorted(c.values()) == sorted([10, 9, 9, 1])
    with _copy(snippets, closure(m, ["tail"])) as copy:
        assert [f.name for f in copy.models.values()] == ["tail", "helper"]
        assert _fn(copy.entry("tail"))(4) == 10
        assert copy.counts()["helper"].tolist() == [1]


def test_jump_table_relative_entries(snippets):
    path, info = snippets
    jt = _table(info, path, "switch4", "switch4_jmp", "table4", 4)
    m = _models(snippets, ["switch4"], switch4=(jt,))
    with _copy(snippets, [m["switch4"]]) as copy:
        f = _fn(copy.entry("switch4"))
        for x in range(-2, 7):
            copy.reset()
            want = 100 + x if 0 <= x <= 3 else -1
            assert f(x) == want
            c = _counts_by_address(copy, "switch4")
            if 0 <= x <= 3:
                assert c[jt.targets[x]] == 1
                assert sum(c[t] for t in jt.targets) == 1


def test_jump_table_absolute_entries(snippets):
    from wcetfit.loader import load_binary

    path, info = snippets
    table = local_label(path, "table8")
    lb = load_binary(path)
    # the entries are relocated at load: read the runtime table and take the bias off
    import struct
    raw = ctypes.string_at(lb.runtime(table), 24)
    targets = tuple(lb.link_time(v) for v in struct.unpack("<3Q", raw))
    jt = JumpTable(0, local_label(path, "switch8_jmp"), table, 8, None, targets)
    m = _models(snippets, ["switch8"], switch8=(jt,))
    with _copy(snippets, [m["switch8"]]) as copy:
        f = _fn(copy.entry("switch8"))
        for x in range(-1, 5):
            copy.reset()
            assert f(x) == (200 + x if 0 <= x <= 2 else -2)
            c = _counts_by_address(copy, "switch8")
            if 0 <= x <= 2:
                assert c[targets[x]] == 1 and sum(c[t] for t in targets) == 1


def test_jump_table_in_a_loop_with_hoisted_base(snippets):
    path, info = snippets
    jt = _table(info, path, "switchloop", "switchloop_jmp", "table_loop", 4)
    m = _models(snippets, ["switchloop"], switchloop=(jt,))
    with _copy(snippets, [m["switchloop"]], trace=True) as copy:
        f = _fn(copy.entry("switchloop"))
        orig = _fn(copy.original("switchloop"))
        for n in (0, 1, 7, 50):
            copy.reset()
            assert f(n) == orig(n)
            c = _counts_by_address(copy, "switchloop")
            # case k runs for i in 1..n with i % 4 == k (table index = i & 3)
            for k, tgt in enumerate(jt.targets):
                assert c[tgt] == sum(1 for i in range(1, n + 1) if i % 4 == k)


def test_unresolved_indirect_jump_is_refused(snippets):
    path, info = snippets
    jmp = local_label(path, "wild_jmp")
    fm = mini_model(info, "wild", unresolved=(jmp,))
    from wcetfit.count.relocate import plan_copy
    with pytest.raises(RelocationError, match=rf"cannot relocate wild: {jmp:#x} `jmp rax` is an "
                                              "unresolved indirect jump"):
        plan_copy([fm], info.read)
    # Even when the model forgot to say so, an indirect jmp that is neither a jump table
    # nor a known tail call is refused.
    fm = mini_model(info, "wild")
    fm2 = FunctionModel(fm.name, fm.address, fm.blocks, fm.edges, fm.entry, fm.exits, (), (),
                        (), (), 0)
    with pytest.raises(RelocationError, match="not known as a jump table"):
        plan_copy([fm2], info.read)


def test_indirect_tail_call_back_into_relocated_code_traps(snippets):
    """A model calling `jmp rax` an indirect tail call is trusted, but guarded: when the
    jump lands in the original of relocated code (here: its own next block), the copy
    stops with SIGILL instead of running original code uncounted."""
    import signal

    path, info = snippets
    fm = mini_model(info, "wild")
    assert any(c.tail and c.kind == CALL_INDIRECT for c in fm.calls)
    with _copy(snippets, [fm]) as copy:
        _fn(copy.entry("wild"))(1)                    # the path without the jump runs
    pid = os.fork()
    if pid == 0:                                      # child: run it
        import faulthandler
        faulthandler.disable()                        # the SIGILL is expected
        try:
            with _copy(snippets, [fm]) as copy:
                _fn(copy.entry("wild"))(0)
        finally:
            os._exit(0)
    _pid, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGILL


def test_jump_out_of_relocated_code_needs_a_tail_call_site(snippets):
    """`tail` ends with `jmp helper`; relocated alone and with a model that does not call
    that jump a tail call, the copy would run original code the model knows nothing
    about: refused.  With the tail call site it is allowed (helper runs as original)."""
    from wcetfit.count.relocate import plan_copy
    _path, info = snippets
    fm = mini_model(info, "tail")
    assert any(c.tail for c in fm.calls)
    plan_copy([fm], info.read)
    bare = FunctionModel(fm.name, fm.address, fm.blocks, fm.edges, fm.entry, fm.exits, (), (),
                         (), (), 0)
    with pytest.raises(RelocationError, match="does not call it a tail call"):
        plan_copy([bare], info.read)


@pytest.mark.parametrize("name, inputs, expect", [
    ("uses_loop", (1, 2, 7, 300), lambda n: n),
    # CF set by STC before the jrcxz must reach the ADC on both paths (the trampoline's
    # JMPs keep every flag): 11 / 21, never 10 / 20.
    ("uses_jrcxz", (0, 1, 5), lambda n: 21 if n == 0 else 11),
    # LOOPNE reads ZF from the CMP: stops at 5 or when RCX runs out.
    ("uses_loopne", (1, 3, 5, 9, 100), lambda n: min(n, 5)),
])
def test_rel8_only_branches_run_through_a_trampoline(snippets, name, inputs, expect):
    """loop / jrcxz / loopne (no rel32 form) are relocated: the copy returns what the
    original does, and the block counts agree with the iterations."""
    m = _models(snippets, [name])
    fm = m[name]
    assert any(i.mnemonic in ("loop", "jrcxz", "loopne") for b in fm.blocks
               for i in b.instructions)
    with _copy(snippets, [fm]) as copy:
        f, orig = _fn(copy.entry(name)), _fn(copy.original(name))
        for n in inputs:
            copy.reset()
            assert f(n) == orig(n) == expect(n)
            c = _counts_by_address(copy, name)
            assert c[fm.entry] == 1
            if name != "uses_jrcxz":
                body = max(c, key=lambda a: c[a])
                assert c[body] == expect(n)


def test_rel8_trampoline_encoding():
    """jrcxz with a short displacement of 2 to a rel32 jmp, skipped by jmp short +5."""
    code = enc.rel8_branch(b"\xe3", 0x1000, 0x5000)
    ins = decode(code, 0x1000)
    assert [i.mnemonic for i in ins] == ["jrcxz", "jmp", "jmp"]
    assert ins[0].operands[0].imm == 0x1000 + 4          # the rel32 jmp
    assert ins[1].operands[0].imm == 0x1000 + 9          # past it: the next item
    assert ins[2].operands[0].imm == 0x5000
    assert len(code) == enc.rel8_branch_size(1)


def test_jump_into_the_middle_of_a_block_is_refused(snippets):
    from wcetfit.count.relocate import plan_copy
    _path, info = snippets
    fm = mini_model(info, "loop_sum")
    # Merge the loop body into the entry block's range: the backward jcc now lands
    # inside a block, which the copy cannot honour.
    b0, b1, b2 = fm.blocks
    merged = Block(b0.address, b0.size + b1.size, b0.instructions + b1.instructions)
    bad = FunctionModel(fm.name, fm.address, (merged, b2), fm.edges, fm.entry, fm.exits, (),
                        (), (), (), 0)
    with pytest.raises(RelocationError, match="into the middle of block"):
        plan_copy([bad], info.read)


def test_model_disagreeing_with_the_bytes_is_refused(snippets):
    from wcetfit.count.relocate import plan_copy
    _path, info = snippets
    fm = mini_model(info, "loop_sum")
    b0 = fm.blocks[0]
    wrong = Block(b0.address, b0.size,
                  tuple(Instruction(i.address, i.size + 1, i.mnemonic, i.op_str)
                        for i in b0.instructions))
    bad = FunctionModel(fm.name, fm.address, (wrong,) + fm.blocks[1:], fm.edges, fm.entry,
                        fm.exits, (), (), (), (), 0)
    with pytest.raises(RelocationError, match="instruction boundaries"):
        plan_copy([bad], info.read)


def test_plan_is_position_independent(snippets):
    """Sizes are fixed before addresses are known; emitting at two places differs only in
    displacements, and each placement decodes to the same instruction stream."""
    from wcetfit.count.relocate import plan_copy
    _path, info = snippets
    fm = mini_model(info, "loop_sum")
    plan = plan_copy([fm], info.read)
    a = plan.emit(0x7f0000000000, 0x7f0010000000, 0x7f0010010000)
    b = plan.emit(0x7f0000000000, 0x7f0020000000, 0x7f0020010000)
    assert len(a) == len(b) == plan.code_size
    da = [i.mnemonic for i in decode(a, 0x7f0010000000)]
    db = [i.mnemonic for i in decode(b, 0x7f0020000000)]
    assert da == db
    # Every branch of the copy lands on a block start of the copy or on original code.
    starts = {0x7f0010000000 + off for off in plan.block_offsets.values()}
    for i in decode(a, 0x7f0010000000):
        if X.X86_GRP_BRANCH_RELATIVE in i.groups and i.mnemonic in ("jmp", "jle", "jne"):
            assert i.operands[0].imm in starts


def test_short_jcc_becomes_rel32(snippets):
    from wcetfit.count.relocate import plan_copy
    _path, info = snippets
    fm = mini_model(info, "loop_sum")
    assert any(i.size == 2 and i.mnemonic.startswith("j") for b in fm.blocks
               for i in b.instructions)
    plan = plan_copy([fm], info.read)
    code = plan.emit(0, 0x10000, 0x20000)
    jumps = [i for i in decode(code, 0x10000) if i.mnemonic in ("jle", "jne")]
    assert len(jumps) == 2 and all(i.size == 6 for i in jumps)


@pytest.mark.parametrize("jump, load", [
    ("ff6060", "mov r11, qword ptr [rax + 0x60]"),
    ("3eff6060", "mov r11, qword ptr [rax + 0x60]"),            # notrack dropped
    ("41ff24c4", "mov r11, qword ptr [r12 + rax*8]"),
    ("43ff64c508", "mov r11, qword ptr [r13 + r8*8 + 8]"),
    ("ff2425f0000000", "mov r11, qword ptr [0xf0]"),
])
def test_indirect_tail_call_through_memory_loads_r11(jump, load):
    """`jmp qword ptr [mem]` becomes `mov r11, [mem]` (then the guard, then `jmp r11`):
    the same operand, read by capstone back from our bytes."""
    raw = bytes.fromhex(jump)
    out = enc.load_r11_from_jump(raw)
    got = decode(out, 0)
    assert len(got) == 1 and f"{got[0].mnemonic} {got[0].op_str}" == load
    assert [i.mnemonic for i in decode(enc.JMP_R11, 0)] == ["jmp"]
    with pytest.raises(enc.EncodingError):
        enc.load_r11_from_jump(bytes.fromhex("ffe0"))                # jmp rax: a register


# --- the guard's ranges: the relocated blocks, not each function's hull ---------------------

def _blocks_fn(name: str, spans: list[tuple[int, int]]):
    from wcetfit.model import Block, FunctionModel
    blocks = tuple(Block(a, e - a, ()) for a, e in spans)
    return FunctionModel(name=name, address=spans[0][0], blocks=blocks, edges=(),
                         entry=spans[0][0], exits=(), loops=(), calls=(), jump_tables=(),
                         coexec_classes=(), max_rank=0, unresolved_jumps=())


def test_guard_ranges_leave_out_the_code_between_a_function_and_its_cold_part():
    """gcc puts a function's cold part far from its body (liblzma's lzma_index_hash_decode:
    body at 0xff90, cold part at 0x45c2).  A function lying between them is not relocated:
    an indirect call into it must pass the guard (it trapped with SIGILL on every input of
    lzma_stream_buffer_decode), while a jump into a relocated block must not."""
    from wcetfit.count.relocate import GUARD_GAP, _Planner

    hot = _blocks_fn("decode", [(0xff90, 0xffa0), (0xffa0, 0xffc4),
                                (0xffc4 + GUARD_GAP - 1, 0x10010), (0x45c2, 0x45d0)])
    other = _blocks_fn("helper", [(0x4a00, 0x4a6f)])
    p = _Planner([hot, other], {}, {}, [], {}, False)
    ranges = p.guard_ranges()

    def inside(a: int) -> bool:
        return any(lo <= a < hi for lo, hi in ranges)

    assert not inside(0xf4a0)          # another function, between the cold part and the body
    assert not inside(0x5000)
    assert all(inside(a) for a in (0x45c2, 0x45cf, 0x4a00, 0x4a6e, 0xff90, 0xffc3, 0x1000f))
    assert inside(0xffc4)              # padding shorter than GUARD_GAP is closed
    assert not inside(0x10010) and not inside(0x45d0)
    assert ranges == sorted(ranges) and len(ranges) == 3


LZMA = Path("/lib/x86_64-linux-gnu/liblzma.so.5")


@pytest.mark.skipif(not LZMA.exists(), reason="liblzma.so.5 absent: the cold-part guard "
                    "is checked on the synthetic ranges only")
def test_lzma_stream_buffer_decode_counts_with_its_indirect_callees(tmp_path):
    """Real code: liblzma's decoders call each other through function pointers, and the
    followed callees have cold parts below 0x4600.  Counting with them relocated used to
    trap on every input; now every input counts and matches the original (the count run's
    differential check), and the decoders reached through pointers are counted."""
    from wcetfit.cli import main
    from wcetfit.measurements import load_counts, open_store
    from wcetfit.target import load_target

    (tmp_path / "wcetfit.toml").write_text(
        f'binary = "{LZMA}"\nfunctions = ["lzma_stream_buffer_decode"]\n'
        'prototype = "int lzma_stream_buffer_decode(uint64_t *memlimit, uint32_t flags, '
        'const void *allocator, const uint8_t *in, size_t *in_pos, size_t in_size, '
        'uint8_t *out, size_t *out_pos, size_t out_size);"\n'
        'inputs = "inputs.py"\n[measure]\ninputs = 4\nrepeats = 2\nseed = 1\n')
    (tmp_path / "inputs.py").write_text(
        "import lzma\n\n"
        "def generate(ctx):\n"
        "    ffi = ctx.ffi\n"
        "    n = 1 + int(ctx.rng.integers(0, 2048))\n"
        "    raw = bytes(ctx.rng.integers(0, 1 + int(ctx.rng.integers(1, 256)), n, "
        "dtype='uint8'))\n"
        "    data = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)\n"
        "    return (ffi.new('uint64_t *', 2**64 - 1), 0, ffi.NULL, "
        "ffi.from_buffer('uint8_t[]', bytearray(data)), ffi.new('size_t *', 0), len(data), "
        "ffi.new('uint8_t[]', n), ffi.new('size_t *', 0), n)\n")
    assert main(["count", str(tmp_path), "--no-wait"]) == 0
    store = open_store(load_target(str(tmp_path)))
    cs = load_counts(store, "lzma_stream_buffer_decode", 1)
    assert not cs.failures, [f.describe() for f in cs.failures]
    assert len(cs.indices) == 4
    assert cs.indirect, "no indirect call recorded"
    names = {fc.name for fc in cs.functions}
    assert len(names) > 20, names          # the decoders behind next.code are counted
    assert any(fc.counts.sum() > 10_000 for fc in cs.functions)   # the LZMA decoder's loops
    shutil.rmtree(tmp_path / ".wcetfit", ignore_errors=True)
