"""A tiny x86-64 encoder for the few instructions the instrumented copy emits.

Only what :mod:`wcetfit.count.relocate` needs: rel32 branches, the counter increment and the
block-trace append.  Every function returns the instruction's bytes; those that refer
to an address take the address the instruction will be placed at (``at``) and compute
the displacement from the end of the instruction, as the CPU does.  A displacement
that does not fit in 32 bits raises :class:`EncodingError` (the caller turns it into a
RelocationError naming what it was emitting).

Why hand encoding and not an assembler: the copy is built at run time for addresses
known only then, and the sequences are few and fixed; tests decode every sequence with
capstone to prove each byte means what we intended.
"""

from __future__ import annotations

import struct

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

# Condition codes in the order of the 0x70+cc / 0x0F 0x80+cc opcodes.
CONDITIONS = ("o", "no", "b", "ae", "e", "ne", "be", "a",
              "s", "ns", "p", "np", "l", "ge", "le", "g")

# Every spelling capstone uses for a jcc mnemonic, mapped to its condition code.
JCC_CODES: dict[str, int] = {}
for _cc, _names in enumerate((("jo",), ("jno",), ("jb", "jc", "jnae"), ("jae", "jnb", "jnc"),
                              ("je", "jz"), ("jne", "jnz"), ("jbe", "jna"), ("ja", "jnbe"),
                              ("js",), ("jns",), ("jp", "jpe"), ("jnp", "jpo"),
                              ("jl", "jnge"), ("jge", "jnl"), ("jle", "jng"), ("jg", "jnle"))):
    for _n in _names:
        JCC_CODES[_n] = _cc

RED_ZONE = 128          # bytes below rsp a leaf function may use without moving rsp


class EncodingError(ValueError):
    """A displacement does not fit, or an operand is outside what we encode."""


def rel32(at: int, size: int, target: int) -> bytes:
    """The little-endian rel32 from the end of an instruction of ``size`` bytes at ``at``."""
    disp = target - (at + size)
    if not INT32_MIN <= disp <= INT32_MAX:
        raise EncodingError(f"target {target:#x} is {disp:+#x} bytes from {at:#x}: "
                            "beyond the ±2 GiB of a rel32")
    return struct.pack("<i", disp)


def imm32(value: int) -> bytes:
    if not INT32_MIN <= value <= INT32_MAX:
        raise EncodingError(f"immediate {value:#x} does not fit in 32 bits")
    return struct.pack("<i", value)


# --- branches ---------------------------------------------------------------------------

JMP_SIZE = 5
CALL_SIZE = 5
JCC_SIZE = 6


def jmp_rel32(at: int, target: int) -> bytes:
    """``jmp target`` (E9 rel32)."""
    return b"\xe9" + rel32(at, JMP_SIZE, target)


def call_rel32(at: int, target: int) -> bytes:
    """``call target`` (E8 rel32)."""
    return b"\xe8" + rel32(at, CALL_SIZE, target)


def jcc_rel32(condition: int | str, at: int, target: int) -> bytes:
    """``j<cc> target`` in its near form (0F 80+cc rel32), whatever form the original had."""
    cc = JCC_CODES[condition] if isinstance(condition, str) else int(condition)
    if not 0 <= cc < 16:
        raise EncodingError(f"condition code {cc} out of range")
    return bytes((0x0F, 0x80 + cc)) + rel32(at, JCC_SIZE, target)


# --- stack and flags --------------------------------------------------------------------

def lea_rsp(delta: int) -> bytes:
    """``lea rsp, [rsp + delta]``: moves rsp without touching the flags (ADD/SUB would)."""
    if -128 <= delta <= 127:
        return b"\x48\x8d\x64\x24" + struct.pack("<b", delta)
    return b"\x48\x8d\xa4\x24" + imm32(delta)


PUSH_RAX = b"\x50"
POP_RAX = b"\x58"
PUSHFQ = b"\x9c"
POPFQ = b"\x9d"


# --- RIP-relative memory ----------------------------------------------------------------

RIPREL_SIZE = 7         # REX.W + opcode + ModRM + disp32


def mov_rax_from(at: int, address: int) -> bytes:
    """``mov rax, qword ptr [rip + …]`` loading the qword at ``address``."""
    return b"\x48\x8b\x05" + rel32(at, RIPREL_SIZE, address)


def mov_rax_to(at: int, address: int) -> bytes:
    """``mov qword ptr [rip + …], rax`` storing to ``address``."""
    return b"\x48\x89\x05" + rel32(at, RIPREL_SIZE, address)


def cmp_rax_with(at: int, address: int) -> bytes:
    """``cmp rax, qword ptr [rip + …]`` (writes the flags)."""
    return b"\x48\x3b\x05" + rel32(at, RIPREL_SIZE, address)


def inc_qword(at: int, address: int) -> bytes:
    """``inc qword ptr [rip + …]``: one instruction, but writes OF SF ZF AF PF (not CF)."""
    return b"\x48\xff\x05" + rel32(at, RIPREL_SIZE, address)


LEA_RAX_PLUS_1 = b"\x48\x8d\x40\x01"     # lea rax, [rax + 1]   (flag-free increment)
ADD_RAX_4 = b"\x48\x83\xc0\x04"          # add rax, 4


def mov_dword_at_rax(value: int) -> bytes:
    """``mov dword ptr [rax], value``."""
    return b"\xc7\x00" + struct.pack("<I", value & 0xFFFFFFFF)


def cmp_reg_with(reg: int, at: int, address: int) -> bytes:
    """``cmp r64, qword ptr [rip + …]`` for register number ``reg`` (0 = rax … 15 = r15)."""
    if not 0 <= reg < 16:
        raise EncodingError(f"register number {reg} out of range")
    rex = 0x48 | (0x04 if reg >= 8 else 0)
    modrm = 0x05 | ((reg & 7) << 3)
    return bytes((rex, 0x3B, modrm)) + rel32(at, RIPREL_SIZE, address)


UD2 = b"\x0f\x0b"


def jae_short(distance: int) -> bytes:
    """``jae $+2+distance`` (73 rel8), used only inside our own fixed sequences."""
    return b"\x73" + struct.pack("<b", distance)


def jmp_short(distance: int) -> bytes:
    """``jmp $+2+distance`` (EB rel8), used only inside our own fixed sequences."""
    return b"\xeb" + struct.pack("<b", distance)


def rel8_branch(head: bytes, at: int, target: int) -> bytes:
    """A branch with only a rel8 form (``jrcxz``, ``jecxz``, ``loop``, ``loope``, ``loopne``)
    retargeted anywhere within ±2 GiB::

        head +2          ; the original instruction (prefixes and opcode kept), taken → T
        jmp short +5     ; not taken: skip the trampoline, go on with the next item
    T:  jmp rel32 target

    Why this is the same instruction: the original opcode still decides, from the same
    RCX/ECX (and ZF for LOOPE/LOOPNE) and with the same side effect (LOOP* decrements
    the count register, never the flags); the two JMPs read and write no flag and no
    register, so every flag and register seen at ``target`` or after the not-taken path
    is what the original would have left.  Only the instruction's own displacement byte
    changes (``head`` is the instruction without it)."""
    out = head + b"\x02" + jmp_short(5)
    return out + jmp_rel32(at + len(out), target)


def rel8_branch_size(head_size: int) -> int:
    return head_size + 1 + 2 + JMP_SIZE


# --- the sequences the copy emits at a block start ---------------------------------------

def counter_fast(at: int, counter: int) -> bytes:
    """Count one execution where the flags are dead: ``inc qword ptr [rip+counter]``.

    Touches no register and no stack memory, so the red zone is safe too.
    """
    return inc_qword(at, counter)


COUNTER_FAST_SIZE = RIPREL_SIZE


def counter_safe(at: int, counter: int) -> bytes:
    """Count one execution preserving the flags, every register and the red zone.

    ``lea rsp,[rsp-128]; push rax; mov rax,[ctr]; lea rax,[rax+1]; mov [ctr],rax;
    pop rax; lea rsp,[rsp+128]``.  LEA computes without writing the flags, so no
    PUSHFQ/POPFQ (POPFQ costs tens of cycles); rsp first skips the 128-byte red zone a
    leaf function may keep live below rsp, so our push cannot clobber it.
    """
    out = bytearray(lea_rsp(-RED_ZONE) + PUSH_RAX)
    out += mov_rax_from(at + len(out), counter)
    out += LEA_RAX_PLUS_1
    out += mov_rax_to(at + len(out), counter)
    out += POP_RAX + lea_rsp(RED_ZONE)
    return bytes(out)


COUNTER_SAFE_SIZE = 5 + 1 + 7 + 4 + 7 + 1 + 8


def trace_append(at: int, block_id: int, counter: int, state: int,
                 save_flags: bool) -> bytes:
    """Count one execution and append ``block_id`` (uint32) to the block trace.

    ``state`` is the address of three qwords: write pointer, end pointer, overflow count.
    While the pointer is below the end, the id is stored and the pointer advances;
    afterwards entries are dropped and the overflow count grows (the caller reports the
    cap).  The compare writes the flags, so where they may be live (``save_flags``)
    they are saved with PUSHFQ/POPFQ; tracing is the optional, slower mode.
    """
    ptr, end, over = state, state + 8, state + 16
    out = bytearray(lea_rsp(-RED_ZONE))
    if save_flags:
        out += PUSHFQ
    out += PUSH_RAX
    out += inc_qword(at + len(out), counter)
    out += mov_rax_from(at + len(out), ptr)
    out += cmp_rax_with(at + len(out), end)
    # layout after the jae: store(6) add(4) mov-to(7) jmp(2) | full: inc(7) | done
    out += jae_short(6 + 4 + 7 + 2)
    out += mov_dword_at_rax(block_id)
    out += ADD_RAX_4
    out += mov_rax_to(at + len(out), ptr)
    out += jmp_short(RIPREL_SIZE)
    out += inc_qword(at + len(out), over)
    out += POP_RAX
    if save_flags:
        out += POPFQ
    out += lea_rsp(RED_ZONE)
    return bytes(out)


def range_guard(reg: int, at: int, ranges: list[tuple[int, int]]) -> bytes:
    """Trap (UD2) if register ``reg`` points into any [lo, hi) of ``ranges``.

    ``ranges`` holds the addresses of qword pairs (lo, hi), not the values: the values
    are runtime addresses, read RIP-relative.  Writes the flags; used only before an
    indirect tail jump, where no flag is live (System V ABI).  Layout per range:
    ``cmp reg,[lo]; jb next; cmp reg,[hi]; jb trap``, then ``jmp done; trap: ud2``.
    """
    per = RIPREL_SIZE + JCC_SIZE + RIPREL_SIZE + JCC_SIZE
    trap = at + per * len(ranges) + 2
    out = bytearray()
    for lo_addr, hi_addr in ranges:
        start = at + len(out)
        out += cmp_reg_with(reg, start, lo_addr)
        out += jcc_rel32("jb", start + RIPREL_SIZE, start + per)
        out += cmp_reg_with(reg, start + RIPREL_SIZE + JCC_SIZE, hi_addr)
        out += jcc_rel32("jb", start + 2 * RIPREL_SIZE + JCC_SIZE, trap)
    out += jmp_short(2)
    out += UD2
    return bytes(out)


def load_r11_from_jump(raw: bytes) -> bytes:
    """``mov r11, [mem]`` from the bytes of ``jmp qword ptr [mem]`` (FF /4, any non-RIP
    memory operand): the same ModRM/SIB/displacement with reg = r11 (REX.R + 011) and
    opcode 8B.  R11 is free at a tail jump: System V passes nothing in it and no callee
    may expect its value.  The jump's own prefixes (notrack 3E, bnd F2) are dropped; they
    mean nothing to a MOV."""
    k = 0
    while raw[k] in (0x3E, 0xF2, 0x2E, 0x66, 0x67):
        if raw[k] in (0x66, 0x67):
            raise EncodingError(f"operand/address-size prefix in an indirect jump {raw.hex()}")
        k += 1
    rex = 0
    if 0x40 <= raw[k] <= 0x4F:
        rex = raw[k]
        k += 1
    if raw[k] != 0xFF or (raw[k + 1] >> 3) & 7 != 4:
        raise EncodingError(f"not a jmp qword ptr [mem]: {raw.hex()}")
    modrm = raw[k + 1]
    if modrm >> 6 == 3:
        raise EncodingError(f"register operand, not memory: {raw.hex()}")
    return bytes((0x4C | (rex & 0x03), 0x8B, (modrm & 0xC7) | (3 << 3))) + raw[k + 2:]


JMP_R11 = b"\x41\xff\xe3"
R11 = 11


def range_guard_size(n_ranges: int) -> int:
    return (2 * RIPREL_SIZE + 2 * JCC_SIZE) * n_ranges + 2 + 2


def trace_append_size(save_flags: bool) -> int:
    return 5 + 1 + 7 + 7 + 7 + 2 + 6 + 4 + 7 + 2 + 7 + 1 + 8 + (2 if save_flags else 0)


# --- indirect call/jump dispatch (target recording and translation to the copy) -------------

DISPATCH_SLOTS = 8       # distinct targets recorded per site per input; more are only counted
DISPATCH_TABLE_BYTES = 16 * DISPATCH_SLOTS + 16   # (target, calls) pairs, overflow count, pad


def load_r11_from_branch(raw: bytes) -> tuple[bytes, int | None]:
    """``mov r11, <operand>`` from the bytes of ``call``/``jmp`` through a register or
    memory (FF /2 or FF /4): (bytes, offset of a RIP-relative disp32 in them or None).

    R11 is free at both: System V passes no argument in it and a callee may not expect
    its value (it is the one register neither callee-saved nor used for arguments,
    the static chain or the vararg count).  Prefixes notrack/bnd mean nothing to a MOV."""
    k = 0
    while raw[k] in (0x3E, 0xF2, 0x2E, 0x66, 0x67):
        if raw[k] in (0x66, 0x67):
            raise EncodingError(f"operand/address-size prefix in an indirect branch {raw.hex()}")
        k += 1
    rex = 0
    if 0x40 <= raw[k] <= 0x4F:
        rex = raw[k]
        k += 1
    if raw[k] != 0xFF or (raw[k + 1] >> 3) & 7 not in (2, 4):
        raise EncodingError(f"not an indirect call or jmp: {raw.hex()}")
    modrm = raw[k + 1]
    if modrm >> 6 == 3:                                  # through a register
        src = (modrm & 7) | (8 if rex & 0x01 else 0)
        return bytes((0x49 | (0x04 if src >= 8 else 0), 0x89, 0xC0 | (src & 7) << 3 | 3)), None
    out = bytes((0x4C | (rex & 0x03), 0x8B, (modrm & 0xC7) | (3 << 3))) + raw[k + 2:]
    rip = modrm >> 6 == 0 and modrm & 7 == 5             # [rip + disp32]
    return out, (3 if rip else None)


def _dispatch_body(at: int, table: int, xtab: int) -> bytes:
    """Record R11 in the site's table and replace it by its copy if it is the entry of a
    relocated function.  Scratch RAX and RCX are saved below RSP: at a call (or a tail
    jump) everything below RSP is dead, the call itself overwrites it.  Flags are written:
    no status flag is live at a call or tail call (System V).

    ``table``: DISPATCH_SLOTS pairs (target, calls), then an overflow count; an empty slot
    (target 0) is claimed by the first new target.  ``xtab``: pairs (original entry, copy
    entry), ended by a zero."""
    out = bytearray(b"\x50\x51")                                  # push rax; push rcx
    out += b"\x48\x8d\x05" + rel32(at + len(out), 7, table)       # lea rax,[table]
    out += b"\xb9" + struct.pack("<I", DISPATCH_SLOTS)            # mov ecx, K
    out += bytes.fromhex("4c3918" "7416"                          # L1: cmp [rax],r11; je HIT
                         "48833800" "740d"    # cmp qword [rax],0; je NEW
                         "4883c010" "ffc9" "75ed"                 # add rax,16; dec ecx; jnz L1
                         "48ff00" "eb07"                          # inc [rax] (overflow); jmp X
                         "4c8918"                                 # NEW: mov [rax],r11
                         "48ff4008")                              # HIT: inc qword [rax+8]
    out += b"\x48\x8d\x05" + rel32(at + len(out), 7, xtab)        # X: lea rax,[xtab]
    out += bytes.fromhex("488b08" "4885c9" "740f"                 # L2: mov rcx,[rax]; jz DONE
                         "4c39d9" "7406"                          # cmp rcx,r11; je FOUND
                         "4883c010" "ebed"                        # add rax,16; jmp L2
                         "4c8b5808"                               # FOUND: mov r11,[rax+8]
                         "5958")                                  # DONE: pop rcx; pop rax
    return bytes(out)


DISPATCH_BODY_SIZE = 77
CALL_R11 = b"\x41\xff\xd3"


def indirect_dispatch(load: bytes, load_disp: int | None, load_target: int | None, at: int,
                      table: int, xtab: int, guard: list[tuple[int, int]], tail: bool) -> bytes:
    """An indirect call/tail jump of the copy: load the target into R11 (the original
    operand, read before anything moves RSP), record and translate it
    (:func:`_dispatch_body`), trap if it still points into the original of a relocated
    function (:func:`range_guard`: a jump into a function's middle), then ``call r11`` /
    ``jmp r11``.  RSP at the call is the original's, so the callee sees the same stack."""
    out = bytearray(load)
    if load_disp is not None:
        out[load_disp:load_disp + 4] = rel32(at, len(load), load_target)
    out += _dispatch_body(at + len(out), table, xtab)
    out += range_guard(R11, at + len(out), guard)
    out += JMP_R11 if tail else CALL_R11
    return bytes(out)


def indirect_dispatch_size(load_size: int, n_ranges: int) -> int:
    return load_size + DISPATCH_BODY_SIZE + range_guard_size(n_ranges) + 3
