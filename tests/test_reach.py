"""Reaching unmeasured blocks by symbolic execution (wcetfit.static.reach).

Truth used here: the block addresses come from objdump's disassembly (the instruction after
a compare against the magic constant, etc.), and every witness is checked by running the
real function with it in wcetfit's count run (the instrumented copy), whose counts say
whether the block ran.  Random inputs are counted first to show the block is not one that
any input reaches.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_relocate import build_so, models_for  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("objdump") is None,
                                reason="gcc and objdump are needed")

REACH_C = r"""
volatile int sink;

/* noipa: gcc must not see that the result is at most 255 (else it folds the test away) */
__attribute__((noipa)) static int clampv(int v) { return v < 0 ? 0 : (v & 0xff); }

int magic(unsigned long x, int n)
{
    int r = 0;
    if (x == 0x1234abcdUL) { sink = 1; r = 7; }       /* (a) one value in 2^64 */
    if (clampv(n) > 300) { sink = 3; r = 99; }        /* (b) never: clampv(n) <= 255 */
    return r + n;
}

int spin(int n)
{
    int s = 0;
    for (int i = 0; i < 1000000; i++)                 /* (c) a million iterations first */
        s += sink;
    if (s == 123456789) sink = 9;
    return s + n;
}

int bufcheck(const unsigned char *p, int len)
{
    if (len > 3 && p[0] == 'Z' && p[1] == 'q' && p[3] == 0x7f) { sink = 5; return 1; }
    return 0;
}
"""

PROTO = "int magic(unsigned long x, int n); int spin(int n);" \
        "int bufcheck(const unsigned char *p, int len);"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_so(tmp_path_factory.mktemp("reach"), {"reach.c": REACH_C}, name="reach",
                    flags=("-O1",))


def _objdump(path: str, fn: str) -> list[tuple[int, str]]:
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], check=True,
                         capture_output=True, text=True).stdout
    body = out.split(f"<{fn}>:\n", 1)[1].split("\n\n", 1)[0]
    insns = []
    for line in body.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2).strip()))
    return insns


def _after_compare(path: str, fn: str, const: str, taken: bool) -> int:
    """The block objdump shows behind ``cmp $const,…`` and the conditional jump after it:
    the jump's target (taken) or the next instruction (fall-through)."""
    insns = _objdump(path, fn)
    for k, (_, text) in enumerate(insns):
        if re.match(rf"cmp[bwlq]?\s+\${const},", text):
            jump = insns[k + 1][1]
            assert jump.startswith("j"), jump
            return int(jump.split()[1], 16) if taken else insns[k + 2][0]
    raise AssertionError(f"no cmp ${const} in {fn}")


def _template(**kw):
    from wcetfit.static.reach import ArgTemplate
    return ArgTemplate(tuple(kw.values()))


def _counts(path: str, fn: str, calls):
    """Per call, {block address: count} of ``fn`` in wcetfit's count run."""
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.count.relocate import closure
    from wcetfit.loader import load_binary
    from wcetfit.timing.thunk import build_harness

    h = build_harness(PROTO, "")
    models = models_for(path, [fn])
    out = []
    with InstrumentedCopy(load_binary(path), closure(models, [fn])) as copy:
        counter = Counter(copy, fn, h)
        cols = copy.block_addresses(fn)
        for i, make in enumerate(calls):
            r = counter.count(i, h.pack(fn, make(h)))
            out.append(dict(zip(cols, (int(c) for c in r.counts[fn]))))
    return out


@pytest.mark.slow
def test_magic_value_is_found_and_the_witness_reaches_it(lib):
    from wcetfit.static.binary import load_model
    from wcetfit.static.reach import REACHED, UNREACHABLE, IntParam, reach_blocks

    model = load_model(lib, ["magic"]).functions["magic"]
    magic_block = _after_compare(lib, "magic", "0x1234abcd", taken=True)
    never_block = _after_compare(lib, "magic", "0x12c", taken=False)
    blocks = {b.address for b in model.blocks}
    assert {magic_block, never_block} <= blocks, "objdump's blocks are the static model's"

    # random inputs in the template's ranges never run the magic block
    rng = np.random.default_rng(16)
    randoms = [(int(rng.integers(0, 1 << 40)), int(rng.integers(-100, 1000))) for _ in range(50)]
    seen = _counts(lib, "magic", [lambda h, a=a: a for a in randoms])
    assert all(c[magic_block] == 0 and c[never_block] == 0 for c in seen)

    t = time.perf_counter()
    res = reach_blocks(lib, model.address, [magic_block, never_block],
                       _template(x=IntParam(0, 1 << 40), n=IntParam(-100, 1000)), budget_s=60)
    print(f"magic: {time.perf_counter() - t:.2f} s:", *(f"{r.address:#x} {r.status} "
          f"{r.witness.describe() if r.witness else r.note}" for r in res), sep="\n  ")
    by = {r.address: r for r in res}
    assert by[magic_block].status == REACHED
    x, n = by[magic_block].witness.values
    assert x == 0x1234abcd and -100 <= n <= 1000
    assert by[never_block].status == UNREACHABLE, by[never_block].note
    assert by[never_block].witness is None

    # the witness, run for real, executes the block (once per call)
    (c,) = _counts(lib, "magic", [lambda h: (x, n)])
    assert c[magic_block] == 1 and c[never_block] == 0


@pytest.mark.slow
def test_buffer_contents_are_solved(lib):
    from wcetfit.static.binary import load_model
    from wcetfit.static.reach import REACHED, BufParam, IntParam, reach_blocks

    model = load_model(lib, ["bufcheck"]).functions["bufcheck"]
    target = _after_compare(lib, "bufcheck", "0x7f", taken=False)
    assert target in {b.address for b in model.blocks}
    (r,) = reach_blocks(lib, model.address, [target],
                        _template(p=BufParam(8), n=IntParam(0, 8)), budget_s=60)
    assert r.status == REACHED, r.note
    data, n = r.witness.values
    assert len(data) == 8 and 0 <= n <= 8
    (c,) = _counts(lib, "bufcheck", [lambda h: (h.ffi.new("unsigned char[]", data), n)])
    assert c[target] == 1


@pytest.mark.slow
def test_block_behind_a_long_loop_is_not_found_in_a_tiny_budget(lib):
    from wcetfit.static.binary import load_model
    from wcetfit.static.reach import NOT_FOUND, IntParam, reach_blocks

    model = load_model(lib, ["spin"]).functions["spin"]
    target = _after_compare(lib, "spin", "0x75bcd15", taken=True)
    assert target in {b.address for b in model.blocks}
    t = time.perf_counter()
    (r,) = reach_blocks(lib, model.address, [target], _template(n=IntParam(-100, 1000)),
                        budget_s=1.0)
    print(f"spin: {time.perf_counter() - t:.2f} s: {r.status}: {r.note}")
    assert r.status == NOT_FOUND and r.witness is None
    assert "budget" in r.note


def test_witness_describe_and_bad_address(lib):
    from wcetfit.errors import BinaryError
    from wcetfit.static.reach import IntParam, Witness, reach_blocks

    assert Witness((5, b"\x01\x02")).describe() == "arg0 = 5 (0x5), arg1 = buffer[2] 0102"
    with pytest.raises(BinaryError):
        reach_blocks(lib, 0x7fff_0000_0000, [0x7fff_0000_0000], _template(n=IntParam()), 1.0)


ZLIB = "/lib/x86_64-linux-gnu/libz.so.1"


@pytest.mark.slow
def test_zlib_adler32_z_every_verdict_checked_by_running_it():
    """A real library: adler32_z(adler, buf, len) with len in [0, 16] and a 16-byte buffer.
    Every witness is run in the count run and must execute its block; every block called
    unreachable must stay unexecuted over all 17 lengths (the only input that steers the
    control flow besides buf being non-null) with random bytes and adler values."""
    if not os.path.exists(ZLIB):
        pytest.skip(f"{ZLIB} is absent")
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.count.relocate import closure
    from wcetfit.loader import load_binary
    from wcetfit.static.reach import (NOT_FOUND, REACHED, UNREACHABLE, BufParam, IntParam,
                                      reach_blocks)
    from wcetfit.timing.thunk import build_harness

    fn = "adler32_z"
    models = models_for(ZLIB, [fn])
    model = models[fn]
    t = time.perf_counter()
    res = reach_blocks(ZLIB, model.address, [b.address for b in model.blocks],
                       _template(adler=IntParam(0, 2**32 - 1), buf=BufParam(16),
                                 n=IntParam(0, 16)), budget_s=60)
    took = time.perf_counter() - t
    stat = {s: sum(r.status == s for r in res) for s in (REACHED, UNREACHABLE, NOT_FOUND)}
    print(f"{fn}: {len(res)} blocks in {took:.2f} s: {stat}")
    assert stat[REACHED] > 0

    h = build_harness("unsigned long adler32_z(unsigned long adler, const unsigned char *buf,"
                      " size_t len);", "")
    rng = np.random.default_rng(4)
    with InstrumentedCopy(load_binary(ZLIB), closure(models, [fn])) as copy:
        counter = Counter(copy, fn, h)
        cols = copy.block_addresses(fn)

        def run(i, adler, data, n):
            r = counter.count(i, h.pack(fn, (adler, h.ffi.new("unsigned char[]", data), n)))
            return dict(zip(cols, (int(c) for c in r.counts[fn])))

        for i, r in enumerate(res):
            if r.status == REACHED:
                adler, data, n = r.witness.values
                assert run(i, adler, data, n)[r.address] >= 1, r.witness.describe()
        never = {r.address for r in res if r.status == UNREACHABLE}
        for n in range(17):
            for k in range(3):
                c = run(1000 + 3 * n + k, int(rng.integers(0, 2**32)),
                        rng.integers(0, 256, 16, dtype=np.uint8).tobytes(), n)
                assert not any(c[a] for a in never), (n, [hex(a) for a in never if c[a]])


@pytest.mark.slow
def test_cli_reach_on_a_counted_target(lib, tmp_path, capsys):
    """`wcetfit count` then `wcetfit reach`: the never-executed blocks of magic() are
    listed with their verdicts (block addresses from objdump)."""
    from wcetfit.cli import main

    (tmp_path / "wcetfit.toml").write_text(
        f'binary = "{lib}"\nfunctions = ["magic"]\n'
        'prototype = "int magic(unsigned long x, int n);"\ninputs = "inputs.py"\n'
        "[measure]\ninputs = 20\nseed = 3\n")
    (tmp_path / "inputs.py").write_text(
        "def generate(ctx):\n"   # input 0 has x = 0: the range then covers 0x1234abcd
        "    x = 0 if ctx.index == 0 else int(ctx.rng.integers(0, 1 << 40))\n"
        "    return (x, int(ctx.rng.integers(-100, 1000)))\n")
    assert main(["count", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["reach", str(tmp_path), "--budget", "60"]) == 0
    out = capsys.readouterr().out
    print(out)
    magic_block = _after_compare(lib, "magic", "0x1234abcd", taken=True)
    never_block = _after_compare(lib, "magic", "0x12c", taken=False)
    lines = {int(m.group(1), 16): m.group(2)
             for m in re.finditer(r"\((0x[0-9a-f]+)\): (.*)", out)}
    assert set(lines) == {magic_block, never_block}
    assert lines[magic_block].startswith("reached") and "0x1234abcd" in lines[magic_block]
    assert lines[never_block].startswith("proven unreachable")
    assert main(["reach", str(tmp_path), "--budget", "0"]) == 2


def test_the_budget_never_interrupts_a_lock_being_taken_or_released():
    """The budget's SIGALRM raised inside angr while a page lock's __enter__ had acquired
    it: the lock stayed held and the next copy of that page deadlocked a CI run.  The
    alarm is deferred while any frame is entering or leaving a ``with``."""
    import sys

    from wcetfit.static.reach import _in_a_context_manager

    class Lock:
        def __enter__(self):
            self.inside = _in_a_context_manager(sys._getframe())
            return self

        def __exit__(self, *exc):
            self.leaving = _in_a_context_manager(sys._getframe())

    lock = Lock()
    with lock:
        in_body = _in_a_context_manager(sys._getframe())
    assert lock.inside and lock.leaving and not in_body


def test_the_budget_alarm_waits_out_a_finalizer():
    """zlib's uncompress2: the alarm rang in angr's PagedMemoryMixin.__del__, where Python
    prints the exception as a traceback ("Exception ignored in …") and drops it."""
    import gc
    import sys

    from wcetfit.static.reach import _in_a_context_manager

    seen = []

    class Page:
        def __del__(self):
            seen.append(_in_a_context_manager(sys._getframe()))

    Page()
    gc.collect()
    assert seen == [True]
    # nor a weak reference's callback (WeakValueDictionary's remove, in a CI run)
    import weakref

    class Value:
        pass

    table = weakref.WeakValueDictionary()
    v = Value()
    table["k"] = v
    frames = []

    def spy(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "remove":
            frames.append(_in_a_context_manager(frame))
    before = sys.getprofile()
    sys.setprofile(spy)
    try:
        del v
        gc.collect()
    finally:
        sys.setprofile(before)
    assert frames and all(frames)


def test_paths_angr_stopped_name_the_first_error():
    """libdeflate's adler32: "2 path(s) stopped by an angr error", and nothing said which
    (angr lacks MMX's psadbw); the first error is named."""
    from types import SimpleNamespace

    from wcetfit.static.reach import errored_paths

    class UnsupportedCCallError(Exception):
        pass
    errored = [SimpleNamespace(error=UnsupportedCCallError(
        "Unsupported ccall amd64g_calculate_mmx_psadbw")), SimpleNamespace(error=None)]
    assert errored_paths(errored) == (
        "2 path(s) stopped by an angr error (the first: UnsupportedCCallError: Unsupported "
        "ccall amd64g_calculate_mmx_psadbw)")
    assert errored_paths([]) == "0 path(s) stopped by an angr error"


def test_a_null_start_whose_path_faults_gives_no_witness(lib):
    """A pointer may also be NULL, explored from a start of its own; a path through a null
    pointer that reads near address 0 faults in the real call, so it reaches nothing
    (angr would read symbolic bytes there and go on: bufcheck's p[0] == 'Z' test then
    "reached" its block with p = NULL)."""
    from wcetfit.static.reach import REACHED, BufParam, IntParam, reach_blocks

    fn = "bufcheck"
    model = models_for(lib, [fn])[fn]
    target = _after_compare(lib, fn, "0x7f", taken=False)
    res = reach_blocks(lib, model.address, [target],
                       _template(p=BufParam(8, may_be_null=True), n=IntParam(0, 8)),
                       budget_s=60)
    assert res[0].status == REACHED, res[0].note
    p, n = res[0].witness.values
    assert p is not None and p[0] == ord("Z") and n > 3, res[0].witness.describe()


def test_a_null_check_is_reached_with_a_null_pointer_and_runs_so():
    """zlib's adler32_z returns 1 at once for a null buffer (`if (buf == Z_NULL) return
    1L`): no generated input runs that block, and under a template whose pointers were
    never null it was "not found".  With the null start it is reached, the witness's
    buffer is NULL, and the real call with a null pointer runs the block and returns 1."""
    if not os.path.exists(ZLIB):
        pytest.skip(f"{ZLIB} is absent")
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.count.relocate import closure
    from wcetfit.loader import load_binary
    from wcetfit.static.reach import REACHED, BufParam, IntParam, reach_blocks
    from wcetfit.timing.thunk import build_harness

    fn = "adler32_z"
    models = models_for(ZLIB, [fn])
    model = models[fn]
    template = _template(adler=IntParam(0, 2**32 - 1), buf=BufParam(16, may_be_null=True),
                         n=IntParam(0, 16))
    assert "buffer[16] symbolic or NULL" in template.describe()
    res = reach_blocks(ZLIB, model.address, [b.address for b in model.blocks], template,
                       budget_s=60)
    nulls = [r for r in res if r.status == REACHED and r.witness.values[1] is None]
    assert nulls, [(hex(r.address), r.status, r.note) for r in res]
    assert "arg1 = NULL" in nulls[0].witness.describe()

    h = build_harness("unsigned long adler32_z(unsigned long adler, const unsigned char *buf,"
                      " size_t len);", "")
    with InstrumentedCopy(load_binary(ZLIB), closure(models, [fn])) as copy:
        counter = Counter(copy, fn, h)
        cols = copy.block_addresses(fn)
        for i, r in enumerate(nulls):
            adler, _buf, n = r.witness.values
            got = counter.count(i, h.pack(fn, (adler, h.ffi.NULL, n)))
            assert dict(zip(cols, (int(c) for c in got.counts[fn])))[r.address] >= 1
            assert int(got.return_value) == 1, got


def test_each_null_start_is_explored_before_the_buffers_loops_take_the_budget():
    """sqlite3_stricmp(zLeft, zRight) tests each for NULL first.  Given to the depth-first
    search together with the start of real buffers, whose loop over symbolic bytes took
    the whole budget, the second null check was "not found"; the null starts go first,
    one after the other, and both checks are reached with a NULL witness."""
    lib = "/lib/x86_64-linux-gnu/libsqlite3.so.0"
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is absent")
    from wcetfit.static.reach import REACHED, BufParam, reach_blocks

    fn = "sqlite3_stricmp"
    model = models_for(lib, [fn])[fn]
    template = _template(a=BufParam(64, may_be_null=True), b=BufParam(64, may_be_null=True))
    res = reach_blocks(lib, model.address, [b.address for b in model.blocks], template,
                       budget_s=20)
    nulls = {i for r in res if r.status == REACHED
             for i, v in enumerate(r.witness.values) if v is None}
    assert nulls == {0, 1}, [(hex(r.address), r.status, r.note[:80]) for r in res]
