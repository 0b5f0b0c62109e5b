"""Diagnosis (issue 31, helper vllm-8b): the H200 vLLM profile's ``gemm_fp8`` and
``attn_decode_fp8kv`` fits against the aiconfigurator-core 0.12.0 table rows they were
fitted on, at Llama-3.1-8B's shapes (per-GPU linear shapes at tp 1-8; decode attention of
32 query / 8 KV heads, head dim 128, an fp8 cache, per layer).

    PYTHONPATH=. python benchmarks/results/vllm-8b/fits_vs_tables.py > fits_vs_tables.txt
"""

from __future__ import annotations

from pathlib import Path

import aiconfigurator_core
import pandas as pd

from twin.costmodel.model import CostModel
from twin.costmodel.profile_store import load_profile
from twin.precision import with_precision
from twin.presets import get_model

DATA = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / "h200_sxm"
model = with_precision(get_model("llama-3-8b"), "fp8", "fp8")
profile = load_profile("h200", engine="vllm")
gemm = pd.read_parquet(DATA / "gemm/vllm/0.24.0/gemm_perf.parquet")
gemm = gemm[gemm.gemm_dtype == "fp8"]
attn = pd.read_parquet(DATA / "attention/vllm/0.24.0/generation_attention_perf.parquet")
attn = attn[
    (attn.num_heads == 32)
    & (attn.num_key_value_heads == 8)
    & (attn.head_dim == 128)
    & (attn.window_size == 0)
    & (attn.kv_cache_dtype == "fp8")
]
print("linear (k, n) at m rows: twin fit ms / table ms")
for tp in (1, 2, 4, 8):
    cost = CostModel(model, profile, tp)
    for k, n in ((4096, 6144 // tp), (4096 // tp, 4096), (4096, 28672 // tp), (14336 // tp, 4096)):
        for m in (128, 1024, 4096, 8192):
            row = gemm[(gemm.m == m) & (gemm.n == n) & (gemm.k == k)]
            if not len(row):
                continue
            twin_ms = cost._proj(m, k, n) * 1e3
            table_ms = float(row.latency.iloc[0])
            ratio = twin_ms / table_ms
            print(f"tp {tp} k {k} n {n} m {m}: {twin_ms:.4f} / {table_ms:.4f} = {ratio:.2f}")
cost = CostModel(model, profile, 1)
layers = model.n_attention_layers
print("decode attention, batch x context: twin fit ms a step / table ms x layers")
for batch in (16, 64, 128):
    for ctx in (2047, 4095, 8191):
        row = attn[(attn.batch_size == batch) & (attn.step == ctx)]
        if not len(row):
            continue
        twin_ms = cost.decode([ctx] * batch, breakdown=True).by_kernel["attn_decode"] * 1e3
        table_ms = float(row.latency.iloc[0]) * layers
        print(f"{batch} x {ctx}: {twin_ms:.3f} / {table_ms:.3f} = {twin_ms / table_ms:.2f}")
