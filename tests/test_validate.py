"""``twin validate``: fixed arrivals, the single-server prediction, the comparison, the command.

Most tests need no torch: a fake executor serves the requests on the same
cache and prices them with the twin's own cost model (an exact single-server
FCFS model written independently of the engine), so every error is ~0 and
the hits match; the real executor runs in one end-to-end test.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import typer
from test_engine_helpers import LinearPricer, generated, write_rows
from typer.testing import CliRunner

from policies import get_policy
from twin.cache import RequestCache
from twin.costmodel.profile_store import load_profile, shipped_profiles
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
    predict,
    rel_err,
    validate,
)
from twin.validate.compare import PLOT_FILE, REQUESTS_FILE, VALIDATION_FILE
from workloads.reader import Workload
from workloads.schema import WorkloadRow

MODEL = get_model("tiny-hybrid")
runner = CliRunner()


# ----------------------------------------------------------------- fixtures and fakes
@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """Closed-loop chat sessions (turn 0 timed, later turns after think time)."""
    return Workload.open(
        generated(tmp_path_factory.mktemp("w") / "chat.parquet", "chat", 12, 2.0, max_context=2048)
    )


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """Sessions starting 2 ms apart: requests queue behind each other."""
    d = tmp_path_factory.mktemp("b")
    src = Workload.open(generated(d / "src.parquet", "chat", 30, 500.0, max_context=2048))
    return fix_arrivals(src, d / "fixed.parquet", session_rate=None, seed=0, max_requests=60)


@dataclass(frozen=True)
class FakeConfig:
    """``twin.reference.executor.ExecutorConfig``'s fields."""

    device: str = "cpu"
    policy: str = "marconi"
    policy_options: dict[str, Any] = field(default_factory=dict)
    cache_bytes: int = 0
    seed: int = 0
    repeats: int = 3
    warmup: int = 2


@dataclass(frozen=True)
class FakeMeasured:
    row: int
    session_id: int
    turn: int
    arrival_s: float
    start_s: float
    input_tokens: int
    hit_tokens: int
    service_s: float


def fake_reference(workload: Workload, model: Any, config: FakeConfig, progress=None):
    """One FCFS prefill server on the policy's cache, priced by the twin's CPU cost model.

    The cache is driven in the engine's order; the price is the prefill of the
    uncached tokens (at least the last one) plus the checkpoint copies, whose
    completion-time share delays the next request.
    """
    pricer = make_pricer(model, load_profile("cpu"), 1)
    copy_s = pricer.checkpoint_copy_time()
    policy = get_policy(config.policy, **config.policy_options)
    cache = policy.make_cache(model, config.cache_bytes)
    requests = RequestCache(cache)
    records, free_at = [], 0.0
    for i, req in enumerate(workload.requests()):
        n = len(req.prompt)
        adm = requests.admit(req.prompt, req.output)
        hit = adm.hit
        new = max(1, n - hit.length)
        service = pricer.step_time([(new, n - new)], 0, 0)
        copies = requests.insert_at_prefill_end(adm)
        if req.output_len == 1:
            copies += requests.insert_at_completion(adm)
        service += copies * copy_s
        start = max(req.arrival_s, free_at)
        free_at = start + service
        if req.output_len > 1:
            free_at += requests.insert_at_completion(adm) * copy_s
        requests.release(adm)
        records.append(
            FakeMeasured(
                req.row, req.session_id, req.turn, req.arrival_s, start, n, hit.length, service
            )
        )
        if progress is not None:
            progress((i + 1) / workload.num_rows)
    hits = sum(r.hit_tokens for r in records)
    return SimpleNamespace(
        records=records,
        device_name="fake CPU",
        dtype="float32",
        implementations={"ssm_scan": "fake"},
        wall_s=0.1,
        token_hit_rate=hits / sum(r.input_tokens for r in records),
        request_hit_rate=sum(r.hit_tokens > 0 for r in records) / len(records),
    )


# ----------------------------------------------------------------- fix_arrivals
def _full_prompts(workload: Workload) -> dict[tuple[int, int], np.ndarray]:
    return {(r.session_id, r.turn): r.prompt for r in workload.requests()}


def test_fixed_arrivals_are_open_loop_sorted_and_prefix_closed(chat, tmp_path):
    fixed = fix_arrivals(chat, tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=40)
    arr = fixed.index["arrival_s"]
    assert fixed.num_rows == 40 and not np.isnan(arr).any()
    assert (np.diff(arr) > 0).all()
    sid, turn = fixed.index["session_id"], fixed.index["turn"]
    for s in np.unique(sid):
        assert sorted(turn[sid == s]) == list(range((sid == s).sum()))
    # The kept requests are the 40 earliest, with the same full prompts.
    before = _full_prompts(chat)
    for key, prompt in _full_prompts(fixed).items():
        np.testing.assert_array_equal(prompt, before[key])
    meta = fixed.metadata["fixed_arrivals"]
    assert meta["rows"] == 40 and meta["session_starts"] == "file arrival_s"
    assert fixed.metadata["generator"] == "chat"


def test_closed_loop_turns_follow_previous_arrival_plus_think(chat, tmp_path):
    fixed = fix_arrivals(chat, tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=None)
    assert fixed.num_rows == chat.num_rows
    src, new = chat.index, fixed.index
    at = {
        (int(s), int(t)): a
        for s, t, a in zip(new["session_id"], new["turn"], new["arrival_s"], strict=True)
    }
    for s, t, a, think in zip(
        src["session_id"], src["turn"], src["arrival_s"], src["think_s"], strict=True
    ):
        expected = a if t == 0 else at[(int(s), int(t) - 1)] + think
        assert at[(int(s), int(t))] == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_fix_arrivals_is_deterministic_and_seeded(tmp_path):
    rng = np.random.default_rng(1)
    rows = [
        WorkloadRow(
            s, t, None, 0.5 if t else None, rng.integers(0, 99, 5, np.int32), t > 0, None, 2
        )
        for s in range(6)
        for t in range(2)
    ]
    src = Workload.open(write_rows(tmp_path / "closed.parquet", rows))
    a = fix_arrivals(src, tmp_path / "a.parquet", session_rate=2.0, seed=3, max_requests=None)
    b = fix_arrivals(src, tmp_path / "b.parquet", session_rate=2.0, seed=3, max_requests=None)
    c = fix_arrivals(src, tmp_path / "c.parquet", session_rate=2.0, seed=4, max_requests=None)
    np.testing.assert_array_equal(a.index["arrival_s"], b.index["arrival_s"])
    assert not np.array_equal(a.index["arrival_s"], c.index["arrival_s"])
    assert a.index["arrival_s"][0] == 0.0  # the first session starts at t = 0
    assert a.metadata["fixed_arrivals"]["session_starts"] == "poisson"
    with pytest.raises(TwinError, match="--session-rate"):
        fix_arrivals(src, tmp_path / "d.parquet", session_rate=None, seed=0, max_requests=None)
    assert not (tmp_path / "d.parquet").exists()


def test_metadata_rate_serves_when_session_starts_are_missing(tmp_path):
    rows = [
        WorkloadRow(s, 0, None, None, np.arange(4, dtype=np.int32), False, None, 1)
        for s in range(3)
    ]
    path = tmp_path / "w.parquet"
    from workloads.writer import WorkloadWriter

    with WorkloadWriter(path, {"generator": "test", "session_rate": 4.0}) as w:
        w.write_all(rows)
    fixed = fix_arrivals(
        Workload.open(path), tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=None
    )
    assert fixed.metadata["fixed_arrivals"]["session_rate"] == 4.0


def test_tied_arrivals_are_spread_in_row_order(tmp_path):
    p = np.arange(6, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 1.0, None, p, False, None, 1),
        WorkloadRow(1, 0, 1.0, None, p + 10, False, None, 1),
        WorkloadRow(0, 1, None, None, p[:2], True, None, 1),
    ]  # null think: same instant
    fixed = fix_arrivals(
        Workload.open(write_rows(tmp_path / "t.parquet", rows)),
        tmp_path / "f.parquet",
        session_rate=None,
        seed=0,
        max_requests=None,
    )
    arr = fixed.index["arrival_s"]
    assert list(fixed.index["session_id"]) == [0, 1, 0] and (np.diff(arr) > 0).all()
    assert arr[-1] - arr[0] < 1e-12
    assert fixed.metadata["fixed_arrivals"]["tied_arrivals_spread"] == 2


def test_fix_arrivals_refuses_bad_arguments(chat, tmp_path):
    with pytest.raises(TwinError, match="--requests"):
        fix_arrivals(chat, tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=0)
    with pytest.raises(TwinError, match="--session-rate"):
        fix_arrivals(chat, tmp_path / "f.parquet", session_rate=-1.0, seed=0, max_requests=None)


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


# ----------------------------------------------------------------- the command
def _app() -> typer.Typer:
    from twin.cli import app

    return app


def _invoke(*args: str):
    return runner.invoke(_app(), ["validate", *args])


@pytest.fixture
def fake_executor(monkeypatch):
    """The command with the fake executor in place of the torch one."""
    import twin.cli.validate as cli

    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    monkeypatch.setattr(cli, "_executor", lambda: (torch, fake_reference, FakeConfig))


def test_command_with_a_fake_executor(fake_executor, tmp_path):
    out = tmp_path / "val"
    shipped = str(shipped_profiles()["cpu"])  # the fake prices with it: errors are 0
    result = _invoke(
        "--generate", "chat", "--requests", "25", "--profile", shipped, "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    for text in (
        "service time",
        "TTFT P95",
        "token hit rate",
        "30% of the unbounded footprint",
        "all targets met",
        "validation.json",
    ):
        # Whitespace-normalised: the table title wraps at the table's width.
        assert text in " ".join(result.output.split()), text
    for name in ("workload.parquet", VALIDATION_FILE, REQUESTS_FILE, PLOT_FILE):
        assert (out / name).is_file(), name
    result = _invoke(
        "--generate",
        "chat",
        "--requests",
        "10",
        "--cache-gb",
        "0.001",
        "--policy",
        "sglang+",
        "--profile",
        shipped,
        "--out",
        str(out),
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["cache"] == {
        "bytes": 1_000_000,
        "source": "--cache-gb",
        "unbounded_footprint_bytes": None,
    }
    assert data["policy"] == "sglang+" and data["metrics"]["requests"] == 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give one of --workload"),
        (("--generate", "chat", "--workload", "w.parquet"), "give one of --workload"),
        (("--generate", "nope"), "unknown generator"),
        (("--generate", "chat", "--device", "tpu"), "--device 'tpu'"),
        (("--generate", "chat", "--policy", "oracle"), "hindsight"),
        (("--generate", "chat", "--policy", "nope"), "unknown policy"),
        (("--generate", "chat", "--cache-gb", "-1"), "--cache-gb"),
        (("--generate", "chat", "--session-rate", "0"), "--session-rate"),
        (("--workload", "missing.parquet"), "no such workload file"),
        (("--generate", "chat", "--model", "nope"), "unknown model"),
    ],
)
def test_bad_input_is_one_twin_error(fake_executor, tmp_path, args, message):
    result = _invoke(*args, "--out", str(tmp_path / "o"))
    assert result.exit_code != 0
    assert isinstance(result.exception, TwinError), result.output
    assert message in str(result.exception)
    assert not (tmp_path / "o" / VALIDATION_FILE).exists()


def test_cuda_without_a_gpu_is_refused(fake_executor, tmp_path):
    result = _invoke("--generate", "chat", "--device", "cuda", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, TwinError) and "no CUDA GPU" in str(result.exception)


def test_missing_torch_gives_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # ``import torch`` now raises ImportError
    result = _invoke("--generate", "chat", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, TwinError), result.output
    assert "pip install 'twin[torch]'" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_help_has_examples():
    result = _invoke("--help")
    assert result.exit_code == 0
    assert "Examples" in result.output and "--generate" in result.output


@pytest.mark.slow  # a whole validation on PyTorch: about a minute on a loaded CPU
def test_end_to_end_on_the_real_executor(tmp_path):
    """tiny-hybrid on the CPU: the executor and the twin hit the same tokens on every row."""
    pytest.importorskip("torch")
    out = tmp_path / "val"
    result = _invoke(
        "--generate", "chat", "--requests", "20", "--repeats", "1", "--out", str(out), "--json"
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((out / VALIDATION_FILE).read_text())
    assert saved == json.loads(result.stdout)
    hit = saved["metrics"]["hit"]
    assert hit["identical"] and hit["measured"] == hit["predicted"]
    assert saved["executor"]["token_hit_rate"] == pytest.approx(hit["measured"]["token_hit_rate"])
    assert saved["device_name"] and saved["dtype"] == "float32" and saved["implementations"]
    assert saved["metrics"]["requests"] == 20
    for key in (
        "service_median_rel_err",
        "ttft_p50_rel_err",
        "ttft_p95_rel_err",
        "hit_tokens_identical",
    ):
        assert key in saved["targets"]
    assert (out / REQUESTS_FILE).is_file() and (out / PLOT_FILE).is_file()
    # Step 1 calibrated the CPU at tiny-hybrid's shapes, with its layers' host overhead.
    prof = load_profile(str(out / "profile.json"))
    assert prof.layer_overhead is not None and prof.provenance["shape_model"] == "tiny-hybrid"


# ----------------------------------------------------------------- inputs first, outputs as a set
def test_a_missing_workload_is_refused_before_calibrating(fake_executor, tmp_path, monkeypatch):
    # Regression (issue 17): it calibrated for minutes, then left OUT/profile.json behind.
    import twin.validate.entry as entry

    def no_calibration(*args, **kwargs):
        raise AssertionError("calibrated before checking the inputs")

    monkeypatch.setattr(entry, "_calibrate", no_calibration)
    result = _invoke("--workload", str(tmp_path / "missing.parquet"), "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, TwinError), result.output
    assert "no such workload file" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_a_failed_validation_leaves_no_output_not_even_the_calibrated_profile(
    tmp_path, monkeypatch
):
    import twin.validate.entry as entry

    def calibrate(device, spec, path, bar):
        path.write_text(shipped_profiles()["cpu"].read_text())  # what a calibration leaves
        return load_profile("cpu")

    def broken(*args, **kwargs):
        raise TwinError("executor failed")

    monkeypatch.setattr(entry, "_calibrate", calibrate)
    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    out = tmp_path / "o"
    with pytest.raises(TwinError, match="executor failed"):
        entry.validate_model(
            "tiny-hybrid",
            out,
            generate="chat",
            requests=5,
            executor=lambda: (torch, broken, FakeConfig),
        )
    assert not out.exists()
    # The same run with a working executor publishes the whole set at once.
    report = entry.validate_model(
        "tiny-hybrid",
        out,
        generate="chat",
        requests=5,
        executor=lambda: (torch, fake_reference, FakeConfig),
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["profile.json", "workload.parquet", VALIDATION_FILE, REQUESTS_FILE, PLOT_FILE]
    )
    assert report["workload"]["path"] == str(out / "workload.parquet")
    assert json.loads((out / VALIDATION_FILE).read_text())["outputs"]["plot"] == str(
        out / PLOT_FILE
    )
