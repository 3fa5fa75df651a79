"""The WCET from the pipeline's plain data: the fit's costs, the counts, the target's facts."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetError
from wcetfit.model import FunctionModel
from wcetfit.wcet.flow import Flow, irreducible_blocks
from wcetfit.wcet.interproc import call_graph, entry_names, wcet_bound
from wcetfit.wcet.loops import (functions_called, loosest, merge_loop_bounds,
                                observed_loop_bounds, parse_loop_facts,
                                parse_site_loop_facts)
from wcetfit.wcet.relations import is_structural, observed_relations
from wcetfit.wcet.result import OVERHEAD, Z95, LoopBound, WcetResult, loop_key

log = logging.getLogger(__name__)


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
                 recursion_activations: Mapping[str, int] = {},
                 entry_cost: float = 0.0,
                 cov: np.ndarray | None = None,
                 cov_index: Sequence[tuple[str, int] | str] | None = None,
                 z: float = Z95, use_relations: bool = True,
                 observed_paths: bool = True,
                 unreached: str = "observed",
                 flow_facts: Mapping[str, str] = {},
                 per_site: bool = True) -> WcetResult:
    """The WCET of ``root`` from the pipeline's data: observed loop bounds from ``counts``
    (columns named by (function, address)), replaced by the target file's [loops] facts
    where given, then :func:`wcet_bound`.  ``recursion`` is the target's [recursion].
    ``observed_paths``: also keep the root's loops within the path envelopes the inputs
    showed (:mod:`wcetfit.wcet.envelope`; the target's ``[wcet] observed_paths``).
    ``recursion_activations``: the target's [recursion] activations (most activations of
    a recursive function per call of the root), in place of the observed figure.
    ``flow_facts``: the target's ``[flow]`` (:mod:`wcetfit.wcet.flowfacts`), constraints on
    the root's block counts per call.
    ``unreached``: the target's ``[wcet] unreached``: "observed" leaves the blocks no input
    executed out of the worst path (listed first among the warnings, and in
    ``WcetResult.unreached``); "require" bounds them like the rest (their loops need
    [loops] facts).  ``per_site``: also bound the callees per call site
    (:mod:`wcetfit.wcet.context`) and keep the smaller bound."""
    if unreached not in ("observed", "require"):
        raise WcetError(f"unreached policy must be \"observed\" or \"require\", not "
                        f"{unreached!r}")
    facts = parse_loop_facts(loop_facts, functions)
    site_facts = parse_site_loop_facts(loop_facts, functions)
    from wcetfit.wcet.flowfacts import parse_flow_facts, root_constraints
    user_facts = root_constraints(parse_flow_facts(flow_facts, functions), functions[root])
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
    # one WCET per call of a function (context-insensitive) holds at every call site: a
    # loop with call sites' facts takes the loosest of them and its general bound there
    uniform = {n: dict(b) for n, b in bounds.items()}
    for (name, header), sites in site_facts.items():
        if name not in uniform:
            continue
        general = bounds[name].get(header)
        if general is None and not _every_site(functions, names, name, sites):
            continue        # a site without a fact has no bound: the bound asks for one
        uniform[name][header] = loosest(general, sites.values())
    # the loops whose facts reach beyond what the inputs ran release their blocks from
    # the observed limits; a fact at the inputs' own figure releases nothing: no
    # execution it allows lies beyond them (a release costs a recursive callee its
    # observed activations, and a tree walk bounded level by level multiplies)
    beyond = {k for k, b in facts.items()
              if _beyond_observed(b, observed.get(k[0], {}).get(k[1]))}
    user_bounded = _user_bounded_blocks(functions, names, beyond | set(site_facts))
    idx = [j for j, (f, _) in enumerate(cols) if f == root]
    # (under "require" the blocks no input ran must be able to run: a relation the inputs
    # kept, every one of them taking the long path, N(long) = N(entry), forbids the
    # path through them: libdeflate's crc32 kept its early return at 0 under "require")
    ran_all = not idx or bool(np.asarray(counts)[:, idx].any(axis=0).all())
    relations = observed_relations(np.asarray(counts)[:, idx], [cols[j][1] for j in idx]) \
        if idx and use_relations and (unreached == "observed" or ran_all) else ()
    C = np.asarray(counts)
    block_max: dict[Any, int] = {}
    region_bounds: dict[str, dict[Any, int]] = {}
    unreached_blocks: dict[str, tuple[int, ...]] = {}
    inputs: dict[str, np.ndarray] = {}
    for name in names:
        fn = functions[name]
        pos = {a: j for j, (f, a) in enumerate(cols) if f == name}
        limits = _observed_block_limits(fn, C, pos)
        if name == root:
            block_max = limits
        else:
            region_bounds[name] = limits
        if not all(a in pos for a in fn.block_addresses):
            continue
        X = C[:, [pos[a] for a in fn.block_addresses]]
        if unreached == "observed":
            gone = tuple(a for j, a in enumerate(fn.block_addresses) if not X[:, j].any())
            if gone:
                unreached_blocks[name] = gone
        # single calls of the function: every row for the root; for a callee the rows
        # where it ran exactly once (its entry has no predecessor inside it)
        if name == root:
            inputs[name] = X
        elif not fn.predecessors(fn.entry):
            inputs[name] = X[X[:, fn.block_addresses.index(fn.entry)] == 1]
    # Most activations per call of the root, for recursive callees and as a cap on any
    # callee's calls: their entry block's count, where no edge inside the function leads
    # back to it.
    activations: dict[str, int] = {}
    totals: dict[str, dict[int, int]] = {}
    for name in names:
        fn = functions[name]
        pos = [j for j, (f, a) in enumerate(cols) if f == name and a == fn.entry]
        if name != root and pos and not fn.predecessors(fn.entry):
            if fn.entry not in user_bounded.get(name, ()):
                activations[name] = int(C[:, pos[0]].max(initial=0))
            # (under "require", blocks no input ran are bounded by the facts, not by 0)
            totals[name] = {a: int(C[:, j].max(initial=0))
                            for j, (f, a) in enumerate(cols)
                            if f == name and (unreached == "observed" or C[:, j].any())
                            and a not in user_bounded.get(name, ())}
    for name, a in recursion_activations.items():
        if name in names and name != root:
            activations[name] = int(a)      # the user's figure, released or not
    depths = _observed_recursion_depths(functions, names, root, C, cols, recursion)
    envelopes: tuple[Any, ...] = ()
    if idx and observed_paths:
        from wcetfit.wcet.envelope import observed_envelopes
        from wcetfit.wcet.loop_hull import loop_relations
        addrs = [cols[j][1] for j in idx]
        # (the root's are kept under its facts: isort's triangle, the inner loop's total
        # following the outer's count, holds the bound to what a sort can do where the
        # per-entry facts alone allow twice that; they are listed as observed)
        envelopes = observed_envelopes(functions[root], np.asarray(counts)[:, idx], addrs) \
            + loop_relations(functions[root], np.asarray(counts)[:, idx], addrs)
        # ... except over a loop whose fact lies well beyond the inputs: liblzma's crc32,
        # "+0x70" = 2047 where inputs ran 1,023, stayed at 1,023 through the hull line
        # N(+0x70) ≤ 1024 − 0.14·N(+0x28), the inputs' longest buffer, the very figure
        # the fact replaces.  isort's inner fact, 256 against 255 seen, is the one more
        # a header count gives (README), and keeps its triangle.
        envelopes = _clear_of(_released_root_blocks(functions[root], facts,
                                                    observed.get(root, {})), envelopes)
    result = wcet_bound(functions, root, costs, uniform, recursion, entry_cost=entry_cost,
                        cov=cov, cov_index=cov_index, z=z, relations=relations,
                        envelopes=envelopes, facts=user_facts,
                        block_bounds=block_max, activation_bounds=activations,
                        total_bounds=totals, unreached=unreached_blocks,
                        region_bounds=region_bounds, inputs=inputs,
                        observed_depths=depths,
                        activation_facts=frozenset(recursion_activations))
    result = replace(result, unreached_policy=unreached)
    insensitive = result      # the per-call-site bound below replaces it when smaller
    if per_site:
        # what each callee's totals per call of the root kept on every input, for the
        # per-call-site program (where they bound the sum over the callee's call sites);
        # its count relations are in the observed span below (exact ones per callee cost
        # a null space per relation: 90 s on zlib's inflate)
        callee_rel: dict[str, tuple[Any, ...]] = {}
        callee_env: dict[str, tuple[Any, ...]] = {}
        for name in names:
            jdx = [j for j, (f, _) in enumerate(cols) if f == name]
            if name == root or not jdx:
                continue
            addrs = [cols[j][1] for j in jdx]
            if observed_paths:
                from wcetfit.wcet.envelope import observed_envelopes
                from wcetfit.wcet.loop_hull import loop_relations
                callee_env[name] = _clear_of(user_bounded.get(name, set()),
                                             observed_envelopes(functions[name], C[:, jdx],
                                                                addrs)
                                             + loop_relations(functions[name], C[:, jdx],
                                                              addrs))
        cross: tuple[Any, ...] = ()
        if observed_paths:
            from wcetfit.wcet.loop_hull import cross_loop_relations
            cross = cross_loop_relations(functions, names, C, cols, excluded=user_bounded)
        span = None
        # (under "require" the blocks no input ran must be able to run: the span, made of
        # the inputs' counts, would keep them from it through the relations among the rest)
        if use_relations and unreached == "observed" and len(C):
            ran = [j for j in range(C.shape[1]) if C[:, j].any()
                   and cols[j][1] not in user_bounded.get(cols[j][0], ())]
            span = ([cols[j] for j in ran], _span_rows(C[:, ran]))
        result = _per_call_site(result, functions, root, costs, bounds, C, cols,
                                site_bounds=site_facts,
                                callee_relations=callee_rel, callee_envelopes=callee_env,
                                cross_relations=cross, span=span,
                                entry_cost=entry_cost, cov=cov, cov_index=cov_index, z=z,
                                relations=relations, envelopes=envelopes, facts=user_facts,
                                block_bounds=block_max, region_bounds=region_bounds,
                                activation_bounds=activations, total_bounds=totals,
                                unreached=unreached_blocks)
    if site_facts:
        def call_at(c: str, blk: int) -> str:
            ins = [cs.instruction for cs in functions[c].calls if cs.block == blk]
            return loop_key(functions[c], ins[0] if ins else blk)

        listed = [f"{loop_key(functions[n], h)} {b.describe()} at the call at "
                  f"{call_at(c, blk)}"
                  for (n, h), sites in site_facts.items() for (c, blk), b in sites.items()]
        per_site_used = result is not insensitive
        note = (f"{root}: {len(listed)} loop bound(s) given per call site in [loops] ("
                + "; ".join(listed[:4]) + ("; …" if len(listed) > 4 else "") + ")"
                + (": each holds in that site's instance of its function" if per_site_used
                   else ": the per-call-site bound was not used, so each loop is charged "
                        "the loosest of its bounds at every call site")
                + "; if one is not a fact of the program, the bound does not hold")
        result = replace(result, warnings=result.warnings + (note,))
    if user_facts:
        note = (f"{root}: the bound rests on {len(user_facts)} flow fact(s) given in [flow] ("
                + "; ".join(f.label.split(": ", 1)[1].rsplit(" (", 1)[0]
                            for f in user_facts[:3]) + ("; …" if len(user_facts) > 3 else "")
                + "): if one is not a fact of the program, the bound does not hold")
        result = replace(result, warnings=result.warnings + (note,))
    if unreached_blocks:
        result = replace(result, unreached=unreached_blocks,
                         warnings=(unreached_note(functions, unreached_blocks),)
                         + result.warnings)
    binding = result.functions[root].binding_envelopes if root in result.functions else ()
    if binding:
        shown = "; ".join(e.text() for e in binding[:3]) + ("; …" if len(binding) > 3 else "")
        note = (f"{root}: the worst path is held to {len(binding)} path envelope(s) that "
                f"every input kept ({shown}): the CFG allows those blocks more often; an "
                f"input that runs them more often could take longer (observed; "
                f"[wcet] observed_paths = false bounds by the CFG alone)")
        result = replace(result, envelopes=tuple(binding), warnings=result.warnings + (note,))
    extra = [r for r in relations if not is_structural(functions[root], r)]
    if not extra:
        return result
    shown = "; ".join(r.text() for r in extra[:3]) + ("; …" if len(extra) > 3 else "")
    note = (f"{root}: the bound keeps to {len(extra)} count relation(s) that held on every "
            f"input but are not forced by the CFG ({shown}); an input breaking them could "
            f"take longer: vary the inputs if they are not facts of the program")
    return replace(result, relations=tuple(extra), warnings=result.warnings + (note,))


def _user_bounded_blocks(functions: Mapping[str, FunctionModel], names: Iterable[str],
                         loops: set[tuple[str, int]]) -> dict[str, set[int]]:
    """Function → the blocks whose counts a [loops] fact governs: the bodies of the loops
    the user bounded (``loops``: (function, header)), and every block of the functions
    called from them, transitively.  The inputs' per-call totals of these blocks (and the
    span of the inputs' count vectors over them) must not cap the worst path: the user's
    figure may lie beyond what the inputs ran, and it is the figure the user gave."""
    names = list(names)
    by_addr = entry_names(functions)
    out: dict[str, set[int]] = {}
    for name in names:
        for lp in functions[name].loops:
            if (name, lp.header) in loops:
                out.setdefault(name, set()).update(lp.body)
    todo = list(out)
    while todo:
        name = todo.pop()
        for cs in functions[name].calls:
            if cs.block not in out.get(name, ()):
                continue
            g = functions_called(functions[name], cs.block, functions, by_addr)
            if g is None or g not in names:
                continue
            every = set(functions[g].block_addresses)
            if not every <= out.get(g, set()):
                out.setdefault(g, set()).update(every)
                todo.append(g)
    return out


def _beyond_observed(fact: LoopBound, seen: LoopBound | None, *, slack: int = 0,
                     unseen: bool = True) -> bool:
    """Whether a [loops] fact allows more than the inputs ran: a figure per entry or per
    call more than ``slack`` above the observed bound's, or a figure where none was
    observed (``unseen``: whether a figure the inputs did not show counts as beyond)."""
    if seen is None:
        return True

    def exceeds(given: int | None, shown: int | None) -> bool:
        return given is not None and (unseen if shown is None else given > shown + slack)

    return (exceeds(fact.per_entry, seen.per_entry) or exceeds(fact.total, seen.total)
            or (fact.total is None and fact.per_entry is None))


# A [loops] fact at most this many iterations above the inputs' own figure keeps the
# root's envelopes over its loop: the README's loop facts may count header runs, one more
# than the back edges counted.
HEADER_COUNT_SLACK = 1


def _released_root_blocks(fn: FunctionModel, facts: Mapping[tuple[str, int], LoopBound],
                          seen: Mapping[int, LoopBound]) -> set[int]:
    """The blocks of ``fn``'s loops whose [loops] fact allows more than the inputs ran,
    beyond :data:`HEADER_COUNT_SLACK`, per entry or per call where the inputs showed that
    figure: the root's observed envelopes over them no longer hold the worst path.

    A figure the inputs did not show is no evidence against them: isort's inner loop,
    entered 255 times a call, has an observed total (32,385) and no per-entry figure, and
    its per-entry fact (256) allows twice that total only because it cannot say the
    triangle its envelope keeps."""
    out: set[int] = set()
    for lp in fn.loops:
        fact = facts.get((fn.name, lp.header))
        if fact is not None and _beyond_observed(fact, seen.get(lp.header),
                                                 slack=HEADER_COUNT_SLACK, unseen=False):
            out.update(lp.body)
    return out


def _clear_of(bounded: set[int], envelopes: Sequence[Any]) -> tuple[Any, ...]:
    """A callee's observed path envelopes that touch no block a [loops] fact governs
    (:func:`_user_bounded_blocks`): in the per-call-site program they bound the callee's
    totals per call of the root, and one over such a loop kept it to the iterations the
    inputs ran, against the user's figure (libm's remquo: __fmod_finite's loop, given
    2,097 iterations, stayed at the inputs' 2,039 while the report said the bound rested
    on the fact)."""
    return tuple(e for e in envelopes
                 if not bounded & {*e.blocks, e.header})


def _every_site(functions: Mapping[str, FunctionModel], names: Iterable[str], callee: str,
                sites: Mapping[tuple[str, int], Any]) -> bool:
    """Whether every direct call of ``callee`` among the functions ``names`` has a fact."""
    by_addr = entry_names(functions)
    return all((name, cs.block) in sites for name in names for cs in functions[name].calls
               if functions_called(functions[name], cs.block, functions, by_addr) == callee)


def _span_rows(X: np.ndarray) -> np.ndarray:
    """Measured rows [counts, 1] that span the row space of all of them (linearly
    independent, chosen by pivoted QR among the distinct rows).  Integers, unlike an
    orthonormal basis of the same space: HiGHS's presolve has failed on the latter (and
    taken 60 s on one run) where it solves the former in under a second (zlib's
    uncompress, 505 columns, rank 94)."""
    from scipy.linalg import qr

    A = np.unique(np.hstack([np.asarray(X, dtype=float), np.ones((len(X), 1))]), axis=0)
    _, R, piv = qr(A.T, mode="economic", pivoting=True)
    d = np.abs(np.diag(R)) if R.size else np.zeros(0)
    tol = d.max(initial=0.0) * max(A.shape) * np.finfo(float).eps * 10
    return A[np.sort(piv[:int((d > tol).sum())])]


def _observed_recursion_depths(functions: Mapping[str, FunctionModel],
                               graph: Mapping[str, Any], root: str,
                               C: np.ndarray, cols: Sequence[tuple[str, int]],
                               given: Mapping[str, int]) -> dict[str, int]:
    """Per function of a recursive cycle no [recursion] entry names: the most activations
    of the cycle's functions in one call of the root (Σ of their entry counts, on the
    input with the most).  The stack holds at most that many of them at once, so it
    bounds the nesting the inputs reached.  A cycle with a member whose entry is also a
    jump target inside it (its entry count is not its activations) or that has no count
    column gets none."""
    from wcetfit.wcet.interproc import _sccs

    pos = {c: j for j, c in enumerate(cols)}
    out: dict[str, int] = {}
    for comp in _sccs(graph, root):
        if not (len(comp) > 1 or comp[0] in graph[comp[0]]) or any(m in given for m in comp):
            continue
        entries = [pos.get((m, functions[m].entry)) for m in comp]
        if any(j is None for j in entries) or any(functions[m].predecessors(functions[m].entry)
                                                 for m in comp) or not len(C):
            continue
        most = int(np.asarray(C)[:, entries].sum(axis=1).max())
        if most >= 1:
            out.update({m: most for m in comp})
    return out


def _per_call_site(result: WcetResult, functions: Mapping[str, FunctionModel], root: str,
                   costs: Mapping[str, Mapping[int, float]],
                   bounds: Mapping[str, Mapping[int, LoopBound]], C: np.ndarray,
                   cols: Sequence[tuple[str, int]], *, entry_cost: float,
                   cov: np.ndarray | None, cov_index: Any, z: float,
                   **facts: Any) -> WcetResult:
    """The bound with one instance of each callee per call site (wcetfit.wcet.context)
    when it is smaller than the context-insensitive ``result``; the root's function
    result then shows the per-site path."""
    from wcetfit.wcet.context import context_bound
    from wcetfit.wcet.interproc import _sccs, live_call_graph
    from wcetfit.wcet.margin import inlined_margin

    graph = live_call_graph(functions, root, facts.get("unreached", {}))
    recursive = {m for comp in _sccs(graph, root) for m in comp
                 if len(comp) > 1 or comp[0] in graph[comp[0]]}
    if len(graph) < 2 or root in recursive:
        return result
    inline = [n for n in graph if n != root and n not in recursive
              and n in result.functions]
    per_call = {m: r.bound_ticks - r.entry_cost_ticks for m, r in result.functions.items()
                if m in recursive}
    ctx = context_bound(functions, root, costs, bounds, per_call_wcet=per_call,
                        inline=inline, entry_cost=entry_cost, **facts)
    if ctx is None or ctx.bound_ticks >= result.bound_ticks:
        return result
    # Every measured call is one execution the program allows (the observed limits are
    # its maxima): its predicted time is a floor the optimum must reach.
    pos = {c: j for j, c in enumerate(cols)}
    w = np.zeros(len(cols))
    for name, c in costs.items():
        for a, v in c.items():
            if (name, a) in pos:
                w[pos[(name, a)]] = v
    measured = float(np.max(C @ w, initial=0.0)) + entry_cost if len(C) else 0.0
    if ctx.bound_ticks < measured * (1 - 1e-9) - 1e-6:
        # said where the bound is read: the context-insensitive bound kept instead can be
        # hundreds of times the slowest input (zlib's compress2 on init's inputs: 460×)
        note = (f"{root}: the callees could not be bounded per call site: that program's "
                f"bound ({ctx.bound_ticks:,.0f} ticks) is below a measured input's predicted "
                f"time ({measured:,.0f}), so the program does not admit that input, and the "
                f"bound charges each callee its whole-call bound at every call "
                f"(context-insensitive, {result.bound_ticks:,.0f} ticks)")
        log.warning("%s", note)
        return replace(result, warnings=result.warnings + (note,))
    margin = None
    if cov is not None:
        margin = inlined_margin(functions, ctx.inlined_counts, cov, cov_index, z, entry_cost)
    in_span = "span" in ctx.status
    cross = ctx.cross_relations
    binding_cross = sum(1 for r in cross if r.slack(ctx.inlined_counts) < 1.0)
    note = (f"{root}: callees bounded per call site ({ctx.instances - 1} callee instance(s) "
            f"in one program with {root}): a callee's loop totals, block counts and "
            f"activations seen per call of {root} bound all its call sites together "
            f"(observed), instead of its whole-call bound at every call "
            f"({result.bound_ticks:,.0f} ticks context-insensitive, "
            f"{ctx.bound_ticks:,.0f} ticks per call site)"
            + ("; the worst path's counts over all functions are kept to the affine span of "
               "the measured count vectors (every linear relation among the blocks' counts "
               "that held on every input, observed; linear relaxation): an input breaking "
               "one could take longer: vary the inputs if they are not facts of the program"
               if in_span else "")
            + (f"; the loops of different functions are kept to the upper hull of the "
               f"inputs' totals ({len(cross)} relation(s), {binding_cross} binding the worst "
               f"path, e.g. {_first_binding(cross, ctx.inlined_counts)}; observed: "
               f"[wcet] observed_paths = false drops them)" if binding_cross else ""))
    fns = dict(result.functions)
    n = ctx.root.block_counts
    binding = tuple(e for e in facts.get("envelopes", ())
                    if e.intercept + e.slope * n.get(e.header, 0)
                    - sum(n.get(a, 0) for a in e.blocks) < 1.0)
    fns[root] = replace(ctx.root, warnings=result.functions[root].warnings,
                        binding_envelopes=binding,
                        broken_inputs=result.functions[root].broken_inputs)
    log.info("%s: per-call-site bound %.0f < context-insensitive %.0f ticks", root,
             ctx.bound_ticks, result.bound_ticks)
    return replace(result, bound_ticks=ctx.bound_ticks, margin_ticks=margin, functions=fns,
                   inlined_counts=ctx.inlined_counts, warnings=result.warnings + (note,))


def _first_binding(relations: Sequence[Any], counts: Mapping[tuple[str, int], float]) -> str:
    """The relation the worst path presses hardest (least slack), as text."""
    return min(relations, key=lambda r: r.slack(counts)).text() if relations else ""


def _observed_block_limits(fn: FunctionModel, C: np.ndarray, pos: Mapping[int, int]
                           ) -> dict[Any, int]:
    """Most executions of each block per call of the root, over the inputs, and of each
    irreducible region's blocks together (key ("region", lowest address)): the bounds of
    cycles that are not natural loops (observed, like the loop bounds taken from the
    inputs).  Valid per call of ``fn`` too: one call is part of one call of the root."""
    out: dict[Any, int] = {a: int(C[:, j].max(initial=0)) for a, j in pos.items()}
    if not pos:
        return out
    flow = Flow(fn)
    region_blocks = irreducible_blocks(flow, set(flow.blocks))
    if region_blocks:
        import networkx as nx
        part = set(region_blocks)
        g = nx.DiGraph([(s, d) for s in part for d in flow.succ[s] if d in part])
        for comp in nx.strongly_connected_components(g):
            if all(a in pos for a in comp):
                total = C[:, [pos[a] for a in comp]].sum(axis=1).max(initial=0)
                out[("region", min(comp))] = int(total)
    return out


def unreached_note(functions: Mapping[str, FunctionModel],
                   unreached: Mapping[str, Sequence[int]]) -> str:
    """The warning of the "observed" unreached policy: what was left out and what it means."""
    n = sum(len(v) for v in unreached.values())
    loops = [loop_key(functions[f], lp.header) for f, blocks in unreached.items()
             for lp in functions[f].loops if lp.header in set(blocks)]
    # the functions with the most such blocks first, a dozen named (libc's strdup: 300
    # functions through malloc made a warning of ~130 lines)
    most = sorted(unreached.items(), key=lambda fb: -len(fb[1]))
    where = ", ".join(f"{f} ({len(b)})" for f, b in most[:12]) \
        + (f", … {len(most) - 12:,} more functions" if len(most) > 12 else "")
    shown = ", ".join(loops[:6]) + (" …" if len(loops) > 6 else "")
    return (f"{n} block(s) no input reached are left out of the worst path: {where}"
            + (f"; among them {len(loops)} loop(s): {shown}" if loops else "")
            + ". The bound holds only for executions that keep to the code the inputs ran "
              "(observed); an input reaching these blocks can take longer. Add such inputs, "
              "or set [wcet] unreached = \"require\" to bound them by [loops] facts")
