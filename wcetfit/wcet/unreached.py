"""What ``[wcet] unreached = "require"`` costs the blocks no input ran.

The fit has no cost for a block no input executed.  Under the default policy
("observed") such blocks are kept off the worst path; under "require" the user asks for a
bound over them too, and they were costed 0 ticks: the bound covered more paths and came
out *lower* (libm's ``sin``: 533.8 ticks under "require", 544.4 without), their time left
out while the report read as if they were bounded.  A cost no measurement gives must come
from what is known without one: the most the block's instructions can take
(:mod:`wcetfit.fit.ceilings`: (n + 1) × 500 ns per execution, every instruction and the
fetch missing every cache and the TLB).  That is loose by design, and it is the only
figure that holds for code nobody timed.

Two kinds of block have no such limit: one that calls out of the binary (or through a
pointer), whose callee's time would be in the block's, and one holding an instruction
of no fixed time (``rep`` string operations, system calls, waits).  Their instructions
are costed at the same per-instruction figure, and the bound says which they are and that
their callee's or the repeated instruction's time is not in it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from wcetfit.errors import WcetError
from wcetfit.fit.ceilings import INSTRUCTION_NS, instruction_ceiling_ticks, of_no_fixed_time
from wcetfit.model import CALL_INTERNAL, FunctionModel
from wcetfit.wcet.result import loop_key


def ceiling_costs(fi: Any, functions: Mapping[str, FunctionModel],
                  tsc_hz: float | None) -> tuple[Any, dict[tuple[str, int], float],
                                                 list[str]]:
    """``fi`` (wcetfit.wcet.analyze.FitInputs) with each block no input ran costed at the
    most its instructions can take; the costs given, by (function, address); and the
    blocks whose time that does not limit, as "fn+0xOFF (why)"."""
    if not fi.unknown:
        return fi, {}, []
    if not tsc_hz or tsc_hz <= 0:
        raise WcetError("[wcet] unreached = \"require\" costs the blocks no input ran at the "
                        "most their instructions can take, a time: it needs the TSC rate, "
                        "which these measurements do not record")
    costs = {name: dict(c) for name, c in fi.costs.items()}
    given: dict[tuple[str, int], float] = {}
    unlimited: list[str] = []
    for name, address in fi.unknown:
        fn = functions.get(name)
        block = next((b for b in fn.blocks if b.address == address), None) if fn else None
        if block is None:
            continue
        cost = instruction_ceiling_ticks(block, tsc_hz)
        costs[name][address] = cost
        given[(name, address)] = cost
        calls = [c for c in fn.calls if c.block == address and c.kind != CALL_INTERNAL]
        odd = sorted({i.mnemonic.split()[0] for i in block.instructions
                      if of_no_fixed_time(i.mnemonic) and not i.mnemonic.startswith("call")})
        why = ([f"calls {c.target_name or 'through a pointer'}" for c in calls[:2]]
               + ([f"holds {', '.join(odd[:3])}"] if odd else []))
        if why:
            unlimited.append(f"{loop_key(fn, address)} ({'; '.join(why)})")
    return replace(fi, costs=costs), given, unlimited


def ceiling_note(given: Mapping[tuple[str, int], float], unlimited: list[str],
                 result: Any, tsc_hz: float) -> str | None:
    """The warning of a bound whose worst path runs blocks no input ran: how much of it is
    their ceiling cost, and which of them that does not limit.  None when the path runs
    none of them."""
    on_path = 0.0
    used = 0
    for (name, address), cost in given.items():
        ires = result.functions.get(name)
        n = ires.block_counts.get(address, 0) if ires is not None else 0
        if n:
            used += 1
            on_path += n * cost
    if not used:
        return None
    ns = on_path / tsc_hz * 1e9
    text = (f"[wcet] unreached = \"require\": {used} block(s) no input ran are on the worst "
            f"path, each costed at the most its instructions can take ((n + 1) × "
            f"{INSTRUCTION_NS:.0f} ns per execution, n its instructions; no input measured "
            f"them): {on_path:,.0f} ticks ({ns:,.0f} ns) of the bound's point")
    if unlimited:
        text += ("; that is no limit for " + ", ".join(unlimited[:4])
                 + (f" and {len(unlimited) - 4} more" if len(unlimited) > 4 else "")
                 + ": their callee's time or the repeated instruction's is not in the bound")
    return text
