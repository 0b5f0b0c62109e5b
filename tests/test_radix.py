"""The token radix tree and the infinite-cache ceiling built on it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from token_seqs import a

from twin.cache import RadixTree
from twin.workload_stats import summarize
from twin.workloads import Workload, WorkloadRow, WorkloadWriter


def test_match_insert_and_split():
    tree = RadixTree()
    tree.insert(a(1, 2, 3, 4))
    m = tree.match(a(1, 2, 9))
    assert m.length == 2 and m.partial is not None and m.node is tree.root
    node = tree.insert(a(1, 2, 9))
    assert node.depth == 3
    branch = node.parent
    assert branch.depth == 2 and sorted(branch.children) == [3, 9]
    assert tree.match(a(1, 2, 3, 4, 5)).length == 4
    assert tree.num_nodes == 4  # root, [1 2], [3 4], [9]
    assert tree.num_tokens == 5


def test_insert_does_not_pin_caller_buffer():
    tree = RadixTree()
    seq = a(5, 6, 7)
    tree.insert(seq)
    seq[:] = 0
    assert tree.match(a(5, 6, 7)).length == 3


def longest_common_prefix(x: list[int], y: list[int]) -> int:
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=25))
def test_match_equals_brute_force_longest_prefix(seqs):
    tree = RadixTree()
    seen: list[list[int]] = []
    for s in seqs:
        expect = max((longest_common_prefix(s, t) for t in seen), default=0)
        assert tree.match(np.array(s, np.int32)).length == expect
        tree.insert(np.array(s, np.int32))
        seen.append(s)


def test_ceiling_counts_shared_prefixes_and_previous_turns(tmp_path):
    out = tmp_path / "w.parquet"
    rows = [
        WorkloadRow(0, 0, 0.0, None, a(1, 2, 3, 4), False, a(50, 51), 2),
        WorkloadRow(1, 0, 1.0, None, a(1, 2, 3, 9), False, a(60), 1),  # shares 3 tokens
        WorkloadRow(0, 1, None, 5.0, a(7, 8), True, a(70), 1),  # hits 4 + 2 output tokens
    ]
    with WorkloadWriter(out, {"generator": "t"}) as w:
        w.write_all(rows)
    s = summarize(Workload.open(out))
    assert s["infinite_cache"]["hit_tokens"] == 3 + 6
    assert s["tokens"]["prompt_total"] == 4 + 4 + 8
    assert s["infinite_cache"]["token_hit_rate"] == (3 + 6) / 16
    assert s["infinite_cache"]["request_hit_rate"] == 2 / 3
    assert s["sessions"] == 2 and s["closed_loop_requests"] == 1
    assert s["turns_per_session"]["max"] == 2
