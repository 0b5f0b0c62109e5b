"""TensorRT-LLM's context balance across attention-DP ranks (``twin.engine.dp_attention``).

**TensorRT-LLM holds contexts back across ranks** where ``attention_dp_config``
says ``enable_balance`` (:class:`ADPBalance`, options ``attention_dp_balance``,
``attention_dp_timeout_iters``, ``attention_dp_batching_wait_iters`` of the
``trtllm`` mode): an iteration runs its ranks' context requests only when every
rank has one and room for it, or when the hold has lasted ``timeout_iters``
iterations, or some rank has no generation request.

Not modelled: TensorRT-LLM's ``attention_dp_enable_balance`` delays without the option.
"""

from __future__ import annotations

from collections.abc import Sequence

from twin.engine.config import EngineConfig
from twin.engine.dp_pricing import SyncPricer
from twin.engine.modes_trtllm import (
    ADP_BATCHING_WAIT_ITERS,
    ADP_TIMEOUT_ITERS,
    TRTLLM_ADP_BALANCE,
)


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


__all__ = [
    "ADPBalance",
    "adp_balance",
]
