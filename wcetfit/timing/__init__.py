"""Stage 3, the timing run: TSC ticks of the original code, per call.

In: the target (binary, prototype, inputs).  Out: :class:`wcetfit.measurements.TimeSet`
(ticks per input and repeat, the fence method, the TSC frequency, the environment).
:mod:`~wcetfit.timing.tsc` knows the counter and the machine, :mod:`~wcetfit.timing.thunk`
compiles and caches a call harness for any prototype (:mod:`~wcetfit.timing.prototype`
parses the C declarations, :mod:`~wcetfit.timing.thunk_source` generates the C,
:mod:`~wcetfit.timing.harness` packs arguments and calls), :mod:`~wcetfit.timing.calls`
times one input's calls, :mod:`~wcetfit.timing.calibrate` validates the fence methods,
:mod:`~wcetfit.timing.run` runs the inputs in a child process, and
:mod:`~wcetfit.timing.speed` follows the machine's speed over a run from its ticks.
"""
