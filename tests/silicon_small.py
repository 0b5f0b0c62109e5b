"""The hand-made sample of measured rows (``tests/data/silicon_sample_small.csv``) the
``test_silicon*`` files read: it has the package CSV's exact columns, three expressible
rows (vLLM, SGLang, TensorRT-LLM) and one row for each reason a row is not expressed;
``tests/data/silicon_configs`` holds tiny configs named as the package's
``model_configs``. What each row is expected to become, and rows built from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from twin.validate import silicon as sil

DATA = Path(__file__).parent / "data"
SMALL = DATA / "silicon_sample_small.csv"
CONFIGS = DATA / "silicon_configs"

REASONS = {
    "tiny_h100_vllm_disagg_64x8_c2": sil.REASON_DISAGG,
    "tiny_h100_vllm_agg_64x8_c2_pp2": sil.REASON_PP,
    "tiny_h100_sglang_agg_64x8_c2_ep4": sil.REASON_EP,
    "tiny_h100_vllm_agg_64x8_c2_int4": "precision int4 not priced",
    "tiny_h100_trtllm_agg_64x8_c2_nvfp4": (
        "precision nvfp4 not priced by profile h100-trtllm (it prices bf16, fp8, fp8-block; "
        "H100 SXM5 has no FP4 tensor cores)"
    ),
    "tiny_h100_vllm_agg_64x8_noc": sil.REASON_NO_CONCURRENCY,
    "tiny_a100pcie_vllm_agg_64x8_c2": "no twin profile for system a100_pcie",
    "tiny_h100_vllm_agg_64x8_c2_nocfg": "no cached model config (<org>--<name>_config.json)",
    # An MLA config without its latent's keys (twin.hf_moe reads DeepSeek-V3's).
    "tiny_h100_sglang_agg_64x8_c2_mla": "model config not importable (model_type deepseek_v3)",
    "tiny_h100_trtllm_agg_64x8_c2_tp16": (
        "tp_size 16: no measured all-reduce at 16 GPUs in the h100 profile"
    ),
    "tiny_h100_vllm_agg_64x8_c2_tp4_odd": "tp_size 4 does not divide the 6 attention heads",
    "tiny_h100_vllm_agg_64x8_c2_nottft": sil.REASON_NO_MEASUREMENT,
}
EXPRESSED = {
    # id: (gpu, engine, tp, concurrency, model config used)
    "tiny_h100_vllm_agg_64x8_c2_tp1": ("h100", "vllm", 1, 2, "tiny/Tiny-Llama"),
    "tiny_h200_sglang_agg_64x8_c3_tp2": ("h200", "sglang", 2, 3, "tiny/Tiny-Llama"),
    "tiny_b200_trtllm_agg_128x16_c4_tp1": ("b200", "trtllm", 1, 4, "tiny/Tiny-Llama"),
    "tiny_h100_vllm_agg_64x8_c2_fp8": ("h100", "vllm", 1, 2, "tiny/Tiny-Llama"),
    "tiny_h100_vllm_agg_64x8_c2_quantckpt": ("h100", "vllm", 1, 2, "tiny/Tiny-Llama-FP8"),
    "tiny_b200_trtllm_agg_64x8_c2_nvfp4": ("b200", "trtllm", 1, 2, "tiny/Tiny-Llama"),
    "tiny_b200_vllm_agg_64x8_c2_suffix": ("b200", "vllm", 1, 2, "tiny/Tiny-Llama"),
    # attention DP: tp_size 2 x attention_dp_size 2 = 4 GPUs, 2 attention ranks
    "tiny_h100_sglang_agg_64x8_c2_dp2": ("h100", "sglang", 4, 2, "tiny/Tiny-Llama"),
}


def _rows() -> dict[str, sil.SiliconRow]:
    return {r.id: r for r in sil.read_rows(SMALL)}


def _layout(row: sil.SiliconRow) -> tuple[int | None, ...]:
    return (row.tp, row.attention_dp, row.moe_tp, row.moe_ep)


def _inferencemax_r1(**fields: Any) -> sil.SiliconRow:
    """A B200 DeepSeek-R1 row of InferenceMAX's 2026-03-25 collection at 4 clients."""
    return replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        source="source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4",
        model_path="deepseek-ai/DeepSeek-R1",
        system="b200_sxm",
        concurrency=4,
        **fields,
    )


def predict_records(plan: sil.RowPlan, monkeypatch: Any) -> tuple[dict[str, Any], list[Any]]:
    """``sil.predict(plan)`` and every request record its run wrote (measured and warm-up),
    seen through a spy on ``Run.simulate``'s ``on_record`` (``monkeypatch``: pytest's; the spy
    is undone after the call, the caller's own patches kept)."""
    from twin.engine import run as engine_run

    seen: list[Any] = []
    original = engine_run.Run.simulate

    def spy(self, *args, on_record=None, **kwargs):  # type: ignore[no-untyped-def]
        def both(rec):  # type: ignore[no-untyped-def]
            seen.append(rec)
            on_record(rec)

        return original(self, *args, on_record=both, **kwargs)

    with monkeypatch.context() as patch:  # the spy only, for this call
        patch.setattr(engine_run.Run, "simulate", spy)
        result = sil.predict(plan)
    return result, seen
