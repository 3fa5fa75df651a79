"""The probes' ε and δ measured on two functions of known instructions
(wcetfit.split.actcalib), with the real stubs and fenced reading.

Truth: the calibration's figures come from its own readings, so this checks what must
hold whatever the machine: ε and δ are each positive (a probe cannot cost negative time);
ε is at most the leaf's whole probed inclusive time (the known instructions' share is not
negative); ε + δ is their sum; the intervals are finite; and a second calibration from new
calls gives ε + δ again (within a quarter: the VM's speed moves).
"""

from __future__ import annotations

import ctypes

import pytest


def test_calibration_gives_positive_eps_and_delta():
    try:
        from wcetfit.split.install import native_lib
        native_lib()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"wcetfit._native is not built: {exc}")
    from wcetfit.split.actcalib import calibrate
    from wcetfit.timing import tsc

    a = ctypes.cast(ctypes.CDLL(None).printf, ctypes.c_void_p).value
    near = (a & ~0xFFF, (a & ~0xFFF) + 4096)
    with tsc.pinned():
        one = calibrate("lfence", near, calls=150)
        two = calibrate("lfence", near, calls=150)
    for c in (one, two):
        e, d, k = c["epsilon"], c["delta"], c["kappa"]
        assert e["value_ticks"] > 0 and d["value_ticks"] > 0
        assert abs(e["value_ticks"] + d["value_ticks"] - k["value_ticks"]) < 1e-6
        assert 0 < e["ci95_ticks"] < float("inf") and 0 < k["ci95_ticks"] < float("inf")
        # the known instructions' share bounds ε: ε ≤ the leaf's whole inclusive time
        assert e["value_ticks"] <= c["leaf_inclusive_ticks"]
    # a second calibration from new calls: ε + δ again (a noisy VM: within a quarter)
    k1, k2 = one["kappa"]["value_ticks"], two["kappa"]["value_ticks"]
    assert abs(k1 - k2) <= 0.25 * max(k1, k2)


def test_slope_of_groups_whose_readings_are_all_equal():
    """On a quiet machine every kept reading of a group can be the same TSC multiple: a
    standard error of exactly 0.  CI once saw the slope's variance come out negative
    from that (a math domain error); the slope must stay exact and its SE finite."""
    import numpy as np

    from wcetfit.errors import MeasurementError
    from wcetfit.split.actcalib import slope_of

    ns = np.array([0, 4, 8, 16])
    slope, se = slope_of(ns, 52.0 + 26.0 * ns, np.zeros(4))
    assert slope == pytest.approx(26.0) and 0 <= se < 1
    # mixed: zero and non-zero SEs, one group without readings (nan mean, infinite SE)
    slope, se = slope_of(ns, np.array([52.0, 156.0, np.nan, 468.0]),
                         np.array([0.0, 3.0, np.inf, 5.0]))
    assert slope == pytest.approx(26.0) and 0 < se < float("inf")
    with pytest.raises(MeasurementError):
        slope_of(ns, np.array([52.0, np.nan, np.nan, np.nan]), np.array([0, np.inf, np.inf, np.inf]))


def test_kappa_is_epsilon_plus_delta_when_the_iteration_cost_is_noise():
    """A quiet machine measured the unprobed iteration at −0.05 ticks: ε and δ took it as
    0 and κ subtracted it, so ε + δ and κ differed (a CI failure of the test above)."""
    from wcetfit.split.actcalib import combine

    c = combine(70.0, 0.3, 80.0, 0.3, -0.05, 0.1, dof=300)
    e, d, k = (c[x]["value_ticks"] for x in ("epsilon", "delta", "kappa"))
    assert abs(e + d - k) < 1e-9 and k == 150.0
