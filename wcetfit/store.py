"""The target's persistent store: everything measured lives under ``TARGET_DIR/.wcetfit/``.

Layout::

    .wcetfit/store.json       format version + identity (binary sha256, prototypes)
    .wcetfit/<name>.npz       one dataset: numpy arrays + a JSON "__meta__" entry

Every dataset is written atomically (temporary file + rename), so an interrupted run
leaves either the previous or the new version, never half a file.  Measurements are
never mixed across identities: a store made for another binary or other prototypes
is refused with a message saying what differs (``--fresh`` starts over), and a
dataset that depends on the machine (times, calibration) carries the machine's
fingerprint and is refused on another machine.

Format history (bump FORMAT_VERSION on every change and add a line here):
  1  first version: store.json identity; datasets as .npz with "__meta__" JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from wcetfit.static.elfinfo import sha256_file
from wcetfit.errors import StoreError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
STORE_FILE = "store.json"


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


def machine_fingerprint() -> dict[str, str]:
    """Times measured on one machine are not mixed with another's."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "host": platform.node(), "machine": platform.machine()}


def _atomic_write_bytes(path: str, write) -> None:
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class Store:
    """One target's store.  Opening checks the format version and the identity."""

    def __init__(self, directory: str, identity: StoreIdentity, *, fresh: bool = False):
        self.directory = directory
        self.identity = identity
        if fresh and os.path.isdir(directory):
            log.info("--fresh: removing %s", directory)
            shutil.rmtree(directory)
        os.makedirs(directory, exist_ok=True)
        meta_path = os.path.join(directory, STORE_FILE)
        # The identity binds the store only once something is measured (see save): a run
        # that failed before measuring (a wrong prototype, say) does not lock the target.
        self._bound = False
        if os.path.exists(meta_path):
            self._check(meta_path)
        else:
            self._write_meta()

    def _check(self, meta_path: str) -> None:
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            version = int(meta["format"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{meta_path} is unreadable ({exc}); remove it or use --fresh") \
                from None
        if version > FORMAT_VERSION:
            raise StoreError(f"{self.directory} was written by a newer wcetfit (store format "
                             f"{version}, this version reads up to {FORMAT_VERSION}); "
                             "upgrade wcetfit or use --fresh")
        if version < FORMAT_VERSION:
            raise StoreError(f"{self.directory} has the old store format {version}; "
                             "use --fresh to measure again")
        differs = [f"{key} was {meta.get(key, '?')[:12]}…, now {value[:12]}…"
                   for key, value in asdict(self.identity).items() if meta.get(key) != value]
        self._bound = bool(meta.get("bound", True))    # stores before "bound": bound
        if differs and not self._bound:
            # Nothing measured under the old identity: what is stored (empty datasets,
            # failures of a wrong prototype) belongs to it and goes; the new one is taken.
            log.info("%s: nothing measured yet; taking the new identity (%s)",
                     self.directory, "; ".join(differs))
            for name in self.names():
                self.drop(name)
            self._write_meta()
            return
        if differs:
            what = "the binary changed" if "binary_sha256" in differs[0] else "the prototype changed"
            raise StoreError(f"{self.directory} holds measurements of another target ({what}: "
                             f"{'; '.join(differs)}); use --fresh to start over")

    @staticmethod
    def _write_json(path: str, data: Any) -> None:
        text = json.dumps(data, indent=1).encode()
        _atomic_write_bytes(path, lambda f: f.write(text))

    def path(self, name: str) -> str:
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"bad dataset name {name!r}")
        return os.path.join(self.directory, f"{name}.npz")

    def _write_meta(self) -> None:
        self._write_json(os.path.join(self.directory, STORE_FILE),
                         {"format": FORMAT_VERSION, **asdict(self.identity),
                          "bound": self._bound})

    def save(self, name: str, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
             *, measured: bool = True) -> None:
        """Write one dataset.  ``measured``: it holds measurements (not only failures or
        nothing), so the store is bound to its identity from now on."""
        if measured and not self._bound:
            self._bound = True          # bound first: a crash between leaves it bound
            self._write_meta()
        payload = dict(arrays)
        if "__meta__" in payload:
            raise ValueError("'__meta__' is reserved")
        payload["__meta__"] = np.array(json.dumps({"format": FORMAT_VERSION, **meta}))
        _atomic_write_bytes(self.path(name), lambda f: np.savez(f, **payload))

    def load(self, name: str, *, machine: bool = False) -> tuple[dict[str, Any],
                                                                  dict[str, np.ndarray]] | None:
        """The dataset, or None if absent.  ``machine``: refuse another machine's data."""
        path = self.path(name)
        if not os.path.exists(path):
            return None
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files if k != "__meta__"}
                meta = json.loads(str(npz["__meta__"]))
        except (OSError, ValueError, KeyError) as exc:
            raise StoreError(f"{path} is unreadable ({exc}); use --fresh") from None
        if int(meta.get("format", 0)) > FORMAT_VERSION:
            raise StoreError(f"{path} was written by a newer wcetfit; use --fresh")
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
            return True
        except FileNotFoundError:
            return False
