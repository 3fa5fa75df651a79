"""Benchmark figures of the fit (wcetfit.fit.solve): speed and memory at 1,000 blocks × 100,000
rows, accuracy and interval coverage on synthetic systems with known truth, and the
choice of the per-input statistic.

``run()`` returns the figures for bench/run.py.  ``python -m bench.fit`` prints them;
``python -m bench.fit --scale-child`` is the subprocess that measures time and peak memory
(a fresh process, so that its peak RSS is the fit's and its data's alone).

Synthetic systems.  A function of R regions, each ``if (c) for (i < n) { if (..) A else B }``:
blocks guard (runs once per call), head (e+n), test (n), A (a), B (n−a), per input e ∈ {0,1}
(region entered), n and a random.  Its structural count space is known (per region: head,
head+test+B, A−B; and the once vector), so rank and groups are checked too.  Timings: true
cost + Gaussian noise growing with the call, 26-tick TSC quantization from a random phase,
1 % interrupts of 1,000–30,000 ticks; for the row-weight figures each input's time is
also off by its own 3 % (``misfit``), the way data-dependent costs make real timings.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

QUANTUM = 26.0


def region_system(n_inputs: int, n_regions: int, rng: np.random.Generator,
                  p_enter: float = 0.3, max_trip: int = 20, dtype=np.int64):
    """Counts [n_inputs, 5·n_regions], true costs, the structural basis, and the truth
    layout.  Built region by region into one preallocated array (no big temporaries)."""
    nb = 5 * n_regions
    counts = np.zeros((n_inputs, nb), dtype=dtype)
    for r in range(n_regions):
        e = rng.random(n_inputs) < p_enter
        n = np.where(e, rng.integers(0, max_trip + 1, n_inputs), 0)
        a = rng.binomial(n, rng.uniform(0.1, 0.9))
        g, h, t, A, B = 5 * r + np.arange(5)
        counts[:, g] = 1
        counts[:, h] = e + n
        counts[:, t] = n
        counts[:, A] = a
        counts[:, B] = n - a
    costs = np.empty(nb)
    costs[0::5] = rng.uniform(3, 10, n_regions)
    costs[1::5] = rng.uniform(2, 8, n_regions)
    costs[2::5] = rng.uniform(2, 6, n_regions)
    costs[3::5] = rng.uniform(5, 40, n_regions)
    costs[4::5] = rng.uniform(5, 40, n_regions)
    basis = [np.zeros(nb)]
    basis[0][0::5] = 1.0
    for r in range(n_regions):
        g, h, t, A, B = 5 * r + np.arange(5)
        v1 = np.zeros(nb); v1[h] = 1
        v2 = np.zeros(nb); v2[[h, t, B]] = 1
        v3 = np.zeros(nb); v3[A] = 1; v3[B] = -1
        basis += [v1, v2, v3]
    return counts, costs, np.array(basis)


def timings(counts: np.ndarray, costs: np.ndarray, eps: float, repeats: int,
            rng: np.random.Generator, *, sigma0: float = 4.0, sigma_rel: float = 0.002,
            outlier_rate: float = 0.01, chunk: int = 20000, misfit: float = 0.0
            ) -> np.ndarray:
    """Timed calls; ``misfit``: each input's time off by its own factor 1 + N(0, misfit)
    (data-dependent costs the counts do not show)."""
    n = counts.shape[0]
    out = np.empty((n, repeats))
    for a in range(0, n, chunk):
        true = counts[a:a + chunk] @ costs + eps
        if misfit:
            true = true * (1.0 + misfit * rng.standard_normal(true.size))
        t = true[:, None] + rng.normal(0, 1, (true.size, repeats)) * (sigma0 + sigma_rel * true[:, None])
        t += (rng.random(t.shape) < outlier_rate) * rng.uniform(1e3, 3e4, t.shape)
        out[a:a + chunk] = QUANTUM * np.floor((rng.uniform(0, QUANTUM, t.shape) + t) / QUANTUM)
    return out


def coverage_of(res, costs: np.ndarray, eps: float, addrs) -> tuple[int, int, list[float]]:
    truth = dict(zip(addrs, costs))
    hit = tot = 0
    rel = []
    for q in res.estimable_quantities():
        tv = q.truth(truth, {0: eps})
        tot += 1
        hit += abs(q.value_ticks - tv) <= q.ci95_ticks
        rel.append(abs(q.value_ticks - tv) / max(abs(tv), 1e-9))
    return hit, tot, rel


# --- the scale run (in a child process) --------------------------------------------------------

def scale_child(n_inputs: int, n_regions: int, repeats: int) -> dict:
    from wcetfit.fit.result import FitOptions
    from wcetfit.fit.solve import fit_function
    rng = np.random.default_rng(2024)
    counts, costs, basis = region_system(n_inputs, n_regions, rng)
    ticks = timings(counts, costs, 150.0, repeats, rng)
    addrs = [0x10000 + 0x10 * k for k in range(counts.shape[1])]
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    c0 = time.process_time()
    res = fit_function(counts, ticks, addrs, structural_basis=basis, tsc_hz=2.6e9,
                       options=FitOptions())
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    hit, tot, rel = coverage_of(res, costs, 150.0, addrs)
    v = res.validation
    return {"seconds": elapsed, "cpu_seconds": cpu, "load_before": load,
            "load_after": os.getloadavg()[0], "peak_rss_mb": peak_rss, "data_rss_mb": base_rss,
            "counts_mb": counts.nbytes / 2**20, "rank": res.rank, "max_rank": res.max_rank,
            "unknowns": res.unknowns, "groups": len(res.groups),
            "coverage": hit / max(tot, 1), "quantities": tot,
            "median_rel_error_quantities": float(np.median(rel)),
            "heldout_median_rel_error": v.median_rel_error, "heldout_p95_rel_error":
            v.p95_rel_error, "r2": v.r2, "interval_method": res.interval_method,
            "rejected": len(res.rejected), "observed_groups":
            sum(g.kind == "observed" for g in res.groups)}


def scale_figures(n_inputs: int = 100_000, n_regions: int = 200, repeats: int = 3) -> list[dict]:
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "bench.fit", "--scale-child", str(n_inputs), str(n_regions),
           str(repeats)]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(cmd, cwd=here, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"scale child failed:\n{out.stderr[-3000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    size = f"{5 * n_regions} blocks × {n_inputs} rows"
    return [
        {"figure": f"fit time, {size}", "value": d["seconds"], "unit": "s", "goal": "<= 10",
         "ok": d["seconds"] <= 10.0},
        {"figure": f"fit CPU time, {size}", "value": d["cpu_seconds"], "unit": "s"},
        {"figure": "load average during the scale run (2 cores; others' jobs slow it)",
         "value": max(d["load_before"], d["load_after"]), "unit": ""},
        {"figure": f"peak RSS incl. the {d['counts_mb']:.0f} MB counts, {size}",
         "value": d["peak_rss_mb"], "unit": "MB", "goal": "<= 2048",
         "ok": d["peak_rss_mb"] <= 2048},
        {"figure": f"peak RSS added by the fit, {size}",
         "value": d["peak_rss_mb"] - d["data_rss_mb"], "unit": "MB"},
        {"figure": f"rank = structural bound, {size}", "value": d["rank"], "unit": "",
         "goal": f"== {d['max_rank']}", "ok": d["rank"] == d["max_rank"]},
        {"figure": f"95% interval coverage, {d['quantities']} estimable quantities, {size}",
         "value": d["coverage"], "unit": "", "goal": ">= 0.90", "ok": d["coverage"] >= 0.90},
        {"figure": f"median relative error of estimable quantities, {size}",
         "value": d["median_rel_error_quantities"], "unit": ""},
        {"figure": f"held-out median rel. error per call, {size}",
         "value": d["heldout_median_rel_error"], "unit": "", "goal": "<= 0.01",
         "ok": d["heldout_median_rel_error"] <= 0.01},
        {"figure": f"held-out p95 rel. error per call, {size}",
         "value": d["heldout_p95_rel_error"], "unit": "", "goal": "<= 0.05",
         "ok": d["heldout_p95_rel_error"] <= 0.05},
    ]


# --- small systems: coverage over many seeded trials ---------------------------------------------

def coverage_figures(trials: int = 200) -> list[dict]:
    from wcetfit.fit.result import FitOptions
    from wcetfit.fit.solve import fit_function
    out = []
    for method in ("sandwich", "bootstrap"):
        hit = tot = 0
        t0 = time.perf_counter()
        for k in range(trials if method == "sandwich" else trials // 4):
            rng = np.random.default_rng(9000 + k)
            counts, costs, basis = region_system(80, 3, rng, p_enter=0.6, max_trip=8)
            ticks = timings(counts, costs, 100.0, 5, rng)
            addrs = list(range(counts.shape[1]))
            res = fit_function(counts, ticks, addrs, structural_basis=basis,
                               options=FitOptions(folds=0, intervals=method, bootstrap=200,
                                                  seed=k))
            h, t, _ = coverage_of(res, costs, 100.0, addrs)
            hit += h
            tot += t
        out.append({"figure": f"95% interval coverage ({method}), "
                              f"{trials if method == 'sandwich' else trials // 4} trials of "
                              "15 blocks × 80 inputs",
                    "value": hit / tot, "unit": "", "goal": ">= 0.90", "ok": hit / tot >= 0.90})
        out.append({"figure": f"fit time per small system ({method})",
                    "value": (time.perf_counter() - t0) / (trials if method == "sandwich"
                                                           else trials // 4) * 1e3,
                    "unit": "ms"})
    return out


# --- row weights ------------------------------------------------------------------------------

def weight_figures(trials: int = 100) -> list[dict]:
    """Relative errors and coverage, unweighted against relative weights, on systems whose
    per-input error is 3 % of the call (the measurement behind weights="relative"; the
    real samples' figures are in the wcetfit.fit.iteration docstring)."""
    from wcetfit.fit.result import FitOptions
    from wcetfit.fit.solve import fit_function
    out = []
    res: dict[str, list] = {"none": [], "relative": []}
    for k in range(trials):
        rng = np.random.default_rng(4000 + k)
        counts, costs, basis = region_system(150, 3, rng, p_enter=0.6, max_trip=40)
        true = counts @ costs + 100.0
        ticks = timings(counts, costs, 100.0, 5, rng, misfit=0.03)
        addrs = list(range(counts.shape[1]))
        for w in res:
            r = fit_function(counts, ticks, addrs, structural_basis=basis,
                             options=FitOptions(weights=w, seed=k))
            rel = np.abs(r.predict(counts) - true) / true
            h, t, _ = coverage_of(r, costs, 100.0, addrs)
            res[w].append((float(np.median(rel)), float(np.percentile(rel, 95)),
                           r.validation.median_rel_error, r.validation.p95_rel_error, h, t))
    for w, rows in res.items():
        a = np.array(rows)
        size = f"{trials} systems of 15 blocks × 150 inputs, 3 % per-input misfit"
        out += [
            {"figure": f"weights={w}: p95 rel. error against the truth, {size}",
             "value": float(a[:, 1].mean()), "unit": ""},
            {"figure": f"weights={w}: held-out median rel. error per call, {size}",
             "value": float(a[:, 2].mean()), "unit": ""},
            {"figure": f"weights={w}: held-out p95 rel. error per call, {size}",
             "value": float(a[:, 3].mean()), "unit": ""},
            {"figure": f"weights={w}: 95% interval coverage, {size}",
             "value": float(a[:, 4].sum() / a[:, 5].sum()), "unit": "", "goal": ">= 0.90",
             "ok": bool(a[:, 4].sum() / a[:, 5].sum() >= 0.90)},
        ]
    return out


# --- the per-input statistic ------------------------------------------------------------------

def statistic_figures() -> list[dict]:
    """Error of each per-input statistic against the true call time, and of the fitted
    costs built on it, on quantized timings with interrupts (the measurement behind the
    default in wcetfit.fit.robust)."""
    from wcetfit.fit import robust
    from wcetfit.fit.result import FitOptions
    from wcetfit.fit.solve import fit_function
    rng = np.random.default_rng(77)
    counts, costs, basis = region_system(3000, 6, rng, p_enter=0.6, max_trip=6)
    true = counts @ costs + 100.0
    ticks = timings(counts, costs, 100.0, 5, rng, sigma0=3.0)
    addrs = list(range(counts.shape[1]))
    out = []
    for stat in robust.STATISTICS:
        summ = robust.summarize_repeats(ticks, stat, quantum=QUANTUM)
        err = summ.value - true
        res = fit_function(counts, ticks, addrs, structural_basis=basis,
                           options=FitOptions(folds=0, statistic=stat))
        hit, tot, rel = coverage_of(res, costs, 100.0, addrs)
        qerr = []
        truth = dict(zip(addrs, costs))
        for q in res.estimable_quantities():
            qerr.append(q.value_ticks - q.truth(truth, {0: 100.0}))
        out.append({"figure": f"rowstat {stat}: per-input bias (mean error)",
                    "value": float(np.mean(err)), "unit": "ticks"})
        out.append({"figure": f"rowstat {stat}: per-input RMS error",
                    "value": float(np.sqrt(np.mean(err ** 2))), "unit": "ticks"})
        out.append({"figure": f"rowstat {stat}: RMS error of fitted estimable quantities",
                    "value": float(np.sqrt(np.mean(np.square(qerr)))), "unit": "ticks"})
        out.append({"figure": f"rowstat {stat}: interval coverage", "value": hit / tot,
                    "unit": ""})
    return out


# --- per-activation rows (wcetfit.fit.activations) ---------------------------------------------

def activation_system(n_rows: int, n_functions: int, columns: int,
                      rng: np.random.Generator, repeats: int = 3):
    """ActivationRows of ``n_functions`` functions, ``columns`` unknowns each (region
    systems as above: loops of 0..8 iterations, entered or not), ``n_rows`` activations
    in all, 0..2 timed children each (δ = 20 ticks), ε = 40; and the true costs."""
    import scipy.sparse as sp

    from wcetfit.measurements import ActivationRows
    rows, truth = {}, {}
    per = n_rows // n_functions
    for f in range(n_functions):
        counts, costs, _ = region_system(per, columns // 5, rng, max_trip=8, dtype=np.int32)
        ch = rng.integers(0, 3, per).astype(np.int32)
        X = sp.csr_matrix(counts)
        ticks = timings(counts, costs, 40.0, repeats, rng) + 20.0 * ch[:, None]
        base = 0x100000 * (f + 1)
        name = f"f{f}"
        cols = tuple((name, base + 0x10 * k) for k in range(counts.shape[1]))
        rows[name] = ActivationRows(name, base, cols, X, ticks, ch,
                                    rng.integers(0, 3000, per).astype(np.int64),
                                    np.zeros(per, np.uint64))
        truth[name] = costs
    return rows, truth


def activation_child(n_rows: int, n_functions: int, columns: int) -> dict:
    from wcetfit.fit.activations import fit_activations
    rows, _ = activation_system(n_rows, n_functions, columns, np.random.default_rng(2025))
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    t0 = time.perf_counter()
    c0 = time.process_time()
    fits = [fit_activations(r) for r in rows.values()]
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"seconds": elapsed, "cpu_seconds": cpu, "peak_rss_mb": peak, "data_rss_mb": base_rss,
            "unknowns": sum(f.unknowns for f in fits), "rows": sum(f.activations for f in fits),
            "distinct_rows": sum(f.distinct_rows for f in fits),
            "heldout_median": float(np.median([f.heldout_median_rel_error for f in fits])),
            "load": os.getloadavg()[0]}


def activation_figures(reference_seconds: float | None, n_rows: int = 1_000_000,
                       n_functions: int = 60, columns: int = 50) -> list[dict]:
    """The per-activation fit at 3,000 unknowns × 1,000,000 sparse rows (issue #15: ≤ 30 s,
    ≤ 4 GB), in a child process, and its ratio to the whole-call scale fit of the same run."""
    cmd = [sys.executable, "-m", "bench.fit", "--activation-child", str(n_rows),
           str(n_functions), str(columns)]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(cmd, cwd=here, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"activation child failed:\n{out.stderr[-3000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    size = f"{d['unknowns']} unknowns × {d['rows']} activation rows ({n_functions} functions)"
    figs = [
        {"figure": f"per-activation fit time, {size}", "value": d["seconds"], "unit": "s",
         "goal": "<= 30", "ok": d["seconds"] <= 30.0},
        {"figure": f"per-activation fit CPU time, {size}", "value": d["cpu_seconds"], "unit": "s"},
        {"figure": f"per-activation fit peak RSS incl. data, {size}", "value": d["peak_rss_mb"],
         "unit": "MB", "goal": "<= 4096", "ok": d["peak_rss_mb"] <= 4096},
        {"figure": f"distinct rows after merging identical activations, {size}",
         "value": d["distinct_rows"], "unit": ""},
        {"figure": "per-activation held-out median rel. error (median over functions)",
         "value": d["heldout_median"], "unit": ""},
        {"figure": "load average during the per-activation run", "value": d["load"], "unit": ""},
    ]
    if reference_seconds:
        figs.append({"figure": f"per-activation fit time / whole-call fit time (1,000 blocks × "
                               "100,000 rows) in the same run", "value":
                     d["seconds"] / reference_seconds, "unit": "×",
                     "reference": "fit time of the whole-call scale run above"})
    return figs


def run() -> list[dict]:
    figs = []
    figs += scale_figures()
    ref = next((f["value"] for f in figs if f["figure"].startswith("fit time,")), None)
    figs += activation_figures(ref)
    figs += coverage_figures()
    figs += weight_figures()
    figs += statistic_figures()
    return figs


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--scale-child":
        n, r, rep = (int(x) for x in argv[1:4])
        print(json.dumps(scale_child(n, r, rep)))
        return 0
    if argv and argv[0] == "--activation-child":
        n, f, c = (int(x) for x in argv[1:4])
        print(json.dumps(activation_child(n, f, c)))
        return 0
    if argv and argv[0] == "--activations":
        ref = next((f["value"] for f in scale_figures() if f["figure"].startswith("fit time,")),
                   None)
        for f in activation_figures(ref):
            print(f)
        return 0
    if argv and argv[0] == "--weights":
        for f in weight_figures():
            print(f)
        return 0
    if argv and argv[0] == "--scale":
        n = int(argv[1]) if len(argv) > 1 else 100_000
        for f in scale_figures(n):
            print(f)
        return 0
    for f in run():
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
