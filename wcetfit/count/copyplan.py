"""The relocation plan as data: the items of the copy (symbolic until addresses are
known), the counter slots, and :class:`CopyPlan`, which lays them out and emits the bytes.
Made by :func:`wcetfit.count.relocate.plan_copy`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Mapping

from wcetfit.count import x86enc as enc
from wcetfit.errors import RelocationError
from wcetfit.model import JumpTable

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
    # Indirect call / tail-call sites whose target the copy records and translates
    # (x86enc.indirect_dispatch), in site-table order: (function, block, instruction, tail).
    indirect_sites: tuple[tuple[str, int, int, bool], ...] = ()
    sites_offset: int = 0          # data-region offset of the first site's target table
    # Original entry (link-time) -> the copy's entry label, for the dispatch's lookup.
    _xtab: tuple[tuple[int, tuple], ...] = field(repr=False, default=())
    _xtab_offset: int = field(repr=False, default=0)
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

        base = code_address + self._consts_offset
        pairs = [(base + 16 * k, base + 16 * k + 8) for k in range(len(self._consts) // 2)]
        out = bytearray()
        for items in self._items:
            for it in items:
                at = code_address + len(out)
                try:
                    if it.kind == "dispatch":
                        table = (data_address + self.sites_offset
                                 + it.block_id * enc.DISPATCH_TABLE_BYTES)
                        rip = resolve(it.target) if it.target is not None else None
                        out += enc.indirect_dispatch(
                            it.raw, it.disp_offset if it.disp_offset >= 0 else None, rip, at,
                            table, code_address + self._xtab_offset, pairs, bool(it.cc))
                        continue
                    if it.kind == "guard":
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
        if self.indirect_sites:
            out += b"\xcc" * (self._xtab_offset - len(out))
            for link, label in self._xtab:
                out += struct.pack("<QQ", link + bias, resolve(label))
            out += bytes(8)
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
