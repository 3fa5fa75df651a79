"""The bound at other exceedance probabilities per call, on zlib's ``crc32``: the curve the
report gives beside the bound passes through the bound a user gets by setting that
probability (``[wcet] exceedance``), and grows as calls get rarer.

The bound is the worst path's time × a factor for single calls, extrapolated by an
extreme-value fit to a probability per call (1e-6 by default).  How much of the bound is
that extrapolation decides whether a user should time longer or accept another
probability, so the report gives the bound from 1e-3 to 1e-9.  The same stored
measurements are analysed twice (``report`` only reads the store).  The extrapolation's
calibration against fresh calls of a known law is tests/test_dispersion.py's.

Skips, saying so, when the system's zlib is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LIBZ = Path("/lib/x86_64-linux-gnu/libz.so.1")


def _report(d: Path, out: Path) -> tuple[dict, str]:
    from smalltarget import report_json_and_text

    root, text = report_json_and_text(d, out)
    return root["wcet"], " ".join(text.split())


@pytest.mark.slow
@pytest.mark.skipif(not LIBZ.exists(), reason="the system's libz.so.1 is absent: the curve "
                    "is checked on synthetic calls only (tests/test_dispersion.py)")
def test_zlibs_curve_passes_through_the_bound_each_exceedance_gives(tmp_path):
    from smalltarget import zlib_crc32_target
    from wcetfit.cli import main
    from wcetfit.wcet.dispersion import CURVE_EXCEEDANCES

    d = zlib_crc32_target(tmp_path / "crc", 8000, inputs=150, repeats=6)
    assert main(["analyze", str(d), "--no-wait"]) == 0
    w, text = _report(d, tmp_path / "default.json")
    curve = {c["exceedance_per_call"]: c for c in w["exceedance_curve"]}
    assert list(curve) == sorted(CURVE_EXCEEDANCES, reverse=True)
    assert curve[1e-6]["ticks"] == pytest.approx(w["ipet_ticks"], rel=1e-9)
    ticks = [c["ticks"] for c in w["exceedance_curve"]]
    assert all(b >= a for a, b in zip(ticks, ticks[1:])), ticks
    # never below a call the function was measured to take, at any level
    assert ticks[0] >= w["slowest_call"]["ticks"]
    assert curve[1e-3]["ns"] == pytest.approx(curve[1e-3]["ticks"] / json.loads(
        (tmp_path / "default.json").read_text())["tsc_hz"] * 1e9)
    fitted = w["dispersion_calls"] >= 500
    if not fitted:
        # too few long calls for the extreme-value fit: said, not read as 1e-6
        assert len(set(ticks)) == 1
        assert (f"Not extrapolated to 1e-06 per call ([wcet] exceedance): the largest of "
                f"{w['dispersion_calls']:,} calls") in text
    elif ticks[-1] > ticks[0] * (1 + 1e-3):
        assert "Exceedance 1e-06 per call ([wcet] exceedance); at 1e-03: " in text, text
        assert f"at 1e-03: {curve[1e-3]['ticks']:,.0f} ticks" in text, text
    else:
        assert "the same from 1e-03 to 1e-09" in text, text

    # a user who sets 1e-3 gets the curve's bound there, and the curve still holds 1e-6
    toml = (d / "wcetfit.toml").read_text()
    (d / "wcetfit.toml").write_text(toml + "[wcet]\nexceedance = 1e-3\n")
    w3, text3 = _report(d, tmp_path / "loose.json")
    assert w3["ipet_ticks"] == pytest.approx(curve[1e-3]["ticks"], rel=1e-9)
    assert w3["point_ticks"] == pytest.approx(w["point_ticks"])
    assert {c["exceedance_per_call"]: c["ticks"] for c in w3["exceedance_curve"]} == \
        pytest.approx({p: c["ticks"] for p, c in curve.items()}, rel=1e-9)
    if fitted and ticks[-1] > ticks[0] * (1 + 1e-3):
        assert "Exceedance 1e-03 per call" in text3 and "at 1e-09" in text3, text3
