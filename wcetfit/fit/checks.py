"""Plausibility checks of a finished fit: figures no physical machine can produce become
:class:`~wcetfit.fit.result.FitWarning` s (issue #15, "stable, plausible fits").

* A cost, or a sum of costs (an estimable combination without negative coefficient),
  whose whole 95 % interval lies below zero.  Differences of costs ("A − B") may be
  negative and are not checked.
* The overhead quantity of a configuration (ε, plus the blocks that run once per call
  when they are confounded with it) below its physical floor
  (:attr:`FitOptions.overhead_floor_ticks`, 0 unless the caller knows the calibrated
  empty-region cost).  A negative ε is never silent: it is reported whether or not its
  interval reaches the floor.
* A call predicted below the floor: a measured input by the fit itself, or a held-out
  input by the fit without its fold.

Nothing is clamped: the warnings say what the figure means and how to get a better one.
Under the default ``costs="physical"`` the costs are fitted within those limits
(:mod:`wcetfit.fit.physical`), so these warnings arise only from ``costs="linear"``; what
the constraints overruled is said there instead.
Why such figures appear: the inputs of library code that calls a dozen functions move
whole groups of block counts together (every byte runs the same few blocks), so the
least-squares fit can trade cost between a block and the ones that run with it, and
between ε and the blocks every call runs many times, with little change in the
residuals; the intercept ε is then an extrapolation far below the shortest call.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from wcetfit.fit.result import (WARN_NEGATIVE_COST, WARN_NEGATIVE_PREDICTION, WARN_OVERHEAD,
                                BlockFit, Combination, FitWarning, Group, Overhead)
from wcetfit.fit.wording import fmt
from wcetfit.model import hexaddr

log = logging.getLogger(__name__)

# count columns whose correlation with a block's counts over the used inputs exceeds this
# are named in the remedy as "the blocks that run with it"
CO_VARY = 0.95
# inputs listed in a prediction warning's text (all are in FitWarning.inputs)
LIST_INPUTS = 5


def plausibility(fx: Any, blocks: Sequence[BlockFit], groups: Sequence[Group],
                 overhead: Sequence[Overhead], resid_all: np.ndarray,
                 kept: np.ndarray) -> list[FitWarning]:
    """Every warning of the module docstring, in order: costs, overheads, predictions."""
    out: list[FitWarning] = []
    out += _negative_costs(fx, blocks, groups)
    out += _overheads(fx, overhead)
    out += _predictions(fx, overhead, resid_all)
    return out


def _co_varying(fx: Any, block_idx: Sequence[int], limit: int = 3) -> list[int]:
    """Addresses of the other executed blocks whose counts move with these blocks' summed
    count over the used inputs (|correlation| > CO_VARY), most correlated first."""
    rows = np.flatnonzero(fx.w > 0)
    if rows.size < 3:
        return []
    X = np.asarray(fx.counts[rows], dtype=np.float64)
    target = X[:, list(block_idx)].sum(axis=1)
    tc = target - target.mean()
    Xc = X - X.mean(axis=0)
    den = np.linalg.norm(Xc, axis=0) * np.linalg.norm(tc)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.abs(tc @ Xc) / den
    r[list(block_idx)] = 0.0
    r[~np.isfinite(r)] = 0.0
    order = [int(k) for k in np.argsort(-r) if r[k] > CO_VARY][:limit]
    return [fx.addrs[k] for k in order]


def _listed(addrs: Sequence[int], most: int = 4) -> str:
    """A few addresses, then how many more: a warning stays readable for long sums."""
    shown = ", ".join(hexaddr(a) for a in addrs[:most])
    return shown + (f" and {len(addrs) - most} more" if len(addrs) > most else "")


def _cost_remedy(fx: Any, addrs: Sequence[int]) -> str:
    pos = {a: k for k, a in enumerate(fx.addrs)}
    with_ = _co_varying(fx, [pos[a] for a in addrs])
    what = _listed(addrs) if len(addrs) <= 4 else f"these {len(addrs)} blocks"
    if with_:
        others = _listed(with_)
        return (f"the inputs do not vary how often {what} run(s) independently of {others}: "
                f"the fit traded cost between them.  Add inputs that change {what}'s count "
                f"while {others} run about as often as before, or split {what} from them "
                f"with timing probes (wcetfit split)")
    return (f"the inputs do not vary how often {what} run(s) independently of the other "
            f"blocks: the fit traded cost between them.  Add inputs that change {what}'s "
            f"count on its own, or split it with timing probes (wcetfit split)")


def _negative_costs(fx: Any, blocks: Sequence[BlockFit],
                    groups: Sequence[Group]) -> list[FitWarning]:
    out: list[FitWarning] = []
    for b in blocks:
        if b.estimable and b.cost_ticks is not None and b.ci95_ticks is not None \
                and b.cost_ticks + b.ci95_ticks < 0.0:
            out.append(FitWarning(
                WARN_NEGATIVE_COST,
                f"the cost of {hexaddr(b.address)} is {fmt(b.cost_ticks)} ± "
                f"{fmt(b.ci95_ticks)} ticks: its whole 95 % interval is below zero, which no "
                "block can cost",
                _cost_remedy(fx, [b.address]), blocks=(b.address,),
                estimate_ticks=b.cost_ticks, ci95_ticks=b.ci95_ticks))
    for g in groups:
        for c in g.combinations:
            if c.overhead_coefficients or not _is_sum(c):
                continue            # differences may be negative; ε is checked apart
            if c.value_ticks + c.ci95_ticks < 0.0:
                addrs = tuple(a for a, _ in c.coefficients)
                out.append(FitWarning(
                    WARN_NEGATIVE_COST,
                    f"{c.text}: a sum of block costs whose whole 95 % interval is below zero",
                    _cost_remedy(fx, addrs), blocks=addrs, estimate_ticks=c.value_ticks,
                    ci95_ticks=c.ci95_ticks))
    return out


def _is_sum(c: Combination) -> bool:
    return bool(c.coefficients) and all(v > 0 for _, v in c.coefficients) and \
        all(v > 0 for _, v in c.overhead_coefficients)


def _shortest_call(fx: Any, config: int) -> float | None:
    rows = np.flatnonzero((fx.w > 0) & (fx.cfg == fx.configs.index(config)))
    return float(np.min(fx.y[rows])) if rows.size else None


def _below(value: Any, floor: float) -> Any:
    """``value`` < ``floor`` beyond rounding: a physical fit holds ε exactly at its floor,
    and a sum of costs carries the last bit of each term."""
    v = np.asarray(value, dtype=np.float64)
    return v < floor - 1e-9 * np.maximum(np.maximum(abs(floor), np.abs(v)), 1.0)


def _a_sum(o: Overhead) -> bool:
    """Whether the overhead quantity is ε plus a sum of costs, which no call can bring
    below the floor.  Where the inputs tie ε to blocks run many times, the estimable
    quantity that holds ε may subtract some (coefficients of −4,995 beside +2,142 on zlib's
    uncompress): such a difference has no physical floor, and its value says nothing
    about ε."""
    return all(c >= 0 for _, c in o.blocks)


def _overheads(fx: Any, overhead: Sequence[Overhead]) -> list[FitWarning]:
    floor = float(fx.opts.overhead_floor_ticks)
    out: list[FitWarning] = []
    for o in overhead:
        if o.value_ticks is None or not _below(o.value_ticks, floor) or not _a_sum(o):
            continue
        name = "ε" if fx.n_cfg == 1 else f"ε[{o.config}]"
        once = ", ".join(hexaddr(a) for a, _ in o.blocks[:LIST_INPUTS])
        if len(o.blocks) > LIST_INPUTS:
            once += f", … {len(o.blocks)} blocks"
        what = f"{name} + the blocks run once per call ({once})" if once else name
        ci = o.ci95_ticks if o.ci95_ticks is not None else float("inf")
        excludes = o.value_ticks + ci < floor
        short = _shortest_call(fx, o.config)
        floor_txt = "zero" if floor == 0.0 else f"its floor of {fmt(floor)} ticks"
        shortest = f" (the shortest call used measured {fmt(short)} ticks)" if short else ""
        if excludes:
            msg = (f"{what} = {fmt(o.value_ticks)} ± {fmt(ci)} ticks: the whole 95 % interval "
                   f"is below {floor_txt}{shortest}.  A timed call cannot cost less than its "
                   "empty timed region: the fit traded the overhead against blocks that run "
                   "in (nearly) every call, whose costs are then off by as much in the other "
                   "direction")
            remedy = ("add inputs that run the per-call work a different number of times — "
                      "short ones (an empty or minimal input) and ones that leave out the usual "
                      "paths — so that the overhead is measured rather than traded; until then "
                      "read block costs as combinations, not as physical costs")
        else:
            msg = (f"{what} = {fmt(o.value_ticks)} ± {fmt(ci)} ticks: the estimate is below "
                   f"{floor_txt}, which no timed call can cost; its interval reaches physical "
                   f"values, so the inputs determine it poorly{shortest}")
            remedy = ("add short inputs (an empty or minimal one) to measure the overhead "
                      "instead of extrapolating it")
        out.append(FitWarning(WARN_OVERHEAD, msg, remedy,
                              blocks=tuple(a for a, _ in o.blocks), config=o.config,
                              estimate_ticks=o.value_ticks, ci95_ticks=o.ci95_ticks))
    return out


def _predictions(fx: Any, overhead: Sequence[Overhead],
                 resid_all: np.ndarray) -> list[FitWarning]:
    """Measured inputs predicted below the floor by the fit, held-out ones by their fold."""
    floor = float(fx.opts.overhead_floor_ticks)
    cand = np.flatnonzero(fx.has)
    fitted = fx.y[cand] - resid_all[cand]
    neg_eps = any(o.value_ticks is not None and _below(o.value_ticks, floor) and _a_sum(o)
                  for o in overhead)
    out: list[FitWarning] = []
    sets = [("fitted", fitted)]
    if getattr(fx, "fold_pred", None) is not None:
        sets.append(("held-out", fx.fold_pred[cand]))
    for kind, pred in sets:
        low = np.isfinite(pred) & _below(pred, floor)
        if not low.any():
            continue
        idx = cand[low]
        order = np.argsort(pred[low])
        listed = ", ".join(f"input {int(idx[k])}: {fmt(float(pred[low][k]))} predicted, "
                           f"{fmt(float(fx.y[idx[k]]))} measured"
                           for k in order[:LIST_INPUTS])
        if neg_eps:
            why = ("the overhead came out below its floor (see that warning): calls that run "
                   "the per-call work few times inherit the extrapolated ε")
        elif kind == "held-out":
            why = ("without their fold the other inputs do not determine the count "
                   "combinations these inputs run: the prediction extrapolates along "
                   "directions the training inputs did not exercise")
        else:
            why = "the linear model does not fit these inputs (data-dependent costs?)"
        floor_txt = "zero" if floor == 0.0 else f"the floor of {fmt(floor)} ticks"
        msg = (f"{int(low.sum())} {kind} prediction(s) below {floor_txt} ({listed}"
               f"{', …' if low.sum() > LIST_INPUTS else ''}): {why}")
        remedy = ("add inputs like these (short ones, and ones that vary the blocks they run "
                  "independently) so that their times are measured, not extrapolated")
        out.append(FitWarning(WARN_NEGATIVE_PREDICTION, msg, remedy,
                              inputs=tuple(int(i) for i in idx),
                              estimate_ticks=float(pred[low].min())))
    return out


def summaries(warnings: Sequence[FitWarning]) -> list[str]:
    """One line per kind for :attr:`FitResult.warnings` (shown by the report)."""
    out: list[str] = []
    costs = [w for w in warnings if w.code == WARN_NEGATIVE_COST]
    if costs:
        first = costs[0]
        out.append(f"{len(costs)} estimable cost(s) or sum(s) of costs have their whole 95 % "
                   f"interval below zero (e.g. {first.message}); {first.remedy}")
    for w in warnings:
        if w.code != WARN_NEGATIVE_COST:
            out.append(f"{w.message}; {w.remedy}")
    return out


# The most interrupts per second a timed call can meet on a quiet Linux machine: the
# scheduler's tick is at most 1,000 per second (250 on Debian's kernels), and device
# interrupts on an idle core are rarer.  A call of d seconds meets one with probability
# about d × this rate.
INTERRUPT_RATE_HZ = 1000.0
# The interrupt rule's floor, the same as the bound's (wcetfit.wcet.dispersion.MIN_INTERRUPT_NS,
# not imported: the fit comes before the bound): a call less than this above its input's
# median is the function's own time whatever the repeat rule says.
_MIN_INTERRUPT_NS = 500.0
# and its preemption rule (wcetfit.wcet.dispersion.PREEMPTION_NS): a call more than twice
# its input's fastest and this far above it was a scheduler slice, not counted here
_PREEMPTION_NS = 100_000.0


def beyond_interrupt_rate(seen: int, expected: float) -> bool:
    """Whether ``seen`` calls set aside as interrupted are far more than the ``expected``
    interrupts (a Poisson count): over three times the expected count and ten more is not
    chance."""
    return seen > 3.0 * expected + 10


def interrupts_beyond_rate(ticks: Any, keep: Any, tsc_hz: float | None,
                           rate_hz: float = INTERRUPT_RATE_HZ) -> str | None:
    """A warning when far more calls were set aside as interrupted than interrupts can
    explain, else None.  ``ticks`` [input, repeat] as the fit takes them (the machine's
    speed divided out), ``keep`` the calls the repeat rule kept.

    The repeat rule sets aside the calls far above their input's median, and those at
    least 500 ns above it count as interrupted: left out of the fit and of the bound's
    dispersion.  Interrupts land in timed calls at most ``rate_hz`` times per second of
    timed calls.  isort's longest inputs ran in two modes in one session, about 28k and
    46k ticks for the same input, and 265 of 5,200 calls were set aside where interrupts
    explain about 17: they were the function's own slower calls (the sibling
    hyperthread's load, most likely), which nothing said.  More than three times the
    expected count, and ten more, is said (a Poisson count that far above its mean is
    not chance)."""
    t = np.asarray(ticks, dtype=float)
    if t.ndim != 2 or not tsc_hz:
        return None
    timed = np.isfinite(t)
    with np.errstate(invalid="ignore"):
        excess = t - np.nanmedian(t, axis=1)[:, None]
        fastest = np.min(np.where(timed, t, np.inf), axis=1)[:, None]
        # a scheduler slice is no call of the function's (the bound's rule, below)
        preempted = timed & (t - fastest >= _PREEMPTION_NS * 1e-9 * float(tsc_hz)) \
            & (t - fastest > fastest)
        aside = timed & ~np.asarray(keep, dtype=bool) & ~preempted & (
            excess >= _MIN_INTERRUPT_NS * 1e-9 * float(tsc_hz))
    seconds = float(np.nansum(np.where(timed & ~preempted, t, 0.0))) / float(tsc_hz)
    expected = seconds * rate_hz
    seen = int(aside.sum())
    if not beyond_interrupt_rate(seen, expected):
        return None
    share = seen / max(1, int(timed.sum()))
    typical = float(np.median((t / np.nanmedian(t, axis=1)[:, None])[aside]))
    return (f"{seen:,} timed calls ({share:.1%}) were set aside as interrupted (at least "
            f"500 ns above their input's median; typically ×{typical:.2f} of it), where "
            f"interrupts at up to {rate_hz:,.0f} per second would land in about "
            f"{expected:,.0f} call{'' if round(expected) == 1 else 's'} this long: the "
            f"others are the function's own slower calls (a second mode of its time: "
            f"caches, branch predictors, the sibling hyperthread's load) or disturbances "
            f"beyond interrupts (another process or the hypervisor taking the core), which "
            f"their times cannot tell apart; they are left out of the fit and of the "
            f"bound's dispersion; "
            f"time again on a quiet machine, and `wcetfit check` counts the fresh calls "
            f"above the bound among those taken for interrupts")
