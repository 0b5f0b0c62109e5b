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
  budget: ``twin.engine.cluster.memory_budget`` counts a token on its rank's ``tp / D``
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
  (:class:`DPStepPricer`), and every rank applies its step's end at the same moment.
- **The price of a synchronised step** (:meth:`DPStepPricer.sync_time`): the slowest
  rank's attention side (everything but the FFN/MoE layers, priced by the cost model
  at the attention TP ``tp / D`` on that rank's own chunks and decodes), plus the FFN
  and MoE layers priced once on all ranks' tokens together at ``tp`` (and ``ep``),
  their own all-reduce replaced by the gather/scatter SGLang runs
  (``layers/dp_attention.py`` and ``layers/communicator.py``, 0.5.4): with a prefill
  in any rank the tokens are summed (``DpPaddingMode.SUM_LEN``: an all-reduce of the
  summed tokens gathers them, the MLP's all-reduce and ``dp_scatter`` return them),
  else the mode with less traffic, padding every rank to the longest
  (``MAX_LEN``, when ``2 x sum > D x max``: an all-gather and a reduce-scatter of
  ``D x max`` rows, the bytes of one all-reduce of them). Each all-reduce is the
  profile's fitted all-reduce at ``tp`` GPUs, else the ring on its link
  (``CostModel.allreduce_time``). vLLM's default ``VLLM_ALL2ALL_BACKEND``,
  ``allgather_reducescatter`` (``vllm/envs.py``, 0.11.0), moves the same bytes.
  The host time per step (the mode's ``step_host_s`` and ``seq_host_s``) is the
  busiest rank's: the ranks' schedulers run side by side.
- **Requests are dealt to ranks** by the engine's rule (:data:`DEALERS`): SGLang's DP
  controller round-robin (``load_balance_method`` default ``round_robin``,
  ``server_args.py`` 0.5.4); vLLM's ``DPLBAsyncMPClient.get_core_engine_for_request``
  (``vllm/v1/engine/core_client.py``, 0.11.0): the lowest ``4 x waiting + running``,
  scanning from rank 0 (vLLM reads the counts from the coordinator's 100 ms stats; the
  twin reads them now); TensorRT-LLM's ``balance_requests_across_ranks``
  (``tensorrt_llm/_torch/pyexecutor/request_utils.py``, main as indexed in 2026): among
  the ranks below the expected active count, the fewest active tokens.
- **TensorRT-LLM holds contexts back across ranks** where ``attention_dp_config``
  says ``enable_balance`` (:class:`ADPBalance`, options ``attention_dp_balance``,
  ``attention_dp_timeout_iters``, ``attention_dp_batching_wait_iters`` of the
  ``trtllm`` mode): an iteration runs its ranks' context requests only when every
  rank has one and room for it, or when the hold has lasted ``timeout_iters``
  iterations, or some rank has no generation request.

With DeepEP (SGLang's ``--moe-a2a-backend deepep``, vLLM's ``--all2all-backend
deepep_high_throughput`` / ``deepep_low_latency``: ``EngineConfig.moe_a2a``) the MoE layers
exchange tokens by DeepEP's dispatch and combine instead, priced from the profile's
all-to-all fits on the busiest rank's tokens (``twin.costmodel.a2a.A2APrice``); the dense
layers keep the gather/scatter. TensorRT-LLM runs an all-gather and a reduce-scatter of all
ranks' tokens in the MoE layers and no exchange in the dense ones
(``KernelLayout.moe_gather_scatter``, ``twin.costmodel.gather_scatter``). Not modelled:
DeepEP across nodes (the fits are one node's), MoE load imbalance between ranks,
TensorRT-LLM's ``attention_dp_enable_balance`` delays without the option, overlap of
communication with compute, fast-forwarded decode runs (each synchronised step is priced on
its own) and host tiers (refused by ``EngineConfig``). With speculative decoding every
forward of an iteration (the verification, each draft pass) is a synchronised step of its
own (``twin.engine.speculative.SpeculativePricer.sync_time``), the draft priced by this
module's pricer too. A disaggregated pool's workers are built of ranks here too
(:func:`dp_replica`; ``--prefill-dp-attention/--decode-dp-attention``,
``twin.engine.disagg``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from twin.cache import HeldCache
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.engine.cluster import Cluster
from twin.engine.composite import PartsClock
from twin.engine.config import EngineConfig
from twin.engine.cost import Chunk, PricerBase, RankStep, StepPricer, WrappingPricer, affine_fit
from twin.engine.lpm import order_by_prefix
from twin.engine.modes_trtllm import (
    ADP_BATCHING_WAIT_ITERS,
    ADP_TIMEOUT_ITERS,
    TRTLLM_ADP_BALANCE,
    TRTLLM_BATCH_WAIT,
    TRTLLM_OVERLAP,
)
from twin.engine.replica import Replica
from twin.engine.seq import Seq
from twin.engine.sim import Event
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.workloads.reader import Request, Workload

IDLE: RankStep = ((), 0, 0)


@runtime_checkable
class SyncPricer(StepPricer, Protocol):
    """What prices a replica's synchronised steps: :class:`DPStepPricer`, or speculative
    decoding's iterations over it (``twin.engine.speculative.SpeculativePricer``)."""

    def sync_time(self, steps: Sequence[RankStep]) -> float: ...


# Breakdown kinds of the layers that run on all ranks' tokens (the rest is the attention side).
FFN_KINDS = ("mlp", "moe")


class DPStepPricer(PricerBase):
    """Prices a synchronised step of ``dp`` attention ranks (module docstring).

    ``attention`` is the cost model at the attention TP (``tp / dp`` GPUs), ``ffn`` at
    the replica's ``tp`` and ``ep``; both are ``twin.costmodel.CostModel`` (or anything
    with ``step_spread_cost`` and ``allreduce_time``). As a plain :class:`StepPricer` it
    prices one rank's step alone (the others idle).
    """

    def __init__(
        self,
        attention: Any,
        ffn: Any,
        dp: int,
        ffn_layers: int,
        step_host_s: float = 0.0,
        seq_host_s: float = 0.0,
        a2a: Any = None,
        moe_layers: int = 0,
        gather_scatter: Any = None,
        dense_on_rank: bool = False,
    ) -> None:
        self.attention, self.ffn, self.dp = attention, ffn, dp
        self.ffn_layers = ffn_layers
        # The dense MLP layers and the shared experts on each rank's own tokens at the
        # attention TP (``KernelLayout.dense_ffn_on_rank``): in :meth:`attention_time`,
        # out of :meth:`ffn_time`, and the dense layers exchange nothing (comm_time).
        self.dense_on_rank = dense_on_rank
        self.shared_layers = moe_layers if dense_on_rank else 0
        # The layer kinds whose FFN runs on every rank's tokens together.
        self._exchanged_kinds: tuple[str, ...] = ("moe",) if dense_on_rank else FFN_KINDS
        dense_layers = ffn_layers - moe_layers
        # DeepEP's dispatch + combine of the MoE layers (``twin.costmodel.a2a.A2APrice``),
        # in place of their gather/scatter; None: every FFN layer gathers (comm_time).
        self.a2a, self.moe_layers = a2a, moe_layers if a2a is not None else 0
        # Else the engine's all-gather + reduce-scatter of the MoE layers, the dense layers
        # on their own ranks (``twin.costmodel.gather_scatter.GatherScatterPrice``).
        self.gather_scatter = gather_scatter if a2a is None else None
        self.gathering_layers = moe_layers if self.gather_scatter is not None else 0
        # The layers SGLang's gather/scatter exchanges: the rest (comm_time).
        self.gathered_layers = ffn_layers - self.moe_layers - (dense_layers if dense_on_rank else 0)
        self.step_host_s, self.seq_host_s = step_host_s, seq_host_s
        self._ffn_cache: dict[int, float] = {}
        self._attn_ffn_cache: dict[int, float] = {}
        self._affine: dict[int, tuple[float, float] | None] = {}

    @property
    def provenance(self) -> str:
        base = str(getattr(self.ffn, "provenance", ""))
        return f"{base}; {self.a2a.provenance}" if self.moe_layers else base

    def attention_time(self, step: RankStep) -> float:
        """Seconds of a rank's attention side: its step at the attention TP but the FFN
        and MoE layers (which depend on the token count alone). A pure-decode step is
        ``a + b x context`` per batch size where the cost model's price is affine in the
        context (``twin.engine.cost.affine_fit``, as the plain pricer's decode runs)."""
        prefills, batch, context = step
        tokens = sum(c for c, _ in prefills) + batch
        if not tokens:
            return 0.0
        spread = self.attention.step_spread
        if prefills:
            total = float(spread(prefills, batch, context))
        else:
            if batch not in self._affine:
                self._affine[batch] = affine_fit(lambda x: float(spread((), batch, x)), batch)
            fit = self._affine[batch]
            total = float(spread((), batch, context)) if fit is None else fit[0] + fit[1] * context
        return total - self._attention_ffn(tokens)

    def _attention_ffn(self, tokens: int) -> float:
        """The share of a step of ``tokens`` tokens at the attention TP that the ranks
        run together (subtracted from its price: :meth:`attention_time`): the FFN and MoE
        layers, less those a rank runs on its own tokens (``dense_on_rank``)."""
        got = self._attn_ffn_cache.get(tokens)
        if got is None:
            cost = self.attention.step_spread_cost((), tokens, 0)
            got = float(
                sum(sum(cost.items.get(kind, {}).values()) for kind in self._exchanged_kinds)
            )
            if self.shared_layers:
                got -= self.shared_layers * self.attention.shared_expert_s(tokens)
            self._attn_ffn_cache[tokens] = got
        return got

    def ffn_time(self, tokens: int) -> float:
        """Seconds of the FFN and MoE layers on ``tokens`` tokens at ``tp`` (and ``ep``),
        without their all-reduce (the gather/scatter replaces it: :meth:`comm_time`)."""
        got = self._ffn_cache.get(tokens)
        if got is None:
            cost = self.ffn.step_spread_cost((), tokens, 0)  # the FFN sees rows only
            got = sum(
                s
                for kind in self._exchanged_kinds
                for kernel, s in cost.items.get(kind, {}).items()
                if kernel != "allreduce"
            )
            if self.shared_layers:  # on the ranks' own tokens: attention_time's
                got -= self.shared_layers * self.ffn.shared_expert_s(tokens)
            self._ffn_cache[tokens] = got
        return got

    def comm_time(self, tokens: Sequence[int], extend: bool) -> float:
        """Seconds of the gather/scatter of every FFN layer for ranks with these token
        counts (SGLang's ``DpPaddingMode``, module docstring), or of the MoE layers'
        all-gather + reduce-scatter where the engine runs those (``gather_scatter``)."""
        total, most = sum(tokens), max(tokens)
        if not total:
            return 0.0
        if self.gather_scatter is not None:  # the MoE layers' only: dense layers stay put
            return float(self.gathering_layers * self.gather_scatter.seconds(total))
        ar = self.ffn.allreduce_time
        if not extend and 2 * total > most * self.dp:  # MAX_LEN
            per_layer = ar(most * self.dp)
        else:  # SUM_LEN: gather by all-reduce, then the layer's own all-reduce
            per_layer = 2 * ar(total)
        gathered = self.gathered_layers
        if not self.moe_layers:
            return float(gathered * per_layer)
        # DeepEP: every rank sends its own tokens; the layer waits for the busiest rank.
        return float(gathered * per_layer + self.moe_layers * self.a2a.seconds(most, extend))

    def sync_time(self, steps: Sequence[RankStep], extend: bool | None = None) -> float:
        """Seconds of one synchronised step whose ranks run ``steps`` (idle ranks:
        :data:`IDLE`): the slowest attention side + the FFN on the sum + the
        gather/scatter + the busiest rank's host time. ``extend``: whether the ranks
        exchange tokens as an extend batch (:meth:`comm_time`); None: where any rank
        runs chunks (speculative decoding's verifications are chunks of a decode batch:
        ``twin.engine.speculative.SpeculativePricer``)."""
        tokens = [sum(c for c, _ in p) + b for p, b, _ in steps]
        total = sum(tokens)
        if not total:
            return 0.0
        seqs = max(len(p) + b for p, b, _ in steps)
        if extend is None:
            extend = any(p for p, _, _ in steps)
        return (
            max(self.attention_time(s) for s in steps)
            + self.ffn_time(total)
            + self.comm_time(tokens, extend)
            + self.step_host_s
            + self.seq_host_s * seqs
        )

    # ------------------------------------------------ StepPricer: one rank alone
    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        step: RankStep = (prefills, decode_batch, decode_context)
        return self.sync_time([step] + [IDLE] * (self.dp - 1))

    def checkpoint_copy_time(self) -> float:
        # A rank's recurrent-state checkpoint copy on its attention-TP GPUs, as the plain
        # pricer prices it (``CostModelPricer``: ``CostModel.checkpoint_copy_s(1)``).
        return float(self.attention.checkpoint_copy_s(1))


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


# ------------------------------------------------------------------ dealing requests
class RankLoad:
    """What a dealer sees of a rank: requests waiting, running, and outstanding tokens."""

    __slots__ = ("running", "tokens", "waiting")

    def __init__(self, rank: Replica) -> None:
        s: Any = rank.scheduler
        self.waiting = len(s.waiting)
        self.running = len(s.prefilling) + len(s.decoding)
        self.tokens = rank.outstanding_tokens


class Dealer:
    """Which rank a new request goes to (one per engine's rule, :data:`DEALERS`)."""

    name: ClassVar[str] = ""

    def pick(self, loads: Sequence[RankLoad]) -> int:
        raise NotImplementedError


class RoundRobin(Dealer):
    """SGLang's ``DataParallelController.round_robin_scheduler`` (0.5.4): in turn."""

    name = "round-robin"

    def __init__(self) -> None:
        self.next = 0

    def pick(self, loads: Sequence[RankLoad]) -> int:
        i = self.next
        self.next = (i + 1) % len(loads)
        return i


class VLLMLeastLoaded(Dealer):
    """vLLM's ``DPLBAsyncMPClient.get_core_engine_for_request`` (0.11.0): the lowest
    ``waiting x 4 + running``, the first such from rank 0."""

    name = "vllm-least-loaded"

    def pick(self, loads: Sequence[RankLoad]) -> int:
        scores = [4 * x.waiting + x.running for x in loads]
        return scores.index(min(scores))


class TRTLLMBalanced(Dealer):
    """TensorRT-LLM's ``balance_requests_across_ranks``: of the ranks with fewer active
    requests than ``max(ceil((active + 1) / D), most active)``, the one with the fewest
    active tokens (then requests, then rank: its heap's order)."""

    name = "trtllm-balanced"

    def pick(self, loads: Sequence[RankLoad]) -> int:
        active = [x.waiting + x.running for x in loads]
        expected = max(-(-(sum(active) + 1) // len(loads)), max(active))
        keys = [
            (x.tokens, a, i)
            for i, (x, a) in enumerate(zip(loads, active, strict=True))
            if a < expected
        ]
        return min(keys)[2] if keys else 0


DEALERS: dict[str, type[Dealer]] = {
    cls.name: cls for cls in (RoundRobin, VLLMLeastLoaded, TRTLLMBalanced)
}
# The engine mode's rule; other modes deal round-robin (SGLang's default).
DEALER_OF_ENGINE = {
    "sglang": "round-robin",
    "vllm": "vllm-least-loaded",
    "trtllm": "trtllm-balanced",
}


def dealer_for(engine: str) -> Dealer:
    """The dealer of engine mode ``engine`` (round-robin for the twin's own modes)."""
    return DEALERS[DEALER_OF_ENGINE.get(engine, "round-robin")]()


# ------------------------------------------------------------------ holding contexts
class ADPBalance:
    """TensorRT-LLM's context balance across attention-DP ranks (``attention_dp_config:
    enable_balance``): ``PyExecutor._balance_adp_requests``, called from ``_schedule``
    when ``enable_attention_dp`` and the balance are on
    (``tensorrt_llm/_torch/pyexecutor/py_executor.py``, read in stored versions of the
    1.1 and 1.2 lines; main as indexed in 2026 moves it to ``balance_adp_requests`` of the
    scheduler package, "logic unchanged"). Each iteration the ranks all-gather their
    scheduled context and generation counts, and every rank takes the same decision:

    - every rank has a context scheduled and fewer generation requests than
      ``max_batch_size``: the hold count is reset; the contexts run, unless every rank
      also has generation requests and the batching count is still below
      ``batching_wait_iters`` (then that count goes up and no context runs);
    - otherwise no context runs and the hold count goes up by one; when it reaches
      ``timeout_iters``, or some rank has no generation request, it is reset and every
      rank's contexts run.

    The hold count goes up in iterations where no rank has a context too, so under a
    steady trickle of arrivals it is a clock: a new request that lands alone waits for
    the next tick, every ``timeout_iters`` iterations. It goes up once an executor
    iteration: ``_executor_loop`` calls ``_prepare_and_schedule_batch`` once, whose
    ``_schedule`` calls the balance once, after ``schedule_request``'s capacity
    scheduler has made its preemptions. A re-plan of the twin's loop after a rank
    preempted all it ran is the same iteration, so the loop takes that pass's tick back
    (:meth:`take_back`). While every queue's head waits for memory the executor spins
    (``executor_request_queue.py`` ``_fetch_new_requests`` blocks only when no rank has
    an active request), a tick each spin; a waiting rank has no generation request, so
    each leaves the hold count at 0 and the batching count as it was, as the loop's one
    tick before it waits does. A rank with no request at all counts as one with a
    generation request: the executor pads it with a dummy one
    (``_pad_attention_dp_dummy_request``). The counts are of executor iterations: with
    speculative decoding the twin's token step is ``1 / tau`` of one (``iteration``).
    ``AttentionDpConfig`` defaults (``tensorrt_llm/llmapi/llm_args.py``): balance off,
    ``timeout_iters`` 50, ``batching_wait_iters`` 10.
    """

    def __init__(
        self, timeout_iters: int, batching_wait_iters: int, max_batch_size: int, iteration: float
    ) -> None:
        self.timeout, self.batching = timeout_iters, batching_wait_iters
        self.max_batch, self.iteration = max_batch_size, iteration
        self.waited = 0.0  # adp_ctx_waiting_iters_count
        self.batched = 0.0  # adp_ctx_batching_wait_iters_count
        self._before = (0.0, 0.0)  # the counts before the last tick (take_back)

    def contexts_run(self, contexts: Sequence[bool], generating: Sequence[int]) -> bool:
        """Whether this iteration's scheduled contexts run, given which ranks have one
        and how many generation requests each runs (updates the counts)."""
        self._before = (self.waited, self.batched)
        all_gen = all(g > 0 for g in generating)
        if all(contexts) and all(g < self.max_batch for g in generating):
            self.waited = 0.0
            if all_gen and self.batched < self.batching:
                self.batched += self.iteration
                return False
            if all_gen:
                self.batched = 0.0
            return True
        self.waited += self.iteration
        if self.waited >= self.timeout or not all_gen:
            self.waited = 0.0
            return True
        return False

    def take_back(self) -> None:
        """Undo the last :meth:`contexts_run`'s counts: its iteration is planned again."""
        self.waited, self.batched = self._before


def adp_balance(config: EngineConfig, pricer: SyncPricer) -> ADPBalance | None:
    """The context balance ``config`` asks for (:class:`ADPBalance`, the ``trtllm`` mode's
    options ``TRTLLM_ADP_BALANCE``, their defaults ``AttentionDpConfig``'s); ``None``: none."""
    options = config.scheduling.scheduler_options
    balance, timeout, batching_wait = TRTLLM_ADP_BALANCE
    if not options.get(balance):
        return None
    tau = float(getattr(pricer, "tau", 1.0) or 1.0)
    return ADPBalance(
        int(options.get(timeout, ADP_TIMEOUT_ITERS)),
        int(options.get(batching_wait, ADP_BATCHING_WAIT_ITERS)),
        config.scheduling.max_running,
        1.0 / tau,
    )


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


def dp_pricer(
    model: ModelSpec,
    profile: Any,
    tp: int,
    ep: int,
    dp: int,
    step_host_s: float,
    seq_host_s: float,
    moe_a2a: str = "",
    absorbed_extend: int = 0,
    kernel_layout: KernelLayout = DEFAULT_LAYOUT,
) -> DPStepPricer:
    """The synchronised step pricer of a replica of ``tp`` GPUs, ``ep`` expert ranks and
    ``dp`` attention ranks on ``profile``; ``moe_a2a`` ``"deepep"``: the MoE layers'
    dispatch and combine from the profile's DeepEP fits (``twin.costmodel.a2a``;
    ``deepep_ht`` / ``deepep_ll`` one mode for every step); ``absorbed_extend``: the
    ranks' prefill chunks of at most that many tokens priced as MLA's absorbed extends
    (speculative decoding's verification, ``twin.engine.cost.make_pricer``);
    ``kernel_layout``: the engine build's (``twin.costmodel.kernel_layout``)."""
    from twin.costmodel import CostModel
    from twin.parallel import Layout, check_layout

    check_layout(model, Layout(tp, ep, dp))
    attention = CostModel(
        model, profile, tp // dp, absorbed_extend=absorbed_extend, kernel_layout=kernel_layout
    )
    attention.compile_steps()  # its compiled mixed step where the model has one
    ffn = CostModel(model, profile, tp, ep=ep, kernel_layout=kernel_layout)
    layers = model.n_mlp_layers + model.n_moe_layers
    a2a = None
    if moe_a2a:
        from twin.costmodel.a2a import A2APrice

        a2a = A2APrice(model, profile, ep, moe_a2a)
    gather_scatter = None
    if kernel_layout.moe_gather_scatter:
        from twin.costmodel.gather_scatter import GatherScatterPrice

        gather_scatter = GatherScatterPrice(model, ffn)
    return DPStepPricer(
        attention,
        ffn,
        dp,
        layers,
        step_host_s,
        seq_host_s,
        a2a,
        model.n_moe_layers,
        gather_scatter,
        kernel_layout.dense_ffn_on_rank,
    )


__all__ = [
    "DEALERS",
    "RANK_DROPPED_OPTIONS",
    "ADPBalance",
    "DPCluster",
    "DPReplica",
    "DPStepPricer",
    "RankRecorder",
    "SyncPricer",
    "adp_balance",
    "dp_pricer",
    "dp_replica",
    "rank_config",
]
