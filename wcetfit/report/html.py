"""The report as one self-contained HTML file.

Everything is inline: CSS, a few lines of JavaScript (sortable tables), the CFG of every
function as SVG (blocks coloured by their share of the time, costs written on them), and
the root's measured-vs-predicted scatter and residual histogram (matplotlib, Agg backend,
as inline SVG).  No network access is needed to view it.

The CFG is laid out by graphviz ``dot -Tsvg`` when it is installed, otherwise by a small
layered (Sugiyama-style) layout of our own: back edges reversed, longest-path layering,
dummy nodes on long edges, barycentric ordering sweeps, then x positions pulled towards
the neighbours' mean.
"""

from __future__ import annotations

import html
import io
import logging
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from wcetfit.model import hexaddr
from wcetfit.report import TICKS_NOTE, BlockRow, FunctionReport, Report
from wcetfit.report import _format as F

log = logging.getLogger(__name__)

E = html.escape


# --- layered layout ---------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """Node centres and edge polylines in SVG user units."""

    width: float
    height: float
    nodes: dict                        # node -> (x, y) centre
    edges: list                        # (src, dst, [(x, y), ...], is_back)


def layered_layout(nodes: Sequence[int], edges: Iterable[tuple[int, int]],
                   back_edges: Iterable[tuple[int, int]], entry: int | None, *,
                   node_w: float = 170.0, node_h: float = 50.0, gap_x: float = 30.0,
                   gap_y: float = 46.0, sweeps: int = 8) -> Layout:
    nodes = list(nodes)
    node_set = set(nodes)
    edge_list = [(s, d) for s, d in dict.fromkeys(edges) if s in node_set and d in node_set]
    back = set(back_edges)

    # 1. Make the graph acyclic: reverse the loops' back edges, then any edge that still
    #    closes a cycle in a DFS from the entry (irreducible flow).
    succ: dict[int, list[int]] = {n: [] for n in nodes}
    oriented: list[tuple[int, int, bool]] = []     # (upper, lower, reversed?)
    for s, d in edge_list:
        if s == d:
            continue                               # self loops are drawn separately
        if (s, d) in back:
            oriented.append((d, s, True))
        else:
            oriented.append((s, d, False))
    for u, v, _ in oriented:
        succ[u].append(v)
    state: dict[int, int] = {}
    flip: set[tuple[int, int]] = set()
    starts = ([entry] if entry in node_set else []) + nodes
    for st in starts:
        if st in state:
            continue
        stack = [(st, iter(succ[st]))]
        state[st] = 1
        while stack:
            n, it = stack[-1]
            for m in it:
                if state.get(m) == 1:
                    flip.add((n, m))
                elif m not in state:
                    state[m] = 1
                    stack.append((m, iter(succ[m])))
                    break
            else:
                state[n] = 2
                stack.pop()
    dag = []
    for u, v, rev in oriented:
        if (u, v) in flip:
            dag.append((v, u, not rev))
        else:
            dag.append((u, v, rev))

    # 2. Longest-path layering (entry on top).
    preds: dict[int, list[int]] = {n: [] for n in nodes}
    dsucc: dict[int, list[int]] = {n: [] for n in nodes}
    for u, v, _ in dag:
        preds[v].append(u)
        dsucc[u].append(v)
    layer: dict = {}
    indeg = {n: len(preds[n]) for n in nodes}
    ready = [n for n in nodes if indeg[n] == 0]
    if entry in ready:
        ready.remove(entry)
        ready.insert(0, entry)
    topo = []
    while ready:
        n = ready.pop(0)
        topo.append(n)
        for m in dsucc[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    for n in topo:
        layer[n] = max((layer[p] + 1 for p in preds[n]), default=0)

    # 3. Dummy nodes so that every edge spans one layer.
    chains: list[tuple[int, int, list, bool]] = []   # (orig src, orig dst, chain top→down, back)
    adj_down: dict = {n: [] for n in nodes}
    adj_up: dict = {n: [] for n in nodes}
    dummy_id = 0
    for u, v, rev in dag:
        chain = [u]
        for k in range(layer[u] + 1, layer[v]):
            d = ("dummy", dummy_id)
            dummy_id += 1
            layer[d] = k
            adj_down[d] = []
            adj_up[d] = []
            chain.append(d)
        chain.append(v)
        for a, b in zip(chain, chain[1:]):
            adj_down[a].append(b)
            adj_up[b].append(a)
        src, dst = (v, u) if rev else (u, v)
        chains.append((src, dst, chain, rev))

    n_layers = max(layer.values(), default=0) + 1
    layers: list[list] = [[] for _ in range(n_layers)]
    for n in topo:                                   # topological order: a fair first guess
        layers[layer[n]].append(n)
    for n in layer:
        if isinstance(n, tuple):
            layers[layer[n]].append(n)

    # 4. Barycentric ordering sweeps, down then up.
    def reorder(li: int, neighbours: dict, ref: list) -> None:
        pos = {n: i for i, n in enumerate(ref)}
        cur = layers[li]
        keyed = []
        for i, n in enumerate(cur):
            ps = [pos[m] for m in neighbours[n] if m in pos]
            keyed.append((sum(ps) / len(ps) if ps else float(i), i, n))
        keyed.sort(key=lambda t: (t[0], t[1]))
        layers[li] = [n for _, _, n in keyed]

    for s in range(sweeps):
        if s % 2 == 0:
            for li in range(1, n_layers):
                reorder(li, adj_up, layers[li - 1])
        else:
            for li in range(n_layers - 2, -1, -1):
                reorder(li, adj_down, layers[li + 1])

    # 5. x coordinates: in order, pulled towards the mean x of the neighbours.
    def width_of(n) -> float:
        return 8.0 if isinstance(n, tuple) else node_w

    x: dict = {}
    for li, row in enumerate(layers):
        cx = 0.0
        for n in row:
            x[n] = cx + width_of(n) / 2
            cx += width_of(n) + gap_x
    for it in range(6):
        order = range(1, n_layers) if it % 2 == 0 else range(n_layers - 2, -1, -1)
        for li in order:
            nb = adj_up if it % 2 == 0 else adj_down
            row = layers[li]
            want = []
            for n in row:
                ps = [x[m] for m in nb[n] if m in x]
                want.append(sum(ps) / len(ps) if ps else x[n])
            placed = []
            for i, n in enumerate(row):
                lo = (placed[-1] + (width_of(row[i - 1]) + width_of(n)) / 2 + gap_x
                      if placed else -np.inf)
                placed.append(max(want[i], lo))
            # shift the row back so that it is centred on what its members want
            shift = float(np.mean(np.array(want) - np.array(placed))) if placed else 0.0
            # (never closer than the separation: a uniform shift keeps it)
            for n, px in zip(row, placed):
                x[n] = px + shift
    min_x = min((x[n] - width_of(n) / 2 for n in x), default=0.0)
    pad = 20.0
    for n in x:
        x[n] = x[n] - min_x + pad
    width = max((x[n] + width_of(n) / 2 for n in x), default=0.0) + pad + 30
    y = {n: pad + layer[n] * (node_h + gap_y) + node_h / 2 for n in layer}
    height = pad * 2 + n_layers * (node_h + gap_y)

    pos = {n: (x[n], y[n]) for n in nodes if n in x}
    polylines = []
    for src, dst, chain, rev in chains:
        pts = [(x[c], y[c]) for c in chain]
        # leave the upper block at its bottom edge, enter the lower one at its top edge
        pts[0] = (pts[0][0], pts[0][1] + node_h / 2)
        pts[-1] = (pts[-1][0], pts[-1][1] - node_h / 2)
        if rev:
            # back edges attach off-centre, so that a short loop's back edge does not
            # hide under its forward edge
            pts = pts[::-1]
            off = node_w * 0.22
            pts[0] = (pts[0][0] + off, pts[0][1])
            pts[-1] = (pts[-1][0] + off, pts[-1][1])
        polylines.append((src, dst, pts, rev))
    for s, d in edge_list:
        if s == d and s in pos:
            cx, cy = pos[s]
            r = node_w / 2
            polylines.append((s, d, [(cx + r, cy - 8), (cx + r + 24, cy - 14),
                                     (cx + r + 24, cy + 14), (cx + r, cy + 8)], True))
    return Layout(width=width, height=height, nodes=pos, edges=polylines)


# --- CFG drawing ------------------------------------------------------------------------

def _heat(share: float | None, top: float) -> str:
    """White → orange → red by share of the time (relative to the function's largest)."""
    if share is None or top <= 0 or share <= 0:
        return "#ffffff"
    t = min(1.0, share / top) ** 0.5
    r = 255
    g = int(round(255 - t * (255 - 80)))
    b = int(round(255 - t * (255 - 40)))
    return f"#{r:02x}{g:02x}{b:02x}"


def _block_lines(fr: FunctionReport, r: BlockRow, tsc_hz: float | None) -> list[str]:
    head = f"+{r.offset:#x}"
    if r.wcet_count:
        head += f"  ×{r.wcet_count:,} WCET"
    if r.count_max == 0:
        cost = "never executed"
    elif r.cost_ticks is not None:
        cost = f"{F.cost_pm(r)} ticks"
    else:
        cost = f"group {r.group}" if r.group is not None else "not estimable alone"
    ns = F.ns(r.cost_ticks, tsc_hz) if r.cost_ticks is not None else ""
    share = ("≈" if not r.estimable else "") + F.pct(r.share) if r.share is not None else ""
    third = " · ".join(x for x in (ns, share) if x and x != "—")
    return [head, cost, third]


def cfg_svg_builtin(fr: FunctionReport, tsc_hz: float | None) -> str:
    nodes = [b.address for b in fr.blocks]
    lay = layered_layout(nodes, fr.edges, fr.back_edges, fr.entry)
    top = max((b.share or 0.0) for b in fr.blocks) if fr.blocks else 0.0
    on_path = {b.address for b in fr.blocks if b.wcet_count}
    w, h = lay.width, lay.height
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="cfg" width="{w:.0f}" '
           f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" role="img" '
           f'aria-label="control-flow graph of {E(fr.name)}">',
           '<defs><marker id="arrow-{0}" viewBox="0 0 10 10" refX="10" refY="5" '
           'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
           '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>'.format(_ident(fr.name))]
    for src, dst, pts, is_back in lay.edges:
        d = "M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        hot = src in on_path and dst in on_path
        style = ' stroke-dasharray="5,3"' if is_back else ""
        out.append(f'<path d="{d}" fill="none" stroke="{"#b22" if hot else "#777"}" '
                   f'stroke-width="{1.8 if hot else 1.0}"{style} '
                   f'marker-end="url(#arrow-{_ident(fr.name)})"><title>{hexaddr(src)} → '
                   f'{hexaddr(dst)}{" (back edge)" if is_back else ""}</title></path>')
    nw, nh = 170.0, 50.0
    for r in fr.blocks:
        if r.address not in lay.nodes:
            continue
        cx, cy = lay.nodes[r.address]
        fill = "#e8e8e8" if r.count_max == 0 else _heat(r.share, top)
        stroke = "#b22" if r.address in on_path else "#333"
        sw = 2.2 if r.address in on_path else 1.0
        dash = ' stroke-dasharray="3,2"' if r.count_max == 0 else ""
        tip = "\n".join([fr.key(r.address) + f" ({hexaddr(r.address)}), {r.size} B, "
                         f"{r.instructions} instructions"] + list(r.disassembly[:30]))
        out.append(f'<g class="blk"><title>{E(tip)}</title>'
                   f'<rect x="{cx - nw / 2:.1f}" y="{cy - nh / 2:.1f}" width="{nw:.0f}" '
                   f'height="{nh:.0f}" rx="4" fill="{fill}" stroke="{stroke}" '
                   f'stroke-width="{sw}"{dash}/>')
        for k, line in enumerate(_block_lines(fr, r, tsc_hz)):
            weight = ' font-weight="bold"' if k == 0 else ""
            out.append(f'<text x="{cx:.1f}" y="{cy - nh / 2 + 14 + 15 * k:.1f}" '
                       f'text-anchor="middle" font-size="11"{weight}>{E(line)}</text>')
        if r.address == fr.entry:
            out.append(f'<text x="{cx - nw / 2:.1f}" y="{cy - nh / 2 - 3:.1f}" font-size="10" '
                       f'fill="#555">entry</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _ident(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", s)


def cfg_dot_source(fr: FunctionReport, tsc_hz: float | None) -> str:
    top = max((b.share or 0.0) for b in fr.blocks) if fr.blocks else 0.0
    on_path = {b.address for b in fr.blocks if b.wcet_count}
    lines = ["digraph cfg {", '  node [shape=box, style="rounded,filled", fontsize=10, '
             'fontname="Helvetica"];', '  edge [color="#777777"];']
    for r in fr.blocks:
        label = "\\n".join(x.replace('"', "'") for x in _block_lines(fr, r, tsc_hz) if x)
        fill = "#e8e8e8" if r.count_max == 0 else _heat(r.share, top)
        pen = ', color="#bb2222", penwidth=2' if r.address in on_path else ""
        lines.append(f'  b{r.address:x} [label="{label}", fillcolor="{fill}"{pen}, '
                     f'tooltip="{fr.key(r.address)} ({hexaddr(r.address)})"];')
    back = set(fr.back_edges)
    for s, d in fr.edges:
        attrs = ' [style=dashed, constraint=false]' if (s, d) in back else ""
        lines.append(f"  b{s:x} -> b{d:x}{attrs};")
    lines.append("}")
    return "\n".join(lines)


def cfg_svg(fr: FunctionReport, tsc_hz: float | None, layout: str = "auto") -> str:
    """The CFG as an inline <svg>: graphviz when ``layout`` is "dot" or "auto" and dot is
    installed, the built-in layered layout otherwise."""
    dot = shutil.which("dot") if layout in ("auto", "dot") else None
    if dot:
        try:
            proc = subprocess.run([dot, "-Tsvg"], input=cfg_dot_source(fr, tsc_hz),
                                  capture_output=True, text=True, timeout=60, check=True)
            svg = proc.stdout
            start = svg.find("<svg")
            if start >= 0:
                return svg[start:]
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("dot failed (%s): using the built-in layout", exc)
    return cfg_svg_builtin(fr, tsc_hz)


# --- plots ------------------------------------------------------------------------------

def _svg_of(fig, salt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    start = text.find("<svg")
    return text[start:] if start >= 0 else ""


def plots_svg(report: Report) -> tuple[str, str]:
    """(measured-vs-predicted scatter, residual histogram) as inline SVG; '' without times."""
    meas = np.asarray(report.measured_ticks, dtype=float)
    pred = np.asarray(report.predicted_ticks, dtype=float)
    ok = np.isfinite(meas) & np.isfinite(pred)
    if not ok.any():
        return "", ""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    ax.scatter(pred[ok], meas[ok], s=8, alpha=0.6, color="#c0392b", edgecolors="none")
    lo = float(min(pred[ok].min(), meas[ok].min()))
    hi = float(max(pred[ok].max(), meas[ok].max()))
    ax.plot([lo, hi], [lo, hi], color="#555", lw=0.8, ls="--", label="measured = predicted")
    ax.set_xlabel("predicted (TSC ticks)")
    ax.set_ylabel("measured, median of repeats (TSC ticks)")
    ax.set_title("measured vs predicted, per input")
    ax.legend(loc="upper left", fontsize=8)
    scatter = _svg_of(fig, "scatter")

    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    res = meas[ok] - pred[ok]
    ax.hist(res, bins=min(60, max(10, int(np.sqrt(res.size)))), color="#2c7fb8")
    ax.axvline(0, color="#555", lw=0.8, ls="--")
    ax.set_xlabel("residual: measured − predicted (TSC ticks)")
    ax.set_ylabel("inputs")
    ax.set_title("residuals")
    hist = _svg_of(fig, "hist")
    return scatter, hist


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
    elif w.ipet_ticks is not None:
        row("IPET bound", w.ipet_ticks, F.bound_note(w))
        row("with point costs", w.point_ticks, "Σ cost · count on the worst-case path")
        row("margin", w.margin_ticks,
            "95% critical value × standard error of the path's predicted time")
        if w.dispersion_ticks is not None:
            row("call dispersion", w.dispersion_ticks, F.dispersion_note(w))
    if fr.is_root:
        row("max observed", w.max_observed_ticks,
            f"median of the repeats of input {w.max_observed_input}")
        row("slowest single call", w.max_observed_raw_ticks, "may include preemption")
        row("max predicted", w.max_predicted_ticks,
            f"Σ count · cost + overhead, input {w.max_predicted_input}")
        if fr.overhead_ticks is not None:
            row("overhead ε", fr.overhead_ticks,
                "timing probes; confounded with the always-once blocks")
        if w.ipet_ticks and w.max_observed_ticks:
            rows.append(f"<tr><th>bound / max observed</th><td class=n colspan=2>"
                        f"{w.ipet_ticks / w.max_observed_ticks:.3f}</td><td></td></tr>")
        if w.closest_input is not None:
            dist = ("" if w.closest_distance is None else
                    f"; its counts differ from the path's by {w.closest_distance:.0%}")
            rows.append(f"<tr><th>closest input</th><td class=n colspan=2>{w.closest_input}"
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
            "<th>cost (ns)</th><th>solution (ticks)</th><th>share</th><th>WCET count</th>"
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
            + _td(F.num(r.solution_ticks), r.solution_ticks, True)
            + _td(share, r.share, True)
            + _td("" if r.wcet_count is None else f"{r.wcet_count:,}", r.wcet_count, True)
            + _td("" if r.group is None else str(r.group))
            + _td("; ".join(notes)) + "</tr>")
    return (f'<table class="sortable"><thead>{head}</thead><tbody>{"".join(body)}</tbody>'
            f'</table><p class="note">Click a column to sort.  cost: estimable blocks only; '
            f'solution: the fit\'s particular solution (used for predictions and the IPET); '
            f'share: of the mean predicted time of one root call, ≈ where the block is not '
            f'estimable alone.</p>')


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
    rows = []
    for p in fr.wcet.path:
        rows.append(f"<tr><td>{E(fr.key(p.block))}</td><td>{hexaddr(p.block)}</td>"
                    + _td(f"{p.count:,}", p.count, True) + _td(F.num(p.cost_ticks), p.cost_ticks, True)
                    + _td(F.num(p.callee_ticks) if p.callee_ticks else "", p.callee_ticks, True)
                    + _td(F.num(p.ticks), p.ticks, True)
                    + _td(F.num(report.ns(p.ticks)), report.ns(p.ticks), True) + "</tr>")
    return ('<h3>Worst-case path (blocks with counts)</h3><table class="sortable"><thead><tr>'
            '<th>block</th><th>address</th><th>count</th><th>cost/exec (ticks)</th>'
            '<th>callee WCET/exec (ticks)</th><th>total (ticks)</th><th>total (ns)</th></tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table>')


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
    for k, val in v.items():
        if isinstance(val, float) and k.endswith("rel_error"):
            items.append(f"<tr><th>{E(k)}</th><td class=n>{100 * val:.2f} %</td></tr>")
        elif isinstance(val, (int, float, str)):
            items.append(f"<tr><th>{E(k)}</th><td class=n>{E(str(val))}</td></tr>")
    worst = v.get("worst")
    if isinstance(worst, list) and worst:
        items.append("<tr><th>held-out worst inputs</th><td>" + E(", ".join(
            f"{w.get('input')} ({100 * float(w.get('rel_error') or 0):.1f} %)"
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


def render_html(report: Report, *, layout: str = "auto") -> str:
    """The whole report as one HTML document (a str)."""
    hz = report.tsc_hz
    rate = f"{hz / 1e9:.4f} GHz" if hz else "unknown (times in ticks only)"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>wcetfit report: {E(report.root)}</title><style>{_CSS}</style></head><body>",
             f"<h1>wcetfit report — {E(report.root)}</h1>",
             f'<p>{report.n_inputs:,} inputs × {report.n_repeats} timed repeats; TSC rate '
             f'{E(rate)}.<br><span class="note">{E(TICKS_NOTE)}.</span></p>']
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
        parts += [f'<h2 id="fn-{_ident(fr.name)}">{E(fr.name)} <span class="note">'
                  f'{hexaddr(fr.address)} — {E(role)}</span></h2>', big,
                  _wcet_table(report, fr)]
        if fr.warnings:
            parts.append(_warnings_html(fr.warnings))
        parts.append("<h3>Control-flow graph</h3><p class=note>Blocks coloured by their share "
                     "of the time (white → red); cost per execution in TSC ticks ± 95% CI, "
                     "ns and share on each block; red border: on the worst-case path "
                     "(×count); grey dashed: never executed; dashed edges: loop back edges. "
                     "Hover a block for its instructions.</p>")
        parts.append(f'<div class="cfgbox">{cfg_svg(fr, hz, layout)}</div>')
        parts.append(_path_table(report, fr))
        parts.append(_loops_table(fr))
        parts.append("<h3>Blocks</h3>" + _blocks_table(report, fr))
        parts.append("<h3>Groups and estimable combinations</h3>" + _groups_table(fr))
        never = fr.never_executed
        parts.append("<h3>Coverage</h3><p>" + (
            f"{len(never)} of {len(fr.blocks)} blocks never executed by the inputs (their "
            f"cost is unknown): {E(', '.join(fr.key(a) for a in never))}" if never else
            f"All {len(fr.blocks)} blocks executed by the inputs.") + "</p>")
        if fr.is_root:
            parts.append("<h3>Fit quality</h3>" + _quality_html(report, fr))
            if scatter or hist:
                parts.append(f'<div class="plots"><div>{scatter}</div><div>{hist}</div></div>')
    parts.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(parts)
