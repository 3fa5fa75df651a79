"""cffi build script for wcetfit._native (run by setuptools through ``cffi_modules``).

It imports nothing from the package.  Everything in this folder takes part:

- every ``*.c`` is compiled into the module;
- every ``*.h`` that has ``/* cdef-begin */`` … ``/* cdef-end */`` markers contributes
  the text between them to ``cdef`` (several marked sections per header are allowed) and
  is ``#include``d by the module source.  Headers without markers are private to the C
  side (e.g. ones holding static inline code) and are not seen by cffi.  The marked part
  must be plain declarations cffi can parse: no inline bodies; ``#define`` lines are
  dropped (expose constants as enums instead).

``wf_native.h`` is read first, the others in name order, so a header may use types that
``wf_native.h`` declares.
"""

import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
FIRST_HEADER = "wf_native.h"
_MARKED = re.compile(r"/\*\s*cdef-begin\s*\*/(.*?)/\*\s*cdef-end\s*\*/", re.S)


def _declarations(header_text: str) -> str:
    """The marked sections of a header, without preprocessor lines or comments."""
    parts = _MARKED.findall(header_text)
    text = "\n".join(parts)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return "\n".join(lines)


def _headers() -> list[str]:
    names = sorted(n for n in os.listdir(HERE) if n.endswith(".h"))
    if FIRST_HEADER in names:
        names.remove(FIRST_HEADER)
        names.insert(0, FIRST_HEADER)
    return names


def _sources() -> list[str]:
    return sorted(n for n in os.listdir(HERE) if n.endswith(".c"))


def _make_builder() -> FFI:
    cdefs = []
    includes = []
    for name in _headers():
        with open(os.path.join(HERE, name)) as f:
            decl = _declarations(f.read())
        if decl:
            cdefs.append(decl)
            includes.append(f'#include "{name}"')
    builder = FFI()
    builder.cdef("\n".join(cdefs))
    builder.set_source(
        "wcetfit._native",
        "\n".join(includes),
        sources=[os.path.relpath(os.path.join(HERE, s)) for s in _sources()],
        include_dirs=[os.path.relpath(HERE)],
        extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
    )
    return builder


ffibuilder = _make_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
