"""Prompt Cache's TTFT measurements in the twin: the one place they are computed.

``twin reproduce prompt-cache`` (:mod:`reports.reproduce.prompt_cache`) and
``benchmarks/bench_prompt_cache.py`` both call :func:`speedups` on ``doc-qa``
workloads made by :func:`recipe`.

The paper (Gim et al., "Prompt Cache: Modular Attention Reuse for Low-Latency
Inference", MLSys 2024, arXiv 2311.04934) serves Llama-2-7B with LongBench
document prompts: sec. 5.2 reports TTFT 5-10x lower with the modules in GPU
memory and 1.5-3x lower from host (CPU) memory; sec. 5.4 shows the advantage
growing with the prompt length. The twin: one ``doc-qa`` document of the given
length per request and a short question, sessions far apart so nothing queues,
simulated by the engine (``twin simulate``, the same builder) under ``vanilla``
(everything computed) and ``prompt-cache`` with GPU and host storage. The
speedup is the mean TTFT of the requests whose module was cached, vanilla over
prompt-cache, on the same rows.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np

from twin.metrics import RequestRecord
from twin.reports.reproduce.base import Recipe
from twin.summary import RunSummary

PAPER_GPU = (5.0, 10.0)  # sec. 5.2: TTFT speedup, modules in GPU memory
PAPER_HOST = (1.5, 3.0)  # sec. 5.2: modules in host (CPU) memory
TRANSFORMER = "llama-7b-transformer"  # Llama-2-7B's shape
HYBRID = "marconi-hybrid-7b"
GPU = "a100-80gb"  # an A100-class GPU, as the paper's
SESSIONS = 48
RATE = 0.001  # sessions/s: ~1000 s apart, far longer than any request, so nothing queues
CACHE_GB = 40.0  # holds every module of these workloads: no eviction
STORAGES = ("gpu", "host")


def recipe(
    name: str, doc_tokens: int, docs: tuple[int, int] = (1, 1), sessions: int = SESSIONS
) -> Recipe:
    """A ``doc-qa`` workload of 8 documents of ``doc_tokens`` +-10% tokens, ``docs`` per request."""
    lo, hi = int(doc_tokens * 0.9), int(doc_tokens * 1.1)
    knobs = (
        ("n_documents", 8),
        ("doc_min_tokens", lo),
        ("doc_max_tokens", hi),
        ("docs_min", docs[0]),
        ("docs_max", docs[1]),
    )
    return Recipe(name, "doc-qa", sessions, RATE, seed=1, knobs=knobs)


def _options(policy: str, storage: str) -> dict[str, str]:
    return {"storage": storage} if policy == "prompt-cache" else {}


def simulate_command(path: str, model: str, gpu: str, policy: str, storage: str = "gpu") -> str:
    """The ``twin simulate`` command of one run of :func:`ttft_by_row`."""
    args = ["twin", "simulate", path, "-m", model, "--gpu", gpu, "--cache-gb", f"{CACHE_GB:g}"]
    args += ["-p", policy]
    for k, v in _options(policy, storage).items():
        args += ["--policy-option", f"{k}={v}"]
    out = f"sim-{Path(path).stem}-{model}-{policy}"  # one folder per point
    out += f"-{storage}" if policy == "prompt-cache" else ""
    return shlex.join([*args, "--out", out])


def ttft_by_row(
    path: str, model: str, gpu: str, policy: str, storage: str = "gpu"
) -> tuple[dict[int, tuple[float, int]], RunSummary]:
    """Per workload row (TTFT seconds, hit tokens) under ``policy``, and the run's summary."""
    from twin.engine import build_run

    run = build_run(
        path,
        model=model,
        gpu=gpu,
        cache_gb=CACHE_GB,
        policy=policy,
        policy_options=_options(policy, storage),
    )
    records: list[RequestRecord] = []
    summary = run.simulate(None, on_record=records.append)
    return {r.row: (r.ttft_s, r.hit_tokens) for r in records}, summary


def speedups(path: str, model: str = TRANSFORMER, gpu: str = GPU) -> dict[str, Any]:
    """Per storage: warm requests, mean TTFTs (vanilla, prompt-cache), speedup, FLOPs kept."""
    base, _ = ttft_by_row(path, model, gpu, "vanilla")
    out: dict[str, Any] = {}
    for storage in STORAGES:
        cached, summary = ttft_by_row(path, model, gpu, "prompt-cache", storage)
        warm = [row for row, (_, hit) in cached.items() if hit > 0]
        t_base = float(np.mean([base[r][0] for r in warm])) if warm else float("nan")
        t_pc = float(np.mean([cached[r][0] for r in warm])) if warm else float("nan")
        out[storage] = {
            "warm_requests": len(warm),
            "ttft_vanilla_s": t_base,
            "ttft_prompt_cache_s": t_pc,
            "speedup": t_base / t_pc if warm else None,
            "saving_kept": summary.flops.saving_kept,
        }
    return out


def commands(path: str, model: str = TRANSFORMER, gpu: str = GPU) -> list[str]:
    """The ``twin simulate`` commands behind one :func:`speedups` (vanilla, then each storage)."""
    return [simulate_command(path, model, gpu, "vanilla")] + [
        simulate_command(path, model, gpu, "prompt-cache", s) for s in STORAGES
    ]
