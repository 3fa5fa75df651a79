"""Function names <-> entry addresses (no angr)."""

from __future__ import annotations

import difflib
import re

from wcetfit.errors import FunctionNotFound
from wcetfit.model import IfuncChoice, hexaddr
from wcetfit.static import elfinfo, ifunc
from wcetfit.static.ifunc import Selection
from wcetfit.static.elfinfo import ElfInfo, FuncSymbol


def _leading_underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


class SymbolIndex:
    """Function names <-> entry addresses, from .symtab and .dynsym.

    Several names often share an address (``sin``, ``__sin``, ``sinf64``...).  The
    canonical name prefers a default-version exported name, then fewer leading
    underscores, then the shorter one.  Every alias still finds the function.  A name
    defined at several addresses (two static ``helper``s) gets ``@0x<addr>`` appended.

    IFUNC symbols name the implementation the loader selects on this machine (see
    :mod:`wcetfit.static.ifunc`): ``sin`` finds that implementation, whose canonical name
    is its own symbol (.symtab) if it has one, else ``sin@impl+0x<address>``; the
    resolver keeps the name ``sin@resolver``.  Implementations selected for IRELATIVE
    slots are function entries too.
    """

    def __init__(self, elf: ElfInfo, selection: Selection | None = None):
        self.elf = elf
        self.selection = ifunc.selection(elf) if selection is None else selection
        by_addr: dict[int, list[FuncSymbol]] = {}
        for s in elf.symbols:
            if elfinfo.is_fragment_name(s.name):
                continue
            by_addr.setdefault(s.address, []).append(s)
        self.aliases: dict[str, set[int]] = {}
        for addr, syms in by_addr.items():
            for s in syms:
                self.aliases.setdefault(s.name, set()).add(addr)
        best = {addr: min(syms, key=lambda s: ("@" in s.name, s.binding == "local",
                                                 _leading_underscores(s.name), len(s.name), s.name)).name
                for addr, syms in by_addr.items()}
        count: dict[str, int] = {}
        for n in best.values():
            count[n] = count.get(n, 0) + 1
        self.canonical = {a: (n if count[n] == 1 else f"{n}@{a:#x}") for a, n in best.items()}
        for a, n in self.canonical.items():
            self.aliases.setdefault(n, set()).add(a)
        self.fragments = {s.address for s in elf.symbols if elfinfo.is_fragment_name(s.name)}
        self._unique: dict[int, list[str]] | None = None
        self.ifunc_of: dict[int, IfuncChoice] = {}
        self._apply_ifuncs(by_addr)

    def _apply_ifuncs(self, by_addr: dict[int, list[FuncSymbol]]) -> None:
        sel = self.selection
        for res, impl in sorted(sel.by_resolver.items()):
            name = self.canonical[res]
            if impl not in self.canonical:
                self.canonical[impl] = f"{name}@impl+{impl:#x}"
                self.aliases.setdefault(self.canonical[impl], set()).add(impl)
            self.canonical[res] = f"{name}@resolver"
            self.aliases.setdefault(self.canonical[res], set()).add(res)
            for s in by_addr.get(res, []):
                if s.ifunc:
                    self.aliases[s.name] = {impl}
            self.ifunc_of.setdefault(impl, IfuncChoice(name, res, impl, self.canonical[impl]))
        for impl in sel.by_slot.values():
            if impl not in self.canonical:
                self.canonical[impl] = f"sub_{impl:x}"

    def name_of(self, addr: int) -> str:
        return self.canonical.get(addr) or f"sub_{addr:x}"

    def names_at(self, addr: int) -> list[str]:
        """Every name that finds the function at ``addr`` (canonical first)."""
        out = [self.name_of(addr)]
        if self._unique is None:    # built once: a whole library asks for every address
            self._unique = {}
            for n, a in self.aliases.items():
                if len(a) == 1:
                    self._unique.setdefault(next(iter(a)), []).append(n)
        out += sorted(n for n in self._unique.get(addr, ()) if n != out[0])
        return out

    def resolve(self, spec: str | int) -> int:
        """Entry address of a function given by name, alias, ``0x...`` or ``sub_<hex>``."""
        elf = self.elf
        if isinstance(spec, int):
            return self._check_address(spec, hexaddr(spec))
        text = spec.strip()
        m = re.fullmatch(r"(?:0x|sub_)([0-9a-fA-F]+)", text)
        if m:
            return self._check_address(int(m.group(1), 16), text, entry=True)
        name = text.split("@@", 1)[0]           # nm prints the default version as name@@VER
        addrs = self.aliases.get(name)
        if addrs is None and self.elf.stripped and name.startswith("sub_"):
            addrs = None
        if not addrs:
            # "stripped" as the reason only when there is no symbol at all: a shared object
            # without .symtab still names its exported functions in .dynsym (libz), and a
            # name missing from those is most likely no function of the binary.
            defined = sorted({s.name.split("@", 1)[0] for s in elf.symbols})
            if not defined:
                raise FunctionNotFound(f"{elf.path}: no function named {name!r}; the binary "
                                       "has no symbols at all (stripped): name functions by "
                                       "address (0x...)")
            close = difflib.get_close_matches(name, sorted(set(defined) | set(self.aliases)),
                                              n=4, cutoff=0.6)
            tables = ("exported; .symtab is stripped: a function it does not export is "
                      "named by address, 0x...") if elf.stripped else "dynamic and static"
            hint = (f"; did you mean {', '.join(close)}?" if close else
                    f"; `wcetfit cfg {elf.path}` lists them")
            raise FunctionNotFound(f"{elf.path}: no function named {name!r}: it is not among "
                                   f"the binary's {len(defined)} defined function symbols "
                                   f"({tables}){hint}")
        if len(addrs) > 1:
            choices = ", ".join(f"{self.name_of(a)} at {hexaddr(a)}" for a in sorted(addrs))
            raise FunctionNotFound(f"{elf.path}: {name!r} names several functions ({choices}); "
                                   f"give an address")
        return next(iter(addrs))

    def _check_address(self, addr: int, text: str, entry: bool = False) -> int:
        """``addr`` if it can be a function's entry; ``entry``: a user's address, also
        refused inside a function the symbols or .eh_frame know (the addresses the model
        itself found are angr's, which may start a function of its own there)."""
        elf = self.elf
        if elf.in_plt(addr):
            raise FunctionNotFound(f"{elf.path}: {text} is a PLT stub, not a function of this binary")
        if not elf.in_exec(addr):
            raise FunctionNotFound(f"{elf.path}: {text} is not in an executable section")
        # An address inside a function the symbols or .eh_frame know, not at its start,
        # is no function: liblzma's 0x13a24, one byte into an instruction of lzma_crc32,
        # was measured, and every input "crashed" with advice to fix generate().
        starts = {sym.address for sym in elf.symbols} | {start for start, _ in elf.fdes}
        if entry and addr not in starts:
            inside = [(sym.address, sym.name) for sym in elf.symbols
                      if sym.size and sym.address < addr < sym.address + sym.size]
            inside += [(start, self.name_of(start)) for start, size in elf.fdes
                       if size and start < addr < start + size and start not in elf.fde_fragments]
            if inside:
                start, name = max(inside)
                raise FunctionNotFound(
                    f"{elf.path}: {text} is inside {name} ({hexaddr(start)}+"
                    f"{addr - start:#x}), not where a function starts: name the function "
                    f"by its name or its first instruction's address")
        return addr

