"""The bound of real code whose callees are reached through function pointers: liblzma's
``lzma_stream_buffer_decode`` reaches its stream, block, LZ and LZMA decoders only through
``next.code`` pointers.  The per-call-site program (wcetfit.wcet.context) used to model
direct calls only: it charged nothing for those sites, came out at ε (below every measured
call) and was refused, leaving the context-insensitive bound — the LZMA decoder's own
worst path priced outside the measured counts' span, 45× the slowest input in a new
user's run of 300 inputs.  Now the targets the count run saw at each indirect site are
instances sharing the site's executions, and the bound keeps to the span.

Skips, saying so, when liblzma is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from smalltarget import analyzed_root

LZMA = Path("/lib/x86_64-linux-gnu/liblzma.so.5")


@pytest.mark.skipif(not LZMA.exists(), reason="liblzma.so.5 absent: the per-call-site "
                    "bound through pointers is checked on synthetic CFGs only "
                    "(tests/test_wcet_context.py)")
def test_lzma_decoders_behind_pointers_are_bounded_per_call_site(tmp_path):
    from bench.multi import make_target

    # the bench's target (its xz-stream inputs), smaller: 40 inputs × 3, no search
    d = Path(make_target("lzma_stream_buffer_decode", str(tmp_path)))
    toml = (d / "wcetfit.toml").read_text()
    (d / "wcetfit.toml").write_text(
        toml.replace("inputs = 300", "inputs = 40").replace("repeats = 10", "repeats = 3")
        + "[search]\nbudget = 0\n")
    assert "inputs = 40" in (d / "wcetfit.toml").read_text()
    fn = analyzed_root(d, tmp_path / "report.json")
    w = fn["wcet"]
    assert w["error"] is None, w["error"]
    notes = [x["message"] for x in fn["warnings"] if "callees bounded per call site" in x["message"]]
    assert notes, "the per-call-site bound was not taken"
    assert "affine span" in notes[0]
    # the root's call through next.code charges the decoders it was seen calling
    # (the root's other indirect site calls outside the binary: not modelled)
    site = [c for c in w["calls"] if c["kind"] == "indirect"
            and c["callee_wcet_ticks"] is not None]
    assert site, w["calls"]
    assert max(c["callee_wcet_ticks"] for c in site) > 0.5 * w["point_ticks"]
    assert all("observed" in c["note"] for c in site)
    # a bound no lower than any measured call's prediction, far below the old one
    assert w["point_ticks"] >= w["max_predicted_ticks"] * (1 - 1e-9)
    insensitive, per_site = (float(v.replace(",", "")) for v in __import__("re").search(
        r"\(([\d,]+) ticks context-insensitive, ([\d,]+) ticks per call site\)",
        notes[0]).groups())
    assert per_site < insensitive
