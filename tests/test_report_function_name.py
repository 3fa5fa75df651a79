"""``report --function NAME`` takes the name wcetfit.toml gives the measured function.

libm's ``powf`` is an IFUNC: the model (and the report) name the implementation its
resolver selects, ``powf@impl+0x72ec0``; ``remainder`` shares its address with ``drem``,
the name the model prefers.  ``wcetfit report --function powf`` was refused ("not a
measured function … the report has powf@impl+0x72ec0", exit 2), as was ``--function
remainder``.  Now the name of wcetfit.toml (and any other name of the function, the
model's included) shows that function's tables, under the model's name, with one line
saying which implementation or alias it is.

Skips, saying so, when libm or the symbol is absent, or this libm names the function as
asked (no IFUNC, no preferred alias): then there is nothing to map."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from smalltarget import write_target

LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")


def _model_name(function: str) -> str:
    from wcetfit.errors import FunctionNotFound
    from wcetfit.static import binary

    if not LIBM.exists():
        pytest.skip(f"{LIBM} absent: --function {function} is not checked")
    try:
        name = binary.load_model(str(LIBM), [function], with_callees=False) \
            .function(function).name
    except (FunctionNotFound, KeyError):
        pytest.skip(f"{LIBM} has no {function}: --function {function} is not checked")
    if name == function:
        pytest.skip(f"this libm's {function} is reported as {function} (no IFUNC, no "
                    "preferred alias): nothing to map")
    return name


def _wcetfit(*args):
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def _analyzed(tmp_path, monkeypatch, function: str, prototype: str, body: str) -> Path:
    # a timing slot of its own: what is checked is the naming, not the times
    monkeypatch.setenv("WCETFIT_MACHINE_LOCK", str(tmp_path / "timing.lock"))
    d = write_target(tmp_path / function, str(LIBM), function, prototype, body,
                     inputs=12, repeats=2)
    res = _wcetfit("analyze", str(d), "--no-wait")
    assert res.returncode == 0, res.stderr
    return d


def _tables_of(out: str, name: str) -> bool:
    return f"Blocks of {name}" in out and f"WCET of {name}" in out


def _function_report(d, name: str, model_name: str) -> str:
    """``report --function name``'s first line, after checking it printed ``model_name``'s
    tables."""
    res = _wcetfit("report", str(d), "--function", name)
    assert res.returncode == 0, res.stderr
    assert _tables_of(res.stdout, model_name), res.stdout[:2000]
    return res.stdout.splitlines()[0]


def test_report_function_takes_the_ifunc_name_of_wcetfit_toml(tmp_path, monkeypatch):
    impl = _model_name("powf")
    assert "@impl+" in impl or impl != "powf"
    d = _analyzed(tmp_path, monkeypatch, "powf", "float powf(float x, float y);",
                  "    return (float(ctx.rng.uniform(-10.0, 10.0)), "
                  "float(ctx.rng.uniform(-10.0, 10.0)))")
    first = _function_report(d, "powf", impl)
    # which implementation it is, said where the tables are read
    assert first.startswith("--function powf:") and impl in first and "IFUNC" in first, first
    # the model's own name is taken as before, without the line
    res = _wcetfit("report", str(d), "--function", impl)
    assert res.returncode == 0 and _tables_of(res.stdout, impl), res.stderr
    assert not res.stdout.startswith("--function")
    # --html with the toml name: that function's page
    res = _wcetfit("report", str(d), "--function", "powf", "--html", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    assert impl in (tmp_path / "r.html").read_text()
    # a name that is none of them: still refused, the toml name listed beside the model's
    res = _wcetfit("report", str(d), "--function", "nosuchfunction")
    assert res.returncode == 2
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"{impl} (powf in wcetfit.toml)" in errors[0], errors[0]
    # ... before the analysis, with nothing else to write: the report is not computed
    # (libbz2's took 62 s before the refusal, its warnings printed first)
    from wcetfit.cli import main
    import wcetfit.pipeline

    def computed(*_a, **_k):
        raise AssertionError("the analysis ran for an unknown --function")
    monkeypatch.setattr(wcetfit.pipeline, "analyze_stage", computed)
    monkeypatch.setenv("WCETFIT_NO_CACHE", "1")
    assert main(["report", str(d), "--function", "nosuchfunction"]) == 2


def test_report_function_takes_an_alias_the_model_does_not_prefer(tmp_path, monkeypatch):
    shown = _model_name("remainder")           # drem: the same address, a preferred name
    d = _analyzed(tmp_path, monkeypatch, "remainder", "double remainder(double x, double y);",
                  "    return (float(ctx.rng.uniform(-1000.0, 1000.0)), "
                  "float(ctx.rng.uniform(-100.0, 100.0)))")
    first = _function_report(d, "remainder", shown)
    assert first.startswith("--function remainder:") and shown in first, first
    # the one-screen summary says so beside the heading (it named drem alone)
    res = _wcetfit("report", str(d))
    assert res.returncode == 0, res.stderr
    assert f"{shown} at " in res.stdout
    assert "(wcetfit.toml's remainder: the same function)" in res.stdout


def test_an_unknown_function_among_hundreds_gets_the_closest_names_not_all():
    """libcrypto's SHA256 reaches 300 functions: ``--function nosuch`` printed one error
    line of 6.8 KB naming every one.  Beyond a dozen, the closest names, the measured
    function and how many there are."""
    import argparse
    from types import SimpleNamespace

    import pytest

    from wcetfit.cli.report import emit
    from wcetfit.errors import WcetfitError

    names = ["SHA256"] + [f"sub_{i:x}" for i in range(300)] + ["SHA256_Update"]
    report = SimpleNamespace(root="SHA256",
                             functions=tuple(SimpleNamespace(name=n) for n in names))
    args = argparse.Namespace(function="SHA256_Updat", json=None, html=None, full=False)
    with pytest.raises(WcetfitError) as exc:
        emit([SimpleNamespace(root="SHA256", report=report)], args)
    said = str(exc.value)
    assert len(said) < 300, said
    assert "did you mean SHA256_Update" in said and "measured: SHA256" in said
    assert "302 functions in all" in said
