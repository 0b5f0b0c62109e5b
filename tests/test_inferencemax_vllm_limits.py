"""InferenceMAX's vLLM servers at high concurrency: the MiniMax-M2.5 scripts' own limits
(vLLM's default ``max_num_seqs``, the prompt-sized budget and capture size from the day
each script set them), and the H100 gpt-oss rows whose client ran at 512 clients
whatever the server's ``CONC`` (``twin.validate.silicon.inferencemax_vllm``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import MINIMAX_DUMP, minimax_row, planned, silicon_row

from twin.validate import silicon as sil

DUMP = MINIMAX_DUMP.format(256)


def _minimax(day: str, **fields: object) -> sil.SiliconRow:
    return minimax_row(day, 256, **{"backend_version": "0.19.0", **fields})


def test_minimax_runs_at_vllms_default_sequence_cap_and_the_scripts_budget():
    after = _minimax("2026-04-22")
    assert sil.inferencemax_minimax_flags(after)
    assert sil.deployment(after, "vllm") == {
        "sets": {"max_num_batched_tokens": "2048", "max_num_seqs": "1024"}
    }
    long_prompt = dataclasses.replace(after, isl=8192)
    assert sil.inferencemax_vllm(long_prompt)["max_num_batched_tokens"] == "16384"
    # before the B200 fp8 script set them (d172646bd, 2026-04-02): vLLM's defaults
    before = _minimax("2026-03-30")
    assert not sil.inferencemax_minimax_flags(before)
    assert sil.inferencemax_vllm(before) == {
        "max_num_batched_tokens": "8192",
        "max_num_seqs": "1024",
    }
    # B200 fp4 set them later (a9c199207, 2026-04-07); B300 had them from its first script
    assert not sil.inferencemax_minimax_flags(_minimax("2026-04-03", precision="fp4"))
    assert sil.inferencemax_minimax_flags(_minimax("2026-04-08", precision="fp4"))
    assert sil.inferencemax_minimax_flags(_minimax("2026-04-17", system="b300_sxm"))
    # a row without a measured day, or another system, keeps the defaults
    assert not sil.inferencemax_minimax_flags(dataclasses.replace(after, source=DUMP))
    assert not sil.inferencemax_minimax_flags(_minimax("2026-04-22", system="h200_sxm"))
    # other models keep the Llama scripts' limits
    llama = dataclasses.replace(after, model_path="meta-llama/Llama-3.1-70B-Instruct")
    assert sil.inferencemax_vllm(llama) == sil.INFERENCEMAX_VLLM


def test_minimax_capture_size_is_the_scripts_2048_from_its_day():
    after = _minimax("2026-04-22")
    limits = sil.deployment(after, "vllm")
    assert sil.vllm_graph_tokens(after, limits) == 2048  # the budget 2048 caps it too
    long_prompt = dataclasses.replace(after, isl=8192)
    assert sil.vllm_graph_tokens(long_prompt, sil.deployment(long_prompt, "vllm")) == 2048
    before = _minimax("2026-03-30")
    assert sil.vllm_graph_tokens(before, sil.deployment(before, "vllm")) == 512
    # under the engine's defaults the script's size is not used
    assert sil.vllm_graph_tokens(after, {}, "defaults") == 512


def test_kimi_fp4_b200_runs_its_scripts_budget_and_capture_size_from_its_day():
    """``kimik2.5_fp4_b200.sh`` from 6c3acebfa (2026-04-20): ``--max-num-batched-tokens
    $((ISL * 2))`` and ``--max-cudagraph-capture-size 2048``; its ``--max-num-seqs $CONC``
    leaves the Llama scripts' cap; the int4 B200 and fp4 B300 scripts pass neither."""
    after = _minimax("2026-04-20", model_path="nvidia/Kimi-K2.5-NVFP4", precision="fp4", isl=1024)
    assert sil.inferencemax_prompt_budget_flags(after)
    assert not sil.inferencemax_minimax_flags(after)
    limits = sil.deployment(after, "vllm")
    assert limits == {"sets": {"max_num_batched_tokens": "2048", "max_num_seqs": "512"}}
    assert sil.vllm_graph_tokens(after, limits) == 2048  # a 1k prefill step replays a graph
    long_prompt = dataclasses.replace(after, isl=8192)
    assert sil.inferencemax_vllm(long_prompt)["max_num_batched_tokens"] == "16384"
    assert sil.vllm_graph_tokens(long_prompt, sil.deployment(long_prompt, "vllm")) == 2048
    for other in (
        dataclasses.replace(after, source=after.source.replace("2026-04-20", "2026-03-27")),
        dataclasses.replace(after, model_path="moonshotai/Kimi-K2.5", precision="int4"),
        dataclasses.replace(after, system="b300_sxm"),
    ):
        assert not sil.inferencemax_prompt_budget_flags(other)
        assert sil.inferencemax_vllm(other) == sil.INFERENCEMAX_VLLM
        assert sil.vllm_graph_tokens(other, sil.deployment(other, "vllm")) == 512
    # MiniMax-M2.5's scripts are among them
    assert sil.inferencemax_prompt_budget_flags(_minimax("2026-04-22"))


def test_h100_gpt_oss_rows_of_the_512_client_script_are_not_expressed():
    src = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=512; measured="
    row = silicon_row(
        source=src + "2025-12-08T00:00:00.000Z; wip=False; image=vllm/vllm-openai:v0.11.2",
        system="h100_sxm",
        backend_version="0.11.2",
        isl=1024,
        osl=1024,
        concurrency=512,
        tp=4,
        ttft_ms=20000.0,
        tpot_ms=4.7,
    )
    assert sil.inferencemax_client_capped(row)
    assert sil.plan_row(row) == sil.REASON_INFERENCEMAX_CLIENT_CAP
    unnamed = dataclasses.replace(row, source=src + "2025-12-05T00:00:00.000Z; wip=False")
    assert sil.inferencemax_client_capped(unnamed)
    # before the hard-coded client (56c612a91, 2025-11-14) and after its fix: expressed
    for day in ("2025-11-02", "2026-03-27"):
        other = dataclasses.replace(row, source=f"{src}{day}T00:00:00.000Z; wip=False")
        assert not sil.inferencemax_client_capped(other)
    assert not sil.inferencemax_client_capped(dataclasses.replace(row, system="h200_sxm"))
    aiperf = dataclasses.replace(row, source="x; measured=2025-12-05")
    assert not sil.inferencemax_client_capped(aiperf)


def test_a_planned_minimax_row_runs_with_the_scripts_limits():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    plan = planned(_minimax("2026-04-22", gemm_quant_mode="fp8", moe_quant_mode="fp8", tp=4))
    sets = plan.deployment["sets"]
    assert (sets["max_num_batched_tokens"], sets["max_num_seqs"]) == ("2048", "1024")
    assert plan.deployment["eager_graph_tokens"] == 2048
