"""TensorRT-LLM 1.2.0rc5's Hopper custom all-reduce tables time, at decode sizes, the
two-shot kernel the un-fused op picks, where the decode layers' all-reduce (fused with the
next RMSNorm) runs one-shot (issue 31, helper q235h38;
``twin.calibration.aic_collectives.UNFUSED_TWOSHOT_TABLES``). They price no release of a
fused layout: the older releases (the H100 rows' 1.0.0rc3, H200's 1.1.0rc2.post2) read the
oldest other table, 1.3.0rc10, and the shipped H100 / H200 TensorRT-LLM profiles keep no
1.2.0rc5 all-reduce fit under ``fits`` (an un-fused layout reads them from
``unfused_fits``: ``tests/test_allreduce_fusion_tables.py``, helper trtar39). Blackwell's
1.2.0rc5 table (one-shot there) is read as before.

The reader tests read the installed package where it is present; the price tests read the
shipped profiles.
"""

from __future__ import annotations

import importlib.util

import pytest

from twin.calibration.aic_collectives import UNFUSED_TWOSHOT_TABLES
from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.presets import resolve_model

needs_aic = pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is None,
    reason="needs aiconfigurator-core (the aic extra)",
)


@needs_aic
@pytest.mark.parametrize(
    ("gpu", "release", "table"),
    [
        ("h100", "1.0.0rc3", "1.3.0rc10"),  # older than every table: the oldest read
        ("h200", "1.1.0rc2.post2", "1.3.0rc10"),
        ("h100", "1.2.0rc6", "1.3.0rc10"),  # 1.2.0rc5 would be the newest at or before it
        ("h100", "1.3.0rc10", "1.3.0rc10"),
        ("h100", None, "1.3.0rc20"),
        ("b200", "1.2.0rc6.post2", "1.2.0rc5"),  # SM100: one-shot there, the table kept
    ],
)
def test_the_two_shot_tables_price_no_release(gpu: str, release: str | None, table: str) -> None:
    from twin.calibration.aic_collectives import custom_allreduce_dir
    from twin.calibration.aic_tables import system_dir

    chosen = custom_allreduce_dir(system_dir(gpu), "trtllm", release)
    assert chosen is not None and chosen.name == table


@needs_aic
def test_the_two_shot_points_are_the_tables_outliers() -> None:
    """The evidence, from the tables: at 4 GPUs and 32-256 Ki elements (8-64 tokens of
    4,096, the SM90 lookup table's two-shot entries for the un-fused op) 1.2.0rc5 times
    10.9-11.9 us, over twice 1.3.0rc10's and 1.3.0rc20's, and the same as those at 512 Ki."""
    import pyarrow.parquet as pq

    from twin.calibration.aic_tables import system_dir

    def lat(version: str) -> dict[int, float]:
        path = system_dir("h100") / "comm" / "trtllm" / version / "custom_allreduce_perf.parquet"
        rows = pq.read_table(path).to_pylist()
        return {r["message_size"]: r["latency"] for r in rows if r["num_gpus"] == 4}

    old, rc10, rc20 = lat("1.2.0rc5"), lat("1.3.0rc10"), lat("1.3.0rc20")
    for ki in (32, 64, 128):
        size = ki * 1024
        assert old[size] > 2.0 * max(rc10[size], rc20[size])
    assert old[16 * 1024] < 1.2 * rc20[16 * 1024]  # one-shot: alike
    assert old[512 * 1024] < 1.1 * rc20[512 * 1024]
    assert ("h100_sxm", "1.2.0rc5") in UNFUSED_TWOSHOT_TABLES
    assert ("b200_sxm", "1.2.0rc5") not in UNFUSED_TWOSHOT_TABLES


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_shipped_hopper_profiles_keep_no_two_shot_fit(gpu: str) -> None:
    prof = load_profile(gpu, "trtllm")
    for n in (2, 4, 8):
        fits = prof.table_releases[f"allreduce_{n}gpu"].fits
        assert "1.2.0rc5" not in fits and "1.3.0rc10" in fits
    assert "1.2.0rc5" in load_profile("b200", "trtllm").table_releases["allreduce_4gpu"].fits


def test_qwen3_235b_h100_tp4_decode_all_reduce_is_one_shot() -> None:
    """16 decode tokens of Qwen3-235B at tp 4 under TensorRT-LLM 1.0.0rc3 (the H100 rows'
    release): 1.3.0rc10's 4.3 us at 64 Ki elements, not 1.2.0rc5's two-shot 10.9 us."""
    prof = load_profile("h100", "trtllm").at_release("1.0.0rc3")
    assert prof.table_picks("1.0.0rc3")["allreduce_4gpu"] == "1.3.0rc10"
    cost = CostModel(resolve_model("qwen3-235b-a22b"), prof, 4)
    assert 3.8e-6 < cost.allreduce_time(16) < 5.0e-6
