"""The argument bytes of calls, as the C drivers of the count oracle (tests) and of the
count benchmark read them: per input, per argument, ``\\x01`` + length + the bytes of
argument memory the harness owns (restored before the snapshot), or ``\\x00`` + the
argument's own value."""

from __future__ import annotations

import struct
from pathlib import Path


class UnknownSizePointer(ValueError):
    """An argument points to memory the harness does not own: its size is unknown."""


def write_inputs(path: Path, harness, function: str, packs: list) -> None:
    ffi = harness.ffi
    sig = harness.signature(function)
    out = bytearray(struct.pack("<I", len(packs)))
    for pack in packs:
        harness.restore(pack)
        initial = dict(zip((b.arg for b in pack.buffers), harness.snapshot(pack)))
        for k, (value, cname) in enumerate(zip(pack.args, sig.arg_types)):
            if k in initial:
                out += b"\x01" + struct.pack("<Q", len(initial[k])) + initial[k]
                continue
            if isinstance(value, ffi.CData) and ffi.typeof(value).kind in ("pointer", "array"):
                if value != ffi.NULL:
                    raise UnknownSizePointer(f"argument {k + 1} points to memory of unknown "
                                             "size")
                value = ffi.NULL
            out += b"\x00" + bytes(ffi.buffer(ffi.new(f"{cname} *", value)))
    path.write_bytes(bytes(out))
