"""A function whose state lives behind a handle the timing run cannot restore: the first
call of an input does the work, later ones return early (expat's XML_Parse on a parser
generate() created: bounds 400× too low, nothing said).  With warm-up calls the timed
ones are later calls: the timing run compares each input's first and last return values
(wcetfit.timing.state), and when they differ the bound is refused with the reason and
the inputs.  Without (the default) each timed call is the first on the handle generate()
made for its pass, as the counted call was, and it is bounded like the same function
with its state rebuilt inside each call."""

from __future__ import annotations

import json
import sys
import os
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from smalltarget import build_library, write_target   # noqa: E402

from wcetfit.timing.state import changed_text, comparable, record, same_return

SOURCE = r"""
#include <stdlib.h>
struct h { int done; };
void *h_new(void) { return calloc(1, sizeof(struct h)); }
/* the work on a fresh handle; a finished one returns at once */
int h_work(void *handle, const unsigned char *buf, int n) {
    struct h *p = handle;
    if (p->done) return 0;
    unsigned s = 0;
    for (int i = 0; i < n; i++) s += buf[i] * (unsigned)i;
    p->done = 1;
    return 1 + (int)(s & 0);
}
/* the same work with its state made and freed inside the call */
int h_once(const unsigned char *buf, int n) {
    void *p = h_new();
    int r = h_work(p, buf, n);
    free(p);
    return r;
}
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return build_library(tmp_path_factory.mktemp("statelib"), SOURCE, "h")


def test_comparisons():
    assert comparable("int") and comparable("double") and not comparable("void")
    assert not comparable("char *") and not comparable("struct s *")
    assert same_return(float("nan"), float("nan")) and not same_return(1, 0)
    assert same_return({"a": 1, "b": 2.0}, {"a": 1, "b": 2.0})
    state: dict = {}
    record(state, "f", 3, 1, 1)
    assert changed_text("f", state["f"]) is None
    record(state, "f", 7, 1, 0)
    text = changed_text("f", state["f"])
    assert "1 of 2 timing pass(es)" in text and "7: 1 first, 0 when timed" in text


def handle_body(library) -> str:
    """generate(ctx)'s body: the handle made by the library's own constructor, as a user
    does for a parser, and a buffer of 64..4096 bytes."""
    return ("    import cffi\n"
            "    own = cffi.FFI()\n"
            "    own.cdef('void *h_new(void);')\n"
            f"    handle = own.dlopen({str(library)!r}).h_new()\n"
            "    handle = ctx.ffi.cast('void *', int(own.cast('uintptr_t', handle)))\n"
            "    n = int(ctx.rng.integers(64, 4097))\n"
            "    buf = ctx.ffi.new('unsigned char[]', bytes(ctx.rng.integers(0, 256, n, dtype='uint8')))\n"
            "    return (handle, buf, n)")


def test_state_behind_a_handle_refuses_the_bound_after_warm_up_calls(library, tmp_path,
                                                                   capsys):
    from wcetfit.cli import main

    d = write_target(tmp_path / "handle", str(library), "h_work",
                     "int h_work(void *handle, const unsigned char *buf, int n);",
                     handle_body(library))
    toml = d / "wcetfit.toml"
    toml.write_text(toml.read_text().replace("seed = 1\n", "seed = 1\nwarmup = 1\n"))
    out = tmp_path / "handle.json"
    # measured, no bound: exit status 1
    assert main(["analyze", str(d), "--json", str(out), "--no-wait"]) == 1
    report = json.loads(out.read_text())
    fn = report["functions"][0]
    w = fn["wcet"]
    assert w["ipet_ticks"] is None
    assert "returned another value on its timed calls" in (w.get("error") or "")
    said = [x for x in report["warnings"] if "state the restored arguments do not reach"
            in x["message"]]
    assert said and any("handles" in x["advice"] for x in said)
    # the fit and the slowest input are of the other path, and said to be; no search ranks
    # candidates by them (analyze's search step skipped it, `wcetfit search` refuses)
    assert fn["timed_other_path"] is True
    from wcetfit import pipeline
    from wcetfit.search.store import load_search_rows
    s = pipeline.open_session(str(d))
    assert load_search_rows(s.store, "h_work", s.target.measure.seed) is None
    capsys.readouterr()
    assert main(["report", str(d)]) == 1
    assert "The times below are of calls that ran another path" in capsys.readouterr().out
    assert main(["search", str(d), "--no-wait"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no search for h_work: h_work returned another value")
    assert "Traceback" not in err

    d2 = write_target(tmp_path / "once", str(library), "h_once",
                      "int h_once(const unsigned char *buf, int n);",
                      "    n = int(ctx.rng.integers(64, 4097))\n"
                      "    return (ctx.ffi.new('unsigned char[]', bytes(ctx.rng.integers(0, 256, n, dtype='uint8'))), n)")
    out2 = tmp_path / "once.json"
    assert main(["analyze", str(d2), "--json", str(out2), "--no-wait"]) == 0
    assert json.loads(out2.read_text())["functions"][0]["timed_other_path"] is False
    w2 = json.loads(out2.read_text())["functions"][0]["wcet"]
    assert w2["ipet_ticks"] is not None and w2["ipet_ticks"] >= w2["max_observed_ticks"]



def test_without_warm_up_the_timed_call_is_the_first_on_the_generated_handle(library,
                                                                           tmp_path):
    """The default: no call of an input before its timed one, and the worker's discarded
    first call on arguments of its own (it had finished input 0's parser, and every
    timed call of input 0 was the early return).  Every timed call does the work."""
    from wcetfit.cli import main

    d = write_target(tmp_path / "handle", str(library), "h_work",
                     "int h_work(void *handle, const unsigned char *buf, int n);",
                     handle_body(library))
    out = tmp_path / "handle.json"
    assert main(["analyze", str(d), "--json", str(out), "--no-wait"]) == 0
    fn = json.loads(out.read_text())["functions"][0]
    assert fn["timed_other_path"] is False
    w = fn["wcet"]
    assert w["ipet_ticks"] is not None and w["ipet_ticks"] >= w["max_observed_ticks"]
    # every timed call did the work: its time follows the bytes the counted call walked
    # (an early return takes the same few ticks whatever n), input 0 (each worker's first,
    # whose parser the discarded call had finished) like the others
    from wcetfit import pipeline
    from wcetfit.measurements import load_counts, load_times
    s = pipeline.open_session(str(d))
    try:
        ts = load_times(s.store, "h_work", 1, "lfence", 3)
        cs = load_counts(s.store, "h_work", 1)
    finally:
        s.store.lock.release()
    work = dict(zip(cs.indices.tolist(), cs.functions[0].counts.sum(axis=1)))
    med = np.nanmedian(ts.ticks, axis=1)
    n = np.array([work[int(i)] for i in ts.indices], dtype=float)
    assert np.corrcoef(n, med)[0, 1] > 0.9
    per = med / n
    zero = list(ts.indices).index(0)
    assert 0.5 * np.median(per) <= per[zero] <= 2.0 * np.median(per)


def test_counted_other_compares_the_count_runs_returns_with_the_timed_ones():
    from wcetfit.timing.state import counted_other

    counted = {i: "0" for i in range(30)}
    assert counted_other(counted, {str(i): "0" for i in range(30)}) is None
    assert counted_other(counted, {str(i): "0" for i in range(30)} | {"3": "18446744073709551615",
                                                                      "4": "-1"}) \
        .differ == ((3, "0", "18446744073709551615"), (4, "0", "-1"))
    assert counted_other({0: "4294967295"}, {"0": "-1"}) is None       # unsigned and signed
    assert counted_other({0: "nan"}, {"0": "nan"}) is None
    assert counted_other(None, {"0": "1"}) is None and counted_other(counted, None) is None
    one = counted_other(counted, {str(i): ("1" if i == 5 else "0") for i in range(30)})
    assert not one.refuses                                 # 1 of 30: said, not refused
    many = counted_other(counted, {str(i): ("-2" if i < 6 else "0") for i in range(30)})
    assert many.refuses
    assert many.describe("f").startswith("f returned another value when timed than when "
                                         "counted on 6 of 30 inputs (0: counted 0, timed -2")


def test_timed_calls_returning_other_values_than_the_counted_ones_refuse_the_bound(
        library, tmp_path):
    """libbz2's BZ2_bzBuffToBuffDecompress under a prototype without its last parameter:
    counted, the register it read from held a value the function rejects (8 blocks);
    timed, one it accepted (a whole decompression, 466,297 ticks), and the report gave a
    bound and blamed the calls' spread.  The count run keeps what each counted call
    returned, and the analysis compares it with the timed calls'."""
    from dataclasses import replace

    from wcetfit import pipeline
    from wcetfit.cli import main

    d = write_target(tmp_path / "once", str(library), "h_once",
                     "int h_once(const unsigned char *buf, int n);",
                     "    n = int(ctx.rng.integers(64, 4097))\n"
                     "    return (ctx.ffi.new('unsigned char[]', bytes(ctx.rng.integers(0, 256, n, dtype='uint8'))), n)")
    assert main(["analyze", str(d), "--no-wait"]) == 0
    s = pipeline.open_session(str(d))
    counts, times = pipeline.stored_measurements(s, "h_once")
    assert counts.returns and set(counts.returns.values()) == {"1"}
    assert len(counts.returns) == len(times.environment["returns"]["h_once"])
    # every timed call "returned" what the counted ones did not: no bound, and why
    other = replace(counts, returns={i: "-2" for i in counts.returns})
    rep = pipeline.analyze_stage(s, "h_once", other, times).report
    w = rep.functions[0].wcet
    assert w.ipet_ticks is None and "returned another value when timed than when counted" \
        in (w.error or "")
    assert rep.functions[0].timed_other_path
    assert any("check the prototype against the function's real one" in f.advice
               for f in rep.warnings)
    # one input only: said, and the bound made
    first = min(counts.returns)
    one = replace(counts, returns={**counts.returns, first: "-2"})
    rep = pipeline.analyze_stage(s, "h_once", one, times).report
    assert rep.functions[0].wcet.ipet_ticks is not None
    assert any("when counted on 1 of" in f.message for f in rep.warnings)


CRASHING = r"""
int pick(int x) {
    if (x == 3) *(volatile int *)0 = 1;     /* the function's own crash */
    return x + 1;
}
"""


def test_a_crash_only_the_instrumented_copy_has_is_said_to_be_wcetfits(tmp_path):
    """libgmp's mpz_powm: 27 of 200 valid inputs reported as "crash: SIGILL", each of
    which the library, called alone, computes right: the instrumented copy crashed, and
    the report blamed the function and the inputs.  A crash of the count run is looked at
    again with the original called alone: one the original shares stays the input's."""
    from wcetfit.count.run import copy_crashes
    from wcetfit.isolate import COPY_CRASH, InputFailure
    from wcetfit.static import binary
    from wcetfit.target import load_target

    lib = build_library(tmp_path, CRASHING, "pick")
    d = write_target(tmp_path / "pick", str(lib), "pick", "int pick(int x);",
                     "    return (int(ctx.index),)")
    target = load_target(str(d))
    model = binary.load_model(str(lib), ["pick"], with_callees=True)
    failures = [InputFailure(3, "crash", "SIGSEGV (signal 11)", "(3)"),
                InputFailure(5, "crash", "SIGILL (signal 4)", "(5)"),
                InputFailure(7, "hang", "no return after 30 s", "(7)")]
    out = {f.index: f for f in copy_crashes(target, model, ["pick"], failures)}
    assert out[3].kind == "crash" and out[7].kind == "hang"
    assert out[5].kind == COPY_CRASH
    assert out[5].message.startswith("the instrumented copy died of SIGILL (signal 4) where "
                                     "the original pick, called alone on this input, returns")
