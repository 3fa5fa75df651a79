"""Per-activation probes: a TSC reading at the entry and at the return of every activation
of the binary's own functions, in the original code, in the measuring child only.

Why here (split/) and not in timing/: the probes reuse the block-splitting machinery —
the placement rules of :mod:`wcetfit.split.placement` (which instructions a 5-byte jump
displaces, what cannot move) and the assembler and relocation of
:mod:`wcetfit.split.stubs` — and imports run down the pipeline.  What the fit reads (the
activation tree, the rows, the store) is :mod:`wcetfit.timing.activations`.

**The patch.**  Each timed function F's entry gets a ``jmp rel32`` to F's stub (the same
patch as a direct block probe: whole instructions displaced, the rest INT3, original
bytes checked before and restored after).

**The stub** (per function, so the indirect-free return below is predicted per function):

1. *entry path* — push RAX, RCX, RDX; reserve one activation of the event buffer (a
   countdown; when it is 0 the activation runs untimed and a ``dropped`` counter grows,
   and the input is refused later); push a shadow-stack entry (the caller's return
   address A, the entry RSP R, F's id); append an entry event (F's id); read the TSC
   last and store it into the event; pop the registers, drop A from the stack
   (``lea rsp, [rsp+8]``) and ``call`` the continuation (F's displaced instructions,
   relocated, then a jump back into F).  F therefore runs with the same RSP, stack
   arguments and alignment as in a direct call; only the word at [R] is the stub's return
   address instead of A.
2. *exit path* — F's ``ret`` comes back into the stub (the return-stack predictor saw the
   stub's ``call``, so it predicts it); reserve [R] again, push RAX, RDX, RCX, RSI (RAX,
   RDX are return values, XMM0/XMM1 and x87 are never touched), read the TSC first and
   store it; check that the shadow top belongs to this frame (its R equals ours); pop
   it, write an exit event, put A at [R], pop the registers, ``ret`` — that ``ret``
   consumes the return-stack entry of the caller's own ``call``, so the predictor stays
   in step (a ``jmp [A]`` would leave it one entry off and mispredict the caller's
   return).

Every return path and tail call is covered (a tail call from F into G: G's stub saves
F's stub address as its "A", G returns into F's stub, which logs F's exit right after).
Nothing on the common paths writes the flags (MOV, LEA, PUSH, POP, NOT, LFENCE, RDTSC,
JRCXZ, CALL, RET): GCC's interprocedural register allocation may keep values in
call-clobbered registers across a call to a local function, so the stub preserves every
register it uses, and the flags too.

**Inconsistency** (``longjmp`` out of timed frames): the shadow top then belongs to a
frame that no longer exists.  The exit path's RSP comparison finds it, and a slow path
(PUSHFQ … POPFQ) pops the stale entries, writing a *stale* event for each, until it
finds the frame that returns; a call whose events hold a stale mark is discarded, never
attributed.  An empty shadow stack there is a wcetfit bug: UD2 (the isolated child dies
and the input is reported).

**Not timed** (their blocks stay in the calling activation's row): a function whose
entry is a jump target inside itself (a loop head at the entry: the patch would count
iterations as activations), one entered by a jump that is not a call or tail call
(gcc's ``.cold`` parts: their [RSP] is no return address), one whose first instructions
cannot be displaced (fewer than 5 bytes before a jump target, LOOP/JRCXZ, …).

Events are 16 bytes: the TSC (8), the function id (4), the kind (4: 0 entry, 1 exit,
2 stale).  The C loop is ``wf_probe_time`` of ``instrument/wf_probe.c`` (restore, re-arm,
fenced start reading, call, fenced stop reading per repeat): its re-arm resets the
shadow-stack pointer (dispatch slot 0) before every call; the event pointer lives beyond
the state block and runs on across the warm-up and timed calls, which the parser splits
by the loop's start and stop readings.
"""

from __future__ import annotations

import ctypes
import logging
import struct
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.count import x86enc as enc
from wcetfit.errors import MeasurementError, SelfCheckError
from wcetfit.model import FunctionModel
from wcetfit.split.placement import JMP_LEN, ProbePlacementError, _Cfg, _direct_region
from wcetfit.split.stubs import (INT3, LFENCE, MFENCE, OFF_ARMED, OFF_NSITES, OFF_SLOT,
                                 RDTSC, RDTSCP, STATE_SIZE, _Asm, _relocated)

log = logging.getLogger(__name__)

# Beyond the wf_probe_state block (which wf_probe_prepare re-arms), our own fields.
OFF_EV_PTR = STATE_SIZE              # next event to write
OFF_ACT_LEFT = STATE_SIZE + 0x08     # activations that may still be recorded
OFF_DROPPED = STATE_SIZE + 0x10      # activations run untimed because the buffer was full
OFF_SH_BASE = STATE_SIZE + 0x18      # shadow stack's first entry (the slow path's floor)
OFF_SH_PTR = OFF_SLOT                # dispatch slot 0: shadow-stack top, re-armed per call
DATA_SIZE = STATE_SIZE + 0x20

EVENT_BYTES = 16
SHADOW_BYTES = 32
KIND_ENTRY, KIND_EXIT, KIND_STALE = 0, 1, 2
EVENT_DTYPE = np.dtype([("tsc", "<u8"), ("fid", "<u4"), ("kind", "<u4")])

# The reading between two activations' events ends one region and starts the next, so it
# is fenced on both sides: the start sequence of wf_tsc.h's method.  CPUID is a VM exit
# here (10,000+ ticks per reading): refused.
READINGS = {"lfence": LFENCE + RDTSC + LFENCE,
            "mfence": MFENCE + LFENCE + RDTSC + LFENCE,
            "rdtscp": RDTSCP}

_PUSH = {"rax": b"\x50", "rcx": b"\x51", "rdx": b"\x52", "rsi": b"\x56"}
_POP = {"rax": b"\x58", "rcx": b"\x59", "rdx": b"\x5a", "rsi": b"\x5e"}


def _imm32(v: int) -> bytes:
    return struct.pack("<i", v)


# =========================================================================================
# which functions can be timed
# =========================================================================================

def probe_regions(functions: Sequence[FunctionModel], read: Any,
                  others: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """(name → displaced region at its entry) of the functions that can be timed, and
    (name → why not) of the others.  ``others``: callee name → a caller whose jump into
    it is not a call nor a tail call (the count plan's "other" transfers)."""
    entries = frozenset(f.entry for f in functions)
    ok: dict[str, Any] = {}
    bad: dict[str, str] = {}
    for f in functions:
        if any(d == f.entry for _s, d in f.edges):
            bad[f.name] = "its entry is a jump target inside itself (a loop head at the entry)"
            continue
        if others and f.name in others:
            bad[f.name] = (f"entered by a jump from {others[f.name]} that is neither a call "
                           "nor a tail call")
            continue
        try:
            region = _direct_region(_Cfg(f, read, entries), f.entry)
        except ProbePlacementError as exc:
            bad[f.name] = f"its entry cannot be patched: {exc}"
            continue
        ok[f.name] = region
    return ok, bad


# =========================================================================================
# machine code
# =========================================================================================

@dataclass
class Built:
    code: bytes
    patches: list[tuple[int, bytes, bytes]]        # (runtime address, original, patch)


def assemble(regions: Mapping[str, Any], ids: Mapping[str, int], method: str, *, bias: int,
             code_address: int, data_address: int) -> Built:
    """The stubs of every timed function (``ids``: name → function id in the events)."""
    if method not in READINGS:
        raise MeasurementError(f"timing method {method!r} cannot be used for per-activation "
                               f"probes (supported: {', '.join(READINGS)}; CPUID is a VM exit "
                               "here, 10,000+ ticks per reading)")
    reading = READINGS[method]
    asm = _Asm()

    def d(off: int) -> tuple:
        return ("data", off)

    for name, region in regions.items():
        k = ids[name]
        # entry path ------------------------------------------------------------------
        asm.label(f"full{k}_jmp")
        asm.rel("jmp", f"full{k}")
        asm.label(f"entry{k}")
        asm.raw(_PUSH["rax"] + _PUSH["rcx"] + _PUSH["rdx"])
        asm.rip(b"\x48\x8b\x0d", d(OFF_ACT_LEFT))            # mov rcx, [act_left]
        # jrcxz back to full{k}_jmp: 5 (jmp) + 3 (pushes) + 7 (mov) + 2 (jrcxz) bytes
        asm.raw(b"\xe3" + struct.pack("<b", -(5 + 3 + 7 + 2)))
        asm.raw(b"\x48\x8d\x49\xff")                         # lea rcx, [rcx-1]
        asm.rip(b"\x48\x89\x0d", d(OFF_ACT_LEFT))            # mov [act_left], rcx
        asm.rip(b"\x48\x8b\x0d", d(OFF_SH_PTR))              # mov rcx, [shadow top]
        asm.raw(b"\x48\x8b\x44\x24\x18")                     # mov rax, [rsp+24]   (A)
        asm.raw(b"\x48\x89\x01")                             # mov [rcx], rax
        asm.raw(b"\x48\x8d\x44\x24\x18")                     # lea rax, [rsp+24]   (R)
        asm.raw(b"\x48\x89\x41\x08")                         # mov [rcx+8], rax
        asm.raw(b"\x48\xc7\x41\x10" + _imm32(k))            # mov qword [rcx+16], k
        asm.raw(b"\x48\x8d\x41\x20")                         # lea rax, [rcx+32]
        asm.rip(b"\x48\x89\x05", d(OFF_SH_PTR))              # mov [shadow top], rax
        asm.rip(b"\x48\x8b\x0d", d(OFF_EV_PTR))              # mov rcx, [ev_ptr]
        asm.raw(b"\x48\x8d\x41\x10")                         # lea rax, [rcx+16]
        asm.rip(b"\x48\x89\x05", d(OFF_EV_PTR))              # mov [ev_ptr], rax
        asm.raw(b"\x48\xc7\x41\x08" + _imm32(k))            # mov qword [rcx+8], k (entry)
        asm.raw(reading)                                     # (RDTSCP clobbers ecx)
        asm.rip(b"\x48\x8b\x0d", d(OFF_EV_PTR))              # mov rcx, [ev_ptr]
        asm.raw(b"\x89\x41\xf0" + b"\x89\x51\xf4")           # mov [rcx-16], eax; [rcx-12], edx
        asm.raw(_POP["rdx"] + _POP["rcx"] + _POP["rax"])
        asm.raw(enc.lea_rsp(8))                              # A is in the shadow entry
        asm.rel("call", f"cont{k}")
        # exit path -------------------------------------------------------------------
        asm.raw(enc.lea_rsp(-8))                             # [R]: A goes back here
        asm.raw(_PUSH["rax"] + _PUSH["rdx"] + _PUSH["rcx"] + _PUSH["rsi"])
        asm.raw(reading)
        asm.rip(b"\x48\x8b\x0d", d(OFF_EV_PTR))              # mov rcx, [ev_ptr]
        asm.raw(b"\x89\x01" + b"\x89\x51\x04")               # mov [rcx], eax; [rcx+4], edx
        asm.rip(b"\x48\x8b\x35", d(OFF_SH_PTR))              # mov rsi, [shadow top]
        asm.raw(b"\x48\x8d\x76\xe0")                         # lea rsi, [rsi-32]
        asm.raw(b"\x48\x8b\x4e\x08")                         # mov rcx, [rsi+8]   saved R
        asm.raw(b"\x48\x8d\x54\x24\x20")                     # lea rdx, [rsp+32]  our R
        asm.raw(b"\x48\xf7\xd2")                             # not rdx
        asm.raw(b"\x48\x8d\x4c\x11\x01")                     # lea rcx, [rcx+rdx+1]
        asm.raw(b"\xe3\x05")                                 # jrcxz ok (over the jmp)
        asm.rel("jmp", f"slow{k}")
        asm.label(f"ok{k}")
        asm.rip(b"\x48\x89\x35", d(OFF_SH_PTR))              # mov [shadow top], rsi  (pop)
        asm.rip(b"\x48\x8b\x0d", d(OFF_EV_PTR))              # mov rcx, [ev_ptr]
        asm.raw(b"\x8b\x56\x10" + b"\x89\x51\x08")           # mov edx,[rsi+16]; [rcx+8],edx
        asm.raw(b"\xc7\x41\x0c" + _imm32(KIND_EXIT))         # mov dword [rcx+12], 1
        asm.raw(b"\x48\x8d\x51\x10")                         # lea rdx, [rcx+16]
        asm.rip(b"\x48\x89\x15", d(OFF_EV_PTR))              # mov [ev_ptr], rdx
        asm.raw(b"\x48\x8b\x06")                             # mov rax, [rsi]      (A)
        asm.raw(b"\x48\x89\x44\x24\x20")                     # mov [rsp+32], rax
        asm.raw(_POP["rsi"] + _POP["rcx"] + _POP["rdx"] + _POP["rax"])
        asm.raw(b"\xc3")                                     # ret to A
        # slow path: stale shadow entries (longjmp); flags saved here only -------------
        asm.label(f"slow{k}")
        asm.raw(b"\x9c")                                     # pushfq
        asm.label(f"stale{k}")
        asm.rip(b"\x48\x8b\x0d", d(OFF_EV_PTR))              # mov rcx, [ev_ptr]
        asm.raw(b"\x48\x8b\x01")                             # mov rax, [rcx]  (the reading)
        asm.raw(b"\x8b\x56\x10" + b"\x89\x51\x08")           # fid of the stale entry
        asm.raw(b"\xc7\x41\x0c" + _imm32(KIND_STALE))
        asm.raw(b"\x48\x8d\x51\x10")                         # lea rdx, [rcx+16]
        asm.rip(b"\x48\x89\x15", d(OFF_EV_PTR))
        asm.raw(b"\x48\x89\x02")                             # mov [rdx], rax (carry reading)
        asm.raw(b"\x48\x8d\x76\xe0")                         # lea rsi, [rsi-32]
        asm.rip(b"\x48\x3b\x35", d(OFF_SH_BASE))             # cmp rsi, [shadow base]
        asm.rel("jcc", f"fatal{k}", enc.JCC_CODES["jb"])
        asm.raw(b"\x48\x8b\x4e\x08")                         # mov rcx, [rsi+8]
        asm.raw(b"\x48\x8d\x54\x24\x28")                     # lea rdx, [rsp+40]  our R
        asm.raw(b"\x48\x39\xd1")                             # cmp rcx, rdx
        asm.rel("jcc", f"stale{k}", enc.JCC_CODES["jne"])
        asm.raw(b"\x9d")                                     # popfq
        asm.rel("jmp", f"ok{k}")
        asm.label(f"fatal{k}")
        asm.raw(b"\x0f\x0b")                                 # ud2: shadow stack exhausted
        # buffer full: run F untimed, count it ----------------------------------------
        asm.label(f"full{k}")
        asm.rip(b"\x48\x8b\x05", d(OFF_DROPPED))
        asm.raw(b"\x48\x8d\x40\x01")
        asm.rip(b"\x48\x89\x05", d(OFF_DROPPED))
        asm.raw(_POP["rdx"] + _POP["rcx"] + _POP["rax"])
        # continuation: F's displaced instructions, then back into F ------------------
        asm.label(f"cont{k}")
        _relocated(asm, region.insns, bias, None, None)
        if not region.insns[-1].ends_flow:
            asm.rel("jmp", ("abs", region.end))

    def resolve(t: tuple) -> int:
        if t[0] == "abs":
            return t[1] + bias
        if t[0] == "data":
            return data_address + t[1]
        raise AssertionError(t)

    try:
        code = asm.emit(code_address, resolve)
    except enc.EncodingError as exc:
        raise ProbePlacementError(f"activation stubs: {exc}") from None
    patches = []
    for name, region in regions.items():
        at = region.start + bias
        patch = enc.jmp_rel32(at, code_address + asm.labels[f"entry{ids[name]}"])
        patch += INT3 * (region.size - JMP_LEN)
        patches.append((at, b"".join(i.raw for i in region.insns), patch))
    return Built(code, patches)


# =========================================================================================
# in the measuring process
# =========================================================================================

@dataclass(frozen=True)
class CallEvents:
    """One input's probed calls: the events and the C loop's readings per call."""

    events: np.ndarray          # EVENT_DTYPE, every call's (warm-up ones included)
    t_start: np.ndarray         # uint64 [repeats]: the loop's start reading per timed call
    t_stop: np.ndarray          # uint64 [repeats]
    migrated: np.ndarray        # bool [repeats]: start and stop on two CPUs
    dropped: int                # activations run untimed (buffer full)


class ActivationProbes:
    """Every timed function's stub in memory near the binary; patches installed on
    demand (context manager: installed on enter, original bytes back on exit)."""

    def __init__(self, binary: Any, regions: Mapping[str, Any], ids: Mapping[str, int],
                 method: str = "lfence") -> None:
        from wcetfit.loader import PAGE, PROT_EXEC, PROT_READ, alloc_near

        self.binary = binary
        self.method = method
        lo, hi = binary.span()
        # an upper bound of the stub code: ~300 bytes per function plus its displaced code
        need = sum(400 + 8 * r.size for r in regions.values())
        code_size = (need + PAGE - 1) // PAGE * PAGE
        self._mem = alloc_near(lo, hi, code_size + PAGE)
        self.code_address = self._mem.address
        self.data_address = self._mem.address + code_size
        built = assemble(regions, ids, method, bias=binary.bias,
                         code_address=self.code_address, data_address=self.data_address)
        if len(built.code) > code_size:        # pragma: no cover - bound above is generous
            self._mem.close()
            raise ProbePlacementError("activation stubs do not fit their pages")
        self._mem.write(0, built.code + INT3 * (code_size - len(built.code)))
        self._mem.protect(0, code_size, PROT_READ | PROT_EXEC)
        self.patches = built.patches
        ctypes.memset(self.data_address, 0, DATA_SIZE)
        self._u64(OFF_NSITES, 1, dword=True)
        self.installed = False
        self._events = np.zeros(0, EVENT_DTYPE)
        self._shadow = np.zeros(0, np.uint8)
        self.capacity = 0

    def _u64(self, off: int, value: int | None = None, dword: bool = False) -> int:
        t = ctypes.c_uint32 if dword else ctypes.c_uint64
        cell = t.from_address(self.data_address + off)
        if value is not None:
            cell.value = value
        return int(cell.value)

    # -- buffers -------------------------------------------------------------------------
    def arm(self, activations: int) -> None:
        """Room for ``activations`` recorded activations (two events each) from now on."""
        if activations > self.capacity:
            self._events = np.zeros(2 * activations, EVENT_DTYPE)
            self._shadow = np.zeros(SHADOW_BYTES * (activations + 1), np.uint8)
            self.capacity = activations
        base = self._shadow.ctypes.data
        self._u64(OFF_EV_PTR, self._events.ctypes.data)
        self._u64(OFF_ACT_LEFT, activations)
        self._u64(OFF_DROPPED, 0)
        self._u64(OFF_SH_BASE, base)
        self._u64(OFF_ARMED, base)
        self._u64(OFF_SH_PTR, base)

    def recorded(self) -> np.ndarray:
        n = (self._u64(OFF_EV_PTR) - self._events.ctypes.data) // EVENT_BYTES
        return self._events[:n].copy()

    def dropped(self) -> int:
        return self._u64(OFF_DROPPED)

    # -- patches -------------------------------------------------------------------------
    def install(self) -> None:
        from wcetfit.split.install import apply_patches

        if self.installed:
            return
        apply_patches(self.binary, self.patches, "activation probe")
        self.installed = True

    def remove(self) -> None:
        from wcetfit.split.install import restore_patches

        if self.installed:
            restore_patches(self.patches)
            self.installed = False

    def close(self) -> None:
        self.remove()
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def __enter__(self) -> "ActivationProbes":
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------
    def call(self, harness: Any, function: str, address: int, pack: Any,
             activations: int) -> tuple[Any, np.ndarray, int]:
        """One plain probed call: (return value, its events, activations dropped)."""
        self.arm(activations)
        ret = harness.call(function, address, pack)
        return ret, self.recorded(), self.dropped()

    def time(self, harness: Any, function: str, address: int, pack: Any, restore: Any,
             repeats: int, warmup: int, activations: int) -> CallEvents:
        """``warmup`` + ``repeats`` probed calls in the C loop of wf_probe.c (arguments
        restored and the shadow stack re-armed before each, outside the timed region);
        ``activations``: the expected activations per call (room for all calls)."""
        from wcetfit.split.install import native_lib
        from wcetfit.timing.tsc import aux_cpu, method_id

        ffi, lib = native_lib()
        hffi = harness.ffi
        call = int(hffi.cast("uintptr_t", hffi.addressof(harness.lib, f"wf_call_{function}")))
        args = int(hffi.cast("uintptr_t", pack.struct))
        sig = harness.signature(function)
        ret_obj = None if sig.returns_void else \
            hffi.new(hffi.getctype(hffi.typeof(sig.result), "*"))
        ret = 0 if ret_obj is None else int(hffi.cast("uintptr_t", ret_obj))
        self.arm((activations + 4) * (repeats + warmup))
        t0, t1, tp = (np.zeros(repeats, np.uint64) for _ in range(3))
        c0, c1, cp = (np.zeros(repeats, np.uint32) for _ in range(3))
        rc = lib.wf_probe_time(
            method_id(self.method), ffi.cast("void *", call), ffi.cast("void *", address),
            ffi.cast("void *", args), ffi.cast("void *", ret),
            ffi.cast("struct wf_probe_copy *", restore.address), restore.count,
            ffi.cast("void *", self.data_address), warmup, repeats,
            ffi.from_buffer("uint64_t[]", t0), ffi.from_buffer("uint64_t[]", t1),
            ffi.from_buffer("uint64_t[]", tp), ffi.from_buffer("uint32_t[]", c0),
            ffi.from_buffer("uint32_t[]", c1), ffi.from_buffer("uint32_t[]", cp))
        del ret_obj
        if rc != 0:
            raise MeasurementError(f"wf_probe_time rejected its arguments (rc {rc})")
        return CallEvents(self.recorded(), t0, t1, aux_cpu(c0) != aux_cpu(c1), self.dropped())


def differential_check(probes: ActivationProbes, harness: Any, function: str, address: int,
                       pack: Any, activations: int, data: Any = None,
                       index: int | None = None) -> np.ndarray:
    """Same return value, argument memory and writable data of the binary with the
    probes as without, from the same state; SelfCheckError otherwise.  Returns the
    probed call's events."""
    from wcetfit.split.install import _same

    where = "" if index is None else f" for input {index}"
    saved = data.save() if data is not None else None
    was = probes.installed
    probes.remove()
    try:
        ret0 = harness.call(function, address, pack)
        mem0 = harness.snapshot(pack)
        glob0 = data.save() if data is not None else None
    finally:
        if saved is not None:
            data.restore(saved)
        if was:
            probes.install()
    ret1, events, dropped = probes.call(harness, function, address, pack, activations + 4)
    mem1 = harness.snapshot(pack)
    glob1 = data.save() if data is not None else None
    if saved is not None:
        data.restore(saved)
    harness.restore(pack)
    if not _same(ret0, ret1):
        raise SelfCheckError(f"activation probes{where}: {function} returned {ret1!r} with "
                             f"the probes, {ret0!r} without")
    if mem0 != mem1:
        raise SelfCheckError(f"activation probes{where}: argument memory after {function} "
                             "differs with the probes")
    if glob0 != glob1:
        raise SelfCheckError(f"activation probes{where}: {function} left different data in "
                             "the binary's writable memory with the probes")
    return events
