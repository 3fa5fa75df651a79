"""The report a person reads first: one screen per target, the answer before the tables.

Per root function: the WCET bound and what it is made of, what it rests on (loop bounds
and where they come from, observed path envelopes and count relations, callees,
recursion), the slowest measured input, how well the fit predicts in words, the few
blocks (or groups of blocks) that take most of the time, and the warnings with their
remedies.  The tables behind it are ``--full`` (:mod:`wcetfit.report.text`), the JSON and
the HTML page.

Several roots (a library target): a warning whose text is the same for every root is
said once at the end, and each root shows its few most important warnings (those that
say the bound may be wrong first); the rest are counted and ``--function NAME`` shows
them.  From five roots on, each root takes about six lines, each item cut to one line.

Plain text only (no rich markup): a table name such as ``[loops]`` must reach the reader
as written.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Mapping, Sequence

import numpy as np
from rich.console import Console
from rich.text import Text

from wcetfit.fit.result import KIND_OVERHEAD
from wcetfit.numbering import ADOPT_BASE, REACH_BASE, SEARCH_BASE
from wcetfit.report import (GOAL_MEDIAN_REL, GOAL_P95_REL, TICKS_NOTE, Finding,
                            FunctionReport, Report, _num, input_label, reach_advice)
from wcetfit.report import _format as F
from wcetfit.wcet.result import SOURCE_OBSERVED

# How many of each list one root shows in the summary (the full report has them all).
TOP_ITEMS = 3          # blocks or groups that matter most
MAX_LOOPS = 4
WARNINGS_ONE_ROOT = 12
WARNINGS_MANY_ROOTS = 2
# ... and at most this many lines of warnings for one root, so that the summary stays one
# screen (adpcm with ten warnings ran to 62 lines; the rest is one --function away)
WARNING_LINES = 30
# ... and fewer where the rest of the root's summary took more: the whole of one root's
# summary within this many lines (the header, the bound, what it rests on … grew with what
# they say, and adpcm's ran to 61), less the closing lines (a "… N more" line, a blank one,
# the pointer to --full, wrapped)
SCREEN_LINES = 60
CLOSING_LINES = 4
MIN_SHARE = 0.005      # a block or group below this share is not among the few that matter
# A margin above this many times the worst path's point makes the bound mostly the fit's
# uncertainty: the headline says so (the report's warning does at 1×).
MARGIN_OVER_POINT = 2.0
# A worst path predicted above this many times the slowest prediction of any input makes
# the bound mostly paths no input came near: the headline says so (libgmp's mpn_sqr,
# toom recursion with its callees bounded context-free: ×98,418, a 53-second bound for a
# 0.4 ms call, headlined like any other).
BEYOND_INPUTS = 10.0
COMPACT_FROM = 5       # this many roots or more: each in about six lines


# wcetfit.wcet.analyze's note on the relations between loops of different functions
_CROSS_HULL = re.compile(r"upper hull of the inputs' totals \((\d+) relation\(s\), (\d+) "
                         r"binding")


def render(reports: Sequence[Report], console: Console,
           asked: dict[str, str] | None = None) -> None:
    """Write the summary of every measured root to ``console``.  ``asked``: the report's
    name of a root -> the name wcetfit.toml gives it, where they differ (libm's
    ``remainder`` is reported as ``drem``, its alias at the same address; an IFUNC as the
    implementation its resolver selects): said beside the root's heading."""
    asked = dict(asked or {})
    reports = list(reports)
    if not reports:
        return
    _printed[id(console)] = 0
    # Warnings the same, word for word, for every root are said once, at the end.
    common: list[Finding] = []
    if len(reports) > 1:
        sets = [set(_root_warnings(r)) for r in reports]
        common = [w for w in _root_warnings(reports[0]) if all(w in s for s in sets)]
    first = reports[0]
    rate = (f"TSC rate {first.tsc_hz / 1e9:.4f} GHz" if first.tsc_hz
            else "TSC rate unknown (ticks only)")
    names = ", ".join(r.root for r in reports) if len(reports) <= 4 else \
        f"{len(reports)} functions"
    # inputs that crashed or hung are no part of any figure: said beside the count of
    # those that are (libcrypto's AES_encrypt: 156 of 217 crashed, and the header read
    # "61 inputs" above a bound as if nothing were missing)
    failed = max(r.failed_inputs for r in reports)
    # the worst-case search's inputs said apart: "90 inputs" read wrong where
    # [measure] inputs is 80 (libcrypto's SHA256, 10 of them searched)
    searched = sum(1 for n in first.input_numbers if SEARCH_BASE <= n < ADOPT_BASE)
    adopted = sum(1 for n in first.input_numbers if ADOPT_BASE <= n < REACH_BASE)
    # (a reach witness was counted among the generated inputs: "51 inputs" of 50)
    reached = sum(1 for n in first.input_numbers if n >= REACH_BASE)
    made = f"{first.n_inputs - searched - adopted - reached:,} inputs" + (
        f" + {searched:,} found by the worst-case search" if searched else "") + (
        f" + {adopted:,} adopted from checks" if adopted else "") + (
        f" + {reached:,} reached by angr" if reached else "")
    _line(console, f"wcetfit report — {names}; {made} × "
                   f"{first.n_repeats} timed calls"
                   + (f" ({failed:,} more failed and are in no figure: the first warning)"
                      if failed else "") + f"; {rate}", style="bold")
    _line(console, TICKS_NOTE, style="dim")
    max_warn = WARNINGS_ONE_ROOT if len(reports) == 1 else WARNINGS_MANY_ROOTS
    for r in reports:
        if len(reports) >= COMPACT_FROM:
            _root_compact(r, console, skip=set(common))
        else:
            _root(r, console, skip=set(common), max_warn=max_warn,
                  asked=asked.get(r.functions[0].name) if r.functions else None)
    if common:
        _line(console, "")
        _line(console, f"For all {len(reports)} functions:", style="bold")
        _warnings(console, common, len(common), indent="  ")
    _line(console, "")
    _line(console, "More: --full (every table), --function NAME (one function in full), "
                   "--html FILE (browsable, with the CFG), --json FILE.", style="dim")


def to_text(reports: Report | Sequence[Report], *, width: int = 140) -> str:
    if isinstance(reports, Report):
        reports = [reports]
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                      soft_wrap=False)
    render(reports, console)
    return buf.getvalue()


def _line(console: Console, text: str, *, style: str = "", indent: str = "",
          max_lines: int | None = None) -> None:
    """One item, wrapped to the console's width; wrapped lines keep the indent and hang
    under the text of a "- ", "⚠ " or "→ " bullet.  ``max_lines``: cut with "…" (the
    compact view of many functions; --function shows the whole text)."""
    width = max(40, (console.width or 100) - 1)
    lines = _wrap(console, text, indent) or [""]
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][:width - 1].rstrip() + "…"
    for line in lines:
        console.print(Text(line, style=style), overflow="fold", soft_wrap=False)
    _printed[id(console)] = _printed.get(id(console), 0) + len(lines)


# lines _line printed to each console (by id) since the summary began, for the one-screen
# budget of the warnings
_printed: dict[int, int] = {}


def _root_warnings(report: Report) -> list[Finding]:
    out: list[Finding] = []
    for fr in report.functions:
        out += [w for w in fr.warnings if w not in out]
    out += [w for w in report.warnings if w not in out]
    return out


def _root_compact(report: Report, console: Console, *, skip: set) -> None:
    """One root of many in about six lines: each item cut to one line."""
    fr = report.functions[0]
    w = fr.wcet
    hz = report.tsc_hz
    _line(console, "")
    if w.error or w.ipet_ticks is None:
        _line(console, f"{fr.name}: no WCET bound: {w.error or 'no result'}", style="bold",
              max_lines=2)
    else:
        ratio = (f", {w.ipet_ticks / w.max_observed_ticks:.2f}× the slowest measured input"
                 if w.max_observed_ticks else "")
        _line(console, f"{fr.name}: WCET bound {F.both(w.ipet_ticks, hz)}{ratio}",
              style="bold", max_lines=1)
    from wcetfit.report import heldout_errors
    med, p95, _what = heldout_errors(fr.validation, fr.fit_extra)
    errors = (f" ({F.num(100 * med)} % median, {F.num(100 * p95)} % p95 error)"
              if med is not None and p95 is not None else "")
    slowest = (f"slowest measured: {_slowest_name(report, w)}: "
               f"{F.both(w.max_observed_ticks, hz)}; " if w.max_observed_ticks is not None
               else "")
    _line(console, f"{slowest}fit {fit_in_words(fr).split(' —', 1)[0]}{errors}",
          indent="  ", max_lines=1)
    rests = _rests_on(report, fr, short=True)
    if rests:
        _line(console, "rests on: " + "; ".join(rests), indent="  ", max_lines=1)
    top = _top(report, short=True)
    if top:
        _line(console, "most time: " + ", ".join(top), indent="  ", max_lines=1)
    warns = _by_priority([x for x in _root_warnings(report) if x not in skip
                          and not x.message.startswith("no WCET bound")])
    for x in warns[:1]:
        _line(console, f"⚠ {x.message}", indent="  ", style="yellow", max_lines=1)
        if x.advice:
            _line(console, f"→ {x.advice}", indent="    ", max_lines=1)
    if len(warns) > 1:
        _line(console, f"… {len(warns) - 1} more warning(s): wcetfit report --function "
                       f"{fr.name}", indent="  ", style="dim")


# Which warnings a short view shows first: those that say the bound may be wrong.
_PRIORITY = ("changed since the measurements", "failed and are left out",
             "break the constraints the bound keeps to",
             "error codes most likely",
             "ran the same blocks the same number of times", "bounded level by level",
             "below the slowest",
             "is above the bound",
             "× the worst path's predicted time", "could not be bounded per call site",
             "bounded by what the inputs reached", "worst-case path uses", "never produced",
             "indirect call", "imported")

# Loops bounded by what the inputs reached, shown one by one on the screen: the rest are
# one line (they are also in "The bound rests on"; liblzma's decoder has 45, and they
# hid every other warning).
OBSERVED_LOOP_WARNINGS = 3


# ... and last: the conditions of the measurement, said for every function alike.
# (and a call the bound's rule took for an interrupt or a preemption: on a shared VM
# every run has one, and it headed the warnings above what changes the bound's meaning)
_LAST = ("the machine ran", "rows rejected", "relative error",
         "it was taken for an interrupted call")


def _by_priority(warns: Sequence[Finding]) -> list[Finding]:
    def rank(x: Finding) -> int:
        if any(key in x.message for key in _LAST):
            return len(_PRIORITY) + 1
        return next((i for i, key in enumerate(_PRIORITY) if key in x.message),
                    len(_PRIORITY))
    return sorted(warns, key=rank)


def _root(report: Report, console: Console, *, skip: set, max_warn: int,
          asked: str | None = None) -> None:
    fr = report.functions[0]
    w = fr.wcet
    hz = report.tsc_hz
    _line(console, "")
    also = ((f" (wcetfit.toml's {asked}: the implementation its IFUNC resolver selects on "
             f"this CPU)" if "@impl+" in fr.name else
             f" (wcetfit.toml's {asked}: the same function)") if asked else "")
    _line(console, f"{fr.name} at {fr.address:#x}{also}", style="bold underline")
    if w.error or w.ipet_ticks is None:
        _line(console, f"WCET bound: not computed: {w.error or 'no result'}", indent="  ")
        if fr.timed_other_path:
            _line(console, "The times below are of calls that ran another path than the "
                           "counted one: the fit, the slowest input and the shares describe "
                           "that path, not the function's work", indent="  ", style="bold")
    else:
        ran = report.n_inputs
        few = (f" — from the {ran:,} inputs that ran; {report.failed_inputs:,} failed"
               if report.failed_inputs > ran else "")
        # (libc's qsort as init wrote it: 77 of 94 inputs crashed, and the bound of the 3
        # that sorted nothing was headlined like any other)
        _line(console, f"WCET bound: {F.both(w.ipet_ticks, hz)}{few}", indent="  ",
              style="bold")
        parts = [f"{F.num(w.point_ticks)} ticks on the worst-case path"]
        if w.margin_ticks is not None:
            parts.append(f"{F.num(w.margin_ticks)} ticks 95% margin")
        made = " + ".join(parts)
        if w.dispersion:
            made = f"({made}) × {1 + w.dispersion:.2f} {F.dispersion_source(w)}"
        _line(console, f"= {made}", indent="    ")
        curve = F.curve_note(w, hz)
        if curve:
            _line(console, curve, indent="    ")
        if w.broken_inputs is not None:
            # a user's fact the measurements contradict: the headline must not read as a
            # bound for every call (libgmp's popcount, [loops] at 10: 467 of 501 broke it)
            _line(console, f"Only for calls that keep the bound's constraints: "
                           f"{w.broken_inputs.text} break them (a [loops] or [flow] fact they "
                           f"contradict; see the warnings)", indent="    ", style="bold")
        width = w.width() if hasattr(w, "width") else None
        if width is not None and width.beyond > BEYOND_INPUTS:
            particular = w.path_residual is not None and w.path_residual > 1e-6
            _line(console, f"Mostly paths no input came near: the worst path's predicted time "
                           f"is {width.beyond:,.0f}× the slowest any input was predicted "
                           f"(loop bounds, activations and recursion taken together as no input "
                           f"ran them"
                           + ("; and along counts no input ran, its cost is the fit's "
                              "particular solution, not a measurement" if particular else "")
                           + "): [loops], [recursion] and [flow] facts bound what the function "
                             "can do (see what the bound rests on)",
                  indent="    ", style="bold")
        if w.margin_ticks is not None and w.point_ticks and \
                w.margin_ticks > MARGIN_OVER_POINT * w.point_ticks:
            # (libpcre2's pcre2_match: a margin 21.7× the path made the bound 40× the
            # slowest input and 504× the slowest fresh call, headlined like any other)
            _line(console, f"Mostly uncertainty: the 95% margin is "
                           f"{w.margin_ticks / w.point_ticks:.1f}× the worst path's predicted "
                           f"time, whose costs the inputs determine poorly (see the "
                           f"warnings)", indent="    ", style="bold")
        above = int((w.set_aside or {}).get("above_bound", 0))
        if above and (w.set_aside or {}).get("beyond_rate"):
            # calls left out as interrupts where interrupts cannot explain that many: the
            # headline must not read as above every call measured
            _line(console, f"Not above every call measured: {above:,} of the calls taken for "
                           f"interrupts {'is' if above == 1 else 'are'} above it, where "
                           f"interrupts explain few of them (see what the bound rests on)",
                  indent="    ", style="bold")
        if fr.error_returns is not None:
            # (zstd's ZSTD_decompress on init's random bytes: every call rejected at the
            # frame check, and a plausible bound of the rejection headlined)
            _line(console, f"Mostly for calls rejected with an error code: "
                           f"{fr.error_returns.describe()} (see the warnings)",
                  indent="    ", style="bold")
        if fr.inputs_one_path:
            # (expat's XML_Parse with init's NULL parser: every input returned at the first
            # check, and the headline read as the function's bound)
            ran = sum(1 for b in fr.blocks if b.executed)
            _line(console, f"Only for the one path every input ran ({ran} of "
                           f"{len(fr.blocks)} blocks): vary the inputs (see the warnings)",
                  indent="    ", style="bold")
    if w.max_observed_ticks is not None:
        # (no-break spaces: the wrapped line never splits the figure from its name)
        ratio = (f"; bound / slowest = {w.ipet_ticks / w.max_observed_ticks:.2f}"
                 .replace(" ", "\u00a0").replace(";\u00a0", "; ", 1)
                 if w.ipet_ticks and w.max_observed_ticks > 0 else "")
        found = (" (found by the worst-case search)" if w.slowest_searched else
                 " (adopted from a check)" if w.slowest_number is not None
                 and ADOPT_BASE <= w.slowest_number < REACH_BASE else "")
        _line(console, f"Slowest measured input: {_slowest_name(report, w)}{found}, "
                       f"{F.both(w.max_observed_ticks, hz)} (median of its calls){ratio}",
              indent="  ")
        if w.slowest_arguments:
            _line(console, f"arguments {w.slowest_arguments}", indent="    ", max_lines=1)
        if w.slowest_call_ticks is not None and w.slowest_call_number is not None:
            # the maximum observed execution time: a real call's own time, which the WCET
            # cannot be below (the median above is what the input typically takes)
            ratio = (f"; bound / slowest call = {w.ipet_ticks / w.slowest_call_ticks:.2f}"
                     .replace(" ", "\u00a0").replace(";\u00a0", "; ", 1)
                     if w.ipet_ticks and w.slowest_call_ticks > 0 else "")
            how = (F.OWN_CALL_SHORT if w.slowest_call_check is None else
                   f"in `wcetfit check --seed {w.slowest_call_check[0]}`, fresh input "
                   f"{w.slowest_call_check[1]}, at the bound's machine speed")
            _line(console, f"Slowest single call: {input_label(w.slowest_call_number)}, "
                           f"{F.both(w.slowest_call_ticks, hz)} ({how}){ratio}",
                  indent="  ")
        width = w.width()
        if width is not None and not (1 / WIDTH_NOTABLE <= width.beyond <= WIDTH_NOTABLE
                                      and 1 / WIDTH_NOTABLE <= width.model <= WIDTH_NOTABLE):
            # only where the path or the model widens the bracket: the dispersion's part
            # is the headline's already (--full and the JSON always give all five)
            # (the model's part is at the input predicted slowest: the warning on an
            # over-predicted path, and --full, say it in words)
            x = F.factor
            _line(console, f"Bound / slowest {width.total:.2f} = the worst path beyond "
                           f"every input ×{x(width.beyond)} · the model's prediction over "
                           f"the measured time ×{x(width.model)} at "
                           f"{report.input_name(w.max_predicted_input)} (predicted slowest) · "
                           f"its measured time over the slowest input's ×{x(width.input)} · "
                           f"the 95% margin "
                           f"×{x(width.margin)} · single calls ×{x(width.dispersion)}",
                  indent="  ")
        if w.beyond:
            _line(console, "The worst path goes beyond every input at:", indent="  ")
            for b in w.beyond[:4]:
                # (a block no input ran was "at most 0.0× in an input (input 0)")
                seen = (f"at most {b.max_observed:,}× in an input "
                        f"({input_label(b.input_index)})" if b.max_observed else
                        "no input ran it")
                _line(console, f"- {b.kind} {b.name}: {b.path_count:,}× per call on the "
                               f"worst path, {seen}", indent="    ", max_lines=1)
            if len(w.beyond) > 4:
                _line(console, f"- … and {len(w.beyond) - 4} more (--full)", indent="    ")
    rests = _rests_on(report, fr)
    if rests:
        _line(console, "The bound rests on:", indent="  ")
        for text in rests:
            _line(console, "- " + text, indent="    ")
    _line(console, "Fit: " + fit_in_words(fr, hz), indent="  ")
    speed = _speed(fr)
    if speed:
        _line(console, speed, indent="  ")
    top = _top(report)
    if top:
        _line(console, "Where the time goes (share of the mean call):", indent="  ")
        for text in top:
            _line(console, text, indent="    ")
    warns = _folded_unexecuted(_folded_loops(_by_priority(
        [x for x in _root_warnings(report) if x not in skip
         and not x.message.startswith("no WCET bound")])), fr.name)
    if warns:
        _line(console, f"Warnings ({len(warns)}):", indent="  ", style="bold")
        room = min(WARNING_LINES, SCREEN_LINES - CLOSING_LINES - _printed.get(id(console), 0))
        shown = _warnings(console, warns, max_warn, indent="    ",
                          lines=room if max_warn == WARNINGS_ONE_ROOT else None)
        if len(warns) > shown:
            _line(console, f"… {len(warns) - shown} more: wcetfit report --function "
                           f"{fr.name}", indent="    ", style="dim")


# The summary splits bound ÷ slowest into its parts (wcetfit.wcet.bracket.BracketWidth)
# when the worst path beyond the inputs or the model's error at the input predicted slowest
# is at least this factor (either way): those are what the headline does not say.
WIDTH_NOTABLE = 1.15


def _slowest_name(report: Report, w) -> str:  # type: ignore[no-untyped-def]
    """The slowest input by its number ("input 7", "search input 41")."""
    if w.slowest_number is not None:
        return input_label(w.slowest_number)
    return report.input_name(w.max_observed_input)


def _folded_loops(warns: list[Finding]) -> list[Finding]:
    """The first :data:`OBSERVED_LOOP_WARNINGS` warnings of loops bounded by what the
    inputs reached, and the others in one, where they stood."""
    key = "bounded by what the inputs reached"
    loops = [x for x in warns if key in x.message]
    if len(loops) <= OBSERVED_LOOP_WARNINGS + 1:
        return warns
    rest = loops[OBSERVED_LOOP_WARNINGS:]
    names = [m.group(1) for x in rest
             if (m := re.search(r"loop (\S+) is bounded", x.message))]
    shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
    folded = Finding(f"{len(rest)} more loops are bounded by what the inputs reached"
                     + (f": {shown}" if shown else ""),
                     "if inputs can iterate more, add their bounds under [loops] "
                     "(wcetfit report --full lists each)")
    return _in_one(warns, rest, folded)


def _in_one(warns: list[Finding], rest: list[Finding], folded: Finding) -> list[Finding]:
    """``warns`` with the findings of ``rest`` replaced by ``folded``, where the first of
    them stood."""
    dropped = {id(x) for x in rest}
    out: list[Finding] = []
    for x in warns:
        if id(x) not in dropped:
            out.append(x)
        elif folded not in out:
            out.append(folded)
    return out


# Callees whose never-executed blocks are said one by one on the screen; the others are one
# line (libcrypto's SHA512: 332 warnings, most of them error paths of callees).
UNEXECUTED_CALLEE_WARNINGS = 2
_UNEXECUTED = re.compile(r"^(\S+): (\d+) block\(s\) never executed by the inputs")


def _folded_unexecuted(warns: list[Finding], root: str) -> list[Finding]:
    """The root's warning of blocks no input executed, the first
    :data:`UNEXECUTED_CALLEE_WARNINGS` callees', and the other callees' in one line."""
    callees = [(x, m) for x in warns if (m := _UNEXECUTED.match(x.message))
               and m.group(1) != root]
    if len(callees) <= UNEXECUTED_CALLEE_WARNINGS + 1:
        return warns
    rest = callees[UNEXECUTED_CALLEE_WARNINGS:]
    names = [m.group(1) for _, m in rest]
    blocks = sum(int(m.group(2)) for _, m in rest)
    folded = Finding(f"{len(rest)} more callees have blocks no input executed ({blocks} "
                     f"blocks: {', '.join(names[:6])}{' …' if len(names) > 6 else ''}); "
                     f"their costs are unknown", rest[0][0].advice)
    return _in_one(warns, [x for x, _ in rest], folded)


def _warnings(console: Console, warns: Sequence[Finding], limit: int, indent: str,
              lines: int | None = None) -> int:
    """Print the first ``limit`` warnings, and only as many as fit in ``lines`` wrapped
    lines (at least one); return how many were printed."""
    used = shown = 0
    for x in warns[:limit]:
        need = _wrapped(console, f"⚠ {x.message}", indent) + (
            _wrapped(console, f"→ {x.advice}", indent + "  ") if x.advice else 0)
        if lines is not None and shown and used + need > lines:
            break
        _line(console, f"⚠ {x.message}", indent=indent, style="yellow")
        if x.advice:
            _line(console, f"→ {x.advice}", indent=indent + "  ")
        used += need
        shown += 1
    return shown


def _wrapped(console: Console, text: str, indent: str) -> int:
    """How many lines :func:`_line` makes of ``text``."""
    return max(1, len(_wrap(console, text, indent)))


def _wrap(console: Console, text: str, indent: str) -> list[str]:
    """``text`` wrapped to the console's width; wrapped lines keep the indent and hang
    under the text of a "- ", "⚠ " or "→ " bullet."""
    hang = 2 if text.startswith(("- ", "⚠ ", "→ ")) else 0
    width = max(40, (console.width or 100) - 1)
    return textwrap.wrap(text, width=width, initial_indent=indent,
                         subsequent_indent=indent + " " * hang, break_on_hyphens=False)


def _loop_weights(report: Report) -> dict[int, float]:
    """Each loop header's share of the root's worst path, in ticks: its body's blocks
    (those whose innermost loop it is) at their count on the root's worst path and their
    cost (the fit's particular solution where a block has no cost of its own): an order
    of what matters, not a figure to print."""
    out: dict[int, float] = {}
    for f in report.functions:
        for b in getattr(f, "blocks", ()):
            if b.loop_header is None:
                continue
            count = b.wcet_count if f.is_root else b.root_path_count
            cost = b.cost_ticks if b.cost_ticks is not None else b.solution_ticks
            if count and cost:
                out[b.loop_header] = out.get(b.loop_header, 0.0) + float(count) * max(
                    0.0, float(cost))
    return out


def _rests_on(report: Report, fr: FunctionReport, *, short: bool = False) -> list[str]:
    """What the bound takes as given, beyond the CFG and the fitted costs (``short``: the
    loops' sources in a word)."""
    w = fr.wcet
    out = []
    # the user's facts first: what the bound takes from the user must not hide among
    # "more loop bounds"; then the loops that carry the most of the worst path's time
    # (libcrypto's SHA256: its compression loop, ≤ 63 per call as observed, 62 % of the
    # time, sat among "7 more" behind OPENSSL_cleanse's and OPENSSL_strnlen's)
    weight = _loop_weights(report)
    loops = sorted((lo for f in report.functions for lo in f.wcet.loops),
                   key=lambda lo: (lo.bound.source != "fact",
                                   -weight.get(getattr(lo, "header", None), 0.0)))
    for lo in loops[:MAX_LOOPS]:
        b = lo.bound
        src = (("observed only" if short else "the most the inputs reached: add a [loops] "
                "bound if inputs can iterate more") if b.source == SOURCE_OBSERVED else
               "from [loops]" if b.source == "fact" else b.source)
        if b.source == SOURCE_OBSERVED and (b.total == 0 or (b.total is None
                                                            and b.per_entry == 0)):
            # ("≤ 0 iterations per entry and ≤ 0 per call (the most the inputs reached)"
            # read as a bound like the others: it is the loop's body left out)
            out.append(f"loop {lo.name}: never iterated on any input, so the bound takes "
                       f"it not to iterate" + ("" if short else
                                               " (add a [loops] bound if inputs can)"))
            continue
        bound = " and ".join(x for x in (
            f"≤ {b.per_entry} iterations per entry" if b.per_entry is not None else "",
            f"≤ {b.total} per call" if b.total is not None else "") if x)
        if b.source == "fact" and getattr(lo, "entries", 0) and not lo.binding:
            # a fact the worst path stays below is no premise of this bound: the headline
            # said "≤ 2047 (from [loops])" of a path held at the inputs' 1,023
            src += (f"; not charged: the worst path takes {lo.back_edges:,} in "
                    f"{lo.entries:,} entr{'y' if lo.entries == 1 else 'ies'}, see the "
                    f"warnings")
        out.append(f"loop {lo.name}: {bound} ({src})")
    if len(loops) > MAX_LOOPS:
        observed = sum(1 for lo in loops[MAX_LOOPS:] if lo.bound.source == SOURCE_OBSERVED)
        out.append(f"{len(loops) - MAX_LOOPS} more loop bounds ({observed} observed only; "
                   f"--full lists them)")
    never = sum(1 for f in report.functions for b in getattr(f, "blocks", ())
                if not b.executed)
    if never and w.ipet_ticks is not None \
            and getattr(w, "unreached_policy", "observed") == "observed":
        # the code no input ran, left out of the worst path ([wcet] unreached =
        # "observed"): zstd's LZ4 compressor ran 76 of 271 blocks, and the one screen
        # said nothing of the other 195
        total = sum(len(getattr(f, "blocks", ())) for f in report.functions)
        out.append(f"the code the inputs ran: {total - never:,} of {total:,} blocks "
                   + ("(observed)" if short else
                      f"({never:,} no input ran are left out of the worst path; "
                      + reach_advice(getattr(report, "reach_refusal", None),
                                     "inputs that run them")
                      + ", [wcet] unreached = \"require\" bounds them instead)"))
    if w.envelopes:
        out.append(f"{len(w.envelopes)} path envelope(s) every input kept (observed, "
                   f"not proven)")
    if w.relations:
        out.append(f"{len(w.relations)} count relation(s) every input kept (observed, "
                   f"not proven)")
    scope = F.misfit_scope_note(w, report.tsc_hz, short=short)
    if scope:
        out.append(scope)
    aside = F.set_aside_note(w, report.tsc_hz, short=short)
    if aside:
        out.append(aside)
    # (wcetfit.wcet.analyze's note on the [loops] facts of single call sites)
    site = [x.message for x in (*report.warnings, *fr.warnings)
            if "loop bound(s) given per call site in [loops]" in x.message]
    if site:
        out.append(site[0].split(": ", 1)[1].split("; if one is not", 1)[0] + " (facts)")
    callees = [f for f in report.functions[1:] if f.wcet.ipet_ticks is not None]
    # (wcetfit.wcet.analyze's note when the root's bound is the per-call-site program's)
    notes = [x.message for x in (*report.warnings, *fr.warnings)
             if "callees bounded per call site" in x.message]
    per_site = bool(notes)
    if per_site:
        hull = next((m for n in notes if (m := _CROSS_HULL.search(n))), None)
        out.append("callees bounded per call site: their loop totals, block counts and "
                   "activations seen per call bound all call sites together"
                   + (", and the path keeps to the span of the measured counts"
                      if any("affine span" in n for n in notes) else "")
                   + (f", and the loops of different functions to the upper hull of the "
                      f"inputs' totals ({hull.group(2)} of {hull.group(1)} relations bind)"
                      if hull else "")
                   + " (observed, not proven)")
    if callees and per_site:
        # each callee's whole-call bound takes its loop totals from one input and its
        # entries from another: far above what any call of the root lets it run (zlib's
        # compress2: deflate 192,399,126 beside a root bound of 138,466), and not what the
        # bound above charges, so not among what it rests on
        out.append(f"{len(callees)} callee(s) have context-insensitive bounds of their own, "
                   f"not charged here (--full lists them)")
    elif callees:
        # a bound below one tick is no physical figure (a call costs at least its
        # instructions): its blocks' costs are sums the inputs did not separate from its
        # callers' (the fit's particular solution), not a WCET of 0
        shown = ", ".join(f"{c.name} (none of its own)" if c.no_bound_of_its_own else
                          f"{c.name} (above the root's)" if report.above_root_bound(c) else
                          f"{c.name} {F.both(c.wcet.ipet_ticks, report.tsc_hz)}"
                          for c in callees[:6])
        more = f", … {len(callees) - 6} more" if len(callees) > 6 else ""
        none = any(c.no_bound_of_its_own for c in callees[:6])
        above = any(report.above_root_bound(c) for c in callees[:6])
        # each callee's worst path over all its calls, context-insensitive: libcrypto's
        # MD5_Final listed at 24,391 ticks beside MD5's own bound of 13,979, which read as
        # a call of it taking that long (its two calls of the block function charged 64
        # blocks each, where one call hashes at most two)
        out.append(f"callees' own bounds (context-insensitive: each one's worst path over "
                   f"all of its calls, which one call need not reach): "
                   f"{shown}{more}"
                   + ("; \"none of its own\": the inputs do not determine that callee's "
                      "block costs apart from its callers'" if none else "")
                   + ("; \"above the root's\": one activation runs inside a call of the "
                      "root, whose bound caps it" if above else ""))
    rec = [f"{f.name} {f.wcet.recursion_depth}" for f in report.functions
           if f.wcet.recursion_depth]
    if rec:
        out.append("recursion depth (from [recursion] or observed): " + ", ".join(rec))
    if w.path_residual is not None and w.path_residual > 1e-6:
        # (beside "only for the one path every input ran" it read as a contradiction:
        # the worst path is another one, which the control flow allows)
        out.append("the fit's particular solution: the worst path takes a combination of "
                   "counts no input ran" + (" (not the one path they all ran: the control "
                                            "flow allows others)" if fr.inputs_one_path
                                            else ""))
    speed = _speed_assumed(fr, short=short)
    if speed:
        out.append(speed)
    return out


def _speed_assumed(fr: FunctionReport, *, short: bool = False) -> str | None:
    """The machine's slowest speed the bound covers, and where it comes from: the timing
    run's slowest period is what the machine did then, not what it can do (on this
    project's VM a later period ran fir ×1.37 where its timing run's slowest was ×1.03),
    so the bound rests on it unless the user declared a slower one."""
    w = fr.wcet
    measured = getattr(w, "machine_speed_measured", None)
    declared = getattr(w, "machine_speed_declared", None)
    if measured is None or w.ipet_ticks is None:
        return None
    extra = fr.fit_extra.get("machine_speed")
    followed = isinstance(extra, dict) and bool(extra.get("followed"))
    if declared is not None and declared > measured and not followed:
        # (libxxhash's XXH64: "the timing run's slowest period: ×1.00" where nothing was
        # followed, read as a steady machine)
        return (f"machine ≤ ×{declared:.2f} as timed (declared)" if short else
                f"the machine no slower than ×{declared:.2f} its speed during the timing "
                f"run (from [wcet] machine_speed; the run's speed was not followed, so its "
                f"slower periods are in the single-call factor already, and the declared "
                f"speed multiplies on top of them: a margin, not a measurement)")
    if declared is not None and declared > measured:
        return (f"machine ≤ ×{declared:.2f} its fastest (declared)" if short else
                f"the machine no slower than ×{declared:.2f} its speed at the timing run's "
                f"fast end (from [wcet] machine_speed; the timing run's slowest period: "
                f"×{measured:.2f})")
    if not followed:
        return ("machine as fast as when timed (speed not followed)" if short else
                "the machine no slower than during the timing run (its speed over the run "
                "was not followed, so no slow period is in the bound; [wcet] machine_speed "
                "sets the slowest to cover)")
    if short:
        return f"machine ≤ ×{measured:.2f} its fastest (timing run)"
    return (f"the machine no slower than the timing run's slowest period, ×{measured:.2f} its "
            f"fast end (measured"
            + (f"; [wcet] machine_speed ×{declared:.2f} is below it" if declared is not None
               else ": a shared machine can run slower later; [wcet] machine_speed sets the "
                    "slowest to cover")
            + ")")


# Beyond these the held-out figures describe too small a part of the data for "good": the
# share of inputs set aside as outliers, the rise of the residual when costs are held ≥ 0
MAX_GOOD_REJECTED = 0.10
MAX_GOOD_RISE = 0.25


def _word(med: float, p95: float | None) -> str:
    return ("good" if med <= GOAL_MEDIAN_REL and (p95 is None or p95 <= GOAL_P95_REL) else
            "fair" if med <= 5 * GOAL_MEDIAN_REL and (p95 is None or p95 <= 4 * GOAL_P95_REL)
            else "poor")


def activation_fit_in_words(act, hz: float | None) -> str:  # type: ignore[no-untyped-def]
    """The fit when its costs come from per-function activation fits: per function the
    held-out error of its activations, the root's calls predicted from those costs (held
    out), and the probe overhead taken out, in ticks and ns."""
    fns = act.get("functions") or {}
    ch = act.get("root_check") or {}
    med, p95 = _num(ch.get("heldout_median_rel_error")), _num(ch.get("heldout_p95_rel_error"))
    if med is None:
        med, p95 = _num(ch.get("median_rel_error")), _num(ch.get("p95_rel_error"))
        how = "in sample (too few inputs to hold some out)"
    else:
        how = "held out"
    head = (f"{_word(med, p95)} — " if med is not None else "") + \
        f"each of {len(fns)} function(s) fitted from its own activations"
    root = ("" if med is None else
            f"; root calls predicted from these costs within {F.num(100 * med)} % (median) "
            f"and {F.num(100 * (p95 or 0))} % (95th percentile), {how}; the goals are "
            f"{GOAL_MEDIAN_REL:.0%} and {GOAL_P95_REL:.0%}")
    per = []
    for name, f in fns.items():
        h = f.get("heldout") or {}
        m, p = _num(h.get("median_rel_error")), _num(h.get("p95_rel_error"))
        per.append(f"{name} {F.num(100 * m)} / {F.num(100 * p)} %" if m is not None and
                   p is not None else f"{name} — (too few inputs)")
    acts = "; held-out activations (median / p95): " + ", ".join(per) if per else ""
    k = _num(ch.get("kappa_ticks"))
    e, d = _num(ch.get("epsilon_ticks")), _num(ch.get("delta_ticks"))
    if e is not None and d is not None:
        kc = _num(ch.get("calibrated_kappa_ticks"))
        ae, ad = _num(ch.get("applied_epsilon_ticks")), _num(ch.get("applied_delta_ticks"))
        kappa = (f"; probe overhead measured apart: ε = "
                 f"{_pm(e, _num(ch.get('epsilon_ci95_ticks')), hz)}, δ = "
                 f"{_pm(d, _num(ch.get('delta_ci95_ticks')), hz)} (κ = ε + δ = "
                 f"{_pm(kc, _num(ch.get('calibrated_kappa_ci95_ticks')), hz)}"
                 + ("" if k is None else
                    f"; the root check's κ = {_pm(k, _num(ch.get('kappa_ci95_ticks')), hz)}")
                 + ")")
        if ae is not None and ad is not None:
            kappa += (f"; taken out: {_pm(ae, _num(ch.get('applied_epsilon_ci95_ticks')), hz)}"
                      f" (ε) from each timed activation's entry block, "
                      f"{_pm(ad, _num(ch.get('applied_delta_ci95_ticks')), hz)} (δ) from the "
                      "calling block per timed child")
    else:
        kappa = ("; probe overhead κ = ε + δ per activation not separable from the whole "
                 "call's (kept in the costs)" if k is None else
                 f"; probe overhead κ = ε + δ = {_pm(k, _num(ch.get('kappa_ci95_ticks')), hz)}"
                 " per activation, taken out of entry blocks (ε and δ not measured apart)")
    c, cci = _num(ch.get("applied_intercept_ticks")), ch.get("applied_intercept_ci95_ticks")
    if c is None:
        c, cci = _num(ch.get("intercept_ticks")), ch.get("intercept_ci95_ticks")
    whole = ("" if c is None else
             f"; whole call's overhead {_pm(c, _num(cci), hz)}")
    n_whole = int(ch.get("columns_from_whole_call") or 0)
    rest = (f"; {n_whole} block(s) no activation ran keep the whole-call fit's cost"
            if n_whole else "")
    few = act.get("whole_call_functions") or []
    if few:
        rest += ("; costed from the whole calls instead, too few activations for an "
                 "interval: " + ", ".join(f"{w['name']} ({w['activations']} activations, "
                                          f"{w['residual_dof']} residual degrees of freedom)"
                                          for w in few))
    return head + root + acts + kappa + whole + rest


def _pm(v: float, ci: float | None, hz: float | None) -> str:
    """'145.2 ± 12.0 ticks (59.4 ± 4.9 ns)'."""
    from wcetfit.report import ticks_to_ns

    t = f"{F.num(v)}" + ("" if ci is None else f" ± {F.num(ci)}") + " ticks"
    n = ticks_to_ns(v, hz)
    if n is None:
        return t
    nci = ticks_to_ns(ci, hz) if ci is not None else None
    return t + f" ({F.num(n)}" + ("" if nci is None else f" ± {F.num(nci)}") + " ns)"


def fit_in_words(fr: FunctionReport, hz: float | None = None) -> str:
    """How well the fit predicts held-out calls, in words and the two figures behind them."""
    from wcetfit.report import activations_of

    act = activations_of(fr.fit_extra)
    if act is not None:
        return activation_fit_in_words(act, hz)
    v = fr.validation
    med, p95 = _num(v.get("median_rel_error")), _num(v.get("p95_rel_error"))
    if med is None:
        return "no held-out validation (too few inputs to hold some out)"
    word = _word(med, p95)
    rows = fr.fit_extra.get("rows")
    held = [w for w in fr.fit_extra.get("fit_warnings") or ()
            if isinstance(w, Mapping) and w.get("code") == "held_to_physical"]
    rise = re.search(r"sum of squares by ([0-9.,]+) %", str(held[0].get("message", ""))) \
        if held else None
    rejected_share = (rows["rejected"] / rows["total"] if isinstance(rows, dict)
                      and rows.get("rejected") and rows.get("total") else 0.0)
    if word == "good" and (rejected_share > MAX_GOOD_REJECTED or (
            rise and float(rise.group(1).replace(",", "")) > 100 * MAX_GOOD_RISE)):
        # the held-out figures are of the inputs the fit kept: with many set aside, or
        # costs the data pulled below 0, "good" would say more than they do (libgmp's
        # __gmpn_hamdist: 21 of 106 inputs outliers, the residual up 42.9 %, "good")
        word = "fair"
    text = (f"{word} — a held-out call's time is predicted within {F.num(100 * med)} % "
            f"(median)")
    if p95 is not None:
        text += f" and {F.num(100 * p95)} % (95th percentile)"
    text += (f"; the goals are {GOAL_MEDIAN_REL:.0%} and {GOAL_P95_REL:.0%} (fair: "
             f"{5 * GOAL_MEDIAN_REL:.0%} and {4 * GOAL_P95_REL:.0%})")
    outside, held_out = v.get("outside_space"), v.get("heldout_inputs")
    weak = v.get("outside_space_weak") if isinstance(v.get("outside_space_weak"), int) else 0
    if isinstance(outside, int) and isinstance(held_out, int) and held_out > 0:
        # such an input's prediction leans on costs the other inputs did not determine:
        # the figures measure the costs beyond what was measured, not the noise.  Two
        # causes, two remedies: count combinations no other input ran (vary the inputs),
        # and ones they ran too little for the timing noise (the calls example: a
        # direction 3e-5 of the largest, estimated as unknown, 516 of 520 inputs "not
        # spanned" while every one lay in the inputs' span)
        unspanned = max(outside - max(weak, 0), 0)
        if unspanned >= 0.1 * held_out:
            text += (f"; {unspanned} of {held_out} held-out inputs ran block counts the "
                     f"other inputs do not span (their predictions rest on costs those "
                     f"inputs did not determine: more varied inputs would pin them down)")
        if weak >= 0.1 * held_out:
            text += (f"; {weak} of {held_out} held-out inputs ran count combinations the "
                     f"other inputs vary too little for the timing noise (taken as "
                     f"unknown: inputs that vary those counts more, or quieter timing, "
                     f"would determine them)")
    if isinstance(rows, dict) and rows.get("rejected"):
        text += f"; {rows['rejected']} of {rows.get('total', '?')} inputs set aside as outliers"
    size = [w for w in fr.fit_extra.get("fit_warnings") or ()
            if isinstance(w, Mapping) and w.get("code") == "unconstrained_for_size"]
    if size:
        # (zstd's compressor: 718 unknowns, negative costs and callee bounds, and this
        # line said nothing)
        text += "; costs not held to physical values: " + str(size[0].get("message", "")) \
            .split(": the costs are ", 1)[-1].replace("unconstrained least squares",
                                                      "unconstrained least squares, for " +
                                                      _unknowns(size[0]), 1)
    if held:
        # the data asked for costs no machine has: said here, not only among the warnings
        text += ("; costs held to physical values (every block ≥ 0, ε ≥ its floor), "
                 "which least squares broke" + (f": the residual sum of squares rose "
                                                f"{rise.group(1)} %" if rise else ""))
    return text


def _unknowns(warning: Mapping) -> str:
    """"718 unknowns (the physical fit runs for up to 600)" from an unconstrained_for_size
    warning's message."""
    m = re.match(r"(\d+) unknowns, more than the (\d+)", str(warning.get("message", "")))
    return (f"{m.group(1)} unknowns (the physical fit runs for up to {m.group(2)})" if m
            else "too many unknowns")


def _speed(fr: FunctionReport) -> str | None:
    """The machine's speed during the timing run, in one line (the fit divided it out)."""
    m = fr.fit_extra.get("machine_speed")
    if not isinstance(m, dict):
        return None
    if not m.get("followed"):
        reason = m.get("reason") or ""
        return "Timing run's machine speed: not followed" + (f" ({reason})" if reason else "")
    return (f"Timing run's machine speed: calls took ×{m.get('factor_median', 1):.2f} (median) "
            f"to ×{m.get('factor_max', 1):.2f} (slowest) the time at its fast end; divided out "
            f"before the fit")


def _shown_share(share: float, estimable: bool) -> tuple[str, str]:
    """A group's share of the mean call as the list shows it, and what to add where it is
    above the whole call: the fit then has costs below zero elsewhere (zstd's compressor,
    718 unknowns, no physical fit: "≈103.0 %" for the group of ε and 2,261 blocks, the
    only line), and a share above 100 % is no share of anything the call spent."""
    if share <= 1.0:
        return (F.pct(share) if estimable else "≈" + F.pct(share)), ""
    return "≈all", (f"; the fit gives it {F.pct(share)} of the mean call, with costs below "
                    f"zero elsewhere")


def _top(report: Report, *, short: bool = False) -> list[str]:
    """The few estimable blocks and groups, of the root or its callees, with the largest
    share.  A block that is not estimable alone is shown only through its group (its own
    cost is not measured); a group whose share the inputs do not determine is shown only
    when its approximate share is large.  ``short``: name and share only."""
    items: list[tuple[float, str, str]] = []
    seen_groups: set = set()
    # ε is part of every timed call and no part of the function: on a short function it
    # is a large share, and the blocks' shares alone read as if the function took it
    root = report.functions[0] if report.functions else None
    mean = float(np.mean(report.predicted_ticks)) if report.predicted_ticks else 0.0
    if root is not None and root.overhead_ticks is not None and mean > 0 \
            and root.overhead_ticks / mean >= MIN_SHARE:
        share = root.overhead_ticks / mean
        # ε is confounded with blocks where the inputs cannot tell them apart from it
        # (those every call runs once, and others tied to them): then it holds part of
        # their time too (SHA1: 747 ticks against an empty timed region of ~50), and
        # "not the function" would be wrong
        group = next((g for g in root.groups if g.kind == KIND_OVERHEAD and g.blocks), None)
        if group is not None and group.share is not None:
            # one figure for ε and the blocks tied to it, the group's (the Groups table's):
            # the split between them is the fit's particular solution, not a measurement
            # (libm's fmod: "6.8 % ε with the time of 30 blocks" beside a group at ≈99.6 %)
            seen_groups.add((group.id, group.blocks))
            shown, beyond = _shown_share(group.share, group.share_estimable)
            # the blocks first: the share is mostly theirs where they are many (SHA512:
            # ≈100 % for 396 blocks and an ε of ~70 ticks read as "overhead")
            # the loops among them, named: "16 block(s) and ε (the timed region's own
            # overhead)" read as a group of overhead where libgmp's mpn_mul_1 loop, run
            # up to 1,023 times a call, was most of it
            # (of every function: libdeflate's adler32 ran its loops in a callee, and
            # the line named none)
            members = set(group.blocks)
            loops = sorted({(fr.key(b.loop_header), b.loop_header)
                            for fr in report.functions for b in fr.blocks
                            if b.address in members and b.loop_header is not None
                            and (b.count_max or 0) > 1}, key=lambda k: k[1])
            among = (f", among them the loop{'s' if len(loops) > 1 else ''} at "
                     + ", ".join(k for k, _ in loops[:3])
                     + (" …" if len(loops) > 3 else "") + "," if loops else "")
            # "only their sum is measured" was wrong where the inputs determine dozens of
            # combinations of them (adler32: every count follows the length)
            items.append((group.share, f"{shown:>8}  group {group.id}: "
                                       f"{len(group.blocks)} block(s){among} and ε (the "
                                       f"timed region's own overhead), whose costs the "
                                       f"inputs determine only in combinations, not one "
                                       f"by one{beyond}",
                          f"ε+ {shown}"))
        else:
            what = (f"ε with the time of blocks the inputs do not separate from it "
                    f"({len(group.blocks)} in its group, with the timed region's own "
                    f"overhead)" if group is not None else
                    "ε, the timed region's own overhead (not the function)")
            items.append((share, f"{F.pct(share):>8}  {what}: "
                                 f"{F.both(root.overhead_ticks, report.tsc_hz)} per call",
                          f"ε {F.pct(share)}"))
    for fr in report.functions:
        for r in fr.blocks:
            if r.estimable and r.share is not None and r.cost_ticks is not None \
                    and r.share >= MIN_SHARE:
                # a callee's block count is of the callee's own worst path (over all its
                # activations in a call), which the root's bound may undercut by bounding
                # it per call site (libbz2: a block "×4,096 on the worst path" that the
                # root's path, per call site, ran at most 27 times)
                # (LZ4_compress_fast_extState: "×951 on its own worst path", 15× the
                # root's bound, where the root's path ran the block at most a few times)
                on_path = ("" if not r.wcet_count and not r.root_path_count else
                           f", ×{r.wcet_count:,} on the worst path" if fr.is_root else
                           f", ×{round(r.root_path_count):,} on the worst path"
                           if r.root_path_count is not None else
                           f", ×{r.wcet_count:,} on {fr.name}'s own worst path")
                items.append((r.share, f"{F.pct(r.share):>8}  {fr.key(r.address)}: "
                                       f"{F.cost_pm(r)} ticks per execution{on_path}",
                              f"{fr.key(r.address)} {F.pct(r.share)}"))
        for g in fr.groups:
            # an approximate share is shown only when it is large and plausible (the
            # particular solution can put a group above 100 % and others below zero)
            if g.share is None or g.share < MIN_SHARE or (
                    not g.share_estimable and not 0.05 <= g.share <= 1.0):
                continue
            if (g.id, g.blocks) in seen_groups:
                continue       # a group across functions (an untimed callee's blocks)
            seen_groups.add((g.id, g.blocks))
            share = F.pct(g.share) if g.share_estimable else "≈" + F.pct(g.share)
            # a group can span functions (liblzma's LZMA encoder: 1,159 blocks of a dozen
            # functions read as "group 1 of sub_16880"): name them all
            members = set(g.blocks)
            spans = [f.name for f in report.functions
                     if any(b.address in members for b in f.blocks)] or [fr.name]
            where = ("" if len(report.functions) <= 1 else f" of {fr.name}" if len(spans) == 1
                     else f" across {len(spans)} functions ({', '.join(spans[:3])}"
                          f"{', …' if len(spans) > 3 else ''})")
            approx = "" if g.share_estimable else "; its share is approximate"
            who = (f"{fr.name}'s own activations do not separate" if g.kind == "activations"
                   else "the inputs do not separate")
            items.append((g.share, f"{share:>8}  group {g.id}{where}: {len(g.blocks)} "
                                   f"block(s) {who} (only sums of "
                                   f"their costs are measured{approx})",
                          f"group {g.id} of {fr.name} ({len(g.blocks)} blocks) {share}"))
    items.sort(key=lambda it: -it[0])
    return [short_text if short else text for _, text, short_text in items[:TOP_ITEMS]]
