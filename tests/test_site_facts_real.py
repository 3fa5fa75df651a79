"""[loops] facts per call site on real library code: zlib's inflate calls inflate_table
(``sub_efd0`` in the system's stripped libz) from three sites — the code-length code
(19 symbols), the literal/length code (up to 288) and the distance code (up to 32).  Its
first loop counts the code lengths once per symbol, so each site has its own bound; one
fact for all three must take the largest.  The test builds the per-call-site program on
the real CFGs (irreducible loops, jump tables and all) with unit costs and a generous
bound for every other loop, and checks that each site's instance of inflate_table keeps
to its own fact.  Skips, saying so, when libz is absent."""

from __future__ import annotations

import os

import pytest

from wcetfit.errors import TargetError
from wcetfit.wcet.context import context_bound
from wcetfit.wcet.interproc import call_graph
from wcetfit.wcet.loops import functions_called, parse_site_loop_facts
from wcetfit.wcet.result import LoopBound

LIBZ = "/lib/x86_64-linux-gnu/libz.so.1"


@pytest.fixture(scope="module")
def zlib(tmp_path_factory):
    if not os.path.exists(LIBZ):
        pytest.skip(f"{LIBZ} is absent")
    from wcetfit.static import binary
    from wcetfit.static.cfgcache import CfgCache

    cache = CfgCache(str(tmp_path_factory.mktemp("cache")), enabled=True)
    fns = binary.load_model(LIBZ, ["uncompress"], use_cache=cache).functions
    inflate = fns["inflate"]
    sites = [cs for cs in inflate.calls
             if functions_called(inflate, cs.block, fns) is not None
             and fns[functions_called(inflate, cs.block, fns)].loops
             and sum(functions_called(inflate, c.block, fns)
                     == functions_called(inflate, cs.block, fns) for c in inflate.calls) == 3]
    if len(sites) != 3:
        pytest.skip(f"this libz's inflate does not call one looping helper from three sites "
                    f"(found {len(sites)}): another zlib build")
    return fns, sites


def _program(fns, site_facts=None):
    names = call_graph(fns, "inflate")
    costs = {n: {b.address: 1.0 for b in fns[n].blocks} for n in names}
    bounds = {n: {lp.header: LoopBound(per_entry=300) for lp in fns[n].loops} for n in names}
    return context_bound(fns, "inflate", costs, bounds, inline=[n for n in names if n != "inflate"],
                         site_bounds=site_facts or {})


def test_each_call_site_of_inflate_table_keeps_its_own_loop_fact(zlib):
    fns, sites = zlib
    inflate = fns["inflate"]
    table = fns[functions_called(inflate, sites[0].block, fns)]
    first = min(table.loops, key=lambda lp: lp.header)
    facts = {f"{table.name}+{first.header - table.address:#x} @ "
             f"inflate+{cs.instruction - inflate.address:#x}": n
             for cs, n in zip(sorted(sites, key=lambda c: c.instruction), (19, 288, 32))}
    site_facts = parse_site_loop_facts(facts, fns)
    assert len(site_facts[(table.name, first.header)]) == 3
    general = _program(fns)
    per_site = _program(fns, site_facts)
    assert general is not None and per_site is not None
    assert per_site.bound_ticks < general.bound_ticks
    seen = 0
    for path, counts in per_site.site_counts.items():
        last = path.split(" > ")[-1]
        if not last.startswith(f"{table.name}@inflate+"):
            continue
        block = next(cs.block for cs in sites
                     if last.endswith(f"+{cs.block - inflate.address:#x}"))
        fact = site_facts[(table.name, first.header)][("inflate", block)].per_entry
        calls = counts[table.entry]
        # header runs = back edges + entries ≤ (fact + 1) per call of this instance
        assert counts[first.header] <= (fact + 1) * calls
        seen += 1
    assert seen == 3


def test_a_site_that_does_not_call_the_loops_function_names_the_real_calls(zlib):
    fns, sites = zlib
    inflate = fns["inflate"]
    table = fns[functions_called(inflate, sites[0].block, fns)]
    first = min(table.loops, key=lambda lp: lp.header)
    with pytest.raises(TargetError) as err:
        parse_site_loop_facts({f"{table.name}+{first.header - table.address:#x} @ inflate+0x0": 5},
                              fns)
    msg = str(err.value)
    for cs in sites:
        assert f"inflate+{cs.instruction - inflate.address:#x}" in msg


def test_init_offers_a_fact_per_call_site_that_parses(tmp_path):
    """`wcetfit init`'s commented [loops] lists, for a function called from several
    sites, one entry per site; uncommented, every one is a valid fact."""
    if not os.path.exists(LIBZ):
        pytest.skip(f"{LIBZ} is absent")
    from wcetfit.scaffold.create import loop_entries
    from wcetfit.static import binary
    from wcetfit.static.cfgcache import CfgCache

    model = binary.load_model(LIBZ, ["uncompress"],
                              use_cache=CfgCache(str(tmp_path / "cache"), enabled=True))
    entries = loop_entries(model, "uncompress")
    with_sites = [e for e in entries if e.sites]
    assert with_sites, "no loop of a function called from several sites"
    keys = {f"{e.key} @ {s}": 7 for e in with_sites for s in e.sites}
    facts = parse_site_loop_facts(keys, model.functions)
    assert sum(len(v) for v in facts.values()) == len(keys)
