"""Disaggregated prefill and decode (issue 36, first part): a prefill pool, a decode pool,
and each request's KV (and recurrent state) moved between them over a priced link.

A request's life (:meth:`DisaggCluster._handoff`), with ``--prefill-workers P
--decode-workers D``, every worker a replica of ``--tp`` GPUs of the one ``--gpu``, or each
pool on its own hardware (``--prefill-gpu/--decode-gpu``, ``--prefill-tp/--decode-tp``,
``--prefill-ep/--decode-ep``: :class:`WorkerPool`, each priced with its GPU's profile and
holding its own memory budget; the KV moves between pools of different TP as SGLang maps
their ranks, :func:`transfer_shares`):

1. routed to a prefill worker by the run's router (prefix-aware where the cache is: the
   prefill pool holds the prefix cache), queued and prefilled there under the run's
   scheduler; the prefill worker samples the first token (SGLang 0.5.10.post1
   ``disaggregation/prefill.py``: ``req.output_ids.append(next_token_id)`` at the
   prefill's end, the token travels to the decode worker with the KV's metadata); the
   client streams from the decode worker, so the record's first token is the transfer's
   end (see :meth:`DisaggCluster._handoff`; the prefill's end is in the timeline);
2. sent to the decode worker holding the fewest requests (reserving, in transfer or
   running): the rule asked for in the issue, not one engine's router read line by line;
3. the decode worker reserves the request's memory before the transfer starts, FIFO and
   head-of-line blocking, as SGLang's ``DecodePreallocQueue.pop_preallocated``
   (``disaggregation/decode.py``, 0.5.10.post1: the queue is scanned in order and stops
   at the first request whose prompt tokens do not fit), at most ``max_running``
   requests reserved per worker (its ``req_to_token_pool`` slots). When is the engine's
   hand-off rule (:class:`Handoff`, :data:`HANDOFFS`): vLLM's NIXL connector (and the
   other engines here) picks and reserves on the decode side once the prefill has
   ended; SGLang does it when the request arrives, and the prefill waits in the prefill
   server's bootstrap queue until the reservation is made, so a full decode pool holds
   prefills back;
4. the transfer: the prompt's KV (all of it, whatever the prefill hit: SGLang sends the
   KV indices of the whole ``origin_input_ids``) plus one recurrent state per hybrid
   request, split over the ``tp`` GPUs, each over its own link (:class:`KvLink`). The
   link is the prefill worker's NICs, FIFO: one transfer at a time per prefill worker,
   its bandwidth not shared. FIFO rather than processor sharing because the total
   work is the same, each transfer finishes no later than under sharing's fair split
   (earlier for all but the last), and a transfer is one timeout instead of a re-timing
   of every transfer in flight at each start and end. The decode worker's ingress is not
   a second queue (P workers sending to one D worker at once are not slowed down).
   vLLM pulls the whole prompt's KV after the prefill. SGLang sends each chunk of a
   chunked prefill as the chunk ends (each piece its own FIFO turn on the link and its
   own latency) and the last chunk's KV with the state at the prefill's end, so what is
   left after the prefill is the last chunk's bytes when the link keeps up
   (``pd_timeline.parquet``: ``transfer_start_s`` the first piece's start,
   ``tail_start_s`` the last's, ``early_bytes`` what went before the prefill's end).
   No engine read here overlaps the transfer layer by layer within a forward;
5. decoded to completion on the decode worker: its KV is there, so the worker computes
   only the first output token's forward (one token with the prompt as context) in its
   next step, then one token a step. The decode worker keeps no prefix cache unless
   ``--decode-prefix-cache`` (then the transfer sends only the prompt tokens its cache
   lacks: :meth:`DecodeReplica._look_up`), takes no new-token-ratio admission, and
   batches continuously (``continuous``, or ``vllm`` where the run's scheduler is
   vLLM's): SGLang's decode
   worker merges arrivals into the running batch without a prefill batch of its own.
   A request preempted there (its pool full) waits behind the arrivals, which hold their
   reserved memory and are never blocked by it, and no new reservation is made until it
   is admitted again (:meth:`DecodeReplica.reserve`); it recomputes its prompt and output.

A request with a single output token completes at the prefill worker (nothing to
decode, nothing sent). The prefill worker frees the request's memory at the prefill's
end, not when the transfer completes (SGLang holds it in ``disagg_prefill_inflight_queue``
until the KV is sent): not modelled.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from twin import mixers as mx
from twin.cache import cache_stats
from twin.engine.batching import ContinuousBatching
from twin.engine.cluster import Cluster, RunStats
from twin.engine.config import EngineConfig
from twin.engine.cost import StepPricer
from twin.engine.memory_strategies import HostTier
from twin.engine.releases import split_engine
from twin.engine.replica import Replica, Seq
from twin.engine.sim import Event
from twin.errors import TwinError
from twin.hardware import DEFAULT_ALLREDUCE_LATENCY_S, GB, GPUS
from twin.metrics import RequestRecord
from twin.model import ModelSpec
from twin.parallel import Layout, check_layout, kv_bytes_per_token_per_gpu, kv_head_share
from twin.policies import get_policy
from twin.workloads.reader import Request, Workload

KV_LINKS = ("ib", "nvlink")

# One ConnectX-7 port per GPU on the compute fabric: 400 Gb/s InfiniBand NDR or
# Ethernet (RoCE) per GPU (NVIDIA DGX H100/H200 user guide, "Network ports": eight
# single-port ConnectX-7 for the cluster network). 400e9 bits/s = 50 GB/s per direction.
IB_BW_PER_GPU = 400e9 / 8
# Assumed, not measured: one transfer's fixed latency over RDMA (queue-pair work
# request, one switch hop, the completion seen by the receiver), of the order of
# 10 us; the port-to-port latency itself is sub-microsecond, the software around it is
# not. Within a node the same order as the NCCL start-up the cost model assumes.
IB_LATENCY_S = 10e-6
# GPUs an HGX H100/H200 node links by NVLink. Applied to every GPU: a GB200/GB300 NVL72
# rack's 72-GPU NVLink domain is not modelled yet (nvlink is refused past 8 GPUs there too).
NODE_GPUS = 8


@dataclass(frozen=True)
class KvLink:
    """The link one GPU's share of a transfer crosses: bytes/s per GPU, fixed latency."""

    name: str
    bw_per_gpu: float
    latency_s: float
    source: str

    def seconds(self, gpu_bytes: float) -> tuple[float, float]:
        """(seconds the link is busy, seconds until the bytes are there) for one GPU's share."""
        busy = gpu_bytes / self.bw_per_gpu if self.bw_per_gpu != math.inf else 0.0
        return busy, busy + self.latency_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "link": self.name,
            "bw_per_gpu_bytes_s": self.bw_per_gpu,
            "latency_s": self.latency_s,
            "source": self.source,
        }


def kv_link(kind: str, gpu: str | None, config: EngineConfig) -> KvLink:
    """The link ``--kv-link`` names for the run's GPU and layout (a ``TwinError`` if none)."""
    if kind == "ib":
        return KvLink(
            "ib",
            IB_BW_PER_GPU,
            IB_LATENCY_S,
            "400 Gb/s ConnectX-7 per GPU (NVIDIA DGX H100/H200 user guide); latency assumed",
        )
    if config.decode_gpu and config.decode_gpu != gpu:
        raise TwinError(
            f"--kv-link nvlink: the pools' GPUs differ ({gpu or 'the profile'}, "
            f"{config.decode_gpu}) and an HGX node holds one GPU type; use --kv-link ib"
        )
    spec = GPUS.get(gpu or "")
    if spec is None or not spec.nvlink_bw:
        raise TwinError(
            f"--kv-link nvlink: {gpu or 'this profile'!r} has no NVLink figure in "
            "twin.hardware; use --kv-link ib"
        )
    gpus = config.prefill_workers * config.tp + config.decode_workers * (
        config.decode_tp or config.tp
    )
    if gpus > NODE_GPUS:
        raise TwinError(
            f"--kv-link nvlink: the prefill and decode workers share a node of {NODE_GPUS} "
            f"GPUs only if their GPUs add up to at most {NODE_GPUS} (got {gpus}); use "
            "--kv-link ib"
        )
    return KvLink(
        "nvlink",
        spec.interconnect_bw,
        DEFAULT_ALLREDUCE_LATENCY_S,
        f"{spec.display_name} NVLink per direction ({spec.interconnect_bw / GB:g} GB/s, "
        f"{spec.source}); latency assumed (twin.hardware)",
    )


def check_tp_pair(prefill_tp: int, decode_tp: int) -> None:
    """Refuse a pair of pool TPs whose ranks SGLang cannot map (one line)."""
    lo, hi = sorted((prefill_tp, decode_tp))
    if hi % lo:
        raise TwinError(
            f"--prefill-tp {prefill_tp} and --decode-tp {decode_tp}: one must divide the "
            "other (SGLang maps decode ranks to prefill ranks by their ratio, "
            "disaggregation/common/conn.py _resolve_rank_mapping)"
        )


@dataclass(frozen=True)
class Handoff:
    """How an engine's P/D connector hands a request from its prefill worker to its decode
    worker (:data:`HANDOFFS`, by engine name; :data:`AFTER_PREFILL` for the others).

    ``reserve_first``: the decode worker reserves the request's memory when the request
    arrives, and the prefill waits for that reservation (a full decode pool holds prefills
    back); else the decode worker is picked and reserves once the prefill has ended.
    ``per_chunk``: each prefill chunk's KV is sent as the chunk ends (the link FIFO per
    prefill worker as ever); the state and the KV computed in the last chunk go when the
    prefill ends; else the whole prompt's KV goes once the prefill has ended.
    """

    name: str
    reserve_first: bool
    per_chunk: bool
    policy: str  # the summary's words for it
    source: str


# vLLM 0.19.0 distributed/kv_transfer/kv_connector/v1/nixl_connector.py: the prefill
# instance's request_finished holds the prompt's blocks and returns them as
# kv_transfer_params (remote_block_ids) once the prefill has ended; the proxy then sends
# the request to a decode instance, whose get_num_new_matched_tokens counts the prompt's
# tokens to pull, its scheduler allocates the blocks (update_state_after_alloc) and the
# worker reads them (start_load_kv -> _read_blocks): reserved after the prefill, pulled
# after it. The paper mode uses the same rule.
AFTER_PREFILL = Handoff(
    "after_prefill",
    reserve_first=False,
    per_chunk=False,
    policy="no layer-by-layer overlap",
    source="vLLM 0.19.0 nixl_connector.py (the decode worker pulls after the prefill)",
)
# SGLang 0.5.10.post1 disaggregation/: the router sends a request to a prefill and a decode
# server at once; the decode server's DecodePreallocQueue.pop_preallocated allocates its
# KV and sends the indices (KVReceiver.send_metadata); until they reach the prefill server
# its KVSender polls Bootstrapping and PrefillBootstrapQueue.pop_bootstrapped keeps the
# request out of the waiting queue (mooncake/conn.py bootstrap_thread: WaitingForInput once
# every decode rank's TransferInfo is in). Then each chunk of a chunked prefill is sent as
# it ends (prefill.py process_prefill_chunk / process_batch_result_disagg_prefill ->
# send_kv_chunk(last_chunk=False), from start_send_idx to the tokens computed), and the
# last chunk with the recurrent state at the prefill's end (send_kv_chunk(last_chunk=True)).
# The transfer queue sends one chunk after another per prefill worker (the twin's FIFO
# link). Not modelled: the partial last page a non-last chunk holds back (page_size 1, the
# twin's default, holds none); 0.5.23's optimistic prefill (a request prefills while its
# decode side is still bootstrapping, disaggregation_decode_allocation_policy early) and its
# prefill_complete policy: both SGLang releases follow 0.5.10.post1's rule here.
SGLANG_PER_CHUNK = Handoff(
    "per_chunk",
    reserve_first=True,
    per_chunk=True,
    policy="decode memory reserved before the prefill; each prefill chunk sent as it ends",
    source="SGLang 0.5.10.post1 disaggregation/prefill.py send_kv_chunk, decode.py "
    "DecodePreallocQueue",
)
# TensorRT-LLM (docs/source/1.0/features/disagg-serving.md, "trtllm-serve" and "Dynamo"; the
# PyTorch executor, tensorrt_llm/_torch/pyexecutor/py_executor.py): the context server runs
# a context-only request and, once the prompt's KV is computed, answers with the first token
# and its ctx_params; the request then goes to a generation server as generation-only, whose
# capacity scheduler admits it (fitting_disagg_gen_init_requests), _prepare_disagg_gen_init
# allocates its KV (kv_cache_manager.prepare_resources) and _recv_disagg_gen_cache asks the
# context server for all of it. Reserved after the prefill, the whole prompt sent after it:
# vLLM's rule. The context executor sends one request's KV at a time unless
# TRTLLM_PARALLEL_CACHE_SEND=1 (default 0, the same page): the FIFO link per prefill worker.
TRTLLM_AFTER_CONTEXT = Handoff(
    "after_context",
    reserve_first=False,
    per_chunk=False,
    policy="generation server allocates and pulls after the context phase",
    source="TensorRT-LLM 1.0 docs/source/1.0/features/disagg-serving.md, "
    "_torch/pyexecutor/py_executor.py _prepare_disagg_gen_init",
)
HANDOFFS: dict[str, Handoff] = {
    "sglang": SGLANG_PER_CHUNK,
    "vllm": AFTER_PREFILL,
    "trtllm": TRTLLM_AFTER_CONTEXT,
}


def handoff_for(engine: str) -> Handoff:
    """The hand-off rule of ``engine`` (a mode name, with or without ``==release``)."""
    return HANDOFFS.get(split_engine(engine)[0], AFTER_PREFILL)


def transfer_shares(model: ModelSpec, prefill_tp: int, decode_tp: int) -> tuple[Fraction, Fraction]:
    """Per prompt token: (KV bytes the busiest prefill GPU sends, KV bytes each decode GPU
    receives), as SGLang 0.5.23 maps the ranks of two pools of different TP.

    ``disaggregation/common/conn.py`` ``_resolve_rank_mapping``: with equal TP each decode
    rank pulls from the prefill rank of its index; with ``decode_tp = k x prefill_tp``,
    decode rank ``j`` pulls from prefill rank ``j // k`` (each prefill rank serves ``k``);
    with ``prefill_tp = k x decode_tp``, decode rank ``j`` pulls from prefill ranks
    ``j k .. j k + k - 1``. What moves (``common/staging_buffer.py``
    ``compute_head_slice_params``, ``mooncake/conn.py`` ``send_kvcache_slice``):

    - a GQA layer's K and V, sliced by KV head: each decode rank receives the heads it
      holds (:func:`twin.parallel.kv_head_share` at ``decode_tp``), from its one prefill
      rank or as the ``k`` slices of its ``k`` prefill ranks (each sends all it holds);
      a prefill rank serving ``k`` decode ranks sends each its slice, so replicated heads
      (fewer KV heads than decode GPUs) are sent more than once;
    - MLA's latent (not split by heads): every decode rank receives all of it; a prefill
      rank serving ``k`` decode ranks sends it ``k`` times, and of ``k`` prefill ranks
      serving one decode rank only the first sends (the others send dummies).

    At equal TP both are :func:`twin.parallel.kv_bytes_per_token_per_gpu`.
    """
    check_tp_pair(prefill_tp, decode_tp)
    check_layout(model, Layout(prefill_tp))
    check_layout(model, Layout(decode_tp))
    send = recv = Fraction(0)
    fan_out = max(decode_tp // prefill_tp, 1)  # decode ranks one prefill rank serves
    fan_in = max(prefill_tp // decode_tp, 1)  # prefill ranks one decode rank pulls from
    for kind, n in model.mixer_counts.items():
        full = Fraction(mx.kv_bytes_per_token(model, kind))
        if not full:
            continue
        if kind in mx.GQA_KINDS:
            if fan_in > 1:
                one = full * kv_head_share(model, prefill_tp)  # a prefill rank's heads
                send, recv = send + n * one, recv + n * fan_in * one
            else:
                one = full * kv_head_share(model, decode_tp)  # a decode rank's heads
                send, recv = send + n * fan_out * one, recv + n * one
        else:  # replicated on every rank (MLA's latent)
            send, recv = send + n * fan_out * full, recv + n * full
    return send, recv


@dataclass(frozen=True)
class WorkerPool:
    """A pool's hardware: its workers' configuration (tp, ep, HBM, and the engine's
    defaults on that GPU, as its own servers would resolve them), step prices and memory
    budget. The prefill pool's is the run's; the decode pool's too unless
    ``--decode-gpu/--decode-tp/--decode-ep`` (or the prefill pool's), or either pool's
    own engine flags (``--prefill-set/--decode-set``), set it apart."""

    config: EngineConfig
    pricer: StepPricer
    budget: float
    gpu: str | None
    profile: str = ""  # the step prices' provenance label (summaries of mixed pools)


# Per-pool options of a disaggregated run (twin.engine.build_run): each defaults to the
# run's --gpu/--tp/--ep; the prefill pool's become the run's, the decode pool's the
# config's decode_gpu/decode_tp/decode_ep (left out where they equal the prefill pool's).
POOL_OPTIONS = (
    "prefill_gpu",
    "decode_gpu",
    "prefill_tp",
    "decode_tp",
    "prefill_ep",
    "decode_ep",
    "prefill_dp_attention",
    "decode_dp_attention",
)


def split_pools(
    gpu: str | None, profile: object, settings: dict[str, Any]
) -> tuple[str | None, str | None, dict[str, Any]]:
    """(the prefill pool's GPU, the decode pool's GPU, the settings) from the run's
    ``gpu`` and ``settings`` holding :data:`POOL_OPTIONS`; refused in one line where no
    pools are given or a profile file is."""
    out = {k: v for k, v in settings.items() if k not in POOL_OPTIONS}
    given = {k: settings[k] for k in POOL_OPTIONS if settings.get(k) not in (None, 0, "")}
    if not given:
        return gpu, gpu, out
    flag = f"--{next(iter(given)).replace('_', '-')}"
    if not (settings.get("prefill_workers") or settings.get("decode_workers")):
        raise TwinError(
            f"{flag}: only a disaggregated run has pools; give --prefill-workers and "
            "--decode-workers"
        )
    if profile is not None and ("prefill_gpu" in given or "decode_gpu" in given):
        raise TwinError(
            f"{flag}: a pool's GPU names a shipped profile; --profile gives both pools "
            "theirs (leave one of them out)"
        )
    for name in ("tp", "ep", "dp_attention"):  # the prefill pool's are the run's
        run = int(settings.get(name) or 1)
        prefill = int(given.get(f"prefill_{name}", run))
        decode = int(given.get(f"decode_{name}", run))
        out[name] = prefill
        if decode != prefill:
            out[f"decode_{name}"] = decode
    return given.get("prefill_gpu", gpu), given.get("decode_gpu", gpu), out


class DecodeReplica(Replica):
    """A decode worker: requests arrive with their prompt's KV, reserved before it came.

    Its requests' prompt is the prompt + the first output token; the prompt's KV counts
    as this replica's own pages (``seq.hit``: no cache holds them), so the scheduler
    computes the first token's forward alone (``prefill_left`` 1). No prefix cache is
    looked up or filled, unless :attr:`prefix_cache` (``--decode-prefix-cache``): then the
    prompt is looked up in the worker's own cache when its memory is reserved, the hit is
    the cache's pages (pinned) and is not sent, and a completed request's KV is inserted
    (:meth:`reserve`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["new_token_ratio"] = None  # SGLang's PrefillAdder is the prefill side's
        # Arrivals join the running batch in order (SGLang's get_new_prebuilt_batch); the
        # prefill scheduler's lpm sort is not the decode worker's.
        kwargs["schedule_policy"] = "fcfs"
        if kwargs.get("scheduler") not in ("continuous", "vllm"):
            kwargs["scheduler"] = "continuous"
        super().__init__(*args, **kwargs)
        assert isinstance(self.scheduler, ContinuousBatching)
        self.scheduler.arrivals_reserved = True  # their KV is in memory reserved for them
        self.reserved = 0  # requests holding a reservation (until they complete)
        self.peak_reserved = 0
        self.unit = 0  # its index among the decode pool's units (DisaggCluster)
        self.preempted_waiting = 0  # preempted requests waiting to take memory again
        self.on_freed: Callable[[DecodeReplica], None] | None = None
        self._order = 0
        self.prefix_cache = False  # decode-side prefix reuse (DisaggCluster sets it)
        self.hit_tokens = 0  # prompt tokens found in its cache, not sent
        # SGLang's decode worker keeps a retracted request's KV in host memory and loads it
        # back (0.5.10.post1 managers/schedule_batch.py ScheduleBatch.release_req:
        # req.offload_kv_cache when disaggregation_mode is decode;
        # disaggregation/decode.py resume_retracted_reqs: req.load_kv_cache): nothing is
        # recomputed. Its KV pools' get_cpu_copy/load_cpu_copy (mem_cache/memory_pool.py,
        # MHA and MLA) copy synchronously; the hybrid pool has none, so a hybrid keeps
        # the recompute. vLLM recomputes (no offload on preemption).
        self.offloads = self.preemption == "retract" and not self.memory.state_bytes
        self.offloaded: dict[int, int] = {}  # id(seq) -> tokens it keeps in host memory
        self._copy_s = 0.0  # offload copies since the scheduler last asked

    def reserve(self, seq: Seq, max_running: int) -> bool:
        """Reserve ``seq``'s memory now (SGLang's pre-allocation); ``False``: not yet.

        Not while a preempted request waits for memory: SGLang 0.5.10.post1
        ``disaggregation/decode.py`` ``process_decode_queue`` returns before
        ``pop_preallocated`` while ``retracted_queue`` is not empty; vLLM 0.19.0 allocates
        a new request's blocks from ``waiting``, behind the preempted request it prepends
        there (``Scheduler.schedule`` stops at the first request it cannot allocate).
        """
        if self.preempted_waiting or self.reserved >= max_running or not self.memory.reserve(seq):
            return False
        self.reserved += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        if self.prefix_cache:
            self._look_up(seq)
        return True

    def _look_up(self, seq: Seq) -> None:
        """Decode-side prefix reuse: ``seq``'s prompt looked up in this worker's cache
        once its memory is taken (taking it may evict, as an aggregated admission's
        :meth:`Replica.fits` before :meth:`Replica.admit`); the hit is pinned, its pages
        are the cache's (given back from the reservation) and only the rest is sent.

        SGLang 0.5.23 ``disaggregation/decode.py`` ``pop_preallocated`` with
        ``--disaggregation-decode-enable-radix-cache`` (off by default): the prefix is
        matched and locked in the decode radix tree at pre-allocation, only the rest is
        allocated, and its length goes to the prefill server as ``decode_prefix_len``,
        which sends from there (``disaggregation/prefill.py`` ``finalize_bootstrap``:
        ``start_send_idx``). vLLM 0.19.0 ``nixl_connector.py``
        ``get_num_new_matched_tokens``: the decode instance pulls the prompt less its
        locally cached blocks (``actual - num_computed_tokens``; prefix caching is on by
        default). The hit is capped at the prompt: the first token's KV is computed here.
        """
        req = seq.req
        adm = self.requests.admit(req.prompt, req.full, req.modules)
        seq.cached = adm
        hit = min(adm.hit.length - adm.host_tokens, seq.prompt_len - 1)
        seq.hit = hit  # read by DisaggCluster._handoff (the bytes sent) until admission
        self.hit_tokens += hit
        if self.memory.pooled:  # a dedicated cache's hit is apart from the reservation
            self.memory.admitted(seq, hit)

    def queue(self, seq: Seq) -> None:
        """``seq``'s KV has arrived: it queues for the running batch."""
        self.submitted += 1
        self.outstanding_tokens += seq.prompt_len + seq.out_len
        self.scheduler.submit(seq)

    def fits(self, seq: Seq) -> bool:
        # Reserved before the transfer (a pool takes it again after a preemption).
        return self.memory.fits_reserved(seq)

    def admit(self, seq: Seq) -> None:
        self._order += 1
        seq.order = self._order
        looked_up = seq.cached is not None  # by _look_up: its memory is admitted already
        if not looked_up:
            seq.cached = None
        # The prompt's KV arrived; after a preemption it is gone and is recomputed, or
        # loaded back from host memory (offloads) before the step that resumes it.
        seq.hit = 0 if seq.preemptions else seq.prompt_len - 1
        seq.hit_work_s = 0.0
        kept = self.offloaded.pop(id(seq), 0)
        if kept:
            seq.hit = kept
            seq.hit_work_s = self.pricer.hit_work_time(0, kept)
        if not looked_up:
            self.memory.admitted_reserved(seq)
        if seq.preemptions:
            self.preempted_waiting -= 1
            if not self.preempted_waiting and self.on_freed is not None:
                self.on_freed(self)  # reservations resume (see reserve)

    def preempt(self, seq: Seq, decoded: int, kept: int) -> None:
        self.memory.preempted(seq, decoded)
        if seq.cached is not None:  # its hold on the cache goes; it recomputes it all
            self.requests.release(seq.cached)
            seq.cached = None
        if self.offloads:
            # All but the last token's KV to host memory (SGLang's req_to_token[:seqlen - 1]),
            # a copy the step that retracts it waits for.
            self.offloaded[id(seq)] = kept - 1
            self._copy_s += self.pricer.write_back_time(kept - 1, 0)
        else:
            seq.recomputed += kept
        seq.preemptions += 1
        self.preemptions += 1
        self.preempted_waiting += 1

    def write_back_time(self) -> float:
        """Seconds of the offload copies of requests retracted since the last call."""
        seconds, self._copy_s = self._copy_s, 0.0
        return seconds

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        memory, requests = self.memory, self.requests
        for seq in completed:
            memory.completed(seq)
            adm = seq.cached
            if adm is not None:
                # Its KV stays in this worker's cache (SGLang's cache_finished_req into
                # the decode radix tree; vLLM's freed blocks stay hashed).
                requests.insert_at_completion(adm)
                requests.release(adm)
                seq.cached = None
            self.outstanding_tokens -= seq.prompt_len + seq.out_len
            self.reserved -= 1
        if completed and self.on_freed is not None:
            self.on_freed(self)
        return 0


class _StoreView:
    """The shared store's cache structure as each prefill worker's request cache sees it:
    every worker sets the clock to its own admission count (``RequestCache._admit``), so
    the store keeps its own (one tick a lookup) for its recency; it counts the lookups and
    the prompt tokens looked up (the hit rate's denominator)."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._tick = 0
        self.lookups = self.looked_up_tokens = 0

    def set_clock(self, order: int) -> None:
        self._tick += 1
        self._cache.set_clock(self._tick)

    def peek(self, prompt: Any) -> int:
        self.lookups += 1
        self.looked_up_tokens += len(prompt)
        return int(self._cache.peek(prompt))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


class SharedKvTier(HostTier):
    """``--shared-kv-tier``: one KV store under every prefill worker's cache, as
    Mooncake's store serves SGLang's HiCache (``--hicache-storage-backend mooncake``,
    SGLang 0.5.10.post1 ``mem_cache/storage/mooncake_store``): a prefix a worker's GPU
    lacks is looked up there and, if longer, loaded before the prefill can use it; what a
    worker caches is written there too (write-through, off the critical path: HiCache's
    storage backup runs in its own thread). The store is the run's policy's own structure
    (a hybrid's states only at its exact checkpoints, as in any tier: ``RequestCache``).

    A load moves each GPU's share of the hit's KV (and of a hybrid's state) over that
    GPU's NIC (:data:`IB_BW_PER_GPU`, :data:`IB_LATENCY_S`; Mooncake's transfer engine
    reads the store's memory by RDMA), its seconds added to the request's first step,
    not overlapped. The loads do not queue behind the KV transfers on the same NIC.
    The decode workers do not read it (SGLang's decode worker has no HiCache)."""

    def __init__(self, cache: Any, model: ModelSpec, tp: int) -> None:
        self.store = _StoreView(cache)
        super().__init__(self.store, None, "write_through")  # type: ignore[arg-type]
        self.kv_per_token_gpu = float(kv_bytes_per_token_per_gpu(model, Layout(tp)))
        self.state_bytes_gpu = (model.ssm_checkpoint_bytes if model.n_ssm_layers else 0) / tp
        self.link = kv_link("ib", None, EngineConfig())
        self.hits = 0  # admissions that loaded a prefix from the store

    def load_time(self, tokens: int, states: int) -> float:
        gpu_bytes = tokens * self.kv_per_token_gpu + states * self.state_bytes_gpu
        _, seconds = self.link.seconds(gpu_bytes)
        self.loaded_tokens += tokens
        self.load_s += seconds
        self.hits += 1
        return seconds

    def summary(self) -> dict[str, Any]:
        """The summary's ``pools.shared_tier``: capacity, contents, the hit rate."""
        store = self.store
        looked = store.looked_up_tokens
        return {
            **cache_stats(store),
            "capacity_bytes": store.capacity,
            "lookups": store.lookups,
            "requests_hit": self.hits,
            "looked_up_tokens": looked,
            "loaded_tokens": self.loaded_tokens,
            "hit_rate_tokens": self.loaded_tokens / looked if looked else None,
            "load_s": self.load_s,
            **{f"load_{k}": v for k, v in self.link.to_dict().items() if k != "link"},
        }


# The per-request timeline (``pd_timeline.parquet``), in column order.
TIMELINE_COLUMNS = (
    "row",
    "prefill_worker",
    "decode_worker",
    "arrival_s",
    "prefill_end_s",  # the first token, sampled by the prefill worker
    "reserved_s",  # the decode worker's memory reserved
    "transfer_start_s",  # the link free and the memory reserved
    "transfer_end_s",
    "first_decode_s",  # the decode worker's first step done (the second token)
    "completed_s",
    "transfer_bytes",  # all the tp GPUs' shares
    "tail_start_s",  # the last piece's start (transfer_start_s unless chunks went before)
    "early_bytes",  # of transfer_bytes, sent chunk by chunk before the prefill ended
)
_INT_TIMELINE = {"row", "prefill_worker", "decode_worker", "transfer_bytes", "early_bytes"}


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
        p, d = config.prefill_workers, config.decode_workers
        assert p >= 1 and d >= 1 and config.replicas == p + d
        self.n_prefill = p
        self.gpu = gpu  # the prefill pool's (the run's) GPU
        self._decode_pool = decode  # read by _replica_setup while the replicas are built
        self._rank: tuple[EngineConfig, StepPricer, float] | None = None  # a DP rank's
        self.shared_tier: SharedKvTier | None = None  # built with the first prefill worker
        super().__init__(model, pricer, config, workload, on_record)
        self.decode_pool = decode or WorkerPool(config, pricer, self.budget, gpu)
        self.link = link or kv_link(config.kv_link, None, config)
        self.prefill = self.replicas[:p]
        # The engine's hand-off (HANDOFFS): with per-chunk sends each prefill worker's
        # scheduler reports its chunks' ends (_chunk_done) for the requests in _sending.
        self.handoff = handoff_for(config.engine)
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
                rank.prefix_cache = config.decode_prefix_cache
                self.decode.append(rank)
                self._decode_owner.append(r)
        n = len(self.decode)
        self._prealloc: list[deque[tuple[Seq, Event]]] = [deque() for _ in range(n)]
        self._held = [0] * n  # requests sent to each decode unit and not completed
        self._next_decode = 0
        # When each prefill worker's NICs (each attention-DP rank's, under DP) are next free.
        self._link_free = [[0.0] * config.dp_attention for _ in range(p)]
        self.kv_per_token = model.kv_bytes_per_token
        # What the busiest prefill GPU sends and each decode GPU receives per token: its
        # share of the KV heads (all of them where there are fewer KV heads than GPUs, and
        # MLA's latent), as SGLang maps the two pools' ranks (transfer_shares). Under
        # attention DP a request's KV is on its rank's tp / dp GPUs, and SGLang maps the
        # attention TP ranks (disaggregation/common/conn.py: attn_tp_size).
        dpool = self.decode_pool.config
        self.prefill_tp = config.tp // config.dp_attention
        self.decode_tp = dpool.tp // dpool.dp_attention
        send, recv = transfer_shares(model, self.prefill_tp, self.decode_tp)
        self._shares = send, recv
        self.kv_send_per_token_gpu, self.kv_recv_per_token_gpu = float(send), float(recv)
        self.state_bytes = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
        self.timeline: list[tuple[float, ...]] = []
        self.prefilled = self.transferred = 0
        self.transfer_bytes = self.early_bytes = 0

    def _shared_tier(self, i: int, longest: Callable[[], int]) -> HostTier | None:
        """The prefill workers' shared KV store (``--shared-kv-tier``), built once."""
        config = self.config
        if i >= self.n_prefill or not config.shared_kv_tier_bytes:
            return None
        if self.shared_tier is None:
            cache = get_policy(config.policy, **config.policy_options).make_engine_cache(
                self.model, config.shared_kv_tier_bytes, longest, host_tier=True
            )
            self.shared_tier = SharedKvTier(cache, self.model, config.tp)
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

    def _new_replica(self, i: int, workload: Workload, longest: Callable[[], int]) -> Any:
        """Worker ``i``: a replica, or under its pool's attention DP a replica of ranks in
        lockstep (``twin.engine.dp_attention``), each rank of the worker's kind with its
        share of the memory."""
        config, pricer, budget = self._replica_setup(i)
        if config.dp_attention <= 1:
            return super()._new_replica(i, workload, longest)
        from twin.engine.dp_attention import DPStepPricer, RankRecorder, dp_replica

        assert isinstance(pricer, DPStepPricer)

        def rank(recorder: RankRecorder) -> Replica:
            self._rank = (config, recorder, budget / config.dp_attention)
            try:
                return super(DisaggCluster, self)._new_replica(i, workload, longest)
            finally:
                self._rank = None

        return dp_replica(pricer, config.dp_attention, config.engine, rank)

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
        controller deals round-robin; ``twin.engine.dp_attention.DEALERS``)."""
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
        max_running = self.decode_pool.config.max_running
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
        if queue or not worker.reserve(seq, self.decode_pool.config.max_running):
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
            name: rows[:, j].astype(np.int64) if name in _INT_TIMELINE else rows[:, j]
            for j, name in enumerate(TIMELINE_COLUMNS)
        }

    def pools(self, stats: RunStats) -> dict[str, Any]:
        """The summary's ``pools``: each pool's utilisation, queueing and memory, and the
        transfers (latencies over requests arriving after the warm-up)."""
        cols = self.timeline_columns()
        measured = cols["arrival_s"] >= self.config.warmup_s
        p, tp = self.n_prefill, self.config.tp
        mixed = self._decode_pool is not None  # the decode pool has its own hardware
        own_flags = bool(self.config.prefill_engine_flags or self.config.decode_engine_flags)

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
                "gpus": len(reps) * at.config.tp,
                "replicas": [r["replica"] for r in reps],
                "requests": sum(r["requests"] for r in reps),
                "rejected": sum(r["rejected"] for r in reps),
                "steps": sum(r["steps"] for r in reps),
                "utilisation": {"mean": sum(util) / len(util), "min": min(util), "max": max(util)},
                "memory_budget_bytes": at.budget,
            }
            if mixed:  # each pool's hardware (summaries of one-hardware runs unchanged)
                out.update(gpu=at.gpu, tp=at.config.tp, ep=at.config.ep)
                if at.config.dp_attention > 1:
                    out["dp_attention"] = at.config.dp_attention
                if at.profile:  # the decode pool's; the prefill pool's is the summary's
                    out["profile"] = at.profile
            if own_flags:  # each pool's engine flags (--set and its own) and limits
                out.update(
                    engine_flags=at.config.engine_flags,
                    max_running=at.config.max_running,
                    max_batched_tokens=at.config.max_batched_tokens,
                    memory_utilization=at.config.memory_utilization,
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
                + ("'s attention-DP rank" if self.config.dp_attention > 1 else "")
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
        if self.config.decode_prefix_cache:
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


def make_cluster(
    model: ModelSpec,
    pricer: StepPricer,
    config: EngineConfig,
    workload: Workload,
    on_record: Callable[[RequestRecord], None],
    gpu: str | None = None,
    decode: WorkerPool | None = None,
) -> Cluster:
    """The run's cluster: aggregated, or disaggregated when the config names the pools
    (``decode``: the decode pool's own hardware, if it has any)."""
    if config.prefill_workers:  # each pool's workers may be attention-DP replicas
        link = kv_link(config.kv_link, gpu, config)
        return DisaggCluster(model, pricer, config, workload, on_record, link, decode, gpu)
    if config.dp_attention > 1:  # attention ranks in lockstep (twin.engine.dp_attention)
        from twin.engine.dp_attention import DPCluster

        return DPCluster(model, pricer, config, workload, on_record)
    if config.pp > 1:  # pipeline stages and micro-batches (twin.engine.pipeline)
        from twin.engine.pipeline import PipelineCluster

        return PipelineCluster(model, pricer, config, workload, on_record)
    return Cluster(model, pricer, config, workload, on_record)


TIMELINE_FILE = "pd_timeline.parquet"


def write_timeline(cluster: DisaggCluster, path: Path) -> None:
    """Each transferred request's prefill, reservation, transfer and decode times."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = cluster.timeline_columns()
    order = np.argsort(cols["row"], kind="stable")
    pq.write_table(pa.table({k: v[order] for k, v in cols.items()}), path)
