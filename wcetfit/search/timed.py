"""The search's second phase: candidates ranked by their measured time, not the model's.

The model-guided search (:mod:`wcetfit.search.engine`) can only climb what the fitted
model sees, the block counts.  Where a block's cost depends on the data, inputs with the
same counts differ in time and the model cannot tell which is slower: the fir sample at
1,024 samples runs 21 taps in 30,600 ticks and 32 taps in 26,900 (the inner loop's exit
is predicted for some trip counts and not for others), and its generator's "slow" input,
the one with the most counts, was neither the slowest input nor found by the model.
Search-based timing analysis (Wegener & Mueller 2001) ranks candidates by measured time
for this reason.

Each generation mutates the slowest candidates so far (their choice sequences, as the
model search does), and times the children *together with their parents*, in the same
passes: the machine's speed moves by tens of percent between minutes here, so a child is
only ever compared with what was timed beside it.  A candidate's rank is its median over
``repeats`` calls.  The budget counts children only; the parents' re-timing is the price
of a fair comparison.

With ``strategy="random"`` the same budget goes to fresh inputs of ``generate``, ranked
the same way: the reference the bench compares the search with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.isolate import InputFailure
from wcetfit.search.candidates import Normaliser, time_candidates
from wcetfit.search.choices import ChoiceSequence
from wcetfit.search.engine import child

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimedOutcome:
    """The timed phase's result: the slowest new candidates, slowest first."""

    best: tuple[tuple[int, ChoiceSequence, float], ...]   # (key, draws, median ticks)
    timed: int                                            # children timed in all
    failures: tuple[InputFailure, ...]
    generations: int


def timed_search(target: Any, root: str, address: int, method: str,
                 normaliser: Normaliser, seeds: Sequence[ChoiceSequence], *,
                 budget: int, generation: int,
                 parents: int, repeats: int, keep: int, first_key: int,
                 strategy: str = "mutate", fresh_index: int = 0, seed: int = 0,
                 crossover_share: float = 0.2, wait: bool = True) -> TimedOutcome:
    """Search inputs of ``root`` by their measured time (module docstring).

    ``seeds``: the draws of the first parents (the slowest measured inputs and the model
    search's best); ``first_key``: the first input number a child gets; ``fresh_index``:
    the next input number of ``generate`` (the random strategy's inputs).  Returns the
    ``keep`` slowest children (never a seed itself: it is measured already)."""
    rng = np.random.default_rng([seed, 0x71ED])
    pool: list[tuple[int, ChoiceSequence]] = []
    key = first_key
    for s in _distinct(seeds)[:parents]:
        pool.append((key, s))
        key += 1
    seed_keys = {k for k, _ in pool}
    seen = {signature(s) for _, s in pool}     # a child equal to one timed is no new input
    children_timed = 0
    failures: list[InputFailure] = []
    ranked: dict[int, tuple[ChoiceSequence, float]] = {}
    generations = 0
    while children_timed < budget:
        room = max(1, generation - (len(pool) if strategy != "random" else 0))
        want = min(room, budget - children_timed)
        children: dict[int, ChoiceSequence] = {}
        attempts = 0
        while len(children) < want and attempts < 20 * want:
            attempts += 1
            if strategy == "random" or not pool:
                s: ChoiceSequence | None = normaliser.record(fresh_index)
                fresh_index += 1
            else:
                s = child([q for _, q in pool], rng, normaliser, crossover_share)
            if s is None or signature(s) in seen:
                continue
            seen.add(signature(s))
            children[key] = s
            key += 1
        if not children:
            break
        batch = dict(children)
        if strategy != "random":
            batch.update(pool)       # the parents again, beside their children
        keys, ticks, failed = time_candidates(target, root, address, method, batch, repeats,
                                              wait=wait)
        failures.extend(failed)
        children_timed += len(children)
        generations += 1
        # a candidate that crashed has no call: no time, no rank
        timed_now = {int(k): float(np.nanmedian(row)) for k, row in zip(keys, ticks)
                     if np.isfinite(row).any()}
        # this generation's times replace older ones: only candidates timed together are
        # compared (a parent's old time is from another minute of the machine)
        gen_rank = sorted(timed_now, key=lambda k: -timed_now[k])
        for k in timed_now:
            ranked[k] = (batch[k], timed_now[k])
        if strategy != "random":
            pool = [(k, batch[k]) for k in _distinct_keys(gen_rank, batch)][:parents]
        log.info("timed search %s: %d timed, slowest this generation %.0f ticks", root,
                 children_timed, timed_now[gen_rank[0]] if gen_rank else float("nan"))
    # the slowest children: the last parents first (they survived every generation beside
    # the others), then the rest by their last time (from the generation it was taken in)
    order = [k for k, _ in pool if k not in seed_keys]
    order += [k for k in sorted(ranked, key=lambda k: -ranked[k][1])
              if k not in seed_keys and k not in order]
    best = tuple((k, ranked[k][0], ranked[k][1]) for k in order[:keep] if k in ranked)
    return TimedOutcome(best, children_timed, tuple(failures), generations)


def signature(seq: ChoiceSequence) -> bytes:
    """The whole content of a choice sequence (a repr would elide the middle of a long
    array, and two different buffers would look alike)."""
    parts = [str(seq.index).encode()]
    for c in seq.choices:
        v = c.value
        body = bytes(v) if isinstance(v, (bytes, bytearray)) else np.asarray(v).tobytes()
        parts += [c.method.encode(), str(np.shape(v)).encode(), body]
    return b"\0".join(parts)


def _distinct(seqs: Sequence[ChoiceSequence]) -> list[ChoiceSequence]:
    """The sequences without repeats, first kept."""
    out, seen = [], set()
    for s in seqs:
        sig = signature(s)
        if sig not in seen:
            seen.add(sig)
            out.append(s)
    return out


def _distinct_keys(order: Sequence[int], batch: Mapping[int, ChoiceSequence]) -> list[int]:
    """``order`` without keys whose draws repeat an earlier key's."""
    out, seen = [], set()
    for k in order:
        sig = signature(batch[k])
        if sig not in seen:
            seen.add(sig)
            out.append(k)
    return out
