"""A synthetic program with known block costs, executed activation by activation, giving the
per-activation rows a timing run with entry/exit probes would give (for the fit tests).

    main(n1, n2, d, s):   m0; for n1: {m1; m2 → leaf(k∈1..3)}; m1;        (call site A)
                          for n2: {m3; m4 → leaf(k∈5..20)}; m3;            (call site B)
                          if s: m5 → rec(d); m6
    leaf(k):              l0; for k: l1; l2
    rec(d):               r0; if d == 0: r1  else: r2 → rec(d−1), tiny(j∈0..6); r3
    tiny(j):              t0; for j: t1                                    (never timed)

A timed activation's exclusive row holds its own blocks, the blocks of untimed callees
(tiny; and leaf when ``short_leaf`` says leaf(1) is too short to time), ε (the part of its
own probe pair inside the interval) and δ per timed child (``child_calls``: which block
made each timed call; a call site is the calling block's address here).  The whole call (the root's
ordinary timing run, no activation probes) is Σ blocks + ε_call.  Noise: Gaussian, then
quantized to the TSC step from a random phase.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from wcetfit.measurements import ActivationRows

QUANTUM = 26.0
ADDR = {"main": 0x1000, "leaf": 0x2000, "rec": 0x3000, "tiny": 0x4000}
BLOCKS = {"main": 7, "leaf": 3, "rec": 4, "tiny": 2}
CALL_A, CALL_B, CALL_REC = 0x1000 + 0x20, 0x1000 + 0x40, 0x1000 + 0x50
CALL_REC_REC = 0x3000 + 0x20          # rec's block 2 calls rec (and the untimed tiny)


def block(fn: str, k: int) -> tuple[str, int]:
    return fn, ADDR[fn] + 0x10 * k


@dataclass
class Truth:
    costs: dict[tuple[str, int], float]
    eps: float
    delta: float
    eps_call: float

    def value(self, label_terms, labels) -> float:
        return sum(c * labels[lab] for lab, c in label_terms)

    def labels(self) -> dict[str, float]:
        from wcetfit.fit.activations import DELTA, column_label, eps_label
        out = {column_label(k): v for k, v in self.costs.items()}
        out[eps_label(0)] = self.eps
        out[DELTA] = self.delta
        return out


def truth(rng: np.random.Generator) -> Truth:
    costs = {block(fn, k): float(rng.uniform(4, 40)) for fn, nb in BLOCKS.items()
             for k in range(nb)}
    return Truth(costs, eps=30.0, delta=22.0, eps_call=60.0)


class _Act:
    def __init__(self, fn: str, inp: int, site: int, timed: bool):
        self.fn, self.inp, self.site, self.timed = fn, inp, site, timed
        self.counts: dict[tuple[str, int], int] = {}
        self.children = 0
        self.child_at: dict[int, int] = {}       # calling block address -> timed children


def simulate(n_inputs: int, seed: int, *, repeats: int = 5, sigma: float = 3.0,
             short_leaf: bool = True, same_leaf_counts: bool = False
             ) -> tuple[dict[str, ActivationRows], Truth, dict]:
    """Rows per timed function, the truth, and the root's whole-call data:
    {"columns", "counts" [inputs, columns], "ticks" [inputs, repeats], "indices"}.
    ``same_leaf_counts``: leaf always loops 3 times (its blocks cannot be separated)."""
    rng = np.random.default_rng(seed)
    tr = truth(rng)
    acts: list[_Act] = []
    whole: list[dict] = []

    def run(fn: str, inp: int, site: int, parent: _Act | None, arg: int) -> None:
        timed = fn != "tiny" and not (fn == "leaf" and short_leaf and arg == 1)
        me = _Act(fn, inp, site, timed) if timed else parent
        if timed:
            acts.append(me)
            if parent is not None:
                parent.children += 1
                parent.child_at[site] = parent.child_at.get(site, 0) + 1

        def hit(b: int, times: int = 1) -> None:
            key = block(fn, b)
            me.counts[key] = me.counts.get(key, 0) + times
            tot[key] = tot.get(key, 0) + times

        if fn == "main":
            n1, n2, d, s = arg
            hit(0)
            for _ in range(n1):
                hit(1); hit(2)
                run("leaf", inp, CALL_A, me, int(rng.integers(1, 4)))
            hit(1)
            for _ in range(n2):
                hit(3); hit(4)
                run("leaf", inp, CALL_B, me, 3 if same_leaf_counts else int(rng.integers(5, 21)))
            hit(3)
            if s:
                hit(5)
                run("rec", inp, CALL_REC, me, d)
            hit(6)
        elif fn == "leaf":
            hit(0); hit(1, arg); hit(2)
        elif fn == "rec":
            hit(0)
            if arg == 0:
                hit(1)
            else:
                hit(2)
                run("rec", inp, CALL_REC_REC, me, arg - 1)
                run("tiny", inp, 0, me, int(rng.integers(0, 7)))
            hit(3)
        elif fn == "tiny":
            hit(0); hit(1, arg)

    for i in range(n_inputs):
        tot: dict[tuple[str, int], int] = {}
        arg = (int(rng.integers(0, 6)), int(rng.integers(0, 5)), int(rng.integers(0, 5)),
               bool(rng.random() < 0.7))
        run("main", i, 0, None, arg)
        whole.append(tot)

    def noisy(true: np.ndarray) -> np.ndarray:
        t = true[:, None] + rng.normal(0, sigma, (true.size, repeats))
        return QUANTUM * np.floor((rng.uniform(0, QUANTUM, t.shape) + t) / QUANTUM)

    rows: dict[str, ActivationRows] = {}
    for fn in ("main", "leaf", "rec"):
        mine = [a for a in acts if a.fn == fn]
        cols = sorted({k for a in mine for k in a.counts})
        ci = {c: j for j, c in enumerate(cols)}
        r, c, v = [], [], []
        for k, a in enumerate(mine):
            for key, n in a.counts.items():
                r.append(k); c.append(ci[key]); v.append(n)
        X = sp.csr_matrix((v, (r, c)), shape=(len(mine), len(cols)), dtype=np.int64)
        cost = np.array([tr.costs[k] for k in cols])
        ch = np.array([a.children for a in mine], dtype=np.int32)
        cr, cc, cv = [], [], []
        for k, a in enumerate(mine):
            for site, n in a.child_at.items():
                cr.append(k); cc.append(ci[(fn, site)]); cv.append(n)
        calls = sp.csr_matrix((cv, (cr, cc)), shape=X.shape, dtype=np.float64)
        true = X @ cost + tr.eps + ch * tr.delta
        rows[fn] = ActivationRows(fn, ADDR[fn], tuple(cols), X, noisy(true), ch,
                                  np.array([a.inp for a in mine], dtype=np.int64),
                                  np.array([a.site for a in mine], dtype=np.uint64), calls)
    cols = [block(fn, k) for fn in ("main", "leaf", "rec", "tiny") for k in range(BLOCKS[fn])]
    W = np.array([[t.get(c, 0) for c in cols] for t in whole], dtype=np.int64)
    cost = np.array([tr.costs[c] for c in cols])
    root = {"columns": tuple(cols), "counts": W, "ticks": noisy(W @ cost + tr.eps_call),
            "indices": np.arange(n_inputs)}
    return rows, tr, root
