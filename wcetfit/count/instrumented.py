"""The count run: per-input block counts from the instrumented copy, with self-checks.

Two levels:

* :class:`InstrumentedCopy` — built once per process from the loaded binary and the
  static models of the functions to relocate (see :mod:`wcetfit.count.relocate`).  It owns the
  copy's memory (code RX, counters RW, all within ±2 GiB of the binary) and the trace
  buffer.  ``reset()`` zeroes the counters, ``counts()`` reads them, ``trace()`` returns
  the block trace; ``entry(name)`` is the address of a function's copy, which the
  harness calls instead of the original.
* :func:`count_inputs` — the whole per-input procedure, through the per-prototype call
  harness (:mod:`wcetfit.timing.thunk`): for every input, count one call of the copy,
  run the original on the same state, and check

  - **differential**: the process forks right before the copy's call and the child
    calls the original on the same state (arguments, heap, the binary's data: the whole
    process); same return value (a returned fresh object by its contents, see
    :mod:`wcetfit.count.compare`), same argument memory afterwards, same writable data
    of the binary afterwards.  Nothing is written back, so no memory the analyzer uses
    is touched; a warm-up call of the original before the first input lets a library
    initialise its once-per-process state (a random seed) outside the comparison;
  - **flow conservation** (:func:`wcetfit.count.flow.check_flow`): for every function
    reached, the block counts admit a non-negative flow over the CFG edges in which the function's entry
    receives exactly its number of activations (1 for the measured function plus its
    direct internal call sites' counts) and its exits return as often.  This is the
    strongest check block counts allow: it holds iff some edge-count vector is
    consistent with the CFG (a transportation problem, decided by Hall's conditions
    precomputed per CFG, or max-flow for large components);
  - **trace** (trace mode, :func:`wcetfit.count.flow.check_trace`): every consecutive
    pair of block ids is a CFG edge, or a call into / return from a relocated function matching a call stack;
    per-block occurrence counts equal the counters.  The trace yields exact edge counts.

  A failed check raises :class:`~wcetfit.errors.SelfCheckError` naming the function,
  the block and the input: it is a wcetfit bug, never a warning.

Crash and hang isolation are not done here: :mod:`wcetfit.isolate` runs this in a child.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from wcetfit.errors import MeasurementError, SelfCheckError
from wcetfit.loader import (PROT_EXEC, PROT_READ, PAGE, LoadedBinary, NearMemory,
                            WritableData, alloc_near, load_binary)
from wcetfit.model import FunctionModel
from wcetfit.numbering import input_label
from wcetfit.count.compare import (Outcome, ReturnKind, check_same_memory,
                                   check_same_result, out_pointer_kinds, outcome)
from wcetfit.count.flow import (FlowStructure, _transfers, activations,  # noqa: F401
                                check_flow, check_trace)
from wcetfit.count import x86enc as enc
from wcetfit.count.relocate import CopyPlan, plan_copy, relocatable_closure

log = logging.getLogger(__name__)

DEFAULT_TRACE_CAP = 1 << 22


class TraceOverflow(MeasurementError):
    """One input's block trace needs more entries than the configured cap."""


class Harness(Protocol):
    """What :func:`count_inputs` needs from :class:`wcetfit.timing.harness.CallHarness`."""

    def pack(self, function: str, args: tuple) -> Any: ...
    def snapshot(self, pack: Any) -> tuple[bytes, ...]: ...
    def call(self, function: str, fn_address: int, pack: Any) -> Any:
        """Restores the pack's argument memory, then calls."""


# --- the copy in memory -------------------------------------------------------------------

class InstrumentedCopy:
    """The relocated, instrumented code of ``functions`` in this process.

    ``functions`` are the static models of every function to relocate (typically the
    measured function and its internal callees, see :func:`wcetfit.count.relocate.closure`),
    all of the binary ``binary``.  With ``trace`` every block start also appends the
    block's compact id (``plan.block_id``) to a buffer of ``trace_cap`` uint32 entries.
    """

    def __init__(self, binary: LoadedBinary, functions: Sequence[FunctionModel], *,
                 trace: bool = False, trace_cap: int = DEFAULT_TRACE_CAP) -> None:
        if trace_cap < 1:
            raise MeasurementError(f"trace_cap must be at least 1, got {trace_cap}")
        self.binary = binary
        self.models: dict[str, FunctionModel] = {f.name: f for f in functions}
        self.plan: CopyPlan = plan_copy(functions, binary.read, trace=trace)
        self.trace_enabled = trace
        self.trace_cap = trace_cap
        code_pages = (self.plan.code_size + PAGE - 1) // PAGE * PAGE
        data_pages = (self.plan.data_size + PAGE - 1) // PAGE * PAGE
        lo, hi = binary.span()
        self._mem: NearMemory | None = alloc_near(lo, hi, code_pages + data_pages)
        self.code_address = self._mem.address
        self.data_address = self._mem.address + code_pages
        try:
            code = self.plan.emit(binary.bias, self.code_address, self.data_address)
            self._mem.write(0, code)
            # W^X: the code was written while RW; from now on it is read+execute only.
            self._mem.protect(0, code_pages, PROT_READ | PROT_EXEC)
        except BaseException:
            self.close()
            raise
        n = self.plan.n_blocks
        self._counters = np.ctypeslib.as_array(
            (ctypes.c_int64 * n).from_address(self.data_address)) if n else np.zeros(0, np.int64)
        self._state = np.ctypeslib.as_array(
            (ctypes.c_uint64 * 3).from_address(self.data_address + self.plan.trace_state_offset))
        self._trace_buf = np.zeros(trace_cap if trace else 0, dtype=np.uint32)
        ns = len(self.plan.indirect_sites)
        self._sites = np.ctypeslib.as_array(
            (ctypes.c_uint64 * (ns * enc.DISPATCH_TABLE_BYTES // 8)).from_address(
                self.data_address + self.plan.sites_offset)).reshape(ns, -1) \
            if ns else np.zeros((0, enc.DISPATCH_TABLE_BYTES // 8), np.uint64)
        log.debug("instrumented copy of %s at %#x: %d blocks (%d fast counters), "
                  "%d code bytes for %d original", ", ".join(self.plan.functions),
                  self.code_address, n, self.plan.fast_counters, self.plan.code_size,
                  self.plan.original_bytes)
        self.reset()

    # -- addresses --
    def entry(self, name: str) -> int:
        """Runtime address of the copy of function ``name`` (what the harness calls)."""
        return self.code_address + self.plan.entry_offsets[name]

    def original(self, name: str) -> int:
        """Runtime address of the original function ``name``."""
        return self.binary.runtime(self.models[name].entry)

    def block_addresses(self, name: str) -> tuple[int, ...]:
        """Link-time block addresses of ``name``: the columns of ``counts()[name]``."""
        return self.plan.slots[name].blocks

    def id_names(self) -> list[tuple[str, int]]:
        """(function, block address) of every compact trace id, in id order."""
        return self.plan.id_names()

    # -- counters --
    def reset(self) -> None:
        self._counters[:] = 0
        if self.trace_enabled:
            start = self._trace_buf.ctypes.data
            self._state[0] = start
            self._state[1] = start + 4 * self.trace_cap
        else:
            # An empty buffer: any append would overflow (never happens without tracing).
            self._state[0] = self._state[1] = 0
        self._state[2] = 0
        self._sites[:] = 0

    def indirect_targets(self) -> dict[int, tuple[dict[int, int], int]]:
        """Since the last reset, per indirect call site of the copy (its instruction's
        link-time address): runtime target address -> calls, and the calls whose target
        did not fit in the site's table (more than DISPATCH_SLOTS distinct targets)."""
        out: dict[int, tuple[dict[int, int], int]] = {}
        k = enc.DISPATCH_SLOTS
        for row, (_fn, _block, insn, _tail) in zip(self._sites.copy(),
                                                   self.plan.indirect_sites):
            seen = {int(row[2 * j]): int(row[2 * j + 1]) for j in range(k) if row[2 * j]}
            if seen or row[2 * k]:
                out[insn] = (seen, int(row[2 * k]))
        return out

    def counts(self) -> dict[str, np.ndarray]:
        """Counts since the last reset: function → int64 array aligned with its blocks."""
        out = {}
        snapshot = self._counters.copy()
        for name in self.plan.functions:
            slot = self.plan.slots[name]
            out[name] = snapshot[slot.first_id:slot.first_id + len(slot.blocks)]
        return out

    def trace(self) -> np.ndarray:
        """The block trace since the last reset (uint32 compact ids, execution order).

        Raises TraceOverflow, naming the cap and the length needed, if entries were dropped.
        """
        if not self.trace_enabled:
            raise MeasurementError("this instrumented copy was built without trace")
        used = (int(self._state[0]) - self._trace_buf.ctypes.data) // 4
        dropped = int(self._state[2])
        if dropped:
            raise TraceOverflow(f"the block trace needs {used + dropped} entries, more than "
                                f"trace_cap = {self.trace_cap}; raise [measure] trace_cap or "
                                "use smaller inputs")
        return self._trace_buf[:used].copy()

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def __enter__(self) -> "InstrumentedCopy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- results ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class CountResult:
    """One input's counts.

    ``counts[name]`` is int64, aligned with ``FunctionModel.blocks`` of that function;
    ``activations[name]`` how often the function was entered (in the copy);
    ``trace`` (trace mode) the compact block ids in execution order (id → (function,
    block) by ``CopyPlan.id_names()``); ``edges[name][(src, dst)]`` exact edge counts
    (trace mode only; a call block's edge to its fall-through counts the returns).
    """

    index: int
    counts: Mapping[str, np.ndarray]
    activations: Mapping[str, int]
    return_value: Any = None
    trace: np.ndarray | None = None
    edges: Mapping[str, Mapping[tuple[int, int], int]] | None = None
    # Per indirect call site (instruction, link-time): target -> calls in this input; a
    # target in the binary by its link-time address (int), one outside by name (str).
    indirect: Mapping[int, Mapping[int | str, int]] | None = None


# --- the per-input procedure -------------------------------------------------------------------

class Counter:
    """Counts inputs of one measured function: an :class:`InstrumentedCopy` and its checks."""

    def __init__(self, copy: InstrumentedCopy, function: str, harness: Harness, *,
                 differential: bool = True, flow: bool = True,
                 call_name: str | None = None) -> None:
        self.copy = copy
        self.function = function
        # The prototype's name for it: the model's canonical name may differ (an IFUNC
        # symbol ``strlen`` is modelled as its selected implementation).
        self.call_name = call_name or function
        self.harness = harness
        self.differential = differential
        self.flow = flow
        self._transfers = _transfers(copy.models, copy.plan)
        self._flow = {name: FlowStructure(copy.models[name], copy.plan.slots[name].blocks,
                                          name not in self._transfers.inexact)
                      for name in copy.plan.functions}
        self._data = WritableData(copy.binary)
        self._by_entry: dict[int, str] = {}
        for f in copy.models.values():
            self._by_entry.setdefault(f.entry, f.name)
            self._by_entry.setdefault(f.address, f.name)
        self._warmed = False
        sig = getattr(harness, "signature", None)
        self._returns = ReturnKind.of(harness.ffi, sig(self.call_name).result) \
            if sig is not None and hasattr(harness, "ffi") else None
        self._out_kinds = out_pointer_kinds(harness.ffi, sig(self.call_name).arg_types) \
            if sig is not None and hasattr(harness, "ffi") else {}

    def _warm_up(self, pack: Any) -> None:
        """One untimed, uncounted call of the original before the first comparison.

        A library may initialise state once per process on first use (json-c draws its
        hash seed from /dev/urandom): without this call the instrumented copy would run
        the initialisation and the original, after the restore of the writable pages,
        would run it again with another draw, and the two would leave different data.
        After it, both calls see initialised state.  Skipped (with a note) when an
        argument's memory cannot be restored: the call would change the input."""
        self._warmed = True
        if getattr(pack, "unrestored", ()):
            log.info("%s: no warm-up call (an argument is not restorable): state the library "
                     "initialises on first use may make the first comparison differ",
                     self.function)
            return
        self.harness.call(self.call_name, self.copy.original(self.function), pack)

    def count(self, index: int, pack: Any, fresh_pack: Any | None = None,
              start: Callable[[], None] | None = None) -> CountResult:
        """Count one call of the copy with ``pack`` (a harness ArgPack).

        Differential check: right before the copy's call this process forks; the child
        calls the original on the same bytes (argument memory, heap, the binary's data,
        its libc's malloc state: the whole process as it was) and sends back what the
        call left (:class:`~wcetfit.count.compare.Outcome`); this process runs the copy
        and compares.  Nothing is ever written back into memory, so no state the
        analyzer uses can be corrupted, and an allocating function gets the same fresh
        addresses in both.  ``fresh_pack`` is accepted for compatibility and unused (the
        child has its own copy of every argument, restorable or not).  ``start()`` is
        called right before the copy runs (the isolation layer's "about to call" notice).
        """
        h, fn, copy = self.harness, self.function, self.copy
        if start is not None:
            start()           # before the warm-up too: a crash there is this input's
        if self.differential and not self._warmed:
            self._warm_up(pack)
        reference = self._fork_original(pack) if self.differential else None
        copy.reset()
        ret = h.call(self.call_name, copy.entry(fn), pack)
        counts = copy.counts()
        trace = copy.trace() if copy.trace_enabled else None
        indirect = self._indirect(index)
        if reference is not None:
            mine = outcome(self._returns, ret, pack, h.snapshot(pack), self._data.save(),
                           out_kinds=self._out_kinds, before=_initial(h, pack))
            theirs = _collect(*reference, index, fn)
            check_same_result(self._returns, mine, theirs, index, fn)
            check_same_memory(mine, theirs, self._data.ranges, copy.binary, index, fn)
        acts = activations(copy.models, copy.plan, counts, fn, 1, self._transfers)
        for targets in indirect.values():
            for t, n in targets.items():
                callee = self._by_entry.get(t) if isinstance(t, int) else None
                if callee is not None:          # ran in the copy: an activation
                    acts[callee] += n
        edges = None
        if self.flow:
            check_flow(copy.models, copy.plan, counts, acts, index, self._transfers,
                       self._flow)
        if trace is not None:
            edges = check_trace(copy.models, copy.plan, trace, counts, fn, index,
                                self._transfers)
        return CountResult(index=index, counts=counts, activations=acts, return_value=ret,
                           trace=trace, edges=edges, indirect=indirect)

    def _indirect(self, index: int) -> dict[int, dict[int | str, int]]:
        """The copy's recorded indirect-call targets of this input, named: link-time
        address inside the binary, ``symbol (library)`` outside."""
        out: dict[int, dict[int | str, int]] = {}
        lo, hi = self.copy.binary.span()
        bias = self.copy.binary.bias
        for insn, (seen, lost) in self.copy.indirect_targets().items():
            if lost:
                # Calls whose target the table could not hold may have entered relocated
                # code: activations would be wrong, so the input is not counted.
                raise SelfCheckError(
                    f"{input_label(index)}: the indirect call at {insn:#x} went to more than "
                    f"{enc.DISPATCH_SLOTS} different targets ({lost} calls not recorded)")
            out[insn] = {(rt - bias if lo <= rt < hi else symbol_at(rt)): n
                         for rt, n in seen.items()}
        return out


    def _fork_original(self, pack: Any) -> tuple[int, int]:
        """Start the original's call in a forked child; (pid, read end of its pipe)."""
        h = self.harness
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                    # the child: never returns
            code = 0
            me = os.getpid()
            try:
                os.close(r)
                # Die with the counting process (the isolation layer kills it on a hang).
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                ret = h.call(self.call_name, self.copy.original(self.function), pack)
                if os.getpid() != me:
                    # a child the target forked returned here too: only this process
                    # reports (two writers would interleave their results in the pipe)
                    os._exit(0)
                msg = ("ok", outcome(self._returns, ret, pack, h.snapshot(pack),
                                     self._data.save(), out_kinds=self._out_kinds,
                                     before=_initial(h, pack)))
            except BaseException as exc:  # noqa: BLE001 - reported by the parent
                msg = ("error", f"{type(exc).__name__}: {exc}")
            try:
                data = pickle.dumps(msg)
                with os.fdopen(w, "wb") as fh:
                    fh.write(data)
            except BaseException:  # noqa: BLE001
                code = 70
            os._exit(code)
        os.close(w)
        return pid, r


def _initial(harness: Any, pack: Any) -> tuple[bytes, ...] | None:
    """The argument memory as it is before every call (the harness restores it)."""
    initial = getattr(harness, "initial", None)
    return initial(pack) if initial is not None else None


_libc = ctypes.CDLL(None, use_errno=True)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_dladdr = _libc.dladdr
_dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]


def symbol_at(address: int) -> str:
    """``symbol (library)`` of a runtime code address outside the analysed binary (what
    the dynamic loader knows of it), ``symbol+0x… (library)`` inside a symbol, or the
    bare address when no loaded object holds it."""
    info = _DlInfo()
    if not _dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return f"unknown code at {address:#x}"
    lib = os.path.basename(info.dli_fname.decode(errors="replace"))
    if info.dli_sname:
        name = info.dli_sname.decode(errors="replace")
        off = address - (info.dli_saddr or address)
        return f"{name}{f'+{off:#x}' if off else ''} ({lib})"
    return f"{lib}+{address - (info.dli_fbase or 0):#x}"
_prctl = _libc.prctl
_PR_SET_PDEATHSIG = 1


def _collect(pid: int, r: int, index: int, fn: str) -> Outcome:
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise SelfCheckError(f"differential check for {input_label(index)}: the original {fn} died "
                             f"of {signal.Signals(sig).name} where the instrumented copy "
                             "returned")
    if not data:
        raise SelfCheckError(f"differential check for {input_label(index)}: the original {fn}'s "
                             f"process exited (status {status:#x}) without a result")
    try:
        kind, value = pickle.loads(data)
    except Exception as exc:  # noqa: BLE001 - whatever wrote into the pipe, it is no result
        raise SelfCheckError(f"differential check for {input_label(index)}: the original {fn}'s "
                             f"process wrote no readable result ({type(exc).__name__}: "
                             f"{exc}); did the function fork or write to inherited file "
                             "descriptors?") from None
    if kind != "ok":
        raise SelfCheckError(f"differential check for {input_label(index)}: calling the original "
                             f"{fn} failed: {value}")
    return value


def count_inputs(model: Any, functions: Sequence[str], harness: Harness,
                 inputs: Iterable[tuple[int, Callable[[], tuple]]] | Callable[[int], tuple],
                 indices: Sequence[int] | None = None, *, binary: LoadedBinary | None = None,
                 trace: bool = False, trace_cap: int = DEFAULT_TRACE_CAP,
                 differential: bool = True, uncounted: Sequence[str] = ()
                 ) -> Iterator[CountResult]:
    """Count every input of every measured function; yields one CountResult per
    (function, input), in order.

    ``model`` is a :class:`wcetfit.model.BinaryModel` (``.info.path``, ``.functions``:
    name → FunctionModel, callees included); ``functions`` are names or ``0x…`` entry
    addresses of the measured functions.  ``inputs`` is either a callable ``make_args(index)
    -> args`` (used with ``indices``) or an iterable of ``(index, make_args)`` pairs where
    ``make_args()`` builds the arguments.  The harness restores argument memory before
    every call, so the original (differential check) runs on the same bytes; only when
    a pointer argument is not restorable is ``make_args()`` called a second time for an
    independent copy (it must then be deterministic per index, as
    wcetfit.target.generate_input is).  One
    :class:`InstrumentedCopy` per measured function is built first (relocation errors
    surface before any input runs).  ``uncounted`` names callees to leave as original
    code (run, not counted), e.g. one that the copy refuses to relocate.
    """
    if binary is None:
        info = getattr(model, "info", None)
        binary = load_binary(info.path if info is not None else model.path)
    if callable(inputs):
        if indices is None:
            raise MeasurementError("count_inputs: a make_args callable needs indices")
        make = inputs
        pairs: list[tuple[int, Callable[[], tuple]]] = [
            (i, (lambda i=i: make(i))) for i in indices]
    else:
        pairs = list(inputs)
    counters = []
    for requested in functions:
        fn = model.function(requested).name if hasattr(model, "function") else requested
        fns, skipped = relocatable_closure(model.functions, [fn], binary.read, trace=trace,
                                           uncounted=uncounted)
        for name, why in skipped.items():
            log.warning("%s: callee %s runs as original code, uncounted: %s", fn, name, why)
        copy = InstrumentedCopy(binary, fns, trace=trace, trace_cap=trace_cap)
        names = getattr(harness, "functions", ())
        counters.append(Counter(copy, fn, harness, differential=differential,
                                call_name=requested if requested in names else fn))
    try:
        for counter in counters:
            for index, make_args in pairs:
                pack = harness.pack(counter.call_name, make_args())
                fresh = None
                if differential and getattr(pack, "unrestored", ()):
                    fresh = harness.pack(counter.call_name, make_args())
                yield counter.count(index, pack, fresh)
    finally:
        for counter in counters:
            counter.copy.close()
