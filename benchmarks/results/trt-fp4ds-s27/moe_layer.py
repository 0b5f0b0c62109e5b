"""The twin's nvfp4 expert time per MoE layer (DeepSeek-R1, B200, MoE TP 8) by token count,
without and with ``--set moe_backend`` (the 1.2.0rc6.post3 1k/1k c128 tp 8 fit row's plan),
beside NVIDIA's table (1.3.0rc20, balanced): PYTHONPATH=. python moe_layer.py"""

import importlib
import tempfile
from pathlib import Path

import twin.validate.silicon as sil

dep = importlib.import_module("twin.validate.silicon.deployment")
RULE = dep.inferencemax_trtllm_fp4_moe_backend
ROW = "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c128_tp8_0_ep1_0_982"
rows = [r for r in sil.read_rows(sil.default_csv()) if r.id == ROW]
# ms per layer at 8, 64, 128, 256, 512, 1024, 2048, 8192 tokens (moe_tp 8, ep 1)
TABLE = {
    "CUTLASS": (0.123, 0.303, 0.307, 0.320, 0.342, 0.405, 0.525, 1.454),
    "TRTLLM-gen": (0.033, 0.095, 0.105, 0.131, 0.146, 0.155, 0.185, 0.421),
}
TOKENS = (8, 64, 128, 256, 512, 1024, 2048, 8192)
for name, rule in (
    ("no flag", lambda r: None),
    ("TRTLLM", lambda r: "TRTLLM"),
    ("CUTLASS", lambda r: "CUTLASS"),
):
    dep.inferencemax_trtllm_fp4_moe_backend = rule
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    with tempfile.TemporaryDirectory() as tmp:
        pr = sil.plan_run(plans[0], Path(tmp)).pricer
    while not hasattr(pr, "cost_model"):
        pr = pr.inner
    cm, n = pr.cost_model, 58
    got = [cm.decode([2000] * t, breakdown=True).items["moe"]["moe"] * 1e3 / n for t in TOKENS]
    print(f"{name:8s}", " ".join(f"{t}:{x:.3f}" for t, x in zip(TOKENS, got, strict=True)))
for name, vals in TABLE.items():
    print(f"{name:8s}", " ".join(f"{t}:{x:.3f}" for t, x in zip(TOKENS, vals, strict=True)))
