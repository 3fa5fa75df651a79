"""Inputs for sm_lex: byte soups of 0..4096 bytes with per-input character mixes.

Each input draws its own weights for ten groups of bytes (letters, digits, '.',
quote, backslash, '#', newline, blanks, operators, other bytes), so the lengths of
identifiers, numbers, strings, comments and error runs, and how often each state
is entered, vary independently from input to input.  One input in ten is slow:
4096 bytes of short tokens in random order, no strings or comments (see below).
"""

import numpy as np

MAX_LEN = 4096

_GROUPS = [
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_",
    b"0123456789",
    b".",
    b'"',
    b"\\",
    b"#",
    b"\n",
    b" \t\r\x0b\x0c",
    b"+-*/%<>=!&|^~;,:?(){}[]",
    bytes(range(0x80, 0x100)) + b"@$`'\x00\x01\x7f",
]
_SIZES = np.array([len(g) for g in _GROUPS])
_TABLE = np.zeros((len(_GROUPS), _SIZES.max()), dtype=np.uint8)
for _i, _g in enumerate(_GROUPS):
    _TABLE[_i, :len(_g)] = np.frombuffer(_g, dtype=np.uint8)

# slow: every group equally likely except '"' and '#', which open long strings and
# comments (fast per-byte loops).  What remains is short tokens in an unpredictable
# order, so nearly every byte ends a token and dispatches through the mispredicted
# jump table: measured about 3x slower per byte than a uniform mix of all ten groups.
_SLOW_WEIGHTS = np.array([1, 1, 1, 0, 1, 0, 1, 1, 1, 1], dtype=float)


def generate(ctx):
    rng = ctx.rng
    if ctx.index % 10 == 9:
        n = MAX_LEN
        w = rng.dirichlet(20.0 * _SLOW_WEIGHTS + 1e-9)
    else:
        n = int(rng.integers(0, MAX_LEN + 1))
        w = rng.dirichlet(np.full(len(_GROUPS), 0.6))
    group = rng.choice(len(_GROUPS), size=n, p=w)
    pick = (rng.random(n) * _SIZES[group]).astype(np.intp)
    data = _TABLE[group, pick]
    buf = ctx.ffi.new("unsigned char[]", max(n, 1))
    if n:
        ctx.ffi.memmove(buf, data.tobytes(), n)
    return (buf, n)
