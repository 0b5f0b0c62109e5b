"""What of the measured set the twin can express (twin.validate.coverage), on a small CSV
in silicon_sample.csv's format (tests/data/silicon_coverage_small.csv)."""

from __future__ import annotations

from pathlib import Path

from twin.presets import PRESETS
from twin.validate.coverage import PRESET_OF_MODEL_PATH, REASON_PP, coverage, expressible
from twin.validate.silicon import read_rows

CSV = Path(__file__).parent / "data" / "silicon_coverage_small.csv"


def test_every_mapped_model_path_names_a_preset() -> None:
    assert set(PRESET_OF_MODEL_PATH.values()) <= set(PRESETS)


def test_rows_are_expressed_or_counted_under_their_reason() -> None:
    rows = {r.id: r for r in read_rows(CSV)}
    assert expressible(rows["cov1"]) == ("deepseek-r1", None)  # DP attention 8 + EP 8
    assert expressible(rows["cov3"]) == ("kimi-k2.5", None)  # 16 GPUs, EP 16
    assert expressible(rows["cov7"]) == ("llama-3.1-70b", None)  # dense: MoE columns ignored
    assert expressible(rows["cov6"]) == ("llama-3.1-70b", REASON_PP)
    out = coverage(rows.values())
    # vLLM at tp 1 with MoE TP 2: two data-parallel ranks (silicon.vllm_data_parallel)
    assert expressible(rows["cov5"]) == ("qwen3-235b-a22b", None)
    assert rows["cov5"].attention_dp == 2
    assert out["aggregated_rows"] == 8 and out["expressible"] == 5  # cov1, 2, 3, 5, 7
    assert out["not_expressible"] == {
        "--tp 72 = 72 does not divide the 128 attention heads of model 'deepseek-r1'": 1,
        REASON_PP: 1,
        "no preset for nvidia/DeepSeek-V3.1-NVFP4": 1,
    }
    assert out["by_model"]["deepseek-r1"] == {"rows": 3, "expressible": 2}
