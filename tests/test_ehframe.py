"""The direct `.eh_frame` reader (wcetfit.static.ehframe) against pyelftools' full
decoder, on the system's libraries: the same FDE ranges and the same fragments (FDEs
whose first CFA is not rsp+8, i.e. code entered by a jump: gcc's .cold parts)."""

from __future__ import annotations

import os

import pytest
from elftools.elf.elffile import ELFFile

from wcetfit.static import elfinfo
from wcetfit.static import ehframe

LIB = "/lib/x86_64-linux-gnu"
LIBRARIES = ["libz.so.1", "libm.so.6", "libbz2.so.1.0", "liblzma.so.5", "libexpat.so.1",
             "libcrypto.so.3", "libgmp.so.10", "libjpeg.so.62", "libpng16.so.16", "libc.so.6"]


def _both(path: str, monkeypatch):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".eh_frame")
        # the direct reader reads this library itself (no fall-back hides a refusal)
        assert ehframe.read_fdes(sec.data(), sec["sh_addr"])
        symbols = elfinfo.read_elf(path, with_fdes=False).symbols
        fast = elfinfo._fdes(elf, symbols)

        def refuse(*_a, **_k):
            raise ehframe.EhFrameUnsupported("forced: compare with pyelftools")
        monkeypatch.setattr(ehframe, "read_fdes", refuse)
        slow = elfinfo._fdes(elf, symbols)
        monkeypatch.undo()
    return fast, slow


@pytest.mark.slow
@pytest.mark.parametrize("name", LIBRARIES)
def test_direct_reader_equals_pyelftools(name, monkeypatch):
    path = os.path.join(LIB, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    (fdes, fragments), (want_fdes, want_fragments) = _both(path, monkeypatch)
    assert len(fdes) > 10, "the direct reader found (almost) no FDEs: it fell back?"
    assert fdes == want_fdes
    assert fragments == want_fragments


def test_unknown_instruction_is_refused_not_guessed():
    # a CIE (version 1, "zR", pcrel|sdata4) whose initial instructions use an opcode
    # the reader does not interpret (0x1c, DW_CFA_lo_user): refused, not skipped
    cie_body = (b"\0\0\0\0" + b"\x01" + b"zR\0" + b"\x01" + b"\x78" + b"\x10"
                + b"\x01" + b"\x1b" + b"\x1c\x00")
    cie = len(cie_body).to_bytes(4, "little") + cie_body
    with pytest.raises(ehframe.EhFrameUnsupported):
        ehframe.read_fdes(cie + b"\0\0\0\0", 0x1000)
