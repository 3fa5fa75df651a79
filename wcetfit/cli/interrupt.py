"""Ctrl-C that is never lost.

Python turns SIGINT into KeyboardInterrupt wherever the main thread happens to be.  Where
that is a weakref callback or a ``__del__`` (logging removes a handler's reference through
one), the interpreter prints "Exception ignored" and carries on: a measuring run kept
going to its end after the user's Ctrl-C (seen once in a CI run of the interrupted-count
test, the interrupt landing in logging's ``_releaseLock``).  The CLI's handler also
records the interrupt, and the long stages' progress callback raises it again at the next
input, so the run stops there and keeps what it measured, as after any Ctrl-C.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

_requested = threading.Event()


def _on_sigint(signum: int, frame: Any) -> None:
    _requested.set()
    raise KeyboardInterrupt


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
