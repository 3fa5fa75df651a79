"""Interprocedural composition: callees, recursion, the root's bound.

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
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import CALL_INDIRECT, CALL_INTERNAL, FunctionModel, hexaddr
from wcetfit.wcet.ipet import ipet, missing_loop_bounds, unbounded_message
from wcetfit.wcet.margin import inlined_margin
from wcetfit.wcet.result import (Z95, CountRelation, InfeasibleError, IpetResult, LoopBound,
                                 RecursionBoundError, UnboundedLoopError, WcetResult,
                                 describe_block)

log = logging.getLogger(__name__)

# A recursion's level-by-level WCET beyond this many ticks (4.6 days at 2.6 GHz) is no
# bound of any machine's: the unrolling stops there (and would overflow the solver's
# costs a few hundred levels later).
RECURSION_OVERFLOW_TICKS = 1e15


def entry_names(functions: Mapping[str, FunctionModel]) -> dict[int, str]:
    """Each function's name by its address and by its entry (the first one listed wins):
    what :func:`callee_name` resolves a call's target with."""
    by_addr: dict[int, str] = {}
    for name, fn in functions.items():
        by_addr.setdefault(fn.address, name)
        by_addr.setdefault(fn.entry, name)
    return by_addr


def callee_name(functions: Mapping[str, FunctionModel], by_addr: Mapping[int, str],
                cs) -> str | None:
    """The analysed function an internal call site goes to (None: not among them)."""
    if cs.target is not None and cs.target in by_addr:
        return by_addr[cs.target]
    if cs.target_name and cs.target_name in functions:
        return cs.target_name
    return None


def call_graph(functions: Mapping[str, FunctionModel], root: str) -> dict[str, list[str]]:
    """Internal callees of every function reachable from ``root`` (in call-site order)."""
    if root not in functions:
        raise WcetError(f"no model of the root function {root!r}")
    by_addr = entry_names(functions)
    graph: dict[str, list[str]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in graph:
            continue
        graph[name] = []
        for cs in functions[name].calls:
            if cs.kind == CALL_INDIRECT:
                # the targets the count run saw this site take, modelled as its callees
                for t in cs.observed_internal:
                    if t in by_addr and by_addr[t] not in graph[name]:
                        graph[name].append(by_addr[t])
                        todo.append(by_addr[t])
                continue
            if cs.kind != CALL_INTERNAL:
                continue
            callee = callee_name(functions, by_addr, cs)
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


def live_call_graph(functions: Mapping[str, FunctionModel], root: str,
                    unreached: Mapping[str, Iterable[int]]) -> dict[str, list[str]]:
    """:func:`call_graph` without the functions whose entry no input ran (``unreached``:
    function → blocks no input executed): a call of one is made from a block no input
    ran, which the worst path leaves out, so a recursive cycle through such a function is
    no recursion the bound must account for (libcrypto's SHA256 reaches one function of
    BIO_vsnprintf's cycle through the error functions, on no input the others)."""
    graph = call_graph(functions, root)
    gone = {n for n in graph if n != root and functions[n].entry in set(unreached.get(n, ()))}
    return {n: [c for c in cs if c not in gone] for n, cs in graph.items() if n not in gone}


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
               activation_facts: frozenset[str] = frozenset(),
               total_bounds: Mapping[str, Mapping[int, int]] = {},
               envelopes: Sequence[Any] = (),
               facts: Sequence[Any] = (),
               unreached: Mapping[str, Iterable[int]] = {},
               region_bounds: Mapping[str, Mapping[Any, int]] = {},
               inputs: Mapping[str, np.ndarray] = {},
               observed_depths: Mapping[str, int] = {},
               max_recursion_solves: int = 20000,
               _lumped: Mapping[str, tuple[IpetResult, dict]] | None = None) -> WcetResult:
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
    at once (see below); ``activation_bounds`` also caps the calls of a function from
    any non-recursive caller (observed, per call of the caller).
    ``unreached``: function → blocks no input executed, left out of the worst path (the
    ``[wcet] unreached = "observed"`` policy); a function whose entry is among them is
    not analysed (no input called it).  ``region_bounds``: function → the ``block_bounds``
    of :func:`~wcetfit.wcet.ipet.ipet` (irreducible regions) for functions other than the
    root (whose are ``block_bounds``).  ``inputs``: function → measured count vectors of
    single calls, in its ``block_addresses`` order, to check each IPET's answer against.
    ``observed_depths``: function → the most activations of its recursive cycle's functions
    seen in one call of the root (every member's, summed): the depth of a cycle no
    [recursion] entry names, said in the warnings as an observed fact (the nesting can
    be no deeper than the activations; another input may nest deeper, as it may loop
    longer).

    Every loop that needs a bound and has none, in all functions, is named in one
    :class:`UnboundedLoopError`.

    A callee g activated up to A ≥ 2 times per call of the root is charged its WCET per
    call; its observed loop totals are per call of the root, so per call they count up to
    A times over.  When the inputs showed A and g's block totals, all of g's activations
    are also bounded at once (one IPET over at most A entries, like a recursion below);
    a second pass charges g's calls nothing and adds that bound once, and the smaller of
    the two root bounds is taken (both rest on the same observed facts).

    Context-insensitive: each function gets one WCET, its worst over all callers.  A
    recursive cycle of depth D is computed level by level: at level 1 its in-cycle call
    blocks are forbidden, at level d they cost the level d−1 WCETs — exact for the
    given depth (tree recursion included), at the price of D solves per member.
    """
    graph = live_call_graph(functions, root, unreached)
    order_sccs = _sccs(graph, root)
    by_addr = entry_names(functions)

    results: dict[str, IpetResult] = {}
    lumps: dict[str, tuple[IpetResult, dict]] = {}
    wcet_of: dict[str, float] = {}
    inl: dict[str, dict[tuple[str, int], float]] = {}
    depth_used: dict[str, int] = {}
    warnings: list[str] = []

    def callee_costs(name: str, level_w: Mapping[str, float]) -> dict[int, float]:
        out: dict[Any, float] = {}
        for cs in functions[name].calls:
            seen = [by_addr.get(t) for t in cs.observed_internal]
            if cs.kind == CALL_INDIRECT and seen and all(g in level_w for g in seen):
                # one of them runs per execution: the largest of their WCETs
                out[("site", cs.instruction)] = max(level_w[g] for g in seen)  # type: ignore[index]
                continue
            if cs.kind != CALL_INTERNAL or cs.target is None:
                continue
            callee = callee_name(functions, by_addr, cs)
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
            callee = callee_name(functions, by_addr, cs)
            if not n or callee is None or callee not in level_inl:
                continue
            for k, v in level_inl[callee].items():
                vec[k] = vec.get(k, 0.0) + n * v
        return vec

    def fn_bounds(name: str) -> Mapping[int, int | LoopBound]:
        return bounds.get(name, {})

    def caps(name: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for cs in functions[name].calls:
            callee = callee_name(functions, by_addr, cs) if cs.kind == CALL_INTERNAL else None
            if callee is not None and callee in activation_bounds and cs.target is not None:
                out[cs.target] = int(activation_bounds[callee])
        return out

    missing = {n: missing_loop_bounds(functions[n], bounds.get(n, {}), unreached.get(n, ()))
               for n in graph}
    if any(missing.values()):
        missing = {n: m for n, m in missing.items() if m}
        raise UnboundedLoopError(unbounded_message(missing),
                                 [name for m in missing.values() for _, name in m])

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
                       facts=facts if name == root else (),
                       block_bounds=block_bounds if name == root else
                       region_bounds.get(name, {}),
                       forbidden_blocks=unreached.get(name, ()), call_caps=caps(name),
                       inputs=inputs.get(name))
            results[name] = res
            wcet_of[name] = res.bound_ticks - res.entry_cost_ticks
            inl[name] = inline(name, res, inl)
            A = int(activation_bounds.get(name, 0))
            if _lumped is not None and name in _lumped:
                # charged once in total, below: its calls cost nothing here
                results[name] = _lumped[name][0]
                wcet_of[name] = 0.0
                inl[name] = {}
            elif _lumped is None and name != root and A >= 2 and name in total_bounds:
                try:
                    agg = ipet(functions[name], fn_costs(name), fn_bounds(name),
                               callee_wcet=callee_costs(name, wcet_of), z=z, entries=A,
                               total_bounds=total_bounds[name],
                               block_bounds=region_bounds.get(name, {}),
                               forbidden_blocks=unreached.get(name, ()),
                               call_caps=caps(name))
                except InfeasibleError:
                    agg = None          # the observed totals contradict the CFG
                if agg is not None and agg.bound_ticks < A * wcet_of[name]:
                    lumps[name] = (agg, inline(name, agg, inl))
            continue

        given = {m: recursion_bounds[m] for m in comp if m in recursion_bounds}
        cycle = _find_cycle(graph, comp)
        seen_depth = max((int(observed_depths[m]) for m in comp if m in observed_depths),
                         default=0)
        if not given and seen_depth >= 1:
            given = {cycle[0]: seen_depth}
            # (glibc's msort_with_tmp under qsort: "depth 255", its activations, where it
            # nests about 9 deep on 256 elements)
            warnings.append(
                f"recursion {' -> '.join(cycle)}: taken as depth {seen_depth}, the most "
                f"activations of its functions in one call of {root} the inputs showed "
                f"(no nesting is deeper than the activations, and most are far shallower: a "
                f"safe but loose depth); another input may call it more: state its depth "
                f"with \"{cycle[0]}\" = D under [recursion]")
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
        # Each member's call blocks into the cycle, with the members they call (an
        # indirect site counts with the targets the inputs showed it calling).
        in_cycle: dict[str, dict[int, set[str]]] = {m: {} for m in comp}
        # (the all-activations bound below relates entries to direct calls only: an
        # indirect site may also call functions outside the cycle)
        direct_in_cycle: dict[str, set[int]] = {m: set() for m in comp}
        for m in comp:
            for cs in functions[m].calls:
                if cs.kind == CALL_INTERNAL:
                    called = {callee_name(functions, by_addr, cs)}
                elif cs.kind == CALL_INDIRECT:
                    called = {by_addr.get(t) for t in cs.observed_internal}
                else:
                    continue
                called &= members
                if called:
                    in_cycle[m].setdefault(cs.block, set()).update(called)
                    if cs.kind == CALL_INTERNAL:
                        direct_in_cycle[m].add(cs.block)
        # Level d: the WCET of an activation with at most d nested activations of the
        # cycle.  A member whose every path calls into the cycle has none at level 1
        # (f → g → f where f always calls g): it is left out of that level, and calls
        # to it are forbidden one level up, until every member has one.
        level_res: dict[str, IpetResult] = {}
        level_w: dict[str, float] = {}
        level_inl: dict[str, dict[tuple[str, int], float]] = {}
        stuck: dict[str, InfeasibleError] = {}
        exploded = 0                    # the level at which the bound left any machine's
        for d in range(1, depth + 1):
            if any(not math.isfinite(v) or v > RECURSION_OVERFLOW_TICKS
                   for v in level_w.values()):
                exploded = d - 1
                break
            new_res, new_w, new_inl = {}, {}, {}
            stuck = {}
            for m in comp:
                known = dict(wcet_of)
                known_inl = dict(inl)
                known.update(level_w)
                known_inl.update(level_inl)
                closed = {b for b, called in in_cycle[m].items()
                          if any(c not in level_w for c in called)}
                try:
                    r = ipet(functions[m], fn_costs(m), fn_bounds(m),
                             callee_wcet=callee_costs(m, known),
                             entry_cost=entry_cost if m == root else 0.0, z=z,
                             forbidden_blocks=set(unreached.get(m, ())) | closed)
                except InfeasibleError as exc:
                    stuck[m] = exc
                    continue
                new_res[m] = r
                new_w[m] = r.bound_ticks - r.entry_cost_ticks
                new_inl[m] = inline(m, r, known_inl)
            converged = d > 1 and new_w == level_w and not stuck
            level_res, level_w, level_inl = new_res, new_w, new_inl
            if converged:
                # W_d depends only on W_{d-1}: a fixed point stays one.
                log.debug("recursion %s: WCET stable from depth %d", comp, d)
                break
            if not level_w:
                break                   # no member returns without recursing
        if stuck:
            m, exc = next(iter(stuck.items()))
            why = ("the recursion is unbounded on every path" if not level_w else
                   f"a depth of {depth} is too small for it: give a larger one under "
                   "[recursion]")
            raise RecursionBoundError(
                f"recursion {' -> '.join(cycle)}: {m} cannot return within "
                f"{depth} nested activation(s) ({exc}): {why}", cycle) from exc
        for m in comp:
            results[m] = level_res[m]
            # levels that multiply past any machine's time (libc's qsort: msort calls
            # itself twice, and a depth of 2,000 activations doubled the cost 985 times,
            # to an overflow in the solver): no depth bound; the all-activations one below
            # is the bound, or there is none
            wcet_of[m] = math.inf if exploded else level_w[m]
            inl[m] = level_inl[m]
            depth_used[m] = depth
        if exploded and root in comp:
            raise RecursionBoundError(
                f"recursion {' -> '.join(cycle)}: bounded level by level its WCET passes "
                f"{RECURSION_OVERFLOW_TICKS:.0e} ticks after {exploded} of {depth} levels "
                f"(each activation makes several recursive calls): give the most nested "
                f"activations under [recursion], \"{cycle[0]}\" = D", cycle)
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
            for b in direct_in_cycle[m]:
                coef[b] = coef.get(b, 0) + 1
            coef[fn_m.entry] = coef.get(fn_m.entry, 0) - 1
            agg = None
            if A >= 1 and not fn_m.predecessors(fn_m.entry):
                try:
                    agg = ipet(fn_m, fn_costs(m), fn_bounds(m),
                               callee_wcet=callee_costs(m, {**wcet_of, m: 0.0}),
                               entry_cost=entry_cost if m == root else 0.0, z=z,
                               entries=A, total_bounds=total_bounds.get(m, {}),
                               forbidden_blocks=unreached.get(m, ()),
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
                    f"{A} per call of {root} "
                    + ("(from [recursion])" if m in activation_facts else "(observed)")
                    + f" and no block more often than on any input (observed), smaller "
                      f"than the depth-{depth} bound")
        elif len(comp) == 1 and comp[0] != root:
            m = comp[0]
            fn_m = functions[m]
            calls_in_loops = any(b in lp.body for lp in fn_m.loops for b in direct_in_cycle[m])
            if calls_in_loops or len(direct_in_cycle[m]) >= 2:
                # (the calls sample: tree_sum's left-child call in gcc's loop over the right
                # child, 9 per level over 10 levels: a bound of 2.4e10 ticks, 442,000× the
                # slowest input, with its activations released by a [loops] fact)
                warnings.append(
                    f"recursion of {m}: bounded level by level ({depth} levels), each "
                    f"activation making as many recursive calls as its "
                    + ("loops" if calls_in_loops else "call sites")
                    + f" allow: the levels multiply, and no count of its activations per "
                      f"call of {root} bounds them all at once (its calls run where a "
                      f"[loops] fact lets the inputs' counts be exceeded, or none was "
                      f"measured); give [recursion] \"{m}\" = {{ depth = {depth}, "
                      f"activations = A }} with A the most activations one call of {root} "
                      f"can make")
        for name in comp:
            if not math.isfinite(wcet_of.get(name, 0.0)):
                # (before its callers are bounded with it)
                raise RecursionBoundError(
                    f"recursion of {name}: bounded level by level its WCET passes "
                    f"{RECURSION_OVERFLOW_TICKS:.0e} ticks (each activation makes several "
                    f"recursive calls, and the levels multiply), and no count of its "
                    f"activations bounds them all at once: give [recursion] \"{name}\" = "
                    f"{{ depth = D, activations = A }}, D the most nested activations and A "
                    f"the most activations one call of {root} can make", [name])

    top = results[root]
    for name in graph:
        if name in results:
            warnings.extend(results[name].warnings)
    bound = top.bound_ticks
    counts_root = dict(inl[root])
    for name, (agg, vec) in (_lumped or {}).items():
        bound += agg.bound_ticks
        for k, v in vec.items():
            counts_root[k] = counts_root.get(k, 0.0) + v
        # (liblzma's match finders: "(0 ticks, added once)" for 4,092 activations a call,
        # read as a function that costs nothing)
        charged = (f"{agg.bound_ticks:,.0f} ticks, added once" if agg.bound_ticks >= 1 else
                   "no cost of its own: the inputs do not separate its blocks' costs from "
                   "its callers': its time is in their costs")
        warnings.append(
            f"{name}: all its activations bounded at once ({charged}): at most "
            f"{int(activation_bounds[name])} per call of {root}, no loop or "
            f"block more often in total than on any input (observed); charged per call it "
            f"would count its loops' totals once per call")

    margin = None
    if cov is not None:
        margin = inlined_margin(functions, counts_root, cov, cov_index, z, entry_cost)

    ordered = tuple(m for comp in order_sccs for m in comp if m in results)
    out = WcetResult(root=root, bound_ticks=bound, margin_ticks=margin,
                     functions=results, order=ordered, inlined_counts=counts_root,
                     recursion=depth_used, warnings=tuple(dict.fromkeys(warnings)))
    if lumps:
        alt = wcet_bound(functions, root, costs, bounds, recursion_bounds,
                         entry_cost=entry_cost, cov=cov, cov_index=cov_index, z=z,
                         relations=relations, block_bounds=block_bounds,
                         activation_bounds=activation_bounds, total_bounds=total_bounds,
                         envelopes=envelopes, facts=facts, unreached=unreached,
                         region_bounds=region_bounds, inputs=inputs,
                         observed_depths=observed_depths,
                         max_recursion_solves=max_recursion_solves, _lumped=lumps)
        if alt.bound_ticks < out.bound_ticks:
            log.info("%s: bound with callees %s lumped: %.0f < %.0f ticks", root,
                     ", ".join(lumps), alt.bound_ticks, out.bound_ticks)
            # Only the root's bound changes: a callee's own bound stays its WCET per call,
            # callees included (in the lumped pass a caller of a lumped function charges
            # it nothing, and showed MD5_Update at 3.3 ticks beside its 12,235-tick callee).
            from dataclasses import replace
            return replace(alt, functions={**out.functions, root: alt.functions[root]})
    return out
