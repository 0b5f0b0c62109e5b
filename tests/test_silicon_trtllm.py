"""What InferenceMAX's and aiconfigurator's TensorRT-LLM rows ran with (issue 31,
``twin.validate.silicon``): each script's layout, limits, KV share, MoE backend, MTP,
overlap scheduler and CUDA graphs, at the release and day the row was measured."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from silicon_small import CONFIGS, _inferencemax_r1, _layout, _rows

from twin.engine.adp_balance import adp_balance
from twin.engine.config import EngineConfig, SchedulerConfig
from twin.engine.modes import get_mode
from twin.presets import get_model
from twin.validate import silicon as sil
from twin.validate.silicon import score as sil_score


def test_inferencemax_llama_70b_trtllm_rows_hold_contexts_at_1k_1k_below_8_gpus() -> None:
    """The Llama-3.1-70B TensorRT-LLM scripts' batch waiting (20 iterations, 0.9 of the
    token budget) at ISL/OSL 1k/1k and fewer than 8 GPUs; none elsewhere, nor for
    another model; the flags reach the trtllm mode's scheduler options."""
    imax = replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        source="source_file=2026-04-06.csv; model=x; silicon_concurrency=4",
        model_path="meta-llama/Llama-3.1-70B",
        backend="trtllm",
        isl=1024,
        osl=1024,
        concurrency=4,
    )
    wait = {"batch_wait_timeout_iters": "20", "batch_wait_max_tokens_ratio": "0.9"}
    for tp in (1, 2, 4):
        row = replace(imax, tp=tp)
        assert sil.deployment(row, "trtllm") == {"max_batched_tokens": 16384, "sets": wait}
    for other in (replace(imax, tp=8), replace(imax, osl=8192), replace(imax, isl=8192)):
        assert sil.deployment(other, "trtllm") == {"max_batched_tokens": 16384}
    gptoss = replace(imax, model_path="openai/gpt-oss-120b")
    gptoss_limits = {"max_batched_tokens": 20000, "memory_utilization": 0.85}
    assert sil.deployment(gptoss, "trtllm") == gptoss_limits
    assert sil.deployment(imax, "trtllm", "defaults") == {}
    options = get_mode("trtllm").settings(get_model("tiny-transformer"), wait)
    assert options["scheduler_options"]["batch_wait_timeout_iters"] == 20


def test_inferencemax_gptoss_trtllm_rows_balance_their_attention_dp_contexts() -> None:
    """InferenceMAX's gpt-oss TensorRT-LLM script writes ``attention_dp_config:
    {enable_balance: true}`` under attention DP and nothing else of it: the balance at
    ``AttentionDpConfig``'s defaults (timeout 50, batching wait 10 iterations); no
    balance without attention DP or in another collection."""

    gptoss = replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        source="source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=64",
        model_path="openai/gpt-oss-120b",
        system="b200_sxm",
        backend="trtllm",
        isl=1024,
        osl=1024,
        tp=1,
        attention_dp=2,
        moe_ep=2,
        concurrency=64,
    )
    sets = {"attention_dp_balance": "true"}
    limits = {"max_batched_tokens": 20000, "memory_utilization": 0.85}
    assert sil.deployment(gptoss, "trtllm") == {**limits, "sets": sets}
    assert sil.deployment(replace(gptoss, attention_dp=1, tp=2), "trtllm") == limits
    aiperf = replace(gptoss, source="source_file=aiconfigurator.csv; model=x")
    assert sil.inferencemax_adp_balance(aiperf) == {}
    options = get_mode("trtllm").settings(get_model("tiny-transformer"), sets)["scheduler_options"]
    config = EngineConfig(scheduling=SchedulerConfig(scheduler_options=options, max_running=512))
    balance = adp_balance(config, object())  # type: ignore[arg-type]  # no tau: one a step
    assert balance is not None and (balance.timeout, balance.batching) == (50, 10)


def test_trtllm_rows_run_with_the_overlap_scheduler() -> None:
    """TensorRT-LLM's overlap scheduler is on unless disabled (``TorchLlmArgs``
    ``disable_overlap_scheduler`` false; aiconfigurator's rule keeps it on): every
    aggregated TensorRT-LLM row runs with it, whatever the deployment; not under attention
    DP (not modelled on a rank) or pipeline stages, not for another engine."""
    row = _rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"]
    assert sil.trtllm_overlap_scheduler(row) == {"overlap_scheduler": "true"}
    assert sil.trtllm_overlap_scheduler(replace(row, attention_dp=2)) == {}
    assert sil.trtllm_overlap_scheduler(replace(row, pp=2)) == {}  # a pipeline refuses it
    assert sil.trtllm_overlap_scheduler(replace(row, backend="vllm")) == {}
    for kind in ("benchmark", "defaults"):
        plan = sil.plan_row(row, CONFIGS, kind)
        assert isinstance(plan, sil.RowPlan)
        assert plan.deployment["sets"] == {"overlap_scheduler": "true"}
    plan = sil.plan_row(row, CONFIGS, "benchmark", pool=True)  # a disaggregated pool: off
    assert isinstance(plan, sil.RowPlan) and "sets" not in plan.deployment


def test_trtllm_1_3_0rc1_gap_analysis_rows_are_not_expressed() -> None:
    """The gap-analysis collection's TensorRT-LLM 1.3.0rc1 rows (TPOT not set by their
    own decode batch: ``twin.validate.silicon.harness``) are counted under their reason,
    before anything is priced; the same collection's other releases, and 1.3.0rc1 rows
    of another source, are planned."""
    row = _rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"]
    src = "source_file=/Users/x/aic-auto-gap-analysis/data/b200_sxm/trtllm/1.3.0rc1/m.csv; "
    gap = replace(row, backend_version="1.3.0rc1", source=src + "silicon_concurrency=4")
    assert sil.gap_analysis_tpot_unpaced(gap)
    assert sil.plan_row(gap, CONFIGS) == sil.REASON_GAP_ANALYSIS_TPOT
    assert sil.plan_row(gap, CONFIGS, "defaults") == sil.REASON_GAP_ANALYSIS_TPOT
    for other in (
        replace(gap, backend_version="1.3.0rc5"),
        replace(gap, backend="vllm"),
        replace(gap, source="source_file=2026-04-06.csv; silicon_concurrency=4"),
        replace(gap, source="/x/aic-auto-gap-analysis/y.csv; silicon_concurrency=4"),
    ):
        assert not sil.gap_analysis_tpot_unpaced(other)
    assert isinstance(sil.plan_row(replace(gap, backend_version="1.3.0rc5"), CONFIGS), sil.RowPlan)


def test_trtllm_1_2_0rc2_attention_dp_rows_are_not_expressed() -> None:
    """TensorRT-LLM 1.2.0rc2 computed gpt-oss wrongly under attention DP (InferenceX #514:
    ``twin.validate.silicon.harness``): its attention-DP rows are counted under their
    reason before anything is priced; the same release without attention DP, and the
    fixed 1.2.0rc2.post2 with it, are planned."""
    row = _rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"]
    broken = replace(row, backend_version="1.2.0rc2", attention_dp=2)
    assert sil.attention_dp_broken(broken)
    for kind in ("benchmark", "defaults"):
        assert sil.plan_row(broken, CONFIGS, kind) == sil.REASON_BROKEN_ATTENTION_DP
    for other in (
        replace(broken, attention_dp=1),
        replace(broken, attention_dp=None),
        replace(broken, backend_version="1.2.0rc2.post2"),
    ):
        assert not sil.attention_dp_broken(other)
        assert isinstance(sil.plan_row(other, CONFIGS), sil.RowPlan)
    assert not sil.attention_dp_broken(replace(broken, backend="sglang"))


def test_inferencemax_mtp_rows_run_with_mtp() -> None:
    """InferenceMAX's DeepSeek-R1 TensorRT-LLM runs on B200 in the 1.2.0rc6.post3 image
    are its ``-mtp`` configurations: MTP with 3 drafts (1 with attention DP); the
    post2 image, other systems and aiconfigurator's collection run without."""
    model = get_model("deepseek-r1")
    row = _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post3", isl=64)
    spec = sil.inferencemax_speculation(row, model)
    assert spec is not None and (spec["method"], spec["num_speculative_tokens"]) == ("mtp", 3)
    dp = sil.inferencemax_speculation(replace(row, attention_dp=8), model)
    assert dp is not None and dp["num_speculative_tokens"] == 1
    for other in (
        replace(row, backend_version="1.2.0rc6.post2"),
        replace(row, system="h200_sxm"),
        replace(row, source="/x/aic-auto-gap-analysis/y.csv; silicon_concurrency=4"),
        replace(row, model_path="meta-llama/Llama-3.1-70B"),
    ):
        assert sil.inferencemax_speculation(other, model) is None
    assert sil_score._deployment_text({"max_batched_tokens": 1152, "speculative": spec}) == (
        f"max_batched_tokens=1152 speculative=mtp:3@{spec['acceptance_length']:.2f}"
    )
    # the -mtp scripts' limits: (3 + 1) x 4 clients + 64 + 64 in 64s, max_batch_size CONC
    share = {"memory_utilization": 0.8}  # the scripts' free_gpu_memory_fraction
    assert sil.deployment(row, "trtllm") == {"max_batched_tokens": 192, "max_running": 4, **share}
    # the plain scripts': c + ISL + 64 in 64s, at least 8192
    plain = replace(row, backend_version="1.2.0rc6.post2", isl=1024)
    assert sil.deployment(plain, "trtllm") == {"max_batched_tokens": 8192, **share}


@pytest.mark.parametrize(
    ("system", "precision", "lengths", "conc", "tp", "ran"),
    [
        # fp4 B200 (dsr1_fp4_b200_trt_slurm.sh): EP above 32 clients at tp 4, DP from 256
        ("b200_sxm", "fp4", (1024, 1024), 32, 4, (4, 1, 4, 1)),
        ("b200_sxm", "fp4", (1024, 1024), 128, 4, (4, 1, 1, 4)),
        ("b200_sxm", "fp4", (1024, 8192), 256, 4, (1, 4, 1, 4)),
        # ... at 8k/1k DP with EP above 32; tp 8 1k/1k EP above 8
        ("b200_sxm", "fp4", (8192, 1024), 64, 8, (1, 8, 1, 8)),
        ("b200_sxm", "fp4", (8192, 1024), 32, 8, (8, 1, 8, 1)),
        ("b200_sxm", "fp4", (1024, 1024), 16, 8, (8, 1, 1, 8)),
        ("b200_sxm", "fp4", (1024, 1024), 8, 8, (8, 1, 8, 1)),
        # fp8 B200 and H200: EP always; DP above 32 (B200 1k/1k, H200 8k/1k) or 64
        ("b200_sxm", "fp8", (1024, 1024), 32, 8, (8, 1, 1, 8)),
        ("b200_sxm", "fp8", (1024, 1024), 64, 8, (1, 8, 1, 8)),
        ("h200_sxm", "fp8", (1024, 1024), 64, 8, (8, 1, 1, 8)),
        ("h200_sxm", "fp8", (8192, 1024), 64, 8, (1, 8, 1, 8)),
        # lengths no branch names: the scripts' defaults (fp4 EP 1, fp8 EP = TP; no DP)
        ("b200_sxm", "fp4", (2048, 1024), 512, 8, (8, 1, 8, 1)),
        ("b200_sxm", "fp8", (2048, 1024), 512, 8, (8, 1, 1, 8)),
        ("h200_sxm", "fp8", (2048, 1024), 512, 8, (8, 1, 1, 8)),
    ],
)
def test_inferencemax_trtllm_rows_before_the_search_space_run_their_scripts_layout(
    system: str,
    precision: str,
    lengths: tuple[int, int],
    conc: int,
    tp: int,
    ran: tuple[int, int, int, int],
) -> None:
    """InferenceMAX's DeepSeek-R1 TensorRT-LLM rows that name no image and were measured
    before 2025-11-03 (the CSV writes them ep 1, no attention DP) ran the 1.1.0rc2.post2
    image with the layout their script chose from tp, the lengths and the clients, and
    its budget without the 8192 floor; a row naming its image, measured later, of
    another engine or already carrying a layout keeps its columns."""
    isl, osl = lengths
    source = f"source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency={conc}; "
    row = _inferencemax_r1(
        backend="trtllm",
        backend_version="",
        precision=precision,
        tp=tp,
        attention_dp=1,
        moe_tp=tp,
        moe_ep=1,
        isl=isl,
        osl=osl,
        batch_size=conc,
    )
    measured = source + "measured=2025-11-02T00:00:00.000Z; wip=False"
    row = replace(row, system=system, concurrency=conc, source=measured)
    read = sil.inferencemax_trtllm_script_layout(row)
    assert _layout(read) == ran
    assert read.backend_version == "1.1.0rc2.post2"
    assert read.batch_size * read.attention_dp == conc
    assert read.csv_layout.startswith("script layout")
    assert (read.tp or 1) * (read.attention_dp or 1) == (read.moe_tp or 1) * (read.moe_ep or 1)
    tokens = sil.deployment(read, "trtllm")["max_batched_tokens"]
    assert tokens == -(-(conc + isl + 64) // 64) * 64  # no 8192 floor
    for kept in (
        replace(row, backend_version="1.2.0rc6.post2"),
        replace(row, source=source + "measured=2025-11-03T00:00:00.000Z"),
        replace(row, backend="vllm"),
        replace(row, moe_tp=1, moe_ep=tp),
        replace(row, model_path="meta-llama/Llama-3.1-70B"),
    ):
        assert sil.inferencemax_trtllm_script_layout(kept) == kept


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_inferencemax_unnamed_h200_gptoss_trtllm_rows_ran_expert_parallel(tp: int) -> None:
    """InferenceMAX's gpt-oss-120b H200 TensorRT-LLM rows that name no image, measured
    2025-11-02 (the CSV writes them ep 1, as every row before 2025-11-03), ran
    ``gptoss_fp4_h200_trt_slurm.sh`` at 9596d23d7: ``--ep_size=$TP`` on the gpt-oss-dev
    image; a row naming its image, measured on another day, on B200, on one GPU, of
    another engine or model keeps its columns."""
    source = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=16; "
    row = replace(
        _inferencemax_r1(backend="trtllm", backend_version="", precision="fp4"),
        model_path="openai/gpt-oss-120b",
        system="h200_sxm",
        tp=tp,
        attention_dp=1,
        moe_tp=tp,
        moe_ep=1,
        concurrency=16,
        batch_size=16,
        source=source + "measured=2025-11-02T00:00:00.000Z; wip=False",
    )
    read = sil.inferencemax_trtllm_script_layout(row)
    assert _layout(read) == (tp, 1, 1, tp)
    assert read.backend_version == "gpt-oss-dev"
    assert read.csv_layout.startswith("script layout")
    assert sil.inferencemax_trtllm_script_layout(read) == read
    for kept in (
        replace(row, backend_version="gpt-oss-dev"),
        replace(row, source=source + "measured=2025-11-03T00:00:00.000Z"),
        replace(row, source=source + "measured=2025-09-28T00:00:00.000Z"),
        replace(row, system="b200_sxm"),
        replace(row, tp=1, moe_tp=1),
        replace(row, backend="vllm"),
        replace(row, model_path="meta-llama/Llama-3.1-70B"),
    ):
        assert sil.inferencemax_trtllm_script_layout(kept) == kept


@pytest.mark.parametrize("system", ["b200_sxm", "h200_sxm"])
def test_inferencemax_gptoss_trtllm_scripts_keep_0_85_of_the_free_memory(system: str) -> None:
    """Every InferenceMAX gpt-oss-120b TensorRT-LLM script writes
    ``kv_cache_config.free_gpu_memory_fraction: 0.85``; the Llama-3.1-70B ones write none
    (the engine's 0.9: no ``memory_utilization`` in the deployment)."""
    row = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc2", precision="fp4"),
        model_path="openai/gpt-oss-120b",
        system=system,
    )
    assert sil.deployment(row, "trtllm")["memory_utilization"] == 0.85
    llama = replace(row, model_path="meta-llama/Llama-3.1-70B")
    assert "memory_utilization" not in sil.deployment(llama, "trtllm")
    assert "memory_utilization" not in sil.deployment(replace(row, backend="vllm"), "vllm")


def test_inferencemax_1_1_0rc2_mtp_runs_are_told_apart_by_their_measured_day() -> None:
    """The 1.1.0rc2.post2 image served InferenceMAX's plain and -mtp DeepSeek-R1
    TensorRT-LLM configurations; the rows measured on 2026-01-14 (the sweep of the commit
    that added the -mtp ones) ran MTP (3 drafts, 1 with attention DP), with the -mtp
    scripts' token budget; rows of other days run plain, with the 1.1.0rc2 scripts' budget
    (no 8192 floor until the scripts' 2026-01-21 change), but for the attention-DP row of
    2026-01-28, at a point only the -mtp configuration had."""
    model = get_model("deepseek-r1")
    day = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4; measured="
    row = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.1.0rc2.post2", precision="fp8", tp=8),
        system="h200_sxm",
        isl=1024,
        osl=8192,
        source=day + "2026-01-14T22:26:21Z; wip=False",
    )
    assert sil.measured_on(row) == "2026-01-14"
    spec = sil.inferencemax_speculation(row, model)
    assert spec is not None and (spec["method"], spec["num_speculative_tokens"]) == ("mtp", 3)
    # the other dump's stamp of the same sweep, and B200
    other_dump = replace(row, source=day + "2026-01-14T00:00:00.000Z; wip=False")
    assert sil.inferencemax_mtp_drafts(other_dump) == 3
    assert sil.inferencemax_mtp_drafts(replace(row, system="b200_sxm")) == 3
    assert sil.inferencemax_mtp_drafts(replace(row, attention_dp=8, tp=1)) == 1
    # (3 + 1) x 4 clients + 1024 + 64 in 64s, max_batch_size = CONC
    assert sil.deployment(row, "trtllm") == {
        "max_batched_tokens": 1152,
        "max_running": 4,
        "memory_utilization": 0.75,  # the H200 script's free_gpu_memory_fraction
    }
    for plain in (
        replace(row, source=day + "2025-12-15T00:00:00.000Z"),
        replace(row, source=day + "2026-01-28T06:18:44Z"),
        replace(row, source="source_file=2026-03-25.csv; model=DeepSeek-R1"),
        replace(row, backend_version="1.2.0rc6.post2", source=row.source),
    ):
        assert sil.inferencemax_mtp_drafts(plain) is None
    # the plain 1.1.0rc2 scripts: CONC + ISL + 64 in 64s, without the 8192 floor
    plain = replace(row, source=day + "2025-12-15T00:00:00.000Z", concurrency=64)
    assert sil.deployment(plain, "trtllm") == {
        "max_batched_tokens": 1152,
        "memory_utilization": 0.75,
    }
    later = replace(plain, system="b200_sxm", backend_version="1.2.0rc6.post2")
    assert sil.deployment(later, "trtllm") == {
        "max_batched_tokens": 8192,
        "memory_utilization": 0.8,
    }
    # ... the same image after the scripts' floor came (InferenceX 64af5a771, 2026-01-21)
    floored = replace(plain, source=day + "2026-01-28T06:18:44Z")
    assert sil.deployment(floored, "trtllm") == {
        "max_batched_tokens": 8192,
        "memory_utilization": 0.75,
    }
    eve = replace(plain, source=day + "2026-01-21T12:00:00Z")  # the commit came at 23:05
    assert sil.deployment(eve, "trtllm")["max_batched_tokens"] == 1152
    # that day's attention-DP row is at a point only the -mtp configuration had (e28c038f8):
    # MTP 1, the -mtp script's (1 + 1) x 256 / 8 + 1024 + 64 in 64s, no floor
    mtp = replace(floored, concurrency=256, tp=1, attention_dp=8)
    assert sil.inferencemax_mtp_drafts(mtp) == 1
    assert sil.deployment(mtp, "trtllm")["max_batched_tokens"] == 1152


def test_inferencemax_deepseek_trtllm_attention_dp_rows_run_their_scripts_limits() -> None:
    """InferenceMAX's DeepSeek-R1 TensorRT-LLM scripts hold contexts across attention-DP
    ranks (``attention_dp_config``: balance on, 60 iterations, no batching wait) and their
    -mtp scripts size ``--max_batch_size`` per rank (CONC / TP in 1.1.0rc2.post2, CONC / 4
    for fp4 and CONC / 8 for fp8 in 1.2.0rc6.post3) and ``--max_num_tokens`` from it."""
    balance = {
        "attention_dp_balance": "true",
        "attention_dp_timeout_iters": "60",
        "attention_dp_batching_wait_iters": "0",
    }
    day = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=256; measured="
    mtp = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.1.0rc2.post2", precision="fp8", tp=1),
        system="h200_sxm",
        isl=1024,
        osl=1024,
        concurrency=256,
        attention_dp=8,
        source=day + "2026-01-14T22:26:21Z; wip=False",
    )
    assert sil.inferencemax_mtp_drafts(mtp) == 1
    # MTP 1: (1 + 1) x 256 / 8 + 1024 + 64 = 1152 tokens, 32 requests a rank
    assert sil.deployment(mtp, "trtllm") == {
        "max_batched_tokens": 1152,
        "max_running": 32,
        "memory_utilization": 0.75,  # the H200 script's free_gpu_memory_fraction
        "sets": balance,
    }
    post3 = replace(mtp, system="b200_sxm", backend_version="1.2.0rc6.post3", osl=8192)
    fp4 = replace(post3, precision="fp4")
    assert sil.deployment(fp4, "trtllm")["max_running"] == 64  # 256 / 4
    assert sil.deployment(fp4, "trtllm")["max_batched_tokens"] == 1216  # 2 x 64 + 1088
    assert sil.deployment(post3, "trtllm")["max_running"] == 32  # fp8: 256 / 8
    assert sil.inferencemax_mtp_batch(replace(fp4, concurrency=2)) == 2  # below the divisor
    # the plain scripts: the budget as before, no --max_batch_size, the balance
    plain = replace(fp4, backend_version="1.2.0rc6.post2")
    assert sil.deployment(plain, "trtllm") == {
        "max_batched_tokens": 8192,
        "memory_utilization": 0.8,
        "sets": {**balance, "moe_backend": "CUTLASS"},  # the fp4 script's backend under DP
    }
    # no attention DP: no balance, max_batch_size CONC, the fp4 script's TRTLLM experts
    alone = replace(fp4, attention_dp=1, tp=8, concurrency=4)
    assert sil.inferencemax_adp_balance(alone) == {}
    assert sil.deployment(alone, "trtllm")["sets"] == {"moe_backend": "TRTLLM"}
    assert sil.inferencemax_mtp_batch(alone) == 4
    # another engine or collection: none
    assert sil.inferencemax_adp_balance(replace(plain, backend="sglang")) == {}


def test_inferencemax_deepseek_trtllm_rows_keep_their_scripts_kv_share() -> None:
    """Every InferenceMAX DeepSeek-R1 TensorRT-LLM script writes
    ``kv_cache_config.free_gpu_memory_fraction``: 0.75 on H200, 0.8 on B200, with the
    fp8 1.2.0rc6.post2 script's 0.7 (1k/8k, 256 clients) and 0.75 (8k/1k on 4 GPUs)
    and the fp8 1.2.0rc6.post3 (-mtp) script's 0.7 under attention DP; the engine's
    default (no ``memory_utilization``) for other models and collections."""
    day = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=32; measured="
    fp8 = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post2", precision="fp8"),
        isl=8192,
        osl=1024,
        tp=4,
        concurrency=32,
        source=day + "2026-01-29T15:27:29Z; wip=False",
    )
    assert sil.deployment(fp8, "trtllm")["memory_utilization"] == 0.75  # 8k/1k on 4 GPUs
    assert sil.deployment(replace(fp8, tp=8), "trtllm")["memory_utilization"] == 0.8
    wide = replace(fp8, isl=1024, osl=8192, tp=1, attention_dp=8, concurrency=256)
    assert sil.deployment(wide, "trtllm")["memory_utilization"] == 0.7
    mtp = replace(wide, backend_version="1.2.0rc6.post3")  # the -mtp script under DP
    assert sil.inferencemax_mtp_drafts(mtp) == 1
    assert sil.deployment(mtp, "trtllm")["memory_utilization"] == 0.7
    alone = replace(mtp, tp=8, attention_dp=1, concurrency=4)
    assert sil.deployment(alone, "trtllm")["memory_utilization"] == 0.8
    fp4 = replace(fp8, precision="fp4")
    assert sil.deployment(fp4, "trtllm")["memory_utilization"] == 0.8
    h200 = replace(fp8, system="h200_sxm", backend_version="1.1.0rc2.post2", tp=8)
    assert sil.deployment(h200, "trtllm")["memory_utilization"] == 0.75
    # another engine or model: no share of the scripts'
    assert sil.inferencemax_kv_fraction(replace(fp8, backend="sglang")) is None
    llama = replace(
        fp8,
        model_path="meta-llama/Llama-3.1-70B-Instruct",
        source="source_file=2026-03-25.csv; model=Llama-3.1-70B; silicon_concurrency=32",
    )
    assert "memory_utilization" not in sil.deployment(llama, "trtllm")


def test_inferencemax_deepseek_fp8_trtllm_experts_priced_by_the_scripts_moe_backend() -> None:
    """Each InferenceMAX DeepSeek-R1 fp8 TensorRT-LLM script's ``moe_config.backend`` (read
    at the commit its rows ran); a DEEPGEMM run on B200 and a CUTLASS run on H200 price the
    checkpoint's block-scaled experts with the fp8-block table (the kernel each GPU's table
    times); B200's TRTLLM backend, other GPUs and per-tensor checkpoints keep the price."""
    from twin.validate.silicon.precision import trtllm_block_experts

    backend = sil.inferencemax_trtllm_moe_backend
    fp8 = _inferencemax_r1(
        backend="trtllm", backend_version="1.2.0rc6.post2", precision="fp8", tp=8, moe_ep=1
    )
    fp8 = replace(fp8, isl=1024, osl=1024)
    assert backend(fp8) == "TRTLLM"
    assert backend(replace(fp8, concurrency=256)) == "TRTLLM"  # no 1k/1k branch at ec7bafaae
    assert backend(replace(fp8, osl=8192, concurrency=256)) == "DEEPGEMM"
    assert backend(replace(fp8, osl=8192, concurrency=128)) == "TRTLLM"  # from 256 only
    post3 = replace(fp8, backend_version="1.2.0rc6.post3")
    assert (backend(post3), backend(replace(post3, attention_dp=8))) == ("TRTLLM", "DEEPGEMM")
    rc2 = replace(fp8, backend_version="1.1.0rc2.post2")
    assert (backend(rc2), backend(replace(rc2, system="h200_sxm"))) == ("DEEPGEMM", "CUTLASS")
    assert backend(replace(fp8, precision="fp4")) is None
    assert backend(replace(fp8, backend="sglang")) is None
    block = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    per_tensor = sil.RowPrecision("fp8", "fp8")
    got = trtllm_block_experts(per_tensor, block, "DEEPGEMM", "b200")
    assert (got.weights, got.moe, got.label) == (
        "fp8",
        "fp8-block",
        "fp8, fp8-block experts, fp8 KV",
    )
    assert trtllm_block_experts(per_tensor, block, "CUTLASS", "h200").moe == "fp8-block"
    for config, moe_backend, gpu in (
        (block, "TRTLLM", "b200"),  # TRTLLMGenFusedMoE: no table of its kernel
        (block, "DEEPGEMM", "h200"),
        (block, None, "b200"),
        ({"quantization_config": {"quant_method": "fp8"}}, "DEEPGEMM", "b200"),
    ):
        assert trtllm_block_experts(per_tensor, config, moe_backend, gpu) is per_tensor


def test_inferencemax_deepseek_trtllm_scripts_capture_piecewise_graphs_and_delay_batching() -> None:
    """Where the row's InferenceMAX script (read at the commit its sweep ran) turns the
    piecewise CUDA graphs on, a row without MTP gets no eager host time; the fp8 B200 plain
    script's DELAY_BATCHING holds contexts (40 iterations, 0.8) at 1k/1k from 64 clients.
    Other images, GPUs and collections keep the eager context step."""
    r1 = get_model("deepseek-r1")
    wait = {"batch_wait_timeout_iters": "40", "batch_wait_max_tokens_ratio": "0.8"}
    fp8 = _inferencemax_r1(
        backend="trtllm", backend_version="1.2.0rc6.post2", precision="fp8", tp=8, moe_ep=1
    )

    def piecewise(row: sil.SiliconRow, isl: int, osl: int, conc: int) -> bool:
        return sil.inferencemax_trtllm_piecewise(replace(row, isl=isl, osl=osl, concurrency=conc))

    # fp8, plain (ec7bafaae): 1k/1k and 8k/1k from 64 clients, 1k/8k at 128
    assert [piecewise(fp8, 1024, 1024, c) for c in (4, 32, 64, 128)] == [0, 0, 1, 1]
    assert [piecewise(fp8, 1024, 8192, c) for c in (64, 128, 256)] == [0, 1, 0]
    assert [piecewise(fp8, 8192, 1024, c) for c in (32, 64)] == [0, 1]
    c64 = replace(fp8, isl=1024, osl=1024, concurrency=64)
    assert sil.eager_prefill_s(c64, r1, "b200") == 0.0
    assert sil.eager_prefill_s(replace(c64, concurrency=8), r1, "b200") > 0.05
    share = {"memory_utilization": 0.8}  # the script's free_gpu_memory_fraction
    assert sil.deployment(c64, "trtllm") == {"max_batched_tokens": 8192, **share, "sets": wait}
    c32 = replace(c64, concurrency=32)
    assert sil.deployment(c32, "trtllm") == {"max_batched_tokens": 8192, **share}
    assert "sets" not in sil.deployment(replace(c64, osl=8192, concurrency=128), "trtllm")
    # fp4, plain (6eecc0e66): 1k/1k with tp 8 and ep 8 only; no batch waiting
    fp4 = replace(fp8, precision="fp4", moe_ep=8)
    assert piecewise(fp4, 1024, 1024, 64) and not piecewise(fp4, 1024, 8192, 64)
    assert not piecewise(replace(fp4, tp=4, moe_ep=4), 1024, 1024, 64)
    fp4_sets = sil.deployment(replace(fp4, isl=1024, osl=1024, concurrency=64), "trtllm")["sets"]
    assert fp4_sets == {"moe_backend": "TRTLLM"}  # no batch waiting in the fp4 script
    # fp8 -mtp (5d517074c): on but for narrow clients and attention DP
    mtp8 = replace(fp8, backend_version="1.2.0rc6.post3")
    assert [piecewise(mtp8, 1024, 1024, c) for c in (4, 8)] == [0, 1]
    assert [piecewise(mtp8, 8192, 1024, c) for c in (16, 32)] == [0, 1]
    assert not piecewise(replace(mtp8, attention_dp=8, tp=1), 1024, 1024, 64)
    # an MTP row keeps the eager context step (its measured TTFT shows no change with the
    # graphs)
    mtp8_c8 = replace(mtp8, isl=1024, osl=1024, concurrency=8)
    assert sil.inferencemax_trtllm_piecewise(mtp8_c8)
    assert sil.eager_prefill_s(mtp8_c8, r1, "b200") > 0.05
    # fp4 -mtp (0aae52d4c): 1k/1k at 32 and 64 clients, 128 without attention DP; 1k/8k 64
    mtp4 = replace(fp4, backend_version="1.2.0rc6.post3")
    assert [piecewise(mtp4, 1024, 1024, c) for c in (8, 32, 64, 128)] == [0, 1, 1, 1]
    assert not piecewise(replace(mtp4, attention_dp=8, tp=1), 1024, 1024, 128)
    assert piecewise(mtp4, 1024, 8192, 64) and not piecewise(mtp4, 8192, 1024, 64)
    # no script read: the eager context step stays
    for other in (
        replace(c64, backend_version="1.1.0rc2.post2"),
        replace(c64, system="h200_sxm"),
        replace(c64, backend_version=""),
        replace(c64, source="/x/aic-auto-gap-analysis/y.csv; silicon_concurrency=64"),
    ):
        assert not sil.inferencemax_trtllm_piecewise(other)
        assert sil.inferencemax_deepseek_batch_wait(other) == {}


def test_trtllm_context_steps_are_eager_on_moe_rows(tmp_path: Path) -> None:
    """TensorRT-LLM's PyTorch backend runs a batch holding a context request without a
    CUDA graph in every release: a MoE row's context step adds its launches
    times the GPU's fitted host time per launch (B200, H200, H100), under attention DP
    too (one rank's context puts every rank's step in eager mode:
    ``twin.engine.dp_attention.DPReplica``); none for dense models or another GPU; the
    plan carries it to the engine."""
    r1, gptoss = get_model("deepseek-r1"), get_model("gpt-oss-120b")
    per_launch = sil.TRTLLM_EAGER_LAUNCH_S
    assert set(per_launch) == {"b200", "h200", "h100"}
    row = _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post2", tp=8)
    floor = sil.eager_prefill_s(row, r1, "b200")
    assert floor == pytest.approx(per_launch["b200"] * sil.eager_launches(r1)) and floor > 0.05
    # the same launch count on H200 at its own host time; every release (a nightly too)
    h200 = replace(row, system="h200_sxm", backend_version="1.1.0rc2.post2")
    assert sil.eager_prefill_s(h200, r1, "h200") == pytest.approx(
        per_launch["h200"] * sil.eager_launches(r1)
    )
    assert sil.eager_prefill_s(replace(row, backend_version=""), r1, "b200") == floor
    # gpt-oss: 36 attention layers (half windowed) and 36 MoE layers, fewer launches
    assert sil.eager_prefill_s(row, gptoss, "b200") == pytest.approx(
        per_launch["b200"] * 36 * (sil.SGLANG_EAGER_LAUNCHES["attention"] + 13)
    )
    assert sil.eager_prefill_s(row, get_model("llama-3-8b"), "b200") == 0.0  # dense
    assert sil.eager_prefill_s(replace(row, attention_dp=8, tp=1), r1, "b200") == floor
    assert sil.eager_prefill_s(row, r1, "b300") == 0.0  # no fitted host time
    h100 = replace(row, system="h100_sxm", backend_version="1.0.0rc3")
    assert sil.eager_prefill_s(h100, r1, "h100") == pytest.approx(15e-6 * sil.eager_launches(r1))
    # the plan of a measured TensorRT-LLM MoE row carries the floor into its run
    pytest.importorskip("aiconfigurator_core")
    rows = {r.id: r for r in sil.read_rows()}
    rid = "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_0_ep1_0_1187"
    plan = sil.plan_row(rows[rid])
    assert isinstance(plan, sil.RowPlan)
    assert plan.deployment["eager_prefill_s"] == pytest.approx(floor)


def test_inferencemax_deepseek_fp4_trtllm_experts_priced_by_the_scripts_moe_backend() -> None:
    """Each InferenceMAX DeepSeek-R1 fp4 TensorRT-LLM script's ``moe_config.backend`` (read
    at the commit its rows ran): CUTLASS under attention DP, else TRTLLM, but by lengths and
    clients in the 2025-12-15 sweep's script; the row's run sets ``moe_backend`` to it and
    prices the nvfp4 experts with that kernel's fit at every step (TRTLLM-gen above 128
    tokens, CUTLASS at 128 and below)."""
    from twin import precision as px
    from twin.costmodel.profile_store import load_profile
    from twin.engine.run_pricing import priced_profile, trtllm_moe_backend_profile

    backend = sil.inferencemax_trtllm_fp4_moe_backend
    fp4 = _inferencemax_r1(
        backend="trtllm", backend_version="1.2.0rc6.post3", precision="fp4", tp=8, moe_ep=1
    )
    fp4 = replace(fp4, isl=1024, osl=1024, concurrency=128)
    assert (backend(fp4), backend(replace(fp4, attention_dp=8))) == ("TRTLLM", "CUTLASS")
    assert backend(replace(fp4, backend_version="1.2.0rc6.post2")) == "TRTLLM"
    dec15 = replace(
        fp4,
        backend_version="1.1.0rc2.post2",
        source=fp4.source.replace("model=", "measured=2025-12-15T00:00:00Z; model="),
    )
    assert backend(dec15) == "TRTLLM"
    assert backend(replace(dec15, concurrency=256)) == "CUTLASS"  # by clients, not DP
    assert backend(replace(dec15, isl=8192, concurrency=64)) == "CUTLASS"
    # the script's thresholds: 8k/1k above 32 clients, 1k/8k from 256
    assert backend(replace(dec15, isl=8192, concurrency=32)) == "TRTLLM"
    assert backend(replace(dec15, osl=8192, concurrency=128)) == "TRTLLM"
    assert backend(replace(dec15, osl=8192, concurrency=256)) == "CUTLASS"
    assert backend(replace(fp4, backend_version="1.0.0rc3")) is None  # an image not read
    assert backend(replace(fp4, precision="fp8")) is None
    assert backend(replace(fp4, system="h200_sxm")) is None
    assert sil.deployment(fp4, "trtllm")["sets"]["moe_backend"] == "TRTLLM"

    profile = load_profile("b200", "trtllm")
    expert = px.WEIGHT_FORMATS["nvfp4"]
    gen = trtllm_moe_backend_profile(expert, profile, "TRTLLM").kernels
    assert gen["moe_nvfp4"] == profile.kernels["moe_nvfp4_trtllm_gen"]
    assert gen["moe_nvfp4_min_latency"] == profile.kernels["moe_nvfp4_min_latency"]
    cutlass = trtllm_moe_backend_profile(expert, profile, "CUTLASS").kernels
    assert cutlass["moe_nvfp4_min_latency"] == profile.kernels["moe_nvfp4"]
    assert gen["moe_nvfp4_trtllm_gen"] != profile.kernels["moe_nvfp4_min_latency"]
    # the run reads it through the mode's flag (priced_profile)
    r1 = replace(get_model("deepseek-r1"), precision="nvfp4")
    flagged = priced_profile(r1, profile, "trtllm", {"moe_backend": "TRTLLM"})
    assert flagged.kernels["moe_nvfp4"] == profile.kernels["moe_nvfp4_trtllm_gen"]
