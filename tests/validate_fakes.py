"""A fake ``twin validate`` executor: no torch, the twin's own cache and cost model.

It serves the requests on the same cache and prices them with the twin's own
cost model (an exact single-server FCFS model written independently of the
engine), so every validation error against the twin is ~0 and the hits match.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from twin.costmodel.profile_store import load_profile
from twin.engine.cost import make_pricer
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.workloads.reader import Workload


@dataclass(frozen=True)
class FakeConfig:
    """``twin.reference.executor.ExecutorConfig``'s fields."""

    device: str = "cpu"
    policy: str = "marconi"
    policy_options: dict[str, Any] = field(default_factory=dict)
    cache_bytes: int = 0
    seed: int = 0
    repeats: int = 3
    warmup: int = 2


@dataclass(frozen=True)
class FakeMeasured:
    row: int
    session_id: int
    turn: int
    arrival_s: float
    start_s: float
    input_tokens: int
    hit_tokens: int
    service_s: float


def fake_reference(workload: Workload, model: Any, config: FakeConfig, progress=None):
    """One FCFS prefill server on the policy's cache, priced by the twin's CPU cost model.

    The cache is driven in the engine's order; the price is the prefill of the
    uncached tokens (at least the last one) plus the checkpoint copies, whose
    completion-time share delays the next request.
    """
    pricer = make_pricer(model, load_profile("cpu"), 1)
    copy_s = pricer.checkpoint_copy_time()
    policy = get_policy(config.policy, **config.policy_options)
    cache = make_cache(policy, model, config.cache_bytes)
    requests = cache.request_cache()
    records, free_at = [], 0.0
    for i, req in enumerate(workload.requests()):
        n = len(req.prompt)
        adm = requests.admit(req.prompt, req.full)
        hit = adm.hit
        new = max(1, n - hit.length)
        service = pricer.step_time([(new, n - new)], 0, 0)
        copies = requests.insert_at_prefill_end(adm)
        if req.output_len == 1:
            copies += requests.insert_at_completion(adm)
        service += copies * copy_s
        start = max(req.arrival_s, free_at)
        free_at = start + service
        if req.output_len > 1:
            free_at += requests.insert_at_completion(adm) * copy_s
        requests.release(adm)
        records.append(
            FakeMeasured(
                req.row, req.session_id, req.turn, req.arrival_s, start, n, hit.length, service
            )
        )
        if progress is not None:
            progress((i + 1) / workload.num_rows)
    hits = sum(r.hit_tokens for r in records)
    return SimpleNamespace(
        records=records,
        device_name="fake CPU",
        dtype="float32",
        implementations={"ssm_scan": "fake"},
        wall_s=0.1,
        token_hit_rate=hits / sum(r.input_tokens for r in records),
        request_hit_rate=sum(r.hit_tokens > 0 for r in records) / len(records),
    )
