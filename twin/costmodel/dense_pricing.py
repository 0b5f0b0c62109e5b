"""Pricing the parts of a step that depend only on its token count: every layer's
GEMMs, norms and element-wise passes, the MoE experts, the all-reduces, and the head.

The layer recipes are in ``twin.costmodel.model``'s docstring; ``CostModel`` remembers
the dense seconds per token count, since decode steps repeat them.

The MoE layers' prices are ``moe_pricing``'s (``MoePricing``), the tensor-parallel
collectives' ``collective_pricing``'s (``CollectivePricing``).
"""

from __future__ import annotations

from collections.abc import Callable

from twin import precision as px
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel.breakdown import LABEL, StepCost
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.shard_shapes import ShardShapes


def _less(price: Callable[..., float], gap: float) -> Callable[..., float]:
    """``price`` less ``gap`` seconds a call."""

    def priced(*args: float) -> float:
        return price(*args) - gap

    return priced


class DensePricing(ShardShapes):
    """The token-count-only kernels of a step (a part of ``CostModel``)."""

    # A quantised format's GEMM fit: (its price, activation and weight bytes an element,
    # its kernel's tile rule, ``features.gemm_tile_rule``; the activation quantisation
    # pass the served layer runs before it, ``features.act_quant_bytes``: "" none priced);
    # None: the bf16 GEMM.
    _linear_q: tuple[Callable[..., float], float, float, str, str] | None
    _expert_q: tuple[Callable[..., float], float, float, str, str] | None
    rope_in_attention: bool
    kernel_keys: dict[str, str]
    _mla_dense: Callable[[int, float, float], tuple[tuple[str, float], ...]]
    kernel_layout: KernelLayout
    # The sibling mixins' prices the layer recipes call (``CostModel`` holds them).
    _moe: Callable[[int, float, float], tuple[tuple[str, float], ...]]
    _allreduce: Callable[[int], float]
    _allreduce_bytes: Callable[[float], float]

    def _setup_rope(self) -> None:
        """Whether a RoPE pass is priced apart (``rope_s``): not where the profile's
        attention fits were measured from an engine whose attention rows include it
        (``twin.costmodel.kernel_sources.KernelSource.rope_in_attention``)."""
        from twin.costmodel.kernel_sources import KERNEL_SOURCES

        source = KERNEL_SOURCES.get(str(self.profile.provenance.get("engine", "")))
        fit = self.profile.kernels.get(self.kernel_keys["attn_decode"])
        measured = fit is not None and fit.provenance.get("source") == "measured"
        self.rope_in_attention = bool(source and source.rope_in_attention and measured)

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

    def _gemm(self, rows: float, k: float, n: float) -> float:
        """A bf16 GEMM (the LM head, the MoE router; every projection of a bf16 model)."""
        waves = ft.gemm_wave_k(rows, n, k, self.sms)
        return self._k["gemm"](*ft.gemm_sums(rows, k, n, self.elem_bytes), waves)

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

    def _head(self, t: int, seqs: int, cost: StepCost | None) -> float:
        """Embedding gather, final norm and the LM head (one row per sequence)."""
        elem, d = self._k["elementwise"], self.d_model
        embed_bytes, norm_bytes = ft.head_bytes(t, d, self.elem_bytes)
        embed = elem(0.0, embed_bytes)
        norm = elem(0.0, norm_bytes)
        lm = self._gemm(seqs, d, self.vocab) if seqs else 0.0
        if cost is not None:
            cost.add("head", "elementwise", embed + norm)
            cost.add("head", "gemm", lm)
        return embed + norm + lm
