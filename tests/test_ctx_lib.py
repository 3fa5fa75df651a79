"""``ctx.lib``: generate() calls the target binary's own functions (those the prototype
declares) to make what the measured function takes, in the measurement worker only.

zlib's ``adler32`` against Python's zlib for the call itself, and libcrypto's
``AES_encrypt`` end to end: its key schedule made by ``AES_set_encrypt_key`` (init's
AES_KEY of random fields, a round count among them, crashed every call).  Each skips,
saying so, when its library is absent."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import pytest

LIBZ = Path("/lib/x86_64-linux-gnu/libz.so.1")
LIBCRYPTO = Path("/lib/x86_64-linux-gnu/libcrypto.so.3")
ZPROTO = ("unsigned long crc32(unsigned long crc, const unsigned char *buf, unsigned int len);"
          "unsigned long adler32(unsigned long adler, const unsigned char *buf, "
          "unsigned int len);")


def _target(tmp_path: Path):
    from smalltarget import write_target
    from wcetfit.target import load_target

    d = write_target(tmp_path / "z", str(LIBZ), "crc32", ZPROTO, "    return ()")
    return load_target(str(d))


class _AdlerWorker:
    """Calls ctx.lib.adler32 in a measurement worker, as generate() would."""

    def __init__(self, target):
        self.target = target

    def run(self, index, start):
        from wcetfit.target import library_functions
        from wcetfit.timing.thunk import build_harness

        start("()")
        ffi = build_harness(self.target.prototype, self.target.cdef).ffi
        data = bytes(range(index, index + 50))
        buf = ffi.new("unsigned char[]", data)
        return int(library_functions(self.target).adler32(1, buf, len(data)))


@pytest.mark.skipif(not LIBZ.exists(), reason="the system's libz.so.1 is absent: ctx.lib is "
                    "checked on libcrypto only, if present")
def test_ctx_lib_runs_the_binarys_function_in_a_worker_and_nothing_in_the_analyzer(tmp_path):
    from wcetfit.errors import InputsError
    from wcetfit.isolate import run_isolated
    from wcetfit.target import library_functions
    from wcetfit.timing.thunk import build_harness

    target = _target(tmp_path)
    run = run_isolated(lambda: _AdlerWorker(target), range(3), timeout=10.0)
    assert run.failures == []
    assert run.results == {i: zlib.adler32(bytes(range(i, i + 50))) for i in range(3)}
    # in the analyzer's own process the call is not made: the zero of its type
    lib = library_functions(target)
    buf = build_harness(target.prototype, target.cdef).ffi.new("unsigned char[]", b"abc")
    assert lib.adler32(1, buf, 3) == 0
    with pytest.raises(InputsError, match=r"ctx\.lib\.inflate: not declared in wcetfit\.toml's "
                                          r"prototype \(declared: crc32, adler32\)"):
        lib.inflate()


@pytest.mark.slow
@pytest.mark.skipif(not LIBCRYPTO.exists(), reason="the system's libcrypto.so.3 is absent: "
                    "ctx.lib is checked on zlib's adler32 only")
def test_aes_encrypt_is_measured_with_the_key_schedule_the_library_makes(tmp_path):
    from smalltarget import analyzed_root
    from wcetfit.measurements import load_counts, open_store
    from wcetfit.target import load_target

    d = tmp_path / "aes"
    d.mkdir()
    (d / "wcetfit.toml").write_text(
        f'binary = "{LIBCRYPTO}"\nfunctions = ["AES_encrypt"]\nprototype = """\n'
        "void AES_encrypt(const unsigned char *in, unsigned char *out, const AES_KEY *key);\n"
        "int AES_set_encrypt_key(const unsigned char *userKey, const int bits, "
        'AES_KEY *key);\n"""\n'
        'cdef = "typedef struct aes_key_st { unsigned int rd_key[60]; int rounds; } '
        'AES_KEY;"\ninputs = "inputs.py"\n[measure]\ninputs = 60\nrepeats = 3\n'
        "[search]\nbudget = 0\n")
    (d / "inputs.py").write_text(
        "def generate(ctx):\n"
        "    rng, ffi = ctx.rng, ctx.ffi\n"
        "    bits = int(rng.choice([128, 192, 256]))\n"
        "    user = ffi.new('unsigned char[]', rng.integers(0, 256, bits // 8, "
        "dtype='uint8').tobytes())\n"
        "    key = ffi.new('AES_KEY *')\n"
        "    assert ctx.lib.AES_set_encrypt_key(user, bits, key) == 0\n"
        "    block = ffi.new('unsigned char[16]', rng.integers(0, 256, 16, "
        "dtype='uint8').tobytes())\n"
        "    return (block, ffi.new('unsigned char[16]'), key)\n")
    root = analyzed_root(d, tmp_path / "aes.json")
    target = load_target(str(d))
    store = open_store(target)
    try:
        counts = load_counts(store, "AES_encrypt", 1)
    finally:
        store.lock.release()
    assert counts.failures == () and len(counts.indices) == 60
    w = root["wcet"]
    assert w["ipet_ticks"] and w["ipet_ticks"] >= w["max_observed_ticks"]
    # the key's round count (10, 12 or 14, by its length) sets the rounds loop (in a
    # callee): the schedule the library made, not zeros, reached the measured function
    import json
    loops = [lp for f in json.loads((tmp_path / "aes.json").read_text())["functions"]
             for lp in f["wcet"]["loops"]]
    assert any(lp["per_entry"] is not None and 9 <= lp["per_entry"] <= 13
               for lp in loops), loops
    # the report's arguments, rebuilt in the analyzer's process, are ctx.lib's placeholders
    # there: generate()'s draws stand for them (the key's length, its bytes, the block)
    shown = root["wcet"]["slowest_input"]["arguments"]
    m = re.fullmatch(r"\(made with ctx\.lib, only where measured; generate\(\) drew "
                     r"(\d+), integers\[(\d+)\] \{[\d, …]+\}, integers\[16\] \{[\d, …]+\}\)",
                     shown)
    assert m and int(m.group(1)) in (128, 192, 256), shown
    assert int(m.group(2)) == int(m.group(1)) // 8, shown


LIBGMP = Path("/lib/x86_64-linux-gnu/libgmp.so.10")
GMPPROTO = ("void __gmpz_init2(void *x, unsigned long bits);"
            "void __gmpz_set_ui(void *x, unsigned long v);"
            "unsigned long __gmpz_get_ui(const void *x);")


class _GmpWorker:
    """Sets an mpz_t through ctx.lib and reads it back, as generate() would."""

    def __init__(self, target):
        self.target = target

    def run(self, index, start):
        from wcetfit.target import library_functions
        from wcetfit.timing.thunk import build_harness

        start("()")
        ffi = build_harness(self.target.prototype, self.target.cdef).ffi
        z = ffi.new("char[]", 16)                       # an __mpz_struct
        lib = library_functions(self.target)
        lib.__gmpz_init2(z, 128)
        lib.__gmpz_set_ui(z, 1000 + index)
        return int(lib.__gmpz_get_ui(z))


@pytest.mark.skipif(not LIBGMP.exists(), reason="the system's libgmp.so.10 is absent: "
                    "ctx.lib names with leading underscores are not checked")
def test_ctx_lib_calls_names_with_leading_underscores(tmp_path):
    """libgmp exports __gmpz_init2 (gmp.h's mpz_init2 is a macro of it): ctx.lib refused
    every name starting with "_" ("AttributeError: __gmpz_init2"), so no gmp target could
    set up its mpz_t.  Python's own dunder lookups are still not functions."""
    import copy

    from smalltarget import write_target
    from wcetfit.isolate import run_isolated
    from wcetfit.target import library_functions, load_target

    d = write_target(tmp_path / "g", str(LIBGMP), "__gmpz_get_ui", GMPPROTO, "    return ()")
    target = load_target(str(d))
    run = run_isolated(lambda: _GmpWorker(target), range(3), timeout=10.0)
    assert run.failures == [] and run.results == {i: 1000 + i for i in range(3)}
    lib = library_functions(target)
    with pytest.raises(AttributeError):
        lib.__deepcopy__
    assert copy.copy(lib) is not None


def test_draws_are_shown_as_a_person_reads_them():
    import numpy as np

    from wcetfit.search.candidates import draws_text
    from wcetfit.search.choices import Choice

    draws = (Choice("integers", np.int64(2779)), Choice("bytes", b"\x01\x02\x03\x04\x05"),
             Choice("random", 0.123456789), Choice("integers", np.arange(3)))
    assert draws_text(draws) == "2779, bytes[5] {1, 2, 3, 4, …}, 0.123457, integers[3] {0, 1, 2}"
    assert draws_text(draws, limit=2).endswith("bytes[5] {1, 2, 3, 4, …}, …")
    assert draws_text(()) == "nothing from ctx.rng"
