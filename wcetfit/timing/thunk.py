"""Per-prototype call harness: built from a target's C declarations, cached on disk.

:func:`build_harness` parses the prototype (:mod:`wcetfit.timing.prototype`), generates the
harness's C (:mod:`wcetfit.timing.thunk_source`), compiles it with cffi in API mode and
returns a :class:`wcetfit.timing.harness.CallHarness` that calls or times any function of
the prototype at a run-time address.  The built module's ``ffi`` is the one inputs modules
allocate arguments with (``ctx.ffi``), so the cdata types of the arguments are the
harness's own.

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
from pathlib import Path
from typing import Any, Iterator

import cffi

from wcetfit.errors import NativeBuildError, TargetError
from wcetfit.timing.harness import CallHarness
from wcetfit.timing.prototype import FunctionSig, one_line, parse_signatures
from wcetfit.timing.thunk_source import THUNK_ABI, generate_source

log = logging.getLogger(__name__)

COMPILE_ARGS = ("-O2", "-std=gnu11", "-fno-strict-aliasing")


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
                                       f"{one_line(exc)}") from None
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
                                       f"{_first_error(text) if text.strip() else one_line(failure)}")
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
