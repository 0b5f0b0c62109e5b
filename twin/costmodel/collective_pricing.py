"""Pricing the tensor-parallel collectives of a step (a part of ``CostModel``): the
all-reduce of the hidden states (the profile's fit for the GPU count, NCCL's above the
custom all-reduce's size limit where the layout has one, else a ring on the peaks), and
NCCL's all-gather and reduce-scatter.
"""

from __future__ import annotations

from collections.abc import Callable

from twin.costmodel import collective_families as colf
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.kernel_layout import VLLM_CUSTOM_ALLREDUCE_MAX_BYTES, KernelLayout
from twin.costmodel.shard_shapes import ShardShapes


class CollectivePricing(ShardShapes):
    """The tensor-parallel collectives of a step (a part of ``CostModel``)."""

    _allreduce_fit: Callable[..., float] | None
    _gather_fits: dict[str, Callable[..., float]]
    allreduce_latency_s: float
    allreduce_s_per_byte: float
    kernel_layout: KernelLayout

    def _setup_allreduce(self) -> None:
        """A fitted all-reduce for this GPU count if the profile has one, else a ring on
        peaks; NCCL's fit above the custom all-reduce's size limit where the layout has one
        (``KernelLayout.custom_allreduce_size_limit``) and the profile NCCL's fit."""
        tp, peaks = self.tp, self.profile.peaks
        # NCCL's all-gather and reduce-scatter where the profile fits them at this GPU
        # count (``_gather_bytes``), else None: priced on the all-reduce.
        self._gather_fits = {}
        for op in ("allgather", "reducescatter") if tp > 1 else ():
            key = colf.collective_kernel(op, tp)
            got = self.profile.kernels.get(key)
            if got is not None:
                self._gather_fits[op] = lat.compile_fast(key, got.params, peaks)
        self._nccl_above: tuple[float, Callable[..., float]] | None = None
        limits = VLLM_CUSTOM_ALLREDUCE_MAX_BYTES.get(self.profile.gpu, {})
        nccl = self.profile.kernels.get(colf.nccl_allreduce_kernel(tp))
        if self.kernel_layout.custom_allreduce_size_limit and tp in limits and nccl is not None:
            key = colf.nccl_allreduce_kernel(tp)
            self._nccl_above = (limits[tp], lat.compile_fast(key, nccl.params, peaks))
        fit = self.profile.kernels.get(colf.allreduce_kernel(tp)) if tp > 1 else None
        if fit is not None:
            self._allreduce_fit = lat.compile_fast(colf.allreduce_kernel(tp), fit.params, peaks)
            return
        self._allreduce_fit = None
        self.allreduce_latency_s = float(peaks.get("allreduce_latency_s", 0.0))
        bw = float(peaks["interconnect_bw"]) if tp > 1 else 1.0
        self.allreduce_s_per_byte = 1.0 / bw

    def _allreduce(self, tokens: int) -> float:
        """One all-reduce of the step's hidden states across the ``tp`` GPUs."""
        return self._allreduce_bytes(tokens * self.d_model * self.elem_bytes)

    def _allreduce_bytes(self, nbytes: float) -> float:
        """One all-reduce of ``nbytes`` a GPU across the ``tp`` GPUs."""
        if self.tp == 1:
            return 0.0
        flops, ring_bytes, _ = ft.allreduce_features(nbytes, self.tp)
        if self._nccl_above is not None and nbytes >= self._nccl_above[0]:
            return self._nccl_above[1](flops, ring_bytes)
        if self._allreduce_fit is not None:
            return self._allreduce_fit(flops, ring_bytes)
        return self.allreduce_latency_s + ring_bytes * self.allreduce_s_per_byte

    def _gather_bytes(self, op: str, nbytes: float) -> float:
        """One all-gather (``op`` ``allgather``) or reduce-scatter (``reducescatter``) of
        a buffer of ``nbytes`` (all the ranks' rows) over the ``tp`` GPUs: the profile's
        NCCL fit of ``op`` where it has one, else the all-reduce's price at the ring
        traffic, half an all-reduce of the buffer."""
        if self.tp == 1:
            return 0.0
        fit = self._gather_fits.get(op)
        if fit is None:
            return self._allreduce_bytes(nbytes / 2)
        flops, ring_bytes, _ = ft.gather_features(nbytes, self.tp)
        return float(fit(flops, ring_bytes))
