"""cffi build script for wcetfit._native (run by setuptools through ``cffi_modules``).

It imports nothing from the package: the C sources live in this folder and the
declarations handed to cffi are read from wf_native.h (the lines between the markers
``/* cdef-begin */`` and ``/* cdef-end */`` if present, otherwise every prototype line).
"""

import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["wf_native.c"]


def _declarations(header_text: str) -> str:
    """Prototypes and typedefs of the header, without preprocessor lines or comments."""
    text = re.sub(r"/\*.*?\*/", "", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return "\n".join(lines)


with open(os.path.join(HERE, "wf_native.h")) as f:
    _header = f.read()

ffibuilder = FFI()
ffibuilder.cdef(_declarations(_header))
ffibuilder.set_source(
    "wcetfit._native",
    '#include "wf_native.h"',
    sources=[os.path.relpath(os.path.join(HERE, s)) for s in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
