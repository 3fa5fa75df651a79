"""Locks: one run per target store, one timing run per machine.

Two runs writing one store would each save their own view and the last writer wins;
two timing runs on one machine disturb each other's ticks (shared caches, the other
core's load, the host's frequency).  Both are advisory ``fcntl.flock`` locks on small
files: the kernel drops them when the holder dies (even by SIGKILL), so a killed run
never leaves a stale lock.  The holder writes who it is (pid, command, target, start
time) into the lock file, so a waiting run can say for whom it waits.

Locks are re-entrant within one process (the CLI takes the store lock with its
``--no-wait`` choice, then the store opens and takes it again) and are not inherited
by forked children: a measurement worker closes its copies, so a worker that outlives
its parent cannot hold a lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import sys
import time
from typing import Callable

from wcetfit.errors import MeasurementError, StoreError, TimingSlotBusy, WcetfitError

log = logging.getLogger(__name__)

STORE_LOCK = "lock"                 # file name inside TARGET_DIR/.wcetfit/
_POLL_S = 0.2

# realpath of the lock file -> [fd, holders in this process]
_held: dict[str, list[int]] = {}


def _close_in_child() -> None:
    for fd, _ in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def machine_lock_path() -> str:
    """Where the machine-wide timing lock lives (``WCETFIT_MACHINE_LOCK`` overrides)."""
    return os.environ.get("WCETFIT_MACHINE_LOCK") or "/tmp/wcetfit-timing.lock"


def holder(path: str) -> dict:
    """What the current holder of ``path`` wrote about itself ({} when unknown)."""
    try:
        with open(path) as f:
            data = json.loads(f.read() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def describe_holder(info: dict) -> str:
    if not info:
        return "another process"
    since = info.get("since")
    when = time.strftime("%H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) \
        else "?"
    return (f"pid {info.get('pid', '?')} ({info.get('command', '?')}, target "
            f"{info.get('target', '?')}, since {when})")


class Lock:
    """A held lock; :meth:`release` (or garbage collection) gives it up."""

    def __init__(self, path: str):
        self.path = path
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        entry = _held.get(self.path)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _held[self.path]
            try:
                os.close(entry[0])      # closing the last descriptor drops the flock
            except OSError:
                pass

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


def acquire(path: str, *, what: str, target: str, wait: bool,
            error: type[WcetfitError] = StoreError,
            on_wait: Callable[[str], None] | None = None,
            busy: type[WcetfitError] | None = None) -> Lock:
    """Take the lock file ``path`` (created if absent).

    Busy: with ``wait`` log (or ``on_wait``) one message naming the holder and block until
    it is free; without, raise ``busy`` (default ``error``) naming the holder."""
    real = os.path.realpath(path)
    entry = _held.get(real)
    if entry is not None:
        entry[1] += 1
        return Lock(real)
    try:
        fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        writable = True
    except PermissionError:     # another user's machine lock: locking needs no write access
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC)
        writable = False
    except OSError as exc:
        raise error(f"cannot open the lock file {real}: {exc.strerror}") from None
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise error(f"cannot lock {real}: {exc.strerror}") from None
            who = describe_holder(holder(real))
            if not wait:
                raise (busy or error)(f"{what} is in use by {who} (lock {real}); wait for "
                                      "it to end or run again without --no-wait")
            if not told:
                message = f"waiting: {what} is in use by {who}"
                (on_wait or log.warning)(message)
                told = True
            time.sleep(_POLL_S)
    except BaseException:
        os.close(fd)
        raise
    if writable:
        info = {"pid": os.getpid(), "command": " ".join(
            [os.path.basename(sys.argv[0] or "python")] + sys.argv[1:3]),
            "target": target, "since": time.time()}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:
            pass        # the lock holds without the note (a full /tmp, say)
    _held[real] = [fd, 1]
    return Lock(real)


def store_lock(store_dir: str, *, wait: bool = True) -> Lock:
    """The lock of one target's store (``store_dir`` is TARGET_DIR/.wcetfit)."""
    os.makedirs(store_dir, exist_ok=True)
    return acquire(os.path.join(store_dir, STORE_LOCK), what=f"the store {store_dir}",
                   target=os.path.dirname(os.path.abspath(store_dir)), wait=wait,
                   error=StoreError)


def timing_lock(target: str, *, wait: bool = True) -> Lock:
    """The machine-wide lock held around a timing run: two timing runs at once on one
    machine disturb each other's ticks."""
    return acquire(machine_lock_path(), what="the machine's timing slot", target=target,
                   wait=wait, error=MeasurementError, busy=TimingSlotBusy)


def machine_load() -> dict[str, float]:
    """Runnable processes now (``procs_running`` of /proc/stat, this process included)
    and the 1-minute load average; {} where /proc is absent."""
    out: dict[str, float] = {"time": time.time()}
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    out["procs_running"] = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/loadavg") as f:
            out["loadavg_1min"] = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def add_wait_option(parser) -> None:  # type: ignore[no-untyped-def]
    """The CLI's --no-wait (measuring commands)."""
    parser.add_argument("--no-wait", action="store_true",
                        help="refuse (one error line) instead of waiting when another run "
                             "holds this target's store or the machine's timing slot")


def lock_target_store(target_dir: str, *, wait: bool) -> Lock:
    """The CLI's first step: take the store lock of TARGET_DIR before anything is read."""
    from wcetfit.target import find_target_file

    return store_lock(os.path.join(os.path.dirname(find_target_file(target_dir)), ".wcetfit"),
                      wait=wait)
