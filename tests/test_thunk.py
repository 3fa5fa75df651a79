"""The per-prototype call harness (wcetfit.timing.thunk) and the timing core (wcetfit.timing.calls).

The target functions are compiled here from C into a temporary shared object and
called through the harness at their dlopen addresses; the harness cache lives in a
temporary directory so each session builds it afresh.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from wcetfit.errors import InputsError, MeasurementError, NativeBuildError, TargetError
from wcetfit.timing.thunk import build_harness, harness_key
from wcetfit.timing import calls as timing
from wcetfit.timing import tsc

REPO = Path(__file__).resolve().parent.parent

C_SOURCE = r"""
#define _GNU_SOURCE
#include <sched.h>

struct state { int n; };
struct P { double x, y; };

/* every value bump() saw, in call order: outside the restored argument memory */
int seen[4096];
int nseen;

int bump(struct state *s) { if (nseen < 4096) seen[nseen++] = s->n; s->n++; return s->n; }

struct P mid(struct P a, struct P b, double t)
{
    struct P r = { a.x + (b.x - a.x) * t, a.y + (b.y - a.y) * t };
    return r;
}

double scale(double x, float y) { return x * y; }
void nothing(void) {}
char neg(char c) { return (char)-c; }
int *ident(int *p) { return p; }
unsigned long long wide(unsigned long long a, short b) { return a + (unsigned long long)b; }

long spin(long n)
{
    long x = 0;
    for (long i = 0; i < n; i++) {
        x = x * 3 + i;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* writes the same output whatever the buffer held: needs no restore */
void fill(int *out, int n) { for (int i = 0; i < n; i++) out[i] = i * i; }

/* migrates the calling thread to CPU `to` on call number hop_at (counted from 0) */
int hop_at = -1;
int ncalls;
int hop(int to)
{
    if (ncalls++ == hop_at) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(to, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    return sched_getcpu();
}
"""

CDEF = "struct state { int n; }; struct P { double x, y; };"
PROTOTYPE = """
int bump(struct state *s);
struct P mid(struct P a, struct P b, double t);
double scale(double x, float y);
void nothing(void);
char neg(char c);
int *ident(int *p);
unsigned long long wide(unsigned long long a, short b);
long spin(long n);
void fill(int *out, int n);
int hop(int to);
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("thunk-cache")


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test functions")
    d = tmp_path_factory.mktemp("targets")
    (d / "t.c").write_text(C_SOURCE)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(d / "libt.so"), str(d / "t.c")],
                   check=True)
    return ctypes.CDLL(str(d / "libt.so"))


@pytest.fixture(scope="module")
def h(cache):
    return build_harness(PROTOTYPE, CDEF, cache_dir=cache)


def addr(so, name):
    return ctypes.cast(getattr(so, name), ctypes.c_void_p).value


def reset_seen(so):
    ctypes.c_int.in_dll(so, "nseen").value = 0


def seen(so):
    n = ctypes.c_int.in_dll(so, "nseen").value
    return list((ctypes.c_int * 4096).in_dll(so, "seen")[:n])


# ---- signatures ---------------------------------------------------------------------------

def test_signatures_follow_the_prototype(h):
    f = h.functions
    assert list(f) == ["bump", "mid", "scale", "nothing", "neg", "ident", "wide", "spin",
                       "fill", "hop"]
    assert f["bump"].arg_types == ("struct state *",) and f["bump"].result == "int"
    assert f["mid"].arg_types == ("struct P", "struct P", "double")
    assert f["mid"].result == "struct P"
    assert f["nothing"].arity == 0 and f["nothing"].returns_void
    assert h.ffi.sizeof("struct state") == 4     # ctx.ffi knows the cdef's types


# ---- restore ----------------------------------------------------------------------------

def test_restored_arguments_make_every_repeat_see_the_same_input(h, so):
    st = h.ffi.new("struct state *", [7])
    pack = h.pack("bump", (st,))
    assert [b.size for b in pack.buffers] == [4]
    reset_seen(so)
    timed = h.time("bump", addr(so, "bump"), pack, repeats=25, warmup=3)
    assert seen(so) == [7] * 28                  # 3 warm-up + 25 timed calls
    assert timed.result == 8
    assert timed.ticks.shape == (25,) and (timed.ticks > 0).all()


def test_without_restore_the_state_advances(h, so):
    # the negative control: the same calls without restore see 7, 8, 9
    st = h.ffi.new("struct state *", [7])
    pack = h.pack("bump", (st,))
    reset_seen(so)
    results = [h.call("bump", addr(so, "bump"), pack, restore=False) for _ in range(3)]
    assert results == [8, 9, 10] and seen(so) == [7, 8, 9]


def test_call_restores_first_and_snapshot_shows_the_result(h, so):
    st = h.ffi.new("struct state *", [41])
    pack = h.pack("bump", (st,))
    assert h.call("bump", addr(so, "bump"), pack) == 42
    after = h.snapshot(pack)
    assert after == (int(42).to_bytes(4, "little"),)
    assert h.call("bump", addr(so, "bump"), pack) == 42   # restored to 41 before the call
    assert h.snapshot(pack) == after


def test_adpcm_sample_repeats_start_from_the_packed_state(cache):
    """The bundled adpcm encoder mutates its state struct and output buffer: after any
    number of restored repeats the memory must equal what one call leaves."""
    import tomllib
    from types import SimpleNamespace

    so_path = REPO / "samples/adpcm/build/libadpcm.so"
    if not so_path.is_file():
        pytest.skip("samples/adpcm is not built (make samples)")
    conf = tomllib.loads((REPO / "samples/adpcm/wcetfit.toml").read_text())
    h = build_harness(conf["prototype"], conf.get("cdef", ""), cache_dir=cache)
    ns: dict = {}
    exec(compile((REPO / "samples/adpcm/inputs.py").read_text(), "inputs.py", "exec"), ns)
    lib = ctypes.CDLL(str(so_path))
    fn = addr(lib, "adpcm_coder")
    for index in (1, 2, 9):
        ctx = SimpleNamespace(rng=np.random.default_rng([1, index]), ffi=h.ffi, index=index)
        args = ns["generate"](ctx)
        if args[2] < 2:
            continue
        pack = h.pack("adpcm_coder", args)
        h.call("adpcm_coder", fn, pack)
        once = h.snapshot(pack)
        h.call("adpcm_coder", fn, pack, restore=False)
        assert h.snapshot(pack) != once          # a second unrestored call changes the state
        h.time("adpcm_coder", fn, pack, repeats=7, warmup=2)
        assert h.snapshot(pack) == once


def test_unowned_pointer_is_reported_not_restored(h, so):
    buf = h.ffi.new("int[]", 4)
    raw = h.ffi.cast("int *", buf)               # not cffi-owned: extent unknown
    pack = h.pack("fill", (raw, 4))
    assert pack.buffers == () and pack.unrestored == (0,)
    owned = h.pack("fill", (buf, 4))
    assert [b.size for b in owned.buffers] == [16] and owned.unrestored == ()
    extra = h.pack("fill", (raw, 4), extra=[buf])
    assert [(b.arg, b.size) for b in extra.buffers] == [(None, 16)]


# ---- values through the harness ---------------------------------------------------------

def test_struct_by_value_and_doubles(h, so):
    p = h.pack("mid", ({"x": 0.0, "y": 0.0}, {"x": 2.0, "y": 4.0}, 0.25))
    assert h.call("mid", addr(so, "mid"), p) == {"x": 0.5, "y": 1.0}
    a = h.ffi.new("struct P *", [1.0, -1.0])
    p2 = h.pack("mid", (a[0], {"x": 3.0, "y": 1.0}, 0.5))
    assert h.call("mid", addr(so, "mid"), p2) == {"x": 2.0, "y": 0.0}
    assert h.call("scale", addr(so, "scale"), h.pack("scale", (1.5, 2.0))) == 3.0
    timed = h.time("mid", addr(so, "mid"), p, repeats=3, warmup=1)
    assert timed.result == {"x": 0.5, "y": 1.0}


def test_void_char_pointer_and_wide_integers(h, so):
    assert h.call("nothing", addr(so, "nothing"), h.pack("nothing", ())) is None
    assert h.time("nothing", addr(so, "nothing"), h.pack("nothing", ()), 4).result is None
    assert h.call("neg", addr(so, "neg"), h.pack("neg", (b"\x05",))) == -5
    ip = h.ffi.new("int *")
    got = h.call("ident", addr(so, "ident"), h.pack("ident", (ip,)))
    assert got == int(h.ffi.cast("uintptr_t", ip))
    big = 2**63 + 5
    assert h.call("wide", addr(so, "wide"), h.pack("wide", (big, -3))) == big - 3
    assert h.call("wide", addr(so, "wide"), h.pack("wide", (np.uint64(7), np.int16(1)))) == 8


# ---- errors -------------------------------------------------------------------------------

def test_arity_mismatch_is_a_clear_inputs_error(h):
    with pytest.raises(InputsError) as e:
        h.pack("mid", ({"x": 0, "y": 0}, {"x": 1, "y": 1}))
    assert str(e.value) == "generate() returned 2 arguments, mid takes 3"


def test_wrong_argument_type_names_the_argument(h):
    with pytest.raises(InputsError, match=r"argument 1 of spin \(long\)"):
        h.pack("spin", (1.5,))
    with pytest.raises(InputsError, match=r"argument 1 of bump \(struct state \*\)"):
        h.pack("bump", (h.ffi.new("int *"),))
    with pytest.raises(InputsError, match="tuple"):
        h.pack("spin", 3)


def test_unknown_function(h):
    with pytest.raises(TargetError, match="not declared in the prototype"):
        h.pack("nope", ())


@pytest.mark.parametrize("proto, cdef, pattern", [
    ("void f(int x y);", "", r"^prototype: "),
    ("void f(struct nope s);", "", r"^prototype: "),
    ("int g(int, ...);", "", r"^prototype: g is variadic"),
    ("struct T { int a; }; void f(struct T *);", "", r"^prototype: declares struct T"),
    ("", "", r"^prototype: declares no function"),
    ("void f(int);", "struct { int", r"^cdef: "),
    ("void f(int);", "int helper(int);", r"^cdef: declares function helper"),
    ("void f(struct part *);", "struct part { int a; ...; };", r"^cdef: partial declarations"),
])
def test_declaration_errors_are_one_line_target_errors(proto, cdef, pattern, tmp_path):
    with pytest.raises(TargetError, match=pattern) as e:
        build_harness(proto, cdef, cache_dir=tmp_path)
    assert "\n" not in str(e.value)


def test_compile_failure_is_a_native_build_error(tmp_path):
    # cffi accepts a bit-field wider than its type; the C compiler does not
    with pytest.raises(NativeBuildError, match="cannot compile the call harness.*width"):
        build_harness("void f(int x);", "struct B { char c : 9; };", cache_dir=tmp_path)
    assert not [p for p in (tmp_path / "thunks").iterdir()]   # no half-built entry left


# ---- cache --------------------------------------------------------------------------------

def test_second_build_reuses_the_cache(h, cache):
    again = build_harness(PROTOTYPE, CDEF, cache_dir=cache)
    assert again.module is h.module and again.key == h.key
    assert (cache / "thunks" / h.key).is_dir()


def test_concurrent_builders_share_one_build(tmp_path):
    proto = "int concurrent_probe(int a, double b);"
    code = textwrap.dedent(f"""
        from wcetfit.timing.thunk import build_harness
        h = build_harness({proto!r}, "", cache_dir={str(tmp_path)!r})
        print(h.key)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    keys = {o[0].strip() for o in outs}
    assert keys == {harness_key(proto, "")}
    entries = sorted(p.name for p in (tmp_path / "thunks").iterdir())
    assert entries == sorted(keys)                 # one build, no temporary leftovers


# ---- timing core --------------------------------------------------------------------------

def test_migrated_sample_is_discarded(h, so):
    cpus = tsc.allowed_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to force a migration")
    a, b = cpus[0], cpus[-1]
    hop_at = ctypes.c_int.in_dll(so, "hop_at")
    ctypes.c_int.in_dll(so, "ncalls").value = 0
    hop_at.value = 2 + 3                 # warm-up takes calls 0 and 1: timed sample 3 hops
    try:
        with tsc.pinned(a):
            got = timing.time_input(h, "hop", addr(so, "hop"), h.pack("hop", (b,)),
                                    repeats=8, warmup=2)
    finally:
        hop_at.value = -1
    assert got.migrated == 1
    assert np.isnan(got.ticks[3])
    assert np.isfinite(np.delete(got.ticks, 3)).all()
    assert got.ticks_list()[3] is None
    assert got.result == b               # the last call ran on the CPU it hopped to


def test_time_input_without_migration_keeps_everything(h, so):
    with tsc.pinned() as cpu:
        got = timing.time_input(h, "spin", addr(so, "spin"), h.pack("spin", (50,)),
                                repeats=20)
    assert got.migrated == 0 and got.cpu == cpu and np.isfinite(got.ticks).all()


def test_the_first_timed_call_of_a_process_is_a_discarded_one(h, so):
    """prime_timing makes one timed call the first time a process times a function (the
    timed path runs cold then: a fresh worker's first input had one call 3x its median
    on libm's cbrt), none after, and one again in a forked child, whose caches and page
    tables are not the parent's."""
    ncalls = ctypes.c_int.in_dll(so, "ncalls")
    ncalls.value = 0
    pack = h.pack("hop", (-1,))
    fn = addr(so, "hop")
    assert timing.prime_timing(h, "hop", fn, pack) and ncalls.value == 1
    assert not timing.prime_timing(h, "hop", fn, pack) and ncalls.value == 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        again = timing.prime_timing(h, "hop", fn, pack)
        os.write(w, f"{int(again)} {ncalls.value}".encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    os.close(r)
    assert child == "1 2"
    assert ncalls.value == 1                 # the child's call was its own


def test_needs_restore(h, so):
    st = h.ffi.new("struct state *", [1])
    assert timing.needs_restore(h, "bump", addr(so, "bump"), h.pack("bump", (st,)))
    out = h.ffi.new("int[]", 8)
    assert not timing.needs_restore(h, "fill", addr(so, "fill"), h.pack("fill", (out, 8)))
    assert not timing.needs_restore(h, "spin", addr(so, "spin"), h.pack("spin", (10,)))


def test_straight_line_needs_calls_without_restore(h, so):
    st = h.ffi.new("struct state *", [1])
    with pytest.raises(MeasurementError, match="straight-line fitting needs calls that need "
                                               "no restore"):
        timing.straight_line(h, "bump", addr(so, "bump"), h.pack("bump", (st,)), M=4, rounds=5)


def test_time_seq_layout_and_straight_line(h, so):
    pack = h.pack("spin", (200,))
    seq = h.time_seq("spin", addr(so, "spin"), pack, kmax=6, rounds=10)
    assert seq.ticks.shape == (10, 6)
    with tsc.pinned():
        line = timing.straight_line(h, "spin", addr(so, "spin"), pack, M=16, rounds=40)
        # the same loop with 4x the iterations: its per-call slope must be larger
        longer = timing.straight_line(h, "spin", addr(so, "spin"), h.pack("spin", (800,)),
                                      M=16, rounds=40)
    assert line.slope > 0 and line.slope_se >= 0 and line.fit.n_used > 0
    assert longer.slope > line.slope
    with pytest.raises(MeasurementError, match="kmax"):
        h.time_seq("spin", addr(so, "spin"), pack, kmax=17, rounds=1)


def test_bad_method_is_refused(h, so):
    from wcetfit.errors import WcetfitError

    with pytest.raises(WcetfitError, match="unknown timing method"):
        h.time("spin", addr(so, "spin"), h.pack("spin", (1,)), 3, method="nope")
