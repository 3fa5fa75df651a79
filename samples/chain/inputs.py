"""Inputs for chain_run: 0..1024 selector bytes with per-input chain mixes.

The low two bits of each byte pick the 8-, 16-, 32- or 64-multiply chain.  Each
input draws its own mix of the four (Dirichlet weights), so the four chain blocks'
counts vary independently of each other and of n; the solver's estimates of the
four blocks must then come out in the ratio 1:2:4:8.  One input in ten is slow:
1024 elements, all 64-multiply chains.
"""

import numpy as np

MAX_N = 1024


def generate(ctx):
    rng = ctx.rng
    if ctx.index % 10 == 9:
        n = MAX_N
        kind = np.full(n, 3)
    else:
        n = int(rng.integers(0, MAX_N + 1))
        kind = rng.choice(4, size=n, p=rng.dirichlet(np.ones(4)))
    sel = (rng.integers(0, 64, n) << 2) | kind
    buf = ctx.ffi.new("unsigned char[]", max(n, 1))
    if n:
        ctx.ffi.memmove(buf, sel.astype(np.uint8).tobytes(), n)
    x = int(rng.integers(0, 2**63)) * 2 + 1
    return (buf, n, x)
