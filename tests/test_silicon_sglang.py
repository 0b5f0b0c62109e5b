"""What InferenceMAX's SGLang rows ran with (issue 31, ``twin.validate.silicon``):
each script's flags, memory and KV cache, eager prefill's host floor, piecewise CUDA
graphs by release, and which configuration a point shared by two scripts ran."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from silicon_small import CONFIGS, _inferencemax_r1

from twin.engine.run import build_run
from twin.presets import get_model
from twin.validate import silicon as sil


def test_inferencemax_sglang_deepseek_rows_run_with_its_scripts_flags() -> None:
    """The v0.5.9 DeepSeek SGLang configurations' flags, for the rows only one of them
    covers (by GPU, precision, tp, lengths and clients); other rows: SGLang's defaults."""
    row = _inferencemax_r1(
        backend="sglang", backend_version="0.5.9", precision="fp4", tp=8, isl=1024, osl=1024
    )
    sets = sil.deployment(row, "sglang")["sets"]
    assert sets["scheduler_recv_interval"] == "10" and sets["max_running_requests"] == "256"
    many = sil.deployment(replace(row, concurrency=64), "sglang")["sets"]
    assert many["scheduler_recv_interval"] == "30" and many["chunked_prefill_size"] == "16384"
    assert sil.deployment(replace(row, concurrency=256), "sglang") == {}  # no fp4 config
    fp8 = replace(row, precision="fp8")
    tp4 = sil.deployment(replace(fp8, tp=4, isl=8192, concurrency=32), "sglang")["sets"]
    assert (tp4["max_running_requests"], tp4["scheduler_recv_interval"]) == ("32", "10")
    plain = sil.deployment(replace(fp8, concurrency=64), "sglang")["sets"]
    assert plain["max_running_requests"] == "128" and "speculative_algorithm" not in plain
    # beyond the plain configuration's 64 clients only the -mtp one ran
    mtp = sil.deployment(replace(fp8, concurrency=256), "sglang")["sets"]
    assert (mtp["max_running_requests"], mtp["speculative_algorithm"]) == ("512", "NEXTN")
    assert mtp["speculative_num_draft_tokens"] == "3"
    h200 = replace(fp8, system="h200_sxm")
    assert sil.deployment(h200, "sglang")["sets"]["max_running_requests"] == "512"
    for other in (replace(row, backend_version="0.5.8.post1"), replace(row, model_path="x/y")):
        assert sil.deployment(other, "sglang") == {}


def test_inferencemax_sglang_deepseek_h200_script_keeps_sglangs_default_kv(tmp_path: Path) -> None:
    """``dsr1_fp8_h200.sh`` passes no ``--kv-cache-dtype``: SGLang 0.5.9's ``auto`` keeps the
    model's bf16 cache for DeepSeek-R1's block-fp8 checkpoint (no ``kv_cache_quant_algo``);
    the B200 script passes ``fp8_e4m3`` (the pairing), and a row no H200 configuration
    covers is not read."""
    config = json.loads((CONFIGS / "tiny--Tiny-Llama_config.json").read_text())
    block = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    config.update(num_attention_heads=8, num_key_value_heads=8, quantization_config=block)
    (tmp_path / "deepseek-ai--DeepSeek-R1_config.json").write_text(json.dumps(config))
    b200 = _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8)
    b200 = replace(b200, isl=64, osl=8)
    h200 = replace(b200, system="h200_sxm")
    plans = [sil.plan_row(r, tmp_path) for r in (h200, b200)]
    assert all(isinstance(p, sil.RowPlan) for p in plans)
    assert [p.priced for p in plans if isinstance(p, sil.RowPlan)] == [
        "fp8, bf16 KV",
        "fp8, fp8 KV",
    ]
    assert sil.inferencemax_sglang_default_kv(h200)
    for other in (b200, replace(h200, concurrency=128), replace(h200, backend_version="0.5.8")):
        assert not sil.inferencemax_sglang_default_kv(other)


def test_inferencemax_sglang_qwen35_rows_run_with_its_scripts_flags() -> None:
    """InferenceMAX's Qwen3.5-397B SGLang configurations: every script disables the radix
    cache, polls for requests every 10 iterations (30 from 16 clients) on B200/B300, caps
    the running requests (128, or the clients) and sets the chunk; B200 fp8 at tp 4 without
    expert parallelism is the -mtp configuration (EAGLE over the model's MTP layer, 3
    steps, 4 draft tokens); H200 polls every iteration; the B300 v0.5.9 rows ran the B200
    fp8 configurations (the same images and search spaces). The gap-analysis copies of
    these rows are InferenceMAX's measurements (its harness)."""
    row = replace(
        _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8),
        model_path="Qwen/Qwen3.5-397B-A17B",
        moe_ep=1,
    )
    sets = sil.deployment(row, "sglang")["sets"]
    assert sets == {
        "disable_radix_cache": "true",
        "max_running_requests": "128",
        "mem_fraction_static": "0.82",
        "chunked_prefill_size": "32768",
        "max_prefill_tokens": "32768",
        "scheduler_recv_interval": "10",
    }
    assert (
        sil.deployment(replace(row, concurrency=16), "sglang")["sets"]["scheduler_recv_interval"]
        == "30"
    )
    mtp = sil.deployment(replace(row, tp=4, concurrency=64), "sglang")["sets"]
    assert (mtp["speculative_algorithm"], mtp["speculative_num_draft_tokens"]) == ("NEXTN", "4")
    assert (mtp["max_running_requests"], mtp["mem_fraction_static"]) == ("64", "0.8")
    ep4 = sil.deployment(replace(row, tp=4, moe_ep=4, concurrency=64), "sglang")["sets"]
    assert "speculative_algorithm" not in ep4 and ep4["max_running_requests"] == "128"
    h200 = sil.deployment(replace(row, system="h200_sxm", moe_ep=8), "sglang")["sets"]
    assert "scheduler_recv_interval" not in h200 and h200["chunked_prefill_size"] == "16384"
    b300 = replace(row, system="b300_sxm", backend_version="0.5.10.post1", tp=4)
    assert sil.deployment(b300, "sglang")["sets"]["max_running_requests"] == "4"
    bf16 = replace(row, precision="bf16", backend_version="nightly-dev-20260216-d3bae71e")
    assert sil.deployment(bf16, "sglang")["sets"]["mem_fraction_static"] == "0.82"
    fp4 = replace(row, precision="fp4", backend_version="nightly-dev-20260402-d7256eb6", tp=4)
    assert sil.deployment(fp4, "sglang")["sets"]["mem_fraction_static"] == "0.85"
    # the B300 v0.5.9 rows are the B200 fp8 configurations run on B300: tp 4 ep 1 drafts
    b300_mtp = replace(b300, backend_version="0.5.9", concurrency=64)
    assert sil.deployment(b300_mtp, "sglang")["sets"] == mtp
    b300_plain = replace(b300, backend_version="0.5.9", tp=8, concurrency=4)
    assert sil.deployment(b300_plain, "sglang")["sets"] == sets
    gap = replace(row, source="source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=4")
    assert sil.harness_of(gap) is sil.INFERENCEMAX
    assert sil.deployment(gap, "sglang")["sets"] == sets


def test_inferencemax_glm5_h200_sglang_runs_its_scripts_memory_and_a_bf16_cache() -> None:
    """InferenceMAX's GLM-5 H200 SGLang script (image glm5-hopper) sets only
    ``--mem-fraction-static 0.85`` and no KV dtype, so SGLang's default for a
    sparse-attention model on Hopper, bf16, holds; on Blackwell (fp8 there), for other
    models and where the deployment names a KV dtype the precision is kept."""
    row = replace(
        _inferencemax_r1(backend="sglang", backend_version="glm5-hopper", precision="fp8", tp=8),
        model_path="zhipuai/GLM-5",
        system="h200_sxm",
        concurrency=64,
    )
    assert sil.deployment(row, "sglang") == {"sets": {"mem_fraction_static": "0.85"}}
    b200 = replace(row, system="b200_sxm", backend_version="nightly-dev")
    fp8 = sil.RowPrecision("fp8", "fp8", "fp8-block", "KV: aiconfigurator's pairing")
    glm, r1 = get_model("glm-5"), get_model("deepseek-r1")
    limits = sil.deployment(row, "sglang")
    assert sil.inferencemax_sglang_default_kv(row) and not sil.inferencemax_sglang_default_kv(b200)
    hopper = sil.engine_default_kv(fp8, "sglang", limits, {}, glm, "h200")
    assert hopper.kv == "bf16" and "sparse-attention default" in hopper.why
    assert sil.engine_default_kv(fp8, "sglang", limits, {}, glm, "b200") == fp8
    bf16 = replace(fp8, kv="bf16")  # Blackwell's default is fp8 (compute cap. 10)
    assert sil.engine_default_kv(bf16, "sglang", limits, {}, glm, "b200").kv == "fp8"
    assert sil.engine_default_kv(bf16, "sglang", limits, {}, glm, "a100") == bf16
    assert sil.engine_default_kv(fp8, "sglang", limits, {}, r1, "h200") == fp8
    # vLLM's ``auto`` is the model's dtype, bf16 where the config names none (the vLLM rows
    # whose script names no KV dtype take it: ``inferencemax_vllm_default_kv``)
    assert sil.engine_default_kv(fp8, "vllm", limits, {}, glm, "h200").kv == "bf16"
    named = {"sets": {"kv_cache_dtype": "fp8_e4m3"}}
    assert sil.engine_default_kv(fp8, "sglang", named, {}, glm, "h200") == fp8


def test_sglang_eager_prefill_prices_a_host_floor_per_launched_kernel(
    tmp_path: Path,
) -> None:
    """SGLang runs prefills without CUDA graphs before 0.5.10, and in every release before
    0.5.23 for the architectures whose piecewise graphs it turns off (GLM-5's DSA) and
    for multimodal configs (Qwen3.5): a MoE model's prefill step adds its eager
    kernels' host time (launches by layer part x a fitted time per GPU); none for
    dense models, other engines, attention DP or a GPU without a fit."""
    from twin.engine.host_time import EagerPrefillPricer

    r1 = get_model("deepseek-r1")
    n = sil.SGLANG_EAGER_LAUNCHES
    # 61 MLA layers, 58 MoE layers with a shared expert, 3 dense MLP layers
    launches = 61 * n["mla"] + 58 * (n["moe"] + n["shared_expert"]) + 3 * n["mlp"]
    assert sil.eager_launches(r1) == launches
    # Qwen3-235B (94 plain attention + MoE layers, no shared expert) launches about as
    # many kernels as DeepSeek-R1 though it has 1.6x its MoE layers.
    qwen = get_model("qwen3-235b-a22b")
    assert sil.eager_launches(qwen) == 94 * (n["attention"] + n["moe"])
    assert abs(sil.eager_launches(qwen) - launches) < 0.05 * launches
    hybrid = get_model("qwen3.5-397b-a17b")  # gated attention, GDN, shared experts
    assert sil.eager_launches(hybrid) == (
        15 * (n["attention"] + n["attention_gate"])
        + 45 * n["gdn"]
        + 60 * (n["moe"] + n["shared_expert"])
    )
    per_launch = sil.SGLANG_EAGER_LAUNCH_S
    row = _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8)
    floor = sil.eager_prefill_s(row, r1, "b200")
    assert floor == pytest.approx(per_launch["b200"] * launches) and floor > 0.1
    assert sil.eager_prefill_s(replace(row, system="h200_sxm"), r1, "h200") == pytest.approx(
        per_launch["h200"] * launches
    )
    assert sil.eager_prefill_s(replace(row, backend_version="0.5.6.post2"), r1, "b200") == floor
    # (an H200 row: InferenceMAX's B200 DeepSeek scripts pass flags that turn the graphs
    # off, test_inferencemax_scripts_flags_turn_sglang_0510_piecewise_graphs_off)
    h200 = replace(row, system="h200_sxm")
    for version in ("0.5.10.post1", "0.5.23", "nightly-dev", ""):
        assert sil.eager_prefill_s(replace(h200, backend_version=version), r1, "h200") == 0.0
    # GLM-5 (piecewise graphs off for its architecture) and a multimodal config prefill
    # eagerly in 0.5.10.post1 and in a nightly build, not from 0.5.23 (on the H200 row,
    # whose script turns no graphs off, so that the model alone decides).
    glm = get_model("glm-5")
    for version in ("0.5.10.post1", "nightly-dev", "glm5-hopper", "0.5.9"):
        later = replace(h200, backend_version=version)
        assert sil.eager_prefill_s(later, glm, "h200") == pytest.approx(
            per_launch["h200"] * sil.eager_launches(glm)
        )
        assert sil.eager_prefill_s(later, r1, "h200", multimodal=True) == pytest.approx(
            per_launch["h200"] * launches
        )
    assert sil.eager_prefill_s(replace(h200, backend_version="0.5.23"), glm, "h200") == 0.0
    assert sil.eager_prefill_s(row, get_model("llama-3-8b"), "b200") == 0.0  # no MoE layer
    assert sil.eager_prefill_s(replace(row, backend="vllm"), r1, "b200") == 0.0
    assert sil.eager_prefill_s(replace(row, backend="vllm"), glm, "b200") == 0.0
    assert sil.eager_prefill_s(replace(row, attention_dp=8, tp=1), r1, "b200") == 0.0
    assert sil.eager_prefill_s(row, r1, "h100") == 0.0  # no fitted host time
    # The floor reaches the engine: the run's outermost pricer holds the prefill steps to it.
    path = sil.write_workload(tmp_path / "w.parquet", 64, 4, 2, 1)
    run = build_run(path, model=r1, gpu="b200", engine="sglang", tp=8, eager_prefill_s=floor)
    assert isinstance(run.pricer, EagerPrefillPricer) and run.pricer.floor_s == floor
    # The host time is in series with the kernels (measured: docs/decisions.md), for a
    # short prompt and a long one alike: an 8k prompt's step is its kernels plus the floor.
    for n in (64, 8192):
        kernels = run.pricer.inner.step_time([(n, 0)], 0, 0)
        assert run.pricer.step_time([(n, 0)], 0, 0) == pytest.approx(kernels + floor)
    assert run.pricer.inner.step_time([(8192, 0)], 0, 0) > floor  # GPU-bound, still added
    assert run.pricer.step_time([], 4, 256) == run.pricer.inner.step_time([], 4, 256)


def test_inferencemax_sglang_rows_without_a_release_ran_a_release_before_0510() -> None:
    """InferenceMAX's SGLang DeepSeek rows that name no release were measured in
    November 2025, before that collection first ran an SGLang 0.5.10 image (2026-04-14):
    their prefill is eager (no piecewise graphs before 0.5.10) and they ran the v0.5.5
    era scripts' flags (fp4: 256 requests, 16384 chunk; fp8: tp 8 at 4-64 clients, 128
    requests, 32768). A row without a measurement date, measured from that day on, or of
    another collection keeps SGLang's defaults and no host time."""
    r1 = get_model("deepseek-r1")
    src = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=4; "
    row = replace(
        _inferencemax_r1(
            backend="sglang", backend_version="", precision="fp4", tp=4, isl=1024, osl=1024
        ),
        source=src + "measured=2025-11-10T00:00:00.000Z; wip=False",
    )
    assert sil.measured_on(row) == "2025-11-10" and sil.inferencemax_sglang_unnamed(row)
    eager = sil.SGLANG_EAGER_LAUNCH_S["b200"] * sil.eager_launches(r1)
    assert sil.eager_prefill_s(row, r1, "b200") == pytest.approx(eager) and eager > 0.1
    sets = sil.deployment(row, "sglang")["sets"]
    assert (sets["max_running_requests"], sets["chunked_prefill_size"]) == ("256", "16384")
    assert sets["scheduler_recv_interval"] == "10"
    fp8 = replace(row, precision="fp8", tp=8)
    assert sil.deployment(fp8, "sglang")["sets"]["max_running_requests"] == "128"
    assert sil.deployment(replace(fp8, concurrency=128), "sglang") == {}  # no -mtp yet
    assert sil.deployment(replace(fp8, tp=4, isl=8192), "sglang") == {}  # tp 8 only
    assert sil.eager_prefill_s(fp8, r1, "b200") == pytest.approx(eager)
    # (H200: the B200 scripts' MoE runner alone would make a prefill eager)
    h200 = replace(fp8, system="h200_sxm")
    assert sil.eager_prefill_s(h200, r1, "h200") == pytest.approx(
        sil.SGLANG_EAGER_LAUNCH_S["h200"] * sil.eager_launches(r1)
    )
    undated = replace(h200, source=src + "wip=False")
    later = replace(h200, source=src + "measured=2026-04-14T00:00:00.000Z")
    aiperf = replace(row, source="/x/aic-auto-gap-analysis/y.csv; measured=2025-11-10")
    for other in (undated, later, aiperf, replace(row, backend="trtllm")):
        assert not sil.inferencemax_sglang_unnamed(other)
    for other in (undated, later, aiperf):
        assert sil.eager_prefill_s(other, r1, "h200") == 0.0
        assert sil.deployment(other, "sglang") == {}


def test_inferencemax_sglang_b200_0506_rows_ran_the_v055_eras_scripts() -> None:
    """InferenceX d27433dff (2025-12-31) moved the B200 DeepSeek SGLang configurations to
    image v0.5.6 with the v0.5.5 era's scripts and search spaces: a B200 row of release
    0.5.6 runs ``dsr1_fp8_b200_{docker,slurm}.sh``'s flags (tp 8 at 4-64 clients: 128
    requests, 0.82, 32768 chunk and prefill tokens) or the fp4 script's (256, 0.85,
    16384); outside the search spaces, on H200 (its v0.5.6 script not read: the CSV has no
    such row), or in another collection: SGLang's defaults."""
    src = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=64; "
    row = replace(
        _inferencemax_r1(
            backend="sglang", backend_version="0.5.6", precision="fp8", tp=8, isl=8192, osl=1024
        ),
        concurrency=64,
        source=src
        + "measured=2025-12-31T15:18:00Z; wip=False; image=lmsysorg/sglang:v0.5.6-cu129-amd64",
    )
    sets = sil.deployment(row, "sglang")["sets"]
    assert sets == {
        "max_running_requests": "128",
        "mem_fraction_static": "0.82",
        "chunked_prefill_size": "32768",
        "max_prefill_tokens": "32768",
        "scheduler_recv_interval": "30",
        "disable_radix_cache": "true",
    }
    fp4 = replace(row, precision="fp4", tp=4, concurrency=128)
    assert sil.deployment(fp4, "sglang")["sets"]["max_running_requests"] == "256"
    assert sil.deployment(replace(fp4, tp=8), "sglang") == {}  # tp 8 at 8k/1k: to 16
    assert sil.deployment(replace(row, concurrency=128), "sglang") == {}  # fp8 to 64
    assert sil.deployment(replace(row, tp=4), "sglang") == {}  # fp8: tp 8 only
    assert sil.deployment(replace(row, system="h200_sxm"), "sglang") == {}
    other = replace(row, source="/x/aic-auto-gap-analysis/y.csv; measured=2025-12-31")
    assert sil.deployment(other, "sglang") == {}


def test_inferencemax_scripts_flags_turn_sglang_0510_piecewise_graphs_off() -> None:
    """InferenceMAX's B200/B300 DeepSeek scripts pass ``--moe-runner-backend
    flashinfer_trtllm`` (and the fp4 ones ``--enable-symm-mem``), under which SGLang
    0.5.10.post1 turns its piecewise prefill graphs off: the B300 rows prefill eagerly at
    B300's host time per launch, fp4 and fp8 alike; the H200 script passes neither, and
    from 0.5.23 the graphs are captured whatever the flags. The B300 scripts are the B200
    recipes: fp4's flags at tp 4 and 8, fp8's plain ones where only the plain
    configuration ran (beyond 64 clients only the -mtp one: defaults)."""
    r1 = get_model("deepseek-r1")
    row = replace(
        _inferencemax_r1(
            backend="sglang", backend_version="0.5.10.post1", precision="fp4", tp=4, isl=1024
        ),
        system="b300_sxm",
        osl=1024,
        concurrency=64,
    )
    eager = sil.SGLANG_EAGER_LAUNCH_S["b300"] * sil.eager_launches(r1)
    fp8 = replace(row, precision="fp8")
    for graphs_off in (row, fp8):
        assert sil.inferencemax_no_piecewise(graphs_off)
        assert sil.eager_prefill_s(graphs_off, r1, "b300") == pytest.approx(eager)
    h200 = replace(fp8, system="h200_sxm")
    assert not sil.inferencemax_no_piecewise(h200)
    assert sil.eager_prefill_s(h200, r1, "h200") == 0.0  # 0.5.10.post1 with its graphs
    assert sil.eager_prefill_s(replace(row, model_path="x/y"), r1, "b300") == 0.0
    assert sil.eager_prefill_s(replace(row, backend_version="0.5.23"), r1, "b300") == 0.0
    sets = sil.deployment(row, "sglang")["sets"]
    assert (sets["max_running_requests"], sets["scheduler_recv_interval"]) == ("256", "30")
    tp8 = sil.deployment(replace(fp8, tp=8), "sglang")["sets"]
    assert (tp8["max_running_requests"], tp8["chunked_prefill_size"]) == ("128", "32768")
    tp4 = sil.deployment(replace(fp8, isl=8192, concurrency=16), "sglang")["sets"]
    assert (tp4["max_running_requests"], tp4["mem_fraction_static"]) == ("32", "0.95")
    assert sil.deployment(replace(fp8, tp=8, concurrency=128), "sglang") == {}
    assert sil.deployment(replace(row, backend_version="0.5.9"), "sglang") == {}


def test_inferencemax_dsr1_fp8_points_both_configurations_cover_split_by_the_ci_database() -> None:
    """Where the plain and the -mtp DeepSeek-R1 fp8 B200 SGLang configurations cover the
    same point (tp 8, 4-64 clients), a measurement the CI database names under the plain
    configuration (``config_id=87``, its last float digit aside) runs plain, the other
    measurement of that point runs the -mtp script; a point the database names no run of
    stays plain."""
    plain = replace(
        _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8),
        moe_ep=1,
        ttft_ms=183.17,
        tpot_ms=8.759948,
    )
    named = replace(
        plain,
        id="dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg87",
        source="db-dump/2026-04-27; config_id=87; silicon_concurrency=4",
        model_path="deepseek-ai/DeepSeek-V3",
        tpot_ms=8.759948000000001,
    )
    mtp = replace(plain, id="mtp", ttft_ms=206.71, tpot_ms=6.7032)
    alone = replace(plain, id="alone", concurrency=8)
    marked = {r.id: r for r in sil.mark_configurations([plain, named, mtp, alone])}
    sets = {k: sil.deployment(r, "sglang")["sets"] for k, r in marked.items()}
    assert "speculative_algorithm" not in sets[plain.id]
    assert sets[plain.id]["max_running_requests"] == "128"
    assert sets["mtp"]["speculative_algorithm"] == "NEXTN"
    assert sets["mtp"]["max_running_requests"] == "512"
    assert "speculative_algorithm" not in sets["alone"]
