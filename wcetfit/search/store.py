"""Searched inputs in the target's store, and their rows joined to the fit's.

The search keeps the candidates it timed as ``search-<function>-s<seed>`` in the store:
their choice sequences (so any later run regenerates the same arguments), their block
counts and their ticks.  :func:`with_search_rows` appends them to the ordinary inputs'
counts and times, under input numbers from :data:`~wcetfit.search.candidates.SEARCH_BASE`
on, so the fit, the WCET and the report see them as inputs like the others.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from wcetfit.measurements import CountSet, FunctionCounts, TimeSet, stored_function_counts
from wcetfit.search.choices import Choice, ChoiceSequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdoptedCall:
    """The call a check timed above the bound, of an input ``check --adopt`` made a row:
    the bound made with that row stays above it (the row's calls timed again can all be
    faster: brotli's decoder, 198,146 ticks in the check and at most 136,000 timed again)."""

    row: int                 # the row's input number (from ADOPT_BASE on)
    seed: int                # the check's seed
    fresh_input: int         # the input's number among that seed's
    ticks: float             # the call as the check timed it
    at_bound_speed: float    # slowed to at most the machine speed the bound covers


@dataclass(frozen=True)
class SearchRows:
    """Candidates kept by the search, with their counts and ticks."""

    function: str
    seed: int
    method: str
    tsc_hz: float
    indices: np.ndarray                       # SEARCH_BASE + k
    sequences: tuple[ChoiceSequence, ...]     # one per index
    functions: tuple[FunctionCounts, ...]     # counts per function, rows = indices
    ticks: np.ndarray                         # [indices, repeats]
    predicted_ticks: np.ndarray               # the model's prediction when it was kept
    # calls checks timed above the bound, of the rows --adopt made of their inputs
    adopted_calls: tuple[AdoptedCall, ...] = ()


def search_name(function: str, seed: int) -> str:
    safe = "".join(c if c.isalnum() or c in "_." else "_" for c in function)
    return f"search-{safe}-s{seed}"


# --- choice sequences as JSON --------------------------------------------------------------

def _value_to_json(v: Any) -> dict[str, Any]:
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, np.ndarray):
        return {"array": base64.b64encode(np.ascontiguousarray(v).tobytes()).decode("ascii"),
                "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, (bool, np.bool_)):
        return {"bool": bool(v)}
    if isinstance(v, np.integer):
        # its own type: a uint64 draw of 2**63 or more fits no int64 (libgmp's limbs)
        return {"int": int(v), "numpy": True, "dtype": v.dtype.str}
    if isinstance(v, int):
        return {"int": int(v), "numpy": False}
    if isinstance(v, np.floating):
        return {"float": float(v), "numpy": True, "dtype": v.dtype.str}
    return {"float": float(v), "numpy": False}


def _value_from_json(d: dict[str, Any]) -> Any:
    if "bytes" in d:
        return base64.b64decode(d["bytes"])
    if "array" in d:
        raw = base64.b64decode(d["array"])
        return np.frombuffer(raw, dtype=np.dtype(d["dtype"])).reshape(d["shape"]).copy()
    if "bool" in d:
        return bool(d["bool"])
    if "int" in d:
        if not d.get("numpy"):
            return int(d["int"])
        kind = np.dtype(d.get("dtype", "<i8")).type
        info = np.iinfo(kind)
        # a store written before the dtype was kept holds the value only: a type that
        # can hold it (an unsigned draw above int64's range was a uint64)
        if not info.min <= int(d["int"]) <= info.max:
            kind = np.uint64 if int(d["int"]) > 0 else np.int64
        return kind(int(d["int"]))
    if d.get("numpy"):
        return np.dtype(d.get("dtype", "<f8")).type(d["float"])
    return float(d["float"])


def sequence_to_json(seq: ChoiceSequence) -> dict[str, Any]:
    d = {"index": seq.index,
         "choices": [{"method": c.method, "value": _value_to_json(c.value),
                      "bounds": list(c.bounds) if c.bounds else None}
                     for c in seq.choices]}
    if seq.seed is not None:        # an adopted fresh input's own (absent: the target's)
        d["seed"] = int(seq.seed)
    return d


def sequence_from_json(d: dict[str, Any]) -> ChoiceSequence:
    return ChoiceSequence(int(d["index"]), tuple(
        Choice(c["method"], _value_from_json(c["value"]),
               tuple(c["bounds"]) if c["bounds"] else None) for c in d["choices"]),
        None if d.get("seed") is None else int(d["seed"]))


# --- the store ------------------------------------------------------------------------------

def save_search_rows(store: Any, rows: SearchRows, *, warmup: int) -> None:
    """``warmup``: the [measure] warmup the candidates were timed with."""
    from wcetfit.measurements import TIMED_STATE

    meta = {"kind": "search", "function": rows.function, "seed": rows.seed,
            "method": rows.method, "tsc_hz": rows.tsc_hz, "warmup": int(warmup),
            "timed_state": TIMED_STATE,
            "functions": [{"name": fc.name, "address": hex(fc.address)}
                          for fc in rows.functions],
            "sequences": [sequence_to_json(s) for s in rows.sequences],
            "adopted_calls": [asdict(c) for c in rows.adopted_calls]}
    arrays = {"indices": rows.indices, "ticks": rows.ticks,
              "predicted": rows.predicted_ticks}
    for i, fc in enumerate(rows.functions):
        arrays[f"blocks{i}"] = np.asarray(fc.blocks, dtype=np.uint64)
        arrays[f"counts{i}"] = fc.counts
    store.save(search_name(rows.function, rows.seed), meta, arrays)


def load_search_rows(store: Any, function: str, seed: int, *,
                     warmup: int | None = None) -> SearchRows | None:
    """The kept candidates, or None; with ``warmup``, None for candidates timed with
    another (wcetfit.measurements.load_times)."""
    from wcetfit.measurements import other_measurement

    got = store.load(search_name(function, seed), machine=True)
    if got is None:
        return None
    meta, arrays = got
    if other_measurement(meta, warmup) is not None:
        return None
    fcs = stored_function_counts(meta, arrays)
    return SearchRows(meta["function"], int(meta["seed"]), meta["method"], float(meta["tsc_hz"]),
                      arrays["indices"], tuple(sequence_from_json(s) for s in meta["sequences"]),
                      fcs, arrays["ticks"], arrays["predicted"],
                      tuple(AdoptedCall(int(c["row"]), int(c["seed"]), int(c["fresh_input"]),
                                        float(c["ticks"]), float(c["at_bound_speed"]))
                            for c in meta.get("adopted_calls", ())))


def merge_rows(old: SearchRows | None, new: SearchRows) -> SearchRows:
    """``old``'s candidates and ``new``'s in one (numbers of ``new`` follow ``old``'s)."""
    if old is None or old.method != new.method or old.ticks.shape[1] != new.ticks.shape[1] \
            or [f.blocks for f in old.functions] != [f.blocks for f in new.functions]:
        return new
    fcs = tuple(FunctionCounts(a.name, a.address, a.blocks, np.vstack([a.counts, b.counts]))
                for a, b in zip(old.functions, new.functions))
    return replace(new, indices=np.concatenate([old.indices, new.indices]),
                   sequences=old.sequences + new.sequences, functions=fcs,
                   ticks=np.vstack([old.ticks, new.ticks]),
                   predicted_ticks=np.concatenate([old.predicted_ticks, new.predicted_ticks]),
                   adopted_calls=old.adopted_calls + new.adopted_calls)


def with_search_rows(counts: CountSet, times: TimeSet, rows: SearchRows | None
                     ) -> tuple[CountSet, TimeSet]:
    """The measured inputs' counts and times with the searched inputs' rows appended
    (unchanged when there are none, or when they were timed otherwise: another method,
    another number of repeats, or counted on another block layout)."""
    if rows is None:
        return counts, times
    return append_rows(counts, times, rows, "searched",
                       f"{search_name(rows.function, rows.seed)}: counted on another block "
                       "layout than the stored counts: left out (run `wcetfit search` again)")


def append_rows(counts: CountSet, times: TimeSet, rows: Any, kind: str,
                other_layout: str) -> tuple[CountSet, TimeSet]:
    """``counts`` and ``times`` with extra inputs' rows (``rows``: indices, method, ticks,
    functions, as the searched and the reached inputs keep them) appended, or unchanged
    when there are none or they were timed otherwise (another method or number of
    repeats: said at info level) or counted on another block layout (``other_layout`` is
    the warning)."""
    if len(rows.indices) == 0:
        return counts, times
    if rows.method != times.method or rows.ticks.shape[1] != times.ticks.shape[1]:
        log.info("%s inputs of %s were timed with %s × %d, not %s × %d: left out", kind,
                 rows.function, rows.method, rows.ticks.shape[1], times.method,
                 times.ticks.shape[1])
        return counts, times
    if [(f.name, f.blocks) for f in rows.functions] != \
            [(f.name, f.blocks) for f in counts.functions]:
        log.warning("%s", other_layout)
        return counts, times
    fcs = tuple(FunctionCounts(a.name, a.address, a.blocks, np.vstack([a.counts, b.counts]))
                for a, b in zip(counts.functions, rows.functions))
    counts = replace(counts, indices=np.concatenate([counts.indices, rows.indices]),
                     functions=fcs)
    done = times.done if times.done is not None else np.isfinite(times.ticks)
    times = replace(times, indices=np.concatenate([times.indices, rows.indices]),
                    ticks=np.vstack([times.ticks, rows.ticks]),
                    done=np.vstack([done, np.isfinite(rows.ticks)]))
    return counts, times
