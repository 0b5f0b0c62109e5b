"""The ``trtllm`` engine mode's flags: TensorRT-LLM's spelling of speculative decoding.

TensorRT-LLM configures speculation in its LLM API (``LLM(speculative_config=...)``,
``trtllm-serve --extra_llm_api_options FILE.yaml`` with a ``speculative_config:``
section): a ``decoding_type`` naming the config class and that class's fields. The
twin takes the section as ``--set speculative_config=JSON`` (JSON is YAML's flow
style, so the section's keys and values are written as they are in the file) and
reads it through the engines' one parser (:func:`twin.engine.speculative.read_config`),
mapping onto the twin's methods (:data:`twin.engine.speculative_methods.METHODS`).

Release followed: TensorRT-LLM 1.0, the release :mod:`twin.engine.trtllm_batching`
follows. Its wheels are on NVIDIA's package index, not PyPI (PyPI's ``tensorrt_llm``
1.0.0 is a 1.6 kB placeholder sdist), so ``tensorrt_llm/llmapi/llm_args.py`` was read
from a GitHub copy of the 1.0 line (``DecodingBaseConfig.from_dict``'s classes
``MTP``, ``Medusa``, ``Eagle``, ``Lookahead``, ``NGram``, ``DraftTarget``,
``UserProvided``, ``AUTO``; ``EagleDecodingConfig.eagle3_one_model`` default True;
``MTPDecodingConfig.num_nextn_predict_layers`` default 1, ``use_mtp_vanilla``;
``NGramDecodingConfig.max_matching_ngram_size`` default 0) and checked against
aiconfigurator 0.12.0's template for 1.0.0
(``generator/config/backend_templates/trtllm/extra_engine_args.1.0.0.yaml.j2``:
``decoding_type``, ``num_nextn_predict_layers`` for MTP, ``speculative_model_dir`` for
Eagle). Later releases renamed things (``Eagle3`` as its own ``decoding_type``,
``Draft_Target``, ``speculative_model``); those are refused naming 1.0's spelling.
"""

from __future__ import annotations

from typing import Any

from twin.engine import speculative
from twin.engine.mode_base import Flag, _acceptance, _choice, _field, _scheduler_option
from twin.engine.releases import release_of
from twin.errors import TwinError
from twin.model import ModelSpec

FLAG = "--set speculative_config"

# BuildConfig / TorchLlmArgs defaults in TensorRT-LLM 1.0 (the flags' defaults below; here,
# not in twin.engine.trtllm_batching, so that listing the flags imports no batching).
MAX_NUM_TOKENS = 8192
MAX_BATCH_SIZE = 2048

# llmapi/llm_args.py (1.0) DecodingBaseConfig.from_dict: decoding_type -> the twin's
# method. The PyTorch backend (the one the twin's TensorRT-LLM mode models) runs
# EagleDecodingConfig as EAGLE-3 (spec_dec_mode EAGLE3 / EAGLE3_ONE_MODEL).
DECODING_TYPES = {
    "Eagle": "eagle3",
    "MTP": "mtp",
    "NGram": "ngram",
    "DraftTarget": "draft_model",
}
# decoding_types 1.0 has that the twin does not model, and names later releases use.
_NOT_MODELLED = {
    "Medusa": "Medusa heads run on the TensorRT backend only (supports_backend), not modelled",
    "Lookahead": "lookahead decoding (TensorRT backend) is not modelled",
    "UserProvided": "a user-provided drafter has no cost the twin can know",
    "AUTO": "AUTO picks NGram by concurrency at run time; give NGram with its sizes",
    "Eagle3": "TensorRT-LLM 1.0 has no Eagle3 decoding_type: its Eagle is EAGLE-3 (give Eagle)",
    "Draft_Target": "TensorRT-LLM 1.0 spells it DraftTarget",
}
# The fields the twin reads (llm_args.py 1.0: DecodingBaseConfig's max_draft_len and
# speculative_model_dir; EagleDecodingConfig.eagle3_one_model;
# MTPDecodingConfig.num_nextn_predict_layers; NGramDecodingConfig.max_matching_ngram_size).
_KEYS = (
    "decoding_type",
    "max_draft_len",
    "speculative_model_dir",
    "num_nextn_predict_layers",
    "eagle3_one_model",
    "max_matching_ngram_size",
)
# Keys of later releases, with what 1.0 reads instead.
_LATER = {
    "speculative_model": "TensorRT-LLM 1.0 names it speculative_model_dir",
    "max_total_draft_tokens": "TensorRT-LLM 1.0 drafts a chain of max_draft_len tokens",
    "mtp_eagle_one_model": "TensorRT-LLM 1.0 runs one-layer MTP as MTP-Eagle unless "
    "use_mtp_vanilla",
}


def _trtllm_spec_config(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    release = release_of(out)
    out["trtllm_spec"] = speculative.read_config(
        FLAG, value, f"TensorRT-LLM {release.version}", _KEYS, _LATER
    )


def trtllm_speculation(model: ModelSpec, out: dict[str, Any]) -> None:
    """``speculative_config`` (and ``speculative_acceptance``) as a Speculation, following
    ``TorchLlmArgs.validate_speculative_config`` (llm_args.py, 1.0)."""
    cfg = out.pop("trtllm_spec", None)
    acceptance = out.pop("spec_acceptance", None)
    if cfg is None:
        if acceptance is not None:
            raise TwinError("--set speculative_acceptance: give a speculative_config too")
        return
    given = cfg.get("decoding_type")
    if given is None:
        raise TwinError(f"{FLAG}: give decoding_type ({', '.join(DECODING_TYPES)})")
    if str(given) in _NOT_MODELLED:
        raise TwinError(f"{FLAG}: decoding_type {given}: {_NOT_MODELLED[str(given)]}")
    method = speculative.config_method(FLAG, given, DECODING_TYPES, "decoding_type")
    k = speculative.config_int(FLAG, cfg, "max_draft_len")
    path = str(cfg.get("speculative_model_dir") or "")
    one_model = cfg.get("eagle3_one_model", True)
    if not isinstance(one_model, bool):
        raise TwinError(f"{FLAG}: eagle3_one_model must be true or false (got {one_model!r})")
    for key, owner in (
        ("num_nextn_predict_layers", "mtp"),
        ("eagle3_one_model", "eagle3"),
        ("max_matching_ngram_size", "ngram"),
    ):
        if key in cfg and method != owner:
            raise TwinError(f"{FLAG}: {key} is a field of another decoding_type, not {given}")
    if method == "mtp":
        # validate_speculative_config: num_nextn_predict_layers > 0, and max_draft_len is
        # set to it (one MTP layer run num_nextn_predict_layers times: MTP-Eagle).
        layers = speculative.config_int(FLAG, cfg, "num_nextn_predict_layers")
        layers = 1 if layers is None else layers
        if k is not None and k != layers:
            raise TwinError(
                f"{FLAG}: TensorRT-LLM 1.0 sets max_draft_len to num_nextn_predict_layers "
                f"({layers}) for MTP; leave it out or give the same"
            )
        k = layers
    elif k is None:
        # validate_speculative_config asserts max_draft_len > 0 for Eagle, NGram, DraftTarget.
        raise TwinError(f"{FLAG}: decoding_type {given} needs max_draft_len (a positive integer)")
    if method in ("eagle3", "draft_model") and not path:
        # "Path to EAGLE3 weights must be specified." / "Path to draft model must be specified."
        raise TwinError(f"{FLAG}: decoding_type {given} needs speculative_model_dir")
    if method == "ngram" and not speculative.config_int(FLAG, cfg, "max_matching_ngram_size"):
        # NGramDecodingConfig.max_matching_ngram_size defaults to 0, which the check refuses.
        raise TwinError(
            f"{FLAG}: decoding_type NGram needs max_matching_ngram_size (a positive integer)"
        )
    spec = speculative.build(
        model,
        method,
        k,
        # DraftTarget: the draft model, a preset or config.json; Eagle: the head's path,
        # recorded (the head is derived from the target).
        draft_model=path,
        acceptance=None if acceptance is None else ("--set speculative_acceptance", acceptance),
        # The one-model implementations (Eagle with eagle3_one_model, the default; MTP)
        # launch the whole drafting loop as one CUDA graph; the two-model ones produce
        # the drafts in the PyExecutor, a draft forward each (TensorRT-LLM docs,
        # features/speculative-decoding: "one model" vs "two model"): each draft pass pays
        # the engine's host time a step. NGram drafts on the CPU: no GPU pass.
        draft_host=(method == "eagle3" and not one_model) or method == "draft_model",
    )
    out["speculative"] = spec.to_dict()


def _trtllm_options(model: ModelSpec, out: dict[str, Any]) -> dict[str, Any]:
    trtllm_speculation(model, out)
    return {}


TRTLLM_SPEC = ("speculative_config", "speculative_acceptance")
# trtllm-serve's --max_batch_size and --max_num_tokens (also keys of
# --extra_llm_api_options; TorchLlmArgs in tensorrt_llm/llmapi/llm_args.py, 1.0): the
# capacity scheduler's request cap and the step's token budget. A disaggregated
# deployment gives its context and generation servers their own (aiconfigurator 0.12.0
# generator/rule_plugin/benchmark/trtllm.rule: prefill and decode max_batch_size).
TRTLLM_BATCHING = ("max_batch_size", "max_num_tokens")
# --extra_llm_api_options' batch waiting (TorchLlmArgs ``batch_wait_timeout_iters``, default
# 0, and ``batch_wait_max_tokens_ratio``, default 0.0; ``PyExecutor._waiting_requests``):
# while generation requests run, scheduled context requests are held back until their
# tokens and the generation tokens reach ratio x max_num_tokens or the executor has held
# them that many iterations (twin.engine.trtllm_batching).
TRTLLM_BATCH_WAIT = ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")


# TorchLlmArgs ``disable_overlap_scheduler`` (default false: the overlap scheduler is on in
# TensorRT-LLM): a request arriving while step n runs joins step n + 2 at the earliest
# (``twin.engine.trtllm_batching``). The twin keeps it off unless given (its attention-DP,
# pipeline and disaggregated loops do not model it); the scorer gives it for aggregated
# rows (``twin.validate.silicon.deployment.trtllm_overlap_scheduler``).
TRTLLM_OVERLAP = ("overlap_scheduler",)


# --extra_llm_api_options' ``attention_dp_config`` (``AttentionDpConfig`` in
# tensorrt_llm/llmapi/llm_args.py: ``enable_balance`` false, ``timeout_iters`` 50,
# ``batching_wait_iters`` 10), read by the executor only with ``enable_attention_dp``:
# context requests are held until every attention-DP rank has one, or for at most
# ``timeout_iters`` iterations (twin.engine.adp_balance.ADPBalance; ranks of
# ``--dp-attention`` only, a plain replica ignores them as the engine does).
TRTLLM_ADP_BALANCE = (
    "attention_dp_balance",
    "attention_dp_timeout_iters",
    "attention_dp_batching_wait_iters",
)
ADP_TIMEOUT_ITERS = 50  # AttentionDpConfig.timeout_iters' default (above)
ADP_BATCHING_WAIT_ITERS = 10  # AttentionDpConfig.batching_wait_iters' default


# --extra_llm_api_options' ``moe_config.backend`` (``MoeConfig.backend``, llm_args.py): the
# fused-MoE module of the experts (``_torch/modules/fused_moe/create_moe.py``
# ``get_moe_cls``: ``CUTLASS`` -> ``CutlassFusedMoE``, ``TRTLLM`` -> ``TRTLLMGenFusedMoE``
# for nvfp4 and fp8 block scales; NVIDIA/TensorRT-LLM's stored tree, the 1.x line). The
# twin prices the nvfp4 experts with NVIDIA's table of that module at every step
# (``twin.engine.run_pricing.priced_profile``): ``TRTLLM`` with the TRTLLM-gen rows (kernel source
# ``moe_torch_flow_min_latency``, ``twin.costmodel.moe_families.MOE_MIN_LATENCY_SOURCE``),
# ``CUTLASS`` with the CUTLASS rows. Unset: aiconfigurator 0.12.0's pricing, the
# TRTLLM-gen rows for steps of at most 128 tokens and CUTLASS's above.
TRTLLM_MOE_BACKENDS = ("CUTLASS", "TRTLLM")
TRTLLM_MOE = ("moe_backend",)


def _trtllm_moe_backend(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    _choice("moe_backend", value, TRTLLM_MOE_BACKENDS)


def _batch_wait_ratio(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    try:
        ratio = float(value)
    except ValueError:
        raise TwinError(f"--set batch_wait_max_tokens_ratio={value}: expected a number") from None
    # TorchLlmArgs validates the ratio to [0, 1].
    if not 0.0 <= ratio <= 1.0:
        raise TwinError(f"--set batch_wait_max_tokens_ratio={value}: must be in [0, 1]")
    out.setdefault("scheduler_options", {})["batch_wait_max_tokens_ratio"] = ratio


TRTLLM_FLAGS = {
    "max_batch_size": _field(
        "max_batch_size",
        "max_running",
        "int",
        "most requests scheduled at once",
        str(MAX_BATCH_SIZE),
    ),
    "max_num_tokens": _field(
        "max_num_tokens", "max_batched_tokens", "int", "token budget per step", str(MAX_NUM_TOKENS)
    ),
    "batch_wait_timeout_iters": Flag(
        "iterations context requests may be held back while generation requests run",
        _scheduler_option("batch_wait_timeout_iters", low=0),
        "0",
    ),
    "batch_wait_max_tokens_ratio": Flag(
        "share of max_num_tokens whose scheduled tokens end the hold early",
        _batch_wait_ratio,
        "0.0",
    ),
    "overlap_scheduler": Flag(
        "a request arriving during step n joins step n + 2 at the earliest "
        "(TensorRT-LLM's overlap scheduler, on in the engine by default)",
        _scheduler_option("overlap_scheduler", "bool"),
        "false",
    ),
    "attention_dp_balance": Flag(
        "with --dp-attention, hold context requests until every rank has one "
        "(attention_dp_config enable_balance)",
        _scheduler_option("attention_dp_balance", "bool"),
        "false",
    ),
    "attention_dp_timeout_iters": Flag(
        "iterations the attention-DP balance holds contexts at most (timeout_iters)",
        _scheduler_option("attention_dp_timeout_iters", low=0),
        str(ADP_TIMEOUT_ITERS),
    ),
    "attention_dp_batching_wait_iters": Flag(
        "iterations the attention-DP balance waits once every rank has a context "
        "(batching_wait_iters)",
        _scheduler_option("attention_dp_batching_wait_iters", low=0),
        str(ADP_BATCHING_WAIT_ITERS),
    ),
    "moe_backend": Flag(
        "moe_config.backend: the nvfp4 experts' kernel at every step, CUTLASS or TRTLLM "
        "(TRTLLM-gen); unset: TRTLLM-gen up to 128 tokens, CUTLASS above (aiconfigurator)",
        _trtllm_moe_backend,
        "unset",
    ),
    "speculative_config": Flag(
        "JSON, the speculative_config section of --extra_llm_api_options: decoding_type "
        "Eagle (EAGLE-3: max_draft_len, speculative_model_dir, eagle3_one_model) | MTP "
        "(num_nextn_predict_layers) | NGram (max_draft_len, max_matching_ngram_size) | "
        "DraftTarget (max_draft_len, speculative_model_dir: a preset or config.json)",
        _trtllm_spec_config,
        "none",
    ),
    "speculative_acceptance": Flag(
        "twin: drafted tokens accepted, one rate or one per position "
        "(default: the method's published one; Eagle, MTP)",
        _acceptance,
        "published",
    ),
}


__all__ = [
    "ADP_BATCHING_WAIT_ITERS",
    "ADP_TIMEOUT_ITERS",
    "DECODING_TYPES",
    "TRTLLM_ADP_BALANCE",
    "TRTLLM_BATCHING",
    "TRTLLM_BATCH_WAIT",
    "TRTLLM_FLAGS",
    "TRTLLM_MOE",
    "TRTLLM_MOE_BACKENDS",
    "TRTLLM_OVERLAP",
    "TRTLLM_SPEC",
    "trtllm_speculation",
]
