"""Callees bounded per call site (wcetfit.wcet.context) on CFGs with known costs.

A helper h whose loop runs 2 times per call from a call site inside the root's loop and
up to 50 times from a site after it, reached through a wrapper g: the count run sees h's
loop totals per call of the root only, never per call.  Charged per call (context-
insensitive) every one of the up to 11 calls costs the largest total; per call site the
totals bound all sites together, and the bound equals the slowest input's predicted
time (the worst input is among the measured ones), never below any of them."""

from __future__ import annotations

import numpy as np
import pytest

from test_wcet import addr, costs_of, make_fn
from wcetfit.model import CALL_INTERNAL
from wcetfit.wcet.analyze import analyze_wcet
from wcetfit.wcet.context import context_bound


def two_sites():
    # h: 0 -> 1 header; 1 -> 2 body -> 1; 1 -> 3 exit
    h = make_fn("h", 0x6000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    # g: 0 -> 1 header; 1 -> 2 (calls h) -> 1; 1 -> 3 exit
    g = make_fn("g", 0x5000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INTERNAL, 0x6000, "h")])
    # f: 0 -> 1 header; 1 -> 2 (site A: calls g) -> 1; 1 -> 3 (site B: calls g) -> 4 exit
    f = make_fn("f", 0x4000, 5, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4)], [4],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INTERNAL, 0x5000, "g"), (3, CALL_INTERNAL, 0x5000, "g")])
    return f, g, h


def counts_of(k: int, n_b: int) -> np.ndarray:
    """One call of f: k calls of g at site A (g calls h once, h loops 2 times), one at
    site B (g calls h 3 times, h loops n_b times each)."""
    g_calls, h_calls = k + 1, k + 3
    iters = 2 * k + 3 * n_b
    return np.array([1, k + 1, k, 1, 1,                               # f
                     g_calls, g_calls + h_calls, h_calls, g_calls,    # g
                     h_calls, h_calls + iters, iters, h_calls])       # h


def setup(seed: int = 0):
    f, g, h = two_sites()
    fns = {"f": f, "g": g, "h": h}
    cols = [(fn.name, b.address) for fn in (f, g, h) for b in fn.blocks]
    rng = np.random.default_rng(seed)
    rows = [counts_of(int(rng.integers(0, 11)), int(rng.integers(0, 51))) for _ in range(40)]
    rows.append(counts_of(10, 50))               # the worst input is measured
    costs = {"f": costs_of(f, [3, 2, 4, 5, 1]), "g": costs_of(g, [6, 2, 3, 1]),
             "h": costs_of(h, [4, 1, 10, 2])}
    return fns, cols, np.array(rows), costs


def predicted(C, cols, costs, eps=0.0):
    w = np.array([costs[f][a] for f, a in cols])
    return C @ w + eps


def test_per_site_bound_is_the_worst_measured_call():
    fns, cols, C, costs = setup()
    res = analyze_wcet(fns, "f", costs, C, cols, entry_cost=7.0, use_relations=False,
                       observed_paths=False)
    pred = predicted(C, cols, costs, 7.0)
    assert res.bound_ticks >= pred.max() - 1e-9            # covers every measured call
    assert res.bound_ticks == pytest.approx(pred.max())    # and charges nothing more
    assert any("per call site" in w for w in res.warnings)
    # h's loop is charged its largest total once, not once per call of the cheap site
    assert res.inlined_counts[("h", addr(fns["h"], 2))] == 170
    old = analyze_wcet(fns, "f", costs, C, cols, entry_cost=7.0, use_relations=False,
                       observed_paths=False, per_site=False)
    assert old.bound_ticks > 2 * res.bound_ticks           # g's calls of h charged h's total


def test_per_entry_facts_hold_per_instance():
    """A [loops] fact per entry (h's loop: at most 50 per call) applies in each site's
    instance with that instance's calls: site A's 10 calls may then run 500 iterations."""
    fns, cols, C, costs = setup()
    f, g, h = fns["f"], fns["g"], fns["h"]
    bounds = {"f": {addr(f, 1): 10}, "g": {addr(g, 1): 3}, "h": {addr(h, 1): 50}}
    ctx = context_bound(fns, "f", costs, bounds, inline=["g", "h"])
    # 10 iterations of f's loop, 11 calls of g, 3 calls of h per call of g, 50 iterations
    # of h's loop per call of h
    g_one = 6 + 4 * 2 + 3 * 3 + 1
    h_one = 4 + 51 * 1 + 50 * 10 + 2
    want = (3 + 2 * 11 + 4 * 10 + 5 + 1) + 11 * g_one + 33 * h_one
    assert ctx.bound_ticks == pytest.approx(want)
    assert ctx.instances == 5                             # f, g at A and B, h under each
    # the root's view charges each site its own instance
    sites = {c.block: c for c in ctx.root.calls}
    assert sites[addr(f, 2)].count == 10 and sites[addr(f, 3)].count == 1
    assert sites[addr(f, 3)].callee_wcet_ticks == pytest.approx(g_one + 3 * h_one)


def test_recursive_callee_stays_per_call():
    """A self-recursive callee is not inlined: its per-call WCET is charged at the call."""
    f, g, h = two_sites()
    r = make_fn("r", 0x7000, 3, [(0, 1), (0, 2), (1, 2)], [2],
                calls=[(1, CALL_INTERNAL, 0x7000, "r")])
    f2 = make_fn("f", 0x4000, 2, [(0, 1)], [1], calls=[(0, CALL_INTERNAL, 0x7000, "r")])
    costs = {"f": costs_of(f2, [1, 1]), "r": costs_of(r, [2, 3, 4])}
    ctx = context_bound({"f": f2, "r": r}, "f", costs, {}, per_call_wcet={"r": 100.0},
                        inline=[])
    assert ctx.bound_ticks == pytest.approx(1 + 100 + 1)


def test_bound_in_the_observed_span_ignores_non_estimable_costs():
    """Inputs where site B's loop always runs 2k times (k: site A's calls): h's loop count
    is 8·(f's site A count) on every input, a relation the CFG does not force.  A cost
    vector moved along it (h's body dearer by t, f's call block cheaper by 8t) predicts
    every measured call the same, so the fit cannot tell them apart; the bound kept to
    the inputs' span must not tell them apart either, and it covers every input."""
    fns, cols, _, costs = setup()
    f, h = fns["f"], fns["h"]
    C = np.array([counts_of(k, 2 * k) for k in range(0, 11)] * 3)
    bounds = []
    for t in (0.0, 40.0):
        moved = {n: dict(c) for n, c in costs.items()}
        moved["h"][addr(h, 2)] += t
        moved["f"][addr(f, 2)] -= 8 * t
        pred = predicted(C, cols, moved, 7.0)
        res = analyze_wcet(fns, "f", moved, C, cols, entry_cost=7.0, observed_paths=False)
        assert res.bound_ticks >= pred.max() - 1e-6
        assert any("affine span" in w for w in res.warnings)
        bounds.append(res.bound_ticks)
    assert bounds[1] == pytest.approx(bounds[0], rel=1e-6)


# --- [loops] facts of one call site ------------------------------------------------------
# f calls g at site A (block 2, inside f's loop: call at f+0x2b) and at site B (block 3:
# f+0x3b); g's loop runs once per call from A and 3 times from B (counts_of).

SITE_FACTS = {"f+0x10": 10, "h+0x10": 50,
              "g+0x10 @ f+0x2b": 1,        # the call instruction's address
              "g+0x10 @ f+0x30": 3}        # any address of the calling block


def _site_bound(loop_facts):
    fns, cols, C, costs = setup()
    res = analyze_wcet(fns, "f", costs, C, cols, loop_facts=loop_facts,
                       use_relations=False, observed_paths=False)
    return res, predicted(C, cols, costs)


def test_a_call_sites_loop_fact_holds_at_that_site_only():
    """Per site, g's loop is charged 1 iteration at A and 3 at B; with one fact for both
    sites (3), every one of A's 10 calls runs 3 and calls h 3 times."""
    res, pred = _site_bound(SITE_FACTS)
    f_own = 3 + 2 * 11 + 4 * 10 + 5 + 1
    h_one = 4 + 51 * 1 + 50 * 10 + 2
    g_at_a = (6 + 2 * 2 + 3 * 1 + 1) + 1 * h_one
    g_at_b = (6 + 2 * 4 + 3 * 3 + 1) + 3 * h_one
    assert res.bound_ticks == pytest.approx(f_own + 10 * g_at_a + g_at_b)
    assert res.bound_ticks >= pred.max()
    general, _ = _site_bound({"f+0x10": 10, "h+0x10": 50, "g+0x10": 3})
    assert general.bound_ticks == pytest.approx(f_own + 11 * g_at_b)


def test_user_loop_facts_beyond_the_inputs_are_not_capped_by_their_totals():
    """f's loop given 30 (the inputs ran it at most 10 times): the calls of g and h inside
    it are governed by the fact, not by the most calls the inputs made per call of f."""
    facts = dict(SITE_FACTS, **{"f+0x10": 30})
    res, _ = _site_bound(facts)
    ten, _ = _site_bound(SITE_FACTS)
    h_one = 4 + 51 * 1 + 50 * 10 + 2
    g_at_a = (6 + 2 * 2 + 3 * 1 + 1) + 1 * h_one
    assert res.bound_ticks == pytest.approx(ten.bound_ticks + 20 * (2 + 4 + g_at_a))


def test_site_facts_malformed_or_not_a_call_are_one_clear_error():
    from wcetfit.errors import TargetError
    from wcetfit.wcet.loops import parse_site_loop_facts

    fns, *_ = setup()
    with pytest.raises(TargetError, match="not a call of g; its calls: f\\+0x2b, f\\+0x3b"):
        parse_site_loop_facts({"g+0x10 @ f+0x0": 1}, fns)
    with pytest.raises(TargetError, match="not a call of h"):
        parse_site_loop_facts({"h+0x10 @ f+0x2b": 1}, fns)   # f calls h only through g
    with pytest.raises(TargetError, match="LOOP @ SITE"):
        parse_site_loop_facts({"g+0x10 @ ": 1}, fns)
    with pytest.raises(TargetError, match="not a loop header of g"):
        parse_site_loop_facts({"g+0x20 @ f+0x2b": 1}, fns)
    got = parse_site_loop_facts({"0x5010 @ 0x402b": {"max": 2, "total": 9}}, fns)
    (key, sites), = got.items()
    assert key == ("g", 0x5010) and list(sites) == [("f", 0x4020)]
    assert sites[("f", 0x4020)].per_entry == 2 and sites[("f", 0x4020)].total == 9


def test_the_context_insensitive_bound_takes_the_loosest_figure():
    from wcetfit.wcet.loops import loosest
    from wcetfit.wcet.result import SOURCE_FACT, SOURCE_OBSERVED, LoopBound

    observed = LoopBound(per_entry=3, total=3, source=SOURCE_OBSERVED)
    b = loosest(observed, [LoopBound(per_entry=1, source=SOURCE_FACT),
                           LoopBound(total=7, source=SOURCE_FACT)])
    assert (b.per_entry, b.total, b.source) == (7, None, SOURCE_FACT)
    b = loosest(observed, [LoopBound(per_entry=2, total=2, source=SOURCE_FACT)])
    assert (b.per_entry, b.total, b.source) == (3, 3, SOURCE_OBSERVED)


def test_a_site_without_a_fact_leaves_an_unobserved_loop_unbounded():
    """g's loop never entered and a fact for site A only: site B has no bound, so the
    context-insensitive bound may not borrow A's (analyze asks for a fact instead)."""
    from wcetfit.errors import WcetError

    fns, cols, C, costs = setup()
    g = fns["g"]
    C = C.copy()
    for j, (fn, a) in enumerate(cols):
        if fn in ("g", "h") and a != g.entry and fn == "g" and a in (0x5010, 0x5020):
            C[:, j] = 0
    facts = {"f+0x10": 10, "h+0x10": 50, "g+0x10 @ f+0x2b": 1}
    with pytest.raises(WcetError, match="g\\+0x10"):
        analyze_wcet(fns, "f", costs, C, cols, loop_facts=facts, unreached="require",
                     use_relations=False, observed_paths=False)
    # with a fact at B as well, both sites are bounded
    facts["g+0x10 @ f+0x3b"] = 3
    res = analyze_wcet(fns, "f", costs, C, cols, loop_facts=facts, unreached="require",
                       use_relations=False, observed_paths=False)
    assert res.bound_ticks > 0


def test_site_facts_are_listed_where_the_bound_is_read():
    res, _ = _site_bound(SITE_FACTS)
    note = [w for w in res.warnings if "per call site in [loops]" in w]
    assert note and "g+0x10 ≤ 1 per entry (fact) at the call at f+0x2b" in note[0]
    assert "g+0x10 ≤ 3 per entry (fact) at the call at f+0x3b" in note[0]
    assert "that site's instance" in note[0]


def through_a_pointer(targets):
    """f's loop body calls through a pointer (one call per execution of block 2); the
    count run saw it call ``targets`` (name → address).  p: a two-block leaf; q: a loop."""
    from dataclasses import replace

    from wcetfit.model import CALL_INDIRECT, ObservedTarget

    p = make_fn("p", 0x6000, 2, [(0, 1)], [1])
    q = make_fn("q", 0x7000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    f = make_fn("f", 0x4000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INDIRECT, None, None)])
    seen = tuple(ObservedTarget(a, name, 5) for name, a in targets.items())
    f = replace(f, calls=(replace(f.calls[0], observed=seen),))
    costs = {"f": costs_of(f, [1, 1, 2, 1]), "p": costs_of(p, [5, 5]),
             "q": costs_of(q, [3, 1, 7, 2])}
    bounds = {"f": {addr(f, 1): 10}, "q": {addr(q, 1): 4}}
    return {"f": f, "p": p, "q": q}, costs, bounds


def test_an_indirect_sites_targets_share_its_executions():
    """Known answer: the site runs 10 times and calls one target per execution; q (38
    ticks a call at its 4 iterations) ran at most 3 times per call of f, so the worst
    case is 3 calls of q and 7 of p (10 ticks), plus f's own 33 ticks.  Before, the
    per-call-site program charged nothing for an indirect site's targets (33 ticks)."""
    fns, costs, bounds = through_a_pointer({"p": 0x6000, "q": 0x7000})
    ctx = context_bound(fns, "f", costs, bounds, inline=["p", "q"],
                        activation_bounds={"q": 3})
    assert ctx.bound_ticks == pytest.approx(33 + 3 * 38 + 7 * 10)
    assert ctx.instances == 3
    site = next(c for c in ctx.root.calls if c.block == addr(fns["f"], 2))
    assert site.count == 10 and site.callee_wcet_ticks == pytest.approx((3 * 38 + 7 * 10) / 10)
    assert "observed" in site.note
    # without a cap on q, every execution may call the dearer target
    ctx = context_bound(fns, "f", costs, bounds, inline=["p", "q"])
    assert ctx.bound_ticks == pytest.approx(33 + 10 * 38)


def test_an_indirect_sites_recursive_target_is_charged_per_call():
    """A target without an instance (recursive, bounded per function) costs its whole-call
    WCET at every execution of the site, and the others share the executions as before
    (at most all of them): 33 + 10 × 100 + 10 × 10 ticks."""
    fns, costs, bounds = through_a_pointer({"p": 0x6000, "r": 0x8000})
    r = make_fn("r", 0x8000, 3, [(0, 1), (0, 2), (1, 2)], [2],
                calls=[(1, CALL_INTERNAL, 0x8000, "r")])
    fns["r"] = r
    costs["r"] = costs_of(r, [2, 3, 4])
    ctx = context_bound(fns, "f", costs, bounds, inline=["p"], per_call_wcet={"r": 100.0})
    assert ctx.bound_ticks == pytest.approx(33 + 10 * 100 + 10 * 10)
    site = next(c for c in ctx.root.calls if c.block == addr(fns["f"], 2))
    assert site.callee_wcet_ticks == pytest.approx(110.0)
    assert "recursive" in site.note


def test_the_per_site_bound_through_pointers_covers_every_measured_call():
    """End to end in analyze_wcet: inputs call q k ≤ 3 times (0 or 4 iterations each)
    and p 10 − k times.  The per-call-site bound is taken (before, it charged nothing for
    the site, fell below every input and was refused) and covers every input.  q's loop
    is entered several times per call of f, so its bound is the observed total of 12 per
    call of f, not 4 per entry: one call of q may run all 12 (33 + 9 × 10 + 102 = 225,
    against 217 for the slowest input), but q may not loop without being called."""
    fns, costs, bounds = through_a_pointer({"p": 0x6000, "q": 0x7000})
    cols = [(fn.name, b.address) for fn in fns.values() for b in fn.blocks]
    rows = []
    for n in range(0, 11):
        for k in range(0, min(n, 3) + 1):
            for it in (0, 4):
                rows.append([1, n + 1, n, 1, n - k, n - k, k, k * (it + 1), k * it, k])
    C = np.array(rows)
    res = analyze_wcet(fns, "f", costs, C, cols, use_relations=True, observed_paths=False)
    pred = predicted(C, cols, costs)
    assert any("callees bounded per call site" in w for w in res.warnings)
    assert pred.max() == pytest.approx(217)
    assert res.bound_ticks == pytest.approx(225)


def test_a_callers_own_bound_includes_a_callee_lumped_at_the_root():
    """With h's and g's activations bounded all at once (added once to the root's bound),
    the pass that charges a lumped function nothing at its calls is the root's alone:
    each callee's own bound stays its WCET per call, its callees included (a new user's
    MD5 report showed MD5_Update at 3.3 ticks beside its 12,235-tick callee)."""
    fns, cols, C, costs = setup()
    res = analyze_wcet(fns, "f", costs, C, cols, entry_cost=7.0, use_relations=False,
                       observed_paths=False, per_site=False)
    assert any("all its activations bounded at once" in w for w in res.warnings)
    h_one = res.functions["h"].bound_ticks
    g = res.functions["g"]
    calls_of_h = g.block_counts[addr(fns["g"], 2)]
    assert calls_of_h >= 1
    assert g.bound_ticks >= calls_of_h * h_one


def test_a_conditional_tail_call_enters_its_instance_on_the_exit_edge_only():
    """f's entry block ends in ``jne v`` (a tail call) and falls through to f's own code
    (SHA512 choosing its XOP variant so).  v runs when the block leaves by that edge, not
    at every execution of the block: measured calls either take v or f's code, and the
    bound is the slower of the two, not their sum."""
    from dataclasses import replace

    v = make_fn("v", 0x9000, 2, [(0, 1)], [1])
    f = make_fn("f", 0x4000, 3, [(0, 1), (1, 2)], [0, 2],
                calls=[(0, CALL_INTERNAL, 0x9000, "v")])
    f = replace(f, calls=tuple(replace(c, tail=True) for c in f.calls))
    fns = {"f": f, "v": v}
    cols = [(fn.name, b.address) for fn in (f, v) for b in fn.blocks]
    via_v = np.array([1, 0, 0, 1, 1])
    own = np.array([1, 1, 1, 0, 0])
    C = np.array([via_v, own] * 10)
    costs = {"f": costs_of(f, [5, 40, 30]), "v": costs_of(v, [60, 20])}
    res = analyze_wcet(fns, "f", costs, C, cols, entry_cost=3.0, use_relations=False,
                       observed_paths=False)
    pred = predicted(C, cols, costs, 3.0)
    assert pred.max() == 88.0                        # through v: 3 + 5 + 60 + 20
    assert res.bound_ticks == pytest.approx(88.0)    # not 3 + 5 + 40 + 30 + 60 + 20
    # the per-call-site program itself: v's instance entered on the exit edge only
    ctx = context_bound(fns, "f", costs, {}, inline=["v"], entry_cost=3.0)
    assert ctx is not None and ctx.bound_ticks == pytest.approx(88.0)


def test_a_per_site_bound_below_a_measured_call_is_refused_and_said(monkeypatch):
    """A per-call-site program that does not admit a measured input (its bound below that
    input's predicted time) is not used; the context-insensitive bound kept instead can be
    hundreds of times the slowest input (zlib's compress2 on init's inputs: 460×), so the
    result says why, not only the log."""
    from types import SimpleNamespace

    import wcetfit.wcet.context as ctxmod

    fns, cols, C, costs = setup()
    monkeypatch.setattr(ctxmod, "context_bound",
                        lambda *a, **k: SimpleNamespace(bound_ticks=10.0))
    res = analyze_wcet(fns, "f", costs, C, cols, entry_cost=7.0, use_relations=False,
                       observed_paths=False)
    old = analyze_wcet(fns, "f", costs, C, cols, entry_cost=7.0, use_relations=False,
                       observed_paths=False, per_site=False)
    assert res.bound_ticks == pytest.approx(old.bound_ticks)
    said = [w for w in res.warnings if "could not be bounded per call site" in w]
    assert len(said) == 1 and "(10 ticks) is below a measured input's" in said[0]


def test_a_versioned_symbol_names_a_loop_and_a_call_site():
    """libm's remquo calls __fmod_finite@GLIBC_2.15, and the report asks for a [loops] fact
    by that name: the key was refused as a malformed call-site fact ("@"), and the
    unversioned spelling was refused with a suggestion of the versioned one."""
    from dataclasses import replace

    from wcetfit.errors import TargetError
    from wcetfit.wcet.loops import parse_loop_facts, parse_site_loop_facts

    f, g, h = two_sites()
    name = "h@GLIBC_2.15"
    h = replace(h, name=name)
    g = replace(g, calls=tuple(replace(c, target_name=name) for c in g.calls))
    fns = {"f": f, "g": g, name: h}
    assert parse_loop_facts({f"{name}+0x10": 5}, fns)[(name, 0x6010)].per_entry == 5
    assert parse_site_loop_facts({f"{name}+0x10": 5}, fns) == {}
    for key in (f"{name}+0x10 @ g+0x20", f"{name}+0x10@g+0x20"):
        got = parse_site_loop_facts({key: 2}, fns)
        assert list(got) == [(name, 0x6010)], key
        assert list(got[(name, 0x6010)]) == [("g", 0x5020)]
        assert parse_loop_facts({key: 2}, fns) == {}       # a site's fact, not the loop's
    with pytest.raises(TargetError, match="no function 'h' among the analysed ones"):
        parse_loop_facts({"h+0x10": 5}, fns)


@pytest.mark.parametrize("use_relations, observed_paths", [(False, False), (True, True)])
def test_a_callees_loop_fact_beyond_the_inputs_governs_its_loop_at_every_site(
        use_relations, observed_paths):
    """libm's remquo with __fmod_finite's loop given 2,097 iterations (the inputs ran
    2,039): the per-call-site bound stayed where the inputs went (the loop's blocks kept
    their most executions per call of the root, their observed relations and envelopes,
    and the observed span), while the report said the bound rested on the fact.  Here h's
    loop ran at most 50 times per entry; given 80, each of the worst path's 13 calls of h
    runs 30 iterations more (its header and body: 1 + 10 ticks each)."""
    fns, cols, C, costs = setup()

    def bound(h_fact):
        res = analyze_wcet(fns, "f", costs, C, cols,
                           loop_facts=dict(SITE_FACTS, **{"h+0x10": h_fact}),
                           use_relations=use_relations, observed_paths=observed_paths)
        assert any("per call site" in w for w in res.warnings), res.warnings
        return res.bound_ticks

    assert bound(80) == pytest.approx(bound(50) + 13 * 30 * (1 + 10))


def either_helper():
    """f's loop calls a or b on each pass (a: 0x6000, b: 0x7000, each a counted loop)."""
    a = make_fn("a", 0x6000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    b = make_fn("b", 0x7000, 4, [(0, 1), (1, 2), (2, 1), (1, 3)], [3],
                loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1)])
    f = make_fn("f", 0x4000, 5, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 1), (1, 4)], [4],
                loops=[(1, [1, 2, 3], [(2, 1), (3, 1)], [(0, 1)], None, 1)],
                calls=[(2, CALL_INTERNAL, 0x6000, "a"), (3, CALL_INTERNAL, 0x7000, "b")])
    fns = {"f": f, "a": a, "b": b}
    costs = {"f": costs_of(f, [3, 1, 2, 2, 1]), "a": costs_of(a, [2, 1, 10, 2]),
             "b": costs_of(b, [2, 1, 12, 2])}
    rows = []
    # k passes of f's loop, all through a or all through b, n iterations of the helper's
    # loop per call: up to 10 passes of 10, or one pass of up to 100
    for k, n in [(k, n) for k in range(0, 11) for n in range(0, 11)] + \
            [(1, n) for n in range(11, 101)]:
        rows.append([1, k + 1, k, 0, 1, k, k + k * n, k * n, k, 0, 0, 0, 0])
        rows.append([1, k + 1, 0, k, 1, 0, 0, 0, 0, k, k + k * n, k * n, k])
    cols = [(fn.name, blk.address) for fn in (f, a, b) for blk in fn.blocks]
    return fns, cols, np.array(rows), costs


@pytest.mark.parametrize("span", [False, True])
def test_loops_of_two_functions_that_never_ran_together_are_not_mixed(span, monkeypatch):
    """Known answer: every input runs f's passes all through a or all through b, up to
    10 passes of 10 iterations or one of up to 100; the slowest is b's 10 × 10 (35 +
    10 × 135 = 1,385 ticks).  Each helper's loop alone may run 100 iterations per call
    of f and per entry, so a path that calls both ran both at once: a's 100 and b's 100
    in one pass each: 2,485 ticks.  The upper hull of (a's loop header total, b's) over
    the inputs, the line from (110, 0) to (0, 110), keeps the path near what one of them
    ran: a line holds the points between its ends too, and the worst path takes b's
    single pass of 100 iterations and 8 of a's (1,409 ticks; 1,411.7 in the span's linear
    relaxation), 2 % above the slowest input."""
    import wcetfit.wcet.loop_hull as loop_hull

    fns, cols, C, costs = either_helper()
    pred = predicted(C, cols, costs)
    assert pred.max() == pytest.approx(1385)
    res = analyze_wcet(fns, "f", costs, C, cols, use_relations=span)
    assert 1385 <= res.bound_ticks <= 1.02 * 1385
    note = next(w for w in res.warnings if "callees bounded per call site" in w)
    assert "upper hull of the inputs' totals" in note and "binding the worst path" in note
    monkeypatch.setattr(loop_hull, "cross_loop_relations", lambda *a, **k: ())
    mixed = analyze_wcet(fns, "f", costs, C, cols, use_relations=span)
    assert mixed.bound_ticks == pytest.approx(2485)
    # dropped with the other observed paths
    monkeypatch.undo()
    free = analyze_wcet(fns, "f", costs, C, cols, use_relations=span, observed_paths=False)
    assert free.bound_ticks >= 2485 - 1e-6


def test_relations_between_two_functions_loops_hold_on_every_input_and_skip_user_facts():
    from wcetfit.wcet.loop_hull import cross_loop_relations

    fns, cols, C, _costs = either_helper()
    names = ["f", "a", "b"]
    rels = cross_loop_relations(fns, names, C, cols)
    assert rels and all(r.x[0] != r.y[0] for r in rels)       # never within one function
    for row in C:
        count_of = dict(zip(cols, row.astype(float)))
        assert all(r.slack(count_of) >= -1e-9 for r in rels)
    # the falling edge between the helpers' loops: N(b's header) ≤ 110 − N(a's header)
    a_h, b_h = ("a", addr(fns["a"], 1)), ("b", addr(fns["b"], 1))
    edge = [r for r in rels if r.y == b_h and r.x == a_h and r.slope < 0]
    assert len(edge) == 1 and edge[0].intercept == pytest.approx(110)
    assert edge[0].slope == pytest.approx(-1) and edge[0].text() == \
        "N(b+0x10) ≤ 110 − 1·N(a+0x10)"
    # a loop a [loops] fact governs relates to nothing: its figure may pass the inputs'
    kept = cross_loop_relations(fns, names, C, cols, excluded={"a": {addr(fns["a"], 1)}})
    assert kept and all(a_h not in (r.x, r.y) for r in kept)
