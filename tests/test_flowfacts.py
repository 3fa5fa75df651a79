"""[flow] facts and observed loop relations: parsing, resolution, and the hull's truth."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from wcetfit.errors import TargetError
from wcetfit.wcet.flowfacts import holds, parse_flow_facts
from wcetfit.wcet.loop_hull import loop_relations, upper_hull_edges


class _F:
    """Stands in for a FunctionModel where only names, addresses, blocks and loops count."""

    def __init__(self, name, address, blocks, loops=()):
        self.name, self.address = name, address
        self.block_addresses = tuple(blocks)
        self.loops = tuple(type("L", (), {"header": h})() for h in loops)


FNS = {"f": _F("f", 0x1000, [0x1000, 0x1010, 0x1040, 0x1080], [0x1010, 0x1040]),
       "g": _F("g", 0x2000, [0x2000, 0x2008])}


def test_a_fact_is_read_term_by_term():
    (fact,) = parse_flow_facts({"len": "16*N(f+0x10) + N(0x1040) - 4 <= 6000 - N(f+0x80)"},
                               FNS)
    terms = {(t.kind, t.function, t.address): t.coef for t in fact.terms}
    assert terms == {("N", "f", 0x1010): 16.0, ("N", "f", 0x1040): 1.0,
                     ("N", "f", 0x1080): 1.0}
    assert fact.relation == "<=" and fact.constant == 6004.0
    assert holds(fact, {("f", 0x1010): 375, ("f", 0x1040): 4}, {})
    assert not holds(fact, {("f", 0x1010): 375, ("f", 0x1040): 5}, {})


def test_activations_and_other_relations():
    (fact,) = parse_flow_facts({"a": "A(g) >= 2*N(f+0x40)"}, FNS)
    assert fact.relation == ">=" and fact.constant == 0.0
    assert holds(fact, {("f", 0x1040): 3}, {"g": 6}) and not holds(fact, {("f", 0x1040): 3},
                                                                      {"g": 5})


@pytest.mark.parametrize("text, says", [
    ("N(f+0x11) <= 3", "does not start a block of f; nearest blocks"),
    ("N(h+0x10) <= 3", "no function 'h'"),
    ("3 <= 4", "names no count"),
    ("N(f+0x10) < 3", "exactly one of"),
    ("N(f+0x10) <= 3 <= 4", "exactly one of"),
    ("N(f+0x10) N(f+0x40) <= 3", "a + or - is missing"),
    ("N(f+0x10) + ? <= 3", "cannot read"),
    ("A(h) <= 3", "no function 'h'"),
    ("N(0x9999) <= 1", "does not start a block"),
])
def test_bad_facts_are_one_line_errors(text, says):
    with pytest.raises(TargetError) as e:
        parse_flow_facts({"x": text}, FNS)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_fact_must_be_a_string():
    with pytest.raises(TargetError, match="expected a string"):
        parse_flow_facts({"x": 3}, FNS)


# --- the hull -------------------------------------------------------------------------------

def test_every_hull_edge_lies_above_every_point_and_touches_two():
    rng = np.random.default_rng(5)
    for _ in range(50):
        x = rng.integers(0, 30, 40).astype(float)
        y = rng.integers(0, 30, 40).astype(float)
        for slope, icpt in upper_hull_edges(x, y):
            line = icpt + slope * x
            assert (y <= line + 1e-9).all()
            assert np.isclose(y, line).sum() >= 2


def test_adler_like_loops_get_the_relation_per_loop_bounds_miss():
    """len ≤ 6000 split into len//16 block iterations and len % 16 remainder ones: the
    loop bounds alone allow (375, 15); the hull does not."""
    lens = np.concatenate([np.arange(0, 6001, 37), [5999, 6000, 5998]])
    x, y = lens // 16, lens % 16
    counts = np.stack([np.ones_like(lens), x, y, np.ones_like(lens)], axis=1)
    rels = loop_relations(FNS["f"], counts, FNS["f"].block_addresses)
    assert rels, "no relation found"
    # (375, 15) breaks at least one relation; every measured input keeps all of them.
    assert any(not r.holds({0x1010: 375, 0x1040: 15}) for r in rels)
    for xi, yi in zip(x, y):
        assert all(r.holds({0x1010: xi, 0x1040: yi}) for r in rels)
    # The best the IPET can then do with both loops costed is what an input reaches.
    best = max(16 * xi + 15 * yi for xi, yi in itertools.product(range(376), range(16))
               if all(r.holds({0x1010: xi, 0x1040: yi}) for r in rels))
    assert best == max(16 * a + 15 * b for a, b in zip(x, y))


# --- in the IPET ----------------------------------------------------------------------------

def _two_loops():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_wcet import make_fn
    fn = make_fn("f", 0x1000, 6, [(0, 1), (1, 2), (2, 1), (1, 3), (3, 4), (4, 3), (3, 5)],
                 [5], loops=[(1, [1, 2], [(2, 1)], [(0, 1)], None, 1),
                             (3, [3, 4], [(4, 3)], [(1, 3)], None, 1)])
    lens = np.concatenate([np.arange(0, 6001, 13), [5999, 6000]])
    x, y = lens // 16, lens % 16
    counts = np.stack([np.ones_like(x), x + 1, x, y + 1, y, np.ones_like(x)], axis=1)
    columns = [("f", b.address) for b in fn.blocks]
    costs = {"f": {fn.blocks[2].address: 16.0, fn.blocks[4].address: 1.0}}
    for b in fn.blocks:
        costs["f"].setdefault(b.address, 0.0)
    return fn, counts, columns, costs


@pytest.mark.parametrize("observed_paths, flow, expected", [
    (False, {}, 375 * 16 + 15),         # each loop at its own maximum: no input does that
    (True, {}, 6000),                   # the observed loop relation keeps to the inputs
    (False, {"len": "16*N(f+0x20) + N(f+0x40) <= 6000"}, 6000),   # the user's fact does
])
def test_loop_relations_and_flow_facts_bound_sibling_loops(observed_paths, flow, expected):
    from wcetfit.wcet.analyze import analyze_wcet

    fn, counts, columns, costs = _two_loops()
    res = analyze_wcet({"f": fn}, "f", costs, counts, columns, use_relations=False,
                       observed_paths=observed_paths, flow_facts=flow)
    assert res.bound_ticks == pytest.approx(expected)
    if flow:
        assert any("[flow]" in w for w in res.warnings)


def test_a_flow_fact_an_input_breaks_is_said():
    from wcetfit.wcet.analyze import analyze_wcet
    from wcetfit.wcet.result import BrokenInputs

    fn, counts, columns, costs = _two_loops()
    res = analyze_wcet({"f": fn}, "f", costs, counts, columns, use_relations=False,
                       observed_paths=False, flow_facts={"len": "16*N(f+0x20) <= 4000"})
    assert res.bound_ticks < 6000
    # one warning, with how many of the inputs break it (every one is checked)
    notes = [w for w in res.warnings if "break the constraints the bound keeps to" in w]
    assert len(notes) == 1
    lengths = 16 * counts[:, columns.index(("f", fn.address + 0x20))]
    n = int((lengths > 4000).sum())
    assert n >= 1 and f"{n} of the {len(counts)} measured inputs break" in notes[0]
    assert "[flow]" in notes[0]
    # the same count, as data for the report's headline
    assert res.functions["f"].broken_inputs == BrokenInputs(n, len(counts), len(counts))


# --- nested loops whose inner count grows with the outer one (isort) ---------------------

def _triangle(n_max: int = 16):
    """isort's shape: outer pass i runs the inner loop up to i times, and the inner loop is
    one block (a self-loop: nothing inside it for a path envelope to relate).  [loops]
    facts per entry (outer ≤ n_max, inner ≤ n_max − 1 back edges) allow n_max·(n_max − 1)
    inner iterations, twice what any input can run: n_max·(n_max − 1)/2."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_wcet import make_fn
    # 0 entry, 1 outer header, 2 inner loop (self-loop), 3 latch, 4 exit
    fn = make_fn("n", 0x3000, 5, [(0, 1), (1, 2), (2, 2), (2, 3), (3, 1), (1, 4)], [4],
                 loops=[(1, [1, 2, 3], [(3, 1)], [(0, 1)], None, 1),
                        (2, [2], [(2, 2)], [(1, 2)], 1, 2)])
    rng = np.random.default_rng(3)
    rows = []
    for k, n in enumerate(list(range(n_max + 1)) * 3):
        # sorted backwards (every inner loop runs i times): some, and the longest once
        full = rng.random() < 0.3 or k == 2 * n_max + 1
        inner = [i if full else int(rng.integers(0, i + 1)) for i in range(n)]
        rows.append([1, n + 1, n + sum(inner), n, 1])
    counts = np.array(rows)
    columns = [("n", b.address) for b in fn.blocks]
    costs = {"n": {b.address: 0.0 for b in fn.blocks}}
    costs["n"][fn.blocks[2].address] = 10.0
    facts = {"n+0x10": n_max, "n+0x20": n_max - 1}
    return fn, counts, columns, costs, facts


@pytest.mark.parametrize("observed_paths, expected", [
    (False, (16 + 16 * 15) * 10),        # per-entry bounds alone: every outer pass at 15
    (True, (16 + 16 * 15 // 2) * 10),    # the loops' observed relation: what inputs ran
])
def test_an_inner_loop_growing_with_the_outer_is_held_to_what_inputs_ran(observed_paths,
                                                                         expected):
    from wcetfit.wcet.analyze import analyze_wcet

    fn, counts, columns, costs, facts = _triangle()
    assert counts[:, 2].max() == 16 + 16 * 15 // 2      # the inputs reach the truth
    res = analyze_wcet({"n": fn}, "n", costs, counts, columns, loop_facts=facts,
                       use_relations=False, observed_paths=observed_paths)
    assert res.bound_ticks == pytest.approx(expected)
    if observed_paths:                        # the bound says what it rests on
        assert any("envelope" in w and "N(0x3020) ≤" in w for w in res.warnings)


def test_the_rising_hull_edge_lies_above_every_input_and_follows_the_trend():
    fn, counts, columns, _, _ = _triangle()
    rels = loop_relations(fn, counts, [a for _, a in columns])
    inner = [r for r in rels if r.blocks == (fn.blocks[2].address,)
             and r.header == fn.blocks[1].address]
    assert inner, "no relation of the inner header to the outer"
    for r in rels:
        for row in counts:
            assert r.holds({a: v for (_, a), v in zip(columns, row)})
    # at the most outer passes seen, the line is at the most inner passes seen
    top = max(inner, key=lambda r: r.slope)
    assert top.slope > 0
    assert top.intercept + top.slope * 17 == pytest.approx(16 + 16 * 15 // 2)
