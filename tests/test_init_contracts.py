"""`wcetfit init` and what a function's contract needs of its inputs beyond the types:
outputs the prototype does not size hold what common functions write (a product's
un + vn limbs, base64's 4/3); lengths start at 1 where the header says so, and the
comment says to narrow them otherwise; a pointer to an array type is a buffer of arrays;
a parameter named for verbosity is quiet and one counting units of a size is no buffer
length; and a function missing from a binary with symbols is not called stripped."""

import os
import re
import shutil
import subprocess
import textwrap

import pytest

from test_init import LIBDIR, _inputs, _module, _system, one_error_line, wcetfit


def _line(text, name):
    """The line of generate() that sets parameter ``name``."""
    body = text[text.index("def generate(ctx):"):]
    [line] = [ln for ln in body.splitlines() if re.match(rf"\s+{name} = ", ln)]
    return line


@pytest.fixture
def gcc():
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")


def _decl(tmp_path, text, function, name="lib.h"):
    from wcetfit.scaffold.header import declaration_from_header

    h = tmp_path / name
    h.write_text(textwrap.dedent(text))
    return declaration_from_header(str(h), [function])


# --- 1. outputs the prototype does not size ------------------------------------------

def test_unsized_output_holds_the_sum_of_the_lengths(gcc, tmp_path):
    """gmp's mpn_mul(rp, up, un, vp, vn), declared unnamed with pointer typedefs: rp
    (written, no length) holds un + vn limbs at least (it had MAX_LEN + 512 = 4608 while
    the slow input writes 8192); up and vp, pointers to const through their typedef, are
    inputs sized from their lengths."""
    decl = _decl(tmp_path, """
        typedef unsigned long limb_t;
        typedef limb_t *limb_ptr;
        typedef const limb_t *limb_srcptr;
        typedef long size_type;
        limb_t mul(limb_ptr, limb_srcptr, size_type, limb_srcptr, size_type);
    """, "mul")
    assert [p.name for p in decl.params] == ["arg1", "arg2", "arg3", "arg4", "arg5"]
    mod, ffi, text = _module(tmp_path, decl)
    args = _inputs(mod, ffi, "mul", n=40)
    assert any(un + vn > mod.UNSIZED_LEN for _, _, un, _, vn in args)   # what overflowed
    for rp, up, un, vp, vn in args:
        assert ffi.sizeof(up) == 8 * max(un, 1) and ffi.sizeof(vp) == 8 * max(vn, 1)
        assert ffi.sizeof(rp) >= 8 * (2 * (un + vn) + mod.OUT_SPARE)
    line = _line(text.text, "arg1")
    assert "a guess" in line and "_out(arg3 + arg5)" in line, line
    for name in ("arg2", "arg4"):
        assert "; input;" in _line(text.text, name)          # const through the typedef
    assert any(n.startswith("arg1: ") and "a guess" in n for n in text.notes)


def test_one_unnamed_length_after_the_buffers_sizes_each_of_them(gcc, tmp_path):
    """gmp's mpn_add_n(rp, s1p, s2p, n), unnamed in gmp.h: the length after the buffers
    is every one's.  Only s2p, the buffer right before it, was sized from it; s1p got
    5,120 limbs whatever n was ("no length parameter found")."""
    decl = _decl(tmp_path, """
        typedef unsigned long limb_t;
        typedef limb_t *limb_ptr;
        typedef const limb_t *limb_srcptr;
        typedef long size_type;
        limb_t add_n(limb_ptr, limb_srcptr, limb_srcptr, size_type);
    """, "add_n")
    mod, ffi, text = _module(tmp_path, decl)
    args = _inputs(mod, ffi, "add_n", n=40)
    assert len({n for *_, n in args}) > 5
    for rp, s1, s2, n in args:
        assert ffi.sizeof(s2) == 8 * max(n, 1)
        # sized from n, with init's spare where the pairing is a guess
        assert 8 * max(n, 1) <= ffi.sizeof(s1) <= 8 * (n + mod.OUT_SPARE)
        assert ffi.sizeof(rp) >= 8 * max(n, 1)
    assert "no length parameter found" not in text.text
    assert "arg4 + OUT_SPARE" in _line(text.text, "arg2")


def test_unsized_output_holds_an_encoding_of_its_input(gcc, tmp_path):
    """EVP_EncodeBlock(t, f, n) writes 4 * ceil(n / 3) + 1 bytes to t (n + 512 was too
    small from n = 1534 on); a hex encoder 2 n + 1."""
    decl = _decl(tmp_path, """
        int EVP_EncodeBlock(unsigned char *t, const unsigned char *f, int n);
        int to_hex(char *out, const unsigned char *in, unsigned long len);
    """, "EVP_EncodeBlock")
    mod, ffi, text = _module(tmp_path, decl)
    args = _inputs(mod, ffi, "EVP_EncodeBlock", n=40)
    assert max(n for _, _, n in args) == mod.MAX_LEN
    for t, f, n in args:
        assert ffi.sizeof(f) == max(n, 1)
        assert ffi.sizeof(t) >= 4 * -(-n // 3) + 1 and ffi.sizeof(t) >= 64
    assert "a guess" in _line(text.text, "t")
    mod, ffi, _ = _module(tmp_path, _decl(tmp_path, "int to_hex(char *out, const unsigned "
                                          "char *in, unsigned long len);\n", "to_hex", "h.h"))
    for out, in_, n in _inputs(mod, ffi, "to_hex", n=40):
        assert ffi.sizeof(out) >= 2 * n + 1 and out[len(out) - 1] == b"\0"


# --- 2. lengths that must be at least 1 --------------------------------------------

def test_length_from_one_where_the_header_says_so(gcc, tmp_path):
    """A length the header's text says is positive (in a sentence naming it, or, for a
    one-letter name, one naming the function too) is drawn from 1; elsewhere 0 stays and
    the comment says how to start from 1 (gmp's mpn_sub_n needs n >= 1: a signed
    mp_size_t says nothing)."""
    text = """
        /* sub(rp, up, n): n >= 1. */
        long sub(long *rp, const long *up, long n);
        /* The count must be positive. */
        void scale(short *dst, const short *src, int count);
        long plain(long *rp, const long *up, long n);
    """
    for function, length in (("sub", "n"), ("scale", "count")):
        mod, ffi, out = _module(tmp_path, _decl(tmp_path, text, function))
        values = [a[2] for a in _inputs(mod, ffi, function, n=200)]
        assert min(values) == 1 and max(values) == mod.MAX_LEN, function
        line = _line(out.text, length)
        assert re.search(rf"_length\(ctx, MAX_LEN, 1\)", line) and "excludes 0" in line, line
    mod, ffi, out = _module(tmp_path, _decl(tmp_path, text, "plain"))
    assert min(a[2] for a in _inputs(mod, ffi, "plain", n=200)) == 0
    line = _line(out.text, "n")
    assert "0 is drawn" in line and "n >= 1" in line and "_length(ctx, ..., 1)" in line, line


def test_documented_positive_reads_words_and_operators():
    from wcetfit.scaffold.constants import _positive_in

    for sentence, name in (("n must be at least 1.", "n"), ("size n >= 1 limbs", "n"),
                           ("len is positive", "len"), ("count must be nonzero", "count"),
                           ("size must not be zero", "size")):
        assert _positive_in(sentence, name), sentence
    for sentence, name in (("n can be 0", "n"), ("m >= 1 and n", "n"), ("sets x to n", "n")):
        assert _positive_in(sentence, name) is None, sentence


# --- 3. a pointer to an array type ---------------------------------------------------

BLOCK_H = """
    typedef short COEF;
    typedef COEF BLOCK[64];
    typedef BLOCK *BLOCKROW;
    typedef unsigned int DIMENSION;
    void copy_block_row(BLOCKROW input_row, BLOCKROW output_row, DIMENSION num_blocks);
"""


def test_pointer_to_an_array_type_is_a_buffer_of_arrays(gcc, tmp_path):
    """libjpeg's jcopy_block_row(JBLOCKROW, JBLOCKROW, JDIMENSION num_blocks), JBLOCKROW a
    pointer to short[64]: both rows were NULL ("an opaque type"), so every call with
    num_blocks > 0 crashed.  Now buffers of num_blocks arrays (input_row, borrowing it,
    more)."""
    mod, ffi, text = _module(tmp_path, _decl(tmp_path, BLOCK_H, "copy_block_row"))
    args = _inputs(mod, ffi, "copy_block_row", n=40)
    assert max(n for *_, n in args) == mod.MAX_LEN
    for src, dst, n in args:
        assert ffi.typeof(dst) is ffi.typeof("short[][64]")
        assert ffi.sizeof(dst) == 128 * max(n, 1) and ffi.sizeof(src) >= 128 * max(n, 1)
    assert not any("opaque" in n for n in text.notes)
    assert "ffi.NULL" not in _line(text.text, "input_row")


JPEG_WRAP = "#include <stdio.h>\n#include <jpeglib.h>\n#include <jpegint.h>\n"


def test_init_libjpeg_jcopy_block_row_copies(tmp_path):
    """End to end on libjpeg: init (through a wrapper header: jpegint.h needs jpeglib.h
    before it), then the target's own inputs called on the library copy num_blocks
    blocks without a crash."""
    import cffi

    from wcetfit.target import generate_input, load_inputs_module, load_target

    lib = f"{LIBDIR}/libjpeg.so.62"
    for path in ("/usr/include/jpeglib.h", "/usr/include/jpegint.h"):
        _system(lib, path)
    header = tmp_path / "jpeg_wrap.h"
    header.write_text(JPEG_WRAP)
    target = tmp_path / "jcopy"
    res = wcetfit("init", str(target), "--binary", lib, "--function", "jcopy_block_row",
                  "--header", str(header))
    assert res.returncode == 0, res.stderr
    t = load_target(str(target))
    ffi = cffi.FFI()
    ffi.cdef(t.cdef)
    ffi.cdef(t.prototype)
    dl = ffi.dlopen(lib)
    generate = load_inputs_module(t)
    for i in range(20):
        src, dst, n = generate_input(generate, t, ffi, "jcopy_block_row", i)
        dl.jcopy_block_row(src, dst, n)
        assert bytes(ffi.buffer(dst, 128 * n)) == bytes(ffi.buffer(src, 128 * n))


# --- 4. small selectors named like sizes; verbosity ----------------------------------

def test_verbosity_is_quiet_and_a_size_in_units_is_no_buffer_length(gcc, tmp_path):
    """BZ2_bzBuffToBuffCompress(dest, destLen, source, sourceLen, blockSize100k,
    verbosity, workFactor): verbosity drew all of int (> 0 prints to stderr), and
    blockSize100k, a count of 100k units, was a length 0..4096."""
    mod, ffi, text = _module(tmp_path, _decl(tmp_path, """
        int squeeze(char *dest, unsigned int *destLen, char *source, unsigned int sourceLen,
                    int blockSize100k, int verbosity, int workFactor);
        void pack(unsigned char *buf, int size_kb, int debug_level);
    """, "squeeze"))
    args = _inputs(mod, ffi, "squeeze", n=100)
    for dest, dest_len, source, source_len, block, verbosity, _ in args:
        assert ffi.sizeof(source) == max(source_len, 1)
        assert 0 <= block <= 16 and verbosity == 0
    assert "quiet" in _line(text.text, "verbosity")
    assert "not a buffer length" in _line(text.text, "blockSize100k")
    mod, ffi, text = _module(tmp_path, _decl(tmp_path, "void pack(unsigned char *buf, int "
                                             "size_kb, int debug_level);\n", "pack", "p.h"))
    for buf, size_kb, debug in _inputs(mod, ffi, "pack", n=50):
        assert 0 <= size_kb <= 16 and debug == 0
        assert ffi.sizeof(buf) == mod.UNSIZED_LEN          # not sized from size_kb


# --- 5. a function the binary does not have ------------------------------------------

def test_missing_function_is_not_called_stripped(tmp_path):
    """libz has no .symtab but exports its functions in .dynsym: a name not among them is
    missing, not hidden by stripping; close names are offered."""
    lib = f"{LIBDIR}/libz.so.1"
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is not installed")
    line = one_error_line(wcetfit("init", str(tmp_path / "t"), "--binary", lib,
                                  "--function", "nosuchfn"))
    assert re.search(r"not among the binary's \d+ defined function symbols", line), line
    assert "no symbols at all" not in line and "name functions by address" not in line
    line = one_error_line(wcetfit("init", str(tmp_path / "t"), "--binary", lib,
                                  "--function", "crc33"))
    assert "crc32" in line and "not among" in line, line


def test_function_in_a_binary_without_symbols_is_named_by_address(gcc, tmp_path):
    """An executable stripped of everything has no defined function symbol: that is
    when the message says stripped."""
    from wcetfit.errors import FunctionNotFound
    from wcetfit.static import binary

    src = tmp_path / "m.c"
    src.write_text("int work(int x) { return x * 3; }\nint main(void) { return work(2); }\n")
    exe = tmp_path / "m"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src)], check=True)
    subprocess.run(["strip", "--strip-all", str(exe)], check=True)
    with pytest.raises(FunctionNotFound, match="no symbols at all.*address"):
        binary.load_model(str(exe), ["work"], use_cache=False)


# --- texts and the lengths of encoders -------------------------------------------------

def test_an_encoders_length_is_its_inputs_not_the_outputs_before_it(gcc, tmp_path):
    """nettle_base64_encode_raw(char *dst, size_t length, const uint8_t *src): the length
    was taken for dst's, src was a guess, and every long input overran dst (the run
    crashed).  An output's room named so (dstlen) stays the output's, and a text after
    the length (snprintf's format) takes no length."""
    decl = _decl(tmp_path, """
        #include <stdint.h>
        #include <stddef.h>
        void encode_raw(char *dst, size_t length, const uint8_t *src);
    """, "encode_raw")
    mod, ffi, text = _module(tmp_path, decl)
    args = _inputs(mod, ffi, "encode_raw", n=40)
    assert max(n for _, n, _ in args) == mod.MAX_LEN
    for dst, n, src in args:
        assert ffi.sizeof(src) == max(n, 1)
        assert ffi.sizeof(dst) >= 4 * -(-n // 3) + 1
    for header, function in (("void put(uint8_t *dst, size_t dstlen, const uint8_t *src);",
                              "put"),
                             ("int fmt(char *buf, size_t size, const char *format);", "fmt")):
        mod, ffi, _ = _module(tmp_path, _decl(tmp_path, "#include <stdint.h>\n#include "
                                              "<stddef.h>\n" + header, function, "h.h"))
        for out, n, _ in _inputs(mod, ffi, function, n=20):
            assert ffi.sizeof(out) == max(n, 1)


def test_a_string_of_bytes_without_a_length_ends_in_its_nul(gcc, tmp_path):
    """libxml2's xmlUTF8Strlen(const xmlChar *utf), xmlChar an unsigned char: random bytes
    of UNSIZED_LEN had no zero on one input in five, and the function read past the
    buffer, silently.  A string of non-zero bytes and its NUL, in a buffer a reader of a
    fixed size stays within."""
    decl = _decl(tmp_path, """
        typedef unsigned char xmlChar;
        int xmlUTF8Strlen(const xmlChar *utf);
    """, "xmlUTF8Strlen")
    mod, ffi, text = _module(tmp_path, decl)
    lengths = []
    for (s,) in _inputs(mod, ffi, "xmlUTF8Strlen", n=40):
        raw = bytes(ffi.buffer(s))
        assert len(raw) >= mod.UNSIZED_LEN and 0 in raw
        lengths.append(raw.index(0))
    assert max(lengths) == mod.MAX_LEN and len(set(lengths)) > 10
    assert "_string(ffi, \"xmlChar\"" in _line(text.text, "utf")


def test_two_texts_of_a_comparison_share_a_prefix(gcc, tmp_path):
    """sqlite3_stricmp(const char *, const char *) and xmlStrcasecmp(const xmlChar *,
    const xmlChar *): drawn apart, two texts differ at their first character, and the
    comparison's loop never ran (a bound of 3,384 ticks where two equal 4 KB strings took
    34,671).  The second equals the first up to a drawn point; a function that does not
    compare (by its name) keeps its texts apart."""
    for header, function in (("int sqlite3_stricmp(const char *, const char *);",
                              "sqlite3_stricmp"),
                             ("typedef unsigned char xmlChar;\n"
                              "int xmlStrcasecmp(const xmlChar *str1, const xmlChar *str2);",
                              "xmlStrcasecmp")):
        mod, ffi, text = _module(tmp_path, _decl(tmp_path, header, function, f"{function}.h"))
        args = _inputs(mod, ffi, function, n=40)
        equal = [a for a, b in args if ffi.string(a) == ffi.string(b)]
        assert len(equal) >= 10, function
        assert max(len(ffi.string(a)) for a in equal) == mod.MAX_LEN, function
        assert "_share_prefix" in text.text
    mod, ffi, text = _module(tmp_path, _decl(
        tmp_path, "char *join(const char *a, const char *b);", "join", "join.h"))
    assert "_share_prefix(ctx" not in text.text.split("def generate(ctx):")[1]


def test_a_gnu_function_of_glibcs_own_header_is_found(gcc):
    """strverscmp is declared in string.h only under _GNU_SOURCE: init said the header
    "declares no function strverscmp", and a wrapper header defining the macro came after
    <stdio.h> had fixed the feature macros.  The header is read as a library exports its
    functions, GNU ones included."""
    from wcetfit.scaffold.header import declaration_from_header

    if not os.path.exists("/usr/include/string.h"):
        pytest.skip("/usr/include/string.h is absent")
    decl = declaration_from_header("/usr/include/string.h", ["strverscmp"])
    assert decl.function == "strverscmp" and len(decl.params) == 2


def test_a_librarys_context_struct_is_set_up_by_its_init_function(gcc, tmp_path):
    """nettle's sha256_update(struct sha256_ctx *ctx, …): init filled the context with
    random fields, its index past the 64-byte block, and 114 of 218 inputs crashed.  The
    header's function that sets such a struct up (named for init, its one parameter a
    pointer to the struct; of several the one nearest the function by name: sha256_init,
    not sha224_init) is declared in the prototype and called through ctx.lib."""
    from types import SimpleNamespace

    from wcetfit.target import InputContext, input_rng

    decl = _decl(tmp_path, """
        #include <stddef.h>
        #include <stdint.h>
        struct sha256_ctx { uint32_t state[8]; uint64_t count; unsigned int index;
                            uint8_t block[64]; };
        void nettle_sha224_init(struct sha256_ctx *ctx);
        void nettle_sha256_init(struct sha256_ctx *ctx);
        void nettle_sha256_update(struct sha256_ctx *ctx, size_t length, const uint8_t *data);
    """, "nettle_sha256_update")
    assert decl.initializers == {"ctx": "nettle_sha256_init"}
    assert decl.prototype.endswith(" void nettle_sha256_init(struct sha256_ctx *ctx);")
    mod, ffi, text = _module(tmp_path, decl)
    assert "ctx.lib.nettle_sha256_init(ctx_)" in text.text
    called = []
    lib = SimpleNamespace(nettle_sha256_init=lambda c: called.append(c))
    args = mod.generate(InputContext(input_rng(1, 0), ffi, 0, "nettle_sha256_update", lib))
    assert called == [args[0]] and ffi.typeof(args[0]).cname == "struct sha256_ctx *"
    # a struct the function only reads, or one no function of the header sets up, is not
    decl = _decl(tmp_path, """
        struct key { int rounds; };
        void key_init(const struct key *k);
        int use(struct key *k, int x);
    """, "use", "k.h")
    assert decl.initializers == {}


def test_nettles_sha256_update_is_set_up_by_sha256_init():
    """The system's nettle/sha2.h (sha256_init is a macro for nettle_sha256_init)."""
    from wcetfit.scaffold.header import declaration_from_header

    if not os.path.exists("/usr/include/nettle/sha2.h"):
        pytest.skip("/usr/include/nettle/sha2.h is absent")
    decl = declaration_from_header("/usr/include/nettle/sha2.h", ["nettle_sha256_update"])
    assert decl.initializers == {"ctx": "nettle_sha256_init"}


def test_a_64_bit_seed_takes_any_value_of_its_width(gcc, tmp_path):
    """libxxhash's XXH64(…, XXH64_hash_t seed): "any value, a … seed by its name", drawn
    over its low 32 bits only."""
    decl = _decl(tmp_path, """
        #include <stddef.h>
        typedef unsigned long long XXH64_hash_t;
        XXH64_hash_t XXH64(const void *input, size_t length, XXH64_hash_t seed);
    """, "XXH64")
    mod, ffi, text = _module(tmp_path, decl)
    seeds = [seed for _, _, seed in _inputs(mod, ffi, "XXH64", n=60)]
    assert max(seeds) >= 1 << 40 and all(0 <= s < 1 << 64 for s in seeds)
    assert "any value" in _line(text.text, "seed")


def test_an_output_the_header_sizes_by_the_functions_name_has_that_size(gcc, tmp_path):
    """libsodium's crypto_hash_sha256(out, in, inlen), its header defining
    crypto_hash_sha256_BYTES 32U: out was sized 2 * inlen + 512, a guess to fix by
    hand."""
    decl = _decl(tmp_path, """
        #define crypto_hash_sha256_BYTES 32U
        int crypto_hash_sha256(unsigned char *out, const unsigned char *in,
                               unsigned long long inlen);
    """, "crypto_hash_sha256")
    mod, ffi, text = _module(tmp_path, decl)
    for out, data, n in _inputs(mod, ffi, "crypto_hash_sha256", n=20):
        assert ffi.sizeof(out) == 32 and ffi.sizeof(data) == max(n, 1)
    assert "crypto_hash_sha256_BYTES = 32" in _line(text.text, "out")
    assert "a guess" not in _line(text.text, "out")
