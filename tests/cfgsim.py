"""Test helper: small structured CFGs, an execution simulator and a timing simulator.

Independent of wcetfit: the truth the fit tests compare against (block counts from
simulated executions, the structural count space from the CFG's flow equations, timings
from known costs with noise, TSC quantization and interrupts).

A program is a tree of constructs, each with one entry and one exit block:

    ("block",)                      one basic block
    ("seq", a, b, ...)
    ("if", then)                    test block → then → join; test → join
    ("ifelse", then, else)          test block → then | else → join (a diamond)
    ("while", body)                 header → body → header …; header → after
    ("dowhile", body)               body → latch → body …; latch → after
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Cfg:
    n_blocks: int
    edges: list[tuple[int, int]]
    entry: int
    exit: int
    tree: tuple
    names: dict[int, str]          # block → role ("test3", "then3", ...)

    def structural_basis(self) -> np.ndarray:
        """Rows spanning the block-count space: counts induced by conservative flows
        of the CFG closed by a virtual exit→entry edge."""
        V, E = self.n_blocks, len(self.edges) + 1
        inc = np.zeros((V, E))
        into = np.zeros((V, E))
        for e, (s, d) in enumerate(self.edges + [(self.exit, self.entry)]):
            inc[s, e] -= 1
            inc[d, e] += 1
            into[d, e] = 1
        _, sv, vt = np.linalg.svd(inc)
        rank = int(np.sum(sv > 1e-9))
        flows = vt[rank:]                      # [k, E] basis of circulations
        counts = flows @ into.T                # [k, V]
        u, s, w = np.linalg.svd(counts, full_matrices=False)
        return w[s > 1e-9]

    def calls_functional(self) -> np.ndarray:
        """Coefficients φ with φ·counts = number of calls (= count of the exit block)."""
        phi = np.zeros(self.n_blocks)
        phi[self.exit] = 1.0
        return phi

    def structural_row_space(self) -> np.ndarray:
        """Orthonormal basis (columns) of the span of the rows (counts, 1) any inputs can
        give: (s, φ(s)) for s in the count space."""
        S = self.structural_basis()
        rows = np.hstack([S, (S @ self.calls_functional())[:, None]])
        u, s, vt = np.linalg.svd(rows, full_matrices=False)
        return vt[s > 1e-9].T


class _Builder:
    def __init__(self) -> None:
        self.n = 0
        self.edges: list[tuple[int, int]] = []
        self.names: dict[int, str] = {}

    def new(self, name: str) -> int:
        b = self.n
        self.n += 1
        self.names[b] = name
        return b

    def build(self, node: tuple, tag: str = "") -> tuple[int, int, tuple]:
        """Returns (entry, exit, annotated node with block ids)."""
        kind = node[0]
        if kind == "block":
            b = self.new("b" + tag)
            return b, b, ("block", b)
        if kind == "seq":
            parts = [self.build(c, f"{tag}.{i}") for i, c in enumerate(node[1:])]
            for (_, x, _), (e, _, _) in zip(parts, parts[1:]):
                self.edges.append((x, e))
            return parts[0][0], parts[-1][1], ("seq",) + tuple(p[2] for p in parts)
        if kind == "if":
            t = self.new("test" + tag)
            e1, x1, a1 = self.build(node[1], tag + "t")
            j = self.new("join" + tag)
            self.edges += [(t, e1), (x1, j), (t, j)]
            return t, j, ("if", t, a1, j)
        if kind == "ifelse":
            t = self.new("test" + tag)
            e1, x1, a1 = self.build(node[1], tag + "t")
            e2, x2, a2 = self.build(node[2], tag + "e")
            j = self.new("join" + tag)
            self.edges += [(t, e1), (t, e2), (x1, j), (x2, j)]
            return t, j, ("ifelse", t, a1, a2, j)
        if kind == "while":
            h = self.new("head" + tag)
            e1, x1, a1 = self.build(node[1], tag + "w")
            after = self.new("after" + tag)
            self.edges += [(h, e1), (x1, h), (h, after)]
            return h, after, ("while", h, a1, after)
        if kind == "dowhile":
            e1, x1, a1 = self.build(node[1], tag + "d")
            latch = self.new("latch" + tag)
            after = self.new("after" + tag)
            self.edges += [(x1, latch), (latch, e1), (latch, after)]
            return e1, after, ("dowhile", a1, latch, after)
        raise ValueError(kind)


def make_cfg(tree: tuple) -> Cfg:
    """Compile a construct tree (wrapped in entry and exit blocks) into a CFG."""
    bld = _Builder()
    entry = bld.new("entry")
    e, x, ann = bld.build(tree)
    ret = bld.new("exit")
    bld.edges += [(entry, e), (x, ret)]
    return Cfg(bld.n, bld.edges, entry, ret, ("seq", ("block", entry), ann, ("block", ret)),
               bld.names)


def random_tree(rng: np.random.Generator, depth: int = 0, budget: int = 5) -> tuple:
    """A random construct tree with a handful of constructs."""
    kinds = ["block", "if", "ifelse", "while", "dowhile"]
    probs = [0.2, 0.2, 0.25, 0.2, 0.15] if depth < 2 else [0.6, 0.2, 0.2, 0.0, 0.0]
    n_parts = int(rng.integers(1, 4)) if depth == 0 else 1
    parts = []
    for _ in range(n_parts):
        k = kinds[int(rng.choice(len(kinds), p=probs))]
        if k == "block" or budget <= 0:
            parts.append(("block",))
        elif k == "if":
            parts.append(("if", random_tree(rng, depth + 1, budget - 1)))
        elif k == "ifelse":
            parts.append(("ifelse", random_tree(rng, depth + 1, budget - 1),
                          random_tree(rng, depth + 1, budget - 2)))
        else:
            parts.append((k, random_tree(rng, depth + 1, budget - 1)))
        budget -= 1
    return parts[0] if len(parts) == 1 else ("seq",) + tuple(parts)


def simulate_counts(cfg: Cfg, n_inputs: int, rng: np.random.Generator, *,
                    max_trip: int = 6, p_range: tuple[float, float] = (0.15, 0.85),
                    fixed: dict[int, float] | None = None,
                    tied: dict[int, int] | None = None) -> np.ndarray:
    """Block counts of ``n_inputs`` executions.  Per input, every test block gets its own
    branch probability and every loop its own trip-count range; ``fixed`` pins the
    probability of chosen test blocks (1.0 = always the first branch); ``tied`` maps a
    test block to a leader whose latest decision it repeats (inputs that never separate
    two branches the CFG could separate)."""
    out = np.zeros((n_inputs, cfg.n_blocks), dtype=np.int64)
    for i in range(n_inputs):
        probs: dict[int, float] = {}
        trips: dict[int, int] = {}
        last: dict[int, bool] = {}
        c = out[i]

        def run(node: tuple) -> None:
            kind = node[0]
            if kind == "block":
                c[node[1]] += 1
            elif kind == "seq":
                for ch in node[1:]:
                    run(ch)
            elif kind in ("if", "ifelse"):
                t = node[1]
                c[t] += 1
                p = (fixed or {}).get(t)
                if p is None:
                    p = probs.setdefault(t, float(rng.uniform(*p_range)))
                if tied and t in tied:
                    take = last[tied[t]]
                else:
                    take = bool(rng.random() < p)
                last[t] = take
                if take:
                    run(node[2])
                elif kind == "ifelse":
                    run(node[3])
                c[node[-1]] += 1
            elif kind == "while":
                h = node[1]
                hi = trips.setdefault(h, int(rng.integers(1, max_trip + 1)))
                n = int(rng.integers(0, hi + 1))
                c[h] += 1
                for _ in range(n):
                    run(node[2])
                    c[h] += 1
                c[node[3]] += 1
            elif kind == "dowhile":
                latch = node[2]
                hi = trips.setdefault(latch, int(rng.integers(1, max_trip + 1)))
                n = int(rng.integers(1, hi + 1))
                for _ in range(n):
                    run(node[1])
                    c[latch] += 1
                c[node[3]] += 1
            else:
                raise ValueError(kind)

        run(cfg.tree)
    return out


def simulate_ticks(counts: np.ndarray, costs: np.ndarray, overhead: float | np.ndarray,
                   rng: np.random.Generator, *, repeats: int = 5, sigma0: float = 4.0,
                   sigma_rel: float = 0.002, quantum: float = 26.0,
                   outlier_rate: float = 0.01, outlier_range: tuple[float, float] = (1e3, 3e4)
                   ) -> np.ndarray:
    """Timed calls: true time + Gaussian noise growing with the call's length, read by a
    TSC that advances in steps of ``quantum`` from a random phase, plus rare interrupts."""
    true = counts @ costs + overhead
    t = np.repeat(true[:, None], repeats, axis=1)
    t = t + rng.normal(0.0, 1.0, t.shape) * (sigma0 + sigma_rel * t)
    hit = rng.random(t.shape) < outlier_rate
    t = t + hit * rng.uniform(*outlier_range, t.shape)
    if quantum > 0:
        phase = rng.uniform(0.0, quantum, t.shape)
        t = quantum * np.floor((phase + t) / quantum)
    return t
