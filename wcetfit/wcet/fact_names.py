"""The target file's facts checked against the binary before anything is measured, and
each measured function's share of them.

``[loops]``, ``[flow]`` and ``[recursion]`` name functions and blocks, and the IPET reads
them only after the count and timing runs: a misspelt function there was refused after
minutes of measuring (what was measured was kept, the wait was lost), and a misspelt
``[recursion]`` name was not refused at all (the recursion it meant was then bounded by
its observed depth, or refused as unbounded, while the fact sat unused).

:func:`check_fact_names` parses every fact against the functions the measured ones reach
in the static model.  A fact naming a function of the binary the model does not reach
is not refused there: the count run may find it behind an indirect call (liblzma's
decoders call each other through pointers), and the IPET's parse after it decides.

With several measured functions, a fact about one's callee is no fact about another
that never calls it: :func:`facts_reaching` keeps, for one measured function, the facts
whose functions it reaches (a fact that names a function no measured function reaches
was refused by :func:`check_fact_names` already, or stays the IPET's error).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from wcetfit.errors import FunctionNotFound, TargetError, UnknownFunction
from wcetfit.model import FunctionModel

log = logging.getLogger(__name__)


def check_fact_names(target: Any, reached: Mapping[str, Mapping[str, FunctionModel]]) -> None:
    """Raise :class:`TargetError` for the first fact of ``target`` ([loops], [flow],
    [recursion]) that names no function of its binary, a block or loop header its function
    does not have, or that cannot be read.  ``reached``: measured function → the functions
    it reaches (:meth:`wcetfit.pipeline.Session.functions_of`)."""
    from wcetfit.wcet.flowfacts import parse_flow_facts
    from wcetfit.wcet.loops import parse_loop_facts, parse_site_loop_facts

    every: dict[str, FunctionModel] = {}
    for functions in reached.values():
        every.update(functions)
    symbols = _BinarySymbols(target.binary)
    for key, value in target.loops.items():
        _check_one(f"[loops] '{key}'",
                   lambda: (parse_loop_facts({key: value}, every),
                            parse_site_loop_facts({key: value}, every)), symbols)
    for key, text in target.flow.items():
        _check_one(f"[flow] '{key}'", lambda: parse_flow_facts({key: text}, every), symbols)
    for name in sorted(set(target.recursion) | set(target.recursion_activations)):
        if name in every:
            continue
        where = f"[recursion] '{name}'"
        if not symbols.has(name):
            raise TargetError(f"{where}: no function {name!r} among the analysed ones "
                              f"({', '.join(sorted(every))}), and none in the binary: "
                              f"{symbols.why(name)}")
        log.info("%s: %s is not reached in the static model; the count run may reach it "
                 "through a pointer", where, name)


def facts_reaching(spec: Mapping[str, Any], parse: Callable[[Mapping[str, Any]], Any],
                   functions: Mapping[str, FunctionModel],
                   elsewhere: Mapping[str, FunctionModel]) -> dict[str, Any]:
    """The entries of ``spec`` (a [loops] or [flow] table) that concern ``functions``:
    an entry ``parse`` refuses for naming a function only ``elsewhere`` (another measured
    function's callees) has is left out; every other entry is kept, refused or not, for
    the caller's own parse to judge."""
    if not elsewhere:
        return dict(spec)
    out: dict[str, Any] = {}
    for key, value in spec.items():
        try:
            parse({key: value})
        except UnknownFunction as exc:
            if exc.name in elsewhere and exc.name not in functions:
                continue
        except TargetError:
            pass
        out[key] = value
    return out


def _check_one(where: str, parse: Callable[[], Any], symbols: "_BinarySymbols") -> None:
    try:
        parse()
    except UnknownFunction as exc:
        if not symbols.has(exc.name):
            raise TargetError(f"{exc}, and none in the binary: {symbols.why(exc.name)}"
                              ) from None
        log.info("%s: %s is not reached in the static model; the count run may reach it "
                 "through a pointer", where, exc.name)


class _BinarySymbols:
    """Whether a name is a function symbol of the binary (read once, when first asked)."""

    def __init__(self, path: str):
        self.path = path
        self._index: Any = None

    def _resolve(self, name: str) -> str | None:
        """None when ``name`` resolves, else why not."""
        from wcetfit.static.elfinfo import read_elf
        from wcetfit.static.symbols import SymbolIndex

        if self._index is None:
            self._index = SymbolIndex(read_elf(self.path, with_fdes=False))
        try:
            self._index.resolve(name)
        except FunctionNotFound as exc:
            # "PATH: no function named 'x': it is not among ...": the part after the name
            why = str(exc).split(": ", 1)[-1]
            return why.split(": ", 1)[-1] if why.startswith("no function named") else why
        return None

    def has(self, name: str) -> bool:
        return self._resolve(name) is None

    def why(self, name: str) -> str:
        return self._resolve(name) or "it is one"
