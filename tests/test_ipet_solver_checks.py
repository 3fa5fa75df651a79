"""The IPET solver's run and its answer's checks (wcetfit.wcet.solve).

* HiGHS's MIP solver prints debugging lines to file descriptor 1 on some problems (the
  context-insensitive IPET of libbz2's compressor), which made ``wcetfit report --json -``
  unparseable: the solver runs with descriptor 1 pointed at /dev/null.
* An optimum below a measured input's value is solved again from that value."""

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


def test_an_optimum_below_a_measured_point_is_solved_again_from_that_point(monkeypatch):
    """HiGHS called a point optimal 2e-4 below a measured input's value on libbz2's
    compressor, with presolve and without; the bound was refused.  The solve is tried once
    more with the objective held at least at the best measured point's value."""
    from wcetfit.wcet import solve as S

    # max 3x + 2y, x + y <= 4, x <= 3: optimum 11 at (3, 1)
    p = Problem(np.array([3.0, 2.0]), np.zeros(2), np.array([3.0, np.inf]),
                [Row({0: 1.0, 1: 1.0}, -np.inf, 4.0, "sum")])
    real = S._milp
    calls: list[int] = []

    def flaky(q, *, presolve, integral=True, ub=None, extra=(), skip=None, time_limit=None):
        calls.append(len(extra))
        res, scale = real(q, presolve=presolve, integral=integral, ub=ub, extra=extra,
                          skip=skip, time_limit=time_limit)
        if not extra:                  # a wrong "optimal": (2, 2), value 10
            res.x = np.array([2.0, 2.0])
        return res, scale

    monkeypatch.setattr(S, "_milp", flaky)
    sol = S.solve(p, values_to_beat=[("input 9", 11.0)])
    assert calls == [0, 0, 1]
    assert sol.status == "optimal" and float(p.cost @ sol.flow) == 11.0
    assert "objective held at the best measured input" in sol.attempts[-1]
    # without a point to beat, the wrong answer is not detected: nothing more is tried
    calls.clear()
    S.solve(p)
    assert calls == [0]
