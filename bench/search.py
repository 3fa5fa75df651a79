"""The worst-case search against random generation with the same budget (issue #16).

Per target (samples in a scratch copy; system-library functions in targets made here),
after an analysis without search:

* ``search.<t>.predicted_over_random``: the slowest predicted time the search found over
  the slowest one random inputs of ``generate`` found, same budget (goal >= 1: the
  search at least matches random; Groß 2003 saw random reach ~85 % of an evolutionary
  search);
* ``search.<t>.measured_over_inputs``: the slowest timed candidate (median of its
  repeats) over the slowest measured input, same session;
* ``search.<t>.bound_over_slowest``: the WCET bound once the kept candidates joined the
  fit, over the slowest measured input, search included (issue #16's goal <= 1.25).

Run alone: ``python -m bench.search [target ...]``.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import numpy as np

from bench.figures import fig
from bench.samples import _scratch

BUDGET = 500
SAMPLES = ["crc", "isort", "statemachine"]

ZLIB = "/lib/x86_64-linux-gnu/libz.so.1"
LIBM = "/lib/x86_64-linux-gnu/libm.so.6"
# adler32 and crc32 share their inputs: a seed and a buffer of 0..6,000 random bytes
_CHECKSUM_INPUTS = """
def generate(ctx):
    n = int(ctx.rng.integers(0, 6001))
    buf = ctx.ffi.new("unsigned char[]", max(n, 1))
    ctx.ffi.memmove(buf, ctx.rng.bytes(max(n, 1)), max(n, 1))
    return (int(ctx.rng.integers(0, 2**32)), buf, n)
"""
_LIBRARY_TARGETS = {
    # name: (binary, functions, prototype, inputs.py body)
    "zlib_adler32": (ZLIB, ["adler32"],
                     "unsigned long adler32(unsigned long adler, const unsigned char *buf, "
                     "unsigned int len);", _CHECKSUM_INPUTS),
    "zlib_crc32": (ZLIB, ["crc32"],
                   "unsigned long crc32(unsigned long crc, const unsigned char *buf, "
                   "unsigned int len);", _CHECKSUM_INPUTS),
    "zlib_uncompress": (ZLIB, ["uncompress"],
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
    # Bytes drawn as `wcetfit init` draws a buffer (uniform), at every level: its slowest
    # data (few byte values, one of them most often: long match chains that match only
    # part of the way) is what random generation does not make.
    "zlib_compress2": (ZLIB, ["compress2"],
                       "int compress2(unsigned char *dest, unsigned long *destLen, "
                       "const unsigned char *source, unsigned long sourceLen, int level);",
                       """
def generate(ctx):
    n = int(ctx.rng.integers(1, 4097))
    room = n + n // 8 + 64                    # above compressBound(n)
    dest = ctx.ffi.new("unsigned char[]", room)
    dest_len = ctx.ffi.new("unsigned long *", room)
    src = ctx.ffi.new("unsigned char[]", ctx.rng.bytes(n))
    return (dest, dest_len, src, n, int(ctx.rng.integers(-1, 10)))
"""),
    # The doubles `wcetfit init` writes (None: init's own inputs.py).  glibc's fmod loops
    # once per binade between x and y, up to about 2,100 times; init's draws put both
    # arguments at opposite ends of the exponent range about once in 2,000 inputs.
    "libm_fmod": (LIBM, ["fmod"], "double fmod(double x, double y);", None),
}


def _library_target(name: str, tmp: str) -> str | None:
    binary, functions, prototype, body = _LIBRARY_TARGETS[name]
    if not os.path.exists(binary):
        return None
    d = Path(tmp) / name
    if body is None:
        from wcetfit.scaffold.create import create_target
        header = Path(tmp) / f"{name}.h"
        header.write_text(prototype + "\n")
        create_target(str(d), binary, functions[0], str(header))
    else:
        d.mkdir()
        (d / "inputs.py").write_text(textwrap.dedent(body))
    (d / "wcetfit.toml").write_text(
        f'binary = "{binary}"\nfunctions = {functions!r}\nprototype = "{prototype}"\n'
        'inputs = "inputs.py"\n[measure]\ninputs = 300\nrepeats = 10\n[search]\nbudget = 0\n'
        .replace("'", '"'))
    return str(d)


def target_figures(name: str, target_dir: str) -> list[dict]:
    from wcetfit import pipeline
    from wcetfit.search.engine import SearchOptions
    from wcetfit.search.workflow import run_search
    from wcetfit.timing.run import run_times
    from wcetfit.wcet.result import WcetResult

    s = pipeline.open_session(target_dir)
    root = s.target.functions[0]
    # the model with the in-binary targets of indirect calls, as `wcetfit analyze` counts
    s = pipeline.count_following_indirect(s, [root])
    run_times(s.target, s.store, s.roots)
    rnd = run_search(s, root, SearchOptions(budget=BUDGET, strategy="random"), keep=False)
    found = run_search(s, root, SearchOptions(budget=BUDGET))
    best = found.outcome.best[0].predicted_ticks if found.outcome.best else float("nan")
    ref = rnd.outcome.best[0].predicted_ticks if rnd.outcome.best else float("nan")
    figs = [fig(f"search.{name}.predicted_over_random", round(best / ref, 3), "ratio",
                goal=">= 1", ok=best >= ref, reference=f"random, {BUDGET} candidates",
                search_ticks=round(best), random_ticks=round(ref)),
            fig(f"search.{name}.measured_over_inputs",
                round(found.found_max_ticks / found.measured_max_ticks, 3), "ratio",
                reference="slowest measured input (median of its repeats), same session")]
    counts, times = pipeline.stored_measurements(s, root)
    analysis = pipeline.analyze_stage(s, root, counts, times)
    if isinstance(analysis.wcet, WcetResult):
        slowest = float(np.nanmax(np.nanmedian(analysis.system.ticks, axis=1)))
        ratio = analysis.wcet.upper_ticks / slowest
        figs.append(fig(f"search.{name}.bound_over_slowest", round(ratio, 3), "ratio",
                        goal="<= 1.25", ok=ratio <= 1.25,
                        reference="slowest measured input, search included"))
    else:
        figs.append(fig(f"search.{name}.bound_over_slowest", None, "ratio", goal="<= 1.25",
                        ok=False, note=f"no bound: {analysis.wcet}"))
    return figs


def run(only: list[str] | None = None) -> list[dict]:
    figs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in only or SAMPLES + list(_LIBRARY_TARGETS):
            if name in _LIBRARY_TARGETS:
                d = _library_target(name, tmp)
                if d is None:
                    figs.append(fig(f"search.{name}", None, "", note="library absent"))
                    continue
            else:
                d = _scratch(name, tmp)
            try:
                figs.extend(target_figures(name, d))
            except Exception as exc:     # one target's failure is a figure, not the end
                figs.append(fig(f"search.{name}", None, "", ok=False,
                                note=f"{type(exc).__name__}: {exc}"))
    return figs


if __name__ == "__main__":
    import sys
    for f in run(sys.argv[1:] or None):
        print(f)
