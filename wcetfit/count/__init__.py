"""Stage 2, the count run: how often each block runs, per input, at native speed.

In: the static model of the measured function and the binary's own functions it calls, the
target's inputs.  Out: :class:`wcetfit.measurements.CountSet` (block counts per input, and
optionally each input's block trace).  :mod:`~wcetfit.count.x86enc` encodes the few
instructions the copy needs, :mod:`~wcetfit.count.relocate` plans the relocated copy with a
counter at every block, :mod:`~wcetfit.count.instrumented` builds it in memory and checks
each call (flow conservation, same results as the original), :mod:`~wcetfit.count.run`
runs the inputs in a child process and saves as it goes.
"""
