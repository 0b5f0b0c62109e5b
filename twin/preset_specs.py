"""The preset models' shapes: the paper's hybrid, public hybrids, Transformers, a pure SSM
(the tiny test shapes are in ``twin.preset_test_shapes``; the registry and
``--model-set`` in ``twin.presets``).

Each preset cites where its numbers come from. Values were checked against the
public ``config.json`` files (field names in brackets) where one exists.
"""

from __future__ import annotations

from twin.layer_pattern import repeat
from twin.model import ModelSpec


def nemotron_layers(pattern: str) -> tuple[str, ...]:
    """Nemotron-H's ``hybrid_override_pattern`` (M Mamba2, * attention, - MLP, E MoE)."""
    kinds = {"M": "mamba2", "*": "attention", "-": "mlp", "E": "moe"}
    return tuple(kinds[c] for c in pattern)


PUBLIC_SPECS: list[ModelSpec] = [
    # Marconi (Pan et al., MLSys 2025, arXiv 2411.19379), section 3: the 7B hybrid
    # with 4 attention, 24 Mamba2 and 28 MLP layers, d=4096, N=128, fp16.
    ModelSpec(
        name="marconi-hybrid-7b",
        n_attention_layers=4,
        n_ssm_layers=24,
        n_mlp_layers=28,
        d_model=4096,
        n_heads=32,
        n_kv_heads=32,
        head_dim=128,
        mlp_d_ff=4 * 4096,
        mlp_gated=False,
        ssm_d_state=128,
        ssm_expand=2,
        # The paper's artifact counts an SSM layer's state as d_model x N elements
        # (plus conv (expand*d + 2N) x 4), not d_inner x N: we follow its accounting
        # so that one 10K-token sequence with a checkpoint every 16 tokens is 17.4 GB.
        ssm_state_channels=4096,
        ssm_head_dim=64,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        # The paper gives no vocabulary; Llama-2's 32000 is assumed (weights only).
        vocab_size=32000,
        source="Marconi, arXiv 2411.19379 sec. 3 (7B hybrid: 4 Attn, 24 SSM, 28 MLP)",
    ),
    # The Transformer Marconi compares against: Llama-2-7B
    # (meta-llama/Llama-2-7b-hf config.json: hidden_size 4096, num_hidden_layers 32,
    # num_attention_heads 32, num_key_value_heads 32, intermediate_size 11008, vocab 32000).
    ModelSpec(
        name="llama-7b-transformer",
        n_attention_layers=32,
        n_mlp_layers=32,
        d_model=4096,
        n_heads=32,
        n_kv_heads=32,
        head_dim=128,
        mlp_d_ff=11008,
        mlp_gated=True,
        vocab_size=32000,
        source="meta-llama/Llama-2-7b-hf config.json; Marconi sec. 3 comparison Transformer",
    ),
    # meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, num_hidden_layers 32,
    # num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336, vocab 128256.
    ModelSpec(
        name="llama-3-8b",
        n_attention_layers=32,
        n_mlp_layers=32,
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=14336,
        mlp_gated=True,
        vocab_size=128256,
        source="meta-llama/Meta-Llama-3-8B config.json",
    ),
    # ai21labs/AI21-Jamba-1.5-Mini config.json (same layout as Jamba-v0.1): 32 layers,
    # attention at layer i % attn_layer_period(8) == attn_layer_offset(4) -> 4 layers,
    # MoE at i % expert_layer_period(2) == expert_layer_offset(1) -> 16 layers of 16
    # experts top-2; hidden 4096, intermediate 14336, 32 heads, 8 kv heads, vocab 65536.
    # Its SSM layers are Mamba-1 (mamba_d_state 16, mamba_expand 2, mamba_d_conv 4,
    # mamba_dt_rank 256 = ceil(4096 / 16)): priced as Mamba-1 since issue 13 (before it,
    # as Mamba2 layers of the same d_inner and N).
    ModelSpec(
        name="jamba-1.5-mini",
        layers=tuple(
            ("attention" if i % 8 == 4 else "mamba1") + ("/moe" if i % 2 == 1 else "/mlp")
            for i in range(32)
        ),
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=14336,
        mlp_gated=True,
        moe_n_experts=16,
        moe_top_k=2,
        moe_d_ff=14336,
        ssm_d_state=16,
        ssm_expand=2,
        ssm_dt_rank=256,
        ssm_conv_kernel=4,
        vocab_size=65536,
        source="ai21labs/AI21-Jamba-1.5-Mini config.json; arXiv 2408.12570",
    ),
    # Zyphra/Zamba2-7B config.json: 81 layers, all with a Mamba2 mixer; 13 of them
    # ("hybrid" in layers_block_type: layers 6, 11, 17, 23, ..., 77) also run a shared
    # attention+MLP block. Counted as 13 attention + 13 MLP layers (each keeps its own
    # KV), with num_mem_blocks=2 distinct weight copies. The shared attention reads
    # [hidden, embedding] (2 x 3584 wide): head_dim = 2*3584/32 = 224, MHA (32 kv heads);
    # we count its projections from d_model, which undercounts those FLOPs. The per-layer
    # LoRA adapters are left out. Mamba2: mamba_d_state 64, mamba_expand 2,
    # mamba_headdim 64 (112 heads), mamba_ngroups 2, conv 4; MLP 14336 gated; vocab 32000.
    # The config has no tie_word_embeddings key, so transformers' default (tied) applies.
    ModelSpec(
        name="zamba2-7b",
        n_attention_layers=13,
        n_ssm_layers=81,
        n_mlp_layers=13,
        d_model=3584,
        n_heads=32,
        n_kv_heads=32,
        head_dim=224,
        mlp_d_ff=14336,
        mlp_gated=True,
        ssm_d_state=64,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=2,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        vocab_size=32000,
        tie_embeddings=True,
        shared_block_copies=2,
        source="Zyphra/Zamba2-7B config.json; arXiv 2411.15242",
    ),
    # nvidia/Nemotron-H-8B-Base-8K config.json: hybrid_override_pattern
    # "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" (52 layers: 24 Mamba2,
    # 4 attention, 24 MLP); hidden 4096; 32 heads, 8 kv heads, attention_head_dim 128;
    # intermediate_size 21504 with relu2 (squared ReLU, ungated); ssm_state_size 128,
    # mamba_num_heads 128 x mamba_head_dim 64 (= 8192 = 2 x 4096), n_groups 8,
    # conv_kernel 4, chunk_size 128; vocab 131072.
    ModelSpec(
        name="nemotron-h-8b",
        layers=nemotron_layers("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"),
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=21504,
        mlp_gated=False,
        ssm_d_state=128,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=8,
        ssm_conv_kernel=4,
        ssm_chunk_size=128,
        vocab_size=131072,
        source="nvidia/Nemotron-H-8B-Base-8K config.json; arXiv 2504.03624",
    ),
    # state-spaces/mamba2-2.7b config.json (mamba_ssm format): d_model 2560, n_layer 64,
    # ssm_cfg {layer: Mamba2} with mamba_ssm defaults (d_state 128, expand 2, headdim 64,
    # ngroups 1, d_conv 4, chunk_size 256), d_intermediate 0 (no MLP), vocab 50277
    # padded to a multiple of 16 = 50288, tied embeddings.
    ModelSpec(
        name="mamba2-2.7b",
        n_ssm_layers=64,
        d_model=2560,
        ssm_d_state=128,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        vocab_size=50288,
        tie_embeddings=True,
        source="state-spaces/mamba2-2.7b config.json; arXiv 2405.21060",
    ),
    # Qwen/Qwen3.5-9B model card (huggingface.co/Qwen/Qwen3.5-9B, "Model Overview"): 32
    # layers laid out 8 x (3 x (Gated DeltaNet -> FFN), 1 x (Gated Attention -> FFN));
    # hidden 4096; Gated DeltaNet 16 QK heads and 32 V heads of dim 128; gated attention
    # 16 Q and 4 KV heads of dim 256; FFN 12288 (SwiGLU); vocab 248320 (padded). The
    # conv width 4 is transformers' Qwen3.5 default (linear_conv_kernel_dim, inherited
    # from Qwen3NextConfig); untied embeddings as in Qwen3.5-27B (THUDM/slime
    # scripts/models/qwen3.5-27B.sh: --untie-embeddings-and-output-weights).
    ModelSpec(
        name="qwen3.5-9b",
        layers=repeat(("gdn/mlp",) * 3 + ("attention/mlp",), 8),
        d_model=4096,
        n_heads=16,
        n_kv_heads=4,
        head_dim=256,
        attn_output_gate=True,
        mlp_d_ff=12288,
        gdn_k_heads=16,
        gdn_v_heads=32,
        gdn_head_k_dim=128,
        gdn_head_v_dim=128,
        gdn_conv_kernel=4,
        vocab_size=248320,
        source="Qwen/Qwen3.5-9B model card (layout, heads, dims, FFN, vocab)",
    ),
    # Qwen3.5 MoE (transformers docs model_doc/qwen3_5_moe: 3:1 Gated DeltaNet / gated
    # attention, 256 experts, 8 routed + 1 shared per token). Qwen/Qwen3.5-35B-A3B, whose
    # architecture Qwen3.6-35B-A3B shares (same model_type, per the same docs); model
    # card: 40 layers = 10 x (3 x (Gated DeltaNet -> MoE), 1 x (Gated Attention -> MoE)),
    # hidden 2048, GDN 16 QK / 32 V heads of dim 128, attention 16 Q / 2 KV heads of dim
    # 256, expert intermediate 512, vocab 248320. The shared expert's width is taken as
    # 512, as in Qwen3-Next (shared_expert_intermediate_size; the card gives no number).
    ModelSpec(
        name="qwen3.5-35b-a3b",
        layers=repeat(("gdn/moe",) * 3 + ("attention/moe",), 10),
        d_model=2048,
        n_heads=16,
        n_kv_heads=2,
        head_dim=256,
        attn_output_gate=True,
        moe_n_experts=256,
        moe_top_k=8,
        moe_d_ff=512,
        moe_shared_d_ff=512,
        gdn_k_heads=16,
        gdn_v_heads=32,
        gdn_head_k_dim=128,
        gdn_head_v_dim=128,
        gdn_conv_kernel=4,
        vocab_size=248320,
        source="Qwen/Qwen3.5-35B-A3B (= Qwen3.6-35B-A3B architecture) model card",
    ),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: num_hidden_layers 48,
    # full_attention_interval 4 (layers 3, 7, ... full attention, the rest
    # linear_attention), hidden_size 2048, num_attention_heads 16, num_key_value_heads 2,
    # head_dim 256 (gated attention), linear_num_key_heads 16, linear_num_value_heads 32,
    # linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4,
    # decoder_sparse_step 1 and mlp_only_layers [] (every layer MoE), num_experts 512,
    # num_experts_per_tok 10, moe_intermediate_size 512, shared_expert_intermediate_size
    # 512, vocab_size 151936, tie_word_embeddings false.
    ModelSpec(
        name="qwen3-next-80b-a3b",
        layers=repeat(("gdn/moe",) * 3 + ("attention/moe",), 12),
        d_model=2048,
        n_heads=16,
        n_kv_heads=2,
        head_dim=256,
        attn_output_gate=True,
        moe_n_experts=512,
        moe_top_k=10,
        moe_d_ff=512,
        moe_shared_d_ff=512,
        gdn_k_heads=16,
        gdn_v_heads=32,
        gdn_head_k_dim=128,
        gdn_head_v_dim=128,
        gdn_conv_kernel=4,
        vocab_size=151936,
        source="Qwen/Qwen3-Next-80B-A3B-Instruct config.json; qwenlm.github.io/blog/qwen3_next",
    ),
    # ibm-granite/granite-4.0-h-small config.json (model_type granitemoehybrid):
    # hidden_size 4096, num_hidden_layers 40 with layer_types 36 "mamba" + 4 "attention",
    # num_attention_heads 32, num_key_value_heads 8, every layer MoE: num_local_experts 72,
    # num_experts_per_tok 10, intermediate_size 768, shared_intermediate_size 1536;
    # mamba_d_state 128, mamba_d_conv 4, mamba_expand 2 (d_inner 8192); vocab 100352,
    # tied. Assumed from the family's published granite-4.0-h-tiny config: attention at
    # layers 5, 15, 25, 35 (order only: no byte or FLOP depends on it), mamba_d_head 64
    # (so 128 heads), mamba_n_groups 1, mamba_chunk_size 256.
    ModelSpec(
        name="granite-4.0-h-small",
        layers=repeat(("mamba2/moe",) * 5 + ("attention/moe",) + ("mamba2/moe",) * 4, 4),
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        moe_n_experts=72,
        moe_top_k=10,
        moe_d_ff=768,
        moe_shared_d_ff=1536,
        ssm_d_state=128,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        vocab_size=100352,
        tie_embeddings=True,
        source="ibm-granite/granite-4.0-h-small config.json",
    ),
    # tiiuae/Falcon-H1-7B-Instruct config.json (transformers docs model_doc/falcon_h1
    # table: depth 44, dim 3072, 12 attention heads, 2 KV, 24 Mamba heads, head dims
    # 128 / 128, d_state 256): every layer runs attention and Mamba2 in parallel, then
    # an MLP; mamba_d_ssm 3072 (24 x 128, so expand 1), mamba_n_groups 1, mamba_d_conv 4,
    # mamba_chunk_size 128, intermediate_size 12288, vocab_size 130048, untied.
    ModelSpec(
        name="falcon-h1-7b",
        layers=("attention+mamba2/mlp",) * 44,
        d_model=3072,
        n_heads=12,
        n_kv_heads=2,
        head_dim=128,
        mlp_d_ff=12288,
        ssm_d_state=256,
        ssm_expand=1,
        ssm_head_dim=128,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=128,
        vocab_size=130048,
        source="tiiuae/Falcon-H1-7B-Instruct config.json; arXiv 2507.22448",
    ),
    # openai/gpt-oss-20b config.json: num_hidden_layers 24 with layer_types alternating
    # sliding_attention (even layers) and full_attention, sliding_window 128,
    # hidden_size 2880, num_attention_heads 64, num_key_value_heads 8, head_dim 64,
    # num_local_experts 32, num_experts_per_tok 4, intermediate_size 2880 (SwiGLU
    # experts), vocab_size 201088, untied. Attention sinks and biases are left out.
    ModelSpec(
        name="gpt-oss-20b",
        layers=repeat(("swa/moe", "attention/moe"), 12),
        d_model=2880,
        n_heads=64,
        n_kv_heads=8,
        head_dim=64,
        sliding_window=128,
        moe_n_experts=32,
        moe_top_k=4,
        moe_d_ff=2880,
        vocab_size=201088,
        source="openai/gpt-oss-20b config.json; OpenAI gpt-oss model card (arXiv 2508.10925)",
    ),
    # google/gemma-3-4b-it config.json text_config (gemma3_text): num_hidden_layers 34,
    # sliding_window 1024, sliding_window_pattern 6 (layer i is global when
    # (i + 1) % 6 == 0: 5 local then 1 global), hidden_size 2560, intermediate_size
    # 10240 (gated GELU), num_attention_heads 8, num_key_value_heads 4, head_dim 256,
    # vocab_size 262208, tied embeddings.
    ModelSpec(
        name="gemma-3-4b",
        layers=repeat(("swa/mlp",) * 5 + ("attention/mlp",), 5, ("swa/mlp",) * 4),
        d_model=2560,
        n_heads=8,
        n_kv_heads=4,
        head_dim=256,
        sliding_window=1024,
        mlp_d_ff=10240,
        vocab_size=262208,
        tie_embeddings=True,
        source="google/gemma-3-4b-it config.json (text_config); arXiv 2503.19786",
    ),
]
