"""Fresh inputs against the loop bounds a WCET bound rests on, by their block counts.

A bound takes each loop's iterations from a fact or from the most the training inputs
reached.  `wcetfit check` times fresh inputs, and a call below the bound says nothing of
those premises: libxxhash's XXH64 with inputs of up to 255 bytes, its loop bounded at 6
iterations (observed), met a fresh input of 4,096 bytes that ran it 127 times, and the
check said "covered" — the single-call factor, made from the noise of short calls, happened
to hold the call.  Counting the fresh inputs (the count run, native speed) shows every
loop a fresh input ran further than the bound takes: the bound does not hold for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


# The fresh inputs named per loop (the JSON, and what `check --adopt` takes).
MAX_NUMBERS = 50


@dataclass(frozen=True)
class LoopBeyond:
    """A loop a fresh input ran further than the bound takes."""

    function: str
    loop: str                 # "fn+0xOFF"
    kind: str                 # "per entry" or "per call"
    bound: int                # the iterations the bound takes
    source: str               # where that bound comes from ("observed", "fact", …)
    seen: int                 # the most a fresh input ran
    input: int | None         # that fresh input's number
    inputs: int               # how many fresh inputs ran it further than the bound
    numbers: tuple[int, ...] = ()   # their numbers (the first MAX_NUMBERS)

    def describe(self) -> str:
        who = f"fresh input {self.input}" if self.input is not None else "a fresh input"
        more = f"; {self.inputs:,} fresh inputs ran it further" if self.inputs > 1 else ""
        return (f"{who} ran loop {self.loop} {self.seen:,} times {self.kind}, where the bound "
                f"takes at most {self.bound:,} ({self.source}){more}")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def loops_beyond(functions: Sequence[Any], model: Any, counts: Any) -> tuple[LoopBeyond, ...]:
    """The loops of the report's ``functions`` (each with ``name`` and ``wcet.loops``,
    wcetfit.report.FunctionReport) that fresh inputs, counted in ``counts``
    (wcetfit.measurements.CountSet), ran further than the bound takes; ``model`` the
    binary's static model (wcetfit.static.binary.BinaryModel)."""
    from wcetfit.wcet.loops import LoopFlow, observed_loop_bounds

    by_name = {fc.name: fc for fc in counts.functions}
    indices = np.asarray(counts.indices)
    out: list[LoopBeyond] = []
    for fr in functions:
        fc = by_name.get(fr.name)
        loops = tuple(getattr(fr.wcet, "loops", ()) or ())
        if fc is None or not loops or len(indices) == 0:
            continue
        try:
            fn = model.function(fr.name)
        except KeyError:
            continue
        prepared = LoopFlow(fn)
        fresh = observed_loop_bounds(fn, fc.counts, fc.blocks, prepared=prepared)
        one_by_one: list[dict] = []         # each input's own, made when first needed
        for lo in loops:
            seen = fresh.get(lo.header)
            if seen is None:
                continue
            b = lo.bound
            for kind, have, got in (("per entry", b.per_entry, seen.per_entry),
                                    ("per call", b.total, seen.total)):
                if have is None or got is None or got <= have:
                    continue
                # how many inputs ran it further (one by one, as the bound is judged)
                if not one_by_one:
                    one_by_one = [observed_loop_bounds(fn, fc.counts[k:k + 1], fc.blocks,
                                                       prepared=prepared,
                                                       say_unentered=False)
                                  for k in range(len(indices))]
                rows = [k for k in range(len(indices))
                        if _ran_beyond(one_by_one[k], lo.header, kind, have)]
                beyond = len(rows)
                witness = (int(indices[seen.witness]) if seen.witness is not None
                           and 0 <= seen.witness < len(indices) else None)
                out.append(LoopBeyond(fr.name, lo.name, kind, int(have), str(b.source),
                                      int(got), witness, max(1, beyond),
                                      tuple(int(indices[k]) for k in rows[:MAX_NUMBERS])))
                break
    return tuple(out)


def _ran_beyond(own: dict, header: int, kind: str, bound: int) -> bool:
    """Whether an input, whose own observed loop bounds are ``own``, ran the loop at
    ``header`` further than ``bound`` (``kind`` as the bound is)."""
    one = own.get(header)
    if one is None:
        return False
    got = one.per_entry if kind == "per entry" else one.total
    return got is not None and got > bound


@dataclass(frozen=True)
class BlocksBeyond:
    """Blocks the bound leaves out (no training input ran them, ``[wcet] unreached =
    "observed"``) that fresh inputs ran: their time is in no term of the bound."""

    function: str
    blocks: tuple[str, ...]   # "fn+0xOFF", the ones fresh inputs ran
    input: int | None         # the fresh input that ran the most of them
    inputs: int               # how many fresh inputs ran any
    numbers: tuple[int, ...] = ()   # their numbers (the first MAX_NUMBERS)

    def describe(self) -> str:
        who = f"fresh input {self.input}" if self.input is not None else "a fresh input"
        more = f"; {self.inputs:,} fresh inputs ran some" if self.inputs > 1 else ""
        shown = ", ".join(self.blocks[:4]) + (" …" if len(self.blocks) > 4 else "")
        return (f"{who} ran {len(self.blocks)} block(s) of {self.function} no training "
                f"input ran, which the bound leaves out ({shown}){more}")

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["blocks"] = list(self.blocks)
        d["numbers"] = list(self.numbers)
        return d


def blocks_beyond(functions: Sequence[Any], counts: Any) -> tuple[BlocksBeyond, ...]:
    """The blocks the report's ``functions`` (wcetfit.report.FunctionReport) leave out of
    the bound, never run by the training, that fresh inputs (``counts``,
    wcetfit.measurements.CountSet) ran (libm's lgamma: fresh input 55 ran two blocks of
    the bound's left-out ones, and the check said "covered")."""
    by_name = {fc.name: fc for fc in counts.functions}
    indices = np.asarray(counts.indices)
    out: list[BlocksBeyond] = []
    for fr in functions:
        fc = by_name.get(fr.name)
        if fc is None or len(indices) == 0 or \
                getattr(fr.wcet, "unreached_policy", "observed") != "observed":
            continue
        left = set(fr.never_executed)
        col = [j for j, a in enumerate(fc.blocks) if a in left]
        if not col:
            continue
        ran = np.asarray(fc.counts)[:, col] > 0
        rows = np.flatnonzero(ran.any(axis=1))
        if rows.size == 0:
            continue
        most = int(rows[np.argmax(ran[rows].sum(axis=1))])
        addrs = sorted(fc.blocks[col[j]] for j in np.flatnonzero(ran.any(axis=0)))
        names = tuple(fr.key(a) for a in addrs)
        out.append(BlocksBeyond(fr.name, names, int(indices[most]), int(rows.size),
                                tuple(int(indices[k]) for k in rows[:MAX_NUMBERS])))
    return tuple(out)
