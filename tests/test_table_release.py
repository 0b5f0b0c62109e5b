"""Kernel tables from the engine release being modelled (issue 31): the one rule
(``twin.costmodel.table_release``), the reader choosing a release's table and falling
back where the release lacks one, the profile's per-release fits, the run carrying the
release in its configuration and summary, and a known answer from NVIDIA's tables.

The tables under ``tests/data/aic`` (made from the twin's own models at known parameters)
stand in for the package; the known-answer test reads ``aiconfigurator-core`` 0.12.0
where it is installed, and the shipped profile's fits (the twin's own numbers) elsewhere.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.calibration.aic_families import read_families
from twin.calibration.aic_import import fit_family, release_fits
from twin.calibration.aic_moe import moe_rows
from twin.calibration.aic_tables import system_dir
from twin.costmodel import latency as lat
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile
from twin.costmodel.table_release import (
    newest_first,
    pick_version,
    release_at_least,
    version_key,
)
from twin.errors import TwinError
from twin.precision import WEIGHT_FORMATS

DATA = Path(__file__).parent / "data" / "aic" / "systems" / "data"
MOE = Path("h100_sxm") / "moe" / "vllm"


def test_versions_order_as_pep_440() -> None:
    assert newest_first(["1.3.0rc20", "1.3.0", "1.2.0rc5", "1.3.0rc10", "nightly"]) == [
        "1.3.0",
        "1.3.0rc20",
        "1.3.0rc10",
        "1.2.0rc5",
        "nightly",
    ]
    assert version_key("0.5.10.post1") > version_key("0.5.10")  # type: ignore[operator]
    assert version_key("0.5.10") > version_key("0.5.9")  # type: ignore[operator]
    assert version_key("0.24.0") == version_key("0.24")
    assert version_key("nightly-dev") is None and version_key("") is None


def test_a_release_is_at_least_another_in_pep_440_order() -> None:
    assert release_at_least("0.14.0", "0.14.0") and release_at_least("0.15.1", "0.14.0")
    assert not release_at_least("0.14.0rc1", "0.14.0")  # a pre-release comes before it
    assert release_at_least("0.5.10.post1", "0.5.10") and not release_at_least("0.5.9", "0.5.10")
    # not a version number: never at least anything
    assert not release_at_least("nightly-dev", "0.1") and not release_at_least(None, "0.1")


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (None, "0.24.0"),  # a plain run: the newest, as before
        ("0.19.0", "0.19.0"),  # the release's own table
        ("0.22.0", "0.19.0"),  # none of its own: the nearest earlier (aiconfigurator's fill)
        ("0.33.0", "0.24.0"),  # newer than every collection: the newest
        ("0.12.0", "0.19.0"),  # older than every collection: the oldest
        ("nightly-dev", "0.24.0"),  # not a version number: the newest
    ],
)
def test_pick_version_rule(release: str | None, expected: str) -> None:
    assert pick_version(["0.24.0", "0.19.0"], release) == expected
    assert pick_version([], release) is None


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test tables plus an "0.19.0" MoE table at half the 0.24.0 latencies; no other
    table has a 0.19.0 collection."""
    root = tmp_path_factory.mktemp("aic") / "data"
    shutil.copytree(DATA, root)
    table = pq.read_table(root / MOE / "0.24.0" / "moe_perf.parquet")
    half = pa.compute.multiply(table.column("latency"), 0.5)
    older = table.set_column(table.schema.get_field_index("latency"), "latency", half)
    (root / MOE / "0.19.0").mkdir()
    pq.write_table(older, root / MOE / "0.19.0" / "moe_perf.parquet")
    return root


def test_reader_takes_the_releases_table(two_releases: Path) -> None:
    system = system_dir("h100", two_releases)
    (new,) = moe_rows(system, "vllm")
    (old,) = moe_rows(system, "vllm", "0.19.0")
    (mid,) = moe_rows(system, "vllm", "0.22.0")
    assert (new.version, old.version, mid.version) == ("0.24.0", "0.19.0", "0.19.0")
    assert [r["median_s"] for r in old.rows] == pytest.approx(
        [0.5 * r["median_s"] for r in new.rows]
    )


def test_a_release_without_a_table_falls_back(two_releases: Path) -> None:
    # GEMM and attention were collected at 0.24.0 only: a 0.19.0 run reads them there
    # (older than every collection: the oldest one), its MoE from its own table.
    fams = {f.kernel: f for f in read_families("h100", "vllm", two_releases, "0.19.0")}
    assert fams["gemm"].version == "0.24.0"
    assert fams["attn_decode"].version == "0.24.0"
    assert fams["moe"].version == "0.19.0"


def test_profile_keeps_each_releases_fit_and_prices_the_release(
    two_releases: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test tables come from a model without the replays' L2 (make_moe_table.py), and
    # the halved table's HBM-bound rows run above HBM's peak (flagged): with the L2 split
    # its few kept rows would be the L2-resident ones, a fit of another regime. Read
    # every byte from HBM, as the tables were made.
    monkeypatch.setattr("twin.calibration.aic_moe.system_l2", lambda system: None)
    shipped = load_profile("h100", "vllm")
    device = shipped.device
    releases = release_fits("h100", "vllm", two_releases, {"moe"}, shipped.peaks, device)
    assert set(releases) == {"moe"}  # every other family reads one table at any release
    rel = releases["moe"]
    assert rel.default == "0.24.0" and set(rel.fits) == {"0.19.0"}
    assert "0.19.0" in rel.fits["0.19.0"].provenance["label"]
    (fam,) = moe_rows(system_dir("h100", two_releases), "vllm")
    newest = fit_family(fam, shipped.peaks, device)
    assert newest is not None
    prof = dataclasses.replace(
        shipped, kernels={**shipped.kernels, "moe": newest}, table_releases=releases
    )
    # JSON round trip keeps them; a profile without variants writes no key (old bytes)
    again = Profile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert again.table_releases["moe"].fits["0.19.0"].params == rel.fits["0.19.0"].params
    assert "table_releases" not in dataclasses.replace(prof, table_releases={}).to_dict()
    # priced at 0.19.0: about half the newest table's time, as the tables say
    row = fam.rows[len(fam.rows) // 2]
    feats = (
        row["flops"],
        row["bytes"],
        {
            k: row[k]
            for k in ("weight_elems", "routed_elems", "tile_bytes", "l2_bytes", "active_experts")
        },
    )
    now = lat.predict("moe", prof.kernels["moe"].params, prof.peaks, *feats)
    old = prof.at_release("0.19.0")
    then = lat.predict("moe", old.kernels["moe"].params, prof.peaks, *feats)
    assert then == pytest.approx(0.5 * now, rel=0.15)
    assert old.table_picks("0.19.0") == {"moe": "0.19.0"}
    assert prof.at_release("0.24.0").kernels["moe"] is prof.kernels["moe"]
    assert prof.at_release(None) is prof
    # a fit for a family the profile does not have is refused on load
    bad = prof.to_dict()
    bad["table_releases"]["gemm_nvfp4"] = bad["table_releases"].pop("moe")
    with pytest.raises(TwinError, match=r"table_releases\.gemm_nvfp4"):
        Profile.from_dict(bad)


def test_minimax_h200_vllm_019_moe_prices_near_its_table() -> None:
    """MiniMax-M2.5's expert (hidden 3,072, inter 1,536, 256 experts, top 8) in fp8 at MoE
    TP 8, 32 tokens, on H200 with vLLM: vLLM 0.19.0's table timed 0.160 ms
    (``h200_sxm/moe/vllm/0.19.0/moe_perf.parquet``, ``vllm_fused_moe``); the 0.24.0 table
    has no per-tensor fp8 row at this shape, and its fit priced 0.50 ms (issue 31)."""
    shape = dict(
        num_tokens=32,
        hidden_size=3072,
        inter_size=1536,
        topk=8,
        num_experts=256,
        moe_tp_size=8,
        moe_ep_size=1,
    )
    from twin.calibration.aic_moe import moe_row

    row = moe_row(shape, WEIGHT_FORMATS["fp8"], "moe_fp8", 1.0)
    feats = (
        row["flops"],
        row["bytes"],
        {
            k: row[k]
            for k in ("weight_elems", "routed_elems", "tile_bytes", "l2_bytes", "active_experts")
        },
    )
    prof = load_profile("h200", "vllm")
    at = prof.at_release("0.19.0")
    newest = lat.predict("moe_fp8", prof.kernels["moe_fp8"].params, prof.peaks, *feats)
    then = lat.predict("moe_fp8", at.kernels["moe_fp8"].params, prof.peaks, *feats)
    assert newest > 3e-4  # the 0.24.0 fit: ~0.5 ms
    assert 1.0e-4 < then < 2.2e-4  # the 0.19.0 table's 0.16 ms, within its fit's error
    assert at.table_picks("0.19.0")["moe_fp8"] == "0.19.0"
    assert at.table_picks("0.18.0")["moe_fp8"] == "0.19.0"  # the rows' 0.18: oldest table
    if importlib.util.find_spec("aiconfigurator_core") is None:
        return
    from twin.calibration.aic_tables import _read, data_root

    table = data_root() / "h200_sxm" / "moe" / "vllm" / "0.19.0" / "moe_perf.parquet"
    (measured,) = [
        r["latency"] * 1e-3
        for r in _read(table)
        if r.get("moe_dtype") == "fp8"
        and r.get("distribution") == "balanced"
        and all(r[k] == v for k, v in shape.items())
    ]
    assert then == pytest.approx(measured, rel=0.3)


def test_a_run_carries_the_release_in_its_config_and_summary() -> None:
    from twin.engine import build_run
    from twin.precision import with_precision
    from twin.presets import resolve_model
    from twin.workloads.examples import example_path

    chat = example_path("chat")
    model = with_precision(resolve_model("minimax-m2.5"), "fp8", None)
    kw = dict(model=model, gpu="h200", cache_gb="auto", tp=8)
    plain = build_run(chat, engine="vllm", **kw)  # type: ignore[arg-type]
    assert plain.config.mode.kernel_tables == ""
    assert "kernel_tables" not in plain.profile_info  # plain runs: the newest, bytes kept
    assert "kernel_tables" not in plain.config.to_dict()
    picked = build_run(chat, engine="vllm==0.19.0", **kw)  # type: ignore[arg-type]
    assert picked.config.mode.kernel_tables == "0.19.0"
    info = picked.profile_info["kernel_tables"]
    assert info["release"] == "0.19.0" and info["families"]["moe_fp8"] == "0.19.0"
    assert "vLLM 0.19.0" in picked.profile_info["provenance"]
    assert picked.profile.kernels["moe_fp8"].params != plain.profile.kernels["moe_fp8"].params
    # a measured row's own release wins over the modelled one standing for it
    row = build_run(chat, engine="vllm==0.19.0", kernel_tables="0.24.0", **kw)  # type: ignore[arg-type]
    assert row.profile_info["kernel_tables"]["families"]["moe_fp8"] == "0.24.0"
    assert row.profile.kernels["moe_fp8"].params == plain.profile.kernels["moe_fp8"].params


def test_an_all_reduce_table_of_another_engine_is_never_read(tmp_path: Path) -> None:
    """A custom all-reduce table filed under an engine whose rows are another engine's
    (aiconfigurator-core 0.12.0's SGLang 0.5.6.post2 H100 / H200 tables are TensorRT-LLM
    1.2.0rc5's rows: ``aic_tables.foreign_table``) prices no release of that engine: a
    release older than every table of its own reads its own oldest, not the foreign one."""
    from twin.calibration.aic_collectives import allreduce_rows

    root = tmp_path / "data"
    shutil.copytree(DATA, root)
    comm = root / "h100_sxm" / "comm" / "vllm"
    table = pq.read_table(comm / "0.24.0" / "custom_allreduce_perf.parquet")
    doubled = pa.compute.multiply(table.column("latency"), 2.0)
    foreign = table.set_column(table.schema.get_field_index("latency"), "latency", doubled)
    names = pa.array(["TRTLLM"] * foreign.num_rows)
    foreign = foreign.set_column(foreign.schema.get_field_index("framework"), "framework", names)
    (comm / "0.19.0").mkdir()
    pq.write_table(foreign, comm / "0.19.0" / "custom_allreduce_perf.parquet")
    system = system_dir("h100", root)
    newest = {f.kernel: f for f in allreduce_rows(system, "vllm")}
    for release in ("0.19.0", "0.12.0"):
        old = {f.kernel: f for f in allreduce_rows(system, "vllm", release)}
        assert old.keys() == newest.keys()
        for kernel, fam in old.items():
            assert fam.release == "0.24.0" and fam.tables == newest[kernel].tables
            assert [r["median_s"] for r in fam.rows] == [r["median_s"] for r in newest[kernel].rows]


def test_an_older_sglang_release_reads_sglang_s_own_all_reduce_table() -> None:
    """SGLang 0.5.1.post1 (Qwen3-32B H100 rows) on H100: older than every table, so the
    oldest of SGLang's own, 0.5.9; never 0.5.6.post2's TensorRT-LLM rows (a 4-GPU jump
    from 3.7 to 11.5 us at 32 -> 64 KiB that SGLang's tables do not have)."""
    profile = load_profile("h100-sglang")
    for n in (2, 4, 8):
        rel = profile.table_releases[f"allreduce_{n}gpu"]
        assert "0.5.6.post2" not in rel.fits
        assert profile.table_picks("0.5.1.post1")[f"allreduce_{n}gpu"] == "0.5.9"
