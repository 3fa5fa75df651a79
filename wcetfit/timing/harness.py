"""The compiled call harness of one prototype: packing arguments, calling, timing.

:class:`CallHarness` wraps a module built by :func:`wcetfit.timing.thunk.build_harness`.
:meth:`CallHarness.pack` turns an input's arguments into an :class:`ArgPack`: the packed
argument struct plus a backup of every argument buffer whose extent is known, which the C
loops copy back before every call (never inside the timed region), so each repeat starts
from the input's own memory.  :meth:`CallHarness.call`, :meth:`CallHarness.time` and
:meth:`CallHarness.time_seq` run the generated ``wf_call_F``, ``wf_time_F`` and
``wf_time_seq_F`` (:mod:`wcetfit.timing.thunk_source`) and return plain Python values and
the raw samples (:class:`TimedCalls`, :class:`TimedSequence`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

import cffi
import numpy as np

from wcetfit.errors import InputsError, MeasurementError, TargetError
from wcetfit.timing.prototype import FunctionSig, one_line

log = logging.getLogger(__name__)


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
    """The compiled harness of one prototype.  Build with
    :func:`wcetfit.timing.thunk.build_harness`."""

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
                                  f"{one_line(exc)}") from None
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

    def initial(self, pack: ArgPack) -> tuple[bytes, ...]:
        """The backed-up initial bytes of every restorable buffer (what each call starts
        from), in :attr:`ArgPack.buffers` order."""
        return tuple(bytes(self.ffi.buffer(backup, b.size))
                     for backup, b in zip(pack._backups, pack.buffers))

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

    def call(self, function: str, fn_address: int, pack: ArgPack, restore: bool = True,
             convert: bool = True) -> Any:
        """One plain call of the code at ``fn_address`` with the packed arguments.

        With ``restore`` (default) the argument memory is first reset to its packed
        state, so two calls — of the original and of an instrumented copy, say — start
        from identical bytes; compare their return values and :meth:`snapshot` after.
        Returns the C return value as Python (None for void, int for pointers, dict
        for structs), or with ``convert`` False as the cdata itself (a pointer another
        call takes: a handle, a context)."""
        sig = self._check_pack(function, pack)
        if restore:
            self.restore(pack)
        ret = self._ret(sig)
        getattr(self.lib, f"wf_call_{function}")(self._fn(fn_address), pack.struct, ret)
        if sig.returns_void:
            return None
        return _to_python(self.ffi, ret[0]) if convert else ret[0]

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
