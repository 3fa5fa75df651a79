"""Multi-function library code (issue #15): real library functions that call eight or
more functions of their own library, analysed as a new user would.

Targets (made here, in a scratch folder): zlib's ``uncompress`` (inflate, inflate_fast,
inflate_table, adler32, updatewindow … ; its inputs are the search bench's: 1–4,096
random bytes over an alphabet of 2–256 symbols, deflated at levels 1–9) and libbz2's
``BZ2_bzBuffToBuffDecompress`` (BZ2_bzDecompressInit, BZ2_bzDecompress, BZ2_decompress,
BZ2_hbCreateDecodeTables, unRLE_obuf_to_output_FAST, BZ2_indexIntoF … ; 1–4,096 bytes
compressed by Python's bz2 at block size 1–9) and liblzma's ``lzma_stream_buffer_decode``
(1–2,048 bytes in .xz streams: its decoders called through pointers).  300 inputs × 10
repeats, as issue #15
asks.  Per target, each figure against a reference measured in the same run:

* ``multi.<t>.analyze_wall_time``: count + time + fit + WCET of the 300 × 10 (goal
  <= 60 s; the static model is cached by an earlier analysis of the same library, as
  in a user's second run, and is timed apart as ``static_model_time``);
* ``multi.<t>.heldout_median_rel_error`` / ``..._p95_rel_error``: k-fold over inputs
  per timed call (goal <= 5 % / <= 20 %);
* ``multi.<t>.bound_over_max_observed``: the bound (point + margin, with the
  dispersion factors) over the slowest call of 1,000 fresh inputs (another seed)
  timed in the same session, preempted calls rejected as bench.samples does (goal
  <= 2) and ``bound_covers_all`` (>= every such call);
* ``multi.<t>.fresh_analyses_ratio``: a second analysis in a fresh store (its own
  count and timing runs of the same 300 inputs): the larger bound over the smaller
  (goal <= 1.1).

With ``--activations`` (not part of ``make bench`` yet): the first analysis only, with
per-activation rows (``multi.<t>.act.*``: analyze time with the activation run, the root's
held-out error from the activation-fitted costs, per function its activations' held-out
error, the bound over the slowest of 1,000 fresh calls).

Run alone: ``python -m bench.multi [--activations] [target ...]``.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from bench.figures import fig

FRESH_INPUTS = 1000
FRESH_SEED = 1001
INPUTS = 300
REPEATS = 10

ZLIB = "/lib/x86_64-linux-gnu/libz.so.1"
BZ2 = "/lib/x86_64-linux-gnu/libbz2.so.1.0"
LZMA = "/lib/x86_64-linux-gnu/liblzma.so.5"

TARGETS = {
    # name: (binary, function, prototype, inputs.py body)
    "zlib_uncompress": (ZLIB, "uncompress",
                        "int uncompress(unsigned char *dest, unsigned long *destLen, "
                        "const unsigned char *source, unsigned long sourceLen);", """
        import zlib

        def generate(ctx):
            n = int(ctx.rng.integers(1, 4097))
            alphabet = int(ctx.rng.integers(2, 257))
            raw = ctx.rng.integers(0, alphabet, n).astype("uint8").tobytes()
            comp = zlib.compress(raw, int(ctx.rng.integers(1, 10)))
            dest = ctx.ffi.new("unsigned char[]", n)
            dest_len = ctx.ffi.new("unsigned long *", n)
            src = ctx.ffi.new("unsigned char[]", comp)
            return (dest, dest_len, src, len(comp))
        """),
    "bz2_buff_decompress": (BZ2, "BZ2_bzBuffToBuffDecompress",
                            "int BZ2_bzBuffToBuffDecompress(char *dest, unsigned int *destLen, "
                            "char *source, unsigned int sourceLen, int small, int verbosity);",
                            """
        import bz2

        def generate(ctx):
            n = int(ctx.rng.integers(1, 4097))
            alphabet = int(ctx.rng.integers(2, 257))
            raw = ctx.rng.integers(0, alphabet, n).astype("uint8").tobytes()
            comp = bz2.compress(raw, int(ctx.rng.integers(1, 10)))
            dest = ctx.ffi.new("char[]", n)
            dest_len = ctx.ffi.new("unsigned int *", n)
            src = ctx.ffi.new("char[]", comp)
            return (dest, dest_len, src, len(comp), 0, 0)
        """),
    # the stream, block, LZ and LZMA decoders behind one call, each reached only through
    # a next.code pointer (the per-call-site program follows them to the targets seen)
    "lzma_stream_buffer_decode": (LZMA, "lzma_stream_buffer_decode",
                                  "int lzma_stream_buffer_decode(uint64_t *memlimit, "
                                  "uint32_t flags, const void *allocator, const uint8_t *in, "
                                  "size_t *in_pos, size_t in_size, uint8_t *out, "
                                  "size_t *out_pos, size_t out_size);", """
        import lzma

        def generate(ctx):
            ffi = ctx.ffi
            n = int(ctx.rng.integers(1, 2049))
            alphabet = int(ctx.rng.integers(2, 257))
            raw = ctx.rng.integers(0, alphabet, n).astype("uint8").tobytes()
            data = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)
            return (ffi.new("uint64_t *", 2**64 - 1), 0, ffi.NULL,
                    ffi.from_buffer("uint8_t[]", bytearray(data)), ffi.new("size_t *", 0),
                    len(data), ffi.new("uint8_t[]", n), ffi.new("size_t *", 0), n)
        """),
}


def make_target(name: str, where: str) -> str | None:
    """The target folder of ``name`` under ``where`` (None: the library is absent)."""
    binary, function, prototype, body = TARGETS[name]
    if not os.path.exists(binary):
        return None
    d = Path(where) / name
    d.mkdir(parents=True)
    (d / "inputs.py").write_text(textwrap.dedent(body).lstrip())
    (d / "wcetfit.toml").write_text(
        f'binary = "{binary}"\nfunctions = ["{function}"]\nprototype = "{prototype}"\n'
        f'inputs = "inputs.py"\n[measure]\ninputs = {INPUTS}\nrepeats = {REPEATS}\n')
    return str(d)


def analyse(target_dir: str, stages: dict | None = None, *,  # type: ignore[no-untyped-def]
            activations: bool = False):
    """(session, analysis, seconds of count + time [+ activations] + fit + WCET) in the
    target's store; ``stages`` receives the seconds of each.  ``activations``: the count run
    keeps its trace and every activation of the root's own functions is timed too
    (``[timing] activations = true``), so the fit takes per-activation rows."""
    from wcetfit import pipeline
    from wcetfit.timing.run import run_times

    s = pipeline.open_session(target_dir)
    root = s.target.functions[0]
    t0 = time.perf_counter()
    # as `wcetfit analyze` counts: the callees reached through pointers too (zlib's
    # zalloc, liblzma's decoders behind next.code)
    s = pipeline.count_following_indirect(s, [root], trace=activations)
    t1 = time.perf_counter()
    run_times(s.target, s.store, s.roots)
    t2 = time.perf_counter()
    if activations:
        pipeline.activation_step(s, root, required=True)
    t25 = time.perf_counter()
    a = pipeline.analyze_stage(s, root, *pipeline.stored_measurements(s, root))
    t3 = time.perf_counter()
    if stages is not None:
        stages.update(count=round(t1 - t0, 2), time=round(t2 - t1, 2),
                      fit_wcet_report=round(t3 - t25, 2))
        if activations:
            stages["activations"] = round(t25 - t2, 2)
    return s, a, t3 - t0


def fresh_slowest(target_dir: str, root: str, quantum: float | None):  # type: ignore[no-untyped-def]
    """The slowest call of ``FRESH_INPUTS`` fresh inputs (another seed) timed now, calls the
    fit's repeat rule treats as preempted left out: (ticks, preempted mask, the TimeSet)."""
    from bench.samples import _preempted
    from wcetfit import pipeline
    from wcetfit.timing.run import run_times

    fresh = pipeline.open_session(target_dir, seed=FRESH_SEED, inputs=FRESH_INPUTS)
    ft = run_times(fresh.target, fresh.store, fresh.roots)[root]
    fresh.store.lock.release()
    from wcetfit.timing.speed import call_positions
    pre = _preempted(ft.ticks, quantum,
                     call_positions(ft.indices, ft.ticks.shape[1], ft.environment))
    return float(np.nanmax(np.where(pre, np.nan, ft.ticks))), pre, ft


def _bound_or_why(figure: str, a) -> tuple[list[str], dict | None]:  # type: ignore[no-untyped-def]
    """The codes of the analysis' fit warnings, and (when it has no bound) the figure
    ``figure`` that says why."""
    from wcetfit.wcet.result import WcetResult

    codes = sorted({w.code for w in getattr(a.fit, "fit_warnings", ())})
    if isinstance(a.wcet, WcetResult):
        return codes, None
    return codes, fig(figure, None, "x", "<= 2", False, error=str(a.wcet), fit_warnings=codes)


def activation_figures(name: str, where: str) -> list[dict]:
    """The same target analysed with per-activation rows (``--activations``): analyze time,
    the root's held-out error from the activation-fitted costs, per function the held-out
    error of its activations, and the bound over the slowest of 1,000 fresh calls."""
    from wcetfit import pipeline

    first = make_target(name, os.path.join(where, "act"))
    if first is None:
        return [fig(f"multi.{name}.act", None, "", note=f"library absent: {TARGETS[name][0]}")]
    s0 = pipeline.open_session(first)        # the static model, cached
    root = s0.target.functions[0]
    s0.store.lock.release()
    stages: dict = {}
    s, a, wall = analyse(first, stages, activations=True)
    act = a.fit.activations
    if act is None:
        return [fig(f"multi.{name}.act", None, "", ok=False, note="no activation rows used")]
    ch = act.check
    per = {n: [None if v is None else round(100 * v, 2) for v in f[:2]] + [f[2]]
           for n, f in act.heldout().items()}
    figs = [fig(f"multi.{name}.act.analyze_wall_time", round(wall, 2), "s", "<= 60",
                wall <= 60, stages=stages),
            fig(f"multi.{name}.act.heldout_median_rel_error",
                None if ch is None or ch.heldout_median_rel_error is None
                else round(100 * ch.heldout_median_rel_error, 3), "%", "<= 5",
                ch is not None and (ch.heldout_median_rel_error or 1) <= 0.05,
                p95=None if ch is None or ch.heldout_p95_rel_error is None
                else round(100 * ch.heldout_p95_rel_error, 3),
                per_function_heldout_median_p95_pct_activations=per,
                whole_call_functions=[w[0] for w in act.whole_call_functions])]
    codes, failed = _bound_or_why(f"multi.{name}.act.bound_over_max_observed", a)
    if failed is not None:
        return figs + [failed]
    bound = float(a.wcet.upper_ticks)
    s.store.lock.release()
    max_obs, _pre, _ft = fresh_slowest(first, root, a.fit.quantum_ticks)
    figs.append(fig(f"multi.{name}.act.bound_over_max_observed", round(bound / max_obs, 3),
                    "x", "<= 2", 1.0 <= bound / max_obs <= 2.0, covers=bool(bound >= max_obs),
                    point=round(float(a.wcet.bound_ticks)), margin=a.wcet.margin_ticks,
                    dispersion_factors=dict(a.wcet.dispersion_factors), fit_warnings=codes))
    return figs


def target_figures(name: str, where: str) -> list[dict]:
    from wcetfit import pipeline
    from wcetfit.wcet.result import WcetResult

    first = make_target(name, os.path.join(where, "a"))
    if first is None:
        return [fig(f"multi.{name}", None, "", note=f"library absent: {TARGETS[name][0]}")]
    second = make_target(name, os.path.join(where, "b"))
    t0 = time.perf_counter()
    s0 = pipeline.open_session(first)        # the static model, cached for the analyses
    static_s = time.perf_counter() - t0
    root = s0.target.functions[0]
    s0.store.lock.release()
    stages: dict = {}
    s, a, wall = analyse(first, stages)
    figs = [fig(f"multi.{name}.analyze_wall_time", round(wall, 2), "s", "<= 60", wall <= 60,
                stages=stages,
                inputs=INPUTS, repeats=REPEATS, static_model_time=round(static_s, 2),
                functions=len(a.functions), callees=len(a.functions) - 1,
                blocks=len(a.fit.blocks), rank=a.fit.rank)]
    v = a.fit.validation
    figs += [fig(f"multi.{name}.heldout_median_rel_error", round(100 * v.median_rel_error, 3),
                 "%", "<= 5", v.median_rel_error <= 0.05),
             fig(f"multi.{name}.heldout_p95_rel_error", round(100 * v.p95_rel_error, 3), "%",
                 "<= 20", v.p95_rel_error <= 0.20)]
    codes, failed = _bound_or_why(f"multi.{name}.bound_over_max_observed", a)
    if failed is not None:
        return figs + [failed]
    bound = float(a.wcet.upper_ticks)
    slowest_training = float(np.nanmax(np.nanmedian(a.system.ticks, axis=1)))
    max_obs, pre, ft = fresh_slowest(first, root, a.fit.quantum_ticks)
    figs += [
        fig(f"multi.{name}.bound_covers_all", bool(bound >= max_obs), "", "yes",
            bound >= max_obs, bound_ticks=round(bound), max_observed_fresh=round(max_obs),
            fresh_inputs=int(ft.ticks.shape[0]), preempted_rejected=int(pre.sum()),
            failures=len(ft.failures)),
        fig(f"multi.{name}.bound_over_max_observed", round(bound / max_obs, 3), "x", "<= 2",
            1.0 <= bound / max_obs <= 2.0,
            reference=f"slowest call of {FRESH_INPUTS} fresh inputs, same session",
            point=round(float(a.wcet.bound_ticks)), margin=a.wcet.margin_ticks,
            dispersion_factors=dict(a.wcet.dispersion_factors),
            over_slowest_training_median=round(bound / slowest_training, 3),
            fit_warnings=codes, warnings=len(a.wcet.warnings)),
    ]
    s.store.lock.release()
    _, b, wall_b = analyse(second)
    if isinstance(b.wcet, WcetResult):
        other = float(b.wcet.upper_ticks)
        ratio = max(bound, other) / min(bound, other)
        figs.append(fig(f"multi.{name}.fresh_analyses_ratio", round(ratio, 3), "x", "<= 1.1",
                        ratio <= 1.1, reference="the first analysis, same run",
                        bounds=[round(bound), round(other)], second_wall_time=round(wall_b, 2),
                        points=[round(float(a.wcet.bound_ticks)),
                                round(float(b.wcet.bound_ticks))]))
    else:
        figs.append(fig(f"multi.{name}.fresh_analyses_ratio", None, "x", "<= 1.1", False,
                        error=str(b.wcet)))
    return figs


def run(only: list[str] | None = None, *, activations: bool = False) -> list[dict]:
    figs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="wcetfit-multi-") as tmp:
        for name in only or list(TARGETS):
            try:
                figs.extend((activation_figures if activations else target_figures)(
                    name, os.path.join(tmp, name)))
            except Exception as exc:     # one target's failure is a figure, not the end
                figs.append(fig(f"multi.{name}", None, "", ok=False,
                                note=f"{type(exc).__name__}: {exc}"))
    return figs


if __name__ == "__main__":
    import json
    import sys
    args = [a for a in sys.argv[1:] if a != "--activations"]
    for f in run(args or None, activations="--activations" in sys.argv[1:]):
        print(json.dumps(f, default=str))
