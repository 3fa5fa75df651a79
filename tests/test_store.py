"""The store: round trips, identity checks, future versions, other machines."""

import json
import os

import numpy as np
import pytest

from wcetfit import store as st
from wcetfit.errors import StoreError

ID = st.StoreIdentity("a" * 64, "b" * 64)


def test_round_trip_and_names(tmp_path):
    s = st.Store(str(tmp_path / ".wcetfit"), ID)
    s.save("counts-s1", {"seed": 1}, {"x": np.arange(5, dtype=np.int64)})
    meta, arrays = s.load("counts-s1")
    assert meta["seed"] == 1 and meta["format"] == st.FORMAT_VERSION
    assert arrays["x"].dtype == np.int64 and arrays["x"].tolist() == [0, 1, 2, 3, 4]
    assert s.names() == ["counts-s1"]
    assert s.load("absent") is None
    assert s.drop("counts-s1") and s.names() == []


def test_other_binary_refused_with_what_differs(tmp_path):
    st.Store(str(tmp_path), ID).save("counts", {}, {"x": np.zeros(1)})
    with pytest.raises(StoreError, match="binary changed"):
        st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64))
    with pytest.raises(StoreError, match="prototype changed"):
        st.Store(str(tmp_path), st.StoreIdentity("a" * 64, "d" * 64))
    # --fresh starts over
    st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64), fresh=True)


def test_future_version_refused(tmp_path):
    st.Store(str(tmp_path), ID)
    meta = json.loads((tmp_path / "store.json").read_text())
    meta["format"] = st.FORMAT_VERSION + 1
    (tmp_path / "store.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="newer wcetfit"):
        st.Store(str(tmp_path), ID)


def test_other_machine_times_refused(tmp_path):
    s = st.Store(str(tmp_path), ID)
    other = dict(st.machine_fingerprint(), host="elsewhere")
    s.save("times", {"machine": other}, {"t": np.zeros(1)})
    with pytest.raises(StoreError, match="another machine"):
        s.load("times", machine=True)
    assert s.load("times", machine=False) is not None


def test_interrupted_write_leaves_previous_version(tmp_path, monkeypatch):
    s = st.Store(str(tmp_path), ID)
    s.save("d", {"v": 1}, {"x": np.ones(3)})

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        s.save("d", {"v": 2}, {"x": np.zeros(3)})
    monkeypatch.undo()
    meta, arrays = s.load("d")
    assert meta["v"] == 1 and arrays["x"].tolist() == [1, 1, 1]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_identity_binds_only_once_something_is_measured(tmp_path):
    """A run that failed before measuring (a wrong prototype) leaves a store that takes
    the corrected identity; its leftovers (empty datasets, failures) go with the old one."""
    other = st.StoreIdentity("a" * 64, "d" * 64)
    s = st.Store(str(tmp_path), ID)
    s.save("counts", {"failures": ["crash"]}, {"indices": np.zeros(0)}, measured=False)
    s = st.Store(str(tmp_path), other)                # no error: nothing was measured
    assert s.names() == []                            # the old identity's leftovers are gone
    assert json.loads((tmp_path / "store.json").read_text())["prototype_sha256"] == "d" * 64
    s.save("counts", {}, {"indices": np.arange(3)})   # measured: bound from now on
    with pytest.raises(StoreError, match="prototype changed"):
        st.Store(str(tmp_path), ID)
    assert st.Store(str(tmp_path), other).load("counts") is not None


def test_store_without_bound_key_counts_as_bound(tmp_path):
    st.Store(str(tmp_path), ID)
    meta = json.loads((tmp_path / "store.json").read_text())
    del meta["bound"]                                 # written before the key existed
    meta.pop("sha256")
    meta["sha256"] = st._json_sha256(meta)            # a sound file, only without the key
    (tmp_path / "store.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="binary changed"):
        st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64))


# --- integrity: checksums, damaged files set aside, full disk, locks ---------------------

import errno  # noqa: E402
import logging  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402


def _saved(tmp_path):
    s = st.Store(str(tmp_path), ID)
    s.save("times-f", {"v": 1}, {"t": np.arange(400, dtype=np.float64)})
    return s


def _set_aside(tmp_path, name):
    return [n for n in os.listdir(tmp_path) if n.startswith(name + ".corrupt-")]


@pytest.mark.parametrize("damage", ["truncated", "bit flip in data", "bit flip in meta",
                                    "empty", "garbage"])
def test_damaged_dataset_set_aside_with_one_error_line(tmp_path, caplog, damage):
    s = _saved(tmp_path)
    path = tmp_path / "times-f.npz"
    data = bytearray(path.read_bytes())
    if damage == "truncated":                       # the reported case: head -c 1000
        data = data[:1000]
    elif damage == "bit flip in data":
        # a flip inside the stored float64 array: the zip stores it uncompressed with a
        # CRC numpy does not check, so only the checksum notices
        at = bytes(data).index(np.arange(400, dtype=np.float64)[200:201].tobytes())
        data[at + 3] ^= 0x10
    elif damage == "bit flip in meta":
        at = bytes(data).index('"v": 1'.encode("utf-32-le"))   # numpy keeps str as UTF-32
        data[at + 5 * 4] ^= 0x02                    # "v": 1 -> "v": 3
    elif damage == "empty":
        data = b""
    else:
        data = b"not a zip file at all" * 10
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, logger="wcetfit"):
        assert s.load("times-f") is None            # absent: measured again
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "times-f.npz" in errors[0] and "moved aside" in errors[0] \
        and "measured again" in errors[0]
    assert not path.exists() and len(_set_aside(tmp_path, "times-f.npz")) == 1
    # the next save and load work as before
    s.save("times-f", {"v": 2}, {"t": np.zeros(2)})
    assert s.load("times-f")[0]["v"] == 2


def test_damaged_store_json_set_aside_and_rewritten(tmp_path, caplog):
    s = _saved(tmp_path)
    s.lock.release()
    meta = json.loads((tmp_path / "store.json").read_text())
    meta["binary_sha256"] = "a" * 63 + "0"          # edited, checksum not updated
    (tmp_path / "store.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.ERROR, logger="wcetfit"):
        s2 = st.Store(str(tmp_path), ID)
    assert any("store.json" in r.getMessage() and "moved aside" in r.getMessage()
               for r in caplog.records)
    # the datasets name their identity, so they are still served
    assert s2.load("times-f")[0]["v"] == 1
    s2.lock.release()
    # and a dataset of another identity is refused even when store.json is gone
    os.unlink(tmp_path / "store.json")
    with pytest.raises(StoreError, match="another target"):
        st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64)).load("times-f")


def test_format_1_store_is_read_and_upgraded(tmp_path):
    s = _saved(tmp_path)
    s.lock.release()
    (tmp_path / "store.json").write_text(json.dumps({"format": 1, **{
        "binary_sha256": ID.binary_sha256, "prototype_sha256": ID.prototype_sha256}}))
    # a format-1 dataset: no checksum, no identity
    np.savez(tmp_path / "old.npz", x=np.ones(2), __meta__=np.array(json.dumps({"format": 1})))
    s2 = st.Store(str(tmp_path), ID)
    assert json.loads((tmp_path / "store.json").read_text())["format"] == st.FORMAT_VERSION
    assert s2.load("old")[1]["x"].tolist() == [1, 1]


def test_full_disk_keeps_previous_version(tmp_path, monkeypatch):
    s = _saved(tmp_path)
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r": Full(real_fdopen(fd, mode)))
    with pytest.raises(StoreError, match="no space left.*previous version of it is kept "
                                         "intact|no space left.*kept intact"):
        s.save("times-f", {"v": 2}, {"t": np.zeros(400)})
    monkeypatch.undo()
    meta, arrays = s.load("times-f")
    assert meta["v"] == 1 and arrays["t"].tolist() == list(range(400))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_full_disk_for_real_on_a_tiny_tmpfs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.strip()}")
    try:
        s = st.Store(str(mnt / ".wcetfit"), ID)
        s.save("d", {"v": 1}, {"x": np.ones(1000)})            # 8 kB: fits
        with pytest.raises(StoreError, match="no space left"):
            s.save("d", {"v": 2}, {"x": np.random.default_rng(0).random(20000)})  # 160 kB
        meta, arrays = s.load("d")
        assert meta["v"] == 1 and arrays["x"].tolist() == [1.0] * 1000
        s.lock.release()
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


_HOLD = """
import sys, time
from wcetfit import store as st
s = st.Store(sys.argv[1], st.StoreIdentity("a" * 64, "b" * 64))
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(tmp_path, seconds):
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), str(seconds)],
                         stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_run_refused_with_no_wait_naming_the_holder(tmp_path):
    p = _holder(tmp_path, 30)
    try:
        with pytest.raises(StoreError, match=f"in use by pid {p.pid}"):
            st.Store(str(tmp_path), ID, wait=False)
    finally:
        p.kill()
        p.wait()
    # the holder died (SIGKILL): the lock is free again
    st.Store(str(tmp_path), ID, wait=False).lock.release()


def test_second_run_waits_saying_for_whom(tmp_path):
    p = _holder(tmp_path, 600)
    msgs = []

    class EndHolderOnWait(logging.Handler):
        def emit(self, record):
            msgs.append(record.getMessage())
            if "waiting" in record.getMessage():
                p.kill()            # the holder ends: the waiting open goes on

    handler = EndHolderOnWait(logging.WARNING)
    logging.getLogger("wcetfit").addHandler(handler)
    try:
        s = st.Store(str(tmp_path), ID)
    finally:
        logging.getLogger("wcetfit").removeHandler(handler)
        p.kill()
        p.wait()
    s.lock.release()
    waits = [m for m in msgs if "waiting" in m]
    assert len(waits) == 1 and f"pid {p.pid}" in waits[0], msgs


def test_lock_is_reentrant_and_not_held_by_forked_children(tmp_path):
    from wcetfit import locks
    a = locks.store_lock(str(tmp_path))
    b = locks.store_lock(str(tmp_path), wait=False)     # same process: no self-deadlock
    pid = os.fork()
    if pid == 0:
        # the child closed its copies: after the parent lets go, nobody holds the lock
        time.sleep(0.5)
        os._exit(0)
    a.release()
    b.release()
    p = _holder(tmp_path, 0.1)      # another process can take it while the child lives
    p.wait()
    os.waitpid(pid, 0)


# --- through the CLI: the reported cases --------------------------------------------------

SUM_C = "int sum(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) s += a[i]; return s; }\n"
SUM_TOML = """binary = "libsum.so"
functions = ["sum"]
prototype = "int sum(int *a, int n);"
inputs = "inputs.py"
[measure]
inputs = 12
repeats = 2
"""
SUM_INPUTS = """def generate(ctx):
    n = ctx.index + 1
    return (ctx.ffi.new("int[]", list(range(n))), n)
"""

_HOLD_LOCK = """
import sys, time
from wcetfit import locks
lock = locks.timing_lock(sys.argv[1]) if sys.argv[2] == "timing" else \\
    locks.store_lock(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[3]))
"""


@pytest.fixture()
def sum_target(tmp_path, monkeypatch):
    monkeypatch.setenv("WCETFIT_MACHINE_LOCK", str(tmp_path / "timing.lock"))
    (tmp_path / "sum.c").write_text(SUM_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp_path / "libsum.so"),
                    str(tmp_path / "sum.c")], check=True)
    (tmp_path / "wcetfit.toml").write_text(SUM_TOML)
    (tmp_path / "inputs.py").write_text(SUM_INPUTS)
    return tmp_path


def _wcetfit(*args):
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def _hold(kind, where, seconds):
    p = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(where), kind, str(seconds)],
                         stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert p.stdout.readline().strip() == "held"
    return p


def _run_waiting(holder, *args):
    """Run `wcetfit ARGS` while ``holder`` holds a lock; once it says it waits, end the
    holder (no sleep guesses: the run's start-up time varies with the machine's load)."""
    p = subprocess.Popen([sys.executable, "-m", "wcetfit", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    first = []
    for line in p.stderr:
        first.append(line)
        if "waiting" in line:
            break
    holder.kill()
    holder.wait()
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(first) + err)


def _errors(res):
    assert "Traceback" not in res.stderr, res.stderr
    return [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]


@pytest.mark.slow
def test_cli_truncated_times_file_one_error_line_and_measured_again(sum_target):
    res = _wcetfit("analyze", str(sum_target))
    assert res.returncode == 0, res.stderr
    store = sum_target / ".wcetfit"
    (times,) = [n for n in os.listdir(store) if n.startswith("times-")]
    data = (store / times).read_bytes()
    (store / times).write_bytes(data[:1000])             # `head -c 1000`
    res = _wcetfit("analyze", str(sum_target))
    assert res.returncode == 0, res.stderr
    errors = _errors(res)
    assert len(errors) == 1 and times in errors[0] and "moved aside" in errors[0], res.stderr
    assert _set_aside(store, times) and (store / times).exists()


@pytest.mark.slow
def test_cli_second_run_of_one_target_waits_or_refuses(sum_target):
    p = _hold("store", sum_target / ".wcetfit", 600)
    try:
        res = _wcetfit("count", str(sum_target), "--no-wait")
        assert res.returncode == 2
        errors = _errors(res)
        assert len(errors) == 1 and f"pid {p.pid}" in errors[0], res.stderr
        res = _run_waiting(p, "count", str(sum_target))     # waits for the holder, then runs
        assert res.returncode == 0, res.stderr
        assert "waiting" in res.stderr and f"pid {p.pid}" in res.stderr
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_cli_timing_runs_one_per_machine_and_load_recorded(sum_target):
    assert _wcetfit("count", str(sum_target)).returncode == 0
    p = _hold("timing", "elsewhere/other-target", 600)
    try:
        res = _wcetfit("time", str(sum_target), "--no-wait")
        assert res.returncode == 2 and "timing slot" in _errors(res)[0], res.stderr
        assert f"pid {p.pid}" in res.stderr and "other-target" in res.stderr
        res = _run_waiting(p, "time", str(sum_target))
        assert res.returncode == 0, res.stderr
        assert "waiting" in res.stderr and "other-target" in res.stderr
    finally:
        p.kill()
        p.wait()
    from wcetfit.measurements import open_store
    from wcetfit.target import load_target
    t = load_target(str(sum_target))
    s = open_store(t)
    (name,) = [n for n in s.names() if n.startswith("times-")]
    meta, _ = s.load(name, machine=True)
    s.lock.release()
    load = meta["environment"]["load"]
    assert len(load["samples"]) >= 2 * 2                  # before and after each pass
    assert all(x["procs_running"] >= 1 for x in load["samples"])
    # the warning is there exactly when another process was runnable at a sample
    assert (load["warning"] is not None) == (load["others_max"] > 0)
    # the report carries it where the user reads the result
    res = _wcetfit("report", str(sum_target), "--json", "-")
    assert res.returncode == 0, res.stderr
    warnings = [w["message"] for w in json.loads(res.stdout)["warnings"]]
    assert any("other runnable process" in w for w in warnings) == (load["warning"] is not None)


def test_cli_calibrate_takes_the_timing_slot(sum_target):
    """A calibration measures the TSC like a timing run: it waits for (or, with --no-wait,
    refuses) the machine's timing slot held by another run."""
    p = _hold("timing", "elsewhere/other-target", 600)
    try:
        res = _wcetfit("calibrate", "--quick", "--no-wait")
        assert res.returncode == 2 and "timing slot" in _errors(res)[0], res.stderr
        assert f"pid {p.pid}" in res.stderr and "other-target" in res.stderr
    finally:
        p.kill()
        p.wait()


def test_cli_search_takes_the_timing_slot(sum_target):
    """The search times its candidates like a timing run: with --no-wait it refuses,
    naming the other run, while another run holds the machine's timing slot (a new user's
    search timed beside another target's `analyze`, which refused nothing)."""
    # draws for the search to change (the sum target's inputs take none)
    (sum_target / "inputs.py").write_text(
        "def generate(ctx):\n    n = int(ctx.rng.integers(1, 40))\n"
        "    return (ctx.ffi.new('int[]', list(range(n))), n)\n")
    with open(sum_target / "wcetfit.toml", "a") as f:
        f.write("[search]\nbudget = 0\ntimed = 2\ntimed_budget = 4\n")
    assert _wcetfit("analyze", str(sum_target), "--no-wait").returncode == 0
    p = _hold("timing", "elsewhere/other-target", 600)
    try:
        res = _wcetfit("search", str(sum_target), "--budget", "10", "--timed", "2",
                       "--timed-budget", "4", "--no-wait")
        assert res.returncode == 2 and "timing slot" in _errors(res)[0], res.stderr
        assert f"pid {p.pid}" in res.stderr and "other-target" in res.stderr
    finally:
        p.kill()
        p.wait()
    # and once the slot is free, the same search runs; [search] settings of wcetfit.toml
    # are its defaults (its budget 0 turns off analyze's search step only: 300)
    res = _wcetfit("search", str(sum_target), "--no-wait", "--json", "-")
    assert res.returncode == 0, res.stderr
    fn = json.loads(res.stdout)["functions"][0]
    assert fn["timed_phase"]["timed"] == 4, fn["timed_phase"]
    assert fn["counted"] + fn["rejected"] <= 300 and len(fn["timed"]) <= 2 + 2


def test_cli_analyze_no_wait_skips_its_search_when_the_slot_is_taken_after_timing(sum_target):
    """--no-wait refuses to wait for the timing slot; an analyze that measured and stored
    its times, and finds the slot taken by another run at its search step, printed one
    error line and threw its report away (libm's cosh after 13.5 s of measuring).  It now
    skips the search, says so, and reports what is stored."""
    (sum_target / "inputs.py").write_text(
        "def generate(ctx):\n    n = int(ctx.rng.integers(1, 40))\n"
        "    return (ctx.ffi.new('int[]', list(range(n))), n)\n")
    assert _wcetfit("time", str(sum_target), "--no-wait").returncode == 0
    with open(sum_target / "wcetfit.toml", "a") as f:
        f.write("[search]\nbudget = 10\ntimed = 2\ntimed_budget = 4\n")
    p = _hold("timing", "elsewhere/other-target", 600)
    try:
        res = _wcetfit("analyze", str(sum_target), "--no-wait", "--json", "-")
    finally:
        p.kill()
        p.wait()
    assert res.returncode == 0, res.stderr
    assert "search step is skipped (--no-wait)" in res.stderr
    assert f"pid {p.pid}" in res.stderr and f"wcetfit search {sum_target}" in res.stderr
    assert json.loads(res.stdout)["functions"][0]["wcet"]["ipet_ticks"] > 0


def test_times_taken_with_another_warmup_are_not_this_measurement(tmp_path):
    """The default went from three warm-up calls of an input before each timed call to
    none (the call follows the previous input's): a store timed before is another
    measurement (adpcm's calls 3× faster), not to be fitted or extended as this one."""
    from wcetfit.measurements import TIMED_STATE, TimeSet, load_times, save_times

    s = st.Store(str(tmp_path), ID)
    ticks = np.full((3, 2), 100.0)
    old = TimeSet("f", 1, np.arange(3), ticks, "lfence", 2.6e9, 0, {})   # warmup unrecorded
    save_times(s, old)
    assert load_times(s, "f", 1, "lfence", 2) is not None          # no warmup asked: as is
    assert load_times(s, "f", 1, "lfence", 2, warmup=0) is None
    # and a set timed before calls followed an untimed call of the previous input made
    # right before them (the worker's own work between calls in the times): whatever its
    # warm-up, not the measurement taken now
    assert load_times(s, "f", 1, "lfence", 2, warmup=3) is None
    save_times(s, TimeSet("f", 1, np.arange(3), ticks, "lfence", 2.6e9, 0, {"warmup": 0}))
    assert load_times(s, "f", 1, "lfence", 2, warmup=0) is None
    save_times(s, TimeSet("f", 1, np.arange(3), ticks, "lfence", 2.6e9, 0,
                          {"warmup": 0, "timed_state": TIMED_STATE}))
    assert load_times(s, "f", 1, "lfence", 2, warmup=0) is not None
    assert load_times(s, "f", 1, "lfence", 2, warmup=3) is None
    from wcetfit.measurements import other_measurement
    assert "untimed call of the previous input" in other_measurement({"warmup": 0}, 0)
    assert "warmup is 0" in other_measurement({}, 0)


def test_auto_reads_the_method_the_stored_times_were_taken_with(tmp_path, monkeypatch):
    """A calibration in another cache chose cpuid where the store was timed with lfence:
    `report` found "no times stored ... method cpuid" (CI, a fresh cache per test)."""
    from types import SimpleNamespace

    from wcetfit.timing import calibrate
    from wcetfit.timing.run import resolve_method

    monkeypatch.setattr(calibrate, "auto_method", lambda: ("cpuid", "calibrated"))
    store = tmp_path / ".wcetfit"
    store.mkdir()
    target = SimpleNamespace(measure=SimpleNamespace(method="auto", seed=1),
                             functions=("sum",), store_dir=str(store))
    assert resolve_method(target) == ("cpuid", "calibrated")          # nothing stored
    (store / "times-sum-s1-lfence-r10.npz").write_bytes(b"")
    (store / "times-sum-s1001-rdtscp-r10.npz").write_bytes(b"")       # another seed
    assert resolve_method(target)[0] == "lfence"
    (store / "times-sum-s1-rdtscp-r3.npz").write_bytes(b"")           # two: calibrate
    assert resolve_method(target) == ("cpuid", "calibrated")
    target.measure.method = "mfence"                                    # the target's own
    assert resolve_method(target)[0] == "mfence"
