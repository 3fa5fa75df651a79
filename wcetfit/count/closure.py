"""Which functions an instrumented copy holds: the measured function and the binary's own
functions it reaches (direct and tail calls, and the targets its indirect calls were seen
to take), less those whose copy cannot be made.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping, Sequence

from wcetfit.errors import RelocationError
from wcetfit.model import CALL_INDIRECT, CALL_INTERNAL, FunctionModel

log = logging.getLogger(__name__)


def relocatable_closure(functions: Mapping[str, FunctionModel], roots: Sequence[str],
                        read: Callable[[int, int], bytes], *, trace: bool = False,
                        uncounted: Iterable[str] = ()
                        ) -> tuple[list[FunctionModel], dict[str, str]]:
    """:func:`closure` less the callees whose copy cannot be made (each with the reason).

    Such a callee runs as original code: its time stays in the calling block, as an
    imported call's does, and it is not counted.  A root that cannot be copied raises.
    The result depends only on the model and the code bytes, so the parent process (for
    the counts' layout) and the worker (for the copy) agree."""
    from wcetfit.count.relocate import plan_copy   # (relocate imports this module)

    skipped: dict[str, str] = {}
    asked = list(uncounted)
    decoded: dict = {}
    while True:
        fns = closure(functions, roots, asked + list(skipped))
        try:
            plan_copy(fns, read, trace=trace, _decoded=decoded)
            return fns, skipped
        except RelocationError as exc:
            failed = getattr(exc, "failures", None)
            if not failed:
                raise
            for n in failed:
                if n in roots or n in skipped:
                    raise RelocationError(failed[n]) from None
            skipped.update(failed)


def closure(functions: Mapping[str, FunctionModel], roots: Sequence[str],
            uncounted: Iterable[str] = ()) -> list[FunctionModel]:
    """``roots`` and every function of ``functions`` they reach by internal calls.

    The order is deterministic (roots first, then callees in discovery order), so compact
    block ids are stable for a given model.  A callee missing from ``functions``, or named
    in ``uncounted`` (e.g. one the copy cannot relocate: the user's explicit choice), is
    left out: calls to it go to the original code, which runs uncounted and returns
    into the copy as any callee does.
    """
    skip = set(uncounted)
    by_entry: dict[int, str] = {}
    for f in functions.values():
        by_entry.setdefault(f.entry, f.name)
        by_entry.setdefault(f.address, f.name)
    out: list[str] = []
    todo = list(roots)
    for r in roots:
        if r not in functions:
            raise RelocationError(f"no static model for function {r}")
    while todo:
        name = todo.pop(0)
        if name in out:
            continue
        out.append(name)
        for c in functions[name].calls:
            if c.kind == CALL_INDIRECT:
                # Targets a count run saw this site take (CallSite.observed): callees of
                # the site, relocated and counted; the dispatch goes to their copies.
                for t in c.observed_internal:
                    callee = by_entry.get(t)
                    if callee is None:
                        log.warning("%s: indirect call at %#x went to %#x, which has no "
                                    "static model: it runs uncounted", name, c.instruction, t)
                    elif callee not in out and callee not in skip:
                        todo.append(callee)
                continue
            if c.kind != CALL_INTERNAL:
                continue
            callee = by_entry.get(c.target) if c.target is not None else None
            if callee is None and c.target_name in functions:
                callee = c.target_name
            if callee is None:
                log.warning("%s calls %s (%s) which has no static model: it runs uncounted",
                            name, c.target_name, c.target)
                continue
            if callee in skip and callee not in roots:
                log.info("%s calls %s, left uncounted as asked", name, callee)
                continue
            if callee not in out:
                todo.append(callee)
    return [functions[n] for n in out]
