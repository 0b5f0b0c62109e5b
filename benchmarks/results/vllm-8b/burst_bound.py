"""Diagnosis (issue 31, helper vllm-8b): a lower bound on each Llama-3.1-8B-FP8 H200 vLLM
row's mean TTFT if its measured phase started from an idle server with all c clients'
full prompts at once (aiperf's phases, twin.validate.silicon.plan): the k-th prompt of
that burst cannot see its first token before k prefills, and every later request waits
at least one prefill, so mean TTFT >= ((c + 1) / 2 + rounds - 1) x P / rounds, with P
one cold prefill of the ISL at the row's TP (the twin's price divided by 1.15, its
fp8 GEMM fit's mean excess over the table rows at these shapes, so a generous bound).

    PYTHONPATH=. python benchmarks/results/vllm-8b/burst_bound.py
"""

import twin.validate.silicon as sil
from twin.costmodel.model import CostModel
from twin.costmodel.profile_store import load_profile
from twin.precision import with_precision
from twin.presets import get_model

ROUNDS = 20
model = with_precision(get_model("llama-3-8b"), "fp8", "fp8")
profile = load_profile("h200", engine="vllm")
rows = [r for r in sil.read_rows(sil.default_csv()) if "Llama-3.1-8B-Instruct-FP8" in r.model_path]
print("split     isl   osl    c tp  P_ms  bound_ms  measured_ms  measured/bound")
for r in sorted(rows, key=lambda r: (r.tp, r.isl, r.osl)):
    p = float(CostModel(model, profile, r.tp).prefill(r.isl)) * 1e3 / 1.15
    c = r.concurrency
    bound = ((c + 1) / 2 + ROUNDS - 1) * p / ROUNDS
    print(
        f"{r.split:8s} {r.isl:5d} {r.osl:5d} {c:4d} {r.tp:2d} {p:5.1f} {bound:9.1f} "
        f"{r.ttft_ms:12.1f} {r.ttft_ms / bound:14.2f}"
    )
