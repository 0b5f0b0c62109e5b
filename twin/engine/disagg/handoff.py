"""When each engine's P/D connector hands a request from its prefill worker to its
decode worker (:class:`Handoff`, by engine name)."""

from __future__ import annotations

from dataclasses import dataclass

from twin.engine.releases import split_engine


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
