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
  ("build", index)                    about to build ``index``'s arguments (generate(),
                                      packing: Python, under its own time limit)
  ("start", index, summary)           about to call the target for ``index``
  ("done", index, result)             ``result`` is whatever ``Worker.run`` returned
  ("fatal", index|None, exception)    a WcetfitError that must stop the whole run
  ("failed", index, kind, message)    the call returned but left the process unfit
                                      (a thread or child process still running, its
                                      code or executable mappings changed); the worker
                                      exits and a fresh one takes the next input

Hostile targets: the worker reads /dev/null as standard input (a target reading stdin
gets end-of-file instead of blocking the run), leads its own process group (killed as
a whole: a child process the target forked dies with it), dies with its parent
(PR_SET_PDEATHSIG: a killed analyzer leaves no worker running), and after every call
checks that the target left no thread, no child process and its executable mappings
as they were; a child process the target forked that returns into the worker exits at
once instead of continuing the worker's loop.
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
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from wcetfit.errors import MeasurementError, WcetfitError
from wcetfit.numbering import input_label

log = logging.getLogger(__name__)

# A fresh worker that dies before saying "ready" this many times in a row means the
# set-up itself is broken, not one input: stop instead of looping.
_MAX_SETUP_FAILURES = 2

# Seconds one input's arguments may take to build (generate() and packing them) before it
# counts as a hang.  Not the [measure] timeout, which is per call of the function: a
# 2 GB buffer took longer to build than a 0.3 s limit and was reported as a hang of the
# previous input's call.
BUILD_TIMEOUT_S = 60.0


class Worker(Protocol):
    """What runs inside the child.  ``start`` is sent before the risky call.

    A timing worker also has ``untimed(index, start)``: one untimed call of an input,
    ``start(argument_summary)`` sent before it (a crash, a hang or a changed process in
    it is that input's failure, and the other inputs go on); ``warm_up_inputs``: how
    many such calls, of its inputs in turn, come before its first ``run``; and
    ``settles``: whether each ``run`` follows an untimed call of the input run last, made
    after ``prepare(index)`` built the input's arguments, which ``run(index, start,
    prepared)`` then takes."""

    def run(self, index: int, start: Callable[[str], None]) -> Any:
        """Handle one input; call ``start(argument_summary)`` right before the target runs."""


@dataclass(frozen=True)
class InputFailure:
    index: int
    kind: str          # "crash", "exit", "hang", "thread", "fork", "code", "corrupt" or
                       # COPY_CRASH (the count run's copy, not the function: wcetfit.count.run)
    message: str       # "SIGSEGV (signal 11)", "no return after 10.0 s", ...
    arguments: str     # summary of the input's arguments

    def describe(self) -> str:
        return f"{input_label(self.index)} {self.arguments}: {self.kind}: {self.message}"


# The kind of a count run's crash the original function does not share: the instrumented
# copy died where the original, called alone on the input, returns (wcetfit.count.run).
COPY_CRASH = "crash of wcetfit's copy"


@dataclass
class IsolatedRun:
    results: dict[int, Any] = field(default_factory=dict)
    failures: list[InputFailure] = field(default_factory=list)
    interrupted: bool = False
    # what the target wrote to standard output and error during the run (None: nothing)
    output: "TargetOutput | None" = None


@dataclass(frozen=True)
class TargetOutput:
    """What a run's target wrote to standard output and error: how many lines (at least,
    when ``more``) and the first, cut to 200 characters."""

    lines: int
    first: str
    more: bool = False


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


def _contain_child() -> None:
    """The worker's defences against a hostile target (see the module's docstring)."""
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    except OSError:
        pass
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _divert_output(fd: int) -> None:
    """The target's writes to standard output and error go to ``fd``, a file the parent
    sums up after the run (:func:`_sum_up_output`), instead of into the analyzer's output
    (libpng's png_get_uint_31 printed "libpng error: …" for each of 87 failed calls,
    between the analyzer's warnings); the worker's own logging keeps the analyzer's
    standard error."""
    try:
        kept = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        for logger in (logging.getLogger(), logging.getLogger("wcetfit")):
            for h in logger.handlers:
                if isinstance(h, logging.StreamHandler) and h.stream is sys.stderr:
                    h.setStream(kept)
        sys.stderr = kept
        sys.stdout.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    except (OSError, ValueError):
        pass


# Whether the target's output was said in this session: a session runs the count, the
# timing passes and the search one after the other on the same inputs, and each run's
# first line can differ (libgcrypt's "DBG: md_hash_buffer: algorithm 35 not available",
# then 15, …: eight warnings); the later ones are logged at info level.
_OUTPUT_SUMMED: set[str] = set()
# How much of the target's output is read to sum it up.
OUTPUT_READ_LIMIT = 1 << 24


def _sum_up_output(f: Any) -> TargetOutput | None:
    """What the target wrote to standard output and error during a run (None: nothing),
    said in one warning: how many lines and the first; once a session, later runs' at
    info level."""
    size = f.seek(0, os.SEEK_END)
    if not size:
        return None
    f.seek(0)
    data = f.read(OUTPUT_READ_LIMIT)
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    first = next((ln.strip() for ln in data.decode("utf-8", "replace").splitlines()
                  if ln.strip()), "")[:200]
    out = TargetOutput(lines, first, size > len(data))
    said = bool(_OUTPUT_SUMMED)
    _OUTPUT_SUMMED.add(first)
    (log.info if said else log.warning)(
        "the function wrote %s%d line(s) to its standard output or error while measured, "
        "kept out of this output; the first: %s", "more than " if out.more else "", lines,
        first)
    return out


def _process_state() -> tuple[int, frozenset[str], frozenset[int]]:
    """(threads, executable mappings, child processes) of this process, for comparing
    before and after a call of the target."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    spans: list[tuple[str, str, int, int]] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 2 and "x" in fields[1]:
                    lo, _, hi = fields[0].partition("-")
                    spans.append((fields[1], " ".join(fields[5:6]), int(lo, 16), int(hi, 16)))
    except (OSError, ValueError):
        pass
    code = _merged_code(spans)
    children: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                children.update(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return threads, frozenset(code), frozenset(children)


def _merged_code(spans: list[tuple[str, str, int, int]]) -> frozenset[str]:
    """Executable mappings as "start-end perms path", adjacent ones of the same
    permissions and file merged: a mapping the kernel split in two is the same code (a
    probe patched into one page of libbsd's 12-page text and restored left three lines
    where there was one, and every split input failed with "the call changed or unmapped
    executable memory")."""
    out: list[list[Any]] = []
    for perms, path, lo, hi in sorted(spans, key=lambda s: (s[1], s[0], s[2])):
        if out and out[-1][0] == perms and out[-1][1] == path and out[-1][3] == lo:
            out[-1][3] = hi
        else:
            out.append([perms, path, lo, hi])
    return frozenset(f"{lo:x}-{hi:x} {perms} {path}".rstrip() for perms, path, lo, hi in out)


def _code_lost(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """The executable mappings of ``before`` that ``after`` no longer covers (same file
    and permissions, the range within one of its merged mappings): a mapping made next to
    another of the same kind merges with it, and is no code lost."""
    def parse(line: str) -> tuple[str, int, int]:
        span, _, rest = line.partition(" ")
        lo, _, hi = span.partition("-")
        return rest, int(lo, 16), int(hi, 16)

    now: dict[str, list[tuple[int, int]]] = {}
    for line in after:
        kind, lo, hi = parse(line)
        now.setdefault(kind, []).append((lo, hi))
    lost = []
    for line in before:
        kind, lo, hi = parse(line)
        if not any(a <= lo and hi <= b for a, b in now.get(kind, ())):
            lost.append(line)
    return lost


def _what_changed(before: tuple[int, frozenset[str], frozenset[int]],
                  after: tuple[int, frozenset[str], frozenset[int]]) -> tuple[str, str] | None:
    if after[0] > before[0]:
        return "thread", (f"the call left {after[0] - before[0]} thread(s) running (a thread "
                          "disturbs every later call)")
    new_children = after[2] - before[2]
    if new_children:
        return "fork", (f"the call started {len(new_children)} child process(es) still "
                        "running or unreaped (pid " + ", ".join(map(str, sorted(new_children)))
                        + ")")
    lost = _code_lost(before[1], after[1])
    if lost:
        return "code", ("the call changed or unmapped executable memory (" +
                        "; ".join(sorted(lost)[:2]) + "): later calls would not run the "
                        "code analyzed")
    return None


# Set in a measurement worker, the child process that runs the target's code: the
# analyzer's own process never calls it (wcetfit.target.LibraryFunctions).
_IN_WORKER = False


def in_worker() -> bool:
    """Whether this process is a measurement worker (a child of :func:`run_isolated`)."""
    return _IN_WORKER


def _child_main(make_worker: Callable[[], Worker], indices: Sequence[int], fd: int,
                output: int | None = None) -> None:
    global _IN_WORKER
    _IN_WORKER = True
    # The parent handles Ctrl-C and kills us; a core dump per crashing input would
    # fill the disk.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.disable()  # the target's crash is reported by the parent, not dumped here
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _contain_child()
    if output is not None:
        _divert_output(output)
    me = os.getpid()
    current: int | None = None
    completed = 0               # inputs this worker finished: its machinery works
    try:
        worker = make_worker()
        _send(fd, ("ready",))
        # The process's state after one input is the state before the next: read once
        # per input, not twice, between two calls of the function (reading /proc/self/maps
        # there made libcrypto's SHA256 calls take ×1.6 their time after the previous
        # input's call alone)
        state = _process_state()
        # Untimed calls a timing worker makes for its timed ones' sake (Worker), each
        # announced, so that a crash or a hang in one is that input's failure
        untimed = getattr(worker, "untimed", None)

        def warming(i: int) -> Callable[[str], None]:
            return lambda summary: _send(fd, ("warming", i, summary))
        previous = None                 # the input whose call the next one follows
        if untimed is not None and indices:
            for k in range(int(getattr(worker, "warm_up_inputs", 0))):
                i = indices[k % len(indices)]
                untimed(i, warming(i))
                state, previous = _state_after(fd, me, i, state), i
            _send(fd, ("warmed",))
        settles = untimed is not None and bool(getattr(worker, "settles", False))
        for index in indices:
            current = index
            _send(fd, ("build", index))
            before = state
            try:
                prepared = None
                if settles and previous is not None:
                    # this input's arguments first, then the input run last called again
                    # right before this one's timed call: between the two only the
                    # arguments' restoring and the "start" message (its state not read
                    # after it: that would undo what it is for; the input passed the check
                    # once, and a change shows after this input)
                    prepared = worker.prepare(index)
                    untimed(previous, warming(previous))
                    if os.getpid() != me:
                        os._exit(0)
                result = worker.run(index, lambda summary, i=index: _send(fd, ("start", i,
                                                                                summary)),
                                    *(() if prepared is None else (prepared,)))
            except WcetfitError:
                if os.getpid() != me:
                    os._exit(0)
                # A check that failed after the target forked, started a thread or changed
                # its code (the original then differs from the copy, or dies) is that
                # input's misbehaviour, not a fault of the measurement: say which.
                changed = _what_changed(before, _process_state())
                if changed is not None:
                    _send(fd, ("failed", index, *changed))
                    os._exit(0)
                raise
            state = _state_after(fd, me, index, before)
            _send(fd, ("done", index, result))
            completed += 1
            previous = index
    except WcetfitError as exc:
        if os.getpid() != me:
            os._exit(0)
        _send(fd, ("fatal", current, exc))
    except BaseException as exc:  # a bug in wcetfit itself: carry the traceback over
        if os.getpid() != me:
            os._exit(0)
        text = "".join(traceback.format_exception(exc))
        if completed and current is not None:
            # The same code ran earlier inputs: a Python error now is most likely the
            # target's doing (a write past a buffer corrupts the worker's own heap, and
            # the next input fails inside cffi: libgmp's __gmpn_divrem_1 with init's qp),
            # so it is this input's failure, and a fresh worker goes on.
            last = text.strip().splitlines()[-1][:200] if text.strip() else repr(exc)
            _send(fd, ("failed", current, "corrupt",
                       f"the worker failed in Python while this input ran ({last}): the "
                       f"function may have corrupted the process's memory in this or an "
                       f"earlier call (a buffer smaller than what it writes?)"))
            os._exit(0)
        _send(fd, ("fatal", current, MeasurementError(f"internal error in worker: {text}")))


def _state_after(fd: int, me: int, index: int, before: tuple[int, frozenset[str],
                                                             frozenset[int]]
                 ) -> tuple[int, frozenset[str], frozenset[int]]:
    """The process's state after input ``index``'s call; when the call changed it (forked,
    started a thread, changed code), that input's failure is sent and the worker ends.
    A child the target forked that returned into the worker ends here too."""
    if os.getpid() != me:
        os._exit(0)
    after = _process_state()
    changed = _what_changed(before, after)
    if changed is not None:
        _send(fd, ("failed", index, *changed))
        os._exit(0)
    return after


def _after_failure(pending: list[int], index: int, warming: bool) -> list[int]:
    """The inputs left for the next worker after ``index`` failed: those after it, or,
    when it failed in a warm-up call (made before any timed one), every other."""
    if warming:
        return [i for i in pending if i != index]
    return pending[pending.index(index) + 1:]


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"{name} (signal {sig})"
    if os.WIFEXITED(status):
        return f"the process exited with status {os.WEXITSTATUS(status)} (exit() called)"
    return f"wait status {status:#x}"


def hang_message(limit: float, per_call: float | None) -> str:
    """What a hang of one input's calls says: the limit, and how the [measure] timeout
    made it ("no return after 6 s (3 × [measure] timeout = 2 s: this input's calls)")."""
    if per_call and abs(limit - per_call) > 1e-9:
        made = (f"{limit / per_call:.3g} × [measure] timeout = {per_call:g} s: the calls of "
                f"this input and their overhead")
    else:
        made = "[measure] timeout"
    return (f"no return after {limit:.4g} s ({made}; raise the timeout if the function is "
            f"just slow)")


def run_isolated(make_worker: Callable[[], Worker], indices: Iterable[int], *,
                 timeout: float, per_call: float | None = None, setup_timeout: float = 120.0,
                 build_timeout: float = BUILD_TIMEOUT_S,
                 on_result: Callable[[int, Any], None] | None = None,
                 on_failure: Callable[[InputFailure], None] | None = None,
                 on_returned: Callable[[int], None] | None = None) -> IsolatedRun:
    """Run ``make_worker().run(i)`` for every ``i`` in a child process.

    ``on_returned``: called with an input's number when one of its untimed calls (a
    worker's warm-up, the call a timed one follows) returned: the function ran on it,
    whatever happens to its timed call.

    ``timeout``: seconds one input may take after its "start" before it counts as a hang;
    ``per_call``: the [measure] timeout it is a multiple of (named in the hang's message:
    the user sets 2 s and reads "no return after 6 s", which must say why 6);
    ``build_timeout``: seconds its arguments may take to build before it (:data:`BUILD_TIMEOUT_S`).
    ``on_result``/``on_failure`` are called in the parent as results arrive, so callers can
    save incrementally.  A ``fatal`` message re-raises its WcetfitError here, after the
    results received so far were handed to ``on_result``.  KeyboardInterrupt stops the
    worker and returns what was measured with ``interrupted=True``.
    """
    output = tempfile.TemporaryFile(prefix="wcetfit-target-output-")
    said = None
    try:
        run = _run_workers(make_worker, list(indices), output.fileno(), timeout=timeout,
                           per_call=per_call,
                           setup_timeout=setup_timeout, build_timeout=build_timeout,
                           on_result=on_result, on_failure=on_failure,
                           on_returned=on_returned)
    finally:
        try:
            said = _sum_up_output(output)
        finally:
            output.close()
    run.output = said
    return run


def _run_workers(make_worker: Callable[[], Worker], pending: list[int], output: int, *,
                 timeout: float, per_call: float | None, setup_timeout: float,
                 build_timeout: float, on_result: Callable[[int, Any], None] | None,
                 on_failure: Callable[[InputFailure], None] | None,
                 on_returned: Callable[[int], None] | None) -> IsolatedRun:
    """:func:`run_isolated`'s loop: a worker per stretch of inputs, the next one after a
    failure; the target's output goes to ``output``."""
    run = IsolatedRun()
    setup_failures = 0
    while pending:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(rfd)
            code = 0
            try:
                _child_main(make_worker, pending, wfd, output)
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        os.close(wfd)
        last_pid = pid
        reader = _Reader(rfd)
        in_progress: tuple[int, str] | None = None
        building: int | None = None            # the input whose arguments are being built
        last_done: int | None = None          # the last input this worker finished
        ready = False
        warming = False                         # in_progress is a warm-up call
        try:
            while True:
                try:
                    limit = (timeout if in_progress else max(build_timeout, timeout)
                             if building is not None else
                             setup_timeout if not ready else timeout)
                    msg = reader.read(limit)
                except TimeoutError:
                    _kill_group(pid)
                    if in_progress is None and building is not None:
                        after = ("" if last_done is None else
                                 f", after {input_label(last_done)} returned in the same "
                                 f"worker (or that call corrupted the process's memory: a "
                                 f"buffer smaller than what it writes?)")
                        fail = InputFailure(
                            building, "hang",
                            f"building its arguments (generate() and packing them) took "
                            f"more than {limit:g} s, before any call{after}", "(not built)")
                        _record_failure(run, fail, on_failure)
                        pending = pending[pending.index(building) + 1:]
                        break
                    if in_progress is None and last_done is not None and pending:
                        # it answered for earlier inputs, then hung before the next one's
                        # call (in malloc, on a heap an earlier call corrupted): that
                        # input fails, naming the one before it, and a fresh worker goes on
                        fail = InputFailure(
                            pending[0], "hang",
                            f"the worker stopped answering before this input's call "
                            f"(no word for {limit:g} s after {input_label(last_done)} "
                            f"returned): that call may have corrupted the process's memory "
                            f"(a buffer smaller than what it writes?)", "(not built)")
                        _record_failure(run, fail, on_failure)
                        pending = pending[1:]
                        break
                    if in_progress is None:
                        raise MeasurementError(
                            f"the measurement worker did not answer within {limit:g} s "
                            "while setting up") from None
                    index, summary = in_progress
                    # (the limit covers all of this input's calls: a multiple of the
                    # per-call [measure] timeout, which is what the user sets)
                    fail = InputFailure(index, "hang", hang_message(timeout, per_call),
                                        summary)
                    _record_failure(run, fail, on_failure)
                    pending = _after_failure(pending, index, warming)
                    break
                if msg is None:  # worker died
                    _, status = os.waitpid(pid, 0)
                    pid = 0
                    if in_progress is None:
                        setup_failures += 1
                        if ready and building is not None and (
                                last_done is None or setup_failures >= _MAX_SETUP_FAILURES):
                            # died building this input's arguments in a worker that had run
                            # no call before (a fresh one gets the input after a worker
                            # that had: an earlier call may have broken its memory)
                            _record_failure(run, InputFailure(
                                building, "crash", f"the worker died while building its "
                                f"arguments (generate() and packing them), before any call: "
                                f"{_describe_status(status)}", "(not built)"), on_failure)
                            pending = pending[pending.index(building) + 1:]
                            setup_failures = 0
                            break
                        if not ready or setup_failures >= _MAX_SETUP_FAILURES:
                            raise MeasurementError(
                                f"the measurement worker died while setting up: "
                                f"{_describe_status(status)}")
                        break
                    index, summary = in_progress
                    kind = "exit" if os.WIFEXITED(status) else "crash"
                    _record_failure(run, InputFailure(index, kind, _describe_status(status),
                                                      summary), on_failure)
                    pending = _after_failure(pending, index, warming)
                    break
                kind = msg[0]
                if warming and in_progress is not None and on_returned is not None and \
                        kind in ("warming", "warmed", "build", "start"):
                    # the next message after an untimed call's announcement: it returned
                    on_returned(in_progress[0])
                if kind == "ready":
                    ready = True
                elif kind == "warming":
                    in_progress = (msg[1], msg[2])
                    warming = True
                elif kind == "warmed":
                    in_progress = None
                    warming = False
                elif kind == "build":
                    building = msg[1]
                elif kind == "start":
                    in_progress = (msg[1], msg[2])
                    building = None
                    warming = False
                elif kind == "done":
                    index, result = msg[1], msg[2]
                    run.results[index] = result
                    in_progress = None
                    building = None
                    last_done = index
                    setup_failures = 0
                    if on_result is not None:
                        on_result(index, result)
                    pending = pending[pending.index(index) + 1:]
                    if not pending:
                        break
                elif kind == "failed":
                    index = msg[1]
                    summary = in_progress[1] if in_progress else "()"
                    _record_failure(run, InputFailure(index, msg[2], msg[3], summary),
                                    on_failure)
                    pending = _after_failure(pending, index, warming)
                    break
                elif kind == "fatal":
                    raise _with_input(msg[2], in_progress, msg[1])
        except KeyboardInterrupt:
            run.interrupted = True
            _sum_up_failures(run)
            return run
        finally:
            os.close(rfd)
            if pid:
                _kill_group(pid)
                os.waitpid(pid, 0)
            else:
                _kill_group(last_pid)
    _sum_up_failures(run)
    return run


def _sum_up_failures(run: IsolatedRun) -> None:
    """One warning for the failures not logged one by one (:data:`LOGGED_FAILURES`), but
    those an earlier run of the same session summed up already."""
    rest = [f for f in run.failures[LOGGED_FAILURES:] if f.describe() not in _SUMMED]
    _SUMMED.update(f.describe() for f in rest)
    if not rest:
        return
    kinds = Counter(f.kind for f in rest)
    log.warning("%d more input(s) failed (%s; -v shows each): the report lists them with "
                "their arguments", len(rest),
                ", ".join(f"{k} ×{n}" for k, n in kinds.most_common()))


# A failed self-check stops the run: the copy may be wrong.  But the same failure comes
# from a function that reads memory its arguments do not own for this input (libgmp's
# __gmpn_mul_1 with n = 0 reads past its one-limb buffer, and what lies there differs
# between the copy's process and the original's): say which input, and both readings.
CHECK_ADVICE = ("if the function reads memory these arguments do not own for this input "
                "(past a buffer, for a length or value it does not accept), narrow "
                "generate() in inputs.py to the inputs it accepts and measure again with "
                "`wcetfit analyze --fresh` (the inputs counted before this one are "
                "stored); otherwise the instrumented copy is wrong, a wcetfit bug")


def _with_input(exc: Exception, in_progress: tuple[int, str] | None,
                current: int | None = None) -> Exception:
    """A worker's fatal error: a failed self-check with the arguments of the input it
    failed on and what it may mean; an input's arguments the prototype refuses with the
    input's number (XML_ErrorString given a negative enum: the message named no input)."""
    from wcetfit.errors import InputsError, SelfCheckError

    if isinstance(exc, InputsError) and current is not None \
            and not str(exc).startswith(("input ", "search input ", "reached input ")):
        return InputsError(f"{input_label(current)}: {exc}; make generate() in inputs.py "
                           f"return what the prototype takes (one value per parameter, "
                           f"each one its type holds), then analyze again (with --fresh "
                           f"when inputs before this one were measured: the store keeps "
                           f"the inputs module they were made with)")
    if not isinstance(exc, SelfCheckError) or in_progress is None:
        return exc
    return SelfCheckError(f"{exc}; the input's arguments: {in_progress[1]}; {CHECK_ADVICE}")


def _kill_group(pid: int) -> None:
    """Kill the worker and whatever the target started in its process group."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# The first failures of a run are warnings each; the others are logged at info and
# summed up in one warning when the run ends (libpng's png_get_uint_31 on init's inputs:
# 60 crashing inputs, one warning line each, in the count run and again in the timing
# run).  Every failure is kept: the report lists them.
LOGGED_FAILURES = 5


# The failures already said in this session (wcetfit.pipeline.open_session starts one):
# the count run, its rounds that follow indirect calls and the search each meet the same
# crashing inputs, and a new user read "input 0 (NULL, 3094, 0): crash: SIGSEGV" three
# times, with two different "N more input(s) failed" beside it.
_WARNED: set[str] = set()
_SUMMED: set[str] = set()


def forget_said_failures() -> None:
    """A new session: its failures are said again."""
    _WARNED.clear()
    _SUMMED.clear()
    _OUTPUT_SUMMED.clear()


def _record_failure(run: IsolatedRun, failure: InputFailure,
                    on_failure: Callable[[InputFailure], None] | None) -> None:
    text = failure.describe()
    said = text in _WARNED or text in _SUMMED
    (log.warning if len(run.failures) < LOGGED_FAILURES and not said else log.info)(
        "%s", text)
    if len(run.failures) < LOGGED_FAILURES:
        _WARNED.add(text)
    run.failures.append(failure)
    if on_failure is not None:
        on_failure(failure)
