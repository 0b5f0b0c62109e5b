"""The links between GPUs beyond a replica's own: the scale-out NIC per GPU, the
NVLink node's size, and the link a disaggregated run's KV crosses (``--kv-link``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twin.errors import TwinError
from twin.hardware import DEFAULT_ALLREDUCE_LATENCY_S, GB, GPUS

if TYPE_CHECKING:  # the configuration checks ``--kv-link`` against KV_LINKS
    from twin.engine.config import EngineConfig

KV_LINKS = ("ib", "nvlink")  # ``--kv-link``'s values (:func:`kv_link`)

# One ConnectX-7 port per GPU on the compute fabric: 400 Gb/s InfiniBand NDR or
# Ethernet (RoCE) per GPU (NVIDIA DGX H100/H200 user guide, "Network ports": eight
# single-port ConnectX-7 for the cluster network). 400e9 bits/s = 50 GB/s per direction.
IB_BW_PER_GPU = 400e9 / 8
# Assumed, not measured: one transfer's fixed latency over RDMA (queue-pair work
# request, one switch hop, the completion seen by the receiver), of the order of
# 10 us; the port-to-port latency itself is sub-microsecond, the software around it is
# not. Within a node the same order as the NCCL start-up the cost model assumes.
IB_LATENCY_S = 10e-6
# GPUs an HGX H100/H200 node links by NVLink. Applied to every GPU: a GB200/GB300 NVL72
# rack's 72-GPU NVLink domain is not modelled yet (nvlink is refused past 8 GPUs there too).
NODE_GPUS = 8


@dataclass(frozen=True)
class KvLink:
    """The link one GPU's share of a transfer crosses: bytes/s per GPU, fixed latency."""

    name: str
    bw_per_gpu: float
    latency_s: float
    source: str

    def seconds(self, gpu_bytes: float) -> tuple[float, float]:
        """(seconds the link is busy, seconds until the bytes are there) for one GPU's share."""
        busy = gpu_bytes / self.bw_per_gpu if self.bw_per_gpu != math.inf else 0.0
        return busy, busy + self.latency_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "link": self.name,
            "bw_per_gpu_bytes_s": self.bw_per_gpu,
            "latency_s": self.latency_s,
            "source": self.source,
        }


def kv_link(kind: str, gpu: str | None, config: EngineConfig) -> KvLink:
    """The link ``--kv-link`` names for the run's GPU and layout (a ``TwinError`` if none)."""
    if kind == "ib":
        return KvLink(
            "ib",
            IB_BW_PER_GPU,
            IB_LATENCY_S,
            "400 Gb/s ConnectX-7 per GPU (NVIDIA DGX H100/H200 user guide); latency assumed",
        )
    if config.disagg.decode_gpu and config.disagg.decode_gpu != gpu:
        raise TwinError(
            f"--kv-link nvlink: the pools' GPUs differ ({gpu or 'the profile'}, "
            f"{config.disagg.decode_gpu}) and an HGX node holds one GPU type; use --kv-link ib"
        )
    spec = GPUS.get(gpu or "")
    if spec is None or not spec.nvlink_bw:
        raise TwinError(
            f"--kv-link nvlink: {gpu or 'this profile'!r} has no NVLink figure in "
            "twin.hardware; use --kv-link ib"
        )
    gpus = config.disagg.prefill_workers * config.cluster.tp + config.disagg.decode_workers * (
        config.disagg.decode_tp or config.cluster.tp
    )
    if gpus > NODE_GPUS:
        raise TwinError(
            f"--kv-link nvlink: the prefill and decode workers share a node of {NODE_GPUS} "
            f"GPUs only if their GPUs add up to at most {NODE_GPUS} (got {gpus}); use "
            "--kv-link ib"
        )
    return KvLink(
        "nvlink",
        spec.interconnect_bw,
        DEFAULT_ALLREDUCE_LATENCY_S,
        f"{spec.display_name} NVLink per direction ({spec.interconnect_bw / GB:g} GB/s, "
        f"{spec.source}); latency assumed (twin.hardware)",
    )
