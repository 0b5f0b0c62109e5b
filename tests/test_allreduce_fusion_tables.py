"""The all-reduce table a TensorRT-LLM layer reads follows the layer's norm fusion (issue 31,
helper trtar39). TensorRT-LLM 1.2.0rc5's Hopper custom all-reduce tables time the un-fused
op's own algorithm picks (``AllReduceFusionOp.NONE``: two-shot at decode sizes,
``twin.calibration.aic_collectives.UNFUSED_TWOSHOT_TABLES``). A layout whose all-reduces
run un-fused (``KernelLayout.norm_in_allreduce`` false: Llama-3.1-8B's) runs exactly that
column and reads them; a fused one (the norm inside: Llama-3.1-70B, gpt-oss and, from
0.20.0 on, Qwen3-MoE) does not. The shipped H100 / H200 profiles keep those fits under
their own key, ``TableReleases.unfused_fits``, which no reader of ``fits`` takes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest

from twin.costmodel import CostModel
from twin.costmodel.profile import Profile, TableReleases
from twin.costmodel.profile_store import load_profile
from twin.engine.kernel_layouts_trtllm import trtllm_norm_in_allreduce
from twin.errors import TwinError
from twin.presets import resolve_model

needs_aic = pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is None,
    reason="needs aiconfigurator-core (the aic extra)",
)


@needs_aic
@pytest.mark.parametrize(
    ("gpu", "release", "fused", "table"),
    [
        ("h100", "1.0.0rc3", True, "1.3.0rc10"),  # fused: the two-shot table passed over
        ("h100", "1.0.0rc3", False, "1.2.0rc5"),  # un-fused: the oldest table, its own op
        ("h200", "1.1.0rc2.post2", False, "1.2.0rc5"),
        ("h100", "1.3.0rc10", False, "1.3.0rc10"),  # newer releases: as before
        ("h100", None, False, "1.3.0rc20"),
    ],
)
def test_the_reader_picks_by_fusion(gpu: str, release: str | None, fused: bool, table: str) -> None:
    from twin.calibration.aic_collectives import custom_allreduce_dir
    from twin.calibration.aic_tables import system_dir

    chosen = custom_allreduce_dir(system_dir(gpu), "trtllm", release, fused)
    assert chosen is not None and chosen.name == table


@needs_aic
def test_only_the_two_shot_tables_are_fitted_apart() -> None:
    from twin.calibration.aic_collectives import unfused_allreduce_rows
    from twin.calibration.aic_tables import system_dir

    apart = unfused_allreduce_rows(system_dir("h100"), "trtllm")
    assert sorted(apart) == ["allreduce_2gpu", "allreduce_4gpu", "allreduce_8gpu"]
    assert all(list(by) == ["1.2.0rc5"] for by in apart.values())
    assert unfused_allreduce_rows(system_dir("b200"), "trtllm") == {}
    assert unfused_allreduce_rows(system_dir("h100"), "sglang") == {}


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_shipped_profiles_keep_the_two_shot_fits_apart(gpu: str) -> None:
    prof = load_profile(gpu, "trtllm")
    for n in (2, 4, 8):
        rel = prof.table_releases[f"allreduce_{n}gpu"]
        assert list(rel.unfused_fits) == ["1.2.0rc5"]
        assert "1.2.0rc5" not in rel.fits  # a reader of ``fits`` never prices with them
    assert prof.table_picks("1.0.0rc3")["allreduce_4gpu"] == "1.3.0rc10"
    assert prof.table_picks("1.0.0rc3", unfused_allreduce=True)["allreduce_4gpu"] == "1.2.0rc5"
    assert prof.table_picks("1.3.0rc10", unfused_allreduce=True)["allreduce_4gpu"] == "1.3.0rc10"
    assert prof.table_picks("", unfused_allreduce=True)["allreduce_4gpu"] == "1.3.0rc20"


def test_an_unfused_layout_prices_the_two_shot_all_reduce() -> None:
    """16 decode tokens at tp 4, release 1.0.0rc3: the un-fused layout's two-shot ~10.9 us
    (1.2.0rc5's table at 64 Ki elements), the fused one's one-shot ~4.3 us (1.3.0rc10)."""
    base = load_profile("h100", "trtllm").at_release("1.0.0rc3")
    unfused = base.with_unfused_allreduce("1.0.0rc3")
    model = resolve_model("llama-3.1-8b")
    two = CostModel(model, unfused, 4).allreduce_time(16)
    one = CostModel(model, base, 4).allreduce_time(16)
    assert 9.0e-6 < two < 12.5e-6 and 3.8e-6 < one < 5.0e-6
    assert base.with_unfused_allreduce("1.3.0rc10") is base  # the pick is the same table
    assert load_profile("b200", "trtllm").with_unfused_allreduce("1.0.0rc3").kernels == (
        load_profile("b200", "trtllm").kernels
    )


def test_a_run_reads_the_table_of_its_layout() -> None:
    """Through ``build_run`` (the silicon rows' path): Llama-3.1-8B (un-fused) reads 1.2.0rc5
    at 1.0.0rc3, Qwen3-235B (its norms in the all-reduces) 1.3.0rc10; the summary says so."""
    from twin.engine import build_run
    from twin.precision import with_precision
    from twin.workloads.examples import example_path

    chat = example_path("chat")
    kw = dict(gpu="h100", cache_gb="auto", tp=4, engine="trtllm", kernel_tables="1.0.0rc3")
    small = build_run(chat, model=resolve_model("llama-3.1-8b"), **kw)  # type: ignore[arg-type]
    moe = with_precision(resolve_model("qwen3-235b-a22b"), "fp8-block", "fp8")
    big = build_run(chat, model=moe, **kw)  # type: ignore[arg-type]
    assert small.profile_info["kernel_tables"]["families"]["allreduce_4gpu"] == "1.2.0rc5"
    assert big.profile_info["kernel_tables"]["families"]["allreduce_4gpu"] == "1.3.0rc10"
    two = small.pricer.inner.cost_model.allreduce_time(16)  # type: ignore[attr-defined]
    one = big.pricer.inner.cost_model.allreduce_time(16)  # type: ignore[attr-defined]
    assert two > 9.0e-6 and one < 5.0e-6


def test_a_run_without_all_reduces_names_no_un_fused_table() -> None:
    """One predicate decides the un-fused tables for the prices and the summary
    (``run_pricing.unfused_allreduce``, review39's fifth item): at TP 1 Llama-3.1-8B runs no
    all-reduce, so its summary names each all-reduce family's fused pick (as a fused layout's),
    not 1.2.0rc5, while its prices are those of the run that would read it."""
    from twin.engine import build_run
    from twin.workloads.examples import example_path

    chat = example_path("chat")
    kw = dict(gpu="h100", cache_gb="auto", engine="trtllm", kernel_tables="1.0.0rc3")
    model = resolve_model("llama-3.1-8b")
    one = build_run(chat, model=model, tp=1, **kw)  # type: ignore[arg-type]
    four = build_run(chat, model=model, tp=4, **kw)  # type: ignore[arg-type]
    fused = load_profile("h100", "trtllm").table_picks("1.0.0rc3")
    picks = one.profile_info["kernel_tables"]["families"]
    assert picks == fused and picks["allreduce_4gpu"] != "1.2.0rc5"
    assert four.profile_info["kernel_tables"]["families"]["allreduce_4gpu"] == "1.2.0rc5"


def test_the_key_round_trips_and_is_refused_where_it_cannot_be_meant() -> None:
    prof = load_profile("h100", "trtllm")
    data = json.loads(json.dumps(prof.to_dict()))
    assert "unfused_fits" in data["table_releases"]["allreduce_4gpu"]
    again = Profile.from_dict(data)
    assert again.table_releases["allreduce_4gpu"] == prof.table_releases["allreduce_4gpu"]
    fit = prof.table_releases["allreduce_4gpu"].unfused_fits["1.2.0rc5"]
    moe = dataclasses.replace(prof.table_releases["moe_fp8_block"], unfused_fits={"1.2.0rc5": fit})
    with pytest.raises(TwinError, match="only an all-reduce family"):
        dataclasses.replace(prof, table_releases={**prof.table_releases, "moe_fp8_block": moe})
    rel = prof.table_releases["allreduce_4gpu"]
    both = TableReleases(rel.default, rel.fits, rel.default_fit, {"1.3.0rc10": fit})
    with pytest.raises(TwinError, match="every layout reads too"):
        dataclasses.replace(prof, table_releases={**prof.table_releases, "allreduce_4gpu": both})
    # Present, the key must hold an object: ``null`` or a list is a malformed file, not "none".
    for bad in (None, []):
        broken = json.loads(json.dumps(data))
        broken["table_releases"]["allreduce_4gpu"]["unfused_fits"] = bad
        with pytest.raises(TwinError, match=r"table_releases\.allreduce_4gpu\.unfused_fits"):
            Profile.from_dict(broken)


def test_qwen3_moe_runs_its_norms_in_the_all_reduces() -> None:
    moe = resolve_model("qwen3-235b-a22b")
    assert trtllm_norm_in_allreduce(moe, tp=4, dp=1, build="1.0.0rc3") == (True, False)
    assert trtllm_norm_in_allreduce(moe, tp=4, dp=1) == (True, False)  # the newest
    assert trtllm_norm_in_allreduce(moe, tp=4, dp=1, build="nightly") == (True, False)
    assert trtllm_norm_in_allreduce(moe, tp=4, dp=1, build="0.19.0") == (False, False)  # unread
    assert trtllm_norm_in_allreduce(moe, tp=1, dp=1, build="1.0.0rc3") == (False, False)
    assert trtllm_norm_in_allreduce(moe, tp=8, dp=8, build="1.0.0rc3") == (False, False)
    dense = resolve_model("qwen3-32b")  # Qwen3DecoderLayer keeps its norms apart
    assert trtllm_norm_in_allreduce(dense, tp=4, dp=1, build="1.0.0rc3") == (False, False)
