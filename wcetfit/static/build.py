"""Function models cut out of the global graph (no angr: plain data in, plain data out).

:class:`RawCFG` is angr's global graph as :mod:`wcetfit.static.binary` copies it out;
:class:`Builder` decodes each block with capstone, classifies its calls, tail calls and
jump tables, and cuts each function out of the graph (see binary.py's docstring, steps 4-5).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from dataclasses import dataclass, field

from wcetfit.errors import BinaryError
from wcetfit.model import (CALL_IMPORTED, CALL_INDIRECT, CALL_INTERNAL, Block, CallSite,
                           FunctionModel, Instruction, JumpTable, hexaddr)
from wcetfit.static import elfinfo, jumptables
from wcetfit.static.elfinfo import ElfInfo, FuncSymbol, GotSlot
from wcetfit.static.symbols import SymbolIndex

log = logging.getLogger(__name__)


# --- plain copy of angr's global graph ----------------------------------------------------

@dataclass(frozen=True)
class IndirectJumpInfo:
    resolved: tuple[int, ...]
    tables: tuple[tuple[int | None, int, int, tuple[int, ...]], ...]   # (addr, size, entry size, entries)


@dataclass(frozen=True)
class RawCFG:
    """angr's global CFG as plain data, link-time addresses.  Edge targets outside the
    binary (imports, angr's stubs) are ``None``."""

    blocks: dict[int, int]                                   # address -> size
    edges: dict[int, tuple[tuple[int | None, str], ...]]     # src -> ((dst, jumpkind), ...)
    indirect: dict[int, IndirectJumpInfo]                    # jump instruction -> info
    noreturn: frozenset[int] = frozenset()       # functions (incl. PLT stubs) that never return
    noreturn_names: frozenset[str] = frozenset()  # imported functions that never return
    # blocks continued past the lifter (wcetfit.static.decode): block -> what was done
    decode_notes: dict[int, str] = field(default_factory=dict)
    # block -> its instructions (address, size, mnemonic, op_str), when the recovery
    # decoded them with capstone already (wcetfit.static.descent); else decoded here
    insns: dict[int, tuple[tuple[int, int, str, str], ...]] = field(default_factory=dict)


# --- building function models -------------------------------------------------------------

_RET = re.compile(r"^(?:(?:rep|repz|bnd|notrack)\s+)?ret[qnfw]?$")
_STRING_OPS = ("movs", "stos", "lods", "scas", "cmps", "ins", "outs")


@dataclass
class _BlockFacts:
    """What one block does, independent of the function it is seen from."""

    insns: tuple[Instruction, ...]
    returns: bool = False
    call: tuple[str, int | None, str | None] | None = None   # (kind, target, name)
    call_returns: bool = True
    succ: list[tuple[int, str]] = field(default_factory=list)  # (dst, "jump"|"fall"|"ret")
    tail_out: list[tuple[str, int | None, str | None]] = field(default_factory=list)
    jump_table: JumpTable | None = None
    unresolved: bool = False
    warnings: list[str] = field(default_factory=list)


# lock, repne, rep; the segment overrides cs ss ds es fs gs; operand and address size
_LEGACY_PREFIXES = frozenset(b"\xf0\xf2\xf3\x2e\x36\x3e\x26\x64\x65\x66\x67")


class Builder:
    def __init__(self, path: str, elf: ElfInfo, index: SymbolIndex, raw: RawCFG):
        import capstone

        self.path, self.elf, self.index, self.raw = path, elf, index, raw
        with open(path, "rb") as f:
            self.data = f.read()
        self.md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self.entries = self._entries()
        self.facts: dict[int, _BlockFacts] = {}
        self._pred_map: dict[int, list[int]] | None = None
        # What a PLT/GOT reference to a name binds to when this binary defines it.
        self.exported: dict[str, FuncSymbol] = {}
        for sym in elf.symbols:
            if sym.dynamic and sym.binding != "local":
                self.exported.setdefault(sym.name, sym)

    # Function entries: symbols (not fragments), FDE starts (not fragments), call targets.
    def _entries(self) -> set[int]:
        elf, raw = self.elf, self.raw
        cand = set(self.index.canonical)
        cand |= {s for s, _ in elf.fdes if s not in elf.fde_fragments}
        for src, outs in raw.edges.items():
            for dst, kind in outs:
                if kind == "Ijk_Call" and dst is not None:
                    cand.add(dst)
        cand -= self.index.fragments
        return {a for a in cand if elf.in_exec(a) and not elf.in_plt(a)}

    def functions_present(self) -> list[int]:
        return sorted(a for a in self.entries if a in self.raw.blocks)

    # -- per block --

    def _decode(self, addr: int, size: int) -> tuple[tuple[Instruction, ...], str | None]:
        known = self.raw.insns.get(addr)
        if known is not None and sum(i[1] for i in known) == size:
            return tuple(Instruction(a, s, m, o) for a, s, m, o in known), None
        try:
            off = self.elf.file_offset(addr, size)
        except BinaryError:
            return (), f"block {hexaddr(addr)} is not backed by the file"
        code = self.data[off:off + size]
        insns = tuple(Instruction(a, s, m, o) for a, s, m, o in self.md.disasm_lite(code, addr))
        used = sum(i.size for i in insns)
        if used != size:
            return insns, (f"block {hexaddr(addr)}: capstone decodes {used} of its {size} bytes")
        return insns, None

    def _classify_slot(self, slot: GotSlot, stub: int | None) -> tuple[str, int | None, str | None]:
        sel = self.index.selection
        if slot.name is None:                       # IRELATIVE: a local IFUNC, chosen at load
            impl = sel.by_slot.get(slot.address)
            if impl is not None:                    # ... as the loader chose it here
                return CALL_INTERNAL, impl, self.index.name_of(impl)
            res = slot.irelative_resolver
            return CALL_INDIRECT, stub, (self.index.name_of(res) if res is not None else None)
        sym = self.exported.get(slot.name)
        if sym is not None and not sym.ifunc:
            return CALL_INTERNAL, sym.address, self.index.name_of(sym.address)
        if sym is not None:                         # exported IFUNC: the loader's choice
            impl = sel.by_resolver.get(sym.address)
            if impl is not None:
                return CALL_INTERNAL, impl, self.index.name_of(impl)
            return CALL_INDIRECT, stub, slot.name
        return CALL_IMPORTED, stub, slot.name

    def classify_target(self, t: int) -> tuple[str, int | None, str | None]:
        slot = self.elf.plt.get(t)
        if slot is not None:
            return self._classify_slot(slot, t)
        if self.elf.in_exec(t):
            return CALL_INTERNAL, t, self.index.name_of(t)
        return CALL_INDIRECT, None, None

    def _operand(self, ins: Instruction) -> tuple[str, int | None, GotSlot | None]:
        """How a call/jmp names its target: ("direct", address, None), ("got", None, slot)
        for ``[rip + disp]`` through a GOT slot, or ("indirect", None, None)."""
        ops = ins.op_str
        if re.fullmatch(r"0x[0-9a-f]+", ops):
            return "direct", int(ops, 16), None
        if ops.startswith("qword ptr [rip"):
            slot_addr = elfinfo.rip_target(ins.address, ins.size, ops)
            slot = self.elf.got.get(slot_addr) if slot_addr is not None else None
            if slot is not None:
                return "got", None, slot
        return "indirect", None, None

    def block(self, addr: int) -> _BlockFacts:
        bf = self.facts.get(addr)
        if bf is not None:
            return bf
        insns, warn = self._decode(addr, self.raw.blocks[addr])
        bf = _BlockFacts(insns)
        if warn:
            bf.warnings.append(warn)
        note = self.raw.decode_notes.get(addr)
        if note is not None and "cannot be decoded" in note:
            bf.warnings.append(f"block {hexaddr(addr)}: {note}")
        self.facts[addr] = bf
        if not insns:
            end = addr + self.raw.blocks[addr]
            if self._prefixes_only(addr) and end in self.raw.blocks:
                # ``je 1f; lock; 1: cmpxchg`` (glibc's locks, taken only when the process
                # has threads): the jump lands inside the prefixed instruction, so the
                # prefix alone is a block, which runs the instruction that follows it.
                # The count run's copy runs it whole there (relocate: prefix blocks); the
                # model's edge is the fall-through into the rest of the instruction.
                bf.warnings.clear()
                bf.succ.append((end, "fall"))
            return bf
        last = insns[-1]
        mnem = last.mnemonic.split()[-1] if last.mnemonic else ""
        outs = self.raw.edges.get(addr, ())
        blocks = self.raw.blocks
        elf = self.elf

        def ours(t: int | None) -> bool:    # a block of this binary's code, not a PLT stub
            return t is not None and t in blocks and not elf.in_plt(t)

        if _RET.match(last.mnemonic):
            bf.returns = True
            return bf
        if mnem == "call":
            how, t, slot = self._operand(last)
            noreturn = False
            raw = self.raw
            if how == "direct":
                bf.call = self.classify_target(t)  # type: ignore[arg-type]
                noreturn = t in raw.noreturn or bf.call[1] in raw.noreturn
            elif how == "got":
                bf.call = self._classify_slot(slot, None)  # type: ignore[arg-type]
                noreturn = (slot.name in raw.noreturn_names  # type: ignore[union-attr]
                            or bf.call[1] in raw.noreturn)
            else:
                bf.call = (CALL_INDIRECT, None, None)
            # The fall-through edge exists when angr made one and the callee may return.
            bf.call_returns = False
            if not noreturn:
                for dst, kind in outs:
                    if kind == "Ijk_FakeRet" and ours(dst):
                        bf.succ.append((dst, "ret"))  # type: ignore[arg-type]
                        bf.call_returns = True
            return bf
        if mnem == "jmp":
            how, t, slot = self._operand(last)
            if how == "direct":
                if ours(t):
                    bf.succ.append((t, "jump"))  # type: ignore[arg-type]  # tail call? per function
                else:
                    bf.tail_out.append(self.classify_target(t))  # type: ignore[arg-type]
                return bf
            if how == "got":
                bf.tail_out.append(self._classify_slot(slot, None))  # type: ignore[arg-type]
                return bf
            # Indirect jump: a jump table, targets angr resolved otherwise, a tail call
            # through a pointer, or (table-shaped but unreadable) unresolved.
            info = self.raw.indirect.get(last.address)
            own = self._own_table(addr, last, info)
            if own is not None and self._pointer_table(own):
                # A table of function entries (``return handlers[i](...)``): a tail call
                # through a pointer table, not a switch of this function.
                bf.tail_out.append((CALL_INDIRECT, None, None))
                return bf
            if own is not None and all(ours(t) for t in own.targets):
                # Read by us, bounded by its guard: angr may read past the guard (an 8-bit
                # index is taken for 256 entries) or not record the table at all (its lea
                # in another block).
                bf.jump_table = own
                bf.succ += [(t, "jump") for t in sorted(set(own.targets))]
                return bf
            targets = {d for d, k in outs if ours(d) and k == "Ijk_Boring"}
            if info is not None:
                targets |= {t for t in info.resolved if ours(t)}
                bf.jump_table = self._jump_table(addr, last, info)
            jt = bf.jump_table
            if jt is not None and self._pointer_table(jt):
                jt = None                       # a table of function pointers, as above
            if jt is None and not (bf.jump_table is None and self._table_shaped(addr)) \
                    and (not targets or self._from_memory(addr) or bf.jump_table is not None
                         or all(t in self.entries for t in targets)):
                bf.jump_table = None
                # angr's constant propagation may "resolve" a pointer loaded from data to
                # its initial value (libcrypto's CRYPTO_free hook): not a target of ours.
                # Not a table: a jump to a code address held in a register or memory
                # (``add rsp, 8; jmp rax``) leaves the function, as a tail call does.
                bf.tail_out.append((CALL_INDIRECT, None, None))
                return bf
            bf.succ += [(t, "jump") for t in sorted(targets)]  # type: ignore[misc]
            bf.unresolved = not targets
            return bf
        # Conditional branches, fall-through into a split block, system calls, traps.
        cond_target = None
        if mnem.startswith("j") and re.fullmatch(r"0x[0-9a-f]+", last.op_str):
            cond_target = int(last.op_str, 16)
            if not ours(cond_target):
                # A conditional jump to a PLT stub or elsewhere: a conditional tail call.
                bf.tail_out.append(self.classify_target(cond_target))
        for dst, kind in outs:
            if not ours(dst) or kind not in ("Ijk_Boring", "Ijk_FakeRet"):
                continue
            if dst == addr and last.mnemonic.startswith("rep") \
                    and any(op in mnem for op in _STRING_OPS):
                continue   # VEX models a rep-prefixed string instruction as a self-loop
            bf.succ.append((dst, "jump" if dst == cond_target else "fall"))  # type: ignore[arg-type]
        return bf

    def _prefixes_only(self, addr: int) -> bool:
        """Whether the block at ``addr`` is legacy prefix bytes alone (lock, rep,
        segment, operand or address size), as many as an instruction takes."""
        size = self.raw.blocks[addr]
        try:
            off = self.elf.file_offset(addr, size)
        except BinaryError:
            return False
        code = self.data[off:off + size]
        return 0 < size <= 4 and all(b in _LEGACY_PREFIXES for b in code)

    # -- jump tables read from the code --

    def _preds(self, addr: int) -> list[int]:
        if self._pred_map is None:
            self._pred_map = {}
            for src, outs in self.raw.edges.items():
                for dst, kind in outs:
                    if dst is not None and kind == "Ijk_Boring":
                        self._pred_map.setdefault(dst, []).append(src)
        return self._pred_map.get(addr, [])

    def _tuples(self, addr: int) -> list[tuple[int, int, str, str]]:
        return [(i.address, i.size, i.mnemonic, i.op_str) for i in self.block(addr).insns]

    def _chains(self, addr: int, depth: int = 2) -> list[list[tuple[int, int, str, str]]]:
        """Instruction sequences that end with block ``addr``'s and begin up to ``depth``
        predecessors earlier (one per path; predecessors that end in a call stop it)."""
        own = self._tuples(addr)
        if depth == 0 or addr in self.entries:
            # a function's entry is reached from other functions (calls, tail calls): their
            # code guards their own index, not every caller's.  libm's __kernel_standard
            # switches on its argument; acos's wrapper tail-calls it after a "cmp; ja" of
            # its own, read as the table's guard: 2 entries as acos's callee, 251 as
            # atanh's or alone, and the shared model cache swapped one for the other under
            # every target measured with the other
            return [own]
        out = []
        for p in self._preds(addr):
            if p == addr or p not in self.raw.blocks:
                continue
            pins = self.block(p).insns
            if not pins or pins[-1].mnemonic.split()[-1] == "call" or (
                    pins[-1].mnemonic.split()[-1] == "jmp"
                    and not re.fullmatch(r"0x[0-9a-f]+", pins[-1].op_str)):
                continue    # a call, or an indirect jump (maybe a misread table's target)
            out += [c + own for c in self._chains(p, depth - 1)]
        return out or [own]

    def _own_table(self, addr: int, last: Instruction, info: IndirectJumpInfo | None
                   ) -> JumpTable | None:
        """The jump table of the indirect jmp ending block ``addr``, found in the code
        (possibly across predecessors) and bounded by its guard on every path."""
        chains = self._chains(addr)
        shapes = [jumptables.match_table(c) for c in chains]
        found = {(s[0], s[1], s[2]) for s in shapes if s is not None}
        if len(found) != 1 or None in shapes:
            return None
        table, esize, idx = found.pop()
        bounds = []
        for c, sh in zip(chains, shapes):
            n = jumptables._bound_from(c[:sh[3]], idx)   # type: ignore[index]
            if n is None and esize == 4 and len(chains) == 1:
                # no check at all: the entries that are instructions of the function
                # (jumptables.unguarded_entries), the same in every recovery
                n = self._unguarded(table, last.address)
            if n is None:
                return None
            bounds.append(n)
        n = max(bounds)
        if esize == 4:
            try:
                raw = self.elf.read(table, 4 * n)
            except BinaryError:
                return None
            targets = tuple(table + int.from_bytes(raw[i:i + 4], "little", signed=True)
                            for i in range(0, 4 * n, 4))
            base: int | None = table
        else:
            # Absolute entries are relocated at load: take angr's (it reads relocated
            # memory), cut to the guard's bound.
            tabs = [t for t in (info.tables if info else ()) if t[0] == table and t[2] == 8]
            if not tabs or len(tabs[0][3]) < n:
                return None
            targets, base = tuple(tabs[0][3][:n]), None
        return JumpTable(block=addr, instruction=last.address, table_address=table,
                         entry_size=esize, base=base, targets=targets)

    def _unguarded(self, table: int, jump: int) -> int | None:
        """A 4-byte offset table no check guards (jumptables.unguarded_table_size)."""
        return jumptables.unguarded_table_size(table, jump, self.elf.fdes, self.elf.read)

    def _pointer_table(self, table: JumpTable) -> bool:
        """A table of function entries (``return handlers[i](...)``), where a slot may also
        hold no code address at all: libc's vtables of stdio (__woverflow) have empty slots,
        read relocated as 0 minus the load base, which the model then kept as a jump target
        at -0x400000 and the model cache could not read back."""
        code = [t for t in table.targets if self.elf.in_exec(t)]
        return bool(code) and all(t in self.entries for t in code)

    def _from_memory(self, addr: int) -> bool:
        return any(jumptables.from_memory(c) for c in self._chains(addr))

    def _table_shaped(self, addr: int) -> bool:
        return any(jumptables.table_shaped(c) for c in self._chains(addr))

    def _jump_table(self, block: int, ins: Instruction, info: IndirectJumpInfo) -> JumpTable | None:
        if not info.tables:
            return None
        addr, size, esize, entries = info.tables[0]
        if addr is None or not esize:
            return None
        n = size // esize if size else len(entries)
        base: int | None = None
        targets = tuple(entries)
        if esize == 4 and n:
            # Relative table: re-read the entries from the file and find the base they are
            # relative to (gcc's PIC pattern uses the table's own address).
            try:
                raw = self.elf.read(addr, 4 * n)
            except BinaryError:
                raw = b""
            vals = [int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, len(raw), 4)]
            if len(vals) == n:
                if len(entries) == n:
                    bases = {t - v for t, v in zip(entries, vals)}
                    base = bases.pop() if len(bases) == 1 else None
                if base is None and all(addr + v in self.raw.blocks for v in vals):
                    base = addr
                if base is not None:
                    targets = tuple(base + v for v in vals)
        return JumpTable(block=block, instruction=ins.address, table_address=addr, entry_size=esize,
                         base=base, targets=targets)

    # -- per function --

    def function(self, entry: int) -> tuple[FunctionModel, set[int]]:
        from wcetfit.static import structure

        name = self.index.name_of(entry)
        blocks: list[int] = []
        edges: list[tuple[int, int]] = []
        exits: set[int] = set()
        calls: list[CallSite] = []
        tables: list[JumpTable] = []
        unresolved: list[int] = []
        warnings: list[str] = []
        seen = {entry}
        todo = deque([entry])
        while todo:
            b = todo.popleft()
            blocks.append(b)
            bf = self.block(b)
            warnings += bf.warnings
            if not bf.insns and not bf.succ:
                exits.add(b)
                continue
            if not bf.insns:                # a prefix block: on into its instruction
                for dst, _ in bf.succ:
                    edges.append((b, dst))
                    if dst not in seen:
                        seen.add(dst)
                        todo.append(dst)
                continue
            last = bf.insns[-1]
            if bf.returns:
                exits.add(b)
            if bf.call is not None:
                kind, tgt, tname = bf.call
                calls.append(CallSite(b, last.address, kind, tgt, tname))
                if not bf.call_returns:
                    exits.add(b)            # the callee never returns
            for kind, tgt, tname in bf.tail_out:
                calls.append(CallSite(b, last.address, kind, tgt, tname, tail=True))
                exits.add(b)
            if bf.jump_table is not None:
                tables.append(bf.jump_table)
            if bf.unresolved:
                unresolved.append(last.address)
                exits.add(b)
                msg = (f"{name}: unresolved indirect jump `{last.text()}` at {hexaddr(last.address)} "
                       f"(block {hexaddr(b)}): its targets are not in the model")
                warnings.append(msg)
            if not bf.succ and not bf.returns and not bf.tail_out and bf.call is None \
                    and not bf.unresolved:
                exits.add(b)                # hlt, ud2, or code angr could not follow
            for dst, how in bf.succ:
                if dst != entry and dst in self.entries and how != "jump" and \
                        all("nop" in i.mnemonic for i in bf.insns):
                    # padding after a call that does not return (glibc's malloc_printerr,
                    # whose own callee aborts): no path runs it into the next function
                    log.info("%s: block %s, padding after a call, runs into %s: taken "
                             "for the end of a path", name, hexaddr(b), self.index.name_of(dst))
                    exits.add(b)
                    continue
                if dst != entry and dst in self.entries:
                    # Control leaves for another function: a tail call (or a fall-through
                    # into the next function, which the compiler does not emit).
                    calls.append(CallSite(b, last.address, CALL_INTERNAL, dst, self.index.name_of(dst),
                                          tail=True))
                    exits.add(b)
                    if how != "jump":
                        warnings.append(f"{name}: block {hexaddr(b)} falls through into "
                                        f"{self.index.name_of(dst)}")
                    continue
                edges.append((b, dst))
                if dst not in seen:
                    seen.add(dst)
                    todo.append(dst)
        blocks.sort()
        edges = sorted(set(edges))
        exit_t = tuple(sorted(exits))
        st = structure.analyze(blocks, edges, entry, exit_t)
        for lp in st.loops:
            if not lp.reducible:
                # Common (gcc threads state machines into them) and handled: a note, not a
                # warning; the loop carries reducible=False.
                at = sorted({d for _, d in lp.entry_edges})
                log.info("%s: irreducible loop at %s (entered at %s): its bound counts returns "
                         "to %s per entry into the loop", name, hexaddr(lp.header),
                         ", ".join(hexaddr(a) for a in at), hexaddr(lp.header))
        if st.dead_ends:
            warnings.append(f"{name}: {len(st.dead_ends)} block(s) never reach a return, e.g. "
                            f"{hexaddr(st.dead_ends[0])}")
        if self.index.selection.problem and any(
                sym.ifunc and sym.address == entry for sym in self.elf.symbols):
            warnings.append(f"{name} is an IFUNC resolver, modelled as such: "
                            f"{self.index.selection.problem}")
        model = FunctionModel(
            name=name, address=entry,
            blocks=tuple(Block(a, self.raw.blocks[a], self.block(a).insns) for a in blocks),
            edges=tuple(edges), entry=entry, exits=exit_t, loops=st.loops,
            calls=tuple(sorted(calls, key=lambda c: (c.instruction, c.tail, c.target or 0))),
            jump_tables=tuple(tables), coexec_classes=st.coexec_classes, max_rank=st.max_rank,
            unresolved_jumps=tuple(sorted(unresolved)), warnings=tuple(dict.fromkeys(warnings)),
            ifunc=self.index.ifunc_of.get(entry))
        callees = {c.target for c in calls if c.kind == CALL_INTERNAL and c.target is not None}
        return model, callees

