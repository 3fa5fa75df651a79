"""The report in the terminal: rich tables, one section per function.

Library code does not print: :func:`render` writes to the console it is given (the CLI's),
:func:`to_text` returns the text.
"""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from wcetfit.fit.result import KIND_UNEXECUTED
from wcetfit.model import hexaddr
from wcetfit.report import TICKS_NOTE, FunctionReport, Report, reach_advice
from wcetfit.report import _format as F


def render(report: Report, console: Console, *, max_blocks: int | None = None,
           function: str | None = None) -> None:
    """Write the whole report (every table) to ``console``.  ``max_blocks`` limits each
    block table to the most expensive blocks (the JSON and HTML reports always have all);
    ``function`` keeps that one function's section (a root or a callee)."""
    console.print(_header(report))
    shown: dict = {}        # a group of blocks of several functions: where it was listed
    idle = []               # callees no input ran: one line, not their tables
    for fr in report.functions:
        if function is not None and fr.name != function:
            continue
        if function is None and not fr.is_root and fr.blocks and \
                len(fr.never_executed) == len(fr.blocks):
            # (libc's strdup reaches 300 functions through malloc: their empty tables
            # made `--full` 37,531 lines)
            idle.append(fr.name)
            continue
        for part in _function(report, fr, max_blocks, shown):
            console.print(part)
    if idle:
        console.print(Text(f"\n{len(idle):,} callee(s) no input ran, their tables left out "
                           f"(--function NAME shows one): " + ", ".join(idle[:IDLE_NAMES])
                           + (f", … {len(idle) - IDLE_NAMES:,} more" if len(idle) > IDLE_NAMES
                              else "")))
    if report.warnings:
        console.print(_warnings("General", report.warnings))


# Names of callees no input ran that `--full` lists in its one line about them.
IDLE_NAMES = 20


def to_text(report: Report, *, width: int = 140, color: bool = False,
            max_blocks: int | None = None, full: bool = True) -> str:
    """The report as text: every table (``full``), or the one-screen summary."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="truecolor" if color else None,
                      force_terminal=color, record=False, soft_wrap=False)
    if full:
        render(report, console, max_blocks=max_blocks)
    else:
        from wcetfit.report import summary
        summary.render([report], console)
    return buf.getvalue()


def _header(report: Report) -> Panel:
    rate = (f"TSC rate {report.tsc_hz / 1e9:.4f} GHz" if report.tsc_hz
            else "TSC rate unknown (ticks only)")
    lines = [f"[bold]wcetfit report[/bold] — root function [bold]{report.root}[/bold]",
             f"{report.n_inputs:,} inputs × {report.n_repeats} timed repeats; {rate}",
             f"[dim]{TICKS_NOTE}[/dim]"]
    return Panel("\n".join(lines), expand=False)


def _function(report: Report, fr: FunctionReport, max_blocks: int | None,
              shown: dict | None = None) -> list:
    out: list = []
    role = "root" if fr.is_root else "callee (its own WCET, context-insensitive)"
    out.append(Text.from_markup(f"\n[bold underline]{fr.name}[/bold underline] at "
                                f"{hexaddr(fr.address)} — {role}"))
    out.append(_wcet(report, fr))
    if fr.wcet.path:
        out.append(_path(report, fr))
    if fr.wcet.loops:
        out.append(_loops(fr))
    out.append(_blocks(report, fr, max_blocks))
    if fr.groups:
        out.append(_groups(fr, {} if shown is None else shown, report.reach_refusal))
    if fr.never_executed:
        out.append(Text(f"Coverage: {len(fr.never_executed)} of {len(fr.blocks)} blocks never "
                        f"executed by the inputs (cost unknown): "
                        + ", ".join(fr.key(a) for a in fr.never_executed[:12])
                        + (" ..." if len(fr.never_executed) > 12 else "")))
    else:
        out.append(Text(f"Coverage: all {len(fr.blocks)} blocks executed by the inputs."))
    if fr.is_root:
        out.append(_quality(report, fr))
    if fr.warnings:
        out.append(_warnings(fr.name, fr.warnings))
    return out


def _wcet(report: Report, fr: FunctionReport) -> Table:
    w = fr.wcet
    t = Table(title=f"WCET of {fr.name}", title_justify="left", show_header=True)
    t.add_column("quantity")
    t.add_column("TSC ticks", justify="right")
    t.add_column("ns", justify="right")
    t.add_column("note")
    if w.error:
        t.add_row("IPET bound", "—", "—", _escape(f"not computed: {w.error}"))
    elif w.ipet_ticks is not None:
        note = F.bound_note(w)
        if fr.no_bound_of_its_own:
            # its blocks' costs are its callers' (0 here): a number would read as a bound
            # of 0 ticks (libcrypto's MD5_Init, OPENSSL_cleanse)
            t.add_row("[bold]IPET bound[/bold]", "—", "—",
                      "no bound of its own: the inputs do not determine its blocks' costs "
                      "apart from its callers' (its time is counted in theirs)")
            t.add_row("max observed", "—", "—", "callees are not timed on their own")
            return t
        if report.above_root_bound(fr):
            t.add_row("[bold]IPET bound[/bold]", "—", "—", _escape(F.above_root_note(report, fr)))
            t.add_row("max observed", "—", "—", "callees are not timed on their own")
            return t
        t.add_row("[bold]IPET bound[/bold]", F.num(w.ipet_ticks), F.num(report.ns(w.ipet_ticks)),
                  note)
        t.add_row("  with point costs", F.num(w.point_ticks), F.num(report.ns(w.point_ticks)),
                  "Σ cost · count on the worst-case path")
        t.add_row("  margin", F.num(w.margin_ticks), F.num(report.ns(w.margin_ticks)),
                  "95% critical value × standard error of the path's predicted time")
        if w.dispersion_ticks is not None:
            t.add_row("  call dispersion", F.num(w.dispersion_ticks),
                      F.num(report.ns(w.dispersion_ticks)),
                      _escape(F.dispersion_note(w)))
        for q, ticks in F.curve_levels(w):
            # the probabilistic WCET curve: only the dispersion moves along it
            t.add_row(f"  bound at {q:.0e} per call", F.num(ticks), F.num(report.ns(ticks)),
                      _escape(F.curve_level_note(w, q)))
        if w.recursion_depth:
            t.add_row("  recursion depth", str(w.recursion_depth), "", _escape("from [recursion] or observed (see the warnings)"))
    if fr.is_root:
        t.add_row("max observed", F.num(w.max_observed_ticks), F.num(report.ns(w.max_observed_ticks)),
                  f"median of repeats, {report.input_name(w.max_observed_input)}"
                  if w.max_observed_input is not None else "no times")
        if w.slowest_call_ticks is not None:
            t.add_row("  slowest own call", F.num(w.slowest_call_ticks),
                      F.num(report.ns(w.slowest_call_ticks)),
                      F.own_call_note(w))
        t.add_row("  slowest single call", F.num(w.max_observed_raw_ticks),
                  F.num(report.ns(w.max_observed_raw_ticks)), "may include preemption")
        t.add_row("max predicted", F.num(w.max_predicted_ticks),
                  F.num(report.ns(w.max_predicted_ticks)),
                  f"Σ count · cost + overhead, {report.input_name(w.max_predicted_input)}")
        if w.ipet_ticks and w.max_observed_ticks:
            width = w.width()
            t.add_row("bound / max observed", f"{w.ipet_ticks / w.max_observed_ticks:.3f}", "",
                      "" if width is None else
                      f"= path beyond the inputs ×{width.beyond:.2f} · prediction over "
                      f"measured at the input predicted slowest ×{width.model:.2f} · it over "
                      f"the slowest ×{width.input:.2f} · margin ×{width.margin:.2f} · "
                      f"single calls ×{width.dispersion:.2f}")
        if w.closest_input is not None:
            dist = ("" if w.closest_distance is None
                    else f"; counts differ from the path by {w.closest_distance:.0%}")
            t.add_row("closest input", report.input_name(w.closest_input), "",
                      f"the input predicted slowest{dist}")
        if fr.overhead_ticks is not None:
            t.add_row("overhead ε", F.num(fr.overhead_ticks), F.num(report.ns(fr.overhead_ticks)),
                      "timing probes; confounded with the always-once blocks")
    else:
        t.add_row("max observed", "—", "—", "callees are not timed on their own")
    return t


def _path(report: Report, fr: FunctionReport) -> Table:
    t = Table(title=f"Worst-case path of {fr.name} (blocks with counts)", title_justify="left")
    for col, just in (("block", "left"), ("address", "left"), ("count", "right"),
                      ("cost/exec (ticks)", "right"), ("callee WCET/exec (ticks)", "right"),
                      ("total (ticks)", "right"), ("total (ns)", "right"), ("note", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    rows = {r.address: r for r in fr.blocks}
    for p in fr.wcet.path:
        r = rows.get(p.block)
        if r is not None and not r.estimable:
            # its own cost is not measured: only the group's combinations are (Groups table)
            note = f"group {r.group}" if r.group is not None else "not estimable alone"
            t.add_row(fr.key(p.block), hexaddr(p.block), f"{p.count:,}", "—",
                      F.num(p.callee_ticks) if p.callee_ticks else "", "—", "—", note)
            continue
        t.add_row(fr.key(p.block), hexaddr(p.block), f"{p.count:,}", F.num(p.cost_ticks),
                  F.num(p.callee_ticks) if p.callee_ticks else "", F.num(p.ticks),
                  F.num(report.ns(p.ticks)), "")
    w = fr.wcet
    t.add_row("path total", "", "", "", "", F.num(w.point_ticks), F.num(report.ns(w.point_ticks)),
              "with the point costs" + (" and the overhead ε" if fr.is_root else ""))
    if any(not rows[p.block].estimable for p in fr.wcet.path if p.block in rows):
        t.caption = ("—: a block not estimable alone has no cost of its own; its group's "
                     "estimable combinations are in the Groups table, and only the path's "
                     "total counts it")
    return t


def _loops(fr: FunctionReport) -> Table:
    t = Table(title=f"Loop bounds of {fr.name} (back-edge traversals)", title_justify="left")
    for col in ("loop", "bound", "source", "entries on path", "back edges on path", "binding",
                "note"):
        t.add_column(col)
    for lo in fr.wcet.loops:
        b = lo.bound
        bound = " / ".join(x for x in (f"{b.per_entry} per entry" if b.per_entry is not None
                                       else "", f"{b.total} per call" if b.total is not None
                                       else "") if x)
        t.add_row(_escape(lo.name), bound, b.source, f"{lo.entries:,}", f"{lo.back_edges:,}",
                  "yes" if lo.binding else "no",
                  _escape(b.note + (f" (input {b.witness})" if b.witness is not None
                                    else "")).strip())
    return t


def _blocks(report: Report, fr: FunctionReport, max_blocks: int | None) -> Table:
    hz = report.tsc_hz
    rows = list(fr.blocks)
    title = f"Blocks of {fr.name}"
    if max_blocks is not None and len(rows) > max_blocks:
        rows = sorted(rows, key=lambda r: -(r.share or 0.0))[:max_blocks]
        rows.sort(key=lambda r: r.address)
        title += f" (the {max_blocks} with the largest share of {len(fr.blocks)})"
    t = Table(title=title, title_justify="left")
    cols = [("address", "left"), ("offset", "left"), ("size (B)", "right"),
            ("instr", "right"), ("count over inputs", "right"),
            ("cost ± 95% CI (ticks)", "right"), ("cost ± 95% CI (ns)", "right"),
            ("share", "right"), ("WCET count", "right"), ("note", "left")]
    for c, j in cols:
        t.add_column(c, justify=j)  # type: ignore[arg-type]
    scale = 1e9 / hz if hz else None
    for r in rows:
        notes = [] if r.estimable else [f"group {r.group}" if r.group is not None
                                        else "not estimable alone"]
        notes += F.block_notes(r, fr.entry)
        share = F.block_share(r)
        t.add_row(hexaddr(r.address), f"+{r.offset:#x}", str(r.size), str(r.instructions),
                  F.count_range(r), F.cost_pm(r), F.cost_pm(r, scale) if scale else "—",
                  share, "" if r.wcet_count is None else f"{r.wcet_count:,}", "; ".join(notes))
    t.caption = ("share: of the mean predicted time of a root call; ≈ where the block is not "
                 "estimable alone (the group's share is given below)")
    return t


def _groups(fr: FunctionReport, shown: dict, reach_refusal: str | None = None) -> Table:
    """The function's groups; one listed under an earlier function already (a group of a
    whole-call fit spans the root and its callees) is one line naming where (libcrypto's
    SHA512: 354 group tables, the same groups in each; libbz2's --full ran to 450,623
    lines)."""
    t = Table(title=f"Groups of {fr.name} (blocks not estimable alone)", title_justify="left")
    for c in ("group", "kind", "blocks", "estimable combinations", "share", "advice"):
        t.add_column(c)
    # the groups of one block no input ran are one row: their advice is the same, and
    # one row each made 786 of the 2,065 lines of libpcre2's pcre2_match (--function)
    unexecuted = [g for g in fr.groups if g.kind == KIND_UNEXECUTED and len(g.blocks) == 1]
    if len(unexecuted) > 1:
        t.add_row(f"{len(unexecuted)} groups", KIND_UNEXECUTED,
                  F.first_names(fr.key(g.blocks[0]) for g in unexecuted), "—", "0.0 %",
                  "no input executed these blocks: their costs are unknown; add inputs "
                  "that reach them ("
                  + reach_advice(reach_refusal, "such inputs") + ")")
    folded = {id(g) for g in unexecuted} if len(unexecuted) > 1 else set()
    for g in fr.groups:
        if id(g) in folded:
            continue
        where = shown.setdefault((g.id, tuple(g.blocks)), fr.name)
        if where != fr.name:
            own = [a for a in g.blocks if any(b.address == a for b in fr.blocks)]
            t.add_row(str(g.id), g.kind, f"{len(own)} of {fr.name}'s blocks among its "
                                         f"{len(g.blocks)}: listed under {where}",
                      "(there)", "", "")
            continue
        share = F.pct(g.share) if g.share_estimable else (("≈" + F.pct(g.share))
                                                           if g.share is not None else "—")
        t.add_row(str(g.id), g.kind, F.first_names(fr.key(a) for a in g.blocks),
                  _escape(F.first_lines(F.first_terms(c) for c in g.combinations)) or "—",
                  share,
                  _escape(g.advice or ""))
    return t


def _quality(report: Report, fr: FunctionReport) -> Table:
    t = Table(title="Fit quality", title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    v = fr.validation
    for label, val in F.validation_rows(v):
        t.add_row(_escape(F.whole_call_label(label, fr.fit_extra)), _escape(val))
    worst = v.get("worst")
    if isinstance(worst, list) and worst:
        t.add_row("held-out worst inputs", ", ".join(
            f"{report.input_name(w.get('input'))} "
            f"({100 * float(w.get('rel_error') or 0):.1f} %)"
            for w in worst[:5] if isinstance(w, dict)))
    extra = fr.fit_extra
    for label, val in F.activation_rows(extra, report.tsc_hz):
        t.add_row(_escape(label), _escape(val))
    speed = F.machine_speed(extra)
    if speed:
        t.add_row("machine speed", _escape(speed))
    if extra.get("interval_method"):
        t.add_row("intervals", str(extra["interval_method"]))
    rows = extra.get("rows")
    if isinstance(rows, dict):
        t.add_row("rows used / total", f"{rows.get('used', '?')} / {rows.get('total', '?')} "
                                       f"({rows.get('rejected', 0)} rejected)")
    res = report.residuals_ticks
    import numpy as np
    ok = np.isfinite(res)
    if ok.any():
        rel = np.abs(res[ok]) / np.abs(np.asarray(report.measured_ticks)[ok])
        t.add_row("in-sample median |residual|", F.both(float(np.median(np.abs(res[ok]))),
                                                        report.tsc_hz))
        t.add_row("in-sample median rel. error", f"{100 * float(np.median(rel)):.2f} %")
        worst = np.argsort(-np.abs(np.where(ok, res, 0)))[:3]
        # the sign said: + the input took longer than predicted
        t.add_row("worst-predicted inputs (measured − predicted)",
                  ", ".join(f"{report.input_name(int(i))} ({float(res[i]):+,.1f} ticks)"
                            for i in worst))
    return t


def _warnings(title: str, warns) -> Panel:
    lines = []
    for w in warns:
        lines.append(f"[yellow]⚠[/yellow] {_escape(w.message)}")
        if w.advice:
            lines.append(f"   [dim]→ {_escape(w.advice)}[/dim]")
    return Panel(Group(*[Text.from_markup(x) for x in lines]), title=f"Warnings: {title}",
                 title_align="left", border_style="yellow")


def _escape(s: str) -> str:
    from rich.markup import escape
    return escape(s)
