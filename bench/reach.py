"""Coverage before / after the angr step (issue #16): blocks executed, per target.

Per target (samples in a scratch copy; system-library functions in targets made here),
after the count and timing runs of its generated inputs (``INPUTS`` of them, fewer than
the samples' own settings: the figure is about the blocks random inputs miss):

* ``reach.<t>.executed``: blocks of the measured function and its counted callees that
  any input executed, after ``wcetfit reach`` (every reached input counted natively: a
  block counts only when the count run executed it); ``before``, ``total`` beside it;
* ``reach.<t>.verdicts``: how many of the unexecuted blocks were reached, proven
  unreachable from the entry, not found within ``BUDGET`` seconds; and the groups the
  inputs left unseparated that a reached input separated.

Run alone: ``python -m bench.reach [target ...]``.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import time
from pathlib import Path

from bench.figures import SAMPLES, fig
from bench.samples import _scratch

BUDGET = 30.0          # seconds of exploration per function
INPUTS = 100
REPEATS = 5

ZLIB = "/lib/x86_64-linux-gnu/libz.so.1"
_CHECKSUM = """
def generate(ctx):
    n = int(ctx.rng.integers(0, 6001))
    buf = ctx.ffi.new("unsigned char[]", max(n, 1))
    ctx.ffi.memmove(buf, ctx.rng.bytes(max(n, 1)), max(n, 1))
    return (int(ctx.rng.integers(0, 2**32)), buf, n)
"""
_LIBRARY_TARGETS = {
    # name: (binary, functions, prototype, inputs.py body)
    "zlib_adler32_z": (ZLIB, ["adler32_z"],
                       "unsigned long adler32_z(unsigned long adler, const unsigned char *buf,"
                       " size_t len);", _CHECKSUM),
    "zlib_crc32_z": (ZLIB, ["crc32_z"],
                     "unsigned long crc32_z(unsigned long crc, const unsigned char *buf, "
                     "size_t len);", _CHECKSUM),
    # integers only; its branches test len2's sign and the modular reductions
    "zlib_adler32_combine": (ZLIB, ["adler32_combine"],
                             "unsigned long adler32_combine(unsigned long adler1, "
                             "unsigned long adler2, long len2);", """
def generate(ctx):
    return (int(ctx.rng.integers(0, 2**32)), int(ctx.rng.integers(0, 2**32)),
            int(ctx.rng.integers(-1000, 2**31)))
"""),
}


def _library_target(name: str, tmp: str) -> str | None:
    binary, functions, prototype, body = _LIBRARY_TARGETS[name]
    if not os.path.exists(binary):
        return None
    d = Path(tmp) / name
    d.mkdir()
    (d / "inputs.py").write_text(textwrap.dedent(body))
    (d / "wcetfit.toml").write_text(
        f'binary = "{binary}"\nfunctions = {functions!r}\nprototype = "{prototype}"\n'
        'inputs = "inputs.py"\n[measure]\nseed = 1\n[search]\nbudget = 0\n'.replace("'", '"'))
    return str(d)


def target_figures(name: str, target_dir: str) -> list[dict]:
    from wcetfit import pipeline
    from wcetfit.search.reaching import run_reach
    from wcetfit.timing.run import run_times

    s = pipeline.open_session(target_dir, inputs=INPUTS, repeats=REPEATS)
    figs = []
    for root in s.target.functions:
        s = pipeline.count_following_indirect(s, [root])     # as `wcetfit analyze` counts
        run_times(s.target, s.store, {root: s.roots[root]})
        t = time.perf_counter()
        rep = run_reach(s, root, BUDGET)
        took = time.perf_counter() - t
        label = name if len(s.target.functions) == 1 else f"{name}.{root}"
        summ = rep.summary()
        sep = sum(g.status == "separated" for g in rep.groups)
        figs.append(fig(f"reach.{label}.executed", rep.executed_after, "blocks",
                        before=rep.executed_before, total=rep.total_blocks,
                        reference=f"blocks {INPUTS} generated inputs executed",
                        seconds=round(took, 1), skipped=rep.skipped or None))
        figs.append(fig(f"reach.{label}.verdicts", summ.get("reached", 0), "blocks reached",
                        unexecuted=len(rep.blocks),
                        unreachable=summ.get("unreachable", 0),
                        not_found=summ.get("not found", 0),
                        angr_only=summ.get("reached by angr only", 0),
                        groups=len(rep.groups), groups_separated=sep,
                        groups_inseparable=sum(g.status == "inseparable" for g in rep.groups),
                        budget_s=BUDGET, notes=list(rep.notes) or None))
    return figs


def run(only: list[str] | None = None) -> list[dict]:
    figs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in only or SAMPLES + list(_LIBRARY_TARGETS):
            if name in _LIBRARY_TARGETS:
                d = _library_target(name, tmp)
                if d is None:
                    figs.append(fig(f"reach.{name}", None, "", note="library absent"))
                    continue
            else:
                d = _scratch(name, tmp)
            try:
                figs.extend(target_figures(name, d))
            except Exception as exc:     # one target's failure is a figure, not the end
                figs.append(fig(f"reach.{name}", None, "", ok=False,
                                note=f"{type(exc).__name__}: {exc}"))
    return figs


if __name__ == "__main__":
    import sys
    for f in run(sys.argv[1:] or None):
        print(f)
