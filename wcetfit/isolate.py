"""Run the target's code in a child process, one input after another.

The target is arbitrary native code: it may crash (SIGSEGV, abort) or hang on some
inputs.  The analyzer must survive both, report the input that caused it, and keep
everything measured before.  :func:`run_isolated` forks a worker process, which builds
its state once (loads the library, builds the harness, the instrumented copy...) and
then handles inputs in order, sending each result back through a pipe as soon as it is
ready.  When the worker dies or stops answering, the parent records the failure for
the input in progress and starts a fresh worker at the next input.

Why fork and not spawn: the worker needs no state from the parent beyond plain
Python objects, and fork starts in milliseconds where spawn would re-import numpy,
cffi and the target module for every restart.  The worker never touches angr.

Protocol (pickled tuples, length-prefixed):
  ("ready",)                          worker state built
  ("start", index, summary)           about to call the target for ``index``
  ("done", index, result)             ``result`` is whatever ``Worker.run`` returned
  ("fatal", index|None, exception)    a WcetfitError that must stop the whole run
"""

from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import resource
import select
import signal
import struct
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from wcetfit.errors import MeasurementError, WcetfitError

log = logging.getLogger(__name__)

# A fresh worker that dies before saying "ready" this many times in a row means the
# set-up itself is broken, not one input: stop instead of looping.
_MAX_SETUP_FAILURES = 2


class Worker(Protocol):
    """What runs inside the child.  ``start`` is sent before the risky call."""

    def run(self, index: int, start: Callable[[str], None]) -> Any:
        """Handle one input; call ``start(argument_summary)`` right before the target runs."""


@dataclass(frozen=True)
class InputFailure:
    index: int
    kind: str          # "crash" or "hang"
    message: str       # "SIGSEGV (signal 11)", "no return after 10.0 s", ...
    arguments: str     # summary of the input's arguments

    def describe(self) -> str:
        return f"input {self.index} {self.arguments}: {self.kind}: {self.message}"


@dataclass
class IsolatedRun:
    results: dict[int, Any] = field(default_factory=dict)
    failures: list[InputFailure] = field(default_factory=list)
    interrupted: bool = False


def _send(fd: int, message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _Reader:
    """Incremental reader of length-prefixed pickles from a pipe, with timeouts."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = bytearray()

    def read(self, timeout: float | None) -> tuple | None:
        """The next message; None on EOF; raises TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self.buf) >= 8:
                (n,) = struct.unpack_from("<Q", self.buf)
                if len(self.buf) >= 8 + n:
                    data = bytes(self.buf[8:8 + n])
                    del self.buf[:8 + n]
                    return pickle.loads(data)
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk


def _child_main(make_worker: Callable[[], Worker], indices: Sequence[int], fd: int) -> None:
    # The parent handles Ctrl-C and kills us; a core dump per crashing input would
    # fill the disk.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.disable()  # the target's crash is reported by the parent, not dumped here
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    current: int | None = None
    try:
        worker = make_worker()
        _send(fd, ("ready",))
        for index in indices:
            current = index
            result = worker.run(index, lambda summary, i=index: _send(fd, ("start", i, summary)))
            _send(fd, ("done", index, result))
    except WcetfitError as exc:
        _send(fd, ("fatal", current, exc))
    except BaseException as exc:  # a bug in wcetfit itself: carry the traceback over
        text = "".join(traceback.format_exception(exc))
        _send(fd, ("fatal", current, MeasurementError(f"internal error in worker: {text}")))


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"{name} (signal {sig})"
    if os.WIFEXITED(status):
        return f"the process exited with status {os.WEXITSTATUS(status)} (exit() called?)"
    return f"wait status {status:#x}"


def run_isolated(make_worker: Callable[[], Worker], indices: Iterable[int], *,
                 timeout: float, setup_timeout: float = 120.0,
                 on_result: Callable[[int, Any], None] | None = None,
                 on_failure: Callable[[InputFailure], None] | None = None) -> IsolatedRun:
    """Run ``make_worker().run(i)`` for every ``i`` in a child process.

    ``timeout``: seconds one input may take after its "start" before it counts as a hang.
    ``on_result``/``on_failure`` are called in the parent as results arrive, so callers can
    save incrementally.  A ``fatal`` message re-raises its WcetfitError here, after the
    results received so far were handed to ``on_result``.  KeyboardInterrupt stops the
    worker and returns what was measured with ``interrupted=True``.
    """
    pending = list(indices)
    run = IsolatedRun()
    setup_failures = 0
    while pending:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(rfd)
            code = 0
            try:
                _child_main(make_worker, pending, wfd)
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        os.close(wfd)
        reader = _Reader(rfd)
        in_progress: tuple[int, str] | None = None
        ready = False
        try:
            while True:
                try:
                    limit = timeout if in_progress else (setup_timeout if not ready else timeout)
                    msg = reader.read(limit)
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    if in_progress is None:
                        raise MeasurementError(
                            f"the measurement worker did not answer within {limit:.0f} s "
                            "while setting up") from None
                    index, summary = in_progress
                    fail = InputFailure(index, "hang", f"no return after {timeout:g} s "
                                        "(per-call timeout; raise [measure] timeout if the "
                                        "function is just slow)", summary)
                    _record_failure(run, fail, on_failure)
                    pending = pending[pending.index(index) + 1:]
                    break
                if msg is None:  # worker died
                    _, status = os.waitpid(pid, 0)
                    pid = 0
                    if in_progress is None:
                        setup_failures += 1
                        if not ready or setup_failures >= _MAX_SETUP_FAILURES:
                            raise MeasurementError(
                                f"the measurement worker died while setting up: "
                                f"{_describe_status(status)}")
                        break
                    index, summary = in_progress
                    _record_failure(run, InputFailure(index, "crash", _describe_status(status),
                                                      summary), on_failure)
                    pending = pending[pending.index(index) + 1:]
                    break
                kind = msg[0]
                if kind == "ready":
                    ready = True
                elif kind == "start":
                    in_progress = (msg[1], msg[2])
                elif kind == "done":
                    index, result = msg[1], msg[2]
                    run.results[index] = result
                    in_progress = None
                    setup_failures = 0
                    if on_result is not None:
                        on_result(index, result)
                    pending = pending[pending.index(index) + 1:]
                    if not pending:
                        break
                elif kind == "fatal":
                    raise msg[2]
        except KeyboardInterrupt:
            run.interrupted = True
            return run
        finally:
            os.close(rfd)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
    return run


def _record_failure(run: IsolatedRun, failure: InputFailure,
                    on_failure: Callable[[InputFailure], None] | None) -> None:
    log.warning("%s", failure.describe())
    run.failures.append(failure)
    if on_failure is not None:
        on_failure(failure)
