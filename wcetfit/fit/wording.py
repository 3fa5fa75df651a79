"""The words of the fit: linear combinations, numbers and count relations as text (the
numerics that choose them are in :mod:`wcetfit.fit.groups`)."""

from __future__ import annotations

from fractions import Fraction


def fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.6g}"


# A fraction reads better than its decimal while it is small: 3/4·a, not 0.75·a.  libbz2's
# split groups had (305580091/12)·0x4888: a decimal (2.547e+07·) says the size at once.
MAX_FRACTION_NUMERATOR = 99
MAX_WHOLE_COEFFICIENT = 99_999


def _readable_fraction(f: Fraction) -> bool:
    if f.denominator == 1:
        return f.numerator <= MAX_WHOLE_COEFFICIENT
    return f.numerator <= MAX_FRACTION_NUMERATOR


def linear_text(terms: list[tuple[str, float, Fraction | None]]) -> str:
    out = ""
    for i, (name, v, f) in enumerate(terms):
        neg = v < 0
        mag = abs(v)
        if f is not None and _readable_fraction(abs(f)):
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


def relations_text(pairs: list[tuple[list[tuple[str, float]], list[tuple[str, float]]]],
                   structural: bool, total: int | None = None) -> tuple[list[str], str | None]:
    """Count relations "lhs = rhs" (each side: (block name, coefficient) terms) and the
    advice to break them; without a structural basis the advice is conditional.
    ``total``: how many relations there are, of which ``pairs`` are the first."""
    texts: list[str] = []
    advice: list[str] = []
    for lhs, rhs in pairs:
        rel = f"{_side(lhs)} = {_side(rhs)}"
        texts.append(rel)
        if len(lhs) == 1 and len(rhs) == 1 and abs(lhs[0][1] - rhs[0][1]) < 1e-12:
            advice.append(f"vary the inputs so that {lhs[0][0]} executes a different "
                          f"number of times than {rhs[0][0]}")
        elif not rhs or not lhs:
            only = [a for a, _ in lhs + rhs]
            advice.append(f"vary the inputs so that {', '.join(only)} execute(s)")
        elif _readable(lhs + rhs):
            advice.append(f"vary the inputs so that {rel} does not hold for every input")
        else:
            # a relation of many blocks with fractional weights (libc's strdup: "N(0x167b90)
            # + 9.381·N(0x98a70) + 72.64·N(0x97539) + …") is no advice a user can act on;
            # the relation itself stays in the group's relations
            blocks = [a for a, _ in lhs + rhs]
            advice.append(f"vary the inputs so that {', '.join(blocks[:3])}"
                          + (f" and {len(blocks) - 3} more blocks" if len(blocks) > 3 else "")
                          + " run in other proportions to each other")
    total = max(len(advice), total or 0)
    if total > MAX_ADVICE:
        # one per relation: libbz2's largest group (784 blocks) had thousands, 13,254
        # lines of one table cell in `report --full`; the first say what to vary
        advice = advice[:MAX_ADVICE] + [f"and {total - min(len(advice), MAX_ADVICE):,} "
                                        f"more relations of their counts like these"]
    if not structural:
        text = ("if the CFG lets these counts differ: " + "; ".join(advice)) if advice else None
    else:
        text = "; ".join(advice) if advice else None
    return texts, text


# The relations a group's advice names; the rest are counted.
MAX_ADVICE = 3
# A relation the advice writes out: this many blocks at most, with whole weights.
READABLE_TERMS = 4


def _readable(terms: list[tuple[str, float]]) -> bool:
    return len(terms) <= READABLE_TERMS and all(abs(v - round(v)) < 1e-9 for _, v in terms)


def _side(terms: list[tuple[str, float]]) -> str:
    if not terms:
        return "0"
    return " + ".join(("" if abs(v - 1) < 1e-12 else f"{fmt(v)}·") + f"N({a})"
                      for a, v in terms)


def unexecuted_advice(name: str, ran_in_rejected: bool) -> str:
    if ran_in_rejected:
        return f"{name} ran only in rejected inputs: its cost is unknown"
    return f"no input executed {name}: its cost is unknown; add inputs that reach it"
