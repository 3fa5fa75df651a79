"""The rows and columns of the fit's design: one row per input (or per timed call), the
executed blocks as columns, read in chunks.

Rows.  By default one row per input: a robust statistic of its repeats
(:mod:`wcetfit.fit.robust`, default the clipped mean: interrupts out, sub-quantum resolution
in).  With every input given the same number of repeats, least squares over every timed
call and least squares over the per-input means are the same estimate, so the per-input
row loses nothing but the interrupts, and it is R times fewer rows.  ``rows="call"`` is
there too (each timed call a row; intervals then cluster by input, since calls of one
input share its model error).  On the real samples (weighted fit, same stored timings) the
choice moves the held-out figures by half a point at most: median statistic adpcm
4.9/43 % against the clipped mean's 5.4/42 %, isort 7.2/28 against 7.3/29, matmul
12.2/26.9 against 12.5/26.8, the rest within 0.2; the plain mean lets the interrupts in
(R² 0.03 on crc); ``rows="call"`` lands within a point.  Leaving out the first repeat
(slower: the branch predictor learning the input) moves adpcm's median 5.4 → 5.1 % and no
p95.  So the clipped mean stays.

Numerics.  Everything goes through normal matrices XᵀWX, accumulated in row chunks (so
the counts are never copied whole) and per cross-validation fold (so the k-fold
validation costs no extra pass).  Two are kept.  G, with the integer row weights w (1 per
used input; calls per input with ``rows="call"``; 0 when rejected), is an exact integer
matrix (checked: its entries stay below 2^53, else a warning): the identical-column test
on it is exact, the remaining error is the eigensolver's, which the rank tolerance
accounts for (see estimability.py), and the rank, the row space and everything
structural (groups, relations, executions) come from it alone.  When each chunk's sums
stay below 2^24 it is accumulated in single precision, still exactly (every partial sum
is an integer float32 holds), at half the cost.  Gw = XᵀΩX with the float weights
ω = w·v of the estimates (below; Gw is G itself without weighting) is solved on G's row
space (:func:`estimability.row_space_solver`): positive weights do not change the row
space, so no rank decision is ever taken on a float matrix.  Outlier rejection and
reweighting update both by the changed rows' contributions (a fresh pass for Gw when
more than a quarter of the rows change, as the first reweighting does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wcetfit.errors import FitError
from wcetfit.fit import robust


def build_rows(fx: Any) -> None:
    o = fx.opts
    t = fx.ticks
    # the step is a property of the clock: detect it before any speed correction
    fx.quantum = (robust.detect_quantum(fx.raw_ticks) if o.quantum_ticks is None
                    else float(o.quantum_ticks))
    fx.valid_calls = np.isfinite(t)
    fx.repeats_total = int(fx.valid_calls.sum())
    if o.rows == "input":
        summ = robust.summarize_repeats(t, o.statistic, quantum=fx.quantum, trim=o.trim)
        fx.y = summ.value
        fx.has = np.isfinite(fx.y)
        fx.w = fx.has.astype(np.float64)
        fx.S = np.where(fx.has, fx.y, 0.0)
        fx.repeats_discarded = int((fx.valid_calls & ~summ.keep).sum())
        fx.call_keep = summ.keep
    else:
        fx.call_keep = fx.valid_calls.copy()
        fx.repeats_discarded = 0
        rows_from_calls(fx)
        fx.has = fx.call_keep.any(axis=1)
    fx.rej_reason: dict[int, str] = {}
    for i in np.flatnonzero(~np.isfinite(t).any(axis=1)):
        fx.rej_reason[int(i)] = "no valid timing: every repeat is missing"


def rows_from_calls(fx: Any) -> None:
    k = fx.call_keep
    fx.w = k.sum(axis=1).astype(np.float64)
    fx.S = np.where(k, fx.ticks, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        fx.y = np.where(fx.w > 0, fx.S / np.maximum(fx.w, 1), np.nan)


def active_columns(fx: Any) -> np.ndarray:
    """Design columns: blocks executed by at least one timed input, with the blocks of
    constant count (typically the always-once blocks, often many) merged into one
    column per constant before any pass over the data: identical columns stay
    identical on every subset of rows, and the Gram pass costs p², so the merge saves
    a good part of it.  Validates the counts on the way."""
    any_pos = np.zeros(fx.nb, dtype=bool)
    nnz = np.zeros(fx.nb, dtype=np.int64)
    cmin = np.full(fx.nb, np.inf)
    cmax_col = np.full(fx.nb, -np.inf)
    step = max(256, int(4_000_000 // max(fx.nb, 1)))
    integer = np.issubdtype(fx.counts.dtype, np.integer)
    for a in range(0, fx.n, step):
        blk = fx.counts[a:a + step]
        h = fx.has[a:a + step]
        if not integer:
            if not np.all(np.isfinite(blk)):
                raise FitError("counts contain NaN or infinity")
            if np.any(blk != np.round(blk)):
                raise FitError("counts must be whole numbers")
        if blk.size and blk.min() < 0:
            raise FitError("counts must be non-negative")
        if h.any():
            sub = blk[h]
            pos = sub > 0
            any_pos |= pos.any(axis=0)
            nnz += pos.sum(axis=0)
            cmin = np.minimum(cmin, sub.min(axis=0))
            cmax_col = np.maximum(cmax_col, sub.max(axis=0))
    fx.count_max = float(cmax_col[any_pos].max()) if any_pos.any() else 0.0
    executed = np.flatnonzero(any_pos)
    const = executed[cmin[executed] == cmax_col[executed]]
    fx.extra: dict[int, list[int]] = {}
    drop: set[int] = set()
    by_value: dict[float, int] = {}
    for k in const:
        v = float(cmin[k])
        if v in by_value:
            drop.add(int(k))
            fx.extra.setdefault(by_value[v], []).append(int(k))
        else:
            by_value[v] = int(k)
    active = np.array([k for k in executed if int(k) not in drop], dtype=np.int64)
    # extras keyed by design column
    pos = {int(k): i for i, k in enumerate(active)}
    fx.extra = {pos[k]: v for k, v in fx.extra.items()}
    fx.block_col = np.full(fx.nb, -1, dtype=np.int64)
    fx.block_col[active] = np.arange(active.size)
    for j, mem in fx.extra.items():
        fx.block_col[mem] = j
    fx.col_nnz = nnz[active]          # inputs executing each design column
    return active


class Design:
    """X = [counts[:, active] | config indicators], read in row chunks, never copied whole."""

    def __init__(self, counts: np.ndarray, active: np.ndarray, cfg: np.ndarray, n_cfg: int,
                 fold: np.ndarray, n_folds: int, chunk: int | None) -> None:
        self.counts = counts
        self.active = active
        self.all_active = active.size == counts.shape[1] and bool(
            np.all(active == np.arange(counts.shape[1])))
        self.cfg = cfg
        self.n_cfg = n_cfg
        self.pb = int(active.size)
        self.p = self.pb + n_cfg
        self.fold = fold
        self.n_folds = n_folds
        self.chunk = chunk or max(256, int(4_000_000 // max(self.p, 1)))
        # exact normal-matrix products in single precision (set by the fitter): when every
        # chunk's Σ|gw|·x_i·x_j stays below 2^24, each partial sum of the product is an
        # integer that float32 represents exactly, whatever order the BLAS adds in; half
        # the flops and half the memory traffic of float64 (measured at 800 columns ×
        # 100,000 rows: 1.3 s against 2.7 s)
        self.exact32 = False

    def cfg_of_col(self, col: int) -> int:
        """Configuration index of a design column (≥ pb)."""
        return int(col) - self.pb

    def rows(self, idx: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
        """Design rows ``idx`` as a dense array."""
        m = idx.size
        out = np.empty((m, self.p), dtype=dtype)
        blk = self.counts[idx]
        out[:, :self.pb] = blk if self.all_active else blk[:, self.active]
        out[:, self.pb:] = 0.0
        out[np.arange(m), self.pb + self.cfg[idx]] = 1.0
        return out

    def chunks(self, idx: np.ndarray | None = None, dtype: Any = np.float64):
        """(row indices, design rows) in chunks: all rows, or the rows ``idx`` (sorted).
        Large subsets are read as contiguous slices and masked (a fancy-indexed gather of
        the counts costs more than converting the rows it skips)."""
        n = self.counts.shape[0]
        if idx is not None and idx.size >= n // 4:
            mask = np.zeros(n, dtype=bool)
            mask[idx] = True
            if mask.all():
                idx = None
            else:
                for rows, X in self._slices(dtype):
                    m = mask[rows]
                    if m.all():
                        yield rows, X
                    elif m.any():
                        yield rows[m], X[m]
                return
        if idx is None:
            yield from self._slices(dtype)
        else:
            for a in range(0, idx.size, self.chunk):
                sel = idx[a:a + self.chunk]
                yield sel, self.rows(sel, dtype)

    def _slices(self, dtype: Any):
        n = self.counts.shape[0]
        for a in range(0, n, self.chunk):
            b = min(n, a + self.chunk)
            m = b - a
            out = np.empty((m, self.p), dtype=dtype)
            blk = self.counts[a:b]
            if self.all_active:
                out[:, :self.pb] = blk
            else:
                # a contiguous cast, then a gather of float columns: ~2x faster than
                # gathering the integer columns and casting the strided result
                raw = blk.astype(dtype)
                np.take(raw, self.active, axis=1, out=out[:, :self.pb])
            out[:, self.pb:] = 0.0
            out[np.arange(m), self.pb + self.cfg[a:b]] = 1.0
            yield np.arange(a, b), out

    def accumulate(self, G: np.ndarray, b: np.ndarray, gw: np.ndarray, bw: np.ndarray,
                   idx: np.ndarray | None = None, exact: bool = True) -> None:
        """G[f] += Σ gw·x·xᵀ, b[f] += Σ bw·x over the rows ``idx`` (all if None), by fold.

        ``exact=False`` (float weights, nothing to keep exact): rows of positive weight go
        through a symmetric rank-k update of √gw·x (half the flops of the general
        product); with integer weights that would round, so the exact path keeps the
        general product, in single precision when :attr:`exact32` allows (b, a sum of
        measured times, always in double)."""
        single = exact and self.exact32
        for rows, X in self.chunks(idx, np.float32 if single else np.float64):
            g = gw[rows]
            bb = bw[rows]
            f = self.fold[rows]
            if not exact and np.all(g >= 0) and not np.any((g == 0) & (bb != 0)):
                # scale the (fresh) chunk by √g once: G += XsᵀXs, b += (bb/√g)·Xs
                sq = np.sqrt(g)
                X *= sq[:, None]
                bs = np.divide(bb, sq, out=np.zeros_like(bb), where=sq > 0)
                for k in range(self.n_folds):
                    m = (f == k) & (g != 0)
                    if m.any():
                        Xk = X[m]
                        G[k] += Xk.T @ Xk
                        b[k] += bs[m] @ Xk
                continue
            for k in range(self.n_folds):
                m = (f == k) & ((g != 0) | (bb != 0))
                if not m.any():
                    continue
                Xk = X[m]
                gk = g[m]
                if np.all(gk == 1.0):
                    G[k] += Xk.T @ Xk
                elif not exact and np.all(gk >= 0):
                    Xs = Xk * np.sqrt(gk)[:, None]
                    G[k] += Xs.T @ Xs
                elif np.any(gk != 0):
                    G[k] += (Xk * gk.astype(Xk.dtype)[:, None]).T @ Xk
                b[k] += bb[m] @ Xk if not single else bb[m] @ Xk.astype(np.float64)

    def predict(self, theta: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """X·θ for θ [p] (or [p, k]: one column per fold; each row takes its fold's).

        Works on the raw count columns (θ spread over all blocks, 0 for the ones not in
        the design): no column gather, just a cast and a matrix-vector product."""
        n = self.counts.shape[0]
        th = np.asarray(theta, dtype=np.float64)
        two = th.ndim == 2
        tb = np.zeros((self.counts.shape[1],) + th.shape[1:])
        tb[self.active] = th[:self.pb]
        tc = th[self.pb:]
        rows_all = np.arange(n) if idx is None else np.asarray(idx)
        mask = np.zeros(n, dtype=bool)
        mask[rows_all] = True
        out = np.full(n, np.nan)
        for a in range(0, n, self.chunk):
            b = min(n, a + self.chunk)
            m = mask[a:b]
            if not m.any():
                continue
            blk = self.counts[a:b]
            if not m.all():
                blk = blk[m]
            rows = np.arange(a, b)[m]
            v = blk.astype(np.float64) @ tb + tc[self.cfg[rows]]
            if two:
                v = v[np.arange(rows.size), self.fold[rows]]
            out[rows] = v
        return out[rows_all]
