"""Validation statistics, the method choice, the resolution test and `wcetfit calibrate`."""

import json
import statistics

import numpy as np
import pytest

from wcetfit.timing import calibrate as cal
from wcetfit.cli import main
from wcetfit.errors import MeasurementError
from wcetfit.timing.calls import fit_line

Q = 26.0


# ---- statistics on synthetic samples ---------------------------------------------------

def test_ensemble_stats_by_hand():
    ens = [[52, 52, 78, 52], [52, 78, 78, 52], [26, 52, 52, 52]]
    s = cal.ensemble_stats(np.array(ens, dtype=float), Q)
    variances = [statistics.pvariance(e) for e in ens]
    minima = [min(e) for e in ens]
    flat = sorted(x for e in ens for x in e)
    assert s.overhead_min == 26 and s.overhead_median == statistics.median(flat)
    assert s.overhead_p99 == pytest.approx(78.0)
    assert s.variance == pytest.approx(statistics.mean(variances))
    assert s.var_of_variances == pytest.approx(statistics.pvariance(variances))
    assert s.var_of_minima == pytest.approx(statistics.pvariance(minima))
    assert s.max_deviation == max(max(e) - min(e) for e in ens)
    assert (s.n_samples, s.n_migrated, s.n_outliers) == (12, 0, 0)


def test_migrated_samples_are_left_out_and_counted():
    t = np.array([[52, np.nan, 52, 78], [52, 52, np.nan, 52]], dtype=float)
    s = cal.ensemble_stats(t, Q)
    assert (s.n_samples, s.n_migrated) == (6, 2)
    assert s.variance == pytest.approx(statistics.mean(
        [statistics.pvariance([52, 52, 78]), statistics.pvariance([52, 52, 52])]))


def test_interrupted_sample_counts_for_max_deviation_not_variance():
    clean = np.full((4, 50), 52.0)
    clean[:, ::5] = 78.0
    hit = clean.copy()
    hit[2, 7] = 1_000_000.0                     # a timer interrupt
    a, b = cal.ensemble_stats(clean, Q), cal.ensemble_stats(hit, Q)
    assert b.n_outliers == 1 and a.n_outliers == 0
    assert b.variance == pytest.approx(a.variance, rel=0.05)
    assert b.var_of_minima == a.var_of_minima == 0
    assert b.max_deviation == 1_000_000.0 - 52.0
    # the cut-off is median + 3.5/0.6745 quanta when the MAD is below one quantum
    assert cal.outlier_cutoff(clean.ravel(), Q) == pytest.approx(52 + 3.5 / 0.6745 * Q)


def test_all_migrated_is_an_error():
    with pytest.raises(MeasurementError, match="migrated"):
        cal.ensemble_stats(np.full((2, 3), np.nan), Q)


def _ticks(minima, repeats=5, spread=26.0):
    rng = np.random.default_rng(0)
    base = np.asarray(minima, dtype=float)[:, None]
    return base + spread * rng.integers(0, 3, (len(minima), repeats))


def test_resolution_tolerates_one_quantum_flicker():
    # a staircase whose minima flicker one step back at a boundary (quantized readings)
    minima = [52, 52, 78, 52, 78, 78, 104, 104, 130]
    t = _ticks(minima)
    t[:, 0] = minima                            # make the minima exact
    r = cal.resolution_stats(range(len(minima)), t, Q)
    assert r.minima == tuple(float(m) for m in minima)
    assert r.monotone and r.drops == 0 and r.spurious == 1
    assert r.resolves


def test_resolution_detects_a_real_drop():
    minima = [52, 78, 104, 130, 78, 156]        # two quanta below the earlier 130
    t = _ticks(minima)
    t[:, 0] = minima
    r = cal.resolution_stats(range(len(minima)), t, Q)
    assert not r.monotone and r.drops == 1


def test_resolution_fit_recovers_the_slope():
    iters = np.arange(0, 65, 4)
    minima = 40 + 0.75 * iters
    t = np.repeat(minima[:, None], 3, axis=1)
    r = cal.resolution_stats(iters, t, Q)
    assert r.ticks_per_iteration == pytest.approx(0.75)
    assert r.ticks_per_iteration_se == pytest.approx(0.0, abs=1e-9)
    assert r.fit.intercept == pytest.approx(40)
    assert r.to_dict()["iterations_per_quantum"] == pytest.approx(Q / 0.75)


def test_fit_line_matches_numpy_and_rejects_an_outlier():
    rng = np.random.default_rng(1)
    x = np.repeat(np.arange(1, 17), 20).astype(float)
    y = 150.0 * x + 60 + rng.normal(0, 10, x.size)
    f = fit_line(x, y, reject=False)
    slope, intercept = np.polyfit(x, y, 1)
    assert f.slope == pytest.approx(slope) and f.intercept == pytest.approx(intercept)
    # the textbook standard error of the slope
    resid = y - (slope * x + intercept)
    se = np.sqrt((resid ** 2).sum() / (x.size - 2) / ((x - x.mean()) ** 2).sum())
    assert f.slope_se == pytest.approx(se)
    y2 = y.copy()
    y2[5] += 100_000                             # one interrupted sample
    g = fit_line(x, y2, quantum=Q)
    assert g.n_rejected >= 1 and g.slope == pytest.approx(150, abs=3 * g.slope_se + 1)
    with pytest.raises(MeasurementError):
        fit_line([1, 1, 1], [2, 3, 4], reject=False)


# ---- validation and choice ---------------------------------------------------------------

def _stats(median, p99, var_of_minima=0.0, variance=100.0, var_of_variances=10.0,
           migrated=0):
    return cal.EnsembleStats(n_ensembles=10, ensemble_size=100, n_samples=1000 - migrated,
                             n_migrated=migrated, n_outliers=0, overhead_min=median,
                             overhead_median=median, overhead_p99=p99, variance=variance,
                             max_deviation=p99 * 10, var_of_variances=var_of_variances,
                             var_of_minima=var_of_minima)


def _result(name, median, p99, cost, fenced=True, **kw):
    stats = _stats(median, p99, **kw)
    return cal.MethodResult(name=name, fenced=fenced, stats=stats, resolution=None,
                            cost_per_sample=cost, failures=cal.validate(stats, None, Q))


def test_validate_names_each_failed_check():
    assert cal.validate(_stats(52, 78), None, Q) == ()
    fails = cal.validate(_stats(52, 78, var_of_minima=(2 * Q) ** 2), None, Q)
    assert len(fails) == 1 and "minima vary" in fails[0]
    fails = cal.validate(_stats(52, 78, variance=100, var_of_variances=1e6), None, Q)
    assert len(fails) == 1 and "variance varies" in fails[0]
    fails = cal.validate(_stats(52, 78, migrated=50), None, Q)
    assert len(fails) == 1 and "migrated" in fails[0]


def test_choice_prefers_the_cheaper_method_within_one_quantum_of_the_lowest_p99():
    results = [_result("lfence", 52, 78, 200), _result("cpuid", 52, 52, 28000),
               _result("rdtscp", 52, 52, 110, fenced=False)]
    name, why = cal.choose(results, Q)
    assert name == "lfence"
    assert "within one quantum" in why and "cpuid" in why and "rdtscp is unfenced" in why


def test_choice_takes_the_lowest_p99_when_the_gap_exceeds_a_quantum():
    results = [_result("lfence", 52, 130, 200), _result("cpuid", 52, 52, 28000)]
    assert cal.choose(results, Q)[0] == "cpuid"


def test_choice_skips_methods_failing_validation():
    results = [_result("cpuid_inside", 9000, 17000, 28000, var_of_minima=1e5),
               _result("mfence", 104, 104, 300)]
    name, why = cal.choose(results, Q)
    assert name == "mfence" and "cpuid_inside fails validation" in why


def test_choice_with_nothing_valid_still_answers_and_says_so():
    results = [_result("a", 52, 78, 200, var_of_minima=1e4),
               _result("b", 52, 52, 300, var_of_minima=1e4)]
    name, why = cal.choose(results, Q)
    assert name in ("a", "b") and "no method passes validation" in why


def test_override():
    results = [_result("lfence", 52, 78, 200), _result("rdtscp", 26, 52, 100, fenced=False)]
    name, why = cal.choose(results, Q, override="rdtscp")
    assert name == "rdtscp" and "--method" in why and "lfence" in why


# ---- real runs (robust: relations between measurements, no thresholds) ------------------

def test_resolution_minima_rise_monotonically():
    from wcetfit.timing.tsc import pinned, quantum_ticks

    iters = list(range(0, 513, 64))          # each step adds well over one quantum of work
    with pinned():
        q = quantum_ticks()
        ticks = cal.measure_resolution("lfence", iters, repeats=300)
    r = cal.resolution_stats(iters, ticks, q)
    m = np.array(r.minima)
    assert np.all(np.diff(m) >= -q), m        # non-decreasing up to one quantum of noise
    assert m[-1] > m[0]
    assert r.monotone and r.ticks_per_iteration > 0


def test_calibrate_quick_json(tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "wcetfit.calibration/1"
    names = [m["name"] for m in data["methods"]]
    assert set(names) == {"lfence", "mfence", "cpuid", "rdtscp", "cpuid_inside"}
    for m in data["methods"]:
        for key in ("overhead_min", "overhead_median", "overhead_p99", "variance",
                    "var_of_variances", "var_of_minima"):
            assert isinstance(m[key], float)
        assert m["overhead_min"] <= m["overhead_median"] <= m["overhead_p99"]
    assert data["chosen"] in names and data["reason"].startswith(data["chosen"])
    assert data["quantum_ticks"] >= 1 and data["tsc_hz"] > 0
    assert data["resolution"]["method"] == data["chosen"]
    assert len(data["resolution"]["iters"]) == len(data["resolution"]["minima"])
    env = data["environment"]
    assert env["method"] == data["chosen"] and env["pinned_cpu"] is not None
    assert env["quantum_ticks"] == data["quantum_ticks"]


def test_calibrate_method_override(capsys):
    assert main(["calibrate", "--quick", "--method", "rdtscp", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == "rdtscp" and "--method" in data["reason"]


def test_calibrate_table(capsys):
    assert main(["calibrate", "--quick"]) == 0
    text = capsys.readouterr().out
    assert "chosen:" in text and "quantum" in text and "not core cycles" in text


def test_auto_method_is_cached_per_boot(tmp_path, monkeypatch):
    calls = []
    real = cal.calibrate

    def counting(*a, **kw):
        calls.append(1)
        return real(settings=cal.Settings.quick())

    monkeypatch.setattr(cal, "calibrate", counting)
    first = cal.auto_method(cache_dir=tmp_path)
    again = cal.auto_method(cache_dir=tmp_path)
    assert first == again and len(calls) == 1
    assert first[1].startswith(first[0])
    cal.auto_method(cache_dir=tmp_path, refresh=True)
    assert len(calls) == 2
