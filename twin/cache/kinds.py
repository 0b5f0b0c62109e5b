"""What a cache hit needs from each mixer kind, and the bytes a cached prefix holds.

The hit rule per kind (Jenga, Zhang et al., SOSP 2025, arXiv 2503.18292, sec. 4:
"a prefix is a hit when every layer type's own rule is met"; vLLM's hybrid KV cache
manager, ``vllm/v1/core/single_type_kv_cache_manager.py``, applies the same rules per
layer group):

- ``attention`` and ``mla``: the KV of every token before the hit point p (MLA's latent
  is per token like full attention's K and V).
- ``swa``: the KV of the last W tokens before p only (tokens ``[p - W, p)``); older
  sliding-window KV is never read again by a request resuming at p, so it may be
  dropped and its bytes freed.
- ``mamba1``, ``mamba2``, ``gdn``: the recurrent (and conv) state exactly at p, a
  checkpoint: states cannot be rolled back (Marconi, arXiv 2411.19379, sec. 2).

In the radix tree every node keeps the sliding-window KV of its last ``min(len, W)``
tokens only (``tail``). Walking up from any node end, these tails cover the last W
tokens (a node shorter than W keeps all of its tokens, and its parent's tail the rest),
so a hit ending at a node end always finds its window. A hit ending inside a node
longer than W does not (the node's head was dropped): it backs off to the node's start.
Splitting a node at a new branch gives the upper part the tail of its own last tokens:
the request that branches there computed them (its hit ended at or above the node's
start), so they exist; merging keeps the lower node's tail plus what it needs above.
"""

from __future__ import annotations

from twin.model import ModelSpec


class KindBytes:
    """Per-kind bytes of one model in the prefix cache."""

    __slots__ = ("full_kv_per_token", "state_bytes", "swa_kv_per_token", "window")

    def __init__(self, model: ModelSpec) -> None:
        self.full_kv_per_token = model.full_kv_bytes_per_token
        self.swa_kv_per_token = model.kv_bytes_per_token_of("swa")
        self.window = model.sliding_window if self.swa_kv_per_token else None
        self.state_bytes = model.ssm_checkpoint_bytes

    def tail(self, n_tokens: int) -> int:
        """Sliding-window tokens a node of ``n_tokens`` keeps (all of them without a window)."""
        return n_tokens if self.window is None or n_tokens < self.window else self.window

    def node_bytes(self, n_tokens: int, ckpt: bool) -> int:
        """Bytes of one radix node: full KV of all its tokens, swa KV of its tail, state."""
        kv = n_tokens * self.full_kv_per_token + self.tail(n_tokens) * self.swa_kv_per_token
        return kv + (self.state_bytes if ckpt else 0)

    def hit_inside_ok(self, node_len: int, offset: int) -> bool:
        """May a hit end ``offset`` tokens into a node of ``node_len`` tokens?"""
        return offset == node_len or self.window is None or node_len <= self.window
