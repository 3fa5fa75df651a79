"""Ctrl-C that is never lost.

Python turns SIGINT into KeyboardInterrupt wherever the main thread happens to be.  Where
that is a weakref callback or a ``__del__`` (logging removes a handler's reference through
one), the interpreter prints "Exception ignored" and carries on: a measuring run kept
going to its end after the user's Ctrl-C (seen once in a CI run of the interrupted-count
test, the interrupt landing in logging's ``_releaseLock``).  The CLI's handler also
records the interrupt, and the long stages' progress callback raises it again at the next
input, so the run stops there and keeps what it measured, as after any Ctrl-C.  Landing in
the logging module's code, it is only recorded: raised there it is ignored with a
traceback printed.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

_requested = threading.Event()


def _on_sigint(signum: int, frame: Any) -> None:
    _requested.set()
    if _in_logging(frame):
        # raised there it is "ignored", with a traceback printed on the user's screen (a
        # second CI run: the interrupt in _releaseLock, logging's handler after a fork);
        # recorded, it is raised at the next input or when the command returns
        return
    raise KeyboardInterrupt


def _in_logging(frame: Any) -> bool:
    """Whether ``frame`` or one of its callers runs the logging module's code."""
    import logging
    import os

    here = os.path.dirname(os.path.abspath(logging.__file__))
    depth = 0
    while frame is not None and depth < 8:
        if os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
            return True
        frame, depth = frame.f_back, depth + 1
    return False


def install() -> None:
    """Take SIGINT (main thread only; elsewhere Python keeps its own handler)."""
    _requested.clear()
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt when a Ctrl-C came and was not acted on."""
    if _requested.is_set():
        raise KeyboardInterrupt
