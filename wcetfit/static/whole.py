"""Whole-binary recovery: every function of a binary, in parallel processes, cached.

The global graph comes from our own recursive descent (:mod:`wcetfit.static.descent`),
not from angr's CFGFast, which took ~10x longer on a large library for the same models.
"""

from __future__ import annotations

import logging
import os
import time

from wcetfit.errors import BinaryError
from wcetfit.model import FunctionModel, FunctionSummary
from wcetfit.static import descent, elfinfo
from wcetfit.static.build import Builder, RawCFG
from wcetfit.static.cfgcache import CfgCache
from wcetfit.static.elfinfo import ElfInfo
from wcetfit.static.symbols import SymbolIndex

log = logging.getLogger(__name__)


def with_fdes(elf: ElfInfo) -> ElfInfo:
    return elf if elf.fdes else elfinfo.read_elf(elf.path, with_fdes=True)



# Whole-binary recovery runs in this many processes (recovery and model building are
# single-threaded Python, ~2 ms of CPU per function): $WCETFIT_JOBS, else up to 2, and only
# for binaries with at least _PARALLEL_MIN_STARTS function starts (below that, starting a
# process costs more than it saves).
_PARALLEL_MIN_STARTS = 300


def _jobs(n_starts: int) -> int:
    env = os.environ.get("WCETFIT_JOBS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise BinaryError(f"WCETFIT_JOBS={env!r}: expected a number of processes") from None
    if n_starts < _PARALLEL_MIN_STARTS:
        return 1
    return max(1, min(2, os.cpu_count() or 1))


def _split(starts: list[int], parts: int) -> list[list[int]]:
    """Contiguous groups of similar code size (a start's size: the gap to the next one).
    Contiguous, because functions mostly call their neighbours: each process then
    re-explores few callees of the other groups."""
    starts = sorted(starts)
    sizes = [b - a for a, b in zip(starts, starts[1:])] + [64]
    total = sum(sizes)
    groups: list[list[int]] = [[] for _ in range(parts)]
    acc = 0
    for a, s in zip(starts, sizes):
        k = min(parts - 1, acc * parts // max(total, 1))
        groups[k].append(a)
        acc += s
    return [g for g in groups if g]


def summary_of(fn: FunctionModel) -> FunctionSummary:
    return FunctionSummary(fn.name, fn.address, len(fn.blocks), len(fn.loops), len(fn.calls))


def _run_workers(arglists: list[tuple]) -> list:
    """Run :func:`_whole_worker` once per argument tuple, each in a fresh interpreter.

    Plain subprocesses rather than multiprocessing: its "spawn" start method re-imports
    the caller's main script (a script without an ``if __name__ == "__main__"`` guard
    would run again), and "fork" is unsafe under threads.  Arguments and results travel
    pickled over the pipes; the workers' log records go to our stderr.
    """
    import pickle
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import wcetfit

    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(wcetfit.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    code = "import wcetfit.static.whole as w; w._worker_stdio()"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env) for _ in arglists]

    def talk(i: int):
        out, _ = procs[i].communicate(pickle.dumps(arglists[i], protocol=pickle.HIGHEST_PROTOCOL))
        if procs[i].returncode != 0:
            raise BinaryError(f"{arglists[i][0]}: a CFG recovery process failed "
                              f"(exit status {procs[i].returncode}; its messages are above)")
        status, payload = pickle.loads(out)
        if status == "error":
            raise payload
        return payload

    try:
        with ThreadPoolExecutor(len(procs)) as ex:
            return list(ex.map(talk, range(len(procs))))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _worker_stdio() -> None:
    """Child side of :func:`_run_workers`: pickled args on stdin, pickled result on stdout."""
    import pickle
    import sys

    # The result travels on our stdout: keep a private copy of that descriptor and send
    # anything else written to fd 1 (by Python or native code) to stderr instead.
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    args = pickle.loads(sys.stdin.buffer.read())
    try:
        result = ("ok", _whole_worker(*args))
    except BinaryError as exc:          # typed errors travel back to be raised in the parent
        result = ("error", exc)
    except Exception as exc:  # noqa: BLE001 -- a bug: one line for the user, details at -vv
        log.debug("CFG recovery process failed", exc_info=True)
        result = ("error", BinaryError(f"{args[0]}: CFG recovery failed: {type(exc).__name__}: {exc}"))
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


def _whole_worker(path: str, starts: list[int], levels: dict[str, int], cache_root: str | None,
                  cdir: str, return_models: bool):
    """Process entry: models of the functions of one group (and of the call targets known
    neither from symbols nor from .eh_frame that its code reaches).  Writes them to the
    cache itself; returns summaries, warnings and, if asked, the encoded models (plain
    lists and dicts pickle several times faster than the dataclasses)."""
    # A spawned process starts with no logging set up: mirror the parent's levels, and
    # print our own records the way the command line does.
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    own = logging.getLogger("wcetfit")
    if not own.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        own.addHandler(handler)
        own.propagate = False
    from wcetfit.static.cfgcache import encode_function

    cache = CfgCache(cache_root, enabled=cache_root is not None)
    elf = elfinfo.read_elf(path, with_fdes=True)
    index = SymbolIndex(elf)
    raw = descent.recover(path, starts, elf, index)
    t0 = time.perf_counter()
    built = _build_all(path, elf, index, raw, set(starts))
    t1 = time.perf_counter()
    out = []
    for fn, callees in built:
        cache.put_function(cdir, fn, callees, replace=False)
        out.append((summary_of(fn), fn.warnings, fn.unresolved_jumps,
                    encode_function(fn, callees) if return_models else None))
    log.info("models of %d functions in %.2f s, cached in %.2f s (this process: %.2f s of CPU "
             "in all)", len(out), t1 - t0, time.perf_counter() - t1, time.process_time())
    return out


def _known_starts(elf: ElfInfo, index: SymbolIndex) -> set[int]:
    starts = set(index.canonical) | {s for s, _ in elf.fdes if s not in elf.fde_fragments}
    return {a for a in starts - index.fragments if elf.in_exec(a) and not elf.in_plt(a)}


def _build_all(path: str, elf: ElfInfo, index: SymbolIndex, raw: RawCFG,
               mine: set[int] | None) -> list[tuple[FunctionModel, set[int]]]:
    b = Builder(path, elf, index, raw)
    known = _known_starts(elf, index)
    return [b.function(a) for a in b.functions_present()
            if mine is None or a in mine or a not in known]


def _recover_all(elf: ElfInfo, index: SymbolIndex, cache: CfgCache, cdir: str,
                 need_models: bool = True):
    """Whole-binary recovery: every function's model (None unless ``need_models``), cached,
    and the summary."""
    from wcetfit.static.cfgcache import decode_function

    elf = with_fdes(elf)
    starts = sorted(_known_starts(elf, index))
    jobs = _jobs(len(starts))
    t0 = time.perf_counter()
    summaries: dict[int, FunctionSummary] = {}
    models: dict[int, FunctionModel] = {}
    warned: list[tuple[str, str]] = []
    if jobs > 1:
        levels = {n: logging.getLogger(n).getEffectiveLevel()
                  for n in ("wcetfit", "angr", "cle", "pyvex", "claripy")}
        groups = _split(starts, jobs)
        log.info("recovering %d function starts in %d processes", len(starts), len(groups))
        root = cache.root if cache.enabled else None
        results = _run_workers([(elf.path, g, levels, root, cdir, need_models) for g in groups])
        for part in results:
            for summ, warnings, unresolved, enc in part:
                if summ.address in summaries:      # a call target two groups both reached
                    continue
                summaries[summ.address] = summ
                if warnings:
                    warned.append((summ.name, _addrs(unresolved)))
                    for w in warnings:
                        log.info("%s", w)
                if need_models and enc is not None:
                    models[summ.address] = decode_function(enc)[0]
    else:
        raw = descent.recover(elf.path, starts, elf, index)
        for fn, callees in _build_all(elf.path, elf, index, raw, None):
            cache.put_function(cdir, fn, callees, replace=False)
            summaries[fn.address] = summary_of(fn)
            models[fn.address] = fn
            if fn.warnings:
                warned.append((fn.name, _addrs(fn.unresolved_jumps)))
                for w in fn.warnings:
                    log.info("%s", w)
    log.info("%d functions modelled in %.2f s", len(summaries), time.perf_counter() - t0)
    summ_list = [summaries[a] for a in sorted(summaries)]
    cache.put_summary(cdir, summ_list, warned)
    _warn_whole_binary(elf.path, warned)
    return ({a: models[a] for a in sorted(models)} if need_models else None), summ_list


def _addrs(unresolved) -> str:
    return ", ".join(f"{a:#x}" for a in unresolved)


def _warn_whole_binary(path: str, warned: list[tuple[str, str | bool]]) -> None:
    """Every function whose model is incomplete, with the instructions, in one message
    (other warnings, common in a system library, as a count: --function shows them)."""
    if warned:
        unresolved = [(n, u) for n, u in warned if u]
        if unresolved:
            log.warning("%d function(s) of %s have indirect jumps that are not modelled "
                        "(table-shaped, the table unread): %s", len(unresolved), path,
                        "; ".join(f"{n} at {u}" if isinstance(u, str) else n
                                  for n, u in unresolved))
        rest = len(warned) - len(unresolved)
        if rest:
            log.warning("%d other function(s) of %s have warnings, e.g. %s; model one with "
                        "--function to see them", rest, path,
                        next(n for n, u in warned if not u))
