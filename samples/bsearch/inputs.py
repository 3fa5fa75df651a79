"""Inputs for bsearch_int: a sorted array of 0..4096 ints and a key.

Half the keys are present (found after a varying number of halvings), the rest
fall into a gap, below the first or above the last element (the loop runs to its
end).  One input in ten is slow: 4096 elements and an absent key, the most
iterations (floor(log2 4096) + 1 = 13).
"""

import numpy as np

MAX_N = 4096


def generate(ctx):
    rng = ctx.rng
    slow = ctx.index % 10 == 9
    n = MAX_N if slow else int(rng.integers(0, MAX_N + 1))
    # gaps of at least 2 leave room for absent keys between neighbours
    a = int(rng.integers(-2**30, 0)) + np.cumsum(rng.integers(2, 100, n))
    where = 1.0 if slow else rng.random()
    if n == 0:
        key = int(rng.integers(-100, 100))
    elif where < 0.5:
        key = int(a[rng.integers(0, n)])
    elif where < 0.75 or slow:
        key = int(a[rng.integers(0, n)]) + 1          # gaps are >= 2: never present
    elif where < 0.875:
        key = int(a[0]) - int(rng.integers(1, 1000))
    else:
        key = int(a[-1]) + int(rng.integers(1, 1000))
    return (ctx.ffi.new("int[]", a.tolist() or [0]), n, key)
