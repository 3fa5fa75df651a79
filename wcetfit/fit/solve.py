"""Per-block costs from whole-call timings: the overdetermined system of Moreno &
Fischmeister (eq. 9–10, with the overhead ε of eq. 7), solved honestly.

Model.  One timed call of input i under probe configuration c reads

    t_i = Σ_k N_ik · T_k + ε_c + noise

with N the block counts of that input (from the count run), T_k the cost of block k and
ε_c the fixed overhead of configuration c's timing probes.  The design matrix is
X = [N | C] with C the configuration indicators.

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

Estimability (:mod:`wcetfit.fit.estimability`).  Identical columns merge first (Moreno's
"BB0 et al."); flow conservation makes the rest rank-deficient.  Every reported figure is
an estimable quantity with its interval; blocks that are not estimable alone are shown in
groups with the combinations that are.  Groups are "structural" (no inputs can separate
them: the structural count space says so), "observed" (the inputs did not; advice says how
to vary them), "overhead" (the group holding ε: ε and the always-once blocks are
confounded and reported together), "unexecuted" (no input ran the block) or
"unclassified" (no structural basis given).

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

Weights (``weights="relative"``, the default).  The figures that judge the fit are
relative errors per call, and on real timings the model error grows with the call
(data-dependent costs: branch prediction, caches): unweighted, the long calls dominate the
sum of squares and the short calls come out tens of percent off.  So rows are weighted
v = 1/max(pred, f)² with pred the fitted value — iteratively reweighted (IRLS: the first
round is OLS, then weights from the fit; a weight is refreshed when it moves by more than
10 %), in the same loop as the outlier rejection.  Weights from the fitted values, never
from the measured ones: a row measured high by chance would get less weight and the
estimate would be pulled low (in a test, measured-value weights land 2e-3 off the
converged IRLS, fitted-value weights 1e-4).  The floor f = ``weight_floor_quanta`` TSC
steps (default 5 × 26 = 130 ticks; 5 ticks without a visible step) stops the shortest
calls, where the quantum dominates, from taking all the weight.  Measured on the nine
samples: the residual scale of a row follows s² = a² + (ρ·pred)² with a ≈ 4–8 ticks
(q/(2√R) = 4.1 for R = 10 repeats, plus jitter) and ρ ≈ 1–3 % on the well-modelled
samples (crc, fir, chain, calls, adpcm, isort), 11 % on matmul and statemachine: the
absolute noise overtakes the relative misfit below a/ρ ≈ 2–30 q; and the held-out figures
are flat in f from 1 to 20 q (within 0.3 points), worse at 50 q (adpcm p95 45 % against
42 %).  5 q lies inside both.  Held-out median / p95 relative error per call, unweighted
→ weighted, same stored timings (two timing runs, the second in parentheses):
adpcm 5.5/52 → 5.4/42 % (19.9/141 → 16.9/58), isort 10.7/45 → 7.3/29 % (18.5/101 →
9.7/38), statemachine 21.8/320 → 13.4/57 % (18.5/271 → 10.2/58), matmul 13.2/31.5 →
12.5/26.8 % (5.4/29.4 → 5.2/28.2), fir 1.24/18.0 → 1.10/17.2 % (6.6/27.3 → 6.3/25.7),
calls 2.12/20.7 → 2.10/20.7 % (3.3/14.7 → 3.2/13.5); crc and chain move by under 0.05
points (1.1/2.5 and 0.7/1.8 %); bsearch is unchanged (every call is under the floor: equal
weights).  The price is R² (an absolute measure, ruled by the long calls): statemachine
0.977 → 0.59 (0.982 → 0.57), isort 0.955 → 0.954 (0.93 → 0.90).  statemachine's slow
inputs (one in ten, ~3× slower per byte through a mispredicted jump table, with the same
kind of block counts) no longer pull the costs up: they are rejected as outliers instead
of the short calls (49 of its 66 rejections).  Where the goals (1 % / 5 %) are still
missed it is not the weighting: the held-out error of inputs with *identical* count
vectors, predicted by the other inputs' mean (no model could do better from counts), is
already 8.6/38 % on adpcm, 7.3/32 % on isort, 12.8/28.6 % on matmul, 5.3/33.7 % on
bsearch; the timed calls of one input spread by 1.9/12.5 % (adpcm: the first repeat runs
25 % slower than the rest, the branch predictor learning the input; bsearch: a call is 3–7
TSC steps long); and the shared machine has slow episodes (adpcm inputs 55–65 and
106–127 of the first run: every repeat 1.6–2.0× the prediction while their neighbours fit,
one input switching mid-repeats; the second run drifts between 0.72× and 1.17× over the
run) — measured per input, an episode shifts whole inputs.  The weighted fit on the inputs
it kept: adpcm 4.6/18.7 %, fir 0.98/3.6 %, calls 1.9/5.9 %, isort 5.7/22 %.  At 1,000
blocks × 100,000 rows the weighting costs one more full pass (about 2.7 s of 8.9 s).
``weights="none"`` is ordinary least squares as before.

Intervals.  95 % intervals (half-widths, ± value) from the heteroscedasticity-consistent
sandwich (XᵀΩX)⁺ XᵀΩ Σ ΩX (XᵀΩX)⁺ with the weights ω of the estimate — timing noise grows
with the call's length and the model error (data-dependent costs) is not homoscedastic
either, so the classic s²(X'X)⁻¹ would be too narrow for long calls and too wide for short
ones, and the sandwich stays right for any weights, including wrong ones.  HC3
(Σ = r²/(1−h)², h = ω·xᵀ(XᵀΩX)⁺x, leverage-corrected, good in small samples) when the
leverages are affordable, else HC1 (Σ = r²·n/(n−r)); with n ≫ p the two agree to O(p/n).
A row of leverage > 0.9 (one input alone determining a quantity) has a residual near 0
whatever its noise: its Σ is taken from the robust residual scale of the other rows at the
same predicted time instead (else such a quantity would show "± 0").  With
``intervals="bootstrap"`` the interval is from a bootstrap over inputs (seeded, the row
weights held fixed): t_{.975} × the replicates' standard deviation; ``"both"`` takes the
wider of the two per quantity.  Critical values from Student's t with n − rank degrees of
freedom (no interval at all without degrees of freedom).  Measured coverage of the truth
(bench/fit.py): 0.96 (sandwich, 200 small systems), 0.92 (bootstrap, 50), 0.95–0.96 at
1,000 blocks × 100,000 rows; with per-input errors of 3 % of the call 0.93 weighted and
unweighted (random CFGs, tests/test_fit.py), 0.93 weighted and 0.96 unweighted (bench),
and the weighted interval of ε + the once-per-call blocks (what the short calls
determine) is less than half as wide.

Validation.  k-fold over inputs (default 5, seeded): every input with a timing is
predicted by the model fitted without its fold — rejected inputs included, a mispredicted
input must show — and compared per timed call (interrupted calls, those the clipped mean
discards, excluded and counted) and per input; R² on the per-input statistic; the per-call
figures are given over the kept inputs too.  Outlier rejection and the row weights are
decided once, on all rows (a held-out row's own weight never enters its prediction).

Non-negativity (``nonneg=True``).  The blocks and merged classes estimable alone and the
reported combinations without negative coefficient are constrained to ≥ 0 (scipy
``lsq_linear`` in the coordinates of the estimable space); directions of the null space
are never touched.  Intervals stay the unconstrained ones.

Particular solution (``solution_ticks``).  Among all solutions, the one with the smallest
Σ_k T_k² over the blocks, ε left free.  So the always-once blocks get 0 and their time is
in ``overhead_ticks`` (which then equals the estimable ε + Σ always-once blocks), identical
blocks share their sum equally, and a call is predicted as Σ count·solution + overhead.
That prediction is the same for every solution whenever the count vector lies in the
space the inputs exercised (:meth:`FitResult.predictable`); beyond it (blocks never
executed, or combinations the inputs did not separate) it is an arbitrary choice.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.linalg as sla
from scipy import stats
from scipy.optimize import lsq_linear

from wcetfit.fit import estimability as est
from wcetfit.fit import robust
from wcetfit.errors import FitError
from wcetfit.model import hexaddr

log = logging.getLogger(__name__)

SCHEMA_FIT = "wcetfit.fit/1"

KIND_STRUCTURAL = "structural"
KIND_OBSERVED = "observed"
KIND_OVERHEAD = "overhead"
KIND_UNEXECUTED = "unexecuted"
KIND_UNCLASSIFIED = "unclassified"

_EXACT = 2.0 ** 53


# --- options and results ---------------------------------------------------------------------

@dataclass(frozen=True)
class FitOptions:
    rows: str = "input"                 # "input": one row per input; "call": every timed call
    statistic: str = "clipped_mean"     # per-input statistic (rows="input"): see robust.py
    trim: float = 0.2                   # for statistic="trimmed_mean"
    quantum_ticks: float | None = None  # TSC step; None = detect (gcd of the timings)
    robust: str = "reject"              # "reject": iterated residual rejection; "none"
    max_iterations: int = 10
    max_reject_fraction: float = 0.2    # never reject more rows than this (warn instead)
    nonneg: bool = False                # clamp estimable quantities at 0 (never the others)
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

    def __post_init__(self) -> None:
        if self.rows not in ("input", "call"):
            raise FitError(f"rows must be 'input' or 'call', not {self.rows!r}")
        if self.statistic not in robust.STATISTICS:
            raise FitError(f"statistic must be one of {robust.STATISTICS}, not {self.statistic!r}")
        if self.robust not in ("reject", "none"):
            raise FitError(f"robust must be 'reject' or 'none', not {self.robust!r}")
        if self.intervals not in ("sandwich", "bootstrap", "both"):
            raise FitError(f"intervals must be 'sandwich', 'bootstrap' or 'both', "
                           f"not {self.intervals!r}")
        if self.weights not in ("relative", "none"):
            raise FitError(f"weights must be 'relative' or 'none', not {self.weights!r}")
        if not (self.weight_floor_quanta > 0 and math.isfinite(self.weight_floor_quanta)):
            raise FitError(f"weight_floor_quanta must be positive, not "
                           f"{self.weight_floor_quanta!r}")


# Slowest sustained machine speed (wcetfit.timing.speed) above which the fit warns: on an idle
# core the running median moves by a few percent at most.
SLOW_MACHINE_WARN = 1.15


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
            "solution_note": ("minimum Σ solution² over blocks with ε free: always-once blocks "
                              "get 0 (their time is in overhead_ticks), identical blocks share "
                              "their sum; predict a call as Σ count·solution_ticks + "
                              "overhead_ticks[config]"),
            "overhead_note": ("ε and the blocks that run exactly once per call are confounded: "
                              "only their sum is estimable"),
            "warnings": list(self.warnings),
        }


# --- the design, in chunks -------------------------------------------------------------------

class _Design:
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


# --- the fit ---------------------------------------------------------------------------------

def fit_function(counts: np.ndarray, ticks: np.ndarray, block_addresses: Sequence[int], *,
                 structural_basis: np.ndarray | Mapping[int, np.ndarray] | None = None,
                 config_ids: np.ndarray | None = None,
                 tsc_hz: float | None = None,
                 speed: Any = None,
                 options: FitOptions = FitOptions()) -> FitResult:
    """Fit per-block costs to the timings; see the module docstring.

    ``counts`` int [n_inputs, n_blocks]; ``ticks`` [n_inputs, n_repeats] (NaN = missing);
    ``structural_basis`` [dim, n_blocks] spanning the CFG's count space (or a mapping
    config id → basis, spanning each configuration's space); ``config_ids`` int
    [n_inputs] (default all 0); ``speed``: a :class:`wcetfit.timing.speed.SpeedProfile` of the
    ticks, whose factors are divided out of every call before anything else (the costs
    are then at the profile's reference speed; the TSC step is detected on the raw
    ticks)."""
    from wcetfit.blasthreads import limited

    with limited(options.blas_threads):
        return _Fitter(counts, ticks, block_addresses, structural_basis, config_ids, tsc_hz,
                       options, speed).run()


class _Fitter:
    def __init__(self, counts, ticks, block_addresses, structural_basis, config_ids, tsc_hz,
                 opts: FitOptions, speed: Any = None) -> None:
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

    # -- rows ---------------------------------------------------------------------------------
    def _build_rows(self) -> None:
        o = self.opts
        t = self.ticks
        # the step is a property of the clock: detect it before any speed correction
        self.quantum = (robust.detect_quantum(self.raw_ticks) if o.quantum_ticks is None
                        else float(o.quantum_ticks))
        self.valid_calls = np.isfinite(t)
        self.repeats_total = int(self.valid_calls.sum())
        if o.rows == "input":
            summ = robust.summarize_repeats(t, o.statistic, quantum=self.quantum, trim=o.trim)
            self.y = summ.value
            self.has = np.isfinite(self.y)
            self.w = self.has.astype(np.float64)
            self.S = np.where(self.has, self.y, 0.0)
            self.repeats_discarded = int((self.valid_calls & ~summ.keep).sum())
            self.call_keep = summ.keep
        else:
            self.call_keep = self.valid_calls.copy()
            self.repeats_discarded = 0
            self._rows_from_calls()
            self.has = self.call_keep.any(axis=1)
        self.rej_reason: dict[int, str] = {}
        for i in np.flatnonzero(~np.isfinite(t).any(axis=1)):
            self.rej_reason[int(i)] = "no valid timing: every repeat is missing"

    def _rows_from_calls(self) -> None:
        k = self.call_keep
        self.w = k.sum(axis=1).astype(np.float64)
        self.S = np.where(k, self.ticks, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.y = np.where(self.w > 0, self.S / np.maximum(self.w, 1), np.nan)

    # -- columns -------------------------------------------------------------------------------
    def _activity(self) -> np.ndarray:
        """Design columns: blocks executed by at least one timed input, with the blocks of
        constant count (typically the always-once blocks, often many) merged into one
        column per constant before any pass over the data: identical columns stay
        identical on every subset of rows, and the Gram pass costs p², so the merge saves
        a good part of it.  Validates the counts on the way."""
        any_pos = np.zeros(self.nb, dtype=bool)
        nnz = np.zeros(self.nb, dtype=np.int64)
        cmin = np.full(self.nb, np.inf)
        cmax_col = np.full(self.nb, -np.inf)
        step = max(256, int(4_000_000 // max(self.nb, 1)))
        integer = np.issubdtype(self.counts.dtype, np.integer)
        for a in range(0, self.n, step):
            blk = self.counts[a:a + step]
            h = self.has[a:a + step]
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
        self.count_max = float(cmax_col[any_pos].max()) if any_pos.any() else 0.0
        executed = np.flatnonzero(any_pos)
        const = executed[cmin[executed] == cmax_col[executed]]
        self.extra: dict[int, list[int]] = {}
        drop: set[int] = set()
        by_value: dict[float, int] = {}
        for k in const:
            v = float(cmin[k])
            if v in by_value:
                drop.add(int(k))
                self.extra.setdefault(by_value[v], []).append(int(k))
            else:
                by_value[v] = int(k)
        active = np.array([k for k in executed if int(k) not in drop], dtype=np.int64)
        # extras keyed by design column
        pos = {int(k): i for i, k in enumerate(active)}
        self.extra = {pos[k]: v for k, v in self.extra.items()}
        self.block_col = np.full(self.nb, -1, dtype=np.int64)
        self.block_col[active] = np.arange(active.size)
        for j, mem in self.extra.items():
            self.block_col[mem] = j
        self.col_nnz = nnz[active]          # inputs executing each design column
        return active

    # -- main ---------------------------------------------------------------------------------
    def run(self) -> FitResult:
        o = self.opts
        self._build_rows()
        if not self.has.any():
            raise FitError("no input has a valid timing")
        if self.speed is not None and self.speed.followed and \
                self.speed.max_factor > SLOW_MACHINE_WARN:
            self._warn(f"the machine ran up to {self.speed.max_factor:.2f}× slower during parts "
                       f"of the timing run (another workload on the same core or a lower "
                       f"clock); the fit divided it out and the WCET includes it, but a later "
                       f"session may see other speeds: time on an idle machine, on a core of "
                       f"its own, for tighter and more repeatable figures")
        active = self._activity()
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
        self.design = _Design(self.counts, active, self.cfg, self.n_cfg, fold, F, o.chunk_rows)
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
        self._iterate()
        return self._finish()

    # reduced columns (identical columns merged) of the current normal matrix
    def _reduce(self, G: np.ndarray) -> None:
        pb = self.design.pb
        diag = np.diag(G)
        live_b = np.flatnonzero(diag[:pb] > 0)
        live_c = pb + np.flatnonzero(diag[pb:] > 0)
        sub = G[np.ix_(live_b, live_b)]
        # exact test on the integer Gram (see module docstring); candidates share diagonal
        # entry and column sum (= Σ over configs of G[config, j])
        colsum = G[np.ix_(live_b, np.arange(pb, self.design.p))].sum(axis=1)
        key: dict[tuple[float, float], list[int]] = {}
        for j in range(live_b.size):
            key.setdefault((float(sub[j, j]), float(colsum[j])), []).append(j)
        classes: list[np.ndarray] = []
        for members in key.values():
            rest = list(members)
            while rest:
                a = rest[0]
                tol = 0.0 if self.exact else 1e-12 * sub[a, a]
                same = [b for b in rest if sub[a, a] + sub[b, b] - 2.0 * sub[a, b] <= tol]
                classes.append(live_b[np.asarray(same)])
                rest = [b for b in rest if b not in same]
        classes.sort(key=lambda c: int(c[0]))
        self.classes = classes                        # indices into active columns
        self.live_c = live_c                          # design indices of live configs
        self.reps = np.concatenate([np.asarray([c[0] for c in classes], dtype=np.int64),
                                    live_c]).astype(np.int64)
        self.n_cls = len(classes)

    def _ridge_theta(self, G: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Least squares on the reduced columns, slightly regularized (for the rejection
        iterations and the folds; the final solution uses the exact pseudo-inverse)."""
        Gr = G[np.ix_(self.reps, self.reps)]
        br = b[self.reps]
        diag = np.diag(Gr)
        good = diag > 0
        theta = np.zeros(self.design.p)
        if not good.any():
            return theta
        d = np.zeros_like(diag)
        d[good] = 1.0 / np.sqrt(diag[good])
        gs = Gr * d[:, None] * d[None, :]
        gs[np.diag_indices_from(gs)] += 1e-9 + (~good)
        try:
            c = sla.cho_factor(gs, lower=True, check_finite=False)
            zs = sla.cho_solve(c, d * br, check_finite=False)
        except np.linalg.LinAlgError:
            zs = np.linalg.lstsq(gs, d * br, rcond=None)[0]
        theta[self.reps] = d * zs
        return theta

    # A row's weight is refreshed when the new one differs by more than this fraction:
    # weights within 10 % of the self-consistent ones cost nothing in efficiency (the
    # variance of a WLS estimate is flat at the optimum) and the intervals are right for
    # whatever weights were used, while every refresh costs a pass over the changed rows.
    WEIGHT_TOL = 0.1

    def _row_weights(self, pred: np.ndarray) -> np.ndarray:
        """Relative-error weights from fitted values: (floor / max(pred, floor))², in (0, 1].

        From the fit, never from the measured value: a row measured high by chance would
        get a smaller weight, one measured low a larger, and the estimate would be pulled
        low.  The fitted value carries almost none of the row's own noise."""
        f = float(self.weight_floor)
        top = float(np.max(np.abs(pred))) if pred.size else 0.0
        f = max(f, 1e-6 * top, 1e-300)     # bounded dynamic range of the weights
        p = np.where(np.isfinite(pred), pred, f)
        return (f / np.maximum(p, f)) ** 2

    def _iterate(self) -> None:
        """Outlier rejection and reweighting (IRLS), in one loop: each round fits on the
        current rows and weights, then rejects on the residuals and refreshes the weights
        from the fitted values; the first round is ordinary least squares."""
        o = self.opts
        cand = np.flatnonzero(self.has)
        self.rejected_rows = np.zeros(self.n, dtype=bool)
        self.call_rejected = np.zeros_like(self.ticks, dtype=bool)
        self.iterations = 0
        reject = o.robust == "reject"
        loops = max(1, o.max_iterations) if (reject or self.weighted) else 1
        seen: set[bytes] = set()
        settled = not (reject or self.weighted)
        for it in range(loops):
            self._reduce(self.G.sum(axis=0))
            theta = self._ridge_theta(self.Gw.sum(axis=0), self.bw.sum(axis=0))
            if not (reject or self.weighted):
                break
            self.iterations = it + 1
            pred = self.design.predict(theta, cand)
            self._last_pred = (cand, pred, self.w > 0)
            changed = np.zeros(0, dtype=np.int64)
            if reject:
                self._capped = False
                changed = self._reject_step(cand, pred)
                if changed.size:
                    state = (self._pending.tobytes() if o.rows == "input"
                             else self._pending_calls.tobytes())
                    if state in seen:
                        # a cycle between rejection sets: keep the current one and stop
                        self._warn("outlier rejection oscillates between sets of rows; "
                                   "stopped")
                        settled = True
                        break
                    seen.add(state)
            v_rows = np.zeros(0, dtype=np.int64)
            if self.weighted:
                v_new = np.ones(self.n)
                v_new[cand] = self._row_weights(pred)
                moved = np.abs(v_new[cand] / self.v[cand] - 1.0) > self.WEIGHT_TOL
                v_rows = cand[moved]
            if changed.size == 0 and v_rows.size == 0:
                settled = True
                break
            old_w, old_S, old_v = self.w.copy(), self.S.copy(), self.v.copy()
            if changed.size:
                # downdate/update the exact G and b for the rows whose weight or sum changed
                self._apply_rejection(changed)
                gw = np.zeros(self.n)
                bw = np.zeros(self.n)
                gw[changed] = self.w[changed] - old_w[changed]
                bw[changed] = self.S[changed] - old_S[changed]
                self.design.accumulate(self.G, self.b, gw, bw, changed)
            if self.weighted:
                if v_rows.size:
                    self.v[v_rows] = v_new[v_rows]
                    self.weight_iterations += 1
                self._update_weighted(np.union1d(changed, v_rows), old_w, old_S, old_v)
        if not settled:
            self.warnings.append(f"outlier rejection/reweighting did not settle in "
                                 f"{o.max_iterations} iterations")
        if getattr(self, "_capped", False):
            self._warn(f"more than {o.max_reject_fraction:.0%} of the rows look like outliers: "
                       "the model may not fit (data-dependent costs?); only the worst were "
                       "rejected")
        self._reduce(self.G.sum(axis=0))

    def _update_weighted(self, rows: np.ndarray, old_w: np.ndarray, old_S: np.ndarray,
                         old_v: np.ndarray) -> None:
        """Bring Gw, bw to the current w·v, S·v: a fresh pass when many rows changed (the
        first reweighting changes them all, by factors up to 10⁶: subtracting the old
        contributions would cancel), else the difference over the changed rows."""
        if rows.size == 0:
            return
        if rows.size > self.n // 4:
            self.Gw[:] = 0.0
            self.bw[:] = 0.0
            self.design.accumulate(self.Gw, self.bw, self.w * self.v, self.S * self.v,
                                   exact=False)
            return
        gw = np.zeros(self.n)
        bw = np.zeros(self.n)
        gw[rows] = self.w[rows] * self.v[rows] - old_w[rows] * old_v[rows]
        bw[rows] = self.S[rows] * self.v[rows] - old_S[rows] * old_v[rows]
        self.design.accumulate(self.Gw, self.bw, gw, bw, rows, exact=False)

    def _reject_step(self, cand: np.ndarray, pred: np.ndarray) -> np.ndarray:
        """Decide the rejected rows (or calls) from residuals; return inputs that changed.

        Every candidate is judged against the scale of the rows currently kept, so a row
        rejected earlier comes back when a better fit explains it."""
        o = self.opts
        if o.rows == "input":
            r = self.y[cand] - pred
            kept = ~self.rejected_rows[cand]
            # Per-row floor: the mean of R readings of a two-level quantized distribution
            # has a standard deviation up to q/(2·sqrt(R)) (levels q apart, probabilities
            # 1/2).  Without it the MAD of many inputs whose repeats all read the same
            # level collapses, and honest one-step deviations look like outliers (which
            # biased the fit by rejecting the upper level).
            nrep = np.maximum(self.call_keep[cand].sum(axis=1), 1)
            floor = np.maximum(1e-9 * float(np.sqrt(np.mean(self.y[cand] ** 2))),
                               0.5 * self.quantum / np.sqrt(nrep))
            scale = np.maximum(robust.local_scale(r[kept], pred[kept], 0.0, at=pred), floor)
            z = robust.modified_z(r, scale, float(np.median(r[kept])))
            cut = robust.rejection_threshold(cand.size)
            bad = np.abs(z) > cut
            limit = int(o.max_reject_fraction * cand.size)
            if bad.sum() > limit:
                order = np.argsort(-np.abs(z))
                bad = np.zeros_like(bad)
                bad[order[:limit]] = True
                self._capped = True
            new = np.zeros(self.n, dtype=bool)
            new[cand[bad]] = True
            changed = np.flatnonzero(new != self.rejected_rows)
            for pos in np.flatnonzero(bad):
                self.rej_reason[int(cand[pos])] = (
                    f"residual: {r[pos]:+.1f} ticks, |z| = {abs(z[pos]):.1f} > {cut:.1f}")
            for i in changed:
                if not new[i]:
                    self.rej_reason.pop(int(i), None)
            self._pending = new
            return changed
        # rows == "call": residuals of single calls
        T = self.ticks[cand]
        valid = self.valid_calls[cand]
        R = T - pred[:, None]
        kept = valid & ~self.call_rejected[cand]
        P = np.broadcast_to(pred[:, None], R.shape)
        floor = max(1e-9 * float(np.sqrt(np.nanmean(T ** 2))), 0.5 * self.quantum)
        scale = robust.local_scale(R[kept], P[kept], floor, at=P[valid])
        z = np.zeros_like(R)
        z[valid] = robust.modified_z(R[valid], scale, float(np.median(R[kept])))
        cut = robust.rejection_threshold(int(valid.sum()))
        bad = valid & (np.abs(z) > cut)
        limit = int(o.max_reject_fraction * valid.sum())
        if bad.sum() > limit:
            thr = np.sort(np.abs(z[valid]))[::-1][limit]
            bad = valid & (np.abs(z) > max(thr, cut))
            self._capped = True
        newc = self.call_rejected.copy()
        newc[cand] = bad
        changed = np.flatnonzero((newc != self.call_rejected).any(axis=1))
        self._pending_calls = newc
        self._call_z = (cand, z, cut)
        return changed

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            log.warning("%s", msg)
            self.warnings.append(msg)

    def _apply_rejection(self, changed: np.ndarray) -> None:
        if self.opts.rows == "input":
            self.rejected_rows = self._pending
            self.w[changed] = np.where(self.rejected_rows[changed], 0.0, 1.0)
            self.S[changed] = np.where(self.rejected_rows[changed], 0.0, self.y[changed])
        else:
            self.call_rejected = self._pending_calls
            self.call_keep = self.valid_calls & ~self.call_rejected
            self._rows_from_calls()
            self.rejected_rows = (self.w == 0) & self.has

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
        an0 = est.analyze(Gr, 0.0)
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
        an = est.analyze(Gr, noise_ratio, eig=an0.eig)
        if an.rank < an0.rank:
            log.info("noise-level tolerance dropped %d weak direction(s)", an0.rank - an.rank)
            self._warn(f"{an0.rank - an.rank} direction(s) of the count space are too weakly "
                       "represented in the inputs to estimate (standard error above the size "
                       "of the signal): treated as not estimable")
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

        # final pass: residuals, leverages, meat, fold predictions
        fold_theta = self._fold_solutions() if self.F > 1 else None
        cov_s, method, resid_all = self._sandwich(theta_full, kept, n_used, rank,
                                                  fold_theta)
        D = self.sol.scale
        cov_theta = cov_s * D[:, None] * D[None, :]  # reduced, unscaled
        if o.intervals in ("bootstrap", "both"):
            cov_boot = self._bootstrap(kept)
            if o.intervals == "bootstrap":
                cov_theta, method = cov_boot, "bootstrap"
            else:
                # the wider of the two, per quantity: keep both and take the max later
                self._cov_alt = cov_boot
                method = f"max({method}, bootstrap)"
        self.cov_theta = cov_theta
        self.t95 = t95

        nonneg_active = 0
        if o.nonneg:
            theta, nonneg_active = self._nonneg(an, theta)
            theta_full[reps] = theta
        self.theta = theta

        result = self._assemble(an, theta, cov_theta, t95, method, kept, resid_all,
                                fold_theta, nonneg_active, noise_ratio)
        return result

    def _fold_solutions(self) -> np.ndarray:
        """Each fold's training solution, with the same row weights as the full fit (the
        weights come from the full fit's values: a held-out row's own weight never enters
        its prediction, and its influence on the training rows' fitted values is that of
        one row among all)."""
        G, b = self.Gwtot, self.bwtot
        out = np.zeros((self.design.p, self.F))
        Vr = self.an.Vr
        D = self.an.scale
        for k in range(self.F):
            th = self._ridge_theta(G - self.Gw[k], b - self.bw[k])
            # keep the training solution inside the full fit's estimable space
            red = th[self.reps] / D
            red = Vr @ (Vr.T @ red)
            out[self.reps, k] = D * red
        return out

    # Rows whose leverage exceeds this carry (almost) no information on their own noise:
    # the residual of a row that alone determines a direction is 0 whatever the noise, and
    # HC3's r²/(1−h)² is then 0/0.  Their noise variance is taken from the robust local
    # residual scale of the other rows at the same predicted time instead.
    H_CUT = 0.9
    # HC1 mode computes leverages only for rows that execute a rarely executed column
    # (the usual way a single row comes to determine a direction).
    RARE = 50

    def _sandwich(self, theta_full: np.ndarray, kept: np.ndarray,
                  n_used: int, rank: int, fold_theta: np.ndarray | None):
        """One pass: residuals of every timed input, leverages and the meat.

        With row weights ω = w·v (v = 1 without weighting) the estimate is
        (XᵀΩX)⁺XᵀΩy, so its covariance is (XᵀΩX)⁺ XᵀΩ Σ ΩX (XᵀΩX)⁺: the meat sums
        (ω·r)²·xxᵀ, the leverage of a row is ω·xᵀ(XᵀΩX)⁺x, both from the same weights
        as the estimate, whatever they are."""
        d = self.design
        reps = self.reps
        pr = reps.size
        sol = self.sol
        D = sol.scale
        lam = sol.lam
        Z = (sol.V / np.sqrt(lam)).T * D[None, :] if rank else np.zeros((0, pr))   # [r, pr]
        hc3 = float(n_used) * pr * max(rank, 1) <= self.opts.hc3_budget
        rare = np.zeros(pr, dtype=bool)
        blocks_r = reps < d.pb
        rare[blocks_r] = self.col_nnz[reps[blocks_r]] <= self.RARE
        M = np.zeros((pr, pr))
        cand = np.flatnonzero(self.has)
        resid = np.full(self.n, np.nan)
        self.fold_pred = np.full(self.n, np.nan) if fold_theta is not None else None
        self.lever = np.full(self.n, np.nan)
        deferred: list[np.ndarray] = []
        identity = reps.size == d.p and bool(np.all(reps == np.arange(d.p)))
        for rows, X in d.chunks(cand):
            pred = X @ theta_full
            resid[rows] = self.y[rows] - pred
            if fold_theta is not None:
                fp = X @ fold_theta
                self.fold_pred[rows] = fp[np.arange(rows.size), d.fold[rows]]
            w = self.w[rows] * self.v[rows]
            m = w > 0
            if not m.any():
                continue
            Xm = X[m] if identity else np.take(X[m], reps, axis=1)
            rm = rows[m]
            h = np.zeros(rm.size)
            if hc3:
                look = np.ones(rm.size, dtype=bool)
            else:
                look = (Xm[:, rare] != 0).any(axis=1) if rare.any() else np.zeros(rm.size, bool)
            if look.any():
                XZ = Xm[look] @ Z.T
                h[look] = w[m][look] * np.einsum("ij,ij->i", XZ, XZ)
                self.lever[rm[look]] = h[look]
            high = h > self.H_CUT
            if high.any():
                deferred.append(rm[high])
            u = w[m] * resid[rm]
            if hc3:
                u = u / (1.0 - np.minimum(h, self.H_CUT))
            u[high] = 0.0
            # the meat needs no exactness: single precision halves the pass
            U = np.empty(Xm.shape, dtype=np.float32)
            np.multiply(Xm, u[:, None], out=U, casting="unsafe")
            M += (U.T @ U).astype(np.float64)
        if not hc3:
            M *= n_used / max(n_used - rank, 1)
        if deferred:
            hi = np.concatenate(deferred)
            lo = np.setdiff1d(kept, hi)
            fitted = self.y - resid
            reps_n = np.maximum(self.call_keep[hi].sum(axis=1), 1)
            floor = np.maximum(1e-9 * float(np.sqrt(np.mean(self.y[kept] ** 2))),
                               0.5 * self.quantum / np.sqrt(reps_n))
            if lo.size >= 2:
                s_hat = robust.local_scale(resid[lo], fitted[lo], 0.0, at=fitted[hi])
            else:
                s_hat = np.zeros(hi.size)
            s_hat = np.maximum(s_hat, floor)
            Xh = d.rows(hi)[:, reps]
            U = Xh * (self.w[hi] * self.v[hi] * s_hat)[:, None]
            M += U.T @ U
            self.high_leverage = int(hi.size)
            self._warn(f"{hi.size} input(s) alone determine some estimable quantities "
                       "(leverage > 0.9): their noise is taken from similar inputs; add "
                       "inputs that exercise the same paths")
        Ms = M * D[:, None] * D[None, :]
        Gp = sol.pinv_scaled()
        cov_s = Gp @ Ms @ Gp
        self.meat_method = "hc3" if hc3 else "hc1"
        return cov_s, f"sandwich-{'hc3' if hc3 else 'hc1'}", resid

    def _bootstrap(self, kept: np.ndarray) -> np.ndarray:
        """Covariance of the reduced solution over a bootstrap of the used inputs (with
        the full fit's row weights held fixed: re-deriving them per replicate would cost
        an IRLS per replicate for a second-order effect)."""
        o = self.opts
        d = self.design
        reps = self.reps
        pr = reps.size
        B = max(int(o.bootstrap), 2)
        nk = kept.size
        if float(nk) * pr * pr * B > 5e11:
            self._warn(f"bootstrap of {B} replicates over {nk} rows × {pr} columns is very "
                       "slow")
        rng = np.random.default_rng(o.seed + 1)
        D = self.sol.scale
        Vr = self.sol.V
        small = float(nk) * pr <= 5e7
        Xr = d.rows(kept)[:, reps] if small else None
        w = self.w[kept] * self.v[kept]
        y = self.y[kept]
        reps_out = np.zeros((B, pr))
        for k in range(B):
            m = np.bincount(rng.integers(0, nk, nk), minlength=nk).astype(np.float64)
            gw = m * w
            if small:
                Gb = (Xr * gw[:, None]).T @ Xr
                bb = Xr.T @ (gw * y)
            else:
                Gf = np.zeros((1, d.p, d.p))
                bf = np.zeros((1, d.p))
                gw_full = np.zeros(self.n)
                gw_full[kept] = gw
                bw_full = np.zeros(self.n)
                bw_full[kept] = gw * y
                saved = d.fold
                d.fold = np.zeros(self.n, dtype=np.int64)
                save_nf = d.n_folds
                d.n_folds = 1
                try:
                    d.accumulate(Gf, bf, gw_full, bw_full, kept)
                finally:
                    d.fold, d.n_folds = saved, save_nf
                Gb = Gf[0][np.ix_(reps, reps)]
                bb = bf[0][reps]
            gs = Vr.T @ (Gb * D[:, None] * D[None, :]) @ Vr
            rhs = Vr.T @ (D * bb)
            gs[np.diag_indices_from(gs)] += 1e-9
            try:
                z = sla.solve(gs, rhs, assume_a="pos", check_finite=False)
            except (np.linalg.LinAlgError, ValueError):
                z = np.linalg.lstsq(gs, rhs, rcond=None)[0]
            reps_out[k] = D * (Vr @ z)
        return np.cov(reps_out, rowvar=False).reshape(pr, pr)

    def _qvar(self, c: np.ndarray) -> float:
        """Variance of the reduced combination c·θ (the wider method if two were asked)."""
        nz = np.flatnonzero(c)
        cc = c[nz]
        v = float(cc @ self.cov_theta[np.ix_(nz, nz)] @ cc)
        alt = getattr(self, "_cov_alt", None)
        if alt is not None:
            v = max(v, float(cc @ alt[np.ix_(nz, nz)] @ cc))
        return max(v, 0.0)

    def _nonneg(self, an: est.Analysis, theta: np.ndarray) -> tuple[np.ndarray, int]:
        """(Weighted) least squares with estimable quantities ≥ 0: the blocks (and merged
        classes) estimable alone and the group combinations with no negative coefficient.
        Only directions of the row space move; the null space is never touched."""
        rank = an.rank
        if rank == 0:
            return theta, 0
        # the objective in the solver's coordinates, where it is diagonal
        D = self.sol.scale
        Vr = self.sol.V
        lam = self.sol.lam
        cons: list[np.ndarray] = []
        for j in np.flatnonzero(an.estimable):
            e = np.zeros(D.size)
            e[j] = 1.0
            cons.append(e)
        for comp in an.components:
            row, _ = est.component_spaces(an, comp)
            rows = self._readable(comp, row)
            for r in rows:
                if np.all(r >= -1e-9):
                    c = np.zeros(D.size)
                    c[comp] = r
                    cons.append(c)
        if not cons:
            return theta, 0
        A = np.array([(D * c) @ Vr for c in cons])          # constraints on z, [k, r]
        # keep an independent subset (they are by construction; guard anyway)
        q, rr, piv = sla.qr(A.T, pivoting=True, mode="economic")
        k_ind = int(np.sum(np.abs(np.diag(rr)) > 1e-10 * max(abs(rr[0, 0]), 1e-300)))
        A = A[np.sort(piv[:k_ind])]
        k = A.shape[0]
        # complete A to an invertible T with the orthogonal complement of its rows
        _, _, vt = np.linalg.svd(A)
        T = np.vstack([A, vt[k:]])
        Tinv = np.linalg.inv(T)
        z0 = Vr.T @ (theta / D)
        sq = np.sqrt(lam)
        lb = np.full(rank, -np.inf)
        lb[:k] = 0.0
        res = lsq_linear(sq[:, None] * Tinv, sq * z0, bounds=(lb, np.full(rank, np.inf)),
                         method="bvls" if rank <= 200 else "trf", lsmr_tol="auto")
        qv = res.x
        z = Tinv @ qv
        active = int(np.sum(qv[:k] <= 1e-9 * max(1.0, float(np.max(np.abs(T @ z0))))))
        new = D * (Vr @ z)
        # keep whatever θ had in the null space (nothing, for the minimum-norm θ)
        null_part = theta - D * (Vr @ (Vr.T @ (theta / D)))
        return new + null_part, active

    # -- readable output --------------------------------------------------------------------------
    def _readable(self, comp: np.ndarray, row: np.ndarray) -> np.ndarray:
        """The reported basis of a component's estimable combinations (cached).

        Reduced row-echelon form with the overheads as the first pivots (so that exactly
        one combination holds each ε), the blocks in one of four orders — by increasing
        mean count (rare blocks become pivots: "test + A", "test + B" rather than "test +
        B", "A − B"), decreasing, by address, by decreasing address — and, when all of
        those have negative coefficients, a basis of sparse non-negative combinations
        (:func:`estimability.nonnegative_basis`): whichever has the fewest negative
        coefficients, then the fewest terms.  All span the same space; this only chooses
        the most readable."""
        key = tuple(int(j) for j in comp)
        cache = self.__dict__.setdefault("_readable_cache", {})
        if key in cache:
            return cache[key]
        pb = self.design.pb
        G = self.Gtot
        n_rows = max(float(self.w.sum()), 1.0)
        cfg_pos, blk = [], []
        for li, j in enumerate(comp):
            col = self.reps[j]
            if col >= pb:
                cfg_pos.append(li)
            else:
                blk.append((float(G[col, pb:].sum()) / n_rows, int(self.addrs[
                    int(self._blocks_of(int(j))[0])]), li))
        orders = [sorted(blk), sorted(blk, key=lambda t: (-t[0], t[1])),
                  sorted(blk, key=lambda t: t[1]), sorted(blk, key=lambda t: -t[1])]
        best = None

        def consider(rows: np.ndarray) -> None:
            nonlocal best
            score = (int(np.sum(rows < -1e-9)), int(np.sum(np.abs(rows) > 1e-9)))
            if best is None or score < best[0]:
                best = (score, rows)

        for o in orders:
            consider(est.readable_basis(row, cfg_pos + [t[2] for t in o])[1])
        if best[0][0] > 0 and len(comp) <= 300:
            # negative coefficients: try sparse non-negative combinations (path sums),
            # completed by the best echelon rows where no non-negative one exists
            nb = est.nonnegative_basis(row, cfg_pos + [t[2] for t in orders[0]],
                                       fixed_zero=cfg_pos,
                                       max_den=self.opts.max_denominator, complete=best[1])
            if nb.shape[0] == best[1].shape[0]:
                consider(nb)
        cache[key] = best[1]
        return best[1]

    def _blocks_of(self, j: int) -> np.ndarray:
        """Block indices (into the caller's columns) of reduced column j (< n_cls)."""
        cols = self.classes[j]
        out = [int(k) for k in self.active[cols]]
        for c in cols:
            out.extend(self.extra.get(int(c), ()))
        return np.asarray(sorted(out), dtype=np.int64)

    def _ns(self, ticks: float | None) -> float | None:
        if ticks is None or self.tsc_hz is None or not math.isfinite(ticks):
            return None
        return ticks * 1e9 / self.tsc_hz

    def _fmt(self, x: float) -> str:
        return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.6g}"

    def _combination(self, comp: np.ndarray, coef: np.ndarray) -> Combination:
        coef, fr = est.rationalize(coef, self.opts.max_denominator)
        c = np.zeros(self.reps.size)
        c[comp] = coef
        value = float(c @ self.theta)
        ci = _half(self.t95, self._qvar(c))
        blocks: list[tuple[int, float]] = []
        overheads: list[tuple[int, float]] = []
        terms: list[tuple[int, str, float, Fraction | None]] = []
        for j, v, f in zip(comp, coef, fr):
            if v == 0.0:
                continue
            if j >= self.n_cls:
                cfg = self.configs[self.design.cfg_of_col(self.reps[j])]
                overheads.append((cfg, float(v)))
                name = "ε" if self.n_cfg == 1 else f"ε[{cfg}]"
                terms.append((-1, name, float(v), f))
            else:
                for k in self._blocks_of(j):
                    a = self.addrs[int(k)]
                    blocks.append((a, float(v)))
                    terms.append((a, hexaddr(a), float(v), f))
        terms.sort(key=lambda t: t[0])
        text = _linear_text([(n, v, f) for _, n, v, f in terms])
        text += f" = {self._fmt(value)} ± {self._fmt(ci)} ticks"
        if self.tsc_hz is not None:
            text += f" ({self._fmt(self._ns(value))} ± {self._fmt(self._ns(ci))} ns)"
        blocks.sort()
        return Combination(tuple(blocks), tuple(sorted(overheads)), value, ci, text,
                           self._ns(value), self._ns(ci))

    def _assemble(self, an: est.Analysis, theta: np.ndarray, cov_theta: np.ndarray,
                  t95: float, method: str, kept: np.ndarray, resid_all: np.ndarray,
                  fold_theta: np.ndarray | None, nonneg_active: int,
                  noise_ratio: float) -> FitResult:
        d = self.design
        pb = d.pb
        n_cls = self.n_cls
        pr = self.reps.size
        basis = self._structural_basis()
        G = self.Gtot

        # particular solution: min Σ_blocks T² with ε free (see module docstring)
        sizes = np.array([c.size for c in self.classes] + [0] * (pr - n_cls), dtype=np.float64)
        wdiag = np.where(sizes > 0, 1.0 / np.maximum(sizes, 1.0), 0.0)
        N = an.V0 * an.scale[:, None]             # reduced null basis, unscaled
        if N.shape[1]:
            A = N.T @ (wdiag[:, None] * N)
            L = np.eye(pr) - N @ np.linalg.pinv(A) @ (N.T * wdiag[None, :])
        else:
            L = np.eye(pr)
        theta_p = L @ theta
        cov_p = L @ cov_theta @ L.T
        if getattr(self, "_cov_alt", None) is not None:
            # "both": each reported interval takes the wider method; the covariance (for
            # predict_ci95 and the WCET margin) must stay a covariance: the larger trace
            alt = L @ self._cov_alt @ L.T
            if np.trace(alt) > np.trace(cov_p):
                cov_p = alt
        # expansion: reduced column -> (blocks..., configs...)
        E = np.zeros((self.nb + self.n_cfg, pr))
        for j in range(n_cls):
            for k in self._blocks_of(j):
                E[int(k), j] = 1.0 / sizes[j]
        for j in range(n_cls, pr):
            E[self.nb + d.cfg_of_col(self.reps[j]), j] = 1.0
        sol_all = E @ theta_p
        executed = np.zeros(self.nb, dtype=bool)
        for j in range(n_cls):
            executed[self._blocks_of(j)] = True
        solution = np.where(executed, sol_all[:self.nb], np.nan)
        live_cfg = np.zeros(self.n_cfg, dtype=bool)
        for j in range(n_cls, pr):
            live_cfg[d.cfg_of_col(self.reps[j])] = True
        overhead_solution = np.where(live_cfg, sol_all[self.nb:], np.nan)
        covariance = E @ cov_p @ E.T
        # row space in (blocks, configs) coordinates, for predictable()
        # row space of the full design: a reduced row-space vector a gives the block vector
        # with a_j on every member of class j (identical columns carry equal counts)
        E1 = (E > 0).astype(np.float64)
        if an.rank:
            row_space = np.linalg.qr(E1 @ (an.Vr / an.scale[:, None]))[0]
        else:
            row_space = np.zeros((self.nb + self.n_cfg, 0))

        # executions per block over the rows used
        execs = np.zeros(self.nb, dtype=np.int64)
        colsum = G[:pb, pb:].sum(axis=1)
        has_col = self.block_col >= 0
        execs[has_col] = np.round(colsum[self.block_col[has_col]]).astype(np.int64)

        # groups
        groups: list[dict[str, Any]] = []
        red_group: dict[int, int] = {}
        for comp in an.components:
            groups.append(self._component_group(an, comp, basis))
            for j in comp:
                red_group[int(j)] = len(groups) - 1
        for j in range(n_cls):
            if an.estimable[j] and self.classes[j].size > 1:
                groups.append(self._class_group(an, j, basis))
                red_group[j] = len(groups) - 1
        for k in range(self.nb):
            if not executed[k]:
                groups.append(self._unexecuted_group(k))
        order = sorted(range(len(groups)), key=lambda i: (min(groups[i]["blocks"])
                                                          if groups[i]["blocks"] else -1))
        gid = {old: new for new, old in enumerate(order)}
        group_objs = tuple(Group(id=gid[i], **groups[i]) for i in order)
        block_group: dict[int, int] = {}
        for g in group_objs:
            for a in g.blocks:
                block_group[a] = g.id

        blocks: list[BlockFit] = []
        for k, a in enumerate(self.addrs):
            sol = None if np.isnan(solution[k]) else float(solution[k])
            cost = ci = None
            estim = False
            if executed[k]:
                j = self._red_of_block(k)
                if an.estimable[j] and self.classes[j].size == 1:
                    estim = True
                    e = np.zeros(pr)
                    e[j] = 1.0
                    cost = float(theta[j])
                    ci = _half(t95, self._qvar(e))
            blocks.append(BlockFit(a, estim, cost, ci, None if estim else block_group.get(a),
                                   sol, int(execs[k]), self._ns(cost), self._ns(ci),
                                   self._ns(sol)))

        overhead = self._overheads(an, group_objs)
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

        validation = self._validation(resid_all) if fold_theta is not None else None

        self._warn_clustered_rejections()
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
            machine_speed=self.speed.to_dict() if self.speed is not None else None)

    def _warn_clustered_rejections(self) -> None:
        """Rejected inputs crowding the start of the run point at the measurement (warm-up,
        frequency ramp), not at the inputs: say so."""
        cand = np.flatnonzero(self.has)
        if self.opts.rows == "input":
            bad = self.rejected_rows[cand]
        else:
            bad = self.call_rejected[cand].any(axis=1)
        n = cand.size
        k = int(bad.sum())
        head = max(n // 10, 1)
        k_head = int(bad[:head].sum())
        if n < 50 or k < 3 or k_head < 3:
            return
        rate_head = k_head / head
        rate_rest = (k - k_head) / max(n - head, 1)
        if rate_head > 3.0 * rate_rest:
            self._warn(f"{k_head} of the {k} rejected inputs are among the first {head} of "
                       f"{n} (inputs {int(cand[0])}–{int(cand[head - 1])}): a warm-up or "
                       "frequency effect in the timing run rather than the inputs?")

    def _red_of_block(self, k: int) -> int:
        if not hasattr(self, "_block_red"):
            m: dict[int, int] = {}
            for j in range(self.n_cls):
                for kk in self._blocks_of(j):
                    m[int(kk)] = j
            self._block_red = m
        return self._block_red[k]

    def _structural_basis(self) -> dict[str, Any] | None:
        B = self.basis_in
        if B is None:
            return None
        if isinstance(B, Mapping):
            mats = [np.atleast_2d(np.asarray(v, dtype=np.float64)) for v in B.values()]
            for m in mats:
                if m.shape[1] != self.nb:
                    raise FitError(f"structural basis has {m.shape[1]} columns, counts {self.nb}")
            dims = [est.orthonormal_rows(m).shape[1] for m in mats]
            S = est.orthonormal_rows(np.vstack(mats))
            max_rank = int(sum(dims))
        else:
            m = np.atleast_2d(np.asarray(B, dtype=np.float64))
            if m.shape[1] != self.nb:
                raise FitError(f"structural basis has {m.shape[1]} columns, counts {self.nb}")
            S = est.orthonormal_rows(m)
            # one configuration: rows (n, 1) with n in S and φ(n) = 1 for the linear
            # "number of calls" functional φ on S, so the rank with ε is at most dim S;
            # several configurations sharing one basis: at most dim S + n_configs.
            max_rank = S.shape[1] if self.n_cfg == 1 else S.shape[1] + self.n_cfg
        # do the counts lie in S?  Σ_rows w·|(I − P_S) x|² = trace(A G Aᵀ) with A = (I−P_S)
        G = self.Gtot
        pb = self.design.pb
        Mx = np.zeros((self.nb, pb))        # design column → its blocks
        has_col = self.block_col >= 0
        Mx[np.flatnonzero(has_col), self.block_col[has_col]] = 1.0
        A = Mx - S @ (S.T @ Mx)
        Gb = G[:pb, :pb]
        out_energy = float(np.sum((A @ Gb) * A))
        rel = out_energy / max(float(np.trace(Gb)), 1e-300)
        if rel > 1e-9:
            self.warnings.append(f"the counts are not in the structural count space (relative "
                                 f"energy {rel:.2g} outside): structural/observed "
                                 "classification is unreliable")
        return {"S": S, "max_rank": max_rank}

    def _lift(self, comp: np.ndarray, vecs: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Reduced vectors (columns over ``comp``, blocks only) to block coordinates, plus
        the within-class differences; returns (vectors [n_blocks_in_group, k], blocks)."""
        blocks: list[int] = []
        first: dict[int, int] = {}
        for j in comp:
            if j < self.n_cls:
                mem = [int(k) for k in self._blocks_of(int(j))]
                first[int(j)] = len(blocks)
                blocks.extend(mem)
        pos = {k: i for i, k in enumerate(blocks)}
        cols = []
        for v in vecs.T:
            t = np.zeros(len(blocks))
            for jj, j in enumerate(comp):
                if j < self.n_cls:
                    t[first[int(j)]] = v[jj]
            cols.append(t)
        for j in comp:
            if j < self.n_cls and self.classes[int(j)].size > 1:
                mem = [int(k) for k in self._blocks_of(int(j))]
                for k in mem[1:]:
                    t = np.zeros(len(blocks))
                    t[pos[mem[0]]] = 1.0
                    t[pos[k]] = -1.0
                    cols.append(t)
        T = np.array(cols).T if cols else np.zeros((len(blocks), 0))
        return T, blocks

    def _relations(self, T: np.ndarray, blocks: list[int], basis: dict[str, Any] | None,
                   excess: int) -> tuple[list[str], str | None]:
        """Readable count relations that hold in every input (and, with a structural basis,
        are not forced by the CFG), with advice on how to break them."""
        if T.shape[1] == 0:
            return [], None
        G = self.Gtot
        pb = self.design.pb
        freq = [float(G[self.block_col[k], pb:].sum()) for k in blocks]
        order = sorted(range(len(blocks)), key=lambda i: (-freq[i], self.addrs[blocks[i]]))
        _, rows = est.readable_basis(T, order)
        chosen: list[np.ndarray] = []
        if basis is not None:
            S = basis["S"][blocks]
            for r in rows:
                if len(chosen) >= excess:
                    break
                trial = np.array(chosen + [r]).T
                if est.excess_over(trial, S) > len(chosen):
                    chosen.append(r)
        else:
            chosen = list(rows)
        texts: list[str] = []
        advice: list[str] = []
        for r in chosen:
            r, fr = est.rationalize(r, self.opts.max_denominator)
            if all(f is not None for f in fr):
                lcm = 1
                for f in fr:
                    lcm = lcm * f.denominator // math.gcd(lcm, f.denominator)
                r = r * lcm
            lhs = [(hexaddr(self.addrs[blocks[i]]), r[i]) for i in range(len(r)) if r[i] > 0]
            rhs = [(hexaddr(self.addrs[blocks[i]]), -r[i]) for i in range(len(r)) if r[i] < 0]

            def side(terms):
                if not terms:
                    return "0"
                return " + ".join(("" if abs(v - 1) < 1e-12 else f"{self._fmt(v)}·")
                                  + f"N({a})" for a, v in terms)

            rel = f"{side(lhs)} = {side(rhs)}"
            texts.append(rel)
            if len(lhs) == 1 and len(rhs) == 1 and abs(lhs[0][1] - rhs[0][1]) < 1e-12:
                advice.append(f"vary the inputs so that {lhs[0][0]} executes a different "
                              f"number of times than {rhs[0][0]}")
            elif not rhs or not lhs:
                only = [a for a, _ in lhs + rhs]
                advice.append(f"vary the inputs so that {', '.join(only)} execute(s)")
            else:
                advice.append(f"vary the inputs so that {rel} does not hold for every input")
        if basis is None:
            text = ("if the CFG lets these counts differ: " + "; ".join(advice)) if advice else None
        else:
            text = "; ".join(advice) if advice else None
        return texts, text

    def _component_group(self, an: est.Analysis, comp: np.ndarray,
                         basis: dict[str, Any] | None) -> dict[str, Any]:
        row, null = est.component_spaces(an, comp)
        rows = self._readable(comp, row)
        combos = tuple(self._combination(comp, r) for r in rows)
        is_cfg = comp >= self.n_cls
        configs = tuple(self.configs[self.design.cfg_of_col(self.reps[j])] for j in comp[is_cfg])
        # null directions that do not move ε: dependencies among block counts alone
        if is_cfg.any() and null.shape[1]:
            _, sv, vt = np.linalg.svd(null[is_cfg])
            rnk = int(np.sum(sv > 1e-9 * max(float(sv[0]) if sv.size else 0.0, 1e-300)))
            null_b = (null @ vt[rnk:].T)[~is_cfg]
        else:
            null_b = null[~is_cfg]
        T, blocks = self._lift(comp[~is_cfg], null_b)
        excess = 0
        if basis is not None:
            excess = est.excess_over(T, basis["S"][blocks]) if T.size else 0
        if is_cfg.any():
            kind = KIND_OVERHEAD
        elif basis is None:
            kind = KIND_UNCLASSIFIED
        else:
            kind = KIND_OBSERVED if excess > 0 else KIND_STRUCTURAL
        relations: list[str] = []
        advice = None
        if kind == KIND_UNCLASSIFIED or excess > 0:
            relations, advice = self._relations(T, blocks, basis, excess)
        elif kind == KIND_STRUCTURAL:
            advice = None
        addrs = tuple(sorted(self.addrs[k] for k in blocks))
        return dict(blocks=addrs, kind=kind, combinations=combos, configs=configs,
                    relations=tuple(relations), advice=advice, observed_deficiency=excess)

    def _class_group(self, an: est.Analysis, j: int, basis: dict[str, Any] | None
                     ) -> dict[str, Any]:
        comp = np.array([j])
        combo = self._combination(comp, np.array([1.0]))
        T, blocks = self._lift(comp, np.zeros((1, 0)))
        excess = est.excess_over(T, basis["S"][blocks]) if basis is not None else 0
        kind = (KIND_UNCLASSIFIED if basis is None
                else KIND_OBSERVED if excess > 0 else KIND_STRUCTURAL)
        relations: list[str] = []
        advice = None
        if kind != KIND_STRUCTURAL:
            relations, advice = self._relations(T, blocks, basis, excess)
        return dict(blocks=tuple(sorted(self.addrs[k] for k in blocks)), kind=kind,
                    combinations=(combo,), configs=(), relations=tuple(relations),
                    advice=advice, observed_deficiency=excess)

    def _unexecuted_group(self, k: int) -> dict[str, Any]:
        a = hexaddr(self.addrs[k])
        if self.block_col[k] >= 0:
            why = f"{a} ran only in rejected inputs: its cost is unknown"
        else:
            why = f"no input executed {a}: its cost is unknown; add inputs that reach it"
        return dict(blocks=(self.addrs[k],), kind=KIND_UNEXECUTED, combinations=(),
                    configs=(), relations=(), advice=why, observed_deficiency=0)

    def _overheads(self, an: est.Analysis, groups: tuple[Group, ...]) -> tuple[Overhead, ...]:
        out: list[Overhead] = []
        d = self.design
        for c, cfg in enumerate(self.configs):
            col = d.pb + c
            hit = np.flatnonzero(self.reps == col)
            name = "ε" if self.n_cfg == 1 else f"ε[{cfg}]"
            if hit.size == 0:
                out.append(Overhead(cfg, None, None, (), f"{name}: no rows of this configuration"))
                continue
            j = int(hit[0])
            if an.estimable[j]:
                e = np.zeros(self.reps.size)
                e[j] = 1.0
                v = float(self.theta[j])
                ci = _half(self.t95, self._qvar(e))
                text = (f"{name} = {self._fmt(v)} ± {self._fmt(ci)} ticks "
                        "(estimable alone: no block runs exactly once per call)")
                out.append(Overhead(cfg, v, ci, (), text, self._ns(v), self._ns(ci)))
                continue
            found = None
            for g in groups:
                for cb in g.combinations:
                    oc = dict(cb.overhead_coefficients)
                    if oc.get(cfg) == 1.0 and len(oc) == 1:
                        found = cb
                        break
                if found:
                    break
            if found is None:
                out.append(Overhead(cfg, None, None, (),
                                    f"{name} is not separable from the other configurations'"))
                continue
            text = found.text + " — ε and the blocks that run once per call are confounded"
            out.append(Overhead(cfg, found.value_ticks, found.ci95_ticks, found.coefficients,
                                text, found.value_ns, found.ci95_ns))
        return tuple(out)

    def _validation(self, resid_all: np.ndarray) -> Validation:
        """Held-out figures: each input predicted by the model fitted without its fold.

        Per call: every valid timed call of every input with a timing (rejected inputs
        included: a mispredicted input must show), except the calls the clipped mean
        discards as interrupted (counted in ``discarded_calls``).  R² and the worst inputs
        use the per-input statistic."""
        o = self.opts
        cand = np.flatnonzero(self.has)
        pred = self.fold_pred[cand]
        y = self.y[cand]
        T = self.ticks[cand]
        valid = self.valid_calls[cand]
        summ = robust.summarize_repeats(T, "clipped_mean", quantum=self.quantum)
        clean = summ.keep & valid
        # rows="call": an input whose calls were all rejected has no row value; its
        # per-input figure uses the clipped mean of its calls
        y = np.where(np.isfinite(y), y, summ.value)
        P = np.broadcast_to(pred[:, None], T.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel_all = np.abs(P - T) / np.abs(T)
            rel_in = np.abs(pred - y) / np.abs(y)
        rel_calls = rel_all[clean]
        rel_calls = rel_calls[np.isfinite(rel_calls)]
        kept_calls = rel_all[clean & ~self.rejected_rows[cand][:, None]]
        kept_calls = kept_calls[np.isfinite(kept_calls)]
        rel_in = np.where(np.isfinite(rel_in), rel_in, 0.0)

        def q(v: np.ndarray, p: float) -> float:
            return float(np.percentile(v, p)) if v.size else float("nan")

        ss_res = float(np.sum((y - pred) ** 2))
        ss_tot = float(np.sum((y - np.mean(y)) ** 2))
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
        tv, pv = T[clean], P[clean]
        ss_tot_c = float(np.sum((tv - np.mean(tv)) ** 2)) if tv.size else 0.0
        r2c = 1.0 - float(np.sum((tv - pv) ** 2)) / ss_tot_c if ss_tot_c > 0 else float("nan")
        top = np.argsort(-rel_in)[:o.worst]
        worst = tuple(WorstInput(int(cand[i]), float(y[i]), float(pred[i]), float(rel_in[i]),
                                 bool(self.rejected_rows[cand[i]])) for i in top)
        return Validation(self.F, int(cand.size), int(clean.sum()), q(rel_calls, 50),
                          q(rel_calls, 95), r2, r2c, worst,
                          outside_space=self._outside_count(cand),
                          discarded_calls=int((valid & ~clean).sum()),
                          median_rel_error_inputs=q(rel_in, 50),
                          p95_rel_error_inputs=q(rel_in, 95),
                          median_rel_error_kept=q(kept_calls, 50),
                          p95_rel_error_kept=q(kept_calls, 95))

    def _outside_count(self, cand: np.ndarray) -> int:
        """Held-out inputs whose count vector is not in their training folds' row space
        (their prediction depends on the choice of solution); -1 when not computed (one
        eigendecomposition per fold: skipped for more than 400 unknowns)."""
        d = self.design
        if self.reps.size > 400:
            return -1
        G = self.Gtot
        tau = max(self.an.sigma_tol / max(self.an.sigma_max, 1e-300), 1e-8)
        count = 0
        for k in range(self.F):
            rows = cand[d.fold[cand] == k]
            if rows.size == 0:
                continue
            Gt = (G - self.G[k])[np.ix_(self.reps, self.reps)]
            diag = np.diag(Gt)
            good = diag > 0
            X = d.rows(rows)[:, self.reps]
            out = (X[:, ~good] != 0).any(axis=1)
            if good.any():
                dd = 1.0 / np.sqrt(diag[good])
                gs = Gt[np.ix_(good, good)] * dd[:, None] * dd[None, :]
                lam, V = np.linalg.eigh(gs)
                V0 = V[:, lam <= max(float(lam[-1]), 0.0) * tau ** 2]
                if V0.shape[1]:
                    Xs = X[:, good] * dd[None, :]     # coefficient vector, in scaled coords
                    nrm = np.linalg.norm(Xs, axis=1)
                    out |= np.linalg.norm(Xs @ V0, axis=1) > 1e-6 * np.maximum(nrm, 1e-300)
            count += int(out.sum())
        return count


def _half(t95: float, var: float) -> float:
    """Interval half-width; infinite without degrees of freedom."""
    return math.inf if math.isinf(t95) else t95 * math.sqrt(var)


def _linear_text(terms: list[tuple[str, float, Fraction | None]]) -> str:
    out = ""
    for i, (name, v, f) in enumerate(terms):
        neg = v < 0
        mag = abs(v)
        if f is not None:
            fa = abs(f)
            coef = "" if fa == 1 else (f"{fa.numerator}·" if fa.denominator == 1
                                       else f"({fa.numerator}/{fa.denominator})·")
        else:
            coef = f"{mag:.4g}·"
        if i == 0:
            out += ("−" if neg else "") + coef + name
        else:
            out += (" − " if neg else " + ") + coef + name
    return out or "0"
