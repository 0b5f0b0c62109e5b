"""The expert layout a fused-MoE fit prices a model's experts at (issue 34).

NVIDIA's ``moe_perf`` tables time the rank of a layout under the collector's
``balanced`` logits (aiconfigurator's ``collector/helper.py`` ``balanced_logits``: token
i's j-th expert ``(i + j x ceil(E / k)) mod E``, one hot expert in each of DeepSeek's 8
groups of 32). For a model with group-limited routing the collectors pass the model's
grouped top-k (SGLang: ``collector/sglang/collect_moe.py``, ``TopK(use_grouped_topk=...,
num_expert_group=8, topk_group=4)`` from ``cases/models/DeepseekV3ForCausalLM_cases.yaml``;
TensorRT-LLM: ``collector/trtllm/collect_moe.py``, ``DeepseekV3Gate(n_group=8,
topk_group=4)``), and with one hot expert a group every group scores the same: the
top-4 groups are a tie, so the rows go to 4 of the 8 groups (the same 4 for every
token) and not over every rank as the ``balanced`` rule (``twin.costmodel.routing``)
reads them. What the rows then time (B200, SGLang 0.5.14 ``flashinfer_trtllm`` nvfp4,
DeepSeek's 7168 x 2048 x 256 experts, top 8):

- an EP rank holding tied groups gets more than its ``1 / ep`` share: EP 2 times the
  same as one GPU at every size up to 256 tokens (rank 0 holds all four tied groups:
  every row), and EP 4 is 1.4-1.8x TP 4 from one token (40 against 21 us) to 8,192
  (1,259 against 715 us), though under a real gate both move the same bytes (the EP
  rank ``1 / ep`` of the reached experts at full width, the TP rank every reached
  expert at ``1 / tp`` width) and the same FLOPs;
- a TP rank reaches only the tied groups' experts (half): faster than the features.

A rank that runs its local experts over the same tokens as TP does (SGLang's expert
parallelism under TP attention: every rank holds every token, the routed
``flashinfer_trtllm`` kernel with a local-expert offset, then the all-reduce) is priced
at the TP layout of the same GPUs: the tables' TP rows of the same kernel (its fit and
per-shape term at ``moe_tp = tp``, ``ep`` 1). Measured end to end, the 33 fit rows of
SGLang 0.5.9's DeepSeek fp4 EP runs on B200 agreed with this price (docs/decisions.md,
issue 31: the SGLang rows by cause; issue 34: the kernel tables' hot ranks).

The tie is the collectors' (the same balanced logits and grouped top-k in SGLang's and
TensorRT-LLM's), but only the kernel sources below were checked against measured EP runs:
TensorRT-LLM's CUTLASS rows keep their EP series: there the TP rows of DeepSeek's shape
are the slower ones (EP 4 / TP 4 0.73 at 256 tokens on B200 once its slow series are
read from GB200's, ``calibration.moe_sibling``), and priced at TP the 18 DeepSeek B200
fp4 fit rows it moves went from TPOT 14.7% to 24.5% (docs/decisions.md, issue 31: the
same-silicon rule). A model with plain top-k (Kimi-K2.5, GLM-5: ``n_group`` 1) keeps its
own layout, its EP rows timing what TP's do (EP k equals TP k in the same table).
"""

from __future__ import annotations

from collections.abc import Callable

from twin.costmodel.moe_features import TRTLLM_MOE_SOURCE
from twin.costmodel.table_release import release_at_least
from twin.model import ModelSpec

# Fused-MoE kernel sources whose TP rows stand for their EP runs of a group-limited
# model (the docstring): SGLang 0.5.14's routed trtllm-gen kernel.
TP_PRICED_EP_SOURCES = frozenset({"sglang_flashinfer_trtllm_moe"})


def group_limited(model: ModelSpec) -> bool:
    """Whether ``model`` routes a token within its best ``moe_topk_group`` of
    ``moe_n_group`` expert groups (DeepSeek-V3's 4 of 8)."""
    return model.moe_n_group > 1 and model.moe_topk_group < model.moe_n_group


def priced_ep(model: ModelSpec, tp: int, ep: int, kernel_source: str) -> int:
    """The expert parallelism the fused-MoE fit of ``kernel_source`` prices ``model``'s
    experts at on ``tp`` GPUs run at expert parallelism ``ep``: 1 (the TP layout, each
    expert split ``tp`` ways) where the table's EP rows time the tie's hot rank (the
    docstring) and the width splits evenly, else ``ep``."""
    tp_layout = ep > 1 and group_limited(model) and kernel_source in TP_PRICED_EP_SOURCES
    return 1 if tp_layout and model.moe_d_ff % tp == 0 else ep


# The releases from which an engine's ``moe_perf`` tables were collected with the model's
# grouped top-k over the balanced logits (the tie of the docstring: a rank reaches only the
# 4 tied groups' experts, half of DeepSeek's 256, at every token count), read in the
# public ai-dynamo/aiconfigurator repository: SGLang's ``collector/sglang/collect_moe.py``
# builds ``TopK(use_grouped_topk=..., num_expert_group, topk_group)`` from the model's
# cases since the 0.5.14 upgrade (090d7c609 / e23be5a79, the 0.5.14 tables); the 0.5.10
# tables' collector (bfe33f797 .. af05a670a) routes with plain
# ``select_experts(x, gating, TopKConfig(top_k=topk))``, each token its 8 hot experts,
# ``min(8 x tokens, 256)`` reached. H200, SGLang's Triton fp8_block, DeepSeek's shape at
# TP 8, balanced: 0.5.10 flattens at 0.47-0.50 ms from 32 to 256 tokens (all 256 experts,
# 1.41 GB a rank: 2.9 TB/s), 0.5.14 at 0.25-0.30 ms (all 256 would be 4.7-5.6 TB/s, at or
# over H200's 4.8 TB/s peak; its 128 tied experts 2.8 TB/s), and both read ~3.1 TB/s per
# byte of the experts their own routing reaches from 1 token up (docs/decisions.md,
# issue 31: the experts' tables of H200, helper ``sgl-experts``).
GROUP_TIED_SINCE = {"sglang": "0.5.14"}


def group_tied_table(engine: str, version: str) -> bool:
    """Whether ``engine``'s fused-MoE table of release ``version`` timed a group-limited
    model's rows at the collectors' tie (:data:`GROUP_TIED_SINCE`)."""
    since = GROUP_TIED_SINCE.get(engine.lower())  # the fits' framework: "SGLang"
    return since is not None and release_at_least(version, since)


# Fused-MoE kernel sources whose EP rows stand for their TP runs of a plain top-k model
# where the table timed the shape at EP only (:func:`measured_ep`): TensorRT-LLM's
# ``moe_torch_flow`` (the mxfp4 experts: Triton on Hopper, TRTLLM-Gen on Blackwell). Other
# sources with shapes timed at EP only (the fp8-block tables at MoE widths the 128-wide
# blocks do not split: Qwen3-235B's 1,536 / 8) are not covered: not checked against runs.
EP_PRICED_TP_SOURCES = frozenset({TRTLLM_MOE_SOURCE})


def measured_ep(
    model: ModelSpec, tp: int, ep: int, kernel_source: str, timed: Callable[[int, int], bool]
) -> int:
    """``ep``, or ``tp`` (the EP layout of the same GPUs) for a TP run (``ep`` 1) of a
    model with plain top-k whose shape the fit's table (of a source in
    :data:`EP_PRICED_TP_SOURCES`) timed at EP ``tp`` but not at MoE TP ``tp``
    (``timed(moe_tp, moe_ep)``: the fit's per-shape term has that series).

    Under a real gate both layouts move the same bytes and FLOPs (the docstring: the TP
    rank reads every reached expert at ``1 / tp`` width, the EP rank ``1 / tp`` of them
    at full width), and without a group tie the EP rows time an even rank; the formula
    alone, extrapolated to a MoE TP the table never timed, does not. aiconfigurator's
    collectors time gpt-oss's shape (2,880 x 2,880, 32 or 128 experts, top 4) at MoE TP 1
    only, with EP 1-128 (aiconfigurator-core 0.12.0 ``moe_perf`` tables of TensorRT-LLM:
    ``w4a16_mxfp4`` in 1.3.0rc20 on every GPU and 1.3.0rc10 on H100 / H200,
    ``w4a8_mxfp4_mxfp8`` in 1.3.0rc20 on the Blackwell GPUs; 1.3.0rc23 times other
    shapes), while TensorRT-LLM runs its experts at ``moe_tp_size`` = TP unless
    ``--ep_size`` says otherwise (InferenceMAX's gpt-oss scripts pass
    ``--ep_size=$EP_SIZE``, 1 on most rows)."""
    if ep != 1 or tp <= 1 or kernel_source not in EP_PRICED_TP_SOURCES:
        return ep
    if group_limited(model) or model.moe_n_experts % tp:
        return ep
    return tp if timed(1, tp) and not timed(tp, 1) else ep


# The fused-MoE kernel source of SGLang's Triton runner (``fused_moe_triton``), the one
# that folds DeepSeek's shared expert into its routed launch (``fuses_shared_expert``).
SGLANG_TRITON_MOE_SOURCE = "sglang_fused_moe_triton"


def fuses_shared_expert(model: ModelSpec, ep: int, kernel_source: str) -> bool:
    """Whether the engine runs ``model``'s shared expert as one more routed expert of the
    fused-MoE launch (every token's ``top_k + 1``-th, always hit) instead of its own MLP.

    SGLang 0.5.9 (wheel, read) ``models/deepseek_v2.py``
    ``DeepseekV2ForCausalLM.determine_num_fused_shared_experts``: fused for the
    ``DeepseekV3ForCausalLM`` architecture with 256 routed experts and one shared one, on
    CUDA from SM 80, with no expert parallelism and no DeepEP / MoRI all-to-all (and not
    w4afp8); ``server_args.py`` turns it off for the ``flashinfer_trtllm`` runner and the
    FlashInfer all-to-all. ``DeepseekV2MoE`` then builds ``FusedMoE`` with
    ``num_experts + num_fused_shared_experts`` experts and ``top_k + 1``, and
    ``fused_moe_triton/fused_moe_triton_config.py`` reads the tuned configs of ``E=257``
    (``triton_3_5_1``: the up and the ``_down`` TMA config). Only the Triton runner is
    checked here (the runner ``layers/quantization/fp8.py`` ``create_moe_runner`` picks
    for block-fp8 without DeepEP: H200's DeepSeek rows); Kimi-K2 has 384 experts.

    The check names an architecture; the spec has none, so its shape stands for it.
    ``DeepseekV32ForCausalLM`` (0.5.9 ``deepseek_v2.py``: a bare subclass) is checked
    against the default ``DeepseekV3ForCausalLM`` and never fuses: a DSA indexer with
    DeepSeek's grouped top-k. ``GlmMoeDsaForCausalLM`` (0.5.9 and 0.5.10 ``models/
    glm4_moe.py``) calls ``super().determine_num_fused_shared_experts(
    "GlmMoeDsaForCausalLM")`` with its own name, so GLM-5 (256 routed, one shared of the
    same width) fuses: a DSA indexer with plain top-k (``n_group`` 1)."""
    dsa_fuses = model.index_topk == 0 or model.moe_n_group == 1  # GLM-5, not V3.2
    return (
        kernel_source == SGLANG_TRITON_MOE_SOURCE
        and ep == 1
        and model.kv_lora_rank > 0
        and dsa_fuses
        and model.moe_n_experts == 256
        and model.moe_shared_d_ff == model.moe_d_ff
    )
