"""Pricing state and KV copies between the device and host memory (a part of ``CostModel``).

A copy is one launch per layer of the copy kernel of its direction (fitted, else the
profile's datasheet bandwidth), each of the ``tp`` GPUs moving its shard.
"""

from __future__ import annotations

from twin.costmodel import features as ft
from twin.costmodel.shard_shapes import ShardShapes
from twin.errors import TwinError

TIERS = ("device", "host")
_COPY_KERNEL = {
    ("device", "device"): "copy_d2d",
    ("host", "device"): "copy_h2d",
    ("device", "host"): "copy_d2h",
}


class CopyPricing(ShardShapes):
    """Copies of states and KV between tiers."""

    def copy_s(
        self, nbytes: float, src: str = "device", dst: str = "device", launches: int = 1
    ) -> float:
        """Seconds to move ``nbytes`` (the whole replica's) between tiers.

        Each of the ``tp`` GPUs moves its shard over its own link, in ``launches``
        copies (one per layer, say).
        """
        kernel = _COPY_KERNEL.get((src, dst))
        if kernel is None:
            raise TwinError(
                f"no copy from {src!r} to {dst!r}; tiers are {', '.join(TIERS)} "
                "and host-to-host is not priced"
            )
        if nbytes <= 0:
            return 0.0
        per_launch = nbytes / self.tp / launches
        flops, moved, _ = ft.copy_features(per_launch, kernel)
        return launches * self._k[kernel](flops, moved)

    def checkpoint_copy_s(
        self, n_checkpoints: int = 1, src: str = "device", dst: str = "device"
    ) -> float:
        """Seconds to copy ``n`` SSM checkpoints (every SSM layer's state), one launch a layer."""
        m = self.model
        return self.copy_s(
            n_checkpoints * m.ssm_checkpoint_bytes, src, dst, launches=max(m.n_ssm_layers, 1)
        )

    def kv_transfer_s(self, n_tokens: int, src: str, dst: str) -> float:
        """Seconds to move the KV of ``n_tokens`` between tiers, one launch per attention layer."""
        m = self.model
        return self.copy_s(
            n_tokens * m.kv_bytes_per_token, src, dst, launches=max(m.n_attention_layers, 1)
        )
