"""Fresh inputs a check found above the bound, made inputs of the training.

``wcetfit check`` times inputs of another seed against the bound.  When a call is above
it at the bound's own machine speed, the model missed that input (a cost that depends on
the data, a loop longer than any training input ran); the remedy is to measure inputs
like it.  ``check --adopt`` keeps those very inputs: counted and timed now, in the same
session as the check, they join the store's rows as the worst-case search's kept
candidates do (:mod:`wcetfit.search.store`), under the next search numbers, and the next
analysis bounds them.  Each keeps the draws that made it and its own seed, so any later
run rebuilds exactly that input (:class:`wcetfit.search.choices.ChoiceSequence`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wcetfit.isolate import InputFailure
from wcetfit.measurements import FunctionCounts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Adopted:
    """What ``adopt_fresh`` kept: fresh input number → its number among the store's rows,
    and the inputs that failed when counted or timed (left out)."""

    function: str
    seed: int                            # the fresh inputs' seed
    numbers: dict[int, int]              # fresh input → its search input number
    failures: tuple[InputFailure, ...]
    # fresh inputs an earlier --adopt of the same seed kept: not adopted again
    before: dict[int, int] = field(default_factory=dict)


def adopted_before(session: Any, root: str, seed: int) -> dict[int, int]:
    """The fresh inputs of ``seed`` an earlier ``--adopt`` kept: fresh input → its number
    among the store's rows.  Adopting one twice made a second row of the same input
    (libcrypto's lzma_crc64: "+ 2 adopted from checks", one input), and a check that
    still missed it advised --adopt again."""
    from wcetfit.search.store import load_search_rows

    m = session.target.measure
    return _adopted_in(load_search_rows(session.store, root, m.seed, warmup=m.warmup), seed)


def _adopted_in(rows: Any, seed: int) -> dict[int, int]:
    """Fresh input → row number of the adopted inputs of ``seed`` among stored ``rows``
    (None: no rows)."""
    from wcetfit.numbering import ADOPT_BASE, REACH_BASE

    if rows is None:
        return {}
    return {int(seq.index): int(k) for k, seq in zip(rows.indices, rows.sequences)
            if ADOPT_BASE <= int(k) < REACH_BASE and seq.seed is not None
            and int(seq.seed) == int(seed)}


def adopt_fresh(session: Any, root: str, seed: int, fresh: tuple[int, ...], *,
                wait: bool = True, missed_calls: tuple[Any, ...] = ()) -> Adopted:
    """Count and time fresh inputs ``fresh`` (of ``seed``) of ``root`` and keep them among
    the store's searched rows of the training's seed.  ``missed_calls``: the check's calls
    above the bound (wcetfit.wcet.fresh.FreshCall, one per input), kept beside the rows
    so that the next bound stays above them."""
    from wcetfit.numbering import ADOPT_BASE, REACH_BASE, next_number
    from wcetfit.search.candidates import (Normaliser, count_candidates, time_candidates,
                                           uncounted_callees)
    from wcetfit.search.choices import ChoiceSequence
    from wcetfit.search.store import AdoptedCall, SearchRows, load_search_rows, \
        merge_rows, save_search_rows
    from wcetfit.timing.run import resolve_method

    target = session.target
    m = target.measure
    old = load_search_rows(session.store, root, m.seed, warmup=m.warmup)
    before = _adopted_in(old, seed)
    fresh = tuple(i for i in fresh if int(i) not in before)
    first = next_number(old.indices if old is not None else (), ADOPT_BASE, REACH_BASE)
    normaliser = Normaliser(target, root)
    sequences: dict[int, ChoiceSequence] = {}
    numbers: dict[int, int] = {}
    for k, i in enumerate(sorted(set(int(x) for x in fresh))):
        seq = normaliser.normalise(ChoiceSequence(i, (), int(seed)))
        if seq is not None:
            sequences[first + k] = seq
            numbers[i] = first + k
    if not sequences:
        return Adopted(root, int(seed), {}, (), before)
    counts, failed = count_candidates(target, session.model, root, sequences,
                                      uncounted_callees(target, session.model, root))
    method, _ = resolve_method(target)
    keys, ticks, timing_failed = time_candidates(
        target, root, session.root_model(root).address, method,
        {k: s for k, s in sequences.items() if k in counts}, m.repeats, wait=wait)
    kept = [j for j, k in enumerate(keys) if int(k) in counts and np.isfinite(ticks[j]).any()]
    keys, ticks = keys[kept], ticks[kept]
    if len(keys):
        # joined to the training's rows as the search's are: its block layout, its TSC rate
        stored_counts, stored_times = _training(session, root, method)
        fcs = tuple(FunctionCounts(fc.name, fc.address, fc.blocks, np.stack(
            [counts[int(k)][fc.name] for k in keys]).astype(np.int64))
            for fc in stored_counts.functions)
        row_of = {k: i for i, k in numbers.items()}
        kept_calls = tuple(
            AdoptedCall(int(k), int(seed), int(c.input), float(c.ticks),
                        float(c.at_bound_speed))
            for k in keys for c in missed_calls if int(c.input) == row_of[int(k)])
        rows = SearchRows(root, m.seed, method, stored_times.tsc_hz, keys,
                          tuple(sequences[int(k)] for k in keys), fcs, ticks,
                          np.full(len(keys), np.nan), kept_calls)
        save_search_rows(session.store, merge_rows(old, rows), warmup=m.warmup)
    left = {int(k) for k in keys}
    return Adopted(root, int(seed), {i: k for i, k in numbers.items() if k in left},
                   tuple(failed) + tuple(timing_failed), before)


def _training(session: Any, root: str, method: str) -> tuple[Any, Any]:
    """The training's stored counts and times of ``root``."""
    from wcetfit.errors import FitError
    from wcetfit.measurements import load_counts, load_times

    m = session.target.measure
    counts = load_counts(session.store, root, m.seed)
    times = load_times(session.store, root, m.seed, method, m.repeats, warmup=m.warmup)
    if counts is None or times is None:
        raise FitError(f"{root}: no training measurements stored to join adopted inputs to")
    return counts, times
