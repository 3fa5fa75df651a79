"""The store: round trips, identity checks, future versions, other machines."""

import json
import os

import numpy as np
import pytest

from wcetfit import store as st
from wcetfit.errors import StoreError

ID = st.StoreIdentity("a" * 64, "b" * 64)


def test_round_trip_and_names(tmp_path):
    s = st.Store(str(tmp_path / ".wcetfit"), ID)
    s.save("counts-s1", {"seed": 1}, {"x": np.arange(5, dtype=np.int64)})
    meta, arrays = s.load("counts-s1")
    assert meta["seed"] == 1 and meta["format"] == st.FORMAT_VERSION
    assert arrays["x"].dtype == np.int64 and arrays["x"].tolist() == [0, 1, 2, 3, 4]
    assert s.names() == ["counts-s1"]
    assert s.load("absent") is None
    assert s.drop("counts-s1") and s.names() == []


def test_other_binary_refused_with_what_differs(tmp_path):
    st.Store(str(tmp_path), ID).save("counts", {}, {"x": np.zeros(1)})
    with pytest.raises(StoreError, match="binary changed"):
        st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64))
    with pytest.raises(StoreError, match="prototype changed"):
        st.Store(str(tmp_path), st.StoreIdentity("a" * 64, "d" * 64))
    # --fresh starts over
    st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64), fresh=True)


def test_future_version_refused(tmp_path):
    st.Store(str(tmp_path), ID)
    meta = json.loads((tmp_path / "store.json").read_text())
    meta["format"] = st.FORMAT_VERSION + 1
    (tmp_path / "store.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="newer wcetfit"):
        st.Store(str(tmp_path), ID)


def test_other_machine_times_refused(tmp_path):
    s = st.Store(str(tmp_path), ID)
    other = dict(st.machine_fingerprint(), host="elsewhere")
    s.save("times", {"machine": other}, {"t": np.zeros(1)})
    with pytest.raises(StoreError, match="another machine"):
        s.load("times", machine=True)
    assert s.load("times", machine=False) is not None


def test_interrupted_write_leaves_previous_version(tmp_path, monkeypatch):
    s = st.Store(str(tmp_path), ID)
    s.save("d", {"v": 1}, {"x": np.ones(3)})

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        s.save("d", {"v": 2}, {"x": np.zeros(3)})
    monkeypatch.undo()
    meta, arrays = s.load("d")
    assert meta["v"] == 1 and arrays["x"].tolist() == [1, 1, 1]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_identity_binds_only_once_something_is_measured(tmp_path):
    """A run that failed before measuring (a wrong prototype) leaves a store that takes
    the corrected identity; its leftovers (empty datasets, failures) go with the old one."""
    other = st.StoreIdentity("a" * 64, "d" * 64)
    s = st.Store(str(tmp_path), ID)
    s.save("counts", {"failures": ["crash"]}, {"indices": np.zeros(0)}, measured=False)
    s = st.Store(str(tmp_path), other)                # no error: nothing was measured
    assert s.names() == []                            # the old identity's leftovers are gone
    assert json.loads((tmp_path / "store.json").read_text())["prototype_sha256"] == "d" * 64
    s.save("counts", {}, {"indices": np.arange(3)})   # measured: bound from now on
    with pytest.raises(StoreError, match="prototype changed"):
        st.Store(str(tmp_path), ID)
    assert st.Store(str(tmp_path), other).load("counts") is not None


def test_store_without_bound_key_counts_as_bound(tmp_path):
    st.Store(str(tmp_path), ID)
    meta = json.loads((tmp_path / "store.json").read_text())
    del meta["bound"]                                 # written before the key existed
    (tmp_path / "store.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="binary changed"):
        st.Store(str(tmp_path), st.StoreIdentity("c" * 64, "b" * 64))
