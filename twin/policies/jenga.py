"""``jenga``: Jenga's prefix caching per layer kind, and its memory layout (SOSP 2025).

Zhang et al., "Jenga: Effective Memory Management for Serving LLM with
Heterogeneity" (arXiv 2503.18292), sec. 5 (customisable prefix caching):

- full attention needs the KV of every prefix token (the radix tree's rule);
- Mamba layers keep a state every ``state_interval`` tokens (512), so hits
  land on multiples of it (the admission rule ``every-interval``), and an access
  refreshes only the last cached token, i.e. the node the hit ends at (no
  path refresh: an evicted leaf does not hand its stamp to its parent, unlike
  ``sglang+``);
- eviction is balanced and aligned across kinds: one last-access time per
  token for every kind (a node's ``t``), a token's KV and state leave
  together from the tail (leaves only), the least recently used first, ties
  broken by prefix length so the longest suffix goes first (the eviction order
  ``lru-deepest`` of :mod:`twin.policies.eviction_orders`).

The sliding-window rule (a hit needs only the last W tokens before it) is the
radix cache's own per-kind rule (``twin/cache/kinds.py``, issue #13), which
this policy runs on; there, KV out of every node's window is dropped at once
rather than evicted first. The memory side (LCM large pages, small
pages per kind) is :class:`twin.memory.JengaAllocator`; ``stats`` reports its
page sizes for the model served.
"""

from __future__ import annotations

from typing import Any

from twin.cache import Node
from twin.errors import TwinError
from twin.memory import JengaAllocator, kinds_of
from twin.policies.admissions import STATE_INTERVAL, admission_rule
from twin.policies.lru import LeafLRU


class JengaPolicy(LeafLRU):
    """States every 512 tokens; aligned leaf eviction, LRU with longest-suffix ties."""

    name = "jenga"
    OPTIONS = ("state_interval",)
    order = "lru-deepest"  # oldest access first; among equals the deepest first

    def __init__(self, state_interval: int = STATE_INTERVAL) -> None:
        super().__init__()
        if type(state_interval) is not int or state_interval < 1:
            raise TwinError(
                f"jenga: state_interval must be a positive integer (got {state_interval!r})"
            )
        self.state_interval = state_interval
        self.admission = admission_rule("every-interval", interval=state_interval)

    def on_node_removed(self, node: Node, into: Node | None = None) -> None:
        self._leaves.discard(node)  # only the last cached token was refreshed: no stamp goes up

    def stats(self) -> dict[str, Any]:
        pages = JengaAllocator(kinds_of(self.cache.model), 0)  # its page sizes, no memory
        return {
            "state_interval": self.state_interval,
            "large_page_bytes": pages.large_bytes,
            "small_page_bytes": pages.small_bytes,
        }
