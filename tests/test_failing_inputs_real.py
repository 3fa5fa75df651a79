"""A library function that aborts on half of its inputs, as a new user's first target does:
libpng's ``png_get_uint_31`` calls png_error (which aborts, with no png_struct to jump
to) on a value above 2^31 - 1, and init's random bytes make one.

Measured before: the timing run's workers warm up on their first inputs, each met an
aborting one, and after 20 such failures the run stopped saying "the first 20 inputs all
failed the same way, none succeeded" while 28 of 80 inputs ran; the timing run tried
again every input the count run had seen abort; and libpng's "libpng error: …" line,
once per failed call, came between the analyzer's warnings.

Skips, saying so, when the system's libpng is absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LIBPNG = Path("/lib/x86_64-linux-gnu/libpng16.so.16")


@pytest.mark.slow
@pytest.mark.skipif(not LIBPNG.exists(), reason="the system's libpng16.so.16 is absent: "
                    "the warm-up and output rules are checked on a toy worker only "
                    "(tests/test_isolate.py)")
def test_a_function_aborting_on_half_its_inputs_is_measured_on_the_others(tmp_path):
    from smalltarget import write_target
    from wcetfit.measurements import load_counts, load_times, open_store
    from wcetfit.target import load_target
    from wcetfit.timing.run import resolve_method

    built = tmp_path / "built"          # each input generate() builds, by number
    d = write_target(tmp_path / "png", str(LIBPNG), "png_get_uint_31",
                     "unsigned int png_get_uint_31(const void *png_ptr, "
                     "const unsigned char *buf);",
                     f"    open({str(built)!r}, 'a').write(f'{{ctx.index}}\\n')\n"
                     "    data = ctx.rng.integers(0, 256, 4).astype('uint8')\n"
                     "    return (ctx.ffi.NULL, ctx.ffi.from_buffer('unsigned char[]', data))",
                     inputs=60, repeats=3)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "wcetfit", *args, str(d), "--no-wait"],
                              capture_output=True, text=True)

    counted = run("count")
    assert counted.returncode == 0, counted.stderr[-2000:]
    built.unlink()
    timed = run("time")
    assert timed.returncode == 0, timed.stderr[-2000:]
    timed_built = {int(x) for x in built.read_text().split()}
    res = run("analyze")
    assert res.returncode == 0, res.stderr[-2000:]
    outputs = [r.stdout + r.stderr for r in (counted, timed, res)]
    assert not any("Traceback" in o for o in outputs)
    # libpng's own line is summed up once per run that called the function, not printed
    # per call
    assert not any(ln.startswith("libpng error") for o in outputs for ln in o.splitlines())
    said = [ln for ln in counted.stderr.splitlines() if "standard output or error" in ln]
    assert len(said) == 1 and said[0].endswith(
        "the first: libpng error: PNG unsigned integer out of range"), said
    assert "WCET bound:" in res.stdout

    target = load_target(str(d))
    store = open_store(target)
    try:
        counts = load_counts(store, "png_get_uint_31", 1)
        method, _ = resolve_method(target)
        times = load_times(store, "png_get_uint_31", 1, method, 3,
                           warmup=target.measure.warmup)
    finally:
        store.lock.release()
    aborted = {f.index for f in counts.failures}
    # about half of 60 abort (the first byte >= 128); the others are counted and timed
    assert 15 <= len(aborted) <= 45 and len(counts.indices) == 60 - len(aborted)
    assert set(times.indices.tolist()) == set(counts.indices.tolist())
    # the timing run did not build them again (the count run's failures stand for them,
    # stored with the times too)
    assert not aborted & timed_built and timed_built
    assert aborted <= {f.index for f in times.failures}
    assert f"({len(aborted)} more failed and are in no figure" in " ".join(res.stdout.split())
