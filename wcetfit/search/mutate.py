"""Mutations of a choice sequence: a few draws changed, most kept.

Worst cases tend to sit at the ends of the ranges an input generator draws from (the
longest buffer, the largest count, every element extreme), so a changed draw goes to an
end of its range as often as to a fresh value inside it.  Arrays change in one element,
a stretch, or all at once.  Changing only a few draws keeps most of a good parent: the
search climbs from the slowest inputs found so far instead of starting over.

An array can also be redrawn from a few values, one of them most often, and an array of
few values can have some of its elements moved to another of them, which shifts the mix
a few percent a step.  Functions that look for repeats in their data are slowest on such
data, and neither uniform data nor one repeated value comes near it: a compressor's match
finder walks long chains of candidates that match only part of the way.  On system zlib,
``compress2`` at level 9 over 4,096 bytes took 4.0 M ticks with 80 % 'a' and 20 % 'b',
2.2 M with half of each, 0.18 M on uniform bytes and 0.1 M on one byte repeated (medians
in a C loop, one session).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wcetfit.search.choices import Choice, ChoiceSequence

# How many draws one mutation changes at most (1 .. MAX_CHANGES, smaller more likely).
MAX_CHANGES = 3
# An array redrawn from few values takes 2 .. MAX_ALPHABET of them (2 most often); an
# array with at most this many distinct values counts as one of few values.
MAX_ALPHABET = 8
# The weights of those values come from a Dirichlet distribution with this parameter:
# below 1 one value mostly dominates (the slow mixes above are 70–85 % one value).
ALPHABET_CONCENTRATION = 0.7
# A shift of the mix moves this share of the elements at most (at least one element).
MAX_SHIFT = 0.1


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
        # (a permutation must keep its elements distinct)
        if how < 0.2 and flat.size > 1 and c.method != "permutation":
            if how < 0.1 or not _is_few_valued(flat):
                flat[:] = _few_values(flat, _in_type(_values(c, flat, MAX_ALPHABET, rng),
                                                     flat.dtype), rng)
            else:
                flat[:] = _shift_mix(flat, rng)
            return Choice(c.method, arr, c.bounds)
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
        new = _in_type(_values(c, flat[sel], n, rng), flat.dtype)
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


def _in_type(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """New element values clipped into the range of the array's integer type."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = np.clip(values, float(info.min), float(info.max))
    return values


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
    if how < 0.15:
        arr[:] = 0xFF
    elif how < 0.25:
        arr[:] = 0x00
    elif how < 0.35:
        arr[:] = int(rng.integers(0, 256))                 # one byte repeated
    elif how < 0.5 and arr.size > 1:
        spare = rng.integers(0, 256, MAX_ALPHABET, dtype=np.uint8)
        arr[:] = _few_values(arr, spare, rng)
    elif how < 0.65 and arr.size > 1 and _is_few_valued(arr):
        arr[:] = _shift_mix(arr, rng)
    else:
        i = int(rng.integers(0, arr.size))
        j = min(arr.size, i + 1 + int(rng.integers(0, 16)))
        arr[i:j] = rng.integers(0, 256, j - i, dtype=np.uint8)
    return arr.tobytes()


def _is_few_valued(flat: np.ndarray) -> bool:
    return 1 < np.unique(flat).size <= MAX_ALPHABET


def _few_values(flat: np.ndarray, spare: np.ndarray, rng: np.random.Generator
                ) -> np.ndarray:
    """``flat`` redrawn from a few values with skewed weights.  The values come from the
    array itself where it has enough distinct ones (they are in its range and of its
    meaning), else from ``spare`` (new values, already in range)."""
    k = min(MAX_ALPHABET, 1 + int(rng.geometric(0.5)))
    present = np.unique(flat)
    pool = present if present.size >= k else np.unique(np.concatenate([present, spare]))
    symbols = rng.choice(pool, size=min(k, pool.size), replace=False)
    weights = rng.dirichlet(np.full(symbols.size, ALPHABET_CONCENTRATION))
    return symbols[rng.choice(symbols.size, size=flat.size, p=weights)]


def _shift_mix(flat: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``flat`` (of few values) with a few percent of its elements set to one of its
    values: the mix moves a step, and most of the arrangement stays."""
    out = flat.copy()
    n = max(1, int(rng.uniform(0.0, MAX_SHIFT) * out.size))
    where = rng.choice(out.size, size=min(n, out.size), replace=False)
    out[where] = rng.choice(np.unique(flat))
    return out
