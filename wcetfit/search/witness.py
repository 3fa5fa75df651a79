"""Inputs found by symbolic execution (``wcetfit reach``): shaped, rebuilt, stored.

angr explores with an argument *template* (:class:`wcetfit.static.reach.ArgTemplate`)
shaped like a generated input: one integer per integer parameter (within the range the
stored inputs span), one buffer per pointer or array parameter (the cffi type and length
a generated input gives it, contents symbolic).  A witness fills that shape with concrete
values; :class:`ArgShape` remembers the cffi types, so the witness rebuilds into the
arguments of a real call — in the count run, the timing run, and any later session,
without ``generate``.  The store keeps them as ``reach-<function>-s<seed>`` (witnesses,
block counts, ticks, and the per-block and per-group verdicts), numbered from
:data:`REACH_BASE` on, beside the worst-case search's ``search-*`` inputs.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.errors import WcetfitError
from wcetfit.measurements import CountSet, FunctionCounts, TimeSet, stored_function_counts
from wcetfit.numbering import REACH_BASE  # reached inputs are numbered from here
from wcetfit.target import Target, generate_input, load_inputs_module

log = logging.getLogger(__name__)

# Buffers longer than this (bytes) are explored shorter: every symbolic byte multiplies the
# paths of a loop over them, and the blocks random inputs miss are mostly short-length ones.
MAX_BUFFER = 64
FORMAT = 1


@dataclass(frozen=True)
class ArgShape:
    """One parameter's shape: ``kind`` "int", "array" (``item`` [``items``]), "pointer"
    (one ``item`` behind it) or "null" (a pointer to ``item`` every stored input passed as
    NULL: liblzma's allocator, which generate() leaves NULL, stays NULL)."""

    kind: str
    item: str = ""
    items: int = 0

    def build(self, ffi: Any, value: Any) -> Any:
        if self.kind == "int":
            return int(value)
        if value is None or self.kind == "null":    # a witness's null pointer
            return ffi.cast(f"{self.item} *", 0)
        data = bytes(value)
        obj = ffi.new(f"{self.item}[]", self.items) if self.kind == "array" \
            else ffi.new(f"{self.item} *")
        n = min(len(data), ffi.sizeof(obj))
        if n:
            ffi.memmove(obj, data, n)
        return obj


def build_args(ffi: Any, shapes: Sequence[ArgShape], values: Sequence[Any]) -> tuple:
    return tuple(s.build(ffi, v) for s, v in zip(shapes, values))


def reach_refusal(target: Target, root: str) -> str | None:
    """Why `wcetfit reach` cannot explore ``root``'s arguments as generate() makes them
    (an argument neither an integer nor a buffer: libm's cbrt takes a double), or None
    when it can; also None when generate() fails here (the reach run says why then)."""
    from wcetfit.timing.thunk import build_harness

    try:
        ffi = build_harness(target.prototype, target.cdef).ffi
        first = generate_input(load_inputs_module(target), target, ffi, root, 0)
    except WcetfitError:
        return None
    return _unexplorable(ffi, first)


def _is_null(ffi: Any, a: Any) -> bool:
    """A NULL pointer as generate() passes it (ffi.NULL, or a typed one)."""
    return isinstance(a, ffi.CData) and ffi.typeof(a).kind == "pointer" and a == ffi.NULL


def _unexplorable(ffi: Any, args: Sequence[Any]) -> str | None:
    """The first argument symbolic execution cannot take, said (numbered from 1, as the
    prototype lists them); None when it takes all.  A NULL pointer is taken, whatever its
    type: it stays NULL (liblzma's allocator read "argument 2 is a void *, neither array
    nor typed pointer", the void * being ffi.NULL's)."""
    for k, a in enumerate(args):
        if isinstance(a, (bool, int)) or _is_null(ffi, a):
            continue
        if isinstance(a, ffi.CData):
            t = ffi.typeof(a)
            if t.kind == "array" or (t.kind == "pointer"
                                     and t.item.kind not in ("void", "function")):
                continue
            return f"argument {k + 1} is a {t.cname}, neither array nor typed pointer"
        return f"argument {k + 1} is a {type(a).__name__} (only integers and buffers)"
    return None


def _pointee(harness: Any, root: str, k: int) -> str:
    """The type parameter ``k`` of ``root`` points to, as the prototype declares it ("void"
    where it cannot tell)."""
    sigs = getattr(harness, "functions", {}) or {}
    sig = sigs.get(root) or next(iter(sigs.values()), None)
    if sig is None or k >= len(sig.arg_types):
        return "void"
    t = harness.ffi.typeof(sig.arg_types[k])
    return t.item.cname if t.kind == "pointer" else "void"


def template_for(target: Target, root: str, indices: Sequence[int],
                 max_buffer: int = MAX_BUFFER) -> tuple[Any, tuple[ArgShape, ...], str]:
    """(ArgTemplate, shapes, "") from the stored inputs ``indices``, or (None, (), why).

    Buffers: input 0's cffi types; an array as long as the longest stored one, at most
    ``max_buffer`` bytes.  Integers: within the range the stored inputs span; an integer
    that is at most some array's length in every stored input (a length argument) is
    also kept within that array's template length, so no witness reads past its buffer."""
    from wcetfit.static.reach import ArgTemplate, BufParam, IntParam
    from wcetfit.timing.thunk import build_harness

    harness = build_harness(target.prototype, target.cdef)
    ffi = harness.ffi
    generate = load_inputs_module(target)
    rows = [generate_input(generate, target, ffi, root, i) for i in (list(indices) or [0])]
    first = generate_input(generate, target, ffi, root, 0)
    why = _unexplorable(ffi, first)
    if why is not None:
        return None, (), why
    shapes: list[ArgShape] = []

    def arrays(k: int) -> list[int]:
        return [len(r[k]) for r in rows
                if isinstance(r[k], ffi.CData) and ffi.typeof(r[k]).kind == "array"]

    for k, a in enumerate(first):
        # typed by an input that does not pass it as NULL; NULL in every one: NULL
        given = next((r[k] for r in [first] + rows if not _is_null(ffi, r[k])), None)
        if isinstance(a, (bool, int)):
            shapes.append(ArgShape("int"))
        elif given is None:
            shapes.append(ArgShape("null", _pointee(harness, root, k)))
        else:
            t = ffi.typeof(given)
            if t.kind == "array":
                size = ffi.sizeof(t.item)
                items = max(1, min(max(arrays(k)), max_buffer // max(size, 1)))
                shapes.append(ArgShape("array", t.item.cname, items))
            else:
                shapes.append(ArgShape("pointer", t.item.cname, 1))
    params: list[Any] = []
    longer = []                      # buffers explored shorter than the inputs' longest
    for k, sh in enumerate(shapes):
        if sh.kind == "array":
            most = max(arrays(k))
            if most > sh.items:
                longer.append((k, int(most)))
    for k, sh in enumerate(shapes):
        if sh.kind == "null":
            params.append(IntParam(value=0))    # a NULL pointer in its register
            continue
        if sh.kind != "int":
            # also NULL: a function's null check (zlib's adler32: `if (buf == Z_NULL)
            # return 1`) is a block no generated input runs, and was "not found" under a
            # template whose pointers were never null
            params.append(BufParam(_nbytes(ffi, sh), may_be_null=True))
            continue
        vals = [int(r[k]) for r in rows]
        lo, hi = min(vals), max(vals)
        for j, other in enumerate(shapes):
            if other.kind == "array" and all(
                    isinstance(r[j], ffi.CData) and ffi.typeof(r[j]).kind == "array"
                    and int(r[k]) <= len(r[j]) for r in rows):
                hi = max(lo, min(hi, other.items))
        params.append(IntParam(lo, hi))
    return ArgTemplate(tuple(params), tuple(longer)), tuple(shapes), ""


def _nbytes(ffi: Any, shape: ArgShape) -> int:
    return ffi.sizeof(shape.item) * max(shape.items, 1)


class ReachInputs:
    """``inputs(generate, target, ffi, function, index)`` for the count and timing workers:
    a reached input's arguments rebuilt from its witness (``generate`` is not called)."""

    def __init__(self, shapes: Sequence[ArgShape], witnesses: Mapping[int, Sequence[Any]]):
        self.shapes = tuple(shapes)
        self.witnesses = dict(witnesses)

    def __call__(self, generate: Callable, target: Target, ffi: Any, function: str,
                 index: int) -> tuple:
        return build_args(ffi, self.shapes, self.witnesses[index])


# --- the store -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReachRows:
    """Reached inputs of one measured function with their counts, ticks and verdicts."""

    function: str
    seed: int
    method: str
    tsc_hz: float
    shapes: tuple[ArgShape, ...]
    indices: np.ndarray                         # REACH_BASE + k
    witnesses: tuple[tuple[Any, ...], ...]      # one per index (int or bytes per argument)
    purposes: tuple[str, ...]                   # what each was found for ("block 0x…", …)
    functions: tuple[FunctionCounts, ...]       # counts per function, rows = indices
    ticks: np.ndarray                           # [indices, repeats]
    verdicts: tuple[dict[str, Any], ...] = ()   # the last exploration's outcome per goal


def reach_name(function: str, seed: int) -> str:
    safe = "".join(c if c.isalnum() or c in "_." else "_" for c in function)
    return f"reach-{safe}-s{seed}"


def _value_json(v: Any) -> dict[str, Any]:
    if v is None:
        return {"null": True}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": base64.b64encode(bytes(v)).decode("ascii")}
    return {"int": int(v)}


def _value_from(d: dict[str, Any]) -> Any:
    if d.get("null"):
        return None
    return base64.b64decode(d["bytes"]) if "bytes" in d else int(d["int"])


def save_reach_rows(store: Any, rows: ReachRows) -> None:
    meta = {"kind": "reach", "format": FORMAT, "function": rows.function, "seed": rows.seed,
            "method": rows.method, "tsc_hz": rows.tsc_hz,
            "shapes": [[s.kind, s.item, s.items] for s in rows.shapes],
            "functions": [{"name": fc.name, "address": hex(fc.address)}
                          for fc in rows.functions],
            "witnesses": [[_value_json(v) for v in w] for w in rows.witnesses],
            "purposes": list(rows.purposes), "verdicts": list(rows.verdicts)}
    arrays = {"indices": np.asarray(rows.indices, dtype=np.int64),
              "ticks": np.asarray(rows.ticks, dtype=float)}
    for i, fc in enumerate(rows.functions):
        arrays[f"blocks{i}"] = np.asarray(fc.blocks, dtype=np.uint64)
        arrays[f"counts{i}"] = fc.counts
    store.save(reach_name(rows.function, rows.seed), meta, arrays)


def load_reach_rows(store: Any, function: str, seed: int) -> ReachRows | None:
    got = store.load(reach_name(function, seed), machine=True)
    if got is None:
        return None
    meta, arrays = got
    if meta.get("format") != FORMAT:
        log.info("%s: stored in format %s, not %s: ignored", reach_name(function, seed),
                 meta.get("format"), FORMAT)
        return None
    return ReachRows(meta["function"], int(meta["seed"]), meta["method"], float(meta["tsc_hz"]),
                     tuple(ArgShape(k, i, int(n)) for k, i, n in meta["shapes"]),
                     arrays["indices"],
                     tuple(tuple(_value_from(v) for v in w) for w in meta["witnesses"]),
                     tuple(meta["purposes"]), stored_function_counts(meta, arrays),
                     arrays["ticks"], tuple(meta.get("verdicts", ())))


def merge_reach_rows(old: ReachRows | None, new: ReachRows) -> ReachRows:
    """``old``'s inputs and ``new``'s in one; the verdicts are ``new``'s, and ``old``'s for
    the blocks ``new`` did not look at again (a block reached before is no goal now; group
    verdicts are always the latest fit's, whose groups they name)."""
    if old is not None:
        seen = {(v.get("function"), v.get("block")) for v in new.verdicts}
        new = replace(new, verdicts=tuple(
            v for v in old.verdicts
            if "block" in v and (v.get("function"), v.get("block")) not in seen) + new.verdicts)
    if old is None or len(old.indices) == 0 or old.method != new.method \
            or old.shapes != new.shapes or old.ticks.shape[1] != new.ticks.shape[1] \
            or [f.blocks for f in old.functions] != [f.blocks for f in new.functions]:
        return new
    fcs = tuple(FunctionCounts(a.name, a.address, a.blocks, np.vstack([a.counts, b.counts]))
                for a, b in zip(old.functions, new.functions))
    return replace(new, indices=np.concatenate([old.indices, new.indices]),
                   witnesses=old.witnesses + new.witnesses,
                   purposes=old.purposes + new.purposes, functions=fcs,
                   ticks=np.vstack([old.ticks, new.ticks]))


def with_reach_rows(counts: CountSet, times: TimeSet, rows: ReachRows | None
                    ) -> tuple[CountSet, TimeSet]:
    """The stored inputs' counts and times with the reached inputs' rows appended (the same
    rules as the searched inputs': left out when timed or counted otherwise)."""
    from wcetfit.search.store import append_rows

    if rows is None:
        return counts, times
    return append_rows(counts, times, rows, "reached",
                       f"{reach_name(rows.function, rows.seed)}: counted on another block "
                       "layout than the stored counts: left out (run `wcetfit reach` again)")


def describe_reached(target: Target, rows: ReachRows, index: int) -> str | None:
    """A short summary of reached input ``index``'s arguments (None when not one of them)."""
    from wcetfit.target import describe_args
    from wcetfit.timing.thunk import build_harness

    where = {int(k): i for i, k in enumerate(rows.indices)}
    if int(index) not in where:
        return None
    ffi = build_harness(target.prototype, target.cdef).ffi
    i = where[int(index)]
    return describe_args(ffi, build_args(ffi, rows.shapes, rows.witnesses[i])) + \
        f" [reached by angr: {rows.purposes[i]}]"
