"""The report of an analysis read back when nothing it was computed from changed.

`wcetfit report` fitted and bounded again on every call: libcrypto's SHA1 took 19 s per
report, whichever way the user read it (summary, --full, --json, --html).  The report is
now kept under a key over the code, the target's settings, the static models and every
file of the store (wcetfit.analysis_cache).  Checked here on a measured target: a second
report is read back and prints exactly what the first did, its logged warnings included;
a changed setting, new measurements, another version of the code, a damaged entry,
--no-cache and WCETFIT_NO_CACHE each compute it again; the store is not written."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from smalltarget import build_library
from test_store import SUM_C, SUM_INPUTS, SUM_TOML
from wcetfit import analysis_cache, pipeline
from wcetfit.cli import main


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A small target measured once (analyze in a child, as a user runs it)."""
    d = tmp_path_factory.mktemp("cached")
    build_library(d, SUM_C, "sum", opt="-O2")
    (d / "wcetfit.toml").write_text(SUM_TOML.replace("inputs = 12", "inputs = 40"))
    (d / "inputs.py").write_text(SUM_INPUTS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               WCETFIT_MACHINE_LOCK=str(d / "timing.lock"),
               WCETFIT_CACHE_DIR=str(d / "cache"))
    res = subprocess.run([sys.executable, "-m", "wcetfit", "analyze", str(d),
                          "--no-cache"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    return d


@pytest.fixture()
def target(measured, tmp_path, monkeypatch):
    """A copy of the measured target, with its own report cache; counts the analyses."""
    d = tmp_path / "t"
    shutil.copytree(measured, d, ignore=shutil.ignore_patterns("cache"))
    monkeypatch.setenv("WCETFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WCETFIT_MACHINE_LOCK", str(tmp_path / "timing.lock"))
    monkeypatch.delenv("WCETFIT_NO_CACHE", raising=False)
    calls = []
    real = pipeline.analyze_stage

    def counted(*args, **kwargs):
        calls.append(1)
        # a warning the analysis logs, which a report read back must log again
        logging.getLogger("wcetfit.fit").warning("sum: a warning of the analysis")
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "analyze_stage", counted)
    return d, calls


def _report(d, capsys, *extra):
    out = d.parent / "report.json"
    assert main(["report", str(d), "--json", str(out), *extra]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err, json.loads(out.read_text())


def _store_files(d):
    store = d / ".wcetfit"
    return {n: (store / n).read_bytes() for n in sorted(os.listdir(store)) if n != "lock"}


def test_second_report_read_back_identical_with_its_warnings(target, capsys):
    d, calls = target
    before = _store_files(d)
    first = _report(d, capsys)
    assert len(calls) == 1
    second = _report(d, capsys)
    assert len(calls) == 1                      # read back: no fit, no bound
    assert second == first                      # text, warnings and JSON alike
    assert "a warning of the analysis" in second[1]
    assert second[2]["functions"][0]["wcet"]["ipet_ticks"] > 0
    # the entry is in the cache root, never in the store (report only reads it)
    assert _store_files(d) == before
    assert list((d.parent / "cache" / "reports").glob("*.pickle"))


def test_every_way_of_reading_shares_one_analysis(target, capsys):
    d, calls = target
    _report(d, capsys)
    assert main(["report", str(d), "--full"]) == 0
    assert main(["report", str(d), "--function", "sum"]) == 0
    assert len(calls) == 1
    # --inputs N is another analysis (its own entry)
    _report(d, capsys, "--inputs", "30")
    assert len(calls) == 2
    _report(d, capsys, "--inputs", "30")
    assert len(calls) == 2
    # the number of inputs to measure is no part of an analysis of what is stored
    # (`analyze --inputs 200` on a target of 500, then `report`: computed again)
    toml = d / "wcetfit.toml"
    toml.write_text(toml.read_text().replace("inputs = 40", "inputs = 60"))
    _report(d, capsys)
    assert len(calls) == 2


def test_changed_setting_computes_again(target, capsys):
    d, calls = target
    first = _report(d, capsys)[2]
    toml = d / "wcetfit.toml"
    toml.write_text(toml.read_text() + "\n[wcet]\nexceedance = 1e-3\n")
    second = _report(d, capsys)[2]
    assert len(calls) == 2
    assert second["functions"][0]["wcet"]["exceedance_per_call"] == 1e-3
    assert first["functions"][0]["wcet"]["exceedance_per_call"] != 1e-3


def test_new_measurements_compute_again(target, capsys, monkeypatch):
    d, calls = target
    first = _report(d, capsys)[2]
    # four more inputs measured: the store's files changed
    toml = d / "wcetfit.toml"
    toml.write_text(toml.read_text().replace("inputs = 40", "inputs = 44"))
    assert main(["analyze", str(d), "--no-wait"]) == 0
    n_after_analyze = len(calls)
    assert n_after_analyze == 2                 # analyze analysed the new measurements
    capsys.readouterr()
    _, err, third = _report(d, capsys)
    assert len(calls) == 2                      # analyze kept its report for this one
    assert "a warning of the analysis" in err
    assert third["inputs"] == first["inputs"] + 4


def test_other_code_damaged_entry_and_opt_outs_compute_again(target, capsys, monkeypatch):
    d, calls = target
    first = _report(d, capsys)
    monkeypatch.setattr(analysis_cache, "code_digest", lambda: "another wcetfit")
    assert _report(d, capsys) == first and len(calls) == 2
    for entry in (d.parent / "cache" / "reports").glob("*.pickle"):
        entry.write_bytes(b"not a pickle")
    assert _report(d, capsys) == first and len(calls) == 3
    _report(d, capsys, "--no-cache")
    assert len(calls) == 4
    # what --no-cache computed is kept: the report after it is read back
    assert _report(d, capsys) == first and len(calls) == 4
    monkeypatch.setenv("WCETFIT_NO_CACHE", "1")
    _report(d, capsys)
    _report(d, capsys)
    assert len(calls) == 6


def test_store_digest_leaves_out_the_lock_and_temporaries(tmp_path):
    (tmp_path / "times-f.npz").write_bytes(b"1")
    a = analysis_cache.store_digest(str(tmp_path))
    (tmp_path / "lock").write_text("pid 1")
    (tmp_path / ".tmp-abc").write_bytes(b"half")
    assert analysis_cache.store_digest(str(tmp_path)) == a
    (tmp_path / "times-f.npz").write_bytes(b"2")
    assert analysis_cache.store_digest(str(tmp_path)) != a
    Path(tmp_path / "search-f.npz").write_bytes(b"")
    assert analysis_cache.store_digest(str(tmp_path)) != a


def test_a_checks_fresh_times_do_not_make_the_next_report_compute_again(tmp_path):
    """A check stores its fresh inputs' times under their own seed; they never enter the
    analysis, and counted in the key every check made the next report compute again
    (libbz2: 61 s instead of 1.1 s)."""
    (tmp_path / "counts-f-s1.npz").write_bytes(b"1")
    (tmp_path / "times-f-s1-lfence-r5.npz").write_bytes(b"2")
    a = analysis_cache.store_digest(str(tmp_path), 1)
    (tmp_path / "times-f-s890222121-lfence-r5.npz").write_bytes(b"fresh")
    assert analysis_cache.store_digest(str(tmp_path), 1) == a
    assert analysis_cache.store_digest(str(tmp_path), 890222121) != a
    (tmp_path / "search-f-s1.npz").write_bytes(b"searched")      # the training's: counted
    assert analysis_cache.store_digest(str(tmp_path), 1) != a
