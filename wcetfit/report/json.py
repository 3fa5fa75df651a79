"""The report as JSON: ``"schema": "wcetfit.report/3"``.

Addresses are "0x..." strings (link-time addresses); every time is given in TSC ticks
(``*_ticks``) and beside it in nanoseconds (``*_ns``, null when the TSC rate is unknown);
shares are fractions of the mean predicted time of one call of the root function.

Schema history (bump the version on every incompatible change and add a line here):
  1  first version.
  2  ``blocks[].ci95_ticks`` and ``ci95_ns`` are the half-width of the 95% interval (a
     number, value ± half-width), as in ``wcetfit.fit/1``; version 1 gave [low, high].

Layout::

    {"schema": "wcetfit.report/3", "root": str, "tsc_hz": float|null,
     "units": {...}, "inputs": int, "failed_inputs": int, "repeats": int,
     "functions": [{
        "name", "address", "root": bool, "timed_other_path": bool,
        "blocks": [{address, size, instructions, count_min, count_max, count_mean,
                    estimable, cost_ticks, cost_ns, ci95_ticks: half-width|null, ci95_ns,
                    group, solution_ticks, share, executed, wcet_count, loop, call}],
        "groups": [{id, blocks, kind, combinations, advice, share, share_estimable}],
        "overhead_ticks", "overhead_ns", "validation": {...fit's...},
        "coverage": {blocks, executed, never_executed: [address]},
        "wcet": {ipet_ticks, ipet_ns, no_bound_of_its_own, point_ticks, point_ns, margin_ticks, margin_ns,
                 dispersion, dispersion_ticks, dispersion_ns, exceedance_per_call,
                 exceedance_curve: [{exceedance_per_call, ticks, ns}], dispersion_calls,
                 dispersion_factors: {misfit, call, machine_speed[, joint][, cover][, events]},
                 call_growth,
                 machine_speed: {measured, declared} | null,
                 misfit_scope: {near_inputs, near_share, near_misfit, far_inputs,
                                far_misfit, far_input, far_ticks, far_predicted_ticks} | null,
                 broken_inputs: {broken, checked, total} | null,
                 path_envelopes: [{blocks, header, slope, intercept, text}],
                 max_observed_ticks, max_observed_ns, max_observed_input,
                 max_observed_raw_ticks, max_observed_raw_ns,
                 slowest_call: {number, label, ticks, ns, others_min_ticks,
                                others_max_ticks, check: {seed, fresh_input} | null},
                 max_predicted_ticks, max_predicted_ns, max_predicted_input,
                 max_predicted_measured_ticks, max_predicted_measured_ns,
                 bracket_width: {beyond, model, input, margin, dispersion, total},
                 closest_input, closest_distance,
                 path: [{address, count, cost_ticks, callee_ticks, ticks, ns}],
                 loops: [{header, name, per_entry, total, source, note, witness,
                          entries, back_edges, binding}],
                 calls: [{block, instruction, kind, target, target_name, count,
                          callee_wcet_ticks, note}],
                 path_estimable, path_residual, recursion_depth, error},
        "warnings": [{message, advice}]}],
     "warnings": [{message, advice}]}

``ipet_ticks`` is the bound: (``point_ticks`` (Σ cost·count on the worst-case path with the
fit's point costs, plus the overhead ε for the root) + ``margin_ticks`` (the fit's 95%
critical value × the standard error of that path's predicted time; null without a
covariance)) × (1 + ``dispersion``): the worst misfit of an input's level (the upper
quartile of its calls) over its prediction seen, times the call-to-call excess over an
input's level passed with
probability ≤ ``exceedance_per_call`` (the target's ``[wcet] exceedance``, default 1e-6; a
Gumbel law fitted to block maxima of the measured calls, at least the largest seen); root
only, and the slowest sustained speed of the machine during the timing run over its fast
end (``machine_speed``; the fit's costs are at the fast end, see the fit's
``machine_speed``); ``dispersion_factors`` gives the three, 1 + ``dispersion`` is their
product, or ``joint`` where that is smaller (a timed call over its input's prediction at the
same exceedance, the three as they came together on the calls: wcetfit/wcet/margin.py), but
not below ``call`` × ``machine_speed`` (wcetfit.wcet.dispersion.calls_at_slowest).  ``dispersion_ticks`` is what that factor adds.
``cover`` (when above 1) is the slowest call that is the function's own time over the
worst path's point (``slowest_call``): 1 + ``dispersion`` is never below it, and where it is
the larger, it is what set the factor.  ``events`` (when above 1, with a TSC rate) is the
worst path at its misfit and the machine's slowest speed plus one event of 500 ns, the
interrupt rule's threshold, over the point: a floor of 1 + ``dispersion`` as well
(wcetfit.wcet.dispersion.Dispersion.events).
``exceedance_curve``: the bound at other exceedances per call, most probable first, from
1e-3 to 1e-9 and the target's own (wcetfit.wcet.dispersion.exceedance_curve): the point and
the margin are the same along it, the dispersion is taken again at each; [] for a callee.
``dispersion_calls``: the calls the single-call factors (``call``, ``joint``) were taken
from; below 500 (wcetfit.wcet.dispersion.MIN_EXTRAPOLATED_CALLS) they are the largest seen,
not extrapolated to ``exceedance_per_call`` (a warning says so); null for a callee.
``call_growth``: how a call's excess over its input's level grows with the input's length,
the exponent ``call`` was taken to the worst path with (0: events of a fixed size in ticks,
1: a share of the call; measured, two standard errors above the estimate;
wcetfit.wcet.dispersion.call_growth); null when the calls could not tell (taken as 1).
``machine_speed``: the slowest speed of the machine the bound covers, as a factor over the
timing run's fast end: ``measured`` (the timing run's slowest period; 1 when its speed was
not followed) and ``declared`` (``[wcet] machine_speed``; null when not set);
``dispersion_factors.machine_speed`` is the larger.
``misfit_scope`` (``[wcet] misfit = "near"``, the default, and only when it changed the
factor): ``misfit`` is the worst of the ``near_inputs`` inputs predicted at least
``near_share`` of the worst path (and of any measured above it); ``far_inputs`` others,
predicted and measured below the worst path, missed more, up to ``far_misfit`` (input
``far_input``, ``far_ticks`` its calls' upper quartile against ``far_predicted_ticks``),
which the bound takes not to reach the worst path; null when every input's misfit was
taken.
``broken_inputs``: measured inputs that break the constraints the bound keeps to (a
``[loops]`` or ``[flow]`` fact they contradict): ``broken`` of the ``checked`` (all
``total`` inputs unless the count ran out of time); the bound is only for calls that keep
them; null when none does.
``dispersion_driver`` names the call farthest above its input's level (``input`` as a bare
number and its ``label``, ``call_ticks`` as measured, ``mean_ticks`` and ``level_ticks``,
the upper quartile of its calls the excess is taken over, at the reference speed (the
machine's speed divided out, so they can lie below every call as timed), the input's
other calls' ``others_min_ticks``/``others_max_ticks``, interrupted ones left out), or null.
``path_envelopes`` are the observed envelopes (Σ count(blocks) ≤ intercept + slope ·
count(header), true on every input; wcetfit/envelope.py) that the worst path touches.
``max_observed_ticks`` is the largest per-input median over the timed repeats.
``slowest_call`` is the slowest single call that is the function's own time (no interrupt
in it: within 500 ns of its input's median or kept by the repeat statistic, the rule the
bound's ``cover`` uses), as timed, and its input: the maximum observed execution time;
or, where it is slower, a call ``wcetfit check --seed`` timed above an earlier bound of an
input ``--adopt`` made a row (``check``: that seed and the input's number there; its ticks
at the bound's machine speed), which the bound stays above as well;
``max_observed_raw_ticks`` is the slowest call of all, interrupts included.
``interrupts_left_out`` counts the timed calls the bound took for interrupts
(``interrupted``; ``preempted`` apart) against ``expected``, the interrupts that land in
calls this long at ``rate_hz``; ``beyond_rate``: far more than that: the function's own
slower calls or disturbances beyond interrupts, which the times cannot tell apart, and the
bound rests on their being disturbances;
``above_bound``: how many of them are above the bound (``slowest_ticks``/``slowest_ns``,
``slowest_input``: the slowest of them); null without a TSC rate.
``ipet_ticks`` is null for a callee whose blocks the inputs did not separate from its
callers' (``no_bound_of_its_own``: its time is counted in theirs; its own sum would read 0,
or the fit's particular solution).  ``above_root_bound``: a callee's own bound (its worst
path over every context) is above the root's, which caps any one activation of it; the
figure says only how far its context-free loop bounds multiply.
``max_predicted_measured_ticks`` is the input predicted slowest as measured (the median of
its calls, the machine's speed divided out: what its prediction is of).
``bracket_width`` splits bound ÷ slowest input (``total``) into the product of: the worst
path's point over the highest prediction of an input (``beyond``), that input's prediction
over its measured time (``model``), its measured time over the slowest input's
(``input``), the margin ((point + margin) ÷ point) and the dispersion factor; null when a
figure is missing (wcetfit.wcet.bracket.BracketWidth).
``max_observed_input``, ``max_predicted_input`` and ``closest_input`` are ``{number, label,
row}``: the input's number and its name as the text report gives it ("search input 37"),
and its row in the per-input arrays (wcetfit.report/2 gave the bare row).
"""

from __future__ import annotations

import math
from typing import Any

from wcetfit.model import hexaddr
from wcetfit.report import FunctionReport, Report, input_label, ticks_to_ns

SCHEMA_REPORT = "wcetfit.report/3"


def _f(v: Any) -> Any:
    """Floats JSON can carry: NaN and infinities become null."""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return f if math.isfinite(f) else None


def _plain(v: Any) -> Any:
    """Group ids and fit extras may be numpy scalars or tuples: make them JSON values."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist"):
        return _plain(v.tolist())
    if isinstance(v, float):
        return _f(v)
    return v


def to_json(report: Report) -> dict[str, Any]:
    hz = report.tsc_hz
    return {
        "schema": SCHEMA_REPORT,
        "root": report.root,
        "tsc_hz": _f(hz),
        "units": {"ticks": "TSC ticks: the time-stamp counter's fixed-rate unit, not core "
                           "cycles",
                  "ns": "nanoseconds = ticks / tsc_hz * 1e9 (null when tsc_hz is unknown)",
                  "share": "fraction of the mean predicted time of one root call"},
        "inputs": report.n_inputs,
        "failed_inputs": report.failed_inputs,
        "repeats": report.n_repeats,
        "functions": [_function(fr, hz, report) for fr in report.functions],
        "warnings": [{"message": w.message, "advice": w.advice} for w in report.warnings],
    }


def _ns(v: Any, hz: float | None) -> Any:
    return _f(ticks_to_ns(v, hz))


def _input(report: Report | None, row: int | None) -> dict[str, Any] | None:
    """An input named by its row in the report's arrays: its number (generate's, or a
    searched or reached input's) and its label as the text report says it ("search input
    37"), with the row for indexing the per-input arrays.  (The bare row made the JSON
    say input 103 where the text said search input 37.)"""
    if row is None:
        return None
    numbers = report.input_numbers if report is not None else ()
    number = int(numbers[row]) if 0 <= row < len(numbers) else int(row)
    return {"number": number, "label": input_label(number), "row": int(row)}


def _function(fr: FunctionReport, hz: float | None,
              report: Report | None = None) -> dict[str, Any]:
    w = fr.wcet
    blocks = []
    for r in fr.blocks:
        # the half-width, the shape every wcetfit document gives a 95% interval
        half = (r.ci95_ticks[1] - r.ci95_ticks[0]) / 2 if r.ci95_ticks else None
        blocks.append({
            "address": hexaddr(r.address), "size": r.size, "instructions": r.instructions,
            "count_min": r.count_min, "count_max": r.count_max, "count_mean": _f(r.count_mean),
            "estimable": r.estimable,
            "cost_ticks": _f(r.cost_ticks), "cost_ns": _ns(r.cost_ticks, hz),
            "ci95_ticks": _f(half), "ci95_ns": _ns(half, hz),
            "group": _plain(r.group), "solution_ticks": _f(r.solution_ticks),
            "share": _f(r.share), "executed": r.executed, "wcet_count": r.wcet_count,
            "loop": None if r.loop_header is None else hexaddr(r.loop_header),
            "call": r.call,
        })
    wcet = {
        # null, not 0, for a callee with no bound of its own (its time is in its callers')
        "ipet_ticks": None if fr.no_bound_of_its_own else _f(w.ipet_ticks),
        "ipet_ns": None if fr.no_bound_of_its_own else _ns(w.ipet_ticks, hz),
        "no_bound_of_its_own": fr.no_bound_of_its_own,
        "above_root_bound": report.above_root_bound(fr) if report is not None else False,
        "point_ticks": _f(w.point_ticks), "point_ns": _ns(w.point_ticks, hz),
        "margin_ticks": _f(w.margin_ticks), "margin_ns": _ns(w.margin_ticks, hz),
        "dispersion": _f(w.dispersion), "dispersion_ticks": _f(w.dispersion_ticks),
        "dispersion_ns": _ns(w.dispersion_ticks, hz),
        "exceedance_per_call": _f(w.exceedance),
        "exceedance_curve": [{"exceedance_per_call": _f(q), "ticks": _f(t), "ns": _ns(t, hz)}
                             for q, t in w.exceedance_curve],
        "dispersion_calls": w.dispersion_calls,
        "dispersion_factors": {k: _f(v) for k, v in w.dispersion_factors.items()},
        "call_growth": _f(w.call_growth),
        "machine_speed": ({"measured": _f(w.machine_speed_measured),
                           "declared": _f(w.machine_speed_declared)}
                          if w.machine_speed_measured is not None else None),
        "misfit_scope": ({k: (int(v) if k in ("near_inputs", "far_inputs", "far_input")
                              else _f(v)) for k, v in w.misfit_scope.items()}
                         if w.misfit_scope else None),
        "broken_inputs": ({"broken": w.broken_inputs.broken,
                           "checked": w.broken_inputs.checked,
                           "total": w.broken_inputs.total}
                          if w.broken_inputs is not None else None),
        "dispersion_driver": ({**{k: (int(v) if k == "input" else _f(v))
                                  for k, v in w.dispersion_driver.items()},
                               "label": input_label(int(w.dispersion_driver["input"]))}
                              if w.dispersion_driver else None),
        "path_envelopes": [{"blocks": [hexaddr(a) for a in e.blocks],
                            "header": hexaddr(e.header), "slope": _f(e.slope),
                            "intercept": _f(e.intercept), "text": e.text()}
                           for e in w.envelopes],
        "max_observed_ticks": _f(w.max_observed_ticks),
        "max_observed_ns": _ns(w.max_observed_ticks, hz),
        "max_observed_input": _input(report, w.max_observed_input),
        # the bracket: the slowest input by its number, its arguments, whether the search
        # found it, and where the worst path goes beyond every input
        "slowest_input": {"number": w.slowest_number,
                          "label": (input_label(w.slowest_number)
                                    if w.slowest_number is not None else None),
                          "arguments": w.slowest_arguments,
                          "found_by_search": w.slowest_searched},
        "beyond_inputs": [{"name": b.name, "kind": b.kind, "path_count": b.path_count,
                           "max_observed": b.max_observed, "input": b.input_index}
                          for b in w.beyond],
        "slowest_call": ({"number": w.slowest_call_number,
                          "label": input_label(w.slowest_call_number),
                          "ticks": _f(w.slowest_call_ticks),
                          "ns": _ns(w.slowest_call_ticks, hz),
                          "others_min_ticks": _f(w.slowest_call_others[0])
                          if w.slowest_call_others else None,
                          "others_max_ticks": _f(w.slowest_call_others[1])
                          if w.slowest_call_others else None,
                          "check": ({"seed": w.slowest_call_check[0],
                                     "fresh_input": w.slowest_call_check[1]}
                                    if w.slowest_call_check else None)}
                         if w.slowest_call_ticks is not None
                         and w.slowest_call_number is not None else None),
        "interrupts_left_out": (dict(w.set_aside, slowest_ns=_ns(w.set_aside.get(
            "slowest_ticks"), hz)) if w.set_aside else None),
        "max_observed_raw_ticks": _f(w.max_observed_raw_ticks),
        "max_observed_raw_ns": _ns(w.max_observed_raw_ticks, hz),
        "max_predicted_ticks": _f(w.max_predicted_ticks),
        "max_predicted_ns": _ns(w.max_predicted_ticks, hz),
        "max_predicted_input": _input(report, w.max_predicted_input),
        "max_predicted_measured_ticks": _f(w.max_predicted_measured_ticks),
        "max_predicted_measured_ns": _ns(w.max_predicted_measured_ticks, hz),
        "bracket_width": _width(w),
        "closest_input": _input(report, w.closest_input),
        "closest_distance": _f(w.closest_distance),
        "path": [{"address": hexaddr(p.block), "count": p.count, "cost_ticks": _f(p.cost_ticks),
                  "callee_ticks": _f(p.callee_ticks), "ticks": _f(p.ticks),
                  "ns": _ns(p.ticks, hz)} for p in w.path],
        "loops": [{"header": hexaddr(lo.header), "name": lo.name,
                   "per_entry": lo.bound.per_entry, "total": lo.bound.total,
                   "source": lo.bound.source, "note": lo.bound.note,
                   "witness": lo.bound.witness, "entries": lo.entries,
                   "back_edges": lo.back_edges, "binding": lo.binding} for lo in w.loops],
        "calls": [{"block": hexaddr(c.block), "instruction": hexaddr(c.instruction),
                   "kind": c.kind, "target": None if c.target is None else hexaddr(c.target),
                   "target_name": c.target_name, "count": c.count,
                   "callee_wcet_ticks": _f(c.callee_wcet_ticks), "note": c.note}
                  for c in w.calls],
        "path_estimable": None if w.path_residual is None else bool(w.path_residual < 1e-6),
        "path_residual": _f(w.path_residual),
        "recursion_depth": w.recursion_depth,
        "error": w.error,
    }
    out = {
        "name": fr.name, "address": hexaddr(fr.address), "root": fr.is_root,
        "timed_other_path": fr.timed_other_path,
        "error_returns": ({"inputs": fr.error_returns.inputs,
                           "errors": fr.error_returns.errors,
                           "values": [{"value": v, "inputs": n}
                                      for v, n in fr.error_returns.values]}
                          if fr.error_returns is not None else None),
        "blocks": blocks,
        "groups": [{"id": _plain(g.id), "blocks": [hexaddr(a) for a in g.blocks],
                    "kind": g.kind, "combinations": list(g.combinations), "advice": g.advice,
                    "share": _f(g.share), "share_estimable": g.share_estimable}
                   for g in fr.groups],
        "overhead_ticks": _f(fr.overhead_ticks), "overhead_ns": _ns(fr.overhead_ticks, hz),
        "validation": _plain(dict(fr.validation)),
        "coverage": {"blocks": len(fr.blocks),
                     "executed": sum(1 for r in fr.blocks if r.executed),
                     "never_executed": [hexaddr(a) for a in fr.never_executed]},
        "wcet": wcet,
        "warnings": [{"message": x.message, "advice": x.advice} for x in fr.warnings],
    }
    for k, v in fr.fit_extra.items():       # other fit fields, passed through
        out.setdefault(k, _plain(v))
    return out


def _width(w: Any) -> dict[str, float] | None:
    """The parts of bound ÷ slowest input (wcetfit.wcet.bracket.BracketWidth), or None."""
    width = w.width()
    if width is None:
        return None
    return {"beyond": width.beyond, "model": width.model, "input": width.input,
            "margin": width.margin, "dispersion": width.dispersion, "total": width.total}
