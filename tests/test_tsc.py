"""TSC facts and environment (wcetfit.timing.tsc) and the native kernels behind them."""

import dataclasses
import os
import time

import numpy as np
import pytest

from wcetfit.timing import tsc
from wcetfit.errors import MeasurementError, WcetfitError

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu tsc rdtscp constant_tsc nonstop_tsc hypervisor

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu tsc rdtscp constant_tsc nonstop_tsc hypervisor
"""


def test_parse_cpuinfo():
    info = tsc.parse_cpuinfo(CPUINFO)
    assert info.model == "AMD EPYC" and info.vendor == "AuthenticAMD" and info.n_cpus == 2
    assert info.has("constant_tsc") and info.has("nonstop_tsc") and info.has("rdtscp")
    assert not info.has("tsc_reliable")


def test_tsc_without_rdtscp_is_refused():
    info = tsc.parse_cpuinfo(CPUINFO.replace(" rdtscp", ""))
    with pytest.raises(MeasurementError, match="RDTSCP"):
        tsc.check_tsc_usable(info)


def test_tick_conversions():
    assert tsc.ticks_to_ns(2_600, 2.6e9) == pytest.approx(1000.0)
    assert tsc.ns_to_ticks(1000.0, 2.6e9) == pytest.approx(2600.0)
    arr = np.array([26, 52, 2600])
    np.testing.assert_allclose(tsc.ns_to_ticks(tsc.ticks_to_ns(arr, 2.6e9), 2.6e9), arr)
    with pytest.raises(ValueError):
        tsc.ticks_to_ns(1, 0)


def test_quantum_from_deltas():
    assert tsc.quantum_from_deltas(np.array([0, 52, 26, 0, 78])) == 26
    assert tsc.quantum_from_deltas(np.array([3, 1, 2])) == 1
    with pytest.raises(MeasurementError):
        tsc.quantum_from_deltas(np.zeros(10))


def test_quantum_is_the_smallest_step_seen():
    # Two separate measurements may see different smallest steps (a rare odd step under
    # the hypervisor), so compare the estimator with the data it was given.
    deltas = tsc.read_steps(5000)
    positive = deltas[deltas > 0]
    assert positive.size > 0
    assert tsc.quantum_from_deltas(deltas) == positive.min()
    assert tsc.quantum_ticks() >= 1


def test_methods_cover_the_native_enum():
    _, lib = tsc.native()
    ids = sorted(tsc.method_id(n) for n in tsc.METHODS)
    assert ids == list(range(lib.WF_TSC_NMETHODS))
    for n in tsc.METHODS:
        assert tsc.method_name(tsc.method_id(n)) == n
    with pytest.raises(WcetfitError, match="unknown timing method"):
        tsc.method_id("fastest")
    with pytest.raises(WcetfitError):
        tsc.method_id(99)
    assert not tsc.METHODS["rdtscp"].fenced and tsc.METHODS["lfence"].fenced


def test_aux_cpu():
    assert tsc.aux_cpu((3 << 12) | 5) == 5
    np.testing.assert_array_equal(tsc.aux_cpu(np.array([1, 4097], np.uint32)), [1, 1])


def test_pinned_restores_affinity():
    before = os.sched_getaffinity(0)
    cpu = max(before)
    with tsc.pinned(cpu) as got:
        assert got == cpu
        assert os.sched_getaffinity(0) == {cpu}
        assert tsc.pinned_cpu() == cpu
        assert tsc.current_cpu() == cpu
    assert os.sched_getaffinity(0) == before
    assert tsc.pinned_cpu() == (cpu if len(before) == 1 else None)


def test_pin_to_an_absent_cpu_fails_cleanly():
    before = os.sched_getaffinity(0)
    with pytest.raises(MeasurementError, match="cannot pin"):
        with tsc.pinned(1000):
            pass
    assert os.sched_getaffinity(0) == before


def test_rdtscp_reports_the_cpu():
    ffi, lib = tsc.native()
    aux = ffi.new("uint32_t *")
    with tsc.pinned() as cpu:
        lib.wf_rdtscp(aux)
        assert tsc.aux_cpu(aux[0]) == cpu


def test_frequency_agrees_with_an_independent_span():
    """The calibrated rate against ticks counted across a sleep timed by Python's own
    monotonic clock: a different span, a different code path (tolerance 1%)."""
    ffi, lib = tsc.native()
    aux = ffi.new("uint32_t *")
    hz = tsc.calibrate_frequency(duration_s=0.03, rounds=3).hz
    with tsc.pinned():
        n0, t0 = time.monotonic_ns(), lib.wf_rdtscp(aux)
        time.sleep(0.2)
        t1, n1 = lib.wf_rdtscp(aux), time.monotonic_ns()
    assert (t1 - t0) * 1e9 / (n1 - n0) == pytest.approx(hz, rel=0.01)


def test_kernel_figure_is_preferred(tmp_path, monkeypatch):
    f = tmp_path / "tsc_freq_khz"
    f.write_text("2500000\n")
    monkeypatch.setattr(tsc, "SYSFS_TSC_KHZ", str(f))
    tsc.tsc_frequency.cache_clear()
    try:
        got = tsc.tsc_frequency()
        assert got.hz == 2.5e9 and got.source == str(f)
    finally:
        tsc.tsc_frequency.cache_clear()


def test_environment_round_trip_and_frozen():
    env = tsc.environment(method="lfence", quantum=26, cpu=1)
    assert env.method == "lfence" and env.quantum_ticks == 26 and env.pinned_cpu == 1
    assert env.tsc_hz > 0 and env.kernel
    back = tsc.Environment.from_dict(env.to_dict())
    assert back == env
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.tsc_hz = 1.0  # type: ignore[misc]
    assert env.ticks_to_ns(env.tsc_hz) == pytest.approx(1e9)
