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
* anything the copy cannot reproduce exactly — an unresolved indirect jump, an indirect
  jump not known as a jump table or tail call, a jump into the middle of a block or out
  of the relocated code where the model sees no tail call, LOOP/JRCXZ/XBEGIN (no rel32
  form) — raises :class:`~wcetfit.errors.RelocationError` naming the instruction.  The
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
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import capstone
from capstone import x86_const as X

from wcetfit.count import x86enc as enc
from wcetfit.errors import RelocationError
from wcetfit.model import CALL_INTERNAL, FunctionModel, JumpTable

log = logging.getLogger(__name__)

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


# --- plan items ---------------------------------------------------------------------------
# Targets are symbolic until emit():
#   ("abs", link_address)          original code/data (runtime = link + bias)
#   ("block", function, address)   a block's start in the copy
#   ("table", index)               a copied jump table
#   ("data", offset)               the data region (counters, trace state)

Target = tuple


@dataclass(frozen=True)
class _Item:
    kind: str            # label raw riprel jmp call jcc counter trace
    size: int
    raw: bytes = b""
    disp_offset: int = 0
    target: Target | None = None
    cc: int = 0
    block_id: int = 0
    flags_live: bool = True
    origin: int = 0      # original instruction address (for messages)


def _item_label(key: tuple) -> _Item:
    return _Item("label", 0, target=key)


@dataclass(frozen=True)
class _Table:
    function: str
    table: JumpTable
    targets: tuple[Target, ...]


@dataclass(frozen=True)
class CounterSlot:
    """Where one function's block counters live: ``ids[i]`` for ``blocks[i]``."""

    function: str
    blocks: tuple[int, ...]        # block addresses, FunctionModel.blocks order
    first_id: int                  # global compact id of blocks[0]; ids are consecutive


# Data region layout: counters (int64 per block, by global id), then the trace state.
TRACE_STATE_QWORDS = 3             # write pointer, end pointer, overflow count


@dataclass(frozen=True)
class CopyPlan:
    """A relocation plan: everything but the final addresses.

    ``code_size`` bytes of code (then the copied jump tables) and ``data_size`` bytes of
    data must be allocated within ±2 GiB of the binary before :meth:`emit`.
    """

    functions: tuple[str, ...]
    slots: Mapping[str, CounterSlot]
    n_blocks: int
    code_size: int                 # including jump tables
    data_size: int
    trace: bool
    entry_offsets: Mapping[str, int]             # function → offset of its entry in code
    block_offsets: Mapping[tuple, int]  # (function, block address) → offset; also
    # (function, address, "mid") for a block's second instruction entered from a prefix block
    fast_counters: int             # blocks counted with a single INC (flags dead)
    safe_counters: int             # blocks counted with the flag-preserving sequence
    original_bytes: int            # size of the original code relocated
    # (function, block) → (kind, callee) for blocks leaving their function into relocated
    # code: "call" (block ends with a call), "tail" (ends with an unconditional jump to an
    # entry), "other" (a conditional jump to an entry, or a jump to a non-entry block).
    transfers: Mapping[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    _items: tuple[tuple[_Item, ...], ...] = field(repr=False, default=())
    _tables: tuple[_Table, ...] = field(repr=False, default=())
    _table_offsets: tuple[int, ...] = field(repr=False, default=())
    _consts: tuple[int, ...] = field(repr=False, default=())   # link-time addresses
    _consts_offset: int = field(repr=False, default=0)

    @property
    def counters_offset(self) -> int:
        return 0

    @property
    def trace_state_offset(self) -> int:
        return 8 * self.n_blocks

    def block_id(self, function: str, address: int) -> int:
        slot = self.slots[function]
        return slot.first_id + slot.blocks.index(address)

    def id_names(self) -> list[tuple[str, int]]:
        """(function, block address) for every compact id, in id order."""
        out: list[tuple[str, int]] = []
        for name in self.functions:
            out.extend((name, a) for a in self.slots[name].blocks)
        return out

    def emit(self, bias: int, code_address: int, data_address: int) -> bytes:
        """The copy's bytes for code placed at ``code_address`` (runtime addresses)."""
        labels: dict[Target, int] = {}
        for key, off in self.block_offsets.items():
            labels[("block",) + key] = code_address + off

        def resolve(t: Target) -> int:
            kind = t[0]
            if kind == "abs":
                return t[1] + bias
            if kind == "block":
                return labels[t]
            if kind == "table":
                return code_address + self._table_offsets[t[1]]
            if kind == "data":
                return data_address + t[1]
            raise AssertionError(t)

        out = bytearray()
        for items in self._items:
            for it in items:
                at = code_address + len(out)
                try:
                    if it.kind == "guard":
                        base = code_address + self._consts_offset
                        pairs = [(base + 16 * k, base + 16 * k + 8)
                                 for k in range(len(self._consts) // 2)]
                        out += enc.range_guard(it.raw[0], at, pairs)
                        out += it.raw[1:]
                        continue
                    out += _encode(it, at, resolve, data_address, self.trace_state_offset)
                except enc.EncodingError as exc:
                    raise RelocationError(f"cannot place the copy of the instruction at "
                                          f"{it.origin:#x}: {exc}") from None
        assert len(out) <= self._table_offsets[0] if self._tables else True
        for tab, off in zip(self._tables, self._table_offsets):
            out += b"\xcc" * (off - len(out))
            table_at = code_address + off
            for t in tab.targets:
                dest = resolve(t)
                if tab.table.entry_size == 4:
                    out += struct.pack("<i", dest - table_at)
                else:
                    out += struct.pack("<Q", dest)
        if self._consts:
            out += b"\xcc" * (self._consts_offset - len(out))
            for a in self._consts:
                out += struct.pack("<Q", a + bias)
        out += b"\xcc" * (self.code_size - len(out))
        assert len(out) == self.code_size
        return bytes(out)


def _encode(it: _Item, at: int, resolve: Callable[[Target], int], data_address: int,
            trace_state: int) -> bytes:
    k = it.kind
    if k == "label":
        return b""
    if k == "raw":
        return it.raw
    if k == "riprel":
        disp = enc.rel32(at, it.size, resolve(it.target))
        return it.raw[:it.disp_offset] + disp + it.raw[it.disp_offset + 4:]
    if k == "jmp":
        return enc.jmp_rel32(at, resolve(it.target))
    if k == "call":
        return enc.call_rel32(at, resolve(it.target))
    if k == "jcc":
        return enc.jcc_rel32(it.cc, at, resolve(it.target))
    if k == "rel8":
        return enc.rel8_branch(it.raw, at, resolve(it.target))
    counter = data_address + 8 * it.block_id
    if k == "counter":
        return (enc.counter_safe(at, counter) if it.flags_live
                else enc.counter_fast(at, counter))
    if k == "trace":
        return enc.trace_append(at, it.block_id, counter, data_address + trace_state,
                                save_flags=it.flags_live)
    raise AssertionError(k)


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


def relocatable_closure(functions: Mapping[str, FunctionModel], roots: Sequence[str],
                        read: Callable[[int, int], bytes], *, trace: bool = False,
                        uncounted: Iterable[str] = ()
                        ) -> tuple[list[FunctionModel], dict[str, str]]:
    """:func:`closure` less the callees whose copy cannot be made (each with the reason).

    Such a callee runs as original code: its time stays in the calling block, as an
    imported call's does, and it is not counted.  A root that cannot be copied raises.
    The result depends only on the model and the code bytes, so the parent process (for
    the counts' layout) and the worker (for the copy) agree."""
    skipped: dict[str, str] = {}
    asked = list(uncounted)
    while True:
        fns = closure(functions, roots, asked + list(skipped))
        try:
            plan_copy(fns, read, trace=trace)
            return fns, skipped
        except RelocationError as exc:
            failed = getattr(exc, "failures", None)
            if not failed:
                raise
            for n in failed:
                if n in roots or n in skipped:
                    raise RelocationError(failed[n]) from None
            skipped.update(failed)


def plan_copy(functions: Sequence[FunctionModel], read: Callable[[int, int], bytes], *,
              trace: bool = False) -> CopyPlan:
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
    code_size = (pos + 15) & ~15
    data_size = 8 * n_blocks + 8 * TRACE_STATE_QWORDS
    entry_offsets = {f.name: block_offsets[(f.name, f.entry)] for f in functions}
    return CopyPlan(
        functions=tuple(names), slots=slots, n_blocks=n_blocks, code_size=code_size,
        data_size=data_size, trace=trace, entry_offsets=entry_offsets,
        block_offsets=block_offsets, fast_counters=planner.fast, safe_counters=planner.safe,
        original_bytes=sum(b.size for f in functions for b in f.blocks),
        transfers=dict(planner.transfers),
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

    def guard_ranges(self) -> list[tuple[int, int]]:
        """[lo, hi) link-time hull of every relocated function's blocks."""
        if self._guard_ranges is None:
            hulls = []
            for f in self.functions.values():
                hulls.append((min(b.address for b in f.blocks), max(b.end for b in f.blocks)))
            hulls.sort()
            merged: list[list[int]] = []
            for lo, hi in hulls:
                if merged and lo <= merged[-1][1]:
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
                    raise self._refuse(f, insn, "is an indirect tail call through memory "
                                                "that the copy cannot check")
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


def closure(functions: Mapping[str, FunctionModel], roots: Sequence[str],
            uncounted: Iterable[str] = ()) -> list[FunctionModel]:
    """``roots`` and every function of ``functions`` they reach by internal calls.

    The order is deterministic (roots first, then callees in discovery order), so compact
    block ids are stable for a given model.  A callee missing from ``functions``, or named
    in ``uncounted`` (e.g. one the copy cannot relocate: the user's explicit choice), is
    left out: calls to it go to the original code, which runs uncounted and returns
    into the copy as any callee does.
    """
    skip = set(uncounted)
    by_entry: dict[int, str] = {}
    for f in functions.values():
        by_entry.setdefault(f.entry, f.name)
        by_entry.setdefault(f.address, f.name)
    out: list[str] = []
    todo = list(roots)
    for r in roots:
        if r not in functions:
            raise RelocationError(f"no static model for function {r}")
    while todo:
        name = todo.pop(0)
        if name in out:
            continue
        out.append(name)
        for c in functions[name].calls:
            if c.kind != CALL_INTERNAL:
                continue
            callee = by_entry.get(c.target) if c.target is not None else None
            if callee is None and c.target_name in functions:
                callee = c.target_name
            if callee is None:
                log.warning("%s calls %s (%s) which has no static model: it runs uncounted",
                            name, c.target_name, c.target)
                continue
            if callee in skip and callee not in roots:
                log.info("%s calls %s, left uncounted as asked", name, callee)
                continue
            if callee not in out:
                todo.append(callee)
    return [functions[n] for n in out]
