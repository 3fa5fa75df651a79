"""The fit's options and results as plain data: :class:`FitOptions` in, :class:`FitResult`
out (estimable costs, groups, overheads, the particular solution used to predict,
validation figures), with the ``wcetfit.fit/1`` JSON form of one function's fit.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from wcetfit.errors import FitError
from wcetfit.fit import robust
from wcetfit.model import hexaddr

log = logging.getLogger(__name__)

SCHEMA_FIT = "wcetfit.fit/1"

KIND_STRUCTURAL = "structural"
KIND_OBSERVED = "observed"
KIND_OVERHEAD = "overhead"
KIND_UNEXECUTED = "unexecuted"
KIND_UNCLASSIFIED = "unclassified"


@dataclass(frozen=True)
class FitOptions:
    rows: str = "input"                 # "input": one row per input; "call": every timed call
    statistic: str = "clipped_mean"     # per-input statistic (rows="input"): see robust.py
    trim: float = 0.2                   # for statistic="trimmed_mean"
    quantum_ticks: float | None = None  # TSC step; None = detect (gcd of the timings)
    robust: str = "reject"              # "reject": iterated residual rejection; "none"
    max_iterations: int = 10
    max_reject_fraction: float = 0.2    # never reject more rows than this (warn instead)
    costs: str = "physical"             # "physical": blocks ≥ 0, ε ≥ overhead_floor_ticks,
                                        # bootstrap intervals (wcetfit.fit.physical);
                                        # "linear": unconstrained least squares
    nonneg: bool = False                # costs="linear": clamp estimable quantities at 0
    intervals: str = "sandwich"         # "sandwich" | "bootstrap" | "both"
    bootstrap: int = 200                # replicates for the bootstrap
    folds: int = 5                      # k-fold validation over inputs (0/1 = none)
    seed: int = 0
    worst: int = 10                     # worst-predicted inputs listed
    chunk_rows: int | None = None       # rows per pass chunk (None: ~32 MB chunks)
    hc3_budget: float = 5e9             # flops allowed for exact leverages (HC3), else HC1
    max_denominator: int = 12           # coefficients p/q with q ≤ this are shown as such
    blas_threads: int | None = 1        # BLAS threads during the fit (None: leave as set);
                                        # see wcetfit/blasthreads.py for the measurement
    weights: str = "relative"           # "relative": IRLS, row weight 1/max(pred, floor)²;
                                        # "none": ordinary least squares (module docstring)
    weight_floor_quanta: float = 5.0    # the floor, in TSC steps (1 tick without a step)
    overhead_floor_ticks: float = 0.0   # physical floor of ε (e.g. the calibrated empty timed
                                        # region): an overhead or a predicted call below it
                                        # is a warning (FitWarning), never clamped

    def __post_init__(self) -> None:
        if self.rows not in ("input", "call"):
            raise FitError(f"rows must be 'input' or 'call', not {self.rows!r}")
        if self.statistic not in robust.STATISTICS:
            raise FitError(f"statistic must be one of {robust.STATISTICS}, not {self.statistic!r}")
        if self.robust not in ("reject", "none"):
            raise FitError(f"robust must be 'reject' or 'none', not {self.robust!r}")
        if self.costs not in ("physical", "linear"):
            raise FitError(f"costs must be 'physical' or 'linear', not {self.costs!r}")
        if self.intervals not in ("sandwich", "bootstrap", "both"):
            raise FitError(f"intervals must be 'sandwich', 'bootstrap' or 'both', "
                           f"not {self.intervals!r}")
        if self.weights not in ("relative", "none"):
            raise FitError(f"weights must be 'relative' or 'none', not {self.weights!r}")
        if not (self.weight_floor_quanta > 0 and math.isfinite(self.weight_floor_quanta)):
            raise FitError(f"weight_floor_quanta must be positive, not "
                           f"{self.weight_floor_quanta!r}")


@dataclass(frozen=True)
class BlockFit:
    address: int
    estimable: bool                  # cost of this block alone is determined by the data
    cost_ticks: float | None         # only when estimable
    ci95_ticks: float | None         # half-width of the 95 % interval (value ± ci95)
    group: int | None                # id of its group, None when estimable alone
    solution_ticks: float | None     # the particular solution; None when never executed
    executions: int                  # Σ counts over the rows used
    cost_ns: float | None = None
    ci95_ns: float | None = None
    solution_ns: float | None = None


@dataclass(frozen=True)
class Combination:
    """An estimable linear combination: Σ coefficient·T_block + Σ coefficient·ε_config."""

    coefficients: tuple[tuple[int, float], ...]          # (block address, coefficient)
    overhead_coefficients: tuple[tuple[int, float], ...]  # (config id, coefficient)
    value_ticks: float
    ci95_ticks: float
    text: str
    value_ns: float | None = None
    ci95_ns: float | None = None

    def truth(self, costs: Mapping[int, float], overheads: Mapping[int, float]) -> float:
        """Evaluate the combination on given costs (e.g. a simulation's true ones)."""
        return (sum(c * costs[a] for a, c in self.coefficients)
                + sum(c * overheads[k] for k, c in self.overhead_coefficients))


@dataclass(frozen=True)
class Group:
    id: int
    blocks: tuple[int, ...]
    kind: str                        # structural | observed | overhead | unexecuted | unclassified
    combinations: tuple[Combination, ...]
    configs: tuple[int, ...] = ()    # configurations whose ε belongs to this group
    relations: tuple[str, ...] = ()  # count relations the inputs show and the CFG does not force
    advice: str | None = None
    observed_deficiency: int = 0     # dimensions the inputs failed to separate


@dataclass(frozen=True)
class Overhead:
    """The estimable quantity that contains ε of one configuration (ε + always-once blocks)."""

    config: int
    value_ticks: float | None
    ci95_ticks: float | None
    blocks: tuple[tuple[int, float], ...]   # blocks confounded with ε, with coefficients
    text: str
    value_ns: float | None = None
    ci95_ns: float | None = None


@dataclass(frozen=True)
class Rejection:
    input: int
    reason: str
    call: int | None = None          # rows="call": the repeat index


@dataclass(frozen=True)
class WorstInput:
    input: int
    measured_ticks: float
    predicted_ticks: float
    rel_error: float
    rejected: bool


@dataclass(frozen=True)
class Validation:
    """k-fold cross-validation over inputs (see ``_Fitter._validation``)."""

    folds: int
    heldout_inputs: int
    heldout_calls: int               # timed calls compared (interrupted ones excluded)
    median_rel_error: float          # per call: |predicted − measured| / measured
    p95_rel_error: float
    r2: float                        # per input (robust statistic vs prediction)
    r2_calls: float                  # per call
    worst: tuple[WorstInput, ...]
    outside_space: int               # held-out inputs outside their training row space
                                     # (-1: not computed, more than 400 unknowns)
    discarded_calls: int = 0         # calls the clipped mean treats as interrupted
    median_rel_error_inputs: float = float("nan")   # per input statistic
    p95_rel_error_inputs: float = float("nan")
    # per call again, over the inputs the fit kept (not rejected): how well the model
    # predicts the rows it was fitted on kinds of, apart from the rejected ones
    median_rel_error_kept: float = float("nan")
    p95_rel_error_kept: float = float("nan")
    # of outside_space, the inputs outside only in directions the training inputs span too
    # weakly for the timing noise (estimated as unknown; -1: not computed)
    outside_space_weak: int = 0


# Codes of FitWarning (wcetfit.fit.checks).
WARN_NEGATIVE_COST = "negative_cost"          # an estimable cost (sum) wholly below zero
WARN_OVERHEAD = "overhead_below_floor"        # ε (+ once-per-call blocks) below its floor
WARN_NEGATIVE_PREDICTION = "negative_prediction"   # a call predicted below the floor
WARN_HELD = "held_to_physical"                # the unconstrained fit broke a physical limit
WARN_UNCONSTRAINED = "unconstrained_for_size"  # too many unknowns for the physical fit


@dataclass(frozen=True)
class FitWarning:
    """A physically implausible figure of the fit, with what it means and what to do.

    ``blocks``/``config`` name the quantity (a block, a sum of blocks, the overhead of a
    configuration), ``estimate_ticks`` ± ``ci95_ticks`` its value; ``inputs`` the inputs
    concerned (predictions)."""

    code: str
    message: str
    remedy: str
    blocks: tuple[int, ...] = ()
    config: int | None = None
    estimate_ticks: float | None = None
    ci95_ticks: float | None = None
    inputs: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {"code": self.code, "message": self.message, "remedy": self.remedy,
                "blocks": [hexaddr(a) for a in self.blocks], "config": self.config,
                "estimate_ticks": num(self.estimate_ticks), "ci95_ticks": num(self.ci95_ticks),
                "inputs": list(self.inputs)}


@dataclass(frozen=True)
class FitResult:
    blocks: tuple[BlockFit, ...]
    groups: tuple[Group, ...]
    overhead: tuple[Overhead, ...]
    overhead_ticks: Mapping[int, float]     # ε of the particular solution, per config id
    rank: int
    max_rank: int | None
    unknowns: int                           # distinct columns (after merging) + configs
    rows_total: int
    rows_used: int
    rejected: tuple[Rejection, ...]
    repeats_total: int
    repeats_discarded: int                  # clipped inside inputs (rows="input")
    residuals: Mapping[str, float]
    validation: Validation | None
    interval_method: str
    row_mode: str
    statistic: str
    quantum_ticks: float
    tsc_hz: float | None
    sigma_tol_rel: float
    nonneg_active: int
    warnings: tuple[str, ...]
    configs: tuple[int, ...]
    solution: np.ndarray = field(repr=False, compare=False)   # [n_blocks], NaN = never run
    overhead_solution: np.ndarray = field(repr=False, compare=False)   # [n_configs]
    covariance: np.ndarray = field(repr=False, compare=False)  # of (solution, overhead)
    row_space: np.ndarray = field(repr=False, compare=False)   # orthonormal [nb+ncfg, rank]
    weights: str = "none"                   # row weighting of the estimates (FitOptions)
    weight_floor_ticks: float | None = None  # "relative": weights 1/max(pred, this)²
    weight_iterations: int = 0              # reweighting rounds that changed weights
    # The machine's speed during the timing run (wcetfit.timing.speed.SpeedProfile.to_dict()), when
    # the fit divided it out: costs and predictions are then at its reference speed.
    machine_speed: Mapping[str, Any] | None = None
    # physically implausible figures, structured (their one-line summaries are also in
    # ``warnings``): see wcetfit.fit.checks
    fit_warnings: tuple[FitWarning, ...] = ()
    overhead_floor_ticks: float = 0.0       # the floor the checks used (FitOptions)
    # "physical": costs fitted ≥ 0 and ε ≥ the floor (wcetfit.fit.physical); "linear":
    # unconstrained (asked for, or beyond the physical fit's size limit)
    costs: str = "linear"
    # per-activation fits whose costs replaced the whole-call ones for the columns they
    # cover (wcetfit.fit.activation_root.ActivationAnalysis), None without activation rows
    activations: Any = field(default=None, repr=False, compare=False)

    # -- use ------------------------------------------------------------------------------
    def _aug(self, counts: np.ndarray, config_id: int | np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(counts, dtype=np.float64))
        if x.shape[1] != self.solution.size:
            raise FitError(f"count vectors have {x.shape[1]} blocks, the fit {self.solution.size}")
        cfg = np.broadcast_to(np.asarray(config_id), (x.shape[0],))
        onehot = np.zeros((x.shape[0], len(self.configs)))
        for r, c in enumerate(cfg):
            if int(c) not in self.configs:
                raise FitError(f"unknown probe configuration {int(c)}; the fit has {self.configs}")
            onehot[r, self.configs.index(int(c))] = 1.0
        return np.hstack([x, onehot])

    def predict(self, counts: np.ndarray, config_id: int | np.ndarray = 0, *,
                unknown: str = "nan") -> np.ndarray | float:
        """Predicted ticks of calls with these block counts: Σ count·solution + overhead.

        Rows that execute a block no input executed get NaN (``unknown="zero"``: cost 0)."""
        single = np.asarray(counts).ndim == 1
        x = self._aug(counts, config_id)
        sol = np.concatenate([self.solution, self.overhead_solution])
        unk = np.isnan(sol)
        pred = x[:, ~unk] @ sol[~unk]
        if unknown == "nan":
            pred = np.where((x[:, unk] != 0).any(axis=1), np.nan, pred)
        elif unknown != "zero":
            raise FitError(f"unknown must be 'nan' or 'zero', not {unknown!r}")
        low = np.isfinite(pred) & (pred < 0.0)
        if low.any():
            # clamped nowhere: a negative time is a defect of the fit to be seen
            outside = ~np.asarray(self.predictable(x[:, :self.solution.size],
                                                   np.asarray(config_id)), dtype=bool)
            log.warning("%d call(s) predicted below zero ticks (min %.0f)%s", int(low.sum()),
                        float(pred[low].min()),
                        ": their counts lie outside the space the inputs exercised, so the "
                        "prediction rests on the particular solution"
                        if np.all(outside[low]) else
                        ": see the fit's warnings (overhead and negative costs)")
        return float(pred[0]) if single else pred

    def predict_ci95(self, counts: np.ndarray, config_id: int | np.ndarray = 0
                     ) -> np.ndarray | float:
        """Half-width of the 95 % interval of :meth:`predict` (meaningful where
        :meth:`predictable`)."""
        single = np.asarray(counts).ndim == 1
        x = self._aug(counts, config_id)
        x = np.where(np.isnan(np.concatenate([self.solution, self.overhead_solution])), 0.0, x)
        var = np.einsum("ij,jk,ik->i", x, self.covariance, x)
        half = self._t95 * np.sqrt(np.clip(var, 0.0, None))
        return float(half[0]) if single else half

    def predictable(self, counts: np.ndarray, config_id: int | np.ndarray = 0,
                    tol: float = 1e-6) -> np.ndarray | bool:
        """Whether each count vector lies in the space the inputs exercised, i.e. whether
        its prediction is the same for every solution of the system."""
        single = np.asarray(counts).ndim == 1
        x = self._aug(counts, config_id)
        proj = (x @ self.row_space) @ self.row_space.T
        res = np.linalg.norm(x - proj, axis=1) <= tol * np.maximum(np.linalg.norm(x, axis=1), 1)
        return bool(res[0]) if single else res

    @property
    def _t95(self) -> float:
        return float(self.residuals.get("t95", 1.96))

    @property
    def covariance_labels(self) -> tuple[int | tuple[str, int], ...]:
        """Index of :attr:`covariance`: the block addresses, then ("overhead", config)."""
        return tuple(b.address for b in self.blocks) + tuple(("overhead", c)
                                                               for c in self.configs)

    def block(self, address: int) -> BlockFit:
        for b in self.blocks:
            if b.address == address:
                return b
        raise KeyError(hexaddr(address))

    def group(self, gid: int) -> Group:
        return self.groups[gid]

    def estimable_quantities(self) -> tuple[Combination, ...]:
        """Every estimable quantity reported: blocks estimable alone, then every group's
        combinations (the overhead quantities are among the latter)."""
        out: list[Combination] = []
        for b in self.blocks:
            if b.estimable and b.cost_ticks is not None:
                out.append(Combination(((b.address, 1.0),), (), b.cost_ticks,
                                       b.ci95_ticks if b.ci95_ticks is not None else math.inf,
                                       f"{hexaddr(b.address)}"))
        for g in self.groups:
            out.extend(g.combinations)
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        """The per-function fields of ``wcetfit.fit/1`` (the caller adds name, address)."""
        ns = self.tsc_hz is not None

        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        def comb(c: Combination) -> dict[str, Any]:
            d: dict[str, Any] = {
                "coefficients": {hexaddr(a): v for a, v in c.coefficients},
                "overhead_coefficients": {str(k): v for k, v in c.overhead_coefficients},
                "value_ticks": num(c.value_ticks), "ci95_ticks": num(c.ci95_ticks),
                "text": c.text}
            if ns:
                d["value_ns"], d["ci95_ns"] = num(c.value_ns), num(c.ci95_ns)
            return d

        blocks = []
        for b in self.blocks:
            d = {"address": hexaddr(b.address), "estimable": b.estimable,
                 "cost_ticks": num(b.cost_ticks), "ci95_ticks": num(b.ci95_ticks),
                 "group": b.group, "solution_ticks": num(b.solution_ticks),
                 "executions": b.executions}
            if ns:
                d.update(cost_ns=num(b.cost_ns), ci95_ns=num(b.ci95_ns),
                         solution_ns=num(b.solution_ns))
            blocks.append(d)
        groups = [{"id": g.id, "blocks": [hexaddr(a) for a in g.blocks], "kind": g.kind,
                   "configs": list(g.configs),
                   "combinations": [comb(c) for c in g.combinations],
                   "relations": list(g.relations), "advice": g.advice,
                   "observed_deficiency": g.observed_deficiency} for g in self.groups]
        overhead = []
        for o in self.overhead:
            d = {"config": o.config, "value_ticks": num(o.value_ticks),
                 "ci95_ticks": num(o.ci95_ticks),
                 "blocks": {hexaddr(a): v for a, v in o.blocks}, "text": o.text}
            if ns:
                d.update(value_ns=num(o.value_ns), ci95_ns=num(o.ci95_ns))
            overhead.append(d)
        v = self.validation
        validation = None if v is None else {
            "folds": v.folds, "heldout_inputs": v.heldout_inputs,
            "heldout_calls": v.heldout_calls,
            "median_rel_error": num(v.median_rel_error), "p95_rel_error": num(v.p95_rel_error),
            "r2": num(v.r2), "r2_calls": num(v.r2_calls), "outside_space": v.outside_space,
            "outside_space_weak": v.outside_space_weak,
            "discarded_calls": v.discarded_calls,
            "median_rel_error_inputs": num(v.median_rel_error_inputs),
            "p95_rel_error_inputs": num(v.p95_rel_error_inputs),
            "median_rel_error_kept": num(v.median_rel_error_kept),
            "p95_rel_error_kept": num(v.p95_rel_error_kept),
            "worst": [{"input": w.input, "measured_ticks": num(w.measured_ticks),
                       "predicted_ticks": num(w.predicted_ticks),
                       "rel_error": num(w.rel_error), "rejected": w.rejected}
                      for w in v.worst]}
        reasons: dict[str, int] = {}
        for r in self.rejected:
            key = r.reason.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        return {
            "blocks": blocks,
            "groups": groups,
            "overhead_ticks": {str(k): num(v) for k, v in self.overhead_ticks.items()},
            **({"overhead_ns": {str(k): num(None if v is None else v * 1e9 / self.tsc_hz)
                                for k, v in self.overhead_ticks.items()}} if ns else {}),
            "overhead": overhead,
            "validation": validation,
            "rank": self.rank, "max_rank": self.max_rank, "unknowns": self.unknowns,
            "rows": {"mode": self.row_mode, "statistic": self.statistic,
                     "total": self.rows_total, "used": self.rows_used,
                     "rejected": len(self.rejected), "rejected_by_reason": reasons,
                     "repeats_total": self.repeats_total,
                     "repeats_discarded": self.repeats_discarded,
                     "weights": self.weights,
                     "weight_floor_ticks": num(self.weight_floor_ticks),
                     "weight_iterations": self.weight_iterations},
            "residuals": {k: num(v) for k, v in self.residuals.items()},
            "interval_method": self.interval_method,
            "quantum_ticks": self.quantum_ticks,
            "tsc_hz": self.tsc_hz,
            **({"machine_speed": dict(self.machine_speed)} if self.machine_speed else {}),
            "nonneg_active": self.nonneg_active,
            "costs": self.costs,
            "solution_note": ("minimum Σ solution² over blocks with ε free: always-once blocks "
                              "get 0 (their time is in overhead_ticks), identical blocks share "
                              "their sum; predict a call as Σ count·solution_ticks + "
                              "overhead_ticks[config]"),
            "overhead_note": ("ε and the blocks that run exactly once per call are confounded: "
                              "only their sum is estimable"),
            "warnings": list(self.warnings),
            "fit_warnings": [w.to_json() for w in self.fit_warnings],
            **({"activations": self.activations.to_json()} if self.activations is not None
               else {}),
        }
