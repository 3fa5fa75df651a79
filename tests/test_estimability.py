"""Unit tests of wcetfit.fit.estimability (rank, null space, groups, readable bases) and
wcetfit.fit.robust (per-input statistics, quantum detection, residual rejection), against
hand-derived truth."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from wcetfit.fit import estimability as est
from wcetfit.fit import robust


def gram(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return X.T @ X


def diamond_design(rng, n=50):
    """Columns: ε (ones), test, A, B with test = A + B."""
    t = rng.integers(0, 30, n)
    a = rng.binomial(t, 0.4)
    return np.column_stack([np.ones(n), t, a, t - a])


# --- analyze ----------------------------------------------------------------------------------

def test_full_rank_columns_are_all_estimable():
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(40), rng.integers(0, 9, 40), rng.integers(0, 9, 40)])
    an = est.analyze(gram(X))
    assert an.rank == 3 and an.nullity == 0
    assert an.estimable.all() and an.components == ()


def test_diamond_rank_null_space_and_component():
    an = est.analyze(gram(diamond_design(np.random.default_rng(2))))
    assert an.rank == 3
    assert list(an.estimable) == [True, False, False, False]
    assert [list(c) for c in an.components] == [[1, 2, 3]]
    row, null = est.component_spaces(an, an.components[0])
    assert row.shape == (3, 2) and null.shape == (3, 1)
    n = null[:, 0] / null[0, 0]
    np.testing.assert_allclose(n, [1, -1, -1], atol=1e-9)       # N_test − N_A − N_B = 0
    # estimability of combinations: test + A yes, test alone no, A − B yes
    assert an.is_estimable([0, 1, 1, 0])
    assert not an.is_estimable([0, 1, 0, 0])
    assert an.is_estimable([0, 0, 1, -1])
    assert an.is_estimable([1, 0, 0, 0])


def test_always_once_block_is_confounded_with_epsilon():
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(30), np.ones(30), rng.integers(0, 5, 30)])
    an = est.analyze(gram(X))
    assert an.rank == 2
    assert [list(c) for c in an.components] == [[0, 1]]
    assert an.is_estimable([1, 1, 0]) and not an.is_estimable([1, 0, 0])


def test_solve_is_minimum_norm_in_scaled_coordinates_and_fits():
    rng = np.random.default_rng(4)
    X = diamond_design(rng)
    truth = np.array([50.0, 4.0, 9.0, 17.0])
    y = X @ truth
    an = est.analyze(gram(X))
    th = an.solve(X.T @ y)
    np.testing.assert_allclose(X @ th, y, rtol=1e-10)
    # the solution has no component along the null space (scaled)
    assert np.abs(an.V0.T @ (th / an.scale)).max() < 1e-8


def test_row_space_solver_solves_the_weighted_problem_on_the_unweighted_row_space():
    """Weights spanning six orders of magnitude on a rank-deficient design: the solver
    (rank and row space from the unweighted matrix) gives the weighted least-squares fit,
    a solution with no null-space part, and a generalized inverse of the weighted matrix."""
    rng = np.random.default_rng(41)
    X = diamond_design(rng, 80)
    y = X @ np.array([50.0, 4.0, 9.0, 17.0]) * (1 + 0.05 * rng.standard_normal(80))
    w = 10.0 ** rng.uniform(-6, 0, 80)
    an = est.analyze(gram(X))
    Gw = (X * w[:, None]).T @ X
    sol = est.row_space_solver(an, Gw)
    assert sol.rank == an.rank == 3 and sol.clamped == 0
    th = sol.solve(X.T @ (w * y))
    sw = np.sqrt(w)
    ref = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]
    np.testing.assert_allclose(X @ th, X @ ref, rtol=1e-9)
    assert np.abs(an.V0.T @ (th / an.scale)).max() < 1e-9
    P = sol.scale[:, None] * sol.pinv_scaled() * sol.scale[None, :]
    np.testing.assert_allclose(P @ Gw @ P, P, rtol=1e-8, atol=1e-12 * np.abs(P).max())
    # it is not the unweighted solution
    assert np.abs(X @ th - X @ an.solve(X.T @ y)).max() > 1e-3
    # without a weighted matrix: the analysis's own solve
    np.testing.assert_allclose(est.row_space_solver(an).solve(X.T @ y), an.solve(X.T @ y))


def test_noise_ratio_drops_a_hopeless_direction_only():
    """Two columns that differ in a single row out of 10,000: estimable in exact
    arithmetic, but with a standard error far above the signal once the times are noisy."""
    n = 10_000
    a = np.random.default_rng(5).integers(1, 20, n).astype(float)
    b = a.copy()
    b[0] += 1
    X = np.column_stack([np.ones(n), a, b])
    assert est.analyze(gram(X), 0.0).rank == 3
    assert est.analyze(gram(X), 1e-3).rank == 2
    # a well-separated pair stays estimable at the same noise level
    c = np.random.default_rng(6).integers(1, 20, n).astype(float)
    assert est.analyze(gram(np.column_stack([np.ones(n), a, c])), 1e-3).rank == 3


def test_components_split_independent_groups():
    rng = np.random.default_rng(7)
    d1 = diamond_design(rng, 80)
    t2 = rng.integers(0, 30, 80)
    a2 = rng.binomial(t2, 0.6)
    X = np.column_stack([d1, t2, a2, t2 - a2, rng.integers(0, 4, 80)])
    an = est.analyze(gram(X))
    assert [list(c) for c in an.components] == [[1, 2, 3], [4, 5, 6]]
    assert list(np.flatnonzero(an.estimable)) == [0, 7]


# --- identical columns -----------------------------------------------------------------------

def test_column_classes_from_signatures_and_gram():
    X = np.array([[1, 2, 2, 0, 1], [1, 3, 3, 1, 1], [1, 0, 0, 5, 1]], dtype=float)
    sig = np.vstack([np.arange(1, 4) @ X, np.array([7, -3, 11]) @ X]).astype(np.int64)
    cls = est.column_classes(sig, gram(X))
    assert [list(c) for c in cls] == [[0, 4], [1, 2], [3]]
    # a forced hash collision is split by the exact Gram test
    fake = np.zeros((1, 5), dtype=np.int64)
    cls = est.column_classes(fake, gram(X))
    assert sorted(map(list, cls)) == [[0, 4], [1, 2], [3]]


# --- readable bases --------------------------------------------------------------------------

def test_readable_basis_prefers_rare_pivots():
    # row space of the diamond restricted to (test, A, B): vectors c with c_t = c_A + c_B
    vecs = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])   # columns: test+A, test+B
    rot = vecs @ np.array([[0.6, 0.8], [-0.8, 0.6]])       # any basis of the same span
    piv, rows = est.readable_basis(rot, order=[1, 2, 0])   # A, B rarer than test
    assert piv == [1, 2]
    np.testing.assert_allclose(rows, [[1, 1, 0], [1, 0, 1]], atol=1e-12)
    piv, rows = est.readable_basis(rot, order=[0, 1, 2])   # test first: a difference appears
    assert piv == [0, 1]
    np.testing.assert_allclose(rows, [[1, 0, 1], [0, 1, -1]], atol=1e-12)


def test_rationalize():
    v, fr = est.rationalize(np.array([1.0000000001, -0.5, 1 / 3 + 1e-10, np.pi]))
    assert list(v[:3]) == [1.0, -0.5, 1 / 3]
    assert fr[:3] == [Fraction(1), Fraction(-1, 2), Fraction(1, 3)] and fr[3] is None
    assert v[3] == np.pi


def test_excess_over_counts_dependencies_the_structure_does_not_force():
    S = est.orthonormal_rows(np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))  # a = b forced
    forced = np.array([[1.0], [-1.0], [0.0]])
    extra = np.array([[0.0], [1.0], [-1.0]])                                 # b = c observed
    assert est.excess_over(forced, S) == 0
    assert est.excess_over(np.hstack([forced, extra]), S) == 1


def test_orthonormal_rows_handles_dependent_rows():
    B = np.array([[1.0, 0, 1], [2.0, 0, 2], [0, 1.0, 0]])
    Q = est.orthonormal_rows(B)
    assert Q.shape == (3, 2)
    np.testing.assert_allclose(Q.T @ Q, np.eye(2), atol=1e-12)


# --- robust statistics -----------------------------------------------------------------------

def quantized(true: np.ndarray, repeats: int, rng, q=26.0, sigma=3.0):
    t = true[:, None] + rng.normal(0, sigma, (true.size, repeats))
    return q * np.floor((rng.uniform(0, q, t.shape) + t) / q)


def test_detect_quantum():
    rng = np.random.default_rng(8)
    t = quantized(rng.uniform(100, 5000, 500), 5, rng)
    assert robust.detect_quantum(t) == 26.0
    t[3, 2] = 1234567.0                       # a stray value does not spoil it
    t[4, 1] = np.nan
    assert robust.detect_quantum(t) == 26.0
    assert robust.detect_quantum(t + 0.5) == 0.0
    assert robust.detect_quantum(np.round(rng.uniform(100, 5000, (50, 3)))) == 1.0


def test_clipped_mean_keeps_sub_quantum_resolution_and_drops_interrupts():
    rng = np.random.default_rng(9)
    true = rng.uniform(200, 400, 4000)
    t = quantized(true, 9, rng)
    t[rng.random(t.shape) < 0.02] += 20000.0
    err = {}
    for stat in robust.STATISTICS:
        v = robust.summarize_repeats(t, stat, quantum=26.0).value
        err[stat] = float(np.sqrt(np.mean((v - true) ** 2)))
    assert err["clipped_mean"] < 5.0                          # below a fifth of the step
    assert err["clipped_mean"] < err["median"]
    assert err["clipped_mean"] < err["trimmed_mean"]
    assert err["mean"] > 100.0                                # ruined by interrupts
    s = robust.summarize_repeats(t, "clipped_mean", quantum=26.0)
    assert np.all(s.n_used[(t > true[:, None] + 10000).any(axis=1)] < 9)


def test_median_is_biased_by_quantization():
    rng = np.random.default_rng(10)
    true = np.full(2000, 26.0 * 10 + 5.0)    # 5 ticks above a level: mostly reads the level
    t = quantized(true, 7, rng, sigma=1.0)
    med = robust.summarize_repeats(t, "median").value
    cm = robust.summarize_repeats(t, "clipped_mean", quantum=26.0).value
    assert abs(np.mean(med) - 265.0) > 3.0
    assert abs(np.mean(cm) - 265.0) < 0.5


def test_summaries_handle_missing_repeats():
    t = np.array([[10.0, np.nan, 12.0], [np.nan, np.nan, np.nan], [5.0, 5.0, 500.0]])
    for stat in robust.STATISTICS:
        s = robust.summarize_repeats(t, stat, quantum=1.0)
        assert np.isnan(s.value[1]) and s.n_valid.tolist() == [2, 0, 3]
        assert np.isfinite(s.value[[0, 2]]).all()
    s = robust.summarize_repeats(t, "trimmed_mean", quantum=1.0, trim=0.34)
    assert s.value[2] == 5.0


def test_clipping_scale_is_pooled_over_similar_inputs():
    """With few repeats an input's own MAD is unreliable: honest calls must survive."""
    rng = np.random.default_rng(12)
    for reps in (3, 5):
        true = rng.uniform(100, 10000, 3000)
        t = true[:, None] + rng.normal(0, 1, (3000, reps)) * (2 + 0.01 * true[:, None])
        s = robust.summarize_repeats(t, "clipped_mean", quantum=0.0)
        assert 1 - s.n_used.sum() / t.size < 0.005
        t[0, 0] += 50_000.0
        s = robust.summarize_repeats(t, "clipped_mean", quantum=0.0)
        assert not s.keep[0, 0]


def test_rejection_threshold_grows_with_rows():
    assert robust.rejection_threshold(100) == robust.Z_CUT
    assert robust.rejection_threshold(100_000) > 4.4
    assert robust.rejection_threshold(10**6) > robust.rejection_threshold(10**5)


def test_local_scale_follows_heteroscedastic_noise():
    rng = np.random.default_rng(11)
    fitted = rng.uniform(100, 10000, 5000)
    resid = rng.normal(0, 1, 5000) * (2 + 0.01 * fitted)
    s = robust.local_scale(resid, fitted, 0.0, at=np.array([200.0, 9800.0]))
    assert s[0] == pytest.approx(4.0, rel=0.3)
    assert s[1] == pytest.approx(100.0, rel=0.3)
    z = robust.modified_z(resid, robust.local_scale(resid, fitted, 0.0))
    assert np.mean(np.abs(z) > 3.5) < 0.005


def test_readable_basis_pivots_are_the_first_independent_columns_in_order():
    """The chunked Gram-Schmidt (columns projected against the basis before them at once)
    picks the same pivots a column-by-column one does: the first columns of ``order``
    independent of those before them, duplicates and combinations skipped."""
    import numpy as np

    from wcetfit.fit.estimability import readable_basis

    rng = np.random.default_rng(3)
    base = rng.standard_normal((300, 40))
    # 70 coordinates of 300 vectors: 40 independent rows, then multiples and sums of them
    V = np.hstack([base, base[:, :10] * 2.0, base[:, :20] + base[:, 20:40]]).T   # [n, m]
    n = V.shape[0]
    order = list(rng.permutation(n))
    piv, rows = readable_basis(V, order)
    # the reference: one column at a time, rank growing
    ref, kept = [], np.zeros((V.shape[1], 0))
    for j in order:
        trial = np.hstack([kept, V[j][:, None]])
        if np.linalg.matrix_rank(trial, tol=1e-8) > kept.shape[1]:
            kept, ref = trial, ref + [int(j)]
    assert piv == ref
    assert np.allclose(rows[:, piv], np.eye(len(piv)))


def test_combinations_read_with_small_fractions_and_large_decimals():
    from wcetfit.fit.wording import linear_text
    # a half and three quarters read as fractions; libbz2's split group had
    # (305580091/12)·0x4888, a size no one reads off a fraction
    assert linear_text([("a", 0.5, Fraction(1, 2)), ("b", -0.75, Fraction(-3, 4)),
                        ("c", 3.0, Fraction(3))]) == "(1/2)·a − (3/4)·b + 3·c"
    text = linear_text([("ε", 1.0, Fraction(1)),
                        ("0x4888", -305580091 / 12, Fraction(-305580091, 12)),
                        ("0x4890", 200000.0, Fraction(200000))])
    assert text == "ε − 2.547e+07·0x4888 + 2e+05·0x4890"
