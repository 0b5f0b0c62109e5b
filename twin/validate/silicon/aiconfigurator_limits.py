"""The server limits aiconfigurator's generator writes into a benchmark deployment
(package ``aiconfigurator`` 0.12.0), which the aiconfigurator collection's rows ran with.
(aiconfigurator's own estimate of a row: ``twin.validate.silicon.aiconfigurator``.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twin.costmodel.table_release import release_at_least
from twin.validate.silicon.harness import AIPERF, harness_of

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# TensorRT-LLM joined vLLM in issue 31's "TensorRT-LLM's overlap scheduler" step
# (docs/decisions.md): with the overlap scheduler's admission lag modelled, the fit rows
# of the collection's TensorRT-LLM 1.0.0rc3 H100 groups (Llama-3.1-8B, Qwen3-32B,
# Qwen3-235B) score better under the generated limits than at the engine's defaults, TTFT
# and TPOT alike (the TPOT with the limits alone too: one or two whole contexts a step).
DEPLOYED_ENGINES = frozenset({"vllm", "trtllm"})
# SGLang rows ran the generator's deployment from the first SGLang release whose template
# the generator gained after its rule wrote ``enable_mixed_chunk`` (ai-dynamo/aiconfigurator
# git history: ``rule_plugin/sglang.rule`` ``agg enable_mixed_chunk = true`` in #257/#258,
# 2026-01-19, beside ``max_prefill_tokens = SlaConfig.isl + 1500`` and ``max_batch_size``
# -> ``--max-running-requests``; ``cli_args.0.5.6.post2.j2``, rendering all three, first
# in #265 "add dynamo 0.8.0 backend template", 2026-01-23). The collection's other
# 0.5.6.post2 file says it ran that image (``data/h100_sxm/sglang/0.5.6.post2/qwen3_32b.csv``
# in aiconfigurator's ``tools/accuracy_tracking/silicon_refs.csv``: ``measured=2026-01-23;
# image=nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.8.0``). The 0.5.1.post1 template
# (2025-12-04) rendered neither flag before 2026-01-19, and its Qwen3-32B H100 fit rows
# score at SGLang's defaults (13.8% TTFT against 70.5% with mixed chunks, "Engine fidelity
# against silicon (issue 31)"), so they keep them (docs/decisions.md, "Issue 31, step:
# the Llama-3.1-8B H200 SGLang rows ran the generator's mixed chunks").
# Of the three, the rows' own admissions refuse ``--max-prefill-tokens isl + 1500``, so the
# twin leaves SGLang's default (16,384; ``server_args.py`` 0.5.6.post2 and 0.5.8.post1),
# under which the chunk (``chunked_prefill_size`` less the running requests) is the
# step's budget. SGLang's ``PrefillAdder`` (0.5.6.post2 ``managers/schedule_policy.py``:
# ``rem_input_tokens = max_prefill_tokens - mixed_with_decode_tokens``; ``add_one_req``
# returns ``AddReqResult.OTHER`` for a request whose input is at least what is left once
# the batch holds one) admits at most two 1,000-token prompts a step at 2,500 less the
# running batch, but Llama-3.1-8B H200 tp 8 1000/100 at 448 clients completes 104
# requests/s at a 34.1 ms TPOT: 3.56 admissions a step (tp 4 at 352 clients: 2.85), and
# only mixed steps that large give its tp 4 and 8 OSL-100 rows their 29-34 ms TPOT (the
# twin's 16-20 ms at 2,500). The generator's history renders the flag with the other two
# (#265), so the collection's server did not take it as the row's ISL; where from is not
# public (docs/decisions.md, "Issue 31, step: the SGLang dense groups' admissions").
SGLANG_GENERATED_FROM = "0.5.6.post2"
DEPLOYMENT_EXTRA_TOKENS = 1500  # the rules' "isl + 1500" margin
TRTLLM_TOKENS_PER_BLOCK = 32  # benchmark/trtllm.rule: tokens_per_block default
TRTLLM_TEMPLATE_FREE_FRACTION = 0.8  # extra_engine_args templates: free_gpu_memory_fraction


def aiconfigurator_deployment(row: SiliconRow, engine: str) -> dict[str, Any]:
    """``build_run`` keywords for the server limits aiconfigurator's generator writes
    into a benchmark deployment of ``row`` (empty where its rule sizes nothing the twin
    models).

    The generator sizes it from the batch size (``max_batch_size``: the CSV's
    ``batch_size`` column, the concurrency on every bf16 row) and the ISL
    (``generator/rule_plugin/benchmark/vllm.rule`` and ``trtllm.rule``, ``aiconfigurator``
    0.12.0, the ``agg`` lines):

    - vLLM: ``max_num_tokens = max_batch_size + isl + 1500``, written as
      ``--max-num-batched-tokens`` (``config/backend_templates/vllm/cli_args.0.12.0.j2``),
      and ``--max-num-seqs max_batch_size``;
    - TensorRT-LLM: ``max_num_tokens`` the same rounded up to ``tokens_per_block`` (32),
      ``max_batch_size`` the batch size (``extra_engine_args.1.0.0rc3.yaml.j2``
      ``build_config``), and ``kv_cache_config.free_gpu_memory_fraction`` the template's
      ``default(0.80)`` (every ``extra_engine_args.*.yaml.j2``; the rule sets none). vLLM's
      and SGLang's templates write ``--gpu-memory-utilization`` and
      ``--mem-fraction-static`` only when given, and the rules give none.

    - SGLang: ``--enable-mixed-chunk`` and ``--max-running-requests max_batch_size``
      (``rule_plugin/sglang.rule``, ``cli_args.0.5.6.post2.j2``); its ``--max-prefill-tokens
      isl + 1500`` is left out, as the rows' admissions refuse it (``SGLANG_GENERATED_FROM``),
      so SGLang's default stands; ``chunked_prefill_size`` stays SGLang's default by GPU
      memory and ``--kv-cache-dtype`` is left out (the row does not say which dtype the
      generator was given: ``precision.engine_default_kv``). Which SGLang rows ran it:
      :func:`deployed`.
    """
    batch = row.batch_size or row.concurrency
    if row.isl is None or not batch:
        return {}
    tokens = batch + row.isl + DEPLOYMENT_EXTRA_TOKENS
    if engine == "vllm":
        return {"sets": {"max_num_batched_tokens": str(tokens), "max_num_seqs": str(batch)}}
    if engine == "trtllm":
        block = TRTLLM_TOKENS_PER_BLOCK
        return {
            "max_batched_tokens": -(-tokens // block) * block,
            "max_running": batch,
            "memory_utilization": TRTLLM_TEMPLATE_FREE_FRACTION,
        }
    if engine == "sglang":
        return {"sets": {"enable_mixed_chunk": "true", "max_running_requests": str(batch)}}
    return {}


def deployed(row: SiliconRow, engine: str) -> bool:
    """Whether ``row`` of the aiconfigurator collection ran the generator's deployment:
    every vLLM and TensorRT-LLM row (``DEPLOYED_ENGINES``), SGLang's from
    ``SGLANG_GENERATED_FROM`` on. The SGLang rule is by the collection's template
    releases, so it reaches only that collection's rows (the ``AIPERF`` harness): an
    InferenceMAX SGLang row of 0.5.8-0.5.10 ran InferenceMAX's script, not the generator's
    mixed chunks, under every deployment kind."""
    if engine in DEPLOYED_ENGINES:
        return True
    return (
        engine == "sglang"
        and harness_of(row) is AIPERF
        and release_at_least(row.backend_version, SGLANG_GENERATED_FROM)
    )
