"""The per-function activation fits of one measured root, checked against its whole calls
and put where the rest of the pipeline reads costs (issue #15).

In: the root's :class:`~wcetfit.fit.system.LinearSystem` and whole-call
:class:`~wcetfit.fit.result.FitResult`, and the ``ActivationRows`` of every timed
function (:func:`wcetfit.fit.activations.fit_activations` fits each).  Out:
:class:`ActivationAnalysis` (the fits, the root check, the probe-free cost of every
column) and, by :func:`apply_activation_fits`, a FitResult whose block costs for those
columns are the activation-fitted ones.

Which fit costs a column.  A function's own blocks: its own fit.  The blocks of a callee
that is never timed appear in its callers' rows: the fit that saw them execute most.  A
column no activation fit covers keeps the whole-call fit's solution (counted in
:attr:`RootCheck.columns_from_whole_call`).

Probe overhead.  Activation costs include the probes: a confounded ε sits in the entry
block of each timed function, a confounded δ in the blocks that call timed children.
A whole call runs without activation probes, so with T' the activation-fitted costs and
A(i) the activations of input i of the functions that have rows (the entry-block counts;
an activation too short to time still has its entry, costed with ε, and its call block,
costed with δ),

    t_root(i) = Σ_k N_ik T'_k − κ·A(i) + c + noise,

κ = ε + δ the probe overhead per timed activation (the root's own activation has no
parent: its δ goes into c, with the whole call's ε).  κ and c are fitted from the
whole-call rows (two unknowns, least squares with a HC1 sandwich).  The check reports the
root's prediction from activation-fitted costs against the measured calls, before (raw)
and after removing the probe overhead.

Where the overhead comes out.  ε sits in the entry block, δ in the parent's block that
made the call.  With the calibration of the measuring child
(:mod:`wcetfit.split.actcalib`: ε and δ measured apart on known code), κ is split in the
calibration's ε : δ proportion (:func:`_applied`: κ fixes the total the whole calls see;
the calibration's own sum drifts with the VM's speed by more than its interval) and each
part is taken out of the blocks exactly where each function's fit put it
(``ActivationFit.overhead_shares``; :func:`_removal`); the whole call's overhead is then
refitted with those costs.  Without a calibration, κ comes out of entry blocks (named in
the notes).  ε + δ apart from κ beyond both intervals, and a block the removal leaves
negative, are warnings.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np
from scipy import stats

from wcetfit.fit import robust
from wcetfit.fit.activations import DELTA, ActivationFit, column_label, fit_activations
from wcetfit.fit.result import WARN_OVERHEAD, BlockFit, Combination, FitWarning, Group
from wcetfit.fit.activation_overhead import (_applied, _apply_check, _calibration,
                                             _kappa_agreement, _negative_after_removal,
                                             _removal)

log = logging.getLogger(__name__)

# Fewest residual degrees of freedom a function's activation fit needs to cost its blocks:
# with fewer its intervals are infinite (0) or too wide to use (t95 = 12.7 at 1, 4.3 at 2;
# 3.2 at 3); the function's blocks then keep the whole-call fit's costs.
MIN_RESIDUAL_DOF = 3


@dataclass(frozen=True)
class RootCheck:
    root: str
    inputs: int
    kappa_ticks: float | None            # probe overhead per timed activation (ε + δ)
    kappa_ci95_ticks: float | None
    intercept_ticks: float               # the whole call's overhead (+ one δ)
    intercept_ci95_ticks: float
    raw_median_rel_error: float          # Σ count·T' against measured, probes included
    raw_p95_rel_error: float
    median_rel_error: float              # after −κ·A(i) + c
    p95_rel_error: float
    columns_from_whole_call: int
    # k folds over inputs: the root's calls predicted from activation fits and (κ, c)
    # fitted without the fold's inputs (_root_heldout); None: too few inputs
    heldout_median_rel_error: float | None = None
    heldout_p95_rel_error: float | None = None
    heldout_inputs: int = 0
    # the probes' ε and δ measured by the calibration in the measuring child
    # (wcetfit.split.actcalib), their sum, and what the costs had removed: "calibration"
    # (ε from entry blocks, δ from the calling blocks) or "kappa" (κ from entry blocks:
    # no calibration); None: nothing removed
    epsilon_ticks: float | None = None
    epsilon_ci95_ticks: float | None = None
    delta_ticks: float | None = None
    delta_ci95_ticks: float | None = None
    calibrated_kappa_ticks: float | None = None
    calibrated_kappa_ci95_ticks: float | None = None
    removal: str | None = None
    # what came out of the blocks: κ split in the calibration's proportion (_applied)
    applied_epsilon_ticks: float | None = None
    applied_epsilon_ci95_ticks: float | None = None
    applied_delta_ticks: float | None = None
    applied_delta_ci95_ticks: float | None = None
    # the prediction as it is made: probe-free costs and the whole call's overhead
    # fitted with them (the configuration-0 overhead of the applied fit)
    applied_intercept_ticks: float | None = None
    applied_intercept_ci95_ticks: float | None = None
    applied_median_rel_error: float | None = None
    applied_p95_rel_error: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class ActivationAnalysis:
    root: str
    fits: Mapping[str, ActivationFit]
    check: RootCheck | None
    columns: tuple[tuple[str, int], ...]        # the root system's columns
    costs: np.ndarray = field(repr=False, compare=False)   # probe-free, per column (NaN: none)
    source: tuple[str | None, ...] = ()          # the fit each column's cost comes from
    warnings: tuple[FitWarning, ...] = ()
    notes: tuple[str, ...] = ()
    # probe overhead taken out of each column's activation-fitted cost, and its 95 %
    # half-width (ε's and δ's intervals added linearly: conservative)
    removed: np.ndarray | None = field(repr=False, compare=False, default=None)
    removed_ci95: np.ndarray | None = field(repr=False, compare=False, default=None)
    # timed functions whose own fit was not used (too few residual degrees of freedom):
    # (name, activations, residual degrees of freedom); their blocks keep whole-call costs
    whole_call_functions: tuple[tuple[str, int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root,
                "functions": {name: f.to_json() for name, f in self.fits.items()},
                "whole_call_functions": [{"name": n, "activations": a, "residual_dof": d}
                                         for n, a, d in self.whole_call_functions],
                "root_check": self.check.to_json() if self.check else None,
                "warnings": [w.to_json() for w in self.warnings], "notes": list(self.notes)}

    def heldout(self) -> dict[str, tuple[float | None, float | None, int]]:
        """Per function: (median, p95 relative error, held-out activations)."""
        return {n: (f.heldout_median_rel_error, f.heldout_p95_rel_error,
                    f.heldout_activations) for n, f in self.fits.items()}


def fit_root_activations(system: Any, whole_fit: Any, rows: Mapping[str, Any], *,
                         quantum: float | None = None, folds: int = 5,
                         seed: int = 0, calibration: Mapping[str, Any] | None = None,
                         cost_model: str = "physical", bootstrap: int = 200
                         ) -> ActivationAnalysis:
    """Fit every function's activation rows and check them against the root's whole calls
    (module docstring).  ``system``: the root's LinearSystem (columns, counts, indices,
    ticks); ``whole_fit``: its whole-call FitResult (costs of uncovered columns);
    ``calibration``: the probes' ε and δ measured with the rows
    (:func:`wcetfit.split.actcalib.calibrate`), or None (κ then comes out of entry blocks);
    ``cost_model``/``bootstrap``: as ``[fit] costs`` and ``bootstrap``, for each function's fit
    (:func:`wcetfit.fit.activations.fit_activations`)."""
    if quantum is None:
        quantum = getattr(whole_fit, "quantum_ticks", None)
    from wcetfit.errors import FitError

    fits = {}
    skipped: list[str] = []
    too_few: list[tuple[str, int, int]] = []
    for name, r in rows.items():
        if r.ticks.shape[0] == 0:
            continue        # no input called it: nothing to fit, its blocks were never run
        try:
            f = fit_activations(r, quantum=quantum, folds=folds, seed=seed,
                                costs=cost_model, bootstrap=bootstrap)
        except FitError as exc:
            # e.g. every activation discarded: its blocks keep the whole-call fit's costs
            log.warning("%s: no activation fit of %s: %s", system.root, name, exc)
            skipped.append(f"{name}: no activation fit ({exc}); its blocks keep the "
                           "whole-call fit's costs")
            continue
        dof = f.activations - f.rank
        if dof < MIN_RESIDUAL_DOF:
            # as many distinct activations as the costs it would fit (zlib's inflate: 528
            # block columns, 30 activations from 30 inputs): no interval, so no margin for
            # a bound; the whole calls, which carry every input's full path, cost its
            # blocks instead
            log.info("%s: %s's activation fit has %d residual degree(s) of freedom: its "
                     "blocks keep the whole-call fit's costs", system.root, name, dof)
            skipped.append(f"{name}: its {f.activations} activation(s) leave {max(dof, 0)} "
                           f"residual degree(s) of freedom for {f.rank} estimable "
                           f"quantities (at least {MIN_RESIDUAL_DOF} are needed for an "
                           "interval); its blocks keep the whole-call fit's costs (time more "
                           "inputs for a per-activation fit)")
            too_few.append((name, int(f.activations), int(max(dof, 0))))
            continue
        fits[name] = f
    rows = {n: r for n, r in rows.items() if n in fits}
    columns = tuple(system.columns)
    col_index = {c: j for j, c in enumerate(columns)}
    nc = len(columns)
    whole_sol = np.asarray(getattr(whole_fit, "solution", np.full(nc, np.nan)), dtype=float)
    base, source = _assemble(fits, col_index, whole_sol)
    uncovered = np.array([src is None for src in source], dtype=bool)
    notes: list[str] = list(skipped)
    # the blocks of functions costed from the whole calls instead (too few activations)
    # are named with those functions, not counted as blocks no activation ran
    fallen = {n for n, _a, _d in too_few}
    fallback = np.array([c[0] in fallen for c in columns], dtype=bool)
    n_whole = int(np.sum(uncovered & np.isfinite(whole_sol) & ~fallback))
    if n_whole:
        notes.append(f"{n_whole} block(s) that no timed activation executed keep the "
                     "whole-call fit's cost")
    for name, f in fits.items():
        for o in f.overheads:
            if o.label == DELTA and o.estimable:
                notes.append(f"{name}: δ is separable in its activations ({o.value_ticks:.0f} "
                             "ticks); the probe-free costs remove κ per child, δ more than its "
                             "blocks hold")

    # activations per input of the functions that have rows, timed or not: each one's
    # entry block carries ε, each call of it δ (module docstring)
    entry_cols = [col_index[(name, f.address)] for name, f in fits.items()
                  if (name, f.address) in col_index]
    A = np.asarray(system.counts, dtype=float)[:, entry_cols].sum(axis=1)
    ticks = getattr(system, "ticks_at_reference", system.ticks)
    y = robust.summarize_repeats(ticks, quantum=quantum or 0.0).value
    counts = np.asarray(system.counts, dtype=float)
    pred_raw = counts @ np.nan_to_num(base)
    # covariance of the activation-fitted costs (independent fits: block-diagonal by
    # source), carried into the check's intervals
    cov_t = np.zeros((nc, nc))
    by_source: dict[str, list[int]] = {}
    for j, src in enumerate(source):
        if src is not None:
            by_source.setdefault(src, []).append(j)
    for src, js in by_source.items():
        fi = [fits[src].columns.index(columns[j]) for j in js]
        cov_t[np.ix_(js, js)] = fits[src].covariance[np.ix_(fi, fi)]
    check, warnings = _root_check(system.root, y, pred_raw, A, quantum or 0.0, n_whole,
                                  counts, cov_t)
    cal = _calibration(calibration)
    if check is not None:
        med, p95, n_held = _root_heldout(system, rows, whole_sol, col_index, entry_cols, y,
                                         quantum, folds, seed, cal, cost_model)
        check = replace(check, heldout_median_rel_error=med, heldout_p95_rel_error=p95,
                        heldout_inputs=n_held)
    costs = base.copy()
    removed = np.zeros(nc)
    if cal is not None:
        applied = _applied(cal, check.kappa_ticks if check else None,
                           check.kappa_ci95_ticks if check else None)
        removed = _removal(columns, source, fits, rows, applied[0], applied[2])
        costs = base - removed
        if check is not None:
            check = _apply_check(check, cal, applied, y, counts @ np.nan_to_num(costs),
                                 quantum or 0.0)
            warnings.extend(_kappa_agreement(system.root, check))
    elif check is not None and check.kappa_ticks is not None:
        entries = {(name, f.address) for name, f in fits.items()}
        for c, j in col_index.items():
            if c in entries and not uncovered[j]:
                removed[j] = check.kappa_ticks
        costs = base - removed
        check = replace(check, removal="kappa", applied_intercept_ticks=check.intercept_ticks,
                        applied_intercept_ci95_ticks=check.intercept_ci95_ticks,
                        applied_median_rel_error=check.median_rel_error,
                        applied_p95_rel_error=check.p95_rel_error)
        notes.append("the probes' ε and δ were not measured (no calibration stored with the "
                     "activations: time them again): κ = ε + δ of the root check comes out "
                     "of each timed function's entry block, although δ sits in its callers' "
                     "call blocks")
    if check is not None and calibration and "error" in calibration:
        notes.append(f"probe calibration failed: {calibration['error']}")
    warnings.extend(_negative_after_removal(system.root, columns, source, base, removed,
                                            costs, cal, check))
    allw = tuple(w for f in fits.values() for w in f.warnings) + tuple(warnings)
    for f in fits.values():
        notes.extend(f.notes)
    removed_ci = np.zeros(nc)
    if cal is not None:
        removed_ci = _removal(columns, source, fits, rows, applied[1], applied[3],
                              absolute=True)
    elif check is not None and check.kappa_ci95_ticks is not None:
        removed_ci = np.where(removed > 0, check.kappa_ci95_ticks, 0.0)
    return ActivationAnalysis(system.root, fits, check, columns, costs, tuple(source), allw,
                              tuple(notes), removed, removed_ci, tuple(too_few))


def _assemble(fits: Mapping[str, ActivationFit], col_index: Mapping[tuple[str, int], int],
              whole_sol: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
    """(cost per column, the fit it comes from or None): a function's own blocks from its
    own fit, an untimed callee's from the fit that saw them execute most, the rest from the
    whole-call fit's solution (module docstring)."""
    nc = len(whole_sol)
    tprime = np.full(nc, np.nan)
    source: list[str | None] = [None] * nc
    best = np.full(nc, -1)
    for name, f in fits.items():
        for c in f.costs:
            j = col_index.get((c.function, c.address))
            if j is None or c.solution_ticks is None:
                continue
            own = c.function == name
            rank = (2 ** 62 if own else 0) + c.executions
            if rank > best[j]:
                best[j], tprime[j], source[j] = rank, c.solution_ticks, name
    return np.where(np.isnan(tprime), whole_sol, tprime), source


def _rows_of_inputs(r: Any, keep: np.ndarray) -> Any:
    """``r`` (ActivationRows) restricted to the activations of the inputs in ``keep``."""
    mask = np.isin(np.asarray(r.input_index), keep)
    return replace(r, counts=r.counts[mask], ticks=np.asarray(r.ticks)[mask],
                   children=np.asarray(r.children)[mask],
                   input_index=np.asarray(r.input_index)[mask],
                   call_site=np.asarray(r.call_site)[mask],
                   child_calls=None if getattr(r, "child_calls", None) is None
                   else r.child_calls[mask])


def _root_heldout(system: Any, rows: Mapping[str, Any], whole_sol: np.ndarray,
                  col_index: Mapping[tuple[str, int], int], entry_cols: list[int],
                  y: np.ndarray, quantum: float | None, folds: int, seed: int,
                  cal: tuple | None = None, cost_model: str = "physical"
                  ) -> tuple[float | None, float | None, int]:
    """Held-out relative error of the root's whole calls predicted from activation costs:
    k folds over inputs; each fold's calls are predicted by activation fits and a (κ, c)
    regression that never saw that fold's inputs (neither their activations nor their
    whole calls).  Columns no activation covers keep the whole-call fit's solution (fitted
    on every input: counted in ``columns_from_whole_call``)."""
    indices = np.asarray(system.indices)
    uniq = np.unique(indices)
    if folds < 2 or uniq.size < 2 * folds:
        return None, None, 0
    perm = np.random.default_rng(seed).permutation(uniq.size)
    fold_of = dict(zip(uniq[perm].tolist(), (np.arange(uniq.size) % folds).tolist()))
    fold = np.array([fold_of[int(i)] for i in indices])
    counts = np.asarray(system.counts, dtype=float)
    A = counts[:, entry_cols].sum(axis=1)
    floor = max(quantum or 0.0, 1.0)
    errs: list[np.ndarray] = []
    for k in range(folds):
        train = uniq[np.array([fold_of[int(i)] != k for i in uniq])]
        fits = {}
        for name, r in rows.items():
            sub = _rows_of_inputs(r, train)
            if sub.counts.shape[0] == 0:
                continue
            try:
                # (the point alone: no intervals are used, so no bootstrap)
                fits[name] = fit_activations(sub, quantum=quantum, folds=0, seed=seed,
                                             costs=cost_model, bootstrap=0)
            except Exception as exc:  # noqa: BLE001 - a fold too small to fit: skip it
                log.info("held-out root check, fold %d, %s: %s", k, name, exc)
        base, src = _assemble(fits, col_index, whole_sol)
        pred_raw = counts @ np.nan_to_num(base)
        tr = (fold != k) & np.isfinite(y) & np.isfinite(pred_raw)
        te = (fold == k) & np.isfinite(y) & np.isfinite(pred_raw)
        if tr.sum() < 3 or not te.any():
            continue
        X = (np.column_stack([np.ones(tr.sum()), -A[tr]]) if np.ptp(A[tr]) > 0
             else np.ones((tr.sum(), 1)))
        beta, *_ = np.linalg.lstsq(X, y[tr] - pred_raw[tr], rcond=None)
        Xt = (np.column_stack([np.ones(te.sum()), -A[te]]) if X.shape[1] == 2
              else np.ones((te.sum(), 1)))
        pred = pred_raw[te] + Xt @ beta
        if cal is not None:
            # as applied: ε and δ (the calibration's split of this fold's κ) out of the
            # blocks where the fit put them, then the whole call's overhead from the fold
            e, _ec, d, _dc = _applied(cal, float(beta[1]) if X.shape[1] == 2 else None, None)
            free = counts @ np.nan_to_num(base - _removal(tuple(col_index), src, fits, rows,
                                                          e, d))
            pred = free[te] + float(np.mean(y[tr] - free[tr]))
        errs.append(np.abs(pred - y[te]) / np.maximum(np.abs(y[te]), floor))
    if not errs:
        return None, None, 0
    e = np.concatenate(errs)
    return float(np.median(e)), float(np.percentile(e, 95)), int(e.size)


def _root_check(root: str, y: np.ndarray, pred_raw: np.ndarray, A: np.ndarray,
                quantum: float, n_whole: int, counts: np.ndarray, cov_t: np.ndarray
                ) -> tuple[RootCheck | None, list[FitWarning]]:
    ok = np.isfinite(y) & np.isfinite(pred_raw)
    if ok.sum() < 3:
        return None, []
    y, pr, a, N = y[ok], pred_raw[ok], A[ok], counts[ok]
    r = y - pr
    floor = max(quantum, 1.0)
    raw = np.abs(pr - y) / np.maximum(np.abs(y), floor)
    separable = np.ptp(a) > 0
    X = np.column_stack([np.ones_like(a), -a]) if separable else np.ones((a.size, 1))
    beta, *_ = np.linalg.lstsq(X, r, rcond=None)
    res = r - X @ beta
    n, k = X.shape
    XtXi = np.linalg.inv(X.T @ X)
    meat = (X * res[:, None] ** 2).T @ X
    cov = XtXi @ meat @ XtXi * (n / max(n - k, 1))
    # the costs T' are estimates too: (κ, c) = L·(y − N·T') moves with them
    LN = (XtXi @ X.T) @ N
    cov = cov + LN @ cov_t @ LN.T
    t95 = float(stats.t.ppf(0.975, max(n - k, 1)))
    ci = t95 * np.sqrt(np.clip(np.diag(cov), 0, None))
    corrected = np.abs((pr + X @ beta) - y) / np.maximum(np.abs(y), floor)
    kappa = float(beta[1]) if separable else None
    kci = float(ci[1]) if separable else None
    check = RootCheck(root, int(n), kappa, kci, float(beta[0]), float(ci[0]),
                      float(np.median(raw)), float(np.percentile(raw, 95)),
                      float(np.median(corrected)), float(np.percentile(corrected, 95)), n_whole)
    warnings: list[FitWarning] = []
    if kappa is None:
        warnings.append(FitWarning(
            WARN_OVERHEAD,
            f"{root}: every input timed the same number of activations, so the probe overhead "
            "per activation cannot be told from the whole call's: the activation costs keep "
            "the probe overhead (the bound is high by it per activation)",
            "add inputs that call the timed functions different numbers of times"))
    elif kappa < 0:
        wholly = kappa + kci < 0
        warnings.append(FitWarning(
            WARN_OVERHEAD,
            f"{root}: the probe overhead per timed activation came out negative, {kappa:,.0f} ± "
            f"{kci:,.0f} ticks" + (" (its whole interval below zero)" if wholly else
                                  " (its interval reaches zero)"),
            "a probe cannot take negative time: the activation and the whole-call runs "
            "disagree (another load, another machine speed); time both again on a quiet "
            "machine", estimate_ticks=kappa, ci95_ticks=kci))
    for w in warnings:
        log.warning("%s", w.message)
    return check, warnings


def apply_activation_fits(fit: Any, analysis: ActivationAnalysis) -> Any:
    """``fit`` (the whole-call FitResult) with the activation-fitted probe-free costs as the
    costs of the columns they cover: the cost a block shows is the one it predicts with.
    The whole call's overhead (configuration 0) becomes the one fitted with those costs."""
    costs = analysis.costs
    covered = np.array([s is not None for s in analysis.source])
    sol = np.asarray(fit.solution, dtype=float).copy()
    sol[covered] = costs[covered]
    removed = (analysis.removed if analysis.removed is not None
               else np.zeros(len(analysis.columns)))
    removed_ci = (analysis.removed_ci95 if analysis.removed_ci95 is not None
                  else np.zeros(len(analysis.columns)))
    blocks = list(fit.blocks)
    nb = len(blocks)
    ncfg = len(fit.configs)
    cov = np.zeros((nb + ncfg, nb + ncfg))
    old = np.asarray(fit.covariance, dtype=float)
    keep = np.concatenate([~covered, np.ones(ncfg, bool)])
    if old.shape == cov.shape:
        cov[np.ix_(keep, keep)] = old[np.ix_(keep, keep)]
    ns = (lambda t: None if t is None or fit.tsc_hz is None else t * 1e9 / fit.tsc_hz)
    by_source: dict[str, list[int]] = {}
    for j, (col, src) in enumerate(zip(analysis.columns, analysis.source)):
        if src is None:
            continue
        by_source.setdefault(src, []).append(j)
        c = analysis.fits[src].cost(col)
        s = float(sol[j])
        est_alone, ci = c.estimable, c.ci95_ticks
        if removed[j] > 0:
            # the block is known with the overhead it holds (a combination "block + ε[0]"
            # or "block + δ"); less the measured overhead, it is known alone
            comb = _alone_with_overhead(analysis.fits[src], col)
            est_alone = comb is not None and analysis.check is not None \
                and analysis.check.removal == "calibration"
            ci = math.hypot(comb.ci95_ticks, float(removed_ci[j])) if est_alone else None
        cost = s if est_alone else None
        blocks[j] = BlockFit(blocks[j].address, est_alone, cost, ci, None, s,
                             c.executions, ns(cost), ns(ci), ns(s))
    for src, js in by_source.items():
        f = analysis.fits[src]
        fi = [f.columns.index(analysis.columns[j]) for j in js]
        cov[np.ix_(js, js)] = f.covariance[np.ix_(fi, fi)]
    ov_sol = np.asarray(fit.overhead_solution, dtype=float).copy()
    overhead_ticks = dict(fit.overhead_ticks)
    ch = analysis.check
    if ch is not None and 0 in fit.configs:
        # the whole call's overhead fitted with the costs as applied (probe-free)
        c0 = ch.applied_intercept_ticks if ch.applied_intercept_ticks is not None \
            else ch.intercept_ticks
        c0_ci = ch.applied_intercept_ci95_ticks if ch.applied_intercept_ticks is not None \
            else ch.intercept_ci95_ticks
        k = fit.configs.index(0)
        ov_sol[k] = c0
        overhead_ticks[0] = c0
        z = float(fit.residuals.get("t95", 1.96)) or 1.96
        cov[nb + k, nb + k] = (c0_ci / z) ** 2
    groups, blocks = _regroup(fit, analysis, blocks, covered, ns)
    # where each column's cost comes from is information (the report's fit line and the
    # JSON's "activations"), not a warning
    warn_text = tuple(w.message for w in analysis.warnings)
    return replace(fit, blocks=tuple(blocks), groups=groups, solution=sol,
                   overhead_solution=ov_sol, overhead_ticks=overhead_ticks, covariance=cov,
                   warnings=tuple(fit.warnings) + warn_text,
                   fit_warnings=tuple(fit.fit_warnings) + tuple(analysis.warnings),
                   activations=analysis)


def _alone_with_overhead(f: ActivationFit, col: tuple[str, int]) -> Any:
    """``f``'s combination of this block alone with overhead terms (ε[…], δ), or None."""
    lab = column_label(col)
    for c in f.combinations:
        named = [(t, v) for t, v in c.terms if ":" in t]
        if len(named) == 1 and named[0][0] == lab and abs(named[0][1] - 1.0) < 1e-9:
            return c
    return None


KIND_ACTIVATIONS = "activations"     # blocks one function's own activations do not separate


def _regroup(fit: Any, analysis: ActivationAnalysis, blocks: list, covered: np.ndarray,
             ns: Any) -> tuple[tuple[Group, ...], list]:
    """The groups of the fit as it now predicts: the whole-call fit's groups keep only the
    blocks no activation fit costs (their combinations hold for the whole-call solution of
    all their blocks, so a group that lost blocks keeps none); every activation-costed block
    that is not estimable alone is in a group of the function whose activations cost it,
    with that fit's combinations.  Groups are renumbered 0, 1, … (an id is an index)."""
    addr_of = [c[1] for c in analysis.columns]
    covered_addr = {addr_of[j] for j in np.flatnonzero(covered)}
    out: list[Group] = []
    new_id: dict[int, int] = {}
    for g in fit.groups:
        rest = tuple(a for a in g.blocks if a not in covered_addr)
        if not rest:
            continue
        new_id[g.id] = len(out)
        if len(rest) == len(g.blocks):
            out.append(replace(g, id=len(out)))
        else:
            out.append(replace(
                g, id=len(out), blocks=rest, combinations=(), relations=(),
                advice=(f"the other {len(g.blocks) - len(rest)} block(s) of this whole-call "
                        "group are costed from per-activation fits; these keep the whole-call "
                        "fit's particular solution")))
    blocks = [replace(b, group=new_id.get(b.group)) if b.group is not None and not covered[j]
              else b for j, b in enumerate(blocks)]
    # per source fit: its covered blocks not estimable alone, joined when one of its
    # inseparable sets or combinations names both (a union-find over columns)
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(c: tuple[str, int]) -> tuple[str, int]:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    col_j = {c: j for j, c in enumerate(analysis.columns)}
    by_src: dict[str, list[tuple[str, int]]] = {}
    for j, (col, src) in enumerate(zip(analysis.columns, analysis.source)):
        if src is not None and not blocks[j].estimable:
            parent[col] = col
            by_src.setdefault(src, []).append(col)
    for src, cols in by_src.items():
        f = analysis.fits[src]
        label_col = {column_label(c): c for c in cols}
        linked = [list(g) for g in f.inseparable] + [
            [label_col[t] for t, _v in c.terms if t in label_col] for c in f.combinations]
        for g in linked:
            g = [c for c in g if c in parent and analysis.source[col_j[c]] == src]
            for c in g[1:]:
                parent[find(c)] = find(g[0])
        comps: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for c in cols:
            comps.setdefault(find(c), []).append(c)
        for comp in comps.values():
            labels = {column_label(c) for c in comp}
            combos = []
            for c in f.combinations:
                named = {t for t, _v in c.terms if ":" in t}
                if named and named <= labels:
                    # its value as the blocks predict: the applied (probe-free) costs
                    terms = tuple((label_col[t], v) for t, v in c.terms if t in label_col)
                    value = float(sum(v * blocks[col_j[col]].solution_ticks
                                      for col, v in terms))
                    text = c.text if value == c.value_ticks else \
                        f"{c.text}, probe overhead removed"
                    combos.append(Combination(
                        tuple((col[1], v) for col, v in terms), (), value, c.ci95_ticks,
                        f"{text} (in {src}'s activations)", ns(value), ns(c.ci95_ticks)))
            gid = len(out)
            entry = any(col == (src, f.address) for col in comp)
            out.append(Group(
                gid, tuple(col[1] for col in comp), KIND_ACTIVATIONS, tuple(combos),
                advice=(f"known only together in {src}'s own activations"
                        + ("; the entry block's probe overhead (ε) is removed as measured"
                           if entry else "")
                        + ": vary how often these blocks run relative to each other per "
                          "activation")))
            for col in comp:
                j = col_j[col]
                blocks[j] = replace(blocks[j], group=gid)
    return tuple(out), blocks
