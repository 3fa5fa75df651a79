"""Candidates of the search: made valid, counted natively, timed — each in a child.

A candidate is a choice sequence (:mod:`wcetfit.search.choices`).  Before it is counted
it is *normalised* here, in the analyzer's process: ``generate`` runs on it once with a
recording generator, so what is kept is the record of the draws it really took (clipped
to their ranges, fresh where the shape changed), which replays to the same input exactly.
A ``generate`` that raises on a candidate rejects that candidate only.

Counting and timing reuse the count run's and the timing run's workers
(:mod:`wcetfit.count.run`, :mod:`wcetfit.timing.run`) with the candidates' replayed draws
in place of the inputs' own generators, in child processes (:mod:`wcetfit.isolate`): a
candidate that crashes or hangs the function, or fails the count run's checks (the
differential check, flow conservation), is reported with its arguments and the reason,
and left out; the search goes on.  A failed check stops the count run on a generated
input, but a candidate is the search's own guess towards the ends of ``generate``'s
ranges, where inputs ``generate`` makes rarely lie (an empty buffer, say); one the
function does not accept (it reads past the buffer, and what lies there differs between
the copy's process and the original's) says nothing against what was measured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from wcetfit.errors import InputsError, SelfCheckError, WcetfitError
from wcetfit.isolate import InputFailure, run_isolated
from wcetfit.numbering import SEARCH_BASE, input_label
from wcetfit.search.choices import ChoiceRng, ChoiceSequence
from wcetfit.target import Target, generate_input, input_rng

log = logging.getLogger(__name__)


class Replay:
    """``inputs(generate, target, ffi, function, index)`` for the workers: the input of a
    candidate number is its choice sequence replayed."""

    def __init__(self, sequences: Mapping[int, ChoiceSequence]):
        self.sequences = dict(sequences)

    def __call__(self, generate: Callable, target: Target, ffi: Any, function: str,
                 index: int) -> tuple:
        seq = self.sequences[index]
        rng = ChoiceRng(input_rng(seq.base_seed(target.measure.seed), seq.index), seq.choices)
        return generate_input(generate, target, ffi, function, index, rng=rng,
                              ctx_index=seq.index)


@dataclass
class Normaliser:
    """Runs ``generate`` in this process to record (or re-record) choice sequences."""

    target: Target
    function: str

    def __post_init__(self) -> None:
        from wcetfit.target import load_inputs_module
        from wcetfit.timing.thunk import build_harness

        self._ffi = build_harness(self.target.prototype, self.target.cdef).ffi
        self._generate = load_inputs_module(self.target)

    def record(self, index: int) -> ChoiceSequence:
        """The draws of the target's own input ``index``."""
        return self.normalise(ChoiceSequence(index, ()))

    def normalise(self, seq: ChoiceSequence) -> ChoiceSequence | None:
        """The effective draws of ``seq`` (None when ``generate`` rejects it)."""
        rng = ChoiceRng(input_rng(seq.base_seed(self.target.measure.seed), seq.index),
                        seq.choices)
        try:
            generate_input(self._generate, self.target, self._ffi, self.function, seq.index,
                           rng=rng, ctx_index=seq.index)
        except InputsError as exc:
            log.debug("candidate rejected by generate(): %s", exc)
            return None
        return ChoiceSequence(seq.index, tuple(rng.recorded), seq.seed)


def uncounted_callees(target: Target, model: Any, root: str) -> dict[str, list[str]]:
    """The callees the count run leaves uncounted (decided once per search)."""
    from wcetfit.count.run import relocatable_closures

    return {r: list(skipped)
            for r, (_fns, skipped) in relocatable_closures(target, model, [root]).items()}


class CandidateRejected(WcetfitError):
    """A candidate failed in the count run's worker (a check, or arguments the harness
    refuses).  Internal: it carries the candidate's number from the worker to
    :func:`count_candidates`, which leaves that candidate out; never raised to the user."""

    def __init__(self, index: int, kind: str, reason: str):
        super().__init__(index, kind, reason)      # args: what pickling rebuilds it from
        self.index, self.kind, self.reason = index, kind, reason

    def __str__(self) -> str:
        return f"{input_label(self.index)}: {self.kind}: {self.reason}"


# Said with a candidate that failed the count run's checks, which every measured input
# passed: what such a failure most likely means, and what to do if generate() is at fault.
CHECK_HINT = ("left out: most likely the function reads memory this input's arguments do "
              "not own (past a buffer, for a length it does not accept), which differs "
              "between the copy's process and the original's; if generate() can make this "
              "input too, narrow it to the inputs the function accepts")


class _Rejecting:
    """A count worker whose candidates' failures are theirs, not the run's.

    The count run's worker raises on a failed check, which stops the whole run; here the
    error is turned into :class:`CandidateRejected` naming the candidate, and the worker
    still stops (a call that failed its checks may have left the process unfit, as a
    crash would): :func:`count_candidates` starts a fresh one at the next candidate."""

    def __init__(self, worker: Any):
        self.worker = worker

    def run(self, index: int, start: Callable[[str], None]) -> Any:
        try:
            return self.worker.run(index, start)
        except SelfCheckError as exc:
            raise CandidateRejected(index, "check", f"{exc}; {CHECK_HINT}") from None
        except InputsError as exc:
            raise CandidateRejected(index, "arguments", f"{exc}; left out") from None


def count_candidates(target: Target, model: Any, root: str,
                     sequences: Mapping[int, ChoiceSequence],
                     uncounted: Mapping[str, list[str]] | None = None,
                     inputs: Callable[..., tuple] | None = None
                     ) -> tuple[dict[int, dict[str, np.ndarray]], list[InputFailure]]:
    """Block counts (function name → counts in its model's block order) per candidate,
    and the candidates left out (crashed, hung, failed a check: each named with its
    arguments and the reason, and logged).  ``inputs`` builds a key's arguments
    (default: its choice sequence replayed; the keys of ``sequences`` are what is
    counted)."""
    from wcetfit.count.run import _CountWorker

    if uncounted is None:
        uncounted = uncounted_callees(target, model, root)
    out: dict[int, dict[str, np.ndarray]] = {}
    failures: list[InputFailure] = []

    def on_result(key: int, result: dict[str, Any]) -> None:
        counts = result[root][0]    # (counts, trace, indirect targets, return)
        out[key] = counts

    replay = inputs or Replay(sequences)
    pending = sorted(sequences)
    while pending:
        try:
            run = run_isolated(lambda: _Rejecting(_CountWorker(target, model, [root], False,
                                                               uncounted, inputs=replay)),
                               pending, timeout=3 * target.measure.timeout,
                               per_call=target.measure.timeout,
                               on_result=on_result, on_failure=failures.append)
        except CandidateRejected as exc:
            failures.append(_rejected(target, root, exc, replay))
            # the worker took the candidates in order: those before it are counted or failed
            pending = [k for k in pending if k > exc.index]
            continue
        if run.interrupted:
            raise KeyboardInterrupt
        break
    return out, failures


def _rejected(target: Target, root: str, exc: CandidateRejected,
              inputs: Callable[..., tuple]) -> InputFailure:
    """The failure record of a rejected candidate, logged like a crash (its worker is
    gone with the summary it sent: the arguments are rebuilt here)."""
    # (a reached witness is built by its own inputs, not by generate(): its arguments)
    summary = (describe_input(target, root, exc.index, getattr(inputs, "sequences", None),
                              inputs=None if isinstance(inputs, Replay) else inputs)
               or "(arguments not rebuilt)")
    failure = InputFailure(exc.index, exc.kind, exc.reason, summary)
    log.warning("%s", failure.describe())
    return failure


def time_candidates(target: Target, root: str, address: int, method: str,
                    sequences: Mapping[int, ChoiceSequence], repeats: int,
                    inputs: Callable[..., tuple] | None = None, *, wait: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, list[InputFailure]]:
    """(keys, ticks[candidate, repeat], failures): timed in passes like the timing run
    (:func:`wcetfit.timing.run.run_times`), so a slow period of the machine hits single
    repeats of many candidates rather than every repeat of one; under the machine-wide
    timing lock like it (``wait``: False refuses with one error when another run holds
    it), or another target's timing run would disturb these ticks and they its."""
    from wcetfit.locks import timing_lock
    from wcetfit.timing.run import _TimingWorker

    with timing_lock(target.directory, wait=wait):
        return _time_candidates(target, root, address, method, sequences, repeats, inputs,
                                _TimingWorker)


def _time_candidates(target: Target, root: str, address: int, method: str,
                     sequences: Mapping[int, ChoiceSequence], repeats: int,
                     inputs: Callable[..., tuple] | None, _TimingWorker: Any
                     ) -> tuple[np.ndarray, np.ndarray, list[InputFailure]]:

    from wcetfit.timing.speed import pass_start

    keys = np.array(sorted(sequences), dtype=np.int64)
    pos = {int(k): i for i, k in enumerate(keys)}
    ticks = np.full((len(keys), repeats), np.nan)
    failures: list[InputFailure] = []
    failed: set[int] = set()
    replay = inputs or Replay(sequences)
    m = target.measure
    for r in range(repeats):
        def on_result(key: int, result: dict[str, tuple[np.ndarray, int]], r: int = r) -> None:
            row, migrated = result[root][:2]
            if not migrated:
                ticks[pos[key], r] = row[0]

        def on_failure(f: InputFailure) -> None:
            failures.append(f)
            failed.add(f.index)

        # each pass starts at another candidate, as the timing run's passes do
        start = pass_start(len(keys), repeats, r)
        todo = [int(k) for k in (*keys[start:], *keys[:start]) if int(k) not in failed]
        run = run_isolated(lambda: _TimingWorker(target, [(root, address)], method, repeats=1,
                                                 inputs=replay),
                           todo, timeout=m.timeout * (m.warmup + 2), per_call=m.timeout,
                           on_result=on_result,
                           on_failure=on_failure)
        if run.interrupted:
            raise KeyboardInterrupt
    return keys, ticks, failures


def column_vector(columns: Sequence[tuple[str, int]], blocks_of: Mapping[str, Sequence[int]],
                  counts: Mapping[str, np.ndarray]) -> np.ndarray:
    """One candidate's counts in the fit's column order ((function, block) pairs)."""
    where = {(fn, a): i for fn, blocks in blocks_of.items() for i, a in enumerate(blocks)}
    vec = np.zeros(len(columns), dtype=np.int64)
    for c, (fn, a) in enumerate(columns):
        if fn in counts:
            vec[c] = counts[fn][where[(fn, a)]]
    return vec


def describe_input(target: Target, function: str, index: int,
                   sequences: Mapping[int, ChoiceSequence] | None = None, *,
                   inputs: Callable[..., tuple] | None = None) -> str | None:
    """A short summary of input ``index``'s arguments (a searched input's from its stored
    draws), or None when ``generate`` cannot rebuild it here.  Where ``generate`` made
    arguments with ``ctx.lib``, whose results are zeros outside the measuring workers,
    the draws it took stand for them.  ``inputs``: what builds the key's arguments where
    generate() does not (a reached input's witness, wcetfit.search.witness.ReachInputs)."""
    from wcetfit.target import describe_args, library_functions, load_inputs_module
    from wcetfit.timing.thunk import build_harness

    seq = (sequences or {}).get(index) or ChoiceSequence(index, ())
    try:
        ffi = build_harness(target.prototype, target.cdef).ffi
        lib = library_functions(target)
        before = lib.placeholders
        rng = ChoiceRng(input_rng(seq.base_seed(target.measure.seed), seq.index), seq.choices)
        args = (inputs(load_inputs_module(target), target, ffi, function, index)
                if inputs is not None else
                generate_input(load_inputs_module(target), target, ffi, function, index,
                               rng=rng, ctx_index=seq.index))
        if lib.placeholders > before:
            # libzstd's decompressor, its frame made by ZSTD_compress through ctx.lib:
            # "(unsigned char[2779] {0, 0, 0, 0, 0, 0, …}, 2779, …)" said nothing of the
            # input; its draws (the length, the level, the first bytes) do.  First, where a
            # one-line summary cut at its width still shows it (libpcre2's "NULL struct
            # pcre2_real_code_8 *" read as a match on a NULL pattern)
            return ("(made with ctx.lib, only where measured; generate() drew "
                    + draws_text(rng.recorded) + ")")
        return describe_args(ffi, args)
    except WcetfitError as exc:
        log.info("input %d: arguments not described: %s", index, exc)
        return None


def draws_text(choices: Sequence[Any], limit: int = 6, items: int = 4) -> str:
    """The draws of a choice sequence as a person reads them: a number as itself, an
    array or bytes by its length and first few values; the first ``limit`` draws."""
    def one(c: Any) -> str:
        v = c.value
        if isinstance(v, (bytes, bytearray)):
            head, n, name = list(v[:items]), len(v), "bytes"
        elif np.ndim(v) == 0:
            x = v.item() if hasattr(v, "item") else v
            return f"{x:.6g}" if isinstance(x, float) else repr(x)
        else:
            flat = np.ravel(v)
            head, n, name = [x.item() for x in flat[:items]], flat.size, c.method
        shown = ", ".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in head)
        return f"{name}[{n}] {{{shown}{', …' if n > items else ''}}}"

    if not choices:
        return "nothing from ctx.rng"
    return ", ".join(one(c) for c in choices[:limit]) + (", …" if len(choices) > limit else "")
