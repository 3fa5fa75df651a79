"""The joint system of a round: whole-call rows and probe rows with their measured times.

:func:`build_joint` stacks the timing run's whole-call rows and every measured probe
configuration's rows (:mod:`wcetfit.split.configs`) into one least-squares system, with one
overhead ε per configuration family and the δ columns of stub passes (pseudo addresses
above :data:`~wcetfit.split.configs.PSEUDO_BASE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from wcetfit.errors import FitError, WcetfitError
from wcetfit.model import hexaddr
from wcetfit.split.configs import (CONFIG_NAMES, CONFIG_WHOLE, Columns, PSEUDO_BASE, Probe,
                                   config_id_of, pass_kind, probe_rows_many)

@dataclass(frozen=True)
class ConfigTimes:
    """Timings of one probe configuration: ``ticks[k]`` are the repeats of input
    ``indices[k]`` (NaN = not measured: probe not reached, migrated, failed)."""

    probe: Probe
    indices: np.ndarray
    ticks: np.ndarray          # float64 [m, repeats]


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
