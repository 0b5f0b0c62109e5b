"""A table filed under one engine whose rows are another engine's prices no release of the
first (issue 31, helper q235): aiconfigurator-core 0.12.0 files TensorRT-LLM 1.2.0rc5's
custom all-reduce rows as SGLang 0.5.6.post2's on H100 and H200 (and TensorRT-LLM rows as
SGLang 0.5.9's on L40S). The reader passes such a table over, so the release falls back
to the engine's own tables (``twin.calibration.aic_tables.foreign_table``), and the
shipped SGLang profiles keep no fit of it.

The reader tests use the test tables under ``tests/data/aic``; the known answers read the
installed package where it is present and the shipped profiles' fits elsewhere.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.calibration.aic_moe import moe_rows
from twin.calibration.aic_tables import foreign_table, system_dir
from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.presets import resolve_model

DATA = Path(__file__).parent / "data" / "aic" / "systems" / "data"
MOE = Path("h100_sxm") / "moe" / "vllm"


def _relabelled(root: Path, version: str, framework: str) -> Path:
    """The test MoE table copied as vLLM ``version``'s with every row's framework set to
    ``framework`` and half the latencies (so which table was read shows)."""
    table = pq.read_table(root / MOE / "0.24.0" / "moe_perf.parquet")
    half = pa.compute.multiply(table.column("latency"), 0.5)
    table = table.set_column(table.schema.get_field_index("latency"), "latency", half)
    label = pa.array([framework] * table.num_rows)
    table = table.set_column(table.schema.get_field_index("framework"), "framework", label)
    (root / MOE / version).mkdir()
    path = root / MOE / version / "moe_perf.parquet"
    pq.write_table(table, path)
    return path


def test_a_table_of_another_engines_rows_prices_no_release(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shutil.copytree(DATA, root)
    foreign = _relabelled(root, "0.19.0", "TensorRT-LLM")
    own = root / MOE / "0.24.0" / "moe_perf.parquet"
    assert foreign_table(foreign, "vllm") and not foreign_table(own, "vllm")
    assert not foreign_table(foreign, "trtllm")
    (new,) = moe_rows(system_dir("h100", root), "vllm")
    (old,) = moe_rows(system_dir("h100", root), "vllm", "0.19.0")
    # 0.19.0's table is TensorRT-LLM's: the 0.19.0 run reads vLLM's own (0.24.0, the oldest)
    assert old.version == "0.24.0" == new.version
    assert [r["median_s"] for r in old.rows] == [r["median_s"] for r in new.rows]


def test_the_engines_own_label_in_any_spelling_is_its_own(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shutil.copytree(DATA, root)
    path = _relabelled(root, "0.19.0", "vLLM")
    assert not foreign_table(path, "vllm")
    assert foreign_table(path, "trtllm")
    (old,) = moe_rows(system_dir("h100", root), "vllm", "0.19.0")
    assert old.version == "0.19.0"  # its own table, half the latencies, is read


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_sglang_0_5_6_post2_all_reduce_is_priced_from_sglangs_tables(gpu: str) -> None:
    prof = load_profile(gpu, "sglang")
    for n in (2, 4, 8):
        fits = prof.table_releases[f"allreduce_{n}gpu"].fits
        assert "0.5.6.post2" not in fits and "0.5.9" in fits
    picks = prof.at_release("0.5.6.post2").table_picks("0.5.6.post2")
    assert {picks[f"allreduce_{n}gpu"] for n in (2, 4, 8)} == {"0.5.9"}


def test_qwen3_235b_h200_sglang_tp2_all_reduce_reads_sglangs_graph_kernel() -> None:
    """A decode all-reduce of 2 tokens at tp 2 under SGLang 0.5.6.post2: SGLang's graph
    custom all-reduce (0.5.9 table: 4.3-4.5 us at 4-16 KiB), not TensorRT-LLM 1.2.0rc5's
    3.0-3.4 us."""
    prof = load_profile("h200", "sglang").at_release("0.5.6.post2")
    cost = CostModel(resolve_model("qwen3-235b-a22b"), prof, 2)
    assert 4.1e-6 < cost.allreduce_time(2) < 4.8e-6


@pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is None,
    reason="needs aiconfigurator-core (the aic extra)",
)
def test_the_packages_foreign_tables() -> None:
    from twin.calibration.aic_tables import data_root

    comm = data_root() / "h200_sxm" / "comm" / "sglang"
    table = "custom_allreduce_perf.parquet"
    assert foreign_table(comm / "0.5.6.post2" / table, "sglang")
    assert not foreign_table(comm / "0.5.9" / table, "sglang")
    assert not foreign_table(comm / "0.5.14" / table, "sglang")
