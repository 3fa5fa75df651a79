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

import logging
import time
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from wcetfit.errors import BinaryError, FunctionNotFound
from wcetfit.model import (CALL_INDIRECT, BinaryInfo, BinaryModel, FunctionModel,
                           FunctionSummary, ObservedTarget, hexaddr)
from wcetfit.static import decode, elfinfo, ifunc
from wcetfit.static.build import Builder, IndirectJumpInfo, RawCFG
from wcetfit.static.cfgcache import CfgCache
from wcetfit.static.elfinfo import ElfInfo
from wcetfit.static.jumptables import (CALLER_SAVED, _TABLE_ABS, _TABLE_REL, _bound_from,
                                      _writes, unguarded_table_size)
from wcetfit.static.shared import separate_shared_code
from wcetfit.static.symbols import SymbolIndex
from wcetfit.static.whole import _recover_all, _warn_whole_binary, summary_of, with_fdes

__all__ = ["load_model", "list_functions", "binary_info", "summary_of", "recover_raw",
           "SymbolIndex", "RawCFG", "IndirectJumpInfo", "CFG_OPTIONS", "MODEL_FORMAT"]

log = logging.getLogger(__name__)

# Recoveries of callees the previous ones did not reach, one level of calls through
# pointers each (liblzma's encoders behind lzma_easy_buffer_encode: 4 levels; the count
# run follows up to 8, wcetfit.pipeline.FOLLOW_ROUNDS).  Each round models every start it
# is given or stops with an error, so the rounds end; the cap only bounds the work.
RECOVERY_ROUNDS = 16

# Bump when the way models are derived changes: cached models of older formats are not used.
# 6: pointer arrays off a lea and and-masked indices (jumptables);
# 7: whole-binary graphs from wcetfit.static.descent, not CFGFast;
# 8: guards on a copy's source after the copy, byte-extended indices (256 entries)
# 9: CFGFast's resolver takes a predecessor's guard over the block's byte extension, and
#    a hoisted table base from the one lea reaching the jump
# 10: function starts and branch targets VEX cannot decode at all are decoded by capstone
# 11: … and conditional branches' fall-throughs
# 13: a table of function pointers may have empty slots (no code address): a tail call
# 14: a table of 4-byte offsets with no bounds check, sized by where its entries stop
#     landing in the function (wcetfit.static.descent)
# 15: ... in every recovery alike (a guard is never read in another function's code)
# 16: a block of prefix bytes alone (``lock`` before ``1: cmpxchg``) falls through into
#     the rest of its instruction; nop padding running into the next function ends a path
MODEL_FORMAT = 17

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
    # IFUNC implementations are the ones the loader selects on this CPU (wcetfit.static.ifunc)
    return {"model_format": MODEL_FORMAT, "cfg": CFG_OPTIONS, "cpu": ifunc.cpu_key(),
            **_versions()}



def _quiet_angr_import_noise() -> None:
    # angr logs at ERROR level things that are not errors for us: the optional unicorn
    # engine is absent, and its constant propagation does not model x87 helpers.  Leave
    # them alone if someone configured these loggers explicitly.
    for name in ("angr.state_plugins.unicorn_engine", "angr.analyses.fcp.fcp"):
        lg = logging.getLogger(name)
        if lg.level == logging.NOTSET:
            lg.setLevel(logging.CRITICAL)



def _gcc_table_resolver(project, obj):
    """An angr indirect-jump resolver, tried before angr's own, for the two jump-table
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

    def _unguarded(table: int, jump: int) -> int | None:
        """A 4-byte offset table no check guards (jumptables.unguarded_table_size), in
        angr's mapped addresses."""
        delta = obj.mapped_base - obj.linked_base
        try:
            fdes = elfinfo.read_elf(obj.binary).fdes
        except Exception:  # noqa: BLE001 -- no extents: no table
            return None
        n = unguarded_table_size(table, jump, fdes,
                                 lambda a, size: project.loader.memory.load(a, size), delta)
        if n is not None:
            log.info("jump at %#x: table %#x has no bounds check; %d entries are "
                     "instructions of its function", jump - delta, table - delta, n)
        return n

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

        @staticmethod
        def _reaching_lea(cfg, addr, before, reg):
            """The one ``lea reg, [rip + ...]`` that last writes ``reg`` on every path
            reaching the jump's block at ``addr`` (``before``: its instructions up to the
            table's load), or None: a function with two tables off the same hoisted base
            register (libexpat's tokenizers: ``lea r15, [rip + T1]`` and ``[rip + T2]``)."""
            if any(_writes(x[3], x[2], reg) for x in before):
                return None
            found = None
            seen: set[int] = set()
            todo = [addr]
            while todo:
                a = todo.pop()
                node = cfg.model.get_any_node(a)
                if node is None:
                    return None
                # a callee's return is no path of its own: the call block precedes too
                preds = [(p, kind) for p, kind in cfg.model.get_predecessors_and_jumpkinds(
                    node, excluding_fakeret=False) if kind != "Ijk_Ret"]
                if not preds or any(kind == "Ijk_Call" for _, kind in preds):
                    return None             # the entry reached with reg unset (an argument)
                for p, _ in preds:
                    if p.addr in seen:
                        continue
                    if not p.size:
                        return None
                    seen.add(p.addr)
                    if len(seen) > 4096:
                        return None
                    code = decode(p.addr, p.size)
                    if not code:
                        return None
                    hit = next((x for x in reversed(code) if _writes(x[3], x[2], reg)), None)
                    if hit is None and code[-1][2] == "call" and reg in CALLER_SAVED:
                        return None
                    if hit is None:
                        todo.append(p.addr)
                    elif found is not None and hit != found:
                        return None
                    else:
                        found = hit
            if found is not None and found[2] == "lea" and found[3].startswith(f"{reg}, [rip"):
                return found
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
                        # ... or, when several leas write it, when one of them reaches
                        # the jump on every path
                        lea = self._reaching_lea(cfg, addr, insns[:load], base_reg)
                    if lea is None:
                        return False, []
                table = elfinfo.rip_target(lea[0], lea[1], lea[3].split(", ", 1)[1])
                if table is None:
                    return False, []
                esize, base = 4, table
                guard_scan = insns[:load]
            n = _bound_from(guard_scan, idx)            # "cmp; ja default" inside the block
            # ... or at the end of every predecessor: "ja default" falling through to the
            # jump's block, or "jbe <the jump's block>".  Searched also when the block gave
            # a bound: that may be only its byte extension's 256 (``movzx eax, al`` in the
            # block, its guard ``cmp al, 5; ja`` ending the predecessor: libexpat's
            # tokenizers), and 256 entries would read the next tables as this one's, whose
            # targets then fall inside other instructions.
            node = cfg.model.get_any_node(addr)
            preds = cfg.model.get_predecessors(node) if node is not None else []
            bounds: list[int | None] = []
            for p in preds:
                code = decode(p.addr, p.size)
                if not code:
                    bounds.append(None)
                    break
                a, size, mnem, ops = code[-1]
                # the block's own code up to the load counts too (the index may be
                # loaded there from the memory the guard compared)
                if mnem == "ja" and a + size == addr:
                    bounds.append(_bound_from(code + guard_scan, idx, "ja"))
                elif mnem == "jbe" and ops == hex(addr):
                    bounds.append(_bound_from(code + guard_scan, idx, "jbe"))
                else:
                    bounds.append(None)
            if bounds and None not in bounds:
                m_ = max(bounds)   # type: ignore[type-var]
                n = m_ if n is None else min(n, m_)
            if n is None and esize == 4:
                n = _unguarded(table, last[0])
            if n is None:
                return False, []
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


def recover_raw(path: str, starts: Iterable[int], elf: ElfInfo | None = None) -> RawCFG:
    """Run CFGFast from ``starts`` (link-time addresses) and copy the graph out; code the
    lifter could not decode is continued with capstone (:mod:`wcetfit.static.decode`)."""
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

    # Ours first: it reads a table only as far as its guard allows, where angr's may read
    # past it (an 8-bit index: 256 entries running into the next table), and the bogus
    # targets would split blocks of other functions.
    resolvers = [_gcc_table_resolver(project, obj)] + default_indirect_jump_resolvers(obj, project)
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
    import capstone

    plain = {k: tuple(dict.fromkeys(v)) for k, v in edges.items()}
    elf = elf or elfinfo.read_elf(path, with_fdes=False)
    with open(path, "rb") as f:
        data = f.read()
    notes = decode.continue_cuts(blocks, plain, elf, data,
                                 capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64),
                                 entries=starts)
    return RawCFG(blocks, plain, indirect, frozenset(noreturn), frozenset(noreturn_names), notes)



# --- public API ---------------------------------------------------------------------------

def _info(elf: ElfInfo) -> BinaryInfo:
    return BinaryInfo(path=elf.path, sha256=elf.sha256, kind=elf.kind, stripped=elf.stripped,
                      extra={"df_1_pie": elf.df_1_pie, "entry": hexaddr(elf.entry)})


def binary_info(path: str) -> BinaryInfo:
    return _info(elfinfo.read_elf(path, with_fdes=False))


def _cache(use_cache: bool | CfgCache) -> CfgCache:
    if isinstance(use_cache, CfgCache):
        return use_cache
    return CfgCache(enabled=None if use_cache else False)



def _aliases(index: SymbolIndex, models: dict[int, FunctionModel]) -> dict[str, str]:
    """Other names of the modelled functions -> canonical name (an IFUNC's name included)."""
    out: dict[str, str] = {}
    for a, fn in models.items():
        for n in index.names_at(a)[1:]:
            out[n] = fn.name
    return out


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


def _with_observed(fn: FunctionModel, indirect: Mapping[int, Sequence[ObservedTarget]],
                   have: Mapping[int, tuple[FunctionModel, tuple[int, ...]]],
                   index: SymbolIndex) -> FunctionModel:
    """``fn`` with its indirect call sites' observed targets, named by their models."""
    calls = []
    for c in fn.calls:
        seen = indirect.get(c.instruction) if c.kind == CALL_INDIRECT else None
        if seen:
            c = replace(c, observed=tuple(
                t if t.address is None else replace(
                    t, name=have[t.address][0].name if t.address in have
                    else index.name_of(t.address) or t.name)
                for t in seen))
        calls.append(c)
    return replace(fn, calls=tuple(calls))


def _referrer(a: int, have: Mapping[int, tuple[FunctionModel, tuple[int, ...]]],
              indirect: Mapping[int, Sequence[ObservedTarget]]) -> str:
    """Where the model met ``a``, for the error that no code could be decoded there: the
    count run's indirect call that went to it, or the call in a function's model (whose
    own model is then wrong: e.g. a jump table read past its end)."""
    for site, targets in sorted(indirect.items()):
        if any(t.address == a for t in targets):
            return (f": the indirect call at {hexaddr(site)} went there in the count run, "
                    "and it is not a function entry of this binary")
    for fn, _ in have.values():
        for c in fn.calls:
            if c.target == a and c.kind != CALL_INDIRECT:
                return (f": the target of the {'jump' if c.tail else 'call'} at "
                        f"{hexaddr(c.instruction)} in {fn.name}, whose model is wrong there "
                        "(code decoded from a misread jump table or data?)")
    return ""


def _check_observed_entries(path: str, elf: ElfInfo, index: SymbolIndex,
                            indirect: Mapping[int, Sequence[ObservedTarget]]) -> None:
    """An indirect ``call``'s observed target that lies inside a function (within its
    ``.eh_frame`` range, not at its start, no symbol there) is no function entry: one
    error line naming the call and where it went, rather than a model decoded from the
    middle of another function's instructions.  Indirect ``jmp`` sites may go into their
    own function (a table not resolved): not checked."""
    import bisect

    import capstone

    starts = [f[0] for f in elf.fdes]

    def where(x: int) -> str:
        j = bisect.bisect_right(starts, x) - 1
        if j < 0 or not x < starts[j] + elf.fdes[j][1]:
            return index.name_of(x)
        return index.name_of(starts[j]) + (f"+{x - starts[j]:#x}" if x > starts[j] else "")

    md = None
    for site, targets in sorted(indirect.items()):
        for t in targets:
            a = t.address
            if a is None or a in index.canonical:
                continue
            i = bisect.bisect_right(starts, a) - 1
            if i < 0 or not (starts[i] < a < starts[i] + elf.fdes[i][1]):
                continue
            try:
                code = elf.read(site, 16)
            except BinaryError:
                continue
            md = md or capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
            ins = next(md.disasm_lite(code, site, 1), None)
            if ins is None or ins[2] != "call":
                continue
            raise FunctionNotFound(
                f"{path}: the indirect call at {hexaddr(site)} ({where(site)}) went to "
                f"{hexaddr(a)} in the count run, which is not a function entry: it lies inside "
                f"the function at {hexaddr(starts[i])} ({where(a)})")


def load_model(path: str, functions: Sequence[str | int] | None = None, *,
               with_callees: bool = True, use_cache: bool | CfgCache = True,
               indirect: Mapping[int, Sequence[ObservedTarget]] | None = None) -> BinaryModel:
    """Static model of ``functions`` (names, aliases, ``0x...`` addresses; None: all of
    them) and, with ``with_callees``, of the binary's own functions they call, transitively.

    ``indirect``: call instruction -> the targets a count run saw its indirect call (or
    tail call) take.  Those sites carry them (``CallSite.observed``) and, with
    ``with_callees``, the targets in this binary are modelled as callees of their site.
    """
    indirect = dict(indirect or {})

    def extra(fn: FunctionModel) -> list[int]:
        return [a for c in fn.calls if c.kind == CALL_INDIRECT
                for a in (t.address for t in indirect.get(c.instruction, ())) if a is not None]

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
            return BinaryModel(info, by_name, tuple(fn.name for fn in models.values()),
                               _aliases(index, models))
    wanted = [index.resolve(f) for f in functions]
    if indirect:
        elf = with_fdes(elf)
        _check_observed_entries(path, elf, index, indirect)

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
                todo += list(hit[1]) + extra(hit[0])

    closure(wanted)
    rounds = 0
    while missing:
        # Callees CFGFast did not reach from the functions asked for (an IFUNC's selected
        # implementation behind a PLT stub or IRELATIVE slot) get a recovery of their own.
        rounds += 1
        elf = with_fdes(elf)
        raw = recover_raw(elf.path, missing, elf)
        b = Builder(elf.path, elf, index, raw)
        todo = list(missing)
        built: set[int] = set()
        while todo:
            a = todo.pop()
            if a in built or a in have:
                continue
            built.add(a)
            if a not in raw.blocks:
                raise FunctionNotFound(f"{path}: no code could be decoded at {hexaddr(a)} "
                                       f"({index.name_of(a)}){_referrer(a, have, indirect)}")
            fn, callees = b.function(a)
            have[a] = (fn, tuple(sorted(callees)))
            cache.put_function(cdir, fn, callees)
            if with_callees:
                todo += [c for c in callees if c in raw.blocks]
        missing.clear()
        if with_callees:
            closure([c for a in list(have) for c in list(have[a][1]) + extra(have[a][0])])
            if missing and rounds >= RECOVERY_ROUNDS:   # callees no recovery reaches: say so
                log.warning("no model for callee(s) %s", ", ".join(hexaddr(a) for a in missing))
                break

    keep: list[int] = []
    todo2 = list(wanted)
    while todo2:
        a = todo2.pop(0)
        if a in keep or a not in have:
            continue
        keep.append(a)
        if with_callees:
            todo2 += list(have[a][1]) + extra(have[a][0])
    if indirect:
        for a in keep:
            have[a] = (_with_observed(have[a][0], indirect, have, index), have[a][1])
    models = {have[a][0].name: have[a][0] for a in keep}
    if with_callees:
        # code two of them share (mempcpy jumping into memcpy's body) as a function of
        # its own: the fit holds one cost per block and function
        observed = {have[a][0].name for a in keep
                    if any(t.address == a for ts in indirect.values() for t in ts)}
        models = separate_shared_code(models, observed=observed)
    requested = tuple(dict.fromkeys(have[a][0].name for a in wanted))
    aliases = _aliases(index, {a: have[a][0] for a in keep})
    for spec, a in zip(functions, wanted):
        if isinstance(spec, str) and spec not in models:
            aliases[spec] = have[a][0].name
    if every:
        _warn_whole_binary(path, [(fn.name, ", ".join(f"{a:#x}" for a in fn.unresolved_jumps))
                                  for fn in models.values() if fn.warnings])
    else:
        _log_model_warnings(models, set(requested))
    return BinaryModel(info, models, requested, aliases)


# Callees whose static-model warnings are named in the one line that stands for theirs.
NAMED_CALLEE_WARNINGS = 6


def _log_model_warnings(models: dict[str, Any], requested: set[str]) -> None:
    """The requested functions' model warnings one by one, the callees' in one line (each
    at info): libc's fnmatch printed ten lines about calloc, malloc_trim and stdio
    internals it can reach, and a user could not tell whether they mattered."""
    callees = []
    for fn in models.values():
        for w in fn.warnings:
            if fn.name in requested:
                log.warning("%s", w)
            else:
                log.info("%s", w)
        if fn.warnings and fn.name not in requested:
            callees.append(fn.name)
    if callees:
        shown = ", ".join(callees[:NAMED_CALLEE_WARNINGS]) + (
            " …" if len(callees) > NAMED_CALLEE_WARNINGS else "")
        log.warning("%d callee(s) have warnings of their static model (%s): `wcetfit cfg "
                    "BINARY --function NAME` lists a callee's; the count run names what it "
                    "cannot count of those the inputs reach", len(callees), shown)
