"""The report of an analysis kept for the next ``wcetfit report`` of the same measurements.

Fitting and bounding are deterministic functions of what is stored, the target's
settings and the code, and they are most of a report's time (libcrypto's SHA1: 19 s, of
which the fit is 9 s, for a report read back in 0.1 s).  A user reads one analysis many
ways (the summary, ``--full``, ``--function``, ``--json``, ``--html``), so the report an
analysis produced is kept under a key over everything it was computed from:

* the code: every file of the wcetfit package, and the numerical libraries' versions;
* the target as loaded (``wcetfit.toml`` with the command's overrides), the functions'
  static models (as the model cache stores them) and the measured functions' addresses
  (an IFUNC resolves by the CPU);
* every file of the target's store (counts, times, searched and reached inputs,
  per-activation rows), by content, and the inputs module's fingerprint now;
* this boot's calibration of the timing method (the least empty timed region: the fit's
  floor for the overhead ε);
* what the command adds (``report --inputs``, ``analyze``'s notes).

Any change to one of them is a different key: the analysis runs again.  The warnings the
analysis logged are kept with it and logged again when the report is read back, so a
cached report says everything a computed one says.

One entry per target, function and command options, in ``<cache root>/reports`` (the
static model cache's root: ``$WCETFIT_CACHE_DIR``, ``$XDG_CACHE_HOME/wcetfit`` or
``~/.cache/wcetfit``), never in the store: ``report`` only reads the store.
``WCETFIT_NO_CACHE=1`` or ``report --no-cache`` compute every time.  A missing, damaged
or stale entry is a miss (logged at debug level), never an error: the cache only saves
time.  Entries are pickles, read only from the user's own cache directory.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

# Raised whenever what an entry holds changes shape (the key covers the code anyway).
CACHE_FORMAT = 1

# Records below this level are not kept: what a report run shows by default is warnings.
KEPT_LEVEL = logging.WARNING


@dataclass(frozen=True)
class ReportOf:
    """What the CLI prints for one measured function read back from the cache: the
    function as wcetfit.toml names it and its report (an Analysis without the fit)."""

    root: str
    report: Any


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over the wcetfit package's files (source and native part) and the versions
    of the libraries the numbers come from."""
    import numpy
    import scipy

    package = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for directory, subdirs, files in os.walk(package):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".py", ".so")):
                continue
            path = os.path.join(directory, name)
            h.update(os.path.relpath(path, package).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    versions = [sys.version, numpy.__version__, scipy.__version__]
    try:
        from importlib.metadata import version
        versions.append(version("highspy"))
    except Exception:  # noqa: BLE001 -- absent: the key says so
        versions.append("no highspy")
    h.update(json.dumps(versions).encode())
    return h.hexdigest()


# A measurement file's seed in its name (counts-f-s1.npz, times-f-s890222121-lfence-r5.npz).
_SEED_IN_NAME = re.compile(r"-s(\d+)(?=[-.])")


def store_digest(directory: str, seed: int | None = None) -> str:
    """sha256 over the store's files by name and content (its lock and a killed run's
    temporaries left out: they are not measurements); with ``seed``, only the files of
    inputs of that seed and those of none.  A check's fresh inputs have a seed of their
    own and never enter the analysis: counted, every check made the next report compute
    again (libbz2: 61 s instead of 1.1 s)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name == "lock" or name.startswith(".tmp-") or not os.path.isfile(path):
            continue
        other = _SEED_IN_NAME.search(name)
        if seed is not None and other is not None and int(other.group(1)) != int(seed):
            continue
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def analysis_key(session: Any, root: str, extra: Sequence[Any] = ()) -> str:
    """The key of ``root``'s analysis in ``session`` (module docstring)."""
    from wcetfit.static.cfgcache import encode_function

    functions = session.functions_of(root)
    models = {name: encode_function(fn, ()) for name, fn in sorted(functions.items())}
    store = session.store
    parts = {
        "format": CACHE_FORMAT,
        "code": code_digest(),
        # the target's settings but the number of inputs to measure: the analysis is of
        # what is stored (`analyze --inputs 200` on a target of 500, then `report`,
        # computed the same analysis again)
        "target": repr(_without_input_count(session.target)),
        "root": root,
        "roots": sorted((k, int(v)) for k, v in session.roots.items()),
        "models": hashlib.sha256(json.dumps(models, sort_keys=True, default=str)
                                 .encode()).hexdigest(),
        "store": store_digest(store.directory, session.target.measure.seed),
        "inputs": asdict(store.inputs) if store.inputs is not None else None,
        "inputs_changed": store.inputs_changed_note,
        "overhead_floor": _overhead_floor(session),
        "extra": repr(tuple(extra)),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _without_input_count(target: Any) -> Any:
    """``target`` with its [measure] inputs set aside (the key's "target")."""
    from dataclasses import replace

    try:
        return replace(target, measure=replace(target.measure, inputs=0))
    except TypeError:               # not a dataclass (a test's stand-in)
        return target


def _overhead_floor(session: Any) -> float | str | None:
    """This boot's least empty timed region of the target's timing method, which the fit
    holds ε above (wcetfit.pipeline.fit_stage): a new boot calibrates anew."""
    from wcetfit.errors import WcetfitError
    from wcetfit.timing.calibrate import empty_region_floor
    from wcetfit.timing.run import resolve_method

    try:
        method, _ = resolve_method(session.target)
        return empty_region_floor(method)
    except WcetfitError as exc:
        return f"no calibration: {exc}"


def _entry_path(session: Any, root: str, extra: Sequence[Any]) -> str:
    """One file per target folder, function and options: a new analysis replaces the
    last one's entry instead of adding to the cache."""
    from wcetfit.static.cfgcache import default_root

    slot = hashlib.sha256(repr((os.path.realpath(session.target.directory), root,
                                tuple(extra))).encode()).hexdigest()[:24]
    return os.path.join(default_root(), "reports", f"{slot}.pickle")


def enabled() -> bool:
    from wcetfit.static.cfgcache import enabled_by_env
    return enabled_by_env()


def load(session: Any, root: str, key: str, extra: Sequence[Any] = ()) -> Any | None:
    """The cached report of this key (its logged warnings logged again), or None."""
    path = _entry_path(session, root, extra)
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
        if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT:
            raise ValueError("another entry format")
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 -- a damaged entry is a miss, never an error
        log.debug("ignoring the cached analysis %s: %s", path, exc)
        return None
    if entry.get("key") != key:
        log.debug("cached analysis %s is of other measurements, settings or code", path)
        return None
    for level, name, message in entry.get("records", ()):
        logging.getLogger(name).log(level, "%s", message)
    log.info("%s: the report of the analysis cached in %s (same measurements, settings "
             "and code; --no-cache computes it again)", root, path)
    return entry["report"]


def save(session: Any, root: str, key: str, report: Any,
         records: Sequence[tuple[int, str, str]], extra: Sequence[Any] = ()) -> None:
    """Keep the report under its key; a failure to write is logged, never raised."""
    path = _entry_path(session, root, extra)
    entry = {"format": CACHE_FORMAT, "key": key, "report": report, "records": list(records)}
    tmp = None
    try:
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        log.debug("the analysis of %s is not cached (%s)", root, exc)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


class _Capture(logging.Handler):
    """The records an analysis logs, to be logged again when its report is read back."""

    def __init__(self) -> None:
        super().__init__(level=KEPT_LEVEL)
        self.records: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, record.getMessage()))


def cached_report(session: Any, root: str, compute: Callable[[], Any], *,
                  extra: Sequence[Any] = (), use_cache: bool = True) -> tuple[Any, bool]:
    """(report, read back): the cached report of ``root``'s analysis when its key
    matches, else ``compute()``'s (an object with ``.report``), kept for the next time."""
    if not enabled():
        return compute().report, False
    key = analysis_key(session, root, extra)
    # (--no-cache computes it again, and keeps it: `report --no-cache` then `report`
    # computed twice)
    report = load(session, root, key, extra) if use_cache else None
    if report is not None:
        return report, True
    capture = _Capture()
    logger = logging.getLogger("wcetfit")
    logger.addHandler(capture)
    try:
        analysis = compute()
    finally:
        logger.removeHandler(capture)
    save(session, root, key, analysis.report, capture.records, extra)
    return analysis.report, False
