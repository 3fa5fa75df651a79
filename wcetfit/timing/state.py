"""Whether an input's timed calls repeat the call that was counted.

The timing run calls each input several times (warm-up, then the timed repeats),
restoring the argument memory before each call.  State the restore cannot reach — an
object behind a handle the function updates (expat's ``XML_Parse`` on a parser that
generate() created), a static variable — may differ from one call to the next: the
first call does the work, the later ones take an early exit.  The counts come from one
fresh call, the times from the later ones, and the fit pairs counts with times of
another path.  expat's ``XML_Parse`` on documents of up to 4 KiB: every timed call
returned ``XML_STATUS_ERROR`` (the parser finished by the warm-up) in 62–98 ticks while a
fresh parse takes ~19 µs; the report gave a bound 400× too low with nothing amiss.

The check, with ``[measure] warmup`` ≥ 1: the return value of an input's first call
against that of its last timed call.  Only values the function computes are compared: a
returned pointer may be a fresh object each call (an allocating function), so pointers
are not; a void function has nothing to compare (its state change goes unseen: README,
known limits).  Without warm-up calls (the default) each pass's timed call is the first
on the arguments generate() made for that pass, as the counted call was, and the worker's
discarded first call is made on arguments of its own (wcetfit.timing.run): expat's
parser, made by generate(), is parsed by the timed call itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import math
from typing import Any, Mapping

# examples of changed inputs kept in the times' environment (the count is kept whole)
MAX_EXAMPLES = 10


def comparable(result_type: str) -> bool:
    """Whether returns of this C type are compared (not void, not a pointer)."""
    t = result_type.strip()
    return t != "void" and "*" not in t and "(" not in t


def same_return(first: Any, last: Any) -> bool:
    """The two calls returned the same value (NaN equals NaN; a struct by its fields)."""
    if isinstance(first, float) and isinstance(last, float):
        return first == last or (math.isnan(first) and math.isnan(last))
    if isinstance(first, dict) and isinstance(last, dict):
        return first.keys() == last.keys() and all(same_return(first[k], last[k])
                                                   for k in first)
    return bool(first == last)


def record(state: dict[str, Any], function: str, index: int, first: Any, last: Any) -> None:
    """Note one input's first and last returns in ``state`` (the times' environment
    entry): how many inputs were checked, how many changed, the first few examples."""
    entry = state.setdefault(function, {"checked": 0, "changed": 0, "examples": []})
    entry["checked"] += 1
    if same_return(first, last):
        return
    entry["changed"] += 1
    if len(entry["examples"]) < MAX_EXAMPLES:
        entry["examples"].append([int(index), repr(first), repr(last)])


def record_return(returned: dict[str, Any], function: str, index: int, value: Any) -> None:
    """Note what input ``index``'s timed call returned (a number; the first pass's, once
    per input) in ``returned`` (the times' environment entry "returns": function → input
    → repr of the value)."""
    if value is None or isinstance(value, dict):
        return
    returned.setdefault(function, {}).setdefault(str(int(index)), repr(value))


# Below this many inputs what they returned says little.
MIN_ERROR_RETURN_INPUTS = 10
# At least this share of the timed inputs returned an error code: the bound is mostly of
# rejections.
MOST_ERROR_RETURNS = 0.9


@dataclass(frozen=True)
class ErrorReturns:
    """Most timed inputs returned a value that reads as an error code."""

    inputs: int                                  # the timed inputs whose return was kept
    errors: int                                  # of them, those that returned an error code
    values: tuple[tuple[int, int], ...]          # (value, inputs), most frequent first
    # the error codes the target names ([measure] error_returns: name, value; the name ""
    # where the target gives the value alone); empty: an error is a value below zero
    declared: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        names = {v: n for n, v in self.declared if n}

        def value(v: int) -> str:
            return f"{names[v]} = {v}" if v in names else str(v)

        shown = ", ".join(f"{value(v)} on {n:,}" for v, n in self.values[:3]) + (
            ", …" if len(self.values) > 3 else "")
        who = (f"all {self.inputs:,} timed inputs" if self.errors == self.inputs else
               f"{self.errors:,} of {self.inputs:,} timed inputs")
        if self.declared:
            return f"{who} returned an error code [measure] error_returns names ({shown})"
        return f"{who} returned below zero ({shown})"


def _signed(v: int) -> int:
    """A return value as a signed number: an unsigned type's top bit set is negative
    ((size_t)-10 is -10, (unsigned)-1 is -1)."""
    return v - (1 << 64) if v >= 1 << 63 else v - (1 << 32) if 1 << 31 <= v < 1 << 32 else v


def error_returns(entry: Mapping[str, str] | None,
                  declared: tuple[tuple[str, int], ...] = ()) -> ErrorReturns | None:
    """:class:`ErrorReturns` when at least :data:`MOST_ERROR_RETURNS` of the timed inputs
    returned an error code, else None: one of ``declared`` (the target's [measure]
    error_returns, (name, value) pairs), or where none are declared an integer below zero
    as a signed number.  zstd's ZSTD_decompress on random bytes: 53 of 60 calls returned
    (size_t)-10, "unknown frame descriptor", 4 returned -72 and the 3 empty ones 0, and
    the report gave a plausible bound of the rejection with no word of it; libuuid's
    uuid_parse on printable text: -1 on all.  An error code of zero or above needs the
    target to name it (libbrotlidec's BROTLI_DECODER_RESULT_ERROR = 0, liblzma's
    LZMA_DATA_ERROR = 9: init writes them from the return type's enum)."""
    if not entry or len(entry) < MIN_ERROR_RETURN_INPUTS:
        return None
    codes = {_signed(int(v)) for _n, v in declared}
    values: dict[int, int] = {}
    for text in entry.values():
        try:
            v = _signed(int(text))
        except ValueError:                 # a float, NaN, a bool's repr
            return None
        if (v in codes) if codes else v < 0:
            values[v] = values.get(v, 0) + 1
    errors = sum(values.values())
    if errors < MOST_ERROR_RETURNS * len(entry):
        return None
    ranked = tuple(sorted(values.items(), key=lambda kv: (-kv[1], kv[0])))
    return ErrorReturns(len(entry), errors, ranked, tuple(declared))


# At least this share of the inputs compared returning another value when timed than when
# counted: the counts and the times are of different paths, and no bound is made of them;
# fewer are said in a warning.
MOST_COUNTED_OTHER = 0.1


@dataclass(frozen=True)
class CountedOther:
    """Inputs whose timed call returned another value than their counted call."""

    compared: int                                # inputs with a number from both runs
    differ: tuple[tuple[int, str, str], ...]     # (input, counted, timed), input order

    @property
    def refuses(self) -> bool:
        return len(self.differ) >= max(1.0, MOST_COUNTED_OTHER * self.compared)

    def describe(self, function: str, label: Any = str) -> str:
        shown = "; ".join(f"{label(i)}: counted {a}, timed {b}" for i, a, b in self.differ[:3])
        return (f"{function} returned another value when timed than when counted on "
                f"{len(self.differ):,} of {self.compared:,} inputs ({shown}): those timed "
                f"calls did not run the counted path")


def counted_other(counted: Mapping[int, str] | None, timed: Mapping[str, str] | None
                  ) -> CountedOther | None:
    """The inputs whose timed call returned another value than the counted call (the
    count run's ``CountSet.returns`` against the timing run's ``returns`` entry), or None
    when none did or nothing can be compared.  libbz2's BZ2_bzBuffToBuffDecompress under a
    prototype without its last parameter: the count run's register held a value the
    function rejects (BZ_PARAM_ERROR, 8 blocks), the timing harness's did not (BZ_OK, a
    whole decompression, 466,297 ticks), and the report blamed the calls' own spread for
    a held-out error of 220,930 %."""
    if not counted or not timed:
        return None
    pairs = [(int(k), counted[int(k)], str(timed[k])) for k in timed
             if k.lstrip("-").isdigit() and int(k) in counted]
    differ = tuple(sorted((i, a, b) for i, a, b in pairs if not _same_text(a, b)))
    return CountedOther(len(pairs), differ) if differ else None


def _same_text(a: str, b: str) -> bool:
    """Two kept return values are the same (a float's repr; NaN equals NaN; an unsigned
    value and its signed reading)."""
    if a == b:
        return True
    try:
        return _signed(int(a)) == _signed(int(b))
    except ValueError:
        pass
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return x == y or (math.isnan(x) and math.isnan(y))


COUNTED_REMEDY = ("check the prototype against the function's real one: a parameter it "
                  "lacks is read from whatever a register holds, which differs between the "
                  "count run and the timing run; otherwise state the arguments do not reach "
                  "(a static variable, an object behind a handle) differs between them")


def changed_text(function: str, entry: Mapping[str, Any], label: Any = str) -> str | None:
    """The refusal's reason when some input's calls returned different values, or None.
    ``label``: input number → its name in messages."""
    if not entry or not entry.get("changed"):
        return None
    ex = entry.get("examples") or []
    shown = "; ".join(f"{label(i)}: {a} first, {b} when timed" for i, a, b in ex[:3])
    return (f"{function} returned another value on its timed calls than on the first call "
            f"of the same input in {entry['changed']} of {entry['checked']} timing pass(es) "
            f"checked (each times every input once; {shown}): state the restored arguments do not reach (an object "
            f"behind a handle or pointer inside a struct, a static variable) changes from "
            f"call to call, so the timed calls do not run the path that was counted")


REMEDY = ("every call of an input must start from the same state: the timing run restores "
          "the argument buffers before each call, not objects the function reaches through "
          "handles; with [measure] warmup = 0 (the default) each timed call is the first on "
          "what generate() made for it, so a parser or a stream made there with ctx.lib "
          "starts afresh; keep warm-up calls only for functions whose state they do not "
          "change")
