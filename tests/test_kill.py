"""Killed at any moment: SIGKILL `count`, `time`, `analyze` and `split` at seeded random
moments; the next runs continue, end with the same counts as an uninterrupted run, and
leave a store whose every file reads back (none set aside as damaged)."""

import os
import random
import re
import shutil
import signal
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "samples", "chain")
KILLS = 52
SEED = 17


def _copy_target(dest):
    lib = os.path.join(SAMPLE, "build", "libchain.so")
    if not os.path.exists(lib):
        pytest.skip("samples not built (make -C samples)")
    os.makedirs(dest / "build")
    shutil.copy(lib, dest / "build" / "libchain.so")
    shutil.copy(os.path.join(SAMPLE, "inputs.py"), dest / "inputs.py")
    toml = open(os.path.join(SAMPLE, "wcetfit.toml")).read()
    toml = re.sub(r"inputs = \d+", "inputs = 24", toml)
    toml = re.sub(r"repeats = \d+", "repeats = 3", toml)
    (dest / "wcetfit.toml").write_text(toml)
    return dest


LOG = None   # the last run's stderr, to show when a run that must succeed fails


def _start(argv):
    """Run `wcetfit ARGV` in a forked copy of this process (the heavy imports and the
    static model are already loaded, so a run starts in a fraction of a second)."""
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1):
                os.dup2(null, fd)
            os.dup2(os.open(LOG or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            from wcetfit.cli import main
            code = main(argv)
        except BaseException:
            pass
        finally:
            os._exit(code)
    return pid


def _run(argv, timeout=120.0):
    pid = _start(argv)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"wcetfit {' '.join(argv)} did not end within {timeout} s")


def _stored_counts(directory):
    from wcetfit.measurements import load_counts
    from wcetfit.pipeline import open_session

    s = open_session(str(directory))
    try:
        cs = load_counts(s.store, "chain_run", s.target.measure.seed)
        return cs.indices.copy(), cs.of("chain_run").counts.copy()
    finally:
        s.store.lock.release()


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WCETFIT_MACHINE_LOCK", str(tmp_path / "timing.lock"))
    ref = _copy_target(tmp_path / "ref")
    work = _copy_target(tmp_path / "work")
    # the uninterrupted run (in a child as well, so this process holds no lock)
    assert _run(["count", str(ref), "--trace"]) == 0
    ref_indices, ref_counts = _stored_counts(ref)
    assert ref_indices.tolist() == list(range(24))

    rng = random.Random(SEED)
    commands = [["count", str(work), "--trace"], ["time", str(work)],
                ["analyze", str(work)], ["split", str(work), "--apply", "--max-probes", "2"]]
    kills = finished = 0
    per_command = {c[0]: 0 for c in commands}
    t0 = time.monotonic()
    while kills < KILLS:
        argv = commands[rng.randrange(len(commands))]
        pid = _start(argv)
        delay = rng.uniform(0.0, 1.5)
        deadline = time.monotonic() + delay
        status = None
        while time.monotonic() < deadline:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
            time.sleep(0.01)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            kills += 1
            per_command[argv[0]] += 1
        else:
            finished += 1
        assert time.monotonic() - t0 < 600, "the kill loop takes far too long"

    # the next runs continue where the killed ones stopped and end
    global LOG
    LOG = str(tmp_path / "stderr.txt")
    for argv in commands:
        assert _run(argv) == 0, (argv, open(LOG).read()[-3000:])
    indices, counts = _stored_counts(work)
    assert indices.tolist() == ref_indices.tolist()
    assert np.array_equal(counts, ref_counts)
    # and every repeat of every input is timed, once
    from wcetfit.measurements import load_times, open_store
    from wcetfit.target import load_target
    from wcetfit.timing.run import resolve_method
    t = load_target(str(work))
    s = open_store(t)
    try:
        times = load_times(s, "chain_run", t.measure.seed, resolve_method(t)[0], 3)
        assert times.indices.tolist() == list(range(24)) and bool(times.done.all())
        assert not times.failures
    finally:
        s.lock.release()
    # every stored file reads back; nothing was damaged by the kills
    store_dir = work / ".wcetfit"
    assert not [n for n in os.listdir(store_dir) if ".corrupt-" in n or n.startswith(".tmp-")]
    s = open_store(load_target(str(work)))
    try:
        for name in s.names():
            assert s.load(name) is not None, name
    finally:
        s.lock.release()
    print(f"kills {kills} ({per_command}), runs that ended before their kill {finished}")
