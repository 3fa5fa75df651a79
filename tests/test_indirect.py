"""Indirect calls and tail calls through pointers: the count run records their targets,
the model takes the targets in the binary as callees of their site, and the second count
run counts those callees.  Oracle: valgrind callgrind's per-instruction counts (the
original code under valgrind, nothing of ours), as in test_count_oracle; return values
against the original's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_count_oracle import _first_counted, _need_tools, callgrind_oracle  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DISPATCH = ROOT / "samples" / "dispatch"
LIBZ = "/lib/x86_64-linux-gnu/libz.so.1"


def _count_twice(library, root, prototype, cdef, make_args, n):
    """Count run, targets recorded, model with them, count run again: (model of the
    second run, its functions, per input CountResult, harness, packs)."""
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.loader import load_binary
    from wcetfit.model import ObservedTarget
    from wcetfit.static import binary
    from wcetfit.timing.thunk import build_harness

    harness = build_harness(prototype, cdef)
    lb = load_binary(library)
    packs = [harness.pack(root, make_args(harness.ffi, i)) for i in range(n)]
    observed = None
    for _round in range(2):
        bm = binary.load_model(library, [root], with_callees=True, indirect=observed)
        fn = bm.function(root).name
        fns, _skipped = relocatable_closure(bm.functions, [fn], lb.read)
        results = []
        with InstrumentedCopy(lb, fns) as copy:
            counter = Counter(copy, fn, harness, call_name=root)
            for i, pack in enumerate(packs):
                results.append(counter.count(i, pack))
        seen: dict[int, dict] = {}
        for r in results:
            for site, targets in (r.indirect or {}).items():
                for t in targets:
                    seen.setdefault(site, {}).setdefault(t, 0)
                    seen[site][t] += 1
        observed = {site: tuple(ObservedTarget(t if isinstance(t, int) else None, str(t), k)
                                for t, k in ts.items()) for site, ts in seen.items()}
    return bm, fns, results, harness, packs, observed


def _compare(tmp_path, library, bm, fns, results, harness, packs, root, prototype, cdef):
    oracle = callgrind_oracle(tmp_path, library, bm.function(root).entry, prototype, cdef,
                              root, harness, packs)
    checked = 0
    for i, r in enumerate(results):
        for f in fns:
            for b, ours in zip(f.blocks, r.counts[f.name].tolist()):
                at = _first_counted(b)
                if at is None:
                    continue
                want = oracle[i].get(at, 0)
                assert ours == want, (f"input {i}: {f.name} block {b.address:#x}: "
                                      f"instrumented copy {ours}, callgrind {want}")
                checked += 1
    return checked


def _dispatch_case():
    from wcetfit import target as T

    if not (DISPATCH / "wcetfit.toml").is_file():
        pytest.skip("sample dispatch is absent")
    try:
        tg = T.load_target(str(DISPATCH))
    except Exception as exc:  # noqa: BLE001 - unbuilt samples
        pytest.skip(f"sample dispatch: {exc}")
    gen = T.load_inputs_module(tg)
    return tg, lambda ffi, i: T.generate_input(gen, tg, ffi, tg.functions[0], i)


@pytest.mark.slow
@pytest.mark.parametrize("opt", ["", "-O0"])
def test_dispatch_callees_counted_like_callgrind(tmp_path, opt):
    """Every block of dispatch_run and of the functions it reaches through pointers
    (op_* by `call *…`, fin_* by `jmp *%rax`) equals callgrind's count, every input."""
    _need_tools()
    tg, make_args = _dispatch_case()
    lib = tg.binary.replace("libdispatch.so", f"libdispatch{opt}.so")
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is not built (make -C samples)")
    root = tg.functions[0]
    bm, fns, results, harness, packs, observed = _count_twice(
        lib, root, tg.prototype, tg.cdef, make_args, 12)
    names = {f.name for f in fns}
    # every function of the pointer tables is reached by some input, so all are counted
    assert {"op_add", "op_xor", "op_mix", "op_rot", "fin_even", "fin_odd"} <= names, names
    # the pointer into libc stays outside, named
    outside = [t.name for ts in observed.values() for t in ts if t.address is None]
    assert outside and all("libc.so" in n for n in outside), outside
    # the activations the flow check used: each callee's entry count
    for r in results:
        for f in fns:
            if f.name != bm.function(root).name:
                assert r.activations[f.name] == int(
                    r.counts[f.name][f.block_addresses.index(f.entry)]), f.name
    checked = _compare(tmp_path, lib, bm, fns, results, harness, packs, root, tg.prototype,
                       tg.cdef)
    assert checked > 12 * 10


def test_dispatch_return_values_equal_the_original():
    """The copy (its indirect calls going to copies) returns what the original returns:
    compared here by calling the original through the same harness (besides the count
    run's own differential check)."""
    from wcetfit.loader import load_binary

    tg, make_args = _dispatch_case()
    if not os.path.exists(tg.binary):
        pytest.skip(f"{tg.binary} is not built (make -C samples)")
    root = tg.functions[0]
    bm, fns, results, harness, packs, _obs = _count_twice(
        tg.binary, root, tg.prototype, tg.cdef, make_args, 30)
    assert len(fns) > 1
    lb = load_binary(tg.binary)
    for r, pack in zip(results, packs):
        want = harness.call(root, lb.runtime(bm.function(root).entry), pack)
        assert r.return_value == want
    # the model built with the observations says so, per site
    from wcetfit.model import indirect_call_notes
    notes = indirect_call_notes(bm.function(root))
    assert any("indirect tail call" in n and "fin_" in n for n in notes), notes
    assert any("op_mix" in n and "observed on" in n for n in notes), notes


@pytest.mark.slow
def test_zlib_compress2_strategy_functions_counted_like_callgrind(tmp_path):
    """zlib's deflate calls its strategy function through configuration_table[level].func
    (deflate_stored / deflate_fast / deflate_slow): found in the count run, modelled and
    counted as callees; every zlib block equals callgrind's count."""
    _need_tools()
    if not os.path.exists(LIBZ):
        pytest.skip(f"{LIBZ} is absent")
    proto = ("int compress2(unsigned char *dest, unsigned long *destLen, "
             "const unsigned char *source, unsigned long sourceLen, int level);")

    def make_args(ffi, i):
        rng = np.random.default_rng([5, i])
        n = int(rng.integers(0, 3000))
        # compressible data: a small alphabet with runs
        data = np.repeat(rng.integers(0, 8, n // 4 + 1), 4)[:n].astype(np.uint8).tobytes()
        cap = n + n // 1000 + 64
        level = [0, 1, 6, 9][i % 4]
        return (ffi.new("unsigned char[]", cap), ffi.new("unsigned long *", cap),
                ffi.new("unsigned char[]", data or b"\0"), n, level)

    bm, fns, results, harness, packs, observed = _count_twice(LIBZ, "compress2", proto, "",
                                                             make_args, 8)
    names = {f.name for f in fns}
    inside = {t.address for ts in observed.values() for t in ts if t.address is not None}
    assert inside, "no indirect call into libz observed"
    strategies = {bm.function(a).name for a in inside}
    assert strategies <= names
    assert len(strategies) >= 2, strategies      # levels 0, 1, 6, 9: stored, fast, slow
    checked = _compare(tmp_path, LIBZ, bm, fns, results, harness, packs, "compress2", proto,
                       "")
    assert checked > 8 * 50


def test_dispatch_stub_decodes_and_keeps_the_operand():
    """The dispatch sequence, disassembled by capstone (independent of our encoder): it
    loads the original operand into r11 first, ends with `call r11` / `jmp r11`, and its
    size is the one the plan reserved."""
    import capstone

    from wcetfit.count import x86enc as enc

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    for raw, first, tail in [("ffd0", "mov r11, rax", False),          # call rax
                             ("41ff5508", "mov r11, qword ptr [r13 + 8]", False),
                             ("ff542408", "mov r11, qword ptr [rsp + 8]", False),
                             ("ff64c500", "mov r11, qword ptr [rbp + rax*8]", True),
                             ("3effe0", "mov r11, rax", True)]:         # notrack jmp rax
        load, disp = enc.load_r11_from_branch(bytes.fromhex(raw))
        code = enc.indirect_dispatch(load, disp, None, 0x10000, 0x20000, 0x30000,
                                     [(0x40000, 0x40008)], tail)
        assert len(code) == enc.indirect_dispatch_size(len(load), 1)
        insns = list(md.disasm(code, 0x10000))
        assert sum(i.size for i in insns) == len(code)
        assert f"{insns[0].mnemonic} {insns[0].op_str}" == first
        assert f"{insns[-1].mnemonic} {insns[-1].op_str}" == ("jmp r11" if tail else "call r11")


def test_model_json_keeps_observed_targets():
    from wcetfit.model import (CALL_INDIRECT, Block, CallSite, FunctionModel, Instruction,
                               ObservedTarget, function_from_json, function_to_json)

    b = Block(0x10, 2, (Instruction(0x10, 2, "call", "rax"),))
    site = CallSite(0x10, 0x10, CALL_INDIRECT, None, None, observed=(
        ObservedTarget(0x40, "f", 3), ObservedTarget(None, "labs (libc.so.6)", 1)))
    fn = FunctionModel("g", 0x10, (b,), (), 0x10, (0x10,), (), (site,), (), ((0x10,),), 1)
    back = function_from_json(function_to_json(fn, disassembly=True))
    assert back.calls == fn.calls
    assert back.calls[0].observed_internal == (0x40,)


def test_dispatch_trace_mode_follows_indirect_calls():
    """Trace mode: the block trace passes the trace check (a call through a pointer into
    a relocated function is a call, its return lands on the fall-through), and its counts
    are the counter mode's."""
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.loader import load_binary

    tg, make_args = _dispatch_case()
    if not os.path.exists(tg.binary):
        pytest.skip(f"{tg.binary} is not built (make -C samples)")
    bm, fns, results, harness, packs, _obs = _count_twice(
        tg.binary, "dispatch_run", tg.prototype, tg.cdef, make_args, 10)
    root = bm.function("dispatch_run")
    site = next(c for c in root.calls if c.observed and not c.tail
                and any(t.address is not None for t in c.observed))
    after = next(d for s, d in root.edges if s == site.block)
    with InstrumentedCopy(load_binary(tg.binary), fns, trace=True) as copy:
        counter = Counter(copy, root.name, harness, call_name="dispatch_run")
        for i, pack in enumerate(packs):
            r = counter.count(i, pack)
            for f in fns:
                assert (r.counts[f.name] == results[i].counts[f.name]).all()
            k = root.block_addresses.index(site.block)
            # every call through the site returned to its fall-through
            assert r.edges[root.name].get((site.block, after), 0) == int(r.counts[root.name][k])


@pytest.mark.slow
def _dispatch_target(tmp_path, inputs: int):
    """A copy of the dispatch target with ``inputs`` inputs, its binary the built one."""
    import shutil

    tg, _ = _dispatch_case()
    if not os.path.exists(tg.binary):
        pytest.skip(f"{tg.binary} is not built (make -C samples)")
    d = tmp_path / "dispatch"
    d.mkdir()
    shutil.copy(DISPATCH / "inputs.py", d)
    toml = (DISPATCH / "wcetfit.toml").read_text().replace(
        'binary = "build/libdispatch.so"', f'binary = "{tg.binary}"').replace(
        "inputs = 300", f"inputs = {inputs}")
    (d / "wcetfit.toml").write_text(toml)
    return d


def test_count_command_follows_indirect_calls_and_keeps_them(tmp_path):
    """`wcetfit count` on a copy of the dispatch target: the first run records the
    targets, the second (in the same command) counts op_* and fin_* as callees and says
    so per site; a later command builds its model with the stored targets at once and
    counts nothing again."""
    import subprocess

    d = _dispatch_target(tmp_path, 24)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def count():
        return subprocess.run([sys.executable, "-m", "wcetfit", "count", str(d)],
                              capture_output=True, text=True, env=env, timeout=600)

    first = count()
    assert first.returncode == 0, first.stderr[-2000:]
    assert "24 inputs counted" in first.stdout
    for name in ("op_add", "op_mix", "fin_even", "fin_odd"):
        assert f"  {name}: " in first.stdout, first.stdout
    assert "indirect call at 0x" in first.stdout and "observed on" in first.stdout
    assert "indirect tail call at 0x" in first.stdout
    assert "(libc.so.6)" in first.stdout and "stays in the calling block" in first.stdout
    # counting again for the callees found is the expected course, not a warning (a new
    # user's first run printed "stored counts … have another block layout" per round)
    assert "WARNING" not in first.stderr, first.stderr[-2000:]
    second = count()
    assert second.returncode == 0, second.stderr[-2000:]
    assert "another block layout" not in second.stderr     # the stored targets were used
    assert [ln for ln in second.stdout.splitlines() if "indirect" in ln] == \
        [ln for ln in first.stdout.splitlines() if "indirect" in ln]


def test_counts_older_than_the_indirect_targets_name_them_for_the_bound(tmp_path):
    """Counts taken without following indirect calls (run_counts alone), then a session
    whose model has the observed targets as callees: the bound is refused naming those
    callees and what to do, not "no cost for 1 reachable block" of the first one."""

    from wcetfit import pipeline
    from wcetfit.count.run import run_counts
    from wcetfit.errors import WcetError
    from wcetfit.timing.run import run_times

    d = _dispatch_target(tmp_path, 16)
    s = pipeline.open_session(str(d))
    root = s.target.functions[0]
    run_counts(s.target, s.store, s.model, [root])
    run_times(s.target, s.store, s.roots)
    s.store.lock.release()
    later = pipeline.open_session(str(d))      # its model has the observed targets
    a = pipeline.analyze_stage(later, root, *pipeline.stored_measurements(later, root))
    assert isinstance(a.wcet, WcetError)
    msg = str(a.wcet)
    assert "op_add" in msg and "not in its stored counts" in msg and "count again" in msg
