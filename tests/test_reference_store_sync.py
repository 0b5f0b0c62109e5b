"""The tensor store's one assumption about the cache it follows: a node's end never moves."""

from __future__ import annotations

import numpy as np
import pytest

from twin.reference import store as store_module
from twin.reference.store import Edge, NodeTensors, TensorStore


def _store_reading(monkeypatch: pytest.MonkeyPatch, edges: list[Edge]) -> TensorStore:
    """A store holding node 7 over tokens [0, 4), whose cache now reads as ``edges``."""
    monkeypatch.setattr(store_module, "cache_edges", lambda cache: edges)
    store = TensorStore(windows=[None], has_ssm=False)
    store.nodes[7] = NodeTensors(start=0, path=np.arange(4, dtype=np.int32), parent=-1, kv=[])
    return store


def test_a_node_whose_end_moved_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store_reading(monkeypatch, [(7, 7, None, 6, np.arange(6, dtype=np.int32), False)])
    with pytest.raises(AssertionError, match="node 7 ended at depth 4, now at 6"):
        store.sync(None)  # type: ignore[arg-type]  # the edges above stand for the cache


def test_a_node_whose_range_is_unchanged_keeps_its_tensors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store_reading(monkeypatch, [(7, 7, None, 4, np.arange(4, dtype=np.int32), False)])
    held = store.nodes[7]
    store.sync(None)  # type: ignore[arg-type]
    assert store.nodes[7] is held
    assert store.ids == {7: 7}
