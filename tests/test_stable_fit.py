"""The same stored measurements give the same fit and bound, bit for bit (issue #15,
"stable fits"), whatever the process: string hashing (set and dict order of names) and
the BLAS thread count differ between the processes compared here.  And the calibrated
empty-region cost reaches the fit as the overhead's floor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# fit and bound of the stored data, printed as digests and figures
_FIT = r"""
import hashlib, json, sys
import numpy as np
from wcetfit import pipeline
s = pipeline.open_session(sys.argv[1])
root = s.target.functions[0]
counts, times = pipeline.stored_measurements(s, root)
system, fit = pipeline.fit_stage(s, root, counts, times)
w = pipeline.wcet_stage(s, root, system, fit)
h = hashlib.sha256()
h.update(np.array([np.nan if b.solution_ticks is None else b.solution_ticks
                   for b in fit.blocks], dtype=float).tobytes())
h.update(np.array([b.cost_ticks if getattr(b, "cost_ticks", None) is not None else np.nan
                   for b in fit.blocks], dtype=float).tobytes())
h.update(repr(fit.overhead_ticks).encode())
if fit.covariance is not None:
    h.update(np.ascontiguousarray(fit.covariance).tobytes())
print(json.dumps({"fit": h.hexdigest(), "bound": getattr(w, "upper_ticks", str(w)),
                  "warnings": [x.code for x in fit.fit_warnings],
                  "floor": fit.overhead_floor_ticks, "method": times.method}))
"""


@pytest.fixture(scope="module")
def measured_calls(tmp_path_factory):
    sample = os.path.join(ROOT, "samples", "calls")
    if not os.path.exists(os.path.join(sample, "build", "libcalls.so")):
        pytest.skip("samples/calls is not built (make samples)")
    target = tmp_path_factory.mktemp("stable") / "calls"
    shutil.copytree(sample, target, ignore=shutil.ignore_patterns(".wcetfit", "build"))
    os.symlink(os.path.join(sample, "build"), target / "build")
    import re
    toml = target / "wcetfit.toml"
    text = re.sub(r"(?m)^inputs\s*=\s*\d+", "inputs = 150", toml.read_text())
    toml.write_text(re.sub(r"(?m)^repeats\s*=\s*\d+", "repeats = 3", text))
    env = {**os.environ, "PYTHONPATH": ROOT}
    for cmd in ("count", "time"):
        res = subprocess.run([sys.executable, "-m", "wcetfit", cmd, str(target)],
                             capture_output=True, text=True, timeout=600, env=env)
        assert res.returncode == 0, res.stderr
    return str(target)


def _fit_in_process(target: str, **env: str) -> dict:
    res = subprocess.run([sys.executable, "-c", _FIT, target], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": ROOT, **env})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_same_stored_data_same_fit_bit_for_bit(measured_calls):
    a = _fit_in_process(measured_calls, PYTHONHASHSEED="1", OPENBLAS_NUM_THREADS="1")
    b = _fit_in_process(measured_calls, PYTHONHASHSEED="2", OPENBLAS_NUM_THREADS="2")
    c = _fit_in_process(measured_calls, PYTHONHASHSEED="3")
    assert a["fit"] == b["fit"] == c["fit"]
    assert a["bound"] == b["bound"] == c["bound"]
    assert a["warnings"] == b["warnings"] == c["warnings"]


def test_calibrated_floor_is_the_empty_region_minimum(tmp_path):
    """The floor is the per-boot calibration's least empty timed region of the method."""
    from wcetfit.timing.calibrate import auto_method, empty_region_floor

    try:
        chosen, _ = auto_method(str(tmp_path))
    except Exception as exc:            # no usable TSC here: nothing to calibrate
        pytest.skip(f"the TSC calibration cannot run here: {exc}")
    files = list((tmp_path / "calibration").glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    want = {m["name"]: m["overhead_min"] for m in data["methods"]}
    assert empty_region_floor(chosen, str(tmp_path)) == want[chosen] > 0
    assert empty_region_floor("no-such-method", str(tmp_path)) is None


@pytest.mark.slow
def test_fit_stage_passes_the_calibrated_floor(measured_calls):
    """fit_stage hands the timing method's calibrated floor to the fit's checks."""
    from wcetfit.timing.calibrate import empty_region_floor

    got = _fit_in_process(measured_calls)
    want = empty_region_floor(got["method"])
    if want is None:
        pytest.skip(f"no calibration of {got['method']} on this machine")
    assert got["floor"] == want > 0
