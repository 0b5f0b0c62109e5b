"""The tensor store's one assumption about the cache it follows: a node's end never moves."""

from __future__ import annotations

import numpy as np
import pytest

from twin.reference.store import Edge, NodeTensors, TensorStore


class _EdgesOnly:
    """A cache as the store reads it (the compiled live cache's ``edges()``)."""

    def __init__(self, edges: list[Edge]) -> None:
        self._edges = edges

    def edges(self) -> list[Edge]:
        return self._edges


def test_a_node_whose_end_moved_is_refused() -> None:
    store = TensorStore(windows=[None], has_ssm=False)
    store.nodes[7] = NodeTensors(start=0, path=np.arange(4, dtype=np.int32), parent=-1, kv=[])
    grown = _EdgesOnly([(7, 7, None, 6, np.arange(6, dtype=np.int32), False)])
    with pytest.raises(AssertionError, match="node 7 ended at depth 4, now at 6"):
        store.sync(grown)


def test_a_node_whose_range_is_unchanged_keeps_its_tensors() -> None:
    store = TensorStore(windows=[None], has_ssm=False)
    held = NodeTensors(start=0, path=np.arange(4, dtype=np.int32), parent=-1, kv=[])
    store.nodes[7] = held
    store.sync(_EdgesOnly([(7, 7, None, 4, np.arange(4, dtype=np.int32), False)]))
    assert store.nodes[7] is held
    assert store.ids == {7: 7}
