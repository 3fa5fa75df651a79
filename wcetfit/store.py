"""The target's persistent store: everything measured lives under ``TARGET_DIR/.wcetfit/``.

Layout::

    .wcetfit/store.json       format version + identity (binary sha256, prototypes)
                              + the fingerprint of the inputs module
    .wcetfit/<name>.npz       one dataset: numpy arrays + a JSON "__meta__" entry

Every file is written atomically (temporary file + fsync + rename + fsync of the
directory), so an interrupted run, even one killed or cut off by a power loss, leaves
either the previous or the new version, never half a file; a full disk leaves the
previous version and says so.  Every file carries a SHA-256 of its content: a file
damaged anyway (truncated by hand, a bad disk, a copy cut short) is moved aside to
``<name>.corrupt-<time>`` with one error line, and what it held is measured again.
One run at a time writes a store: opening takes the store's lock
(:mod:`wcetfit.locks`, ``.wcetfit/lock``).  Measurements are
never mixed across identities: a store made for another binary or other prototypes
is refused with a message saying what differs (``--fresh`` starts over), and a
dataset that depends on the machine (times, calibration) carries the machine's
fingerprint and is refused on another machine.  Nor are they mixed across versions of
the inputs module: the store records a fingerprint of what generates the inputs
(:class:`InputsFingerprint`) and a store measured under another one is refused (or,
for a command that only reports, flagged: see :class:`Store`).

Format history (bump FORMAT_VERSION on every change and add a line here):
  1  first version: store.json identity; datasets as .npz with "__meta__" JSON.
  2  checksums: store.json has "sha256" of its other fields (canonical JSON); each
     dataset has "__sha256__" over its meta and arrays (name, dtype, shape, bytes) and
     its meta names the store identity.  Format 1 stores are still read (their
     datasets unchecked) and store.json is rewritten as format 2.
  3  store.json has "inputs": the fingerprint of the inputs module the measurements were
     taken with ({"module", "sha256"}, or null when the opener gave none).  Format 2
     stores (and format 3 ones with null) are still read: their measurements are taken
     to be of the inputs module as it is now, whose fingerprint is recorded (store.json
     rewritten as format 3) -- there is no telling what they were measured with, and
     refusing them would make every existing user measure again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from wcetfit.static.elfinfo import sha256_file
from wcetfit.errors import StoreError
from wcetfit import locks

log = logging.getLogger(__name__)

FORMAT_VERSION = 3
STORE_FILE = "store.json"
_CHECKSUM_KEY = "__sha256__"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class StoreIdentity:
    """What measurements in one store must share."""

    binary_sha256: str
    prototype_sha256: str       # of cdef + prototype, whitespace-normalised

    @staticmethod
    def of(binary_path: str, cdef: str, prototype: str) -> "StoreIdentity":
        normalised = " ".join((cdef + "\n" + prototype).split())
        return StoreIdentity(sha256_file(binary_path), sha256_text(normalised))


@dataclass(frozen=True)
class InputsFingerprint:
    """What decides the arguments each input gets, beyond what the identity and the
    dataset names already separate.

    Input ``i`` of seed ``s`` is ``generate(ctx)`` of the inputs module with ``ctx.rng =
    default_rng([s, i])``, ``ctx.function`` the measured function and ``ctx.ffi`` the
    prototype's types.  Of these, the seed and the function name are in every dataset's
    name (``counts-f-s1``: another seed reads other datasets, never these) and the
    prototype and cdef in the identity; ``[measure] inputs`` says how many inputs, not
    what input ``i`` is, and no other wcetfit.toml setting reaches ``generate``.  What
    is left is the module's code: its bytes (any edit counts, a comment too: telling
    harmless edits apart would mean guessing).  A module it imports is not followed."""

    module: str          # the module's path as the user names it (relative to the target)
    sha256: str          # of its bytes

    @staticmethod
    def of(module_path: str, directory: str) -> "InputsFingerprint":
        try:
            with open(module_path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError as exc:
            raise StoreError(f"{module_path}: cannot be read ({exc.strerror})") from None
        rel = os.path.relpath(module_path, directory)
        return InputsFingerprint(module_path if rel.startswith("..") else rel, digest)


INPUTS_CHANGED_POLICIES = ("refuse", "warn")


def machine_fingerprint() -> dict[str, str]:
    """Times measured on one machine are not mixed with another's."""
    from wcetfit.machine import cpu_info

    return {"cpu": cpu_info().model, "host": platform.node(), "machine": platform.machine()}


def _fsync_dir(directory: str) -> None:
    """Make a rename durable: the directory entry is data of the directory."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write_bytes(path: str, write) -> None:
    directory = os.path.dirname(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(directory)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            kept = "its previous version is kept intact" if os.path.exists(path) else \
                "nothing was written"
            raise StoreError(f"no space left on the device to write {path}: {kept}; free "
                             "some space and run again (it continues from what is stored)") \
                from None
        raise
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _json_sha256(data: Mapping[str, Any]) -> str:
    return sha256_text(json.dumps(data, sort_keys=True, separators=(",", ":")))


def _arrays_sha256(meta_text: str, arrays: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256(meta_text.encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _read_dataset(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Meta and arrays of one .npz; ValueError saying what is wrong when damaged."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except OSError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, EOFError, zlib.error... all "damaged"
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    if "__meta__" not in arrays:
        raise ValueError("no __meta__ entry")
    meta_text = str(arrays.pop("__meta__"))
    stored_sum = arrays.pop(_CHECKSUM_KEY, None)
    try:
        meta = json.loads(meta_text)
        if not isinstance(meta, dict):
            raise ValueError("meta is not an object")
        version = int(meta.get("format", 0))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"bad meta: {exc}") from None
    if version >= 2 or stored_sum is not None:
        if stored_sum is None:
            raise ValueError("no checksum")
        if str(stored_sum) != _arrays_sha256(meta_text, arrays):
            raise ValueError("checksum mismatch")
    return meta, arrays


class Store:
    """One target's store.  Opening takes its lock and checks the format version and
    the identity.  ``wait``: when another run holds the store, wait for it (saying for
    whom) or, False, refuse with a StoreError.

    ``inputs``: the fingerprint of the inputs module now (None: keep what the store
    records, for openers that only read datasets).  A store that holds measurements
    taken with another one is, by ``inputs_changed``:

    * "refuse" (the default): a StoreError saying what changed and the remedy, the store
      untouched -- for every command that measures (new inputs' rows would be mixed with
      the old ones' in one fit) or fits (a fit of the old inputs reported as current);
    * "warn": opened, the stored fingerprint kept (so the next measuring command still
      refuses), a warning logged and kept in ``inputs_changed_note`` -- for ``report``,
      which shows what was measured: those results are still true of the inputs that
      were measured, only no longer of what generate() builds now, and the user who
      edited inputs.py may well want to read the old report before measuring again."""

    def __init__(self, directory: str, identity: StoreIdentity, *, fresh: bool = False,
                 wait: bool = True, inputs: InputsFingerprint | None = None,
                 inputs_changed: str = "refuse"):
        if inputs_changed not in INPUTS_CHANGED_POLICIES:
            raise ValueError(f"inputs_changed must be one of {INPUTS_CHANGED_POLICIES}")
        self.directory = directory
        self.identity = identity
        self.inputs = inputs
        self._inputs_policy = inputs_changed
        self.inputs_changed_note: str | None = None
        # what store.json records (written back as it is when the opener gave none)
        self._inputs_record: dict[str, str] | None = asdict(inputs) if inputs else None
        os.makedirs(directory, exist_ok=True)
        self.lock = locks.store_lock(directory, wait=wait)
        if fresh:
            log.info("--fresh: removing what %s holds", directory)
            for name in os.listdir(directory):
                if name == locks.STORE_LOCK:
                    continue        # held by this run
                full = os.path.join(directory, name)
                if os.path.isdir(full) and not os.path.islink(full):
                    shutil.rmtree(full)
                else:
                    os.unlink(full)
        self._remove_stale_temporaries()
        meta_path = os.path.join(directory, STORE_FILE)
        # The identity binds the store only once something is measured (see save): a run
        # that failed before measuring (a wrong prototype, say) does not lock the target.
        self._bound = False
        if not os.path.exists(meta_path) or not self._check(meta_path):
            self._write_meta()

    def _remove_stale_temporaries(self) -> None:
        # Holding the lock, every temporary file is a killed run's: its data never
        # reached the store, and the next save writes it again.
        for name in os.listdir(self.directory):
            if name.startswith(".tmp-"):
                try:
                    os.unlink(os.path.join(self.directory, name))
                except OSError:
                    pass

    def _identity_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"format": FORMAT_VERSION, **asdict(self.identity),
                                  "bound": self._bound, "inputs": self._inputs_record}
        record["sha256"] = _json_sha256(record)
        return record

    def _set_aside(self, path: str, reason: str) -> str:
        """Move a damaged file out of the way and say so (one error line)."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = f"{path}.corrupt-{stamp}"
        n = 1
        while os.path.exists(aside):
            n += 1
            aside = f"{path}.corrupt-{stamp}-{n}"
        os.replace(path, aside)
        _fsync_dir(self.directory)
        # (a report, which measures nothing, read "what it held is measured again" and
        # then "no times stored")
        log.error("%s is damaged (%s): moved aside to %s; what it held is measured again "
                  "by the next measuring command (`wcetfit analyze`)", path, reason,
                  os.path.basename(aside))
        return aside

    def _check(self, meta_path: str) -> bool:
        """True when store.json is sound and current; False when it must be rewritten."""
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
            version = int(meta["format"])
        except (ValueError, KeyError, TypeError) as exc:
            self._set_aside(meta_path, f"{type(exc).__name__}: {exc}")
            return False
        except OSError as exc:
            raise StoreError(f"{meta_path} is unreadable ({exc.strerror}); check its "
                             "permissions or use --fresh") from None
        if version > FORMAT_VERSION:
            raise StoreError(f"{self.directory} was written by a newer wcetfit (store format "
                             f"{version}, this version reads up to {FORMAT_VERSION}); "
                             "upgrade wcetfit or use --fresh")
        if version < 1:
            raise StoreError(f"{self.directory} has the unknown store format {version}; "
                             "use --fresh to measure again")
        if version >= 2:
            stored = meta.pop("sha256", None)
            if stored != _json_sha256(meta):
                self._set_aside(meta_path, "checksum mismatch")
                return False
        differs = [f"{key} was {str(meta.get(key, '?'))[:12]}…, now {value[:12]}…"
                   for key, value in asdict(self.identity).items() if meta.get(key) != value]
        self._bound = bool(meta.get("bound", True))    # stores before "bound": bound
        if differs and not self._bound:
            # Nothing measured under the old identity: what is stored (empty datasets,
            # failures of a wrong prototype) belongs to it and goes; the new one is taken.
            log.info("%s: nothing measured yet; taking the new identity (%s)",
                     self.directory, "; ".join(differs))
            for name in self.names():
                self.drop(name)
            return False
        if differs:
            what = "the binary changed" if "binary_sha256" in differs[0] else "the prototype changed"
            raise StoreError(f"{self.directory} holds measurements of another target ({what}: "
                             f"{'; '.join(differs)}); use --fresh to start over")
        if not self._check_inputs(meta.get("inputs")):
            return False
        return version == FORMAT_VERSION   # formats 1, 2: rewritten as the current format

    def _check_inputs(self, stored: Any) -> bool:
        """Compare the stored fingerprint of the inputs module with the opener's; False
        when store.json must be rewritten (the fingerprint taken)."""
        if self.inputs is None:
            self._inputs_record = stored if isinstance(stored, dict) else None
            return True
        now = asdict(self.inputs)
        if not isinstance(stored, dict) or "sha256" not in stored:
            # Written before the store recorded it (format 2), or by an opener that gave
            # none: nothing says what the measurements were taken with.  They are taken
            # as the current module's rather than refused -- refusing would make every
            # existing store measure again -- and the fingerprint is recorded now, so
            # that from here on an edit is caught.
            if self._bound:
                log.warning("%s: this store was written before wcetfit recorded the inputs "
                            "module's fingerprint; its measurements are taken to be of %s as "
                            "it is now (recorded from now on: a later edit is refused) -- if "
                            "you edited it since they were measured, run `wcetfit analyze "
                            "--fresh %s`", self.directory, self.inputs.module,
                            os.path.dirname(self.directory))
            return False
        if stored.get("sha256") == now["sha256"]:
            if stored.get("module") != now["module"]:
                return False        # the same code under another name: record the name
            return True
        old_module = str(stored.get("module", "?"))
        if old_module == now["module"]:
            what = (f"{now['module']} changed since the measurements were taken (sha256 "
                    f"{str(stored['sha256'])[:12]}…, now {now['sha256'][:12]}…)")
        else:
            what = (f"the inputs module changed since the measurements were taken (they "
                    f"were of {old_module}, sha256 {str(stored['sha256'])[:12]}…; "
                    f"wcetfit.toml now names {now['module']}, sha256 {now['sha256'][:12]}…)")
        if not self._bound:
            # Nothing measured with the old module (only failures, or nothing): they go
            # with it, and the new fingerprint is taken, as for a new identity.
            log.info("%s: nothing measured yet; taking the new inputs module (%s)",
                     self.directory, what)
            for name in self.names():
                self.drop(name)
            return False
        if self._inputs_policy == "warn":
            self.inputs_changed_note = (
                f"{what}: the stored results are those of the inputs the old generate() "
                "built, not of what it builds now (input arguments are not shown)")
            log.warning("%s", self.inputs_changed_note)
            self._inputs_record = stored        # kept: measuring stays refused
            return True
        # `analyze --fresh` by name: fit, search, split and reach, refused here too,
        # have no --fresh of their own
        raise StoreError(f"{what}: {self.directory} holds the measurements of the old "
                         "generate(), not of what it builds now; run `wcetfit analyze --fresh "
                         f"{os.path.dirname(self.directory)}` to measure again from scratch "
                         f"(what is stored is discarded), or restore the old {old_module}")

    @staticmethod
    def _write_json(path: str, data: Any) -> None:
        text = json.dumps(data, indent=1).encode()
        _atomic_write_bytes(path, lambda f: f.write(text))

    def path(self, name: str) -> str:
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"bad dataset name {name!r}")
        return os.path.join(self.directory, f"{name}.npz")

    def _write_meta(self) -> None:
        self._write_json(os.path.join(self.directory, STORE_FILE), self._identity_record())

    def save(self, name: str, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
             *, measured: bool = True) -> None:
        """Write one dataset.  ``measured``: it holds measurements (not only failures or
        nothing), so the store is bound to its identity from now on."""
        if measured and not self._bound:
            self._bound = True          # bound first: a crash between leaves it bound
            self._write_meta()
        payload = {k: np.asarray(v) for k, v in arrays.items()}
        if "__meta__" in payload or _CHECKSUM_KEY in payload:
            raise ValueError(f"'__meta__' and '{_CHECKSUM_KEY}' are reserved")
        meta_text = json.dumps({"format": FORMAT_VERSION, **meta,
                                "identity": asdict(self.identity)})
        checksum = _arrays_sha256(meta_text, payload)
        payload["__meta__"] = np.array(meta_text)
        payload[_CHECKSUM_KEY] = np.array(checksum)
        _atomic_write_bytes(self.path(name), lambda f: np.savez(f, **payload))

    def load(self, name: str, *, machine: bool = False) -> tuple[dict[str, Any],
                                                                  dict[str, np.ndarray]] | None:
        """The dataset, or None if absent.  ``machine``: refuse another machine's data.

        A damaged dataset (unreadable, truncated, checksum mismatch) is moved aside with
        one error line and counts as absent, so what it held is measured again."""
        path = self.path(name)
        if not os.path.exists(path):
            return None
        try:
            meta, arrays = _read_dataset(path)
        except ValueError as exc:
            self._set_aside(path, str(exc))
            return None
        except OSError as exc:
            raise StoreError(f"{path} is unreadable ({exc.strerror}); check its permissions "
                             "or use --fresh") from None
        if int(meta.get("format", 0)) > FORMAT_VERSION:
            raise StoreError(f"{path} was written by a newer wcetfit; use --fresh")
        identity = meta.get("identity")
        if identity is not None and identity != asdict(self.identity):
            raise StoreError(f"{path} holds measurements of another target (its binary or "
                             "prototype differs from this store's); use --fresh")
        if machine:
            here = machine_fingerprint()
            there = meta.get("machine")
            if there is not None and there != here:
                diff = ", ".join(f"{k}: {there.get(k)!r} there, {here[k]!r} here"
                                 for k in here if there.get(k) != here[k])
                raise StoreError(f"{path} was measured on another machine ({diff}); times "
                                 "from different machines are not mixed: use --fresh")
        return meta, arrays

    def names(self) -> list[str]:
        return sorted(n[:-4] for n in os.listdir(self.directory) if n.endswith(".npz"))

    def drop(self, name: str) -> bool:
        try:
            os.unlink(self.path(name))
            _fsync_dir(self.directory)
            return True
        except FileNotFoundError:
            return False
