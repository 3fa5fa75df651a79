"""What wcetfit needs to know about an ELF file before (and besides) angr: pyelftools only.

* :func:`check_elf` refuses, with one clear line, everything that is not an x86-64 ELF
  executable or shared object (missing file, not ELF, other architecture, a ``.o``).
* :func:`read_elf` gathers plain facts: kind (shared object / PIE / executable), whether
  ``.symtab`` is present, every defined function symbol (``.symtab`` and ``.dynsym``, with
  symbol versions), the PLT stubs and GOT slots with the symbol each one binds to, and the
  function starts recorded in ``.eh_frame``.

Every address here is a link-time address (what ``nm`` and ``objdump -d`` print), which is
also what the file itself stores: no loader is involved.

The PLT is decoded from the stub code itself (each stub is an indirect ``jmp`` through a GOT
slot) and matched with the dynamic relocations of that slot, rather than trusted from angr's
loader: this is independent of angr and works for ``.plt``, ``.plt.sec`` (IBT) and
``.plt.got`` alike.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
from dataclasses import dataclass, field

from wcetfit.errors import BinaryError

log = logging.getLogger(__name__)

ELF_MAGIC = b"\x7fELF"
EM_X86_64 = 62

# e_machine values users are likely to hand us by mistake, named the way people say them.
_MACHINE_NAMES = {
    "EM_386": "i386 (32-bit x86)", "EM_AARCH64": "AArch64 (arm64)", "EM_ARM": "ARM (32-bit)",
    "EM_RISCV": "RISC-V", "EM_PPC64": "PowerPC64", "EM_PPC": "PowerPC", "EM_MIPS": "MIPS",
    "EM_S390": "s390", "EM_SPARCV9": "SPARC v9", "EM_IA_64": "IA-64", "EM_LOONGARCH": "LoongArch",
}
# The same, by number, for files pyelftools cannot even open.
_MACHINE_NUMBERS = {3: "EM_386", 183: "EM_AARCH64", 40: "EM_ARM", 243: "EM_RISCV",
                    21: "EM_PPC64", 20: "EM_PPC", 8: "EM_MIPS", 22: "EM_S390", 43: "EM_SPARCV9",
                    50: "EM_IA_64", 258: "EM_LOONGARCH"}

KIND_SHARED = "shared-object"
KIND_PIE = "pie-executable"
KIND_EXEC = "executable"

DF_1_PIE = 0x08000000

# gcc moves the unlikely part of a function into "<name>.cold" (or "<name>.cold.N"): a
# fragment entered by a jump from its parent and jumping back into it, not a function.
_COLD_RE = re.compile(r"\.cold(\.\d+)?$")

# x86-64 dynamic relocation types that bind a GOT slot.
R_X86_64_64 = 1
R_X86_64_GLOB_DAT = 6
R_X86_64_JUMP_SLOT = 7
R_X86_64_IRELATIVE = 37

_PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got", ".iplt")


@dataclass(frozen=True)
class FuncSymbol:
    """A defined function symbol (STT_FUNC or STT_GNU_IFUNC)."""

    name: str          # with "@VERSION" when it is a non-default (hidden) dynamic version
    address: int
    size: int
    binding: str       # "global", "weak" or "local"
    ifunc: bool        # the address is an IFUNC resolver, not the implementation
    dynamic: bool      # from .dynsym (otherwise .symtab)

    @property
    def exported(self) -> bool:
        return self.dynamic and self.binding != "local"


@dataclass(frozen=True)
class GotSlot:
    """A GOT slot bound by a dynamic relocation: the symbol it will hold at run time."""

    address: int
    name: str | None          # symbol name; None for IRELATIVE (a local IFUNC)
    irelative_resolver: int | None = None


@dataclass(frozen=True)
class ElfInfo:
    path: str
    sha256: str
    kind: str                                  # KIND_SHARED / KIND_PIE / KIND_EXEC
    stripped: bool                             # no .symtab
    df_1_pie: bool
    entry: int
    symbols: tuple[FuncSymbol, ...]            # sorted by address, then name
    plt: dict[int, GotSlot] = field(compare=False)     # stub address -> slot it jumps through
    got: dict[int, GotSlot] = field(compare=False)     # slot address -> binding
    fdes: tuple[tuple[int, int], ...] = ()     # (start, size) from .eh_frame
    fde_fragments: frozenset[int] = frozenset()   # FDE starts that are not function entries
    exec_ranges: tuple[tuple[int, int], ...] = ()      # executable sections [start, end)
    plt_ranges: tuple[tuple[int, int], ...] = ()       # PLT sections [start, end)
    segments: tuple[tuple[int, int, int, int], ...] = ()  # PT_LOAD (vaddr, memsz, offset, filesz)

    # -- queries -------------------------------------------------------------------------

    def in_exec(self, addr: int) -> bool:
        return any(a <= addr < b for a, b in self.exec_ranges)

    def in_plt(self, addr: int) -> bool:
        return any(a <= addr < b for a, b in self.plt_ranges)

    def defined(self, name: str) -> FuncSymbol | None:
        """The exported definition a PLT or GOT reference to ``name`` binds to, if here."""
        best = None
        for s in self.symbols:
            if s.name == name and s.dynamic and s.binding != "local":
                best = s
                break
        return best

    def file_offset(self, addr: int, size: int = 1) -> int:
        for vaddr, memsz, offset, filesz in self.segments:
            if vaddr <= addr and addr + size <= vaddr + filesz:
                return offset + (addr - vaddr)
        raise BinaryError(f"{self.path}: address {addr:#x} is not backed by the file")

    def read(self, addr: int, size: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(self.file_offset(addr, size))
            return f.read(size)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- validation -------------------------------------------------------------------------

def check_elf(path: str) -> None:
    """Raise :class:`BinaryError` (one line) unless ``path`` is an x86-64 ELF we can model."""
    if not os.path.exists(path):
        raise BinaryError(f"{path}: no such file")
    if os.path.isdir(path):
        raise BinaryError(f"{path}: is a directory, not a binary")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise BinaryError(f"{path}: cannot read: {exc.strerror}") from None
    if head[:4] != ELF_MAGIC:
        raise BinaryError(f"{path}: not an ELF file (it starts with {head[:4]!r})")
    if len(head) < 20:
        raise BinaryError(f"{path}: truncated ELF header")
    elfclass, data = head[4], head[5]
    order = "little" if data == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    etype = int.from_bytes(head[16:18], order)
    if machine != EM_X86_64 or elfclass != 2:
        tag = _MACHINE_NUMBERS.get(machine, f"e_machine {machine}")
        what = _MACHINE_NAMES.get(tag, tag)
        bits = {1: "32-bit", 2: "64-bit"}.get(elfclass, "unknown-class")
        raise BinaryError(f"{path}: is a {bits} ELF for {what}; wcetfit analyses x86-64 "
                          f"binaries only")
    if data != 1:
        raise BinaryError(f"{path}: big-endian x86-64 ELF is not a valid binary")
    if etype == 1:
        raise BinaryError(f"{path}: is a relocatable object (.o); link it into a shared "
                          f"object or an executable first")
    if etype == 4:
        raise BinaryError(f"{path}: is a core dump, not a binary")
    if etype not in (2, 3):
        raise BinaryError(f"{path}: ELF type {etype} is neither an executable nor a shared object")


def _open(path: str):
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    f = open(path, "rb")
    try:
        return f, ELFFile(f)
    except (ELFError, ValueError, OSError) as exc:
        f.close()
        raise BinaryError(f"{path}: malformed ELF: {exc}") from None


# --- reading ----------------------------------------------------------------------------

_MEMO: dict[tuple[str, int, int, bool], ElfInfo] = {}


def read_elf(path: str, *, with_fdes: bool = True) -> ElfInfo:
    """All the plain facts about ``path`` (validated first with :func:`check_elf`).

    ``with_fdes=False`` skips ``.eh_frame`` (only needed to find function starts when
    recovering control flow, not to look names up).  Results are remembered per file
    (path, size and modification time), since one command asks several times.
    """
    from elftools.common.exceptions import ELFError

    check_elf(path)
    path = os.path.abspath(path)
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size, with_fdes)
    hit = _MEMO.get(key) or (None if with_fdes else _MEMO.get(key[:3] + (True,)))
    if hit is not None:
        return hit
    f, elf = _open(path)
    try:
        try:
            info = _read(path, elf, with_fdes)
        except (ELFError, ValueError, KeyError, AssertionError, struct.error) as exc:
            raise BinaryError(f"{path}: malformed ELF: {exc}") from None
    finally:
        f.close()
    if len(_MEMO) > 8:
        _MEMO.clear()
    _MEMO[key] = info
    return info


def _read(path: str, elf, with_fdes: bool) -> ElfInfo:
    sections = list(elf.iter_sections())
    symtab = next((s for s in sections if s.header.sh_type == "SHT_SYMTAB"), None)

    # Kind: DF_1_PIE (set by binutils >= 2.26) or, for older links, an interpreter.
    df_1_pie = False
    dynamic = next((s for s in sections if s.header.sh_type == "SHT_DYNAMIC"), None)
    if dynamic is not None:
        for tag in dynamic.iter_tags():
            if tag.entry.d_tag == "DT_FLAGS_1" and tag.entry.d_val & DF_1_PIE:
                df_1_pie = True
    has_interp = any(seg.header.p_type == "PT_INTERP" for seg in elf.iter_segments())
    if elf["e_type"] == "ET_EXEC":
        kind = KIND_EXEC
    elif df_1_pie or has_interp:
        kind = KIND_PIE
    else:
        kind = KIND_SHARED

    segments = tuple((s.header.p_vaddr, s.header.p_memsz, s.header.p_offset, s.header.p_filesz)
                     for s in elf.iter_segments() if s.header.p_type == "PT_LOAD")
    exec_ranges = tuple(sorted(
        (s.header.sh_addr, s.header.sh_addr + s.header.sh_size) for s in sections
        if s.header.sh_flags & 0x4 and s.header.sh_type == "SHT_PROGBITS" and s.header.sh_size))
    plt_secs = [s for s in sections if s.name in _PLT_SECTIONS and s.header.sh_size]
    plt_ranges = tuple(sorted((s.header.sh_addr, s.header.sh_addr + s.header.sh_size)
                              for s in plt_secs))

    symbols, dyn_names = _function_symbols(elf, sections)
    got = _got_slots(elf, sections, dyn_names)
    plt = _plt_stubs(plt_secs, got)

    fdes: tuple[tuple[int, int], ...] = ()
    fragments: frozenset[int] = frozenset()
    if with_fdes:
        fdes, fragments = _fdes(elf, symbols)

    return ElfInfo(path=path, sha256=sha256_file(path), kind=kind, stripped=symtab is None,
                   df_1_pie=df_1_pie, entry=elf["e_entry"], symbols=symbols, plt=plt, got=got,
                   fdes=fdes, fde_fragments=fragments, exec_ranges=exec_ranges,
                   plt_ranges=plt_ranges, segments=segments)


def is_fragment_name(name: str) -> bool:
    return bool(_COLD_RE.search(name))


# Symbol and relocation tables are parsed with struct: pyelftools' per-symbol parsing
# costs ~0.3 s on libm's 1,200 dynamic symbols, which a single-function model cannot afford.
_SYM = struct.Struct("<IBBHQQ")       # Elf64_Sym
_RELA = struct.Struct("<QQq")         # Elf64_Rela
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_BINDINGS = {0: "local", 1: "global", 2: "weak", 10: "global"}   # 10: STB_GNU_UNIQUE


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def _version_names(sections) -> dict[int, str]:
    """Names of the versions this object defines (index -> name), from .gnu.version_d."""
    from elftools.elf.gnuversions import GNUVerDefSection

    names: dict[int, str] = {}
    for s in sections:
        if isinstance(s, GNUVerDefSection):
            for verdef, aux in s.iter_versions():
                first = next(iter(aux), None)
                if first is not None:
                    names[verdef["vd_ndx"]] = first.name
    return names


def _symbol_table(elf, sec) -> list[tuple[str, int, int, int, int, int]]:
    """(name, st_info, st_other, st_shndx, st_value, st_size) for every entry."""
    strtab = elf.get_section(sec.header.sh_link).data()
    data = sec.data()
    n = len(data) // _SYM.size
    return [(_cstr(strtab, nm), info, other, shndx, value, size)
            for nm, info, other, shndx, value, size in _SYM.iter_unpack(data[:n * _SYM.size])]


def _function_symbols(elf, sections) -> tuple[tuple[FuncSymbol, ...], list[str]]:
    """Defined function symbols, and the names of .dynsym entries by index."""
    versym = next((s for s in sections if s.header.sh_type == "SHT_GNU_versym"), None)
    vernames = _version_names(sections)
    ver: list[int] = []
    if versym is not None:
        raw = versym.data()
        ver = [v for (v,) in struct.iter_unpack("<H", raw[:len(raw) // 2 * 2])]
    out: dict[tuple[str, int], FuncSymbol] = {}
    dyn_names: list[str] = []
    for sec in sections:
        if sec.header.sh_type not in ("SHT_SYMTAB", "SHT_DYNSYM"):
            continue
        dynamic = sec.header.sh_type == "SHT_DYNSYM"
        table = _symbol_table(elf, sec)
        if dynamic:
            dyn_names = [t[0] for t in table]
        for i, (name, info, _other, shndx, value, size) in enumerate(table):
            st_type = info & 0xF
            if st_type not in (_STT_FUNC, _STT_GNU_IFUNC) or shndx == 0 or not name or not value:
                continue
            if dynamic and i < len(ver) and ver[i] & 0x8000:
                # A non-default version (nm prints name@VER): keep it apart from the
                # default one, which is what a plain name refers to.
                vn = vernames.get(ver[i] & 0x7FFF)
                name = f"{name}@{vn}" if vn else f"{name}@{ver[i] & 0x7FFF}"
            fs = FuncSymbol(name=name, address=value, size=size,
                            binding=_BINDINGS.get(info >> 4, "local"),
                            ifunc=st_type == _STT_GNU_IFUNC, dynamic=dynamic)
            key = (name, value)
            prev = out.get(key)
            # The same symbol is usually in both tables: keep the .dynsym one (it says
            # whether it is exported).
            if prev is None or (dynamic and not prev.dynamic):
                out[key] = fs
    return tuple(sorted(out.values(), key=lambda s: (s.address, s.name))), dyn_names


def _got_slots(elf, sections, dyn_names: list[str]) -> dict[int, GotSlot]:
    """GOT slots bound by dynamic relocations (.rela.dyn, .rela.plt)."""
    got: dict[int, GotSlot] = {}
    for sec in sections:
        if sec.header.sh_type != "SHT_RELA" or not sec.header.sh_flags & 0x2:   # SHF_ALLOC
            continue
        names = dyn_names
        link = sec.header.sh_link
        if link:
            try:
                linked = elf.get_section(link)
                if linked.header.sh_type == "SHT_SYMTAB":
                    names = [t[0] for t in _symbol_table(elf, linked)]
            except Exception:  # noqa: BLE001 -- a broken link only loses names
                pass
        data = sec.data()
        for offset, info, addend in _RELA.iter_unpack(data[:len(data) // _RELA.size * _RELA.size]):
            rtype, sym = info & 0xFFFFFFFF, info >> 32
            if rtype in (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT, R_X86_64_64):
                if sym and sym < len(names) and names[sym]:
                    got[offset] = GotSlot(offset, names[sym])
            elif rtype == R_X86_64_IRELATIVE:
                got[offset] = GotSlot(offset, None, irelative_resolver=addend)
    return got


def _plt_stubs(plt_secs, got: dict[int, GotSlot]) -> dict[int, GotSlot]:
    """Decode each PLT stub: the address calls target -> the GOT slot it jumps through."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    stubs: dict[int, GotSlot] = {}
    for sec in plt_secs:
        if sec.header.sh_type == "SHT_NOBITS":
            continue
        data = sec.data()
        prev = None
        for addr, size, mnem, ops in md.disasm_lite(data, sec.header.sh_addr):
            if mnem.endswith("jmp") and ops.startswith("qword ptr [rip"):
                slot = _rip_target(addr, size, ops)
                if slot is not None and slot in got:
                    # Calls target the stub's first instruction: the endbr64 of an IBT stub.
                    start = prev[0] if prev and prev[2] == "endbr64" and prev[0] + prev[1] == addr \
                        else addr
                    stubs[start] = got[slot]
            prev = (addr, size, mnem)
    return stubs


_RIP_RE = re.compile(r"\[rip ([+-]) (0x[0-9a-f]+|\d+)\]")


def _rip_target(addr: int, size: int, op_str: str) -> int | None:
    """Target of a ``[rip + disp]`` memory operand (relative to the next instruction)."""
    m = _RIP_RE.search(op_str)
    if not m:
        return None
    disp = int(m.group(2), 0)
    return addr + size + (disp if m.group(1) == "+" else -disp)


rip_target = _rip_target


def _fdes(elf, symbols) -> tuple[tuple[tuple[int, int], ...], frozenset[int]]:
    """FDE ranges, and which FDE starts are fragments rather than function entries.

    A function is entered by a call, so at its first instruction the CFA is rsp+8 (just
    the return address on the stack).  An FDE whose first row says otherwise describes
    code entered by a jump from inside another function (gcc's ``.cold`` parts): a
    fragment.  Only FDEs without a symbol are decoded (decoding costs time); a symbol
    named ``*.cold`` marks a fragment directly.
    """
    section = elf.get_section_by_name(".eh_frame")
    if section is None:
        return (), frozenset()
    sym_addrs = {s.address for s in symbols if not is_fragment_name(s.name)}
    cold_addrs = {s.address for s in symbols if is_fragment_name(s.name)}
    from wcetfit.static.ehframe import RSP, EhFrameUnsupported, read_fdes

    try:
        fast = read_fdes(section.data(), section["sh_addr"])
    except (EhFrameUnsupported, IndexError, ValueError, struct.error) as exc:
        log.debug("reading .eh_frame directly failed (%s): decoding it with pyelftools", exc)
    else:
        fdes, fragments = [], set()
        for start, size, cfa in fast:
            fdes.append((start, size))
            if start in cold_addrs and start not in sym_addrs:
                fragments.add(start)
            elif start not in sym_addrs and cfa is not None and cfa != (RSP, 8):
                fragments.add(start)
        return tuple(sorted(set(fdes))), frozenset(fragments)
    try:
        entries = list(elf.get_dwarf_info(relocate_dwarf_sections=False).EH_CFI_entries())
    except Exception as exc:  # noqa: BLE001 -- a bad .eh_frame only loses hints
        log.warning("cannot read .eh_frame: %s", exc)
        return (), frozenset()
    fdes = []
    fragments = set()
    for ent in entries:
        if type(ent).__name__ != "FDE":
            continue
        start = ent.header.initial_location
        size = ent.header.address_range
        fdes.append((start, size))
        if start in cold_addrs and start not in sym_addrs:
            fragments.add(start)
        elif start not in sym_addrs:
            try:
                row = ent.get_decoded().table[0]
                cfa = row.get("cfa")
                if cfa is not None and (cfa.reg != 7 or cfa.offset != 8):
                    fragments.add(start)
            except Exception:  # noqa: BLE001 -- undecodable CFI: keep it as an entry
                pass
    return tuple(sorted(set(fdes))), frozenset(fragments)
