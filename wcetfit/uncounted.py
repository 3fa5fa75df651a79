"""Functions a root reaches that the count run could not count (the instrumented copy
cannot hold them, or they are indirect targets observed after the counts were taken):
where they are called from, whether the bound can leave them out, and the words for it.

Under ``[wcet] unreached = "observed"`` a function called only from blocks no input ran
is left out with those blocks (the IPET forces them to 0); one called from a block an
input ran has no costs, and the bound is refused with the reason.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wcetfit.model import FunctionModel
from wcetfit.numbering import input_label

if TYPE_CHECKING:
    from wcetfit.pipeline import Session

log = logging.getLogger(__name__)


def absent_call_sites(functions: dict[str, FunctionModel], absent: list[str],
                       system: Any, describe: Any = None
                       ) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """Per function without counts: the blocks calling it that an input ran, those no
    input ran (as "fn+0xOFF", in the counted functions), and the uncounted functions
    calling it.  A block counts as unexecuted only if its count is 0 on every row and
    every block of its function has a column (so the IPET, under the "observed" policy,
    forces it to 0); a block without a column counts as executed.  ``describe``: input
    number → its arguments in short (or None): the first input named gets them, so that
    the user sees what generate() must avoid (libm's lgamma: every such input had x = 0.0,
    and the message gave input numbers only)."""
    import numpy as np

    from wcetfit.wcet.result import loop_key

    entry = {}
    for n in absent:
        entry[functions[n].address] = n
        entry.setdefault(functions[n].entry, n)
    col = {c: j for j, c in enumerate(system.columns)}
    C = np.asarray(system.counts)
    indices = np.asarray(getattr(system, "indices", ()))
    out: dict[str, tuple[list[str], list[str], list[str]]] = {n: ([], [], []) for n in absent}
    for name, fn in functions.items():
        whole = all((name, a) in col for a in fn.block_addresses)
        for cs in fn.calls:
            for callee in dict.fromkeys(entry[t] for t in cs.entries if t in entry):
                ran, unran, via = out[callee]
                if name in absent:
                    if name not in via:
                        via.append(name)
                    continue
                j = col.get((name, cs.block))
                where = loop_key(fn, cs.block)
                executed = not whole or j is None or bool(C.size and C[:, j].any())
                if executed and j is not None and C.size and len(indices) == len(C):
                    # the inputs that ran it: what generate() would have to avoid
                    ran_it = indices[C[:, j] > 0]
                    who = [input_label(i) for i in ran_it[:3]]
                    args = describe(int(ran_it[0])) if describe is not None else None
                    if args:
                        who[0] += f": {args}"
                    more = len(ran_it) - len(who)
                    where += f" ({', '.join(who)}{f' and {more} more' if more > 0 else ''})"
                lst = ran if executed else unran
                if where not in lst:
                    lst.append(where)
    return out


def without_calls_to(functions: dict[str, FunctionModel],
                      absent: list[str]) -> dict[str, FunctionModel]:
    """The counted functions, their calls of the ``absent`` ones taken out (all made from
    blocks no input ran: the IPET forces those blocks to 0 under the "observed" policy,
    so the calls change nothing in the bound, but the IPET needs a callee for each)."""
    gone = {functions[n].address for n in absent} | {functions[n].entry for n in absent}

    out = {}
    for name, fn in functions.items():
        if name in absent:
            continue
        calls = tuple(cs for cs in fn.calls if not gone.intersection(cs.entries))
        out[name] = fn if len(calls) == len(fn.calls) else replace(fn, calls=calls)
    return out


def _uncounted_why(session: Session, root: str, absent: list[str]) -> dict[str, str | None]:
    """Why each function the model reaches has no counts: the reason the instrumented copy
    cannot hold it (it runs as original code; counting again changes nothing), or None:
    an indirect target observed after the counts were taken (counting again helps)."""
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import read_elf

    try:
        _, skipped = relocatable_closure(session.model.functions,
                                         [session.root_model(root).name],
                                         read_elf(session.target.binary).read)
    except Exception as exc:  # noqa: BLE001 -- only the wording depends on it
        log.info("%s: why its callees run uncounted not found: %s", root, exc)
        skipped = {}
    return {n: skipped.get(n) for n in absent}


def _listed(items: list[str], most: int = 4) -> str:
    return ", ".join(items[:most]) + (", …" if len(items) > most else "")


def _callers(root: str, site: tuple[list[str], list[str], list[str]]) -> str:
    """Where a function without counts is called from, for the messages."""
    ran, unran, via = site
    if ran:
        text = f"called by {root} (in blocks the inputs ran: {_listed(ran)})"
        if unran:
            text += f" and from blocks no input ran ({_listed(unran)})"
    elif unran:
        text = f"called only from blocks no input ran ({_listed(unran)})"
    else:
        text = ""
    if via:
        runs = "runs" if len(via) == 1 else "run"
        names = ", ".join(via)
        text += (f", and by {names}, which {runs} uncounted too" if text else
                 f"called only by {names}, which {runs} uncounted too")
    return text or f"reached by {root} in the model"


def left_out_note(session: Session, root: str, absent: list[str],
                   sites: dict[str, tuple[list[str], list[str], list[str]]]) -> str:
    """The root's warning on functions left out of the bound with the unexecuted blocks
    that call them."""
    why = _uncounted_why(session, root, absent)
    parts = []
    for n in absent[:MAX_NAMED]:
        reason = (f"the copy cannot hold it: {why[n]}" if why[n] else
                  "an indirect target observed after the counts were taken")
        like = "those blocks" if sites[n][1] else "its callers"
        parts.append(f"{n}: {_callers(root, sites[n])}; it runs uncounted ({reason}), and "
                     f"like {like} it is left out of the bound")
    if len(absent) > MAX_NAMED:
        # (libc's strdup: ~70 such functions behind malloc's error paths, one warning of
        # ~70 sentences)
        parts.append(f"and {len(absent) - MAX_NAMED:,} more functions like these: "
                     + ", ".join(absent[MAX_NAMED:MAX_NAMED + 12])
                     + (" …" if len(absent) > MAX_NAMED + 12 else ""))
    return "; ".join(parts)


# Functions a left-out note describes one by one; the rest are named.
MAX_NAMED = 5


def absent_reason(session: Session, root: str, absent: list[str],
                   sites: dict[str, tuple[list[str], list[str], list[str]]] | None = None,
                   policy: str = "observed") -> str:
    """Why functions the model reaches have no counts, and so no bound: the instrumented
    copy cannot hold them (they run as original code; counting again changes nothing), or
    they are indirect targets observed after the counts were taken (counting again
    helps).  ``sites``: :func:`absent_call_sites`; ``policy``: ``[wcet] unreached``."""
    why = _uncounted_why(session, root, absent)
    sites = sites or {n: ([], [], []) for n in absent}
    uncopied = [n for n in absent if why[n]]
    later = [n for n in absent if not why[n]]
    parts = []
    for n in uncopied:
        site = sites[n]
        text = f"{n}: {_callers(root, site)}, but the instrumented copy cannot hold it " \
               f"({why[n]}), so it runs as original code, uncounted: its blocks have no cost"
        if site[0]:
            text += (", and its time in the calling block is a mean over the inputs, not a "
                     "worst case; a bound without that path: make generate() avoid the inputs "
                     f"that run {_listed(site[0])}: those blocks and it are then left out, as "
                     "blocks no input ran are")
        elif policy != "observed":
            text += (f", and [wcet] unreached = \"{policy}\" bounds the blocks no input ran "
                     "(with \"observed\", the default, they and it would be left out of "
                     "the bound)")
        parts.append(text)
    for n in later:
        parts.append(
            f"{n}: {_callers(root, sites[n])}, but not in its stored counts: a target of "
            "indirect calls observed after these counts were taken (count again: "
            "`wcetfit count` and `wcetfit analyze` count it as a callee)")
    return "; ".join(parts)

