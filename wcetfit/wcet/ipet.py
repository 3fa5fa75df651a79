"""WCET bound by implicit path enumeration (IPET) of one function, on plain data.

The bound of one function is an integer linear program over the flows of its CFG's edges:

    maximize   Σ_b cost_b · x_b            x_b = executions of block b in one call
    subject to x_b = Σ in-flows of b = Σ out-flows of b        (flow conservation)
               the virtual edge into the entry carries exactly 1 (one call)
               exits flow into a virtual sink
               per loop:  Σ back-edge flows ≤ N · Σ entry-edge flows   (per-entry bound N)
                          Σ back-edge flows ≤ T                       (total bound T per call)

               per call target:  Σ calling blocks ≤ A   (the callee's observed activations)
               observed relations, path envelopes, irreducible regions' observed counts

solved with ``scipy.optimize.milp`` (HiGHS), with a zero relative MIP gap so that the
bound is the optimum, not a near-optimal path, and checked (:mod:`wcetfit.wcet.solve`):
the flow against every constraint, the optimum against every measured input's time.
Blocks no input reached may be forbidden (``[wcet] unreached``); every reachable loop
without a bound is an error naming them all.

Loop bounds: :mod:`wcetfit.wcet.loops`; the margin: :mod:`wcetfit.wcet.margin`; callees:
:mod:`wcetfit.wcet.interproc`.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import CALL_IMPORTED, CALL_INDIRECT, CALL_INTERNAL, FunctionModel, hexaddr
from wcetfit.wcet.flow import SINK, SOURCE, Flow, cycle_outside_loops, irreducible_blocks
from wcetfit.wcet.margin import path_margin
from wcetfit.wcet.solve import Problem, Row, input_violations, solve, unbounded_cycle
from wcetfit.wcet.result import (Z95, BrokenInputs, CallOutcome, CountRelation,
                                 InfeasibleError, IpetResult, LoopBound, LoopOutcome, PathStep,
                                 UnboundedLoopError, as_loop_bound, describe_block, loop_key)

log = logging.getLogger(__name__)


# How long the count of measured inputs that break the constraints may take (one LP per
# input): past it, the note says how many of those checked do.
BROKEN_COUNT_SECONDS = 3.0


def _broken_note(fn: FunctionModel, problem: Problem, flow: Flow, X: np.ndarray,
                 broken: list[str]) -> tuple[str, BrokenInputs]:
    """One warning for the measured inputs the constraints exclude: how many of them (all
    the inputs checked, within :data:`BROKEN_COUNT_SECONDS`), and what the first of them
    breaks.  The worst path is then one of the calls that keep the constraints; those
    inputs' calls are not among its paths (libgmp's popcount with ``[loops]`` at 10
    iterations: 447 of 500 inputs ran more, and the report named 8 of them, one warning
    each)."""
    import time

    start = time.monotonic()
    n_broken = checked = 0
    for row in X:
        if time.monotonic() - start > BROKEN_COUNT_SECONDS:
            break
        bad = input_violations(problem, flow, row, name=False)
        if bad is None:
            continue
        checked += 1
        n_broken += bool(bad)
    counted = BrokenInputs(broken=max(n_broken, len(broken)),
                           checked=checked if checked < len(X) else len(X), total=len(X))
    return (f"{fn.name}: {counted.text} break the constraints the bound keeps to "
            f"({broken[0]}): the worst path is one of the calls that keep them, and those "
            f"inputs' calls are not among its paths; a [loops] or [flow] fact they "
            f"contradict is wrong for the inputs generate() makes (raise it, or keep "
            f"generate() within it)"), counted


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
         facts: Sequence[Any] = (),
         call_caps: Mapping[int, int] = {},
         inputs: np.ndarray | None = None,
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
    ``call_caps``: call target address → most calls of it per call (observed: the callee's
    most activations per measured call), over all call sites together.
    ``inputs``: measured count vectors of single calls (rows, in ``fn.block_addresses``
    order): each is a feasible point, so the optimum is checked to reach its time.
    ``entries``: most entries into the function (default 1, exactly one): with more, the
    counts are totals over up to that many activations (each activation obeys the CFG and
    the loop bounds per entry, so their sum does too), at least one.

    Raises :class:`UnboundedLoopError` naming every reachable loop without a bound, and
    :class:`InfeasibleError` when no path from entry to an exit satisfies the bounds.
    """
    flow = Flow(fn)
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
    # A conditional tail call (``jne other_function`` ending a block that also falls through
    # inside the function: SHA512's entry block picks its XOP variant so) calls on one of
    # the block's out-edges only, the one leaving the function: its callee is charged on
    # that edge, and its calls are that edge's flow, not the block's count (a cap of 0 on
    # the block's count forbade the entry block: "no execution satisfies the constraints").
    tail_edge = {c.block: flow.var[(c.block, SINK)] for c in fn.calls
                 if c.tail and flow.succ.get(c.block) and (c.block, SINK) in flow.var}
    edge_callee: dict[int, float] = {}
    call_notes: list[tuple[Any, float | None, str]] = []
    warnings: list[str] = []
    for c in fn.calls:
        if c.kind == CALL_INTERNAL and c.target is not None and c.target in callee_wcet \
                and c.block in tail_edge:
            w = float(callee_wcet[c.target])
            i = tail_edge[c.block]
            edge_callee[i] = edge_callee.get(i, 0.0) + w
            call_notes.append((c, w, "callee WCET added per conditional tail call (the "
                                     "block's exit edge)"))
        elif c.kind == CALL_INTERNAL and c.target is not None and c.target in callee_wcet:
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
        elif c.kind == CALL_INDIRECT and ("site", c.instruction) in callee_wcet:
            w = float(callee_wcet[("site", c.instruction)])       # type: ignore[index]
            callee_per_exec[c.block] = callee_per_exec.get(c.block, 0.0) + w
            names = ", ".join(t.name for t in c.observed if t.address is not None)
            outside = [t.name for t in c.observed if t.address is None]
            call_notes.append((c, w, f"indirect: the largest WCET of its observed callees "
                                     f"({names}; observed) added per execution"
                                     + (f"; outside the binary ({', '.join(outside)}): not "
                                        "modelled" if outside else "")))
        elif c.kind == CALL_INDIRECT:
            call_notes.append((c, None, "indirect: target unknown, callee time not modelled"))
        else:
            call_notes.append((c, None, f"unknown call kind {c.kind!r}: not modelled"))
    total_cost = {a: own[a] + callee_per_exec[a] for a in flow.blocks}

    # Loops: every reachable loop needs a bound; a cycle outside natural loops cannot have one.
    cyc = cycle_outside_loops(flow, reach)
    irreducible: list[int] = []
    if cyc is not None and block_bounds:
        irreducible = irreducible_blocks(flow, reach)
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
    unbounded = missing_loop_bounds(fn, bounds, forbidden)
    if unbounded:
        raise UnboundedLoopError(unbounded_message({fn.name: unbounded}),
                                 [name for _, name in unbounded])

    # The integer program (plain data, see wcetfit.wcet.solve).
    nv = len(flow.edges)
    cost = np.zeros(nv)
    for i, (s, _) in enumerate(flow.edges):
        if s != SOURCE:
            cost[i] = total_cost[s] + edge_callee.get(i, 0.0)   # count of s = Σ out-flows
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
    rows: list[Row] = []

    def count_coef(weights: Iterable[tuple[Any, float]]) -> dict[int, float]:
        coef: dict[int, float] = {}
        for a, v in weights:
            for i in flow.outs.get(a, ()):
                coef[i] = coef.get(i, 0.0) + float(v)
        return coef

    for a in flow.blocks:
        coef: dict[int, float] = {}
        for i in flow.ins[a]:
            coef[i] = coef.get(i, 0.0) + 1.0
        for i in flow.outs[a]:
            coef[i] = coef.get(i, 0.0) - 1.0
        rows.append(Row(coef, 0.0, 0.0, f"flow conservation at {describe_block(fn, a)}"))
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
            rows.append(Row(coef, -np.inf, 0.0, f"loop {loop_key(fn, lp.header)}: "
                            f"≤ {b.per_entry} back edges per entry ({b.source})"))
        if b.total is not None:
            rows.append(Row({i: 1.0 for i in back}, -np.inf, float(b.total),
                            f"loop {loop_key(fn, lp.header)}: ≤ {b.total} back edges per "
                            f"call ({b.source})"))
    for a in irreducible:
        rows.append(Row(count_coef([(a, 1.0)]), -np.inf, float(block_bounds[a]),
                        f"irreducible block {loop_key(fn, a)}: ≤ {block_bounds[a]} (observed)"))
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
                rows.append(Row(count_coef((a, 1.0) for a in comp), -np.inf, float(total),
                                f"irreducible region at {loop_key(fn, min(comp))}: ≤ {total} "
                                f"block executions (observed)"))
    for a, total in total_bounds.items():
        if a in flow.outs:
            rows.append(Row(count_coef([(a, 1.0)]), -np.inf, float(total),
                            f"block {loop_key(fn, a)}: ≤ {total} per call (observed)"))
    cap_sites: dict[int, list[Any]] = {}
    for cs in fn.calls:
        if cs.kind == CALL_INTERNAL and cs.target is not None and cs.target in call_caps:
            cap_sites.setdefault(cs.target, []).append(cs)
    cap_rows: dict[int, int] = {}
    for target, sites in cap_sites.items():
        cap = int(call_caps[target])
        cap_rows[target] = len(rows)
        callee = sites[0].target_name or hexaddr(target)
        coef = count_coef((cs.block, 1.0) for cs in sites if cs.block not in tail_edge)
        for cs in sites:
            if cs.block in tail_edge:
                coef[tail_edge[cs.block]] = coef.get(tail_edge[cs.block], 0.0) + 1.0
        rows.append(Row(coef, -np.inf, float(cap),
                        f"calls to {callee}: ≤ {cap} (observed: its most activations per "
                        f"measured call)"))
    for env in envelopes:
        coef = count_coef([(a, 1.0) for a in env.blocks] + [(env.header, -float(env.slope))])
        rows.append(Row(coef, -np.inf, float(env.intercept),
                        f"path envelope {env.text()} (observed)"))
    for fact in facts:
        # the user's [flow] facts (wcetfit.wcet.flowfacts.LinearConstraint)
        rows.append(Row(count_coef(fact.coefficients), float(fact.low), float(fact.high),
                        fact.label))
    for rel in relations:
        # Σ coef·count = rhs, a block's count being the sum of its out-flows.
        rows.append(Row(count_coef(rel.coefficients), float(rel.rhs), float(rel.rhs),
                        f"count relation {rel.text()} (observed)"))
    problem = Problem(cost, lb, ub, rows)

    # Each measured input (one call) is a feasible point unless it breaks a constraint:
    # the optimum must reach its predicted time.
    cost_b = np.array([total_cost[a] for a in flow.blocks])
    to_beat: list[tuple[str, float]] = []
    broken: list[str] = []
    if inputs is not None and len(inputs):
        X = np.asarray(inputs, dtype=float)
        vals = X @ cost_b
        for k in np.argsort(-vals)[:8]:
            bad = input_violations(problem, flow, X[k], name=not broken)
            if bad is None:
                continue
            if not bad:
                to_beat.append((f"input {int(k)}", float(vals[k])))
                break          # the largest feasible one is enough
            broken.append(f"input {int(k)} breaks {'; '.join(bad[:3])}")
    sol = solve(problem, time_limit=time_limit, values_to_beat=to_beat)
    if sol.flow is None:
        tried = "; ".join(sol.attempts)
        if sol.status == "unbounded":
            hot = unbounded_cycle(problem, flow)
            if hot:
                lps = [lp for lp in fn.loops if set(hot) & set(lp.body)]
                raise UnboundedLoopError(
                    f"{fn.name}: the IPET problem is unbounded: blocks "
                    + ", ".join(loop_key(fn, a) for a in hot[:8])
                    + (" …" if len(hot) > 8 else "")
                    + " can run without limit"
                    + (f" (loops containing them: "
                       f"{', '.join(describe_block(fn, lp.header) for lp in lps)}: bound them "
                       f"under [loops])" if lps else " (no loop of the model contains them)")
                    + f" [{tried}]", [loop_key(fn, lp.header) for lp in lps])
            raise WcetError(f"{fn.name}: the IPET solver answered unbounded, but with every "
                            f"flow capped no cycle runs away: a solver failure [{tried}]")
        if sol.status == "infeasible":
            if broken:
                # the first broken input names the constraint; the others only count, and
                # the solver's own words go to the log (a user read "input 1 breaks a
                # constraint" and a HiGHS status dump as the explanation)
                log.info("%s: IPET infeasible [%s]", fn.name, tried)
                more = len(broken) - 1
                raise InfeasibleError(
                    f"{fn.name}: no execution satisfies the constraints: {broken[0]}"
                    + (f"; {more} more of the {min(8, len(X))} inputs predicted slowest "
                       f"break the constraints too" if more else ""))
            if to_beat:
                raise WcetError(f"{fn.name}: the IPET solver answered infeasible, but "
                                f"{to_beat[0][0]} satisfies every constraint: a solver "
                                f"failure [{tried}]")
            raise InfeasibleError(_infeasible_reason(fn, flow, reach, forbidden))
        raise WcetError(f"{fn.name}: the IPET solver failed: {sol.message} [{tried}]")
    broken_inputs = None
    if broken:
        note, broken_inputs = _broken_note(fn, problem, flow, X, broken)
        warnings.append(note)
    if len(sol.attempts) > 1:
        warnings.append(f"{fn.name}: the IPET solver's first answer was rejected by the check "
                        f"and the problem solved again ({'; '.join(sol.attempts)})")
    f = sol.flow
    status = "optimal" if sol.status == "optimal" else "time_limit"

    counts = {a: int(sum(f[i] for i in flow.outs[a])) for a in flow.blocks}
    bound = float(entry_cost) + sum(total_cost[a] * n for a, n in counts.items() if n) \
        + sum(w * float(f[i]) for i, w in edge_callee.items())
    # calls made: a block's executions, or a conditional tail call's exit-edge flow
    made = {a: int(f[tail_edge[a]]) if a in tail_edge else n for a, n in counts.items()}
    if status != "optimal":
        if sol.dual_bound is not None:
            # The dual bound is a valid upper bound even when the search stopped early.
            bound = max(bound, float(entry_cost) + sol.dual_bound)
        warnings.append(f"{fn.name}: the IPET search hit its time limit; the bound is the "
                        f"solver's proven upper bound ({sol.message})")

    margin = None
    if cov is not None:
        cov = np.asarray(cov, dtype=float)
        n = len(flow.blocks)
        if cov.shape != (n, n):
            raise WcetError(f"{fn.name}: covariance has shape {cov.shape}, expected ({n}, {n}) "
                            f"in the order of the function's blocks")
        x = np.array([counts[a] for a in flow.blocks], dtype=float)
        margin = path_margin(x, cov, z)

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
                                  cs.target_name, made.get(cs.block, 0), w, note,
                                  cap=call_caps.get(cs.target) if cs.target in cap_rows else None)
                      for cs, w, note in call_notes)
    in_loops = {a for lp in fn.loops for a in lp.body}
    for target, sites in cap_sites.items():
        n = sum(made.get(cs.block, 0) for cs in sites)
        # said only where the CFG allows more calls than the cap: a call in a loop
        if n and n >= call_caps[target] and any(cs.block in in_loops for cs in sites):
            warnings.append(f"{fn.name}: the worst path calls "
                            f"{sites[0].target_name or hexaddr(target)} {n} times, the most "
                            f"activations of it seen per measured call (observed): more calls "
                            f"are possible by the CFG")
    for co in calls_out:
        if co.count and co.kind in (CALL_IMPORTED, CALL_INDIRECT):
            warnings.append(f"{co.kind} call at {describe_block(fn, co.block)}"
                            f"{' to ' + co.target_name if co.target_name else ''} on the "
                            f"worst-case path ({co.count}×): {co.note}")

    binding_env = tuple(e for e in envelopes
                        if e.intercept + e.slope * counts.get(e.header, 0)
                        - sum(counts.get(a, 0) for a in e.blocks) < 1.0)
    executed = {a for a, n in counts.items() if n > 0}
    def tail_ticks(a: int) -> float:          # a conditional tail call's callees, in all
        return edge_callee.get(tail_edge[a], 0.0) * made[a] if a in tail_edge else 0.0

    path = tuple(PathStep(a, counts[a], own[a], callee_per_exec[a] + tail_ticks(a) / counts[a],
                          counts[a] * total_cost[a] + tail_ticks(a))
                 for a in flow.topo_order(executed))
    edge_flows = {flow.edges[i]: int(f[i]) for i in range(flow.n_cfg)}
    exit_flows = {flow.edges[i][0]: int(f[i]) for i in range(flow.source_var + 1, nv)}
    log.debug("%s: IPET bound %.1f ticks over %d blocks (%s)", fn.name, bound,
              len(executed), status)
    return IpetResult(function=fn.name, status=status, bound_ticks=bound, margin_ticks=margin,
                      entry_cost_ticks=float(entry_cost), block_counts=counts,
                      edge_flows=edge_flows, exit_flows=exit_flows, path=path,
                      loops=tuple(loops_out), calls=calls_out, warnings=tuple(warnings),
                      binding_envelopes=binding_env, broken_inputs=broken_inputs)


def _infeasible_reason(fn: FunctionModel, flow: Flow, reach: set[int],
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


def missing_loop_bounds(fn: FunctionModel, bounds: Mapping[int, Any],
                        forbidden: Iterable[int] = ()) -> list[tuple[int, str]]:
    """(header, "fn+0xOFF") of every loop reachable without ``forbidden`` that has no bound."""
    reach = Flow(fn).reachable(forbidden)
    return [(lp.header, loop_key(fn, lp.header)) for lp in fn.loops
            if lp.header in reach and lp.header not in bounds]


def unbounded_message(missing: Mapping[str, Sequence[tuple[int, str]]]) -> str:
    """One message for all the loops that need a bound, over all functions."""
    names = [n for loops in missing.values() for _, n in loops]
    per_fn = "; ".join(f"{fn}: " + ", ".join(f"{n} ({hexaddr(h)})" for h, n in loops)
                       for fn, loops in missing.items() if loops)
    return (f"no bound for loop(s) {per_fn} ({len(names)} in all): add e.g. \"{names[0]}\" = "
            f"N under [loops] in wcetfit.toml (N = most back-edge traversals per entry into "
            f"the loop), or inputs that execute them")
