"""A [loops] fact on the measured function's own loop, on real library code: liblzma's
``lzma_crc32`` runs its 8-byte loop len/8 times (slicing-by-eight), the loops before and
after it a few times each.  With inputs of up to 4 KB, a fact that lets the 8-byte loop
run twice as far must be charged: the bound with the fact above the bound without, and
the loop taken at its fact.  Before, the inputs' hull line between it and the alignment
loop before it (its intercept: the longest buffer) held it at the inputs' figure, the
bound did not move, and the headline still listed the fact as what the bound rests on.

Skips, saying so, when liblzma is absent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LIBLZMA = Path("/lib/x86_64-linux-gnu/liblzma.so.5")

# generate()'s body: buffers up to 4 KB, every tenth at the most
GENERATE = """    import numpy as np
    n = 4096 if ctx.index % 10 == 9 else int(ctx.rng.integers(0, 4097))
    data = ctx.rng.integers(0, 256, max(n, 1), dtype=np.uint8).tobytes()
    return (ctx.ffi.new("uint8_t[]", data), n, int(ctx.rng.integers(0, 2**32)))"""
PROTOTYPE = "uint32_t lzma_crc32(const uint8_t *buf, size_t size, uint32_t crc);"


def _wcetfit(*args):
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True, timeout=600)


def _root(doc):
    return doc.get("reports", [doc])[0]["functions"][0]["wcet"]


@pytest.mark.skipif(not LIBLZMA.exists(), reason=f"{LIBLZMA} is absent: the root-loop "
                    f"fact is checked on the samples' own facts only")
def test_a_fact_well_beyond_the_inputs_is_charged_on_the_measured_functions_loop(tmp_path):
    from smalltarget import write_target
    write_target(tmp_path, str(LIBLZMA), "lzma_crc32", PROTOTYPE, GENERATE, inputs=120)
    toml = (tmp_path / "wcetfit.toml").read_text()
    res = _wcetfit("analyze", str(tmp_path), "--json", str(tmp_path / "a.json"))
    assert res.returncode == 0, res.stderr
    before = _root(json.loads((tmp_path / "a.json").read_text()))
    # the loop the inputs ran furthest: the 8-byte one (4096 / 8 = 512 per entry)
    widest = max(before["loops"], key=lambda lo: lo["per_entry"] or 0)
    seen = widest["per_entry"]
    assert widest["source"] == "observed" and seen >= 400, before["loops"]
    fact = 2 * seen + 1
    (tmp_path / "wcetfit.toml").write_text(toml + f'[loops]\n"{widest["name"]}" = {fact}\n')
    res = _wcetfit("report", str(tmp_path), "--json", str(tmp_path / "b.json"))
    assert res.returncode == 0, res.stderr
    after = _root(json.loads((tmp_path / "b.json").read_text()))
    loop = next(lo for lo in after["loops"] if lo["name"] == widest["name"])
    assert loop["source"] == "fact" and loop["per_entry"] == fact
    # charged: the worst path runs it to its fact, and the bound grows with it
    assert loop["binding"] and loop["back_edges"] >= fact * loop["entries"]
    assert after["point_ticks"] > 1.5 * before["point_ticks"]
    text = _wcetfit("report", str(tmp_path)).stdout
    assert f"loop {widest['name']}: ≤ {fact} iterations per entry (from [loops])" in text
    assert "not charged" not in text
