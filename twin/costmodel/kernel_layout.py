"""How an engine release lays out a model's kernels, where that differs from the twin's
default pricing: a fact about the engine's modules, not about the model, so it is an
input of the cost model of its own (``CostModel(..., layout=...)``), next to the model.

The engine mode's rule chooses it from the model, the engine build and the parallel
layout (``twin.engine.mode_base.EngineMode.kernel_layout``: SGLang's
``twin.engine.modes_sglang.sglang_kernel_layout``, TensorRT-LLM's
``twin.engine.modes_trtllm.trtllm_kernel_layout``), for ``twin simulate --engine`` and the
silicon scorer alike; the default (:data:`DEFAULT_LAYOUT`) is what every other engine
and the paper's world run.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.errors import TwinError

ROUTER_PRECISIONS = ("", "fp32", "tf32")  # KernelLayout.router_precision
SPARSE_MLA_KERNELS = ("trtllm", "flashmla_sparse")  # SparseMlaModule.kernel


@dataclass(frozen=True)
class SparseMlaModule:
    """The measured price of one layer's sparse-MLA prefill attention module on one GPU
    (``KernelLayout.nsa_sparse_module``; ``MlaPricing._dsa_sparse_module``): everything of
    the layer's self-attention but the DSA indexer and the all-reduce (the projections,
    the absorbed W_UK/W_UV, RoPE, the cache store and the sparse kernel over each new
    token's selected keys), ``floor_s + token_s x new tokens + key_s x selected keys``, a
    new token's selected keys being its position capped at the model's ``index_topk``
    (``StepFeatures.prefill_topk_keys``). ``kernel``: the engine's prefill kernel the
    values were measured on (:data:`SPARSE_MLA_KERNELS`); values and sources:
    ``twin.engine.kernel_layouts_sglang.SGLANG_DSA_SPARSE_MODULE``."""

    kernel: str
    floor_s: float
    token_s: float
    key_s: float

    def __post_init__(self) -> None:
        if self.kernel not in SPARSE_MLA_KERNELS:
            raise TwinError(
                f"sparse MLA module: kernel must be one of {SPARSE_MLA_KERNELS} "
                f"(got {self.kernel!r})"
            )
        if min(self.floor_s, self.token_s, self.key_s) < 0.0:
            raise TwinError("sparse MLA module: floor_s, token_s and key_s must be >= 0")


@dataclass(frozen=True)
class SparseMlaDecodeModule:
    """The measured price of one layer's sparse-MLA decode attention module on one GPU
    (``KernelLayout.nsa_decode_module``; ``MlaPricing._dsa_decode_module``): everything of
    the layer's self-attention but the all-reduce, its DSA indexer included (the
    projections, the indexer's query and key, its paged logits over every key of each
    sequence, the top-k, and the sparse kernel over each sequence's selected keys), for a
    step of ``decodes`` sequences reading ``keys`` keys in all, ``topk_keys`` of them each
    sequence's capped at the model's ``index_topk`` (``StepFeatures.decode_topk_keys``):
    ``floor_s + seq_s x decodes + key_s x topk_keys + index_key_s x keys + seq_key_s x
    topk_keys / decodes``, the last the selected keys of one sequence (a sequence's keys
    walked in series: what a few long sequences cost beyond their bytes; the step's
    sequences are priced at their mean, as the twin's MLA steps spread their context
    evenly), plus ``past_topk_s`` once some sequence reads more than the top-k (the top-k
    then selects; below it every key is kept). Values and sources:
    ``twin.engine.kernel_layouts_sglang.SGLANG_DSA_DECODE_MODULE``."""

    floor_s: float
    seq_s: float
    key_s: float
    index_key_s: float
    past_topk_s: float
    seq_key_s: float = 0.0

    def __post_init__(self) -> None:
        rates = (self.floor_s, self.seq_s, self.key_s, self.index_key_s, self.past_topk_s)
        if min(*rates, self.seq_key_s) < 0.0:
            raise TwinError("sparse MLA decode module: every rate must be >= 0")

    def price(self, decodes: int, keys: int, topk_keys: int) -> float:
        """Seconds of one layer's module for a step of these decodes (class docstring)."""
        if decodes <= 0:
            return 0.0
        past = self.past_topk_s if topk_keys < keys else 0.0
        return (
            self.floor_s
            + self.seq_s * decodes
            + self.key_s * topk_keys
            + self.index_key_s * keys
            + self.seq_key_s * topk_keys / decodes
            + past
        )


@dataclass(frozen=True)
class KernelLayout:
    """An engine build's kernel layout (module docstring); each field's pricing is in
    ``twin.costmodel.dense_pricing.DensePricing`` unless its comment names another."""

    # GEMM launches a GDN layer's input projection runs as (how the engine lays out the
    # checkpoint's matrices, ``DensePricing._gdn_in_proj``): 1, one GEMM of the whole
    # width; 4, Qwen3.5's q/k/v, z, b and a matrices apart. A model without GDN layers
    # prices none either way.
    gdn_in_proj_gemms: int = 1
    # The engine runs each layer's residual add and RMSNorm inside the tensor-parallel
    # all-reduce before it (TensorRT-LLM's Llama-3.1-70B and gpt-oss under TP), and, with
    # ``allreduce_quantises_input``, writes the next GEMM's input in the linear layers'
    # nvfp4 format there too (its Llama): ``DensePricing._norm_in_allreduce``.
    norm_in_allreduce: bool = False
    allreduce_quantises_input: bool = False
    # The largest step (tokens) whose all-reduces run fused with the norms where
    # ``norm_in_allreduce`` holds; a larger step runs the plain all-reduce and the norm
    # pass apart (SGLang's FlashInfer fusion:
    # ``twin.engine.kernel_layouts_sglang.sglang_allreduce_norm_tokens``); 0: every step.
    norm_in_allreduce_max_tokens: int = 0
    # Per-head q/k RMSNorms run as a pass of their own over q and k before attention,
    # RoPE inside it (TensorRT-LLM's Qwen3 ``fused_qk_norm_rope``): one element-wise pass
    # an attention layer (``DensePricing._qk_norm``).
    qk_norm_rope_pass: bool = False
    # A DeepSeek-sparse-attention model's prefill (``ModelSpec.index_topk``) leaves the
    # dense (decompressed) MLA form for the absorbed sparse kernel, its query heads padded,
    # in a batch whose longest sequence exceeds the top-k (SGLang's NSA backend:
    # ``MlaPricing._mla_sparse_prefill``).
    nsa_sparse_prefill: bool = False
    # Seconds a DeepSeek-sparse-attention indexer's prefill logits and top-k cost per
    # query-key pair of the step's prefill chunks (causal, their cached keys included) in
    # each MLA layer, in a step whose longest sequence exceeds the model's ``index_topk``
    # (SGLang's ragged ``deep_gemm.fp8_mqa_logits`` and ``topk_transform``:
    # ``MlaPricing._indexer_prefill``; the rule and its measured values:
    # ``twin.engine.kernel_layouts_sglang.SGLANG_DSA_INDEXER_PAIR_S``); 0: not priced.
    nsa_indexer_pair_s: float = 0.0
    # The prefill's MLA attention module runs in the sparse absorbed form at every prompt
    # length, priced from its measured module (SGLang's GLM-5 on Blackwell, which forces
    # sparse MLA: ``twin.engine.kernel_layouts_sglang.sglang_kernel_layout``), in place of the
    # dense MLA price and of ``nsa_sparse_prefill``'s Hopper form; the indexer stays
    # priced apart (``nsa_indexer_pair_s``, ``MlaPricing._indexer``). None: not forced.
    nsa_sparse_module: SparseMlaModule | None = None
    # The decodes' MLA attention module of a DeepSeek-sparse-attention model, its indexer
    # included, priced from its measured module (SGLang's NSA decode on Hopper:
    # ``twin.engine.kernel_layouts_sglang.sglang_dsa_decode_module``), in place of the dense MLA
    # decode price, which reads every key, and of the indexer's per-token launches.
    # None: the dense price.
    nsa_decode_module: SparseMlaDecodeModule | None = None
    # The experts run as DeepGEMM's contiguous grouped GEMM at every step size, each
    # expert a launch reaches padded to this many rows (its M alignment); 0: the fused-MoE
    # fit's rows as routed (vLLM 0.12.0's block-fp8 experts on a GPU DeepGEMM supports,
    # ``twin.engine.kernel_layouts_vllm.vllm_kernel_layout``: ``MoePricing._moe_padded_rows``).
    moe_rows_per_expert: int = 0
    # With ``moe_rows_per_expert``: the launch covers the worst case of that padding, every
    # expert held on the GPU padded whether a token reaches it or not, the blocks no token
    # reaches priced as loaded and stored, not computed (vLLM 0.12.0's DeepGEMM experts,
    # whose buffer is sized for the worst case, not the routed rows: ``twin.engine.
    # kernel_layouts_vllm``, "M_sum", which says what the source computes; the streamed
    # rows' bytes, the activation and fp8 group quantisation between the GEMMs included, are
    # that engine's: ``moe_features.moe_sums``); False: only the experts reached.
    moe_pads_every_expert: bool = False
    # Seconds every MoE layer's experts launch pays on top of the fused-MoE fit's price
    # (``MoePricing._moe_fused``): FlashInfer's CUTLASS fused MoE run under tensor
    # parallelism, whose cost per expert held on the GPU the fit (a table of other
    # layouts) does not carry (vLLM 0.16.0's block-fp8 experts on Hopper,
    # ``twin.engine.kernel_layouts_vllm.vllm_kernel_layout``); 0: none.
    moe_layer_extra_s: float = 0.0
    # Under attention DP the MoE layers bring the ranks' tokens together by an all-gather
    # (in the experts' activation format where the engine quantises before it) and return
    # them by a reduce-scatter, and the dense MLP layers run on each rank's own tokens with
    # no exchange (TensorRT-LLM without its all-to-all): priced by
    # ``twin.costmodel.gather_scatter.GatherScatterPrice`` in
    # ``twin.engine.dp_pricing.DPStepPricer.comm_time``; False: SGLang's gather/scatter.
    moe_gather_scatter: bool = False
    # Under attention DP the dense MLP layers and the MoE layers' shared expert run on each
    # rank's own tokens with the rank's own weights (TensorRT-LLM's and vLLM's; SGLang's
    # default runs its dense layers at the replica's TP over every rank's tokens): priced
    # on the ranks' side of ``twin.engine.dp_pricing.DPStepPricer`` at the attention TP,
    # with no exchange for the dense layers (the rule: ``twin.engine.kernel_layouts``).
    dense_ffn_on_rank: bool = False
    # The engine's custom all-reduce stops at a message size per GPU and GPU count
    # (:data:`VLLM_CUSTOM_ALLREDUCE_MAX_BYTES`); above it the all-reduce is NCCL's
    # (``CollectivePricing._allreduce_bytes``; vLLM 0.10.2, no symmetric memory).
    custom_allreduce_size_limit: bool = False
    # The per-tensor fp8 linear layers' activation scale is the checkpoint's (static) and
    # its quantisation runs fused into the pass before the GEMM, while the fp8 GEMM fit
    # timed a dynamic per-token quantisation kernel inside each call: the fit's floor above
    # the bf16 GEMM's comes off every fp8 linear launch and its ``act_quant_bytes`` is not
    # priced (``DensePricing._setup_linear_kernels``).
    fp8_static_activation: bool = False
    # The precision the MoE router (gate) GEMM runs at: "" the model's bf16, priced as
    # the other bf16 GEMMs; "fp32" an IEEE fp32 GEMM on CUDA cores (fp32 weights and
    # activations, the GPU's FP32 peak); "tf32" the same operands on TF32 tensor cores
    # (the GPU's TF32 peak): ``MoePricing._router`` (vLLM's MiniMax-M2,
    # ``twin.engine.kernel_layouts_vllm.vllm_router_precision``).
    router_precision: str = ""
    # The MoE layers' shared expert runs on a second CUDA stream beside the router and
    # the routed experts in every step of at most this many tokens, so the layer waits for
    # the longer of the two paths (``MoePricing._moe_fused``); 0: never (the shared
    # expert after the routed experts, on one stream). The engines' rules:
    # ``twin.engine.kernel_layouts_vllm.vllm_shared_expert_stream_tokens`` (vLLM's
    # ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD``) and TensorRT-LLM's DeepSeek-V3
    # module in its captured CUDA graphs (``twin.engine.run_pricing.kernel_layout_of``).
    shared_expert_stream_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.moe_layer_extra_s >= 0.0:
            raise TwinError(
                f"kernel layout: moe_layer_extra_s must be >= 0 (got {self.moe_layer_extra_s!r})"
            )
        if self.moe_rows_per_expert < 0:
            raise TwinError(
                "kernel layout: moe_rows_per_expert must be >= 0 "
                f"(got {self.moe_rows_per_expert!r})"
            )
        if self.norm_in_allreduce_max_tokens < 0:
            raise TwinError(
                "kernel layout: norm_in_allreduce_max_tokens must be >= 0 "
                f"(got {self.norm_in_allreduce_max_tokens!r})"
            )
        if self.shared_expert_stream_tokens < 0:
            raise TwinError(
                "kernel layout: shared_expert_stream_tokens must be >= 0 "
                f"(got {self.shared_expert_stream_tokens!r})"
            )
        if self.router_precision not in ROUTER_PRECISIONS:
            raise TwinError(
                f"kernel layout: router_precision must be one of {ROUTER_PRECISIONS} "
                f"(got {self.router_precision!r})"
            )
        if self.gdn_in_proj_gemms not in (1, 4):
            raise TwinError(
                f"kernel layout: gdn_in_proj_gemms must be 1 or 4 (got {self.gdn_in_proj_gemms!r})"
            )


DEFAULT_LAYOUT = KernelLayout()

# vLLM 0.10.2's custom all-reduce size limit (bytes per GPU, below which it runs; the
# ``inp_size < max_size`` of ``custom_all_reduce.py`` ``should_custom_ar``), by GPU and
# GPU count: ``distributed/device_communicators/all_reduce_utils.py``
# ``CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"]`` (Hopper), taken in ``custom_all_reduce.py``
# ``CustomAllreduce.__init__``; ``cuda_communicator.py`` ``all_reduce`` then tries symmetric
# memory (off: ``VLLM_ALLREDUCE_USE_SYMM_MEM`` defaults to 0 in ``envs.py``) and runs
# pynccl. Blackwell ("10.0") is not listed: InferenceMAX's B200 script fuses the
# all-reduce with the RMSNorm in FlashInfer (``enable_fi_allreduce_fusion``), not modelled.
_MIB = 1024 * 1024
_HOPPER_CUSTOM_ALLREDUCE = {2: 64 * _MIB, 4: 32 * _MIB, 6: _MIB // 2, 8: _MIB // 4}
VLLM_CUSTOM_ALLREDUCE_MAX_BYTES = {
    "h100": _HOPPER_CUSTOM_ALLREDUCE,
    "h200": _HOPPER_CUSTOM_ALLREDUCE,
}

__all__ = [
    "DEFAULT_LAYOUT",
    "ROUTER_PRECISIONS",
    "SPARSE_MLA_KERNELS",
    "VLLM_CUSTOM_ALLREDUCE_MAX_BYTES",
    "KernelLayout",
    "SparseMlaDecodeModule",
    "SparseMlaModule",
]
