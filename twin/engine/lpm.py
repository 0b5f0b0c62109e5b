"""SGLang's ``lpm`` schedule policy: the waiting queue by longest cached prefix.

``python/sglang/srt/managers/schedule_policy.py`` ``SchedulePolicy``:
prefixes are matched for every waiting request each time a batch is formed
(``_compute_prefix_matches``), past 128 waiting requests it falls back to FCFS
(``_determine_active_policy``), and ``_sort_by_longest_prefix`` sorts the queue
in place with Python's stable sort, so ties keep the queue's current order,
itself the previous sort's: ties depend on history, in SGLang as here.
In-batch prefix caching: a request whose cached match is at most 32 tokens
while 32 or more of its prompt match an earlier such waiting request's goes
last (``temporary_deprioritized``; ``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD``
and ``..._DEPRIORITIZE_THRESHOLD``, both 32), so one request of a group sharing
an uncached prefix computes it for the others. A head holding pages keeps its
place (it was already being admitted; SGLang allocates only once a batch is
formed).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from twin.engine.seq import Seq

# SGLang's lpm falls back to FCFS past this many waiting requests (schedule_policy.py).
LPM_MAX_WAITING = 128
# SGLang's in-batch prefix caching thresholds (schedule_policy.py, both 32 by default).
IN_BATCH_PREFIX = 32


def order_by_prefix(waiting: deque[Seq], cached_prefix: Callable[[Seq], int]) -> None:
    """Sort ``waiting`` in place by longest ``cached_prefix`` (module docstring)."""
    if len(waiting) > LPM_MAX_WAITING or waiting[0].alloc:
        return
    seen: set[bytes] = set()  # the waiting-queue radix tree, to depth 32

    def key(q: Seq) -> float:
        m = cached_prefix(q)
        prompt = q.req.prompt
        if m <= IN_BATCH_PREFIX and len(prompt) >= IN_BATCH_PREFIX:
            head = prompt[:IN_BATCH_PREFIX].tobytes()
            if head in seen:
                return math.inf  # a 32-token match in the queue: deprioritized
            seen.add(head)
        return -m

    ranked = sorted(waiting, key=key)  # keys in queue order, as SGLang matches them
    waiting.clear()
    waiting.extend(ranked)
