"""Pricing a step's MoE layers (a part of ``CostModel``): the routed experts through the
profile's fused-MoE fit (its kernel's launch rules, ``twin.costmodel.moe_features``; the
rank's rows by the model's routing rule, ``twin.costmodel.routing``; the layout it prices
at, ``twin.costmodel.moe_layout``), else as GEMMs of the experts' format; the router, the
shared expert (on a second stream where the engine runs one) and the combine. The dense
layers that call it are ``dense_pricing``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from twin import precision as px
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel import mixer_kernels as mk
from twin.costmodel import moe_families as moef
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.moe_layout import fuses_shared_expert, measured_ep, priced_ep
from twin.costmodel.profile import KernelFit
from twin.costmodel.routing import routing_for
from twin.costmodel.series_term import SeriesTerm, series_key
from twin.costmodel.shard_shapes import ShardShapes

FP32_BYTES = 4  # an IEEE fp32 element (the fp32 router's operands: MoePricing._router)


class MoePricing(ShardShapes):
    """The MoE layers of a step (a part of ``CostModel``)."""

    # The fused-MoE fit of the experts' format with its operand bytes (None: no fit in the
    # profile, the experts are priced as GEMMs) and the profile key it was read from.
    # (the fused-MoE fit, activation and weight bytes an element, one CTA's weight bytes)
    _moe_fit: tuple[Callable[..., float], float, float, float] | None
    # The fused-MoE fit's kernel source (its tables' ``kernel_source``; "" without a fit).
    _moe_source: str
    # Whether the fused-MoE fit prices the experts as bf16 (bf16 experts, or those SGLang's
    # Triton runner upcasts: ``moe_features.sglang_upcast_experts``).
    _moe_unquantised: bool
    # The table mode and device the fused-MoE fit's token-tile rule reads
    # (``moe_features.moe_token_tile``: the rules are per kernel, format and GPU).
    _moe_tile_mode: str
    _moe_device: str
    moe_key: str | None
    # Per fused-MoE kernel (the default one, TensorRT-LLM's min-latency one), the model's
    # series in the fit's per-shape term: the term and its knot values; None where the
    # fit has no term or the tables never measured this shape and layout.
    _moe_series: tuple[SeriesTerm, tuple[float, ...]] | None
    _moe_small_series: tuple[SeriesTerm, tuple[float, ...]] | None
    # The expert parallelism and expert width the fused-MoE fit prices at
    # (``twin.costmodel.moe_layout``): the run's, or the TP layout of the same GPUs.
    _moe_ep: int
    _moe_width: int
    # The hidden size the fused-MoE kernel runs at: the model's, or the kernel's padded one
    # (the fit's ``moe_pad_hidden``, with ``_moe_width`` padded by ``moe_pad_width``:
    # vLLM's Marlin mxfp4 experts, ``engine_kernels.MARLIN_MXFP4_PAD``).
    _moe_d: int
    # Whether the shared expert runs inside the fused-MoE launch (``moe_layout``).
    _shared_fused: bool
    # ``DensePricing``'s, read here: the experts' GEMM format, the projections, the
    # bf16 GEMM.
    _expert_q: tuple[Callable[..., float], float, float, str, str] | None
    _proj: Callable[..., float]
    _gemm: Callable[[float, float, float], float]
    # ``CollectivePricing``'s: one all-reduce of a buffer's bytes.
    _allreduce_bytes: Callable[[float], float]
    kernel_layout: KernelLayout

    def _setup_moe(self) -> None:
        """The experts' fused-MoE fit (``moe``, ``moe_fp8``, ...) where the profile has one
        for their format, else ``None``: two grouped GEMMs of the linear fits, as before."""
        self._moe_fit, self.moe_key = None, None
        self._moe_source = ""
        self._moe_unquantised = False
        self._moe_tile_mode = ""
        self._moe_device = ""
        self._routing = routing_for(self.model)
        self._moe_small: Callable[..., float] | None = None
        self._moe_series = self._moe_small_series = None
        self._shared_fused = False
        if not self.model.n_moe_layers:
            return
        fmt = self.priced.expert
        key = self.priced.keys.get("moe")  # twin.costmodel.precision_kernels decides
        if key is None:
            return
        fit = self.profile.kernels[key]
        source = str(fit.provenance.get("kernel_source", ""))
        self._moe_ep = priced_ep(self.model, self.tp, self.ep, source)
        self._shared_fused = fuses_shared_expert(self.model, self.ep, source)
        if fit.series is not None:  # a TP run the table timed only as EP (moe_layout)
            m, series = self.model, fit.series
            shape = (self.d_model, m.moe_d_ff, m.moe_top_k, m.moe_n_experts)

            def timed(moe_tp: int, moe_ep: int) -> bool:
                return series.coefficients(series_key(*shape, moe_tp, moe_ep)) is not None

            self._moe_ep = measured_ep(m, self.tp, self._moe_ep, source, timed)
        # The shape the kernel runs (its padding, where the fit records one; the series
        # above and below keep the model's shape, as the tables name it).
        self._moe_width = _round_up(
            self.model.moe_d_ff // (self.tp // self._moe_ep),
            int(fit.provenance.get("moe_pad_width", 1)),
        )
        self._moe_d = _round_up(self.d_model, int(fit.provenance.get("moe_pad_hidden", 1)))
        e = self.model.dtype_bytes
        # SGLang's Triton runner upcasts mxfp4 experts to bf16 (``moe_features.
        # sglang_upcast_experts``; a fit written before SGLang's grid keeps their own bytes)
        self._moe_unquantised = fmt.bytes_per_param is None or moe_ft.sglang_upcast_experts(
            source, fmt.table_mode, moe_ft.reads_sglang_grid(fit.params)
        )
        act, weight = (
            (float(e), float(e)) if self._moe_unquantised else px.gemm_operand_bytes(fmt, e)
        )
        tile = moe_ft.moe_tile_bytes(self._moe_d, self._moe_width, self.up_mats, weight)
        self._moe_fit = (lat.compile_fast(key, fit.params, self.profile.peaks), act, weight, tile)
        self._moe_source = source
        # The experts' table mode for the token tile: the mxfp8-activation kernel's where the
        # experts are priced by its fit (``Profile.with_experts_fit``), else the format's.
        mxfp8 = (
            self.profile.kernels.get(moef.moe_mxfp8_activation_kernel(fmt.name))
            if fmt.name in moef.MOE_MXFP8_ACTIVATION_MODES
            else None
        )
        self._moe_tile_mode = moe_ft.MXFP8_ACTIVATION_MODE if fit == mxfp8 else fmt.table_mode
        self._moe_device = str(fit.provenance.get("device", ""))
        self.moe_key = key
        self._moe_series = self._series_of(fit)
        small = self.priced.keys.get("moe_small")  # TensorRT-LLM's min-latency kernel
        if small is not None:
            params = self.profile.kernels[small].params
            self._moe_small = lat.compile_fast(small, params, self.profile.peaks)
            self._moe_small_series = self._series_of(self.profile.kernels[small])

    def _series_of(self, fit: KernelFit) -> tuple[SeriesTerm, tuple[float, ...]] | None:
        """This model's series (its MoE shape, MoE TP and EP, as the ``moe_perf`` rows
        name them) in ``fit``'s per-shape term, or None."""
        if fit.series is None:
            return None
        m = self.model
        ep = self._moe_ep
        key = series_key(self.d_model, m.moe_d_ff, m.moe_top_k, m.moe_n_experts, self.tp // ep, ep)
        coefs = fit.series.coefficients(key)
        return None if coefs is None else (fit.series, coefs)

    def _router(self, t: float, n_exp: int) -> float:
        """The MoE router (gate) GEMM over ``t`` tokens at its precision
        (``KernelLayout.router_precision``): the bf16 GEMM; or fp32 operands (4 bytes an
        element) through the same GEMM fit with its FLOP time at the GPU's FP32 CUDA-core
        or TF32 tensor-core peak in place of the bf16 tensor peak (the FLOPs scaled by
        their ratio)."""
        precision = self.kernel_layout.router_precision
        if not precision:
            return self._gemm(t, self.d_model, n_exp)
        flops, nbytes, weights = ft.gemm_sums(t, self.d_model, n_exp, FP32_BYTES)
        peak = mk.fp32_peak(self.profile) if precision == "fp32" else mk.tf32_peak(self.profile)
        waves = ft.gemm_wave_k(t, n_exp, self.d_model, self.sms)
        return self._k["gemm"](
            flops * float(self.profile.peaks["flops"]) / peak, nbytes, weights, waves
        )

    def _moe(self, t: int, norm: float, ar: float) -> tuple[tuple[str, float], ...]:
        m, k, e, d = self.model, self._k, self.elem_bytes, self.d_model
        n_exp, top = m.moe_n_experts, m.moe_top_k
        if self._moe_fit is not None:
            return self._moe_fused(t, norm, ar)
        # The rank's rows and the distinct experts they reach (the model's routing rule,
        # ``twin.costmodel.routing``); each expert reached streams its weights.
        load = self._routing.rank_load(t, n_exp, top, self.ep)
        rows, active = load.rows, load.active
        wide = self.up_mats * self.expert_width
        # Each expert reached a GEMM of its share of the rows (``ft.gemm_wave_k``'s groups).
        share, sms = (rows / active if active else 0.0), self.sms
        q = self._expert_q
        tiles = q[3] if q is not None else ""  # the fit's kernel's tiles
        up_waves = ft.gemm_wave_k(share, wide, d, sms, active, tiles)
        down_waves = ft.gemm_wave_k(share, d, self.expert_width, sms, active, tiles)
        if q is None:
            up = k["gemm"](
                2.0 * rows * d * wide,
                e * (rows * d + active * d * wide + rows * wide),
                active * d * wide,
                up_waves,
            )
            down = k["gemm"](
                2.0 * rows * self.expert_width * d,
                e * (rows * self.expert_width + active * self.expert_width * d + rows * d),
                active * self.expert_width * d,
                down_waves,
            )
        else:  # the experts' format: activations and weights at its bytes, bf16 out
            kernel, a, w, _, quant = q
            # Each GEMM's activation quantisation, where the served layer runs one.
            up_quant = (ft.act_quant_bytes(rows, d, e, quant),) if quant else ()
            down_quant = (ft.act_quant_bytes(rows, self.expert_width, e, quant),) if quant else ()
            up = kernel(
                2.0 * rows * d * wide,
                a * rows * d + w * active * d * wide + e * rows * wide,
                active * d * wide,
                up_waves,
                *up_quant,
            )
            down = kernel(
                2.0 * rows * self.expert_width * d,
                a * rows * self.expert_width + w * active * self.expert_width * d + e * rows * d,
                active * self.expert_width * d,
                down_waves,
                *down_quant,
            )
        router = self._router(t, n_exp)
        act = k["elementwise"](0.0, e * ((self.up_mats + 1.0) * rows * self.expert_width))
        shared_gemm, shared_act = self._shared_expert(t)
        up += shared_gemm
        act += shared_act
        combine = k["elementwise"](0.0, e * ((top + 1.0) * t * d))
        return (
            ("elementwise", norm + act + combine),
            ("gemm", router + up + down),
            ("allreduce", ar),
        )

    def _moe_fused(self, t: int, norm: float, ar: float) -> tuple[tuple[str, float], ...]:
        """An MoE layer whose routed experts take the profile's fused-MoE fit: the rows of
        the rank the layer waits for through the distinct experts of its ``n / ep`` they
        reach (the model's routing rule, ``twin.costmodel.routing``), every routed row's
        hidden state for the whole-batch term, the
        activation and top-k combine inside the fitted kernel (NVIDIA's tables time the
        fused call). With ``ep`` > 1 every rank holds every token (TP attention) and the
        layer's all-reduce combines the ranks' outputs (vLLM's expert parallelism without
        attention DP): no all-to-all. The rank is priced at ``_moe_ep``'s layout
        (``twin.costmodel.moe_layout``: a table whose EP rows time a hot rank prices the
        TP layout of the same GPUs)."""
        assert self._moe_fit is not None
        kernel, act_e, w_e, tile = self._moe_fit
        # the kernel's hidden size (padded where it pads: ``_moe_d``)
        m, e, d = self.model, self.elem_bytes, self._moe_d
        n_exp, top, ep = m.moe_n_experts, m.moe_top_k, self._moe_ep
        routed = t * top
        load = self._routing.rank_load(t, n_exp, top, ep)
        rows, active = load.rows, load.active
        if self._shared_fused:  # one more expert, every token's: its weights and t rows
            routed, rows, active = routed + t, rows + t, active + 1.0
        # the rank's experts held (a fused shared expert one more)
        local = n_exp / ep + (1.0 if self._shared_fused else 0.0)
        computed, streamed = self._moe_padded_rows(rows, active, local)
        flops, nbytes, weights = moe_ft.moe_sums(
            computed,
            active,
            d,
            self._moe_width,
            self.up_mats,
            e,
            act_e,
            w_e,
            streamed,
            self.kernel_layout.moe_rows_per_expert or 1,
        )
        series = self._moe_series
        if self._moe_small is not None and t <= moef.MOE_MIN_LATENCY_MAX_TOKENS:
            kernel = self._moe_small  # the step routes few enough tokens (formulas)
            series = self._moe_small_series
        # No L2 residency in a serving step (``features.replay_resident``): the tables'
        # L2 reads are their collector's replays on one layer's weights; in a forward pass
        # a layer's experts were last read a whole pass earlier, so they come from HBM.
        # SGLang's default Triton config above as many tokens as the rank's experts
        # (``moe_features.sglang_large_m``; 0 for every other kernel, and a fit written before
        # the term reads ``c_large_m_weights`` 0).
        unquantised = self._moe_unquantised
        large_m = moe_ft.sglang_large_m(self._moe_source, unquantised, t, local)
        large_w = weights if large_m else 0.0
        # The token tile the kernel takes each expert's rows in (``moe_features.
        # moe_token_tile``: vLLM's Marlin MoE, FlashInfer's TRT-LLM-gen mxfp4; 0 for every
        # other kernel, and a fit written before the terms reads their coefficients 0).
        # SGLang's Triton kernel: the BLOCK_SIZE_M its config lookup resolves for the served
        # experts (``moe_features.sglang_triton_block_m``: ``E`` is 257 where the shared expert is
        # fused). TensorRT-LLM's Triton MoE on Hopper: its routing's row block
        # (``moe_features.trtllm_triton_block_m``).
        token_tile = moe_ft.expert_token_tile(
            self._moe_source,
            self._moe_device,
            self._moe_tile_mode,
            self.priced.expert.table_mode,
            t,
            t,
            top,
            local,
            self._moe_width,
        )
        pad, restream = moe_ft.moe_tile_extras(
            rows, active, token_tile, d, self._moe_width, self.up_mats
        )
        # SGLang's Triton grid in waves of its default config's tiles (``moe_features.
        # sglang_grid_flops``; 0 for every other kernel, and a fit written before the term
        # reads ``c_grid_flops`` 0). A serving rank runs every token's rows (no rank-0
        # workload), at the routing rule's rows and experts.
        grid = (
            moe_ft.sglang_grid_flops(
                rows, active, d, self._moe_width, self.up_mats, large_m, self.sms
            )
            if moe_ft.sglang_default_config(self._moe_source, unquantised)
            else 0.0
        )
        # vLLM's Triton kernel passes over every routed row of the step (its activation;
        # the remote experts' zero writes under EP, every rank holding every token):
        # ``moe_features.vllm_triton_routed_elems``; 0 for every other kernel, and a fit written
        # before the term reads ``c_routed_passes`` 0.
        passes = moe_ft.vllm_triton_routed_elems(
            self._moe_source, routed, rows, d, self._moe_width, self.up_mats
        )
        experts = kernel(
            flops,
            nbytes,
            weights,
            float(routed * d),
            tile,
            0.0,
            large_w,
            pad,
            restream,
            grid,
            passes,
            active,
        )
        if series is not None:  # a measured shape: its kernel config (series_term)
            experts *= math.exp(series[0].log_factor(series[1], t))
        # A kernel whose cost per expert held the fit does not carry (KernelLayout).
        experts += self.kernel_layout.moe_layer_extra_s
        router = self._router(t, n_exp)
        if ar and d != self.d_model:  # the padded output is all-reduced (_moe_d)
            ar = self._allreduce_bytes(t * d * e)
        shared, act = self._shared_expert(t)
        if 0 < t <= self.kernel_layout.shared_expert_stream_tokens and shared + act > 0.0:
            # The shared expert on a second stream beside the router and the routed
            # experts (``KernelLayout.shared_expert_stream_tokens``): the layer waits for
            # the longer path, so only the shared expert's excess over the routed path
            # is added (its GEMM and activation shares kept for the breakdown).
            keep = max(shared + act - (router + experts), 0.0) / (shared + act)
            shared, act = shared * keep, act * keep
        return (
            ("elementwise", norm + act),
            ("gemm", router + shared),
            ("moe", experts),
            ("allreduce", ar),
        )

    def _shared_expert(self, t: int) -> tuple[float, float]:
        """(GEMM, element-wise) seconds of an MoE layer's shared expert over ``t`` tokens:
        a dense MLP over every token at the experts' format; (0, 0) for a model without
        one or where the fused-MoE launch runs it as one more expert (``_shared_fused``)."""
        if not self.shared_width or (self._moe_fit is not None and self._shared_fused):
            return 0.0, 0.0
        sw, d, e = self.shared_width, self.d_model, self.elem_bytes
        gemm = self._proj(t, d, self.up_mats * sw, True) + self._proj(t, sw, d, True)
        return gemm, self._k["elementwise"](0.0, e * ((self.up_mats + 1.0) * t * sw))

    def shared_expert_s(self, tokens: int) -> float:
        """Seconds of one MoE layer's shared expert over ``tokens`` tokens, as the layer's
        price holds it (0 where it has none apart: ``_shared_expert``); the attention-DP
        pricer moves it to the ranks' side where the engine runs it on each rank's own
        tokens (``KernelLayout.dense_ffn_on_rank``)."""
        return float(sum(self._shared_expert(tokens)))

    def _moe_padded_rows(self, rows: float, active: float, held: float) -> tuple[float, float]:
        """(rows computed, rows streamed uncomputed) of a fused-MoE launch: ``rows`` as
        routed and none, or, where the engine runs its experts through DeepGEMM's
        contiguous layout (``KernelLayout.moe_rows_per_expert``: ``twin.engine.
        kernel_layouts_vllm.vllm_kernel_layout`` and ``kernel_layouts_trtllm`` decide the
        build, the GPU and the experts' format), at least that many rows computed for each
        expert reached (each expert's rows padded to the alignment; a lower bound where an
        expert has more rows than that). Where the launch is sized for the worst case
        (``KernelLayout.moe_pads_every_expert``: the routed rows plus one alignment less a
        row for each of the ``held`` experts, rounded up to the alignment), the blocks
        beyond those are priced streamed: loaded and stored, no MMAs (vLLM 0.12.0 computes
        them as expert 0's: ``twin.engine.kernel_layouts_vllm``, "M_sum")."""
        layout = self.kernel_layout
        align = layout.moe_rows_per_expert
        if not align:
            return rows, 0.0
        computed = max(rows, active * align)
        if not layout.moe_pads_every_expert:
            return computed, 0.0
        worst = math.ceil((rows + held * (align - 1)) / align) * align
        return computed, max(worst - computed, 0.0)


def _round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (vLLM's ``round_up``)."""
    return -(-n // multiple) * multiple
