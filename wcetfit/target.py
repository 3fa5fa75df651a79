"""The target: ``wcetfit.toml`` and its inputs module.

A target names a binary, the function(s) to measure, their C prototypes and a Python
module whose ``generate(ctx)`` builds one call's arguments.  Everything is validated
here, before anything is measured, with messages that say which key, what was found
and what was expected.

Inputs are reproducible per index: input ``i`` of seed ``s`` is drawn from
``numpy.random.default_rng([s, i])``, so every command (count, time, split) and every
restarted child process sees the same argument bytes for the same input without
replaying the inputs before it.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import tomllib
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from wcetfit.errors import InputsError, TargetError

log = logging.getLogger(__name__)

TARGET_FILE = "wcetfit.toml"

# Fence methods the timing harness knows (see instrument/wf_tsc.h); "auto" = calibrated choice.
TIMING_METHODS = ("auto", "lfence", "cpuid", "rdtscp", "mfence", "cpuid_inside")


@dataclass(frozen=True)
class MeasureSettings:
    inputs: int = 500          # how many generated inputs
    repeats: int = 10          # timed calls per input
    seed: int = 1
    # untimed calls of an input right before each of its timed calls.  0: a timed call
    # follows the previous input's calls, as a call in a stream of different data does;
    # calls of its own input first train the branch predictor on the very data timed, the
    # best case (measured with 3: adpcm's calls 3.0× faster at the median, statemachine's
    # 2.5×, libm's remquo 5× on some operands; wcetfit.timing.run)
    warmup: int = 0
    timeout: float = 10.0      # seconds one call may take before it counts as a hang
    method: str = "auto"       # TSC fence method
    trace_cap: int = 1 << 22   # block-trace entries kept per input (split workflow)
    # the values the function returns when it rejects its input, as (name, value): the
    # report says when most timed inputs returned one (wcetfit.timing.state.error_returns).
    # Written `error_returns = {BROTLI_DECODER_RESULT_ERROR = 0}` or `[0]`; none: a value
    # below zero is an error code.  init writes the members of a returned enum named for
    # errors
    error_returns: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Target:
    directory: str             # absolute
    path: str                  # the wcetfit.toml
    binary: str                # absolute path
    functions: tuple[str, ...]
    prototype: str
    cdef: str
    inputs_module: str         # absolute path of the inputs module
    measure: MeasureSettings
    # "fn+0xOFF"/"0xADDR" -> back-edge traversals per entry, or {max = N, total = T}
    loops: Mapping[str, Any] = field(default_factory=dict)
    recursion: Mapping[str, int] = field(default_factory=dict)   # function -> max depth
    # [recursion] "f" = {depth = D, activations = A}: most activations of f per call of the
    # analysed function (a recursion bounded per level alone multiplies: a loop of 9
    # recursive calls over 10 levels allows 9^10)
    recursion_activations: Mapping[str, int] = field(default_factory=dict)
    # [wcet] exceedance: the probability per call with which a single undisturbed call may
    # exceed the bound's call-dispersion factor (see wcetfit.wcet.dispersion.call_dispersion)
    exceedance: float = 1e-6
    # [wcet] observed_paths: keep the worst path within the loop envelopes the inputs showed
    # (wcetfit.wcet.envelope); off, only the CFG, loop bounds and count relations limit it
    observed_paths: bool = True
    # [wcet] unreached: blocks no input reached are left out of the worst path ("observed",
    # listed among the bound's warnings), or must be bounded like the rest ("require")
    unreached: str = "observed"
    # [wcet] misfit: the model's error at the worst path is taken from the inputs near it
    # ("near": predicted within a quarter of it, when 20 or more are; inputs predicted and
    # measured below it are left out, and said), or from every input ("all"); see
    # wcetfit.wcet.dispersion.MisfitScope
    misfit: str = "near"
    # [wcet] machine_speed: the slowest the machine may run the function, as a factor over
    # the timing run's fast end, that the bound must cover (≥ 1; None: the slowest period
    # the timing run saw).  On a shared machine a later period can be slower than any the
    # timing run met (this project's VM: up to ×2 for seconds); the bound takes the larger
    # of this and the measured one (wcetfit.wcet.dispersion.call_dispersion)
    machine_speed: float | None = None
    # [fit] follow_speed: divide the machine's speed over the timing run out of the calls
    # before fitting (wcetfit.timing.speed); off, the fit takes the calls as measured
    follow_speed: bool = True
    # [fit] costs: "physical" fits every block cost ≥ 0 and ε ≥ its calibrated floor
    # (wcetfit.fit.physical); "linear" is unconstrained least squares, whose costs may
    # come out negative where the inputs do not separate the blocks
    fit_costs: str = "physical"
    # [search] budget: candidates the worst-case search of `analyze` counts (0: no search);
    # timed: how many of the best it times and keeps as inputs (wcetfit.search)
    search_budget: int = 300
    search_timed: int = 10
    # timed_budget: candidates the search's second phase times, ranked by their measured
    # time (wcetfit.search.timed: data-dependent costs the counts cannot rank); 0: none
    search_timed_budget: int = 60
    # [flow]: name -> linear constraint over block counts per call, e.g.
    # "16*N(adler32_z+0x80) + N(adler32_z+0x417) <= 6000" (wcetfit.wcet.flowfacts)
    flow: Mapping[str, str] = field(default_factory=dict)
    # [timing] activations: take per-activation rows in `analyze` (wcetfit.pipeline
    # activation_step): "auto" when the root reaches own functions that can be timed,
    # "on" always (an error if they cannot be taken), "off" never.  Off by default for
    # now: on library functions with few inputs per callee the per-activation fits leave
    # costs without a finite interval, and the bound is then not computed (README).
    activations: str = "off"

    @property
    def store_dir(self) -> str:
        return os.path.join(self.directory, ".wcetfit")


_TOP_KEYS: dict[str, tuple[type, ...]] = {
    "binary": (str,), "functions": (list,), "prototype": (str,), "cdef": (str,),
    "inputs": (str,), "measure": (dict,), "loops": (dict,), "recursion": (dict,),
    "wcet": (dict,), "fit": (dict,), "search": (dict,), "flow": (dict,), "timing": (dict,),
}
_REQUIRED = ("binary", "functions", "prototype", "inputs")
_WCET_KEYS: dict[str, tuple[type, ...]] = {"exceedance": (float, int), "observed_paths": (bool,),
                                           "unreached": (str,), "misfit": (str,),
                                           "machine_speed": (float, int)}
UNREACHED_POLICIES = ("observed", "require")
MISFIT_SCOPES = ("near", "all")
# [wcet] machine_speed above this is no slowdown of a running machine but a different one
# (time on the machine the bound is for)
MAX_MACHINE_SPEED = 10.0
_FIT_KEYS: dict[str, tuple[type, ...]] = {"follow_speed": (bool,), "costs": (str,)}
FIT_COSTS = ("physical", "linear")
_SEARCH_KEYS: dict[str, tuple[type, ...]] = {"budget": (int,), "timed": (int,),
                                             "timed_budget": (int,)}
_TIMING_KEYS: dict[str, tuple[type, ...]] = {"activations": (str, bool)}
_MEASURE_KEYS: dict[str, tuple[type, ...]] = {
    "inputs": (int,), "repeats": (int,), "seed": (int,), "warmup": (int,),
    "timeout": (int, float), "method": (str,), "trace_cap": (int,),
    "error_returns": (list, dict),
}


# Sanity limits: beyond them a run would exhaust memory or never end (the arrays of one
# run are inputs x repeats floats; a seed must fit numpy's SeedSequence).
_MEASURE_MAX = {"inputs": 10_000_000, "repeats": 100_000, "warmup": 100_000,
                "trace_cap": 2**31 - 1, "seed": 2**64 - 1}


def _typename(types_: tuple[type, ...]) -> str:
    names = {str: "a string", list: "a list", dict: "a table", int: "an integer",
             float: "a number", bool: "true or false"}
    return " or ".join(names.get(t, t.__name__) for t in types_)


def _check_type(where: str, value: Any, types_: tuple[type, ...]) -> None:
    # bool is an int subclass in Python; in a target file it is never meant as a number.
    if (isinstance(value, bool) and bool not in types_) or not isinstance(value, types_):
        raise TargetError(f"{where}: expected {_typename(types_)}, found "
                          f"{type(value).__name__} {value!r}")


def _unknown_key(where: str, key: str, allowed: Mapping[str, Any]) -> TargetError:
    import difflib
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return TargetError(f"{where}: unknown key {_q(key)}{hint}; allowed: {', '.join(allowed)}")


def _q(key: str) -> str:
    """A key of the user's file, quoted for a one-line message (control characters escaped)."""
    return "'" + "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                         for c in key) + "'"


def _error_returns(where: str, value: list | dict) -> tuple[tuple[str, int], ...]:
    """[measure] error_returns as (name, value) pairs: a table of names to values, or a
    list of values (named "")."""
    pairs = list(value.items()) if isinstance(value, dict) else [("", v) for v in value]
    for name, v in pairs:
        _check_type(f"{where}{f' {_q(name)}' if name else ''}", v, (int,))
        if not -(1 << 63) <= v < (1 << 64):
            raise TargetError(f"{where}: {v} is no 64-bit return value")
    return tuple((str(n), int(v)) for n, v in pairs)


def find_target_file(target_dir: str) -> str:
    path = os.path.abspath(target_dir)
    if os.path.isdir(path):
        path = os.path.join(path, TARGET_FILE)
    if not os.path.isfile(path):
        raise TargetError(f"{target_dir}: no {TARGET_FILE} found "
                          f"(a target directory holds a {TARGET_FILE})")
    return path


def load_target(target_dir: str, **overrides: Any) -> Target:
    """Read and validate ``TARGET_DIR/wcetfit.toml``.

    ``overrides`` replace [measure] settings (the CLI's --inputs/--seed/--repeats);
    None values are ignored.
    """
    path = find_target_file(target_dir)
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        # a file given in place of the target's folder that is no TOML at all (a binary, a
        # source file) gets the parser's complaint and what was expected instead
        given = ("" if os.path.basename(path) == TARGET_FILE else
                 f" (is this a {TARGET_FILE}? TARGET_DIR is the folder that holds one)")
        raise TargetError(f"{path}: not valid TOML: {exc}{given}") from None
    except UnicodeDecodeError as exc:
        raise TargetError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise TargetError(f"{path}: arrays or tables nested too deeply") from None
    except OSError as exc:
        raise TargetError(f"{path}: {exc.strerror}") from None

    for key, value in raw.items():
        if key not in _TOP_KEYS:
            raise _unknown_key(path, key, _TOP_KEYS)
        _check_type(f"{path}: '{key}'", value, _TOP_KEYS[key])
    for key in _REQUIRED:
        if key not in raw:
            raise TargetError(f"{path}: missing required key '{key}'")

    directory = os.path.dirname(path)
    binary = raw["binary"]
    binary = binary if os.path.isabs(binary) else os.path.join(directory, binary)
    if not os.path.exists(binary):
        raise TargetError(f"{path}: 'binary': {binary} does not exist"
                          + (" (run `make setup` to build the samples)" if "samples" in binary
                             else ""))
    if os.path.isdir(binary):
        # (every measuring command ended in a traceback: IsADirectoryError, hashing it)
        raise TargetError(f"{path}: 'binary': {binary} is a directory, not a binary: name "
                          "the library file (e.g. /lib/x86_64-linux-gnu/libz.so.1)")

    functions = raw["functions"]
    if not functions:
        raise TargetError(f"{path}: 'functions' is empty: name at least one function")
    for i, name in enumerate(functions):
        _check_type(f"{path}: 'functions'[{i}]", name, (str,))

    inputs_module = raw["inputs"]
    inputs_module = (inputs_module if os.path.isabs(inputs_module)
                     else os.path.join(directory, inputs_module))
    if not os.path.isfile(inputs_module):
        raise TargetError(f"{path}: 'inputs': {inputs_module} does not exist")

    measure_raw = dict(raw.get("measure", {}))
    for key, value in measure_raw.items():
        if key not in _MEASURE_KEYS:
            raise _unknown_key(f"{path}: [measure]", key, _MEASURE_KEYS)
        _check_type(f"{path}: [measure] '{key}'", value, _MEASURE_KEYS[key])
    for key, value in overrides.items():
        if value is not None:
            measure_raw[key] = value
    if "error_returns" in measure_raw:
        measure_raw["error_returns"] = _error_returns(f"{path}: [measure] 'error_returns'",
                                                      measure_raw["error_returns"])
    measure = MeasureSettings(**measure_raw)

    def origin(key: str) -> str:
        # a value from the command line is the option's fault, not the file's
        return f"--{key}" if overrides.get(key) is not None else f"{path}: [measure] '{key}'"

    for key in ("inputs", "repeats", "trace_cap"):
        if getattr(measure, key) < 1:
            raise TargetError(f"{origin(key)} must be at least 1, found {getattr(measure, key)}")
    # each named alone: "'warmup' must be >= 0 and 'timeout' > 0" named both where only
    # the timeout was wrong
    if measure.warmup < 0:
        raise TargetError(f"{path}: [measure] 'warmup' must be >= 0, found {measure.warmup}")
    if not measure.timeout > 0 or not math.isfinite(measure.timeout):
        raise TargetError(f"{path}: [measure] 'timeout' must be a finite number of seconds "
                          f"above 0, found {measure.timeout}")
    if measure.seed < 0:
        raise TargetError(f"{origin('seed')} must be >= 0, found {measure.seed}")
    for key, most in _MEASURE_MAX.items():
        if getattr(measure, key) > most:
            raise TargetError(f"{origin(key)} must be at most {most:,}, "
                              f"found {getattr(measure, key):,}")
    if measure.method not in TIMING_METHODS:
        raise TargetError(f"{path}: [measure] 'method' must be one of "
                          f"{', '.join(TIMING_METHODS)}, found {measure.method!r}")

    loops = raw.get("loops", {})
    for key, value in loops.items():
        where = f"{path}: [loops] {_q(key)}"
        if isinstance(value, dict):
            # {max = N, total = T}: per entry, and/or in total per call (see wcetfit.wcet.loops)
            for k, v in value.items():
                if k not in ("max", "total"):
                    raise _unknown_key(where, k, {"max": 0, "total": 0})
                _check_type(f"{where}.{k}", v, (int,))
                if v < 0:
                    raise TargetError(f"{where}.{k}: a loop bound must be >= 0")
            if not value:
                raise TargetError(f"{where}: give max = N (per entry) and/or total = T")
            continue
        _check_type(where, value, (int, dict))
        if value < 0:
            raise TargetError(f"{where}: a loop bound must be >= 0")
    recursion: dict[str, int] = {}
    recursion_activations: dict[str, int] = {}
    for key, value in raw.get("recursion", {}).items():
        where = f"{path}: [recursion] {_q(key)}"
        _check_type(where, value, (int, dict))
        if isinstance(value, dict):
            extra = set(value) - {"depth", "activations"}
            if extra or "depth" not in value:
                raise TargetError(f"{where}: a recursion fact is a depth D or a table "
                                  f"{{depth = D, activations = A}} (A: most activations per "
                                  f"call of the analysed function)")
            for k in ("depth", "activations"):
                if k in value:
                    _check_type(f"{where} {k}", value[k], (int,))
                    if value[k] < 1:
                        raise TargetError(f"{where}: {k} must be >= 1")
            recursion[key] = int(value["depth"])
            if "activations" in value:
                recursion_activations[key] = int(value["activations"])
        else:
            if value < 1:
                raise TargetError(f"{where}: a recursion depth must be >= 1")
            recursion[key] = int(value)

    wcet = raw.get("wcet", {})
    for key, value in wcet.items():
        if key not in _WCET_KEYS:
            raise _unknown_key(f"{path}: [wcet]", key, _WCET_KEYS)
        _check_type(f"{path}: [wcet] '{key}'", value, _WCET_KEYS[key])
    try:
        exceedance = float(wcet.get("exceedance", 1e-6))
    except OverflowError:
        exceedance = math.inf       # refused just below
    if not 0.0 < exceedance < 0.01:
        raise TargetError(f"{path}: [wcet] 'exceedance' is a probability per call, "
                          f"0 < p < 0.01, found {wcet['exceedance']!r}")
    unreached = wcet.get("unreached", "observed")
    if unreached not in UNREACHED_POLICIES:
        raise TargetError(f"{path}: [wcet] 'unreached' is \"observed\" (blocks no input "
                          f"reached are left out of the bound, and listed) or \"require\" "
                          f"(they need bounds too), found {unreached!r}")
    misfit = wcet.get("misfit", "near")
    if misfit not in MISFIT_SCOPES:
        raise TargetError(f"{path}: [wcet] 'misfit' is \"near\" (the model's error at the "
                          f"worst path from the inputs near it) or \"all\" (from every "
                          f"input), found {misfit!r}")
    machine_speed = wcet.get("machine_speed")
    if machine_speed is not None and not (1.0 <= float(machine_speed) <= MAX_MACHINE_SPEED):
        raise TargetError(f"{path}: [wcet] 'machine_speed' is the slowest the machine may "
                          f"run the function, as a factor over its fastest, 1 to "
                          f"{MAX_MACHINE_SPEED:g}, found {machine_speed!r}")
    fit = raw.get("fit", {})
    for key, value in fit.items():
        if key not in _FIT_KEYS:
            raise _unknown_key(f"{path}: [fit]", key, _FIT_KEYS)
        _check_type(f"{path}: [fit] '{key}'", value, _FIT_KEYS[key])
    if fit.get("costs", "physical") not in FIT_COSTS:
        raise TargetError(f"{path}: [fit] 'costs' is \"physical\" (every block cost ≥ 0, ε "
                          f"≥ its floor) or \"linear\" (unconstrained), found "
                          f"{fit['costs']!r}")
    flow = raw.get("flow", {})
    for key, value in flow.items():
        _check_type(f"{path}: [flow] '{key}'", value, (str,))
    search = raw.get("search", {})
    for key, value in search.items():
        if key not in _SEARCH_KEYS:
            raise _unknown_key(f"{path}: [search]", key, _SEARCH_KEYS)
        _check_type(f"{path}: [search] '{key}'", value, _SEARCH_KEYS[key])
        if value < 0:
            raise TargetError(f"{path}: [search] '{key}' must be >= 0, found {value}")

    timing = raw.get("timing", {})
    for key, value in timing.items():
        if key not in _TIMING_KEYS:
            raise _unknown_key(f"{path}: [timing]", key, _TIMING_KEYS)
        _check_type(f"{path}: [timing] '{key}'", value, _TIMING_KEYS[key])
    acts = timing.get("activations", False)
    if acts not in ("auto", True, False):
        raise TargetError(f"{path}: [timing] 'activations' is \"auto\" (per-activation rows "
                          "when the root reaches own functions that can be timed), true or "
                          f"false, found {acts!r}")
    activations = "auto" if acts == "auto" else "on" if acts is True else "off"

    return Target(directory=directory, path=path, binary=os.path.abspath(binary),
                  functions=tuple(functions), prototype=raw["prototype"],
                  cdef=raw.get("cdef", ""), inputs_module=inputs_module, measure=measure,
                  loops=dict(loops), recursion=dict(recursion),
                  recursion_activations=recursion_activations, exceedance=exceedance,
                  follow_speed=bool(fit.get("follow_speed", True)),
                  fit_costs=str(fit.get("costs", "physical")),
                  observed_paths=bool(wcet.get("observed_paths", True)),
                  unreached=unreached, misfit=misfit,
                  machine_speed=None if machine_speed is None else float(machine_speed),
                  search_budget=int(search.get("budget", 300)),
                  search_timed=int(search.get("timed", 10)),
                  search_timed_budget=int(search.get("timed_budget", 60)), flow=dict(flow),
                  activations=activations)


# --- the inputs module ---------------------------------------------------------------

@dataclass(frozen=True)
class InputContext:
    """What ``generate(ctx)`` receives for one input."""

    rng: np.random.Generator
    ffi: Any
    index: int
    function: str
    # the target binary's functions the prototype declares, callable to make what the
    # measured function takes (LibraryFunctions)
    lib: Any = None


class LibraryFunctions:
    """``ctx.lib``: the target binary's own functions, called from ``generate`` to make
    what the measured function takes: a key schedule (libcrypto's ``AES_set_encrypt_key``
    for ``AES_encrypt``), a parser (expat's ``XML_ParserCreate``), a stream.  A function
    is callable once wcetfit.toml's ``prototype`` declares it beside the measured ones;
    it runs the binary as the measurement loaded it (its own link-map namespace), so what
    it makes is that copy's, as the measured function expects.  A second copy of the
    library, opened by the inputs module itself, would make state holding the other
    copy's pointers, whose code the count run does not see.

    ``generate`` also runs in the analyzer's own process, which never runs the target's
    code (the worst-case search records an input's draws there, the report describes an
    input's arguments): there a call returns the zero of its type (NULL for a pointer)
    without running, so generate's draws must not depend on what these calls return."""

    def __init__(self, target: "Target"):
        self._target = target
        self._harness: Any = None
        # calls answered with their type's zero in the analyzer's process: what describes
        # an input's arguments says they are placeholders
        self.placeholders = 0

    def __repr__(self) -> str:
        return f"<ctx.lib: functions of {self._target.binary} the prototype declares>"

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Python's own protocols look their dunder names up here (copy's __deepcopy__,
        # pickle's __getstate__): not functions.  A C name may start with underscores:
        # libgmp exports __gmpz_init2 (mpz_init2 is a macro of gmp.h), glibc __strdup.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return lambda *args: self._call(name, args)

    def _call(self, name: str, args: tuple) -> Any:
        from wcetfit.isolate import in_worker
        from wcetfit.timing.thunk import build_harness

        if self._harness is None:
            self._harness = build_harness(self._target.prototype, self._target.cdef)
        harness = self._harness
        mangled = re.fullmatch(r"_[A-Za-z_][A-Za-z0-9_]*?(__\w+)", name)
        if name not in harness.functions and mangled and mangled.group(1) in harness.functions:
            # `ctx.lib.__gmpz_init2` written inside a class body reaches us as
            # `_Class__gmpz_init2` (Python's name mangling)
            name = mangled.group(1)
        if name not in harness.functions:
            raise InputsError(f"ctx.lib.{name}: not declared in wcetfit.toml's prototype "
                              f"(declared: {', '.join(harness.functions)}): add its "
                              f"declaration there to call it from generate()")
        sig = harness.signature(name)
        ffi = harness.ffi
        if not in_worker():
            self.placeholders += 1
            return (None if sig.returns_void
                    else ffi.new(ffi.getctype(ffi.typeof(sig.result), "*"))[0])
        from wcetfit.errors import BinaryError
        from wcetfit.loader import load_binary, symbol_address
        try:
            address = symbol_address(load_binary(self._target.binary), name)
        except BinaryError as exc:
            raise InputsError(f"ctx.lib.{name}: {exc}") from None
        try:
            pack = harness.pack(name, args)
        except InputsError as exc:
            raise InputsError(f"ctx.lib.{name}: {exc}") from None
        return harness.call(name, address, pack, restore=False, convert=False)


# one per target set-up: its harness is built once
_LIBRARIES: dict[tuple[str, str, str], LibraryFunctions] = {}


def library_functions(target: "Target") -> LibraryFunctions:
    key = (target.binary, target.prototype, target.cdef)
    lib = _LIBRARIES.get(key)
    if lib is None:
        lib = _LIBRARIES[key] = LibraryFunctions(target)
    return lib


def input_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of input ``index``: independent of every other input's draws."""
    return np.random.default_rng([seed, index])


def load_inputs_module(target: Target) -> Callable[[InputContext], Any]:
    """Import the inputs module and return its ``generate``."""
    name = f"wcetfit_inputs_{abs(hash(target.inputs_module)):x}"
    spec = importlib.util.spec_from_file_location(name, target.inputs_module)
    if spec is None or spec.loader is None:
        raise TargetError(f"{target.inputs_module}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's module: any exception is bad input
        raise InputsError(f"{target.inputs_module}: importing failed: "
                          f"{_user_frame(exc, target.inputs_module)}") from None
    generate = getattr(module, "generate", None)
    if not callable(generate):
        raise TargetError(f"{target.inputs_module}: defines no function generate(ctx)")
    return generate


def _user_frame(exc: BaseException, module_path: str) -> str:
    """``file:line: code — ExcType: message`` of the innermost frame in the user's module."""
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(fr.filename) == os.path.abspath(module_path)]
    what = f"{type(exc).__name__}: {exc}"
    if not frames:
        return what
    fr = frames[-1]
    return f"line {fr.lineno}: {(fr.line or '').strip()} — {what}"


def generate_input(generate: Callable[[InputContext], Any], target: Target, ffi: Any,
                   function: str, index: int, *, rng: Any = None,
                   ctx_index: int | None = None) -> tuple:
    """Call ``generate`` for one input; the user's exception becomes one InputsError line.

    ``rng`` and ``ctx_index`` stand in for the input's own generator and number (the
    worst-case search replays recorded draws, :mod:`wcetfit.search.choices`)."""
    ctx = InputContext(rng=input_rng(target.measure.seed, index) if rng is None else rng,
                       ffi=ffi, index=index if ctx_index is None else ctx_index,
                       function=function, lib=library_functions(target))
    try:
        args = generate(ctx)
    except Exception as exc:
        raise InputsError(f"input {index}: generate() raised at "
                          f"{os.path.basename(target.inputs_module)} "
                          f"{_user_frame(exc, target.inputs_module)}") from None
    if not isinstance(args, tuple):
        if isinstance(args, list):
            args = tuple(args)
        else:
            raise InputsError(f"input {index}: generate() must return a tuple of arguments, "
                              f"returned {type(args).__name__}")
    return args


def _element_text(v: Any, ffi: Any = None, limit: int = 3) -> str:
    """An array element as a person reads it: a char (cffi gives ``b'\\x00'``) as its
    byte value in hex, a number as itself, an inner array or a struct by its first few
    values (not cffi's ``<cdata 'short[64]' 0x5614…>``, which names a heap address)."""
    if isinstance(v, bytes) and len(v) == 1:
        return f"0x{v[0]:02x}"
    if ffi is not None and not isinstance(v, (int, float, bytes)):
        try:
            t = ffi.typeof(v)
        except TypeError:
            return str(v)
        if t.kind == "array":
            n = len(v)
            inner = ", ".join(_element_text(v[i], ffi, limit) for i in range(min(n, limit)))
            return f"{{{inner}{', …' if n > limit else ''}}}"
        if t.kind == "pointer":         # its type, never what it points to (see below)
            return "NULL" if v == ffi.NULL else t.cname
        if t.kind == "struct" and t.fields:
            shown = [f"{name}={_element_text(getattr(v, name), ffi, limit)}"
                     for name, _f in t.fields[:limit]]
            return "{" + ", ".join(shown) + (", …" if len(t.fields) > limit else "") + "}"
    return str(v)


def describe_args(ffi: Any, args: tuple, limit: int = 6) -> str:
    """A short human summary of one call's arguments for crash and hang reports."""
    parts = []
    for a in args:
        if isinstance(a, (int, float)):
            parts.append(repr(a))
            continue
        try:
            ctype = ffi.typeof(a)
        except TypeError:
            parts.append(type(a).__name__)
            continue
        text = ctype.cname
        if ctype.kind == "pointer" and a == ffi.NULL:
            # ffi.NULL is a void *, whatever the parameter's type (an XML_Parser, an
            # mp_srcptr read "NULL void *"): its type is said only when it was cast to one
            parts.append("NULL" if ctype.cname == "void *" else f"NULL {ctype.cname}")
            continue
        # (a pointer is named by its type alone: cffi's sizeof of one is the pointer's
        # own 8 bytes, not its target's, and reading the target could fault) -- except a
        # struct that ffi.new made, whose memory cffi owns: its first fields are shown
        # (AES_encrypt's crashes hid the key's rounds, the value that made them)
        if ctype.kind == "pointer" and ctype.item.kind == "struct" and \
                "owning" in repr(a):
            parts.append(f"{ctype.cname} → {_element_text(a[0], ffi)}")
            continue
        try:
            if ctype.kind == "array":
                n = len(a)
                # the array's own C name: short[8704][64] for 8704 rows of 64 (the item's
                # name with [n] appended read short[64][8704])
                head = ", ".join(_element_text(a[i], ffi) for i in range(min(n, limit)))
                name = ctype.cname.replace("[]", f"[{n}]", 1)    # an open array: its length
                text = f"{name} {{{head}{', …' if n > limit else ''}}}"
        except (TypeError, ffi.error):
            pass
        parts.append(text)
    return "(" + ", ".join(parts) + ")"
