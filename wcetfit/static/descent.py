"""Whole-binary control-flow recovery of our own: recursive descent with capstone.

angr's CFGFast spent ~90 % of a whole-binary run (libcrypto: ~85 s of CPU per 6,500
function starts) lifting blocks to VEX IR and keeping its knowledge base of functions,
none of which the model uses: the builder (:mod:`wcetfit.static.build`) decides calls,
tail calls and jump tables itself.  This module gives it the same :class:`RawCFG`, ~10x
faster; a single function is still recovered by angr (``binary.recover_raw``).
What it keeps of CFGFast, so that models stay those of the angr recovery:

* Blocks are lifted from every start (function entries, branch targets, the fall-through
  of a call that returns) to a control transfer or VEX's limits (99 instructions, 400
  bytes: a longer straight line falls through into a new block); a ``rep`` string
  instruction is a block of its own (VEX makes it a loop to itself); then a block that
  another one starts inside ends there and falls into it (CFGFast's ``normalize``).
* Jump tables: gcc's shapes (:mod:`wcetfit.static.jumptables`), bounded by the guard on
  every path, the hoisted ``lea`` found as the one definition reaching the jump, pointer
  tables read through their relocations; read once the code around them is known.
* A function may return if some path from its entry reaches a ``ret`` or a tail call of
  a function that may; a path goes on after a call only if the callee may return (least
  fixpoint).  A call's fall-through is explored once its callee is known to return, as
  CFGFast does; what is still pending at the end never returns.  Imports named in
  :data:`NORETURN_IMPORTS` never return, indirect calls always do, an indirect jump that
  is no table may (a tail call through a pointer).
* What capstone cannot decode ends its block, with a note naming the address that
  becomes the function's warning.
"""

from __future__ import annotations

import bisect
import logging
import re
import time
from collections import deque
from typing import Iterable

from wcetfit.errors import BinaryError
from wcetfit.model import hexaddr
from wcetfit.static import jumptables
from wcetfit.static.build import IndirectJumpInfo, RawCFG
from wcetfit.static.elfinfo import ElfInfo, GotSlot, rip_target
from wcetfit.static.symbols import SymbolIndex

log = logging.getLogger(__name__)

# VEX's limits on one lifted block (angr.engines.vex.lifter: VEX_IRSB_MAX_INST/_SIZE).
MAX_INSNS = 99
MAX_BYTES = 400

# Imported functions that never return: those angr knows (its SimProcedures marked NO_RET
# and its libc's non_returning list) and the other C library functions documented so.
NORETURN_IMPORTS = frozenset({
    "abort", "exit", "_exit", "_Exit", "exit_group", "quick_exit", "pthread_exit",
    "longjmp", "siglongjmp", "_longjmp", "__longjmp_chk", "__siglongjmp_chk",
    "__assert_fail", "__assert_perror_fail", "__stack_chk_fail", "__fortify_fail",
    "__chk_fail", "err", "errx", "verr", "verrx", "__libc_start_main", "_Unwind_Resume",
    "__cxa_throw", "__cxa_rethrow", "__cxa_bad_cast", "__cxa_bad_typeid",
    "__cxa_call_unexpected", "__cxa_pure_virtual", "__cxa_deleted_virtual",
})

_HEX = re.compile(r"0x[0-9a-f]+$")
_STRING_OPS = ("movs", "stos", "lods", "scas", "cmps", "ins", "outs")
_RET = ("ret", "retq", "retn", "retf", "retfq", "retw")
_STOP = ("hlt", "ud2", "ud1", "ud0", "int3", "iret", "iretq", "iretd", "sysret", "sysretq",
         "sysexit", "sysexitq", "into")
_SYS = ("syscall", "sysenter", "int")
_COND = ("loop", "loope", "loopne", "jrcxz", "jecxz", "jcxz")

# How a block ends (the kind of its last instruction).
_FALL, _REP, _COND_K, _JMP, _IJMP, _CALL, _RET_K, _SYS_K, _STOP_K, _CUT = range(10)


_PLAIN = -2


def _classify(mnem: str) -> int:
    words = mnem.split()
    base = words[-1] if words else ""
    if len(words) > 1 and words[0].startswith("rep") and base.startswith(_STRING_OPS):
        return _REP
    if base == "jmp":
        return _JMP
    if base.startswith("j") or base in _COND:
        return _COND_K
    if base == "call":
        return _CALL
    if base in _RET:
        return _RET_K
    if base in _SYS:
        return _SYS_K
    if base in _STOP:
        return _STOP_K
    return _PLAIN


def _name(n: str) -> str:
    return n.split("@", 1)[0]


class _Descent:
    def __init__(self, elf: ElfInfo, index: SymbolIndex, data: bytes, md):
        self.elf, self.index, self.data, self.md = elf, index, data, md
        self.dec: dict[int, tuple[int, str, str, int] | None] = {}
        self._classes: dict[str, int] = {}
        # lift start -> (end, insns, kind, extra): extra is the branch/call target or None
        self.lifts: dict[int, tuple[int, list, int, object]] = {}
        self.jobs: deque[int] = deque()
        self.funcs: set[int] = set()
        self.calls: dict[int, tuple] = {}           # block -> callee ("fn", a) / ("ret",) / ("noret",)
        self.pending: dict[int, list[int]] = {}     # callee entry -> call blocks waiting for it
        self.released: set[int] = set()             # call blocks whose fall-through is explored
        self.returning: set[int] = set()
        self.ijumps: list[int] = []                 # blocks ending in an unresolved indirect jmp
        self.tables: dict[int, list[int]] = {}      # block -> jump-table targets
        self.indirect: dict[int, IndirectJumpInfo] = {}
        self.notes: dict[int, str] = {}
        self.exported = {}
        for sym in elf.symbols:
            if sym.dynamic and sym.binding != "local":
                self.exported.setdefault(sym.name, sym)
        self._exec = elf.exec_ranges
        # the normalized graph (see _graph)
        self._starts: list[int] = []
        self._blocks: dict[int, tuple[int, int]] = {}
        self._succ: dict[int, list] = {}
        self._preds: dict[int, set[int]] = {}
        self._dirty: set[int] = set()
        self._new: list[int] = []                   # lifted since the graph was last updated
        self._relocs: dict[int, int] | None = None
        self._plt = elf.plt_ranges

    # -- addresses --

    def in_exec(self, a: int) -> bool:
        for lo, hi in self._exec:
            if lo <= a < hi:
                return True
        return False

    def in_plt(self, a: int) -> bool:
        for lo, hi in self._plt:
            if lo <= a < hi:
                return True
        return False

    def ours(self, a: int | None) -> bool:
        return a is not None and self.in_exec(a) and not self.in_plt(a)

    # -- decoding --

    def insn(self, a: int) -> tuple[int, str, str, int] | None:
        """(size, mnemonic, op_str, class) of the instruction at ``a``; the class is
        :data:`_PLAIN`, :data:`_REP` or the kind of block end the instruction makes."""
        try:
            return self.dec[a]
        except KeyError:
            pass
        dec, classes = self.dec, self._classes
        try:
            off = self.elf.file_offset(a, 1)
        except BinaryError:
            dec[a] = None
            return None
        for ia, size, mnem, ops in self.md.disasm_lite(self.data[off:off + 512], a):
            if ia in dec:
                break                       # decoded before from here on
            cls = classes.get(mnem)
            if cls is None:
                cls = classes[mnem] = _classify(mnem)
            dec[ia] = (size, mnem, ops, cls)
        return dec.setdefault(a, None)

    def lift(self, start: int) -> None:
        insns: list[tuple[int, int, str, str]] = []
        a, nbytes, kind, extra = start, 0, _FALL, None
        insn = self.insn
        while True:
            got = insn(a)
            if got is None:
                kind = _CUT
                self.notes[start] = (f"the instruction at {hexaddr(a)} cannot be decoded "
                                     f"(by capstone): the block ends there")
                break
            size, mnem, ops, cls = got
            if len(insns) == MAX_INSNS or nbytes + size > MAX_BYTES:
                break                                       # VEX's limit: falls through
            if cls == _REP:
                if insns:
                    break                                   # the rep instruction: own block
                insns.append((a, size, mnem, ops))
                a += size
                kind = _REP
                break
            insns.append((a, size, mnem, ops))
            a += size
            nbytes += size
            if cls == _PLAIN:
                continue
            kind = cls
            if cls == _JMP:
                kind, extra = (_JMP, int(ops, 16)) if _HEX.match(ops) else (_IJMP, None)
            elif cls == _COND_K:
                extra = int(ops, 16) if _HEX.match(ops) else None
            break
        self.lifts[start] = (a, insns, kind, extra, self._static_succ(start, a, insns, kind, extra))
        self._new.append(start)
        jobs = self.jobs
        if kind in (_FALL, _REP, _SYS_K, _COND_K):
            jobs.append(a)
        if kind in (_COND_K, _JMP) and extra is not None:
            if self.ours(extra):
                jobs.append(extra)
            elif extra in self.elf.plt:                     # a tail call through the PLT:
                self._function(self._slot_callee(self.elf.plt[extra]))   # its callee's
        elif kind == _IJMP:                                 # verdict is needed
            slot = self._got_slot(insns[-1])
            if slot is None:
                self.ijumps.append(start)
            else:
                self._function(self._slot_callee(slot))
        elif kind == _CALL:
            callee = self._callee(insns[-1])
            self.calls[start] = callee
            if callee[0] == "fn":
                self._function(callee)
                if callee[1] in self.returning:
                    self._release(start)
                else:
                    self.pending.setdefault(callee[1], []).append(start)
            elif callee[0] == "ret":
                self._release(start)

    def _function(self, callee: tuple) -> None:
        if callee[0] == "fn" and callee[1] not in self.funcs:
            self.funcs.add(callee[1])
            self.jobs.append(callee[1])

    def _release(self, block: int) -> None:
        self.released.add(block)
        self._dirty.add(block)
        self.jobs.append(self.lifts[block][0])

    # -- calls --

    def _got_slot(self, ins) -> GotSlot | None:
        ops = ins[3]
        if not ops.startswith("qword ptr [rip"):
            return None
        t = rip_target(ins[0], ins[1], ops)
        return self.elf.got.get(t) if t is not None else None

    def _slot_callee(self, slot: GotSlot) -> tuple:
        sel = self.index.selection
        if slot.name is None:                               # IRELATIVE: the loader's choice
            impl = sel.by_slot.get(slot.address)
            return ("fn", impl) if impl is not None and self.ours(impl) else ("ret",)
        sym = self.exported.get(slot.name)
        if sym is not None and not sym.ifunc:
            return ("fn", sym.address) if self.ours(sym.address) else ("ret",)
        if sym is not None:
            impl = sel.by_resolver.get(sym.address)
            return ("fn", impl) if impl is not None and self.ours(impl) else ("ret",)
        return ("noret",) if _name(slot.name) in NORETURN_IMPORTS else ("ret",)

    def _callee(self, ins) -> tuple:
        ops = ins[3]
        if _HEX.match(ops):
            t = int(ops, 16)
            slot = self.elf.plt.get(t)
            if slot is not None:
                return self._slot_callee(slot)
            return ("fn", t) if self.ours(t) else ("ret",)
        slot = self._got_slot(ins)
        if slot is not None:
            return self._slot_callee(slot)
        return ("ret",)                                     # indirect calls always return

    # -- the run --

    def run(self, starts: Iterable[int]) -> None:
        for s in sorted(set(starts)):
            if self.ours(s):
                self.funcs.add(s)
                self.jobs.append(s)
        while True:
            self._drain()
            blocks, succ = self._graph()
            # tables first: until they are read, their jumps count as possibly returning
            if self._resolve_jumps(blocks, succ):
                continue
            if not self._returns(blocks, succ):
                break

    def _drain(self) -> None:
        jobs, lifts = self.jobs, self.lifts
        while jobs:
            a = jobs.popleft()
            if a not in lifts:
                self.lift(a)

    # -- the graph: blocks as they are once no two overlap, and their out-edges --

    def _static_succ(self, s: int, end: int, insns, kind: int, extra) -> list:
        """The lifted block's out-edges in CFGFast's terms (target None: outside the
        binary's code), but for those learned later: a call's fall-through once its callee
        is known to return, a jump table's targets once it is read."""
        if kind == _FALL:
            return [(end, "Ijk_Boring")]
        if kind == _REP:
            return [(s, "Ijk_Boring"), (end, "Ijk_Boring")]
        if kind == _COND_K:
            return [(extra if self.in_exec(extra) else None, "Ijk_Boring"), (end, "Ijk_Boring")]
        if kind == _JMP:
            return [(extra if self.in_exec(extra) else None, "Ijk_Boring")]
        if kind == _CALL:
            ops = insns[-1][3]
            t = int(ops, 16) if _HEX.match(ops) else None
            return [(t if t is not None and self.in_exec(t) else None, "Ijk_Call")]
        if kind == _RET_K:
            return [(None, "Ijk_Ret")]
        if kind == _SYS_K:
            return [(end, "Ijk_FakeRet")]
        return []

    def _graph(self):
        """(start -> (end, kind), start -> out-edges) of the normalized blocks: a lifted
        block another one starts inside ends there and falls into it (kind -1).  Kept
        up to date between rounds: only the blocks lifted since, the blocks just before
        them and those whose fall-through or table was learned since are recomputed."""
        lifts, released, tables = self.lifts, self.released, self.tables
        blocks, succ, preds = self._blocks, self._succ, self._preds
        new, self._new = self._new, []
        if len(new) < 256:
            for a in new:
                bisect.insort(self._starts, a)
        else:
            self._starts = sorted(self._starts + new)
        starts = self._starts
        dirty = set(new) | self._dirty
        self._dirty = set()
        for a in new:
            i = bisect.bisect_left(starts, a)
            if i > 0:
                dirty.add(starts[i - 1])
        n = len(starts)
        for s in dirty:
            i = bisect.bisect_left(starts, s)
            nxt = starts[i + 1] if i + 1 < n else None
            end, _, kind, _, st = lifts[s]
            if nxt is not None and nxt < end:
                blk, out = (nxt, -1), [(nxt, "Ijk_Boring")]
            else:
                blk, out = (end, kind), st
                if kind == _CALL and s in released:
                    out = st + [(end, "Ijk_FakeRet")]
                elif kind == _IJMP and s in tables:
                    out = [(t, "Ijk_Boring") for t in tables[s]]
            for d, k in succ.get(s, ()):
                if d is not None and k != "Ijk_Call":
                    preds[d].discard(s)
            blocks[s] = blk
            succ[s] = out
            for d, k in out:
                if d is not None and k != "Ijk_Call":     # fall-throughs of calls too
                    preds.setdefault(d, set()).add(s)
        return blocks, succ

    # -- jump tables --

    def _resolve_jumps(self, blocks, succ) -> bool:
        """Read the tables of the indirect jumps met so far; True if new code was found."""
        if not self.ijumps:
            return False
        preds = self._preds
        found = False
        rest = []
        for s in self.ijumps:
            targets = self._table(s, blocks, preds)
            if targets is None:
                rest.append(s)
                continue
            self.tables[s] = targets
            self._dirty.add(s)
            for t in targets:
                if t not in self.lifts:
                    self.jobs.append(t)
                    found = True
        # a jump whose guard or lea is in code not explored yet may resolve later
        self.ijumps = rest if found else []
        return found

    def _insns(self, s: int, blocks) -> list[tuple[int, int, str, str]]:
        end = blocks[s][0]
        return [i for i in self.lifts[s][1] if i[0] < end]

    def _chains(self, s: int, blocks, preds, depth: int = 2):
        own = self._insns(s, blocks)
        if depth == 0:
            return [own]
        out = []
        for p in preds.get(s, ()):
            if p == s:
                continue
            pins = self._insns(p, blocks)
            if not pins:
                continue
            last = pins[-1]
            base = last[2].split()[-1]
            if base == "call" or (base == "jmp" and not _HEX.match(last[3])):
                continue
            out += [c + own for c in self._chains(p, blocks, preds, depth - 1)]
        return out or [own]

    def _hoisted(self, chain, s: int, blocks, preds):
        """gcc hoists the ``lea`` of a table out of loops: the shape of
        :func:`jumptables.match_table` whose base register is set, on every path that
        reaches the jump, by the same ``lea [rip + ...]``."""
        if not chain or chain[-1][2].split()[-1] != "jmp":
            return None
        target = chain[-1][3].strip()
        for i in range(len(chain) - 2, -1, -1):
            mm = jumptables._TABLE_REL.match(chain[i][3]) if chain[i][2] == "movsxd" else None
            if mm is None:
                continue
            dst, base, idx = mm.groups()
            if target not in (dst, base) or not any(
                    x[2] == "add" and x[3] in (f"{dst}, {base}", f"{base}, {dst}")
                    for x in chain[i + 1:-1]):
                return None
            defs = [x for x in chain[:i] if jumptables._writes(x[3], x[2], base)]
            if defs:
                return None             # written in sight, not by a lea (match_table's case)
            lea = self._reaching_def(base, chain[0][0], blocks, preds)
            if lea is None or lea[2] != "lea" or not lea[3].startswith(f"{base}, [rip"):
                return None
            defs = [lea]
            table = rip_target(defs[0][0], defs[0][1], defs[0][3].split(", ", 1)[1])
            return None if table is None else (table, 4, idx, i)
        return None

    def _reaching_def(self, reg: str, before: int, blocks, preds):
        """The one instruction that last writes ``reg`` on every path reaching address
        ``before`` (the start of an instruction), or None (several, or none in sight, or
        a call in between that may clobber it)."""
        starts = self._starts
        i = bisect.bisect_right(starts, before) - 1
        if i < 0:
            return None
        found = None
        seen: set[int] = set()
        todo: list[tuple[int, int | None]] = [(starts[i], before)]
        while todo:
            b, lim = todo.pop()
            if lim is None:
                if b in seen:
                    continue
                seen.add(b)
            if b not in blocks:
                return None
            ins = self._insns(b, blocks)
            if lim is not None:
                ins = [x for x in ins if x[0] < lim]
            elif ins and ins[-1][2].split()[-1] == "call" and reg in jumptables.CALLER_SAVED:
                return None
            hit = next((x for x in reversed(ins) if jumptables._writes(x[3], x[2], reg)), None)
            if hit is not None:
                if found is not None and hit != found:
                    return None
                found = hit
                continue
            ps = preds.get(b)
            if not ps or len(seen) > 4096:
                return None                 # the entry reached with reg unset (an argument)
            todo += [(p, None) for p in ps]
        return found

    def _mask_bound(self, reg: str, before: int, blocks, preds) -> int | None:
        """A table index with no guard, bounded instead by ``and idx, 2^k - 1`` as the
        one definition reaching the table's load on every path: 2^k entries."""
        d = self._reaching_def(reg, before, blocks, preds)
        if d is None or d[2] != "and":
            return None
        dest, _, imm = d[3].partition(", ")
        if jumptables.family(dest) != jumptables.family(reg) or not re.fullmatch(
                r"0x[0-9a-f]+|\d+", imm.strip()):
            return None
        n = int(imm, 0) + 1
        return n if n & (n - 1) == 0 and 0 < n <= jumptables._MAX_TABLE else None

    def _table(self, s: int, blocks, preds) -> list[int] | None:
        chains = self._chains(s, blocks, preds)
        shapes = [jumptables.match_table(c) or self._hoisted(c, s, blocks, preds)
                  or jumptables.pointer_table(c) for c in chains]
        found = {(sh[0], sh[1], sh[2]) for sh in shapes if sh is not None}
        if len(found) != 1 or None in shapes:
            return None
        table, esize, idx = found.pop()
        bounds = []
        for c, sh in zip(chains, shapes):
            n = jumptables._bound_from(c[:sh[3]], idx)    # type: ignore[index]
            if n is None and any(x[2] == "jbe" and x[3] == hex(c[k + 1][0])
                                 for k, x in enumerate(c[:sh[3]])):   # type: ignore[index]
                # "cmp idx, n-1; jbe <the code reading the table>" on this path
                n = jumptables._bound_from(c[:sh[3]], idx, "jbe")   # type: ignore[index]
            if n is None:
                n = self._mask_bound(idx, c[sh[3]][0], blocks, preds)   # type: ignore[index]
            if n is None and esize == 4:
                n = self._unguarded_extent(table, s, blocks)
            if n is None:
                return None
            bounds.append(n)
        n = max(bounds)
        try:
            raw = self.elf.read(table, esize * n)
        except BinaryError:
            return None
        if esize == 4:
            targets = [table + int.from_bytes(raw[i:i + 4], "little", signed=True)
                       for i in range(0, 4 * n, 4)]
        else:
            # absolute entries: as the file holds them, or (position-independent code) as
            # its relocations will set them at load
            targets = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, 8 * n, 8)]
            if not all(self.ours(t) for t in targets):
                got = self._relocated(table, n)
                if got is None:
                    return None
                targets = got
        if not all(self.ours(t) for t in targets):
            return None
        jump = self._insns(s, blocks)[-1][0]
        self.indirect[jump] = IndirectJumpInfo(
            tuple(sorted(set(targets))), ((table, esize * n, esize, tuple(targets)),))
        return sorted(set(targets))

    def _unguarded_extent(self, table: int, s: int, blocks) -> int | None:
        """A 4-byte offset table no check guards (jumptables.unguarded_table_size)."""
        jump = self._insns(s, blocks)[-1][0]
        return jumptables.unguarded_table_size(table, jump, self.elf.fdes, self.elf.read)

    def _relocated(self, table: int, n: int) -> list[int] | None:
        """The values the loader writes into the ``n`` 8-byte words at ``table``
        (R_X86_64_RELATIVE: base + addend; R_X86_64_64: symbol + addend), or None if a
        word has no such relocation."""
        if self._relocs is None:
            self._relocs = jumptables.word_relocations(self.elf.path)
        out = [self._relocs.get(table + 8 * i) for i in range(n)]
        return None if None in out else out      # type: ignore[return-value]

    # -- functions that return --

    def _returns(self, blocks, succ) -> bool:
        """Grow the set of functions that may return to its least fixpoint over the code
        known so far; explore the fall-through of calls to those.  True if any was."""
        funcs = self.funcs
        changed = True
        while changed:
            changed = False
            for f in sorted(funcs - self.returning):
                if self._may_return(f, blocks, succ):
                    self.returning.add(f)
                    changed = True
        released = False
        for f in list(self.pending):
            if f in self.returning:
                for b in self.pending.pop(f):
                    self._release(b)
                    released = True
        return released

    def _slot_returns(self, slot: GotSlot) -> bool:
        c = self._slot_callee(slot)
        return c == ("ret",) or (c[0] == "fn" and c[1] in self.returning)

    def _may_return(self, f: int, blocks, succ) -> bool:
        seen = {f}
        todo = [f]
        funcs, returning, plt = self.funcs, self.returning, self.elf.plt
        while todo:
            b = todo.pop()
            if b not in blocks:
                continue
            end, kind = blocks[b]
            if kind == _RET_K:
                return True
            if kind == _IJMP and b not in self.tables:
                slot = self._got_slot(self.lifts[b][1][-1])
                if slot is None or self._slot_returns(slot):
                    return True             # a tail call through a pointer (or unresolved)
                continue
            for d, k in succ[b]:
                if d is None:
                    if k == "Ijk_Boring":
                        return True         # a jump out of the binary's code
                    continue
                if k == "Ijk_Call" or k == "Ijk_Ret":
                    continue
                if d in plt:                # a tail call of an import (or own PLT entry)
                    if self._slot_returns(plt[d]):
                        return True
                    continue
                if d != f and d in funcs:   # a tail call
                    if d in returning:
                        return True
                    continue
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False

    # -- result --

    def raw(self) -> RawCFG:
        blocks, succ = self._graph()
        sizes = {s: end - s for s, (end, _) in blocks.items()}
        edges = {s: tuple(dict.fromkeys(outs)) for s, outs in succ.items()}
        noreturn = set(self.funcs - self.returning)
        names = set()
        for stub, slot in self.elf.plt.items():
            if self._slot_callee(slot) == ("noret",):
                noreturn.add(stub)
                names.add(_name(slot.name))                  # type: ignore[arg-type]
        for slot in self.elf.got.values():
            if slot.name is not None and self._slot_callee(slot) == ("noret",):
                names.add(_name(slot.name))
        insns = {s: tuple(i for i in self.lifts[s][1] if i[0] < end)
                 for s, (end, _) in blocks.items()}
        return RawCFG(sizes, edges, dict(self.indirect), frozenset(noreturn),
                      frozenset(names), dict(self.notes), insns)


def recover(path: str, starts: Iterable[int], elf: ElfInfo, index: SymbolIndex | None = None,
            data: bytes | None = None) -> RawCFG:
    """The global control-flow graph of the code reachable from ``starts`` (link-time
    addresses), as plain data (see the module's docstring for how it matches CFGFast's)."""
    import capstone

    t0, c0 = time.perf_counter(), time.process_time()
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    index = index or SymbolIndex(elf)
    d = _Descent(elf, index, data, capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64))
    starts = list(starts)
    d.run(starts)
    raw = d.raw()
    log.info("recursive descent of %s from %d function start(s): %d blocks in %.2f s "
             "(%.2f s of CPU)", path, len(starts), len(raw.blocks), time.perf_counter() - t0,
             time.process_time() - c0)
    for b, text in raw.decode_notes.items():
        log.info("block %s: %s", hexaddr(b), text)
    return raw
