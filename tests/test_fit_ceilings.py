"""Block costs held to what their instructions can take (wcetfit.fit.ceilings): a rare
block that marks the inputs whose time depends on the data does not carry their time, the
fit says so, and a fit the limits do not touch is the one without them; the limits of
real library code (calls, ``rep`` string operations: none)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from wcetfit.fit.ceilings import INSTRUCTION_NS, block_ceiling_ticks
from wcetfit.fit.result import WARN_HELD, FitOptions
from wcetfit.fit.solve import fit_function

HZ = 2.6e9
OPTIONS = FitOptions(folds=5)


def _indicator_system(seed: int = 3):
    """A loop whose iterations cost 20 ticks, or 60 on the slow tenth of the inputs (a
    mispredicted dispatch: equal counts, three times the time), and a block run once on
    most slow inputs and no others (the state the slow data end in): least squares puts
    the slow inputs' extra time on that block."""
    rng = np.random.default_rng(seed)
    n, r = 400, 5
    slow = np.arange(n) % 10 == 9
    iters = np.where(slow, 4000, rng.integers(0, 4001, n))
    marker = (slow & (rng.random(n) < 0.9)).astype(int)
    counts = np.column_stack([np.ones(n, int), iters, marker])
    per_iter = np.where(slow, 60.0, 20.0)
    mean = 100 + per_iter * iters + 5 * marker
    ticks = mean[:, None] * (1 + np.abs(rng.normal(0, 0.01, (n, r))))
    return counts, ticks, [0x1000, 0x1010, 0x1020]


def test_a_rare_block_does_not_carry_the_time_of_the_data_it_marks():
    counts, ticks, addrs = _indicator_system()
    free = fit_function(counts, ticks, addrs, tsc_hz=HZ, options=OPTIONS)
    marker_free = next(b for b in free.blocks if b.address == 0x1020).solution_ticks
    # two instructions (mov, jmp): at most three times INSTRUCTION_NS
    ceiling = 3 * INSTRUCTION_NS * 1e-9 * HZ
    assert marker_free > 10 * ceiling            # what the fit did without the limit
    held = fit_function(counts, ticks, addrs, tsc_hz=HZ, options=OPTIONS,
                        ceilings=np.array([math.inf, math.inf, ceiling]))
    marker = next(b for b in held.blocks if b.address == 0x1020).solution_ticks
    assert marker == pytest.approx(ceiling, rel=1e-6)
    warning = next(w for w in held.fit_warnings if w.code == WARN_HELD)
    assert "at the most their instructions can take" in warning.message
    assert "0x1020" in warning.message
    # the slow inputs are now underpredicted, which the bound's misfit factor covers
    slow = np.arange(counts.shape[0]) % 10 == 9
    predicted = held.predict(counts)
    assert np.median(np.median(ticks, axis=1)[slow] / predicted[slow]) > 1.2


def test_limits_the_data_do_not_reach_change_nothing():
    rng = np.random.default_rng(8)
    n = 300
    counts = np.column_stack([np.ones(n, int), rng.integers(0, 500, n), rng.integers(0, 50, n)])
    ticks = (40 + counts @ np.array([0.0, 7.0, 30.0]))[:, None] * (
        1 + np.abs(rng.normal(0, 0.01, (n, 5))))
    addrs = [0x10, 0x20, 0x30]
    free = fit_function(counts, ticks, addrs, tsc_hz=HZ, options=OPTIONS)
    held = fit_function(counts, ticks, addrs, tsc_hz=HZ, options=OPTIONS,
                        ceilings=np.array([3900.0, 3900.0, 3900.0]))
    assert np.array_equal(free.solution, held.solution)
    assert np.array_equal(np.asarray(free.covariance), np.asarray(held.covariance))
    assert not [w for w in held.fit_warnings if "instructions can take" in w.message]


def test_ceilings_are_checked():
    from wcetfit.errors import FitError

    counts, ticks, addrs = _indicator_system()
    with pytest.raises(FitError, match="ceilings"):
        fit_function(counts, ticks, addrs, ceilings=np.array([1.0, 2.0]))


LIBZ = "/lib/x86_64-linux-gnu/libz.so.1"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _model(path: str, function: str):
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    from wcetfit.static.binary import load_model
    return load_model(path, [function], with_callees=False).function(function)


def test_the_limits_of_real_library_blocks():
    """zlib's compress2 calls deflate's functions: its calling blocks have no limit, its
    others (n + 1) × INSTRUCTION_NS; libc's memset variant with ``rep stosb`` has none on
    that block."""
    fn = _model(LIBZ, "compress2")
    columns = [(fn.name, b.address) for b in fn.blocks]
    got = block_ceiling_ticks({fn.name: fn}, columns, HZ)
    calling = {c.block for c in fn.calls}
    assert calling
    for (name, a), c in zip(columns, got):
        block = next(b for b in fn.blocks if b.address == a)
        if a in calling:
            assert c == math.inf
        else:
            assert c == pytest.approx((len(block.instructions) + 1) * INSTRUCTION_NS * 1e-9 * HZ)
    assert np.all(block_ceiling_ticks({fn.name: fn}, columns, None) == math.inf)


def test_a_rep_string_block_has_no_limit():
    """The function of libc that holds the first ``rep stos`` objdump finds (a memset):
    that block has no limit, the function's ordinary blocks have one."""
    import shutil

    from test_static_real import fde_of, objdump
    if not os.path.exists(LIBC) or shutil.which("objdump") is None:
        pytest.skip(f"needs {LIBC} and objdump")
    hit = next((a for a, m, o in objdump(LIBC) if m == "rep" and o.startswith("stos")), None)
    if hit is None:
        pytest.skip(f"no rep stos in {LIBC}")
    start, _ = fde_of(LIBC, hit)
    fn = _model(LIBC, hex(start))
    block = next(b for b in fn.blocks if b.address <= hit < b.end)
    columns = [(fn.name, b.address) for b in fn.blocks]
    got = dict(zip((a for _, a in columns), block_ceiling_ticks({fn.name: fn}, columns, HZ)))
    assert got[block.address] == math.inf
    assert any(math.isfinite(v) for v in got.values())
