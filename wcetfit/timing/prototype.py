"""The target's C declarations: a prototype and its ``cdef`` parsed into function signatures.

A target names its functions by a C prototype (``void adpcm_coder(short *, char *, int,
struct adpcm_state *);``) plus optional type declarations (``cdef``).
:func:`parse_signatures` reads both in a scratch cffi FFI and refuses, with one
``TargetError`` line, what the call harness cannot compile: partial declarations, variadic
functions, complex types, incomplete structs passed by value, functions in the cdef or types
in the prototype.  :mod:`wcetfit.timing.thunk_source` generates the harness's C from the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import cffi

from wcetfit.errors import TargetError

# Headers the target's declarations may rely on without saying so (cffi knows these types).
_C_PRELUDE = """\
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <uchar.h>
#include <wchar.h>
"""


@dataclass(frozen=True)
class FunctionSig:
    """One measured function's C signature, as cffi spells the types."""

    name: str
    arg_types: tuple[str, ...]
    result: str                     # "void" for none

    @property
    def arity(self) -> int:
        return len(self.arg_types)

    @property
    def returns_void(self) -> bool:
        return self.result == "void"


def one_line(exc: BaseException) -> str:
    return "; ".join(part.strip() for part in str(exc).splitlines() if part.strip())


# cffi's API-mode "fill in the rest" forms: "...;" in a struct, "[...]", "= ...", "... x;"
_PARTIAL = re.compile(r"\.\.\.\s*;|\[\s*\.\.\.\s*\]|=\s*\.\.\.|\btypedef\s+\.\.\.")


def _declared(ffi: cffi.FFI) -> dict[str, Any]:
    # cffi has no public listing of what a cdef declared; its parser keeps a dict keyed
    # "function NAME", "struct NAME", "typedef NAME", ... (stable since cffi 1.0; the
    # tests fail loudly if that changes).
    return dict(ffi._parser._declarations)  # noqa: SLF001


def parse_signatures(prototype: str, cdef: str = "") -> tuple[cffi.FFI, list[tuple[str, Any]]]:
    """Parse ``cdef`` then ``prototype`` in a scratch FFI; return it and (name, function
    pointer ctype) for each function the prototype declares, in order."""
    for what, text in (("cdef", cdef), ("prototype", prototype)):
        if _PARTIAL.search(text or ""):
            raise TargetError(f"{what}: partial declarations ('...') cannot be compiled into "
                              f"the call harness; declare the types completely")
    scratch = cffi.FFI()
    try:
        scratch.cdef(cdef or "")
    except Exception as exc:  # cffi raises CDefError, also plain errors from pycparser
        raise TargetError(f"cdef: {one_line(exc)}") from None
    before = _declared(scratch)
    for key in before:
        kind, _, name = key.partition(" ")
        if kind in ("function", "variable"):
            raise TargetError(f"cdef: declares {kind} {name}; the cdef holds types only — "
                              f"declare measured functions in the prototype")
    try:
        scratch.cdef(prototype or "")
    except Exception as exc:
        raise TargetError(f"prototype: {one_line(exc)}") from None
    after = _declared(scratch)
    functions: list[tuple[str, Any]] = []
    for key, (model_type, _quals) in after.items():
        if key in before:
            continue
        kind, _, name = key.partition(" ")
        if kind != "function":
            raise TargetError(f"prototype: declares {kind} {name}; only function "
                              f"declarations belong in the prototype (types go in cdef)")
        try:
            ctype = scratch.typeof(model_type.get_c_name())
        except Exception as exc:
            raise TargetError(f"prototype: {name}: {one_line(exc)}") from None
        functions.append((name, ctype))
    if not functions:
        raise TargetError("prototype: declares no function")
    for name, ctype in functions:
        if ctype.ellipsis:
            raise TargetError(f"prototype: {name} is variadic (...); give a fixed prototype")
        for i, arg in enumerate(ctype.args):
            _check_supported(scratch, name, f"argument {i + 1}", arg)
        _check_supported(scratch, name, "return type", ctype.result)
    return scratch, functions


def _check_supported(ffi: cffi.FFI, fname: str, what: str, ctype: Any) -> None:
    if "complex" in ctype.cname.lower():
        raise TargetError(f"prototype: {fname}: {what} is a complex type ({ctype.cname}), "
                          f"not supported")
    if ctype.kind in ("struct", "union"):
        try:
            ffi.sizeof(ctype)
        except Exception:
            raise TargetError(f"prototype: {fname}: {what} is {ctype.cname}, an incomplete "
                              f"type; declare it fully in cdef") from None
