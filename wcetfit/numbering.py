"""How inputs are numbered in the store, and named for the user.

``generate``'s own inputs are 0, 1, 2, …; the worst-case search's candidates are stored
from :data:`SEARCH_BASE` on and the inputs symbolic execution reached from
:data:`REACH_BASE` on, far above any generated input so that they never collide.  The raw
numbers mean nothing to a reader ("input 1099511627779"); :func:`input_label` names them
the way every message and report does ("search input 3").
"""

from __future__ import annotations

SEARCH_BASE = 1 << 40
# fresh inputs a check adopted (``wcetfit check --adopt``): kept with the searched ones,
# in the upper half of their range, so that they are named for what they are
ADOPT_BASE = SEARCH_BASE + (1 << 39)
REACH_BASE = 1 << 41


def input_label(number: int | None) -> str:
    """"input 7", "search input 41", "adopted input 0" or "reached input 2" ("no input"
    for None)."""
    if number is None:
        return "no input"
    number = int(number)
    if number >= REACH_BASE:
        return f"reached input {number - REACH_BASE}"
    if number >= ADOPT_BASE:
        return f"adopted input {number - ADOPT_BASE}"
    if number >= SEARCH_BASE:
        return f"search input {number - SEARCH_BASE}"
    return f"input {number}"


def next_number(stored, base: int, end: int) -> int:
    """The number after the last of ``stored`` in [base, end), or ``base``: searched inputs
    number from SEARCH_BASE below ADOPT_BASE, adopted ones from ADOPT_BASE, each after its
    own (a search after an adoption numbered from the adopted inputs' last, and its
    candidates read as adopted)."""
    mine = [int(n) for n in stored if base <= int(n) < end]
    return max(mine) + 1 if mine else base
