"""Block counts against an independent oracle: valgrind callgrind.

For each input, a small C driver generated here (from the target's prototype) calls the
original function under ``valgrind --tool=callgrind --dump-instr=yes``, with one dump per
input (``--dump-after`` a marker function the driver calls right before and right after
each call: the dump after holds the call alone).  The
oracle count of a block is the execution count (Ir) of its first instruction.  Our
counts come from the instrumented copy with the same argument bytes.  Equality must be
exact, for every block of every function reached, for every input.

Valgrind is slow (~100x), so each case uses a dozen inputs, chosen to include the
sample's slow input (index 9).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from driver_inputs import UnknownSizePointer, write_inputs  # noqa: E402
from test_relocate import models_for  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
LIBZ = "/lib/x86_64-linux-gnu/libz.so.1"
N_INPUTS = 12


def _need_tools():
    for tool in ("valgrind", "gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


# --- the driver ---------------------------------------------------------------------------

def _driver_source(prototype: str, cdef: str, function: str) -> tuple[str, list]:
    from wcetfit.timing.prototype import _C_PRELUDE, parse_signatures

    ffi, fns = parse_signatures(prototype, cdef)
    fctype = dict(fns)[function]
    args = list(fctype.args)
    lines = ["#define _GNU_SOURCE", "#include <dlfcn.h>", "#include <link.h>",
             "#include <stdlib.h>", _C_PRELUDE, cdef or "",
             f"typedef {ffi.getctype(fctype, 'wf_fn_t')};",
             "__attribute__((noinline)) void wf_oracle_mark(void)",
             '{ __asm__ volatile("" ::: "memory"); }',
             "static void rd(FILE *f, void *p, size_t n)",
             "{ if (n && fread(p, 1, n, f) != n) exit(3); }",
             "int main(int argc, char **argv)", "{",
             "    void *h = dlopen(argv[1], RTLD_NOW);",
             '    if (!h) { fprintf(stderr, "%s\\n", dlerror()); return 2; }',
             "    struct link_map *lm; dlinfo(h, RTLD_DI_LINKMAP, &lm);",
             '    printf("%lx\\n", (unsigned long)lm->l_addr); fflush(stdout);',
             "    wf_fn_t fn = (wf_fn_t)(lm->l_addr + strtoul(argv[3], 0, 16));",
             '    FILE *in = fopen(argv[2], "rb"); uint32_t n; rd(in, &n, 4);',
             '    FILE *offs = fopen(argv[4], "rb");',
             # Pass 0 calls the first input once, undumped: the warm-up call the count
             # run makes before its first input (a library's first-use initialisation,
             # OpenSSL's algorithm fetch, is then outside both).
             "    long start = ftell(in);",
             "    for (int pass = 0; pass < 2; pass++) {",
             "    fseek(in, start, SEEK_SET); fseek(offs, 0, SEEK_SET);",
             "    for (uint32_t i = 0; i < (pass ? n : 1); i++) {"]
    for k, t in enumerate(args):
        lines.append(f"        {ffi.getctype(t, f'a{k}')}; void *b{k} = 0; uint8_t k{k};")
        lines.append(f"        rd(in, &k{k}, 1);")
        if t.kind == "pointer":
            # The buffer at the same offset within its page as in the counting process:
            # string functions take other paths near a page end (and by alignment).
            lines.append(f"        if (k{k}) {{ uint64_t len; uint32_t off; rd(in, &len, 8); "
                         f"rd(offs, &off, 4); b{k} = aligned_alloc(4096, "
                         f"(len + off + 8191) / 4096 * 4096); rd(in, (char *)b{k} + off, len); "
                         f"a{k} = ({ffi.getctype(t)})((char *)b{k} + off); }}")
            lines.append(f"        else rd(in, &a{k}, sizeof a{k});")
        else:
            lines.append(f"        rd(in, &a{k}, sizeof a{k});")
    call = ", ".join(f"a{k}" for k in range(len(args)))
    # A dump right before and right after the call: the second holds the call alone,
    # not the driver's own fread/malloc/free (which, for libc, run the very functions
    # measured: memcpy inside fread, malloc for the buffers).
    lines += ["        if (pass) wf_oracle_mark();", f"        fn({call});",
              "        if (pass) wf_oracle_mark();"]
    lines += [f"        free(b{k});" for k in range(len(args))]
    lines += ["    }", "    }", "    return 0;", "}"]
    return "\n".join(lines) + "\n", args


# --- callgrind output -----------------------------------------------------------------------

def _parse_callgrind(path: Path, object_name: str) -> dict[int, int]:
    """Self Ir per instruction address of one object (summed over function contexts)."""
    costs: dict[int, int] = {}
    names: dict[str, str] = {}
    current_ob = None
    last = 0
    skip_next = False
    in_body = False
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith(("ob=", "cob=")):
            key, _, rest = line.partition("=")
            ident, _, name = rest.partition(" ")
            if name:
                names[ident] = name
            if key == "ob":
                current_ob = names.get(ident, ident)
            continue
        if "=" in line.split(" ", 1)[0]:
            if line.startswith("calls="):
                skip_next = True      # the next cost line is the call's inclusive cost
            in_body = True
            continue
        if ":" in line.split(" ", 1)[0] and not in_body:
            continue                  # header "key: value"
        if ":" in line.split(" ", 1)[0]:
            continue                  # summary/totals
        parts = line.split()
        pos = parts[0]
        if pos == "*":
            addr = last
        elif pos[0] in "+-":
            addr = last + int(pos, 16) if pos[1:].startswith("0x") else last + int(pos)
        else:
            addr = int(pos, 16) if pos.startswith("0x") else int(pos)
        last = addr
        if skip_next:
            skip_next = False
            continue
        if current_ob is not None and os.path.basename(current_ob) == object_name:
            costs[addr] = costs.get(addr, 0) + (int(parts[1]) if len(parts) > 1 else 0)
    return costs


class ValgrindCannotRun(Exception):
    """valgrind does not know an instruction of the code under test: on a CPU with
    AVX-512, glibc's IFUNCs select EVEX implementations that valgrind 3.19 cannot run
    (the count run, natively, can)."""


# What makes glibc select the implementations it selects without AVX-512 (AVX2 ones,
# which valgrind runs), for a comparison on a CPU whose own selection valgrind refuses.
NO_AVX512 = "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD"


def callgrind_oracle(tmp: Path, library: str, link_address: int, prototype: str, cdef: str,
                     function: str, harness, packs: list) -> list[dict[int, int]]:
    """Per input: link-time instruction address → execution count, from callgrind."""
    source, _args = _driver_source(prototype, cdef, function)
    (tmp / "driver.c").write_text(source)
    subprocess.run(["gcc", "-O1", "-o", str(tmp / "driver"), str(tmp / "driver.c"), "-ldl"],
                   check=True, capture_output=True, text=True)
    try:
        write_inputs(tmp / "inputs.bin", harness, function, packs)
    except UnknownSizePointer as exc:
        pytest.skip(str(exc))
    # Each pointer argument's offset within its page, as write_inputs lists them.
    offsets = bytearray()
    for pack in packs:
        addr = {b.arg: b.address for b in pack.buffers if b.arg is not None}
        for k in sorted(addr):
            offsets += (addr[k] % 4096).to_bytes(4, "little")
    (tmp / "offsets.bin").write_bytes(bytes(offsets))
    out = tmp / "cg.out"
    run = subprocess.run(
        # --skip-plt=no: by default callgrind books a PLT stub's instructions on the
        # instruction that jumped to it (a block's first instruction, sometimes).
        ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--dump-line=no", "--skip-plt=no",
         "--dump-after=wf_oracle_mark", f"--callgrind-out-file={out}",
         str(tmp / "driver"), library, str(tmp / "inputs.bin"), f"{link_address:x}",
         str(tmp / "offsets.bin")],
        capture_output=True, text=True, timeout=900)
    if run.returncode != 0 and "Unrecognised instruction" in run.stderr:
        raise ValgrindCannotRun(run.stderr[-1500:])
    assert run.returncode == 0, run.stderr[-2000:]
    bias = int(run.stdout.split()[0], 16)
    name = os.path.basename(os.path.realpath(library))
    per_input = []
    for i in range(len(packs)):
        costs = _parse_callgrind(Path(f"{out}.{2 * i + 2}"), name)   # the call's own dump
        # callgrind reports addresses of a PIC object minus its load bias (link-time);
        # accept runtime addresses too, in case a version reports those.
        if costs and bias and min(costs) >= bias:
            costs = {a - bias: c for a, c in costs.items()}
        per_input.append(costs)
    return per_input


# --- the comparison ---------------------------------------------------------------------------

def _first_counted(block) -> int | None:
    """The block's first instruction valgrind counts once per execution (REP string
    instructions count once per iteration); None for a block of REP instructions only
    (memset's ``rep stosb``), which callgrind cannot count by executions."""
    for insn in block.instructions:
        if not insn.mnemonic.startswith("rep"):
            return insn.address
    return None if block.instructions else block.address


def compare_with_oracle(tmp: Path, library: str, roots: list[str], prototype: str, cdef: str,
                        make_args, n_inputs: int = N_INPUTS, only_root: bool = False) -> int:
    """Compare every block of every function reached (``only_root``: of the measured
    function alone, for callees whose paths depend on process state the driver cannot
    reproduce, such as malloc's heap); returns the (block, input) pairs compared."""
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.loader import load_binary
    from wcetfit.count.relocate import relocatable_closure
    from wcetfit.timing.thunk import build_harness

    _need_tools()
    harness = build_harness(prototype, cdef)
    try:
        from wcetfit.static import binary
        bm = binary.load_model(library, list(roots), with_callees=True)
        models, function = dict(bm.functions), bm.function(roots[0]).name
    except ImportError:
        models = models_for(library, roots)
        function = roots[0]
    lb = load_binary(library)
    # Callees the copy cannot make run as original code: not compared (their time stays
    # in the calling block, as the count run says in a warning).
    fns, _skipped = relocatable_closure(models, [function], lb.read)
    packs = [harness.pack(roots[0], make_args(harness.ffi, i)) for i in range(n_inputs)]
    ours = []
    with InstrumentedCopy(lb, fns) as copy:
        counter = Counter(copy, function, harness, call_name=roots[0])
        for i, pack in enumerate(packs):
            ours.append(counter.count(i, pack).counts)
    oracle = callgrind_oracle(tmp, library, models[function].entry, prototype, cdef, roots[0],
                              harness, packs)
    checked = 0
    for i in range(n_inputs):
        for f in fns:
            if only_root and f.name != function:
                continue
            for b, ours_n in zip(f.blocks, ours[i][f.name].tolist()):
                at = _first_counted(b)
                if at is None:
                    continue
                want = oracle[i].get(at, 0)
                assert ours_n == want, (f"input {i}: {f.name} block {b.address:#x}: "
                                        f"instrumented copy {ours_n}, callgrind {want}")
                checked += 1
    assert any(int(np.sum(ours[i][function])) for i in range(n_inputs))
    return checked


def _sample_case(name: str):
    from wcetfit import target as T

    tdir = SAMPLES / name
    if not (tdir / "wcetfit.toml").is_file():
        pytest.skip(f"sample {name} is absent")
    try:
        tg = T.load_target(str(tdir))
    except Exception as exc:  # noqa: BLE001 - unbuilt samples
        pytest.skip(f"sample {name}: {exc}")
    gen = T.load_inputs_module(tg)

    def make_args(ffi, i):
        return T.generate_input(gen, tg, ffi, tg.functions[0], i)

    return tg, make_args


SAMPLE_NAMES = ["adpcm", "crc", "isort", "bsearch", "fir", "matmul", "statemachine", "calls",
                "chain"]


@pytest.mark.parametrize("opt", ["", "-O0"])
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_counts_equal_callgrind(tmp_path, name, opt):
    tg, make_args = _sample_case(name)
    lib = tg.binary.replace(f"lib{name}.so", f"lib{name}{opt}.so")
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is not built (make -C samples)")
    checked = compare_with_oracle(tmp_path, lib, list(tg.functions), tg.prototype, tg.cdef,
                                  make_args)
    assert checked > 0


@pytest.mark.parametrize("function", ["adler32", "crc32"])
def test_zlib_counts_equal_callgrind(tmp_path, function):
    """A third-party library: zlib's checksum, a tail call through zlib's own PLT into
    adler32_z / crc32_z (relocated and counted too)."""
    if not os.path.exists(LIBZ):
        pytest.skip(f"{LIBZ} is absent")
    proto = f"unsigned long {function}(unsigned long crc, const unsigned char *buf, unsigned int len);"

    def make_args(ffi, i):
        rng = np.random.default_rng([7, i])
        n = int(rng.integers(0, 6000)) if i % 4 else [0, 1, 15, 5553][i // 4 % 4]
        data = rng.integers(0, 256, max(n, 1)).astype(np.uint8).tobytes()
        return (int(rng.integers(0, 2**32)), ffi.new("unsigned char[]", data), n)

    checked = compare_with_oracle(tmp_path, LIBZ, [function], proto, "", make_args)
    assert checked > N_INPUTS


LIBM = "/lib/x86_64-linux-gnu/libm.so.6"


@pytest.mark.parametrize("function", ["cbrt", "erf", "pow"])
def test_libm_counts_equal_callgrind(tmp_path, function):
    """The system math library: branchy range reduction, internal callees (cbrt), and
    SSE operands with RIP-relative constants."""
    if not os.path.exists(LIBM):
        pytest.skip(f"{LIBM} is absent")
    two = function == "pow"
    proto = (f"double {function}(double x, double y);" if two
             else f"double {function}(double x);")

    def make_args(ffi, i):
        rng = np.random.default_rng([11, i])
        specials = [0.0, -0.0, 1.0, float("inf"), float("nan"), 1e-310, -3.5, 1e300]
        x = specials[i] if i < len(specials) else float(rng.normal(0, 10 ** rng.integers(0, 6)))
        return (x, float(rng.normal(0, 3))) if two else (x,)

    checked = compare_with_oracle(tmp_path, LIBM, [function], proto, "", make_args,
                                  n_inputs=16)
    assert checked > 16


def test_oracle_parser_reads_relative_positions(tmp_path):
    """The callgrind parser itself, on a hand-written file: relative and repeated
    positions, a call's inclusive-cost line skipped, two function contexts summed."""
    text = """# callgrind format
version: 1
positions: instr
events: Ir

ob=(1) /x/libfoo.so
fl=(1) ???
fn=(1) f
0x1000 3
+2 3
+4 1
cfn=(2) g
calls=1 -6
* 50
+5 1
fn=(3) f'2
0x1000 2
ob=(2) /x/other.so
fn=(4) h
0x1000 99
totals: 9
"""
    p = tmp_path / "cg"
    p.write_text(text)
    assert _parse_callgrind(p, "libfoo.so") == {0x1000: 5, 0x1002: 3, 0x1006: 1, 0x100b: 1}
