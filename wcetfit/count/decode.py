"""Decoding the relocated code: each block's instructions with what the copy needs to
know about them (branch targets, RIP-relative displacements, status flags read and
written), from capstone.  Part of :mod:`wcetfit.count.relocate`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

import capstone
from capstone import x86_const as X

from wcetfit.errors import RelocationError
from wcetfit.model import FunctionModel

# --- status flags -------------------------------------------------------------------------

OF, SF, ZF, AF, PF, CF = 1, 2, 4, 8, 16, 32
ALL_FLAGS = OF | SF | ZF | AF | PF | CF
# What ``inc qword [mem]`` overwrites: everything but CF.
INC_CLOBBERS = OF | SF | ZF | AF | PF

_TEST = {X.X86_EFLAGS_TEST_OF: OF, X.X86_EFLAGS_TEST_SF: SF, X.X86_EFLAGS_TEST_ZF: ZF,
         X.X86_EFLAGS_TEST_AF: AF, X.X86_EFLAGS_TEST_PF: PF, X.X86_EFLAGS_TEST_CF: CF}
_WRITE = {}
for _kind in ("MODIFY", "SET", "RESET", "UNDEFINED"):
    for _name, _bit in (("OF", OF), ("SF", SF), ("ZF", ZF), ("AF", AF), ("PF", PF),
                        ("CF", CF)):
        _mask = getattr(X, f"X86_EFLAGS_{_kind}_{_name}", 0)
        if _mask:
            _WRITE[_mask] = _bit

# Instructions that read status flags, in case capstone's eflags table misses one: a
# missed reader would make us clobber a live flag, a missed writer only costs speed.
_READER_PREFIXES = ("cmov", "set", "fcmov", "j", "loop")
_READERS = {"adc", "adcx", "adox", "sbb", "rcl", "rcr", "pushf", "pushfq", "pushfd", "lahf",
            "cmc", "into", "salc"}

# Branches with only a rel8 form: retargeted through a short trampoline
# (:func:`wcetfit.count.x86enc.rel8_branch`).  XBEGIN (a transaction's abort address) has
# no such rewrite: refused.
_REL8_ONLY = {"loop", "loope", "loopne", "loopz", "loopnz", "jrcxz", "jecxz", "jcxz"}
_NO_REL32 = _REL8_ONLY | {"xbegin"}
_STOPS = {"ret", "retf", "iret", "iretd", "iretq", "hlt", "ud2", "ud0", "ud1", "jmp",
          "sysret", "sysexit"}
_PREFIX_WORDS = ("bnd", "notrack", "rep", "repne", "repe", "lock")


_REG_NUMBERS = {getattr(X, f"X86_REG_{r}"): n for n, r in enumerate(
    ("RAX", "RCX", "RDX", "RBX", "RSP", "RBP", "RSI", "RDI",
     "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15"))}


def _base_mnemonic(mnemonic: str) -> str:
    words = mnemonic.split()
    while len(words) > 1 and words[0] in _PREFIX_WORDS:
        words = words[1:]
    return words[-1] if words else mnemonic


def _flag_effects(insn: capstone.CsInsn) -> tuple[int, int]:
    """(flags read, flags written) of one instruction, as our 6-bit masks."""
    ef = insn.eflags
    reads = 0
    for mask, bit in _TEST.items():
        if ef & mask:
            reads |= bit
    writes = 0
    for mask, bit in _WRITE.items():
        if ef & mask:
            writes |= bit
    m = _base_mnemonic(insn.mnemonic)
    if not reads and (m in _READERS or (m.startswith(_READER_PREFIXES) and m != "jmp")):
        reads = ALL_FLAGS
    if X.X86_GRP_CALL in insn.groups:
        writes = ALL_FLAGS           # the callee clobbers them (System V ABI)
    return reads, writes


# --- decoded input ------------------------------------------------------------------------

@dataclass(frozen=True)
class _Insn:
    address: int
    size: int
    raw: bytes
    mnemonic: str          # without prefixes such as bnd / notrack
    text: str
    is_jump: bool          # any jmp / jcc
    is_call: bool
    is_ret: bool
    rel_target: int | None         # direct branch target (link-time)
    rip_disp_offset: int | None    # offset of the disp32 of a RIP-relative operand
    rip_target: int | None         # absolute link-time address that operand refers to
    jump_register: int | None      # register number (0=rax…15=r15) of `jmp reg`
    reads: int
    writes: int
    overlaps: bool = False         # runs past its block's end (a prefix block, see below)


def _disp32_offset(insn: capstone.CsInsn, disp: int) -> int | None:
    """Offset of the disp32 of a RIP-relative operand within the instruction's bytes.

    RIP-relative addressing always carries a 32-bit displacement, but capstone 5's
    ``disp_size`` is wrong for some prefixed SSE forms (``66 0F 54 0D`` → 2); so take
    ``disp_offset`` only when the 4 bytes there are the displacement, else the unique
    place where they are."""
    raw = bytes(insn.bytes)
    want = struct.pack("<i", disp)
    off = insn.disp_offset
    if 0 < off <= len(raw) - 4 and raw[off:off + 4] == want:
        return off
    hits = [k for k in range(1, len(raw) - 3) if raw[k:k + 4] == want]
    return hits[0] if len(hits) == 1 else None


def _decode_block(md: capstone.Cs, fn: FunctionModel, block, code: bytes,
                  more: bytes = b"") -> list[_Insn]:
    """The block's instructions.  ``more``: the bytes after the block, for a block whose
    last instruction runs past its end (glibc's ``je 1f; lock; 1: cmpxchg`` skips a LOCK
    prefix: the prefix alone is a block).  Such an instruction is kept whole, marked
    ``overlaps``."""
    out: list[_Insn] = []
    for insn in md.disasm(code + more, block.address):
        if insn.address >= block.end:
            break
        m = _base_mnemonic(insn.mnemonic)
        groups = insn.groups
        rel_target = None
        if X.X86_GRP_BRANCH_RELATIVE in groups and insn.operands \
                and insn.operands[0].type == X.X86_OP_IMM:
            rel_target = insn.operands[0].imm
        rip_off = rip_target = None
        for op in insn.operands:
            if op.type == X.X86_OP_MEM and op.mem.base == X.X86_REG_RIP:
                rip_off = _disp32_offset(insn, op.mem.disp)
                if rip_off is None:
                    raise RelocationError(f"cannot relocate {fn.name}: {insn.address:#x} "
                                          f"`{insn.mnemonic} {insn.op_str}`: cannot locate "
                                          f"the 32-bit displacement of its RIP-relative "
                                          f"operand")
                rip_target = insn.address + insn.size + op.mem.disp
        reads, writes = _flag_effects(insn)
        jump_register = None
        if X.X86_GRP_JUMP in groups and len(insn.operands) == 1 \
                and insn.operands[0].type == X.X86_OP_REG:
            jump_register = _REG_NUMBERS.get(insn.operands[0].reg)
        out.append(_Insn(
            address=insn.address, size=insn.size, raw=bytes(insn.bytes), mnemonic=m,
            text=f"{insn.mnemonic} {insn.op_str}".strip(),
            is_jump=X.X86_GRP_JUMP in groups or m in _NO_REL32,
            is_call=X.X86_GRP_CALL in groups, is_ret=X.X86_GRP_RET in groups,
            rel_target=rel_target, rip_disp_offset=rip_off, rip_target=rip_target,
            jump_register=jump_register,
            reads=reads, writes=writes,
            overlaps=insn.address + insn.size > block.end))
    decoded = sum(i.size for i in out)
    if decoded != block.size and not (out and out[-1].overlaps and more):
        bad = block.address + decoded
        raise RelocationError(f"cannot relocate {fn.name}: bytes at {bad:#x} in block "
                              f"{block.address:#x} do not decode as x86-64 instructions")
    if block.instructions:
        ours = [(i.address, i.size) for i in out]
        theirs = [(i.address, i.size) for i in block.instructions]
        if ours != theirs:
            raise RelocationError(f"cannot relocate {fn.name}: block {block.address:#x}: "
                                  f"the model's instruction boundaries differ from the "
                                  f"bytes' (model {theirs[:4]}…, decoded {ours[:4]}…)")
    return out


def _check_prefix_block(md: capstone.Cs, fn: FunctionModel, whole: _Insn, nxt,
                        read: Callable[[int, int], bytes]) -> None:
    """A block ending inside an instruction is accepted only as a prefix block: the
    instruction ends exactly where the next block's first instruction ends (that one is
    the same instruction without the prefix bytes)."""
    first = next(md.disasm(read(nxt.address, nxt.size), nxt.address), None)
    if first is None or first.address + first.size != whole.address + whole.size:
        raise RelocationError(f"cannot relocate {fn.name}: {whole.address:#x} `{whole.text}` "
                              f"runs into block {nxt.address:#x}, which does not start at "
                              "one of its prefixes' ends")
