"""The one shape every benchmark figure has (see bench/run.py)."""

from __future__ import annotations

from typing import Any


def fig(figure: str, value: Any, unit: str, goal: str | None = None, ok: bool | None = None,
        **extra: Any) -> dict[str, Any]:
    """A figure: its value and unit, the goal and whether it is met, plus any extra keys
    (``reference``: what a ratio is measured against in the same run, notes, details)."""
    d = {"figure": figure, "value": value, "unit": unit, "goal": goal,
         "ok": None if ok is None else bool(ok)}
    d.update({k: v for k, v in extra.items() if v is not None})
    return d
