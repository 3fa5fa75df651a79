"""Inputs timed faster than any core runs their counted path are left out of the fit
(wcetfit.fit.too_fast).  libc's memchr, given a length beyond its buffer, was counted
through 4,593 iterations of its loop in one process and timed at 234–390 ticks in
another, whose bytes past the buffer differed; the fit priced the loop at 0.08 tick."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from wcetfit.fit.too_fast import (MAX_INSTRUCTIONS_PER_TICK, instruction_floor,
                                  too_fast_rows, too_fast_warning, without_rows)
from wcetfit.model import Block, Instruction


def _fn(blocks):
    return SimpleNamespace(blocks=tuple(
        Block(a, 4 * n, tuple(Instruction(a + 4 * k, 4, "add", "") for k in range(n)))
        for a, n in blocks))


def _system(counts, ticks):
    from wcetfit.fit.system import LinearSystem

    return LinearSystem("f", (("f", 0x10), ("f", 0x20)), np.arange(len(counts)),
                        np.array(counts, dtype=np.int64), np.array(ticks, dtype=float),
                        np.eye(2), 2.6e9)


def test_a_row_faster_than_its_instructions_allow_is_found_and_said():
    functions = {"f": _fn([(0x10, 3), (0x20, 8)])}           # entry 3, loop body 8
    system = _system([[1, 100], [1, 4_593], [1, 4_593]],
                     [[300, 320, np.nan], [234, 390, 260], [5_000, 4_900, 5_100]])
    floor = instruction_floor(system, functions)
    assert np.allclose(floor, np.array([803, 36_747, 36_747]) / MAX_INSTRUCTIONS_PER_TICK)
    drop = too_fast_rows(system, functions)
    # 803 instructions in 300 ticks is possible; 36,747 in 390 is not; the third is slow
    assert drop.tolist() == [False, True, False]
    kept = without_rows(system, drop)
    assert kept.indices.tolist() == [0, 2] and kept.counts.shape == (2, 2)
    note = too_fast_warning(system, functions, drop)
    assert note.startswith("1 input(s) left out of the fit: every timed call was faster")
    assert "input 1: 36,747 instructions counted, at least 1,531 ticks" in note
    assert "timed at 234–390 ticks" in note


def test_one_timed_call_above_the_floor_keeps_the_row():
    """Only a row whose every call is too fast is left out: one call that could have run
    the path (a slow one among disturbed fast ones) keeps it."""
    functions = {"f": _fn([(0x10, 3), (0x20, 8)])}
    system = _system([[1, 4_593]], [[234, 2_400, np.nan]])
    assert not too_fast_rows(system, functions).any()
