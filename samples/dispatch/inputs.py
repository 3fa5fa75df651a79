"""Inputs for dispatch_run: a program of 0..200 bytes and a start value.

Each input draws its own mix of operations (weights per op), so the four callees run
different numbers of times from input to input; about one byte in eight is 255 (the
call through a pointer into the C library)."""

import numpy as np

MAX_N = 200


def generate(ctx):
    rng = ctx.rng
    n = int(rng.integers(0, MAX_N + 1))
    weights = rng.dirichlet(np.ones(4))
    ops = rng.choice(4, size=n, p=weights)
    prog = (rng.integers(0, 64, n) << 2) | ops
    prog = np.where(rng.random(n) < 0.125, 255, prog)
    return (ctx.ffi.new("unsigned char[]", prog.astype(np.uint8).tolist() or [0]), n,
            int(rng.integers(-2**40, 2**40)))
