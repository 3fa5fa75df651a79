"""Inputs for isort: arrays of 0..256 ints with controlled disorder.

The inner loop runs once per inversion, so the arrays range from sorted (no
inversions) through noisy ramps (a few) to shuffled and reversed (n(n-1)/2), for
every size, and some draw values from a small range (many equal keys, which stop
the inner loop early).  One input in ten is slow: 256 elements in reverse order.
"""

import numpy as np

MAX_N = 256


def generate(ctx):
    rng = ctx.rng
    if ctx.index % 10 == 9:
        n = MAX_N
        a = np.arange(n, 0, -1) * int(rng.integers(1, 1000)) + int(rng.integers(-1000, 1000))
    else:
        n = int(rng.integers(0, MAX_N + 1))
        kind = rng.random()
        if kind < 0.5:      # ramp plus noise of random scale: sorted ... shuffled
            noise = float(np.exp(rng.uniform(np.log(0.01), np.log(4.0 * n + 1))))
            a = np.argsort(np.arange(n) + rng.normal(0.0, noise, n))
        elif kind < 0.7:    # uniform random values
            a = rng.integers(-2**31, 2**31, n)
        elif kind < 0.85:   # few distinct keys
            a = rng.integers(0, int(rng.integers(1, 8)), n)
        else:               # descending run followed by ascending run
            k = int(rng.integers(0, n + 1))
            a = np.concatenate((np.arange(k, 0, -1), np.arange(n - k)))
    return (ctx.ffi.new("int[]", np.asarray(a, dtype=np.int64).tolist() or [0]), n)
