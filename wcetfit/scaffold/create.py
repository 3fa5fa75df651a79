"""``wcetfit init``: a new target folder for one function of a library.

The steps: model the function (it must exist in the binary: a symbol or a ``0x…``
link-time address); find its declaration in the header given, else in the binary's
DWARF; check that the call harness builds from it; write ``wcetfit.toml`` (with the
loops the static model found as commented ``[loops]`` entries) and ``inputs.py``
(:mod:`wcetfit.scaffold.inputs_writer`); and check that ``generate`` makes arguments
the harness accepts, the slow inputs included.  Nothing is measured.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from wcetfit.errors import BinaryError, TargetError, WcetfitError
from wcetfit.model import BinaryModel, FunctionModel, hexaddr, parse_addr
from wcetfit.scaffold.declaration import Declaration
from wcetfit.target import TARGET_FILE

log = logging.getLogger(__name__)

INPUTS_FILE = "inputs.py"
CHECKED_INPUTS = 10          # generate() is tried on inputs 0..9 (9 is a slow one)


@dataclass(frozen=True)
class LoopEntry:
    key: str                 # "crc32_z+0x4c", as [loops] names it
    function: str
    header: int
    blocks: int
    depth: int
    reducible: bool
    # the direct calls of its function, "f+0x61", when there are several: a loop whose
    # bound differs between them takes a fact per site ("h+0x24 @ f+0x61")
    sites: tuple[str, ...] = ()
    calls_away: int = 0      # calls from the root to its function (0: the root's own)


@dataclass(frozen=True)
class CreatedTarget:
    directory: str
    toml_path: str
    inputs_path: str
    function: str            # as the target names it (symbol or "0x…")
    address: int
    declaration: Declaration
    loops: tuple[LoopEntry, ...]
    notes: tuple[str, ...]   # parameters that need the user's attention
    # calls and jumps through a pointer in the function or its static callees ("f+0x1c"):
    # their targets, and those functions' loops, are known only once inputs run them
    indirect_sites: tuple[str, ...] = ()
    # an IFUNC symbol: the implementation its resolver selects here (IfuncChoice.describe)
    ifunc: str | None = None


def _is_address(name: str) -> bool:
    try:
        parse_addr(name)
        return name.lower().startswith("0x")
    except ValueError:
        return False


def _names_of(model: BinaryModel, requested: str, fn: FunctionModel) -> list[str]:
    """The names a declaration may carry: the one asked for, then the symbol's aliases."""
    names = [] if _is_address(requested) else [requested]
    names.append(fn.name)
    names += [alias for alias, canon in model.aliases.items() if canon == fn.name]
    names = [n for n in dict.fromkeys(names) if not _is_address(n)]
    # versioned symbols (crc32@@ZLIB_1.2.0) are declared without the version
    names += [n.split("@")[0] for n in names if "@" in n]
    return list(dict.fromkeys(names))


def loop_entries(model: BinaryModel, root: str) -> tuple[LoopEntry, ...]:
    """Every loop of the function and of the binary's functions it reaches: the root's
    first, then by how many calls away their function is (libcrypto's SHA256 reaches 109
    loops, most of them in error and engine functions far down its calls; by address,
    those came first), then by address."""
    from wcetfit.model import calls_away
    from wcetfit.wcet.interproc import entry_names
    from wcetfit.wcet.loops import functions_called
    from wcetfit.wcet.result import loop_key

    root_fn = model.function(root)
    by_addr = entry_names(model.functions)
    away = calls_away(model, root_fn)
    order = sorted(model.functions.values(),
                   key=lambda f: (away.get(f.name, len(model.functions)), f.address))
    sites: dict[str, list[str]] = {}
    for caller in order:
        for cs in caller.calls:
            g = functions_called(caller, cs.block, model.functions, by_addr)
            if g is not None and g != caller.name:
                sites.setdefault(g, []).append(loop_key(caller, cs.instruction))
    return tuple(LoopEntry(loop_key(fn, lp.header), fn.name, lp.header, len(lp.body),
                           lp.depth, lp.reducible,
                           tuple(sites.get(fn.name, ())) if len(sites.get(fn.name, ())) > 1
                           else (), away.get(fn.name, -1))
                 for fn in order for lp in sorted(fn.loops, key=lambda lp: lp.header))



def find_declaration(binary: str, model: BinaryModel, function: str,
                     header: str | None) -> Declaration:
    from wcetfit.scaffold.dwarf import declaration_from_dwarf
    from wcetfit.scaffold.header import declaration_from_header

    fn = model.function(function)
    names = _names_of(model, function, fn)
    if header is not None:
        if not names:
            raise TargetError(f"{function} has no symbol name to look up in {header}; "
                              "write its prototype in wcetfit.toml by hand")
        return declaration_from_header(header, names)
    decl = declaration_from_dwarf(binary, names, fn.address)
    if decl is None:
        raise TargetError(f"{binary} has no debugging information (DWARF) describing "
                          f"{function}: pass --header FILE.h, the header that declares it")
    return decl


def create_target(directory: str, binary: str, function: str, header: str | None = None,
                  *, force: bool = False) -> CreatedTarget:
    """Write ``directory/wcetfit.toml`` and ``directory/inputs.py`` for ``function``."""
    from wcetfit.static import binary as static
    from wcetfit.timing.thunk import build_harness, parse_signatures

    from wcetfit.scaffold.inputs_writer import write_inputs

    # a binary named by an absolute path stays absolute in the target (a folder moved
    # elsewhere still finds it: "../libwrap.so" written for /tmp/x/libwrap.so did not)
    absolute = os.path.isabs(binary)
    binary = os.path.abspath(binary)
    if not os.path.isfile(binary):
        raise BinaryError(f"{binary}: no such file")
    if header is not None and not os.path.isfile(header):
        raise TargetError(f"{header}: no such header file")
    directory = os.path.abspath(directory)
    toml_path = os.path.join(directory, TARGET_FILE)
    inputs_path = os.path.join(directory, INPUTS_FILE)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise TargetError(f"{directory} exists and is not a directory")
    existing = [p for p in (toml_path, inputs_path) if os.path.exists(p)]
    if existing and not force:
        raise TargetError(f"{existing[0]} exists; pass --force to overwrite "
                          f"{' and '.join(os.path.basename(p) for p in existing)}")

    model = static.load_model(binary, [function], with_callees=True)
    fn = model.function(function)
    # what analyze refuses, refused before a target is written (libc's qsort: init wrote
    # one, and analyze stopped on memcpy and mempcpy sharing 57 blocks)
    from wcetfit.fit.system import refuse_shared_blocks
    from wcetfit.model import reached_functions
    refuse_shared_blocks(fn.name, reached_functions(model, fn))
    decl = find_declaration(binary, model, function, header)
    try:
        build_harness(decl.prototype, decl.cdef)
    except WcetfitError as exc:
        raise TargetError(f"the declarations of {decl.function} found in the {decl.source} "
                          f"do not make a call harness ({exc}); write prototype and cdef "
                          "by hand") from None
    ffi, functions = parse_signatures(decl.prototype, decl.cdef)
    inputs = write_inputs(decl, ffi, functions[0][1])
    # A function named by address keeps its address in the target; its prototype may
    # declare it under any name (wcetfit.measurements.prototype_name).
    # A versioned symbol (libm's pow@GLIBC_2.2.5, not the default pow@@GLIBC_2.29) is kept
    # by its address: the prototype cannot spell the version, and under the header's name
    # the target measured the other implementation, with no word.
    name = (function if _is_address(function) else
            hexaddr(fn.address) if "@" in function else decl.function)
    loops = loop_entries(model, function)
    indirect = indirect_sites(model, function)
    os.makedirs(directory, exist_ok=True)
    _write(inputs_path, inputs.text)
    _write(toml_path, toml_text(binary, directory, name, fn, decl, loops, header,
                                recursive_functions(model), absolute=absolute,
                                indirect=indirect))
    _check_inputs(directory, name)
    return CreatedTarget(directory, toml_path, inputs_path, name, fn.address, decl, loops,
                         inputs.notes, indirect,
                         ifunc=fn.ifunc.describe() if fn.ifunc is not None else None)


def indirect_sites(model: BinaryModel, root: str) -> tuple[str, ...]:
    """The calls and tail jumps through a pointer in ``root`` and the functions it calls
    (liblzma's lzma_crc64 jumps through the pointer its resolver set: the loop is in the
    function it reaches, which no static model of lzma_crc64 holds)."""
    from wcetfit.model import CALL_INDIRECT
    from wcetfit.wcet.result import loop_key

    root_fn = model.function(root)
    order = [root_fn] + sorted((f for f in model.functions.values() if f is not root_fn),
                               key=lambda f: f.address)
    return tuple(loop_key(f, cs.instruction) for f in order for cs in f.calls
                 if cs.kind == CALL_INDIRECT)


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _check_inputs(directory: str, function: str) -> None:
    """generate() of the new target makes arguments the harness takes."""
    from wcetfit.inputs_check import check_generate
    from wcetfit.target import load_target

    target = load_target(directory)
    try:
        check_generate(target, CHECKED_INPUTS)
    except WcetfitError as exc:
        raise TargetError(f"the inputs.py written for {function} does not work ({exc}); "
                          f"this is a wcetfit bug: edit {target.inputs_module}") from None


def _toml_string(text: str) -> str:
    return json.dumps(text)        # a JSON string of ASCII is a TOML basic string


def _toml_multiline(text: str) -> str:
    if not text.strip():
        return '""'
    if "'''" in text:
        return _toml_string(text)
    return "'''\n" + text.strip("\n") + "\n'''"


# [loops] lists every loop of the functions at most NEAR_CALLS calls away from the root,
# and at most MAX_FAR_LOOPS of the farther ones (nearest first).
NEAR_CALLS = 1
MAX_FAR_LOOPS = 40


def toml_text(binary: str, directory: str, name: str, fn: FunctionModel, decl: Declaration,
              loops: tuple[LoopEntry, ...], header: str | None,
              recursive: list[str] = (), *, absolute: bool = False,
              indirect: tuple[str, ...] = ()) -> str:
    """``indirect``: the calls through a pointer (:func:`indirect_sites`), said beside the
    loops.  ``absolute``: the user named the binary by an absolute path, which the target keeps;
    a relative one is written relative to the target's folder, unless that climbs more
    than one level."""
    rel = os.path.relpath(binary, directory)
    shown = binary if absolute or rel.startswith(os.pardir + os.sep + os.pardir) else rel
    lines = [
        f"# Written by `wcetfit init` for {fn.name if _is_address(name) else name}"
        f" ({hexaddr(fn.address)}) in {binary};",
        f"# its prototype and types come from the {decl.source}.",
        "# `wcetfit analyze` on this folder measures it; inputs.py says what to vary.",
    ]
    if name != decl.function:
        lines.append(f"# {name} is named by its address: the prototype may call it anything "
                     f"(here {decl.function}).")
    lines += [
        f"binary = {_toml_string(shown)}",
        f"functions = [{_toml_string(name)}]",
        f"prototype = {_toml_string(decl.prototype)}",
        f"cdef = {_toml_multiline(decl.cdef)}",
        f"inputs = {_toml_string(INPUTS_FILE)}",
        "",
        "[measure]",
        "inputs = 500          # how many generated inputs (rows of the linear system)",
        "repeats = 10          # timed calls per input",
        "seed = 1              # input i is drawn from numpy.random.default_rng([seed, i])",
    ]
    errors = decl.error_returns
    if errors:
        # an error code the "below zero" rule misses (libbrotlidec's decoder returned
        # BROTLI_DECODER_RESULT_ERROR = 0 on every random input, and nothing said so)
        lines += [
            f"# the error codes of {decl.returns[0]}, the type {decl.function} returns:",
            "# the report says when most timed inputs returned one (its bound is then of",
            "# rejected calls)",
            "error_returns = { " + ", ".join(f"{n} = {v}" for n, v in errors) + " }",
        ]
    lines += [
        "",
        "# Loop bounds: the most times a loop's back edges are taken per entry into it.",
        "# Without one, a loop's bound is the largest the inputs showed (\"observed\" in the",
        "# report); give the bound the function's contract guarantees (e.g. from the",
        "# longest buffer, MAX_LEN in inputs.py) by removing the '#' and setting N.",
        "[loops]",
    ]
    if indirect:
        lines.append(f"# (calls through a pointer at {', '.join(indirect[:4])}"
                     f"{' …' if len(indirect) > 4 else ''}: the loops of the functions they "
                     f"reach are not listed here; `wcetfit report` names them once inputs ran "
                     f"them)")
    if not loops:
        lines.append("# (the static model found no loops)")
    last_away = None
    far = [lp for lp in loops if lp.calls_away > NEAR_CALLS or lp.calls_away < 0]
    cut = far[MAX_FAR_LOOPS:] if len(far) > MAX_FAR_LOOPS else []
    for lp in loops:
        if cut and lp is cut[0]:
            # libc's strdup reaches 479 loops through malloc (2,338 lines of [loops]); the
            # report names every loop the bound rests on, with its key
            aways = sorted({x.calls_away for x in cut if x.calls_away > 0})
            lines.append(f"# ... {len(cut):,} more loops in functions "
                         + (f"{aways[0]}–{aways[-1]} calls away " if aways else "")
                         + "(mostly error and set-up paths), not listed: `wcetfit report` "
                           "names each loop the bound rests on, with its key")
            break
        if lp.calls_away != last_away and lp.calls_away != 0:
            # a heading per call distance: the nearest loops are what the bound is most
            # likely made of; the far ones are mostly error and set-up paths
            lines.append(f"# -- in functions {lp.calls_away} call"
                         f"{'' if lp.calls_away == 1 else 's'} away" if lp.calls_away > 0
                         else "# -- in functions the model holds beside them")
        last_away = lp.calls_away
        what = (f"{lp.function}: loop at {hexaddr(lp.header)}, {lp.blocks} block"
                f"{'' if lp.blocks == 1 else 's'}, depth {lp.depth}")
        if not lp.reducible:
            # bounded like the others (wcetfit.static.structure: a loop with several
            # entries); the old words told users not to bound what they can and should
            what += ("; entered at several blocks (not a natural loop): N counts returns "
                     "to its header per entry")
        lines.append(f"# {_toml_string(lp.key)} = N    # {what}")
        # a fact per call site, for the near functions only (a far function's sites made
        # 16 lines of one loop)
        for site in (lp.sites if 0 <= lp.calls_away <= NEAR_CALLS else ()):
            lines.append(f"# {_toml_string(f'{lp.key} @ {site}')} = N    # only when "
                         f"{lp.function} is called at {site}")
    if recursive:
        lines += ["", "[recursion]          # most nested activations of a recursive function"]
        lines += [f"# {_toml_string(r)} = N" for r in recursive]
    lines += ["",
              "# The bound covers the machine as fast as the timing run's slowest period. On",
              "# a shared machine later periods can be slower: `wcetfit check` times fresh",
              "# inputs against the bound and says which speed to declare here (the slowest",
              "# the machine may run the function, over its fastest).",
              "[wcet]",
              "# machine_speed = 1.5"]
    if header is not None:
        lines += ["", f"# header: {os.path.abspath(header)}"]
    return "\n".join(lines) + "\n"


def recursive_functions(model: BinaryModel) -> list[str]:
    """Functions that call themselves directly (their [recursion] entries)."""
    return sorted(f.name for f in model.functions.values()
                  if any(c.target == f.address and c.kind == "internal" for c in f.calls))
