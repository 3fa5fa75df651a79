"""The robust iteration of the fit: identical columns merged, outlier rejection and the row
weights, refreshed together until they settle.

Weights (``weights="relative"``, the default).  The figures that judge the fit are
relative errors per call, and on real timings the model error grows with the call
(data-dependent costs: branch prediction, caches): unweighted, the long calls dominate the
sum of squares and the short calls come out tens of percent off.  So rows are weighted
v = 1/max(pred, f)² with pred the fitted value — iteratively reweighted (IRLS: the first
round is OLS, then weights from the fit; a weight is refreshed when it moves by more than
10 %), in the same loop as the outlier rejection.  Weights from the fitted values, never
from the measured ones: a row measured high by chance would get less weight and the
estimate would be pulled low (in a test, measured-value weights land 2e-3 off the
converged IRLS, fitted-value weights 1e-4).  The floor f = ``weight_floor_quanta`` TSC
steps (default 5 × 26 = 130 ticks; 5 ticks without a visible step) stops the shortest
calls, where the quantum dominates, from taking all the weight.  Measured on the nine
samples: the residual scale of a row follows s² = a² + (ρ·pred)² with a ≈ 4–8 ticks
(q/(2√R) = 4.1 for R = 10 repeats, plus jitter) and ρ ≈ 1–3 % on the well-modelled
samples (crc, fir, chain, calls, adpcm, isort), 11 % on matmul and statemachine: the
absolute noise overtakes the relative misfit below a/ρ ≈ 2–30 q; and the held-out figures
are flat in f from 1 to 20 q (within 0.3 points), worse at 50 q (adpcm p95 45 % against
42 %).  5 q lies inside both.  Held-out median / p95 relative error per call, unweighted
→ weighted, same stored timings (two timing runs, the second in parentheses):
adpcm 5.5/52 → 5.4/42 % (19.9/141 → 16.9/58), isort 10.7/45 → 7.3/29 % (18.5/101 →
9.7/38), statemachine 21.8/320 → 13.4/57 % (18.5/271 → 10.2/58), matmul 13.2/31.5 →
12.5/26.8 % (5.4/29.4 → 5.2/28.2), fir 1.24/18.0 → 1.10/17.2 % (6.6/27.3 → 6.3/25.7),
calls 2.12/20.7 → 2.10/20.7 % (3.3/14.7 → 3.2/13.5); crc and chain move by under 0.05
points (1.1/2.5 and 0.7/1.8 %); bsearch is unchanged (every call is under the floor: equal
weights).  The price is R² (an absolute measure, ruled by the long calls): statemachine
0.977 → 0.59 (0.982 → 0.57), isort 0.955 → 0.954 (0.93 → 0.90).  statemachine's slow
inputs (one in ten, ~3× slower per byte through a mispredicted jump table, with the same
kind of block counts) no longer pull the costs up: they are rejected as outliers instead
of the short calls (49 of its 66 rejections).  Where the goals (1 % / 5 %) are still
missed it is not the weighting: the held-out error of inputs with *identical* count
vectors, predicted by the other inputs' mean (no model could do better from counts), is
already 8.6/38 % on adpcm, 7.3/32 % on isort, 12.8/28.6 % on matmul, 5.3/33.7 % on
bsearch; the timed calls of one input spread by 1.9/12.5 % (adpcm: the first repeat runs
25 % slower than the rest, the branch predictor learning the input; bsearch: a call is 3–7
TSC steps long); and the shared machine has slow episodes (adpcm inputs 55–65 and
106–127 of the first run: every repeat 1.6–2.0× the prediction while their neighbours fit,
one input switching mid-repeats; the second run drifts between 0.72× and 1.17× over the
run) — measured per input, an episode shifts whole inputs.  The weighted fit on the inputs
it kept: adpcm 4.6/18.7 %, fir 0.98/3.6 %, calls 1.9/5.9 %, isort 5.7/22 %.  At 1,000
blocks × 100,000 rows the weighting costs one more full pass (about 2.7 s of 8.9 s).
``weights="none"`` is ordinary least squares as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg as sla

from wcetfit.fit import robust
from wcetfit.fit.rows import rows_from_calls

# A row's weight is refreshed when the new one differs by more than this fraction:
# weights within 10 % of the self-consistent ones cost nothing in efficiency (the
# variance of a WLS estimate is flat at the optimum) and the intervals are right for
# whatever weights were used, while every refresh costs a pass over the changed rows.
WEIGHT_TOL = 0.1


# reduced columns (identical columns merged) of the current normal matrix
def reduce_columns(fx: Any, G: np.ndarray) -> None:
    pb = fx.design.pb
    diag = np.diag(G)
    live_b = np.flatnonzero(diag[:pb] > 0)
    live_c = pb + np.flatnonzero(diag[pb:] > 0)
    sub = G[np.ix_(live_b, live_b)]
    # exact test on the integer Gram (see module docstring); candidates share diagonal
    # entry and column sum (= Σ over configs of G[config, j])
    colsum = G[np.ix_(live_b, np.arange(pb, fx.design.p))].sum(axis=1)
    key: dict[tuple[float, float], list[int]] = {}
    for j in range(live_b.size):
        key.setdefault((float(sub[j, j]), float(colsum[j])), []).append(j)
    classes: list[np.ndarray] = []
    for members in key.values():
        rest = list(members)
        while rest:
            a = rest[0]
            tol = 0.0 if fx.exact else 1e-12 * sub[a, a]
            same = [b for b in rest if sub[a, a] + sub[b, b] - 2.0 * sub[a, b] <= tol]
            classes.append(live_b[np.asarray(same)])
            rest = [b for b in rest if b not in same]
    classes.sort(key=lambda c: int(c[0]))
    fx.classes = classes                        # indices into active columns
    fx.live_c = live_c                          # design indices of live configs
    fx.reps = np.concatenate([np.asarray([c[0] for c in classes], dtype=np.int64),
                                live_c]).astype(np.int64)
    fx.n_cls = len(classes)


def ridge_theta(fx: Any, G: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares on the reduced columns, slightly regularized (for the rejection
    iterations and the folds; the final solution uses the exact pseudo-inverse)."""
    Gr = G[np.ix_(fx.reps, fx.reps)]
    br = b[fx.reps]
    diag = np.diag(Gr)
    good = diag > 0
    theta = np.zeros(fx.design.p)
    if not good.any():
        return theta
    d = np.zeros_like(diag)
    d[good] = 1.0 / np.sqrt(diag[good])
    gs = Gr * d[:, None] * d[None, :]
    gs[np.diag_indices_from(gs)] += 1e-9 + (~good)
    try:
        c = sla.cho_factor(gs, lower=True, check_finite=False)
        zs = sla.cho_solve(c, d * br, check_finite=False)
    except np.linalg.LinAlgError:
        zs = np.linalg.lstsq(gs, d * br, rcond=None)[0]
    theta[fx.reps] = d * zs
    return theta


def row_weights(fx: Any, pred: np.ndarray) -> np.ndarray:
    """Relative-error weights from fitted values: (floor / max(pred, floor))², in (0, 1].

    From the fit, never from the measured value: a row measured high by chance would
    get a smaller weight, one measured low a larger, and the estimate would be pulled
    low.  The fitted value carries almost none of the row's own noise."""
    f = float(fx.weight_floor)
    top = float(np.max(np.abs(pred))) if pred.size else 0.0
    f = max(f, 1e-6 * top, 1e-300)     # bounded dynamic range of the weights
    p = np.where(np.isfinite(pred), pred, f)
    return (f / np.maximum(p, f)) ** 2


def iterate(fx: Any) -> None:
    """Outlier rejection and reweighting (IRLS), in one loop: each round fits on the
    current rows and weights, then rejects on the residuals and refreshes the weights
    from the fitted values; the first round is ordinary least squares."""
    o = fx.opts
    cand = np.flatnonzero(fx.has)
    fx.rejected_rows = np.zeros(fx.n, dtype=bool)
    fx.call_rejected = np.zeros_like(fx.ticks, dtype=bool)
    fx.iterations = 0
    reject = o.robust == "reject"
    loops = max(1, o.max_iterations) if (reject or fx.weighted) else 1
    # the rejection states applied so far, in order: key → index into `history`, whose
    # entries are (rejection mask, its reasons) as committed
    seen: dict[bytes, int] = {}
    history: list[tuple[np.ndarray, Any]] = []
    settled = not (reject or fx.weighted)
    for it in range(loops):
        reduce_columns(fx, fx.G.sum(axis=0))
        theta = ridge_theta(fx, fx.Gw.sum(axis=0), fx.bw.sum(axis=0))
        if not (reject or fx.weighted):
            break
        fx.iterations = it + 1
        pred = fx.design.predict(theta, cand)
        fx._last_pred = (cand, pred, fx.w > 0)
        changed = np.zeros(0, dtype=np.int64)
        if reject:
            fx._capped = False
            changed = reject_step(fx, cand, pred)
            if changed.size:
                state = (fx._pending.tobytes() if o.rows == "input"
                         else fx._pending_calls.tobytes())
                if state in seen:
                    # a cycle: the pending set was applied before.  Nothing of the
                    # pending step is committed (its reasons neither): the fit is left
                    # in one consistent state, chosen by stop_on_cycle.
                    stop_on_cycle(fx, cand, history[seen[state]:])
                    settled = True
                    break
                seen[state] = len(history)
            # the set (changed or not) and its reasons, from this round's residuals
            commit_reasons(fx, cand)
            if changed.size:
                history.append(current_state(fx))
        v_rows = np.zeros(0, dtype=np.int64)
        v_new = None
        if fx.weighted:
            v_new = np.ones(fx.n)
            v_new[cand] = row_weights(fx, pred)
            moved = np.abs(v_new[cand] / fx.v[cand] - 1.0) > WEIGHT_TOL
            v_rows = cand[moved]
        if changed.size == 0 and v_rows.size == 0:
            settled = True
            break
        update_rows(fx, changed, v_rows, v_new)
    if not settled:
        # (libdeflate's crc32: short inputs whose time depends on the previous input's
        # cache footprint, set aside and taken back in turn; the user was told nothing of
        # what it meant)
        fx.warnings.append(f"outlier rejection/reweighting did not settle in "
                           f"{o.max_iterations} iterations: the inputs set aside as outliers "
                           f"changed from round to round, and the costs are the last "
                           f"round's; inputs near the rejection threshold are ones the model "
                           f"does not describe (look at the worst-predicted inputs: a cost "
                           f"that depends on the data or on what ran before)")
    if getattr(fx, "_capped", False):
        fx._warn(f"more than {o.max_reject_fraction:.0%} of the rows look like outliers: "
                   "the model may not fit (data-dependent costs?); only the worst were "
                   "rejected")
    reduce_columns(fx, fx.G.sum(axis=0))


def update_rows(fx: Any, changed: np.ndarray, v_rows: np.ndarray | None = None,
                v_new: np.ndarray | None = None) -> None:
    """Apply the pending rejection to the rows in ``changed`` and the new weights to the
    rows in ``v_rows``, keeping G, b (exact) and Gw, bw (weighted) in step."""
    if v_rows is None:
        v_rows = np.zeros(0, dtype=np.int64)
    old_w, old_S, old_v = fx.w.copy(), fx.S.copy(), fx.v.copy()
    if changed.size:
        # downdate/update the exact G and b for the rows whose weight or sum changed
        apply_rejection(fx, changed)
        gw = np.zeros(fx.n)
        bw = np.zeros(fx.n)
        gw[changed] = fx.w[changed] - old_w[changed]
        bw[changed] = fx.S[changed] - old_S[changed]
        fx.design.accumulate(fx.G, fx.b, gw, bw, changed)
    if fx.weighted:
        if v_rows.size and v_new is not None:
            fx.v[v_rows] = v_new[v_rows]
            fx.weight_iterations += 1
        update_weighted(fx, np.union1d(changed, v_rows), old_w, old_S, old_v)


def commit_reasons(fx: Any, cand: np.ndarray) -> None:
    """Make the pending step's reasons the current ones (called only when its set is
    applied, or equals the applied one): a rejected row's reason is always that of the
    step that decided the set in force."""
    if fx.opts.rows == "input":
        for i in cand:
            fx.rej_reason.pop(int(i), None)
        fx.rej_reason.update(fx._pending_reasons)
    else:
        fx._call_z = fx._pending_call_z


def current_state(fx: Any) -> tuple[np.ndarray, Any]:
    if fx.opts.rows == "input":
        return fx._pending.copy(), dict(fx._pending_reasons)
    cand, z, cut = fx._pending_call_z
    return fx._pending_calls.copy(), (cand, z.copy(), cut)


def stop_on_cycle(fx: Any, cand: np.ndarray, cycle: list[tuple[np.ndarray, Any]]) -> None:
    """The rejection cycles through the states in ``cycle`` (in order; the last is the one
    applied now).  Keep their union: every row (call) that one of the cycle's fits judged
    an outlier, each with the reason of the last state that rejected it.

    Why the union: the cycle means the rows the model fits worst change with which others
    are left out — two (or more) groups of inputs that the counts describe alike but that
    run at different speeds.  With any one state of the cycle the other group's rows are
    in the fit and pull the costs towards them (the next round calls *them* outliers);
    the intersection keeps every disputed row in the fit.  The union fits the rows that no
    state of the cycle disputes, so the costs describe the undisputed majority.  The bound
    stays above every measured input whichever set is kept (the dispersion term covers a
    rejected row's excess over the prediction), so the choice is only about the quality
    of the fit.  Whichever state the loop happened to stop in would be an accident of the
    iteration order.  If the union exceeds the cap on rejections, the state applied now is
    kept instead (already consistent, with its own reasons)."""
    o = fx.opts
    sizes = [int(m.sum()) for m, _ in cycle]
    unit = "rows" if o.rows == "input" else "calls"
    union = np.logical_or.reduce([m for m, _ in cycle])
    if o.rows == "input":
        limit = int(o.max_reject_fraction * cand.size)
    else:
        limit = int(o.max_reject_fraction * int(fx.valid_calls[cand].sum()))
    if int(union.sum()) <= limit:
        kept = f"kept their union, {int(union.sum())} {unit}, out of the fit"
        if o.rows == "input":
            reasons: dict[int, str] = {}
            for _, r in cycle:
                reasons.update(r)
            fx._pending = union
            fx._pending_reasons = reasons
            changed = np.flatnonzero(union != fx.rejected_rows)
        else:
            cand_z, z, cut = cycle[-1][1]
            z = z.copy()
            for m, (_, zk, _) in cycle:
                sel = m[cand_z]
                z[sel] = zk[sel]
            fx._pending_calls = union
            fx._pending_call_z = (cand_z, z, cut)
            changed = np.flatnonzero((union != fx.call_rejected).any(axis=1))
        commit_reasons(fx, cand)
        update_rows(fx, changed)
    else:
        # the applied state and its committed reasons stay as they are
        kept = (f"kept the last set, {sizes[-1]} {unit} (their union, "
                f"{int(union.sum())}, exceeds the {o.max_reject_fraction:.0%} cap)")
    sets = ", ".join(str(k) for k in sizes[:-1]) + f" and {sizes[-1]}"
    fx._warn(f"outlier rejection cycled {'between' if len(sizes) == 2 else 'among'} sets "
             f"of {sets} rejected {unit}; {kept}: the {unit} that the model fits worst "
             f"change with which others are left out — the timings of these inputs may "
             f"depend on data the counts do not see (caches, branch history, operand "
             f"values); more inputs or repeats settle it, or a count that tells these "
             f"inputs apart")


def update_weighted(fx: Any, rows: np.ndarray, old_w: np.ndarray, old_S: np.ndarray,
                     old_v: np.ndarray) -> None:
    """Bring Gw, bw to the current w·v, S·v: a fresh pass when many rows changed (the
    first reweighting changes them all, by factors up to 10⁶: subtracting the old
    contributions would cancel), else the difference over the changed rows."""
    if rows.size == 0:
        return
    if rows.size > fx.n // 4:
        fx.Gw[:] = 0.0
        fx.bw[:] = 0.0
        fx.design.accumulate(fx.Gw, fx.bw, fx.w * fx.v, fx.S * fx.v,
                               exact=False)
        return
    gw = np.zeros(fx.n)
    bw = np.zeros(fx.n)
    gw[rows] = fx.w[rows] * fx.v[rows] - old_w[rows] * old_v[rows]
    bw[rows] = fx.S[rows] * fx.v[rows] - old_S[rows] * old_v[rows]
    fx.design.accumulate(fx.Gw, fx.bw, gw, bw, rows, exact=False)


# Rows predicted at least this share of the longest prediction are never rejected for
# running *faster* than predicted.  The WCET bound is the model's worst path, and these
# rows are the measurements nearest it: rejected, they leave the costs that over-predict
# it in place, and the bound rests on a prediction the inputs there contradict (isort: its
# reverse-sorted inputs, the worst path itself, measured 26.2k ticks, were rejected and
# the point stayed at 43.5k, 36.5k with them kept; adpcm: inputs the search found because
# the model predicted them slowest, 66.5k, measured 17k and were rejected, the bound 4.1×
# the slowest input, 1.85× with them kept).  The price is in the held-out figures of the
# other rows (same stored timings, median / p95: adpcm 10.2/42 → 12.9/47 %, isort 18/67 →
# 23/41 %).  A row measured slower than predicted may still be rejected: the bound's
# dispersion covers it (misfit).
TOP_SHARE = 0.5


# Residual degrees of freedom outlier rejection always leaves: with none, the costs have no
# interval and the bound is refused (libbz2's BZ2_bzBuffToBuffCompress, 110 inputs against
# 104 estimable quantities: 6 rows rejected, 0 left, "no WCET bound ... time more inputs").
MIN_REJECTION_DOF = 3


def _dof_limit(fx: Any, rows: int) -> int:
    """The most rows rejection may set aside and still leave MIN_REJECTION_DOF residual
    degrees of freedom.  The design's rank (computed once, only when the rows are few
    enough to matter: rows − columns < the rows rejection could take) bounds the rank of
    any subset of its rows, so the limit is safe."""
    p = int(fx.G.shape[-1])
    if rows - int(fx.opts.max_reject_fraction * rows) >= p + MIN_REJECTION_DOF:
        return rows                # the columns alone leave enough
    rank = getattr(fx, "_design_rank", None)
    if rank is None:
        G = fx.G.sum(axis=0)
        d = np.sqrt(np.clip(np.diag(G), 0.0, None))
        live = d > 0
        # unit diagonal first: counts of 1 and of 10^5 in one design would otherwise put
        # the rare columns below the rank tolerance
        Gs = G[np.ix_(live, live)] / d[live][:, None] / d[live][None, :]
        rank = int(np.linalg.matrix_rank(Gs, hermitian=True)) if live.any() else 0
        fx._design_rank = rank
    return max(0, rows - rank - MIN_REJECTION_DOF)


def reject_step(fx: Any, cand: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Decide the rejected rows (or calls) from residuals; return inputs that changed.

    Every candidate is judged against the scale of the rows currently kept, so a row
    rejected earlier comes back when a better fit explains it."""
    o = fx.opts
    if o.rows == "input":
        r = fx.y[cand] - pred
        kept = ~fx.rejected_rows[cand]
        # Per-row floor: the mean of R readings of a two-level quantized distribution
        # has a standard deviation up to q/(2·sqrt(R)) (levels q apart, probabilities
        # 1/2).  Without it the MAD of many inputs whose repeats all read the same
        # level collapses, and honest one-step deviations look like outliers (which
        # biased the fit by rejecting the upper level).
        nrep = np.maximum(fx.call_keep[cand].sum(axis=1), 1)
        floor = np.maximum(1e-9 * float(np.sqrt(np.mean(fx.y[cand] ** 2))),
                           0.5 * fx.quantum / np.sqrt(nrep))
        scale = np.maximum(robust.local_scale(r[kept], pred[kept], 0.0, at=pred), floor)
        z = robust.modified_z(r, scale, float(np.median(r[kept])))
        cut = robust.rejection_threshold(cand.size)
        # a row predicted among the longest and measured below its prediction is kept
        # (TOP_SHARE): it is what the bound's worst path was measured at
        protected = (pred >= TOP_SHARE * float(np.max(pred, initial=0.0))) & (r < 0)
        bad = (np.abs(z) > cut) & ~protected
        limit = min(int(o.max_reject_fraction * cand.size), _dof_limit(fx, cand.size))
        if bad.sum() > limit:
            order = np.argsort(-np.where(protected, -np.inf, np.abs(z)))
            bad = np.zeros_like(bad)
            bad[order[:limit]] = True
            fx._capped = True
        new = np.zeros(fx.n, dtype=bool)
        new[cand[bad]] = True
        changed = np.flatnonzero(new != fx.rejected_rows)
        # pending until committed (commit_reasons): a step stopped on a cycle must not
        # leave its reasons on rows whose weights it never changed
        fx._pending_reasons = {
            int(cand[pos]): (f"residual: {r[pos]:+.1f} ticks, |z| = {abs(z[pos]):.1f} "
                             f"> {cut:.1f}")
            for pos in np.flatnonzero(bad)}
        fx._pending = new
        return changed
    # rows == "call": residuals of single calls
    T = fx.ticks[cand]
    valid = fx.valid_calls[cand]
    R = T - pred[:, None]
    kept = valid & ~fx.call_rejected[cand]
    P = np.broadcast_to(pred[:, None], R.shape)
    floor = max(1e-9 * float(np.sqrt(np.nanmean(T ** 2))), 0.5 * fx.quantum)
    scale = robust.local_scale(R[kept], P[kept], floor, at=P[valid])
    z = np.zeros_like(R)
    z[valid] = robust.modified_z(R[valid], scale, float(np.median(R[kept])))
    cut = robust.rejection_threshold(int(valid.sum()))
    bad = valid & (np.abs(z) > cut)
    limit = int(o.max_reject_fraction * valid.sum())
    if bad.sum() > limit:
        thr = np.sort(np.abs(z[valid]))[::-1][limit]
        bad = valid & (np.abs(z) > max(thr, cut))
        fx._capped = True
    newc = fx.call_rejected.copy()
    newc[cand] = bad
    changed = np.flatnonzero((newc != fx.call_rejected).any(axis=1))
    fx._pending_calls = newc
    fx._pending_call_z = (cand, z, cut)
    return changed


def apply_rejection(fx: Any, changed: np.ndarray) -> None:
    if fx.opts.rows == "input":
        fx.rejected_rows = fx._pending
        fx.w[changed] = np.where(fx.rejected_rows[changed], 0.0, 1.0)
        fx.S[changed] = np.where(fx.rejected_rows[changed], 0.0, fx.y[changed])
    else:
        fx.call_rejected = fx._pending_calls
        fx.call_keep = fx.valid_calls & ~fx.call_rejected
        rows_from_calls(fx)
        fx.rejected_rows = (fx.w == 0) & fx.has
