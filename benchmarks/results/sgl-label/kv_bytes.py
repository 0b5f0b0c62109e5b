"""Bytes a cached token per layer that each MLA decode module table's timings read.

(latency(ctx2) - latency(ctx1)) x datasheet bandwidth / (batch x (ctx2 - ctx1)), median
over repeats, for SGLang's module tables (every GPU, release and backend) and, as the
reference of the same GPU, TensorRT-LLM 1.3.0rc20's module tables at each cache (on
Blackwell the kernel SGLang's ``trtllm_mla`` runs too). bf16 latent row 1,152 bytes,
fp8 576 (plus what the kernel reads besides).
"""

import glob

import aiconfigurator_core
import pandas as pd

D = aiconfigurator_core.__path__[0] + "/systems/data"
BW = {"h100_sxm": 3.35e12, "h200_sxm": 4.8e12, "b200_sxm": 8e12, "b300_sxm": 8e12}
SPANS = ((2048, 4096), (4096, 8192), (8192, 16384))


def slopes(g: pd.DataFrame, gpu: str) -> str:
    out = []
    for heads, batch in ((16, 16), (16, 64), (128, 16), (128, 64)):
        s = g[(g.num_heads == heads) & (g.batch_size == batch)].groupby("ctx").latency.median()
        got = [
            f"{(s[b] - s[a]) * 1e-3 * BW[gpu] / (batch * (b - a)):5.0f}"
            for a, b in SPANS
            if a in s.index and b in s.index
        ]
        if got:
            out.append(f"h{heads} b{batch}: " + " ".join(got))
    return " | ".join(out)


for gpu in BW:
    print(f"## {gpu} (bytes/token/layer at {BW[gpu] / 1e12} TB/s; spans {SPANS})")
    for f in sorted(glob.glob(f"{D}/{gpu}/mla/sglang/*/wideep_generation_mla_perf.parquet")):
        df = pd.read_parquet(f)
        df = df.assign(ctx=df.isl)  # generation rows: isl is the cached tokens, step 0
        for (src, kv), g in df.groupby(["kernel_source", "kv_cache_dtype"]):
            print(f"sglang {f.split('/')[-2]:12} {src:10} label {kv:5}: {slopes(g, gpu)}")
    f = f"{D}/{gpu}/mla/trtllm/1.3.0rc20/mla_generation_module_perf.parquet"
    df = pd.read_parquet(f)
    df = df.assign(ctx=df.isl + df.step - 1)
    df = df[(df.tp_size == 1)] if "tp_size" in df else df
    for (src, kv, gemm), g in df.groupby(["kernel_source", "kv_cache_dtype", "gemm_type"]):
        print(f"trtllm 1.3.0rc20 {gemm:10} {src:7} kv {kv:5}: {slopes(g, gpu)}")
