"""The search's measured-time phase (wcetfit.search.timed), with a known answer.

Truth: ``touch(8192, stride)`` runs the same blocks the same number of times for every
stride, so the fitted model predicts every input alike; its time is not alike: a stride
of one page and a line (4,160 bytes) gives every access its own page and misses the TLB
(about 12× the time of a stride of 8 to 32 bytes, measured here in C).  ``generate`` makes that
stride one input in 4,096.  The model-guided phase cannot rank what the counts do not
show; the measured-time phase must find it, and ``analyze`` must report it as the
slowest measured input, found by the search.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.smalltarget import build_library, write_target

SOURCE = r"""
#include <string.h>
#define SPAN (64L << 20)
char big[SPAN];
/* written once, so that every page is its own (an untouched page reads the zero page) */
__attribute__((constructor)) static void fill(void) { memset(big, 1, SPAN); }
long touch(int n, long stride)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        s += big[((long)i * stride) & (SPAN - 1)];
    return s;
}
"""

GENERATE = """\
    k = int(ctx.rng.integers(0, 4096))
    return (8192, 4160 if k == 4095 else 8 * (1 + k % 4))"""


def _target(tmp_path: Path, budget: int) -> Path:
    lib = build_library(tmp_path / "lib", SOURCE, "touch")
    return write_target(tmp_path / "t", str(lib), "touch", "long touch(int n, long stride);",
                        GENERATE, inputs=30, repeats=3, budget=budget,
                        extra="timed = 3\ntimed_budget = 30\n")


def test_the_timed_phase_finds_a_slow_input_the_counts_cannot_tell(tmp_path):
    from tests.smalltarget import analyzed_root
    from wcetfit import pipeline
    from wcetfit.search.engine import SearchOptions
    from wcetfit.search.workflow import run_search

    d = _target(tmp_path, budget=0)
    analyzed_root(d, tmp_path / "measured.json")          # count and time, no search
    s = pipeline.open_session(str(d))
    counts, times = pipeline.stored_measurements(s, "touch")
    assert len({row.tobytes() for row in counts.functions[0].counts}) == 1   # one path
    before = float(np.nanmax(np.nanmedian(times.ticks, axis=1)))
    rep = run_search(s, "touch", SearchOptions(budget=40, timed=3, timed_budget=30))
    assert rep.timed_phase is not None and rep.timed_phase.best
    key, seq, ticks = rep.timed_phase.best[0]
    # the draw that picks the stride went to the rare value, and it is slow when timed
    assert [int(c.value) for c in seq.choices] == [4095]
    assert ticks > 4 * before
    # kept in the store, timed again with the target's repeats
    med = dict(zip(rep.timed_indices.tolist(), np.nanmedian(rep.timed_ticks, axis=1)))
    assert med[key] > 4 * before
    # a second search numbers its inputs after every stored one: the kept numbers are
    # not consecutive, and numbering from the count of rows reused them
    from wcetfit.search.store import load_search_rows
    first = load_search_rows(s.store, "touch", s.target.measure.seed).indices.tolist()
    run_search(s, "touch", SearchOptions(budget=20, timed=2, timed_budget=10))
    both = load_search_rows(s.store, "touch", s.target.measure.seed).indices.tolist()
    assert both[:len(first)] == first and len(both) > len(first)
    assert len(set(both)) == len(both) and min(both[len(first):]) > max(first)


def test_analyze_reports_the_slow_input_the_timed_phase_found(tmp_path, capsys):
    from tests.smalltarget import analyzed_root
    from wcetfit.cli import main

    d = _target(tmp_path, budget=40)
    root = analyzed_root(d, tmp_path / "report.json")
    slowest = root["wcet"]["slowest_input"]
    assert slowest["found_by_search"] is True
    assert "4160" in (slowest["arguments"] or "")
    # the bracket's lower end for single calls: the slowest call that was the function's
    # own time, at least the slowest input's median, and the bound above it
    call = root["wcet"]["slowest_call"]
    assert call["ticks"] >= root["wcet"]["max_observed_ticks"]
    assert root["wcet"]["ipet_ticks"] >= call["ticks"]
    hz = json.loads((tmp_path / "report.json").read_text())["tsc_hz"]
    assert call["ns"] == pytest.approx(call["ticks"] / hz * 1e9, rel=1e-6)
    capsys.readouterr()
    assert main(["report", str(d)]) == 0
    out = capsys.readouterr().out.replace("\u00a0", " ")
    assert f"Slowest single call: {call['label']}, " in out
    assert "bound / slowest call = " in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["functions"][0]["name"] == "touch"
