"""Fuzz cases shared by tests/test_fuzz.py (a short run) and bench/reliability.py (the
long one): each feeds one generated input to a wcetfit parser and classifies the
outcome.  The rule checked: every case ends in a result or in one typed error
(a WcetfitError), never in another exception or a hang.

Parsers fuzzed: the target file (wcetfit.toml, through load_target), the prototype
and cdef (wcetfit.timing.thunk.parse_signatures), ELF input (wcetfit.static.elfinfo:
truncated and bit-flipped copies of real libraries) and store files (bit-flipped and
truncated datasets and store.json, through wcetfit.store).
"""

from __future__ import annotations

import json
import math
import os
import signal
import traceback
from dataclasses import dataclass, field

from hypothesis import strategies as st

CASE_TIMEOUT_S = 20.0       # a case still running after this is a hang

OK, ERROR, CRASH, HANG = "ok", "error", "traceback", "hang"


class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang


@dataclass
class Tally:
    """Outcomes per parser; ``bad`` keeps the first few tracebacks and hangs."""

    counts: dict = field(default_factory=dict)
    bad: list = field(default_factory=list)

    def add(self, parser: str, outcome: str, detail: str = "") -> None:
        c = self.counts.setdefault(parser, {OK: 0, ERROR: 0, CRASH: 0, HANG: 0})
        c[outcome] += 1
        if outcome in (CRASH, HANG) and len(self.bad) < 20:
            self.bad.append((parser, outcome, detail))

    def total(self, outcome: str | None = None) -> int:
        return sum(v for c in self.counts.values() for k, v in c.items()
                   if outcome is None or k == outcome)


def classify(call) -> tuple[str, str]:
    """Run ``call()``: (outcome, detail)."""
    from wcetfit.errors import WcetfitError

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    try:
        call()
        return OK, ""
    except WcetfitError as exc:
        text = str(exc)
        if "\n" in text.strip() or not text.strip():
            return CRASH, f"error message is not one line: {text!r}"
        return ERROR, ""
    except _Hang:
        return HANG, f"no end after {CASE_TIMEOUT_S} s"
    except Exception:
        return CRASH, traceback.format_exc(limit=-6)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def mutate_text(text: str, rnd) -> str:
    """A few random edits (delete, insert, duplicate a span) of ``text``, drawn from
    ``rnd`` (a Hypothesis-seeded random.Random): cheap variants of one generated case."""
    pieces = ['"', "'", "[", "]", "{", "}", "=", ",", "\n", "\\", "#", "0x", "-", ".",
              "\x00", "\u00e9", "inf", "1e999", "[[", "]]", '"""', "*", "(", ")", ";"]
    for _ in range(rnd.randint(1, 3)):
        at = rnd.randint(0, len(text))
        op = rnd.randrange(3)
        if op == 0:
            text = text[:at] + text[at + rnd.randint(1, 8):]
        elif op == 1:
            text = text[:at] + rnd.choice(pieces) + text[at:]
        else:
            end = min(len(text), at + rnd.randint(1, 30))
            text = text[:end] + text[at:end] + text[end:]
    return text


# --- wcetfit.toml ---------------------------------------------------------------------

_KEYS = ["binary", "functions", "prototype", "cdef", "inputs", "measure", "loops",
         "recursion", "wcet", "fit", "inputs ", "Binary"]
_MEASURE = ["inputs", "repeats", "seed", "warmup", "timeout", "method", "trace_cap", "x"]
_SCALARS = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70), st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["lib.so", "inputs.py", "auto", "lfence", "rdtscp", "f", "f+0x10",
                     "/nonexistent", "", "int f(int);", "..", "lib.so\x00"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)


def _toml_key(k: str) -> str:
    return json.dumps(k)        # a TOML basic string is a JSON string (escapes alike)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


@st.composite
def toml_texts(draw) -> str:
    """A wcetfit.toml: structured (known keys, any values, sometimes the valid ones),
    a valid file mutated, or arbitrary text."""
    mode = draw(st.integers(0, 3))
    if mode == 2:
        return draw(st.text(max_size=200))
    if mode == 3:       # what a parser may choke on: deep nesting, huge numbers, bad UTF-8
        return draw(st.sampled_from([
            "a = " + "[" * 3000, "a = " + "{b = " * 3000, "a = " + "[" * 100 + "]" * 100,
            "\udc80binary = 1", '"binary" = "\ud800"',
            '[wcet]\nexceedance = ' + "9" * 400, '[measure]\ninputs = ' + "9" * 30,
            '[measure]\ntimeout = nan', '[measure]\ntimeout = inf', '[measure]\nseed = -1',
            '[loops]\n"f" = ' + "9" * 40, '[recursion]\nf = -' + "9" * 40,
            '"functio\\ns" = 1', '[loops]\n"a\\nb" = -1']))
    good = {"binary": "lib.so", "functions": ["f"], "prototype": "int f(int);",
            "inputs": "inputs.py", "measure": {"inputs": 3}}
    doc = {k: v for k, v in good.items() if draw(st.booleans()) or k in ("binary", "inputs")}
    for k in draw(st.lists(st.sampled_from(_KEYS), max_size=4)):
        doc[k] = draw(_VALUES)
    if draw(st.booleans()):
        doc["measure"] = {k: draw(_VALUES) for k in draw(st.lists(st.sampled_from(_MEASURE),
                                                                  max_size=3))}
    if draw(st.booleans()):
        doc["loops"] = draw(st.dictionaries(st.sampled_from(["f+0x10", "f", "g+0x1"]),
                                            _VALUES, max_size=3))
    text = "\n".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in doc.items()) + "\n"
    if mode == 1 and text:
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 5))
        text = text[:at] + draw(st.text(max_size=5)) + text[at + cut:]
    return text


def toml_case(directory: str, text: str) -> None:
    from wcetfit.target import load_target

    with open(os.path.join(directory, "wcetfit.toml"), "w", encoding="utf-8",
              errors="surrogatepass") as f:
        f.write(text)
    load_target(directory)


def toml_directory(tmp: str) -> str:
    """A folder with a binary and an inputs module, so that valid files get far."""
    import shutil
    d = os.path.join(tmp, "toml")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.realpath("/lib/x86_64-linux-gnu/libz.so.1") if os.path.exists(
        "/lib/x86_64-linux-gnu/libz.so.1") else __file__, os.path.join(d, "lib.so"))
    with open(os.path.join(d, "inputs.py"), "w") as f:
        f.write("def generate(ctx):\n    return (1,)\n")
    return d


# --- prototypes and cdef --------------------------------------------------------------

_C_TOKENS = ["int", "long", "char", "short", "unsigned", "signed", "const", "volatile",
             "void", "float", "double", "_Bool", "struct", "union", "enum", "typedef", "f",
             "g", "s", "x", "*", "(", ")", "[", "]", "{", "}", ";", ",", "...", "=", "0", "8",
             "-1", "0x10", "_Complex", "__attribute__", "size_t", "uint8_t", "int32_t",
             "static", "inline", "restrict", "#define", "//", "/*", "*/", ":", "\n"]


_VALID_C = ["int f(int a, char *b);", "unsigned long long chain_run(const unsigned char *sel, "
            "int n, unsigned long long x);", "void g(struct s *p);", "double h(double x);",
            "struct s { int x; char c[8]; };", "typedef struct { long a, b; } pair_t;",
            "pair_t k(pair_t p, int n);", "enum e { A, B = 4 };", "int v(int, ...);",
            "float _Complex c(void);", "union u { int i; float f; };"]


@st.composite
def c_texts(draw) -> str:
    mode = draw(st.integers(0, 3))
    if mode == 0:
        return draw(st.text(max_size=80))
    if mode == 1:       # valid declarations, some joined, then perhaps edited
        text = " ".join(draw(st.lists(st.sampled_from(_VALID_C), min_size=1, max_size=3)))
        if draw(st.booleans()):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(_C_TOKENS)) + " " + \
                text[at + draw(st.integers(0, 4)):]
        return text
    return " ".join(draw(st.lists(st.sampled_from(_C_TOKENS), max_size=30)))


def proto_case(prototype: str, cdef: str) -> None:
    from wcetfit.timing.prototype import parse_signatures

    parse_signatures(prototype, cdef)


# --- ELF ------------------------------------------------------------------------------

ELF_SOURCES = ["/lib/x86_64-linux-gnu/libz.so.1"]


@st.composite
def elf_mutations(draw, size: int):
    """("cut", length) or ("flip", [(offset, bit), ...]) of a file of ``size`` bytes;
    flips favour the first 4 KiB (headers, section table pointers)."""
    if draw(st.booleans()):
        return ("cut", draw(st.integers(0, size - 1)))
    near = st.integers(0, min(size, 4096) - 1)
    anywhere = st.integers(0, size - 1)
    flips = draw(st.lists(st.tuples(st.one_of(near, anywhere), st.integers(0, 7)),
                          min_size=1, max_size=8))
    return ("flip", flips)


def mutate(data: bytes, mutation) -> bytes:
    kind, arg = mutation
    if kind == "cut":
        return data[:arg]
    out = bytearray(data)
    for off, bit in arg:
        out[off] ^= 1 << bit
    return bytes(out)


def elf_case(path: str, data: bytes) -> None:
    from wcetfit.static import elfinfo

    with open(path, "wb") as f:
        f.write(data)
    elfinfo._MEMO.clear()       # noqa: SLF001 -- each case is a new file at the same path
    elfinfo.read_elf(path)


# --- store files ----------------------------------------------------------------------

def store_files(tmp: str) -> dict[str, bytes]:
    """A real dataset and store.json, to be damaged."""
    import numpy as np

    from wcetfit import store as stmod
    d = os.path.join(tmp, "store-src")
    s = stmod.Store(d, stmod.StoreIdentity("a" * 64, "b" * 64))
    s.save("counts-f-s1", {"kind": "counts", "seed": 1},
           {"indices": np.arange(20, dtype=np.int64),
            "counts0": np.arange(60, dtype=np.int64).reshape(20, 3)})
    out = {}
    for name in ("counts-f-s1.npz", "store.json"):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    s.lock.release()
    return out


def store_case(directory: str, name: str, data: bytes) -> None:
    """Write a damaged ``name`` into a store and open/load it: a sound result or the file
    set aside (load gives None), never an exception other than a StoreError."""
    from wcetfit import store as stmod
    os.makedirs(directory, exist_ok=True)
    for old in os.listdir(directory):
        if old != "lock":
            os.unlink(os.path.join(directory, old))
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)
    s = stmod.Store(directory, stmod.StoreIdentity("a" * 64, "b" * 64))
    try:
        s.load("counts-f-s1")
    finally:
        s.lock.release()
