"""Machine code of a timing probe: the call wrapper and the stubs, assembled for one layout.

A probe configuration times "entry → first arrival at X" (``stop``) or "first arrival at
X → return" (``start``) of the *original* function, in the measuring (child) process only,
without traps:

* **The wrapper.**  The C loop (``instrument/wf_probe.c``) calls the thunk's plain-call
  entry ``wf_call_F`` with a small wrapper as the function: ``pop [saved]`` (the caller's
  return address), ``call F``, ``push [saved]; ret``.  Popping first keeps F's stack
  layout — stack arguments, alignment — exactly as in a direct call.  The wrapper holds
  two probe sites of its own: ``entry`` (before the call) and ``return`` (after it).
* **The patch.**  At a probe point X: the page is made writable (mprotect), X's first
  whole instructions (at least 5 bytes) are replaced by ``jmp rel32`` to a stub within
  ±2 GiB (memory from :func:`wcetfit.loader.alloc_near`), the rest of the displaced bytes
  by INT3 (never executed: nothing jumps into the middle of a block; if the static model
  were wrong, the target crashes in the isolated child instead of running wrong), and the
  page is made executable again.  The original bytes are checked before and restored
  after.
* **The stub**, reading path: move below the 128-byte red zone, push RAX, RCX, RDX (and
  RBX), read the TSC with the very sequences of ``wf_tsc.h`` for the chosen method, store
  EAX, EDX, ECX (TSC_AUX) and a "fired" flag with plain MOVs, pop, jump on.  Nothing in
  the path writes the flags (MOV, LEA, PUSH, POP, LFENCE, RDTSC(P) and CPUID leave RFLAGS
  alone), so no PUSHFQ/POPFQ.  Only the first arrival may count, without a test (a test
  writes the flags):

  - a *stop* probe reaches its reading path by a direct jump, every time; the stores go
    through a pointer (the site's slot, re-armed by the C loop before every call) that
    the first reading redirects to a scratch area, so later readings — after the stop,
    untimed — change nothing.  No indirect jump before the reading: an indirect jump
    whose target alternated between the first and the later arrivals would be
    mispredicted at the first arrival of every call, a penalty timed into the stop;
  - a *start* probe's stub begins with ``jmp [rip+slot]``: armed, it leads to the reading
    path, which first points every slot of the probe to its continuation and then reads,
    so the reading is the last thing before the measured code resumes; later arrivals
    (inside the timed region) take one indirect jump to the continuation.  A
    misprediction of the first arrival happens before the start reading.
* **The continuation** runs the displaced instructions relocated (RIP-relative operands
  re-aimed at the same absolute address, relative branches re-encoded in rel32 form to
  their original targets, calls leave a return address in the stub and come back to it)
  and jumps back to X + (displaced length).  LOOP/JRCXZ/XBEGIN (no rel32 form) refuse.

The code is assembled here (:func:`assemble`, a two-pass assembler of fixed-size items)
for the regions :mod:`wcetfit.split.placement` chose; :mod:`wcetfit.split.install` writes
it and patches the original code.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from wcetfit.count import x86enc as enc
from wcetfit.errors import MeasurementError
from wcetfit.split.configs import KIND_START, KIND_STOP, SITE_ENTRY, SITE_RETURN
from wcetfit.split.placement import Insn, JMP_LEN, MAX_SITES, ProbeLayout, ProbePlacementError

STATE_SIZE = 0x120              # sizeof(struct wf_probe_state)
# struct wf_probe_state offsets (wf_probe.h)
OFF_FIRED, OFF_LO, OFF_HI, OFF_AUX, OFF_NSITES, OFF_SAVED = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x18
OFF_SLOT, OFF_ARMED = 0x20, 0xA0
OFF_SCRATCH = 0x200             # where a stop probe's later readings go (not in the state)

# Fence methods the stubs reproduce (wf_tsc.h); cpuid_inside is a negative reference only.
STUB_METHODS = ("lfence", "mfence", "rdtscp", "cpuid")


# =========================================================================================
# machine code of the wrapper and the stubs
# =========================================================================================

class _Asm:
    """A tiny two-pass assembler: every item has a fixed size (rel32 forms only), so
    offsets are known before addresses; labels and absolute targets resolve at emit."""

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.size = 0
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        if name in self.labels:
            raise AssertionError(f"label {name} twice")
        self.labels[name] = self.size

    def raw(self, data: bytes) -> None:
        self.items.append(("raw", data))
        self.size += len(data)

    def rel(self, kind: str, target: Any, cc: int = 0) -> None:
        """jmp/call/jcc rel32 to a label (str) or an absolute runtime address (int)."""
        n = {"jmp": enc.JMP_SIZE, "call": enc.CALL_SIZE, "jcc": enc.JCC_SIZE}[kind]
        self.items.append((kind, target, cc))
        self.size += n

    def rip(self, prefix: bytes, target: Any, suffix: bytes = b"") -> None:
        """An instruction ``prefix disp32 suffix`` with a RIP-relative operand."""
        self.items.append(("rip", prefix, target, suffix))
        self.size += len(prefix) + 4 + len(suffix)

    def emit(self, base: int, resolve: Callable[[Any], int]) -> bytes:
        def addr(t: Any) -> int:
            return base + self.labels[t] if isinstance(t, str) else resolve(t)

        out = bytearray()
        for it in self.items:
            at = base + len(out)
            kind = it[0]
            if kind == "raw":
                out += it[1]
            elif kind == "jmp":
                out += enc.jmp_rel32(at, addr(it[1]))
            elif kind == "call":
                out += enc.call_rel32(at, addr(it[1]))
            elif kind == "jcc":
                out += enc.jcc_rel32(it[2], at, addr(it[1]))
            elif kind == "rip":
                _, prefix, t, suffix = it
                n = len(prefix) + 4 + len(suffix)
                out += prefix + enc.rel32(at, n, addr(t)) + suffix
        return bytes(out)


# Register pushes/pops and the TSC instructions (bytes checked by capstone in the tests).
PUSH = {"rax": b"\x50", "rcx": b"\x51", "rdx": b"\x52", "rbx": b"\x53"}
POP = {"rax": b"\x58", "rcx": b"\x59", "rdx": b"\x5a", "rbx": b"\x5b"}
LFENCE = b"\x0f\xae\xe8"
MFENCE = b"\x0f\xae\xf0"
RDTSC = b"\x0f\x31"
RDTSCP = b"\x0f\x01\xf9"
CPUID = b"\x0f\xa2"
MOV_EAX_0 = b"\xb8\x00\x00\x00\x00"
MOV_ECX_0 = b"\xb9\x00\x00\x00\x00"
RET = b"\xc3"
INT3 = b"\xcc"
# RIP-relative forms (opcode bytes before the disp32)
JMP_MEM = b"\xff\x25"              # jmp qword ptr [rip+d]
POP_MEM = b"\x8f\x05"              # pop qword ptr [rip+d]
PUSH_MEM = b"\xff\x35"             # push qword ptr [rip+d]
MOV_MEM_EAX = b"\x89\x05"          # mov dword ptr [rip+d], eax
MOV_MEM_ECX = b"\x89\x0d"          # mov dword ptr [rip+d], ecx
MOV_MEM_EDX = b"\x89\x15"          # mov dword ptr [rip+d], edx
MOV_MEM_IMM32 = b"\xc7\x05"        # mov dword ptr [rip+d], imm32 (imm after the disp)
LEA_RAX = b"\x48\x8d\x05"          # lea rax, [rip+d]
MOV_MEM_RAX = b"\x48\x89\x05"      # mov qword ptr [rip+d], rax


def _reader(asm: _Asm, kind: str, method: str, data: Callable[[int], tuple],
            through: int | None = None) -> None:
    """The TSC reading of wf_tsc.h for ``method``, then stores of lo, hi, aux, fired.

    Start readers take TSC_AUX with an RDTSCP before the fences, as wf_tsc_start_* does
    (outside the region); stop readers get it from their own RDTSCP."""
    if method == "lfence":
        seq = (RDTSCP + LFENCE + RDTSC + LFENCE) if kind == KIND_START else (RDTSCP + LFENCE)
        asm.raw(seq)
        _store_reading(asm, data, True, through)
    elif method == "mfence":
        seq = (RDTSCP + MFENCE + LFENCE + RDTSC + LFENCE) if kind == KIND_START \
            else (MFENCE + RDTSCP + LFENCE)
        asm.raw(seq)
        _store_reading(asm, data, True, through)
    elif method == "rdtscp":
        asm.raw(RDTSCP)
        _store_reading(asm, data, True, through)
    elif method == "cpuid":
        if kind == KIND_START:
            # aux first (CPUID overwrites ECX), then CPUID(leaf 0); RDTSC
            asm.raw(RDTSCP)
            asm.rip(MOV_MEM_ECX, data(OFF_AUX))
            asm.raw(MOV_EAX_0 + MOV_ECX_0 + CPUID + RDTSC)
            _store_reading(asm, data, store_aux=False)
        else:
            # RDTSCP; store; CPUID(leaf 0) as the trailing fence
            asm.raw(RDTSCP)
            _store_reading(asm, data, True, through)
            asm.raw(MOV_EAX_0 + MOV_ECX_0 + CPUID)
    else:
        raise MeasurementError(f"timing method {method!r} cannot be used in a probe stub "
                               f"(supported: {', '.join(STUB_METHODS)})")


# stores through RBX (a stop probe's destination pointer)
MOV_RBX_MEM = b"\x48\x8b\x1d"                       # mov rbx, qword ptr [rip+d]
MOV_RBX4_EAX = b"\x89\x43" + bytes((OFF_LO,))      # mov dword ptr [rbx+4], eax
MOV_RBX8_EDX = b"\x89\x53" + bytes((OFF_HI,))      # mov dword ptr [rbx+8], edx
MOV_RBX12_ECX = b"\x89\x4b" + bytes((OFF_AUX,))    # mov dword ptr [rbx+12], ecx
MOV_RBX_1 = b"\xc7\x03\x01\x00\x00\x00"            # mov dword ptr [rbx], 1


def _store_reading(asm: _Asm, data: Callable[[int], tuple], store_aux: bool,
                   through: int | None = None) -> None:
    """Store lo, hi, (aux), fired: into the state, or (``through`` = a slot offset)
    wherever that slot points."""
    if through is None:
        asm.rip(MOV_MEM_EAX, data(OFF_LO))
        asm.rip(MOV_MEM_EDX, data(OFF_HI))
        if store_aux:
            asm.rip(MOV_MEM_ECX, data(OFF_AUX))
        asm.rip(MOV_MEM_IMM32, data(OFF_FIRED), struct.pack("<I", 1))
        return
    asm.rip(MOV_RBX_MEM, data(through))
    asm.raw(MOV_RBX4_EAX + MOV_RBX8_EDX)
    if store_aux:
        asm.raw(MOV_RBX12_ECX)
    asm.raw(MOV_RBX_1)


def _retarget_slots(asm: _Asm, n_sites: int, data: Callable[[int], tuple],
                    to_scratch: bool = False) -> None:
    """Point every slot to its continuation (start probes' dispatch) or to the scratch
    area (stop probes' store destination); flag-free: LEA + MOV."""
    for k in range(n_sites):
        asm.rip(LEA_RAX, data(OFF_SCRATCH) if to_scratch else f"cont{k}")
        asm.rip(MOV_MEM_RAX, data(OFF_SLOT + 8 * k))


def _read_path(asm: _Asm, k: int, kind: str, method: str, n_sites: int,
               data: Callable[[int], tuple]) -> None:
    """Reading path of site ``k``: save, (retarget), read, store, (retarget), restore,
    jump to the site's continuation."""
    stop = kind == KIND_STOP
    regs = ["rax", "rcx", "rdx"] + (["rbx"] if method == "cpuid" or stop else [])
    asm.label(f"read{k}")
    asm.raw(enc.lea_rsp(-enc.RED_ZONE))
    for r in regs:
        asm.raw(PUSH[r])
    if not stop:
        _retarget_slots(asm, n_sites, data)
    _reader(asm, kind, method, data, through=OFF_SLOT + 8 * k if stop else None)
    if stop:
        _retarget_slots(asm, n_sites, data, to_scratch=True)
    for r in reversed(regs):
        asm.raw(POP[r])
    asm.raw(enc.lea_rsp(enc.RED_ZONE))
    asm.rel("jmp", f"cont{k}")


def _relocated(asm: _Asm, insns: Sequence[Insn], bias: int, edge_label: str | None,
               edge_to: int | None) -> None:
    """The displaced instructions, relocated; branches to ``edge_to`` go to
    ``edge_label``."""
    for i in insns:
        if i.branch == "call":
            asm.rel("call", ("abs", i.target))
        elif i.branch in ("jmp", "jcc"):
            tgt: Any = edge_label if (edge_to is not None and i.target == edge_to) \
                else ("abs", i.target)
            if i.branch == "jmp":
                asm.rel("jmp", tgt)
            else:
                asm.rel("jcc", tgt, enc.JCC_CODES[i.mnemonic])
        elif i.rip_target is not None:
            off = i.rip_disp_offset
            asm.rip(i.raw[:off], ("abs", i.rip_target), i.raw[off + 4:])
        else:
            asm.raw(i.raw)


@dataclass
class _Built:
    code: bytes
    slots_armed: list[int]          # slot values before each call (see assemble)
    wrapper: int                    # runtime address of the wrapper
    patches: list[tuple[int, bytes, bytes]]   # (runtime address, original, patch bytes)


def assemble(layout: ProbeLayout, method: str, *, bias: int, fn_entry: int,
             code_address: int, data_address: int) -> _Built:
    """Machine code of the wrapper and the probe's stubs for concrete addresses.

    ``bias``: runtime = link-time + bias.  ``fn_entry``: runtime address the wrapper
    calls.  Returns the code (to be placed at ``code_address``), the armed slot values
    and the patches to write into the original code."""
    if method not in STUB_METHODS:
        raise MeasurementError(f"timing method {method!r} cannot be used in a probe stub "
                               f"(supported: {', '.join(STUB_METHODS)})")
    probe = layout.probe
    kind = probe.kind
    n = layout.sites
    if n > MAX_SITES:
        raise ProbePlacementError(f"{probe.key}: {n} patch sites, at most {MAX_SITES}")
    asm = _Asm()

    def data(off: int) -> tuple:
        return ("data", off)

    # -- the wrapper ------------------------------------------------------------------------
    asm.label("wrapper")
    asm.rip(POP_MEM, data(OFF_SAVED))
    if probe.site == SITE_ENTRY:
        asm.rel("jmp", "check0")            # as the patched jmp at a block: one direct jmp
    asm.label("call")
    asm.rel("call", ("rt", fn_entry))
    if probe.site == SITE_RETURN:
        asm.rel("jmp", "check0")
    asm.label("tail")
    asm.rip(PUSH_MEM, data(OFF_SAVED))
    asm.raw(RET)
    # -- per site: check (dispatch), continuation ---------------------------------------------
    def check(k: int) -> None:
        asm.label(f"check{k}")
        if kind == KIND_STOP:
            asm.rel("jmp", f"read{k}")
        else:
            asm.rip(JMP_MEM, data(OFF_SLOT + 8 * k))

    if probe.site in (SITE_ENTRY, SITE_RETURN):
        check(0)
        asm.label("cont0")
        # the continuation's own jump, as a block probe's jump back after its displaced
        # instructions
        asm.rel("jmp", "call" if probe.site == SITE_ENTRY else "tail")
    else:
        for k, r in enumerate(layout.regions):
            if r.check_entry:
                asm.label(f"region{k}")
                check(k)
                asm.label(f"cont{k}")
                _relocated(asm, r.insns, bias, None, None)
                asm.rel("jmp", ("abs", r.end))
            else:
                asm.label(f"region{k}")
                _relocated(asm, r.insns, bias, f"check{k}", r.edge_to)
                last = r.insns[-1]
                if not last.ends_flow:
                    asm.rel("jmp", f"check{k}" if r.end == r.edge_to else ("abs", r.end))
                check(k)
                asm.label(f"cont{k}")
                asm.rel("jmp", ("abs", r.edge_to))
    for k in range(n):
        _read_path(asm, k, kind, method, n, data)

    def resolve(t: tuple) -> int:
        if t[0] == "abs":
            return t[1] + bias
        if t[0] == "rt":
            return t[1]
        if t[0] == "data":
            return data_address + t[1]
        raise AssertionError(t)

    try:
        code = asm.emit(code_address, resolve)
    except enc.EncodingError as exc:
        raise ProbePlacementError(f"{probe.key}: {exc}") from None
    # what the C loop writes into each slot before every call: a start probe's dispatch
    # target (its reading path), a stop probe's store destination (the state itself)
    armed = [data_address if kind == KIND_STOP else code_address + asm.labels[f"read{k}"]
             for k in range(n)]
    patches = []
    for k, r in enumerate(layout.regions):
        at = r.start + bias
        patch = enc.jmp_rel32(at, code_address + asm.labels[f"region{k}"])
        patch += INT3 * (r.size - JMP_LEN)
        original = b"".join(i.raw for i in r.insns)
        patches.append((at, original, patch))
    return _Built(code, armed, code_address + asm.labels["wrapper"], patches)
