"""Planning a round of block splitting: which probes add the most rank.

Rank questions are answered exactly (:mod:`wcetfit.split.rank`): the planner answers
"which quantities can these rows determine", the fit answers "how well".  A candidate's
score is its *net rank gain* (rank added minus unknown columns it introduces = the drop
of the nullity): any positive gain first, and among those the shortest timed regions
(the mean number of block executions in its rows: short regions are timed to a
fraction of a tick, long ones carry the loops' data-dependent spread into everything
they determine), then the larger gain, the segments it makes estimable alone, stop
before start probes and direct patches before edge probes (fewer stub passes to model).
Candidates and their rows come from :mod:`wcetfit.split.configs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.model import hexaddr
from wcetfit.split.configs import (CONFIG_WHOLE, Columns, KINDS, KIND_START, KIND_STOP,
                                   MECH_DIRECT, MECH_EDGE, MECH_WRAPPER, Probe, SITE_BLOCK,
                                   SITE_ENTRY, SITE_RETURN, config_id_of, pass_kind,
                                   probe_rows_many)
from wcetfit.split.rank import ExactSpace

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
    rows_of: list[Any] = probe_rows_many(all_probes, columns, traces) if all_probes else []
    cand_rows: list[tuple[Probe, np.ndarray, int, float]] = []
    for k, p in enumerate(all_probes):
        pr, rows_of[k] = rows_of[k], None       # each probe's raw rows freed once laid out
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
    del cand_rows                   # (the narrower rows, where widening copied them)
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
