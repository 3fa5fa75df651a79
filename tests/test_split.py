"""Block splitting on synthetic systems with known truth (wcetfit.split: configs, joint, rank,
planner, rounds, checks).

Truth used here: random structured CFGs whose executions this file simulates itself
(block traces), block costs and overheads drawn by the test, timings made from them with
Gaussian noise and 26-tick TSC quantization; brute-force prefix counts from the traces;
numpy's floating-point rank on small exact integer matrices.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from wcetfit.split import checks as CK, configs as CF, joint as JS, planner as PL
from wcetfit.split import rank as RK, rounds as RD
from wcetfit.errors import WcetfitError

QUANTUM = 26


# ============================================================================================
# a tiny structured-program simulator (independent of wcetfit)
# ============================================================================================

class _Prog:
    def __init__(self) -> None:
        self.n = 0
        self.edges: list[tuple[int, int]] = []

    def new(self) -> int:
        self.n += 1
        return self.n - 1


def random_tree(rng: np.random.Generator, depth: int = 0, budget: int = 6) -> tuple:
    kinds = ["block", "if", "ifelse", "while", "dowhile"]
    probs = [0.2, 0.2, 0.25, 0.2, 0.15] if depth < 2 else [0.6, 0.2, 0.2, 0.0, 0.0]
    parts = []
    for _ in range(int(rng.integers(1, 4)) if depth == 0 else 1):
        k = kinds[int(rng.choice(5, p=probs))]
        if k == "block" or budget <= 0:
            parts.append(("block",))
        elif k == "ifelse":
            parts.append((k, random_tree(rng, depth + 1, budget - 1),
                          random_tree(rng, depth + 1, budget - 2)))
        else:
            parts.append((k, random_tree(rng, depth + 1, budget - 1)))
        budget -= 1
    return parts[0] if len(parts) == 1 else ("seq",) + tuple(parts)


def compile_tree(tree: tuple) -> tuple[int, list[tuple[int, int]], int, tuple]:
    """(n_blocks, edges, exit block, annotated tree); block 0 is the entry."""
    P = _Prog()

    def go(node: tuple) -> tuple[int, int, tuple]:
        k = node[0]
        if k == "block":
            b = P.new()
            return b, b, ("block", b)
        if k == "seq":
            parts = [go(c) for c in node[1:]]
            for (_, x, _), (e, _, _) in zip(parts, parts[1:]):
                P.edges.append((x, e))
            return parts[0][0], parts[-1][1], ("seq",) + tuple(p[2] for p in parts)
        if k == "if":
            t = P.new()
            e1, x1, a1 = go(node[1])
            j = P.new()
            P.edges += [(t, e1), (x1, j), (t, j)]
            return t, j, ("if", t, a1, j)
        if k == "ifelse":
            t = P.new()
            e1, x1, a1 = go(node[1])
            e2, x2, a2 = go(node[2])
            j = P.new()
            P.edges += [(t, e1), (t, e2), (x1, j), (x2, j)]
            return t, j, ("ifelse", t, a1, a2, j)
        if k == "while":
            h = P.new()
            e1, x1, a1 = go(node[1])
            after = P.new()
            P.edges += [(h, e1), (x1, h), (h, after)]
            return h, after, ("while", h, a1, after)
        e1, x1, a1 = go(node[1])                      # dowhile
        latch = P.new()
        after = P.new()
        P.edges += [(x1, latch), (latch, e1), (latch, after)]
        return e1, after, ("dowhile", a1, latch, after)

    entry = P.new()
    e, x, ann = go(tree)
    ret = P.new()
    P.edges += [(entry, e), (x, ret)]
    return P.n, P.edges, ret, ("seq", ("block", entry), ann, ("block", ret))


def execute(ann: tuple, rng: np.random.Generator, max_trip: int = 6) -> np.ndarray:
    """One execution's block trace: per call, each test has its own branch probability and
    each loop its own trip-count range."""
    out: list[int] = []
    probs: dict[int, float] = {}
    trips: dict[int, int] = {}

    def go(node: tuple) -> None:
        k = node[0]
        if k == "block":
            out.append(node[1])
        elif k == "seq":
            for c in node[1:]:
                go(c)
        elif k in ("if", "ifelse"):
            out.append(node[1])
            p = probs.setdefault(node[1], float(rng.uniform(0.15, 0.85)))
            if rng.random() < p:
                go(node[2])
            elif k == "ifelse":
                go(node[3])
            out.append(node[-1])
        elif k == "while":
            h = node[1]
            hi = trips.setdefault(h, int(rng.integers(1, max_trip + 1)))
            out.append(h)
            for _ in range(int(rng.integers(0, hi + 1))):
                go(node[2])
                out.append(h)
            out.append(node[3])
        else:
            latch = node[2]
            hi = trips.setdefault(latch, int(rng.integers(1, max_trip + 1)))
            for _ in range(int(rng.integers(1, hi + 1))):
                go(node[1])
                out.append(latch)
            out.append(node[3])

    go(ann)
    return np.asarray(out, dtype=np.int64)


def quantized(d: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Difference of two TSC readings of a region of true length d: the phase inside the
    26-tick step is uniform, so the mean over repeats is d."""
    phase = rng.random(d.shape)
    return QUANTUM * (np.floor(phase + d / QUANTUM) - np.floor(phase))


class System:
    """A random program with known costs, its traces and a timing simulator."""

    EPS = {CF.CONFIG_WHOLE: 70.0, CF.CONFIG_STOP: 95.0, CF.CONFIG_START: 120.0}
    DELTA = {CF.PASS_STOP_EDGE: 4.0, CF.PASS_START_DIRECT: 6.0, CF.PASS_START_EDGE: 5.0}

    def __init__(self, seed: int, n_inputs: int = 250, sigma: float = 3.0) -> None:
        rng = np.random.default_rng(seed)
        self.n, self.edges, self.exit, ann = compile_tree(random_tree(rng))
        self.addrs = tuple(0x1000 + 16 * i for i in range(self.n))
        self.traces = {i: execute(ann, np.random.default_rng([seed, i]))
                       for i in range(n_inputs)}
        self.counts = np.stack([np.bincount(self.traces[i], minlength=self.n)
                                for i in range(n_inputs)])
        self.costs = rng.uniform(20.0, 300.0, self.n)
        self.rng = np.random.default_rng([seed, 999])
        self.sigma = sigma
        self.columns = CF.Columns(self.addrs)

    def preds(self, b: int) -> list[int]:
        return sorted({s for s, d in self.edges if d == b})

    def times(self, counts: np.ndarray, eps: float, passes: np.ndarray | None = None,
              delta: float = 0.0, repeats: int = 8) -> np.ndarray:
        d = counts.astype(float) @ self.costs + eps
        if passes is not None:
            d = d + passes * delta
        d = d[:, None] + self.rng.normal(0.0, self.sigma, (counts.shape[0], repeats))
        return quantized(d, self.rng)

    def measure(self, probes) -> list[JS.ConfigTimes]:
        out = []
        for p in probes:
            pr = CF.probe_rows(p, self.columns, self.traces)
            pk = CF.pass_kind(p)
            out.append(JS.ConfigTimes(p, pr.indices, self.times(
                pr.counts, self.EPS[CF.config_id_of(p)], pr.passes,
                self.DELTA.get(pk, 0.0) if pk else 0.0)))
        return out

    def joint(self, probes) -> JS.JointSystem:
        idx = np.arange(len(self.traces))
        return JS.build_joint(self.columns, idx, self.counts,
                              self.times(self.counts, self.EPS[CF.CONFIG_WHOLE]), self.traces,
                              self.measure(probes))


# ============================================================================================
# counts from traces
# ============================================================================================

def _brute_prefix(trace: np.ndarray, n: int, x: int) -> np.ndarray | None:
    hits = np.flatnonzero(trace == x)
    if hits.size == 0:
        return None
    return np.bincount(trace[:hits[0]], minlength=n)


@pytest.mark.parametrize("seed", range(5))
def test_prefix_counts_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 12
    trace = rng.integers(0, n - 2, 400)          # ids n-2, n-1 never run
    targets = list(range(n))
    reached, rows = CF.prefix_counts(trace, n, targets)
    for x in targets:
        want = _brute_prefix(trace, n, x)
        assert reached[x] == (want is not None)
        if want is None:
            assert not rows[x].any()
        else:
            assert np.array_equal(rows[x], want)
            assert np.array_equal(CF.counts_before(trace, n, x), want)
            assert np.array_equal(CF.counts_from(trace, n, x),
                                  np.bincount(trace, minlength=n) - want)
    assert CF.counts_before(trace, n, n - 1) is None
    assert CF.counts_from(trace, n, n - 1) is None


def test_prefix_of_the_first_block_is_empty_and_ids_are_checked():
    trace = np.array([3, 1, 3, 2])
    assert not CF.counts_before(trace, 4, 3).any()
    assert np.array_equal(CF.counts_from(trace, 4, 3), [0, 1, 1, 2])
    with pytest.raises(WcetfitError):
        CF.prefix_counts(trace, 3, [0])


def test_split_points_make_segments_and_partial_prefixes():
    cols = CF.Columns((0x10, 0x20, 0x30), splits=(0x24, 0x28), ends=(0x20, 0x30, 0x40))
    assert cols.segments == (0x10, 0x20, 0x24, 0x28, 0x30)
    assert list(cols.owner) == [0, 1, 1, 1, 2]
    assert np.array_equal(cols.to_segments(np.array([5, 7, 9])), [5, 7, 7, 7, 9])
    assert np.array_equal(cols.earlier_pieces(0x28), [0, 1, 1, 0, 0])
    # a stop at the split point 0x28: block 0x20 ran twice before, its first two pieces
    # once more (the current pass has reached 0x28)
    trace = np.array([0, 1, 1, 0, 1, 2])
    stop = CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, 0x28)
    pr = CF.probe_rows(stop, cols, {0: trace})
    assert np.array_equal(pr.counts[0], [1, 1, 1, 0, 0])
    start = CF.Probe(CF.KIND_START, CF.SITE_BLOCK, 0x28)
    pr = CF.probe_rows(start, cols, {0: trace})
    assert np.array_equal(pr.counts[0], [1, 2, 2, 3, 1])
    assert pr.passes[0] == 2                     # arrivals at 0x28 after the first
    with pytest.raises(WcetfitError):
        CF.Columns((0x10, 0x20), splits=(0x20,))
    with pytest.raises(WcetfitError):
        CF.Columns((0x10, 0x20), splits=(0x50,), ends=(0x20, 0x30))


def test_passes_of_edge_probes():
    # 0 → 1 → (2 → 1)* → 3: probe at 3 on the edge from 1; every pass through 1's tail
    # before the first arrival at 3 goes through the stub, one of them reads.
    trace = np.array([0, 1, 2, 1, 2, 1, 3])
    cols = CF.Columns((0, 1, 2, 3))
    stop = CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, 3, CF.MECH_EDGE, (1,))
    pr = CF.probe_rows(stop, cols, {0: trace})
    assert np.array_equal(pr.counts[0], [1, 3, 2, 0])
    assert pr.passes[0] == 2
    start = CF.Probe(CF.KIND_START, CF.SITE_BLOCK, 1, CF.MECH_EDGE, (0, 2))
    pr = CF.probe_rows(start, cols, {0: trace})
    assert np.array_equal(pr.counts[0], [0, 3, 2, 1])
    assert pr.passes[0] == 2                     # the two passes through 2's tail after it


def test_probe_json_round_trip_and_validation():
    p = CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, 0x1130, CF.MECH_EDGE, (0x1100, 0x1120))
    assert CF.Probe.from_json(p.to_json()) == p
    assert p.key == "stop@0x1130"
    assert CF.Probe.from_json(CF.Probe(CF.KIND_START, CF.SITE_RETURN, None,
                                       CF.MECH_WRAPPER).to_json()).key == "start@return"
    with pytest.raises(WcetfitError):
        CF.Probe("halt", CF.SITE_BLOCK, 1)
    with pytest.raises(WcetfitError):
        CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, None)
    with pytest.raises(WcetfitError):
        CF.Probe(CF.KIND_STOP, CF.SITE_ENTRY, None, CF.MECH_DIRECT)


# ============================================================================================
# exact rank
# ============================================================================================

@pytest.mark.parametrize("seed", range(8))
def test_exact_rank_and_estimability_match_floating_point(seed):
    rng = np.random.default_rng(seed)
    m, n, r = 30, 9, int(rng.integers(1, 8))
    A = rng.integers(-3, 4, (m, r)) @ rng.integers(-3, 4, (r, n))
    sp = RK.ExactSpace(n)
    sp.add(A[:10])
    sp.add(A[10:])
    assert sp.rank == np.linalg.matrix_rank(A.astype(float))
    est = sp.estimable()
    for j in range(n):
        e = np.zeros(n)
        e[j] = 1
        want = np.linalg.matrix_rank(np.vstack([A, e])) == np.linalg.matrix_rank(A)
        assert est[j] == want


def test_exact_rank_sees_what_floating_point_tolerance_would_blur():
    # columns 0 and 1 differ only in one row with counts 10^6 apart: still rank 2
    A = np.array([[10**6, 10**6], [10**6 + 1, 10**6], [1, 1]])
    sp = RK.ExactSpace(2)
    sp.add(A)
    assert sp.rank == 2 and sp.estimable().all()


@pytest.mark.parametrize("inner", [5, 2048, 2049, 5000])
@pytest.mark.parametrize("b_top", [1, 2047, 2048, 2**22, RK._PRIMES[0] - 1])
def test_modular_product_is_exact_at_the_largest_residues(inner, b_top):
    # residues next to p, and more inner terms than one double product can hold exactly;
    # B's entries at the edges of one, two and three limbs
    p = RK._PRIMES[0]
    rng = np.random.default_rng(inner)
    A = p - 1 - rng.integers(0, 3, (4, inner)).astype(np.int64)
    B = b_top - rng.integers(0, 2, (inner, 3)).astype(np.int64)
    want = [[sum(int(a) * int(b) for a, b in zip(A[i], B[:, j])) % p for j in range(3)]
            for i in range(4)]
    assert RK._mulmod(A, B, p).tolist() == want


def _reduce_by_passes(space, R):
    """The remainder as one pass per pivot row computes it (the reference)."""
    R = np.asarray(R, dtype=object) % space.p
    for b, j in zip(space.rows.astype(object), space.pivots):
        R = (R - np.outer(R[:, j], b)) % space.p
    return R.astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_one_product_reduction_equals_the_pass_per_pivot(seed):
    rng = np.random.default_rng(seed)
    n = 40
    space = RK.ModSpace(n)
    for _ in range(4):
        space.add(rng.integers(0, 50, (int(rng.integers(1, 8)), n)) *
                  (rng.random((1, n)) < 0.6))
    # the rows stay in RREF: a 1 at each pivot, 0 in the other rows' pivot columns
    assert (space.rows[:, space.pivots] == np.eye(space.rank, dtype=np.int64)).all()
    R = rng.integers(-10**6, 10**6, (25, n))
    got = space.reduce(R)
    assert (got == _reduce_by_passes(space, R)).all()
    assert not got[:, space.pivots].any()


@pytest.mark.parametrize("gain", [0, 1, 3, 7, 8, 9, 30])
def test_the_rank_many_rows_add_is_found_from_few_combinations(gain):
    # 200 rows (a probe's inputs) that add `gain` dimensions to a space of rank 20: the
    # combinations' span is the rows' span, also where the gain reaches the 8 tried
    rng = np.random.default_rng(gain)
    n = 60
    basis = rng.integers(0, 40, (20 + gain, n))
    space = RK.ModSpace(n)
    space.add(basis[:20])
    R = rng.integers(0, 5, (200, 20 + gain)) @ basis
    got = space.residual(R)
    assert got.shape[0] == gain
    # the same span as every row reduced by the reference passes (RREF is canonical)
    reduced = _reduce_by_passes(space, R)
    want = RK._echelon(reduced[reduced.any(axis=1)], space.p)[0]
    assert got.shape == want.shape and (RK._echelon(got, space.p)[0] == want).all()


def test_probe_rows_that_outgrow_memory_are_refused_with_the_inputs_that_fit():
    # libexpat's XML_Parse: 7,776 candidates × 500 inputs × 3,888 blocks grew to 21.6 GB
    # and the kernel killed the planner (and nearly the machine)
    from wcetfit.errors import TooLarge
    sysm = System(0, n_inputs=120)
    cands = PL.candidate_probes(sysm.columns)
    whole = CF.probe_rows_many(cands, sysm.columns, sysm.traces, max_bytes=10**12)
    held = sum(r.counts.nbytes for r in whole)
    with pytest.raises(TooLarge) as e:
        CF.probe_rows_many(cands, sysm.columns, sysm.traces, max_bytes=held // 4)
    msg = str(e.value)
    assert "outgrow memory" in msg and "\n" not in msg
    fits = int(msg.split("--inputs ")[1].split()[0])
    assert 20 <= fits <= 120 // 4
    assert len(CF.probe_rows_many(cands, sysm.columns, sysm.traces,
                                  indices=sorted(sysm.traces)[:fits],
                                  max_bytes=held // 4)) == len(cands)


# ============================================================================================
# planning
# ============================================================================================

@pytest.mark.parametrize("seed", range(6))
def test_plan_completes_and_scores_honestly(seed):
    sysm = System(seed, n_inputs=120)
    cols = sysm.columns
    pl = PL.plan(cols, sysm.counts, sysm.traces, [], PL.candidate_probes(cols), max_probes=200)
    assert pl.complete_after
    # the base system leaves the always-once blocks with ε, as the fit would say
    assert pl.groups and any("ε[0]" in g.others for g in pl.groups)
    # replay: every proposal adds exactly the rank it claims, in order
    probes: list[CF.Probe] = []
    for prop in pl.proposals:
        before = PL.plan(cols, sysm.counts, sysm.traces, probes, [], max_probes=0)
        after = PL.plan(cols, sysm.counts, sysm.traces, probes + [prop.probe], [],
                        max_probes=0)
        assert after.rank - before.rank == prop.rank_gain
        assert after.nullity == before.nullity - prop.net_gain
        assert set(prop.newly_estimable) <= set(after.estimable)
        probes.append(prop.probe)
    final = PL.plan(cols, sysm.counts, sysm.traces, probes, [], max_probes=0)
    executed = [a for a, c in zip(cols.segments, sysm.counts.sum(0)) if c]
    assert set(final.estimable) == set(executed)
    # nothing is proposed once everything is estimable
    again = PL.plan(cols, sysm.counts, sysm.traces, probes, PL.candidate_probes(cols))
    assert not again.proposals


def test_one_private_overhead_per_probe_could_never_separate_a_loop():
    # why the overheads are shared per family: a probe whose rows differ from the
    # whole-call rows by a constant adds nothing once that constant has its own ε
    sysm = System(1, n_inputs=120)
    cols = sysm.columns
    pl = PL.plan(cols, sysm.counts, sysm.traces, [], PL.candidate_probes(cols), max_probes=200)
    lay = PL._Layout(cols)
    base = lay.rows(sysm.counts, ("eps", 0), None, None)
    sp = RK.ExactSpace(len(lay.keys))
    sp.add(base)
    private_gain = 0
    for k, prop in enumerate(pl.proposals):
        pr = CF.probe_rows(prop.probe, cols, sysm.traces)
        R = lay.rows(pr.counts, ("eps", f"own{k}"), None, None)
        sp.spaces = [s for s in sp.spaces]
        n = len(lay.keys)
        gain = sp.residual_rank(PL._pad(R, n))
        private_gain += gain - 1
        sp.add(PL._pad(R, n))
    assert sum(p.net_gain for p in pl.proposals) > private_gain


def test_without_the_entry_probe_only_the_entry_block_stays_with_the_overheads():
    sysm = System(2, n_inputs=150)
    cols = sysm.columns
    cands = PL.candidate_probes(cols, entry=False)
    cands = [c for c in cands if not (c.site == CF.SITE_BLOCK and c.address == cols.blocks[0])]
    pl = PL.plan(cols, sysm.counts, sysm.traces, [], cands, max_probes=200)
    assert not pl.complete_after
    probes = [p.probe for p in pl.proposals]
    final = PL.plan(cols, sysm.counts, sysm.traces, probes, [], max_probes=0)
    assert final.not_estimable == (cols.blocks[0],)
    (group,) = final.groups
    assert group.segments == (cols.blocks[0],)
    assert "ε[0]" in group.others and all(o.startswith("ε") for o in group.others)


# ============================================================================================
# the joint refit recovers every block
# ============================================================================================

def _fit(js: JS.JointSystem):
    from wcetfit.fit.solve import fit_function
    return fit_function(js.counts, js.ticks, js.addresses, config_ids=js.config_ids)


@pytest.mark.parametrize("seed", range(5))
def test_splitting_recovers_every_block_cost(seed):
    sysm = System(seed)
    cols = sysm.columns
    before = _fit(sysm.joint([]))
    assert any(len(g.blocks) > 1 for g in before.groups)     # something to split
    pl = PL.plan(cols, sysm.counts, sysm.traces, [], PL.candidate_probes(cols), max_probes=200)
    res = _fit(sysm.joint([p.probe for p in pl.proposals]))
    assert not res.groups
    misses, total = 0, 0
    js_pseudo = sysm.joint([p.probe for p in pl.proposals]).pseudo
    for b in res.blocks:
        if b.address >= CF.PSEUDO_BASE:               # δ of a stub pass (start probes)
            truth = System.DELTA[js_pseudo[b.address - CF.PSEUDO_BASE]]
        else:
            truth = sysm.costs[sysm.addrs.index(b.address)]
        assert b.estimable
        total += 1
        err = abs(b.cost_ticks - truth)
        misses += err > b.ci95_ticks
        assert err < 4.0 * b.ci95_ticks + 1e-9, (hex(b.address), b.cost_ticks, truth)
        assert b.ci95_ticks < 5.0                  # sub-quantum: many quantized rows
    # 95 % intervals: about one miss in twenty; four or more of ~20 has probability < 2 %
    assert misses <= 3
    # the overheads are estimable too, and right
    for cfg, eps in System.EPS.items():
        if cfg in res.overhead_ticks and cfg in res.configs:
            o = next(o for o in res.overhead if o.config == cfg)
            assert o.value_ticks == pytest.approx(eps, abs=max(4 * o.ci95_ticks, 1.0))
    # quantities estimable before splitting agree with the new estimates
    for comb in before.estimable_quantities():
        if comb.overhead_coefficients:
            continue
        new = sum(c * res.block(a).cost_ticks for a, c in comb.coefficients)
        assert abs(new - comb.value_ticks) <= 4 * comb.ci95_ticks + 1.0


@pytest.mark.parametrize("seed", [0, 3])
def test_edge_probes_and_start_probes_model_their_stub_passes(seed):
    sysm = System(seed)
    cols = sysm.columns
    # pretend every block after the entry is too short for a direct patch: probe it on
    # its edges (the pass blocks are its predecessors), and use start probes only
    cands = [CF.Probe(CF.KIND_START, CF.SITE_RETURN, None, CF.MECH_WRAPPER),
             CF.Probe(CF.KIND_START, CF.SITE_ENTRY, None, CF.MECH_WRAPPER),
             CF.Probe(CF.KIND_STOP, CF.SITE_ENTRY, None, CF.MECH_WRAPPER),
             CF.Probe(CF.KIND_STOP, CF.SITE_RETURN, None, CF.MECH_WRAPPER)]
    for b in range(1, sysm.n):
        preds = tuple(sysm.addrs[p] for p in sysm.preds(b))
        if b % 2:
            cands.append(CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, sysm.addrs[b], CF.MECH_EDGE, preds))
        else:
            cands.append(CF.Probe(CF.KIND_START, CF.SITE_BLOCK, sysm.addrs[b]))
            cands.append(CF.Probe(CF.KIND_START, CF.SITE_BLOCK, sysm.addrs[b], CF.MECH_EDGE,
                                  preds))
    pl = PL.plan(cols, sysm.counts, sysm.traces, [], cands, max_probes=300)
    probes = [p.probe for p in pl.proposals]
    js = sysm.joint(probes)
    assert js.pseudo, "the planned probes should include stub passes to model"
    res = _fit(js)
    for b in res.blocks:
        if b.address >= CF.PSEUDO_BASE:
            name = js.pseudo[b.address - CF.PSEUDO_BASE]
            truth = System.DELTA[name]
        else:
            truth = sysm.costs[sysm.addrs.index(b.address)]
        if not b.estimable:
            continue
        assert abs(b.cost_ticks - truth) < 4.0 * b.ci95_ticks + 1e-9, (b.address, truth)
    real = [b for b in res.blocks if b.address < CF.PSEUDO_BASE]
    assert sum(b.estimable for b in real) >= len(real) - 1


def test_joint_system_layout():
    sysm = System(4, n_inputs=60)
    busiest = int(np.argmax(sysm.counts.sum(axis=0)))     # a loop block: later arrivals
    probes = [CF.Probe(CF.KIND_STOP, CF.SITE_ENTRY, None, CF.MECH_WRAPPER),
              CF.Probe(CF.KIND_START, CF.SITE_BLOCK, sysm.addrs[busiest]),
              CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, sysm.addrs[-1], CF.MECH_EDGE,
                       tuple(sysm.addrs[p] for p in sysm.preds(sysm.n - 1)))]
    js = sysm.joint(probes)
    n0 = 60
    assert np.array_equal(js.config_ids[:n0], np.zeros(n0))
    assert set(js.config_ids[n0:]) <= {CF.CONFIG_STOP, CF.CONFIG_START}
    assert js.counts.shape[1] == sysm.n + len(js.pseudo)
    assert js.addresses[:sysm.n] == sysm.addrs
    # a stop at the entry reads nothing: all-zero rows
    stop_entry = js.counts[n0:2 * n0]
    assert not stop_entry.any()
    assert CF.PASS_START_DIRECT in js.pseudo
    assert js.name_of(CF.PSEUDO_BASE) == f"δ[{js.pseudo[0]}]"


# ============================================================================================
# rounds
# ============================================================================================

def test_rounds_persist_list_and_drop(tmp_path):
    from wcetfit.store import Store, StoreIdentity

    store = Store(str(tmp_path / "st"), StoreIdentity("b" * 64, "p" * 64))
    assert RD.next_round_number(store) == 1
    p = CF.Probe(CF.KIND_STOP, CF.SITE_BLOCK, 0x1130, CF.MECH_EDGE, (0x1100,))
    ticks = np.array([[78.0, np.nan], [104.0, 78.0]])
    whole = JS.ConfigTimes(CF.Probe(CF.KIND_STOP, CF.SITE_RETURN, None, CF.MECH_WRAPPER),
                           np.array([0, 1]), np.array([[300.0, 326.0], [1000.0, 990.0]]))
    r1 = RD.Round(1, "f", 7, "lfence", (JS.ConfigTimes(p, np.array([3, 5]), ticks),),
                  introduced=(p.key,), whole=whole, splits=(0x1134,),
                  fit={"rank": 3, "blocks": [], "groups": []}, based_on=(1,), time_s=1.5)
    RD.save_round(store, r1)
    RD.save_round(store, RD.Round(2, "f", 7, "lfence", (), introduced=(), based_on=(1,)))
    RD.save_round(store, RD.Round(3, "g", 7, "lfence", ()))
    assert RD.round_numbers(store) == [1, 2, 3]
    got = RD.load_round(store, 1)
    assert got.probes[0].probe == p and got.introduced == (p.key,)
    assert np.array_equal(got.probes[0].ticks, ticks, equal_nan=True)
    assert np.array_equal(got.whole.ticks, whole.ticks)
    assert got.splits == (0x1134,) and got.fit["rank"] == 3
    assert [r.number for r in RD.load_rounds(store, "f", 7)] == [1, 2]
    assert RD.drop_round(store, 1) and not RD.drop_round(store, 1)
    rounds = RD.load_rounds(store, "f")
    doc = RD.split_json("t", "f", rounds)
    assert doc["schema"] == "wcetfit.split/1"
    assert doc["rounds"][0]["stale_fit"] is True        # computed with round 1's probes
    assert RD.next_round_number(store) == 4


def test_compare_fits_reports_separations_and_disagreements():
    before = {"blocks": [{"address": "0x10", "estimable": False, "cost_ticks": None,
                          "ci95_ticks": None, "group": 0},
                         {"address": "0x20", "estimable": False, "cost_ticks": None,
                          "ci95_ticks": None, "group": 0},
                         {"address": "0x30", "estimable": True, "cost_ticks": 50.0,
                          "ci95_ticks": 1.0, "group": None}],
              "groups": [{"id": 0, "blocks": ["0x10", "0x20"]}]}
    after = {"blocks": [{"address": "0x10", "estimable": True, "cost_ticks": 5.0,
                         "ci95_ticks": 0.5, "group": None},
                        {"address": "0x20", "estimable": True, "cost_ticks": 7.0,
                         "ci95_ticks": 0.5, "group": None},
                        {"address": "0x30", "estimable": True, "cost_ticks": 55.0,
                         "ci95_ticks": 1.0, "group": None}],
             "groups": []}
    cmp = CK.compare_fits(before, after)
    assert cmp["newly_estimable"] == ["0x10", "0x20"]
    assert cmp["separated"][0]["now_estimable"] == ["0x10", "0x20"]
    assert [d["address"] for d in cmp["disagreements"]] == ["0x30"]
    assert not CK.multi_block_groups(after)
    assert CK.multi_block_groups({"groups": [{"blocks": ["0x10", "0x20", "ε[0]"]}]})


# ============================================================================================
# consistency of probe rows with the same session's whole calls
# ============================================================================================

def _state_with_round(sysm: System, measured: list[JS.ConfigTimes]):
    from wcetfit.split import workflow as R

    idx = np.arange(len(sysm.traces))
    whole = JS.ConfigTimes(CF.Probe(CF.KIND_STOP, CF.SITE_RETURN, None, CF.MECH_WRAPPER), idx,
                           sysm.times(sysm.counts, sysm.EPS[CF.CONFIG_WHOLE]))
    rnd = RD.Round(number=1, function="f", seed=1, method="lfence", probes=tuple(measured),
                   introduced=tuple(ct.probe.key for ct in measured), whole=whole)
    return R.SplitState(target=None, store=None, function="f", root_link=0, models={},
                        columns=sysm.columns, traces=sysm.traces, count_indices=idx,
                        counts=sysm.counts, timing_indices=idx,
                        timing_ticks=sysm.times(sysm.counts, sysm.EPS[CF.CONFIG_WHOLE]),
                        method="lfence", tsc_hz=None, rounds=[rnd])


def _planned(sysm: System) -> list[CF.Probe]:
    pl = PL.plan(sysm.columns, sysm.counts, sysm.traces, [], PL.candidate_probes(sysm.columns),
                 max_probes=500)
    return [p.probe for p in pl.proposals]


def test_a_biased_probe_is_found_and_left_out():
    """One probe's region runs slower than the same blocks do on average (as a loop's
    first iteration with cold predictors does): where its rows pull estimates the whole
    calls determine, the check finds that probe and only it, and without it the joint
    fit agrees with the whole calls again.  (Where the probe's region holds no direction
    the whole calls determine, the bias has nothing to contradict and cannot show.)"""
    from wcetfit.split import workflow as R

    shown = 0
    for seed in range(1, 17):
        sysm = System(seed)
        probes = [p for p in _planned(sysm) if p.kind == CF.KIND_STOP
                  and p.site == CF.SITE_BLOCK]
        measured = sysm.measure(probes)
        for bad in sorted(range(len(measured)), key=lambda k: -np.nanmean(measured[k].ticks)):
            ct = measured[bad]
            rows = CF.probe_rows(ct.probe, sysm.columns, sysm.traces,
                                 [int(i) for i in ct.indices])
            extra = 0.5 * (rows.counts[:, :sysm.n].astype(float) @ sysm.costs)
            biased = list(measured)
            biased[bad] = JS.ConfigTimes(ct.probe, ct.indices, ct.ticks + extra[:, None])
            st = _state_with_round(sysm, biased)
            _r, _j, base = R.fit(st, probes=False)
            _r, _j, joint = R.fit(st)
            if not CK.disagreements(base, joint):
                continue
            dropped, after = R.inconsistent_probes(st, base, joint,
                                                   [c.probe.key for c in biased])
            assert dropped == [ct.probe.key], f"seed {seed}"
            assert not CK.disagreements(base, after)
            shown += 1
            break
    # Whether the bias can show depends on the random system (see above); enough must show
    # for the test to check anything.
    assert shown >= 4, f"the bias showed in only {shown} of 16 systems"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_consistent_probes_are_kept(seed):
    from wcetfit.split import workflow as R

    sysm = System(seed)
    measured = sysm.measure(_planned(sysm))
    st = _state_with_round(sysm, measured)
    _r, _j, base = R.fit(st, probes=False)
    _r, _j, joint = R.fit(st)
    assert not CK.disagreements(base, joint)
    dropped, _after = R.inconsistent_probes(st, base, joint, [c.probe.key for c in measured])
    assert dropped == []


def test_auto_stops_after_two_rounds_that_did_not_help():
    from wcetfit.split import workflow as R

    def fit_with(n_estimable: int) -> dict:
        return {"blocks": [{"address": f"{0x10 * k:#x}", "estimable": k < n_estimable}
                           for k in range(6)]}

    def state(history):
        rounds = [RD.Round(number=k + 1, function="f", seed=1, method="lfence", probes=(),
                           fit=fit_with(n)) for k, n in enumerate(history)]
        return R.SplitState(target=None, store=None, function="f", root_link=0, models={},
                            columns=CF.Columns((0x10,)), traces={},
                            count_indices=np.zeros(0, np.int64),
                            counts=np.zeros((0, 1), np.int64),
                            timing_indices=np.zeros(0, np.int64),
                            timing_ticks=np.zeros((0, 1)), method="lfence", tsc_hz=None,
                            rounds=rounds)

    assert R.stalled_rounds(state([2, 4])) == 0
    assert R.stalled_rounds(state([2, 4, 4])) == 1          # one more round is allowed
    assert R.stalled_rounds(state([2, 5, 4, 4])) == 2       # then stop
    assert R.stalled_rounds(state([2, 5, 4, 6])) == 0


# ============================================================================================
# `wcetfit split` right after `wcetfit analyze`, end to end on samples/adpcm
# ============================================================================================

ADPCM = Path(__file__).resolve().parent.parent / "samples" / "adpcm"


@pytest.mark.slow
def test_split_after_analyze_gathers_the_block_traces(tmp_path):
    """`wcetfit analyze` stores counts without block traces; `wcetfit split` right after it
    counts every input again with traces, stores them, and plans.  Truth: the counts the
    analyze run stored (the recount must give the very same ones) and each trace's own
    block histogram (it must equal its input's counts)."""
    import re
    import shutil
    import subprocess
    import sys

    from wcetfit.measurements import load_counts, open_store
    from wcetfit.target import load_target

    lib = ADPCM / "build" / "libadpcm.so"
    if not lib.is_file():
        pytest.skip(f"{lib} is not built (make -C samples)")
    d = tmp_path / "adpcm"
    (d / "build").mkdir(parents=True)
    shutil.copy(lib, d / "build")
    shutil.copy(ADPCM / "inputs.py", d)
    toml = (ADPCM / "wcetfit.toml").read_text()
    # analysed with --inputs 24 (small: the test's time) where the target says 30: split
    # takes the analysis's inputs, not the toml's (it counted 30 with traces, 6 never timed)
    toml = re.sub(r"(?m)^inputs = \d+$", "inputs = 30", toml)
    toml = re.sub(r"(?m)^repeats = \d+$", "repeats = 3", toml)
    (d / "wcetfit.toml").write_text(toml)

    def wcetfit(*args):
        return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                              text=True, timeout=600)

    def stored():
        target = load_target(str(d))
        return load_counts(open_store(target), "adpcm_coder", target.measure.seed)

    res = wcetfit("analyze", str(d), "--inputs", "24")
    assert res.returncode == 0, res.stderr
    before = stored()
    assert before is not None and not before.trace and len(before.indices) == 24

    res = wcetfit("split", str(d))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "splitting the 24 inputs of the stored timing run (wcetfit.toml's [measure] " \
        "inputs = 30" in res.stdout, res.stdout
    assert "no block traces stored" in res.stdout and "24 inputs counted with block traces" \
        in res.stdout
    assert "proposals" in res.stdout and "24 inputs with block traces" in res.stdout
    after = stored()
    assert after is not None and sorted(after.trace) == [int(i) for i in before.indices]
    assert np.array_equal(after.indices, before.indices)
    assert [fc.name for fc in after.functions] == [fc.name for fc in before.functions]
    for old, new in zip(before.functions, after.functions):
        assert np.array_equal(old.counts, new.counts), old.name
    counts = np.hstack([fc.counts for fc in after.functions])
    for k, i in enumerate(after.indices):
        hist = np.bincount(after.trace[int(i)], minlength=counts.shape[1])
        assert np.array_equal(hist, counts[k]), f"input {i}"

    res = wcetfit("split", str(d), "--list")
    assert res.returncode == 0 and "no rounds stored" in res.stdout, res.stderr


def test_a_round_estimate_below_zero_beyond_its_interval_is_said():
    """libbsd's strlcpy, after a round: "0xc5f8: -18.8 ± 5.6 ticks", printed as any cost.
    A time below zero beyond its interval is said to be one no machine has; one whose
    interval reaches zero says how far above zero the data allow it."""
    import io
    from types import SimpleNamespace

    from wcetfit.cli.split import _print_round_result

    rnd = SimpleNamespace(number=1, probes=(), time_s=1.6, notes=(), failures=(),
                          excluded=(), baseline=None)
    summary = {"blocks": [{"address": "0xc5f8", "cost_ticks": -18.8, "ci95_ticks": 5.6,
                           "estimable": True},
                          {"address": "0xc5e0", "cost_ticks": -0.3, "ci95_ticks": 0.6,
                           "estimable": True}],
               "groups": [], "rank": 2, "unknowns": 2}
    cmp = {"separated": [], "newly_estimable": ["0xc5f8", "0xc5e0"], "disagreements": []}
    out = io.StringIO()
    _print_round_result(rnd, summary, cmp, out)
    lines = out.getvalue().splitlines()
    (low,) = [ln for ln in lines if ln.strip().startswith("0xc5f8")]
    (near,) = [ln for ln in lines if ln.strip().startswith("0xc5e0")]
    assert "below zero beyond its interval, a time no machine has" in low
    assert near.endswith("its cost, below zero only within its interval: at most 0.3 ticks")


def test_split_auto_runs_on_a_system_library(tmp_path):
    """libbsd's strlcpy: every probed call failed with "the call changed or unmapped
    executable memory": patching one page of its 12-page text split the kernel's mapping
    in three lines, which the worker's check took for code gone.  Adjacent mappings of the
    same file and permissions are one now, and the rounds separate the blocks."""
    import subprocess
    import sys

    from smalltarget import write_target

    lib = "/lib/x86_64-linux-gnu/libbsd.so.0"
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is absent")
    d = write_target(tmp_path / "lcpy", lib, "strlcpy",
                     "size_t strlcpy(char *dst, const char *src, size_t size);",
                     "    size = int(ctx.rng.integers(0, 300))\n"
                     "    dst = ctx.ffi.new('char[]', max(size, 1))\n"
                     "    src = ctx.ffi.new('char[]', b'x' * int(ctx.rng.integers(0, 300)))\n"
                     "    return (dst, src, size)", inputs=60, repeats=3)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "wcetfit", *args, str(d)],
                              capture_output=True, text=True, timeout=900)
    res = run("analyze", "--no-wait")
    assert res.returncode == 0, res.stderr[-2000:]
    res = run("split", "--auto")
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
    assert "changed or unmapped executable memory" not in res.stderr
    assert "round 1:" in res.stdout
    # the report says the rounds are stored and their joint fit is not in the bound (a
    # new user's report was the same before and after `split --auto`, with no word)
    res = run("report")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "split round(s) are stored for strlcpy" in " ".join(res.stdout.split()) or \
        "split round(s) are stored for strlcpy" in " ".join(
            run("report", "--function", "strlcpy").stdout.split())


def test_a_mapping_the_kernel_split_is_the_same_code():
    """/proc/self/maps lines of one file and permissions that meet are one mapping."""
    from wcetfit.isolate import _code_lost, _merged_code

    one = _merged_code([("r-xp", "/lib/a.so", 0x1000, 0xd000)])
    split = _merged_code([("r-xp", "/lib/a.so", 0x1000, 0x5000),
                          ("r-xp", "/lib/a.so", 0x5000, 0x6000),
                          ("r-xp", "/lib/a.so", 0x6000, 0xd000)])
    assert one == split == frozenset({"1000-d000 r-xp /lib/a.so"})
    gone = _merged_code([("r-xp", "/lib/a.so", 0x1000, 0x5000),
                         ("r-xp", "/lib/a.so", 0x6000, 0xd000)])
    assert _code_lost(one, gone) == ["1000-d000 r-xp /lib/a.so"]   # a page unmapped is seen
    assert _code_lost(one, split) == []
    # code mapped next to code of the same kind merges with it: nothing of the old is lost
    # (anonymous executable memory, a probe's stub beside the copy's code)
    anon = _merged_code([("r-xp", "", 0x20000, 0x21000)])
    grown = _merged_code([("r-xp", "", 0x20000, 0x21000), ("r-xp", "", 0x21000, 0x22000)])
    assert grown == frozenset({"20000-22000 r-xp"}) and _code_lost(anon, grown) == []


def test_split_prints_the_blocks_no_input_ran_in_one_line():
    """zstd's compressor: 1,755 of the 2,016 lines of `split --auto` were groups of one
    unexecuted block each, repeated every round."""
    import io

    from wcetfit.cli.split import _print_fit

    groups = [{"id": i, "kind": "unexecuted", "blocks": [f"f+{i:#x}"], "combinations": []}
              for i in range(30)]
    groups.append({"id": 99, "kind": "structural", "blocks": ["f+0x100", "f+0x110"],
                   "combinations": [{"text": "0x100 + 0x110 = 12.0 ± 1.0 ticks"}]})
    out = io.StringIO()
    _print_fit({"rank": 3, "unknowns": 40, "groups": groups,
                "blocks": [{"estimable": False}] * 40}, out, "fit")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert lines[1].startswith("  30 block(s) no input ran (unexecuted, no cost): f+0x0, ")
    assert lines[1].endswith(" …") and "group 99 (structural)" in lines[2]


def test_split_says_which_fit_it_prints_and_a_sum_of_times_below_zero():
    """libxxhash's XXH64: `split --auto` printed "0x22a8 + 0x22fa = -9.174 ± 11.65 ticks"
    with no word, and a group at 155 ± 6.1 ticks that the report gave as 144.7 ± 7.0."""
    import io

    from wcetfit.cli.split import _print_fit
    from wcetfit.split.checks import _sum_of_times

    assert _sum_of_times({"coefficients": {"0x1": 1.0, "0x2": 1.0},
                          "overhead_coefficients": {"0": 1.0}})
    assert not _sum_of_times({"coefficients": {"0x1": 1.0, "0x2": -1.0}})
    assert not _sum_of_times({"coefficients": {}})

    def line(value, ci, sum_of_times=True):
        groups = [{"id": 1, "kind": "structural", "blocks": ["f+0x1", "f+0x2"],
                   "combinations": [{"text": f"0x1 + 0x2 = {value} ± {ci} ticks",
                                     "value_ticks": value, "ci95_ticks": ci,
                                     "sum_of_times": sum_of_times}]}]
        out = io.StringIO()
        _print_fit({"rank": 1, "unknowns": 2, "groups": groups,
                    "blocks": [{"estimable": False}] * 2}, out, "fit")
        return out.getvalue().splitlines()

    lines = line(-9.174, 11.65)
    assert "split's own fit, costs not held ≥ 0" in lines[0]
    assert lines[-1].endswith("below zero only within its interval: at most 2.48 ticks"), lines
    assert "a time no machine has" in line(-9.0, 2.0)[-1]
    # a difference of two times may be below zero; a positive sum gets no word
    assert line(-9.0, 2.0, sum_of_times=False)[-1].endswith("ticks")
    assert line(9.0, 2.0)[-1].endswith("ticks")


def test_split_says_why_probe_points_cannot_be_patched():
    """"12 probe point(s) cannot be patched (see --json for why)" was all a user got: the
    reasons now come by kind, most frequent first, each with one point as an example."""
    import io
    from types import SimpleNamespace

    from wcetfit.cli.split import _print_plan, _reason_kinds

    reasons = {"stop@0x10": "0x10 is reached through a jump table",
               "stop@0x20": "0x20 is reached through a jump table",
               "stop@0x30": "0x30 has 5 predecessors (at most 4 can be patched)",
               "stop@0x40": "f+0x40: `jrcxz 0x50` at 0x44 has no rel32 form and cannot be "
                            "displaced"}
    assert _reason_kinds(reasons)[0] == (2, "0x10 is reached through a jump table")
    plan = SimpleNamespace(proposals=(), unprobeable=reasons)
    out = io.StringIO()
    _print_plan(plan, out, [])
    lines = out.getvalue().splitlines()
    assert lines[1] == "4 probe point(s) cannot be patched:"
    assert lines[2] == "  2 like 0x10 is reached through a jump table"
    assert len(lines) == 5 and "--json" not in out.getvalue()
