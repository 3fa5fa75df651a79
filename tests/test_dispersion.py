"""The per-call dispersion of the WCET bound: an extreme-value quantile of single calls."""

import math

import numpy as np
import pytest

from wcetfit.wcet.dispersion import gumbel_quantile


def test_gumbel_quantile_matches_the_law_it_was_drawn_from():
    rng = np.random.default_rng(3)
    mu, beta, block, p = 1.0, 0.01, 50, 1e-6
    # per-call values whose block maxima are Gumbel(mu, beta): draw the maxima directly
    # as block maxima of a Gumbel law shifted by -beta*ln(block)
    calls = rng.gumbel(mu - beta * math.log(block), beta, size=block * 400)
    got = gumbel_quantile(calls, block=block, exceedance=p)
    want = mu - beta * math.log(-math.log1p(-block * p))
    assert abs(got - want) < 0.15 * (want - mu)


def test_quantile_lies_beyond_what_was_seen_for_long_tails_and_falls_back_when_few():
    rng = np.random.default_rng(4)
    calls = 1.0 + np.abs(rng.normal(0, 0.02, 20000))
    q = gumbel_quantile(calls)
    assert q > calls.max()          # 1e-6 per call is rarer than anything in 20,000 calls
    assert q < calls.max() + 0.1    # but not absurdly so for a light (normal) tail
    few = calls[:100]
    assert gumbel_quantile(few) == few.max()


def test_call_dispersion_is_worst_misfit_times_call_noise_quantile():
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(5)
    n, r = 400, 10
    pred = rng.uniform(20_000, 40_000, n)
    misfit = rng.uniform(0.95, 1.10, n)                  # per input, data-dependent
    noise = 1 + np.abs(rng.normal(0, 0.005, (n, r)))     # per call
    ticks = np.round(pred[:, None] * misfit[:, None] * noise / 26) * 26
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)))
    fit = SimpleNamespace(quantum_ticks=26.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    d = call_dispersion(system, fit).excess
    seen = (ticks / pred[:, None]).max() - 1
    assert d >= seen                                     # covers every call measured
    assert d < misfit.max() * 1.06 - 1                   # misfit is not extrapolated
    assert d > misfit.max() - 1


def test_a_rarer_exceedance_gives_a_larger_dispersion():
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(6)
    n, r = 400, 10
    pred = rng.uniform(20_000, 40_000, n)
    ticks = pred[:, None] * (1 + np.abs(rng.normal(0, 0.01, (n, r))))
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)))
    fit = SimpleNamespace(quantum_ticks=1.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    d = [call_dispersion(system, fit, exceedance=p).excess for p in (1e-3, 1e-6, 1e-9)]
    assert d[0] < d[1] < d[2]
    assert call_dispersion(system, fit).excess == d[1]   # 1e-6 is the default


def _slow_period_system(seed: int = 7):
    """Calls of known means with the machine 1.6× slower for a stretch of the run (in the
    timing run's order: repeat by repeat, inputs in order), as fit and system stand-ins."""
    from types import SimpleNamespace

    from wcetfit.timing.speed import speed_profile

    rng = np.random.default_rng(seed)
    n, r = 400, 10
    pred = rng.uniform(20_000, 40_000, n)
    noise = 1 + np.abs(rng.normal(0, 0.005, (n, r)))
    speed = np.ones((n, r))
    speed[150:, 3] = speed[:, 4] = speed[:80, 5] = 1.6        # 2.5 passes' worth
    ticks = np.round(pred[:, None] * noise * speed / 26) * 26
    profile = speed_profile(ticks, 26.0)
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), speed=profile,
                             ticks_at_reference=ticks / profile.factors)
    fit = SimpleNamespace(quantum_ticks=26.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    return system, fit, ticks, pred


def test_a_slow_period_of_the_machine_enters_as_its_own_factor():
    from wcetfit.wcet.dispersion import call_dispersion

    system, fit, ticks, pred = _slow_period_system()
    d = call_dispersion(system, fit)
    assert abs(d.machine_speed - 1.6) < 0.03             # the slow period, found
    assert d.call < 1.05                                  # single calls: their own noise only
    assert d.excess >= (ticks / pred[:, None]).max() - 1  # still covers every call measured
    # without the profile the slow calls are noise of single calls, and the interrupted-
    # call rule drops the minority period of each input: the factor says less
    from types import SimpleNamespace
    flat = call_dispersion(SimpleNamespace(ticks=ticks, counts=system.counts), fit)
    assert flat.machine_speed == 1.0


def test_a_declared_machine_speed_slower_than_the_runs_is_what_the_bound_covers():
    """[wcet] machine_speed: the machine may run slower than the timing run saw (a later
    period, another session); the bound covers the declared speed where it is slower,
    every factor made from calls as timed taken to it, and the run's own where it is not."""
    from wcetfit.wcet.dispersion import call_dispersion

    system, fit, ticks, pred = _slow_period_system()
    run = call_dispersion(system, fit)
    assert run.declared_speed is None and run.measured_speed == run.machine_speed
    slower = call_dispersion(system, fit, machine_speed=2.0)
    assert slower.machine_speed == 2.0 and slower.declared_speed == 2.0
    assert slower.measured_speed == run.measured_speed            # still said beside it
    scale = 2.0 / run.measured_speed
    assert slower.joint == pytest.approx(run.joint * scale)
    assert slower.misfit == run.misfit and slower.call == run.call
    assert 1 + slower.excess == pytest.approx((1 + run.excess) * scale)
    # below what the run measured: the measured speed stays, nothing changes
    faster = call_dispersion(system, fit, machine_speed=1.2)
    assert faster.machine_speed == run.machine_speed and faster.excess == run.excess
    assert faster.declared_speed == 1.2


def _disturbances_that_never_meet():
    """400 inputs, 10 calls each, in the timing run's order (repeat by repeat): inputs
    0–99 run 1.3× their prediction on every call (a data-dependent misfit), inputs
    100–199 have noisy calls (up to 1.2× their mean), and the machine is 1.5× slower while
    the 4th and 5th passes time inputs 200–399.  The worst of the three never meet: no
    call runs more than 1.5× its prediction, and no fresh call of the same law can."""
    from types import SimpleNamespace

    from wcetfit.timing.speed import speed_profile

    rng = np.random.default_rng(13)
    n, r = 400, 10
    pred = rng.uniform(20_000, 40_000, n)
    factor = np.ones((n, r))
    factor[:100] = 1.3
    factor[100:200] = rng.uniform(1.0, 1.2, (100, r))
    factor[200:, 4:6] = 1.5
    ticks = np.round(pred[:, None] * factor / 26) * 26
    profile = speed_profile(ticks, 26.0)
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), speed=profile,
                             ticks_at_reference=ticks / profile.factors)
    fit = SimpleNamespace(quantum_ticks=26.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    return system, fit, ticks / pred[:, None]


def test_the_joint_factor_is_what_calls_showed_when_disturbances_never_meet():
    """The product of the three factors takes the worst misfit, the noisiest call and the
    slowest machine period together (1.3 × ~1.2 × 1.5 here); the joint factor is measured
    where they come together: 1.5 as seen, extrapolated to 1e-6 per call by the Gumbel law
    of block maxima that lie between 1.3 and 1.5 (so somewhat above 1.5, far below the
    product).  It is never below a measured call.  The dispersion keeps the smaller, but
    not below a noisy call at the slowest speed (~1.2 × 1.5): that the two never met here
    is the timing run's luck, not the machine's law (a slow period lasts seconds, a call's
    excess is an event of its own); the misfit, a property of inputs, stays out."""
    from wcetfit.wcet.dispersion import call_dispersion

    system, fit, ratio = _disturbances_that_never_meet()
    d = call_dispersion(system, fit)
    assert d.misfit * d.call * d.machine_speed > 2.0           # the three multiplied
    assert 1.5 - 1e-3 <= ratio.max() <= d.joint < 1.5 * 1.15     # the worst call: 1.5
    floor = d.call * d.machine_speed
    assert floor > d.joint
    assert 1 + d.excess == pytest.approx(floor)
    assert 1 + d.excess < d.misfit * d.call * d.machine_speed


def test_the_dispersion_keeps_the_product_when_it_is_smaller():
    from wcetfit.wcet.dispersion import Dispersion

    assert Dispersion(misfit=1.1, call=1.1, machine_speed=1.0, joint=1.5).excess == \
        pytest.approx(0.21)
    # the joint factor below a call at the slowest speed: that floor, 1.1 × 1.5
    assert Dispersion(misfit=1.1, call=1.1, machine_speed=1.5, joint=1.5).excess == \
        pytest.approx(0.65)
    assert Dispersion(misfit=1.1, call=1.1, machine_speed=1.5, joint=1.7).excess == \
        pytest.approx(0.7)
    assert "joint" not in Dispersion().to_dict()         # none measured: not shown


def test_joint_excess_alone():
    from wcetfit.wcet.dispersion import gumbel_quantile
    from wcetfit.wcet.margin import joint_excess

    t = np.array([[100.0, 110, 500], [200, 190, 210]])
    keep = np.array([[True, True, False], [True, True, True]])   # 500: an interrupted call
    got = joint_excess(t, keep, np.array([100.0, 200.0]), exceedance=1e-6,
                       quantile=gumbel_quantile)
    assert got == 1.1                       # few calls: the largest seen, 110/100
    assert joint_excess(t, ~np.ones_like(keep), np.array([100.0, 200.0]), exceedance=1e-6,
                        quantile=gumbel_quantile) == float("inf")    # no call: no claim


def test_the_report_says_which_factor_the_bound_took():
    from types import SimpleNamespace

    from wcetfit.report._format import dispersion_note

    w = SimpleNamespace(dispersion=0.5, exceedance=1e-6, dispersion_factors={
        "misfit": 1.3, "call": 1.2, "machine_speed": 1.2, "joint": 1.5})
    note = dispersion_note(w)
    assert note.startswith("+50.0% = a timed call over its input's prediction")
    assert "×1.500" in note and "×1.300" in note and "below the product" in note
    w.dispersion_factors["joint"] = 3.0                     # the product is smaller: kept
    assert "worst misfit of an input seen ×1.300" in dispersion_note(w).split(" × ")[0]


def test_the_headline_says_what_set_the_factor():
    """The bound's headline names what set its factor: the slowest own call it stays above
    (with that call), the joint factor of calls as timed, or the product with each part
    (a new user read "× 2.79 for single calls" where the inputs' misfit made ×1.97)."""
    from types import SimpleNamespace

    from wcetfit.report._format import dispersion_source

    w = SimpleNamespace(dispersion=1.79, dispersion_factors={
        "misfit": 1.965, "call": 1.343, "machine_speed": 1.056}, slowest_call_ticks=None,
        slowest_call_number=None)
    assert dispersion_source(w) == "for misfit ×1.97 · single calls ×1.34 · machine speed ×1.06"
    w.dispersion_factors["joint"] = 2.0
    assert dispersion_source(w).startswith("for single calls as timed (below misfit ×1.97")
    w = SimpleNamespace(dispersion=8.56, dispersion_factors={
        "misfit": 1.1, "call": 1.2, "machine_speed": 1.0, "cover": 9.56},
        slowest_call_ticks=1034.0, slowest_call_number=265)
    assert dispersion_source(w) == ("to stay above the slowest call that was the function's "
                                    "own time (input 265, 1,034 ticks)")


def test_inputs_the_fit_rejected_are_covered_by_the_dispersion():
    """A rejected outlier (here 15 % over its prediction, as zlib crc32's input 27 was
    in an end-to-end run) left the bound below its median: it was measured, so the
    dispersion must reach it; so must an input predicted short but measured long."""
    from types import SimpleNamespace

    from wcetfit.fit.result import Rejection
    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(11)
    n, r = 200, 5
    pred = rng.uniform(20_000, 40_000, n)
    pred[7] = 40_000.0
    pred[9] = 2_000.0                       # predicted far below the long calls
    ticks = pred[:, None] * (1 + np.abs(rng.normal(0, 0.004, (n, r))))
    ticks[7] *= 1.15
    ticks[9] = 41_000.0
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)))
    fit = SimpleNamespace(quantum_ticks=1.0,
                          rejected=(Rejection(7, "residual"), Rejection(9, "residual")),
                          predict=lambda counts, unknown="zero": pred)
    d = call_dispersion(system, fit)
    # the bound is the point (here the longest prediction) times the dispersion
    for i in (7, 9):
        assert pred.max() * (1 + d.excess) >= np.median(ticks[i])
    # the short input's excess counts in ticks, not as 20.5× its prediction
    assert d.misfit == pytest.approx(1 + (41_000 - 2_000) / 40_000, rel=1e-9)
    assert 1 + d.excess < 3.0
    # a larger point: the same ticks are a smaller share of it, and still covered
    d2 = call_dispersion(system, fit, point=80_000.0)
    assert d2.misfit == pytest.approx(1 + 39_000 / 80_000, rel=1e-9)
    assert 80_000.0 * (1 + d2.excess) >= np.median(ticks[9])


def test_a_short_input_measured_long_adds_its_ticks_not_its_ratio():
    """liblzma's encoder: the model missed most of one input's time (predicted 4 M
    ticks, measured 110 M), and that ratio multiplied the whole 91 M-tick point: a bound
    82× the slowest input.  The excess of an input predicted short is ticks the model
    lacks: the bound adds them (and covers the input), it does not scale by them."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(4)
    n, r = 120, 3
    pred = rng.uniform(30e6, 37e6, n)
    pred[5] = 4e6
    ticks = pred[:, None] * (1 + np.abs(rng.normal(0, 0.01, (n, r))))
    ticks[5] = [110e6, 111e6, 109e6]
    fit = SimpleNamespace(quantum_ticks=26.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)))
    point = 91e6
    d = call_dispersion(system, fit, point=point)
    assert point * (1 + d.excess) >= 111e6
    assert 1 + d.excess < 2.5, d          # not 27×
    assert d.misfit == pytest.approx(1 + (110e6 - 4e6) / point, rel=1e-6)


def test_a_short_calls_excess_counts_in_ticks_not_scaled_to_the_worst_path():
    """Call noise that is events of a fixed size in ticks (matmul: the largest excess was
    1,259 ticks at a quarter of the worst path and 965 at the worst path itself): taken
    as a ratio of the short call, it was scaled up to the worst path (×2.46, where the
    long calls alone gave ×1.64).  Relative to half the worst path it counts at most
    twice its ticks; a long call's excess stays relative to its own mean."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import CALL_NOISE_SHARE, LEVEL_QUANTILE, call_dispersion

    rng = np.random.default_rng(8)
    n, r = 400, 10
    pred = np.where(np.arange(n) % 2 == 0, 10_000.0, 40_000.0)   # a quarter, and the worst
    ticks = pred[:, None] + np.abs(rng.normal(0, 100.0, (n, r)))
    short = np.flatnonzero(pred == 10_000.0)
    # one event of 1,200 ticks (460 ns: less than any interrupt costs, so the function's
    # own time): +12 % of a short call, 3 % of the worst path
    ticks[short[0], 0] += 1_200.0
    fit = SimpleNamespace(quantum_ticks=1.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), tsc_hz=2.596e9)
    d = call_dispersion(system, fit, point=40_000.0)
    # the calls' excess does not grow with their length (the same |N(0, 100)| at both):
    # the event counts in ticks, relative to the worst path: 1,200 / 40,000
    assert d.call_growth is not None and d.call_growth < 0.5, d
    assert d.call >= 1 + 1_200.0 / 40_000.0 - 0.001
    assert d.call < 1.10, d               # not the short call's ratio, ×1.12 and beyond
    # and the bound still covers the event itself, in ticks
    assert 40_000.0 * (1 + d.excess) >= 40_000.0 + 1_200.0

    # calls whose excess is a share of their length: the short call's event counts as a
    # share too, but relative to no less than half the worst path (1,200 / 20,000)
    ticks = pred[:, None] * (1 + np.abs(rng.normal(0, 0.01, (n, r))))
    ticks[short[0], 0] += 1_200.0
    d = call_dispersion(SimpleNamespace(ticks=ticks, counts=system.counts, tsc_hz=2.596e9),
                        fit, point=40_000.0)
    assert d.call_growth is not None and d.call_growth > 0.8, d
    # the event's excess over its input's level (the upper quartile of its calls)
    excess = ticks[short[0], 0] - np.quantile(ticks[short[0]], LEVEL_QUANTILE)
    assert excess > 1_000.0
    assert d.call >= 1 + excess / (CALL_NOISE_SHARE * 40_000.0) - 1e-9


def test_call_growth_tells_events_of_a_fixed_size_from_a_share_of_the_call():
    """How a call's excess grows with its input's length decides how far a shorter
    input's excess is scaled up to the worst path (zlib adler32: the same ~1,300-tick
    largest excess at a third of the worst path and at the worst path).  The exponent is
    taken two standard errors above its estimate and kept within [0, 1]; too few calls or
    lengths too alike cannot tell (None)."""
    from wcetfit.wcet.dispersion import call_growth

    rng = np.random.default_rng(3)
    means = rng.uniform(1_000.0, 5_000.0, 500)
    fixed = rng.exponential(200.0, (500, 10))                 # events, whatever the length
    share = means[:, None] * rng.exponential(0.05, (500, 10))  # a share of the call
    g_fixed, g_share = call_growth(means, fixed), call_growth(means, share)
    assert g_fixed is not None and g_fixed < 0.3, g_fixed
    assert g_share is not None and g_share > 0.8, g_share
    # half as long a call with twice the excess: no growth, not a negative exponent
    assert call_growth(means, 1e6 / means[:, None] * rng.exponential(1.0, (500, 10))) == 0.0
    assert call_growth(means[:40], fixed[:40]) is None             # 400 calls: 2 groups
    assert call_growth(np.full(500, 3_000.0) + rng.uniform(0, 100, 500), fixed) is None


def test_a_call_slower_by_less_than_any_interrupt_is_covered():
    """A short function with quiet repeats (expat's XML_Parse on a NULL parser: 62–90
    ticks, TSC step 2): one call 28 ticks above its input's others is flagged by the
    repeat statistic's relative rule, but no interrupt costs 11 ns, so the bound's
    dispersion must cover it; a call 20,000 ticks (7.7 µs) longer is still taken for a
    preemption and left out."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(8)
    n, r = 100, 3
    pred = np.full(n, 65.0)
    ticks = 2 * np.round(rng.uniform(66, 72, (n, r)) / 2)
    ticks[53] = [68.0, 96.0, 70.0]
    ticks[60, 1] = 20_068.0
    fit = SimpleNamespace(quantum_ticks=2.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), tsc_hz=2.6e9)
    d = call_dispersion(system, fit)
    assert 65.0 * (1 + d.excess) >= 96.0
    assert 65.0 * (1 + d.excess) < 1_000
    # without the TSC rate nothing says how long an interrupt takes: as before
    old = call_dispersion(SimpleNamespace(ticks=ticks, counts=system.counts), fit)
    assert 65.0 * (1 + old.excess) < 96.0


def test_a_short_inputs_own_call_above_the_bound_is_covered():
    """The factors are taken from long calls; a short input's call that is the function's
    own time (far less above its median than an interrupt costs) must still be under the
    bound (libm's log1p: a call of 254 ticks, its input's others 76–78, a bound of 190,
    and the report blamed an interrupt).  A call 20 µs above its median is an interrupt
    and stays out."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(3)
    n, r = 200, 5
    # long inputs and short ones (below 40 TSC steps of 2 ticks: left out of the factors)
    pred = np.where(np.arange(n) < 100, 120.0, 60.0)
    ticks = np.round(pred[:, None] * (1 + np.abs(rng.normal(0, 0.01, (n, r)))))
    ticks[150] = [76, 78, 76, 224, 254]                  # own time: < 500 ns above
    ticks[160, 2] = 60 + 52_000                          # 20 µs above: an interrupt
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), tsc_hz=2.6e9)
    fit = SimpleNamespace(quantum_ticks=2.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    point = 150.0                                        # the worst path, below the call
    d = call_dispersion(system, fit, point=point)
    assert point * (1 + d.excess) >= 254
    assert d.cover == 254 / point and d.to_dict()["cover"] == d.cover
    assert point * (1 + d.excess) < 60 + 52_000          # the interrupted call stays out
    # with a point above every own call, the floor changes nothing
    far = call_dispersion(system, fit, point=10_000.0)
    assert far.cover == 1.0 and "cover" not in far.to_dict()


def test_the_call_farthest_above_its_input_is_named():
    """The dispersion names the call its extrapolation rests on most (libm's erf: one call
    of 938 ticks, its input's others 46–84, and the bound ×31.6 the path), by the input's
    number, not its row."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(4)
    n, r = 120, 5
    pred = np.full(n, 50.0)
    ticks = np.round(pred[:, None] + np.abs(rng.normal(0, 1.0, (n, r))))
    ticks[14] = [938, 84, 48, 46, 46]
    numbers = np.arange(n) + 1000
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), tsc_hz=2.6e9,
                             indices=numbers)
    fit = SimpleNamespace(quantum_ticks=2.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    d = call_dispersion(system, fit, point=60.0)
    assert d.driver["input"] == 1014 and d.driver["call_ticks"] == 938
    assert d.driver["mean_ticks"] < 938 and d.call > 5


def test_the_slowest_own_call_is_the_bracket_s_lower_end_and_the_bound_stays_above_it():
    """The slowest call that is the function's own time, as timed, with its input's number
    (the maximum observed execution time): a call a cache miss slower counts (it is below
    an interrupt's cost), one an interrupt lengthened does not, and the bound's cover keeps
    the bound above the one that counts."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(5)
    n, r = 120, 10
    pred = rng.uniform(1_000, 2_000, n)
    ticks = np.round(pred[:, None] * (1 + np.abs(rng.normal(0, 0.003, (n, r)))))
    ticks[30, 4] = np.median(ticks[30]) + 900        # 346 ns: a miss, the function's own
    ticks[60, 2] = np.median(ticks[60]) + 40_000     # 15 µs: an interrupt
    numbers = np.arange(n) + 1000
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), indices=numbers,
                             tsc_hz=2.6e9)
    fit = SimpleNamespace(quantum_ticks=2.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    d = call_dispersion(system, fit, point=float(pred.max()))
    assert d.slowest_call["input"] == 1030.0 and d.slowest_call["ticks"] == ticks[30, 4]
    # its input's other calls, for the report's "where its other calls took …"
    others = np.delete(ticks[30], 4)
    assert d.slowest_call["others_max_ticks"] == others.max()
    assert pred.max() * (1 + d.excess) >= ticks[30, 4]
    assert pred.max() * (1 + d.excess) < ticks[60, 2]


def _near_and_far(n_near: int, far_measured: float = 1.6, seed: int = 12):
    """Inputs near a worst path of 30,000 ticks that the model fits within 2 %, and
    inputs predicted at half of it that ran ``far_measured``× their prediction (fir_filter:
    the 13–16-tap inner loops, 1.6× the model, beside 32-tap filters within 2 %)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    n_far, r = 60, 8
    pred = np.concatenate([rng.uniform(24_000, 30_000, n_near),
                           rng.uniform(13_000, 16_000, n_far)])
    per_input = np.concatenate([rng.uniform(0.99, 1.02, n_near),
                                np.full(n_far, far_measured)])
    ticks = np.round(pred[:, None] * per_input[:, None]
                     * (1 + np.abs(rng.normal(0, 0.002, (pred.size, r)))))
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((pred.size, 1)),
                             indices=np.arange(pred.size) + 500, tsc_hz=2.6e9)
    fit = SimpleNamespace(quantum_ticks=2.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    return system, fit, pred, n_near


def test_the_misfit_is_the_inputs_near_the_worst_path_and_the_others_are_said():
    from wcetfit.wcet.dispersion import NEAR_SHARE, call_dispersion

    system, fit, pred, n_near = _near_and_far(40)
    point = 30_000.0
    near = call_dispersion(system, fit, point=point)
    every = call_dispersion(system, fit, point=point, misfit_scope="all")
    assert every.misfit == pytest.approx(1.6, abs=0.01) and every.scope is None
    assert near.misfit < 1.03                    # the near inputs' own misfit, not 1.6
    sc = near.scope
    assert sc.near_inputs == n_near and sc.near_share == NEAR_SHARE
    assert sc.far_inputs == 60 and sc.far_misfit == pytest.approx(1.6, abs=0.01)
    assert sc.far_input >= 500 + n_near          # named by its input number
    assert sc.far_ticks > sc.far_predicted_ticks * 1.55
    assert near.misfit == pytest.approx(sc.near_misfit)
    # every measured input stays below the bound either way
    means = np.median(system.ticks, axis=1)
    assert point * (1 + near.excess) >= means.max()
    assert near.excess < every.excess


def test_too_few_inputs_near_the_worst_path_keep_every_input_s_misfit():
    from wcetfit.wcet.dispersion import MIN_NEAR_INPUTS, call_dispersion

    system, fit, _, _ = _near_and_far(MIN_NEAR_INPUTS - 1)
    d = call_dispersion(system, fit, point=30_000.0)
    assert d.scope is None and d.misfit == pytest.approx(1.6, abs=0.01)


def test_an_input_measured_above_the_worst_path_counts_wherever_it_was_predicted():
    """The model's worst path is then not the worst: its misfit counts (in ticks, as a
    short input's does), whatever the near inputs show."""
    from wcetfit.wcet.dispersion import call_dispersion

    system, fit, pred, n_near = _near_and_far(40, far_measured=2.4)
    point = 30_000.0
    d = call_dispersion(system, fit, point=point)
    means = np.median(system.ticks, axis=1)
    assert means[n_near:].min() > point          # 2.4 × 13–16 k
    assert d.misfit > 1.1 and d.scope is None
    assert point * (1 + d.excess) >= means.max()


def test_the_report_says_what_the_near_misfit_assumes_and_the_bound_without_it():
    from types import SimpleNamespace

    from wcetfit.report._format import dispersion_note, misfit_scope_note
    from wcetfit.wcet.dispersion import MisfitScope

    sc = MisfitScope(near_inputs=98, near_share=0.75, near_misfit=1.021, far_inputs=47,
                     far_misfit=1.568, far_input=497, far_ticks=22_410.0,
                     far_predicted_ticks=14_292.0)
    w = SimpleNamespace(dispersion=1.021 * 1.2 - 1, exceedance=1e-6, point_ticks=27_000.0,
                        margin_ticks=100.0, misfit_scope=sc.to_dict(),
                        dispersion_factors={"misfit": 1.021, "call": 1.2,
                                            "machine_speed": 1.0})
    note = misfit_scope_note(w, 2.6e9)
    assert "98 inputs predicted within 25% of it" in note and "×1.021" in note
    assert "47 inputs" in note and "×1.57" in note and "input 497" in note
    assert "the upper quartile of its calls 22,410 ticks against 14,292 predicted" in note
    # the bound without the assumption: (point + margin) × 1.568 × 1.2
    assert f"{27_100 * 1.568 * 1.2:,.0f} ticks" in note
    assert "[wcet] misfit = \"all\"" in note
    assert "the 98 inputs near the worst path ×1.021" in dispersion_note(w)
    assert misfit_scope_note(SimpleNamespace(misfit_scope={}), 2.6e9) is None


def test_nothing_is_said_to_rest_on_the_near_misfit_when_the_bound_is_the_same():
    """png_sig_cmp: the report offered "[wcet] misfit = "all" takes them: a bound of 267.5
    ticks", the bound it had printed; the factor was set either way by what calls showed
    as timed (the joint factor, the cover), not by the misfit."""
    from wcetfit.wcet.dispersion import call_dispersion

    system, fit, pred, n_near = _near_and_far(40, far_measured=1.2)
    # one call of a near input at twice the worst path (below what an interrupt costs
    # here): the calls as timed set the factor, whichever misfit is taken
    system.ticks[0, 0] = 30_000.0 * 2.0
    system.tsc_hz = 1e12                        # 30,000 ticks are 30 ns here
    # (the events floor off: on a 30 ns call it is above every factor, and it takes the
    # misfit as it is scoped)
    d = call_dispersion(system, fit, point=30_000.0, event_floor=False)
    assert d.cover >= 1.9 and d.scope is None
    assert d.excess == call_dispersion(system, fit, point=30_000.0, event_floor=False,
                                       misfit_scope="all").excess


def test_the_joint_factor_is_never_below_a_call_at_the_slowest_speed():
    """chain, deterministic code: calls as timed gave ×1.048 and held the bound at 1.021×
    the slowest input; a fresh run in the same session, its slowest period ×1.053 against
    the timing run's ×1.038, had a call 0.35 % above the bound.  A call's excess and a
    slow period are independent events: a longer run brings them together."""
    from wcetfit.report._format import dispersion_note, dispersion_source
    from wcetfit.wcet.dispersion import Dispersion, factor_setter
    from types import SimpleNamespace

    d = Dispersion(misfit=1.0071, call=1.0458, machine_speed=1.0382, joint=1.0476,
                   cover=1.043)
    assert 1 + d.excess == pytest.approx(1.0458 * 1.0382)
    assert factor_setter(d.to_dict()) == "calls"
    w = SimpleNamespace(dispersion=d.excess, exceedance=1e-6, dispersion_factors=d.to_dict(),
                        slowest_call_ticks=None, slowest_call_number=None)
    assert dispersion_source(w) == ("for single calls (×1.05) at the machine's slowest speed "
                                    "(×1.04); calls as timed, misfit included, showed less")
    assert "calls as timed showed ×1.048" in dispersion_note(w)
    # a joint factor above the floor and below the product is still taken (adpcm)
    a = Dispersion(misfit=1.404, call=1.206, machine_speed=1.050, joint=1.646)
    assert 1 + a.excess == pytest.approx(1.646) and factor_setter(a.to_dict()) == "joint"


def test_the_report_says_how_a_calls_excess_was_taken_to_the_worst_path():
    """The call factor depends on how the excess grows with length; the report's
    dispersion line says which, and when the calls could not tell."""
    from wcetfit.report._format import growth_note

    assert "in ticks" in growth_note(0.0)
    assert "share of the call: the calls' excess grew" in growth_note(1.0)
    assert "to the power 0.52" in growth_note(0.52)
    assert "too few calls or lengths to tell" in growth_note(None)


def _exponential_tail(seed: int):
    """Calls of one length whose excess is exponential (a law in the Gumbel domain the
    extreme-value fit assumes), small enough for every call to count as the function's
    own time (under 500 ns above its input's median); and the law, to draw fresh calls."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    n, r, path = 500, 10, 30_000.0
    pred = np.full(n, path)

    def law(shape):
        return path * (1 + 0.002 * rng.exponential(1.0, shape))

    system = SimpleNamespace(ticks=law((n, r)), counts=np.zeros((n, 1)), tsc_hz=2.6e9)
    fit = SimpleNamespace(quantum_ticks=1.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    return system, fit, path, law


def test_the_exceedance_curve_passes_through_each_levels_bound_and_grows_as_calls_get_rarer():
    from wcetfit.wcet.dispersion import (CURVE_EXCEEDANCES, call_dispersion,
                                         exceedance_curve)

    # (the extreme-value part: the events floor, the same at every level, off)
    system, fit, path, _ = _exponential_tail(1)
    curve = exceedance_curve(system, fit, point=path, exceedances=CURVE_EXCEEDANCES + (3e-6,),
                             event_floor=False)
    levels = [p for p, _ in curve]
    assert levels == sorted(set(CURVE_EXCEEDANCES) | {3e-6}, reverse=True)
    for p, excess in curve:
        assert excess == call_dispersion(system, fit, exceedance=p, point=path,
                                         event_floor=False).excess
    excesses = [e for _, e in curve]
    assert all(b >= a for a, b in zip(excesses, excesses[1:]))
    assert excesses[-1] > excesses[0]          # 1e-9 extrapolates further than 1e-3


def test_the_curve_is_calibrated_where_fresh_calls_can_test_it():
    """Fresh calls of the same law, 2 million of them: above the curve's level at p about
    p of the time or less (the extreme-value fit from 5,000 calls is an estimate: a
    factor of 3 over p is its spread at 1e-5, measured over seeds), and at 1e-3 below it
    (the slowest own call, a floor, is rarer than that in 5,000 calls)."""
    from wcetfit.fit.robust import summarize_repeats
    from wcetfit.wcet.dispersion import exceedance_curve, not_interrupted

    system, fit, path, law = _exponential_tail(2)
    curve = dict(exceedance_curve(system, fit, point=path, event_floor=False))
    fresh = law((200_000, 10))
    own = not_interrupted(summarize_repeats(fresh, quantum=1.0), fresh, 2.6e9)
    assert own.all()
    for p in (1e-3, 1e-4, 1e-5):
        share = float(np.mean(fresh > path * (1 + curve[p])))
        assert share <= 3 * p, (p, share)
        assert share >= p / 30, (p, share)     # an estimate, not a cover at any price


def test_the_headline_gives_the_exceedance_and_the_bound_at_the_curves_ends():
    from types import SimpleNamespace

    from wcetfit.report._format import curve_level_note, curve_note

    w = SimpleNamespace(exceedance=1e-6, exceedance_curve=(
        (1e-3, 110_713.0), (1e-6, 118_818.0), (1e-9, 125_322.0)))
    note = curve_note(w, 2.596e9)
    assert note == ("Exceedance 1e-06 per call ([wcet] exceedance); at 1e-03: 110,713 ticks "
                    "(42,648 ns), at 1e-09: 125,322 ticks (48,275 ns)")
    assert curve_level_note(w, 1e-6) == "the bound above ([wcet] exceedance)"
    # the slowest own call or the misfit set it: nothing extrapolated moves it
    w.exceedance_curve = ((1e-3, 5_000.0), (1e-6, 5_000.0), (1e-9, 5_000.0))
    assert curve_note(w, None).endswith("; the same from 1e-03 to 1e-09: what sets it is "
                                        "measured, not extrapolated")
    w.exceedance_curve = ()
    assert curve_note(w, None) is None


def test_factors_from_too_few_calls_are_said_not_to_reach_the_exceedance():
    """Below 500 calls on the long paths the extreme-value fit does not run: the factors
    are the largest seen, the curve is flat, and the report must not read as a bound for
    1e-6 per call (libm's fmod rested on 347 long calls, zlib's compress2 on 89)."""
    from types import SimpleNamespace

    from wcetfit.report._format import curve_note
    from wcetfit.wcet.dispersion import (MIN_EXTRAPOLATED_CALLS, call_dispersion,
                                         exceedance_curve)

    rng = np.random.default_rng(8)
    pred = np.concatenate([np.full(40, 30_000.0), np.full(160, 2_000.0)])   # few long ones
    ticks = pred[:, None] * (1 + 0.002 * rng.exponential(1.0, (200, 8)))
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((200, 1)), tsc_hz=2.6e9)
    fit = SimpleNamespace(quantum_ticks=1.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    d = call_dispersion(system, fit, point=30_000.0)
    assert d.calls == 40 * 8 < MIN_EXTRAPOLATED_CALLS and not d.extrapolated
    curve = exceedance_curve(system, fit, point=30_000.0)
    assert len({e for _, e in curve}) == 1
    w = SimpleNamespace(exceedance=1e-6, dispersion_calls=d.calls, exceedance_curve=tuple(
        (p, 30_000.0 * (1 + e)) for p, e in curve))
    assert curve_note(w, None) == (
        "Not extrapolated to 1e-06 per call ([wcet] exceedance): the largest of 320 calls "
        "of the long paths (inputs predicted or measured at a quarter of the longest "
        "prediction or more), fewer than an extreme-value fit needs (500): more inputs near "
        "the worst path, or more repeats, allow it")
    many = _exponential_tail(1)
    assert call_dispersion(many[0], many[1], point=many[2]).extrapolated


def test_the_full_tables_do_not_claim_an_exceedance_the_calls_cannot_support():
    """libbz2's compress rested on 379 long calls: the one-screen report said "not
    extrapolated", while --full listed seven identical bounds "for this exceedance
    probability per call" from 1e-3 to 1e-9 and a call factor "passed with probability
    ≤ 1e-06 per call (extreme-value fit)".  Now the levels are left out and the factor
    says it is the largest of the calls seen."""
    from types import SimpleNamespace

    from wcetfit.report._format import curve_levels, dispersion_note

    curve = tuple((p, 3_694_157.0) for p in (1e-3, 1e-6, 1e-9))
    factors = {"misfit": 1.3, "call": 1.197, "machine_speed": 1.05}
    w = SimpleNamespace(exceedance=1e-6, dispersion_calls=379, exceedance_curve=curve,
                        dispersion=0.63, dispersion_factors=factors, call_growth=None)
    assert curve_levels(w) == ()
    note = dispersion_note(w)
    assert "the largest of 379 calls, not extrapolated to 1e-06 per call" in note
    assert "probability" not in note and "extreme-value fit;" not in note
    w.dispersion_calls = 5_000
    assert curve_levels(w) == curve
    assert "passed with probability ≤ 1e-06 per call ×1.197 (extreme-value fit;" in \
        dispersion_note(w)


def test_calls_in_two_modes_are_measured_from_the_slow_modes_level():
    """An input timed ten times over can run in two modes (the branch predictors learn
    it: isort's searched inputs, calls of ~27,000 and ~44,000 ticks, predicted 43,932).
    Over the input's mean, the slow mode's ordinary calls were an excess of 27 % and the
    call factor ×1.75; over the upper quartile of its calls, a call's excess is what lies
    above the slow mode, and the bound still covers every call."""
    from types import SimpleNamespace

    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(11)
    n, r = 500, 10
    pred = rng.uniform(30_000.0, 44_000.0, n)
    slow = pred[:, None] * (1 + np.abs(rng.normal(0, 0.005, (n, r))))
    # a fifth of the inputs run 40 % of their calls in a fast mode at 62 % of the time
    fast = (np.arange(n) % 5 == 0)[:, None] & (rng.random((n, r)) < 0.4)
    ticks = np.where(fast, 0.62 * slow, slow)
    fit = SimpleNamespace(quantum_ticks=1.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), tsc_hz=2.596e9)
    point = float(pred.max())
    d = call_dispersion(system, fit, point=point)
    assert d.call < 1.06, d                       # the slow mode's spread, ~1 %
    assert d.misfit < 1.03, d
    assert point * (1 + d.excess) >= ticks.max()
    # the driver names the call, its input's mean and its level
    row = int(d.driver["input"])
    assert d.driver["level_ticks"] == pytest.approx(np.quantile(ticks[row], 0.75))
    assert d.driver["mean_ticks"] == pytest.approx(ticks[row].mean(), rel=0.02)


def test_an_inputs_level_is_the_upper_quartile_of_its_own_calls():
    """The level is the upper quartile of the input's calls left after interrupts; with
    fewer than four it is the input's mean (a quartile of three is nearly the slowest)."""
    from wcetfit.wcet.dispersion import input_levels

    calls = np.array([[1.0, 2.0, 3.0, 4.0, 5.0],
                      [10.0, np.nan, 30.0, np.nan, 20.0],
                      [np.nan] * 5])
    levels = input_levels(calls, np.array([3.0, 20.0, 7.0]))
    assert levels[0] == 4.0                       # numpy's linear quartile of 1..5
    assert levels[1] == 20.0                      # three calls: the mean given
    assert levels[2] == 7.0                       # none: the mean given


def test_the_bound_stays_above_a_call_a_check_missed_of_an_adopted_input():
    """An adopted input's calls timed again can all be faster than the call that made the
    check miss it (libbrotlidec's decoder: 198,146 ticks in the check, its calls timed
    again below 136,000, and the bound 136,367).  The check's call, at the bound's
    machine speed, is the slowest own call then, and the cover holds the bound above it."""
    from types import SimpleNamespace

    from wcetfit.numbering import ADOPT_BASE
    from wcetfit.search.store import AdoptedCall
    from wcetfit.wcet.dispersion import call_dispersion

    rng = np.random.default_rng(3)
    n, r = 200, 5
    pred = rng.uniform(50_000.0, 100_000.0, n)
    ticks = pred[:, None] * (1 + np.abs(rng.normal(0, 0.005, (n, r))))
    fit = SimpleNamespace(quantum_ticks=1.0, rejected=(),
                          predict=lambda counts, unknown="zero": pred)
    indices = np.arange(n)
    indices[-1] = ADOPT_BASE
    system = SimpleNamespace(ticks=ticks, counts=np.zeros((n, 1)), tsc_hz=2.596e9,
                             indices=indices)
    point = float(pred.max())
    plain = call_dispersion(system, fit, point=point)
    assert point * (1 + plain.excess) < 150_000.0 and "check_seed" not in plain.slowest_call
    missed = AdoptedCall(ADOPT_BASE, 2001, 17, 198_146.0, 190_000.0)
    d = call_dispersion(system, fit, point=point, adopted_calls=(missed,))
    assert d.slowest_call == {"input": float(ADOPT_BASE), "ticks": 190_000.0,
                              "check_seed": 2001.0, "fresh_input": 17.0,
                              "as_timed_ticks": 198_146.0}
    assert point * (1 + d.excess) >= 190_000.0
    # one below the slowest own call changes nothing
    low = AdoptedCall(ADOPT_BASE, 2001, 17, 2_000.0, 1_000.0)
    assert call_dispersion(system, fit, point=point, adopted_calls=(low,)).slowest_call \
        == plain.slowest_call


def test_the_report_names_the_check_that_timed_the_call_the_bound_is_held_above():
    """Where the slowest own call is a check's call of an adopted input, the report says
    which check timed it, not the repeat statistic's rule."""
    from types import SimpleNamespace

    from wcetfit.numbering import ADOPT_BASE
    from wcetfit.report._format import OWN_CALL_RULE, own_call_note

    checked = SimpleNamespace(slowest_call_number=ADOPT_BASE + 1, slowest_call_check=(2001, 17))
    note = own_call_note(checked)
    assert note.startswith("timed by `wcetfit check --seed 2001` (its fresh input 17, adopted "
                           "as adopted input 1)"), note
    plain = SimpleNamespace(slowest_call_number=5, slowest_call_check=None)
    assert own_call_note(plain) == f"{OWN_CALL_RULE}, input 5"


def test_a_call_of_a_few_dozen_ticks_is_bounded_with_one_event_short_of_an_interrupt():
    """libpng's png_get_uint_32: 5,000 calls of 52–78 ticks and one of 182 made a bound of
    182.8 ticks, the slowest call seen, which no extreme-value fit of such calls raises; a
    fresh check met a call of 468 ticks, the function's own time by the interrupt rule
    (under 500 ns above its input's median).  The bound is never below the worst path
    plus one event short of an interrupt; on long calls that floor is below the factors."""
    from types import SimpleNamespace

    from wcetfit.report._format import dispersion_note, dispersion_source
    from wcetfit.wcet.dispersion import MIN_INTERRUPT_NS, call_dispersion, factor_setter

    rng = np.random.default_rng(3)
    hz = 2.6e9
    event = MIN_INTERRUPT_NS * 1e-9 * hz

    def system(path, ticks):
        pred = np.full(ticks.shape[0], path)
        return (SimpleNamespace(ticks=ticks, counts=np.zeros((ticks.shape[0], 1)), tsc_hz=hz),
                SimpleNamespace(quantum_ticks=26.0, rejected=(),
                                predict=lambda counts, unknown="zero": pred))

    short = 26.0 * rng.choice([2, 3], size=(500, 10), p=[0.6, 0.4])
    short[7, 3] = 182.0
    s, fit = system(72.6, short)
    d = call_dispersion(s, fit, point=72.6)
    f = d.to_dict()
    assert factor_setter(f) == "events"
    assert 72.6 * (1 + d.excess) == pytest.approx(72.6 * d.misfit + event)
    assert 72.6 * (1 + d.excess) > 468.0
    # without the floor, what the calls seen show: above the slowest of them, far below
    # the fresh call of 468 ticks
    without = call_dispersion(s, fit, point=72.6, event_floor=False)
    assert 182.0 <= 72.6 * (1 + without.excess) < 300.0
    w = SimpleNamespace(dispersion=d.excess, dispersion_factors=f, exceedance=1e-6,
                        dispersion_calls=d.calls, call_growth=d.call_growth)
    assert dispersion_source(w).startswith("to cover one event short of an interrupt")
    assert "plus one event short of an interrupt (500 ns)" in dispersion_note(w)
    # a call of 30,000 ticks with the noise of real calls (up to ~1,300 ticks above its
    # input's level, as the bench's targets showed): the factors are above the floor
    long = 30_000.0 + rng.exponential(200.0, size=(500, 10))
    s, fit = system(30_000.0, long)
    d = call_dispersion(s, fit, point=30_000.0)
    assert factor_setter(d.to_dict()) != "events" and d.events < 1 + d.excess
