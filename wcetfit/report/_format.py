"""Number formatting shared by the text and HTML reports: every time carries its unit."""

from __future__ import annotations

import math

from wcetfit.report import BlockRow, ticks_to_ns


def num(v: float | None, digits: int = 1) -> str:
    """1 decimal below 1000, thousands separators above; '—' for nothing."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ticks(v: float | None) -> str:
    return "—" if v is None else f"{num(v)} ticks"


def ns(v: float | None, tsc_hz: float | None) -> str:
    n = ticks_to_ns(v, tsc_hz)
    return "—" if n is None else f"{num(n)} ns"


def both(v: float | None, tsc_hz: float | None) -> str:
    """'1,234 ticks (475.0 ns)'."""
    if v is None:
        return "—"
    n = ticks_to_ns(v, tsc_hz)
    return ticks(v) if n is None else f"{ticks(v)} ({num(n)} ns)"


def half_width(ci: tuple[float, float] | None) -> float | None:
    return None if ci is None else (ci[1] - ci[0]) / 2


def cost_pm(row: BlockRow, scale: float = 1.0) -> str:
    """'12.3 ± 0.4' (scale 1 for ticks, 1e9/tsc_hz for ns); '—' when not estimable."""
    if row.cost_ticks is None:
        return "—"
    h = half_width(row.ci95_ticks)
    c = row.cost_ticks * scale
    return num(c) if h is None else f"{num(c)} ± {num(h * scale)}"


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def block_share(row: BlockRow) -> str:
    """The block's share of the time; '≈' where it is not estimable alone (the share then
    depends on the particular solution)."""
    if row.share is None:
        return "—"
    return ("" if row.estimable else "≈") + pct(row.share)


def block_notes(row: BlockRow, entry: int) -> list[str]:
    """What the block table's note column says of a block."""
    notes = []
    if row.count_max == 0:
        notes.append("never executed")
    if row.call:
        notes.append(row.call)
    if row.address == entry:
        notes.append("entry")
    return notes


def count_range(row: BlockRow) -> str:
    if row.count_min is None:
        return "—"
    if row.count_min == row.count_max:
        return f"{row.count_min:,}"
    return f"{row.count_min:,}–{row.count_max:,}"
