"""The causal conv1d's launch in its features (issue 34, helper conv38): the prompt pass's
CTAs on the unvectorised load path, the decode update's waves of CTAs over the SMs."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from profile_edits import with_fit

from twin.calibration.aic_dense import conv1d_rows
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel, StepCost
from twin.costmodel import ssm_features as ssm_ft
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile
from twin.presets import get_model


def test_a_prompt_pass_counts_its_unvectorised_ctas() -> None:
    # Grid (batch, dim): a CTA per sequence and channel; the vector loads need a length
    # that is a multiple of 8 and a call that is not varlen (``kIsVecLoad``).
    for length, unaligned in ((1, True), (4, True), (8, False), (1000, False), (1001, True)):
        _, _, x = ssm_ft.conv1d_features(3, length, 6144, 4, 2)
        assert x["seq_channels"] == 3 * 6144
        assert x["unaligned_ctas"] == (3 * 6144 if unaligned else 0)
    # The engines' varlen call: every chunk's CTAs unaligned, even at 1,024 tokens each.
    f, b, x = ssm_ft.conv1d_features(1, 4096, 6144, 4, 2, sequences=4)
    assert x == {"seq_channels": 4 * 6144, "unaligned_ctas": 4 * 6144}
    assert (f, b) == ssm_ft.conv1d_features(1, 4096, 6144, 4, 2)[:2]


def test_a_decode_update_counts_waves_of_its_64_thread_ctas() -> None:
    # Grid (batch, ceil(dim / 64)); 32 resident CTAs an SM; waves fractional above one.
    _, _, x = ssm_ft.conv1d_features(1024, 1, 20480, 4, 2, True, 132)
    assert x["cta_waves"] == pytest.approx(1024 * 320 / (132 * 32))  # 77.6 waves, not 78
    assert ssm_ft.conv1d_features(1, 1, 1536, 4, 2, True, 132)[2]["cta_waves"] == 1
    assert ssm_ft.conv1d_features(1024, 1, 20480, 4, 2, True, None)[2]["cta_waves"] == 0


def test_the_update_waves_are_not_rounded_up_above_one() -> None:
    # upd39: a short-lived CTA's slot is refilled as it retires, so the last partial wave
    # costs about a CTA, not a wave: the count grows with the CTAs, one wave at least.
    slots = 132 * ssm_ft.CONV_UPDATE_RESIDENT
    assert ssm_ft.conv_update_waves(1, 1536, 132) == 1.0  # 24 CTAs: one CTA's lifetime
    assert ssm_ft.conv_update_waves(44, 6144, 132) == 1.0  # 4,224 CTAs: exactly one wave
    assert ssm_ft.conv_update_waves(45, 6144, 132) == pytest.approx(45 * 96 / slots)
    assert ssm_ft.conv_update_waves(45, 6144, 132) < 2  # the ceiling said 2
    # Channels round up to whole 64-thread CTAs; no SM count: 0.
    assert ssm_ft.conv_update_waves(100, 6145, 132) == pytest.approx(100 * 97 / slots)
    assert ssm_ft.conv_update_waves(100, 6144, None) == 0.0
    # Non-decreasing in the batch.
    w = [ssm_ft.conv_update_waves(b, 10240, 148) for b in range(1, 2049, 7)]
    assert all(a <= b for a, b in itertools.pairwise(w))


def test_the_fit_reader_gives_the_tables_rows_the_launch_features() -> None:
    pytest.importorskip("aiconfigurator_core")
    fams = {f.kernel: f for f in conv1d_rows(system_dir("h100"))}
    prompt = fams["conv1d"].rows
    short = [r for r in prompt if r["shape"]["l"] <= 4]
    assert short and all(r["unaligned_ctas"] == r["seq_channels"] > 0 for r in short)
    assert all(r["unaligned_ctas"] == 0 for r in prompt if r["shape"]["l"] >= 8)
    waves = {r["shape"]["b"]: r["cta_waves"] for r in fams["conv1d_update"].rows}
    assert waves[1] == 1 and waves[1024] > 1


def _conv(cm: CostModel, prefills=(), decodes=()) -> float:
    cost = cm.step(prefills, decodes, breakdown=True)
    assert isinstance(cost, StepCost)
    return cost.items["ssm"]["conv1d"]


def test_serving_prices_each_prompt_chunk_on_the_unvectorised_path() -> None:
    base = load_profile("h100-trtllm")
    model = get_model("nemotron-h-8b")
    zero = CostModel(model, with_fit(base, "conv1d", c_unaligned_ctas=0.0))
    more = CostModel(model, with_fit(base, "conv1d", c_unaligned_ctas=1e-9))
    # Many short chunks (per-CTA bound): the unaligned term adds to every chunk's CTAs,
    # as the varlen call runs them all unvectorised (8-token chunks included).
    prefills = tuple((8, 0) for _ in range(64))
    assert _conv(more, prefills) > _conv(zero, prefills)


def test_the_update_waves_price_only_the_updates_own_fit() -> None:
    base = load_profile("h100-trtllm")
    model = get_model("nemotron-h-8b")
    decodes = (1000,) * 512
    slow = CostModel(model, with_fit(base, "conv1d_update", c_cta_waves=1e-5))
    fast = CostModel(model, with_fit(base, "conv1d_update", c_cta_waves=0.0))
    assert _conv(slow, (), decodes) > _conv(fast, (), decodes)
    # Without the update's fit, the prompt conv's model prices it with no per-CTA terms.
    kernels = {k: v for k, v in base.kernels.items() if k != "conv1d_update"}
    fallback = dataclasses.replace(base, kernels=kernels)
    a = CostModel(model, with_fit(fallback, "conv1d", c_seq_channels=1e-3, c_unaligned_ctas=1e-3))
    b = CostModel(model, with_fit(fallback, "conv1d", c_seq_channels=0.0, c_unaligned_ctas=0.0))
    assert _conv(a, (), decodes) == _conv(b, (), decodes)


def test_a_profile_fitted_before_the_terms_prices_as_before(tmp_path: Path) -> None:
    shipped = load_profile("h100-trtllm")
    data = shipped.to_dict()
    for kernel, name, coef in (
        ("conv1d", "roofline+seq_channels", "c_unaligned_ctas"),
        ("conv1d_update", "roofline", "c_cta_waves"),
    ):
        data["kernels"][kernel]["model"] = name
        del data["kernels"][kernel]["params"][coef]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = Profile.load(path)
    assert old.kernels["conv1d"].params["c_unaligned_ctas"] == 0.0
    assert old.kernels["conv1d_update"].params["c_cta_waves"] == 0.0
    zeroed = with_fit(
        with_fit(shipped, "conv1d", c_unaligned_ctas=0.0), "conv1d_update", c_cta_waves=0.0
    )
    model = get_model("nemotron-h-8b")
    steps = (((512, 0), (8, 0)), ()), ((), (1000,) * 300), (((3000, 0),), (500,) * 40)
    for prefills, decodes in steps:
        assert CostModel(model, old).step(prefills, decodes) == CostModel(model, zeroed).step(
            prefills, decodes
        )


def test_serving_and_the_compiled_update_price_the_fractional_waves_alike() -> None:
    from twin.costmodel import compiled

    cm = CostModel(get_model("nemotron-h-8b"), load_profile("h100-trtllm"))
    kc = np.zeros((compiled.GDN_SEQ_ROW + 1, compiled.N_CONSTANTS), np.float64)
    kc[compiled.CONV_UPDATE] = cm._conv_update_constants
    # 45 x 160 CTAs over 132 x 32 slots: 1.7 waves (the ceiling's 2), and a batch of 1.
    for batch in (1, 45, 300):
        cf, cb, x = ssm_ft.conv1d_features(batch, 1, 10240, 4, 2, True, 132)
        assert x["cta_waves"] == max(1.0, batch * 160 / (132 * 32))
        plain = cm._conv_update(cf, cb, x["cta_waves"], x["l2_bytes"])
        assert compiled._conv_update(kc, 2, batch, 10240, 4, 132) == pytest.approx(plain, rel=1e-12)
