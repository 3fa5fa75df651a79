"""Per-prototype call harness: call or time any C function through a compiled thunk.

A target names its functions by a C prototype (``void adpcm_coder(short *, char *, int,
struct adpcm_state *);``) plus optional type declarations (``cdef``).  From those this
module generates C that, for each function F, defines

    struct wf_args_F { T0 a0; T1 a1; ... };
    int wf_call_F(void *fn, struct wf_args_F *a, RET *ret);        one plain call
    int wf_time_F(void *fn, struct wf_args_F *a, const struct wf_restore *r, int nr,
                  int method, int warmup, int repeats,
                  uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop, RET *ret);
    int wf_time_seq_F(void *fn, struct wf_args_F *a, int method, int kmax, int rounds,
                      uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop);

and builds it with cffi in API mode, so the C compiler — not cffi's libffi — lays out the
call, whatever the prototype (struct by value, doubles, pointers).  ``fn`` is a run-time
address: the original function for the timing run, an instrumented copy for the count
run.  The built module's ``ffi`` is the one inputs modules allocate arguments with
(``ctx.ffi``), so the cdata types of the arguments are the harness's own.

Timing protocol of wf_time_F, per repeat: restore the argument memory (memcpy from the
backups taken at :meth:`CallHarness.pack`) — *before* the first TSC reading, never inside
the region — then start reading, the call through a function pointer of the exact
prototype, stop reading.  Warm-up calls (also restored) come first.  The fence method is
selected once, outside the loops (``WF_TSC_FOR_EACH_METHOD`` in wf_tsc.h).

Builds are cached on disk in ``<cache>/thunks/<sha256>/`` where the hash covers the
generated source, wf_tsc.h, the compiler, the Python ABI and cffi's version; a build
goes to a temporary directory that is renamed into place, so concurrent builders of the
same harness are safe (the loser of the rename discards its copy).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import cffi
import numpy as np

from wcetfit.errors import InputsError, MeasurementError, NativeBuildError, TargetError

log = logging.getLogger(__name__)

THUNK_ABI = 1          # bump when the generated C or its calling convention changes
SEQ_MAX = 16           # the most back-to-back calls wf_time_seq_F unrolls in one region
COMPILE_ARGS = ("-O2", "-std=gnu11", "-fno-strict-aliasing")

# Headers the target's declarations may rely on without saying so (cffi knows these types).
_C_PRELUDE = """\
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <uchar.h>
#include <wchar.h>
"""


# ---- public data ----------------------------------------------------------------------

@dataclass(frozen=True)
class FunctionSig:
    """One measured function's C signature, as cffi spells the types."""

    name: str
    arg_types: tuple[str, ...]
    result: str                     # "void" for none

    @property
    def arity(self) -> int:
        return len(self.arg_types)

    @property
    def returns_void(self) -> bool:
        return self.result == "void"


@dataclass(frozen=True)
class Buffer:
    """Argument memory that is restored before every call: ``size`` bytes at ``ptr``."""

    arg: int | None                 # argument index, None for an extra buffer
    address: int
    size: int


class ArgPack:
    """One call's arguments, ready for the harness.

    Holds the argument objects (so cffi-owned memory stays alive), the packed argument
    struct, and for each restorable buffer a backup of its initial bytes plus the
    ``struct wf_restore`` list the C loop copies from."""

    __slots__ = ("function", "args", "struct", "buffers", "unrestored", "_backups",
                 "_restore", "_extra")

    def __init__(self, function: str, args: tuple, struct: Any, buffers: tuple[Buffer, ...],
                 unrestored: tuple[int, ...], backups: tuple[Any, ...], restore: Any,
                 extra: tuple[Any, ...]):
        self.function = function
        self.args = args
        self.struct = struct
        self.buffers = buffers
        self.unrestored = unrestored      # pointer arguments whose extent is unknown
        self._backups = backups
        self._restore = restore
        self._extra = extra

    @property
    def restore_bytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def __repr__(self) -> str:
        return (f"ArgPack({self.function}, {len(self.args)} args, {len(self.buffers)} "
                f"restored buffers, {self.restore_bytes} bytes)")


@dataclass(frozen=True)
class TimedCalls:
    """Raw samples of :meth:`CallHarness.time`: nothing discarded yet."""

    ticks: np.ndarray       # int64, stop - start per repeat
    cpu_start: np.ndarray   # uint32 TSC_AUX at the start reading
    cpu_stop: np.ndarray    # uint32 TSC_AUX at the stop reading
    result: Any             # return value of the last call (Python value)

    @property
    def migrated(self) -> np.ndarray:
        """True where the start and stop readings came from different CPUs."""
        return self.cpu_start != self.cpu_stop


@dataclass(frozen=True)
class TimedSequence:
    """Raw samples of :meth:`CallHarness.time_seq`: ``ticks[round, k-1]`` for k calls."""

    ticks: np.ndarray       # int64 (rounds, kmax)
    cpu_start: np.ndarray
    cpu_stop: np.ndarray

    @property
    def migrated(self) -> np.ndarray:
        return self.cpu_start != self.cpu_stop


# ---- locating the C side ----------------------------------------------------------------

def instrument_dir() -> Path:
    """Where wf_tsc.h lives: the package's copy in an installed wheel, the repository's
    instrument/ in an editable install."""
    package = Path(__file__).resolve().parent.parent      # wcetfit/
    for cand in (package / "_instrument", package.parent / "instrument"):
        if (cand / "wf_tsc.h").is_file():
            return cand
    raise NativeBuildError("cannot find wf_tsc.h (neither wcetfit/_instrument nor instrument/)")


def cache_root() -> Path:
    """``$WCETFIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/wcetfit``, else ``~/.cache/wcetfit``."""
    env = os.environ.get("WCETFIT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "wcetfit"


_compiler_lock = threading.Lock()
_compiler_id_cache: str | None = None


def _compiler_id() -> str:
    """The C compiler's command and version, part of the cache key."""
    global _compiler_id_cache
    with _compiler_lock:
        if _compiler_id_cache is None:
            cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
            try:
                out = subprocess.run(cc.split() + ["--version"], capture_output=True,
                                     text=True, timeout=30).stdout.splitlines()
                version = out[0] if out else "?"
            except (OSError, subprocess.SubprocessError):
                version = "?"
            _compiler_id_cache = f"{cc} | {version}"
        return _compiler_id_cache


# ---- parsing the target's declarations ----------------------------------------------

def _one_line(exc: BaseException) -> str:
    return "; ".join(part.strip() for part in str(exc).splitlines() if part.strip())


# cffi's API-mode "fill in the rest" forms: "...;" in a struct, "[...]", "= ...", "... x;"
_PARTIAL = re.compile(r"\.\.\.\s*;|\[\s*\.\.\.\s*\]|=\s*\.\.\.|\btypedef\s+\.\.\.")


def _declared(ffi: cffi.FFI) -> dict[str, Any]:
    # cffi has no public listing of what a cdef declared; its parser keeps a dict keyed
    # "function NAME", "struct NAME", "typedef NAME", ... (stable since cffi 1.0; the
    # tests fail loudly if that changes).
    return dict(ffi._parser._declarations)  # noqa: SLF001


def parse_signatures(prototype: str, cdef: str = "") -> tuple[cffi.FFI, list[tuple[str, Any]]]:
    """Parse ``cdef`` then ``prototype`` in a scratch FFI; return it and (name, function
    pointer ctype) for each function the prototype declares, in order."""
    for what, text in (("cdef", cdef), ("prototype", prototype)):
        if _PARTIAL.search(text or ""):
            raise TargetError(f"{what}: partial declarations ('...') cannot be compiled into "
                              f"the call harness; declare the types completely")
    scratch = cffi.FFI()
    try:
        scratch.cdef(cdef or "")
    except Exception as exc:  # cffi raises CDefError, also plain errors from pycparser
        raise TargetError(f"cdef: {_one_line(exc)}") from None
    before = _declared(scratch)
    for key in before:
        kind, _, name = key.partition(" ")
        if kind in ("function", "variable"):
            raise TargetError(f"cdef: declares {kind} {name}; the cdef holds types only — "
                              f"declare measured functions in the prototype")
    try:
        scratch.cdef(prototype or "")
    except Exception as exc:
        raise TargetError(f"prototype: {_one_line(exc)}") from None
    after = _declared(scratch)
    functions: list[tuple[str, Any]] = []
    for key, (model_type, _quals) in after.items():
        if key in before:
            continue
        kind, _, name = key.partition(" ")
        if kind != "function":
            raise TargetError(f"prototype: declares {kind} {name}; only function "
                              f"declarations belong in the prototype (types go in cdef)")
        try:
            ctype = scratch.typeof(model_type.get_c_name())
        except Exception as exc:
            raise TargetError(f"prototype: {name}: {_one_line(exc)}") from None
        functions.append((name, ctype))
    if not functions:
        raise TargetError("prototype: declares no function")
    for name, ctype in functions:
        if ctype.ellipsis:
            raise TargetError(f"prototype: {name} is variadic (...); give a fixed prototype")
        for i, arg in enumerate(ctype.args):
            _check_supported(scratch, name, f"argument {i + 1}", arg)
        _check_supported(scratch, name, "return type", ctype.result)
    return scratch, functions


def _check_supported(ffi: cffi.FFI, fname: str, what: str, ctype: Any) -> None:
    if "complex" in ctype.cname.lower():
        raise TargetError(f"prototype: {fname}: {what} is a complex type ({ctype.cname}), "
                          f"not supported")
    if ctype.kind in ("struct", "union"):
        try:
            ffi.sizeof(ctype)
        except Exception:
            raise TargetError(f"prototype: {fname}: {what} is {ctype.cname}, an incomplete "
                              f"type; declare it fully in cdef") from None


# ---- code generation --------------------------------------------------------------------

def _decl(ffi: cffi.FFI, ctype: Any, name: str) -> str:
    return ffi.getctype(ctype, name)


def generate_source(ffi: cffi.FFI, functions: list[tuple[str, Any]], cdef: str,
                    seq_max: int = SEQ_MAX) -> tuple[str, str]:
    """(C source, cffi cdef of the harness) for the given functions."""
    src: list[str] = [
        f"/* generated by wcetfit.timing.thunk (THUNK_ABI {THUNK_ABI}); do not edit */",
        _C_PRELUDE,
        '#include "wf_tsc.h"',
        "",
        "/* ---- the target's declarations (cdef), verbatim ---- */",
        cdef or "",
        "",
        "struct wf_restore { void *dst; const void *src; size_t len; };",
        "",
        "static inline void wf_restore_all(const struct wf_restore *r, int nr)",
        "{",
        "    for (int i = 0; i < nr; i++)",
        "        memcpy(r[i].dst, r[i].src, r[i].len);",
        "}",
        "",
        f"int wf_thunk_abi(void) {{ return {THUNK_ABI}; }}",
        f"int wf_thunk_seq_max(void) {{ return {seq_max}; }}",
        "",
    ]
    cdecl: list[str] = [
        "struct wf_restore { void *dst; const void *src; size_t len; };",
        "int wf_thunk_abi(void);",
        "int wf_thunk_seq_max(void);",
    ]
    for name, fctype in functions:
        s, c = _function_source(ffi, name, fctype, seq_max)
        src.extend(s)
        cdecl.extend(c)
    return "\n".join(src) + "\n", "\n".join(cdecl) + "\n"


def _function_source(ffi: cffi.FFI, name: str, fctype: Any,
                     seq_max: int) -> tuple[list[str], list[str]]:
    args = list(fctype.args)
    result = fctype.result
    void = result.kind == "void"
    fields = [f"    {_decl(ffi, t, f'a{i}')};" for i, t in enumerate(args)] or \
        ["    char wf_no_arguments;"]
    ret_param = "void *ret" if void else _decl(ffi, result, "*ret")
    locals_ = [f"    {_decl(ffi, t, f'x{i}')} = a->a{i};" for i, t in enumerate(args)]
    call_args = ", ".join(f"x{i}" for i in range(len(args)))
    call = f"f({call_args})"
    fn_t = f"wf_fn_{name}"
    out: list[str] = [
        f"/* ---- {name} ---- */",
        f"struct wf_args_{name} {{",
        *fields,
        "};",
        f"typedef {_decl(ffi, fctype, fn_t)};",
        "",
        # one plain call
        f"int wf_call_{name}(void *fn, struct wf_args_{name} *a, {ret_param})",
        "{",
        f"    {fn_t} f = ({fn_t})fn;",
        *locals_,
        f"    {call};" if void else f"    *ret = {call};",
        "    return 0;",
        "}",
        "",
    ]
    # timed repeats; the case body is a macro so WF_TSC_FOR_EACH_METHOD instantiates it
    # once per fence method of wf_tsc.h
    store = "" if void else "v = "
    out += [
        f"#define WF_TIME_CASE_{name}(ENUM, m) \\",
        "    case ENUM: \\",
        "        for (int i = 0; i < repeats; i++) { \\",
        "            uint32_t c0, c1; \\",
        "            wf_restore_all(r, nr); \\",
        "            uint64_t t0 = wf_tsc_start_##m(&c0); \\",
        f"            {store}{call}; \\",
        "            uint64_t t1 = wf_tsc_stop_##m(&c1); \\",
        "            ticks[i] = t1 - t0; \\",
        "            cpu_start[i] = c0; \\",
        "            cpu_stop[i] = c1; \\",
        "        } \\",
        "        break;",
        "",
        f"int wf_time_{name}(void *fn, struct wf_args_{name} *a, const struct wf_restore *r,",
        "        int nr, int method, int warmup, int repeats, uint64_t *ticks,",
        f"        uint32_t *cpu_start, uint32_t *cpu_stop, {ret_param})",
        "{",
        "    if (method < 0 || method >= WF_TSC_NMETHODS || warmup < 0 || repeats < 0 ||",
        "        (repeats > 0 && (!ticks || !cpu_start || !cpu_stop)) || (nr > 0 && !r))",
        "        return -1;",
        f"    {fn_t} f = ({fn_t})fn;",
        *locals_,
    ]
    if not void:
        out += [f"    {_decl(ffi, result, 'v')};", "    memset(&v, 0, sizeof v);"]
    out += [
        "    for (int w = 0; w < warmup; w++) {",
        "        wf_restore_all(r, nr);",
        f"        {store}{call};",
        "    }",
        "    switch (method) {",
        f"        WF_TSC_FOR_EACH_METHOD(WF_TIME_CASE_{name})",
        "    default:",
        "        return -1;",
        "    }",
    ]
    if not void:
        out += ["    if (ret)", "        *ret = v;"]
    else:
        out += ["    (void)ret;"]
    out += ["    return 0;", "}", ""]
    # straight-line fitting: k back-to-back calls in one region, k = 1..kmax, unrolled
    out += [
        f"#define WF_SEQ_CASE_{name}(ENUM, m) \\",
        "    case ENUM: \\",
        "        for (int rd = 0; rd < rounds; rd++) { \\",
        "            for (int k = 1; k <= kmax; k++) { \\",
        "                uint32_t c0 = 0, c1 = 0; \\",
        "                uint64_t t0 = 0, t1 = 0; \\",
        "                switch (k) { \\",
    ]
    for k in range(1, seq_max + 1):
        calls = " ".join(f"(void){call};" for _ in range(k))
        out += [
            f"                case {k}: \\",
            f"                    t0 = wf_tsc_start_##m(&c0); {calls} \\",
            "                    t1 = wf_tsc_stop_##m(&c1); \\",
            "                    break; \\",
        ]
    out += [
        "                } \\",
        "                long at = (long)rd * kmax + (k - 1); \\",
        "                ticks[at] = t1 - t0; \\",
        "                cpu_start[at] = c0; \\",
        "                cpu_stop[at] = c1; \\",
        "            } \\",
        "        } \\",
        "        break;",
        "",
        f"int wf_time_seq_{name}(void *fn, struct wf_args_{name} *a, int method, int kmax,",
        "        int rounds, uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop)",
        "{",
        f"    if (method < 0 || method >= WF_TSC_NMETHODS || kmax < 1 || kmax > {seq_max} ||",
        "        rounds < 0 || !ticks || !cpu_start || !cpu_stop)",
        "        return -1;",
        f"    {fn_t} f = ({fn_t})fn;",
        *locals_,
        f"    (void){call};  /* warm-up: the first call's misses stay out of round 0 */",
        "    switch (method) {",
        f"        WF_TSC_FOR_EACH_METHOD(WF_SEQ_CASE_{name})",
        "    default:",
        "        return -1;",
        "    }",
        "    return 0;",
        "}",
        "",
    ]
    cdecl = [
        f"struct wf_args_{name} {{",
        *fields,
        "};",
        f"int wf_call_{name}(void *fn, struct wf_args_{name} *a, {ret_param});",
        f"int wf_time_{name}(void *fn, struct wf_args_{name} *a, const struct wf_restore *r,"
        f" int nr, int method, int warmup, int repeats, uint64_t *ticks,"
        f" uint32_t *cpu_start, uint32_t *cpu_stop, {ret_param});",
        f"int wf_time_seq_{name}(void *fn, struct wf_args_{name} *a, int method, int kmax,"
        f" int rounds, uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop);",
    ]
    return out, cdecl


# ---- building ---------------------------------------------------------------------------

@contextlib.contextmanager
def _captured_fds() -> Iterator[Path]:
    """Send fds 1 and 2 to a file while the compiler runs (it writes to them directly)."""
    fd, path = tempfile.mkstemp(prefix="wcetfit-cc-", suffix=".log")
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield Path(path)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for s in saved + [fd]:
            os.close(s)


def _first_error(log_text: str) -> str:
    for line in log_text.splitlines():
        if "error" in line.lower():
            return line.strip()
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no compiler output"


_modules: dict[str, Any] = {}
_modules_lock = threading.Lock()


def _build_module(key: str, source: str, cdecl: str, cdef: str, root: Path) -> Any:
    modname = f"_wf_thunk_{key[:24]}"
    final = root / "thunks" / key
    ext = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    so_path = final / f"{modname}{ext}"
    if not so_path.is_file():
        (root / "thunks").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key[:12]}-", dir=root / "thunks"))
        try:
            builder = cffi.FFI()
            try:
                builder.cdef(cdef or "")
                builder.cdef(cdecl)
            except Exception as exc:  # the harness declarations come from the same types
                raise NativeBuildError(f"call harness declarations rejected by cffi: "
                                       f"{_one_line(exc)}") from None
            builder.set_source(modname, source, include_dirs=[str(instrument_dir())],
                               extra_compile_args=list(COMPILE_ARGS))
            with _captured_fds() as logpath:
                try:
                    built = builder.compile(tmpdir=str(tmp), verbose=False)
                    failure = None
                except Exception as exc:  # cffi.VerificationError, distutils errors
                    failure = exc
                    built = None
            text = logpath.read_text(errors="replace")
            logpath.unlink(missing_ok=True)
            if failure is not None or built is None:
                log.debug("thunk compiler output:\n%s", text)
                raise NativeBuildError(f"cannot compile the call harness: "
                                       f"{_first_error(text) if text.strip() else _one_line(failure)}")
            (tmp / "wf_thunk.c").write_text(source)   # for a human looking at the cache
            for leftover in tmp.iterdir():        # object files: not needed to load
                if leftover.is_dir():
                    shutil.rmtree(leftover, ignore_errors=True)
                elif leftover.suffix == ".o":
                    leftover.unlink()
            try:
                os.rename(tmp, final)
            except OSError:
                if not so_path.is_file():   # not a lost race: a real failure
                    raise
                log.debug("thunk %s was built concurrently; using the other build", key[:12])
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    spec = importlib.util.spec_from_file_location(modname, so_path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise NativeBuildError(f"cannot load the call harness {so_path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise NativeBuildError(f"cannot load the call harness {so_path}: {exc}") from None
    if module.lib.wf_thunk_abi() != THUNK_ABI:  # pragma: no cover - hash covers it
        raise NativeBuildError(f"stale call harness in {final}")
    return module


# ---- the harness --------------------------------------------------------------------------

_CHAR_SIGNED = True   # x86-64 System V ABI: plain char is signed


def _to_python(ffi: cffi.FFI, value: Any) -> Any:
    """A C value as plain Python: ints, floats, bools, None; pointers as int addresses,
    structs as dicts of fields, arrays as lists; ``char`` as its int code."""
    if not isinstance(value, ffi.CData):
        if isinstance(value, bytes) and len(value) == 1:      # cffi gives char as bytes
            return value[0] - 256 if value[0] > 127 and _CHAR_SIGNED else value[0]
        return value
    ctype = ffi.typeof(value)
    if ctype.kind in ("pointer", "function"):
        return int(ffi.cast("uintptr_t", value))
    if ctype.kind in ("struct", "union"):
        return {name: _to_python(ffi, getattr(value, name)) for name, _ in ctype.fields}
    if ctype.kind == "array":
        return [_to_python(ffi, value[i]) for i in range(len(value))]
    if ctype.kind == "primitive" and "double" in ctype.cname:   # long double
        return float(value)
    return value  # pragma: no cover


class CallHarness:
    """The compiled harness of one prototype.  Build with :func:`build_harness`."""

    def __init__(self, module: Any, functions: dict[str, FunctionSig], key: str):
        self.module = module
        self.ffi = module.ffi
        self.lib = module.lib
        self.functions = functions
        self.key = key

    def __repr__(self) -> str:
        return f"CallHarness({', '.join(self.functions)}; {self.key[:12]})"

    def signature(self, function: str) -> FunctionSig:
        try:
            return self.functions[function]
        except KeyError:
            raise TargetError(f"{function} is not declared in the prototype "
                              f"(declared: {', '.join(self.functions)})") from None

    # -- arguments ----------------------------------------------------------------------

    def pack(self, function: str, args: Any, extra: Iterable[Any] = ()) -> ArgPack:
        """Check ``args`` against the prototype and prepare them for calls.

        Every top-level pointer argument that is cffi-owned memory (``ffi.new`` arrays and
        structs, ``ffi.from_buffer``) is restorable: its bytes now are backed up and copied
        back before every call.  ``extra`` names more cffi-owned memory to restore (e.g.
        buffers reached through a struct's pointer fields)."""
        sig = self.signature(function)
        ffi = self.ffi
        if isinstance(args, list):
            args = tuple(args)
        if not isinstance(args, tuple):
            raise InputsError(f"generate() must return a tuple of arguments for {function}, "
                              f"got {type(args).__name__}")
        if len(args) != sig.arity:
            raise InputsError(f"generate() returned {len(args)} argument"
                              f"{'' if len(args) == 1 else 's'}, {function} takes {sig.arity}")
        struct = ffi.new(f"struct wf_args_{function} *")
        for i, (value, ctype) in enumerate(zip(args, sig.arg_types)):
            try:
                setattr(struct, f"a{i}", value)
            except (TypeError, OverflowError, ValueError) as exc:
                raise InputsError(f"argument {i + 1} of {function} ({ctype}): "
                                  f"{_one_line(exc)}") from None
        buffers: list[Buffer] = []
        sources: list[Any] = []
        unrestored: list[int] = []
        seen: set[tuple[int, int]] = set()
        for i, value in enumerate(args):
            extent = self._extent(value)
            if extent is None:
                if self._is_live_pointer(value):
                    unrestored.append(i)
                continue
            if extent in seen or extent[1] == 0:
                continue
            seen.add(extent)
            buffers.append(Buffer(i, *extent))
            sources.append(value)
        extra = tuple(extra)
        for value in extra:
            extent = self._extent(value)
            if extent is None:
                raise InputsError(f"extra restore buffer {value!r} of {function} is not "
                                  f"cffi-owned memory with a known size")
            if extent in seen or extent[1] == 0:
                continue
            seen.add(extent)
            buffers.append(Buffer(None, *extent))
        if unrestored:
            log.debug("%s: pointer argument(s) %s are not cffi-owned; their memory is not "
                      "restored between calls", function, [i + 1 for i in unrestored])
        backups = []
        restore = ffi.new("struct wf_restore[]", max(len(buffers), 1))
        for j, buf in enumerate(buffers):
            backup = ffi.new("char[]", buf.size)
            ffi.memmove(backup, ffi.cast("void *", buf.address), buf.size)
            backups.append(backup)
            restore[j].dst = ffi.cast("void *", buf.address)
            restore[j].src = backup
            restore[j].len = buf.size
        return ArgPack(function, args, struct, tuple(buffers), tuple(unrestored),
                       tuple(backups), restore, extra)

    def _extent(self, value: Any) -> tuple[int, int] | None:
        """(address, size) of cffi-owned memory behind ``value``; None if unknown."""
        ffi = self.ffi
        if not isinstance(value, ffi.CData):
            return None
        ctype = ffi.typeof(value)
        if ctype.kind == "array":
            return int(ffi.cast("uintptr_t", value)), ffi.sizeof(value)
        if ctype.kind == "pointer" and ctype.item.kind not in ("void", "function"):
            # cffi has no public "is owned" test; repr says "owning N bytes" for ffi.new
            # pointers, whose extent is then exactly one item.
            if " owning " in repr(value) and value != ffi.NULL:
                try:
                    return int(ffi.cast("uintptr_t", value)), ffi.sizeof(ctype.item)
                except (ffi.error, TypeError):
                    return None
        return None

    def _is_live_pointer(self, value: Any) -> bool:
        ffi = self.ffi
        return isinstance(value, ffi.CData) and ffi.typeof(value).kind == "pointer" \
            and value != ffi.NULL

    def restore(self, pack: ArgPack) -> None:
        """Copy the backed-up initial bytes back into the argument memory."""
        for j, buf in enumerate(pack.buffers):
            self.ffi.memmove(self.ffi.cast("void *", buf.address), pack._backups[j], buf.size)

    def snapshot(self, pack: ArgPack) -> tuple[bytes, ...]:
        """The current bytes of every restorable buffer, in :attr:`ArgPack.buffers` order."""
        return tuple(bytes(self.ffi.buffer(self.ffi.cast("char *", b.address), b.size))
                     for b in pack.buffers)

    # -- calling ------------------------------------------------------------------------

    def _fn(self, fn_address: int) -> Any:
        if not isinstance(fn_address, (int, np.integer)) or int(fn_address) <= 0:
            raise MeasurementError(f"bad function address {fn_address!r}")
        return self.ffi.cast("void *", int(fn_address))

    def _ret(self, sig: FunctionSig) -> Any:
        if sig.returns_void:
            return self.ffi.NULL
        # getctype(T, "*") spells "pointer to T" correctly for every T (function pointers too)
        return self.ffi.new(self.ffi.getctype(self.ffi.typeof(sig.result), "*"))

    def _check_pack(self, function: str, pack: ArgPack) -> FunctionSig:
        sig = self.signature(function)
        if pack.function != function:
            raise MeasurementError(f"arguments packed for {pack.function}, not {function}")
        return sig

    def call(self, function: str, fn_address: int, pack: ArgPack, restore: bool = True) -> Any:
        """One plain call of the code at ``fn_address`` with the packed arguments.

        With ``restore`` (default) the argument memory is first reset to its packed
        state, so two calls — of the original and of an instrumented copy, say — start
        from identical bytes; compare their return values and :meth:`snapshot` after.
        Returns the C return value as Python (None for void, int for pointers, dict
        for structs)."""
        sig = self._check_pack(function, pack)
        if restore:
            self.restore(pack)
        ret = self._ret(sig)
        getattr(self.lib, f"wf_call_{function}")(self._fn(fn_address), pack.struct, ret)
        return None if sig.returns_void else _to_python(self.ffi, ret[0])

    def time(self, function: str, fn_address: int, pack: ArgPack, repeats: int,
             warmup: int = 2, method: str | int = "lfence") -> TimedCalls:
        """``warmup`` untimed then ``repeats`` timed calls, each after restoring the
        argument memory outside the region.  Nothing is discarded here."""
        from wcetfit.timing.tsc import method_id

        sig = self._check_pack(function, pack)
        if repeats < 0 or warmup < 0:
            raise MeasurementError("repeats and warmup must be >= 0")
        ticks = np.zeros(repeats, dtype=np.uint64)
        c0 = np.zeros(repeats, dtype=np.uint32)
        c1 = np.zeros(repeats, dtype=np.uint32)
        ffi = self.ffi
        ret = self._ret(sig)
        rc = getattr(self.lib, f"wf_time_{function}")(
            self._fn(fn_address), pack.struct, pack._restore, len(pack.buffers),
            method_id(method), warmup, repeats,
            ffi.from_buffer("uint64_t[]", ticks), ffi.from_buffer("uint32_t[]", c0),
            ffi.from_buffer("uint32_t[]", c1), ret)
        if rc != 0:
            raise MeasurementError(f"wf_time_{function} rejected its arguments (rc {rc})")
        result = None if sig.returns_void else _to_python(ffi, ret[0])
        return TimedCalls(ticks.astype(np.int64), c0, c1, result)

    def time_seq(self, function: str, fn_address: int, pack: ArgPack, kmax: int,
                 rounds: int, method: str | int = "lfence") -> TimedSequence:
        """Regions of k = 1..kmax back-to-back calls (unrolled, no restore between them),
        ``rounds`` times each, interleaved (round-major).  For straight-line fitting."""
        from wcetfit.timing.tsc import method_id

        self._check_pack(function, pack)
        seq_max = int(self.lib.wf_thunk_seq_max())
        if not 1 <= kmax <= seq_max:
            raise MeasurementError(f"kmax must be in 1..{seq_max}, got {kmax}")
        if rounds < 1:
            raise MeasurementError("rounds must be >= 1")
        n = rounds * kmax
        ticks = np.zeros(n, dtype=np.uint64)
        c0 = np.zeros(n, dtype=np.uint32)
        c1 = np.zeros(n, dtype=np.uint32)
        ffi = self.ffi
        self.restore(pack)
        rc = getattr(self.lib, f"wf_time_seq_{function}")(
            self._fn(fn_address), pack.struct, method_id(method), kmax, rounds,
            ffi.from_buffer("uint64_t[]", ticks), ffi.from_buffer("uint32_t[]", c0),
            ffi.from_buffer("uint32_t[]", c1))
        if rc != 0:
            raise MeasurementError(f"wf_time_seq_{function} rejected its arguments (rc {rc})")
        shape = (rounds, kmax)
        return TimedSequence(ticks.astype(np.int64).reshape(shape), c0.reshape(shape),
                             c1.reshape(shape))


def harness_key(prototype: str, cdef: str = "") -> str:
    """The cache key of the harness for these declarations (builds nothing)."""
    scratch, functions = parse_signatures(prototype, cdef)
    source, cdecl = generate_source(scratch, functions, cdef)
    return _key(source, cdecl)


def _key(source: str, cdecl: str) -> str:
    h = hashlib.sha256()
    for part in (f"THUNK_ABI={THUNK_ABI}", source, cdecl,
                 (instrument_dir() / "wf_tsc.h").read_text(), _compiler_id(),
                 " ".join(COMPILE_ARGS), sysconfig.get_config_var("EXT_SUFFIX") or "",
                 f"cffi {cffi.__version__}"):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def build_harness(prototype: str, cdef: str = "", cache_dir: str | os.PathLike | None = None
                  ) -> CallHarness:
    """The call harness of ``prototype`` (with types from ``cdef``), built or reused.

    Raises TargetError (one line, "prototype: ..." or "cdef: ...") when the declarations
    do not parse, NativeBuildError when the generated C does not compile."""
    if re.search(r"^\s*#\s*include", cdef or "", re.M):
        raise TargetError("cdef: #include is not supported; declare the types themselves")
    scratch, functions = parse_signatures(prototype, cdef)
    source, cdecl = generate_source(scratch, functions, cdef)
    key = _key(source, cdecl)
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    with _modules_lock:
        module = _modules.get(key)
        if module is None:
            module = _build_module(key, source, cdecl, cdef, root)
            _modules[key] = module
    sigs = {name: FunctionSig(name=name, arg_types=tuple(a.cname for a in fctype.args),
                              result=fctype.result.cname)
            for name, fctype in functions}
    return CallHarness(module, sigs, key)
