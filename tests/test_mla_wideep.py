"""SGLang's MLA module tables (``wideep_*_mla_perf``, collected at 0.5.6.post2 and 0.5.10)
as per-release module fits (issue 31): the releases they price, the profile's fits
without a default, and the known answer on H200."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from twin.calibration.aic_mla import dims, operand_bytes, wideep_version
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_features as mf
from twin.costmodel import mla_module as mmod
from twin.costmodel.mla_module import mla_module_decode_sums
from twin.costmodel.precision_kernels import priced_precision
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.precision import with_precision
from twin.presets import resolve_model

DECODE = "mla_module_decode_fp8_fp8kv"


def _collections(root: Path) -> Path:
    """An SGLang MLA folder like H200's: module tables at 0.5.6.post2 and 0.5.10, the
    kernel table at 0.5.14 (only the names matter to the pick)."""
    mla = root / "mla" / "sglang"
    for version, table in (
        ("0.5.6.post2", "wideep_generation_mla_perf.parquet"),
        ("0.5.10", "wideep_generation_mla_perf.parquet"),
        ("0.5.14", "generation_mla_perf.parquet"),
    ):
        (mla / version).mkdir(parents=True)
        (mla / version / table).write_bytes(b"")
    return root


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (None, None),  # a plain run: the newest, the kernel table
        ("0.5.14", None),  # its own kernel table
        ("0.5.16", None),
        ("0.5.13", "0.5.10"),
        ("0.5.10", "0.5.10"),
        ("0.5.9", "0.5.6.post2"),
        ("0.5.1", "0.5.6.post2"),  # older than every collection: the oldest
        ("nightly-dev", None),  # not a version: the newest
    ],
)
def test_the_module_tables_price_the_releases_up_to_the_kernel_table(
    tmp_path: Path, release: str | None, expected: str | None
) -> None:
    system = _collections(tmp_path)
    got = wideep_version(system, "sglang", release)
    assert (got.name if got is not None else None) == expected
    assert wideep_version(system, "vllm", release) is None


def test_a_fit_without_a_default_round_trips_and_prices_only_its_releases() -> None:
    prof = load_profile("h200", "sglang")
    rel = prof.table_releases[DECODE]
    assert DECODE not in prof.kernels and not rel.default_fit
    assert rel.default == "0.5.14" and set(rel.fits) == {"0.5.6.post2", "0.5.10"}
    again = Profile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert not again.table_releases[DECODE].default_fit
    assert DECODE not in prof.at_release("0.5.14").kernels
    assert DECODE not in prof.at_release(None).kernels
    assert prof.at_release("0.5.9").kernels[DECODE] is rel.fits["0.5.6.post2"]
    assert prof.at_release("0.5.12").kernels[DECODE] is rel.fits["0.5.10"]
    bad = prof.to_dict()
    bad["table_releases"][DECODE]["default_fit"] = "no"
    with pytest.raises(TwinError, match=r"table_releases\.mla_module_decode_fp8_fp8kv"):
        Profile.from_dict(bad)
    # without the flag, a family the profile's kernels lack is refused as before
    del bad["table_releases"][DECODE]["default_fit"]
    with pytest.raises(TwinError, match="no kernel"):
        Profile.from_dict(bad)


def _price(kernel: str, prof: Profile, sums: tuple) -> float:
    """``kernel``'s fit in ``prof`` at a module's sums (FLOPs, bytes, then the formula's
    features in order)."""
    flops, nbytes, *features = sums
    extras = dict(zip(fm.get_formula(kernel).features, map(float, features), strict=True))
    return lat.predict(
        kernel, prof.kernels[kernel].params, prof.peaks, float(flops), float(nbytes), extras
    )


def _table_ms(table: str, **match: object) -> float | None:
    """The one flashinfer row of ``table`` (under the installed aiconfigurator-core's data)
    whose columns equal ``match``, in seconds; None without the extra."""
    if importlib.util.find_spec("aiconfigurator_core") is None:
        return None
    from twin.calibration.aic_tables import _read, data_root

    (measured,) = [
        r["latency"] * 1e-3
        for r in _read(data_root() / table)
        if r["kernel_source"] == "flashinfer" and all(r[k] == v for k, v in match.items())
    ]
    return measured


def test_deepseek_fp8_on_sglang_059_takes_the_module_and_014_the_kernels() -> None:
    model = with_precision(resolve_model("deepseek-r1"), "fp8", "fp8")
    prof = load_profile("h200", "sglang")
    old = priced_precision(model, prof.at_release("0.5.9")).keys
    assert old["mla_module_decode"] == DECODE
    assert old["mla_module_prefill"] == "mla_module_prefill_fp8_fp8kv"
    new = priced_precision(model, prof.at_release("0.5.14")).keys
    assert "mla_module_decode" not in new and new["mla_decode"] == "mla_decode_fp8kv"


def test_h200_sglang_059_decode_module_known_answer() -> None:
    """DeepSeek-R1's attention on a TP-8 rank (16 heads), 64 sequences of 4,096 cached
    tokens, fp8 KV, on H200: SGLang 0.5.6.post2's module table (flashinfer) timed 0.129 ms
    per layer (``h200_sxm/mla/sglang/0.5.6.post2/wideep_generation_mla_perf.parquet``;
    0.5.10's 0.126 ms); 0.5.14's kernel table alone 0.537 ms (issue 31: 2x the measured
    TPOT)."""
    prof = load_profile("h200", "sglang").at_release("0.5.9")
    act_e, w_e = operand_bytes("fp8")
    batch, cached = 64, 4096
    sums = mla_module_decode_sums(dims(16), batch, batch * (cached + 1), 2, act_e, w_e, 1)
    fit = prof.kernels[DECODE]
    # FlashInfer's Hopper MLA kernel: no split rule read (``mla_decode_kernels.decode_rule``)
    assert mdk.decode_rule("h200", str(fit.provenance["kernel_source"]), 1) is None
    args = mmod.module_decode_features(sums, mdk.NO_LAUNCH)
    seconds = _price(DECODE, prof, (sums[0], sums[1], *args[2:]))
    assert seconds == pytest.approx(0.129e-3, rel=0.15)
    measured = _table_ms(
        "h200_sxm/mla/sglang/0.5.6.post2/wideep_generation_mla_perf.parquet",
        num_heads=16,
        batch_size=batch,
        isl=cached,
    )
    if measured is not None:
        assert seconds == pytest.approx(measured, rel=0.15)


def test_a_bf16_cache_on_sglang_059_takes_the_module_its_tables_timed() -> None:
    """SGLang's module tables say fp8-KV but ran SGLang's default (bf16) cache
    (``mla_families.SGLANG_MLA_MODULE_TABLES``): DeepSeek-R1 fp8 at a bf16 cache on H200
    (InferenceMAX's ``dsr1_fp8_h200.sh``) is priced by them, at the features they were
    fitted with, as the fp8-labelled pick is; 0.5.14 (kernel tables of both caches)
    keeps its bf16-KV kernel fit."""
    prof = load_profile("h200", "sglang")
    bf16 = with_precision(resolve_model("deepseek-r1"), "fp8", "bf16")
    fp8 = with_precision(resolve_model("deepseek-r1"), "fp8", "fp8")
    got = priced_precision(bf16, prof.at_release("0.5.9"))
    want = priced_precision(fp8, prof.at_release("0.5.9"))
    assert got.keys["mla_module_decode"] == DECODE
    assert got.keys["mla_module_prefill"] == "mla_module_prefill_fp8_fp8kv"
    assert got.mla_kv_elem_bytes == want.mla_kv_elem_bytes == (1, 1)
    assert "timed at a bf16 cache" in got.notes["MLA attention"]
    new = priced_precision(bf16, prof.at_release("0.5.14"))
    assert "mla_module_decode" not in new.keys and new.keys["mla_decode"] == "mla_decode"
    assert new.mla_kv_elem_bytes == (2, 2)


@pytest.mark.parametrize("gpu", ["b200", "b300"])
def test_an_fp8_cache_on_blackwell_takes_the_bf16_timed_module_at_half_its_stream(
    gpu: str,
) -> None:
    """SGLang's module tables time a bf16 cache on Blackwell too (aiconfigurator's
    ``collect_mla_module.py`` passes "bf16" for ``trtllm_mla``; the timings read
    1,526-1,685 bytes a cached token, TensorRT-LLM's bf16-cache module 1,562-1,692, its
    fp8 one 693-891): DeepSeek-R1 fp8 at an fp8 cache (InferenceMAX's B200/B300 SGLang
    scripts, ``--kv-cache-dtype fp8_e4m3``) on 0.5.9 / 0.5.10 takes the module, its
    decode streaming half the latent bytes it was fitted with (``trtllm_mla`` reads the
    fp8 cache as stored); a bf16 cache takes the module at its fitted bytes."""
    prof = load_profile(gpu, "sglang").at_release("0.5.10")
    fp8 = priced_precision(with_precision(resolve_model("deepseek-r1"), "fp8", "fp8"), prof)
    assert fp8.keys["mla_module_decode"] == DECODE
    assert fp8.mla_kv_elem_bytes == (1, 1)
    assert fp8.mla_module_kv_share == 0.5
    assert "timed at a bf16 cache" in fp8.notes["MLA attention"]
    bf16 = priced_precision(with_precision(resolve_model("deepseek-r1"), "fp8", "bf16"), prof)
    assert bf16.keys["mla_module_decode"] == DECODE
    assert bf16.mla_module_kv_share == 1.0
    # the decode's price: the fp8 cache's stream is the one the bf16 timing's less half
    model = with_precision(resolve_model("deepseek-r1"), "fp8", "fp8")
    act_e, w_e = operand_bytes("fp8")
    fit = prof.kernels[DECODE]
    names = fm.get_formula(DECODE).features

    def seconds(kv_e: float) -> float:
        sums = mla_module_decode_sums(dims(16), 64, 64 * 4097, 2, act_e, w_e, kv_e)
        rule = mdk.decode_rule(gpu, str(fit.provenance["kernel_source"]), kv_e)
        sms = get_gpu(gpu).sm_count or 0
        launch = mdk.mla_decode_launch(rule, 64, 64 * 4097, 1, dims(16), kv_e, sms)
        args = mmod.module_decode_features(sums, launch)
        extras = dict(zip(names, map(float, args[2:]), strict=True))
        return lat.predict(DECODE, fit.params, prof.peaks, float(sums[0]), float(sums[1]), extras)

    assert model.kv_dtype == "fp8" and seconds(0.5) < seconds(1.0)


def test_an_fp8_cache_on_hopper_keeps_the_module_without_a_prefill_kernel_fit() -> None:
    """H200's SGLang tables time no MLA prefill kernel: an fp8 cache there takes the
    module pair as a bf16-KV fit (at its fitted features, noted), as before."""
    prof = load_profile("h200", "sglang").at_release("0.5.9")
    assert "mla_prefill_fp8kv" not in prof.kernels
    fp8 = priced_precision(with_precision(resolve_model("deepseek-r1"), "fp8", "fp8"), prof)
    assert fp8.keys["mla_module_decode"] == DECODE
    assert fp8.mla_kv_elem_bytes == (1, 1)
    # FlashInfer's decode casts the fp8 buffer to bf16 first: the fitted stream
    assert fp8.mla_module_kv_share == 1.0
    assert "timed at a bf16 cache" in fp8.notes["MLA attention"]


def test_the_cost_model_prices_an_fp8_cache_s_module_decode_at_its_stream() -> None:
    """``MlaPricing._mla_decode`` hands the module fit the latent bytes times the share:
    B200 DeepSeek-R1 at an fp8 cache pays less than the same fit at the bf16 timing's
    stream (the share set to 1), the one thing the two differ in."""
    import dataclasses

    prof = load_profile("b200", "sglang").at_release("0.5.10")
    model = with_precision(resolve_model("deepseek-r1"), "fp8", "fp8")
    half, full = CostModel(model, prof, tp=8), CostModel(model, prof, tp=8)
    assert half.priced.mla_module_kv_share == 0.5
    full.priced = dataclasses.replace(full.priced, mla_module_kv_share=1.0)
    contexts = [8192] * 64
    assert half.decode(contexts) < full.decode(contexts)


def test_h200_sglang_0510_prefill_module_at_8k_tokens_known_answer() -> None:
    """DeepSeek-R1's attention on a TP-8 rank (16 heads), one prompt of 8,192 tokens, on
    H200: SGLang 0.5.10's module table (flashinfer) timed 1.173 ms per layer
    (``h200_sxm/mla/sglang/0.5.10/wideep_context_mla_perf.parquet``). A fit that put the
    eager collection's host time in series with the kernels priced it 1.40 ms (+19%; 4,096
    and 16,384 tokens +18-23% too); with the host time as a floor the kernels hide under
    (``mla_families.MLA_MODULE_PREFILL_FLOOR``) 1.28 ms. Fit rows and held-out rows alike: the
    bias was along the whole prompt axis past ~2k tokens."""
    kernel = "mla_module_prefill_fp8_fp8kv"
    prof = load_profile("h200", "sglang").at_release("0.5.13")  # the 0.5.10 tables
    assert prof.kernels[kernel].provenance["version"] == "0.5.10"
    act_e, w_e = operand_bytes("fp8")

    def prompt(n: int) -> float:  # one prompt of n tokens
        sums = mmod.mla_module_prefill_sums(dims(16), n, n * (n + 1) // 2, n, 1, 2, act_e, w_e, 1)
        waves = mf.mla_prefill_waves(n, 1, 16, get_gpu("h200").sm_count or 0)
        return _price(kernel, prof, mmod.module_prefill_features(sums, waves))

    seconds = prompt(8192)
    assert seconds == pytest.approx(1.173e-3, rel=0.12)
    # The host time binds a short prompt (0.59-0.62 ms from 1 to 2,048 tokens).
    assert prompt(256) == pytest.approx(0.602e-3, rel=0.1)
    measured = _table_ms(
        "h200_sxm/mla/sglang/0.5.10/wideep_context_mla_perf.parquet",
        gemm_type="fp8_block",
        num_heads=16,
        batch_size=1,
        isl=8192,
    )
    if measured is not None:
        assert seconds == pytest.approx(measured, rel=0.12)
