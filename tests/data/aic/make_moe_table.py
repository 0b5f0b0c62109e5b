"""Write ``moe/vllm/0.24.0/moe_perf.parquet`` under ``tests/data/aic`` in the layout and
schema of NVIDIA's ``aiconfigurator-core`` database (its columns: ``moe_dtype``,
``num_tokens``, ``hidden_size``, ``inter_size``, ``topk``, ``num_experts``,
``moe_tp_size``, ``moe_ep_size``, ``distribution``, ``latency`` in ms).

Every latency comes from the twin's own ``moe`` model at known parameters (``TRUE``)
on the features ``twin.calibration.aic_moe.moe_row`` computes, times a seeded +-3%
jitter, so the tests can check that the import recovers them. The ``power_law_1.2``
rows (twice as slow) and a ``nongated`` kernel's rows must be dropped by the reader.
No row comes from the real database. Run from the repository root:
``python tests/data/aic/make_moe_table.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).parent / "systems" / "data" / "h100_sxm"
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from twin.calibration.aic_moe import moe_row  # noqa: E402
from twin.costmodel import latency as lat  # noqa: E402
from twin.hardware import get_gpu  # noqa: E402
from twin.precision import WEIGHT_FORMATS  # noqa: E402

PEAKS = get_gpu("h100").peaks()
TRUE = {
    "moe": {
        "t0_s": 3e-5,
        "eff_flops": 0.7,
        "eff_bytes": 0.8,
        "p": 2.0,
        "c_weight_elems": 1e-14,
        "c_routed_elems": 2e-13,
        # The tile and serial per-expert terms came after this table was written: zero
        # keeps its rows.
        "c_tile_bytes": 0.0,
        "c_active_experts": 0.0,
    }
}
# (hidden, inter, topk, experts): Qwen3-30B-A3B's and a DeepSeek-like shape.
MODELS = ((2048, 768, 8, 128), (7168, 2048, 8, 256))
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
LAYOUTS = ((1, 1), (1, 4), (4, 1), (2, 2))  # (moe_tp, moe_ep)


def main() -> None:
    rng = np.random.default_rng(34)
    fmt = WEIGHT_FORMATS["bf16"]
    rows = []
    for d, inter, top, n_exp in MODELS:
        for mtp, ep in LAYOUTS:
            for t in TOKENS:
                shape = {
                    "num_tokens": t,
                    "hidden_size": d,
                    "inter_size": inter,
                    "topk": top,
                    "num_experts": n_exp,
                    "moe_tp_size": mtp,
                    "moe_ep_size": ep,
                }
                feat = moe_row({**shape}, fmt, "moe", 1.0)
                extras = {x: feat[x] for x in ("weight_elems", "routed_elems")}
                s = lat.predict("moe", TRUE["moe"], PEAKS, feat["flops"], feat["bytes"], extras)
                ms = s * 1e3 * float(rng.uniform(0.97, 1.03))
                base = {
                    "framework": "VLLM",
                    "version": "0.24.0",
                    "device": "NVIDIA H100 80GB HBM3",
                    "op_name": "moe",
                    "kernel_source": "vllm_unquantizedfusedmoe_triton_tritonexperts",
                    "moe_dtype": "bfloat16",
                    **shape,
                }
                rows.append({**base, "distribution": "balanced", "latency": ms})
                rows.append({**base, "distribution": "power_law_1.2", "latency": 2 * ms})
                if t == 16:  # another kernel's rows (Nemotron's relu2): never kept
                    other = {**base, "kernel_source": "moe_torch_flow_nongated"}
                    rows.append({**other, "distribution": "balanced", "latency": 3 * ms})
    path = ROOT / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


if __name__ == "__main__":
    main()
