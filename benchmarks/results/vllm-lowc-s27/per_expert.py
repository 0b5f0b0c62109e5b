"""Issue 31, helper vllm-lowc (session 27): FlashInfer CUTLASS block-fp8 fused MoE's cost per
expert held on the GPU, from NVIDIA's vLLM 0.24.0 tables (aiconfigurator-core 0.12.0,
``{gpu}/moe/vllm/0.24.0/moe_perf.parquet``, ``vllm_fp8moe_flashinfer_cutlass_flashinferexperts``,
balanced routing). The table times only expert-parallel layouts (moe_tp 1, EP 2..256): at
1 token, its latency less the weights the token's experts stream (HBM peak) against the
experts on the GPU (E / EP, from 16 up), per shape of 128 experts or more; the median
slope is the value. ``python benchmarks/results/vllm-lowc-s27/per_expert.py``
"""

from __future__ import annotations

from pathlib import Path

import aiconfigurator_core
import numpy as np
import pandas as pd

HBM = {"h200_sxm": 4.8e12, "h100_sxm": 3.35e12}  # bytes/s, the datasheets' peak
DATA = Path(aiconfigurator_core.__file__).parent / "systems" / "data"

for gpu, bw in HBM.items():
    d = pd.read_parquet(DATA / gpu / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet")
    f = d[(d.kernel_source == "vllm_fp8moe_flashinfer_cutlass_flashinferexperts")]
    f = f[(f.distribution == "balanced") & (f.num_tokens == 1) & (f.num_experts >= 128)]
    slopes = []
    for (h, i, e, k), g in f.groupby(["hidden_size", "inter_size", "num_experts", "topk"]):
        g = g.sort_values("moe_ep_size")
        local = e / g.moe_ep_size.to_numpy()
        weights = (k * local / e) * 3 * h * i / bw  # fp8 bytes of the experts reached
        rest = g.latency.to_numpy() * 1e-3 - weights
        keep = local >= 16
        slope = np.polyfit(local[keep], rest[keep], 1)[0]
        slopes.append(slope)
        print(f"{gpu} hidden {h} inter {i} experts {e} top {k}: {slope * 1e6:.3f} us per expert")
    print(f"{gpu} median over {len(slopes)} shapes: {np.median(slopes) * 1e6:.3f} us")
