"""``wcetfit report --inputs N`` reports the first N generated inputs of those stored
(searched and reached ones stay), and says when fewer are stored; it used to be accepted
and ignored (png_sig_cmp: `--inputs 7` reported 105 inputs)."""

from __future__ import annotations

import numpy as np

from wcetfit.measurements import CountSet, FunctionCounts, TimeSet, first_generated
from wcetfit.search.candidates import SEARCH_BASE


def test_first_generated_keeps_the_first_n_and_every_searched_input():
    idx = np.array([0, 1, 2, 3, 4, SEARCH_BASE, SEARCH_BASE + 1])
    counts = np.arange(14).reshape(7, 2)
    cs = CountSet("f", 1, idx, (FunctionCounts("f", 0x10, (0x10, 0x20), counts),))
    ts = TimeSet("f", 1, idx, np.arange(21.0).reshape(7, 3), "lfence", 2.6e9, 0)
    c2, t2, stored = first_generated(cs, ts, 3)
    assert stored == 5
    assert c2.indices.tolist() == [0, 1, 2, SEARCH_BASE, SEARCH_BASE + 1]
    assert c2.functions[0].counts.tolist() == counts[[0, 1, 2, 5, 6]].tolist()
    assert t2.ticks[:, 0].tolist() == [0.0, 3.0, 6.0, 15.0, 18.0]
    _, _, stored = first_generated(cs, None, 50)
    assert stored == 5
