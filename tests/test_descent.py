"""Our whole-binary recovery (wcetfit.static.descent) against angr's CFGFast.

angr's recovery is an independent implementation (VEX lifting, its own jump-table and
no-return analyses): the models the two graphs give must agree on every instruction of
every function, its calls, its jump tables, where it leaves and where its branches go.
Only where a straight line of code is cut into blocks may differ (the two split long
blocks and instructions VEX cannot lift differently), so edges are compared at the
instruction level.
"""

from __future__ import annotations

import os

import pytest

from wcetfit.static import descent, elfinfo
from wcetfit.static.build import Builder
from wcetfit.static.symbols import SymbolIndex
from wcetfit.static.whole import _build_all, _known_starts

LIBZ = [p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1")
        if os.path.exists(p)]


def _facts(fn):
    """What must not depend on how straight-line code is cut into blocks."""
    last = {b.address: b.instructions[-1].address for b in fn.blocks if b.instructions}
    ends = {b.address: b.address + b.size for b in fn.blocks}
    return {
        "instructions": sorted((i.address, i.size, i.mnemonic, i.op_str)
                               for b in fn.blocks for i in b.instructions),
        "calls": sorted((c.instruction, c.kind, c.target or 0, c.tail) for c in fn.calls),
        "tables": sorted((t.instruction, t.table_address, t.targets) for t in fn.jump_tables),
        "unresolved": fn.unresolved_jumps,
        # branches (not falls into the next block) at the instruction level
        "branches": sorted((last[s], d) for s, d in fn.edges if d != ends[s]),
        "exits": sorted(last[e] for e in fn.exits if e in last),
    }


@pytest.mark.slow
@pytest.mark.skipif(not LIBZ, reason="no system libz to compare the two recoveries on")
def test_descent_gives_angrs_models_on_libz():
    from wcetfit.static.binary import recover_raw

    path = LIBZ[0]
    elf = elfinfo.read_elf(path, with_fdes=True)
    index = SymbolIndex(elf)
    starts = sorted(_known_starts(elf, index))
    ours = {fn.address: fn for fn, _ in _build_all(path, elf, index,
                                                   descent.recover(path, starts, elf, index), None)}
    theirs = {fn.address: fn for fn, _ in _build_all(path, elf, index,
                                                     recover_raw(path, starts, elf), None)}
    assert len(ours) > 50
    assert set(ours) == set(theirs)
    for a in sorted(ours):
        fo, ft = _facts(ours[a]), _facts(theirs[a])
        for key in fo:
            assert fo[key] == ft[key], f"{ours[a].name}: {key} differ"


def test_rep_and_lift_limits_cut_blocks_as_vex_does():
    """Straight-line code longer than VEX's limits falls through into a new block, and a
    rep-prefixed string instruction is a block of its own with a loop to itself (the
    limits: angr.engines.vex.lifter's VEX_IRSB_MAX_INST/_SIZE)."""
    from angr.engines.vex import lifter

    assert (descent.MAX_INSNS, descent.MAX_BYTES) == (lifter.VEX_IRSB_MAX_INST,
                                                      lifter.VEX_IRSB_MAX_SIZE)
    assert descent._classify("rep stosq") == descent._REP
    assert descent._classify("repne scasb") == descent._REP
    assert descent._classify("bnd jmp") == descent._JMP
    assert descent._classify("jrcxz") == descent._COND_K
    assert descent._classify("repz ret") == descent._RET_K
    assert descent._classify("mov") == descent._PLAIN


def test_noreturn_imports_include_angrs():
    """Every import angr treats as never returning is one for us too (the fall-through
    after a call of it is not code of the caller)."""
    import angr
    from angr.procedures.definitions import SIM_LIBRARIES

    theirs = set()
    for libs in SIM_LIBRARIES.values():
        for lib in libs if isinstance(libs, list) else [libs]:
            theirs |= set(getattr(lib, "non_returning", ()))
    theirs |= {n for n, p in angr.SIM_PROCEDURES["libc"].items() if getattr(p, "NO_RET", False)}
    # angr's catalogue holds non-C-library names too (gnulib, Windows): C library ones here
    c_library = {n for n in theirs if not n.startswith(("xalloc", "xstrtol", "_invoke"))}
    assert c_library <= descent.NORETURN_IMPORTS, sorted(c_library - descent.NORETURN_IMPORTS)


def test_builder_uses_the_descents_instructions():
    """The builder takes the instructions the descent decoded (no second decoding), and
    they are capstone's decoding of the file's bytes at each block."""
    if not LIBZ:
        pytest.skip("no system libz")
    import capstone

    path = LIBZ[0]
    elf = elfinfo.read_elf(path, with_fdes=True)
    index = SymbolIndex(elf)
    raw = descent.recover(path, sorted(_known_starts(elf, index))[:20], elf, index)
    assert raw.insns and set(raw.insns) == set(raw.blocks)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    data = open(path, "rb").read()
    for a, size in list(raw.blocks.items())[:200]:
        off = elf.file_offset(a, size)
        assert tuple(md.disasm_lite(data[off:off + size], a)) == raw.insns[a]
    b = Builder(path, elf, index, raw)
    a = next(iter(raw.blocks))
    assert tuple((i.address, i.size, i.mnemonic, i.op_str) for i in b.block(a).insns) == raw.insns[a]
