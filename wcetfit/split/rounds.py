"""Iterative block splitting: probe configurations, their count rows, planning, rounds.

Whole-call times cannot separate blocks that always execute together, nor blocks tied by
flow conservation (DESIGN.md, "Identifiability").  A *probe* moves one clock reading to a
block boundary (the mechanism is :mod:`wcetfit.split.probe`):

* ``stop`` at X: start at function entry, stop at the FIRST arrival at X.  The call's
  counts up to that moment are the counts of the blocks executed before X first ran;
* ``start`` at X: start at the first arrival at X, stop at return: the rest.

Both are cut from the count run's block trace (:func:`prefix_counts`), so a probe's rows
are known before it is measured — which is what lets the planner score candidates by the
rank they would add.  Two special sites live in the call wrapper of :mod:`wcetfit.split.probe`:
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
  :func:`candidate_probes`) the entry block stays confounded with the ε's only.
* δ columns for stub *passes* that happen inside the timed region besides the one that
  reads the clock: a start probe's later arrivals at X (each goes through the stub's
  dispatch: two jumps more than the original code), and an edge probe's extra passes
  through the relocated tails of X's predecessors (:mod:`wcetfit.split.probe`, short blocks).
  Their counts come from the trace too; one δ per kind of pass.  A column that is zero
  in every row is simply absent.

Planning.  Rank questions are answered exactly: rows are integer vectors, so their rank
over the rationals equals their rank modulo a large prime except when the prime divides
every nonzero maximal minor — probability about 1e-9 per decision for p = 2^31 − 1; two
primes are used and the larger rank wins.  No tolerance, no noise: the planner answers
"which quantities can these rows determine", the fit answers "how well".  A candidate's
score is its *net rank gain* (rank added minus unknown columns it introduces = the drop
of the nullity): any positive gain first, and among those the shortest timed regions
(the mean number of block executions in its rows: short regions are timed to a
fraction of a tick, long ones carry the loops' data-dependent spread into everything
they determine), then the larger gain, the segments it makes estimable alone, stop
before start probes and direct patches before edge probes (fewer stub passes to model).

Rounds persist in the target's store as datasets ``split-round-<n>``; they accumulate,
can be listed and dropped.  A round is one consistent measurement session: per input,
the whole call and every active probe back to back (the machine's speed drifts — this
VM shares its cores — and rows measured minutes apart do not belong in one system), so
it holds the timings of the probes it introduced *and* of the earlier rounds' probes,
and the fit after it uses its own rows only.  Dropping a round removes the probes it
introduced from every later fit.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import FitError, StoreError, WcetfitError
from wcetfit.model import hexaddr, parse_addr

log = logging.getLogger(__name__)

SCHEMA_SPLIT = "wcetfit.split/1"

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

ROUND_PREFIX = "split-round-"

# Two Mersenne/pseudo-Mersenne primes below 2^31: products of two residues fit in int64.
_PRIMES = (2_147_483_647, 2_147_483_629)


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


def probe_rows_many(probes: Sequence[Probe], columns: Columns,
                    traces: Mapping[int, np.ndarray],
                    indices: Sequence[int] | None = None) -> list[ProbeRows]:
    """:func:`probe_rows` for many probes with one pass over each trace."""
    idx = sorted(traces) if indices is None else [int(i) for i in indices]
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
    out = []
    ns = columns.n_segments
    for p, (ii, rows, ps) in zip(probes, per):
        out.append(ProbeRows(p, np.asarray(ii, dtype=np.int64),
                             np.asarray(rows, dtype=np.int64).reshape(len(rows), ns),
                             np.asarray(ps, dtype=np.int64)))
    return out


# =========================================================================================
# the joint system
# =========================================================================================

@dataclass(frozen=True)
class ConfigTimes:
    """Timings of one probe configuration: ``ticks[k]`` are the repeats of input
    ``indices[k]`` (NaN = not measured: probe not reached, migrated, failed)."""

    probe: Probe
    indices: np.ndarray
    ticks: np.ndarray          # float64 [m, repeats]


def config_id_of(probe: Probe) -> int:
    return CONFIG_STOP if probe.kind == KIND_STOP else CONFIG_START


CONFIG_NAMES = {CONFIG_WHOLE: "whole call (timing run)", CONFIG_STOP: "stop probes",
                CONFIG_START: "start probes"}


@dataclass(frozen=True)
class JointSystem:
    """Rows of the whole-call timing and of every probe configuration, ready for
    :func:`wcetfit.fit.solve.fit_function`."""

    counts: np.ndarray              # int64 [rows, n_segments + n_pseudo]
    ticks: np.ndarray               # float64 [rows, repeats] (NaN padded)
    config_ids: np.ndarray          # int64 [rows]
    addresses: tuple[int, ...]      # segments, then pseudo addresses of the δ columns
    pseudo: tuple[str, ...]         # names of the δ columns, in order
    inputs: np.ndarray              # input index of every row
    configs: Mapping[int, str]      # config id → description
    n_segments: int

    def name_of(self, address: int) -> str:
        if address >= PSEUDO_BASE:
            return f"δ[{self.pseudo[address - PSEUDO_BASE]}]"
        return hexaddr(address)


def build_joint(columns: Columns, base_indices: np.ndarray, base_counts: np.ndarray,
                base_ticks: np.ndarray | None, traces: Mapping[int, np.ndarray],
                measured: Sequence[ConfigTimes]) -> JointSystem:
    """Assemble the joint system: the whole-call rows (config 0, block counts from the
    count run and ticks from the timing run) and the rows of every measured probe.

    ``base_counts`` are block counts [inputs, n_blocks] (trace-id order); rows are
    matched to timings by input index.  ``base_ticks`` None: no whole-call rows.
    """
    ns = columns.n_segments
    pseudo: list[str] = []
    parts_counts: list[np.ndarray] = []
    parts_ticks: list[np.ndarray] = []
    parts_cfg: list[np.ndarray] = []
    parts_in: list[np.ndarray] = []
    pcol: list[tuple[int, np.ndarray] | None] = []
    configs: dict[int, str] = {CONFIG_WHOLE: CONFIG_NAMES[CONFIG_WHOLE]}
    if base_ticks is not None:
        bc = np.asarray(base_counts, dtype=np.int64)
        if bc.shape[0] != len(base_indices) or bc.shape[1] != columns.n_blocks:
            raise WcetfitError(f"base counts have shape {bc.shape}, expected "
                               f"({len(base_indices)}, {columns.n_blocks})")
        parts_counts.append(columns.to_segments(bc))
        parts_ticks.append(np.asarray(base_ticks, dtype=np.float64))
        parts_cfg.append(np.full(bc.shape[0], CONFIG_WHOLE, np.int64))
        parts_in.append(np.asarray(base_indices, dtype=np.int64))
        pcol.append(None)
    # every probe's rows in one pass over each trace (a pass per probe is what dominated
    # the time of a refit); rows are then picked per configuration by input
    union = sorted({int(i) for ct in measured for i in ct.indices if int(i) in traces})
    all_rows = probe_rows_many([ct.probe for ct in measured], columns, traces, union) \
        if measured else []
    for k, ct in enumerate(measured):
        rows = all_rows[k]
        pos = {int(i): r for r, i in enumerate(rows.indices)}
        keep = [r for r, i in enumerate(ct.indices) if int(i) in pos]
        sel = np.asarray([pos[int(ct.indices[r])] for r in keep], dtype=np.int64)
        cid = config_id_of(ct.probe)
        configs.setdefault(cid, CONFIG_NAMES[cid])
        parts_counts.append(rows.counts[sel] if sel.size else np.zeros((0, ns), np.int64))
        t = np.asarray(ct.ticks, dtype=np.float64)[keep] if keep else \
            np.zeros((0, np.asarray(ct.ticks).shape[1] if np.ndim(ct.ticks) == 2 else 1))
        parts_ticks.append(t)
        parts_cfg.append(np.full(len(keep), cid, np.int64))
        parts_in.append(np.asarray([int(ct.indices[r]) for r in keep], dtype=np.int64))
        name = pass_kind(ct.probe)
        if name is not None and rows.passes[sel].any():
            if name not in pseudo:
                pseudo.append(name)
            pcol.append((pseudo.index(name), rows.passes[sel]))
        else:
            pcol.append(None)
    if not parts_counts:
        raise FitError("no rows: neither whole-call timings nor measured probes")
    reps = max(t.shape[1] for t in parts_ticks)
    n = sum(c.shape[0] for c in parts_counts)
    counts = np.zeros((n, ns + len(pseudo)), dtype=np.int64)
    ticks = np.full((n, reps), np.nan)
    r = 0
    for c, t, pc in zip(parts_counts, parts_ticks, pcol):
        m = c.shape[0]
        counts[r:r + m, :ns] = c
        ticks[r:r + m, :t.shape[1]] = t
        if pc is not None:
            counts[r:r + m, ns + pc[0]] = pc[1]
        r += m
    addresses = tuple(columns.segments) + tuple(PSEUDO_BASE + j for j in range(len(pseudo)))
    return JointSystem(counts, ticks, np.concatenate(parts_cfg), addresses, tuple(pseudo),
                       np.concatenate(parts_in), configs, ns)


# =========================================================================================
# exact rank: row spaces over GF(p)
# =========================================================================================

class ModSpace:
    """A row space over GF(p), kept in reduced row echelon form (RREF).

    Rows are integer vectors; columns may be appended (new unknowns).  ``estimable(j)``
    is exact: e_j lies in the row space iff the RREF holds the row e_j.
    """

    def __init__(self, ncols: int, prime: int = _PRIMES[0]) -> None:
        self.p = prime
        self.rows = np.zeros((0, ncols), dtype=np.int64)
        self.pivots: list[int] = []

    @property
    def ncols(self) -> int:
        return self.rows.shape[1]

    @property
    def rank(self) -> int:
        return len(self.pivots)

    def copy(self) -> "ModSpace":
        s = ModSpace(self.ncols, self.p)
        s.rows = self.rows.copy()
        s.pivots = list(self.pivots)
        return s

    def grow(self, ncols: int) -> None:
        if ncols > self.ncols:
            self.rows = np.hstack([self.rows, np.zeros((self.rows.shape[0],
                                                        ncols - self.ncols), np.int64)])

    def _mod(self, R: np.ndarray) -> np.ndarray:
        R = np.asarray(R, dtype=np.int64)
        if R.ndim == 1:
            R = R[None, :]
        if R.shape[1] > self.ncols:
            self.grow(R.shape[1])
        elif R.shape[1] < self.ncols:
            R = np.hstack([R, np.zeros((R.shape[0], self.ncols - R.shape[1]), np.int64)])
        return R % self.p

    def reduce(self, R: np.ndarray) -> np.ndarray:
        """``R`` modulo the space: zero in every pivot column (canonical remainder)."""
        R = self._mod(R)
        p = self.p
        for b, j in zip(self.rows, self.pivots):
            f = R[:, j]
            nz = f != 0
            if nz.any():
                R[nz] = (R[nz] - np.outer(f[nz], b) % p) % p
        return R

    def residual(self, R: np.ndarray) -> np.ndarray:
        """An echelon basis of (span R + space) / space, as rows (≤ ncols of them)."""
        R = self.reduce(R)
        R = R[(R != 0).any(axis=1)]
        return _echelon(R, self.p)[0]

    def add(self, R: np.ndarray) -> int:
        """Add rows; returns the rank gained."""
        new = self.residual(R)
        if new.shape[0] == 0:
            return 0
        ech, piv = _echelon(new, self.p)
        p = self.p
        # back-substitute the new pivots into the old rows (keep the whole thing RREF)
        rows = self.rows
        for b, j in zip(ech, piv):
            f = rows[:, j]
            nz = f != 0
            if nz.any():
                rows[nz] = (rows[nz] - np.outer(f[nz], b) % p) % p
        self.rows = np.vstack([rows, ech])
        self.pivots = self.pivots + piv
        order = np.argsort(self.pivots)
        self.rows = self.rows[order]
        self.pivots = [self.pivots[i] for i in order]
        return len(piv)

    def estimable(self) -> np.ndarray:
        """bool [ncols]: the unknown alone is determined by the rows."""
        out = np.zeros(self.ncols, dtype=bool)
        for r, j in zip(self.rows, self.pivots):
            if np.count_nonzero(r) == 1:
                out[j] = True
        return out

    def null_vectors(self, columns: np.ndarray | None = None) -> list[np.ndarray]:
        """A basis of the null space (over GF(p)), one vector per free column."""
        piv = set(self.pivots)
        cols = range(self.ncols) if columns is None else columns
        out = []
        for f in cols:
            if f in piv:
                continue
            v = np.zeros(self.ncols, dtype=np.int64)
            v[f] = 1
            for r, j in zip(self.rows, self.pivots):
                if r[f]:
                    v[j] = (-int(r[f])) % self.p
            out.append(v)
        return out


def _echelon(R: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form of ``R`` over GF(p): (nonzero rows, pivot columns)."""
    R = np.array(R, dtype=np.int64, copy=True) % p
    m, n = R.shape
    piv: list[int] = []
    r = 0
    for c in range(n):
        if r >= m:
            break
        nz = np.flatnonzero(R[r:, c])
        if nz.size == 0:
            continue
        k = r + int(nz[0])
        if k != r:
            R[[r, k]] = R[[k, r]]
        inv = pow(int(R[r, c]), p - 2, p)
        R[r] = (R[r] * inv) % p
        f = R[:, c].copy()
        f[r] = 0
        nzr = f != 0
        if nzr.any():
            R[nzr] = (R[nzr] - np.outer(f[nzr], R[r]) % p) % p
        piv.append(c)
        r += 1
    return R[:r], piv


class ExactSpace:
    """The same rows over two primes; rank and estimability take the larger answer."""

    def __init__(self, ncols: int) -> None:
        self.spaces = [ModSpace(ncols, p) for p in _PRIMES]

    def copy(self) -> "ExactSpace":
        e = ExactSpace.__new__(ExactSpace)
        e.spaces = [s.copy() for s in self.spaces]
        return e

    @property
    def rank(self) -> int:
        return max(s.rank for s in self.spaces)

    @property
    def ncols(self) -> int:
        return self.spaces[0].ncols

    def add(self, R: np.ndarray) -> int:
        before = self.rank
        for s in self.spaces:
            s.add(R)
        return self.rank - before

    def residual_rank(self, R: np.ndarray) -> int:
        return max(s.residual(R).shape[0] for s in self.spaces)

    def estimable(self) -> np.ndarray:
        out = np.zeros(self.ncols, dtype=bool)
        for s in self.spaces:
            out |= s.estimable()
        return out

    def primary(self) -> ModSpace:
        return max(self.spaces, key=lambda s: s.rank)


# =========================================================================================
# planning
# =========================================================================================

@dataclass(frozen=True)
class Proposal:
    """A candidate probe with what it is expected to buy."""

    probe: Probe
    rank_gain: int                  # rank added to the system
    new_unknowns: int               # ε/δ columns it introduces
    newly_estimable: tuple[int, ...]   # segment addresses that become estimable alone
    reached: int                    # inputs whose call reaches the probe point

    @property
    def net_gain(self) -> int:
        """Drop of the nullity: how many fewer undetermined directions remain."""
        return self.rank_gain - self.new_unknowns

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.probe.to_json(), "rank_gain": self.rank_gain,
                "new_unknowns": self.new_unknowns, "net_gain": self.net_gain,
                "newly_estimable": [hexaddr(a) for a in self.newly_estimable],
                "inputs_reaching": self.reached}


@dataclass(frozen=True)
class PlanGroup:
    """A set of unknowns the (exact, noise-free) rows cannot separate."""

    segments: tuple[int, ...]
    others: tuple[str, ...]          # ε / δ names in the group
    dimension: int                   # undetermined directions inside the group

    def to_json(self) -> dict[str, Any]:
        return {"blocks": [hexaddr(a) for a in self.segments], "others": list(self.others),
                "undetermined": self.dimension}


@dataclass(frozen=True)
class Plan:
    """The planner's view of the current system and its proposals."""

    rank: int
    unknowns: int                    # present columns (executed segments, used ε/δ)
    estimable: tuple[int, ...]       # segment addresses estimable alone
    not_estimable: tuple[int, ...]   # executed segment addresses that are not
    groups: tuple[PlanGroup, ...]
    proposals: tuple[Proposal, ...]  # greedy order: each scored given the ones before
    unprobeable: Mapping[str, str]   # probe key → why it cannot be placed
    complete_after: bool             # every executed segment estimable after proposals

    @property
    def nullity(self) -> int:
        return self.unknowns - self.rank

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "unknowns": self.unknowns, "nullity": self.nullity,
                "estimable": [hexaddr(a) for a in self.estimable],
                "not_estimable": [hexaddr(a) for a in self.not_estimable],
                "groups": [g.to_json() for g in self.groups],
                "proposals": [p.to_json() for p in self.proposals],
                "unprobeable": dict(self.unprobeable),
                "complete_after": self.complete_after}


class _Layout:
    """Column keys of the planner and the rows of configurations in that layout."""

    def __init__(self, columns: Columns) -> None:
        self.columns = columns
        self.keys: list[tuple] = [("seg", a) for a in columns.segments]
        self.pos: dict[tuple, int] = {k: i for i, k in enumerate(self.keys)}

    def col(self, key: tuple) -> int:
        if key not in self.pos:
            self.pos[key] = len(self.keys)
            self.keys.append(key)
        return self.pos[key]

    def rows(self, seg_counts: np.ndarray, eps_key: tuple, pass_key: tuple | None,
             passes: np.ndarray | None) -> np.ndarray:
        m = seg_counts.shape[0]
        e = self.col(eps_key)
        d = self.col(pass_key) if pass_key is not None and passes is not None \
            and passes.any() else None
        out = np.zeros((m, len(self.keys)), dtype=np.int64)
        out[:, :seg_counts.shape[1]] = seg_counts
        out[:, e] = 1
        if d is not None:
            out[:, d] = passes
        return _unique_rows(out)

    @staticmethod
    def eps_key(probe: Probe | None) -> tuple:
        return ("eps", CONFIG_WHOLE if probe is None else config_id_of(probe))

    @staticmethod
    def pass_key(probe: Probe) -> tuple | None:
        pk = pass_kind(probe)
        return None if pk is None else ("pass", pk)


def _unique_rows(R: np.ndarray) -> np.ndarray:
    if R.shape[0] <= 1:
        return R
    return np.unique(R, axis=0)


def _pad(R: np.ndarray, n: int) -> np.ndarray:
    if R.shape[1] >= n:
        return R
    return np.hstack([R, np.zeros((R.shape[0], n - R.shape[1]), np.int64)])


def _key_name(key: tuple) -> str:
    if key[0] == "eps":
        return f"ε[{key[1]}]"
    if key[0] == "pass":
        return f"δ[{key[1]}]"
    return hexaddr(key[1])


# tie-break among equal gains: no patch at all, then a direct patch, then edge patches
_PREFERENCE = {MECH_WRAPPER: 0, MECH_DIRECT: 1, MECH_EDGE: 2}


def plan(columns: Columns, base_counts: np.ndarray, traces: Mapping[int, np.ndarray],
         existing: Sequence[Probe], candidates: Sequence[Probe], *,
         unprobeable: Mapping[str, str] | None = None,
         max_probes: int = 8, with_base: bool = True) -> Plan:
    """Score candidate probes by the rank they add to the current system (exactly).

    ``base_counts`` [inputs, n_blocks] are the whole-call rows (the timing run's inputs);
    ``traces`` give every probe's rows.  ``existing`` probes are already measured (their
    rows are in the system).  Proposals are chosen greedily, each scored given the ones
    chosen before it, until ``max_probes`` or until no candidate adds anything.
    """
    lay = _Layout(columns)
    base = columns.to_segments(np.asarray(base_counts, dtype=np.int64))
    blocks_rows: list[np.ndarray] = []
    if with_base and base.shape[0]:
        blocks_rows.append(lay.rows(base, lay.eps_key(None), None, None))
    existing_keys = {p.key for p in existing}
    all_probes = list(existing) + [c for c in candidates if c.key not in existing_keys]
    rows_of = probe_rows_many(all_probes, columns, traces) if all_probes else []
    cand_rows: list[tuple[Probe, np.ndarray, int, float]] = []
    for k, (p, pr) in enumerate(zip(all_probes, rows_of)):
        if pr.counts.shape[0] == 0:
            if k >= len(existing):
                continue
            rows = np.zeros((0, len(lay.keys)), np.int64)
        else:
            rows = lay.rows(pr.counts, lay.eps_key(p), lay.pass_key(p), pr.passes)
        if k < len(existing):
            blocks_rows.append(rows)
        else:
            size = float(np.mean(pr.counts.sum(axis=1) + pr.passes))
            cand_rows.append((p, rows, int(pr.counts.shape[0]), size))
    n = len(lay.keys)
    space = ExactSpace(n)
    present = np.zeros(n, dtype=bool)
    for R in blocks_rows:
        R = _pad(R, n)
        space.add(R)
        present |= (R != 0).any(axis=0)
    seg_n = columns.n_segments

    def seg_estimable(sp: ExactSpace, pres: np.ndarray) -> np.ndarray:
        est = sp.estimable()
        return est[:seg_n] & pres[:seg_n]

    est_now = seg_estimable(space, present)
    rank0, unknowns0 = space.rank, int(present.sum())
    groups = _groups(space, present, lay, seg_n)
    chosen: list[Proposal] = []
    remaining = [(p, _pad(R, n), m, size) for p, R, m, size in cand_rows]
    cur_space, cur_present, cur_est = space, present, est_now
    # A family's first probe brings its ε: alone it adds as much rank as unknowns, so a
    # greedy step sees no gain in the pure-ε probe that makes every later probe of the
    # family pay.  Start each family with it: a stop before the call, a start after the
    # return (zero blocks: ε alone), when the family has candidates and no probe yet.
    for kind, site in ((KIND_STOP, SITE_ENTRY), (KIND_START, SITE_RETURN)):
        if any(p.kind == kind for p in existing) or not any(
                p.kind == kind and p.site == SITE_BLOCK for p, *_ in remaining):
            continue
        for idx, (p, R, m, _size) in enumerate(remaining):
            if p.kind == kind and p.site == site and R.shape[0] \
                    and len(chosen) < max_probes:
                pres = cur_present | (R != 0).any(axis=0)
                gain = cur_space.residual_rank(R)
                if gain == 0:
                    break
                trial = cur_space.copy()
                trial.add(R)
                newly = seg_estimable(trial, pres) & ~cur_est
                chosen.append(Proposal(p, gain, int(pres.sum() - cur_present.sum()),
                                       tuple(columns.segments[j] for j in np.flatnonzero(newly)),
                                       m))
                cur_space, cur_present = trial, pres
                cur_est = seg_estimable(cur_space, cur_present)
                remaining.pop(idx)
                break
    while len(chosen) < max_probes and remaining:
        # cheap first: the rank each candidate adds; the costlier estimability test
        # (a trial elimination) only for those with the best net gain
        scored = []
        for idx, (p, R, m, _size) in enumerate(remaining):
            if R.shape[0] == 0:
                continue
            pres = cur_present | (R != 0).any(axis=0)
            new_cols = int(pres.sum() - cur_present.sum())
            gain = cur_space.residual_rank(R)
            if gain > 0:
                scored.append((gain - new_cols, idx, gain, new_cols, pres))
        best = None
        top = max((min(s[0], 1) for s in scored), default=None)
        for net, idx, gain, new_cols, pres in scored:
            if min(net, 1) != top:
                continue
            p, R, m, size = remaining[idx]
            trial = cur_space.copy()
            trial.add(R)
            newly = seg_estimable(trial, pres) & ~cur_est
            # any positive net gain; then short regions first: a stop a few blocks after
            # the entry, or a start a few blocks before the return, is timed to a
            # fraction of a tick, while a region spanning a loop inherits the loop's
            # data-dependent spread, which leaks into every quantity its rows determine
            # (probes are cheap: a few more short ones beat one long one that adds two
            # ranks at once); then the larger gain, what becomes estimable now, stop
            # before start, the cheaper mechanism
            score = (min(net, 1), -size, net, int(newly.sum()), p.kind == KIND_STOP,
                     -_PREFERENCE[p.mechanism], -new_cols, m)
            if best is None or score > best[0]:
                best = (score, idx, gain, new_cols, newly, trial, pres)
        if best is None:
            break
        score, idx, gain, new_cols, newly, trial, pres = best
        if score[0] <= 0 and score[3] == 0:
            # nothing determined now; a probe that only adds its own unknowns helps only
            # if a later one uses them — look one step ahead before giving up
            if not _lookahead_helps(trial, pres, remaining, idx, seg_est=seg_estimable,
                                    cur_est=cur_est):
                break
        p, R, m, _size = remaining.pop(idx)
        chosen.append(Proposal(p, gain, new_cols,
                               tuple(columns.segments[j] for j in np.flatnonzero(newly)), m))
        cur_space, cur_present = trial, pres
        cur_est = seg_estimable(cur_space, cur_present)
    exec_any = (base != 0).any(axis=0) if base.shape[0] else present[:seg_n]
    complete = bool(np.all(cur_est | ~exec_any))
    seg_addr = columns.segments
    return Plan(rank=rank0, unknowns=unknowns0,
                estimable=tuple(seg_addr[j] for j in np.flatnonzero(est_now)),
                not_estimable=tuple(seg_addr[j] for j in np.flatnonzero(~est_now & exec_any)),
                groups=groups, proposals=tuple(chosen),
                unprobeable=dict(unprobeable or {}), complete_after=complete)


def _lookahead_helps(trial: ExactSpace, pres: np.ndarray, remaining, skip: int, *,
                     seg_est, cur_est: np.ndarray) -> bool:
    """Whether some other candidate, added after ``trial``, gains net rank."""
    for k, (_p, R, _m, _s) in enumerate(remaining):
        if k == skip or R.shape[0] == 0:
            continue
        p2 = pres | (R != 0).any(axis=0)
        new_cols = int(p2.sum() - pres.sum())
        if trial.residual_rank(R) - new_cols > 0:
            return True
    return False


def _groups(space: ExactSpace, present: np.ndarray, lay: _Layout, seg_n: int
            ) -> tuple[PlanGroup, ...]:
    """Connected sets of the present unknowns that are not estimable alone."""
    ms = space.primary()
    cols = np.flatnonzero(present)
    vecs = ms.null_vectors(cols)
    parent = {int(c): int(c) for c in cols}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    dims: dict[int, int] = {}
    for v in vecs:
        sup = [int(c) for c in np.flatnonzero(v) if present[c]]
        for a in sup[1:]:
            parent[find(a)] = find(sup[0])
    for v in vecs:
        sup = [int(c) for c in np.flatnonzero(v) if present[c]]
        if sup:
            r = find(sup[0])
            dims[r] = dims.get(r, 0) + 1
    members: dict[int, list[int]] = {}
    for c in cols:
        r = find(int(c))
        if r in dims:
            members.setdefault(r, []).append(int(c))
    out = []
    for r, mem in members.items():
        segs = tuple(lay.keys[c][1] for c in mem if c < seg_n)
        others = tuple(_key_name(lay.keys[c]) for c in mem if c >= seg_n)
        out.append(PlanGroup(segs, others, dims[r]))
    out.sort(key=lambda g: (g.segments[0] if g.segments else -1, g.others))
    return tuple(out)


def candidate_probes(columns: Columns, *, kinds: Sequence[str] = KINDS,
                     entry: bool = True, ret: bool = True) -> list[Probe]:
    """Every probe point with the direct mechanism (the caller replaces those that
    cannot be patched directly by edge probes, or drops them), plus the wrapper's entry
    and return sites."""
    out: list[Probe] = []
    for kind in kinds:
        if entry:
            out.append(Probe(kind, SITE_ENTRY, None, MECH_WRAPPER))
        if ret:
            out.append(Probe(kind, SITE_RETURN, None, MECH_WRAPPER))
        for a in columns.segments:
            out.append(Probe(kind, SITE_BLOCK, a, MECH_DIRECT))
    return out


# =========================================================================================
# rounds in the store
# =========================================================================================

@dataclass(frozen=True)
class Round:
    """One round: a measurement session of the whole call and every active probe, the
    probes it introduced, and the fit after it."""

    number: int
    function: str
    seed: int
    method: str
    probes: tuple[ConfigTimes, ...]       # every probe measured in this round
    introduced: tuple[str, ...] = ()      # keys of the probes new in this round
    whole: ConfigTimes | None = None      # whole calls (probe field unused), same session
    splits: tuple[int, ...] = ()          # split points introduced by this round (--at)
    fit: Mapping[str, Any] | None = None  # summary of the joint fit after this round
    based_on: tuple[int, ...] = ()        # rounds whose introduced probes that fit used
    time_s: float = 0.0                   # time spent measuring
    created: str = ""
    tsc_hz: float | None = None
    notes: tuple[str, ...] = ()
    failures: tuple[dict[str, Any], ...] = ()
    # The fit of this round's whole calls alone (same session, no probe rows): what the
    # joint fit must agree with on the quantities whole calls already determine.
    baseline: Mapping[str, Any] | None = None
    # Probes measured in this round whose rows disagree with that baseline (each
    # removal brought estimates back inside their intervals): left out of the fit and
    # not measured again.
    excluded: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return round_name(self.number)

    def to_json(self, present: Iterable[int] | None = None) -> dict[str, Any]:
        stale = None
        if present is not None:
            have = set(present)
            stale = [r for r in self.based_on if r not in have]
        d: dict[str, Any] = {
            "round": self.number, "function": self.function, "seed": self.seed,
            "method": self.method,
            "probes": [dict(ct.probe.to_json(),
                            inputs=int(ct.indices.size),
                            measured=int(np.isfinite(ct.ticks).any(axis=1).sum())
                            if ct.ticks.size else 0,
                            new=ct.probe.key in self.introduced)
                       for ct in self.probes],
            "whole_call_inputs": 0 if self.whole is None else int(self.whole.indices.size),
            "splits": [hexaddr(s) for s in self.splits],
            "time_s": self.time_s, "created": self.created,
            "based_on": list(self.based_on), "notes": list(self.notes),
            "failures": list(self.failures),
            "excluded": list(self.excluded),
            "fit": self.fit,
            "fit_whole_calls_only": self.baseline,
        }
        if stale is not None:
            d["stale_fit"] = bool(stale)
            if stale:
                d["stale_because_dropped"] = stale
        return d


def round_name(number: int) -> str:
    return f"{ROUND_PREFIX}{int(number)}"


_ROUND_RE = re.compile(rf"^{re.escape(ROUND_PREFIX)}(\d+)$")


def round_numbers(store: Any) -> list[int]:
    out = []
    for name in store.names():
        m = _ROUND_RE.match(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def save_round(store: Any, rnd: Round) -> None:
    from wcetfit.store import machine_fingerprint

    arrays: dict[str, np.ndarray] = {}
    for k, ct in enumerate(rnd.probes):
        arrays[f"indices{k}"] = np.asarray(ct.indices, dtype=np.int64)
        arrays[f"ticks{k}"] = np.asarray(ct.ticks, dtype=np.float64)
    if rnd.whole is not None:
        arrays["whole_indices"] = np.asarray(rnd.whole.indices, dtype=np.int64)
        arrays["whole_ticks"] = np.asarray(rnd.whole.ticks, dtype=np.float64)
    meta = {"kind": "split-round", "round": rnd.number, "function": rnd.function,
            "seed": rnd.seed, "method": rnd.method,
            "probes": [ct.probe.to_json() for ct in rnd.probes],
            "introduced": list(rnd.introduced),
            "splits": [hexaddr(s) for s in rnd.splits], "fit": rnd.fit,
            "based_on": list(rnd.based_on), "time_s": rnd.time_s,
            "created": rnd.created or _dt.datetime.now().isoformat(timespec="seconds"),
            "tsc_hz": rnd.tsc_hz, "notes": list(rnd.notes), "failures": list(rnd.failures),
            "baseline": rnd.baseline, "excluded": list(rnd.excluded),
            "machine": machine_fingerprint()}
    store.save(rnd.name, meta, arrays)


def load_round(store: Any, number: int) -> Round | None:
    got = store.load(round_name(number), machine=True)
    if got is None:
        return None
    meta, arrays = got
    if meta.get("kind") != "split-round":
        raise StoreError(f"{round_name(number)} in {store.directory} is not a split round")
    probes = []
    for k, pj in enumerate(meta["probes"]):
        probes.append(ConfigTimes(Probe.from_json(pj), arrays[f"indices{k}"],
                                  arrays[f"ticks{k}"]))
    whole = None
    if "whole_indices" in arrays:
        whole = ConfigTimes(Probe(KIND_STOP, SITE_RETURN, None, MECH_WRAPPER),
                            arrays["whole_indices"], arrays["whole_ticks"])
    return Round(number=int(meta["round"]), function=meta["function"], seed=int(meta["seed"]),
                 method=meta["method"],
                 probes=tuple(probes), introduced=tuple(meta.get("introduced", ())),
                 whole=whole, splits=tuple(parse_addr(s) for s in meta["splits"]),
                 fit=meta.get("fit"), based_on=tuple(meta.get("based_on", ())),
                 time_s=float(meta.get("time_s", 0.0)), created=meta.get("created", ""),
                 tsc_hz=meta.get("tsc_hz"), notes=tuple(meta.get("notes", ())),
                 failures=tuple(meta.get("failures", ())), baseline=meta.get("baseline"),
                 excluded=tuple(meta.get("excluded", ())))


def load_rounds(store: Any, function: str | None = None, seed: int | None = None
                ) -> list[Round]:
    """Every stored round (of ``function`` / ``seed`` when given), in order."""
    out = []
    for n in round_numbers(store):
        r = load_round(store, n)
        if r is None:
            continue
        if function is not None and r.function != function:
            continue
        if seed is not None and r.seed != seed:
            continue
        out.append(r)
    return out


def drop_round(store: Any, number: int) -> bool:
    return bool(store.drop(round_name(number)))


def next_round_number(store: Any) -> int:
    nums = round_numbers(store)
    return (max(nums) + 1) if nums else 1


# =========================================================================================
# comparing fits: what a round bought
# =========================================================================================

def fit_summary(fit: Any, system: JointSystem) -> dict[str, Any]:
    """The part of a FitResult a round keeps: per segment estimate, groups, overheads."""
    d = fit.to_json()
    names = {hexaddr(a): system.name_of(a) for a in system.addresses}

    def rename(a: str) -> str:
        return names.get(a, a)

    blocks = []
    for b in d["blocks"]:
        blocks.append({"address": rename(b["address"]), "estimable": b["estimable"],
                       "cost_ticks": b["cost_ticks"], "ci95_ticks": b["ci95_ticks"],
                       "group": b["group"], "executions": b.get("executions")})
    groups = []
    for g in d["groups"]:
        groups.append({"id": g["id"], "kind": g["kind"],
                       "blocks": [rename(a) for a in g["blocks"]],
                       "configs": g.get("configs", []),
                       "combinations": [{"text": c["text"], "value_ticks": c["value_ticks"],
                                         "ci95_ticks": c["ci95_ticks"]}
                                        for c in g["combinations"]]})
    return {"rank": d["rank"], "unknowns": d["unknowns"], "blocks": blocks, "groups": groups,
            "overhead": [{"config": o["config"], "value_ticks": o["value_ticks"],
                          "ci95_ticks": o["ci95_ticks"], "text": o["text"]}
                         for o in d.get("overhead", [])],
            "configs": {str(k): v for k, v in system.configs.items()},
            "rows": d["rows"], "validation": d.get("validation"),
            "warnings": d.get("warnings", [])}


def multi_block_groups(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Groups of a fit summary holding more than one real block."""
    return [g for g in summary.get("groups", [])
            if sum(1 for b in g["blocks"] if b.startswith("0x")) > 1]


def disagreements(reference: Mapping[str, Any], after: Mapping[str, Any]
                  ) -> list[dict[str, Any]]:
    """Blocks estimable alone in both fits whose estimates differ by more than the
    combined 95 % interval (the two half-widths added in quadrature)."""
    after_blocks = {b["address"]: b for b in after["blocks"]}
    out = []
    for b0 in reference["blocks"]:
        a = b0["address"]
        b1 = after_blocks.get(a)
        if not b1 or not (b0["estimable"] and b1["estimable"]):
            continue
        if b0["cost_ticks"] is None or b1["cost_ticks"] is None:
            continue
        half = math.hypot(b0["ci95_ticks"] or 0.0, b1["ci95_ticks"] or 0.0)
        diff = b1["cost_ticks"] - b0["cost_ticks"]
        if abs(diff) > half:
            out.append({"address": a, "before": b0["cost_ticks"], "after": b1["cost_ticks"],
                        "difference": diff, "combined_ci95": half})
    return out


def compare_fits(before: Mapping[str, Any] | None, after: Mapping[str, Any],
                 baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What changed from one fit summary to the next: groups separated, blocks newly
    estimable, and estimable-before quantities that moved beyond their intervals.

    ``baseline``: the fit of the same session's whole calls alone.  When given, the
    disagreements are measured against it rather than against ``before``: a fit from
    another session differs by the machine's drift between sessions (tens of percent
    on a shared VM), which says nothing about whether the probes' rows are consistent
    with the whole calls."""
    after_blocks = {b["address"]: b for b in after["blocks"]}
    if before is None:
        return {"separated": [], "newly_estimable": [b["address"] for b in after["blocks"]
                                                     if b["estimable"]],
                "disagreements": disagreements(baseline, after) if baseline else []}
    before_blocks = {b["address"]: b for b in before["blocks"]}
    newly = [a for a, b in after_blocks.items()
             if b["estimable"] and not before_blocks.get(a, {}).get("estimable", False)]
    separated = []
    for g in before.get("groups", []):
        members = [a for a in g["blocks"] if a in after_blocks]
        if not members:
            continue
        now_groups = sorted({after_blocks[a]["group"] for a in members
                             if after_blocks[a]["group"] is not None})
        now_alone = [a for a in members if after_blocks[a]["estimable"]]
        if now_alone or len(now_groups) > 1:
            separated.append({"group": g["id"], "blocks": g["blocks"],
                              "now_estimable": now_alone, "now_in_groups": now_groups})
    return {"separated": separated, "newly_estimable": newly,
            "disagreements": disagreements(baseline if baseline is not None else before,
                                           after),
            "against": "same-session whole calls" if baseline is not None
            else "previous fit"}


def split_json(target: str, function: str, rounds: Sequence[Round],
               current: Mapping[str, Any] | None = None,
               plan_: Plan | None = None, extra: Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
    """The ``wcetfit.split/1`` document."""
    present = [r.number for r in rounds]
    out: dict[str, Any] = {"schema": SCHEMA_SPLIT, "target": target, "function": function,
                           "rounds": [r.to_json(present) for r in rounds]}
    if current is not None:
        out["fit"] = current
    if plan_ is not None:
        out["plan"] = plan_.to_json()
    if extra:
        out.update(extra)
    return out
