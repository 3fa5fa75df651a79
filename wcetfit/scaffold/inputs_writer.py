"""The inputs module of a new target: ``generate(ctx)`` filling every parameter by its type.

What each parameter gets (cffi tells the types; the declaration gives the names):

* a pointer to data (``const Bytef *buf``, ``void *p``, ``double *x``) is a buffer, sized
  from the length parameter it pairs with.  Pairs are found by name first (``dest`` with
  ``destLen``, ``source`` with ``sourceLen``), then by position: an integer right after
  the pointer named like a length (``(buf, len)``, ``(p, n)``, ``count``, ``nbytes``) or
  unnamed (``arg3``), or, for a pointer with none, the nearest integer named like a
  length.  An integer named otherwise is a value, never a length
  (``png_save_uint_32(buf, i)`` stores i in 4 bytes: taken for buf's length it gave
  1-byte buffers).  Only pointers to scalar elements pair: a pointer to a struct is one
  struct (``deflateBound(strm, sourceLen)`` is no array of sourceLen z_streams).  A
  pointer to an integer named like a length (``uLongf *destLen``) is an in-out capacity:
  it holds its buffer's size.  Lengths
  range over ``0..MAX_LEN`` with every ``SLOW_EVERY``-th input at ``MAX_LEN``, the slow
  calls a WCET needs.  A signed integer named like a length that no buffer pairs with
  (zlib's ``crc32_combine(crc1, crc2, z_off_t len2)``) is drawn like a length too, never
  negative: a negative length is not a slow input but a meaningless one (``len2 < 0``
  makes crc32_combine loop for a very long time, a hang).
* a length whose name says bits (``bits``, ``nbits``, ``key_bits``, ``bitlen``:
  AES_set_encrypt_key's ``(const unsigned char *userKey, const int bits, ...)``) counts
  bits: its buffer holds ceil(bits / 8) bytes (elements of its type: bits / (8 * size)),
  and it is drawn in whole bytes, ``8 * (0..MAX_LEN)``, or from the sizes the header's
  text lists for it (``128, 192 or 256``).
* a non-const pointer to an integer named like a position (``size_t *out_pos``,
  ``*offset``, ``*idx``) is an in-out cursor the function advances: one element, 0.
* a non-const pointer to an integer named like a limit (liblzma's ``uint64_t
  *memlimit``) is one limit the function reads and may update: one element, the most its
  type holds (no limit).
* a buffer whose size the prototype does not give is a guess, and the guess errs large:
  one written (not const, also through a typedef: gmp's ``mp_ptr`` vs ``mp_srcptr``) in
  a call with lengths holds ``OUT_GROWTH * S + OUT_SPARE`` elements, S the call's
  lengths together (``SHA256(d, n, md)``'s 32-byte digest; ``mpn_mul(rp, up, un, vp,
  vn)``'s un + vn limbs; EVP_EncodeBlock's 4/3 n + 1 bytes, see OUT_GROWTH); an input
  borrowing a length ``n + OUT_SPARE``; one with no length anywhere ``UNSIZED_LEN =
  MAX_LEN + MAX_LEN // 8 + OUT_SPARE`` (room for a copy of any input grown by a
  compressor, a C string's NUL and a tail); a
  ``char`` one of them ends in a NUL, so a string scan stops inside it.  The comment
  beside it and a note say so.
* a pointer to an array type (libjpeg's ``JBLOCKROW``, ``short (*)[64]``) is a buffer of
  those arrays, paired with a length like any buffer.
* a length is drawn from 1 where the header's text excludes 0 in a sentence naming it
  (``n >= 1``, ``must be positive``, ``at least one``; for a name shorter than 3
  letters, a sentence naming the function too); elsewhere from 0, its comment saying how
  to start at 1 (a signed type says nothing: gmp's mpn_* need n >= 1).
* an integer named for verbosity (``verbosity``, ``verbose``, ``debug``, ``trace``) that
  the header names no values for is 0: a measured call must not print.  One whose name
  carries a unit multiplier (``blockSize100k``, ``size_kb``) counts units of that size:
  no buffer's length, drawn small (0..16), a guess said beside it.
* an integer that the header's constants name (macros and enumerators whose name
  contains the parameter's, ``LZMA_PRESET_*`` for ``preset``, or whose group's comment
  does, zlib.h's ``/* compression levels */`` for ``level``) selects a mode: it is drawn
  from those values and the range between the smallest and largest (widened by the
  ranges the header's comments give it, ``[0, 9]``), single high bits above them
  (``LZMA_PRESET_EXTREME``) OR-ed in as flags; masks and error codes are no values.
  A guess, said beside it and in a note (the header's text is not the function's
  contract: a whole type's range made most calls take the error path instead).
* an integer named like a position (``start``, ``offset``, ``idx``) in a call with
  lengths lies within them, ``_int(rng, 0, shortest length)`` (png_sig_cmp's ``start``
  over 0..2**32 - 1 returned at once), said in a note.
* other integers range over their type (at most 32 bits), with the ends, 0, 1 and small
  values drawn often because those are what branches test; each is named in a note
  (init prints it as a ``check:`` line: bzip2's workFactor takes 0..250, which bzlib.h
  does not say), but for checksums, hashes and seeds (any bits); enums take their
  declared values; ``char`` is one byte.
* floating values mostly take the function's ordinary computation across magnitudes:
  uniform in [0, 1) on FLOAT_UNIT (0.3) of the draws, log-uniform in 1e-3..1e3 on most
  others, over the type's whole exponent range on FLOAT_WIDE (0.05), negative one time in
  ten (FLOAT_NEGATIVE: many functions take only x >= 0, odd/even ones reduce -x to x),
  and 0, -0, ±inf, NaN or a subnormal one time in a hundred (FLOAT_SPECIAL): uniform
  ±1000 with 0.0 one in ten made erf saturate, pow and log1p NaN, and 0.0 took lgamma
  and remainder into glibc's error handler, where no bound can be had.
* a pointer to a struct is one struct filled field by field by a helper function
  (``_struct_tm(rng)``), nested structs and arrays included; pointers inside structs
  stay NULL (their memory would not be restored between timed calls).
* what cannot be made up — opaque handles, callbacks, pointers to pointers — is NULL,
  said in a comment and in :attr:`InputsText.notes` for the user.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any

from wcetfit.scaffold.declaration import Constant, Declaration, Documented, Param

MAX_LEN = 4096
# The room a buffer whose size the prototype does not give gets beyond the length it
# borrows: what a function writes there regardless of the length cannot be known, and a
# buffer too small is memory corruption in the measuring process.  The largest
# fixed-size results the system libraries write through such a bare pointer are a digest
# (SHA512, EVP_MAX_MD_SIZE: 64 bytes) and an RSA block (RSA_public_encrypt(flen, from,
# to, ...) writes RSA_size() bytes to `to`: 512 for a 4096-bit key); added, not taken as
# a floor with max(), it also covers an output that is its input plus a fixed tail
# (libsodium's crypto_secretbox_easy writes mlen + 16 bytes, crypto_sign mlen + 64).
OUT_SPARE = 512
# A buffer no length describes, and an in-out capacity (``unsigned int *destLen``): the
# longest input, an eighth more and the spare.  A compressor writes more than it reads
# on data it cannot compress: bzlib.h allows 1 % + 600 bytes more (4,737 for 4,096),
# beyond MAX_LEN + OUT_SPARE = 4,608 (4,096 random bytes took 4,594); zlib's
# compressBound(4096) is 4,109.  A capacity too small measures the error return.
UNSIZED_LEN = MAX_LEN + MAX_LEN // 8 + OUT_SPARE
# An output written through a pointer whose size the prototype does not give, in a call
# with length parameters, is sized from their sum S (elements): OUT_GROWTH * S +
# OUT_SPARE.  The sum, because an output is often as long as all its inputs together
# (mpn_mul(rp, up, un, vp, vn) writes un + vn limbs; a concatenation or a merge the
# lengths' total); twice it, because the common encoders and expanders write up to twice
# their input (hex: 2 n; base64: 4 ceil(n / 3) + 1 bytes, EVP_EncodeBlock; UTF-8 from
# Latin-1: 2 n; escaping a byte in two); plus OUT_SPARE, for the fixed results and tails
# above (a digest of an empty input, an encoding's NUL or header).  Still a guess: an
# output longer than that (a 6x expansion, a product of lengths) must be set by the user.
OUT_GROWTH = 2

# (capacity, cap: liblz4's `char *dst, ..., int dstCapacity` was drawn over the whole int
# range, negative half the time)
_LENGTH_WORD = (r"(len|length|size|sz|count|cnt|num|nbytes|bytes|nelem|nelems|nmemb|items|taps|"
                r"capacity|cap)")
# A length named n takes the leading underscores of a system header (glibc's string.h:
# memcmp(const void *__s1, const void *__s2, size_t __n), whose __n was drawn over
# 0..2**32 - 1 beside buffers of 5,120 bytes).
_LENGTHY = re.compile(rf"(?i)({_LENGTH_WORD}|^_*n$|^_*n_|^_*n[A-Z])")
# A length that is an output's room (liblz4's dstCapacity, "cap", "avail_out").
_CAPACITY = re.compile(r"(?i)(capacity|cap$|^cap|avail)")
# The size of one element, after a count of them (qsort's `size_t __size`).
_ELEMENT_SIZE = re.compile(r"(?i)size|width|elsize|elem_?size|item_?size|size_?of_?elt")
# The names a declaration without names gets ("arg2"): they say nothing, so only the
# position can pair such an integer with the pointer before it (gmp's unnamed mpn_*).
_UNNAMED = re.compile(r"arg\d+")
# An integer named like a position into the buffers (png_sig_cmp's ``size_t start``,
# ``offset``, ``pos``, ``idx``): never a length; drawn within the call's lengths.
_POSITION = re.compile(r"^(?i:start|begin|first|from|skip)$|"
                       r"(^|_)(?i:start|begin|pos|position|off|offs|offset|idx|index)$|"
                       r"[a-z0-9](Start|Begin|Pos|Position|Off|Offs|Offset|Idx|Index)$|"
                       # run together: libpcre2's pcre2_match(…, PCRE2_SIZE startoffset, …)
                       r"^(?i:start|begin|first)(?i:pos|position|off|offs|offset|idx|index)$")
# An integer whose value is any bit pattern by its name (a checksum, a hash, a seed):
# drawn over its whole type without a note asking to narrow it.
_ANY_BITS = re.compile(r"(^|_)(?i:crc|adler|hash|seed|checksum|cksum|sum)\d*(_|$)|"
                       r"[a-z0-9](Crc|Adler|Hash|Seed|Checksum|Sum)\d*$")
# Names the length rule takes that say which thing, not how many (a signal's or an
# error's number): they keep their negative values.
_NUMBER_OF_A_THING = re.compile(r"(?i)(sig|err|errno|sys|sock|fd|proto|port)_?num$")
# A name carrying a unit multiplier (bzip2's ``blockSize100k``, ``size_kb``, ``mem_mb``,
# ``window4k``) counts units of that size: not a buffer's length (a buffer of
# blockSize100k bytes is meaningless) and a small number, not 0..MAX_LEN.
_UNIT_MULTIPLE = re.compile(r"\d+[kKmMgG](?![a-z])|(?i:(^|_)[kmg]i?b(_|$))|[a-z][KMG]i?B$")
# A parameter named so sets how much a function reports (bzip2's ``verbosity``): 0, quiet,
# when the header names no values for it: a measured call must not print (the printing
# is not the function's cost, and output to stderr floods the run).
_CHATTY = re.compile(r"(?i)(^|_)(verbos(e|ity)|debug|trace)(_?(level|lvl|flag))?$|"
                     r"[a-z](Verbos(e|ity)|Debug|Trace)(Level)?$")
# A pointer to an integer named so is an in-out cursor (lzma's ``size_t *out_pos``).
_CURSOR = re.compile(r"(^|_)(?i:pos|position|off|offs|offset|idx|index)$|"
                     r"[a-z0-9](Pos|Position|Off|Offs|Offset|Idx|Index)$")
# A pointer to an integer named so holds one limit the function reads and may update
# (liblzma's ``uint64_t *memlimit``: the memory the decoder may use, set to what it needed
# when that was more; init sized it as a buffer of 2 (in + out) + 512 random limits).
_LIMIT = re.compile(r"(^|_)(?i:limit|memlimit|max|maximum)$|[a-z0-9](Limit|Max)$")
# A length named so counts bits (AES_set_encrypt_key's ``bits``, ``nbits``, ``key_bits``,
# ``bitlen``): its buffer holds ceil(bits / 8) bytes, and it is drawn in whole bytes.
_BITS = re.compile(r"(?i)(bits|^n_?bit|bit_?(len|length|count|cnt|size|sz|num))$")
# Constants that are not values of what they name: a mask extracts bits from one, an
# error is a result (liblzma's LZMA_MEMLIMIT_ERROR is a return code, not a memlimit).
_NOT_A_VALUE = re.compile(r"(?i)mask|(^|_)(err|error|errno|fail|failed|failure)(_|$)")
# A text that holds a number: by the parameter's name (C's nptr), or the function's
# (strtod, strtoul, atoi, wcstol's narrow kin)
_NUMBER_TEXT = re.compile(r"(?i)^(nptr|num_?str|number_?str)$")
# A length named for an output's room (dstlen, outsize, capacity, avail_out, maxlen): the
# output's, whatever input follows it (pairs(): an encoder's length is its input's).
_OUTPUT_ROOM = re.compile(r"(?i)(out|dst|dest|cap|room|avail|max)")
# A function that compares or matches two texts, by its name (strcmp, strcasecmp, strcoll,
# strverscmp, sqlite3_stricmp, sqlite3_strglob, sqlite3_strlike, xmlStrcasecmp,
# xmlStrEqual, fnmatch): its texts share a drawn prefix (compared_lines).
_COMPARES = re.compile(r"(?i)(cmp|compar|coll|glob|like|match|equal)")
_PARSES_NUMBERS = re.compile(r"^_*(strto(d|f|ld|l|ll|ul|ull|q|uq|imax|umax|f\d+x?)(_l)?|"
                             r"ato(i|l|ll|f))$")
# A pointer to a pointer named as an output: the function stores a pointer through it.
_OUT_SLOT = re.compile(r"(?i)(^|_)(out\w*|output|result|res|ret|dst|dest|end|endptr|memptr)$")
# Enums of what a function returns, not of what it takes: return codes, errors, statuses.
_RETURN_CODES = re.compile(r"(?i)(^|_)(rc|ret|retval|return|returns|err|errs|error|errors|"
                           r"errno|status|result|results)(_|$)")
# Constants that name a setting, not a value of it: the members of an enum of parameters
# (brotli's BrotliEncoderParameter: BROTLI_PARAM_LGWIN = 2 was drawn as every input's
# lgwin, a window below the encoder's least), and names with _PARAM_ in them.
_SETTING_NAMES = re.compile(r"(?i)(param|parameter|parameters|option|options|setting|"
                            r"settings)(_?t)?$")
_SETTING_NAME = re.compile(r"(?i)(^|_)(param|opt|option)_")
# Constants named as the ends or the default of a scale are values on it, never flags;
# a maximum without a minimum bounds a range that starts at 0 (zconf.h's MAX_MEM_LEVEL).
_ON_A_SCALE = re.compile(r"(?i)(^|_)(min|max|minimum|maximum|default)(_|$)")
_MAXIMUM = re.compile(r"(?i)(^|_)max(imum)?(_|$)")
_MINIMUM = re.compile(r"(?i)(^|_)min(imum)?(_|$)")
# Parameter names too generic for constants or comments carrying them to say what the
# parameter takes ("Allowed flush values" is not about a parameter named value).
_GENERIC = frozenset("value val values number num data size type count result arg "
                     "param params".split())
# A parameter name carried by more constants than this is too common a word for them
# to say what it takes.
_MOST_NAMED = 32
# an enum a parameter's name names holds its values, up to this many
_MOST_ENUMERATED = 256
# Flags are single bits from this one up, above every plain value (LZMA_PRESET_EXTREME
# = 1 << 31 over the levels 0..9): OR'ed into a value rather than drawn as one.
_LOWEST_FLAG = 1 << 8
_FLOATS = ("float", "double", "long double")
_CHARS = ("char16_t", "char32_t", "wchar_t")


@dataclass(frozen=True)
class InputsText:
    text: str                      # the module
    notes: tuple[str, ...]         # one line per parameter that needs the user's attention


def _is_int(ct: Any) -> bool:
    return ct.kind == "primitive" and ct.cname not in _FLOATS + _CHARS + ("char", "_Bool")


def _int_range(ffi: Any, ct: Any, bits: int | None = None) -> tuple[int, int, bool]:
    """(lo, hi, narrowed) of an integer type, at most 32 bits wide."""
    size_bits = bits if bits is not None else 8 * ffi.sizeof(ct)
    signed = int(ffi.cast(ct, -1)) < 0
    width = min(size_bits, 32)
    if signed:
        return -(1 << (width - 1)), (1 << (width - 1)) - 1, width < size_bits
    return 0, (1 << width) - 1, width < size_bits


def _full_range(ffi: Any, ct: Any) -> tuple[int, int]:
    """(lo, hi) of an integer type, however wide."""
    bits = 8 * ffi.sizeof(ct)
    if int(ffi.cast(ct, -1)) < 0:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _constants_for(name: str, constants: tuple[Constant, ...],
                   function: str = "") -> list[Constant]:
    """The header's constants that are values of parameter ``name``: the members of an
    enum whose name names it (libidn2's ``idn2_flags`` for ``flags``, libgcrypt's
    ``gcry_md_algos`` for ``algo``; of several, those sharing most words with
    ``function``'s name: ``gcry_md_hash_buffer``); else those whose name contains it
    (``LZMA_PRESET_*`` for ``preset``, case and ``_`` aside) and those whose group's
    comment names it (zlib.h's ``/* compression levels */`` under ``Z_*COMPRESSION``, for
    ``level``).  Masks and error codes are left out, and so are the members of an enum
    of return codes (libidn2's ``IDN2_INVALID_FLAGS``, an ``idn2_rc``, was drawn as
    ``flags``, and libgcrypt's control commands ``GCRYCTL_*_ALGO`` as ``algo``)."""
    name = name.lstrip("_")                  # glibc's __flags: FLAGS in fnmatch.h's text
    key = name.lower().replace("_", "")
    if len(key) < 4 or key in _GENERIC:      # n, len, key, crc: in too many names
        return []
    values = [c for c in constants if not _NOT_A_VALUE.search(c.name)
              and not _RETURN_CODES.search(c.group) and not _SETTING_NAMES.search(c.group)
              and not _SETTING_NAME.search(c.name)]
    enums = {c.group for c in values if c.group and key in c.group.lower().replace("_", "")}
    if enums:
        words = set(function.lower().split("_"))
        score = {g: len(words & set(g.lower().split("_"))) for g in enums}
        best = max(score.values())
        found = [c for c in values if c.group in enums and score[c.group] == best]
    else:
        word = re.compile(rf"(?i)(?<![\w-]){re.escape(name)}s?(?![\w-])")   # a word: not "high-level"
        # or the setting's constant a comment names ("Minimal value for
        # ::BROTLI_PARAM_LGWIN parameter", above BROTLI_MIN_WINDOW_BITS, for lgwin)
        setting = re.compile(rf"(?i)[A-Za-z0-9]_{re.escape(name)}(?![\w-])")
        found = [c for c in values
                 if key in c.name.lower().replace("_", "") or word.search(c.about)
                 or setting.search(c.about)]
    found = list({c.name: c for c in found}.values())
    # an enum the parameter names is its values however many (gcry_md_algos: 39)
    return found if len(found) <= (_MOST_ENUMERATED if enums else _MOST_NAMED) else []


def _split_flags(consts: list[Constant]) -> tuple[list[int], list[int]]:
    """(plain values, flags) of constants: flags are single bits at or above
    _LOWEST_FLAG, not named as a point on a scale, above some plain value and every
    one (a set of powers of two alone is sizes: LZMA_DICT_SIZE_MIN = 4096, ...)."""
    def bit(c: Constant) -> bool:
        v = c.value
        return v >= _LOWEST_FLAG and v & (v - 1) == 0 and not _ON_A_SCALE.search(c.name)

    plain = {c.value for c in consts if not bit(c)}
    if not plain:
        return sorted({c.value for c in consts}), []
    flags = {c.value for c in consts if bit(c) and c.value > max(plain)}
    return sorted({c.value for c in consts} - flags), sorted(flags)


def _pow(v: int) -> str:
    """Readable bounds: 2**32 - 1 rather than 4294967295."""
    for sign in (1, -1):
        for k in (7, 8, 15, 16, 31, 32, 63, 64):
            if v == sign * (1 << k):
                return f"{'-' if sign < 0 else ''}2**{k}"
            if sign > 0 and v == (1 << k) - 1:
                return f"2**{k} - 1"
    return str(v)


def _strip_const(spelling: str) -> str:
    """``const Bytef *`` -> ``Bytef *``: the type to allocate."""
    text = " ".join(w for w in spelling.replace("*", " * ").split()
                    if w not in ("const", "volatile", "restrict", "__restrict"))
    return re.sub(r"\*\s+(?=\*)", "*", text)


def _const_pointee(spelling: str, cdef: str, depth: int = 0) -> bool:
    """The pointer spelled so points to const data: ``const T *`` or a ``*_const*``
    typedef name as before, or a typedef the cdef defines as a pointer to const
    (gmp's ``typedef const mp_limb_t *mp_srcptr;``), through typedefs of typedefs."""
    if re.search(r"\bconst\b|_const", spelling):
        return True
    name = spelling.strip()
    if depth > 8 or not re.fullmatch(r"[A-Za-z_]\w*", name):
        return False
    m = re.search(rf"\btypedef\s+([^;{{}}]*?)\b{re.escape(name)}\s*;", cdef)
    if m is None:
        return False
    target = m.group(1).strip()
    if "*" in target:                        # const before the last '*': the pointee's
        return bool(re.search(r"\bconst\b", target[:target.rindex("*")]))
    return _const_pointee(target, cdef, depth + 1)


def _array_base(ct: Any) -> Any:
    """The element type under any levels of array (``short[64]`` -> ``short``)."""
    while ct.kind == "array":
        ct = ct.item
    return ct


# Names the generated module uses itself: a parameter called so gets a trailing "_".
_TAKEN = frozenset("ctx rng ffi np k len max min range bytes int bool float chr".split())


def _ident(text: str) -> str:
    s = re.sub(r"\W+", "_", text).strip("_") or "value"
    return s + "_" if keyword.iskeyword(s) or s in _TAKEN else s


def _times(n: str, size: int) -> str:
    return n if size == 1 else f"{n} * {size}"


class _Writer:
    def __init__(self, decl: Declaration, ffi: Any, fctype: Any):
        self.decl, self.ffi, self.fctype = decl, ffi, fctype
        self.params: list[Param] = list(decl.params)
        self.types: list[Any] = list(fctype.args)
        self.helpers: dict[str, list[str]] = {}     # helper name -> its lines
        self.helper_of: dict[str, str] = {}         # struct cname -> helper name
        self.notes: list[str] = []
        self.borrowed: set[int] = set()             # buffers sized from another's length
        self.inout: set[int] = set()                # in-out length pointers (by pairs())
        self.elem_size: dict[int, int] = {}         # void buffer -> its element size param
        self.c_strings: set[int] = set()            # a string copy's source (by pairs())
        self.names: list[str] = []                  # the parameters' Python names
        # in-out cursors: non-const pointers to an integer named like a position
        self.cursors: set[int] = {
            i for i, (p, t) in enumerate(zip(self.params, self.types))
            if t.kind == "pointer" and _is_int(t.item) and _CURSOR.search(p.name)
            and not _LENGTHY.search(p.name) and not _const_pointee(p.spelling, decl.cdef)}
        # in-out limits: non-const pointers to an integer named like a limit
        self.limits: set[int] = {
            i for i, (p, t) in enumerate(zip(self.params, self.types))
            if t.kind == "pointer" and _is_int(t.item) and _LIMIT.search(p.name)
            and i not in self.cursors and not _const_pointee(p.spelling, decl.cdef)}

    # -- scalars --

    def scalar(self, ct: Any, bits: int | None = None) -> tuple[str, str]:
        """(expression drawing a value of ``ct`` from ``rng``, comment)."""
        ffi = self.ffi
        if ct.kind == "enum":
            values = sorted(ct.elements)
            names = ", ".join(ct.elements[v] for v in values[:6]) + \
                (", …" if len(values) > 6 else "")
            return f"_pick(rng, {values})", f"{ct.cname}: {names}"
        if ct.cname in _FLOATS:
            kind = "float" if ct.cname == "float" else "double"
            return (f"_float(rng, \"{kind}\")", f"{ct.cname}: mostly 1e-3..1e3, a tenth "
                    "negative, a few over the type's whole range, specials rare (see "
                    "_floats); set the range that matters")
        if ct.cname == "_Bool":
            return "bool(rng.integers(0, 2))", "_Bool"
        if ct.cname == "char":
            return "bytes([_int(rng, 0, 255)])", "char (cffi takes one byte)"
        if ct.cname in _CHARS:
            return "chr(_int(rng, 32, 126))", ct.cname
        lo, hi, narrowed = _int_range(ffi, ct, bits)
        what = f"{ct.cname}{f' : {bits}' if bits is not None else ''}"
        return (f"_int(rng, {_pow(lo)}, {_pow(hi)})",
                f"{what}{' (drawn in 32 bits)' if narrowed else ''}: narrow it to what the "
                f"function expects")

    # -- structs --

    def struct_helper(self, ct: Any, hint: str) -> str:
        """Name of a helper ``_struct_x(rng)`` returning ``ct``'s fields as a dict."""
        if ct.cname in self.helper_of:
            return self.helper_of[ct.cname]
        base = ct.cname if "$" not in ct.cname else hint
        name = "_" + _ident(base if base.startswith(("struct", "union")) else f"struct {base}")
        while name in self.helpers:
            name += "_"
        self.helper_of[ct.cname] = name
        self.helpers[name] = []          # reserved before the fields (nested structs)
        lines = [f"def {name}(rng):",
                 f'    """{ct.cname if "$" not in ct.cname else hint}, field by field."""',
                 "    return {"]
        for fname, field in ct.fields or ():
            expr, comment = self.field(field.type, field.bitsize, fname)
            if expr is None:
                lines.append(f"        # {fname!r}: {comment}")
            else:
                lines.append(f"        {fname!r}: {expr},  # {comment}")
        lines.append("    }")
        self.helpers[name] = lines
        return name

    def field(self, ct: Any, bitsize: int, fname: str) -> tuple[str | None, str]:
        if ct.kind in ("primitive", "enum"):
            return self.scalar(ct, bitsize if bitsize is not None and bitsize >= 0 else None)
        if ct.kind == "struct":
            return f"{self.struct_helper(ct, fname)}(rng)", ct.cname
        if ct.kind == "union":
            return None, f"{ct.cname}: a union, left zero"
        if ct.kind == "pointer":
            return None, (f"{ct.cname}: left NULL (memory a struct points to is not "
                          "restored between timed calls; set it in generate if needed)")
        if ct.kind == "array":
            n = ct.length or 0
            item = ct.item
            if item.cname == "char":
                return f"_text(rng, {max(n - 1, 0)})", f"{ct.cname}: a NUL-terminated text"
            if item.kind in ("primitive", "enum") and item.cname not in _CHARS:
                expr, comment = self.scalar(item)
                return f"[{expr} for _ in range({n})]", f"{ct.cname}; each {comment}"
            if item.kind == "struct":
                return (f"[{self.struct_helper(item, fname)}(rng) for _ in range({n})]",
                        ct.cname)
            return None, f"{ct.cname}: left zero"
        return None, f"{ct.cname}: left zero"

    # -- parameters --

    def pairs(self) -> tuple[dict[int, int], set[int]]:
        """Buffer parameter -> its length parameter; and the in-out length pointers."""
        params, types = self.params, self.types
        value_len = {i for i, t in enumerate(types)
                     if _is_int(t) and not _UNIT_MULTIPLE.search(params[i].name)}
        inout = {i for i, t in enumerate(types)
                 if t.kind == "pointer" and _is_int(t.item) and _LENGTHY.search(params[i].name)}
        # Only pointers to scalar elements (bytes, integers, floats, enums, arrays of
        # them) take a length: a pointer to a struct is one struct, filled field by field,
        # whatever integer follows it (deflateBound(z_streamp strm, uLong sourceLen): a
        # sourceLen of 4096 z_streams was meaningless and made the search slow).
        buffers = [i for i, t in enumerate(types)
                   if i not in inout and i not in self.cursors and i not in self.limits
                   and self.buffer_kind(t)
                   and t.item.kind not in ("struct", "union")]
        out: dict[int, int] = {}
        named: set[int] = set()
        for b in buffers:                       # by name: dest/destLen, source/sourceLen
            bn = params[b].name.lower().replace("_", "")
            for c in sorted(value_len | inout):
                cn = params[c].name.lower().replace("_", "")
                rest = cn[len(bn):] if cn.startswith(bn) else \
                    cn[:-len(bn)] if cn.endswith(bn) else None
                if rest and re.fullmatch(rf"{_LENGTH_WORD}|n|num|len", rest):
                    out[b] = c
                    named.add(c)
                    break
        for b in buffers:                       # by stem: decoded_buffer/decoded_size
            if b in out or "_" not in params[b].name.strip("_"):
                continue
            stem = params[b].name.strip("_").rsplit("_", 1)[0].lower()
            for c in sorted((value_len | inout) - named):
                cname = params[c].name.strip("_")
                if "_" in cname and cname.rsplit("_", 1)[0].lower() == stem and re.fullmatch(
                        rf"(?i){_LENGTH_WORD}|n|len", cname.rsplit("_", 1)[1]):
                    out[b] = c
                    named.add(c)
                    break
        cdef = self.decl.cdef
        for b in buffers:                       # a string copy: (char *dst, const char *src,
            src, c = b + 1, b + 2               # size_t size)
            # strlcpy, strlcat, strncpy: the length is the destination's room and the source
            # a NUL-terminated string (taken for src's length, src had no NUL, and strlcpy's
            # scan for its end read past the buffer)
            if b in out or c >= len(params) or src not in buffers or src in out:
                continue
            if types[b].item.cname == "char" and types[src].item.cname == "char" \
                    and not _const_pointee(params[b].spelling, cdef) \
                    and _const_pointee(params[src].spelling, cdef) \
                    and c in value_len and c not in named and _LENGTHY.search(params[c].name):
                out[b] = c
                named.add(c)
                self.c_strings.add(src)
        for b in buffers:                       # an encoder: (char *dst, size_t length,
            c, src = b + 1, b + 2               # const uint8_t *src)
            # the length is what the input holds, and the output's size follows from it
            # (nettle_base64_encode_raw: taken for dst's length, every long input overran
            # dst, and the run crashed)
            if b in out or src >= len(params) or src not in buffers or src in out \
                    or c not in value_len or c in named or _BITS.search(params[c].name):
                continue
            own = src + 1                       # src's own length after it: not an encoder
            if own in value_len and own not in named and (
                    _LENGTHY.search(params[own].name) or _UNNAMED.fullmatch(params[own].name)):
                continue
            if not _const_pointee(params[b].spelling, cdef) \
                    and _const_pointee(params[src].spelling, cdef) \
                    and types[src].item.cname != "char" \
                    and _LENGTHY.search(params[c].name) \
                    and not _OUTPUT_ROOM.search(params[c].name):
                out[src] = c
                named.add(c)
        for b in buffers:
            if b in out or b in self.c_strings:
                continue
            # By position, an integer right after the pointer is its length only when its
            # name says so (len, size, n, count, nbytes, num: _LENGTHY; bits, nbits: _BITS,
            # a length in bits) or says nothing
            # (unnamed): an integer named otherwise is a value the function stores or
            # uses (png_save_uint_32(buf, i) writes i into 4 bytes of buf; taking i for
            # buf's length gave 1-byte buffers to a 4-byte write).  A buffer left
            # without a length is sized large (OUT_SPARE, UNSIZED_LEN), not from a value.
            nxt = b + 1
            if nxt in value_len and nxt not in named and (
                    _LENGTHY.search(params[nxt].name) or _BITS.search(params[nxt].name)
                    or _UNNAMED.fullmatch(params[nxt].name)):
                out[b] = nxt
                continue
            # a read-only C string that no length follows is a NUL-terminated text, the C
            # convention, unless the function compares it with another over one length
            # (strncmp's s1): libxml2's xmlReadMemory(buffer, size, URL, encoding, options)
            # had its URL and encoding sized from the document's size, random bytes
            if types[b].item.cname == "char" and \
                    _const_pointee(params[b].spelling, self.decl.cdef) and \
                    not _COMPARES.search(self.decl.function):
                continue
            # a length named so, or unnamed: a header without parameter names gives one
            # length after the buffers it serves (gmp.h's mpn_add_n (mp_ptr, mp_srcptr,
            # mp_srcptr, mp_size_t): the first two were left 5,120 limbs long)
            lengthy = [c for c in sorted(value_len) if c not in named and (
                _LENGTHY.search(params[c].name) or _UNNAMED.fullmatch(params[c].name))]
            after = [c for c in lengthy if c > b]
            before = [c for c in lengthy if c < b]
            if after or before:
                out[b] = after[0] if after else before[-1]
                self.borrowed.add(b)
        # (void *base, size_t nmemb, size_t size): a count of elements and each one's size
        # (qsort, bsearch, fread, calloc's pattern): the buffer holds their product in
        # bytes, the size is small (libc's qsort as init wrote it: base of nmemb bytes, size
        # drawn up to 2**32, 82 % of the inputs crashed)
        for b, c in out.items():
            e = c + 1
            if b not in self.borrowed and types[b].item.kind == "void" and e < len(params) \
                    and e in value_len and e not in out.values() and e != b and \
                    _ELEMENT_SIZE.fullmatch(params[e].name.strip("_")):
                self.elem_size[b] = e
        # A length no buffer is paired with directly, borrowed by one buffer only, is that
        # buffer's length with other parameters between them (memchr(const void *s, int c,
        # size_t n), memset(void *s, int c, size_t n)): sized from it exactly, not a guess
        # with room to spare.
        for b in sorted(self.borrowed):
            c = out[b]
            if all(b2 == b for b2, c2 in out.items() if c2 == c):
                self.borrowed.discard(b)
        return out, {c for c in out.values() if c in inout}

    def compared_lines(self, names: list[str], pairs: dict[int, int]) -> list[str]:
        """Two inputs of one element type over one length (memcmp(s1, s2, n), strncmp,
        CRYPTO_memcmp): the second made equal to the first over a drawn prefix.  Drawn
        apart they differ at their first element 255 times in 256, and the comparison's
        loop never runs (glibc's memcmp: a bound of 578 ticks where equal 4 KiB take
        ~1,750, and a check found calls above it)."""
        params, types = self.params, self.types
        by_length: dict[tuple[int, str], list[int]] = {}
        for b, c in sorted(pairs.items()):
            t = types[b]
            if c in self.inout or t.kind != "pointer" or \
                    not _const_pointee(params[b].spelling, self.decl.cdef):
                continue
            by_length.setdefault((c, t.item.cname), []).append(b)
        for (c, _), bufs in by_length.items():
            if len(bufs) >= 2:
                a, b = bufs[:2]
                return [f"    _share_prefix(ctx, ffi, {names[a]}, {names[b]}, {names[c]})  # "
                        f"{params[b].name} equal to {params[a].name} up to a drawn point: "
                        f"compared, they would differ at once"]
        # two NUL-terminated texts of a comparison (strcmp, sqlite3_stricmp, xmlStrcasecmp,
        # fnmatch, sqlite3_strglob): drawn apart they differ at their first character, and
        # the comparison's loop never ran (sqlite3_stricmp: a bound of 3,384 ticks where
        # two equal 4 KB strings took 34,671)
        texts = self.text_params(pairs)
        if len(texts) >= 2 and _COMPARES.search(self.decl.function):
            a, b = texts[:2]
            return [f"    _share_prefix(ctx, ffi, {names[a]}, {names[b]}, len({names[a]}))  # "
                    f"{params[b].name} equal to {params[a].name} up to a drawn point, its "
                    f"NUL included when all of it: compared, they would differ at once"]
        return []

    def output_size(self) -> Constant | None:
        """The header's constant that sizes the function's output: named for the
        function with a size suffix (``crypto_hash_sha256_BYTES``), or None."""
        want = {f"{self.decl.function}_{suffix}".lower()
                for suffix in ("BYTES", "SIZE", "LEN", "LENGTH", "OUTPUTBYTES")}
        found = [c for c in self.decl.constants if c.name.lower() in want and c.value > 0]
        return found[0] if len(found) == 1 else None

    def byte_string(self, i: int, pairs: dict[int, int]) -> bool:
        """Whether parameter ``i`` is a NUL-terminated string of a 1-byte integer type
        other than char (``const xmlChar *``, ``const unsigned char *``): read only, no
        length parameter, no array type of its own."""
        t, p = self.types[i], self.params[i]
        if t.kind != "pointer" or i in pairs or i in self.cursors or i in self.limits:
            return False
        item = t.item
        return (item.kind == "primitive" and item.cname not in ("char", "_Bool") + _CHARS
                and _is_int(item) and self.ffi.sizeof(item) == 1
                and _const_pointee(p.spelling, self.decl.cdef)
                and _typedef_length(self.ffi, p.spelling) is None)

    def text_params(self, pairs: dict[int, int]) -> list[int]:
        """The NUL-terminated texts among the parameters: const char * without a length,
        and strings of bytes (:meth:`byte_string`)."""
        out = []
        for i, (p, t) in enumerate(zip(self.params, self.types)):
            if t.kind == "pointer" and i not in pairs and t.item.cname == "char" \
                    and _const_pointee(p.spelling, self.decl.cdef) \
                    and not _NUMBER_TEXT.search(p.name.lstrip("_")) \
                    and not _PARSES_NUMBERS.search(self.decl.function):
                out.append(i)
            elif self.byte_string(i, pairs):
                out.append(i)
        return out

    def buffer_kind(self, t: Any) -> bool:
        if t.kind != "pointer":
            return False
        item = t.item
        if item.kind in ("void", "primitive", "enum"):
            return True
        if item.kind == "array":                 # a pointer to arrays: a buffer of them
            base = _array_base(item)
            return base.kind in ("primitive", "enum") and item.length is not None and \
                self.ffi.sizeof(item) > 0
        if item.kind in ("struct", "union"):
            try:
                self.ffi.sizeof(item)
                return True
            except Exception:  # an incomplete (opaque) type
                return False
        return False

    def write(self) -> InputsText:
        ffi = self.ffi
        params, types = self.params, self.types
        pairs, inout = self.pairs()
        self.inout = inout
        names = self.names = [_ident(p.name) for p in params]
        seen: dict[str, int] = {}
        for i, n in enumerate(names):           # two parameters "arg" would collide
            if n in seen:
                names[i] = f"{n}_{i + 1}"
            seen[names[i]] = i
        body: list[str] = []
        lengths = sorted(set(pairs.values()))
        for c in lengths:                       # lengths first: buffers are sized from them
            t = types[c]
            users = ", ".join(params[b].name for b, l in pairs.items()
                              if l == c and b not in self.borrowed)
            guessed = ", ".join(params[b].name for b, l in pairs.items()
                                if l == c and b in self.borrowed)
            if guessed:
                users = f"{users}; {guessed} sized from it" if users else \
                    f"{guessed} sized from it"
            if c in inout:
                body.append(f"    {names[c]}_cap = UNSIZED_LEN  # capacity of {users}, in "
                            f"elements; *{params[c].name} holds it")
                continue
            if self.in_bits(c):
                body.append(self.bit_length_line(c, users))
                continue
            _, hi, _ = _int_range(ffi, t)
            outputs = [b for b, l in pairs.items() if l == c and
                       not _const_pointee(params[b].spelling, self.decl.cdef)]
            users_of_c = [b for b, l in pairs.items() if l == c]
            # a length only outputs take, where the data read has lengths of its own, is
            # their room, not a length of data (liblzma's lzma_easy_buffer_encode: out_size
            # drawn like in_size was below what the encoder writes on half the inputs,
            # which returned LZMA_BUF_ERROR); memset's n, with nothing read, stays a length
            reads_elsewhere = any(l != c and _const_pointee(params[b].spelling,
                                                            self.decl.cdef)
                                  for b, l in pairs.items())
            room = bool(outputs) and len(outputs) == len(users_of_c) and reads_elsewhere
            if (_CAPACITY.search(params[c].name) or room) and outputs and hi >= MAX_LEN:
                # the room an output has, not a length of data: enough of it is the slow
                # case (liblz4's dstCapacity, drawn like a length, was below what the
                # compressor needs on most inputs, and it returned 0 at once)
                body.append(f"    {names[c]} = UNSIZED_LEN  # {t.cname}: the capacity of "
                            f"{users}, room for what {self.decl.function} writes (less "
                            f"makes it stop early)")
                continue
            cap = "MAX_LEN" if hi >= MAX_LEN else f"min(MAX_LEN, {_pow(hi)})"
            low, zero = self.length_low(c)
            body.append(f"    {names[c]} = _length(ctx, {cap}{low})  # {t.cname}: the length of "
                        f"{users}; check whether it counts elements or bytes{zero}")
        self.sum_of = [c for c in lengths if c not in inout]   # the call's value lengths
        for e in sorted(set(self.elem_size.values())):          # sizes: before the buffers
            body.extend(self.param_lines(e, params[e], types[e], names, pairs, inout))
        for i, (p, t) in enumerate(zip(params, types)):
            if i in self.elem_size.values():
                continue
            if i in lengths:
                if i in inout:
                    body.append(f"    {names[i]} = ffi.new(\"{_strip_const(p.spelling)}\", "
                                f"{names[i]}_cap)  # in-out: the capacity in, the length out")
                continue
            body.extend(self.param_lines(i, p, t, names, pairs, inout))
        body.extend(self.compared_lines(names, pairs))
        args = ", ".join(names)
        body.append(f"    return ({args}{',' if len(names) == 1 else ''})")
        return InputsText(self.module(body), tuple(self.notes))

    def param_lines(self, i: int, p: Param, t: Any, names: list[str], pairs: dict[int, int],
                    inout: set[int]) -> list[str]:
        ffi, name = self.ffi, names[i]
        if i in self.elem_size.values():
            users = ", ".join(self.params[b].name for b, e in self.elem_size.items() if e == i)
            return [f"    {name} = _one_of(ctx, [1, 2, 4, 8, 16, 32])  # {t.cname}: the size of "
                    f"one element of {users}, in bytes (the largest on the slow inputs); set "
                    f"the sizes {self.decl.function} is called with"]
        if t.kind in ("primitive", "enum"):
            if _is_int(t) and _LENGTHY.search(p.name) and not _NUMBER_OF_A_THING.search(p.name) \
                    and not _UNIT_MULTIPLE.search(p.name):
                lo, hi, _ = _int_range(ffi, t)
                if lo < 0:             # a negative length is meaningless, not slow
                    cap = "MAX_LEN" if hi >= MAX_LEN else f"min(MAX_LEN, {_pow(hi)})"
                    low, zero = self.length_low(i)
                    # MAX_LEN keeps buffers short; a length that sizes none may run far
                    # longer (zlib's crc32_combine: len2 up to 2**63 - 1 takes its loop 62
                    # times, 0..4096 at most 12, and the bound came out below such a call)
                    self.notes.append(
                        f"{p.name}: a length no buffer is sized by, drawn in 0..MAX_LEN as "
                        f"buffers are only to keep them short: a guess; widen it to the "
                        f"values {self.decl.function} takes (the bound covers only the "
                        f"iterations the inputs reach)")
                    return [f"    {name} = _length(ctx, {cap}{low})  # {t.cname}: a length, "
                            "count or size by its name (no buffer pairs with it): 0..MAX_LEN, "
                            f"never negative, a guess{zero}"]
            named = self.named_values(p, t) if _is_int(t) else None
            if named is not None:
                return [f"    {name} = {named}"]
            if _is_int(t) and _CHATTY.search(p.name):
                self.notes.append(f"{p.name}: 0 (quiet) by its name: a measured call must "
                                  "not print")
                return [f"    {name} = 0  # {t.cname}: how much {self.decl.function} reports, "
                        "by its name: 0, quiet (a measured call must not print; the header "
                        "names no values for it); raise it only to debug"]
            if _is_int(t) and _UNIT_MULTIPLE.search(p.name):
                lo, hi, _ = _int_range(ffi, t)
                self.notes.append(f"{p.name}: a count of units (by its name), drawn "
                                  f"{max(lo, 0)}..{min(hi, 16)}, a guess: narrow it")
                return [f"    {name} = _int(rng, {max(lo, 0)}, {min(hi, 16)})  # {t.cname}: "
                        "a count of units of the size its name gives, not a buffer length: "
                        f"a small number, {max(lo, 0)}..{min(hi, 16)}, a guess: narrow it to "
                        f"the values {self.decl.function} takes"]
            if _is_int(t) and _POSITION.search(p.name):
                within = self.position_line(p, t, name)
                if within is not None:
                    return [within]
            expr, comment = self.scalar(t)
            if _is_int(t) and _ANY_BITS.search(p.name):
                # (libdeflate's running crc was told to be narrowed, which nothing narrows)
                # over its whole width: a 64-bit seed drawn over its low 32 bits was said
                # to take any value (libxxhash's XXH64)
                lo, hi = _full_range(ffi, t)
                expr = f"_int(rng, {_pow(lo)}, {_pow(hi)})"
                comment = (f"{t.cname}: any value, a checksum, hash or seed by its name "
                           f"(a running one: the value of an earlier call)")
            if _is_int(t) and not _ANY_BITS.search(p.name):
                # an integer drawn over its type's whole range is the guess most likely
                # to be wrong (bzip2's workFactor takes 0..250: 91 of 100 calls were
                # rejected at once), and the header rarely says the range in words
                # init reads: init names it, printed as a `check:` line
                lo, hi, narrowed = _int_range(ffi, t)
                # a 64-bit type is drawn over its low 32 bits: said as such, not as its
                # whole range (a new user read "unsigned long … whole range (0..2**32 - 1)")
                over = (f"over {_pow(lo)}..{_pow(hi)}, 32 of its {8 * ffi.sizeof(t)} bits "
                        f"(its whole range would give almost only huge values)" if narrowed
                        else f"over its whole range ({_pow(lo)}..{_pow(hi)})")
                self.notes.append(f"{p.name}: {t.cname} drawn {over}, a guess: narrow "
                                  f"it to the values {self.decl.function} takes (values it "
                                  "rejects make fast, dull calls)")
            return [f"    {name} = {expr}  # {comment}"]
        if i in self.cursors:
            return [f"    {name} = ffi.new(\"{_strip_const(p.spelling)}\", 0)  # {t.cname}: "
                    "an in-out cursor the function advances (a position, offset or index): "
                    "one element, starting at 0; set it if the function expects another "
                    "start"]
        if i in self.limits:
            _, hi = _full_range(self.ffi, t.item)
            return [f"    {name} = ffi.new(\"{_strip_const(p.spelling)}\", {_pow(hi)})  # "
                    f"{t.cname}: one limit the function reads (and may update), at the most "
                    f"its type holds: no limit; lower it to time the limit's check"]
        if t.kind == "struct":
            helper = self.struct_helper(t, p.name)
            return [f"    {name} = ffi.new(\"{t.cname} *\", {helper}(rng))[0]  # by value"]
        if t.kind == "union":
            self.notes.append(f"{p.name}: a union passed by value, left zero")
            return [f"    {name} = ffi.new(\"{t.cname} *\")[0]  # a union: left zero; set "
                    "the member the function reads"]
        if t.kind == "function":                 # cffi's kind of a function pointer
            self.notes.append(f"{p.name}: a callback, left NULL")
            return [f"    {name} = ffi.NULL  # a callback: pass ffi.callback(...) if the "
                    "function calls it"]
        if t.kind != "pointer":
            self.notes.append(f"{p.name}: {t.cname} is not filled")
            return [f"    {name} = None  # {t.cname}: fill it in"]
        item = t.item
        ptype = _strip_const(p.spelling)
        if item.kind == "function":
            self.notes.append(f"{p.name}: a callback, left NULL")
            return [f"    {name} = ffi.NULL  # a callback: pass ffi.callback(...) if the "
                    "function calls it"]
        if item.kind == "pointer":
            if _OUT_SLOT.search(p.name):
                # the function stores a pointer there (libidn2's char **output receives a
                # malloc'ed string; strtod's endptr a place in its input): a slot for it,
                # and a fresh object stored there is compared by what it points to
                self.notes.append(f"{p.name}: a slot for the {t.item.cname} the function "
                                  f"stores (an out-parameter, by its name)")
                return [f"    {name} = ffi.new(\"{ptype}\")  # {t.cname}: a slot the function "
                        f"stores a pointer in (an out-parameter, by its name; NULL if it "
                        f"takes none)"]
            self.notes.append(f"{p.name}: a pointer to a pointer ({t.cname}), left NULL")
            return [f"    {name} = ffi.NULL  # {t.cname}: build what it points to"]
        if not self.buffer_kind(t):
            self.notes.append(f"{p.name}: {t.cname} points to an opaque type, left NULL "
                              "(create it in generate with the library's own constructor, "
                              "ctx.lib.NAME(...), once the prototype declares it; generate() "
                              "runs before every timed call, so each call gets one made "
                              "afresh, as the counted call did, unless [measure] warmup "
                              "makes calls before it)")
            return [f"    {name} = ffi.NULL  # {t.cname}: an opaque handle; create one with "
                    "the library's constructor: ctx.lib.NAME(...), declared in the prototype"]
        const = _const_pointee(p.spelling, self.decl.cdef)
        role = "input" if const else "output or in-out"
        if item.kind in ("struct", "union"):     # never paired with a length (pairs())
            nxt = self.params[i + 1] if i + 1 < len(self.params) else None
            if nxt is not None and _is_int(self.types[i + 1]) and \
                    _LENGTHY.search(nxt.name) and (i + 1) not in pairs.values():
                # total(const struct rec *r, size_t n): one struct and a count up to the
                # type's range would read past it; which it is, only the user knows
                self.notes.append(
                    f"{p.name}: one {item.kind}, followed by {nxt.name} (a count, by its name): "
                    f"if {p.name} is an array of {nxt.name} {item.kind}s, make it "
                    f"ffi.new(\"{item.cname}[]\", n) and keep {nxt.name} within it (a count "
                    f"beyond it reads past the {item.kind})")
            if const and item.kind == "struct":
                # (libcrypto's AES_encrypt: its AES_KEY of random fields, a round count
                # among them, crashed every call)
                self.notes.append(
                    f"{p.name}: its {item.cname}, which the function only reads, has random "
                    f"fields: if the library sets it up (a key schedule, a context), make it "
                    f"with that function through ctx.lib, declared in the prototype")
            setup = self.decl.initializers.get(p.name)
            if setup is not None and not const:
                # (nettle's sha256_update on a struct sha256_ctx of random fields: its index
                # past the block, 114 of 218 inputs crashed)
                self.notes.append(f"{p.name}: set up by {setup} (the header's), called "
                                  f"through ctx.lib; the prototype declares it")
                return [f"    {name} = ffi.new(\"{ptype}\")  # {t.cname}: one {item.kind}, "
                        f"set up by the library as its users do:",
                        f"    ctx.lib.{setup}({name})  # declared in the prototype; bring it "
                        f"to the state to time (more calls through ctx.lib) if not the "
                        f"fresh one"]
            helper = self.struct_helper(item, p.name) if item.kind == "struct" else None
            init = f", {helper}(rng)" if helper else ""
            return [f"    {name} = ffi.new(\"{ptype}\"{init})  # {t.cname}: one "
                    f"{item.kind}, {role}"]
        if i not in pairs and item.cname == "char" and const:   # a C string: no length
            if _NUMBER_TEXT.search(p.name.lstrip("_")) or \
                    _PARSES_NUMBERS.search(self.decl.function):
                # strtod's nptr: printable text almost never starts a number, and every
                # call returned 0 after its first character
                self.notes.append(f"{p.name}: the text of a number (by its name or the "
                                  f"function's): sign, digits, point, exponent, hex")
                return [f"    {name} = ffi.new(\"char[]\", _number_text(rng, _length(ctx)))"
                        f"  # the text of a number, about _length(ctx) characters; input"]
            # its length drawn as a buffer's: the longest on every SLOW_EVERY-th input,
            # the slow case of whatever walks it (drawn uniform in 0..MAX_LEN, libc's
            # strlen met its longest text on one input in 4,097)
            return [f"    {name} = ffi.new(\"char[]\", _text_of(rng, _length(ctx)))  # a "
                    "NUL-terminated text of _length(ctx) characters; input"]
        if self.byte_string(i, pairs):
            # a string of bytes (libxml2's const xmlChar *): read to its NUL, which random
            # bytes of UNSIZED_LEN lacked on one input in five (xmlUTF8Strlen read past
            # the buffer, and nothing said); in a buffer of UNSIZED_LEN all the same, for
            # a function that reads a fixed size instead
            # (the element's type: a pointer typedef's is its target's, not the name less
            # its last letter: libpng's png_const_bytep read "png_const_byte", no type)
            elem = ptype[:-1].strip() if ptype.endswith("*") else item.cname
            return [f"    {name} = _string(ffi, \"{elem}\", _length(ctx), rng)  # "
                    f"{t.cname}, no length parameter: a string of _length(ctx) non-zero "
                    f"bytes and its NUL, in UNSIZED_LEN elements (a function that reads a "
                    f"fixed size reads zeros after the NUL); input"]
        if _is_int(item) and not const and i not in pairs and i not in self.inout \
                and _LENGTHY.search(p.name):
            # a length the function stores (libtasn1's asn1_get_length_der(…, int *len)):
            # one element, not an output buffer of 2·der_len + 512 ints
            return [f"    {name} = ffi.new(\"{ptype}\", 0)  # {t.cname}: one {item.cname} "
                    f"the function stores a length in (an out-value, by its name: no buffer "
                    f"takes it as its length)"]
        fill = None                                # elements holding generated data
        total = self.total(item) if not const else None
        sized = self.output_size() if not const and i not in pairs else None
        if sized is not None:
            # (libsodium's crypto_hash_sha256(out, in, inlen) and its header's
            # crypto_hash_sha256_BYTES 32U: out was sized 2 * inlen + 512, a guess)
            total = None
            n = str(sized.value)
            how = f"{sized.name} = {sized.value}, the header's size of its output"
        elif i in self.borrowed and total is None:
            c = pairs[i]
            fill = self.count(c, item)
            n = f"{fill} + OUT_SPARE"
            how = (f"no length of its own: {fill} + OUT_SPARE elements is a "
                   f"guess: set it to the size {self.decl.function} {self.access(const)}")
            self.notes.append(f"{p.name}: no length parameter of its own; sized "
                              f"{fill} + {OUT_SPARE} elements, a guess: set it to "
                              f"the size the function {self.access(const)}")
        elif (i in self.borrowed or i not in pairs) and total is not None:
            # written, its size not given: room for the sum of the call's lengths, twice
            # (see OUT_GROWTH)
            fill = self.count(pairs[i], item) if i in self.borrowed else None
            n = f"_out({total})"
            par = f"({total})" if " + " in total else total
            how = (f"no length of its own: _out({total}) = OUT_GROWTH * {par} + OUT_SPARE "
                   "elements (the call's lengths together, twice, and a tail) is a guess "
                   f"that errs large: set it to the size {self.decl.function} writes")
            self.notes.append(f"{p.name}: no length parameter of its own; sized "
                              f"{OUT_GROWTH} * {par} + {OUT_SPARE} elements, "
                              "a guess: set it to the size the function writes")
        elif i in self.elem_size:
            c, e = pairs[i], self.elem_size[i]
            n = f"{names[c]} * {names[e]}"
            how = (f"{self.params[c].name} elements of {self.params[e].name} bytes")
        elif i in pairs:
            c = pairs[i]
            n = f"{names[c]}_cap" if c in inout else self.count(c, item)
            how = (f"its capacity is *{self.params[c].name}" if c in inout else
                   f"sized from {self.params[c].name}" if n == names[c] else
                   f"sized from {self.params[c].name}, a count of bits: {n} elements")
        elif _typedef_length(ffi, p.spelling) is not None:
            # an array typedef decays to a pointer, its length kept in the name
            # (libuuid's uuid_t, unsigned char[16]: sized UNSIZED_LEN, "no length found")
            n = str(_typedef_length(ffi, p.spelling))
            how = f"{p.spelling.strip()} is an array of {n}: its size is in its type"
        else:
            n = "UNSIZED_LEN"
            how = (f"no length parameter: UNSIZED_LEN elements is a guess: set it to the size "
                   f"{self.decl.function} {self.access(const)}")
            self.notes.append(f"{p.name}: no length parameter found; {UNSIZED_LEN} elements, "
                              f"a guess: set it to the size the function {self.access(const)}")
        guessed = i in self.borrowed or i not in pairs
        if item.kind == "void":
            elem, esize = "unsigned char", 1
        elif item.kind == "array":               # JBLOCKROW: short(*)[64], arrays of 64
            elem, esize = ffi.getctype(item, "[]"), ffi.sizeof(item)
        else:
            elem = ptype[:-1].strip() if ptype.endswith("*") else item.cname
            esize = ffi.sizeof(item)
        if item.kind in ("void", "array") or _is_int(item) or \
                item.cname in ("char", "_Bool") + _CHARS:
            lines = [f"    {name} = _buffer(ffi, \"{elem}\", {n}, {esize}, rng)  # {how}; "
                     f"{role}; random bytes or a few values (FEW_VALUES): vary the data that "
                     "steers branches"]
            if guessed and item.cname == "char":
                lines.append(f"    {name}[len({name}) - 1] = b\"\\0\"  # ends in a NUL: a "
                             "string scan stops inside it")
            return lines
        lines = [f"    {name} = ffi.new(\"{elem}[]\", max({n}, 1))  # {how}; {role}"]
        k = fill or n
        if item.kind == "enum":
            expr, _ = self.scalar(item)
            lines.append(f"    for k in range({k}):")
            lines.append(f"        {name}[k] = {expr}")
        elif item.cname in ("float", "double"):
            np_t = "np.float32" if item.cname == "float" else "np.float64"
            lines.append(f"    ffi.memmove({name}, _floats(rng, {k}, \"{item.cname}\")"
                         f".astype({np_t}).tobytes(), {_times(k, esize)})  # see _floats; "
                         "set the range that matters")
        return lines

    def position_line(self, p: Param, t: Any, name: str) -> str | None:
        """An integer named like a position (``start``, ``offset``, ``idx``) in a call with
        buffer lengths: drawn within them, 0..the shortest (png_sig_cmp's ``size_t
        start`` over 0..2**32 - 1 made 71 of 100 calls return at once, and a position past
        a buffer's end is meaningless, or a read past it).  None without such lengths."""
        lengths = [self.names[c] for c in getattr(self, "sum_of", ()) if not self.in_bits(c)]
        lo, hi, _ = _int_range(self.ffi, t)
        if not lengths or hi < 1 or lo > 0:
            return None
        shortest = lengths[0] if len(lengths) == 1 else f"min({', '.join(lengths)})"
        if hi < MAX_LEN:
            shortest = f"min({shortest}, {_pow(hi)})"
        self.notes.append(f"{p.name}: a position (by its name), drawn within the call's "
                          f"lengths, 0..{shortest}, a guess: narrow it to the positions "
                          f"{self.decl.function} takes")
        return (f"    {name} = _int(rng, 0, {shortest})  # {t.cname}: a position into the "
                f"buffers (by its name), within the call's lengths: 0..{shortest}, the ends "
                f"and small values often; a guess: narrow it to the positions "
                f"{self.decl.function} takes")

    def total(self, item: Any) -> str | None:
        """The sum of the call's value lengths, in elements of ``item`` (``un + vn``);
        None when the call has none."""
        if not getattr(self, "sum_of", None):
            return None
        return " + ".join(self.count(c, item) for c in self.sum_of)

    def length_low(self, c: int) -> tuple[str, str]:
        """(the extra argument of _length, words for its comment) for length ``c``: from
        1 when the header's text excludes 0 from it, else from 0 with a word to narrow
        it (the type says nothing: mp_size_t is signed yet gmp's mpn_* need n >= 1)."""
        pname = self.params[c].name
        doc = self.decl.documented.get(pname, Documented())
        if doc.positive:
            quotes = "; ".join(f'"{q}"' for q in doc.positive)
            return ", 1", f"; from 1: the header's text excludes 0 ({quotes})"
        return "", (f"; 0 is drawn (an empty call): if {self.decl.function} requires "
                    f"{pname} >= 1, make it _length(ctx, ..., 1)")

    # -- lengths in bits --

    def in_bits(self, c: int) -> bool:
        """Length parameter ``c`` counts bits, by its name."""
        return c not in self.inout and bool(_BITS.search(self.params[c].name))

    def count(self, c: int, item: Any) -> str:
        """The elements (of type ``item``) of a buffer whose length is parameter ``c``: ``c``
        itself, or for a length in bits the elements that hold as many bits."""
        name = self.names[c]
        if not self.in_bits(c):
            return name
        per = 8 * (1 if item.kind == "void" else self.ffi.sizeof(item))
        return f"({name} + {per - 1}) // {per}"

    def bit_length_line(self, c: int, users: str) -> str:
        """A length in bits: a whole number of bytes up to MAX_LEN of them, or one of the
        sizes the header's text lists for it (``128, 192 or 256``)."""
        t, name, pname = self.types[c], self.names[c], self.params[c].name
        _, hi, _ = _int_range(self.ffi, t)
        doc = self.decl.documented.get(pname, Documented())
        listed = sorted(v for v in doc.values if 0 < v <= hi and v % 8 == 0)
        if listed:
            quotes = "; ".join(f'"{q}"' for q in doc.quotes)
            return (f"    {name} = _one_of(ctx, {listed})  # {t.cname}: the length of {users} "
                    f"in bits (by its name); the sizes the header's text gives ({quotes}), "
                    "the largest on the slow inputs; add others to reach the error paths")
        cap = "MAX_LEN" if hi >= 8 * MAX_LEN else f"min(MAX_LEN, {hi // 8})"
        return (f"    {name} = 8 * _length(ctx, {cap})  # {t.cname}: the length of {users} "
                f"in bits (by its name): whole bytes, 8 * (0..MAX_LEN), and {users} "
                f"holds ceil({pname} / 8) bytes; narrow it to the sizes "
                f"{self.decl.function} takes")

    # -- values named by the header's constants --

    def named_values(self, p: Param, t: Any) -> str | None:
        """A draw over the values the header's constants give ``p`` (with the ranges its
        text gives), and its comment; None when it names none."""
        lo, hi = _full_range(self.ffi, t)
        consts = [c for c in _constants_for(p.name, self.decl.constants,
                                            self.decl.function)
                  if lo <= c.value <= hi]
        if not consts:
            return None
        doc = self.decl.documented.get(p.name, Documented())
        plain, flags = _split_flags(consts)
        values = sorted(set(plain) | {v for v in doc.values if lo <= v <= hi})
        ends = values + [min(max(v, lo), hi) for r in doc.ranges for v in r]
        if any(_MAXIMUM.search(c.name) for c in consts) and lo <= 0 \
                and not any(_MINIMUM.search(c.name) for c in consts):
            ends.append(0)      # a maximum's range starts at 0, unless a minimum is named
        low, high = (min(ends), max(ends)) if ends else (0, 0)
        shown = [f"{c.name} = {_pow(c.value)}" + (" (a flag)" if c.value in flags else "")
                 for c in sorted(consts, key=lambda c: c.value)]
        listing = ", ".join(shown[:8]) + (", …" if len(shown) > 8 else "")
        text = f" and its text ({'; '.join(repr(q) for q in doc.quotes)})" \
            if doc.quotes else ""
        self.notes.append(f"{p.name}: drawn from the values the header's constants give it "
                          f"({', '.join(c.name for c in consts[:4])}"
                          f"{', …' if len(consts) > 4 else ''}), a guess: narrow it")
        groups = {c.group for c in consts}
        if not flags and len(groups) == 1 and "" not in groups and len(values) > 1 \
                and not doc.ranges:
            # the members of an enum the parameter names are its values: libgcrypt's
            # gcry_md_algos for algo, where a number between them ("algorithm 201 not
            # available") took an error path on 45 % of the calls
            return (f"_pick(rng, {values})  # {t.cname}: one of the members of "
                    f"{next(iter(groups))} ({listing}); add others if "
                    f"{self.decl.function} takes them")
        draw = f"_among(rng, {values}, {_pow(low)}, {_pow(high)}" + \
            (f", [{', '.join(_pow(f) for f in flags)}])" if flags else ")")
        return (f"{draw}  # {t.cname}: a guess from the header's constants {listing}{text}: "
                f"one of them or {_pow(low)}..{_pow(high)}"
                f"{', flags OR-ed in' if flags else ''}; narrow it to the values "
                f"{self.decl.function} takes")

    @staticmethod
    def access(const: bool) -> str:
        return "reads" if const else "writes (or reads)"

    def module(self, body: list[str]) -> str:
        d = self.decl
        helpers = "\n\n\n".join("\n".join(lines) for lines in self.helpers.values())
        return _TEMPLATE.format(
            function=d.function, source=d.source, prototype=d.prototype,
            max_len=MAX_LEN, spare=OUT_SPARE, growth=OUT_GROWTH,
            helpers=("\n\n\n" + helpers) if helpers else "",
            body="\n".join(body))


def write_inputs(decl: Declaration, ffi: Any, fctype: Any) -> InputsText:
    """The inputs module for ``decl`` (``ffi``/``fctype``: its prototype parsed by cffi)."""
    if len(decl.params) != len(fctype.args):
        raise ValueError(f"{decl.function}: {len(decl.params)} parameter names for "
                         f"{len(fctype.args)} parameters")
    return _Writer(decl, ffi, fctype).write()


_TEMPLATE = '''\
"""Inputs for {function}, written by `wcetfit init` from the {source}:

    {prototype}

generate(ctx) builds the arguments of one call: ctx.rng is this input's own seeded
numpy Generator, ctx.ffi knows the prototype's types, ctx.index is the input's number.
Every parameter gets a value of its type; the comment beside it says what it is.

The bound is only as good as the inputs.  Make some of them as slow as the function
can be (the longest buffers, the data that takes the longest paths: SLOW_EVERY below),
and vary independently whatever changes which blocks run; narrow the ranges to the
values the function is meant to get (values it rejects early make fast, dull calls).
"""

import numpy as np

MAX_LEN = {max_len}        # the longest buffer (elements; bytes for void *)
# A buffer without a length of its own is a guess, made large: what a function writes
# through a bare pointer whatever the lengths (a digest: 64 bytes for SHA512; an RSA
# block: 512 for a 4096-bit key; a copy of the input plus a tag) must fit, or it
# corrupts the measuring process.  Set the real size where the comment says so.
OUT_SPARE = {spare}        # elements beyond the length it borrows
# the size of buffers no length parameter describes, and of in-out capacities: room for
# a compressor's output on data it cannot compress (bzip2: 1 % + 600 bytes more)
UNSIZED_LEN = MAX_LEN + MAX_LEN // 8 + OUT_SPARE
# An output without a length of its own holds OUT_GROWTH * S + OUT_SPARE elements, S the
# call's lengths together: an output as long as its inputs together (a product's un + vn
# limbs), an encoding up to twice its input (hex 2x, base64 4/3), and a fixed tail.
OUT_GROWTH = {growth}
SLOW_EVERY = 10       # every SLOW_EVERY-th input takes the longest buffers
# A buffer's elements are random bytes, except in this share of the buffers, where they
# are 2 to 4 values, one of them most often: data that repeats only in part, the slow
# case of what looks for repeats (zlib's compress2 at level 9 ran 4 KB of 80 % 'a' and
# 20 % 'b' 20x slower than random bytes).  0 for random bytes only.
FEW_VALUES = 0.2
# Floating values (_floats): mostly the ordinary computation, across magnitudes.  A
# uniform +-1000 made most libm calls take their saturation or error paths (erf is +-1
# for |x| >= 6; pow gave NaN, inf or 0 on 87 of 100 calls), and special values reach
# glibc's error handler (lgamma(0), remainder(x, 0)), which makes a bound impossible.
FLOAT_UNIT = 0.3        # share with a magnitude uniform in [0, 1)
FLOAT_WIDE = 0.05       # share over the type's whole exponent range (huge, tiny)
# Negative one time in ten: many functions take only x >= 0 (log, sqrt, pow's base,
# log1p's x > -1), and odd or even ones reduce -x to x (erf, sin, cbrt), so a negative
# argument mostly adds error paths; a tenth still reaches every sign test.
FLOAT_NEGATIVE = 0.1
# The special values (0, -0, +-inf, NaN, subnormals) are rare: one draw in a hundred.
# They mostly take error or early-return paths: raise it (or return them in generate)
# to time those paths.
FLOAT_SPECIAL = 0.01
# 0, -0, +-inf, NaN, the least and the largest subnormal (of double; of float)
_SPECIAL_DOUBLE = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.225073858507201e-308]
_SPECIAL_FLOAT = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.4e-45, -1.4e-45, 1.1754942e-38]


def _int(rng, lo, hi):
    """An integer in [lo, hi]: the ends, 0 and 1 often, small values often (branches
    test them), else uniform."""
    r = rng.random()
    if r < 0.2:
        edges = [v for v in (lo, hi, 0, 1) if lo <= v <= hi]
        return edges[int(rng.integers(len(edges)))]
    if r < 0.5 and lo <= 16 and hi >= -16:
        return int(rng.integers(max(lo, -16), min(hi, 16) + 1))
    return lo + int(rng.integers(0, hi - lo + 1, dtype=np.uint64))


def _pick(rng, values):
    return values[int(rng.integers(len(values)))]


def _among(rng, values, lo, hi, flags=()):
    """A parameter that selects a mode: one of values on half the draws, else any in
    [lo, hi]; each flag OR-ed in on a quarter of the draws."""
    if values and rng.random() < 0.5:
        v = _pick(rng, values)
    else:
        v = lo + int(rng.integers(0, hi - lo + 1, dtype=np.uint64))
    for flag in flags:
        if rng.random() < 0.25:
            v |= flag
    return v


def _one_of(ctx, values):
    """One of values, the largest on every SLOW_EVERY-th input."""
    if ctx.index % SLOW_EVERY == SLOW_EVERY - 1:
        return max(values)
    return _pick(ctx.rng, values)


def _floats(rng, n, kind="double"):
    """n floating values that mostly take a function's ordinary computation, across
    magnitudes: a magnitude uniform in [0, 1) on FLOAT_UNIT of the draws, over the whole
    normal range of the type (1e-307..1e307; float 1e-37..1e37) on FLOAT_WIDE, else
    log-uniform in 1e-3..1e3; negative on FLOAT_NEGATIVE; one of the special values on
    FLOAT_SPECIAL (see them above)."""
    wide = 37 if kind == "float" else 307
    r = rng.random(n)
    x = np.where(r < FLOAT_UNIT, rng.random(n), 10.0 ** rng.uniform(-3.0, 3.0, n))
    x = np.where(r >= 1.0 - FLOAT_WIDE, 10.0 ** rng.uniform(-wide, wide, n), x)
    x = np.where(rng.random(n) < FLOAT_NEGATIVE, -x, x)
    specials = np.array(_SPECIAL_FLOAT if kind == "float" else _SPECIAL_DOUBLE)
    return np.where(rng.random(n) < FLOAT_SPECIAL,
                    specials[rng.integers(0, len(specials), n)], x)


def _float(rng, kind="double"):
    """One value drawn as _floats draws them."""
    return float(_floats(rng, 1, kind)[0])


def _length(ctx, hi=MAX_LEN, lo=0):
    """A buffer length: hi on every SLOW_EVERY-th input, else mostly uniform in 1..hi with
    a few empty (lo) and short ones."""
    if ctx.index % SLOW_EVERY == SLOW_EVERY - 1:
        return hi
    r = ctx.rng.random()
    if r < 0.03:
        return lo
    return int(ctx.rng.integers(max(lo, 1), min(hi, 16) + 1 if r < 0.1 else hi + 1))


def _out(n):
    """The size of an output the prototype does not size, from the lengths n it has."""
    return OUT_GROWTH * n + OUT_SPARE


def _buffer(ffi, ctype, n, size, rng):
    """max(n, 1) elements of ctype holding random bytes (or a few values: FEW_VALUES),
    starting at a random offset from 16-byte alignment: code often treats an unaligned
    head apart (its loop runs only then)."""
    skew = int(rng.integers(0, 16 // size)) * size if size < 16 and 16 % size == 0 else 0
    elements = max(n, 1)
    if rng.random() < FEW_VALUES:
        k = int(rng.integers(2, 5))
        values = np.frombuffer(rng.bytes(k * size), dtype=np.uint8).reshape(k, size)
        weights = rng.dirichlet(np.full(k, 0.7))
        data = values[rng.choice(k, elements, p=weights)].tobytes()
    else:
        data = rng.bytes(elements * size)
    raw = bytearray(skew) + bytearray(data)
    array = ctype if "[]" in ctype else ctype + "[]"     # "short[][64]": arrays of 64
    return ffi.from_buffer(array, memoryview(raw)[skew:], require_writable=True)


def _string(ffi, ctype, n, rng):
    """A string of n non-zero bytes of ctype (a 1-byte type) and its NUL, in a buffer of
    max(UNSIZED_LEN, n + 1) elements: random bytes, or a few values (FEW_VALUES)."""
    buf = ffi.new(ctype + "[]", max(UNSIZED_LEN, n + 1))
    if rng.random() < FEW_VALUES:
        values = rng.integers(1, 256, int(rng.integers(2, 5)), dtype=np.uint8)
        data = values[rng.choice(len(values), n)].tobytes()
    else:
        data = rng.integers(1, 256, n, dtype=np.uint8).tobytes()
    ffi.memmove(buf, data, n)
    return buf


def _text(rng, most):
    """Printable ASCII of random length up to ``most`` (cffi adds the NUL)."""
    return _text_of(rng, int(rng.integers(0, most + 1)) if most else 0)


def _text_of(rng, n):
    """n characters of printable ASCII (cffi adds the NUL)."""
    return bytes(rng.integers(32, 127, n, dtype=np.uint8))


def _number_text(rng, n):
    """The text of a number of about n characters (cffi adds the NUL): a sign often,
    digits with a point and an exponent often, hexadecimal one time in ten."""
    def digits(k, base=10):
        return "".join("0123456789abcdef"[d] for d in rng.integers(0, base, max(k, 1)))
    sign = "-" if rng.random() < 0.3 else "+" if rng.random() < 0.1 else ""
    k = max(int(n) - 6, 1)
    if rng.random() < 0.1:
        body = "0x" + digits(k, 16)
    else:
        point = int(rng.integers(0, k + 1))
        body = digits(point) + ("." + digits(k - point) if rng.random() < 0.7 else "")
        if rng.random() < 0.3:
            body += "e" + str(int(rng.integers(-330, 330)))
    return (sign + body).encode()


def _share_prefix(ctx, ffi, a, b, n):
    """b made equal to a over its first k elements: all n on every SLOW_EVERY-th input and
    on half the others (a comparison's longest run), else k uniform in 0..n."""
    if ctx.index % SLOW_EVERY == SLOW_EVERY - 1 or ctx.rng.random() < 0.5:
        k = n
    else:
        k = int(ctx.rng.integers(0, n + 1))
    k = max(0, min(k, len(a), len(b)))
    ffi.memmove(b, a, k * ffi.sizeof(ffi.typeof(a).item)){helpers}


def generate(ctx):
    rng, ffi = ctx.rng, ctx.ffi
{body}
'''


def _typedef_length(ffi, spelling: str) -> int | None:
    """The length of the array type a parameter is spelt as (``uuid_t``: 16), or None."""
    name = " ".join(w for w in spelling.replace("*", " * ").split()
                    if w not in ("const", "volatile", "restrict", "__restrict"))
    if not name or "*" in name:
        return None
    try:
        t = ffi.typeof(name)
    except Exception:  # noqa: BLE001 -- not a type cffi knows by that name
        return None
    return int(t.length) if t.kind == "array" and t.length else None
