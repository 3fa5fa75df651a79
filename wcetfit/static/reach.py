"""Reaching blocks no measured input executed, by symbolic execution from the function's entry.

The second module that imports angr (lazily, like :mod:`wcetfit.static.binary`); nothing of
angr leaves it: the answers are the plain frozen dataclasses below.

Public API: :func:`reach_blocks` (binary, function address, target blocks, argument template,
budget in seconds) -> tuple[BlockReach, ...], one per target, each

* ``"reached"``: a path from the entry reaches the block; the witness gives concrete values
  for every parameter (integers, the buffers' bytes) solved from that path's constraints;
* ``"unreachable"``: the exploration ran out of paths (no state left, none cut short by a
  limit, none lost to an error or a symbolic jump, no symbolic address concretised) without
  reaching it.  This is a proof *relative to angr's model of the code and to the template*:
  integers only within their ranges, buffers only of the given lengths, imported calls
  returning a fresh value without side effects on our memory;
* ``"not found"``: anything else (the budget ran out, a path was cut, the model was
  approximate); the note says which.

:func:`explore` serves the same exploration to groups of blocks the measured inputs left
unseparated (:class:`GroupGoal`: the group's blocks and the count rows measured on them):
every path that returns from the function has exact counts of those blocks (each is a
stop point of the lifter, so it starts a block of the path's history); a path whose
count row lies outside the span of the measured rows ``"separated"`` the group, and its
witness is the input that does it.  ``"inseparable"`` is the exhaustive verdict, under
the same conditions as ``"unreachable"``.

Addresses in and out are link-time addresses as objdump prints them (those of the static
model); angr maps a shared object elsewhere and we translate by ``mapped_base - linked_base``
rather than forcing a load at 0, where a null pointer would read the ELF header instead of
faulting.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

from wcetfit.errors import BinaryError

log = logging.getLogger(__name__)

REACHED = "reached"
UNREACHABLE = "unreachable"
NOT_FOUND = "not found"
SEPARATED = "separated"
INSEPARABLE = "inseparable"

# A path longer than this many executed blocks is cut (it keeps loops with a concrete but
# large trip count, and loops bounded only by a symbolic value, from eating the budget on
# one path).  A cut path forbids the "unreachable" verdict.
MAX_PATH_BLOCKS = 4000
# The share of the exploration's budget the null starts get before the start of real
# buffers joins them.
NULL_SHARE = 0.25
# An access below this address faults in the real call: Linux maps nothing below
# vm.mmap_min_addr (65,536 by default), and a null pointer plus an offset lands there.
NULL_PAGE = 0x10000
# Buffers go to fresh memory far above anything the loader maps for a shared object.
_BUF_BASE = 0x7E00_0000_0000
_BUF_GAP = 0x10_0000


@dataclass(frozen=True)
class IntParam:
    """An integer parameter: concrete ``value``, or symbolic within ``[lo, hi]`` (signed
    comparison when ``lo < 0``, as the measured values of a signed parameter may be)."""
    lo: int = 0
    hi: int = (1 << 64) - 1
    value: int | None = None

    def describe(self) -> str:
        return f"int = {self.value}" if self.value is not None else f"int in [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class BufParam:
    """A pointer to a fresh buffer of ``length`` bytes: concrete ``content``, or symbolic;
    with ``may_be_null``, also a null pointer (explored from a start of its own)."""
    length: int
    content: bytes | None = None
    may_be_null: bool = False

    def describe(self) -> str:
        return ((f"buffer[{self.length}] concrete" if self.content is not None
                 else f"buffer[{self.length}] symbolic")
                + (" or NULL" if self.may_be_null else ""))


Param = Union[IntParam, BufParam]


@dataclass(frozen=True)
class ArgTemplate:
    """The shape of the arguments, one entry per parameter in call order; ``longer``:
    (parameter, elements the generated inputs reach) of the buffers explored shorter."""
    params: tuple[Param, ...]
    longer: tuple[tuple[int, int], ...] = ()

    def describe(self) -> str:
        return ", ".join(f"arg{i}: {p.describe()}" for i, p in enumerate(self.params))


@dataclass(frozen=True)
class Witness:
    """Concrete arguments: an ``int`` per integer parameter, ``bytes`` per buffer, None
    for a null pointer."""
    values: tuple[Union[int, bytes, None], ...]

    def describe(self) -> str:
        parts = []
        for i, v in enumerate(self.values):
            if v is None:
                parts.append(f"arg{i} = NULL")
            elif isinstance(v, bytes):
                shown = v[:32].hex() + ("…" if len(v) > 32 else "")
                parts.append(f"arg{i} = buffer[{len(v)}] {shown}")
            else:
                parts.append(f"arg{i} = {v} ({v:#x})" if v >= 0 else f"arg{i} = {v}")
        return ", ".join(parts) or "(no arguments)"


@dataclass(frozen=True)
class BlockReach:
    address: int
    status: str                     # REACHED, UNREACHABLE or NOT_FOUND
    witness: Witness | None = None
    note: str = ""
    seconds: float = field(default=0.0, compare=False)   # wall time when decided


@dataclass(frozen=True)
class GroupGoal:
    """Blocks the measured inputs left unseparated (a fit group), with the distinct count
    rows those inputs gave on them (columns in ``blocks`` order)."""
    blocks: tuple[int, ...]
    measured: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class GroupReach:
    blocks: tuple[int, ...]
    status: str                     # SEPARATED, INSEPARABLE or NOT_FOUND
    witness: Witness | None = None
    path_counts: tuple[int, ...] | None = None   # angr's counts of ``blocks`` on that path
    note: str = ""
    seconds: float = field(default=0.0, compare=False)


def errored_paths(errored: list[Any]) -> str:
    """The angr errors that stopped paths, in words, the first one named (libdeflate's
    adler32: "2 path(s) stopped by an angr error", and no word of which, not even with
    -v: angr lacks MMX's psadbw)."""
    first = getattr(errored[0], "error", None) if errored else None
    text = str(first).splitlines()[0][:160] if first is not None and str(first) else ""
    what = (f" (the first: {type(first).__name__}: {text})" if text else
            f" (the first: {type(first).__name__})" if first is not None else "")
    return f"{len(errored)} path(s) stopped by an angr error{what}"


def _to_signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def reach_blocks(binary_path: str, function_address: int, targets: Sequence[int],
                 template: ArgTemplate, budget_s: float) -> tuple[BlockReach, ...]:
    """Look for inputs of the function at ``function_address`` (link-time) reaching each of
    ``targets`` (link-time block starts) within ``budget_s`` seconds of exploration."""
    return explore(binary_path, function_address, targets, (), template, budget_s)[0]


def explore(binary_path: str, function_address: int, targets: Sequence[int],
            groups: Sequence[GroupGoal], template: ArgTemplate, budget_s: float
            ) -> tuple[tuple[BlockReach, ...], tuple[GroupReach, ...]]:
    """One exploration from the entry serving both goals: a witness for each block of
    ``targets``, and for each of ``groups`` a complete path whose counts on the group's
    blocks the measured rows do not span (its input separates the group)."""
    # angr runs without its native unicorn engine here and says so at ERROR when that
    # module is imported; exploration does not use it
    logging.getLogger("angr.state_plugins.unicorn_engine").setLevel(logging.CRITICAL)
    try:
        import angr
        import claripy
    except ImportError as exc:                                  # pragma: no cover
        raise BinaryError(f"angr is not installed: {exc}") from exc
    logging.getLogger("angr").setLevel(max(logging.ERROR, logging.getLogger("angr").level))
    logging.getLogger("cle").setLevel(max(logging.ERROR, logging.getLogger("cle").level))

    t0 = time.perf_counter()
    try:
        project = angr.Project(binary_path, auto_load_libs=False)
    except Exception as exc:        # cle raises many kinds of errors on a bad file
        raise BinaryError(f"{binary_path}: angr cannot load it: {exc}") from exc
    obj = project.loader.main_object
    delta = obj.mapped_base - obj.linked_base
    if not obj.contains_addr(function_address + delta):
        raise BinaryError(f"{binary_path}: {function_address:#x} is not inside the binary")
    wanted = {int(t) + delta for t in targets}
    open_groups = {k: RowSpace(g) for k, g in enumerate(groups)}
    group_found: dict[int, GroupReach] = {}
    # every block of a group starts a lifted block, so a path's history counts it exactly
    group_points = {int(a) + delta for g in groups for a in g.blocks}

    # ---- arguments, shaped by the template
    state_opts = {angr.options.SYMBOL_FILL_UNCONSTRAINED_MEMORY,
                  angr.options.SYMBOL_FILL_UNCONSTRAINED_REGISTERS}
    args, variables, constraints, buffers = [], [], [], []
    for i, p in enumerate(template.params):
        if isinstance(p, IntParam):
            if p.value is not None:
                args.append(claripy.BVV(p.value & ((1 << 64) - 1), 64))
                variables.append(None)
                continue
            v = claripy.BVS(f"arg{i}", 64)
            if p.lo < 0:
                constraints += [v.SGE(p.lo), v.SLE(p.hi)]
            else:
                constraints += [v.UGE(p.lo), v.ULE(p.hi)]
            args.append(v)
            variables.append(v)
        elif isinstance(p, BufParam):
            addr = _BUF_BASE + i * _BUF_GAP
            if p.length > _BUF_GAP // 2:
                raise BinaryError(f"arg{i}: buffer of {p.length} bytes is too large to explore")
            if p.content is not None:
                content = claripy.BVV(p.content, 8 * len(p.content)) if p.content else None
                variables.append(None)
            else:
                content = claripy.BVS(f"buf{i}", 8 * p.length) if p.length else None
                variables.append(content)
            buffers.append((addr, content))
            args.append(claripy.BVV(addr, 64))
        else:
            raise TypeError(f"arg{i}: not an IntParam or BufParam: {p!r}")

    # A symbolic address concretised (to one value for writes, a bounded range for reads)
    # drops paths: then running out of states proves nothing.
    concretised = [0]

    def _on_concretise(st):
        expr = st.inspect.address_concretization_expr
        if expr is not None and getattr(expr, "symbolic", False):
            concretised[0] += 1

    def _on_access(st):
        # a null pointer's path that reads or writes near address 0 faults in the real
        # call: no path of the function (angr would read symbolic bytes there and go on)
        addr = (st.inspect.mem_read_address if st.inspect.mem_read_address is not None
                else st.inspect.mem_write_address)
        if addr is None or not hasattr(addr, "symbolic"):
            return
        # (the null pointer plus a symbolic offset, adler32_z's buf + len: "reached" its
        # loop with buf = NULL, and the real call crashed).  Nothing of the call's own
        # lies that low (buffers, stack and the binary are mapped far above), so an
        # address that can be there is the null pointer's
        low = st.solver.eval(addr) if not addr.symbolic else st.solver.min(addr)
        if low < NULL_PAGE:
            st.globals["faulted"] = True

    def start(nulls: frozenset[int]) -> Any:
        # a nullable pointer gets a start of its own where it is NULL (not a symbolic
        # choice between NULL and its buffer: every access through it would then be to a
        # symbolic address, concretised, and no verdict could be exhaustive)
        call = [claripy.BVV(0, 64) if i in nulls else a for i, a in enumerate(args)]
        st = project.factory.call_state(function_address + delta, *call,
                                        add_options=state_opts)
        for addr, content in buffers:
            if content is not None:
                st.memory.store(addr, content)
        for c in constraints:
            st.solver.add(c)
        st.globals["nulls"] = nulls
        st.inspect.b("address_concretization", when=angr.BP_AFTER, action=_on_concretise)
        if nulls:
            st.inspect.b("mem_read", when=angr.BP_BEFORE, action=_on_access)
            st.inspect.b("mem_write", when=angr.BP_BEFORE, action=_on_access)
        return st

    # the null starts first, one after the other, each explored to its end (a null check
    # returns at once, and a path that faults ends), within a share of the budget; then
    # the start of real buffers.  Given to DFS together, the buffers' start, with its loops
    # over symbolic bytes, took sqlite3_stricmp's whole budget before the second null start
    queue = [start(frozenset([i])) for i, p in enumerate(template.params)
             if isinstance(p, BufParam) and p.may_be_null] + [start(frozenset())]
    null_deadline = t0 + NULL_SHARE * budget_s
    simgr = project.factory.simulation_manager(queue.pop(0))
    simgr.use_technique(angr.exploration_techniques.LengthLimiter(MAX_PATH_BLOCKS, drop=False))
    simgr.use_technique(angr.exploration_techniques.DFS())

    found: dict[int, BlockReach] = {}
    deadline = t0 + budget_s
    steps = 0
    paths = [0]                       # complete paths (returned from the function)

    def _note_hits() -> None:
        faulted = [st for st in simgr.active if st.globals.get("faulted")]
        if faulted:
            # (a path that faulted is no call of the function: dropped, and counted as
            # one that ended; it forbids no verdict)
            simgr.move("active", "faulted", lambda st: st.globals.get("faulted", False))
            simgr.drop(stash="faulted")

        def hit(st: Any, address: int) -> None:
            found[address - delta] = BlockReach(
                address - delta, REACHED, _witness(st, template, variables),
                f"path of {len(st.history.bbl_addrs)} blocks", time.perf_counter() - t0)
            wanted.discard(address)

        for st in simgr.active:
            if st.addr in wanted and st.addr - delta not in found:
                if st.globals.get("nulls"):
                    # a null pointer's block counts once the call returns: it may fault
                    # within the block (adler32_z reads buf[0] for len == 1 before its
                    # null check: "reached" with buf = NULL, and the real call crashed)
                    st.globals["pending"] = st.globals.get("pending", ()) + (st.addr,)
                else:
                    hit(st, st.addr)
        ended = simgr.stashes.get("deadended", [])
        for st in ended:
            paths[0] += 1
            if st.globals.get("faulted"):
                continue
            for address in st.globals.get("pending", ()):
                if address in wanted:
                    hit(st, address)
            if not open_groups:
                break
            seen: dict[int, int] = {}
            for a in st.history.bbl_addrs:
                if a in group_points:
                    seen[a - delta] = seen.get(a - delta, 0) + 1
            for k, space in list(open_groups.items()):
                row = tuple(seen.get(int(a), 0) for a in groups[k].blocks)
                if space.separates(row):
                    group_found[k] = GroupReach(
                        tuple(groups[k].blocks), SEPARATED, _witness(st, template, variables),
                        row, f"path of {len(st.history.bbl_addrs)} blocks",
                        time.perf_counter() - t0)
                    del open_groups[k]
        if ended:                     # checked: keep no finished path in memory
            simgr.drop(stash="deadended")

    _note_hits()
    timed_out = False
    with _Deadline(deadline) as alarm:
        # The alarm can ring anywhere in the loop, not only in a step (a CI run had it in
        # the loop's test of simgr.active): the whole loop is where the budget ends.
        try:
            while (wanted or open_groups) and (simgr.active or simgr.stashes.get("deferred")
                                                or queue):
                if time.perf_counter() > deadline:
                    timed_out = True
                    break
                if queue and (not (simgr.active or simgr.stashes.get("deferred"))
                              or time.perf_counter() > null_deadline):
                    # the next start: when the last is done, or the null starts' share
                    # of the budget is spent (then every start left is explored too)
                    more = queue if time.perf_counter() > null_deadline else queue[:1]
                    del queue[:len(more)]
                    simgr.populate("deferred", more)
                    if not simgr.active:
                        simgr.move("deferred", "active", lambda st, first=more[0]: st is first)
                    _note_hits()
                # stop lifting at the targets, so a target inside a straight run of code
                # (entered by fall-through) is a state of its own
                simgr.step(extra_stop_points=set(wanted) | group_points)
                steps += 1
                _note_hits()
        except _BudgetSpent:
            timed_out = True       # the budget ran out inside the loop (a long step: the
                                   # solver, symbolic reads)
    if alarm.fired:
        timed_out = True
    elapsed = time.perf_counter() - t0

    left = {name: len(simgr.stashes.get(name, ())) for name in
            ("active", "deferred", "cut", "errored", "unconstrained")}
    left["errored"] = len(simgr.errored)
    exhaustive = (not timed_out and not queue and left["active"] == 0
                  and left["deferred"] == 0
                  and left["cut"] == 0 and left["errored"] == 0 and left["unconstrained"] == 0
                  and concretised[0] == 0)
    log.info("reach %s@%#x: %d step(s), %d complete path(s) in %.2f s, stashes %s, %d "
             "symbolic address(es) concretised", binary_path, function_address, steps,
             paths[0], elapsed, left, concretised[0])
    why = []
    if timed_out:
        why.append(f"budget of {budget_s:g} s spent after {steps} step(s)")
    if left["cut"]:
        why.append(f"{left['cut']} path(s) cut at {MAX_PATH_BLOCKS} blocks")
    if left["errored"]:
        why.append(errored_paths(simgr.errored))
    if left["unconstrained"]:
        why.append(f"{left['unconstrained']} path(s) jumped to a symbolic address")
    if concretised[0]:
        why.append(f"{concretised[0]} symbolic address(es) concretised")
    everything = (f"all paths from the entry explored in {elapsed:.2f} s ({steps} steps, "
                  f"{paths[0]} complete) under the template {template.describe()}")
    out = []
    for t in targets:
        t = int(t)
        if t in found:
            out.append(found[t])
        elif exhaustive:
            out.append(BlockReach(t, UNREACHABLE, None, everything, elapsed))
        else:
            out.append(BlockReach(t, NOT_FOUND, None, "; ".join(why) or "exploration incomplete",
                                  elapsed))
    gout = []
    for k, g in enumerate(groups):
        if k in group_found:
            gout.append(group_found[k])
        elif exhaustive:
            gout.append(GroupReach(tuple(g.blocks), INSEPARABLE, None, None,
                                   f"no complete path's counts leave the measured rows' span; "
                                   f"{everything}", elapsed))
        else:
            gout.append(GroupReach(tuple(g.blocks), NOT_FOUND, None, None,
                                   "; ".join(why) or "exploration incomplete", elapsed))
    return tuple(out), tuple(gout)


class _BudgetSpent(Exception):
    pass


# Modules whose functions run as weak-reference callbacks, where Python, like in a
# finalizer, prints an exception as a traceback and drops it (a CI run: "Exception
# ignored in: <function WeakValueDictionary.__init__.<locals>.remove …> … _BudgetSpent").
_CALLBACK_MODULES = ("/weakref.py", "/_weakrefset.py")


def _in_a_context_manager(frame) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``frame`` or a caller is entering or leaving a ``with`` (a lock's
    ``__enter__``/``__exit__``), or is a finalizer (``__del__``: Python prints an
    exception raised there as a traceback and drops it, angr's paged memory's in zlib's
    uncompress2) or a weak reference's callback (:data:`_CALLBACK_MODULES`): no place for
    an exception from a signal handler."""
    while frame is not None:
        if frame.f_code.co_name in ("__enter__", "__exit__", "acquire", "release",
                                    "__del__") or \
                frame.f_code.co_filename.endswith(_CALLBACK_MODULES):
            return True
        frame = frame.f_back
    return False


class _Deadline:
    """Interrupts one long ``simgr.step`` at the deadline (the loop checks the clock only
    between steps; a step on table lookups with symbolic indices took minutes on zlib's
    crc32_z).  SIGALRM, so only in the main thread; elsewhere the loop's check is all."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.fired = False
        self._old = None

    def __enter__(self) -> "_Deadline":
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self

        def _ring(signum, frame):  # type: ignore[no-untyped-def]
            if _in_a_context_manager(frame):
                # an exception raised between a lock's acquire and the end of its
                # __enter__ never releases it: angr's page lock then deadlocks the next
                # copy of that page (a CI run hung so).  Ring again a moment later.
                signal.setitimer(signal.ITIMER_REAL, 0.002)
                return
            self.fired = True
            raise _BudgetSpent()
        self._old = signal.signal(signal.SIGALRM, _ring)
        signal.setitimer(signal.ITIMER_REAL, max(0.01, self.deadline - time.perf_counter()))
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._old is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)


class RowSpace:
    """The span of a group's measured count rows: a path's row outside it separates."""

    def __init__(self, goal: GroupGoal):
        import numpy as np

        rows = np.asarray(goal.measured, dtype=float).reshape(-1, len(goal.blocks))
        if rows.size:
            _u, sv, vt = np.linalg.svd(rows, full_matrices=False)
            tol = max(rows.shape) * np.finfo(float).eps * (sv[0] if sv.size else 0.0)
            self.basis = vt[sv > max(tol, 1e-9)]
        else:
            self.basis = np.zeros((0, len(goal.blocks)))

    def separates(self, row: Sequence[int]) -> bool:
        import numpy as np

        v = np.asarray(row, dtype=float)
        if not v.any():
            return False
        resid = v - self.basis.T @ (self.basis @ v)
        return bool(np.linalg.norm(resid) > 1e-6 * max(1.0, float(np.linalg.norm(v))))


def _witness(state, template: ArgTemplate, variables) -> Witness:
    """One consistent model of all symbolic parameters on ``state``'s path (solved at once,
    so that jointly constrained parameters agree)."""
    import claripy

    syms = [v for v in variables if v is not None]
    solved: dict[int, int] = {}
    if syms:
        whole = claripy.Concat(*syms) if len(syms) > 1 else syms[0]
        value = state.solver.eval(whole)
        shift = whole.size()
        for v in syms:
            shift -= v.size()
            solved[id(v)] = (value >> shift) & ((1 << v.size()) - 1)
    values: list[Union[int, bytes, None]] = []
    nulls = state.globals.get("nulls", frozenset())
    for i, (p, v) in enumerate(zip(template.params, variables)):
        if i in nulls:
            values.append(None)
        elif isinstance(p, IntParam):
            raw = p.value if v is None else solved[id(v)]
            values.append(_to_signed(raw & ((1 << 64) - 1)) if p.lo < 0 else raw)
        elif v is None:
            values.append(p.content or b"")
        else:
            values.append(solved[id(v)].to_bytes(p.length, "big"))
    return Witness(tuple(values))
