"""The search on a target: fit what is stored, search, time the best, keep them.

:func:`run_search` is what ``wcetfit search`` and the search step of ``wcetfit analyze``
call.  The candidates it keeps are timed in this same session and join the fit's rows
(:mod:`wcetfit.search.store`): they are measured inputs from then on, and the report's
slowest measured input comes from them when they are slower.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from wcetfit.measurements import FunctionCounts
from wcetfit.search.candidates import SEARCH_BASE, time_candidates
from wcetfit.search.engine import SearchOptions, SearchOutcome, search
from wcetfit.search.store import SearchRows, load_search_rows, merge_rows, save_search_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchReport:
    """What one search did, for the command line and the bench."""

    outcome: SearchOutcome
    timed_indices: np.ndarray           # input numbers of the candidates timed now
    timed_ticks: np.ndarray             # [timed, repeats]
    timed_predicted: np.ndarray
    measured_max_ticks: float           # slowest mean of the measured inputs before
    tsc_hz: float

    @property
    def found_max_ticks(self) -> float:
        m = np.nanmedian(self.timed_ticks, axis=1) if self.timed_ticks.size else np.array([])
        return float(np.nanmax(m)) if m.size and np.isfinite(m).any() else float("nan")


def run_search(session: Any, root: str, options: SearchOptions = SearchOptions(), *,
               keep: bool = True, progress: Callable[[int, int], None] | None = None
               ) -> SearchReport:
    from wcetfit.pipeline import fit_stage, stored_measurements
    from wcetfit.timing.run import resolve_method

    counts, times = stored_measurements(session, root)
    system, fit = fit_stage(session, root, counts, times)
    target = session.target
    old = load_search_rows(session.store, root, target.measure.seed)
    first_key = SEARCH_BASE + (len(old.indices) if old is not None else 0)
    stored = dict(zip(old.indices.tolist(), old.sequences)) if old is not None else {}
    outcome = search(target, session.model, root, system, fit, options,
                     first_key=first_key, progress=progress, stored=stored)
    chosen = outcome.best[:options.timed]
    method, _ = resolve_method(target)
    fn_model = session.root_model(root)
    repeats = target.measure.repeats
    if chosen:
        # timed under wcetfit.toml's name, the one the prototype declares (an IFUNC's model
        # is named after its implementation: sin@impl+0x702c0)
        keys, ticks, failed = time_candidates(target, root, fn_model.address, method,
                                              {c.key: c.sequence for c in chosen}, repeats)
    else:
        keys, ticks, failed = np.zeros(0, np.int64), np.zeros((0, repeats)), []
    by_key = {c.key: c for c in chosen}
    ok = [i for i, k in enumerate(keys) if np.isfinite(ticks[i]).any()]
    keys, ticks = keys[ok], ticks[ok]
    predicted = np.array([by_key[int(k)].predicted_ticks for k in keys])
    per_input = np.nanmedian(system.ticks, axis=1)       # a disturbed call does not count
    measured_max = float(np.nanmax(per_input)) if per_input.size else float("nan")
    if keep and len(keys):
        fcs = tuple(FunctionCounts(fc.name, fc.address, fc.blocks, np.stack(
            [by_key[int(k)].counts[fc.name] for k in keys]).astype(np.int64))
            for fc in counts.functions)
        rows = SearchRows(root, target.measure.seed, method, times.tsc_hz, keys,
                          tuple(by_key[int(k)].sequence for k in keys), fcs, ticks, predicted)
        save_search_rows(session.store, merge_rows(old, rows))
    if failed:
        log.warning("%s: %d searched inputs failed while timed", root, len(failed))
    return SearchReport(outcome, keys, ticks, predicted, measured_max, times.tsc_hz)
