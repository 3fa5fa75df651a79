"""The instrumented copy: relocated code with a counter at every block start.

Given the static model of the measured function and of the binary's own functions it
calls (transitively), :func:`plan_copy` decodes every block's bytes and plans a copy in
which

* every block starts with a counter increment (and, in trace mode, an append of the
  block's compact id to the block trace);
* direct jumps, conditional jumps and calls between relocated code are retargeted to the
  copy, always in their rel32 forms (short jcc → 0F 8x rel32, short jmp → E9), and
  direct branches leaving the relocated code keep their original absolute target;
* a call through the binary's own PLT (or GOT) that the model resolves to one of the
  relocated functions (:data:`~wcetfit.model.CALL_INTERNAL`) goes to the callee's copy;
* RIP-relative operands are re-encoded so their absolute target stays the same;
* every jump table is copied: the new table's entries point into the copy, and the
  RIP-relative instruction(s) loading the table's address are redirected to it
  (4-byte tables: entry = new target − new table; 8-byte tables: absolute addresses);
* a direct jump leaving the relocated code must be a tail call in the model; an
  indirect tail call through a register is kept, behind a guard that traps (UD2, a
  reported crash) if it lands in the original of any relocated function;
* a branch with only a rel8 form (``jrcxz``, ``jecxz``, ``loop``, ``loope``, ``loopne``) keeps
  its opcode with a short displacement to a trampoline (:func:`~wcetfit.count.x86enc.rel8_branch`);
  an indirect tail call through memory loads its target into R11, guarded like a
  register's; a "prefix block" (glibc's ``je 1f; lock; 1: cmpxchg``) runs its whole
  instruction, then the next block's counter;
* anything the copy cannot reproduce exactly — an unresolved indirect jump, an indirect
  jump not known as a jump table or tail call, a jump into the middle of a block or out
  of the relocated code where the model sees no tail call, XBEGIN (no rel32 form) —
  raises :class:`~wcetfit.errors.RelocationError` naming the instruction (for a callee,
  :func:`relocatable_closure` leaves it as original code, uncounted, and says so).  The
  copy never runs wrong.

The plan is pure Python and position independent: instruction sizes do not depend on
addresses (only rel32 forms are emitted), so sizes are known before memory is
allocated.  :meth:`CopyPlan.emit` then produces the bytes for concrete addresses: the
load bias of the binary (runtime = link-time + bias), the address of the code region
and the address of the data region (counters, trace state), both within ±2 GiB of the
binary (checked: every displacement is range-checked by :mod:`wcetfit.count.x86enc`).

Counter increments (see :mod:`wcetfit.count.x86enc`): where OF SF ZF AF PF are dead at the
block start (a backward liveness analysis over the function's CFG, per flag), a single
``inc qword [rip+counter]`` (INC keeps CF); elsewhere ``lea rsp,[rsp-128]; push rax;
mov/lea/mov; pop rax; lea rsp,[rsp+128]``, which preserves the flags, every register
and the red zone.  The trace append (CMP/ADD) saves the flags with PUSHFQ/POPFQ where any
of them may be live.  Liveness assumes the System V ABI: no status flag is live across
a call, into a function's entry from its caller, or after a return or tail call.

Limitations (documented, checked where possible): a function pointer taken with a
RIP-relative LEA keeps pointing to the original (its value must not change: the
program may compare or store it), so code reached only through function pointers runs
uncounted; return addresses pushed by the copy point into the copy (unwinding through
it with C++ exceptions or backtrace() is not supported); the counters are not atomic
(single-threaded targets).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import capstone

from wcetfit.count import x86enc as enc
from wcetfit.count.copyplan import (TRACE_STATE_QWORDS, CopyPlan, CounterSlot,  # noqa: F401
                                    Target, _Item, _item_label, _Table)
from wcetfit.count.decode import (ALL_FLAGS, INC_CLOBBERS, _NO_REL32, _REL8_ONLY, _STOPS,
                                  _Insn, _check_prefix_block, _decode_block)
from wcetfit.count.closure import closure, relocatable_closure  # noqa: F401 (re-exported)
from wcetfit.errors import RelocationError
from wcetfit.model import CALL_INDIRECT, CALL_INTERNAL, FunctionModel, JumpTable

log = logging.getLogger(__name__)

# Gaps between relocated blocks shorter than this are padding, closed in the guard's
# ranges: an entry of another function there would need a function squeezed into fewer
# bytes than the 16-byte alignment compilers give function entries.
GUARD_GAP = 16


# --- planning -----------------------------------------------------------------------------

@contextmanager
def _blame(name: str, failures: dict[str, RelocationError]) -> Iterator[None]:
    """Record a RelocationError under the function whose copy failed (``.function``)."""
    try:
        yield
    except RelocationError as exc:
        if getattr(exc, "function", None) is None:
            exc.function = name           # type: ignore[attr-defined]
        failures[name] = exc


def plan_copy(functions: Sequence[FunctionModel], read: Callable[[int, int], bytes], *,
              trace: bool = False, _decoded: dict | None = None) -> CopyPlan:
    """Plan the instrumented copy of ``functions`` (all of one binary).

    ``read(address, size)`` returns the binary's bytes at a link-time address.  Raises
    RelocationError when some instruction cannot be relocated safely.
    """
    if not functions:
        raise RelocationError("nothing to relocate: no function given")
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise RelocationError(f"function listed twice: {names}")
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True

    by_entry: dict[int, str] = {}
    for f in functions:
        by_entry.setdefault(f.entry, f.name)
        by_entry.setdefault(f.address, f.name)
    decoded: dict[str, dict[int, list[_Insn]]] = {}
    failures: dict[str, RelocationError] = {}     # every function's refusal, in one pass
    for f in functions:
        # ``_decoded``: decodings kept across relocatable_closure's passes (a function's
        # bytes and model do not change between them); a refusal is kept as well.
        hit = _decoded.get(f.name) if _decoded is not None else None
        if isinstance(hit, RelocationError):
            failures[f.name] = hit
            continue
        if hit is not None:
            decoded[f.name] = hit
            continue
        with _blame(f.name, failures):
            blocks = {}
            starts = {b.address for b in f.blocks}
            for b in f.blocks:
                try:
                    blocks[b.address] = _decode_block(md, f, b, read(b.address, b.size))
                except RelocationError:
                    if b.end not in starts:
                        raise
                    nxt = f.block_at(b.end)
                    blocks[b.address] = _decode_block(md, f, b, read(b.address, b.size),
                                                      read(nxt.address, nxt.size))
                    _check_prefix_block(md, f, blocks[b.address][-1], nxt, read)
            if f.entry not in blocks:
                raise RelocationError(f"cannot relocate {f.name}: its entry {f.entry:#x} "
                                      "is not one of its blocks")
            decoded[f.name] = blocks
        if _decoded is not None:
            _decoded[f.name] = failures.get(f.name) or decoded[f.name]
    # Which function owns which byte range, to spot jumps into the middle of code.
    ranges = sorted((b.address, b.end, f.name) for f in functions for b in f.blocks)

    slots: dict[str, CounterSlot] = {}
    next_id = 0
    for f in functions:
        slots[f.name] = CounterSlot(f.name, f.block_addresses, next_id)
        next_id += len(f.blocks)
    n_blocks = next_id
    if trace and n_blocks >= 1 << 32:
        raise RelocationError("too many blocks for 32-bit trace ids")

    planner = _Planner(functions, decoded, by_entry, ranges, slots, trace)
    all_items: list[tuple[_Item, ...]] = []
    for f in functions:
        if f.name in failures:
            continue
        with _blame(f.name, failures):
            all_items.append(tuple(planner.function_items(f)))
    if failures:
        first = next(iter(failures.values()))
        err = RelocationError(str(first))
        err.failures = {n: str(e) for n, e in failures.items()}   # type: ignore[attr-defined]
        err.function = first.function                              # type: ignore[attr-defined]
        raise err

    # Sizes are address independent: lay out labels, then tables (8-aligned).
    block_offsets: dict[tuple[str, int], int] = {}
    pos = 0
    for items in all_items:
        for it in items:
            if it.kind == "label":
                block_offsets[it.target] = pos
            pos += it.size
    table_offsets = []
    for tab in planner.tables:
        pos = (pos + 7) & ~7
        table_offsets.append(pos)
        pos += tab.table.entry_size * len(tab.targets)
    pos = (pos + 7) & ~7
    consts_offset = pos
    consts = tuple(a for lo_hi in (planner._guard_ranges or []) for a in lo_hi)
    pos += 8 * len(consts)
    xtab_offset = pos
    xtab: tuple[tuple[int, tuple], ...] = ()
    if planner.indirect_sites:
        # Every relocated function's original entry (and symbol address) -> its copy: a
        # pointer the program took to one of them is called in the copy, counted.
        xtab = tuple(sorted({(a, ("block", n, planner.functions[n].entry))
                             for a, n in by_entry.items()}))
        pos += 16 * len(xtab) + 8
    code_size = (pos + 15) & ~15
    sites_offset = 8 * n_blocks + 8 * TRACE_STATE_QWORDS
    data_size = sites_offset + enc.DISPATCH_TABLE_BYTES * len(planner.indirect_sites)
    entry_offsets = {f.name: block_offsets[(f.name, f.entry)] for f in functions}
    return CopyPlan(
        functions=tuple(names), slots=slots, n_blocks=n_blocks, code_size=code_size,
        data_size=data_size, trace=trace, entry_offsets=entry_offsets,
        block_offsets=block_offsets, fast_counters=planner.fast, safe_counters=planner.safe,
        original_bytes=sum(b.size for f in functions for b in f.blocks),
        transfers=dict(planner.transfers),
        indirect_sites=tuple(planner.indirect_sites), sites_offset=sites_offset,
        _xtab=xtab, _xtab_offset=xtab_offset,
        _items=tuple(all_items), _tables=tuple(planner.tables),
        _table_offsets=tuple(table_offsets), _consts=consts, _consts_offset=consts_offset)


class _Planner:
    def __init__(self, functions: Sequence[FunctionModel],
                 decoded: Mapping[str, Mapping[int, list[_Insn]]], by_entry: Mapping[int, str],
                 ranges: list[tuple[int, int, str]], slots: Mapping[str, CounterSlot],
                 trace: bool) -> None:
        self.functions = {f.name: f for f in functions}
        self.decoded = decoded
        self.by_entry = by_entry
        self.ranges = ranges
        self.slots = slots
        self.trace = trace
        self.tables: list[_Table] = []
        self.fast = 0
        self.safe = 0
        self.transfers: dict[tuple[str, int], tuple[str, str]] = {}
        self._guard_ranges: list[tuple[int, int]] | None = None
        self.indirect_sites: list[tuple[str, int, int, bool]] = []
        self._block_of: dict[int, int] = {}

    def guard_ranges(self) -> list[tuple[int, int]]:
        """[lo, hi) link-time ranges covering the blocks of every relocated function.

        The blocks themselves, not each function's hull: gcc puts a function's cold part
        in ``.text.unlikely``, far from its body (liblzma's ``lzma_index_hash_decode``:
        body at 0xff90, cold part at 0x45c2), so a hull spans tens of KiB of other
        functions, and an indirect call into one of those (liblzma's decoders call each
        other through ``next.code``) trapped as if it entered relocated code.  Blocks
        less than :data:`GUARD_GAP` bytes apart share one range (alignment padding): the
        guard costs a compare pair per range at every indirect branch of the copy."""
        if self._guard_ranges is None:
            spans = sorted((b.address, b.end) for f in self.functions.values() for b in f.blocks)
            merged: list[list[int]] = []
            for lo, hi in spans:
                if merged and lo < merged[-1][1] + GUARD_GAP:
                    merged[-1][1] = max(merged[-1][1], hi)
                else:
                    merged.append([lo, hi])
            self._guard_ranges = [(lo, hi) for lo, hi in merged]
        return self._guard_ranges

    # -- helpers --
    def _refuse(self, f: FunctionModel, insn: _Insn, why: str) -> RelocationError:
        return RelocationError(f"cannot relocate {f.name}: {insn.address:#x} `{insn.text}` "
                               f"{why}")

    def _owner(self, address: int) -> tuple[str, int] | None:
        """(function, block start) of a relocated block containing ``address``."""
        for lo, hi, name in self.ranges:
            if lo <= address < hi:
                return name, lo
        return None

    def _jump_target(self, f: FunctionModel, insn: _Insn, target: int) -> Target:
        """Where a direct jump (or fall-through) to ``target`` must go in the copy."""
        if target in self.decoded[f.name]:
            return ("block", f.name, target)
        if target in self.by_entry:                       # tail call into relocated code
            g = self.by_entry[target]
            return ("block", g, self.functions[g].entry)
        owner = self._owner(target)
        if owner is not None:
            name, start = owner
            if start == target:                           # a block of another function
                return ("block", name, target)
            raise self._refuse(f, insn, f"jumps to {target:#x}, into the middle of block "
                                        f"{start:#x} of {name}")
        return ("abs", target)

    def _tail_or_jump(self, f: FunctionModel, insn: _Insn, site) -> Target:
        """A direct jump; a tail call through our own PLT goes to the callee's copy.

        A jump out of the relocated code is allowed only where the model says it is a
        tail call: anything else (a jump into a fragment the model does not know) would
        run original code, uncounted, that may come back into original copies of the
        relocated functions."""
        if site is not None and site.kind == CALL_INTERNAL and site.target in self.by_entry \
                and insn.rel_target not in self.decoded[f.name]:
            g = self.by_entry[site.target]
            return ("block", g, self.functions[g].entry)
        target = self._jump_target(f, insn, insn.rel_target)
        if target[0] == "abs" and (site is None or not site.tail):
            raise self._refuse(f, insn, f"jumps to {insn.rel_target:#x}, outside the "
                                        "relocated code, and the model does not call it a "
                                        "tail call")
        return target

    def _call_target(self, f: FunctionModel, insn: _Insn, site, target: int | None) -> Target:
        if site is not None and site.kind == CALL_INTERNAL and site.target in self.by_entry:
            g = self.by_entry[site.target]
            return ("block", g, self.functions[g].entry)
        if target is None:
            raise AssertionError("indirect call without an internal site")
        if target in self.by_entry:
            g = self.by_entry[target]
            return ("block", g, self.functions[g].entry)
        owner = self._owner(target)
        if owner is not None:
            name, start = owner
            if start == target:
                return ("block", name, target)
            raise self._refuse(f, insn, f"calls {target:#x}, inside block {start:#x} of {name}")
        return ("abs", target)

    def _succs(self, f: FunctionModel, insns: list[_Insn],
               tables: Mapping[int, JumpTable]) -> list[int] | None:
        """Successor blocks for the flags analysis; None = unknown (assume flags live)."""
        blocks = self.decoded[f.name]
        last = insns[-1]
        end = last.address + last.size
        out: list[int] = []
        if last.is_ret:
            return []
        if last.is_call:
            return []                   # the call kills every status flag
        if last.is_jump:
            if last.rel_target is not None:
                if last.rel_target in blocks:
                    out.append(last.rel_target)
                elif last.mnemonic == "jmp" and last.rel_target in self.by_entry:
                    pass                # tail call: the callee expects no flags
                elif last.mnemonic == "jmp" and self._owner(last.rel_target) is None:
                    pass                # tail call out of the relocated code
                else:
                    return None
            elif last.address in tables:
                out.extend(tables[last.address].targets)
            elif last.mnemonic == "jmp":
                return []               # indirect tail call (known call site) or refused
            if last.mnemonic == "jmp":
                return out
        if end in blocks:
            out.append(end)
        else:
            return None
        return out

    def _flags_live_at_start(self, f: FunctionModel,
                             tables: Mapping[int, JumpTable]) -> dict[int, int]:
        """Status flags possibly live at each block start (backward dataflow)."""
        blocks = self.decoded[f.name]
        gen: dict[int, int] = {}
        kill: dict[int, int] = {}
        succs: dict[int, list[int] | None] = {}
        for addr, insns in blocks.items():
            g = k = 0
            for i in insns:
                g |= i.reads & ~k
                k |= i.writes
            gen[addr], kill[addr] = g, k
            succs[addr] = self._succs(f, insns, tables)
        live = {a: gen[a] if succs[a] is not None else gen[a] | (ALL_FLAGS & ~kill[a])
                for a in blocks}
        changed = True
        while changed:
            changed = False
            for a in blocks:
                ss = succs[a]
                if ss is None:
                    continue
                out = 0
                for s in ss:
                    out |= live.get(s, ALL_FLAGS)
                new = gen[a] | (out & ~kill[a])
                if new != live[a]:
                    live[a] = new
                    changed = True
        return live

    # -- the copy of one function --
    def function_items(self, f: FunctionModel) -> Iterable[_Item]:
        blocks = self.decoded[f.name]
        tables: dict[int, JumpTable] = {}
        table_index: dict[int, int] = {}         # table address → index in self.tables
        for jt in f.jump_tables:
            tables[jt.instruction] = jt
        sites = {c.instruction: c for c in f.calls}
        unresolved = set(f.unresolved_jumps)
        jump_insns = {i.address: i for insns in blocks.values() for i in insns}
        for jt in f.jump_tables:
            insn = jump_insns.get(jt.instruction)
            if insn is None or insn.mnemonic != "jmp" or insn.rel_target is not None:
                raise RelocationError(f"cannot relocate {f.name}: jump table at "
                                      f"{jt.table_address:#x} belongs to {jt.instruction:#x}, "
                                      "which is not an indirect jmp of this function")
            if jt.entry_size == 4 and jt.base != jt.table_address:
                raise self._refuse(f, insn, f"uses a 4-byte jump table at "
                                            f"{jt.table_address:#x} relative to "
                                            f"{jt.base!r}: only tables relative to their own "
                                            "address are supported")
            if jt.entry_size not in (4, 8):
                raise self._refuse(f, insn, f"uses a jump table with {jt.entry_size}-byte "
                                            "entries")
            targets = []
            for t in jt.targets:
                if t not in blocks:
                    raise self._refuse(f, insn, f"has jump-table target {t:#x}, which is not "
                                                "a block start")
                targets.append(("block", f.name, t))
            if jt.table_address not in table_index:
                table_index[jt.table_address] = len(self.tables)
                self.tables.append(_Table(f.name, jt, tuple(targets)))
        referenced: set[int] = set()
        live = self._flags_live_at_start(f, tables)
        # Blocks entered in their second instruction by a prefix block's whole instruction.
        mids: dict[int, int] = {}
        for b in f.blocks:
            if blocks[b.address][-1].overlaps:
                first = blocks[b.end][0]
                mids[b.end] = first.address + first.size

        order = [b.address for b in f.blocks]
        slot = self.slots[f.name]
        for pos, addr in enumerate(order):
            insns = blocks[addr]
            yield _item_label((f.name, addr))
            rest = insns
            if insns[0].mnemonic in ("endbr64", "endbr32"):
                # Keep the landing pad first, as an IBT-enforcing CPU expects it.
                yield _Item("raw", insns[0].size, raw=insns[0].raw, origin=addr)
                rest = insns[1:]
            block_id = slot.first_id + pos
            if self.trace:
                # The trace append's CMP/ADD write every status flag, CF included.
                flags_live = bool(live[addr] & ALL_FLAGS)
                yield _Item("trace", enc.trace_append_size(flags_live), block_id=block_id,
                            flags_live=flags_live, origin=addr)
            else:
                # INC leaves CF alone: only the other five status flags matter here.
                flags_live = bool(live[addr] & INC_CLOBBERS)
                if flags_live:
                    yield _Item("counter", enc.COUNTER_SAFE_SIZE, block_id=block_id,
                                flags_live=True, origin=addr)
                else:
                    yield _Item("counter", enc.COUNTER_FAST_SIZE, block_id=block_id,
                                flags_live=False, origin=addr)
            if flags_live:
                self.safe += 1
            else:
                self.fast += 1
            for insn in rest:
                if insn.overlaps:
                    yield from self._prefix_block_end(f, addr, insn)
                    break
                for item in self._instruction(f, insn, sites, tables, table_index,
                                              unresolved, referenced):
                    self._note_transfer(f, addr, insn, item)
                    yield item
                if mids.get(addr) == insn.address + insn.size:
                    yield _item_label((f.name, mids[addr], "mid"))
            last = insns[-1]
            if last.overlaps:
                continue
            falls = not (last.mnemonic in _STOPS or last.is_ret)
            end = last.address + last.size
            nxt = order[pos + 1] if pos + 1 < len(order) else None
            if falls and nxt != end:
                if last.is_call:
                    # A call that may not return (abort, exit): its fall-through may be
                    # padding or another function; never refuse, keep the original flow.
                    target = (("block", f.name, end) if end in blocks
                              else self._fallthrough_after_call(end))
                else:
                    target = self._jump_target(f, last, end)
                    if target[0] == "abs" and not f.successors(addr):
                        # The model says control never leaves this block (a SYSCALL the
                        # lifter takes for exit, say): trap if it does, a reported crash
                        # instead of original code running uncounted.
                        log.info("%s: block %#x has no successor; the copy traps (UD2) if "
                                 "%#x falls through", f.name, addr, last.address)
                        yield _Item("raw", len(enc.UD2), raw=enc.UD2, origin=last.address)
                        continue
                    if target[0] == "abs":
                        raise self._refuse(f, last, f"falls through to {end:#x}, which is not "
                                                    "a block of any relocated function")
                if target[0] == "block" and target[1] != f.name and not last.is_call:
                    self.transfers[(f.name, addr)] = ("other", target[1])
                yield _Item("jmp", enc.JMP_SIZE, target=target, origin=last.address)
        for jt in f.jump_tables:
            if jt.table_address not in referenced:
                raise RelocationError(
                    f"cannot relocate {f.name}: no RIP-relative instruction loads the "
                    f"address of the jump table at {jt.table_address:#x} used by "
                    f"{jt.instruction:#x}, so the copied table cannot be substituted")

    def _prefix_block_end(self, f: FunctionModel, addr: int, whole: _Insn) -> Iterable[_Item]:
        """The end of a prefix block (``lock`` alone, before ``1: cmpxchg``): the whole
        prefixed instruction runs here, then the next block's counter (its remaining
        instructions run, as the CFG's edge says), then a jump to the next block's
        second instruction.  Flags are live there (the instruction just set them): the
        flag-preserving counter sequence."""
        if whole.is_jump or whole.is_call or whole.is_ret:
            raise self._refuse(f, whole, "is a branch running past its block's end")
        if whole.rip_target is not None:
            yield _Item("riprel", whole.size, raw=whole.raw, disp_offset=whole.rip_disp_offset,
                        target=("abs", whole.rip_target), origin=whole.address)
        else:
            yield _Item("raw", whole.size, raw=whole.raw, origin=whole.address)
        nxt = whole.address + whole.size
        owner = self._owner(nxt - 1)
        assert owner is not None and owner[0] == f.name
        block_id = self.slots[f.name].first_id + self.slots[f.name].blocks.index(owner[1])
        if self.trace:
            yield _Item("trace", enc.trace_append_size(True), block_id=block_id,
                        flags_live=True, origin=addr)
        else:
            yield _Item("counter", enc.COUNTER_SAFE_SIZE, block_id=block_id, flags_live=True,
                        origin=addr)
        yield _Item("jmp", enc.JMP_SIZE, target=("block", f.name, nxt, "mid"), origin=addr)

    def _note_transfer(self, f: FunctionModel, block: int, insn: _Insn, item: _Item) -> None:
        t = item.target
        if item.kind not in ("call", "jmp", "jcc", "rel8") or t is None or t[0] != "block":
            return
        if t[1] == f.name and item.kind != "call":
            return                    # a jump inside the function: a CFG edge
        g = t[1]
        entry = t[2] == self.functions[g].entry
        if item.kind == "call" and entry:
            self.transfers[(f.name, block)] = ("call", g)
        elif item.kind == "jmp" and entry:
            self.transfers[(f.name, block)] = ("tail", g)
        else:
            self.transfers[(f.name, block)] = ("other", g)

    def _dispatch(self, f: FunctionModel, insn: _Insn, site) -> _Item | None:
        """An indirect call or tail call (through a register or memory): the copy records
        its target in a per-site table and goes to the copy of a relocated function where
        the target is one's entry (:func:`~wcetfit.count.x86enc.indirect_dispatch`)."""
        try:
            load, disp = enc.load_r11_from_branch(insn.raw)
        except enc.EncodingError as exc:
            # (a segment prefix, fs:[…]): the site keeps its original form; said, since
            # its targets are then neither recorded nor followed
            log.warning("%s: indirect call at %#x `%s` is not recorded (%s): its target runs "
                        "as original code, uncounted", f.name, insn.address, insn.text, exc)
            return None
        target = None
        if disp is not None:
            if insn.rip_target is None:
                raise self._refuse(f, insn, "has a RIP-relative operand capstone did not see")
            target = ("abs", insn.rip_target)
        index = len(self.indirect_sites)
        self.indirect_sites.append((f.name, site.block, insn.address, bool(site.tail)))
        n = len(self.guard_ranges())
        return _Item("dispatch", enc.indirect_dispatch_size(len(load), n), raw=load,
                     disp_offset=-1 if disp is None else disp, target=target,
                     block_id=index, cc=int(bool(site.tail)), origin=insn.address)

    def _fallthrough_after_call(self, end: int) -> Target:
        if end in self.by_entry:
            g = self.by_entry[end]
            return ("block", g, self.functions[g].entry)
        owner = self._owner(end)
        if owner is not None and owner[1] == end:
            return ("block",) + owner
        return ("abs", end)

    def _instruction(self, f: FunctionModel, insn: _Insn, sites, tables, table_index,
                     unresolved, referenced) -> Iterable[_Item]:
        m = insn.mnemonic
        if m == "jcxz" or (m in _NO_REL32 and m not in _REL8_ONLY):
            raise self._refuse(f, insn, "has no rel32 form and cannot be retargeted")
        if insn.address in unresolved and (insn.is_jump or insn.is_call):
            raise self._refuse(f, insn, "is an unresolved indirect jump")
        site = sites.get(insn.address)
        if (site is not None and site.kind == CALL_INDIRECT and insn.rel_target is None
                and (insn.is_call or (insn.is_jump and site.tail))
                and insn.address not in tables):
            item = self._dispatch(f, insn, site)
            if item is not None:
                yield item
                return
            # not recordable: handled as before (a call stays as it is, its target
            # uncounted; a tail call keeps its guard)
        if insn.rel_target is not None:
            if insn.is_call:
                yield _Item("call", enc.CALL_SIZE,
                            target=self._call_target(f, insn, site, insn.rel_target),
                            origin=insn.address)
            elif m == "jmp":
                yield _Item("jmp", enc.JMP_SIZE,
                            target=self._tail_or_jump(f, insn, site), origin=insn.address)
            elif m in _REL8_ONLY:
                # rel8 only: the instruction's last byte is its displacement (no
                # immediate follows it); the rest is kept byte for byte.
                yield _Item("rel8", enc.rel8_branch_size(insn.size - 1), raw=insn.raw[:-1],
                            target=self._tail_or_jump(f, insn, site), origin=insn.address)
            elif m in enc.JCC_CODES:
                yield _Item("jcc", enc.JCC_SIZE, cc=enc.JCC_CODES[m],
                            target=self._tail_or_jump(f, insn, site), origin=insn.address)
            else:
                raise self._refuse(f, insn, "is a relative branch we do not know how to "
                                            "retarget")
            return
        if insn.is_jump:                                     # indirect jmp
            if insn.address in tables:
                pass                                         # table copied; keep the jmp
            elif site is not None and site.tail:
                if (site.kind == CALL_INTERNAL and site.target in self.by_entry
                        and insn.rip_target is not None):
                    g = self.by_entry[site.target]
                    yield _Item("jmp", enc.JMP_SIZE,
                                target=("block", g, self.functions[g].entry),
                                origin=insn.address)
                    return
                if insn.jump_register is not None:
                    # An indirect tail call through a register: if the model were wrong
                    # and it jumped back into relocated code, the original code would run
                    # uncounted.  Guard: trap (a reported crash) if the target lies in
                    # the original of any relocated function.
                    n = len(self.guard_ranges())
                    yield _Item("guard", enc.range_guard_size(n),
                                raw=bytes((insn.jump_register,)), origin=insn.address)
                elif insn.rip_target is None:
                    # Through memory ([rax+0x60]: a vtable slot): load the target into
                    # R11, guard it like a register's, jump through R11.
                    try:
                        load = enc.load_r11_from_jump(insn.raw)
                    except enc.EncodingError as exc:
                        raise self._refuse(f, insn, f"is an indirect tail call through "
                                                    f"memory the copy cannot check ({exc})")
                    n = len(self.guard_ranges())
                    yield _Item("raw", len(load), raw=load, origin=insn.address)
                    yield _Item("guard", enc.range_guard_size(n), raw=bytes((enc.R11,)),
                                origin=insn.address)
                    yield _Item("raw", len(enc.JMP_R11), raw=enc.JMP_R11, origin=insn.address)
                    return
            else:
                raise self._refuse(f, insn, "is an indirect jump not known as a jump table")
        elif insn.is_call and site is not None and site.kind == CALL_INTERNAL \
                and site.target in self.by_entry and insn.rip_target is not None:
            # call [rip+GOT] resolving to one of our functions: call its copy directly.
            g = self.by_entry[site.target]
            yield _Item("call", enc.CALL_SIZE, target=("block", g, self.functions[g].entry),
                        origin=insn.address)
            return
        if insn.rip_target is not None:
            target: Target = ("abs", insn.rip_target)
            for jt in f.jump_tables:
                if insn.rip_target == jt.table_address:
                    target = ("table", table_index[jt.table_address])
                    referenced.add(jt.table_address)
            yield _Item("riprel", insn.size, raw=insn.raw, disp_offset=insn.rip_disp_offset,
                        target=target, origin=insn.address)
            return
        yield _Item("raw", insn.size, raw=insn.raw, origin=insn.address)
