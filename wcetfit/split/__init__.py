"""Stage 6, block splitting: timing probes at block boundaries, round after round.

In: a fitted function whose blocks whole calls cannot separate, the inputs' block traces.
Out: rounds of probe measurements and joint fits.  The pure part: :mod:`~wcetfit.split.configs`
(probe configurations and their count rows, cut from the traces), :mod:`~wcetfit.split.rank`
(exact rank over GF(p)), :mod:`~wcetfit.split.planner` (which probes to measure next),
:mod:`~wcetfit.split.joint` (whole-call and probe rows in one system),
:mod:`~wcetfit.split.rounds` (rounds in the store) and :mod:`~wcetfit.split.checks`
(comparing fits).  On the original code: :mod:`~wcetfit.split.placement` decides which
instructions a probe displaces, :mod:`~wcetfit.split.stubs` assembles the wrapper and stubs,
:mod:`~wcetfit.split.install` patches them in and times; :mod:`~wcetfit.split.probe_run`
measures a round in a child process, :mod:`~wcetfit.split.workflow` runs it all on a target.
"""
