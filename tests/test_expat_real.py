"""libexpat's XML_Parse with a real parser (XML_ParserCreate), as a new user analysed it.

XML_Parse reaches its tokenizers only through pointers (``parser->m_processor``, the
encoding's ``updatePosition`` and scanners), so their models are built by CFGFast from
the targets the count run records.  Those tokenizers switch on a byte type read from
the encoding's table: ``cmp $N,%al; ja`` ends one block, ``movzbl %al,%eax; movslq
(%rX,%rax,4)`` starts the jump's block, its table base ``lea`` hoisted to the function's
entry.  The resolver took the byte extension's 256 entries for the bound and read the
following tables as this one's: their offsets, relative to the wrong table, landed inside
other instructions, ~90 decoding warnings and "no code could be decoded at 0x174f4".

Truth: objdump (guards, leas, instruction boundaries) and the table bytes in the file.
Each test skips, saying why, when libexpat.so.1 (or objdump) is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_static_real import objdump

from wcetfit.static import binary, elfinfo
from wcetfit.static.cfgcache import CfgCache

ROOT = Path(__file__).resolve().parent.parent
EXPAT = "/lib/x86_64-linux-gnu/libexpat.so.1"


def need_expat() -> str:
    if not os.path.exists(EXPAT):
        pytest.skip(f"{EXPAT} is absent (install libexpat1)")
    if shutil.which("objdump") is None:
        pytest.skip("needs objdump (binutils)")
    return EXPAT


def _fde(path: str, address: int) -> tuple[int, int] | None:
    for s, size in elfinfo.read_elf(path, with_fdes=True).fdes:
        if s <= address < s + size:
            return s, s + size
    return None


def _entries(path: str, table: int, n: int) -> list[int]:
    raw = elfinfo.read_elf(path).read(table, 4 * n)
    return [table + int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, 4 * n, 4)]


def _tokenizer_switches(path: str, *, extended: bool):
    """objdump: ``cmp $N,%al; ja`` then the jump's block (``movzbl %al,%eax`` when
    ``extended``), ``movslq (%rX,%rax,4),%rax; add %rX,%rax; jmp *%rax``, no ``lea`` of
    the table in that block: its base is the nearest ``lea T(%rip),%rX`` before it, with
    nothing else writing %rX between them (address order).  (n, table, jmp, function
    start, whether the function has another lea of %rX), one per function."""
    rows = objdump(path)
    out, seen = [], set()
    for i in range(len(rows) - 6):
        a, m, ops = rows[i]
        mc = re.fullmatch(r"\$0x([0-9a-f]+),%al", ops.strip()) if m == "cmp" else None
        if not mc or rows[i + 1][1] != "ja":
            continue
        k = i + 2
        if extended:
            if rows[k][1] != "movzbl" or rows[k][2].strip() != "%al,%eax":
                continue
            k += 1
        ml = re.fullmatch(r"\(%(\w+),%rax,4\),%rax", rows[k][2].strip()) \
            if rows[k][1] == "movslq" else None
        if not ml or rows[k + 1][1] != "add" or rows[k + 2][1:] != ("jmp", "*%rax"):
            continue
        base, jmp = ml.group(1), rows[k + 2][0]
        fde = _fde(path, jmp)
        if fde is None or fde[0] in seen:
            continue
        body = [r for r in rows if fde[0] <= r[0] < fde[1]]
        leas = [r for r in body if r[1] == "lea" and re.search(rf"\(%rip\),%{base}(\s|$)", r[2])]
        before = [r for r in body if r[0] < a and (
            re.search(rf",%{base}[dwb]?(\s|$)", r[2]) or r[1] == "pop" and r[2] == f"%{base}")]
        if not before or before[-1] not in leas:
            continue
        table = int(re.search(r"#\s*([0-9a-f]+)", before[-1][2]).group(1), 16)
        seen.add(fde[0])
        out.append((int(mc.group(1), 16) + 1, table, jmp, fde[0], len(leas) > 1))
    return out


def _check(path: str, fn, n: int, table: int, jmp: int) -> None:
    tabs = [j for j in fn.jump_tables if j.instruction == jmp]
    assert len(tabs) == 1 and jmp not in fn.unresolved_jumps, \
        f"{fn.name}: the jump at {jmp:#x} is not resolved ({len(fn.jump_tables)} tables)"
    jt = tabs[0]
    assert (jt.table_address, jt.entry_size, jt.base, len(jt.targets)) == (table, 4, table, n), \
        (f"{fn.name}: table of {jmp:#x} read at {jt.table_address:#x} (base {jt.base}), "
         f"{len(jt.targets)} entries; its guard allows {n} at {table:#x}")
    assert list(jt.targets) == _entries(path, table, n)
    starts = {a for a, _, _ in objdump(path)}
    off = [hex(b.address) for b in fn.blocks if b.address not in starts]
    assert not off, f"{fn.name}: blocks start inside objdump's instructions: {off[:8]}"


def test_tokenizer_tables_guarded_in_the_predecessor_read_only_the_guards_entries(tmp_path):
    """CFGFast (the recovery of functions reached through pointers): the guard ends the
    predecessor, the jump's block holds only the byte extension; the table has the
    guard's N entries (updatePosition: 6), not 256, and every block of the function
    starts on one of objdump's instruction boundaries."""
    _check_switches(tmp_path, hoisted=False, most=4,
                    missing="no `cmp $N,%al; ja` / `movzbl %al,%eax; movslq` switch")


def test_table_base_hoisted_from_one_of_several_leas_is_the_one_reaching_the_jump(tmp_path):
    """A tokenizer with two tables off the same hoisted base register (``lea T1(%rip),%r15``
    and ``lea T2(%rip),%r15``): the table is the one whose lea reaches the jump, read from
    its start (angr's own resolver records it 4 bytes on, without entry 0, and the copy
    cannot relocate a table that is not at its base: the function ran uncounted)."""
    _check_switches(tmp_path, hoisted=True, most=2,
                    missing="no switch off one of several hoisted leas of one register")


def _check_switches(tmp_path, *, hoisted: bool, most: int, missing: str) -> None:
    """Model the first ``most`` tokenizer switches of one kind (a table base hoisted
    from one of several leas, or a byte-extended index) and check each table."""
    path = need_expat()
    cases = [c for c in _tokenizer_switches(path, extended=not hoisted)
             if bool(c[4]) == hoisted][:most]
    if not cases:
        pytest.skip(f"{missing} in {path}")
    cache = CfgCache(str(tmp_path / "cache"), enabled=True)
    model = binary.load_model(path, [c[3] for c in cases], with_callees=False, use_cache=cache)
    for n, table, jmp, start, _ in cases:
        _check(path, model.function(start), n, table, jmp)


def test_an_observed_target_inside_a_function_is_one_error_naming_the_call(tmp_path):
    """An indirect call recorded going into the middle of a function (objdump's
    0x174f4 is inside a jne) is one error line naming the call and where it went, not a
    model decoded from there."""
    from wcetfit.errors import FunctionNotFound
    from wcetfit.model import ObservedTarget

    path = need_expat()
    rows = objdump(path)
    call = next((a for a, m, ops in rows if m in ("call", "callq") and ops.startswith("*")
                 and _fde(path, a)), None)
    mid = next((a for a, m, ops in rows if m == "jne" and "<" in ops and _fde(path, a)
                and _fde(path, a)[0] < a), None)
    if call is None or mid is None:
        pytest.skip(f"no indirect call or jne in {path}")
    cache = CfgCache(str(tmp_path / "cache"), enabled=True)
    with pytest.raises(FunctionNotFound) as e:
        binary.load_model(path, [_fde(path, call)[0]], use_cache=cache,
                          indirect={call: (ObservedTarget(mid + 1, hex(mid + 1), 3),)})
    msg = str(e.value)
    assert f"the indirect call at {call:#x}" in msg and f"went to {mid + 1:#x}" in msg
    assert "not a function entry" in msg and "\n" not in msg


INPUTS = '''
import cffi

_xffi = cffi.FFI()
_xffi.cdef("void *XML_ParserCreate(const char *encoding);")
_xlib = _xffi.dlopen("libexpat.so.1")


def generate(ctx):
    ffi = ctx.ffi
    parser = ffi.cast("XML_Parser", int(_xffi.cast("uintptr_t",
                                                   _xlib.XML_ParserCreate(_xffi.NULL))))
    n = 4096 if ctx.index % 4 == 3 else int(ctx.rng.integers(1, 4097))
    doc = (b"<a>" + b"<b x='1'>t&amp;</b>" * 400 + b"</a>")[:n]
    s = ffi.from_buffer("char[]", bytearray(doc) + b"\\0", require_writable=True)
    return (parser, s, len(doc), int(ctx.rng.integers(0, 2)))
'''

TOML = f'''
binary = "{EXPAT}"
functions = ["XML_Parse"]
prototype = "enum XML_Status XML_Parse(XML_Parser parser, const char *s, int len, int isFinal);"
cdef = """
typedef struct XML_ParserStruct *XML_Parser;
enum XML_Status {{ XML_STATUS_ERROR = 0, XML_STATUS_OK = 1, XML_STATUS_SUSPENDED = 2 }};
"""
inputs = "inputs.py"

[measure]
inputs = 8
repeats = 3
seed = 1
'''


@pytest.mark.slow
def test_xml_parse_with_a_real_parser_counts_its_tokenizers(tmp_path):
    """The user's target (the parser from XML_ParserCreate through the inputs' own cffi
    dlopen): `wcetfit count` follows m_processor and the encoding's pointers into the
    tokenizers, models them without a decoding warning and counts every input (it
    stopped with "no code could be decoded at 0x174f4" after ~90 warnings)."""
    need_expat()
    d = tmp_path / "expat"
    d.mkdir()
    (d / "inputs.py").write_text(INPUTS)
    (d / "wcetfit.toml").write_text(TOML)
    env = dict(os.environ, PYTHONPATH=str(ROOT), WCETFIT_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "wcetfit", "count", str(d)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "8 inputs counted" in r.stdout, r.stdout[-2000:]
    for bad in ("cannot be decoded", "capstone decodes", "falls through into",
                "unresolved indirect jump", "runs as original code"):
        assert bad not in r.stderr, r.stderr[-3000:]
    # the tokenizers reached through pointers are modelled and counted as callees
    assert re.search(r"indirect call at 0x[0-9a-f]+ \u2192 sub_[0-9a-f]+ at 0x", r.stdout), r.stdout
    assert len(re.findall(r"^  sub_[0-9a-f]+: \d+ blocks", r.stdout, re.M)) >= 20, r.stdout
