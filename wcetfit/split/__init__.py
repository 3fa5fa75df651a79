"""Stage 6, block splitting: timing probes at block boundaries, round after round.

In: a fitted function whose blocks whole calls cannot separate, the inputs' block traces.
Out: rounds of probe measurements and joint fits (:mod:`~wcetfit.split.rounds`, the pure
part; :mod:`~wcetfit.split.workflow` on a target).  :mod:`~wcetfit.split.probe` installs a
probe on the original code, :mod:`~wcetfit.split.probe_run` measures a round.
"""
