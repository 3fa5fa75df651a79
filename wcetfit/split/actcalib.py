"""The per-activation probes' own cost, split into ε and δ, measured in the measuring child
with the same stubs and the same fenced reading as the real activations.

A timed activation's exclusive row holds two shares of probe code besides its blocks:

* ε — the part of its *own* probe pair inside its readings (after the entry reading: the
  event store, the pops, the stub's ``call`` into the continuation and the jump back;
  before the exit reading: the ``ret`` into the stub and the pushes);
* δ — per timed child, the part of the *child's* pair outside the child's readings and
  inside the parent's (the patch ``jmp``, the stub's entry path up to its reading, its
  exit path after its reading and the ``ret`` back to the caller).

ε sits in the activation's entry block, δ in the block of the parent that made the call.
The real functions' rows cannot tell either from those blocks (every activation runs its
entry block once; a call block whose calls are all timed runs once per child), so they
are measured here, on two functions whose instructions are known:

    L:  mov eax, 0 ; ret                                   (5 + 1 bytes)
    P:  mov eax, 0 ; push rbx ; mov ebx, edi ; test ebx, ebx ; jz done
        loop: call L ; dec ebx ; jnz loop
        done: pop rbx ; ret

Both entries start with a 5-byte ``mov`` (the displaced instruction, as a real entry's
first instructions are).  Two sets of probes are built by
:class:`~wcetfit.split.actprobe.ActivationProbes`: {P, L} timed, and P alone.

* {P, L}: L's inclusive time is ε + c_L (c_L: ``mov``, ``ret`` unprobed); P's exclusive
  time grows with n by δ + c_loop per call (c_loop: ``call``, ``dec``, ``jnz``).
* P alone: P's inclusive time grows with n by c_iter = c_L + c_loop (one unprobed
  iteration, the same instructions), read by the same stubs.

So ε + δ = L̄ + slope_P,excl − c_iter exactly (κ of the calibration), and the split
between ε and δ is known up to how c_iter divides between c_L and c_loop: ε is stated as
L̄ − c_iter/2 with c_iter/2 added to its interval (c_L ∈ [0, c_iter]), δ likewise, and
their sum carries only the statistical interval.  On this VM c_iter is a few ticks.

Statistics: each group's values are trimmed (10 % each side: an interrupt inside one
activation must not move the mean; the TSC's 26-tick steps need means, not medians),
means and their standard errors combine by least squares over n.
"""

from __future__ import annotations

import ctypes
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from wcetfit.errors import MeasurementError
from wcetfit.split.placement import Insn, Region

log = logging.getLogger(__name__)

MOV_EAX_0 = b"\xb8\x00\x00\x00\x00"
L_OFF, P_OFF = 0, 16
# jz done skips call(5) + dec(2) + jnz(2); jnz loop goes back over the same 9 bytes
_P_BODY = (MOV_EAX_0 + b"\x53" + b"\x89\xfb" + b"\x85\xdb" + b"\x74\x09"
           + b"\xe8" + b"\x00\x00\x00\x00" + b"\xff\xcb" + b"\x75\xf7" + b"\x5b\xc3")
_CALL_AT = P_OFF + 5 + 1 + 2 + 2 + 2          # the call's opcode within the page
NS_CALLS = (0, 4, 8, 16)                       # children per P activation
TRIM = 0.10


@dataclass(frozen=True)
class Overhead:
    """One probe overhead figure in ticks: value, 95 % half-width (statistical plus the
    stated bound of the known instructions' share)."""

    value_ticks: float
    ci95_ticks: float

    def to_json(self) -> dict[str, float]:
        return {"value_ticks": self.value_ticks, "ci95_ticks": self.ci95_ticks}


def _code() -> bytes:
    page = bytearray(b"\xcc" * 64)
    page[L_OFF:L_OFF + 6] = MOV_EAX_0 + b"\xc3"
    page[P_OFF:P_OFF + len(_P_BODY)] = _P_BODY
    rel = L_OFF - (_CALL_AT + 5)
    page[_CALL_AT + 1:_CALL_AT + 5] = rel.to_bytes(4, "little", signed=True)
    return bytes(page)


def _entry_region(at: int) -> Region:
    i = Insn(at, 5, MOV_EAX_0, "mov", "mov eax, 0", None, None, None, None, False, False,
             False, False)
    return Region(at, at + 5, (i,), True, None, at)


class _Page:
    """Stands for a binary where ActivationProbes asks one: the calibration page."""

    bias = 0

    def __init__(self, address: int, size: int) -> None:
        self._span = (address, address + size)

    def span(self) -> tuple[int, int]:
        return self._span

    def link_time(self, address: int) -> int:
        return address


def _trimmed(x: np.ndarray) -> tuple[float, float, int]:
    """(trimmed mean, its standard error, values kept)."""
    x = np.sort(x[np.isfinite(x)])
    k = int(TRIM * x.size)
    x = x[k:x.size - k] if x.size > 2 * k + 1 else x
    if x.size < 2:
        return float(x.mean()) if x.size else math.nan, math.inf, int(x.size)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)), int(x.size)


# Smallest standard error a group mean is given.  On a quiet machine every kept reading of
# a group can be the same multiple of the TSC step, so the measured SE is exactly 0; a
# zero would give that group an infinite weight and make the normal equations singular
# (CI saw a negative variance from it).  One tick is far below any probe cost yet keeps
# the weights finite.
SE_FLOOR_TICKS = 1.0


def slope_of(ns: np.ndarray, means: np.ndarray, ses: np.ndarray) -> tuple[float, float]:
    """Weighted least-squares slope of the group means over n, and its standard error."""
    keep = np.isfinite(means) & np.isfinite(ses)
    if np.unique(ns[keep]).size < 2:
        raise MeasurementError("probe calibration: fewer than two groups with readings")
    sw = 1.0 / np.maximum(ses[keep], SE_FLOOR_TICKS)          # sqrt of the weights
    X = np.column_stack([np.ones(int(keep.sum())), ns[keep].astype(float)]) * sw[:, None]
    beta, *_ = np.linalg.lstsq(X, means[keep] * sw, rcond=None)
    cov = np.linalg.pinv(X.T @ X)
    return float(beta[1]), float(math.sqrt(max(float(cov[1, 1]), 0.0)))


def combine(l_mean: float, l_se: float, sp: float, sp_se: float, c_iter: float,
            c_se: float, dof: int) -> dict[str, Any]:
    """ε, δ and ε + δ from L's inclusive mean, P's exclusive slope and the unprobed
    iteration's cost (module docstring); intervals: t95 × SE, plus c_iter/2 for ε and δ."""
    t95 = float(stats.t.ppf(0.975, max(dof, 1)))
    # (an iteration costs no less than nothing: a c_iter measured below 0 is noise, and
    # taken as 0 in ε, δ and their sum alike, so that κ = ε + δ holds whatever it is)
    share = max(c_iter, 0.0) / 2
    eps = l_mean - share
    delta = sp - share
    kappa = l_mean + sp - 2 * share
    return {"epsilon": Overhead(eps, t95 * math.hypot(l_se, c_se / 2) + share).to_json(),
            "delta": Overhead(delta, t95 * math.hypot(sp_se, c_se / 2) + share).to_json(),
            "kappa": Overhead(kappa, t95 * math.sqrt(l_se ** 2 + sp_se ** 2 + c_se ** 2))
            .to_json(),
            "unprobed_iteration_ticks": c_iter, "unprobed_iteration_ci95_ticks": t95 * c_se,
            "leaf_inclusive_ticks": l_mean, "parent_slope_ticks": sp}


def calibrate(method: str, near: tuple[int, int], calls: int = 300,
              warmup: int = 20) -> dict[str, Any]:
    """ε, δ (and ε + δ) of the activation probes built with ``method``'s reading, measured
    now in this process (module docstring).  ``near``: a runtime span the code is placed
    within ±2 GiB of (the binary's, so the stubs sit where the real ones do)."""
    from wcetfit.loader import PROT_EXEC, PROT_READ, alloc_near
    from wcetfit.split.actprobe import ActivationProbes

    mem = alloc_near(near[0], near[1], 4096)
    try:
        mem.write(0, _code())
        mem.protect(0, mem.size, PROT_READ | PROT_EXEC)
        page = _Page(mem.address, mem.size)
        regions = {"P": _entry_region(mem.address + P_OFF),
                   "L": _entry_region(mem.address + L_OFF)}
        fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(mem.address + P_OFF)
        both = ActivationProbes(page, regions, {"P": 0, "L": 1}, method)
        alone = ActivationProbes(page, {"P": regions["P"]}, {"P": 0}, method)
        l_incl: list[np.ndarray] = []
        p_excl = {n: [] for n in NS_CALLS}
        p_alone = {n: [] for n in NS_CALLS}
        try:
            for probes, sink in ((both, "both"), (alone, "alone")):
                with_l = sink == "both"
                probes.install()
                try:
                    for rep in range(warmup + calls):
                        for n in NS_CALLS:
                            probes.arm(n + 2)
                            fn(n)
                            ev = probes.recorded()
                            if probes.dropped() or len(ev) != 2 * (1 + (n if with_l else 0)):
                                raise MeasurementError("probe calibration: unexpected events")
                            if rep < warmup:
                                continue
                            t = ev["tsc"].astype(np.int64)
                            incl_p = float(t[-1] - t[0])
                            if with_l:
                                li = (t[2:-1:2] - t[1:-1:2]).astype(float)
                                l_incl.append(li)
                                p_excl[n].append(incl_p - li.sum())
                            else:
                                p_alone[n].append(incl_p)
                finally:
                    probes.remove()
        finally:
            both.close()
            alone.close()
    finally:
        mem.close()
    l_mean, l_se, l_n = _trimmed(np.concatenate(l_incl))
    ns = np.array(NS_CALLS)
    ex = [_trimmed(np.array(p_excl[n])) for n in NS_CALLS]
    al = [_trimmed(np.array(p_alone[n])) for n in NS_CALLS]
    sp, sp_se = slope_of(ns, np.array([m for m, _s, _k in ex]), np.array([s for _m, s, _k in ex]))
    ci, ci_se = slope_of(ns, np.array([m for m, _s, _k in al]), np.array([s for _m, s, _k in al]))
    out = combine(l_mean, l_se, sp, sp_se, ci, ci_se, min(l_n, calls) - 2)
    out.update({"method": method, "calls": calls, "children": list(NS_CALLS),
                "parent_exclusive_by_children": {str(n): m for n, (m, _s, _k) in
                                                 zip(NS_CALLS, ex)}})
    log.info("activation probe calibration: ε %.1f ± %.1f, δ %.1f ± %.1f, ε + δ %.1f ± "
             "%.1f ticks", out["epsilon"]["value_ticks"], out["epsilon"]["ci95_ticks"],
             out["delta"]["value_ticks"], out["delta"]["ci95_ticks"],
             out["kappa"]["value_ticks"], out["kappa"]["ci95_ticks"])
    return out
