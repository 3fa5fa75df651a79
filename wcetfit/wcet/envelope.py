"""Observed path envelopes: how often blocks inside a loop ran, against how often the
loop's header ran, on the inputs measured.

The CFG lets IPET take every branch of a loop body its own way in every iteration; a
program rarely can.  adpcm's encoder clamps its step index at the top of the table and
its predicted sample at 16 bits, each in a few percent of the iterations on any input
(and not both in one iteration), yet a CFG-only worst path takes both clamps in every
iteration, at costs the fit measured while they were rare (mispredicted branches
included): 2.5–3× the slowest input's predicted time.

An envelope is the line y ≤ intercept + slope·h above every measured input, where h is
the header's count per call and y the count of one block, or the sum of two, of the
loop's body.  The line is the last edge of the points' upper convex hull (the one
that reaches the input with the most iterations), so it is the tightest line above all
inputs at the most iterations seen and beyond; when that edge falls (fewer executions
on longer inputs), the line is flat at the largest count seen.  Sums of two blocks
catch what single blocks cannot: two clamps that are each common but never together.

Like an observed loop bound, an envelope is a fact about the inputs, not about the
program: the report lists the ones that bind the worst path and the target can turn
them off (``[wcet] observed_paths = false``).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from wcetfit.model import FunctionModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CountEnvelope:
    """Σ count(blocks) ≤ intercept + slope · count(header), per call."""

    blocks: tuple[int, ...]
    header: int
    slope: float
    intercept: float

    def text(self) -> str:
        lhs = " + ".join(f"N({a:#x})" for a in self.blocks)
        if self.slope == 0:
            return f"{lhs} ≤ {self.intercept:g}"
        sign = "+" if self.slope > 0 else "−"
        return f"{lhs} ≤ {self.intercept:g} {sign} {abs(self.slope):.4g}·N({self.header:#x})"

    def holds(self, counts: dict[int, float]) -> bool:
        y = sum(counts.get(a, 0) for a in self.blocks)
        return y <= self.intercept + self.slope * counts.get(self.header, 0) + 1e-6


def upper_line(h: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the line above every point (h_i, y_i) that is lowest at the
    largest h: the last edge of the upper convex hull, or flat at max y if it falls."""
    h = np.asarray(h, dtype=float)
    y = np.asarray(y, dtype=float)
    hmax = h.max()
    top = y[h == hmax].max()
    left = h < hmax
    if not left.any():
        return 0.0, float(y.max())
    # the last hull edge ends at (hmax, top): through that point, a line stays above a
    # point on the left while its slope is at most (top − y_i)/(hmax − h_i); the edge is
    # the steepest such line, the one that follows the inputs' trend beyond hmax
    slope = float(np.min((top - y[left]) / (hmax - h[left])))
    if slope <= 0:
        return 0.0, float(y.max())
    return slope, float(top - slope * hmax)


# Pairs grow with the square of a loop body's blocks: beyond this many blocks only the
# single-block envelopes are made (a body of 64 blocks gives 2,016 pairs, which HiGHS
# solves in well under a second; thousands of blocks would give millions).
MAX_PAIR_BLOCKS = 64


def observed_envelopes(fn: FunctionModel, counts: np.ndarray, addresses: Sequence[int], *,
                       pairs: bool = True, min_inputs: int = 10) -> tuple[CountEnvelope, ...]:
    """Envelopes of every block of ``fn``'s loop bodies (innermost loop, header excluded)
    and of every pair of blocks in the same body, from ``counts[input, column]`` with
    ``addresses`` naming the columns (pairs only in bodies of at most
    :data:`MAX_PAIR_BLOCKS` blocks).  Only envelopes that say more than the CFG are kept
    (a line below the header's own count times the number of blocks summed), and not
    those every input lies on (equalities, stated elsewhere).  Fewer than
    ``min_inputs`` inputs that enter a loop give no envelopes for it."""
    C = np.asarray(counts, dtype=float)
    col = {a: j for j, a in enumerate(addresses)}
    innermost: dict[int, int] = {}
    for lp in sorted(fn.loops, key=lambda lp: lp.depth):
        for b in lp.body:
            innermost[b] = lp.header            # deeper loops overwrite
    out: list[CountEnvelope] = []
    for lp in fn.loops:
        h = lp.header
        if h not in col:
            continue
        hc = C[:, col[h]]
        entered = hc > 0
        if entered.sum() < min_inputs:
            continue
        body = [b for b in lp.body if b != h and innermost.get(b) == h and b in col]
        groups = [(b,) for b in body]
        if pairs and len(body) <= MAX_PAIR_BLOCKS:
            groups += list(itertools.combinations(body, 2))
        elif pairs:
            log.info("%s: loop %#x has %d blocks: envelopes of single blocks only", fn.name,
                     h, len(body))
        for g in groups:
            y = C[:, [col[b] for b in g]].sum(axis=1)
            # Above every input, those that skipped the loop (0, 0) included: a line
            # fitted to the entered ones alone can pass below the origin (zlib's
            # deflate_fast, called on a fifth of compress2's inputs: N(b) ≤ −1 +
            # N(header)), and then forces the loop to run, which no input that skipped
            # it did; the per-call-site program so excluded a measured call of another
            # strategy and fell back to a bound ×19 the slowest input.
            slope, icpt = upper_line(hc, y)
            # every input on the line: an equality, which the CFG or the observed count
            # relations (wcetfit.wcet.relations.observed_relations) state already
            if np.all(np.abs(y - (icpt + slope * hc)) < 1e-9):
                continue
            # the CFG alone allows each block once per header run
            if slope >= len(g) and icpt >= 0:
                continue
            if slope == 0 and icpt >= len(g) * hc.max():
                continue
            out.append(CountEnvelope(tuple(g), h, slope, icpt))
    return tuple(out)
