"""Loop bounds: observed in the count run, and the user's facts of [loops].

**What a loop bound counts.**  N is the largest number of times the loop's back edges
are taken per entry into the loop; the header then runs at most N+1 times per entry.
This is the convention of OTAWA's IPET (its ``max`` bound constrains back edges against
entry edges) and it is the safe reading of a source-level "at most N iterations": a
test-at-top loop of N iterations takes its back edge N times, a rotated (test-at-bottom)
loop N−1 times, so N covers both compiler shapes.  Observed bounds
(:func:`observed_loop_bounds`) count the same quantity: back-edge traversals.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wcetfit.errors import TargetError, UnknownFunction, WcetError
from wcetfit.model import FunctionModel, hexaddr
from wcetfit.wcet.flow import Flow
from wcetfit.wcet.result import SOURCE_FACT, SOURCE_OBSERVED, LoopBound, describe_block

log = logging.getLogger(__name__)

# --- observed loop bounds ----------------------------------------------------------------

def _determinable(flow: Flow, W: np.ndarray, tol: float = 1e-7
                  ) -> list[tuple[np.ndarray, float] | None]:
    """For each column w of ``W`` (edge weights): if w·f is the same for every edge flow f
    consistent with the block counts, (a, b) such that w·f = counts·a + b; else None.

    Block counts fix Σ in-flows and Σ out-flows of every block (and the source edge is 1):
    w·f is determined iff w is a combination λ of those rows, and then w·f = λ·(right-hand
    sides).  One least-squares solve serves every loop.
    """
    nb = len(flow.blocks)
    nv = len(flow.edges)
    M = np.zeros((2 * nb + 1, nv))
    for a, r in flow.index.items():
        for i in flow.ins[a]:
            M[r, i] = 1.0
        for i in flow.outs[a]:
            M[nb + r, i] = 1.0
    M[2 * nb, flow.source_var] = 1.0
    lam, *_ = np.linalg.lstsq(M.T, W, rcond=None)
    resid = np.max(np.abs(M.T @ lam - W), axis=0, initial=0.0)
    out: list[tuple[np.ndarray, float] | None] = []
    for k in range(W.shape[1]):
        if resid[k] > tol:
            out.append(None)
        else:
            # both rows of block r have its count as right-hand side; the source edge is 1
            out.append((lam[:nb, k] + lam[nb:2 * nb, k], float(lam[2 * nb, k])))
    return out


class LoopFlow:
    """What observed loop bounds need of a function that does not depend on the counts:
    its flow graph and which back-edge totals its block counts determine (one
    least-squares solve).  Made once, it serves any number of count sets (`wcetfit check`
    judged each of 200 fresh inputs alone, and made it again for each: 6 min 46 s on
    libbz2's decompressor, 20 s of every 29 in the solve)."""

    def __init__(self, fn: FunctionModel):
        self.fn = fn
        self.flow = Flow(fn)
        W = np.zeros((len(self.flow.edges), len(fn.loops)))
        for k, lp in enumerate(fn.loops):
            W[self.flow.loop_vars(lp)[0], k] = 1.0
        self.determined = _determinable(self.flow, W) if fn.loops else []


def observed_loop_bounds(fn: FunctionModel, counts: np.ndarray,
                         block_addresses: Sequence[int], *,
                         prepared: LoopFlow | None = None,
                         say_unentered: bool = True) -> dict[int, LoopBound]:
    """Loop bounds seen in the count run: header → :class:`LoopBound` (source "observed").

    ``counts[input, column]``: block executions per call; ``block_addresses[column]``
    names the columns (other functions' columns are ignored).

    Per input we need B, the back-edge traversals, and E, the entries into the loop
    (B + E = executions of the header).  Block counts give edge flows only where flow
    conservation pins them (e.g. a back edge from a block whose only successor is the
    header): B is taken where it is determined by the counts; otherwise it is bounded
    above by min(header − 1, Σ counts of the back edges' sources), and the bound says so.

    - Loops entered at most once per call in every input (outermost loops): B is exactly
      the traversals of that one entry, and the bound is per entry: max over inputs of B;
      and the same figure in total per call, since the IPET may enter the loop more often
      than any input did (never one input's longest run × another input's entries).
    - Loops entered several times in one call (inner loops): the counts give the total
      over all entries, not the maximum of one entry (the average B/E is not the max).
      The bound is then a total per call: max over inputs of B.  Exact on what was
      observed, but it does not grow with an enclosing loop's bound: give a flow fact
      when the enclosing loop is bounded by a fact beyond what the inputs reached.
    Loops never entered by any input get no bound (the IPET then asks for a fact).
    ``prepared``: the function's :class:`LoopFlow`, when the caller has made it;
    ``say_unentered``: log the loops no input entered (not for one input of many).
    """
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] != len(block_addresses):
        raise WcetError(f"counts of shape {counts.shape} do not match "
                        f"{len(block_addresses)} block addresses")
    col = {int(a): j for j, a in enumerate(block_addresses)}
    prepared = prepared if prepared is not None and prepared.fn is fn else LoopFlow(fn)
    flow = prepared.flow
    missing = [a for a in flow.blocks if a not in col]
    if missing:
        raise WcetError(f"{fn.name}: counts have no column for block "
                        f"{describe_block(fn, missing[0])}")
    C = counts[:, [col[a] for a in flow.blocks]].astype(float)
    out: dict[int, LoopBound] = {}
    for lp, det in zip(fn.loops, prepared.determined):
        back, entry = flow.loop_vars(lp)
        H = C[:, flow.index[lp.header]]
        entered = H > 0
        if not entered.any():
            if say_unentered:
                log.info("%s: loop %s never entered by the inputs: no observed bound",
                         fn.name, describe_block(fn, lp.header))
            continue
        exact = det is not None
        if det is not None:
            B = C @ det[0] + det[1]
        else:
            srcs = [flow.edges[i][0] for i in back]
            src_sum = C[:, [flow.index[s] for s in srcs]].sum(axis=1)
            B = np.minimum(np.maximum(H - 1, 0), src_sum)
        B = np.rint(B)
        E = H - B
        if np.any(B < 0) or np.any(E < 0) or np.any(E[entered] < 1):
            # The header is also reached other than through the loop's entry edges
            # (irreducible flow around it): per-entry figures mean nothing, but a back
            # edge never runs more often than the header, so its total per call holds.
            bad = int(np.argmax((B < 0) | (E < 0) | (entered & (E < 1))))
            witness = int(np.argmax(H))
            out[lp.header] = LoopBound(
                total=int(H[witness]), source=SOURCE_OBSERVED, witness=witness,
                note=f"entries not derivable from block counts (input {bad}: header "
                     f"{int(H[bad])}, back edges {int(B[bad])}; irreducible flow?): bounded "
                     "by the most header executions per call")
            continue
        witness = int(np.argmax(B))
        most = int(B[witness])
        max_entries = int(E.max())
        if exact and max_entries <= 1:
            # The total too: the IPET may enter the loop more often than any input did (an
            # enclosing loop's bound seen on another input); per entry alone would then
            # multiply one input's longest run by another's entries.
            out[lp.header] = LoopBound(per_entry=most, total=most, source=SOURCE_OBSERVED,
                                       witness=witness,
                                       note="max back-edge traversals per entry, and per call, "
                                            "over the inputs")
            continue
        notes = []
        if not exact:
            notes.append("edge counts not determined by the block counts: back-edge "
                         "traversals bounded by min(header - 1, counts of back-edge sources)")
        if max_entries > 1:
            avg = float(np.max(B[entered] / E[entered]))
            notes.append(f"entered up to {max_entries} times per call: the maximum per entry "
                         f"is not observable from block counts (largest average "
                         f"{abs(avg):.1f} per entry); bounded by its total per call")
        out[lp.header] = LoopBound(total=most, source=SOURCE_OBSERVED, witness=witness,
                                   note="; ".join(notes))
    return out


# --- user flow facts ---------------------------------------------------------------------

def parse_loop_facts(spec: Mapping[str, Any], functions: Mapping[str, FunctionModel]
                     ) -> dict[tuple[str, int], LoopBound]:
    """Resolve the [loops] table of wcetfit.toml to (function, header) → :class:`LoopBound`.

    Keys name a loop by its header block: ``"adpcm_coder+0x4c"`` (offset from the
    function's start, hexadecimal with 0x or decimal) or ``"0x114c"`` (the link-time
    address, as ``objdump -d`` prints it).  Values: an integer N, the most back-edge
    traversals per entry into the loop, or a table ``{max = N, total = T}`` where T bounds
    the traversals over one call of the function.

    This is OTAWA's F4 fact ``loop "adpcm_coder" + 0x4c 2048;`` (and
    ``loop "f" + 0x24 max 20 total 50;``) written as ``"adpcm_coder+0x4c" = 2048``
    (``"f+0x24" = {max = 20, total = 50}``): the same addressing — a label plus an offset
    to the loop's header, or an absolute address — and the same meaning of the number,
    since OTAWA's IPET also bounds the back edges by max × the entry edges.  Two
    differences: OTAWA's totals count over the whole task run, ours over one call of the
    function the loop belongs to; and a call context is one call site, written after
    ``@`` (:func:`parse_site_loop_facts`; those keys are skipped here).

    An address that is not a loop header is an error naming the nearest headers.
    """
    out: dict[tuple[str, int], LoopBound] = {}
    origin: dict[tuple[str, int], str] = {}
    for key, value in spec.items():
        if site_parts(str(key), functions) is not None:
            continue                    # a call site's fact: parse_site_loop_facts
        where = f"[loops] '{key}'"
        bound = _fact_value(where, value, key)
        targets = _loop_targets(where, str(key), functions)
        for t in targets:
            if t in out and out[t] != bound:
                raise TargetError(f"{where}: loop {t[0]}+{t[1] - functions[t[0]].address:#x} "
                                  f"already has a different bound from '{origin[t]}'")
            out[t] = bound
            origin[t] = str(key)
    return out


# A [loops] key with a call site: "LOOP @ SITE"
SITE_SEPARATOR = "@"


def site_parts(text: str, functions: Mapping[str, FunctionModel]) -> tuple[str, str] | None:
    """A [loops] key's loop and call site ("h+0x24 @ f+0x61"), or None for a key without a
    site.  An "@" inside a symbol's name is no separator: a versioned symbol
    (``__fmod_finite@GLIBC_2.15+0xeb``, as the report names its loops) is the name of an
    analysed function, and the key was refused as a malformed call-site fact."""
    if SITE_SEPARATOR not in text:
        return None

    def names_function(part: str) -> bool:
        """``part`` is "function+OFFSET" (or -OFFSET) of an analysed function."""
        t = part.strip().strip('"')
        for sep in ("+", "-"):
            if sep in t and not t.startswith(sep):
                name, _, off = t.rpartition(sep)
                return name.strip() in functions and _is_address(off)
        return t in functions

    if names_function(text):
        return None
    # the separator is the "@" whose two sides name functions (or addresses), the spaced
    # one first ("h@GLIBC_2.2.5+0x10 @ f+0x61")
    cuts = [i for i in range(len(text)) if text.startswith(SITE_SEPARATOR, i)]
    cuts.sort(key=lambda i: not (text[i - 1:i] == " " or text[i + 1:i + 2] == " "))
    for i in cuts:
        loop, site = text[:i], text[i + 1:]
        if all(names_function(p) or _is_address(p) for p in (loop, site)):
            return loop, site
    loop, _, site = text.partition(SITE_SEPARATOR)
    return loop, site


def _is_address(part: str) -> bool:
    try:
        _parse_int(part.strip().strip('"'))
    except ValueError:
        return False
    return True

# (function of the loop, its header) → (calling function, calling block) → bound
SiteFacts = dict[tuple[str, int], dict[tuple[str, int], LoopBound]]


def parse_site_loop_facts(spec: Mapping[str, Any], functions: Mapping[str, FunctionModel]
                          ) -> SiteFacts:
    """The [loops] facts that hold at one call site: ``"h+0x24 @ f+0x61" = 5`` bounds the
    loop of ``h`` at 0x24 when ``h`` is called from the call at ``f+0x61`` (the call
    instruction's address as ``objdump -d`` prints it, or any address of the block that
    ends with it; ``"0x6024 @ 0x4061"`` with link-time addresses alike).  The value means
    what it means without a site (per entry, ``{max, total}``; the total per call of ``h``
    from that site).  Such a fact holds in that site's instance of ``h`` and of everything
    below it; the per-call-site bound (:mod:`wcetfit.wcet.context`) applies it there in
    place of the loop's general bound.  The context-insensitive bound, which charges one
    WCET per call of ``h`` everywhere, takes the loosest of the loop's general bound and
    its sites' facts (:func:`loosest`).

    The site must be a call of the loop's function (directly, not through a wrapper):
    anything else is an error naming the calls of the caller to it."""
    from wcetfit.wcet.interproc import entry_names

    out: SiteFacts = {}
    by_addr = entry_names(functions)
    for key, value in spec.items():
        text = str(key)
        parts = site_parts(text, functions)
        if parts is None:
            continue
        where = f"[loops] '{key}'"
        loop_text, site_text = parts
        if not loop_text.strip() or not site_text.strip() or (
                SITE_SEPARATOR in site_text and site_parts(site_text, functions) is not None):
            raise TargetError(f"{where}: write a call site's fact as \"LOOP @ SITE\", e.g. "
                              f"\"h+0x24 @ f+0x61\" (the loop's header, then the call)")
        bound = _fact_value(where, value, key)
        targets = _loop_targets(where, loop_text, functions)
        callees = {name for name, _ in targets}
        caller, block = _call_site(where, site_text.strip(), functions, callees, by_addr)
        for t in targets:
            if t[0] != functions_called(functions[caller], block, functions, by_addr):
                continue
            sites = out.setdefault(t, {})
            if (caller, block) in sites and sites[(caller, block)] != bound:
                raise TargetError(f"{where}: that loop at that call site already has "
                                  f"another bound")
            sites[(caller, block)] = bound
    return out


def functions_called(fn: FunctionModel, block: int, functions: Mapping[str, FunctionModel],
                     by_addr: Mapping[int, str] | None = None) -> str | None:
    """The analysed function the internal call ending ``block`` of ``fn`` goes to
    (``by_addr``: :func:`~wcetfit.wcet.interproc.entry_names` of ``functions``, made here
    when not given)."""
    from wcetfit.model import CALL_INTERNAL
    from wcetfit.wcet.interproc import callee_name, entry_names

    if by_addr is None:
        by_addr = entry_names(functions)
    for cs in fn.calls:
        if cs.block == block and cs.kind == CALL_INTERNAL:
            name = callee_name(functions, by_addr, cs)
            if name is not None:
                return name
    return None


def _call_site(where: str, text: str, functions: Mapping[str, FunctionModel],
               callees: set[str], by_addr: Mapping[int, str]) -> tuple[str, int]:
    """(caller, calling block) of a site written "f+0x61" or "0x4061": a call of one of
    ``callees`` at that instruction or in that block."""
    text = text.strip().strip('"')
    if "+" in text:
        name, _, off_text = text.rpartition("+")
        name = name.strip().strip('"')
        if name not in functions:
            raise UnknownFunction(f"{where}: no function {name!r} among the analysed ones "
                                  f"({', '.join(sorted(functions))})", name)
        try:
            addr = functions[name].address + _parse_int(off_text)
        except ValueError:
            raise TargetError(f"{where}: '{off_text.strip()}' is not an offset") from None
        candidates = [functions[name]]
    else:
        try:
            addr = _parse_int(text)
        except ValueError:
            raise TargetError(f"{where}: name the call site as \"function+0xOFFSET\" or by "
                              f"the call's address \"0x...\"") from None
        candidates = list(functions.values())
    for fn in candidates:
        for b in fn.blocks:
            if b.address <= addr < b.address + max(b.size, 1) and \
                    functions_called(fn, b.address, functions, by_addr) in callees:
                return fn.name, b.address
    calls = [f"{fn.name}+{cs.instruction - fn.address:#x}" for fn in candidates
             for cs in fn.calls if functions_called(fn, cs.block, functions, by_addr) in callees]
    raise TargetError(f"{where}: {hexaddr(addr)} is not a call of "
                      f"{' or '.join(sorted(callees))}"
                      + (f"; its calls: {', '.join(calls[:6])}" if calls else
                         "; no analysed function calls it directly"))


def loosest(general: LoopBound | None, sites: Iterable[LoopBound]) -> LoopBound | None:
    """One bound implied by each of ``general`` and the site facts (it holds wherever any
    of them does): the largest per entry — a bound given only in total bounds each entry
    too — and the largest total where every one gives a total."""
    every = ([general] if general is not None else []) + list(sites)
    if not every:
        return None
    per = [b.per_entry if b.per_entry is not None else b.total for b in every]
    tot = [b.total for b in every]
    most = max(int(v) for v in per if v is not None)
    # the source of the figure that sets it: a site's fact or the general bound
    general_sets = general is not None and per[0] == most
    return LoopBound(per_entry=most,
                     total=None if any(v is None for v in tot) else max(tot),
                     source=general.source if general_sets else SOURCE_FACT,
                     note="the loosest of the loop's general bound and its call sites' facts "
                          "(one WCET per call, all sites alike)")


def _loop_targets(where: str, key: str, functions: Mapping[str, FunctionModel]
                  ) -> list[tuple[str, int]]:
    """The (function, header) pairs a [loops] key names: "f+0x4c" or "0x114c"."""
    text = key.strip().strip('"')
    targets: list[tuple[str, int]]
    if "+" in text or ("-" in text and not text.startswith("-")):
        sep = "+" if "+" in text else "-"
        name, _, off_text = text.rpartition(sep)
        name = name.strip().strip('"')
        try:
            off = _parse_int(off_text.strip())
        except ValueError:
            raise TargetError(f"{where}: '{off_text.strip()}' is not an offset "
                              f"(write e.g. \"{name}+0x4c\")") from None
        if name not in functions:
            import difflib
            close = difflib.get_close_matches(name, list(functions), n=1)
            raise UnknownFunction(f"{where}: no function {name!r} among the analysed ones"
                                  + (f" (did you mean '{close[0]}'?)" if close else
                                     f" ({', '.join(sorted(functions))})"), name)
        fn = functions[name]
        addr = fn.address + (off if sep == "+" else -off)
        if addr not in {lp.header for lp in fn.loops}:
            raise TargetError(f"{where}: {hexaddr(addr)} is not a loop header of {name}; "
                              + _nearest_headers([fn], addr))
        targets = [(name, addr)]
    else:
        try:
            addr = _parse_int(text)
        except ValueError:
            raise TargetError(f"{where}: name a loop as \"function+0xOFFSET\" or by its "
                              f"header's address \"0x...\"") from None
        targets = [(fn.name, addr) for fn in functions.values()
                   if addr in {lp.header for lp in fn.loops}]
        if not targets:
            raise TargetError(f"{where}: {hexaddr(addr)} is not a loop header of any "
                              f"analysed function; " + _nearest_headers(functions.values(),
                                                                        addr))
    return targets


def _parse_int(text: str) -> int:
    t = text.strip().lower()
    if t.startswith("0x"):
        return int(t, 16)
    return int(t, 10)


def _fact_value(where: str, value: Any, key: str) -> LoopBound:
    def check(v: Any, what: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TargetError(f"{where}: {what} must be an integer, not {v!r}")
        if v < 0:
            raise TargetError(f"{where}: {what} must be >= 0")
        return int(v)

    if isinstance(value, Mapping):
        extra = set(value) - {"max", "total"}
        if extra or not value:
            raise TargetError(f"{where}: a loop fact table takes 'max' and/or 'total'")
        return LoopBound(per_entry=check(value["max"], "max") if "max" in value else None,
                         total=check(value["total"], "total") if "total" in value else None,
                         source=SOURCE_FACT, note=f"[loops] {key}")
    return LoopBound(per_entry=check(value, "a loop bound"), source=SOURCE_FACT,
                     note=f"[loops] {key}")


def _nearest_headers(fns: Iterable[FunctionModel], addr: int, n: int = 3) -> str:
    cands = [(abs(lp.header - addr), fn, lp.header) for fn in fns for lp in fn.loops]
    if not cands:
        return "the function has no loops" if len(list(fns)) == 1 else "no analysed loops"
    cands.sort(key=lambda t: (t[0], t[2]))
    return "nearest loop headers: " + ", ".join(describe_block(fn, h) for _, fn, h in cands[:n])


def merge_loop_bounds(functions: Mapping[str, FunctionModel],
                      facts: Mapping[tuple[str, int], LoopBound],
                      observed: Mapping[str, Mapping[int, LoopBound]]
                      ) -> dict[str, dict[int, LoopBound]]:
    """Function → header → bound: a user fact replaces the observed bound of its loop."""
    out: dict[str, dict[int, LoopBound]] = {name: dict(observed.get(name, {}))
                                            for name in functions}
    for (name, header), b in facts.items():
        out.setdefault(name, {})[header] = b
    return out
