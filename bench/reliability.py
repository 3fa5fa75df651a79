"""Reliability figures (``make bench``): fuzzing of wcetfit's parsers with Hypothesis.

>= 100,000 cases in all (``WCETFIT_FUZZ_CASES`` scales the total, ``WCETFIT_FUZZ_ONLY``
picks one parser by the start of its name): wcetfit.toml
(load_target), prototypes and cdef (parse_signatures), ELF input (read_elf on truncated
and bit-flipped copies of libz and of a sample library) and store files (damaged
datasets and store.json).  Every case must end in a result or one typed error line
(WcetfitError); a traceback or a hang is counted and the first few are printed.
The case functions are shared with tests/test_fuzz.py (tests/fuzzcases.py).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# share of the total per parser (the ELF cases cost 10-100x the others)
SHARES = {"wcetfit.toml": 0.45, "prototype+cdef": 0.35, "store files": 0.15, "ELF": 0.05}


# Each Hypothesis example is run as is and in VARIANTS - 1 cheap variants derived with
# a random.Random that Hypothesis seeds (text edits; for binary inputs, more mutations):
# generating one example costs about as much as parsing ten.
VARIANTS = 10


def _fuzz(tally, name: str, n: int, strategy, case, variant, seed: int) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    import fuzzcases as F

    @hseed(seed)
    @settings(max_examples=max(1, n // VARIANTS), deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy, st.randoms(use_true_random=False))
    def run(arg, rnd):
        for k in range(VARIANTS):
            this = arg if k == 0 else variant(arg, rnd)
            outcome, detail = F.classify(lambda: case(this))
            tally.add(name, outcome, f"{detail}\ninput: {this!r:.300}")

    run()


def run(total: int | None = None) -> list[dict]:
    import warnings

    from hypothesis import strategies as st

    sys.path.insert(0, str(ROOT / "tests"))
    import fuzzcases as F

    total = total or int(os.environ.get("WCETFIT_FUZZ_CASES", "100000"))
    logging.getLogger("wcetfit").setLevel(logging.CRITICAL)   # set-aside notices: expected
    warnings.simplefilter("ignore")                            # cffi's cdef warnings
    tally = F.Tally()
    figures: list[dict] = []
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="wcetfit-fuzz-", dir=shm) as tmp:
        d = F.toml_directory(tmp)
        files = F.store_files(tmp)
        store_dir = os.path.join(tmp, "store")
        elf_path = os.path.join(tmp, "fuzzed.so")
        sources = [p for p in (*F.ELF_SOURCES, str(ROOT / "samples/crc/build/libcrc.so"))
                   if os.path.exists(p)]
        blobs = {p: open(p, "rb").read() for p in sources}
        def flips(size, rnd):
            return ("flip", [(rnd.randrange(size), rnd.randrange(8))
                             for _ in range(rnd.randint(1, 6))]) if rnd.random() < 0.7 \
                else ("cut", rnd.randrange(size))

        jobs = [
            ("wcetfit.toml", F.toml_texts(), lambda text: F.toml_case(d, text),
             F.mutate_text),
            ("prototype+cdef", st.tuples(F.c_texts(), st.one_of(st.just(""), F.c_texts())),
             lambda pc: F.proto_case(*pc),
             lambda pc, rnd: (F.mutate_text(pc[0], rnd), pc[1]) if rnd.random() < 0.7
             else (pc[0], F.mutate_text(pc[1], rnd))),
            ("store files", st.sampled_from(sorted(files)).flatmap(
                lambda name: st.tuples(st.just(name), F.elf_mutations(len(files[name])))),
             lambda nm: F.store_case(store_dir, nm[0], F.mutate(files[nm[0]], nm[1])),
             lambda nm, rnd: (nm[0], flips(len(files[nm[0]]), rnd))),
        ]
        for i, src in enumerate(sources):
            jobs.append((f"ELF {os.path.basename(src)}", F.elf_mutations(len(blobs[src])),
                         lambda m, src=src: F.elf_case(elf_path, F.mutate(blobs[src], m)),
                         lambda m, rnd, src=src: flips(len(blobs[src]), rnd)))
        import wcetfit.store as store_module
        only = os.environ.get("WCETFIT_FUZZ_ONLY")     # e.g. "wcetfit.toml": one parser
        for k, (name, strategy, case, variant) in enumerate(jobs):
            if only and not name.startswith(only):
                continue
            share = SHARES.get(name, SHARES["ELF"] / max(1, len(sources)))
            n = max(1, int(total * share))
            start = time.perf_counter()
            # durability is not what is fuzzed here: skip the fsyncs (they cost ~10 ms)
            saved = os.fsync, store_module._fsync_dir
            os.fsync, store_module._fsync_dir = (lambda fd: None), (lambda d: None)
            try:
                _fuzz(tally, name, n, strategy, case, variant, seed=1000 + k)
            finally:
                os.fsync, store_module._fsync_dir = saved
            c = tally.counts.get(name, {})
            done = sum(c.values())
            print(f"  fuzz {name}: {done} cases in {time.perf_counter() - start:.0f} s, "
                  f"{c.get(F.CRASH, 0)} tracebacks, {c.get(F.HANG, 0)} hangs", file=sys.stderr,
                  flush=True)
            figures.append({"figure": f"fuzz {name}: cases", "value": done, "unit": "cases",
                            "seconds": round(time.perf_counter() - start, 1),
                            "typed_errors": c.get(F.ERROR, 0), "results": c.get(F.OK, 0)})
            figures.append({"figure": f"fuzz {name}: tracebacks + hangs",
                            "value": c.get(F.CRASH, 0) + c.get(F.HANG, 0), "unit": "cases",
                            "goal": "0", "ok": c.get(F.CRASH, 0) + c.get(F.HANG, 0) == 0})
    figures.append({"figure": "fuzz cases in all", "value": tally.total(), "unit": "cases",
                    "goal": f">= {total}", "ok": tally.total() >= total})
    figures.append({"figure": "fuzz tracebacks + hangs in all",
                    "value": tally.total(F.CRASH) + tally.total(F.HANG), "unit": "cases",
                    "goal": "0", "ok": tally.total(F.CRASH) + tally.total(F.HANG) == 0})
    for parser, outcome, detail in tally.bad[:5]:
        print(f"--- {parser}: {outcome}\n{detail}", file=sys.stderr)
    return figures


if __name__ == "__main__":
    import json
    n = int(sys.argv[1]) if len(sys.argv) > 1 else None
    for fig in run(n):
        print(json.dumps(fig))
