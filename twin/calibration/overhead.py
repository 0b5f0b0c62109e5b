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
from twin.layer_pattern import layer_parts
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
    one = one_of_each(model)
    lm = HybridLM(one, device, model_dtype(device), seed=0)
    cost = CostModel(one, dataclasses.replace(profile, layer_overhead=None))
    counts = {
        "attention": one.n_attention_layers,
        "ssm": one.n_ssm_layers,
        "mlp": one.n_mlp_layers,
        "moe": one.n_moe_layers,
    }
    mode = "max" if device == "cuda" else "add"
    gen = torch.Generator().manual_seed(7)
    seconds: dict[str, float] = {}
    with torch.inference_mode():
        for kind in [k for k, n in counts.items() if n] + ["head"]:
            per_size = []
            for n in SIZES:
                ids = torch.randint(0, model.vocab_size, (n,), generator=gen).to(device)
                run, label = _layer_runner(lm, kind, ids)
                measured = _median_time(run, repeats, lambda: synchronize(device))
                kernels = cast(StepCost, cost.prefill(n, 0, breakdown=True)).by_kind.get(label, 0.0)
                kernels /= _layers_labelled(one, label)
                per_size.append(measured if mode == "max" else measured - kernels)
            seconds[kind] = max(statistics.median(per_size), 0.0)
    return {
        "mode": mode,
        "model": model.name,
        "seconds": seconds,
        "sizes": list(SIZES),
        "implementation": "twin.reference.model (eager PyTorch)",
    }


def one_of_each(model: ModelSpec) -> ModelSpec:
    """``model`` cut to one layer of each kind: the first pattern layer bringing a new mixer
    or FFN kind, or (a counts-based spec) at most one layer of each count."""
    if model.layers is None:
        return dataclasses.replace(
            model,
            n_attention_layers=min(model.n_attention_layers, 1),
            n_ssm_layers=min(model.n_ssm_layers, 1),
            n_mlp_layers=min(model.n_mlp_layers, 1),
            n_moe_layers=min(model.n_moe_layers, 1),
        )
    seen: set[str] = set()
    tokens = []
    for token in model.layers:
        mixers, ffn = layer_parts(token)
        kinds = {*mixers, ffn} - {"none"}
        if kinds - seen:
            tokens.append(token)
            seen |= kinds
    return dataclasses.replace(  # counts 0: derived from the new pattern
        model,
        layers=tuple(tokens),
        n_attention_layers=0,
        n_ssm_layers=0,
        n_mlp_layers=0,
        n_moe_layers=0,
    )


# The breakdown label (``StepCost.by_kind``) of each plan kind of the reference model.
_LABEL = {"attention": "attention", "swa": "swa", "ssm": "ssm", "mamba1": "mamba1", "gdn": "gdn"}
_PLAN_MIXER = {"ssm": "mamba2"}  # the plan's name of Mamba2 -> the mixer kind


def _layers_labelled(one: ModelSpec, label: str) -> int:
    """Layers of ``one`` whose kernels the breakdown files under ``label``."""
    ffn = {"mlp": one.n_mlp_layers, "moe": one.n_moe_layers, "head": 1}
    n = ffn[label] if label in ffn else one.mixer_counts.get(_PLAN_MIXER.get(label, label), 0)
    return max(n, 1)


def _layer_runner(lm: Any, kind: str, ids: Any) -> tuple[Callable[[], Any], str]:
    """One layer of ``kind`` (``attention`` and ``ssm``: the first layer of any attention
    or recurrent kind; or the head) over ``ids``' embeddings, as forward runs it; and the
    breakdown label of the layer timed."""
    import torch.nn.functional as F

    from twin.reference.model import EPS, FFN_PLAN, KV_PLAN

    x = F.embedding(ids, lm.embed)[None]
    if kind == "head":
        return lambda: F.linear(
            F.rms_norm(F.embedding(ids, lm.embed)[None][:, -1], (x.shape[-1],), lm.final_norm, EPS),
            lm.lm_head,
        ), "head"

    def family(part: str) -> str:  # the overhead kind a plan kind's layer counts as
        return "attention" if part in KV_PLAN else part if part in FFN_PLAN else "ssm"

    i, part = next(
        (i, part)
        for i, plan in enumerate(lm.plan)
        for part in plan.split("+")
        if family(part) == kind
    )
    w = lm.layers[i]
    wp = w if "+" not in lm.plan[i] else w[part]

    def run() -> Any:
        h = F.rms_norm(x, (x.shape[-1],), w["norm"], EPS)
        if part in KV_PLAN:
            window = lm.spec.sliding_window if part == "swa" else None
            out = lm._attention(h, wp, None, lm._rope(0, ids.shape[0]), window)[0]
        elif kind == "ssm":
            out = lm.recurrent(part)(h, wp, None, [])[0]
        else:
            out = lm.ffn(kind, h, wp)
        return x + out

    return run, _LABEL.get(part, part)


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
