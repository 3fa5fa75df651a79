"""The most one execution of a block can cost on a real machine: the upper limit the
physical fit holds each block's cost to (wcetfit.fit.physical holds it to ≥ 0 from below).

Why.  Where a block's time depends on the data, the inputs with equal counts differ in
time, and least squares puts their difference on whatever block happens to run on the
slow ones.  The statemachine sample's slow inputs (short tokens in random order: the jump
table mispredicted on nearly every byte, about 3× the time per byte) end in one state more
often than the others, so the two-instruction block that closes that state (``mov esi,
3; jmp``), run once per call or not at all, was fitted at 26,500–28,400 ticks per
execution in five sessions: 10 µs for two register instructions.  The worst path runs it
once, so 45 % of that path's time was this one number, and its interval (±13,900 ticks in
one session, ±1,160 in another) was most of the bound's margin.  No machine runs two
instructions in 10 µs; a cost above what its instructions can take is the model's misfit
put on one block, and the misfit belongs in the factor that covers it
(wcetfit.wcet.dispersion), where it is measured and said.

What.  Each instruction of a block may miss every cache and the TLB once
(:data:`INSTRUCTION_NS`), and so may the block's own fetch: a block of n instructions costs
at most (n + 1) × INSTRUCTION_NS per execution.  The limit is deliberately loose: it only
catches costs no execution of those instructions can have, and changes nothing the data
support.  A block has no limit when its time is not its instructions' alone: it calls or
tail-calls (a callee the count run does not count is timed as part of the calling block)
or holds an instruction whose time has no fixed limit (:data:`UNLIMITED`: string
operations under ``rep``, system calls and traps, waits, serialising and
transactional instructions, a ``lock``-prefixed access a cache line's other owner may hold).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from wcetfit.model import FunctionModel

# The longest one instruction can take without an interrupt, in ns: a memory access that
# misses every cache level and the TLB, whose four-level page walk misses too (about
# 100 ns of DRAM latency each on server parts), with room to spare; the slowest fixed-
# latency instructions (a 128-bit divide, x87 transcendentals: under 100 ns at 2.6 GHz)
# and a mispredicted branch are far below it.
INSTRUCTION_NS = 500.0

# Mnemonics (their first word, as capstone spells them) whose time has no fixed limit.
UNLIMITED = frozenset({
    "rep", "repe", "repz", "repne", "repnz", "lock",
    "syscall", "sysenter", "int", "int1", "int3", "into", "ud0", "ud1", "ud2", "hlt",
    "cpuid", "rdrand", "rdseed", "pause", "wait", "fwait", "mwait", "monitor", "umwait",
    "umonitor", "tpause", "xbegin", "xend", "xabort", "xtest", "serialize", "wbinvd",
    "invd", "wbnoinvd", "clflush", "clflushopt", "clwb", "xsave", "xsaveopt", "xsavec",
    "xsaves", "xrstor", "xrstors", "fxsave", "fxrstor", "xsave64", "xrstor64", "vmcall",
    "enclu", "rdpid", "getsec", "xgetbv",
})


def block_ceiling_ticks(functions: Mapping[str, FunctionModel],
                        columns: Sequence[tuple[str, int]], tsc_hz: float | None
                        ) -> np.ndarray:
    """Per count column (function, block address): the most one execution of the block
    can cost, in TSC ticks, or inf where it has no limit (module docstring).  Without the
    TSC rate every column is unlimited: the limit is a time, not a count of ticks."""
    out = np.full(len(columns), math.inf)
    if not tsc_hz or tsc_hz <= 0:
        return out
    calling = {name: {c.block for c in fn.calls} for name, fn in functions.items()}
    blocks = {name: {b.address: b for b in fn.blocks} for name, fn in functions.items()}
    for j, (name, address) in enumerate(columns):
        if name not in functions or address in calling[name]:
            continue
        block = blocks[name].get(address)
        if block is None or not block.instructions:
            continue
        if any(of_no_fixed_time(ins.mnemonic) for ins in block.instructions):
            continue
        out[j] = instruction_ceiling_ticks(block, tsc_hz)
    return out


def instruction_ceiling_ticks(block, tsc_hz: float) -> float:  # type: ignore[no-untyped-def]
    """The most ``block``'s instructions and its fetch can take per execution, in TSC
    ticks: (n + 1) × :data:`INSTRUCTION_NS`."""
    return (len(block.instructions) + 1) * INSTRUCTION_NS * 1e-9 * float(tsc_hz)


def of_no_fixed_time(mnemonic: str) -> bool:
    """An instruction whose time has no fixed limit (:data:`UNLIMITED`), or a call."""
    first = mnemonic.split()[0].lower() if mnemonic else ""
    # calls of every form, and jumps out of the function are call sites (checked apart)
    return first in UNLIMITED or first.startswith("call")
