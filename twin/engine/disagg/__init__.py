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

from twin.engine.disagg.cluster import DisaggCluster
from twin.engine.disagg.decode_replica import DecodeReplica
from twin.engine.disagg.handoff import (
    AFTER_PREFILL,
    HANDOFFS,
    SGLANG_PER_CHUNK,
    TRTLLM_AFTER_CONTEXT,
    Handoff,
    handoff_for,
)
from twin.engine.disagg.kv_store import SharedKvTier
from twin.engine.disagg.pools import POOL_OPTIONS, RunSettings, WorkerPool, split_pools
from twin.engine.disagg.shares import check_tp_pair, transfer_shares
from twin.engine.disagg.timeline import TIMELINE_COLUMNS, TIMELINE_FILE, write_timeline

__all__ = [
    "AFTER_PREFILL",
    "HANDOFFS",
    "POOL_OPTIONS",
    "SGLANG_PER_CHUNK",
    "TIMELINE_COLUMNS",
    "TIMELINE_FILE",
    "TRTLLM_AFTER_CONTEXT",
    "DecodeReplica",
    "DisaggCluster",
    "Handoff",
    "RunSettings",
    "SharedKvTier",
    "WorkerPool",
    "check_tp_pair",
    "handoff_for",
    "split_pools",
    "transfer_shares",
    "write_timeline",
]
