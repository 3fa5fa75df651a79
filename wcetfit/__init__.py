"""wcetfit: measurement-based WCET estimation for x86-64 Linux binaries.

The pipeline, one subpackage per stage; imports run down it, never back up:

* :mod:`wcetfit.static` — the binary → its static model (blocks, edges, loops, calls,
  co-execution classes), plain data of :mod:`wcetfit.model`;
* :mod:`wcetfit.count` — the instrumented copy and the count run → block counts per input;
* :mod:`wcetfit.timing` — fenced TSC readings of the original code → ticks per call;
* :mod:`wcetfit.fit` — counts and ticks → per-block costs with intervals;
* :mod:`wcetfit.wcet` — costs, CFG and loop bounds → the WCET bound (IPET);
* :mod:`wcetfit.split` — timing probes at block boundaries → more rows, separated blocks;
* :mod:`wcetfit.report` and :mod:`wcetfit.cli` — what the user reads and types.

Shared by the stages: :mod:`wcetfit.model` (the static model's plain data),
:mod:`wcetfit.measurements` (counts and ticks as plain data, in the store),
:mod:`wcetfit.target`, :mod:`wcetfit.store`, :mod:`wcetfit.loader`,
:mod:`wcetfit.isolate` (child processes), :mod:`wcetfit.errors`;
:mod:`wcetfit.pipeline` composes the stages.
"""

__version__ = "0.1.0"
