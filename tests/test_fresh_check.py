"""`wcetfit check`: fresh calls against the bound, and why a call is above it.

Synthetic calls of known means (the truth: which calls were slowed by the machine, which
inputs the model misses, which calls were interrupted) for wcetfit.wcet.fresh; the command
end to end on zlib's ``crc32`` (skipped, saying so, where the system's zlib is absent)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wcetfit.wcet.fresh import check_fresh, speed_to_declare

TSC_HZ = 2.596e9


def _calls(seed: int = 3, n: int = 300, r: int = 10):
    """Calls of inputs whose means are 20k–40k ticks, a little noise, on a TSC of step 26."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(20_000, 40_000, n)
    noise = 1 + np.abs(rng.normal(0, 0.004, (n, r)))
    return means, means[:, None] * noise


def _q(t):
    return np.round(t / 26) * 26


def test_a_slower_period_of_the_machine_is_told_from_a_model_miss():
    """Two and a half passes of the run 1.4× slower (as this VM does for seconds): calls
    above a bound made for ×1.02 are all below it at ×1.02, and the speed to declare
    covers the period."""
    means, t = _calls()
    speed = np.ones_like(t)
    speed[150:, 3] = speed[:, 4] = speed[:80, 5] = 1.4
    ticks = _q(t * speed)
    bound = 1.05 * means.max()
    c = check_fresh("f", 9, np.arange(len(means)), ticks, bound_ticks=bound, bound_speed=1.02,
                    tsc_hz=TSC_HZ)
    assert c.calls == ticks.size and c.interrupted == 0 and c.repeats == 10
    assert abs(c.fresh_speed - 1.4) < 0.03
    # (a reading within one TSC step of the bound is the timer's resolution, not above it)
    truly_above = int((ticks > bound + 26).sum())
    assert c.above == truly_above > 0 and not c.covered
    assert c.unresolved == int(((ticks > bound) & (ticks <= bound + 26)).sum())
    assert c.above_at_bound_speed == 0 and c.slower_machine
    declare = speed_to_declare(c)
    assert declare >= 1.4 and declare * 20 == pytest.approx(round(declare * 20))
    # the declared speed's bound (the bound scales by declared ÷ covered) covers every call
    assert bound * declare / 1.02 >= ticks.max()
    from wcetfit.cli.check import describe
    text = describe(c, TSC_HZ)
    assert f"NOT COVERED: {truly_above} of {ticks.size:,}" in text
    assert "the machine ran slower than the bound was made for, the model held" in text
    assert f"declare [wcet] machine_speed = {declare:g} in wcetfit.toml" in text


def test_an_input_the_model_misses_is_above_at_the_bounds_own_speed():
    means, t = _calls(seed=4)
    t[7] = 1.3 * means.max()            # an input far above the model's worst path
    ticks = _q(t)
    bound = 1.05 * means.max()
    c = check_fresh("f", 9, np.arange(len(means)) + 1000, ticks, bound_ticks=bound,
                    bound_speed=1.0, tsc_hz=TSC_HZ)
    assert c.above == c.above_at_bound_speed == 10 and not c.slower_machine
    assert c.slowest.input == 1007 and speed_to_declare(c) is None
    # the missed input's slowest call, what its adopted row's bound must stay above
    assert c.missed_inputs == (1007,) and [m.input for m in c.missed_calls] == [1007]
    assert c.missed_calls[0].ticks == ticks[7].max()
    assert bound < c.missed_calls[0].at_bound_speed <= c.missed_calls[0].ticks
    assert c.to_dict()["missed_calls"][0]["input"] == 1007
    from wcetfit.cli.check import describe
    text = describe(c, TSC_HZ)
    assert "10 of them are above it at the bound's own speed: the model misses" in text
    assert "machine_speed" not in text and "fresh input 1007 (seed 9)" in text
    # the command it gives reads all the fresh inputs again (without --inputs it read
    # [measure] inputs of them: brotli's 80 of 200, and the missed one was not among them)
    assert "`wcetfit check --seed 9 --inputs 300 --adopt`" in " ".join(text.split())


def test_interrupted_calls_are_left_out_as_the_bound_leaves_them_a_cheap_excess_is_not():
    """A call 40 µs above its input's median is an interrupt (the bound's rule): counted,
    not compared.  A call above the bound by less than an interrupt costs above its input's
    median is the function's own time: it is a call the bound must cover."""
    means, t = _calls(seed=5)
    ticks = _q(t)
    bound = 1.02 * ticks.max()
    ticks[11, 2] += _q(40e-6 * TSC_HZ)                  # an interrupt: 40 µs
    ticks[12, :] = _q(bound - 300)                      # an input just below the bound ...
    ticks[12, 3] = _q(bound + 260)                      # ... one call 216 ns above the rest
    c = check_fresh("f", 9, np.arange(len(means)), ticks, bound_ticks=bound,
                    bound_speed=1.0, tsc_hz=TSC_HZ)
    assert c.interrupted == 1 and c.above == 1 and c.above_at_bound_speed == 1
    assert c.slowest.input == 12 and c.slowest.ticks == ticks[12, 3]
    # the interrupted call above the bound is said, with its input
    assert c.interrupted_above == 1 and c.slowest_interrupted.input == 11
    from wcetfit.cli.check import describe
    lines = describe(c, TSC_HZ).splitlines()
    # on the verdict's own line, and the rule on the next
    verdict = next(ln for ln in lines if "NOT COVERED" in ln)
    assert verdict.endswith(f"1 taken for interrupts, left out, 1 of them ABOVE the bound "
                            f"(the slowest {verdict.split('(the slowest ')[1]}")
    assert "fresh input 11)" in verdict
    rule = lines[lines.index(verdict) + 1]
    assert rule.strip() == ("(taken for interrupts, as the bound takes them: far from their "
                            "input's other calls and at least 500 ns above their median, or "
                            "preempted: over twice their input's fastest call and 100 µs "
                            "above it)")


def test_an_input_most_of_whose_calls_were_preempted_is_not_a_model_miss():
    """libbz2's compress checked beside a test suite: one input's calls took 11.6, 1.0,
    11.5, 22.1 and 1.0 M ticks.  Judged against their median (a preempted call's) the
    three slow ones were the function's own time, and the check said the model missed
    that input.  A call over twice its input's fastest and 100 µs above it is preempted."""
    means, t = _calls(seed=6, r=5)
    ticks = _q(t)
    bound = 1.3 * ticks.max()
    ticks[7] = [11_591_788, 994_630, 11_540_594, 22_096_516, 1_045_148]
    bound = max(bound, 2_000_000.0)
    c = check_fresh("f", 9, np.arange(len(means)), ticks, bound_ticks=bound,
                    bound_speed=1.0, tsc_hz=TSC_HZ)
    assert c.covered and c.above == 0
    assert c.interrupted == 3 and c.interrupted_above == 3
    # calls less than twice their input's fastest are the function's own, most of them
    # slow or not
    ticks[7] = [1_900_000, 994_630, 1_900_000, 1_900_000, 1_045_148]
    c = check_fresh("f", 9, np.arange(len(means)), ticks, bound_ticks=1_500_000.0,
                    bound_speed=1.0, tsc_hz=TSC_HZ)
    assert not c.covered and c.slowest.input == 7 and c.slowest.ticks == 1_900_000


def test_nothing_timed_is_not_covered():
    c = check_fresh("f", 1, np.arange(3), np.full((3, 4), np.nan), bound_ticks=100.0,
                    bound_speed=1.0, tsc_hz=TSC_HZ, failed_inputs=(0, 1, 2))
    assert c.calls == 0 and c.slowest is None and c.failed_inputs == (0, 1, 2)


LIBZ = Path("/lib/x86_64-linux-gnu/libz.so.1")


def _wcetfit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True)


@pytest.mark.slow
@pytest.mark.skipif(not LIBZ.exists(), reason="the system's libz.so.1 is absent: the check "
                    "is tested on synthetic calls only (this file's other tests)")
def test_check_times_fresh_crc32_inputs_that_do_not_join_the_fit(tmp_path):
    from smalltarget import zlib_crc32_target
    from wcetfit.cli import main

    d = zlib_crc32_target(tmp_path / "crc", 4000, inputs=60, repeats=5)
    # nothing measured yet: one line, exit 2
    res = _wcetfit("check", str(d), "--inputs", "5")
    assert res.returncode == 2 and res.stderr.startswith("error: ") \
        and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert main(["analyze", str(d), "--no-wait", "--json", str(tmp_path / "a.json")]) == 0
    bound = json.loads((tmp_path / "a.json").read_text())["functions"][0]["wcet"]["ipet_ticks"]

    res = _wcetfit("check", str(d), "--inputs", "40", "--seed", "77", "--json",
                   str(tmp_path / "c.json"))
    assert res.returncode in (0, 1), res.stderr
    out = json.loads((tmp_path / "c.json").read_text())
    assert out["schema"] == "wcetfit.check/1" and out["seed"] == 77
    (c,) = out["checks"]
    assert c["function"] == "crc32" and c["bound_ticks"] == pytest.approx(bound)
    assert c["inputs"] + len(c["failed_inputs"]) == 40 and c["repeats"] == 5
    # the exit status and the text say what the JSON says: covered in time, and no loop
    # run further than the bound takes (counted: a longer fresh input than the training's
    # longest runs crc32's loops beyond their observed bounds)
    assert (res.returncode == 0) == (c["covered"] and not c["loops_beyond"])
    assert ("BEYOND THE BOUND'S LOOP BOUNDS" in res.stdout) == bool(c["loops_beyond"])
    for b in c["loops_beyond"]:
        assert b["seen"] > b["bound"] and b["function"].startswith("crc32"), b
    assert (c["slowest"]["ticks"] <= bound) == c["covered"]
    first = res.stdout.splitlines()[:2]
    assert first[0].startswith("crc32: 40 fresh inputs (seed 77) × 5 calls timed now, "
                               "against the bound "), res.stdout
    assert ("covered: every one of" if c["covered"] else "NOT COVERED:") in first[1]
    # the slowest call's input in short: seed 77's input of that number (its length is
    # generate()'s first draw from that input's generator)
    import numpy as np
    n = int(np.random.default_rng([77, c["slowest"]["input"]]).integers(0, 4000))
    assert c["slowest_arguments"].endswith(f", {n})") and \
        f"unsigned char[{max(n, 1)}]" in c["slowest_arguments"], c
    assert f"    arguments {c['slowest_arguments']}" in res.stdout

    # the fresh inputs stayed out of the fit: the bound is the same, on the same 60 inputs
    assert main(["report", str(d), "--json", str(tmp_path / "r.json")]) == 0
    r = json.loads((tmp_path / "r.json").read_text())["functions"][0]
    assert r["wcet"]["ipet_ticks"] == pytest.approx(bound)
    # the same seed again reuses its stored times, and says they are not of this session
    res = _wcetfit("check", str(d), "--inputs", "40", "--seed", "77")
    assert "stored by an earlier check" in res.stdout.splitlines()[0], res.stdout
    # more of them: the rest are timed now, and said so (a new user read "500 … stored by
    # an earlier check" where 300 had just been timed)
    res = _wcetfit("check", str(d), "--inputs", "50", "--seed", "77")
    assert "50 fresh inputs (seed 77) × 5 calls timed now (40 of them stored by an earlier " \
           "check)" in " ".join(res.stdout.split()), res.stdout
    assert "the stored times are of that session's machine" in res.stdout
    assert _wcetfit("check", str(d), "--inputs", "0").returncode == 2
    # the seed the bound was made from is no fresh input: refused, one line
    res = _wcetfit("check", str(d), "--seed", "1")
    assert res.returncode == 2 and res.stderr.startswith("error: --seed 1 is the seed of the "
                                                         "measurements the bound is made from")


def test_a_reading_within_one_tsc_step_above_the_bound_is_not_a_miss():
    """libpng's png_get_uint_31: calls of 52, 78 and 104 ticks on a TSC of step 26, a bound
    of 95.4 ticks; five readings of 104 were "not covered", "the model misses those
    inputs".  A reading is the call's time to within a step: one step above the bound is
    not told apart from a call at it.  Said, and not counted as above."""
    rng = np.random.default_rng(4)
    ticks = rng.choice([52.0, 78.0], size=(200, 10), p=[0.3, 0.7])
    ticks[[3, 50, 120], [1, 4, 7]] = 104.0                     # one step above 95.4
    c = check_fresh("f", 9, np.arange(200), ticks, bound_ticks=95.4, bound_speed=1.0,
                    tsc_hz=TSC_HZ)
    assert c.covered and c.above == 0 and c.unresolved == 3 and c.quantum_ticks == 26.0
    from wcetfit.cli.check import describe
    text = " ".join(describe(c, TSC_HZ).split())
    assert "covered: every one of the 2,000 calls" in text
    assert ("3 call(s) read above the bound by no more than one TSC step (26 ticks), the "
            "timer's resolution") in text
    # two steps above is above
    ticks[7, 0] = 130.0
    c = check_fresh("f", 9, np.arange(200), ticks, bound_ticks=95.4, bound_speed=1.0,
                    tsc_hz=TSC_HZ)
    assert not c.covered and c.above == 1 and c.missed_inputs == (7,)


def test_one_call_far_above_its_inputs_others_is_not_a_model_miss():
    """libtasn1's asn1_get_length_der, a 40 ns function: one call of 1,248 ticks among
    calls of 52–104 (less than an interrupt costs above its input's median, so the
    function's own time) against a bound of 415 was "the model misses those inputs", and
    --adopt taught the fit nothing.  An input whose calls' median is below the bound is a
    single call's excess, said so."""
    rng = np.random.default_rng(5)
    t = _q(np.full((200, 10), 78.0) + rng.choice([-26.0, 0.0, 26.0], (200, 10)))
    t[193, 4] = 1_248.0
    c = check_fresh("f", 9, np.arange(200), t, bound_ticks=415.0, bound_speed=1.0,
                    tsc_hz=TSC_HZ)
    assert c.missed_inputs == (193,) and c.single_call_inputs == (193,)
    from wcetfit.cli.check import describe
    text = " ".join(describe(c, TSC_HZ).split())
    assert "each a single call of an input whose calls' median is below it (fresh input " \
           "193: 1,248 ticks" in text, text
    assert "not an input the model misses" in text and "the model misses those" not in text
    # the same with the run's load said: the same diagnosis, the load beside it
    # (png_get_uint_32: "the model misses those inputs, or the machine was slower" in the
    # check, "not an input the model misses" when its stored times were read again)
    from dataclasses import replace
    loaded = " ".join(describe(replace(c, load_warning="up to 3 other runnable process(es) "
                                       "on the machine: the times may be disturbed"),
                               TSC_HZ).split())
    assert "not an input the model misses (up to 3 other runnable process(es) on the " \
           "machine)" in loaded and "the model misses those" not in loaded
    # an input all of whose calls are above is the model's miss, as before
    t[50] = 600.0
    c = check_fresh("f", 9, np.arange(200), t, bound_ticks=415.0, bound_speed=1.0,
                    tsc_hz=TSC_HZ)
    assert c.single_call_inputs == (193,) and set(c.missed_inputs) == {50, 193}
    assert "the model misses those inputs" in describe(c, TSC_HZ)
