"""The conv update's buffers read from L2 across its table's CUDA-graph replays (issue 34,
helper upd38): a fit-reader term only, zero in serving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from profile_edits import with_fit

from twin.calibration.aic_dense import conv1d_rows
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import features as ft
from twin.costmodel import mla_features as mf
from twin.costmodel import ssm_features as ssm_ft
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile
from twin.hardware import L2_BYTES
from twin.presets import get_model

H100_L2 = L2_BYTES["h100"]  # 50 MB; 40 MB may stay (``REPLAY_L2_SHARE``)


def test_an_update_whose_buffers_fit_reads_every_byte_from_l2() -> None:
    cold = ssm_ft.conv1d_features(16, 1, 6144, 4, 2, True, 132)
    warm = ssm_ft.conv1d_features(16, 1, 6144, 4, 2, True, 132, l2_bytes=H100_L2)
    assert cold[2]["l2_bytes"] == 0.0 and cold[1] > 0
    assert warm[0] == cold[0] and warm[1] == 0.0
    assert warm[2] == {"cta_waves": cold[2]["cta_waves"], "l2_bytes": cold[1]}
    # 1,024 sequences of 6,144 channels: 126 MB moved, 88 MB of buffers: from HBM.
    big = ssm_ft.conv1d_features(1024, 1, 6144, 4, 2, True, 132, l2_bytes=H100_L2)
    assert big == ssm_ft.conv1d_features(1024, 1, 6144, 4, 2, True, 132)


def test_the_state_read_and_written_in_place_occupies_l2_once() -> None:
    # 128 x 18,432 channels: 47 MB moved (the state read and written), 24 MB of buffers
    # (x, out, weight, one (b, c, 3) state): it stays, where moved bytes would not.
    flops, nbytes, x = ssm_ft.conv1d_features(128, 1, 18432, 4, 2, True, 132)
    assert nbytes > ft.REPLAY_L2_SHARE * H100_L2
    warm = ssm_ft.conv1d_features(128, 1, 18432, 4, 2, True, 132, l2_bytes=H100_L2)
    assert warm == (flops, 0.0, {**x, "l2_bytes": nbytes})
    # The shared rule: the moved bytes judge residency unless a footprint is given.
    assert ft.replay_l2(nbytes, H100_L2) == (nbytes, 0.0)
    assert ft.replay_l2(nbytes, H100_L2, 0.5 * nbytes) == (0.0, nbytes)
    assert ft.replay_l2(nbytes, None, 0.0) == (nbytes, 0.0)


def test_the_attention_kernels_take_the_same_rule() -> None:
    sums = (1.0, 30e6, 4.0, 8.0)
    assert mf.kernel_replay_l2(sums, H100_L2) == ((1.0, 0.0, 4.0, 8.0), 30e6)
    assert mf.kernel_replay_l2(sums, None) == (sums, 0.0)


def test_the_fit_reader_gives_the_tables_rows_their_l2_bytes() -> None:
    pytest.importorskip("aiconfigurator_core")
    fam = next(f for f in conv1d_rows(system_dir("h100")) if f.kernel == "conv1d_update")
    rows = {(r["shape"]["b"], r["shape"]["c"]): r for r in fam.rows}
    small, big = rows[(16, 6144)], rows[(1024, 6144)]
    assert small["bytes"] == 0.0 and small["l2_bytes"] > 0
    assert big["bytes"] > 0 and big["l2_bytes"] == 0.0
    # The prompt pass is not replayed on one state: no such term.
    prompt = next(f for f in conv1d_rows(system_dir("h100")) if f.kernel == "conv1d")
    assert all("l2_bytes" not in r for r in prompt.rows)


STEPS = (((), (1000,) * 16), ((), (500,) * 300), (((3000, 0),), (500,) * 40))


def test_serving_prices_no_l2_bytes() -> None:
    base = load_profile("h100-trtllm")
    assert base.kernels["conv1d_update"].model == "roofline+cta_waves+l2_bytes"
    model = get_model("nemotron-h-8b")
    a = CostModel(model, with_fit(base, "conv1d_update", c_l2_bytes=1e-3))
    b = CostModel(model, with_fit(base, "conv1d_update", c_l2_bytes=0.0))
    for prefills, decodes in STEPS:
        assert a.step(prefills, decodes) == b.step(prefills, decodes)
    # The compiled step (``compiled._conv_update``) passes no L2 bytes either.
    assert a.compile_steps() and b.compile_steps()
    for chunks, batch, context in (((), 16, 16000), (((512, 0),), 40, 20000)):
        assert a.step_spread(chunks, batch, context) == b.step_spread(chunks, batch, context)


def test_a_profile_fitted_before_the_term_reads_it_as_zero(tmp_path: Path) -> None:
    data = load_profile("h100-trtllm").to_dict()
    data["kernels"]["conv1d_update"]["model"] = "roofline+cta_waves"
    del data["kernels"]["conv1d_update"]["params"]["c_l2_bytes"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert Profile.load(path).kernels["conv1d_update"].params["c_l2_bytes"] == 0.0
