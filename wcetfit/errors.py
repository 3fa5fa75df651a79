"""Typed errors raised by the library.

Library code raises these (and logs); only :mod:`wcetfit.cli` turns them into one
``error: ...`` line and exit status 2.  Each subclass names the stage that failed so
that callers can react to a class of failure without parsing messages.
"""

from __future__ import annotations


class WcetfitError(Exception):
    """Base of every error wcetfit reports to its user."""


class BinaryError(WcetfitError):
    """The binary cannot be read or modelled (missing, not ELF, wrong architecture...)."""


class FunctionNotFound(BinaryError):
    """A function name or address does not name a function of the binary."""


class TargetError(WcetfitError):
    """The target file (wcetfit.toml) or its inputs module is invalid."""


class UnknownFunction(TargetError):
    """A fact of the target file ([loops], [flow], [recursion]) names a function that is
    not among the analysed ones; ``name`` is the name it gave."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


class InputsError(TargetError):
    """The inputs module raised or returned something unusable for one input."""


class NativeBuildError(WcetfitError):
    """A native part (per-prototype thunk, cffi module) could not be built."""


class RelocationError(WcetfitError):
    """The instrumented copy cannot be made safely; names the instruction at fault."""


class MeasurementError(WcetfitError):
    """A measurement run failed as a whole (not one input: those are InputFailure records)."""


class TimingSlotBusy(MeasurementError):
    """Another run holds the machine's timing slot and the command was told not to wait
    (--no-wait)."""


class SelfCheckError(MeasurementError):
    """A self-check failed (flow conservation, differential check): a wcetfit bug."""


class NothingMeasured(MeasurementError):
    """Every input failed (crash, hang): the run measured nothing; names the first failures."""


class TimedAnotherPath(MeasurementError):
    """The timed calls ran another path than the counted one (their return value changed:
    state the restored arguments do not reach); nothing ranks or bounds by those times."""


class StoreError(WcetfitError):
    """The on-disk store is unreadable, from a future version, or mixes incompatible data."""


class FitError(WcetfitError):
    """The linear system cannot be fitted (no rows, shapes disagree...)."""


class TooLarge(WcetfitError):
    """A step would need more memory than the machine has to give (said before it is
    taken, not found by the kernel's out-of-memory killer)."""


class WcetError(WcetfitError):
    """The WCET bound cannot be computed (unbounded loop, recursion without bound...)."""
