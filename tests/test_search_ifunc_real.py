"""The worst-case search on a function glibc selects through an IFUNC (libm's ``sin``).

Its model is named after the implementation the resolver picks (``sin@impl+0x702c0``), not
after the name wcetfit.toml and the prototype give.  The search timed its candidates under
the model's name, so ``analyze`` stopped after every measurement with "the prototype
declares sin but not sin@impl+…" (exit 2): a new user's first run on ``sin``.

The search's second phase, ranked by measured time, times under the same name.

Skips, saying so, when libm is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from smalltarget import analyzed_root, write_target

LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")


@pytest.mark.skipif(not LIBM.exists(), reason="libm.so.6 absent: the IFUNC search is not "
                    "checked")
def test_analyze_with_search_on_an_ifunc_selected_function(tmp_path):
    from wcetfit.static import binary

    model = binary.load_model(str(LIBM), ["sin"], with_callees=False)
    if model.function("sin").name == "sin":
        pytest.skip("this libm's sin is no IFUNC: nothing to check")
    d = write_target(tmp_path / "sin", str(LIBM), "sin", "double sin(double x);",
                     "    return (float(ctx.rng.uniform(-1000.0, 1000.0)),)", budget=40,
                     extra="timed_budget = 16\n")
    fn = analyzed_root(d, tmp_path / "r.json")
    # the search's best candidates were timed and joined the rows
    assert fn["wcet"]["error"] is None, fn["wcet"]["error"]
    from wcetfit.search.store import load_search_rows
    from wcetfit.pipeline import open_session
    s = open_session(str(d))
    rows = load_search_rows(s.store, "sin", s.target.measure.seed)
    assert rows is not None and len(rows.indices) > 0
    # the measured-time phase timed its candidates under the same name: its kept inputs
    # are numbered after the model phase's budget (wcetfit.search.workflow)
    from wcetfit.search.candidates import SEARCH_BASE
    assert (rows.indices >= SEARCH_BASE + 40).any(), rows.indices
