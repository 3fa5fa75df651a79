"""IFUNC symbols and IRELATIVE slots: the implementations the dynamic loader selects here.

An IFUNC symbol's value is a resolver that returns, at load time, the implementation fit
for the CPU (libm's ``sin`` picks an FMA or an SSE2 version).  The timing run calls what
the loader bound, so the model must be of that code, not of the 5-block resolver.  We ask
the loader itself: the binary is dlopen'ed in this process (as the count and timing runs
do), ``dlsym`` of an IFUNC name returns the selected implementation, and each IRELATIVE
GOT slot holds its selection once relocated.  Runtime addresses go back to link-time ones
by the load bias.  A selection outside the binary (not expected) is ignored.

The selection depends on the CPU and on ``GLIBC_TUNABLES``: :func:`cpu_key` goes into
the model cache's key.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from dataclasses import dataclass, field

from wcetfit.errors import BinaryError
from wcetfit.static.elfinfo import ElfInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selection:
    """Link-time addresses: resolver -> selected implementation, for both IFUNC symbols
    (keyed by the resolver) and IRELATIVE GOT slots (keyed by the slot)."""

    by_resolver: dict[int, int] = field(default_factory=dict)
    by_slot: dict[int, int] = field(default_factory=dict)
    problem: str | None = None        # why nothing could be resolved (said in warnings)

    def implementations(self) -> set[int]:
        return set(self.by_resolver.values()) | set(self.by_slot.values())


def cpu_key() -> str:
    """What the loader's choice depends on: the CPU's feature flags and the tunables."""
    from wcetfit.machine import cpu_info

    text = " ".join(sorted(cpu_info().flags)) + "|" + os.environ.get("GLIBC_TUNABLES", "")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def needs_loader(elf: ElfInfo) -> bool:
    return any(s.ifunc and s.dynamic for s in elf.symbols) or \
        any(slot.name is None for slot in elf.got.values())


_cache: dict[str, Selection] = {}


def selection(elf: ElfInfo) -> Selection:
    """The loader's choices for ``elf`` on this machine (empty if it has no IFUNC)."""
    if not needs_loader(elf):
        return Selection()
    hit = _cache.get(elf.sha256)
    if hit is not None:
        return hit
    from wcetfit import loader

    try:
        lb = loader.load_binary(elf.path)
    except BinaryError as exc:
        sel = Selection(problem=f"its IFUNC selections are unknown ({exc})")
        _cache[elf.sha256] = sel
        return sel
    lo, hi = lb.span()
    dlsym = ctypes.CDLL(None).dlsym
    dlsym.restype = ctypes.c_void_p
    dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

    def back(rt: int | None) -> int | None:
        if not rt or not lo <= rt < hi:
            return None
        a = lb.link_time(rt)
        return a if elf.in_exec(a) else None

    by_resolver: dict[int, int] = {}
    for s in elf.symbols:
        if not (s.ifunc and s.dynamic) or "@" in s.name or s.address in by_resolver:
            continue
        impl = back(dlsym(lb.handle, s.name.encode()))
        if impl is not None:
            by_resolver[s.address] = impl
    by_slot: dict[int, int] = {}
    for addr, slot in elf.got.items():
        if slot.name is None:
            impl = back(int.from_bytes(ctypes.string_at(lb.runtime(addr), 8), "little"))
            if impl is not None:
                by_slot[addr] = impl
    log.info("%s: %d IFUNC symbol(s) and %d IRELATIVE slot(s) resolved as the loader did",
             elf.path, len(by_resolver), len(by_slot))
    sel = Selection(by_resolver, by_slot)
    _cache[elf.sha256] = sel
    return sel
