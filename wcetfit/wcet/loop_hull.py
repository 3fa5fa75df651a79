"""Observed relations between loops: the upper hull of their counts over the inputs.

Per-loop bounds let the worst path run every loop of a function at its own maximum at
once, though no input can: zlib's ``adler32_z`` runs its 16-byte block loop ``len/16``
times and its remainder loop ``len % 16`` times, so with ``len`` ≤ 6,000 the two maxima
(374 and 15) never meet — the IPET took both, 1.97× the slowest call.  For every pair of
loops of a function (siblings or nested), the inputs' pairs of header counts (x, y) lie
under the upper convex hull of those points; each edge of that hull is a line
``y ≤ a + b·x`` above every input, and together they keep the worst path where the inputs
were (for adler32_z: y ≤ 15·(375 − x) near the longest inputs).  Of the rising edges only
the one that ends at the hull's peak is kept: for nested loops whose inner count grows
with the outer pass (isort: up to i inner passes on outer pass i), per-entry bounds allow
the inner maximum on every outer pass, twice what any input runs, and the observed
per-call total they replace is gone with them.

The same lines relate loops of different functions (:func:`cross_loop_relations`), each
count the function's total per call of the root, where the callees are bounded per call
site (wcetfit.wcet.context): liblzma's encoder calls one of two functions through a
pointer, by preset, and no input ran both; each one's totals alone let the worst path
run both at their maxima.

Like observed loop bounds and path envelopes, these are facts about the inputs, not about
the program: the ones that bind the worst path are listed, and ``[wcet] observed_paths =
false`` drops them with the envelopes.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from wcetfit.model import FunctionModel
from wcetfit.wcet.envelope import CountEnvelope
from wcetfit.wcet.result import loop_key

log = logging.getLogger(__name__)

# Pairs grow with the square of a function's loops; past this many loops only pairs of
# loops whose counts both vary are related (the others add nothing a bound does not).
MAX_LOOPS = 40


def upper_hull_edges(x: np.ndarray, y: np.ndarray) -> list[tuple[float, float]]:
    """(slope, intercept) of every non-vertical edge of the upper convex hull of the points
    (x_i, y_i): each line lies on or above every point."""
    pts = sorted(set(zip(np.asarray(x, float).tolist(), np.asarray(y, float).tolist())))
    # per x only the highest point matters
    top: dict[float, float] = {}
    for px, py in pts:
        top[px] = max(py, top.get(px, -np.inf))
    pts = sorted(top.items())
    hull: list[tuple[float, float]] = []
    for p in pts:            # Andrew's monotone chain, upper part
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    out = []
    for (x1, y1), (x2, y2) in zip(hull, hull[1:]):
        slope = (y2 - y1) / (x2 - x1)
        out.append((slope, y1 - slope * x1))
    return out


def loop_relations(fn: FunctionModel, counts: np.ndarray, addresses: Sequence[int], *,
                   min_inputs: int = 5) -> tuple[CountEnvelope, ...]:
    """Hull edges between the header counts of every pair of ``fn``'s loops, as
    envelopes ``N(y) ≤ intercept + slope·N(x)`` (:func:`hull_lines`)."""
    col = {a: i for i, a in enumerate(addresses)}
    headers = [lp.header for lp in fn.loops if lp.header in col]
    if len(headers) < 2:
        return ()
    counts = np.asarray(counts, dtype=float)
    varying = [h for h in headers if np.ptp(counts[:, col[h]]) > 0]
    if len(headers) > MAX_LOOPS:
        headers = varying
    out: list[CountEnvelope] = []
    for hx, hy in itertools.permutations(headers, 2):
        for slope, intercept in hull_lines(counts[:, col[hx]], counts[:, col[hy]],
                                           min_inputs):
            out.append(CountEnvelope((hy,), hx, slope, intercept))
    log.debug("%s: %d loop relations", fn.name, len(out))
    return tuple(out)


def hull_lines(x: np.ndarray, y: np.ndarray, min_inputs: int = 5
               ) -> list[tuple[float, float]]:
    """(slope, intercept) of the lines ``y ≤ intercept + slope·x`` kept from the upper
    hull of the inputs' points: the falling edges that cut below y's observed maximum
    within x's range, and the rising edge that ends at the peak.  An empty list when
    fewer than ``min_inputs`` inputs ran either loop or x never varies."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    entered = (x > 0) | (y > 0)
    if entered.sum() < min_inputs or np.ptp(x) == 0:
        return []
    xmax, ymax = x.max(), y.max()
    edges = upper_hull_edges(x, y)
    out: list[tuple[float, float]] = []
    rising = [e for e in edges if e[0] >= 0]
    if rising:
        # The rising edge that ends at the hull's peak: y's per-call total at the most
        # passes of x seen, and its trend beyond them.  A per-entry bound of y (a [loops]
        # fact, which replaces y's observed total) allows y's maximum on every pass of x;
        # an inner loop that runs up to i times on outer pass i (isort) runs half that.
        # The other rising edges hold where x is small, which the worst path avoids.
        slope, intercept = rising[-1]
        out.append((float(slope), float(intercept)))
    for slope, intercept in edges:
        # a falling edge matters only where it lies below y's maximum within x's range
        if slope < 0 and intercept + slope * xmax < ymax:
            out.append((float(slope), float(intercept)))
    return out


@dataclass(frozen=True)
class CrossLoopRelation:
    """``N(y) ≤ intercept + slope·N(x)`` between the header counts of two loops in
    different functions, each count the total per call of the root over all the
    function's activations (in the per-call-site program: over all its instances)."""

    y: tuple[str, int]          # (function, loop header)
    x: tuple[str, int]
    slope: float
    intercept: float
    y_label: str                # "inflate+0x390", for the report
    x_label: str

    def text(self) -> str:
        if self.slope == 0:
            return f"N({self.y_label}) ≤ {self.intercept:g}"
        sign = "+" if self.slope > 0 else "−"
        return (f"N({self.y_label}) ≤ {self.intercept:g} {sign} "
                f"{abs(self.slope):.4g}·N({self.x_label})")

    def slack(self, count_of: Mapping[tuple[str, int], float]) -> float:
        """How far below its line ``count_of`` keeps (negative: broken)."""
        return (self.intercept + self.slope * float(count_of.get(self.x, 0.0))
                - float(count_of.get(self.y, 0.0)))


def cross_loop_relations(functions: Mapping[str, FunctionModel], names: Sequence[str],
                         counts: np.ndarray, columns: Sequence[tuple[str, int]], *,
                         excluded: Mapping[str, set[int]] = {},
                         min_inputs: int = 5) -> tuple[CrossLoopRelation, ...]:
    """The upper hull's lines (:func:`hull_lines`) between the header counts of every
    pair of loops in two different functions of ``names`` whose counts vary, totals per
    call of the root (``counts``' columns, named (function, address)).  Loops whose
    header is in ``excluded`` (blocks a [loops] fact governs) stay out: the user's
    figure may lie beyond what the inputs ran.  Of more than :data:`MAX_LOOPS` such
    loops, those with the largest counts."""
    pos = {c: j for j, c in enumerate(columns)}
    C = np.asarray(counts, dtype=float)
    loops = [(name, lp.header) for name in names for lp in functions[name].loops
             if (name, lp.header) in pos
             and lp.header not in excluded.get(name, ())
             and np.ptp(C[:, pos[(name, lp.header)]]) > 0]
    if len(loops) > MAX_LOOPS:
        loops = sorted(loops, key=lambda k: -C[:, pos[k]].max())[:MAX_LOOPS]
    out: list[CrossLoopRelation] = []
    for kx, ky in itertools.permutations(loops, 2):
        if kx[0] == ky[0]:
            continue            # one function's own pairs: loop_relations
        for slope, intercept in hull_lines(C[:, pos[kx]], C[:, pos[ky]], min_inputs):
            out.append(CrossLoopRelation(ky, kx, slope, intercept,
                                         loop_key(functions[ky[0]], ky[1]),
                                         loop_key(functions[kx[0]], kx[1])))
    log.debug("%d relations between loops of different functions", len(out))
    return tuple(out)
