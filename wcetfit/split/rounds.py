"""Rounds of block splitting in the target's store, and the ``wcetfit.split/1`` document.

Rounds persist in the target's store as datasets ``split-round-<n>``; they accumulate,
can be listed and dropped.  A round is one consistent measurement session: per input,
the whole call and every active probe back to back (the machine's speed drifts — this
VM shares its cores — and rows measured minutes apart do not belong in one system), so
it holds the timings of the probes it introduced *and* of the earlier rounds' probes,
and the fit after it uses its own rows only.  Dropping a round removes the probes it
introduced from every later fit.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import StoreError
from wcetfit.model import hexaddr, parse_addr
from wcetfit.split.configs import KIND_STOP, MECH_WRAPPER, Probe, SITE_RETURN
from wcetfit.split.joint import ConfigTimes
from wcetfit.split.planner import Plan

SCHEMA_SPLIT = "wcetfit.split/1"
ROUND_PREFIX = "split-round-"


@dataclass(frozen=True)
class Round:
    """One round: a measurement session of the whole call and every active probe, the
    probes it introduced, and the fit after it."""

    number: int
    function: str
    seed: int
    method: str
    probes: tuple[ConfigTimes, ...]       # every probe measured in this round
    introduced: tuple[str, ...] = ()      # keys of the probes new in this round
    whole: ConfigTimes | None = None      # whole calls (probe field unused), same session
    splits: tuple[int, ...] = ()          # split points introduced by this round (--at)
    fit: Mapping[str, Any] | None = None  # summary of the joint fit after this round
    based_on: tuple[int, ...] = ()        # rounds whose introduced probes that fit used
    time_s: float = 0.0                   # time spent measuring
    created: str = ""
    tsc_hz: float | None = None
    notes: tuple[str, ...] = ()
    failures: tuple[dict[str, Any], ...] = ()
    # The fit of this round's whole calls alone (same session, no probe rows): what the
    # joint fit must agree with on the quantities whole calls already determine.
    baseline: Mapping[str, Any] | None = None
    # Probes measured in this round whose rows disagree with that baseline (each
    # removal brought estimates back inside their intervals): left out of the fit and
    # not measured again.
    excluded: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return round_name(self.number)

    def to_json(self, present: Iterable[int] | None = None) -> dict[str, Any]:
        stale = None
        if present is not None:
            have = set(present)
            stale = [r for r in self.based_on if r not in have]
        d: dict[str, Any] = {
            "round": self.number, "function": self.function, "seed": self.seed,
            "method": self.method,
            "probes": [dict(ct.probe.to_json(),
                            inputs=int(ct.indices.size),
                            measured=int(np.isfinite(ct.ticks).any(axis=1).sum())
                            if ct.ticks.size else 0,
                            new=ct.probe.key in self.introduced)
                       for ct in self.probes],
            "whole_call_inputs": 0 if self.whole is None else int(self.whole.indices.size),
            "splits": [hexaddr(s) for s in self.splits],
            "time_s": self.time_s, "created": self.created,
            "based_on": list(self.based_on), "notes": list(self.notes),
            "failures": list(self.failures),
            "excluded": list(self.excluded),
            "fit": self.fit,
            "fit_whole_calls_only": self.baseline,
        }
        if stale is not None:
            d["stale_fit"] = bool(stale)
            if stale:
                d["stale_because_dropped"] = stale
        return d


def round_name(number: int) -> str:
    return f"{ROUND_PREFIX}{int(number)}"


_ROUND_RE = re.compile(rf"^{re.escape(ROUND_PREFIX)}(\d+)$")


def round_numbers(store: Any) -> list[int]:
    out = []
    for name in store.names():
        m = _ROUND_RE.match(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def save_round(store: Any, rnd: Round) -> None:
    from wcetfit.store import machine_fingerprint

    arrays: dict[str, np.ndarray] = {}
    for k, ct in enumerate(rnd.probes):
        arrays[f"indices{k}"] = np.asarray(ct.indices, dtype=np.int64)
        arrays[f"ticks{k}"] = np.asarray(ct.ticks, dtype=np.float64)
    if rnd.whole is not None:
        arrays["whole_indices"] = np.asarray(rnd.whole.indices, dtype=np.int64)
        arrays["whole_ticks"] = np.asarray(rnd.whole.ticks, dtype=np.float64)
    meta = {"kind": "split-round", "round": rnd.number, "function": rnd.function,
            "seed": rnd.seed, "method": rnd.method,
            "probes": [ct.probe.to_json() for ct in rnd.probes],
            "introduced": list(rnd.introduced),
            "splits": [hexaddr(s) for s in rnd.splits], "fit": rnd.fit,
            "based_on": list(rnd.based_on), "time_s": rnd.time_s,
            "created": rnd.created or _dt.datetime.now().isoformat(timespec="seconds"),
            "tsc_hz": rnd.tsc_hz, "notes": list(rnd.notes), "failures": list(rnd.failures),
            "baseline": rnd.baseline, "excluded": list(rnd.excluded),
            "machine": machine_fingerprint()}
    store.save(rnd.name, meta, arrays)


def load_round(store: Any, number: int) -> Round | None:
    got = store.load(round_name(number), machine=True)
    if got is None:
        return None
    meta, arrays = got
    if meta.get("kind") != "split-round":
        raise StoreError(f"{round_name(number)} in {store.directory} is not a split round")
    probes = []
    for k, pj in enumerate(meta["probes"]):
        probes.append(ConfigTimes(Probe.from_json(pj), arrays[f"indices{k}"],
                                  arrays[f"ticks{k}"]))
    whole = None
    if "whole_indices" in arrays:
        whole = ConfigTimes(Probe(KIND_STOP, SITE_RETURN, None, MECH_WRAPPER),
                            arrays["whole_indices"], arrays["whole_ticks"])
    return Round(number=int(meta["round"]), function=meta["function"], seed=int(meta["seed"]),
                 method=meta["method"],
                 probes=tuple(probes), introduced=tuple(meta.get("introduced", ())),
                 whole=whole, splits=tuple(parse_addr(s) for s in meta["splits"]),
                 fit=meta.get("fit"), based_on=tuple(meta.get("based_on", ())),
                 time_s=float(meta.get("time_s", 0.0)), created=meta.get("created", ""),
                 tsc_hz=meta.get("tsc_hz"), notes=tuple(meta.get("notes", ())),
                 failures=tuple(meta.get("failures", ())), baseline=meta.get("baseline"),
                 excluded=tuple(meta.get("excluded", ())))


def load_rounds(store: Any, function: str | None = None, seed: int | None = None
                ) -> list[Round]:
    """Every stored round (of ``function`` / ``seed`` when given), in order."""
    out = []
    for n in round_numbers(store):
        r = load_round(store, n)
        if r is None:
            continue
        if function is not None and r.function != function:
            continue
        if seed is not None and r.seed != seed:
            continue
        out.append(r)
    return out


def drop_round(store: Any, number: int) -> bool:
    return bool(store.drop(round_name(number)))


def next_round_number(store: Any) -> int:
    nums = round_numbers(store)
    return (max(nums) + 1) if nums else 1


def split_json(target: str, function: str, rounds: Sequence[Round],
               current: Mapping[str, Any] | None = None,
               plan_: Plan | None = None, extra: Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
    """The ``wcetfit.split/1`` document."""
    present = [r.number for r in rounds]
    out: dict[str, Any] = {"schema": SCHEMA_SPLIT, "target": target, "function": function,
                           "rounds": [r.to_json(present) for r in rounds]}
    if current is not None:
        out["fit"] = current
    if plan_ is not None:
        out["plan"] = plan_.to_json()
    if extra:
        out.update(extra)
    return out
