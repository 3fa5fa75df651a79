"""Timing probes on the original code (wcetfit.split.placement, .stubs, .install,
wcetfit.split.probe_run).

Truth used here: capstone's decoding of every stub byte (and its flag-effect tables);
hand-written assembly whose block shapes are known; the original function's return
value and memory (differential check); the count run's block trace (which blocks a call
reaches); the TSC's own order (a stop reading lies between the start and stop readings).
"""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_relocate import ElfInfo, build_so, mini_model  # noqa: E402

from wcetfit.split import placement as PM, stubs as SB, install as IN  # noqa: E402
from wcetfit.split import configs as CF  # noqa: E402
from wcetfit.errors import SelfCheckError  # noqa: E402


def _native_or_skip():
    try:
        IN.native_lib()
    except Exception as exc:  # NativeBuildError: module not rebuilt yet
        pytest.skip(f"wcetfit._native lacks the probe loop ({exc}); run `make setup`")


# ============================================================================================
# hand-written assembly with known block shapes
# ============================================================================================

ASM = r"""
    .text
    .globl shapes
    .type shapes, @function
shapes:                         # block A (entry): 6 bytes
    mov     ecx, edi
    test    ecx, ecx
    je      .Lzero
    mov     eax, 1              # block B: 5 + 2 + 2 bytes, falls in only from A
    add     eax, ecx
    jmp     .Lend
.Lzero:                         # block C: a jump target, 2 bytes, falls into D
    xor     eax, eax
.Lend:                          # block D: a jump target, 1 byte
    ret
    .size shapes, .-shapes
"""


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    path = build_so(tmp_path_factory.mktemp("shapes"),
                    {"shapes.S": ".intel_syntax noprefix\n" + ASM}, name="shapes")
    info = ElfInfo(path)
    fn = mini_model(info, "shapes")
    starts = [b.address for b in fn.blocks]
    assert [b.size for b in fn.blocks] == [6, 9, 2, 1], "assembler produced other shapes"
    return path, info, fn, starts


def test_placement_rules_on_known_shapes(shapes):
    _path, info, fn, (a, b, c, d) = shapes
    lay = PM.place_probe(fn, CF.KIND_STOP, a, info.read)
    assert lay.probe.mechanism == CF.MECH_DIRECT and lay.regions[0].size == 6
    lay = PM.place_probe(fn, CF.KIND_STOP, b, info.read)
    assert lay.probe.mechanism == CF.MECH_DIRECT and lay.regions[0].size == 5
    # C: 2 bytes, then D is a jump target: never patched across; probed on its edge from A
    lay = PM.place_probe(fn, CF.KIND_STOP, c, info.read)
    assert lay.probe.mechanism == CF.MECH_EDGE and lay.probe.pass_blocks == (a,)
    (r,) = lay.regions
    assert (r.start, r.end, r.edge_to) == (a, a + 6, c)
    # D: 1 byte; its predecessor C is itself a 2-byte jump target: nothing can be patched
    with pytest.raises(PM.ProbePlacementError, match="jump target"):
        PM.place_probe(fn, CF.KIND_STOP, d, info.read)
    # a split point inside B, at `add eax, ecx`: 4 bytes to B's end, D after it: refused
    with pytest.raises(PM.ProbePlacementError):
        PM.place_probe(fn, CF.KIND_STOP, b + 5, info.read, edges=False)
    ok, bad = PM.placements({"shapes": fn}, "shapes", [a, b, c, d], [], info.read)
    assert f"stop@{d:#x}" in bad and f"start@{d:#x}" in bad
    assert {f"stop@{x:#x}" for x in (a, b, c)} <= set(ok)
    assert {"stop@entry", "stop@return", "start@entry", "start@return"} <= set(ok)


def test_a_fall_through_only_boundary_may_be_crossed(tmp_path):
    asm = r"""
    .text
    .globl two
    .type two, @function
two:
    test    edi, edi            # A: 4 bytes
    jne     .Lskip
    inc     eax                 # B: 2 bytes, entered only by falling through from A
    add     eax, 7              # (still B)
.Lskip:
    ret
    .size two, .-two
"""
    path = build_so(tmp_path, {"two.S": ".intel_syntax noprefix\n" + asm}, name="two")
    info = ElfInfo(path)
    fn = mini_model(info, "two")
    a = fn.entry
    lay = PM.place_probe(fn, CF.KIND_STOP, a, info.read)
    (r,) = lay.regions
    assert r.start == a and r.end > a + 4          # continues into B
    assert any(i.address >= a + 4 for i in r.insns)


# ============================================================================================
# stub bytes, decoded
# ============================================================================================

CODE, DATA, BIAS = 0x7F00_0000_0000, 0x7F00_0000_4000, 0x7EFF_F000_0000


def _decode(code: bytes, at: int):
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    out = list(md.disasm(code, at))
    assert sum(i.size for i in out) == len(code), "stub bytes do not decode completely"
    return out


def _rip(i) -> int:
    from capstone import x86_const as X
    for op in i.operands:
        if op.type == X.X86_OP_MEM and op.mem.base == X.X86_REG_RIP:
            return i.address + i.size + op.mem.disp
    raise AssertionError(f"{i.mnemonic} {i.op_str} has no RIP-relative operand")


def _flag_writers(insns):
    from capstone import x86_const as X
    masks = [getattr(X, n) for n in dir(X) if n.startswith("X86_EFLAGS_") and
             any(k in n for k in ("MODIFY", "SET_", "RESET", "UNDEFINED"))]
    return [i for i in insns if any(i.eflags & m for m in masks)]


@pytest.mark.parametrize("method", SB.STUB_METHODS)
@pytest.mark.parametrize("kind", CF.KINDS)
def test_wrapper_and_direct_stub_decode_as_intended(shapes, kind, method):
    _path, info, fn, (a, b, c, d) = shapes
    lay = PM.place_probe(fn, kind, b, info.read)
    FN = BIAS + fn.entry
    built = SB.assemble(lay, method, bias=BIAS, fn_entry=FN, code_address=CODE,
                        data_address=DATA)
    ins = _decode(built.code, CODE)
    m = [i.mnemonic for i in ins]
    # the wrapper: pop the return address, call F, push it back, return
    assert m[:4] == ["pop", "call", "push", "ret"]
    assert _rip(ins[0]) == DATA + SB.OFF_SAVED == _rip(ins[2])
    assert ins[1].operands[0].imm == FN
    # the patch: a jmp from B to the region's dispatch jump, INT3 over the rest
    (at, original, patch) = built.patches[0]
    assert at == b + BIAS and original == info.read(b, 5)
    j = _decode(patch, at)
    assert j[0].mnemonic == "jmp" and j[0].operands[0].imm == CODE + 6 + 5 + 6 + 1
    disp = ins[4]
    assert disp.address == j[0].operands[0].imm and disp.mnemonic == "jmp"
    if kind == "stop":
        # a direct jump to the reading path (no indirect jump before a stop reading);
        # the slot holds where the reading is stored: the state, before every call
        read_at = disp.operands[0].imm
        assert built.slots_armed == [DATA]
    else:
        # an indirect dispatch through slot 0, armed with the reading path
        assert _rip(disp) == DATA + SB.OFF_SLOT
        read_at = built.slots_armed[0]
    # the continuation: B's displaced `mov eax, 1`, then back to B + 5
    assert (ins[5].mnemonic, ins[5].op_str) == ("mov", "eax, 1")
    assert ins[6].mnemonic == "jmp" and ins[6].operands[0].imm == b + 5 + BIAS
    # the reading path: writes no flag, stays below the red zone
    read = [i for i in ins if i.address >= read_at]
    assert read[0].address == read_at
    assert (read[0].mnemonic, read[0].op_str) == ("lea", "rsp, [rsp - 0x80]")
    assert not _flag_writers(read), [f"{i.mnemonic} {i.op_str}" for i in _flag_writers(read)]
    rm = [i.mnemonic for i in read]
    tsc = [x for x in rm if x in ("rdtsc", "rdtscp", "lfence", "mfence", "cpuid")]
    want = {("stop", "lfence"): ["rdtscp", "lfence"],
            ("start", "lfence"): ["rdtscp", "lfence", "rdtsc", "lfence"],
            ("stop", "mfence"): ["mfence", "rdtscp", "lfence"],
            ("start", "mfence"): ["rdtscp", "mfence", "lfence", "rdtsc", "lfence"],
            ("stop", "rdtscp"): ["rdtscp"], ("start", "rdtscp"): ["rdtscp"],
            ("stop", "cpuid"): ["rdtscp", "cpuid"],
            ("start", "cpuid"): ["rdtscp", "cpuid", "rdtsc"]}[(kind, method)]
    assert tsc == want
    # a start probe's slot is redirected to the continuation before its reading; a stop
    # probe's store destination to the scratch area after it (later readings: untimed)
    redirect = next(k for k, i in enumerate(read) if i.mnemonic == "mov"
                    and i.op_str.startswith("qword ptr [rip") and _rip(i) == DATA + SB.OFF_SLOT)
    first_tsc = next(k for k, i in enumerate(read) if i.mnemonic in ("rdtsc", "rdtscp"))
    last_tsc = max(k for k, i in enumerate(read) if i.mnemonic in ("rdtsc", "rdtscp"))
    if kind == "start":
        assert _rip(read[redirect - 1]) == ins[5].address      # lea rax, [cont]
        assert redirect < first_tsc
    else:
        assert _rip(read[redirect - 1]) == DATA + SB.OFF_SCRATCH
        assert redirect > last_tsc
        # the reading goes where the slot points: mov rbx, [slot]; stores through rbx
        load = next(i for i in read if i.mnemonic == "mov" and i.op_str.startswith("rbx,"))
        assert _rip(load) == DATA + SB.OFF_SLOT
        stores = [i.op_str for i in read if i.op_str.startswith("dword ptr [rbx")]
        assert stores[:2] == ["dword ptr [rbx + 4], eax", "dword ptr [rbx + 8], edx"]
        assert "dword ptr [rbx], 1" in stores
    pushes = [i.op_str for i in read if i.mnemonic == "push"]
    pops = [i.op_str for i in read if i.mnemonic == "pop"]
    assert pushes == list(reversed(pops)) and {"rax", "rcx", "rdx"} <= set(pushes)
    assert ("rbx" in pushes) == (method == "cpuid" or kind == "stop")
    assert read[-2].op_str == "rsp, [rsp + 0x80]" and read[-1].mnemonic == "jmp"
    assert read[-1].operands[0].imm == ins[5].address


def test_edge_stub_redirects_only_the_transfer_to_the_probe_point(shapes):
    _path, info, fn, (a, b, c, d) = shapes
    lay = PM.place_probe(fn, CF.KIND_STOP, c, info.read)
    built = SB.assemble(lay, "lfence", bias=BIAS, fn_entry=BIAS + fn.entry, code_address=CODE,
                        data_address=DATA)
    ins = _decode(built.code, CODE)
    # region: mov ecx, edi; test ecx, ecx; je <check>; jmp B (fall-through); check; cont
    k = next(n for n, i in enumerate(ins) if i.mnemonic == "mov" and i.op_str == "ecx, edi")
    assert [i.mnemonic for i in ins[k:k + 6]] == ["mov", "test", "je", "jmp", "jmp", "jmp"]
    je, fall, check, cont = ins[k + 2], ins[k + 3], ins[k + 4], ins[k + 5]
    assert je.operands[0].imm == check.address
    assert fall.operands[0].imm == b + BIAS
    read = next(i for i in ins if i.address == check.operands[0].imm)   # stop: direct
    assert (read.mnemonic, read.op_str) == ("lea", "rsp, [rsp - 0x80]")
    assert cont.operands[0].imm == c + BIAS
    assert built.patches[0][0] == a + BIAS


# ============================================================================================
# live probes on real code
# ============================================================================================

WORK_C = r"""
static int calls;
__attribute__((noinline)) int twice(int x) { calls++; return 2 * x + calls % 3; }

int work(const int *v, int n, int *out)
{
    int s = 0;
    for (int i = 0; i < n; i++) {
        if (v[i] & 1)
            s += v[i] * 3;
        else if (v[i] < 0)
            s ^= twice(v[i]);
        else
            s -= v[i];
        out[i] = s;
    }
    return s + calls;
}
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    _native_or_skip()
    from test_relocate import models_for

    from wcetfit.loader import load_binary
    from wcetfit.timing.thunk import build_harness

    path = build_so(tmp_path_factory.mktemp("work"), {"work.c": WORK_C}, name="work")
    models = models_for(path, ["work"])
    lb = load_binary(path)
    h = build_harness("int work(const int *v, int n, int *out);")
    return path, models, lb, h


def _inputs(h, n_inputs=25, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(n_inputs):
        n = int(rng.integers(0, 24)) if i else 0
        vals = rng.integers(-50, 50, max(n, 1)).tolist()
        yield i, h.pack("work", (h.ffi.new("int[]", vals), n, h.ffi.new("int[]", max(n, 1))))


def _reached(models, lb, h, fn_name, packs):
    """Ground truth: which blocks each input's call reaches, from the count run's trace."""
    from wcetfit.count.instrumented import InstrumentedCopy
    from wcetfit.count.relocate import closure

    fns = closure(models, [fn_name])
    with InstrumentedCopy(lb, fns, trace=True) as copy:
        names = copy.plan.id_names()
        out = {}
        for i, pack in packs:
            h.call(fn_name, copy.entry(fn_name), pack)
            tr = copy.trace()
            out[i] = {names[k][1] for k in np.unique(tr)}
            copy.reset()
    return out


def test_every_probe_keeps_the_result_and_reads_between_the_readings(live):
    path, models, lb, h = live
    fn = models["work"]
    info = ElfInfo(path)
    packs = list(_inputs(h))
    reached = _reached(models, lb, h, "work", packs)
    points = [b.address for f in models.values() for b in f.blocks]
    ok, bad = PM.placements(models, "work", points, [], info.read)
    assert len(ok) >= len(points), f"too few probes placed: {bad}"
    data = IN.WritableData(lb)
    original = lb.runtime(fn.entry)
    code_before = lb.read(fn.address, max(b.end for b in fn.blocks) - fn.address)
    mechanisms = set()
    for key, lay in sorted(ok.items()):
        mechanisms.add(lay.probe.mechanism)
        with IN.InstalledProbe(lb, lay, fn.entry, "lfence") as ip:
            # nothing but the patched regions changed: no other block can enter a stub
            now = lb.read(fn.address, len(code_before))
            changed = [k for k in range(len(now)) if now[k] != code_before[k]]
            allowed = set()
            for r in lay.regions:
                allowed |= set(range(r.start - fn.address, r.end - fn.address))
            assert set(changed) <= allowed, key
            for i, pack in packs:
                table = IN.RestoreTable(h, pack)
                IN.differential_check(ip, h, "work", pack, original, data, i)
                s = ip.time(h, "work", pack, table, repeats=4, warmup=1)
                if lay.probe.site == CF.SITE_BLOCK:
                    expect = lay.probe.address in reached[i]
                else:
                    expect = True
                assert (s.fired == 4) == expect and (s.fired == 0) == (not expect), \
                    (key, i, s.fired)
                good = ~np.isnan(s.ticks)
                assert good.sum() == s.fired - s.migrated
                # the probe's reading lies between the start and the stop readings
                assert np.all(s.ticks[good] >= 0), key
                assert np.all(s.ticks[good] <= s.whole[good]), key
        assert lb.read(fn.address, len(code_before)) == code_before, f"{key}: not restored"
    assert CF.MECH_DIRECT in mechanisms and CF.MECH_WRAPPER in mechanisms


def test_a_stop_probe_reads_once_and_a_start_probe_lets_later_arrivals_through(live):
    path, models, lb, h = live
    fn = models["work"]
    info = ElfInfo(path)
    loop_block = max(fn.blocks, key=lambda b: sum(1 for s, d in fn.edges if d == b.address))
    for kind in CF.KINDS:
        try:
            lay = PM.place_probe(fn, kind, loop_block.address, info.read)
        except PM.ProbePlacementError:
            pytest.skip(f"{loop_block.address:#x} cannot be probed on this compiler's code")
        with IN.InstalledProbe(lb, lay, fn.entry, "lfence") as ip:
            _i, pack = list(_inputs(h, 3, seed=5))[-1]
            ip.arm()
            h.call("work", ip.wrapper, pack)
            first = ip.reading()
            assert ip.fired() and first > 0
            # the slots now point past the reading: another call without re-arming
            # reads nothing
            ctypes.memset(ip.data_address + SB.OFF_LO, 0, 8)
            h.call("work", ip.wrapper, pack)
            assert ip.reading() == 0


def test_the_differential_check_catches_a_wrong_probe(shapes):
    _native_or_skip()
    from wcetfit.loader import load_binary
    from wcetfit.timing.thunk import build_harness

    path, info, fn, (a, b, c, d) = shapes
    lb = load_binary(path)
    h = build_harness("int shapes(int x);")
    lay = PM.place_probe(fn, CF.KIND_STOP, b, info.read)
    (r,) = lay.regions
    assert r.insns[0].text == "mov eax, 1"
    data = IN.WritableData(lb)
    good = IN.InstalledProbe(lb, lay, fn.entry, "lfence")
    with good:
        for x in (0, 3, -7):
            IN.differential_check(good, h, "shapes", h.pack("shapes", (x,)),
                                  lb.runtime(fn.entry), data, x)
    # sabotage: the stub forgets the displaced `mov eax, 1` (and still resumes after it)
    broken = PM.ProbeLayout(lay.probe, lay.function,
                            (PM.Region(r.start, r.end, (), True, None, r.pass_block),))
    bad = IN.InstalledProbe(lb, broken, fn.entry, "lfence")
    bad.patches = [(at, b"".join(i.raw for i in r.insns), patch)
                   for at, _orig, patch in bad.patches]
    with bad:
        with pytest.raises(SelfCheckError, match="returned"):
            for x in (3, 5, 11):
                IN.differential_check(bad, h, "shapes", h.pack("shapes", (x,)),
                                      lb.runtime(fn.entry), data, x)
    assert lb.read(r.start, r.size) == b"".join(x.raw for x in r.insns)


# ============================================================================================
# the isolated round worker on a target
# ============================================================================================

def test_measure_round_on_a_target(live, tmp_path):
    from wcetfit.split.probe_run import measure_round
    from wcetfit.target import load_target

    path, models, lb, h = live
    fn = models["work"]
    info = ElfInfo(path)
    (tmp_path / "inputs.py").write_text(
        "def generate(ctx):\n"
        "    n = int(ctx.rng.integers(0, 20))\n"
        "    v = ctx.rng.integers(-40, 40, max(n, 1)).tolist()\n"
        "    return (ctx.ffi.new('int[]', v), n, ctx.ffi.new('int[]', max(n, 1)))\n")
    (tmp_path / "wcetfit.toml").write_text(
        f'binary = "{path}"\nfunctions = ["work"]\n'
        'prototype = "int work(const int *v, int n, int *out);"\ninputs = "inputs.py"\n'
        "[measure]\ninputs = 12\nrepeats = 3\nwarmup = 1\n")
    target = load_target(str(tmp_path))
    lays = [PM.place_probe(fn, CF.KIND_STOP, None, info.read, site=CF.SITE_ENTRY),
            PM.place_probe(fn, CF.KIND_START, fn.entry, info.read),
            PM.place_probe(fn, CF.KIND_STOP, None, info.read, site=CF.SITE_RETURN)]
    run = measure_round(target, "work", fn.entry, lays, [range(12), range(0, 12, 2), range(12)],
                        method="lfence", whole=range(12))
    assert [p.times.probe.key for p in run.probes] == [lay.probe.key for lay in lays]
    assert list(run.probes[1].times.indices) == list(range(0, 12, 2))
    assert run.whole_ticks.shape == (12, 3) and list(run.whole_indices) == list(range(12))
    for p in run.probes:
        assert p.times.ticks.shape == (len(p.times.indices), 3)
        assert p.fired + p.migrated == p.times.ticks.size
    assert not run.failures
