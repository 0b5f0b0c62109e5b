"""twin.cache.leaf_heap: smallest current key first, stale entries skipped and compacted away."""

from twin.cache.leaf_heap import COMPACT_SLACK, LeafHeap


class Candidate:  # hashable by identity, as a tree's node is
    def __init__(self, nid):
        self.nid = nid


def test_pops_by_key_and_skips_entries_made_stale_by_a_new_push():
    heap = LeafHeap()
    a, b, c = Candidate(1), Candidate(2), Candidate(3)
    heap.push((5, a.nid), a)
    heap.push((3, b.nid), b)
    heap.push((4, c.nid), c)
    heap.push((9, b.nid), b)  # b changed: its entry at key 3 is stale, the new one later
    assert [heap.pop(), heap.pop(), heap.pop(), heap.pop()] == [c, a, b, None]


def test_a_failed_check_drops_the_entry_and_moves_on():
    heap = LeafHeap()
    a, b = Candidate(1), Candidate(2)
    heap.push((1, a.nid), a)
    heap.push((2, b.nid), b)
    assert heap.pop(lambda n: n is not a) is b
    assert heap.pop() is None  # a's entry went with the failed check


def test_stale_entries_are_dropped_once_they_outnumber_the_slack_and_order_is_kept():
    heap = LeafHeap()
    live = [Candidate(i) for i in range(10)]
    for n in live:
        heap.push((n.nid, n.nid), n)
    churn = Candidate(100)
    for v in range(COMPACT_SLACK):
        heap.push((1000 + v, churn.nid), churn)  # every push makes the last one stale
    assert len(heap) < 10 + COMPACT_SLACK  # compacted: only current entries survived
    assert [heap.pop() for _ in range(11)] == [*live, churn]
    assert heap.pop() is None


def test_peek_gives_the_smallest_current_key_and_leaves_it_for_pop():
    heap = LeafHeap()
    a, b = Candidate(1), Candidate(2)
    heap.push((2, a.nid), a)
    heap.push((3, b.nid), b)
    heap.discard(a)  # a is no candidate now: peek drops its entry and shows b's key
    assert heap.peek() == (3, b.nid)
    assert len(heap) == 1
    assert heap.pop() is b
    assert heap.peek() is None
