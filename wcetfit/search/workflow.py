"""The search on a target: fit what is stored, search (ranked by the model, then by
measured time), time the best of both phases, keep them.

:func:`run_search` is what ``wcetfit search`` and the search step of ``wcetfit analyze``
call.  The candidates it keeps are timed in this same session and join the fit's rows
(:mod:`wcetfit.search.store`): they are measured inputs from then on, and the report's
slowest measured input comes from them when they are slower.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from wcetfit.measurements import FunctionCounts
from wcetfit.search.candidates import (SEARCH_BASE, Normaliser, count_candidates,
                                       time_candidates, uncounted_callees)
from wcetfit.search.choices import ChoiceSequence
from wcetfit.search.engine import (Candidate, Scorer, SearchOptions, SearchOutcome,
                                   draws_of, search)
from wcetfit.search.timed import TimedOutcome, timed_search
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
    timed_phase: TimedOutcome | None = None   # the measured-time phase, when it ran
    # the draws of every candidate timed at the end (both phases), by input number
    timed_sequences: dict = field(default_factory=dict)

    @property
    def found_max_ticks(self) -> float:
        m = np.nanmedian(self.timed_ticks, axis=1) if self.timed_ticks.size else np.array([])
        return float(np.nanmax(m)) if m.size and np.isfinite(m).any() else float("nan")


def run_search(session: Any, root: str, options: SearchOptions = SearchOptions(), *,
               keep: bool = True, progress: Callable[[int, int], None] | None = None,
               wait: bool = True) -> SearchReport:
    """Search ``root``'s slow inputs (both phases), time the best and keep them (unless
    ``keep`` is False).  ``wait``: False refuses with one error, instead of waiting, when
    another run holds the machine's timing slot."""
    from wcetfit.pipeline import fit_stage, stored_measurements
    from wcetfit.timing.run import resolve_method

    counts, times = stored_measurements(session, root)
    from wcetfit.pipeline import state_changed
    changed = state_changed(root, times)
    if changed is not None:
        # the timed calls ran another path than the counted one (expat's XML_Parse on a
        # parser generate() made: every timed call the 66-tick error return): a model fitted
        # on them ranks nothing, and the candidates' times would be of that path too
        from wcetfit.errors import TimedAnotherPath
        from wcetfit.timing.state import REMEDY
        raise TimedAnotherPath(f"no search for {root}: {changed}; {REMEDY}")
    system, fit = fit_stage(session, root, counts, times)
    target = session.target
    old = load_search_rows(session.store, root, target.measure.seed,
                           warmup=target.measure.warmup)
    # after every stored number: the stored ones are the kept candidates' own numbers,
    # not consecutive (numbering from the count of rows gave a second search numbers
    # the first had kept, and two inputs with one number)
    from wcetfit.numbering import ADOPT_BASE, next_number
    first_key = next_number(old.indices if old is not None else (), SEARCH_BASE, ADOPT_BASE)
    stored = dict(zip(old.indices.tolist(), old.sequences)) if old is not None else {}
    # made once for both phases: the harness's ffi and generate, and the callees the count
    # run leaves uncounted (a relocation analysis)
    normaliser = Normaliser(target, root)
    uncounted = uncounted_callees(target, session.model, root)
    outcome = search(target, session.model, root, system, fit, options,
                     first_key=first_key, progress=progress, stored=stored,
                     normaliser=normaliser, uncounted=uncounted)
    chosen = outcome.best[:options.timed]
    method, _ = resolve_method(target)
    fn_model = session.root_model(root)
    timed_phase = None
    if options.timed_budget > 0 and options.timed > 0:
        # the model search numbered at most `budget` candidates from first_key
        timed_phase, extra = _timed_phase(session, root, system, fit, options, outcome,
                                          stored, fn_model.address, method,
                                          first_key + options.budget, wait, normaliser,
                                          uncounted)
        chosen = tuple(chosen) + tuple(extra)
    repeats = target.measure.repeats
    if chosen:
        # timed under wcetfit.toml's name, the one the prototype declares (an IFUNC's model
        # is named after its implementation: sin@impl+0x702c0)
        keys, ticks, failed = time_candidates(target, root, fn_model.address, method,
                                              {c.key: c.sequence for c in chosen}, repeats,
                                              wait=wait)
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
        save_search_rows(session.store, merge_rows(old, rows), warmup=target.measure.warmup)
    if failed:
        log.warning("%s: %d searched inputs failed while timed", root, len(failed))
    return SearchReport(outcome, keys, ticks, predicted, measured_max, times.tsc_hz,
                        timed_phase, {int(k): by_key[int(k)].sequence for k in keys})


def _timed_phase(session: Any, root: str, system: Any, fit: Any, options: SearchOptions,
                 outcome: SearchOutcome, stored: dict, address: int, method: str,
                 first_key: int, wait: bool, normaliser: Normaliser,
                 uncounted: dict) -> tuple[TimedOutcome, list[Candidate]]:
    """The measured-time phase (wcetfit.search.timed), seeded with the slowest measured
    inputs and the model search's best; its slowest children, counted, as candidates."""
    target = session.target
    seeds: list[ChoiceSequence] = []
    with np.errstate(all="ignore"):
        medians = np.nanmedian(system.ticks, axis=1)
    paths: set[bytes] = set()
    for row in np.argsort(-np.nan_to_num(medians, nan=-np.inf)):
        if len(seeds) >= options.timed_parents:
            break
        # one seed per count vector: inputs with one path are alike to a mutation (the
        # samples' every tenth input is one fixed slow shape; the slowest inputs were all
        # of it, and no mutation of it could change the shape)
        path = np.asarray(system.counts[row]).tobytes()
        if path in paths:
            continue
        paths.add(path)
        seq = draws_of(normaliser, int(system.indices[row]), stored)
        if seq is not None:
            seeds.append(seq)
    seeds += [c.sequence for c in outcome.best[:options.timed_parents]]
    generated = system.indices[system.indices < SEARCH_BASE]
    fresh = int(generated.max()) + 1 if len(generated) else 0
    if options.strategy == "random":
        fresh += options.budget          # past the inputs the model phase's reference drew
    timed = timed_search(target, root, address, method, normaliser, seeds,
                         budget=options.timed_budget,
                         generation=options.timed_generation, parents=options.timed_parents,
                         repeats=options.timed_repeats, keep=options.timed,
                         first_key=first_key, strategy=options.strategy,
                         fresh_index=fresh, seed=options.seed, wait=wait)
    if timed.failures:
        log.warning("%s: %d inputs of the timed search failed and are left out", root,
                    len(timed.failures))
    if not timed.best:
        return timed, []
    counts, failed = count_candidates(target, session.model, root,
                                      {k: s for k, s, _ in timed.best}, uncounted)
    if failed:
        log.warning("%s: %d inputs the timed search found failed when counted and are "
                    "left out", root, len(failed))
    scorer = Scorer(session.model, system, fit)
    out = [scorer.candidate(k, seq, counts[k]) for k, seq, _ticks in timed.best if k in counts]
    log.info("timed search %s: %d children timed in %d generations; %d kept", root,
             timed.timed, timed.generations, len(out))
    return timed, out
