"""What a new target needs to know about the function it calls: its prototype, the type
declarations the prototype uses (the target's ``cdef``) and its parameters' names.

Two sources produce it: a C header (:mod:`wcetfit.scaffold.header`) and the binary's
DWARF debugging information (:mod:`wcetfit.scaffold.dwarf`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Type names the call harness already knows without a declaration: cffi's built-in
# types, which are also the names the harness's C prelude (<stdint.h>, <stddef.h>,
# <stdio.h>, <stdbool.h>, <uchar.h>, <wchar.h>, <sys/types.h>) defines.  Declaring them
# again in the cdef would shadow cffi's own meaning of the name.
KNOWN_TYPEDEFS = frozenset("""
    FILE bool char16_t char32_t wchar_t size_t ssize_t ptrdiff_t intptr_t uintptr_t
    intmax_t uintmax_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    int_least8_t int_least16_t int_least32_t int_least64_t
    uint_least8_t uint_least16_t uint_least32_t uint_least64_t
    int_fast8_t int_fast16_t int_fast32_t int_fast64_t
    uint_fast8_t uint_fast16_t uint_fast32_t uint_fast64_t
""".split())


@dataclass(frozen=True)
class Param:
    name: str          # as declared; "argN" (1-based) when the declaration names none
    spelling: str      # the parameter's type as the source spells it (typedef names kept)


@dataclass(frozen=True)
class Constant:
    """An integer constant a library's header defines (a macro or an enumerator)."""

    name: str
    value: int
    # the first sentence of the comment attached to its group of #defines (zlib.h writes
    # "/* compression levels */" under Z_NO_COMPRESSION..Z_DEFAULT_COMPRESSION)
    about: str = ""
    # an enumerator's enum: its tag, or the typedef's name of an enum without one
    # (libidn2's ``typedef enum {IDN2_NFC_INPUT = 1, …} idn2_flags;``); "" for a macro
    group: str = ""


@dataclass(frozen=True)
class Documented:
    """The values a header's comments give a parameter in words, and the words."""

    values: tuple[int, ...] = ()                  # "128, 192 or 256"
    ranges: tuple[tuple[int, int], ...] = ()      # "between 0 and 9", "[0, 9]"
    quotes: tuple[str, ...] = ()                  # what was read, for the inputs' comment
    # the words that exclude 0 from a length ("n >= 1", "must be positive", "at least
    # one"): a length drawn from 1 then, 0 otherwise
    positive: tuple[str, ...] = ()


@dataclass(frozen=True)
class Declaration:
    """One function's declaration, ready for a target's wcetfit.toml."""

    function: str                  # the name the prototype declares
    prototype: str                 # e.g. "uLong crc32(uLong crc, const Bytef *buf, uInt len);"
    cdef: str                      # the typedefs and struct/union/enum definitions it needs
    params: tuple[Param, ...]
    source: str                    # where it came from, for the target file's comment
    # what a header (not DWARF) says about values: the integer constants of the library's
    # own header files, and per parameter name the values its comments give
    constants: tuple[Constant, ...] = ()
    documented: dict[str, Documented] = field(default_factory=dict)
    # parameter name → the header's function that sets up the struct it points to (its
    # declaration follows the function's in ``prototype``; generate() calls it through
    # ctx.lib)
    initializers: dict[str, str] = field(default_factory=dict)
    # the names the returned type goes by (a typedef, the enum's tag; outermost first):
    # which of the header's enums the function returns, if any
    returns: tuple[str, ...] = ()

    @property
    def error_returns(self) -> tuple[tuple[str, int], ...]:
        """The members of the enum the function returns that name an error, as (name,
        value): libbrotlidec's BrotliDecoderDecompress returns BrotliDecoderResult, whose
        BROTLI_DECODER_RESULT_ERROR = 0 no "below zero" rule catches; liblzma's lzma_ret
        has LZMA_DATA_ERROR = 9 and six more.  Empty where every member reads as one (an
        enum of error kinds, not of results)."""
        members = [c for c in self.constants if c.group and c.group in self.returns]
        errors = tuple((c.name, c.value) for c in members if _ERROR_MEMBER.search(c.name)
                       and not _SUCCESS_MEMBER.search(c.name))
        return errors if errors and len(errors) < len(members) else ()


# an enum member naming an error (a word of its name, in any case), and one that does not
# although it has such a word (expat's XML_ERROR_NONE)
_ERROR_MEMBER = re.compile(r"(?:^|_)(?:ERROR|ERR|FAIL|FAILED|FAILURE|INVALID)(?:_|$)", re.I)
_SUCCESS_MEMBER = re.compile(r"(?:^|_)(?:NONE|OK|SUCCESS)(?:_|$)", re.I)
