"""The host time of each engine's eager (no CUDA graph) prefill steps: which rows'
steps run eagerly, the kernels one eager forward launches (by engine and layer part),
and the host seconds a launch, fitted per GPU on the fit split."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twin.model import ModelSpec
from twin.validate.silicon.harness import inferencemax_row, model_named
from twin.validate.silicon.inferencemax_sglang import (
    inferencemax_no_piecewise,
    inferencemax_sglang_unnamed,
)
from twin.validate.silicon.inferencemax_trtllm import (
    inferencemax_mtp_drafts,
    inferencemax_trtllm_piecewise,
)
from twin.validate.silicon.inferencemax_vllm import (
    INFERENCEMAX_MINIMAX_CAPTURE,
    INFERENCEMAX_VLLM_CAPTURE,
    inferencemax_prompt_budget_flags,
    inferencemax_vllm_decode_only_graphs,
)

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# SGLang's prefill runs without CUDA graphs before 0.5.10: 0.5.9's (and 0.5.6.post2's)
# ``server_args.py`` has ``enable_piecewise_cuda_graph: bool = False``, and
# ``model_executor/model_runner.py`` ``ModelRunner._forward_raw`` replays a graph only
# for a forward mode that is a CUDA-graph mode (decode, target verify) and sends extend
# batches to ``forward_extend``, which uses the piecewise runner only when enabled. From
# 0.5.10 the piecewise graphs are on by default (0.5.10.post1 ``server_args.py``
# ``disable_piecewise_cuda_graph: bool = False``), but ``_handle_piecewise_cuda_graph``
# turns them off for speculative decoding, attention DP, symmetric memory, ... and for
# two kinds of model read here: the architectures of ``configs/model_config.py``
# ``piecewise_cuda_graph_disabled_model_archs`` (GLM-5's ``GlmMoeDsaForCausalLM``,
# Qwen3-Next, DeepSeek-V3.2: ``twin.engine.memory_rules.sglang_piecewise_off``) and
# multimodal models (``ModelConfig.is_multimodal``: ``enable_multimodal`` is on by
# default, and a config with a ``vision_config`` is multimodal, Qwen3.5's
# ``Qwen3_5MoeForConditionalGeneration``). Such a model prefills eagerly in every
# release, a nightly build included. The scripts' flags that turn them off are read for
# InferenceMAX's DeepSeek servers (:func:`inferencemax_no_piecewise`: symmetric memory,
# the FlashInfer TRT-LLM MoE runner), so its B300 0.5.10.post1 rows prefill eagerly; and
# an InferenceMAX row that names no release but was measured before that collection first
# ran 0.5.10 (:func:`inferencemax_sglang_unnamed`) ran an earlier release, so eagerly too.
# (0.5.10.post1 also caps an MLA model's piecewise graphs at 2,048 tokens,
# ``_handle_gpu_memory_settings`` sets ``piecewise_cuda_graph_max_tokens`` so, and a larger
# DeepSeek prefill forward runs eagerly there even with the graphs on: not modelled, the
# engine's host time is one price for every prefill step.)
# An eager forward is issued kernel by kernel from Python, so a step that prefills takes
# the host's time to issue the model's kernels, in series with the kernels as the
# measured rows place it (``twin.engine.host_time.EagerPrefillPricer``). Public
# single-request runs of DeepSeek-R1 under SGLang show that floor: TTFT 180-200 ms from
# 128 to 4,096 prompt tokens on 16 H100s (tenstorrent/tt-inference-server issue 356),
# while the twin's kernels price a 1,024-token prefill at 45-100 ms.
SGLANG_PIECEWISE_DEFAULT = "0.5.10"  # from 0.5.23 always (memory_rules.SGLANG_0_5_23)
# Kernels one decoder layer launches on SGLang's eager prefill path, by part (its input
# norm and all-reduce counted with the part after them), read from SGLang 0.5.9's
# forward code (CUDA, block-fp8 weights, tensor-parallel MoE without DeepEP; 0.5.6.post2's
# Qwen3-MoE path is the same); an fp8 linear is two launches (activation quantisation,
# GEMM: ``layers/quantization/fp8_utils.py``). Counts within a launch or two:
# - ``mla`` 17 (``models/deepseek_common/attention_forward_methods/forward_mha.py``
#   ``forward_normal_prepare`` / ``forward_normal_core``: input norm, fused q_a/kv_a
#   projection 2, q_a and kv_a norms, q_b projection 2, RoPE, the q_pe copy, the latent
#   KV write, kv_b projection 2, the k concat, ragged attention, o projection 2);
# - ``attention`` 10 (``models/qwen3_moe.py`` ``forward_prepare_native``: input norm,
#   qkv 2, q and k norms, RoPE, KV write, attention, o projection 2), ``swa`` the same;
#   with an output gate (``attn_output_gate``, ``models/qwen3_5.py``
#   ``Qwen3_5AttentionDecoderLayer.self_attention``) 4 more (q and gate copies, sigmoid,
#   product);
# - ``gdn`` 26 (``models/qwen3_5.py`` ``Qwen3_5GatedDeltaNet._forward`` and
#   ``layers/attention/fla/chunk.py`` ``chunk_gated_delta_rule_fwd``: input norm,
#   qkv and z projections 2 each, b and a projections and their copies, causal conv,
#   the q/k/v copies 3, gating, q and k l2-norms, cumsum, KK^T, triangular solve, w/u,
#   state pass, output, state write, gated norm, out projection 2);
# - ``moe`` 13 (``models/deepseek_v2.py`` ``DeepseekV2MoE.forward_normal``,
#   ``models/qwen3_moe.py`` ``forward_normal``: post-attention norm, the attention's
#   all-reduce, router GEMM, top-k, the Triton fused MoE's alignment, quantisation, two
#   grouped GEMMs, activation, second quantisation and sum = 8, the MoE's all-reduce);
#   a shared expert 6 more (gate_up 2, activation, down 2, the add; Qwen3.5's sigmoid
#   gate on it, 3 more, is not counted: no model field says a shared expert is gated);
# - ``mlp`` 8 (a dense layer: post-attention norm, all-reduce, gate_up 2, activation,
#   down 2, all-reduce).
SGLANG_EAGER_LAUNCHES: dict[str, int] = {
    "mla": 17,
    "attention": 10,
    "swa": 10,
    "gdn": 26,
    "attention_gate": 4,
    "moe": 13,
    "shared_expert": 6,
    "mlp": 8,
}
# Host seconds per launched kernel of an eager SGLang forward, per GPU (its node's host:
# Python, the op's dispatch and the launch), in series with the step's kernels
# (``twin.engine.host_time.EagerPrefillPricer``), fitted on the fit split only: the 70
# fit rows the rule applies to among 90 spread over the SGLang rows of DeepSeek-R1/V3,
# Qwen3-235B, Qwen3.5-397B and GLM-5 (with InferenceMAX's Qwen3.5 server flags), each
# row's TTFT interpolated between runs at two host times, least mean TTFT APE per GPU
# over 20-160 us in 5 us steps (docs/decisions.md, "Issue 31, step: InferenceMAX's
# Qwen3.5 servers, and the eager prefill's host time in series"): B200 75 us (23.1% on 49
# rows, flat at 70-80), H200 60 us (12.6% on 14), B300 45 us (16.3% on 7: Qwen3.5's 6
# rows want it, GLM-5's one wants none). A GPU without an entry gets no floor.
SGLANG_EAGER_LAUNCH_S: dict[str, float] = {"h200": 60e-6, "b200": 75e-6, "b300": 45e-6}


# TensorRT-LLM's PyTorch backend runs every batch that holds a context request without a
# CUDA graph: ``_torch/pyexecutor/model_engine.py`` ``_maybe_get_cuda_graph`` returns a
# graph only for a batch that can run one (generation requests only:
# ``batch.can_run_cuda_graph``, older releases ``batch.is_generation_only``), and its
# piecewise context graphs (``torch_compile_config.enable_piecewise_cuda_graph``) are off
# unless configured (read in NVIDIA/TensorRT-LLM's stored tree; the 1.1/1.2 wheels are not
# on PyPI). So a context step is issued kernel by kernel from Python, as SGLang's eager
# prefill is. Its kernels are counted with :data:`SGLANG_EAGER_LAUNCHES` (TensorRT-LLM's
# DeepSeek, gpt-oss and Qwen3-MoE modules issue the same ops per layer part: norm,
# projections, RoPE, attention, router, top-k, fused MoE, all-reduces; not recounted from
# TensorRT-LLM's own modules in this step), times one host time per launch per GPU fitted
# on the fit split only (docs/decisions.md, "Issue 31, step: TensorRT-LLM's eager context
# step"). As for SGLang, MoE models only (the dense TensorRT-LLM rows' TTFT shows no such
# shortfall at 1k/8k and 8k/1k: Llama-3.1-70B within +-50 ms at 4-16 clients), and not
# under attention DP (the floor is not modelled there). A GPU without an entry: no floor.
# Where an InferenceMAX DeepSeek-R1 script turns the piecewise context graphs on
# (:func:`inferencemax_trtllm_piecewise`, read at the commit each row's sweep ran), the
# context steps replay graphs and get no eager host time: B200 fp4 tp 8 ep 8 1k/1k at 64
# clients (1.2.0rc6.post2), measured TTFT 137 ms, the twin 282 ms with the eager time and
# 122 without. Not on the -mtp scripts' rows (MTP): there the measured TTFT is the same
# with and without the graphs (fp8 1.2.0rc6.post3 tp 8 1k/1k: 195 ms at 4 clients without,
# 153 and 195 ms at 8 and 16 with; fp4 1k/1k tp 8: 210 ms at 4 without, 212 at 32 with),
# so those context steps keep it. Why is open: TensorRT-LLM's guide
# (``docs/source/features/torch_compile_and_piecewise_cuda_graph.md``, stored tree) says
# the MTP layers are outside torch.compile's scope, and that attention, run eagerly between
# the captured pieces, still leaves host bubbles in the context phase.
# The fit (fit split only): `python benchmarks/bench_eager_prefill.py --backend trtllm
# --per-split 40 --grid-us 0,25,50,75,100,140` (40 fit rows spread over the TensorRT-LLM
# MoE rows the rule applies to, at most 64 clients: 23 on B200, 17 on H200), the host time
# in series with the kernels (``EagerPrefillPricer``); the value of least TTFT + TPOT MAPE
# per GPU, since the host time also stalls the decodes batched with a prefill: B200 50 us
# (TTFT / TPOT 54.7 / 15.9% -> 24.4 / 23.1%; least TTFT alone also 50), H200 75 us (56.5 /
# 9.5% -> 24.1 / 20.3%; least TTFT alone 100 us, 22.3 / 24.6%)
# (docs/decisions.md, "Issue 31, step: TensorRT-LLM's host time per launch refitted in series").
# Refitted in session 19 after the overlap scheduler's admission lag and the DeepSeek rows'
# own scripts (MTP, piecewise graphs) landed, on the same 40 fit rows: `... --per-split 40
# --grid-us 25,50,75,100` (`benchmarks/results/trtllm-eager-grid-s19.json`): B200 25 us
# (TTFT / TPOT 23.3 / 19.2%; 50 us: 32.3 / 20.2%), H200 75 us unchanged (24.6 / 13.6%; 50:
# 28.2 / 14.2, 100: 26.5 / 15.5) (docs/decisions.md, "Issue 31, step: session 19's merge").
# H100 (session 22, helper `ttft22`; H100 had no entry, so its MoE rows' context steps had
# no floor): the same rule fitted on every fit row of the CSV it applies to on H100 (54:
# Qwen3-235B-A22B-FP8 1.0.0rc3 52, gpt-oss-120b 1.3.0rc1 2), `bench_silicon.py --systems
# h100_sxm --backends trtllm --models Qwen3-235B,gpt-oss --split fit --no-aiconfigurator`
# with the entry at 0 / 10 / 15 / 20 / 25 us: TTFT / TPOT MAPE 38.2 / 12.9, 23.9 / 12.4,
# 22.4 / 12.4, 24.9 / 12.6, 30.4 / 13.0% (least at 15 us; the measured TTFT at 4 clients
# is ~170 ms whatever the prompt, 512-1,024 tokens, at tp 4 and 8, the twin's 80-134 ms
# without it) (docs/decisions.md, "Issue 31, step: the two largest TTFT gaps").
TRTLLM_EAGER_LAUNCH_S: dict[str, float] = {"b200": 25e-6, "h200": 75e-6, "h100": 15e-6}


# vLLM replays piecewise CUDA graphs only for steps of at most
# ``max_cudagraph_capture_size`` tokens (0.19.0 ``v1/cudagraph_dispatcher.py``
# ``CudagraphDispatcher.dispatch``: ``CUDAGraphMode.NONE`` for ``num_tokens >
# max_size``); a larger step runs the compiled model without a graph, its host issuing
# each piece's kernels and the custom ops between them (attention, the fused MoE) one by
# one. The size defaults to ``min(max_num_seqs x 2, 512)`` (``config/vllm.py``
# ``VllmConfig._set_cudagraph_sizes``, decode query length 1 without speculation;
# ``config/compilation.py`` ``max_cudagraph_capture_size``), capped by
# ``max_num_batched_tokens``; InferenceMAX's gpt-oss scripts set
# ``max-cudagraph-capture-size: 2048`` (``gptoss_fp4_h200.sh`` at 16cd955,
# ``gptoss_fp4_h100.sh`` at 1fc5d73). So every 1k-token prefill step of the measured rows
# but gpt-oss's is eager. The host time of that forward is priced as SGLang's and
# TensorRT-LLM's, with vLLM's own launches per layer part (:data:`VLLM_EAGER_LAUNCHES`,
# read from its modules) times a host time per launch per GPU
# fitted on the fit split only (:data:`VLLM_EAGER_LAUNCH_S`), in series with the kernels
# (``EagerPrefillPricer``, with ``eager_graph_tokens`` the capture size). MoE models only
# (as the other engines' rule), not under attention DP, and in the releases whose
# dispatcher was read (0.14.0, 0.16.0 and 0.19.0 wheels: the same test and default; so
# from 0.14.0, and the nightly builds of the rows, 2026 images of vLLM's main branch).
# Older releases (0.11.2, 0.12.0) and rows without a release keep the kernels' price: not
# read (the fit grid's three Qwen3-235B 0.12.0 H200 rows got worse with it, 11.6 -> 25.5%).
VLLM_MAX_CAPTURE = 512
# Kernels one decoder layer launches in vLLM's eager (no graph) forward, by part, as
# (other kernels, linear layers), read from the 0.16.0 wheel and checked in 0.14.0 and
# 0.19.0 (the same files and calls). vLLM compiles the model with Inductor and splits it
# at the attention ops (``config/compilation.py`` ``_attention_ops``), with its custom
# element-wise ops off under Inductor (``config/vllm.py``: ``custom_ops`` "none"), so a
# layer's norms, residual adds, RoPE and element-wise products are generated kernels,
# fused where they meet; the attention op and the fused MoE op run their own kernels.
# SGLang's counts (:data:`SGLANG_EAGER_LAUNCHES`) launch each norm, RoPE and copy alone
# and count every linear as two launches (block-fp8), which for Kimi-K2.5's bf16 MLA
# and shared expert overstated vLLM's layer by about a third. Counts within a launch or
# two:
# - ``mla`` (8, 4) (``model_executor/layers/mla.py``
#   ``MultiHeadLatentAttentionWrapper.forward``, ``layers/attention/mla_attention.py``
#   ``forward_impl`` / ``forward_mha``): the input norm with its residual add, the q_a and
#   kv_a norms, RoPE, ``concat_and_cache_mla``, the k concat, the varlen attention and
#   its output copy; linears fused_qkv_a, q_b, kv_b, o;
# - ``attention`` / ``swa`` (5, 2): the input norm, the q/k norms and RoPE (two generated
#   kernels), the KV write, the attention; linears qkv and o;
# - ``moe`` (6, 0) plus the experts: the post-attention norm, the attention's all-reduce,
#   the router GEMM (unquantised), top-k, the routed scaling and the MoE's all-reduce;
#   the experts' kernel (``fused_moe/fused_marlin_moe.py`` ``fused_marlin_moe``:
#   ``moe_align_block_size``, two grouped GEMMs, the activation, ``torch.sum``; the
#   Triton ``fused_moe.py`` path the same) 5 launches, 7 where the activations are
#   quantised (fp8, fp8-block, nvfp4: one quantisation before each grouped GEMM);
# - ``shared_expert`` (3, 2): run inside the MoE op (``SharedFusedMoE``, not fused by
#   Inductor): the activation's silu and product, the add; linears gate_up and down;
# - ``mlp`` (3, 2): the norm, the activation, the all-reduce; linears gate_up and down.
# A linear is one launch, two where its activations are quantised (``QuantFP8``, kept a
# CUDA op for block-scaled weights by ``config/vllm.py``, or the fp4 quantisation, then
# the GEMM). Parts without a vLLM count (``gdn``, the output gate: no vLLM MoE row has
# them) take SGLang's.
VLLM_EAGER_LAUNCHES: dict[str, tuple[int, int]] = {
    "mla": (8, 4),
    "attention": (5, 2),
    "swa": (5, 2),
    "moe": (6, 0),
    "shared_expert": (3, 2),
    "mlp": (3, 2),
}
VLLM_EXPERT_LAUNCHES = 5  # the fused MoE kernels, activations unquantised (above)
# The counts above hold under tensor parallelism. At tp 1 an all-reduce is no launch
# (0.17.0 ``distributed/parallel_state.py`` ``GroupCoordinator.all_reduce``: ``if
# self.world_size == 1: return input_``): ``moe`` loses its two, ``mlp`` its one. Above
# tp 1 MiniMax-M2's q/k norms over all heads (``ModelSpec.qk_norm_across_heads``)
# all-reduce their variances inside the attention part (0.17.0-0.19.0
# ``models/minimax_m2.py`` ``MiniMaxM2Attention.forward`` calls
# ``layers/mamba/linear_attn.py`` ``MiniMaxText01RMSNormTP.forward_qk``: the q and k
# variances and their concatenation, ``tensor_model_parallel_all_reduce``, then the
# normalisation and RoPE), which splits the generated kernels around that all-reduce:
# the all-reduce and one more generated kernel, 2 launches more.
VLLM_ALL_REDUCES = {"moe": 2, "mlp": 1}
VLLM_QK_NORM_ALL_REDUCE = 2
VLLM_EAGER_FROM = "0.14.0"
# A mixed eager step of an MLA model also runs the decode path beside the prompts': vLLM
# 0.17.0 ``model_executor/layers/attention/mla_attention.py`` ``MLAAttention.forward_impl``
# (l. 559-659) calls ``forward_mha`` for the prompt tokens and then, for the step's decode
# tokens, ``torch.bmm`` with ``W_UK_T`` (l. 623), the q concatenation
# (``_decode_concat_quant_fp8_op`` under an fp8 KV cache, l. 628-633, ``MLACommonImpl``
# sets ``supports_quant_query_input``, l. 2042; else ``FlashInferMLAImpl.forward_mqa``'s
# ``torch.cat``), the decode attention (``v1/attention/backends/mla/flashinfer_mla.py``
# ``trtllm_batch_decode_with_kv_cache_mla``) and ``_v_up_proj`` (l. 798-831: ``torch.bmm``
# with ``W_UV`` and the output ``copy_``): 5 launches a layer that
# :data:`VLLM_EAGER_LAUNCHES`' ``mla`` (the prompt path) does not count (review42b: the
# ``copy_`` after ``resize_`` may be a no-op, 4 launches, unless FlashInfer's trtllm MLA decode
# launches a split-KV reduce: 5 kept, ~1.5 ms a mixed step on B200 apart). FlashInfer MLA is
# the decode backend vLLM 0.17.0 picks first on compute capability 10 (``platforms/
# cuda.py`` ``_get_backend_priorities``: ``FLASHINFER_MLA``, then ``CUTLASS_MLA``); the MQA
# branch is the same on Hopper's backends, so limiting it to Blackwell (B200, B300) and the
# release read (0.17.0) is where it was checked (the Kimi-K2.5 fp4 rows), not a source rule.
VLLM_MLA_DECODE_LAUNCHES = 5
VLLM_MLA_DECODE_RELEASES = frozenset({"0.17.0"})
# Host seconds per launch of vLLM's eager forward, per GPU, fitted on the fit split only:
# ``python benchmarks/bench_eager_prefill.py --backend vllm --per-split 48 --grid-us
# 0,10,20,30,45,60`` (48 fit rows spread over the vLLM MoE rows with at most 64 clients:
# MiniMax-M2.5, Kimi-K2.5, gpt-oss-120b, Qwen3-235B; the rule's rows among them, release
# 0.14.0 on or nightly), least TTFT + TPOT MAPE per GPU (``benchmarks/results/
# vllm-eager-grid.json``; docs/decisions.md, "Issue 31, step: vLLM's eager steps above its
# largest CUDA graph, and gpt-oss's Marlin experts on Hopper"): B200 20 us (22 rows, TTFT /
# TPOT 32.6 / 11.0% -> 20.6 / 11.9%), H200 45 us (10 rows, 39.7 / 14.8 -> 21.8 / 13.5), H100
# 45 us (5 rows, 35.7 / 4.7 -> 23.8 / 3.9; 60 us the same within 0.5), B300 30 us (5 rows,
# 38.4 / 20.5 -> 13.4 / 19.9; few rows).
# Refitted with vLLM's own launch counts (:data:`VLLM_EAGER_LAUNCHES`), fit split only:
# ``python benchmarks/bench_eager_prefill.py --backend vllm --per-split 48 --max-clients 128
# --grid-us 20,30,45,60 --out benchmarks/results/vllm-moe-eager-grid`` (48 fit rows with at
# most 128 clients), least TTFT + TPOT MAPE per GPU (docs/decisions.md, "Issue 31, step:
# vLLM's eager launches counted from its modules"): B200 20 us (24 rows, 18.8 / 12.6%),
# H200 45 us (12 rows, 25.7 / 10.1%), B300 20 us (7 rows, 16.4 / 16.4%; 30 us 15.2 / 18.3),
# H100 20 us (5 rows, 9.6 / 8.1%; 45 us 19.7 / 8.7). Below it (``--grid-us 5,10,15 --out
# benchmarks/results/vllm-moe-eager-grid-low``, the same rows): B200 15 us 18.5 / 12.5%
# (TTFT + TPOT 31.0 against 31.4 at 20: kept at 20), B300 15 us 18.2 / 15.9, H100 15 us
# 13.4 / 8.0, H200 15 us 30.8 / 11.0: none lower.
# Refitted again once the InferenceMAX MiniMax-M2.5 rows ran their scripts' capture size
# (:data:`INFERENCEMAX_MINIMAX_CAPTURE`: their 1k steps now replay a graph, so the fit no
# longer prices them), the same 48 fit rows and rule: ``--grid-us 10,15,20,30,45,60 --out
# benchmarks/results/vllm-refit-eager-grid``, ``--grid-us 25,35,40 --out ...-grid-mid``,
# ``--grid-us 50,55 --out ...-grid-h200`` (docs/decisions.md, "Issue 31, step: vLLM's
# eager host time refitted with the MiniMax scripts' capture size"), TTFT + TPOT MAPE:
# B200 20 us (33.3; 15 us 33.6, 25 us 33.6), B300 30 us (36.4; 20 us 36.8, 25 us 36.4),
# H100 25 us (17.0; 20 us 17.7), H200 50 us (35.2; 45 us 35.9, 55 us 36.4). Checked on
# the wider fit runs of the same step (``benchmarks/results/vllm-refit-fit-*``): B300 30 us
# and H100 25 us hold there; H200 50 us lost to 45 on its 60 rows, so H200 stays at 45 us.
# Refitted once more when vLLM's asynchronous scheduling took its admission lag (a request
# arriving while step n runs joins step n+2: ``twin.engine.vllm_batching``) and B200's
# 0.19.0 MiniMax rows their FlashInfer block-fp8 experts (``engine_kernels``), the same 48
# fit rows and rule: ``--grid-us 5,15,25,35,45`` and ``--grid-us 10,20,30,40`` (docs/
# decisions.md, "Issue 31, step: vLLM's block-fp8 experts on Blackwell and its
# asynchronous scheduling's admission lag"), TTFT + TPOT MAPE: B200 15 us (35.65; 20 us
# 36.23), B300 20 us (31.36; 15 us 31.42, 30 us 32.94), H100 15 us (9.26; 25 us 14.83),
# H200 35 us (35.58; 45 us 37.63). Checked on the step's 336 vLLM fit rows: B300, H100 and
# H200 hold there; B200 15 us lost to 20 (TTFT + TPOT 36.2 against 35.1 on its 168
# rows), so B200 stays at 20 us.
# Refitted in session 21 after vLLM's MLA decode-module floors and the Kimi-K2.5
# gap-analysis rows' InferenceMAX limits landed, the same 48 fit rows and rule:
# ``--grid-us 10,15,20,25`` and ``--grid-us 30,35,40,45`` (``benchmarks/results/
# vllm-refit21-eager-grid-{a,b}``; docs/decisions.md, "Issue 31, step: vLLM's eager host
# time refitted on session 21's merge"), TTFT + TPOT MAPE: B200 35 us (35.9; 20 us 36.7),
# B300 15 us (28.3; 20 us 29.9), H100 35 us (26.9; 15 us 32.2), H200 25 us (18.1; 35 us
# 18.7). Checked on the sample's 356 vLLM fit rows (``vllm-refit21-fit-{cur,new}``): B200
# 35 us holds (TTFT + TPOT 29.8 against 32.4 on its 183 rows); B300 15 (26.3 against 26.0),
# H100 35 (30.9 against 28.7) and H200 25 (36.6 against 36.3) lose, so they stay.
# Grid again in session 22 once the counts took the row's tensor parallelism, MiniMax-M2's
# q/k-norm all-reduce, the fp4 checkpoints' bf16 attention and Kimi-K2.5 fp4 B200's script
# flags (docs/decisions.md, "Issue 31, step: vLLM's eager launches per model"), the same 48
# fit rows: ``--grid-us 20,30,40,50 --out benchmarks/results/vllm-launch-eager-grid``: B200
# 40 us (33.2; 30 us 34.5), B300 20 (27.9, as set), H100 40 (26.8; 4 rows), H200 30 (18.3;
# 40 us 21.1). On the sample's 183 B200 fit rows 40 us ties 35 (TTFT + TPOT 29.5 against
# 29.6) by trading Kimi-K2.5 and gpt-oss for MiniMax-M2.5, so B200 stays at 35; H100 and
# H200 not rechecked on the wider rows (session 21's check had their grid winners lose).
# B200 refitted jointly with its vLLM front end (``engine_times.json`` ``frontend_s``, fitted
# at 35 us by helper ``b200-vllm``) on the sample's 183 B200 vLLM fit rows by id
# (``python benchmarks/results/vllm-refit22/grid_point.py b200 US
# benchmarks/results/b200-vllm-fit-ids.csv --split fit --deployment frontend_s=S --out
# benchmarks/results/vllm-refit22/fit-eUS-fMS --jobs 2``; docs/decisions.md, "Issue 31,
# step: B200 vLLM's eager host time and front end refitted jointly"), TTFT + TPOT MAPE at
# front end 20 ms: 10 us 25.4, 20 us 21.8, 25 us 20.9, 30 us 21.1, 35 us 22.2; 25 us at
# 15 / 25 ms 22.3 / 22.1; 10 ms: 20 us 26.9, 35 us 23.5: B200 25 us, front end 20 ms.
VLLM_EAGER_LAUNCH_S: dict[str, float] = {"b200": 25e-6, "b300": 20e-6, "h200": 35e-6, "h100": 15e-6}


# InferenceMAX's B200 Llama-3.1-70B vLLM rows (every prompt step eager: their scripts'
# decode-only graphs, :func:`inferencemax_vllm_decode_only_graphs`) take the eager host
# time under the kernels, ``max(kernels, launches x host time)`` (``EagerPrefillPricer``
# ``overlap``): vLLM 0.10.2's compiled forward without a graph issues its kernels
# asynchronously (``compilation/cuda_graph.py`` ``CUDAGraphWrapper.__call__`` calls the
# compiled model itself under ``CUDAGraphMode.NONE``; ``v1/worker/gpu_model_runner.py``
# waits only on the sampled tokens' copy, ``_async_copy_ready_event``). The sum with
# B200's ``VLLM_EAGER_LAUNCH_S`` (25 us) over-prices the one-GPU 1k rows by 20-40% (a
# 1k prompt's kernels are ~49 ms there) while tp 4-8 want more. The host time per launch
# in this form, fitted on the fit split only (the CSV's 57 fit rows of the B200
# Llama-3.1-70B vLLM fp4 and fp8 groups; the floor at tp > 1, 1,280 launches, on a grid:
# ``python benchmarks/silicon_rows.py benchmarks/results/vllm-dense26/b200/fit-before.csv
# --split fit --deployment eager_prefill_s=V --deployment eager_graph_tokens=0
# --deployment eager_overlap=true``): TTFT MAPE 21.5% without, 17.9 / 15.7 / 14.1 /
# 13.7 / 16.4% at 40 / 48 / 56 / 64 / 80 ms, so 64 ms = 50 us a launch (docs/decisions.md,
# "Issue 31, step: B200 vLLM's decode-only graphs"). The Hopper Llama-3.1-70B scripts
# (piecewise graphs to 512 tokens, the same release) take none: the series rule on their
# steps above 512 tokens took H200 fp8's fit TTFT from 7.0 to 26.9%, H100's 23.7 to 40.8.
VLLM_OVERLAP_LAUNCH_S: dict[str, float] = {"b200": 50e-6}


def vllm_eager_overlaps(row: SiliconRow, kind: str = "benchmark") -> bool:
    """Whether ``row``'s eager host time runs under its kernels (above): only where its
    script's decode-only graphs are run (the ``benchmark`` deployment ``kind``, as
    :func:`vllm_graph_tokens`); other kinds take vLLM's default piecewise graphs."""
    return kind == "benchmark" and inferencemax_vllm_decode_only_graphs(row)


def vllm_prefills_eagerly(row: SiliconRow) -> bool:
    """Whether ``row``'s vLLM release is one the eager rule was read in (above)."""
    from twin.costmodel.table_release import release_at_least  # late: rows read without it

    version = row.backend_version or ""
    return version.startswith("nightly") or release_at_least(version, VLLM_EAGER_FROM)


def vllm_graph_tokens(row: SiliconRow, limits: dict[str, Any], kind: str = "benchmark") -> int:
    """vLLM's ``max_cudagraph_capture_size`` for ``row`` run with the server limits
    ``limits`` (:func:`deployment`'s keywords under the deployment ``kind``; above): an
    InferenceMAX script's own size only where its scripts' limits are run (``benchmark``,
    as :func:`deployment`)."""
    sets = limits.get("sets", {})
    seqs = int(sets.get("max_num_seqs", 0) or 0)
    size = min(2 * seqs, VLLM_MAX_CAPTURE) if seqs else VLLM_MAX_CAPTURE
    if kind == "benchmark" and inferencemax_row(row):
        named = model_named(row, INFERENCEMAX_VLLM_CAPTURE)
        size = INFERENCEMAX_VLLM_CAPTURE[named] if named else size
        if inferencemax_prompt_budget_flags(row):  # the script's --max-cudagraph-capture-size
            size = INFERENCEMAX_MINIMAX_CAPTURE
    if vllm_eager_overlaps(row, kind):
        return 0  # no graph for a step with a prompt, whatever its size
    budget = int(sets.get("max_num_batched_tokens", 0) or 0)
    return min(size, budget) if budget else size


def eager_launches(model: ModelSpec, counts: Mapping[str, int] = SGLANG_EAGER_LAUNCHES) -> int:
    """Kernels one eager forward of ``model`` launches, summed over its layers at ``counts``
    per part: SGLang's (``SGLANG_EAGER_LAUNCHES``, TensorRT-LLM's stand-in) or vLLM's
    (:func:`vllm_eager_launches`). Mixer kinds without a count (Mamba2, say) count none."""
    out = sum(counts.get(kind, 0) * count for kind, count in model.mixer_counts.items())
    if model.attn_output_gate:
        gated = model.mixer_counts.get("attention", 0) + model.mixer_counts.get("swa", 0)
        out += counts["attention_gate"] * gated
    per_moe = counts["moe"] + (counts["shared_expert"] if model.moe_shared_d_ff else 0)
    return out + per_moe * model.n_moe_layers + counts["mlp"] * model.n_mlp_layers


def vllm_eager_launches(model: ModelSpec, tp: int, bf16_attention: bool = False) -> int:
    """vLLM's :func:`eager_launches` at ``tp`` GPUs of tensor parallelism
    (:func:`vllm_part_launches`; ``bf16_attention``: the checkpoint's attention
    projections unquantised)."""
    counts = {p: vllm_part_launches(model, p, tp, bf16_attention) for p in SGLANG_EAGER_LAUNCHES}
    return eager_launches(model, counts)


def vllm_part_launches(model: ModelSpec, part: str, tp: int, bf16_attention: bool = False) -> int:
    """Kernels one ``part`` of a ``model`` layer launches in vLLM's eager forward
    (:data:`VLLM_EAGER_LAUNCHES`): its other kernels, its linears at one launch each, two
    where ``model``'s linear precision quantises the activations, and for ``moe`` the
    experts' kernels (two more where the experts' format quantises the activations); at
    ``tp`` 1 without its all-reduces, above it with MiniMax-M2's q/k-norm all-reduce
    (:data:`VLLM_ALL_REDUCES`, :data:`VLLM_QK_NORM_ALL_REDUCE`). ``bf16_attention``: the
    checkpoint leaves the attention projections unquantised (``precision.
    attention_unquantised``: ``nvidia/Kimi-K2.5-NVFP4``'s, ``nvidia/MiniMax-M2.5-NVFP4``'s),
    so vLLM runs them as bf16 linears (0.17.0 ``quantization/modelopt.py``
    ``ModelOptQuantConfigBase.get_quant_method``: an excluded linear gets
    ``UnquantizedLinearMethod``), one launch each. A part vLLM's count does not cover:
    SGLang's."""
    from twin import precision as px  # late: the rows are read without the formats

    if part not in VLLM_EAGER_LAUNCHES:
        return SGLANG_EAGER_LAUNCHES[part]
    other, linears = VLLM_EAGER_LAUNCHES[part]
    per_linear = 1 if px.weight_format(model.precision).act_bytes is None else 2
    if bf16_attention and part in ("mla", "attention", "swa"):
        per_linear = 1
    out = other + linears * per_linear
    if part == "moe":
        quantised = px.moe_format(model).act_bytes is not None
        out += VLLM_EXPERT_LAUNCHES + (2 if quantised else 0)
    if tp <= 1:
        out -= VLLM_ALL_REDUCES.get(part, 0)
    elif part in ("attention", "swa") and model.qk_norm_across_heads:
        out += VLLM_QK_NORM_ALL_REDUCE
    return out


def sglang_prefills_eagerly(row: SiliconRow, model: ModelSpec, multimodal: bool) -> bool:
    """Whether SGLang runs ``row``'s prefill batches without CUDA graphs (above): a
    release before 0.5.10, a model whose piecewise graphs every release turns off, an
    InferenceMAX DeepSeek server whose script passes a flag that turns them off
    (:func:`inferencemax_no_piecewise`), or an InferenceMAX row that names no release
    but ran before 0.5.10 (:func:`inferencemax_sglang_unnamed`); never from 0.5.23."""
    from twin.costmodel.table_release import (  # late: rows read without it
        release_at_least,
        version_key,
    )
    from twin.engine.memory_rules import SGLANG_0_5_23, sglang_piecewise_off

    if release_at_least(row.backend_version, SGLANG_0_5_23):
        return False
    if multimodal or sglang_piecewise_off(model.name, row.backend_version):
        return True
    if inferencemax_no_piecewise(row) or inferencemax_sglang_unnamed(row):
        return True
    dated = version_key(row.backend_version) is not None
    return dated and not release_at_least(row.backend_version, SGLANG_PIECEWISE_DEFAULT)


def eager_prefill_s(
    row: SiliconRow,
    model: ModelSpec,
    gpu: str,
    multimodal: bool = False,
    bf16_attention: bool = False,
    kind: str = "benchmark",
) -> float:
    """The host time added to a prefill step (``EngineConfig.eager_prefill_s``) for ``row`` run
    on the twin's ``gpu`` under the deployment ``kind``: the model's eager launches
    (:func:`eager_launches`) times the GPU's host time per launch; 0.0 where the engine prefills
    with graphs (:func:`sglang_prefills_eagerly`; ``multimodal``: the model's config has a
    ``vision_config``), the model has no MoE layers (the dense SGLang rows are GPU-bound:
    nothing to fit them on), attention DP is on (but for TensorRT-LLM, whose ranks all run a
    step eagerly where one prefills: ``twin.engine.dp_attention.DPReplica``), or the GPU has no
    fitted host time.
    TensorRT-LLM rows: every context step is eager (``TRTLLM_EAGER_LAUNCH_S``) unless the
    row's InferenceMAX script captured piecewise CUDA graphs
    (:func:`inferencemax_trtllm_piecewise`) and ran no MTP; vLLM rows of the releases read
    (:func:`vllm_prefills_eagerly`): the steps above its largest captured graph, at
    vLLM's own launch count (``VLLM_EAGER_LAUNCHES``) times ``VLLM_EAGER_LAUNCH_S`` (the
    plan adds :func:`vllm_graph_tokens`; ``bf16_attention``: the checkpoint leaves its
    attention projections unquantised, :func:`vllm_eager_launches` at the row's tp).
    InferenceMAX's B200 Llama-3.1-70B vLLM rows, dense: every step with a prompt, the
    same launches at ``VLLM_OVERLAP_LAUNCH_S`` under the kernels (their scripts'
    decode-only graphs: :func:`vllm_eager_overlaps`)."""
    if vllm_eager_overlaps(row, kind):  # every prompt step eager, dense too, under kernels
        launches = vllm_eager_launches(model, row.tp or 1, bf16_attention)
        return VLLM_OVERLAP_LAUNCH_S.get(gpu, 0.0) * launches
    if not model.n_moe_layers:
        return 0.0
    if (row.attention_dp or 1) > 1 and row.backend != "trtllm":
        return 0.0  # TensorRT-LLM's ranks run a context step eagerly (``DPReplica.eager_s``)
    if row.backend == "trtllm":  # context steps run eagerly (TRTLLM_EAGER_LAUNCH_S) unless
        # the row's script captured them as graphs (and runs no MTP: above)
        if inferencemax_trtllm_piecewise(row) and inferencemax_mtp_drafts(row) is None:
            return 0.0
        return launch_s(row, gpu) * eager_launches(model)
    if row.backend == "vllm":  # steps above the largest graph (VLLM_EAGER_LAUNCH_S)
        if not vllm_prefills_eagerly(row):
            return 0.0
        return launch_s(row, gpu) * vllm_eager_launches(model, row.tp or 1, bf16_attention)
    if row.backend != "sglang" or not sglang_prefills_eagerly(row, model, multimodal):
        return 0.0
    return launch_s(row, gpu) * eager_launches(model)


def vllm_eager_decode_s(
    row: SiliconRow, model: ModelSpec, gpu: str, kind: str = "benchmark"
) -> float:
    """The host time added to a vLLM eager step of ``row`` that also decodes
    (``EngineConfig.eager_decode_s``): :data:`VLLM_MLA_DECODE_LAUNCHES` per MLA layer times
    the GPU's host time per launch, for an MLA ``model`` on a Blackwell ``gpu`` in the
    release read (:data:`VLLM_MLA_DECODE_RELEASES`); 0.0 where no eager step is priced
    (:func:`eager_prefill_s`) or the eager time runs under the kernels."""
    from twin.costmodel.engine_kernels import BLACKWELL_SM100  # late: rows read without it

    mla = model.mixer_counts.get("mla", 0)
    if (
        row.backend != "vllm"
        or not mla
        or gpu not in BLACKWELL_SM100
        or row.backend_version not in VLLM_MLA_DECODE_RELEASES
        or vllm_eager_overlaps(row, kind)
        or not eager_prefill_s(row, model, gpu, kind=kind)
    ):
        return 0.0
    return launch_s(row, gpu) * VLLM_MLA_DECODE_LAUNCHES * mla


def launch_s(row: SiliconRow, gpu: str) -> float:
    """The host seconds per eager launch of ``row``'s engine on the twin's ``gpu``
    (``SGLANG_EAGER_LAUNCH_S``, ``TRTLLM_EAGER_LAUNCH_S``, ``VLLM_EAGER_LAUNCH_S``; 0.0
    where none is fitted): :func:`eager_prefill_s` is it times the forward's launches."""
    table = {
        "sglang": SGLANG_EAGER_LAUNCH_S,
        "trtllm": TRTLLM_EAGER_LAUNCH_S,
        "vllm": VLLM_EAGER_LAUNCH_S,
    }.get(row.backend, {})
    return table.get(gpu, 0.0)
