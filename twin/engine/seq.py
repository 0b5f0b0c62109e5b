"""One request on a replica: its progress and timestamps (the engine's per-request entity)."""

from __future__ import annotations

from twin.cache import Admission
from twin.engine.sim import Environment
from twin.workloads.reader import Request

NAN = float("nan")


class Seq:
    """One request on a replica: its progress and timestamps (compact: slots, no dicts)."""

    __slots__ = (
        "admitted_s",
        "alloc",
        "arrival_s",
        "cached",
        "ckpts",
        "ctx",
        "done",
        "done_s",
        "finish_step",
        "first_token_s",
        "footprint",
        "generated",
        "hit",
        "hit_recompute",
        "hit_work_s",
        "order",
        "out_len",
        "preemptions",
        "prefill_left",
        "prompt_len",
        "recomputed",
        "rejected",
        "replica",
        "req",
        "start_step",
    )

    def __init__(
        self, req: Request, replica: int, arrival_s: float, footprint: int, env: Environment
    ) -> None:
        self.req = req
        self.replica = replica
        self.arrival_s = arrival_s
        self.prompt_len = len(req.prompt)
        # Decode length in token steps: its output, or with speculative decoding and its own
        # acceptance (the workload's spec_acceptance) its scaled count
        # (twin.engine.speculative.Speculation.decode_scale); the record keeps its tokens.
        n_out = len(req.output)
        scale = req.decode_scale
        self.out_len = n_out if scale == 1.0 else 1 + round((n_out - 1) * scale)
        self.footprint = footprint
        # The one event its request waits for: admission and the first token are
        # timestamps the scheduler writes (a wait on each would only cost events).
        self.done = env.event()
        self.admitted_s = self.first_token_s = self.done_s = NAN
        self.rejected = False
        self.hit = self.ckpts = self.order = self.start_step = self.finish_step = 0
        self.hit_recompute = 0  # hit tokens the recurrent layers still compute
        self.hit_work_s = 0.0  # what its hit adds to its first step: non-prefix work, host loads
        self.prefill_left = self.ctx = 0
        # Shared KV pool only: bytes it owns now (not counting decode growth, which the
        # scheduler adds as steps pass), output tokens out before its last preemption.
        self.alloc = self.generated = self.preemptions = self.recomputed = 0
        self.cached: Admission | None = None  # its hold on the cache, from admission to the end
