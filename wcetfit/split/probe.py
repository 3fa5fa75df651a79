"""Timing probes on the original code: a clock reading moved to a block boundary.

A probe configuration times "entry → first arrival at X" (``stop``) or "first arrival at
X → return" (``start``) of the *original* function, in the measuring (child) process only,
without traps:

* **The wrapper.**  The C loop (``instrument/wf_probe.c``) calls the thunk's plain-call
  entry ``wf_call_F`` with a small wrapper as the function: ``pop [saved]`` (the caller's
  return address), ``call F``, ``push [saved]; ret``.  Popping first keeps F's stack
  layout — stack arguments, alignment — exactly as in a direct call.  The wrapper holds
  two probe sites of its own: ``entry`` (before the call) and ``return`` (after it).
* **The patch.**  At a probe point X: the page is made writable (mprotect), X's first
  whole instructions (at least 5 bytes) are replaced by ``jmp rel32`` to a stub within
  ±2 GiB (memory from :func:`wcetfit.loader.alloc_near`), the rest of the displaced bytes
  by INT3 (never executed: nothing jumps into the middle of a block; if the static model
  were wrong, the target crashes in the isolated child instead of running wrong), and the
  page is made executable again.  The original bytes are checked before and restored
  after.
* **The stub**, reading path: move below the 128-byte red zone, push RAX, RCX, RDX (and
  RBX), read the TSC with the very sequences of ``wf_tsc.h`` for the chosen method, store
  EAX, EDX, ECX (TSC_AUX) and a "fired" flag with plain MOVs, pop, jump on.  Nothing in
  the path writes the flags (MOV, LEA, PUSH, POP, LFENCE, RDTSC(P) and CPUID leave RFLAGS
  alone), so no PUSHFQ/POPFQ.  Only the first arrival may count, without a test (a test
  writes the flags):

  - a *stop* probe reaches its reading path by a direct jump, every time; the stores go
    through a pointer (the site's slot, re-armed by the C loop before every call) that
    the first reading redirects to a scratch area, so later readings — after the stop,
    untimed — change nothing.  No indirect jump before the reading: an indirect jump
    whose target alternated between the first and the later arrivals would be
    mispredicted at the first arrival of every call, a penalty timed into the stop;
  - a *start* probe's stub begins with ``jmp [rip+slot]``: armed, it leads to the reading
    path, which first points every slot of the probe to its continuation and then reads,
    so the reading is the last thing before the measured code resumes; later arrivals
    (inside the timed region) take one indirect jump to the continuation.  A
    misprediction of the first arrival happens before the start reading.
* **The continuation** runs the displaced instructions relocated (RIP-relative operands
  re-aimed at the same absolute address, relative branches re-encoded in rel32 form to
  their original targets, calls leave a return address in the stub and come back to it)
  and jumps back to X + (displaced length).  LOOP/JRCXZ/XBEGIN (no rel32 form) refuse.

**Blocks too short for a 5-byte jump.**  Many blocks are (``pop rbx; ret``; a 4-byte
``test; je``).  Two answers, tried in order:

1. *Extend through fall-through-only boundaries*: the displaced instructions may continue
   into the next block when that block is entered only by falling through from the one
   before it (not a branch target, not a jump-table target, not an entry): patching across
   such a boundary changes nothing anybody can observe, since no control transfer lands
   there.  A boundary that is a jump target is never crossed.
2. *Edge probes*: otherwise the probe is placed on every edge into X.  Each predecessor
   P's tail (its last whole instructions, ≥ 5 bytes, extended backwards only across
   fall-through-only boundaries) moves to a stub; inside the stub, the transfers to X —
   the branch to X, or the fall-through into X, or the return of a call whose
   fall-through is X — go through X's dispatch instead.  This keeps the measured code in
   place (the copy alternative — relocate the whole function once and probe the copy —
   would time a different code layout, with every short branch re-encoded, for every
   block, not just the probed one), at a price the fit can see: every execution of P's
   tail passes through the stub (one extra jump), also the ones that do not lead to X.
   Those passes are counted from the trace and get their own δ column in the joint
   system (:mod:`wcetfit.split.rounds`).  The reading pass itself costs as much as a direct
   probe's (one extra direct jump, then the dispatch jump).  Edges the stub cannot
   intercept — X reached through a jump table, X a function entry reached by calls, X
   inside one of its own predecessors' tails — leave X unprobeable; the planner works
   around it with the probes that remain (and says so).

Every stub's code is decoded with capstone in the tests; the differential check (same
return value and argument memory with and without the probe) runs for every input.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.count import x86enc as enc
from wcetfit.errors import MeasurementError, NativeBuildError, RelocationError
from wcetfit.loader import WritableData  # re-exported: probe_run imports it from here
from wcetfit.model import FunctionModel, hexaddr
from wcetfit.split.rounds import (KIND_START, KIND_STOP, MECH_DIRECT, MECH_EDGE, MECH_WRAPPER,
                           SITE_BLOCK, SITE_ENTRY, SITE_RETURN, Probe)

log = logging.getLogger(__name__)

JMP_LEN = 5
MAX_SITES = 16                  # WF_PROBE_MAX_SITES in wf_probe.h
STATE_SIZE = 0x120              # sizeof(struct wf_probe_state)
# struct wf_probe_state offsets (wf_probe.h)
OFF_FIRED, OFF_LO, OFF_HI, OFF_AUX, OFF_NSITES, OFF_SAVED = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x18
OFF_SLOT, OFF_ARMED = 0x20, 0xA0
OFF_SCRATCH = 0x200             # where a stop probe's later readings go (not in the state)

# Fence methods the stubs reproduce (wf_tsc.h); cpuid_inside is a negative reference only.
STUB_METHODS = ("lfence", "mfence", "rdtscp", "cpuid")

_NO_REL32 = {"loop", "loope", "loopne", "loopz", "loopnz", "jrcxz", "jecxz", "jcxz",
             "xbegin"}
_PREFIX_WORDS = ("bnd", "notrack", "rep", "repne", "repe", "lock")


class ProbePlacementError(RelocationError):
    """A probe cannot be placed at this point; the message says why."""


def _base_mnemonic(m: str) -> str:
    words = m.split()
    while len(words) > 1 and words[0] in _PREFIX_WORDS:
        words = words[1:]
    return words[-1] if words else m


# =========================================================================================
# decoded instructions (plain data)
# =========================================================================================

@dataclass(frozen=True)
class Insn:
    address: int
    size: int
    raw: bytes
    mnemonic: str              # without bnd/notrack/rep prefixes
    text: str
    branch: str | None         # "jmp", "jcc", "call" for direct relative branches
    target: int | None         # their target (link-time)
    rip_disp_offset: int | None
    rip_target: int | None
    is_ret: bool
    is_call: bool
    is_indirect_jump: bool
    ends_flow: bool            # jmp (any), ret, hlt, ud2: no fall-through

    @property
    def end(self) -> int:
        return self.address + self.size


_MD = None


def _md():
    global _MD
    if _MD is None:
        import capstone
        _MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        _MD.detail = True
    return _MD


def decode(code: bytes, address: int) -> list[Insn]:
    """Decode ``code`` at link-time ``address`` into plain instructions."""
    from capstone import x86_const as X

    out = []
    for i in _md().disasm(code, address):
        m = _base_mnemonic(i.mnemonic)
        branch = target = None
        if X.X86_GRP_BRANCH_RELATIVE in i.groups and i.operands \
                and i.operands[0].type == X.X86_OP_IMM:
            target = int(i.operands[0].imm)
            if X.X86_GRP_CALL in i.groups:
                branch = "call"
            elif m == "jmp":
                branch = "jmp"
            elif m in enc.JCC_CODES:
                branch = "jcc"
            else:
                branch = m                       # loop/jrcxz: refused later
        rip_off = rip_target = None
        for op in i.operands:
            if op.type == X.X86_OP_MEM and op.mem.base == X.X86_REG_RIP:
                if i.disp_size != 4:
                    raise ProbePlacementError(f"{i.address:#x} `{i.mnemonic} {i.op_str}`: "
                                              "RIP-relative operand without a disp32")
                rip_off = i.disp_offset
                rip_target = i.address + i.size + op.mem.disp
        is_jump = X.X86_GRP_JUMP in i.groups
        out.append(Insn(
            address=i.address, size=i.size, raw=bytes(i.bytes), mnemonic=m,
            text=f"{i.mnemonic} {i.op_str}".strip(), branch=branch, target=target,
            rip_disp_offset=rip_off, rip_target=rip_target,
            is_ret=X.X86_GRP_RET in i.groups, is_call=X.X86_GRP_CALL in i.groups,
            is_indirect_jump=is_jump and branch is None,
            ends_flow=(m == "jmp") or X.X86_GRP_RET in i.groups or m in ("hlt", "ud2")))
    return out


# =========================================================================================
# where a probe goes: regions of displaced instructions
# =========================================================================================

@dataclass(frozen=True)
class Region:
    """Original instructions [start, end) moved into a stub.

    ``check_entry``: arriving at ``start`` is the probe event (direct probes).
    ``edge_to``: a transfer from these instructions to this address is the probe event
    (edge probes), including falling off the end when ``end == edge_to``.
    """

    start: int
    end: int
    insns: tuple[Insn, ...]
    check_entry: bool
    edge_to: int | None
    pass_block: int            # the block in which the region starts

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ProbeLayout:
    """Everything needed to install one probe: the regions to patch (none for the
    wrapper's sites) and the probe as the planner sees it."""

    probe: Probe
    function: str
    regions: tuple[Region, ...]

    @property
    def sites(self) -> int:
        """Dispatch slots: one per region (a wrapper site uses one too)."""
        return max(1, len(self.regions))


class _Cfg:
    """The facts of one function's CFG the placement rules need."""

    def __init__(self, fn: FunctionModel, read: Callable[[int, int], bytes],
                 entries: frozenset[int] = frozenset()) -> None:
        self.fn = fn
        self.read = read
        self.blocks = {b.address: b for b in fn.blocks}
        self.order = sorted(self.blocks)
        self.preds: dict[int, list[int]] = {a: [] for a in self.blocks}
        for s, d in fn.edges:
            if d in self.preds and s in self.blocks:
                self.preds[d].append(s)
        self.table_targets = {t for jt in fn.jump_tables for t in jt.targets}
        self.entries = set(entries) | {fn.entry, fn.address}
        self._insns: dict[int, list[Insn]] = {}

    def insns(self, block: int) -> list[Insn]:
        if block not in self._insns:
            b = self.blocks[block]
            got = decode(self.read(b.address, b.size), b.address)
            if sum(i.size for i in got) != b.size:
                raise ProbePlacementError(f"{self.fn.name}: the bytes of block "
                                          f"{hexaddr(block)} do not decode as whole "
                                          "instructions")
            if b.instructions and [(i.address, i.size) for i in got] != \
                    [(i.address, i.size) for i in b.instructions]:
                raise ProbePlacementError(f"{self.fn.name}: block {hexaddr(block)}: the "
                                          "model's instruction boundaries differ from the "
                                          "bytes'")
            self._insns[block] = got
        return self._insns[block]

    def block_containing(self, address: int) -> int | None:
        for a in reversed(self.order):
            if a <= address < self.blocks[a].end:
                return a
            if a < address:
                break
        return None

    def fallthrough_only(self, block: int) -> bool:
        """Entered only by falling through from the block that ends where it starts."""
        if block in self.entries or block in self.table_targets:
            return False
        preds = self.preds.get(block, [])
        if len(preds) != 1:
            return False
        p = preds[0]
        if self.blocks[p].end != block:
            return False
        last = self.insns(p)[-1]
        # a branch whose target is the fall-through (jcc to the next instruction) is a
        # jump target too; a call block's fall-through is a return target: never cross
        return last.target != block and not last.is_call

    def forward_region(self, start: int) -> list[Insn]:
        """Whole instructions from ``start``, at least 5 bytes, crossing block boundaries
        only where the next block is fall-through-only; ProbePlacementError if impossible."""
        blk = self.block_containing(start)
        if blk is None:
            raise ProbePlacementError(f"{hexaddr(start)} is in no block of {self.fn.name}")
        insns = [i for i in self.insns(blk) if i.address >= start]
        if not insns or insns[0].address != start:
            raise ProbePlacementError(f"{hexaddr(start)} is not an instruction boundary")
        out: list[Insn] = []
        total = 0
        while True:
            for i in insns:
                out.append(i)
                total += i.size
                if total >= JMP_LEN:
                    return out
            nxt = self.blocks[blk].end
            last = out[-1]
            if last.ends_flow:
                raise ProbePlacementError(
                    f"{hexaddr(start)}: only {total} bytes before the block ends with "
                    f"`{last.text}`")
            if nxt not in self.blocks or not self.fallthrough_only(nxt):
                raise ProbePlacementError(
                    f"{hexaddr(start)}: only {total} bytes before {hexaddr(nxt)}, which is "
                    "a jump target (never patched across)")
            blk = nxt
            insns = self.insns(blk)

    def tail_region(self, pred: int) -> list[Insn]:
        """The last whole instructions of ``pred`` (≥ 5 bytes), extended backwards across
        fall-through-only boundaries."""
        insns: list[Insn] = []
        blk = pred
        total = 0
        while True:
            for i in reversed(self.insns(blk)):
                insns.insert(0, i)
                total += i.size
                if total >= JMP_LEN:
                    return insns
            if not self.fallthrough_only(blk):
                raise ProbePlacementError(
                    f"predecessor {hexaddr(pred)} has only {total} bytes after "
                    f"{hexaddr(blk)}, a jump target")
            blk = self.preds[blk][0]


def _check_relocatable(insns: Sequence[Insn], where: str) -> None:
    for i in insns:
        if i.mnemonic in _NO_REL32 or (i.branch is not None and
                                       i.branch not in ("jmp", "jcc", "call")):
            raise ProbePlacementError(f"{where}: `{i.text}` at {hexaddr(i.address)} has no "
                                      "rel32 form and cannot be displaced")
        if i.mnemonic in ("endbr64", "endbr32") and i is not insns[0]:
            raise ProbePlacementError(f"{where}: an ENDBR landing pad inside the region")


def _direct_region(cfg: _Cfg, point: int) -> Region:
    insns = cfg.forward_region(point)
    start, end = insns[0].address, insns[-1].end
    for i in insns:
        if i.branch in ("jmp", "jcc") and start < i.target < end:
            raise ProbePlacementError(f"{hexaddr(point)}: `{i.text}` jumps inside the "
                                      "displaced instructions")
    _check_relocatable(insns, hexaddr(point))
    return Region(start, end, tuple(insns), True, None, cfg.block_containing(start))


def _edge_regions(cfg: _Cfg, point: int) -> tuple[Region, ...]:
    fn = cfg.fn
    if point in cfg.entries:
        raise ProbePlacementError(f"{hexaddr(point)} is a function entry: its calls cannot "
                                  "be intercepted on edges")
    if point in cfg.table_targets:
        raise ProbePlacementError(f"{hexaddr(point)} is reached through a jump table")
    preds = sorted(set(cfg.preds.get(point, [])))
    if not preds:
        raise ProbePlacementError(f"{hexaddr(point)} has no predecessor in {fn.name}")
    if len(preds) > MAX_SITES:
        raise ProbePlacementError(f"{hexaddr(point)} has {len(preds)} predecessors (at most "
                                  f"{MAX_SITES} can be patched)")
    regions = []
    for p in preds:
        insns = cfg.tail_region(p)
        start, end = insns[0].address, insns[-1].end
        if start <= point < end:
            raise ProbePlacementError(f"{hexaddr(point)} lies inside the tail of its own "
                                      f"predecessor {hexaddr(p)}")
        last = insns[-1]
        falls_into = end == point and not last.ends_flow
        leads = falls_into or (last.branch in ("jmp", "jcc") and last.target == point)
        if not leads:
            raise ProbePlacementError(f"{hexaddr(p)} reaches {hexaddr(point)} by "
                                      f"`{last.text}`, which a stub cannot redirect")
        for i in insns:
            if i.branch in ("jmp", "jcc") and start < i.target < end:
                raise ProbePlacementError(f"tail of {hexaddr(p)}: `{i.text}` jumps inside "
                                          "the displaced instructions")
            if i.is_indirect_jump:
                raise ProbePlacementError(f"tail of {hexaddr(p)}: indirect `{i.text}`")
        _check_relocatable(insns, f"tail of {hexaddr(p)}")
        regions.append(Region(start, end, tuple(insns), False, point,
                              cfg.block_containing(start)))
    regions.sort(key=lambda r: r.start)
    for a, b in zip(regions, regions[1:]):
        if a.end > b.start:
            raise ProbePlacementError(f"{hexaddr(point)}: the tails of two predecessors "
                                      "overlap")
    return tuple(regions)


def place_probe(fn: FunctionModel, kind: str, point: int | None,
                read: Callable[[int, int], bytes], *, site: str = SITE_BLOCK,
                entries: frozenset[int] = frozenset(), root: bool = True,
                edges: bool = True) -> ProbeLayout:
    """Decide how to probe ``point`` (a block start or an instruction inside a block) of
    ``fn``: direct, else (block starts only) on its edges; ProbePlacementError if neither.

    ``read(address, size)`` gives the code bytes (link-time addresses: the file, or the
    loaded binary's memory).  ``entries`` are other function entries of the binary
    (never crossed).  Wrapper sites (``entry``/``return``) need no placement.
    """
    if site != SITE_BLOCK:
        if not root:
            raise ProbePlacementError("entry/return probes exist for the measured function only")
        return ProbeLayout(Probe(kind, site, None, MECH_WRAPPER), fn.name, ())
    cfg = _Cfg(fn, read, entries)
    if point is None:
        raise ProbePlacementError("a block probe needs an address")
    try:
        region = _direct_region(cfg, point)
        return ProbeLayout(Probe(kind, SITE_BLOCK, point, MECH_DIRECT, ()), fn.name,
                           (region,))
    except ProbePlacementError as direct_failure:
        if not edges or point not in cfg.blocks:
            raise
        try:
            regions = _edge_regions(cfg, point)
        except ProbePlacementError as edge_failure:
            raise ProbePlacementError(f"{direct_failure}; on its edges: {edge_failure}") \
                from None
    return ProbeLayout(Probe(kind, SITE_BLOCK, point, MECH_EDGE,
                             tuple(r.pass_block for r in regions)), fn.name, regions)


def placements(functions: Mapping[str, FunctionModel], root: str, columns_blocks: Sequence[int],
               splits: Sequence[int], read: Callable[[int, int], bytes],
               kinds: Sequence[str] = (KIND_STOP, KIND_START)
               ) -> tuple[dict[str, ProbeLayout], dict[str, str]]:
    """Probe layouts for every candidate point (block starts of all ``functions`` and
    split points) and the wrapper sites: (probe key → layout, probe key → why not)."""
    entries = frozenset(f.entry for f in functions.values())
    owner: dict[int, FunctionModel] = {}
    for f in functions.values():
        for b in f.blocks:
            owner[b.address] = f
    ok: dict[str, ProbeLayout] = {}
    bad: dict[str, str] = {}
    for kind in kinds:
        for site in (SITE_ENTRY, SITE_RETURN):
            lay = place_probe(functions[root], kind, None, read, site=site)
            ok[lay.probe.key] = lay
    points = [a for a in columns_blocks] + list(splits)
    for a in points:
        f = owner.get(a)
        if f is None:
            for g in functions.values():
                if any(b.address < a < b.end for b in g.blocks):
                    f = g
                    break
        for kind in kinds:
            key = Probe(kind, SITE_BLOCK, a, MECH_DIRECT).key
            if f is None:
                bad[key] = f"{hexaddr(a)} is in no modelled function"
                continue
            try:
                lay = place_probe(f, kind, a, read, entries=entries)
                ok[key] = lay
            except ProbePlacementError as exc:
                bad[key] = str(exc)
    return ok, bad


# =========================================================================================
# machine code of the wrapper and the stubs
# =========================================================================================

class _Asm:
    """A tiny two-pass assembler: every item has a fixed size (rel32 forms only), so
    offsets are known before addresses; labels and absolute targets resolve at emit."""

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.size = 0
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        if name in self.labels:
            raise AssertionError(f"label {name} twice")
        self.labels[name] = self.size

    def raw(self, data: bytes) -> None:
        self.items.append(("raw", data))
        self.size += len(data)

    def rel(self, kind: str, target: Any, cc: int = 0) -> None:
        """jmp/call/jcc rel32 to a label (str) or an absolute runtime address (int)."""
        n = {"jmp": enc.JMP_SIZE, "call": enc.CALL_SIZE, "jcc": enc.JCC_SIZE}[kind]
        self.items.append((kind, target, cc))
        self.size += n

    def rip(self, prefix: bytes, target: Any, suffix: bytes = b"") -> None:
        """An instruction ``prefix disp32 suffix`` with a RIP-relative operand."""
        self.items.append(("rip", prefix, target, suffix))
        self.size += len(prefix) + 4 + len(suffix)

    def emit(self, base: int, resolve: Callable[[Any], int]) -> bytes:
        def addr(t: Any) -> int:
            return base + self.labels[t] if isinstance(t, str) else resolve(t)

        out = bytearray()
        for it in self.items:
            at = base + len(out)
            kind = it[0]
            if kind == "raw":
                out += it[1]
            elif kind == "jmp":
                out += enc.jmp_rel32(at, addr(it[1]))
            elif kind == "call":
                out += enc.call_rel32(at, addr(it[1]))
            elif kind == "jcc":
                out += enc.jcc_rel32(it[2], at, addr(it[1]))
            elif kind == "rip":
                _, prefix, t, suffix = it
                n = len(prefix) + 4 + len(suffix)
                out += prefix + enc.rel32(at, n, addr(t)) + suffix
        return bytes(out)


# Register pushes/pops and the TSC instructions (bytes checked by capstone in the tests).
PUSH = {"rax": b"\x50", "rcx": b"\x51", "rdx": b"\x52", "rbx": b"\x53"}
POP = {"rax": b"\x58", "rcx": b"\x59", "rdx": b"\x5a", "rbx": b"\x5b"}
LFENCE = b"\x0f\xae\xe8"
MFENCE = b"\x0f\xae\xf0"
RDTSC = b"\x0f\x31"
RDTSCP = b"\x0f\x01\xf9"
CPUID = b"\x0f\xa2"
MOV_EAX_0 = b"\xb8\x00\x00\x00\x00"
MOV_ECX_0 = b"\xb9\x00\x00\x00\x00"
RET = b"\xc3"
INT3 = b"\xcc"
# RIP-relative forms (opcode bytes before the disp32)
JMP_MEM = b"\xff\x25"              # jmp qword ptr [rip+d]
POP_MEM = b"\x8f\x05"              # pop qword ptr [rip+d]
PUSH_MEM = b"\xff\x35"             # push qword ptr [rip+d]
MOV_MEM_EAX = b"\x89\x05"          # mov dword ptr [rip+d], eax
MOV_MEM_ECX = b"\x89\x0d"          # mov dword ptr [rip+d], ecx
MOV_MEM_EDX = b"\x89\x15"          # mov dword ptr [rip+d], edx
MOV_MEM_IMM32 = b"\xc7\x05"        # mov dword ptr [rip+d], imm32 (imm after the disp)
LEA_RAX = b"\x48\x8d\x05"          # lea rax, [rip+d]
MOV_MEM_RAX = b"\x48\x89\x05"      # mov qword ptr [rip+d], rax


def _reader(asm: _Asm, kind: str, method: str, data: Callable[[int], tuple],
            through: int | None = None) -> None:
    """The TSC reading of wf_tsc.h for ``method``, then stores of lo, hi, aux, fired.

    Start readers take TSC_AUX with an RDTSCP before the fences, as wf_tsc_start_* does
    (outside the region); stop readers get it from their own RDTSCP."""
    if method == "lfence":
        seq = (RDTSCP + LFENCE + RDTSC + LFENCE) if kind == KIND_START else (RDTSCP + LFENCE)
        asm.raw(seq)
        _store_reading(asm, data, True, through)
    elif method == "mfence":
        seq = (RDTSCP + MFENCE + LFENCE + RDTSC + LFENCE) if kind == KIND_START \
            else (MFENCE + RDTSCP + LFENCE)
        asm.raw(seq)
        _store_reading(asm, data, True, through)
    elif method == "rdtscp":
        asm.raw(RDTSCP)
        _store_reading(asm, data, True, through)
    elif method == "cpuid":
        if kind == KIND_START:
            # aux first (CPUID overwrites ECX), then CPUID(leaf 0); RDTSC
            asm.raw(RDTSCP)
            asm.rip(MOV_MEM_ECX, data(OFF_AUX))
            asm.raw(MOV_EAX_0 + MOV_ECX_0 + CPUID + RDTSC)
            _store_reading(asm, data, store_aux=False)
        else:
            # RDTSCP; store; CPUID(leaf 0) as the trailing fence
            asm.raw(RDTSCP)
            _store_reading(asm, data, True, through)
            asm.raw(MOV_EAX_0 + MOV_ECX_0 + CPUID)
    else:
        raise MeasurementError(f"timing method {method!r} cannot be used in a probe stub "
                               f"(supported: {', '.join(STUB_METHODS)})")


# stores through RBX (a stop probe's destination pointer)
MOV_RBX_MEM = b"\x48\x8b\x1d"                       # mov rbx, qword ptr [rip+d]
MOV_RBX4_EAX = b"\x89\x43" + bytes((OFF_LO,))      # mov dword ptr [rbx+4], eax
MOV_RBX8_EDX = b"\x89\x53" + bytes((OFF_HI,))      # mov dword ptr [rbx+8], edx
MOV_RBX12_ECX = b"\x89\x4b" + bytes((OFF_AUX,))    # mov dword ptr [rbx+12], ecx
MOV_RBX_1 = b"\xc7\x03\x01\x00\x00\x00"            # mov dword ptr [rbx], 1


def _store_reading(asm: _Asm, data: Callable[[int], tuple], store_aux: bool,
                   through: int | None = None) -> None:
    """Store lo, hi, (aux), fired: into the state, or (``through`` = a slot offset)
    wherever that slot points."""
    if through is None:
        asm.rip(MOV_MEM_EAX, data(OFF_LO))
        asm.rip(MOV_MEM_EDX, data(OFF_HI))
        if store_aux:
            asm.rip(MOV_MEM_ECX, data(OFF_AUX))
        asm.rip(MOV_MEM_IMM32, data(OFF_FIRED), struct.pack("<I", 1))
        return
    asm.rip(MOV_RBX_MEM, data(through))
    asm.raw(MOV_RBX4_EAX + MOV_RBX8_EDX)
    if store_aux:
        asm.raw(MOV_RBX12_ECX)
    asm.raw(MOV_RBX_1)


def _retarget_slots(asm: _Asm, n_sites: int, data: Callable[[int], tuple],
                    to_scratch: bool = False) -> None:
    """Point every slot to its continuation (start probes' dispatch) or to the scratch
    area (stop probes' store destination); flag-free: LEA + MOV."""
    for k in range(n_sites):
        asm.rip(LEA_RAX, data(OFF_SCRATCH) if to_scratch else f"cont{k}")
        asm.rip(MOV_MEM_RAX, data(OFF_SLOT + 8 * k))


def _read_path(asm: _Asm, k: int, kind: str, method: str, n_sites: int,
               data: Callable[[int], tuple]) -> None:
    """Reading path of site ``k``: save, (retarget), read, store, (retarget), restore,
    jump to the site's continuation."""
    stop = kind == KIND_STOP
    regs = ["rax", "rcx", "rdx"] + (["rbx"] if method == "cpuid" or stop else [])
    asm.label(f"read{k}")
    asm.raw(enc.lea_rsp(-enc.RED_ZONE))
    for r in regs:
        asm.raw(PUSH[r])
    if not stop:
        _retarget_slots(asm, n_sites, data)
    _reader(asm, kind, method, data, through=OFF_SLOT + 8 * k if stop else None)
    if stop:
        _retarget_slots(asm, n_sites, data, to_scratch=True)
    for r in reversed(regs):
        asm.raw(POP[r])
    asm.raw(enc.lea_rsp(enc.RED_ZONE))
    asm.rel("jmp", f"cont{k}")


def _relocated(asm: _Asm, insns: Sequence[Insn], bias: int, edge_label: str | None,
               edge_to: int | None) -> None:
    """The displaced instructions, relocated; branches to ``edge_to`` go to
    ``edge_label``."""
    for i in insns:
        if i.branch == "call":
            asm.rel("call", ("abs", i.target))
        elif i.branch in ("jmp", "jcc"):
            tgt: Any = edge_label if (edge_to is not None and i.target == edge_to) \
                else ("abs", i.target)
            if i.branch == "jmp":
                asm.rel("jmp", tgt)
            else:
                asm.rel("jcc", tgt, enc.JCC_CODES[i.mnemonic])
        elif i.rip_target is not None:
            off = i.rip_disp_offset
            asm.rip(i.raw[:off], ("abs", i.rip_target), i.raw[off + 4:])
        else:
            asm.raw(i.raw)


@dataclass
class _Built:
    code: bytes
    slots_armed: list[int]          # slot values before each call (see assemble)
    wrapper: int                    # runtime address of the wrapper
    patches: list[tuple[int, bytes, bytes]]   # (runtime address, original, patch bytes)


def assemble(layout: ProbeLayout, method: str, *, bias: int, fn_entry: int,
             code_address: int, data_address: int) -> _Built:
    """Machine code of the wrapper and the probe's stubs for concrete addresses.

    ``bias``: runtime = link-time + bias.  ``fn_entry``: runtime address the wrapper
    calls.  Returns the code (to be placed at ``code_address``), the armed slot values
    and the patches to write into the original code."""
    if method not in STUB_METHODS:
        raise MeasurementError(f"timing method {method!r} cannot be used in a probe stub "
                               f"(supported: {', '.join(STUB_METHODS)})")
    probe = layout.probe
    kind = probe.kind
    n = layout.sites
    if n > MAX_SITES:
        raise ProbePlacementError(f"{probe.key}: {n} patch sites, at most {MAX_SITES}")
    asm = _Asm()

    def data(off: int) -> tuple:
        return ("data", off)

    # -- the wrapper ------------------------------------------------------------------------
    asm.label("wrapper")
    asm.rip(POP_MEM, data(OFF_SAVED))
    if probe.site == SITE_ENTRY:
        asm.rel("jmp", "check0")            # as the patched jmp at a block: one direct jmp
    asm.label("call")
    asm.rel("call", ("rt", fn_entry))
    if probe.site == SITE_RETURN:
        asm.rel("jmp", "check0")
    asm.label("tail")
    asm.rip(PUSH_MEM, data(OFF_SAVED))
    asm.raw(RET)
    # -- per site: check (dispatch), continuation ---------------------------------------------
    def check(k: int) -> None:
        asm.label(f"check{k}")
        if kind == KIND_STOP:
            asm.rel("jmp", f"read{k}")
        else:
            asm.rip(JMP_MEM, data(OFF_SLOT + 8 * k))

    if probe.site in (SITE_ENTRY, SITE_RETURN):
        check(0)
        asm.label("cont0")
        # the continuation's own jump, as a block probe's jump back after its displaced
        # instructions
        asm.rel("jmp", "call" if probe.site == SITE_ENTRY else "tail")
    else:
        for k, r in enumerate(layout.regions):
            if r.check_entry:
                asm.label(f"region{k}")
                check(k)
                asm.label(f"cont{k}")
                _relocated(asm, r.insns, bias, None, None)
                asm.rel("jmp", ("abs", r.end))
            else:
                asm.label(f"region{k}")
                _relocated(asm, r.insns, bias, f"check{k}", r.edge_to)
                last = r.insns[-1]
                if not last.ends_flow:
                    asm.rel("jmp", f"check{k}" if r.end == r.edge_to else ("abs", r.end))
                check(k)
                asm.label(f"cont{k}")
                asm.rel("jmp", ("abs", r.edge_to))
    for k in range(n):
        _read_path(asm, k, kind, method, n, data)

    def resolve(t: tuple) -> int:
        if t[0] == "abs":
            return t[1] + bias
        if t[0] == "rt":
            return t[1]
        if t[0] == "data":
            return data_address + t[1]
        raise AssertionError(t)

    try:
        code = asm.emit(code_address, resolve)
    except enc.EncodingError as exc:
        raise ProbePlacementError(f"{probe.key}: {exc}") from None
    # what the C loop writes into each slot before every call: a start probe's dispatch
    # target (its reading path), a stop probe's store destination (the state itself)
    armed = [data_address if kind == KIND_STOP else code_address + asm.labels[f"read{k}"]
             for k in range(n)]
    patches = []
    for k, r in enumerate(layout.regions):
        at = r.start + bias
        patch = enc.jmp_rel32(at, code_address + asm.labels[f"region{k}"])
        patch += INT3 * (r.size - JMP_LEN)
        original = b"".join(i.raw for i in r.insns)
        patches.append((at, original, patch))
    return _Built(code, armed, code_address + asm.labels["wrapper"], patches)


# =========================================================================================
# installing and timing (in the measuring process)
# =========================================================================================

_libc = ctypes.CDLL(None, use_errno=True)
_mprotect = _libc.mprotect
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
PAGE = os.sysconf("SC_PAGE_SIZE")
PROT_R, PROT_W, PROT_X = 1, 2, 4


def _protect(address: int, size: int, prot: int) -> None:
    lo = address & ~(PAGE - 1)
    hi = (address + size + PAGE - 1) & ~(PAGE - 1)
    if _mprotect(lo, hi - lo, prot) != 0:
        err = ctypes.get_errno()
        raise MeasurementError(f"mprotect({lo:#x}, {hi - lo}) for a probe patch failed: "
                               f"{os.strerror(err)}")


def _write_code(address: int, data: bytes) -> None:
    _protect(address, len(data), PROT_R | PROT_W)
    try:
        ctypes.memmove(address, data, len(data))
    finally:
        _protect(address, len(data), PROT_R | PROT_X)


def native_lib() -> tuple[Any, Any]:
    from wcetfit.timing.tsc import native

    ffi, lib = native()
    if not hasattr(lib, "wf_probe_time"):
        raise NativeBuildError("wcetfit._native has no probe timing loop (wf_probe.c); "
                               "run `make setup`")
    if int(lib.wf_probe_state_size()) != STATE_SIZE:
        raise NativeBuildError("wcetfit._native's probe state layout differs from "
                               "wcetfit.split.probe's; run `make setup`")
    return ffi, lib


@dataclass(frozen=True)
class ProbeSamples:
    """Raw samples of one input under one probe."""

    ticks: np.ndarray          # float64 [repeats]: the probe's region; NaN = not measured
    fired: int                 # repeats in which the probe read the clock
    migrated: int              # repeats discarded because two readings came from two CPUs
    whole: np.ndarray          # float64 [repeats]: stop - start of the whole wrapper call


class InstalledProbe:
    """One probe configuration, live in this process: stubs + wrapper in memory near the
    binary, patches written into the original code.  Use as a context manager; the
    original bytes are restored on exit (and checked when installed)."""

    def __init__(self, binary: Any, layout: ProbeLayout, fn_entry_link: int,
                 method: str = "lfence") -> None:
        from wcetfit.loader import PROT_EXEC, PROT_READ, alloc_near

        self.binary = binary
        self.layout = layout
        self.method = method
        lo, hi = binary.span()
        probe_size = 4 * PAGE            # wrapper + 16 sites' stubs and reading paths: < 8 KB
        self._mem = alloc_near(lo, hi, probe_size + PAGE)
        code_size = self._mem.size - PAGE
        self.code_address = self._mem.address
        self.data_address = self._mem.address + code_size
        built = assemble(layout, method, bias=binary.bias,
                         fn_entry=binary.runtime(fn_entry_link),
                         code_address=self.code_address, data_address=self.data_address)
        if len(built.code) > code_size:
            self._mem.close()
            raise ProbePlacementError(f"{layout.probe.key}: stub code of {len(built.code)} "
                                      "bytes does not fit")
        self._mem.write(0, built.code + INT3 * (code_size - len(built.code)))
        self._mem.protect(0, code_size, PROT_READ | PROT_EXEC)
        self.wrapper = built.wrapper
        self.patches = built.patches
        st = (ctypes.c_uint8 * STATE_SIZE).from_address(self.data_address)
        ctypes.memset(self.data_address, 0, STATE_SIZE)
        struct.pack_into("<I", st, OFF_NSITES, len(built.slots_armed))
        for k, a in enumerate(built.slots_armed):
            struct.pack_into("<Q", st, OFF_ARMED + 8 * k, a)
            struct.pack_into("<Q", st, OFF_SLOT + 8 * k, a)
        self.installed = False

    # -- patches ----------------------------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        for at, original, _patch in self.patches:
            now = ctypes.string_at(at, len(original))
            if now != original:
                raise MeasurementError(f"probe {self.layout.probe.key}: the code at "
                                       f"{hexaddr(self.binary.link_time(at))} is not what "
                                       "the static model says (already patched?)")
        done = []
        try:
            for at, _original, patch in self.patches:
                _write_code(at, patch)
                done.append(at)
        except BaseException:
            for at, original, _patch in self.patches:
                if at in done:
                    _write_code(at, original)
            raise
        self.installed = True

    def remove(self) -> None:
        if not self.installed:
            return
        for at, original, _patch in self.patches:
            _write_code(at, original)
        self.installed = False

    def close(self) -> None:
        self.remove()
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def __enter__(self) -> "InstalledProbe":
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- state ------------------------------------------------------------------------------
    def fired(self) -> bool:
        return struct.unpack_from("<I", ctypes.string_at(self.data_address, 4))[0] == 1

    def arm(self) -> None:
        """Re-arm for a plain (untimed) call: the C loop does this itself."""
        raw = ctypes.string_at(self.data_address, STATE_SIZE)
        n = struct.unpack_from("<I", raw, OFF_NSITES)[0]
        ctypes.memset(self.data_address, 0, 16)
        for k in range(n):
            a = struct.unpack_from("<Q", raw, OFF_ARMED + 8 * k)[0]
            ctypes.c_uint64.from_address(self.data_address + OFF_SLOT + 8 * k).value = a

    def reading(self) -> int:
        raw = ctypes.string_at(self.data_address, 16)
        lo, hi = struct.unpack_from("<II", raw, OFF_LO)
        return (hi << 32) | lo

    # -- timing -----------------------------------------------------------------------------
    def call(self, harness: Any, function: str, pack: Any) -> Any:
        """One plain call through the wrapper (arguments restored, probe re-armed)."""
        self.arm()
        return harness.call(function, self.wrapper, pack)

    def time(self, harness: Any, function: str, pack: Any, restore: "RestoreTable",
             repeats: int, warmup: int = 2) -> ProbeSamples:
        """``warmup`` untimed and ``repeats`` timed calls through the wrapper; per repeat
        the probe's region in ticks (NaN where it did not fire or migrated)."""
        from wcetfit.timing.tsc import aux_cpu, method_id

        ffi, lib = native_lib()
        hffi = harness.ffi
        call = int(hffi.cast("uintptr_t", hffi.addressof(harness.lib, f"wf_call_{function}")))
        args = int(hffi.cast("uintptr_t", pack.struct))
        sig = harness.signature(function)
        if sig.returns_void:
            ret_obj = None
            ret = 0
        else:
            ret_obj = hffi.new(hffi.getctype(hffi.typeof(sig.result), "*"))
            ret = int(hffi.cast("uintptr_t", ret_obj))
        t0 = np.zeros(repeats, np.uint64)
        t1 = np.zeros(repeats, np.uint64)
        tp = np.zeros(repeats, np.uint64)
        c0 = np.zeros(repeats, np.uint32)
        c1 = np.zeros(repeats, np.uint32)
        cp = np.zeros(repeats, np.uint32)
        rc = lib.wf_probe_time(
            method_id(self.method), ffi.cast("void *", call), ffi.cast("void *", self.wrapper),
            ffi.cast("void *", args), ffi.cast("void *", ret),
            ffi.cast("struct wf_probe_copy *", restore.address), restore.count,
            ffi.cast("void *", self.data_address), warmup, repeats,
            ffi.from_buffer("uint64_t[]", t0), ffi.from_buffer("uint64_t[]", t1),
            ffi.from_buffer("uint64_t[]", tp), ffi.from_buffer("uint32_t[]", c0),
            ffi.from_buffer("uint32_t[]", c1), ffi.from_buffer("uint32_t[]", cp))
        del ret_obj
        if rc != 0:
            raise MeasurementError(f"wf_probe_time rejected its arguments (rc {rc})")
        fired = tp != 0
        if self.layout.probe.kind == KIND_STOP:
            ticks = (tp.astype(np.int64) - t0.astype(np.int64)).astype(np.float64)
            other = aux_cpu(c0)
        else:
            ticks = (t1.astype(np.int64) - tp.astype(np.int64)).astype(np.float64)
            other = aux_cpu(c1)
        migrated = fired & (aux_cpu(cp) != other)
        ticks[~fired | migrated] = np.nan
        whole = (t1.astype(np.int64) - t0.astype(np.int64)).astype(np.float64)
        whole[aux_cpu(c0) != aux_cpu(c1)] = np.nan
        return ProbeSamples(ticks, int(fired.sum()), int(migrated.sum()), whole)


class RestoreTable:
    """The argument memory of one packed call, as the C loop restores it: copies of the
    initial bytes of every restorable buffer (from the harness's public snapshot)."""

    def __init__(self, harness: Any, pack: Any) -> None:
        ffi, _lib = native_lib()
        initial = harness.snapshot(pack)
        self._keep = [ffi.new("char[]", max(len(b), 1)) for b in initial]
        for buf, data in zip(self._keep, initial):
            ffi.memmove(buf, data, len(data))
        self.count = len(initial)
        self._table = ffi.new("struct wf_probe_copy[]", max(self.count, 1))
        for k, (b, data) in enumerate(zip(pack.buffers, initial)):
            self._table[k].dst = ffi.cast("void *", b.address)
            self._table[k].src = self._keep[k]
            self._table[k].len = len(data)
        self.address = int(ffi.cast("uintptr_t", self._table))


# =========================================================================================
# the binary's writable data (for the differential check)
# =========================================================================================

def differential_check(probe: InstalledProbe, harness: Any, function: str, pack: Any,
                       original: int, data: WritableData | None = None,
                       index: int | None = None) -> None:
    """Same return value, same argument memory and same writable data of the binary with
    the probe as without it, from the same initial state; SelfCheckError otherwise."""
    from wcetfit.errors import SelfCheckError

    where = "" if index is None else f" for input {index}"
    saved = data.save() if data is not None else None
    was = probe.installed
    probe.remove()
    try:
        ret0 = harness.call(function, original, pack)
        mem0 = harness.snapshot(pack)
        glob0 = data.save() if data is not None else None
    finally:
        if saved is not None:
            data.restore(saved)
        if was:
            probe.install()
    ret1 = probe.call(harness, function, pack)
    mem1 = harness.snapshot(pack)
    glob1 = data.save() if data is not None else None
    if saved is not None:
        data.restore(saved)
    harness.restore(pack)
    if not _same(ret0, ret1):
        raise SelfCheckError(f"probe {probe.layout.probe.key}{where}: {function} returned "
                             f"{ret1!r} with the probe, {ret0!r} without")
    if mem0 != mem1:
        raise SelfCheckError(f"probe {probe.layout.probe.key}{where}: argument memory after "
                             f"{function} differs with the probe")
    if glob0 != glob1:
        raise SelfCheckError(f"probe {probe.layout.probe.key}{where}: {function} left "
                             "different data in the binary's writable memory with the probe")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b
