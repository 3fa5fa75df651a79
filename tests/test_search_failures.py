"""Candidates of the search that fail the count run's checks are left out, not fatal; the
search starts from the draws that made each measured input; `wcetfit search` takes the
stored measurements as `analyze` took them.

Truth: ``total`` is out of contract on n == 0 and then leaves the process id in its
buffer.  The differential check runs the instrumented copy and the original in two
processes (it forks), so on that input they leave different argument memory — as
``__gmpn_mul_1`` does on n == 0, where it reads three limbs past a one-element buffer
and the heap beyond differs between the two processes.  ``generate`` makes n == 0 on 2 %
of its inputs, none of the 30 measured ones (seed 3): only the search's candidates (it
tries the ends of ``generate``'s ranges) reach it.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from wcetfit.search.candidates import SEARCH_BASE
from wcetfit.search.choices import ChoiceSequence

TOTAL_C = r"""
#include <unistd.h>
long total(long *b, long n) {
    long s = 0;
    if (n == 0) {                 /* out of contract: leaves this process's id */
        b[0] = getpid();
        return 0;
    }
    for (long i = 0; i < n; i++)
        s += b[i];
    return s;
}
"""

TOTAL_INPUTS = """
def generate(ctx):
    rng = ctx.rng
    n = 0 if rng.random() < 0.02 else int(rng.integers(1, 33))
    b = rng.integers(-1000, 1000, max(n, 1))
    return (ctx.ffi.new("long[]", b.tolist()), n)
"""

TOTAL_TOML = """
binary = "libtotal.so"
functions = ["total"]
prototype = "long total(long *b, long n);"
inputs = "inputs.py"
[measure]
inputs = 30
repeats = 3
seed = 3
[search]
budget = {budget}
timed = 3
"""


def _target(d: Path, budget: int = 0) -> Path:
    (d / "total.c").write_text(TOTAL_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(d / "libtotal.so"),
                    str(d / "total.c")], check=True)
    (d / "inputs.py").write_text(TOTAL_INPUTS)
    (d / "wcetfit.toml").write_text(textwrap.dedent(TOTAL_TOML.format(budget=budget)))
    return d


def _wcetfit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True)


def _n_of(norm, seq: ChoiceSequence) -> int:
    from wcetfit.search.candidates import Replay

    _b, n = Replay({0: seq})(norm._generate, norm.target, norm._ffi, norm.function, 0)
    return n


def test_a_candidate_failing_the_differential_check_is_left_out_with_its_arguments(
        tmp_path, caplog):
    from wcetfit.pipeline import open_session
    from wcetfit.search.candidates import Normaliser, count_candidates

    s = open_session(str(_target(tmp_path)))
    norm = Normaliser(s.target, "total")
    good = [norm.record(i) for i in (0, 1)]
    # the first draw (random() < 0.02 → n = 0) moved to the low end of its range, as a
    # mutation does
    first = good[0].choices[0]
    bad = norm.normalise(good[0].with_choices((replace(first, value=0.0),)
                                              + good[0].choices[1:]))
    assert _n_of(norm, bad) == 0 and all(_n_of(norm, g) > 0 for g in good)
    keys = {SEARCH_BASE: good[0], SEARCH_BASE + 1: bad, SEARCH_BASE + 2: good[1]}

    with caplog.at_level(logging.WARNING, logger="wcetfit"):
        counts, failures = count_candidates(s.target, s.model, "total", keys)

    assert set(counts) == {SEARCH_BASE, SEARCH_BASE + 2}      # counted before and after it
    [f] = failures
    assert f.index == SEARCH_BASE + 1 and f.kind == "check"
    assert "differential check" in f.message and "left out" in f.message
    assert f.arguments.startswith("(long[1] {") and f.arguments.endswith(", 0)")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("search input 1 " in m and f.arguments in m and "differential" in m
               for m in said), said
    assert not any(str(SEARCH_BASE + 1) in m for m in said), said   # no raw 2**40 + 1


@pytest.mark.slow
def test_analyze_survives_a_candidate_that_fails_the_checks(tmp_path):
    d = _target(tmp_path, budget=150)
    r = _wcetfit("analyze", str(d))
    assert r.returncode == 0, r.stderr
    # the candidate is named with its arguments (the empty length) and the reason
    # named as the report names it ("search input 28"), not by its raw number (2**40 + 28)
    m = re.search(r"search input (\d+) (\(long\[1\] .*?, 0\)): check: differential check",
                  r.stderr)
    assert m, r.stderr
    assert str(SEARCH_BASE) not in r.stderr
    from wcetfit.measurements import open_store
    from wcetfit.search.store import load_search_rows
    from wcetfit.target import load_target

    target = load_target(str(d))
    rows = load_search_rows(open_store(target), "total", target.measure.seed)
    assert rows is not None and len(rows.indices) > 0      # the search kept its best
    assert int(m.group(1)) not in rows.indices.tolist()


def test_the_search_starts_from_each_measured_inputs_own_draws():
    """A searched input's number is no input of generate's: its stored draws seed the
    search; a reached input (made by no draws) seeds nothing; generated ones are
    recorded from their numbers."""
    from wcetfit.search.engine import seed_population
    from wcetfit.search.witness import REACH_BASE

    recorded = []

    class Norm:
        def record(self, index):
            recorded.append(index)
            return ChoiceSequence(index, ())

    stored = ChoiceSequence(4, ())          # the draws a search kept (parent: input 4)
    system = SimpleNamespace(indices=np.array([0, 1, SEARCH_BASE, REACH_BASE]),
                             ticks=np.array([[10.0], [20.0], [30.0], [40.0]]),
                             counts=np.eye(4))
    pool = seed_population(Norm(), system, np.zeros(4), 3, {SEARCH_BASE: stored})
    assert [c.sequence for c in pool] == [stored, ChoiceSequence(1, ()),
                                          ChoiceSequence(0, ())]
    assert recorded == [1, 0]
    assert [c.vector.tolist() for c in pool] == [[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0]]


@pytest.mark.slow
def test_a_second_search_never_replays_a_searched_inputs_number(tmp_path, monkeypatch):
    from wcetfit.count.run import run_counts
    from wcetfit.pipeline import open_session
    from wcetfit.search import candidates
    from wcetfit.search.engine import SearchOptions
    from wcetfit.search.workflow import run_search
    from wcetfit.timing.run import run_times

    s = open_session(str(_target(tmp_path)))
    run_counts(s.target, s.store, s.model, ["total"])
    run_times(s.target, s.store, s.roots)
    first = run_search(s, "total", SearchOptions(budget=50, timed=3))
    assert len(first.timed_indices) > 0
    seen: list[int] = []
    real = candidates.generate_input

    def spy(*args, **kwargs):
        seen.append(kwargs.get("ctx_index"))
        return real(*args, **kwargs)

    monkeypatch.setattr(candidates, "generate_input", spy)
    # every measured input seeds it, the searched ones among them
    run_search(s, "total", SearchOptions(budget=50, timed=0, parents=100), keep=False)
    assert seen and max(seen) < SEARCH_BASE


@pytest.mark.slow
def test_search_takes_the_stored_measurements_analyze_took(tmp_path):
    d = _target(tmp_path)
    r = _wcetfit("analyze", str(d), "--repeats", "2")
    assert r.returncode == 0, r.stderr
    # without --repeats, the one timing set stored (2 repeats, not the file's 3) is used
    # and said
    r = _wcetfit("search", str(d), "--budget", "20", "--timed", "2")
    assert r.returncode == 0 and "using the timing set of 2 repeats" in r.stderr, r.stderr
    r = _wcetfit("search", str(d), "--budget", "20", "--timed", "2", "--repeats", "2",
                 "--inputs", "30", "--seed", "3")
    assert r.returncode == 0, r.stderr
    from wcetfit.pipeline import open_session, stored_measurements
    from wcetfit.search.store import load_search_rows

    s = open_session(str(d), repeats=2)
    rows = load_search_rows(s.store, "total", 3)
    assert rows is not None and rows.ticks.shape == (len(rows.indices), 2)
    # timed as the measured inputs were: they join the fit's rows
    counts, times = stored_measurements(s, "total")
    assert set(rows.indices.tolist()) <= set(times.indices.tolist())
