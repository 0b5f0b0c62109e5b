"""InferenceMAX's GLM-5 SGLang scripts on Blackwell (``inferencemax_sglang.inferencemax_glm5``):
the B200 fp8 rows (image nightly-dev 20260317) ran ``glm5_fp8_b200.sh`` at 13930ca61 (running
requests = clients, 0.85, 32,768-token chunk and input budget, radix cache off); the B200 fp4
rows (image 20260328) ``glm5_nvfp4_b200.sh`` at d43805fc3 (clients, 0.80, a 131,072-token
chunk, radix cache on, no KV dtype); the B300 fp8 rows (image 20260401, no B300 configuration
yet) the B200 fp8 recipe. Outside a configuration's search space no flags."""

from __future__ import annotations

from dataclasses import replace

from silicon_rows import planned, silicon_row

from twin.engine.modes import get_mode
from twin.presets import get_model
from twin.validate import silicon as sil
from twin.validate.silicon.inferencemax_sglang import inferencemax_glm5

_SOURCE = (
    "source_file=2026-03-25.csv; model=GLM-5; silicon_concurrency=32; "
    "measured=2026-03-20T17:45:25Z; wip=False; image=lmsysorg/sglang:nightly-dev-cu13-20260317"
)


def _glm5(system: str = "b200_sxm", precision: str = "fp8", **fields: object) -> sil.SiliconRow:
    base: dict[str, object] = dict(
        source=_SOURCE,
        backend="sglang",
        backend_version="nightly-dev",
        model_path="zhipuai/GLM-5",
        system=system,
        precision=precision,
        gemm_quant_mode=precision,
        moe_quant_mode=precision,
        isl=8192,
        osl=1024,
        concurrency=32,
        tp=8,
    )
    return silicon_row(**{**base, **fields})


FP8 = {
    "max_running_requests": "32",
    "mem_fraction_static": "0.85",
    "chunked_prefill_size": "32768",
    "max_prefill_tokens": "32768",
    "disable_radix_cache": "true",
    "nsa_prefill_backend": "trtllm",
}


def test_b200_and_b300_fp8_rows_run_the_b200_fp8_script() -> None:
    """glm5_fp8_b200.sh (13930ca61; glm5_fp8_b300.sh reuses it as-is): the sets reach the
    plan, and SGLang's mode turns the radix cache off (the ignore-EOS adder) with the
    script's running limit, chunk and input budget."""
    for system in ("b200_sxm", "b300_sxm"):
        row = _glm5(system)
        assert inferencemax_glm5(row) == FP8
        assert sil.deployment(row, "sglang") == {"sets": FP8}
        assert not sil.inferencemax_sglang_default_kv(row)  # names fp8_e4m3
        sets = planned(row).deployment["sets"]
        assert sets == FP8
        mode = get_mode("sglang").settings(get_model("glm-5"), dict(sets))
        assert mode["scheduler_options"]["radix_cache_disabled"] is True
        assert mode["scheduler_options"]["max_prefill_tokens"] == 32768
        assert mode["engine_flags"]["nsa_prefill_backend"] == "trtllm"
    assert inferencemax_glm5(_glm5(concurrency=4))["max_running_requests"] == "4"


def test_b200_fp4_rows_run_the_early_nvfp4_script_with_the_radix_cache_on() -> None:
    """glm5_nvfp4_b200.sh at d43805fc3: clients, 0.80, a 131,072-token chunk, no input
    budget or --disable-radix-cache, no KV dtype (SGLang's Blackwell default, fp8)."""
    row = _glm5(precision="fp4", concurrency=64)
    expected = {
        "max_running_requests": "64",
        "mem_fraction_static": "0.80",
        "chunked_prefill_size": "131072",
    }
    assert sil.deployment(row, "sglang") == {"sets": expected}
    assert sil.inferencemax_sglang_default_kv(row)
    mode = get_mode("sglang").settings(get_model("glm-5"), dict(expected))
    assert "radix_cache_disabled" not in mode.get("scheduler_options", {})


def test_rows_outside_the_search_spaces_get_no_script() -> None:
    """fp4 ran tp 8 to 64 clients, fp8 to 128; another tp, release or model: none."""
    assert inferencemax_glm5(_glm5(precision="fp4", concurrency=128)) == {}
    assert inferencemax_glm5(_glm5(concurrency=256)) == {}
    assert inferencemax_glm5(_glm5(tp=4)) == {}
    assert inferencemax_glm5(_glm5(backend_version="0.5.10.post1")) == {}
    assert inferencemax_glm5(replace(_glm5(), model_path="deepseek-ai/DeepSeek-R1")) == {}
    # SGLang's scripts only: another engine's GLM-5 row of the same key gets neither the
    # flags nor SGLang's default cache
    vllm = _glm5("h200_sxm", backend="vllm", backend_version="glm5-hopper", concurrency=64)
    assert inferencemax_glm5(vllm) == {} and not sil.inferencemax_sglang_default_kv(vllm)
    h200 = _glm5("h200_sxm", backend_version="glm5-hopper", concurrency=64)
    assert inferencemax_glm5(h200) == {"mem_fraction_static": "0.85"}
