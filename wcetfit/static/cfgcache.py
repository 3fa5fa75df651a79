"""On-disk cache of static models, keyed by the binary's sha256 and the model options.

Layout (all JSON, every write atomic: temporary file in the same directory + rename)::

    <root>/cfg/<sha256>-<options hash>/
        summary.json          every function of the binary (written by a whole-binary run)
        fn/<entry hex>.json   one FunctionModel each, with its direct internal callees

``<root>`` is ``$WCETFIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/wcetfit``, else
``~/.cache/wcetfit``.  ``WCETFIT_NO_CACHE=1`` disables the cache.  The options hash covers
the model format version, the CFG recovery options and the angr/capstone versions, so a
change to any of them never serves stale models.  A corrupt or unreadable entry is a miss
(logged), never an error: the cache only saves time.

Instructions are stored as (address, size, mnemonic, op_str) so that the round trip is
exact (``function_from_json`` rebuilds them from "mnemonic op_str" text, which cannot tell a
prefixed mnemonic such as "rep stosq" from its operands).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import replace
from typing import Any, Iterable

from wcetfit.model import (Block, FunctionModel, FunctionSummary, Instruction, function_from_json,
                           function_to_json, hexaddr, parse_addr)

log = logging.getLogger(__name__)

CACHE_FORMAT = 1


def default_root() -> str:
    env = os.environ.get("WCETFIT_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "wcetfit")


def enabled_by_env() -> bool:
    return os.environ.get("WCETFIT_NO_CACHE", "").lower() not in ("1", "true", "yes")


def options_key(options: dict[str, Any]) -> str:
    text = json.dumps({"cache_format": CACHE_FORMAT, **options}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _atomic_write_json(path: str, data: Any) -> None:
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            # dumps, not dump: json.dump streams through the pure-Python encoder (20x slower)
            f.write(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_json(path: str) -> Any | None:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable cache entry %s: %s", path, exc)
        return None


def encode_function(fn: FunctionModel, callees: Iterable[int]) -> dict[str, Any]:
    d = function_to_json(fn, disassembly=False)
    d["insns"] = {hexaddr(b.address): [[i.address, i.size, i.mnemonic, i.op_str]
                                       for i in b.instructions] for b in fn.blocks}
    d["callees"] = [hexaddr(a) for a in sorted(set(callees))]
    return d


def decode_function(d: dict[str, Any]) -> tuple[FunctionModel, tuple[int, ...]]:
    fn = function_from_json(d)
    insns = d["insns"]
    blocks = tuple(Block(b.address, b.size,
                         tuple(Instruction(int(a), int(s), m, o) for a, s, m, o in insns[hexaddr(b.address)]))
                   for b in fn.blocks)
    return replace(fn, blocks=blocks), tuple(parse_addr(a) for a in d["callees"])


class CfgCache:
    """Per-binary model cache.  ``enabled=False`` makes every lookup a miss and every
    store a no-op (``--no-cache``)."""

    def __init__(self, root: str | None = None, enabled: bool | None = None):
        self.root = root or default_root()
        self.enabled = enabled_by_env() if enabled is None else enabled

    def directory(self, sha256: str, options: dict[str, Any]) -> str:
        return os.path.join(self.root, "cfg", f"{sha256}-{options_key(options)}")

    # --- functions ---------------------------------------------------------------------

    def get_function(self, d: str, address: int) -> tuple[FunctionModel, tuple[int, ...]] | None:
        if not self.enabled:
            return None
        data = _read_json(os.path.join(d, "fn", f"{address:x}.json"))
        if data is None:
            return None
        try:
            return decode_function(data)
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("ignoring corrupt cache entry for %s in %s: %s", hexaddr(address), d, exc)
            return None

    def put_function(self, d: str, fn: FunctionModel, callees: Iterable[int], *,
                     replace: bool = True) -> None:
        """Keep one function's model.  ``replace=False`` keeps an entry already there: a
        whole-binary recovery knows more function entries than a per-function one and may
        cut a function elsewhere (libm's sub_6da60: 52 blocks against 61), and a target's
        stored counts were taken with the model the cache gave it ("stored counts do not
        match its static model" on every target of libm after `wcetfit cfg libm`)."""
        if not self.enabled:
            return
        path = os.path.join(d, "fn", f"{fn.address:x}.json")
        if not replace and os.path.exists(path):
            return
        try:
            _atomic_write_json(path, encode_function(fn, callees))
        except OSError as exc:
            self._write_failed(d, exc)

    # --- whole-binary summary ----------------------------------------------------------

    def get_summary(self, d: str) -> list[FunctionSummary] | None:
        if not self.enabled:
            return None
        data = _read_json(os.path.join(d, "summary.json"))
        if data is None:
            return None
        try:
            return [FunctionSummary(s["name"], parse_addr(s["address"]), int(s["blocks"]),
                                    int(s["loops"]), int(s["calls"])) for s in data["functions"]]
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("ignoring corrupt cache summary in %s: %s", d, exc)
            return None

    def get_summary_warnings(self, d: str) -> list[tuple[str, bool]]:
        """(function name, its unresolved jumps: "0x.., 0x.." or "") of the functions with
        warnings."""
        data = _read_json(os.path.join(d, "summary.json")) if self.enabled else None
        try:
            return [(str(n), u if isinstance(u, str) else bool(u))
                    for n, u in (data or {}).get("warned", [])]
        except (TypeError, ValueError):
            return []

    def put_summary(self, d: str, summaries: Iterable[FunctionSummary],
                    warned: Iterable[tuple[str, bool]] = ()) -> None:
        if not self.enabled:
            return
        data = {"functions": [{"name": s.name, "address": hexaddr(s.address), "blocks": s.blocks,
                               "loops": s.loops, "calls": s.calls} for s in summaries],
                "warned": [[n, u] for n, u in warned]}
        try:
            _atomic_write_json(os.path.join(d, "summary.json"), data)
        except OSError as exc:
            self._write_failed(d, exc)

    def _write_failed(self, d: str, exc: OSError) -> None:
        # Say it once and stop trying: a read-only cache must not cost a warning per model.
        log.warning("cannot write the model cache under %s (%s); continuing without it", d,
                    exc.strerror or exc)
        self.enabled = False
