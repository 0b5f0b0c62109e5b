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

Defaults (``BuildConfig``, used by the PyTorch backend's ``TorchLlmArgs`` in 1.0):
``max_num_tokens`` 8,192, ``max_batch_size`` 2,048. Not modelled: the overlap
scheduler (a result processed one iteration late), KV block reuse (prefix caching).
"""

from __future__ import annotations

from typing import ClassVar

from twin.engine.batching import ContinuousBatching
from twin.engine.seq import Seq

# BuildConfig / TorchLlmArgs defaults in TensorRT-LLM 1.0.
MAX_NUM_TOKENS = 8192
MAX_BATCH_SIZE = 2048


class TRTLLMBatching(ContinuousBatching):
    """TensorRT-LLM's in-flight batching (module docstring): decodes, then whole contexts."""

    name: ClassVar[str] = "trtllm"

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
