"""Code angr's lifter cannot decode at all, at a branch target or a function's start.

glibc selects AVX-512 (EVEX) string functions on CPUs that have it: its memcmp branches
`ja` to a block whose first instruction is `vmovdqu64`, its memchr falls through a `je`
into one, and its rawmemchr starts with one.  VEX knows no EVEX instruction, so CFGFast made no block there: the branch was
taken for a tail call into nothing and the function's recovery failed with "no code
could be decoded" (every test that models libc's strdup, on such a CPU).  Capstone
decodes both now.  The test builds the two shapes; it only models them, so the CPU
running it needs no AVX-512."""

from __future__ import annotations

import shutil
import subprocess

import pytest

SOURCE = r"""
__attribute__((naked)) void f(void) {
  __asm__("cmp $0x20, %rdx\n\tja 1f\n\tmov $1, %eax\n\tret\n"
          "1:\n\tvmovdqu64 (%rsi), %ymm17\n\tvpcmpnequb (%rdi), %ymm17, %k1\n\t"
          "kmovd %k1, %eax\n\tret\n");
}
__attribute__((naked)) void g(void) {
  __asm__("vmovdqu64 (%rsi), %ymm17\n\tkmovd %k1, %eax\n\tret\n");
}
void h(void) { g(); }
__attribute__((naked)) void k(void) {
  __asm__("test %rdx, %rdx\n\tje 1f\n\tvmovdqu64 (%rsi), %ymm17\n\tkmovd %k1, %eax\n\t"
          "ret\n1:\n\txor %eax, %eax\n\tret\n");
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc absent: the EVEX shapes cannot be built")
    d = tmp_path_factory.mktemp("evex")
    (d / "evex.c").write_text(SOURCE)
    r = subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(d / "libevex.so"),
                        str(d / "evex.c")], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"this assembler does not take AVX-512: {r.stderr.strip()[:200]}")
    return str(d / "libevex.so")


def test_a_branch_to_an_evex_block_stays_inside_the_function(lib):
    from wcetfit.static import binary

    m = binary.load_model(lib, ["f"], use_cache=False)
    f = m.functions["f"]
    entry = f.address
    blocks = [b.address for b in f.blocks]
    assert blocks == [entry, entry + 6, entry + 12]          # cmp/ja, mov/ret, the EVEX block
    assert f.calls == ()                                      # no tail call into nothing
    assert (entry, entry + 12) in f.edges
    evex = f.blocks[2]
    assert [i.mnemonic for i in evex.instructions] == ["vmovdqu64", "vpcmpnequb", "kmovd",
                                                       "ret"]


def test_a_function_starting_with_an_evex_instruction_is_modelled(lib):
    from wcetfit.static import binary

    m = binary.load_model(lib, ["h"], with_callees=True, use_cache=False)
    g = m.functions["g"]
    assert [i.mnemonic for b in g.blocks for i in b.instructions] == ["vmovdqu64", "kmovd",
                                                                      "ret"]


def test_a_conditional_branchs_fall_through_into_evex_code_stays_inside(lib):
    """glibc's EVEX memchr: `je` whose fall-through starts with an EVEX instruction (the
    copy could not be made: "falls through to …, which is not a block")."""
    from wcetfit.static import binary

    k = binary.load_model(lib, ["k"], use_cache=False).functions["k"]
    mnemonics = [i.mnemonic for b in k.blocks for i in b.instructions]
    assert mnemonics == ["test", "je", "vmovdqu64", "kmovd", "ret", "xor", "ret"]
    assert k.calls == ()
