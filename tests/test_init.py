"""`wcetfit init`: prototypes from headers and DWARF checked against the compiler's own
layout, generated inputs checked by running them, the newcomer's workflow end to end
(init, then analyze, no hand edits) on system libraries, and bad input as one line."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from wcetfit.errors import TargetError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIR = "/lib/x86_64-linux-gnu"

HEADER = r"""
#include <stddef.h>
#include <stdint.h>
typedef unsigned char u8;
enum mode { MODE_A = 1, MODE_B = 4, MODE_C = 9 };
struct inner { short v[3]; unsigned flag : 3; enum mode m; };
struct point { int x; double y; struct inner in; struct point *next; char name[8]; };
typedef struct { uint32_t a; const char *label; } pair_t;
typedef int (*cb_t)(const void *, size_t);
struct hidden;
long probe(const u8 *buf, size_t len, struct point *p, pair_t *q, cb_t cb, float scale,
           struct hidden *h, char **argv);
unsigned sum_bytes(const void *p, size_t n);
void fir(const short *x, int n, const short *h, int taps, short *y);
int pack(char *dest, unsigned *destLen, const char *source, unsigned sourceLen, int level);
"""

SOURCE = r"""
#include "lib.h"
long probe(const u8 *buf, size_t len, struct point *p, pair_t *q, cb_t cb, float scale,
           struct hidden *h, char **argv)
{
    long s = 0;
    for (size_t i = 0; i < len; i++)
        s += buf[i] * (long)p->x;
    return s + q->a + (long)scale + (h != 0) + (argv != 0) + (cb != 0) + p->in.m;
}
unsigned sum_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i] & 1 ? b[i] : 1;
    return s;
}
void fir(const short *x, int n, const short *h, int taps, short *y)
{
    for (int i = 0; i < n; i++) {
        int acc = 0;
        for (int k = 0; k < taps && k <= i; k++)
            acc += x[i - k] * h[k];
        y[i] = (short)(acc >> 8);
    }
}
int pack(char *dest, unsigned *destLen, const char *source, unsigned sourceLen, int level)
{
    unsigned n = sourceLen < *destLen ? sourceLen : *destLen;
    for (unsigned i = 0; i < n; i++)
        dest[i] = source[i] ^ (char)level;
    *destLen = n;
    return 0;
}
"""

# The compiler's own answer for the layout of what the prototypes use.
LAYOUT_C = r"""
#include <stdio.h>
#include <stddef.h>
#include "lib.h"
int main(void)
{
    printf("struct point %zu\n", sizeof(struct point));
    printf("struct point.y %zu\n", offsetof(struct point, y));
    printf("struct point.in %zu\n", offsetof(struct point, in));
    printf("struct point.next %zu\n", offsetof(struct point, next));
    printf("struct point.name %zu\n", offsetof(struct point, name));
    printf("struct inner %zu\n", sizeof(struct inner));
    printf("struct inner.m %zu\n", offsetof(struct inner, m));
    printf("pair_t %zu\n", sizeof(pair_t));
    printf("pair_t.label %zu\n", offsetof(pair_t, label));
    return 0;
}
"""


def wcetfit(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def one_error_line(res):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    return errors[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("lib")
    (d / "lib.h").write_text(HEADER)
    (d / "lib.c").write_text(SOURCE)
    (d / "layout.c").write_text(LAYOUT_C)
    for name, flags in (("libplain.so", []), ("libdebug.so", ["-g"])):
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *flags, "-o", str(d / name),
                        str(d / "lib.c")], check=True, cwd=d)
    subprocess.run(["gcc", "-o", str(d / "layout"), str(d / "layout.c")], check=True, cwd=d)
    truth = {}
    for line in subprocess.run([str(d / "layout")], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        key, value = line.rsplit(" ", 1)
        truth[key] = int(value)
    return d, truth


def _parsed(decl):
    from wcetfit.timing.prototype import parse_signatures

    ffi, functions = parse_signatures(decl.prototype, decl.cdef)
    # the function first; after it, the functions that set up its structs (initializers)
    assert [n for n, _ in functions] == [decl.function, *decl.initializers.values()]
    return ffi, functions[0][1]


def _layout(ffi):
    def off(t, field):
        return dict(ffi.typeof(t).fields)[field].offset
    return {"struct point": ffi.sizeof("struct point"),
            "struct point.y": off("struct point", "y"),
            "struct point.in": off("struct point", "in"),
            "struct point.next": off("struct point", "next"),
            "struct point.name": off("struct point", "name"),
            "struct inner": ffi.sizeof("struct inner"),
            "struct inner.m": off("struct inner", "m"),
            "pair_t": ffi.sizeof("pair_t"), "pair_t.label": off("pair_t", "label")}


@pytest.mark.parametrize("source", ["header", "dwarf"])
def test_declaration_matches_the_compilers_layout(built, source):
    from wcetfit.scaffold.dwarf import declaration_from_dwarf
    from wcetfit.scaffold.header import declaration_from_header

    d, truth = built
    decl = (declaration_from_header(str(d / "lib.h"), ["probe"]) if source == "header"
            else declaration_from_dwarf(str(d / "libdebug.so"), ["probe"], None))
    assert decl is not None and decl.function == "probe"
    assert [p.name for p in decl.params] == ["buf", "len", "p", "q", "cb", "scale", "h",
                                             "argv"]
    ffi, fctype = _parsed(decl)
    assert _layout(ffi) == truth
    assert [a.cname for a in fctype.args] == [
        "unsigned char *", "size_t", "struct point *", "pair_t *", "int(*)(void *, size_t)",
        "float", "struct hidden *", "char * *"]
    assert ffi.typeof("enum mode").elements == {1: "MODE_A", 4: "MODE_B", 9: "MODE_C"}
    # struct point is reached only through a pointer inside itself, struct hidden only
    # through a pointer: the second stays a declaration
    assert re.search(r"struct hidden\s*;", decl.cdef)
    # the harness compiles from exactly these declarations
    from wcetfit.timing.thunk import build_harness
    assert "probe" in build_harness(decl.prototype, decl.cdef).functions


def test_no_dwarf_is_none_and_dwarf_finds_by_address(built):
    from wcetfit.scaffold.dwarf import declaration_from_dwarf
    from wcetfit.static.elfinfo import read_elf

    d, _ = built
    assert declaration_from_dwarf(str(d / "libplain.so"), ["probe"], None) is None
    elf = read_elf(str(d / "libdebug.so"), with_fdes=False)
    addr = next(s.address for s in elf.symbols if s.name == "fir")
    decl = declaration_from_dwarf(str(d / "libdebug.so"), [], addr)
    assert decl.function == "fir" and [p.name for p in decl.params] == \
        ["x", "n", "h", "taps", "y"]


def _module(tmp_path, decl):
    """The generated inputs module, imported, with the prototype's ffi."""
    import importlib.util

    from wcetfit.scaffold.inputs_writer import write_inputs

    ffi, fctype = _parsed(decl)
    text = write_inputs(decl, ffi, fctype)
    path = tmp_path / f"inputs_{decl.function}.py"
    path.write_text(text.text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, ffi, text


def _inputs(mod, ffi, function, n=30):
    from wcetfit.target import InputContext, input_rng
    return [mod.generate(InputContext(input_rng(1, i), ffi, i, function)) for i in range(n)]


def _module_of_header(tmp_path, header_text, function):
    """The inputs module init writes for ``function`` of a header holding ``header_text``
    (skipped without gcc, which preprocesses the header)."""
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: headers are not preprocessed")
    h = tmp_path / f"{function}.h"
    h.write_text(header_text)
    return _module(tmp_path, declaration_from_header(str(h), [function]))


def test_buffers_sized_from_their_length_parameters(built, tmp_path):
    """The pairs (buf, len), (void *p, size_t n), (dest, destLen)/(source, sourceLen) and an
    output buffer without a length of its own sized from the input's length plus room:
    checked on the generated arguments."""
    from wcetfit.scaffold.header import declaration_from_header

    d, _ = built
    header = str(d / "lib.h")

    mod, ffi, _ = _module(tmp_path, declaration_from_header(header, ["probe"]))
    args = _inputs(mod, ffi, "probe")
    for buf, n, *_ in args:
        assert ffi.sizeof(buf) == max(n, 1)
    assert max(a[1] for a in args) == mod.MAX_LEN            # the slow inputs
    assert len({a[1] for a in args}) > 10                      # and varied lengths
    assert all(a[4] == ffi.NULL and a[6] == ffi.NULL and a[7] == ffi.NULL for a in args)
    assert {getattr(a[2], "in").m for a in args} <= {1, 4, 9}    # enum: declared values

    mod, ffi, _ = _module(tmp_path, declaration_from_header(header, ["sum_bytes"]))
    for p, n in _inputs(mod, ffi, "sum_bytes"):
        assert ffi.sizeof(p) == max(n, 1)

    mod, ffi, text = _module(tmp_path, declaration_from_header(header, ["fir"]))
    for x, n, h, taps, y in _inputs(mod, ffi, "fir"):
        assert ffi.sizeof(x) == 2 * max(n, 1) and ffi.sizeof(h) == 2 * max(taps, 1)
        # the output, from the call's lengths together, twice, plus room (OUT_GROWTH)
        assert ffi.sizeof(y) == 2 * (mod.OUT_GROWTH * (n + taps) + mod.OUT_SPARE)
    assert len(text.notes) == 1 and text.notes[0].startswith("y: ") and \
        "a guess" in text.notes[0]

    mod, ffi, _ = _module(tmp_path, declaration_from_header(header, ["pack"]))
    for dest, dest_len, source, source_len, level in _inputs(mod, ffi, "pack"):
        assert ffi.sizeof(dest) == dest_len[0] == mod.UNSIZED_LEN   # in-out capacity
        assert ffi.sizeof(source) == max(source_len, 1)
        assert -2**31 <= level < 2**31
    # room for a compressor's output on data it cannot compress, the longest input's:
    # bzlib.h's 1 % + 600 bytes (MAX_LEN + 512, the capacity before, was below it)
    assert mod.UNSIZED_LEN >= mod.MAX_LEN + mod.MAX_LEN // 100 + 600


def test_a_text_without_a_length_is_the_longest_on_every_slow_input(tmp_path):
    """strlen(const char *s): a C string no parameter gives the length of.  Its length is
    drawn as a buffer's, MAX_LEN on every SLOW_EVERY-th input (drawn uniform in
    0..MAX_LEN, the longest text came one input in 4,097, and the bound rested on the
    loop bound the inputs happened to reach); the text is printable, NUL-terminated, and
    its length varies on the others."""
    from wcetfit.scaffold.header import declaration_from_header

    mod, ffi, _ = _module(tmp_path, declaration_from_header("/usr/include/string.h",
                                                            ["strlen"]))
    texts = [ffi.string(s) for (s,) in _inputs(mod, ffi, "strlen", n=40)]
    slow = [t for i, t in enumerate(texts) if i % mod.SLOW_EVERY == mod.SLOW_EVERY - 1]
    assert len(slow) == 4 and all(len(t) == mod.MAX_LEN for t in slow)
    assert len({len(t) for t in texts}) > 20
    assert all(32 <= c < 127 for t in texts for c in t)


def test_system_header_lengths_with_underscores_size_their_buffers(tmp_path):
    """glibc's string.h names parameters __s, __n: memcmp(const void *__s1, const void
    *__s2, size_t __n) drew __n over 0..2**32 - 1 beside buffers of 5,120 bytes (the
    length rule took n, not __n), and memchr's __s, whose length comes after another
    parameter, was sized n + OUT_SPARE and called a guess."""
    from wcetfit.scaffold.header import declaration_from_header

    def made(function):
        decl = declaration_from_header("/usr/include/string.h", [function])
        mod, ffi, text = _module(tmp_path, decl)
        return mod, ffi, text, _inputs(mod, ffi, function, n=40)

    mod, ffi, text, args = made("memcmp")
    assert max(n for *_, n in args) == mod.MAX_LEN
    for s1, s2, n in args:
        assert ffi.sizeof(s2) == max(n, 1) and ffi.sizeof(s1) >= n
    # compared over one length: equal up to a drawn point, all of it on the slow inputs
    # and on about half the others (drawn apart, they differed at the first byte 255 times
    # in 256 and memcmp's loop never ran)
    equal = [bytes(ffi.buffer(s1, n)) == bytes(ffi.buffer(s2, n)) for s1, s2, n in args]
    assert all(equal[i] for i in range(len(args)) if i % mod.SLOW_EVERY == mod.SLOW_EVERY - 1)
    assert 0.3 < sum(equal) / len(equal) < 0.95
    mod, ffi, text, args = made("memchr")
    assert max(n for *_, n in args) == mod.MAX_LEN
    assert all(ffi.sizeof(s) == max(n, 1) for s, _, n in args)
    assert not [note for note in text.notes if note.startswith("__s:")]


SHA_H = "/usr/include/openssl/sha.h"
LIBCRYPTO = f"{LIBDIR}/libcrypto.so.3"


def _md_lines(text):
    return [ln for ln in text.splitlines() if re.match(r"\s+md = ", ln)]


def test_output_without_a_length_of_its_own_holds_a_digest(tmp_path):
    """SHA256(const unsigned char *d, size_t n, unsigned char *md) writes 32 bytes to md
    whatever n is: md, with no length of its own, must never be smaller than that (it was
    sized like d, so every input with n < 32 had SHA256 write past its end)."""
    from wcetfit.scaffold.header import declaration_from_header

    if not os.path.exists(SHA_H):
        pytest.skip(f"{SHA_H} is not installed")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    mod, ffi, text = _module(tmp_path, declaration_from_header(SHA_H, ["SHA256"]))
    args = _inputs(mod, ffi, "SHA256", n=100)
    assert any(n < 32 for _, n, _ in args)                   # the inputs that overflowed
    for d, n, md in args:
        assert ffi.sizeof(d) == max(n, 1)
        assert ffi.sizeof(md) >= max(n, 64)                   # SHA512's digest fits too
    # the size is said to be a guess, beside md and in the notes init prints
    [line] = _md_lines(text.text)
    assert "OUT_SPARE" in line and "a guess" in line, line
    assert any(note.startswith("md: ") and "a guess" in note for note in text.notes)


def test_buffers_without_a_length_anywhere_hold_any_input(tmp_path):
    """No length anywhere: an output holds a copy of the longest text input and its NUL
    (strcpy-like), a char buffer ends in a NUL (strtok/dirname-like scans stop inside
    it); a pointer to a scalar output and outputs borrowing a length get room."""
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    h = tmp_path / "k.h"
    h.write_text(textwrap.dedent("""
        #include <stddef.h>
        #include <stdint.h>
        char *cpy(char *dest, const char *src);
        int crcout(const void *buf, size_t len, uint32_t *out);
        void vec(const double *x, size_t n, double *y);
    """))
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["cpy"]))
    assert mod.UNSIZED_LEN >= mod.MAX_LEN + 1 + 64
    for dest, src in _inputs(mod, ffi, "cpy"):
        assert ffi.sizeof(dest) >= mod.MAX_LEN + 1 >= ffi.sizeof(src)
        assert dest[len(dest) - 1] == b"\0"
    assert any(n.startswith("dest: ") and "a guess" in n for n in text.notes)
    mod, ffi, _ = _module(tmp_path, declaration_from_header(str(h), ["crcout"]))
    for buf, n, out in _inputs(mod, ffi, "crcout"):
        assert ffi.sizeof(buf) == max(n, 1) and ffi.sizeof(out) >= 4 * max(n, 64)
    mod, ffi, _ = _module(tmp_path, declaration_from_header(str(h), ["vec"]))
    for x, n, y in _inputs(mod, ffi, "vec"):
        assert ffi.sizeof(x) == 8 * max(n, 1) and ffi.sizeof(y) >= 8 * max(n, 64)


ZLIB_H = "/usr/include/zlib.h"
LZMA_H = "/usr/include/lzma.h"


def _line(text, name):
    [line] = [ln for ln in text.splitlines() if re.match(rf"\s+{name} = ", ln)]
    return line


def test_signed_length_without_a_buffer_is_drawn_like_a_length(tmp_path):
    """A signed integer named like a length that no buffer pairs with runs over
    0..MAX_LEN like the lengths, never negative (a negative len2 makes zlib's crc32_combine
    loop for a very long time: the measurement hung); other signed integers keep their
    whole range."""
    from wcetfit.scaffold.header import declaration_from_header

    mod, ffi, text = _module_of_header(
        tmp_path, "long skip(int fd, long count, short nbytes, int level, unsigned n);\n",
        "skip")
    args = _inputs(mod, ffi, "skip", n=100)
    for name, k in (("count", 1), ("nbytes", 2)):
        values = [a[k] for a in args]
        assert min(values) >= 0 and max(values) == mod.MAX_LEN, (name, min(values))
        assert len(set(values)) > 10
        assert "never negative" in _line(text.text, name)
    assert min(a[0] for a in args) < 0 and min(a[3] for a in args) < 0   # fd, level
    assert max(a[4] for a in args) > mod.MAX_LEN                 # unsigned: as before

    if not os.path.exists(ZLIB_H):
        pytest.skip(f"{ZLIB_H} is not installed")
    # zlib.h declares crc32_combine(uLong, uLong, z_off_t) unnamed; its comment names them
    decl = declaration_from_header(ZLIB_H, ["crc32_combine"])
    assert [p.name for p in decl.params] == ["crc1", "crc2", "len2"]
    mod, ffi, text = _module(tmp_path, decl)
    args = _inputs(mod, ffi, "crc32_combine", n=100)
    assert all(0 <= len2 <= mod.MAX_LEN for _, _, len2 in args)
    assert max(len2 for _, _, len2 in args) == mod.MAX_LEN       # the slow inputs
    assert max(crc1 for crc1, _, _ in args) > mod.MAX_LEN         # a crc is not a length
    assert "never negative" in _line(text.text, "len2")
    # ... and said to be a guess: len2 up to 2**63 - 1 runs its loop 62 times, 0..4096 at
    # most 12, and the bound came out below such a call
    assert [n for n in text.notes if n.startswith("len2: a length no buffer is sized by")]


def test_pointer_to_a_position_is_a_cursor_starting_at_zero(tmp_path):
    """A non-const pointer to an integer named like a position is an in-out cursor: one
    element, 0 (lzma_easy_buffer_encode's size_t *out_pos was UNSIZED_LEN random values,
    so *out_pos was garbage); a pointer to a length (uLongf *destLen) stays the in-out
    capacity of its buffer."""
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    h = tmp_path / "c.h"
    h.write_text(textwrap.dedent("""
        #include <stddef.h>
        int put(char *buf, size_t len, size_t *pos, long *offset, unsigned *outIdx,
                const size_t *index);
    """))
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["put"]))
    for buf, n, pos, offset, idx, index in _inputs(mod, ffi, "put"):
        assert ffi.sizeof(buf) == max(n, 1)
        for cursor, ctype in ((pos, "size_t *"), (offset, "long *"), (idx, "unsigned *")):
            # one element (ffi.new of a pointer type; a buffer is an array) holding 0
            assert ffi.typeof(cursor) is ffi.typeof(ctype) and cursor[0] == 0
        assert ffi.sizeof(index) > ffi.sizeof("size_t")      # const: an input, as before
    for name in ("pos", "offset", "outIdx"):
        assert "cursor" in _line(text.text, name)
    assert not any(note.startswith(("pos:", "offset:", "outIdx:")) for note in text.notes)

    for header in (LZMA_H, ZLIB_H):
        if not os.path.exists(header):
            pytest.skip(f"{header} is not installed")
    mod, ffi, text = _module(tmp_path, declaration_from_header(LZMA_H,
                                                               ["lzma_easy_buffer_encode"]))
    for *_, out, out_pos, out_size in _inputs(mod, ffi, "lzma_easy_buffer_encode"):
        assert ffi.typeof(out_pos) is ffi.typeof("size_t *") and out_pos[0] == 0
        assert ffi.sizeof(out) == max(out_size, 1)
    assert "cursor" in _line(text.text, "out_pos")
    assert not any(note.startswith("out_pos:") for note in text.notes)
    mod, ffi, _ = _module(tmp_path, declaration_from_header(ZLIB_H, ["compress"]))
    for dest, dest_len, source, source_len in _inputs(mod, ffi, "compress"):
        assert ffi.sizeof(dest) == dest_len[0] == mod.UNSIZED_LEN   # in-out capacity
        assert ffi.sizeof(source) == max(source_len, 1)


def test_an_outputs_own_length_beside_read_data_is_its_room(tmp_path):
    """liblzma's lzma_easy_buffer_encode(…, in, in_size, out, out_pos, out_size): out_size
    drawn like a data length was below what the encoder writes on half the inputs, which
    returned LZMA_BUF_ERROR.  A length only outputs take, where the data read has lengths
    of its own, is their room; memset's n, with nothing read, stays a length.  A pointer
    to an integer named like a limit (lzma_stream_buffer_decode's uint64_t *memlimit) is
    one value, no limit, not a buffer of random limits."""
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    h = tmp_path / "e.h"
    h.write_text(textwrap.dedent("""
        #include <stddef.h>
        #include <stdint.h>
        int enc(const uint8_t *in, size_t in_size, uint8_t *out, size_t *out_pos,
                size_t out_size);
        void fill(unsigned char *s, int c, size_t n);
        int dec(uint64_t *memlimit, const uint8_t *in, size_t in_size, unsigned *outMax);
    """))
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["enc"]))
    sizes = [(n, out_size) for _, n, _, _, out_size in _inputs(mod, ffi, "enc")]
    assert all(out_size == mod.UNSIZED_LEN for _, out_size in sizes)
    assert len({n for n, _ in sizes}) > 5                      # the data's length varies
    assert "the capacity of out" in _line(text.text, "out_size")
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["fill"]))
    assert len({n for _, _, n in _inputs(mod, ffi, "fill")}) > 5
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["dec"]))
    for limit, _, _, most in _inputs(mod, ffi, "dec"):
        assert ffi.typeof(limit) is ffi.typeof("uint64_t *") and limit[0] == 2**64 - 1
        assert ffi.typeof(most) is ffi.typeof("unsigned *") and most[0] == 2**32 - 1
    assert "one limit the function reads" in _line(text.text, "memlimit")


@pytest.mark.slow
def test_init_sha256_digest_fits_then_counts_and_times(tmp_path):
    """The newcomer's SHA256 on libcrypto: init, every generated input (through the
    target's own inputs module) gives md room for the digest, and count and time run
    on a few inputs (analyze on libcrypto takes minutes: not here)."""
    from wcetfit.target import generate_input, load_inputs_module, load_target
    from wcetfit.timing.prototype import parse_signatures

    _system(LIBCRYPTO, SHA_H)
    target = tmp_path / "sha"
    res = wcetfit("init", str(target), "--binary", LIBCRYPTO, "--function", "SHA256",
                  "--header", SHA_H)
    assert res.returncode == 0, res.stderr
    t = load_target(str(target))
    ffi, _ = parse_signatures(t.prototype, t.cdef)
    generate = load_inputs_module(t)
    args = [generate_input(generate, t, ffi, "SHA256", i) for i in range(60)]
    assert any(n < 32 for _, n, _ in args)
    assert all(ffi.sizeof(md) >= 32 for _, _, md in args)
    assert re.search(r"md: .*a guess", res.stdout + res.stderr)   # init says so
    res = wcetfit("count", str(target), "--inputs", "6", "--json", "-")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout[res.stdout.index("{"):])["indices"] == list(range(6))
    res = wcetfit("time", str(target), "--inputs", "6", "--repeats", "2", "--json", "-")
    assert res.returncode == 0, res.stderr
    times = json.loads(res.stdout[res.stdout.index("{"):])
    assert len(times["functions"][0]["ticks"]) == 6


@pytest.mark.slow
def test_target_written_loads_and_its_loops_are_valid_keys(built, tmp_path):
    from wcetfit.scaffold.create import create_target
    from wcetfit.static import binary
    from wcetfit.target import load_target
    from wcetfit.wcet.loops import parse_loop_facts

    d, _ = built
    t = create_target(str(tmp_path / "fir"), str(d / "libdebug.so"), "fir")
    assert t.declaration.source.startswith("DWARF")
    target = load_target(str(tmp_path / "fir"))
    assert target.functions == ("fir",) and target.prototype == t.declaration.prototype
    model = binary.load_model(target.binary, ["fir"])
    assert {lp.header for lp in model.function("fir").loops} == {lp.header for lp in t.loops}
    text = (tmp_path / "fir" / "wcetfit.toml").read_text()
    keys = re.findall(r'^# ("fir\+0x[0-9a-f]+") = N', text, re.M)
    assert len(keys) == len(t.loops) >= 2
    # uncommented, every entry names a loop header
    facts = parse_loop_facts({json.loads(k): 10 for k in keys}, model.functions)
    assert {a for _, a in facts} == {lp.header for lp in t.loops}
    # the machine's speed the bound covers is offered, commented: uncommented, it loads
    assert "\n[wcet]\n# machine_speed = 1.5\n" in text and target.machine_speed is None
    (tmp_path / "fir" / "wcetfit.toml").write_text(
        text.replace("# machine_speed = 1.5", "machine_speed = 1.5"))
    assert load_target(str(tmp_path / "fir")).machine_speed == 1.5
    (tmp_path / "fir" / "wcetfit.toml").write_text(text)
    # named by an absolute path, the binary stays absolute: the folder can move
    assert f'binary = "{d / "libdebug.so"}"' in text
    # named relative to where init ran, it is written relative to the folder
    import os
    cwd = os.getcwd()
    try:
        os.chdir(d)
        create_target(str(tmp_path / "rel"), "libdebug.so", "fir")
    finally:
        os.chdir(cwd)
    rel = os.path.relpath(d / "libdebug.so", tmp_path / "rel")
    shown = rel if not rel.startswith(os.pardir + os.sep + os.pardir) else str(d / "libdebug.so")
    assert f'binary = "{shown}"' in (tmp_path / "rel" / "wcetfit.toml").read_text()


@pytest.mark.parametrize("args, message", [
    (["--binary", "/nonexistent/lib.so", "--function", "f"], "no such file"),
    (["--binary", "{d}/libplain.so", "--function", "nosuchfunction", "--header", "{d}/lib.h"],
     "no function named 'nosuchfunction'"),
    (["--binary", "{d}/libplain.so", "--function", "probe", "--header", "{d}/other.h"],
     "declares no function probe"),
    (["--binary", "{d}/libplain.so", "--function", "probe", "--header", "{d}/broken.h"],
     "cannot parse"),
    (["--binary", "{d}/libplain.so", "--function", "probe"], "pass --header"),
    (["--binary", "{d}/libplain.so", "--function", "probe", "--header", "{d}/missing.h"],
     "no such header file"),
])
def test_bad_input_one_line_exit_2(built, tmp_path, args, message):
    d, _ = built
    (d / "other.h").write_text("int unrelated(int x);\n")
    (d / "broken.h").write_text("template <class T> long probe(T x);\n")
    res = wcetfit("init", str(tmp_path / "t"), *[a.format(d=d) for a in args])
    assert message in one_error_line(res)
    assert not (tmp_path / "t" / "wcetfit.toml").exists()


@pytest.mark.slow
def test_existing_target_needs_force(built, tmp_path):
    d, _ = built
    args = ["init", str(tmp_path / "t"), "--binary", str(d / "libplain.so"), "--function",
            "sum_bytes", "--header", str(d / "lib.h")]
    assert wcetfit(*args).returncode == 0
    assert "--force" in one_error_line(wcetfit(*args))
    assert wcetfit(*args, "--force").returncode == 0


@pytest.mark.slow
def test_wrong_prototype_fails_then_corrected_runs_without_fresh(built, tmp_path):
    """A run that failed before measuring does not bind the store to its prototype."""
    d, _ = built
    target = tmp_path / "t"
    res = wcetfit("init", str(target), "--binary", str(d / "libplain.so"), "--function",
                  "sum_bytes", "--header", str(d / "lib.h"))
    assert res.returncode == 0, res.stderr
    toml = target / "wcetfit.toml"
    good = toml.read_text()
    wrong = good.replace("sum_bytes(const void *p, size_t n);", "sum_bytes(const void *p);")
    assert wrong != good
    toml.write_text(wrong)
    assert "takes 1" in one_error_line(wcetfit("count", str(target), "--inputs", "5"))
    toml.write_text(good)
    res = wcetfit("count", str(target), "--inputs", "5", "--json", "-")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout[res.stdout.index("{"):])["indices"] == [0, 1, 2, 3, 4]
    # once measured, the identity holds: another prototype is refused
    toml.write_text(good.replace("const void *p", "const unsigned char *p"))
    assert "prototype changed" in one_error_line(wcetfit("count", str(target), "--inputs", "5"))


@pytest.mark.slow
def test_function_named_by_address_takes_any_prototype_name(built, tmp_path):
    """Count and time accept a function named "0x…" declared under another name."""
    from wcetfit.static.elfinfo import read_elf

    d, _ = built
    addr = next(s.address for s in read_elf(str(d / "libplain.so"), with_fdes=False).symbols
                if s.name == "sum_bytes")
    target = tmp_path / "t"
    res = wcetfit("init", str(target), "--binary", str(d / "libplain.so"), "--function",
                  hex(addr), "--header", str(d / "lib.h"))
    assert res.returncode == 0, res.stderr
    toml = target / "wcetfit.toml"
    text = toml.read_text()
    assert f'functions = ["{hex(addr)}"]' in text
    toml.write_text(text.replace("sum_bytes(", "whatever_it_is_called("))
    res = wcetfit("count", str(target), "--inputs", "6", "--json", "-")
    assert res.returncode == 0, res.stderr
    counts = json.loads(res.stdout[res.stdout.index("{"):])
    assert counts["functions"][0]["address"] == hex(addr)
    res = wcetfit("time", str(target), "--inputs", "6", "--repeats", "2", "--json", "-")
    assert res.returncode == 0, res.stderr
    times = json.loads(res.stdout[res.stdout.index("{"):])
    assert len(times["functions"][0]["ticks"]) == 6
    # a function named by its symbol must be declared under it
    toml.write_text(text.replace(f'["{hex(addr)}"]', '["sum_bytes"]')
                    .replace("sum_bytes(", "other("))
    line = one_error_line(wcetfit("count", str(target), "--inputs", "6", "--fresh"))
    assert "declares other but not sum_bytes" in line


# --- the newcomer's workflow on system libraries ----------------------------------------

def _system(lib, header):
    for path in (lib, header):
        if not os.path.exists(path):
            pytest.skip(f"{path} is not installed")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")


def _init(tmp_path, lib, header, function, name=None):
    """A target init writes for ``function`` of a system library (skipped where the
    library or its header is absent), in ``tmp_path / name``."""
    _system(lib, header)
    target = tmp_path / (name or function)
    res = wcetfit("init", str(target), "--binary", lib, "--function", function,
                  "--header", header)
    assert res.returncode == 0, res.stderr
    return target


def _init_then_analyze(tmp_path, lib, header, function):
    target = _init(tmp_path, lib, header, function)
    res = wcetfit("analyze", str(target), "--inputs", "40", "--repeats", "3", "--json",
                  str(target / "report.json"))
    assert res.returncode == 0, res.stderr
    assert "TSC ticks" in res.stdout
    report = json.loads((target / "report.json").read_text())
    assert report["schema"] == "wcetfit.report/3" and report["inputs"] > 0
    fn = report["functions"][0]
    assert fn["name"] == function
    return target, fn, res


@pytest.mark.slow
def test_init_then_analyze_zlib_crc32(tmp_path):
    """Buffer and length: crc32(uLong crc, const Bytef *buf, uInt len), no hand edits."""
    lib, header = f"{LIBDIR}/libz.so.1", "/usr/include/zlib.h"
    _system(lib, header)
    target, fn, _ = _init_then_analyze(tmp_path, lib, header, "crc32")
    toml = (target / "wcetfit.toml").read_text()
    assert 'prototype = "uLong crc32(uLong crc, const Bytef *buf, uInt len);"' in toml
    assert "typedef Byte Bytef;" in toml
    # crc32 tail-calls crc32_z, whose loops init listed (commented) from the static model
    assert re.search(r'^# "crc32_z\+0x[0-9a-f]+" = N', toml, re.M)
    # the bound comes from the fit over the counted blocks; it is at least what was seen
    wcet = fn["wcet"]
    assert wcet["error"] is None, wcet["error"]
    assert wcet["ipet_ticks"] >= wcet["max_observed_ticks"] > 0


@pytest.mark.slow
def test_init_then_analyze_lzma_struct(tmp_path):
    """A struct pointer with plain fields: lzma_stream_footer_encode(const
    lzma_stream_flags *options, uint8_t *out), no hand edits."""
    lib, header = f"{LIBDIR}/liblzma.so.5", "/usr/include/lzma.h"
    _system(lib, header)
    target, fn, _ = _init_then_analyze(tmp_path, lib, header, "lzma_stream_footer_encode")
    inputs = (target / "inputs.py").read_text()
    # the struct is filled field by field, its enum from the declared values
    assert "def _struct_lzma_stream_flags(rng):" in inputs
    assert "'check': _pick(rng, [0, 1, 4, 10])" in inputs
    toml = (target / "wcetfit.toml").read_text()
    listed = set(re.findall(r'^# "([^"]+)" = N', toml, re.M))
    wcet = fn["wcet"]
    if wcet["error"] is not None:
        # the crc over the footer runs only when the random flags are valid: loops no
        # input entered are named, and they are the ones init listed to bound by hand
        named = set(re.findall(r"(lzma_crc32\+0x[0-9a-f]+)", wcet["error"]))
        assert named and named <= listed, (wcet["error"], listed)
    else:
        assert wcet["ipet_ticks"] >= wcet["max_observed_ticks"] > 0


def test_header_errors_are_target_errors(tmp_path):
    from wcetfit.scaffold.header import declaration_from_header

    h = tmp_path / "v.h"
    h.write_text("int f(int n, ...);\n")
    with pytest.raises(TargetError, match="variadic"):
        declaration_from_header(str(h), ["f"])
    h.write_text(textwrap.dedent("""
        #error this header refuses
    """))
    with pytest.raises(TargetError, match="gcc -E failed"):
        declaration_from_header(str(h), ["f"])
    # a type nobody declared: pycparser's "Invalid declaration", and gcc's line and name
    h.write_text("typedef unsigned long long hash_t;\n"
                 "hash_t f(const void *input, my_size_t length);\n")
    with pytest.raises(TargetError, match=r"gcc says: .*v\.h:2:\d+: error: unknown type "
                                          r"name .my_size_t."):
        declaration_from_header(str(h), ["f"])


def test_header_own_standard_typedef_is_kept_and_parse_errors_name_the_line(tmp_path):
    """A header's own `typedef int bool;` is not cffi's 1-byte _Bool: it is kept in the
    cdef (the harness build then says whether it clashes) rather than silently dropped;
    a header that does not parse is named by its own file and line."""
    from wcetfit.scaffold.header import declaration_from_header

    h = tmp_path / "own.h"
    h.write_text("#include <stddef.h>\ntypedef int bool;\nint flag(bool b, size_t n);\n")
    decl = declaration_from_header(str(h), ["flag"])
    assert decl.cdef == "typedef int bool;"          # size_t is the system's: not repeated
    h.write_text("int ok(int x);\n\ntemplate <class T> int flag(T x);\n")
    with pytest.raises(TargetError, match=r"own\.h:3"):
        declaration_from_header(str(h), ["flag"])


@pytest.mark.slow
def test_library_struct_with_a_tag_the_harness_defines_is_renamed(tmp_path):
    """glibc's struct tm reaches the harness's own C through <Python.h>: the library's
    definition is declared as struct wf_tm (same layout, no clash) and the harness builds."""
    from wcetfit.scaffold.header import declaration_from_header
    from wcetfit.timing.thunk import build_harness

    if not os.path.exists("/usr/include/time.h"):
        pytest.skip("/usr/include/time.h is not installed")
    decl = declaration_from_header("/usr/include/time.h", ["timegm"])
    assert decl.prototype == "time_t timegm(struct wf_tm *__tp);"
    assert "struct wf_tm" in decl.cdef and "tm_gmtoff" in decl.cdef
    harness = build_harness(decl.prototype, decl.cdef)
    # the layout is the compiler's own struct tm
    (tmp_path / "tm.c").write_text(
        "#include <stdio.h>\n#include <stddef.h>\n#include <time.h>\n"
        "int main(void) { printf(\"%zu %zu\\n\", sizeof(struct tm), "
        "offsetof(struct tm, tm_zone)); return 0; }\n")
    subprocess.run(["gcc", "-o", str(tmp_path / "tm"), str(tmp_path / "tm.c")], check=True)
    size, zone = map(int, subprocess.run([str(tmp_path / "tm")], capture_output=True,
                                         text=True, check=True).stdout.split())
    assert harness.ffi.sizeof("struct wf_tm") == size
    assert dict(harness.ffi.typeof("struct wf_tm").fields)["tm_zone"].offset == zone


def test_init_says_a_call_through_a_pointer_hides_loops_it_cannot_list(tmp_path, capsys):
    """liblzma's lzma_crc64 jumps through the pointer its resolver set: the loop is in the
    function it reaches, which no static model of lzma_crc64 holds.  init said "loops:
    none found" and a user bounding loops found nothing to bound; it now names the jump."""
    from wcetfit.cli import main
    from wcetfit.target import load_target

    lib = f"{LIBDIR}/liblzma.so.5"
    if not os.path.exists(lib):
        pytest.skip("liblzma.so.5 is absent: init's note on calls through a pointer is "
                    "not checked")
    header = tmp_path / "crc64.h"
    header.write_text("unsigned long lzma_crc64(const unsigned char *buf, unsigned long "
                      "size, unsigned long crc);\n")
    d = tmp_path / "crc64"
    assert main(["init", str(d), "--binary", lib, "--function", "lzma_crc64",
                 "--header", str(header)]) == 0
    out = capsys.readouterr().out
    assert "loops: none found in the code known before it runs" in out, out
    assert re.search(r"calls through a pointer at lzma_crc64\+0x[0-9a-f]+: `analyze` follows",
                     out), out
    toml = (d / "wcetfit.toml").read_text()
    assert re.search(r"^# \(calls through a pointer at lzma_crc64\+0x[0-9a-f]+: the loops",
                     toml, re.M), toml
    assert load_target(str(d)).functions == ("lzma_crc64",)


LIBC = f"{LIBDIR}/libc.so.6"


@pytest.mark.skipif(not os.path.exists(LIBC) or not os.path.exists("/usr/include/stdlib.h"),
                    reason="the system's libc.so.6 or stdlib.h is absent: shared code is "
                           "checked on synthetic models only (tests/test_shared_code.py)")
def test_init_writes_qsort_whose_callees_share_code(tmp_path):
    """libc's qsort reaches memcpy and mempcpy, which share blocks (mempcpy jumps into
    memcpy's body): init refused it.  The shared body is now a function of its own
    (wcetfit.static.shared), init writes the target, and the body's loops are listed
    under its name, among memcpy's."""
    res = subprocess.run([sys.executable, "-m", "wcetfit", "init", str(tmp_path / "qsort"),
                          "--binary", LIBC, "--function", "qsort",
                          "--header", "/usr/include/stdlib.h"],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "capstone decodes" not in res.stderr          # glibc's `lock` prefix blocks
    toml = (tmp_path / "qsort" / "wcetfit.toml").read_text()
    assert re.search(r'^# "memcpy@impl\+0x[0-9a-f]+\.shared\+0x[0-9a-f]+\+0x[0-9a-f]+" = N',
                     toml,
                     re.M), toml


@pytest.mark.skipif(not os.path.exists(f"{LIBDIR}/libz.so.1") or
                    not os.path.exists("/usr/include/zlib.h"),
                    reason="the system's libz.so.1 or zlib.h is absent: the [loops] order is "
                           "not checked")
def test_loops_are_listed_nearest_calls_first(tmp_path):
    """[loops] lists the root's loops, then those of the functions one call away, two …,
    each distance under a heading (libcrypto's SHA256 reaches 109 loops, most in error
    and engine functions far down its calls; by address those came first)."""
    res = subprocess.run([sys.executable, "-m", "wcetfit", "init", str(tmp_path / "c2"),
                          "--binary", f"{LIBDIR}/libz.so.1", "--function", "compress2",
                          "--header", "/usr/include/zlib.h"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "c2" / "wcetfit.toml").read_text()
    body = text[text.index("[loops]"):text.index("[wcet]")]
    lines = [ln for ln in body.splitlines() if ln.startswith("# ")]
    entries = [ln for ln in lines if ln.startswith('# "')]
    assert entries[0].startswith('# "compress2+')            # the root's own loop first
    headings = [int(re.match(r"# -- in functions (\d+) calls? away", ln).group(1))
                for ln in lines if ln.startswith("# -- in functions ") and "away" in ln]
    assert headings[:2] == [1, 2] and headings == sorted(headings)
    first_deflate = next(i for i, ln in enumerate(lines) if ln.startswith('# "deflate+'))
    assert lines[first_deflate - 1] == "# -- in functions 1 call away"


@pytest.mark.skipif(not os.path.exists(f"{LIBDIR}/libm.so.6") or
                    not os.path.exists("/usr/include/math.h"),
                    reason="the system's libm.so.6 or math.h is absent: init's IFUNC line "
                           "is not checked")
def test_init_says_an_ifunc_is_measured_as_the_implementation_selected_here(tmp_path):
    """libm's sin is an IFUNC: nm shows the resolver's address, init printed the
    implementation's without saying why."""
    res = wcetfit("init", str(tmp_path / "sin"), "--binary", f"{LIBDIR}/libm.so.6",
                  "--function", "sin", "--header", "/usr/include/math.h")
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "IFUNC" in ln)
    assert re.match(r"  IFUNC: sin → sin@impl\+0x[0-9a-f]+ at 0x[0-9a-f]+, selected by its "
                    r"IFUNC resolver \(0x[0-9a-f]+\) on this CPU; that implementation is "
                    r"what is measured$", line), line


def test_array_parameters_are_pointers_and_a_capacity_pairs_by_its_stem(tmp_path):
    """brotli's decode.h declares `BrotliDecoderDecompress(size_t encoded_size, const
    uint8_t encoded_buffer[encoded_size], size_t *decoded_size, uint8_t
    decoded_buffer[*decoded_size])`: init refused the header (cffi cannot parse the size
    expressions), and with pointers written in, took the in-out capacity decoded_size for
    a buffer of random 64-bit numbers (up to 2**64 bytes of room, the decoder was told)."""
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    h = tmp_path / "dec.h"
    h.write_text("#include <stddef.h>\n#include <stdint.h>\n"
                 "int decode(size_t encoded_size, const uint8_t encoded_buffer[(encoded_size)],"
                 " size_t *decoded_size, uint8_t decoded_buffer[(*decoded_size)]);\n")
    decl = declaration_from_header(str(h), ["decode"])     # as BROTLI_ARRAY_PARAM expands
    assert decl.prototype == ("int decode(size_t encoded_size, const uint8_t *encoded_buffer, "
                              "size_t *decoded_size, uint8_t *decoded_buffer);")
    mod, ffi, text = _module(tmp_path, decl)
    for n, enc, cap, dec in _inputs(mod, ffi, "decode"):
        assert ffi.sizeof(enc) == max(n, 1)
        assert ffi.typeof(cap).cname == "size_t *" and cap[0] == mod.UNSIZED_LEN
        assert ffi.sizeof(dec) == cap[0]
    assert not [note for note in text.notes if note.startswith("decoded_size")]


@pytest.mark.skipif(not os.path.exists(LIBC) or not os.path.exists("/usr/include/string.h"),
                    reason="the system's libc.so.6 or string.h is absent: the [loops] "
                           "listing of a large reach is not checked")
def test_a_large_reach_lists_the_near_loops_and_counts_the_far_ones(tmp_path):
    """libc's strdup reaches 479 loops through malloc: init wrote 2,385 lines of [loops],
    memcpy's copy loop among "2 calls away" (a tail call into memcpy's body counted as a
    call), and 13 warnings on malloc's internals, padding after calls that do not return
    among them.  The functions a tail call reaches are as near as their caller, far
    functions' loops are counted past the first few, and padding ends a path."""
    res = wcetfit("init", str(tmp_path / "strdup"), "--binary", LIBC, "--function", "strdup",
                  "--header", "/usr/include/string.h")
    assert res.returncode == 0, res.stderr
    toml = (tmp_path / "strdup" / "wcetfit.toml").read_text()
    loops = toml[toml.index("[loops]"):]
    first_heading = loops.index("# -- in functions")
    assert re.search(r'# "memcpy@impl\+0x[0-9a-f]+\.shared\+0x[0-9a-f]+\+0x[0-9a-f]+" = N',
                     loops[:first_heading])                  # with strdup's own
    assert re.search(r"^# \.\.\. [\d,]+ more loops in functions \d+–\d+ calls away \(mostly "
                     r"error and set-up paths\), not listed", loops, re.M), loops[-2000:]
    assert len(toml.splitlines()) < 500
    assert "falls through into sub_98210" not in res.stderr      # nop padding after a call


def test_an_outputs_capacity_is_room_enough_not_a_drawn_length(tmp_path):
    """liblz4's LZ4_compress_default(const char *src, char *dst, int srcSize, int
    dstCapacity): dstCapacity was drawn over the whole int range (negative half the time),
    and as a length it would be below what the compressor needs on most inputs."""
    mod, ffi, text = _module_of_header(
        tmp_path, "int compress(const char *src, char *dst, int srcSize, int dstCapacity);\n",
        "compress")
    for src, dst, n, cap in _inputs(mod, ffi, "compress"):
        assert ffi.sizeof(src) == max(n, 1) and 0 <= n <= mod.MAX_LEN
        assert cap == mod.UNSIZED_LEN == ffi.sizeof(dst)
    assert not [note for note in text.notes if note.startswith("dstCapacity")]


def test_a_header_including_its_siblings_by_their_directory_is_read(tmp_path):
    """libxml2's xmlstring.h includes <libxml/xmlversion.h>, found only in
    /usr/include/libxml2: init stopped with "gcc -E failed: … No such file or directory"
    and no remedy.  The parent of the header's directory is searched after the system's
    directories; a header still missing names gcc's CPATH."""
    from wcetfit.errors import TargetError
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    lib = tmp_path / "inc" / "mylib"
    lib.mkdir(parents=True)
    (lib / "types.h").write_text("typedef unsigned char myChar;\n")
    (lib / "str.h").write_text("#include <mylib/types.h>\nint myStrlen(const myChar *s);\n")
    decl = declaration_from_header(str(lib / "str.h"), ["myStrlen"])
    assert decl.prototype == "int myStrlen(const myChar *s);"
    (lib / "bad.h").write_text("#include <nowhere/types.h>\nint f(int x);\n")
    with pytest.raises(TargetError, match=r"No such file or directory; a header it includes "
                                          r"is elsewhere: name its directory in gcc's CPATH"):
        declaration_from_header(str(lib / "bad.h"), ["f"])


def test_a_count_of_elements_and_their_size_size_the_buffer_in_bytes(tmp_path):
    """libc's qsort(void *base, size_t nmemb, size_t size, …): base was nmemb bytes and
    size drawn up to 2**32, and 82 % of the inputs crashed.  base holds nmemb * size bytes,
    the size one of a few small ones, the largest on the slow inputs."""
    mod, ffi, text = _module_of_header(
        tmp_path, "#include <stddef.h>\nvoid sortit(void *base, size_t nmemb, size_t size);\n",
        "sortit")
    args = _inputs(mod, ffi, "sortit", n=40)
    for base, n, size in args:
        assert size in (1, 2, 4, 8, 16, 32) and ffi.sizeof(base) == max(n * size, 1)
    assert all(size == 32 for i, (_, _, size) in enumerate(args)
               if i % mod.SLOW_EVERY == mod.SLOW_EVERY - 1)
    assert not [note for note in text.notes if note.startswith("size")]


def test_an_enum_the_parameter_names_gives_its_values_not_return_codes(tmp_path):
    """libidn2's ``flags`` was drawn from ``IDN2_INVALID_FLAGS`` (a return code of
    ``idn2_rc``, its name containing the parameter's) and every call returned at once;
    libgcrypt's ``algo`` from its control commands ``GCRYCTL_*_ALGO``.  An enum whose name
    names the parameter gives its values (of several, the one sharing most words with the
    function's name), and enums of return codes give none."""
    header = """
typedef enum { LIBX_OK = 0, LIBX_INVALID_FLAGS = -209, LIBX_NOMEM = -1 } libx_rc;
typedef enum { LIBX_NFC_INPUT = 1, LIBX_TRANSITIONAL = 4, LIBX_NO_TR46 = 64 } libx_flags;
enum libx_ctl_cmds { LIBXCTL_TEST_ALGO = 8, LIBXCTL_ENABLE_ALGO = 11 };
enum libx_md_algos { LIBX_MD_MD5 = 1, LIBX_MD_SHA256 = 8, LIBX_MD_SM3 = 326 };
enum libx_cipher_algos { LIBX_CIPHER_AES = 7, LIBX_CIPHER_SM4 = 317 };
int libx_convert(const char *input, char **output, int flags);
void libx_md_hash_buffer(int algo, void *digest, const void *buffer, unsigned long length);
"""
    # (one of the values or within their range: _among)
    mod, ffi, text = _module_of_header(tmp_path, header, "libx_convert")
    flags = {a[2] for a in _inputs(mod, ffi, "libx_convert", n=60)}
    assert {1, 4, 64} <= flags and min(flags) >= 1 and max(flags) <= 64
    assert "LIBX_NFC_INPUT = 1" in text.text and "LIBX_INVALID_FLAGS" not in text.text
    mod, ffi, text = _module_of_header(tmp_path, header, "libx_md_hash_buffer")
    algos = {a[0] for a in _inputs(mod, ffi, "libx_md_hash_buffer", n=60)}
    # an enum's members only (libgcrypt: "algorithm 201 not available" on 45 % of calls
    # drawn between them)
    assert algos == {1, 8, 326}
    assert "LIBX_MD_SHA256 = 8" in text.text and "members of libx_md_algos" in text.text
    assert "LIBXCTL_TEST_ALGO" not in text.text and "LIBX_CIPHER_AES" not in text.text


def test_a_pointer_to_a_pointer_named_as_an_output_is_a_slot(tmp_path):
    """``char **output`` (libidn2's idn2_to_ascii_8z stores a malloc'ed string there) is a
    slot the function stores into, not NULL; a pointer to a pointer of another name stays
    NULL for the user to build."""
    header = "int f(const char *input, char **output, char **argv, char **endptr);\n"
    mod, ffi, text = _module_of_header(tmp_path, header, "f")
    for _, output, argv, endptr in _inputs(mod, ffi, "f", n=5):
        assert ffi.typeof(output) is ffi.typeof("char **") and output[0] == ffi.NULL
        assert ffi.typeof(endptr) is ffi.typeof("char **")
        assert argv == ffi.NULL


def test_a_text_named_as_a_number_is_the_text_of_a_number(tmp_path):
    """strtod's ``nptr`` was printable text, which almost never starts a number: every
    call returned 0 after its first character.  By the parameter's name (``nptr``,
    glibc's ``__nptr``) or the function's (``strto*``, ``ato*``) it is a number's text:
    a sign, digits, a point, an exponent, hexadecimal."""
    import re

    header = ("double strtod(const char *__restrict __nptr, char **__restrict __endptr);\n"
              "long parse_it(const char *nptr);\nint atomic_name(const char *s);\n")
    number = re.compile(rb"[+-]?(0x[0-9a-f]+|\d*(\.\d+)?(e-?\d+)?)")
    for function in ("strtod", "parse_it"):
        mod, ffi, text = _module_of_header(tmp_path, header, function)
        texts = [ffi.string(a[0]) for a in _inputs(mod, ffi, function, n=40)]
        assert all(number.fullmatch(t) for t in texts), texts
        assert sum(t.startswith(b"-") for t in texts) >= 4
        assert max(len(t) for t in texts) >= mod.MAX_LEN - 6        # the slow inputs
    mod, ffi, text = _module_of_header(tmp_path, header, "atomic_name")
    assert "_number_text" not in text.text.split("def generate", 1)[1]


def test_glibcs_underscored_parameter_names_find_their_constants(tmp_path):
    """fnmatch.h: ``/* Bits set in the FLAGS argument to `fnmatch'. */`` above
    ``FNM_PATHNAME``…, and the parameter is ``__flags``: drawn over the whole int range
    (a slowest input had flags −959,401,744) until the underscores were set aside."""
    header = ("/* Bits set in the FLAGS argument to `fm'.  */\n"
              "#define FM_PATHNAME (1 << 0)\n#define FM_NOESCAPE (1 << 1)\n"
              "#define FM_PERIOD (1 << 2)\n"
              "extern int fm(const char *__pattern, const char *__name, int __flags);\n")
    mod, ffi, text = _module_of_header(tmp_path, header, "fm")
    flags = {a[2] for a in _inputs(mod, ffi, "fm", n=40)}
    assert {1, 2, 4} <= flags and min(flags) >= 1 and max(flags) <= 4
    assert "FM_PATHNAME = 1" in text.text


def test_a_position_named_in_one_word_is_within_the_lengths(tmp_path):
    """libpcre2's pcre2_match(…, subject, length, startoffset, …): startoffset was drawn
    over 0..2**32-1, as if it were any integer; run together, start and offset still name
    a position, within the call's lengths."""
    mod, ffi, text = _module_of_header(
        tmp_path, "#include <stddef.h>\n"
                  "int m(const unsigned char *subject, size_t length, size_t startoffset);\n",
        "m")
    args = _inputs(mod, ffi, "m", n=40)
    assert all(0 <= start <= n for _, n, start in args)
    assert any(note.startswith("startoffset: ") for note in text.notes)


def test_a_pointer_to_a_length_no_buffer_takes_is_one_element(tmp_path):
    """libtasn1's ``asn1_get_length_der(const unsigned char *der, int der_len, int *len)``:
    ``len`` receives the decoded length; it was an output buffer of 2·der_len + 512 ints
    ("no length parameter of its own"), restored before every call."""
    mod, ffi, text = _module_of_header(
        tmp_path, "long get_len(const unsigned char *der, int der_len, int *len);\n",
        "get_len")
    for der, n, out in _inputs(mod, ffi, "get_len", n=20):
        assert ffi.typeof(out) is ffi.typeof("int *")            # one int, not an array
        assert out[0] == 0 and ffi.sizeof(der) == max(n, 1)
    assert not any(note.startswith("len: ") for note in text.notes)


def test_a_string_copys_length_is_the_destinations_room(tmp_path):
    """libbsd's ``strlcpy(char *dst, const char *src, size_t size)``: size was taken for
    src's length and src had no NUL, so strlcpy's scan for the end of src read past the
    buffer.  The length is dst's room, src a NUL-terminated string of its own length;
    memcpy's ``(void *dst, const void *src, size_t n)`` keeps one length for both."""
    header = ("#include <stddef.h>\n"
              "size_t cpy(char *dst, const char *src, size_t size);\n"
              "void *mcpy(void *dst, const void *src, size_t n);\n")
    mod, ffi, text = _module_of_header(tmp_path, header, "cpy")
    args = _inputs(mod, ffi, "cpy", n=40)
    for dst, src, size in args:
        assert ffi.sizeof(dst) == max(size, 1)
        assert ffi.typeof(src) is ffi.typeof("char[]")          # a C string, its own NUL
        assert b"\0" not in bytes(ffi.buffer(src))[:-1]
    assert any(len(ffi.string(src)) > size for _, src, size in args)   # longer than the room
    mod, ffi, text = _module_of_header(tmp_path, header, "mcpy")
    for dst, src, n in _inputs(mod, ffi, "mcpy", n=20):
        assert ffi.sizeof(src) == max(n, 1)


def test_a_function_a_header_lacks_is_offered_the_names_within_it(tmp_path):
    """``--function libdeflate_adler32 --header zlib.h``: the close names offered were
    deflateSetHeader's kind, where zlib.h's adler32 is the one named within it."""
    from wcetfit.errors import TargetError
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: headers are not preprocessed")
    h = tmp_path / "z.h"
    h.write_text("unsigned long adler32(unsigned long a, const char *b, unsigned n);\n"
                 "int deflate(void *strm, int flush);\n"
                 "int deflateSetHeader(void *strm, void *head);\n")
    with pytest.raises(TargetError, match=r"declares no function libdeflate_adler32 \(close: "
                                          r"adler32, deflate"):
        declaration_from_header(str(h), ["libdeflate_adler32"])


def test_inputs_rejected_with_error_codes_are_said_under_the_headline(tmp_path):
    """libuuid's uuid_parse on init's printable text: every call returned -1 (the text is
    not 36 characters), and the bound of that rejection read like the function's.  The
    timing run keeps what each input returned; most of them below zero is said under the
    headline and first among the warnings (zstd's ZSTD_decompress on random bytes: -10 on
    53 of 60 calls, -72 on 4, 0 on the 3 empty ones)."""
    lib, header = f"{LIBDIR}/libuuid.so.1", "/usr/include/uuid/uuid.h"
    _system(lib, header)
    target, fn, res = _init_then_analyze(tmp_path, lib, header, "uuid_parse")
    e = fn["error_returns"]
    assert e["inputs"] >= 30 and e["errors"] == e["inputs"]
    assert e["values"] == [{"value": -1, "inputs": e["inputs"]}]
    text = " ".join(res.stdout.split())
    assert (f"Mostly for calls rejected with an error code: all {e['inputs']} timed inputs "
            f"returned below zero (-1 on {e['inputs']})") in text
    assert "error codes most likely, so the calls stopped at a check" in text


def test_error_returns_read_unsigned_codes_and_need_most_inputs():
    from wcetfit.timing.state import error_returns

    zstd = {str(i): "18446744073709551606" for i in range(53)}          # (size_t)-10
    zstd.update({str(53 + i): "18446744073709551544" for i in range(4)})  # -72
    zstd.update({str(57 + i): "0" for i in range(3)})                    # empty: 0
    e = error_returns(zstd)
    assert (e.inputs, e.errors, e.values) == (60, 57, ((-10, 53), (-72, 4)))
    assert e.describe() == "57 of 60 timed inputs returned below zero (-10 on 53, -72 on 4)"
    assert error_returns({str(i): "4294967295" for i in range(12)}).values == ((-1, 12),)
    assert error_returns({str(i): "0" for i in range(20)}) is None          # success
    assert error_returns(dict(zstd, **{str(60 + i): "1" for i in range(10)})) is None
    assert error_returns({str(i): "-3" for i in range(5)}) is None         # too few
    assert error_returns({str(i): "nan" for i in range(20)}) is None
    assert error_returns(None) is None


def test_error_returns_named_by_the_target_are_counted_whatever_their_sign():
    """libbrotlidec's BrotliDecoderDecompress returned BROTLI_DECODER_RESULT_ERROR = 0 on
    39 of 40 random inputs, and the "below zero" rule said nothing; with the codes the
    target names ([measure] error_returns), those are what counts."""
    from wcetfit.timing.state import error_returns

    brotli = {str(i): "0" for i in range(39)}
    brotli["39"] = "1"
    assert error_returns(brotli) is None
    e = error_returns(brotli, (("BROTLI_DECODER_RESULT_ERROR", 0),))
    assert (e.inputs, e.errors, e.values) == (40, 39, ((0, 39),))
    assert e.describe() == ("39 of 40 timed inputs returned an error code [measure] "
                            "error_returns names (BROTLI_DECODER_RESULT_ERROR = 0 on 39)")
    # named codes replace the rule: a value below zero the target does not name is none
    assert error_returns({str(i): "-1" for i in range(20)}, (("", 9),)) is None
    lzma = {str(i): "9" for i in range(18)}
    lzma.update({"18": "7", "19": "0"})
    e = error_returns(lzma, (("LZMA_FORMAT_ERROR", 7), ("LZMA_DATA_ERROR", 9)))
    assert e.values == ((9, 18), (7, 1)) and e.errors == 19
    assert error_returns(lzma, (("", 7), ("", 9))).describe().endswith("(9 on 18, 7 on 1)")


def test_measure_error_returns_is_read_as_a_table_or_a_list(tmp_path):
    from wcetfit.target import load_target

    (tmp_path / "inputs.py").write_text("def generate(ctx):\n    return (1,)\n")

    def load(line):
        (tmp_path / "wcetfit.toml").write_text(
            f'binary = "/bin/true"\nfunctions = ["f"]\nprototype = "int f(int);"\n'
            f'inputs = "inputs.py"\n[measure]\n{line}\n')
        return load_target(str(tmp_path)).measure.error_returns

    assert load("") == ()
    assert load("error_returns = { LZMA_DATA_ERROR = 9, LZMA_BUF_ERROR = 10 }") == (
        ("LZMA_DATA_ERROR", 9), ("LZMA_BUF_ERROR", 10))
    assert load("error_returns = [0, -1]") == (("", 0), ("", -1))
    for bad, says in (('error_returns = ["x"]', "expected an integer, found str"),
                      ("error_returns = { E = 1.5 }", "'E': expected an integer"),
                      ("error_returns = 3", "expected a list or a table"),
                      ("error_returns = [36893488147419103232]", "no 64-bit return value")):
        with pytest.raises(TargetError, match=says):
            load(bad)


def test_init_names_the_error_members_of_a_returned_enum(tmp_path):
    """A function returning a result enum gets its error members as [measure]
    error_returns; an enum whose members are all errors (kinds of error, not results) or
    one member saying none (expat's XML_ERROR_NONE) gets no such list."""
    from wcetfit.scaffold.header import declaration_from_header

    h = tmp_path / "r.h"
    h.write_text("""
typedef enum { R_ERROR = 0, R_SUCCESS = 1, R_NEEDS_MORE_INPUT = 2 } r_result;
typedef r_result r_alias;
enum kind { K_ERROR_NONE = 0, K_ERROR_SYNTAX = 1, K_ERROR_MEMORY = 2 };
typedef enum { E_ERR_A = 1, E_FAIL_B = 2 } only_errors;
r_alias decode(const unsigned char *in, unsigned long n);
enum kind last_error(void);
only_errors check(int x);
int plain(int x);
""")
    assert declaration_from_header(str(h), ["decode"]).error_returns == (("R_ERROR", 0),)
    assert declaration_from_header(str(h), ["decode"]).returns == ("r_alias", "r_result")
    assert declaration_from_header(str(h), ["last_error"]).error_returns == (
        ("K_ERROR_SYNTAX", 1), ("K_ERROR_MEMORY", 2))
    assert declaration_from_header(str(h), ["check"]).error_returns == ()
    assert declaration_from_header(str(h), ["plain"]).error_returns == ()


@pytest.mark.slow
def test_a_decoder_rejecting_every_input_with_an_enum_error_is_said(tmp_path):
    """libbrotlidec's BrotliDecoderDecompress on init's random bytes: every call returned
    BROTLI_DECODER_RESULT_ERROR = 0, not below zero, and the report gave the rejection's
    bound as the decoder's.  init now writes the enum's error members, and the headline
    names them."""
    lib, header = f"{LIBDIR}/libbrotlidec.so.1", "/usr/include/brotli/decode.h"
    _system(lib, header)
    target, fn, res = _init_then_analyze(tmp_path, lib, header, "BrotliDecoderDecompress")
    toml = (target / "wcetfit.toml").read_text()
    assert "error_returns = { BROTLI_DECODER_RESULT_ERROR = 0 }" in toml
    e = fn["error_returns"]
    assert e is not None and e["errors"] >= 0.9 * e["inputs"]
    assert e["values"][0]["value"] == 0
    text = " ".join(res.stdout.split())
    assert "Mostly for calls rejected with an error code:" in text
    assert "(BROTLI_DECODER_RESULT_ERROR = 0 on" in text


@pytest.mark.slow
def test_reach_is_not_advised_for_arguments_it_cannot_explore(tmp_path):
    """libm's cbrt: the report and check sent the user to `wcetfit reach` for the blocks
    no input ran, and reach answered "not explored: argument 0 is a float".  The advice
    now says why reach cannot, where it cannot."""
    from wcetfit.search.witness import reach_refusal
    from wcetfit.target import load_target

    lib, header = f"{LIBDIR}/libm.so.6", "/usr/include/math.h"
    _system(lib, header)
    target, fn, res = _init_then_analyze(tmp_path, lib, header, "cbrt")
    assert reach_refusal(load_target(str(target)), "cbrt") == \
        "argument 1 is a float (only integers and buffers)"
    assert any(not b["executed"] for b in fn["blocks"]), "every block of cbrt ran"
    text = " ".join(res.stdout.split())
    assert ("`wcetfit reach` cannot look for inputs that run them here (argument 1 is a "
            "float (only integers and buffers)): vary the inputs in generate()") in text
    assert "`wcetfit reach` looks for" not in text


def test_init_writes_a_byte_string_of_a_pointer_typedef(tmp_path):
    """libpng's png_get_uint_32(png_const_bytep buf): init named the element type
    "png_const_byte" (the typedef's name less its last letter), no type at all, and its
    own check refused the inputs.py it wrote."""
    target = _init(tmp_path, f"{LIBDIR}/libpng16.so.16", "/usr/include/png.h",
                   "png_get_uint_32")
    text = (target / "inputs.py").read_text()
    assert '    buf = _string(ffi, "unsigned char", _length(ctx), rng)' in text
    assert '"png_const_byte"' not in text


def test_init_keeps_a_versioned_symbol_by_its_address(tmp_path):
    """libm's pow@GLIBC_2.2.5 (0x130c0): init said it wrote pow (0x130c0), wrote
    functions = ["pow"], and the target measured pow@@GLIBC_2.29 (0x392b0), the other
    implementation, with no word.  The prototype cannot spell a version: the address."""
    from wcetfit.target import load_target

    lib = f"{LIBDIR}/libm.so.6"
    target = _init(tmp_path, lib, "/usr/include/math.h", "pow@GLIBC_2.2.5", name="pow")
    toml = (target / "wcetfit.toml").read_text()
    m = re.search(r'^functions = \["(0x[0-9a-f]+)"\]$', toml, re.M)
    assert m, toml[:400]
    assert toml.startswith(f"# Written by `wcetfit init` for pow@GLIBC_2.2.5 ({m.group(1)})")
    nm = subprocess.run(["nm", "-D", lib], capture_output=True, text=True).stdout
    versioned = [ln.split()[0] for ln in nm.splitlines() if ln.endswith(" pow@GLIBC_2.2.5")]
    assert versioned and int(versioned[0], 16) == int(m.group(1), 16)
    assert load_target(str(target)).functions == (m.group(1),)


def test_a_read_only_c_string_no_length_follows_is_a_text(tmp_path):
    """libxml2's xmlReadMemory(const char *buffer, int size, const char *URL, const char
    *encoding, int options): URL and encoding were sized from the document's size and
    filled with random bytes; a const char * with no length of its own is a NUL-terminated
    text.  strncmp's s1 still shares s2's length (a comparison over one length)."""
    from wcetfit.scaffold.header import declaration_from_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    h = tmp_path / "x.h"
    h.write_text("typedef struct doc doc;\n"
                 "doc *readMemory(const char *buffer, int size, const char *URL, "
                 "const char *encoding, int options);\n"
                 "int my_strncmp(const char *s1, const char *s2, unsigned long n);\n")
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["readMemory"]))
    assert "_text_of(rng, _length(ctx))" in _line(text.text, "URL")
    assert "_text_of(rng, _length(ctx))" in _line(text.text, "encoding")
    assert "_share_prefix" not in text.text.split("def generate", 1)[1]
    mod, ffi, text = _module(tmp_path, declaration_from_header(str(h), ["my_strncmp"]))
    body = text.text.split("def generate", 1)[1]
    assert "_share_prefix(ctx, ffi, s1, s2, n)" in body
