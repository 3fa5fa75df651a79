"""Inputs for actree_run: 0..40 elements, recursion depth 0..6."""


def generate(ctx):
    rng = ctx.rng
    n = int(rng.integers(0, 41))
    v = rng.integers(-1000, 1000, max(n, 1)).tolist()
    return (ctx.ffi.new("int[]", v), n, int(rng.integers(0, 7)))
