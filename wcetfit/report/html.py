"""The report as one self-contained HTML file.

Everything is inline: CSS, a few lines of JavaScript (sortable tables), the CFG of every
function as SVG and the root's plots (:mod:`wcetfit.report.cfgsvg`).  No network access is
needed to view it.  A page opens on an index of the functions; each function's section is
a collapsed ``<details>`` that the reader opens, so a many-function report stays navigable.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from typing import Sequence

from wcetfit.report._format import own_call_note
from wcetfit.model import hexaddr
from wcetfit.report import TICKS_NOTE, FunctionReport, Report
from wcetfit.report import _format as F
from wcetfit.report.summary import fit_in_words
from wcetfit.report.cfgsvg import (Layout, _ident, cfg_dot_source, cfg_svg,  # noqa: F401
                                   cfg_svg_builtin, layered_layout, plots_svg)

log = logging.getLogger(__name__)

E = html.escape


# --- the page -----------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
 color:#222;max-width:1500px}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:2em}
h3{font-size:1.05em;margin-top:1.4em}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f3f3f3}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th:after{content:" \\2195";color:#aaa}
.note{color:#666;font-size:12px}.warn{background:#fff8e1;border-left:4px solid #f0b400;
 padding:6px 10px;margin:6px 0}.warn .adv{color:#555;font-size:12px}
.cfgbox{overflow:auto;border:1px solid #ddd;max-height:900px;background:#fcfcfc}
.plots{display:flex;flex-wrap:wrap;gap:16px}.big{font-size:1.3em;font-weight:bold}
tr.never td{color:#888}tr.onpath td:first-child{border-left:3px solid #b22}
details.root{border:1px solid #ccc;border-radius:4px;padding:4px 10px;margin:10px 0}
details.fn{margin:8px 0 8px 12px}summary{cursor:pointer;font-size:1.1em;padding:4px 0}
"""

_JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
  var tb=t.tBodies[0],rows=Array.prototype.slice.call(tb.rows),asc=th.dataset.asc!=='1';
  t.querySelectorAll('th').forEach(function(h){h.dataset.asc=''});th.dataset.asc=asc?'1':'0';
  function key(r){var c=r.cells[i],v=c.getAttribute('data-v');if(v===null)v=c.textContent;
   var f=parseFloat(v);return isNaN(f)?v.toLowerCase():f}
  rows.sort(function(a,b){var x=key(a),y=key(b);
   if(typeof x!==typeof y){x=String(x);y=String(y)}return (x<y?-1:x>y?1:0)*(asc?1:-1)});
  rows.forEach(function(r){tb.appendChild(r)})})})});
function openHash(){var e=document.getElementById(location.hash.slice(1));
 while(e){if(e.tagName==='DETAILS')e.open=true;e=e.parentElement}}
window.addEventListener('hashchange',openHash);openHash();
"""


def _td(text: str, value: float | None = None, num: bool = False) -> str:
    v = "" if value is None else f' data-v="{value!r}"'
    cls = ' class="n"' if num else ""
    return f"<td{cls}{v}>{E(text)}</td>"


def _wcet_table(report: Report, fr: FunctionReport) -> str:
    w = fr.wcet
    rows = []

    def row(label: str, ticks: float | None, note: str = "") -> None:
        rows.append(f"<tr><th>{E(label)}</th>{_td(F.num(ticks), num=True)}"
                    f"{_td(F.num(report.ns(ticks)), num=True)}<td>{E(note)}</td></tr>")

    if w.error:
        rows.append(f"<tr><th>IPET bound</th><td colspan=3>not computed: {E(w.error)}</td></tr>")
    elif w.ipet_ticks is not None and fr.no_bound_of_its_own:
        rows.append("<tr><th>IPET bound</th><td colspan=2>—</td><td>no bound of its own: the "
                    "inputs do not determine its blocks' costs apart from its callers' (its "
                    "time is counted in theirs)</td></tr>")
    elif w.ipet_ticks is not None and report.above_root_bound(fr):
        rows.append(f"<tr><th>IPET bound</th><td colspan=2>—</td>"
                    f"<td>{E(F.above_root_note(report, fr))}</td></tr>")
    elif w.ipet_ticks is not None:
        row("IPET bound", w.ipet_ticks, F.bound_note(w))
        row("with point costs", w.point_ticks, "Σ cost · count on the worst-case path")
        row("margin", w.margin_ticks,
            "95% critical value × standard error of the path's predicted time")
        if w.dispersion_ticks is not None:
            row("call dispersion", w.dispersion_ticks, F.dispersion_note(w))
        for q, ticks in F.curve_levels(w):
            row(f"bound at {q:.0e} per call", ticks, F.curve_level_note(w, q))
    if fr.is_root:
        row("max observed", w.max_observed_ticks,
            f"median of the repeats of {report.input_name(w.max_observed_input)}")
        if w.slowest_call_ticks is not None:
            row("slowest own call", w.slowest_call_ticks,
                own_call_note(w))
        row("slowest single call", w.max_observed_raw_ticks, "may include preemption")
        row("max predicted", w.max_predicted_ticks,
            f"Σ count · cost + overhead, {report.input_name(w.max_predicted_input)}")
        if fr.overhead_ticks is not None:
            row("overhead ε", fr.overhead_ticks,
                "timing probes; confounded with the always-once blocks")
        if w.ipet_ticks and w.max_observed_ticks:
            rows.append(f"<tr><th>bound / max observed</th><td class=n colspan=2>"
                        f"{w.ipet_ticks / w.max_observed_ticks:.3f}</td><td></td></tr>")
        if w.closest_input is not None:
            dist = ("" if w.closest_distance is None else
                    f"; its counts differ from the path's by {w.closest_distance:.0%}")
            rows.append(f"<tr><th>closest input</th><td class=n colspan=2>"
                        f"{E(report.input_name(w.closest_input))}"
                        f"</td><td>the input predicted slowest{E(dist)}</td></tr>")
    else:
        rows.append("<tr><th>max observed</th><td colspan=3>callees are not timed on their "
                    "own</td></tr>")
    return ("<table><tr><th></th><th>TSC ticks</th><th>ns</th><th>note</th></tr>"
            + "".join(rows) + "</table>")


def _blocks_table(report: Report, fr: FunctionReport) -> str:
    hz = report.tsc_hz
    scale = 1e9 / hz if hz else None
    head = ("<tr><th>address</th><th>offset</th><th>size (B)</th><th>instr</th>"
            "<th>count min</th><th>count max</th><th>cost (ticks)</th><th>± 95% (ticks)</th>"
            "<th>cost (ns)</th><th>share</th><th>WCET count</th>"
            "<th>group</th><th>note</th></tr>")
    body = []
    for r in fr.blocks:
        h = F.half_width(r.ci95_ticks)
        notes = F.block_notes(r, fr.entry)
        cls = "never" if r.count_max == 0 else ("onpath" if r.wcet_count else "")
        share = F.block_share(r)
        body.append(
            f'<tr class="{cls}"><td data-v="{r.address}">{hexaddr(r.address)}</td>'
            f'<td data-v="{r.offset}">+{r.offset:#x}</td>'
            + _td(str(r.size), r.size, True) + _td(str(r.instructions), r.instructions, True)
            + _td(F.num(r.count_min, 0) if r.count_min is not None else "—", r.count_min, True)
            + _td(F.num(r.count_max, 0) if r.count_max is not None else "—", r.count_max, True)
            + _td(F.num(r.cost_ticks), r.cost_ticks, True)
            + _td(F.num(h), h, True)
            + _td(F.num(r.cost_ticks * scale) if scale and r.cost_ticks is not None else "—",
                  r.cost_ticks * scale if scale and r.cost_ticks is not None else None, True)
            + _td(share, r.share if r.estimable else None, True)
            + _td("" if r.wcet_count is None else f"{r.wcet_count:,}", r.wcet_count, True)
            + _td("" if r.group is None else str(r.group))
            + _td("; ".join(notes)) + "</tr>")
    return (f'<table class="sortable"><thead>{head}</thead><tbody>{"".join(body)}</tbody>'
            f'</table><p class="note">Click a column to sort.  cost and share: blocks '
            f'estimable alone only (a group\'s share and estimable combinations are in the '
            f'groups table); share: of the mean predicted time of one root call.</p>')


def _groups_table(fr: FunctionReport) -> str:
    if not fr.groups:
        return "<p>Every executed block is estimable alone.</p>"
    rows = []
    for g in fr.groups:
        share = F.pct(g.share) if g.share_estimable else (
            ("≈" + F.pct(g.share)) if g.share is not None else "—")
        rows.append(f"<tr><td>{E(str(g.id))}</td><td>{E(g.kind)}</td>"
                    f"<td>{E(', '.join(fr.key(a) for a in g.blocks))}</td>"
                    f"<td>{'<br>'.join(E(c) for c in g.combinations) or '—'}</td>"
                    f"<td class=n>{E(share)}</td><td>{E(g.advice or '')}</td></tr>")
    return ('<table><tr><th>group</th><th>kind</th><th>blocks</th>'
            '<th>estimable combinations</th><th>share</th><th>advice</th></tr>'
            + "".join(rows) + "</table>")


def _path_table(report: Report, fr: FunctionReport) -> str:
    if not fr.wcet.path:
        return ""
    est = {r.address: r for r in fr.blocks}
    rows = []
    for p in fr.wcet.path:
        r = est.get(p.block)
        alone = r is None or r.estimable
        # a block not estimable alone has no measured cost: only its group's combinations
        cost = _td(F.num(p.cost_ticks), p.cost_ticks, True) if alone else _td("—", None, True)
        total = (_td(F.num(p.ticks), p.ticks, True)
                 + _td(F.num(report.ns(p.ticks)), report.ns(p.ticks), True)) if alone else \
            _td("—", None, True) + _td("—", None, True)
        note = "" if alone else (f"group {r.group}" if r.group is not None
                                 else "not estimable alone")
        rows.append(f"<tr><td>{E(fr.key(p.block))}</td><td>{hexaddr(p.block)}</td>"
                    + _td(f"{p.count:,}", p.count, True) + cost
                    + _td(F.num(p.callee_ticks) if p.callee_ticks else "", p.callee_ticks, True)
                    + total + _td(note) + "</tr>")
    w = fr.wcet
    foot = (f"<tfoot><tr><th colspan=5>path total (point costs"
            f"{' and overhead ε' if fr.is_root else ''})</th>"
            + _td(F.num(w.point_ticks), w.point_ticks, True)
            + _td(F.num(report.ns(w.point_ticks)), report.ns(w.point_ticks), True)
            + "<td></td></tr></tfoot>")
    return ('<h3>Worst-case path (blocks with counts)</h3><table class="sortable"><thead><tr>'
            '<th>block</th><th>address</th><th>count</th><th>cost/exec (ticks)</th>'
            '<th>callee WCET/exec (ticks)</th><th>total (ticks)</th><th>total (ns)</th>'
            f'<th>note</th></tr></thead><tbody>{"".join(rows)}</tbody>{foot}</table>'
            '<p class="note">—: a block not estimable alone has no cost of its own; its '
            'group\'s estimable combinations are in the groups table.</p>')


def _loops_table(fr: FunctionReport) -> str:
    if not fr.wcet.loops:
        return ""
    rows = []
    for lo in fr.wcet.loops:
        b = lo.bound
        rows.append(f"<tr><td>{E(lo.name)}</td><td class=n>{'' if b.per_entry is None else b.per_entry}"
                    f"</td><td class=n>{'' if b.total is None else b.total}</td><td>{E(b.source)}"
                    f"</td><td class=n>{lo.entries:,}</td><td class=n>{lo.back_edges:,}</td>"
                    f"<td>{'yes' if lo.binding else 'no'}</td><td>{E(b.note)}</td></tr>")
    return ("<h3>Loop bounds (back-edge traversals)</h3><table><tr><th>loop</th>"
            "<th>per entry</th><th>per call</th><th>source</th><th>entries on path</th>"
            "<th>back edges on path</th><th>binding</th><th>note</th></tr>"
            + "".join(rows) + "</table>")


def _warnings_html(warns) -> str:
    return "".join(f'<div class="warn">⚠ {E(w.message)}'
                   + (f'<div class="adv">→ {E(w.advice)}</div>' if w.advice else "")
                   + "</div>" for w in warns)


def _quality_html(report: Report, fr: FunctionReport) -> str:
    v = fr.validation
    items = []
    items.append(f"<tr><th>in words</th><td>{E(fit_in_words(fr, report.tsc_hz))}</td></tr>")
    for label, val in F.activation_rows(fr.fit_extra, report.tsc_hz):
        items.append(f"<tr><th>{E(label)}</th><td class=n>{E(val)}</td></tr>")
    for label, val in F.validation_rows(v):
        label = F.whole_call_label(label, fr.fit_extra)
        items.append(f"<tr><th>{E(label)}</th><td class=n>{E(val)}</td></tr>")
    worst = v.get("worst")
    if isinstance(worst, list) and worst:
        items.append("<tr><th>held-out worst inputs</th><td>" + E(", ".join(
            f"{report.input_name(w.get('input'))} "
            f"({100 * float(w.get('rel_error') or 0):.1f} %)"
            for w in worst[:5] if isinstance(w, dict))) + "</td></tr>")
    extra = fr.fit_extra
    speed = F.machine_speed(extra)
    if speed:
        items.append(f"<tr><th>machine speed</th><td>{E(speed)}</td></tr>")
    if extra.get("interval_method"):
        items.append(f"<tr><th>intervals</th><td>{E(str(extra['interval_method']))}</td></tr>")
    rows = extra.get("rows")
    if isinstance(rows, dict):
        items.append(f"<tr><th>rows used / total</th><td class=n>{rows.get('used', '?')} / "
                     f"{rows.get('total', '?')} ({rows.get('rejected', 0)} rejected)</td></tr>")
    return ("<table><tr><th colspan=2>held-out validation (from the fit)</th></tr>"
            + ("".join(items) or "<tr><td colspan=2>none</td></tr>") + "</table>")


# A page stays below this size: past it the largest CFG drawings and tables are left out
# (largest first), each replaced by a note saying how to get it.  A library target with
# large callees (zlib's inflate: ~600 blocks) would otherwise give a page of tens of MB.
MAX_PAGE_BYTES = 3_000_000


@dataclass
class _Part:
    """A piece of a page that may be left out to keep the page small."""

    html: str
    function: str
    what: str                           # "control-flow graph drawing", "... tables"


def render_html(reports: Report | Sequence[Report], *, layout: str = "auto",
                max_bytes: int | None = MAX_PAGE_BYTES, focus: str | None = None) -> str:
    """One HTML document (a str) for one root's report or several: an index of the
    functions, then each root in a collapsed section (open when there is only one).
    ``max_bytes``: leave out the largest drawings and tables past that size (None: keep
    all); ``focus``: a function whose parts are never left out."""
    reports = [reports] if isinstance(reports, Report) else list(reports)
    first = reports[0]
    hz = first.tsc_hz
    rate = f"{hz / 1e9:.4f} GHz" if hz else "unknown (times in ticks only)"
    title = ", ".join(r.root for r in reports[:4]) + (" …" if len(reports) > 4 else "")
    parts: list = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                   f"<title>wcetfit report: {E(title)}</title><style>{_CSS}</style></head>"
                   f"<body>", f"<h1>wcetfit report — {E(title)}</h1>",
                   f'<p>{first.n_inputs:,} inputs × {first.n_repeats} timed repeats; TSC '
                   f'rate {E(rate)}.<br><span class="note">{E(TICKS_NOTE)}.</span></p>',
                   _index(reports)]
    for report in reports:
        parts += _root_section(report, layout, open_=len(reports) == 1)
    parts.append(f"<script>{_JS}</script></body></html>")
    size = sum(len((p.html if isinstance(p, _Part) else p).encode()) for p in parts)
    dropped: set[int] = set()
    if max_bytes is not None and size > max_bytes:
        movable = sorted((i for i, p in enumerate(parts)
                          if isinstance(p, _Part) and p.function != focus),
                         key=lambda i: -len(parts[i].html))
        for i in movable:
            if size <= max_bytes:
                break
            dropped.add(i)
            size -= len(parts[i].html.encode())
    out = []
    for i, p in enumerate(parts):
        if not isinstance(p, _Part):
            out.append(p)
        elif i in dropped:
            out.append(f'<p class="warn">The {E(p.what)} of {E(p.function)} are left out '
                       f'to keep this page under {max_bytes / 1e6:g} MB.  '
                       f'<code>wcetfit report TARGET_DIR --function {E(p.function)} --html '
                       f'FILE</code> writes a page that has it (the JSON report has every '
                       f'figure).</p>')
        else:
            out.append(p.html)
    return "\n".join(out)


def _index(reports: Sequence[Report]) -> str:
    """One row per root: its bound, slowest measured input, fit, warnings; a link to it."""
    rows = []
    for report in reports:
        fr = report.functions[0]
        w = fr.wcet
        n_warn = len(report.warnings) + sum(len(f.warnings) for f in report.functions)
        callees = ", ".join(f'<a href="#fn-{_ident(report.root)}-{_ident(f.name)}">'
                            f'{E(f.name)}</a>' for f in report.functions[1:])
        rows.append(f'<tr><td><a href="#root-{_ident(report.root)}">{E(report.root)}</a></td>'
                    + _td(F.both(w.ipet_ticks, report.tsc_hz) if w.ipet_ticks is not None
                          else "not computed", w.ipet_ticks, True)
                    + _td(F.both(w.max_observed_ticks, report.tsc_hz), w.max_observed_ticks,
                          True)
                    + _td(fit_in_words(fr, report.tsc_hz).split(":", 1)[0])
                    + _td(str(n_warn), n_warn, True) + f"<td>{callees}</td></tr>")
    return ('<h2>Functions</h2><table class="sortable"><thead><tr><th>function</th>'
            '<th>WCET bound</th><th>slowest measured input (median)</th><th>fit</th>'
            '<th>warnings</th><th>callees</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            '<p class="note">Click a name to open its section.</p>')


def _root_section(report: Report, layout: str, open_: bool) -> list:
    hz = report.tsc_hz
    rid = _ident(report.root)
    w0 = report.functions[0].wcet
    bound = F.both(w0.ipet_ticks, hz) if w0.ipet_ticks is not None else "not computed"
    parts = [f'<details class="root" id="root-{rid}"{" open" if open_ else ""}>'
             f'<summary><b>{E(report.root)}</b> — WCET bound {E(bound)}</summary>']
    if report.warnings:
        parts.append(_warnings_html(report.warnings))
    scatter = hist = ""
    try:
        scatter, hist = plots_svg(report)
    except Exception as exc:          # a plot must not cost the user the whole report
        log.warning("plots failed: %s", exc)
    for fr in report.functions:
        role = "root" if fr.is_root else "callee (its own WCET, context-insensitive)"
        w = fr.wcet
        big = (f'<p class="big">WCET bound: {E(F.both(w.ipet_ticks, hz))}</p>'
               if w.ipet_ticks is not None else
               '<p class="big">WCET bound: not computed</p>')
        parts += [f'<details class="fn" id="fn-{rid}-{_ident(fr.name)}"'
                  f'{" open" if open_ and fr.is_root else ""}><summary>'
                  f'<b>{E(fr.name)}</b> <span class="note">{hexaddr(fr.address)} — {E(role)}'
                  f'</span></summary>', big, _wcet_table(report, fr)]
        if fr.warnings:
            parts.append(_warnings_html(fr.warnings))
        parts.append("<h3>Control-flow graph</h3><p class=note>Blocks coloured by their share "
                     "of the time (white → red); cost per execution in TSC ticks ± 95% CI, "
                     "ns and share on each block estimable alone; red border: on the "
                     "worst-case path (×count); grey dashed: never executed; dashed edges: "
                     "loop back edges.  Hover a block for its instructions.</p>")
        parts.append(_Part(f'<div class="cfgbox">{cfg_svg(fr, hz, layout)}</div>', fr.name,
                           "control-flow graph's blocks and edges"))
        parts.append(_path_table(report, fr))
        parts.append(_loops_table(fr))
        parts.append(_Part("<h3>Blocks</h3>" + _blocks_table(report, fr)
                           + "<h3>Groups and estimable combinations</h3>" + _groups_table(fr),
                           fr.name, "block and group tables"))
        never = fr.never_executed
        parts.append("<h3>Coverage</h3><p>" + (
            f"{len(never)} of {len(fr.blocks)} blocks never executed by the inputs (their "
            f"cost is unknown): {E(', '.join(fr.key(a) for a in never))}" if never else
            f"All {len(fr.blocks)} blocks executed by the inputs.") + "</p>")
        if fr.is_root:
            parts.append("<h3>Fit quality</h3>" + _quality_html(report, fr))
            if scatter or hist:
                parts.append(_Part(f'<div class="plots"><div>{scatter}</div><div>{hist}</div>'
                                   f'</div>', fr.name, "measured-vs-predicted plots"))
        parts.append("</details>")
    parts.append("</details>")
    return parts
