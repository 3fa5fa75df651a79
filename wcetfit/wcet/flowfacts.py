"""User flow facts: linear constraints over block counts, from ``[flow]`` in wcetfit.toml.

A fact bounds how often blocks run together in one call of the measured function, where
the CFG and per-loop bounds cannot: ``adler32``'s 5,552-byte block loop and its 16-byte
remainder loop each run at most ``len/…`` times, but not both at their maxima::

    [flow]
    "length" = "16*N(adler32_z+0x80) + 16*N(adler32_z+0x417) <= 6000"

Terms are ``c*N(block)`` — the executions of a block per call of the measured function,
named as in ``[loops]`` (``function+0xOFFSET`` or ``0xADDRESS``, the block's first
instruction) — or ``c*A(function)``, that function's activations per call; ``c`` is an
integer or decimal (``*`` optional, a bare ``N(…)`` is ``1*N(…)``).  Relations: ``<=``,
``>=``, ``==``; constants may stand on either side.

These are aiT's and OTAWA's flow constraints in another spelling: aiT's
``flow "a" + "b" <= 6000`` over block execution counts, OTAWA FFX's ``<flowfact>``
``<max>`` over execution counts (``count``) of named blocks.  As there, the counts are
totals over one run of the analysed entry (here: one call of the measured function).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from wcetfit.errors import TargetError, UnknownFunction
from wcetfit.model import FunctionModel, hexaddr

_TERM = re.compile(r"""\s*(?P<sign>[+-])?\s*
                       (?:(?P<coef>\d+(?:\.\d*)?|\.\d+)\s*\*?\s*)?
                       (?:(?P<kind>[NA])\(\s*(?P<ref>[^()]+?)\s*\))?\s*""", re.X)
_RELATIONS = ("<=", ">=", "==")


@dataclass(frozen=True)
class FlowTerm:
    coef: float
    kind: str                  # "N": a block's executions, "A": a function's activations
    function: str
    address: int               # the block (for "A": the function's entry)


@dataclass(frozen=True)
class FlowFact:
    """Σ coef·count  (relation)  constant, per call of the measured function."""

    name: str
    text: str
    terms: tuple[FlowTerm, ...]
    relation: str              # "<=", ">=", "=="
    constant: float


def parse_flow_facts(spec: Mapping[str, Any], functions: Mapping[str, FunctionModel]
                     ) -> tuple[FlowFact, ...]:
    """Resolve the ``[flow]`` table to facts; every problem is one TargetError line."""
    out = []
    for name, text in spec.items():
        where = f"[flow] '{name}'"
        if not isinstance(text, str):
            raise TargetError(f"{where}: expected a string such as "
                              f"\"N(f+0x40) + N(f+0x80) <= 100\", found {text!r}")
        out.append(_parse_fact(where, str(name), text, functions))
    return tuple(out)


def _parse_fact(where: str, name: str, text: str,
                functions: Mapping[str, FunctionModel]) -> FlowFact:
    rels = [r for r in _RELATIONS if r in text]
    if len(rels) != 1 or text.count(rels[0]) != 1:
        raise TargetError(f"{where}: needs exactly one of <=, >=, == (found {text!r})")
    rel = rels[0]
    left, right = text.split(rel)
    lt, lc = _side(where, left, functions)
    rt, rc = _side(where, right, functions)
    # Everything with counts to the left, constants to the right.
    terms: dict[tuple[str, str, int], float] = {}
    for t, sign in [(x, 1.0) for x in lt] + [(x, -1.0) for x in rt]:
        key = (t.kind, t.function, t.address)
        terms[key] = terms.get(key, 0.0) + sign * t.coef
    terms = {k: v for k, v in terms.items() if v != 0.0}
    if not terms:
        raise TargetError(f"{where}: names no count (write N(function+0xOFFSET) or "
                          f"A(function))")
    return FlowFact(name, text.strip(), tuple(FlowTerm(c, k, f, a)
                                              for (k, f, a), c in terms.items()),
                    rel, rc - lc)


def _side(where: str, text: str, functions: Mapping[str, FunctionModel]
          ) -> tuple[list[FlowTerm], float]:
    terms: list[FlowTerm] = []
    const = 0.0
    pos = 0
    text = text.strip()
    if not text:
        raise TargetError(f"{where}: a side of the relation is empty")
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m or m.end() == pos or (m.group("coef") is None and m.group("kind") is None):
            raise TargetError(f"{where}: cannot read {text[pos:]!r} (terms are c*N(block), "
                              f"c*A(function) or numbers, joined by + and -)")
        if pos > 0 and m.group("sign") is None:
            raise TargetError(f"{where}: a + or - is missing before {text[pos:].strip()!r}")
        sign = -1.0 if m.group("sign") == "-" else 1.0
        coef = sign * float(m.group("coef") or 1.0)
        if m.group("kind"):
            fn, addr = _resolve(where, m.group("kind"), m.group("ref"), functions)
            terms.append(FlowTerm(coef, m.group("kind"), fn, addr))
        else:
            const += coef
        pos = m.end()
    return terms, const


def _resolve(where: str, kind: str, ref: str, functions: Mapping[str, FunctionModel]
             ) -> tuple[str, int]:
    ref = ref.strip().strip('"')
    if kind == "A":
        if ref not in functions:
            raise UnknownFunction(f"{where}: A({ref}): no function {ref!r} among the "
                                  f"analysed ones ({', '.join(sorted(functions))})", ref)
        return ref, functions[ref].address
    m = re.fullmatch(r"(?P<fn>.+?)\s*(?P<sep>[+-])\s*(?P<off>0[xX][0-9a-fA-F]+|\d+)", ref)
    if m and not ref.startswith(("0x", "0X")):
        fname = m.group("fn")
        if fname not in functions:
            raise UnknownFunction(f"{where}: N({ref}): no function {fname!r} among the "
                                  f"analysed ones ({', '.join(sorted(functions))})", fname)
        fn = functions[fname]
        off = int(m.group("off"), 0)
        addr = fn.address + (off if m.group("sep") == "+" else -off)
        candidates = [fn]
    else:
        try:
            addr = int(ref, 0)
        except ValueError:
            raise TargetError(f"{where}: N({ref}): name a block as function+0xOFFSET or "
                              f"0xADDRESS") from None
        candidates = [f for f in functions.values() if addr in f.block_addresses]
        if not candidates:
            candidates = list(functions.values())
    for fn in candidates:
        if addr in fn.block_addresses:
            return fn.name, addr
    fn = candidates[0]
    near = sorted(fn.block_addresses, key=lambda a: abs(a - addr))[:3]
    raise TargetError(f"{where}: N({ref}): {hexaddr(addr)} does not start a block of "
                      f"{fn.name}; nearest blocks: "
                      + ", ".join(f"{fn.name}+{a - fn.address:#x}" for a in near))


def holds(fact: FlowFact, count_of: Mapping[tuple[str, int], float],
          activations: Mapping[str, float], tol: float = 1e-6) -> bool:
    """Whether one execution's counts satisfy the fact (a measured input that violates a
    user's fact means the fact is wrong: said, not used silently)."""
    value = sum(t.coef * (activations.get(t.function, 0.0) if t.kind == "A"
                          else count_of.get((t.function, t.address), 0.0))
                for t in fact.terms)
    if fact.relation == "<=":
        return value <= fact.constant + tol * max(1.0, abs(fact.constant))
    if fact.relation == ">=":
        return value >= fact.constant - tol * max(1.0, abs(fact.constant))
    return abs(value - fact.constant) <= tol * max(1.0, abs(fact.constant))


@dataclass(frozen=True)
class LinearConstraint:
    """One row of the IPET: low ≤ Σ coef·count(block) ≤ high over one function's blocks."""

    coefficients: tuple[tuple[int, float], ...]
    low: float
    high: float
    label: str


def root_constraints(facts: tuple[FlowFact, ...], root: FunctionModel
                     ) -> tuple[LinearConstraint, ...]:
    """The facts as rows of the root function's IPET.  A callee is bounded per call of its
    own (wcetfit.wcet.interproc), so its blocks are no variables of the root's problem:
    a fact naming them is refused rather than dropped."""
    out = []
    for f in facts:
        coef: dict[int, float] = {}
        const = f.constant
        for t in f.terms:
            if t.kind == "A" and t.function == root.name:
                const -= t.coef              # the measured function runs once per call
                continue
            if t.function != root.name:
                raise TargetError(f"[flow] '{f.name}': names {t.function}, a function the "
                                  f"measured one calls; flow facts may name only blocks of "
                                  f"{root.name} (callees are bounded per call)")
            coef[t.address] = coef.get(t.address, 0.0) + t.coef
        low, high = {"<=": (-float("inf"), const), ">=": (const, float("inf")),
                     "==": (const, const)}[f.relation]
        out.append(LinearConstraint(tuple(coef.items()), low, high,
                                    f"flow fact '{f.name}': {f.text} (given in [flow])"))
    return tuple(out)
