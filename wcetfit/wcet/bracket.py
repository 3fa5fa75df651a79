"""The bracket: the WCET bound from above, the slowest measured input from below.

The IPET bound is an upper value over the paths the CFG and the facts allow; the slowest
measured input is what a real call reached.  How far apart they are says how much the
bound rests on paths no input took: :func:`bracket` gives the ratio and lists the loops
and blocks the worst path runs more often than any input did (the places where more
inputs, a search, a loop bound or a flow fact would narrow the bracket).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.model import FunctionModel


@dataclass(frozen=True)
class Beyond:
    """A loop header or block the worst path runs more often than any measured input."""

    name: str                  # "fn+0xOFF"
    kind: str                  # "loop" (its header) or "block"
    path_count: int            # per call on the worst-case path
    max_observed: int          # the most any measured input ran it per call
    input_index: int           # the input that ran it most


@dataclass(frozen=True)
class Bracket:
    bound_ticks: float
    slowest_index: int          # the measured input with the slowest median call
    slowest_ticks: float        # its median call, as measured (TSC ticks)
    slowest_searched: bool      # found by the worst-case search (wcetfit.search)
    slowest_arguments: str | None
    beyond: tuple[Beyond, ...]  # worst-path places beyond every input, largest excess first

    @property
    def ratio(self) -> float:
        return self.bound_ticks / self.slowest_ticks if self.slowest_ticks > 0 else float("inf")


def bracket(bound_ticks: float, root: FunctionModel, path_counts: Mapping[int, int],
            columns: Sequence[tuple[str, int]], counts: np.ndarray, indices: np.ndarray,
            ticks: np.ndarray, *, searched_from: int | None = None,
            arguments: str | None = None, limit: int = 8) -> Bracket:
    """``path_counts``: the root's block counts on the worst-case path; ``counts`` [input,
    column] and ``ticks`` [input, repeat] the measured inputs (``indices`` their numbers)."""
    med = np.nanmedian(ticks, axis=1)
    row = int(np.nanargmax(med))
    col = {a: i for i, (fn, a) in enumerate(columns) if fn == root.name}
    headers = {lp.header for lp in root.loops}
    beyond = []
    for a, n in path_counts.items():
        if a not in col or n <= 0:
            continue
        observed = counts[:, col[a]]
        most = int(observed.max()) if observed.size else 0
        if n > most:
            off = a - root.address
            beyond.append(Beyond(f"{root.name}+{off:#x}", "loop" if a in headers else "block",
                                 int(n), most, int(indices[int(np.argmax(observed))])))
    # Loops first (they carry the bound), then by how far the path goes past the inputs.
    beyond.sort(key=lambda b: (b.kind != "loop", -(b.path_count - b.max_observed)))
    index = int(indices[row])
    return Bracket(float(bound_ticks), index, float(med[row]),
                   searched_from is not None and index >= searched_from, arguments,
                   tuple(beyond[:limit]))
