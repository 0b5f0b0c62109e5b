"""vLLM rows whose MoE columns span more GPUs than their attention: data-parallel ranks
(``twin.validate.silicon.vllm_data_parallel``; issues 31, 34)."""

from __future__ import annotations

import dataclasses

from silicon_rows import planned, silicon_row

from twin.validate.silicon.predict import predict
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
