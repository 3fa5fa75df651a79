"""Per-activation timing (#15 item 1): probes at every timed function's entry and return,
the activation tree, exclusive rows.

Truth: the call structure known from the source of samples/actree (nested calls,
recursion, a callee called from three sites, a tail call, a function too short to
patch), the count run's per-block counts and activation counts (the instrumented copy),
and the unprobed original's results.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SAMPLE = os.path.join(ROOT, "samples", "actree")
LIBZ = "/lib/x86_64-linux-gnu/libz.so.1"


def _native_or_skip():
    try:
        from wcetfit.split.install import native_lib
        native_lib()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"wcetfit._native with the probe loop is not built: {exc}")


def _target(tmp, src_dir, binary, inputs, repeats):
    """A copy of a target directory whose binary is given by absolute path."""
    dst = os.path.join(tmp, "target")
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src_dir):
        if f.endswith((".py", ".toml")):
            shutil.copy(os.path.join(src_dir, f), dst)
    toml = os.path.join(dst, "wcetfit.toml")
    text = open(toml).read()
    lines = [ln for ln in text.splitlines() if not ln.startswith("binary")]
    lines.insert(0, f'binary = "{binary}"')
    open(toml, "w").write("\n".join(lines) + "\n")
    from wcetfit.pipeline import open_session
    return open_session(dst, inputs=inputs, repeats=repeats)


def _measure(session, root):
    from wcetfit.count.run import run_counts
    from wcetfit.split.activation_run import run_activations

    counts = run_counts(session.target, session.store, session.model, [root], trace=True)[root]
    acts = run_activations(session.target, session.store, session.model, root, warmup=1)
    return counts, acts


@pytest.fixture(scope="module")
def actree(tmp_path_factory):
    _native_or_skip()
    r = subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "samples")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"samples do not build: {r.stderr[-300:]}")
    lib = os.path.join(SAMPLE, "build", "libactree.so")
    s = _target(str(tmp_path_factory.mktemp("actree")), SAMPLE, lib, inputs=12, repeats=3)
    counts, acts = _measure(s, "actree_run")
    return s, counts, acts


def _expected_preorder(n: int, depth: int) -> list[tuple[str, int]]:
    """The timed activations of actree_run(v, n, depth) in preorder, from actree.c
    (twice is too short to patch: not timed)."""
    out = [("actree_run", 0), ("leaf_sum", 1), ("middle", 1), ("leaf_sum", 2),
           ("leaf_sum", 2)]

    def rec(d: int, level: int) -> None:
        out.append(("rec", level))
        if d > 0:
            rec(d - 1, level + 1)
            rec(d - 2, level + 1)

    rec(depth, 1)
    out.append(("tailer", 1))
    if n > 3:
        out.append(("leaf_sum", 2))            # the tail call: nested in tailer's window
    return out


def _depths(parent: np.ndarray) -> np.ndarray:
    d = np.zeros(len(parent), np.int64)
    for k, p in enumerate(parent):            # preorder: parents come first
        d[k] = 0 if p < 0 else d[p] + 1
    return d


def test_activation_tree_is_the_call_structure_of_the_source(actree):
    from wcetfit.target import generate_input, load_inputs_module
    from wcetfit.timing.thunk import build_harness

    s, _counts, a = actree
    assert a.untimed.keys() == {"twice"} and "4 bytes" in a.untimed["twice"]
    assert not a.failures, a.failures
    h = build_harness(s.target.prototype, s.target.cdef)
    gen = load_inputs_module(s.target)
    depth = _depths(a.parent)
    for i in a.indices:
        _v, n, dep = generate_input(gen, s.target, h.ffi, "actree_run", int(i))
        mine = np.flatnonzero(a.input_index == i)
        got = [(a.names[a.function[k]], int(depth[k])) for k in mine]
        assert got == _expected_preorder(n, dep), f"input {i}"
        # leaf_sum under middle: two call sites, different from the root's own call
        sites = {int(a.call_site[k]) for k in mine
                 if a.names[a.function[k]] == "leaf_sum" and depth[k] == 1}
        under_middle = {int(a.call_site[k]) for k in mine
                        if a.names[a.function[k]] == "leaf_sum"
                        and a.names[a.function[a.parent[k]]] == "middle"}
        assert len(sites) == 1 and len(under_middle) == 2 and not sites & under_middle


def test_exclusive_counts_sum_to_the_count_runs_counts(actree):
    _s, counts, a = actree
    n_ids = len(a.id_names)
    for k, i in enumerate(counts.indices):
        rows = np.flatnonzero(a.input_index == i)
        if not len(rows):
            continue
        sel = np.isin(a.cnt_row, rows)
        mine = np.bincount(a.cnt_id[sel], weights=a.cnt_val[sel], minlength=n_ids)
        theirs = np.concatenate([fc.counts[k] for fc in counts.functions])
        assert np.array_equal(mine.astype(np.int64), theirs), f"input {i}"
    # and per function through the fit's interface: its rows' columns and counts
    rows = a.rows()
    assert set(rows) == {"actree_run", "leaf_sum", "middle", "rec", "tailer"}
    r = rows["rec"]
    twice_cols = [j for j, (fn, _b) in enumerate(r.columns) if fn == "twice"]
    assert twice_cols, "twice (not timed) is charged to rec's rows"
    assert r.counts.shape == (len(r.ticks), len(r.columns))
    assert np.array_equal(r.children, [2 if c else 0 for c in
                                       np.asarray(r.counts[:, twice_cols].sum(axis=1)).ravel()
                                       == 0])


def test_inclusive_time_covers_the_childrens(actree):
    _s, _counts, a = actree
    incl = a.incl
    assert np.isfinite(incl).mean() > 0.9
    has = a.parent >= 0
    kids = np.zeros_like(incl)
    np.add.at(kids, a.parent[has], incl[has])
    ok = np.isfinite(incl)
    assert np.all(incl[ok] >= kids[ok])
    assert np.all(a.excl[ok] > 0)
    # the root's activation lies inside the loop's whole-call reading
    roots = np.flatnonzero(a.parent < 0)
    assert np.all((a.whole_probed >= incl[roots])[np.isfinite(incl[roots])])


def test_probed_calls_return_what_the_original_returns(actree):
    """In process: the probes installed, every input's result, argument memory and event
    count against the unprobed original (the run's own differential check does the
    same for every input; here it is checked not to be vacuous)."""
    from wcetfit.loader import WritableData, load_binary
    from wcetfit.split.activation_run import closure_of
    from wcetfit.split.actprobe import KIND_ENTRY, ActivationProbes, differential_check
    from wcetfit.target import generate_input, load_inputs_module
    from wcetfit.timing.thunk import build_harness

    s, _counts, a = actree
    cl = closure_of(s.target, s.model, "actree_run")
    lb = load_binary(s.target.binary)
    h = build_harness(s.target.prototype, s.target.cdef)
    gen = load_inputs_module(s.target)
    ids = {n: k for k, n in enumerate(cl.names)}
    orig = lb.runtime(s.model.function("actree_run").entry)
    with ActivationProbes(lb, cl.regions, ids) as p:
        for i in range(6):
            args = generate_input(gen, s.target, h.ffi, "actree_run", i)
            pack = h.pack("actree_run", args)
            ev = differential_check(p, h, "actree_run", orig, pack, 200, WritableData(lb), i)
            entries = int((ev["kind"] == KIND_ENTRY).sum())
            assert entries == len(_expected_preorder(args[1], args[2]))
            assert len(ev) == 2 * entries
    # patches removed: the original bytes are back
    for at, original, _patch in p.patches:
        import ctypes
        assert ctypes.string_at(at, len(original)) == original


def test_stored_rows_load_back(actree):
    from wcetfit.timing.activations import load_activation_rows

    s, _counts, a = actree
    rows = load_activation_rows(s.store, "actree_run", s.target.measure.seed, a.method,
                                a.incl.shape[1])
    assert rows is not None
    again = a.rows()
    for name, r in rows.items():
        assert r.columns == again[name].columns
        assert np.array_equal(r.counts.toarray(), again[name].counts.toarray())
        assert np.array_equal(np.isnan(r.ticks), np.isnan(again[name].ticks))


ZLIB_INPUTS = '''"""uncompress of 1-6 KiB of zlib data (Python's zlib, level 1-9)."""
import zlib


def generate(ctx):
    rng = ctx.rng
    n = int(rng.integers(1024, 6 * 1024))
    words = [b"alpha", b"beta", b"gamma", b"delta", b"\\x00\\x01", b"zz"]
    parts = [words[int(k)] for k in rng.integers(0, len(words), n // 3)]
    raw = (b"".join(parts) + bytes(rng.integers(0, 256, n // 8).tolist()))[:n]
    packed = zlib.compress(raw, int(rng.integers(1, 10)))
    dest_len = ctx.ffi.new("unsigned long *", len(raw))
    return (ctx.ffi.new("unsigned char[]", len(raw)), dest_len,
            ctx.ffi.new("unsigned char[]", packed), len(packed))
'''


@pytest.mark.slow
def test_zlib_uncompress_activations_match_the_count_run(tmp_path):
    if not os.path.exists(LIBZ):
        pytest.skip(f"{LIBZ} is absent")
    _native_or_skip()
    from wcetfit.count.flow import activations
    from wcetfit.count.relocate import plan_copy
    from wcetfit.count.run import relocatable_closures
    from wcetfit.loader import read_elf

    src = tmp_path / "src"
    src.mkdir()
    (src / "inputs.py").write_text(ZLIB_INPUTS)
    (src / "wcetfit.toml").write_text(
        f'binary = "{LIBZ}"\nfunctions = ["uncompress"]\n'
        'prototype = "int uncompress(unsigned char *dest, unsigned long *destLen, '
        'const unsigned char *source, unsigned long sourceLen);"\n'
        'inputs = "inputs.py"\n[measure]\ninputs = 6\nrepeats = 3\nseed = 5\n')
    s = _target(str(tmp_path), str(src), LIBZ, inputs=6, repeats=3)
    counts, a = _measure(s, "uncompress")
    assert len(a.indices) == 6, a.failures
    fns, _ = relocatable_closures(s.target, s.model, ["uncompress"], trace=True)["uncompress"]
    plan = plan_copy(fns, read_elf(LIBZ).read, trace=True)
    models = {f.name: f for f in fns}
    for k, i in enumerate(counts.indices):
        per = {fc.name: fc.counts[k] for fc in counts.functions}
        want = activations(models, plan, per, counts.functions[0].name)
        mine = np.bincount(a.function[a.input_index == i], minlength=len(a.names))
        for j, name in enumerate(a.names):
            if name in a.timed:
                assert mine[j] == want[name], f"input {i}: {name}"
    assert np.isfinite(a.incl).mean() > 0.9
    print("zlib uncompress:", {n: int((a.function == j).sum()) for j, n in enumerate(a.names)},
          "untimed:", a.untimed, file=sys.stderr)
