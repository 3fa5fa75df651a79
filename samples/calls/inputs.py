"""Inputs for calls_entry: 0..256 ints driving the recursion and the gcd loops.

A negative element prunes its subtree in the recursive tree walk, so the share of
negatives (0..50%, drawn per input) sets how many recursive calls happen.  Pairs of
elements feed Euclid's algorithm: random pairs need few steps, consecutive
Fibonacci numbers the most, and the share of Fibonacci pairs is drawn per input.
One input in ten is slow: 256 elements, no negatives (the whole tree) and only
large consecutive Fibonacci pairs (39 to 43 division steps each).
"""

import numpy as np

MAX_N = 256

# F(1..46); F(46) = 1836311903 is the largest that fits an int
_FIB = [1, 1]
while len(_FIB) < 46:
    _FIB.append(_FIB[-1] + _FIB[-2])
_FIB = np.array(_FIB, dtype=np.int64)


def generate(ctx):
    rng = ctx.rng
    slow = ctx.index % 10 == 9
    n = MAX_N if slow else int(rng.integers(0, MAX_N + 1))
    p_neg = 0.0 if slow else rng.uniform(0.0, 0.5)
    p_fib = 1.0 if slow else rng.uniform(0.0, 1.0)
    data = rng.integers(1, 2**31 - 1, n)
    # Fibonacci pairs at (2j, 2j+1): larger first; the slow input uses only the largest
    pairs = n // 2
    k = rng.integers(40 if slow else 2, 45, pairs)
    fib = rng.random(pairs) < p_fib
    data[0:2 * pairs:2] = np.where(fib, _FIB[k], data[0:2 * pairs:2])
    data[1:2 * pairs:2] = np.where(fib, _FIB[k - 1], data[1:2 * pairs:2])
    data = np.where(rng.random(n) < p_neg, -data, data)
    ffi = ctx.ffi
    return (ffi.new("int[]", data.tolist() or [0]), n, ffi.new("int[]", max(n, 1)))
