"""The GDN chunk fallback's two measured terms per GPU (``twin.costmodel.mixer_kernels.
GDN_CHUNK_HEAD_S`` and ``GDN_CHUNK_SEQ_S``), fitted on NVIDIA's SGLang 0.5.14
``chunk_gated_delta_rule`` context rows (aiconfigurator-core 0.12.0,
``systems/data/<gpu>/linear_attention/sglang/0.5.14/gdn_perf.parquet``) at Qwen3.5-397B-A17B's
tp 4 and tp 8 shapes (16 and 8 value heads), every batch size, steps of 1,024 to 65,536
tokens: the price is max(roofline + c_head x chunks x heads, c_seq x the longest sequence's
chunks); (c_head, c_seq) on a grid, least mean APE. Run: PYTHONPATH=. python THIS."""

import glob

import numpy as np
import pandas as pd

from twin.costmodel import latency as lat
from twin.costmodel import mixer_kernels as mk
from twin.costmodel.profile_store import load_profile

ROOT = glob.glob("/work/main/.venv/lib/python3*/site-packages/aiconfigurator_core/systems/data")[0]
for gpu, system in [
    ("b200", "b200_sxm"),
    ("b300", "b300_sxm"),
    ("gb200", "gb200"),
    ("h200", "h200_sxm"),
]:
    prof = load_profile(gpu, "sglang")
    peaks = {**prof.peaks, "fp32_flops": mk.fp32_peak(prof)}
    d = pd.read_parquet(f"{ROOT}/{system}/linear_attention/sglang/0.5.14/gdn_perf.parquet")
    s = d[
        (d.model_name == "Qwen/Qwen3.5-397B-A17B")
        & (d.phase == "context")
        & (d.kernel_source == "chunk_gated_delta_rule")
        & d.num_v_heads.isin([8, 16])
        & (d.num_tokens >= 1024)
        & (d.num_tokens <= 65536)
    ]
    feats, depth = [], []
    for r in s.itertuples():
        per_seq = -(-int(r.seq_len) // 64)
        n = int(r.batch_size) * per_seq
        feats.append(
            mk.gdn_chunk_sums(
                int(r.num_tokens), n, int(r.num_v_heads), int(r.num_k_heads), 128, 128, 64, 2
            )
        )
        depth.append(per_seq)
    y = s.latency.to_numpy() * 1e-3
    dep = np.array(depth, dtype=float)
    one = (s.batch_size == 1).to_numpy()
    base = lat.compile_fast("gdn_chunk", mk.FALLBACK["gdn_chunk"], peaks)
    roof = np.array([base(*f) for f in feats])
    best = None
    for c_head in np.arange(0.0, 4.01e-7, 0.05e-7):
        k = lat.compile_fast("gdn_chunk", {**mk.FALLBACK["gdn_chunk"], "c_chunks": c_head}, peaks)
        par = np.array([k(*f) for f in feats])
        for c_seq in np.arange(0.0, 8.01e-6, 0.1e-6):
            ape = np.abs(np.maximum(par, c_seq * dep) / y - 1)
            if best is None or ape.mean() < best[0]:
                fit = np.maximum(par, c_seq * dep)
                best = (
                    ape.mean(),
                    c_head,
                    c_seq,
                    np.median(ape),
                    ape.max(),
                    np.median(fit[one] / y[one] - 1),
                )
    m, c_head, c_seq, med, mx, b1 = best
    print(
        f"{gpu}: c_head {c_head:.3g} s, c_seq {c_seq:.3g} s on {len(y)} rows; "
        "roofline alone / table "
        f"median {np.median(roof / y):.2f}; fit APE mean {m:.2f} median {med:.2f} max {mx:.2f}; "
        f"batch 1 median error {b1:+.2f}"
    )
