"""Inputs reached by symbolic execution become measured, stored inputs (wcetfit reach).

Truth used here: block addresses from objdump (the instructions after ``cmp $const``),
the magic values themselves (a block behind ``x == 0x1234abcd`` is reached only by that
value; a buffer test by those bytes), and wcetfit's count run driven directly — not
through ``wcetfit reach`` — on the arguments rebuilt from the store.  The generated
inputs are counted first to show that they never run the blocks in question.
"""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_reach import _after_compare, _objdump  # noqa: E402
from test_relocate import build_so, models_for  # noqa: E402

SRC = r"""
volatile int sink;

int magic(unsigned long x, int n)
{
    int r = 0;
    if (x == 0x1234abcdUL) { sink = 1; r = 7; }        /* one value in 2^40 */
    return r + n;
}

int pair(int a, int b)
{
    int r = 0;
    if (a > 500) { sink = 2; r += 3; }
    if (b > 500) { sink = 4; r += 5; }
    return r;
}

int bufcheck(const unsigned char *p, int len)
{
    if (len > 3 && p[0] == 'Z' && p[1] == 'q' && p[3] == 0x7f) { sink = 5; return 1; }
    return 0;
}
"""
PROTO = ("int magic(unsigned long x, int n); int pair(int a, int b); "
         "int bufcheck(const unsigned char *p, int len);")
INPUTS = """
def generate(ctx):
    if ctx.function == "magic":      # input 0 has x = 0: the range then covers 0x1234abcd
        x = 0 if ctx.index == 0 else int(ctx.rng.integers(0, 1 << 40))
        return (x, int(ctx.rng.integers(-100, 1000)))
    if ctx.function == "pair":       # a == b always: the two ifs' blocks stay unseparated
        a = int(ctx.rng.integers(0, 1000))
        return (a, a)
    n = int(ctx.rng.integers(0, 9))
    buf = ctx.ffi.new("unsigned char[]", 8)
    ctx.ffi.memmove(buf, ctx.rng.bytes(8), 8)
    return (buf, n)
"""


def _counts(path: str, fn: str, calls):
    """Per call, {block address: count} of ``fn``: wcetfit's count run driven directly."""
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.count.relocate import closure
    from wcetfit.loader import load_binary
    from wcetfit.timing.thunk import build_harness

    h = build_harness(PROTO, "")
    out = []
    with InstrumentedCopy(load_binary(path), closure(models_for(path, [fn]), [fn])) as copy:
        counter = Counter(copy, fn, h)
        cols = copy.block_addresses(fn)
        for i, make in enumerate(calls):
            r = counter.count(i, h.pack(fn, make(h)))
            out.append(dict(zip(cols, (int(c) for c in r.counts[fn]))))
    return out


def _after_cmps(path: str, fn: str, const: str) -> list[int]:
    """Fall-through blocks after each ``cmp $const`` and its conditional jump."""
    insns = _objdump(path, fn)
    out = []
    for k, (_, text) in enumerate(insns):
        if re.match(rf"cmp[bwlq]?\s+\${const},", text):
            assert insns[k + 1][1].startswith("j")
            out.append(insns[k + 2][0])
    assert out, f"no cmp ${const} in {fn}"
    return out


@pytest.fixture(scope="module")
def reached(tmp_path_factory):
    """A target counted and timed, then `wcetfit reach` once: (lib, dir, json, stdout)."""
    from wcetfit.cli import main

    tmp = tmp_path_factory.mktemp("reachin")
    lib = build_so(tmp, {"r.c": SRC}, name="reachin", flags=("-O1",))
    d = tmp / "t"
    d.mkdir()
    (d / "wcetfit.toml").write_text(
        f'binary = "{lib}"\nfunctions = ["magic", "pair", "bufcheck"]\n'
        f'prototype = "{PROTO}"\ninputs = "inputs.py"\n'
        "[measure]\ninputs = 30\nrepeats = 3\nseed = 5\n[search]\nbudget = 0\n")
    (d / "inputs.py").write_text(INPUTS)
    assert main(["count", str(d)]) == 0
    assert main(["time", str(d)]) == 0
    out_json = tmp / "reach.json"
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["reach", str(d), "--budget", "40", "--json", str(out_json)]) == 0
    print(buf.getvalue())
    return lib, str(d), json.loads(out_json.read_text()), buf.getvalue()


def _stored(d: str, fn: str):
    from wcetfit.pipeline import open_session
    from wcetfit.search.witness import load_reach_rows

    s = open_session(d)
    return s, load_reach_rows(s.store, fn, s.target.measure.seed)


def _rebuilt(rows, index: int):
    """The stored input's arguments rebuilt twice in this process, as plain values."""
    from wcetfit.search.witness import ReachInputs
    from wcetfit.timing.thunk import build_harness

    ffi = build_harness(PROTO, "").ffi
    inputs = ReachInputs(rows.shapes, dict(zip(rows.indices.tolist(), rows.witnesses)))

    def plain(args):
        return tuple(bytes(ffi.buffer(a)) if isinstance(a, ffi.CData) else a for a in args)
    return plain(inputs(None, None, ffi, "", index)), plain(inputs(None, None, ffi, "", index))


@pytest.mark.slow
def test_equality_guarded_block_is_reached_stored_and_regenerated(reached):
    from wcetfit.measurements import load_counts
    from wcetfit.pipeline import stored_measurements
    from wcetfit.search.witness import REACH_BASE

    lib, d, result, out = reached
    block = _after_compare(lib, "magic", "0x1234abcd", taken=True)   # as in test_reach
    s, rows = _stored(d, "magic")
    generated = load_counts(s.store, "magic", s.target.measure.seed).of("magic")
    col = list(generated.blocks).index(block)
    assert generated.counts[:, col].sum() == 0, "a generated input ran the magic block"

    (fj,) = [f for f in result["functions"] if f["function"] == "magic"]
    (b,) = [b for b in fj["blocks"] if int(b["address"], 16) == block]
    assert b["status"] == "reached" and b["input"] >= REACH_BASE
    assert fj["executed_after"] == fj["executed_before"] + 1
    k = b["input"]

    # in the store, with the count run's counts and its ticks
    assert rows is not None and k in rows.indices.tolist()
    i = rows.indices.tolist().index(k)
    fc = [f for f in rows.functions if f.name == "magic"][0]
    assert fc.counts[i, list(fc.blocks).index(block)] == 1
    assert np.isfinite(rows.ticks[i]).any()
    # the fit sees it as an input like the others
    counts, times = stored_measurements(s, "magic")
    assert k in counts.indices.tolist() and k in times.indices.tolist()
    # and the report's header counts it apart from the generated inputs (a witness read
    # as "51 inputs" of 50)
    from wcetfit.cli import main as cli
    import contextlib, io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli(["report", str(d)]) == 0
    from wcetfit.numbering import SEARCH_BASE
    generated_n = int(np.sum(counts.indices < SEARCH_BASE))
    reached_n = int(np.sum(counts.indices >= REACH_BASE))
    assert f"{generated_n:,} inputs" in buf.getvalue() and \
        f"+ {reached_n:,} reached by angr" in buf.getvalue(), buf.getvalue()[:400]

    # regenerated from the store: the same values, the magic one among them, and the count
    # run driven directly on them executes the block once
    a1, a2 = _rebuilt(rows, k)
    assert a1 == a2 and a1[0] == 0x1234abcd and -100 <= a1[1] <= 1000
    (c,) = _counts(lib, "magic", [lambda h: a1])
    assert c[block] == 1


@pytest.mark.slow
def test_buffer_witness_regenerates_to_the_same_bytes(reached):
    lib, d, result, _ = reached
    (fj,) = [f for f in result["functions"] if f["function"] == "bufcheck"]
    # the body behind p[3] == 0x7f: fall-through of the last compare
    (block,) = _after_cmps(lib, "bufcheck", "0x7f")
    (b,) = [b for b in fj["blocks"] if int(b["address"], 16) == block]
    assert b["status"] == "reached", b
    _, rows = _stored(d, "bufcheck")
    i = rows.indices.tolist().index(b["input"])
    data, n = rows.witnesses[i]
    assert data[0] == ord("Z") and data[1] == ord("q") and data[3] == 0x7f and n > 3
    a1, a2 = _rebuilt(rows, b["input"])
    assert a1 == a2 and a1[0] == data and a1[1] == n
    (c,) = _counts(lib, "bufcheck", [lambda h: (h.ffi.new("unsigned char[]", a1[0]), a1[1])])
    assert c[block] == 1


@pytest.mark.slow
def test_unseparated_group_is_separated_and_confirmed(reached):
    lib, d, result, out = reached
    body_a, body_b = _after_cmps(lib, "pair", "0x1f4")
    s, rows = _stored(d, "pair")
    from wcetfit.measurements import load_counts
    gen = load_counts(s.store, "pair", s.target.measure.seed).of("pair")
    ca, cb = (gen.counts[:, list(gen.blocks).index(x)] for x in (body_a, body_b))
    assert (ca == cb).all() and ca.any(), "the generated inputs run both bodies together"

    (fj,) = [f for f in result["functions"] if f["function"] == "pair"]
    (g,) = [g for g in fj["groups"] if {int(a, 16) for a in g["blocks"]} >= {body_a, body_b}]
    assert g["status"] == "separated", g
    i = rows.indices.tolist().index(g["input"])
    fc = [f for f in rows.functions if f.name == "pair"][0]
    ra, rb = (fc.counts[i, list(fc.blocks).index(x)] for x in (body_a, body_b))
    assert ra != rb
    (a, b), _ = _rebuilt(rows, g["input"])
    (c,) = _counts(lib, "pair", [lambda h: (a, b)])
    assert (c[body_a], c[body_b]) == (int(a > 500), int(b > 500)) == (ra, rb)
    # the analysis now names the verdicts where the user reads the report
    from wcetfit.pipeline import analyze_stage, stored_measurements
    rep = analyze_stage(s, "pair", *stored_measurements(s, "pair")).report
    assert any("unseparated group(s): 1 separated" in w.message for w in rep.warnings)


def test_shapes_template_and_store_round_trip(tmp_path):
    """No angr: the template of a length argument stays within its buffer; witnesses
    survive the store byte for byte; verdicts of blocks not looked at again are kept."""
    from wcetfit.measurements import FunctionCounts
    from wcetfit.search.witness import (REACH_BASE, ArgShape, ReachRows, load_reach_rows,
                                        merge_reach_rows, save_reach_rows, template_for)
    from wcetfit.store import Store, StoreIdentity
    from wcetfit.target import generate_input, load_inputs_module, load_target
    from wcetfit.timing.thunk import build_harness

    lib = build_so(tmp_path, {"r.c": SRC}, name="rt", flags=("-O1",))
    (tmp_path / "wcetfit.toml").write_text(
        f'binary = "{lib}"\nfunctions = ["bufcheck"]\nprototype = "{PROTO}"\n'
        'inputs = "inputs.py"\n[measure]\ninputs = 10\n')
    (tmp_path / "inputs.py").write_text(INPUTS)
    t = load_target(str(tmp_path))
    tmpl, shapes, why = template_for(t, "bufcheck", range(10), max_buffer=4)
    assert why == "" and shapes == (ArgShape("array", "unsigned char", 4), ArgShape("int"))
    assert tmpl.params[0].length == 4 and tmpl.params[1].hi <= 4
    assert tmpl.params[0].may_be_null            # a pointer is also explored as NULL
    # the inputs' buffers are longer than the 4 bytes explored: said, with their length
    longest = max(len(a) for a, _ in (generate_input(load_inputs_module(t), t,
                                                     build_harness(PROTO, "").ffi,
                                                     "bufcheck", i) for i in range(10)))
    assert tmpl.longer == ((0, longest),) and longest > 4

    ffi = build_harness(PROTO, "").ffi
    blocks = (0x10, 0x20)
    rows = ReachRows("bufcheck", 1, "lfence", 2.4e9, shapes, np.array([REACH_BASE]),
                     ((b"Zq\x00\x7f", 4),), ("block 0x20",),
                     (FunctionCounts("bufcheck", 0x10, blocks, np.array([[1, 1]])),),
                     np.array([[50.0, 52.0, 51.0]]),
                     ({"function": "bufcheck", "block": "0x20", "status": "reached"},))
    store = Store(str(tmp_path / "store"), StoreIdentity("a" * 64, "b" * 64))
    save_reach_rows(store, rows)
    back = load_reach_rows(store, "bufcheck", 1)
    assert back.witnesses == rows.witnesses and back.shapes == shapes
    assert bytes(ffi.buffer(shapes[0].build(ffi, back.witnesses[0][0]))) == b"Zq\x00\x7f"
    later = ReachRows("bufcheck", 1, "lfence", 2.4e9, shapes, np.array([REACH_BASE + 1]),
                      ((None, 0),), ("group 3",), back.functions,
                      np.array([[40.0, 41.0, 40.0]]),
                      ({"group": 3, "blocks": ["0x10"], "status": "not found"},))
    merged = merge_reach_rows(back, later)
    assert merged.indices.tolist() == [REACH_BASE, REACH_BASE + 1]
    assert [v.get("block") or v.get("group") for v in merged.verdicts] == ["0x20", 3]
    # a null pointer's witness survives the store and rebuilds as a null pointer
    save_reach_rows(store, merged)
    again = load_reach_rows(store, "bufcheck", 1)
    assert again.witnesses[1] == (None, 0)
    null = shapes[0].build(ffi, again.witnesses[1][0])
    assert null == ffi.NULL and ffi.typeof(null).cname == "unsigned char *"


def test_a_pointer_every_input_passes_as_null_stays_null(tmp_path):
    """liblzma's lzma_stream_buffer_decode: generate() passes the allocator as ffi.NULL,
    and reach refused the function, "argument 2 is a void *, neither array nor typed
    pointer" (the void * being ffi.NULL's).  A pointer every stored input passes as NULL
    is NULL in the template, typed as the prototype declares it; a pointer some inputs
    pass as NULL takes its type from the others."""
    from wcetfit.search.witness import ArgShape, reach_refusal, template_for
    from wcetfit.static.reach import IntParam
    from wcetfit.target import load_target
    from wcetfit.timing.thunk import build_harness

    proto = ("int g(const struct alloc *a, const unsigned char *buf, unsigned long n, "
             "const unsigned char *opt);")
    (tmp_path / "wcetfit.toml").write_text(
        f'binary = "/bin/true"\nfunctions = ["g"]\nprototype = "{proto}"\n'
        'cdef = "struct alloc { void *opaque; };"\ninputs = "inputs.py"\n'
        '[measure]\ninputs = 10\n')
    (tmp_path / "inputs.py").write_text(
        "def generate(ctx):\n"
        "    n = int(ctx.rng.integers(1, 64))\n"
        "    opt = ctx.ffi.NULL if ctx.index % 2 else ctx.ffi.new('unsigned char[]', 8)\n"
        "    return (ctx.ffi.NULL, ctx.ffi.new('unsigned char[]', n), n, opt)\n")
    t = load_target(str(tmp_path))
    assert reach_refusal(t, "g") is None
    tmpl, shapes, why = template_for(t, "g", range(10))
    assert why == ""
    assert shapes[0] == ArgShape("null", "struct alloc")
    assert tmpl.params[0] == IntParam(value=0)
    assert shapes[3] == ArgShape("array", "unsigned char", 8)
    ffi = build_harness(proto, "struct alloc { void *opaque; };").ffi
    built = shapes[0].build(ffi, 0)
    assert built == ffi.NULL and ffi.typeof(built) is ffi.typeof("struct alloc *")


def test_reach_prints_blocks_not_found_for_one_reason_on_one_line():
    """liblzma's decoder: 371 lines of "not found within the budget (2 path(s) stopped by
    an angr error …)", one per block, each with the same reason; and a block below its
    function's start named "sub_105b0+-0xbfe3"."""
    import io
    from types import SimpleNamespace as NS

    from wcetfit.cli.reach import MAX_NAMED, _print
    from wcetfit.search.reaching import BlockOutcome, ReachReport

    why = "2 path(s) stopped by an angr error"
    blocks = tuple(BlockOutcome("f", 0x1000 + 16 * k, "not found", None, why)
                   for k in range(10))
    blocks += (BlockOutcome("f", 0x800, "not found", None, "another reason"),)
    rep = ReachReport("f", "arg0: int", blocks, (), np.array([], dtype=np.int64),
                      np.zeros((0, 3)), 2.6e9, 1.0, 5, 5, 16)
    s = NS(model=NS(function=lambda name: NS(address=0x1000)))
    out = io.StringIO()
    _print(out, s, "f", rep, kept=False)
    lines = out.getvalue().splitlines()
    (folded,) = [ln for ln in lines if why in ln]
    assert folded.startswith(f"  10 blocks not found within the budget ({why}): f+0x0 (0x1000), ")
    assert folded.endswith(f"and {10 - MAX_NAMED} more (--json lists them)")
    assert "  f-0x800 (0x800): not found within the budget (another reason)" in lines


def test_a_key_built_by_its_own_inputs_is_described_by_them(tmp_path):
    """A rejected reached input is built from its witness, not by generate(): its
    arguments are the witness's (described by generate() they were another input's)."""
    from wcetfit.search.candidates import describe_input
    from wcetfit.target import load_target

    (tmp_path / "wcetfit.toml").write_text(
        'binary = "/bin/true"\nfunctions = ["g"]\nprototype = "int g(int x);"\n'
        'inputs = "inputs.py"\n')
    (tmp_path / "inputs.py").write_text("def generate(ctx):\n    return (7,)\n")
    t = load_target(str(tmp_path))
    assert describe_input(t, "g", 3) == "(7)"
    assert describe_input(t, "g", 3, inputs=lambda gen, t, ffi, fn, i: (12345,)) == "(12345)"
