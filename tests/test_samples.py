"""The bundled samples compute what they claim, at -O2 and at -O0.

Each sample's function is called through cffi's ABI mode (ffi.dlopen on the built
shared object) with arguments from the sample's own inputs.py and compared with an
independent reference: zlib for crc, sorted() for isort, numpy for matmul and fir, a
regular-expression lexer for statemachine, Python models for chain, calls and adpcm
(whose codes are also checked by decoding them).  Then the compiled shape the
samples exist for is checked with objdump: the jump table, the multiply chains, the
calls, and that every [loops] key in a wcetfit.toml names a loop header.

Needs `make -C samples` (done by `make setup`/`make test`); skips otherwise.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import re
import shutil
import subprocess
import tomllib
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

cffi = pytest.importorskip("cffi")

SAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "samples")
SAMPLES = ["adpcm", "crc", "isort", "bsearch", "fir", "matmul", "statemachine", "calls",
           "chain", "dispatch"]
LEVELS = ["O2", "O0"]
N_INPUTS = 40          # inputs drawn per sample and level (indices 9, 19, ... are the slow ones)
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


# --- loading a sample the way wcetfit does ----------------------------------------------

def _config(name):
    with open(os.path.join(SAMPLES_DIR, name, "wcetfit.toml"), "rb") as f:
        return tomllib.load(f)


def _library_path(name, level):
    cfg = _config(name)
    path = os.path.join(SAMPLES_DIR, name, cfg["binary"])
    if level == "O0":
        path = path.replace(".so", "-O0.so")
    if not os.path.exists(path):
        pytest.skip(f"{path} not built: run `make -C samples`")
    return path


class Sample:
    """One sample's function at one optimisation level, and its input generator."""

    def __init__(self, name, level):
        cfg = _config(name)
        self.name = name
        self.ffi = cffi.FFI()
        self.ffi.cdef(cfg.get("cdef", "") + "\n" + cfg["prototype"])
        self.lib = self.ffi.dlopen(_library_path(name, level))
        self.function = getattr(self.lib, cfg["functions"][0])
        self.seed = cfg["measure"]["seed"]
        spec = importlib.util.spec_from_file_location(
            f"sample_inputs_{name}", os.path.join(SAMPLES_DIR, name, cfg["inputs"]))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.module = module

    def inputs(self, count=N_INPUTS):
        for index in range(count):
            # the same per-input generator wcetfit.target uses: default_rng([seed, index])
            ctx = SimpleNamespace(rng=np.random.default_rng([self.seed, index]), ffi=self.ffi,
                                  index=index, function=self.function.__name__)
            yield index, self.module.generate(ctx)


@pytest.fixture(params=LEVELS)
def level(request):
    return request.param


def _ints(ffi, cdata, n):
    return list(ffi.unpack(cdata, n)) if n else []


# --- crc, isort, bsearch, matmul, fir --------------------------------------------------

def test_crc_matches_zlib(level):
    s = Sample("crc", level)
    for _, (data, n) in s.inputs():
        expected = zlib.crc32(bytes(s.ffi.buffer(data, n)))
        assert s.function(data, n) == expected
    for text in (b"", b"a", b"123456789", bytes(range(256))):
        assert s.function(s.ffi.new("unsigned char[]", text), len(text)) == zlib.crc32(text)
    assert s.function(s.ffi.new("unsigned char[]", b"123456789"), 9) == 0xCBF43926


def test_isort_matches_sorted(level):
    s = Sample("isort", level)
    for _, (a, n) in s.inputs():
        before = _ints(s.ffi, a, len(a))
        s.function(a, n)
        after = _ints(s.ffi, a, len(a))
        assert after[:n] == sorted(before[:n])
        assert after[n:] == before[n:]          # nothing beyond n touched


def test_bsearch_matches_python(level):
    s = Sample("bsearch", level)
    outcomes = set()
    for _, (a, n, key) in s.inputs():
        values = _ints(s.ffi, a, n)
        got = s.function(a, n, key)
        i = bisect.bisect_left(values, key)
        present = i < n and values[i] == key
        assert got == (i if present else -1)      # the inputs' values are distinct
        outcomes.add(present)
    assert outcomes == {True, False}
    ffi = s.ffi
    assert s.function(ffi.new("int[]", [5]), 0, 5) == -1
    arr = ffi.new("int[]", [-7, -2, 0, 3, 9])
    assert [s.function(arr, 5, k) for k in (-7, -2, 0, 3, 9, -8, 1, 10)] == \
        [0, 1, 2, 3, 4, -1, -1, -1]


def test_matmul_matches_numpy(level):
    s = Sample("matmul", level)
    sizes = set()
    for _, (a, b, c, n) in s.inputs():
        s.function(a, b, c, n)
        if n == 0:
            continue
        A = np.array(_ints(s.ffi, a, n * n), dtype=np.int64).reshape(n, n)
        B = np.array(_ints(s.ffi, b, n * n), dtype=np.int64).reshape(n, n)
        C = np.array(_ints(s.ffi, c, n * n), dtype=np.int64).reshape(n, n)
        np.testing.assert_array_equal(C, A @ B)
        sizes.add(n)
    assert 16 in sizes and max(sizes) == 16      # the [loops] bounds in wcetfit.toml


def _fir_reference(x, h, n):
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    acc = np.convolve(np.asarray(x, np.int64), np.asarray(h, np.int64))[:n] >> 15
    return np.clip(acc, -32768, 32767)


def test_fir_matches_convolution(level):
    s = Sample("fir", level)
    saturated = {"high": 0, "low": 0}
    for _, (x, n, h, taps, y) in s.inputs():
        s.function(x, n, h, taps, y)
        xs, hs = _ints(s.ffi, x, n), _ints(s.ffi, h, taps)
        expected = _fir_reference(xs, hs, n)
        np.testing.assert_array_equal(np.array(_ints(s.ffi, y, n), dtype=np.int64), expected)
        if n:
            raw = np.convolve(np.asarray(xs, np.int64), np.asarray(hs, np.int64))[:n] >> 15
            saturated["high"] += int((raw > 32767).sum())
            saturated["low"] += int((raw < -32768).sum())
    assert saturated["high"] > 0 and saturated["low"] > 0, saturated


# --- chain -----------------------------------------------------------------------------

CHAIN_MULT = 0x9E3779B97F4A7C15


def _chain_reference(sel, x):
    for v in sel:
        x ^= v
        x = (x * pow(CHAIN_MULT, 8 << (v & 3), 1 << 64)) & M64
    return x


def test_chain_matches_model(level):
    s = Sample("chain", level)
    kinds = np.zeros(4, dtype=np.int64)
    for _, (sel, n, x) in s.inputs():
        values = bytes(s.ffi.buffer(sel, n))
        assert s.function(sel, n, x) == _chain_reference(values, x)
        kinds += np.bincount(np.frombuffer(values, np.uint8) & 3, minlength=4)
    assert (kinds > 0).all()


# --- calls -----------------------------------------------------------------------------

def _mix(x):
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def _tree_sum(t, i, depth):
    if i >= len(t) or t[i] < 0 or depth > 9:
        return 0
    return t[i] + _tree_sum(t, 2 * i + 1, depth + 1) + _tree_sum(t, 2 * i + 2, depth + 1)


def _gcd_steps(a, b):
    steps = 0
    while b:
        a, b = b, a % b
        steps += 1
    return (a * 64 + steps) & M32


def _calls_reference(data):
    if not data:
        return 0
    h = _tree_sum(data, 0, 1) & M32
    for i in range(0, len(data) - 1, 2):
        h = _mix(h ^ _gcd_steps(abs(data[i]), abs(data[i + 1])))
    return h


def test_calls_matches_model(level):
    s = Sample("calls", level)
    pruned = 0
    for _, (data, n, work) in s.inputs():
        values = _ints(s.ffi, data, n)
        assert s.function(data, n, work) == _calls_reference(values)
        assert _ints(s.ffi, work, n) == values                  # the memcpy
        pruned += sum(v < 0 for v in values)
    assert pruned > 0
    # the exported mixer, called directly, is the same function
    ffi = cffi.FFI()
    ffi.cdef("unsigned calls_mix(unsigned x);")
    lib = ffi.dlopen(_library_path("calls", level))
    assert [lib.calls_mix(v) for v in (0, 1, 12345, M32)] == [_mix(v) for v in (0, 1, 12345, M32)]


def test_calls_gcd_loop_bound_is_tight():
    # wcetfit.toml bounds gcd_steps' loop at 46 for any 32-bit operands: the largest
    # Fibonacci pair below 2**32 taken in the wrong order reaches it, nothing exceeds it.
    fib = [1, 1]
    while fib[-1] + fib[-2] < 2**32:
        fib.append(fib[-1] + fib[-2])
    assert _gcd_steps(fib[-2], fib[-1]) & 63 == 46
    rng = np.random.default_rng(0)
    worst = max(_gcd_steps(int(a), int(b)) & 63
                for a, b in rng.integers(0, 2**32, (2000, 2), dtype=np.uint64))
    assert worst <= 46


# --- statemachine ----------------------------------------------------------------------

_OPS = rb"+\-*/%<>=!&|^~;,:?(){}\[\]."
_BLANKS = rb" \t\r\n\x0b\x0c"
_LEXER = re.compile(
    rb"(?P<blank>[" + _BLANKS + rb"]+)"
    rb"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    rb"|(?P<number>[0-9]+(?:\.[0-9]*)?)"
    rb'|(?P<string>"(?:\\[\x00-\xff]|[^"\\])*(?:"|\\?\Z))'
    rb"|(?P<comment>#[^\n]*)"
    rb"|(?P<oper>[" + _OPS + rb"]=?)"
    rb'|(?P<error>[^A-Za-z0-9_"#' + _OPS + _BLANKS + rb"]+)")
_KIND = {"ident": 1, "number": 2, "string": 3, "comment": 4, "oper": 5, "error": 6}


def _lex_reference(data):
    h, pos, kinds = 0, 0, set()
    while pos < len(data):
        m = _LEXER.match(data, pos)
        assert m is not None and m.end() > pos, (data, pos)
        if m.lastgroup != "blank":
            length = min(m.end() - pos, 63)
            h = (h * 33 + (_KIND[m.lastgroup] << 6 | length)) & M32
            kinds.add(m.lastgroup)
        pos = m.end()
    return h, kinds


def test_statemachine_matches_regex_lexer(level):
    s = Sample("statemachine", level)
    seen = set()
    for _, (buf, n) in s.inputs():
        data = bytes(s.ffi.buffer(buf, n))
        expected, kinds = _lex_reference(data)
        assert s.function(buf, n) == expected
        seen |= kinds
    assert seen == set(_KIND)
    for text in (b"", b"x", b'"abc', b'"a\\', b"1.2.3", b"a+=b==c", b"# c\nx",
                 b"\x80\x81@ 7", b'"q\\"x" y', b".=.."):
        assert s.function(s.ffi.new("unsigned char[]", text), len(text)) == \
            _lex_reference(text)[0], text


# --- adpcm -----------------------------------------------------------------------------

IMA_STEPS = [
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55,
    60, 66, 73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307,
    337, 371, 408, 449, 494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411,
    1552, 1707, 1878, 2066, 2272, 2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358,
    5894, 6484, 7132, 7845, 8630, 9493, 10442, 11487, 12635, 13899, 15289, 16818, 18500,
    20350, 22385, 24623, 27086, 29794, 32767]
IMA_INDEX = [-1, -1, -1, -1, 2, 4, 6, 8]


def _ima_decode_step(code, pred, index):
    """The IMA decoder for one code: returns the new (prediction, index)."""
    step = IMA_STEPS[index]
    delta = step >> 3
    if code & 4:
        delta += step
    if code & 2:
        delta += step >> 1
    if code & 1:
        delta += step >> 2
    pred = pred - delta if code & 8 else pred + delta
    return max(-32768, min(32767, pred)), max(0, min(88, index + IMA_INDEX[code & 7]))


def _ima_encode(samples, pred, index, events):
    """Reference encoder: pick each code by successive approximation, as IMA specifies."""
    codes = []
    for x in samples:
        step, diff = IMA_STEPS[index], x - pred
        code = 8 if diff < 0 else 0
        diff = abs(diff)
        for bit, part in ((4, step), (2, step >> 1), (1, step >> 2)):
            if diff >= part:
                code |= bit
                diff -= part
        raw = pred + (-1 if code & 8 else 1) * (
            (step >> 3) + (step if code & 4 else 0) + (step >> 1 if code & 2 else 0)
            + (step >> 2 if code & 1 else 0))
        events["pred_high"] += raw > 32767
        events["pred_low"] += raw < -32768
        events["index_low"] += index + IMA_INDEX[code & 7] < 0
        events["index_high"] += index + IMA_INDEX[code & 7] > 88
        pred, index = _ima_decode_step(code, pred, index)
        codes.append(code)
    return codes, pred, index


def _unpack_nibbles(out, n):
    codes = []
    for byte in out[: (n + 1) // 2]:
        codes += [(byte >> 4) & 15, byte & 15]
    return codes[:n]


def test_adpcm_matches_reference_encoder_and_decodes(level):
    s = Sample("adpcm", level)
    events = dict.fromkeys(("pred_high", "pred_low", "index_low", "index_high"), 0)
    for _, (indata, outdata, n, state) in s.inputs():
        samples = _ints(s.ffi, indata, n)
        pred0, index0 = state.valprev, state.index[0]
        s.function(indata, outdata, n, state)
        codes = _unpack_nibbles(bytes(s.ffi.buffer(outdata, (n + 1) // 2)), n)
        expected, pred, index = _ima_encode(samples, pred0, index0, events)
        assert codes == expected
        if n % 2:                               # a half-filled last byte: low nibble 0
            assert bytes(s.ffi.buffer(outdata, (n + 1) // 2))[-1] & 15 == 0
        # decoding the codes from the initial state lands on the encoder's final state
        dp, di = pred0, index0
        for c in codes:
            dp, di = _ima_decode_step(c, dp, di)
        assert (state.valprev, state.index[0]) == (dp, di) == (pred, index)
    assert all(v > 0 for v in events.values()), events   # every clamp arm is exercised


def test_adpcm_tracks_a_smooth_signal():
    # sanity independent of the reference encoder: decoding follows the input closely
    s = Sample("adpcm", "O2")
    n = 2000
    x = (8000 * np.sin(np.arange(n) * 0.02)).astype(np.int16)
    indata, out = s.ffi.new("short[]", x.tolist()), s.ffi.new("char[]", n // 2)
    state = s.ffi.new("struct adpcm_state *")
    s.function(indata, out, n, state)
    pred, index, decoded = 0, 0, []
    for c in _unpack_nibbles(bytes(s.ffi.buffer(out)), n):
        pred, index = _ima_decode_step(c, pred, index)
        decoded.append(pred)
    err = np.abs(np.array(decoded[200:]) - x[200:].astype(int))
    assert err.max() < 400


def test_adpcm_pie_variant_runs():
    exe = os.path.join(SAMPLES_DIR, "adpcm", "build", "adpcm-pie")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} not built: run `make -C samples`")
    with open(exe, "rb") as f:
        header = f.read(18)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[16:18], "little") == 3  # ET_DYN
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    m = re.search(r"checksum ([0-9a-f]{8}), final valprev (-?\d+) index (\d+)", out)
    assert m, out
    # the driver's chirp, encoded by the reference
    phase, rate, pcm = 0, 40, []
    for _ in range(1024):
        phase, rate = phase + rate, rate + 3
        t = phase & 0xFFFF
        pcm.append((t if t < 0x8000 else 0xFFFF - t) * 2 - 0x8000)
    codes, pred, index = _ima_encode(pcm, 0, 0, dict.fromkeys(
        ("pred_high", "pred_low", "index_low", "index_high"), 0))
    checksum = 0
    for i in range(0, 1024, 2):
        checksum = (checksum * 31 + (codes[i] << 4 | codes[i + 1])) & M32
    assert (int(m.group(1), 16), int(m.group(2)), int(m.group(3))) == (checksum, pred, index)


# --- compiled shape (objdump) ------------------------------------------------------------

_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")


def _disassemble(path, function):
    """[(address, text)] of one function, as objdump prints it."""
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-w", path],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(rf"^([0-9a-f]+) <{re.escape(function)}>:\n(.*?)(?:\n\n|\Z)", out, re.M | re.S)
    assert m, f"{function} not found in {path}"
    insns = []
    for line in m.group(2).splitlines():
        im = _INSN.match(line)
        if im:
            insns.append((int(im.group(1), 16), im.group(2).strip()))
    return int(m.group(1), 16), insns


def test_statemachine_has_a_jump_table(level):
    _, insns = _disassemble(_library_path("statemachine", level), "sm_lex")
    indirect = [t for _, t in insns if re.match(r"(notrack\s+)?jmp\s+\*%", t)]
    assert indirect, "sm_lex has no indirect jump: the switch is not a jump table"


def test_chain_blocks_hold_intact_multiply_chains(level):
    _, insns = _disassemble(_library_path("chain", level), "chain_run")
    runs, current = [], 0
    for _, text in insns:
        if text.startswith("imul"):
            current += 1
        elif current:
            runs.append(current)
            current = 0
    assert sorted(runs) == [8, 16, 32, 64]


def test_calls_entry_makes_every_kind_of_call(level):
    path = _library_path("calls", level)
    _, insns = _disassemble(path, "calls_entry")
    targets = {re.sub(r".*<(.*)>", r"\1", t) for _, t in insns if t.startswith("call")}
    assert {"memcpy@plt", "calls_mix@plt", "tree_sum", "gcd_steps"} <= targets, targets
    _, insns = _disassemble(path, "tree_sum")
    assert any(t.startswith("call") and t.endswith("<tree_sum>") for _, t in insns)


_COND_JUMP = re.compile(r"^j(?!mp)[a-z]+\s+([0-9a-f]+)\b")
_JUMP = re.compile(r"^(?:bnd\s+)?jmp\s+([0-9a-f]+)\b")


def _loop_headers(path, function):
    """Offsets of the natural-loop headers of a function, from its objdump listing."""
    import networkx as nx
    start, insns = _disassemble(path, function)
    addrs = [a for a, _ in insns]
    inside = set(addrs)
    succ = {}
    for k, (a, text) in enumerate(insns):
        nxt = addrs[k + 1] if k + 1 < len(addrs) else None
        if m := _COND_JUMP.match(text):
            succ[a] = [int(m.group(1), 16), nxt]
        elif m := _JUMP.match(text):
            succ[a] = [int(m.group(1), 16)]
        elif text.startswith(("ret", "jmp", "notrack jmp", "hlt", "ud2")):
            succ[a] = []
        else:
            succ[a] = [nxt]
    g = nx.DiGraph()
    g.add_nodes_from(addrs)
    g.add_edges_from((a, b) for a, bs in succ.items() for b in bs if b in inside)
    dom = nx.immediate_dominators(g, start)

    def dominates(x, y):
        while True:
            if y == x:
                return True
            if dom.get(y, y) == y:
                return False
            y = dom[y]

    return {v - start for u, v in g.edges if u in dom and dominates(v, u)}


@pytest.mark.parametrize("name", SAMPLES)
def test_loop_bounds_name_loop_headers(name):
    # the offsets in [loops] are only right for the compiler they were read from
    loops = _config(name).get("loops", {})
    path = _library_path(name, "O2")
    for key in loops:
        function, offset = key.split("+")
        assert int(offset, 16) in _loop_headers(path, function), \
            f"{name}/wcetfit.toml: {key} is not a loop header in {path}"


# --- the target files ------------------------------------------------------------------

@pytest.mark.parametrize("name", SAMPLES)
def test_target_files_load(name):
    tg = pytest.importorskip("wcetfit.target")
    _library_path(name, "O2")
    target = tg.load_target(os.path.join(SAMPLES_DIR, name))
    assert len(target.functions) == 1
    generate = tg.load_inputs_module(target)
    ffi = cffi.FFI()
    ffi.cdef(target.cdef + "\n" + target.prototype)
    args = tg.generate_input(generate, target, ffi, target.functions[0], 0)
    assert isinstance(args, tuple) and args
