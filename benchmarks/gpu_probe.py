"""GPU smoke and first numbers for the reference executor (run on the lent machine).

1. Exactness on the GPU: tiny-hybrid in bf16 through the real cache (a shared
   prefix hit at a branch point, a next-turn hit after the output, hits after
   evictions) against a full prefill without reuse.
2. ``marconi-hybrid-7b`` at full size: measured prefill seconds (CUDA-synchronised
   median of repeats) against the cost model's prediction on each profile given.

Usage: python benchmarks/gpu_probe.py [PROFILE ...] [--json OUT.json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
import torch

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.presets import get_model
from twin.reference.executor import ExecutorConfig, ReferenceExecutor
from twin.reference.model import HybridLM, SeqState


def exactness() -> dict:
    m = get_model("tiny-hybrid")
    cap = 64 * m.kv_bytes_per_token * 8 + 4 * m.ssm_checkpoint_bytes
    ex = ReferenceExecutor(m, ExecutorConfig(device="cuda", cache_bytes=cap, repeats=1))
    rng = np.random.default_rng(0)
    system = rng.integers(0, 500, 96).astype(np.int32)
    worst, hits, history = 0.0, 0, {}
    for i in range(40):
        sid = i % 5
        tail = rng.integers(0, 500, int(rng.integers(8, 64))).astype(np.int32)
        prompt = np.concatenate([history.get(sid, system), tail])
        out = rng.integers(0, 500, int(rng.integers(4, 32))).astype(np.int32)
        served = ex.serve(prompt, out)
        history[sid] = np.concatenate([prompt, out])
        ref = ex.lm.forward(ex._ids(prompt)).logits.float()
        if served.exact:
            err = float((served.logits.float() - ref).norm() / ref.norm())
            worst = max(worst, err)
        hits += served.hit > 0
    return {"worst_rel_err_bf16": worst, "hits": hits, "evictions": ex.cache.evictions}


def timed(lm: HybridLM, ids: torch.Tensor, past: SeqState | None, repeats: int = 5) -> float:
    for _ in range(2):
        lm.forward(ids, past)
    ts = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lm.forward(ids, past)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def seven_b(profiles: list[str]) -> list[dict]:
    m = get_model("marconi-hybrid-7b")
    lm = HybridLM(m, "cuda", torch.bfloat16, seed=0)
    models = {p: CostModel(m, load_profile(p)) for p in profiles}
    gen = torch.Generator().manual_seed(1)
    rows = []
    for n_new, n_cached in [
        (16, 0),
        (128, 0),
        (512, 0),
        (1024, 0),
        (2048, 0),
        (4096, 0),
        (64, 2048),
        (256, 2048),
        (512, 4096),
        (1024, 8192),
    ]:
        past = None
        if n_cached:
            first = lm.forward(torch.randint(0, m.vocab_size, (n_cached,), generator=gen).cuda())
            past = SeqState(kv=first.kv, ssm=first.ssm_end)
        ids = torch.randint(0, m.vocab_size, (n_new,), generator=gen).cuda()
        meas = timed(lm, ids, past)
        row = {"n_new": n_new, "n_cached": n_cached, "measured_s": meas}
        for p, cm in models.items():
            row[f"pred_{p}"] = cm.prefill(n_new, n_cached)
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    args = sys.argv[1:]
    out = None
    if "--json" in args:
        i = args.index("--json")
        out = args[i + 1]
        args = args[:i] + args[i + 2 :]
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    result["exactness"] = exactness()
    print(result["exactness"], flush=True)
    result["implementations"] = ReferenceExecutor(
        get_model("tiny-hybrid"), ExecutorConfig(device="cuda")
    ).lm.ops.notes
    print(result["implementations"], flush=True)
    result["marconi_hybrid_7b"] = seven_b(args or ["h100"])
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
