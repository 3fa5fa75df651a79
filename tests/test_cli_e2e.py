"""End to end through the CLI: bad input gets one line and exit 2, the target's crashes
and hangs are reported with the input, nothing measured is lost, runs resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VICTIM_C = r"""
#include <stddef.h>
/* Sums a[0..n); crashes on n == 13 (null dereference), hangs on n == 17. */
int victim(int *a, int n)
{
    volatile int *bad = NULL;
    int s = 0;
    if (n == 13)
        return *bad;
    while (n == 17)
        s++;
    for (int i = 0; i < n; i++)
        s += (a[i] & 1) ? a[i] : -a[i];
    return s;
}
"""

INPUTS = """
def generate(ctx):
    n = ctx.index % 20 + 1
    return (ctx.ffi.new("int[]", [int(x) for x in ctx.rng.integers(0, 100, n)]), n)
"""

TOML = """
binary = "libvictim.so"
functions = ["victim"]
prototype = "int victim(int *a, int n);"
inputs = "inputs.py"
[measure]
inputs = 40
repeats = 3
timeout = 0.5
[loops]
"victim+0x0" = 1
"""


def make_target(directory, name, c_source, inputs, toml):
    """A target folder: lib<name>.so built from ``c_source`` with gcc -O2, the inputs
    module and wcetfit.toml."""
    (directory / f"{name}.c").write_text(c_source)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(directory / f"lib{name}.so"),
                    str(directory / f"{name}.c")], check=True)
    (directory / "inputs.py").write_text(inputs)
    (directory / "wcetfit.toml").write_text(toml)
    return directory


def wcetfit(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "wcetfit", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


@pytest.fixture()
def victim(tmp_path):
    return make_target(tmp_path, "victim", VICTIM_C, INPUTS,
                       TOML.replace('"victim+0x0" = 1\n', ""))


def one_error_line(res):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr
    return errors[0]


def test_crash_and_hang_reported_other_inputs_kept(victim):
    res = wcetfit("count", str(victim), "--json", str(victim / "c.json"))
    assert res.returncode == 0, res.stderr
    data = json.loads((victim / "c.json").read_text())
    failures = {f["index"]: f for f in data["failures"]}
    # n = index % 20 + 1: n == 13 at inputs 12 and 32, n == 17 at 16 and 36
    assert {i for i, f in failures.items() if f["kind"] == "crash"} == {12, 32}
    assert {i for i, f in failures.items() if f["kind"] == "hang"} == {16, 36}
    assert "SIGSEGV" in failures[12]["message"]
    # the limit says how the [measure] timeout of 0.5 s made it (count: 3 × per input)
    assert failures[16]["message"].startswith(
        "no return after 1.5 s (3 × [measure] timeout = 0.5 s")
    assert failures[12]["arguments"].startswith("(int[13]")
    assert data["indices"] == [i for i in range(40) if i not in (12, 16, 32, 36)]
    assert "input 12" in res.stdout and "crash" in res.stdout

    res = wcetfit("time", str(victim), "--json", str(victim / "t.json"))
    assert res.returncode == 0, res.stderr
    t = json.loads((victim / "t.json").read_text())
    assert {f["index"] for f in t["failures"]} == {12, 16, 32, 36}
    assert len(t["functions"][0]["ticks"]) == 36
    # fewer inputs than stored: the first ones, and the rest said (a check's 200 fresh
    # inputs were shown by `time --seed S` as the first 80, nothing said; 26 = 36 timed
    # less the first 10)
    res = wcetfit("time", str(victim), "--inputs", "10")
    assert res.returncode == 0, res.stderr
    assert "26 more input(s) of seed 1 are stored beyond the first 10 asked for " \
           "(--inputs 40 shows them all)" in res.stderr, res.stderr


def test_analyze_then_reuse_and_report(victim):
    (victim / "wcetfit.toml").write_text(TOML.replace("[loops]\n\"victim+0x0\" = 1\n", ""))
    res = wcetfit("analyze", str(victim), "--json", str(victim / "r.json"),
                  "--html", str(victim / "r.html"))
    assert res.returncode == 0, res.stderr
    report = json.loads((victim / "r.json").read_text())
    assert report["schema"] == "wcetfit.report/3"
    fn = report["functions"][0]
    assert fn["name"] == "victim"
    assert "TSC ticks" in res.stdout and "ns" in res.stdout
    # the machine's speed: followed or not (the victim's calls are short), always said
    speed = fn["machine_speed"]
    assert isinstance(speed["followed"], bool) and (speed["followed"] or speed["reason"])
    assert "machine speed" in res.stdout.lower()
    # the hang's loop: no kept input reaches it, so by the default [wcet] unreached policy
    # it is left out of the bound, and the report says so
    assert fn["wcet"]["ipet_ticks"] is not None
    assert any("no input reached" in w["message"] for w in fn["warnings"])
    assert (victim / "r.html").read_text().count("<svg") >= 1
    # The second run measures nothing new: it is served from the store (the lock file
    # notes each run that holds it).
    before = {n: os.stat(victim / ".wcetfit" / n).st_mtime_ns
              for n in os.listdir(victim / ".wcetfit") if n != "lock"}
    res = wcetfit("report", str(victim), "--json", "-")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["functions"][0]["name"] == "victim"
    after = {n: os.stat(victim / ".wcetfit" / n).st_mtime_ns
             for n in os.listdir(victim / ".wcetfit") if n != "lock"}
    assert before == after
    # another repeat count than the one stored: one line naming the timing sets stored
    # and the option that reports them (a report after `analyze --repeats R` once failed
    # with only "run wcetfit time")
    line = one_error_line(wcetfit("report", str(victim), "--repeats", "7"))
    assert "no times stored" in line and "7 repeats" in line
    assert "stored: 3 repeats" in line and "pass --repeats 3" in line
    # the remedy keeps the options given (it said `wcetfit time DIR`, which times 3)
    assert f"wcetfit time {victim} --seed 1 --repeats 7`" in line
    res = wcetfit("report", str(victim), "--repeats", "3", "--json", "-")
    assert res.returncode == 0, res.stderr
    # wcetfit.toml asking for repeats none was timed with, and no --repeats: the one set
    # stored is reported, and that is said (after `analyze --repeats 3`, a plain
    # `report` used to stop at the error above)
    toml = (victim / "wcetfit.toml").read_text()
    assert "repeats = 3" in toml
    (victim / "wcetfit.toml").write_text(toml.replace("repeats = 3", "repeats = 8"))
    try:
        res = wcetfit("report", str(victim), "--json", "-")
        assert res.returncode == 0, res.stderr
        assert "using the timing set of 3 repeats stored" in res.stderr
        assert json.loads(res.stdout)["functions"][0]["name"] == "victim"
    finally:
        (victim / "wcetfit.toml").write_text(toml)


def test_interrupted_count_resumes_without_loss(victim):
    toml = (victim / "wcetfit.toml").read_text().replace("inputs = 40", "inputs = 4000")
    (victim / "wcetfit.toml").write_text(toml)
    # inputs that neither crash nor hang (n in 1..10), slow enough to draw (2 ms each)
    # that the run is still going when the interrupt comes
    (victim / "inputs.py").write_text(
        "import time\n" + INPUTS.replace("ctx.index % 20 + 1", "ctx.index % 10 + 1")
        .replace("def generate(ctx):\n", "def generate(ctx):\n    time.sleep(0.002)\n"))
    # (a suite started in the background by a shell ignores SIGINT, and its children
    # inherit that: the interrupt never reached the count, which ran to its end)
    proc = subprocess.Popen([sys.executable, "-m", "wcetfit", "count", str(victim)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    store = victim / ".wcetfit"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any(
                n.startswith("counts-") for n in (os.listdir(store) if store.exists() else [])):
            time.sleep(0.2)
        assert proc.poll() is None, "the count finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:   # never leave a measuring process behind
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    res = wcetfit("count", str(victim), "--json", str(victim / "c.json"))
    assert res.returncode == 0, res.stderr
    data = json.loads((victim / "c.json").read_text())
    assert data["indices"] == list(range(4000)) and not data["failures"]


@pytest.mark.parametrize("change, message", [
    (lambda d: d.joinpath("wcetfit.toml").write_text(TOML.replace("functions", "function")),
     "unknown key 'function'"),
    (lambda d: d.joinpath("wcetfit.toml").write_text(TOML.replace("inputs = 40", "inputs = 'x'")),
     "'inputs': expected an integer"),
    (lambda d: d.joinpath("wcetfit.toml").write_text(TOML.replace("int victim(int *a, int n);",
                                                                  "int victim(int *a, int n")),
     "prototype"),
    (lambda d: d.joinpath("inputs.py").write_text(
        "def generate(ctx):\n    if ctx.index == 5:\n        raise KeyError('oops')\n"
        "    return (ctx.ffi.new('int[]', 1), 1)\n"),
     "input 5: generate\\(\\) raised at inputs.py line 3: raise KeyError\\('oops'\\)"),
    (lambda d: d.joinpath("inputs.py").write_text(
        "def generate(ctx):\n    return (ctx.ffi.new('int[]', 1),)\n"),
     "1 argument|takes 2"),
    (lambda d: d.joinpath("wcetfit.toml").write_text(TOML.replace('["victim"]', '["victm"]')),
     "victm.*victim"),
])
def test_bad_input_one_line_exit_2(victim, change, message):
    import re
    (victim / "wcetfit.toml").write_text(TOML.replace('"victim+0x0" = 1\n', ""))
    change(victim)
    line = one_error_line(wcetfit("count", str(victim)))
    assert re.search(message, line), line


def test_store_from_future_version_refused(victim):
    assert wcetfit("count", str(victim), "--inputs", "3").returncode == 0
    meta = json.loads((victim / ".wcetfit" / "store.json").read_text())
    meta["format"] += 1
    (victim / ".wcetfit" / "store.json").write_text(json.dumps(meta))
    line = one_error_line(wcetfit("count", str(victim), "--inputs", "3"))
    assert "newer wcetfit" in line
    assert wcetfit("count", str(victim), "--inputs", "3", "--fresh").returncode == 0


def test_changed_binary_refused_until_fresh(victim):
    assert wcetfit("count", str(victim), "--inputs", "3").returncode == 0
    src = (victim / "victim.c").read_text().replace("-a[i]", "-2 * a[i]")
    (victim / "victim.c").write_text(src)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(victim / "libvictim.so"),
                    str(victim / "victim.c")], check=True)
    line = one_error_line(wcetfit("count", str(victim), "--inputs", "3"))
    assert "binary changed" in line and "--fresh" in line


TWO_C = r"""
static int helper(int x) { return x * 3 + 1; }
int __attribute__((noinline)) first(int *a, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += (a[i] & 1) ? helper(a[i]) : a[i];
    return s;
}
long second(const short *x, int n)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        s += x[i] > 0 ? x[i] : -x[i];
    return s;
}
"""

TWO_INPUTS = """
def generate(ctx):
    n = int(ctx.rng.integers(0, 64))
    if ctx.function == "first":
        return (ctx.ffi.new("int[]", [int(v) for v in ctx.rng.integers(0, 100, max(n, 1))]), n)
    return (ctx.ffi.new("short[]", [int(v) for v in ctx.rng.integers(-99, 99, max(n, 1))]), n)
"""


def test_several_functions_each_measured_and_reported(tmp_path):
    make_target(tmp_path, "two", TWO_C, TWO_INPUTS,
                'binary = "libtwo.so"\nfunctions = ["first", "second"]\n'
                'prototype = "int first(int *a, int n); long second(const short *x, int n);"\n'
                'inputs = "inputs.py"\n[measure]\ninputs = 60\nrepeats = 3\n')
    res = wcetfit("analyze", str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema"] == "wcetfit.report/3"
    roots = [r["root"] for r in doc["reports"]]
    assert roots == ["first", "second"]
    # every function the measured call reached has its own section
    names = {f["name"] for r in doc["reports"] for f in r["functions"]}
    assert {"first", "second"} <= names
    # each root's bound: (point + margin) × the product of its three dispersion factors,
    # or the joint factor (calls over their input's prediction) where that is smaller but
    # not below call × machine speed, and never below the slowest own-time call over the
    # point ("cover", when above 1) nor one event short of an interrupt ("events")
    for r in doc["reports"]:
        w = r["functions"][0]["wcet"]
        f = w["dispersion_factors"]
        assert {"misfit", "call", "machine_speed"} <= set(f) <= {"misfit", "call",
                                                                 "machine_speed", "joint",
                                                                 "cover", "events"}
        assert isinstance(w["path_envelopes"], list)
        product = f["misfit"] * f["call"] * f["machine_speed"]
        floor = f["call"] * f["machine_speed"]
        taken = (min(product, max(f["joint"], floor)) if f.get("joint") is not None
                 else product)
        taken = max(taken, f.get("cover", 1.0), f.get("events", 1.0))
        assert 1 + w["dispersion"] == pytest.approx(max(1.0, taken))
        assert w["ipet_ticks"] == pytest.approx(
            (w["point_ticks"] + w["margin_ticks"]) * (1 + w["dispersion"]))
    assert "first" in res.stdout and "second" in res.stdout


def _loop_key(lib, function):
    """"function+0xOFFSET" of the function's first loop header, from the static model."""
    from wcetfit.static.binary import load_model
    fn = load_model(str(lib), [function]).function(function)
    return f"{function}+{min(lp.header for lp in fn.loops) - fn.address:#x}"


def _two_toml(facts):
    return ('binary = "libtwo.so"\nfunctions = ["first", "second"]\n'
            'prototype = "int first(int *a, int n); long second(const short *x, int n);"\n'
            'inputs = "inputs.py"\n[measure]\ninputs = 40\nrepeats = 3\n' + facts)


def test_a_fact_of_one_measured_function_is_no_fact_of_another(tmp_path):
    # [loops] of `first` alone: `second` never calls it, and its bound was refused with
    # "no function 'first' among the analysed ones" after both were measured
    make_target(tmp_path, "two", TWO_C, TWO_INPUTS, _two_toml(""))
    key = _loop_key(tmp_path / "libtwo.so", "first")
    (tmp_path / "wcetfit.toml").write_text(_two_toml(f'[loops]\n"{key}" = 63\n'))
    res = wcetfit("analyze", str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    sources = {r["root"]: {lo["name"]: lo["source"] for lo in r["functions"][0]["wcet"]["loops"]}
               for r in doc["reports"]}
    assert sources["first"][key] == "fact"
    assert sources["second"] and "fact" not in sources["second"].values()


@pytest.mark.parametrize("facts, says", [
    ('[loops]\n"frist+0x10" = 5\n', "no function 'frist' among the analysed ones"),
    ('[flow]\nn = "N(secnod+0x10) <= 5"\n', "no function 'secnod'"),
    ('[recursion]\n"helpr" = 3\n', "no function 'helpr'"),
    ('[loops]\n"first+0x1" = 5\n', "is not a loop header of first"),
])
def test_a_misspelt_fact_is_refused_before_anything_is_measured(tmp_path, facts, says):
    make_target(tmp_path, "two", TWO_C, TWO_INPUTS, _two_toml(facts))
    res = wcetfit("analyze", str(tmp_path))
    line = one_error_line(res)
    assert says in line
    if "analysed ones" in line and "loop header" not in line:
        assert "none in the binary" in line         # not merely unreached statically
    # nothing was counted or timed: the refusal came first
    store = tmp_path / ".wcetfit"
    assert not store.exists() or not any(p.suffix == ".npz" for p in store.rglob("*"))


# --- wcetfit split, end to end ---------------------------------------------------------------

PAIR_C = r"""
/* The two halves of the loop body always run together: only a probe between them tells
 * their costs apart.  The multiplies make the second half clearly the longer one. */
unsigned long long pair(const unsigned char *sel, int n, unsigned long long x)
{
    for (int i = 0; i < n; i++) {
        x ^= sel[i];
        if (sel[i] & 1)
            x = x * 0x9E3779B97F4A7C15ull + 1;
        __asm__ volatile("" ::: "memory");   /* a block boundary gcc keeps */
        x = x * 0xBF58476D1CE4E5B9ull;
        x = x * 0x94D049BB133111EBull;
        x ^= x >> 29;
    }
    return x;
}
"""

PAIR_INPUTS = """
import numpy as np
def generate(ctx):
    n = int(ctx.rng.integers(0, 200))
    sel = ctx.rng.integers(0, 256, max(n, 1)).astype(np.uint8)
    return (ctx.ffi.new("unsigned char[]", sel.tolist()), n, 12345)
"""


@pytest.fixture()
def pair(tmp_path):
    return make_target(tmp_path, "pair", PAIR_C, PAIR_INPUTS,
                       'binary = "libpair.so"\nfunctions = ["pair"]\n'
                       'prototype = "unsigned long long pair(const unsigned char *sel, '
                       'int n, unsigned long long x);"\ninputs = "inputs.py"\n'
                       "[measure]\ninputs = 120\nrepeats = 5\n")


def test_split_auto_list_drop_through_the_cli(pair):
    d = str(pair)
    res = wcetfit("split", d)   # nothing stored: measures the traced counts and times first
    assert res.returncode == 0, res.stderr
    assert "running the count run with traces" in res.stdout
    assert "running the timing run" in res.stdout
    res = wcetfit("split", d, "--auto", "--json", "-")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "wcetfit.split/1" and doc["rounds"]
    assert "round 1:" in res.stderr and "time spent" in res.stderr
    first = doc["rounds"][0]
    assert first["fit_whole_calls_only"]["rank"] < first["fit"]["rank"]   # probes added rank
    assert isinstance(first["excluded"], list)
    # the rounds persist; --list shows them, --drop removes one, a missing one is an error
    res = wcetfit("split", d, "--list")
    assert res.returncode == 0 and "round 1 (" in res.stdout
    res = wcetfit("split", d, "--drop", "1")
    assert res.returncode == 0 and "dropped round 1" in res.stdout
    one_error_line(wcetfit("split", d, "--drop", "1"))
    one_error_line(wcetfit("split", d, "--at", "0x1"))


def test_the_search_steps_fit_does_not_repeat_the_fits_warnings(monkeypatch, caplog):
    """analyze fits once for the search to score candidates and once more for the report,
    which carries every warning of the fit: the first fit's warnings are not logged (the
    machine's speed was said twice on stderr); the search's own warnings still are."""
    import logging
    from types import SimpleNamespace

    from wcetfit.cli import analyze

    def fake_search(s, root, options, progress=None, wait=True):
        logging.getLogger("wcetfit.fit.solve").warning("the machine ran up to 1.4× slower")
        logging.getLogger("wcetfit.search.workflow").warning("candidate 3 crashed")

    monkeypatch.setattr("wcetfit.search.workflow.run_search", fake_search)
    monkeypatch.setattr("wcetfit.search.store.load_search_rows", lambda *a, **k: None)
    monkeypatch.setattr(analyze, "_mostly_failed", lambda s, root: None)   # no store here
    target = SimpleNamespace(search_budget=10, search_timed=2, search_timed_budget=0,
                             measure=SimpleNamespace(seed=1, warmup=0))
    with caplog.at_level(logging.WARNING):
        analyze._search(SimpleNamespace(target=target, store=None), ["f"], lambda *a: None)
    said = [r.getMessage() for r in caplog.records]
    assert said == ["candidate 3 crashed"]
    assert logging.getLogger("wcetfit.fit").level == logging.NOTSET     # restored


def test_a_long_step_without_a_bar_says_it_is_still_working(capsys):
    """brotli's encoder: after 19 s of measuring, a quarter of an hour with nothing on the
    terminal (the fit and the bound of 894 loops).  A step past its threshold says so,
    and how long it took."""
    import time

    from wcetfit.cli.progress import still_working

    with still_working("analysing f (fit, bound, report)", after=0.05, every=10):
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert "analysing f (fit, bound, report): 0 s so far" in err
    assert "analysing f (fit, bound, report): done in 0 s" in err
    with still_working("quick", after=5):
        pass
    assert capsys.readouterr().err == ""
