"""Estimable groups: the blocks known only in combination, their readable combinations,
count relations and kinds, and the overhead quantities (the words are in
:mod:`wcetfit.fit.wording`).

Estimability (:mod:`wcetfit.fit.estimability`).  Identical columns merge first (Moreno's
"BB0 et al."); flow conservation makes the rest rank-deficient.  Every reported figure is
an estimable quantity with its interval; blocks that are not estimable alone are shown in
groups with the combinations that are.  Groups are "structural" (no inputs can separate
them: the structural count space says so), "observed" (the inputs did not; advice says how
to vary them), "overhead" (the group holding ε: ε and the always-once blocks are
confounded and reported together), "unexecuted" (no input ran the block) or
"unclassified" (no structural basis given).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from wcetfit.errors import FitError
from wcetfit.fit import estimability as est
from wcetfit.fit.result import (KIND_OBSERVED, KIND_OVERHEAD, KIND_STRUCTURAL, KIND_UNCLASSIFIED,
                                KIND_UNEXECUTED, Combination, Group, Overhead)
from wcetfit.model import hexaddr
from wcetfit.fit.intervals import half_width, quantity_variance
from wcetfit.fit.wording import fmt, linear_text, relations_text, unexecuted_advice


def readable_rows(fx: Any, comp: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The reported basis of a component's estimable combinations (cached).

    Reduced row-echelon form with the overheads as the first pivots (so that exactly
    one combination holds each ε), the blocks in one of four orders — by increasing
    mean count (rare blocks become pivots: "test + A", "test + B" rather than "test +
    B", "A − B"), decreasing, by address, by decreasing address — and, when all of
    those have negative coefficients, a basis of sparse non-negative combinations
    (:func:`estimability.nonnegative_basis`): whichever has the fewest negative
    coefficients, then the fewest terms.  All span the same space; this only chooses
    the most readable."""
    key = tuple(int(j) for j in comp)
    cache = fx.__dict__.setdefault("_readable_cache", {})
    if key in cache:
        return cache[key]
    pb = fx.design.pb
    G = fx.Gtot
    n_rows = max(float(fx.w.sum()), 1.0)
    cfg_pos, blk = [], []
    for li, j in enumerate(comp):
        col = fx.reps[j]
        if col >= pb:
            cfg_pos.append(li)
        else:
            blk.append((float(G[col, pb:].sum()) / n_rows, int(fx.addrs[
                int(blocks_of(fx, int(j))[0])]), li))
    orders = [sorted(blk), sorted(blk, key=lambda t: (-t[0], t[1])),
              sorted(blk, key=lambda t: t[1]), sorted(blk, key=lambda t: -t[1])]
    best = None

    def consider(rows: np.ndarray) -> None:
        nonlocal best
        score = (int(np.sum(rows < -1e-9)), int(np.sum(np.abs(rows) > 1e-9)))
        if best is None or score < best[0]:
            best = (score, rows)

    for o in orders:
        consider(est.readable_basis(row, cfg_pos + [t[2] for t in o])[1])
    if best[0][0] > 0 and len(comp) <= 300:
        # negative coefficients: try sparse non-negative combinations (path sums),
        # completed by the best echelon rows where no non-negative one exists
        nb = est.nonnegative_basis(row, cfg_pos + [t[2] for t in orders[0]],
                                   fixed_zero=cfg_pos,
                                   max_den=fx.opts.max_denominator, complete=best[1])
        if nb.shape[0] == best[1].shape[0]:
            consider(nb)
    cache[key] = best[1]
    return best[1]


def blocks_of(fx: Any, j: int) -> np.ndarray:
    """Block indices (into the caller's columns) of reduced column j (< n_cls)."""
    cols = fx.classes[j]
    out = [int(k) for k in fx.active[cols]]
    for c in cols:
        out.extend(fx.extra.get(int(c), ()))
    return np.asarray(sorted(out), dtype=np.int64)


def combination(fx: Any, comp: np.ndarray, coef: np.ndarray) -> Combination:
    coef, fr = est.rationalize(coef, fx.opts.max_denominator)
    c = np.zeros(fx.reps.size)
    c[comp] = coef
    value = float(c @ fx.theta)
    ci = half_width(fx.t95, quantity_variance(fx, c))
    blocks: list[tuple[int, float]] = []
    overheads: list[tuple[int, float]] = []
    terms: list[tuple[int, str, float, Fraction | None]] = []
    for j, v, f in zip(comp, coef, fr):
        if v == 0.0:
            continue
        if j >= fx.n_cls:
            cfg = fx.configs[fx.design.cfg_of_col(fx.reps[j])]
            overheads.append((cfg, float(v)))
            name = "ε" if fx.n_cfg == 1 else f"ε[{cfg}]"
            terms.append((-1, name, float(v), f))
        else:
            for k in blocks_of(fx, j):
                a = fx.addrs[int(k)]
                blocks.append((a, float(v)))
                terms.append((a, hexaddr(a), float(v), f))
    terms.sort(key=lambda t: t[0])
    text = linear_text([(n, v, f) for _, n, v, f in terms])
    text += f" = {fmt(value)} ± {fmt(ci)} ticks"
    if fx.tsc_hz is not None and fx._ns(value) is not None and fx._ns(ci) is not None:
        # (a non-finite interval — too few rows — has no ns form; the ticks say it)
        text += f" ({fmt(fx._ns(value))} ± {fmt(fx._ns(ci))} ns)"
    blocks.sort()
    return Combination(tuple(blocks), tuple(sorted(overheads)), value, ci, text,
                       fx._ns(value), fx._ns(ci))


def red_of_block(fx: Any, k: int) -> int:
    if not hasattr(fx, "_block_red"):
        m: dict[int, int] = {}
        for j in range(fx.n_cls):
            for kk in blocks_of(fx, j):
                m[int(kk)] = j
        fx._block_red = m
    return fx._block_red[k]


def structural_space(fx: Any) -> dict[str, Any] | None:
    B = fx.basis_in
    if B is None:
        return None
    if isinstance(B, Mapping):
        mats = [np.atleast_2d(np.asarray(v, dtype=np.float64)) for v in B.values()]
        for m in mats:
            if m.shape[1] != fx.nb:
                raise FitError(f"structural basis has {m.shape[1]} columns, counts {fx.nb}")
        dims = [est.orthonormal_rows(m).shape[1] for m in mats]
        S = est.orthonormal_rows(np.vstack(mats))
        max_rank = int(sum(dims))
    else:
        m = np.atleast_2d(np.asarray(B, dtype=np.float64))
        if m.shape[1] != fx.nb:
            raise FitError(f"structural basis has {m.shape[1]} columns, counts {fx.nb}")
        S = est.orthonormal_rows(m)
        # one configuration: rows (n, 1) with n in S and φ(n) = 1 for the linear
        # "number of calls" functional φ on S, so the rank with ε is at most dim S;
        # several configurations sharing one basis: at most dim S + n_configs.
        max_rank = S.shape[1] if fx.n_cfg == 1 else S.shape[1] + fx.n_cfg
    # do the counts lie in S?  Σ_rows w·|(I − P_S) x|² = trace(A G Aᵀ) with A = (I−P_S)
    G = fx.Gtot
    pb = fx.design.pb
    Mx = np.zeros((fx.nb, pb))        # design column → its blocks
    has_col = fx.block_col >= 0
    Mx[np.flatnonzero(has_col), fx.block_col[has_col]] = 1.0
    A = Mx - S @ (S.T @ Mx)
    Gb = G[:pb, :pb]
    out_energy = float(np.sum((A @ Gb) * A))
    rel = out_energy / max(float(np.trace(Gb)), 1e-300)
    if rel > 1e-9:
        fx.warnings.append(f"the counts are not in the structural count space (relative "
                             f"energy {rel:.2g} outside): structural/observed "
                             "classification is unreliable")
    return {"S": S, "max_rank": max_rank}


def lift(fx: Any, comp: np.ndarray, vecs: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Reduced vectors (columns over ``comp``, blocks only) to block coordinates, plus
    the within-class differences; returns (vectors [n_blocks_in_group, k], blocks)."""
    blocks: list[int] = []
    first: dict[int, int] = {}
    for j in comp:
        if j < fx.n_cls:
            mem = [int(k) for k in blocks_of(fx, int(j))]
            first[int(j)] = len(blocks)
            blocks.extend(mem)
    pos = {k: i for i, k in enumerate(blocks)}
    cols = []
    for v in vecs.T:
        t = np.zeros(len(blocks))
        for jj, j in enumerate(comp):
            if j < fx.n_cls:
                t[first[int(j)]] = v[jj]
        cols.append(t)
    for j in comp:
        if j < fx.n_cls and fx.classes[int(j)].size > 1:
            mem = [int(k) for k in blocks_of(fx, int(j))]
            for k in mem[1:]:
                t = np.zeros(len(blocks))
                t[pos[mem[0]]] = 1.0
                t[pos[k]] = -1.0
                cols.append(t)
    T = np.array(cols).T if cols else np.zeros((len(blocks), 0))
    return T, blocks


# The count relations of one group written out (its advice names the first
# wcetfit.fit.wording.MAX_ADVICE, and counts them all).
MAX_RELATIONS = 20


def count_relations(fx: Any, T: np.ndarray, blocks: list[int], basis: dict[str, Any] | None,
               excess: int) -> tuple[list[str], str | None]:
    """Readable count relations that hold in every input (and, with a structural basis,
    are not forced by the CFG), with advice on how to break them."""
    if T.shape[1] == 0:
        return [], None
    G = fx.Gtot
    pb = fx.design.pb
    freq = [float(G[fx.block_col[k], pb:].sum()) for k in blocks]
    order = sorted(range(len(blocks)), key=lambda i: (-freq[i], fx.addrs[blocks[i]]))
    _, rows = est.readable_basis(T, order)
    chosen: list[np.ndarray] = []
    # the relations written out are the first MAX_RELATIONS; the others are counted
    # (brotli's encoder: thousands, each tested against the structural space with an SVD,
    # a quarter of an hour of a report that lists three)
    if basis is not None:
        S = basis["S"][blocks]
        total = excess
        for r in rows:
            if len(chosen) >= min(excess, MAX_RELATIONS):
                break
            trial = np.array(chosen + [r]).T
            if est.excess_over(trial, S) > len(chosen):
                chosen.append(r)
    else:
        total = len(rows)
        chosen = list(rows[:MAX_RELATIONS])
    pairs = []
    for r in chosen:
        r, fr = est.rationalize(r, fx.opts.max_denominator)
        if all(f is not None for f in fr):
            lcm = 1
            for f in fr:
                lcm = lcm * f.denominator // math.gcd(lcm, f.denominator)
            r = r * lcm
        lhs = [(hexaddr(fx.addrs[blocks[i]]), r[i]) for i in range(len(r)) if r[i] > 0]
        rhs = [(hexaddr(fx.addrs[blocks[i]]), -r[i]) for i in range(len(r)) if r[i] < 0]
        pairs.append((lhs, rhs))
    texts, text = relations_text(pairs, basis is not None, total=total)
    return texts, text


def component_group(fx: Any, an: est.Analysis, comp: np.ndarray,
                     basis: dict[str, Any] | None) -> dict[str, Any]:
    row, null = est.component_spaces(an, comp)
    rows = readable_rows(fx, comp, row)
    combos = tuple(combination(fx, comp, r) for r in rows)
    is_cfg = comp >= fx.n_cls
    configs = tuple(fx.configs[fx.design.cfg_of_col(fx.reps[j])] for j in comp[is_cfg])
    # null directions that do not move ε: dependencies among block counts alone
    if is_cfg.any() and null.shape[1]:
        _, sv, vt = np.linalg.svd(null[is_cfg])
        rnk = int(np.sum(sv > 1e-9 * max(float(sv[0]) if sv.size else 0.0, 1e-300)))
        null_b = (null @ vt[rnk:].T)[~is_cfg]
    else:
        null_b = null[~is_cfg]
    T, blocks = lift(fx, comp[~is_cfg], null_b)
    excess = 0
    if basis is not None:
        excess = est.excess_over(T, basis["S"][blocks]) if T.size else 0
    if is_cfg.any():
        kind = KIND_OVERHEAD
    elif basis is None:
        kind = KIND_UNCLASSIFIED
    else:
        kind = KIND_OBSERVED if excess > 0 else KIND_STRUCTURAL
    relations: list[str] = []
    advice = None
    if kind == KIND_UNCLASSIFIED or excess > 0:
        relations, advice = count_relations(fx, T, blocks, basis, excess)
    elif kind == KIND_STRUCTURAL:
        advice = None
    addrs = tuple(sorted(fx.addrs[k] for k in blocks))
    return dict(blocks=addrs, kind=kind, combinations=combos, configs=configs,
                relations=tuple(relations), advice=advice, observed_deficiency=excess)


def class_group(fx: Any, an: est.Analysis, j: int, basis: dict[str, Any] | None
                 ) -> dict[str, Any]:
    comp = np.array([j])
    combo = combination(fx, comp, np.array([1.0]))
    T, blocks = lift(fx, comp, np.zeros((1, 0)))
    excess = est.excess_over(T, basis["S"][blocks]) if basis is not None else 0
    kind = (KIND_UNCLASSIFIED if basis is None
            else KIND_OBSERVED if excess > 0 else KIND_STRUCTURAL)
    relations: list[str] = []
    advice = None
    if kind != KIND_STRUCTURAL:
        relations, advice = count_relations(fx, T, blocks, basis, excess)
    return dict(blocks=tuple(sorted(fx.addrs[k] for k in blocks)), kind=kind,
                combinations=(combo,), configs=(), relations=tuple(relations),
                advice=advice, observed_deficiency=excess)


def unexecuted_group(fx: Any, k: int) -> dict[str, Any]:
    why = unexecuted_advice(hexaddr(fx.addrs[k]), bool(fx.block_col[k] >= 0))
    return dict(blocks=(fx.addrs[k],), kind=KIND_UNEXECUTED, combinations=(),
                configs=(), relations=(), advice=why, observed_deficiency=0)


def overhead_quantities(fx: Any, an: est.Analysis, groups: tuple[Group, ...]) -> tuple[Overhead, ...]:
    out: list[Overhead] = []
    d = fx.design
    for c, cfg in enumerate(fx.configs):
        col = d.pb + c
        hit = np.flatnonzero(fx.reps == col)
        name = "ε" if fx.n_cfg == 1 else f"ε[{cfg}]"
        if hit.size == 0:
            out.append(Overhead(cfg, None, None, (), f"{name}: no rows of this configuration"))
            continue
        j = int(hit[0])
        if an.estimable[j]:
            e = np.zeros(fx.reps.size)
            e[j] = 1.0
            v = float(fx.theta[j])
            ci = half_width(fx.t95, quantity_variance(fx, e))
            text = (f"{name} = {fmt(v)} ± {fmt(ci)} ticks "
                    "(estimable alone: no block runs exactly once per call)")
            out.append(Overhead(cfg, v, ci, (), text, fx._ns(v), fx._ns(ci)))
            continue
        found = None
        for g in groups:
            for cb in g.combinations:
                oc = dict(cb.overhead_coefficients)
                if oc.get(cfg) == 1.0 and len(oc) == 1:
                    found = cb
                    break
            if found:
                break
        if found is None:
            out.append(Overhead(cfg, None, None, (),
                                f"{name} is not separable from the other configurations'"))
            continue
        text = found.text + " — ε and the blocks that run once per call are confounded"
        out.append(Overhead(cfg, found.value_ticks, found.ci95_ticks, found.coefficients,
                            text, found.value_ns, found.ci95_ns))
    return tuple(out)


def build_groups(fx: Any, an: est.Analysis, executed: np.ndarray,
                 basis: dict[str, Any] | None) -> tuple[tuple[Group, ...], dict[int, int]]:
    """Every group (components of the null space, merged classes, unexecuted blocks),
    numbered by lowest block address; and each grouped block's group id."""
    n_cls = fx.n_cls
    # groups
    groups: list[dict[str, Any]] = []
    red_group: dict[int, int] = {}
    for comp in an.components:
        groups.append(component_group(fx, an, comp, basis))
        for j in comp:
            red_group[int(j)] = len(groups) - 1
    for j in range(n_cls):
        if an.estimable[j] and fx.classes[j].size > 1:
            groups.append(class_group(fx, an, j, basis))
            red_group[j] = len(groups) - 1
    for k in range(fx.nb):
        if not executed[k]:
            groups.append(unexecuted_group(fx, k))
    order = sorted(range(len(groups)), key=lambda i: (min(groups[i]["blocks"])
                                                      if groups[i]["blocks"] else -1))
    gid = {old: new for new, old in enumerate(order)}
    group_objs = tuple(Group(id=gid[i], **groups[i]) for i in order)
    block_group: dict[int, int] = {}
    for g in group_objs:
        for a in g.blocks:
            block_group[a] = g.id
    return group_objs, block_group
