"""Pictures of the HTML report: the CFG of a function as SVG (blocks coloured by their
share of the time, costs written on them) and the root's measured-vs-predicted scatter and
residual histogram (matplotlib, Agg backend, as inline SVG).

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
from wcetfit.report import BlockRow, FunctionReport, Report
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
    share = F.pct(r.share) if r.share is not None and r.estimable else ""
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
