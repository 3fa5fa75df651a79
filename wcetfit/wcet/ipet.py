"""WCET bound by implicit path enumeration (IPET), on plain data.

The bound of one function is an integer linear program over the flows of its CFG's edges:

    maximize   Σ_b cost_b · x_b            x_b = executions of block b in one call
    subject to x_b = Σ in-flows of b = Σ out-flows of b        (flow conservation)
               the virtual edge into the entry carries exactly 1 (one call)
               exits flow into a virtual sink
               per loop:  Σ back-edge flows ≤ N · Σ entry-edge flows   (per-entry bound N)
                          Σ back-edge flows ≤ T                       (total bound T per call)

solved with ``scipy.optimize.milp`` (HiGHS), with a zero relative MIP gap so that the
bound is the optimum, not a near-optimal path.

**What a loop bound counts.**  N is the largest number of times the loop's back edges
are taken per entry into the loop; the header then runs at most N+1 times per entry.
This is the convention of OTAWA's IPET (its ``max`` bound constrains back edges against
entry edges) and it is the safe reading of a source-level "at most N iterations": a
test-at-top loop of N iterations takes its back edge N times, a rotated (test-at-bottom)
loop N−1 times, so N covers both compiler shapes.  Observed bounds
(:func:`observed_loop_bounds`) count the same quantity: back-edge traversals.

**Invariance on non-estimable directions.**  Every feasible count vector x of the program
above is a conservative flow, so it lies in the CFG's structural count space (the span of
all count vectors any execution can produce).  Adding to the costs any vector orthogonal
to that space leaves Σ cost·x unchanged for every feasible x, hence the bound too.  This
is what makes the bound well defined although single block costs are not: the fit's
``solution_ticks`` is one particular solution, and any other solution differs from it by
such a vector *in the directions the inputs exercised*.  (Directions of the structural
space the inputs never exercised — blocks never executed, or groups the inputs did not
separate — are not determined by the data; the report says so: see
:func:`count_space_residual`.)  tests/test_wcet.py checks the invariance.

**Confidence margin.**  The bound is computed with the point costs (the particular
solution), then widened by ``z · sqrt(x*ᵀ Σ x*)`` where x* is the worst-case count vector
(callees inlined) and Σ the covariance of the fitted solution: the standard error of the
predicted time of the worst path.  This is well defined because x* lies in the count space.
It is the upper confidence bound of the worst path found with the point costs, not the
maximum over all paths of their upper bounds (a non-convex problem); with costs whose
intervals are small against the differences between paths they coincide.

**Interprocedural.**  :func:`wcet_bound` computes each of the binary's own callees'
bounds by its own IPET, bottom-up over the call graph, context-insensitively (one WCET
per function, whatever the caller), and adds it per execution of each calling block.
Recursion (a cycle of the call graph) needs a depth bound from the user.
Calls to imported functions are flagged: their time varies with their arguments and is
not modelled (the fitted cost of the calling block contains their mean over the inputs).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import TargetError, WcetError
from wcetfit.model import CALL_IMPORTED, CALL_INDIRECT, CALL_INTERNAL, FunctionModel, hexaddr

log = logging.getLogger(__name__)

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


def observed_relations(counts: np.ndarray, addresses: Sequence[int],
                       max_relations: int = 64) -> tuple[CountRelation, ...]:
    """Exact linear relations Σ c·count = r that every row of ``counts`` satisfies.

    The IPET maximises over all count vectors the CFG allows; the fit only knows costs on
    the span of the count vectors it saw.  A worst case outside that span has no
    measured cost (the non-estimable directions make it arbitrary), so the IPET is kept
    to the observed affine span: every integer relation among the executed blocks'
    counts and the constant 1 (the call itself).  Relations the CFG already forces are
    among them and cost nothing.  Blocks no input executed are left out, so their
    relation "count = 0" does not forbid them.

    Exact arithmetic: the relations are the null space of an independent subset of the
    rows, computed with rationals, scaled to coprime integers and checked on
    every row; a relation that fails the check (a numerically chosen row set gone wrong)
    is dropped."""
    X = np.asarray(counts, dtype=np.int64)
    executed = [j for j in range(X.shape[1]) if X[:, j].any()]
    if not executed or X.shape[0] == 0:
        return ()
    A = np.hstack([X[:, executed], np.ones((X.shape[0], 1), dtype=np.int64)])
    # distinct rows, then an independent subset by pivoted QR on their transpose
    uniq = np.unique(A, axis=0)
    from scipy.linalg import qr
    _, R, piv = qr(uniq.T.astype(float), mode="economic", pivoting=True)
    diag = np.abs(np.diag(R)) if R.size else np.zeros(0)
    tol = diag.max(initial=0.0) * max(uniq.shape) * np.finfo(float).eps * 10
    rank = int((diag > tol).sum())
    rows = uniq[np.sort(piv[:rank])]
    out = []
    for ints in _integer_null_space(rows.tolist())[:max_relations]:
        coef = np.array(ints[:-1], dtype=np.int64)
        if np.any(A[:, :-1] @ coef + ints[-1] != 0):
            log.debug("dropping a count relation that fails on some rows")
            continue
        pairs = tuple((int(addresses[executed[j]]), int(c)) for j, c in enumerate(coef) if c)
        if pairs:
            out.append(CountRelation(pairs, int(-ints[-1])))
    return tuple(out)



def _integer_null_space(rows: list[list[int]]) -> list[list[int]]:
    """Basis of {v : rows·v = 0} as coprime integer vectors (exact, by fractions).

    Gauss–Jordan elimination on the (few, independent) rows; one basis vector per free
    column.  The matrices here are rank × (blocks + 1), a few dozen at most."""
    from fractions import Fraction

    m = [[Fraction(x) for x in r] for r in rows]
    ncol = len(m[0]) if m else 0
    pivots: list[int] = []
    r = 0
    for c in range(ncol):
        p = next((i for i in range(r, len(m)) if m[i][c] != 0), None)
        if p is None:
            continue
        m[r], m[p] = m[p], m[r]
        inv = 1 / m[r][c]
        m[r] = [x * inv for x in m[r]]
        for i in range(len(m)):
            if i != r and m[i][c] != 0:
                f = m[i][c]
                m[i] = [a - f * b for a, b in zip(m[i], m[r])]
        pivots.append(c)
        r += 1
        if r == len(m):
            break
    basis = []
    for free in (c for c in range(ncol) if c not in pivots):
        v = [Fraction(0)] * ncol
        v[free] = Fraction(1)
        for i, pc in enumerate(pivots):
            v[pc] = -m[i][free]
        den = 1
        for x in v:
            den = den * x.denominator // math.gcd(den, x.denominator)
        ints = [int(x * den) for x in v]
        g = 0
        for x in ints:
            g = math.gcd(g, abs(x))
        basis.append([x // g for x in ints] if g > 1 else ints)
    return basis

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


# --- the flow graph: variables of the linear programs ---------------------------------------

SOURCE = "source"   # the virtual block calling the function
SINK = "sink"       # the virtual block every exit returns to


class _Flow:
    """Edge variables of a function: its CFG edges, one source edge into the entry, and one
    sink edge out of every exit (and out of every dead end, which must be a way out)."""

    def __init__(self, fn: FunctionModel):
        self.fn = fn
        addrs = fn.block_addresses
        self.blocks = addrs
        self.index = {a: i for i, a in enumerate(addrs)}
        if fn.entry not in self.index:
            raise WcetError(f"{fn.name}: entry {hexaddr(fn.entry)} is not one of its blocks")
        seen: set[tuple[int, int]] = set()
        edges: list[tuple[Any, Any]] = []
        for s, d in fn.edges:
            if s not in self.index or d not in self.index:
                bad = s if s not in self.index else d
                raise WcetError(f"{fn.name}: edge {hexaddr(s)}->{hexaddr(d)} names "
                                f"{hexaddr(bad)}, which is not a block of the function")
            if (s, d) not in seen:
                seen.add((s, d))
                edges.append((s, d))
        self.n_cfg = len(edges)
        self.source_var = len(edges)
        edges.append((SOURCE, fn.entry))
        has_succ = {s for s, _ in fn.edges}
        self.dead_ends = tuple(a for a in addrs if a not in has_succ and a not in fn.exits)
        if self.dead_ends:
            # A block with no successor that the model does not call an exit (a call that
            # never returns, an unresolved jump): flow must be able to leave it, or the
            # program would silently forbid the paths through it.
            log.info("%s: blocks without successors treated as exits: %s", fn.name,
                     ", ".join(hexaddr(a) for a in self.dead_ends))
        for lp in fn.loops:
            if lp.header not in self.index:
                raise WcetError(f"{fn.name}: loop header {hexaddr(lp.header)} is not one of "
                                f"its blocks")
        for a in tuple(fn.exits) + self.dead_ends:
            if a not in self.index:
                raise WcetError(f"{fn.name}: exit {hexaddr(a)} is not one of its blocks")
            edges.append((a, SINK))
        self.edges = edges
        self.var = {e: i for i, e in enumerate(edges)}
        self.ins: dict[int, list[int]] = {a: [] for a in addrs}
        self.outs: dict[int, list[int]] = {a: [] for a in addrs}
        for i, (s, d) in enumerate(edges):
            if d != SINK:
                self.ins[d].append(i)
            if s != SOURCE:
                self.outs[s].append(i)
        self.succ: dict[int, list[int]] = {a: [] for a in addrs}
        for s, d in edges[: self.n_cfg]:
            self.succ[s].append(d)

    def reachable(self, forbidden: Iterable[int] = ()) -> set[int]:
        banned = set(forbidden)
        if self.fn.entry in banned:
            return set()
        seen = {self.fn.entry}
        stack = [self.fn.entry]
        while stack:
            b = stack.pop()
            for d in self.succ[b]:
                if d not in seen and d not in banned:
                    seen.add(d)
                    stack.append(d)
        return seen

    def loop_vars(self, lp) -> tuple[list[int], list[int]]:
        """(back-edge variables, entry-edge variables) of a loop.  Entry edges are the
        header's in-edges from outside the body, plus the source edge when the header is
        the function's entry."""
        body = set(lp.body)
        back, entry = [], []
        for i in self.ins[lp.header]:
            s, _ = self.edges[i]
            if s == SOURCE or s not in body:
                entry.append(i)
            else:
                back.append(i)
        if not getattr(lp, "reducible", True):
            # An irreducible loop is also entered at blocks other than its header: every
            # edge from outside the body into it is an entry (else the bound would forbid
            # real paths and be unsafe).
            entry = [i for a in body for i in self.ins.get(a, ())
                     if self.edges[i][0] == SOURCE or self.edges[i][0] not in body]
        return back, entry

    def conservation_matrix(self) -> np.ndarray:
        """Rows: blocks; Σ in − Σ out = 0."""
        A = np.zeros((len(self.blocks), len(self.edges)))
        for a, r in self.index.items():
            for i in self.ins[a]:
                A[r, i] += 1.0
            for i in self.outs[a]:
                A[r, i] -= 1.0
        return A

    def topo_order(self, blocks: set[int]) -> list[int]:
        """Blocks in an order along the flow: topological after removing back edges
        (Kahn); stable by address among ties."""
        back = {e for lp in self.fn.loops for e in lp.back_edges}
        indeg = {b: 0 for b in blocks}
        for s, d in self.edges[: self.n_cfg]:
            if s in blocks and d in blocks and (s, d) not in back:
                indeg[d] += 1
        ready = sorted(b for b, k in indeg.items() if k == 0)
        order: list[int] = []
        while ready:
            b = ready.pop(0)
            order.append(b)
            for d in sorted(self.succ[b]):
                if d in blocks and (b, d) not in back:
                    indeg[d] -= 1
                    if indeg[d] == 0:
                        ready.append(d)
            ready.sort()
        rest = sorted(blocks - set(order))   # only on cycles that are not natural loops
        return order + rest


def _irreducible_blocks(flow: _Flow, blocks: set[int]) -> list[int]:
    """Blocks on cycles that use no natural loop's back edge (irreducible flow)."""
    import networkx as nx

    back = {e for lp in flow.fn.loops for e in lp.back_edges}
    g = nx.DiGraph()
    g.add_nodes_from(blocks)
    g.add_edges_from((s, d) for s in blocks for d in flow.succ[s]
                     if d in blocks and (s, d) not in back)
    out: list[int] = []
    for comp in nx.strongly_connected_components(g):
        if len(comp) > 1 or any(g.has_edge(a, a) for a in comp):
            out.extend(comp)
    return sorted(out)


def _cycle_outside_loops(flow: _Flow, blocks: set[int]) -> list[int] | None:
    """A cycle among ``blocks`` that uses no back edge of a natural loop, if any.  Loop
    bounds only constrain natural loops; such a cycle (irreducible flow) would be
    unbounded."""
    back = {e for lp in flow.fn.loops for e in lp.back_edges}
    color: dict[int, int] = {}
    for start in sorted(blocks):
        if start in color:
            continue
        stack: list[tuple[int, Iterable[int]]] = [(start, iter(flow.succ[start]))]
        color[start] = 1
        path = [start]
        while stack:
            node, it = stack[-1]
            advanced = False
            for d in it:
                if d not in blocks or (node, d) in back:
                    continue
                if color.get(d) == 1:
                    return path[path.index(d):]
                if d not in color:
                    color[d] = 1
                    stack.append((d, iter(flow.succ[d])))
                    path.append(d)
                    advanced = True
                    break
            if not advanced:
                color[node] = 2
                stack.pop()
                path.pop()
    return None


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

    @property
    def upper_ticks(self) -> float:
        return self.bound_ticks + (self.margin_ticks or 0.0)

    @property
    def binding_loops(self) -> tuple[LoopOutcome, ...]:
        return tuple(lo for lo in self.loops if lo.binding)

    def counts_vector(self, block_addresses: Sequence[int]) -> np.ndarray:
        return np.array([self.block_counts.get(a, 0) for a in block_addresses], dtype=float)


# --- IPET of one function ------------------------------------------------------------------

def ipet(fn: FunctionModel, block_costs: Mapping[int, float],
         loop_bounds: Mapping[int, int | LoopBound], *,
         callee_wcet: Mapping[int, float] = {},
         entry_cost: float = 0.0,
         cov: np.ndarray | None = None,
         z: float = Z95,
         forbidden_blocks: Iterable[int] = (),
         relations: Sequence[CountRelation] = (),
         block_bounds: Mapping[int, int] = {},
         total_bounds: Mapping[int, int] = {},
         entries: int = 1,
         envelopes: Sequence[Any] = (),
         time_limit: float | None = 60.0) -> IpetResult:
    """Maximize Σ cost·count over the executions of ``fn`` allowed by its CFG and loop bounds.

    ``block_costs``: ticks per execution of each block (the fit's ``solution_ticks``).
    ``loop_bounds``: header → int (back-edge traversals per entry) or :class:`LoopBound`.
    ``callee_wcet``: call-site target address → the callee's WCET in ticks, added per
    execution of each block that calls it (internal calls, tail calls included).
    ``entry_cost``: added once (the overhead ε of a measured call, for the root function).
    ``cov``: covariance of ``block_costs`` in ``fn.block_addresses`` order, for the margin.
    ``forbidden_blocks``: blocks that must not execute (used for recursion depth 1).
    ``relations``: linear count relations every execution must satisfy, beyond the CFG's
    (see :func:`observed_relations`).
    ``block_bounds``: most executions per call of single blocks; used only for blocks in
    cycles that are not natural loops (irreducible flow, which loop bounds cannot reach).
    ``total_bounds``: most executions of single blocks, applied to any block.
    ``envelopes``: observed path envelopes (:class:`wcetfit.wcet.envelope.CountEnvelope`),
    Σ count(blocks) ≤ intercept + slope·count(header).
    ``entries``: most entries into the function (default 1, exactly one): with more, the
    counts are totals over up to that many activations (each activation obeys the CFG and
    the loop bounds per entry, so their sum does too), at least one.

    Raises :class:`UnboundedLoopError` naming every reachable loop without a bound, and
    :class:`InfeasibleError` when no path from entry to an exit satisfies the bounds.
    """
    flow = _Flow(fn)
    forbidden = set(forbidden_blocks)
    reach = flow.reachable(forbidden)
    if not reach:
        raise InfeasibleError(f"{fn.name}: its entry {describe_block(fn, fn.entry)} "
                              f"is forbidden: no execution is possible")

    # Costs per block: own cost plus callee WCETs.
    missing = sorted(a for a in reach if a not in block_costs)
    if missing:
        raise WcetError(f"{fn.name}: no cost for {len(missing)} reachable block(s): "
                        + ", ".join(describe_block(fn, a) for a in missing[:5])
                        + (" ..." if len(missing) > 5 else ""))
    own = {a: float(block_costs.get(a, 0.0)) for a in flow.blocks}
    bad = [a for a in reach if not math.isfinite(own[a])]
    if bad:
        raise WcetError(f"{fn.name}: cost of {describe_block(fn, bad[0])} is not a finite "
                        f"number ({own[bad[0]]!r})")
    callee_per_exec = {a: 0.0 for a in flow.blocks}
    call_notes: list[tuple[Any, float | None, str]] = []
    warnings: list[str] = []
    for c in fn.calls:
        if c.kind == CALL_INTERNAL and c.target is not None and c.target in callee_wcet:
            w = float(callee_wcet[c.target])
            callee_per_exec[c.block] = callee_per_exec.get(c.block, 0.0) + w
            call_notes.append((c, w, "callee WCET added per execution"))
        elif c.kind == CALL_INTERNAL:
            call_notes.append((c, None, "no WCET given for this callee: not included"))
            if c.block in reach:
                warnings.append(f"call at {describe_block(fn, c.block)} to "
                                f"{c.target_name or hexaddr(c.target or 0)}: no callee WCET "
                                f"given, its time is not in the bound")
        elif c.kind == CALL_IMPORTED:
            call_notes.append((c, None, "imported: time varies with the arguments and is not "
                                        "modelled (the block's fitted cost holds its mean)"))
        elif c.kind == CALL_INDIRECT:
            call_notes.append((c, None, "indirect: target unknown, callee time not modelled"))
        else:
            call_notes.append((c, None, f"unknown call kind {c.kind!r}: not modelled"))
    total_cost = {a: own[a] + callee_per_exec[a] for a in flow.blocks}

    # Loops: every reachable loop needs a bound; a cycle outside natural loops cannot have one.
    cyc = _cycle_outside_loops(flow, reach)
    irreducible: list[int] = []
    if cyc is not None and block_bounds:
        irreducible = _irreducible_blocks(flow, reach)
        if all(a in block_bounds for a in irreducible):
            warnings.append(
                f"{fn.name}: irreducible control flow ({len(irreducible)} blocks in cycles that "
                f"are not natural loops, e.g. {' -> '.join(loop_key(fn, a) for a in cyc)}): "
                f"their counts are bounded by the largest seen on any input (observed)")
            cyc = None
    if cyc is not None:
        raise UnboundedLoopError(
            f"{fn.name}: the cycle {' -> '.join(loop_key(fn, a) for a in cyc)} is not a "
            f"natural loop of the model (irreducible control flow): no loop bound can apply "
            f"to it", [loop_key(fn, cyc[0])])
    headers = {lp.header for lp in fn.loops}
    unknown = [h for h in loop_bounds if h not in headers]
    if unknown:
        raise WcetError(f"{fn.name}: a loop bound names {hexaddr(unknown[0])}, which is not a "
                        f"loop header of the function"
                        + (f" (headers: {', '.join(describe_block(fn, h) for h in sorted(headers))})"
                           if headers else " (it has no loops)"))
    bounds = {h: as_loop_bound(v) for h, v in loop_bounds.items()}
    unbounded = [lp.header for lp in fn.loops if lp.header in reach and lp.header not in bounds]
    if unbounded:
        names = [loop_key(fn, h) for h in unbounded]
        raise UnboundedLoopError(
            f"{fn.name}: no bound for loop(s) "
            + ", ".join(describe_block(fn, h) for h in unbounded)
            + f": add e.g. \"{names[0]}\" = N under [loops] in wcetfit.toml (N = most "
              f"back-edge traversals per entry into the loop), or inputs that execute it",
            names)

    # The integer program.
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    nv = len(flow.edges)
    c = np.zeros(nv)
    for i, (s, _) in enumerate(flow.edges):
        if s != SOURCE:
            c[i] = -total_cost[s]          # milp minimizes; x_s = Σ out-flows of s
    lb = np.zeros(nv)
    ub = np.full(nv, np.inf)
    if entries < 1:
        raise WcetError(f"{fn.name}: entries must be >= 1, got {entries}")
    lb[flow.source_var], ub[flow.source_var] = 1.0, float(entries)
    for i, (s, d) in enumerate(flow.edges):
        # Flow cannot touch unreachable or forbidden blocks: this also rules out
        # circulations in parts of the CFG that no execution reaches.
        if (s != SOURCE and s not in reach) or (d != SINK and d not in reach):
            ub[i] = 0.0
    rows: list[tuple[dict[int, float], float, float]] = []
    for a in flow.blocks:
        coef: dict[int, float] = {}
        for i in flow.ins[a]:
            coef[i] = coef.get(i, 0.0) + 1.0
        for i in flow.outs[a]:
            coef[i] = coef.get(i, 0.0) - 1.0
        rows.append((coef, 0.0, 0.0))
    loop_rows: list[tuple[int, str, int]] = []     # (header, kind, row index)
    loop_vars: dict[int, tuple[list[int], list[int]]] = {}
    for lp in fn.loops:
        back, entry = flow.loop_vars(lp)
        loop_vars[lp.header] = (back, entry)
        b = bounds.get(lp.header)
        if b is None:
            continue
        if b.per_entry is not None:
            coef = {i: 1.0 for i in back}
            for i in entry:
                coef[i] = coef.get(i, 0.0) - float(b.per_entry)
            loop_rows.append((lp.header, "per_entry", len(rows)))
            rows.append((coef, -np.inf, 0.0))
        if b.total is not None:
            loop_rows.append((lp.header, "total", len(rows)))
            rows.append(({i: 1.0 for i in back}, -np.inf, float(b.total)))
    for a in irreducible:
        rows.append(({i: 1.0 for i in flow.outs[a]}, -np.inf, float(block_bounds[a])))
    if irreducible:
        # and the work of each irreducible region together: no more block executions in
        # it than the most any input made (each block at its own maximum at once would
        # combine different inputs' worst parts)
        import networkx as nx
        part = set(irreducible)
        g = nx.DiGraph([(s, d) for s in part for d in flow.succ[s] if d in part])
        for comp in nx.strongly_connected_components(g):
            total = block_bounds.get(("region", min(comp)))
            if total is not None:
                rows.append(({i: 1.0 for a in comp for i in flow.outs[a]}, -np.inf,
                             float(total)))
    for a, total in total_bounds.items():
        if a in flow.outs:
            rows.append(({i: 1.0 for i in flow.outs[a]}, -np.inf, float(total)))
    for env in envelopes:
        coef = {}
        for a in env.blocks:
            for i in flow.outs.get(a, ()):
                coef[i] = coef.get(i, 0.0) + 1.0
        for i in flow.outs.get(env.header, ()):
            coef[i] = coef.get(i, 0.0) - float(env.slope)
        rows.append((coef, -np.inf, float(env.intercept)))
    for rel in relations:
        # Σ coef·count = rhs, a block's count being the sum of its out-flows.
        coef = {}
        for a, v in rel.coefficients:
            for i in flow.outs.get(a, ()):
                coef[i] = coef.get(i, 0.0) + float(v)
        rows.append((coef, float(rel.rhs), float(rel.rhs)))
    A = lil_matrix((len(rows), nv))
    rlo = np.empty(len(rows))
    rhi = np.empty(len(rows))
    for r, (coef, lo, hi) in enumerate(rows):
        for i, v in coef.items():
            A[r, i] = v
        rlo[r], rhi[r] = lo, hi
    options: dict[str, Any] = {"mip_rel_gap": 0.0, "presolve": True}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    res = milp(c, integrality=np.ones(nv), bounds=Bounds(lb, ub),
               constraints=LinearConstraint(A.tocsr(), rlo, rhi), options=options)

    if res.x is None:
        if res.status == 2 or "infeasible" in str(res.message).lower():
            raise InfeasibleError(_infeasible_reason(fn, flow, reach, forbidden))
        if res.status == 3 or "unbounded" in str(res.message).lower():
            # Should not happen after the checks above; say what we know.
            raise UnboundedLoopError(f"{fn.name}: the IPET problem is unbounded "
                                     f"({res.message})")
        raise WcetError(f"{fn.name}: the IPET solver failed: {res.message}")
    f = np.rint(res.x).astype(np.int64)
    status = "optimal" if res.status == 0 else "time_limit"

    counts = {a: int(sum(f[i] for i in flow.outs[a])) for a in flow.blocks}
    bound = float(entry_cost) + sum(total_cost[a] * n for a, n in counts.items() if n)
    if status != "optimal":
        dual = getattr(res, "mip_dual_bound", None)
        if dual is not None and math.isfinite(dual):
            # The dual bound is a valid upper bound even when the search stopped early.
            bound = max(bound, float(entry_cost) - float(dual))
        warnings.append(f"{fn.name}: the IPET search hit its time limit; the bound is the "
                        f"solver's proven upper bound ({res.message})")

    margin = None
    if cov is not None:
        cov = np.asarray(cov, dtype=float)
        n = len(flow.blocks)
        if cov.shape != (n, n):
            raise WcetError(f"{fn.name}: covariance has shape {cov.shape}, expected ({n}, {n}) "
                            f"in the order of the function's blocks")
        x = np.array([counts[a] for a in flow.blocks], dtype=float)
        margin = float(z * math.sqrt(max(0.0, float(x @ cov @ x))))

    loops_out = []
    slack_tol = 0.5   # flows are integers
    for lp in fn.loops:
        b = bounds.get(lp.header)
        if b is None:
            continue
        back, entry = loop_vars[lp.header]
        nb, ne = int(sum(f[i] for i in back)), int(sum(f[i] for i in entry))
        # Tight at the optimum (flows are integers); a loop the path never enters binds nothing.
        binding = ne > 0 and (
            (b.per_entry is not None and b.per_entry * ne - nb < slack_tol)
            or (b.total is not None and b.total - nb < slack_tol))
        loops_out.append(LoopOutcome(lp.header, loop_key(fn, lp.header), b, ne, nb, binding))

    calls_out = tuple(CallOutcome(cs.block, cs.instruction, cs.kind, cs.target,
                                  cs.target_name, counts.get(cs.block, 0), w, note)
                      for cs, w, note in call_notes)
    for co in calls_out:
        if co.count and co.kind in (CALL_IMPORTED, CALL_INDIRECT):
            warnings.append(f"{co.kind} call at {describe_block(fn, co.block)}"
                            f"{' to ' + co.target_name if co.target_name else ''} on the "
                            f"worst-case path ({co.count}×): {co.note}")

    binding_env = tuple(e for e in envelopes
                        if e.intercept + e.slope * counts.get(e.header, 0)
                        - sum(counts.get(a, 0) for a in e.blocks) < 1.0)
    executed = {a for a, n in counts.items() if n > 0}
    path = tuple(PathStep(a, counts[a], own[a], callee_per_exec[a],
                          counts[a] * total_cost[a]) for a in flow.topo_order(executed))
    edge_flows = {flow.edges[i]: int(f[i]) for i in range(flow.n_cfg)}
    exit_flows = {flow.edges[i][0]: int(f[i]) for i in range(flow.source_var + 1, nv)}
    log.debug("%s: IPET bound %.1f ticks over %d blocks (%s)", fn.name, bound,
              len(executed), status)
    return IpetResult(function=fn.name, status=status, bound_ticks=bound, margin_ticks=margin,
                      entry_cost_ticks=float(entry_cost), block_counts=counts,
                      edge_flows=edge_flows, exit_flows=exit_flows, path=path,
                      loops=tuple(loops_out), calls=calls_out, warnings=tuple(warnings),
                      binding_envelopes=binding_env)


def _infeasible_reason(fn: FunctionModel, flow: _Flow, reach: set[int],
                       forbidden: set[int]) -> str:
    exits = set(fn.exits) | set(flow.dead_ends)
    if not exits:
        return (f"{fn.name}: no execution can return: the model has no exit block "
                f"(a function that never returns has no WCET)")
    if not (exits & reach):
        why = " without the forbidden blocks" if forbidden else ""
        return (f"{fn.name}: no exit is reachable from the entry "
                f"{describe_block(fn, fn.entry)}{why}: no execution can return")
    return (f"{fn.name}: the loop bounds exclude every path from the entry to an exit "
            f"(e.g. a total bound smaller than the iterations every path must make)")


# --- interprocedural ----------------------------------------------------------------------

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
    # probability ≤ ``exceedance`` per call (see wcetfit.pipeline.call_dispersion): the fit predicts
    # the mean of a call, a WCET must cover single calls.
    dispersion: float = 0.0
    exceedance: float = 1e-6                   # the probability per call it is set for
    # its factors (wcetfit.pipeline.Dispersion): misfit, call, machine_speed
    dispersion_factors: Mapping[str, float] = field(default_factory=dict)

    @property
    def upper_ticks(self) -> float:
        """The bound: (point + margin) × (1 + dispersion)."""
        return (self.bound_ticks + (self.margin_ticks or 0.0)) * (1.0 + self.dispersion)

    @property
    def dispersion_ticks(self) -> float:
        return (self.bound_ticks + (self.margin_ticks or 0.0)) * self.dispersion


def _callee_name(functions: Mapping[str, FunctionModel], by_addr: Mapping[int, str],
                 cs) -> str | None:
    if cs.target is not None and cs.target in by_addr:
        return by_addr[cs.target]
    if cs.target_name and cs.target_name in functions:
        return cs.target_name
    return None


def call_graph(functions: Mapping[str, FunctionModel], root: str) -> dict[str, list[str]]:
    """Internal callees of every function reachable from ``root`` (in call-site order)."""
    if root not in functions:
        raise WcetError(f"no model of the root function {root!r}")
    by_addr: dict[int, str] = {}
    for name, fn in functions.items():
        by_addr.setdefault(fn.address, name)
        by_addr.setdefault(fn.entry, name)
    graph: dict[str, list[str]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in graph:
            continue
        graph[name] = []
        for cs in functions[name].calls:
            if cs.kind != CALL_INTERNAL:
                continue
            callee = _callee_name(functions, by_addr, cs)
            if callee is None:
                raise WcetError(
                    f"{name} calls {cs.target_name or '?'} "
                    f"({hexaddr(cs.target) if cs.target is not None else 'unknown address'}) "
                    f"at {describe_block(functions[name], cs.block)}, a function of the binary "
                    f"whose model is not loaded: its WCET cannot be computed")
            if callee not in graph[name]:
                graph[name].append(callee)
            todo.append(callee)
    return graph


def _sccs(graph: Mapping[str, list[str]], root: str) -> list[list[str]]:
    """Strongly connected components of the call graph reachable from ``root``, callees
    before their callers (reverse topological order of the condensation)."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_node(root)
    g.add_edges_from((v, w) for v, ws in graph.items() for w in ws)
    g = g.subgraph(nx.descendants(g, root) | {root})
    cond = nx.condensation(g)
    return [sorted(cond.nodes[c]["members"]) for c in reversed(list(nx.topological_sort(cond)))]


def _find_cycle(graph: Mapping[str, list[str]], comp: list[str]) -> list[str]:
    """One call cycle inside a recursive component, for the error message."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    todo = [start]
    seen = {start}
    while todo:
        v = todo.pop(0)
        for w in graph[v]:
            if w == start:
                cyc = [v]
                while cyc[-1] != start:
                    cyc.append(prev[cyc[-1]])
                return list(reversed(cyc)) + [start]
            if w in members and w not in seen:
                seen.add(w)
                prev[w] = v
                todo.append(w)
    return [start, start]


def wcet_bound(functions: Mapping[str, FunctionModel], root: str,
               costs: Mapping[str, Mapping[int, float]],
               bounds: Mapping[str, Mapping[int, int | LoopBound]],
               recursion_bounds: Mapping[str, int] = {}, *,
               entry_cost: float = 0.0,
               cov: np.ndarray | None = None,
               cov_index: Sequence[tuple[str, int] | str] | None = None,
               z: float = Z95,
               relations: Sequence["CountRelation"] = (),
               block_bounds: Mapping[int, int] = {},
               activation_bounds: Mapping[str, int] = {},
               total_bounds: Mapping[str, Mapping[int, int]] = {},
               envelopes: Sequence[Any] = (),
               max_recursion_solves: int = 20000) -> WcetResult:
    """WCET of ``root`` with the binary's own callees, bottom-up over the call graph.

    ``costs``: function → block → ticks (the fit's solution); ``bounds``: function →
    header → bound; ``recursion_bounds``: function → depth, the most activations of its
    recursive cycle nested on the stack, counting the outermost (1 = the recursive calls
    are never taken).  For a cycle of several functions (f → g → f) the depth counts
    activations of any member, and a depth given for any member applies to the cycle
    (the largest if several are given).  ``entry_cost`` (the overhead ε) is added once, to
    the root.  ``cov``/``cov_index``: covariance of the fitted costs over all functions'
    blocks, indexed by (function, address) pairs and optionally :data:`OVERHEAD`.
    ``activation_bounds``: function → most activations per call of the root seen on the
    inputs, and ``total_bounds``: function → block → most executions per call of the root
    seen: a self-recursive function with both is also bounded over all its activations
    at once (see below).

    Context-insensitive: each function gets one WCET, its worst over all callers.  A
    recursive cycle of depth D is computed level by level: at level 1 its in-cycle call
    blocks are forbidden, at level d they cost the level d−1 WCETs — exact for the
    given depth (tree recursion included), at the price of D solves per member.
    """
    graph = call_graph(functions, root)
    order_sccs = _sccs(graph, root)
    by_addr: dict[int, str] = {}
    for name, fn in functions.items():
        by_addr.setdefault(fn.address, name)
        by_addr.setdefault(fn.entry, name)

    results: dict[str, IpetResult] = {}
    wcet_of: dict[str, float] = {}
    inl: dict[str, dict[tuple[str, int], float]] = {}
    depth_used: dict[str, int] = {}
    warnings: list[str] = []

    def callee_costs(name: str, level_w: Mapping[str, float]) -> dict[int, float]:
        out: dict[int, float] = {}
        for cs in functions[name].calls:
            if cs.kind != CALL_INTERNAL or cs.target is None:
                continue
            callee = _callee_name(functions, by_addr, cs)
            if callee is not None and callee in level_w:
                out[cs.target] = level_w[callee]
        return out

    def inline(name: str, res: IpetResult,
               level_inl: Mapping[str, Mapping[tuple[str, int], float]]
               ) -> dict[tuple[str, int], float]:
        vec: dict[tuple[str, int], float] = {(name, a): float(n)
                                             for a, n in res.block_counts.items() if n}
        for cs in functions[name].calls:
            if cs.kind != CALL_INTERNAL:
                continue
            n = res.block_counts.get(cs.block, 0)
            callee = _callee_name(functions, by_addr, cs)
            if not n or callee is None or callee not in level_inl:
                continue
            for k, v in level_inl[callee].items():
                vec[k] = vec.get(k, 0.0) + n * v
        return vec

    def fn_bounds(name: str) -> Mapping[int, int | LoopBound]:
        return bounds.get(name, {})

    def fn_costs(name: str) -> Mapping[int, float]:
        if name not in costs:
            raise WcetError(f"no block costs for {name} (a callee of {root}): is it in the fit?")
        return costs[name]

    for comp in order_sccs:
        members = set(comp)
        recursive = len(comp) > 1 or comp[0] in graph[comp[0]]
        if not recursive:
            name = comp[0]
            res = ipet(functions[name], fn_costs(name), fn_bounds(name),
                       callee_wcet=callee_costs(name, wcet_of),
                       entry_cost=entry_cost if name == root else 0.0, z=z,
                       relations=relations if name == root else (),
                       envelopes=envelopes if name == root else (),
                       block_bounds=block_bounds if name == root else {})
            results[name] = res
            wcet_of[name] = res.bound_ticks - res.entry_cost_ticks
            inl[name] = inline(name, res, inl)
            continue

        given = {m: recursion_bounds[m] for m in comp if m in recursion_bounds}
        cycle = _find_cycle(graph, comp)
        if not given:
            raise RecursionBoundError(
                f"recursion {' -> '.join(cycle)} has no depth bound: add "
                f"\"{cycle[0]}\" = D under [recursion] in wcetfit.toml (D = most nested "
                f"activations, 1 = the recursive call is never taken)", cycle)
        depth = max(int(v) for v in given.values())
        if len(set(given.values())) > 1:
            warnings.append(f"recursion {' -> '.join(cycle)}: different depths given "
                            f"({', '.join(f'{k}={v}' for k, v in sorted(given.items()))}); "
                            f"using the largest, {depth}")
        if depth < 1:
            raise RecursionBoundError(f"recursion depth of {' -> '.join(cycle)} must be >= 1",
                                      cycle)
        if depth * len(comp) > max_recursion_solves:
            raise RecursionBoundError(
                f"recursion {' -> '.join(cycle)}: depth {depth} needs {depth * len(comp)} "
                f"IPET solves (limit {max_recursion_solves})", cycle)
        in_cycle_blocks = {
            m: {cs.block for cs in functions[m].calls
                if cs.kind == CALL_INTERNAL and _callee_name(functions, by_addr, cs) in members}
            for m in comp}
        level_res: dict[str, IpetResult] = {}
        level_w: dict[str, float] = {}
        level_inl: dict[str, dict[tuple[str, int], float]] = {}
        for d in range(1, depth + 1):
            new_res, new_w, new_inl = {}, {}, {}
            for m in comp:
                known = dict(wcet_of)
                known_inl = dict(inl)
                if d > 1:
                    known.update(level_w)
                    known_inl.update(level_inl)
                try:
                    r = ipet(functions[m], fn_costs(m), fn_bounds(m),
                             callee_wcet=callee_costs(m, known),
                             entry_cost=entry_cost if m == root else 0.0, z=z,
                             forbidden_blocks=in_cycle_blocks[m] if d == 1 else ())
                except InfeasibleError as exc:
                    raise RecursionBoundError(
                        f"recursion {' -> '.join(cycle)}: {m} cannot return without "
                        f"recursing ({exc}): the recursion is unbounded on every path",
                        cycle) from exc
                new_res[m] = r
                new_w[m] = r.bound_ticks - r.entry_cost_ticks
                new_inl[m] = inline(m, r, known_inl)
            converged = d > 1 and all(new_w[m] == level_w[m] for m in comp)
            level_res, level_w, level_inl = new_res, new_w, new_inl
            if converged:
                # W_d depends only on W_{d-1}: a fixed point stays one.
                log.debug("recursion %s: WCET stable from depth %d", comp, d)
                break
        for m in comp:
            results[m] = level_res[m]
            wcet_of[m] = level_w[m]
            inl[m] = level_inl[m]
            depth_used[m] = depth
        # A recursion bounded per level multiplies: a loop of 9 calls at each of 10 levels
        # allows 9^10 activations, where a tree walk makes ~2^10.  When the inputs showed
        # how many activations one call of the root makes at most (A), all activations
        # together are one IPET: the counts are totals over at most A entries, each
        # activation but the outermost is entered from one of the function's own recursive
        # call blocks (Σ their counts = entries − 1), the recursive calls themselves cost
        # nothing more (their activations are in the totals), and no block runs more
        # often in total than on any input (observed, like the activations).  Taken
        # when smaller than the depth bound, and said: like an observed loop bound it
        # rests on the inputs.
        if len(comp) == 1 and comp[0] in activation_bounds:
            m = comp[0]
            A = int(activation_bounds[m])
            fn_m = functions[m]
            coef: dict[int, int] = {}
            for b in in_cycle_blocks[m]:
                coef[b] = coef.get(b, 0) + 1
            coef[fn_m.entry] = coef.get(fn_m.entry, 0) - 1
            agg = None
            if A >= 1 and not fn_m.predecessors(fn_m.entry):
                try:
                    agg = ipet(fn_m, fn_costs(m), fn_bounds(m),
                               callee_wcet=callee_costs(m, {**wcet_of, m: 0.0}),
                               entry_cost=entry_cost if m == root else 0.0, z=z,
                               entries=A, total_bounds=total_bounds.get(m, {}),
                               relations=(CountRelation(tuple(sorted(coef.items())), -1),))
                except InfeasibleError:
                    agg = None          # the observed totals contradict the CFG: keep depth
            alt = agg.bound_ticks - agg.entry_cost_ticks if agg is not None else math.inf
            if m != root and alt < wcet_of[m]:
                wcet_of[m] = alt
                inl[m] = inline(m, agg, {**inl, m: {}})
                results[m] = agg
                warnings.append(
                    f"recursion of {m}: bounded over all its activations at once, at most "
                    f"{A} per call of {root} and no block more often than on any input "
                    f"(observed), smaller than the depth-{depth} bound")

    top = results[root]
    for name in graph:
        warnings.extend(results[name].warnings)

    margin = None
    if cov is not None:
        if cov_index is None:
            raise WcetError("a covariance needs cov_index: the (function, address) of each row")
        cov = np.asarray(cov, dtype=float)
        if cov.shape != (len(cov_index), len(cov_index)):
            raise WcetError(f"covariance has shape {cov.shape}, but cov_index has "
                            f"{len(cov_index)} entries")
        pos = {k: i for i, k in enumerate(cov_index)}
        # A block shared by two functions has one row, under either name.
        by_addr = {k[1]: i for i, k in enumerate(cov_index) if isinstance(k, tuple)}
        x = np.zeros(len(cov_index))
        for k, v in inl[root].items():
            i = pos.get(k, by_addr.get(k[1]))
            if i is None:
                raise WcetError(f"covariance has no row for block "
                                f"{describe_block(functions[k[0]], k[1])} of the worst-case path")
            x[i] += v
        if OVERHEAD in pos and entry_cost:
            x[pos[OVERHEAD]] = 1.0
        margin = float(z * math.sqrt(max(0.0, float(x @ cov @ x))))

    ordered = tuple(m for comp in order_sccs for m in comp)
    return WcetResult(root=root, bound_ticks=top.bound_ticks, margin_ticks=margin,
                      functions=results, order=ordered, inlined_counts=inl[root],
                      recursion=depth_used, warnings=tuple(dict.fromkeys(warnings)))


# --- observed loop bounds ----------------------------------------------------------------

def _determinable(flow: _Flow, W: np.ndarray, tol: float = 1e-7
                  ) -> list[tuple[np.ndarray, float] | None]:
    """For each column w of ``W`` (edge weights): if w·f is the same for every edge flow f
    consistent with the block counts, (a, b) such that w·f = counts·a + b; else None.

    Block counts fix Σ in-flows and Σ out-flows of every block (and the source edge is 1):
    w·f is determined iff w is a combination λ of those rows, and then w·f = λ·(right-hand
    sides).  One least-squares solve serves every loop.
    """
    nb = len(flow.blocks)
    nv = len(flow.edges)
    M = np.zeros((2 * nb + 1, nv))
    for a, r in flow.index.items():
        for i in flow.ins[a]:
            M[r, i] = 1.0
        for i in flow.outs[a]:
            M[nb + r, i] = 1.0
    M[2 * nb, flow.source_var] = 1.0
    lam, *_ = np.linalg.lstsq(M.T, W, rcond=None)
    resid = np.max(np.abs(M.T @ lam - W), axis=0, initial=0.0)
    out: list[tuple[np.ndarray, float] | None] = []
    for k in range(W.shape[1]):
        if resid[k] > tol:
            out.append(None)
        else:
            # both rows of block r have its count as right-hand side; the source edge is 1
            out.append((lam[:nb, k] + lam[nb:2 * nb, k], float(lam[2 * nb, k])))
    return out


def observed_loop_bounds(fn: FunctionModel, counts: np.ndarray,
                         block_addresses: Sequence[int]) -> dict[int, LoopBound]:
    """Loop bounds seen in the count run: header → :class:`LoopBound` (source "observed").

    ``counts[input, column]``: block executions per call; ``block_addresses[column]``
    names the columns (other functions' columns are ignored).

    Per input we need B, the back-edge traversals, and E, the entries into the loop
    (B + E = executions of the header).  Block counts give edge flows only where flow
    conservation pins them (e.g. a back edge from a block whose only successor is the
    header): B is taken where it is determined by the counts; otherwise it is bounded
    above by min(header − 1, Σ counts of the back edges' sources), and the bound says so.

    - Loops entered at most once per call in every input (outermost loops): B is exactly
      the traversals of that one entry, and the bound is per entry: max over inputs of B.
    - Loops entered several times in one call (inner loops): the counts give the total
      over all entries, not the maximum of one entry (the average B/E is not the max).
      The bound is then a total per call: max over inputs of B.  Exact on what was
      observed, but it does not grow with an enclosing loop's bound: give a flow fact
      when the enclosing loop is bounded by a fact beyond what the inputs reached.
    Loops never entered by any input get no bound (the IPET then asks for a fact).
    """
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] != len(block_addresses):
        raise WcetError(f"counts of shape {counts.shape} do not match "
                        f"{len(block_addresses)} block addresses")
    col = {int(a): j for j, a in enumerate(block_addresses)}
    flow = _Flow(fn)
    missing = [a for a in flow.blocks if a not in col]
    if missing:
        raise WcetError(f"{fn.name}: counts have no column for block "
                        f"{describe_block(fn, missing[0])}")
    C = counts[:, [col[a] for a in flow.blocks]].astype(float)
    out: dict[int, LoopBound] = {}
    W = np.zeros((len(flow.edges), len(fn.loops)))
    for k, lp in enumerate(fn.loops):
        W[flow.loop_vars(lp)[0], k] = 1.0
    dets = _determinable(flow, W) if fn.loops else []
    for lp, det in zip(fn.loops, dets):
        back, entry = flow.loop_vars(lp)
        H = C[:, flow.index[lp.header]]
        entered = H > 0
        if not entered.any():
            log.info("%s: loop %s never entered by the inputs: no observed bound", fn.name,
                     describe_block(fn, lp.header))
            continue
        exact = det is not None
        if det is not None:
            B = C @ det[0] + det[1]
        else:
            srcs = [flow.edges[i][0] for i in back]
            src_sum = C[:, [flow.index[s] for s in srcs]].sum(axis=1)
            B = np.minimum(np.maximum(H - 1, 0), src_sum)
        B = np.rint(B)
        E = H - B
        if np.any(B < 0) or np.any(E < 0) or np.any(E[entered] < 1):
            # The header is also reached other than through the loop's entry edges
            # (irreducible flow around it): per-entry figures mean nothing, but a back
            # edge never runs more often than the header, so its total per call holds.
            bad = int(np.argmax((B < 0) | (E < 0) | (entered & (E < 1))))
            witness = int(np.argmax(H))
            out[lp.header] = LoopBound(
                total=int(H[witness]), source=SOURCE_OBSERVED, witness=witness,
                note=f"entries not derivable from block counts (input {bad}: header "
                     f"{int(H[bad])}, back edges {int(B[bad])}; irreducible flow?): bounded "
                     "by the most header executions per call")
            continue
        witness = int(np.argmax(B))
        most = int(B[witness])
        max_entries = int(E.max())
        if exact and max_entries <= 1:
            out[lp.header] = LoopBound(per_entry=most, source=SOURCE_OBSERVED, witness=witness,
                                       note="max back-edge traversals per entry over the inputs")
            continue
        notes = []
        if not exact:
            notes.append("edge counts not determined by the block counts: back-edge "
                         "traversals bounded by min(header - 1, counts of back-edge sources)")
        if max_entries > 1:
            avg = float(np.max(B[entered] / E[entered]))
            notes.append(f"entered up to {max_entries} times per call: the maximum per entry "
                         f"is not observable from block counts (largest average "
                         f"{avg:.1f} per entry); bounded by its total per call")
        out[lp.header] = LoopBound(total=most, source=SOURCE_OBSERVED, witness=witness,
                                   note="; ".join(notes))
    return out


# --- user flow facts ---------------------------------------------------------------------

def parse_loop_facts(spec: Mapping[str, Any], functions: Mapping[str, FunctionModel]
                     ) -> dict[tuple[str, int], LoopBound]:
    """Resolve the [loops] table of wcetfit.toml to (function, header) → :class:`LoopBound`.

    Keys name a loop by its header block: ``"adpcm_coder+0x4c"`` (offset from the
    function's start, hexadecimal with 0x or decimal) or ``"0x114c"`` (the link-time
    address, as ``objdump -d`` prints it).  Values: an integer N, the most back-edge
    traversals per entry into the loop, or a table ``{max = N, total = T}`` where T bounds
    the traversals over one call of the function.

    This is OTAWA's F4 fact ``loop "adpcm_coder" + 0x4c 2048;`` (and
    ``loop "f" + 0x24 max 20 total 50;``) written as ``"adpcm_coder+0x4c" = 2048``
    (``"f+0x24" = {max = 20, total = 50}``): the same addressing — a label plus an offset
    to the loop's header, or an absolute address — and the same meaning of the number,
    since OTAWA's IPET also bounds the back edges by max × the entry edges.  Two
    differences: OTAWA's totals count over the whole task run, ours over one call of the
    function the loop belongs to; and call contexts (``in "f" / "g"``) are not supported
    (our WCETs are context-insensitive).

    An address that is not a loop header is an error naming the nearest headers.
    """
    out: dict[tuple[str, int], LoopBound] = {}
    origin: dict[tuple[str, int], str] = {}
    for key, value in spec.items():
        where = f"[loops] '{key}'"
        bound = _fact_value(where, value, key)
        text = str(key).strip().strip('"')
        targets: list[tuple[str, int]]
        if "+" in text or ("-" in text and not text.startswith("-")):
            sep = "+" if "+" in text else "-"
            name, _, off_text = text.rpartition(sep)
            name = name.strip().strip('"')
            try:
                off = _parse_int(off_text.strip())
            except ValueError:
                raise TargetError(f"{where}: '{off_text.strip()}' is not an offset "
                                  f"(write e.g. \"{name}+0x4c\")") from None
            if name not in functions:
                import difflib
                close = difflib.get_close_matches(name, list(functions), n=1)
                raise TargetError(f"{where}: no function {name!r} among the analysed ones"
                                  + (f" (did you mean '{close[0]}'?)" if close else
                                     f" ({', '.join(sorted(functions))})"))
            fn = functions[name]
            addr = fn.address + (off if sep == "+" else -off)
            if addr not in {lp.header for lp in fn.loops}:
                raise TargetError(f"{where}: {hexaddr(addr)} is not a loop header of {name}; "
                                  + _nearest_headers([fn], addr))
            targets = [(name, addr)]
        else:
            try:
                addr = _parse_int(text)
            except ValueError:
                raise TargetError(f"{where}: name a loop as \"function+0xOFFSET\" or by its "
                                  f"header's address \"0x...\"") from None
            targets = [(fn.name, addr) for fn in functions.values()
                       if addr in {lp.header for lp in fn.loops}]
            if not targets:
                raise TargetError(f"{where}: {hexaddr(addr)} is not a loop header of any "
                                  f"analysed function; " + _nearest_headers(functions.values(),
                                                                            addr))
        for t in targets:
            if t in out and out[t] != bound:
                raise TargetError(f"{where}: loop {t[0]}+{t[1] - functions[t[0]].address:#x} "
                                  f"already has a different bound from '{origin[t]}'")
            out[t] = bound
            origin[t] = str(key)
    return out


def _parse_int(text: str) -> int:
    t = text.strip().lower()
    if t.startswith("0x"):
        return int(t, 16)
    return int(t, 10)


def _fact_value(where: str, value: Any, key: str) -> LoopBound:
    def check(v: Any, what: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TargetError(f"{where}: {what} must be an integer, not {v!r}")
        if v < 0:
            raise TargetError(f"{where}: {what} must be >= 0")
        return int(v)

    if isinstance(value, Mapping):
        extra = set(value) - {"max", "total"}
        if extra or not value:
            raise TargetError(f"{where}: a loop fact table takes 'max' and/or 'total'")
        return LoopBound(per_entry=check(value["max"], "max") if "max" in value else None,
                         total=check(value["total"], "total") if "total" in value else None,
                         source=SOURCE_FACT, note=f"[loops] {key}")
    return LoopBound(per_entry=check(value, "a loop bound"), source=SOURCE_FACT,
                     note=f"[loops] {key}")


def _nearest_headers(fns: Iterable[FunctionModel], addr: int, n: int = 3) -> str:
    cands = [(abs(lp.header - addr), fn, lp.header) for fn in fns for lp in fn.loops]
    if not cands:
        return "the function has no loops" if len(list(fns)) == 1 else "no analysed loops"
    cands.sort(key=lambda t: (t[0], t[2]))
    return "nearest loop headers: " + ", ".join(describe_block(fn, h) for _, fn, h in cands[:n])


def merge_loop_bounds(functions: Mapping[str, FunctionModel],
                      facts: Mapping[tuple[str, int], LoopBound],
                      observed: Mapping[str, Mapping[int, LoopBound]]
                      ) -> dict[str, dict[int, LoopBound]]:
    """Function → header → bound: a user fact replaces the observed bound of its loop."""
    out: dict[str, dict[int, LoopBound]] = {name: dict(observed.get(name, {}))
                                            for name in functions}
    for (name, header), b in facts.items():
        out.setdefault(name, {})[header] = b
    return out


# --- estimability of a prediction ----------------------------------------------------------

class ObservedRowSpace:
    """The row space of a count matrix (with the overhead's column of ones): the count
    directions the inputs exercised.  Σ cost·v is estimable from the measurements iff v
    lies in it; :meth:`residual` says how far a vector is from it."""

    def __init__(self, counts: np.ndarray, *, with_overhead: bool = True):
        C = np.asarray(counts, dtype=float)
        if C.ndim != 2:
            raise WcetError(f"counts must be a 2-d array, not shape {C.shape}")
        self.with_overhead = with_overhead
        if with_overhead:
            C = np.hstack([C, np.ones((C.shape[0], 1))])
        self.dim = C.shape[1]
        # Only distinct rows matter (inputs repeat count vectors): this keeps the SVD small.
        C = np.unique(C, axis=0) if C.shape[0] else C
        if C.size == 0:
            self.basis = np.zeros((0, self.dim))
            return
        _, s, vt = np.linalg.svd(C, full_matrices=False)
        # Rank tolerance as numpy's matrix_rank: counts are exact integers, so anything
        # above rounding error is a real direction.
        tol = (s[0] if s.size else 0.0) * max(C.shape) * np.finfo(float).eps
        self.basis = vt[s > tol] if s.size and s[0] > 0 else np.zeros((0, self.dim))

    @property
    def rank(self) -> int:
        return int(self.basis.shape[0])

    def residual(self, x: np.ndarray, overhead: float = 1.0) -> float:
        """Relative distance of ``x`` (one entry per count column; ``overhead`` is appended
        when the space has the ε column) from the row space: 0 = estimable."""
        v = np.asarray(x, dtype=float)
        if self.with_overhead:
            v = np.append(v, overhead)
        if v.shape != (self.dim,):
            raise WcetError(f"vector of length {v.shape} for a space of dimension {self.dim}")
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            return 0.0
        proj = self.basis.T @ (self.basis @ v)
        return float(np.linalg.norm(v - proj) / norm)


def count_space_residual(x: np.ndarray, counts: np.ndarray, *,
                         with_overhead: bool = True) -> float:
    """Relative distance of the count vector ``x`` from the row space of ``counts``.

    0 means Σ cost·x is estimable from these measurements (every particular solution of the
    fit gives the same value); a clearly positive value means the worst-case path exercises
    a direction the inputs never did (a block never executed, or a combination the inputs
    did not separate), and its predicted time depends on an arbitrary choice of solution.
    ``with_overhead`` appends the all-ones column of ε to ``counts`` and a 1 to ``x``.
    """
    return ObservedRowSpace(counts, with_overhead=with_overhead).residual(x)


# --- everything from plain pipeline data -----------------------------------------------------

@dataclass(frozen=True)
class FitInputs:
    """What the IPET takes from a fit (see :func:`fit_inputs`)."""

    costs: Mapping[str, Mapping[int, float]]     # function → block → solution ticks
    unknown: tuple[tuple[str, int], ...]         # blocks no input executed: costed 0
    entry_cost: float                            # the overhead ε of the configuration
    cov: np.ndarray | None
    cov_index: tuple[tuple[str, int] | str, ...]
    z: float                                     # the fit's critical value (Student t)


def fit_inputs(fit: Any, functions: Mapping[str, FunctionModel], *,
               config: int = 0) -> FitInputs:
    """Costs, overhead and covariance for :func:`wcet_bound` from a ``wcetfit.fit.result.FitResult``
    (read by attribute: ``blocks[].address/.solution_ticks``, ``overhead_ticks``,
    ``configs``, ``covariance`` over (solution, overhead_solution), ``residuals["t95"]``).

    Blocks are attributed to the functions whose models contain them.  A block no input
    executed has no solution: it is costed 0 and listed in ``unknown`` (the report warns
    when the worst-case path uses one: its true cost is not in the bound).
    """
    owners: dict[int, list[str]] = {}
    for name, fn in functions.items():
        for a in fn.block_addresses:
            owners.setdefault(a, []).append(name)
    costs: dict[str, dict[int, float]] = {name: {} for name in functions}
    unknown: list[tuple[str, int]] = []
    index: list[tuple[str, int] | str] = []
    for b in fit.blocks:
        names = owners.get(b.address, [])
        sol = b.solution_ticks
        ok = sol is not None and math.isfinite(sol)
        for name in names:
            costs[name][b.address] = float(sol) if ok else 0.0
            if not ok:
                unknown.append((name, b.address))
        index.append((names[0], b.address) if names else ("", b.address))
    configs = tuple(getattr(fit, "configs", (0,)))
    ov = fit.overhead_ticks
    if isinstance(ov, Mapping):
        entry = ov.get(config, ov.get(str(config)))
        if entry is None and len(ov) == 1:
            entry = next(iter(ov.values()))
    else:
        entry = ov
    entry = float(entry) if entry is not None and math.isfinite(float(entry)) else 0.0
    for k in configs:
        index.append(OVERHEAD if k == config else f"{OVERHEAD}:{k}")
    cov = getattr(fit, "covariance", None)
    if cov is not None:
        cov = np.nan_to_num(np.asarray(cov, dtype=float))
        if cov.shape != (len(index), len(index)):
            log.warning("fit covariance has shape %s, expected %d blocks + %d configs: "
                        "no margin", cov.shape, len(fit.blocks), len(configs))
            cov = None
    residuals = getattr(fit, "residuals", {}) or {}
    z = float(residuals.get("t95", Z95)) if isinstance(residuals, Mapping) else Z95
    return FitInputs(costs=costs, unknown=tuple(unknown), entry_cost=entry, cov=cov,
                     cov_index=tuple(index), z=z)


def analyze_wcet(functions: Mapping[str, FunctionModel], root: str,
                 costs: Mapping[str, Mapping[int, float]],
                 counts: np.ndarray, columns: Sequence[tuple[str, int]], *,
                 loop_facts: Mapping[str, Any] = {},
                 recursion: Mapping[str, int] = {},
                 entry_cost: float = 0.0,
                 cov: np.ndarray | None = None,
                 cov_index: Sequence[tuple[str, int] | str] | None = None,
                 z: float = Z95, use_relations: bool = True,
                 observed_paths: bool = True) -> WcetResult:
    """The WCET of ``root`` from the pipeline's data: observed loop bounds from ``counts``
    (columns named by (function, address)), replaced by the target file's [loops] facts
    where given, then :func:`wcet_bound`.  ``recursion`` is the target's [recursion].
    ``observed_paths``: also keep the root's loops within the path envelopes the inputs
    showed (:mod:`wcetfit.wcet.envelope`; the target's ``[wcet] observed_paths``)."""
    facts = parse_loop_facts(loop_facts, functions)
    names = call_graph(functions, root)
    observed: dict[str, dict[int, LoopBound]] = {}
    cols = list(columns)
    for name in names:
        idx = [j for j, (f, _) in enumerate(cols) if f == name]
        if not functions[name].loops:
            continue
        if not idx:
            log.info("%s: no count columns: no observed loop bounds", name)
            continue
        observed[name] = observed_loop_bounds(functions[name], np.asarray(counts)[:, idx],
                                              [cols[j][1] for j in idx])
    bounds = merge_loop_bounds({n: functions[n] for n in names}, facts, observed)
    idx = [j for j, (f, _) in enumerate(cols) if f == root]
    relations = observed_relations(np.asarray(counts)[:, idx], [cols[j][1] for j in idx]) \
        if idx and use_relations else ()
    # Most executions of each root block per call, over the inputs: the bound of blocks
    # in irreducible cycles (observed, like the loop bounds taken from the inputs).
    C = np.asarray(counts)
    block_max: dict[Any, int] = {cols[j][1]: int(C[:, j].max(initial=0)) for j in idx}
    fn_root = functions[root]
    if idx and fn_root.loops is not None:
        flow = _Flow(fn_root)
        region_blocks = _irreducible_blocks(flow, set(flow.blocks))
        if region_blocks:
            import networkx as nx
            part = set(region_blocks)
            g = nx.DiGraph([(s, d) for s in part for d in flow.succ[s] if d in part])
            pos = {cols[j][1]: j for j in idx}
            for comp in nx.strongly_connected_components(g):
                if all(a in pos for a in comp):
                    total = C[:, [pos[a] for a in comp]].sum(axis=1).max(initial=0)
                    block_max[("region", min(comp))] = int(total)
    # Most activations per call of the root, for recursive callees: their entry block's
    # count, where no edge inside the function leads back to it.
    activations: dict[str, int] = {}
    totals: dict[str, dict[int, int]] = {}
    for name in names:
        fn = functions[name]
        pos = [j for j, (f, a) in enumerate(cols) if f == name and a == fn.entry]
        if name != root and pos and not fn.predecessors(fn.entry):
            activations[name] = int(C[:, pos[0]].max(initial=0))
            totals[name] = {a: int(C[:, j].max(initial=0))
                            for j, (f, a) in enumerate(cols) if f == name}
    envelopes: tuple[Any, ...] = ()
    if idx and observed_paths:
        from wcetfit.wcet.envelope import observed_envelopes
        envelopes = observed_envelopes(functions[root], np.asarray(counts)[:, idx],
                                       [cols[j][1] for j in idx])
    result = wcet_bound(functions, root, costs, bounds, recursion, entry_cost=entry_cost,
                        cov=cov, cov_index=cov_index, z=z, relations=relations,
                        envelopes=envelopes,
                        block_bounds=block_max, activation_bounds=activations,
                        total_bounds=totals)
    from dataclasses import replace
    binding = result.functions[root].binding_envelopes if root in result.functions else ()
    if binding:
        shown = "; ".join(e.text() for e in binding[:3]) + ("; …" if len(binding) > 3 else "")
        note = (f"{root}: the worst path is held to {len(binding)} path envelope(s) that "
                f"every input kept ({shown}): the CFG allows those blocks more often; an "
                f"input that runs them more often could take longer (observed; "
                f"[wcet] observed_paths = false bounds by the CFG alone)")
        result = replace(result, envelopes=tuple(binding), warnings=result.warnings + (note,))
    extra = [r for r in relations if not _structural(functions[root], r)]
    if not extra:
        return result
    shown = "; ".join(r.text() for r in extra[:3]) + ("; …" if len(extra) > 3 else "")
    note = (f"{root}: the bound keeps to {len(extra)} count relation(s) that held on every "
            f"input but are not forced by the CFG ({shown}); an input breaking them could "
            f"take longer: vary the inputs if they are not facts of the program")
    return replace(result, relations=tuple(extra), warnings=result.warnings + (note,))


def _structural(fn: FunctionModel, rel: CountRelation) -> bool:
    """Whether the CFG alone forces ``rel`` (it is orthogonal to the count space)."""
    from wcetfit.static.structure import count_space_basis

    basis = count_space_basis(fn, epsilon=True)          # [dim, n_blocks + 1]
    index = {a: i for i, a in enumerate(fn.block_addresses)}
    v = np.zeros(len(fn.blocks) + 1)
    for a, c in rel.coefficients:
        v[index[a]] = c
    v[-1] = -rel.rhs
    return bool(np.abs(basis @ v).max(initial=0.0) <= 1e-9 * max(1.0, np.abs(v).max()))
