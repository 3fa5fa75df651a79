"""Inputs for crc32_bitwise: random bytes of length 0..2048.

At -O2 every block count follows from the length alone (the per-bit test is a
cmov), so only the length matters for the fit; at -O0 the per-bit branch also
depends on the bytes, which are random (the CRC register is well mixed anyway).
One input in ten is the maximal length.
"""

MAX_LEN = 2048


def generate(ctx):
    rng = ctx.rng
    n = MAX_LEN if ctx.index % 10 == 9 else int(rng.integers(0, MAX_LEN + 1))
    data = ctx.ffi.new("unsigned char[]", max(n, 1))
    if n:
        ctx.ffi.memmove(data, rng.bytes(n), n)
    return (data, n)
