"""An edited inputs module is no longer reused silently.

The store keeps the measurements of ``generate(ctx)`` per input number; a user who edited
inputs.py after an analysis and ran ``analyze`` again got the old generate's counts and
times back in 2 s, reported as current, and nothing said the inputs had changed.  The
store now records a fingerprint of the inputs module: a measuring command refuses a
changed one (one ``error:`` line, exit 2, the store untouched), ``report`` shows what was
measured with the change first among its warnings, and ``--fresh`` measures the new
inputs.  Stores written before the fingerprint (format 2) are taken as they are."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_store import SUM_TOML as STORE_SUM_TOML, sum_target  # noqa: F401 -- a fixture
from wcetfit import store as st
from wcetfit.errors import StoreError

ID = st.StoreIdentity("a" * 64, "b" * 64)
OLD = st.InputsFingerprint("inputs.py", "1" * 64)
NEW = st.InputsFingerprint("inputs.py", "2" * 64)


def _files(directory) -> dict[str, bytes]:
    # the lock file names its current holder (pid): it is the lock's, not the store's data
    return {n: (Path(directory) / n).read_bytes() for n in sorted(os.listdir(directory))
            if n != "lock"}


def _measured(tmp_path, inputs=OLD):
    s = st.Store(str(tmp_path), ID, inputs=inputs)
    s.save("counts-f-s1", {"seed": 1}, {"indices": np.arange(3)})
    s.lock.release()
    return s


def test_changed_inputs_module_refused_store_untouched(tmp_path):
    _measured(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(StoreError) as exc:
        st.Store(str(tmp_path), ID, inputs=NEW)
    msg = str(exc.value)
    assert "inputs.py changed" in msg and "111111111111" in msg and "222222222222" in msg
    assert "--fresh" in msg and "restore the old inputs.py" in msg
    assert "\n" not in msg
    assert _files(tmp_path) == before
    # the same module again: accepted, the measurements there
    assert st.Store(str(tmp_path), ID, inputs=OLD).load("counts-f-s1") is not None


def test_another_inputs_module_named(tmp_path):
    _measured(tmp_path)
    with pytest.raises(StoreError, match=r"were of inputs\.py.*now names gen2\.py"):
        st.Store(str(tmp_path), ID, inputs=st.InputsFingerprint("gen2.py", "2" * 64))
    # the same bytes under another name are the same inputs: accepted, the name recorded
    st.Store(str(tmp_path), ID, inputs=st.InputsFingerprint("gen2.py", "1" * 64)).lock.release()
    assert json.loads((tmp_path / "store.json").read_text())["inputs"]["module"] == "gen2.py"


def test_warn_policy_opens_and_keeps_the_old_fingerprint(tmp_path, caplog):
    _measured(tmp_path)
    before = _files(tmp_path)
    with caplog.at_level(logging.WARNING, logger="wcetfit.store"):
        s = st.Store(str(tmp_path), ID, inputs=NEW, inputs_changed="warn")
    assert s.inputs_changed_note and "inputs.py changed" in s.inputs_changed_note
    assert [r for r in caplog.records if "inputs.py changed" in r.getMessage()]
    assert s.load("counts-f-s1") is not None
    s.lock.release()
    assert _files(tmp_path) == before              # nothing rewritten: measuring still refused
    with pytest.raises(StoreError, match="inputs.py changed"):
        st.Store(str(tmp_path), ID, inputs=NEW)
    assert st.Store(str(tmp_path), ID, inputs=OLD).inputs_changed_note is None


def test_fresh_takes_the_new_inputs(tmp_path):
    _measured(tmp_path)
    s = st.Store(str(tmp_path), ID, inputs=NEW, fresh=True)
    assert s.names() == []
    assert json.loads((tmp_path / "store.json").read_text())["inputs"]["sha256"] == "2" * 64


def test_nothing_measured_takes_the_new_inputs(tmp_path):
    """A run whose every input failed measured nothing: its failures were of the old
    generate() and go with it, as for a corrected prototype."""
    s = st.Store(str(tmp_path), ID, inputs=OLD)
    s.save("counts-f-s1", {"failures": ["crash"]}, {"indices": np.zeros(0)}, measured=False)
    s.lock.release()
    s = st.Store(str(tmp_path), ID, inputs=NEW)
    assert s.names() == []
    assert json.loads((tmp_path / "store.json").read_text())["inputs"]["sha256"] == "2" * 64


def test_opener_without_a_fingerprint_keeps_the_stored_one(tmp_path):
    _measured(tmp_path)
    s = st.Store(str(tmp_path), ID)                  # e.g. measurements.open_store
    s.save("counts-g-s1", {"seed": 1}, {"indices": np.arange(2)})
    s.lock.release()
    assert json.loads((tmp_path / "store.json").read_text())["inputs"]["sha256"] == "1" * 64
    with pytest.raises(StoreError, match="inputs.py changed"):
        st.Store(str(tmp_path), ID, inputs=NEW)


def test_format_2_store_accepted_and_its_fingerprint_recorded(tmp_path, caplog):
    """A store written before the fingerprint existed: its measurements are taken as the
    current module's (nothing tells otherwise), said once, and an edit from then on is
    refused."""
    _measured(tmp_path)
    meta = json.loads((tmp_path / "store.json").read_text())
    meta.pop("inputs")
    meta.pop("sha256")
    meta["format"] = 2
    meta["sha256"] = st._json_sha256(meta)         # a sound format-2 store.json
    (tmp_path / "store.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="wcetfit.store"):
        s = st.Store(str(tmp_path), ID, inputs=NEW)
    assert any("before wcetfit recorded" in r.getMessage() for r in caplog.records)
    assert s.load("counts-f-s1") is not None
    s.lock.release()
    rewritten = json.loads((tmp_path / "store.json").read_text())
    assert rewritten["format"] == st.FORMAT_VERSION == 3
    assert rewritten["inputs"] == {"module": "inputs.py", "sha256": "2" * 64}
    with pytest.raises(StoreError, match="inputs.py changed"):
        st.Store(str(tmp_path), ID, inputs=OLD)


def test_fingerprint_is_of_the_module_bytes(tmp_path):
    (tmp_path / "inputs.py").write_text("def generate(ctx):\n    return (1,)\n")
    a = st.InputsFingerprint.of(str(tmp_path / "inputs.py"), str(tmp_path))
    assert a.module == "inputs.py"
    import hashlib
    assert a.sha256 == hashlib.sha256((tmp_path / "inputs.py").read_bytes()).hexdigest()


# --- through the CLI: the reported case ------------------------------------------------------

# the sum target of test_store's CLI tests, with the search off
SUM_TOML = STORE_SUM_TOML + "[search]\nbudget = 0\n"
INPUTS = """def generate(ctx):
    n = {n}
    return (ctx.ffi.new("int[]", list(range(max(n, 1)))), n)
"""
OLD_N, NEW_N = "ctx.index + 1", "2 * ctx.index + 1"


@pytest.fixture()
def edited_sum_target(sum_target):
    """test_store's sum target (its own timing slot: this test checks what is reused, not
    timing quality), the search off and n an expression the test edits."""
    (sum_target / "wcetfit.toml").write_text(SUM_TOML)
    (sum_target / "inputs.py").write_text(INPUTS.format(n=OLD_N))
    return sum_target


def _wcetfit(*args):
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def _errors(res):
    assert "Traceback" not in res.stderr, res.stderr
    return [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]


def _counts(d):
    from wcetfit.measurements import load_counts, open_store
    from wcetfit.target import load_target

    t = load_target(str(d))
    s = open_store(t)
    try:
        cs = load_counts(s, "sum", t.measure.seed)
        return {int(i): tuple(row) for i, row in zip(cs.indices, cs.functions[0].counts)}
    finally:
        s.lock.release()


def test_cli_edited_inputs_refused_reported_with_warning_fresh_measures(edited_sum_target):
    d = edited_sum_target
    res = _wcetfit("analyze", str(d))
    assert res.returncode == 0, res.stderr
    old_counts = _counts(d)
    res = _wcetfit("report", str(d), "--json", "-")
    assert res.returncode == 0, res.stderr
    old_report = json.loads(res.stdout)

    (d / "inputs.py").write_text(INPUTS.format(n=NEW_N))     # the user edits generate()
    store = d / ".wcetfit"
    before = _files(store)
    for command in ("analyze", "count", "time"):            # each would add measurements
        res = _wcetfit(command, str(d))
        assert res.returncode == 2, (command, res.stdout, res.stderr)
        errors = _errors(res)
        assert len(errors) == 1, res.stderr
        assert "inputs.py changed" in errors[0] and "--fresh" in errors[0] \
            and "restore the old inputs.py" in errors[0], errors[0]
        assert _files(store) == before, command

    # report: what was measured, the change said first, no arguments rebuilt by the new
    # generate() (they would be another call's than the one timed)
    res = _wcetfit("report", str(d), "--json", "-")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stderr.splitlines() if "inputs.py changed" in ln], res.stderr
    rep = json.loads(res.stdout)
    assert "inputs.py changed" in rep["warnings"][0]["message"]
    assert "--fresh" in rep["warnings"][0]["advice"]
    root, old_root = rep["functions"][0], old_report["functions"][0]
    assert old_root["wcet"]["slowest_input"]["arguments"]          # shown before the edit
    assert root["wcet"]["slowest_input"]["arguments"] is None
    assert root["wcet"]["ipet_ticks"] == old_root["wcet"]["ipet_ticks"]
    assert _files(store) == before

    # restored: accepted again, nothing said
    (d / "inputs.py").write_text(INPUTS.format(n=OLD_N))
    res = _wcetfit("analyze", str(d))
    assert res.returncode == 0 and "inputs.py" not in res.stderr, res.stderr

    # --fresh measures the new generate(): input i now calls sum with n = 2i + 1, the
    # call the old input 2i made (same block counts: the same path through sum)
    (d / "inputs.py").write_text(INPUTS.format(n=NEW_N))
    res = _wcetfit("analyze", str(d), "--fresh")
    assert res.returncode == 0, res.stderr
    new_counts = _counts(d)
    assert sorted(new_counts) == sorted(old_counts) == list(range(12))
    for i in range(6):
        assert new_counts[i] == old_counts[2 * i], i
    assert any(new_counts[i] != old_counts[i] for i in range(1, 12))


@pytest.mark.parametrize("broken, said", [
    # generate() raises on input 3 (a typo on one branch)
    ("def generate(ctx):\n    if ctx.index == 3:\n        return undefined_name\n"
     "    return (ctx.ffi.new(\"int[]\", 1), 1)\n", "input 3: generate() raised"),
    # returns one argument where sum takes two
    ("def generate(ctx):\n    return (ctx.ffi.new(\"int[]\", 1),)\n",
     "generate() returned 1 argument"),
    # raises on the last input only (a new user's store was gone after input 250 raised)
    ("def generate(ctx):\n    if ctx.index == 11:\n        raise ValueError('boom')\n"
     "    return (ctx.ffi.new(\"int[]\", 1), 1)\n", "input 11: generate() raised"),
])
def test_fresh_with_a_broken_generate_keeps_what_was_measured(edited_sum_target, broken,
                                                              said):
    """--fresh discards the store, for good: a generate() that does not work must be
    refused first (one error line, exit 2), the measurements still there."""
    d = edited_sum_target
    res = _wcetfit("analyze", str(d))
    assert res.returncode == 0, res.stderr
    store = d / ".wcetfit"
    before = _files(store)
    (d / "inputs.py").write_text(broken)
    res = _wcetfit("analyze", str(d), "--fresh")
    assert res.returncode == 2, res.stderr
    errors = _errors(res)
    assert len(errors) == 1 and said in errors[0], res.stderr
    assert _files(store) == before


def test_times_taken_after_warm_up_calls_are_timed_again(edited_sum_target):
    """A store timed before calls followed the previous input's (three warm-up calls of
    each input first, unrecorded): `report` refuses it in one line saying why, and
    `analyze` times it again, keeping the counts."""
    import glob

    from wcetfit.pipeline import open_session

    d = edited_sum_target
    assert _wcetfit("analyze", str(d)).returncode == 0
    counts = _counts(d)
    s = open_session(str(d))
    try:
        for path in glob.glob(str(d / ".wcetfit" / "times-*.npz")):
            name = os.path.basename(path)[:-4]
            meta, arrays = s.store.load(name, machine=True)
            env = dict(meta["environment"])
            assert env.pop("warmup") == 0             # recorded now
            assert env.pop("timed_state") == 2        # (wcetfit.measurements.TIMED_STATE)
            # and where each pass started: spread over the inputs (speed.pass_start)
            from wcetfit.timing.speed import pass_start
            n, reps = s.target.measure.inputs, s.target.measure.repeats
            assert env["passes"] == {"inputs": n, "starts": [pass_start(n, reps, r)
                                                             for r in range(reps)]}
            assert len(set(env["passes"]["starts"])) == min(n, reps) > 1
            s.store.save(name, dict(meta, environment=env), dict(arrays))
    finally:
        s.store.lock.release()
    res = _wcetfit("report", str(d))
    assert res.returncode == 2
    errors = _errors(res)
    assert len(errors) == 1 and "taken with 3 warm-up call(s)" in errors[0] \
        and "warmup is 0" in errors[0] and "wcetfit analyze" in errors[0], res.stderr
    # (their warm-up would not make them this measurement: they predate the settled state)
    assert "set warmup = 3" not in errors[0], errors[0]
    res = _wcetfit("analyze", str(d))
    assert res.returncode == 0, res.stderr
    assert _counts(d) == counts
    assert _wcetfit("report", str(d)).returncode == 0
