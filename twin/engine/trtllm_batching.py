"""TensorRT-LLM's batch formation: in-flight batching with whole context requests.

TensorRT-LLM's PyTorch executor (release 1.0, ``tensorrt_llm/_torch/pyexecutor/
scheduler.py``: the capacity scheduler, then the micro-batch scheduler, whose C++
original is ``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp``) forms each
iteration's batch as follows:

- **generation first**: every running request in its generation phase adds one
  token to the batch (its ``beam_width``), within ``max_num_tokens``;
- **context requests whole**: then waiting requests, first come first served, each
  with its whole remaining context (``get_context_remaining_length``) while it fits
  in what is left of ``max_num_tokens``; the first that does not fit stops the scan
  (``break``: no skipping). Chunking a context across iterations is
  ``enable_chunked_prefill``, off by default (``TorchLlmArgs``); a context longer
  than ``max_num_tokens`` on its own is chunked here rather than refused (TensorRT-LLM
  refuses such a prompt without chunking);
- ``max_batch_size`` bounds the requests in flight (the twin's ``max_running``);
- the capacity scheduler's default policy ``GUARANTEED_NO_EVICT`` admits a request
  only when the KV cache holds its whole prompt and ``max_tokens`` next to what the
  running requests may still need, so a started request is never paused: the mode
  sets the reservation of :mod:`twin.engine.admission` with the ratio held at 1 (the
  running requests' whole remaining outputs, unclipped).

- **batch waiting** (``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio`` of
  ``--extra_llm_api_options``, both off by default; ``PyExecutor._schedule`` and
  ``_waiting_requests`` of ``tensorrt_llm/_torch/pyexecutor/py_executor.py``, read in
  two stored versions of the 1.x line, and ``scheduler/scheduler.py``'s
  ``schedule_step`` of a later one, which keeps the rule): without attention DP, when
  an iteration has both context and generation requests scheduled, the contexts run
  only if the executor has already held contexts back ``batch_wait_timeout_iters``
  iterations in a row, or the scheduled tokens (each context's tokens, each generation
  request's ``1 + draft`` tokens; the twin counts one, as its budget does) reach
  ``batch_wait_max_tokens_ratio x max_num_tokens``; otherwise the iteration runs the
  generation requests alone and the count goes up by one (it is reset when contexts
  run). With no generation request the contexts never wait.

- **the overlap scheduler** (``disable_overlap_scheduler``, ``TorchLlmArgs``, default
  false; aiconfigurator's generated aggregated deployments write ``false`` too,
  ``generator/rule_plugin/benchmark/trtllm.rule`` of ``aiconfigurator`` 0.12.0):
  ``PyExecutor._executor_loop_overlap`` (``tensorrt_llm/_torch/pyexecutor/py_executor.py``
  of the 1.0 line, read in NVIDIA/TensorRT-LLM's stored tree) fetches new requests
  (``_fetch_new_requests``) and schedules iteration n+1 right after it has launched
  forward n and waited for forward n-1's results (``_process_previous_batch``), so the
  batch of step n+1 is fixed when step n starts on the GPU. A request that arrives while
  step n runs is fetched for step n+2 at the earliest: it waits out the step in flight
  and the whole next one. With nothing else to run the loop blocks on the queue and
  takes it at once. Option ``overlap_scheduler`` (``--set overlap_scheduler=true``, off
  by default in the twin; the scorer sets it for TensorRT-LLM's aggregated rows,
  ``twin.validate.silicon.deployment``). The other half of the overlap, a finished
  request's one wasted decode token (it is scheduled once more before its end is
  seen), is not modelled.

Defaults (``BuildConfig``, used by the PyTorch backend's ``TorchLlmArgs`` in 1.0):
``max_num_tokens`` 8,192, ``max_batch_size`` 2,048. Not modelled: KV block reuse (prefix
caching).
"""

from __future__ import annotations

from typing import Any, ClassVar

from twin.engine.batching import ContinuousBatching
from twin.engine.seq import Seq


class TRTLLMBatching(ContinuousBatching):
    """TensorRT-LLM's in-flight batching (module docstring): decodes, then whole contexts."""

    name: ClassVar[str] = "trtllm"
    lag_option: ClassVar[str | None] = "overlap_scheduler"  # module docstring

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = self.replica.scheduler_options
        self.wait_iters = int(options.get("batch_wait_timeout_iters", 0))
        self.wait_ratio = float(options.get("batch_wait_max_tokens_ratio", 0.0))
        self._waited = 0  # PyExecutor.batch_wait_iters_count
        self._held_at = -1  # the step whose contexts the rule held back (-1: none)
        self._decided_at = -1  # the step the rule last decided for

    def _can_admit(self) -> bool:
        if self._overlap_holds():  # before the batch-waiting count below moves
            return False
        if (self.wait_iters or self.wait_ratio) and self.decoding and self.waiting:
            n = self.step_no
            if self._decided_at != n:  # once an iteration (``_schedule``)
                self._decided_at = n
                if self._holds():
                    self._waited += 1
                    self._held_at = n
                else:
                    self._waited = 0
            if self._held_at == n:
                return False
        return super()._can_admit()

    def _holds(self) -> bool:
        """Whether ``_waiting_requests`` holds this iteration's contexts back: the
        timeout not reached and the scheduled tokens short of the ratio's share."""
        if self._waited >= self.wait_iters:
            return False
        # A generation request's tokens as the step's budget counts them here (one each;
        # TensorRT-LLM adds its draft tokens, which the twin's budget does not hold).
        gen = len(self.decoding)
        budget = self.max_batched - gen
        tokens = gen
        for seq in self.waiting:  # the contexts the micro-batch scheduler would take
            need = seq.prompt_len + seq.generated
            if need > budget and tokens > gen:
                break
            tokens += need
            budget -= need
        return tokens < self.wait_ratio * self.max_batched

    def _hold_cut(self, k: int) -> int:
        # Held back: the rule decides again at the next iteration (an arrival may reach
        # the ratio, the count may reach the timeout), so the run is one step.
        if self._held_at == self.step_no:
            return 1
        return super()._hold_cut(k)  # a head the overlap scheduler holds

    def _admissions(self, chunked: list[tuple[Seq, int]], budget: int) -> float:
        """Waiting contexts whole while they fit what is left of the budget (after the
        generation tokens and a context longer than the whole budget)."""
        extra = 0.0
        while budget > 0 and self.waiting:
            need = self._context_tokens(self.waiting[0], budget)
            if budget < need <= self.max_batched:
                break  # the whole context does not fit what is left: it waits
            if not self._can_admit():
                break
            work, c = self._admit_chunk(chunked, budget)
            extra += work
            budget -= c
        return extra

    def _context_tokens(self, seq: Seq, budget: int) -> int:
        """Tokens of ``seq``'s context still to compute (its uncached part); its whole
        length when that is within ``budget`` (no cache lookup needed then)."""
        n = seq.prompt_len + seq.generated
        if n <= budget:
            return n
        return max(1, n - self.replica.cached_prefix(seq))
