"""vLLM rows whose MoE columns span more GPUs than their attention: data-parallel ranks
(``twin.validate.silicon.vllm_data_parallel``; issues 31, 34)."""

from __future__ import annotations

import dataclasses

from silicon_rows import planned, silicon_row

from twin.validate.silicon.inferencemax import inferencemax_layout
from twin.validate.silicon.predict import predict
from twin.validate.silicon.rows import SiliconRow
from twin.validate.silicon.vllm_data_parallel import vllm_data_parallel_layout

# The gap-analysis collection's Qwen3-235B-A22B-FP8 H200 vLLM 0.12.0 file, as it writes a
# row's layout (``tp_size 1, moe_tp_size 2``: no attention-DP column).
SOURCE = (
    "source_file=/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/"
    "Qwen_Qwen3-235B-A22B-FP8.csv; silicon_concurrency=8"
)
QWEN3 = silicon_row(
    source=SOURCE,
    backend_version="0.12.0",
    model_path="Qwen/Qwen3-235B-A22B-FP8",
    precision="fp8",
    gemm_quant_mode="fp8",
    moe_quant_mode="fp8",
    isl=1000,
    osl=100,
    concurrency=8,
    batch_size=8,
    tp=1,
    pp=1,
    moe_tp=2,
    moe_ep=1,
)


def test_moe_columns_over_the_attention_gpus_are_data_parallel_ranks() -> None:
    two = vllm_data_parallel_layout(QWEN3)
    assert (two.tp, two.attention_dp, two.moe_tp, two.moe_ep) == (1, 2, 2, 1)
    assert two.csv_layout == "tp_size 1, attention_dp_size None, moe_tp_size 2, moe_ep_size 1"
    four = vllm_data_parallel_layout(dataclasses.replace(QWEN3, tp=2, moe_tp=4))
    assert (four.tp, four.attention_dp) == (2, 2)
    ep = vllm_data_parallel_layout(dataclasses.replace(QWEN3, moe_tp=1, moe_ep=4))
    assert ep.attention_dp == 4


def test_rows_whose_columns_agree_or_name_their_dp_are_unchanged() -> None:
    same = [
        dataclasses.replace(QWEN3, tp=2),  # moe_tp 2 over tp 2: tensor parallel
        dataclasses.replace(QWEN3, tp=2, moe_tp=1, moe_ep=2),  # expert parallel
        dataclasses.replace(QWEN3, attention_dp=2),  # says its DP
        dataclasses.replace(QWEN3, tp=2, moe_tp=3),  # 3 is no multiple of 2
        dataclasses.replace(QWEN3, backend="sglang"),  # SGLang folds MoE TP into its tp
        dataclasses.replace(QWEN3, mode="disagg"),
        dataclasses.replace(QWEN3, tp=8, moe_tp=1, moe_ep=1),  # a dense row's empty MoE
    ]
    for row in same:
        assert vllm_data_parallel_layout(row) is row


def test_the_tp_1_rows_fit_as_two_ranks() -> None:
    # Read as one GPU, the 235 GB of fp8 weights did not fit an H200 (the twin refused
    # these 13 rows): as 2 ranks over 2 GPUs the experts split and the row is planned.
    plan = planned(vllm_data_parallel_layout(QWEN3))
    assert (plan.tp, plan.dp, plan.ep, plan.concurrency) == (2, 2, 1, 8)
    out = predict(dataclasses.replace(plan, requests=16))
    assert "twin_error" not in out, out
    assert out["twin_ttft_ms"] > 0 and out["twin_tpot_ms"] > 0
    refused = predict(dataclasses.replace(planned(QWEN3), requests=16))  # as written: 1 GPU
    assert "no memory left" in refused["twin_error"]


# InferenceMAX's MiniMax-M2.5 fp4 B300 vLLM rows as the db-dump writes a ``{ tp: 2, ep: 2 }``
# run, with or without dp-attn (``tp_size 2, attention_dp_size 2, moe_ep_size 4``).
MINIMAX_DP = silicon_row(
    id="minimaxm2_5_b300_vllm_fp4_agg_1024x1024_c64_cfg727",
    source="db-dump/2026-04-27; config_id=727; silicon_concurrency=64; "
    "measured=2026-04-21T00:00:00.000Z; workflow_run_id=798",
    backend_version="0.19.0",
    model_path="MiniMaxAI/MiniMax-M2.5",
    system="b300_sxm",
    isl=128,
    osl=16,
    concurrency=64,
    batch_size=32,
    tp=2,
    pp=1,
    attention_dp=2,
    moe_tp=1,
    moe_ep=4,
)


def test_a_minimax_fp4_dp_attention_configuration_ran_vllm_data_parallel() -> None:
    dp = inferencemax_layout(MINIMAX_DP)
    assert (dp.tp, dp.attention_dp, dp.moe_tp, dp.moe_ep, dp.batch_size) == (1, 2, 1, 2, 32)
    assert dp.csv_layout == "tp_size 2, attention_dp_size 2, moe_tp_size 1, moe_ep_size 4"
    # the same columns under the EP-only configuration (726), the fp8 B300 script that
    # has no data-parallel branch (827), or another model: one TP 2 engine
    for other in (
        dataclasses.replace(MINIMAX_DP, source=MINIMAX_DP.source.replace("727", "726")),
        dataclasses.replace(MINIMAX_DP, source=MINIMAX_DP.source.replace("727", "827")),
        dataclasses.replace(MINIMAX_DP, model_path="openai/gpt-oss-120b"),
    ):
        tp = inferencemax_layout(other)
        assert (tp.tp, tp.attention_dp, tp.moe_tp, tp.moe_ep) == (2, 1, 1, 2)


def test_each_data_parallel_rank_holds_its_own_sequences() -> None:
    # vLLM's max_num_seqs is an engine's: two ranks of 8 run 16 of the 64 clients at once,
    # one TP 2 engine 8 (the 2,048-client row of config 727 decodes ~1,940 at once).
    def peak(row: SiliconRow) -> int:
        plan = planned(inferencemax_layout(row))
        sets = {**(plan.deployment["sets"] or {}), "max_num_seqs": "8"}
        out = predict(dataclasses.replace(plan, requests=48, deployment={"sets": sets}))
        assert "twin_error" not in out, out
        return int(out["twin_peak_running"])

    assert peak(MINIMAX_DP) == 16
    assert (
        peak(dataclasses.replace(MINIMAX_DP, source=MINIMAX_DP.source.replace("727", "726"))) == 8
    )
