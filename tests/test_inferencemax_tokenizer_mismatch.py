"""The B300 DeepSeek SGLang rows' prompts as the server tokenized them: InferenceMAX's
client under transformers 5.3.0 (image v0.5.10.post1) sent about 5x the row's prompt
tokens until its repair reached Hugging Face repo ids (#1381); the twin's workload holds
what the server prefilled (``inferencemax_sglang.inferencemax_prompt_scale``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from silicon_rows import planned, silicon_row

from twin.validate import silicon as sil

_SOURCE = (
    "db-dump/2026-04-27; config_id=717; silicon_concurrency=16; "
    "measured=2026-04-17T00:00:00.000Z; workflow_run_id=748; "
    "lmsysorg/sglang:v0.5.10.post1-cu130"
)


def _b300_row() -> sil.SiliconRow:
    return silicon_row(
        source=_SOURCE,
        backend="sglang",
        backend_version="0.5.10.post1",
        model_path="deepseek-ai/DeepSeek-V3",
        system="b300_sxm",
        isl=8192,
        osl=1024,
        concurrency=16,
        tp=4,
    )


def test_b300_deepseek_sglang_rows_before_the_client_fix_send_five_times_the_prompt() -> None:
    row = _b300_row()
    assert sil.inferencemax_prompt_scale(row) == 5.0
    # the B200 0.5.9 image pins transformers 4.57.1: client and server agree
    assert (
        sil.inferencemax_prompt_scale(replace(row, system="b200_sxm", backend_version="0.5.9"))
        == 1.0
    )
    # Qwen3.5's tokenizer is not the LlamaTokenizerFast transformers 5 rebuilds
    assert sil.inferencemax_prompt_scale(replace(row, model_path="Qwen/Qwen3.5-397B-A17B")) == 1.0
    # GLM-5's scripts install transformers 5.2.0 on the same client, but its tokenizer loads
    # as the generic TokenizersBackend (5.3.0 ``tokenization_auto``), not the rebuilt Llama one
    glm5 = replace(row, model_path="zai-org/GLM-5-FP8", backend_version="nightly-dev")
    assert sil.inferencemax_prompt_scale(glm5) == 1.0
    # measured after #1381 (2026-05-15): the client's tokenizer repaired
    fixed = replace(row, source=_SOURCE.replace("2026-04-17", "2026-05-20"))
    assert sil.inferencemax_prompt_scale(fixed) == 1.0
    # aiconfigurator's aiperf rows ran another client
    assert sil.inferencemax_prompt_scale(replace(row, source="measured=2026-04-17")) == 1.0


def test_the_workload_holds_the_servers_prompt_tokens(tmp_path: Path) -> None:
    path = sil.write_workload(tmp_path / "w.parquet", 64, 8, 3, seed=1, prompt_scale=5.0)
    table = pq.read_table(path).to_pydict()
    assert {len(t) for t in table["input_tokens"]} == {320}
    assert set(table["output_len"]) == {8}


def test_a_planned_b300_deepseek_row_carries_the_scale() -> None:
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    row = replace(
        _b300_row(), precision="fp4", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", moe_ep=4
    )
    assert planned(row).prompt_scale == 5.0
    b200 = planned(row, system="b200_sxm", backend_version="0.5.9")
    assert b200.prompt_scale == 1.0
