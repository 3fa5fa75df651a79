"""The report: plain, frozen data about where a call's time goes and how long it can take.

:func:`build_report` gathers the static model, the fit, the measured counts and times and
the WCET result into a :class:`Report`; the formats render it:

- :mod:`wcetfit.report.text`  terminal (rich tables)
- :mod:`wcetfit.report.json`  ``"schema": "wcetfit.report/1"``
- :mod:`wcetfit.report.html`  one self-contained HTML file (CFG as SVG, plots, tables)

Units: every time is in TSC ticks (the time-stamp counter's unit, *not* core cycles; the
TSC runs at a fixed rate whatever the core's clock) and, when the TSC rate is known, in
nanoseconds = ticks / tsc_hz · 1e9.

The fit is read through its JSON form (schema ``wcetfit.fit/1``: per function
``blocks[{address, estimable, cost_ticks, ci95_ticks, group, solution_ticks}]``,
``groups[{id, blocks, kind, combinations}]``, ``overhead_ticks``, ``validation{...}``), so
any object with ``to_json()`` or the dict itself will do.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.errors import FitError, WcetfitError
from wcetfit.model import (CALL_IMPORTED, CALL_INDIRECT, FunctionModel, hexaddr,
                           parse_addr)
from wcetfit.wcet.relations import ObservedRowSpace
from wcetfit.wcet.result import (SOURCE_OBSERVED, CallOutcome, LoopOutcome, PathStep,
                                 WcetResult, describe_block, loop_key)

log = logging.getLogger(__name__)

TICKS_UNIT = "TSC ticks"
TICKS_NOTE = ("times are in TSC ticks (the time-stamp counter's fixed-rate unit, not core "
              "cycles) and in ns = ticks / TSC rate")

# Fit-quality goals of the project (issue 6): beyond them the report warns.
GOAL_MEDIAN_REL = 0.01
GOAL_P95_REL = 0.05
# A worst-case path farther than this (relative) from the inputs' row space is not estimable.
ESTIMABLE_TOL = 1e-6


def ticks_to_ns(ticks: float | None, tsc_hz: float | None) -> float | None:
    if ticks is None or tsc_hz is None or not tsc_hz or not math.isfinite(ticks):
        return None
    return ticks / tsc_hz * 1e9


# --- the fit, as read from its JSON form ------------------------------------------------------

@dataclass(frozen=True)
class FitBlock:
    address: int
    estimable: bool
    cost_ticks: float | None
    ci95_ticks: tuple[float, float] | None      # (low, high)
    group: Any
    solution_ticks: float | None                # None: never executed (no solution)


@dataclass(frozen=True)
class FitGroup:
    id: Any
    blocks: tuple[int, ...]
    kind: str                                   # "structural" / "observed" / ...
    combinations: tuple[str, ...]               # human sentences
    advice: str | None


@dataclass(frozen=True)
class FitFunction:
    name: str
    blocks: Mapping[int, FitBlock]
    groups: tuple[FitGroup, ...]
    overhead_ticks: float | None
    validation: Mapping[str, Any]
    extra: Mapping[str, Any]                    # any other field, kept for the JSON


def _fit_dict(fit: Any) -> Mapping[str, Any]:
    if isinstance(fit, Mapping):
        return fit
    for name in ("to_json", "as_json", "to_dict"):
        meth = getattr(fit, name, None)
        if callable(meth):
            d = meth()
            if isinstance(d, Mapping):
                return d
    if dataclasses.is_dataclass(fit) and not isinstance(fit, type):
        return dataclasses.asdict(fit)
    raise FitError(f"cannot read a fit result of type {type(fit).__name__}")


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _ci(v: Any, cost: float | None) -> tuple[float, float] | None:
    """``ci95_ticks`` as (low, high): a pair is taken as is, a number as a half-width."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and len(v) == 2:
        lo, hi = _num(v[0]), _num(v[1])
        return (lo, hi) if lo is not None and hi is not None else None
    if isinstance(v, Mapping) and "low" in v and "high" in v:
        return _ci((v["low"], v["high"]), cost)
    h = _num(v)
    if h is None or cost is None:
        return None
    return (cost - abs(h), cost + abs(h))


def _combination_text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, Mapping):
        for key in ("text", "description", "label"):
            if isinstance(c.get(key), str):
                return c[key]
        terms = c.get("terms") or c.get("blocks") or c.get("coefficients")
        value = _num(c.get("value_ticks", c.get("value")))
        ci = c.get("ci95_ticks")
        lhs = ""
        if isinstance(terms, Mapping):
            lhs = " + ".join(f"{_coef(k_v[1])}{k_v[0]}" for k_v in terms.items())
        elif isinstance(terms, (list, tuple)):
            parts = []
            for t in terms:
                if isinstance(t, (list, tuple)) and len(t) == 2:
                    parts.append(f"{_coef(t[1])}{t[0]}")
                else:
                    parts.append(str(t))
            lhs = " + ".join(parts)
        rhs = "" if value is None else f"{value:.1f}"
        if rhs and ci is not None:
            lo_hi = _ci(ci, value)
            if lo_hi:
                rhs += f" ± {(lo_hi[1] - lo_hi[0]) / 2:.1f}"
        if lhs or rhs:
            return f"{lhs} = {rhs} ticks" if rhs else lhs
    return str(c)


def _coef(c: Any) -> str:
    f = _num(c)
    if f is None or f == 1:
        return ""
    return f"{f:g}·"


def _overhead(v: Any, config: int = 0) -> float | None:
    """``overhead_ticks`` is a number, or a mapping probe configuration → ticks (fit/1):
    the report is about configuration 0 (the whole-call probes)."""
    if isinstance(v, Mapping):
        if not v:
            return None
        x = v.get(str(config), v.get(config))
        return _num(x if x is not None else next(iter(v.values())))
    return _num(v)


def _parse_fit_function(name: str, d: Mapping[str, Any], top: Mapping[str, Any]) -> FitFunction:
    blocks: dict[int, FitBlock] = {}
    for b in d.get("blocks", []):
        a = parse_addr(b["address"])
        cost = _num(b.get("cost_ticks"))
        sol = _num(b.get("solution_ticks"))
        blocks[a] = FitBlock(a, bool(b.get("estimable", cost is not None)), cost,
                             _ci(b.get("ci95_ticks"), cost), b.get("group"),
                             sol if sol is not None else cost)
    groups = []
    for g in d.get("groups", []):
        combos = g.get("combinations", [])
        if isinstance(combos, (str, Mapping)):
            combos = [combos]
        groups.append(FitGroup(g.get("id"), tuple(parse_addr(a) for a in g.get("blocks", [])),
                               str(g.get("kind", "")), tuple(_combination_text(c) for c in combos),
                               g.get("advice")))
    overhead = _overhead(d.get("overhead_ticks", top.get("overhead_ticks")))
    validation = d.get("validation", top.get("validation")) or {}
    known = {"blocks", "groups", "overhead_ticks", "validation", "name", "function"}
    return FitFunction(name, blocks, tuple(groups), overhead, dict(validation),
                       {k: v for k, v in d.items() if k not in known})


def _by_function(fits: Mapping[str, FitFunction], functions: Mapping[str, FunctionModel],
                 root: str) -> dict[str, FitFunction]:
    """Redistribute the fit over the functions by block address.  ``FitResult.to_json()``
    is one flat list for the joint fit of the root and its callees; a CLI file may list
    them per function.  Either way each function gets the fitted blocks its model has,
    the groups touching them, and the root's overhead, validation and other fields."""
    all_blocks: dict[int, FitBlock] = {}
    groups: list[FitGroup] = []
    seen: set = set()
    for ff in fits.values():
        all_blocks.update(ff.blocks)
        for g in ff.groups:
            key = (str(g.id), g.blocks)
            if key not in seen:
                seen.add(key)
                groups.append(g)
    primary = fits.get(root) or fits.get("") or next(iter(fits.values()), None)
    out: dict[str, FitFunction] = {}
    for name, fn in functions.items():
        mine = {a: all_blocks[a] for a in fn.block_addresses if a in all_blocks}
        if not mine:
            continue
        addrs = set(fn.block_addresses)
        out[name] = FitFunction(
            name=name, blocks=mine, groups=tuple(g for g in groups if addrs & set(g.blocks)),
            overhead_ticks=primary.overhead_ticks if primary else None,
            validation=primary.validation if primary else {},
            extra=(primary.extra if primary and name == root else {}))
    return out


def read_fit(fit: Any) -> dict[str, FitFunction]:
    """function name → its fit, from a FitResult (``to_json()``) or the fit JSON."""
    d = _fit_dict(fit)
    fns = d.get("functions")
    out: dict[str, FitFunction] = {}
    if isinstance(fns, Mapping):
        for name, fd in fns.items():
            out[str(name)] = _parse_fit_function(str(name), fd, d)
    elif isinstance(fns, (list, tuple)):
        for fd in fns:
            name = fd.get("name") or fd.get("function")
            if not name:
                raise FitError("a function of the fit result has no name")
            out[str(name)] = _parse_fit_function(str(name), fd, d)
    elif "blocks" in d:
        name = d.get("name") or d.get("function") or ""
        out[str(name)] = _parse_fit_function(str(name), d, d)
    else:
        raise FitError("the fit result has neither 'functions' nor 'blocks'")
    return out


# --- the report's data ------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockRow:
    address: int
    offset: int
    size: int
    instructions: int
    disassembly: tuple[str, ...]
    count_min: int | None            # over the inputs; None when the block has no count column
    count_max: int | None
    count_mean: float | None
    estimable: bool
    cost_ticks: float | None         # None when not estimable alone
    ci95_ticks: tuple[float, float] | None
    solution_ticks: float | None     # the fit's particular solution (None: never executed)
    group: Any
    share: float | None              # of the mean predicted time of a root call
    wcet_count: int | None           # on the worst-case path
    loop_header: int | None          # innermost loop containing the block
    call: str | None                 # "g (internal)", "puts (imported)" ...

    @property
    def executed(self) -> bool:
        return bool(self.count_max)


@dataclass(frozen=True)
class GroupRow:
    id: Any
    blocks: tuple[int, ...]
    kind: str
    combinations: tuple[str, ...]
    advice: str | None
    share: float | None
    share_estimable: bool


@dataclass(frozen=True)
class Finding:
    message: str
    advice: str = ""


@dataclass(frozen=True)
class WcetSummary:
    ipet_ticks: float | None         # the bound: (point + margin) × (1 + dispersion)
    dispersion_ticks: float | None   # what the per-call dispersion adds (root only)
    dispersion: float | None         # relative excess of single calls over the mean model
    exceedance: float | None         # the probability per call the dispersion is set for
    dispersion_factors: Mapping[str, float]   # misfit, call, machine_speed (root only)
    envelopes: tuple[Any, ...]       # observed path envelopes the worst path touches (root)
    point_ticks: float | None        # with the point costs
    margin_ticks: float | None       # z · standard error of the worst path (None: no covariance)
    max_observed_ticks: float | None     # max over inputs of the median of its repeats
    max_observed_input: int | None
    max_observed_raw_ticks: float | None  # the slowest single timed call (may be preempted)
    max_predicted_ticks: float | None
    max_predicted_input: int | None
    closest_input: int | None        # the input predicted slowest: the nearest to the bound
    closest_distance: float | None   # Σ|counts − path counts| / Σ path counts, own blocks
    path: tuple[PathStep, ...]
    loops: tuple[LoopOutcome, ...]
    calls: tuple[CallOutcome, ...]
    path_residual: float | None      # distance of the worst path from the inputs' count space
    recursion_depth: int | None
    error: str | None                # why there is no bound


@dataclass(frozen=True)
class FunctionReport:
    name: str
    address: int
    is_root: bool
    blocks: tuple[BlockRow, ...]
    groups: tuple[GroupRow, ...]
    overhead_ticks: float | None
    validation: Mapping[str, Any]
    never_executed: tuple[int, ...]
    wcet: WcetSummary
    warnings: tuple[Finding, ...]
    edges: tuple[tuple[int, int], ...]
    back_edges: tuple[tuple[int, int], ...]
    entry: int
    exits: tuple[int, ...]
    fit_extra: Mapping[str, Any]

    def block(self, address: int) -> BlockRow:
        for b in self.blocks:
            if b.address == address:
                return b
        raise KeyError(hexaddr(address))

    def key(self, address: int) -> str:
        off = address - self.address
        return f"{self.name}+{off:#x}" if off >= 0 else f"{self.name}-{-off:#x}"


@dataclass(frozen=True)
class Report:
    root: str
    tsc_hz: float | None
    n_inputs: int
    n_repeats: int
    functions: tuple[FunctionReport, ...]
    measured_ticks: tuple[float, ...]    # per input: median of its repeats (root calls), at
                                         # the fit's reference speed when it followed one
    predicted_ticks: tuple[float, ...]   # per input: Σ count · solution + overhead
    warnings: tuple[Finding, ...]

    def function(self, name: str) -> FunctionReport:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def ns(self, ticks: float | None) -> float | None:
        return ticks_to_ns(ticks, self.tsc_hz)

    @property
    def residuals_ticks(self) -> np.ndarray:
        return np.asarray(self.measured_ticks) - np.asarray(self.predicted_ticks)


# --- building ---------------------------------------------------------------------------------

def _columns(columns: Sequence[Any], functions: Mapping[str, FunctionModel]
             ) -> list[tuple[str, int]]:
    """Count columns as (function, address); bare addresses are attributed to the function
    owning that block (the first one, if blocks are shared)."""
    owner: dict[int, str] = {}
    for name, fn in functions.items():
        for a in fn.block_addresses:
            owner.setdefault(a, name)
    out = []
    for c in columns:
        if isinstance(c, (tuple, list)) and len(c) == 2:
            out.append((str(c[0]), parse_addr(c[1])))
        else:
            a = parse_addr(c)
            out.append((owner.get(a, ""), a))
    return out


def _innermost_loop(fn: FunctionModel) -> dict[int, int]:
    inner: dict[int, int] = {}
    for lp in sorted(fn.loops, key=lambda lp: lp.depth):
        for a in lp.body:
            inner[a] = lp.header          # deeper loops overwrite
    return inner


def _call_label(fn: FunctionModel) -> dict[int, str]:
    out: dict[int, str] = {}
    for c in fn.calls:
        target = c.target_name or (hexaddr(c.target) if c.target is not None else "?")
        label = f"{'tail call' if c.tail else 'call'} {target} ({c.kind})"
        out[c.block] = f"{out[c.block]}; {label}" if c.block in out else label
    return out


def build_report(functions: Mapping[str, FunctionModel], root: str, fit: Any,
                 counts: np.ndarray, columns: Sequence[Any], times: np.ndarray | None,
                 wcet: WcetResult | BaseException | None, tsc_hz: float | None, *,
                 speed: Any = None) -> Report:
    """Gather everything into a :class:`Report`.

    ``counts[input, column]`` with ``columns`` naming each column as (function, address)
    (or a bare address); ``times[input, repeat]`` in ticks (NaN for a missing repeat) or
    None; ``wcet``: the :func:`wcetfit.wcet.interproc.wcet_bound` result, or the error that prevented
    it (its message is shown), or None.  ``tsc_hz``: ticks per second, for ns.
    ``speed``: the machine's speed over ``times`` that the fit divided out
    (a wcetfit.timing.speed.SpeedProfile); the measured-vs-predicted comparison is then made at the fit's
    reference speed, while "max observed" stays the time as measured.
    """
    if root not in functions:
        raise WcetfitError(f"no model of the root function {root!r}")
    fits = _by_function(read_fit(fit), functions, root)
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2:
        raise WcetfitError(f"counts must be 2-d [input, column], not shape {counts.shape}")
    cols = _columns(columns, functions)
    if counts.shape[1] != len(cols):
        raise WcetfitError(f"counts have {counts.shape[1]} columns but {len(cols)} are named")
    n_inputs = counts.shape[0]
    col_of = {c: j for j, c in enumerate(cols)}
    root_fit = fits.get(root)
    overhead = root_fit.overhead_ticks if root_fit else None
    if overhead is None:
        overhead = next((f.overhead_ticks for f in fits.values()
                         if f.overhead_ticks is not None), 0.0)

    # Predicted time of every input: Σ count · solution over every column + ε.
    sol = np.zeros(len(cols))
    missing_sol = []
    for j, (name, a) in enumerate(cols):
        fb = fits[name].blocks.get(a) if name in fits else None
        if fb is None:
            missing_sol.append((name, a))
        elif fb.solution_ticks is not None:
            sol[j] = fb.solution_ticks      # None: never executed, counts are 0 anyway
    contrib = counts * sol                                  # [input, column] ticks
    predicted = contrib.sum(axis=1) + overhead
    mean_pred = float(predicted.mean()) if n_inputs else float("nan")

    # Measured: median of the repeats of each input (robust to a preempted repeat).
    n_repeats = 0
    measured = np.full(n_inputs, np.nan)          # as timed
    at_reference = measured                       # with the machine's speed divided out
    raw_max = None
    if times is not None:
        t = np.asarray(times, dtype=float)
        if t.ndim == 1:
            t = t[:, None]
        if t.shape[0] != n_inputs:
            raise WcetfitError(f"times have {t.shape[0]} inputs, counts {n_inputs}")
        n_repeats = t.shape[1]
        with np.errstate(all="ignore"):
            ok = np.isfinite(t).any(axis=1)
            measured[ok] = np.nanmedian(t[ok], axis=1)
        raw_max = float(np.nanmax(t)) if np.isfinite(t).any() else None
        if speed is not None:
            try:
                ref = speed.at_reference(t)
            except ValueError as exc:
                raise WcetfitError(str(exc)) from None
            at_reference = np.full(n_inputs, np.nan)
            with np.errstate(all="ignore"):
                at_reference[ok] = np.nanmedian(ref[ok], axis=1)

    space = ObservedRowSpace(counts) if n_inputs else None
    global_warn: list[Finding] = []
    if missing_sol:
        global_warn.append(Finding(
            f"{len(missing_sol)} count column(s) have no fitted cost (e.g. "
            f"{missing_sol[0][0]} {hexaddr(missing_sol[0][1])}); predictions count them as 0",
            "refit with the current counts"))
    if tsc_hz is None:
        global_warn.append(Finding("the TSC rate is unknown: times are given in ticks only",
                                    "run `wcetfit calibrate` to measure it"))

    wres = wcet if isinstance(wcet, WcetResult) else None
    werr = None if wcet is None or wres is not None else str(wcet)

    # The worst path's count vector over all columns (callees inlined) and its estimability.
    path_residual = None
    if wres is not None and space is not None:
        x = np.zeros(len(cols))
        unplaced = 0.0
        for k, v in wres.inlined_counts.items():
            if k in col_of:
                x[col_of[k]] = v
            else:
                unplaced += v
        path_residual = space.residual(x) if not unplaced else 1.0

    names = [root] + sorted(n for n in fits if n != root and n in functions)
    if wres is not None:
        names += [n for n in wres.order if n not in names and n in functions]
    reports = []
    for name in names:
        reports.append(_function_report(
            functions[name], name == root, fits.get(name), counts, cols, col_of, contrib,
            mean_pred, space, wres, werr, path_residual, overhead if name == root else None,
            measured, predicted, raw_max))
    return Report(root=root, tsc_hz=tsc_hz, n_inputs=n_inputs, n_repeats=n_repeats,
                  functions=tuple(reports),
                  measured_ticks=tuple(float(v) for v in at_reference),
                  predicted_ticks=tuple(float(v) for v in predicted),
                  warnings=tuple(global_warn))


def _function_report(fn: FunctionModel, is_root: bool, ff: FitFunction | None,
                     counts: np.ndarray, cols: list[tuple[str, int]],
                     col_of: Mapping[tuple[str, int], int], contrib: np.ndarray,
                     mean_pred: float, space: ObservedRowSpace | None,
                     wres: WcetResult | None, werr: str | None, path_residual: float | None,
                     overhead: float | None, measured: np.ndarray, predicted: np.ndarray,
                     raw_max: float | None) -> FunctionReport:
    name = fn.name
    warns: list[Finding] = []
    ires = wres.functions.get(name) if wres is not None else None
    inner = _innermost_loop(fn)
    calls = _call_label(fn)
    n_inputs = counts.shape[0]

    rows = []
    for b in fn.blocks:
        j = col_of.get((name, b.address))
        fb = ff.blocks.get(b.address) if ff else None
        if j is not None and n_inputs:
            col = counts[:, j]
            cmin, cmax, cmean = int(col.min()), int(col.max()), float(col.mean())
            share = float(contrib[:, j].mean() / mean_pred) if mean_pred else None
        else:
            cmin = cmax = None
            cmean = share = None
        rows.append(BlockRow(
            address=b.address, offset=b.address - fn.address, size=b.size,
            instructions=b.n_instructions,
            disassembly=tuple(f"{i.address:#x}: {i.text()}" for i in b.instructions),
            count_min=cmin, count_max=cmax, count_mean=cmean,
            estimable=bool(fb.estimable) if fb else False,
            cost_ticks=fb.cost_ticks if fb else None,
            ci95_ticks=fb.ci95_ticks if fb else None,
            solution_ticks=fb.solution_ticks if fb else None,
            group=fb.group if fb else None, share=share,
            wcet_count=ires.block_counts.get(b.address) if ires else None,
            loop_header=inner.get(b.address), call=calls.get(b.address)))

    if ff is None:
        warns.append(Finding(f"{name}: no fit result for this function",
                              "run `wcetfit fit` on the current measurements"))

    # Groups, with the share of their blocks together when the inputs determine it.
    groups = []
    for g in (ff.groups if ff else ()):
        js = [col_of[(name, a)] for a in g.blocks if (name, a) in col_of]
        share, est = None, False
        if js and n_inputs and mean_pred:
            share = float(contrib[:, js].sum(axis=1).mean() / mean_pred)
            if space is not None:
                v = np.zeros(len(cols))
                v[js] = counts[:, js].mean(axis=0)
                est = space.residual(v, overhead=0.0) < ESTIMABLE_TOL
        groups.append(GroupRow(g.id, g.blocks, g.kind, g.combinations, g.advice, share, est))
        if g.kind.lower().startswith("observ"):
            labels = ", ".join(loop_key(fn, a) for a in g.blocks[:4])
            warns.append(Finding(
                f"{name}: blocks {labels} were not separated by the inputs (group {g.id})",
                g.advice or "vary the inputs so that these blocks execute different numbers "
                            "of times relative to each other"))

    never = tuple(r.address for r in rows if r.count_max == 0)
    if never:
        warns.append(Finding(
            f"{name}: {len(never)} block(s) never executed by the inputs: "
            + ", ".join(loop_key(fn, a) for a in never[:6]) + (" ..." if len(never) > 6 else "")
            + "; their cost is unknown"
            + (" and the worst-case path uses some of them" if ires and any(
                ires.block_counts.get(a, 0) for a in never) else ""),
            "add inputs that reach them (error paths, rare branches), or accept that the "
            "bound counts them at the fit's particular solution"))

    # WCET summary.
    closest = closest_dist = None
    max_pred = max_pred_i = max_obs = max_obs_i = None
    if is_root and n_inputs:
        max_pred_i = int(np.argmax(predicted))
        max_pred = float(predicted[max_pred_i])
        closest = max_pred_i
        if np.isfinite(measured).any():
            max_obs_i = int(np.nanargmax(measured))
            max_obs = float(measured[max_obs_i])
        if ires is not None:
            own = [(j, ires.block_counts.get(a, 0)) for (f, a), j in col_of.items() if f == name]
            tot = sum(c for _, c in own)
            if tot:
                closest_dist = float(sum(abs(counts[closest, j] - c) for j, c in own) / tot)
    summary = WcetSummary(
        ipet_ticks=(wres.upper_ticks if is_root else
                    ires.bound_ticks + (ires.margin_ticks or 0.0)) if ires else None,
        dispersion_ticks=wres.dispersion_ticks if (ires and is_root) else None,
        dispersion=wres.dispersion if (ires and is_root) else None,
        exceedance=wres.exceedance if (ires and is_root) else None,
        dispersion_factors=dict(wres.dispersion_factors) if (ires and is_root) else {},
        envelopes=tuple(wres.envelopes) if (ires and is_root) else (),
        point_ticks=ires.bound_ticks if ires else None,
        margin_ticks=(wres.margin_ticks if is_root else ires.margin_ticks) if ires else None,
        max_observed_ticks=max_obs, max_observed_input=max_obs_i,
        max_observed_raw_ticks=raw_max if is_root else None,
        max_predicted_ticks=max_pred, max_predicted_input=max_pred_i,
        closest_input=closest, closest_distance=closest_dist,
        path=ires.path if ires else (), loops=ires.loops if ires else (),
        calls=ires.calls if ires else (),
        path_residual=path_residual if is_root else None,
        recursion_depth=wres.recursion.get(name) if wres is not None else None,
        error=werr if ires is None else None)

    if ires is not None:
        for lo in ires.loops:
            if lo.bound.source == SOURCE_OBSERVED:
                warns.append(Finding(
                    f"{name}: loop {lo.name} is bounded by what the inputs reached "
                    f"({lo.bound.describe()})" + (f"; {lo.bound.note}" if lo.bound.note and
                                                   lo.bound.per_entry is None else ""),
                    f"if inputs can iterate more, add \"{lo.name}\" = N under [loops] in "
                    f"wcetfit.toml"))
        for co in ires.calls:
            if co.kind == CALL_IMPORTED:
                warns.append(Finding(
                    f"{name}: call to imported {co.target_name or '?'} at "
                    f"{loop_key(fn, co.block)}: its time varies with its arguments and is not "
                    f"modelled (the block's cost holds its mean over the inputs)",
                    "keep imported calls out of the analysed path, or bound them separately"))
            elif co.kind == CALL_INDIRECT:
                warns.append(Finding(
                    f"{name}: indirect call at {loop_key(fn, co.block)}: the callee is unknown "
                    f"and its time is not in the bound", "analyse the possible callees "
                                                         "separately and add their WCET"))
        if ires.status != "optimal":
            warns.append(Finding(f"{name}: {ires.status}", "the bound is HiGHS's proven "
                                                            "upper bound, not a path"))
    if is_root and werr:
        warns.append(Finding(f"no WCET bound: {werr}", ""))
    if is_root and wres is not None:
        # what the bound rests on beyond the CFG and the loop bounds (observed relations
        # and path envelopes, recursion bounded by observed activations, ...); imported and
        # indirect calls on the path have their own findings above
        for text in wres.warnings:
            if not text.startswith((f"{CALL_IMPORTED} call at", f"{CALL_INDIRECT} call at")):
                warns.append(Finding(text, ""))
    if is_root and path_residual is not None and path_residual > ESTIMABLE_TOL:
        warns.append(Finding(
            "the worst-case path uses count combinations the inputs never produced: its "
            "predicted time depends on the fit's particular solution, not only on measurements",
            "add inputs closer to the worst case (e.g. longest loops, the branches of the path)"))
    if is_root and summary.ipet_ticks is not None and max_obs is not None \
            and summary.ipet_ticks < max_obs:
        warns.append(Finding(
            f"the IPET bound ({summary.ipet_ticks:.0f} ticks) is below the slowest input's "
            f"median ({max_obs:.0f} ticks)",
            "block costs depend on data or cache state here: treat the bound with suspicion"))
    val = dict(ff.validation) if ff else {}
    if is_root and ff is not None:
        for text in ff.extra.get("warnings", []) or []:
            warns.append(Finding(f"fit: {text}", ""))
        fit_rows = ff.extra.get("rows")
        if isinstance(fit_rows, Mapping) and fit_rows.get("rejected"):
            reasons = fit_rows.get("rejected_by_reason") or {}
            warns.append(Finding(
                f"fit: {fit_rows['rejected']} of {fit_rows.get('total', '?')} rows rejected "
                f"as outliers"
                + (" (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")"
                   if reasons else ""),
                "many rejections point to preemption (pin the core, quiet the machine) or to "
                "costs that depend on data"))
    if is_root:
        med, p95 = _num(val.get("median_rel_error")), _num(val.get("p95_rel_error"))
        if med is not None and med > GOAL_MEDIAN_REL:
            warns.append(Finding(f"held-out median relative error {med:.2%} is above the "
                                  f"{GOAL_MEDIAN_REL:.0%} goal",
                                  "costs may depend on data; split blocks or add inputs"))
        if p95 is not None and p95 > GOAL_P95_REL:
            warns.append(Finding(f"held-out p95 relative error {p95:.2%} is above the "
                                  f"{GOAL_P95_REL:.0%} goal",
                                  "look at the worst-predicted inputs for preemption or "
                                  "data-dependent blocks"))

    back = tuple(e for lp in fn.loops for e in lp.back_edges)
    return FunctionReport(
        name=name, address=fn.address, is_root=is_root, blocks=tuple(rows),
        groups=tuple(groups), overhead_ticks=overhead, validation=val, never_executed=never,
        wcet=summary, warnings=tuple(warns), edges=tuple(dict.fromkeys(fn.edges)),
        back_edges=back, entry=fn.entry, exits=tuple(fn.exits),
        fit_extra=dict(ff.extra) if ff else {})


__all__ = ["BlockRow", "FitBlock", "FitFunction", "FitGroup", "FunctionReport", "GroupRow",
           "Report", "TICKS_NOTE", "TICKS_UNIT", "Finding", "WcetSummary", "build_report",
           "describe_block", "read_fit", "ticks_to_ns"]
