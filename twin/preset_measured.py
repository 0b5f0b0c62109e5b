"""The models of NVIDIA's measured end-to-end set (issue 34): the presets for the rows of
``aiconfigurator_core/systems/silicon_sample.csv`` (aiconfigurator-core 0.12.0).

Each shape was read from the Hugging Face ``config.json`` that aiconfigurator-core
0.12.0 caches for the model (``aiconfigurator_core/model_configs/<org>--<name>_config.json``,
named in each ``source``; field names in brackets below). Published parameter counts
and checkpoint sizes are compared in ``benchmarks/bench_model_bytes.py``.

What is left out of every shape, as elsewhere in the twin: biases, attention sinks,
Qwen3's per-head q/k norms and Qwen3.5's shared-expert gate (a few thousand parameters
a layer; MiniMax's q/k norms over all heads are priced: ``qk_norm_across_heads``), and
the vision towers of the multimodal wrappers (Kimi-K2.5, Qwen3.5: the text model only).
Precision is the checkpoint's own where ``twin.precision`` has its format (DeepSeek's and
MiniMax's fp8 with 128 x 128 block scales, gpt-oss's mxfp4 experts); the KV cache is bf16
(``--kv-dtype`` changes it).
"""

from __future__ import annotations

from twin.layer_pattern import repeat
from twin.model import ModelSpec

_AIC = "aiconfigurator-core 0.12.0 model_configs/"


def _src(hf_id: str, cached: str | None = None, extra: str = "") -> str:
    """``<hf_id> config.json (<the cached copy>)[; extra]``."""
    path = (cached or hf_id).replace("/", "--")
    return f"{hf_id} config.json ({_AIC}{path}_config.json)" + (f"; {extra}" if extra else "")


def _deepseek_v3(name: str, hf: str) -> ModelSpec:
    # deepseek_v3 config.json: num_hidden_layers 61, first_k_dense_replace 3 (layers 0-2
    # dense MLP, intermediate_size 18432; the other 58 MoE, moe_layer_freq 1),
    # hidden_size 7168, num_attention_heads 128, q_lora_rank 1536, kv_lora_rank 512,
    # qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 256,
    # num_experts_per_tok 8, n_group 8, topk_group 4, n_shared_experts 1 x
    # moe_intermediate_size 2048, vocab_size 129280, tie_word_embeddings false,
    # num_nextn_predict_layers 1;
    # quantization_config fp8 e4m3 with weight_block_size [128, 128].
    return ModelSpec(
        name=name,
        layers=repeat(("mla/mlp",), 3, ("mla/moe",) * 58),
        d_model=7168,
        n_heads=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        mlp_d_ff=18432,
        moe_n_experts=256,
        moe_top_k=8,
        moe_d_ff=2048,
        moe_shared_d_ff=2048,
        moe_n_group=8,
        moe_topk_group=4,
        vocab_size=129280,
        mtp_layers=1,
        precision="fp8-block",
        source=_src(hf, extra="arXiv 2412.19437"),
    )


MEASURED_SPECS: list[ModelSpec] = [
    _deepseek_v3("deepseek-v3", "deepseek-ai/DeepSeek-V3"),
    _deepseek_v3("deepseek-r1", "deepseek-ai/DeepSeek-R1"),
    # moonshotai/Kimi-K2.5 config.json text_config (model_type kimi_k2, architecture
    # DeepseekV3ForCausalLM): num_hidden_layers 61, first_k_dense_replace 1,
    # hidden_size 7168, intermediate_size 18432, num_attention_heads 64, q_lora_rank
    # 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head_dim 128,
    # n_routed_experts 384, num_experts_per_tok 8, n_shared_experts 1 x 2048,
    # vocab_size 163840, num_nextn_predict_layers 0. Its routed experts ship as int4
    # (compressed-tensors, group 32, bf16 scales: 0.5625 bytes a weight), a format
    # twin.precision does not have: the preset stays bf16.
    ModelSpec(
        name="kimi-k2.5",
        layers=repeat(("mla/mlp",), 1, ("mla/moe",) * 60),
        d_model=7168,
        n_heads=64,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        mlp_d_ff=18432,
        moe_n_experts=384,
        moe_top_k=8,
        moe_d_ff=2048,
        moe_shared_d_ff=2048,
        vocab_size=163840,
        source=_src("moonshotai/Kimi-K2.5", extra="text_config"),
    ),
    # zai-org/GLM-5 config.json (model_type glm_moe_dsa): MLA with DeepSeek Sparse
    # Attention (an indexer of index_n_heads 32 x index_head_dim 128 picks index_topk
    # 2048 keys per query, as DeepSeek-V3.2). Priced as dense MLA plus the indexer's
    # launches (index_n_heads, index_head_dim); its weights (about 9.4M a layer) and its
    # fp8 key cache are left out (see the benchmark).
    # num_hidden_layers 78, first_k_dense_replace 3, hidden_size 6144, intermediate_size
    # 12288, num_attention_heads 64, q_lora_rank 2048, kv_lora_rank 512,
    # qk_nope_head_dim 192, qk_rope_head_dim 64, v_head_dim 256, n_routed_experts 256,
    # num_experts_per_tok 8, n_shared_experts 1 x moe_intermediate_size 2048,
    # vocab_size 154880, untied, num_nextn_predict_layers 1; bf16.
    ModelSpec(
        name="glm-5",
        layers=repeat(("mla/mlp",), 3, ("mla/moe",) * 75),
        d_model=6144,
        n_heads=64,
        q_lora_rank=2048,
        kv_lora_rank=512,
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        v_head_dim=256,
        index_n_heads=32,
        index_head_dim=128,
        index_topk=2048,
        mlp_d_ff=12288,
        moe_n_experts=256,
        moe_top_k=8,
        moe_d_ff=2048,
        moe_shared_d_ff=2048,
        vocab_size=154880,
        mtp_layers=1,
        source=_src("zai-org/GLM-5"),
    ),
    # MiniMaxAI/MiniMax-M2.5 config.json (model_type minimax_m2): num_hidden_layers 62,
    # all full attention and MoE; hidden_size 3072, num_attention_heads 48,
    # num_key_value_heads 8, head_dim 128, num_local_experts 256, num_experts_per_tok 8,
    # intermediate_size 1536 (the experts' width; no shared expert), vocab_size 200064,
    # untied; fp8 with weight_block_size [128, 128] (gate and lm_head unconverted). Its
    # 3 MTP modules (num_mtp_modules) are not carried: their layout is not DeepSeek's.
    ModelSpec(
        name="minimax-m2.5",
        layers=("attention/moe",) * 62,
        d_model=3072,
        n_heads=48,
        n_kv_heads=8,
        head_dim=128,
        moe_n_experts=256,
        moe_top_k=8,
        moe_d_ff=1536,
        vocab_size=200064,
        precision="fp8-block",
        qk_norm_across_heads=True,  # use_qk_norm, qk_norm_type per_layer
        source=_src("MiniMaxAI/MiniMax-M2.5"),
    ),
    # openai/gpt-oss-120b config.json: num_hidden_layers 36, layer_types alternating
    # sliding_attention (even layers) and full_attention, sliding_window 128,
    # hidden_size 2880, num_attention_heads 64, num_key_value_heads 8, head_dim 64,
    # num_local_experts 128, num_experts_per_tok 4, intermediate_size 2880, vocab_size
    # 201088, untied; quantization_config mxfp4 for the experts (attention, router,
    # embeddings and lm_head in modules_to_not_convert).
    ModelSpec(
        name="gpt-oss-120b",
        layers=repeat(("swa/moe", "attention/moe"), 18),
        d_model=2880,
        n_heads=64,
        n_kv_heads=8,
        head_dim=64,
        sliding_window=128,
        moe_n_experts=128,
        moe_top_k=4,
        moe_d_ff=2880,
        vocab_size=201088,
        moe_precision="mxfp4",
        source=_src("openai/gpt-oss-120b", extra="arXiv 2508.10925"),
    ),
    # Qwen/Qwen3-235B-A22B config.json (qwen3_moe): num_hidden_layers 94, every layer MoE
    # (decoder_sparse_step 1, mlp_only_layers []), hidden_size 4096,
    # num_attention_heads 64, num_key_value_heads 4, head_dim 128, num_experts 128,
    # num_experts_per_tok 8, moe_intermediate_size 1536, vocab_size 151936, untied; bf16.
    ModelSpec(
        name="qwen3-235b-a22b",
        layers=("attention/moe",) * 94,
        d_model=4096,
        n_heads=64,
        n_kv_heads=4,
        head_dim=128,
        moe_n_experts=128,
        moe_top_k=8,
        moe_d_ff=1536,
        vocab_size=151936,
        source=_src("Qwen/Qwen3-235B-A22B"),
    ),
    # Qwen/Qwen3.5-397B-A17B config.json text_config (qwen3_5_moe_text): 60 layers,
    # full_attention_interval 4 (3 linear_attention then 1 full_attention), hidden_size
    # 4096, gated attention (attn_output_gate) with 32 heads, 2 KV heads, head_dim 256;
    # Gated DeltaNet linear_num_key_heads 16, linear_num_value_heads 64, head dims 128,
    # linear_conv_kernel_dim 4; num_experts 512, num_experts_per_tok 10,
    # moe_intermediate_size 1024, shared_expert_intermediate_size 1024, vocab_size
    # 248320, untied; its MTP layer (mtp_num_hidden_layers 1) is not carried.
    ModelSpec(
        name="qwen3.5-397b-a17b",
        layers=repeat(("gdn/moe",) * 3 + ("attention/moe",), 15),
        d_model=4096,
        n_heads=32,
        n_kv_heads=2,
        head_dim=256,
        attn_output_gate=True,
        moe_n_experts=512,
        moe_top_k=10,
        moe_d_ff=1024,
        moe_shared_d_ff=1024,
        gdn_k_heads=16,
        gdn_v_heads=64,
        gdn_head_k_dim=128,
        gdn_head_v_dim=128,
        gdn_conv_kernel=4,
        vocab_size=248320,
        source=_src("Qwen/Qwen3.5-397B-A17B", extra="text_config"),
    ),
    # meta-llama/Llama-3.1-70B (cached as Meta-Llama-3.1-70B) config.json: 80 layers,
    # hidden_size 8192, num_attention_heads 64, num_key_value_heads 8, intermediate_size
    # 28672, vocab_size 128256, untied; bf16.
    ModelSpec(
        name="llama-3.1-70b",
        n_attention_layers=80,
        n_mlp_layers=80,
        d_model=8192,
        n_heads=64,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=28672,
        vocab_size=128256,
        source=_src("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B"),
    ),
    # meta-llama/Llama-3.1-8B (cached as Meta-Llama-3.1-8B) config.json: 32 layers,
    # hidden_size 4096, num_attention_heads 32, num_key_value_heads 8, intermediate_size
    # 14336, vocab_size 128256, untied; bf16 (the shapes of llama-3-8b).
    ModelSpec(
        name="llama-3.1-8b",
        n_attention_layers=32,
        n_mlp_layers=32,
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=14336,
        vocab_size=128256,
        source=_src("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B"),
    ),
    # Qwen/Qwen3-32B config.json: 64 layers, hidden_size 5120, num_attention_heads 64,
    # num_key_value_heads 8, head_dim 128, intermediate_size 25600, vocab_size 151936,
    # untied; bf16.
    ModelSpec(
        name="qwen3-32b",
        n_attention_layers=64,
        n_mlp_layers=64,
        d_model=5120,
        n_heads=64,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=25600,
        vocab_size=151936,
        source=_src("Qwen/Qwen3-32B"),
    ),
]
