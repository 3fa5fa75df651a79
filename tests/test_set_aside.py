"""The calls the bound takes for interrupts, against the interrupts that can explain them
(wcetfit.wcet.set_aside), and how the report says it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

HZ = 2.596e9


def _two_modes(share: float, seed: int = 5):
    rng = np.random.default_rng(seed)
    base = rng.uniform(15_000, 25_000, 500)[:, None] * (1 + rng.normal(0, 0.003, (500, 10)))
    slow = rng.random(base.shape) < share
    return base * np.where(slow, 1.6, 1.0), slow


def _system(ticks):
    return SimpleNamespace(ticks=ticks, tsc_hz=HZ, indices=np.arange(ticks.shape[0]) + 1000)


def test_a_second_mode_is_beyond_the_rate_and_named():
    from wcetfit.fit.robust import summarize_repeats
    from wcetfit.wcet.set_aside import calls_set_aside

    ticks, slow = _two_modes(0.1)
    a = calls_set_aside(_system(ticks), summarize_repeats(ticks, quantum=26.0), ticks)
    assert a is not None and a.beyond_rate
    assert a.calls == ticks.size and a.preempted == 0
    # the slow mode's calls are those set aside (a few of them may be kept as the input's
    # own where its calls are mostly slow)
    assert 0.8 * slow.sum() <= a.interrupted <= slow.sum()
    # calls of ~8 µs, 5,000 of them: about 40 interrupts at 1,000 per second
    assert 35 < a.expected < 45
    assert a.ticks == tuple(sorted(a.ticks, reverse=True))
    row = int(np.argwhere(ticks == a.ticks[0])[0][0])
    assert a.slowest_input == row + 1000
    assert a.above(a.ticks[0]) == 0 and a.above(a.ticks[2] - 1e-6) == 3
    d = a.to_dict(a.ticks[4] - 1e-6)
    assert d["above_bound"] == 5 and d["beyond_rate"] and d["slowest_input"] == row + 1000


def test_a_few_interrupts_are_within_the_rate_and_preemptions_apart():
    from wcetfit.fit.robust import summarize_repeats
    from wcetfit.wcet.set_aside import calls_set_aside

    ticks, _ = _two_modes(0.0)
    rng = np.random.default_rng(1)
    hit = rng.choice(ticks.size, 25, replace=False)
    ticks.flat[hit[:20]] += 30e-6 * HZ           # interrupts: 30 µs each
    ticks.flat[hit[20:]] += 4e-3 * HZ            # scheduler slices: 4 ms
    a = calls_set_aside(_system(ticks), summarize_repeats(ticks, quantum=26.0), ticks)
    assert a.interrupted == 20 and a.preempted == 5
    assert not a.beyond_rate
    # without a TSC rate there is no interrupt rule in ticks
    no_rate = SimpleNamespace(ticks=ticks, tsc_hz=None)
    assert calls_set_aside(no_rate, summarize_repeats(ticks, quantum=26.0), ticks) is None


def test_the_report_lists_it_among_what_the_bound_rests_on():
    from wcetfit.report import _format as F

    base = {"calls": 2200, "interrupted": 136, "preempted": 0, "expected": 11.7,
            "rate_hz": 1000.0, "slowest_ticks": 413374.0, "slowest_input": 104}
    w = SimpleNamespace(set_aside=dict(base, beyond_rate=True, above_bound=0))
    text = F.set_aside_note(w, HZ)
    assert text.startswith("136 of 2,200 timed calls (6.2%) taken for interrupts"), text
    assert "explain about 12" in text and "all below the bound" in text, text
    assert "input 104, 413,374 ticks (159,2" in text, text
    w = SimpleNamespace(set_aside=dict(base, beyond_rate=True, above_bound=3))
    assert "3 of them above the bound" in F.set_aside_note(w, HZ)
    assert "3 above the bound" in F.set_aside_note(w, HZ, short=True)
    # interrupts explain them: nothing to rest on
    w = SimpleNamespace(set_aside=dict(base, interrupted=12, beyond_rate=False))
    assert F.set_aside_note(w, HZ) is None
    assert F.set_aside_note(SimpleNamespace(set_aside={}), HZ) is None
