"""Per-layer host overhead: what a real forward pass costs beyond the kernels the profile times.

The kernel fits price the work of each kernel. A real forward pass also pays
for everything around them: the framework's dispatch of each op, the small
ops the cost model does not itemise (reshapes, splits, RoPE's pieces, the
causal mask), Python. Vidur profiles these "CPU overheads" separately from
its operators (Agrawal et al., MLSys 2024, sec. 4); here they are measured
per layer kind by running one layer of the reference model
(:mod:`twin.reference.model`) over a few tokens, where kernel work is
negligible, and subtracting what the kernel fits already predict for it.

How it composes (``CostModel``):

- ``add`` (CPU): host and kernels run one after another, so a step costs
  kernels + sum over layers of the overhead;
- ``max`` (GPU): the host enqueues kernels ahead of the device, so a step
  costs the larger of the kernels' time and the host's time to issue them
  (the per-layer time at a few tokens, where the device idles).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any, cast

from twin.costmodel.breakdown import StepCost
from twin.costmodel.profile import Profile
from twin.model import ModelSpec

SIZES = (1, 2, 4, 8)  # tokens: kernel work is negligible, overheads are not
REPEATS = 25


def measure_layer_overhead(
    model: ModelSpec, profile: Profile, device: str, repeats: int = REPEATS
) -> dict[str, Any]:
    """The ``layer_overhead`` entry of a profile, measured with ``model``'s layers."""
    import torch

    from twin.costmodel import CostModel
    from twin.reference.executor import model_dtype
    from twin.reference.model import HybridLM
    from twin.reference.ops import synchronize

    # One layer of each kind at the model's widths is all that is timed.
    one = dataclasses.replace(
        model,
        n_attention_layers=min(model.n_attention_layers, 1),
        n_ssm_layers=min(model.n_ssm_layers, 1),
        n_mlp_layers=min(model.n_mlp_layers, 1),
    )
    lm = HybridLM(one, device, model_dtype(device), seed=0)
    cost = CostModel(one, dataclasses.replace(profile, layer_overhead=None))
    counts = {"attention": one.n_attention_layers, "ssm": one.n_ssm_layers, "mlp": one.n_mlp_layers}
    mode = "max" if device == "cuda" else "add"
    gen = torch.Generator().manual_seed(7)
    seconds: dict[str, float] = {}
    with torch.inference_mode():
        for kind in [k for k, n in counts.items() if n] + ["head"]:
            per_size = []
            for n in SIZES:
                ids = torch.randint(0, model.vocab_size, (n,), generator=gen).to(device)
                run = _layer_runner(lm, kind, ids)
                measured = _median_time(run, repeats, lambda: synchronize(device))
                kernels = cast(StepCost, cost.prefill(n, 0, breakdown=True)).by_kind.get(kind, 0.0)
                kernels /= counts.get(kind, 1)
                per_size.append(measured if mode == "max" else measured - kernels)
            seconds[kind] = max(statistics.median(per_size), 0.0)
    return {
        "mode": mode,
        "model": model.name,
        "seconds": seconds,
        "sizes": list(SIZES),
        "implementation": "twin.reference.model (eager PyTorch)",
    }


def _layer_runner(lm: Any, kind: str, ids: Any) -> Callable[[], Any]:
    """One layer of ``kind`` (or the head) over ``ids``' embeddings, as forward runs it."""
    import torch.nn.functional as F

    from twin.reference.model import EPS

    x = F.embedding(ids, lm.embed)[None]
    if kind == "head":
        return lambda: F.linear(
            F.rms_norm(F.embedding(ids, lm.embed)[None][:, -1], (x.shape[-1],), lm.final_norm, EPS),
            lm.lm_head,
        )
    w = lm.layers[lm.plan.index(kind)]

    def run() -> Any:
        h = F.rms_norm(x, (x.shape[-1],), w["norm"], EPS)
        if kind == "attention":
            out = lm._attention(h, w, None, lm._rope(0, ids.shape[0]))[0]
        elif kind == "ssm":
            out = lm._mamba(h, w, None, [])[0]
        else:
            out = lm._mlp(h, w)
        return x + out

    return run


def _median_time(run: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
