"""The linear system of one measured function: columns, rows and structural space.

A call of the measured function executes its own blocks and those of the binary's
functions it calls; the whole call is timed, so every one of those blocks is an unknown
of the same system.  Columns are (function, block address) pairs, the measured
function's blocks first.  Rows are the inputs that have both counts and times.

The structural count space (the span of every count vector the CFGs allow) is what
tells "the CFG forces these blocks together" from "the inputs happened not to separate
them".  Per function it is :func:`wcetfit.static.structure.count_space_basis`; across functions
one more fact holds in every execution: a callee is activated exactly as often as the
blocks that call it execute.  Without that constraint a caller's call block and its
callee's entry would look separable, and the advice "vary the inputs" would be wrong.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from wcetfit.errors import FitError
from wcetfit.measurements import CountSet, TimeSet
from wcetfit.model import FunctionModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LinearSystem:
    root: str
    columns: tuple[tuple[str, int], ...]   # (function, block address) per column
    indices: np.ndarray                    # input index per row
    counts: np.ndarray                     # int64 [rows, columns]
    ticks: np.ndarray                      # float64 [rows, repeats], NaN = discarded
    structural_basis: np.ndarray           # [dim, columns]
    tsc_hz: float
    # the machine's speed over the timing run (wcetfit.timing.speed), once the fit stage has
    # followed it; None before
    speed: Any = None

    @property
    def ticks_at_reference(self) -> np.ndarray:
        """The ticks with the machine's speed divided out (as they are without a profile)."""
        return self.ticks if self.speed is None else self.speed.at_reference(self.ticks)

    @property
    def addresses(self) -> tuple[int, ...]:
        return tuple(a for _, a in self.columns)


def refuse_shared_blocks(root: str, functions: Mapping[str, FunctionModel]) -> None:
    """Raise BinaryError when two of ``functions`` (``root``'s) share blocks.

    Hand-written assembly may jump into another function's body (libgmp's __gmpn_add_nc
    ends in a jump into __gmpn_add_n's loop), so the static model gives both functions the
    same blocks.  The fit keys a block's cost by its address, one cost per address, and
    cannot yet hold one block as two functions' columns: it stopped after minutes of
    measuring with "block addresses are not unique".  Called before measuring, too."""
    from wcetfit.errors import BinaryError

    owner: dict[int, str] = {}
    shared: dict[tuple[str, str], list[int]] = {}
    for name, fn in functions.items():
        for a in fn.block_addresses:
            other = owner.setdefault(a, name)
            if other != name:
                shared.setdefault((other, name), []).append(a)
    if shared:
        (a, b), where = next(iter(shared.items()))
        raise BinaryError(
            f"{root}: {a} and {b} share {len(where)} block(s) (from {min(where):#x}: code "
            f"that jumps into another function's body, as hand-written assembly does); "
            f"wcetfit fits one cost per block address and cannot model one block in two "
            f"functions yet"
            + (f" ({len(shared) - 1} more pair(s) of functions share blocks)"
               if len(shared) > 1 else ""))


def structural_basis(functions: Sequence[FunctionModel], root: str) -> np.ndarray:
    """Orthonormal rows spanning the block-count vectors of calls of ``root``.

    Unknowns: every function's block counts and its number of activations.  Each
    function's own CFG constrains its counts given its activations
    (:func:`wcetfit.static.structure.count_space_constraints`, last column = activations); a
    callee other than the root is activated once per execution of a block calling it.
    """
    from scipy.linalg import null_space

    from wcetfit.static.structure import count_space_constraints

    offsets: dict[str, int] = {}
    width = 0
    for fn in functions:
        offsets[fn.name] = width
        width += len(fn.blocks) + 1          # blocks, then activations
    by_address = {fn.address: fn for fn in functions}
    # Each function's own constraints touch its columns only: their null space is the
    # block diagonal of the functions' own null spaces (small SVDs), and the calls that
    # link them are solved in that much smaller space.  One SVD of all constraints
    # together took 15 s on liblzma's decoder (63 functions, 3,000 columns).
    own = [null_space(C) if C.shape[0] else np.eye(C.shape[1])
           for C in (count_space_constraints(fn).astype(float) for fn in functions)]
    B = np.zeros((width, sum(n.shape[1] for n in own)))
    k = 0
    for fn, n in zip(functions, own):
        o = offsets[fn.name]
        B[o:o + n.shape[0], k:k + n.shape[1]] = n
        k += n.shape[1]
    rows: list[np.ndarray] = []
    callers: dict[str, list[int]] = {fn.name: [] for fn in functions}
    free: set[str] = set()      # entered through pointers: activations not a block count
    for fn in functions:
        index = {a: i for i, a in enumerate(fn.block_addresses)}
        for call in fn.calls:
            callee = by_address.get(call.target) if call.kind == "internal" else None
            if callee is not None and call.block in index:
                callers[callee.name].append(offsets[fn.name] + index[call.block])
            seen = [by_address.get(t) for t in call.observed_internal]
            if len(call.observed) == 1 and len(seen) == 1 and seen[0] is not None \
                    and call.block in index:
                callers[seen[0].name].append(offsets[fn.name] + index[call.block])
            else:
                free.update(g.name for g in seen if g is not None)
    for fn in functions:
        if fn.name == root or fn.name in free:
            continue
        row = np.zeros(width)
        row[offsets[fn.name] + len(fn.blocks)] = 1.0
        for col in callers[fn.name]:
            row[col] -= 1.0
        rows.append(row)
    if rows and B.shape[1]:
        Z = null_space(np.array(rows) @ B)
        # B is block diagonal: N = B·Z a function's rows at a time (one dense product
        # took 21 s on libc's fnmatch: 13,242 × 6,935 × 6,583)
        N = np.zeros((width, Z.shape[1]))
        k = 0
        for fn, n in zip(functions, own):
            o = offsets[fn.name]
            N[o:o + n.shape[0]] = n @ Z[k:k + n.shape[1]]
            k += n.shape[1]
    else:
        N = B
    keep = [offsets[fn.name] + i for fn in functions for i in range(len(fn.blocks))]
    if N.shape[1] == 0:
        return np.zeros((0, len(keep)))
    activations = [offsets[fn.name] + len(fn.blocks) for fn in functions]
    return orthonormal_rows_left(N, keep, activations).T.copy()


def orthonormal_rows_left(N: np.ndarray, keep: Sequence[int],
                          drop: Sequence[int]) -> np.ndarray:
    """An orthonormal basis (columns) of the span of ``N[keep]``, where ``N`` has
    orthonormal columns and ``drop`` are its few other rows (the functions' activations).

    ``orth(N[keep])`` is an SVD of the whole matrix: 8 minutes on libc's fnmatch (12,889
    block rows, 6,583 columns), most of its analysis.  With A = N[drop],
    N[keep]ᵀN[keep] = I − AᵀA, so N[keep] maps the directions A does not see (the
    complement W of A's right singular vectors V) isometrically: N[keep]·W is orthonormal
    as it is, and applying the Householder reflectors of V's QR costs n·k·r, not n·k².
    Along V, N[keep]·V is orthogonal to the rest (its columns of length √(1 − sᵢ²)): its
    own orthonormal basis, from a small SVD, cut at orth's tolerance."""
    from scipy.linalg import lapack, svd

    kept = np.asarray(N[list(keep), :], dtype=float)
    A = np.asarray(N[list(drop), :], dtype=float)
    n, k = kept.shape
    if A.shape[0] == 0 or k == 0:
        return kept
    _, s, vt = svd(A, full_matrices=False)
    r = int(s.size)
    V = vt.T                                              # k × r, orthonormal
    qr, tau, _work, info = lapack.dgeqrf(np.asfortranarray(V))
    if info != 0:
        raise FitError(f"structural basis: QR failed (LAPACK info {info})")
    # kept · Q, Q = [V' W] from the reflectors; only W's part is wanted
    applied, _w, info = lapack.dormqr("R", "N", qr, tau, np.asfortranarray(kept),
                                      max(1, n) * 64)
    if info != 0:
        raise FitError(f"structural basis: applying the reflectors failed (LAPACK info "
                       f"{info})")
    complement = applied[:, r:]
    # along V: the few columns N[keep]·V (r of them, one per function at most), their own
    # orthonormal basis by a small SVD (their lengths √(1 − sᵢ²) from s lose all precision
    # near 0: a direction N[keep] maps to nothing read as 1e-8), cut at orth's tolerance
    u, sigma, _ = svd(kept @ V, full_matrices=False)
    top = max(1.0 if k > r else 0.0, float(sigma.max(initial=0.0)))
    tol = max(n, k) * np.finfo(float).eps * top
    return np.hstack([complement, u[:, sigma > tol]])


def build_system(functions: Mapping[str, FunctionModel], counts: CountSet,
                 times: TimeSet) -> LinearSystem:
    """Join counts and times of the inputs that have both."""
    fcs = counts.functions
    missing = [fc.name for fc in fcs if fc.name not in functions]
    if missing:
        # (wcetfit's model of the binary changed since they were counted: a new name for
        # code two functions share, say)
        raise FitError(f"stored counts name functions the static model lacks now: "
                       f"{', '.join(missing)} (the binary or wcetfit changed since they "
                       f"were counted): `wcetfit analyze` counts again")
    for fc in fcs:
        model_blocks = functions[fc.name].block_addresses
        if tuple(fc.blocks) != tuple(model_blocks):
            raise FitError(f"stored counts of {fc.name} do not match its static model "
                           "(the binary or wcetfit changed): count again with --fresh")
    common, ci, ti = np.intersect1d(counts.indices, times.indices, return_indices=True)
    if common.size == 0:
        failed = (*getattr(counts, "failures", ()), *getattr(times, "failures", ()))
        if failed:
            # every input crashed (libcrypto's AES_encrypt on init's random AES_KEY): say
            # so, not that counts and times do not meet
            from wcetfit.measurements import nothing_ran
            raise FitError(nothing_ran(counts.function, failed))
        raise FitError(f"{counts.function}: no input has both counts and times")
    matrix = np.hstack([fc.counts[ci] for fc in fcs]).astype(np.int64)
    columns = tuple((fc.name, a) for fc in fcs for a in fc.blocks)
    basis = structural_basis([functions[fc.name] for fc in fcs], fcs[0].name)
    return LinearSystem(counts.function, columns, common, matrix, times.ticks[ti],
                        basis, times.tsc_hz)
