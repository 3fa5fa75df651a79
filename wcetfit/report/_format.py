"""Number formatting shared by the text and HTML reports: every time carries its unit."""

from __future__ import annotations

import math

from wcetfit.report import BlockRow, input_label, ticks_to_ns
from wcetfit.wcet.dispersion import (MIN_EXTRAPOLATED_CALLS, MIN_INTERRUPT_NS, excess_of,
                                     factor_setter, too_few_to_extrapolate)


def num(v: float | None, digits: int = 1) -> str:
    """1 decimal below 1000, thousands separators above; '—' for nothing."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    text = f"{v:.{digits}f}"
    # a tiny negative value rounds to "-0.0": it is zero at this precision
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def ticks(v: float | None) -> str:
    return "—" if v is None else f"{num(v)} ticks"


def ns(v: float | None, tsc_hz: float | None) -> str:
    n = ticks_to_ns(v, tsc_hz)
    return "—" if n is None else f"{num(n)} ns"


def both(v: float | None, tsc_hz: float | None) -> str:
    """'1,234 ticks (475.0 ns)'."""
    if v is None:
        return "—"
    n = ticks_to_ns(v, tsc_hz)
    return ticks(v) if n is None else f"{ticks(v)} ({num(n)} ns)"


def half_width(ci: tuple[float, float] | None) -> float | None:
    return None if ci is None else (ci[1] - ci[0]) / 2


def cost_pm(row: BlockRow, scale: float = 1.0) -> str:
    """'12.3 ± 0.4' (scale 1 for ticks, 1e9/tsc_hz for ns); '—' when not estimable.  An
    interval reaching below zero is shown from zero, '161.9 (0 to 378.3)': no block takes
    less than no time, and a confidence interval cut to the values a cost can have keeps
    its coverage (libm's tgamma: "161.9 ± 216.4 ticks" on the line that said the costs
    were held to physical values).  A cost below zero itself (an unconstrained fit's) keeps
    its ± interval."""
    if row.cost_ticks is None:
        return "—"
    h = half_width(row.ci95_ticks)
    c = row.cost_ticks * scale
    if h is None:
        return num(c)
    if 0.0 <= c < h * scale:
        return f"{num(c)} (0 to {num(c + h * scale)})"
    return f"{num(c)} ± {num(h * scale)}"


def pct(v: float | None) -> str:
    return "—" if v is None else f"{num(100 * v)} %"


def block_share(row: BlockRow) -> str:
    """The block's share of the time; where it is not estimable alone its share would be
    the fit's particular solution, not a measurement: only its group's share is known."""
    if not row.estimable:
        return "—" if row.group is None else f"in group {row.group}"
    return pct(row.share)


def block_notes(row: BlockRow, entry: int) -> list[str]:
    """What the block table's note column says of a block."""
    notes = []
    if row.count_max == 0:
        notes.append("never executed")
    if row.call:
        notes.append(row.call)
    if row.address == entry:
        notes.append("entry")
    return notes


def count_range(row: BlockRow) -> str:
    if row.count_min is None:
        return "—"
    if row.count_min == row.count_max:
        return f"{row.count_min:,}"
    return f"{row.count_min:,}–{row.count_max:,}"


def above_root_note(report, fr) -> str:  # type: ignore[no-untyped-def]
    """Why a callee's own bound above the root's is not shown as one
    (:meth:`wcetfit.report.Report.above_root_bound`)."""
    root = report.functions[0]
    return (f"above the root's bound: its own worst path over every context, "
            f"{num(fr.wcet.ipet_ticks)} ticks, takes each of its loops (and its callees') at "
            f"the most any input ran it per entry, all on one activation; one activation "
            f"runs inside a call of {root.name}, whose bound of {num(root.wcet.ipet_ticks)} "
            f"ticks caps it")


def bound_note(w) -> str:  # type: ignore[no-untyped-def]
    """What the IPET bound is made of (a WcetSummary)."""
    if w.margin_ticks is None:
        return "point estimate (no covariance: no margin)"
    if w.dispersion_ticks is not None:
        return "(point estimate + 95% margin of the worst path) × call dispersion"
    return "point estimate + 95% margin of the worst path"


# How an excess over a prediction becomes a factor (wcetfit.wcet.dispersion.call_dispersion).
SHARE_OF = (" (the excess as a share of the input's prediction, or of the worst path's for "
            "an input predicted below a quarter of it)")


def dispersion_source(w) -> str:  # type: ignore[no-untyped-def]
    """What set the dispersion factor, in a few words, for the bound's headline: the
    slowest own call it is held above, the joint factor of calls as timed, or the product
    of its three factors with each named (a new user read "× 2.79 for single calls" where
    the misfit of the inputs' means made ×1.97 of it)."""
    f = w.dispersion_factors or {}
    misfit, call, speed = f.get("misfit", 1.0), f.get("call", 1.0), f.get("machine_speed", 1.0)
    setter = factor_setter(f)
    declared = getattr(w, "machine_speed_declared", None)
    # the user's [wcet] machine_speed, where it is above what the timing run measured
    given = (" (declared)" if declared is not None and speed == declared
             and declared > (getattr(w, "machine_speed_measured", None) or 1.0) else "")
    if setter == "events":
        at = [f"misfit ×{misfit:.2f}"] if misfit > 1.0 else []
        at += [f"machine speed ×{speed:.2f}{given}"] if speed != 1.0 else []
        return (f"to cover one event short of an interrupt on a call of the worst path"
                + (f" ({' · '.join(at)})" if at else "")
                + f" ({MIN_INTERRUPT_NS:.0f} ns: a longer excess is taken for an interrupt, "
                  f"a shorter one is the function's own time)")
    if setter == "cover":
        ticks = getattr(w, "slowest_call_ticks", None)
        number = getattr(w, "slowest_call_number", None)
        which = (f" ({input_label(number)}, {ticks:,.0f} ticks"
                 + (" in the check that adopted it" if getattr(w, "slowest_call_check", None)
                    else "") + ")"
                 if ticks is not None and number is not None else "")
        return f"to stay above the slowest call that was the function's own time{which}"
    named = [f"misfit ×{misfit:.2f}", f"single calls ×{call:.2f}"]
    if speed != 1.0:
        named.append(f"machine speed ×{speed:.2f}{given}")
    if setter == "joint":
        return f"for single calls as timed (below {' · '.join(named)})"
    if setter == "calls":
        return (f"for single calls (×{call:.2f}) at the machine's slowest speed "
                f"(×{speed:.2f}{', declared' if given else ''}); "
                f"calls as timed, misfit included, showed less")
    return f"for {' · '.join(named)}"


def curve_note(w, tsc_hz: float | None) -> str | None:  # type: ignore[no-untyped-def]
    """The probability per call the bound is for, and the bound at the curve's two ends
    (wcetfit.wcet.dispersion.exceedance_curve): what a looser or a stricter exceedance
    would give, so that the user sees how much of the bound is the extrapolation.  None
    without a curve."""
    curve = tuple(getattr(w, "exceedance_curve", ()) or ())
    p = getattr(w, "exceedance", None)
    if not curve or p is None:
        return None
    # one line on the default report's screen: the details are in --full and the README
    calls = getattr(w, "dispersion_calls", None)
    if too_few_to_extrapolate(calls):
        # (which calls count: a user who timed 220 × 10 read "the largest of 492 calls"
        # and could not tell why, or what to do)
        return (f"Not extrapolated to {p:.0e} per call ([wcet] exceedance): the largest of "
                f"{calls:,} calls of the long paths (inputs predicted or measured at a "
                f"quarter of the longest prediction or more), fewer than an extreme-value "
                f"fit needs ({MIN_EXTRAPOLATED_CALLS:,}): more inputs near the worst path, "
                f"or more repeats, allow it")
    ends = [c for c in (curve[0], curve[-1]) if not math.isclose(c[0], p, rel_tol=1e-9)]
    head = f"Exceedance {p:.0e} per call ([wcet] exceedance)"
    if not ends:
        return head
    if max(t for _, t in curve) <= min(t for _, t in curve) * (1 + 1e-3):
        # the misfit, the machine's speed or the slowest own call set the factor: nothing
        # in it is extrapolated
        what = ("the interrupt rule's threshold" if factor_setter(
            getattr(w, "dispersion_factors", None) or {}) == "events" else "measured")
        return (f"{head}; the same from {curve[0][0]:.0e} to {curve[-1][0]:.0e}: what sets "
                f"it is {what}, not extrapolated")
    return head + "; at " + ", at ".join(f"{q:.0e}: {both(t, tsc_hz)}" for q, t in ends)


# The lines of a long list a table cell shows (a group's estimable combinations: one per
# combination, hundreds in a large group); the JSON report has them all.
CELL_LINES = 8


def first_lines(lines, most: int = CELL_LINES) -> str:  # type: ignore[no-untyped-def]
    """``lines`` joined one per line, the first ``most`` and how many more."""
    lines = list(lines)
    if len(lines) <= most:
        return "\n".join(lines)
    return "\n".join(lines[:most] + [f"… {len(lines) - most:,} more (--json lists them)"])


# The blocks a table cell names and the characters of one combination it shows (libpcre2's
# pcre2_match: a group of 276 blocks whose one combination had as many terms made its
# table 1,100 lines of --function's 2,065); the JSON report has them all.
CELL_NAMES = 24
CELL_TERMS_CHARS = 600


def first_names(names, most: int = CELL_NAMES) -> str:  # type: ignore[no-untyped-def]
    """``names`` joined by commas, the first ``most`` and how many more."""
    names = list(names)
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join(names[:most]) + f" … and {len(names) - most:,} more (--json lists them)"


def first_terms(text: str, most: int = CELL_TERMS_CHARS) -> str:
    """A combination's text to its last whole term within ``most`` characters, and how
    many terms more."""
    if len(text) <= most:
        return text
    # the value after the last " = " stays whole: it is what the combination says
    eq = text.rfind(" = ")
    lhs, value = (text[:eq], text[eq:]) if eq > 0 else (text, "")
    cut = max(lhs.rfind(" + ", 0, most), lhs.rfind(" − ", 0, most))
    if cut <= 0:
        return text
    rest = lhs[cut:]
    more = rest.count(" + ") + rest.count(" − ")
    return lhs[:cut] + f" … ({more:,} more terms)" + value


def curve_levels(w) -> tuple:  # type: ignore[no-untyped-def]
    """The bound at each exceedance of the curve, as the full tables list them: none when
    the single-call factors are not extrapolated (every level would be the same largest
    call seen, a probability the calls cannot support; the dispersion's row says so)."""
    if too_few_to_extrapolate(getattr(w, "dispersion_calls", None)):
        return ()
    return tuple(getattr(w, "exceedance_curve", ()) or ())


def _per_call(w) -> str:  # type: ignore[no-untyped-def]
    """How the single-call factors hold: 'passed with probability ≤ p per call' when
    extrapolated, else the largest of the calls seen."""
    calls = getattr(w, "dispersion_calls", None)
    if too_few_to_extrapolate(calls):
        return (f"the largest of {calls:,} calls, not extrapolated to {w.exceedance:.0e} per "
                f"call (an extreme-value fit needs {MIN_EXTRAPOLATED_CALLS:,})")
    return f"passed with probability ≤ {w.exceedance:.0e} per call"


def curve_level_note(w, q: float) -> str:  # type: ignore[no-untyped-def]
    """The note beside the bound at exceedance ``q`` in the full tables."""
    own = getattr(w, "exceedance", None)
    if own is not None and math.isclose(q, own, rel_tol=1e-9):
        return "the bound above ([wcet] exceedance)"
    return "for this exceedance probability per call"


def misfit_scope_note(w, tsc_hz: float | None, *, short: bool = False) -> str | None:  # type: ignore[no-untyped-def]
    """What the bound assumes when its misfit factor is the inputs' near the worst path
    (wcetfit.wcet.dispersion.MisfitScope): how much more the others missed, which input,
    and the bound without the assumption; None when every input's misfit was taken."""
    sc = getattr(w, "misfit_scope", None) or {}
    if not sc:
        return None
    near = int(sc["near_inputs"])
    share = 1.0 - float(sc["near_share"])
    if short:
        return (f"misfit ×{sc['near_misfit']:.2f} of the {near} inputs near the worst path "
                f"(others up to ×{sc['far_misfit']:.2f}; observed)")
    f = dict(w.dispersion_factors or {})
    alternative = None
    if w.point_ticks is not None:
        f["misfit"] = float(sc["far_misfit"])
        alternative = (w.point_ticks + (w.margin_ticks or 0.0)) * (1.0 + excess_of(f))
    return (f"the model's error at the worst path as the {near} inputs predicted within "
            f"{100 * share:.0f}% of it showed: misfit ×{sc['near_misfit']:.3f}; "
            f"{int(sc['far_inputs'])} inputs predicted and measured below it missed more, "
            f"up to ×{sc['far_misfit']:.2f} ({input_label(int(sc['far_input']))}: the upper "
            f"quartile of its calls {sc['far_ticks']:,.0f} ticks against "
            f"{sc['far_predicted_ticks']:,.0f} predicted), costs the block counts do not "
            f"see on their paths, taken not to "
            f"reach the worst path (observed, not proven; [wcet] misfit = \"all\" takes them"
            + (f": a bound of {both(alternative, tsc_hz)}" if alternative else "") + ")")


def dispersion_note(w) -> str:  # type: ignore[no-untyped-def]
    """The call dispersion's factors, each with where it comes from."""
    f = w.dispersion_factors or {}
    sc = getattr(w, "misfit_scope", None) or {}
    whose = (f"the {int(sc['near_inputs'])} inputs near the worst path" if sc
             else "an input seen")
    parts = [f"+{100 * (w.dispersion or 0):.1f}% = "
             f"worst misfit of {whose} ×{f.get('misfit', 1.0):.3f}{SHARE_OF}",
             f"call-to-call excess {_per_call(w)} "
             f"×{f.get('call', 1.0):.3f} ("
             + ("" if too_few_to_extrapolate(getattr(w, "dispersion_calls", None)) else
                "extreme-value fit; ") + "[wcet] exceedance"
             + growth_note(getattr(w, "call_growth", None)) + ")"]
    if f.get("machine_speed", 1.0) != 1.0:
        parts.append(f"slowest sustained machine speed seen ×{f['machine_speed']:.3f} "
                     "(costs are at the timing run's fast end)")
    setter = factor_setter(f)
    if setter == "events":
        # a call of a few dozen ticks: the calls seen cannot say how rare an event of a
        # few hundred ns is, and the interrupt rule counts one as the function's own time
        return (f"+{100 * (w.dispersion or 0):.1f}% = the worst path at its misfit and the "
                f"machine's slowest speed, plus one event short of an interrupt "
                f"({MIN_INTERRUPT_NS:.0f} ns), over the worst path, ×{f['events']:.3f}: a "
                f"single call may run that much above its input's level as the function's "
                f"own time (a cache or TLB refill, a page walk, the sibling hyperthread), "
                f"and the calls seen do not say how rarely (the factors, "
                + " × ".join(parts).split(" = ", 1)[1] + ", reach less)")
    if setter == "cover":
        # a measured call of the function's own time the factors did not reach (a short
        # input's call, left out of them): the bound is held above it
        return (f"+{100 * (w.dispersion or 0):.1f}% = the slowest call that is the "
                f"function's own time (not taken for an interrupt) over the worst path, "
                f"×{f['cover']:.3f}: the bound is never below a measured call (the factors, "
                + " × ".join(parts).split(" = ", 1)[1] + ", reach less)")
    if setter == "calls":
        # the joint factor came out below a call's excess at the slowest speed: the two are
        # independent events a longer run brings together
        return (f"+{100 * (w.dispersion or 0):.1f}% = call-to-call excess "
                f"{_per_call(w)} ×{f.get('call', 1.0):.3f} at the "
                f"slowest sustained machine speed seen ×{f.get('machine_speed', 1.0):.3f} "
                f"(calls as timed showed ×{f.get('joint', 1.0):.3f}, but a longer run brings "
                f"a call's excess and a slow period together; the misfit, "
                f"×{f.get('misfit', 1.0):.3f}, is below them)")
    if setter == "joint":
        # the three did not come together on any call measured: the joint factor is kept
        return (f"+{100 * (w.dispersion or 0):.1f}% = a timed call over its input's "
                f"prediction{SHARE_OF}, {_per_call(w)} "
                f"×{f['joint']:.3f} (every call as timed, slow periods "
                f"included; below the product of its parts: "
                + " × ".join(parts).split(" = ", 1)[1] + ")")
    return " × ".join(parts) + " − 1"


def growth_note(growth: float | None) -> str:
    """How a call's excess was taken to the worst path, as a clause for the call factor's
    description ('' when not known)."""
    if growth is None:
        return ("; a call's excess taken as a share of the call: too few calls or lengths "
                "to tell how it grows")
    how = ("in ticks: the calls' excess did not grow with how long their input's calls take"
           if growth < 0.05 else
           "as a share of the call: the calls' excess grew with how long their input's calls "
           "take" if growth > 0.95 else
           f"as growing with how long the input's calls take, to the power {growth:.2f}, as "
           f"the calls showed")
    return f"; a call's excess taken to the worst path {how}"


def machine_speed(extra) -> str | None:  # type: ignore[no-untyped-def]
    """One line on the machine's speed during the timing run (the fit's machine_speed)."""
    m = extra.get("machine_speed") if hasattr(extra, "get") else None
    if not isinstance(m, dict):
        return None
    if not m.get("followed"):
        return f"not followed: {m.get('reason', '')}".rstrip(": ")
    return (f"calls ran at ×{m.get('factor_median', 1):.2f} (median), ×{m.get('factor_p95', 1):.2f} "
            f"(p95), ×{m.get('factor_max', 1):.2f} (slowest) of the run's fast end; divided out "
            f"before the fit (costs are at the fast end)")


# The fit's validation fields in words (wcetfit.fit/1 ``validation``); a field not named
# here is shown with its key's words, so a new field still reaches the reader.
VALIDATION_LABELS = {
    "folds": "cross-validation folds",
    "heldout_inputs": "held-out inputs",
    "heldout_calls": "held-out timed calls",
    "median_rel_error": "held-out calls: median relative error",
    "p95_rel_error": "held-out calls: 95th-percentile relative error",
    "r2": "held-out inputs: R² of their median times",
    "r2_calls": "held-out calls: R²",
    "outside_space": "held-out inputs whose counts the other inputs do not determine",
    "outside_space_weak": "… of them in directions spanned too weakly for the noise",
    "discarded_calls": "calls set aside as interrupted",
    "median_rel_error_inputs": "held-out inputs: median relative error",
    "p95_rel_error_inputs": "held-out inputs: 95th-percentile relative error",
    "median_rel_error_kept": "held-out calls of non-outlier inputs: median relative error",
    "p95_rel_error_kept": "held-out calls of non-outlier inputs: 95th-percentile relative error",
}


def validation_rows(v) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(label, value) of every scalar validation field, relative errors in %."""
    out = []
    for k, val in v.items():
        if val is None or isinstance(val, bool) or not isinstance(val, (int, float, str)):
            continue
        label = VALIDATION_LABELS.get(k, k.replace("_", " "))
        if k.startswith("outside_space") and val == -1:
            out.append((label, "not computed (too many unknowns)"))
        elif "rel_error" in k and isinstance(val, (int, float)):
            out.append((label, f"{num(100 * float(val), 2)} %"))
        elif k.startswith("r2") and isinstance(val, (int, float)):
            out.append((label, f"{float(val):.4f}"))
        elif isinstance(val, float):
            out.append((label, f"{val:.5g}"))
        else:
            out.append((label, str(val)))
    return out


def whole_call_label(label: str, extra) -> str:  # type: ignore[no-untyped-def]
    """A validation label of the whole-call fit; with per-activation fits it names the fit
    it is of (their costs replaced its costs: it is not the fit predictions are made with)."""
    act = extra.get("activations") if hasattr(extra, "get") else None
    return f"whole-call fit (before activations): {label}" if isinstance(act, dict) else label


def pm_both(v, ci, tsc_hz) -> str:  # type: ignore[no-untyped-def]
    """'145.2 ± 12.0 ticks (59.4 ± 4.9 ns)'; '—' for nothing."""
    if v is None:
        return "—"
    t = num(v) + ("" if ci is None else f" ± {num(ci)}") + " ticks"
    n = ticks_to_ns(v, tsc_hz)
    if n is None:
        return t
    nci = None if ci is None else ticks_to_ns(ci, tsc_hz)
    return t + f" ({num(n)}" + ("" if nci is None else f" ± {num(nci)}") + " ns)"


def activation_rows(extra, tsc_hz=None) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(label, value) of the per-activation fit (the fit's ``activations`` field, issue #15):
    per function its held-out errors per activation and its probe terms ε and δ, then the
    root check (held out and in sample), κ and the whole call's overhead."""
    act = extra.get("activations") if isinstance(extra, dict) else None
    if not isinstance(act, dict):
        return []
    out = []
    for name, f in (act.get("functions") or {}).items():
        h = f.get("heldout") or {}
        med, p95 = h.get("median_rel_error"), h.get("p95_rel_error")
        val = ("no held-out activations (too few inputs)" if med is None else
               f"median {num(100 * float(med), 2)} %, p95 {num(100 * float(p95), 2)} % "
               f"over {h.get('activations')} activations")
        out.append((f"held-out error per activation, {name} "
                    f"({f.get('activations')} activations, rank {f.get('rank')}/"
                    f"{f.get('unknowns')})", val))
        for o in f.get("overheads") or []:
            out.append((f"  {name}: probe term {o.get('term')}",
                        pm_both(o.get("value_ticks"), o.get("ci95_ticks"), tsc_hz)
                        if o.get("estimable") else
                        "confounded with blocks that run with it (kept in their costs)"))
    ch = act.get("root_check")
    if isinstance(ch, dict):
        if ch.get("heldout_median_rel_error") is not None:
            out.append(("root calls from activation costs, held out "
                        f"({ch.get('heldout_inputs')} calls' inputs over folds)",
                        f"median {num(100 * float(ch['heldout_median_rel_error']), 2)} %, p95 "
                        f"{num(100 * float(ch['heldout_p95_rel_error']), 2)} %"))
        out.append(("root calls from activation costs, probes included",
                    f"median {num(100 * float(ch['raw_median_rel_error']), 2)} %, p95 "
                    f"{num(100 * float(ch['raw_p95_rel_error']), 2)} %"))
        out.append(("root calls from activation costs, probe overhead removed",
                    f"median {num(100 * float(ch['median_rel_error']), 2)} %, p95 "
                    f"{num(100 * float(ch['p95_rel_error']), 2)} %"))
        k = ch.get("kappa_ticks")
        out.append(("probe overhead per activation κ = ε + δ (root check)",
                    "not separable from the whole call's" if k is None else
                    pm_both(float(k), ch.get("kappa_ci95_ticks"), tsc_hz)))
        if ch.get("epsilon_ticks") is not None:
            out.append(("probe overhead ε inside an activation's readings (calibration)",
                        pm_both(ch["epsilon_ticks"], ch.get("epsilon_ci95_ticks"), tsc_hz)))
            out.append(("probe overhead δ per timed child, in the calling block "
                        "(calibration)",
                        pm_both(ch.get("delta_ticks"), ch.get("delta_ci95_ticks"), tsc_hz)))
            out.append(("ε + δ of the calibration (against κ above)",
                        pm_both(ch.get("calibrated_kappa_ticks"),
                                ch.get("calibrated_kappa_ci95_ticks"), tsc_hz)))
            if ch.get("applied_epsilon_ticks") is not None:
                out.append(("taken out: κ split in the calibration's proportion, ε from "
                            "entry blocks",
                            pm_both(ch["applied_epsilon_ticks"],
                                    ch.get("applied_epsilon_ci95_ticks"), tsc_hz)))
                out.append(("taken out: δ from the calling blocks, per timed child",
                            pm_both(ch.get("applied_delta_ticks"),
                                    ch.get("applied_delta_ci95_ticks"), tsc_hz)))
        elif ch.get("removal") == "kappa":
            out.append(("probe overhead removed",
                        "κ from each timed function's entry block (ε and δ not measured "
                        "separately: time the activations again)"))
        if ch.get("applied_intercept_ticks") is not None:
            out.append(("whole call's overhead with the probe-free costs",
                        pm_both(ch.get("applied_intercept_ticks"),
                                ch.get("applied_intercept_ci95_ticks"), tsc_hz)))
        if ch.get("applied_median_rel_error") is not None:
            out.append(("root calls as predicted (probe-free costs + that overhead)",
                        f"median {num(100 * float(ch['applied_median_rel_error']), 2)} %, p95 "
                        f"{num(100 * float(ch['applied_p95_rel_error']), 2)} %"))
        out.append(("whole call's overhead c of the (κ, c) check (ε of the timing run + the "
                    "root's δ)",
                    pm_both(ch.get("intercept_ticks"), ch.get("intercept_ci95_ticks"), tsc_hz)))
        if ch.get("columns_from_whole_call"):
            out.append(("blocks costed from the whole-call fit (no activation ran them)",
                        str(ch["columns_from_whole_call"])))
    return out


# Why the slowest own call counts as the function's time: a rule, said as one (a call kept
# by the repeat statistic, or less than an interrupt costs above its input's median:
# wcetfit.wcet.dispersion.MIN_INTERRUPT_NS), not an observation that no interrupt came.
OWN_CALL_RULE = ("taken as its own time (kept by the repeat statistic, or under 500 ns "
                 "above its input's median: less than an interrupt costs)")
# the same on the one-screen summary, where --full gives the whole rule
OWN_CALL_SHORT = "counted as its own time, not an interrupt"


def own_call_note(w, short: bool = False) -> str:  # type: ignore[no-untyped-def]
    """Where the slowest own call comes from: the rule and its input, or the check that
    timed it, when it is a call of an adopted input the check found above the bound."""
    check = getattr(w, "slowest_call_check", None)
    number = getattr(w, "slowest_call_number", None)
    if check is not None:
        seed, fresh = check
        return (f"timed by `wcetfit check --seed {seed}` (its fresh input {fresh}, adopted "
                f"as {input_label(number)}), at the bound's machine speed; its calls timed "
                f"again were faster")
    rule = OWN_CALL_SHORT if short else OWN_CALL_RULE
    return f"{rule}, {input_label(number)}" if number is not None else rule


def factor(v: float) -> str:
    """A factor to two decimals, or to two significant digits below 0.1 (a path 0.0166 of
    an input's prediction printed as ×0.02, and the printed factors multiplied to 1.43
    against a stated 1.19)."""
    return f"{v:.2f}" if abs(v) >= 0.1 else f"{v:.2g}"


def set_aside_note(w, tsc_hz: float | None, *, short: bool = False) -> str | None:  # type: ignore[no-untyped-def]
    """What the bound rests on when far more calls were taken for interrupts than
    interrupts explain (wcetfit.wcet.set_aside): that they were interrupts, with how many
    of them are above the bound; None when interrupts explain the calls left out."""
    a = getattr(w, "set_aside", None) or {}
    if not a.get("beyond_rate"):
        return None
    n, calls, expected = int(a["interrupted"]), int(a["calls"]), float(a["expected"])
    above = int(a.get("above_bound", 0))
    if short:
        return (f"{n:,} calls taken for interrupts, left out (interrupts explain "
                f"≈{expected:,.0f}" + (f"; {above:,} above the bound" if above else "") + ")")
    slowest = (f"{input_label(int(a['slowest_input']))}, {both(a['slowest_ticks'], tsc_hz)}"
               if a.get("slowest_ticks") is not None and a.get("slowest_input") is not None
               else None)
    where = (f"{above:,} of them above the bound (the slowest: {slowest})" if above
             else f"all below the bound (the slowest: {slowest})" if slowest else "")
    return (f"{n:,} of {calls:,} timed calls ({n / max(1, calls):.1%}) taken for "
            f"interrupts and left out (at least 500 ns above their input's median), where "
            f"interrupts at up to {float(a['rate_hz']):,.0f} per second explain about "
            f"{expected:,.0f}: the others are the function's own slower calls or "
            f"disturbances beyond interrupts (another process or the hypervisor taking the "
            f"core), which their times cannot tell apart, and the bound rests on their "
            f"being disturbances"
            + (f"; {where}" if where else "") + " (time again on a quiet machine)")
