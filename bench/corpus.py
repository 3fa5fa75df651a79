"""Corpus figures: every exported function of the system's libraries, modelled and planned.

For each library, every defined FUNC and IFUNC symbol of ``.dynsym`` (an IFUNC stands for
the implementation the loader selects on this machine) is looked up in the whole-library
static model, and the instrumented copy of that function alone is planned with
:func:`wcetfit.count.relocate.plan_copy` (its callees stay original code, as when they are
left uncounted).  A function counts as done when its model has no unresolved indirect jump
and no instruction the decoders could not follow, and its copy can be planned.

Figures per library: ``corpus.<lib>.ok`` (share of exported functions done, goal >= 99 %),
with ``functions``, ``refused`` and ``causes`` (refusals grouped by cause: the first words
of the error, the instruction's mnemonic), a few ``examples`` (full messages), and
``silent_cuts`` (functions whose model ends in an instruction nobody decoded without a
warning: must be 0).  Models come from the cache (``$WCETFIT_CACHE_DIR``): the first run
recovers each library whole (libcrypto: tens of seconds), later runs are quick.
Run alone: ``python -m bench.corpus [LIBRARY...]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter

LIBDIR = "/lib/x86_64-linux-gnu"
LIBRARIES = ["libz.so.1", "libm.so.6", "libbz2.so.1.0", "liblzma.so.5", "libexpat.so.1",
             "libcrypto.so.3", "libgmp.so.10", "libjpeg.so.62", "libpng16.so.16"]
GOAL = 0.99


def _cause(message: str) -> str:
    """A refusal's class: the words before the first address, plus the instruction's
    mnemonic when the message quotes one (`mnemonic ...`)."""
    text = re.sub(r"^cannot relocate \S+: ", "", message)
    text = re.sub(r"^\S+: ", "", text) if not text.startswith("0x") else text
    mnem = re.search(r"`(\w+)", text)
    words = re.split(r"0x[0-9a-f]+|`", text, maxsplit=1)[0].strip(" :(,")
    if not words:   # "0x1234 `jmp rax` is ..." -> the words after the instruction
        words = re.sub(r"^0x[0-9a-f]+ `[^`]*` ", "", text)
        words = re.split(r"0x[0-9a-f]+", words, maxsplit=1)[0].strip(" :(,")
    return f"{words} [{mnem.group(1)}]" if mnem else words


def exported_functions(path: str) -> list[str]:
    from wcetfit.static import elfinfo

    elf = elfinfo.read_elf(path, with_fdes=False)
    return sorted({s.name for s in elf.symbols if s.exported})


def library_figure(path: str) -> dict:
    from wcetfit.count.relocate import plan_copy
    from wcetfit.errors import WcetfitError
    from wcetfit.static import binary, elfinfo

    t0 = time.perf_counter()
    model = binary.load_model(path)
    t_model = time.perf_counter() - t0
    elf = elfinfo.read_elf(path, with_fdes=False)
    data = open(path, "rb").read()

    def read(address: int, size: int) -> bytes:
        off = elf.file_offset(address, size)
        return data[off:off + size]

    names = exported_functions(path)
    causes: Counter[str] = Counter()
    examples: list[str] = []
    refused = silent = 0
    t1 = time.perf_counter()
    for name in names:
        try:
            fn = model.function(name)
        except KeyError:
            refused += 1
            causes["no model"] += 1
            examples.append(f"{name}: no model")
            continue
        problems = [w for w in fn.warnings if "unresolved indirect jump" in w
                    or "cannot be decoded" in w or "not decodable" in w]
        last = [b.last for b in fn.blocks if b.instructions]
        if any(b.size != sum(i.size for i in b.instructions) for b in fn.blocks) and not problems:
            silent += 1
        if problems:
            refused += 1
            for p in problems:
                causes["model: " + _cause(p)] += 1
            examples.append(problems[0])
            continue
        del last
        try:
            plan_copy([fn], read)
        except WcetfitError as exc:
            refused += 1
            causes["plan: " + _cause(str(exc))] += 1
            examples.append(str(exc))
    n = len(names)
    share = (n - refused) / n if n else None
    return {"figure": f"corpus.{os.path.basename(path).split('.so')[0]}.ok",
            "value": None if share is None else round(100 * share, 2), "unit": "%",
            "goal": f">= {100 * GOAL:g}", "ok": share is not None and share >= GOAL,
            "functions": n, "refused": refused, "silent_cuts": silent,
            "causes": dict(causes.most_common()), "examples": examples[:8],
            "model_s": round(t_model, 2), "plan_s": round(time.perf_counter() - t1, 2)}


def run(libraries: list[str] | None = None) -> list[dict]:
    figs = []
    for lib in libraries or LIBRARIES:
        path = lib if os.path.isabs(lib) else os.path.join(LIBDIR, lib)
        if not os.path.exists(path):
            figs.append({"figure": f"corpus.{lib.split('.so')[0]}.ok", "value": None, "unit": "%",
                         "goal": f">= {100 * GOAL:g}", "ok": None, "skipped": f"{path} absent"})
            continue
        figs.append(library_figure(path))
    return figs


if __name__ == "__main__":
    for lib in sys.argv[1:] or LIBRARIES:      # one line per library as soon as it is done
        for fig in run([lib]):
            print(json.dumps(fig), flush=True)
