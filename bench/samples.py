"""Accuracy on the real samples: held-out errors, the chain ratios, and the WCET bound
against fresh inputs.  Also the wall time of ``wcetfit analyze samples/adpcm``.

Per sample (each measured in this run, in a scratch copy of the sample's folder so the
repository's samples keep no store):

* ``fit.<sample>.heldout_median_rel_error`` / ``..._p95_rel_error``: k-fold over inputs,
  per timed call (goal <= 1% / <= 5%).
* ``wcet.<sample>.bound_over_max_observed``: the IPET bound over the slowest call of
  2,000 fresh inputs (another seed; the inputs modules build ~10% of them to be slow;
  timed with the target's repeats, as the training inputs),
  goal <= 1.25, and ``wcet.<sample>.bound_covers_all``: the bound is >= every fresh call
  once preempted calls are rejected.  A call counts as preempted by the rule the fit
  itself uses to drop interrupted repeats (wcetfit.fit.robust: modified z-score above 3.5
  against the input's median, with the spread pooled over inputs of similar length and
  never below two TSC steps, on the calls with the machine's speed over the fresh run
  divided out, wcetfit.timing.speed), and only above the median.  How many were rejected is
  reported.
* ``fit.chain.ratio_*``: the chain sample's blocks hold 8, 16, 32 and 64 dependent
  multiplies.  Single chain blocks are not estimable (each is tied to the loop by flow
  conservation) but the differences of the paths are: T16−T8, T32−T16 and T64−T32
  cancel the loop and must stand 1 : 2 : 4 (within 2%).

Run alone: ``python -m bench.samples [sample ...]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.figures import ROOT, SAMPLES
from bench.figures import fig as _fig

FRESH_INPUTS = 2000
FRESH_SEED = 1001




def _scratch(sample: str, tmp: str) -> str:
    """A copy of the sample's folder whose binary path points at the built library."""
    src = ROOT / "samples" / sample
    dst = Path(tmp) / sample
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".wcetfit", "build"))
    os.symlink(src / "build", dst / "build")
    return str(dst)


def _preempted(ticks: np.ndarray, quantum: float,
               positions: np.ndarray | None = None) -> np.ndarray:
    """Calls the fit's repeat statistic treats as interrupted (wcetfit.fit.robust): far above
    the input's median relative to the spread of undisturbed repeats, once the machine's
    speed over the run is divided out as the fit does (wcetfit.timing.speed): a call in a slow
    period of the machine is not an interrupted call, and the bound must cover it."""
    from wcetfit.fit.robust import summarize_repeats
    from wcetfit.timing.speed import speed_profile

    t = speed_profile(ticks, quantum, positions=positions).at_reference(ticks)
    keep = summarize_repeats(t, quantum=quantum).keep
    med = np.nanmedian(t, axis=1, keepdims=True)
    return np.isfinite(t) & ~keep & (t > med)


def sample_figures(sample: str, tmp: str) -> list[dict]:
    from wcetfit import pipeline
    from wcetfit.count.run import run_counts
    from wcetfit.timing.run import run_times

    figs: list[dict] = []
    target_dir = _scratch(sample, tmp)
    s = pipeline.open_session(target_dir)
    roots = list(s.target.functions)
    counts = run_counts(s.target, s.store, s.model, roots)
    times = run_times(s.target, s.store, s.roots)
    for root in roots:
        a = pipeline.analyze_stage(s, root, counts[root], times[root])
        v = a.fit.validation
        figs += [
            _fig(f"fit.{sample}.heldout_median_rel_error", 100 * v.median_rel_error, "%",
                 "<= 1", v.median_rel_error <= 0.01),
            _fig(f"fit.{sample}.heldout_p95_rel_error", 100 * v.p95_rel_error, "%", "<= 5",
                 v.p95_rel_error <= 0.05),
            _fig(f"fit.{sample}.rank", a.fit.rank, "", None, None,
                 max_rank=a.fit.max_rank, blocks=len(a.fit.blocks),
                 estimable_alone=sum(b.estimable for b in a.fit.blocks)),
        ]
        if sample == "chain":
            figs += _chain_ratios(a.fit)
        if isinstance(a.wcet, Exception):
            figs.append(_fig(f"wcet.{sample}.bound", None, "ticks", "a bound", False,
                             error=str(a.wcet)))
            continue
        bound = float(a.wcet.upper_ticks)   # point bound + 95% margin
        # fresh inputs: another seed, timed only
        # timed as the training inputs are (the target's repeats): the rule that tells an
        # interrupted call needs the same number of repeats to be the same rule (with 5,
        # two disturbed calls of one input inflate its spread and hide a third)
        fresh = pipeline.open_session(target_dir, seed=FRESH_SEED, inputs=FRESH_INPUTS)
        ft = run_times(fresh.target, fresh.store, fresh.roots)[root]
        ticks = ft.ticks
        from wcetfit.timing.speed import call_positions, speed_profile
        when = call_positions(ft.indices, ticks.shape[1], ft.environment)
        fresh_speed = speed_profile(ticks, a.fit.quantum_ticks, positions=when)
        pre = _preempted(ticks, a.fit.quantum_ticks, when)
        kept = np.where(pre, np.nan, ticks)
        max_obs = float(np.nanmax(kept))
        figs += [
            _fig(f"wcet.{sample}.ipet_bound", bound, "ticks", None, None,
                 point=float(a.wcet.bound_ticks), margin=a.wcet.margin_ticks,
                 dispersion_factors=dict(a.wcet.dispersion_factors),
                 machine_speed=(a.fit.machine_speed or {}).get("factor_max")),
            _fig(f"wcet.{sample}.max_observed_fresh", max_obs, "ticks", None, None,
                 inputs=int(ticks.shape[0]), calls=int(np.isfinite(ticks).sum()),
                 preempted_rejected=int(pre.sum()), failures=len(ft.failures),
                 # the fresh run's own slowest sustained speed over its fast end, beside the
                 # training run's (in ipet_bound): a later session can be slower
                 fresh_machine_speed=fresh_speed.max_factor if fresh_speed.followed else None),
            _fig(f"wcet.{sample}.bound_covers_all", bool(bound >= max_obs), "", "yes",
                 bool(bound >= max_obs)),
            _fig(f"wcet.{sample}.bound_over_max_observed", bound / max_obs, "x", "<= 1.25",
                 1.0 <= bound / max_obs <= 1.25),
        ]
    return figs


def _chain_ratios(fit) -> list[dict]:  # type: ignore[no-untyped-def]
    """Path costs through each chain block, from the fit's estimable combinations."""
    from wcetfit.static.binary import load_model

    path = str(ROOT / "samples" / "chain" / "build" / "libchain.so")
    fn = load_model(path, ["chain_run"]).function("chain_run")
    # chain blocks: the ones holding a run of imul, by run length
    length = {}
    for b in fn.blocks:
        n = sum(1 for i in b.instructions if i.mnemonic == "imul")
        if n in (8, 16, 32, 64):
            length[b.address] = n
    if len(length) != 4:
        return [_fig("fit.chain.ratio", None, "", "1:2:4 within 2%", False,
                     error=f"found chain blocks {length}")]
    # Predict per-element cost of each chain path: an input of k elements all of one
    # kind differs from one of k-1 only by one loop iteration through that chain.
    by_len = {}
    for a, n in length.items():
        x = _path_counts(fn, fit, a)
        by_len[n] = x
    costs = {n: float(fit.predict(x2) - fit.predict(x1)) for n, (x1, x2) in by_len.items()}
    d1 = costs[16] - costs[8]
    d2 = costs[32] - costs[16]
    d3 = costs[64] - costs[32]
    figs = []
    for name, got, want in (("ratio_32m16_over_16m8", d2 / d1, 2.0),
                            ("ratio_64m32_over_16m8", d3 / d1, 4.0)):
        err = abs(got / want - 1)
        figs.append(_fig(f"fit.chain.{name}", got, "", f"{want:g} within 2%", err <= 0.02,
                         rel_error_pct=100 * err))
    figs.append(_fig("fit.chain.ticks_per_8_imul", d1, "ticks", None, None))
    return figs


def _path_counts(fn, fit, chain_block):  # type: ignore[no-untyped-def]
    """Two count vectors (over the fit's columns) differing by one loop iteration that
    runs ``chain_block``: found among the stored count rows' differences is fragile, so
    build them from the CFG: the iteration's blocks are the cycle through the chain
    block (header → … → chain block → … → header), taken on the shortest path."""
    import networkx as nx

    g = nx.DiGraph(fn.edges)
    loop = max(fn.loops, key=lambda lp: len(lp.body))
    h = loop.header
    there = nx.shortest_path(g.subgraph(loop.body), h, chain_block)
    back = nx.shortest_path(g.subgraph(loop.body), chain_block, h)
    cycle = there + back[1:-1]
    cols = [b.address for b in fit.blocks]
    x1 = np.zeros(len(cols))
    x2 = np.zeros(len(cols))
    for b in cycle:
        x2[cols.index(b)] += 1
    return x1, x2


def analyze_wall_time(tmp: str) -> list[dict]:
    target_dir = _scratch("adpcm", tmp + "/wall")
    cmd = [sys.executable, "-m", "wcetfit", "analyze", target_dir]
    env = dict(os.environ, WCETFIT_CACHE_DIR=str(Path(tmp) / "cache"))
    t0 = time.perf_counter()
    cold = subprocess.run(cmd, capture_output=True, text=True, env=env)
    t1 = time.perf_counter()
    warm = subprocess.run(cmd, capture_output=True, text=True, env=env)
    t2 = time.perf_counter()
    ok = cold.returncode == 0 and warm.returncode == 0
    return [
        _fig("analyze.adpcm.cold_wall_time", t1 - t0, "s", "<= 15", ok and t1 - t0 <= 15,
             note="fresh store and caches (static model, harness build, calibration)"),
        _fig("analyze.adpcm.warm_wall_time", t2 - t1, "s", None, ok,
             reference="cold run above: store reused"),
        _fig("analyze.adpcm.warm_over_cold", (t2 - t1) / (t1 - t0), "x"),
    ]


def run(samples: list[str] | None = None) -> list[dict]:
    figs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="wcetfit-bench-") as tmp:
        os.makedirs(tmp + "/wall")
        figs += analyze_wall_time(tmp)
        for sample in samples or SAMPLES:
            try:
                figs += sample_figures(sample, tmp)
            except Exception as exc:  # one sample failing must not hide the others
                figs.append(_fig(f"samples.{sample}", None, "", "runs", False,
                                 error=f"{type(exc).__name__}: {exc}"))
    return figs


if __name__ == "__main__":
    import json
    for f in run(sys.argv[1:] or None):
        print(json.dumps(f, default=str))
