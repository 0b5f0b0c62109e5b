"""The disaggregated cluster: a prefill pool, a decode pool and the transfers between
them (the request's life: :mod:`twin.engine.disagg`)."""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from twin.engine.cluster import Cluster, RunStats
from twin.engine.config import EngineConfig
from twin.engine.cost import StepPricer
from twin.engine.disagg.decode_replica import DecodeReplica
from twin.engine.disagg.handoff import handoff_for
from twin.engine.disagg.kv_store import SharedKvTier
from twin.engine.disagg.pools import WorkerPool
from twin.engine.disagg.shares import transfer_shares
from twin.engine.disagg.timeline import INT_TIMELINE_COLUMNS, TIMELINE_COLUMNS
from twin.engine.fabric import KvLink, kv_link
from twin.engine.memory_strategies import HostTier
from twin.engine.replica import Replica, Seq
from twin.engine.sim import Event
from twin.metrics import RequestRecord
from twin.model import ModelSpec
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.workloads.reader import Request, Workload


class _Sending:
    """A request's transfer in progress: its prefill worker (``p``, the attention-DP
    ``rank``), the prompt tokens sent so far, the first piece's start, the bytes sent as
    chunks before the prefill ended, the last piece's start."""

    __slots__ = ("early_bytes", "first_start", "p", "rank", "sent", "tail_start")

    def __init__(self, p: int, rank: int) -> None:
        self.p, self.rank = p, rank
        self.sent = self.early_bytes = 0
        self.first_start = self.tail_start = math.nan


class DisaggCluster(Cluster):
    """A prefill pool (replicas ``0..P-1``) and a decode pool (``P..P+D-1``), module docstring."""

    def __init__(
        self,
        model: ModelSpec,
        pricer: StepPricer,
        config: EngineConfig,
        workload: Workload,
        on_record: Callable[[RequestRecord], None] = lambda rec: None,
        link: KvLink | None = None,
        decode: WorkerPool | None = None,
        gpu: str | None = None,
    ) -> None:
        p, d = config.disagg.prefill_workers, config.disagg.decode_workers
        assert p >= 1 and d >= 1 and config.cluster.replicas == p + d
        self.n_prefill = p
        self.gpu = gpu  # the prefill pool's (the run's) GPU
        self._decode_pool = decode  # read by _replica_setup while the replicas are built
        self._rank: tuple[EngineConfig, StepPricer, float] | None = None  # a DP rank's
        self.shared_tier: SharedKvTier | None = None  # built with the first prefill worker
        super().__init__(model, pricer, config, workload, on_record)
        self.decode_pool = decode or WorkerPool(config, pricer, self.budget, gpu)
        self.link = link or kv_link(config.disagg.kv_link, None, config)
        self.prefill = self.replicas[:p]
        # The engine's hand-off (HANDOFFS): with per-chunk sends each prefill worker's
        # scheduler reports its chunks' ends (_chunk_done) for the requests in _sending.
        self.handoff = handoff_for(config.mode.engine)
        self._sending: dict[int, _Sending] = {}
        if self.handoff.per_chunk:
            for r in self.prefill:
                for unit in getattr(r, "ranks", [r]):
                    unit.scheduler.on_chunk = self._chunk_done
        # The decode pool's units, each with its own memory, reservations and queue: a
        # worker, or each of its attention-DP ranks (SGLang runs a scheduler, with its
        # DecodePreallocQueue, per DP rank). Worker k's units: self._units[k].
        self.decode: list[DecodeReplica] = []
        self._units: list[list[int]] = []
        self._decode_owner: list[Any] = []  # the worker (replica) each unit is part of
        for r in self.replicas[p:]:
            ranks = getattr(r, "ranks", [r])
            self._units.append(list(range(len(self.decode), len(self.decode) + len(ranks))))
            for rank in ranks:
                assert isinstance(rank, DecodeReplica)
                rank.on_freed = self._reserve_next
                rank.unit = len(self.decode)
                rank.prefix_cache = config.disagg.decode_prefix_cache
                self.decode.append(rank)
                self._decode_owner.append(r)
        n = len(self.decode)
        self._prealloc: list[deque[tuple[Seq, Event]]] = [deque() for _ in range(n)]
        self._held = [0] * n  # requests sent to each decode unit and not completed
        self._next_decode = 0
        # When each prefill worker's NICs (each attention-DP rank's, under DP) are next free.
        self._link_free = [[0.0] * config.cluster.dp_attention for _ in range(p)]
        self.kv_per_token = model.kv_bytes_per_token
        # What the busiest prefill GPU sends and each decode GPU receives per token: its
        # share of the KV heads (all of them where there are fewer KV heads than GPUs, and
        # MLA's latent), as SGLang maps the two pools' ranks (transfer_shares). Under
        # attention DP a request's KV is on its rank's tp / dp GPUs, and SGLang maps the
        # attention TP ranks (disaggregation/common/conn.py: attn_tp_size).
        dpool = self.decode_pool.config
        self.prefill_tp = config.cluster.tp // config.cluster.dp_attention
        self.decode_tp = dpool.cluster.tp // dpool.cluster.dp_attention
        send, recv = transfer_shares(model, self.prefill_tp, self.decode_tp)
        self._shares = send, recv
        self.kv_send_per_token_gpu, self.kv_recv_per_token_gpu = float(send), float(recv)
        self.state_bytes = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
        self.timeline: list[tuple[float, ...]] = []
        self.prefilled = self.transferred = 0
        self.transfer_bytes = self.early_bytes = 0

    def _shared_tier(self, i: int) -> HostTier | None:
        """The prefill workers' shared KV store (``--shared-kv-tier``), built once."""
        config = self.config
        if i >= self.n_prefill or not config.disagg.shared_kv_tier_bytes:
            return None
        if self.shared_tier is None:
            policy = get_policy(config.cache.policy, **config.cache.policy_options)
            store = config.disagg.shared_kv_tier_bytes
            cache = make_cache(policy, self.model, store)  # a tier: the structure itself
            self.shared_tier = SharedKvTier(cache, self.model, config.cluster.tp)
        return self.shared_tier

    def _replica_kind(self, i: int) -> tuple[type[Replica], bool]:
        # Prefill workers are the run's replicas; decode workers keep no host tier.
        return (Replica, True) if i < self.n_prefill else (DecodeReplica, False)

    def _replica_setup(self, i: int) -> tuple[EngineConfig, StepPricer, float]:
        if self._rank is not None:  # an attention-DP rank being built (_new_replica)
            return self._rank
        pool = self._decode_pool
        if i < self.n_prefill or pool is None:
            return super()._replica_setup(i)
        return pool.config, pool.pricer, pool.budget

    def _new_replica(self, i: int) -> Any:
        """Worker ``i``: a replica, or under its pool's attention DP a replica of ranks in
        lockstep (``twin.engine.dp_attention``), each rank of the worker's kind with its
        share of the memory."""
        config, pricer, budget = self._replica_setup(i)
        if config.cluster.dp_attention <= 1:
            return super()._new_replica(i)
        from twin.engine.dp_attention import RankRecorder, dp_replica
        from twin.engine.dp_pricing import SyncPricer

        assert isinstance(pricer, SyncPricer)

        def rank(recorder: RankRecorder) -> Replica:
            self._rank = (config, recorder, budget / config.cluster.dp_attention)
            try:
                return super(DisaggCluster, self)._new_replica(i)
            finally:
                self._rank = None

        dp, eager = config.cluster.dp_attention, config.host_time.eager_prefill_s
        return dp_replica(pricer, dp, config.mode.engine, rank, eager_s=eager)

    def _route(self, req: Request) -> Replica:
        return self.replicas[self.router.route(req.session_id, req.prompt, self.prefill)]

    def _submit(self, req: Request, replica: Replica | None, arrival_s: float | None = None) -> Seq:
        """``req`` arrives: its prefill (the prompt and the first output token) queues at a
        prefill worker, at once or (:attr:`Handoff.reserve_first`) once a decode worker has
        reserved its memory; the returned sequence completes when its decode does."""
        self._own_acceptance(req)
        n = len(req.prompt)
        first = dataclasses.replace(req, output=req.full[n : n + 1], full=req.full[: n + 1])
        if not self.handoff.reserve_first:
            pre = super()._submit(first, replica, arrival_s)
            # The attention-DP rank the prefill worker dealt it to: its GPUs send the KV.
            rank = getattr(self.replicas[pre.replica], "last_rank", 0)
            whole = Seq(req, pre.replica, pre.arrival_s, 0, self.env)
            self.env.process(self._handoff(pre, whole, rank))
            return whole
        if replica is None:
            replica = self._route(req)
        self._note_arrival()
        env = self.env
        whole = Seq(req, replica.index, env.now if arrival_s is None else arrival_s, 0, env)
        env.process(self._reserve_then_prefill(first, replica, whole))
        return whole

    def _pick_decode(self) -> int:
        """The decode unit for a request: the worker holding the fewest requests, ties
        rotating; under attention DP the rank its engine deals it to (SGLang 0.5.10.post1
        ``server_args.py`` ``_handle_load_balance_method``: a decode server's DP
        controller deals round-robin; ``twin.engine.dp_dealing.DEALERS``)."""
        units = self._units
        held = [sum(self._held[u] for u in us) for us in units]
        n = len(held)
        start = self._next_decode = (self._next_decode + 1) % n
        best = start
        for k in range(1, n):
            i = (start + k) % n
            if held[i] < held[best]:
                best = i
        owner = self._decode_owner[units[best][0]]
        return units[best][owner.pick_rank()] if len(units[best]) > 1 else units[best][0]

    def _reserve_next(self, worker: DecodeReplica) -> None:
        """A decode unit freed memory: reserve for its queue's head, in order."""
        queue = self._prealloc[worker.unit]
        max_running = self.decode_pool.config.scheduling.max_running
        while queue and worker.reserve(queue[0][0], max_running):
            queue.popleft()[1].succeed()

    def _reserved_unit(
        self, whole: Seq
    ) -> Generator[Event, Any, tuple[int, DecodeReplica, Seq, float] | None]:
        """The decode unit ``whole`` goes to, its sequence there, and when its memory was
        reserved (after waiting for it); ``None`` where no decode side takes it."""
        picked = self._decode_side(whole)
        if picked is None:
            return None
        k, worker, seq = picked
        yield from self._reserve(k, worker, seq)
        return k, worker, seq, self.env.now

    def _handoff(self, pre: Seq, whole: Seq, rank: int) -> Generator[Event, Any, None]:
        """After the prefill: reserve on a decode worker, transfer, decode (module docstring)."""
        yield pre.done
        if not self._prefilled(pre, whole):
            return
        got = yield from self._reserved_unit(whole)
        if got is None:
            return
        k, worker, seq, reserved = got
        # With decode-side reuse the prompt's tokens the decode worker's cache holds are
        # not sent (DecodeReplica._look_up).
        sent_tokens = whole.prompt_len - seq.hit if worker.prefix_cache else whole.prompt_len
        start, end = self._send(pre.replica, rank, sent_tokens, True)
        sending = _Sending(pre.replica, rank)
        sending.first_start = start
        yield from self._decode(whole, k, worker, seq, reserved, start, end, sending)

    def _reserve_then_prefill(
        self, first: Request, replica: Replica, whole: Seq
    ) -> Generator[Event, Any, None]:
        """:attr:`Handoff.reserve_first` (SGLang): the decode unit reserves the request's
        memory, then the prefill queues (the prefill server's bootstrap queue holds it until
        then); with :attr:`Handoff.per_chunk` each chunk is sent as it ends
        (:meth:`_chunk_done`), the rest and the state at the prefill's end."""
        memory = getattr(replica, "ranks", [replica])[0].memory
        if whole.out_len <= 1 or memory.too_big(memory.footprint(len(first.full))):
            # Nothing to decode, or a prompt the prefill worker refuses at once.
            pre = replica.submit(first, whole.arrival_s)
            rank = getattr(replica, "last_rank", 0)
            yield from self._handoff(pre, whole, rank)
            return
        got = yield from self._reserved_unit(whole)
        if got is None:
            return
        k, worker, seq, reserved = got
        pre = replica.submit(first, whole.arrival_s)
        rank = getattr(replica, "last_rank", 0)
        sending = _Sending(pre.replica, rank)
        # SGLang 0.5.23 with a decode radix cache: sent from decode_prefix_len
        # (prefill.py finalize_bootstrap: start_send_idx).
        sending.sent = seq.hit if worker.prefix_cache else 0
        if self.handoff.per_chunk:
            self._sending[id(pre)] = sending
        yield pre.done
        self._sending.pop(id(pre), None)
        going_on = self._prefilled(pre, whole)
        assert going_on, "checked above: a prefill to decode, not refused"
        start, end = self._send(pre.replica, rank, whole.prompt_len - sending.sent, True)
        sending.tail_start = start
        if sending.first_start != sending.first_start:  # NaN: nothing sent before
            sending.first_start = start
        yield from self._decode(whole, k, worker, seq, reserved, sending.first_start, end, sending)

    def _chunk_done(self, pre: Seq) -> None:
        """A prefill chunk of ``pre`` ended and its prefill goes on: SGLang sends the KV
        computed since its last send now (``send_kv_chunk(last_chunk=False)``)."""
        sending = self._sending.get(id(pre))
        if sending is None:
            return
        done = min(pre.ctx, pre.prompt_len)
        if done <= sending.sent:  # a recompute after a preemption: sent already
            return
        start, _ = self._send(sending.p, sending.rank, done - sending.sent, False)
        if sending.first_start != sending.first_start:
            sending.first_start = start
        sending.early_bytes += (done - sending.sent) * self.kv_per_token
        sending.sent = done

    def _prefilled(self, pre: Seq, whole: Seq) -> bool:
        """The prefill ended: its stamps are the request's; ``False`` where the request
        ends there (refused, or nothing to decode)."""
        whole.admitted_s = pre.admitted_s
        whole.first_token_s = pre.first_token_s
        whole.hit, whole.ckpts, whole.hit_recompute = pre.hit, pre.ckpts, pre.hit_recompute
        whole.preemptions, whole.recomputed = pre.preemptions, pre.recomputed
        if not pre.rejected:
            self.prefilled += 1
        if pre.rejected or whole.out_len <= 1:
            whole.rejected = pre.rejected
            whole.done_s = pre.done_s
            whole.done.succeed()
            return False
        return True

    def _decode_side(self, whole: Seq) -> tuple[int, DecodeReplica, Seq] | None:
        """The decode unit and its sequence for ``whole`` (``None``: refused there, too big
        for its memory; ``whole`` then ends now)."""
        req, n = whole.req, whole.prompt_len
        k = self._pick_decode()
        worker = self.decode[k]
        seq, too_big = worker.new_seq(
            dataclasses.replace(req, prompt=req.full[: n + 1], output=req.full[n + 1 :])
        )
        if too_big:
            worker.submitted += 1
            worker.rejected += 1
            whole.rejected = True
            whole.done_s = self.env.now
            whole.done.succeed()
            return None
        self._held[k] += 1
        return k, worker, seq

    def _reserve(self, k: int, worker: DecodeReplica, seq: Seq) -> Generator[Event, Any, None]:
        """Until decode unit ``k`` has reserved ``seq``'s memory (FIFO, head-of-line)."""
        queue = self._prealloc[k]
        if queue or not worker.reserve(seq, self.decode_pool.config.scheduling.max_running):
            wait = self.env.event()
            queue.append((seq, wait))
            yield wait

    def _send(self, p: int, rank: int, tokens: int, state: bool) -> tuple[float, float]:
        """``tokens`` prompt tokens' KV (and the recurrent state with ``state``) sent from
        now over prefill worker ``p``'s (rank's) link: (when it starts, when it is there).

        Every GPU's share at once, each over its own link, FIFO per prefill worker; as long
        as the busier end's share (a prefill GPU serving k decode GPUs sends k slices, a
        decode GPU fed by k prefill GPUs receives k). A recurrent state is sliced by heads
        like the KV (SGLang 0.5.23 mooncake/conn.py _send_mamba_state_slice)."""
        state_bytes = self.state_bytes if state else 0
        sent = tokens * self.kv_send_per_token_gpu + state_bytes / self.prefill_tp
        received = tokens * self.kv_recv_per_token_gpu + state_bytes / self.decode_tp
        busy, total = self.link.seconds(max(sent, received))
        link_free = self._link_free[p]
        now = self.env.now
        start = max(now, link_free[rank])
        link_free[rank] = start + busy
        return start, start + total

    def _decode(
        self,
        whole: Seq,
        k: int,
        worker: DecodeReplica,
        seq: Seq,
        reserved: float,
        start: float,
        end: float,
        sending: _Sending,
    ) -> Generator[Event, Any, None]:
        """The KV is there at ``end``: the request decodes to completion on unit ``k``."""
        env = self.env
        if end > env.now:
            yield env.timeout(end - env.now)
        self.transferred += 1
        n = whole.prompt_len
        sent_tokens = n - seq.hit if worker.prefix_cache else n
        nbytes = sent_tokens * self.kv_per_token + self.state_bytes  # the KV and state sent
        self.transfer_bytes += nbytes
        self.early_bytes += sending.early_bytes
        # The client streams from the decode worker: the first token (sampled by the
        # prefill worker, sent with the KV) reaches it once the transfer completes. SGLang
        # 0.5.10.post1 sglang/srt/disaggregation/decode.py: the transferred request's
        # output_ids gets the prefill's token when its KV has arrived, and the next
        # iteration's prebuilt batch (_run_batch_prebuilt -> process_batch_result_prebuilt)
        # streams it without a forward. So TTFT ends here, not at the prefill's end.
        prefill_end = whole.first_token_s
        whole.first_token_s = end
        worker.queue(seq)
        owner = self._decode_owner[k]
        if owner is not worker:  # an attention-DP rank: its worker's step loop wakes
            owner.wake()
        yield seq.done
        self._held[k] -= 1
        whole.done_s = seq.done_s
        whole.preemptions += seq.preemptions
        whole.recomputed += seq.recomputed
        tail = sending.tail_start if sending.tail_start == sending.tail_start else start
        self.timeline.append(
            (
                whole.req.row,
                sending.p,
                worker.index,
                whole.arrival_s,
                prefill_end,
                reserved,
                start,
                end,
                seq.first_token_s,
                seq.done_s,
                nbytes,
                tail,
                sending.early_bytes,
            )
        )
        whole.done.succeed()

    # ------------------------------------------------------------------ results
    def _stats(self) -> RunStats:
        stats = super()._stats()
        stats.pools = self.pools(stats)
        return stats

    def timeline_columns(self) -> dict[str, np.ndarray]:
        """The per-request timeline as columns (:data:`TIMELINE_COLUMNS`)."""
        rows = np.array(self.timeline, dtype=np.float64).reshape(-1, len(TIMELINE_COLUMNS))
        return {
            name: rows[:, j].astype(np.int64) if name in INT_TIMELINE_COLUMNS else rows[:, j]
            for j, name in enumerate(TIMELINE_COLUMNS)
        }

    def pools(self, stats: RunStats) -> dict[str, Any]:
        """The summary's ``pools``: each pool's utilisation, queueing and memory, and the
        transfers (latencies over requests arriving after the warm-up)."""
        cols = self.timeline_columns()
        measured = cols["arrival_s"] >= self.config.arrivals.warmup_s
        p, tp = self.n_prefill, self.config.cluster.tp
        mixed = self._decode_pool is not None  # the decode pool has its own hardware
        own_flags = bool(
            self.config.disagg.prefill_engine_flags or self.config.disagg.decode_engine_flags
        )

        def spread(values: np.ndarray) -> dict[str, float | None]:
            x = values[measured]
            if not x.size:
                return {"mean": None, "p50": None, "p95": None, "max": None}
            q50, q95 = np.percentile(x, [50, 95])
            return {
                "mean": float(x.mean()),
                "p50": float(q50),
                "p95": float(q95),
                "max": float(x.max()),
            }

        def pool(reps: list[dict[str, Any]], at: WorkerPool) -> dict[str, Any]:
            util = [r["utilisation"] for r in reps]
            out: dict[str, Any] = {
                "workers": len(reps),
                "gpus": len(reps) * at.config.cluster.tp,
                "replicas": [r["replica"] for r in reps],
                "requests": sum(r["requests"] for r in reps),
                "rejected": sum(r["rejected"] for r in reps),
                "steps": sum(r["steps"] for r in reps),
                "utilisation": {"mean": sum(util) / len(util), "min": min(util), "max": max(util)},
                "memory_budget_bytes": at.budget,
            }
            if mixed:  # each pool's hardware (summaries of one-hardware runs unchanged)
                out.update(gpu=at.gpu, tp=at.config.cluster.tp, ep=at.config.cluster.ep)
                if at.config.cluster.dp_attention > 1:
                    out["dp_attention"] = at.config.cluster.dp_attention
                if at.profile:  # the decode pool's; the prefill pool's is the summary's
                    out["profile"] = at.profile
            if own_flags:  # each pool's engine flags (--set and its own) and limits
                out.update(
                    engine_flags=at.config.mode.engine_flags,
                    max_running=at.config.scheduling.max_running,
                    max_batched_tokens=at.config.scheduling.max_batched_tokens,
                    memory_utilization=at.config.memory.memory_utilization,
                )
            if all("pool" in r for r in reps):
                out["peak_running_bytes"] = max(r["pool"]["peak_running_bytes"] for r in reps)
                out["peak_running_requests"] = max(r["pool"]["peak_running_requests"] for r in reps)
                out["preemptions"] = sum(r["pool"]["preemptions"] for r in reps)
            return out

        own = WorkerPool(self.config, self.pricer, self.budget, self.gpu)  # the prefill pool's
        prefill = pool(stats.replicas[:p], own)
        decode = pool(stats.replicas[p:], self.decode_pool)
        decode["peak_reserved_requests"] = max(w.peak_reserved for w in self.decode)
        # Queueing: at the prefill worker (arrival to admission, from the records'
        # queue_s), for the decode worker's memory (prefill end to reservation), for the
        # link (reservation to transfer start), and the transfer itself.
        # (from the request's arrival where the decode side reserves first: SGLang's)
        asked = cols["arrival_s"] if self.handoff.reserve_first else cols["prefill_end_s"]
        decode["reserve_wait_s"] = spread(cols["reserved_s"] - asked)
        decode["first_decode_after_transfer_s"] = spread(
            cols["first_decode_s"] - cols["transfer_end_s"]
        )
        transfer = {
            **self.link.to_dict(),
            "policy": (
                "fifo per prefill worker"
                + ("'s attention-DP rank" if self.config.cluster.dp_attention > 1 else "")
                + "; "
                + self.handoff.policy
            ),
            "prefilled_requests": self.prefilled,
            "transferred_requests": self.transferred,
            "bytes": self.transfer_bytes,
            # The last piece's wait for the link once both ends were ready (behind the
            # request's own earlier chunks and other requests' transfers).
            "link_wait_s": spread(
                cols["tail_start_s"] - np.maximum(cols["reserved_s"], cols["prefill_end_s"])
            ),
            "seconds": spread(cols["transfer_end_s"] - cols["transfer_start_s"]),
        }
        if self.handoff.per_chunk:
            transfer["early_bytes"] = self.early_bytes
            transfer["after_prefill_s"] = spread(cols["transfer_end_s"] - cols["prefill_end_s"])
        if mixed:
            transfer.update(self.rank_mapping())
        if self.config.disagg.decode_prefix_cache:
            transfer["decode_hit_tokens"] = sum(w.hit_tokens for w in self.decode)
        out = {
            "layout": f"{p}P{len(self._units)}D",
            "tp": tp,
            "prefill": prefill,
            "decode": decode,
            "transfer": transfer,
        }
        if self.shared_tier is not None:
            out["shared_tier"] = self.shared_tier.summary()
        return out

    def rank_mapping(self) -> dict[str, Any]:
        """Which prefill GPUs send to which decode GPUs, and the bytes per token at each
        end (:func:`transfer_shares`)."""
        ptp, dtp = self.prefill_tp, self.decode_tp
        k = max(ptp, dtp) // min(ptp, dtp)
        if ptp == dtp:
            how = "prefill rank i sends to decode rank i"
        elif dtp > ptp:
            how = f"prefill rank i sends to decode ranks {k}i .. {k}i + {k - 1}"
        else:
            how = f"decode rank j pulls from prefill ranks {k}j .. {k}j + {k - 1}"
        send, recv = self._shares
        return {
            "rank_mapping": how + " (SGLang 0.5.23 disaggregation/common/conn.py)",
            "kv_send_bytes_per_token_per_gpu": float(send),
            "kv_recv_bytes_per_token_per_gpu": float(recv),
        }
