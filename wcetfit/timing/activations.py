"""Per-activation rows: the activation tree of one call, from the count run's block trace
and from the per-activation probes' events, and the exclusive-time rows the fit reads.

The probes (:mod:`wcetfit.split.actprobe`) give, per timed call, a TSC reading at the
entry and at the return of every activation of the *timed* functions, in order.  The
count run's trace (:attr:`wcetfit.measurements.CountSet.trace`) gives every block of the
same call, in order, over the whole relocated closure.  Both describe one tree:

* :func:`trace_activations` walks the trace (calls, tail calls and returns matched with a
  stack, as :func:`wcetfit.count.flow.check_trace` does) and gives every timed activation
  in preorder — its function, its parent, its call site — and its **exclusive** block
  counts: the blocks executed while it was the innermost *timed* activation.  A callee
  that is not timed (its entry cannot be patched) keeps its blocks in its caller's row,
  as (callee, block) columns.
* :func:`event_activations` pairs entry and exit events (vectorised: an exit closes the
  last open entry of its depth) into inclusive ticks per activation, preorder.

The two preorders must agree — same functions, same depths, per input — or the input is
refused (:class:`ActivationMismatch`): an activation the trace does not see (a call
through a function pointer into original code, a callee left uncounted) would otherwise
take another activation's counts.  Exclusive ticks = inclusive − Σ inclusive of the
timed children; the row of an activation with c timed children holds its own blocks,
its own probe pair's constant share, and c times a child probe's share (``children``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.errors import MeasurementError
from wcetfit.measurements import ActivationRows, _failures_from_json, _failures_to_json, _safe
from wcetfit.model import CALL_INDIRECT, FunctionModel, hexaddr
from wcetfit.store import Store, machine_fingerprint

log = logging.getLogger(__name__)

KIND_ENTRY, KIND_EXIT, KIND_STALE = 0, 1, 2      # as the stubs write them
FORMAT = 1                                       # stored layout version


class ActivationMismatch(MeasurementError):
    """The probed original and the count run's trace disagree on the activations."""


# =========================================================================================
# the tree from the trace
# =========================================================================================

@dataclass(frozen=True)
class TraceTree:
    """Timed activations of one call in preorder, from the count run's trace."""

    function: np.ndarray        # int32: index into the closure's function names
    parent: np.ndarray          # int64: preorder index of the parent, -1 for the root
    depth: np.ndarray           # int32: 0 for the root
    call_site: np.ndarray       # uint64: link-time address of the call/jump (0: root)
    ids: np.ndarray             # int32 [k]: compact block ids, with ``owner`` and
    owner: np.ndarray           # int64 [k]: the activation they belong to
    counts: np.ndarray          # int64 [k]: how often (an exclusive-count triplet list)
    untimed: dict[str, int]     # activations of functions not timed (merged into callers)


def _last_insn(models: Mapping[str, FunctionModel], fn: str, block: int) -> int:
    for b in models[fn].blocks:
        if b.address == block:
            return b.instructions[-1].address if b.instructions else block
    return block


def trace_activations(trace: np.ndarray, id_names: Sequence[tuple[str, int]],
                      transfers: Mapping[tuple[str, int], tuple[str, str]],
                      models: Mapping[str, FunctionModel], names: Sequence[str],
                      timed: frozenset[str], root: str) -> TraceTree:
    """The timed activations of the call whose block trace is ``trace`` (compact ids,
    ``id_names[id] = (function, block)``); ``transfers`` as the count plan's; ``names``
    the closure's functions (their index is the function id); ``timed`` the functions
    with their own activations (the root always)."""
    n = len(id_names)
    ids = np.asarray(trace, dtype=np.int64)
    if len(ids) == 0:
        raise ActivationMismatch("the block trace is empty")
    fid = {name: k for k, name in enumerate(names)}
    calls = {k: v for k, (kind, v) in transfers.items() if kind == "call"}
    tails = {k: v for k, (kind, v) in transfers.items() if kind == "tail"}
    others = {k: v for k, (kind, v) in transfers.items() if kind not in ("call", "tail")}
    # Calls and tail calls through pointers the count run followed into relocated
    # functions (wcetfit.count): any closure function's entry may follow such a block.
    indirect = {(name, c.block): c.tail for name in names for c in models[name].calls
                if c.kind == CALL_INDIRECT}
    code = {fb: i for i, fb in enumerate(id_names)}
    edge_codes = []
    for name in names:
        for s, d in models[name].edges:
            if (name, s) in calls or (name, s) not in code or (name, d) not in code:
                continue
            edge_codes.append(code[(name, s)] * n + code[(name, d)])
    pairs = ids[:-1] * n + ids[1:]
    moves = np.flatnonzero(~np.isin(pairs, np.unique(np.array(edge_codes, np.int64))))
    exits = {name: set(models[name].exits) for name in names}
    entry = {name: models[name].entry for name in names}
    # frames: (function, timed activation index owning the blocks, entered by tail jump)
    first_fn = id_names[ids[0]][0]
    if first_fn != root:
        raise ActivationMismatch(f"the trace starts in {first_fn}, not in {root}")
    act_fn, act_parent, act_depth, act_site = [fid[root]], [-1], [0], [0]
    stack: list[tuple[str, int, bool]] = [(root, 0, False)]
    untimed: dict[str, int] = {}
    seg_start, seg_owner = [0], [0]
    for pos in moves.tolist():
        (fa, a), (fb, b) = id_names[ids[pos]], id_names[ids[pos + 1]]
        cur = stack[-1][1]
        callee = calls.get((fa, a))
        tail = tails.get((fa, a))
        entered = None
        if callee is not None and fb == callee and b == entry[fb]:
            entered = (fb, False)
        elif tail is not None and fb == tail and b == entry[fb]:
            entered = (fb, True)
        elif (fa, a) in indirect and b == entry[fb]:
            entered = (fb, indirect[(fa, a)])
        elif others.get((fa, a)) == fb and b == entry[fb]:
            entered = (fb, True)              # a conditional tail call
        elif others.get((fa, a)) == fb:
            continue                          # the activation goes on in fb's code (.cold)
        if entered is not None:
            g, by_tail = entered
            if g in timed:
                act_fn.append(fid[g])
                act_parent.append(cur)
                act_depth.append(act_depth[cur] + 1)
                act_site.append(_last_insn(models, fa, a))
                owner = len(act_fn) - 1
            else:
                untimed[g] = untimed.get(g, 0) + 1
                owner = cur
            stack.append((g, owner, by_tail))
        elif a in exits[fa] and len(stack) > 1:
            _g, _o, by_tail = stack.pop()
            while by_tail and len(stack) > 1:   # the tail caller ends with its tail callee
                _g, _o, by_tail = stack.pop()
        else:
            raise ActivationMismatch(f"trace: {fa} {hexaddr(a)} followed by {fb} "
                                     f"{hexaddr(b)} is neither an edge, a call nor a return")
        seg_start.append(pos + 1)
        seg_owner.append(stack[-1][1])
    lengths = np.diff(np.append(np.array(seg_start, np.int64), len(ids)))
    owner = np.repeat(np.array(seg_owner, np.int64), lengths)
    key = owner * n + ids
    uniq, cnt = np.unique(key, return_counts=True)
    return TraceTree(np.array(act_fn, np.int32), np.array(act_parent, np.int64),
                     np.array(act_depth, np.int32), np.array(act_site, np.uint64),
                     (uniq % n).astype(np.int32), uniq // n, cnt.astype(np.int64), untimed)


# =========================================================================================
# the tree from the probes' events
# =========================================================================================

def split_calls(tsc: np.ndarray, t_start: np.ndarray, t_stop: np.ndarray
                ) -> list[tuple[int, int]]:
    """Event index ranges of each timed call: the events between the loop's start and
    stop readings (the warm-up calls' events come before the first)."""
    if len(tsc) > 1 and np.any(np.diff(tsc.astype(np.int64)) < 0):
        raise MeasurementError("activation events: the TSC readings are not in order "
                               "(the thread moved between CPUs?)")
    lo = np.searchsorted(tsc, t_start, side="left")
    hi = np.searchsorted(tsc, t_stop, side="right")
    return list(zip(lo.tolist(), hi.tolist()))


def event_activations(fid: np.ndarray, kind: np.ndarray, tsc: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """Preorder (function ids, depths, inclusive ticks) of one call's events, or why they
    cannot be used (a stale mark: longjmp skipped frames; not well nested)."""
    if np.any(kind == KIND_STALE):
        return "frames skipped (longjmp): the call's activations are discarded"
    step = np.where(kind == KIND_ENTRY, 1, -1)
    depth_after = np.cumsum(step)
    if len(step) == 0 or depth_after.min() < 0 or depth_after[-1] != 0:
        return "entry and exit events do not nest"
    level = np.where(kind == KIND_ENTRY, depth_after, depth_after + 1)
    order = np.argsort(level, kind="stable")
    ent, ex = order[0::2], order[1::2]
    if len(ent) != len(ex) or np.any(kind[ent] != KIND_ENTRY) or np.any(kind[ex] != KIND_EXIT) \
            or np.any(fid[ent] != fid[ex]) or np.any(level[ent] != level[ex]):
        return "entry and exit events do not pair"
    incl = tsc[ex].astype(np.int64) - tsc[ent].astype(np.int64)
    pre = np.argsort(ent)                      # preorder = order of the entry events
    ent, incl = ent[pre], incl[pre]
    return fid[ent].astype(np.int32), (depth_after[ent] - 1).astype(np.int32), incl


def exclusive(incl: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Inclusive ticks [acts, repeats] minus the sum of each activation's children's."""
    out = np.array(incl, dtype=np.float64, copy=True)
    has = parent >= 0
    np.add.at(out, parent[has], -incl[has])
    return out


# =========================================================================================
# stored set and the fit's rows
# =========================================================================================

@dataclass(frozen=True)
class ActivationSet:
    """Every timed activation of one root's inputs (preorder per input, inputs ascending)."""

    root: str
    seed: int
    method: str
    tsc_hz: float
    names: tuple[str, ...]                     # closure functions; function id = index
    addresses: tuple[int, ...]
    id_names: tuple[tuple[str, int], ...]      # compact block id -> (function, block)
    timed: tuple[str, ...]
    untimed: dict[str, str]                    # function -> why not timed
    input_index: np.ndarray                    # int64 [N]
    function: np.ndarray                       # int32 [N]
    parent: np.ndarray                         # int64 [N]: global row, -1 for a root
    call_site: np.ndarray                      # uint64 [N]
    incl: np.ndarray                           # float64 [N, repeats]; NaN = discarded
    cnt_row: np.ndarray                        # int64: exclusive counts as triplets
    cnt_id: np.ndarray
    cnt_val: np.ndarray
    indices: np.ndarray                        # inputs measured
    whole_probed: np.ndarray                   # float64 [inputs, repeats]: loop readings
    whole_plain: np.ndarray                    # float64 [inputs, repeats]: unprobed calls
    failures: tuple[Any, ...] = ()
    environment: dict[str, Any] | None = None
    # the probes' ε and δ measured in the measuring child (wcetfit.split.actcalib):
    # {"epsilon": {value_ticks, ci95_ticks}, "delta": …, "kappa": …, …}; None: not measured
    calibration: dict[str, Any] | None = None

    @property
    def excl(self) -> np.ndarray:
        return exclusive(self.incl, self.parent)

    def children(self) -> np.ndarray:
        return np.bincount(self.parent[self.parent >= 0], minlength=len(self.parent)) \
            .astype(np.int32)

    def rows(self) -> dict[str, ActivationRows]:
        """Per timed function, its exclusive rows (:class:`ActivationRows`)."""
        import scipy.sparse as sp

        excl = self.excl
        kids = self.children()
        out = {}
        for k, name in enumerate(self.names):
            if name not in self.timed:
                continue
            rows = np.flatnonzero(self.function == k)
            sel = np.isin(self.cnt_row, rows)
            seen = np.unique(self.cnt_id[sel])
            own = [i for i, (fn, _b) in enumerate(self.id_names) if fn == name]
            cols = np.array(sorted(set(own) | set(seen.tolist())), dtype=np.int64)
            col_of = np.full(len(self.id_names), -1, np.int64)
            col_of[cols] = np.arange(len(cols))
            row_of = np.full(len(self.function), -1, np.int64)
            row_of[rows] = np.arange(len(rows))
            m = sp.csr_matrix((self.cnt_val[sel].astype(np.float64),
                               (row_of[self.cnt_row[sel]], col_of[self.cnt_id[sel]])),
                              shape=(len(rows), len(cols)))
            out[name] = ActivationRows(
                function=name, address=self.addresses[k],
                columns=tuple(self.id_names[i] for i in cols), counts=m,
                ticks=excl[rows], children=kids[rows], input_index=self.input_index[rows],
                call_site=self.call_site[rows],
                child_calls=self._child_calls(rows, row_of, cols))
        return out


    def _child_calls(self, rows: np.ndarray, row_of: np.ndarray, cols: np.ndarray) -> Any:
        """[rows, columns]: the timed children each activation called from each column's
        block.  A call site is the address of the block's last instruction (the call or
        the tail jump): its block is the column with the greatest start not above it (the
        block that made the call executed in this activation, so it is a column)."""
        import scipy.sparse as sp

        kids = np.flatnonzero(np.isin(self.parent, rows))
        starts = np.array([self.id_names[i][1] for i in cols], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        site = self.call_site[kids].astype(np.int64)
        pos = np.searchsorted(starts[order], site, side="right") - 1
        ok = pos >= 0
        if not ok.all():
            log.warning("%d timed call(s) from a site below every block of the caller's "
                        "rows: their δ is not placed", int((~ok).sum()))
        return sp.csr_matrix((np.ones(int(ok.sum())),
                              (row_of[self.parent[kids[ok]]], order[pos[ok]])),
                             shape=(len(rows), len(cols)))


def activations_name(root: str, seed: int, method: str, repeats: int) -> str:
    return f"activations-{_safe(root)}-s{seed}-{method}-r{repeats}"


def save_activations(store: Store, s: ActivationSet) -> None:
    meta = {"kind": "activations", "format": FORMAT, "function": s.root, "seed": s.seed,
            "method": s.method, "tsc_hz": s.tsc_hz, "names": list(s.names),
            "addresses": [hexaddr(a) for a in s.addresses],
            "id_names": [[f, hexaddr(b)] for f, b in s.id_names], "timed": list(s.timed),
            "untimed": dict(s.untimed), "machine": machine_fingerprint(),
            "environment": s.environment or {}, "failures": _failures_to_json(s.failures),
            "calibration": s.calibration}
    arrays = {"input_index": s.input_index, "function": s.function, "parent": s.parent,
              "call_site": s.call_site, "incl": s.incl, "cnt_row": s.cnt_row,
              "cnt_id": s.cnt_id, "cnt_val": s.cnt_val, "indices": s.indices,
              "whole_probed": s.whole_probed, "whole_plain": s.whole_plain}
    store.save(activations_name(s.root, s.seed, s.method, s.incl.shape[1]), meta, arrays,
               measured=len(s.indices) > 0)


def load_activations(store: Store, root: str, seed: int, method: str,
                     repeats: int) -> ActivationSet | None:
    got = store.load(activations_name(root, seed, method, repeats), machine=True)
    if got is None:
        return None
    meta, a = got
    if meta.get("format") != FORMAT:
        log.warning("stored activations of %s have format %s, not %s: ignored", root,
                    meta.get("format"), FORMAT)
        return None
    return ActivationSet(
        meta["function"], int(meta["seed"]), meta["method"], float(meta["tsc_hz"]),
        tuple(meta["names"]), tuple(int(x, 16) for x in meta["addresses"]),
        tuple((f, int(b, 16)) for f, b in meta["id_names"]), tuple(meta["timed"]),
        dict(meta["untimed"]), a["input_index"], a["function"], a["parent"], a["call_site"],
        a["incl"], a["cnt_row"], a["cnt_id"], a["cnt_val"], a["indices"], a["whole_probed"],
        a["whole_plain"], tuple(_failures_from_json(meta["failures"])),
        meta.get("environment"), meta.get("calibration"))


def load_activation_rows(store: Store, root: str, seed: int, method: str,
                         repeats: int) -> dict[str, ActivationRows] | None:
    """The fit's entry point: per timed function of ``root``'s closure, its rows, or None
    when nothing is stored (run ``wcetfit time --activations``)."""
    s = load_activations(store, root, seed, method, repeats)
    return None if s is None else s.rows()
