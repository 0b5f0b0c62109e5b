"""A fused-MoE series timed slow on one GPU, read from its same-silicon sibling
(``twin.calibration.moe_sibling``, issue 31): the rule on small synthetic tables, the
sibling's table found by path, and the reader (``aic_moe.moe_rows``) pricing a slow
series from the sibling with the provenance naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.calibration.aic_import import fit_family
from twin.calibration.aic_moe import moe_rows
from twin.calibration.aic_tables import system_dir
from twin.calibration.moe_sibling import (
    CROSS_DIE,
    MIN_SHARED_TOKENS,
    SIBLINGS,
    cross_die_of,
    fill_pair_slow_series,
    fill_slow_series,
    series_ratios,
    sibling_of,
)
from twin.costmodel.profile_store import load_profile

DATA = Path(__file__).parent / "data" / "aic" / "systems" / "data"
TABLE = Path("moe") / "vllm" / "0.24.0" / "moe_perf.parquet"
TOKENS = (1, 4, 16, 64, 256, 1024)


def _series(ep: int, scale: float, tokens: tuple[int, ...] = TOKENS) -> list[dict[str, Any]]:
    """One series (DeepSeek's shape at MoE TP 1, EP ``ep``), its latency ``scale`` x a
    memory-bound curve."""
    return [
        {
            "kernel_source": "cutlass",
            "moe_dtype": "nvfp4",
            "distribution": "balanced",
            "hidden_size": 7168,
            "inter_size": 2048,
            "topk": 8,
            "num_experts": 256,
            "moe_tp_size": 1,
            "moe_ep_size": ep,
            "num_tokens": t,
            "latency": scale * (0.02 + 0.001 * t),
            "device": "own" if scale != 1.0 else "sibling",
        }
        for t in tokens
    ]


def _ep(rows: list[dict[str, Any]], ep: int) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r["moe_ep_size"] == ep), key=lambda r: r["num_tokens"])


def test_a_slow_series_takes_the_siblings_rows_times_the_tables_ratio() -> None:
    sibling = [r for ep in (1, 2, 4, 8, 16, 32) for r in _series(ep, 1.0)]
    # Own: 1.04x the sibling on most series, EP 4 1.7x slower, EP 8 0.6x (the fast one),
    # EP 32 timed at too few shared token counts to compare.
    own = [
        *(r for ep in (1, 2, 16) for r in _series(ep, 1.04)),
        *_series(4, 1.04 * 1.7),
        *_series(8, 1.04 * 0.6),
        *_series(32, 3.0, TOKENS[: MIN_SHARED_TOKENS - 1]),
    ]
    before = [dict(r) for r in own]
    ratios = series_ratios(own, sibling)
    assert len(ratios) == 5  # EP 32: no ratio
    fill = fill_slow_series(own, sibling, sibling_table="gb200/x.parquet")
    assert fill.median_ratio == pytest.approx(1.04)
    assert [k[8] for k, _ in fill.replaced] == [4]
    assert fill.replaced_labels("cutlass", "nvfp4") == ["d7168 i2048 k8 e256 tp1 ep4 x1.77"]
    assert fill.replaced_labels("cutlass", "fp8") == []
    assert fill.sibling_table == "gb200/x.parquet"
    rows = list(fill.rows)
    # EP 4: the sibling's times x 1.04, labelled with this GPU's device
    got, theirs = _ep(rows, 4), _ep(sibling, 4)
    assert [r["latency"] for r in got] == pytest.approx([1.04 * r["latency"] for r in theirs])
    assert {r["device"] for r in got} == {"own"}
    # the fast series, the comparable ones and the one without a ratio keep their rows
    for ep in (1, 2, 8, 16, 32):
        assert _ep(rows, ep) == _ep(own, ep)
    assert own == before  # the caller's rows are never modified
    # the sibling, read the other way, replaces its own slow series (EP 8) and keeps EP 4
    other = fill_slow_series(sibling, own)
    assert [k[8] for k, _ in other.replaced] == [8]
    assert other.median_ratio == pytest.approx(1 / 1.04)


def test_tables_that_agree_keep_their_rows() -> None:
    sibling = [r for ep in (1, 2, 4) for r in _series(ep, 1.0)]
    own = [r for ep in (1, 2, 4) for r in _series(ep, 1.2)]  # a uniformly slower GPU
    fill = fill_slow_series(own, sibling)
    assert fill.rows == tuple(own) and fill.replaced == ()
    assert fill.median_ratio == pytest.approx(1.2)
    # nothing comparable: the rows as they were, ratio 1
    assert fill_slow_series(own, []).rows == tuple(own)


def test_the_sibling_table_is_the_same_silicons_same_version(tmp_path: Path) -> None:
    assert SIBLINGS["b200_sxm"] == "gb200" and SIBLINGS["gb300"] == "b300_sxm"
    for system in ("b200_sxm", "gb200", "h100_sxm"):
        (tmp_path / system / TABLE).parent.mkdir(parents=True)
        (tmp_path / system / TABLE).touch()
    assert sibling_of(tmp_path / "b200_sxm" / TABLE) == tmp_path / "gb200" / TABLE
    assert sibling_of(tmp_path / "gb200" / TABLE) == tmp_path / "b200_sxm" / TABLE
    assert sibling_of(tmp_path / "h100_sxm" / TABLE) is None  # no sibling
    other = tmp_path / "b200_sxm" / "moe" / "vllm" / "0.19.0" / "moe_perf.parquet"
    assert sibling_of(other) is None  # the sibling has no table of that version


def test_a_series_both_dies_of_the_pair_timed_slow_takes_the_cross_dies_rows() -> None:
    eps = (1, 2, 4, 8, 16)
    cross = [r for ep in eps for r in _series(ep, 1.0)]  # B300
    sibling_cross = [r for ep in eps for r in _series(ep, 0.98)]  # GB300
    # B200 1.02x B300, GB200 1.01x GB300; both slow on EP 8 (1.6x); B200 alone on EP 2
    # (the same-silicon rule's case: GB200 agrees with GB300 there, so not this rule's).
    own = [
        *(r for ep in (1, 4, 16) for r in _series(ep, 1.02)),
        *_series(2, 1.02 * 1.6),
        *_series(8, 1.02 * 1.6),
    ]
    sibling = [
        *(r for ep in (1, 2, 4, 16) for r in _series(ep, 0.98 * 1.01)),
        *_series(8, 0.98 * 1.01 * 1.6),
    ]
    fill = fill_pair_slow_series(own, sibling, cross, sibling_cross, cross_table="b300/x")
    assert fill.median_ratio == pytest.approx(1.02)
    assert [k[8] for k, _ in fill.replaced] == [8]
    assert fill.replaced_labels("cutlass", "nvfp4") == ["d7168 i2048 k8 e256 tp1 ep8 x1.63"]
    assert fill.sibling_table == "b300/x"
    rows = list(fill.rows)
    got = _ep(rows, 8)
    assert [r["latency"] for r in got] == pytest.approx(
        [1.02 * r["latency"] for r in _ep(cross, 8)]
    )
    assert {r["device"] for r in got} == {"own"}
    for ep in (1, 2, 4, 16):
        assert _ep(rows, ep) == _ep(own, ep)
    # a pair that agrees with the cross die, or no cross table: the rows as they were
    assert fill_pair_slow_series(own, sibling, [], sibling_cross).rows == tuple(own)
    even = fill_pair_slow_series(cross, sibling_cross, cross, sibling_cross)
    assert even.replaced == () and even.rows == tuple(cross)


def test_only_b200s_die_reads_from_b300s(tmp_path: Path) -> None:
    assert CROSS_DIE == {"b200_sxm": "b300_sxm", "gb200": "gb300"}
    for system in ("b200_sxm", "b300_sxm", "gb300"):
        (tmp_path / system / TABLE).parent.mkdir(parents=True)
        (tmp_path / system / TABLE).touch()
    assert cross_die_of(tmp_path / "b200_sxm" / TABLE) == tmp_path / "b300_sxm" / TABLE
    assert cross_die_of(tmp_path / "gb200" / TABLE) == tmp_path / "gb300" / TABLE
    assert cross_die_of(tmp_path / "b300_sxm" / TABLE) is None  # not the other way


SLOW = ("vllm_unquantizedfusedmoe_triton_tritonexperts", 7168, 1, 4)  # source, d, tp, ep


def _is_slow(source: str, d: int, tp: int, ep: int, dist: str) -> bool:
    return (source, d, tp, ep) == SLOW and dist == "balanced"


def _scaled(rows: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """``rows`` with every latency ``factor`` x, and DeepSeek's balanced EP 4 series
    (``_is_slow``) 1.7x more."""
    return [
        {
            **r,
            "latency": r["latency"]
            * factor
            * (
                1.7
                if _is_slow(
                    r["kernel_source"],
                    r["hidden_size"],
                    r["moe_tp_size"],
                    r["moe_ep_size"],
                    r["distribution"],
                )
                else 1.0
            ),
        }
        for r in rows
    ]


def _test_table() -> pa.Table:
    return pq.read_table(DATA / "h100_sxm" / TABLE)


def _write_tables(factory: pytest.TempPathFactory, tables: dict[str, list[dict[str, Any]]]) -> Path:
    """A data root with each system's MoE table (the test table's schema) written."""
    root = factory.mktemp("aic") / "data"
    schema = _test_table().schema
    for system, rows in tables.items():
        (root / system / TABLE).parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / system / TABLE)
    return root


@pytest.fixture(scope="module")
def siblings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """B200 and GB200 tables from the test table: GB200 its rows, B200 1.04x them and
    DeepSeek's balanced EP 4 series 1.7x more."""
    rows = _test_table().to_pylist()
    return _write_tables(tmp_path_factory, {"gb200": rows, "b200_sxm": _scaled(rows, 1.04)})


def test_the_reader_prices_the_slow_series_from_the_sibling(siblings: Path) -> None:
    (b200,) = moe_rows(system_dir("b200", siblings), "vllm")
    (gb200,) = moe_rows(system_dir("gb200", siblings), "vllm")
    assert len(b200.rows) == len(gb200.rows)
    for mine, theirs in zip(b200.rows, gb200.rows, strict=True):
        s = mine["shape"]
        assert s == theirs["shape"]
        # every row 1.04x GB200's: the slow series now too (the sibling's x the ratio)
        assert mine["median_s"] == pytest.approx(1.04 * theirs["median_s"], rel=1e-9), s
    note = b200.sibling
    assert note["sibling_table"] == str(Path("gb200") / TABLE)
    assert note["series"] == ["d7168 i2048 k8 e256 tp1 ep4 x1.77"]
    assert note["median_ratio"] == pytest.approx(1.04)
    assert gb200.sibling == {}  # the fast one keeps its rows, and says nothing
    # the fitted family carries the note in its provenance
    shipped = load_profile("b200", "vllm")
    fit = fit_family(b200, shipped.peaks, shipped.device)
    assert fit is not None and fit.provenance["sibling_series"] == note
    fit = fit_family(gb200, shipped.peaks, shipped.device)
    assert fit is not None and "sibling_series" not in fit.provenance


@pytest.fixture(scope="module")
def dies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """B200, GB200, B300 and GB300 tables from the test table: B300 and GB300 its rows,
    B200 1.03x and GB200 1.01x them, both 1.7x more on DeepSeek's balanced EP 4 series."""
    rows = _test_table().to_pylist()
    tables = {
        "b300_sxm": rows,
        "gb300": rows,
        "b200_sxm": _scaled(rows, 1.03),
        "gb200": _scaled(rows, 1.01),
    }
    return _write_tables(tmp_path_factory, tables)


def test_the_reader_prices_a_pair_slow_series_from_the_cross_die(dies: Path) -> None:
    (b200,) = moe_rows(system_dir("b200", dies), "vllm")
    (b300,) = moe_rows(system_dir("b300", dies), "vllm")
    assert len(b200.rows) == len(b300.rows)
    for mine, theirs in zip(b200.rows, b300.rows, strict=True):
        assert mine["shape"] == theirs["shape"]
        # every row 1.03x B300's: the pair-slow series now too (the cross die's x the ratio)
        assert mine["median_s"] == pytest.approx(1.03 * theirs["median_s"], rel=1e-9)
    note = b200.sibling["cross_die"]
    assert note["cross_table"] == str(Path("b300_sxm") / TABLE)
    assert note["series"] == ["d7168 i2048 k8 e256 tp1 ep4 x1.75"]  # 1.03 x 1.7
    assert note["median_ratio"] == pytest.approx(1.03)
    assert "series" not in b200.sibling  # the same-silicon rule replaced nothing
    assert b300.sibling == {}
