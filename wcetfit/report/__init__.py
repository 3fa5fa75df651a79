"""The report: plain, frozen data about where a call's time goes and how long it can take.

:func:`build_report` gathers the static model, the fit, the measured counts and times and
the WCET result into a :class:`Report`; the formats render it:

- :mod:`wcetfit.report.text`  terminal (rich tables)
- :mod:`wcetfit.report.json`  ``"schema": "wcetfit.report/3"``
- :mod:`wcetfit.report.html`  one self-contained HTML file (CFG as SVG, plots, tables)

Units: every time is in TSC ticks (the time-stamp counter's unit, *not* core cycles; the
TSC runs at a fixed rate whatever the core's clock) and, when the TSC rate is known, in
nanoseconds = ticks / tsc_hz · 1e9.

The fit is read through its JSON form (:mod:`wcetfit.report.fitread`), so any object with
``to_json()`` or the dict itself will do.  The terminal's default view is
:mod:`wcetfit.report.summary` (one screen); :mod:`wcetfit.report.text` has the full tables.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.numbering import input_label  # noqa: F401 -- named here too
from wcetfit.errors import WcetfitError
from wcetfit.fit.result import KIND_OVERHEAD
from wcetfit.model import (ABORT_CALLS, CALL_IMPORTED, CALL_INDIRECT, FunctionModel,
                           failure_exits, hexaddr, parse_addr)
from wcetfit.report.fitread import FitBlock, FitFunction, FitGroup, _by_function, _num, read_fit
from wcetfit.wcet.dispersion import (MIN_EXTRAPOLATED_CALLS, factor_setter,
                                     too_few_to_extrapolate)
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




def reach_advice(refusal: str | None, what: str) -> str:
    """The advice to look for ``what`` (inputs reaching some blocks) with `wcetfit reach`,
    or why reach cannot (``refusal``: wcetfit.search.witness.reach_refusal)."""
    if refusal is None:
        return f"`wcetfit reach` looks for {what}"
    return (f"`wcetfit reach` cannot look for {what} here ({refusal}): vary the inputs in "
            f"generate()")


def ticks_to_ns(ticks: float | None, tsc_hz: float | None) -> float | None:
    if ticks is None or tsc_hz is None or not tsc_hz or not math.isfinite(ticks):
        return None
    return ticks / tsc_hz * 1e9


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
    # a callee's block: its count on the root's worst path, the callee's calls inlined
    # (WcetResult.inlined_counts; None when not known): what the root's bound charges,
    # where ``wcet_count`` is the callee's own worst path over all its activations
    root_path_count: float | None = None

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


# Imported functions of no arguments that return a pointer to per-thread data (glibc's
# ctype tables, errno): a call of them takes the same few instructions every time, and
# "its time varies with its arguments" was said of them (libuuid's uuid_parse_range).
CONSTANT_TIME_IMPORTS = frozenset({
    "__ctype_b_loc", "__ctype_tolower_loc", "__ctype_toupper_loc", "__errno_location",
    "__h_errno_location", "__libc_single_threaded", "pthread_self"})


def _name_of_import(name: str | None) -> str:
    """An import's symbol name without its version or library ("__errno_location@GLIBC_2.2.5
    (libc.so.6)" → "__errno_location")."""
    return (name or "").split("@")[0].split(" ")[0]


# The model's worst path (point + margin) below this share of the slowest input's median
# is said: machine speed and call noise move a median by a few percent.
MODEL_BELOW = 0.95

# Differences of the model from a measured median within this many TSC steps are not said:
# the counter does not resolve them (libjpeg's jdiv_round_up, one block: medians of 52
# and 78 ticks with a step of 26, a prediction of 61, were said to be both over- and
# under-predicted by the model, in two warnings).
UNRESOLVED_STEPS = 2


@dataclass(frozen=True)
class Finding:
    message: str
    advice: str = ""

    @classmethod
    def of(cls, item: Any, prefix: str = "") -> "Finding":
        """A finding from whatever a stage reports: a string, a mapping or an object with
        ``message``/``text`` and ``remedy``/``advice`` (the stages' warnings grow fields;
        the report lists them all the same way)."""
        if isinstance(item, Finding):
            return cls(prefix + item.message, item.advice)
        get = item.get if isinstance(item, Mapping) else (lambda k: getattr(item, k, None))
        if isinstance(item, str):
            return cls(prefix + item)
        msg = get("message") or get("text")
        adv = get("remedy") or get("advice") or ""
        return cls(prefix + (str(msg) if msg else str(item)), str(adv))


@dataclass(frozen=True)
class WcetSummary:
    ipet_ticks: float | None         # the bound: (point + margin) × (1 + dispersion)
    dispersion_ticks: float | None   # what the per-call dispersion adds (root only)
    dispersion: float | None         # relative excess of single calls over the mean model
    exceedance: float | None         # the probability per call the dispersion is set for
    dispersion_factors: Mapping[str, float]   # misfit, call, machine_speed (root only)
    # the call farthest above its input's mean: input, call_ticks, mean_ticks (root only)
    dispersion_driver: Mapping[str, float]
    envelopes: tuple[Any, ...]       # observed path envelopes the worst path touches (root)
    relations: tuple[Any, ...]       # observed count relations the bound keeps to (root)
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
    # The bracket (wcetfit.wcet.bracket): the slowest measured input by its number (as
    # generate(ctx) saw it; searched inputs are numbered from wcetfit.search's SEARCH_BASE),
    # its arguments in short, whether the worst-case search found it, and the loops and
    # blocks the worst path runs more often than any input did.
    slowest_number: int | None = None
    slowest_arguments: str | None = None
    slowest_searched: bool = False
    beyond: tuple[Any, ...] = ()
    # the slowest call that is the function's own time (no interrupt: the rule the bound's
    # cover uses, wcetfit.wcet.dispersion), as timed, and its input's number: the maximum
    # observed execution time, the bracket's lower end for single calls (root only)
    slowest_call_ticks: float | None = None
    slowest_call_number: int | None = None
    slowest_call_others: tuple[float, float] | None = None   # its input's other own calls
    # (check seed, fresh input) when the slowest own call is a check's call of an adopted
    # input (wcetfit.search.store.AdoptedCall)
    slowest_call_check: tuple[int, int] | None = None
    # the input predicted slowest (max_predicted_input) as measured: the median of its
    # calls with the machine's speed divided out, what its prediction is of (root only)
    max_predicted_measured_ticks: float | None = None
    # the misfit factor taken from the inputs near the worst path, and how much more the
    # others missed (wcetfit.wcet.dispersion.MisfitScope.to_dict; empty: every input's)
    misfit_scope: Mapping[str, float] = field(default_factory=dict)
    # how a call's excess grows with the input's length (wcetfit.wcet.dispersion.call_growth;
    # root only, None elsewhere)
    call_growth: float | None = None
    # the machine's slowest speed the bound covers: as the timing run measured it and as
    # [wcet] machine_speed declared it (None: not declared; root only)
    machine_speed_measured: float | None = None
    machine_speed_declared: float | None = None
    # the bound at other exceedances per call, (exceedance, ticks), most probable first,
    # the bound's own among them (wcetfit.wcet.dispersion.exceedance_curve; root only)
    exceedance_curve: tuple[tuple[float, float], ...] = ()
    # the calls the single-call factors were taken from (root only; below
    # wcetfit.wcet.dispersion.MIN_EXTRAPOLATED_CALLS: the largest seen, not extrapolated)
    dispersion_calls: int | None = None
    # measured inputs that break the constraints the bound keeps to (a [loops] or [flow]
    # fact they contradict; wcetfit.wcet.result.BrokenInputs): the bound is only for the
    # calls that keep them (root only)
    broken_inputs: Any = None
    # the timed calls taken for interrupts and left out of the bound, against the interrupts
    # that can explain them (wcetfit.wcet.result.WcetResult.set_aside; root only)
    set_aside: Mapping[str, Any] = field(default_factory=dict)
    # [wcet] unreached: "observed" (blocks no input ran left out of the worst path) or
    # "require" (costed at the most their instructions can take)
    unreached_policy: str = "observed"

    def width(self) -> Any:
        """Where bound ÷ slowest input comes from (wcetfit.wcet.bracket.BracketWidth), or
        None when a figure is missing."""
        from wcetfit.wcet.bracket import bracket_width
        return bracket_width(self.ipet_ticks, self.point_ticks, self.margin_ticks,
                             self.max_predicted_ticks, self.max_predicted_measured_ticks,
                             self.max_observed_ticks)


# How to time everything again, said where a disturbed timing run is the likely cause:
# the command, and what it costs (a new user read "`wcetfit time --fresh`" as re-timing
# only, where --fresh discards every stored measurement and the searched inputs).
RETIME = ("`wcetfit analyze --fresh` measures everything again, the worst-case search "
          "included: it discards what is stored")


def _ticks_and_ns(ticks: float, tsc_hz: float | None) -> str:
    """'1,234 ticks (475 ns)': every figure of a warning with its unit and its time."""
    ns = ticks_to_ns(ticks, tsc_hz)
    return f"{ticks:,.0f} ticks" + (f" ({ns:,.0f} ns)" if ns is not None else "")


# The model's prediction of the input predicted slowest over its measured time above which
# the report says the bound rests on an over-prediction (isort: its reverse-sorted inputs,
# which run the worst path's counts exactly, predicted 36,262 ticks and measured 26,200:
# ×1.38 of a bound 1.80× the slowest input).  Below it, the error is the held-out error's
# size (median 5–25 % on the samples), which the fit quality already states.
OVER_PREDICTED = 1.15


def _uncharged_fact(name: str, fn: Any, lo: LoopOutcome, rows: Sequence[BlockRow]
                    ) -> Finding:
    """The warning for a loop bound the user gave that the worst path does not reach:
    its iterations cost nothing in the fit (their blocks held at 0 ticks, or costs the
    inputs do not determine), or the path's other constraints keep it below."""
    body = next((set(lp.body) for lp in fn.loops if lp.header == lo.header), set())
    inside = [r for r in rows if r.address in body]
    per_pass = sum(r.solution_ticks or 0.0 for r in inside)
    allowed = (lo.bound.per_entry * lo.entries if lo.bound.per_entry is not None
               else lo.bound.total)
    reached = max((r.count_max or 0 for r in inside if r.address == lo.header), default=0)
    free = per_pass <= 0.5
    why = (f"its iterations cost nothing in the fit ({len(inside)} block(s), "
           f"{per_pass:.1f} ticks together: costs the inputs do not determine apart from "
           f"the others', or held at 0)" if free else
           "the path's other constraints keep it there (the relations the inputs showed "
           "between its blocks and loops, the span of the measured counts, or a [flow] "
           "fact)")
    if free and allowed and 2 * reached >= allowed:
        # the inputs came within half of the fact (libbz2's compressor: its fallback
        # sort, iterated 0 to 2,048 times of 2,600, in a group of 616 blocks): more such
        # inputs teach the fit nothing
        remedy = (f"the inputs do iterate it (its header ran up to {reached:,} times in a "
                  f"call), but the fit cannot tell its blocks' costs from those of the "
                  f"blocks it shares a group with: inputs that run it in other proportions "
                  f"to them (see where the time goes) let the bound charge it")
    elif free:
        remedy = (f"add inputs that iterate it from few to many times (its header ran at "
                  f"most {reached:,} times in a measured call), so that the fit learns "
                  f"what an iteration costs")
    else:
        # (an observed relation is what the default keeps; the remedy is to drop them,
        # not to add inputs the fit has already)
        remedy = ("if calls can iterate it more than the inputs did, [wcet] observed_paths "
                  "= false charges the fact (the worst path then takes every loop at its "
                  "own bound: a looser bound); a [flow] fact that holds it there is yours "
                  "to keep")
    return Finding(
        f"{name}: loop {lo.name}'s bound from [loops] ({lo.bound.describe()}) is not "
        f"charged: the worst path takes {lo.back_edges:,} iteration(s) in "
        f"{lo.entries:,} entr{'y' if lo.entries == 1 else 'ies'}, where it allows "
        f"{allowed:,}, because {why}; the bound is not for calls that iterate it more",
        remedy)


def _over_predicted_path(name: str, w: "WcetSummary", input_numbers: Any,
                         hz: float | None, quantum: float = 0.0) -> Finding | None:
    """A finding when the model over-predicts the input nearest the worst path (the one
    predicted slowest) by more than :data:`OVER_PREDICTED`: the bound is made of the worst
    path's prediction, so it is that much above what the path was measured to take."""
    from wcetfit.numbering import input_label

    pred, meas, row = w.max_predicted_ticks, w.max_predicted_measured_ticks, w.max_predicted_input
    if pred is None or meas is None or row is None or meas <= 0 or pred / meas <= OVER_PREDICTED \
            or pred - meas <= UNRESOLVED_STEPS * quantum:
        return None
    number = int(input_numbers[row]) if input_numbers is not None else row
    exact = (" (its counts are the worst path's)" if w.closest_distance == 0.0 else
             f" (its counts {w.closest_distance:.0%} from the worst path's)"
             if w.closest_distance is not None else "")

    return Finding(
        f"{name}: the model predicts {input_label(number)}, the input predicted slowest"
        f"{exact}, at {_ticks_and_ns(pred, hz)}, {pred / meas - 1:.0%} above its measured "
        f"{_ticks_and_ns(meas, hz)} "
        f"(machine speed divided out): one cost per block over-predicts the long paths, and "
        f"the bound, made of the worst path's prediction, is that much above what the path "
        f"was measured to take",
        "the bound stays safe, and loose by that much; the usual cause is costs that vary "
        "with data the block counts do not see (branch outcomes, the lengths of inner-loop "
        "runs)")


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
    # blocks of other functions in this function's groups (a whole-call fit's group spans
    # the root's callees), named within the function that holds them
    other_keys: Mapping[int, str] = field(default_factory=dict)
    # the timed calls returned another value than the counted call (wcetfit.timing.state):
    # the times, and the fit and slowest input made of them, are of another path
    timed_other_path: bool = False
    # every input ran the same blocks the same number of times, in a function with
    # branches: the bound is that one path's (root only)
    inputs_one_path: bool = False
    # most timed inputs returned a value that reads as an error code (wcetfit.timing.
    # state.error_returns, an ErrorReturns); root only
    error_returns: Any = None

    @property
    def no_bound_of_its_own(self) -> bool:
        """A callee whose blocks the inputs did not separate from its callers' (OpenSSL's
        OPENSSL_cleanse under MD4, its loop run 18 times): its costs sit in theirs, so its
        own sum is 0, which is not a WCET of 0; or is whatever the fit's particular
        solution puts there (nettle's _nettle_sha256_compress_sha_ni at 20.1 ticks, a
        SHA-256 block in 8 ns; liblzma's match finders at 0 ticks for 4,092 activations)."""
        w = self.wcet
        return not self.is_root and w.ipet_ticks is not None and (
            w.ipet_ticks < 1 or not self.has_own_costs)

    @property
    def has_own_costs(self) -> bool:
        """Whether the inputs determine some of the function's block costs apart from
        other functions': a block estimable alone, or a group of its own blocks only (or
        none of its blocks ran, and nothing is shared)."""
        mine = {b.address for b in self.blocks}
        if any(b.estimable for b in self.blocks if b.executed):
            return True
        return any(set(g.blocks) <= mine for g in self.groups if g.kind != "unexecuted") \
            or not any(b.executed for b in self.blocks)

    def block(self, address: int) -> BlockRow:
        for b in self.blocks:
            if b.address == address:
                return b
        raise KeyError(hexaddr(address))

    def key(self, address: int) -> str:
        if address in self.other_keys:
            return self.other_keys[address]
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
    input_numbers: tuple[int, ...] = ()  # per row: the input's number (generate's, or
                                         # SEARCH_BASE + k for a searched one)
    # inputs the count or timing run left out (crashed, hung, failed a check): none of the
    # figures are of them (the first warning names them)
    failed_inputs: int = 0
    # why `wcetfit reach` cannot explore the root's arguments (None: it can), so that the
    # advice does not send the user to it (libm's cbrt: "not explored: argument 0 is a
    # float", where the report had named reach for its 11 blocks no input ran)
    reach_refusal: str | None = None

    def input_name(self, row: int | None) -> str:
        """The input of row ``row`` as the user names it (:func:`input_label`)."""
        if row is None:
            return "no input"
        numbers = self.input_numbers or range(self.n_inputs)
        return input_label(numbers[int(row)] if 0 <= int(row) < len(numbers) else row)

    def function(self, name: str) -> FunctionReport:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def ns(self, ticks: float | None) -> float | None:
        return ticks_to_ns(ticks, self.tsc_hz)

    def above_root_bound(self, fr: FunctionReport) -> bool:
        """Whether a callee's own bound (its worst path over every context, each loop at
        the most any input ran it per entry) is above the root's bound.  One activation of
        it runs inside one call of the root, so the root's bound caps it, and the callee's
        figure is only how far its context-free loop bounds multiply (liblzma's
        lzma_block_buffer_encode: 387,796,479,366 ticks, 149 s, under a root bound of
        8,218,150)."""
        root = self.functions[0] if self.functions else None
        if fr.is_root or root is None or not root.is_root or root.wcet.error \
                or root.wcet.ipet_ticks is None or fr.wcet.ipet_ticks is None \
                or fr.no_bound_of_its_own:
            return False
        return fr.wcet.ipet_ticks > root.wcet.ipet_ticks

    @property
    def residuals_ticks(self) -> np.ndarray:
        return np.asarray(self.measured_ticks) - np.asarray(self.predicted_ticks)


def activations_of(extra: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The per-activation fit's JSON (``ActivationAnalysis.to_json``) when the fit's costs
    come from per-function activation fits, else None."""
    act = extra.get("activations") if isinstance(extra, Mapping) else None
    return act if isinstance(act, Mapping) else None


def heldout_errors(validation: Mapping[str, Any], extra: Mapping[str, Any] | None
                   ) -> tuple[float | None, float | None, str]:
    """(median, p95 held-out relative error of root calls, what they are of): with
    per-activation fits, the root's calls predicted from the activation costs with the
    activation fits and κ refitted without each fold's inputs (the whole-call fit's own
    figures are of a fit no longer predicted with); else the whole-call fit's."""
    act = activations_of(extra)
    check = act.get("root_check") if act else None
    if isinstance(check, Mapping):
        return (_num(check.get("heldout_median_rel_error")),
                _num(check.get("heldout_p95_rel_error")),
                "root calls predicted from activation costs: ")
    return _num(validation.get("median_rel_error")), _num(validation.get("p95_rel_error")), ""


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
                 speed: Any = None, input_numbers: Sequence[int] | None = None,
                 describe_input: Any = None, reach_refusal: str | None = None) -> Report:
    """Gather everything into a :class:`Report`.

    ``counts[input, column]`` with ``columns`` naming each column as (function, address)
    (or a bare address); ``times[input, repeat]`` in ticks (NaN for a missing repeat) or
    None; ``wcet``: the :func:`wcetfit.wcet.interproc.wcet_bound` result, or the error that prevented
    it (its message is shown), or None.  ``tsc_hz``: ticks per second, for ns.
    ``input_numbers``: each row's input number (default 0, 1, …); ``describe_input``: input
    number → a short summary of its arguments (or None), for the slowest input.
    ``reach_refusal``: why `wcetfit reach` cannot explore the function's arguments
    (wcetfit.search.witness.reach_refusal), so that no advice sends the user to it.
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
    raw_max_excess = None
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
        if raw_max is not None:
            # how far the slowest call is above its own input's median: whether it can
            # have been an interrupt (wcetfit.wcet.dispersion.MIN_INTERRUPT_NS) is said
            # from this, not assumed
            i_max = int(np.nanargmax(np.nanmax(np.where(np.isfinite(t), t, -np.inf), axis=1)))
            raw_max_excess = raw_max - float(np.nanmedian(t[i_max]))
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
    owner: dict[int, FunctionModel] = {}
    for f in functions.values():
        for a in f.block_addresses:
            owner.setdefault(a, f)

    def block_key(a: int) -> str:
        return loop_key(owner[a], a) if a in owner else hexaddr(a)

    columns_at: dict[int, list[int]] = {}       # block address → its count columns
    for (f, a), j in col_of.items():
        columns_at.setdefault(a, []).append(j)
    reports = []
    for name in names:
        reports.append(_function_report(
            functions[name], name == root, fits.get(name), counts, cols, col_of, contrib,
            mean_pred, space, wres, werr, path_residual, overhead if name == root else None,
            measured, predicted, raw_max, input_numbers=input_numbers,
            at_reference=at_reference,
            describe_input=describe_input, block_key=block_key,
            raw_max_above_ns=ticks_to_ns(raw_max_excess, tsc_hz), tsc_hz=tsc_hz,
            epsilon_share=(overhead / mean_pred if mean_pred and overhead else 0.0),
            columns_at=columns_at, quantum=float(getattr(fit, "quantum_ticks", 0.0) or 0.0),
            reach_refusal=reach_refusal))
    return Report(root=root, tsc_hz=tsc_hz, n_inputs=n_inputs, n_repeats=n_repeats,
                  functions=tuple(reports), reach_refusal=reach_refusal,
                  measured_ticks=tuple(float(v) for v in at_reference),
                  predicted_ticks=tuple(float(v) for v in predicted),
                  warnings=tuple(global_warn),
                  input_numbers=tuple(int(v) for v in (input_numbers if input_numbers
                                                       is not None else range(n_inputs))))


def _function_report(fn: FunctionModel, is_root: bool, ff: FitFunction | None,
                     counts: np.ndarray, cols: list[tuple[str, int]],
                     col_of: Mapping[tuple[str, int], int], contrib: np.ndarray,
                     mean_pred: float, space: ObservedRowSpace | None,
                     wres: WcetResult | None, werr: str | None, path_residual: float | None,
                     overhead: float | None, measured: np.ndarray, predicted: np.ndarray,
                     raw_max: float | None, *, input_numbers: Sequence[int] | None = None,
                     describe_input: Any = None, block_key: Any = None,
                     raw_max_above_ns: float | None = None,
                     tsc_hz: float | None = None,
                     epsilon_share: float = 0.0,
                     columns_at: Mapping[int, Sequence[int]] = {},
                     at_reference: np.ndarray | None = None,
                     quantum: float = 0.0,
                     reach_refusal: str | None = None) -> FunctionReport:
    name = fn.name

    def both(ticks: float) -> str:
        return _ticks_and_ns(ticks, tsc_hz)

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
            loop_header=inner.get(b.address), call=calls.get(b.address),
            root_path_count=(wres.inlined_counts.get((fn.name, b.address))
                             if wres is not None and not is_root else None)))

    if ff is None:
        warns.append(Finding(f"{name}: no fit result for this function",
                              "run `wcetfit fit` on the current measurements"))

    # Groups, with the share of their blocks together when the inputs determine it.
    groups = []
    for g in (ff.groups if ff else ()):
        # a group's share is of all its blocks, in whichever function each lies (a whole-
        # call group spans the root and its callees; each section showed its own part as
        # the group's share: libm fmod's group 0 was ≈0.0 % in one section and ≈89.7 % in
        # another), and of ε too for the group ε is in (its time is partly theirs)
        js = sorted({j for a in g.blocks for j in columns_at.get(a, ())})
        share, est = None, False
        if js and n_inputs and mean_pred:
            share = float(contrib[:, js].sum(axis=1).mean() / mean_pred)
            if g.kind == KIND_OVERHEAD:
                share += epsilon_share
            if space is not None:
                v = np.zeros(len(cols))
                v[js] = counts[:, js].mean(axis=0)
                est = space.residual(v, overhead=0.0) < ESTIMABLE_TOL
        groups.append(GroupRow(g.id, g.blocks, g.kind, g.combinations, g.advice, share, est))
    # One finding for all the groups the inputs left together (one per group repeated the
    # same remedy a dozen times on a library function).
    unseparated = [g for g in (ff.groups if ff else ()) if g.kind.lower().startswith("observ")]
    if unseparated:
        def _labels(g) -> str:
            more = len(g.blocks) - 4
            return (", ".join((block_key or (lambda a: loop_key(fn, a)))(a)
                              for a in g.blocks[:4])
                    + (f" and {more} more" if more > 0 else ""))
        shown = unseparated[:3]
        text = "; ".join(f"group {g.id}: {_labels(g)}" for g in shown)
        if len(unseparated) > len(shown):
            text += f"; {len(unseparated) - len(shown)} more group(s) (--full lists them)"
        advice = next((f"group {g.id}: {g.advice}" for g in unseparated if g.advice), None)
        if advice and len(unseparated) > 1:
            advice += "; --full gives each group's relations"
        # The inputs may be unable to: libm's pow tests a `jp` after `ucomisd` (taken on
        # NaN only) after an earlier test has returned for NaN, and the advice alone sent
        # the user looking for an input that does not exist.
        warns.append(Finding(
            f"{name}: {len(unseparated)} group(s) of blocks were not separated by the "
            f"inputs ({text})",
            (advice or "vary the inputs so that these blocks execute different numbers "
                       "of times relative to each other")
            + f"; {reach_advice(reach_refusal, 'such an input')}; where none exists (a "
              "branch that an earlier test decides), nothing is missing: the bound keeps "
              "the relation every input showed and charges the group's measured sum"))

    branches = any(len(set(fn.successors(b.address))) > 1 for b in fn.blocks) \
        or bool(fn.jump_tables) or any(c.kind != CALL_IMPORTED for c in fn.calls)
    if is_root and n_inputs >= 2 and len(np.unique(counts, axis=0)) == 1 and not branches:
        # a function with one path (libpng's png_get_uint_32: one block): no input can
        # take another, so there is nothing to vary
        n = int(counts.sum(axis=1)[0])
        warns.append(Finding(
            f"{name}: it has one path ({n:,} block execution{'s' if n != 1 else ''}, no "
            f"branch): every input runs it, and the bound is its time", ""))
    inputs_one_path = (is_root and n_inputs >= 2 and branches
                       and len(np.unique(counts, axis=0)) == 1)
    if inputs_one_path:
        # every input took one path: the bound is that path's time, whatever else the
        # function can do (expat's XML_Parse with the parser init left NULL returns at
        # its first check on every input)
        warns.append(Finding(
            f"{name}: all {n_inputs} inputs ran the same blocks the same number of times: "
            f"the bound describes that one path ({int(counts.sum(axis=1)[0]):,} block "
            f"executions) and nothing else the function does",
            "vary the inputs; an argument left NULL or fixed in inputs.py (see its "
            "comments) often stops the function at its first check"))

    never = tuple(r.address for r in rows if r.count_max == 0)
    failing = failure_exits(fn, never)
    if failing:
        # a call of the stack protector's or an assertion's failure: no correct call
        # reaches it, and "add inputs that reach them" asked for a corrupted stack
        # (libpng's png_sig_cmp+0x87, a call of __stack_chk_fail)
        warns.append(Finding(
            f"{name}: {len(failing)} block(s) never executed are failure exits ("
            + ", ".join(f"{loop_key(fn, a)} calls {t}" for a, t in list(failing.items())[:3])
            + (" …" if len(failing) > 3 else "")
            + ("): only a corrupted stack or buffer reaches them"
               if not set(failing.values()) <= ABORT_CALLS else
               "): a call that reaches them ends the program (an assertion failed) and "
               "has no time to bound")
            + ("; the bound leaves them out" if wres is None
               or wres.unreached_policy == "observed" else ""), ""))
        never_other = tuple(a for a in never if a not in failing)
    else:
        never_other = never
    if never_other:
        never_shown = never_other
        used = bool(ires and any(ires.block_counts.get(a, 0) for a in never_shown))
        # what the bound does with them follows [wcet] unreached: left out ("observed",
        # the default: the first WCET warning says so), or costed at the most their
        # instructions can take ("require": wcetfit.wcet.unreached)
        left_out = wres is not None and wres.unreached_policy == "observed"
        warns.append(Finding(
            f"{name}: {len(never_shown)} block(s) never executed by the inputs: "
            + ", ".join(loop_key(fn, a) for a in never_shown[:6])
            + (" ..." if len(never_shown) > 6 else "")
            + "; their cost is not measured"
            + ("; the worst-case path runs some of them, each at the most its instructions "
               "can take" if used else "")
            + ("; the bound leaves them out of the worst path" if left_out and not used
               else ""),
            "add inputs that reach them (error paths, rare branches)"
            + ("" if left_out else ": their measured costs replace the ceiling")))

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
    bracket_fields: dict[str, Any] = {}
    if is_root and max_obs_i is not None:
        from wcetfit.wcet.bracket import beyond_inputs
        numbers = (np.asarray(input_numbers) if input_numbers is not None
                   else np.arange(n_inputs))
        number = int(numbers[max_obs_i])
        from wcetfit.numbering import ADOPT_BASE, SEARCH_BASE
        own_call = dict(getattr(wres, "slowest_call", {}) or {}) if wres is not None else {}
        bracket_fields = dict(
            slowest_call_ticks=own_call.get("ticks"),
            slowest_call_number=(int(own_call["input"]) if "input" in own_call else None),
            slowest_call_others=((own_call["others_min_ticks"], own_call["others_max_ticks"])
                                 if "others_min_ticks" in own_call else None),
            slowest_call_check=((int(own_call["check_seed"]), int(own_call["fresh_input"]))
                                if "check_seed" in own_call else None),
            max_predicted_measured_ticks=(
                float(at_reference[max_pred_i]) if at_reference is not None
                and max_pred_i is not None and np.isfinite(at_reference[max_pred_i]) else None),
            slowest_number=number, slowest_searched=SEARCH_BASE <= number < ADOPT_BASE,
            slowest_arguments=describe_input(number) if describe_input else None,
            beyond=beyond_inputs(fn, ires.block_counts, cols, counts, numbers)
            if ires is not None else ())
    summary = WcetSummary(
        ipet_ticks=(wres.upper_ticks if is_root else
                    ires.bound_ticks + (ires.margin_ticks or 0.0)) if ires else None,
        dispersion_ticks=wres.dispersion_ticks if (ires and is_root) else None,
        dispersion=wres.dispersion if (ires and is_root) else None,
        exceedance=wres.exceedance if (ires and is_root) else None,
        dispersion_factors=dict(wres.dispersion_factors) if (ires and is_root) else {},
        dispersion_driver=dict(getattr(wres, "dispersion_driver", {}) or {})
        if (ires and is_root) else {},
        misfit_scope=dict(getattr(wres, "misfit_scope", {}) or {}) if (ires and is_root) else {},
        call_growth=getattr(wres, "call_growth", None) if (ires and is_root) else None,
        machine_speed_measured=getattr(wres, "machine_speed_measured", None)
        if (ires and is_root) else None,
        machine_speed_declared=getattr(wres, "machine_speed_declared", None)
        if (ires and is_root) else None,
        exceedance_curve=wres.bound_at_exceedances() if (ires and is_root) else (),
        dispersion_calls=wres.dispersion_calls if (ires and is_root) else None,
        broken_inputs=ires.broken_inputs if (ires and is_root) else None,
        set_aside=dict(getattr(wres, "set_aside", {}) or {}) if (ires and is_root) else {},
        unreached_policy=getattr(wres, "unreached_policy", "observed") if wres is not None
        else "observed",
        envelopes=tuple(wres.envelopes) if (ires and is_root) else (),
        relations=tuple(getattr(wres, "relations", ())) if (ires and is_root) else (),
        # the root's point is the whole bound's: callees bounded over all their
        # activations at once are added to it, not to the root's own program
        point_ticks=(wres.bound_ticks if is_root else ires.bound_ticks) if ires else None,
        margin_ticks=(wres.margin_ticks if is_root else ires.margin_ticks) if ires else None,
        max_observed_ticks=max_obs, max_observed_input=max_obs_i,
        max_observed_raw_ticks=raw_max if is_root else None,
        max_predicted_ticks=max_pred, max_predicted_input=max_pred_i,
        closest_input=closest, closest_distance=closest_dist,
        path=ires.path if ires else (), loops=ires.loops if ires else (),
        calls=ires.calls if ires else (),
        path_residual=path_residual if is_root else None,
        recursion_depth=wres.recursion.get(name) if wres is not None else None,
        error=werr if ires is None else None, **bracket_fields)

    over = (_over_predicted_path(name, summary, input_numbers, tsc_hz, quantum)
            if is_root else None)
    if over is not None:
        warns.append(over)

    if ires is not None:
        for lo in ires.loops:
            not_iterated = (lo.bound.source == SOURCE_OBSERVED
                            and (lo.bound.per_entry == 0 or lo.bound.total == 0))
            if not_iterated and lo.entries:
                # a loop the inputs entered but never iterated is bounded at 0 iterations:
                # the bound holds only for calls that never iterate it either (libgmp's
                # __gmpn_cmp on init's random operands: the comparison loop never ran, the
                # bound 16× below a call whose operands agree in their top limbs)
                warns.insert(0, Finding(
                    f"{name}: loop {lo.name} never iterated on any input: the bound takes it "
                    f"to iterate 0 times, and a call that iterates it takes longer than the "
                    f"bound",
                    f"add inputs that iterate it (the data that keeps it going: equal prefixes, "
                    f"long runs, ...), or bound it: \"{lo.name}\" = N under [loops] in "
                    f"wcetfit.toml"))
                continue
            if lo.bound.source != SOURCE_OBSERVED and lo.entries and not lo.binding:
                # a bound the user gave that the worst path does not take (libtasn1's
                # asn1_get_length_der: "+0x50" = 126 for DER's long form, the path at 0
                # iterations and the bound 384 ticks below a 126-iteration call of 910):
                # said, with why, where the bound lists the fact as a premise
                warns.insert(0, _uncharged_fact(name, fn, lo, rows))
                continue
            if lo.bound.source == SOURCE_OBSERVED:
                warns.append(Finding(
                    f"{name}: loop {lo.name} is bounded by what the inputs reached "
                    f"({lo.bound.describe()})" + (f"; {lo.bound.note}" if lo.bound.note and
                                                   lo.bound.per_entry is None else ""),
                    f"if inputs can iterate more, add \"{lo.name}\" = N under [loops] in "
                    f"wcetfit.toml"))
        # indirect call sites that went to the same targets, said once with every site
        # (libbz2's BZ2_bzCompressEnd: four warnings "→ sub_bb10", one per site)
        indirect: dict[tuple[Any, ...], list[Any]] = {}
        for co in ires.calls:
            # (an imported call off the worst path, e.g. __stack_chk_fail in a block no
            # input ran, changes nothing in the bound: no warning)
            if co.kind == CALL_IMPORTED and co.count > 0 \
                    and _name_of_import(co.target_name) not in CONSTANT_TIME_IMPORTS:
                warns.append(Finding(
                    f"{name}: call to imported {co.target_name or '?'} at "
                    f"{loop_key(fn, co.block)}: its time varies with its arguments and is not "
                    f"modelled (the block's cost holds its mean over the inputs)",
                    "keep imported calls out of the analysed path, or bound them separately"))
            elif co.kind == CALL_INDIRECT and _observed_site(fn, co.instruction):
                site = _observed_site(fn, co.instruction)
                inside = [t for t in site.observed if t.address is not None]
                how = (("; the callees in this binary are in the bound, each call site "
                        "with its own instances of them" if "per call site" in co.note else
                        "; the largest WCET of the callees in this binary is in the bound")
                       if inside and co.callee_wcet_ticks is not None else "") \
                    + ("; the time of those outside the binary is in the calling block's "
                       "cost, as its mean over the inputs, not as their worst case"
                       if len(inside) < len(site.observed) else "")
                key = (site.tail, tuple(t.describe() for t in site.observed), how)
                indirect.setdefault(key, []).append(co)
            elif co.kind == CALL_INDIRECT and co.count > 0:
                # (off the worst path, e.g. CRYPTO_free's call of a custom allocator no
                # input set, an unknown callee changes nothing in the bound: no warning)
                warns.append(Finding(
                    f"{name}: indirect call at {loop_key(fn, co.block)}: the callee is unknown "
                    f"and its time is not in the bound", "analyse the possible callees "
                                                         "separately and add their WCET"))
        for (tail, targets, how), sites in indirect.items():
            at = ", ".join(f"{hexaddr(co.instruction)} ({loop_key(fn, co.block)})"
                           for co in sites[:4]) + (" …" if len(sites) > 4 else "")
            warns.append(Finding(
                f"{name}: indirect {'tail ' if tail else ''}call"
                f"{'s' if len(sites) > 1 else ''} at {at} \u2192 " + ", ".join(targets) + how,
                "the targets are those the inputs made it call (observed): pass inputs "
                "that reach every function it can call"))
        if ires.status != "optimal":
            warns.append(Finding(f"{name}: {ires.status}", "the bound is HiGHS's proven "
                                                            "upper bound, not a path"))
    if is_root and werr:
        warns.append(Finding(f"no WCET bound: {werr}", ""))
    if is_root and wres is not None:
        # what the bound rests on beyond the CFG and the loop bounds (observed relations
        # and path envelopes, recursion bounded by observed activations, ...); imported and
        # indirect calls on the path have their own findings above
        for item in wres.warnings:
            f = Finding.of(item)
            if not f.message.startswith((f"{CALL_IMPORTED} call at", f"{CALL_INDIRECT} call at")):
                warns.append(f)
    if is_root and path_residual is not None and path_residual > ESTIMABLE_TOL:
        warns.append(Finding(
            "the worst-case path uses count combinations the inputs never produced: its "
            "predicted time depends on the fit's particular solution, not only on measurements",
            "add inputs closer to the worst case (e.g. longest loops, the branches of the path)"))
    if is_root and summary.ipet_ticks is not None and max_obs is not None \
            and summary.ipet_ticks < max_obs:
        warns.append(Finding(
            f"the IPET bound ({summary.ipet_ticks:,.0f} ticks) is below the slowest input's "
            f"median ({max_obs:,.0f} ticks)",
            "block costs depend on data or cache state here: treat the bound with suspicion"))
    elif is_root and summary.point_ticks is not None and max_obs is not None \
            and summary.point_ticks + (summary.margin_ticks or 0.0) < MODEL_BELOW * max_obs \
            and max_obs - summary.point_ticks - (summary.margin_ticks or 0.0) \
            > UNRESOLVED_STEPS * quantum:
        # the bound covers the input only through the dispersion's misfit factor: the
        # model's own worst path is cheaper than a call measured (libbz2's decompressor on
        # raw inputs: a 67-tick path beside a 266-tick input, whose extra blocks' costs the
        # other inputs did not determine)
        factors = summary.dispersion_factors or {}
        # what made the factor (the same rule as the headline's): the slowest own call
        # (libgmp's popcount under a [loops] fact most inputs broke: ×84.65 from the
        # cover, where this said "the misfit factor (×1.07)"), or the misfit in it
        setter = factor_setter(factors) if factors else "product"
        # (cosh: "the misfit factor (×1.23)" where the joint factor, ×2.35, was applied)
        how = ("the dispersion's floor of one event short of an interrupt on the worst "
               f"path (×{factors['events']:.2f})" if setter == "events" else
               "the dispersion's cover of the slowest call that was the function's own "
               f"time (×{factors['cover']:.2f})" if setter == "cover" else
               "the dispersion's factor for single calls as timed, misfit included "
               f"(×{factors['joint']:.2f})" if setter == "joint" else
               "the dispersion's factor for single calls at the machine's slowest speed "
               f"(×{factors.get('call', 1.0) * factors.get('machine_speed', 1.0):.2f})"
               if setter == "calls" else
               "the dispersion's misfit factor"
               + (f" (×{factors['misfit']:.2f})" if factors.get("misfit") else ""))
        # how many inputs ran above the path, not only the slowest (libgmp's add_n: most of
        # the n = 512 inputs ran above a 513-tick point, and the warning named one)
        path = summary.point_ticks + (summary.margin_ticks or 0.0)
        # counted as the slowest is judged, beyond the few percent a median moves by
        # (nettle's base64 encoder: "below 23 of the 220 inputs' medians", most of them
        # the worst path's own inputs within 2 % of its point)
        above = int(np.sum(MODEL_BELOW * np.nan_to_num(measured, nan=-np.inf) > path))
        many = above > 1
        warns.append(Finding(
            f"the worst-case path's predicted time, {both(summary.point_ticks)}"
            + (f" + {both(summary.margin_ticks)} margin" if summary.margin_ticks else "")
            + f", is below the slowest input's median, {both(max_obs)}"
            + (f", and more than {round(100 * (1 / MODEL_BELOW - 1))} % below {above} of "
               f"the {int(np.isfinite(measured).sum())} inputs' medians" if many else "")
            + f": the model misses time {'those inputs' if many else 'that input'} spent; "
              f"the bound covers it only through {how}",
            "look at the slowest input's blocks: those only it ran may have no cost the "
            "inputs determine (add inputs that run them in other combinations), or its time "
            "depends on data the counts do not see"))
    if is_root and summary.point_ticks and summary.margin_ticks \
            and summary.margin_ticks > summary.point_ticks:
        # (liblzma's encoder on raw inputs: a margin 14× the path, the bound 351× the
        # slowest input, and nothing said where it came from)
        warns.append(Finding(
            f"the 95% margin ({summary.margin_ticks:,.0f} ticks) is "
            f"{summary.margin_ticks / summary.point_ticks:.1f}× the worst path's predicted "
            f"time ({summary.point_ticks:,.0f}): the inputs determine the costs on that path "
            f"poorly, and most of the bound is that uncertainty",
            "add inputs that run the worst path's blocks (the report's path table) in "
            "varied combinations and counts; an input generate() rarely makes (an error "
            "path, an extreme size) pins down few costs"))
    drv = summary.dispersion_driver or {}
    factors = summary.dispersion_factors or {}
    setter = factor_setter(factors)
    if is_root and summary.dispersion and setter == "cover" \
            and summary.slowest_call_ticks is not None \
            and summary.slowest_call_number is not None:
        # the factor is the slowest own call over the worst path, not the extrapolation:
        # name that call (a new user read "one call of input 333 took 134 ticks" for a
        # ×9.56 that input 265's call of 1,034 ticks had set)
        lo_hi = summary.slowest_call_others
        others = (f" where its other calls took {lo_hi[0]:,.0f}–{lo_hi[1]:,.0f}"
                  if lo_hi else "")
        checked = summary.slowest_call_check
        if checked is not None:
            # a check's call of an input --adopt made a row: its calls timed again were all
            # faster, and the bound is held above the call that was measured
            warns.append(Finding(
                f"the bound is held at {1 + summary.dispersion:.2f}× the worst path's "
                f"predicted time to stay above a call `wcetfit check --seed {checked[0]}` "
                f"timed: its fresh input {checked[1]} took "
                f"{summary.slowest_call_ticks:,.0f} ticks at the bound's machine speed, and "
                f"adopted as {input_label(summary.slowest_call_number)} its calls timed "
                f"again took less",
                "a call as slow as that one is the function's own time as far as the "
                "measurements tell; if it was the machine, check again on a quiet machine "
                "with a new seed"))
        else:
            warns.append(Finding(
                f"the bound is held at {1 + summary.dispersion:.2f}× the worst path's "
                f"predicted time to stay above the slowest call that was the function's own "
                f"time: {input_label(summary.slowest_call_number)} took "
                f"{summary.slowest_call_ticks:,.0f} ticks{others} (below what an interrupt "
                f"costs, so it counts as the function's)",
                "if that call was the machine (another process, the host), time again on a "
                f"quiet machine ({RETIME}); if the "
                "function can take that long (a cold cache or TLB), the bound rightly "
                "covers it"))
    elif is_root and summary.dispersion and drv and factors.get("call", 1.0) >= 1.5:
        # one call far above its input's other calls sets the extreme-value extrapolation
        # (libm's erf: 938 ticks against 46–84, the bound ×31.6 the path; the next session's
        # bound without such a call was 21× lower), and the user must be able to tell
        # whether it was the machine or the function
        others = (f" where its other calls took {drv['others_min_ticks']:,.0f}–"
                  f"{drv['others_max_ticks']:,.0f}" if "others_min_ticks" in drv else "")
        what = (f"the bound's ×{1 + summary.dispersion:.2f} for single calls as timed rests "
                f"on calls like this one" if setter == "joint" else
                f"single calls' factor is ×{factors.get('call', 1.0):.2f} (of the bound's "
                f"×{1 + summary.dispersion:.2f}, with the misfit and the machine's speed)")
        warns.append(Finding(
            f"{what}: one call of "
            f"{input_label(int(drv['input']))} took {drv['call_ticks']:,.0f} ticks{others}"
            + (f", one of the {summary.dispersion_calls:,} calls the factor is the largest "
               f"of (too few to extrapolate: the warning below)"
               if too_few_to_extrapolate(summary.dispersion_calls) else
               f", and the extreme-value fit extrapolates calls like it to a probability "
               f"of {summary.exceedance or 1e-6:.0e} per call"),
            "if that call was the machine (another process, the host), time again on a quiet "
            f"machine ({RETIME}); if the "
            "function can take that long (a cold cache or TLB), the bound rightly covers it; "
            "[wcet] exceedance sets the probability"))
    few = summary.dispersion_calls
    if is_root and summary.ipet_ticks is not None and too_few_to_extrapolate(few):
        # the factors claim the exceedance only when fitted: from fewer calls they are the
        # largest seen (libm's fmod, 347 long calls; zlib's compress2, 89), and the bound
        # is for about one call in that many, whatever [wcet] exceedance says
        warns.append(Finding(
            f"the bound is not extrapolated to {summary.exceedance or 1e-6:.0e} per call: "
            f"its factors for single calls are the largest of {few:,} calls (of the long "
            f"paths, interrupted ones left out), fewer than the "
            f"{MIN_EXTRAPOLATED_CALLS:,} an extreme-value fit needs, so about one call in "
            f"{few:,} may pass what they give",
            "time more inputs near the worst path, or more calls of each ([measure] "
            "repeats), for the probability asked"))
    if is_root and summary.ipet_ticks is not None and raw_max is not None \
            and raw_max > summary.ipet_ticks:
        # a call above the bound was taken for an interrupted one (far above its input's
        # other calls); said, since it is a measured call the bound does not cover
        # (libcrypto MD5: 24,220 ticks against a bound of 13,109, only in the JSON)
        from wcetfit.wcet.dispersion import MIN_INTERRUPT_NS
        above_ns = raw_max_above_ns
        above = ("far" if above_ns is None or not tsc_hz else
                 f"{above_ns * 1e-9 * tsc_hz:,.0f} ticks ({above_ns:,.0f} ns)")
        why = (f"it was taken for an interrupted call, {above} above its input's "
               f"median (at least {MIN_INTERRUPT_NS:.0f} ns: a preemption or an interrupt, "
               f"not the function), and left out of the fit and the dispersion"
               if above_ns is None or above_ns >= MIN_INTERRUPT_NS else
               f"it is {above} above its input's median, less than an interrupt "
               f"costs ({MIN_INTERRUPT_NS:.0f} ns), and the bound should cover it: a defect "
               f"of the dispersion, please report it")
        warns.append(Finding(
            f"the slowest single timed call, {both(raw_max)}, is above the bound, "
            f"{both(summary.ipet_ticks)}: "
            + why,
            "if the machine was quiet and that input can take so long, the bound does not "
            "hold for it: `wcetfit check` on an idle machine times fresh inputs against "
            "the bound and keeps what is stored"))
    val = dict(ff.validation) if ff else {}
    if is_root and ff is not None:
        for item in ff.extra.get("warnings", []) or []:
            warns.append(Finding.of(item, "fit: "))
        fit_rows = ff.extra.get("rows")
        if isinstance(fit_rows, Mapping) and fit_rows.get("rejected"):
            reasons = fit_rows.get("rejected_by_reason") or {}
            warns.append(Finding(
                f"fit: {fit_rows['rejected']} of {fit_rows.get('total', '?')} rows rejected "
                f"as outliers"
                + (" (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")"
                   if reasons else "")
                + ("; they do not set the costs, but the bound's dispersion covers their "
                   "calls" if is_root and summary.ipet_ticks is not None else ""),
                "many rejections point to preemption (pin the core, quiet the machine) or to "
                "costs that depend on data"))
    if is_root:
        med, p95, what = heldout_errors(val, ff.extra if ff else {})
        # one count vector for every input (a function of one path, or inputs that all
        # took one): the error is the calls' own spread, which neither splitting blocks
        # nor more inputs of that path changes (zlibCompileFlags, one block, was told to
        # split blocks)
        one_path = n_inputs >= 2 and len(np.unique(counts, axis=0)) == 1
        spread = ("every input ran the same blocks the same number of times: the error is "
                  "the calls' own spread (caches, branch history, the machine), not the "
                  "model's; a quiet machine narrows it")
        # compared as printed (two decimals of a percent): "1.00% is above the 1% goal"
        # read as a contradiction
        if med is not None and round(med, 4) > GOAL_MEDIAN_REL:
            warns.append(Finding(f"{what}held-out median relative error {med:.2%} is above the "
                                  f"{GOAL_MEDIAN_REL:.0%} goal",
                                  spread if one_path else
                                  "costs may depend on data the block counts do not see: "
                                  "add inputs that vary it (`wcetfit split` separates "
                                  "blocks in a fit of its own, not in this bound's)"))
        if p95 is not None and round(p95, 4) > GOAL_P95_REL:
            warns.append(Finding(f"{what}held-out p95 relative error {p95:.2%} is above the "
                                  f"{GOAL_P95_REL:.0%} goal",
                                  spread if one_path else
                                  "look at the worst-predicted inputs for preemption or "
                                  "data-dependent blocks"))

    back = tuple(e for lp in fn.loops for e in lp.back_edges)
    own = set(fn.block_addresses)
    other_keys = {a: block_key(a) for g in groups for a in g.blocks
                  if a not in own} if block_key is not None else {}
    return FunctionReport(
        other_keys=other_keys,
        name=name, address=fn.address, is_root=is_root, blocks=tuple(rows),
        groups=tuple(groups), overhead_ticks=overhead, validation=val, never_executed=never,
        wcet=summary, warnings=tuple(warns), edges=tuple(dict.fromkeys(fn.edges)),
        back_edges=back, entry=fn.entry, exits=tuple(fn.exits),
        fit_extra=dict(ff.extra) if ff else {}, inputs_one_path=inputs_one_path)


# Functions whose call ends a failed run: the stack protector's and fortify's checks.  A
# block that calls one is reached only when memory is already corrupted.  (abort and
# assertions stay among the blocks to reach: an argument can lead there.)
__all__ = ["BlockRow", "FitBlock", "FitFunction", "FitGroup", "FunctionReport", "GroupRow",
           "input_label",
           "Report", "TICKS_NOTE", "TICKS_UNIT", "Finding", "WcetSummary", "build_report",
           "describe_block", "read_fit", "ticks_to_ns"]


def _observed_site(fn: Any, instruction: int) -> Any:
    """The indirect call site at ``instruction`` if the count run recorded its targets."""
    for c in fn.calls:
        if c.instruction == instruction and c.observed:
            return c
    return None
