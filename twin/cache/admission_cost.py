"""What an insert into a prefix cache costs in bytes, and the longest part of it that fits.

:meth:`PrefixCache.insert <twin.cache.prefix_cache.PrefixCache.insert>` asks
for the bytes admitting its checkpoint positions would add (the new chain's KV
and sliding-window tails, the states placed on the cached path and on the new
chain), evicts for them, and cuts the admission to what fits when room runs
out. The bound on edge splits' sliding-window tails lives here, beside the cut
that must honour it.
"""

from __future__ import annotations

from twin.cache.kinds import KindBytes
from twin.cache.radix import Node
from twin.cache.tree_edits import node_holding


class AdmissionCost:
    """An insert's byte costing for :class:`~twin.cache.prefix_cache.PrefixCache` (its fields)."""

    has_ssm: bool
    kinds: KindBytes
    kv_per_token: int
    swa_per_token: int
    ckpt_bytes: int

    def _need(self, base: Node, pos: list[int], covered: int) -> tuple[list[int], int]:
        """(positions on the cached path lacking a state, bytes to admit ``pos``)."""
        missing = self._missing_ckpts(base, pos, covered)
        return missing, self._cost(pos, covered, missing)

    def _cost(self, pos: list[int], covered: int, missing: list[int]) -> int:
        """Bytes admitting ``pos`` may add, ``missing`` its states to place on the cached path.

        Exact but for the sliding-window tails of edge splits (a state placed
        inside an edge, the new chain attached inside one): each is bounded by
        the tail of the deepest position. ``PrefixCache.insert`` evicts for this
        and :meth:`_truncate` cuts to it, so what is admitted never exceeds it.
        """
        n_new = sum(1 for p in pos if p > covered) if self.has_ssm else 0
        kv = (pos[-1] - covered) * self.kv_per_token if pos[-1] > covered else 0
        if self.swa_per_token:  # the new chain's tails, plus at most W per edge split
            ends = [p for p in pos if p > covered] if self.has_ssm else [pos[-1]]
            prev, swa = covered, 0
            for p in ends:
                swa += self.kinds.tail(p - prev)
                prev = p
            swa += (len(missing) + 1) * self.kinds.tail(pos[-1])
            kv += swa * self.swa_per_token
        return kv + (len(missing) + n_new) * self.ckpt_bytes

    def _missing_ckpts(self, base: Node, pos: list[int], covered: int) -> list[int]:
        """Positions already in the tree (``<= covered``) whose node holds no checkpoint."""
        if not self.has_ssm:
            return []
        out = []
        for p in pos:
            if p > covered:
                break
            node = node_holding(base, p)
            if not (node.depth == p and node.ckpt):
                out.append(p)
        return out

    def _truncate(
        self, pos: list[int], covered: int, missing: list[int], free: int
    ) -> tuple[list[int], int]:
        """The longest admission prefix that fits in ``free`` bytes: (positions, end).

        An edge split's sliding-window tail counts too (:meth:`_cost`'s bound, the
        one the eviction made room for): left out, the cache overran its capacity.
        """
        if not self.has_ssm:
            per = self.kv_per_token + self.swa_per_token  # a bound: tails cost at most this
            # The chain attached inside an edge splits it: one more tail, at most this.
            split = self.kinds.tail(pos[-1]) * self.swa_per_token if covered else 0
            end = covered + (max(free - split, 0) // per if per else 0)
            end = min(end, pos[-1])
            return ([end] if end > 0 else []), end
        kept: list[int] = []
        for p in pos:
            if self._cost([*kept, p], covered, [q for q in missing if q <= p]) > free:
                break
            kept.append(p)
        return kept, (kept[-1] if kept else 0)
