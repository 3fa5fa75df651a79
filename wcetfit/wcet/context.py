"""Context-aware composition: every call site's callee as variables of one program.

:func:`wcetfit.wcet.interproc.wcet_bound` gives each callee one WCET and charges it per
execution of every calling block.  The count run's loop limits of a callee are totals
per call of the *root* (over all its activations), so charged per call they count up to
once per activation: a helper called 100 times whose loop ran 5 times from 99 call
sites and 500 times from one is charged 100 × 995 iterations.

Here the root and one *instance* of each callee per call site (per call path, for
callees of callees) are one integer program:

- each instance has its own edge variables (a copy of its function's CFG); the flow
  into an instance's entry equals the executions of the block that calls it in the
  calling instance (one call per execution), so a site that never runs has an empty
  instance and a site in a loop carries all its calls;
- a loop's per-entry bound holds in every instance (back edges ≤ N × entries, entries
  counting the instance's calls); a total per call of the function ([loops] facts:
  ``total``) likewise, ≤ T × calls;
- what the inputs showed per call of the root (the callee's loop totals, each block's
  most executions, its most activations, irreducible regions' work) bounds the sum over
  all instances of that function: the expensive site's count is charged once in all,
  never once per call of the cheap site;
- the root keeps its own constraints (observed relations, path envelopes, [flow] facts);
- an indirect call site has an instance of each target the count run saw it call, and
  those instances share the site's executions (one call per execution: their entries
  add up to the calling block's count, or at most to it when some targets run uncounted).

Functions of a recursive cycle stay context-insensitive (their per-call WCET from
:func:`~wcetfit.wcet.interproc.wcet_bound` is charged per execution of the calling
block), and a call tree larger than :data:`MAX_VARIABLES` edge variables is not built
(the context-insensitive bound stands, and the log says so).  Both bounds rest on the
same facts, so the smaller one is taken.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.model import CALL_INDIRECT, CALL_INTERNAL, FunctionModel
from wcetfit.wcet.flow import SINK, SOURCE, Flow, irreducible_blocks
from wcetfit.wcet.interproc import callee_name, entry_names
from wcetfit.wcet.result import (SOURCE_OBSERVED, CallOutcome, IpetResult, LoopBound,
                                 LoopOutcome, PathStep, as_loop_bound, loop_key)
from wcetfit.wcet.solve import Problem, Row, solve

log = logging.getLogger(__name__)

MAX_VARIABLES = 200_000      # edge variables over all instances (HiGHS stays in seconds)


@dataclass
class _Instance:
    fn: FunctionModel
    flow: Flow
    offset: int                    # first edge variable
    parent: int | None             # calling instance
    site: int | None               # calling block in the parent
    path: str                      # "root > f@0x… > g@0x…", for labels
    call: Any = None               # the CallSite in the parent that calls it
    # calling block → the per-call WCET of a callee without instances (recursive) that
    # its edges' costs carry, per execution
    charged: dict[int, float] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """An indirect site's target: the site's executions are shared among the
        instances of the targets it was seen calling (one per execution), not each
        one's alone."""
        return self.call is not None and self.call.kind != CALL_INTERNAL


@dataclass(frozen=True)
class ContextResult:
    """The composite program's optimum."""

    bound_ticks: float                         # entry cost included
    inlined_counts: dict[tuple[str, int], float]
    root: IpetResult                           # the root instance's view
    instances: int
    site_counts: dict[str, dict[int, int]]     # "path" → block → count, per instance
    status: str
    # the relations between loops of different functions the program kept (those whose
    # functions' instances hold all their activations)
    cross_relations: tuple[Any, ...] = ()


def context_bound(functions: Mapping[str, FunctionModel], root: str,
                  costs: Mapping[str, Mapping[int, float]],
                  bounds: Mapping[str, Mapping[int, int | LoopBound]], *,
                  per_call_wcet: Mapping[str, float] = {},
                  inline: Iterable[str] = (),
                  entry_cost: float = 0.0,
                  relations: Sequence[Any] = (),
                  envelopes: Sequence[Any] = (),
                  facts: Sequence[Any] = (),
                  block_bounds: Mapping[Any, int] = {},
                  region_bounds: Mapping[str, Mapping[Any, int]] = {},
                  activation_bounds: Mapping[str, int] = {},
                  total_bounds: Mapping[str, Mapping[int, int]] = {},
                  unreached: Mapping[str, Iterable[int]] = {},
                  callee_relations: Mapping[str, Sequence[Any]] = {},
                  callee_envelopes: Mapping[str, Sequence[Any]] = {},
                  cross_relations: Sequence[Any] = (),
                  span: tuple[Sequence[tuple[str, int]], np.ndarray] | None = None,
                  site_bounds: Mapping[tuple[str, int],
                                       Mapping[tuple[str, int], Any]] = {},
                  time_limit: float | None = 60.0) -> ContextResult | None:
    """The root's bound with one instance of each callee in ``inline`` per call path
    (module docstring).  Calls of other internal functions cost ``per_call_wcet`` per
    execution of the calling block (recursive cycles).  None when the call tree is too
    large or the solver gives no answer (the caller keeps its context-insensitive bound).

    The arguments mean what they mean for :func:`~wcetfit.wcet.interproc.wcet_bound`;
    ``block_bounds`` are the root's (irreducible flow), ``region_bounds`` the callees'.
    ``callee_relations`` / ``callee_envelopes``: function → count relations / path
    envelopes its totals per call of the root kept on every input (observed, like the
    root's ``relations`` and ``envelopes``): they hold for the sum over its instances.
    ``cross_relations``: lines between loops of two functions
    (:class:`~wcetfit.wcet.loop_hull.CrossLoopRelation`), each side the sum over that
    function's instances; left out where a function's instances do not hold all its
    activations (a recursive one's callees).

    ``span``: (columns, basis) of the affine span of the measured count vectors, the
    rows of ``basis`` spanning the row space of [counts, 1] over those (function,
    address) columns (measured rows, the last column 1).  Given, each column's total over the instances must be
    a point of that span (every count relation that held on every input, across
    functions: where the fit's costs are determined, whatever particular solution it
    took); the program is then solved as a linear program (its optimum bounds the integer
    one), and without the span when that fails.

    ``site_bounds``: (callee, loop header) → (caller, calling block) → bound, the [loops]
    facts of one call site (:func:`wcetfit.wcet.loops.parse_site_loop_facts`): in the
    instances called there, the fact replaces the loop's bound in ``bounds`` and stays out
    of the observed total over all sites."""
    inline = set(inline)
    by_addr = entry_names(functions)
    flows: dict[str, Flow] = {}

    def flow_of(name: str) -> Flow:
        if name not in flows:
            flows[name] = Flow(functions[name])
        return flows[name]

    def entered(cs) -> list[str]:
        """The analysed functions a call site enters: a direct call's callee, or the
        targets in the binary an indirect call was seen taking (observed)."""
        if cs.kind == CALL_INTERNAL:
            g = callee_name(functions, by_addr, cs)
            return [] if g is None else [g]
        if cs.kind == CALL_INDIRECT:
            return list(dict.fromkeys(by_addr[t] for t in cs.observed_internal
                                      if t in by_addr))
        return []

    # the call tree, breadth first
    inst: list[_Instance] = [_Instance(functions[root], flow_of(root), 0, None, None, root)]
    nv = len(inst[0].flow.edges)
    k = 0
    while k < len(inst):
        me = inst[k]
        for cs in me.fn.calls:
            for g in entered(cs):
                if g not in inline or g == root:
                    continue
                f = flow_of(g)
                inst.append(_Instance(functions[g], f, nv, k, cs.block,
                                      f"{me.path} > {g}@{loop_key(me.fn, cs.block)}",
                                      cs))
                nv += len(f.edges)
                if nv > MAX_VARIABLES:
                    log.info("%s: the call tree has more than %d edge variables per call "
                             "site: callees stay context-insensitive", root, MAX_VARIABLES)
                    return None
        k += 1

    cost = np.zeros(nv)
    lb = np.zeros(nv)
    ub = np.full(nv, np.inf)
    rows: list[Row] = []
    agg: dict[tuple[str, Any], tuple[dict[int, float], float, str]] = {}

    def add_agg(key: tuple[str, Any], coef: Mapping[int, float], hi: float, label: str) -> None:
        c, _, _ = agg.setdefault(key, ({}, hi, label))
        for i, v in coef.items():
            c[i] = c.get(i, 0.0) + v

    inst_of: dict[str, list[int]] = {}
    # (parent instance, indirect call instruction) → its targets' entry variables
    sites: dict[tuple[int, int | None], tuple[dict[int, float], _Instance]] = {}
    for k, me in enumerate(inst):
        fn, flow, o, name = me.fn, me.flow, me.offset, me.fn.name
        inst_of.setdefault(name, []).append(k)
        reach = flow.reachable(unreached.get(name, ()))
        c = costs.get(name, {})
        per_exec = {a: float(c.get(a, 0.0)) for a in flow.blocks}
        for cs in fn.calls:
            # a callee without instances (recursive) costs its per-call WCET at each
            # execution; an indirect site, the largest among such targets
            charged = [float(per_call_wcet[g]) for g in entered(cs)
                       if g not in inline and g in per_call_wcet]
            if charged:
                per_exec[cs.block] += max(charged)
                me.charged[cs.block] = me.charged.get(cs.block, 0.0) + max(charged)
        for i, (s, d) in enumerate(flow.edges):
            if s != SOURCE:
                cost[o + i] = per_exec[s]
            if (s != SOURCE and s not in reach) or (d not in reach and isinstance(d, int)):
                ub[o + i] = 0.0

        def cnt(blocks: Iterable[tuple[int, float]], me=me) -> dict[int, float]:
            return _counts_of(me, blocks)

        for a in flow.blocks:
            coef: dict[int, float] = {}
            for i in flow.ins[a]:
                coef[o + i] = coef.get(o + i, 0.0) + 1.0
            for i in flow.outs[a]:
                coef[o + i] = coef.get(o + i, 0.0) - 1.0
            rows.append(Row(coef, 0.0, 0.0, f"{me.path}: flow conservation at "
                                            f"{loop_key(fn, a)}"))
        src = o + flow.source_var
        if me.parent is None:
            lb[src] = ub[src] = 1.0
        elif me.shared:
            calls = sites.setdefault((me.parent, me.call.instruction), ({}, me))[0]
            calls[src] = 1.0
        else:
            coef = {src: 1.0}
            parent = inst[me.parent]
            exit_edge = (me.site, SINK)
            if me.call is not None and me.call.tail and parent.flow.succ.get(me.site) \
                    and exit_edge in parent.flow.var:
                # a conditional tail call (``jne`` to another function ending a block that
                # also falls through): one call per time the block leaves by that edge
                i = parent.offset + parent.flow.var[exit_edge]
                coef[i] = coef.get(i, 0.0) - 1.0
                what = "one call per exit of the calling block by its conditional tail call"
            else:
                for i, v in _counts_of(parent, [(me.site, 1.0)]).items():
                    coef[i] = coef.get(i, 0.0) - v
                what = "one call per execution of the calling block"
            rows.append(Row(coef, 0.0, 0.0, f"{me.path}: {what}"))
        for lp in fn.loops:
            b = bounds.get(name, {}).get(lp.header)
            if me.parent is not None:
                b = site_bounds.get((name, lp.header), {}).get(
                    (inst[me.parent].fn.name, me.site), b)
            if b is None:
                continue
            b = as_loop_bound(b)
            back, entry = flow.loop_vars(lp)
            key = loop_key(fn, lp.header)
            if b.per_entry is not None:
                coef = {o + i: 1.0 for i in back}
                for i in entry:
                    coef[o + i] = coef.get(o + i, 0.0) - float(b.per_entry)
                rows.append(Row(coef, -np.inf, 0.0, f"{me.path}: loop {key} ≤ {b.per_entry} "
                                                    f"per entry ({b.source})"))
            if b.total is not None and b.per_entry is None and entry:
                # no back edge without an entry: T per call of the function is at most T
                # per entry (else the loop could circulate in an instance never entered)
                coef = {o + i: 1.0 for i in back}
                for i in entry:
                    coef[o + i] = coef.get(o + i, 0.0) - float(b.total)
                rows.append(Row(coef, -np.inf, 0.0, f"{me.path}: loop {key} runs only when "
                                                    f"entered (≤ {b.total} per entry)"))
            if b.total is not None:
                if me.parent is None:
                    rows.append(Row({o + i: 1.0 for i in back}, -np.inf, float(b.total),
                                    f"loop {key} ≤ {b.total} per call ({b.source})"))
                elif b.source == SOURCE_OBSERVED:
                    # seen per call of the root, over all the function's activations
                    add_agg((name, ("loop", lp.header)), {o + i: 1.0 for i in back},
                            float(b.total), f"loop {key} ≤ {b.total} per call of {root}, all "
                                            f"call sites together (observed)")
                else:
                    coef = {o + i: 1.0 for i in back}
                    coef[src] = coef.get(src, 0.0) - float(b.total)
                    rows.append(Row(coef, -np.inf, 0.0, f"{me.path}: loop {key} ≤ {b.total} "
                                                        f"per call ({b.source})"))
        limits = block_bounds if me.parent is None else region_bounds.get(name, {})
        irr = irreducible_blocks(flow, reach)
        for a in irr:
            if a in limits:
                add_agg((name, a), cnt([(a, 1.0)]), float(limits[a]),
                        f"irreducible block {loop_key(fn, a)} ≤ {limits[a]} (observed)")
        for key, v in limits.items():
            if isinstance(key, tuple) and key[0] == "region":
                comp = _region(flow, irr, key[1])
                add_agg((name, key), cnt((a, 1.0) for a in comp), float(v),
                        f"irreducible region at {loop_key(fn, key[1])} ≤ {v} (observed)")
        if me.parent is not None:
            for a, t in total_bounds.get(name, {}).items():
                if a in flow.outs:
                    add_agg((name, ("block", a)), cnt([(a, 1.0)]), float(t),
                            f"{loop_key(fn, a)} ≤ {t} per call of {root} (observed)")
            if name in activation_bounds:
                add_agg((name, "calls"), {src: 1.0}, float(activation_bounds[name]),
                        f"calls of {name} ≤ {activation_bounds[name]} per call of {root} "
                        f"(observed)")
        if me.parent is None:
            for env in envelopes:
                coef = cnt([(a, 1.0) for a in env.blocks] + [(env.header, -float(env.slope))])
                rows.append(Row(coef, -np.inf, float(env.intercept),
                                f"path envelope {env.text()} (observed)"))
            for fact in facts:
                rows.append(Row(cnt(fact.coefficients), float(fact.low), float(fact.high),
                                fact.label))
            for rel in relations:
                rows.append(Row(cnt(rel.coefficients), float(rel.rhs), float(rel.rhs),
                                f"count relation {rel.text()} (observed)"))
    for coef, hi, label in agg.values():
        rows.append(Row(coef, -np.inf, hi, label))
    # An indirect site calls one target per execution: its targets' instances share the
    # executions of the calling block (all of them when every target seen is one of
    # them; at most all when some run uncounted, outside the binary or recursive).
    for (parent, call), (coef, me) in sites.items():
        cs = me.call
        every = all(t.address is not None and by_addr.get(t.address) in inline
                    for t in cs.observed)
        coef = dict(coef)
        for i, v in _counts_of(inst[parent], [(me.site, 1.0)]).items():
            coef[i] = coef.get(i, 0.0) - v
        rows.append(Row(coef, 0.0 if every else -np.inf, 0.0,
                        f"{inst[parent].path}: the calls of the indirect call at "
                        f"{loop_key(inst[parent].fn, call)} shared among its observed "
                        f"targets, one per execution of the calling block"))
    # what a callee's totals per call of the root kept on every input, over all its sites
    for name, ks in inst_of.items():
        if ks[0] == 0:
            continue
        def total(weights: Iterable[tuple[int, float]], ks=ks) -> dict[int, float]:
            out: dict[int, float] = {}
            weights = list(weights)
            for k in ks:
                out.update(_counts_of(inst[k], weights))   # (instances' variables differ)
            return out
        for rel in callee_relations.get(name, ()):
            rows.append(Row(total(rel.coefficients), float(rel.rhs), float(rel.rhs),
                            f"{name}: count relation {rel.text()} per call of {root}, all "
                            f"call sites together (observed)"))
        for env in callee_envelopes.get(name, ()):
            rows.append(Row(total([(a, 1.0) for a in env.blocks]
                                  + [(env.header, -float(env.slope))]),
                            -np.inf, float(env.intercept),
                            f"{name}: path envelope {env.text()} per call of {root}, all "
                            f"call sites together (observed)"))

    # A function that a recursive one calls (transitively) runs activations no instance
    # holds: the measured totals of its blocks count them, the instances' totals do not,
    # so its columns stay out of the span and of the relations across functions (like
    # the recursive ones').
    partial: set[str] = set()
    todo = [g for g in per_call_wcet if g not in inline]
    while todo:
        for cs in functions[todo.pop()].calls:
            for g in entered(cs):
                if g not in partial and g in functions:
                    partial.add(g)
                    todo.append(g)
    whole = {n: ks for n, ks in inst_of.items() if n not in partial}
    kept = tuple(r for r in cross_relations if r.y[0] in whole and r.x[0] in whole)
    for rel in kept:
        (fy, hy), (fx, hx) = rel.y, rel.x
        coef: dict[int, float] = {}
        for name, addr, weight in ((fy, hy, 1.0), (fx, hx, -float(rel.slope))):
            for k in whole[name]:
                for i, v in _counts_of(inst[k], [(addr, weight)]).items():
                    coef[i] = coef.get(i, 0.0) + v
        rows.append(Row(coef, -np.inf, float(rel.intercept),
                        f"loops of two functions: {rel.text()} per call of {root}, all "
                        f"call sites together (observed)"))

    if span is not None:
        got = _solve_in_span(inst, whole, cost, lb, ub, rows, span,
                             None if time_limit is None else min(time_limit, 20.0))
        if got is not None:
            return _result(inst, got, cost, float(got @ cost), bounds, root, entry_cost,
                           per_call_wcet, "optimal (linear relaxation, in the observed span)",
                           kept)
        log.info("%s: the per-call-site program in the observed span gave no answer: "
                 "solved without it", root)
    sol = solve(Problem(cost, lb, ub, rows), time_limit=time_limit)
    if sol.flow is None:
        log.info("%s: the per-call-site program gave no answer (%s): callees stay "
                 "context-insensitive", root, sol.message)
        return None
    f = sol.flow
    value = float(cost @ f)
    if sol.status != "optimal":
        if sol.dual_bound is None:
            return None
        value = max(value, float(sol.dual_bound))

    return _result(inst, f, cost, value, bounds, root, entry_cost, per_call_wcet, sol.status,
                   kept)


def _counts_of(me: _Instance, blocks: Iterable[tuple[int, float]]) -> dict[int, float]:
    """Σ weight · executions of each block in one instance, as coefficients over its
    edge variables (a block's executions are the flows out of it)."""
    out: dict[int, float] = {}
    for a, v in blocks:
        for i in me.flow.outs.get(a, ()):
            out[me.offset + i] = out.get(me.offset + i, 0.0) + float(v)
    return out


def _solve_in_span(inst: Sequence[_Instance], inst_of: Mapping[str, list[int]],
                   cost: np.ndarray, lb: np.ndarray, ub: np.ndarray, rows: list[Row],
                   span: tuple[Sequence[tuple[str, int]], np.ndarray],
                   time_limit: float | None) -> np.ndarray | None:
    """The optimal flows of the linear relaxation with every column's total over the
    instances kept to the observed affine span (extra free variables λ: total = Bᵀλ, and
    the ones-column of B times λ = 1); None on failure or when the check fails."""
    from wcetfit.wcet.solve import _milp, violations

    cols, B = span
    B = np.asarray(B, dtype=float)
    r = B.shape[0]
    nv = cost.shape[0]
    extra: list[Row] = []
    for j, (name, a) in enumerate(cols):
        coef: dict[int, float] = {}
        for k in inst_of.get(name, ()):
            coef.update(_counts_of(inst[k], [(a, 1.0)]))
        if not coef:
            continue            # a function without instances (recursive), or with
                                # activations outside them: free
        for i in range(r):
            if B[i, j]:
                coef[nv + i] = -float(B[i, j])
        extra.append(Row(coef, 0.0, 0.0, f"count of {name} {a:#x} in the observed span"))
    extra.append(Row({nv + i: float(B[i, -1]) for i in range(r) if B[i, -1]}, 1.0, 1.0,
                     "the call itself in the observed span"))
    p = Problem(np.concatenate([cost, np.zeros(r)]), np.concatenate([lb, np.full(r, -np.inf)]),
                np.concatenate([ub, np.full(r, np.inf)]), rows + extra)
    for presolve in (True, False):
        # (HiGHS's presolve has answered "not set" on zlib's inflate where the plain
        # simplex finds the optimum)
        try:
            res, _ = _milp(p, presolve=presolve, integral=False, time_limit=time_limit)
        except ValueError as exc:
            log.info("observed span: %s", exc)
            return None
        if res.x is None or res.status != 0:
            log.info("observed span, presolve %s: %s", presolve, res.message)
            continue
        x = np.asarray(res.x, dtype=float)
        # the relaxation's flows are checked like the integer program's, not for integrality
        bad = [v for v in violations(p, x, tol=1e-5) if v != "integrality"]
        if bad:
            log.info("observed span: the answer breaks %s", "; ".join(bad[:3]))
            continue
        return np.maximum(x[:nv], 0.0)
    return None


def _result(inst: Sequence[_Instance], f: np.ndarray, cost: np.ndarray, value: float,
            bounds: Mapping[str, Mapping[int, Any]], root: str, entry_cost: float,
            per_call_wcet: Mapping[str, float], status: str,
            cross_relations: tuple[Any, ...] = ()) -> ContextResult:
    inlined: dict[tuple[str, int], float] = {}
    site_counts: dict[str, dict[int, int]] = {}
    sub_value = np.zeros(len(inst))          # each instance's ticks, its sub-instances in
    for k in range(len(inst) - 1, -1, -1):
        me = inst[k]
        o = me.offset
        exact = {a: float(sum(f[o + i] for i in me.flow.outs[a])) for a in me.flow.blocks}
        site_counts[me.path] = {a: int(round(n)) for a, n in exact.items()}
        for a, n in exact.items():
            if n > 1e-9:
                inlined[(me.fn.name, a)] = inlined.get((me.fn.name, a), 0.0) + n
        sub_value[k] += sum(cost[o + i] * f[o + i] for i in range(len(me.flow.edges)))
        if me.parent is not None:
            sub_value[me.parent] += sub_value[k]
    root_view = _root_view(inst, 0, f, cost, sub_value, bounds.get(root, {}),
                           float(entry_cost), per_call_wcet)
    return ContextResult(bound_ticks=float(entry_cost) + value, inlined_counts=inlined,
                         root=root_view, instances=len(inst), site_counts=site_counts,
                         status=status, cross_relations=cross_relations)


def _region(flow: Flow, irr: Sequence[int], lowest: int) -> set[int]:
    import networkx as nx

    part = set(irr)
    g = nx.DiGraph([(s, d) for s in part for d in flow.succ[s] if d in part])
    for comp in nx.strongly_connected_components(g):
        if min(comp) == lowest:
            return set(comp)
    return set()


def _root_view(inst: Sequence[_Instance], k: int, f: np.ndarray, cost: np.ndarray,
               sub_value: np.ndarray, bounds: Mapping[int, Any], entry_cost: float,
               per_call_wcet: Mapping[str, float]) -> IpetResult:
    """The root instance as an :class:`IpetResult`: its counts, and per calling block the
    ticks of the instances it calls (their own callees included) per execution."""
    me = inst[k]
    fn, flow, o = me.fn, me.flow, me.offset
    counts = {a: int(round(sum(f[o + i] for i in flow.outs[a]))) for a in flow.blocks}
    own = {a: float(cost[o + flow.outs[a][0]]) if flow.outs[a] else 0.0 for a in flow.blocks}
    callee_ticks: dict[int, float] = {}
    for j, child in enumerate(inst):
        if child.parent == k:
            callee_ticks[child.site] = callee_ticks.get(child.site, 0.0) + sub_value[j]
    per_exec = {a: (callee_ticks.get(a, 0.0) / counts[a]) if counts[a] else 0.0
                for a in flow.blocks}
    path = tuple(PathStep(a, counts[a], own[a], per_exec[a],
                          counts[a] * own[a] + callee_ticks.get(a, 0.0))
                 for a in flow.topo_order({a for a, n in counts.items() if n}))
    loops = []
    for lp in fn.loops:
        if lp.header not in bounds:
            continue
        b = as_loop_bound(bounds[lp.header])
        back, entry = flow.loop_vars(lp)
        nb = int(round(sum(f[o + i] for i in back)))
        ne = int(round(sum(f[o + i] for i in entry)))
        binding = ne > 0 and ((b.per_entry is not None and b.per_entry * ne - nb < 0.5)
                              or (b.total is not None and b.total - nb < 0.5))
        loops.append(LoopOutcome(lp.header, loop_key(fn, lp.header), b, ne, nb, binding))

    def outcome(cs) -> CallOutcome:
        if cs.kind == CALL_INTERNAL:
            ticks, note = per_exec[cs.block], ("per call site: this site's instance of the "
                                                "callee, its own callees included, per "
                                                "execution of the calling block")
        elif cs.kind == CALL_INDIRECT and cs.block in callee_ticks:
            ticks, note = per_exec[cs.block], ("per call site: the instances of the targets "
                                                "this site was seen calling (observed), "
                                                "their own callees included, per execution "
                                                "of the calling block")
        else:
            ticks, note = None, "not modelled"
        if cs.block in me.charged:
            recursive = ("the whole-call WCET of a recursive callee (bounded per function, "
                         "not per call site) per execution of the calling block")
            ticks, note = ((me.charged[cs.block], recursive) if cs.block not in callee_ticks
                           else (ticks + me.charged[cs.block], f"{note}; plus {recursive}"))
        return CallOutcome(cs.block, cs.instruction, cs.kind, cs.target, cs.target_name,
                           counts.get(cs.block, 0), ticks, note)

    calls = tuple(outcome(cs) for cs in fn.calls)
    value = entry_cost + float(sub_value[k])
    return IpetResult(function=fn.name, status="optimal", bound_ticks=value, margin_ticks=None,
                      entry_cost_ticks=entry_cost, block_counts=counts,
                      edge_flows={flow.edges[i]: int(round(f[o + i]))
                                  for i in range(flow.n_cfg)},
                      exit_flows={flow.edges[i][0]: int(round(f[o + i]))
                                  for i in range(flow.source_var + 1, len(flow.edges))},
                      path=path, loops=tuple(loops), calls=calls)
