"""The table-index bounds of wcetfit.static.jumptables on instruction sequences written out
by hand (capstone's Intel syntax), each with the number of values it allows worked out
from the instructions' semantics, and the sequences that must give no bound (a bound too
small would drop real successors from the CFG)."""

from __future__ import annotations

import pytest

from wcetfit.static.jumptables import _bound_from


def seq(*text: str) -> list[tuple[int, int, str, str]]:
    out = []
    for i, t in enumerate(text):
        mnem, _, ops = t.partition(" ")
        out.append((0x1000 + 4 * i, 4, mnem, ops.strip()))
    return out


@pytest.mark.parametrize("insns, reg, n", [
    # gcc's guard on the index itself, at a narrower width
    (seq("cmp al, 7", "ja 0x2000", "lea rdx, [rip + 0x100]"), "rax", 8),
    # the copy's source compared after the copy (libpng's png_set_filter)
    (seq("movzx eax, bpl", "cmp bpl, 7", "ja 0x2000", "lea rdx, [rip + 0x100]"), "rax", 8),
    # ... and before it
    (seq("cmp dil, 9", "ja 0x2000", "movzx edi, dil"), "rdi", 10),
    # a byte-extended index with no guard: 256 values
    (seq("lea rdx, [rip + 0x100]", "movzx edi, dil"), "rdi", 256),
    (seq("movzx eax, byte ptr [rsi + 3]"), "rax", 256),
    # the source written after the copy: the copy still holds one byte's value
    (seq("movzx eax, bpl", "add ebp, 1", "cmp bpl, 7", "ja 0x2000"), "rax", 256),
    # computed, not guarded (libgmp's __gmpn_redc_1): 0..3 or 4..7
    (seq("mov eax, ecx", "and eax, 3", "lea r9, [rax + 4]", "cmp ecx, 4", "cmovg rax, r9"),
     "rax", 8),
    (seq("xor eax, eax", "cmp ecx, 1", "mov edx, 5", "cmove eax, edx"), "rax", 6),
    (seq("and ecx, 7", "add ecx, 2", "mov eax, ecx"), "rax", 10),
    # the index loaded from the slot the guard compared, its address rewritten by a lea
    # (liblzma's range encoder): [rax + (rdx+12)*4] is [rax + rdx*4 + 0x30]
    (seq("mov rdx, qword ptr [rax + 0x28]", "cmp dword ptr [rax + rdx*4 + 0x30], 4",
         "lea rcx, [rdx + 0xc]", "ja 0x2000", "mov ecx, dword ptr [rax + rcx*4]"), "rcx", 5),
    # the same slot spelled otherwise: [rdx + rax] is [rax + rdx]
    (seq("cmp byte ptr [rdx + rax], 3", "ja 0x2000", "movzx eax, byte ptr [rax + rdx]"),
     "rax", 4),
])
def test_bound(insns, reg, n):
    assert _bound_from(insns, reg) == n


@pytest.mark.parametrize("insns, reg", [
    # the guard compares a narrower part than the copy took: eax's upper bits are free
    (seq("mov eax, ebp", "cmp bpl, 7", "ja 0x2000"), "rax"),
    # the source is written between the copy and its compare
    (seq("mov eax, ebp", "add ebp, 1", "cmp ebp, 7", "ja 0x2000"), "rax"),
    # a guard before a call or mul, which may write the index without naming it
    (seq("cmp eax, 3", "ja 0x2000", "call 0x3000"), "rax"),
    (seq("cmp eax, 3", "ja 0x2000", "mul rbx"), "rax"),
    # a range destroyed by a write the analysis does not follow
    (seq("and eax, 3", "imul rax, rbx"), "rax"),
    (seq("and eax, 3", "call 0x3000"), "rax"),
    (seq("and eax, 3", "mul rbx"), "rax"),
    # an 8-bit write keeps the upper bits
    (seq("and eax, 3", "mov al, byte ptr [rsi]"), "rax"),
    # cmov from an unknown register
    (seq("and eax, 3", "cmovg rax, rdx"), "rax"),
    # may go negative
    (seq("and eax, 3", "sub eax, 2"), "rax"),
    # nothing at all
    (seq("mov eax, dword ptr [rdi]"), "rax"),
    # the lea moves the address to another slot than the one compared
    (seq("cmp dword ptr [rax + rdx*4 + 0x30], 4", "lea rcx, [rdx + 0xb]", "ja 0x2000",
         "mov ecx, dword ptr [rax + rcx*4]"), "rcx"),
    # the lea writes the address's base: the compared slot is another object's
    (seq("cmp dword ptr [rax + rdx*4], 4", "lea rax, [rsi + 8]", "ja 0x2000",
         "mov ecx, dword ptr [rax + rdx*4]"), "rcx"),
    # a lea of the index with a second register: not followed
    (seq("cmp dword ptr [rax + rdx*4], 4", "lea rcx, [rdx + rsi]", "ja 0x2000",
         "mov ecx, dword ptr [rax + rcx*4]"), "rcx"),
])
def test_no_bound(insns, reg):
    assert _bound_from(insns, reg) is None
