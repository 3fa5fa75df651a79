"""Where a timing probe goes: the instructions a probe's jump displaces, per probe point.

A probe (:mod:`wcetfit.split.configs`) at a point X is installed by replacing X's first
whole instructions (at least 5 bytes) with a ``jmp rel32`` to its stub
(:mod:`wcetfit.split.stubs`).  This module decodes the original code (capstone), decides
which instructions move — a :class:`Region` — and refuses (:class:`ProbePlacementError`)
what cannot move: LOOP/JRCXZ/XBEGIN (no rel32 form), a region crossing a jump target.

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
   system (:mod:`wcetfit.split.configs`).  The reading pass itself costs as much as a direct
   probe's (one extra direct jump, then the dispatch jump).  Edges the stub cannot
   intercept — X reached through a jump table, X a function entry reached by calls, X
   inside one of its own predecessors' tails — leave X unprobeable; the planner works
   around it with the probes that remain (and says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from wcetfit.count import x86enc as enc
from wcetfit.errors import RelocationError
from wcetfit.model import FunctionModel, hexaddr
from wcetfit.split.configs import (KIND_START, KIND_STOP, MECH_DIRECT, MECH_EDGE, MECH_WRAPPER,
                                   SITE_BLOCK, SITE_ENTRY, SITE_RETURN, Probe)

JMP_LEN = 5
MAX_SITES = 16                  # WF_PROBE_MAX_SITES in wf_probe.h

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
