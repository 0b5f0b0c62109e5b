"""The token-exact prefix cache of a hybrid model: radix tree + bytes + pins + eviction mechanics.

Semantics (DESIGN.md "Prefix cache semantics"; Marconi, arXiv 2411.19379, sec. 4):

- A node owns the KV of its tokens for every attention layer and may own one
  SSM checkpoint, the state of every SSM layer after its last token.
- Hybrid and pure SSM models: a hit ends at a node holding a checkpoint, with
  all ancestors' KV present (sec. 2: SSM states cannot be rolled back, so a
  hit is all-or-nothing per checkpoint). Pure Transformer: any matched prefix.
- Evicting a leaf frees its KV and checkpoint; evicting a node with one child
  drops only its checkpoint and hands its KV to the child (sec. 4.2: such a
  node's tokens stay needed by the child's hits).
- Bytes: KV = tokens x the full-attention layers' KV per token, plus each node's
  last ``min(len, W)`` tokens x the sliding-window layers' (``twin.cache.kinds``: the
  older sliding-window KV is dropped and freed); one checkpoint =
  ``ssm_checkpoint_bytes`` (every recurrent layer's state + conv state).
- Sliding-window models without recurrent layers: a hit ending inside a node longer
  than the window backs off to the node's start (its window there was dropped).
  ``capacity`` is never exceeded; what cannot fit is not admitted.

For SSM-bearing models the tree stays tidy: a node without a checkpoint and
with at most one child can never end a hit, so (unless pinned) it is folded
into its child or, as a leaf, dropped. Transformers need no checkpoints, so
their nodes never carry one and nothing is tidied.

The policy owns eviction order and refresh rules; it hears about every change
through ``on_node_added`` / ``on_node_changed`` / ``on_node_removed``.

This module is the public cache (lookups, inserts, pins, eviction, the
invariants' check). The structure is :mod:`twin.cache.radix`; the edits
that keep the counters and the policy's hooks right as it changes (splits,
chains, removals, folds, tidying) :mod:`twin.cache.tree_edits`; an insert's
byte cost and its cut to what fits :mod:`twin.cache.admission_cost`; the
request protocol
:mod:`twin.cache.requests`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twin.cache.admission_cost import AdmissionCost
from twin.cache.base import EvictHook, Hit, Started, TokenStateBytes, TreePolicy, evict_for
from twin.cache.kinds import KindBytes
from twin.cache.radix import Match, Node, RadixTree
from twin.cache.requests import ServesRequests
from twin.cache.tree_edits import TreeEdits, parent_of
from twin.model import ModelSpec


class PrefixCache(Started, TokenStateBytes, AdmissionCost, TreeEdits, ServesRequests):
    """Radix-tree prefix cache with byte accounting; decisions come from ``policy``."""

    def __init__(self, model: ModelSpec, capacity_bytes: int, policy: TreePolicy[Node]) -> None:
        self.start(model, capacity_bytes)
        self.kinds = KindBytes(model)
        self.kv_per_token = model.kv_bytes_per_token - self.kinds.swa_kv_per_token
        self.swa_per_token = self.kinds.swa_kv_per_token
        self.tree = RadixTree()
        self.root = self.tree.root
        self.kv_tokens = 0
        self.swa_tokens = 0  # sliding-window KV tokens held: every node's tail
        self.n_ckpts = 0
        # The last two matches (a request's prompt and its input + output) and the
        # tree's mutation count they were made at (:meth:`match`).
        self._memos: list[tuple[np.ndarray, Match, bytes]] = []  # (seq, match, its bytes)
        self._memo_at = -1
        self.on_evict: EvictHook | None = None  # a host tier's write-back (RequestCache)
        self.policy = policy
        policy.bind(self)

    # ------------------------------------------------------------------ bytes
    # (``ssm_bytes``, ``set_clock`` and the peaks: :class:`TokenStateBytes`; the KV
    # adds the sliding-window tails.)
    @property
    def kv_bytes(self) -> int:
        return self.kv_tokens * self.kv_per_token + self.swa_tokens * self.swa_per_token

    @property
    def used_bytes(self) -> int:
        return self.kv_bytes + self.n_ckpts * self.ckpt_bytes

    @property
    def num_nodes(self) -> int:
        return self.tree.num_nodes

    def node_bytes(self, node: Node) -> int:
        """Bytes ``node`` holds: its tokens' KV (sliding-window: its tail) plus its checkpoint."""
        return self.kinds.node_bytes(len(node.tokens), node.ckpt)

    # ------------------------------------------------------------------ queries
    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[Node]:
        """Longest usable cached prefix of ``seq``; tells the policy about the hit."""
        node, length = self._usable(self._match(np.asarray(seq, dtype=np.int32)))
        if node is None:
            return Hit(0, None)
        if self.has_ssm and not node.ckpt_hit:
            node.ckpt_hit = True
            self.checkpoints_hit += 1
        self.policy.on_hit(node)
        return Hit(length, node)

    def peek(self, seq: np.ndarray) -> int:
        """Tokens :meth:`lookup` would hit now, changing nothing (a router's probe)."""
        return self._usable(self._match(np.asarray(seq, dtype=np.int32)))[1]

    def speculative_insert(self, seq: np.ndarray) -> int | None:
        """Dry run of inserting ``seq``: the branch position it would create, or ``None``.

        Marconi sec. 4.1: inserting the *input* tokens before the prefill tells
        whether they share a prefix with cached sequences that ends where no
        checkpoint exists yet (an edge would be split, or a checkpoint-less
        node would gain a branch). Checkpointing the SSM state there during the
        prefill lets the next request with that prefix hit. Extending a leaf,
        or branching where a checkpoint already is, returns ``None``.
        """
        m = self._match(np.asarray(seq, dtype=np.int32))
        p = m.length
        if p == 0:
            return None
        if m.partial is not None:
            return p
        node = m.node
        if node.ckpt:
            return None
        return p if (p == len(seq) or node.children) else None

    # ------------------------------------------------------------------ insert
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        """Cache ``seq`` up to its last checkpoint position; return the tokens newly cached.

        ``checkpoints`` are token counts (``0 < p <= len(seq)``) after which
        the SSM state is kept; tokens after the last one are not cached (no
        hit could reach them). Room is made by evicting the policy's victims;
        if it still does not fit, the longest prefix that fits is admitted.
        """
        seq = np.asarray(seq, dtype=np.int32)  # edges compare raw int32 bytes
        pos = sorted({int(p) for p in checkpoints if 0 < p <= len(seq)})
        if not pos:
            return 0
        upto = pos[-1]
        if upto < len(seq):
            seq = seq[:upto]
        m = self._match(seq)
        covered = m.length
        base = m.partial if m.partial is not None else m.node
        if not self.has_ssm:
            pos = [upto]  # Transformers: no states to place, only the end matters
        # Never evict for what could not fit even in an otherwise empty cache
        # (the matched prefix stays): cut the admission to that bound first.
        bound = self.capacity - covered * self.kv_per_token
        missing, need = self._need(base, pos, covered)
        if need > bound:
            pos, upto = self._truncate(pos, covered, missing, max(bound, 0))
            if not pos:
                return 0
            missing, need = self._need(base, pos, covered)
        pinned = False
        while need > self.capacity - self.used_bytes:
            if not pinned and base is not self.root:
                self.pin(base)  # keep the attach point while making room
                pinned = True
            if not self._evict_until(need):
                # The failed round may still have dropped states on our path.
                missing, _ = self._need(base, pos, covered)
                pos, upto = self._truncate(pos, covered, missing, self.capacity - self.used_bytes)
                missing = [p for p in missing if p <= upto]
                break
            # Evictions may have dropped states on our path (Marconi folds
            # one-child nodes): count again.
            missing, need = self._need(base, pos, covered)
        added = 0
        if pos:
            for p in missing:
                self._set_ckpt(self._node_ending_at(base, p))
            if upto > covered:
                attach = self._node_ending_at(base, covered) if covered else self.root
                self._add_chain(attach, seq, covered, [p for p in pos if p > covered] or [upto])
                added = upto - covered
            else:
                self.touch(self._node_ending_at(base, upto) if self.has_ssm else base)
        if pinned:
            self.unpin(base)
        self.note_peaks()
        return added

    # ------------------------------------------------------------------ pins, access, eviction
    def pin(self, node: Node) -> None:
        """A running request holds ``node`` (like SGLang's ``inc_lock_ref``): never evicted."""
        node.lock += 1
        if node.lock == 1:
            self.policy.on_node_changed(node)

    def unpin(self, node: Node) -> None:
        """Release one :meth:`pin`; a checkpoint-less node may then be tidied away."""
        assert node.lock > 0, "unpin without pin"
        node.lock -= 1
        if node.lock == 0 and node.parent is not None:
            self.policy.on_node_changed(node)
            self._tidy(node)

    def touch(self, node: Node) -> None:
        """Mark ``node`` accessed now."""
        node.t = self.clock
        self.policy.on_node_changed(node)

    def evictable(self, node: Node) -> bool:
        """Unpinned, and a :meth:`candidate`."""
        return not node.lock and self.candidate(node)

    def candidate(self, node: Node) -> bool:
        """A leaf or a one-child node whose checkpoint frees bytes, pinned or not.

        ``marconi``'s rules score pinned candidates too (the reference has no pins:
        ``policies.reference_score``) and only skip them as victims.
        """
        if node is self.root:
            return False
        n = len(node.children)
        return n == 0 or (n == 1 and node.ckpt and self.ckpt_bytes > 0)

    def leaf_evictable(self, node: Node) -> bool:
        """Unpinned leaf (the candidates of leaf-only LRU policies)."""
        return not node.lock and not node.children and node is not self.root

    def evict(self, node: Node) -> int:
        """Evict ``node``; return the bytes freed. A leaf goes; a one-child node folds into it."""
        if not self.evictable(node):
            raise ValueError(f"{node!r} is not evictable")
        self._tell_evict(node)
        before = self.used_bytes
        if node.children:
            self._merge(node)
        else:
            parent = node.parent
            self._remove_leaf(node)
            self._tidy(parent)
        self.evictions += 1
        return before - self.used_bytes

    def _tell_evict(self, node: Node) -> None:
        """Hand ``node``'s path and whether its state goes to ``on_evict`` (if set).

        A leaf takes its KV and checkpoint; a one-child node folds (its KV stays
        with the child) and takes only its checkpoint.
        """
        hook = self.on_evict
        if hook is None:
            return
        parts = []
        walk: Node | None = node
        while walk is not None and walk is not self.root:
            parts.append(walk.tokens)
            walk = walk.parent
        path = np.concatenate(parts[::-1])
        hook(path, bool(node.ckpt) or not self.has_ssm)

    # ------------------------------------------------------------------ checks
    def verify(self) -> None:
        """Assert every invariant (tests and debugging; O(nodes))."""
        kv = ck = swa = 0
        for node in self.tree.nodes():
            parent = node.parent
            assert parent is not None and parent.children[int(node.tokens[0])] is node
            assert node.depth == parent.depth + len(node.tokens) and len(node.tokens) > 0
            assert node.key == node.tokens.tobytes(), f"stale edge bytes {node!r}"
            kv += len(node.tokens)
            swa += self.kinds.tail(len(node.tokens))
            ck += node.ckpt
            if self.has_ssm and not node.lock:
                assert node.ckpt or len(node.children) >= 2, f"untidy {node!r}"
            if not self.has_ssm:
                assert not node.ckpt
        assert (kv, ck, swa) == (self.kv_tokens, self.n_ckpts, self.swa_tokens), "counters drifted"
        assert kv == self.tree.num_tokens
        assert self.used_bytes <= self.capacity, "capacity exceeded"

    # ------------------------------------------------------------------ internals
    def _usable(self, m: Match) -> tuple[Node | None, int]:
        """The node a hit resumes from and its length: on models with SSM layers
        the deepest checkpoint on the matched path (all-or-nothing states);
        on Transformers every matched token."""
        if self.has_ssm:
            node = m.node
            while not node.ckpt and node is not self.root:
                node = parent_of(node)
            return (None, 0) if node is self.root else (node, node.depth)
        if m.length == 0:
            return None, 0
        if m.partial is not None:
            start = m.partial.depth - len(m.partial.tokens)
            if not self.kinds.hit_inside_ok(len(m.partial.tokens), m.length - start):
                # Its sliding-window KV there was dropped: resume at the node's start.
                return (None, 0) if m.node is self.root else (m.node, start)
            return m.partial, m.length
        return m.node, m.length

    def _match(self, seq: np.ndarray) -> Match:
        """``tree.match`` of ``seq`` (int32), reusing the last two while the tree is unchanged.

        An equal array object gets its match back; otherwise the walk resumes
        from the last match if that one's sequence is a prefix of ``seq``.

        A request's lookup and speculative insertion walk the same prompt, and
        its insert (and ``marconi``'s refresh before it) walks prompt + output:
        that walk resumes where the prompt's ended.
        """
        memos, tree = self._memos, self.tree
        if self._memo_at != tree.mutations:
            memos.clear()
            self._memo_at = tree.mutations
            raw = seq.tobytes()
            m = tree.match(seq, raw=raw)
        else:
            for prev, m, _ in memos:
                if prev is seq:
                    return m
            raw = seq.tobytes()  # the walk's own bytes, compared with the last match's
            last = memos[-1] if memos else None  # resumed if a prefix of ``seq``
            if last is None or not raw.startswith(last[2]):
                m = tree.match(seq, raw=raw)
            else:
                m = tree.match(seq, last[1], len(last[0]), raw=raw)
        if len(memos) == 2:
            del memos[0]
        memos.append((seq, m, raw))
        return m

    def shrink_to(self, limit: int) -> int:
        """Evict the policy's victims until at most ``limit`` bytes are cached; set the capacity.

        A shared KV pool (``twin.cache.pool``) reclaims cached pages this way when
        a running request allocates. Pinned nodes stay, so the capacity becomes
        ``max(limit, what is left)``; returns the bytes still cached.
        """
        self.capacity = max(int(limit), 0)
        self._evict_until(0)
        self.capacity = max(self.capacity, self.used_bytes)
        return self.used_bytes

    def _evict_until(self, need: int) -> bool:
        """Evict victims until ``need`` bytes are free; ``False`` if the policy has none left."""
        return evict_for(self, need)
