"""`wcetfit time --activations`: per-activation timing of every root, with a summary."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def run_activations_cli(s: Any) -> int:
    from wcetfit.cli.progress import progress_bars
    from wcetfit.count.run import run_counts
    from wcetfit.measurements import load_counts
    from wcetfit.split.activation_run import overhead, run_activations

    out = sys.stdout
    for root in s.roots:
        cs = load_counts(s.store, root, s.target.measure.seed)
        with progress_bars() as update:
            if cs is None or not cs.trace or len(cs.trace) < len(cs.indices):
                run_counts(s.target, s.store, s.model, [root], trace=True,
                           progress=lambda d, t: update("count (trace)", d, t))
            a = run_activations(s.target, s.store, s.model, root,
                                progress=lambda d, t: update("activations", d, t))
        hz = a.tsc_hz
        o = overhead(a)
        out.write(f"{root}: {len(a.indices):,} inputs × {a.incl.shape[1]} calls timed per "
                  f"activation, method {a.method}; {len(a.function):,} activations\n")
        out.write(f"  probes: {_t(o['ticks_per_activation'], hz)} per activation (median "
                  f"probed call {_t(o['probed_median_ticks'], hz)}, unprobed "
                  f"{_t(o['plain_median_ticks'], hz)})\n")
        excl = a.excl
        for k, name in enumerate(a.names):
            if name not in a.timed:
                continue
            rows = a.function == k
            med = np.nanmedian(excl[rows]) if rows.any() else float("nan")
            out.write(f"  {name}: {int(rows.sum()):,} activations, median exclusive "
                      f"{_t(med, hz)}\n")
        for name, why in a.untimed.items():
            out.write(f"  not timed: {name} (its blocks count in its callers' rows): {why}\n")
        for f in a.failures:
            out.write(f"  {f.describe()}\n")
    return 0


def _t(ticks: float, hz: float) -> str:
    """'2,499 ticks (1,022 ns)', as the report writes times."""
    from wcetfit.report._format import both
    return both(ticks, hz)
