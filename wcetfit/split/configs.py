"""Probe configurations and their count rows, cut from the count run's block traces.

Whole-call times cannot separate blocks that always execute together, nor blocks tied by
flow conservation (DESIGN.md, "Identifiability").  A *probe* moves one clock reading to a
block boundary (the mechanism: :mod:`wcetfit.split.placement`, :mod:`wcetfit.split.stubs`,
:mod:`wcetfit.split.install`):

* ``stop`` at X: start at function entry, stop at the FIRST arrival at X.  The call's
  counts up to that moment are the counts of the blocks executed before X first ran;
* ``start`` at X: start at the first arrival at X, stop at return: the rest.

Both are cut from the count run's block trace (:func:`prefix_counts`), so a probe's rows
are known before it is measured — which is what lets the planner score candidates by the
rank they would add.  Two special sites live in the call wrapper of :mod:`wcetfit.split.stubs`:
``entry`` (before the call instruction: a stop there reads zero blocks, a start there
reads the whole call) and ``return`` (after the function returned).

Columns.  One unknown per *segment*: a block, or a piece of a block cut at an instruction
boundary by ``--at`` (a split point p inside block B makes B = [B, p) + [p, end); every
row gives both pieces B's count, except a probe at p, whose row has the first piece once
more than B's prefix).  Then the probe-code unknowns:

* one overhead ε per configuration *family*, "its own overhead term where the probe code
  differs": every stop probe runs the same stub code before its reading (the patched
  jump, the stub's indirect dispatch jump, three pushes, the fence and RDTSCP), wherever
  it sits, so all stop probes share ε_stop; start probes share ε_start; the whole-call
  timing of the timing run keeps its own ε_0 (different code: the harness's readers
  around a direct call).  Sharing is not a convenience but the whole point: a probe's
  rows differ from the whole-call rows mostly by a *constant* (the partial iteration
  before the stop), and a constant is exactly what a private ε would swallow — with one
  ε per probe, no probe could ever separate two co-executed blocks.  The entry probe
  (a stop before the call: zero blocks) measures ε_stop alone, which separates even the
  always-once entry block from the overheads; without it (``entry=False`` in
  :func:`~wcetfit.split.planner.candidate_probes`) the entry block stays confounded with
  the ε's only.
* δ columns for stub *passes* that happen inside the timed region besides the one that
  reads the clock: a start probe's later arrivals at X (each goes through the stub's
  dispatch: two jumps more than the original code), and an edge probe's extra passes
  through the relocated tails of X's predecessors (:mod:`wcetfit.split.placement`, short blocks).
  Their counts come from the trace too; one δ per kind of pass.  A column that is zero
  in every row is simply absent.

The planner (:mod:`wcetfit.split.planner`) scores candidates by these rows, the joint
system (:mod:`wcetfit.split.joint`) stacks them with the measured times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetfitError
from wcetfit.model import hexaddr, parse_addr


KIND_STOP = "stop"
KIND_START = "start"
KINDS = (KIND_STOP, KIND_START)

SITE_BLOCK = "block"      # a block start or a split point inside a block
SITE_ENTRY = "entry"      # in the call wrapper, before the call instruction
SITE_RETURN = "return"    # in the call wrapper, after the function returned
SITES = (SITE_BLOCK, SITE_ENTRY, SITE_RETURN)

MECH_DIRECT = "direct"    # jmp patched at the probe point itself
MECH_EDGE = "edge"        # jmps patched in the tails of the probe point's predecessors
MECH_WRAPPER = "wrapper"  # the call wrapper's own sites (entry, return)
MECHANISMS = (MECH_DIRECT, MECH_EDGE, MECH_WRAPPER)

# Configuration ids (one overhead ε each): the whole call, the stop and start families.
CONFIG_WHOLE = 0
CONFIG_STOP = 1
CONFIG_START = 2

# δ columns: kinds of stub passes inside the timed region (see module docstring).
PASS_STOP_EDGE = "stop-edge"        # extra passes through patched predecessor tails
PASS_START_DIRECT = "start-direct"  # later arrivals at a start probe's point
PASS_START_EDGE = "start-edge"      # passes through patched tails after the start reading
PASS_KINDS = (PASS_STOP_EDGE, PASS_START_DIRECT, PASS_START_EDGE)

# Pseudo "addresses" of δ columns for the fit's column list: far above any user-space
# address, so they can never collide with a block.
PSEUDO_BASE = 0xFFFF_F000_0000_0000


# =========================================================================================
# traces → counts up to / from the first arrival
# =========================================================================================

def first_positions(trace: np.ndarray, n_ids: int) -> np.ndarray:
    """Position of the first occurrence of every id in ``trace`` (-1: never ran)."""
    t = np.asarray(trace, dtype=np.int64)
    first = np.full(n_ids, -1, dtype=np.int64)
    if t.size:
        if int(t.max()) >= n_ids or int(t.min()) < 0:
            raise WcetfitError(f"block trace holds id {int(t.max())} but there are only "
                               f"{n_ids} blocks")
        ids, pos = np.unique(t, return_index=True)
        first[ids] = pos
    return first


def prefix_counts(trace: np.ndarray, n_ids: int, targets: Sequence[int]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Counts of every block executed before the first arrival at each target.

    Returns ``(reached [len(targets)] bool, prefix [len(targets), n_ids] int64)``; the
    row of a target the trace never reaches is all zeros (and ``reached`` False).  One
    pass over the trace whatever the number of targets: every entry falls in the bucket
    of the first arrivals it precedes, and a cumulative sum over the buckets gives all
    the prefixes.
    """
    t = np.asarray(trace, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    first = first_positions(t, n_ids)
    pos = first[targets] if targets.size else np.zeros(0, np.int64)
    reached = pos >= 0
    out = np.zeros((targets.size, n_ids), dtype=np.int64)
    if not reached.any():
        return reached, out
    p = np.unique(pos[reached])                       # sorted distinct positions
    # bucket(j) = number of first-arrival positions <= j; entry j counts towards the
    # prefix of position p[k] iff j < p[k] iff bucket(j) <= k.
    bucket = np.searchsorted(p, np.arange(t.size), side="right")
    hist = np.bincount(bucket * n_ids + t, minlength=(p.size + 1) * n_ids)
    cum = np.cumsum(hist.reshape(p.size + 1, n_ids), axis=0)
    k = np.searchsorted(p, pos[reached])
    out[reached] = cum[k]
    return reached, out


def counts_before(trace: np.ndarray, n_ids: int, target: int) -> np.ndarray | None:
    """Counts of each block up to (not including) the first arrival at ``target``; None
    if the trace never reaches it."""
    reached, rows = prefix_counts(trace, n_ids, [target])
    return rows[0] if reached[0] else None


def counts_from(trace: np.ndarray, n_ids: int, target: int) -> np.ndarray | None:
    """Counts of each block from the first arrival at ``target`` (included) to the end;
    None if the trace never reaches it."""
    before = counts_before(trace, n_ids, target)
    if before is None:
        return None
    total = np.bincount(np.asarray(trace, dtype=np.int64), minlength=n_ids)
    return total - before


# =========================================================================================
# probes and columns
# =========================================================================================

@dataclass(frozen=True)
class Probe:
    """One probe configuration.

    ``address`` is the probe point (a block start, or a split point inside a block) for
    ``site == "block"``, None for the wrapper sites.  ``pass_blocks`` are the blocks in
    which the patched regions start (edge probes: one per patched predecessor tail):
    every execution of such a block passes through a stub.
    """

    kind: str
    site: str
    address: int | None = None
    mechanism: str = MECH_DIRECT
    pass_blocks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WcetfitError(f"probe kind must be one of {KINDS}, not {self.kind!r}")
        if self.site not in SITES:
            raise WcetfitError(f"probe site must be one of {SITES}, not {self.site!r}")
        if self.mechanism not in MECHANISMS:
            raise WcetfitError(f"probe mechanism must be one of {MECHANISMS}, "
                               f"not {self.mechanism!r}")
        if (self.site == SITE_BLOCK) != (self.address is not None):
            raise WcetfitError("a block probe needs an address, a wrapper probe none")
        if (self.site == SITE_BLOCK) == (self.mechanism == MECH_WRAPPER):
            raise WcetfitError(f"a {self.site} probe cannot use the {self.mechanism} mechanism")

    @property
    def key(self) -> str:
        """Stable name: ``stop@0x1130``, ``start@entry`` ..."""
        where = hexaddr(self.address) if self.address is not None else self.site
        return f"{self.kind}@{where}"

    @property
    def target(self) -> tuple[str, int | None]:
        """What the probe measures (its rows), whatever the mechanism."""
        return (self.site, self.address)

    def describe(self) -> str:
        if self.site == SITE_ENTRY:
            where = "the function entry (before the call)"
        elif self.site == SITE_RETURN:
            where = "the return"
        else:
            where = f"the first arrival at {hexaddr(self.address)}"
        if self.kind == KIND_STOP:
            text = f"stop the clock at {where}"
        else:
            text = f"start the clock at {where}, stop at return"
        if self.mechanism == MECH_EDGE:
            text += (f" (probed on the edges from {', '.join(hexaddr(a) for a in self.pass_blocks)})")
        return text

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "site": self.site,
                "address": None if self.address is None else hexaddr(self.address),
                "mechanism": self.mechanism,
                "pass_blocks": [hexaddr(a) for a in self.pass_blocks],
                "key": self.key, "description": self.describe()}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Probe":
        return Probe(kind=d["kind"], site=d["site"],
                     address=None if d.get("address") is None else parse_addr(d["address"]),
                     mechanism=d.get("mechanism", MECH_DIRECT),
                     pass_blocks=tuple(parse_addr(a) for a in d.get("pass_blocks", ())))


def pass_kind(probe: Probe) -> str | None:
    """The δ column a probe's extra stub passes go to (None: it has none)."""
    if probe.kind == KIND_STOP:
        return PASS_STOP_EDGE if probe.mechanism == MECH_EDGE else None
    if probe.mechanism == MECH_EDGE:
        return PASS_START_EDGE
    if probe.mechanism == MECH_DIRECT:
        return PASS_START_DIRECT
    return None                      # wrapper sites run once per call


@dataclass(frozen=True)
class Columns:
    """The unknown block costs: blocks in trace-id order, refined by split points.

    ``blocks[i]`` is the address of compact trace id ``i`` (the count run's order: the
    measured function's blocks, then its callees').  ``splits`` are instruction
    addresses inside blocks (``--at``); each cuts its block into two segments.
    """

    blocks: tuple[int, ...]
    splits: tuple[int, ...] = ()
    ends: tuple[int, ...] | None = None     # block end addresses (to place split points)

    def __post_init__(self) -> None:
        if len(set(self.blocks)) != len(self.blocks):
            raise WcetfitError("block addresses are not unique")
        seg: list[int] = []
        owner: list[int] = []
        where = {}
        for s in sorted(set(self.splits)):
            b = self._block_of_split(s)
            where.setdefault(b, []).append(s)
        for i, a in enumerate(self.blocks):
            seg.append(a)
            owner.append(i)
            for s in where.get(i, ()):
                seg.append(s)
                owner.append(i)
        object.__setattr__(self, "_segments", tuple(seg))
        object.__setattr__(self, "_owner", np.asarray(owner, dtype=np.int64))

    def _block_of_split(self, s: int) -> int:
        if s in self.blocks:
            raise WcetfitError(f"split point {hexaddr(s)} is a block start already")
        best = None
        for i, a in enumerate(self.blocks):
            end = self.ends[i] if self.ends is not None else None
            if a < s and (end is None or s < end):
                if best is None or a > self.blocks[best]:
                    best = i
        if best is None:
            raise WcetfitError(f"split point {hexaddr(s)} is inside no block")
        return best

    @property
    def segments(self) -> tuple[int, ...]:
        return self._segments              # type: ignore[attr-defined]

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def n_segments(self) -> int:
        return len(self.segments)

    @property
    def owner(self) -> np.ndarray:
        """Block id of every segment."""
        return self._owner                 # type: ignore[attr-defined]

    def with_splits(self, more: Iterable[int]) -> "Columns":
        return replace(self, splits=tuple(sorted(set(self.splits) | set(more))))

    def segment_of(self, address: int) -> int:
        try:
            return self.segments.index(address)
        except ValueError:
            raise WcetfitError(f"{hexaddr(address)} is neither a block start nor a split "
                               "point") from None

    def block_of(self, address: int) -> int:
        return int(self.owner[self.segment_of(address)])

    def to_segments(self, block_counts: np.ndarray) -> np.ndarray:
        """Block counts [..., n_blocks] → segment counts [..., n_segments]."""
        return np.asarray(block_counts)[..., self.owner]

    def earlier_pieces(self, address: int) -> np.ndarray:
        """Indicator of the segments of ``address``'s block that lie before it."""
        s = self.segment_of(address)
        b = self.owner[s]
        ind = np.zeros(self.n_segments, dtype=np.int64)
        first = int(np.flatnonzero(self.owner == b)[0])
        ind[first:s] = 1
        return ind


# =========================================================================================
# rows of a probe configuration
# =========================================================================================

@dataclass(frozen=True)
class ProbeRows:
    """What one probe configuration measures, input by input."""

    probe: Probe
    indices: np.ndarray       # input indices whose call reaches the probe point
    counts: np.ndarray        # int64 [m, n_segments]: segment counts inside the region
    passes: np.ndarray        # int64 [m]: extra stub passes inside the region (δ column)


def probe_rows(probe: Probe, columns: Columns, traces: Mapping[int, np.ndarray],
               indices: Sequence[int] | None = None) -> ProbeRows:
    """The count rows of ``probe`` for every input with a trace (or ``indices``)."""
    return probe_rows_many([probe], columns, traces, indices)[0]


# The share of the memory available the probes' rows may take: the planner holds them
# again in its own layout (unique rows, then widened to its every column), and the
# machine runs other work (libexpat's XML_Parse, 3,888 blocks, 7,704 candidate probes ×
# 500 inputs, grew to 21.6 GB before the kernel killed it).
ROWS_MEMORY_SHARE = 1 / 6


def probe_rows_many(probes: Sequence[Probe], columns: Columns,
                    traces: Mapping[int, np.ndarray],
                    indices: Sequence[int] | None = None,
                    max_bytes: int | None = None) -> list[ProbeRows]:
    """:func:`probe_rows` for many probes with one pass over each trace.

    ``max_bytes``: the most the rows may take (default: :data:`ROWS_MEMORY_SHARE` of the
    memory available); past it, :class:`~wcetfit.errors.TooLarge` says how many inputs
    would fit."""
    from wcetfit.errors import TooLarge
    from wcetfit.machine import available_memory_bytes

    idx = sorted(traces) if indices is None else [int(i) for i in indices]
    if max_bytes is None:
        avail = available_memory_bytes()
        max_bytes = int(avail * ROWS_MEMORY_SHARE) if avail else None
    row_bytes = columns.n_segments * 8
    held = 0
    nb = columns.n_blocks
    # block ids whose first arrival we need: the probe points' blocks
    targets: list[int] = []
    for p in probes:
        if p.site == SITE_BLOCK:
            targets.append(columns.block_of(p.address))
    tgt = sorted(set(targets))
    tpos = {b: k for k, b in enumerate(tgt)}
    per: list[tuple[list[int], list[np.ndarray], list[int]]] = [([], [], []) for _ in probes]
    pieces = {p.address: columns.earlier_pieces(p.address) for p in probes
              if p.site == SITE_BLOCK}
    pass_ids = {p.key: np.asarray([columns.block_of(a) for a in p.pass_blocks], np.int64)
                for p in probes}
    for i in idx:
        if i not in traces:
            raise WcetfitError(f"input {i} has no block trace")
        tr = np.asarray(traces[i], dtype=np.int64)
        total = np.bincount(tr, minlength=nb) if tr.size else np.zeros(nb, np.int64)
        if total.size != nb:
            raise WcetfitError(f"input {i}: block trace holds ids beyond the {nb} blocks")
        reached, pre = prefix_counts(tr, nb, tgt)
        for k, p in enumerate(probes):
            if p.site == SITE_ENTRY:
                before, ok = np.zeros(nb, np.int64), True
                extra = np.zeros(columns.n_segments, np.int64)
            elif p.site == SITE_RETURN:
                before, ok = total, True
                extra = np.zeros(columns.n_segments, np.int64)
            else:
                j = tpos[columns.block_of(p.address)]
                ok = bool(reached[j])
                before = pre[j]
                extra = pieces[p.address]
            if not ok:
                continue
            seg_before = columns.to_segments(before) + extra
            if p.kind == KIND_STOP:
                row = seg_before
            else:
                row = columns.to_segments(total) - seg_before
            pk = pass_kind(p)
            passes = 0
            if pk == PASS_STOP_EDGE:
                # every execution of a pass block before X passes a stub; one of them
                # (the transfer into X) is the reading pass, the others are extra
                passes = int(before[pass_ids[p.key]].sum()) - 1
            elif pk == PASS_START_EDGE:
                passes = int((total - before)[pass_ids[p.key]].sum())
            elif pk == PASS_START_DIRECT:
                # later arrivals at the probe point's segment go through the stub
                s = columns.segment_of(p.address)
                passes = int(row[s]) - 1
            if passes < 0:
                raise WcetfitError(f"input {i}: {p.key}: negative stub passes: the pass "
                                   "blocks do not lead to the probe point")
            per[k][0].append(i)
            per[k][1].append(row)
            per[k][2].append(passes)
            held += row_bytes
        if max_bytes is not None and held > max_bytes:
            done = idx.index(i) + 1
            fits = max(0, int(done * max_bytes / held) - 1)
            raise TooLarge(
                f"the rows of {len(probes):,} candidate probes over {len(idx):,} inputs "
                f"({columns.n_segments:,} blocks each) outgrow memory: after {done:,} "
                f"inputs they held {held / 1e9:.1f} GB, past the {max_bytes / 1e9:.1f} GB "
                f"allowed (a sixth of what is available); "
                + (f"split with --inputs {fits} or fewer, or a function of fewer blocks"
                   if fits >= 20 else "split a function of fewer blocks: too few inputs "
                   "would fit to separate anything"))
    out = []
    ns = columns.n_segments
    for p, (ii, rows, ps) in zip(probes, per):
        out.append(ProbeRows(p, np.asarray(ii, dtype=np.int64),
                             np.asarray(rows, dtype=np.int64).reshape(len(rows), ns),
                             np.asarray(ps, dtype=np.int64)))
    return out


def config_id_of(probe: Probe) -> int:
    return CONFIG_STOP if probe.kind == KIND_STOP else CONFIG_START


CONFIG_NAMES = {CONFIG_WHOLE: "whole call (timing run)", CONFIG_STOP: "stop probes",
                CONFIG_START: "start probes"}
