"""The IPET's integer program as plain data, solved and checked.

HiGHS is a floating-point solver: on large CFGs with costs in the thousands of ticks and
flows in the hundred thousands it has answered "unbounded" or "infeasible" for problems
that were neither.  So the answer is never taken on trust:

- the objective is scaled to costs of magnitude ≤ 1 (the argmax is unchanged) and the
  program has no big-M constants (every bound is a count the user or the inputs gave);
- the returned flow is rounded and every constraint recomputed on it
  (:func:`violations`);
- every measured input's count vector is a feasible point of the program (when it
  satisfies the constraints, which :func:`input_violations` decides), so the optimum must
  be at least each such input's predicted time: one below it is a solver failure;
- a failure is retried without presolve, and what is left is named: the cycle that runs
  without limit (:func:`unbounded_cycle`), the input and the constraint it breaks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.wcet.flow import SINK, SOURCE, Flow

log = logging.getLogger(__name__)

TOL = 1e-6          # relative tolerance of a recomputed constraint


@dataclass(frozen=True)
class Row:
    """lo ≤ Σ coef[i]·flow[i] ≤ hi; ``label`` says what it is for the user."""

    coef: dict[int, float]
    lo: float
    hi: float
    label: str


@dataclass
class Problem:
    """Maximize Σ cost[i]·flow[i] over integer flows within [lb, ub] satisfying ``rows``."""

    cost: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    rows: list[Row]


@dataclass(frozen=True)
class Solution:
    flow: np.ndarray | None          # integer flows, None when the solver gave none
    status: str                      # "optimal", "time_limit", "infeasible", "unbounded", "failed"
    message: str
    dual_bound: float | None = None  # an upper bound of the objective (time limit)
    attempts: tuple[str, ...] = ()   # what each try answered


def violations(p: Problem, f: np.ndarray, tol: float = TOL) -> list[str]:
    """The constraints (and variable bounds, integrality) ``f`` breaks, by label."""
    out: list[str] = []
    f = np.asarray(f, dtype=float)
    if f.shape != p.cost.shape:
        return [f"flow vector of length {f.shape} for {p.cost.shape[0]} variables"]
    if np.any(np.abs(f - np.rint(f)) > tol):
        out.append("integrality")
    if np.any(f < p.lb - tol) or np.any(f > p.ub + tol):
        out.append("variable bounds (a flow negative, or on an edge no execution may take)")
    for r in p.rows:
        v = sum(c * f[i] for i, c in r.coef.items())
        scale = tol * max(1.0, abs(r.lo) if np.isfinite(r.lo) else 0.0,
                          abs(r.hi) if np.isfinite(r.hi) else 0.0,
                          sum(abs(c * f[i]) for i, c in r.coef.items()))
        if v < r.lo - scale or v > r.hi + scale:
            out.append(f"{r.label} (value {v:g}, allowed [{r.lo:g}, {r.hi:g}])")
    return out


def _milp(p: Problem, *, presolve: bool, integral: bool = True, ub: np.ndarray | None = None,
          extra: Sequence[Row] = (), skip: int | None = None,
          time_limit: float | None = None) -> Any:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    rows = [r for k, r in enumerate(p.rows) if k != skip] + list(extra)
    n = p.cost.shape[0]
    scale = float(np.max(np.abs(p.cost), initial=0.0)) or 1.0
    data, ri, ci = [], [], []
    for k, r in enumerate(rows):
        for i, v in r.coef.items():
            if v:
                data.append(v)
                ri.append(k)
                ci.append(i)
    kw: dict[str, Any] = {}
    if rows:
        A = csr_matrix((data, (ri, ci)), shape=(len(rows), n))
        kw["constraints"] = LinearConstraint(A, np.array([r.lo for r in rows]),
                                             np.array([r.hi for r in rows]))
    if not np.all(np.isfinite(p.cost)):
        # (a cost that overflowed upstream reached scipy as a traceback: "`c` must be a
        # one-dimensional array of finite numbers")
        raise WcetError(f"the worst-case path's costs are not finite "
                        f"({int(np.sum(~np.isfinite(p.cost)))} of {n}): no bound")
    options: dict[str, Any] = {"mip_rel_gap": 0.0, "presolve": presolve}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    with _stdout_silenced():
        res = milp(-p.cost / scale, integrality=np.ones(n) if integral else np.zeros(n),
                   bounds=Bounds(p.lb, p.ub if ub is None else ub), options=options, **kw)
    return res, scale


@contextlib.contextmanager
def _stdout_silenced() -> Iterator[None]:
    """File descriptor 1 pointed at /dev/null while HiGHS runs: its MIP solver prints
    debugging lines straight to it (``HighsMipSolverData::transformNewIntegerFeasible
    Solution tmpSolver.run();``, libbz2's compressor), which broke ``wcetfit report --json
    -`` and headed the text report.  Python's own buffered output is flushed first."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:                     # no descriptor 1 at all: nothing to protect
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _verdict(res: Any) -> str:
    msg = str(res.message).lower()
    if res.x is not None:
        return "optimal" if res.status == 0 else "time_limit"
    if res.status == 2 or "infeasible" in msg:
        return "infeasible"
    if res.status == 3 or "unbounded" in msg:
        return "unbounded"
    return "failed"


def solve(p: Problem, *, time_limit: float | None = 60.0,
          values_to_beat: Sequence[tuple[str, float]] = ()) -> Solution:
    """Solve with presolve, then without when the answer fails a check.

    ``values_to_beat``: (what, objective value) of points known to be feasible (measured
    inputs that satisfy every constraint): an optimum below one of them is wrong."""
    attempts: list[str] = []
    last: Solution | None = None
    best_known = max((v for _, v in values_to_beat), default=None)
    # presolve on, off; then, when an answer was only beaten by a known feasible point
    # (HiGHS called a point optimal 2e-4 below a measured input's value on libbz2's
    # compressor, with and without presolve), once more with the objective held at least
    # at that point's value: the search then starts from where the measurements are.
    plan: list[tuple[bool, Sequence[Row]]] = [(True, ()), (False, ())]
    k = 0
    while k < len(plan):
        presolve, extra = plan[k]
        k += 1
        res, scale = _milp(p, presolve=presolve, time_limit=time_limit, extra=extra)
        verdict = _verdict(res)
        tag = (f"presolve {'on' if presolve else 'off'}"
               f"{', objective held at the best measured input' if extra else ''}: ")
        if res.x is None:
            attempts.append(tag + f"{verdict} ({res.message})")
            last = Solution(None, verdict, str(res.message), attempts=tuple(attempts))
            continue
        f = np.rint(res.x).astype(np.int64)
        bad = violations(p, f)
        value = float(p.cost @ f)
        beaten = [(w, v) for w, v in values_to_beat
                  if verdict == "optimal" and v > value + TOL * max(1.0, abs(v))]
        dual = getattr(res, "mip_dual_bound", None)
        dual = -float(dual) * scale if dual is not None and np.isfinite(dual) else None
        if not bad and not beaten:
            attempts.append(tag + verdict)
            return Solution(f, verdict, str(res.message), dual, tuple(attempts))
        why = (f"its flow breaks {'; '.join(bad[:3])}" if bad else
               f"its optimum {value:.6g} is below {beaten[0][0]}'s {beaten[0][1]:.6g}, a "
               f"feasible point")
        attempts.append(tag + f"{verdict} but {why}")
        log.info("IPET solver answer rejected (%s)", attempts[-1])
        last = Solution(None, "failed", why, attempts=tuple(attempts))
        if beaten and not bad and best_known is not None and len(plan) == 2:
            floor = Row({i: float(c) for i, c in enumerate(p.cost) if c},
                        best_known - TOL * max(1.0, abs(best_known)), np.inf,
                        "the objective at least the best measured input's")
            plan.append((True, (floor,)))
    assert last is not None
    return Solution(None, last.status, last.message, attempts=tuple(attempts))


def input_violations(p: Problem, flow: Flow, counts: np.ndarray,
                     max_rows: int = 400, name: bool = True) -> list[str] | None:
    """The constraints one input's block counts (in ``flow.blocks`` order, one call) break:
    [] when some edge flow with these counts satisfies every row, else the rows whose
    removal alone admits one (``["a combination of constraints"]`` when none does;
    ``["a constraint"]`` without looking when not ``name``: one LP per row), None when the
    check could not be made."""
    fixed = [Row({i: 1.0 for i in flow.outs[a]}, float(n), float(n), "")
             for a, n in zip(flow.blocks, counts)]
    fixed.append(Row({flow.source_var: 1.0}, 1.0, 1.0, ""))
    cost = np.zeros_like(p.cost)
    q = Problem(cost, p.lb, p.ub, p.rows)

    def feasible(skip: int | None = None, ub=None) -> bool | None:
        res, _ = _milp(q, presolve=True, integral=False, extra=fixed, skip=skip, ub=ub)
        v = _verdict(res)
        return True if res.x is not None else (False if v == "infeasible" else None)

    ok = feasible()
    if ok is None:
        return None
    if ok:
        return []
    out: list[str] = []
    cfg_only = Problem(cost, p.lb, np.where(p.ub == 0, np.inf, p.ub),
                       [r for r in p.rows if r.label.startswith("flow conservation")])
    res, _ = _milp(cfg_only, presolve=True, integral=False, extra=fixed)
    if res.x is None:
        return ["the CFG itself (these counts are no execution of the model)"]
    if not name:
        return ["a constraint"]
    # an edge no execution may take (forbidden, unreachable) that the input used
    if feasible(ub=np.where(p.ub == 0, np.inf, p.ub)):
        out.append("an edge the program forbids (ub = 0)")
    for k, r in enumerate(p.rows[:max_rows]):
        if r.label.startswith("flow conservation"):
            continue
        if feasible(skip=k):
            out.append(r.label)
    return out or ["a combination of constraints"]


def unbounded_cycle(p: Problem, flow: Flow) -> list[int]:
    """Blocks that run without limit: the LP relaxation with every flow capped at a large
    number; the blocks whose flow reaches the cap's order are the cycle no constraint
    limits.  [] when nothing approaches the cap (the solver's "unbounded" was wrong)."""
    finite = [abs(x) for r in p.rows for x in (r.lo, r.hi) if np.isfinite(x)]
    cap = 1e6 * (1.0 + max(finite, default=0.0))
    res, _ = _milp(p, presolve=False, integral=False, ub=np.minimum(p.ub, cap))
    if res.x is None:
        return []
    hot = set()
    for i, (s, d) in enumerate(flow.edges):
        if res.x[i] > cap / 10 and s != SOURCE and d != SINK:
            hot.update((s, d))
    return sorted(hot)
