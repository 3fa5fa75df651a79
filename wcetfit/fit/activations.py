"""Per-block costs of one function from its own timed activations (issue #15).

In: one :class:`~wcetfit.measurements.ActivationRows` (exclusive-time rows of a function's
timed activations).  Out: :class:`ActivationFit` — estimable costs with 95 % intervals,
the combinations the activations determine only jointly, the probe overhead terms, the
particular solution predictions use, held-out errors per activation, warnings.

Model.  One timed activation a of function f, under probe configuration c, reads

    t_a = Σ_k N_ak · T_k + ε_c + m_a · δ + noise

with N_a the activation's exclusive counts (f's own blocks, and the blocks of callees
that were not timed), ε_c the part of one probe pair's overhead inside the timed
interval, m_a the timed child activations subtracted (``children``) and δ what each of
them leaves behind in f's row.  Each function is an independent system: a callee's
blocks are fitted from its own activations (the whole-call rows check the sum:
:mod:`wcetfit.fit.activation_root`).

ε and δ are usually confounded with blocks: every activation runs f's entry block once
(ε_c + entry is what the rows determine), and when every call of a call block is timed,
m_a is that block's count (δ + call block).  Estimability is decided as in the
whole-call fit (:mod:`wcetfit.fit.estimability`); a confounded overhead is 0 in the
particular solution, so the probe overhead stays inside the blocks it is confounded
with, and the root check estimates it per timed activation from whole calls.

Rows.  Each activation's repeats become one value (:func:`wcetfit.fit.robust.summarize_repeats`).
Activations repeat heavily (every iteration of a loop calling f gives the same count
vector), so identical (counts, children, config) rows are merged into one with its
number of activations n_g, mean and sum of squared deviations.  Ordinary least squares
over activations is exactly weighted least squares over the merged rows (weight n_g),
and the activation-level HC1 sandwich is exact from the same three numbers per merged
row (meat Σ_g x_g x_gᵀ (n_g r̄_g² + SS_g)); the normal matrix is a sparse product, so
a function costs O(distinct rows · nnz + p³).

Physical values.  By default every block cost and estimable overhead is held ≥ 0
(:mod:`wcetfit.fit.activation_physical`), with bootstrap intervals over inputs when the
constraints overrule the data; ``costs="linear"`` leaves least squares unconstrained.

Held-out errors: k folds over *inputs* (activations of one input share its state), every
held-out activation predicted by the fit without its fold: median and p95 of
|predicted − measured| / measured.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp
from scipy import stats

from wcetfit.errors import FitError
from wcetfit.fit import estimability as est
from wcetfit.fit import robust
from wcetfit.fit.activation_physical import (constrained_particular, held_note,
                                             hold_to_physical)
from wcetfit.fit.result import (WARN_HELD, WARN_NEGATIVE_COST, WARN_NEGATIVE_PREDICTION,
                                WARN_OVERHEAD, FitWarning)
from wcetfit.model import hexaddr

log = logging.getLogger(__name__)

DELTA = "δ"          # label of the per-child probe-pair overhead


def eps_label(config: int) -> str:
    return f"ε[{config}]"


def column_label(column: tuple[str, int]) -> str:
    fn, a = column
    return f"{fn}:{hexaddr(a)}"


# --- results ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ActivationCost:
    """One (function, block) column of a function's activation rows."""

    function: str
    address: int
    estimable: bool
    cost_ticks: float | None          # only when estimable alone (= solution_ticks then)
    ci95_ticks: float | None
    solution_ticks: float | None      # what predictions use; None: never executed
    executions: int                   # Σ exclusive counts over the activations used


@dataclass(frozen=True)
class ActivationCombination:
    """An estimable combination Σ coefficient·term (terms: column labels, ε[c], δ)."""

    terms: tuple[tuple[str, float], ...]
    value_ticks: float
    ci95_ticks: float
    text: str


@dataclass(frozen=True)
class OverheadTerm:
    label: str                        # ε[config] or δ
    estimable: bool
    value_ticks: float | None         # the estimate when estimable, else None
    ci95_ticks: float | None
    solution_ticks: float             # in the particular solution (0 when confounded)


@dataclass(frozen=True)
class ActivationFit:
    function: str
    address: int
    columns: tuple[tuple[str, int], ...]
    costs: tuple[ActivationCost, ...]           # one per column
    overheads: tuple[OverheadTerm, ...]
    combinations: tuple[ActivationCombination, ...]   # of what is not estimable alone
    inseparable: tuple[tuple[tuple[str, int], ...], ...]   # blocks known only together
    activations: int                  # rows used (finite time)
    activations_total: int
    distinct_rows: int
    unknowns: int
    rank: int
    t95: float
    residual_sigma_ticks: float
    heldout_median_rel_error: float | None
    heldout_p95_rel_error: float | None
    heldout_activations: int
    interval_method: str
    warnings: tuple[FitWarning, ...]
    notes: tuple[str, ...] = ()
    solution: np.ndarray = field(repr=False, compare=False, default=None)   # [columns]
    # of ``solution`` (HC1 sandwich), zero for columns never executed
    covariance: np.ndarray = field(repr=False, compare=False, default=None)  # [columns]²
    # per confounded overhead term (ε[c], δ): how much of one tick of it the particular
    # solution put in each column's cost ([columns]; the fit's own attribution, linear in
    # the times): a measured overhead comes out of the blocks exactly where it went in
    overhead_shares: dict[str, np.ndarray] = field(repr=False, compare=False,
                                                   default_factory=dict)

    def cost(self, column: tuple[str, int]) -> ActivationCost:
        return self.costs[self.columns.index(column)]

    def overhead(self, label: str) -> OverheadTerm:
        for o in self.overheads:
            if o.label == label:
                return o
        raise KeyError(label)

    def predict(self, counts: Any, children: Any = 0, config: Any = 0) -> np.ndarray:
        """Probe-inclusive exclusive time of activations with these counts (the particular
        solution with its overhead terms)."""
        x = sp.csr_matrix(counts) if sp.issparse(counts) else np.atleast_2d(counts)
        sol = np.nan_to_num(self.solution)
        pred = np.asarray(x @ sol, dtype=float).ravel()
        ov = {o.label: o.solution_ticks for o in self.overheads}
        cfg = np.broadcast_to(np.asarray(config), pred.shape)
        pred = pred + np.array([ov.get(eps_label(int(c)), 0.0) for c in cfg])
        return pred + np.asarray(children, dtype=float) * ov.get(DELTA, 0.0)

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "function": self.function, "address": hexaddr(self.address),
            "costs": [{"function": c.function, "address": hexaddr(c.address),
                       "estimable": c.estimable, "cost_ticks": num(c.cost_ticks),
                       "ci95_ticks": num(c.ci95_ticks), "solution_ticks": num(c.solution_ticks),
                       "executions": c.executions} for c in self.costs],
            "overheads": [{"term": o.label, "estimable": o.estimable,
                           "value_ticks": num(o.value_ticks), "ci95_ticks": num(o.ci95_ticks),
                           "solution_ticks": num(o.solution_ticks)} for o in self.overheads],
            "combinations": [{"terms": dict(c.terms), "value_ticks": num(c.value_ticks),
                              "ci95_ticks": num(c.ci95_ticks), "text": c.text}
                             for c in self.combinations],
            "inseparable": [[column_label(c) for c in g] for g in self.inseparable],
            "activations": self.activations, "activations_total": self.activations_total,
            "distinct_rows": self.distinct_rows, "unknowns": self.unknowns, "rank": self.rank,
            "residual_sigma_ticks": num(self.residual_sigma_ticks),
            "heldout": {"median_rel_error": num(self.heldout_median_rel_error),
                        "p95_rel_error": num(self.heldout_p95_rel_error),
                        "activations": self.heldout_activations},
            "interval_method": self.interval_method,
            "warnings": [w.to_json() for w in self.warnings], "notes": list(self.notes)}


# --- merging identical rows -------------------------------------------------------------

def _row_keys(X: sp.csr_matrix, extra: np.ndarray) -> np.ndarray:
    """Two independent 64-bit hashes per row of (counts, extra columns), as one structured
    key: equal rows get equal keys; unequal integer rows collide with probability ~2^-128."""
    rng = np.random.default_rng(0x5eed)
    n, p = X.shape
    data = X.data.astype(np.int64).view(np.uint64)
    nnz = np.diff(X.indptr)
    starts = X.indptr[:-1][nnz > 0]
    keys = np.zeros((n, 2), dtype=np.uint64)
    for k in range(2):
        r = rng.integers(1, 2 ** 63, size=p + extra.shape[1], dtype=np.uint64) | np.uint64(1)
        with np.errstate(over="ignore"):
            prod = data * r[X.indices]
            h = np.zeros(n, dtype=np.uint64)
            if starts.size:
                h[nnz > 0] = np.add.reduceat(prod, starts)
            for j in range(extra.shape[1]):
                h += extra[:, j].astype(np.int64).view(np.uint64) * r[p + j]
        keys[:, k] = h
    return np.ascontiguousarray(keys).view([("a", np.uint64), ("b", np.uint64)]).ravel()


@dataclass
class _Merged:
    rep: np.ndarray        # representative activation of each merged row
    inv: np.ndarray        # merged row of each used activation
    n: np.ndarray          # activations per merged row
    mean: np.ndarray
    ss: np.ndarray         # Σ (y − mean)² within the merged row
    y: np.ndarray          # each used activation's time


def _merge(keys: np.ndarray, y: np.ndarray) -> _Merged:
    _, rep, inv = np.unique(keys, return_index=True, return_inverse=True)
    inv = inv.ravel()
    n = np.bincount(inv).astype(np.float64)
    mean = np.bincount(inv, y) / n
    ss = np.bincount(inv, (y - mean[inv]) ** 2)
    return _Merged(rep, inv, n, mean, ss, y)


# --- the fit -----------------------------------------------------------------------------

# merged design matrices up to this many entries are multiplied dense (BLAS beats the
# sparse product by ~10x at a few dozen columns); larger ones stay sparse
_DENSE_ENTRIES = 8_000_000


def _weighted_gram(X: Any, w: np.ndarray) -> np.ndarray:
    if isinstance(X, np.ndarray):
        return X.T @ (X * w[:, None])
    return np.asarray((X.T @ X.multiply(w[:, None]).tocsr()).toarray(), dtype=np.float64)


def fit_activations(rows: Any, *, config_ids: np.ndarray | None = None,
                    quantum: float | None = None, statistic: str = "clipped_mean",
                    folds: int = 5, seed: int = 0, max_denominator: int = 12,
                    blas_threads: int | None = 1, costs: str = "physical",
                    bootstrap: int = 200) -> ActivationFit:
    """Fit one function's block costs from its :class:`ActivationRows` (module docstring).

    ``config_ids`` int [rows]: the probe configuration of each row (default: the rows'
    ``config`` attribute if they have one, else all 0).  ``blas_threads``: as
    :attr:`wcetfit.fit.result.FitOptions.blas_threads` (many small eigensolves, where
    spinning BLAS threads cost most).  ``costs``: "physical" holds every block cost and
    estimable overhead ≥ 0 (:mod:`wcetfit.fit.activation_physical`), "linear" leaves the
    least-squares solution unconstrained; ``bootstrap``: the most replicates for the
    physical fit's intervals when the constraints overrule the data."""
    from wcetfit.blasthreads import limited

    if costs not in ("physical", "linear"):
        raise FitError(f"costs must be 'physical' or 'linear', not {costs!r}")
    with limited(blas_threads):
        return _fit(rows, config_ids, quantum, statistic, folds, seed, max_denominator,
                    costs == "physical", bootstrap)


def _fit(rows: Any, config_ids: np.ndarray | None, quantum: float | None, statistic: str,
         folds: int, seed: int, max_denominator: int, physical: bool = True,
         bootstrap: int = 200) -> ActivationFit:
    X0 = sp.csr_matrix(rows.counts, dtype=np.int64)
    n_all, p = X0.shape
    ticks = np.asarray(rows.ticks, dtype=np.float64)
    if ticks.ndim == 1:
        ticks = ticks[:, None]
    if ticks.shape[0] != n_all or len(rows.columns) != p:
        raise FitError(f"{rows.function}: activation rows of {n_all} counts, {ticks.shape[0]} "
                       f"times, {len(rows.columns)} columns for {p} count columns")
    children = np.asarray(rows.children, dtype=np.int64).reshape(-1)
    inputs = np.asarray(rows.input_index, dtype=np.int64).reshape(-1)
    if config_ids is None:
        config_ids = getattr(rows, "config", None)
    cfg_all = (np.zeros(n_all, np.int64) if config_ids is None
               else np.asarray(config_ids, dtype=np.int64).reshape(-1))
    if children.size != n_all or inputs.size != n_all or cfg_all.size != n_all:
        raise FitError(f"{rows.function}: children, input_index and configs must have one "
                       f"entry per activation ({n_all})")
    if quantum is None:
        quantum = robust.detect_quantum(ticks)
    summ = robust.summarize_repeats(ticks, statistic, quantum=quantum)
    used = np.isfinite(summ.value)
    if not used.any():
        raise FitError(f"{rows.function}: no activation has a valid timing")
    X = X0[used] if not used.all() else X0
    y = summ.value[used]
    ch, cfg, inp = children[used], cfg_all[used], inputs[used]
    n = y.size

    configs = tuple(int(c) for c in np.unique(cfg))
    cfg_col = np.searchsorted(np.asarray(configs), cfg)
    has_delta = bool(np.any(ch))
    merged = _merge(_row_keys(X, np.column_stack([ch, cfg])), y)
    # design of the merged rows: executed count columns, then ε per config, then δ
    executed = np.asarray(abs(X).sum(axis=0)).ravel() > 0
    bcols = np.flatnonzero(executed)
    Xr = X[merged.rep][:, bcols]
    g = merged.rep.size
    onehot = sp.csr_matrix((np.ones(g), (np.arange(g), cfg_col[merged.rep])),
                           shape=(g, len(configs)))
    parts = [Xr.astype(np.float64), onehot]
    if has_delta:
        parts.append(sp.csr_matrix(ch[merged.rep].astype(np.float64)[:, None]))
    D = sp.hstack(parts, format="csr")
    if D.shape[0] * D.shape[1] <= _DENSE_ENTRIES:
        D = D.toarray()
    labels = ([column_label(rows.columns[j]) for j in bcols] + [eps_label(c) for c in configs]
              + ([DELTA] if has_delta else []))
    nb = bcols.size
    q = D.shape[1]

    G = _weighted_gram(D, merged.n)
    b = np.asarray(D.T @ (merged.n * merged.mean)).ravel()
    an0 = est.analyze(G, 0.0, quiet=True)
    theta0 = an0.solve(b)
    rss0 = float(np.sum(merged.n * (merged.mean - D @ theta0) ** 2) + merged.ss.sum())
    ynorm = math.sqrt(float(np.sum(y ** 2)))
    s0 = math.sqrt(rss0 / max(n - an0.rank, 1))
    an = est.analyze(G, s0 / ynorm if ynorm > 0 else 0.0, eig=an0.eig, quiet=True)
    if an.null_space_uncertainty > 1e-3:
        log.warning("%s: ill-conditioned activation rows: which blocks the activations "
                    "separate is uncertain (null-space entries to %.1g)", rows.function,
                    an.null_space_uncertainty)
    theta = an.solve(b)
    rank = an.rank
    df = n - rank
    t95 = float(stats.t.ppf(0.975, df)) if df >= 1 else math.inf
    resid = merged.mean - D @ theta
    rss = float(np.sum(merged.n * resid ** 2) + merged.ss.sum())
    sigma = math.sqrt(rss / df) if df >= 1 else math.nan
    # activation-level HC1 sandwich, exactly from the merged rows (module docstring)
    Gp = an.scale[:, None] * an.pinv_scaled() * an.scale[None, :]
    M = _weighted_gram(D, merged.n * resid ** 2 + merged.ss)
    cov = Gp @ M @ Gp * (n / df if df >= 1 else math.inf)

    def half(c: np.ndarray) -> float:
        if not math.isfinite(t95):       # no residual degree of freedom: no interval
            return math.inf
        return t95 * math.sqrt(max(float(c @ cov @ c), 0.0))

    # particular solution: confounded overheads at 0 (module docstring)
    sol, cov_sol, sub = _particular(G, b, an, nb, theta, M, n / df if df >= 1 else math.inf)
    interval_method = "HC1 sandwich over activations"
    held = None
    if physical:
        yy = float(np.sum(merged.n * merged.mean ** 2) + merged.ss.sum())
        held = hold_to_physical(G, b, yy, sol, sub, nb, D, merged, inp, bootstrap, seed)
    if held is not None:
        # predictions, costs and combinations all use the physical solution
        sol = theta = held.solution
        if held.covariance is not None:
            cov = cov_sol = held.covariance
            interval_method = (f"bootstrap over inputs ({held.replicates} replicates) of the "
                               "fit held to physical values")
    estimable = an.estimable
    # combinations of what is not estimable alone, one set per component
    combos: list[ActivationCombination] = []
    inseparable: list[tuple[tuple[str, int], ...]] = []
    notes: list[str] = []
    order_key = np.diag(G)
    for comp in an.components:
        row_b, _ = est.component_spaces(an, comp)
        # overheads last as pivots, rare columns first: "entry + ε[0]", "call + δ"
        order = sorted(range(comp.size), key=lambda i: (comp[i] >= nb, order_key[comp[i]]))
        _, R = est.readable_basis(row_b, order)
        for r in R:
            r, _ = est.rationalize(r / max(np.max(np.abs(r)), 1e-300), max_denominator)
            c = np.zeros(q)
            c[comp] = r
            c[np.abs(c) < 1e-9] = 0.0
            terms = tuple((labels[j], float(c[j])) for j in np.flatnonzero(c))
            combos.append(ActivationCombination(terms, float(c @ theta), half(c),
                                                _text(terms)))
        blocks_in = [rows.columns[bcols[j]] for j in comp if j < nb]
        if len(blocks_in) >= 2:
            inseparable.append(tuple(blocks_in))
    for grp in inseparable:
        notes.append(f"{rows.function}: blocks {', '.join(column_label(c) for c in grp)} "
                     "are not separable from these activations (they run in fixed "
                     "proportions to each other or to the probe overhead): only the "
                     "combinations listed are known, no cost is given for each alone")

    execs = np.asarray(X.sum(axis=0)).ravel()
    costs: list[ActivationCost] = []
    full_sol = np.full(p, np.nan)
    full_sol[bcols] = sol[:nb]
    for k, col in enumerate(rows.columns):
        if not executed[k]:
            costs.append(ActivationCost(col[0], col[1], False, None, None, None, int(execs[k])))
            continue
        j = int(np.searchsorted(bcols, k))
        if estimable[j]:
            e = np.zeros(q)
            e[j] = 1.0
            costs.append(ActivationCost(col[0], col[1], True, float(sol[j]), half(e),
                                        float(sol[j]), int(execs[k])))
        else:
            costs.append(ActivationCost(col[0], col[1], False, None, None, float(sol[j]),
                                        int(execs[k])))
    overheads = []
    for j in range(nb, q):
        e = np.zeros(q)
        e[j] = 1.0
        overheads.append(OverheadTerm(labels[j], bool(estimable[j]),
                                      float(sol[j]) if estimable[j] else None,
                                      half(e) if estimable[j] else None, float(sol[j])))
    full_cov = np.zeros((p, p))
    full_cov[np.ix_(bcols, bcols)] = cov_sol[:nb, :nb]
    shares = {}
    for j in range(nb, q):
        if not estimable[j]:
            # times equal to this term's own column: the particular solution of that is
            # where one tick of the term lands (overheads at 0, as in _particular)
            u = _particular_solve(G, np.asarray(G[:, j]).ravel(), an, nb)
            shares[labels[j]] = np.zeros(p)
            shares[labels[j]][bcols] = u[:nb]

    med, p95, n_ho = _heldout(D, merged, inp, folds, seed, quantum,
                              sub if physical else None, nb)
    pred_rows = D @ sol
    fit = ActivationFit(
        rows.function, int(rows.address), tuple(rows.columns), tuple(costs), tuple(overheads),
        tuple(combos), tuple(inseparable), int(n), int(n_all), int(g), int(q), int(rank), t95,
        sigma, med, p95, n_ho, interval_method, (), tuple(notes),
        full_sol, full_cov, shares)
    warnings = _plausibility(fit, pred_rows, merged, inp, quantum)
    if held is not None and held.covariance is not None:
        warnings.insert(0, FitWarning(
            WARN_HELD, held_note(rows.function, held, int(df)),
            "a rise near the noise's is expected; a much larger one means one fixed cost per "
            "block does not describe these activations (costs that depend on the data, or "
            "time spent in calls the count run does not see, such as malloc or memcpy), and "
            "the physical costs are the closest ones; [fit] costs = \"linear\" shows the "
            "unconstrained estimate"))
    return _with_warnings(fit, warnings)


def _with_warnings(fit: ActivationFit, warnings: list[FitWarning]) -> ActivationFit:
    from dataclasses import replace
    for w in warnings:
        log.warning("%s", w.message)
    return replace(fit, warnings=tuple(warnings))


def _particular(G: np.ndarray, b: np.ndarray, an: est.Analysis, nb: int, theta: np.ndarray,
                M: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The least-squares solution predictions use, with its covariance and the columns it
    is fitted over: estimable overheads at their estimate, confounded ones at 0 (dropping a
    column that lies in the span of the others keeps every fitted value); the blocks' part
    minimum-norm in scaled coordinates.  ``M``, ``scale``: the sandwich's meat and HC1
    factor."""
    q = G.shape[0]
    keep = np.ones(q, dtype=bool)
    keep[nb:] = an.estimable[nb:]
    sub = np.flatnonzero(keep)
    an_s = an
    if not keep.all():
        an_s = est.analyze(G[np.ix_(sub, sub)], 0.0, quiet=True)
        if an_s.rank < an.rank:
            # the dropped overheads were confounded only among themselves: keep them all
            sub, an_s = np.arange(q), an
    out = np.zeros(q)
    out[sub] = an_s.solve(b[sub]) if an_s is not an else theta
    Gp = an_s.scale[:, None] * an_s.pinv_scaled() * an_s.scale[None, :]
    cov = np.zeros((q, q))
    cov[np.ix_(sub, sub)] = Gp @ M[np.ix_(sub, sub)] @ Gp * scale
    return out, cov, sub


def _particular_solve(G: np.ndarray, b: np.ndarray, an: est.Analysis, nb: int) -> np.ndarray:
    """The particular solution of :func:`_particular` for the right-hand side ``b``."""
    q = G.shape[0]
    keep = np.ones(q, dtype=bool)
    keep[nb:] = an.estimable[nb:]
    sub = np.flatnonzero(keep)
    out = np.zeros(q)
    if not keep.all():
        an_s = est.analyze(G[np.ix_(sub, sub)], 0.0, quiet=True)
        if an_s.rank >= an.rank:
            out[sub] = an_s.solve(b[sub])
            return out
    return an.solve(b)


def _text(terms: Sequence[tuple[str, float]]) -> str:
    out = ""
    for lab, c in terms:
        sign = "−" if c < 0 else "+"
        mag = abs(c)
        coef = "" if abs(mag - 1.0) < 1e-12 else f"{mag:.4g}·"
        out += (f"{'−' if c < 0 else ''}{coef}{lab}" if not out else f" {sign} {coef}{lab}")
    return out


def _heldout(D: sp.csr_matrix, m: _Merged, inputs: np.ndarray, folds: int, seed: int,
             quantum: float, physical_columns: np.ndarray | None = None, nb: int = 0
             ) -> tuple[float | None, float | None, int]:
    """k-fold over inputs: median and p95 relative error of held-out activations, each
    fold's fit held to physical values over ``physical_columns`` when given (the columns
    of the particular solution, the first ``nb`` of the design blocks)."""
    uniq, inp_id = np.unique(inputs, return_inverse=True)
    F = folds if folds >= 2 and uniq.size >= 2 * folds else 0
    if F == 0:
        return None, None, 0
    perm = np.random.default_rng(seed).permutation(uniq.size)
    fold_of_input = np.empty(uniq.size, np.int64)
    fold_of_input[perm] = np.arange(uniq.size) % F
    fold = fold_of_input[inp_id.ravel()]
    g = m.rep.size
    # per (merged row, fold): activations and sum of times
    key = m.inv * F + fold
    nk = np.bincount(key, minlength=g * F).reshape(g, F)
    sk = np.bincount(key, m.y, minlength=g * F).reshape(g, F)
    floor = max(quantum, 1.0)
    pred_g = np.zeros((g, F))
    for k in range(F):
        ntr = m.n - nk[:, k]
        Gt = _weighted_gram(D, ntr)
        bt = np.asarray(D.T @ (m.n * m.mean - sk[:, k])).ravel()
        ok = np.diag(Gt) > 0
        th = np.zeros(D.shape[1])
        if physical_columns is not None:
            th = constrained_particular(Gt, bt, np.intersect1d(physical_columns,
                                                               np.flatnonzero(ok)), nb)
        elif ok.any():
            idx = np.flatnonzero(ok)
            th[idx] = est.analyze(Gt[np.ix_(idx, idx)], 0.0, quiet=True).solve(bt[idx])
        pred_g[:, k] = D @ th
    y = m.y
    pred = pred_g[m.inv, fold]
    errs = np.abs(pred - y) / np.maximum(np.abs(y), floor)
    return float(np.median(errs)), float(np.percentile(errs, 95)), int(errs.size)


def _plausibility(fit: ActivationFit, pred_rows: np.ndarray, m: _Merged, inputs: np.ndarray,
                  quantum: float) -> list[FitWarning]:
    """Figures no machine produces, as warnings with a remedy (never clamped)."""
    out: list[FitWarning] = []
    fn = fit.function
    neg = [c for c in fit.costs if c.estimable and c.cost_ticks is not None
           and c.cost_ticks + (c.ci95_ticks or 0.0) < 0]
    if neg:
        out.append(FitWarning(
            WARN_NEGATIVE_COST,
            f"{fn}: {len(neg)} block cost(s) lie wholly below zero in the per-activation fit "
            f"(e.g. {column_label((neg[0].function, neg[0].address))} = "
            f"{neg[0].cost_ticks:,.0f} ± {neg[0].ci95_ticks:,.0f} ticks)",
            "the activations vary these blocks together with others: add inputs that run "
            "them alone, or split the blocks with probes",
            blocks=tuple(c.address for c in neg), estimate_ticks=neg[0].cost_ticks,
            ci95_ticks=neg[0].ci95_ticks))
    for c in fit.combinations:
        if all(v > 0 for _, v in c.terms) and c.value_ticks + c.ci95_ticks < 0:
            out.append(FitWarning(
                WARN_NEGATIVE_COST,
                f"{fn}: the sum {c.text} = {c.value_ticks:,.0f} ± {c.ci95_ticks:,.0f} ticks lies "
                "wholly below zero in the per-activation fit",
                "vary the inputs so that these blocks run in other proportions",
                estimate_ticks=c.value_ticks, ci95_ticks=c.ci95_ticks))
    for o in fit.overheads:
        # a negative overhead is never silent, whether or not its interval reaches 0
        if o.estimable and o.value_ticks is not None and o.value_ticks < 0:
            wholly = o.value_ticks + (o.ci95_ticks or 0.0) < 0
            out.append(FitWarning(
                WARN_OVERHEAD,
                f"{fn}: the probe overhead {o.label} came out negative, {o.value_ticks:,.0f} ± "
                f"{o.ci95_ticks:,.0f} ticks" + (" (its whole interval below zero)" if wholly
                                               else " (its interval reaches zero)"),
                "a probe cannot take negative time: the rows trade it against blocks; time "
                "again on a quiet machine, and compare with the calibrated probe cost",
                config=None, estimate_ticks=o.value_ticks, ci95_ticks=o.ci95_ticks))
    low = pred_rows < 0
    if low.any():
        bad = np.flatnonzero(np.isin(m.inv, np.flatnonzero(low)))
        ins = tuple(sorted({int(i) for i in inputs[bad]}))
        out.append(FitWarning(
            WARN_NEGATIVE_PREDICTION,
            f"{fn}: {int(m.n[low].sum())} activation(s) predicted below zero ticks by the "
            f"per-activation fit (min {float(pred_rows[low].min()):.0f})",
            "the particular solution extrapolates along directions the activations do not "
            "determine: add inputs that separate the blocks involved",
            inputs=ins[:50], estimate_ticks=float(pred_rows[low].min())))
    return out
