"""``twin validate``'s single-server prediction and its comparison with measurements
(against the fake executor of ``validate_fakes``: every error is ~0)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_engine_helpers import LinearPricer, generated
from validate_fakes import FakeConfig, fake_reference

from twin.costmodel.profile_store import load_profile
from twin.engine.cost import make_pricer
from twin.errors import TwinError
from twin.presets import get_model
from twin.replay import replay
from twin.validate import (
    PrefillOnlyPricer,
    default_cache,
    fix_arrivals,
    join,
    judge,
    metrics,
    rel_err,
    validate,
)
from twin.validate.compare import PLOT_FILE, REQUESTS_FILE, VALIDATION_FILE
from twin.validate.predict import predict
from twin.workloads.reader import Workload

MODEL = get_model("tiny-hybrid")


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """Sessions starting 2 ms apart: requests queue behind each other."""
    d = tmp_path_factory.mktemp("b")
    src = Workload.open(generated(d / "src.parquet", "chat", 30, 500.0, max_context=2048))
    return fix_arrivals(src, d / "fixed.parquet", session_rate=None, seed=0, max_requests=60)


# ----------------------------------------------------------------- prediction
def test_prefill_only_pricer_drops_decode():
    inner = LinearPricer(base=1e-3, per_token=1e-5, per_key=1e-8, per_seq=1e-4, copy_s=2e-6)
    p = PrefillOnlyPricer(inner)
    assert p.step_time([(100, 20)], 4, 4000) == inner.step_time([(100, 20)], 0, 0)
    assert p.step_time([], 8, 8000) == 0.0
    assert p.decode_affine(8) == (0.0, 0.0)
    assert not p.decode_run(8, 100, 5).any() and len(p.decode_run(8, 100, 5)) == 5
    assert p.checkpoint_copy_time() == 2e-6


def test_prediction_matches_an_exact_single_server_model(busy):
    """The engine as configured is the FCFS prefill server: same hits, starts and services."""
    cache = default_cache(busy, MODEL, "marconi").bytes
    config = FakeConfig(cache_bytes=cache)
    measured = fake_reference(busy, MODEL, config).records
    predicted = predict(
        busy, MODEL, make_pricer(MODEL, load_profile("cpu"), 1), cache_bytes=cache, policy="marconi"
    )
    cols = join(measured, predicted)
    assert (cols["measured_queue_s"] > 1e-4).sum() >= 5  # the test exercises queueing
    assert (cols["measured_hit_tokens"] > 0).any()
    np.testing.assert_array_equal(cols["measured_hit_tokens"], cols["predicted_hit_tokens"])
    np.testing.assert_allclose(cols["predicted_service_s"], cols["measured_service_s"], rtol=1e-9)
    np.testing.assert_allclose(
        cols["predicted_ttft_s"], cols["measured_ttft_s"], rtol=1e-9, atol=1e-12
    )


def test_default_cache_is_30_percent_of_the_unbounded_footprint(busy):
    choice = default_cache(busy, MODEL, "sglang+")
    peak = replay(busy, MODEL, 2**62, "sglang+").peak_bytes
    assert choice.unbounded_footprint_bytes == peak > 0
    assert choice.bytes == int(0.3 * peak) and "30%" in choice.source


# ----------------------------------------------------------------- comparison
def _cols(meas_service, pred_service, meas_hit=None, pred_hit=None, inputs=None):
    n = len(meas_service)
    zeros = np.zeros(n)
    meas_service, pred_service = np.asarray(meas_service, float), np.asarray(pred_service, float)
    return {
        "row": np.arange(n),
        "session_id": np.arange(n),
        "turn": np.zeros(n, int),
        "input_tokens": np.asarray(inputs if inputs is not None else [10] * n),
        "measured_hit_tokens": np.asarray(meas_hit if meas_hit is not None else [0] * n),
        "predicted_hit_tokens": np.asarray(pred_hit if pred_hit is not None else [0] * n),
        "measured_exact": np.ones(n, bool),
        "measured_service_s": meas_service,
        "predicted_service_s": pred_service,
        "measured_ttft_s": meas_service + zeros,
        "predicted_ttft_s": pred_service + zeros,
        "service_rel_err": rel_err(pred_service, meas_service),
    }


def test_relative_error_known_answers():
    np.testing.assert_allclose(rel_err([1.1, 0.9, 2.0], [1.0, 1.0, 1.0]), [0.1, -0.1, 1.0])
    assert math.isnan(rel_err(1.0, 0.0))


def test_metrics_known_answers():
    m = metrics(
        _cols(
            [1.0, 1.0, 1.0, 1.0],
            [1.1, 0.8, 1.3, 1.0],
            meas_hit=[0, 5, 5, 0],
            pred_hit=[0, 5, 4, 0],
            inputs=[10, 10, 10, 10],
        )
    )
    s = m["service"]
    assert s["median_abs_rel_err"] == pytest.approx(0.15)  # of 0, 0.1, 0.2, 0.3
    assert s["median_signed_rel_err"] == pytest.approx(0.05)  # of -0.2, 0, 0.1, 0.3
    assert s["p90_abs_rel_err"] == pytest.approx(np.percentile([0, 0.1, 0.2, 0.3], 90))
    p50 = m["ttft"]["p50"]
    assert p50["measured_s"] == 1.0 and p50["predicted_s"] == pytest.approx(1.05)
    assert p50["rel_err"] == pytest.approx(0.05)
    hit = m["hit"]
    assert hit["measured"] == {"hit_tokens": 10, "token_hit_rate": 0.25, "request_hit_rate": 0.5}
    assert hit["predicted"]["token_hit_rate"] == pytest.approx(0.225)
    assert not hit["identical"] and hit["rows_differing"] == 1 and hit["first_differing_row"] == 2
    verdict = judge(m, "cpu")
    assert not verdict["targets"]["service_median_rel_err"]["pass"]  # 15% is not < 15%
    assert verdict["targets"]["ttft_p50_rel_err"]["pass"]
    assert not verdict["targets"]["hit_tokens_identical"]["pass"] and not verdict["pass"]


def test_targets_per_device_and_nan_never_passes():
    m = metrics(_cols([1.0, 1.0], [1.07, 1.07]))
    assert judge(m, "cpu")["pass"] and not judge(m, "cuda")["pass"]
    assert judge(m, "cuda")["targets"]["ttft_p95_rel_err"]["max"] == 0.05
    m["service"]["median_abs_rel_err"] = float("nan")
    assert not judge(m, "cpu")["targets"]["service_median_rel_err"]["pass"]


def test_join_refuses_different_workloads(busy):
    predicted = predict(busy, MODEL, LinearPricer(), cache_bytes=0, policy="vanilla")
    measured = fake_reference(busy, MODEL, FakeConfig(policy="vanilla")).records
    with pytest.raises(TwinError, match="not the same rows"):
        join(measured[:-1], predicted)
    bad = [measured[0].__class__(**{**measured[0].__dict__, "input_tokens": 1}), *measured[1:]]
    with pytest.raises(TwinError, match="prompt length"):
        join(bad, predicted)


def test_validate_writes_all_outputs_with_zero_error(busy, tmp_path):
    cache = default_cache(busy, MODEL, "marconi")
    report = validate(
        busy,
        MODEL,
        load_profile("cpu"),
        run_reference=fake_reference,
        executor_config=FakeConfig(cache_bytes=cache.bytes),
        cache=cache,
        out_dir=tmp_path,
    )
    assert report["pass"] and report["metrics"]["hit"]["identical"]
    assert report["metrics"]["service"]["p90_abs_rel_err"] < 1e-9
    saved = json.loads((tmp_path / VALIDATION_FILE).read_text())
    for key in (
        "model",
        "device",
        "device_name",
        "dtype",
        "profile",
        "implementations",
        "policy",
        "cache",
        "workload",
        "seed",
        "repeats",
        "metrics",
        "targets",
        "pass",
        "outputs",
    ):
        assert key in saved, key
    assert saved["profile"]["source"] == "measured" and len(saved["workload"]["sha256"]) == 64
    table = pq.read_table(tmp_path / REQUESTS_FILE)
    assert table.num_rows == busy.num_rows
    assert {
        "measured_service_s",
        "predicted_service_s",
        "measured_ttft_s",
        "predicted_ttft_s",
        "measured_hit_tokens",
        "predicted_hit_tokens",
    } <= set(table.column_names)
    assert (tmp_path / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*tmp*"))


def test_validate_writes_nothing_when_the_executor_fails(busy, tmp_path):
    def broken(*args, **kwargs):
        raise TwinError("executor failed")

    with pytest.raises(TwinError):
        validate(
            busy,
            MODEL,
            load_profile("cpu"),
            run_reference=broken,
            executor_config=FakeConfig(),
            cache=default_cache(busy, MODEL, "vanilla"),
            out_dir=tmp_path / "o",
        )
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
