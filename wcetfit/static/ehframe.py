"""Function starts from ``.eh_frame``, read directly: each FDE's range and its first CFA.

pyelftools decodes every call-frame instruction of every FDE; for the function starts
only the FDE headers and the CFA at the FDE's first address matter, and decoding the
rest cost ~7 s per process on libcrypto (10,900 FDEs), more than the rest of its
whole-binary recovery.  This reader walks the CIE/FDE records (the layout of the LSB's
``.eh_frame``: DWARF call frame information with GNU augmentations), decodes the pointer
encodings the augmentation says, and interprets the CIE's initial instructions plus the
FDE's instructions only up to the first location advance.

It refuses (:class:`EhFrameUnsupported`) anything outside what it knows — an encoding,
an instruction, a record shape — and the caller then falls back to pyelftools, so an
unusual ``.eh_frame`` is read slowly rather than wrongly.
"""

from __future__ import annotations

import struct

# DW_EH_PE_* pointer encodings: low nibble the format, high nibble the application.
_ABSPTR, _ULEB128, _UDATA2, _UDATA4, _UDATA8 = 0x00, 0x01, 0x02, 0x03, 0x04
_SLEB128, _SDATA2, _SDATA4, _SDATA8 = 0x09, 0x0A, 0x0B, 0x0C
_PCREL, _DATAREL = 0x10, 0x30
_OMIT = 0xFF

RSP = 7            # DWARF register number of rsp on x86-64


class EhFrameUnsupported(Exception):
    """Something this reader does not interpret: use the general decoder instead."""


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                value -= 1 << shift
            return value, pos


def _pointer(data: bytes, pos: int, enc: int, section_addr: int) -> tuple[int, int]:
    """Decode one encoded pointer at ``pos`` (its own address is section_addr + pos)."""
    fmt = enc & 0x0F
    here = section_addr + pos
    if fmt in (_ABSPTR, _UDATA8):
        v, n = struct.unpack_from("<Q", data, pos)[0], 8
    elif fmt == _SDATA8:
        v, n = struct.unpack_from("<q", data, pos)[0], 8
    elif fmt == _UDATA4:
        v, n = struct.unpack_from("<I", data, pos)[0], 4
    elif fmt == _SDATA4:
        v, n = struct.unpack_from("<i", data, pos)[0], 4
    elif fmt == _UDATA2:
        v, n = struct.unpack_from("<H", data, pos)[0], 2
    elif fmt == _SDATA2:
        v, n = struct.unpack_from("<h", data, pos)[0], 2
    elif fmt == _ULEB128:
        v, end = _uleb(data, pos)
        n = end - pos
    elif fmt == _SLEB128:
        v, end = _sleb(data, pos)
        n = end - pos
    else:
        raise EhFrameUnsupported(f"pointer format {fmt:#x}")
    app = enc & 0x70
    if app == _PCREL:
        v += here
    elif app != 0:
        raise EhFrameUnsupported(f"pointer application {app:#x}")
    return v & 0xFFFFFFFFFFFFFFFF, pos + n


class _Cie:
    __slots__ = ("fde_encoding", "has_z", "initial_cfa")

    def __init__(self, fde_encoding: int, has_z: bool, initial_cfa: tuple[int, int] | None):
        self.fde_encoding = fde_encoding
        self.has_z = has_z
        self.initial_cfa = initial_cfa


def _cfa_before_advance(data: bytes, pos: int, end: int, cfa: tuple[int, int] | None
                        ) -> tuple[int, int] | None:
    """The CFA rule (register, offset) after the instructions in [pos, end) that run
    before the first location advance; None when no rule was set, (-1, 0) for a CFA
    given by a DWARF expression (signal trampolines)."""
    while pos < end:
        op = data[pos]
        pos += 1
        high = op & 0xC0
        if high == 0x40:                       # DW_CFA_advance_loc
            return cfa
        if high == 0x80:                       # DW_CFA_offset reg, uleb
            _, pos = _uleb(data, pos)
            continue
        if high == 0xC0:                       # DW_CFA_restore reg
            continue
        if op == 0x00:                         # DW_CFA_nop
            continue
        if op in (0x02, 0x03, 0x04, 0x01):     # advance_loc1/2/4, set_loc
            return cfa
        if op == 0x0C:                         # DW_CFA_def_cfa reg, off
            reg, pos = _uleb(data, pos)
            off, pos = _uleb(data, pos)
            cfa = (reg, off)
        elif op == 0x0D:                       # DW_CFA_def_cfa_register reg
            reg, pos = _uleb(data, pos)
            cfa = (reg, cfa[1] if cfa else 0)
        elif op == 0x0E:                       # DW_CFA_def_cfa_offset off
            off, pos = _uleb(data, pos)
            cfa = (cfa[0] if cfa else RSP, off)
        elif op == 0x12:                       # DW_CFA_def_cfa_sf reg, sleb·data_align
            raise EhFrameUnsupported("DW_CFA_def_cfa_sf")
        elif op in (0x05, 0x09):               # offset_extended, register: two ulebs
            _, pos = _uleb(data, pos)
            _, pos = _uleb(data, pos)
        elif op in (0x06, 0x07, 0x08):         # restore_extended, undefined, same_value
            _, pos = _uleb(data, pos)
        elif op in (0x0A, 0x0B):               # remember_state, restore_state
            continue
        elif op == 0x11:                       # offset_extended_sf reg, sleb
            _, pos = _uleb(data, pos)
            _, pos = _sleb(data, pos)
        elif op == 0x2E:                       # GNU_args_size
            _, pos = _uleb(data, pos)
        elif op == 0x0F:                       # def_cfa_expression: a block; the CFA is
            size, pos = _uleb(data, pos)       # then no register+offset rule at all
            pos += size
            cfa = (-1, 0)
        elif op in (0x10, 0x16):               # (val_)expression reg, block: a register
            _, pos = _uleb(data, pos)          # rule, the CFA unchanged
            size, pos = _uleb(data, pos)
            pos += size
        else:                                  # expressions and the rest: not interpreted
            raise EhFrameUnsupported(f"call-frame instruction {op:#x}")
    return cfa


def read_fdes(data: bytes, section_addr: int) -> list[tuple[int, int, tuple[int, int] | None]]:
    """(start, size, CFA rule at start) of every FDE of an ``.eh_frame`` section's bytes
    ``data`` loaded at ``section_addr``."""
    cies: dict[int, _Cie] = {}
    out: list[tuple[int, int, tuple[int, int] | None]] = []
    pos = 0
    n = len(data)
    while pos + 4 <= n:
        record = pos
        length = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if length == 0:                        # terminator
            break
        if length == 0xFFFFFFFF:
            raise EhFrameUnsupported("64-bit DWARF record")
        body = pos
        end = body + length
        if end > n:
            raise EhFrameUnsupported("a record runs past the section")
        cie_id = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if cie_id == 0:
            cies[record] = _parse_cie(data, pos, end, section_addr)
        else:
            cie = cies.get(body - cie_id)
            if cie is None:
                raise EhFrameUnsupported("an FDE whose CIE is not before it")
            start, pos = _pointer(data, pos, cie.fde_encoding, section_addr)
            size, pos = _pointer(data, pos, cie.fde_encoding & 0x0F, section_addr)
            if cie.has_z:
                aug_len, pos = _uleb(data, pos)
                pos += aug_len
            out.append((start, size, _cfa_before_advance(data, pos, end, cie.initial_cfa)))
        pos = end
    return out


def _parse_cie(data: bytes, pos: int, end: int, section_addr: int) -> _Cie:
    version = data[pos]
    pos += 1
    if version not in (1, 3):
        raise EhFrameUnsupported(f"CIE version {version}")
    aug_end = data.index(b"\0", pos)
    aug = data[pos:aug_end].decode("ascii", "replace")
    pos = aug_end + 1
    if aug and aug[0] != "z":
        raise EhFrameUnsupported(f"CIE augmentation {aug!r}")
    _, pos = _uleb(data, pos)                  # code alignment
    _, pos = _sleb(data, pos)                  # data alignment
    if version == 1:
        pos += 1                               # return address register
    else:
        _, pos = _uleb(data, pos)
    fde_encoding = _ABSPTR
    if aug:
        aug_len, pos = _uleb(data, pos)
        after = pos + aug_len
        for ch in aug[1:]:
            if ch == "R":
                fde_encoding = data[pos]
                pos += 1
            elif ch == "L":
                pos += 1
            elif ch == "P":
                penc = data[pos]
                _, pos = _pointer(data, pos + 1, penc & 0x7F, section_addr)
            elif ch == "S":
                pass
            else:
                raise EhFrameUnsupported(f"CIE augmentation character {ch!r}")
        pos = after
    if fde_encoding == _OMIT:
        raise EhFrameUnsupported("FDE pointers omitted")
    return _Cie(fde_encoding, bool(aug), _cfa_before_advance(data, pos, end, None))
