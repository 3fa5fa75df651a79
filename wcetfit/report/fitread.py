"""The fit as the report reads it: its JSON form (schema ``wcetfit.fit/1``) or any object
with ``to_json()``, turned into plain per-function records.

``wcetfit.fit/1`` per function: ``blocks[{address, estimable, cost_ticks, ci95_ticks,
group, solution_ticks}]`` (``ci95_ticks`` the half-width of the 95% interval),
``groups[{id, blocks, kind, combinations}]``, ``overhead_ticks``, ``validation{...}``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from wcetfit.errors import FitError
from wcetfit.model import FunctionModel, parse_addr


# --- the fit, as read from its JSON form ------------------------------------------------------

@dataclass(frozen=True)
class FitBlock:
    address: int
    estimable: bool
    cost_ticks: float | None
    ci95_ticks: tuple[float, float] | None      # (low, high)
    group: Any
    solution_ticks: float | None                # None: never executed (no solution)


@dataclass(frozen=True)
class FitGroup:
    id: Any
    blocks: tuple[int, ...]
    kind: str                                   # "structural" / "observed" / ...
    combinations: tuple[str, ...]               # human sentences
    advice: str | None


@dataclass(frozen=True)
class FitFunction:
    name: str
    blocks: Mapping[int, FitBlock]
    groups: tuple[FitGroup, ...]
    overhead_ticks: float | None
    validation: Mapping[str, Any]
    extra: Mapping[str, Any]                    # any other field, kept for the JSON


def _fit_dict(fit: Any) -> Mapping[str, Any]:
    if isinstance(fit, Mapping):
        return fit
    for name in ("to_json", "as_json", "to_dict"):
        meth = getattr(fit, name, None)
        if callable(meth):
            d = meth()
            if isinstance(d, Mapping):
                return d
    if dataclasses.is_dataclass(fit) and not isinstance(fit, type):
        return dataclasses.asdict(fit)
    raise FitError(f"cannot read a fit result of type {type(fit).__name__}")


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _ci(v: Any, cost: float | None) -> tuple[float, float] | None:
    """``ci95_ticks`` as (low, high): a pair is taken as is, a number as a half-width."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and len(v) == 2:
        lo, hi = _num(v[0]), _num(v[1])
        return (lo, hi) if lo is not None and hi is not None else None
    if isinstance(v, Mapping) and "low" in v and "high" in v:
        return _ci((v["low"], v["high"]), cost)
    h = _num(v)
    if h is None or cost is None:
        return None
    return (cost - abs(h), cost + abs(h))


def _combination_text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, Mapping):
        for key in ("text", "description", "label"):
            if isinstance(c.get(key), str):
                return c[key]
        terms = c.get("terms") or c.get("blocks") or c.get("coefficients")
        value = _num(c.get("value_ticks", c.get("value")))
        ci = c.get("ci95_ticks")
        lhs = ""
        if isinstance(terms, Mapping):
            lhs = " + ".join(f"{_coef(k_v[1])}{k_v[0]}" for k_v in terms.items())
        elif isinstance(terms, (list, tuple)):
            parts = []
            for t in terms:
                if isinstance(t, (list, tuple)) and len(t) == 2:
                    parts.append(f"{_coef(t[1])}{t[0]}")
                else:
                    parts.append(str(t))
            lhs = " + ".join(parts)
        rhs = "" if value is None else f"{value:.1f}"
        if rhs and ci is not None:
            lo_hi = _ci(ci, value)
            if lo_hi:
                rhs += f" ± {(lo_hi[1] - lo_hi[0]) / 2:.1f}"
        if lhs or rhs:
            return f"{lhs} = {rhs} ticks" if rhs else lhs
    return str(c)


def _coef(c: Any) -> str:
    f = _num(c)
    if f is None or f == 1:
        return ""
    return f"{f:g}·"


def _overhead(v: Any, config: int = 0) -> float | None:
    """``overhead_ticks`` is a number, or a mapping probe configuration → ticks (fit/1):
    the report is about configuration 0 (the whole-call probes)."""
    if isinstance(v, Mapping):
        if not v:
            return None
        x = v.get(str(config), v.get(config))
        return _num(x if x is not None else next(iter(v.values())))
    return _num(v)


def _parse_fit_function(name: str, d: Mapping[str, Any], top: Mapping[str, Any]) -> FitFunction:
    blocks: dict[int, FitBlock] = {}
    for b in d.get("blocks", []):
        a = parse_addr(b["address"])
        cost = _num(b.get("cost_ticks"))
        sol = _num(b.get("solution_ticks"))
        blocks[a] = FitBlock(a, bool(b.get("estimable", cost is not None)), cost,
                             _ci(b.get("ci95_ticks"), cost), b.get("group"),
                             sol if sol is not None else cost)
    groups = []
    for g in d.get("groups", []):
        combos = g.get("combinations", [])
        if isinstance(combos, (str, Mapping)):
            combos = [combos]
        groups.append(FitGroup(g.get("id"), tuple(parse_addr(a) for a in g.get("blocks", [])),
                               str(g.get("kind", "")), tuple(_combination_text(c) for c in combos),
                               g.get("advice")))
    overhead = _overhead(d.get("overhead_ticks", top.get("overhead_ticks")))
    validation = d.get("validation", top.get("validation")) or {}
    known = {"blocks", "groups", "overhead_ticks", "validation", "name", "function"}
    return FitFunction(name, blocks, tuple(groups), overhead, dict(validation),
                       {k: v for k, v in d.items() if k not in known})


def _by_function(fits: Mapping[str, FitFunction], functions: Mapping[str, FunctionModel],
                 root: str) -> dict[str, FitFunction]:
    """Redistribute the fit over the functions by block address.  ``FitResult.to_json()``
    is one flat list for the joint fit of the root and its callees; a CLI file may list
    them per function.  Either way each function gets the fitted blocks its model has,
    the groups touching them, and the root's overhead, validation and other fields."""
    all_blocks: dict[int, FitBlock] = {}
    groups: list[FitGroup] = []
    seen: set = set()
    for ff in fits.values():
        all_blocks.update(ff.blocks)
        for g in ff.groups:
            key = (str(g.id), g.blocks)
            if key not in seen:
                seen.add(key)
                groups.append(g)
    primary = fits.get(root) or fits.get("") or next(iter(fits.values()), None)
    out: dict[str, FitFunction] = {}
    for name, fn in functions.items():
        mine = {a: all_blocks[a] for a in fn.block_addresses if a in all_blocks}
        if not mine:
            continue
        addrs = set(fn.block_addresses)
        out[name] = FitFunction(
            name=name, blocks=mine, groups=tuple(g for g in groups if addrs & set(g.blocks)),
            overhead_ticks=primary.overhead_ticks if primary else None,
            validation=primary.validation if primary else {},
            extra=(primary.extra if primary and name == root else {}))
    return out


def read_fit(fit: Any) -> dict[str, FitFunction]:
    """function name → its fit, from a FitResult (``to_json()``) or the fit JSON."""
    d = _fit_dict(fit)
    fns = d.get("functions")
    out: dict[str, FitFunction] = {}
    if isinstance(fns, Mapping):
        for name, fd in fns.items():
            out[str(name)] = _parse_fit_function(str(name), fd, d)
    elif isinstance(fns, (list, tuple)):
        for fd in fns:
            name = fd.get("name") or fd.get("function")
            if not name:
                raise FitError("a function of the fit result has no name")
            out[str(name)] = _parse_fit_function(str(name), fd, d)
    elif "blocks" in d:
        name = d.get("name") or d.get("function") or ""
        out[str(name)] = _parse_fit_function(str(name), d, d)
    else:
        raise FitError("the fit result has neither 'functions' nor 'blocks'")
    return out
