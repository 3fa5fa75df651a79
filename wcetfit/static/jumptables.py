"""Jump-table helpers that need no angr: gcc's bounds guards, table shapes, entries.

Used by the resolver in :mod:`wcetfit.static.binary` (which runs inside angr's CFGFast) and
by :mod:`wcetfit.static.build`, which records every table in the model.
"""

from __future__ import annotations

import re

_REG32 = {f"r{x}x": f"e{x}x" for x in "abcd"} | {"rsi": "esi", "rdi": "edi", "rbp": "ebp",
                                                  "rsp": "esp"} | {f"r{i}": f"r{i}d" for i in range(8, 16)}
_TABLE_ABS = re.compile(r"^qword ptr \[(\w+)\*8 \+ (0x[0-9a-f]+)\]$")
_TABLE_REL = re.compile(r"^(\w+), dword ptr \[(\w+) \+ (\w+)\*4\]$")
_MAX_TABLE = 4096


# Every name of each general-purpose register (64, 32, 16, 8 bits) -> its 64-bit name.
_FAMILY: dict[str, str] = {}
for _x in "abcd":
    for _n in (f"r{_x}x", f"e{_x}x", f"{_x}x", f"{_x}l", f"{_x}h"):
        _FAMILY[_n] = f"r{_x}x"
for _r in ("si", "di", "bp", "sp"):
    for _n in (f"r{_r}", f"e{_r}", _r, f"{_r}l"):
        _FAMILY[_n] = f"r{_r}"
for _i in range(8, 16):
    for _n in (f"r{_i}", f"r{_i}d", f"r{_i}w", f"r{_i}b"):
        _FAMILY[_n] = f"r{_i}"


def family(reg: str) -> str | None:
    return _FAMILY.get(reg.strip())


def _writes(op_str: str, mnemonic: str, reg: str) -> bool:
    """Does an instruction (probably) write ``reg`` (any width)?"""
    if mnemonic in ("cmp", "test", "push", "nop") or mnemonic.startswith("j"):
        return False
    dest = op_str.split(",", 1)[0].strip()
    fam = family(reg)
    return dest in (reg, _REG32.get(reg, reg)) or (fam is not None and family(dest) == fam)


# Instructions that leave the flags alone: gcc may schedule them between a guard's
# ``cmp`` and its conditional jump.
_FLAG_NEUTRAL = ("mov", "lea", "movzx", "movsx", "movsxd", "movabs", "nop", "push", "pop")


def _next_branch(insns: list[tuple[int, int, str, str]], i: int) -> str | None:
    """The mnemonic of the first instruction after ``insns[i]`` that is not flag-neutral."""
    for j in range(i + 1, len(insns)):
        if insns[j][2] not in _FLAG_NEUTRAL:
            return insns[j][2]
    return None


_BYTE_REGS = {n for n, f in _FAMILY.items() if n.endswith(("l", "b")) or n in ("ah", "bh", "ch", "dh")}
_IMM = re.compile(r"0x[0-9a-f]+|\d+")


def _guard_after(insns: list[tuple[int, int, str, str]], i: int, src: str, branch: str) -> int | None:
    """``movzx eax, bpl; cmp bpl, 7; ja``: the guard compares the copy's source after the
    copy.  The n of the first ``cmp src, n-1; <branch>`` after ``insns[i]`` at exactly
    the source's width (a wider source value would not bound a narrower copy, nor the
    reverse), provided nothing writes the source in between."""
    for j in range(i + 1, len(insns)):
        _, _, mnem, ops = insns[j]
        parts = [p.strip() for p in ops.split(",")]
        if mnem == "cmp" and len(parts) == 2 and parts[0] == src and _IMM.fullmatch(parts[1]) \
                and _next_branch(insns, j) == branch:
            n = int(parts[1], 0) + 1
            return n if 0 < n <= _MAX_TABLE else None
        if _writes(ops, mnem, src):
            return None
    return None


def _bound_from(insns: list[tuple[int, int, str, str]], reg: str, branch: str = "ja") -> int | None:
    """The number of values the table index ``reg`` can have where ``insns`` end: from its
    guard (:func:`_guarded_bound`) or, in hand-written code that computes the index
    instead (libgmp's ``and eax, 3; lea r9, [rax + 4]; cmovg rax, r9``), from the value
    ranges along the path (:func:`_range_bound`)."""
    n = _guarded_bound(insns, reg, branch)
    return n if n is not None else _range_bound(insns, reg)


def _guarded_bound(insns: list[tuple[int, int, str, str]], reg: str, branch: str = "ja") -> int | None:
    """Scanning ``insns`` backwards: the n of a ``cmp reg, n-1`` followed by ``branch``
    (the conditional jump that leaves when reg > n-1) guarding ``reg``, at any width
    (``cmp al, 7; ja`` bounds rax to 8 values), across register copies and zero/sign
    extensions (``movzx eax, al``, ``mov eax, edx``: the guard may then be on the source,
    before the copy or between it and the table's load); an index zero-extended from a
    byte (``movzx edi, dil``) has at most 256 values whatever precedes it.  None if
    ``reg`` is otherwise written first and no guard or byte extension is found."""
    fam = family(reg)
    if fam is None:
        return None
    # the byte extension's bound: it holds from the extension on, whatever came before
    cap: int | None = None

    def found(n: int) -> int | None:
        n = min(n, cap) if cap is not None else n
        return n if 0 < n <= _MAX_TABLE else cap

    mem: str | None = None      # the index was loaded from here: a guard may compare it
    for i in range(len(insns) - 1, -1, -1):
        _, _, mnem, ops = insns[i]
        parts = [p.strip() for p in ops.split(",")]
        if mem is not None:
            # ``cmp byte ptr [X], n-1; ja; movzx idx, byte ptr [X]``: nothing in between
            # may write memory or the registers of X.
            if mnem == "cmp" and same_address(ops.rsplit(",", 1)[0].strip(), mem):
                imm = ops.rsplit(",", 1)[1].strip()
                nxt = _next_branch(insns, i)
                if nxt == branch and _IMM.fullmatch(imm):
                    return found(int(imm, 0) + 1)
                return cap
            if mnem == "lea" and len(parts) == 2:
                # ``cmp dword ptr [rax + rdx*4 + 0x30], 4; lea rcx, [rdx + 0xc]; ja; mov
                # ecx, dword ptr [rax + rcx*4]`` (liblzma's range encoder): the load's
                # address written in terms of what the register held before the lea.
                before = address_before_lea(mem, parts[0], parts[1])
                if before is None:
                    return cap
                mem = before
                continue
            if mnem.startswith("j") or mnem in ("nop", "test", "cmp"):
                continue
            # A push writes below the stack pointer, where no live object is (no alias),
            # but moves the stack pointer; a pop writes its register.
            if mnem in ("push", "pop") and "sp" in mem:
                return cap
            if mnem == "push":
                continue
            if "ptr [" in parts[0] or mnem == "call" \
                    or any(family(r) == family(parts[0]) for r in re.findall(r"\w+", mem)
                           if family(r) is not None):
                return cap
            continue
        if mnem != "pop" and (mnem in _IMPLICIT_WRITES or mnem.startswith(("rep", "lods"))):
            return cap          # may write the index without naming it (mul, call, ...)
        if mnem == "cmp":
            if len(parts) == 2 and family(parts[0]) == fam and _IMM.fullmatch(parts[1]):
                nxt = _next_branch(insns, i)
                if nxt == branch:
                    return found(int(parts[1], 0) + 1)
            continue
        if len(parts) == 2 and family(parts[0]) == fam:
            if mnem == "and" and _IMM.fullmatch(parts[1]) \
                    and re.fullmatch(r"r\w*|e\w*", parts[0]) and not parts[0].endswith(("w", "b")):
                # ``and edx, 1`` (``finishers[acc & 1]``): at 32 or 64 bits the mask clears
                # every higher bit, so the index is at most the mask (not at 8/16 bits,
                # which keep the register's upper bits).
                return found(int(parts[1], 0) + 1)
            if mnem in ("mov", "movzx", "movsx", "movsxd") and family(parts[1]) is not None:
                after = _guard_after(insns, i, parts[1], branch)
                if after is not None:
                    return found(after)
                if mnem == "movzx" and parts[1] in _BYTE_REGS and cap is None:
                    cap = 256
                fam = family(parts[1])      # the index is a copy (or extension) of this one
                continue
            if mnem in ("mov", "movzx") and "ptr [" in parts[1]:
                if mnem == "movzx" and parts[1].startswith("byte ptr") and cap is None:
                    cap = 256
                mem = ops.split(",", 1)[1].strip()
                continue
            return cap
        if _writes(ops, mnem, fam):
            return cap
    return cap


_MEMORY = re.compile(r"^(?:(\w+) ptr )?\[([^\]]+)\]$")
_TERM = re.compile(r"^(\w+)(?:\*([1248]))?$")

Address = tuple[str | None, str | None, str | None, int, int]   # size, base, index, scale, disp


def parse_address(operand: str) -> Address | None:
    """``dword ptr [rax + rdx*4 + 0x30]`` → ("dword", "rax", "rdx", 4, 0x30); None for
    anything else (a segment, rip, a form this does not know)."""
    m = _MEMORY.match(operand.strip())
    if m is None:
        return None
    size, inner = m.group(1), m.group(2).replace(" - ", " + -")
    base = index = None
    scale, disp = 1, 0
    for term in (t.strip() for t in inner.split(" + ")):
        if re.fullmatch(r"-?(0x[0-9a-f]+|\d+)", term):
            disp += int(term, 0)
            continue
        t = _TERM.match(term)
        if t is None or family(t.group(1)) is None or "rip" in term:
            return None
        if t.group(2) is not None or base is not None:
            if index is not None:
                return None
            index, scale = family(t.group(1)), int(t.group(2) or 1)
        else:
            base = family(t.group(1))
    if index is not None and scale == 1 and base is not None and base > index:
        base, index = index, base          # [a + b] and [b + a] are one address
    return size, base, index, scale, disp


def same_address(a: str, b: str) -> bool:
    """Whether two memory operands name the same bytes (same size, same registers, same
    displacement), whatever capstone's spelling."""
    pa, pb = parse_address(a), parse_address(b)
    return pa is not None and pa == pb


def address_before_lea(mem: str, dest: str, src: str) -> str | None:
    """``mem`` rewritten for the point before ``lea dest, src``: unchanged when the lea
    writes none of its registers; with the index substituted when the lea set the index
    to another register plus a constant (``lea rcx, [rdx + 0xc]``: ``[rax + rcx*4]`` was
    ``[rax + rdx*4 + 0x30]``); None when the address cannot be followed past the lea."""
    addr = parse_address(mem)
    fam = family(dest)
    if addr is None or fam is None:
        return None
    size, base, index, scale, disp = addr
    if fam not in (base, index):
        return mem
    lea = parse_address(src)
    if fam != index or base == fam or lea is None or lea[2] is not None \
            or lea[1] is None or _width(dest) != 64:
        return None
    index, disp = lea[1], disp + scale * lea[4]
    text = " + ".join([x for x in (base,) if x] + [f"{index}*{scale}"]
                      + ([hex(disp)] if disp > 0 else []))
    if disp < 0:
        text += f" - {hex(-disp)}"
    return f"{size + ' ptr ' if size else ''}[{text}]"


# Instructions that write registers they do not name as their first operand (or more than
# it): after one, no range is trusted.
_IMPLICIT_WRITES = ("mul", "div", "idiv", "cpuid", "rdtsc", "rdtscp", "xchg", "cmpxchg", "cdq",
                    "cqo", "cwd", "cdqe", "cwde", "lodsb", "lodsd", "lodsq", "call", "syscall",
                    "xadd", "rdrand", "rdseed", "xgetbv", "rdpid", "pop")
_LEA_OFF = re.compile(r"^\w+ ptr \[(\w+)(?: ([+-]) (0x[0-9a-f]+|\d+))?\]$|^\[(\w+)(?: ([+-]) (0x[0-9a-f]+|\d+))?\]$")


def _width(reg: str) -> int:
    """64, 32, or 0 (a narrower register, which keeps the upper bits: no range kept)."""
    if reg in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp") or re.fullmatch(r"r\d+", reg):
        return 64
    if re.fullmatch(r"e[a-ds][xip]|e[sb]p|r\d+d", reg):
        return 32
    return 0


def _range_bound(insns: list[tuple[int, int, str, str]], reg: str) -> int | None:
    """The index's value range computed forwards along the path (no guard needed): ``and``
    with a constant, constants, copies, byte/word zero extensions, constant adds and
    ``lea r, [s + k]``, and ``cmov`` (either value).  Registers start unknown; anything
    else that writes one makes it unknown again.  The table has hi + 1 entries if the
    index's range is [lo, hi] with lo >= 0."""
    ranges: dict[str, tuple[int, int]] = {}

    def imm(x: str) -> int | None:
        return int(x, 0) if _IMM.fullmatch(x) else None

    for _, _, mnem, ops in insns:
        parts = [p.strip() for p in ops.split(",")] if ops else []
        if mnem in _IMPLICIT_WRITES or mnem.startswith(("rep", "lods")):
            ranges.clear()
            continue
        if mnem.startswith("j") or mnem in ("cmp", "test", "nop", "push") or not parts:
            continue
        dest = parts[0]
        fd = family(dest)
        if fd is None:
            continue                      # memory or a vector register: no GPR written
        src = parts[1] if len(parts) == 2 else None
        w = _width(dest)
        new: tuple[int, int] | None = None
        if w and len(parts) == 2:
            k = imm(src)
            if mnem == "and" and k is not None and 0 <= k < 2 ** 31:
                new = (0, k)
            elif mnem == "mov" and k is not None and 0 <= k < 2 ** 31:
                new = (k, k)
            elif mnem == "xor" and src == dest:
                new = (0, 0)
            elif mnem in ("mov", "movsxd") and family(src) is not None and _width(src) and \
                    family(src) in ranges:
                new = ranges[family(src)]
            elif mnem == "movzx":
                new = (0, 255) if src in _BYTE_REGS or src.startswith("byte ptr") else \
                    (0, 65535) if _width(src) == 0 and family(src) is not None or \
                    src.startswith("word ptr") else None
            elif mnem in ("add", "sub") and k is not None and fd in ranges and 0 <= k < 2 ** 31:
                lo, hi = ranges[fd]
                new = (lo + k, hi + k) if mnem == "add" else (lo - k, hi - k)
            elif mnem == "lea":
                m = _LEA_OFF.match(src)
                if m:
                    base, sign, off = (m.group(1), m.group(2), m.group(3)) if m.group(1) \
                        else (m.group(4), m.group(5), m.group(6))
                    if family(base) in ranges and _width(base) == 64:
                        d = 0 if off is None else (int(off, 0) if sign == "+" else -int(off, 0))
                        lo, hi = ranges[family(base)]
                        new = (lo + d, hi + d)
            elif mnem.startswith("cmov") and family(src) is not None and _width(src) == w \
                    and fd in ranges and family(src) in ranges:
                a, b = ranges[fd], ranges[family(src)]
                new = (min(a[0], b[0]), max(a[1], b[1]))
        if new is not None and new[0] >= 0 and new[1] < 2 ** 32:
            ranges[fd] = new
        else:
            ranges.pop(fd, None)
        if mnem == "xchg" and src is not None and family(src) is not None:
            ranges.pop(family(src), None)
    r = ranges.get(family(reg) or "")
    if r is None or r[0] < 0:
        return None
    n = r[1] + 1
    return n if 0 < n <= _MAX_TABLE else None


def match_table(insns: list[tuple[int, int, str, str]]) -> tuple[int, int, str, int] | None:
    """The jump-table shape of code ending with an indirect ``jmp`` (gcc's two forms, see
    the resolver in binary.py): (table address, entry size, index register, position
    before which the guard is searched), or None.  ``insns`` may span several blocks
    (the ``lea`` of the table is often in a predecessor)."""
    from wcetfit.static.elfinfo import rip_target

    if not insns or not insns[-1][2].endswith("jmp"):
        return None
    last = insns[-1]
    m = _TABLE_ABS.match(last[3])
    if m:
        return int(m.group(2), 16), 8, m.group(1), len(insns) - 1
    target = last[3].strip()
    if family(target) is None:
        return None
    for i in range(len(insns) - 2, -1, -1):      # movsxd t, [base + idx*4]; add t, base
        mm = _TABLE_REL.match(insns[i][3]) if insns[i][2] == "movsxd" else None
        if mm is None:
            continue
        dst, base, idx = mm.groups()
        adds = [x for x in insns[i + 1:-1] if x[2] == "add"
                and x[3] in (f"{dst}, {base}", f"{base}, {dst}")]
        if not adds or target not in (dst, base):
            return None
        for j in range(i - 1, -1, -1):
            a, size, mnem, ops = insns[j]
            if mnem == "lea" and ops.startswith(f"{base}, [rip"):
                table = rip_target(a, size, ops.split(", ", 1)[1])
                return None if table is None else (table, 4, idx, i)
            if _writes(ops, mnem, base):
                return None
        return None
    return None


_MEM = re.compile(r"\[([^\]]*)\]")


def _def_of(insns, end: int, reg: str) -> int | None:
    """Index of the last instruction before ``end`` that writes ``reg`` (any width)."""
    for i in range(end - 1, -1, -1):
        a, size, mnem, ops = insns[i]
        if _writes(ops, mnem, reg):
            return i
    return None


def _indexed_off_constant(insns, end: int, mem: str) -> bool:
    """Is ``[base + idx*scale ...]`` an array at a constant address (a table in the
    binary), rather than off a pointer loaded from data?  An unknown base counts as
    constant for 4-byte entries (the cautious side: a table we cannot read is refused)."""
    if not re.search(r"\*(2|4|8)\b", mem):
        return False
    terms = [t.strip() for t in re.split(r"[+-]", mem)]
    bases = [t for t in terms if family(t) is not None]
    if not bases or "rip" in terms:
        return True                      # [idx*8 + 0x...]: an absolute table
    base = bases[0]
    d = _def_of(insns, end, base)
    if d is None:
        # gcc's position-independent tables have 4-byte entries off a ``lea [rip]`` base
        # (often hoisted out of sight); 8-byte entries off a register are pointers in a
        # structure or array (``[r8 + rdx*8 + 0x30]``), the lea-based table aside.
        return "*4" in mem
    # 8-byte entries off a ``lea [rip]``: in position-independent code an array of
    # pointers (``finishers[i](acc)``, entries relocated at load), since gcc and clang
    # emit PIC jump tables with 4-byte relative entries: a call through a pointer.
    return insns[d][2] == "lea" and "rip" in insns[d][3] and "*8" not in mem


def table_shaped(insns: list[tuple[int, int, str, str]]) -> bool:
    """Could the indirect jmp ending ``insns`` be a jump table (an index scaled into an
    array at a constant address), though its table could not be read?  Such a jump is
    refused; any other indirect jump (a code address from a register, from a structure
    or a pointer array in data) is a tail call through a pointer."""
    if not insns:
        return False
    end = len(insns) - 1
    target = insns[end][3].strip()
    m = _MEM.search(target)
    if m:
        return _indexed_off_constant(insns, end, m.group(1))
    if family(target) is None:
        return False
    while True:
        d = _def_of(insns, end, target)
        if d is None:
            return False                 # a code address kept in a register
        a, size, mnem, ops = insns[d]
        parts = [p.strip() for p in ops.split(",", 1)]
        if mnem == "add" and len(parts) == 2:
            # add t, base after movsxd t, [base + idx*4] (or its mirror): follow t's load
            end = d
            continue
        m = _MEM.search(parts[1]) if len(parts) == 2 else None
        if m is None or mnem == "lea":
            return False
        return _indexed_off_constant(insns, d, m.group(1))


def from_memory(insns: list[tuple[int, int, str, str]]) -> bool:
    """Does the indirect jmp ending ``insns`` take its target from memory (``jmp [m]``,
    or ``mov r, [m]; ... jmp r``)?  Such a pointer may change at run time (a hook set
    through an API), so whatever value it had at load time is no target of ours."""
    if not insns:
        return False
    end = len(insns) - 1
    target = insns[end][3].strip()
    if "[" in target:
        return True
    if family(target) is None:
        return False
    d = _def_of(insns, end, target)
    if d is None:
        return False
    mnem, ops = insns[d][2], insns[d][3]
    return mnem == "mov" and "ptr [" in ops.split(",", 1)[-1]


CALLER_SAVED = frozenset({"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"})
_PTR_TABLE = re.compile(r"^qword ptr \[(\w+) \+ (\w+)\*8\]$")


def pointer_table(insns) -> tuple[int, int, str, int] | None:
    """``lea base, [rip + TABLE]; ... jmp qword ptr [base + idx*8]`` (a table of 8-byte
    code addresses, often function entries: a tail call through a pointer table), in
    :func:`match_table`'s terms."""
    from wcetfit.static.elfinfo import rip_target

    if not insns or insns[-1][2].split()[-1] != "jmp":
        return None
    m = _PTR_TABLE.match(insns[-1][3])
    if m is None:
        return None
    base, idx = m.groups()
    for j in range(len(insns) - 2, -1, -1):
        a, size, mnem, ops = insns[j]
        if mnem == "lea" and ops.startswith(f"{base}, [rip"):
            table = rip_target(a, size, ops.split(", ", 1)[1])
            return None if table is None else (table, 8, idx, len(insns) - 1)
        if _writes(ops, mnem, base):
            return None
    return None


def word_relocations(path: str) -> dict[int, int]:
    """Link-time address -> value the loader stores there, for the 8-byte relocations of
    the dynamic relocation table that need no run-time symbol lookup outside the binary
    (RELATIVE, and 64-bit ones against a symbol the binary defines)."""
    import struct

    from elftools.elf.elffile import ELFFile

    out: dict[int, int] = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        syms = b""
        if dynsym is not None:
            f.seek(dynsym["sh_offset"])
            syms = f.read(dynsym["sh_size"])
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_RELA" or sec["sh_flags"] & 0x40:   # not SHF_INFO_LINK
                continue                                                 #   (.rela.plt)
            f.seek(sec["sh_offset"])
            raw = f.read(sec["sh_size"])
            for off, info, addend in struct.iter_unpack("<QQq", raw[:len(raw) // 24 * 24]):
                kind, sym = info & 0xFFFFFFFF, info >> 32
                if kind == 8:                                        # R_X86_64_RELATIVE
                    out[off] = addend
                elif kind == 1 and 24 * (sym + 1) <= len(syms):      # R_X86_64_64
                    shndx, value = struct.unpack_from("<HQ", syms, 24 * sym + 6)
                    if shndx != 0:                                   # defined here
                        out[off] = value + addend
    return out


def unguarded_entries(table: int, lo: int, hi: int, read, code: bytes) -> int:
    """How many entries of a table of 4-byte offsets (relative to ``table``) that no
    bounds check guards belong to it: those, from the first, whose targets are the start
    of an instruction of the function spanning [``lo``, ``hi``) (``code``: its bytes,
    swept linearly; ``read(address, size)``: the table's bytes).

    gcc omits the check where it takes the index to be in range (glibc's
    ``__kernel_standard``, libm's SVID error handler, switches on its ``type`` argument
    straight away: every libm wrapper whose input reaches a domain error -- atanh of
    |x| > 1, cosh overflowing -- ran into "an unresolved indirect jump" and had no bound).
    What follows the table (another function's table, constants) is relative to nothing
    here: its offsets from this table land outside the function or inside an instruction.
    An input that indexes past a table read short sends the instrumented copy past its
    copy of the table (wcetfit.count.relocate copies n entries): that input fails in the
    count run (a crash or a failed flow or differential check) and is reported."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    starts = {a for a, *_ in md.disasm_lite(code, lo)}
    n = 0
    while n < _MAX_TABLE:
        try:
            raw = read(table + 4 * n, 4)
        except Exception:  # noqa: BLE001 -- past the mapped or file bytes: the end
            break
        if len(raw) < 4:
            break
        t = table + int.from_bytes(raw, "little", signed=True)
        if not (lo <= t < hi) or t not in starts:
            break
        n += 1
    return n


def unguarded_table_size(table: int, jump: int, fdes, read, delta: int = 0) -> int | None:
    """The size of a 4-byte offset table at ``table`` that no check guards, read by
    :func:`unguarded_entries` within the ``.eh_frame`` extent (``fdes``: (start, size)
    at link time, shifted by ``delta`` to ``read``'s addresses) of the function holding the
    jump at ``jump``; None without an extent or below two entries."""
    extent = next(((lo + delta, lo + delta + size) for lo, size in fdes
                   if lo + delta <= jump < lo + delta + size), None)
    if extent is None:
        return None
    lo, hi = extent
    try:
        code = read(lo, hi - lo)
    except Exception:  # noqa: BLE001 -- unmapped or outside the file: no table
        return None
    n = unguarded_entries(table, lo, hi, read, code)
    return n if n >= 2 else None
