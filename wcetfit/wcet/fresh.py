"""The bound against calls it was not made from: fresh inputs, timed now.

A measurement-based bound is a claim about calls nobody timed yet.  The way to test it is
the way the bench does (``bench.bracket``): inputs of another seed, timed only, every call
compared with the bound.  Two things can put a fresh call above it, and they call for
different remedies, so the check tells them apart:

* the machine ran slower than in the timing run (a co-tenant, another session): the same
  calls, slowed to at most the speed the bound covers, stay below it.  The bound claims
  the timing run's slowest period (or ``[wcet] machine_speed``), not the machine's worst;
* the model missed the input (data-dependent costs, a path the inputs did not try): the
  call is above the bound at the bound's own speed.

Calls the bound's own rule takes for interrupts (``wcetfit.wcet.dispersion``: far from
their input's median and at least 500 ns above it) are counted and left out, as the bound
leaves them out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FreshCall:
    """One timed call of a fresh input: its input's number, the call's ticks as timed,
    and its ticks slowed to at most the bound's machine speed."""

    input: int
    ticks: float
    at_bound_speed: float


@dataclass(frozen=True)
class FreshCheck:
    """Every call of fresh inputs against one function's bound (ticks: TSC ticks)."""

    function: str
    seed: int
    inputs: int                  # fresh inputs with at least one timed call
    repeats: int                 # timed calls per input
    calls: int                   # timed calls
    interrupted: int             # taken for interrupts by the bound's rule: not compared
    interrupted_above: int       # of them, above the bound (said, not hidden)
    slowest_interrupted: FreshCall | None
    bound_ticks: float
    bound_speed: float           # the machine's slowest speed the bound covers
    fresh_speed: float | None    # the fresh run's slowest period over its fast end (None:
                                 # not followed, its calls too short)
    above: int                   # the function's own calls above the bound
    above_at_bound_speed: int    # of them, still above once slowed to the bound's speed
    slowest: FreshCall | None    # the slowest own call
    failed_inputs: tuple[int, ...]   # inputs whose calls crashed or hung
    # the fresh run's load (wcetfit.timing.run.load_warning): other processes runnable
    # while it ran, which slow every call alike, and a speed followed against the run's
    # own fast end does not show that (None: nothing else ran, or not sampled)
    load_warning: str | None = None
    # fresh inputs with an own call above the bound at the bound's own speed: those the
    # model misses (what `wcetfit check --adopt` makes inputs of the training)
    missed_inputs: tuple[int, ...] = ()
    # each missed input's slowest call above the bound at the bound's speed: what an
    # adopted input's bound must stay above (wcetfit.search.adopt)
    missed_calls: tuple[FreshCall, ...] = ()
    # of the missed inputs, those whose own calls' median is below the bound at its speed:
    # a single call's excess, not an input the model misses (libtasn1's
    # asn1_get_length_der: one call of 1,248 ticks among 52–104, against a bound of 415)
    single_call_inputs: tuple[int, ...] = ()
    # own calls read above the bound by no more than one TSC step (``quantum_ticks``): the
    # timer cannot tell them from calls at the bound, so they are not counted ``above``
    unresolved: int = 0
    quantum_ticks: float = 1.0

    @property
    def covered(self) -> bool:
        return self.above == 0

    @property
    def slower_machine(self) -> bool:
        """Every call above the bound is below it at the bound's speed: the fresh run met
        a slower period than the bound was made for, not an input the model missed."""
        return self.above > 0 and self.above_at_bound_speed == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["covered"] = self.covered
        d["slower_machine"] = self.slower_machine
        d["failed_inputs"] = list(self.failed_inputs)
        d["missed_inputs"] = list(self.missed_inputs)
        d["missed_calls"] = [asdict(c) for c in self.missed_calls]
        d["single_call_inputs"] = list(self.single_call_inputs)
        return d


def check_fresh(function: str, seed: int, indices: Any, ticks: Any, *, bound_ticks: float,
                bound_speed: float, tsc_hz: float | None,
                failed_inputs: tuple[int, ...] = (), positions: Any = None,
                load_warning: str | None = None) -> FreshCheck:
    """Each fresh call (``ticks`` [input, repeat], NaN where not timed) against the bound.

    The fresh run's speed is followed as the fit follows the timing run's
    (wcetfit.timing.speed): its calls divided by it decide which are interrupted (the
    bound's rule), and each call slowed to at most ``bound_speed`` over the fresh run's
    fast end says whether it would be below the bound at the speed the bound covers.
    ``positions``: the calls' order in the run (wcetfit.timing.speed.call_positions)."""
    from wcetfit.fit.robust import detect_quantum, summarize_repeats
    from wcetfit.timing.speed import speed_profile
    from wcetfit.wcet.dispersion import not_interrupted

    t = np.asarray(ticks, dtype=float)
    if t.ndim == 1:
        t = t[:, None]
    idx = np.asarray(indices)
    timed = np.isfinite(t)
    if not timed.any():
        return FreshCheck(function=function, seed=int(seed), inputs=0, repeats=t.shape[1],
                          calls=0, interrupted=0, interrupted_above=0,
                          slowest_interrupted=None, bound_ticks=float(bound_ticks),
                          bound_speed=float(bound_speed), fresh_speed=None, above=0,
                          above_at_bound_speed=0, slowest=None,
                          failed_inputs=tuple(int(i) for i in failed_inputs),
                          load_warning=load_warning)
    quantum = detect_quantum(t[timed]) or 1.0
    profile = speed_profile(t, quantum, positions=positions)
    if profile.followed:
        factors = np.where(np.isfinite(profile.factors), profile.factors, 1.0)
        at_reference = t / factors
        fresh_speed: float | None = float(profile.max_factor)
        # a call slowed to at most the bound's speed: its time over the fresh run's fast
        # end, capped at what the bound covers
        capped = t * np.minimum(1.0, bound_speed / np.maximum(factors, 1e-9))
    else:
        at_reference, fresh_speed, capped = t, None, t
    summary = summarize_repeats(at_reference, quantum=quantum)
    own = np.asarray(not_interrupted(summary, at_reference, tsc_hz), dtype=bool) & timed
    # a reading within one TSC step above the bound is the timer's resolution: the call's
    # time may be below the bound (libpng's png_get_uint_31, calls of 52, 78 and 104 ticks
    # with a step of 26, against a bound of 95.4: five readings of 104 "not covered")
    above = own & (t > bound_ticks + quantum)
    unresolved = own & (t > bound_ticks) & ~above
    missed = above & (capped > bound_ticks + quantum)       # above at the bound's speed
    interrupted = timed & ~own

    def slowest_of(calls: np.ndarray) -> FreshCall | None:
        if not calls.any():
            return None
        row, col = np.unravel_index(int(np.argmax(np.where(calls, t, -np.inf))), t.shape)
        return FreshCall(int(idx[row]), float(t[row, col]), float(capped[row, col]))
    slowest = slowest_of(own)
    missed_calls, single = [], []
    for row in np.flatnonzero(missed.any(axis=1)):
        col = int(np.argmax(np.where(missed[row], capped[row], -np.inf)))
        missed_calls.append(FreshCall(int(idx[row]), float(t[row, col]),
                                      float(capped[row, col])))
        if float(np.median(capped[row][own[row]])) <= bound_ticks:
            single.append(int(idx[row]))
    return FreshCheck(
        function=function, seed=int(seed), inputs=int(timed.any(axis=1).sum()),
        repeats=int(t.shape[1]), calls=int(timed.sum()), interrupted=int(interrupted.sum()),
        interrupted_above=int((interrupted & (t > bound_ticks)).sum()),
        slowest_interrupted=slowest_of(interrupted),
        bound_ticks=float(bound_ticks), bound_speed=float(bound_speed),
        fresh_speed=fresh_speed, above=int(above.sum()),
        above_at_bound_speed=int(missed.sum()),
        slowest=slowest, failed_inputs=tuple(int(i) for i in failed_inputs),
        load_warning=load_warning, unresolved=int(unresolved.sum()),
        quantum_ticks=float(quantum),
        missed_inputs=tuple(int(i) for i in np.unique(idx[missed.any(axis=1)])),
        missed_calls=tuple(sorted(missed_calls, key=lambda c: c.input)),
        single_call_inputs=tuple(sorted(single)))


def speed_to_declare(check: FreshCheck) -> float | None:
    """The ``[wcet] machine_speed`` to declare after a check the machine's speed alone
    failed: the fresh run's slowest period, or more where the slowest call needs more (the
    bound scales with the declared speed over the one it covers); rounded up to 0.05.
    None when the check did not fail that way."""
    if not check.slower_machine or check.slowest is None or not check.fresh_speed:
        return None
    need = max(check.fresh_speed, check.bound_speed * check.slowest.ticks / check.bound_ticks)
    return math.ceil(need * 20 - 1e-9) / 20
