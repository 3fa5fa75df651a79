"""Count-run figures: what counting costs, beside the two ways it is usually done.

* ``count.<sample>.instrumented_over_original``: the instrumented copy's call time over
  the original's, through the same timing harness (same inputs, pinned core, per-input
  median of repeats, ratio of the sums over the inputs).  Goal: median over the samples
  <= 1.5.
* ``count.<sample>.callgrind_over_native``: the same inputs through valgrind callgrind
  (the oracle of the tests), timed inside a small C driver around each call.
* ``count.<sample>.breakpoint_over_native``: a ptrace breakpoint counter (int3 at every
  block start; on each hit: count, restore the byte, single-step, re-arm) on one input
  of moderate size — it costs ~10^2 µs per hit, so only a few thousand hits are run.
  Its counts are checked against the instrumented copy's as a side effect.

* ``count.library.functions_equal_callgrind``: real library functions (the list of
  tests/test_count_library.py) whose counts equal callgrind's for every block and input.

Run alone: ``python -m bench.count [sample ...]``; the library oracle:
``python -m bench.count library [case id ...]``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.figures import ROOT, SAMPLES
from bench.figures import fig as _fig

N_INPUTS = 30
REPEATS = 15
BP_MAX_HITS = 4000




def _models(path: str, roots: list[str]) -> dict:
    from wcetfit.static import binary
    return dict(binary.load_model(path, roots, with_callees=True).functions)


# --- a native C driver: the same calls without Python, for valgrind and ptrace -------------

def _driver_source(prototype: str, cdef: str, function: str) -> str:
    from wcetfit.timing.prototype import _C_PRELUDE, parse_signatures

    ffi, fns = parse_signatures(prototype, cdef)
    fctype = dict(fns)[function]
    args = list(fctype.args)
    L = ["#define _GNU_SOURCE", "#include <dlfcn.h>", "#include <link.h>",
         "#include <signal.h>", "#include <stdlib.h>", "#include <time.h>", _C_PRELUDE,
         cdef or "", f"typedef {ffi.getctype(fctype, 'wf_fn_t')};",
         "static void rd(FILE *f, void *p, size_t n)",
         "{ if (n && fread(p, 1, n, f) != n) exit(3); }",
         "static long long now(void)",
         "{ struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);"
         " return t.tv_sec * 1000000000LL + t.tv_nsec; }",
         "int main(int argc, char **argv)", "{",
         "    void *h = dlopen(argv[1], RTLD_NOW);",
         '    if (!h) { fprintf(stderr, "%s\\n", dlerror()); return 2; }',
         "    struct link_map *lm; dlinfo(h, RTLD_DI_LINKMAP, &lm);",
         '    printf("%lx\\n", (unsigned long)lm->l_addr); fflush(stdout);',
         "    wf_fn_t fn = (wf_fn_t)(lm->l_addr + strtoul(argv[3], 0, 16));",
         "    int repeats = atoi(argv[4]);",
         '    FILE *in = fopen(argv[2], "rb"); uint32_t n; rd(in, &n, 4);',
         f"    void **orig = calloc((size_t)n * {max(len(args), 1)}, sizeof *orig);",
         f"    void **work = calloc((size_t)n * {max(len(args), 1)}, sizeof *work);",
         f"    uint64_t *len = calloc((size_t)n * {max(len(args), 1)}, sizeof *len);",
         "    long long *ns = calloc(n, sizeof *ns);",
         "    for (uint32_t i = 0; i < n; i++) {"]
    A = max(len(args), 1)
    for k, t in enumerate(args):
        L += [f"        {{ uint8_t kind; rd(in, &kind, 1); size_t j = (size_t)i * {A} + {k};",
              "          if (kind) { rd(in, &len[j], 8); }",
              f"          else len[j] = sizeof({ffi.getctype(t)});",
              "          orig[j] = malloc(len[j] ? len[j] : 1); rd(in, orig[j], len[j]);",
              "          work[j] = malloc(len[j] ? len[j] : 1);",
              "          if (!kind) len[j] = (uint64_t)-1 - len[j]; }"]
    L += ["    }",
          '    if (argc > 5) raise(SIGSTOP);           /* a tracer arms its breakpoints */',
          "    for (int r = 0; r < repeats; r++)",
          "    for (uint32_t i = 0; i < n; i++) {"]
    for k, t in enumerate(args):
        L += [f"        {ffi.getctype(t, f'a{k}')};",
              f"        {{ size_t j = (size_t)i * {A} + {k};",
              "          if (len[j] > ((uint64_t)1 << 62)) "
              f"memcpy(&a{k}, orig[j], sizeof a{k});",
              f"          else {{ memcpy(work[j], orig[j], len[j]); a{k} = "
              f"({ffi.getctype(t)})work[j]; }} }}"]
    call = ", ".join(f"a{k}" for k in range(len(args)))
    L += ["        long long t0 = now();", f"        fn({call});",
          "        ns[i] += now() - t0;", "    }",
          '    for (uint32_t i = 0; i < n; i++) printf("%lld\\n", ns[i]);', "    return 0;", "}"]
    return "\n".join(L) + "\n"


def _driver_times(out: str) -> list[int]:
    return [int(x) for x in out.split()[1:]]


# --- ptrace breakpoint counter -----------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_ptrace = _libc.ptrace
_ptrace.restype = ctypes.c_long
_ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
PTRACE_TRACEME, PTRACE_PEEKTEXT, PTRACE_POKETEXT = 0, 1, 4
PTRACE_CONT, PTRACE_SINGLESTEP, PTRACE_GETREGS, PTRACE_SETREGS = 7, 9, 12, 13
RIP = 16                                   # index of rip in struct user_regs_struct


class _Regs(ctypes.Structure):
    _fields_ = [("r", ctypes.c_ulonglong * 27)]


def _peek(pid: int, addr: int) -> int:
    ctypes.set_errno(0)
    v = _ptrace(PTRACE_PEEKTEXT, pid, addr, None)
    if v == -1 and ctypes.get_errno():
        raise OSError(ctypes.get_errno(), f"PEEKTEXT {addr:#x}")
    return v & 0xFFFFFFFFFFFFFFFF


def _poke(pid: int, addr: int, word: int) -> None:
    if _ptrace(PTRACE_POKETEXT, pid, addr, ctypes.c_void_p(word)) == -1:
        raise OSError(ctypes.get_errno(), f"POKETEXT {addr:#x}")


def _set_byte(pid: int, addr: int, byte: int) -> int:
    word = _peek(pid, addr)
    _poke(pid, addr, (word & ~0xFF) | byte)
    return word & 0xFF


def breakpoint_count(cmd: list[str], blocks: list[int]) -> tuple[dict[int, int], str]:
    """Run ``cmd`` (a driver that prints its load bias and raises SIGSTOP) under ptrace
    with an int3 at every link-time address in ``blocks``; return hits per address."""
    proc = subprocess.Popen(cmd + ["stop"], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: _ptrace(PTRACE_TRACEME, 0, None, None))
    pid = proc.pid
    os.waitpid(pid, 0)                               # stopped at exec
    _ptrace(PTRACE_CONT, pid, None, None)
    _, status = os.waitpid(pid, 0)                   # the driver's SIGSTOP
    assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP, status
    bias = int(proc.stdout.readline(), 16)
    saved = {}
    for a in blocks:
        saved[a + bias] = _set_byte(pid, a + bias, 0xCC)
    hits = {a + bias: 0 for a in blocks}
    regs = _Regs()
    sig = 0
    while True:
        _ptrace(PTRACE_CONT, pid, None, ctypes.c_void_p(sig))
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            break
        sig = os.WSTOPSIG(status)
        if sig != signal.SIGTRAP:
            continue
        sig = 0
        _ptrace(PTRACE_GETREGS, pid, None, ctypes.byref(regs))
        at = regs.r[RIP] - 1
        if at not in saved:
            continue
        hits[at] += 1
        _set_byte(pid, at, saved[at])
        regs.r[RIP] = at
        _ptrace(PTRACE_SETREGS, pid, None, ctypes.byref(regs))
        _ptrace(PTRACE_SINGLESTEP, pid, None, None)
        os.waitpid(pid, 0)
        _set_byte(pid, at, 0xCC)
    out = proc.stdout.read()
    proc.wait()
    return {a - bias: n for a, n in hits.items()}, out


# --- the figures ------------------------------------------------------------------------------

def _sample_figures(name: str, tmp: Path) -> list[dict]:
    from wcetfit import target as T
    from wcetfit.count.instrumented import Counter, InstrumentedCopy
    from wcetfit.loader import load_binary
    from wcetfit.count.relocate import closure
    from wcetfit.timing.thunk import build_harness

    tg = T.load_target(str(ROOT / "samples" / name))
    fn = tg.functions[0]
    h = build_harness(tg.prototype, tg.cdef)
    gen = T.load_inputs_module(tg)
    models = _models(tg.binary, [fn])
    fns = closure(models, [fn])
    lb = load_binary(tg.binary)
    packs = [h.pack(fn, T.generate_input(gen, tg, h.ffi, fn, i)) for i in range(N_INPUTS)]
    figs = []
    with InstrumentedCopy(lb, fns) as copy:
        counter = Counter(copy, fn, h)
        counts = [counter.count(i, p).counts for i, p in enumerate(packs)]
        orig_t, copy_t = [], []
        for p in packs:
            # interleave so drifts hit both alike
            o = h.time(fn, copy.original(fn), p, REPEATS, warmup=3, method="lfence")
            c = h.time(fn, copy.entry(fn), p, REPEATS, warmup=3, method="lfence")
            orig_t.append(float(np.median(o.ticks)))
            copy_t.append(float(np.median(c.ticks)))
        ratio = sum(copy_t) / sum(orig_t)
        figs.append(_fig(f"count.{name}.instrumented_over_original", ratio, "x",
                         reference="original code, same harness, same inputs"))
        plan = copy.plan
        figs.append(_fig(f"count.{name}.fast_counter_share",
                         plan.fast_counters / max(1, plan.fast_counters + plan.safe_counters),
                         "share"))

    if not shutil.which("gcc"):
        return figs
    src = tmp / f"{name}.c"
    src.write_text(_driver_source(tg.prototype, tg.cdef, fn))
    exe = tmp / f"{name}-driver"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), "-ldl"], check=True,
                   capture_output=True)
    sys.path.insert(0, str(ROOT / "tests"))
    from driver_inputs import write_inputs  # the oracle test's encoding of the arguments
    inputs = tmp / f"{name}.in"
    write_inputs(inputs, h, fn, packs)
    base = [str(exe), tg.binary, str(inputs), f"{models[fn].entry:x}"]
    native = subprocess.run(base + ["3"], check=True, capture_output=True, text=True)
    native_ns = sum(_driver_times(native.stdout)) / 3
    if shutil.which("valgrind"):
        cg = subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes",
                             "--callgrind-out-file=/dev/null"] + base + ["3"], check=True,
                            capture_output=True, text=True)
        cg_ns = sum(_driver_times(cg.stdout)) / 3
        figs.append(_fig(f"count.{name}.callgrind_over_native", cg_ns / native_ns, "x",
                         reference="native driver, same inputs"))
    # breakpoints: one input with at most BP_MAX_HITS block executions, the biggest such
    totals = [sum(int(a.sum()) for a in c.values()) for c in counts]
    fits = [i for i, t in enumerate(totals) if t <= BP_MAX_HITS]
    pick = max(fits, key=lambda i: totals[i]) if fits else int(np.argmin(totals))
    one = tmp / f"{name}-one.in"
    write_inputs(one, h, fn, [packs[pick]])
    base1 = [str(exe), tg.binary, str(one), f"{models[fn].entry:x}"]
    nat1 = subprocess.run(base1 + ["200"], check=True, capture_output=True, text=True)
    nat1_ns = _driver_times(nat1.stdout)[0] / 200
    blocks = [b.address for f in fns for b in f.blocks]
    hits, out = breakpoint_count(base1 + ["1"], blocks)
    bp_ns = int(out.split()[0])                     # the bias line was read by the tracer
    ours = {b: int(n) for f in fns for b, n in zip(plan.slots[f.name].blocks, counts[pick][f.name])}
    figs.append(_fig(f"count.{name}.breakpoint_over_native", bp_ns / nat1_ns, "x",
                     reference=f"native driver, input {pick} ({totals[pick]} block hits)"))
    figs.append(_fig(f"count.{name}.breakpoint_us_per_hit",
                     (bp_ns - nat1_ns) / 1e3 / max(1, totals[pick]), "us"))
    figs.append(_fig(f"count.{name}.breakpoint_counts_equal_copy",
                     float(hits == ours), "bool", "== 1", hits == ours))
    return figs


def library_oracle(ids: list[str] | None = None) -> list[dict]:
    """``count.library.oracle_equal``: functions of the system's libraries (the list of
    tests/test_count_library.py: IFUNC implementations, rel8 branches, jump tables, SIMD
    and SHA-NI code, libc string functions, an allocating function) whose block counts
    equal callgrind's for every block and every input; one figure per function beside."""
    import time

    import pytest

    sys.path.insert(0, str(ROOT / "tests"))
    from test_count_library import CASES, run_case

    figs: list[dict] = []
    passed = total = pairs = 0
    for case in CASES:
        if ids and case.id not in ids:
            continue
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="wcetfit-bench-oracle-") as tmp:
            try:
                n = run_case(Path(tmp), case)
                ok, why = True, None
            except pytest.skip.Exception as exc:
                figs.append(_fig(f"count.library.{case.id}.equal_callgrind", None, "bool",
                                 note=f"skipped: {exc}"))
                continue
            except Exception as exc:  # noqa: BLE001 - a mismatch is a figure, not a crash
                n, ok, why = 0, False, str(exc).splitlines()[0][:300]
        total += 1
        passed += ok
        pairs += n
        figs.append(_fig(f"count.library.{case.id}.equal_callgrind", float(ok), "bool", "== 1",
                         ok, feature=case.feature, block_input_pairs=n, note=why,
                         seconds=round(time.monotonic() - t0, 1)))
    figs.insert(0, _fig("count.library.functions_equal_callgrind", passed, "functions",
                        f"== {total} (>= 30)", passed == total and total >= 30,
                        reference=f"{total} functions, {pairs} (block, input) pairs compared"))
    return figs


def run(samples: list[str] | None = None) -> list[dict]:
    from wcetfit.timing.tsc import pinned

    figs: list[dict] = []
    ratios = []
    with tempfile.TemporaryDirectory(prefix="wcetfit-bench-count-") as tmp, pinned():
        for name in samples or SAMPLES:
            if not (ROOT / "samples" / name / "wcetfit.toml").is_file():
                continue
            got = _sample_figures(name, Path(tmp))
            figs += got
            ratios += [f["value"] for f in got if f["figure"].endswith("instrumented_over_original")]
    if ratios:
        med = statistics.median(ratios)
        figs.insert(0, _fig("count.instrumented_over_original.median_over_samples", med, "x",
                            "<= 1.5", med <= 1.5,
                            reference=f"original code, {len(ratios)} samples"))
        for key in ("callgrind_over_native", "breakpoint_over_native"):
            vals = [f["value"] for f in figs if f["figure"].endswith(key)]
            if vals:
                figs.insert(1, _fig(f"count.{key}.median_over_samples",
                                    statistics.median(vals), "x"))
    if not samples and shutil.which("valgrind"):
        figs += library_oracle()
    return figs


if __name__ == "__main__":
    import json
    if sys.argv[1:2] == ["library"]:
        print(json.dumps(library_oracle(sys.argv[2:] or None), indent=1))
    else:
        print(json.dumps(run(sys.argv[1:] or None), indent=1))
