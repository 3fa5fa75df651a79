"""Stage 4, the fit: per-block costs from counts and ticks.

In: a function's static model, its :class:`~wcetfit.measurements.CountSet` and
:class:`~wcetfit.measurements.TimeSet`.  Out: :class:`~wcetfit.fit.solve.FitResult` —
estimable costs with 95% intervals, groups of blocks known only in combination, the
overhead ε, held-out prediction errors.  :mod:`~wcetfit.fit.system` builds the linear
system, :mod:`~wcetfit.fit.estimability` decides what it determines,
:mod:`~wcetfit.fit.robust` gives the per-input statistics and outlier rules.
"""
