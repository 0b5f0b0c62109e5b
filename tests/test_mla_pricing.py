"""MLA priced from NVIDIA's MLA tables (issue 34): the features, the reader, the three
ways a layer is priced, tensor parallelism, and precisions a GPU cannot run.

DeepSeek-V3's widths (its config.json): hidden 7168, q_lora 1536, kv_lora 512, qk_nope
128, qk_rope 64, v 128, 128 heads, 61 layers.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aic_refit import assert_heldout, refit_family
from profile_edits import with_fit
from test_bad_input import assert_clean_error

from twin import precision as px
from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_bmm as mbmm
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_families as mlaf
from twin.costmodel import mla_features as mf
from twin.costmodel import mla_module as mmod
from twin.costmodel.features import REPLAY_L2_SHARE
from twin.costmodel.precision_kernels import MLA_AS_GQA_NOTE
from twin.costmodel.profile_store import load_profile
from twin.costmodel.step_features import aggregate_step
from twin.errors import TwinError
from twin.hardware import GB, get_gpu
from twin.parallel import Layout, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from twin.presets import get_model

DSV3 = get_model("deepseek-v3")  # fp8-block weights, as its checkpoint
DSV3_BF16 = px.with_precision(DSV3, "bf16", None)


def dims(heads: int) -> mf.MlaDims:
    return mf.MlaDims(7168, 1536, 512, 128, 64, 128, heads)


def test_decode_features_are_the_absorbed_form() -> None:
    flops, nbytes, tiles, seq = mf.mla_decode_sums(4, 4 * 1000, dims(16), 2, 2)
    assert flops == 2 * 16 * (2 * 512 + 64) * 4000  # QK at 576, AV at 512, per head and key
    # the latent read once per key for all heads; the absorbed query in, latent out
    assert nbytes == 2 * 4 * 16 * (2 * 512 + 64) + 2 * 576 * 4000
    assert tiles == 4 and seq == 1000
    assert mf.mla_decode_sums(4, 4000, dims(128), 2, 2)[2] == 8  # two blocks of 64 heads
    # an fp8 cache halves the latent's bytes only
    assert mf.mla_decode_sums(4, 4000, dims(16), 2, 1)[1] == nbytes - 576 * 4000


def test_prefill_features_are_the_decompressed_form() -> None:
    n, keys = 100, 100 * 101 // 2
    flops, nbytes, tiles, seq = mf.mla_prefill_sums(n, keys, n, 1, dims(16), 2, 2)
    assert flops == 2 * 16 * (192 + 128) * keys
    assert nbytes == 2 * (n * 16 * 320 + n * 16 * 320 + n * 576)
    assert (tiles, seq) == (16, 100)


def test_tensor_parallelism_halves_the_heads_not_the_latent() -> None:
    a = mf.mla_decode_sums(8, 8000, dims(32), 2, 2)
    b = mf.mla_decode_sums(8, 8000, dims(16), 2, 2)
    assert a[0] == 2 * b[0]  # FLOPs follow the heads
    assert a[1] - b[1] == 2 * 8 * 16 * (2 * 512 + 64)  # only the per-head query/output bytes
    for tp in (1, 2, 4, 8):
        cm = CostModel(DSV3, load_profile("h200", "sglang"), tp=tp, ep=tp)
        assert cm.mla_dims.heads == 128 // tp
    # every rank holds the whole latent; q_a/kv_a are whole on every rank
    for tp in (1, 8):
        assert kv_bytes_per_token_per_gpu(DSV3, Layout(tp, tp)) == 61 * 576 * 2
    whole = 61 * 7168 * (1536 + 512 + 64)  # q_a + kv_a weights, fp8-block bytes below
    per_gpu = weight_bytes_per_gpu(DSV3_BF16, Layout(8, 8))
    split = weight_bytes_per_gpu(DSV3_BF16, Layout(1))
    assert 8 * per_gpu - split == pytest.approx(7 * 2 * (whole + 61 * (1536 + 512)), abs=8)


@pytest.mark.parametrize(
    ("profile", "mode"),
    [
        ("h200-vllm", "module"),
        ("h200-trtllm", "module"),
        ("b200-sglang", "kernels/kernels"),
        # SGLang's Hopper context table times the latent form: its prefill takes FA3 MHA
        ("h200-sglang", "gqa/kernels"),
        ("h200-datasheet", "gqa/gqa"),
    ],
)
def test_each_profile_prices_mla_its_way(profile: str, mode: str) -> None:
    model = DSV3 if "datasheet" not in profile else DSV3_BF16  # no fp8 fit in a datasheet
    cm = CostModel(model, load_profile(profile), tp=8, ep=8)
    assert cm.mla_mode == mode
    if mode == "module" or "kernels" in mode:
        assert "MLA attention: measured" in cm.provenance
    # decode grows with the context, prefill with the prompt and its cached prefix
    steps = [cm.decode([c] * 32) for c in (128, 1024, 8192, 65536)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert cm.prefill(1024) < cm.prefill(4096) < cm.prefill(4096, 4096)
    # a step's breakdown puts MLA under attention, its kernels by name
    decode = set(cm.decode([4096] * 8, breakdown=True).items["attention"])
    prefill = set(cm.prefill(2048, breakdown=True).items["attention"])
    kernel = {"module": "mla_module", "kernels": "mla_decode", "gqa": "attn_decode"}
    assert kernel[cm.mla_modes[1]] in decode
    kernel = {"module": "mla_module", "kernels": "mla_prefill", "gqa": "attn_prefill"}
    assert kernel[cm.mla_modes[0]] in prefill


def test_without_an_mla_fit_the_label_says_gqa() -> None:
    # NVIDIA's tables have no MLA rows for vLLM on the A100
    prof = load_profile("a100-80gb", "vllm")
    assert not any(k.startswith("mla_") for k in prof.kernels)
    cm = CostModel(DSV3_BF16, prof, tp=8, ep=8)
    assert cm.mla_mode == "gqa/gqa"
    note = MLA_AS_GQA_NOTE.format("prefill and decode")
    assert f"attention: measured (vLLM 0.14.0 vllm_flash_attn, A100 80GB SXM4), {note}" in (
        cm.provenance
    )
    sglang = CostModel(DSV3, load_profile("h200", "sglang"), tp=8, ep=8).provenance
    assert MLA_AS_GQA_NOTE.format("prefill") in sglang


def test_the_module_is_the_fit_at_known_features() -> None:
    prof = load_profile("h200", "vllm")
    cm = CostModel(DSV3, prof, tp=8, ep=8)
    key = cm.priced.keys["mla_module_decode"]
    assert key == "mla_module_decode_fp8_block"
    fit = prof.kernels[key]
    sums = mmod.mla_module_decode_sums(dims(16), 32, 32 * 4097, 2, *cm.priced.mla_gemm_bytes, 2)
    # vLLM's Hopper module table times FLASH_ATTN_MLA: no split rule read, no launch
    feats = mmod.module_decode_features(sums, mdk.NO_LAUNCH)
    want = lat.compile_fast(key, fit.params, prof.peaks)(*feats)
    parts = cm.decode([4096] * 32, breakdown=True)
    assert parts.items["attention"]["mla_module"] == pytest.approx(61 * want, rel=1e-12)


def test_an_fp8_cache_takes_the_fp8_kv_fits() -> None:
    fp8 = px.with_precision(DSV3, None, "fp8")
    cm = CostModel(fp8, load_profile("h200", "trtllm"), tp=8, ep=8)
    assert cm.priced.keys["mla_module_decode"] == "mla_module_decode_fp8_block_fp8kv"
    assert cm.priced.mla_kv_elem_bytes == (1, 1)
    cm = CostModel(fp8, load_profile("h200", "sglang"), tp=8, ep=8)
    assert cm.priced.keys["mla_decode"] == "mla_decode_fp8kv"
    assert cm.priced.keys["mla_bmm"] == "mla_bmm_fp8"  # a quantised kv_b: fp8 BMMs


def test_step_features_count_mla_keys() -> None:
    f = aggregate_step([(100, 50)], [10, 20], DSV3.mixer_counts, 0, 1, 64)
    assert f.prefill_keys == 150 * 151 // 2 - 50 * 51 // 2 and f.prefill_kv_rows == 150
    assert f.decode_keys == 10 + 20 + 2


def test_mla_decode_runs_equal_full_steps() -> None:
    cm = CostModel(DSV3, load_profile("h200", "trtllm"), tp=8, ep=8)
    got = cm.decode_steps_s(16, [16 * 1000, 16 * 1001])
    assert got == [cm.step_spread((), 16, 16 * 1000), cm.step_spread((), 16, 16 * 1001)]
    assert cm.decode_run_constants(16) is None  # priced in full, not by parts


def test_a_precision_the_gpu_cannot_run_is_one_line() -> None:
    nvfp4 = px.with_precision(DSV3, "nvfp4", None)
    with pytest.raises(TwinError) as err:
        CostModel(nvfp4, load_profile("h200", "trtllm"), tp=8, ep=8)
    assert str(err.value) == (
        "--precision nvfp4: H200 SXM has no FP4 tensor cores "
        "(nvfp4 needs Blackwell; model 'deepseek-v3')"
    )
    # the preset's own fp8-block on an A100: the flag names what to change
    with pytest.raises(TwinError, match=r"^--precision fp8-block: A100 80GB SXM4 has no FP8"):
        px.check_runs_on(DSV3, get_gpu("a100-80gb"))
    px.check_runs_on(DSV3, get_gpu("l40s"))  # Ada has FP8 tensor cores
    px.check_runs_on(nvfp4, get_gpu("b200"))
    # mxfp4 is weight-only (W4A16): bf16 tensor cores run it
    px.check_runs_on(px.with_precision(DSV3, "mxfp4", None), get_gpu("h100"))
    experts = dataclasses.replace(DSV3_BF16, moe_precision="nvfp4")
    with pytest.raises(TwinError, match=r"^moe_precision nvfp4: H100 SXM5 has no FP4"):
        px.check_runs_on(experts, get_gpu("h100"))


def test_the_cli_refuses_it_in_one_line(tmp_path: Path, capsys) -> None:
    argv = ["cost", "-m", "deepseek-r1", "--gpu", "h100", "--tp", "8", "--precision", "nvfp4"]
    assert_clean_error(capsys, argv, tmp_path, "--precision nvfp4: H100 SXM5 has no FP4")


def _table(tmp_path: Path, rows: list[dict], name: str, engine: str = "sglang") -> Path:
    system = tmp_path / "h200_sxm"
    folder = system / ("mla_bmm" if "bmm" in name else "mla") / engine / "0.5.14"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / name)
    return system


def test_the_reader_counts_keys_as_each_table_logs_them(tmp_path: Path) -> None:
    base = {"framework": "SGLang", "version": "0.5.14", "device": "NVIDIA H200"}
    kernel = [
        {**base, "mla_dtype": "bfloat16", "kv_cache_dtype": kv, "num_heads": 16,
         "batch_size": 2, "isl": 1, "tp_size": 8, "step": 99, "latency": 0.05,
         "kernel_source": "flash_attention"}
        for kv in ("bfloat16", "fp8")
    ]  # fmt: skip
    system = _table(tmp_path, kernel, "generation_mla_perf.parquet")
    fams = {f.kernel: f for f in aic_mla.kernel_rows(system, "sglang")}
    assert set(fams) == {"mla_decode", "mla_decode_fp8kv"}
    row = fams["mla_decode"].rows[0]
    # ``step`` is the cached tokens: 100 keys a sequence
    assert row["flops"] == mf.mla_decode_sums(2, 200, aic_mla.dims(16), 2, 2)[0]
    assert row["median_s"] == pytest.approx(5e-5) and row["seq_keys"] == 100
    # SGLang's context rows of the latent form (FA3 off Blackwell) are not SGLang's prefill
    context = [
        {**base, "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "num_heads": 16,
         "batch_size": 2, "isl": 64, "tp_size": 8, "step": 0, "latency": 0.05,
         "kernel_source": source}
        for source in ("flash_attention", "trtllm_mla")
    ]  # fmt: skip
    system = _table(tmp_path, context, "context_mla_perf.parquet")
    fams = {f.kernel: f for f in aic_mla.kernel_rows(system, "sglang")}
    assert len(fams["mla_prefill"].rows) == 1 and fams["mla_prefill"].kernel_source == "trtllm_mla"
    # two sequences x 16 heads x one 128-row tile = 32 CTAs: one wave on the H200's 132 SMs
    assert fams["mla_prefill"].rows[0]["waves"] == 1
    # vLLM's module table: its rows labelled vLLM (an SGLang label under vLLM's folder is
    # another engine's table, ``aic_tables.foreign_table``, and is never read)
    module = [
        {**base, "framework": "vLLM", "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16",
         "gemm_type": g,
         "model": "deepseek-ai/DeepSeek-V3", "num_heads": 16, "batch_size": 2, "isl": 1,
         "tp_size": 1, "step": 100, "latency": 0.09, "kernel_source": "FLASH_ATTN_MLA"}
        for g in ("bfloat16", "fp8_block")
    ]  # fmt: skip
    system = _table(tmp_path, module, "mla_generation_module_perf.parquet", "vllm")
    fams = {f.kernel: f for f in aic_mla.module_rows(system, "vllm")}
    assert set(fams) == {"mla_module_decode", "mla_module_decode_fp8_block"}
    assert fams["mla_module_decode"].rows[0]["seq_keys"] == 100  # ``step`` counts the new token


@pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is None,
    reason="needs aiconfigurator-core (the twin[aic] extra) for the measured rows",
)
def test_a_shipped_fit_reproduces_its_table() -> None:
    """The h200-trtllm ``mla_module_decode_fp8_block`` fit against its own table's rows at
    DeepSeek-V3 on 8 GPUs (16 heads) and contexts of 1,023 tokens and more: the family's
    held-out error (median 6.2%, P90 14.2%) holds on them, no row off by 20%."""
    import numpy as np

    prof = load_profile("h200", "trtllm")
    key = "mla_module_decode_fp8_block"
    # read as fitted: the shipped fit has no replays' L2 term (``c_l2_bytes`` 0)
    rows_l2 = aic_mla.module_rows(system_dir("h200"), "trtllm", replay_l2=False)
    fam = next(f for f in rows_l2 if f.kernel == key)
    kernel = lat.compile_fast(key, prof.kernels[key].params, prof.peaks)
    rows = [r for r in fam.rows if r["shape"]["h"] == 16 and r["shape"]["c"] >= 1023]
    assert len(rows) > 20
    feats = fm.get_formula(key).features
    err = np.array(
        [
            abs(kernel(r["flops"], r["bytes"], *(r[x] for x in feats)) / r["median_s"] - 1)
            for r in rows
        ]
    )
    assert np.median(err) < 0.08 and np.quantile(err, 0.9) < 0.15 and err.max() < 0.2


def test_every_mla_family_has_a_formula() -> None:
    for key in fm.MLA_VARIANTS:
        f = fm.get_formula(key)
        # the decode kernel's launch: alone, and inside the decode module
        decode = key.startswith(("mla_decode", "mla_module_decode"))
        launch = ("launch_ctas", "launch_waves") if decode else ()
        # the decode kernel's block keys (``mla_decode_kernels.decode_block_keys``) before them
        block = ("block_keys",) if key.startswith("mla_decode") else ()
        # the decode module's working set read from L2 in the tables' replays after them
        # (the attention kernel's too: ``mla_features.kernel_replay_l2``)
        l2 = mlaf.MLA_MODULE_REPLAY if key.startswith("mla_module_decode") else ()
        l2 = mlaf.MLA_KERNEL_REPLAY if key.startswith(("mla_decode", "mla_prefill")) else l2
        assert f.extras in (("tiles", "seq_keys", *block, *launch, *l2), mlaf.MLA_BMM_EXTRAS)
        # the modules price their attention kernel after the GEMMs' smooth maximum
        module = key.startswith("mla_module")
        prefill = key.startswith("mla_prefill")
        bmm = key.startswith("mla_bmm")  # after them, its quantisation's and k-loop's steps
        # the prefill module's after them: its context attention's waves (``mla_prefill``'s)
        module_serial = (
            (*mlaf.MLA_MODULE_SERIAL, *mlaf.MLA_PREFILL_SERIAL)
            if key.startswith("mla_module_prefill")
            else mlaf.MLA_MODULE_SERIAL
        )
        serial = module_serial if module else mlaf.MLA_PREFILL_SERIAL if prefill else ()
        serial = ("quant_steps", "k_steps") if bmm else serial
        after = ("kv_repeat", "partials", "critical_keys") if decode else ()
        # the modules' linears' quantisation loop last (``mla_bmm.module_quant_rule``)
        quant = ("quant_steps",) if module else ()
        assert f.serial == (*serial, *after, *quant)
        base = "gemms_roofline+" if module else "hbm_roofline+" if bmm else "roofline+"
        assert f.model_name.startswith(base)
    assert mlaf.mla_kernel("mla_module_decode", "fp8_block", "fp8") == (
        "mla_module_decode_fp8_block_fp8kv"
    )
    assert mlaf.mla_kernel("mla_bmm", "fp8") == "mla_bmm_fp8"


def test_the_engine_holds_mla_tokens_at_their_replicated_bytes() -> None:
    """MLA's latent is whole on every TP rank, so DeepSeek at tp 8 holds an eighth of the
    tokens ``kv_bytes_per_token`` alone would give: the replica's budget is scaled by
    that ratio. Sharded GQA (Llama-3-8B's 8 KV heads at tp 8) and hybrids keep theirs."""
    from twin.engine.budget import kv_replication_scale, memory_budget
    from twin.engine.config import ClusterConfig, EngineConfig, MemoryConfig

    ds = get_model("deepseek-v3")
    cfg = EngineConfig(
        cluster=ClusterConfig(tp=8, ep=8),
        memory=MemoryConfig(gpu_memory_bytes=141 * GB, shared_pool=True),
    )
    per_gpu = kv_bytes_per_token_per_gpu(ds, Layout(8, 8))
    assert per_gpu == ds.kv_bytes_per_token  # the whole latent on each of the 8 GPUs
    assert kv_replication_scale(ds, cfg) == 1 / 8
    # the tokens the engine counts = what one GPU's free bytes hold at the latent's size
    tokens = memory_budget(ds, cfg) / ds.kv_bytes_per_token
    free_per_gpu = 141 * GB * cfg.memory.memory_utilization - weight_bytes_per_gpu(ds, Layout(8, 8))
    assert tokens == pytest.approx(free_per_gpu / per_gpu, rel=1e-9)
    assert (
        kv_replication_scale(get_model("llama-3-8b"), EngineConfig(cluster=ClusterConfig(tp=8)))
        == 1.0
    )
    assert (
        kv_replication_scale(get_model("qwen3.5-9b"), EngineConfig(cluster=ClusterConfig(tp=8)))
        == 1.0
    )


# ------------------------------------------------------------ absorbed extends
def test_an_absorbed_extend_reads_the_latent_once_for_its_tokens() -> None:
    # one query token a sequence is the decode, to the bit
    assert mf.mla_absorbed_sums(4, 4, 4000, 4000, 1, dims(16), 2, 2) == mf.mla_decode_sums(
        4, 4000, dims(16), 2, 2
    )
    # 4 sequences verifying 4 tokens each after 1,000 cached: 16 query rows
    keys = 4 * sum(1000 + j for j in range(1, 5))
    flops, nbytes, tiles, seq = mf.mla_absorbed_sums(4, 16, keys, 4 * 1004, 4, dims(16), 2, 2)
    assert flops == 2 * 16 * (2 * 512 + 64) * keys
    # the latent once a sequence (not once a query token), every query's heads in and out
    assert nbytes == 2 * 16 * 16 * (2 * 512 + 64) + 2 * 576 * 4 * 1004
    decodes = mf.mla_decode_sums(16, keys, dims(16), 2, 2)[1]
    assert decodes - nbytes == 2 * 576 * (keys - 4 * 1004)  # priced as 16 decodes: 4x the reads
    # 16 heads x 4 tokens = 64 query rows: one block a sequence; 32 heads x 4 = two
    assert (tiles, seq) == (4, 1004)
    assert mf.mla_absorbed_sums(4, 16, keys, 4 * 1004, 4, dims(32), 2, 2)[2] == 8


def test_step_features_set_short_extends_apart() -> None:
    verify = [(4, 1000)] * 3
    f = aggregate_step([(100, 50), *verify], [10], DSV3.mixer_counts, 0, 1, 64, 4)
    assert (f.prefill_chunks, f.prefill_tokens, f.prefill_kv_rows) == (1, 100, 150)
    assert (f.absorbed_chunks, f.absorbed_tokens, f.absorbed_width) == (3, 12, 4)
    assert f.absorbed_keys == 3 * (1001 + 1002 + 1003 + 1004)
    assert f.absorbed_kv_rows == 3 * 1004
    # every token in the step; a verification's logits at each of its positions
    assert f.tokens == 100 + 1 + 12 and f.sequences == 1 + 1 + 12
    plain = aggregate_step([(100, 50), *verify], [10], DSV3.mixer_counts, 0, 1, 64)
    assert plain.absorbed_chunks == 0 and plain.prefill_chunks == 4


@pytest.mark.parametrize("profile", ["b200-trtllm", "h200-vllm", "b200-sglang", "h200-sglang"])
def test_a_verification_runs_the_absorbed_form(profile: str) -> None:
    # MTP's verification of 3 drafts, batch 64 at 5,000 cached tokens, DeepSeek-V3 at tp 8
    plain = CostModel(DSV3, load_profile(profile), tp=8, ep=8)
    spec = CostModel(DSV3, load_profile(profile), tp=8, ep=8, absorbed_extend=4)
    verify = [(4, 5000)] * 64
    decode = spec.step_spread((), 64, 64 * 5000)
    absorbed = spec.step_spread(verify, 0, 0)
    decompressed = plain.step_spread(verify, 0, 0)
    # each sequence's 5,000 latent rows read once, not decompressed through kv_b_proj
    assert decode < absorbed < decompressed
    attn = spec.step(verify, (), breakdown=True).items["attention"]
    kernel = {"module": "mla_module", "kernels": "mla_decode", "gqa": "attn_decode"}
    assert kernel[spec.mla_modes[1]] in attn
    assert "mla_prefill" not in attn and "attn_prefill" not in attn
    # a longer extend is a prefill; a step without short extends is priced as before
    assert spec.step_spread([(5, 5000)], 0, 0) == plain.step_spread([(5, 5000)], 0, 0)
    assert spec.step_spread([(512, 0)], 8, 8000) == plain.step_spread([(512, 0)], 8, 8000)


def test_only_an_mla_only_model_absorbs_extends() -> None:
    llama = get_model("llama-3-8b")
    assert CostModel(llama, load_profile("h200", "vllm"), absorbed_extend=4).absorbed_extend == 0
    assert CostModel(DSV3, load_profile("h200", "vllm"), 8, 8, absorbed_extend=4).absorbed_extend


# ------------------------------------------------------------ the module's attention
def test_the_module_prices_its_attention_after_the_gemms() -> None:
    """The module's features: the GEMMs (projections, absorbed BMMs) and the attention's
    query/output traffic in the smooth maximum; the attention's KV stream and its FLOPs
    (at whole 64-row tiles in the absorbed form) as serial features."""
    act_e, w_e = 1.0, 1.0  # fp8 projections
    d = dims(16)
    flops, nbytes, tiles, seq, kv_bytes, attn_flops = mmod.mla_module_decode_sums(
        d, 32, 32 * 4097, 2, act_e, w_e, 1
    )
    af, ab, a_tiles, a_seq = mf.mla_decode_sums(32, 32 * 4097, d, 2, 1)
    pf, pb, _ = mmod.mla_projection_sums(d, 32, 2, act_e, w_e)
    bmms = [mbmm.mla_bmm_sums(32, 16, k, n, 2, act_e, w_e) for k, n in ((128, 512), (512, 128))]
    assert flops == pf + sum(b[0] for b in bmms)  # no attention FLOPs under the smooth maximum
    assert kv_bytes == 576 * 32 * 4097  # the fp8 latent once per key
    assert attn_flops == af * 64 / 16  # 16 heads run a 64-row tile
    assert (tiles, seq) == (a_tiles, a_seq)
    # the query/output traffic stays with the GEMMs' bytes
    assert nbytes == pytest.approx(pb + sum(b[1] for b in bmms) + ab - kv_bytes, rel=1e-15)
    # 128 heads fill two tiles: nothing padded
    assert (
        mmod.mla_module_decode_sums(dims(128), 32, 32 * 4097, 2, act_e, w_e, 1)[5]
        == (mf.mla_decode_sums(32, 32 * 4097, dims(128), 2, 1)[0])
    )
    # prefill: the decompressed K and V of every visible row per head, no padding
    n, keys = 100, 100 * 101 // 2
    pre = mmod.mla_module_prefill_sums(d, n, keys, n, 1, 2, act_e, w_e, 2)
    assert pre[4] == 2 * n * 16 * (128 + 64 + 128)
    assert pre[5] == mf.mla_prefill_sums(n, keys, n, 1, d, 2, 2)[0]


def test_each_serial_term_prices_the_module() -> None:
    """A module fit's two serial coefficients each add their feature's seconds to a step
    (break either term and the price moves by exactly its share)."""
    prof = load_profile("h200", "vllm")
    cm = CostModel(DSV3, prof, tp=8, ep=8)
    key = cm.priced.keys["mla_module_decode"]
    fit = prof.kernels[key]
    assert fit.model == fm.get_formula(key).model_name
    sums = mmod.mla_module_decode_sums(dims(16), 32, 32 * 4097, 2, *cm.priced.mla_gemm_bytes, 2)
    feats = mmod.module_decode_features(sums, mdk.NO_LAUNCH)
    price = lat.compile_fast(key, fit.params, prof.peaks)
    for name, value in zip(mlaf.MLA_MODULE_SERIAL, sums[4:], strict=True):
        c = fit.params[f"c_{name}"]
        assert c > 0 and value > 0
        broken = lat.compile_fast(key, {**fit.params, f"c_{name}": 0.0}, prof.peaks)
        assert price(*feats) - broken(*feats) == pytest.approx(c * value, rel=1e-9)


def test_a_module_fit_of_the_old_form_is_refused_in_one_line(tmp_path: Path) -> None:
    """A module fit written when the smooth maximum held the attention (model
    ``roofline+tiles+seq_keys``) would misprice with its coefficients: refused by name,
    not upgraded; ``twin calibrate --refit mla`` reads such a profile and fits it again."""
    src = load_profile("h200", "vllm")
    out = src.to_dict()
    key = "mla_module_decode"
    fit = out["kernels"][key]
    fit["model"] = "roofline+tiles+seq_keys"
    serial = {f"c_{x}" for x in mlaf.MLA_MODULE_SERIAL}
    fit["params"] = {k: v for k, v in fit["params"].items() if k not in serial}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(out))
    with pytest.raises(TwinError, match=r"model 'roofline\+tiles\+seq_keys' is not this"):
        type(src).load(path)
    # --refit's families are dropped unread
    kept = type(src).load(path, drop=lambda k: k.startswith("mla_module"))
    assert not any(k.startswith("mla_module") for k in kept.kernels)


def test_prefill_waves_count_ctas_over_the_sms() -> None:
    """One CTA per sequence, head and 128-row query tile (trtllm-gen's context tile), one
    CTA a SM at a time: ``ceil(ctas / sms)``, a batch of chunks at its mean length."""
    assert mf.MLA_PREFILL_TILE_Q == 128
    assert mf.mla_prefill_waves(128, 1, 16, 132) == 1  # 16 CTAs
    assert mf.mla_prefill_waves(129, 1, 16, 132) == 1  # 32 CTAs
    assert mf.mla_prefill_waves(8 * 1024, 8, 16, 132) == 8  # 8 x 16 x 8 = 1,024 CTAs
    assert mf.mla_prefill_waves(8 * 1024, 8, 16, 148) == 7  # more SMs, fewer waves
    assert mf.mla_prefill_waves(8 * 1024, 8, 128, 132) == 63  # 8,192 CTAs
    assert get_gpu("h200").sm_count == 132 and get_gpu("b200").sm_count == 148
    assert aic_mla.system_sms(Path("/x/gb300")) == 160
    with pytest.raises(TwinError, match="no SM count"):
        aic_mla.system_sms(Path("/x/a30"))


def test_the_prefill_kernel_prices_its_waves() -> None:
    """The ``mla_prefill`` fit's waves coefficient adds its waves' seconds to a step:
    zero it and the step's MLA prefill drops by exactly ``c_waves x waves`` a layer."""
    prof = load_profile("b200", "sglang")
    key = "mla_prefill_fp8kv" if DSV3.kv_dtype == "fp8" else "mla_prefill"
    cm = CostModel(DSV3, prof, tp=8, ep=8)
    assert cm.mla_modes[0] == "kernels" and cm.priced.keys["mla_prefill"] == key
    fit = prof.kernels[key]
    assert fit.model == fm.get_formula(key).model_name and fit.params["c_waves"] > 0
    f = aggregate_step([(4096, 0)], [], DSV3.mixer_counts, 0, 1, 64)
    kernel, seconds = cm._mla_prefill(f)
    prof0 = with_fit(prof, key, c_waves=0.0)
    waves = mf.mla_prefill_waves(4096, 1, 16, 148)  # 16 heads x 32 tiles = 512 CTAs
    assert waves == 4 and kernel == "mla_prefill"
    priced = CostModel(DSV3, prof0, tp=8, ep=8)._mla_prefill(f)[1]
    assert seconds - priced == pytest.approx(fit.params["c_waves"] * waves, rel=1e-9)


def test_the_bmm_features_are_its_waves_and_where_its_working_set_is_read() -> None:
    """The absorbed BMMs' launch features (``mla_bmm.mla_bmm_features``): the output
    tiles' waves over the SMs, and the working set's bytes read from L2 where it fits in
    ``features.REPLAY_L2_SHARE`` of it (the tables replay a CUDA graph on the same buffers), else
    from HBM; the FLOPs are the BMM's own."""
    h200 = get_gpu("h200")
    sms, l2 = h200.sm_count or 0, h200.l2_bytes
    assert (sms, l2) == (132, 50e6)
    # W_UV at 32 heads (H200 SGLang's table: 11.4 us at 1,024 tokens, 22.2 us at 1,536)
    flops, nbytes, _ = mbmm.mla_bmm_sums(1024, 32, 512, 128, 2, 2, 2)
    assert nbytes == 2 * (1024 * 32 * 512 + 32 * 512 * 128 + 1024 * 32 * 128)  # 46.1 MB
    assert nbytes > REPLAY_L2_SHARE * 50e6  # past 40 MB: read from HBM
    assert mbmm.mla_bmm_features(1024, 32, 512, 128, 2, 2, 2, sms, l2) == (
        flops,
        nbytes,
        -(-32 * 8 * 1 // 132),  # 256 tiles of 128 x 128: 2 waves
        0,
        -(-32 * 16 * 2 // 132),  # 1,024 tiles of 64 x 64: 8 waves
    )
    small = mbmm.mla_bmm_features(512, 32, 512, 128, 2, 2, 2, sms, l2)
    assert small[1] == 0 and small[3] == mbmm.mla_bmm_sums(512, 32, 512, 128, 2, 2, 2)[1]
    assert small[2] == 1  # 128 tiles, one wave
    assert small[4] == 4  # 512 tiles of 64 x 64, four waves
    # no L2 tabulated: everything from HBM
    assert mbmm.mla_bmm_features(512, 32, 512, 128, 2, 2, 2, sms, None)[1::2] == (small[3], 0)


def test_a_bmm_fit_of_the_old_form_is_refused_by_name(tmp_path: Path) -> None:
    """The BMM families' smooth maximum now reads HBM bytes only (``MLA_BMM_BASE``): a
    ``roofline+weight_elems`` fit is refused in one line, not read with zero coefficients."""
    from twin.costmodel.profile import Profile

    shipped = Path(aic_mla.__file__).parent / "profiles" / "h200-trtllm.json"
    data = json.loads(shipped.read_text())
    fit = data["kernels"]["mla_bmm"]
    params = {k: v for k, v in fit["params"].items() if not k.startswith("c_")}
    fit.update(model="roofline+weight_elems", params={**params, "c_weight_elems": 1e-15})
    with pytest.raises(TwinError, match="'roofline\\+weight_elems' is not this version's"):
        Profile.from_dict(data, "old.json")


def test_h200_trtllm_s_bf16_bmm_meets_the_kernel_target() -> None:
    """TensorRT-LLM 1.3.0rc20's H200 bf16 BMM table (NVIDIA's): with the tiles' waves and
    the L2-resident bytes the held-out median is within 5% and the P90 within 15% (the
    ``roofline+weight_elems`` form: 5.2% / 28.9%, the steps where the working set
    outgrows L2 mispriced)."""
    pytest.importorskip("aiconfigurator_core")
    peaks = get_gpu("h200").peaks()
    families = list(aic_mla.bmm_rows(system_dir("h200"), "trtllm", "1.3.0rc20"))
    assert families[0].kernel == "mla_bmm"
    rows, fit = refit_family(families, "mla_bmm", peaks)
    assert fit.model == "hbm_roofline+waves+l2_bytes+small_waves+quant_steps+k_steps"
    assert {r["quant_steps"] for r in rows} == {0.0}  # no quantisation steps on SM90
    assert_heldout(fit, 0.05, 0.15)


def test_a_serving_step_reads_the_bmm_weights_from_hbm() -> None:
    """The tables' L2-resident reads are their CUDA-graph replays on the same buffers; in a
    serving step a layer's W_UK / W_UV were last read a forward pass earlier, so the step
    prices the fitted BMM with its whole working set at HBM's rate, even where it would fit
    in L2 (16 heads x 8 tokens: about 2 MB against B200's L2)."""
    cm = CostModel(DSV3, load_profile("b200", "sglang"), tp=8, ep=8)
    assert cm.mla_modes == ("kernels", "kernels")
    fit = cm.profile.kernels[cm.priced.keys["mla_bmm"]]
    bmm = lat.compile_fast(cm.priced.keys["mla_bmm"], fit.params, cm.profile.peaks)
    d, e = cm.mla_dims, cm.elem_bytes
    act_b, w_b = cm.priced.mla_bmm_bytes
    sms, l2 = get_gpu("b200").sm_count or 0, get_gpu("b200").l2_bytes
    cold = warm = 0.0
    for k, n in ((d.nope, d.kv_lora), (d.kv_lora, d.v)):
        steps = (0.0, mbmm.bmm_k_steps(k))  # no quantisation loop; the k-loop's steps
        cold += bmm(*mbmm.mla_bmm_features(8, d.heads, k, n, e, act_b, w_b, sms, None), *steps)
        warm += bmm(*mbmm.mla_bmm_features(8, d.heads, k, n, e, act_b, w_b, sms, l2), *steps)
    parts = dict((k, v) for _, k, v in cm._mla_decode(8, 8 * 1000))
    assert parts["mla_bmm"] == pytest.approx(cold, rel=1e-12)
    assert cold > warm


def test_an_mla_bmm_fit_on_a_gpu_without_an_sm_count_prices_no_waves() -> None:
    """A profile whose GPU ``twin.hardware.SM_COUNTS`` lacks (a renamed or own profile,
    ``--profile``) keeps its BMM fit and prices no waves, as the decode kernel's launch
    prices none (``mla_decode_launch``): no division by a zero SM count."""
    assert mbmm.mla_bmm_features(64, 16, 128, 512, 2, 2.0, 2.0, 0, None)[2::2] == (0, 0)
    prof = dataclasses.replace(load_profile("h200", "sglang"), gpu="own-gpu")
    model = px.with_precision(get_model("deepseek-r1"), "fp8-block", "bf16")
    cm = CostModel(model, prof, 8)
    assert cm._mla_bmm_fit and cm.sms is None
    assert 0 < cm.decode([1000] * 8) < cm.decode([1000] * 64)


@pytest.mark.slow
def test_b200_trtllm_s_bf16_decode_module_meets_the_kernel_target() -> None:
    """TensorRT-LLM 1.3.0rc20's B200 bf16 decode-module table (NVIDIA's): with its
    attention kernel's launch (trtllm-gen's CTAs, waves, re-read keys, split partials) the
    held-out median is within 5% and the P90 within 15% (without them: 5.4% / 18.4%, the
    32-head long-context series 30-40% under, the low-latency kernel's two CTAs a sequence
    each reading every key)."""
    pytest.importorskip("aiconfigurator_core")
    peaks = get_gpu("b200").peaks()
    fams = aic_mla.module_rows(system_dir("b200"), "trtllm", "1.3.0rc20")
    rows, fit = refit_family(fams, "mla_module_decode", peaks)
    assert {r["launch_ctas"] > 0 for r in rows} == {True}
    assert fit.model == fm.get_formula("mla_module_decode").model_name
    assert_heldout(fit, 0.05, 0.15)
