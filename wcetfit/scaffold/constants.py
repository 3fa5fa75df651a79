"""What a library's header says about the values its functions take.

Two things, both read from the library's *own* header files (the header given and what
it includes, less what the standard C and POSIX headers bring):

* its integer constants: object-like macros (as ``gcc -dD`` reports the definitions in
  force, expanded by ``gcc -E`` so that ``UINT32_C(1) << 31`` becomes ``1U << 31``) and
  enumerators, each evaluated by :func:`evaluate`, a small evaluator of integer literals
  and C's integer operators that gives up on anything else (a cast, a string, a call);
  each constant carries the first sentence of the comment attached to its group of
  ``#define`` lines (zlib.h: ``/* compression levels */`` under ``Z_NO_COMPRESSION`` ..
  ``Z_DEFAULT_COMPRESSION``), which tells what they are values *of*;
* the values its comments give a parameter in words, in the sentences that name it:
  ranges (``between 0 and 9``, ``[0, 9]``, ``0..9``, ``(0-3)``) and lists (``128, 192 or
  256``).

Both are guesses for the inputs to start from (:mod:`wcetfit.scaffold.inputs_writer`
says so where it uses them); nothing here is needed for the prototype, so a failure
here leaves them empty rather than stopping ``wcetfit init``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import os
import re
from typing import Any, Iterable

from wcetfit.errors import TargetError
from wcetfit.scaffold.declaration import Constant, Documented

log = logging.getLogger(__name__)

# Headers a library's header may include that are not the library's: their constants
# (SEEK_SET, O_CREAT, INT_MAX, ...) say nothing about the library's parameters.
_STANDARD_HEADERS = """
    assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h
    locale.h math.h setjmp.h signal.h stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h
    stdint.h stdio.h stdlib.h stdnoreturn.h string.h threads.h time.h uchar.h wchar.h
    wctype.h unistd.h strings.h fcntl.h pthread.h sched.h semaphore.h dirent.h dlfcn.h
    sys/types.h sys/stat.h sys/time.h sys/socket.h sys/uio.h sys/mman.h sys/select.h
    netinet/in.h arpa/inet.h netdb.h
""".split()

_MARKER = re.compile(r'^# \d+ "([^"]*)"')
_DEFINE = re.compile(r"^#define ([A-Za-z_]\w*)(\(?)(.*)$")
_UNDEF = re.compile(r"^#undef ([A-Za-z_]\w*)")
# A macro body worth expanding: operators, words and parentheses only (no strings, no
# statements); gcc -E would stop on a body that is not an expression.
_EXPRESSION_LIKE = re.compile(r"^[\w\s()|&^~<>+\-*/%!]+$")
_MOST_CONSTANTS = 20000       # a header with more is not read for constants


# --- evaluating a C integer expression -------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)([uUlL]*)(?![\w.])"
                    r"|(<<|>>|[-+*/%|&^~()!])|([A-Za-z_]\w*))")
_SUFFIX = re.compile(r"(?i)(u?l{0,2}|l{1,2}u)")
# binary operators by precedence, loosest first (C's, without comparisons and logic)
_BINARY = {"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}
_LIMIT = 1 << 64


class _Unknown(Exception):
    """The expression is not one :func:`evaluate` reads."""


def evaluate(expr: str, known: dict[str, int] | None = None) -> int | None:
    """The value of a C integer constant expression of literals (decimal, hex, octal,
    binary; U/L suffixes), parentheses, ``| ^ & << >> + - * / %``, unary ``- + ~ !`` and
    names in ``known``; None for anything else (a cast, a call, a string, a name it does
    not know) and for what C would wrap (a negative result of unsigned literals).  Text
    is never executed."""
    tokens: list[tuple[str, object]] = []
    pos, unsigned = 0, False
    text = expr.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            return None
        pos = m.end()
        if m.group(1) is not None:
            if not _SUFFIX.fullmatch(m.group(2)):
                return None
            unsigned |= "u" in m.group(2).lower()
            tokens.append(("num", _literal(m.group(1))))
        elif m.group(3) is not None:
            tokens.append(("op", m.group(3)))
        else:
            if known is None or m.group(4) not in known:
                return None
            tokens.append(("num", known[m.group(4)]))
    try:
        value, end = _expression(tokens, 0, 0)
    except (_Unknown, IndexError, ZeroDivisionError):
        return None
    if end != len(tokens) or abs(value) >= _LIMIT or (unsigned and value < 0):
        return None
    return value


def _literal(digits: str) -> int:
    if digits[:2].lower() in ("0x", "0b"):
        return int(digits, 0)
    return int(digits, 8) if len(digits) > 1 and digits[0] == "0" else int(digits)


def _expression(tokens: list, i: int, min_prec: int) -> tuple[int, int]:
    """Precedence climbing: the value of the tokens from ``i`` binding at least
    ``min_prec``, and where it ends."""
    left, i = _unary(tokens, i)
    while i < len(tokens) and tokens[i][0] == "op" and tokens[i][1] in _BINARY \
            and _BINARY[tokens[i][1]] > min_prec:
        op = tokens[i][1]
        right, i = _expression(tokens, i + 1, _BINARY[op])
        left = _apply(op, left, right)
    return left, i


def _unary(tokens: list, i: int) -> tuple[int, int]:
    kind, value = tokens[i]
    if kind == "num":
        return value, i + 1
    if value == "(":
        inner, i = _expression(tokens, i + 1, 0)
        if i >= len(tokens) or tokens[i] != ("op", ")"):
            raise _Unknown
        return inner, i + 1
    if value in ("-", "+", "~", "!"):
        operand, i = _unary(tokens, i + 1)
        return {"-": -operand, "+": operand, "~": ~operand, "!": int(not operand)}[value], i
    raise _Unknown


_OPERATORS = {"|": operator.or_, "^": operator.xor, "&": operator.and_,
              "<<": operator.lshift, ">>": operator.rshift, "+": operator.add,
              "-": operator.sub, "*": operator.mul}


def _apply(op: str, a: int, b: int) -> int:
    if op in ("<<", ">>") and not 0 <= b < 64:
        raise _Unknown                       # undefined in C
    if op in ("/", "%"):
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)    # C truncates
        value = q if op == "/" else a - b * q
    else:
        value = _OPERATORS[op](a, b)
    if abs(value) >= _LIMIT:
        raise _Unknown
    return value


# --- the library's own files and their constants ---------------------------------------

def library_constants(header: str, ast: object) -> tuple[tuple[Constant, ...], list[str]]:
    """The integer constants of ``header``'s library, in definition order (macros, then
    enumerators), and the library's header files they were read from."""
    from wcetfit.scaffold.header import include_source

    source = include_source(header)
    try:
        dump = _run_cpp(source, header, ["-dD"])
        own = [f for f in _files(dump) if f not in _standard_files() and os.path.isfile(f)]
    except TargetError as exc:
        log.debug("no constants read from %s (%s)", header, exc)
        return (), []
    macros = {n: body for n, (body, f) in _macros(dump).items() if f in own}
    enumerators = _enumerators(ast, set(own))
    values = _expand_and_evaluate(source, header, macros, enumerators)
    about: dict[str, str] = {}
    for path in own:
        about.update(attached_comments(_read(path)))
    group = _enum_groups(ast, set(own))
    found = [Constant(n, v, about.get(n, ""), group.get(n, "")) for n, v in values.items()]
    found += [Constant(n, v, "", group.get(n, "")) for n, v in enumerators.items()
              if n not in values]
    return tuple(found), own


def _run_cpp(source: str, header: str, flags: list[str]) -> str:
    from wcetfit.scaffold.header import _cpp

    return _cpp(source, header, ["-I", os.path.dirname(os.path.abspath(header)), *flags])


def _files(dump: str) -> list[str]:
    """The files a preprocessor output's line markers name, in first-seen order."""
    seen: dict[str, None] = {}
    for line in dump.splitlines():
        m = _MARKER.match(line)
        if m and not m.group(1).startswith("<"):
            seen.setdefault(os.path.abspath(m.group(1)), None)
    return list(seen)


@functools.lru_cache(maxsize=1)
def _standard_files() -> frozenset[str]:
    """The files the standard headers bring (those present on this system)."""
    source = "".join(f"#if __has_include(<{h}>)\n#include <{h}>\n#endif\n"
                     for h in _STANDARD_HEADERS)
    try:
        return frozenset(_files(_run_cpp(source, "the standard headers", [])))
    except TargetError as exc:
        log.debug("standard headers not preprocessed (%s)", exc)
        return frozenset()


def _macros(dump: str) -> dict[str, tuple[str, str]]:
    """Object-like macros in force at the end of a ``gcc -E -dD`` output: name -> (body,
    the file defining it)."""
    out: dict[str, tuple[str, str]] = {}
    current = ""
    for line in dump.splitlines():
        m = _MARKER.match(line)
        if m:
            current = os.path.abspath(m.group(1)) if not m.group(1).startswith("<") else ""
            continue
        m = _DEFINE.match(line)
        if m:
            out.pop(m.group(1), None)
            if not m.group(2) and current:           # not function-like
                out[m.group(1)] = (m.group(3).strip(), current)
            continue
        m = _UNDEF.match(line)
        if m:
            out.pop(m.group(1), None)
    return out


def _enumerators(ast: object, own: set[str]) -> dict[str, int]:
    """The enumerators of the enums the library's own files define, with their values."""
    from pycparser import c_generator

    gen = c_generator.CGenerator()
    out: dict[str, int] = {}
    for _ext, node in _own_enums(ast, own):
        nxt: int | None = 0
        for e in node.values.enumerators:
            value = nxt if e.value is None else evaluate(gen.visit(e.value), out)
            if value is None:             # later implicit values are unknown too
                nxt = None
                continue
            out.setdefault(e.name, value)
            nxt = value + 1
    return out


def _enum_groups(ast: object, own: set[str]) -> dict[str, str]:
    """Each enumerator of the library's own enums → its enum's tag, or the name of the
    typedef that names an enum without a tag."""
    from pycparser import c_ast

    out: dict[str, str] = {}
    for ext, node in _own_enums(ast, own):
        name = node.name or (ext.name if isinstance(ext, c_ast.Typedef) else "") or ""
        for e in node.values.enumerators:
            out.setdefault(e.name, name)
    return out


def _own_enums(ast: object, own: set[str]) -> Iterable[tuple[Any, Any]]:
    """(top-level declaration, enum with values) of the enums the library's own files
    (``own``) define."""
    from pycparser import c_ast

    from wcetfit.scaffold.header import _tag_nodes

    for ext in getattr(ast, "ext", ()):
        coord = getattr(ext, "coord", None)
        if coord is None or not coord.file or os.path.abspath(coord.file) not in own:
            continue
        for node in _tag_nodes(ext):
            if isinstance(node, c_ast.Enum) and node.values is not None:
                yield ext, node


def _expand_and_evaluate(source: str, header: str, macros: dict[str, str],
                         enumerators: dict[str, int]) -> dict[str, int]:
    """Each macro's value: its body expanded by the preprocessor itself (function-like
    macros such as ``UINT32_C`` included), then :func:`evaluate`\\ d."""
    names = [n for n, body in macros.items()
             if body and _EXPRESSION_LIKE.match(body) and _balanced(body)]
    if not names or len(names) > _MOST_CONSTANTS:
        return {}
    lines = "".join(f"__wf_{i}__ = {n} ;\n" for i, n in enumerate(names))
    try:
        out = _run_cpp(source + lines, header, [])
    except TargetError as exc:
        log.debug("the constants of %s not expanded (%s)", header, exc)
        return {}
    values: dict[str, int] = {}
    for m in re.finditer(r"^__wf_(\d+)__ = (.*) ;$", out, re.M):
        value = evaluate(m.group(2), enumerators)
        if value is not None:
            values[names[int(m.group(1))]] = value
    return values


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# --- comments ------------------------------------------------------------------------

_COMMENT = re.compile(r"/\*(.*?)\*/|//([^\n]*)", re.S)
_DEFINE_LINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(?!\()")


def _comments(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of every comment, 0-based lines."""
    out = []
    for m in _COMMENT.finditer(text):
        first = text.count("\n", 0, m.start())
        last = first + m.group(0).count("\n")
        out.append((first, last, m.group(1) if m.group(1) is not None else m.group(2)))
    return out


def _clean(comment: str) -> str:
    """A comment's words: doxygen commands and the leading ``*`` of each line gone."""
    lines = [re.sub(r"^\s*\*+", "", ln) for ln in comment.splitlines()]
    text = " ".join(lines)
    text = re.sub(r"[\\@](brief|note|details|file)\b", " ", text)
    return " ".join(text.replace("*", " ").split())


def _first_sentence(comment: str) -> str:
    """Up to the first blank line or full stop: the part that says what a group is."""
    head = re.split(r"\n\s*\**\s*\n", comment.strip(), maxsplit=1)[0]
    return re.split(r"(?<=[.;])\s", _clean(head), maxsplit=1)[0]


def attached_comments(text: str) -> dict[str, str]:
    """Macro name -> the first sentences of the comments attached to its group: the
    maximal run of consecutive ``#define`` lines it is in, with the comment ending on
    the line just above the run (doxygen style), the one starting on the line just
    below it (zlib.h's style) and the one on its own line."""
    lines = text.splitlines()
    comments = _comments(text)
    ends = {c[1]: c[2] for c in comments}
    starts = {c[0]: c[2] for c in comments}
    on_line: dict[int, str] = {c[0]: c[2] for c in comments if c[0] == c[1]}
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        if not _DEFINE_LINE.match(lines[i]):
            i += 1
            continue
        first, names = i, []
        while i < len(lines) and _DEFINE_LINE.match(lines[i]):
            names.append((i, _DEFINE_LINE.match(lines[i]).group(1)))
            while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1                              # a body continued on the next line
            i += 1
        around = [ends.get(first - 1), starts.get(i)]
        group = " ".join(_first_sentence(c) for c in around if c)
        for line, name in names:
            own = on_line.get(line)
            out[name] = " ".join(filter(None, [group, _first_sentence(own) if own else ""]))
    return out


# --- values in words -----------------------------------------------------------------

_INT = r"(?<![\w.])(-?\d+)(?![\w]|\.\d)"
_RANGES = [re.compile(p) for p in (
    rf"\[\s*{_INT}\s*,\s*{_INT}\s*\]",                 # [0, 9]
    rf"(?i)\bbetween\s+{_INT}\s+and\s+{_INT}",         # between 0 and 9
    rf"(?i)\bfrom\s+{_INT}\s+to\s+{_INT}",             # from 0 to 9
    rf"{_INT}\s*\.\.\s*{_INT}",                        # 0..9
    rf"\(\s*{_INT}\s*-\s*{_INT}\s*\)",                 # (0-3)
)]
_LIST = re.compile(rf"{_INT}(?:\s*,\s*{_INT})*\s*,?\s+or\s+{_INT}")   # 128, 192 or 256


def _sentences(text: str) -> Iterable[str]:
    """The sentences of a file's comments (a doxygen ``\\param`` starts one)."""
    for _, _, comment in _comments(text):
        for para in re.split(r"\n\s*\**\s*\n|(?=[\\@]param\b)", comment):
            cleaned = _clean(para)
            yield from (s for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z\\@])", cleaned) if s)


# What a sentence naming a length says to exclude 0: "n >= 1", "n > 0", "len != 0",
# "must be positive", "at least one", "nonzero".  Operators must bind the name itself;
# words must come after it in the same sentence ("n is at least 1"), so that a sentence
# about another quantity naming the parameter in passing is less likely to count.
_POSITIVE_WORDS = (r"(must|shall|should|has to|needs? to|is required to)\s+(be\s+)?"
                   r"(strictly\s+)?(positive|non-?zero|greater than (zero|0)|at least (one|1)"
                   r"|>=?\s*[01]\b)|\bis\s+(always\s+)?(strictly\s+)?(positive|non-?zero)"
                   r"|\b(not|never)\s+(be\s+)?(zero|0)\b|\bat least (one|1)\b")


def _positive_in(sentence: str, name: str) -> str | None:
    """The words of ``sentence`` that exclude 0 from parameter ``name``, or None."""
    n = re.escape(name)
    m = re.search(rf"(?<![\w.>-]){n}\s*(>=\s*1|≥\s*1|>\s*0|!=\s*0|≠\s*0)(?!\w|\.\d)", sentence)
    if m:
        return m.group(0)
    m = re.search(rf"(?<![\w-]){n}(?![\w-])[^.;:]*?({_POSITIVE_WORDS})", sentence, re.I)
    return m.group(0) if m else None


def documented_values(paths: Iterable[str], names: Iterable[str],
                      function: str | None = None) -> dict[str, Documented]:
    """Per parameter name, the ranges and lists of values the comments of ``paths`` give
    in the sentences that name it (as a whole word), and the words that exclude 0 from
    it (:attr:`Documented.positive`).  A name shorter than 3 characters (``n``) is in
    too many sentences: only those that also name ``function`` count for it, and only
    for the words excluding 0."""
    names = list(names)
    wanted = {n: re.compile(rf"(?<![\w-]){re.escape(n)}(?![\w-])")    # a word: not "high-level"
              for n in names if len(n) >= 3}
    short = [n for n in names if 0 < len(n) < 3]
    fn_word = re.compile(rf"(?<![\w-]){re.escape(function)}(?![\w-])") if function else None
    found: dict[str, tuple[list, list, list]] = {n: ([], [], []) for n in wanted}
    positive: dict[str, list[str]] = {n: [] for n in names}
    for path in paths:
        for sentence in _sentences(_read(path)):
            for name, word in wanted.items():
                if word.search(sentence):
                    _values_in(sentence, *found[name])
                    said = _positive_in(sentence, name)
                    if said:
                        positive[name].append(said)
            if short and fn_word is not None and fn_word.search(sentence):
                for name in short:
                    said = _positive_in(sentence, name)
                    if said:
                        positive[name].append(said)
    out = {n: Documented(tuple(dict.fromkeys(v)), tuple(dict.fromkeys(r)),
                         tuple(dict.fromkeys(q)))
           for n, (v, r, q) in found.items() if v or r}
    for n, said in positive.items():
        if said:
            out[n] = dataclasses.replace(out.get(n, Documented()),
                                         positive=tuple(dict.fromkeys(said)))
    return out


def _values_in(sentence: str, values: list, ranges: list, quotes: list) -> None:
    rest = sentence
    for pattern in _RANGES:
        for m in pattern.finditer(rest):
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo < hi:
                ranges.append((lo, hi))
                quotes.append(m.group(0))
        rest = pattern.sub(" ", rest)
    for m in _LIST.finditer(rest):
        listed = [int(v) for v in re.findall(_INT, m.group(0))]
        if len(set(listed)) == len(listed):
            values.extend(listed)
            quotes.append(m.group(0))
