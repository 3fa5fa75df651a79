"""The count run's differential check on real libraries: what may legitimately differ
between the copy's call and the original's (fresh objects, a per-process seed), the C
library's own state (a target whose writable data is the analyzer's heap), and a run in
which nothing could be counted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.dirname(__file__))

ROOT = Path(__file__).resolve().parent.parent
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
JSONC = "/lib/x86_64-linux-gnu/libjson-c.so.5"


def _need(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")


def _counter(library: str, function: str, prototype: str, cdef: str = ""):
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import load_binary
    from wcetfit.static import binary
    from wcetfit.timing.thunk import build_harness

    h = build_harness(prototype, cdef)
    bm = binary.load_model(library, [function], with_callees=True)
    lb = load_binary(library)
    name = bm.function(function).name
    fns, _skipped = relocatable_closure(dict(bm.functions), [name], lb.read)
    copy = InstrumentedCopy(lb, fns)
    return h, copy, Counter(copy, name, h, call_name=function)


# --- comparisons, on their own ----------------------------------------------------------------

def test_fresh_objects_are_compared_by_content():
    """Two strings at different addresses outside the arguments (what an allocating
    function returns) are equal when their contents are; a difference names both."""
    import cffi

    from wcetfit.count.compare import Outcome, ReturnKind, check_same_result, outcome
    from wcetfit.errors import SelfCheckError

    ffi = cffi.FFI()
    kind = ReturnKind.of(ffi, "char *")
    assert kind.pointer and kind.string
    a, b, c = ffi.new("char[]", b"hello"), ffi.new("char[]", b"hello"), ffi.new("char[]", b"help")
    addr = lambda p: int(ffi.cast("uintptr_t", p))  # noqa: E731
    same = [outcome(kind, addr(p), None, (), ()) for p in (a, b)]
    assert same[0].ret != same[1].ret
    check_same_result(kind, same[0], same[1], 0, "f")
    other = outcome(kind, addr(c), None, (), ())
    with pytest.raises(SelfCheckError, match=r"fresh objects.*b'hello'.*b'help'"):
        check_same_result(kind, same[0], other, 0, "f")
    # void *: no size, not compared beyond NULL-ness; NULL against a pointer differs.
    vkind = ReturnKind.of(ffi, "void *")
    assert vkind.pointer and not vkind.item_size and not vkind.string
    check_same_result(vkind, Outcome(1, None, None, (), ()), Outcome(2, None, None, (), ()),
                      0, "f")
    with pytest.raises(SelfCheckError, match="NULL"):
        check_same_result(vkind, Outcome(0, None, None, (), ()),
                          Outcome(2, None, None, (), ()), 0, "f")


# --- real libraries -----------------------------------------------------------------------------

@pytest.mark.slow
def test_json_c_hash_seed_is_drawn_in_the_warm_up():
    """json-c draws its hash seed on first use: without the warm-up call the copy and the
    original draw different seeds and leave different data (the check names the place);
    with it (the default) every input passes."""
    _need(JSONC)
    proto, cdef = "struct json_object *json_tokener_parse(const char *str);", \
        "struct json_object;"
    text = b'{"a": [1, 2, "x"], "b": {"c": null}}'
    # Without the warm-up, in a fresh process (in this one json-c may have drawn its seed
    # already, in another test).
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from test_count_checks import _counter, JSONC\n"
        "from wcetfit.errors import SelfCheckError\n"
        "h, copy, c = _counter(JSONC, 'json_tokener_parse', %r, %r)\n"
        "c._warmed = True\n"
        "try:\n"
        "    c.count(0, h.pack('json_tokener_parse', (h.ffi.new('char[]', %r),)))\n"
        "except SelfCheckError as e:\n"
        "    print('MISMATCH', e)\n" % (os.path.dirname(__file__), proto, cdef, text))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=600)
    assert "MISMATCH" in run.stdout and "writable memory at link-time address" in run.stdout, \
        run.stdout + run.stderr[-2000:]
    h, copy, counter = _counter(JSONC, "json_tokener_parse", proto, cdef)
    with copy:
        for i in range(3):
            r = counter.count(i, h.pack("json_tokener_parse", (h.ffi.new("char[]", text),)))
            assert r.counts[counter.function].sum() > 0


@pytest.mark.slow
def test_libc_is_counted_in_its_own_namespace():
    """strlen of libc (an IFUNC'd AVX2 implementation): libc is loaded a second time
    (dlmopen), the check compares its writable pages without writing any back, and the
    analyzer's own heap is intact afterwards (it was corrupted when the pages were
    restored)."""
    _need(LIBC)
    from wcetfit.loader import WritableData, load_binary

    lb = load_binary(LIBC)
    assert lb.own_namespace
    assert WritableData(lb).ranges                 # compared, in the target's own copy
    h, copy, counter = _counter(LIBC, "strlen", "unsigned long strlen(const char *s);")
    with copy:
        for i, n in enumerate((0, 1, 31, 32, 33, 500, 4097)):
            r = counter.count(i, h.pack("strlen", (h.ffi.new("char[]", b"x" * n),)))
            assert r.return_value == n
    junk = [bytes(range(i % 256)) * 3 for i in range(20000)]   # the analyzer's malloc works
    assert sum(len(j) for j in junk) > 0


@pytest.mark.slow
def test_strdup_returns_fresh_objects_compared_by_content():
    """strdup allocates: copy and original return separate objects; the check compares
    the strings and passes; libc's malloc runs instrumented (its blocks are counted)."""
    _need(LIBC)
    h, copy, counter = _counter(LIBC, "strdup", "char *strdup(const char *s);")
    with copy:
        assert "malloc" in copy.plan.functions
        for i, n in enumerate((0, 5, 100, 3000)):
            r = counter.count(i, h.pack("strdup", (h.ffi.new("char[]", b"y" * n),)))
            assert r.counts["malloc"].sum() > 0
            assert h.ffi.string(h.ffi.cast("char *", r.return_value)) == b"y" * n


def test_fresh_objects_stored_through_an_out_parameter_are_compared_by_content():
    """A ``T **`` argument that receives a fresh object's address (libidn2's
    ``idn2_to_ascii_8z(input, &output, flags)``) held two different addresses after the
    two calls, and the whole analysis stopped on "argument memory differs".  The pointer
    is compared by what it points to, as a returned one: equal strings pass, different
    ones are named."""
    import cffi

    from wcetfit.count.compare import Outcome, check_same_memory, out_pointer_kinds, outcome
    from wcetfit.errors import SelfCheckError
    from wcetfit.timing.harness import Buffer

    ffi = cffi.FFI()
    kinds = out_pointer_kinds(ffi, ("const char *", "char * *", "int", "void * *"))
    assert set(kinds) == {1, 3} and kinds[1].string and not kinds[3].item_size
    slot = ffi.new("char * *")
    a, b, c = (ffi.new("char[]", t) for t in (b"xn--bcher-kva", b"xn--bcher-kva", b"xn--x"))
    addr = lambda p: int(ffi.cast("uintptr_t", p))  # noqa: E731
    pack = SimpleNamespace(buffers=(Buffer(1, addr(slot), 8),))
    before = (bytes(8),)

    def left(p):
        return outcome(None, 0, pack, (addr(p).to_bytes(8, "little"),), (),
                       out_kinds=kinds, before=before)
    check_same_memory(left(a), left(b), (), None, 0, "f")
    with pytest.raises(SelfCheckError, match=r"argument buffer 0 byte 0.*b'xn--bcher-kva'.*"
                                             r"b'xn--x'"):
        check_same_memory(left(a), left(c), (), None, 0, "f")
    # a slot only one call stored a fresh object in is a difference of the memory
    with pytest.raises(SelfCheckError, match="argument memory after the instrumented copy"):
        check_same_memory(left(a), Outcome(0, None, None, before, ()), (), None, 0, "f")


def test_idn2_stores_a_fresh_string_through_its_output_argument():
    """libidn2's ``idn2_to_ascii_8z`` mallocs its result and stores it through ``char
    **output``: counted with the differential check, the two calls' strings agree."""
    lib = "/lib/x86_64-linux-gnu/libidn2.so.0"
    _need(lib)
    h, copy, counter = _counter(lib, "idn2_to_ascii_8z",
                                "int idn2_to_ascii_8z(const char *input, char **output, "
                                "int flags);")
    with copy:
        for i, (name, ascii) in enumerate((("bücher.example", b"xn--bcher-kva.example"),
                                           ("example.org", b"example.org"),
                                           ("straße.de", b"xn--strae-oqa.de"))):
            out = h.ffi.new("char **")
            r = counter.count(i, h.pack("idn2_to_ascii_8z",
                                        (h.ffi.new("char[]", name.encode()), out, 0)))
            assert r.return_value == 0 and h.ffi.string(out[0]) == ascii


def test_an_analysis_of_idn2_with_its_output_argument_counts_every_input(tmp_path):
    """The same through ``wcetfit count``, where the two calls' heaps differ (the
    analysis stopped at input 3: "argument memory after the instrumented copy differs
    … copy wrote 502f9cb366550000, original 605f8db266550000")."""
    lib = "/lib/x86_64-linux-gnu/libidn2.so.0"
    _need(lib)
    from smalltarget import write_target

    d = write_target(tmp_path / "idn", lib, "idn2_to_ascii_8z",
                     "int idn2_to_ascii_8z(const char *input, char **output, int flags);",
                     "    labels = ['b\\u00fccher', 'stra\\u00dfe', 'example', 'xn--abc', 'a' * 40]\n"
                     "    name = '.'.join(labels[int(i)] for i in ctx.rng.integers(0, 5, 3))\n"
                     "    return (ctx.ffi.new('char[]', name.encode()), "
                     "ctx.ffi.new('char **'), 0)", inputs=12, repeats=2)
    res = subprocess.run([sys.executable, "-m", "wcetfit", "count", str(d)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "differential check" not in res.stderr, res.stderr[-2000:]


def test_posix_memalign_stores_a_fresh_pointer_of_no_size():
    """libc's ``posix_memalign(void **memptr, ...)`` stores a fresh ``void *``: its size is
    not in the prototype, so what it points to is not compared, and the two addresses do
    not fail the check."""
    _need(LIBC)
    h, copy, counter = _counter(LIBC, "posix_memalign",
                                "int posix_memalign(void **memptr, size_t alignment, "
                                "size_t size);")
    with copy:
        for i, size in enumerate((16, 4096, 100_000)):
            slot = h.ffi.new("void **")
            r = counter.count(i, h.pack("posix_memalign", (slot, 64, size)))
            assert r.return_value == 0 and int(h.ffi.cast("uintptr_t", slot[0])) % 64 == 0


# --- nothing counted ------------------------------------------------------------------------------

def _crashing_target(where, inputs: int) -> None:
    """A crc32_bitwise target whose every input crashes (a NULL buffer with a length)."""
    lib = ROOT / "samples" / "crc" / "build" / "libcrc.so"
    if not lib.exists():
        pytest.skip("samples not built (make -C samples)")
    (where / "wcetfit.toml").write_text(
        f'binary = "{lib}"\nfunctions = ["crc32_bitwise"]\n'
        'prototype = "unsigned crc32_bitwise(const unsigned char *data, unsigned long len);"\n'
        f'inputs = "inputs.py"\n[measure]\ninputs = {inputs}\nrepeats = 2\nseed = 1\n')
    (where / "inputs.py").write_text("def generate(ctx):\n    return (ctx.ffi.NULL, 64)\n")


def test_no_input_counted_is_an_error(tmp_path, capsys):
    """Every input crashes (a NULL buffer with a length): `wcetfit count` exits 2 naming
    the first failures, never "0 inputs counted ... passed"."""
    from wcetfit.cli import main

    _crashing_target(tmp_path, 3)
    assert main(["count", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: crc32_bitwise: no input could be counted: input 0" in err
    assert "SIGSEGV" in err
    shutil.rmtree(tmp_path / ".wcetfit", ignore_errors=True)


def test_identical_failures_stop_the_run_early(tmp_path, capsys):
    """45 inputs that all crash the same way.  The count run first tries the first
    PROBE_INPUTS (16) for indirect targets; their failures do not stop it.  The full run
    then stops after 20 more identical failures (a fresh worker per crash made liblzma's
    500 identical crashes take 3.7 min) and says so; every failure is stored."""
    from wcetfit.cli import main
    from wcetfit.measurements import EARLY_STOP_FAILURES, load_counts, open_store
    from wcetfit.pipeline import PROBE_INPUTS
    from wcetfit.target import load_target

    _crashing_target(tmp_path, 45)
    assert main(["count", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (f"error: the first {EARLY_STOP_FAILURES} inputs all failed the same way, none "
            f"succeeded: stopped before the other {45 - PROBE_INPUTS - EARLY_STOP_FAILURES}") in err
    assert "SIGSEGV" in err and "Traceback" not in err
    store = open_store(load_target(str(tmp_path)))
    try:
        cs = load_counts(store, "crc32_bitwise", 1)
        assert len(cs.failures) == PROBE_INPUTS + EARLY_STOP_FAILURES and len(cs.indices) == 0
    finally:
        store.lock.release()


@pytest.mark.slow
def test_sha_ni_path_is_counted():
    """OpenSSL's SHA-256 block function takes its SHA-NI path on a CPU with sha_ni (the
    callgrind oracle cannot: valgrind's CPU has no SHA extensions); the copy runs that
    path, the digest state equals the original's (differential check) and the counts
    conserve flow."""
    crypto = "/lib/x86_64-linux-gnu/libcrypto.so.3"
    _need(crypto)
    if "sha_ni" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has no SHA extensions")
    from test_count_library import SHA256_IV, _hash_update

    h, copy, counter = _counter(crypto, "SHA256_Update", "int SHA256_Update(unsigned char *c, "
                                "const unsigned char *d, unsigned long n);")
    with copy:
        # The dispatch: `test r11d, 0x20000000` (OpenSSL's SHA capability bit), `jne SHANI`.
        sha_ni = None
        for name, f in copy.models.items():
            for b in f.blocks:
                texts = [i.text() for i in b.instructions]
                if any("0x20000000" in t and t.startswith("test") for t in texts) \
                        and texts[-1].startswith("jne"):
                    sha_ni = (name, int(texts[-1].split()[-1], 16))
        assert sha_ni is not None, "no SHA-NI dispatch found in the copy"
        make = _hash_update(SHA256_IV, 112, 27)
        for i in (3, 5):                                   # 64 and 1000 bytes: full blocks
            r = counter.count(i, h.pack("SHA256_Update", make(h.ffi, i)))
            target = sha_ni[1]        # a block of whichever relocated function holds it
            hits = [int(r.counts[n][copy.plan.slots[n].blocks.index(target)])
                    for n in copy.plan.functions if target in copy.plan.slots[n].blocks]
            assert hits and max(hits) >= 1


def test_a_failed_differential_check_names_the_input_and_what_it_may_mean(tmp_path):
    """A generated input outside the function's contract (``total`` with n == 0 leaves its
    process id in the buffer: the copy's process and the original's differ, as libgmp's
    __gmpn_mul_1 reading past a one-limb buffer does) stops the count run, as a wrong copy
    must; the one error line now gives the input's arguments and says that narrowing
    generate() is the remedy when the input is out of contract."""
    import subprocess
    import sys

    from test_search_failures import _target

    d = _target(tmp_path)
    (d / "inputs.py").write_text(
        "def generate(ctx):\n"
        "    n = 0 if ctx.index == 2 else int(ctx.rng.integers(1, 33))\n"
        "    return (ctx.ffi.new('long[]', max(n, 1)), n)\n")
    r = subprocess.run([sys.executable, "-m", "wcetfit", "count", str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    [line] = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert "differential check for input 2" in line
    assert "the input's arguments: (long[1] {0}, 0)" in line
    assert "narrow generate()" in line and "wcetfit bug" in line
    # the inputs before it are stored: a changed inputs.py is measured again with --fresh
    # (a new user edited it and met "inputs.py changed since the measurements")
    assert "`wcetfit analyze --fresh`" in line


def test_a_report_after_every_input_failed_says_so(tmp_path, capsys):
    """Counted and timed, every input crashed: the report says that no input ran, how
    they failed and the first one (it said "no input has both counts and times", and a
    new user with init's AES_encrypt target could not tell why)."""
    from wcetfit.cli import main

    _crashing_target(tmp_path, 4)
    assert main(["count", str(tmp_path)]) == 2
    capsys.readouterr()
    # nothing to time: said as such, once, not "0 inputs × 2 calls" with status 0
    assert main(["time", str(tmp_path), "--no-wait"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: crc32_bitwise: no input to time, the count run saw every "
                          "one fail: 4 failed (crash ×4)") and err.count("--fresh") == 1, err
    # and the report says no input ran, not "run `wcetfit time` first"
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: crc32_bitwise: no input ran: 4 failed (crash ×4), the first "
                          "input 0 (NULL, 64): crash: SIGSEGV"), err
    assert err.rstrip().endswith("make generate() give arguments the function accepts, then "
                                 "`wcetfit analyze --fresh`") and err.count("\n") == 1


def test_a_stored_heap_pointer_that_differs_is_named_as_one():
    """libgmp's mpz_powm on a result mpz made by mpz_init: it reallocated the limbs and
    stored the new pointer in the struct, the copy's and the original's heaps gave
    different addresses, and the message blamed the inputs or "a wcetfit bug"."""
    from wcetfit.count.compare import Outcome, check_same_memory
    from wcetfit.errors import SelfCheckError

    def struct(pointer: int) -> Outcome:
        mp = (8).to_bytes(4, "little") + (3).to_bytes(4, "little") + \
            pointer.to_bytes(8, "little")
        return Outcome(0, None, None, (mp,), (), ())

    with pytest.raises(SelfCheckError) as exc:
        check_same_memory(struct(0x564DA3C69230), struct(0x564DA44E3960), (), None, 0, "f")
    msg = str(exc.value)
    assert "both are addresses (at byte 8: 0x564da3c69230, 0x564da44e3960)" in msg
    assert "mpz_init2" in msg
    # two values that are no addresses: the message as before
    with pytest.raises(SelfCheckError) as exc:
        check_same_memory(struct(5), struct(6), (), None, 0, "f")
    assert "both are addresses" not in str(exc.value)
