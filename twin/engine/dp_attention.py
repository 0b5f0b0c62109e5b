"""Attention data parallelism: a replica of ``tp`` GPUs serving ``D`` attention ranks.

``--dp-attention D`` (``EngineConfig.dp_attention``) runs a replica as the engines run
DeepSeek-style MoE models with attention data parallelism: SGLang's ``--dp D
--enable-dp-attention``, TensorRT-LLM's ``enable_attention_dp``, vLLM's
``--data-parallel-size D --enable-expert-parallel``. What the engines do, and what the
twin takes from it:

- **Each rank its own scheduler, batch and KV pool.** SGLang starts one ``Scheduler``
  per DP rank, each with its own request queue, radix cache and token pool
  (``python/sglang/srt/managers/data_parallel_controller.py``, release 0.5.4); vLLM one
  ``EngineCore`` per DP rank (``vllm/v1/engine/core.py`` ``DPEngineCoreProc``, 0.11.0).
  The twin builds ``D`` ordinary :class:`~twin.engine.replica.Replica` objects (each
  with the engine mode's scheduler, its cache and ``1 / D`` of the replica's memory
  budget: ``twin.engine.budget.memory_budget`` counts a token on its rank's ``tp / D``
  GPUs, ``twin.parallel.kv_bytes_per_token_per_gpu``), and each rank decides its own
  step by its mode's rules (a prefill batch, a mixed step or a decode step).
- **The ranks step in lockstep.** Every MoE/MLP layer gathers all ranks' tokens, so no
  rank's forward can end before the others': SGLang's ``prepare_mlp_sync_batch_raw``
  (``managers/scheduler.py``, 0.5.4) all-gathers each rank's token count before every
  forward and a rank with nothing to run makes an idle batch (``get_idle_batch``);
  vLLM's ``DPEngineCoreProc.run_busy_loop`` runs ``execute_dummy_batch`` on an idle
  engine while any engine has requests (``_has_global_unfinished_reqs``). The twin
  runs one step loop for the replica (:meth:`DPReplica.run`): each rank with work plans
  its step, the step takes the synchronised price of all of them
  (``twin.engine.dp_pricing.DPStepPricer``), and every rank applies its step's end at the
  same moment.
- **The price of a synchronised step** is :mod:`twin.engine.dp_pricing`'s; **requests are
  dealt to ranks** by :mod:`twin.engine.dp_dealing`; **TensorRT-LLM holds contexts back
  across ranks** by :mod:`twin.engine.adp_balance`.

Not modelled here: fast-forwarded decode runs (each synchronised step is priced on its own)
and host tiers (refused by ``EngineConfig``). A disaggregated pool's workers are built of
ranks here too (:func:`dp_replica`; ``--prefill-dp-attention/--decode-dp-attention``,
``twin.engine.disagg``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from twin.cache import HeldCache
from twin.engine.adp_balance import ADPBalance, adp_balance
from twin.engine.cluster import Cluster
from twin.engine.composite import PartsClock
from twin.engine.config import EngineConfig
from twin.engine.cost import Chunk, RankStep, StepPricer, WrappingPricer
from twin.engine.dp_dealing import RankLoad, dealer_for
from twin.engine.dp_pricing import IDLE, SyncPricer
from twin.engine.lpm import order_by_prefix
from twin.engine.modes_trtllm import (
    TRTLLM_BATCH_WAIT,
    TRTLLM_OVERLAP,
)
from twin.engine.replica import Replica
from twin.engine.seq import Seq
from twin.engine.sim import Event
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.workloads.reader import Request, Workload


class RankRecorder(WrappingPricer):
    """A rank's pricer: its scheduler plans a step and prices it here; the step is kept
    for the synchronised price (``last``) and costs 0 alone. The rest is the real
    pricer's (copies, host loads)."""

    def __init__(self, inner: StepPricer) -> None:
        super().__init__(inner)
        self.last: RankStep = IDLE

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        self.last = (list(prefills), decode_batch, decode_context)
        return 0.0


# ------------------------------------------------------------------ the replica
class _Summed:
    """A read-only attribute of :class:`_SummedCaches`: the ranks' caches' attribute of
    the same name, summed."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, caches: _SummedCaches, owner: type) -> int:
        return sum(getattr(p, self.name) for p in caches._parts)


class _SummedCaches:
    """The ranks' caches as one (``cache_stats``, the occupancy sampler, a router): bytes,
    counters and nodes summed (a peak is the sum of each rank's peak)."""

    def __init__(self, parts: Sequence[HeldCache]) -> None:
        self._parts = parts

    kv_bytes = _Summed()
    ssm_bytes = _Summed()
    num_nodes = _Summed()
    peak_bytes = _Summed()
    peak_kv_bytes = _Summed()
    peak_ssm_bytes = _Summed()
    evictions = _Summed()
    checkpoints_admitted = _Summed()
    checkpoints_hit = _Summed()

    def peek(self, prompt: np.ndarray) -> int:
        """The longest hit any rank's cache has (a cache-aware router's signal)."""
        return int(max(p.peek(prompt) for p in self._parts))


class _SummedMemory:
    """The ranks' memory as the summary's one ``pool`` section: numbers summed (a peak is
    the sum of each rank's peak, not a simultaneous one), the rest the first rank's."""

    def __init__(self, ranks: Sequence[Replica]) -> None:
        self._ranks = ranks

    def stats(self) -> dict[str, Any] | None:
        parts = [r.memory.stats() for r in self._ranks]
        first = parts[0]
        if first is None:
            return None
        out = dict(first)
        for k, v in first.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[k] = sum((p or {}).get(k, 0) for p in parts)
        return out


class _SummedPolicy:
    def __init__(self, ranks: Sequence[Replica]) -> None:
        self._ranks = ranks

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for rank in self._ranks:
            for k, v in rank.policy.stats().items():
                if isinstance(v, int | float) and not isinstance(v, bool) and k in out:
                    out[k] += v
                else:
                    out.setdefault(k, v)
        return out


class DPReplica(PartsClock):
    """One replica of ``D`` attention ranks stepping in lockstep (module docstring).

    It stands where the cluster keeps a :class:`~twin.engine.replica.Replica`: requests
    in (:meth:`submit`, dealt to a rank), the step loop (:meth:`run`), and the counters
    and caches the cluster reports (the ranks' summed)."""

    def __init__(
        self,
        ranks: list[Replica],
        recorders: list[RankRecorder],
        pricer: SyncPricer,
        engine: str,
        balance: ADPBalance | None = None,
        eager_s: float = 0.0,
    ) -> None:
        self.ranks, self.recorders, self.pricer = ranks, recorders, pricer
        self.balance = balance
        # The host time of a forward run without a CUDA graph (``eager_prefill_s``),
        # paid once by a synchronised step where any rank prefills: TensorRT-LLM replays a
        # graph under attention DP only when every rank's batch is generation-only and
        # the ranks' batch sizes are equal (``cuda_graph_runner.py`` ``maybe_get_cuda_graph``,
        # ``tp_allgather([can_run_cuda_graph, batch_size])``; the 1.1 and 1.2 lines and main
        # as stored), so one rank's context puts every rank's forward in eager mode; the
        # ranks issue their kernels at once, each from its own process.
        self.eager_s = float(eager_s)
        first = ranks[0]
        self.env, self.index = first.env, first.index
        self.dealer = dealer_for(engine)
        self.cache = _SummedCaches([r.cache for r in ranks])
        self.policy = _SummedPolicy(ranks)
        self.host = None
        self.memory = _SummedMemory(ranks)
        self.step_no = 0
        self.busy_s = 0.0
        self.busy_since: float | None = None
        self._wake: Event | None = None
        self._warmup_s = 0.0
        self._retry = False
        self.last_rank = 0  # the rank the last submission went to

    # The cluster sets ``replica.scheduler.warmup_s``: the replica is its own scheduler.
    @property
    def scheduler(self) -> DPReplica:
        return self

    def _part_schedulers(self) -> Sequence[Any]:
        return [rank.scheduler for rank in self.ranks]

    def __getattr__(self, name: str) -> Any:
        # Counters the reports read (submitted, rejected, preemptions, peaks): summed.
        if name.startswith("_") or name in ("ranks",):
            raise AttributeError(name)
        return sum(getattr(r, name) for r in self.ranks)

    def busy_until_now_s(self) -> float:
        since = self.busy_since
        return self.busy_s + (self.env.now - since if since is not None else 0.0)

    def submit(self, req: Request, arrival_s: float | None = None) -> Seq:
        """Deal ``req`` to a rank (:data:`DEALERS`) and queue it there; wake the loop."""
        self.last_rank = self.pick_rank()
        seq = self.ranks[self.last_rank].submit(req, arrival_s)
        self.wake()
        return seq

    def pick_rank(self) -> int:
        """The rank the engine's dealer gives the next request."""
        return self.dealer.pick([RankLoad(r) for r in self.ranks])

    def wake(self) -> None:
        """Work was queued at a rank: the loop, if idle, steps again."""
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def run(self) -> Generator[Event, Any, None]:
        """The synchronised step loop: every rank with work plans its step (its mode's
        rules), the step lasts :meth:`DPStepPricer.sync_time` of them all, then every
        rank applies its end (tokens, completions, cache inserts) at the same time."""
        env = self.env
        scheds: list[Any] = [r.scheduler for r in self.ranks]
        while True:
            if not any(s.waiting or s.prefilling or s.decoding for s in scheds):
                self._wake = env.event()
                yield self._wake
                continue
            self._retry = False
            contexts = self._contexts_run(scheds)
            plans = [
                self._plan(s, rec, contexts) for s, rec in zip(scheds, self.recorders, strict=True)
            ]
            if all(p is None for p in plans):
                if self._retry:  # a rank preempted to make room: this iteration, again
                    if self.balance is not None:
                        self.balance.take_back()  # one tick an iteration (ADPBalance)
                    continue
                self._wake = env.event()  # every queue's head waits for memory: a submission
                yield self._wake
                continue
            steps = [
                rec.last if p is not None else IDLE
                for p, rec in zip(plans, self.recorders, strict=True)
            ]
            seconds = self.pricer.sync_time(steps)
            if self.eager_s and any(prefills for prefills, _, _ in steps):
                seconds += self.eager_s
            seconds += max((p[1] for p in plans if p is not None), default=0.0)
            self.busy_since = t0 = env.now
            yield env.timeout(seconds)
            ends = [
                self._apply(s, p) if p is not None else None
                for s, p in zip(scheds, plans, strict=True)
            ]
            extra = max((e[2] for e in ends if e is not None), default=0.0)
            if extra:
                yield env.timeout(extra)
            self.busy_s += env.now - t0
            self.step_no += 1
            self.busy_since = None
            now = env.now
            for s, p, e in zip(scheds, plans, ends, strict=True):
                if p is None or e is None:
                    continue
                s.busy_s += now - t0
                batch = p[2]
                if batch and t0 >= s.warmup_s:
                    s.gaps.step(now - t0, batch)
                prefilled, completed, _ = e
                for seq in prefilled:
                    if not seq.generated:
                        seq.first_token_s = now
                for seq in completed:
                    seq.done_s = now
                    seq.done.succeed()

    def _contexts_run(self, scheds: Sequence[Any]) -> bool:
        """Whether the ranks may run context work this iteration (:class:`ADPBalance`;
        always without one)."""
        if self.balance is None:
            return True
        contexts = [bool(s.prefilling) or bool(s.waiting and s._can_admit()) for s in scheds]
        # A rank with no request runs the executor's dummy generation request.
        generating = [len(s.decoding) or (0 if s.waiting or s.prefilling else 1) for s in scheds]
        return self.balance.contexts_run(contexts, generating)

    def _plan(
        self, s: Any, rec: RankRecorder, contexts: bool = True
    ) -> tuple[list[tuple[Seq, int]], float, int] | None:
        """Rank ``s``'s step: its mode's step (``_plan_step``: prefill chunks, admissions,
        decodes as the mode mixes them), or one decode step (always where ``contexts`` is
        false: the balance holds them); ``None``: idle."""
        rec.last = IDLE
        if not (s.waiting or s.prefilling or s.decoding):
            return None
        if s.lpm and len(s.waiting) > 1:
            order_by_prefix(s.waiting, s.replica.cached_prefix)
        if contexts and (s.prefilling or s._can_admit()):
            return s._plan_step()  # type: ignore[no-any-return]
        if not s.decoding:
            return None  # the head waits for memory nothing running will free
        # One decode step (the mode's decode-run rules, one step at a time).
        while s.decoding and not s.memory.grow(len(s.decoding)):  # dedicated: always grows
            s._make_room()
        batch = len(s.decoding)
        if not batch:
            self._retry = True  # it preempted all it ran: it plans again next step
            return None
        if s.ratio is not None:
            s.ratio.decayed(1)
        rec.last = ((), batch, s.ctx_base + batch * (s.step_no + 1))
        return [], 0.0, batch

    def _apply(
        self, s: Any, plan: tuple[list[tuple[Seq, int]], float, int]
    ) -> tuple[list[Seq], list[Seq], float]:
        """The end of rank ``s``'s step: tokens, completions, cache inserts; the seconds
        its checkpoint copies and write-backs add."""
        chunked, _, _ = plan
        s.step_no += 1
        prefilled = s._apply_chunks(chunked) if chunked else []
        completed = s._complete_due()
        if prefilled:
            completed.extend(seq for seq in prefilled if seq.out_len - seq.generated == 1)
        replica = s.replica
        copies = replica.step_end(prefilled, completed) if prefilled or completed else 0
        return prefilled, completed, copies * replica.copy_s + replica.write_back_time()


class DPCluster(Cluster):
    """A cluster whose replicas run ``dp_attention`` attention ranks each
    (:class:`DPReplica`); everything else is the cluster's."""

    def __init__(
        self,
        model: ModelSpec,
        pricer: StepPricer,
        config: EngineConfig,
        workload: Workload,
        on_record: Callable[[Any], None] = lambda rec: None,
    ) -> None:
        if not isinstance(pricer, SyncPricer):
            raise TwinError("--dp-attention needs the attention-DP step pricer")
        self._dp_pricer = pricer
        self._recorder: RankRecorder | None = None
        super().__init__(model, pricer, config, workload, on_record)

    def _replica_setup(self, i: int) -> tuple[EngineConfig, StepPricer, float]:
        assert self._recorder is not None
        config = rank_config(self.config)
        return config, self._recorder, self.budget / self.config.cluster.dp_attention

    def _new_replica(self, i: int) -> Any:
        def rank(recorder: RankRecorder) -> Replica:
            self._recorder = recorder
            return super(DPCluster, self)._new_replica(i)

        replica = dp_replica(
            self._dp_pricer,
            self.config.cluster.dp_attention,
            self.config.mode.engine,
            rank,
            adp_balance(self.config, self._dp_pricer),
            self.config.host_time.eager_prefill_s,
        )
        self._recorder = None
        return replica


# Scheduler options an attention-DP rank does not follow: TensorRT-LLM skips its batch
# waiting under attention DP (``PyExecutor._schedule``, ``should_check_waiting = not
# cfg.enable_attention_dp and ...``; read in NVIDIA/TensorRT-LLM's stored tree, as
# ``twin.engine.trtllm_batching`` says).
# The overlap scheduler's admission lag (``twin.engine.trtllm_batching``) is dropped too,
# and so is vLLM's asynchronous scheduling's (``twin.engine.vllm_batching``): the ranks'
# common step loop does not keep the state it reads (not modelled there). The step
# pricer, built from the replica's own configuration, keeps the host-time overlap.
RANK_DROPPED_OPTIONS = (*TRTLLM_BATCH_WAIT, *TRTLLM_OVERLAP, "async_scheduling")


def rank_config(config: EngineConfig) -> EngineConfig:
    """``config`` as one attention-DP rank runs it: without :data:`RANK_DROPPED_OPTIONS`."""
    options = config.scheduling.scheduler_options
    if not any(name in options for name in RANK_DROPPED_OPTIONS):
        return config
    kept = {k: v for k, v in options.items() if k not in RANK_DROPPED_OPTIONS}
    scheduling = dataclasses.replace(config.scheduling, scheduler_options=kept)
    return dataclasses.replace(config, scheduling=scheduling)


def dp_replica(
    pricer: SyncPricer,
    dp: int,
    engine: str,
    rank: Callable[[RankRecorder], Replica],
    balance: ADPBalance | None = None,
    eager_s: float = 0.0,
) -> DPReplica:
    """A replica of ``dp`` ranks, each built by ``rank`` around its own recorder of
    ``pricer`` (a cluster's replica of its kind, with its cache and memory), holding
    contexts back by ``balance`` if given; a step where a rank prefills pays ``eager_s``
    (``DPReplica.eager_s``)."""
    recorders = [RankRecorder(pricer) for _ in range(dp)]
    ranks = [rank(rec) for rec in recorders]
    return DPReplica(ranks, recorders, pricer, engine, balance, eager_s)


__all__ = [
    "RANK_DROPPED_OPTIONS",
    "DPCluster",
    "DPReplica",
    "RankRecorder",
    "dp_replica",
    "rank_config",
]
