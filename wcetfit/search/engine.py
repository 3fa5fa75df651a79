"""The search: generations of mutated choice sequences, scored by the fitted model.

Each generation mutates (and now and then crosses) the best candidates found so far,
counts the new ones natively (the count run's instrumented copy, microseconds per call
plus a child process per generation) and scores each by the time the fit predicts from
its counts.  Blocks no measured input executed have no cost yet; a candidate that reaches
them is kept among the best regardless of its score (it is what the fit lacks), and is
timed at the end like the others.  The generation starts from the measured inputs with
the longest calls: a generated input by its own draws, re-recorded; a searched one by the
draws stored with it (its number is no input of ``generate``'s: re-recording it would
seed the search with a fresh input that is not the one measured); a reached one
(``wcetfit reach``: not made by ``generate``) not at all.  With ``strategy="random"`` the
same budget goes to fresh inputs of ``generate`` instead: the reference the search is
compared with (Groß 2003 found random inputs reach about 85 % of what an evolutionary
search finds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.isolate import InputFailure
from wcetfit.search.candidates import (SEARCH_BASE, Normaliser, column_vector,
                                       count_candidates, uncounted_callees)
from wcetfit.search.choices import ChoiceSequence
from wcetfit.search.mutate import crossover, mutate

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]     # (candidates counted, budget)


@dataclass(frozen=True)
class SearchOptions:
    budget: int = 500          # candidates counted in all (native count runs)
    generation: int = 50       # candidates per generation (one child process each)
    parents: int = 12          # best candidates mutated for the next generation
    crossover: float = 0.2     # share of children made by crossing two parents
    timed: int = 10            # best candidates timed at the end and kept in the store
    # the second phase (wcetfit.search.timed): candidates ranked by measured time, which
    # finds what the counts cannot tell apart (data-dependent costs); 0 turns it off
    timed_budget: int = 60     # children timed in all
    timed_generation: int = 16  # candidates timed together per generation, parents included
    timed_parents: int = 6     # slowest kept as parents of the next generation
    timed_repeats: int = 3     # calls per candidate per generation (their median ranks it)
    seed: int = 0              # of the search's own choices (not of the inputs)
    strategy: str = "mutate"   # or "random": fresh inputs of generate, the reference


@dataclass(frozen=True)
class Candidate:
    key: int                         # its input number in the store (SEARCH_BASE + k)
    sequence: ChoiceSequence
    counts: dict[str, np.ndarray]    # function → block counts (model's block order)
    vector: np.ndarray               # the counts in the fit's column order
    predicted_ticks: float           # Σ count·cost + ε over the part the inputs determine
    new_blocks: int                  # blocks it runs that no measured input ran
    outside: bool = False            # its counts leave the space the inputs exercised


@dataclass(frozen=True)
class SearchOutcome:
    function: str
    strategy: str
    counted: int                               # candidates counted
    rejected: int                              # rejected by generate() before counting
    failures: tuple[InputFailure, ...]         # left out: crashed, hung, failed a check
    best: tuple[Candidate, ...]                # best first
    start_predicted_ticks: float               # best prediction among the measured inputs
    history: tuple[float, ...] = field(default=())   # best prediction after each generation


def search(target: Any, model: Any, root: str, system: Any, fit: Any,
           options: SearchOptions = SearchOptions(), *, first_key: int = SEARCH_BASE,
           progress: Progress | None = None,
           stored: Mapping[int, ChoiceSequence] | None = None,
           normaliser: Normaliser | None = None,
           uncounted: Mapping[str, list[str]] | None = None) -> SearchOutcome:
    """Search inputs of ``root`` that the fitted model predicts to be slow.  ``stored``:
    the draws of the searched inputs among the system's rows, by input number;
    ``normaliser`` and ``uncounted`` (made here when not given) may be shared with the
    measured-time phase (wcetfit.search.workflow)."""
    rng = np.random.default_rng([options.seed, 0x5EA2C4])
    scorer = Scorer(model, system, fit)
    normaliser = normaliser or Normaliser(target, root)
    if uncounted is None:
        uncounted = uncounted_callees(target, model, root)
    measured_pred = fit.predict(system.counts, unknown="zero")
    start = float(np.nanmax(measured_pred)) if len(measured_pred) else 0.0

    # The measured inputs with the slowest calls (and predictions) seed the population.
    pool = seed_population(normaliser, system, measured_pred, options.parents, stored or {})
    next_key = first_key
    counted = rejected = 0
    failures: list[InputFailure] = []
    best: dict[int, Candidate] = {}
    history: list[float] = []
    generated = system.indices[system.indices < SEARCH_BASE]
    fresh_index = int(generated.max()) + 1 if len(generated) else 0   # generate's next
    while counted < options.budget:
        want = min(options.generation, options.budget - counted)
        batch: dict[int, ChoiceSequence] = {}
        attempts = 0
        while len(batch) < want and attempts < 20 * want:
            attempts += 1
            if options.strategy == "random":
                seq = normaliser.record(fresh_index)
                fresh_index += 1
            else:
                seq = child([c.sequence for c in pool], rng, normaliser, options.crossover)
            if seq is None:
                rejected += 1
                continue
            batch[next_key] = seq
            next_key += 1
        if not batch:
            break
        counts, failed = count_candidates(target, model, root, batch, uncounted)
        failures.extend(failed)
        counted += len(batch)
        for key, per_fn in counts.items():
            best[key] = scorer.candidate(key, batch[key], per_fn)
        ranked = _distinct(sorted(best.values(), key=_by_time))
        best = {c.key: c for c in _keep(ranked, max(options.timed, options.parents))}
        if options.strategy != "random":
            pool = _distinct(sorted(list(pool) + ranked, key=_by_time))[:options.parents]
        history.append(max((c.predicted_ticks for c in best.values()), default=start))
        if progress:
            progress(counted, options.budget)
        log.info("search %s: %d counted, best predicted %.0f ticks (measured inputs: %.0f)",
                 root, counted, history[-1], start)
    return SearchOutcome(root, options.strategy, counted, rejected, tuple(failures),
                         tuple(sorted(best.values(), key=_by_time)), start, tuple(history))


def seed_population(normaliser: Normaliser, system: Any, measured_pred: np.ndarray,
                    parents: int, stored: Mapping[int, ChoiceSequence]) -> list[Candidate]:
    """The first parents: the measured inputs predicted slowest and those measured
    slowest, half each, each with the draws that made it, so that a mutation changes
    that very input.  Both: the search climbs the prediction, and where costs depend on
    the data the inputs measured slowest are not those predicted slowest (statemachine:
    its slow tenth ran 62k ticks, predicted 32k; taken first by the larger of the two,
    they filled every place, and the search climbed from 32k while a measured input was
    predicted 60.7k).  An input without draws (:func:`draws_of`) seeds nothing."""
    mean_ticks = np.nanmean(system.ticks, axis=1)
    slow = -np.nan_to_num(mean_ticks, nan=-np.inf)
    # ties of the prediction (a model that cannot tell the inputs apart) go by time
    by_pred = np.lexsort((slow, -np.nan_to_num(np.asarray(measured_pred, dtype=float),
                                                nan=-np.inf)))
    by_time = np.argsort(slow, kind="stable")
    # alternate: predicted slowest first, then measured slowest, without repeats
    order, taken = [], set()
    for pair in zip(by_pred, by_time):
        for row in pair:
            if int(row) not in taken:
                taken.add(int(row))
                order.append(int(row))
    pool: list[Candidate] = []
    for row in order:
        if len(pool) == parents:
            break
        seq = draws_of(normaliser, int(system.indices[row]), stored)
        if seq is not None:
            pool.append(Candidate(-1, seq, {}, system.counts[row],
                                  float(measured_pred[row]), 0))
    return pool


def draws_of(normaliser: Normaliser, index: int,
             stored: Mapping[int, ChoiceSequence]) -> ChoiceSequence | None:
    """The draws of measured input ``index``: a generated input's recorded again from its
    number; a searched input's number (from SEARCH_BASE) is no input of ``generate``'s,
    so its stored draws stand for it; an input without draws (a reached one): None."""
    return normaliser.record(index) if index < SEARCH_BASE else stored.get(index)


def child(parents: Sequence[ChoiceSequence], rng: np.random.Generator,
          normaliser: Normaliser, crossover_share: float) -> ChoiceSequence | None:
    """A mutation of a random parent (crossed with another one ``crossover_share`` of
    the time), normalised; None when ``generate`` rejects it."""
    a = parents[int(rng.integers(0, len(parents)))]
    if len(parents) > 1 and rng.random() < crossover_share:
        a = crossover(a, parents[int(rng.integers(0, len(parents)))], rng)
    return normaliser.normalise(mutate(a, rng))


class Scorer:
    """Candidates from their counts: the fit's column order, the prediction of the part
    the measured inputs determine, the blocks no measured input ran."""

    def __init__(self, model: Any, system: Any, fit: Any):
        functions = {fc: model.function(fc) for fc, _ in system.columns}
        self.blocks_of = {name: fn.block_addresses for name, fn in functions.items()}
        self.executed = (system.counts > 0).any(axis=0)
        self.columns, self.fit = system.columns, fit

    def candidate(self, key: int, seq: ChoiceSequence,
                  per_fn: dict[str, np.ndarray]) -> Candidate:
        vec = column_vector(self.columns, self.blocks_of, per_fn)
        pred, outside = determined_prediction(self.fit, vec)
        return Candidate(key, seq, per_fn, vec, pred,
                         int(((vec > 0) & ~self.executed).sum()), outside)


# A candidate's counts more than this share (by norm) outside the space the measured counts
# span are "outside": the inputs never ran that combination of blocks.
OUTSIDE_SHARE = 0.01


def determined_prediction(fit: Any, vec: np.ndarray) -> tuple[float, bool]:
    """(predicted ticks of the part of ``vec`` the measured inputs determine, whether
    ``vec`` leaves their space by more than :data:`OUTSIDE_SHARE`).

    The fit's costs are one solution of the system; along directions of the count space
    no input exercised, any other solution fits as well, so a prediction there is
    arbitrary — and a search that maximises predictions walks into exactly those
    directions where the arbitrary costs are high (zlib's uncompress: candidates
    predicted 1.9× random's best ran slower than random's).  The part of ``vec`` in the
    measured counts' row space has the same prediction under every solution; the rest is
    what timing the candidate will tell, so an outside candidate is kept like one that
    reaches new blocks (:func:`_keep`), not ranked on its arbitrary part."""
    nb = fit.solution.size
    configs = tuple(getattr(fit, "configs", (0,)))
    x = np.zeros(nb + len(configs))
    x[:nb] = vec
    x[nb + (configs.index(0) if 0 in configs else 0)] = 1.0     # the overhead ε, once
    sol = np.nan_to_num(np.concatenate([fit.solution, fit.overhead_solution]))  # unknown: 0
    R = fit.row_space
    inside = (x @ R) @ R.T
    share = float(np.linalg.norm(x - inside) / max(np.linalg.norm(x), 1.0))
    return float(inside @ sol), share > OUTSIDE_SHARE


def _by_time(c: Candidate) -> float:
    return -c.predicted_ticks


def _distinct(cands: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per count vector (the first): the model cannot tell the others apart,
    and a pool of copies would stop the search from spreading."""
    out, seen = [], set()
    for c in cands:
        sig = c.vector.tobytes()
        if sig not in seen:
            seen.add(sig)
            out.append(c)
    return out


def _keep(ranked: Sequence[Candidate], n: int) -> list[Candidate]:
    """The ``n`` candidates to keep: the slowest predicted, and up to a quarter of the
    places for candidates that reach blocks no measured input ran or leave the space the
    measured counts span (the model gives those blocks no cost and those directions no
    determined one, so it cannot rank such candidates; timing them is what tells)."""
    novel = [c for c in ranked if c.new_blocks > 0 or c.outside][:max(1, n // 4)]
    rest = [c for c in ranked if c.new_blocks == 0 and not c.outside][:n - len(novel)]
    return sorted(rest + novel, key=_by_time)
