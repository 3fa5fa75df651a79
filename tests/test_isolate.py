"""Child-process isolation: crashes and hangs are reported per input, nothing is lost."""

import os
import signal
import time

import pytest

from wcetfit.errors import InputsError, MeasurementError
from wcetfit.isolate import run_isolated


@pytest.fixture(autouse=True)
def _new_session():
    """Each test is a session of its own: failures said in another are said again."""
    from wcetfit.isolate import forget_said_failures
    forget_said_failures()


class ToyWorker:
    """Crashes on input 3 (SIGSEGV), aborts on 5, hangs on 7, squares the rest."""

    def run(self, index, start):
        start(f"(n={index})")
        if index == 3:
            os.kill(os.getpid(), signal.SIGSEGV)
        if index == 5:
            os.abort()
        if index == 7:
            time.sleep(60)
        return index * index


def test_crash_and_hang_are_reported_and_other_inputs_kept():
    seen = []
    run = run_isolated(ToyWorker, range(10), timeout=1.0,
                       on_result=lambda i, r: seen.append(i))
    assert run.results == {i: i * i for i in range(10) if i not in (3, 5, 7)}
    assert seen == sorted(run.results)
    kinds = {f.index: (f.kind, f.message) for f in run.failures}
    assert set(kinds) == {3, 5, 7}
    assert kinds[3][0] == "crash" and "SIGSEGV" in kinds[3][1]
    assert kinds[5][0] == "crash" and "SIGABRT" in kinds[5][1]
    assert kinds[7][0] == "hang"
    assert all(f.arguments == f"(n={f.index})" for f in run.failures)


class FatalWorker:
    def run(self, index, start):
        if index == 2:
            raise InputsError("input 2: generate() raised")
        start("()")
        return index


def test_fatal_error_reraised_after_earlier_results_delivered():
    got = {}
    with pytest.raises(InputsError, match="input 2"):
        run_isolated(FatalWorker, range(5), timeout=5, on_result=got.__setitem__)
    assert got == {0: 0, 1: 1}


def _broken_setup():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_worker_that_dies_in_setup_is_a_measurement_error():
    with pytest.raises(MeasurementError, match="setting up"):
        run_isolated(_broken_setup, range(3), timeout=5)


class BuggyWorker:
    def run(self, index, start):
        raise ZeroDivisionError("bug")


def test_internal_bug_in_worker_carries_traceback():
    with pytest.raises(MeasurementError, match="ZeroDivisionError"):
        run_isolated(BuggyWorker, range(3), timeout=5)


class CorruptingWorker:
    """Input 3's call "corrupts the heap": input 4 then fails inside Python (as cffi did
    for a new user's __gmpn_divrem_1 after a write past qp), and input 6 hangs before its
    call is even started (as malloc did on that heap)."""

    def run(self, index, start):
        if index == 6:
            time.sleep(60)
        start(f"(n={index})")
        if index == 4:
            raise TypeError("cdata of type '\\x8f\\x02' cannot be indexed")
        return index


def test_a_worker_broken_after_earlier_inputs_fails_those_inputs_not_the_run():
    run = run_isolated(CorruptingWorker, range(9), timeout=1.0, build_timeout=1.0)
    assert run.results == {i: i for i in range(9) if i not in (4, 6)}
    kinds = {f.index: f for f in run.failures}
    assert set(kinds) == {4, 6}
    assert kinds[4].kind == "corrupt" and "cannot be indexed" in kinds[4].message
    assert kinds[4].arguments == "(n=4)"
    assert kinds[6].kind == "hang" and "after input 5 returned" in kinds[6].message


class SlowBuildWorker:
    """Input 1's arguments take 1.5 s to build (a large buffer), input 3's forever (a
    generate() that loops), input 5's kill the worker; every call itself is quick."""

    def run(self, index, start):
        if index == 1:
            time.sleep(1.5)
        if index == 3:
            time.sleep(60)
        if index == 5:
            os.kill(os.getpid(), signal.SIGSEGV)
        start(f"(n={index})")
        return index


def test_building_arguments_has_its_own_time_limit_and_names_its_input():
    """A call limit of 0.3 s does not make a 1.5 s argument build a hang (it was reported
    as a hang of the previous input's call), and a build that never ends or dies is that
    input's failure, said as one, not the run's."""
    run = run_isolated(SlowBuildWorker, range(7), timeout=0.3, build_timeout=3.0)
    assert run.results == {i: i for i in range(7) if i not in (3, 5)}
    kinds = {f.index: f for f in run.failures}
    assert set(kinds) == {3, 5}
    assert kinds[3].kind == "hang" and "building its arguments" in kinds[3].message
    assert "more than 3 s" in kinds[3].message and "after input 2 returned" in kinds[3].message
    assert kinds[5].kind == "crash" and "building its arguments" in kinds[5].message
    assert "SIGSEGV" in kinds[5].message


class RefusedArgumentWorker:
    def run(self, index, start):
        if index == 2:
            raise InputsError("argument 1 of XML_ErrorString (enum XML_Error): can't "
                              "convert negative number to unsigned")
        start("()")
        return index


def test_an_argument_the_prototype_refuses_names_its_input():
    with pytest.raises(InputsError, match=r"^input 2: argument 1 of XML_ErrorString .*"
                                          r"make generate\(\) in inputs.py return what the "
                                          r"prototype takes"):
        run_isolated(RefusedArgumentWorker, range(5), timeout=5)


class AbortingWorker:
    """Aborts on every odd input, as a library that rejects half its inputs does."""

    def run(self, index, start):
        start(f"(n={index})")
        if index % 2:
            os.abort()
        return index


def test_many_failures_are_a_few_warnings_and_one_sum(caplog):
    """Each failure is kept, but only the first LOGGED_FAILURES are a warning line each;
    the rest are one warning with their number and kinds (libpng's png_get_uint_31: 60
    crash warnings per run)."""
    import logging

    from wcetfit.isolate import LOGGED_FAILURES

    with caplog.at_level(logging.WARNING, logger="wcetfit.isolate"):
        run = run_isolated(AbortingWorker, range(30), timeout=5.0)
    assert len(run.failures) == 15 and len(run.results) == 15
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    each = [m for m in warnings if "crash: SIGABRT" in m]
    assert len(each) == LOGGED_FAILURES
    summed = [m for m in warnings if m.startswith(f"{15 - LOGGED_FAILURES} more input(s) failed")]
    assert len(summed) == 1 and "crash ×10" in summed[0]


def test_a_failure_is_said_once_per_session(caplog):
    """The count run, its rounds following indirect calls and the search meet the same
    crashing inputs: a new user read each crash three times, with two different "N more
    input(s) failed".  Said once per session; a new session says them again."""
    import logging

    from wcetfit.isolate import LOGGED_FAILURES, forget_said_failures

    def warnings():
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.WARNING, logger="wcetfit.isolate"):
        first = run_isolated(AbortingWorker, range(30), timeout=5.0)
        said = warnings()
        caplog.clear()
        again = run_isolated(AbortingWorker, range(30), timeout=5.0)
        assert len(again.failures) == len(first.failures) == 15    # still kept, each run
        assert warnings() == []
        forget_said_failures()
        run_isolated(AbortingWorker, range(30), timeout=5.0)
        assert len([m for m in warnings() if "crash: SIGABRT" in m]) == LOGGED_FAILURES
    assert len(said) == LOGGED_FAILURES + 1


class MostlyAbortingWorker:
    """A timing worker's shape: untimed warm-up calls of its inputs first, then each
    input's timed call.  Two inputs in three abort, as libpng's png_get_uint_31 did on
    init's random bytes (its png_error on a value above 2^31 - 1), after writing a line
    to standard error as libpng does."""

    warm_up_inputs = 50

    def _call(self, index):
        if index % 3:
            os.write(2, b"toylib error: value out of range\n")
            os.abort()
        return index

    def untimed(self, index, start):
        start(f"(n={index})")
        self._call(index)

    def run(self, index, start):
        start(f"(n={index})")
        return self._call(index)


def test_warm_up_calls_that_return_are_successes_the_early_stop_sees(tmp_path):
    """Each worker warms up on its first inputs, and with two in three aborting every
    worker met one there: 20 failures came before any timed call, and the run stopped
    saying "none succeeded" while a third of the inputs ran (libpng's png_get_uint_31).
    A warm-up call that returned counts; the inputs that work get timed."""
    from wcetfit.measurements import measure_saving

    results, failures, returned = {}, [], []
    measure_saving(MostlyAbortingWorker, list(range(60)), timeout=5.0,
                   store_result=results.__setitem__, failures=failures,
                   save=lambda: None, done=lambda: len(results), wanted=60, progress=None)
    assert sorted(results) == [i for i in range(60) if i % 3 == 0]
    assert sorted(f.index for f in failures) == [i for i in range(60) if i % 3]
    run_isolated(MostlyAbortingWorker, [0, 3, 1], timeout=5.0, on_returned=returned.append)
    assert 0 in returned and 3 in returned and 1 not in returned


def test_the_targets_own_output_is_summed_up_not_mixed_into_the_analyzers(capfd, caplog):
    """What the function writes to standard output and error goes to a file the analyzer
    sums up in one warning: its line count and the first (libpng printed 87 "libpng
    error: …" lines between the analyzer's warnings)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="wcetfit.isolate"):
        run = run_isolated(MostlyAbortingWorker, range(9), timeout=5.0)
    assert len(run.failures) == 6
    out, err = capfd.readouterr()
    # (not a line of its own: the analyzer's log may quote it, as a stale handler an
    # earlier test left on the wcetfit logger does in the whole suite)
    assert not any(ln.startswith("toylib") for ln in (out + err).splitlines()), (out, err)
    said = [r.getMessage() for r in caplog.records if "standard output or error" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("the first: toylib error: value out of range")
    assert "wrote 6 line(s)" in said[0]          # one per aborting input, each once


def test_what_the_function_printed_while_timed_is_in_the_report(tmp_path):
    """A function that prints while timed is mostly on an error path (libgcrypt's
    gcry_md_hash_buffer on algorithm numbers it lacks: "DBG: md_hash_buffer: algorithm 35
    not available" on most calls): the analyzer's stderr said so once per pass, eight
    warnings, and the report not at all.  Now one warning per session on stderr, and the
    report says it, with the line count and the first line."""
    import json
    import subprocess
    import sys

    from smalltarget import build_library, write_target

    lib = build_library(tmp_path, r"""
#include <stdio.h>
int twice(int x) {
    if (x < 0) { fprintf(stderr, "twice: negative %d\n", x); return -1; }
    return 2 * x;
}
""", "twice")
    d = write_target(tmp_path / "twice", str(lib), "twice", "int twice(int x);",
                     "    return (int(ctx.rng.integers(-5, 5)),)", inputs=20, repeats=3)
    res = subprocess.run([sys.executable, "-m", "wcetfit", "analyze", str(d), "--no-wait",
                          "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    said = [ln for ln in res.stderr.splitlines() if "standard output or error" in ln]
    assert len(said) == 1, said
    report = json.loads((tmp_path / "r.json").read_text())
    texts = [w["message"] for w in report["warnings"]]
    (printed,) = [t for t in texts if "to its standard output or error while timed" in t]
    assert "the first: twice: negative" in printed
    lines = int(printed.split("wrote ", 1)[1].split(" ")[0].replace(",", ""))
    assert lines >= 3                       # a negative input's three timed calls at least
    assert "to its standard output or error while timed" in " ".join(res.stdout.split())
