"""angr -> plain data: the static model of a binary's functions.

The only module that imports angr (lazily: looking models up in the cache never pays the
1.3 s import).  Public API:

* :func:`load_model` (path, functions=None, *, with_callees=True) -> BinaryModel
* :func:`list_functions` (path) -> list[FunctionSummary]
* :func:`binary_info` (path) -> BinaryInfo

How a model is made
-------------------
1. :mod:`wcetfit.static.elfinfo` validates the file and reads symbols, PLT/GOT bindings and the
   ``.eh_frame`` function starts (pyelftools, no angr).
2. angr's CFGFast recovers the global control-flow graph, started from the function
   entries we know (:data:`CFG_OPTIONS` says which options and why).  A single function is
   recovered by starting CFGFast at that function alone: it follows calls, so it recovers
   exactly the function and its callees, never the whole binary.
3. The graph is copied into plain dicts (:class:`RawCFG`), addresses converted back to
   link-time ones (angr maps a shared object at 0x400000; we subtract
   ``mapped_base - linked_base``).
4. Each function is cut out of the global graph by us, not taken from angr's Function
   objects (whose boundaries depend on the order angr happened to meet the code): its
   blocks are everything reachable from its entry through intraprocedural edges, a branch
   to another function's entry being a tail call.  Function entries are the symbols
   (minus gcc's ``.cold`` fragments), the ``.eh_frame`` starts (minus fragments, see
   :mod:`wcetfit.static.elfinfo`) and every direct call target.
5. Instructions are decoded from the file's bytes with capstone; calls and tail calls are
   classified from the decoded instruction (direct target, PLT stub, GOT slot, or
   register/memory).  Jump tables come from angr's resolvers, plus one of ours for gcc's
   bounded-switch shapes that angr misses, and relative tables are re-read from the file.
   angr's verdict that a callee never returns removes the fall-through after the call
   (angr itself prunes it only from its per-function graphs, not from the global one).
6. :mod:`wcetfit.static.structure` adds loops, co-execution classes and the rank bound.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from wcetfit.static import elfinfo
from wcetfit.static.cfgcache import CfgCache
from wcetfit.static.elfinfo import ElfInfo, FuncSymbol, GotSlot
from wcetfit.errors import BinaryError, FunctionNotFound
from wcetfit.model import (CALL_IMPORTED, CALL_INDIRECT, CALL_INTERNAL, BinaryInfo, BinaryModel,
                           Block, CallSite, FunctionModel, FunctionSummary, Instruction, JumpTable,
                           hexaddr)

log = logging.getLogger(__name__)

# Bump when the way models are derived changes: cached models of older formats are not used.
MODEL_FORMAT = 3

# CFGFast options, chosen deliberately (a default CFGFast of libm takes ~40 s, this ~10 s):
CFG_OPTIONS = dict(
    normalize=True,                 # no overlapping blocks: a block is entered only at its start
    symbols=False,                  # we pass the symbol starts ourselves, minus .cold fragments
    eh_frame=False,                 # likewise the .eh_frame starts (angr only uses those not yet
                                    #   covered by other code, so some are lost otherwise)
    function_prologues=False,       # no guessing by byte patterns: symbols and FDEs are exact
    force_smart_scan=False,         # no scanning of the gaps between functions: in libm that makes
    force_complete_scan=False,      #   4,690 pseudo-functions out of nop padding and doubles the time
    start_at_entry=False,           # only the functions asked for (an executable's _start is a
                                    #   symbol/FDE anyway when the whole binary is recovered)
    data_references=False,          # data references and xrefs are not used by the model
    cross_references=False,
    resolve_indirect_jumps=True,    # jump tables are part of the model (cheap: ~0.7 s on libm)
    detect_tail_calls=False,        # tail calls are decided by us from the function entries
    # angr picks these two by the binary's size (above or below 50 kB); fixed, so models do
    # not change character with the size of the binary:
    indirect_calls_always_return=True,          # as the model treats them
    jumptable_resolver_resolves_calls=False,    # indirect calls are classified by us
)
# angr's knowledge base spills functions and CFG nodes to LMDB beyond ~1000 of each, which
# makes CFGFast on libm twice as slow; a model is never that big, so keep all in memory.
_CACHE_LIMITS = {"functions": None, "cfg_nodes": None, "cfg_edges": None}


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("angr", "capstone"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "?"
    return out


def cache_options() -> dict:
    return {"model_format": MODEL_FORMAT, "cfg": CFG_OPTIONS, **_versions()}


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


def _quiet_angr_import_noise() -> None:
    # angr logs at ERROR level things that are not errors for us: the optional unicorn
    # engine is absent, and its constant propagation does not model x87 helpers.  Leave
    # them alone if someone configured these loggers explicitly.
    for name in ("angr.state_plugins.unicorn_engine", "angr.analyses.fcp.fcp"):
        lg = logging.getLogger(name)
        if lg.level == logging.NOTSET:
            lg.setLevel(logging.CRITICAL)


# --- jump tables angr's resolver misses -------------------------------------------------------

_REG32 = {f"r{x}x": f"e{x}x" for x in "abcd"} | {"rsi": "esi", "rdi": "edi", "rbp": "ebp",
                                                  "rsp": "esp"} | {f"r{i}": f"r{i}d" for i in range(8, 16)}
_TABLE_ABS = re.compile(r"^qword ptr \[(\w+)\*8 \+ (0x[0-9a-f]+)\]$")
_TABLE_REL = re.compile(r"^(\w+), dword ptr \[(\w+) \+ (\w+)\*4\]$")
_MAX_TABLE = 4096


def _writes(op_str: str, mnemonic: str, reg: str) -> bool:
    """Does an instruction (probably) write ``reg`` (any width)?"""
    if mnemonic in ("cmp", "test", "push", "nop") or mnemonic.startswith("j"):
        return False
    dest = op_str.split(",", 1)[0].strip()
    return dest in (reg, _REG32.get(reg, reg))


def _bound_from(insns: list[tuple[int, int, str, str]], reg: str, branch: str = "ja") -> int | None:
    """Scanning ``insns`` backwards: the n of a ``cmp reg, n-1`` followed by ``branch``
    (the conditional jump that leaves when reg > n-1) guarding ``reg`` (32- or 64-bit),
    across ``mov e_reg, e_reg`` zero extensions; None if ``reg`` is written first or no
    guard is found."""
    names = (reg, _REG32.get(reg, reg))
    for i in range(len(insns) - 1, -1, -1):
        _, _, mnem, ops = insns[i]
        if mnem == "cmp":
            parts = [p.strip() for p in ops.split(",")]
            if len(parts) == 2 and parts[0] in names and re.fullmatch(r"0x[0-9a-f]+|\d+", parts[1]):
                nxt = insns[i + 1][2] if i + 1 < len(insns) else None
                if nxt == branch:
                    n = int(parts[1], 0) + 1
                    return n if 0 < n <= _MAX_TABLE else None
            continue
        if mnem == "mov" and ops == f"{names[1]}, {names[1]}":
            continue
        if _writes(ops, mnem, reg):
            return None
    return None


def _gcc_table_resolver(project, obj):
    """An angr indirect-jump resolver, tried after angr's own, for the two jump-table
    shapes gcc emits for a dense switch with a bounds check:

    * non-PIC: ``cmp idx, n-1; ja default; ... jmp [idx*8 + TABLE]`` (absolute entries);
    * PIC: ``cmp idx, n-1; ja default; lea base, [rip + TABLE]; movsxd t, [base + idx*4];
      add t, base; jmp t`` (entries relative to the table).

    angr's resolver misses some of them (a libm-style index computed in 32 bits, seen on
    gcc 12 -O2).  The guard is searched in the jump's block and its predecessors; without
    one the jump stays unresolved (a table without a bound cannot be read safely).
    """
    import capstone
    from angr.analyses.cfg.indirect_jump_resolvers.resolver import IndirectJumpResolver

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)

    def decode(addr: int, size: int) -> list[tuple[int, int, str, str]]:
        try:
            code = project.loader.memory.load(addr, size)
        except Exception:  # noqa: BLE001 -- unmapped: nothing to decode
            return []
        return list(md.disasm_lite(code, addr))

    class GccJumpTable(IndirectJumpResolver):
        def __init__(self):
            super().__init__(project, timeless=False)   # run once the CFG around it is known

        def filter(self, cfg, addr, func_addr, block, jumpkind):
            return jumpkind == "Ijk_Boring"

        @staticmethod
        def _only_lea(cfg, func_addr, reg):
            try:
                func = cfg.kb.functions.get_by_addr(func_addr)
            except KeyError:
                return None
            defs = []
            for baddr in sorted(func.block_addrs_set):
                node = cfg.model.get_any_node(baddr)
                if node is None:
                    return None
                for ins in decode(baddr, node.size):
                    if _writes(ins[3], ins[2], reg):
                        defs.append(ins)
            if len(defs) == 1 and defs[0][2] == "lea" and defs[0][3].startswith(f"{reg}, [rip"):
                return defs[0]
            return None

        def resolve(self, cfg, addr, func_addr, block, jumpkind, func_graph_complete=True, **kwargs):
            insns = decode(addr, block.size)
            if not insns or not insns[-1][2].endswith("jmp"):
                return False, []
            last = insns[-1]
            m = _TABLE_ABS.match(last[3])
            if m:
                idx, table, esize, base = m.group(1), int(m.group(2), 16), 8, None
                guard_scan = insns[:-1]
            else:
                target_reg = last[3]
                load = next((i for i in range(len(insns) - 2, -1, -1)
                             if insns[i][2] == "movsxd" and _TABLE_REL.match(insns[i][3])
                             and _TABLE_REL.match(insns[i][3]).group(1) == target_reg), None)
                if load is None:
                    return False, []
                _, base_reg, idx = _TABLE_REL.match(insns[load][3]).groups()
                lea = next((insns[i] for i in range(load - 1, -1, -1)
                            if insns[i][2] == "lea" and insns[i][3].startswith(f"{base_reg}, [rip")), None)
                adds = [i for i in insns[load + 1:-1] if i[2] == "add"
                        and i[3] in (f"{target_reg}, {base_reg}", f"{base_reg}, {target_reg}")]
                if not adds:
                    return False, []
                if lea is None:
                    # gcc hoists the lea of the table out of loops: accept it when it is the
                    # only instruction of the function that writes the base register.
                    lea = self._only_lea(cfg, func_addr, base_reg)
                    if lea is None:
                        return False, []
                table = elfinfo.rip_target(lea[0], lea[1], lea[3].split(", ", 1)[1])
                if table is None:
                    return False, []
                esize, base = 4, table
                guard_scan = insns[:load]
            n = _bound_from(guard_scan, idx)            # "cmp; ja default" inside the block
            if n is None:
                # ... or at the end of every predecessor: "ja default" falling through to
                # the jump's block, or "jbe <the jump's block>".
                node = cfg.model.get_any_node(addr)
                preds = cfg.model.get_predecessors(node) if node is not None else []
                bounds = []
                for p in preds:
                    code = decode(p.addr, p.size)
                    if not code:
                        return False, []
                    a, size, mnem, ops = code[-1]
                    if mnem == "ja" and a + size == addr:
                        bounds.append(_bound_from(code, idx, "ja"))
                    elif mnem == "jbe" and ops == hex(addr):
                        bounds.append(_bound_from(code, idx, "jbe"))
                    else:
                        bounds.append(None)
                if not bounds or None in bounds:
                    return False, []
                n = max(bounds)   # type: ignore[type-var]
            try:
                raw = project.loader.memory.load(table, n * esize)
            except Exception:  # noqa: BLE001 -- table outside mapped memory
                return False, []
            if esize == 8:
                targets = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
            else:
                targets = [base + int.from_bytes(raw[i:i + 4], "little", signed=True)   # type: ignore[operator]
                           for i in range(0, len(raw), 4)]
            if not all(self._is_target_valid(cfg, t) and obj.contains_addr(t) for t in targets):
                return False, []
            ij = cfg.indirect_jumps.get(addr)
            if ij is not None:
                ij.jumptable = True
                ij.add_jumptable(table, n * esize, esize, targets, is_primary=True)
            return True, targets

    return GccJumpTable()


def recover_raw(path: str, starts: Iterable[int]) -> RawCFG:
    """Run CFGFast from ``starts`` (link-time addresses) and copy the graph out."""
    t0 = time.perf_counter()
    _quiet_angr_import_noise()
    import angr
    import cle

    t1 = time.perf_counter()

    try:
        loader = cle.Loader(path, auto_load_libs=False, load_debug_info=False)
    except Exception as exc:  # noqa: BLE001 -- cle raises many kinds; all mean "cannot load"
        raise BinaryError(f"{path}: angr cannot load it: {exc}") from None
    obj = loader.main_object
    # IFUNC resolvers would be run symbolically at load (0.8 s on libm); we classify calls
    # through IRELATIVE slots as indirect anyway, so skip it.
    if isinstance(getattr(obj, "irelatives", None), list):
        obj.irelatives.clear()
    project = angr.Project(loader, cache_limits=dict(_CACHE_LIMITS))
    delta = obj.mapped_base - obj.linked_base
    starts = sorted(set(starts))
    log.info("CFGFast of %s from %d function start(s)", path, len(starts))
    t2 = time.perf_counter()
    from angr.analyses.cfg.indirect_jump_resolvers.default_resolvers import (
        default_indirect_jump_resolvers)

    resolvers = default_indirect_jump_resolvers(obj, project) + [_gcc_table_resolver(project, obj)]
    try:
        cfg = project.analyses.CFGFast(function_starts=[a + delta for a in starts],
                                       indirect_jump_resolvers=resolvers, **CFG_OPTIONS)
    except Exception as exc:  # noqa: BLE001 -- an angr failure is one line for the user
        log.debug("CFGFast failed", exc_info=True)
        raise BinaryError(f"{path}: angr's CFG recovery failed: {type(exc).__name__}: {exc}") from exc
    t3 = time.perf_counter()
    log.info("angr import %.2f s, load %.2f s, CFGFast %.2f s", t1 - t0, t2 - t1, t3 - t2)

    lo, hi = obj.min_addr, obj.max_addr

    def inside(a: int) -> bool:
        return lo <= a <= hi

    blocks: dict[int, int] = {}
    edges: dict[int, list[tuple[int | None, str]]] = {}
    graph = cfg.model.graph
    for node in graph.nodes():
        if not inside(node.addr) or not node.size:
            continue
        src = node.addr - delta
        blocks[src] = max(blocks.get(src, 0), node.size)
        out = edges.setdefault(src, [])
        for _, dst, data in graph.out_edges(node, data=True):
            d = dst.addr - delta if inside(dst.addr) else None
            out.append((d, data.get("jumpkind") or "Ijk_Boring"))
    indirect: dict[int, IndirectJumpInfo] = {}
    for ij in cfg.indirect_jumps.values():
        if not inside(ij.ins_addr):
            continue
        tables = tuple((None if jt.addr is None else jt.addr - delta, jt.size, jt.entry_size,
                        tuple(e - delta for e in jt.entries)) for jt in ij.jumptables)
        indirect[ij.ins_addr - delta] = IndirectJumpInfo(
            tuple(sorted(t - delta for t in ij.resolved_targets if inside(t))), tables)
    # angr decides which functions never return (exit, abort, a function that only calls
    # them...) but leaves the fall-through edge after calls to them in the global graph
    # (it only prunes its per-function graphs): keep its verdicts to prune them ourselves.
    noreturn, noreturn_names = set(), set()
    for func in cfg.kb.functions.values():
        if func.returning is False:
            if inside(func.addr):
                noreturn.add(func.addr - delta)
            elif func.name:
                noreturn_names.add(func.name)
    return RawCFG(blocks, {k: tuple(dict.fromkeys(v)) for k, v in edges.items()}, indirect,
                  frozenset(noreturn), frozenset(noreturn_names))


# --- names ------------------------------------------------------------------------------

def _leading_underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


class SymbolIndex:
    """Function names <-> entry addresses, from .symtab and .dynsym.

    Several names often share an address (``sin``, ``__sin``, ``sinf64``...).  The
    canonical name prefers a default-version exported name, then fewer leading
    underscores, then the shorter one.  Every alias still finds the function.  A name
    defined at several addresses (two static ``helper``s) gets ``@0x<addr>`` appended.
    """

    def __init__(self, elf: ElfInfo):
        self.elf = elf
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

    def name_of(self, addr: int) -> str:
        return self.canonical.get(addr) or f"sub_{addr:x}"

    def names_at(self, addr: int) -> list[str]:
        """Every name that finds the function at ``addr`` (canonical first)."""
        out = [self.name_of(addr)]
        out += sorted(n for n, a in self.aliases.items() if addr in a and len(a) == 1 and n != out[0])
        return out

    def resolve(self, spec: str | int) -> int:
        """Entry address of a function given by name, alias, ``0x...`` or ``sub_<hex>``."""
        elf = self.elf
        if isinstance(spec, int):
            return self._check_address(spec, hexaddr(spec))
        text = spec.strip()
        m = re.fullmatch(r"(?:0x|sub_)([0-9a-fA-F]+)", text)
        if m:
            return self._check_address(int(m.group(1), 16), text)
        name = text.split("@@", 1)[0]           # nm prints the default version as name@@VER
        addrs = self.aliases.get(name)
        if addrs is None and self.elf.stripped and name.startswith("sub_"):
            addrs = None
        if not addrs:
            close = difflib.get_close_matches(name, list(self.aliases), n=4, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            if not close and elf.stripped:
                hint = "; the binary is stripped: name functions by address (0x...)"
            elif not close:
                hint = f" (it has {len(self.canonical)} named functions; `wcetfit cfg {elf.path}` lists them)"
            raise FunctionNotFound(f"{elf.path}: no function named {name!r}{hint}")
        if len(addrs) > 1:
            choices = ", ".join(f"{self.name_of(a)} at {hexaddr(a)}" for a in sorted(addrs))
            raise FunctionNotFound(f"{elf.path}: {name!r} names several functions ({choices}); "
                                   f"give an address")
        return next(iter(addrs))

    def _check_address(self, addr: int, text: str) -> int:
        elf = self.elf
        if elf.in_plt(addr):
            raise FunctionNotFound(f"{elf.path}: {text} is a PLT stub, not a function of this binary")
        if not elf.in_exec(addr):
            raise FunctionNotFound(f"{elf.path}: {text} is not in an executable section")
        return addr


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


class _Builder:
    def __init__(self, path: str, elf: ElfInfo, index: SymbolIndex, raw: RawCFG):
        import capstone

        self.path, self.elf, self.index, self.raw = path, elf, index, raw
        with open(path, "rb") as f:
            self.data = f.read()
        self.md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self.entries = self._entries()
        self.facts: dict[int, _BlockFacts] = {}
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
        if slot.name is None:                       # IRELATIVE: a local IFUNC, chosen at load
            res = slot.irelative_resolver
            return CALL_INDIRECT, stub, (self.index.name_of(res) if res is not None else None)
        sym = self.exported.get(slot.name)
        if sym is not None and not sym.ifunc:
            return CALL_INTERNAL, sym.address, self.index.name_of(sym.address)
        if sym is not None:                         # exported IFUNC: target known only at load
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
        self.facts[addr] = bf
        if not insns:
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
            # Indirect jump: a jump table, targets angr resolved otherwise, or unknown.
            info = self.raw.indirect.get(last.address)
            targets = {d for d, k in outs if ours(d) and k == "Ijk_Boring"}
            if info is not None:
                targets |= {t for t in info.resolved if ours(t)}
                bf.jump_table = self._jump_table(addr, last, info)
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
            if not bf.insns:
                exits.add(b)
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
                msg = (f"{name}: unresolved indirect jump at {hexaddr(last.address)} "
                       f"(block {hexaddr(b)}): its targets are not in the model")
                warnings.append(msg)
            if not bf.succ and not bf.returns and not bf.tail_out and bf.call is None \
                    and not bf.unresolved:
                exits.add(b)                # hlt, ud2, or code angr could not follow
            for dst, how in bf.succ:
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
        model = FunctionModel(
            name=name, address=entry,
            blocks=tuple(Block(a, self.raw.blocks[a], self.block(a).insns) for a in blocks),
            edges=tuple(edges), entry=entry, exits=exit_t, loops=st.loops,
            calls=tuple(sorted(calls, key=lambda c: (c.instruction, c.tail, c.target or 0))),
            jump_tables=tuple(tables), coexec_classes=st.coexec_classes, max_rank=st.max_rank,
            unresolved_jumps=tuple(sorted(unresolved)), warnings=tuple(dict.fromkeys(warnings)))
        callees = {c.target for c in calls if c.kind == CALL_INTERNAL and c.target is not None}
        return model, callees


# --- public API ---------------------------------------------------------------------------

def _info(elf: ElfInfo) -> BinaryInfo:
    return BinaryInfo(path=elf.path, sha256=elf.sha256, kind=elf.kind, stripped=elf.stripped,
                      extra={"df_1_pie": elf.df_1_pie, "entry": hexaddr(elf.entry)})


def binary_info(path: str) -> BinaryInfo:
    return _info(elfinfo.read_elf(path, with_fdes=False))


def _with_fdes(elf: ElfInfo) -> ElfInfo:
    return elf if elf.fdes else elfinfo.read_elf(elf.path, with_fdes=True)


def _cache(use_cache: bool | CfgCache) -> CfgCache:
    if isinstance(use_cache, CfgCache):
        return use_cache
    return CfgCache(enabled=None if use_cache else False)


# Whole-binary recovery runs in this many processes (CFGFast is single-threaded and takes
# ~13 s of CPU on libm): $WCETFIT_JOBS, else up to 2, and only for binaries with at least
# _PARALLEL_MIN_STARTS function starts (below that, starting a process and importing
# angr again costs more than it saves).
_PARALLEL_MIN_STARTS = 300


def _jobs(n_starts: int) -> int:
    env = os.environ.get("WCETFIT_JOBS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise BinaryError(f"WCETFIT_JOBS={env!r}: expected a number of processes") from None
    if n_starts < _PARALLEL_MIN_STARTS:
        return 1
    return max(1, min(2, os.cpu_count() or 1))


def _split(starts: list[int], parts: int) -> list[list[int]]:
    """Contiguous groups of similar code size (a start's size: the gap to the next one).
    Contiguous, because functions mostly call their neighbours: each process then
    re-explores few callees of the other groups."""
    starts = sorted(starts)
    sizes = [b - a for a, b in zip(starts, starts[1:])] + [64]
    total = sum(sizes)
    groups: list[list[int]] = [[] for _ in range(parts)]
    acc = 0
    for a, s in zip(starts, sizes):
        k = min(parts - 1, acc * parts // max(total, 1))
        groups[k].append(a)
        acc += s
    return [g for g in groups if g]


def summary_of(fn: FunctionModel) -> FunctionSummary:
    return FunctionSummary(fn.name, fn.address, len(fn.blocks), len(fn.loops), len(fn.calls))


def _run_workers(arglists: list[tuple]) -> list:
    """Run :func:`_whole_worker` once per argument tuple, each in a fresh interpreter.

    Plain subprocesses rather than multiprocessing: its "spawn" start method re-imports
    the caller's main script (a script without an ``if __name__ == "__main__"`` guard
    would run again), and "fork" is unsafe under threads.  Arguments and results travel
    pickled over the pipes; the workers' log records go to our stderr.
    """
    import pickle
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import wcetfit

    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(wcetfit.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    code = "import wcetfit.static.binary as b; b._worker_stdio()"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env) for _ in arglists]

    def talk(i: int):
        out, _ = procs[i].communicate(pickle.dumps(arglists[i], protocol=pickle.HIGHEST_PROTOCOL))
        if procs[i].returncode != 0:
            raise BinaryError(f"{arglists[i][0]}: a CFG recovery process failed "
                              f"(exit status {procs[i].returncode}; its messages are above)")
        status, payload = pickle.loads(out)
        if status == "error":
            raise payload
        return payload

    try:
        with ThreadPoolExecutor(len(procs)) as ex:
            return list(ex.map(talk, range(len(procs))))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _worker_stdio() -> None:
    """Child side of :func:`_run_workers`: pickled args on stdin, pickled result on stdout."""
    import pickle
    import sys

    # The result travels on our stdout: keep a private copy of that descriptor and send
    # anything else written to fd 1 (by Python or native code) to stderr instead.
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    args = pickle.loads(sys.stdin.buffer.read())
    try:
        result = ("ok", _whole_worker(*args))
    except BinaryError as exc:          # typed errors travel back to be raised in the parent
        result = ("error", exc)
    except Exception as exc:  # noqa: BLE001 -- a bug: one line for the user, details at -vv
        log.debug("CFG recovery process failed", exc_info=True)
        result = ("error", BinaryError(f"{args[0]}: CFG recovery failed: {type(exc).__name__}: {exc}"))
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


def _whole_worker(path: str, starts: list[int], levels: dict[str, int], cache_root: str | None,
                  cdir: str, return_models: bool):
    """Process entry: models of the functions of one group (and of the call targets known
    neither from symbols nor from .eh_frame that its code reaches).  Writes them to the
    cache itself; returns summaries, warnings and, if asked, the encoded models (plain
    lists and dicts pickle several times faster than the dataclasses)."""
    # A spawned process starts with no logging set up: mirror the parent's levels, and
    # print our own records the way the command line does.
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    own = logging.getLogger("wcetfit")
    if not own.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        own.addHandler(handler)
        own.propagate = False
    from wcetfit.static.cfgcache import encode_function

    cache = CfgCache(cache_root, enabled=cache_root is not None)
    elf = elfinfo.read_elf(path, with_fdes=True)
    index = SymbolIndex(elf)
    raw = recover_raw(path, starts)
    t0 = time.perf_counter()
    built = _build_all(path, elf, index, raw, set(starts))
    t1 = time.perf_counter()
    out = []
    for fn, callees in built:
        cache.put_function(cdir, fn, callees)
        out.append((summary_of(fn), fn.warnings, fn.unresolved_jumps,
                    encode_function(fn, callees) if return_models else None))
    log.info("models of %d functions in %.2f s, cached in %.2f s", len(out), t1 - t0,
             time.perf_counter() - t1)
    return out


def _known_starts(elf: ElfInfo, index: SymbolIndex) -> set[int]:
    starts = set(index.canonical) | {s for s, _ in elf.fdes if s not in elf.fde_fragments}
    return {a for a in starts - index.fragments if elf.in_exec(a) and not elf.in_plt(a)}


def _build_all(path: str, elf: ElfInfo, index: SymbolIndex, raw: RawCFG,
               mine: set[int] | None) -> list[tuple[FunctionModel, set[int]]]:
    b = _Builder(path, elf, index, raw)
    known = _known_starts(elf, index)
    return [b.function(a) for a in b.functions_present()
            if mine is None or a in mine or a not in known]


def _recover_all(elf: ElfInfo, index: SymbolIndex, cache: CfgCache, cdir: str,
                 need_models: bool = True):
    """Whole-binary recovery: every function's model (None unless ``need_models``), cached,
    and the summary."""
    from wcetfit.static.cfgcache import decode_function

    elf = _with_fdes(elf)
    starts = sorted(_known_starts(elf, index))
    jobs = _jobs(len(starts))
    t0 = time.perf_counter()
    summaries: dict[int, FunctionSummary] = {}
    models: dict[int, FunctionModel] = {}
    warned: list[tuple[str, bool]] = []
    if jobs > 1:
        levels = {n: logging.getLogger(n).getEffectiveLevel()
                  for n in ("wcetfit", "angr", "cle", "pyvex", "claripy")}
        groups = _split(starts, jobs)
        log.info("recovering %d function starts in %d processes", len(starts), len(groups))
        root = cache.root if cache.enabled else None
        results = _run_workers([(elf.path, g, levels, root, cdir, need_models) for g in groups])
        for part in results:
            for summ, warnings, unresolved, enc in part:
                if summ.address in summaries:      # a call target two groups both reached
                    continue
                summaries[summ.address] = summ
                if warnings:
                    warned.append((summ.name, bool(unresolved)))
                    for w in warnings:
                        log.info("%s", w)
                if need_models and enc is not None:
                    models[summ.address] = decode_function(enc)[0]
    else:
        raw = recover_raw(elf.path, starts)
        for fn, callees in _build_all(elf.path, elf, index, raw, None):
            cache.put_function(cdir, fn, callees)
            summaries[fn.address] = summary_of(fn)
            models[fn.address] = fn
            if fn.warnings:
                warned.append((fn.name, bool(fn.unresolved_jumps)))
                for w in fn.warnings:
                    log.info("%s", w)
    log.info("%d functions modelled in %.2f s", len(summaries), time.perf_counter() - t0)
    summ_list = [summaries[a] for a in sorted(summaries)]
    cache.put_summary(cdir, summ_list, warned)
    _warn_whole_binary(elf.path, warned)
    return ({a: models[a] for a in sorted(models)} if need_models else None), summ_list


def _warn_whole_binary(path: str, warned: list[tuple[str, bool]]) -> None:
    """One line for a whole binary (details at INFO level): a system library has dozens."""
    if warned:
        unresolved = [n for n, u in warned if u]
        log.warning("%d function(s) of %s have warnings (%d with unresolved indirect jumps, "
                    "e.g. %s); model one with --function to see them", len(warned), path,
                    len(unresolved), (unresolved or [warned[0][0]])[0])


def list_functions(path: str, *, use_cache: bool | CfgCache = True) -> list[FunctionSummary]:
    """One summary per function of the binary (whole-binary recovery, cached)."""
    elf = elfinfo.read_elf(path, with_fdes=False)
    cache = _cache(use_cache)
    cdir = cache.directory(elf.sha256, cache_options())
    got = cache.get_summary(cdir)
    if got is not None:
        log.info("function list of %s served from the cache %s", path, cdir)
        _warn_whole_binary(elf.path, cache.get_summary_warnings(cdir))
        return got
    _, summaries = _recover_all(elf, SymbolIndex(elf), cache, cdir, need_models=False)
    return summaries


def load_model(path: str, functions: Sequence[str | int] | None = None, *,
               with_callees: bool = True, use_cache: bool | CfgCache = True) -> BinaryModel:
    """Static model of ``functions`` (names, aliases, ``0x...`` addresses; None: all of
    them) and, with ``with_callees``, of the binary's own functions they call, transitively.
    """
    elf = elfinfo.read_elf(path, with_fdes=False)
    index = SymbolIndex(elf)
    cache = _cache(use_cache)
    cdir = cache.directory(elf.sha256, cache_options())
    info = _info(elf)

    every = functions is None
    if functions is None:
        summ = cache.get_summary(cdir)
        if summ is not None:
            functions = [s.address for s in summ]
        else:
            models, _ = _recover_all(elf, index, cache, cdir)
            by_name = {fn.name: fn for fn in models.values()}
            return BinaryModel(info, by_name, tuple(fn.name for fn in models.values()))
    wanted = [index.resolve(f) for f in functions]

    have: dict[int, tuple[FunctionModel, tuple[int, ...]]] = {}
    missing: list[int] = []

    def closure(roots: Iterable[int]) -> None:
        todo = list(roots)
        while todo:
            a = todo.pop()
            if a in have or a in missing:
                continue
            hit = cache.get_function(cdir, a)
            if hit is None:
                missing.append(a)
                continue
            have[a] = hit
            if with_callees:
                todo += list(hit[1])

    closure(wanted)
    if missing:
        elf = _with_fdes(elf)
        raw = recover_raw(elf.path, missing)
        b = _Builder(elf.path, elf, index, raw)
        todo = list(missing)
        built: set[int] = set()
        while todo:
            a = todo.pop()
            if a in built or a in have:
                continue
            built.add(a)
            if a not in raw.blocks:
                raise FunctionNotFound(f"{path}: no code could be decoded at {hexaddr(a)} "
                                       f"({index.name_of(a)})")
            fn, callees = b.function(a)
            have[a] = (fn, tuple(sorted(callees)))
            cache.put_function(cdir, fn, callees)
            if with_callees:
                todo += [c for c in callees if c in raw.blocks]
        missing.clear()
        if with_callees:
            closure([c for a in list(have) for c in have[a][1]])
            if missing:   # callees angr did not reach (should not happen): say so
                log.warning("no model for callee(s) %s", ", ".join(hexaddr(a) for a in missing))

    keep: list[int] = []
    todo2 = list(wanted)
    while todo2:
        a = todo2.pop(0)
        if a in keep or a not in have:
            continue
        keep.append(a)
        if with_callees:
            todo2 += list(have[a][1])
    models = {have[a][0].name: have[a][0] for a in keep}
    requested = tuple(dict.fromkeys(have[a][0].name for a in wanted))
    aliases: dict[str, str] = {}
    for a in keep:
        for n in index.names_at(a)[1:]:
            aliases[n] = have[a][0].name
    for spec, a in zip(functions, wanted):
        if isinstance(spec, str) and spec not in models:
            aliases[spec] = have[a][0].name
    if every:
        _warn_whole_binary(path, [(fn.name, bool(fn.unresolved_jumps)) for fn in models.values()
                                  if fn.warnings])
    else:
        for fn in models.values():
            for w in fn.warnings:
                log.warning("%s", w)
    return BinaryModel(info, models, requested, aliases)
