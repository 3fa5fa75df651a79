"""`wcetfit init`'s inputs on the system libraries a new user tried (libpng, zlib, libm,
bzip2): each test writes the inputs module from the real header, runs its generate()
a few hundred times with seeded rngs and checks what went wrong in the trial: a value
taken for a buffer's length (png_save_uint_32 wrote 4 bytes into 1), a length sizing an
array of structs (deflateBound: 4096 z_streams), floats whose results were mostly NaN,
inf or saturated (libm), an int over its whole range without a word (bzip2's
workFactor), and a position far outside the buffer it indexes (png_sig_cmp)."""

import ctypes
import ctypes.util
import math
import os
import re
import shutil

import pytest

from test_init import _inputs, _module
from test_init_contracts import _decl, gcc   # noqa: F401 -- gcc is a fixture

PNG_H = "/usr/include/png.h"
ZLIB_H = "/usr/include/zlib.h"
MATH_H = "/usr/include/math.h"
BZLIB_H = "/usr/include/bzlib.h"
N = 400


def _header(path, function, tmp_path):
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (init preprocesses the header with it)")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed (its library's -dev package)")
    return _module(tmp_path, declaration_from_header(path, [function]))


def _line(text, name):
    body = text[text.index("def generate(ctx):"):]
    [line] = [ln for ln in body.splitlines() if re.match(rf"\s+{name} = ", ln)]
    return line


# --- 1. a value is no length ---------------------------------------------------------

def test_png_save_uint_32_value_is_not_the_buffers_length(tmp_path):
    """png_save_uint_32(png_bytep buf, png_uint_32 i) stores i in 4 bytes of buf: i was
    taken for buf's length (an integer right after a pointer), so buf had i bytes, 1 or 2
    on some inputs, and the call wrote past its end.  i's name says no length: buf is an
    output without a length, sized to hold what such a function writes."""
    mod, ffi, text = _header(PNG_H, "png_save_uint_32", tmp_path)
    args = _inputs(mod, ffi, "png_save_uint_32", n=N)
    assert all(ffi.sizeof(buf) >= 4 for buf, _ in args), \
        min(ffi.sizeof(buf) for buf, _ in args)
    assert max(i for _, i in args) > mod.UNSIZED_LEN        # a value: its whole range
    assert "length" not in _line(text.text, "i")
    assert any(n.startswith("buf: ") and "a guess" in n for n in text.notes)


def test_an_integer_pairs_by_position_only_when_named_like_a_length(gcc, tmp_path):
    """The rule on a made-up header: (p, n), (buf, count) and an unnamed (the declaration
    gives no names: only the position tells) pair; (out, word), (dst, c) do not, and
    their buffers are sized to hold any input."""
    mod, ffi, _ = _module(tmp_path, _decl(tmp_path, """
        #include <stddef.h>
        void put(unsigned char *out, unsigned word, const char *p, size_t n);
        void fill(char *dst, int c, unsigned char *buf, unsigned count);
        void anon(unsigned char *, unsigned);
    """, "put"))
    for out, word, p, n in _inputs(mod, ffi, "put", n=100):
        assert ffi.sizeof(p) == max(n, 1) and ffi.sizeof(out) >= mod.OUT_SPARE
    mod, ffi, _ = _module(tmp_path, _decl(tmp_path, """
        void fill(char *dst, int c, unsigned char *buf, unsigned count);
    """, "fill", "f.h"))
    for dst, c, buf, count in _inputs(mod, ffi, "fill", n=100):
        assert ffi.sizeof(buf) == max(count, 1) and ffi.sizeof(dst) >= mod.OUT_SPARE
    mod, ffi, _ = _module(tmp_path, _decl(tmp_path, """
        void anon(unsigned char *, unsigned);
    """, "anon", "a.h"))
    for buf, n in _inputs(mod, ffi, "anon", n=100):
        assert ffi.sizeof(buf) == max(n, 1)




# --- 2. a length never sizes an array of structs -----------------------------------------

def test_deflate_bound_stream_is_one_struct(tmp_path):
    """deflateBound(z_streamp strm, uLong sourceLen): sourceLen was paired as strm's
    length, up to 4096 z_streams, each filled field by field (a slow search; arguments
    printed as `struct z_stream_s[4096]`).  strm is one struct, filled as any struct
    pointer is."""
    mod, ffi, text = _header(ZLIB_H, "deflateBound", tmp_path)
    args = _inputs(mod, ffi, "deflateBound", n=N)
    one = ffi.sizeof("z_stream")
    for strm, _ in args:
        assert ffi.typeof(strm) is ffi.typeof("z_stream *") and ffi.sizeof(strm[0]) == one
    assert "[]" not in _line(text.text, "strm") and "_struct_z_stream(rng)" in text.text
    assert "length of strm" not in text.text


def test_struct_pointer_with_a_count_is_one_struct(gcc, tmp_path):
    """Even named like a length, an integer after a struct pointer does not size it."""
    mod, ffi, _ = _module(tmp_path, _decl(tmp_path, """
        #include <stddef.h>
        struct rec { int a; double b; };
        double total(const struct rec *r, size_t n);
    """, "total"))
    for r, n in _inputs(mod, ffi, "total", n=50):
        assert ffi.typeof(r) is ffi.typeof("struct rec *")
    # which it is only the user knows: init says what to do if r is an array of n
    mod, ffi, text = _module(tmp_path, _decl(tmp_path, """
        #include <stddef.h>
        struct rec { int a; double b; };
        double total(const struct rec *r, size_t n);
    """, "total", name="t2.h"))
    said = [x for x in text.notes if x.startswith("r: one struct, followed by n")]
    assert said and 'ffi.new("struct rec[]", n)' in said[0]


# --- 3. floats: the ordinary computation, specials rare ---------------------------------

def _libm():
    path = ctypes.util.find_library("m")
    if path is None:
        pytest.skip("libm is not found")
    return ctypes.CDLL(path)


def _results(tmp_path, function, ctype):
    mod, ffi, text = _header(MATH_H, function, tmp_path)
    fn = getattr(_libm(), function)
    args = _inputs(mod, ffi, function, n=N)
    fn.restype = ctype
    fn.argtypes = [ctype] * len(args[0])
    return args, [fn(*a) for a in args], text


@pytest.mark.parametrize("function, ctype", [
    ("erf", ctypes.c_double), ("pow", ctypes.c_double), ("log1p", ctypes.c_double),
    ("powf", ctypes.c_float), ("expm1", ctypes.c_double), ("lgamma", ctypes.c_double),
    ("remainder", ctypes.c_double), ("cbrtf", ctypes.c_float)])
def test_libm_floats_take_the_ordinary_computation(tmp_path, function, ctype):
    """Floats were uniform in +-1000 with 0.0 one time in ten: erf saturated on 90 of 100
    inputs (the other 10 were 0.0), pow gave NaN, inf or 0 on 87, log1p NaN on 48, and
    0.0 took lgamma and remainder into glibc's error handler (no bound).  Now most
    results are finite and not an underflow to 0 (erf: not saturated at +-1), and the
    special arguments are rare."""
    args, results, text = _results(tmp_path, function, ctype)
    flat = [x for a in args for x in a]
    special = [x for x in flat if not math.isfinite(x) or x == 0 or abs(x) < 1e-300]
    assert len(special) <= 0.03 * len(flat), len(special)       # rare (FLOAT_SPECIAL)
    assert sum(x < 0 for x in flat) >= 0.03 * len(flat)         # negatives still drawn
    # across magnitudes: small, around 1, and large arguments
    assert any(0 < abs(x) < 1e-2 for x in flat) and any(abs(x) > 1e2 for x in flat)

    def ordinary(a, r):
        if not math.isfinite(r) or (r == 0 and all(x != 0 for x in a)
                                    and function != "remainder"):
            return False
        return function != "erf" or abs(r) < 1
    share = sum(ordinary(a, r) for a, r in zip(args, results)) / len(args)
    # erf saturates (|x| >= 6) on every draw above 6: a quarter of the log-uniform ones;
    # powf overflows sooner than pow (float's largest is 3.4e38)
    least = 0.65 if function == "erf" else 0.7 if function == "powf" else 0.8
    assert share >= least, (function, share)
    assert "_float(rng, " in text.text


# --- 4. an int over its whole range is said so ------------------------------------------

def test_bzip2_work_factor_is_named_in_a_check_line(tmp_path):
    """BZ2_bzBuffToBuffCompress(..., int blockSize100k, int verbosity, int workFactor):
    workFactor (0..250 by bzip2's manual; bzlib.h has no comment saying so) was drawn
    over the whole int range without a word, so 91 of 100 calls were rejected.  Either
    it is drawn in 0..250 or init names it in a note (printed as a `check:` line)."""
    mod, ffi, text = _header(BZLIB_H, "BZ2_bzBuffToBuffCompress", tmp_path)
    args = _inputs(mod, ffi, "BZ2_bzBuffToBuffCompress", n=N)
    within = all(0 <= a[6] <= 250 for a in args)
    named = [n for n in text.notes if n.startswith("workFactor: ")]
    assert within or (named and "whole range" in named[0]), text.notes
    assert all(a[5] == 0 for a in args)                          # verbosity: quiet
    assert any(n.startswith("blockSize100k: ") for n in text.notes)


def test_whole_range_note_spares_checksums(gcc, tmp_path):
    """crc-like values are meant to take any value: no note for them; other integers
    over their whole range get one."""
    _, _, text = _module(tmp_path, _decl(tmp_path, """
        unsigned long upd(unsigned long crc, int factor, unsigned seed);
    """, "upd"))
    assert [n.split(":")[0] for n in text.notes] == ["factor"]
    assert "over its whole range (-2**31..2**31 - 1)" in text.notes[0]
    # nor a comment asking to narrow them (libdeflate's running crc was asked to)
    crc = next(ln for ln in text.text.splitlines() if ln.strip().startswith("crc = "))
    assert "narrow" not in crc and "any value, a checksum, hash or seed" in crc


def test_a_64_bit_integer_drawn_over_32_bits_is_said_so(gcc, tmp_path):
    """zlib's compressBound(uLong sourceLen): init said "drawn over its whole range
    (0..2**32 - 1, in 32 bits)" of a 64-bit unsigned long."""
    _, _, text = _module(tmp_path, _decl(tmp_path, """
        unsigned long bound(unsigned long count_of_things);
    """, "bound"))
    note = next(n for n in text.notes if n.startswith("count_of_things: "))
    assert "32 of its 64 bits" in note and "whole range (" not in note


# --- 5. a position lies within the buffers ------------------------------------------------

def test_png_sig_cmp_start_is_within_the_buffer(tmp_path):
    """png_sig_cmp(png_const_bytep sig, size_t start, size_t num_to_check): start was
    drawn over 0..2**32-1, so 71 of 100 calls returned at once (start > 7) and a start
    past sig's end is meaningless.  A position in a call with buffer lengths lies within
    them: 0..the shortest length."""
    mod, ffi, text = _header(PNG_H, "png_sig_cmp", tmp_path)
    args = _inputs(mod, ffi, "png_sig_cmp", n=N)
    assert all(0 <= start <= n <= ffi.sizeof(sig) for sig, start, n in args)
    assert sum(start <= 7 for _, start, _ in args) >= 0.3 * N   # small ones often
    assert any(n.startswith("start: ") for n in text.notes)


def test_an_array_typedef_parameter_takes_its_types_length(tmp_path):
    """libuuid's ``uuid_unparse(const uuid_t uu, char *out)``: ``uuid_t`` is ``unsigned
    char[16]``, which decays to a pointer in the prototype; uu was sized UNSIZED_LEN with
    "no length parameter found".  Its length is in its type: 16, and no check line."""
    mod, ffi, text = _header("/usr/include/uuid/uuid.h", "uuid_unparse", tmp_path)
    args = _inputs(mod, ffi, "uuid_unparse", n=50)
    assert all(ffi.sizeof(uu) == 16 for uu, _ in args)
    assert "its size is in its type" in _line(text.text, "uu")
    assert not any(n.startswith("uu: ") for n in text.notes)
