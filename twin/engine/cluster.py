"""The cluster: replicas, a router, the session source, and every request's life as a SimPy process.

Processes (each a generator reading top to bottom):

- ``_arrivals``: starts each session at its start time (file or Poisson);
- ``_session``: one per session, submits its turns in order: open-loop turns
  at their arrival time, closed-loop turns ``think_s`` after the previous
  turn completed;
- ``_request``: one per request: arrive, route, queue, get admitted (the
  replica looks the cache up and pins the hit), prefill, first token, decode,
  complete (the replica inserts the final state and unpins), record;
- ``Replica.run``: each replica's scheduler step loop;
- ``_sampler``: cache occupancy at fixed intervals, and progress.

The run ends when every session has submitted its last turn and every
request has completed; records are handed to ``on_record`` as requests finish.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from twin.cache import cache_stats
from twin.engine.batching import ContinuousBatching
from twin.engine.budget import memory_budget
from twin.engine.config import ArrivalConfig, EngineConfig
from twin.engine.cost import StepPricer
from twin.engine.memory_strategies import HOST_TIERS, HostTier, MemorySetup, get_memory, memory_mode
from twin.engine.replica import Replica, Seq
from twin.engine.router import get_router
from twin.engine.sim import Environment, Event, Process
from twin.engine.source import LAST_TURN, NEXT_OPEN, SessionSource
from twin.engine.speculative import Speculation
from twin.errors import TwinError
from twin.memory.footprint import allocator_for
from twin.metrics import Occupancy, RequestRecord
from twin.model import ModelSpec
from twin.policies import get_policy
from twin.policies.structures import (
    build_structure,
    choose_structure,
    make_cache,
    structure_named,
)
from twin.token_gaps import TokenGaps
from twin.workloads.reader import Request, Workload


@dataclass
class RunStats:
    """What the run leaves besides the records: per-replica counters and the occupancy series."""

    sim_end_s: float
    replicas: list[dict[str, Any]]
    occupancy: dict[str, Any]
    memory_budget_bytes: float
    horizon_s: float
    peak_buffered_rows: int  # workload rows read ahead of need at the worst moment
    # Per replica: every gap between consecutive output tokens, of steps started at or
    # after the warm-up (inter-token latency; ``TokenGaps.merged`` for the run's).
    token_gaps: list[TokenGaps] = field(default_factory=list)
    # Disaggregated runs only (twin.engine.disagg): the summary's ``pools``.
    pools: dict[str, Any] | None = None


def horizon(source: SessionSource, arrivals: ArrivalConfig) -> float:
    """Simulated seconds until the last arrival expected (progress bars, sampling).

    Closed-loop clients (``--concurrency``) send until ``until_s``, or until the
    file's sessions run out: 0 (unknown) then.
    """
    if source.closed_loop:
        return arrivals.until_s or 0.0
    h = source.horizon()
    return min(h, arrivals.until_s) if arrivals.until_s is not None else h


def session_source(workload: Workload, arrivals: ArrivalConfig) -> SessionSource:
    """The session source ``arrivals`` asks for (arrival times, rates, closed loop)."""
    return SessionSource(
        workload,
        arrivals.session_rate,
        arrivals.request_rate,
        arrivals.seed,
        closed_loop=arrivals.concurrency is not None,
        burstiness=arrivals.burstiness,
    )


def expected_horizon(workload: Workload, arrivals: ArrivalConfig) -> float:
    """:func:`horizon` of ``workload`` under ``arrivals``, before any simulation."""
    return horizon(session_source(workload, arrivals), arrivals)


class Cluster:
    """Replicas + router + source in one SimPy environment; :meth:`run` simulates the workload."""

    def __init__(
        self,
        model: ModelSpec,
        pricer: StepPricer,
        config: EngineConfig,
        workload: Workload,
        on_record: Callable[[RequestRecord], None] = lambda rec: None,
    ) -> None:
        if get_policy(config.cache.policy, **config.cache.policy_options).hindsight:
            raise TwinError(
                f"policy {config.cache.policy!r} is a hindsight bound (one replay per alpha), "
                "not an online policy; simulate 'marconi' with --policy-option alpha=A instead"
            )
        self.env = env = Environment()
        arrivals, replicas = config.arrivals, config.cluster.replicas
        self.model = model
        self.pricer = pricer
        self.config = config
        self.on_record = on_record
        self.source = session_source(workload, arrivals)
        self.router = get_router(config.cluster.router)
        self.budget = memory_budget(model, config)
        # Per-request acceptance (the workload's spec_acceptance) needs the run's speculation.
        self._speculation: Speculation | None = (
            Speculation.from_dict(config.mode.speculative) if config.mode.speculative else None
        )
        self.replicas: list[Replica] = []
        for i in range(replicas):
            self.replicas.append(self._new_replica(i))
            # Inter-token gaps count from the summary's measured window.
            self.replicas[-1].scheduler.warmup_s = arrivals.warmup_s
            if config.host_time.stream_token_s:
                self._stream_through(self.replicas[-1], config.host_time.stream_token_s)
            if config.host_time.cold_prefix_stall_s:
                self._cold_start(self.replicas[-1], config.host_time.cold_prefix_stall_s)
        self.horizon_s = horizon(self.source, arrivals)
        self.occupancy = Occupancy(
            replicas,
            max(self.horizon_s, 1e-3) / arrivals.samples,
            max_samples=2 * arrivals.samples,
        )
        # Per replica: when its front end is next free (None: no front end, frontend_s and
        # frontend_token_s 0), and its last pass's start and requests (``frontend_batch``).
        front = config.host_time.frontend_s or config.host_time.frontend_token_s
        self._front: list[float] | None = [0.0] * replicas if front else None
        self._front_pass: list[tuple[float, int]] = [(-1.0, 0)] * replicas
        self._finished = env.event()
        self._arrivals_done = False
        self._active = 0  # sessions still submitting or waiting on a turn
        # Utilisation's window: the first request arrival to the last expected session
        # start (the horizon), and each replica's busy seconds when it closes.
        self._first_arrival_s: float | None = None
        self._last_arrival_s = 0.0
        self._busy_at_horizon: list[float] | None = None
        self._busy_at_warmup: list[float] | None = None

    @staticmethod
    def _stream_through(replica: Replica, token_s: float) -> None:
        """Give ``replica``'s step loop the response path's seconds per streamed token
        (``stream_token_s``: ``ContinuousBatching._streamed``); the config allows it only
        on a replica whose loop is one (no attention-DP ranks, no pipeline lanes)."""
        scheduler = replica.scheduler
        if not isinstance(scheduler, ContinuousBatching):
            raise TwinError("stream_token_s: the replica's scheduler streams no tokens")
        scheduler.stream_token_s = token_s

    @staticmethod
    def _cold_start(replica: Replica, stall_s: float) -> None:
        """Give ``replica``'s step loop its one cold-start stall (``cold_prefix_stall_s``:
        ``ContinuousBatching._cold_stall``), paid once a replica: each replica is its own
        server. The config allows it only where the loop is one."""
        scheduler = replica.scheduler
        if not isinstance(scheduler, ContinuousBatching):
            raise TwinError("cold_prefix_stall_s: the replica's scheduler is not one step loop")
        scheduler.cold_prefix_stall_s = stall_s

    def _replica_kind(self, i: int) -> tuple[type[Replica], bool]:
        """Replica ``i``'s class and whether it has the host tier (a disaggregated
        cluster's decode workers are another class, without one)."""
        return Replica, True

    def _shared_tier(self, i: int) -> HostTier | None:
        """A tier under replica ``i``'s cache that other replicas share (a disaggregated
        cluster's shared KV store); ``None``: its own host tier, if any."""
        return None

    def _replica_setup(self, i: int) -> tuple[EngineConfig, StepPricer, float]:
        """Replica ``i``'s configuration, step prices and memory budget (a disaggregated
        cluster's decode pool may have its own GPU and layout)."""
        return self.config, self.pricer, self.budget

    def _new_replica(self, i: int) -> Replica:
        """Replica ``i`` (of :meth:`_replica_kind`'s class) with its cache, host tier and
        scheduler."""
        model = self.model
        config, pricer, budget = self._replica_setup(i)
        cls, host_tier = self._replica_kind(i)
        m, policy_name, options = config.memory, config.cache.policy, config.cache.policy_options
        capacity = int(budget) if m.shared_pool else m.cache_bytes
        host_bytes = m.host_cache_bytes + int(m.host_cache_ratio * capacity)
        if not host_tier:
            host_bytes = 0
        shared = self._shared_tier(i)
        policy = get_policy(policy_name, **options)
        # Dedicated or in the shared pool, over a host tier (its own or a store the replicas
        # share) or not: the policy's fastest exact cache (a tier calls the structure).
        tiered = bool(host_bytes) or shared is not None
        structure = choose_structure(policy, model, fast=not tiered)
        cache = build_structure(structure, model, capacity, policy)
        if host_bytes and m.host_write_policy == "write_back":
            _check_write_back(policy_name, structure)
        spec = config.mode.speculative or {}
        setup = MemorySetup(
            model,
            cache,
            budget,
            state_slots=m.state_slots,
            kv_allocator=allocator_for(m.kv_allocator, policy_name),
            extra_states=int(spec.get("state_slots", 0)),
            verify_states=int(spec.get("verify_states", 0)),
            max_running=config.scheduling.max_running,
        )
        memory = get_memory(memory_mode(m.shared_pool, structure), setup)
        # The host tier runs its own instance of the policy (a policy decides per tier).
        host = (
            HOST_TIERS[m.host_write_policy](
                make_cache(get_policy(policy_name, **options), model, host_bytes),
                pricer,
                m.host_write_policy,
            )
            if host_bytes
            else shared
        )
        return cls(
            self.env,
            i,
            pricer,
            cache,
            memory,
            config.scheduling,
            state_slots=m.state_slots,
            host=host,
        )

    # ------------------------------------------------------------------ running
    def run(self, progress: Callable[[float], None] | None = None) -> RunStats:
        """Simulate until every request completed; ``progress(dt)`` reports simulated seconds."""
        env = self.env
        for replica in self.replicas:
            env.process(replica.run())
        env.process(self._arrivals())
        env.process(self._sampler(progress))
        env.process(self._close_window())
        env.run(until=self._finished)
        return self._stats()

    def _arrivals(self) -> Generator[Event, Any, None]:
        env, until = self.env, self.config.arrivals.until_s
        if self.config.arrivals.concurrency is not None:
            starts = self.source.sessions()  # one stream: each free client takes the next
            yield env.all_of(
                [env.process(self._client(starts)) for _ in range(self.config.arrivals.concurrency)]
            )
            self._arrivals_done = True
            self._check_finished()
            return
        for first, start in self.source.sessions():
            if until is not None and start > until:
                break
            if start > env.now:
                yield env.timeout(start - env.now)
            self._active += 1
            env.process(self._session(first, start))
        self._arrivals_done = True
        self._check_finished()

    def _client(self, starts: Iterator[tuple[Request, float]]) -> Generator[Event, Any, None]:
        """A closed-loop client (``--concurrency``): sessions one after another, each
        started as soon as the previous one ends, until ``until_s`` or the file ends."""
        env, until = self.env, self.config.arrivals.until_s
        for first, _ in starts:
            # The session's turn 0 is sent ``think_s`` after the client frees
            # (``SessionSource.turn_arrival``): none due after ``until_s`` is sent, and the
            # client stops there rather than skip to a later session of the file.
            if until is not None and env.now + (first.think_s or 0.0) > until:
                self.source.drop(first.session_id)
                break
            self._active += 1
            yield from self._session(first, env.now)

    def _session(self, first: Request, start: float) -> Generator[Event, Any, None]:
        env, source, until = self.env, self.source, self.config.arrivals.until_s
        flags = source.flags
        # A router that picks by session alone picks once (the same replica every turn).
        sticky = self._route(first) if self.router.by_session else None
        req = first
        previous: Process | None = None  # the last turn, if it runs on its own
        spawned: list[Process] = []
        while True:
            now = env.now
            at = source.turn_arrival(req, first, start)
            if at is None:  # closed loop: think after the previous turn completes
                if previous is not None:
                    yield previous
                    now = env.now
                due = now + (req.think_s or 0.0)
            else:  # open loop: at its own time, whatever came before
                due = max(at, now)
            # Decide before waiting: a turn due after --until-s must not keep
            # the clock (and utilisation, occupancy) running until its time.
            if until is not None and due > until:
                if not flags[req.row] & LAST_TURN:
                    source.drop(req.session_id)
                break
            if due > now:
                yield env.timeout(due - now)
            flag = flags[req.row]
            last = flag & LAST_TURN
            if last or not flag & NEXT_OPEN:
                # Nothing else of this session can happen before this turn
                # completes: serve it in this process (one process fewer per request).
                yield from self._request(req, sticky)
                previous = None
            else:
                previous = env.process(self._request(req, sticky))
                spawned.append(previous)
            if last:
                break
            req = source.next_turn(req.session_id)
        for proc in spawned:  # open-loop turns may still be running
            if not proc.processed:
                yield proc
        self._active -= 1
        self._check_finished()

    def _request(self, req: Request, replica: Replica | None) -> Generator[Event, Any, None]:
        """One request's life, top to bottom (``replica``: the router's pick, if known)."""
        if self._front is None:
            seq = self._submit(req, replica)
        else:
            seq = yield from self._through_front(req, replica)
        # The scheduler stamps its admission (cache looked up, hit pinned, checkpoints
        # chosen) and first token (prefill of the uncached tokens done) as they happen.
        yield seq.done  # decoded to output_len; final state cached, hit unpinned, memory freed
        if seq.done_s > self.env.now:  # the response path still holds its last token
            yield self.env.timeout(seq.done_s - self.env.now)
        self.on_record(_record(seq))

    def _route(self, req: Request) -> Replica:
        """The replica the router picks for ``req``."""
        return self.replicas[self.router.route(req.session_id, req.prompt, self.replicas)]

    def _submit(self, req: Request, replica: Replica | None, arrival_s: float | None = None) -> Seq:
        """``req`` arrives now: routed (unless ``replica`` is given) and queued FCFS.

        Or rejected at once: too big to ever fit. ``arrival_s``: when the client sent it
        (before now when a front end delayed it).
        """
        self._own_acceptance(req)
        if replica is None:
            replica = self._route(req)
        self._note_arrival()
        return replica.submit(req, arrival_s)

    def _note_arrival(self) -> None:
        """A request reached the engine now (the run's first and last arrival times)."""
        now = self.env.now
        if self._first_arrival_s is None:
            self._first_arrival_s = now
        self._last_arrival_s = now

    def _own_acceptance(self, req: Request) -> None:
        """With speculative decoding, a request with its own acceptance rate (the
        workload's ``spec_acceptance``) decodes in its own number of token steps."""
        if self._speculation is not None and req.spec_acceptance is not None:
            req.decode_scale = self._speculation.decode_scale(req.spec_acceptance)

    def _through_front(self, req: Request, replica: Replica | None) -> Generator[Event, Any, Seq]:
        """``req`` is sent now; the replica's front end (``frontend_s``: HTTP, tokenisation,
        hand-off) takes it in arrival order, and then the engine queues it.

        A single server with a fixed service time per pass: with ``frontend_batch`` 1
        requests sent together reach the engine ``frontend_s`` apart (an event loop that
        processes them one by one); with ``frontend_batch`` B a pass takes every request
        sent before it starts (at its start included), up to B, and they reach the engine
        together (vLLM's tokeniser thread: ``modes_vllm.VLLM_FRONTEND_BATCH``); 0: any
        number, each request ``frontend_s`` after it is sent (a latency). The record's
        arrival is the send time, so TTFT counts the front end.

        ``frontend_token_s`` adds that much per prompt token to the request's own time (one
        at a time or a latency; the config refuses it with passes): TensorRT-LLM's
        ``trtllm-serve`` tokenises each text prompt on its own (``serve/openai_server.py``
        ``OpenAIServer.openai_completion`` -> ``LLM.input_processor``, i.e.
        ``inputs/registry.py`` ``DefaultInputProcessor.__call__`` ->
        ``TransformersTokenizer.encode``, one call per prompt, no batching): on the
        server's event loop inside ``llmapi/llm.py`` ``LLM.generate_async`` up to PR #7515,
        in a worker thread (``asyncio.to_thread``) after it (merged 2025-09-05, so the
        1.2.0rc releases; "Support multi-threaded tokenizers for trtllm-serve": prompts
        may then tokenise side by side, closer to the latency form); the stored copies
        read, no release tag being storable. The prompt counted is the request's whole
        prompt, history included (an OpenAI-style client resends the conversation)."""
        assert self._front is not None
        if replica is None:
            replica = self._route(req)
        env, free = self.env, self._front
        sent = env.now
        front = self.config.host_time
        # This request's time: per request and per prompt token (frontend_token_s 0: x + 0.0
        # is x, so the front end without it is unchanged to the bit).
        own = front.frontend_s + front.frontend_token_s * len(req.prompt)
        start, count = self._front_pass[replica.index]
        if not front.frontend_batch:
            done = sent + own  # a latency: nothing waits
        elif front.frontend_batch != 1 and start >= sent and count < front.frontend_batch:
            done = start + front.frontend_s  # the pass not yet started has room
            self._front_pass[replica.index] = (start, count + 1)
        else:
            start = max(sent, free[replica.index])
            done = start + own
            self._front_pass[replica.index] = (start, 1)
        free[replica.index] = done
        yield env.timeout(done - sent)
        return self._submit(req, replica, sent)

    def _sampler(self, progress: Callable[[float], None] | None) -> Generator[Event, Any, None]:
        env, occ = self.env, self.occupancy
        reported = 0.0
        while True:
            occ.add(
                env.now,
                [r.cache.kv_bytes for r in self.replicas],
                [r.cache.ssm_bytes for r in self.replicas],
            )
            if progress is not None:
                now = min(env.now, self.horizon_s)
                progress(now - reported)
                reported = now
            yield env.timeout(occ.interval_s)

    def _close_window(self) -> Generator[Event, Any, None]:
        warmup = self.config.arrivals.warmup_s
        if 0 < warmup < self.horizon_s:
            # The window opens after the warm-up, as the latencies' does: utilisation is
            # the headroom at steady state, not diluted by a cold, filling start.
            yield self.env.timeout(warmup)
            self._busy_at_warmup = [r.busy_until_now_s() for r in self.replicas]
        yield self.env.timeout(self.horizon_s - self.env.now)
        self._busy_at_horizon = [r.busy_until_now_s() for r in self.replicas]

    def utilisation(self) -> list[float]:
        """Per replica: busy share of the arrival window, capped at 1 (1 = no headroom).

        The window runs from the first request arrival (or the end of the warm-up,
        if later) to the horizon (the last expected session start, or ``until_s``):
        while load is still arriving.
        Busy time over the whole run is not used, because an overloaded run
        drains (and idles between closed-loop turns) long after arrivals stop,
        so it read lower under overload than at light load (issue 18). Runs whose
        arrivals all come at once have no window: busy time over the run.
        """
        end = self.env.now
        start = self._first_arrival_s or 0.0
        before = [0.0] * len(self.replicas)
        if self._busy_at_warmup is not None:
            start, before = max(start, self.config.arrivals.warmup_s), self._busy_at_warmup
        window = self.horizon_s - start
        if self._busy_at_horizon is None or window <= 0:
            return [r.busy_s / end if end > 0 else 0.0 for r in self.replicas]
        return [
            min(1.0, (busy - b) / window)
            for busy, b in zip(self._busy_at_horizon, before, strict=True)
        ]

    def _check_finished(self) -> None:
        if self._arrivals_done and not self._active and not self._finished.triggered:
            self._finished.succeed()

    # ------------------------------------------------------------------ results
    def _stats(self) -> RunStats:
        end = self.env.now
        reps = []
        for r, util in zip(self.replicas, self.utilisation(), strict=True):
            rep = {
                "replica": r.index,
                "requests": r.submitted,
                "rejected": r.rejected,
                "steps": r.step_no,
                "busy_s": r.busy_s,
                "utilisation": util,
                "cache": cache_stats(r.cache),
                "policy": r.policy.stats(),
            }
            if r.host is not None:
                rep["host_cache"] = r.host.stats(r.requests)
            pool = r.memory.stats()
            if pool is not None:
                rep["pool"] = {**pool, "preemptions": r.preemptions}
            reps.append(rep)
        # Closed-loop clients with no --until-s: the arrivals ended with the last one seen.
        arrivals_end = self._last_arrival_s if self.source.closed_loop else self.horizon_s
        return RunStats(
            end,
            reps,
            self.occupancy.to_dict(),
            self.budget,
            arrivals_end,
            self.source.peak_buffered,
            [r.token_gaps() for r in self.replicas],
        )


def _record(seq: Seq) -> RequestRecord:
    req = seq.req
    # Positional, in RequestRecord's field order (keywords cost twice as much per request).
    return RequestRecord(
        req.row,
        req.session_id,
        req.turn,
        seq.replica,
        seq.arrival_s,
        seq.admitted_s,
        seq.first_token_s,
        seq.done_s,
        seq.prompt_len,  # input_tokens
        seq.hit,  # hit_tokens
        len(req.output),  # output_tokens (seq.out_len: its decode steps)
        seq.ckpts,  # checkpoints
        seq.rejected,
        seq.hit_recompute,  # hit_recompute_tokens
        seq.preemptions,
        seq.recomputed,  # recomputed_tokens
    )


def _check_write_back(policy: str, structure: str) -> None:
    """Write-back hands evicted radix nodes to the host; a structure outside
    that does not evict to it (``Structure.evicts_to_host``: the block pools, the module
    store) would leave it empty."""
    if not structure_named(structure).evicts_to_host:
        raise TwinError(
            f"hicache_write_policy=write_back: policy {policy!r} runs on the {structure!r} "
            "structure, whose evictions the host tier does not receive; "
            "use a radix-tree policy (sglang, sglang+, marconi, ...) or write_through"
        )
