"""A function's prototype and the type declarations it needs, from the binary's DWARF.

A binary built with ``-g`` describes each function's parameters (names and types) and
every type they use.  wcetfit writes those types back as C: base types by their
encoding and size, typedefs by name, structs and unions field by field (bit-fields
included), enums with their values, arrays with their length and function pointers.
The same rule as for headers (:mod:`wcetfit.scaffold.header`) decides how much is
written: a struct a parameter points to or holds is defined in full, one reached only
through a pointer inside another struct is declared (``struct state;``).

Most system libraries are shipped without DWARF (it lives in separate -dbg packages);
:func:`declaration_from_dwarf` returns None for them and the caller asks for a header.
"""

from __future__ import annotations

import logging
from typing import Any

from wcetfit.errors import BinaryError, TargetError
from wcetfit.scaffold.declaration import KNOWN_TYPEDEFS, Declaration, Param

log = logging.getLogger(__name__)

# DWARF base type names (as gcc and clang write them) to the spelling cffi reads back.
_BASE_NAMES = {
    "char": "char", "signed char": "signed char", "unsigned char": "unsigned char",
    "short int": "short", "short unsigned int": "unsigned short",
    "int": "int", "unsigned int": "unsigned int",
    "long int": "long", "long unsigned int": "unsigned long",
    "long long int": "long long", "long long unsigned int": "unsigned long long",
    "_Bool": "_Bool", "bool": "_Bool", "float": "float", "double": "double",
    "long double": "long double",
}
# DW_ATE_* encodings: boolean 2, float 4, signed 5, signed_char 6, unsigned 7, unsigned_char 8
_BY_ENCODING = {
    (2, 1): "_Bool", (4, 4): "float", (4, 8): "double", (4, 16): "long double",
    (5, 1): "signed char", (5, 2): "short", (5, 4): "int", (5, 8): "long",
    (6, 1): "signed char", (7, 1): "unsigned char", (7, 2): "unsigned short",
    (7, 4): "unsigned int", (7, 8): "unsigned long", (8, 1): "unsigned char",
}
_QUALIFIERS = {"DW_TAG_const_type": "const", "DW_TAG_volatile_type": "volatile",
               "DW_TAG_restrict_type": "", "DW_TAG_atomic_type": ""}


def _name(die: Any) -> str | None:
    attr = die.attributes.get("DW_AT_name")
    if attr is None:
        return None
    v = attr.value
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _target(die: Any) -> Any | None:
    return die.get_DIE_from_attribute("DW_AT_type") if "DW_AT_type" in die.attributes \
        else None


def _origin(die: Any) -> Any:
    """The DIE that carries a concrete function's or parameter's name and type."""
    seen = 0
    while seen < 8:
        for attr in ("DW_AT_abstract_origin", "DW_AT_specification"):
            if attr in die.attributes:
                die = die.get_DIE_from_attribute(attr)
                break
        else:
            return die
        seen += 1
    return die


def declaration_from_dwarf(binary: str, names: list[str], address: int | None
                           ) -> Declaration | None:
    """The declaration of the function named one of ``names`` or starting at link-time
    ``address``; None when the binary has no DWARF (or none describing the function)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(binary, "rb") as f:
            elf = ELFFile(f)
            if elf.get_section_by_name(".debug_info") is None:
                return None
            dwarf = elf.get_dwarf_info()
            die = _find_function(dwarf, names, address)
            if die is None:
                return None
            return _Writer(binary).declaration(die)
    except OSError as exc:
        raise BinaryError(f"{binary}: {exc.strerror}") from None
    except ELFError as exc:
        raise BinaryError(f"{binary}: not a readable ELF file ({exc})") from None


def _find_function(dwarf: Any, names: list[str], address: int | None) -> Any | None:
    wanted = set(names)
    by_name = None
    for cu in dwarf.iter_CUs():
        for die in cu.iter_DIEs():
            if die.tag != "DW_TAG_subprogram" or "DW_AT_declaration" in die.attributes:
                continue
            low = die.attributes.get("DW_AT_low_pc")
            if address is not None and low is not None and low.value == address:
                return die
            origin = _origin(die)
            link = origin.attributes.get("DW_AT_linkage_name")
            link_name = link.value.decode(errors="replace") if link is not None else None
            if by_name is None and (_name(origin) in wanted or link_name in wanted):
                by_name = die
                if address is None:
                    return die
    return by_name


class _Writer:
    def __init__(self, binary: str):
        self.binary = binary
        self.lines: list[str] = []               # definitions, dependencies first
        self.forward: dict[str, None] = {}       # "struct tag" declared, not defined
        self.defined: set[str] = set()           # "struct tag", typedef names written
        self.busy: set[int] = set()              # definitions being written (recursion)

    def declaration(self, die: Any) -> Declaration:
        fn = _origin(die)
        name = _name(fn) or f"fn_{die.attributes['DW_AT_low_pc'].value:x}"
        params: list[Param] = []
        decls: list[str] = []
        # parameters of the concrete DIE (they point at the abstract ones), else the origin's
        children = [c for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"] \
            or [c for c in fn.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        if any(c.tag == "DW_TAG_unspecified_parameters" for c in fn.iter_children()):
            raise TargetError(f"{self.binary}: {name} is variadic (...) in its DWARF; "
                              "wcetfit calls fixed prototypes only")
        for i, child in enumerate(children):
            p = _origin(child)
            pname = _name(p) or f"arg{i + 1}"
            t = _target(p)
            if t is None:
                raise TargetError(f"{self.binary}: the DWARF of {name} gives parameter "
                                  f"{pname} no type; pass --header")
            self._need(t, need=True, follow_ptr=True)
            decls.append(self._decl(t, pname))
            params.append(Param(pname, self._decl(t, "").strip()))
        ret = _target(fn)
        if ret is not None:
            self._need(ret, need=False, follow_ptr=False)
        head = self._decl(ret, f"{name}({', '.join(decls) or 'void'})") if ret is not None \
            else f"void {name}({', '.join(decls) or 'void'})"
        cdef = "\n".join([f"{t};" for t in self.forward if t not in self.defined]
                         + self.lines)
        return Declaration(function=name, prototype=head + ";", cdef=cdef,
                           params=tuple(params), source=f"DWARF of {self.binary}")

    # -- declarators --

    def _spec(self, die: Any) -> str:
        """The type specifier of a named type (base, typedef, struct/union/enum)."""
        tag = die.tag
        if tag == "DW_TAG_base_type":
            return self._base(die)
        if tag == "DW_TAG_typedef":
            return _name(die) or "int"
        if tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_enumeration_type"):
            kind = {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union",
                    "DW_TAG_enumeration_type": "enum"}[tag]
            name = self._tag(kind, _name(die))
            if name:
                return f"{kind} {name}"
            return self._body(die, kind)      # anonymous: written where it is used
        if tag == "DW_TAG_unspecified_type":  # e.g. decltype(nullptr)
            return "void"
        raise TargetError(f"{self.binary}: DWARF type {tag} is not supported; pass --header")

    def _base(self, die: Any) -> str:
        name = _name(die) or ""
        if name in _BASE_NAMES:
            return _BASE_NAMES[name]
        enc = die.attributes.get("DW_AT_encoding")
        size = die.attributes.get("DW_AT_byte_size")
        key = (enc.value if enc else 0, size.value if size else 0)
        if key in _BY_ENCODING:
            return _BY_ENCODING[key]
        raise TargetError(f"{self.binary}: the DWARF base type {name!r} ({key[1]} bytes) "
                          "has no cffi equivalent; pass --header")

    def _decl(self, die: Any | None, inner: str) -> str:
        """C declaration of ``inner`` (a name, or an abstract declarator) of type ``die``."""
        if die is None:
            return f"void {inner}".rstrip()
        tag = die.tag
        if tag in _QUALIFIERS:
            t = _target(die)
            q = _QUALIFIERS[tag]
            if t is not None and t.tag == "DW_TAG_pointer_type":   # a const pointer
                return self._decl(t, f"{q} {inner}".strip() if q else inner)
            text = self._decl(t, inner)
            # a qualified array: its elements carry the qualifier already
            return f"{q} {text}" if q and not text.startswith(f"{q} ") else text
        if tag == "DW_TAG_pointer_type":
            t = _target(die)
            wrapped = f"*{inner}"
            if t is not None and t.tag in ("DW_TAG_array_type", "DW_TAG_subroutine_type"):
                wrapped = f"(*{inner})"
            return self._decl(t, wrapped)
        if tag == "DW_TAG_array_type":
            dims = ""
            for sub in die.iter_children():
                if sub.tag != "DW_TAG_subrange_type":
                    continue
                if "DW_AT_count" in sub.attributes:
                    dims += f"[{sub.attributes['DW_AT_count'].value}]"
                elif "DW_AT_upper_bound" in sub.attributes and \
                        isinstance(sub.attributes["DW_AT_upper_bound"].value, int):
                    dims += f"[{sub.attributes['DW_AT_upper_bound'].value + 1}]"
                else:
                    dims += "[]"
            return self._decl(_target(die), f"{inner}{dims or '[]'}")
        if tag == "DW_TAG_subroutine_type":
            args = []
            variadic = False
            for c in die.iter_children():
                if c.tag == "DW_TAG_formal_parameter":
                    args.append(self._decl(_target(c), "").strip())
                elif c.tag == "DW_TAG_unspecified_parameters":
                    variadic = True
            if variadic:
                args.append("...")
            return self._decl(_target(die), f"{inner}({', '.join(args) or 'void'})")
        return f"{self._spec(die)} {inner}".rstrip()

    # -- definitions --

    def _need(self, die: Any | None, need: bool, follow_ptr: bool) -> None:
        """Write the definitions ``die`` needs before anything that uses it (see the
        module's rule for ``need`` and ``follow_ptr``)."""
        if die is None:
            return
        tag = die.tag
        if tag in _QUALIFIERS or tag == "DW_TAG_array_type":
            self._need(_target(die), need, follow_ptr)
        elif tag == "DW_TAG_pointer_type":
            self._need(_target(die), follow_ptr, False)
        elif tag == "DW_TAG_subroutine_type":
            for c in die.iter_children():
                if c.tag == "DW_TAG_formal_parameter":
                    self._need(_target(c), False, False)
            self._need(_target(die), False, False)
        elif tag == "DW_TAG_typedef":
            name = _name(die)
            target = _target(die)
            if name in KNOWN_TYPEDEFS:
                return
            self._need(target, need, follow_ptr)
            if name and name not in self.defined:
                self.defined.add(name)
                self.lines.append(f"typedef {self._decl(target, name)};")
        elif tag in ("DW_TAG_structure_type", "DW_TAG_union_type",
                     "DW_TAG_enumeration_type"):
            kind = {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union",
                    "DW_TAG_enumeration_type": "enum"}[tag]
            name = self._tag(kind, _name(die))
            if die.offset in self.busy:
                return
            complete = "DW_AT_declaration" not in die.attributes
            if not name:                       # anonymous: its body is written inline
                self.busy.add(die.offset)
                self._need_members(die)
                self.busy.discard(die.offset)
                return
            key = f"{kind} {name}"
            if key in self.defined:
                return
            if (need or kind == "enum") and complete:
                self.busy.add(die.offset)
                self._need_members(die)
                self.busy.discard(die.offset)
                self.defined.add(key)
                self.lines.append(self._body(die, kind) + ";")
            elif kind != "enum":
                self.forward[key] = None

    def _need_members(self, die: Any) -> None:
        for m in die.iter_children():
            if m.tag == "DW_TAG_member":
                self._need(_target(m), True, False)

    def _tag(self, kind: str, name: str | None) -> str | None:
        """A tag the harness's own C defines becomes wf_<tag> (header.harness_tags)."""
        from wcetfit.scaffold.header import harness_tags

        return f"wf_{name}" if name and (kind, name) in harness_tags() else name

    def _body(self, die: Any, kind: str) -> str:
        name = self._tag(kind, _name(die))
        head = f"{kind} {name}" if name else kind
        if kind == "enum":
            items = [f"{_name(e)} = {e.attributes['DW_AT_const_value'].value}"
                     for e in die.iter_children() if e.tag == "DW_TAG_enumerator"]
            return f"{head} {{ {', '.join(items)} }}"
        fields = []
        for i, m in enumerate(c for c in die.iter_children() if c.tag == "DW_TAG_member"):
            text = self._decl(_target(m), _name(m) or f"wf_pad{i}")
            bits = m.attributes.get("DW_AT_bit_size")
            if bits is not None:
                text += f" : {bits.value}"
            fields.append(f"  {text};")
        return head + " {\n" + "\n".join(fields) + "\n}"
