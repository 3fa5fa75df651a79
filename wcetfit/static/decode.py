"""Code angr's lifter (VEX) cannot decode: continued with capstone, never cut silently.

VEX does not know some instructions (``sha256rnds2`` and the other SHA extensions, some
AVX-512 forms...).  CFGFast then ends the block before such an instruction with no
successor, and the function would silently end there.  :func:`continue_cuts` finds these
cut blocks in the plain graph and continues them with capstone: instruction sizes and
control flow (jumps, conditional branches, calls, returns) come from capstone's decoding,
new blocks are decoded until they reach code already in the graph (a block is split when
a branch lands inside it, as CFGFast's ``normalize`` does).  What capstone cannot decode
either is reported by address in the block's notes, which become the function's
warnings; an indirect jump met on the way is left to the model builder (which classifies
it as a tail call or an unresolved jump, by name).
"""

from __future__ import annotations

import bisect
import logging
import re
from typing import Iterable

from wcetfit.model import hexaddr
from wcetfit.static.elfinfo import ElfInfo

log = logging.getLogger(__name__)

# Last instructions after which a block legitimately has no successor in the graph.
_NO_SUCCESSOR = re.compile(r"^(?:(?:rep|repz|bnd|notrack)\s+)?(?:ret[qnfw]?|jmp|hlt|ud2|ud1|ud0|"
                           r"int3|iretq?|sysret|sysexit)$")
_MAX_NEW = 4096        # blocks added per recovery: a runaway decode of data stops there


def _is_cut(mnemonic: str) -> bool:
    return not _NO_SUCCESSOR.match(mnemonic)


def continue_cuts(blocks: dict[int, int], edges: dict[int, tuple[tuple[int | None, str], ...]],
                  elf: ElfInfo, data: bytes, md, entries: Iterable[int] = ()) -> dict[int, str]:
    """Extend ``blocks``/``edges`` (in place) past instructions VEX could not decode, and
    from ``entries`` (function starts) where CFGFast made no block (the first instruction
    is one VEX does not know: glibc's AVX-512 rawmemchr).  Returns notes per block
    address: what was continued with capstone, and what could not be decoded at all
    (those say "cannot be decoded")."""
    notes: dict[int, str] = {}
    starts = sorted(blocks)

    def insns_at(addr: int, limit: int = 4096):
        try:
            off = elf.file_offset(addr, 1)
        except Exception:  # noqa: BLE001 -- not backed by the file: nothing to decode
            return []
        return list(md.disasm_lite(data[off:off + limit], addr))

    def last_insn(addr: int, size: int):
        got = insns_at(addr, size)
        return got[-1] if got and sum(i[1] for i in got) == size else None

    def containing(t: int) -> int | None:
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and starts[i] < t < starts[i] + blocks[starts[i]]:
            return starts[i]
        return None

    cuts = []
    # Direct branches to code VEX cannot decode at all: CFGFast makes no node there and
    # drops the edge (glibc's AVX-512 memcmp on a CPU that selects it: `ja` to a block
    # starting with `vmovdqu64`), so the model took the branch for a tail call into
    # nothing.  Their targets are decoded with capstone like a cut block's rest.
    dangling: list[tuple[int, int]] = []
    for a, size in list(blocks.items()):
        last = last_insn(a, size)
        if last is None:
            continue
        if not edges.get(a):
            if _is_cut(last[2]) and a + size not in blocks:
                cuts.append(a)
            continue
        base = last[2].split()[-1] if last[2] else ""
        branch = base.startswith("j") or base in ("loop", "loope", "loopne")
        targets = []
        if branch and re.fullmatch(r"0x[0-9a-f]+", last[3]):
            targets.append(int(last[3], 16))
        if branch and base != "jmp":
            # the fall-through (glibc's EVEX memchr); not after a call, which may not return
            targets.append(a + size)
        for t in targets:
            if elf.in_exec(t) and t not in blocks and containing(t) is None \
                    and all(d != t for d, _ in edges[a]):
                dangling.append((a, t))
    missing = sorted(e for e in set(entries) if elf.in_exec(e) and e not in blocks
                     and containing(e) is None)
    if not cuts and not dangling and not missing:
        return notes
    for e in missing:
        notes[e] = "the function's first instruction: decoded by capstone (angr's lifter cannot)"
    for a, t in dangling:
        edges[a] = tuple(edges[a]) + ((t, "Ijk_Boring"),)
        notes[a] = (f"the branch at the end of this block goes to {hexaddr(t)}, code angr's "
                    f"lifter cannot decode: decoded by capstone")

    def split(t: int) -> None:
        s = containing(t)
        if s is None:
            return
        blocks[t] = s + blocks[s] - t
        blocks[s] = t - s
        edges[t] = edges.get(s, ())
        edges[s] = ((t, "Ijk_Boring"),)
        bisect.insort(starts, t)

    added = 0
    todo = [(a, a + blocks[a]) for a in sorted(cuts)]   # (block, where decoding continues)
    todo += [(t, t) for _, t in sorted(dangling, reverse=True)]
    todo += [(e, e) for e in reversed(missing)]
    while todo and added < _MAX_NEW:
        block, at = todo.pop()
        if block == at and block in blocks:      # decoded meanwhile
            continue
        first = at
        out: list[tuple[int | None, str]] = []
        while True:
            got = insns_at(at, 16)
            if not got:
                notes[block] = (f"the instruction at {hexaddr(at)} cannot be decoded (neither "
                                f"by angr's lifter nor by capstone): the block ends there")
                break
            a, size, mnem, ops = got[0]
            if first == at and block in blocks and at == block + blocks[block]:
                notes.setdefault(block, f"{mnem} at {hexaddr(a)}: decoded by capstone "
                                        f"(angr's lifter cannot)")
            at = a + size
            base = mnem.split()[-1] if mnem else ""
            target = int(ops, 16) if re.fullmatch(r"0x[0-9a-f]+", ops) else None
            if base == "call":
                out += [(target if target is not None and elf.in_exec(target) else None, "Ijk_Call"),
                        (at, "Ijk_FakeRet")]
                break
            if base.startswith("ret"):
                out.append((None, "Ijk_Ret"))
                break
            if base == "jmp":
                if target is not None:
                    out.append((target if elf.in_exec(target) else None, "Ijk_Boring"))
                break                            # indirect: classified by the builder
            if base.startswith("j") or base in ("loop", "loope", "loopne"):
                if target is not None:
                    out.append((target if elf.in_exec(target) else None, "Ijk_Boring"))
                out.append((at, "Ijk_Boring"))
                break
            if not _is_cut(mnem):                # hlt, ud2...: no successor
                break
            if at in blocks:                     # ran into known code: fall into it
                out.append((at, "Ijk_Boring"))
                break
            if containing(at) is not None:
                split(at)
                out.append((at, "Ijk_Boring"))
                break
        if block in blocks:
            blocks[block] = at - block
        else:
            blocks[block] = at - block
            bisect.insort(starts, block)
            added += 1
        edges[block] = tuple(dict.fromkeys(out))
        for dst, kind in out:
            if dst is None or kind == "Ijk_Call" and dst in blocks:
                continue
            if kind == "Ijk_Call":
                continue                         # callees are functions of their own
            if dst in blocks:
                continue
            if containing(dst) is not None:
                split(dst)
                continue
            todo.append((dst, dst))
    if todo:
        log.warning("decoding past the lifter stopped after %d new blocks", added)
    for b, text in notes.items():
        log.info("block %s: %s", hexaddr(b), text)
    return notes
