"""Pipeline parallelism: a replica of ``pp`` stages of ``tp`` GPUs, micro-batches in flight.

``--pp N`` (``EngineConfig.pp``) splits the model's layers into ``N`` contiguous stages
(``twin.parallel.stage_sizes``: the engine's ``get_pp_indices``), each on its own ``tp``
GPUs.
What the engines do, and what the twin takes from it:

- **Micro-batches, one scheduler.** vLLM 0.19.0 (``vllm/v1/engine/core.py``
  ``EngineCore.step_with_batch_queue``; ``max_concurrent_batches`` is
  ``pipeline_parallel_size``, ``vllm/v1/executor/multiproc_executor.py``) schedules a new
  batch whenever fewer than ``pp`` are in flight, and blocks on the oldest when the queue
  is full; its scheduler advances ``num_computed_tokens`` at scheduling time, so a request
  in flight has no token to schedule and is skipped (``vllm/v1/core/sched/scheduler.py``
  ``schedule``: "PP>1 and we have already scheduled all prompt tokens but they are not
  finished yet"); ``max_num_seqs`` counts every running request, each batch has its own
  token budget. SGLang 0.5.10.post1 (``managers/scheduler_pp_mixin.py``
  ``event_loop_pp``) keeps one running batch per micro-batch slot (``running_mbs``, ``pp
  + pp_async_batch_depth`` of them), each capped at ``pp_max_micro_batch_size`` =
  ``max_running_requests // pp`` (``managers/scheduler.py``). TensorRT-LLM's PyExecutor
  (``_torch/pyexecutor/py_executor.py`` ``_executor_loop_pp``, main as indexed in 2026)
  rings ``num_micro_batches = pp_size`` batches and its scheduler skips the request ids
  in flight (``inflight_req_ids``).
- **The twin's replica** (:class:`PipelineScheduler`) is ``pp`` *lanes*, each the engine
  mode's own scheduler (``SCHEDULERS``: its admission, chunking and preemption rules, not
  a copy) sharing the replica's one waiting queue, cache and memory. A lane plans a
  micro-batch from its own running requests and the queue's head, sends it into the
  pipeline and plans its next when that one leaves the last stage: so a request is in at
  most one micro-batch in flight, a new micro-batch is planned whenever fewer than ``pp``
  are in flight and there is work, and an arrival joins the next one planned (vLLM's
  batch queue). The running cap is the replica's over all lanes (vLLM's
  ``max_num_seqs``), or ``max_running // pp`` a lane under SGLang's scheduler
  (``pp_max_micro_batch_size``). Each lane's decode steps are planned one at a time (a
  step's timing depends on the other lanes' micro-batches in the stages).
- **Stages are a flow shop** (:class:`FlowShop`): a micro-batch enters stage ``j`` when
  stage ``j`` is free and its activations from stage ``j - 1`` have arrived; micro-batches
  keep their order (FIFO, as the engines' NCCL sends and receives do). Its tokens are out
  when it leaves the last stage. Since the order is the planning order, its exit time is
  known when it is planned, and the lane waits exactly that long.
- **A stage's time** (:class:`PipelinePricer`): the cost model on the stage's own layers
  (``twin.parallel.stage_models``) at ``tp`` (and ``ep``); the embedding, final norm and LM
  head (``CostModel.head_s``) on the last stage only. The engine's host time per step
  (scheduling, input preparation, output processing: ``step_host_s`` and ``seq_host_s``)
  is a stage of its own ahead of the GPUs, one micro-batch at a time: vLLM's engine core
  schedules the next batch while earlier ones run on the GPUs (``step_with_batch_queue``
  returns without blocking while the queue is not full), so the host's time overlaps the
  stages' instead of adding to every step as it does at ``pp = 1``.
- **Between stages** the point-to-point send of the activations: vLLM 0.19.0's
  ``IntermediateTensors`` of a decoder (``hidden_states`` and ``residual``,
  ``model_executor/models/llama.py``), each TP rank sending its ``1 / tp`` of them
  (``v1/worker/gpu_worker.py``: ``isend_tensor_dict`` with ``all_gather_group`` the TP
  group), ``2 x tokens x d_model x dtype_bytes / tp`` bytes per GPU, over NVLink within
  a node (the profile's ``interconnect_bw``, the per-direction figure of
  ``twin.hardware`` the all-reduce ring uses) or a 400 Gb/s NIC per GPU past eight GPUs
  (``twin.engine.fabric.IB_BW_PER_GPU``), plus the link's fixed latency. The send does
  not hold the sending stage (vLLM's ``isend``); the receiver's all-gather of the slices
  is not priced.

Not modelled (refused by ``EngineConfig`` in one line): attention data parallelism,
speculative decoding, disaggregated pools, a host cache tier. Differences from the
engines: a request stays in the lane that admitted it (vLLM and TensorRT-LLM may put a
free request into any next batch; in steady state the batch that frees it is the next
one planned, so the groups are the same); vLLM and TensorRT-LLM may send a prompt's next
chunk before the previous chunk has left the pipeline, the twin waits for it (a long
prompt's TTFT at low load is up to ``pp`` times a stage's share longer here); the
embedding gather is priced on the last stage with the head; SGLang's
``pp_async_batch_depth`` slots are not added.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar

from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.engine.cluster import Cluster
from twin.engine.composite import PartsClock
from twin.engine.config import EngineConfig, SchedulerConfig
from twin.engine.cost import Chunk, CostModelPricer, PricerBase, StepPricer, WrappingPricer
from twin.engine.fabric import IB_BW_PER_GPU, IB_LATENCY_S, NODE_GPUS
from twin.engine.replica import Replica, Seq
from twin.engine.scheduler import get_scheduler
from twin.engine.sim import Environment, Event
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.workloads.reader import Workload

# Tensors a decoder stage sends the next per token: vLLM 0.19.0's IntermediateTensors
# ``{"hidden_states", "residual"}`` (``model_executor/models/llama.py``, and the other
# decoders' ``forward`` alike).
SENT_TENSORS = 2


class PipelinePricer(PricerBase):
    """Each stage's seconds of a micro-batch (:meth:`stage_times`), the host's
    (:meth:`host_time`) and the send between stages (:meth:`send_time`); as a plain
    pricer, one micro-batch through the empty pipeline (the host, every stage and send in
    turn)."""

    def __init__(
        self,
        stages: Sequence[StepPricer],
        link_bw: float,
        link_latency_s: float,
        bytes_per_token: float,
        step_host_s: float = 0.0,
        seq_host_s: float = 0.0,
        heads: Sequence[Callable[[int, int], float] | None] | None = None,
    ) -> None:
        if len(stages) < 2:
            raise TwinError("a pipeline needs at least two stages (--pp 2 or more)")
        self.stages = list(stages)
        # Per stage: the seconds of the head its pricer counts and the stage does not run
        # (``CostModel.head_s`` for all but the last stage); None: nothing to take off.
        self.heads = list(heads) if heads is not None else [None] * len(self.stages)
        self.link_bw, self.link_latency_s = float(link_bw), float(link_latency_s)
        self.bytes_per_token = float(bytes_per_token)  # per GPU of the sending stage
        self.step_host_s, self.seq_host_s = float(step_host_s), float(seq_host_s)

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def provenance(self) -> str:
        return str(getattr(self.stages[0], "provenance", ""))

    def stage_times(
        self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int
    ) -> list[float]:
        """Seconds each stage computes the micro-batch: its layers (the head on the last
        stage only)."""
        tokens = sum(c for c, _ in prefills) + decode_batch
        seqs = len(prefills) + decode_batch
        last = len(self.stages) - 1
        out = []
        for j, (head, pricer) in enumerate(zip(self.heads, self.stages, strict=True)):
            s = pricer.step_time(prefills, decode_batch, decode_context)
            if j < last and head is not None:
                s -= head(tokens, seqs)
            out.append(s)
        return out

    def host_time(self, sequences: int) -> float:
        """The engine's host seconds for a micro-batch of ``sequences`` requests."""
        return self.step_host_s + self.seq_host_s * sequences

    def send_time(self, tokens: int) -> float:
        """Seconds from a stage's end until the next stage has the activations of
        ``tokens`` tokens (module docstring)."""
        return self.link_latency_s + tokens * self.bytes_per_token / self.link_bw

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        tokens = sum(c for c, _ in prefills) + decode_batch
        times = self.stage_times(prefills, decode_batch, decode_context)
        host = self.host_time(len(prefills) + decode_batch)
        return host + sum(times) + (len(times) - 1) * self.send_time(tokens)

    def checkpoint_copy_time(self) -> float:
        # Each stage copies its own layers' states, at the same time.
        return max(p.checkpoint_copy_time() for p in self.stages)

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        # Recomputed recurrent layers run stage after stage; host loads in parallel.
        work = sum(p.hit_work_time(recompute, 0, 0) for p in self.stages) if recompute else 0.0
        if host_tokens or host_states:
            work += max(p.hit_work_time(0, host_tokens, host_states) for p in self.stages)
        return work

    def write_back_time(self, tokens: int, states: int) -> float:
        return max(p.write_back_time(tokens, states) for p in self.stages)


class FlowShop:
    """The stages as a FIFO flow shop (the host first, then the GPU stages): when each is
    next free, and the seconds some micro-batch was in the pipeline (the replica's busy
    time)."""

    def __init__(self, env: Environment, stages: int) -> None:
        self.env = env
        self.free = [0.0] * stages
        self._union_s = 0.0  # length of the union of every micro-batch's [planned, out]
        self._last_out = 0.0
        self.batches = 0

    def enter(self, times: Sequence[float], sends: Sequence[float]) -> float:
        """A micro-batch planned now whose stages take ``times`` and whose input reaches
        stage ``j`` ``sends[j - 1]`` after it left stage ``j - 1``: it takes each stage
        when the stage is free and its input has arrived; the seconds until it leaves the
        last stage."""
        now = self.env.now
        t, free = now, self.free
        for j, p in enumerate(times):
            if j:
                t += sends[j - 1]
            t = max(t, free[j]) + p
            free[j] = t
        # FIFO: micro-batches leave in order, each planned at or after the last's plan.
        self._union_s += t - max(now, self._last_out)
        self._last_out = t
        self.batches += 1
        return t - now

    def busy_until_now_s(self) -> float:
        """Seconds up to now during which a micro-batch was in the pipeline."""
        return self._union_s - max(0.0, self._last_out - self.env.now)


class LanePricer(WrappingPricer):
    """A lane's pricer: its micro-batch goes through the shared :class:`FlowShop`; the
    seconds are until it leaves the last stage (so the lane's step is that long). No
    decode fit: each decode step is its own micro-batch."""

    inner: PipelinePricer

    def __init__(self, inner: PipelinePricer, shop: FlowShop) -> None:
        super().__init__(inner)
        self.shop = shop

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        inner = self.inner
        tokens = sum(c for c, _ in prefills) + decode_batch
        times = inner.stage_times(prefills, decode_batch, decode_context)
        host = inner.host_time(len(prefills) + decode_batch)
        send = inner.send_time(tokens)
        return self.shop.enter([host, *times], [0.0] + [send] * (len(times) - 1))


class _Lane:
    """What a lane adds to its engine mode's scheduler class (:func:`lane_class`): the
    replica's running cap over every lane, and decode steps planned one at a time."""

    # Each lane would keep its own admission stamps over the one shared queue: a loop
    # scheduling one step ahead (``ContinuousBatching.lag_option``) is not modelled in a
    # lane (TensorRT-LLM's overlap scheduler is refused with --pp, ``EngineConfig``;
    # vLLM's asynchronous scheduling keeps its host-time overlap only).
    lag_option: ClassVar[str | None] = None
    pipeline: PipelineScheduler
    max_running: int
    _run_cap: int
    prefilling: Any
    decoding: Any
    full: bool

    def _can_admit(self) -> bool:
        self.max_running = self.pipeline.lane_cap(self)
        if not (self.prefilling or self.decoding) and getattr(self, "full", False):
            # SGLang's lane set batch_is_full while another micro-batch held the pool; an
            # empty running batch is never full (0.5.10.post1 ``managers/scheduler.py``
            # ``update_running_batch``: ``if batch.is_empty(): batch.batch_is_full = False``).
            self.full = False
        return super()._can_admit()  # type: ignore[misc,no-any-return]

    def _plan_run(self, ends: Any) -> Any:
        # One decode step a micro-batch: the next step's timing depends on the other
        # lanes' micro-batches, planned later.
        self._run_cap = 1
        return super()._plan_run(ends)  # type: ignore[misc]


_LANES: dict[type, type] = {}


def lane_class(cls: type) -> type:
    """The engine mode's scheduler class ``cls`` as a pipeline lane (made once)."""
    lane = _LANES.get(cls)
    if lane is None:
        lane = _LANES[cls] = type(f"{cls.__name__}Lane", (_Lane, cls), {})
    return lane


class PipelineScheduler(PartsClock):
    """A replica's ``pp`` lanes over one flow shop (module docstring). It stands where the
    replica keeps its scheduler: requests in (:meth:`submit`), the step loops
    (:meth:`run`), and the counters the cluster reports."""

    def __init__(
        self,
        env: Environment,
        replica: Replica,
        pricer: PipelinePricer,
        scheduling: SchedulerConfig,
    ) -> None:
        scheduler, max_running = scheduling.scheduler, scheduling.max_running
        budget = scheduling.max_batched_tokens
        self.env = env
        self.pp = pricer.pp
        self.shop = FlowShop(env, self.pp + 1)  # the host, then the stages
        self.max_running = max_running
        # SGLang caps each micro-batch's running batch (pp_max_micro_batch_size); vLLM's
        # and TensorRT-LLM's caps are the engine's.
        self.per_lane = max(max_running // self.pp, 1) if scheduler == "sglang" else None
        cls = lane_class(get_scheduler(scheduler))  # type: ignore[arg-type]
        self.waiting: deque[Seq] = deque()
        self.lanes: list[Any] = []
        for _ in range(self.pp):
            lane = cls(env, replica, LanePricer(pricer, self.shop), budget, max_running)
            lane.pipeline = self
            lane.waiting = self.waiting  # one queue: an arrival joins the next micro-batch
            self.lanes.append(lane)
        self.busy_since: float | None = None  # busy time is the flow shop's
        self._warmup_s = 0.0

    def lane_cap(self, lane: Any) -> int:
        """The running cap ``lane`` admits under: its own (SGLang), or the replica's less
        what the other lanes run (vLLM's ``max_num_seqs`` over all batches)."""
        if self.per_lane is not None:
            return self.per_lane
        others = sum(len(x.prefilling) + len(x.decoding) for x in self.lanes if x is not lane)
        return self.max_running - others

    @property
    def step_no(self) -> int:
        """Micro-batches run (every lane's steps)."""
        return sum(lane.step_no for lane in self.lanes)

    @property
    def busy_s(self) -> float:
        return self.shop.busy_until_now_s()

    def _part_schedulers(self) -> Sequence[Any]:
        return self.lanes

    def submit(self, seq: Seq) -> None:
        """Queue ``seq``; a lane with nothing in flight plans a micro-batch for it now
        (vLLM schedules a new batch while the queue is not full)."""
        for lane in self.lanes:
            wake = lane._wake
            if wake is not None and not wake.triggered:
                lane.submit(seq)
                return
        self.lanes[0].submit(seq)

    def run(self) -> Generator[Event, Any, None]:
        """Each lane's step loop as its own process; this one waits for ever."""
        for lane in self.lanes:
            self.env.process(lane.run())
        yield self.env.event()


class PipelineCluster(Cluster):
    """A cluster whose replicas run ``pp`` pipeline stages (:class:`PipelineScheduler`);
    everything else is the cluster's."""

    def __init__(
        self,
        model: ModelSpec,
        pricer: Any,
        config: EngineConfig,
        workload: Workload,
        on_record: Callable[[Any], None] = lambda rec: None,
    ) -> None:
        if not isinstance(pricer, PipelinePricer):
            raise TwinError("--pp needs the pipeline's stage pricer")
        super().__init__(model, pricer, config, workload, on_record)

    def _new_replica(self, i: int) -> Replica:
        replica = super()._new_replica(i)
        pricer = self.pricer
        assert isinstance(pricer, PipelinePricer)  # checked in __init__
        replica.scheduler = PipelineScheduler(  # type: ignore[assignment]
            self.env, replica, pricer, self.config.scheduling
        )
        return replica


def pipeline_pricer(
    model: ModelSpec,
    profile: Any,
    tp: int,
    ep: int,
    pp: int,
    step_host_s: float = 0.0,
    seq_host_s: float = 0.0,
    engine: str = "",
    kernel_layout: KernelLayout = DEFAULT_LAYOUT,
) -> PipelinePricer:
    """The stage pricer of a replica of ``pp`` stages of ``tp`` GPUs (``ep`` expert ranks
    among them) on ``profile``, its layers split as engine mode ``engine`` splits them
    (``twin.parallel.PP_SPLIT_OF_ENGINE``), its kernels laid out as ``kernel_layout``
    (``twin.costmodel.kernel_layout``)."""
    from twin.costmodel import CostModel
    from twin.hardware import DEFAULT_ALLREDUCE_LATENCY_S
    from twin.parallel import PP_SPLIT_OF_ENGINE, Layout, check_layout, stage_models

    split = PP_SPLIT_OF_ENGINE.get(engine, "vllm")
    check_layout(model, Layout(tp, ep, 1, pp, split))
    models = [
        CostModel(sm, profile, tp, ep=ep, kernel_layout=kernel_layout)
        for sm in stage_models(model, pp, split)
    ]
    if tp * pp <= NODE_GPUS:  # the stages in one NVLink node
        bw = profile.peaks.get("interconnect_bw")
        if not bw:  # pragma: no cover - every shipped profile has it
            raise TwinError(
                f"--pp {pp}: profile {profile.gpu!r} has no interconnect bandwidth to price "
                "the stages' sends"
            )
        latency = profile.peaks.get("allreduce_latency_s", DEFAULT_ALLREDUCE_LATENCY_S)
    else:  # stages on other nodes: one NIC per GPU
        bw, latency = IB_BW_PER_GPU, IB_LATENCY_S
    per_gpu = SENT_TENSORS * model.d_model * model.dtype_bytes / tp
    heads = [cm.head_s for cm in models[:-1]] + [None]
    stages = [CostModelPricer(cm) for cm in models]
    return PipelinePricer(stages, bw, latency, per_gpu, step_host_s, seq_host_s, heads)


__all__ = [
    "FlowShop",
    "LanePricer",
    "PipelineCluster",
    "PipelinePricer",
    "PipelineScheduler",
    "lane_class",
    "pipeline_pricer",
]
