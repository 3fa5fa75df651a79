"""A function's prototype and the type declarations it needs, from a C header.

The header is preprocessed with ``gcc -E`` (so its macros, ``#include``\\ s and
configuration are resolved as a compiler would) with the GNU extensions pycparser does
not know defined away (``__attribute__``, ``__asm__``, ``__extension__``, ``__restrict``,
…), then parsed with pycparser.  From the function's declaration wcetfit follows every
type name it uses, transitively, and keeps the typedefs and struct/union/enum
definitions reached, in the header's own order (which is a valid declaration order).

A struct is defined in full when its fields matter: when a parameter points to it or
holds it, or another kept struct holds it by value.  A struct reached only through a
pointer inside another struct stays a forward declaration (``struct state;``): the
inputs cannot fill what they do not know, and the cdef stays short.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import logging
import os
import shutil
import subprocess
import sysconfig
from typing import Iterator

from wcetfit.errors import TargetError
from wcetfit.scaffold.declaration import KNOWN_TYPEDEFS, Declaration, Param

log = logging.getLogger(__name__)

# GNU C the parser does not know, removed by the preprocessor itself.  __int128 and
# _FloatN are spelled as types cffi cannot call with; they only matter (and then fail
# the harness build, loudly) when the function's own types use them.
_GNU_DEFINES = (
    "__attribute__(x)=", "__asm__(x)=", "__asm(x)=", "__extension__=", "__restrict=",
    "__restrict__=", "__inline=inline", "__inline__=inline", "__const=const",
    "__volatile__=volatile", "__signed__=signed", "__builtin_va_list=char*",
    "_Noreturn=", "__typeof__(x)=int", "__alignof__(x)=8", "_Float128=long double",
    "_Float64x=long double", "_Float64=double", "_Float32=float", "_Float32x=double",
    "__float128=long double", "_Float16=short", "__int128=long long",
)


def preprocess(header: str, *, compiler: str = "gcc") -> str:
    """The header after ``gcc -E``, GNU extensions defined away.  <stddef.h> and
    <stdio.h> come first, as many library headers (libjpeg's) expect."""
    if not os.path.isfile(header):
        raise TargetError(f"{header}: no such header file")
    if shutil.which(compiler) is None:
        raise TargetError(f"{compiler} not found: it preprocesses the header (install gcc)")
    here = os.path.dirname(os.path.abspath(header))
    # the header's directory, and after the system's its parent: a library's headers in
    # a directory of their own include each other by it (libxml2's xmlstring.h:
    # <libxml/xmlversion.h>, /usr/include/libxml2 being no standard directory)
    return _cpp(include_source(header), header,
                ["-I", here, "-idirafter", os.path.dirname(here)], compiler)


def include_source(header: str) -> str:
    """The C that :func:`preprocess` runs through the preprocessor: the header after
    <stddef.h> and <stdio.h>, with _GNU_SOURCE defined first: a library exports its GNU
    functions whatever a program asks for, and glibc's headers declare them only then
    (string.h's strverscmp: "declares no function strverscmp", and a wrapper header
    defining it came after <stdio.h> had fixed the feature macros)."""
    return (f"#define _GNU_SOURCE 1\n#include <stddef.h>\n#include <stdio.h>\n"
            f"#include \"{os.path.abspath(header)}\"\n")


def _cpp(source: str, header: str, flags: list[str], compiler: str = "gcc") -> str:
    cmd = [compiler, "-E", *flags, *(f"-D{d}" for d in _GNU_DEFINES), "-x", "c", "-"]
    try:
        out = subprocess.run(cmd, input=source, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise TargetError(f"{header}: the preprocessor did not finish in 60 s") from None
    if out.returncode != 0:
        first = next((ln for ln in out.stderr.splitlines() if "error" in ln),
                     out.stderr.strip().splitlines()[0] if out.stderr.strip() else "")
        hint = ("; a header it includes is elsewhere: name its directory in gcc's "
                "CPATH (CPATH=DIR wcetfit init …)" if "No such file or directory" in first
                else "")
        raise TargetError(f"{header}: gcc -E failed: {first.strip()}{hint}")
    return out.stdout


def parse_header(header: str) -> object:
    """pycparser's AST of the preprocessed header (TargetError when it does not parse)."""
    from pycparser import c_parser

    text = preprocess(header)
    try:
        return c_parser.CParser().parse(text, filename=os.path.basename(header))
    except Exception as exc:  # pycparser's ParseError, or its lexer's errors
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        said = _compiler_says(header)
        raise TargetError(f"{header}: cannot parse it after gcc -E ({line})"
                          + (f"; gcc says: {said}" if said else "")
                          + "; write the prototype and cdef in wcetfit.toml by hand, or pass "
                          "--header with a header holding plain C declarations") from None


def _compiler_says(header: str, compiler: str = "gcc") -> str | None:
    """gcc's first error on the header, compiled as :func:`preprocess` reads it: the line
    and the name pycparser's "Invalid declaration" leaves out (an unknown type name:
    "lib.h:2:35: error: unknown type name 'my_size_t'")."""
    if shutil.which(compiler) is None:
        return None
    here = os.path.dirname(os.path.abspath(header))
    try:
        out = subprocess.run([compiler, "-fsyntax-only", "-I", here, "-idirafter",
                              os.path.dirname(here), "-x", "c", "-"],
                             input=include_source(header), capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = next((ln for ln in out.stderr.splitlines() if ": error: " in ln), None)
    if first is None:
        return None
    # the path as the user gave it, not the absolute one gcc prints
    return first.replace(os.path.abspath(header), header).strip()


@functools.lru_cache(maxsize=1)
def harness_tags() -> frozenset[tuple[str, str]]:
    """The struct/union/enum tags the call harness's C defines before the cdef (its
    prelude's headers and <Python.h>, which brings glibc's ``struct tm``).  The cdef is pasted into that C, so a library
    type with one of these tags is declared as ``wf_<tag>`` instead: the same layout,
    a name that does not clash."""
    from pycparser import c_ast, c_parser

    from wcetfit.timing.prototype import _C_PRELUDE   # the one list of the harness's headers

    if shutil.which("gcc") is None:
        return frozenset()
    # cffi compiles the harness inside its own C file, which includes <Python.h> first
    include = sysconfig.get_paths()["include"]
    try:
        ast = c_parser.CParser().parse(_cpp("#include <Python.h>\n" + _C_PRELUDE,
                                            "the harness prelude", ["-I", include]))
    except Exception as exc:  # pycparser's errors: fall back to the prelude alone
        log.debug("harness tags from <Python.h> not parsed (%s)", exc)
        ast = c_parser.CParser().parse(_cpp(_C_PRELUDE, "the harness prelude", []))
    return frozenset((_kind(t), t.name) for ext in ast.ext for t in _tag_nodes(ext)
                     if t.name and ((t.values if isinstance(t, c_ast.Enum) else t.decls)
                                    is not None))


def declaration_from_header(header: str, names: list[str]) -> Declaration:
    """The declaration of the first of ``names`` the header declares (a function's symbol
    name and its aliases)."""
    from wcetfit.scaffold.constants import documented_values, library_constants

    ast = parse_header(header)
    decl = _Extractor(ast, header).declaration(names)
    # what the header says about values, for the inputs to start from (not needed for
    # the prototype: empty when it cannot be read)
    constants, own = library_constants(header, ast)
    return dataclasses.replace(decl, constants=constants, documented=documented_values(
        own, [p.name for p in decl.params], decl.function))


# --- walking the AST -----------------------------------------------------------------

def _tag_nodes(node: object) -> Iterator[object]:
    """Every struct/union/enum node inside ``node``."""
    from pycparser import c_ast

    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
            yield n
        stack.extend(child for _, child in n.children())


def _kind(node: object) -> str:
    from pycparser import c_ast

    return ("struct" if isinstance(node, c_ast.Struct) else
            "union" if isinstance(node, c_ast.Union) else "enum")


class _Extractor:
    def __init__(self, ast: object, header: str):
        from pycparser import c_ast

        self.ast = ast
        self.header = header
        self.typedefs: dict[str, int] = {}           # typedef name -> ext index
        self.tags: dict[tuple[str, str], int] = {}   # (kind, tag) -> ext index of its body
        self.enumerators: dict[str, int] = {}        # enum constant -> ext index
        self.functions: dict[str, int] = {}
        for i, ext in enumerate(ast.ext):
            if isinstance(ext, c_ast.Typedef):
                self.typedefs.setdefault(ext.name, i)
            elif isinstance(ext, c_ast.Decl) and isinstance(ext.type, c_ast.FuncDecl) \
                    and ext.name:
                self.functions.setdefault(ext.name, i)
            for t in _tag_nodes(ext):
                has_body = (t.values is not None) if isinstance(t, c_ast.Enum) \
                    else t.decls is not None
                if has_body and t.name:
                    self.tags.setdefault((_kind(t), t.name), i)
                if isinstance(t, c_ast.Enum) and t.values is not None:
                    for e in t.values.enumerators:
                        self.enumerators.setdefault(e.name, i)
        self.needed: set[int] = set()
        self.forward: dict[tuple[str, str], None] = {}
        self._seen: set[tuple[int, bool, bool]] = set()

    # -- the function --

    def declaration(self, names: list[str]) -> Declaration:
        from pycparser import c_ast

        name = next((n for n in names if n in self.functions), None)
        if name is None:
            # a name within the one asked for, or the other way round, first: zlib.h's
            # adler32 for libdeflate_adler32 (difflib offered deflateSetHeader)
            within = sorted((f for f in self.functions
                             if len(f) >= 4 and (f in names[0] or names[0] in f)),
                            key=lambda f: (not (names[0].endswith(f) or f.endswith(names[0])),
                                           -len(f)))
            close = list(dict.fromkeys(within + difflib.get_close_matches(
                names[0], list(self.functions), n=3)))[:3]
            raise TargetError(f"{self.header} declares no function {' or '.join(names)}"
                              + (f" (close: {', '.join(close)})" if close else ""))
        decl = copy.deepcopy(self.ast.ext[self.functions[name]])
        fdecl = decl.type
        params = self._params(fdecl)
        for p in params:
            # A parameter declared as an array is a pointer (C11 6.7.6.3): brotli's
            # `const uint8_t encoded_buffer[encoded_size]` (BROTLI_ARRAY_PARAM), whose
            # size expression cffi cannot parse, and init refused the header
            if isinstance(p.type, c_ast.ArrayDecl):
                p.type = c_ast.PtrDecl(quals=list(p.type.dim_quals or []), type=p.type.type)
        for p in params:
            self._walk(p.type, need=True, follow_ptr=True)
        self._walk(fdecl.type, need=False, follow_ptr=False)
        self._rename(decl)
        decl.storage, decl.funcspec = [], []
        gen = _Generator()
        spelled: list[Param] = []
        written = _written_names(self.header, name, [_pointer_depth(p.type) for p in params]) \
            if any(not p.name for p in params) else None
        for i, p in enumerate(params):
            pname = p.name or (written[i] if written else f"arg{i + 1}")
            if not p.name:
                _set_declname(p, pname)
            spelled.append(Param(pname, gen._generate_type(p.type, emit_declname=False).strip()))
        prototype = " ".join(gen.visit(decl).split()) + ";"
        initializers: dict[str, str] = {}
        for p, sp in zip(params, spelled):
            init = self._initializer(name, p)
            if init is not None:
                initializers[sp.name] = init
                other = copy.deepcopy(self.ast.ext[self.functions[init]])
                self._rename(other)
                other.storage, other.funcspec = [], []
                prototype += " " + " ".join(gen.visit(other).split()) + ";"
        return Declaration(function=name, prototype=prototype, cdef=self._cdef(),
                           params=tuple(spelled), source=f"header {self.header}",
                           initializers=initializers, returns=self._type_names(fdecl.type))

    def _type_names(self, node: object) -> tuple[str, ...]:
        """The names a (returned) type goes by, outermost first: the typedefs it is
        declared through and the tag of the enum, struct or union under them (liblzma's
        ``lzma_ret``, a typedef of an enum without a tag; expat's ``enum XML_Status``).
        Empty for a pointer or a built-in type."""
        from pycparser import c_ast

        names: list[str] = []
        while isinstance(node, c_ast.TypeDecl) and len(names) < 16:
            inner = node.type
            if isinstance(inner, (c_ast.Enum, c_ast.Struct, c_ast.Union)):
                names += [inner.name] if inner.name else []
                break
            if not (isinstance(inner, c_ast.IdentifierType) and len(inner.names) == 1
                    and inner.names[0] in self.typedefs):
                break
            names.append(inner.names[0])
            node = self.ast.ext[self.typedefs[inner.names[0]]].type
        return tuple(names)

    def _initializer(self, function: str, param: object) -> str | None:
        """The header's function that sets up what ``param`` points to, when it is a
        library's own struct: one of the header's functions named for initialising
        (``init``) whose only parameter is a pointer to the same struct; of several, the
        one sharing most words with ``function`` (nettle's sha256_update takes a struct
        sha256_ctx, which sha256_init and sha224_init both set up).  None when there is
        none.  A context of random fields made nettle's sha256_update crash on 114 of 218
        inputs (its index into the block beyond the block)."""
        from pycparser import c_ast

        spelt = _pointee_struct(param)
        if spelt is None:
            return None
        words = set(function.lower().split("_"))
        found = []
        for other, i in self.functions.items():
            if other == function or "init" not in other.lower() \
                    or "deinit" in other.lower():
                continue
            fdecl = self.ast.ext[i].type
            if not isinstance(fdecl, c_ast.FuncDecl) or fdecl.args is None:
                continue
            ps = [q for q in fdecl.args.params if not isinstance(q, c_ast.EllipsisParam)]
            if len(ps) == 1 and _pointee_struct(ps[0]) == spelt:
                found.append((-len(words & set(other.lower().split("_"))), len(other), other))
        return min(found)[2] if found else None

    def _params(self, fdecl: object) -> list:
        from pycparser import c_ast

        if fdecl.args is None:
            return []
        params = list(fdecl.args.params)
        if any(isinstance(p, c_ast.EllipsisParam) for p in params):
            raise TargetError(f"{self.header}: the function is variadic (...); wcetfit "
                              "calls fixed prototypes only")
        if len(params) == 1 and isinstance(params[0], c_ast.Typename) and \
                isinstance(params[0].type, c_ast.TypeDecl) and \
                isinstance(params[0].type.type, c_ast.IdentifierType) and \
                params[0].type.type.names == ["void"]:
            return []
        return params

    def _rename(self, decl: object) -> None:
        """Tags the harness's own C defines become wf_<tag> (see :func:`harness_tags`)."""
        clash = harness_tags()
        for node in [decl] + [self.ast.ext[i] for i in sorted(self.needed)]:
            for t in _tag_nodes(node):
                if t.name and (_kind(t), t.name) in clash:
                    t.name = f"wf_{t.name}"
        self.forward = {(k, f"wf_{n}" if (k, n) in clash else n): None for k, n in self.forward}

    # -- following types --

    def _walk(self, node: object, need: bool, follow_ptr: bool) -> None:
        """Keep what ``node``'s type needs.  ``need``: the type is used by value (its
        definition is needed); ``follow_ptr``: a pointer's target is used by value too
        (a parameter's pointee: the inputs fill its fields)."""
        from pycparser import c_ast

        if node is None:
            return
        if isinstance(node, c_ast.PtrDecl):
            self._walk(node.type, need=follow_ptr, follow_ptr=False)
        elif isinstance(node, c_ast.ArrayDecl):
            self._walk(node.type, need, follow_ptr)
            self._walk_expr(node.dim)
        elif isinstance(node, (c_ast.TypeDecl, c_ast.Typename)):
            self._walk(node.type, need, follow_ptr)
        elif isinstance(node, c_ast.Decl):
            self._walk(node.type, need, follow_ptr)
            self._walk_expr(node.bitsize)
        elif isinstance(node, c_ast.FuncDecl):      # a function pointer's type: names only
            for p in (node.args.params if node.args is not None else []):
                self._walk(p, False, False)
            self._walk(node.type, False, False)
        elif isinstance(node, c_ast.IdentifierType):
            for n in node.names:
                if n in self.typedefs and (n not in KNOWN_TYPEDEFS or self._own(n)):
                    self._keep(self.typedefs[n], need, follow_ptr)
        elif isinstance(node, (c_ast.Struct, c_ast.Union)):
            if node.decls is not None:
                for d in node.decls:
                    self._walk(d, True, False)
            elif node.name:
                key = (_kind(node), node.name)
                if need and key in self.tags:
                    self._keep(self.tags[key], True, False)
                elif key not in self.tags or self.tags[key] not in self.needed:
                    self.forward[key] = None
        elif isinstance(node, c_ast.Enum):
            if node.values is not None:
                for e in node.values.enumerators:
                    self._walk_expr(e.value)
            elif node.name and ("enum", node.name) in self.tags:
                self._keep(self.tags[("enum", node.name)], True, False)

    def _own(self, typedef: str) -> bool:
        """The header itself (not a system header it includes) defines this standard
        name: keep its definition (an old ``typedef int bool;`` is not cffi's _Bool;
        if it clashes with the harness's own, the harness build says so)."""
        coord = getattr(self.ast.ext[self.typedefs[typedef]], "coord", None)
        return coord is not None and bool(coord.file) and \
            os.path.abspath(coord.file) == os.path.abspath(self.header)

    def _walk_expr(self, expr: object) -> None:
        """Enum constants and sizeof types inside an array size or enumerator value."""
        from pycparser import c_ast

        if expr is None:
            return
        stack = [expr]
        while stack:
            n = stack.pop()
            if isinstance(n, c_ast.ID) and n.name in self.enumerators:
                self._keep(self.enumerators[n.name], True, False)
            elif isinstance(n, c_ast.Typename):
                self._walk(n, True, False)
                continue
            stack.extend(child for _, child in n.children())

    def _keep(self, index: int, need: bool, follow_ptr: bool) -> None:
        if (index, need, follow_ptr) in self._seen:
            return
        self._seen.add((index, need, follow_ptr))
        self.needed.add(index)
        ext = self.ast.ext[index]
        from pycparser import c_ast

        if isinstance(ext, c_ast.Typedef):
            self._walk(ext.type, need, follow_ptr)
        else:   # a tag definition (struct S {...};), or a declaration holding one
            for t in _tag_nodes(ext):
                self._walk(t, True, False)

    # -- the cdef --

    def _cdef(self) -> str:
        gen = _Generator()
        defined = set()
        for i in sorted(self.needed):
            for t in _tag_nodes(self.ast.ext[i]):
                if t.name:
                    defined.add((_kind(t), t.name))
        lines = [f"{kind} {tag};" for kind, tag in self.forward
                 if (kind, tag) not in defined and kind != "enum"]
        for i in sorted(self.needed):
            ext = self.ast.ext[i]
            lines.append(gen.visit(_without_storage(ext)).strip() + ";")
        return "\n".join(lines)


def _without_storage(ext: object) -> object:
    from pycparser import c_ast

    if isinstance(ext, c_ast.Decl) and (ext.storage or ext.funcspec):
        ext = copy.copy(ext)
        ext.storage, ext.funcspec = [], []
    return ext


_C_WORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while _Bool OF ZEXPORT ZEXTERN
""".split())


def _written_names(header: str, function: str, depths: list[int]) -> list[str] | None:
    """Names for an unnamed declaration (``crc32_combine(uLong, uLong, off_t)``) from a
    prototype of the same function the header's text writes with them, often in the
    comment documenting it (zlib.h: ``crc32_combine OF((uLong crc1, uLong crc2, z_off_t
    len2))``).  Used only when the parameter count and each one's pointer depth agree and
    every parameter is named; else None (the parameters stay ``argN``)."""
    import re

    try:
        with open(header, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for m in re.finditer(rf"\b{re.escape(function)}\s*(?:[A-Z_][A-Z0-9_]*\s*)?\(", text):
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        inner = text[m.end():end - 1].strip()
        while inner.startswith("(") and inner.endswith(")"):     # OF((...))
            inner = inner[1:-1].strip()
        parts = inner.split(",") if inner else []
        if len(parts) != len(depths) or any("(" in q or "[" in q for q in parts):
            continue
        names = []
        for part, want in zip(parts, depths):
            words = re.findall(r"[A-Za-z_]\w*", part)
            if len(words) < 2 or words[-1] in _C_WORDS or part.count("*") != want or \
                    not re.search(rf"\b{words[-1]}\s*$", part):
                break
            names.append(words[-1])
        if len(names) == len(depths) and len(set(names)) == len(names):
            return names
    return None


def _pointer_depth(node: object) -> int:
    """How many pointer levels a parameter's type has (``const char **p``: 2)."""
    from pycparser import c_ast

    n = 0
    while not isinstance(node, c_ast.TypeDecl) and hasattr(node, "type"):
        n += isinstance(node, c_ast.PtrDecl)
        node = node.type
    return n


def _set_declname(param: object, name: str) -> None:
    """Give an unnamed parameter a name (its innermost TypeDecl carries it)."""
    from pycparser import c_ast

    param.name = name
    node = param.type
    while not isinstance(node, c_ast.TypeDecl):
        node = node.type
    node.declname = name


def _pointee_struct(param: object) -> str | None:
    """The tag of the struct a non-const parameter points to ("sha256_ctx" for ``struct
    sha256_ctx *ctx``), None for anything else (a typedef'd pointer is left alone: it is
    read as an opaque handle)."""
    from pycparser import c_ast

    t = getattr(param, "type", None)
    if not isinstance(t, c_ast.PtrDecl) or not isinstance(t.type, c_ast.TypeDecl):
        return None
    if "const" in (t.type.quals or []):
        return None
    inner = t.type.type
    return inner.name if isinstance(inner, c_ast.Struct) and inner.name else None


class _Generator:
    """pycparser's C generator, except that a struct body shared by several declarators
    (``typedef struct S {…} S_t, *S_p;``) is written once; later uses name it."""

    def __new__(cls):  # built lazily: pycparser is imported only when a header is parsed
        from pycparser import c_ast, c_generator

        class Gen(c_generator.CGenerator):
            def __init__(self) -> None:
                super().__init__()
                self.done: dict[int, str] = {}

            def visit_Typedef(self, n):   # noqa: N802 (pycparser's visitor names)
                inner = n.type
                while isinstance(inner, (c_ast.PtrDecl, c_ast.ArrayDecl, c_ast.TypeDecl)):
                    inner = inner.type
                out = super().visit_Typedef(n)
                if isinstance(inner, (c_ast.Struct, c_ast.Union, c_ast.Enum)) \
                        and not inner.name and isinstance(n.type, c_ast.TypeDecl):
                    self.done.setdefault(id(inner), n.name)
                return out

            def _generate_struct_union_enum(self, n, name):
                if id(n) in self.done:
                    return self.done[id(n)]
                out = super()._generate_struct_union_enum(n, name)
                body = n.values if isinstance(n, c_ast.Enum) else n.decls
                if body is not None and n.name:
                    self.done[id(n)] = f"{name} {n.name}"
                return out

        return Gen()
