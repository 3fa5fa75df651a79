"""Hostile targets: a function that exits, aborts, raises a signal, writes through a wild
pointer, spins, forks, starts a thread, longjmps out, reads standard input, changes its
own code or unmaps memory -- for one input only (x == 3).  Each case: the count run and
the timing run report input 3 with its arguments and the kind of failure, keep every
other input, and the analyzer (this process) carries on unharmed."""

import os
import shutil
import subprocess

import numpy as np
import pytest

HOSTILE_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static void *spin(void *arg) { for (;;) pause(); return arg; }
static jmp_buf never_set;

/* Sums 0..x*8; misbehaves as `kind` says when x == 3. */
long hostile(int kind, int x)
{
    long s = 0;
    for (int i = 0; i < x * 8; i++)
        s += i ^ kind;
    if (x != 3)
        return s;
    switch (kind) {
    case 1: exit(7);
    case 2: abort();
    case 3: raise(SIGUSR1); break;
    case 4: *(volatile int *)(uintptr_t)0x10 = 1; break;
    case 5: for (volatile int k = 0;; k++) ; break;
    case 6: if (fork() == 0) s += 1; break;   /* the child returns into the caller */
    case 7: { pthread_t t; pthread_create(&t, 0, spin, 0); pthread_detach(t); } break;
    case 8: longjmp(never_set, 1);
    case 9: { char c; s += read(0, &c, 1); } break;
    case 10: {
        long page = sysconf(_SC_PAGESIZE);
        unsigned char *p = (unsigned char *)((uintptr_t)&hostile & ~(uintptr_t)(page - 1));
        if (mprotect(p, page, PROT_READ | PROT_WRITE | PROT_EXEC) == 0)
            p[0] = p[0];            /* the code is now writable and written */
        break;
    }
    case 11: {
        long page = sysconf(_SC_PAGESIZE);
        munmap((void *)((uintptr_t)&spin & ~(uintptr_t)(page - 1)), page);
        break;
    }
    }
    return s;
}
"""

TOML = """
binary = "libhostile.so"
functions = ["hostile"]
prototype = "long hostile(int kind, int x);"
inputs = "inputs.py"
[measure]
inputs = 6
repeats = 2
warmup = 1
timeout = 1.0
"""

INPUTS = """
KIND = {kind}
def generate(ctx):
    return (KIND, ctx.index)
"""

# kind -> (case, the failure kinds it may be reported as, a word its message must hold);
# None: contained without failing (stdin is /dev/null, so the read returns at once).
CASES = {
    1: ("exit", {"exit"}, "status 7"),
    2: ("abort", {"crash"}, "SIGABRT"),
    3: ("signal", {"crash"}, "SIGUSR1"),
    4: ("wild pointer", {"crash"}, "SIGSEGV"),
    5: ("spins forever", {"hang"}, "no return"),
    6: ("fork", {"fork"}, "child process"),
    7: ("thread", {"thread"}, "thread"),
    8: ("longjmp out", {"crash"}, ""),
    9: ("reads stdin", None, ""),
    10: ("changes its code", {"code"}, "executable"),
    11: ("unmaps memory", {"code", "crash"}, ""),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the hostile library")
    d = tmp_path_factory.mktemp("hostile")
    (d / "hostile.c").write_text(HOSTILE_C)
    subprocess.run(["gcc", "-O2", "-g", "-fPIC", "-shared", "-pthread", "-o",
                    str(d / "libhostile.so"), str(d / "hostile.c")], check=True)
    return d / "libhostile.so"


def _target(tmp_path, library, kind):
    shutil.copy(library, tmp_path / "libhostile.so")
    (tmp_path / "wcetfit.toml").write_text(TOML)
    (tmp_path / "inputs.py").write_text(INPUTS.format(kind=kind))
    return tmp_path


def _check(failures, kept, kind, stage):
    case, kinds, word = CASES[kind]
    if kinds is None:
        assert not failures, (case, stage, [f.describe() for f in failures])
        assert sorted(kept) == list(range(6)), (case, stage)
        return
    assert [f.index for f in failures] == [3], (case, stage, [f.describe() for f in failures])
    f = failures[0]
    assert f.kind in kinds, (case, stage, f.describe())
    assert word in f.message, (case, stage, f.describe())
    assert f.arguments.startswith("(") and "3" in f.arguments, f.describe()
    assert sorted(kept) == [0, 1, 2, 4, 5], (case, stage)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(CASES), ids=[CASES[k][0] for k in sorted(CASES)])
def test_hostile_function_contained(tmp_path, library, kind):
    from wcetfit.count.run import run_counts
    from wcetfit.measurements import load_counts, load_times
    from wcetfit.pipeline import open_session
    from wcetfit.timing.run import run_times

    target_dir = _target(tmp_path, library, kind)
    # A standard input that never delivers: a target reading it would block the run
    # unless the worker reads /dev/null.
    rfd, wfd = os.pipe()
    saved_stdin = os.dup(0)
    os.dup2(rfd, 0)
    try:
        s = open_session(str(target_dir))
        counts = run_counts(s.target, s.store, s.model, ["hostile"])["hostile"]
        _check(list(counts.failures), counts.indices.tolist(), kind, "count")
        # the counts of the good inputs are the loop's: x*8 iterations (objdump-free truth:
        # the body block runs x*8 times, so some column equals 8x)
        fc = counts.of("hostile")
        xs = counts.indices.astype(np.int64)
        assert any((fc.counts[:, j] == 8 * xs).all() for j in range(fc.counts.shape[1])), \
            fc.counts
        times = run_times(s.target, s.store, s.roots)["hostile"]
        _check(list(times.failures), times.indices.tolist(), kind, "time")
        assert np.isfinite(times.ticks).all()
        # what was kept is in the store, readable
        assert load_counts(s.store, "hostile", s.target.measure.seed).indices.tolist() == \
            counts.indices.tolist()
        assert load_times(s.store, "hostile", s.target.measure.seed, times.method,
                          2).indices.tolist() == times.indices.tolist()
    finally:
        os.dup2(saved_stdin, 0)
        os.close(saved_stdin)
        os.close(rfd)
        os.close(wfd)
    # the analyzer is unharmed: no thread, no child process, stdin back
    assert len(os.listdir("/proc/self/task")) >= 1
    assert not [p for p in _children() if _alive(p)], _children()


def _children():
    out = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
