"""The bracket: the WCET bound from above, the slowest measured input from below.

The IPET bound is an upper value over the paths the CFG and the facts allow; the slowest
measured input is what a real call reached.  How far apart they are says how much the
bound rests on paths no input took: :func:`beyond_inputs` lists the loops and blocks the
worst path runs more often than any input did (the places where more inputs, the search,
a loop bound or a flow fact would narrow the bracket).  The report shows both ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

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


def beyond_inputs(root: FunctionModel, path_counts: Mapping[int, int],
                  columns: Sequence[tuple[str, int]], counts: np.ndarray,
                  numbers: Sequence[int], *, limit: int = 8) -> tuple[Beyond, ...]:
    """The root's loop headers and blocks the worst path (``path_counts``: block → count
    per call) runs more often than any measured input (``counts`` [input, column], rows
    numbered ``numbers``): loops first, then by how far the path goes past the inputs."""
    col = {a: i for i, (fn, a) in enumerate(columns) if fn == root.name}
    headers = {lp.header for lp in root.loops}
    out = []
    for a, n in path_counts.items():
        if a not in col or n <= 0:
            continue
        observed = np.asarray(counts)[:, col[a]]
        most = int(observed.max()) if observed.size else 0
        if n > most:
            out.append(Beyond(f"{root.name}+{a - root.address:#x}",
                              "loop" if a in headers else "block", int(n), most,
                              int(numbers[int(np.argmax(observed))]) if observed.size else -1))
    out.sort(key=lambda b: (b.kind != "loop", -(b.path_count - b.max_observed)))
    return tuple(out[:limit])


@dataclass(frozen=True)
class BracketWidth:
    """Where the bracket's width comes from: bound ÷ slowest measured input as the product
    of its five parts, each a ratio of figures the report prints.

    The IPET point is the model's time of the worst path; the input predicted slowest is
    the measured input nearest it in the model's eyes.  So the width splits into the path
    going beyond every input (``beyond``: point ÷ that input's prediction), the model's
    error there (``model``: its prediction ÷ its measured time, > 1 when the model
    over-predicts the long paths), that input against the slowest measured one (``input``:
    < 1 when the slowest input is another, predicted lower), the confidence margin and
    the single-call dispersion.  Their product is exactly bound ÷ slowest."""

    beyond: float
    model: float
    input: float
    margin: float
    dispersion: float

    @property
    def total(self) -> float:
        return self.beyond * self.model * self.input * self.margin * self.dispersion


def bracket_width(bound: float | None, point: float | None, margin: float | None,
                  highest_prediction: float | None, its_measured: float | None,
                  slowest: float | None) -> BracketWidth | None:
    """The parts of bound ÷ slowest (:class:`BracketWidth`), in ticks throughout; None
    when a figure is missing or not positive."""
    figures = (bound, point, highest_prediction, its_measured, slowest)
    if any(v is None or not np.isfinite(v) or v <= 0 for v in figures):
        return None
    m = float(margin or 0.0)
    return BracketWidth(beyond=point / highest_prediction,
                        model=highest_prediction / its_measured,
                        input=its_measured / slowest,
                        margin=(point + m) / point,
                        dispersion=bound / (point + m))
