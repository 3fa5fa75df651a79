"""The words of the fit: linear combinations, numbers and count relations as text (the
numerics that choose them are in :mod:`wcetfit.fit.groups`)."""

from __future__ import annotations

from fractions import Fraction


def fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.6g}"


def linear_text(terms: list[tuple[str, float, Fraction | None]]) -> str:
    out = ""
    for i, (name, v, f) in enumerate(terms):
        neg = v < 0
        mag = abs(v)
        if f is not None:
            fa = abs(f)
            coef = "" if fa == 1 else (f"{fa.numerator}·" if fa.denominator == 1
                                       else f"({fa.numerator}/{fa.denominator})·")
        else:
            coef = f"{mag:.4g}·"
        if i == 0:
            out += ("−" if neg else "") + coef + name
        else:
            out += (" − " if neg else " + ") + coef + name
    return out or "0"
