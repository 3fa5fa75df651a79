"""Inputs whose timed calls are faster than any core runs the path that was counted.

The counts come from one call in the count run's process, the times from calls in a timing
worker.  Where the function reads memory its arguments do not own (a buffer sized
shorter than the length the function is given) the two processes hold different bytes
there, and the calls take different paths: libc's memchr, given a length of 2**32 beside
a 5,120-byte buffer, was counted through 4,593 iterations of its 32-byte loop and timed at
234–390 ticks.  Paired, such a row pulls the loop's cost to nothing (0.08 tick per
iteration) and the bound rests on a factor of ×19.6 for single calls.

No core retires more than a handful of instructions per cycle, and none runs at more than
twice the TSC's rate, so the counted path's instructions take at least instructions /
:data:`MAX_INSTRUCTIONS_PER_TICK` ticks.  An input whose every timed call is faster did not
run that path when timed: it is left out of the fit, and said.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from wcetfit.model import FunctionModel

# Instructions per TSC tick no x86-64 core reaches: 12 per cycle (AMD Zen 4 and Intel
# Golden Cove dispatch 6 macro-ops a cycle, each at best a fused pair of instructions) at
# twice the TSC's rate (this VM: a 2.596 GHz TSC on cores boosting to ~3.7 GHz).
MAX_INSTRUCTIONS_PER_TICK = 24.0


def instruction_floor(system: Any, functions: Mapping[str, FunctionModel]) -> np.ndarray:
    """Per row of ``system``, the least ticks its counted path can take."""
    per_block = {}
    for name, fn in functions.items():
        for b in fn.blocks:
            per_block[(name, b.address)] = b.n_instructions
    weights = np.array([per_block.get(c, 0) for c in system.columns], dtype=float)
    return (np.asarray(system.counts, dtype=float) @ weights) / MAX_INSTRUCTIONS_PER_TICK


def too_fast_rows(system: Any, functions: Mapping[str, FunctionModel]) -> np.ndarray:
    """Rows whose every timed call is below the floor of their counted path."""
    ticks = np.asarray(system.ticks, dtype=float)
    with np.errstate(invalid="ignore"):
        slowest = np.nanmax(np.where(np.isfinite(ticks), ticks, -np.inf), axis=1)
    return np.isfinite(slowest) & (slowest > 0) & (slowest < instruction_floor(system, functions))


def without_rows(system: Any, drop: np.ndarray) -> Any:
    """``system`` without the rows ``drop`` marks."""
    keep = ~np.asarray(drop, dtype=bool)
    return replace(system, indices=system.indices[keep], counts=system.counts[keep],
                   ticks=system.ticks[keep])


def too_fast_warning(system: Any, functions: Mapping[str, FunctionModel],
                     drop: np.ndarray) -> str:
    """The fit's warning for the rows left out."""
    from wcetfit.numbering import input_label

    rows = np.flatnonzero(drop)
    floor = instruction_floor(system, functions)
    i = int(rows[np.argmax(floor[rows])])
    ticks = np.asarray(system.ticks[i], dtype=float)
    return (f"{rows.size} input(s) left out of the fit: every timed call was faster than "
            f"any core runs the path that was counted (e.g. {input_label(int(system.indices[i]))}: "
            f"{floor[i] * MAX_INSTRUCTIONS_PER_TICK:,.0f} instructions counted, at least "
            f"{floor[i]:,.0f} ticks at {MAX_INSTRUCTIONS_PER_TICK:.0f} instructions per tick, "
            f"timed at {np.nanmin(ticks):,.0f}–{np.nanmax(ticks):,.0f} ticks); the timed "
            f"calls took another path: the function reads memory its arguments do not own "
            f"(a length beyond its buffer), which differs between the count run's process "
            f"and the timing worker, or state the arguments do not restore: make "
            f"generate() size every buffer to the length the function is given")
