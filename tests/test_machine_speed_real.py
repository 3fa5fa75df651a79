"""The machine's slowest speed the bound covers, on zlib's ``adler32``: what the timing run
measured, or the user's ``[wcet] machine_speed`` where that is slower, said where the
bound is read.

The bound multiplies by the slowest sustained period of the machine the timing run saw.
That is what the machine did in those seconds, not what it can do: in one bench session
(``python -m bench.bracket``) fir's fresh run met a period ×1.37 slower than its fast end,
where its timing run's slowest had been ×1.03, and its slowest fresh call was 9 % above
the bound.  The report says which speed the bound rests on, and a user who knows their
machine declares the slowest one.  The same measurements analysed twice (``report`` only
reads the store): the declared speed scales the bound by declared ÷ measured and nothing
else moves.

Skips, saying so, when the system's zlib is absent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LIBZ = Path("/lib/x86_64-linux-gnu/libz.so.1")


def _report(d: Path, out: Path) -> tuple[dict, str]:
    from smalltarget import report_json_and_text
    return report_json_and_text(d, out)


@pytest.mark.slow
@pytest.mark.skipif(not LIBZ.exists(), reason="the system's libz.so.1 is absent: the "
                    "declared machine speed is checked on the dispersion's synthetic "
                    "calls only (tests/test_dispersion.py)")
def test_a_declared_machine_speed_scales_zlibs_bound_and_the_report_says_which(tmp_path):
    from smalltarget import write_target
    from wcetfit.cli import main
    from wcetfit.wcet.dispersion import factor_setter

    d = write_target(tmp_path / "adler", str(LIBZ), "adler32",
                     "unsigned long adler32(unsigned long adler, const unsigned char *buf, "
                     "unsigned int len);",
                     "    n = int(ctx.rng.integers(0, 20000))\n"
                     "    data = ctx.rng.integers(0, 256, max(n, 1)).astype('uint8')\n"
                     "    return (1, ctx.ffi.from_buffer('unsigned char[]', data), n)",
                     inputs=60, repeats=5)
    assert main(["analyze", str(d), "--no-wait"]) == 0
    measured_run, text = _report(d, tmp_path / "measured.json")
    w0 = measured_run["wcet"]
    measured = w0["machine_speed"]["measured"]
    assert w0["machine_speed"]["declared"] is None
    assert w0["dispersion_factors"]["machine_speed"] == pytest.approx(measured)
    # the summary says what the bound took as the machine's slowest, and from where
    said = " ".join(text.split())
    # (followed, a run can still have no period slower than its fast end: ×1.00, as
    # liblzma's crc64 had in one run)
    if measured_run["machine_speed"]["followed"]:
        assert (f"the machine no slower than the timing run's slowest period, ×{measured:.2f}"
                in said), said
        assert "[wcet] machine_speed sets the slowest to cover" in said
    else:   # calls too short for the speed to be followed: said so
        assert measured == 1.0
        assert "the machine no slower than during the timing run" in said, said

    declared = min(10.0, max(2.0, 1.5 * measured))
    toml = (d / "wcetfit.toml").read_text()
    (d / "wcetfit.toml").write_text(toml + f"[wcet]\nmachine_speed = {declared}\n")
    declared_run, text = _report(d, tmp_path / "declared.json")
    w1 = declared_run["wcet"]
    assert w1["machine_speed"] == {"measured": pytest.approx(measured), "declared": declared}
    assert w1["dispersion_factors"]["machine_speed"] == declared
    # nothing but the speed moved: the path, its margin and the other factors are the same
    assert w1["point_ticks"] == pytest.approx(w0["point_ticks"])
    assert w1["margin_ticks"] == pytest.approx(w0["margin_ticks"])
    for k in ("misfit", "call"):
        assert w1["dispersion_factors"][k] == pytest.approx(w0["dispersion_factors"][k])
    scale = declared / measured
    if factor_setter(w0["dispersion_factors"]) in ("cover", "events"):
        # the slowest own call, or one event short of an interrupt (added, not scaled),
        # held the bound up: a floor, the rest scales past it
        assert w1["ipet_ticks"] >= w0["ipet_ticks"]
    else:
        assert w1["ipet_ticks"] / w0["ipet_ticks"] == pytest.approx(scale, rel=1e-6)
    said = " ".join(text.split())
    # the headline names the factor as declared, whichever form it takes there
    assert re.search(rf"machine(?:'s slowest)? speed \(?×{declared:.2f}(?: \(declared\)|, "
                     rf"declared\))", said), said
    if measured_run["machine_speed"]["followed"]:
        assert (f"the machine no slower than ×{declared:.2f} its speed at the timing run's "
                f"fast end (from [wcet] machine_speed; the timing run's slowest period: "
                f"×{measured:.2f})") in said, said
    else:   # nothing followed: no "slowest period ×1.00" (libxxhash's XXH64 read it so)
        assert (f"the machine no slower than ×{declared:.2f} its speed during the timing run "
                f"(from [wcet] machine_speed; the run's speed was not followed") in said, said
        assert "slowest period: ×1.00" not in said

    # a speed no machine runs at: one line, exit 2, and the measurements stay
    stored = sorted(p.name for p in (d / ".wcetfit").rglob("*") if p.is_file())
    (d / "wcetfit.toml").write_text(toml + "[wcet]\nmachine_speed = 0.5\n")
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "wcetfit", "report", str(d)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert re.fullmatch(r"error: .*\[wcet\] 'machine_speed' is the slowest the machine may "
                        r"run the function, as a factor over its fastest, 1 to 10, found "
                        r"0\.5\n", res.stderr), res.stderr
    assert sorted(p.name for p in (d / ".wcetfit").rglob("*") if p.is_file()) == stored
