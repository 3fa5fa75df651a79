"""Choice sequences: the draws one call of ``generate(ctx)`` took, recorded and replayed.

``generate`` builds an input from ``ctx.rng``.  A :class:`ChoiceRng` stands in for that
generator: it forwards every draw to a real :class:`numpy.random.Generator` and records the
method, its arguments and the value returned.  Given a (mutated) record it replays it
instead: draw *k* returns the record's *k*-th value when the call still has the same
method and shape, clipped into the call's current range (an earlier mutated draw may have
moved a bound, e.g. ``integers(0, n)`` after ``n`` changed).  A one-dimensional draw whose
length changed (``integers(0, 256, n)`` after ``n`` changed) keeps its recorded elements,
cut short or repeated to the new length: a buffer the search made all-extreme stays so
when a later mutation lengthens it (a fresh draw there would throw the pattern away, and
the search could only reach the longest extreme buffer by changing both draws at once).
Any other call draws fresh.
So any record replays to a valid input of the same ``generate``, and an unchanged record
replays to exactly the recorded input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

# Generator methods whose results are recorded and can be replayed.  Others (shuffle,
# which works in place; bit_generator; spawn) pass through unrecorded: their draws then
# come from the fresh generator and are not under the search's control.
RECORDED = frozenset({"integers", "random", "uniform", "normal", "standard_normal",
                      "choice", "bytes", "permutation", "exponential", "poisson",
                      "binomial", "geometric", "lognormal", "beta", "gamma"})


@dataclass(frozen=True)
class Choice:
    """One draw: ``method`` returned ``value``; ``bounds`` is the range the call allowed
    ((low, high, integral), both ends included) where its arguments gave one."""

    method: str
    value: Any                    # a scalar, a numpy array or bytes
    bounds: tuple[Any, Any, bool] | None = None   # ints for integer draws

    def shape(self) -> tuple:
        if isinstance(self.value, (bytes, bytearray)):
            return ("bytes", len(self.value))
        return np.shape(self.value)


@dataclass(frozen=True)
class ChoiceSequence:
    """The draws of one input, and the ``ctx.index`` that input was generated with
    (``generate`` may branch on it: the samples make every tenth input slow)."""

    index: int
    choices: tuple[Choice, ...] = field(default_factory=tuple)
    # the seed of the generator the draws came from (None: the target's [measure] seed).
    # A fresh input `wcetfit check --adopt` keeps has its own: draws the record does not
    # hold (dirichlet, shuffle: not RECORDED) then come out as they did for it
    seed: int | None = None

    def with_choices(self, choices: Sequence[Choice]) -> "ChoiceSequence":
        return ChoiceSequence(self.index, tuple(choices), self.seed)

    def base_seed(self, target_seed: int) -> int:
        """The seed of the generator its draws replay on."""
        return target_seed if self.seed is None else self.seed


def _bounds(method: str, args: tuple, kwargs: dict) -> tuple[float, float, bool] | None:
    """(low, high, integral) of a draw's range where the arguments give one."""
    def arg(i: int, name: str, default: Any) -> Any:
        if len(args) > i:
            return args[i]
        return kwargs.get(name, default)

    if method == "integers":
        low, high = arg(0, "low", None), arg(1, "high", None)
        if high is None:
            low, high = 0, low
        if np.ndim(low) or np.ndim(high):
            return None
        endpoint = bool(kwargs.get("endpoint", False))
        # Integer bounds stay Python ints: ranges such as [0, 2**63) must clip exactly.
        return int(low), int(high if endpoint else high - 1), True
    if method == "uniform":
        low, high = arg(0, "low", 0.0), arg(1, "high", 1.0)
        if np.ndim(low) or np.ndim(high):
            return None
        return float(min(low, high)), float(max(low, high)), False
    if method == "random":
        return 0.0, float(np.nextafter(1.0, 0.0)), False
    if method == "choice":
        a = arg(0, "a", None)
        if isinstance(a, (int, np.integer)):
            return 0, int(a) - 1, True
    return None


def fits(choice: Choice, method: str, fresh_shape: tuple) -> bool:
    """Whether a recorded choice can stand for this call (same method, same shape)."""
    return choice.method == method and choice.shape() == fresh_shape


# Draws whose elements may be repeated or cut to a new length: not permutations, nor
# choices (their elements may have to be distinct).
RESIZABLE = RECORDED - {"permutation", "choice"}


def resized(choice: Choice, method: str, fresh: Any) -> Any:
    """The recorded value of a one-dimensional draw at the fresh draw's length (its
    elements cut short or repeated in order), or None where it cannot stand for it."""
    if choice.method != method or method not in RESIZABLE:
        return None
    old = choice.value
    if isinstance(fresh, (bytes, bytearray)):
        if not isinstance(old, (bytes, bytearray)) or not old:
            return None
        n = len(fresh)
        return (bytes(old) * (n // len(old) + 1))[:n]
    if not isinstance(old, np.ndarray) or old.ndim != 1 or old.size == 0 \
            or np.ndim(fresh) != 1:
        return None
    return np.resize(old, np.shape(fresh)).astype(np.asarray(fresh).dtype)


def clip_to_call(value: Any, method: str, args: tuple, kwargs: dict) -> Any:
    """``value`` moved into the call's current range (unchanged where it has none)."""
    b = _bounds(method, args, kwargs)
    if b is None:
        if method == "choice":       # elements drawn from an array: must be members
            a = np.asarray(args[0] if args else kwargs.get("a"))
            ok = np.isin(np.asarray(value), a).all()
            return value if ok else None
        return value
    low, high, integral = b
    if high < low:
        return None
    if integral and not np.ndim(value):
        v = min(max(int(value), int(low)), int(high))
        return type(value)(v) if isinstance(value, (int, np.integer)) else v
    out = np.clip(value, low, high)
    if np.ndim(value):
        return (np.rint(out) if integral else out).astype(np.asarray(value).dtype)
    return type(value)(out) if isinstance(value, (float, np.floating)) else float(out)


class ChoiceRng:
    """A stand-in for ``ctx.rng`` that records (and optionally replays) every draw."""

    def __init__(self, fresh: np.random.Generator, replay: Sequence[Choice] = ()):
        self._fresh = fresh
        self._replay = tuple(replay)
        self.recorded: list[Choice] = []
        self.replayed = 0            # draws taken from the record (the rest were fresh)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fresh, name)
        if name not in RECORDED:
            return attr

        def draw(*args: Any, **kwargs: Any) -> Any:
            k = len(self.recorded)
            # Always draw fresh, so that the fresh generator advances the same way whether
            # or not this draw is replayed: draws after a mutated one stay as recorded.
            value = attr(*args, **kwargs)
            if k < len(self._replay):
                shape = (("bytes", len(value)) if isinstance(value, (bytes, bytearray))
                         else np.shape(value))
                old = self._replay[k]
                kept = _copy(old.value) if fits(old, name, shape) else \
                    resized(old, name, value)
                if kept is not None:
                    moved = clip_to_call(kept, name, args, kwargs)
                    if moved is not None:
                        value = moved
                        self.replayed += 1
            self.recorded.append(Choice(name, _copy(value), _bounds(name, args, kwargs)))
            return value

        return draw


def _copy(value: Any) -> Any:
    return value.copy() if isinstance(value, np.ndarray) else value
