"""The timed calls the bound takes for interrupts and leaves out, and whether interrupts can
explain that many of them.

The bound covers the function's own calls (wcetfit.wcet.dispersion.not_interrupted): a
call at least 500 ns above its input's median and far from its other calls is taken for
an interrupt.  Interrupts land in a timed call at most about
wcetfit.fit.checks.INTERRUPT_RATE_HZ times per second of timed calls; when far more calls
were set aside than that explains, the others are the function's own slower calls (a
second mode of its time) or disturbances beyond interrupts (another process or the
hypervisor taking the core: on this project's shared VM, whatever else runs), which their
times cannot tell apart, and the bound that leaves them out rests on their being
disturbances.  libpcre2's pcre2_match, 220 inputs × 10 calls: 136 calls set aside, where
interrupts explain about a dozen (calls of 7,800 ticks beside 22,074 for the same input,
the first call of another 122,980 beside ~8,000).  The report says so, with the calls of
them above the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SetAside:
    """What the interrupt rule left out of the bound's calls."""

    calls: int                  # the timed calls
    interrupted: int            # taken for an interrupt (left out of the bound)
    preempted: int              # taken for a preemption (left out: a scheduler slice)
    expected: float             # interrupts at the rate would land in about this many
    rate_hz: float              # the rate taken (wcetfit.fit.checks.INTERRUPT_RATE_HZ)
    # the interrupted calls as timed, slowest first
    ticks: tuple[float, ...] = ()
    slowest_input: int | None = None   # the input number of the slowest of them

    @property
    def beyond_rate(self) -> bool:
        """Whether far more calls were taken for interrupts than interrupts explain."""
        from wcetfit.fit.checks import beyond_interrupt_rate

        return beyond_interrupt_rate(self.interrupted, self.expected)

    def above(self, bound_ticks: float) -> int:
        """How many of the interrupted calls took longer than ``bound_ticks``."""
        return int(sum(1 for t in self.ticks if t > bound_ticks))

    def to_dict(self, bound_ticks: float | None = None) -> dict[str, Any]:
        """Plain data for wcetfit.wcet.result.WcetResult.set_aside (the ticks list left out;
        ``above_bound`` counted against ``bound_ticks`` when given)."""
        out: dict[str, Any] = {
            "calls": self.calls, "interrupted": self.interrupted,
            "preempted": self.preempted, "expected": round(self.expected, 3),
            "rate_hz": self.rate_hz, "beyond_rate": self.beyond_rate}
        if self.ticks:
            out["slowest_ticks"] = float(self.ticks[0])
            out["slowest_input"] = self.slowest_input
        if bound_ticks is not None:
            out["above_bound"] = self.above(bound_ticks)
        return out


def set_aside_of(system: Any, fit: Any) -> SetAside | None:
    """:func:`calls_set_aside` judged as the bound's dispersion judges them
    (wcetfit.wcet.dispersion.call_dispersion: the ticks at the reference speed, the repeat
    statistic at the fit's TSC step)."""
    from wcetfit.fit.robust import summarize_repeats

    ticks = getattr(system, "ticks_at_reference", system.ticks)
    return calls_set_aside(system, summarize_repeats(ticks, quantum=fit.quantum_ticks), ticks)


def calls_set_aside(system: Any, summary: Any, ticks: Any) -> SetAside | None:
    """The calls of ``system`` (its ``ticks`` as timed, ``indices`` the input numbers) that
    the interrupt rule leaves out, judged on ``ticks`` (at the reference speed, as the
    bound's rule judges them) with the repeat statistic's ``summary``; None without a TSC
    rate (no interrupt rule in ticks)."""
    from wcetfit.fit.checks import INTERRUPT_RATE_HZ
    from wcetfit.wcet.dispersion import interrupt_masks

    hz = getattr(system, "tsc_hz", None)
    if not hz:
        return None
    raw = np.asarray(system.ticks, dtype=float)
    raw = raw[:, None] if raw.ndim == 1 else raw
    timed = np.isfinite(raw)
    own, preempted = interrupt_masks(summary, ticks, hz)
    own = np.asarray(own, dtype=bool)
    preempted = np.asarray(preempted, dtype=bool) & timed
    interrupted = timed & ~own & ~preempted
    # the timed seconds as the fit's warning counts them (wcetfit.fit.checks.interrupts_beyond_rate:
    # at the reference speed), so that both say the same count
    at_reference = np.asarray(ticks, dtype=float)
    seconds = float(np.nansum(np.where(timed & ~preempted, at_reference, 0.0))) / float(hz)
    rows, cols = np.nonzero(interrupted)
    values = raw[rows, cols]
    order = np.argsort(-values, kind="stable")
    slowest = None
    if order.size:
        row = int(rows[order[0]])
        indices = getattr(system, "indices", None)
        slowest = (int(np.asarray(indices)[row]) if indices is not None
                   and len(indices) > row else row)
    return SetAside(calls=int(timed.sum()), interrupted=int(interrupted.sum()),
                    preempted=int(preempted.sum()), expected=seconds * INTERRUPT_RATE_HZ,
                    rate_hz=INTERRUPT_RATE_HZ,
                    ticks=tuple(float(v) for v in values[order]), slowest_input=slowest)
