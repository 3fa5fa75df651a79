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


def _measured():
    """The sample's functions, 120 simulated inputs' counts, their columns and times."""
    fns = sample()
    rng = np.random.default_rng(5)
    counts = simulate(rng, 120)
    cols = [("f", b.address) for b in fns["f"].blocks] + [("g", b.address)
                                                          for b in fns["g"].blocks]
    times = (counts @ TRUE + 52.0)[:, None] + rng.normal(0, 3, (120, 5))
    return fns, counts, cols, times


def _analysed(fns, counts, cols, times, fit):
    """The WCET and the report of ``fit`` (a fit document) on those measurements."""
    rf = read_fit(fit)
    costs = {name: {a: fb.solution_ticks for a, fb in ff.blocks.items()}
             for name, ff in rf.items()}
    wres = analyze_wcet(fns, "f", costs, counts, cols, entry_cost=52.0,
                        cov=np.eye(13) * 0.01, cov_index=cols + ["overhead"])
    return wres, build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)


@pytest.fixture(scope="module")
def built():
    fns, counts, cols, times = _measured()
    fit = fake_fit(fns)
    wres, report = _analysed(fns, counts, cols, times, fit)
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
    assert d["schema"] == SCHEMA_REPORT == "wcetfit.report/3"
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
    assert est["ci95_ticks"] == pytest.approx(0.4)       # the half-width, as the fit gives it
    assert f["validation"]["r2"] == 0.9991
    assert f["coverage"]["never_executed"] == [hex(fns["f"].blocks[8].address)]


def test_json_names_inputs_as_the_text_does(built):
    """An input in the JSON is its number and the label the text report uses, with its
    row (the bare row said input 103 where the text said search input 37)."""
    from dataclasses import replace

    from wcetfit.numbering import SEARCH_BASE, input_label
    fns, counts, cols, times, fit, wres, report = built
    numbers = tuple(SEARCH_BASE + 7 * k for k in range(report.n_inputs))
    d = to_json(replace(report, input_numbers=numbers))
    wc = d["functions"][0]["wcet"]
    for key in ("max_observed_input", "max_predicted_input", "closest_input"):
        item = wc[key]
        assert item["number"] == numbers[item["row"]]
        assert item["label"] == input_label(item["number"]).strip()
        assert item["label"].startswith("search input ")
    assert wc["closest_input"]["row"] == report.functions[0].wcet.closest_input


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
    # where no input can separate a group, the user is told where to look and that
    # nothing is missing (libm's pow: a `jp` taken on NaN only, after NaN has returned)
    sep = [w for w in report.function("f").warnings if "not separated" in w.message]
    assert sep and "`wcetfit reach` looks for such an input" in sep[0].advice
    assert "where none exists" in sep[0].advice
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


# --- the report a person reads (issue 18) ------------------------------------------------

from wcetfit.report import summary  # noqa: E402

INTERNAL_NAMES = ("r2 calls", "outside space", "median rel error kept", "r2_calls",
                  "outside_space", "median_rel_error_kept")


def _with_validation_fields(built):
    """The sample's report with every validation field the real fit gives (the fit/1
    names), and a block whose estimate rounds to a negative zero."""
    fns, counts, cols, times, fit, wres, _ = built
    fit = json.loads(json.dumps(fit))
    fit["validation"].update({"folds": 5, "heldout_calls": 600, "r2_calls": 0.98,
                              "outside_space": 0, "discarded_calls": 3,
                              "median_rel_error_inputs": 0.003,
                              "p95_rel_error_inputs": 0.01,
                              "median_rel_error_kept": 0.004, "p95_rel_error_kept": 0.02})
    fit["functions"][0]["blocks"][0]["cost_ticks"] = -0.0004
    fit["functions"][0]["blocks"][0]["solution_ticks"] = -0.0004
    return build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)


def test_summary_fits_one_screen_and_says_what_the_bound_rests_on(built):
    report = built[-1]
    text = summary.to_text(report, width=100)
    lines = text.splitlines()
    assert len(lines) <= 60, len(lines)
    assert "WCET bound: " in text and "ticks" in text and " ns)" in text
    w = report.function("f").wcet
    assert f"{w.ipet_ticks:,.0f} ticks" in text                 # the bound itself
    assert f"input {w.max_observed_input}," in text              # the slowest measured input
    # the sample gives no [loops]: its loop is bounded by what the inputs reached, and the
    # summary names the table where a real bound goes
    assert "loop f+0x10" in text and "[loops]" in text
    assert re.search(r"Fit: (good|fair|poor) — ", text)
    assert "Warnings (" in text and "→ " in text                 # remedies shown
    assert "--full" in text                                      # where the tables are
    assert to_text(report, full=False) == summary.to_text(report, width=140)


def test_no_internal_names_and_no_negative_zero(built):
    report = _with_validation_fields(built)
    for text in (to_text(report, width=200), summary.to_text(report, width=200),
                 render_html(report, layout="builtin")):
        for name in INTERNAL_NAMES:
            assert name not in text, name
        assert not re.search(r"(?<![\w.])-0\.0+(?![\d])", text), \
            re.search(r".{30}(?<![\w.])-0\.0+(?![\d]).{30}", text)
    full = to_text(report, width=200)
    assert "held-out calls: R²" in full and "cross-validation folds" in full


def test_blocks_not_estimable_alone_show_no_cost_of_their_own(built):
    """The fit's particular solution of f+0x20 (0), f+0x30 (12) and f+0x40 (18) is no
    measurement: the path table shows "—" for them, and the path's total."""
    report = built[-1]
    fr = report.function("f")
    alone = {r.address: r.estimable for r in fr.blocks}
    on_path = [p for p in fr.wcet.path if not alone[p.block]]
    assert on_path, "the sample's worst path runs blocks of the structural group"
    text = to_text(report, width=220)
    path = text[text.index("Worst-case path of f"):text.index("Loop bounds of f")]
    for p in on_path:
        row = next(ln for ln in path.splitlines() if f" {fr.key(p.block)} " in ln)
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert cells[3] == "—" and cells[5] == "—" and cells[7].startswith("group"), row
    assert f"{fr.wcet.point_ticks:,.0f}" in path or F_num(fr.wcet.point_ticks) in path
    # the block table shows the group, not a share of its own
    blocks = text[text.index("Blocks of f"):]
    for r in fr.blocks:
        if not r.estimable and r.group is not None:
            row = next(ln for ln in blocks.splitlines() if f" +{r.offset:#x} " in ln)
            assert f"in group {r.group}" in row and "≈" not in row, row
    # the summary never lists a non-estimable block on its own
    s = summary.to_text(report, width=200)
    for p in on_path:
        assert f"{fr.key(p.block)}:" not in s
    page = render_html(report, layout="builtin")
    for p in on_path:
        row = re.search(rf"<tr><td>{re.escape(fr.key(p.block))}</td>.*?</tr>", page).group(0)
        assert row.count(">—<") >= 3 and "group" in row, row


def F_num(v):
    from wcetfit.report import _format
    return _format.num(v)


def test_json_ci95_is_a_half_width_in_fit_and_report():
    """One shape for one quantity: ci95_ticks is value ± half-width in wcetfit.fit/1 and
    in wcetfit.report/3 (the report's is read from a real fit, not from the test)."""
    fitmod = pytest.importorskip("wcetfit.fit.solve")
    # blocks run independently random numbers of times: each is estimable alone
    h = make_fn("h", 0x3000, 5, [(0, 1), (1, 2), (2, 3), (3, 4)], [4])
    fns = {"h": h}
    rng = np.random.default_rng(3)
    counts = np.hstack([np.ones((300, 1)), rng.integers(0, 50, (300, 4))]).astype(np.int64)
    cols = [("h", b.address) for b in h.blocks]
    times = (counts @ np.array([30.0, 4.0, 7.0, 2.0, 11.0]))[:, None] + \
        rng.normal(0, 2, (300, 5))
    fr = fitmod.fit_function(counts, times, [a for _, a in cols], tsc_hz=TSC_HZ)
    fit_doc = json.loads(json.dumps(fr.to_json()))
    report = build_report(fns, "h", fr, counts, cols, times, None, TSC_HZ)
    rep_doc = json.loads(json.dumps(to_json(report), allow_nan=False))
    fit_blocks = {b["address"]: b for fd in (fit_doc.get("functions") or [fit_doc])
                  for b in fd["blocks"]}
    rep_blocks = {b["address"]: b for fd in rep_doc["functions"] for b in fd["blocks"]}
    compared = 0
    for a, fb in fit_blocks.items():
        if fb.get("ci95_ticks") is None or a not in rep_blocks:
            continue
        rb = rep_blocks[a]
        assert isinstance(fb["ci95_ticks"], float) and isinstance(rb["ci95_ticks"], float)
        assert rb["ci95_ticks"] == pytest.approx(fb["ci95_ticks"], rel=1e-9)
        assert rb["ci95_ns"] == pytest.approx(fb["ci95_ticks"] / TSC_HZ * 1e9, rel=1e-9)
        compared += 1
    assert compared >= 4


def test_html_has_an_index_and_collapsed_sections(built):
    fns, counts, cols, times, fit, wres, report = built
    other = build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)
    many = [report] + [dataclasses_replace_root(other, f"f{i}") for i in range(15)]
    page = render_html(many, layout="builtin")
    assert "<h2>Functions</h2>" in page
    for r in many:
        assert f'href="#root-{r.root}"' in page and f'id="root-{r.root}"' in page
    details = re.findall(r"<details[^>]*>", page)
    assert len(details) == 16 * (1 + len(report.functions))
    assert not any(" open" in d for d in details)           # collapsed until opened
    assert len(page.encode()) < 4_000_000
    one = render_html(report, layout="builtin")
    assert re.search(r'<details class="root" id="root-f" open>', one)


def dataclasses_replace_root(report, name):
    import dataclasses
    return dataclasses.replace(report, root=name)


def test_cli_full_and_function_show_the_tables(built, capsys):
    import argparse
    from types import SimpleNamespace

    from wcetfit.cli import build_parser
    from wcetfit.cli.report import emit

    report = built[-1]
    args = build_parser().parse_args(["report", "somewhere"])
    assert args.full is False and args.function is None
    emit([SimpleNamespace(report=report)], args)
    short = capsys.readouterr().out
    assert "WCET bound: " in short and "Blocks of f" not in short
    args = build_parser().parse_args(["report", "somewhere", "--full"])
    emit([SimpleNamespace(report=report)], args)
    full = capsys.readouterr().out
    for title in ("Worst-case path of f", "Loop bounds of f", "Blocks of f", "Groups of f",
                  "Fit quality", "Blocks of g"):
        assert title in full, title
    args = build_parser().parse_args(["analyze", "somewhere", "--function", "g"])
    emit([SimpleNamespace(report=report)], args)
    only_g = capsys.readouterr().out
    assert "Blocks of g" in only_g and "Blocks of f" not in only_g
    args = argparse.Namespace(json=None, html=None, full=False, function="nope",
                              max_blocks=None)
    from wcetfit.errors import WcetfitError
    with pytest.raises(WcetfitError, match="nope"):
        emit([SimpleNamespace(report=report)], args)


def test_wcetfit_help_describes_the_tool(capsys):
    from wcetfit.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "worst-case execution time" in out and "TSC ticks" in out
    assert "Command line: the one place" not in out              # not the module docstring
    assert "where to start:" in out and "wcetfit analyze TARGET_DIR" in out
    cmds = [ln.split()[0] for ln in out.splitlines() if ln.startswith("    ") and ln.split()]
    pipeline = [c for c in ("cfg", "count", "time", "fit", "report") if c in cmds]
    assert pipeline == sorted(pipeline, key=cmds.index) == ["cfg", "count", "time", "fit",
                                                            "report"]


@pytest.mark.slow
def test_default_report_of_a_sample_fits_one_screen(tmp_path):
    """The adpcm sample's default report, measured here in a scratch copy, is one screen."""
    import os
    import shutil
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sample = os.path.join(root, "samples", "adpcm")
    if not os.path.exists(os.path.join(sample, "build", "libadpcm.so")):
        pytest.skip("samples/adpcm is not built (make samples)")
    target = tmp_path / "adpcm"
    shutil.copytree(sample, target, ignore=shutil.ignore_patterns(".wcetfit", "build"))
    os.symlink(os.path.join(sample, "build"), target / "build")
    res = subprocess.run([sys.executable, "-m", "wcetfit", "analyze", str(target), "--inputs",
                          "120", "--repeats", "3"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": root})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) <= 60, len(lines)
    # no negative zero ("-0.0" as a whole number; -0.0596 is a number like any other)
    assert "WCET bound: " in res.stdout and not re.search(r"-0\.0(?![0-9])", res.stdout)
    for name in INTERNAL_NAMES:
        assert name not in res.stdout


def test_summary_of_many_functions_stays_short(built):
    """16 roots (a library target): each in a few lines, warnings common to all said once."""
    report = built[-1]
    many = [dataclasses_replace_root(report, f"f{i}") for i in range(16)]
    text = summary.to_text(many, width=100)
    assert len(text.splitlines()) <= 150, len(text.splitlines())
    assert text.count("WCET bound") >= 16
    assert "--function" in text
    one = summary.to_text(report, width=100)
    assert len(text.splitlines()) < 16 * len(one.splitlines())


def test_html_page_keeps_to_its_size_budget(built):
    """Past the budget the largest drawings and tables are left out, each with a note
    saying how to get them; the focus function keeps everything."""
    report = built[-1]
    many = [dataclasses_replace_root(report, f"f{i}") for i in range(16)]
    whole = render_html(many, layout="builtin", max_bytes=None)
    budget = len(whole.encode()) * 4 // 5
    page = render_html(many, layout="builtin", max_bytes=budget)
    assert len(page.encode()) <= budget
    assert "left out to keep this page under" in page and "--function" in page
    assert page.count("<details") == whole.count("<details")   # every section still there
    kept = render_html([report], layout="builtin", max_bytes=1, focus="f")
    section = kept[kept.index('id="fn-f-f"'):kept.index('id="fn-f-g"')]
    assert "<svg" in section and "left out to keep" not in section


def test_loops_table_name_reaches_the_reader(built):
    """Advice naming the [loops] table keeps the brackets in every terminal view (rich
    markup would swallow them)."""
    fns, counts, cols, times, fit, _, _ = built
    err = UnboundedLoopError('f: no bound for loop(s) f+0x10 (0x1010): add e.g. "f+0x10" = N '
                             'under [loops] in wcetfit.toml', ["f+0x10"])
    report = build_report(fns, "f", fit, counts, cols, times, err, TSC_HZ)
    for text in (to_text(report, width=200), summary.to_text(report, width=200),
                 summary.to_text([dataclasses_replace_root(report, f"f{i}")
                                  for i in range(6)], width=200)):
        assert "under [loops] in wcetfit.toml" in text


def test_rests_on_lists_facts_first_site_facts_and_no_zero_callee_bound():
    """What the bound rests on, read the way a user of zlib's uncompress reads it: loop
    facts from [loops] before the observed ones (never hidden among "more loop bounds"),
    the facts of single call sites, and no callee bound of 0 ticks (a figure no call has:
    its costs are sums the inputs did not separate)."""
    from types import SimpleNamespace as NS

    from wcetfit.report.summary import MAX_LOOPS, _rests_on
    from wcetfit.wcet.result import SOURCE_FACT, SOURCE_OBSERVED, LoopBound

    def loop(name, source):
        return NS(name=name, bound=LoopBound(per_entry=5, total=5, source=source))

    observed = [loop(f"f+{0x10 * i:#x}", SOURCE_OBSERVED) for i in range(1, MAX_LOOPS + 2)]
    wcet = NS(loops=observed + [loop("f+0x400", SOURCE_FACT)], envelopes=(), relations=(),
              ipet_ticks=1000.0, recursion_depth=None, path_residual=None)
    note = NS(message="f: 1 loop bound(s) given per call site in [loops] (h+0x60 ≤ 19 per "
                      "entry (fact) at the call at f+0x1c42): each holds in that site's "
                      "instance of its function; if one is not a fact of the program, the "
                      "bound does not hold")
    root = NS(name="f", wcet=wcet, warnings=(note,))
    # (which callee has no bound of its own is FunctionReport's rule, tested with it)
    callees = [NS(name="h", wcet=NS(loops=(), ipet_ticks=0.04, recursion_depth=None),
                  no_bound_of_its_own=True),
               NS(name="g", wcet=NS(loops=(), ipet_ticks=350.0, recursion_depth=None),
                  no_bound_of_its_own=False)]
    report = NS(functions=[root, *callees], warnings=(), tsc_hz=2.6e9,
                above_root_bound=lambda c: False)
    lines = _rests_on(report, root)
    assert lines[0].startswith("loop f+0x400") and "from [loops]" in lines[0]
    assert any(x.startswith("1 loop bound(s) given per call site in [loops] (h+0x60 ≤ 19")
               for x in lines)
    own = next(x for x in lines if x.startswith("callees' own bounds"))
    assert "h (none of its own)," in own and "h 0" not in own \
        and "g 350.0 ticks (134.6 ns)" in own
    # a callee whose executed blocks all share groups with its callers has no bound of
    # its own either, whatever the particular solution sums to (nettle's
    # _nettle_sha256_compress_sha_ni: "20.1 ticks", a SHA-256 block in 8 ns)
    shared = NS(name="k", wcet=NS(loops=(), ipet_ticks=20.1, recursion_depth=None),
                no_bound_of_its_own=True)
    report = NS(functions=[root, *callees, shared], warnings=(), tsc_hz=2.6e9,
                above_root_bound=lambda c: False)
    own = next(x for x in _rests_on(report, root) if x.startswith("callees' own bounds"))
    assert "k (none of its own)" in own and "20.1" not in own
    # said in words, not "h —; —: none, …" (a new user read it as garbled)
    assert own.endswith("; \"none of its own\": the inputs do not determine that callee's "
                        "block costs apart from its callers'") and "—" not in own
    # bounded per call site, the callees' whole-call bounds are not what the bound
    # charges (zlib's compress2: deflate 192,399,126 beside a root of 138,466): not listed
    site = NS(message="f: callees bounded per call site (2 callee instance(s) ...)")
    root2 = NS(name="f", wcet=wcet, warnings=(note, site))
    lines = _rests_on(NS(functions=[root2, *callees], warnings=(), tsc_hz=2.6e9), root2)
    assert not any(x.startswith("callees' own bounds") for x in lines)
    assert "2 callee(s) have context-insensitive bounds of their own, not charged here " \
           "(--full lists them)" in lines


def test_summary_says_when_the_costs_were_held_to_physical_values(built):
    """The fit's held_to_physical warning (least squares broke a physical limit) is said on
    the summary's Fit line with the rise of the residuals, not only among the warnings
    (on zlib's uncompress it came after 60 loop warnings)."""
    fns, counts, cols, times, fit, wres, _ = built
    fit = json.loads(json.dumps(fit))
    plain = summary.to_text(build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ),
                            width=200)
    assert "held to physical values" not in plain
    root = fit["functions"][0]          # the fit's own fields, as FitResult.to_json() has them
    root["costs"] = "physical"
    root.setdefault("fit_warnings", []).append({
        "code": "held_to_physical", "remedy": "…",
        "message": "unconstrained least squares gives 79 unknown(s) values no machine has "
                   "(…); the costs are fitted held to physical values (114 block cost(s) "
                   "at 0), which raises the weighted residual sum of squares by 306.2 %"})
    text = summary.to_text(build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ),
                           width=200)
    flat = " ".join(text.split())            # the Fit line, unwrapped
    assert re.search(r"Fit: \w+ — [^⚠]*costs held to physical values \(every block ≥ 0, ε ≥ "
                     r"its floor\), which least squares broke: the residual sum of squares "
                     r"rose 306\.2 %", flat)


def test_never_executed_blocks_are_described_as_the_policy_treats_them(built):
    """The warning on blocks no input ran says what the bound did with them, as the first
    WCET warning does: left out under the default policy (it used to advise accepting
    "the fit's particular solution", which the bound never used for them), and under
    [wcet] unreached = "require" that their time is not in the bound until measured."""
    fns, counts, cols, times, fit, wres, report = built
    never = [w for w in report.function("f").warnings if "never executed" in w.message]
    assert never and "leaves them out of the worst path" in never[0].message
    assert "particular solution" not in never[0].advice
    rf = read_fit(fit)
    costs = {name: {a: fb.solution_ticks for a, fb in ff.blocks.items()}
             for name, ff in rf.items()}
    req = analyze_wcet(fns, "f", costs, counts, cols, entry_cost=52.0, unreached="require")
    rep = build_report(fns, "f", fit, counts, cols, times, req, TSC_HZ)
    never = [w for w in rep.function("f").warnings if "never executed" in w.message]
    assert never and "leaves them out" not in never[0].message
    assert "measured costs replace the ceiling" in never[0].advice


def test_require_costs_blocks_no_input_ran_at_their_ceiling_never_lowering_the_bound(built):
    """[wcet] unreached = "require" costed the blocks no input ran 0 ticks: covering more
    paths lowered the bound (libm's sin: 533.8 ticks against 544.4 under "observed").  They
    are now costed at the most their instructions can take, and the bound says how much
    of its point that is."""
    from wcetfit.fit.ceilings import INSTRUCTION_NS
    from wcetfit.wcet.analyze import FitInputs
    from wcetfit.wcet.unreached import ceiling_costs, ceiling_note

    fns, counts, cols, times, fit, wres, report = built
    rf = read_fit(fit)
    costs = {name: {a: (fb.solution_ticks or 0.0) for a, fb in ff.blocks.items()}
             for name, ff in rf.items()}
    never = fns["f"].blocks[8]                  # no input ran it: the fit has no cost
    assert not counts[:, cols.index(("f", never.address))].any()
    costs["f"][never.address] = 0.0
    unknown = (("f", never.address),)
    fi = FitInputs(costs, unknown, 52.0, None, (), 1.96)
    priced, given, unlimited = ceiling_costs(fi, fns, TSC_HZ)
    ceiling = (len(never.instructions) + 1) * INSTRUCTION_NS * 1e-9 * TSC_HZ
    assert priced.costs["f"][never.address] == pytest.approx(ceiling)
    assert given[("f", never.address)] == pytest.approx(ceiling)
    # (the count relations every input kept would keep the error path off the worst
    # path: on these inputs the loop's exit block ran once per call)
    loose = dict(entry_cost=52.0, use_relations=False, observed_paths=False)
    observed = analyze_wcet(fns, "f", fi.costs, counts, cols, **loose)
    at_zero = analyze_wcet(fns, "f", fi.costs, counts, cols, unreached="require", **loose)
    required = analyze_wcet(fns, "f", priced.costs, counts, cols, unreached="require",
                            **loose)
    runs = required.functions["f"].block_counts[never.address]
    assert runs >= 1                              # the worst path takes the unrun block
    assert required.bound_ticks >= observed.bound_ticks
    assert required.bound_ticks > at_zero.bound_ticks
    note = ceiling_note(given, unlimited, required, TSC_HZ)
    assert f"{runs * ceiling:,.0f} ticks" in note and "(n + 1) × 500 ns" in note
    # it calls abort (imported): the ceiling does not limit the callee's time, and says so
    assert unlimited == ["f+0x80 (calls abort)"] and "f+0x80 (calls abort)" in note
    assert ceiling_note(given, unlimited, observed, TSC_HZ) is None
    with pytest.raises(Exception, match="needs the TSC rate"):
        ceiling_costs(fi, fns, None)


def test_fit_line_says_when_held_out_inputs_lie_outside_the_others_span(built):
    """A new user's libbz2 run: every held-out input ran block counts the other inputs do
    not span, and the Fit line gave its figures as plain prediction errors.  It now says
    so (their predictions rest on costs the inputs did not determine); with none outside,
    nothing is added."""
    from wcetfit.report.summary import fit_in_words

    fns, counts, cols, times, fit, wres, _ = built

    def line(outside, weak=0):
        f = json.loads(json.dumps(fit))
        f["validation"].update({"outside_space": outside, "outside_space_weak": weak,
                                "heldout_inputs": 110})
        return fit_in_words(build_report(fns, "f", f, counts, cols, times, wres,
                                         TSC_HZ).function("f"))

    assert "110 of 110 held-out inputs ran block counts the other inputs do not span" \
        in line(110)
    assert "do not span" not in line(0)
    # outside only by directions too weak for the noise (calls: 516 of 520): not "do not
    # span", and not "more varied inputs" alone
    noise = line(110, weak=108)
    assert "do not span" not in noise
    assert "108 of 110 held-out inputs ran count combinations the other inputs vary too " \
           "little for the timing noise" in noise and "quieter timing" in noise


def test_one_path_for_every_input_is_said(built):
    """expat's XML_Parse with init's NULL parser: every input returns at the first check,
    and the report printed a bound and "Fit: fair" with nothing to say the inputs never
    left one path.  A warning now says so, with what to vary."""
    fns, counts, cols, times, fit, wres, report = built
    assert not any("ran the same blocks" in w.message for w in report.function("f").warnings)
    same = np.repeat(counts[:1], len(counts), axis=0)
    rep = build_report(fns, "f", fit, same, cols, times, wres, TSC_HZ)
    said = [w for w in rep.function("f").warnings if "ran the same blocks" in w.message]
    assert said and f"all {len(counts)} inputs" in said[0].message and "NULL" in said[0].advice
    # and under the headline, where the bound is read (it was second among the warnings)
    ran = int((same[0, [c[0] == "f" for c in cols]] > 0).sum())
    headline = " ".join(summary.to_text(rep).split())
    assert f"Only for the one path every input ran ({ran} of " in headline
    assert "Only for the one path" not in summary.to_text(report)


def test_a_callees_block_in_the_roots_groups_is_named_within_the_callee(built):
    """The whole-call fit's groups span the root's callees; their blocks were named from
    the root's address (libm: "pow+0x2e780" for a block of another function, libcrypto:
    "SHA256-0xae010").  Each is named within the function that holds it."""
    fns, counts, cols, times, fit, wres, _ = built
    fit = json.loads(json.dumps(fit))
    g0 = fns["g"].blocks[1].address
    fit["functions"][0]["groups"][0]["blocks"].append(hex(g0))
    report = build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)
    fr = report.function("f")
    assert fr.key(g0) == "g+0x10"
    text = to_text(report, full=True)
    assert "g+0x10" in text and f"f+{g0 - fns['f'].address:#x}" not in text


def test_an_imported_call_warns_only_on_the_worst_path(built):
    """The sample's error path calls abort in a block no input ran and the worst path
    leaves out: its 'time varies with its arguments' warning changed nothing in the bound
    (a new user's cbrt and MD5 reports: __stack_chk_fail).  A call on the path still
    warns."""
    from dataclasses import replace as dc_replace

    fns, counts, cols, times, fit, wres, report = built
    said = [w.message for w in report.function("f").warnings if "call to imported" in w.message]
    assert not said, said
    f = fns["f"]
    exit_block = f.blocks[7].address
    f2 = dc_replace(f, calls=f.calls + (CallSite(exit_block, exit_block + 3, CALL_IMPORTED,
                                                  0x600, "free"),))
    fns2 = {"f": f2, "g": fns["g"]}
    rf = read_fit(fit)
    costs = {name: {a: fb.solution_ticks for a, fb in ff.blocks.items()}
             for name, ff in rf.items()}
    w2 = analyze_wcet(fns2, "f", costs, counts, cols, entry_cost=52.0)
    rep = build_report(fns2, "f", fit, counts, cols, times, w2, TSC_HZ)
    said = [w.message for w in rep.function("f").warnings if "call to imported" in w.message]
    assert len(said) == 1 and "free" in said[0]
    # an accessor of no arguments (glibc's ctype table, errno) takes the same time every
    # call: no warning (libuuid's uuid_parse_range: "its time varies with its arguments")
    f3 = dc_replace(f, calls=f.calls + (CallSite(exit_block, exit_block + 3, CALL_IMPORTED,
                                                  0x600, "__ctype_b_loc@GLIBC_2.3"),))
    fns3 = {"f": f3, "g": fns["g"]}
    w3 = analyze_wcet(fns3, "f", costs, counts, cols, entry_cost=52.0)
    rep = build_report(fns3, "f", fit, counts, cols, times, w3, TSC_HZ)
    assert not [w.message for w in rep.function("f").warnings
                if "call to imported" in w.message]


def test_where_the_time_goes_names_the_overhead(built):
    """ε is in every timed call and is no part of the function; on short functions it is
    half the call (libm exp: about 70 of 150 ticks), and the blocks' shares alone read as
    if the function took it.  The sample's ε is 52 ticks of a mean call."""
    from wcetfit.report.summary import _top

    report = built[-1]
    share = 52.0 / float(np.mean(report.predicted_ticks))
    lines = [t for t in _top(report) if t.strip().split("  ", 1)[-1].startswith("ε")]
    assert lines and f"{100 * share:.1f}" in lines[0].replace(",", "")
    assert "not the function" in lines[0]


def test_the_summary_folds_observed_loop_warnings_and_puts_one_path_first():
    """liblzma's decoder has 45 loops bounded by what the inputs reached: one warning
    each filled the screen's twelve and hid the rest.  After three, they are one line;
    the warning that every input took one path comes before them."""
    from wcetfit.report import Finding
    from wcetfit.report.summary import _by_priority, _folded_loops

    loops = [Finding(f"f: loop f+0x{10 * i:x} is bounded by what the inputs reached (≤ 4)",
                     "add it") for i in range(1, 11)]
    one_path = Finding("f: all 40 inputs ran the same blocks the same number of times: …",
                       "vary the inputs")
    other = Finding("fit: outlier rejection did not settle", "")
    got = _folded_loops(_by_priority(loops + [other, one_path]))
    assert got[0] == one_path
    assert got[1:4] == loops[:3]
    assert got[4].message.startswith("7 more loops are bounded by what the inputs reached: "
                                     "f+0x28, f+0x32")
    assert got[5] == other and len(got) == 6
    assert _folded_loops(loops[:4]) == loops[:4]          # four: nothing to fold


def test_where_the_time_goes_says_when_the_overhead_holds_always_once_blocks(built):
    """Where the inputs cannot tell the blocks every call runs once from ε, ε holds their
    time too (libcrypto SHA1: 747 ticks of "overhead" against an empty timed region of
    about 50): "not the function" was wrong there."""
    from dataclasses import replace

    from wcetfit.report import GroupRow
    from wcetfit.report.summary import _top

    report = built[-1]
    root = report.functions[0]
    group = GroupRow("overhead", (root.blocks[0].address, root.blocks[1].address), "overhead",
                     (), None, None, False)
    with_once = replace(report, functions=(replace(root, groups=tuple(root.groups) + (group,)),)
                        + tuple(report.functions[1:]))
    lines = [t for t in _top(with_once) if t.strip().split("  ", 1)[-1].startswith("ε")]
    assert lines and "ε with the time of blocks the inputs do not separate from it (2 in" \
        in lines[0]
    assert "not the function" not in lines[0]
    # with the group's share known, one figure for ε and its blocks: the group's, as the
    # Groups table gives it (libm's fmod: 6.8 % for ε beside ≈99.6 % for its group)
    group = replace(group, share=0.9, share_estimable=False)
    with_share = replace(report, functions=(replace(root, groups=tuple(root.groups)
                                                    + (group,)),) + tuple(report.functions[1:]))
    lines = [t for t in _top(with_share) if "ε" in t]
    assert len(lines) == 1 and lines[0].lstrip().startswith("≈90")
    # a loop among its blocks is named (libgmp's mpn_mul_1 read "≈100 % group 0: 16
    # block(s) and ε (the timed region's own overhead)", its loop of up to 1,023 passes
    # taken for the timer's overhead); without one, the blocks and ε
    in_loop = [b for b in root.blocks[:2] if b.loop_header is not None and b.count_max > 1]
    assert in_loop, "the fixture's first blocks hold a loop"
    assert (f"group overhead: 2 block(s), among them the loop at "
            f"{root.key(in_loop[0].loop_header)}, and ε (the timed region's own overhead)"
            in lines[0]), lines
    flat = replace(root, blocks=tuple(replace(b, loop_header=None) for b in root.blocks),
                   groups=tuple(root.groups) + (group,))
    lines = [t for t in _top(replace(report, functions=(flat,) + tuple(report.functions[1:])))
             if "ε" in t]
    assert "group overhead: 2 block(s) and ε (the timed region's own overhead)" in lines[0]
    # measured in combinations, not as one sum (libdeflate's adler32: dozens of its
    # combinations determined, and the line said "only their sum is measured")
    assert "whose costs the inputs determine only in combinations" in lines[0]
    # a share above the whole call is no share of it: the fit has costs below zero
    # elsewhere (zstd's compressor, no physical fit: "≈103.0 %" as the only line)
    above = replace(group, share=1.03, share_estimable=False)
    lines = [t for t in _top(replace(report, functions=(replace(
        root, groups=tuple(root.groups) + (above,)),) + tuple(report.functions[1:])))
        if "ε" in t]
    assert lines[0].lstrip().startswith("≈all"), lines
    assert "the fit gives it 103.0 % of the mean call, with costs below zero elsewhere" \
        in lines[0], lines


def test_callees_blocks_no_input_ran_are_folded_after_two():
    """libcrypto's SHA512 and liblzma's encoder: one "never executed" warning per callee
    (dozens, error paths mostly) hid the others.  The root's and two callees' are shown,
    the rest is one line with their count and names."""
    from wcetfit.report import Finding
    from wcetfit.report.summary import _folded_unexecuted

    def never(fn, n):
        return Finding(f"{fn}: {n} block(s) never executed by the inputs: {fn}+0x10; their "
                       f"cost is unknown", "add inputs that reach them")

    warns = [never("root", 2), Finding("a loop", ""), never("c1", 1), never("c2", 3),
             never("c3", 4), never("c4", 5), Finding("last", "")]
    out = _folded_unexecuted(warns, "root")
    assert [w.message.split(":")[0] for w in out][:4] == ["root", "a loop", "c1", "c2"]
    assert out[4].message.startswith("2 more callees have blocks no input executed (9 "
                                     "blocks: c3, c4)")
    assert out[4].advice == "add inputs that reach them" and out[5].message == "last"
    assert _folded_unexecuted(warns[:5], "root") == warns[:5]     # three callees: as they are


def test_a_group_across_functions_names_them(built):
    """A group of blocks the inputs do not separate can span functions (liblzma's LZMA
    encoder: 1,159 blocks of many functions read "group 1 of sub_16880")."""
    from dataclasses import replace

    from wcetfit.report import GroupRow
    from wcetfit.report.summary import _top

    report = built[-1]
    root = report.functions[0]
    other = replace(root, name="g", blocks=root.blocks[:1], groups=())
    blocks = (root.blocks[1].address, root.blocks[0].address)
    group = GroupRow(7, blocks, "structural", (), None, 0.5, True)
    two = replace(report, functions=(replace(root, groups=(group,), blocks=root.blocks[1:]),
                                      other))
    lines = [t for t in _top(two) if "group 7" in t]
    assert lines and "group 7 across 2 functions (" in lines[0], lines


def test_a_worst_path_below_a_measured_input_is_said(built):
    """libbz2's decompressor on raw inputs: the worst path's point was 67 ticks beside an
    input measured at 266, its extra blocks' costs undetermined; the bound (298) covered
    it only through the misfit factor, and nothing said so."""
    from dataclasses import replace

    fns, counts, cols, times, fit, wres, _ = built
    slow = times.copy()
    slow[7] = 4.0 * np.max(times)                   # an input the model misses
    w2 = replace(wres, dispersion=3.5, dispersion_factors={"misfit": 4.0, "call": 1.1})
    rep = build_report(fns, "f", fit, counts, cols, slow, w2, TSC_HZ)
    said = [w.message for w in rep.function("f").warnings
            if "worst-case path's predicted time" in w.message]
    assert len(said) == 1 and "misfit factor (×4.00)" in said[0]
    # nothing said where the path is the slowest input's time
    rep = build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)
    assert not [w for w in rep.function("f").warnings
                if "worst-case path's predicted time" in w.message]


def test_a_single_call_above_the_bound_is_said(built):
    """A call taken for an interrupted one and left out can lie above the bound
    (libcrypto MD5: 24,220 ticks against 13,109); it was only in the JSON."""
    fns, counts, cols, times, fit, wres, _ = built
    spike = times.copy()
    spike[3, 2] = 10 * np.max(times)
    rep = build_report(fns, "f", fit, counts, cols, spike, wres, TSC_HZ)
    said = [w.message for w in rep.function("f").warnings if "is above the bound" in w.message]
    ticks = 10 * np.max(times)
    assert len(said) == 1 and f"call, {ticks:,.0f} ticks ({ticks / TSC_HZ * 1e9:,.0f} ns)," \
        in said[0]
    assert not [w for w in build_report(fns, "f", fit, counts, cols, times, wres,
                                        TSC_HZ).function("f").warnings
                if "is above the bound" in w.message]


def test_a_margin_larger_than_the_path_is_said(built):
    """liblzma's encoder on raw inputs: the margin was 14× the worst path's time and the
    bound 351× the slowest input, with nothing to say where it came from."""
    from dataclasses import replace

    fns, counts, cols, times, fit, wres, _ = built
    big = replace(wres, margin_ticks=3.0 * wres.bound_ticks)
    rep = build_report(fns, "f", fit, counts, cols, times, big, TSC_HZ)
    said = [w.message for w in rep.function("f").warnings if "95% margin" in w.message]
    assert len(said) == 1 and "is 3.0× the worst path's predicted time" in said[0]
    rep = build_report(fns, "f", fit, counts, cols, times, wres, TSC_HZ)
    assert not [w for w in rep.function("f").warnings if "95% margin" in w.message]


def test_fit_is_not_called_good_when_many_inputs_were_set_aside():
    """The held-out figures are of the inputs the fit kept: with a fifth set aside as
    outliers, or the residual up 43 % when costs are held ≥ 0, the word is at best "fair"
    (libgmp's __gmpn_hamdist was "good" beside both)."""
    from types import SimpleNamespace

    from wcetfit.report.summary import fit_in_words

    def fr(rows=None, warnings=()):
        return SimpleNamespace(validation={"median_rel_error": 0.004, "p95_rel_error": 0.02},
                               fit_extra={"rows": rows or {}, "fit_warnings": list(warnings)})

    assert fit_in_words(fr()).startswith("good")
    assert fit_in_words(fr({"rejected": 21, "total": 106})).startswith("fair")
    assert fit_in_words(fr({"rejected": 2, "total": 106})).startswith("good")
    held = {"code": "held_to_physical",
            "message": "… which raises the weighted residual sum of squares by 42.9 %"}
    text = fit_in_words(fr(warnings=[held]))
    assert text.startswith("fair") and "rose 42.9 %" in text
    small = dict(held, message="… sum of squares by 3.1 %")
    assert fit_in_words(fr(warnings=[small])).startswith("good")


def test_a_group_across_functions_has_one_share_wherever_shown():
    """A whole-call group spans the root and a callee: each function's section showed its
    own part as the group's share (libm's fmod: group 0 at ≈0.0 % in one section, ≈89.7 %
    in another).  The share is of all the group's blocks, the same in both sections."""
    fns, counts, cols, times = _measured()
    fit = fake_fit(fns)
    f5, g0 = fns["f"].blocks[5].address, fns["g"].blocks[0].address
    across = {"id": 3, "blocks": [hex(f5), hex(g0)], "kind": "observed", "combinations": []}
    for fd in fit["functions"]:
        fd["groups"] = list(fd["groups"]) + [across]
        for b in fd["blocks"]:
            if int(b["address"], 16) in (f5, g0):
                b.update(estimable=False, cost_ticks=None, ci95_ticks=None, group=3)
    _, report = _analysed(fns, counts, cols, times, fit)
    shares = [next(g.share for g in report.function(n).groups if g.id == 3) for n in ("f", "g")]
    sol = np.array([TRUE[i] for i in range(len(cols))])
    js = [cols.index(("f", f5)), cols.index(("g", g0))]
    predicted = np.asarray(report.predicted_ticks)
    expected = float((counts[:, js] * sol[js]).sum(axis=1).mean() / predicted.mean())
    assert shares[0] == shares[1] == pytest.approx(expected, rel=1e-9)


def test_bracket_width_splits_bound_over_slowest_and_names_an_over_predicted_path(built):
    """bound ÷ slowest input is the product of five parts the report prints, and a model
    that over-predicts the input nearest the worst path is said (isort: its reverse-sorted
    inputs run the path's counts exactly, predicted 36,262 ticks, measured 26,062)."""
    from wcetfit.report import OVER_PREDICTED
    from wcetfit.wcet.bracket import bracket_width

    assert bracket_width(100.0, 80.0, None, 0.0, 50.0, 60.0) is None
    fns, counts, cols, times, fit, wres, report = built
    w = report.function("f").wcet
    width = w.width()
    assert width.total == pytest.approx(w.ipet_ticks / w.max_observed_ticks)
    assert width.model == pytest.approx(1.0, abs=0.1)     # the model fits these inputs
    assert not any("over-predicts" in x.message for x in report.function("f").warnings)
    # the input predicted slowest measured at 60 % of what the fit predicts for it
    slow = int(np.argmax(counts @ TRUE))
    times = times.copy()
    times[slow] = 0.6 * times[slow]
    _, report = _analysed(fns, counts, cols, times, fit)
    w = report.function("f").wcet
    width = w.width()
    assert width.model == pytest.approx(w.max_predicted_ticks / np.median(times[slow]))
    assert width.model > OVER_PREDICTED
    assert width.total == pytest.approx(w.ipet_ticks / w.max_observed_ticks)
    found = [x.message for x in report.function("f").warnings if "over-predicts" in x.message]
    assert len(found) == 1
    assert f"input {slow}, the input predicted slowest" in found[0]
    assert f"{width.model - 1:.0%} above its measured" in found[0] and " ns)" in found[0]
    text = " ".join(summary.to_text(report).split())
    assert f"Bound / slowest {width.total:.2f} = the worst path beyond every input ×" in text
    assert (f"the model's prediction over the measured time ×{width.model:.2f} at input "
            f"{slow} (predicted slowest) · its measured time over the slowest input's") in text
    # not on the screen where neither the path nor the model widens the bracket
    assert "beyond every input ×" not in summary.to_text(built[-1])
    doc = to_json(report)["functions"][0]["wcet"]
    assert doc["bracket_width"]["model"] == pytest.approx(width.model)
    assert doc["max_predicted_measured_ticks"] == pytest.approx(np.median(times[slow]))


def test_callee_without_a_bound_of_its_own_is_null_in_json_not_zero(built):
    """A callee whose blocks the inputs did not separate from its callers' sums to 0 ticks
    on its own; the JSON gave ``"ipet_ticks": 0.0``, which a script reads as a WCET of 0
    (libbz2's BZ2_bzCompressInit under BZ2_bzBuffToBuffCompress)."""
    from dataclasses import replace

    *_, report = built
    g = report.function("g")
    assert not g.no_bound_of_its_own and to_json(report)["functions"][1]["wcet"]["ipet_ticks"]
    merged = replace(g, wcet=replace(g.wcet, ipet_ticks=0.0))
    assert merged.no_bound_of_its_own
    doc = to_json(replace(report, functions=(report.functions[0], merged)))
    w = doc["functions"][1]["wcet"]
    assert w["ipet_ticks"] is None and w["ipet_ns"] is None and w["no_bound_of_its_own"]
    assert doc["functions"][0]["wcet"]["no_bound_of_its_own"] is False
    text = to_text(replace(report, functions=(report.functions[0], merged)), width=200)
    assert "no bound of its own" in text
    # every block of the callee in groups with its callers': whatever its sum, no bound
    # of its own (liblzma's match finders, 0 ticks for 4,092 activations; nettle's SHA-256
    # compression at 20.1 ticks)
    from wcetfit.report import GroupRow

    shared = replace(g, blocks=tuple(replace(b, estimable=False) for b in g.blocks),
                     groups=(GroupRow(1, tuple(b.address for b in g.blocks)
                                      + (report.functions[0].blocks[0].address,),
                                      "structural", (), None, None, False),))
    assert shared.wcet.ipet_ticks >= 1 and not shared.has_own_costs
    assert shared.no_bound_of_its_own


def test_a_callee_bound_above_the_roots_is_not_shown_as_one(built):
    """liblzma's lzma_block_buffer_encode: "IPET bound 387,796,479,366 ticks" (149 s) under
    a root bound of 8,218,150 ticks.  One activation runs inside a call of the root, whose
    bound caps it: the callee's figure is how far its context-free loop bounds multiply."""
    from dataclasses import replace

    *_, report = built
    root, g = report.functions[0], report.function("g")
    assert not report.above_root_bound(g) and not report.above_root_bound(root)
    big = replace(g, wcet=replace(g.wcet, ipet_ticks=root.wcet.ipet_ticks * 1000))
    two = replace(report, functions=(root, big))
    assert two.above_root_bound(big)
    doc = to_json(two)
    assert doc["functions"][1]["wcet"]["above_root_bound"] is True
    assert doc["functions"][0]["wcet"]["above_root_bound"] is False
    from wcetfit.report import _format as F

    text = " ".join(to_text(two, width=250, full=True).split())
    assert "above the root's bound: its own worst path over every context, " in text
    assert f"whose bound of {F.num(root.wcet.ipet_ticks)} ticks caps it" in text


def test_path_below_slowest_input_names_what_covers_it(built):
    """The worst path's prediction below a measured input's median is covered by the
    dispersion: by its misfit factor, or by the cover of the slowest own call where that
    set the factor (libgmp's popcount under a [loops] fact most inputs broke: ×84.65 from
    the cover, and the warning said "the misfit factor (×1.07)")."""
    from dataclasses import replace

    fns, counts, cols, times, fit, wres, _ = built
    slow = times.copy()
    slow[0] = 2.0 * wres.bound_ticks             # one input measured past the worst path
    for factors, says in (({"misfit": 2.5, "call": 1.1, "machine_speed": 1.0},
                           "the dispersion's misfit factor (×2.50)"),
                          ({"misfit": 1.07, "call": 1.1, "machine_speed": 1.0, "cover": 3.0},
                           "cover of the slowest call that was the function's own time "
                           "(×3.00)"),
                          ({"misfit": 2.5, "call": 1.1, "machine_speed": 1.0, "joint": 2.2},
                           "factor for single calls as timed, misfit included (×2.20)")):
        w = replace(wres, dispersion=2.0, dispersion_factors=factors)
        report = build_report(fns, "f", fit, counts, cols, slow, w, TSC_HZ)
        found = [x.message for x in report.function("f").warnings
                 if "is below the slowest input's median" in x.message]
        assert len(found) == 1 and found[0].endswith(says), found
        assert "inputs' medians" not in found[0] and "that input spent" in found[0]
    # several inputs past the path: said how many, not only the slowest (libgmp's add_n:
    # most of the n = 512 inputs ran above the point)
    slow[1:3] = 1.5 * wres.bound_ticks
    w = replace(wres, dispersion=2.0, dispersion_factors={"misfit": 2.5})
    report = build_report(fns, "f", fit, counts, cols, slow, w, TSC_HZ)
    found = [x.message for x in report.function("f").warnings
             if "is below the slowest input's median" in x.message]
    assert len(found) == 1 and f"more than 5 % below 3 of the {len(slow)} inputs' medians" \
        in found[0], found
    assert "those inputs spent" in found[0]
    # inputs within the few percent a median moves by are not counted (nettle's base64
    # encoder: "below 23 of the 220 inputs' medians", most of them the worst path's own
    # inputs within 2 % of its point)
    path = wres.bound_ticks + (wres.margin_ticks or 0.0)
    slow[3:10] = 1.02 * path
    report = build_report(fns, "f", fit, counts, cols, slow, w, TSC_HZ)
    found = [x.message for x in report.function("f").warnings
             if "is below the slowest input's median" in x.message]
    assert f"below 3 of the {len(slow)} inputs' medians" in found[0], found


def test_where_the_time_goes_says_whose_worst_path_a_callee_count_is(built):
    """A callee block's count is of the callee's own worst path, which the root's bound may
    undercut per call site (libbz2: "×4,096 on the worst path" for a block the root's path
    ran at most 27 times): the line says whose path it is."""
    from dataclasses import replace

    *_, report = built
    g = report.function("g")
    row = replace(g.blocks[0], estimable=True, share=0.5, cost_ticks=7.0, wcet_count=9,
                  root_path_count=None)
    g = replace(g, blocks=(row,) + tuple(g.blocks[1:]))
    text = summary.to_text(replace(report, functions=(report.functions[0], g)), width=200)
    line = next(x for x in text.splitlines() if "g+0x0:" in x)
    assert line.endswith("×9 on g's own worst path"), line
    assert "on the worst path" in next(x for x in text.splitlines() if "  f+0x10:" in x)
    # where the root's path is known, its count: what the bound charges (LZ4's
    # compressor: "×951 on its own worst path", 15× the root's bound)
    row = replace(row, root_path_count=2.0)
    g = replace(g, blocks=(row,) + tuple(g.blocks[1:]))
    text = summary.to_text(replace(report, functions=(report.functions[0], g)), width=200)
    line = next(x for x in text.splitlines() if "g+0x0:" in x)
    assert line.endswith("×2 on the worst path"), line
    # and the report fills it in from the bound's own path
    assert report.function("g").blocks[0].root_path_count is not None


def test_full_lists_a_group_of_several_functions_once(built):
    """A group of a whole-call fit spans the root and its callees; --full listed it under
    every function holding a block of it (libcrypto's SHA512: 354 group tables, 59,766
    lines).  It is listed under the first, and a line under the others says where."""
    from dataclasses import replace

    *_, report = built
    f, g = report.functions
    shared = replace(f.groups[0], blocks=tuple(f.groups[0].blocks) + (g.blocks[0].address,))
    f2 = replace(f, groups=(shared,) + tuple(f.groups[1:]))
    g2 = replace(g, groups=(shared,) + tuple(g.groups))
    text = to_text(replace(report, functions=(f2, g2)), width=300)
    combination = shared.combinations[0]
    assert text.count(combination) == 1
    assert f"1 of g's blocks among its {len(shared.blocks)}: listed under f" in text
    # one function alone (--function g) lists it in full
    alone = io_text(replace(report, functions=(f2, g2)), "g")
    assert combination in alone


def io_text(report, function):
    import io

    from rich.console import Console

    from wcetfit.report.text import render
    buf = io.StringIO()
    render(report, Console(file=buf, width=300), function=function)
    return buf.getvalue()


def test_heldout_error_advice_of_a_single_path_is_not_to_split(built):
    """Where every input ran the same counts, the held-out error is the calls' own spread:
    "split blocks or add inputs" was the advice to libz's zlibCompileFlags (one block)."""
    fns, counts, cols, times, fit, wres, _ = built
    f = json.loads(json.dumps(fit))
    f["validation"].update({"median_rel_error": 0.05, "p95_rel_error": 0.2})

    def advice(c):
        report = build_report(fns, "f", f, c, cols, times, wres, TSC_HZ)
        return [w.advice for w in report.function("f").warnings
                if "held-out" in w.message and "goal" in w.message]

    varied = advice(counts)
    # (add inputs; split is not offered as the remedy of the bound's fit, which its rounds
    # do not change: libm's pow was split in 9 rounds and its bound did not move)
    assert len(varied) == 2 and "add inputs that vary it" in varied[0]
    assert "not in this bound's" in varied[0]
    same = advice(np.repeat(counts[:1], len(counts), axis=0))
    assert len(same) == 2 and all("the calls' own spread" in a for a in same)


def test_many_long_warnings_stay_within_the_screen(built):
    """Twelve warnings of four lines each ran the summary past one screen (adpcm: 62
    lines); those that do not fit in the warnings' lines are one --function away."""
    from dataclasses import replace

    from wcetfit.report import Finding

    *_, report = built
    f = report.functions[0]
    long = tuple(Finding(f"warning {i}: " + "a long explanation " * 20, "a remedy " * 12)
                 for i in range(12))
    text = summary.to_text(replace(report, functions=(replace(f, warnings=long),)
                                   + tuple(report.functions[1:])))
    lines = text.splitlines()
    assert len(lines) <= 60, len(lines)
    shown = sum(1 for ln in lines if "⚠ warning " in ln)
    assert 1 <= shown < 12
    assert any("more: wcetfit report --function f" in ln for ln in lines)


def test_a_block_beyond_every_input_that_no_input_ran_names_no_input(built):
    """"1.0× per call on the worst path, at most 0.0× in an input (input 0)" named an input
    for a block no input ran ([wcet] unreached = "require")."""
    from dataclasses import replace

    from wcetfit.wcet.bracket import Beyond

    *_, report = built
    f = report.functions[0]
    beyond = (Beyond("f+0x80", "block", 1, 0, 0), Beyond("f+0x10", "loop", 1200, 40, 7))
    text = summary.to_text(replace(report, functions=(replace(f, wcet=replace(
        f.wcet, beyond=beyond)),) + tuple(report.functions[1:])), width=200)
    assert "- block f+0x80: 1× per call on the worst path, no input ran it" in text
    assert "- loop f+0x10: 1,200× per call on the worst path, at most 40× in an input " \
           "(input 7)" in text


def test_a_bound_that_measured_inputs_break_says_so_under_the_headline(built):
    """libgmp's popcount with [loops] at 10 iterations: 467 of 501 inputs broke the fact,
    and the headline read as a bound for every call; the warning was the only word."""
    from dataclasses import replace

    from wcetfit.wcet.result import BrokenInputs

    *_, report = built
    f = report.functions[0]

    def headline(broken):
        return " ".join(summary.to_text(replace(report, functions=(replace(
            f, wcet=replace(f.wcet, broken_inputs=broken)),)
            + tuple(report.functions[1:]))).split())

    assert "Only for calls that keep the bound's constraints: 467 of the 501 measured " \
           "inputs break them" in headline(BrokenInputs(467, 501, 501))
    # not every input checked within the time allowed
    assert "Only for calls that keep the bound's constraints: at least 90 of the 120 " \
           "measured inputs checked (of 501) break them" in headline(BrokenInputs(90, 120, 501))
    assert "Only for calls" not in summary.to_text(report)
    # and in the JSON, as numbers
    doc = to_json(replace(report, functions=(replace(f, wcet=replace(
        f.wcet, broken_inputs=BrokenInputs(467, 501, 501))),) + tuple(report.functions[1:])))
    assert doc["functions"][0]["wcet"]["broken_inputs"] == {"broken": 467, "checked": 501,
                                                           "total": 501}
    assert to_json(report)["functions"][0]["wcet"]["broken_inputs"] is None


def test_a_stack_protector_failure_is_not_an_input_to_add(built):
    """libpng's png_sig_cmp: its block calling __stack_chk_fail was listed among the blocks
    never executed with "add inputs that reach them (error paths, rare branches)", which
    asks for a corrupted stack.  It is a failure exit, said apart, with nothing to add."""
    from dataclasses import replace as dc_replace

    from wcetfit.model import CALL_IMPORTED, CallSite

    fns, counts, cols, times, fit, wres, _ = built
    f = fns["f"]
    dead = f.blocks[8].address                       # the one block no input ran (abort)
    guard = CallSite(dead, dead + 4, CALL_IMPORTED, None, "__stack_chk_fail@GLIBC_2.4")
    fns2 = dict(fns, f=dc_replace(f, calls=tuple(c for c in f.calls if c.block != dead)
                                  + (guard,)))
    rep = build_report(fns2, "f", fit, counts, cols, times, wres, TSC_HZ)
    msgs = [w for w in rep.function("f").warnings]
    exits = [w for w in msgs if "failure exits" in w.message]
    assert len(exits) == 1 and "calls __stack_chk_fail" in exits[0].message
    assert not exits[0].advice
    assert not any("never executed by the inputs" in w.message for w in msgs)
    # calling abort, the block is one to reach (an argument can lead there)
    plain = [w for w in build_report(fns, "f", fit, counts, cols, times, wres,
                                     TSC_HZ).function("f").warnings
             if "never executed by the inputs" in w.message]
    assert plain and "add inputs that reach them" in plain[0].advice


def test_the_summary_of_one_root_stays_one_screen_whatever_its_warnings_say(built):
    """The warnings get the lines the rest of the summary left of one screen: adpcm's
    default report ran to 61 lines when the bound's own lines grew by two."""
    from dataclasses import replace

    from wcetfit.report import Finding
    from wcetfit.report.summary import SCREEN_LINES

    report = built[-1]
    root = report.functions[0]
    long = "the measured calls say something at length " * 6
    warns = tuple(Finding(f"{i}: {long}", f"do this and that, {long}") for i in range(12))
    crowded = replace(report, functions=(replace(root, warnings=warns),)
                      + tuple(report.functions[1:]))
    lines = summary.to_text(crowded).splitlines()
    assert len(lines) <= SCREEN_LINES, len(lines)
    assert any(ln.strip().startswith("… ") and "more: wcetfit report --function" in ln
               for ln in lines)


def test_full_report_names_the_callees_no_input_ran_in_one_line(monkeypatch):
    """libc's strdup reaches 300 functions through malloc, most of which no input runs:
    their empty tables made `--full` 37,531 lines.  They are named in one line, and
    `--function NAME` still shows any one of them."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from wcetfit.report import text

    def fr(name, root, never):
        return SimpleNamespace(name=name, is_root=root, blocks=(1, 2), never_executed=never)

    report = SimpleNamespace(tsc_hz=2.6e9, root="f", n_inputs=3, n_repeats=2, warnings=(),
                             functions=[fr("f", True, (1, 2)), fr("g", False, (1,)),
                                        fr("h", False, (1, 2)), fr("k", False, (1, 2))])
    seen = []
    monkeypatch.setattr(text, "_function",
                        lambda r, f, mb, shown=None: seen.append(f.name) or [])
    buf = io.StringIO()
    text.render(report, Console(file=buf, width=200))
    assert seen == ["f", "g"]          # the root whatever ran, a callee that ran in part
    assert "2 callee(s) no input ran, their tables left out (--function NAME shows one): " \
           "h, k" in buf.getvalue()
    seen.clear()
    text.render(report, Console(file=io.StringIO(), width=200), function="h")
    assert seen == ["h"]


def test_a_bound_from_fewer_inputs_than_failed_says_so_in_its_line(built):
    """libc's qsort as init wrote it: 77 of 94 inputs crashed, and the bound of the 3 that
    ran (none sorting anything) was headlined like any other."""
    from dataclasses import replace

    report = built[-1]
    plain = summary.to_text(report, width=200)
    assert "— from the" not in plain
    worse = replace(report, failed_inputs=report.n_inputs + 5)
    text = summary.to_text(worse, width=200)
    assert re.search(rf"WCET bound: [\d,.]+ ticks \([\d,.]+ ns\) — from the "
                     rf"{report.n_inputs:,} inputs that ran; {report.n_inputs + 5:,} failed",
                     text), text[:600]


def test_an_uncharged_fact_gets_the_remedy_of_its_cause():
    """libbz2's compressor: its fallback sort, iterated up to 2,048 times of the fact's
    2,600, costs nothing in a 616-block group: more inputs that iterate it were the advice.
    lzma_crc32's loop, held by the inputs' relations, was told the same."""
    from types import SimpleNamespace

    from wcetfit.report import _uncharged_fact
    from wcetfit.wcet.result import LoopBound, LoopOutcome

    fn = SimpleNamespace(loops=(SimpleNamespace(header=0x7930, body=(0x7930, 0x7937)),))
    lo = LoopOutcome(0x7930, "f+0x50", LoopBound(per_entry=2600, source="fact"), 1, 0, False)
    grouped = [SimpleNamespace(address=0x7930, solution_ticks=0.0, count_max=2048),
               SimpleNamespace(address=0x7937, solution_ticks=0.0, count_max=2048)]
    f = _uncharged_fact("f", fn, lo, grouped)
    assert "the inputs do iterate it (its header ran up to 2,048 times" in f.advice
    assert "blocks it shares a group with" in f.advice and "from few to many" not in f.advice
    held = [SimpleNamespace(address=0x7930, solution_ticks=8.2, count_max=1024),
            SimpleNamespace(address=0x7937, solution_ticks=0.0, count_max=1024)]
    lo = LoopOutcome(0x7930, "f+0x50", LoopBound(per_entry=2047, source="fact"), 1, 1023,
                     False)
    f = _uncharged_fact("f", fn, lo, held)
    assert "other constraints keep it there" in f.message
    assert f.advice.startswith("if calls can iterate it more than the inputs did, "
                               "[wcet] observed_paths = false charges the fact")


def test_a_loop_bound_from_loops_the_worst_path_does_not_take_is_said():
    """libtasn1's asn1_get_length_der: ``"+0x50" = 126`` (DER's long form) was listed as
    what the bound rests on, while the worst path took the loop 0 times (its blocks'
    costs held at 0 ticks) and the bound, 384 ticks, was below a 126-iteration call of
    910.  The report says the fact is not charged, and why."""
    from types import SimpleNamespace

    from wcetfit.report import _uncharged_fact
    from wcetfit.wcet.result import LoopBound, LoopOutcome

    fn = SimpleNamespace(loops=(SimpleNamespace(header=0x7930, body=(0x7930, 0x7937)),))
    lo = LoopOutcome(0x7930, "f+0x50", LoopBound(per_entry=126, source="fact"), 1, 0, False)
    rows = [SimpleNamespace(address=0x7930, solution_ticks=0.0, count_max=4),
            SimpleNamespace(address=0x7937, solution_ticks=0.0, count_max=4),
            SimpleNamespace(address=0x8000, solution_ticks=30.0, count_max=1)]
    f = _uncharged_fact("f", fn, lo, rows)
    assert "loop f+0x50's bound from [loops]" in f.message and "is not charged" in f.message
    assert "takes 0 iteration(s) in 1 entry, where it allows 126" in f.message
    assert "its iterations cost nothing in the fit (2 block(s), 0.0 ticks" in f.message
    assert "its header ran at most 4 times" in f.advice
    # iterations that cost something: other constraints hold the path
    rows[0] = SimpleNamespace(address=0x7930, solution_ticks=12.0, count_max=4)
    assert "observed_paths = false" in _uncharged_fact("f", fn, lo, rows).advice


def test_a_bound_that_is_mostly_its_margin_says_so_under_the_headline(built):
    """libpcre2's pcre2_match: a 95% margin 21.7× the worst path's point made the bound 40×
    the slowest input, headlined like any other; only a warning further down said why."""
    from dataclasses import replace

    *_, report = built
    f = report.functions[0]

    def headline(margin):
        return " ".join(summary.to_text(replace(report, functions=(replace(
            f, wcet=replace(f.wcet, margin_ticks=margin)),)
            + tuple(report.functions[1:]))).split())

    point = f.wcet.point_ticks
    assert "Mostly uncertainty: the 95% margin is 21.7× the worst path's predicted time" \
        in headline(21.7 * point)
    assert "Mostly uncertainty" not in headline(0.5 * point)


def test_calls_taken_for_interrupts_beyond_the_rate_are_what_the_bound_rests_on(built):
    """libpcre2's pcre2_match: 136 of 2,200 calls were taken for interrupts where
    interrupts explain about 12, said only in a warning of the fit, while the bound left
    them out.  The report lists it among what the bound rests on, and the headline says
    when some of them are above the bound."""
    from dataclasses import replace

    *_, report = built
    f = report.functions[0]

    def text(**aside):
        return " ".join(summary.to_text(replace(report, functions=(replace(
            f, wcet=replace(f.wcet, set_aside=aside)),)
            + tuple(report.functions[1:]))).split())

    base = dict(calls=2200, interrupted=136, preempted=0, expected=11.7, rate_hz=1000.0,
                slowest_ticks=413374.0, slowest_input=104)
    below = text(**base, beyond_rate=True, above_bound=0)
    assert "136 of 2,200 timed calls (6.2%) taken for interrupts and left out" in below
    assert "Not above every call measured" not in below
    above = text(**base, beyond_rate=True, above_bound=2)
    assert "Not above every call measured: 2 of the calls taken for interrupts" in above
    assert "2 of them above the bound" in above
    within = text(**dict(base, interrupted=12), beyond_rate=False, above_bound=2)
    assert "taken for interrupts" not in within


def test_a_large_groups_cells_are_cut_to_a_screen_and_keep_their_value():
    """libpcre2's pcre2_match (--function): a group of 276 blocks whose combination had as
    many terms, and 262 groups of one unexecuted block each, made the groups table 1,900
    of 2,065 lines.  The cell names the first blocks and terms and how many more, the
    combination keeps its value, and the unexecuted blocks are one row."""
    from types import SimpleNamespace

    from wcetfit.report import _format as F
    from wcetfit.report.text import _groups

    names = [f"f+{i:#x}" for i in range(100)]
    assert F.first_names(names[:24]) == ", ".join(names[:24])
    cut = F.first_names(names)
    assert cut.endswith("f+0x17 … and 76 more (--json lists them)"), cut
    terms = " + ".join(f"2.5·0x{i:05x}" for i in range(200))
    text = "ε + " + terms + " = 76829.8 ± 176548 ticks (29594.3 ± 68005 ns)"
    short = F.first_terms(text)
    assert len(short) < 700 and short.endswith(
        "more terms) = 76829.8 ± 176548 ticks (29594.3 ± 68005 ns)"), short
    shown = short.count("·")
    assert f"({200 - shown:,} more terms)" in short, short
    assert F.first_terms("0x1 + 0x2 = 3 ticks") == "0x1 + 0x2 = 3 ticks"

    def group(gid, kind, blocks, combinations=()):
        return SimpleNamespace(id=gid, kind=kind, blocks=tuple(blocks),
                               combinations=tuple(combinations), share=0.0,
                               share_estimable=False, advice="add inputs that reach it")

    groups = (group(0, "overhead", range(0x100, 0x100 + 30), [text]),
              *(group(10 + i, "unexecuted", [0x900 + i]) for i in range(40)))
    fr = SimpleNamespace(name="f", groups=groups, blocks=(),
                         key=lambda a: f"f+{a:#x}")
    table = _groups(fr, {})
    assert table.row_count == 2
    cells = [str(c) for col in table.columns for c in col._cells]
    assert "40 groups" in cells and "unexecuted" in cells
    assert any("and 16 more (--json lists them)" in c for c in cells), cells


def test_a_fit_too_large_to_hold_physical_says_so_on_its_fit_line(built):
    """zstd's compressor: 718 unknowns, more than the physical fit is run for, gave block
    costs, path totals and callee bounds below zero, and the one-screen fit line said
    nothing of it (only the 100th-odd warning)."""
    from dataclasses import replace

    *_, report = built
    f = report.functions[0]
    extra = dict(f.fit_extra)
    extra["fit_warnings"] = list(extra.get("fit_warnings") or ()) + [{
        "code": "unconstrained_for_size",
        "message": "718 unknowns, more than the 600 the physically held fit and its "
                   "bootstrap are run for: the costs are unconstrained least squares, 35 "
                   "block cost(s) below zero (no machine has them; the sums the inputs "
                   "determine are what the bound uses)"}]
    line = summary.fit_in_words(replace(f, fit_extra=extra), report.tsc_hz)
    assert ("costs not held to physical values: unconstrained least squares, for 718 "
            "unknowns (the physical fit runs for up to 600), 35 block cost(s) below zero"
            in line), line
    assert "not held to physical" not in summary.fit_in_words(f, report.tsc_hz)


def test_check_repeats_what_the_bound_covers_that_fresh_inputs_cannot_test(built):
    """libuuid's uuid_parse on init's printable text: every input rejected at the length
    test, the bound "only for the one path every input ran", and `check` said "covered"
    with nothing else, while valid UUIDs took longer than the bound."""
    from dataclasses import replace

    from wcetfit.cli.check import bound_premises

    *_, report = built
    f = report.functions[0]
    one = replace(report, functions=(replace(f, inputs_one_path=True),)
                  + tuple(report.functions[1:]))
    [text] = bound_premises(one)
    ran = sum(1 for b in f.blocks if b.executed)
    assert text.startswith(f"the bound is of the one path every training input ran ({ran} of "
                           f"{len(f.blocks)} blocks of {f.name})"), text
    never = sum(1 for g in report.functions for b in g.blocks if not b.executed)
    said = bound_premises(report)
    assert bool(said) == bool(never)
    if never:
        assert said[0].startswith(f"{never} of ") and "wcetfit reach" in said[0]


def test_the_code_no_input_ran_is_among_what_the_bound_rests_on(built):
    """zstd's LZ4 compressor ran 76 of 271 blocks, and the one screen said nothing of the
    other 195, left out of the worst path."""
    from dataclasses import replace

    *_, report = built
    f = report.functions[0]
    blocks = (replace(f.blocks[0], count_max=0),) + tuple(f.blocks[1:])
    never = sum(1 for g in report.functions[1:] for b in g.blocks if not b.executed) + 1 \
        + sum(1 for b in f.blocks[1:] if not b.executed)
    total = sum(len(g.blocks) for g in report.functions)
    r = replace(report, functions=(replace(f, blocks=blocks),) + tuple(report.functions[1:]))
    text = " ".join(summary.to_text(r).split())
    assert f"the code the inputs ran: {total - never:,} of {total:,} blocks ({never:,} no " \
           f"input ran are left out of the worst path" in text, text
    required = replace(r, functions=(replace(r.functions[0], wcet=replace(
        f.wcet, unreached_policy="require")),) + tuple(r.functions[1:]))
    assert "the code the inputs ran: " not in " ".join(summary.to_text(required).split())


def test_a_declared_speed_where_none_was_followed_is_said_as_a_margin():
    """libxxhash's XXH64, calls too short to follow the machine's speed, [wcet]
    machine_speed = 1.5: "the timing run's slowest period: ×1.00" read as a steady
    machine, where nothing was measured."""
    from types import SimpleNamespace

    from wcetfit.report.summary import _speed_assumed

    def fr(followed):
        return SimpleNamespace(
            wcet=SimpleNamespace(machine_speed_measured=1.0, machine_speed_declared=1.5,
                                 ipet_ticks=3492.0),
            fit_extra={"machine_speed": {"followed": followed}})
    text = _speed_assumed(fr(False))
    assert text.startswith("the machine no slower than ×1.50 its speed during the timing run")
    assert "not followed" in text and "×1.00" not in text
    assert "slowest period: ×1.00" in _speed_assumed(fr(True))
    assert _speed_assumed(fr(False), short=True) == "machine ≤ ×1.50 as timed (declared)"


def test_an_assertion_failure_is_a_failure_exit_not_an_input_to_add():
    """nettle's base64 encoder: two blocks that call __assert_fail were "blocks an input
    reaching them can take longer on: add such inputs", and `reach` spent its budget on
    them."""
    from types import SimpleNamespace

    from wcetfit.model import failure_exits

    fn = SimpleNamespace(calls=(
        SimpleNamespace(block=0x10, target_name="__assert_fail@GLIBC_2.2.5"),
        SimpleNamespace(block=0x20, target_name="__stack_chk_fail"),
        SimpleNamespace(block=0x30, target_name="memcpy")))
    assert failure_exits(fn, [0x10, 0x20, 0x30, 0x40]) == {0x10: "__assert_fail",
                                                           0x20: "__stack_chk_fail"}
    assert failure_exits(fn, [0x30]) == {}


def test_the_particular_solution_premise_beside_the_one_path_is_no_contradiction(built):
    """libuuid's uuid_unparse: "Only for the one path every input ran" and "the fit's
    particular solution where the inputs never ran the worst path's combination of
    counts" read as a contradiction; the worst path is another one the CFG allows."""
    from dataclasses import replace

    *_, report = built
    f = report.functions[0]
    one = replace(report, functions=(replace(f, inputs_one_path=True, wcet=replace(
        f.wcet, path_residual=0.5)),) + tuple(report.functions[1:]))
    text = " ".join(summary.to_text(one).split())
    assert ("the fit's particular solution: the worst path takes a combination of counts "
            "no input ran (not the one path they all ran: the control flow allows others)"
            in text), text


def test_a_cost_interval_reaching_below_zero_is_shown_from_zero():
    """libm's tgamma: "161.9 ± 216.4 ticks per execution" under costs held to physical
    values.  No block takes less than no time; the interval cut at zero keeps its
    coverage.  A cost below zero (an unconstrained fit's) keeps its ± interval."""
    from types import SimpleNamespace as NS

    from wcetfit.report._format import cost_pm

    def row(cost, half):
        return NS(cost_ticks=cost, ci95_ticks=(cost - half, cost + half))

    assert cost_pm(row(161.9, 216.4)) == "161.9 (0 to 378.3)"
    assert cost_pm(row(0.0, 55.9)) == "0.0 (0 to 55.9)"
    assert cost_pm(row(161.9, 16.4)) == "161.9 ± 16.4"
    assert cost_pm(row(-9.2, 11.7)) == "-9.2 ± 11.7"
    assert cost_pm(NS(cost_ticks=None, ci95_ticks=None)) == "—"


def test_a_worst_path_far_beyond_every_input_is_said_in_the_headline(built):
    """libgmp's mpn_sqr: a bound of 138,435,677,310 ticks (53 s) for calls of 0.4 ms, the
    worst path ×98,418 the slowest prediction of any input, headlined like any other."""
    from dataclasses import replace

    *_, report = built
    root = report.functions[0]
    w = root.wcet
    assert w.width() is not None and w.width().beyond < summary.BEYOND_INPUTS
    plain = " ".join(summary.to_text(report, width=200).split())
    assert "Mostly paths no input came near" not in plain
    far = replace(w, point_ticks=w.max_predicted_ticks * 500,
                  ipet_ticks=w.max_predicted_ticks * 600, path_residual=1.0)
    text = " ".join(summary.to_text(replace(report, functions=(replace(root, wcet=far),)
                                            + tuple(report.functions[1:])), width=200).split())
    assert "Mostly paths no input came near: the worst path's predicted time is 500× the " \
           "slowest any input was predicted" in text
    assert "its cost is the fit's particular solution, not a measurement" in text


def test_rests_on_lists_the_loops_carrying_most_of_the_worst_path_first():
    """libcrypto's SHA256: the compression loop, ≤ 63 per call as observed and 62 % of the
    time, sat among "7 more loop bounds" behind OPENSSL_cleanse's and OPENSSL_strnlen's.
    Facts first, then the loops by their blocks' time on the root's worst path."""
    from types import SimpleNamespace as NS

    from wcetfit.report.summary import MAX_LOOPS, _loop_weights, _rests_on
    from wcetfit.wcet.result import SOURCE_FACT, SOURCE_OBSERVED, LoopBound

    def loop(header, name, source=SOURCE_OBSERVED):
        return NS(header=header, name=name, bound=LoopBound(per_entry=5, total=5,
                                                            source=source))

    def block(header, count, cost):
        return NS(loop_header=header, wcet_count=count, root_path_count=None,
                  cost_ticks=cost, solution_ticks=None, executed=True)

    small = [loop(0x100 + k, f"cleanse+{k:#x}") for k in range(MAX_LOOPS + 1)]
    heavy = loop(0x900, "compress+0x40")
    fact = loop(0x800, "f+0x800", SOURCE_FACT)
    wcet = NS(loops=small + [heavy, fact], envelopes=(), relations=(), ipet_ticks=1.0,
              recursion_depth=None, path_residual=None)
    root = NS(name="f", is_root=True, wcet=wcet, warnings=(), no_bound_of_its_own=False,
              blocks=[block(0x900, 63, 75.0)] + [block(0x100 + k, 2, 3.0)
                                                 for k in range(MAX_LOOPS + 1)])
    report = NS(functions=[root], warnings=(), tsc_hz=2.6e9,
                above_root_bound=lambda c: False)
    assert _loop_weights(report)[0x900] == 63 * 75.0
    lines = _rests_on(report, root)
    assert lines[0].startswith("loop f+0x800") and lines[1].startswith("loop compress+0x40")


def test_a_heldout_error_that_prints_as_the_goal_is_not_above_it(built):
    """libcrypto's CRYPTO_memcmp: "held-out median relative error 1.00% is above the 1%
    goal" (1.004 %): the comparison is of the figure as printed."""
    fns, counts, cols, times, fit, wres, _ = built
    f = json.loads(json.dumps(fit))

    def goal_warnings(med, p95):
        f["validation"].update({"median_rel_error": med, "p95_rel_error": p95,
                                "heldout_median_rel_error": med,
                                "heldout_p95_rel_error": p95})
        report = build_report(fns, "f", f, counts, cols, times, wres, TSC_HZ)
        return [w.message for w in report.function("f").warnings
                if "held-out" in w.message and "goal" in w.message]

    assert goal_warnings(0.01004, 0.05004) == []
    assert len(goal_warnings(0.0101, 0.0501)) == 2
