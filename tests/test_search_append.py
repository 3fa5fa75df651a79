"""Searched (and reached) inputs' rows join the measured ones only when they are
comparable: the same timing method and number of repeats, the same block layout
(wcetfit.search.store.append_rows)."""

from __future__ import annotations

import numpy as np

from wcetfit.measurements import CountSet, FunctionCounts, TimeSet
from wcetfit.search.candidates import SEARCH_BASE
from wcetfit.search.store import SearchRows, with_search_rows


def _measured():
    fc = FunctionCounts("f", 0x10, (0x10, 0x20), np.array([[1, 2], [1, 3]]))
    counts = CountSet("f", 1, np.array([0, 1]), (fc,))
    times = TimeSet("f", 1, np.array([0, 1]), np.array([[10.0, 11.0], [12.0, 13.0]]),
                    "lfence", 2.4e9, 0)
    return counts, times


def _searched(method="lfence", repeats=2, blocks=(0x10, 0x20)):
    fc = FunctionCounts("f", 0x10, blocks, np.array([[1, 9]]))
    return SearchRows("f", 1, method, 2.4e9, np.array([SEARCH_BASE]), ((),), (fc,),
                      np.full((1, repeats), 50.0), np.array([49.0]))


def test_comparable_rows_are_appended():
    counts, times = _measured()
    c, t = with_search_rows(counts, times, _searched())
    assert list(c.indices) == [0, 1, SEARCH_BASE] and list(t.indices) == list(c.indices)
    assert c.functions[0].counts[-1].tolist() == [1, 9] and t.ticks[-1].tolist() == [50.0, 50.0]
    assert t.done.shape == t.ticks.shape and t.done.all()


def test_rows_timed_otherwise_or_on_another_layout_are_left_out():
    counts, times = _measured()
    for rows in (_searched(method="rdtscp"), _searched(repeats=3),
                 _searched(blocks=(0x10, 0x28))):
        c, t = with_search_rows(counts, times, rows)
        assert c is counts and t is times


def test_calls_a_check_missed_are_kept_beside_the_adopted_rows(tmp_path):
    """``check --adopt`` keeps the check's call above the bound beside each adopted row
    (the bound made with the row stays above it); rows stored before that have none."""
    from dataclasses import replace

    from wcetfit.numbering import ADOPT_BASE
    from wcetfit.search.store import (AdoptedCall, load_search_rows, merge_rows,
                                      save_search_rows)
    from wcetfit.store import Store, StoreIdentity

    from wcetfit.search.choices import ChoiceSequence

    store = Store(str(tmp_path / "store"), StoreIdentity("a" * 64, "b" * 64))
    old = replace(_searched(), sequences=(ChoiceSequence(0, ()),))
    call = AdoptedCall(ADOPT_BASE, 2001, 17, 198_146.0, 190_000.0)
    new = replace(old, indices=np.array([ADOPT_BASE]),
                  sequences=(ChoiceSequence(17, (), 2001),), adopted_calls=(call,))
    save_search_rows(store, merge_rows(old, new), warmup=0)
    rows = load_search_rows(store, "f", 1, warmup=0)
    assert list(rows.indices) == [SEARCH_BASE, ADOPT_BASE]
    assert rows.adopted_calls == (call,)
    save_search_rows(store, old, warmup=0)
    assert load_search_rows(store, "f", 1, warmup=0).adopted_calls == ()
