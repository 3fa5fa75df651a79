"""The per-call dispersion of the WCET bound: an extreme-value quantile of single calls."""

import math

import numpy as np

from wcetfit.pipeline import gumbel_quantile


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

    from wcetfit.pipeline import call_dispersion

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

    from wcetfit.pipeline import call_dispersion

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
    from wcetfit.pipeline import call_dispersion

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
