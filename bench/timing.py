"""Timing-method figures: empty-region overhead of the chosen fence method beside
Paoloni's CPUID methods (measured in the same calibration run), and the resolution.

``run()`` returns figures ``{figure, value, unit, goal, ok}``; ``goal``/``ok`` are None
for figures reported for information.  Run alone: ``python -m bench.timing``.
"""

from __future__ import annotations

import json

from bench.figures import fig as _fig


def run() -> list[dict]:
    from wcetfit.timing.calibrate import calibrate

    cal = calibrate()   # every method, pinned, one run
    chosen = cal.method(cal.chosen)
    s = chosen.stats
    figs = [
        _fig(f"timing.chosen_method[{cal.chosen}].overhead_median", s.overhead_median,
             "ticks", "<= 52", s.overhead_median <= 52),
        _fig(f"timing.chosen_method[{cal.chosen}].overhead_p99", s.overhead_p99, "ticks",
             "<= 104", s.overhead_p99 <= 104),
        _fig(f"timing.chosen_method[{cal.chosen}].cost_per_sample", chosen.cost_per_sample,
             "ticks"),
    ]
    # Paoloni's improved method keeps both CPUIDs outside the region (cheap region, but
    # a hypervisor exit per reading); his first method has the stop CPUID inside it.
    for ref in ("cpuid", "cpuid_inside"):
        try:
            r = cal.method(ref)
        except KeyError:
            continue
        figs += [
            _fig(f"timing.{ref}.overhead_median", r.stats.overhead_median, "ticks"),
            _fig(f"timing.{ref}.overhead_p99", r.stats.overhead_p99, "ticks"),
            _fig(f"timing.{ref}_over_chosen.overhead_median_ratio",
                 r.stats.overhead_median / s.overhead_median, "x",
                 reference=f"{cal.chosen}, same calibration run"),
            _fig(f"timing.{ref}_over_chosen.cost_per_sample_ratio",
                 r.cost_per_sample / chosen.cost_per_sample, "x",
                 reference=f"{cal.chosen}, same calibration run"),
        ]
    res = chosen.resolution
    if res is not None:
        figs += [
            _fig(f"timing.resolution[{cal.chosen}].ticks_per_iteration",
                 res.ticks_per_iteration, "ticks/iteration"),
            _fig(f"timing.resolution[{cal.chosen}].ticks_per_iteration_se",
                 res.ticks_per_iteration_se, "ticks/iteration"),
            _fig(f"timing.resolution[{cal.chosen}].monotone_minima", float(res.monotone),
                 "bool", "== 1", res.monotone),
        ]
    figs += [
        _fig("timing.quantum", float(cal.quantum_ticks), "ticks"),
        _fig("timing.tsc_hz", cal.tsc_hz, "Hz"),
    ]
    return figs


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
