"""The plain data of a WCET bound: loop bounds, count relations, errors and results.

Everything the report and the user read from a bound, with no solver in it: what a
loop bound says (:class:`LoopBound`), an observed count relation (:class:`CountRelation`),
the worst case of one function (:class:`IpetResult`) and of a root with its callees
(:class:`WcetResult`), and the typed errors of the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import FunctionModel, hexaddr

Z95 = 1.959963984540054          # two-sided 95% normal quantile
OVERHEAD = "overhead"            # the key of the overhead ε in a covariance index

SOURCE_FACT = "fact"             # from [loops] of the target file
SOURCE_OBSERVED = "observed"     # maximum over the measured inputs
SOURCE_GIVEN = "given"           # passed as a plain int by library code


class UnboundedLoopError(WcetError):
    """A reachable loop has no bound.  ``loops`` holds the "fn+0xOFF" names."""

    def __init__(self, message: str, loops: Sequence[str] = ()):
        super().__init__(message)
        self.loops = tuple(loops)


class RecursionBoundError(WcetError):
    """A cycle of the call graph without a recursion depth.  ``cycle`` names it."""

    def __init__(self, message: str, cycle: Sequence[str] = ()):
        super().__init__(message)
        self.cycle = tuple(cycle)


class InfeasibleError(WcetError):
    """No execution from entry to exit satisfies the constraints."""


# --- small helpers -----------------------------------------------------------------------

def loop_key(fn: FunctionModel, address: int) -> str:
    """How a user names a block: ``function+0xOFF`` (function-relative, as in OTAWA's F4)."""
    off = address - fn.address
    return f"{fn.name}+{off:#x}" if off >= 0 else f"{fn.name}-{-off:#x}"


def describe_block(fn: FunctionModel, address: int) -> str:
    return f"{loop_key(fn, address)} ({hexaddr(address)})"

@dataclass(frozen=True)
class CountRelation:
    """Σ coefficient·count(block) = rhs, per call of the function (integers, exact).

    Observed relations (:func:`observed_relations`) hold on every measured input without
    the CFG forcing them, e.g. an encoder that packs two samples per byte runs its
    output block exactly once every two iterations.  Like an observed loop bound they
    are facts about the inputs seen; the report lists them."""

    coefficients: tuple[tuple[int, int], ...]    # (block address, integer coefficient)
    rhs: int

    def text(self, fn: FunctionModel | None = None) -> str:
        def name(a: int) -> str:
            return f"N({hexaddr(a)})"
        lhs = [(c, name(a)) for a, c in self.coefficients if c > 0]
        rhs = [(-c, name(a)) for a, c in self.coefficients if c < 0]
        if self.rhs > 0:
            rhs.append((self.rhs, "1"))
        elif self.rhs < 0:
            lhs.append((-self.rhs, "1"))

        def side(terms: list[tuple[int, str]]) -> str:
            return " + ".join(t if c == 1 else f"{c}·{t}" for c, t in terms) or "0"
        return f"{side(lhs)} = {side(rhs)}"

@dataclass(frozen=True)
class LoopBound:
    """A bound on the back-edge traversals of one loop.

    ``per_entry``: at most this many back-edge traversals per entry into the loop
    (OTAWA's ``max``).  ``total``: at most this many per call of the function (OTAWA's
    ``total``); needed for observed bounds of inner loops, whose maximum per entry the
    block counts cannot show.  At least one of them is set.
    """

    per_entry: int | None = None
    total: int | None = None
    source: str = SOURCE_GIVEN
    note: str = ""
    witness: int | None = None          # observed: index of an input that reached the bound

    def __post_init__(self) -> None:
        if self.per_entry is None and self.total is None:
            raise ValueError("a LoopBound needs per_entry or total")
        for v in (self.per_entry, self.total):
            if v is not None and (isinstance(v, bool) or int(v) != v or v < 0):
                raise ValueError(f"a loop bound must be an integer >= 0, not {v!r}")

    def describe(self) -> str:
        parts = []
        if self.per_entry is not None:
            parts.append(f"≤ {self.per_entry} per entry")
        if self.total is not None:
            parts.append(f"≤ {self.total} per call")
        return f"{' and '.join(parts)} ({self.source})"


def as_loop_bound(value: int | LoopBound) -> LoopBound:
    if isinstance(value, LoopBound):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise WcetError(f"a loop bound must be an int or LoopBound, not {value!r}")
    return LoopBound(per_entry=int(value), source=SOURCE_GIVEN)

# --- results ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PathStep:
    block: int
    count: int
    cost_ticks: float          # per execution, the block's own cost (point estimate)
    callee_ticks: float        # per execution, the WCET of the callee(s) it calls
    ticks: float               # count · (cost + callee)


@dataclass(frozen=True)
class LoopOutcome:
    header: int
    name: str                  # "fn+0xOFF"
    bound: LoopBound
    entries: int               # entries into the loop on the worst-case path
    back_edges: int            # back-edge traversals on the worst-case path
    binding: bool              # a bound of this loop is tight at the optimum


@dataclass(frozen=True)
class CallOutcome:
    block: int
    instruction: int
    kind: str
    target: int | None
    target_name: str | None
    count: int                 # executions of the calling block on the worst-case path
    callee_wcet_ticks: float | None   # added per execution; None: not modelled
    note: str
    # most calls of this target per call of the function, over all its call sites
    # together (observed: the callee's most activations per measured call); None: no cap
    cap: int | None = None


@dataclass(frozen=True)
class BrokenInputs:
    """Measured inputs that break the constraints a bound keeps to (a user's fact they
    contradict): the worst path is one of the calls that keep them."""

    broken: int
    checked: int               # inputs checked within the time allowed
    total: int                 # measured inputs

    @property
    def text(self) -> str:
        """"467 of the 501 measured inputs", or "at least …" when not all were checked."""
        if self.checked >= self.total:
            return f"{self.broken:,} of the {self.total:,} measured inputs"
        return (f"at least {self.broken:,} of the {self.checked:,} measured inputs checked "
                f"(of {self.total:,})")


@dataclass(frozen=True)
class IpetResult:
    """The worst case of one function (callees' WCETs included at their call blocks).

    ``bound_ticks`` uses the point costs and includes ``entry_cost``;
    ``margin_ticks`` is z·(standard error of the worst path's predicted time), None when
    no covariance was given; ``upper_ticks`` = bound + margin.
    """

    function: str
    status: str                # "optimal" or "time_limit" (then bound_ticks is HiGHS's dual bound)
    bound_ticks: float
    margin_ticks: float | None
    entry_cost_ticks: float
    block_counts: Mapping[int, int]          # every block of the function, 0 included
    edge_flows: Mapping[tuple[int, int], int]   # CFG edges only
    exit_flows: Mapping[int, int]            # returns out of each exit block
    path: tuple[PathStep, ...]               # blocks with count > 0, in flow order
    loops: tuple[LoopOutcome, ...]
    calls: tuple[CallOutcome, ...]
    warnings: tuple[str, ...] = ()
    binding_envelopes: tuple[Any, ...] = ()  # observed envelopes tight on the path
    broken_inputs: BrokenInputs | None = None  # measured inputs breaking its constraints

    @property
    def upper_ticks(self) -> float:
        return self.bound_ticks + (self.margin_ticks or 0.0)

    @property
    def binding_loops(self) -> tuple[LoopOutcome, ...]:
        return tuple(lo for lo in self.loops if lo.binding)

    def counts_vector(self, block_addresses: Sequence[int]) -> np.ndarray:
        return np.array([self.block_counts.get(a, 0) for a in block_addresses], dtype=float)

@dataclass(frozen=True)
class WcetResult:
    """The bound of ``root`` with its callees inlined context-insensitively.

    ``functions``: each function's own IPET (callees' WCETs at their call blocks);
    for a recursive function, the one at the full recursion depth.
    ``inlined_counts``: the worst-case execution's count of every block of every function
    involved, (function, address) → count: the vector the margin is computed on.
    """

    root: str
    bound_ticks: float
    margin_ticks: float | None
    functions: Mapping[str, IpetResult]
    order: tuple[str, ...]                     # bottom-up: callees before callers
    inlined_counts: Mapping[tuple[str, int], float]
    recursion: Mapping[str, int]               # function → depth used
    warnings: tuple[str, ...] = ()
    relations: tuple[CountRelation, ...] = ()  # observed, not forced by the CFG, applied
    envelopes: tuple[Any, ...] = ()            # observed path envelopes binding the root's path
    # Relative excess of one undisturbed timed call over its predicted time, exceeded with
    # probability ≤ ``exceedance`` per call (see wcetfit.wcet.dispersion.call_dispersion): the fit predicts
    # the mean of a call, a WCET must cover single calls.
    dispersion: float = 0.0
    exceedance: float = 1e-6                   # the probability per call it is set for
    # the dispersion at other exceedances (wcetfit.wcet.dispersion.exceedance_curve):
    # (exceedance per call, excess) pairs, most probable first, the bound's own among them
    exceedance_curve: tuple[tuple[float, float], ...] = ()
    # the calls the dispersion's call and joint factors were taken from: below
    # wcetfit.wcet.dispersion.MIN_EXTRAPOLATED_CALLS the largest seen, not extrapolated
    dispersion_calls: int | None = None
    # its factors (wcetfit.wcet.dispersion.Dispersion): misfit, call, machine_speed
    dispersion_factors: Mapping[str, float] = field(default_factory=dict)
    # the call farthest above its input's mean: input (number), call_ticks, mean_ticks
    dispersion_driver: Mapping[str, float] = field(default_factory=dict)
    # the slowest call that is the function's own time (no interrupt), as timed: input
    # (number), ticks; the maximum observed execution time, which the bound stays above
    slowest_call: Mapping[str, float] = field(default_factory=dict)
    # the misfit factor taken from the inputs near the worst path, and how much more the
    # others missed (wcetfit.wcet.dispersion.MisfitScope.to_dict); empty when every input's
    misfit_scope: Mapping[str, float] = field(default_factory=dict)
    # how a call's excess grows with the input's length, the exponent the call factor was
    # taken to the worst path with (wcetfit.wcet.dispersion.call_growth: 0 = a fixed size
    # in ticks, 1 = a share of the call; None: the calls could not tell, taken as a share)
    call_growth: float | None = None
    # the machine's slowest speed the bound covers, as measured in the timing run (over its
    # fast end) and as the user declared it ([wcet] machine_speed; None: not declared):
    # dispersion_factors["machine_speed"] is the larger
    machine_speed_measured: float | None = None
    machine_speed_declared: float | None = None
    # function → blocks no input executed, left out of the worst path ([wcet] unreached =
    # "observed", the default; empty under "require"): the bound is for executions that
    # keep to the code the inputs ran
    unreached: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    unreached_policy: str = "observed"
    # the timed calls taken for interrupts and left out of the bound, against the interrupts
    # that can explain them (wcetfit.wcet.set_aside.SetAside.to_dict: calls, interrupted,
    # preempted, expected, rate_hz, beyond_rate, slowest_ticks, slowest_input, above_bound)
    set_aside: Mapping[str, Any] = field(default_factory=dict)

    @property
    def upper_ticks(self) -> float:
        """The bound: (point + margin) × (1 + dispersion)."""
        return (self.bound_ticks + (self.margin_ticks or 0.0)) * (1.0 + self.dispersion)

    def bound_at_exceedances(self) -> tuple[tuple[float, float], ...]:
        """(exceedance per call, bound in ticks) along the curve: the point and margin are
        the same at every level, only the dispersion moves."""
        base = self.bound_ticks + (self.margin_ticks or 0.0)
        return tuple((p, base * (1.0 + e)) for p, e in self.exceedance_curve)

    @property
    def dispersion_ticks(self) -> float:
        return (self.bound_ticks + (self.margin_ticks or 0.0)) * self.dispersion
