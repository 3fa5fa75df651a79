"""The differential check's comparisons: what the instrumented copy's call and the
original's may be compared by, and the reason for every mismatch.

The two calls run on the same argument bytes and, for the binary's writable pages, the
same initial state.  What they may legitimately differ in is what the program cannot
see through the function's contract: an allocating function returns a fresh object
each time, at another address.  So a returned pointer is compared

* by its address, when both point into the same place of the argument memory (``strchr``
  returns a pointer into its argument);
* by what it points to, when both point elsewhere (a fresh object): a ``char *`` by the
  NUL-terminated string, any other complete type by ``sizeof`` its pointee;
* not at all beyond NULL-ness, where the prototype says nothing of its size (``void *``,
  an incomplete struct): logged.

An out-parameter of type ``T **`` (``char **output``: libidn2's ``idn2_to_ascii_8z``,
``getline``, ``asprintf``-like APIs) receives a fresh object's address the same way, in the
argument memory: a pointer the call stored there outside the arguments is compared by what
it points to, as a returned one, and its address is left out of the memory comparison.
The two calls' heaps are alike but not the same (the counting process allocates between
the fork and its own call): idn2's two strings were 10 MB apart.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any, Sequence

from wcetfit.errors import SelfCheckError
from wcetfit.model import hexaddr
from wcetfit.numbering import input_label

log = logging.getLogger(__name__)

# A returned string longer than this is compared on its first MAX_STRING bytes only.
MAX_STRING = 1 << 20
_CHARS = {"char", "signed char", "unsigned char", "int8_t", "uint8_t"}


@dataclass(frozen=True)
class ReturnKind:
    """How the prototype's return type is compared."""

    pointer: bool
    item: str = ""          # the pointee's C type
    item_size: int = 0      # bytes compared behind a non-string pointer (0: not compared)
    string: bool = False

    @staticmethod
    def of(ffi: Any, result: str) -> "ReturnKind":
        if result == "void":
            return ReturnKind(False)
        t = ffi.typeof(result)
        if t.kind != "pointer":
            return ReturnKind(False)
        item = t.item
        name = item.cname
        if name.replace("const ", "") in _CHARS:
            return ReturnKind(True, name, 1, string=True)
        try:
            size = ffi.sizeof(item)
        except Exception:  # noqa: BLE001 - cffi's error for void or an incomplete struct
            size = 0
        return ReturnKind(True, name, size)


def out_pointer_kinds(ffi: Any, arg_types: Sequence[str]) -> dict[int, ReturnKind]:
    """Arguments of type ``T **`` (argument index → how a fresh ``T *`` stored through
    them is compared: as a returned ``T *`` would be)."""
    out: dict[int, ReturnKind] = {}
    for i, t in enumerate(arg_types):
        try:
            ct = ffi.typeof(t)
        except Exception:  # noqa: BLE001 - cffi's error for a type it cannot parse
            continue
        if ct.kind == "pointer" and ct.item.kind == "pointer":
            out[i] = ReturnKind.of(ffi, ct.item.cname)
    return out


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b


def first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _in_arguments(pack: Any, address: int) -> tuple[int, int] | None:
    """(buffer index, offset) of ``address`` inside the pack's argument memory."""
    for k, b in enumerate(getattr(pack, "buffers", ())):
        if b.address <= address < b.address + max(b.size, 1):
            return k, address - b.address
    return None


def _c_string(address: int) -> bytes:
    # ctypes.string_at stops at the NUL; bounded so a missing terminator cannot run away.
    return ctypes.string_at(address)[:MAX_STRING]


@dataclass(frozen=True)
class Outcome:
    """What one call left that the other must match: picklable (the original's call runs
    in a forked process and sends it back)."""

    ret: Any                        # the return value as Python (int for a pointer)
    where: tuple[int, int] | None   # a returned pointer into the arguments: (buffer, offset)
    content: bytes | None           # what a returned fresh pointer points to (None: not read)
    args: tuple[bytes, ...]         # argument memory afterwards
    data: tuple[bytes, ...]         # the binary's writable pages afterwards
    # fresh objects the call stored the address of in a T ** argument: (buffer, offset,
    # what the pointer points to; None: the type gives no size, not compared)
    fresh: tuple[tuple[int, int, bytes | None], ...] = ()


def _pointee(kind: ReturnKind, address: int) -> bytes | None:
    if kind.string:
        return _c_string(address)
    if kind.item_size:
        return ctypes.string_at(address, kind.item_size)
    return None


def outcome(kind: ReturnKind | None, ret: Any, pack: Any, args: Sequence[bytes],
            data: Sequence[bytes], *, out_kinds: dict[int, ReturnKind] | None = None,
            before: Sequence[bytes] | None = None) -> Outcome:
    """What the call left; ``out_kinds`` (:func:`out_pointer_kinds`) and ``before`` (the
    argument memory before the call) find the fresh objects stored through ``T **``
    arguments."""
    where = content = None
    if kind is not None and kind.pointer and ret:
        where = _in_arguments(pack, ret)
        if where is None:
            content = _pointee(kind, ret)
    fresh: list[tuple[int, int, bytes | None]] = []
    for k, b in enumerate(getattr(pack, "buffers", ()) if out_kinds and before else ()):
        item = out_kinds.get(b.arg) if b.arg is not None else None
        if item is None or b.address % 8:
            continue
        now, was = args[k], before[k]
        for off in range(0, len(now) - 7, 8):
            if now[off:off + 8] == was[off:off + 8]:
                continue
            address = int.from_bytes(now[off:off + 8], "little")
            if address and _in_arguments(pack, address) is None:
                fresh.append((k, off, _pointee(item, address)))
    return Outcome(ret, where, content, tuple(args), tuple(data), tuple(fresh))


def check_same_result(kind: ReturnKind | None, c: Outcome, o: Outcome, index: int,
                      fn: str) -> None:
    """Raise SelfCheckError, with the reason, unless the two return values agree."""
    head = f"differential check for {input_label(index)}: {fn}"
    ret, ret_o = c.ret, o.ret
    if kind is None or not kind.pointer:
        if not _same_scalar(ret, ret_o):
            raise SelfCheckError(f"{head}: the instrumented copy returned {ret!r}, the "
                                 f"original {ret_o!r}")
        return
    if not ret or not ret_o:
        if bool(ret) != bool(ret_o):
            raise SelfCheckError(f"{head}: one call returned NULL, the other a pointer "
                                 f"(copy {hexaddr(ret or 0)}, original {hexaddr(ret_o or 0)})")
        return
    if c.where is not None or o.where is not None:
        if c.where != o.where:
            raise SelfCheckError(f"{head}: returned pointers to different places: copy "
                                 f"{_where(c.where, ret)}, original {_where(o.where, ret_o)}")
        return                       # the same place of identical argument memory
    if c.content is None:
        if ret != ret_o:
            log.debug("%s: input %d returned two different %s pointers; the prototype gives "
                      "no size, so what they point to is not compared", fn, index, kind.item)
        return
    if c.content != o.content:
        a, b = c.content, o.content or b""
        what = "strings" if kind.string else f"objects of type {kind.item}"
        raise SelfCheckError(
            f"{head}: returned two {what} outside the arguments (fresh objects, compared "
            f"by content, not address) that differ at byte {first_difference(a, b)}: "
            f"copy {a[:40]!r}, original {b[:40]!r}")


def _where(loc: tuple[int, int] | None, address: int) -> str:
    if loc is None:
        return f"{hexaddr(address)} (outside the arguments)"
    return f"argument buffer {loc[0]} byte {loc[1]}"


def _without_fresh(c: Outcome, o: Outcome, head: str) -> tuple[tuple[bytes, ...],
                                                                 tuple[bytes, ...]]:
    """Both calls' argument memory with the addresses of fresh objects stored through
    ``T **`` arguments blanked, once what they point to agrees (SelfCheckError when it
    does not).  A slot only one call stored a fresh object in stays: the byte comparison
    reports it."""
    theirs = {(k, off): content for k, off, content in o.fresh}
    after_c, after_o = list(c.args), list(o.args)
    for k, off, content in c.fresh:
        if (k, off) not in theirs:
            continue
        other = theirs[(k, off)]
        if content is not None and other is not None and content != other:
            raise SelfCheckError(
                f"{head}: stored two objects outside the arguments through argument "
                f"buffer {k} byte {off} (fresh objects, compared by content, not address) "
                f"that differ at byte {first_difference(content, other)}: copy "
                f"{content[:40]!r}, original {other[:40]!r}")
        blank = bytes(8)
        after_c[k] = after_c[k][:off] + blank + after_c[k][off + 8:]
        after_o[k] = after_o[k][:off] + blank + after_o[k][off + 8:]
    return tuple(after_c), tuple(after_o)


def _stored_pointer(a: bytes, b: bytes, off: int) -> str:
    """What to add when the two differing words around ``off`` both read as user-space
    addresses: the function stored a pointer to memory it allocated (libgmp's mpz_powm
    reallocating its result's limbs: ``_mp_d``), and the two calls' heaps differ."""
    start = off - off % 8
    words = [int.from_bytes(x[start:start + 8], "little") for x in (a, b)]
    if len(a) < start + 8 or len(b) < start + 8 or \
            not all(USER_LOW <= w < USER_HIGH for w in words):
        return ""
    return (f"; both are addresses (at byte {start}: {words[0]:#x}, {words[1]:#x}): the "
            f"function stored a pointer to memory it allocated into an argument's struct "
            f"(a result object grown by realloc), and the two calls' heaps give different "
            f"addresses: make the object large enough in generate() that the call does not "
            f"allocate (libgmp: mpz_init2 with room for the result), or pass it as a T ** "
            f"the function fills, which is compared by content")


# User-space addresses on x86-64 Linux: above the lowest mappable page, below the
# canonical hole.
USER_LOW = 0x10000
USER_HIGH = 0x800000000000


def check_same_memory(c: Outcome, o: Outcome, ranges: Sequence[tuple[int, int]],
                      binary: Any, index: int, fn: str) -> None:
    """Argument memory and the binary's writable pages after the two calls."""
    head = f"differential check for {input_label(index)}: {fn}"
    after_c, after_o = _without_fresh(c, o, head)
    if after_c != after_o:
        k = next(k for k, (x, y) in enumerate(zip(after_c, after_o)) if x != y)
        off = first_difference(after_c[k], after_o[k])
        raise SelfCheckError(
            f"{head}: argument memory after the instrumented copy differs from the "
            f"original's (buffer {k}, byte {off}: copy wrote {after_c[k][off:off + 8].hex()}, "
            f"original {after_o[k][off:off + 8].hex()})"
            + _stored_pointer(after_c[k], after_o[k], off))
    for (a, _n), x, y in zip(ranges, c.data, o.data):
        if x != y:
            off = first_difference(x, y)
            raise SelfCheckError(
                f"{head}: left different data in the binary's writable memory at link-time "
                f"address {hexaddr(binary.link_time(a + off))} (copy "
                f"{x[off:off + 8].hex()}, original {y[off:off + 8].hex()}; both calls "
                "started from the same process state after a warm-up call, so this is state "
                "the function draws anew on every call, e.g. a random seed or a time)")
