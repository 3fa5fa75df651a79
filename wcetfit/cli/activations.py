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
    from wcetfit.timing.tsc import ticks_to_ns

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
        out.write(f"{root}: {len(a.indices)} inputs × {a.incl.shape[1]} calls timed per "
                  f"activation, method {a.method}; {len(a.function)} activations\n")
        out.write(f"  probes: {o['ticks_per_activation']:.0f} ticks "
                  f"({ticks_to_ns(o['ticks_per_activation'], hz):.0f} ns) per activation "
                  f"(median probed call {o['probed_median_ticks']:.0f} ticks, unprobed "
                  f"{o['plain_median_ticks']:.0f})\n")
        excl = a.excl
        for k, name in enumerate(a.names):
            if name not in a.timed:
                continue
            rows = a.function == k
            med = np.nanmedian(excl[rows]) if rows.any() else float("nan")
            out.write(f"  {name}: {int(rows.sum())} activations, median exclusive "
                      f"{med:.0f} ticks ({ticks_to_ns(med, hz):.0f} ns)\n")
        for name, why in a.untimed.items():
            out.write(f"  not timed: {name} (its blocks count in its callers' rows): {why}\n")
        for f in a.failures:
            out.write(f"  {f.describe()}\n")
    return 0
