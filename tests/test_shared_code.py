"""Code two functions share becomes a function of its own (wcetfit.static.shared).

Known answers on small graphs, then the real cases: glibc's mempcpy jumps into memcpy's
body and wmemset into memset's at two points, so every malloc-using libc function (strdup
through realloc) reached both; libgmp's multiplication reaches __gmpn_add_n and
__gmpn_add_nc, which enters add_n's loop.  Both were refused ("share N block(s)")."""

from __future__ import annotations

import os

import pytest

from wcetfit.model import CALL_INTERNAL, Block, CallSite, FunctionModel, Instruction
from wcetfit.static import structure
from wcetfit.static.shared import separate_shared_code, shared_blocks

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
LIBGMP = "/lib/x86_64-linux-gnu/libgmp.so.10"


def _function(name, entry, succ, exits, calls=()):
    """A function of 16-byte blocks, each one 'nop' then its last instruction."""
    blocks = sorted({entry} | set(succ) | {d for ds in succ.values() for d in ds})
    edges = [(s, d) for s, ds in succ.items() for d in ds]
    st = structure.analyze(blocks, edges, entry, exits)
    return FunctionModel(
        name=name, address=entry,
        blocks=tuple(Block(a, 16, (Instruction(a, 1, "nop", ""),
                                   Instruction(a + 1, 15, "jmp", "x"))) for a in blocks),
        edges=tuple(sorted(edges)), entry=entry, exits=tuple(sorted(exits)),
        loops=st.loops, calls=tuple(calls), jump_tables=(),
        coexec_classes=st.coexec_classes, max_rank=st.max_rank)


def test_a_jump_into_another_functions_loop_makes_the_loop_a_function_both_tail_call():
    # A: 0x100 -> 0x110 <-> 0x120 -> 0x130 (returns); B: 0x50 -> jumps to 0x110
    a = _function("A", 0x100, {0x100: [0x110], 0x110: [0x120], 0x120: [0x110, 0x130]},
                  [0x130])
    b = _function("B", 0x50, {0x50: [0x110], 0x110: [0x120], 0x120: [0x110, 0x130]},
                  [0x130])
    assert sorted(shared_blocks({"A": a, "B": b})) == [0x110, 0x120, 0x130]
    out = separate_shared_code({"A": a, "B": b})
    assert sorted(out) == ["A", "A.shared+0x10", "B"] and not shared_blocks(out)
    c = out["A.shared+0x10"]
    assert (c.entry, c.block_addresses, c.exits) == (0x110, (0x110, 0x120, 0x130), (0x130,))
    assert [lp.header for lp in c.loops] == [0x110]          # the loop moved with its code
    for name, block in (("A", 0x100), ("B", 0x50)):
        fn = out[name]
        assert fn.block_addresses == (block,) and fn.exits == (block,) and not fn.loops
        assert [(s.block, s.instruction, s.kind, s.target, s.target_name, s.tail)
                for s in fn.calls] == [(block, block + 1, CALL_INTERNAL, 0x110, "A.shared+0x10", True)]


def test_two_entries_into_shared_code_and_the_block_both_reach_are_cut_apart():
    # A enters its shared part at 0x210 and 0x220, B at both too; both parts run 0x230
    succ = {0x210: [0x230], 0x220: [0x230], 0x230: [0x240]}
    a = _function("A", 0x200, {0x200: [0x210, 0x220], **succ}, [0x240])
    b = _function("B", 0x100, {0x100: [0x210, 0x220], **succ}, [0x240])
    out = separate_shared_code({"A": a, "B": b})
    assert not shared_blocks(out)
    parts = {n: fn.block_addresses for n, fn in out.items()}
    assert parts == {"A": (0x200,), "B": (0x100,), "A.shared+0x10": (0x210,), "A.shared+0x20": (0x220,),
                     "A.shared+0x30": (0x230, 0x240)}
    assert {s.target for s in out["A"].calls} == {0x210, 0x220}
    assert [s.target for s in out["A.shared+0x10"].calls] == [0x230]
    # a block every function reaches the same way is counted once, in one function
    owners = [n for n, fn in out.items() if 0x230 in fn.block_addresses]
    assert owners == ["A.shared+0x30"]


def test_functions_that_share_nothing_are_left_as_they_are():
    a = _function("A", 0x100, {0x100: [0x110]}, [0x110])
    b = _function("B", 0x200, {0x200: [0x210]}, [0x210])
    assert separate_shared_code({"A": a, "B": b}) == {"A": a, "B": b}


def test_shared_code_entered_where_a_call_returns_is_left_shared():
    """A call whose return lands in the shared code would be a call and a tail call at one
    instruction: left as it is, and refused by the fit as before."""
    call = CallSite(0x100, 0x101, CALL_INTERNAL, 0x900, "g")
    a = _function("A", 0x100, {0x100: [0x110], 0x110: [0x120]}, [0x120], calls=[call])
    b = _function("B", 0x50, {0x50: [0x110], 0x110: [0x120]}, [0x120])
    out = separate_shared_code({"A": a, "B": b})
    assert out == {"A": a, "B": b}


def _reached(lib, function):
    from wcetfit.model import reached_functions
    from wcetfit.static.binary import load_model

    if not os.path.exists(lib):
        pytest.skip(f"{lib} is not installed")
    model = load_model(lib, [function], with_callees=True)
    return model, reached_functions(model, model.function(function))


def test_libc_malloc_users_get_memcpy_and_memset_bodies_as_functions_of_their_own():
    """strdup reaches memcpy and mempcpy (57 shared blocks from 0x16d803 on this glibc) and
    memset and wmemset (21, entered at two points)."""
    from wcetfit.fit.system import refuse_shared_blocks

    model, reached = _reached(LIBC, "strdup")
    assert not shared_blocks(reached)
    refuse_shared_blocks("strdup", reached)            # no longer raises
    memcpy = model.function("memcpy")
    mempcpy = model.function("mempcpy")
    body = [fn for n, fn in reached.items() if n.startswith(memcpy.name + ".shared+")]
    assert len(body) == 1
    body = body[0]
    # memcpy keeps its first instruction, mempcpy its own three; both tail-call the body
    for fn in (memcpy, mempcpy):
        assert [(c.target, c.tail) for c in fn.calls] == [(body.entry, True)]
        assert len(fn.blocks) == 1
    assert body.entry > memcpy.entry and len(body.blocks) > 20 and body.loops
    # every block of the reach is in one function only, and the copy's loop bounds read
    # under the new name (memcpy@impl+0x…+0x3+0x…)
    assert body.name == f"{memcpy.name}.shared+{body.entry - memcpy.entry:#x}"
    assert body.warnings == (f"{body.name}: code {memcpy.name} and {mempcpy.name} share "
                             f"(entered at {body.entry:#x}), modelled as a function of its "
                             f"own that they tail-call",)


def test_libgmp_add_n_and_add_nc_are_cut_apart_in_the_static_model():
    """__gmpn_add_nc sets the carry and jumps into __gmpn_add_n's loop; the multiplication
    reaches both (and sub_n, rsh1add_n alike).  (Its analysis is still refused once the
    count run sees mul_basecase's computed jumps into its own loops: observed entries
    are not cut by.)"""
    from wcetfit.fit.system import refuse_shared_blocks

    _, reached = _reached(LIBGMP, "__gmpn_mul")
    assert not shared_blocks(reached)
    refuse_shared_blocks("__gmpn_mul", reached)
    assert any(n.startswith("__gmpn_add_n.shared+0x") for n in reached)


def test_functions_entered_through_observed_indirect_jumps_are_left_as_they_are():
    """libgmp's mul_basecase jumps into its unrolled loops at computed points: cutting
    by entries the inputs happened to take would move from one count run to the next."""
    a = _function("A", 0x100, {0x100: [0x110], 0x110: [0x120]}, [0x120])
    b = _function("B", 0x50, {0x50: [0x110], 0x110: [0x120]}, [0x120])
    c = _function("C", 0x400, {0x400: [0x410]}, [0x410])
    d = _function("D", 0x300, {0x300: [0x410]}, [0x410])
    out = separate_shared_code({"A": a, "B": b, "C": c, "D": d}, observed={"B"})
    assert out["A"] is a and out["B"] is b                      # B's sharing left
    assert "C.shared+0x10" in out and len(out["D"].blocks) == 1       # the others cut apart


def test_strdup_counts_times_and_bounds_through_the_separated_memcpy(tmp_path):
    """End to end on libc's strdup (refused before: memcpy and mempcpy share 57 blocks):
    init writes its target, the count run's copy checks flow conservation and the return
    on every input through the tail calls into memcpy's separated body, the body's blocks
    are counted (strdup copies every text with memcpy), and the bound is above every
    call taken for the function's own time."""
    import json

    from wcetfit.cli import main

    if not os.path.exists(LIBC):
        pytest.skip(f"{LIBC} is not installed")
    d = tmp_path / "strdup"
    assert main(["init", "--binary", LIBC, "--function", "strdup", "--header",
                 "/usr/include/string.h", str(d)]) == 0
    toml = (d / "wcetfit.toml").read_text()
    toml = toml.replace("inputs = 500 ", "inputs = 30 ").replace("repeats = 10 ", "repeats = 3 ")
    toml += "\n[search]\nbudget = 0\ntimed_budget = 0\n"
    (d / "wcetfit.toml").write_text(toml)
    out = tmp_path / "r.json"
    assert main(["analyze", str(d), "--json", str(out), "--no-wait"]) == 0
    functions = {f["name"]: f for f in json.loads(out.read_text())["functions"]}
    root = functions["strdup"]
    body = [f for n, f in functions.items() if n.startswith("memcpy@") and
            ".shared+" in n]
    assert len(body) == 1
    assert max(b["count_max"] for b in body[0]["blocks"]) >= 1
    w = root["wcet"]
    assert w["ipet_ticks"] > 0 and w["slowest_call"]["ticks"] <= w["ipet_ticks"]
