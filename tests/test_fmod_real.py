"""libm's ``fmod`` as a new user meets it: ``wcetfit init`` writes the inputs, the
search looks for the slow ones.

glibc's ``fmod`` (``__ieee754_fmod``, glibc 2.36) reduces x by y one bit a step: its
loop runs once per binade between them, ilogb(x) − ilogb(y) times, up to about 2,100
(DBL_MAX over a subnormal).  A new user's inputs draw doubles mostly in 1e-3..1e3 and a
twentieth over the whole exponent range, so a difference above 1,500 needs both
arguments from that twentieth and at opposite ends: about one input in 2,000.  The
search must get there from the generated inputs; the truth is the arguments' binade
difference (``math.frexp``), not the model.  Timed in a C loop on fresh arguments (one
session), DBL_MAX over random subnormals took 16,700 ticks at the median, over the whole
loop; 1e3 over 1e-3 (a difference of 20) about 100.

Skips, saying so, when libm or its ``fmod`` is absent."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")


def _has_fmod() -> bool:
    import subprocess
    if not LIBM.exists():
        return False
    out = subprocess.run(["nm", "-D", str(LIBM)], capture_output=True, text=True).stdout
    return re.search(r"\bfmod\b", out) is not None


def _binades(x: float, y: float) -> int:
    """ilogb(x) − ilogb(y): the reduction loop's iterations (0 when |x| < |y| or either
    is zero, infinite or NaN: fmod returns at once)."""
    if not (math.isfinite(x) and math.isfinite(y)) or x == 0 or y == 0:
        return 0
    return max(0, math.frexp(x)[1] - math.frexp(y)[1])


@pytest.mark.slow
@pytest.mark.skipif(not _has_fmod(), reason="libm.so.6 with fmod absent: the search's "
                    "rare slow input is checked on a C sample only (tests/test_search.py)")
def test_search_finds_fmods_distant_binades_from_the_inputs_init_writes(tmp_path):
    from smalltarget import measured_for_search
    from wcetfit.cli import main
    from wcetfit.search.engine import SearchOptions
    from wcetfit.search.workflow import run_search

    header = tmp_path / "fmod.h"
    header.write_text("double fmod(double x, double y);\n")
    d = tmp_path / "fmod"
    assert main(["init", str(d), "--binary", str(LIBM), "--function", "fmod",
                 "--header", str(header)]) == 0
    toml = (d / "wcetfit.toml").read_text()
    toml = re.sub(r"(?m)^inputs = \d+", "inputs = 200", toml)
    toml = re.sub(r"(?m)^repeats = \d+", "repeats = 3", toml)
    (d / "wcetfit.toml").write_text(toml + "\n[search]\nbudget = 0\n")

    s, norm, arguments = measured_for_search(d, "fmod")

    def binades(seq) -> int:
        x, y = arguments(seq)
        return _binades(float(x), float(y))

    measured = max(binades(norm.record(i)) for i in range(200))
    options = SearchOptions(budget=400, timed=4, timed_budget=0)
    found = run_search(s, "fmod", options)
    rnd = run_search(s, "fmod", SearchOptions(budget=400, timed=4, timed_budget=0,
                                              strategy="random"), keep=False)
    best_found = max(binades(c.sequence) for c in found.outcome.best)
    best_random = max(binades(c.sequence) for c in rnd.outcome.best)
    print(f"fmod binades: measured {measured}, search {best_found}, random {best_random}")
    assert measured < 1_500 and best_random < 1_500
    assert best_found > 1_800
