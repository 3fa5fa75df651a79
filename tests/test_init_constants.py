"""`wcetfit init` reading what a header says about values: a length in bits sizes its
buffer in bytes, and a parameter that selects a mode is drawn from the header's named
constants (and the ranges its comments give) rather than over its whole type."""

import os
import re
import shutil
import textwrap

import pytest

from test_init import LIBDIR, _inputs, _line, _module, _system

AES_H = "/usr/include/openssl/aes.h"
LZMA_H = "/usr/include/lzma.h"
ZLIB_H = "/usr/include/zlib.h"


@pytest.fixture
def gcc():
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")


def _header(tmp_path, text):
    h = tmp_path / "lib.h"
    h.write_text(textwrap.dedent(text))
    return str(h)


def _decl(header, function):
    from wcetfit.scaffold.header import declaration_from_header
    return declaration_from_header(header, [function])


# --- the evaluator -------------------------------------------------------------------

@pytest.mark.parametrize("expr, value", [
    ("6U", 6), ("0x1FU", 31), ("(1U << 31)", 2**31), ("(-1)", -1), ("010", 8),
    ("1UL | 2ULL << 4", 33), ("-7 / 2", -3), ("-7 % 2", -1), ("((1) << 4) | 0x10", 16),
    ("A | B", 5), ("~A & 0xF", 14),
])
def test_evaluate_reads_integer_expressions(expr, value):
    from wcetfit.scaffold.constants import evaluate
    assert evaluate(expr, {"A": 1, "B": 4}) == value


@pytest.mark.parametrize("expr", [
    "(uint32_t)1", "f(1)", '"text"', "'a'", "1.5", "1 << 64", "1 / 0", "(1", "1)", "2 3",
    "C", "__import__('os').getcwd()", "1 ? 2 : 3", "~0U", "1 < 2",
])
def test_evaluate_gives_up_on_anything_else(expr):
    from wcetfit.scaffold.constants import evaluate
    assert evaluate(expr, {"A": 1}) is None


# --- lengths in bits -----------------------------------------------------------------

def test_length_in_bits_sizes_its_buffer_in_bytes(gcc, tmp_path):
    """A length named in bits (AES_set_encrypt_key's `const int bits`) counts bits: its
    buffer holds ceil(bits / 8) elements of its type, and it is drawn in whole bytes up to
    MAX_LEN of them (it was drawn like a byte length and sized the buffer bits bytes)."""
    h = _header(tmp_path, """
        #include <stddef.h>
        #include <stdint.h>
        int set_key(const unsigned char *userKey, const int bits, void *key);
        void put_bits(uint32_t *words, size_t nbits, const void *src, size_t len);
    """)
    mod, ffi, text = _module(tmp_path, _decl(h, "set_key"))
    args = _inputs(mod, ffi, "set_key", n=60)
    for user_key, bits, _ in args:
        assert bits % 8 == 0 and 0 <= bits <= 8 * mod.MAX_LEN
        assert ffi.sizeof(user_key) == max(bits // 8, 1)
    assert max(bits for _, bits, _ in args) == 8 * mod.MAX_LEN      # the slow inputs
    assert len({bits for _, bits, _ in args}) > 10
    assert "in bits" in _line(text.text, "bits")

    mod, ffi, _ = _module(tmp_path, _decl(h, "put_bits"))
    for words, nbits, src, n in _inputs(mod, ffi, "put_bits", n=60):
        assert nbits % 8 == 0
        assert ffi.sizeof(words) == 4 * max(-(-nbits // 32), 1)     # uint32_t elements
        assert ffi.sizeof(src) == max(n, 1)                          # bytes, as before


def test_length_in_bits_takes_the_sizes_the_header_lists(gcc, tmp_path):
    """Sizes the header's text lists for it ("128, 192 or 256") are the ones drawn."""
    h = _header(tmp_path, """
        /* The key is keybits long: keybits is 128, 192 or 256. */
        int set_key(const unsigned char *key, int keybits);
    """)
    mod, ffi, text = _module(tmp_path, _decl(h, "set_key"))
    args = _inputs(mod, ffi, "set_key", n=40)
    assert {bits for _, bits in args} == {128, 192, 256}
    assert all(ffi.sizeof(key) == bits // 8 for key, bits in args)
    assert "128, 192 or 256" in _line(text.text, "keybits")


# --- values from named constants -----------------------------------------------------

MODES_H = """
    #include <stdint.h>
    #define CODEC_PRESET_DEFAULT     UINT32_C(6)
    #define CODEC_PRESET_LEVEL_MASK  UINT32_C(0x1F)
    #define CODEC_PRESET_EXTREME     (UINT32_C(1) << 31)

    #define K_NO_COMPRESSION       0
    #define K_BEST_SPEED           1
    #define K_BEST_COMPRESSION     0x9L
    #define K_DEFAULT_COMPRESSION  (-1)
    /* compression levels */

    #define K_OK          0
    #define K_LEVEL_ERROR (-3)
    #define K_NAME        "codec"
    #define K_CALL        codec_version()
    #define K_UNKNOWN     (K_MISSING + 1)
    #define K_FAST        (K_BEST_SPEED | 0x10)

    enum mode { MODE_FAST = 1, MODE_SLOW = 4 };
    enum { PACE_LOW = 2, PACE_HIGH };

    /**
     * \\param preset  A preset is a number [0, 9], possibly OR-ed with
     *                 CODEC_PRESET_EXTREME.
     */
    int encode(uint32_t preset, int level, enum mode m, int pace, int other);
"""


def test_header_constants_are_read_without_executing_them(gcc, tmp_path):
    """Macros defined as expressions (parenthesised, hex, U/L suffixes, UINT32_C, other
    macros) and enumerators are evaluated; strings, calls and unknown names are left out;
    the comment under a group of #defines goes with each of them."""
    decl = _decl(_header(tmp_path, MODES_H), "encode")
    values = {c.name: c.value for c in decl.constants}
    assert values["CODEC_PRESET_DEFAULT"] == 6 and values["CODEC_PRESET_LEVEL_MASK"] == 31
    assert values["CODEC_PRESET_EXTREME"] == 2**31
    assert values["K_BEST_COMPRESSION"] == 9 and values["K_DEFAULT_COMPRESSION"] == -1
    assert values["K_FAST"] == 0x11
    assert values["MODE_SLOW"] == 4 and values["PACE_HIGH"] == 3
    assert not {"K_NAME", "K_CALL", "K_UNKNOWN"} & set(values)
    assert not any(n.startswith(("INT", "UINT", "__")) for n in values)   # <stdint.h>'s
    about = {c.name: c.about for c in decl.constants}
    assert about["K_BEST_SPEED"] == "compression levels"
    assert decl.documented["preset"].ranges == ((0, 9),)


def test_parameters_selecting_a_mode_take_the_headers_constants(gcc, tmp_path):
    """`preset` takes the range its text gives (0..9) with CODEC_PRESET_EXTREME, a flag,
    OR-ed in on some inputs (the mask is no value); `level` the values and range of the
    constants its group's comment calls compression levels (not the error code); an enum
    its enumerators; an integer no constant names its whole type, as before."""
    mod, ffi, text = _module(tmp_path, _decl(_header(tmp_path, MODES_H), "encode"))
    args = _inputs(mod, ffi, "encode", n=200)
    presets = [a[0] for a in args]
    assert {p & ~2**31 for p in presets} <= set(range(10))
    assert any(p & 2**31 for p in presets) and not all(p & 2**31 for p in presets)
    assert len({p & ~2**31 for p in presets}) > 5
    levels = [a[1] for a in args]
    assert set(levels) <= set(range(-1, 10)) and {-1, 0, 1, 9} <= set(levels)
    assert {a[2] for a in args} == {1, 4}
    assert {a[3] for a in args} == {2, 3}
    assert max(abs(a[4]) for a in args) > 1000
    line = _line(text.text, "level")
    for name in ("K_NO_COMPRESSION", "K_DEFAULT_COMPRESSION", "guess", "narrow"):
        assert name in line, line
    assert "K_LEVEL_ERROR" not in line
    assert "CODEC_PRESET_EXTREME" in _line(text.text, "preset")
    assert any(n.startswith("level: ") and "a guess" in n for n in text.notes)


def test_sizes_named_min_and_default_are_not_flags(gcc, tmp_path):
    """Powers of two named as points on a scale (a dictionary's minimum and default size)
    are a range, not flags OR-ed into 0."""
    h = _header(tmp_path, """
        #define DICT_SIZE_MIN      4096
        #define DICT_SIZE_DEFAULT  (1U << 23)
        int open_decoder(unsigned dict_size);
    """)
    mod, ffi, _ = _module(tmp_path, _decl(h, "open_decoder"))
    sizes = [a[0] for a in _inputs(mod, ffi, "open_decoder", n=60)]
    assert min(sizes) >= 4096 and max(sizes) <= 1 << 23 and len(set(sizes)) > 10


# --- the system libraries ------------------------------------------------------------

def _header_present(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")


def test_aes_set_encrypt_key_bits(gcc, tmp_path):
    _header_present(AES_H)
    mod, ffi, text = _module(tmp_path, _decl(AES_H, "AES_set_encrypt_key"))
    for user_key, bits, _ in _inputs(mod, ffi, "AES_set_encrypt_key", n=40):
        assert bits % 8 == 0 and ffi.sizeof(user_key) == max(bits // 8, 1)


def test_lzma_preset_and_check(gcc, tmp_path):
    """lzma_easy_buffer_encode: preset is 0..9, LZMA_PRESET_EXTREME OR-ed in on some
    inputs (it was drawn over all of uint32: most inputs took the error path); check
    keeps its enumerators."""
    _header_present(LZMA_H)
    mod, ffi, text = _module(tmp_path, _decl(LZMA_H, "lzma_easy_buffer_encode"))
    args = _inputs(mod, ffi, "lzma_easy_buffer_encode", n=100)
    assert {a[0] & ~2**31 for a in args} <= set(range(10))
    assert any(a[0] & 2**31 for a in args)
    assert {a[1] for a in args} == {0, 1, 4, 10}           # LZMA_CHECK_*
    line = _line(text.text, "preset")
    assert "LZMA_PRESET_EXTREME" in line and "guess" in line


def test_zlib_compress2_level(gcc, tmp_path):
    """compress2's level is Z_DEFAULT_COMPRESSION or 0..9 (it was any int)."""
    _header_present(ZLIB_H)
    mod, ffi, text = _module(tmp_path, _decl(ZLIB_H, "compress2"))
    levels = {a[4] for a in _inputs(mod, ffi, "compress2", n=100)}
    assert levels <= set(range(-1, 10)) and {-1, 0, 9} <= levels
    line = _line(text.text, "level")
    assert re.search(r"Z_DEFAULT_COMPRESSION = -1\b", line) and "guess" in line


@pytest.mark.slow
def test_init_then_analyze_aes_set_encrypt_key(tmp_path):
    """The newcomer's AES_set_encrypt_key: init, then analyze, no hand edits: the key
    buffer is bits / 8 bytes and the inputs run."""
    from test_init import _init_then_analyze

    lib = f"{LIBDIR}/libcrypto.so.3"
    _system(lib, AES_H)
    target, fn, _ = _init_then_analyze(tmp_path, lib, AES_H, "AES_set_encrypt_key")
    inputs = (target / "inputs.py").read_text()
    assert re.search(r"userKey = _buffer\(ffi, \"unsigned char\", \(bits \+ 7\) // 8,", inputs)
    assert fn["name"] == "AES_set_encrypt_key"


def test_constants_naming_a_setting_are_no_values_of_it(gcc, tmp_path):
    """brotli's BrotliEncoderCompress(int quality, int lgwin, …): BROTLI_PARAM_LGWIN = 2, a
    member of the enum of settings BrotliEncoderSetParameter takes, was every input's
    lgwin (a window below the encoder's least).  The setting's identifiers are left out,
    and the constants whose comment names the setting are its values."""
    h = _header(tmp_path, """
        #include <stddef.h>
        #include <stdint.h>
        /** Minimal value for ::BROTLI_PARAM_LGWIN parameter. */
        #define BROTLI_MIN_WINDOW_BITS 10
        /** Maximal value for ::BROTLI_PARAM_LGWIN parameter. */
        #define BROTLI_MAX_WINDOW_BITS 24
        typedef enum BrotliEncoderParameter {
          BROTLI_PARAM_MODE = 0,
          BROTLI_PARAM_QUALITY = 1,
          BROTLI_PARAM_LGWIN = 2
        } BrotliEncoderParameter;
        int compress(int quality, int lgwin, size_t input_size, const uint8_t *input_buffer);
    """)
    mod, ffi, text = _module(tmp_path, _decl(h, "compress"))
    lgwins = {lgwin for _, lgwin, _, _ in _inputs(mod, ffi, "compress", n=60)}
    assert min(lgwins) >= 10 and max(lgwins) <= 24 and {10, 24} <= lgwins, sorted(lgwins)
    assert "BROTLI_PARAM" not in _line(text.text, "lgwin")
    # quality names no constant of its own here: not BROTLI_PARAM_QUALITY = 1
    assert "BROTLI_PARAM" not in _line(text.text, "quality")
