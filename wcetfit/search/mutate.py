"""Mutations of a choice sequence: a few draws changed, most kept.

Worst cases tend to sit at the ends of the ranges an input generator draws from (the
longest buffer, the largest count, every element extreme), so a changed draw goes to an
end of its range as often as to a fresh value inside it.  Arrays change in one element,
a stretch, or all at once.  Changing only a few draws keeps most of a good parent: the
search climbs from the slowest inputs found so far instead of starting over.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wcetfit.search.choices import Choice, ChoiceSequence

# How many draws one mutation changes at most (1 .. MAX_CHANGES, smaller more likely).
MAX_CHANGES = 3


def mutate(seq: ChoiceSequence, rng: np.random.Generator) -> ChoiceSequence:
    """A copy of ``seq`` with 1..MAX_CHANGES of its draws changed."""
    if not seq.choices:
        return seq
    choices = list(seq.choices)
    k = min(len(choices), MAX_CHANGES, int(rng.geometric(0.6)))
    for pos in rng.choice(len(choices), size=k, replace=False):
        choices[int(pos)] = _change(choices[int(pos)], rng)
    return seq.with_choices(choices)


def crossover(a: ChoiceSequence, b: ChoiceSequence, rng: np.random.Generator
              ) -> ChoiceSequence:
    """``a``'s draws up to a random point, ``b``'s after it (with ``a``'s index)."""
    n = min(len(a.choices), len(b.choices))
    if n < 2:
        return a
    cut = int(rng.integers(1, n))
    return a.with_choices(a.choices[:cut] + b.choices[cut:])


def _change(c: Choice, rng: np.random.Generator) -> Choice:
    v = c.value
    if isinstance(v, (bytes, bytearray)):
        return Choice(c.method, _change_bytes(bytes(v), rng), c.bounds)
    if np.ndim(v):
        arr = np.array(v, copy=True)
        if arr.size == 0:
            return c
        flat = arr.reshape(-1)
        how = rng.random()
        if how < 0.4:
            sel = slice(None)                              # all elements
        elif how < 0.7:
            i = int(rng.integers(0, flat.size))
            j = int(rng.integers(i, flat.size)) + 1
            sel = slice(i, j)                              # a stretch
        else:
            sel = int(rng.integers(0, flat.size))          # one element
        n = flat[sel].size if isinstance(sel, slice) else 1
        new = _values(c, flat[sel], n, rng)
        if np.issubdtype(flat.dtype, np.integer):      # in range of the array's type
            info = np.iinfo(flat.dtype)
            new = np.clip(new, float(info.min), float(info.max))
        flat[sel] = new if isinstance(sel, slice) else new[0]
        return Choice(c.method, arr, c.bounds)
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) \
            and c.bounds is not None:
        return Choice(c.method, _as_type(v, _int_value(c.bounds, int(v), rng)), c.bounds)
    new = _values(c, np.asarray(v), 1, rng)
    new = np.asarray(new).reshape(-1)[0]
    if isinstance(v, (bool, np.bool_)):
        return Choice(c.method, bool(new), c.bounds)
    if isinstance(v, (int, np.integer)):
        return Choice(c.method, _as_type(v, int(new)), c.bounds)
    return Choice(c.method, type(v)(float(new)) if isinstance(v, (float, np.floating))
                  else float(new), c.bounds)


def _as_type(like: Any, value: int) -> Any:
    """``value`` as the type of the draw it replaces, clipped into a numpy integer type's
    range (a draw's recorded range can reach below 0 while the value it gave is a
    uint64: numpy refused -11 for one, a traceback in a new user's search)."""
    if isinstance(like, np.integer):
        info = np.iinfo(type(like))
        return type(like)(min(int(info.max), max(int(info.min), value)))
    return type(like)(value)


def _values(c: Choice, old: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` new values for a draw: an end of its range, a fresh value, or a nudge."""
    old = np.asarray(old, dtype=np.float64).reshape(-1) if np.size(old) else np.zeros(n)
    if c.bounds is not None:
        low, high, integral = c.bounds
        how = rng.random()
        if how < 0.35:
            out = np.full(n, high)
        elif how < 0.5:
            out = np.full(n, low)
        elif how < 0.8:
            out = rng.uniform(low, high, n) if not integral else \
                rng.integers(int(low), int(high) + 1, n).astype(np.float64)
        else:
            span = max(high - low, 1.0)
            out = np.clip(old[:n] + rng.normal(0, 0.05 * span, n), low, high) \
                if old.size >= n else rng.uniform(low, high, n)
        return np.rint(out) if integral else out
    # No range known (normal, exponential, …): scale, flip or draw fresh around it.
    how = rng.random()
    base = old[:n] if old.size >= n else np.zeros(n)
    if how < 0.3:
        return base * 3.0
    if how < 0.5:
        return -base
    scale = float(np.std(base)) or 1.0
    return base + rng.normal(0, scale, n)


def _int_value(bounds: tuple, old: int, rng: np.random.Generator) -> int:
    """A new integer draw, exact over any range (Python ints, not floats)."""
    low, high = int(bounds[0]), int(bounds[1])
    how = rng.random()
    if how < 0.35:
        return high
    if how < 0.5:
        return low
    span = high - low
    if how < 0.8 or span == 0:
        return low + int(rng.random() * (span + 1)) if span >= 2**53 else \
            int(rng.integers(low, high, endpoint=True))
    step = max(1, int(0.05 * span * abs(rng.normal())))
    return min(high, max(low, old + (step if rng.random() < 0.5 else -step)))


def _change_bytes(b: bytes, rng: np.random.Generator) -> bytes:
    if not b:
        return b
    arr = np.frombuffer(b, dtype=np.uint8).copy()
    how = rng.random()
    if how < 0.2:
        arr[:] = 0xFF
    elif how < 0.35:
        arr[:] = 0x00
    elif how < 0.5:
        arr[:] = int(rng.integers(0, 256))                 # one byte repeated
    else:
        i = int(rng.integers(0, arr.size))
        j = min(arr.size, i + 1 + int(rng.integers(0, 16)))
        arr[i:j] = rng.integers(0, 256, j - i, dtype=np.uint8)
    return arr.tobytes()
