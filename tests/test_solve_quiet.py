"""HiGHS's MIP solver prints debugging lines to file descriptor 1 on some problems (the
context-insensitive IPET of libbz2's compressor), which made ``wcetfit report --json -``
unparseable.  The solver runs with descriptor 1 pointed at /dev/null, and Python's own
output before and after it is untouched."""

from __future__ import annotations

import os

import numpy as np

from wcetfit.wcet.solve import Problem, Row, _milp, _stdout_silenced


def test_writes_to_descriptor_1_during_the_solve_are_dropped(capfd):
    print("before", flush=True)
    with _stdout_silenced():
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution\n")
    print("after", flush=True)
    assert capfd.readouterr().out == "before\nafter\n"


def test_a_solve_writes_nothing_to_stdout(capfd):
    # max 3x + 2y, x + y <= 4, x <= 3, integral
    p = Problem(np.array([3.0, 2.0]), np.zeros(2), np.array([3.0, np.inf]),
                [Row({0: 1.0, 1: 1.0}, -np.inf, 4.0, "sum")])
    res, scale = _milp(p, presolve=True)
    assert round(-res.fun * scale) == 11
    assert capfd.readouterr().out == ""
