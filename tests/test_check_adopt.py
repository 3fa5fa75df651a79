"""``wcetfit check --adopt``: fresh inputs the bound missed become inputs of the training,
and the next report's bound covers them.

A known answer: a loop of ``n`` iterations where one input in twenty is 1,000 long and the
others at most 50.  The training's seed is chosen so that none of its inputs is long: the
loop's observed bound is at most 50 and the bound far below a long call.  A check with a
seed that has long inputs misses them; adopted, they are counted, timed and kept (each
with its own seed, so that it rebuilds exactly), the loop's bound becomes 1,000 and the
bound covers their calls."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from smalltarget import build_library, write_target

SOURCE = r"""
unsigned mix(const unsigned char *d, unsigned n) {
    unsigned s = 0;
    for (unsigned i = 0; i < n; i++)
        s += d[i] * 3u + (s >> 3);
    return s;
}
"""
TRAINING, FRESH = 30, 40


def _long(seed: int, i: int) -> bool:
    return np.random.default_rng([seed, i]).random() < 0.05


def _seeds() -> tuple[int, int]:
    """A training seed with no long input, and a fresh one with at least three."""
    training = next(s for s in range(1, 1000)
                    if not any(_long(s, i) for i in range(TRAINING)))
    fresh = next(s for s in range(2000, 3000)
                 if sum(_long(s, i) for i in range(FRESH)) >= 3)
    return training, fresh


def _wcetfit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True)


def test_adopted_fresh_inputs_the_bound_missed_join_the_training(tmp_path):
    training, fresh = _seeds()
    lib = build_library(tmp_path, SOURCE, "mix")
    d = write_target(tmp_path / "mix", str(lib), "mix",
                     "unsigned mix(const unsigned char *d, unsigned n);",
                     "    n = 1000 if ctx.rng.random() < 0.05 else "
                     "int(ctx.rng.integers(0, 51))\n"
                     "    data = ctx.rng.integers(0, 256, max(n, 1)).astype('uint8')\n"
                     "    return (ctx.ffi.from_buffer('unsigned char[]', data), n)",
                     inputs=TRAINING, repeats=3, seed=training)
    res = _wcetfit("analyze", str(d), "--no-wait", "--json", str(tmp_path / "a.json"))
    assert res.returncode == 0, res.stderr
    before = json.loads((tmp_path / "a.json").read_text())["functions"][0]["wcet"]

    res = _wcetfit("check", str(d), "--inputs", str(FRESH), "--seed", str(fresh),
                   "--adopt", "--no-wait", "--json", str(tmp_path / "c.json"))
    assert res.returncode == 1, res.stdout + res.stderr         # the long ones are missed
    (c,) = json.loads((tmp_path / "c.json").read_text())["checks"]
    longs = [i for i in range(FRESH) if _long(fresh, i)]
    assert set(longs) <= set(c["missed_inputs"]), (longs, c["missed_inputs"])
    # the long inputs ran the loop further than the bound takes (counted, not timed)
    assert c["loops_beyond"] and all(b["seen"] >= 999 > b["bound"] and b["source"] ==
                                     "observed" for b in c["loops_beyond"]), c["loops_beyond"]
    assert {i for b in c["loops_beyond"] for i in b["numbers"]} >= set(longs)
    assert "BEYOND THE BOUND'S LOOP BOUNDS" in res.stdout
    # the inputs above the bound, those that ran a loop further than it takes, and those
    # that ran blocks it leaves out (a long buffer's own path, where gcc vectorized it)
    beyond = {i for b in c["loops_beyond"] + c["blocks_beyond"] for i in b["numbers"]}
    assert {int(i) for i in c["adopted"]} == set(c["missed_inputs"]) | beyond
    assert f"adopted {len(c['adopted'])} of the fresh input(s) ({len(c['missed_inputs'])} " \
        f"the bound missed" in res.stdout, res.stdout

    res = _wcetfit("report", str(d), "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    after = json.loads((tmp_path / "r.json").read_text())["functions"][0]["wcet"]
    # the loop's bound is the long inputs' now (999 back edges), and the bound covers
    # their calls
    assert max(lp["per_entry"] or 0 for lp in after["loops"]) >= 999 > \
        max(lp["per_entry"] or 0 for lp in before["loops"])
    assert c["slowest"]["ticks"] > before["ipet_ticks"]
    # (their calls as timed in the training now: a fresh call of the check can be slower
    # than those, the machine's speed moves from minute to minute)
    assert after["ipet_ticks"] >= after["slowest_call"]["ticks"] and \
        after["slowest_call"]["label"].startswith("adopted input")
    # and above every call the check missed, at the bound's machine speed, even where the
    # adopted inputs' calls timed again were all faster (brotli's decoder: 198,146 ticks
    # in the check, a bound of 136,367 after adopting it)
    missed = {int(m["input"]): m for m in c["missed_calls"]}
    assert sorted(missed) == c["missed_inputs"]
    assert all(m["at_bound_speed"] > c["bound_ticks"] for m in missed.values())
    assert after["ipet_ticks"] >= max(m["at_bound_speed"] for m in missed.values())
    # 20× the loop's iterations on the worst path (the bounds' floor of one event short
    # of an interrupt is added to both, and on a call this short it is most of "before")
    assert after["point_ticks"] > 3 * before["point_ticks"]
    text = " ".join(res.stdout.split())
    assert f"{TRAINING} inputs + {len(c['adopted'])} adopted from checks" in text, text
    assert "Slowest measured input: adopted input" in text and "(adopted from a check)" in text
    # each adopted input rebuilds exactly: its arguments as the check described its own
    assert after["slowest_input"]["arguments"].endswith(", 1000)"), after["slowest_input"]

    # the same fresh inputs are not adopted twice (lzma_crc64: "+ 2 adopted from checks"
    # of one input, and a check that still missed it advised --adopt again)
    from wcetfit.pipeline import open_session
    from wcetfit.search.adopt import adopt_fresh, adopted_before
    session = open_session(str(d))
    again = adopt_fresh(session, "mix", fresh, tuple(c["missed_inputs"]), wait=False)
    assert again.numbers == {} and sorted(again.before) == sorted(int(i) for i in c["adopted"])
    assert adopted_before(session, "mix", fresh) == again.before
    session.store.lock.release()                # (the store's lock: the commands' now)
    res = _wcetfit("report", str(d))
    assert f"{TRAINING} inputs + {len(c['adopted'])} adopted from checks" in \
        " ".join(res.stdout.split())

    # a check of the training's own seed is still refused; another seed is checked as ever
    res = _wcetfit("check", str(d), "--inputs", "20", "--no-wait")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr


def test_searched_and_adopted_inputs_are_numbered_and_named_apart():
    from wcetfit.numbering import (ADOPT_BASE, REACH_BASE, SEARCH_BASE, input_label,
                                   next_number)

    stored = [SEARCH_BASE + 4, SEARCH_BASE + 9, ADOPT_BASE + 2]
    # a search after an adoption goes on from the searched inputs, not the adopted ones
    assert next_number(stored, SEARCH_BASE, ADOPT_BASE) == SEARCH_BASE + 10
    assert next_number(stored, ADOPT_BASE, REACH_BASE) == ADOPT_BASE + 3
    assert next_number([], ADOPT_BASE, REACH_BASE) == ADOPT_BASE
    assert input_label(SEARCH_BASE + 9) == "search input 9"
    assert input_label(ADOPT_BASE + 2) == "adopted input 2"
    assert input_label(REACH_BASE + 1) == "reached input 1"


RARE = r"""
unsigned rare(unsigned x) {
    unsigned s = x * 2654435761u;
    if (x == 7u) {                    /* a block no training input runs */
        for (unsigned i = 0; i < 64; i++)
            s = s * 31u + i;
    }
    return s;
}
"""


def _is_seven(seed: int, i: int) -> bool:
    return int(np.random.default_rng([seed, i]).integers(0, 40)) == 7


def test_fresh_inputs_that_run_blocks_the_bound_leaves_out_are_not_covered(tmp_path):
    """libm's lgamma: fresh input 55 ran two blocks no training input ran, which the bound
    (``[wcet] unreached = "observed"``) leaves out, and the check said "covered", exit 0."""
    training = next(s for s in range(1, 1000)
                    if not any(_is_seven(s, i) for i in range(TRAINING)))
    fresh = next(s for s in range(2000, 3000)
                 if sum(_is_seven(s, i) for i in range(FRESH)) >= 2)
    lib = build_library(tmp_path, RARE, "rare")
    d = write_target(tmp_path / "rare", str(lib), "rare", "unsigned rare(unsigned x);",
                     "    return (int(ctx.rng.integers(0, 40)),)",
                     inputs=TRAINING, repeats=3, seed=training)
    res = _wcetfit("analyze", str(d), "--no-wait")
    assert res.returncode == 0, res.stderr
    res = _wcetfit("check", str(d), "--inputs", str(FRESH), "--seed", str(fresh),
                   "--no-wait", "--json", str(tmp_path / "c.json"))
    assert res.returncode == 1, res.stdout + res.stderr
    (c,) = json.loads((tmp_path / "c.json").read_text())["checks"]
    sevens = {i for i in range(FRESH) if _is_seven(fresh, i)}
    (b,) = c["blocks_beyond"]
    assert b["function"] == "rare" and set(b["numbers"]) == sevens and b["blocks"]
    assert "BEYOND THE BOUND'S BLOCKS" in res.stdout
    assert f"--seed {fresh} --inputs {FRESH} --adopt" in res.stdout
