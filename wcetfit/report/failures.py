"""The inputs the measuring runs left out because they failed, as one finding of the root.

A crash, a hang, a failed differential check: the count and timing runs keep going and
leave the input out (wcetfit.isolate), and the fit never sees it.  The user must read
that where the result is: a report over 42 of 100 inputs, with the other 58 crashed in
EVP_EncodeBlock, described a function the inputs mostly could not call, and an input
whose neighbours crash may itself have corrupted memory without crashing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from wcetfit.report import Finding
from wcetfit.isolate import BUILD_TIMEOUT_S

# Failed inputs named one by one in the finding (the rest are counted).
NAMED_FAILURES = 3


def failed_inputs(counts: Any, times: Any) -> dict[int, Any]:
    """The inputs the count and timing runs left out: input number -> its first failure."""
    failures: dict[int, Any] = {}
    for run in (counts, times):
        for f in getattr(run, "failures", ()) or ():
            failures.setdefault(int(f.index), f)
    return failures


def failed_inputs_finding(counts: Any, times: Any) -> Finding | None:
    """One finding for the inputs the count and timing runs left out, or None."""
    failures = failed_inputs(counts, times)
    if not failures:
        return None
    indices = getattr(times, "indices", None)
    kept = len(indices) if indices is not None else 0
    kinds = Counter(f"{f.kind}: {_short(f.message)}" for f in failures.values())
    first = [failures[i] for i in sorted(failures)[:NAMED_FAILURES]]
    how = ", ".join(f"{k} ×{n}" for k, n in kinds.most_common())
    message = (f"{len(failures)} input(s) failed and are left out of the fit and the bound "
               f"({how}){f'; {kept} were measured' if kept else ''}: "
               + "; ".join(f.describe() for f in first)
               + ("; …" if len(failures) > NAMED_FAILURES else ""))
    building = [i for i, f in sorted(failures.items()) if _in_generate(f)]
    called = len(building) < len(failures)
    advice = ("an input generate() makes should be one the function's contract allows: a "
              "crash usually means a buffer too small for what the function writes, or "
              "an argument out of range; inputs beside crashing ones may corrupt memory "
              "without crashing, so fix generate() (or narrow it) and measure again "
              "(`wcetfit analyze --fresh`)") if called else ""
    if building:
        # (a generate() that loops forever on some inputs read the crash advice, "a buffer
        # too small for what the function writes", about a Python loop of inputs.py)
        advice += (("; " if advice else "")
                   + f"generate() itself did not return for input(s) "
                   + ", ".join(str(i) for i in building[:6]) + (" …" if len(building) > 6
                                                                 else "")
                   + f" within the {BUILD_TIMEOUT_S:g} s its arguments may take, before any "
                   "call: look at "
                   "its loops for these inputs (a draw retried until it fits that never "
                   "does), then `wcetfit analyze --fresh`")
    return Finding(message, advice)


def _in_generate(failure: Any) -> bool:
    """Whether the input failed while its arguments were built, before any call."""
    return failure.kind == "hang" and failure.message.startswith("building its arguments")


# The longest failure kind the summary names before cutting it at a word.
SHORT_KIND = 60


def _short(message: str) -> str:
    """The kind of failure without its details: "SIGABRT (signal 6)", "no return"."""
    text = message.split(";")[0].split(" after ")[0].strip()
    if len(text) <= SHORT_KIND:
        return text
    # at a word, never mid-word ("… took mo ×2")
    return text[:SHORT_KIND].rsplit(" ", 1)[0].rstrip(" ,(") + " …"
