"""Stage 4, the fit: per-block costs from counts and ticks.

In: a function's static model, its :class:`~wcetfit.measurements.CountSet` and
:class:`~wcetfit.measurements.TimeSet`.  Out: :class:`~wcetfit.fit.result.FitResult` —
estimable costs with 95% intervals, groups of blocks known only in combination, the
overhead ε, the solution used to predict, held-out prediction errors, warnings.

:mod:`~wcetfit.fit.system` builds the linear system of one measured function;
:func:`~wcetfit.fit.solve.fit_function` composes the fit from :mod:`~wcetfit.fit.rows`
(rows, design columns, normal matrices), :mod:`~wcetfit.fit.iteration` (outlier rejection
and row weights; the statistics in :mod:`~wcetfit.fit.robust`),
:mod:`~wcetfit.fit.estimability` (what the system determines),
:mod:`~wcetfit.fit.intervals` (covariance: sandwich HC3/HC1, bootstrap),
:mod:`~wcetfit.fit.solution` (non-negative and particular solutions),
:mod:`~wcetfit.fit.groups` and :mod:`~wcetfit.fit.wording` (groups, combinations and their
words), :mod:`~wcetfit.fit.validation` (k-fold held-out errors) and
:mod:`~wcetfit.fit.checks` (implausible figures as :class:`~wcetfit.fit.result.FitWarning`);
options and results are plain data in :mod:`~wcetfit.fit.result`.
"""
