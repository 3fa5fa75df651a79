"""A Ctrl-C the interpreter swallows is acted on at the next input.

Seen in a CI run of the interrupted-count test: the SIGINT landed in logging's
``_releaseLock`` inside a weakref callback, Python printed "Exception ignored ...
KeyboardInterrupt" and the count ran on to its end (exit 0, not 130).  The CLI's SIGINT
handler now records the interrupt and the long stages' progress callback raises it
again (wcetfit.cli.interrupt)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import weakref

import pytest

from wcetfit.cli import interrupt
from wcetfit.cli.progress import progress_bars


@pytest.fixture()
def handler():
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt.install()
    yield
    signal.signal(signal.SIGINT, before)
    interrupt._requested.clear()


def test_sigint_raises_and_is_recorded(handler):
    assert signal.getsignal(signal.SIGINT) is interrupt._on_sigint
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000_000):      # the handler runs between bytecodes
            pass
    with pytest.raises(KeyboardInterrupt):
        interrupt.raise_if_interrupted()


def test_an_interrupt_swallowed_in_a_callback_stops_the_next_input(handler, monkeypatch):
    class Thing:
        pass

    def callback(_ref):
        # where the signal landed in the CI run: Python ignores what a weakref callback
        # raises ("Exception ignored in ...")
        interrupt._on_sigint(signal.SIGINT, None)

    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: ignored.append(u.exc_type))
    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing
    gc.collect()
    assert ref() is None
    assert ignored == [KeyboardInterrupt]         # swallowed, as in the CI run
    with progress_bars() as update:
        with pytest.raises(KeyboardInterrupt):
            update("count", 1, 10)


def test_no_interrupt_no_raise(handler):
    interrupt.raise_if_interrupted()
    with progress_bars() as update:
        update("count", 1, 10)


def test_an_interrupt_swallowed_after_the_last_input_still_exits_130(monkeypatch, capsys):
    """A Ctrl-C swallowed during the last input has no next input to act on it: the
    run ended with exit 0 as if complete.  The CLI checks the record once the command
    returns: the run ends as interrupted, not as a success."""
    import wcetfit.cli.count as count_command
    from wcetfit.cli import main

    def run(args):
        try:
            interrupt._on_sigint(signal.SIGINT, None)
        except KeyboardInterrupt:
            pass                 # swallowed, with no input after it
        return 0

    monkeypatch.setattr(count_command, "run", run)
    before = signal.getsignal(signal.SIGINT)
    try:
        assert main(["count", "anywhere"]) == 130
    finally:
        signal.signal(signal.SIGINT, before)
        interrupt._requested.clear()
    assert "interrupted" in capsys.readouterr().err


def test_an_interrupt_landing_in_logging_is_recorded_not_raised_there(handler):
    """In logging's own code (its lock released after a fork) a KeyboardInterrupt is
    ignored with a traceback printed on the user's screen (a second CI run of the
    interrupted-count test): the handler records it there, and the next input raises it."""
    import logging

    frames = []

    class Catch(logging.Handler):
        def emit(self, record):
            # the signal as if it came while logging's code ran
            import sys as _sys
            frames.append(_sys._getframe())
            interrupt._on_sigint(signal.SIGINT, _sys._getframe().f_back)

    log = logging.getLogger("wcetfit.test_interrupt")
    h = Catch()
    log.addHandler(h)
    try:
        log.warning("a record")          # no KeyboardInterrupt out of logging
    finally:
        log.removeHandler(h)
    assert frames
    with pytest.raises(KeyboardInterrupt):
        interrupt.raise_if_interrupted()
    # elsewhere it is raised where it lands, as ever
    interrupt._requested.clear()
    with pytest.raises(KeyboardInterrupt):
        interrupt._on_sigint(signal.SIGINT, None)


def test_progress_off_a_terminal_is_a_plain_line_now_and_then(monkeypatch, capsys):
    """Not on a terminal there are no bars: a worst-case search of 100 MB inputs ran a
    quarter of an hour with nothing on the screen.  A stage that runs long gets a plain
    line, at most one a minute, and one when it ends."""
    import wcetfit.cli.progress as progress

    clock = iter([0.0, 10.0, 61.0, 70.0, 125.0, 130.0, 131.0])
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    with progress.progress_bars() as update:
        for done in (1, 2, 3, 4, 5):
            update("search", done, 6)           # at 0, 10, 61, 70, 125 s
        update("search", 6, 6)                  # 130 s: ended
        update("search", 6, 6)                  # nothing more
    err = capsys.readouterr().err.splitlines()
    assert err == ["search: 3 of 6 (61 s so far)", "search: 5 of 6 (125 s so far)",
                   "search: 6 of 6 (130 s so far)"], err
