"""Inputs for matmul: n x n int matrices, n in 0..16 (the bound in wcetfit.toml).

Counts depend on n only (n^3 inner iterations); values are small enough that no
sum overflows.  One input in ten is the largest size.
"""

import numpy as np

MAX_N = 16


def generate(ctx):
    rng = ctx.rng
    n = MAX_N if ctx.index % 10 == 9 else int(rng.integers(0, MAX_N + 1))
    ffi = ctx.ffi
    a = rng.integers(-1000, 1001, n * n).tolist() or [0]
    b = rng.integers(-1000, 1001, n * n).tolist() or [0]
    return (ffi.new("int[]", a), ffi.new("int[]", b), ffi.new("int[]", max(n * n, 1)), n)
