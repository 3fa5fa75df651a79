"""Comparing fits: what a round bought, and where the probe rows disagree with the whole calls.

:func:`fit_summary` keeps the part of a fit a round stores; :func:`compare_fits` says which
segments a round separated or made estimable and where the estimates moved
(:func:`disagreements`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from wcetfit.model import hexaddr
from wcetfit.split.joint import JointSystem


def _sum_of_times(combination: Mapping[str, Any]) -> bool:
    """Whether a combination adds times with no coefficient below zero (blocks' costs and
    overheads alike): no machine runs one below zero, where a difference of two can be."""
    coefficients = list(combination.get("coefficients", {}).values()) + list(
        combination.get("overhead_coefficients", {}).values())
    return bool(coefficients) and all(float(c) >= 0.0 for c in coefficients)


def fit_summary(fit: Any, system: JointSystem) -> dict[str, Any]:
    """The part of a FitResult a round keeps: per segment estimate, groups, overheads."""
    d = fit.to_json()
    names = {hexaddr(a): system.name_of(a) for a in system.addresses}

    def rename(a: str) -> str:
        return names.get(a, a)

    blocks = []
    for b in d["blocks"]:
        blocks.append({"address": rename(b["address"]), "estimable": b["estimable"],
                       "cost_ticks": b["cost_ticks"], "ci95_ticks": b["ci95_ticks"],
                       "group": b["group"], "executions": b.get("executions")})
    groups = []
    for g in d["groups"]:
        groups.append({"id": g["id"], "kind": g["kind"],
                       "blocks": [rename(a) for a in g["blocks"]],
                       "configs": g.get("configs", []),
                       "combinations": [{"text": c["text"], "value_ticks": c["value_ticks"],
                                         "ci95_ticks": c["ci95_ticks"],
                                         "sum_of_times": _sum_of_times(c)}
                                        for c in g["combinations"]]})
    return {"rank": d["rank"], "unknowns": d["unknowns"], "blocks": blocks, "groups": groups,
            "overhead": [{"config": o["config"], "value_ticks": o["value_ticks"],
                          "ci95_ticks": o["ci95_ticks"], "text": o["text"]}
                         for o in d.get("overhead", [])],
            "configs": {str(k): v for k, v in system.configs.items()},
            "rows": d["rows"], "validation": d.get("validation"),
            "warnings": d.get("warnings", [])}


def multi_block_groups(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Groups of a fit summary holding more than one real block."""
    return [g for g in summary.get("groups", [])
            if sum(1 for b in g["blocks"] if b.startswith("0x")) > 1]


def disagreements(reference: Mapping[str, Any], after: Mapping[str, Any]
                  ) -> list[dict[str, Any]]:
    """Blocks estimable alone in both fits whose estimates differ by more than the
    combined 95 % interval (the two half-widths added in quadrature)."""
    after_blocks = {b["address"]: b for b in after["blocks"]}
    out = []
    for b0 in reference["blocks"]:
        a = b0["address"]
        b1 = after_blocks.get(a)
        if not b1 or not (b0["estimable"] and b1["estimable"]):
            continue
        if b0["cost_ticks"] is None or b1["cost_ticks"] is None:
            continue
        half = math.hypot(b0["ci95_ticks"] or 0.0, b1["ci95_ticks"] or 0.0)
        diff = b1["cost_ticks"] - b0["cost_ticks"]
        if abs(diff) > half:
            out.append({"address": a, "before": b0["cost_ticks"], "after": b1["cost_ticks"],
                        "difference": diff, "combined_ci95": half})
    return out


def compare_fits(before: Mapping[str, Any] | None, after: Mapping[str, Any],
                 baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What changed from one fit summary to the next: groups separated, blocks newly
    estimable, and estimable-before quantities that moved beyond their intervals.

    ``baseline``: the fit of the same session's whole calls alone.  When given, the
    disagreements are measured against it rather than against ``before``: a fit from
    another session differs by the machine's drift between sessions (tens of percent
    on a shared VM), which says nothing about whether the probes' rows are consistent
    with the whole calls."""
    after_blocks = {b["address"]: b for b in after["blocks"]}
    if before is None:
        return {"separated": [], "newly_estimable": [b["address"] for b in after["blocks"]
                                                     if b["estimable"]],
                "disagreements": disagreements(baseline, after) if baseline else []}
    before_blocks = {b["address"]: b for b in before["blocks"]}
    newly = [a for a, b in after_blocks.items()
             if b["estimable"] and not before_blocks.get(a, {}).get("estimable", False)]
    separated = []
    for g in before.get("groups", []):
        members = [a for a in g["blocks"] if a in after_blocks]
        if not members:
            continue
        now_groups = sorted({after_blocks[a]["group"] for a in members
                             if after_blocks[a]["group"] is not None})
        now_alone = [a for a in members if after_blocks[a]["estimable"]]
        if now_alone or len(now_groups) > 1:
            separated.append({"group": g["id"], "blocks": g["blocks"],
                              "now_estimable": now_alone, "now_in_groups": now_groups})
    return {"separated": separated, "newly_estimable": newly,
            "disagreements": disagreements(baseline if baseline is not None else before,
                                           after),
            "against": "same-session whole calls" if baseline is not None
            else "previous fit"}
