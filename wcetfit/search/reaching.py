"""Reaching unexecuted blocks and separating groups: angr's witnesses made measured inputs.

:func:`run_reach` is what ``wcetfit reach`` and the reach step of ``wcetfit analyze``
call.  From the stored measurements it takes the goals — every block of the measured
function and its counted callees that no stored input executed, and every fit group of
kind "observed" (blocks the inputs left unseparated) — and explores paths from the entry
with angr (:func:`wcetfit.static.reach.explore`) under an argument template shaped like a
generated input (:func:`wcetfit.search.witness.template_for`).  Each witness is rebuilt
into real arguments, counted by the native count run — the independent truth: a block
counts as reached only when the count run executed it, a group as separated only when the
counted row leaves the span of the measured ones — timed in this session, and kept in the
store as ``reach-*`` rows, which join the fit like the generated inputs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wcetfit.measurements import FunctionCounts
from wcetfit.search.candidates import SEARCH_BASE, count_candidates, time_candidates
from wcetfit.search.witness import (MAX_BUFFER, REACH_BASE, ReachInputs, ReachRows,
                                    load_reach_rows, merge_reach_rows, save_reach_rows,
                                    template_for)

log = logging.getLogger(__name__)

# Verdicts per goal after the count run
CONFIRMED = "reached"                       # the count run executed it
NOT_CONFIRMED = "reached by angr only"      # angr's path, but the real run did not go there
SEPARATED = "separated"
NOT_SEPARATED = "separated by angr only"


@dataclass(frozen=True)
class BlockOutcome:
    function: str
    address: int
    status: str          # reached | reached by angr only | unreachable | not found
    input: int | None    # the stored input that reaches it (confirmed by the count run)
    note: str = ""
    arguments: str = ""  # the witness, described


@dataclass(frozen=True)
class GroupOutcome:
    group: int           # the fit's group id
    blocks: tuple[int, ...]
    status: str          # separated | separated by angr only | inseparable | not found
    input: int | None
    counts: tuple[int, ...] | None = None   # the count run's counts of the group's blocks
    note: str = ""


@dataclass(frozen=True)
class ReachReport:
    function: str
    template: str
    blocks: tuple[BlockOutcome, ...]
    groups: tuple[GroupOutcome, ...]
    kept: np.ndarray                     # input numbers stored now
    ticks: np.ndarray                    # [kept, repeats]
    tsc_hz: float
    seconds: float                       # exploration wall time
    executed_before: int                 # blocks of the counted functions any input ran
    executed_after: int
    total_blocks: int
    skipped: str = ""                    # why nothing was explored (else "")
    notes: tuple[str, ...] = field(default=())

    def summary(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.blocks:
            out[b.status] = out.get(b.status, 0) + 1
        return out


def _measured(session: Any, root: str) -> tuple[Any, Any]:
    """Counts (generated, searched and reached inputs) and times (None when not timed)."""
    from wcetfit.pipeline import stored_measurements

    return stored_measurements(session, root, require_times=False)


def _failure_blocks(session: Any, never: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """Of ``never`` ((function, block) pairs), those that call a failure function
    (wcetfit.model.failure_exits)."""
    from wcetfit.model import failure_exits

    out: set[tuple[str, int]] = set()
    by_fn: dict[str, list[int]] = {}
    for fn, a in never:
        by_fn.setdefault(fn, []).append(a)
    for fn, blocks in by_fn.items():
        try:
            model = session.model.function(fn)
        except KeyError:
            continue
        out |= {(fn, a) for a in failure_exits(model, blocks)}
    return out


def run_reach(session: Any, root: str, budget_s: float, *, keep: bool = True,
              max_buffer: int = MAX_BUFFER, groups: bool = True) -> ReachReport:
    """Explore towards ``root``'s unexecuted blocks and unseparated groups for at most
    ``budget_s`` seconds; count, time and (``keep``) store the inputs found."""
    from wcetfit.static.reach import (INSEPARABLE, REACHED, GroupGoal, RowSpace,
                                      explore)
    from wcetfit.timing.run import resolve_method

    target = session.target
    counts, times = _measured(session, root)
    fn_model = session.root_model(root)
    executed_before = sum(int((fc.counts.sum(axis=0) > 0).sum()) for fc in counts.functions)
    total = sum(len(fc.blocks) for fc in counts.functions)
    never = [(fc.name, int(a)) for fc in counts.functions
             for a, c in zip(fc.blocks, fc.counts.sum(axis=0)) if c == 0]
    notes: list[str] = []
    # blocks that call a failure (the stack protector's, an assertion's, abort) are no
    # goal: no call that returns runs them (nettle's base64 encoder: the budget spent on
    # two `call __assert_fail` blocks)
    exits = _failure_blocks(session, never)
    if exits:
        never = [x for x in never if x not in exits]
        notes.append(f"{len(exits)} block(s) that call a failure or abort not looked for "
                     f"(no call that returns runs them): "
                     + ", ".join(f"{a:#x} ({fn})" for fn, a in sorted(exits)[:4])
                     + (" …" if len(exits) > 4 else ""))
    goals: list[GroupGoal] = []
    group_ids: list[int] = []
    if groups and times is not None:
        from wcetfit.fit.result import KIND_OBSERVED
        from wcetfit.pipeline import fit_stage

        system, fit = fit_stage(session, root, counts, times)
        col = {a: j for j, (_f, a) in enumerate(system.columns)}
        for g in fit.groups:
            if g.kind != KIND_OBSERVED or not all(a in col for a in g.blocks):
                continue
            sub = system.counts[:, [col[a] for a in g.blocks]]
            goals.append(GroupGoal(tuple(int(a) for a in g.blocks),
                                   tuple(map(tuple, np.unique(sub, axis=0).tolist()))))
            group_ids.append(g.id)
    elif groups:
        notes.append("groups not explored: no times stored (the fit's groups need them)")

    def empty(why: str) -> ReachReport:
        return ReachReport(root, "", tuple(BlockOutcome(f, a, "not found", None, why)
                                           for f, a in never), (), np.zeros(0, np.int64),
                           np.zeros((0, target.measure.repeats)), _hz(times), 0.0,
                           executed_before, executed_before, total, why, tuple(notes))

    if not never and not goals:
        return empty("")
    template, shapes, why = template_for(target, root, [int(i) for i in counts.indices
                                                        if i < SEARCH_BASE], max_buffer)
    if template is None:
        return empty(f"not explored: {why}")
    if template.longer:
        # (libxxhash's XXH3: "not found within the budget" after 2.6 s of 30, its inputs
        # up to 4,096 bytes explored at 64, and no word of it)
        notes.append("buffers explored shorter than the generated inputs' longest: "
                     + ", ".join(f"argument {k} at {template.params[k].length:,} bytes "
                                 f"(the inputs reach {n:,} elements)"
                                 for k, n in template.longer)
                     + f"; blocks only long inputs run need `--max-buffer N` (slower)")

    t0 = time.perf_counter()
    blocks, greach = explore(target.binary, fn_model.address, [a for _, a in never], goals,
                             template, budget_s)
    seconds = time.perf_counter() - t0

    # one input per distinct witness, numbered after those already stored
    old = load_reach_rows(session.store, root, target.measure.seed)
    first = REACH_BASE + (len(old.indices) if old is not None else 0)
    witnesses: dict[tuple, int] = {}
    purposes: dict[int, list[str]] = {}

    def number(w: Any, purpose: str) -> int:
        key = tuple(w.values)
        if key not in witnesses:
            witnesses[key] = first + len(witnesses)
        purposes.setdefault(witnesses[key], []).append(purpose)
        return witnesses[key]

    block_input = {r.address: number(r.witness, f"block {r.address:#x}")
                   for r in blocks if r.status == REACHED}
    group_input = {k: number(r.witness, f"group {group_ids[k]}")
                   for k, r in enumerate(greach) if r.status == "separated"}
    by_key = {k: list(w) for w, k in witnesses.items()}
    inputs = ReachInputs(shapes, by_key)
    real: dict[int, dict[str, np.ndarray]] = {}
    if by_key:
        real, failed = count_candidates(target, session.model, root, by_key, inputs=inputs)
        for f in failed:
            notes.append(f"failed in the count run: {f.describe()}")

    names = {fc.name: fc for fc in counts.functions}

    def real_count(key: int, fn: str, address: int) -> int:
        fc = names[fn]
        row = real.get(key, {}).get(fn)
        return 0 if row is None else int(row[list(fc.blocks).index(address)])

    outcomes = []
    for (fn, a), r in zip(never, blocks):
        if r.status == REACHED:
            k = block_input[a]
            ok = real_count(k, fn, a) > 0
            outcomes.append(BlockOutcome(fn, a, CONFIRMED if ok else NOT_CONFIRMED, k,
                                         r.note if ok else
                                         f"{r.note}; the count run did not execute it",
                                         r.witness.describe()))
        else:
            outcomes.append(BlockOutcome(fn, a, r.status, None, r.note))
    gout = []
    fn_of = {int(a): fc.name for fc in counts.functions for a in fc.blocks}
    for k, r in enumerate(greach):
        if r.status == "separated":
            key = group_input[k]
            row = tuple(real_count(key, fn_of[a], a) for a in r.blocks)
            ok = key in real and RowSpace(goals[k]).separates(row)
            gout.append(GroupOutcome(group_ids[k], r.blocks, SEPARATED if ok else NOT_SEPARATED,
                                     key, row, r.note if ok else
                                     f"{r.note}; angr's path counts {r.path_counts}, the count "
                                     f"run's {row} lie in the measured rows' span"))
        else:
            gout.append(GroupOutcome(group_ids[k], r.blocks,
                                     INSEPARABLE if r.status == INSEPARABLE else r.status,
                                     None, None, r.note))

    # time what the count run could count, and keep it
    method, _ = resolve_method(target)
    repeats = target.measure.repeats
    countable = {k: v for k, v in by_key.items() if k in real}
    if countable:
        # under wcetfit.toml's name, which the prototype declares (not an IFUNC's model name)
        keys, ticks, failed = time_candidates(target, root, fn_model.address, method,
                                              countable, repeats, inputs=inputs)
        for f in failed:
            notes.append(f"failed while timed: {f.describe()}")
        ok = [i for i, k in enumerate(keys) if np.isfinite(ticks[i]).any()]
        keys, ticks = keys[ok], ticks[ok]
    else:
        keys, ticks = np.zeros(0, np.int64), np.zeros((0, repeats))
    verdicts = tuple({"function": o.function, "block": hex(o.address), "status": o.status,
                      "input": o.input, "note": o.note} for o in outcomes) + \
        tuple({"group": g.group, "blocks": [hex(a) for a in g.blocks], "status": g.status,
               "input": g.input, "note": g.note} for g in gout)
    after = executed_before + sum(o.status == CONFIRMED for o in outcomes)
    if keep:
        tsc_hz = _hz(times) if times is not None else (old.tsc_hz if old else float("nan"))
        fcs = tuple(FunctionCounts(fc.name, fc.address, fc.blocks, np.array(
            [real[int(k)].get(fc.name, np.zeros(len(fc.blocks))) for k in keys],
            dtype=np.int64).reshape(len(keys), len(fc.blocks)))
            for fc in counts.functions)
        new = ReachRows(root, target.measure.seed, method, tsc_hz, shapes,
                        np.asarray(keys, dtype=np.int64),
                        tuple(tuple(by_key[int(k)]) for k in keys),
                        tuple("; ".join(purposes[int(k)]) for k in keys), fcs, ticks, verdicts)
        save_reach_rows(session.store, merge_reach_rows(old, new))
    return ReachReport(root, template.describe(), tuple(outcomes), tuple(gout),
                       np.asarray(keys, dtype=np.int64), ticks, _hz(times), seconds,
                       executed_before, after, total, "", tuple(notes))


def _hz(times: Any) -> float:
    return float(times.tsc_hz) if times is not None else float("nan")


def stored_verdicts(session: Any, root: str) -> tuple[dict[str, Any], ...]:
    """The last exploration's verdicts for ``root`` (empty when reach never ran)."""
    rows = load_reach_rows(session.store, root, session.target.measure.seed)
    return rows.verdicts if rows is not None else ()


def verdict_text(verdicts: Any) -> str | None:
    """One line for the report: what angr's step found per block and per group."""
    blocks = [v for v in verdicts if "block" in v]
    groups = [v for v in verdicts if "group" in v]
    if not blocks and not groups:
        return None
    parts = []
    for status in (CONFIRMED, "unreachable", "not found", NOT_CONFIRMED):
        n = sum(v["status"] == status for v in blocks)
        if n:
            parts.append(f"{n} {'proven unreachable from the entry' if status == 'unreachable' else status}")
    text = (f"symbolic execution (angr) on the {len(blocks)} block(s) no generated input ran: "
            + ", ".join(parts)) if blocks else "symbolic execution (angr)"
    if groups:
        gp = [f"{sum(v['status'] == s for v in groups)} {s}" for s in
              (SEPARATED, "inseparable", "not found", NOT_SEPARATED)
              if any(v["status"] == s for v in groups)]
        text += f"; {len(groups)} unseparated group(s): " + ", ".join(gp)
    return text
