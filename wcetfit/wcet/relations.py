"""Observed count relations and the row space of the measured counts.

**Invariance on non-estimable directions.**  Every feasible count vector x of the program
above is a conservative flow, so it lies in the CFG's structural count space (the span of
all count vectors any execution can produce).  Adding to the costs any vector orthogonal
to that space leaves Σ cost·x unchanged for every feasible x, hence the bound too.  This
is what makes the bound well defined although single block costs are not: the fit's
``solution_ticks`` is one particular solution, and any other solution differs from it by
such a vector *in the directions the inputs exercised*.  (Directions of the structural
space the inputs never exercised — blocks never executed, or groups the inputs did not
separate — are not determined by the data; the report says so: see
:func:`count_space_residual`.)  tests/test_wcet.py checks the invariance.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import FunctionModel
from wcetfit.wcet.result import CountRelation

log = logging.getLogger(__name__)


def observed_relations(counts: np.ndarray, addresses: Sequence[int],
                       max_relations: int = 64) -> tuple[CountRelation, ...]:
    """Exact linear relations Σ c·count = r that every row of ``counts`` satisfies.

    The IPET maximises over all count vectors the CFG allows; the fit only knows costs on
    the span of the count vectors it saw.  A worst case outside that span has no
    measured cost (the non-estimable directions make it arbitrary), so the IPET is kept
    to the observed affine span: every integer relation among the executed blocks'
    counts and the constant 1 (the call itself).  Relations the CFG already forces are
    among them and cost nothing.  Blocks no input executed are left out, so their
    relation "count = 0" does not forbid them.

    Exact arithmetic: the relations are the null space of an independent subset of the
    rows, computed with rationals, scaled to coprime integers and checked on
    every row; a relation that fails the check (a numerically chosen row set gone wrong)
    is dropped."""
    X = np.asarray(counts, dtype=np.int64)
    executed = [j for j in range(X.shape[1]) if X[:, j].any()]
    if not executed or X.shape[0] == 0:
        return ()
    A = np.hstack([X[:, executed], np.ones((X.shape[0], 1), dtype=np.int64)])
    # distinct rows, then an independent subset by pivoted QR on their transpose
    uniq = np.unique(A, axis=0)
    from scipy.linalg import qr
    _, R, piv = qr(uniq.T.astype(float), mode="economic", pivoting=True)
    diag = np.abs(np.diag(R)) if R.size else np.zeros(0)
    tol = diag.max(initial=0.0) * max(uniq.shape) * np.finfo(float).eps * 10
    rank = int((diag > tol).sum())
    rows = uniq[np.sort(piv[:rank])]
    out = []
    for ints in _integer_null_space(rows.tolist())[:max_relations]:
        coef = np.array(ints[:-1], dtype=np.int64)
        if np.any(A[:, :-1] @ coef + ints[-1] != 0):
            log.debug("dropping a count relation that fails on some rows")
            continue
        pairs = tuple((int(addresses[executed[j]]), int(c)) for j, c in enumerate(coef) if c)
        if pairs:
            out.append(CountRelation(pairs, int(-ints[-1])))
    return tuple(out)



def _integer_null_space(rows: list[list[int]]) -> list[list[int]]:
    """Basis of {v : rows·v = 0} as coprime integer vectors (exact, by fractions).

    Gauss–Jordan elimination on the (few, independent) rows; one basis vector per free
    column.  The matrices here are rank × (blocks + 1), a few dozen at most."""
    from fractions import Fraction

    m = [[Fraction(x) for x in r] for r in rows]
    ncol = len(m[0]) if m else 0
    pivots: list[int] = []
    r = 0
    for c in range(ncol):
        p = next((i for i in range(r, len(m)) if m[i][c] != 0), None)
        if p is None:
            continue
        m[r], m[p] = m[p], m[r]
        inv = 1 / m[r][c]
        m[r] = [x * inv for x in m[r]]
        for i in range(len(m)):
            if i != r and m[i][c] != 0:
                f = m[i][c]
                m[i] = [a - f * b for a, b in zip(m[i], m[r])]
        pivots.append(c)
        r += 1
        if r == len(m):
            break
    basis = []
    for free in (c for c in range(ncol) if c not in pivots):
        v = [Fraction(0)] * ncol
        v[free] = Fraction(1)
        for i, pc in enumerate(pivots):
            v[pc] = -m[i][free]
        den = 1
        for x in v:
            den = den * x.denominator // math.gcd(den, x.denominator)
        ints = [int(x * den) for x in v]
        g = 0
        for x in ints:
            g = math.gcd(g, abs(x))
        basis.append([x // g for x in ints] if g > 1 else ints)
    return basis

# --- estimability of a prediction ----------------------------------------------------------

class ObservedRowSpace:
    """The row space of a count matrix (with the overhead's column of ones): the count
    directions the inputs exercised.  Σ cost·v is estimable from the measurements iff v
    lies in it; :meth:`residual` says how far a vector is from it."""

    def __init__(self, counts: np.ndarray, *, with_overhead: bool = True):
        C = np.asarray(counts, dtype=float)
        if C.ndim != 2:
            raise WcetError(f"counts must be a 2-d array, not shape {C.shape}")
        self.with_overhead = with_overhead
        if with_overhead:
            C = np.hstack([C, np.ones((C.shape[0], 1))])
        self.dim = C.shape[1]
        # Only distinct rows matter (inputs repeat count vectors): this keeps the SVD small.
        C = np.unique(C, axis=0) if C.shape[0] else C
        if C.size == 0:
            self.basis = np.zeros((0, self.dim))
            return
        _, s, vt = np.linalg.svd(C, full_matrices=False)
        # Rank tolerance as numpy's matrix_rank: counts are exact integers, so anything
        # above rounding error is a real direction.
        tol = (s[0] if s.size else 0.0) * max(C.shape) * np.finfo(float).eps
        self.basis = vt[s > tol] if s.size and s[0] > 0 else np.zeros((0, self.dim))

    @property
    def rank(self) -> int:
        return int(self.basis.shape[0])

    def residual(self, x: np.ndarray, overhead: float = 1.0) -> float:
        """Relative distance of ``x`` (one entry per count column; ``overhead`` is appended
        when the space has the ε column) from the row space: 0 = estimable."""
        v = np.asarray(x, dtype=float)
        if self.with_overhead:
            v = np.append(v, overhead)
        if v.shape != (self.dim,):
            raise WcetError(f"vector of length {v.shape} for a space of dimension {self.dim}")
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            return 0.0
        proj = self.basis.T @ (self.basis @ v)
        return float(np.linalg.norm(v - proj) / norm)


def count_space_residual(x: np.ndarray, counts: np.ndarray, *,
                         with_overhead: bool = True) -> float:
    """Relative distance of the count vector ``x`` from the row space of ``counts``.

    0 means Σ cost·x is estimable from these measurements (every particular solution of the
    fit gives the same value); a clearly positive value means the worst-case path exercises
    a direction the inputs never did (a block never executed, or a combination the inputs
    did not separate), and its predicted time depends on an arbitrary choice of solution.
    ``with_overhead`` appends the all-ones column of ε to ``counts`` and a 1 to ``x``.
    """
    return ObservedRowSpace(counts, with_overhead=with_overhead).residual(x)

def is_structural(fn: FunctionModel, rel: CountRelation) -> bool:
    """Whether the CFG alone forces ``rel`` (it is orthogonal to the count space)."""
    from wcetfit.static.structure import count_space_basis

    basis = count_space_basis(fn, epsilon=True)          # [dim, n_blocks + 1]
    index = {a: i for i, a in enumerate(fn.block_addresses)}
    v = np.zeros(len(fn.blocks) + 1)
    for a, c in rel.coefficients:
        v[index[a]] = c
    v[-1] = -rel.rhs
    return bool(np.abs(basis @ v).max(initial=0.0) <= 1e-9 * max(1.0, np.abs(v).max()))
