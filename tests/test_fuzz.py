"""Fuzzing (short run; bench/reliability.py runs >= 100,000 cases): the parsers of
wcetfit.toml, of prototypes and cdef, of ELF input and of store files end every case in
a result or one typed error line (WcetfitError), never another exception or a hang."""

import logging
import os
import sys

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is needed for fuzzing "
                                 "(pip install -e '.[test]')")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzcases as F  # noqa: E402

SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


def _ok(call):
    outcome, detail = F.classify(call)
    assert outcome in (F.OK, F.ERROR), detail


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.slow
def test_target_file(tmp):
    d = F.toml_directory(tmp)

    @settings(max_examples=200, **SETTINGS)
    @given(F.toml_texts())
    def case(text):
        _ok(lambda: F.toml_case(d, text))

    case()


@pytest.mark.slow
def test_prototype_and_cdef():
    @settings(max_examples=200, **SETTINGS)
    @given(F.c_texts(), st.one_of(st.just(""), F.c_texts()))
    def case(prototype, cdef):
        _ok(lambda: F.proto_case(prototype, cdef))

    case()


@pytest.mark.slow
def test_elf_truncated_and_bit_flipped(tmp):
    src = F.ELF_SOURCES[0]
    if not os.path.exists(src):
        pytest.skip(f"{src} is absent")
    data = open(src, "rb").read()
    path = os.path.join(tmp, "fuzzed.so")

    @settings(max_examples=30, **SETTINGS)
    @given(F.elf_mutations(len(data)))
    def case(mutation):
        _ok(lambda: F.elf_case(path, F.mutate(data, mutation)))

    case()


@pytest.mark.slow
def test_store_files_damaged(tmp, caplog):
    caplog.set_level(logging.CRITICAL, logger="wcetfit")
    files = F.store_files(tmp)
    d = os.path.join(tmp, "store")

    @settings(max_examples=120, **SETTINGS)
    @given(st.sampled_from(sorted(files)), st.data())
    def case(name, data):
        mutation = data.draw(F.elf_mutations(len(files[name])))
        _ok(lambda: F.store_case(d, name, F.mutate(files[name], mutation)))

    case()
