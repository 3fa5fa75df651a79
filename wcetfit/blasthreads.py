"""Limit the threads of the OpenBLAS libraries numpy and scipy carry, for a while.

Why: on this project's 2-core VMs, shared with timing runs and other jobs, OpenBLAS's
threads spin waiting for each other.  Measured on the fit of 1,000 blocks × 100,000 rows
with the machine's load average at ~3: 7.1 s of CPU with one BLAS thread, 28.7 s with two
(37 s wall).  The fit is dominated by a few large matrix products and small
factorizations, where a second core gains at most 2x on an idle machine.

How: the libraries already loaded into the process are found in /proc/self/maps and their
``*openblas_set_num_threads*`` entry points called through ctypes (what threadpoolctl does,
without the dependency).  Anything unexpected makes this a no-op: threads are a matter of
speed, never of results.
"""

from __future__ import annotations

import ctypes
import logging
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)

_SUFFIXES = ("", "64_")
_PREFIXES = ("scipy_openblas_", "openblas_")


def _libraries() -> list[tuple[ctypes.CDLL, str]]:
    """(library, symbol prefix) of every OpenBLAS loaded in this process."""
    out: list[tuple[ctypes.CDLL, str]] = []
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    except OSError:
        return out
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pre in _PREFIXES:
            for suf in _SUFFIXES:
                if hasattr(lib, f"{pre}set_num_threads{suf}") and \
                        hasattr(lib, f"{pre}get_num_threads{suf}"):
                    out.append((lib, f"{pre}%s{suf}"))
                    break
            else:
                continue
            break
    return out


@contextmanager
def limited(threads: int | None) -> Iterator[None]:
    """Run the body with at most ``threads`` BLAS threads (None: leave them alone)."""
    if threads is None:
        yield
        return
    saved: list[tuple[ctypes.CDLL, str, int]] = []
    try:
        for lib, pat in _libraries():
            get = getattr(lib, pat % "get_num_threads")
            get.restype = ctypes.c_int
            n = int(get())
            if n > threads:
                getattr(lib, pat % "set_num_threads")(ctypes.c_int(threads))
                saved.append((lib, pat, n))
    except Exception as exc:          # a speed matter: never fail the caller for it
        log.debug("cannot limit BLAS threads: %s", exc)
    try:
        yield
    finally:
        for lib, pat, n in saved:
            try:
                getattr(lib, pat % "set_num_threads")(ctypes.c_int(n))
            except Exception as exc:
                log.debug("cannot restore BLAS threads: %s", exc)
