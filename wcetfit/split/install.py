"""Installing a timing probe in the measuring process: patch, time, restore, check.

:class:`InstalledProbe` writes a layout's code (:mod:`wcetfit.split.stubs`) into memory
within ±2 GiB of the function, patches the original code (mprotect writable, check the
original bytes, write, executable again) and restores it on removal; it arms the probe
and times calls through the C loop of ``instrument/wf_probe.c``.  :class:`RestoreTable`
restores the argument memory between calls.

Every stub's code is decoded with capstone in the tests; the differential check (same
return value and argument memory with and without the probe) runs for every input.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from wcetfit.errors import MeasurementError, NativeBuildError
from wcetfit.loader import WritableData
from wcetfit.model import hexaddr
from wcetfit.split.configs import KIND_STOP
from wcetfit.split.placement import ProbeLayout, ProbePlacementError
from wcetfit.split.stubs import (INT3, OFF_LO, OFF_NSITES, OFF_SLOT, OFF_ARMED, STATE_SIZE,
                                  assemble)

# =========================================================================================
# installing and timing (in the measuring process)
# =========================================================================================

_libc = ctypes.CDLL(None, use_errno=True)
_mprotect = _libc.mprotect
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
PAGE = os.sysconf("SC_PAGE_SIZE")
PROT_R, PROT_W, PROT_X = 1, 2, 4


def _protect(address: int, size: int, prot: int) -> None:
    lo = address & ~(PAGE - 1)
    hi = (address + size + PAGE - 1) & ~(PAGE - 1)
    if _mprotect(lo, hi - lo, prot) != 0:
        err = ctypes.get_errno()
        raise MeasurementError(f"mprotect({lo:#x}, {hi - lo}) for a probe patch failed: "
                               f"{os.strerror(err)}")


def apply_patches(binary: Any, patches: Sequence[tuple[int, bytes, bytes]], what: str) -> None:
    """Write every (address, original bytes, patch) after checking that the code there is
    still the original; all or none: a failure part-way puts back what was written."""
    for at, original, _patch in patches:
        if ctypes.string_at(at, len(original)) != original:
            raise MeasurementError(f"{what}: the code at {hexaddr(binary.link_time(at))} is "
                                   "not what the static model says (already patched?)")
    done = []
    try:
        for at, _original, patch in patches:
            _write_code(at, patch)
            done.append(at)
    except BaseException:
        for at, original, _patch in patches:
            if at in done:
                _write_code(at, original)
        raise


def restore_patches(patches: Sequence[tuple[int, bytes, bytes]]) -> None:
    """Put the original bytes back at every patched address."""
    for at, original, _patch in patches:
        _write_code(at, original)


def _write_code(address: int, data: bytes) -> None:
    _protect(address, len(data), PROT_R | PROT_W)
    try:
        ctypes.memmove(address, data, len(data))
    finally:
        _protect(address, len(data), PROT_R | PROT_X)


def native_lib() -> tuple[Any, Any]:
    from wcetfit.timing.tsc import native

    ffi, lib = native()
    if not hasattr(lib, "wf_probe_time"):
        raise NativeBuildError("wcetfit._native has no probe timing loop (wf_probe.c); "
                               "run `make setup`")
    if int(lib.wf_probe_state_size()) != STATE_SIZE:
        raise NativeBuildError("wcetfit._native's probe state layout differs from "
                               "wcetfit.split.stubs'; run `make setup`")
    return ffi, lib


@dataclass(frozen=True)
class ProbeSamples:
    """Raw samples of one input under one probe."""

    ticks: np.ndarray          # float64 [repeats]: the probe's region; NaN = not measured
    fired: int                 # repeats in which the probe read the clock
    migrated: int              # repeats discarded because two readings came from two CPUs
    whole: np.ndarray          # float64 [repeats]: stop - start of the whole wrapper call


class InstalledProbe:
    """One probe configuration, live in this process: stubs + wrapper in memory near the
    binary, patches written into the original code.  Use as a context manager; the
    original bytes are restored on exit (and checked when installed)."""

    def __init__(self, binary: Any, layout: ProbeLayout, fn_entry_link: int,
                 method: str = "lfence") -> None:
        from wcetfit.loader import PROT_EXEC, PROT_READ, alloc_near

        self.binary = binary
        self.layout = layout
        self.method = method
        lo, hi = binary.span()
        probe_size = 4 * PAGE            # wrapper + 16 sites' stubs and reading paths: < 8 KB
        self._mem = alloc_near(lo, hi, probe_size + PAGE)
        code_size = self._mem.size - PAGE
        self.code_address = self._mem.address
        self.data_address = self._mem.address + code_size
        built = assemble(layout, method, bias=binary.bias,
                         fn_entry=binary.runtime(fn_entry_link),
                         code_address=self.code_address, data_address=self.data_address)
        if len(built.code) > code_size:
            self._mem.close()
            raise ProbePlacementError(f"{layout.probe.key}: stub code of {len(built.code)} "
                                      "bytes does not fit")
        self._mem.write(0, built.code + INT3 * (code_size - len(built.code)))
        self._mem.protect(0, code_size, PROT_READ | PROT_EXEC)
        self.wrapper = built.wrapper
        self.patches = built.patches
        st = (ctypes.c_uint8 * STATE_SIZE).from_address(self.data_address)
        ctypes.memset(self.data_address, 0, STATE_SIZE)
        struct.pack_into("<I", st, OFF_NSITES, len(built.slots_armed))
        for k, a in enumerate(built.slots_armed):
            struct.pack_into("<Q", st, OFF_ARMED + 8 * k, a)
            struct.pack_into("<Q", st, OFF_SLOT + 8 * k, a)
        self.installed = False

    # -- patches ----------------------------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        apply_patches(self.binary, self.patches, f"probe {self.layout.probe.key}")
        self.installed = True

    def remove(self) -> None:
        if not self.installed:
            return
        restore_patches(self.patches)
        self.installed = False

    def close(self) -> None:
        self.remove()
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def __enter__(self) -> "InstalledProbe":
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- state ------------------------------------------------------------------------------
    def fired(self) -> bool:
        return struct.unpack_from("<I", ctypes.string_at(self.data_address, 4))[0] == 1

    def arm(self) -> None:
        """Re-arm for a plain (untimed) call: the C loop does this itself."""
        raw = ctypes.string_at(self.data_address, STATE_SIZE)
        n = struct.unpack_from("<I", raw, OFF_NSITES)[0]
        ctypes.memset(self.data_address, 0, 16)
        for k in range(n):
            a = struct.unpack_from("<Q", raw, OFF_ARMED + 8 * k)[0]
            ctypes.c_uint64.from_address(self.data_address + OFF_SLOT + 8 * k).value = a

    def reading(self) -> int:
        raw = ctypes.string_at(self.data_address, 16)
        lo, hi = struct.unpack_from("<II", raw, OFF_LO)
        return (hi << 32) | lo

    # -- timing -----------------------------------------------------------------------------
    def call(self, harness: Any, function: str, pack: Any) -> Any:
        """One plain call through the wrapper (arguments restored, probe re-armed)."""
        self.arm()
        return harness.call(function, self.wrapper, pack)

    def time(self, harness: Any, function: str, pack: Any, restore: "RestoreTable",
             repeats: int, warmup: int = 2) -> ProbeSamples:
        """``warmup`` untimed and ``repeats`` timed calls through the wrapper; per repeat
        the probe's region in ticks (NaN where it did not fire or migrated)."""
        from wcetfit.timing.tsc import aux_cpu, method_id

        ffi, lib = native_lib()
        hffi = harness.ffi
        call = int(hffi.cast("uintptr_t", hffi.addressof(harness.lib, f"wf_call_{function}")))
        args = int(hffi.cast("uintptr_t", pack.struct))
        sig = harness.signature(function)
        if sig.returns_void:
            ret_obj = None
            ret = 0
        else:
            ret_obj = hffi.new(hffi.getctype(hffi.typeof(sig.result), "*"))
            ret = int(hffi.cast("uintptr_t", ret_obj))
        t0 = np.zeros(repeats, np.uint64)
        t1 = np.zeros(repeats, np.uint64)
        tp = np.zeros(repeats, np.uint64)
        c0 = np.zeros(repeats, np.uint32)
        c1 = np.zeros(repeats, np.uint32)
        cp = np.zeros(repeats, np.uint32)
        rc = lib.wf_probe_time(
            method_id(self.method), ffi.cast("void *", call), ffi.cast("void *", self.wrapper),
            ffi.cast("void *", args), ffi.cast("void *", ret),
            ffi.cast("struct wf_probe_copy *", restore.address), restore.count,
            ffi.cast("void *", self.data_address), warmup, repeats,
            ffi.from_buffer("uint64_t[]", t0), ffi.from_buffer("uint64_t[]", t1),
            ffi.from_buffer("uint64_t[]", tp), ffi.from_buffer("uint32_t[]", c0),
            ffi.from_buffer("uint32_t[]", c1), ffi.from_buffer("uint32_t[]", cp))
        del ret_obj
        if rc != 0:
            raise MeasurementError(f"wf_probe_time rejected its arguments (rc {rc})")
        fired = tp != 0
        if self.layout.probe.kind == KIND_STOP:
            ticks = (tp.astype(np.int64) - t0.astype(np.int64)).astype(np.float64)
            other = aux_cpu(c0)
        else:
            ticks = (t1.astype(np.int64) - tp.astype(np.int64)).astype(np.float64)
            other = aux_cpu(c1)
        migrated = fired & (aux_cpu(cp) != other)
        ticks[~fired | migrated] = np.nan
        whole = (t1.astype(np.int64) - t0.astype(np.int64)).astype(np.float64)
        whole[aux_cpu(c0) != aux_cpu(c1)] = np.nan
        return ProbeSamples(ticks, int(fired.sum()), int(migrated.sum()), whole)


class RestoreTable:
    """The argument memory of one packed call, as the C loop restores it: copies of the
    initial bytes of every restorable buffer (from the harness's public snapshot)."""

    def __init__(self, harness: Any, pack: Any) -> None:
        ffi, _lib = native_lib()
        initial = harness.snapshot(pack)
        self._keep = [ffi.new("char[]", max(len(b), 1)) for b in initial]
        for buf, data in zip(self._keep, initial):
            ffi.memmove(buf, data, len(data))
        self.count = len(initial)
        self._table = ffi.new("struct wf_probe_copy[]", max(self.count, 1))
        for k, (b, data) in enumerate(zip(pack.buffers, initial)):
            self._table[k].dst = ffi.cast("void *", b.address)
            self._table[k].src = self._keep[k]
            self._table[k].len = len(data)
        self.address = int(ffi.cast("uintptr_t", self._table))


# =========================================================================================
# the binary's writable data (for the differential check)
# =========================================================================================

def differential_check(probe: InstalledProbe, harness: Any, function: str, pack: Any,
                       original: int, data: WritableData | None = None,
                       index: int | None = None) -> None:
    """Same return value, same argument memory and same writable data of the binary with
    the probe as without it, from the same initial state; SelfCheckError otherwise."""
    from wcetfit.errors import SelfCheckError

    where = "" if index is None else f" for input {index}"
    saved = data.save() if data is not None else None
    was = probe.installed
    probe.remove()
    try:
        ret0 = harness.call(function, original, pack)
        mem0 = harness.snapshot(pack)
        glob0 = data.save() if data is not None else None
    finally:
        if saved is not None:
            data.restore(saved)
        if was:
            probe.install()
    ret1 = probe.call(harness, function, pack)
    mem1 = harness.snapshot(pack)
    glob1 = data.save() if data is not None else None
    if saved is not None:
        data.restore(saved)
    harness.restore(pack)
    if not _same(ret0, ret1):
        raise SelfCheckError(f"probe {probe.layout.probe.key}{where}: {function} returned "
                             f"{ret1!r} with the probe, {ret0!r} without")
    if mem0 != mem1:
        raise SelfCheckError(f"probe {probe.layout.probe.key}{where}: argument memory after "
                             f"{function} differs with the probe")
    if glob0 != glob1:
        raise SelfCheckError(f"probe {probe.layout.probe.key}{where}: {function} left "
                             "different data in the binary's writable memory with the probe")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b
