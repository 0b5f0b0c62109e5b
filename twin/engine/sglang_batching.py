"""SGLang's batch formation: prefill ("extend") batches ahead of decoding, never mixed.

SGLang's scheduler (``python/sglang/srt/managers/scheduler.py``, release
0.5.1.post1, the same in 0.5.8.post1: ``Scheduler.get_next_batch_to_run``,
``get_new_batch_prefill``, ``update_running_batch``) runs each iteration either a
prefill batch or a decode batch of the running requests, not both: a step mixing
prefill chunks into decodes is ``--enable-mixed-chunk``, off by default
(``server_args.py``; with it the ``sglang`` mode runs the twin's mixed
:class:`~twin.engine.batching.ContinuousBatching` instead):

- **prefill first**: whenever a prefill batch can be formed it runs, and the
  decoding requests wait ("Run prefill first if possible"). The request being
  chunked continues first (``PrefillAdder.add_chunked_req``); then waiting requests
  are taken in order (``PrefillAdder.add_one_req``, ``schedule_policy.py``) while the
  chunk budget (``chunked_prefill_size``, the step's token budget) and the input
  budget (``max_prefill_tokens``, 16,384) last and the memory check passes (SGLang's
  ``new_token_ratio`` reservation, :mod:`twin.engine.admission`, and the pool).
  A request longer than what is left of the chunk budget is cut to it and continues
  in the next prefill batch; one whose input is at least the input budget left waits
  for the next batch unless the batch is empty (``AddReqResult.OTHER``);
- otherwise the running requests decode one token each;
- **batch_is_full**: once a candidate fails the memory check (``NO_TOKEN``) or the
  running cap is reached, no prefill batch is formed until the running batch loses a
  request (a completion or a retraction: ``update_running_batch``), or a prefill batch
  ended with a request still being chunked (the batch filter then leaves it out, which
  shrinks the batch); a chunked request continues whatever the flag;
- ``new_token_ratio`` decays per decode step only, and is reset to its start when the
  server idles (``self_check_during_idle``).

**The ignore-EOS adder** (``schedule_policy.py`` ``PrefillAdder.add_one_req``, 0.5.5 and
0.5.9, wheels read): a request with ``ignore_eos`` on a server whose radix cache is disabled
(``getattr(self.tree_cache, "disable", True)``) goes to ``add_one_req_ignore_eos`` instead.
The twin's requests carry their exact output length as ``max_new_tokens``, as an
``ignore_eos`` client sends it (:mod:`twin.engine.admission`), so the adder is taken
wherever the mode's ``--disable-radix-cache`` is given (scheduler option
``radix_cache_disabled``). It has no input-budget check before an add: waiting prompts are
taken whole while they fit what is left of the chunk budget and the one that crosses it is
cut to it (``trunc_len = self.rem_chunk_tokens``, no page alignment); the input budget is
still spent and read after each add (``budget_state``: ``OTHER`` once it is gone). Its
memory check is its own: ``NO_TOKEN`` when the prompt exceeds the free tokens or what the
running requests' reservation leaves (``min(cur_rem_tokens, rem_total_tokens)``), or when,
the running requests, this batch's and the candidate sorted by output still to come
(``max_new_tokens x 1.0 - len(output_ids)``, unclipped: ``ignore_eos`` takes ratio 1.0),
some suffix of them could not all finish on the free tokens less the prompt plus what the
shorter ones free (``min_free_tokens <= IGNORE_EOS_RESERVE_TOKENS x bs``, the reserve 1
token a request).

A prefill batch is priced as the step of its chunks alone (no decodes); the decoding
requests sit it out, so each finishes one step later. Not modelled: the overlap
scheduler's one-step lag in noticing finished requests.

With ``--enable-mixed-chunk`` (:class:`SGLangMixedBatching`, release 0.5.6.post2, the
same rules in 0.5.10.post1) the batch is formed by the same ``get_new_batch_prefill``
and ``PrefillAdder``, and the running requests then ride in it
(``Scheduler.get_new_batch_prefill``: ``new_batch.mix_with_running(running_batch)``):
the adder is built with ``mixed_with_decode_tokens`` = the running batch's size, which
comes off both budgets (``schedule_policy.py`` ``PrefillAdder.__init__``:
``rem_input_tokens = max_prefill_tokens - mixed_with_decode_tokens``, ``rem_chunk_tokens
= chunked_prefill_size - mixed_with_decode_tokens``), so each running request decodes a
token in the prefill batch instead of sitting it out. ``new_token_ratio`` decays only in
``update_running_batch``, a decode-only step's, as without mixing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from twin.engine.batching import ContinuousBatching
from twin.engine.cost import StepPricer
from twin.engine.seq import Seq
from twin.engine.sim import Environment

if TYPE_CHECKING:
    from twin.engine.scheduler import ReplicaSide

# server_args.py ServerArgs.max_prefill_tokens (0.5.1.post1 to 0.5.8.post1).
MAX_PREFILL_TOKENS = 16384
# schedule_policy.py IGNORE_EOS_RESERVE_TOKENS (0.5.5, 0.5.9): tokens kept per request.
IGNORE_EOS_RESERVE_TOKENS = 1


class SGLangBatching(ContinuousBatching):
    """SGLang's scheduler loop (module docstring): prefill batches first, then decodes."""

    name: ClassVar[str] = "sglang"

    def __init__(
        self,
        env: Environment,
        replica: ReplicaSide,
        pricer: StepPricer,
        max_batched_tokens: int,
        max_running: int,
    ) -> None:
        super().__init__(env, replica, pricer, max_batched_tokens, max_running)
        options = replica.scheduler_options
        self.max_prefill = int(options.get("max_prefill_tokens", MAX_PREFILL_TOKENS))
        self.full = False  # SGLang's running_batch.batch_is_full
        # add_one_req_ignore_eos (module docstring): the radix cache is off.
        self.eos_adder = bool(options.get("radix_cache_disabled", False))

    def submit(self, seq: Seq) -> None:
        """Queue ``seq``; an idle server starts the ratio afresh (``self_check_during_idle``)."""
        ratio = self.ratio
        if ratio is not None and not (self.waiting or self.prefilling or self.decoding):
            ratio.ratio = ratio.init
        super().submit(seq)

    def _can_admit(self) -> bool:
        """The queue's head can join a prefill batch now (never while ``batch_is_full``)."""
        if self.full:
            self._ratio_blocked = False  # no check until the running batch shrinks
            return False
        ok = super()._can_admit()
        if not ok and self.waiting:
            # NO_TOKEN (the ratio or the pool) or the running cap: batch_is_full.
            self.full = True
            self._ratio_blocked = False
        return ok

    def _plan_step(self) -> tuple[list[tuple[Seq, int]], float, int]:
        """A prefill batch (``get_new_batch_prefill``): the chunked request, then admissions;
        the third value: how many running requests decode a token in it (:meth:`_riding`)."""
        batch, decode_ctx = self._riding()
        ratio = self.ratio
        if ratio is not None:
            self._step_reserved = self._step_admitted = 0
        # PrefillAdder(mixed_with_decode_tokens=batch): the riding decodes' tokens come off
        # both budgets (none ride without --enable-mixed-chunk).
        chunk, rem_input = self.max_batched - batch, self.max_prefill - batch
        chunked: list[tuple[Seq, int]] = []
        for seq in self.prefilling:  # the request being chunked (add_chunked_req)
            c = max(0, min(seq.prefill_left, chunk))
            if c:
                chunked.append((seq, c))
            chunk -= c
            rem_input -= c
        if self.prefilling:
            self.full = False  # a chunked request forms a batch whatever the flag
        extra = 0.0
        # The first request joins whatever the input budget left (add_one_req's quick check
        # needs a non-empty can_run_list; budget_state is read after an add), so a spent
        # input budget stops the batch through the check below.
        eos = self.eos_adder
        while chunk > 0 and self.waiting:
            head = self.waiting[0]
            if eos:
                if chunked and rem_input <= 0:
                    break  # budget_state after the last add: OTHER
            elif chunked and self._extend_tokens(head, rem_input) >= rem_input:
                break  # AddReqResult.OTHER: left for the next batch
            if not self._can_admit():
                break
            # cut to the chunk budget: the rest is the chunked request
            work, c = self._admit_chunk(chunked, chunk)
            extra += work
            chunk -= c
            rem_input -= c
        self._step_reserved = self._step_admitted = 0
        seconds = self.pricer.step_time([(c, seq.ctx) for seq, c in chunked], batch, decode_ctx)
        # TODO(issue 30/31): the decoders' gap spans this prefill batch; ITL records only
        # gaps of steps that emit a token, so SGLang's longest gaps are not yet counted.
        return chunked, seconds + extra, batch

    def _riding(self) -> tuple[int, int]:
        """The running requests that decode in a prefill batch, and their keys: none (they
        sit it out; :class:`SGLangMixedBatching` mixes them in)."""
        return 0, 0

    def _ratio_admits(self, seq: Seq) -> bool:
        """``add_one_req``'s memory check, or ``add_one_req_ignore_eos``'s where the radix
        cache is off (module docstring)."""
        if not self.eos_adder:
            return super()._ratio_admits(seq)
        if not self.decoding and not self.prefilling:
            return True  # the pool's own allocation decides (as the base)
        ratio = self.ratio
        assert ratio is not None
        # The twin takes an admitted prompt's pages at admission, so the headroom is
        # already SGLang's cur_rem_tokens (less this batch's extends).
        free = self.memory.headroom_tokens()
        extend = seq.prompt_len + seq.generated  # no cache: the whole prompt
        total = free - ratio.reserved(self._running_left()) - self._step_reserved
        if extend > min(free, total):
            return False  # the early exit: NO_TOKEN
        n = self.step_no
        states = [(f - n, s.prompt_len + s.out_len - (f - n)) for f, _, s in self.decoding]
        # (output still to come, tokens held) of the running, this batch's and the candidate
        for q in (*self.prefilling, seq):
            states.append((q.out_len - q.generated, q.prompt_len + q.generated))
        states.sort(key=lambda st: st[0])
        rem, freed, size = free - extend, 0, len(states)
        for i, (left, occupied) in enumerate(states):
            bs = size - i
            if rem + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return False  # NO_TOKEN
            freed += occupied
        return True

    def _extend_tokens(self, seq: Seq, bound: int) -> int:
        """Tokens ``seq`` would prefill (its uncached part); ``bound`` or less is enough to
        know when its whole length is below it (no cache lookup then)."""
        n = seq.prompt_len + seq.generated
        if n < bound:
            return n
        return n - self.replica.cached_prefix(seq)

    def _apply_chunks(self, chunked: list[tuple[Seq, int]]) -> list[Seq]:
        """A prefill batch ended: decodes sat it out (each finishes a step later)."""
        heap = self.decoding
        if heap:
            # Every finish step moves by one, so the heap's order is kept; the context
            # sum at step n is ctx_base + batch x n, and no key was added this step.
            self.decoding = [(f + 1, o, s) for f, o, s in heap]
            for _, _, s in self.decoding:
                s.start_step += 1
                s.finish_step += 1
            self.ctx_base -= len(heap)
        prefilled = super()._apply_chunks(chunked)
        if len(prefilled) < len(chunked) or any(s.out_len - s.generated == 1 for s in prefilled):
            # The batch filter drops the chunked request (or one finished at its
            # prefill): the running batch shrank, batch_is_full is cleared.
            self.full = False
        return prefilled

    def _complete_due(self) -> list[Seq]:
        done = super()._complete_due()
        if done:
            self.full = False  # update_running_batch: the batch shrank
        return done

    def _preempt_one(self) -> None:
        super()._preempt_one()
        self.full = False  # retract_decode shrinks the batch


class SGLangMixedBatching(SGLangBatching):
    """SGLang's scheduler under ``--enable-mixed-chunk`` (module docstring): its prefill
    batches with the running requests' decodes in them, the decodes' tokens off both
    budgets."""

    name: ClassVar[str] = "sglang-mixed"

    def _riding(self) -> tuple[int, int]:
        """Every running decode rides in the prefill batch (``mix_with_running``)."""
        # Each decode takes one token's pages; retract until they fit (update_running_batch
        # is not called for a mixed batch, but the pool is the limit all the same).
        while self.decoding and not self.memory.grow(len(self.decoding)):
            self._make_room()
        batch = len(self.decoding)
        return batch, self.ctx_base + batch * (self.step_no + 1)

    def _apply_chunks(self, chunked: list[tuple[Seq, int]]) -> list[Seq]:
        """A mixed batch ended: the decodes took their token in it (no shift)."""
        prefilled = ContinuousBatching._apply_chunks(self, chunked)
        if len(prefilled) < len(chunked) or any(s.out_len - s.generated == 1 for s in prefilled):
            self.full = False  # the batch filter drops the chunked request: see the base
        return prefilled
