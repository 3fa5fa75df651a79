"""Exact rank of integer rows: row spaces over GF(p), for the split planner.

Rank questions are answered exactly: rows are integer vectors, so their rank over the
rationals equals their rank modulo a large prime except when the prime divides every
nonzero maximal minor — probability about 1e-9 per decision for p = 2^31 − 1; two primes
are used and the larger rank wins.  The rank a candidate's many rows add is found from a
few random combinations of them (:meth:`ModSpace.residual`), wrong with a like
probability.  No tolerance, no noise: the planner
(:mod:`wcetfit.split.planner`) answers "which quantities can these rows determine", the
fit answers "how well".
"""

from __future__ import annotations

import functools

import numpy as np


# Two Mersenne/pseudo-Mersenne primes below 2^31: products of two residues fit in int64.
_PRIMES = (2_147_483_647, 2_147_483_629)


class ModSpace:
    """A row space over GF(p), kept in reduced row echelon form (RREF).

    Rows are integer vectors; columns may be appended (new unknowns).  ``estimable(j)``
    is exact: e_j lies in the row space iff the RREF holds the row e_j.
    """

    def __init__(self, ncols: int, prime: int = _PRIMES[0]) -> None:
        self.p = prime
        self.rows = np.zeros((0, ncols), dtype=np.int64)
        self.pivots: list[int] = []

    @property
    def ncols(self) -> int:
        return self.rows.shape[1]

    @property
    def rank(self) -> int:
        return len(self.pivots)

    def copy(self) -> "ModSpace":
        s = ModSpace(self.ncols, self.p)
        s.rows = self.rows.copy()
        s.pivots = list(self.pivots)
        return s

    def grow(self, ncols: int) -> None:
        if ncols > self.ncols:
            self.rows = np.hstack([self.rows, np.zeros((self.rows.shape[0],
                                                        ncols - self.ncols), np.int64)])

    def _mod(self, R: np.ndarray) -> np.ndarray:
        R = np.asarray(R, dtype=np.int64)
        if R.ndim == 1:
            R = R[None, :]
        if R.shape[1] > self.ncols:
            self.grow(R.shape[1])
        elif R.shape[1] < self.ncols:
            R = np.hstack([R, np.zeros((R.shape[0], self.ncols - R.shape[1]), np.int64)])
        return R % self.p

    def reduce(self, R: np.ndarray) -> np.ndarray:
        """``R`` modulo the space: zero in every pivot column (canonical remainder).

        One product, not a pass per pivot row: the rows are in RREF (each pivot column
        is 1 in its row and 0 in the others), so subtracting R[:, pivots] · rows clears
        every pivot column at once and leaves what the passes would (libbz2's
        decompressor: 26,434 reductions of 200-row blocks against ~300 pivots took
        490 s as passes)."""
        R = self._mod(R)
        if not self.pivots or R.shape[0] == 0:
            return R
        A = R[:, self.pivots]
        live = A.any(axis=1)
        if live.any():
            R[live] = (R[live] - _mulmod(A[live], self.rows, self.p)) % self.p
        return R

    def residual(self, R: np.ndarray) -> np.ndarray:
        """An echelon basis of (span R + space) / space, as rows (≤ ncols of them).

        A candidate probe brings a row per input (200) and adds a rank of a few: reducing
        ``_SKETCH_ROWS`` random combinations of the rows finds the same span whenever it
        has fewer dimensions than combinations (a random combination misses a dimension
        with probability below t/p, about 4e-9), and the rows themselves are reduced
        only when the combinations all stay independent (libbz2's decompressor: 26,434
        such questions took 10 minutes with every row reduced)."""
        R = self._mod(R)
        R = R[R.any(axis=1)]
        t = _SKETCH_ROWS
        while t < R.shape[0]:
            X = self.reduce(_mulmod(_sketch(self.p, t, R.shape[0]), R, self.p))
            basis = _echelon(X[X.any(axis=1)], self.p)[0]
            if basis.shape[0] < t:
                return basis
            t *= 4
        R = self.reduce(R)
        R = R[(R != 0).any(axis=1)]
        return _echelon(R, self.p)[0]

    def add(self, R: np.ndarray) -> int:
        """Add rows; returns the rank gained."""
        new = self.residual(R)
        if new.shape[0] == 0:
            return 0
        ech, piv = _echelon(new, self.p)
        p = self.p
        # back-substitute the new pivots into the old rows (keep the whole thing RREF)
        rows = self.rows
        for b, j in zip(ech, piv):
            f = rows[:, j]
            nz = f != 0
            if nz.any():
                rows[nz] = (rows[nz] - np.outer(f[nz], b) % p) % p
        self.rows = np.vstack([rows, ech])
        self.pivots = self.pivots + piv
        order = np.argsort(self.pivots)
        self.rows = self.rows[order]
        self.pivots = [self.pivots[i] for i in order]
        return len(piv)

    def estimable(self) -> np.ndarray:
        """bool [ncols]: the unknown alone is determined by the rows."""
        out = np.zeros(self.ncols, dtype=bool)
        for r, j in zip(self.rows, self.pivots):
            if np.count_nonzero(r) == 1:
                out[j] = True
        return out

    def null_vectors(self, columns: np.ndarray | None = None) -> list[np.ndarray]:
        """A basis of the null space (over GF(p)), one vector per free column."""
        piv = set(self.pivots)
        cols = range(self.ncols) if columns is None else columns
        out = []
        for f in cols:
            if f in piv:
                continue
            v = np.zeros(self.ncols, dtype=np.int64)
            v[f] = 1
            for r, j in zip(self.rows, self.pivots):
                if r[f]:
                    v[j] = (-int(r[f])) % self.p
            out.append(v)
        return out


# Limbs of the exact modular product: a residue (< 2^31) times an 11-bit limb is below
# 2^42, and sums of up to 2^11 of those stay below 2^53, where doubles hold integers
# exactly, so BLAS's double product is exact in every partial sum, in any order.
_LIMB_BITS = 11
_LIMBS = 3                      # 3 × 11 bits cover a residue below 2^31 (and 2^33)
_MAX_INNER = 1 << (53 - 31 - _LIMB_BITS)


# Random combinations of a candidate's rows tried before its rows themselves.
_SKETCH_ROWS = 8


@functools.lru_cache(maxsize=64)
def _sketch(p: int, t: int, m: int) -> np.ndarray:
    """t random combinations of m rows over GF(p), the same in every run (a fixed seed:
    a plan does not change from one run to the next)."""
    g = np.random.default_rng([p, t, m]).integers(0, p, (t, m), dtype=np.int64)
    g.setflags(write=False)
    return g


def _mulmod(A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """(A @ B) mod p, exactly, for residues below p < 2^31 (int64 in, int64 out)."""
    out = np.zeros((A.shape[0], B.shape[1]), dtype=np.int64)
    mask = (1 << _LIMB_BITS) - 1
    # as many limbs as B's largest entry needs: counts (a probe's rows) are mostly below
    # 2^11, one product; the space's rows are residues of any size, three
    top = int(B.max()) if B.size else 0
    limbs = max(1, min(_LIMBS, -(-top.bit_length() // _LIMB_BITS)))
    for lo in range(0, A.shape[1], _MAX_INNER):
        a = A[:, lo:lo + _MAX_INNER].astype(np.float64)
        b = B[lo:lo + _MAX_INNER]
        for limb in range(limbs):
            shift = limb * _LIMB_BITS
            part = a @ ((b >> shift) & mask).astype(np.float64)
            # part < 2^53: exact; its residue times 2^shift (< 2^53) stays in int64
            out += (part.astype(np.int64) % p) << shift
            out %= p
    return out


def _echelon(R: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form of ``R`` over GF(p): (nonzero rows, pivot columns)."""
    R = np.array(R, dtype=np.int64, copy=True) % p
    m, n = R.shape
    piv: list[int] = []
    r = 0
    c = 0
    while r < m and c < n:
        # the next pivot column: the first with a nonzero below row r (one scan, not
        # a Python step per column: rows are few and columns many)
        cols = np.flatnonzero(R[r:, c:].any(axis=0))
        if cols.size == 0:
            break
        c += int(cols[0])
        nz = np.flatnonzero(R[r:, c])
        k = r + int(nz[0])
        if k != r:
            R[[r, k]] = R[[k, r]]
        inv = pow(int(R[r, c]), p - 2, p)
        R[r] = (R[r] * inv) % p
        f = R[:, c].copy()
        f[r] = 0
        nzr = f != 0
        if nzr.any():
            R[nzr] = (R[nzr] - np.outer(f[nzr], R[r]) % p) % p
        piv.append(c)
        r += 1
        c += 1
    return R[:r], piv


class ExactSpace:
    """The same rows over two primes; rank and estimability take the larger answer."""

    def __init__(self, ncols: int) -> None:
        self.spaces = [ModSpace(ncols, p) for p in _PRIMES]

    def copy(self) -> "ExactSpace":
        e = ExactSpace.__new__(ExactSpace)
        e.spaces = [s.copy() for s in self.spaces]
        return e

    @property
    def rank(self) -> int:
        return max(s.rank for s in self.spaces)

    @property
    def ncols(self) -> int:
        return self.spaces[0].ncols

    def add(self, R: np.ndarray) -> int:
        before = self.rank
        for s in self.spaces:
            s.add(R)
        return self.rank - before

    def residual_rank(self, R: np.ndarray) -> int:
        return max(s.residual(R).shape[0] for s in self.spaces)

    def estimable(self) -> np.ndarray:
        out = np.zeros(self.ncols, dtype=bool)
        for s in self.spaces:
            out |= s.estimable()
        return out

    def primary(self) -> ModSpace:
        return max(self.spaces, key=lambda s: s.rank)
