"""Per-block costs from whole-call timings: the overdetermined system of Moreno &
Fischmeister (eq. 9–10, with the overhead ε of eq. 7), solved honestly.  This module
composes the stages of the fit (:func:`fit_function`); each stage lives in its own module.

Model.  One timed call of input i under probe configuration c reads

    t_i = Σ_k N_ik · T_k + ε_c + noise

with N the block counts of that input (from the count run), T_k the cost of block k and
ε_c the fixed overhead of configuration c's timing probes.  The design matrix is
X = [N | C] with C the configuration indicators.

Estimability (:mod:`wcetfit.fit.estimability`): every reported figure is an estimable
quantity with its interval; :mod:`wcetfit.fit.groups` says how blocks known only in
combination are grouped and named.

Stages.  :mod:`~wcetfit.fit.rows` builds the rows (per-input statistics) and the design
columns and accumulates the normal matrices; :mod:`~wcetfit.fit.iteration` merges identical
columns and iterates outlier rejection and row weights; the estimate is solved here on the
row space (:mod:`~wcetfit.fit.estimability`); :mod:`~wcetfit.fit.intervals` gives its
covariance; :mod:`~wcetfit.fit.solution` the non-negative and the particular solutions;
:mod:`~wcetfit.fit.groups` the groups and combinations (worded by
:mod:`~wcetfit.fit.wording`); :mod:`~wcetfit.fit.validation` the held-out figures;
:mod:`~wcetfit.fit.checks` the warnings about implausible figures (negative costs, ε
below its floor, negative predictions).  The options and the result are plain data in
:mod:`~wcetfit.fit.result`.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from wcetfit.errors import FitError
from wcetfit.fit import estimability as est
from wcetfit.fit import robust
from wcetfit.fit.checks import plausibility, summaries
from wcetfit.fit.groups import build_groups, overhead_quantities, red_of_block, structural_space
from wcetfit.fit.intervals import bootstrap, half_width, quantity_variance, sandwich
from wcetfit.fit.iteration import iterate
from wcetfit.fit.result import BlockFit, FitOptions, FitResult, Rejection
from wcetfit.fit.rows import Design, active_columns, build_rows
from wcetfit.fit.solution import nonneg_solution, particular_solution
from wcetfit.fit.validation import (fold_solutions, heldout_validation,
                                    warn_clustered_rejections)

log = logging.getLogger(__name__)

_EXACT = 2.0 ** 53

# Slowest sustained machine speed (wcetfit.timing.speed) above which the fit warns: on an idle
# core the running median moves by a few percent at most.
SLOW_MACHINE_WARN = 1.15


def fit_function(counts: np.ndarray, ticks: np.ndarray, block_addresses: Sequence[int], *,
                 structural_basis: np.ndarray | Mapping[int, np.ndarray] | None = None,
                 config_ids: np.ndarray | None = None,
                 tsc_hz: float | None = None,
                 speed: Any = None,
                 ceilings: np.ndarray | None = None,
                 options: FitOptions = FitOptions()) -> FitResult:
    """Fit per-block costs to the timings; see the module docstring.

    ``counts`` int [n_inputs, n_blocks]; ``ticks`` [n_inputs, n_repeats] (NaN = missing);
    ``structural_basis`` [dim, n_blocks] spanning the CFG's count space (or a mapping
    config id → basis, spanning each configuration's space); ``config_ids`` int
    [n_inputs] (default all 0); ``speed``: a :class:`wcetfit.timing.speed.SpeedProfile` of the
    ticks, whose factors are divided out of every call before anything else (the costs
    are then at the profile's reference speed; the TSC step is detected on the raw
    ticks); ``ceilings`` [n_blocks]: the most one execution of each block can cost, in
    ticks (inf: no limit; wcetfit.fit.ceilings), which the physical fit holds it to."""
    from wcetfit.blasthreads import limited

    with limited(options.blas_threads):
        return _Fitter(counts, ticks, block_addresses, structural_basis, config_ids, tsc_hz,
                       options, speed, ceilings).run()

class _Fitter:
    """The state of one fit, shared by the stages (rows, iteration, intervals, solutions,
    groups, validation), which read and extend it."""

    def __init__(self, counts, ticks, block_addresses, structural_basis, config_ids, tsc_hz,
                 opts: FitOptions, speed: Any = None, ceilings: Any = None) -> None:
        self.opts = opts
        self.warnings: list[str] = []
        counts = np.asarray(counts)
        if counts.ndim != 2:
            raise FitError(f"counts must be a 2-D array [inputs, blocks], got shape {counts.shape}")
        if not (np.issubdtype(counts.dtype, np.integer) or np.issubdtype(counts.dtype, np.floating)):
            raise FitError(f"counts must be numbers, got dtype {counts.dtype}")
        n, nb = counts.shape
        t = np.asarray(ticks, dtype=np.float64)
        if t.ndim == 1:
            t = t[:, None]
        if t.ndim != 2 or t.shape[0] != n:
            raise FitError(f"ticks must be [inputs={n}, repeats], got shape {np.shape(ticks)}")
        addrs = [int(a) for a in block_addresses]
        if len(addrs) != nb:
            raise FitError(f"{len(addrs)} block addresses for {nb} count columns")
        if len(set(addrs)) != nb:
            raise FitError("block addresses are not unique")
        if n == 0:
            raise FitError("no inputs to fit")
        if config_ids is None:
            cfg_ids = np.zeros(n, dtype=np.int64)
        else:
            cfg_ids = np.asarray(config_ids)
            if cfg_ids.shape != (n,) or not np.issubdtype(cfg_ids.dtype, np.integer):
                raise FitError(f"config_ids must be int [{n}], got {cfg_ids.dtype} {cfg_ids.shape}")
        if tsc_hz is not None and not (tsc_hz > 0):
            raise FitError(f"tsc_hz must be positive, got {tsc_hz}")
        self.counts = counts
        self.raw_ticks = t
        self.speed = speed
        if speed is not None:
            try:
                t = speed.at_reference(t)
            except ValueError as exc:
                raise FitError(str(exc)) from None
        self.ticks = t
        self.addrs = addrs
        self.n, self.nb = n, nb
        self.configs = tuple(int(c) for c in np.unique(cfg_ids))
        self.cfg = np.searchsorted(np.asarray(self.configs), cfg_ids).astype(np.int64)
        self.n_cfg = len(self.configs)
        self.tsc_hz = float(tsc_hz) if tsc_hz is not None else None
        mats = (list(structural_basis.values()) if isinstance(structural_basis, Mapping)
                else [] if structural_basis is None else [structural_basis])
        for m in mats:
            m = np.asarray(m)
            if m.ndim not in (1, 2) or np.atleast_2d(m).shape[1] != nb or \
                    not np.all(np.isfinite(m)):
                raise FitError(f"structural basis must be finite [dim, {nb}], got shape "
                               f"{m.shape}")
        self.basis_in = structural_basis
        if ceilings is not None:
            ceilings = np.asarray(ceilings, dtype=float)
            if ceilings.shape != (nb,) or np.any(np.isnan(ceilings)) or np.any(ceilings <= 0):
                raise FitError(f"ceilings must be positive [{nb}] (inf: no limit), got "
                               f"shape {ceilings.shape}")
        self.ceilings = ceilings

    # -- main ---------------------------------------------------------------------------------
    def run(self) -> FitResult:
        o = self.opts
        build_rows(self)
        if not self.has.any():
            raise FitError("no input has a valid timing")
        if self.speed is not None and self.speed.followed and \
                self.speed.max_factor > SLOW_MACHINE_WARN:
            self._warn(f"the machine ran up to {self.speed.max_factor:.2f}× slower during parts "
                       f"of the timing run (another workload on the same core or a lower "
                       f"clock); the fit divided it out and the WCET includes it, but a later "
                       f"session may see other speeds: time on an idle machine, on a core of "
                       f"its own, for tighter and more repeatable figures")
        from wcetfit.fit.checks import interrupts_beyond_rate
        note = interrupts_beyond_rate(self.ticks, self.call_keep, self.tsc_hz)
        if note:
            self._warn(note)
        active = active_columns(self)
        self.active = active
        F = o.folds if o.folds >= 2 and int(self.has.sum()) >= 2 * o.folds else 1
        if o.folds >= 2 and F == 1:
            self._warn(f"too few inputs ({int(self.has.sum())}) for {o.folds}-fold "
                                 "validation: no validation")
        rng = np.random.default_rng(o.seed)
        fold = np.zeros(self.n, dtype=np.int64)
        perm = rng.permutation(self.n)
        fold[perm] = np.arange(self.n) % F
        self.F = F
        self.design = Design(self.counts, active, self.cfg, self.n_cfg, fold, F, o.chunk_rows)
        p = self.design.p
        self.exact = self.count_max ** 2 * float(self.w.sum()) < _EXACT
        if not self.exact:
            self._warn("counts too large for an exact normal matrix: the identical-column "
                       "test and the rank tolerance are approximate")
        w_max = float(np.max(self.w)) if self.w.size else 0.0
        self.design.exact32 = (self.count_max ** 2 * max(w_max, 1.0)
                               * min(self.design.chunk, self.n) < 2.0 ** 24)
        self.G = np.zeros((F, p, p))
        self.b = np.zeros((F, p))
        self.design.accumulate(self.G, self.b, self.w, self.S)
        # row weights of the estimates (module docstring, "Weights"): v multiplies the
        # unweighted row weight w.  The exact unweighted G stays for the identical-column
        # test, the rank and everything structural; Gw, bw are the weighted copies the
        # estimates come from (the same arrays when there is no weighting).
        self.weighted = o.weights == "relative"
        self.v = np.ones(self.n)
        self.weight_floor = (o.weight_floor_quanta * (self.quantum if self.quantum > 1 else 1.0)
                             if self.weighted else None)
        self.weight_iterations = 0
        if self.weighted:
            self.Gw, self.bw = self.G.copy(), self.b.copy()
        else:
            self.Gw, self.bw = self.G, self.b
        iterate(self)
        return self._finish()

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            # at info level: the fit's warnings are the report's, listed with the others
            # (at WARNING each one was printed a second time on stderr, after the report)
            log.info("%s", msg)
            self.warnings.append(msg)

    # -- final analysis -------------------------------------------------------------------------
    def _finish(self) -> FitResult:
        o = self.opts
        d = self.design
        G, b = self.G.sum(axis=0), self.b.sum(axis=0)
        self.Gtot, self.btot = G, b
        if self.weighted:
            self.Gwtot, self.bwtot = self.Gw.sum(axis=0), self.bw.sum(axis=0)
        else:
            self.Gwtot, self.bwtot = G, b
        reps = self.reps
        Gr = G[np.ix_(reps, reps)]
        Gwr = self.Gwtot[np.ix_(reps, reps)] if self.weighted else None
        bwr = self.bwtot[reps]
        kept = np.flatnonzero(self.w > 0)
        n_used = kept.size
        if n_used == 0:
            raise FitError("every row was rejected")
        # noise level for the rank tolerance: residuals of the last rejection round when it
        # settled (its fit was on exactly these rows), else of a preliminary solution
        # (quiet: said once below, among the fit's warnings that the report lists; logged
        # at WARNING it was printed on stderr above every report of the stored analysis)
        an0 = est.analyze(Gr, 0.0, quiet=True)
        last = getattr(self, "_last_pred", None)
        if last is not None and last[0].size == self.has.sum() and \
                np.array_equal(last[2], self.w > 0):
            pred_k = last[1][np.searchsorted(last[0], kept)]
        else:
            full0 = np.zeros(d.p)
            full0[reps] = est.row_space_solver(an0, Gwr).solve(bwr)
            pred_k = d.predict(full0, kept)
        wk = self.w[kept]
        rk = np.sqrt(wk) * (self.y[kept] - pred_k)
        s_rob = robust.MAD_TO_SIGMA * float(np.median(np.abs(rk - np.median(rk))))
        ynorm = float(np.sqrt(np.sum(wk * self.y[kept] ** 2)))
        noise_ratio = s_rob / ynorm if ynorm > 0 else 0.0
        an = est.analyze(Gr, noise_ratio, eig=an0.eig, quiet=True)
        if an0.null_space_uncertainty > est.MAX_NULL_SPACE_UNCERTAINTY:
            self._warn(est.ill_conditioned_note(an0.null_space_uncertainty))
        if an.rank < an0.rank:
            log.info("noise-level tolerance dropped %d weak direction(s)", an0.rank - an.rank)
            self._warn(f"{an0.rank - an.rank} combination(s) of block counts vary too little "
                       "across the inputs for their costs to be estimated (the standard "
                       "error would be above the cost itself): taken as unknown; inputs that "
                       "vary those counts more would determine them")
        self.an = an
        # the rank and the row space are the unweighted matrix's; the estimates solve the
        # weighted problem on that row space
        self.sol = est.row_space_solver(an, Gwr)
        if self.sol.clamped:
            self._warn(f"{self.sol.clamped} direction(s) are numerically lost under the "
                       "relative row weights (their rows all carry tiny weights); their "
                       "estimates are regularized: try weights='none'")
        theta = self.sol.solve(bwr)                # reduced, unscaled
        theta_full = np.zeros(d.p)
        theta_full[reps] = theta
        rank = an.rank
        df = n_used - rank
        if df < 1:
            t95 = math.inf
            self._warn("no residual degrees of freedom (as many unknowns as rows): no "
                       "intervals")
        else:
            t95 = float(stats.t.ppf(0.975, df))

        # costs held to physical values (wcetfit.fit.physical): estimate, folds, covariance
        phys = None
        if self._physical_applies():
            from wcetfit.fit.physical import physical_fit
            phys = physical_fit(self, kept, theta)
            theta = phys.theta
            theta_full[reps] = theta

        # final pass: residuals, leverages, meat, fold predictions
        if phys is not None:
            fold_theta = phys.fold_theta
        else:
            fold_theta = fold_solutions(self) if self.F > 1 else None
        cov_s, method, resid_all = sandwich(self, theta_full, kept, n_used, rank,
                                                  fold_theta)
        D = self.sol.scale
        cov_theta = cov_s * D[:, None] * D[None, :]  # reduced, unscaled
        if phys is not None and phys.covariance is not None:
            # the constraints overruled the data: the sandwich describes the unconstrained
            # estimator, the physical one has the bootstrap's covariance
            cov_theta = phys.covariance
            method = f"bootstrap of the physical fit ({phys.replicates} replicates)"
        elif o.intervals in ("bootstrap", "both"):
            cov_boot = bootstrap(self, kept)
            if o.intervals == "bootstrap":
                cov_theta, method = cov_boot, "bootstrap"
            else:
                # the wider of the two, per quantity: keep both and take the max later
                self._cov_alt = cov_boot
                method = f"max({method}, bootstrap)"
        self.cov_theta = cov_theta
        self.t95 = t95

        nonneg_active = 0
        if o.nonneg and phys is None:
            theta, nonneg_active = nonneg_solution(self, an, theta)
            theta_full[reps] = theta
        self.theta = theta
        self.physical = phys

        result = self._assemble(an, theta, cov_theta, t95, method, kept, resid_all,
                                fold_theta, nonneg_active, noise_ratio)
        return result

    def _physical_applies(self) -> bool:
        """Costs held to physical values (FitOptions.costs), for per-input rows and up to
        physical.MAX_UNKNOWNS reduced unknowns (said when skipped for size)."""
        from wcetfit.fit.physical import MAX_UNKNOWNS

        if self.opts.costs != "physical" or self.opts.rows != "input":
            return False
        if self.reps.size > MAX_UNKNOWNS:
            # said among the fit's warnings with the costs it left below zero (_finish),
            # and on the report's fit line: zstd's compressor, 718 unknowns, had costs and
            # callee bounds below zero with no word of it where the fit was described
            self.unconstrained_for_size = int(self.reps.size)
            return False
        return True

    def _ns(self, ticks: float | None) -> float | None:
        if ticks is None or self.tsc_hz is None or not math.isfinite(ticks):
            return None
        return ticks * 1e9 / self.tsc_hz

    def _assemble(self, an: est.Analysis, theta: np.ndarray, cov_theta: np.ndarray,
                  t95: float, method: str, kept: np.ndarray, resid_all: np.ndarray,
                  fold_theta: np.ndarray | None, nonneg_active: int,
                  noise_ratio: float) -> FitResult:
        d = self.design
        pb = d.pb
        n_cls = self.n_cls
        pr = self.reps.size
        basis = structural_space(self)
        G = self.Gtot

        solution, overhead_solution, covariance, row_space, executed = particular_solution(
            self, an, theta, cov_theta, move_null=self.physical is None)

        # executions per block over the rows used
        execs = np.zeros(self.nb, dtype=np.int64)
        colsum = G[:pb, pb:].sum(axis=1)
        has_col = self.block_col >= 0
        execs[has_col] = np.round(colsum[self.block_col[has_col]]).astype(np.int64)

        group_objs, block_group = build_groups(self, an, executed, basis)

        blocks: list[BlockFit] = []
        for k, a in enumerate(self.addrs):
            sol = None if np.isnan(solution[k]) else float(solution[k])
            cost = ci = None
            estim = False
            if executed[k]:
                j = red_of_block(self, k)
                if an.estimable[j] and self.classes[j].size == 1:
                    estim = True
                    e = np.zeros(pr)
                    e[j] = 1.0
                    cost = float(theta[j])
                    ci = half_width(t95, quantity_variance(self, e))
            blocks.append(BlockFit(a, estim, cost, ci, None if estim else block_group.get(a),
                                   sol, int(execs[k]), self._ns(cost), self._ns(ci),
                                   self._ns(sol)))

        overhead = overhead_quantities(self, an, group_objs)
        overhead_ticks = {self.configs[c]: (None if np.isnan(overhead_solution[c])
                                            else float(overhead_solution[c]))
                          for c in range(self.n_cfg)}

        # residuals of the rows used
        rk = resid_all[kept]
        yk = self.y[kept]
        mad_s = robust.MAD_TO_SIGMA * float(np.median(np.abs(rk - np.median(rk))))
        residuals = {
            "rows": float(kept.size),
            "rms_ticks": float(np.sqrt(np.mean(rk ** 2))),
            "mad_sigma_ticks": mad_s,
            "max_abs_ticks": float(np.max(np.abs(rk))),
            "rel_rms": float(np.sqrt(np.mean(rk ** 2)) / max(float(np.mean(np.abs(yk))), 1e-300)),
            "noise_ratio": noise_ratio,
            "t95": t95,
            "df": float(kept.size - an.rank),
            "iterations": float(self.iterations),
        }
        if self.tsc_hz is not None:
            residuals["rms_ns"] = self._ns(residuals["rms_ticks"])
            residuals["mad_sigma_ns"] = self._ns(residuals["mad_sigma_ticks"])

        validation = heldout_validation(self, resid_all) if fold_theta is not None else None

        warn_clustered_rejections(self)
        rejected = []
        for i in sorted(self.rej_reason):
            rejected.append(Rejection(i, self.rej_reason[i]))
        if self.opts.rows == "call":
            cand, z, cut = getattr(self, "_call_z", (np.zeros(0, int), None, 0.0))
            rows_, cols_ = np.nonzero(self.call_rejected)
            for i, k in zip(rows_, cols_):
                pos = np.searchsorted(cand, i)
                zi = abs(float(z[pos, k])) if z is not None else float("nan")
                rejected.append(Rejection(int(i), f"call residual: |z| = {zi:.1f} > {cut:.1f}",
                                          int(k)))
            for i in np.flatnonzero(self.rejected_rows):
                if int(i) not in self.rej_reason:
                    rejected.append(Rejection(int(i), "every call of the input was rejected"))

        max_rank = None
        if basis is not None:
            max_rank = basis["max_rank"]
            if an.rank > max_rank:
                self.warnings.append(f"rank {an.rank} exceeds the structural bound {max_rank}: "
                                     "the structural basis does not match these counts")

        # figures no machine can produce: warned about with a remedy, never clamped
        fit_warnings = plausibility(self, blocks, group_objs, overhead, resid_all, kept)
        if self.physical is not None and self.physical.note:
            from wcetfit.fit.physical import held_warning
            fit_warnings.append(held_warning(self.physical.note))
        size = getattr(self, "unconstrained_for_size", None)
        if size is not None:
            from wcetfit.fit.physical import unconstrained_warning
            fit_warnings.append(unconstrained_warning(size, sum(
                1 for b in blocks if b.cost_ticks is not None and b.cost_ticks < 0)))
        for text in summaries(fit_warnings):
            self._warn(text)

        return FitResult(
            blocks=tuple(blocks), groups=group_objs, overhead=overhead,
            overhead_ticks=overhead_ticks, rank=an.rank, max_rank=max_rank, unknowns=pr,
            rows_total=self.n if self.opts.rows == "input" else self.repeats_total,
            rows_used=int(kept.size) if self.opts.rows == "input" else int(self.w.sum()),
            rejected=tuple(rejected), repeats_total=self.repeats_total,
            repeats_discarded=self.repeats_discarded, residuals=residuals,
            validation=validation, interval_method=method, row_mode=self.opts.rows,
            statistic=self.opts.statistic if self.opts.rows == "input" else "call",
            quantum_ticks=self.quantum, tsc_hz=self.tsc_hz,
            sigma_tol_rel=an.sigma_tol / an.sigma_max if an.sigma_max else 0.0,
            nonneg_active=nonneg_active, warnings=tuple(self.warnings), configs=self.configs,
            solution=solution, overhead_solution=overhead_solution, covariance=covariance,
            row_space=row_space, weights=self.opts.weights,
            weight_floor_ticks=self.weight_floor, weight_iterations=self.weight_iterations,
            machine_speed=self.speed.to_dict() if self.speed is not None else None,
            fit_warnings=tuple(fit_warnings),
            overhead_floor_ticks=float(self.opts.overhead_floor_ticks),
            costs="linear" if self.physical is None else "physical")
