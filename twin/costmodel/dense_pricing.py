"""Pricing the parts of a step that depend only on its token count: every layer's
GEMMs, norms and element-wise passes, the MoE experts, the all-reduces, and the head.

The layer recipes are in ``twin.costmodel.model``'s docstring; ``CostModel`` remembers
the dense seconds per token count, since decode steps repeat them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from twin import precision as px
from twin.costmodel import collective_families as colf
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mixer_kernels as mk
from twin.costmodel import moe_families as moef
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.breakdown import LABEL, StepCost
from twin.costmodel.kernel_layout import VLLM_CUSTOM_ALLREDUCE_MAX_BYTES, KernelLayout
from twin.costmodel.moe_layout import fuses_shared_expert, measured_ep, priced_ep
from twin.costmodel.profile import KernelFit
from twin.costmodel.routing import routing_for
from twin.costmodel.series_term import SeriesTerm, series_key
from twin.costmodel.shard_shapes import ShardShapes

FP32_BYTES = 4  # an IEEE fp32 element (the fp32 router's operands: DensePricing._router)


def _less(price: Callable[..., float], gap: float) -> Callable[..., float]:
    """``price`` less ``gap`` seconds a call."""

    def priced(*args: float) -> float:
        return price(*args) - gap

    return priced


class DensePricing(ShardShapes):
    """The token-count-only kernels of a step (a part of ``CostModel``)."""

    _allreduce_fit: Callable[..., float] | None
    _gather_fits: dict[str, Callable[..., float]]
    # A quantised format's GEMM fit: (its price, activation and weight bytes an element,
    # its kernel's tile rule, ``features.gemm_tile_rule``; the activation quantisation
    # pass the served layer runs before it, ``features.act_quant_bytes``: "" none priced);
    # None: the bf16 GEMM.
    _linear_q: tuple[Callable[..., float], float, float, str, str] | None
    _expert_q: tuple[Callable[..., float], float, float, str, str] | None
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
    # Whether the shared expert runs inside the fused-MoE launch (``moe_layout``).
    _shared_fused: bool
    allreduce_latency_s: float
    rope_in_attention: bool
    kernel_keys: dict[str, str]
    allreduce_s_per_byte: float
    _mla_dense: Callable[[int, float, float], tuple[tuple[str, float], ...]]
    kernel_layout: KernelLayout

    def _setup_rope(self) -> None:
        """Whether a RoPE pass is priced apart (``rope_s``): not where the profile's
        attention fits were measured from an engine whose attention rows include it
        (``twin.costmodel.kernel_sources.KernelSource.rope_in_attention``)."""
        from twin.costmodel.kernel_sources import KERNEL_SOURCES

        source = KERNEL_SOURCES.get(str(self.profile.provenance.get("engine", "")))
        fit = self.profile.kernels.get(self.kernel_keys["attn_decode"])
        measured = fit is not None and fit.provenance.get("source") == "measured"
        self.rope_in_attention = bool(source and source.rope_in_attention and measured)

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

    def _setup_linear_kernels(self) -> None:
        """The GEMMs of the linear layers and of the experts at their precision
        (``twin.costmodel.precision_kernels``): ``None`` for bf16, which keeps the bf16
        fit and features (its prices unchanged to the bit); else the format's fit and its
        operand bytes (``twin.precision.gemm_operand_bytes``)."""
        prof, e = self.profile, self.model.dtype_bytes

        def quantised(
            fmt: px.WeightFormat,
        ) -> tuple[Callable[..., float], float, float, str, str] | None:
            if fmt.bytes_per_param is None:
                return None
            fit = prof.kernels[fmt.kernel]
            act, weight = px.gemm_operand_bytes(fmt, e)
            price = lat.compile_fast(fmt.kernel, fit.params, prof.peaks)
            # The kernel's own tiles and the activation quantisation its table timed in
            # each call, read from the fit's provenance as the fit read them.
            source = fit.provenance or {}
            kernel_source = str(source.get("kernel_source", ""))
            tiles = ft.gemm_tile_rule(kernel_source, str(source.get("device", "")))
            quant = ft.act_quant_scheme(kernel_source) if fm.get_formula(fmt.kernel).serial else ""
            if self.kernel_layout.fp8_static_activation and fmt.kernel == "gemm_fp8":
                # KernelLayout.fp8_static_activation: the served layer's static quantisation
                # runs fused into the pass before the GEMM, whereas the table timed a
                # dynamic per-token one as a kernel of its own in each call (aiconfigurator
                # d5bad971c collector/vllm/collect_gemm.py, Fp8Config(activation_scheme=
                # "dynamic"); ``features.act_quant_scheme``): neither its bytes
                # (``act_quant_bytes``) nor its launch, the fit's floor above bf16's, is
                # priced.
                gap = max(fit.params["t0_s"] - prof.kernels["gemm"].params["t0_s"], 0.0)
                price = _less(price, gap)
                quant = ""
            return price, act, weight, tiles, quant

        self._linear_q = quantised(self.priced.linear)
        expert = self.priced.expert
        if not self.model.n_moe_layers:
            self._expert_q = None
        elif expert.bytes_per_param is not None and "expert" not in self.priced.keys:
            # A format priced by its fused-MoE fit alone (precision_kernels): the shared
            # expert's GEMMs take the linear layers' fit.
            self._expert_q = self._linear_q
        else:
            self._expert_q = quantised(expert)

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
        self._moe_width = self.model.moe_d_ff // (self.tp // self._moe_ep)
        e = self.model.dtype_bytes
        # SGLang's Triton runner upcasts mxfp4 experts to bf16 (``moe_features.
        # sglang_upcast_experts``; a fit written before SGLang's grid keeps their own bytes)
        self._moe_unquantised = fmt.bytes_per_param is None or moe_ft.sglang_upcast_experts(
            source, fmt.table_mode, moe_ft.reads_sglang_grid(fit.params)
        )
        act, weight = (
            (float(e), float(e)) if self._moe_unquantised else px.gemm_operand_bytes(fmt, e)
        )
        tile = moe_ft.moe_tile_bytes(self.d_model, self._moe_width, self.up_mats, weight)
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

    def _gemm(self, rows: float, k: float, n: float) -> float:
        """A bf16 GEMM (the LM head, the MoE router; every projection of a bf16 model)."""
        waves = ft.gemm_wave_k(rows, n, k, self.sms)
        return self._k["gemm"](*ft.gemm_sums(rows, k, n, self.elem_bytes), waves)

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

    def _proj(self, rows: float, k: float, n: float, expert: bool = False) -> float:
        """A linear layer's GEMM at the model's precision (``expert``: at the experts'
        format, the shared expert's)."""
        q = self._expert_q if expert else self._linear_q
        if q is None:
            return self._gemm(rows, k, n)
        kernel, act, weight, tiles, quant = q
        waves = ft.gemm_wave_k(rows, n, k, self.sms, 1, tiles)
        sums = ft.gemm_sums_at(rows, k, n, self.elem_bytes, act, weight)
        if not quant:
            return kernel(*sums, waves)
        return kernel(*sums, waves, ft.act_quant_bytes(rows, k, self.elem_bytes, quant))

    def _dense(self, t: int, cost: StepCost | None) -> float:
        """Everything that depends only on the step's token count: GEMMs, norms, all-reduces."""
        m, elem, e, d = self.model, self._k["elementwise"], self.elem_bytes, self.d_model
        norm = elem(0.0, e * (4.0 * t * d + d))  # fused residual add + RMSNorm
        ar = self._allreduce(t)
        # Each layer's own norm and the input quantisation its first GEMM's price holds
        # (both zero unless the norms run inside the all-reduce: _norm_in_allreduce).
        layer_norm, quant = self._norm_in_allreduce(t, norm)
        total = 0.0

        def put(kind: str, layers: int, parts: tuple[tuple[str, float], ...]) -> float:
            if cost is not None:
                for kernel, s in parts:
                    cost.add(kind, kernel, layers * s)
            return layers * sum(s for _, s in parts)

        kinds = self.kinds
        if m.n_attention_layers:
            qkv = self._proj(t, d, self.qkv_width) - quant
            o = self._proj(t, self.heads * self.head_dim, d)
            rope = (
                0.0
                if self.rope_in_attention
                else elem(0.0, e * (2.0 * t * (self.heads + self.kv_heads) * self.head_dim))
            )
            qk_elem, qk_ar = self._qk_norm(t)
            for kind in ("attention", "swa"):
                if kinds.get(kind):
                    total += put(
                        LABEL[kind],
                        kinds[kind],
                        (
                            ("elementwise", layer_norm + rope + qk_elem),
                            ("gemm", qkv + o),
                            ("allreduce", ar + qk_ar),
                        ),
                    )
        if kinds.get("mla"):  # twin.costmodel.mla_pricing
            total += put(LABEL["mla"], kinds["mla"], self._mla_dense(t, layer_norm, ar))
        if kinds.get("mamba2"):
            g_in = self._proj(t, d, self.in_proj_width)
            g_out = self._proj(t, self.d_inner, d)
            gated = elem(0.0, e * (3.0 * t * self.d_inner + self.d_inner))
            total += put(
                "ssm",
                kinds["mamba2"],
                (("elementwise", norm + gated), ("gemm", g_in + g_out), ("allreduce", ar)),
            )
        if kinds.get("mamba1"):
            di, r, big_n = self.m1_inner, self.m1_rank, self.m1_state
            # in_proj, x_proj (dt, B, C), dt_proj, out_proj (mamba_simple.py's four GEMMs).
            gemms = self._proj(t, d, 2 * di) + self._proj(t, di, r + 2 * big_n)
            gemms += self._proj(t, r, di) + self._proj(t, di, d)
            gated = elem(0.0, e * 3.0 * t * di)  # y * silu(z)
            total += put(
                "mamba1",
                kinds["mamba1"],
                (("elementwise", norm + gated), ("gemm", gemms), ("allreduce", ar)),
            )
        if kinds.get("gdn"):
            gemms = self._gdn_in_proj(t) + self._proj(t, self.gdn_val_w, d)
            gated = elem(0.0, e * (3.0 * t * self.gdn_val_w + m.gdn_head_v_dim))
            total += put(
                "gdn",
                kinds["gdn"],
                (("elementwise", norm + gated), ("gemm", gemms), ("allreduce", ar)),
            )
        if m.n_mlp_layers:
            up = self._proj(t, d, self.up_mats * self.mlp_width) - quant
            down = self._proj(t, self.mlp_width, d)
            act = elem(0.0, e * ((self.up_mats + 1.0) * t * self.mlp_width))
            total += put(
                "mlp",
                m.n_mlp_layers,
                (("elementwise", layer_norm + act), ("gemm", up + down), ("allreduce", ar)),
            )
        if m.n_moe_layers:
            total += put("moe", m.n_moe_layers, self._moe(t, layer_norm, ar))
        return total

    def _norm_in_allreduce(self, t: int, norm: float) -> tuple[float, float]:
        """(seconds of a layer's residual add + RMSNorm pass, seconds of the input
        quantisation to take off the GEMM that follows it): ``(norm, 0)`` unless
        ``KernelLayout.norm_in_allreduce`` holds under TP.

        TensorRT-LLM's Llama (``tensorrt_llm/_torch/models/modeling_llama.py``
        ``LlamaDecoderLayer``, NVIDIA/TensorRT-LLM at 3a5901cd, the 1.x PyTorch flow) sets
        ``PRE_MLP_FUSION`` and ``POST_MLP_FUSION`` where the mapping has TP (no attention
        DP) and ``hidden_size > 4096`` (``TRTLLM_LLAMA_EAGER_FUSION_DISABLED`` unset): the
        attention's and the MLP's all-reduces run with ``AllReduceFusionOp.RESIDUAL_RMS_NORM``
        (the post-attention norm; the next layer's ``input_layernorm``), so no norm pass
        of its own is launched; the all-reduce's fit stands for the fused kernel. With an
        NVFP4 checkpoint (``KernelLayout.allreduce_quantises_input``) the op is
        ``RESIDUAL_RMS_NORM_QUANT_NVFP4``: it also writes the gate/up and next QKV
        projections' input as an ``Fp4QuantizedTensor``, so those
        GEMMs quantise nothing, whereas the tables time ``Linear.forward`` on a bf16 input
        (aiconfigurator ``collector/trtllm/collect_gemm.py`` ``run_gemm``), whose NVFP4
        method runs ``fp4_quantize`` first on any input that is no ``Fp4QuantizedTensor``
        (``tensorrt_llm/_torch/modules/linear.py`` ``NVFP4LinearMethod.apply``). That
        pass is priced as the element-wise kernel it is (read bf16, write fp4 and one
        scale byte per 16 elements) and taken off the QKV and gate/up GEMMs.

        gpt-oss (``modeling_gpt_oss.py`` ``TransformerBlock.forward_tp``, at 050b6cb9)
        fuses both norms the same way under TP, with ``RESIDUAL_RMS_NORM`` alone: no
        quantisation is taken off.

        SGLang's FlashInfer all-reduce fusion runs the fused kernel (FlashInfer's
        ``trtllm_allreduce_fusion``) only in steps of at most
        ``KernelLayout.norm_in_allreduce_max_tokens`` tokens; larger steps keep the norm
        pass (``twin.engine.kernel_layouts_sglang.sglang_allreduce_norm_tokens``). An MLA
        layer's pre-attention norm is the one given here too (``MlaPricing._mla_dense``)."""
        if not self.kernel_layout.norm_in_allreduce or self.tp == 1:
            return norm, 0.0
        cap = self.kernel_layout.norm_in_allreduce_max_tokens
        if cap and t > cap:  # past the fused kernel's size: all-reduce, then the norm
            return norm, 0.0
        if not self.kernel_layout.allreduce_quantises_input or self.priced.linear.name != "nvfp4":
            return 0.0, 0.0
        nbytes = t * self.d_model * (self.elem_bytes + 0.5 + 1.0 / 16.0)
        return 0.0, self._k["elementwise"](0.0, nbytes)

    def _gdn_in_proj(self, t: int) -> float:
        """A GDN layer's input projection (q, k, v, the output gate z, and the b and a of
        each value head) as ``KernelLayout.gdn_in_proj_gemms`` launches: one GEMM of the whole
        width (SGLang 0.5.10.post1 ``models/qwen3_5.py``: ``in_proj_qkvz``, with
        ``in_proj_ba`` on a second stream beside it in a captured decode graph), or the
        checkpoint's four matrices apart (SGLang 0.5.9 ``models/qwen3_5.py``
        ``Qwen3_5GatedDeltaNet._forward``: ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``,
        ``in_proj_a`` in turn, each its own launch with its own floor, which a decode
        step of a few tokens pays). Apart, ``in_proj_b`` and ``in_proj_a`` (one column a
        value head) are bf16 GEMMs: a 128 x 128-block fp8 column-parallel layer under TP
        needs each rank's columns a multiple of 128 (SGLang 0.5.9
        ``layers/quantization/fp8.py`` ``validate_block_quant_shapes`` raises otherwise),
        which a few dozen value heads split over the ranks never are."""
        d, key, val, heads = self.d_model, self.gdn_key_w, self.gdn_val_w, self.gdn_v
        if self.kernel_layout.gdn_in_proj_gemms == 4:
            b_and_a = 2.0 * self._gemm(t, d, heads)
            return self._proj(t, d, 2 * key + val) + self._proj(t, d, val) + b_and_a
        return self._proj(t, d, 2 * key + 2 * val + 2 * heads)

    def _qk_norm(self, t: int) -> tuple[float, float]:
        """(element-wise, all-reduce) seconds of an attention layer's RMSNorms over the
        whole query and key projections (``ModelSpec.qk_norm_across_heads``, MiniMax-M2),
        or of its per-head q/k norms where they run as a pass of their own
        (``KernelLayout.qk_norm_rope_pass``); (0, 0) for a model without them.

        vLLM 0.16.0-0.19.0 ``model_executor/layers/mamba/linear_attn.py``
        ``MiniMaxText01RMSNormTP.forward_qk`` (called by ``models/minimax_m2.py``
        ``MiniMaxM2Attention.forward``): each rank squares and averages its slice of q and
        of k in fp32; under TP the two variances a token (``torch.cat``, 2 fp32) are
        all-reduced (``tensor_model_parallel_all_reduce``) and divided by the ranks; then q
        and k are scaled by ``rsqrt(variance + eps)`` and the weights, back to bf16. The
        all-reduce is a collective the compiled graph cannot fuse across, so with TP the
        norm is two passes over q and k (the variances; the scaling, which writes them)
        around one all-reduce; on one GPU one pass reads and writes them. Each pass is one
        element-wise launch (its floor, ``t0``, is what a decode step of a few tokens pays)
        and the all-reduce is priced by the profile's fit at its 8 bytes a token: small
        messages, so its latency."""
        if not self.model.n_attention_layers:
            return 0.0, 0.0
        elem, e = self._k["elementwise"], self.elem_bytes
        width = (self.heads + self.kv_heads) * self.head_dim  # this rank's q and k
        scale = elem(0.0, e * 2.0 * t * width)  # read q and k, write them
        if self.kernel_layout.qk_norm_rope_pass:
            # TensorRT-LLM's Qwen3 (``_torch/modules/qk_norm_attention.py``
            # ``QKNormRoPEAttention.apply_qk_norm_rope``, ``fuse_qk_norm_rope`` true by
            # default in ``models/modeling_qwen3.py`` ``Qwen3Attention``, NVIDIA/TensorRT-LLM
            # at 5dedf53b): ``torch.ops.trtllm.fused_qk_norm_rope`` normalises every q and
            # k head and rotates them in place in the fused QKV, one launch, before the
            # attention op (which then applies no RoPE). Its TensorRT-LLM attention fit
            # times RoPE inside the op (``KernelSource.rope_in_attention``): left as is.
            return scale, 0.0
        if not self.model.qk_norm_across_heads:
            return 0.0, 0.0
        if self.tp == 1:
            return scale, 0.0
        variances = elem(0.0, e * t * width)  # read q and k
        return variances + scale, self._allreduce_bytes(t * 2.0 * 4.0)

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
        m, e, d = self.model, self.elem_bytes, self.d_model
        n_exp, top, ep = m.moe_n_experts, m.moe_top_k, self._moe_ep
        routed = t * top
        load = self._routing.rank_load(t, n_exp, top, ep)
        rows, active = load.rows, load.active
        if self._shared_fused:  # one more expert, every token's: its weights and t rows
            routed, rows, active = routed + t, rows + t, active + 1.0
        flops, nbytes, weights = moe_ft.moe_sums(
            self._moe_padded_rows(rows, active),
            active,
            d,
            self._moe_width,
            self.up_mats,
            e,
            act_e,
            w_e,
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
        local = n_exp / ep + (1.0 if self._shared_fused else 0.0)
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

    def _moe_padded_rows(self, rows: float, active: float) -> float:
        """The rows a fused-MoE launch computes: ``rows`` as routed, or, where the engine
        runs its experts through DeepGEMM's contiguous layout
        (``KernelLayout.moe_rows_per_expert``: ``twin.engine.kernel_layouts_vllm.
        vllm_kernel_layout`` decides the build, the GPU and the experts' format), at least
        that many rows for each expert reached (each expert's rows padded to the
        alignment; a lower bound where an expert has more rows than that)."""
        align = self.kernel_layout.moe_rows_per_expert
        if not align:
            return rows
        return max(rows, active * align)

    def _head(self, t: int, seqs: int, cost: StepCost | None) -> float:
        """Embedding gather, final norm and the LM head (one row per sequence)."""
        elem, e, d = self._k["elementwise"], self.elem_bytes, self.d_model
        embed = elem(0.0, e * 2.0 * t * d)
        norm = elem(0.0, e * (2.0 * t * d + d))
        lm = self._gemm(seqs, d, self.vocab) if seqs else 0.0
        if cost is not None:
            cost.add("head", "elementwise", embed + norm)
            cost.add("head", "gemm", lm)
        return embed + norm + lm
