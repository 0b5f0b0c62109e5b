"""InferenceMAX's vLLM servers at high concurrency: the MiniMax-M2.5 scripts' own limits
(vLLM's default ``max_num_seqs``), and the H100 gpt-oss rows whose client ran at 512 clients
whatever the server's ``CONC`` (``twin.validate.silicon.harness``)."""

from __future__ import annotations

import dataclasses

from silicon_rows import silicon_row

from twin.validate import silicon as sil

DUMP = "db-dump/2026-04-27; config_id=691; silicon_concurrency=256; measured="


def _minimax(day: str, **fields: object) -> sil.SiliconRow:
    base = {
        "source": f"{DUMP}{day}T00:00:00.000Z; workflow_run_id=799",
        "model_path": "MiniMaxAI/MiniMax-M2.5",
        "system": "b200_sxm",
        "backend_version": "0.19.0",
        "precision": "fp8",
        "isl": 1024,
        "osl": 1024,
        "concurrency": 256,
    }
    base.update(fields)
    return silicon_row(**base)


def test_minimax_runs_at_vllms_default_sequence_cap():
    row = _minimax("2026-04-22")
    assert sil.deployment(row, "vllm") == {
        "sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "1024"}
    }
    assert sil.vllm_graph_tokens(row, sil.deployment(row, "vllm")) == 512
    # other models keep the Llama scripts' limits
    llama = dataclasses.replace(row, model_path="meta-llama/Llama-3.1-70B-Instruct")
    assert sil.inferencemax_vllm(llama) == sil.INFERENCEMAX_VLLM


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
