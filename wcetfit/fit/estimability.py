"""Which linear combinations of block costs the measurements determine.

Pure linear algebra on the normal matrix G = XᵀWX of the design X = [counts | config
indicators] (one column per distinct block column and one per probe configuration's
overhead ε).  No data passes here: :mod:`wcetfit.fit.rows` accumulates G and hands it over.
G is the one with integer row weights (exact); estimates under float row weights are
solved on its row space by :func:`row_space_solver`, so the rank is never decided on a
weighted matrix.

A combination c·θ is *estimable* iff c lies in the row space of X, i.e. iff the null-space
projector Q = I − X⁺X annihilates it.  Block k alone is estimable iff Q[k,k] = 0.  The
columns that are not estimable alone are grouped by the connected components of the graph
"i ~ j iff Q[i,j] ≠ 0": Q is then block-diagonal over the components, so the row space is
the direct sum of its parts inside each component, and every estimable combination splits
into combinations supported on single components.  Those parts are what the report shows.

Rank tolerance (see :func:`analyze`).  The columns are scaled to unit norm first (the
counts of a loop body and of the entry block differ by orders of magnitude; equilibration
makes singular values comparable).  A direction with singular value σ is declared
determined when σ > σ_tol, σ_tol = σ_max·max(τ_num, τ_noise):

* τ_num = sqrt(100·p·eps): with integer counts and integer row weights every entry of G
  is an exact integer sum (below 2^53), so the only error is that of the symmetric
  eigensolver, backward-stable with |δλ| ≲ p·eps·λ_max; a true zero therefore shows as
  σ ≲ sqrt(p·eps)·σ_max.  The factor 100 is margin.  (Forming G squares the condition
  number, which is why the tolerance is on σ = sqrt(λ), and why the counts' exactness
  matters: a QR of X would need no such argument but costs twice the flops and cannot
  exploit the accumulation by folds.)
* τ_noise = s/‖y‖_W, s the robust residual scale: moving the solution along a direction of
  singular value σ by as much as the whole signal needs (‖y‖/σ_max in scaled units)
  changes the residual sum of squares by (σ‖y‖/σ_max)²; if that is below one noise
  variance s², the data cannot tell that direction from zero — its standard error would
  exceed the size of the signal itself.  This is a deliberately low bar: weak but real
  directions stay estimable and get the wide intervals they deserve.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np
import scipy.linalg as sla
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

log = logging.getLogger(__name__)

EPS = float(np.finfo(np.float64).eps)


# --- identical columns -------------------------------------------------------------------

def column_classes(signatures: np.ndarray, gram: np.ndarray | None = None
                   ) -> list[np.ndarray]:
    """Classes of identical columns from per-column hash signatures.

    ``signatures`` is [k, p] int64: Σ_rows r_k[row]·X[row, col] (mod 2^64) for k random
    row weights, so equal columns have equal signatures and unequal integer columns
    collide with probability ~2^-64 per weight.  When ``gram`` (exact integer XᵀX) is
    given, a class is confirmed by |x_i − x_j|² = G_ii + G_jj − 2G_ij = 0 too.
    Classes are returned in order of their first column; each is sorted."""
    p = signatures.shape[1]
    seen: dict[tuple[int, ...], list[int]] = {}
    for j in range(p):
        seen.setdefault(tuple(int(v) for v in signatures[:, j]), []).append(j)
    out: list[np.ndarray] = []
    for members in seen.values():
        if gram is not None and len(members) > 1:
            # split a (vanishingly unlikely) hash collision by the exact Gram test
            rest = list(members)
            while rest:
                a = rest[0]
                same = [b for b in rest
                        if gram[a, a] + gram[b, b] - 2.0 * gram[a, b] == 0.0]
                out.append(np.asarray(same, dtype=np.int64))
                rest = [b for b in rest if b not in same]
        else:
            out.append(np.asarray(members, dtype=np.int64))
    out.sort(key=lambda c: int(c[0]))
    return out


# --- rank, null space, components ----------------------------------------------------------

@dataclass(frozen=True)
class Analysis:
    """Estimability of the columns of one normal matrix (all in *scaled* coordinates:
    unscaled coefficient c ↔ scaled D·c; unscaled solution θ = D·θ_s)."""

    scale: np.ndarray          # D, [p]
    eigvals: np.ndarray        # of D G D, ascending
    rank: int
    sigma_max: float
    sigma_tol: float
    Vr: np.ndarray             # [p, rank] row-space basis
    V0: np.ndarray             # [p, p-rank] null-space basis
    Q: np.ndarray              # [p, p] null-space projector
    q_tol: float
    estimable: np.ndarray      # bool [p]: column estimable alone
    components: tuple[np.ndarray, ...]   # of the non-estimable columns, sorted, by first index
    eig: tuple[np.ndarray, np.ndarray] | None = None   # (λ, V) of D G D, for re-thresholding
    # how uncertain the null-space projector's entries are before q_tol is capped at 1e-3
    # (above the cap: an ill-conditioned count matrix)
    null_space_uncertainty: float = 0.0

    @property
    def nullity(self) -> int:
        return int(self.V0.shape[1])

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """Minimum-norm (scaled) least-squares solution, returned unscaled: θ = D·G_s⁺·D·b."""
        d = self.scale
        lam = self.eigvals[self.eigvals.size - self.rank:]
        z = self.Vr.T @ (d * rhs)
        return d * (self.Vr @ (z / lam))

    def pinv_scaled(self) -> np.ndarray:
        lam = self.eigvals[self.eigvals.size - self.rank:]
        return (self.Vr / lam) @ self.Vr.T

    def is_estimable(self, c: np.ndarray, tol: float = 1e-7) -> bool:
        """Whether the unscaled combination ``c`` lies in the row space."""
        cs = self.scale * np.asarray(c, dtype=np.float64)
        nrm = np.linalg.norm(cs)
        if nrm == 0.0:
            return True
        return bool(np.linalg.norm(self.V0.T @ cs) <= max(tol, np.sqrt(self.q_tol)) * nrm)


# Beyond this uncertainty of the null space's projector, which block costs the inputs
# determine apart is decided with this tolerance (and said: ill_conditioned_note).
MAX_NULL_SPACE_UNCERTAINTY = 1e-3


def ill_conditioned_note(uncertainty: float) -> str:
    """What an analysis whose null space is uncertain to ``uncertainty`` means."""
    return (f"the inputs' block counts are nearly dependent (the count matrix is "
            f"ill-conditioned, to {uncertainty:.1g}): which block costs the inputs determine "
            f"apart is decided with a tolerance, and inputs that vary the counts more would "
            f"make it sure")


def analyze(gram: np.ndarray, noise_ratio: float = 0.0,
            eig: tuple[np.ndarray, np.ndarray] | None = None, *,
            quiet: bool = False) -> Analysis:
    """Rank, row/null spaces and groups of the columns of ``gram`` (= XᵀWX).

    ``noise_ratio`` is s/‖y‖_W (robust residual scale over the weighted norm of the
    measured times), 0 when unknown; see the module docstring for the tolerance.
    ``eig``: the eigendecomposition of an earlier analysis of the same matrix.
    ``quiet``: an ill-conditioned matrix is not logged as a warning (the caller, which
    analyses one system several times, says it once with
    :attr:`Analysis.null_space_uncertainty`)."""
    p = gram.shape[0]
    diag = np.diag(gram).copy()
    if p == 0:
        z = np.zeros((0, 0))
        return Analysis(np.zeros(0), np.zeros(0), 0, 0.0, 0.0, z, z, z, 0.0,
                        np.zeros(0, bool), ())
    if np.any(diag <= 0):
        raise ValueError("analyze() needs columns with a nonzero norm")
    d = 1.0 / np.sqrt(diag)
    if eig is None:
        gs = gram * d[:, None] * d[None, :]
        gs = 0.5 * (gs + gs.T)
        lam, vec = np.linalg.eigh(gs)
    else:
        lam, vec = eig
    lam_max = max(float(lam[-1]), 0.0)
    sigma_max = float(np.sqrt(lam_max))
    tau = max(float(np.sqrt(100.0 * p * EPS)), float(noise_ratio))
    sigma_tol = sigma_max * tau
    sig = np.sqrt(np.clip(lam, 0.0, None))
    rank = int(np.sum(sig > sigma_tol))
    Vr = vec[:, p - rank:]
    V0 = vec[:, :p - rank]
    Q = V0 @ V0.T
    if rank:
        lam_min_kept = float(lam[p - rank])
        # Perturbation of the null subspace: angle ≲ ‖δG‖/gap with ‖δG‖ ~ p·eps·λ_max and
        # the gap = the smallest kept eigenvalue; Q's entries move by about that angle.
        q_tol = max(1e-10, 100.0 * p * EPS * lam_max / lam_min_kept)
    else:
        q_tol = 1e-10
    uncertainty = q_tol
    if q_tol > MAX_NULL_SPACE_UNCERTAINTY:
        (log.debug if quiet else log.warning)("%s", ill_conditioned_note(q_tol))
        q_tol = MAX_NULL_SPACE_UNCERTAINTY
    qd = np.diag(Q)
    estimable = qd <= q_tol
    idx = np.flatnonzero(~estimable)
    comps: list[np.ndarray] = []
    if idx.size:
        sub = np.abs(Q[np.ix_(idx, idx)]) > q_tol
        n, labels = connected_components(csr_matrix(sub), directed=False)
        for k in range(n):
            comps.append(np.sort(idx[labels == k]))
        comps.sort(key=lambda c: int(c[0]))
    return Analysis(d, lam, rank, sigma_max, sigma_tol, Vr, V0, Q, q_tol, estimable,
                    tuple(comps), (lam, vec), uncertainty)


@dataclass(frozen=True)
class RowSpaceSolver:
    """Least squares of one normal matrix on a row space decided beforehand.

    The rank and the row space come from an :class:`Analysis` of the *unweighted*
    (exact integer) normal matrix; the estimates may come from a weighted one, XᵀWX with
    W > 0 on the same rows.  Positive weights do not change the row space, only how the
    rows are balanced, so the weighted problem is solved on that space alone: no rank
    decision is ever taken on the (inexact, float) weighted matrix.

    Coordinates: θ = scale·(V·y) with V [p, r] orthonormal and the weighted normal
    matrix diagonal there (scale·G·scale restricted to V is diag(lam)).  ``scale`` is the
    weighted matrix's own column equilibration (weights spanning orders of magnitude
    shift the columns' norms as much), V spans the analysis's row space in those scaled
    coordinates.  Without weights this is the analysis's own (scale, Vr, λ)."""

    scale: np.ndarray          # [p]
    V: np.ndarray              # [p, r], orthonormal columns
    lam: np.ndarray            # [r], > 0
    clamped: int = 0           # eigenvalues raised to the numerical floor (see below)

    @property
    def rank(self) -> int:
        return int(self.lam.size)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """The least-squares solution inside the row space (= the minimum-norm one in the
        analysis's scaled coordinates), unscaled."""
        d = self.scale
        return d * (self.V @ ((self.V.T @ (d * rhs)) / self.lam))

    def pinv_scaled(self) -> np.ndarray:
        """(scale·G·scale)⁺ on the row space: unscaled G⁺ = scale·this·scale."""
        return (self.V / self.lam) @ self.V.T

    def coordinates(self, theta: np.ndarray) -> np.ndarray:
        """y with θ = scale·V·y (θ's row-space part)."""
        return self.V.T @ (theta / self.scale)


def row_space_solver(an: Analysis, gram: np.ndarray | None = None) -> RowSpaceSolver:
    """Solver for ``gram`` (a weighted normal matrix of the same rows, or None for the
    analysed one itself) on ``an``'s row space.

    Numerics: ``gram`` is equilibrated by its own diagonal, the row space (``an.Vr`` in
    ``an``'s scaling) is re-expressed in that scaling and orthonormalized (QR), and the
    r×r restriction is diagonalized.  Its eigenvalues are ≥ the weighted matrix's r-th
    largest, which is > 0 in exact arithmetic; one below the eigensolver's error
    (100·r·eps·λ_max) means the weights starve a direction the unweighted rows
    determine: it is raised to that floor (counted in ``clamped``) rather than divided
    by noise."""
    r = an.rank
    if gram is None or r == 0:
        lam = an.eigvals[an.eigvals.size - r:]
        return RowSpaceSolver(an.scale, an.Vr, lam)
    diag = np.diag(gram).copy()
    if np.any(diag <= 0):
        raise ValueError("row_space_solver() needs columns with a nonzero weighted norm")
    dw = 1.0 / np.sqrt(diag)
    W = (an.scale / dw)[:, None] * an.Vr
    Qw, _ = np.linalg.qr(W)
    gs = gram * dw[:, None] * dw[None, :]
    A = Qw.T @ gs @ Qw
    A = 0.5 * (A + A.T)
    lam, U = np.linalg.eigh(A)
    floor = 100.0 * r * EPS * max(float(lam[-1]), 0.0)
    low = lam <= floor
    if low.any():
        log.warning("%d direction(s) of the row space are numerically lost under the row "
                    "weights: their eigenvalue is raised to the numerical floor", int(low.sum()))
        lam = np.where(low, max(floor, 1e-300), lam)
    return RowSpaceSolver(dw, Qw @ U, lam, int(low.sum()))


def component_spaces(an: Analysis, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row-space basis, null-space basis) of one component, *unscaled*, as columns.

    Row space: unscaled coefficient vectors c (c·θ estimable) supported on ``comp``.
    Null space: unscaled directions t with X t = 0 supported on ``comp``."""
    q = an.Q[np.ix_(comp, comp)]
    q = 0.5 * (q + q.T)
    w, v = np.linalg.eigh(q)
    null_mask = w > 0.5          # Q restricted to a component is a projector: eigenvalues 0/1
    d = an.scale[comp]
    row = v[:, ~null_mask] / d[:, None]
    null = v[:, null_mask] * d[:, None]
    return row, null


# --- readable bases -------------------------------------------------------------------------

# Columns readable_basis projects at once against the basis found before them.
_GS_CHUNK = 64


def readable_basis(vectors: np.ndarray, order: Sequence[int], tol: float = 1e-9
                   ) -> tuple[list[int], np.ndarray]:
    """Reduced row-echelon basis of the span of ``vectors`` (columns, [n, m]).

    Pivots are chosen greedily in ``order`` (a permutation of range(n)): the first
    coordinates of ``order`` that are independent become pivots, and each returned row has
    1 at its pivot and 0 at the other pivots.  Putting rarely executed blocks first makes
    the rows read as "rare block + the frequent blocks it goes with" (the paths through a
    loop body) rather than as differences.  Returns (pivots, rows [m', n])."""
    n, m = vectors.shape
    if m == 0:
        return [], np.zeros((0, n))
    # orthonormal basis of the span first, so that ``tol`` is relative
    u, s, _ = np.linalg.svd(vectors, full_matrices=False)
    keep = s > tol * max(float(s[0]), 1e-300) if s.size else np.zeros(0, bool)
    B = u[:, keep].T                 # [r, n], orthonormal rows
    r = B.shape[0]
    if r == 0:
        return [], np.zeros((0, n))
    pivots: list[int] = []
    # Gram-Schmidt on the columns B[:, j] in the given order, each projection against all
    # the basis so far at once and twice (classical Gram-Schmidt, reorthogonalised: as
    # stable as the modified one).  One basis vector at a time in Python took brotli's
    # encoder (thousands of blocks, a rank in the thousands) over a quarter of an hour.
    # Columns go in chunks: a chunk is projected against the basis before it at once (a
    # matrix product), then its columns in order against the chunk's own new vectors.
    basis = np.zeros((r, r))
    k = 0
    order = [int(j) for j in order]
    for start in range(0, len(order), _GS_CHUNK):
        if k == r:
            break
        chunk = order[start:start + _GS_CHUNK]
        C = B[:, chunk].copy()
        if k:
            q = basis[:, :k]
            C -= q @ (q.T @ C)
            C -= q @ (q.T @ C)
        first = k
        for c, j in enumerate(chunk):
            col = C[:, c]
            if k > first:
                q = basis[:, first:k]
                col = col - q @ (q.T @ col)
                col = col - q @ (q.T @ col)
            nrm = float(np.linalg.norm(col))
            if nrm > 1e-8:
                basis[:, k] = col / nrm
                k += 1
                pivots.append(j)
                if k == r:
                    break
    piv = B[:, pivots]               # [r, r] invertible
    rows = np.linalg.solve(piv, B)   # [r, n]; rows[i, pivots[k]] = δ_ik
    rows[np.abs(rows) < 1e-12] = 0.0
    return pivots, rows


def nonnegative_basis(vectors: np.ndarray, order: Sequence[int], fixed_zero: Sequence[int] = (),
                      max_den: int = 12, complete: np.ndarray | None = None) -> np.ndarray:
    """A basis of span(vectors) (columns, [n, m]) made, as far as possible, of sparse
    non-negative integer vectors; rows [r, n].

    For each coordinate j in ``order``: the vector c of the span with c ≥ 0, c_j = 1 and
    the smallest Σc (a linear program; for flow-like count spaces its vertices are path
    sums, e.g. "test + A"), scaled to the smallest integers, kept if independent of those
    already chosen.  ``fixed_zero`` coordinates must stay 0 unless they are j itself (one
    overhead ε per vector).  Directions that no non-negative vector reaches are filled in
    from the rows of ``complete`` (e.g. a row-echelon basis), in order."""
    from scipy.optimize import linprog

    u, s, _ = np.linalg.svd(vectors, full_matrices=False)
    keep = s > 1e-9 * max(float(s[0]) if s.size else 0.0, 1e-300)
    B = u[:, keep]                                   # [n, r] orthonormal
    n, r = B.shape
    if r == 0:
        return np.zeros((0, n))
    chosen: list[np.ndarray] = []

    def add(c: np.ndarray) -> bool:
        if np.linalg.matrix_rank(np.array(chosen + [c]), tol=1e-8) > len(chosen):
            chosen.append(c)
        return len(chosen) == r

    for j in order:
        eq = [B[j]]
        rhs = [1.0]
        for z in fixed_zero:
            if z != j:
                eq.append(B[z])
                rhs.append(0.0)
        res = linprog(B.sum(axis=0), A_ub=-B, b_ub=np.zeros(n), A_eq=np.array(eq),
                      b_eq=np.array(rhs), bounds=[(None, None)] * r, method="highs")
        if res.status != 0:
            continue
        c = B @ res.x
        c[np.abs(c) < 1e-9] = 0.0
        c, fr = rationalize(c, max_den)
        if any(f is None for f, x in zip(fr, c) if x != 0.0):
            continue
        lcm = 1
        for f in fr:
            if f is not None and f != 0:
                lcm = lcm * f.denominator // math.gcd(lcm, f.denominator)
        c = c * lcm
        if add(c):
            return np.array(chosen)
    for c in (complete if complete is not None else np.zeros((0, n))):
        c = np.asarray(c, dtype=np.float64).copy()
        # keep "one overhead ε per vector": eliminate the fixed-zero coordinates with the
        # chosen vectors that hold them
        for z in fixed_zero:
            if c[z] != 0.0:
                for v in chosen:
                    if v[z] != 0.0 and all(v[y] == 0.0 for y in fixed_zero if y != z):
                        c = c - (c[z] / v[z]) * v
                        break
        c[np.abs(c) < 1e-12] = 0.0
        if add(c):
            break
    return np.array(chosen) if chosen else np.zeros((0, n))


def rationalize(v: np.ndarray, max_den: int = 12, tol: float = 1e-6
                ) -> tuple[np.ndarray, list[Fraction | None]]:
    """Round coefficients that are clearly small rationals (|x − p/q| < tol·max(1,|x|),
    q ≤ max_den) to them; others stay as they are (their Fraction is None)."""
    out = np.array(v, dtype=np.float64)
    fr: list[Fraction | None] = []
    for i, x in enumerate(out):
        f = Fraction(float(x)).limit_denominator(max_den)
        if abs(float(f) - x) < tol * max(1.0, abs(x)):
            out[i] = float(f)
            fr.append(f)
        else:
            fr.append(None)
    return out, fr


def orthonormal_rows(basis: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis (columns [n, d]) of the row space of ``basis`` [k, n]."""
    b = np.atleast_2d(np.asarray(basis, dtype=np.float64))
    if b.size == 0:
        return np.zeros((b.shape[1] if b.ndim == 2 else 0, 0))
    # pivoted QR reveals the rank well enough for a basis given as (near-)exact rows, at a
    # fraction of an SVD's cost
    q, r, _ = sla.qr(b.T, mode="economic", pivoting=True)
    dr = np.abs(np.diag(r))
    k = int(np.sum(dr > tol * max(float(dr[0]) if dr.size else 0.0, 1e-300)))
    return q[:, :k]


def excess_over(null_vectors: np.ndarray, space: np.ndarray, tol: float = 1e-7) -> int:
    """How many dimensions of span(null_vectors) (columns) are not orthogonal to ``space``
    (orthonormal columns): the rank of spaceᵀ·null_vectors.  With ``space`` the structural
    count space S, these are the dependencies the data show but the CFG does not force."""
    if null_vectors.size == 0 or space.size == 0:
        return 0
    nv = null_vectors / np.maximum(np.linalg.norm(null_vectors, axis=0), 1e-300)
    m = space.T @ nv
    s = np.linalg.svd(m, compute_uv=False)
    return int(np.sum(s > tol))
