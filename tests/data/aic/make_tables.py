"""Write the small tables under ``tests/data/aic`` in the layout and schema of NVIDIA's
``aiconfigurator-core`` database (``systems/data/<system>/<op>/<framework>/<version>/``).

Every latency is generated here from the twin's own kernel models at known
parameters (``TRUE``), times a seeded +-3% jitter, so the tests can check that
the import recovers them. No row comes from the real database. One GEMM row is
made faster than the H100's peak FLOP/s, to be flagged. The precision families
(``twin.precision``) get their own rows: an fp8 GEMM grid at the format's operand bytes
against the FP8 peak, and attention over an fp8 KV cache (1-byte K/V), drawn from
their own seeded generator after the rest. Run from the repository root:
``python tests/data/aic/make_tables.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).parent / "systems" / "data" / "h100_sxm"
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from twin.costmodel import collective_families as colf  # noqa: E402
from twin.costmodel import features as ft  # noqa: E402
from twin.costmodel import latency as lat  # noqa: E402
from twin.costmodel import ssm_features as ssm_ft  # noqa: E402
from twin.hardware import get_gpu  # noqa: E402
from twin.precision import WEIGHT_FORMATS, gemm_operand_bytes  # noqa: E402

PEAKS = {**get_gpu("h100").peaks(), **get_gpu("h100").low_precision_peaks()}
DEVICE = "NVIDIA H100 80GB HBM3"
AR_OFF = {"t0_2_s": 1.0, "eff_bytes_2": 1.0, "t0_3_s": 1.0, "eff_bytes_3": 1.0}
TRUE = {
    "gemm": {
        "t0_s": 4e-6,
        "eff_flops": 0.75,
        "eff_bytes": 0.8,
        "p": 3.0,
        "c_weight_elems": 0.0,
        "c_wave_k": 0.0,
    },
    "attn_prefill": {
        "t0_s": 1e-5,
        "eff_flops": 0.6,
        "eff_bytes": 0.5,
        "p": 2.0,
        "c_score_elems": 1e-13,
        "c_tiles": 2e-8,
    },
    "attn_decode": {
        "t0_s": 1e-5,
        "eff_flops": 0.3,
        "eff_bytes": 0.8,
        "p": 2.0,
        "c_score_elems": 0.0,
        "c_tiles": 2e-8,
    },
    # The launch terms (helper conv38) at 0: the tables as they were generated.
    "conv1d": {
        "t0_s": 4e-6,
        "eff_flops": 0.05,
        "eff_bytes": 0.7,
        "p": 4.0,
        "c_seq_channels": 1e-9,
        "c_unaligned_ctas": 0.0,
    },
    "conv1d_update": {
        "t0_s": 4e-6,
        "eff_flops": 0.05,
        "eff_bytes": 0.8,
        "p": 4.0,
        "c_cta_waves": 0.0,
    },
    # One line: the other two (``collective_families.ALLREDUCE_LINES``) a second out of the way.
    "allreduce_2gpu": {**AR_OFF, "t0_s": 4e-6, "eff_bytes": 0.6},
    "allreduce_8gpu": {**AR_OFF, "t0_s": 6e-6, "eff_bytes": 0.7},
    "gemm_fp8": {
        "t0_s": 6e-6,
        "eff_flops": 0.6,
        "eff_bytes": 0.8,
        "p": 2.0,
        "c_weight_elems": 0.0,
        "c_wave_k": 0.0,
    },
    "attn_prefill_fp8kv": {
        "t0_s": 1e-5,
        "eff_flops": 0.35,
        "eff_bytes": 0.5,
        "p": 2.0,
        "c_score_elems": 1e-13,
        "c_tiles": 2e-8,
    },
    "attn_decode_fp8kv": {
        "t0_s": 1e-5,
        "eff_flops": 0.15,
        "eff_bytes": 0.8,
        "p": 2.0,
        "c_score_elems": 0.0,
        "c_tiles": 2e-8,
    },
}
rng = np.random.default_rng(12)


def ms(kernel: str, feats: ft.Features) -> float:
    """Latency in ms (the database's unit) of the true model, jittered."""
    flops, nbytes, extras = feats
    t = lat.predict(kernel, TRUE[kernel], PEAKS, flops, nbytes, extras)
    return float(t * 1e3 * rng.uniform(0.97, 1.03))


def write(rel: str, rows: list[dict]) -> None:
    path = ROOT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def label(framework: str, version: str, op: str, source: str) -> dict:
    return {
        "framework": framework,
        "version": version,
        "device": DEVICE,
        "op_name": op,
        "kernel_source": source,
    }


def main() -> None:
    gemm = []
    for m in (1, 8, 64, 256, 1024, 4096):
        for n in (1024, 4096, 14336):
            for k in (1024, 4096):
                t = ms("gemm", ft.gemm_features(m, k, n, 2))
                gemm.append(
                    {
                        **label("VLLM", "0.24.0", "gemm", "torch.nn.functional.linear"),
                        "gemm_dtype": "bfloat16",
                        "m": m,
                        "n": n,
                        "k": k,
                        "latency": t,
                    }
                )
    # an impossible one (flagged)
    gemm.append({**gemm[-1], "m": 4096, "n": 14336, "k": 4096, "latency": 1e-3})

    ctx, gen = [], []
    attn = {
        "beam_width": 1,
        "attn_dtype": "bfloat16",
        "kv_cache_dtype": "bfloat16",
        "window_size": 0,
    }
    for b in (1, 4, 32):
        for s in (16, 256, 2048, 8192):
            for h, kvh in ((32, 8), (8, 8)):
                f, by, sc, tl = ft.attn_prefill_sums(
                    b * s, b * s * (s + 1) // 2, b * s, b, h, kvh, 128, 2
                )
                t = ms("attn_prefill", (f, by, {"score_elems": sc, "tiles": tl}))
                row = {
                    **label("VLLM", "0.24.0", "context_attention", "vllm_flash_attn_fa3"),
                    "batch_size": b,
                    "isl": s,
                    "num_heads": h,
                    "num_key_value_heads": kvh,
                    "head_dim": 128,
                    "step": 0,
                    **attn,
                    "latency": t,
                }
                ctx.append(row)
        for c in (15, 1023, 16383):
            for h, kvh in ((32, 8), (8, 8)):
                t = ms("attn_decode", ft.attn_decode_features(b, c + 1, h, kvh, 128, 2))
                gen.append(
                    {
                        **label("VLLM", "0.24.0", "generation_attention", "vllm_flash_attn_fa3"),
                        "batch_size": b,
                        "isl": 1,
                        "num_heads": h,
                        "num_key_value_heads": kvh,
                        "head_dim": 128,
                        "step": c,
                        **attn,
                        "latency": t,
                    }
                )
    ctx.append({**ctx[0], "kernel_source": "vllm_flash_attn_fa4"})  # another backend: ignored

    mamba = []
    for b in (1, 8, 64):
        for s in (1, 128, 2048):
            nheads, hd, g, n = 128, 64, 8, 128
            width = nheads * hd + 2 * g * n
            base = {
                **label("TRTLLM", "1.3.0rc20", "mamba2", ""),
                "batch_size": b,
                "num_tokens": b * s,
                "d_model": 4096,
                "d_state": n,
                "d_conv": 4,
                "nheads": nheads,
                "head_dim": hd,
                "n_groups": g,
                "chunk_size": 128,
            }
            t = ms("conv1d", ssm_ft.conv1d_features(b, s, width, 4, 2))
            mamba.append(
                {
                    **base,
                    "kernel_source": "causal_conv1d_fn",
                    "phase": "context",
                    "seq_len": s,
                    "latency": t,
                }
            )
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        for width in (6144, 10240):
            t = ms("conv1d_update", ssm_ft.conv1d_features(b, 1, width, 4, 2, with_state=True))
            mamba.append(
                {
                    **label("TRTLLM", "1.3.0rc20", "mamba2", "causal_conv1d_update"),
                    "phase": "generation",
                    "batch_size": b,
                    "seq_len": 1,
                    "num_tokens": b,
                    "d_model": 4096,
                    "d_state": 128,
                    "d_conv": 4,
                    "nheads": (width - 2 * 8 * 128) // 64,
                    "head_dim": 64,
                    "n_groups": 8,
                    "chunk_size": 128,
                    "latency": t,
                }
            )
    write("linear_attention/trtllm/1.3.0rc20/mamba2_perf.parquet", mamba)

    nccl, custom = [], []
    for n in (2, 8):
        kernel = colf.allreduce_kernel(n)
        for size in (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 26):
            t = ms(kernel, ft.allreduce_features(2 * size, n))
            row = {"num_gpus": n, "message_size": size, "latency": t}
            if size <= 1 << 22:
                custom.append(
                    {
                        **label("vLLM", "0.24.0", "all_reduce", "vLLM_custom_graph"),
                        "allreduce_dtype": "bfloat16",
                        "backend": "vllm_graph",
                        **row,
                    }
                )
                custom.append(
                    {
                        **custom[-1],
                        "kernel_source": "vLLM_custom_eager",
                        "backend": "vllm_eager",
                        "latency": 10 * t,
                    }
                )  # eager: ignored
            nccl.append(
                {
                    **label("TRTLLM", "2.29.2", "all_reduce", "NCCL"),
                    "nccl_dtype": "half",
                    **row,
                    "latency": 1.5 * t,
                }
            )  # NCCL: used above the custom sizes
    write("comm/nccl/2.29.2/nccl_perf.parquet", nccl)
    write("comm/vllm/0.24.0/custom_allreduce_perf.parquet", custom)
    precision_rows(gemm, ctx, gen)
    write("gemm/vllm/0.24.0/gemm_perf.parquet", gemm)
    write("attention/vllm/0.24.0/context_attention_perf.parquet", ctx)
    write("attention/vllm/0.24.0/generation_attention_perf.parquet", gen)


def precision_rows(gemm: list[dict], ctx: list[dict], gen: list[dict]) -> None:
    """The fp8 GEMM grid and the fp8-KV attention rows (their own generator, so the rows
    above keep their jitter)."""
    global rng
    rng = np.random.default_rng(13)
    act, weight = gemm_operand_bytes(WEIGHT_FORMATS["fp8"], 2)
    for m in (1, 8, 64, 256, 1024, 4096):
        for n in (1024, 4096, 14336):
            for k in (1024, 4096):
                t = ms("gemm_fp8", ft.gemm_features_at(m, k, n, 2, act, weight))
                source = "CutlassFP8ScaledMMLinearKernel"
                gemm.append(
                    {**label("VLLM", "0.24.0", "gemm", source), "gemm_dtype": "fp8"}
                    | {"m": m, "n": n, "k": k, "latency": t}
                )
    fp8kv = {"beam_width": 1, "attn_dtype": "bfloat16", "kv_cache_dtype": "fp8", "window_size": 0}
    for b in (1, 4, 32):
        for s in (16, 256, 2048, 8192):
            for h, kvh in ((32, 8), (8, 8)):
                f, by, sc, tl = ft.attn_prefill_sums(
                    b * s, b * s * (s + 1) // 2, b * s, b, h, kvh, 128, 2, 1
                )
                t = ms("attn_prefill_fp8kv", (f, by, {"score_elems": sc, "tiles": tl}))
                ctx.append(
                    {**label("VLLM", "0.24.0", "context_attention", "vllm_flash_attn_fa3")}
                    | {"batch_size": b, "isl": s, "num_heads": h, "num_key_value_heads": kvh}
                    | {"head_dim": 128, "step": 0, **fp8kv, "latency": t}
                )
        for c in (15, 1023, 16383):
            for h, kvh in ((32, 8), (8, 8)):
                feats = ft.attn_decode_features(b, c + 1, h, kvh, 128, 2, 1)
                t = ms("attn_decode_fp8kv", feats)
                gen.append(
                    {**label("VLLM", "0.24.0", "generation_attention", "vllm_flash_attn_fa3")}
                    | {"batch_size": b, "isl": 1, "num_heads": h, "num_key_value_heads": kvh}
                    | {"head_dim": 128, "step": c, **fp8kv, "latency": t}
                )


if __name__ == "__main__":
    main()
