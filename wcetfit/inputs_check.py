"""generate() tried on a target's first inputs, in this process, before anything depends
on it: a new target's inputs.py (wcetfit.scaffold.create) and ``--fresh``, which discards
what the store holds (wcetfit.pipeline.open_session) — an inputs.py that raises must not
cost the user the measurements they had."""

from __future__ import annotations

from wcetfit.target import Target

# How many inputs are built: the first few exercise generate()'s common branches; the
# measuring runs report any later input that fails, with its number.
CHECKED_INPUTS = 10


def check_generate(target: Target, count: int = CHECKED_INPUTS) -> None:
    """Build inputs 0..count-1 of every function of ``target`` and pack them as the
    harness would pass them.  Raises the target's errors (InputsError: generate() raised
    or returned something that is not the arguments; TargetError: the prototype does
    not parse; MeasurementError: arguments that do not fit the prototype)."""
    from wcetfit.measurements import prototype_name
    from wcetfit.target import generate_input, load_inputs_module
    from wcetfit.timing.thunk import build_harness

    harness = build_harness(target.prototype, target.cdef)
    generate = load_inputs_module(target)
    for function in target.functions:
        proto = prototype_name(harness, function)
        for i in range(count):
            harness.pack(proto, generate_input(generate, target, harness.ffi, function, i))
