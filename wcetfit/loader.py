"""Load the target binary into this process, and allocate memory near it.

* Shared objects are loaded with ``dlopen``.  PIE executables too, through a copy whose
  ``DF_1_PIE`` bit is cleared in ``DT_FLAGS_1``: glibc 2.36 refuses to dlopen an object
  carrying it, and nothing else about a PIE prevents loading it like a library (its
  ``main`` and ``_start`` are simply never run).  Position-dependent executables
  (ET_EXEC) cannot be loaded beside the interpreter and are refused.
* The C library is loaded with ``dlmopen(LM_ID_NEWLM, …)``: in a link-map namespace of
  its own, a second copy whose malloc arenas, stdio and TLS are not the analyzer's (the
  analyzer runs on the first: a call of the target's malloc must not touch Python's
  heap, nor a comparison of its writable pages see the analyzer's allocations).  Other
  targets are loaded with ``dlopen`` beside the analyzer: glibc's namespaces are few (16)
  and some libraries do not initialise in one (libcrypto 3 crashes in its first call),
  and the differential check (a fork, see :mod:`wcetfit.count.instrumented`) never
  writes their state back.  ``LoadedBinary.own_namespace`` says which.
* The load bias comes from the ``link_map`` (``dlinfo(RTLD_DI_LINKMAP)``, its
  ``l_addr``): runtime address = link-time address + bias, for every address of the
  static model.
* :func:`alloc_near` maps memory within ±2 GiB of the binary, so the instrumented copy
  can reach the binary's code and data (and its own counters) with rel32 and
  RIP-relative displacements.  It scans ``/proc/self/maps`` for gaps, nearest first,
  and maps with ``MAP_FIXED_NOREPLACE`` so an existing mapping is never overwritten.
  Memory is written while RW and then made RX (W^X).

Everything here goes through ctypes: no native helper is needed.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import struct
import tempfile
import threading
from dataclasses import dataclass

from wcetfit.errors import BinaryError, MeasurementError

log = logging.getLogger(__name__)

PAGE = os.sysconf("SC_PAGE_SIZE")

# --- a minimal ELF reader -------------------------------------------------------------------

ET_EXEC, ET_DYN = 2, 3
EM_X86_64 = 62
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_FLAGS_1 = 0, 0x6FFFFFFB
DF_1_PIE = 0x08000000


@dataclass(frozen=True)
class Segment:
    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int          # PF_X=1 PF_W=2 PF_R=4


@dataclass(frozen=True)
class ElfFile:
    """The few facts of an x86-64 ELF the loader needs."""

    path: str
    type: int
    segments: tuple[Segment, ...]
    dynamic: Segment | None
    flags_1: int                 # DT_FLAGS_1 value (0 if absent)
    flags_1_offset: int | None   # file offset of DT_FLAGS_1's value

    @property
    def is_pie(self) -> bool:
        return self.type == ET_DYN and bool(self.flags_1 & DF_1_PIE)

    @property
    def kind(self) -> str:
        if self.type == ET_EXEC:
            return "executable"
        return "pie-executable" if self.is_pie else "shared-object"

    def read(self, address: int, size: int) -> bytes:
        """Bytes at a link-time address, from the file (for planning without loading)."""
        for s in self.segments:
            if s.vaddr <= address and address + size <= s.vaddr + s.filesz:
                with open(self.path, "rb") as f:
                    f.seek(s.offset + address - s.vaddr)
                    return f.read(size)
        raise BinaryError(f"{self.path}: address {address:#x}+{size} is not in a loaded "
                          "segment of the file")


def read_elf(path: str) -> ElfFile:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise BinaryError(f"{path}: {exc.strerror}") from None
    if data[:4] != b"\x7fELF":
        raise BinaryError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise BinaryError(f"{path}: not a 64-bit little-endian ELF")
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_machine != EM_X86_64:
        raise BinaryError(f"{path}: ELF for machine {e_machine}, not x86-64")
    e_phoff, = struct.unpack_from("<Q", data, 32)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 54)
    segs: list[Segment] = []
    dynamic = None
    for i in range(e_phnum):
        p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, _align = \
            struct.unpack_from("<IIQQQQQQ", data, e_phoff + i * e_phentsize)
        seg = Segment(p_vaddr, p_memsz, p_offset, p_filesz, p_flags)
        if p_type == PT_LOAD:
            segs.append(seg)
        elif p_type == PT_DYNAMIC:
            dynamic = seg
    flags_1, flags_1_off = 0, None
    if dynamic is not None:
        for off in range(dynamic.offset, dynamic.offset + dynamic.filesz, 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == DT_NULL:
                break
            if tag == DT_FLAGS_1:
                flags_1, flags_1_off = val, off + 8
    return ElfFile(path, e_type, tuple(segs), dynamic, flags_1, flags_1_off)


def write_loadable_copy(elf: ElfFile, destination: str) -> None:
    """Copy a PIE executable with DF_1_PIE cleared, so that dlopen accepts it."""
    shutil.copyfile(elf.path, destination)
    assert elf.flags_1_offset is not None
    with open(destination, "r+b") as f:
        f.seek(elf.flags_1_offset)
        f.write(struct.pack("<Q", elf.flags_1 & ~DF_1_PIE))


# --- libc through ctypes ----------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long)
_munmap = _libc.munmap
_munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_mprotect = _libc.mprotect
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_dlinfo = _libc.dlinfo
_dlinfo.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
_dlmopen = _libc.dlmopen
_dlmopen.restype = ctypes.c_void_p
_dlmopen.argtypes = (ctypes.c_long, ctypes.c_char_p, ctypes.c_int)
_dlerror = _libc.dlerror
_dlerror.restype = ctypes.c_char_p
_dlsym = _libc.dlsym
_dlsym.restype = ctypes.c_void_p
_dlsym.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
LM_ID_NEWLM = -1

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000
MAP_FAILED = ctypes.c_void_p(-1).value
RTLD_NOW = os.RTLD_NOW
RTLD_DI_LINKMAP = 2


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p),
                ("l_ld", ctypes.c_void_p), ("l_next", ctypes.c_void_p),
                ("l_prev", ctypes.c_void_p)]


# --- the loaded binary --------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadedBinary:
    """A binary loaded into this process.  Addresses in, addresses out: link-time ↔ runtime."""

    path: str             # the binary as the user named it
    loaded_path: str      # what was dlopen'ed (a patched copy for a PIE executable)
    kind: str
    bias: int             # runtime = link-time + bias
    elf: ElfFile
    handle: int           # dlopen handle (kept so the object is never unloaded)
    own_namespace: bool = False  # loaded by dlmopen(LM_ID_NEWLM): shares no state with us

    def runtime(self, address: int) -> int:
        return address + self.bias

    def link_time(self, runtime_address: int) -> int:
        return runtime_address - self.bias

    def span(self) -> tuple[int, int]:
        """Runtime [lo, hi) covering every loaded segment, in whole pages."""
        lo = min(s.vaddr for s in self.elf.segments) & ~(PAGE - 1)
        hi = max(s.vaddr + s.memsz for s in self.elf.segments)
        hi = (hi + PAGE - 1) & ~(PAGE - 1)
        return lo + self.bias, hi + self.bias

    def read(self, address: int, size: int) -> bytes:
        """The bytes now in memory at a link-time address (the code that actually runs)."""
        for s in self.elf.segments:
            if s.vaddr <= address and address + size <= s.vaddr + s.memsz:
                if not s.flags & 4:
                    break
                return ctypes.string_at(self.runtime(address), size)
        raise BinaryError(f"{self.path}: address {address:#x}+{size} is not in a readable "
                          "loaded segment")


def _needs_own_namespace(realpath: str) -> bool:
    """The C library: its writable data is the analyzer's own heap and stdio state."""
    name = os.path.basename(realpath)
    return name.startswith("libc.so") or (name.startswith("libc-") and name.endswith(".so"))


_loaded: dict[str, LoadedBinary] = {}
_lock = threading.Lock()


def load_binary(path: str) -> LoadedBinary:
    """dlopen ``path`` (once per process) and find its load bias."""
    key = os.path.realpath(path)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        elf = read_elf(key)
        if elf.type == ET_EXEC:
            raise BinaryError(f"{path}: a position-dependent executable (ET_EXEC) cannot be "
                              "loaded into the analyzer; rebuild it with -fPIE -pie or as a "
                              "shared object")
        if elf.type != ET_DYN:
            raise BinaryError(f"{path}: ELF type {elf.type} is neither a shared object nor a "
                              "PIE executable")
        loaded_path = key
        if elf.is_pie:
            if elf.flags_1_offset is None:
                raise BinaryError(f"{path}: PIE executable without DT_FLAGS_1")
            tmp = tempfile.mkdtemp(prefix="wcetfit-pie-")
            loaded_path = os.path.join(tmp, os.path.basename(key))
            write_loadable_copy(elf, loaded_path)
        own = _needs_own_namespace(key)
        handle = _dlmopen(LM_ID_NEWLM, os.fsencode(loaded_path), RTLD_NOW) if own else None
        if own and not handle:
            why = (_dlerror() or b"").decode(errors="replace")
            log.warning("%s: dlmopen(LM_ID_NEWLM) failed (%s): loaded beside the analyzer "
                        "instead, sharing its libc: the differential check restores only "
                        "state the analyzer does not use", path, why)
            own = False
        if not own:
            try:
                handle = ctypes.CDLL(loaded_path, mode=RTLD_NOW | os.RTLD_LOCAL)._handle
            except OSError as exc:
                raise BinaryError(f"{path}: dlopen failed: {exc}") from None
        lm = ctypes.POINTER(_LinkMap)()
        if _dlinfo(handle, RTLD_DI_LINKMAP, ctypes.byref(lm)) != 0:
            raise BinaryError(f"{path}: dlinfo(RTLD_DI_LINKMAP) failed")
        bias = lm.contents.l_addr
        if loaded_path != key:
            # The mapping is established; the copy's file is no longer needed.
            shutil.rmtree(os.path.dirname(loaded_path), ignore_errors=True)
        lb = LoadedBinary(path=path, loaded_path=loaded_path, kind=elf.kind, bias=bias,
                          elf=elf, handle=handle, own_namespace=own)
        _loaded[key] = lb
        log.debug("loaded %s (%s) at bias %#x", path, lb.kind, bias)
        return lb


def symbol_address(binary: LoadedBinary, name: str) -> int:
    """The run-time address of ``name`` in ``binary`` as loaded (its own link-map namespace
    when it has one: the code the measured function calls and the data it uses are that
    copy's).  BinaryError when the binary exports no such symbol."""
    _dlerror()                                   # clear a stale error
    address = _dlsym(ctypes.c_void_p(binary.handle), os.fsencode(name))
    if not address:
        why = (_dlerror() or b"").decode(errors="replace")
        raise BinaryError(f"{binary.path} exports no symbol {name}"
                          + (f" ({why})" if why else ""))
    return int(address)


# --- memory near the binary ---------------------------------------------------------------------

REACH = (1 << 31) - (1 << 20)     # what a rel32 reaches, less a margin


def _mappings() -> list[tuple[int, int]]:
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = line.split(None, 1)[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return sorted(out)


def _candidates(lo: int, hi: int, size: int) -> list[int]:
    """Page-aligned addresses for ``size`` bytes in free gaps, nearest to [lo, hi) first."""
    maps = _mappings()
    gaps = []
    prev_end = 1 << 16                      # stay above mmap_min_addr
    for a, b in maps:
        if a > prev_end:
            gaps.append((prev_end, a))
        prev_end = max(prev_end, b)
    gaps.append((prev_end, 1 << 47))
    out = []
    for g0, g1 in gaps:
        g0 = (g0 + PAGE - 1) & ~(PAGE - 1)
        g1 &= ~(PAGE - 1)
        if g1 - g0 < size:
            continue
        if g1 <= lo:
            addr = g1 - size                # just below the binary
        elif g0 >= hi:
            addr = g0                       # just above it
        else:
            continue                        # a hole inside the binary's own span: skip
        if max(addr + size - lo, hi - addr) <= REACH:
            out.append(addr)
    out.sort(key=lambda a: min(abs(a - hi), abs(lo - (a + size))))
    return out


class NearMemory:
    """An anonymous mapping within ±2 GiB of a binary: written RW, then code made RX."""

    def __init__(self, address: int, size: int) -> None:
        self.address = address
        self.size = size
        self._closed = False

    def write(self, offset: int, data: bytes) -> None:
        if offset < 0 or offset + len(data) > self.size:
            raise ValueError("write outside the mapping")
        ctypes.memmove(self.address + offset, data, len(data))

    def protect(self, offset: int, size: int, prot: int) -> None:
        if _mprotect(self.address + offset, size, prot) != 0:
            err = ctypes.get_errno()
            raise MeasurementError(f"mprotect of the instrumented copy failed: "
                                   f"{os.strerror(err)}")

    def close(self) -> None:
        if not self._closed:
            _munmap(self.address, self.size)
            self._closed = True


def alloc_near(lo: int, hi: int, size: int) -> NearMemory:
    """Map ``size`` bytes (rounded to pages, RW) so that all of it is within ±2 GiB of
    every address in [lo, hi)."""
    size = (size + PAGE - 1) & ~(PAGE - 1)
    if hi - lo + size > REACH:
        raise MeasurementError(f"the binary spans {hi - lo:#x} bytes: too large to place "
                               f"{size} bytes within ±2 GiB of all of it")
    for _attempt in range(3):                  # the maps may change between scan and mmap
        for addr in _candidates(lo, hi, size):
            got = _mmap(addr, size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)
            if got is None or got == MAP_FAILED:
                if ctypes.get_errno() in (errno.EEXIST, errno.ENOMEM, errno.EPERM):
                    continue
                raise MeasurementError(f"mmap failed: {os.strerror(ctypes.get_errno())}")
            if got != addr:                  # an old kernel ignoring MAP_FIXED_NOREPLACE
                _munmap(got, size)
                continue
            return NearMemory(addr, size)
    raise MeasurementError(f"no free address range of {size} bytes within ±2 GiB of "
                           f"{lo:#x}-{hi:#x}")


class WritableData:
    """The binary's writable pages in this process: saved before one call and restored
    before another, so two calls (the instrumented copy and the original, or a probed
    call and its reference) start from the same global state.

    The C library loaded beside the analyzer (``dlmopen`` failed) is never saved nor
    restored: its pages hold the analyzer's own malloc arenas and stdio, and writing them
    back between two calls corrupts the analyzer.  Then ``ranges`` is empty and
    ``shared`` says why nothing is compared."""

    def __init__(self, binary: LoadedBinary) -> None:
        lo, hi = binary.span()
        self.ranges: list[tuple[int, int]] = []
        self.shared = (not binary.own_namespace
                       and _needs_own_namespace(os.path.realpath(binary.path)))
        if self.shared:
            log.warning("%s shares the analyzer's namespace: its writable data is neither "
                        "restored nor compared by the differential check", binary.path)
            return
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split()
                a, b = (int(x, 16) for x in parts[0].split("-"))
                if lo <= a and b <= hi and parts[1][1] == "w":
                    self.ranges.append((a, b - a))

    def save(self) -> list[bytes]:
        return [ctypes.string_at(a, n) for a, n in self.ranges]

    def restore(self, saved: list[bytes]) -> None:
        for (a, n), data in zip(self.ranges, saved):
            ctypes.memmove(a, data, n)
