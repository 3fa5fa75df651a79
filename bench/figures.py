"""What the benchmark modules share: the shape of a figure (see bench/run.py), the
repository root and the samples measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["adpcm", "crc", "isort", "bsearch", "fir", "matmul", "statemachine", "calls",
           "chain"]


def fig(figure: str, value: Any, unit: str, goal: str | None = None, ok: bool | None = None,
        **extra: Any) -> dict[str, Any]:
    """A figure: its value and unit, the goal and whether it is met, plus any extra keys
    (``reference``: what a ratio is measured against in the same run, notes, details)."""
    d = {"figure": figure, "value": value, "unit": unit, "goal": goal,
         "ok": None if ok is None else bool(ok)}
    d.update({k: v for k, v in extra.items() if v is not None})
    return d
