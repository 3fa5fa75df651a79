"""wcetfit.toml validation and the inputs module: precise messages for bad input."""

import textwrap

import numpy as np
import pytest

from wcetfit import target as tg
from wcetfit.errors import InputsError, TargetError

GOOD = """
binary = "lib.so"
functions = ["f"]
prototype = "int f(int *a, int n);"
inputs = "inputs.py"
[measure]
inputs = 20
repeats = 3
seed = 7
[loops]
"f+0x10" = 64
"""

INPUTS = """
def generate(ctx):
    n = int(ctx.rng.integers(1, 10))
    return (ctx.ffi.new("int[]", n), n)
"""


def make(tmp_path, toml=GOOD, inputs=INPUTS):
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    (tmp_path / "inputs.py").write_text(textwrap.dedent(inputs))
    (tmp_path / "wcetfit.toml").write_text(textwrap.dedent(toml))
    return str(tmp_path)


def test_good_target(tmp_path):
    t = tg.load_target(make(tmp_path), repeats=5, inputs=None)
    assert t.functions == ("f",) and t.measure.inputs == 20 and t.measure.repeats == 5
    assert t.measure.seed == 7 and t.loops == {"f+0x10": 64}
    assert t.binary == str(tmp_path / "lib.so")
    assert t.exceedance == 1e-6
    assert t.follow_speed is True


def test_fit_follow_speed(tmp_path):
    t = tg.load_target(make(tmp_path, GOOD + "[fit]\nfollow_speed = false\n"))
    assert t.follow_speed is False


def test_wcet_exceedance(tmp_path):
    t = tg.load_target(make(tmp_path, GOOD + "[wcet]\nexceedance = 1e-9\n"))
    assert t.exceedance == 1e-9
    assert t.observed_paths is True


def test_wcet_misfit_scope(tmp_path):
    assert tg.load_target(make(tmp_path)).misfit == "near"
    t = tg.load_target(make(tmp_path, GOOD + "[wcet]\nmisfit = \"all\"\n"))
    assert t.misfit == "all"


def test_wcet_machine_speed(tmp_path):
    """The slowest speed the bound covers, declared: none by default (the timing run's)."""
    assert tg.load_target(make(tmp_path)).machine_speed is None
    for given, taken in (("1.5", 1.5), ("2", 2.0), ("1", 1.0), ("10", 10.0)):
        t = tg.load_target(make(tmp_path, GOOD + f"[wcet]\nmachine_speed = {given}\n"))
        assert t.machine_speed == taken and isinstance(t.machine_speed, float)


def test_recursion_depth_and_activations(tmp_path):
    t = tg.load_target(make(tmp_path, GOOD + "[recursion]\n\"f\" = 4\n"
                                             "\"g\" = { depth = 10, activations = 257 }\n"))
    assert t.recursion == {"f": 4, "g": 10} and t.recursion_activations == {"g": 257}
    for bad, said in (("{ activations = 3 }", "a recursion fact is a depth D or a table"),
                      ("{ depth = 2, calls = 3 }", "a recursion fact is a depth D or a table"),
                      ("{ depth = 2, activations = 0 }", "activations must be >= 1"),
                      ("0", "a recursion depth must be >= 1")):
        with pytest.raises(TargetError, match=said):
            tg.load_target(make(tmp_path, GOOD + f"[recursion]\n\"g\" = {bad}\n"))


def test_wcet_observed_paths_off(tmp_path):
    t = tg.load_target(make(tmp_path, GOOD + "[wcet]\nobserved_paths = false\n"))
    assert t.observed_paths is False


@pytest.mark.parametrize("toml, message", [
    (GOOD.replace("functions", "function"), "unknown key 'function' \\(did you mean 'functions'"),
    (GOOD.replace('inputs = 20', 'inputs = "20"'), "\\[measure\\] 'inputs': expected an integer"),
    (GOOD.replace('repeats = 3', 'repeats = 0'), "'repeats' must be at least 1"),
    (GOOD.replace('seed = 7', 'sed = 7'), "\\[measure\\]: unknown key 'sed'"),
    # each setting named alone (a bad timeout named warmup too)
    (GOOD.replace('seed = 7', 'seed = 7\ntimeout = -1'),
     "\\[measure\\] 'timeout' must be a finite number of seconds above 0, found -1"),
    (GOOD.replace('seed = 7', 'seed = 7\nwarmup = -2'),
     "\\[measure\\] 'warmup' must be >= 0, found -2$"),
    (GOOD.replace('binary = "lib.so"', ''), "missing required key 'binary'"),
    (GOOD.replace('"lib.so"', '"nope.so"'), "nope.so does not exist"),
    # a directory: every measuring command ended in a traceback (IsADirectoryError)
    (GOOD.replace('"lib.so"', '"/lib"'), "'binary': /lib is a directory, not a binary"),
    (GOOD.replace('["f"]', '[]'), "'functions' is empty"),
    (GOOD.replace('["f"]', '"f"'), "'functions': expected a list"),
    (GOOD.replace('seed = 7', 'seed = 7\nmethod = "fast"'), "'method' must be one of"),
    (GOOD.replace("= 64", "= true"), "\\[loops\\] 'f\\+0x10': expected an integer"),
    (GOOD.replace("= 64", "= {maxi = 3}"), "unknown key 'maxi' \\(did you mean 'max'"),
    ("binary = \n", "Invalid|line 1"),
    (GOOD + "[wcet]\nexceedance = 0.5\n", "\\[wcet\\] 'exceedance' is a probability per call"),
    (GOOD + "[wcet]\nexceedance = 0\n", "\\[wcet\\] 'exceedance' is a probability per call"),
    (GOOD + "[wcet]\nexceedance = \"1e-6\"\n", "\\[wcet\\] 'exceedance': expected a number"),
    (GOOD + "[wcet]\nexcedance = 1e-6\n", "unknown key 'excedance' \\(did you mean 'exceedance'"),
    (GOOD + "[wcet]\nobserved_paths = \"no\"\n", "'observed_paths': expected true or false"),
    (GOOD + "[wcet]\nmisfit = \"some\"\n", "\\[wcet\\] 'misfit' is \"near\" .* or \"all\""),
    (GOOD + "[wcet]\nmachine_speed = 0.5\n", "\\[wcet\\] 'machine_speed' is the slowest .* 1 to 10, found 0.5"),
    (GOOD + "[wcet]\nmachine_speed = 11\n", "\\[wcet\\] 'machine_speed' is .* found 11"),
    (GOOD + "[wcet]\nmachine_speed = nan\n", "\\[wcet\\] 'machine_speed' is .* found nan"),
    (GOOD + "[wcet]\nmachine_speed = inf\n", "\\[wcet\\] 'machine_speed' is .* found inf"),
    (GOOD + "[wcet]\nmachine_speed = \"fast\"\n", "\\[wcet\\] 'machine_speed': expected a number"),
    (GOOD + "[wcet]\nmachine_speed = true\n", "\\[wcet\\] 'machine_speed': expected a number"),
    (GOOD + "[fit]\nfollow_speed = 1\n", "\\[fit\\] 'follow_speed': expected true or false"),
    (GOOD + "[fit]\nfollow = true\n", "unknown key 'follow' \\(did you mean 'follow_speed'"),
])
def test_bad_target_files(tmp_path, toml, message):
    with pytest.raises(TargetError, match=message):
        tg.load_target(make(tmp_path, toml))


def test_a_file_that_is_no_target_file_says_what_was_expected(tmp_path):
    """`wcetfit report lib.so` (a file where the target's folder goes): the TOML parser's
    complaint alone did not say that a folder holding wcetfit.toml was wanted."""
    other = tmp_path / "notes.txt"
    other.write_text("some notes\n")
    with pytest.raises(TargetError, match="not valid TOML: .*is this a wcetfit.toml\\? "
                                          "TARGET_DIR is the folder that holds one"):
        tg.load_target(str(other))
    with pytest.raises(TargetError) as exc:         # the target's own file: no such hint
        tg.load_target(make(tmp_path, "binary = \n"))
    assert "not valid TOML" in str(exc.value) and "is this" not in str(exc.value)


def test_missing_target_file(tmp_path):
    with pytest.raises(TargetError, match="no wcetfit.toml"):
        tg.load_target(str(tmp_path))


def test_inputs_reproducible_per_index(tmp_path):
    import cffi
    t = tg.load_target(make(tmp_path))
    gen = tg.load_inputs_module(t)
    ffi = cffi.FFI()
    a = tg.generate_input(gen, t, ffi, "f", 5)
    b = tg.generate_input(gen, t, ffi, "f", 5)
    assert a[1] == b[1]
    # independent of the inputs drawn before it
    assert tg.input_rng(7, 5).integers(1, 10) == a[1]
    assert np.all([tg.generate_input(gen, t, ffi, "f", i)[1] >= 1 for i in range(20)])


def test_inputs_module_that_raises_names_index_and_line(tmp_path):
    import cffi
    t = tg.load_target(make(tmp_path, inputs="""
        def generate(ctx):
            if ctx.index == 3:
                raise ValueError("bad draw")
            return (None, 1)
        """))
    gen = tg.load_inputs_module(t)
    tg.generate_input(gen, t, cffi.FFI(), "f", 2)
    with pytest.raises(InputsError, match=r"input 3: .*line 4: raise ValueError.*ValueError: bad draw"):
        tg.generate_input(gen, t, cffi.FFI(), "f", 3)


def test_inputs_module_without_generate_or_broken(tmp_path):
    t = tg.load_target(make(tmp_path, inputs="x = 1\n"))
    with pytest.raises(TargetError, match="defines no function generate"):
        tg.load_inputs_module(t)
    t = tg.load_target(make(tmp_path, inputs="import nonexistent_module_xyz\n"))
    with pytest.raises(InputsError, match="importing failed.*ModuleNotFoundError"):
        tg.load_inputs_module(t)


def test_describe_args():
    import cffi
    ffi = cffi.FFI()
    s = tg.describe_args(ffi, (ffi.new("short[]", [1, 2, 3]), 3, 2.5))
    assert s == "(short[3] {1, 2, 3}, 3, 2.5)"
    # chars as byte values, not Python bytes literals
    s = tg.describe_args(ffi, (ffi.new("char[3]", b"\x00\xff\x41"), 3))
    assert s == "(char[3] {0x00, 0xff, 0x41}, 3)"
    # a NULL pointer says so; a pointer is its type (it read "void * (8 bytes)" for
    # NULL and every pointer alike: the pointer's own size)
    s = tg.describe_args(ffi, (ffi.NULL, ffi.cast("char *", 0), ffi.new("int *")))
    assert s == "(NULL, NULL char *, int *)"


def test_prototype_name_one_rule_for_count_and_time():
    """A function named by symbol is declared under it; one named by 0x… address under
    any name, when the prototype declares just that one function."""
    from types import SimpleNamespace

    from wcetfit.errors import MeasurementError
    from wcetfit.measurements import prototype_name

    one = SimpleNamespace(functions={"crc32": None})
    two = SimpleNamespace(functions={"first": None, "second": None})
    assert prototype_name(one, "crc32") == "crc32"
    assert prototype_name(one, "0x47c0") == "crc32"
    assert prototype_name(two, "second") == "second"
    with pytest.raises(MeasurementError, match="declares crc32 but not adler32"):
        prototype_name(one, "adler32")
    with pytest.raises(MeasurementError, match="named by address"):
        prototype_name(two, "0x47c0")


def test_a_bad_command_line_value_is_blamed_on_the_option(tmp_path):
    """`analyze pow --inputs 0` said "wcetfit.toml: [measure] 'inputs' must be at least 1":
    the file was fine.  The option is named; a bad value in the file still names the file."""
    d = make(tmp_path)
    with pytest.raises(TargetError) as exc:
        tg.load_target(d, inputs=0)
    assert str(exc.value).startswith("--inputs must be at least 1")
    with pytest.raises(TargetError, match="^--seed must be >= 0"):
        tg.load_target(d, seed=-1)


def test_arguments_of_arrays_of_arrays_and_structs_read_as_c():
    """An array of arrays is named in C's order and shows its values, not cffi's
    ``<cdata 'short[64]' 0x5614…>`` (libjpeg's jcopy_block_row printed
    ``short[64][8704] {<cdata …>…``); a struct array shows its first fields (a crash report
    of AES_encrypt hid the key's rounds)."""
    import cffi

    from wcetfit.target import describe_args

    ffi = cffi.FFI()
    ffi.cdef("struct key { int rounds; unsigned rd[60]; char *name; };")
    rows = ffi.new("short[][64]", 8704)
    rows[1][0] = 7
    keys = ffi.new("struct key[1]")
    keys[0].rounds = 14
    text = describe_args(ffi, (rows, keys, ffi.new("unsigned char[]", 4)))
    assert text.startswith("(short[8704][64] {{0, 0, 0, …}, {7, 0, 0, …}")
    assert "struct key[1] {{rounds=14, rd={0, 0, 0, …}, name=NULL}}" in text
    assert "unsigned char[4] {0, 0, 0, 0}" in text
    assert "cdata" not in text
    # a struct ffi.new made (cffi owns it) shows its fields; any other pointer its type
    key = ffi.new("struct key *")
    key.rounds = 99
    key.name = ffi.cast("char *", 4096)
    text = describe_args(ffi, (key, ffi.cast("struct key *", 4096)))
    assert text == "(struct key * → {rounds=99, rd={0, 0, 0, …}, name=char *}, struct key *)"
