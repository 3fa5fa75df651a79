"""The report on synthetic inputs: a hand-built CFG, simulated counts, a fake fit."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from wcetfit.model import (CALL_IMPORTED, CALL_INTERNAL, Block, CallSite, FunctionModel,
                           Instruction, Loop)
from wcetfit.report import build_report, read_fit
from wcetfit.report.html import layered_layout, render_html
from wcetfit.report.json import SCHEMA_REPORT, to_json
from wcetfit.report.text import to_text
from wcetfit.wcet.analyze import analyze_wcet
from wcetfit.wcet.result import UnboundedLoopError

TSC_HZ = 2.6e9


def make_fn(name, base, n, edges, exits, loops=(), calls=()):
    A = lambda i: base + 0x10 * i  # noqa: E731
    blocks = tuple(Block(A(i), 0x10, (Instruction(A(i), 3, "add", "rax, 1"),
                                      Instruction(A(i) + 3, 13, "nop", "")))
                   for i in range(n))
    return FunctionModel(
        name=name, address=base, blocks=blocks,
        edges=tuple((A(s), A(d)) for s, d in edges), entry=A(0),
        exits=tuple(A(e) for e in exits),
        loops=tuple(Loop(A(h), tuple(A(b) for b in body), tuple((A(s), A(d)) for s, d in be),
                         tuple((A(s), A(d)) for s, d in en), None, 1)
                    for h, body, be, en in loops),
        calls=tuple(CallSite(A(b), A(b) + 3, k, t, tn) for b, k, t, tn in calls),
        jump_tables=(), coexec_classes=(), max_rank=0)


def sample():
    """f: entry 0; loop header 1 → test 2 → A 3 | B 4 → latch 5 → 1; 1 → 6 (calls g and
    is followed by exit 7); 0 → 8 (error path, never taken) → 7.  g: straight line."""
    f = make_fn("f", 0x1000, 9,
                [(0, 1), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5), (5, 1), (1, 6), (6, 7),
                 (0, 8), (8, 7)], [7],
                loops=[(1, [1, 2, 3, 4, 5], [(5, 1)], [(0, 1)])],
                calls=[(6, CALL_INTERNAL, 0x2000, "g"), (8, CALL_IMPORTED, 0x500, "abort")])
    g = make_fn("g", 0x2000, 3, [(0, 1), (1, 2)], [2])
    return {"f": f, "g": g}


def simulate(rng, n_inputs):
    f_rows = []
    for _ in range(n_inputs):
        n = int(rng.integers(0, 40))
        a = int(rng.integers(0, n + 1))
        c = np.zeros(9, dtype=np.int64)
        c[0] = 1
        c[1] = n + 1
        c[2] = n
        c[3] = a
        c[4] = n - a
        c[5] = n
        c[6] = 1
        c[7] = 1
        f_rows.append(c)
    counts = np.hstack([np.array(f_rows), np.ones((n_inputs, 3), dtype=np.int64)])
    return counts


TRUE = np.array([20, 4, 3, 9, 15, 2, 5, 6, 40, 7, 8, 9.0])   # f's 9 blocks, g's 3


def fake_fit(fns):
    """What the fit would report: the loop's test and its branches are a structural group
    (only test+A and test+B are estimable); 8 never executed; solution = truth with the
    group's test cost moved into A and B (a different particular solution)."""
    f, g = fns["f"], fns["g"]
    sol = TRUE.copy()
    sol[3] += sol[2]
    sol[4] += sol[2]
    sol[2] = 0.0
    sol[8] = 0.0
    blocks = []
    for i, b in enumerate(f.blocks):
        est = i not in (2, 3, 4, 8)
        blocks.append({"address": hex(b.address), "estimable": est,
                       "cost_ticks": float(TRUE[i]) if est else None,
                       "ci95_ticks": 0.4 if est else None,
                       "group": None if est else (1 if i != 8 else 2),
                       "solution_ticks": float(sol[i])})
    g_blocks = [{"address": hex(b.address), "estimable": True, "cost_ticks": float(TRUE[9 + i]),
                 "ci95_ticks": [TRUE[9 + i] - 0.2, TRUE[9 + i] + 0.2], "group": None,
                 "solution_ticks": float(TRUE[9 + i])} for i, b in enumerate(g.blocks)]
    return {
        "schema": "wcetfit.fit/1",
        "overhead_ticks": 52.0,
        "validation": {"heldout_inputs": 40, "median_rel_error": 0.004,
                       "p95_rel_error": 0.02, "r2": 0.9991},
        "functions": [
            {"name": "f", "blocks": blocks,
             "groups": [{"id": 1, "blocks": [hex(f.blocks[i].address) for i in (2, 3, 4)],
                         "kind": "structural",
                         "combinations": ["f+0x20 + f+0x30 = 12.0 ± 0.3 ticks",
                                          {"terms": [["f+0x20", 1], ["f+0x40", 1]],
                                           "value_ticks": 18.0, "ci95_ticks": 0.4}]},
                        {"id": 2, "blocks": [hex(f.blocks[8].address)], "kind": "observed",
                         "combinations": [],
                         "advice": "vary the inputs so that f+0x80 executes"}]},
            {"name": "g", "blocks": g_blocks, "groups": []},
        ],
    }


@pytest.fixture(scope="module")
def built():
    fns = sample()
    rng = np.random.default_rng(5)
    counts = simulate(rng, 120)
    cols = [("f", b.address) for b in fns["f"].blocks] + [("g", b.address)
                                                          for b in fns["g"].blocks]
    times = (counts @ TRUE + 52.0)[:, None] + rng.normal(0, 3, (120, 5))
    fit = fake_fit(fns)
    rf = read_fit(fit)
    costs = {name: {a: fb.solution_ticks for a, fb in ff.blocks.items()}
             for name, ff in rf.items()}
    wres = analyze_wcet(fns, "f", costs, counts, cols, entry_cost=52.0,
                        cov=np.eye(13) * 0.01, cov_index=cols + ["overhead"])
    report = build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)
    return fns, counts, cols, times, fit, wres, report


# --- data ---------------------------------------------------------------------------------

def test_report_data(built):
    fns, counts, cols, times, fit, wres, report = built
    fr = report.function("f")
    assert [b.address for b in fr.blocks] == list(fns["f"].block_addresses)
    assert fr.never_executed == (fns["f"].blocks[8].address,)
    # the predicted time is the same whatever particular solution: truth gives it too
    assert np.allclose(report.predicted_ticks, counts @ TRUE + 52.0)
    # shares of all blocks plus the overhead add up to one
    total = sum(b.share for f in report.functions for b in f.blocks) + 52.0 / np.mean(
        report.predicted_ticks)
    assert total == pytest.approx(1.0)
    # a group's share is marked estimable iff it is the same for every solution of the
    # fit, i.e. its mean count vector is orthogonal to the null space of [counts | 1].
    # Here the loop's test and branches co-vary with the header and latch: not estimable.
    from scipy.linalg import null_space
    null = null_space(np.hstack([counts, np.ones((counts.shape[0], 1))]).astype(float))
    for g in fr.groups:
        v = np.zeros(counts.shape[1] + 1)
        js = [cols.index(("f", a)) for a in g.blocks]
        v[js] = counts[:, js].mean(axis=0)
        invariant = bool(np.all(np.abs(v @ null) < 1e-8 * max(1.0, np.abs(v).max())))
        assert g.share_estimable == invariant, g.id
    assert not next(g for g in fr.groups if g.id == 1).share_estimable
    w = fr.wcet
    # the observed loop bound is the largest n over the inputs; the bound ≥ max predicted
    assert w.point_ticks >= w.max_predicted_ticks - 1e-9
    assert w.ipet_ticks == pytest.approx(w.point_ticks + wres.margin_ticks)
    assert w.closest_input == int(np.argmax(report.predicted_ticks))
    assert any("never executed" in x.message for x in fr.warnings)
    assert any("bounded by what the inputs reached" in x.message for x in fr.warnings)
    # what the bound rests on beyond the CFG (observed relations, path envelopes, ...)
    # reaches the report, each note once
    for note in wres.warnings:
        if not note.startswith(("imported call at", "indirect call at")):
            assert sum(x.message == note for x in fr.warnings) == 1, note
    assert report.function("g").wcet.point_ticks == pytest.approx(7 + 8 + 9)


# --- JSON ---------------------------------------------------------------------------------

def test_json_schema_fields(built):
    fns, counts, cols, times, fit, wres, report = built
    d = to_json(report)
    text = json.dumps(d, allow_nan=False)          # valid JSON: no NaN
    d = json.loads(text)
    assert d["schema"] == SCHEMA_REPORT == "wcetfit.report/1"
    assert d["tsc_hz"] == TSC_HZ and "ticks" in d["units"] and "ns" in d["units"]
    names = [f["name"] for f in d["functions"]]
    assert names[0] == "f" and "g" in names
    f = d["functions"][0]
    for key in ("blocks", "groups", "overhead_ticks", "validation", "wcet", "coverage",
                "warnings"):
        assert key in f, key
    for b in f["blocks"]:
        for key in ("address", "estimable", "cost_ticks", "ci95_ticks", "group",
                    "solution_ticks", "cost_ns", "share", "count_min", "count_max"):
            assert key in b, key
        assert b["address"].startswith("0x")
    assert len(f["blocks"]) == 9
    wc = f["wcet"]
    for key in ("ipet_ticks", "max_observed_ticks", "max_predicted_ticks", "path",
                "margin_ticks"):
        assert key in wc, key
        if key != "path":
            assert wc[key] is not None
            assert wc[key.replace("_ticks", "_ns")] == pytest.approx(wc[key] / TSC_HZ * 1e9)
    assert wc["path"] and all({"address", "count", "ticks", "ns"} <= set(p) for p in wc["path"])
    assert wc["ipet_ticks"] >= wc["max_observed_ticks"]
    est = next(b for b in f["blocks"] if b["estimable"])
    assert est["ci95_ticks"][0] < est["cost_ticks"] < est["ci95_ticks"][1]
    assert f["validation"]["r2"] == 0.9991
    assert f["coverage"]["never_executed"] == [hex(fns["f"].blocks[8].address)]


def test_json_without_tsc_rate_has_null_ns(built):
    fns, counts, cols, times, fit, wres, _ = built
    report = build_report(fns, "f", fit, counts, cols, times, wres, None)
    d = to_json(report)
    assert d["functions"][0]["wcet"]["ipet_ns"] is None
    assert d["functions"][0]["wcet"]["ipet_ticks"] is not None
    assert any("TSC rate" in w["message"] for w in d["warnings"])


def test_report_with_wcet_error(built):
    fns, counts, cols, times, fit, _, _ = built
    err = UnboundedLoopError("f: no bound for loop(s) f+0x10 (0x1010)", ["f+0x10"])
    report = build_report(fns, "f", fit, counts, cols, times, err, TSC_HZ)
    assert report.function("f").wcet.error.startswith("f: no bound")
    d = to_json(report)
    assert d["functions"][0]["wcet"]["ipet_ticks"] is None
    assert "no bound" in d["functions"][0]["wcet"]["error"]
    assert "not computed" in to_text(report)
    assert "not computed" in render_html(report)


# --- text --------------------------------------------------------------------------------

def test_text_renders_with_units(built):
    report = built[-1]
    text = to_text(report, width=200)
    assert "TSC ticks" in text and "ns" in text
    assert "IPET bound" in text and "Worst-case path" in text
    assert "not core cycles" in text
    assert "f+0x80" in text                         # coverage names the unexecuted block
    assert "vary the inputs" in text
    assert "12.0 ± 0.3" in text                     # group combinations shown
    # narrow terminals and the block limit do not break it
    assert to_text(report, width=80, max_blocks=3)


# --- HTML --------------------------------------------------------------------------------

class _Tags(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr",
            "source", "path", "rect", "line", "circle", "use", "stop", "polyline", "polygon",
            "ellipse"}

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.seen: dict[str, int] = {}
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.seen[tag] = self.seen.get(tag, 0) + 1
        for k, v in attrs:
            if k in ("src", "href") and v and re.match(r"(https?:)?//", v):
                self.external.append(v)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.seen[tag] = self.seen.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> (open: {self.stack[-3:]})")
            return
        self.stack.pop()


def test_html_is_one_file_with_valid_svg(built):
    fns, *_, report = built
    page = render_html(report, layout="builtin")
    assert page.startswith("<!DOCTYPE html>")
    p = _Tags()
    p.feed(page)
    assert not p.errors, p.errors[:5]
    assert not p.stack, p.stack
    assert not p.external, p.external               # self-contained
    svgs = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    assert len(svgs) >= 2 + 2                       # two CFGs and two plots
    for s in svgs:
        ET.fromstring(s)                            # well-formed XML
    # every block of f is drawn, with its offset written on it
    cfg_f = next(s for s in svgs if 'aria-label="control-flow graph of f"' in s)
    root = ET.fromstring(cfg_f)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f".//{ns}rect")) == len(fns["f"].blocks)
    texts = [t.text for t in root.iter(f"{ns}text")]
    for b in fns["f"].blocks:
        assert any(t and t.startswith(f"+{b.address - 0x1000:#x}") for t in texts), hex(b.address)
    assert "TSC ticks" in page and " ns" in page
    assert "table class=\"sortable\"" in page and "<script>" in page


def test_layered_layout_geometry():
    fns = sample()
    f = fns["f"]
    back = [e for lp in f.loops for e in lp.back_edges]
    lay = layered_layout(f.block_addresses, f.edges, back, f.entry)
    assert set(lay.nodes) == set(f.block_addresses)
    y_entry = lay.nodes[f.entry][1]
    assert all(y >= y_entry for _, y in lay.nodes.values())
    for s, d in f.edges:
        if (s, d) not in back:
            assert lay.nodes[d][1] > lay.nodes[s][1]       # forward edges point down
    # no overlap inside a layer
    by_y: dict = {}
    for a, (x, y) in lay.nodes.items():
        by_y.setdefault(round(y), []).append(x)
    for xs in by_y.values():
        xs.sort()
        assert all(b - a >= 170 for a, b in zip(xs, xs[1:]))
    assert all(0 <= x <= lay.width and 0 <= y <= lay.height for x, y in lay.nodes.values())


def test_html_with_graphviz_when_installed(built):
    if not shutil.which("dot"):
        pytest.skip("graphviz `dot` is not installed: the built-in layout is used")
    page = render_html(built[-1], layout="dot")
    for s in re.findall(r"<svg\b.*?</svg>", page, flags=re.S):
        ET.fromstring(s)


def test_html_renders_in_headless_browser(built, tmp_path):
    browser = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no headless browser installed (Debian's chromium)")
    page = tmp_path / "report.html"
    page.write_text(render_html(built[-1], layout="builtin"))
    shot = tmp_path / "shot.png"
    # no network here: without the background-networking flags chromium keeps trying
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-quic",
                    f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()],
                   check=True, timeout=120, capture_output=True)
    import matplotlib.image as mpimg
    img = mpimg.imread(str(shot))
    assert img.std() > 0.02, "the screenshot is blank"


# --- with the real fit --------------------------------------------------------------------

def test_with_real_fit_margin_matches_fit_prediction_interval():
    """wcet_bound's margin on the inlined worst path equals FitResult.predict_ci95 of that
    count vector, and its point bound equals FitResult.predict: two independent codes."""
    fitmod = pytest.importorskip("wcetfit.fit.solve")
    from wcetfit.wcet.analyze import fit_inputs
    fns = sample()
    rng = np.random.default_rng(8)
    counts = simulate(rng, 300)
    cols = [("f", b.address) for b in fns["f"].blocks] + [("g", b.address)
                                                          for b in fns["g"].blocks]
    times = (counts @ TRUE + 52.0)[:, None] + rng.normal(0, 3, (300, 5))
    fr = fitmod.fit_function(counts, times, [a for _, a in cols], tsc_hz=TSC_HZ)
    fi = fit_inputs(fr, fns)
    assert fi.unknown == (("f", fns["f"].blocks[8].address),)
    w = analyze_wcet(fns, "f", fi.costs, counts, cols, entry_cost=fi.entry_cost, cov=fi.cov,
                     cov_index=fi.cov_index, z=fi.z)
    x = np.array([w.inlined_counts.get(c, 0) for c in cols], dtype=float)
    assert fr.predictable(x)
    assert w.bound_ticks == pytest.approx(fr.predict(x, unknown="zero"), rel=1e-9)
    assert w.margin_ticks == pytest.approx(fr.predict_ci95(x), rel=1e-6)
    report = build_report(fns, "f", fr, counts, cols, times, w, TSC_HZ)
    d = json.loads(json.dumps(to_json(report), allow_nan=False))
    f = d["functions"][0]
    assert f["overhead_ticks"] == pytest.approx(fi.entry_cost)
    assert f["wcet"]["ipet_ticks"] >= f["wcet"]["max_observed_ticks"]
    assert [b["address"] for b in d["functions"][1]["blocks"]] == \
        [hex(b.address) for b in fns["g"].blocks]           # callee blocks under the callee
    assert "<svg" in render_html(report) and "TSC ticks" in to_text(report)
