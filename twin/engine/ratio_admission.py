"""SGLang's ``new_token_ratio`` admission check, as the scheduler applies it step by step.

The ratio itself (its start, decay and retraction estimate) is
:class:`twin.engine.admission.NewTokenRatio`; here the scheduler asks whether
the queue's head fits under the room it leaves, and for how many decode steps
it will not. :class:`RatioAdmission` is a part of
:class:`twin.engine.batching.ContinuousBatching` (its batch state is
:class:`twin.engine.batch_state.BatchState`).
"""

from __future__ import annotations

import numpy as np

from twin.engine.batch_state import BatchState
from twin.engine.seq import Seq


class RatioAdmission(BatchState):
    """The ratio check (:meth:`_ratio_admits`) and the decode run it cuts (:meth:`_ratio_cut`)."""

    def _running_left(self) -> list[int]:
        """Output tokens each running request (admitted before this step) has still to come."""
        n = self.step_no
        left = [e[0] - n for e in self.decoding]  # finish step - now
        earlier = len(self.prefilling) - self._step_admitted
        left.extend(q.out_len - q.generated for q in list(self.prefilling)[:earlier])
        return left

    def _ratio_candidate(self, seq: Seq) -> int:
        """Tokens ``seq`` must find free to pass ``add_one_req``: its extend (what is not
        cached on the GPU), its clipped remaining output, one page
        (``per_req_token_overhead``) and its state slots' bytes in tokens."""
        ratio = self.ratio
        assert ratio is not None
        extend = seq.prompt_len + seq.generated - self.replica.cached_prefix(seq)
        left = seq.out_len - seq.generated
        return ratio.candidate(max(extend, 1), left) + self.memory.state_tokens()

    def _ratio_admits(self, seq: Seq) -> bool:
        """SGLang ``PrefillAdder.add_one_req``: the candidate fits under the room left.

        Room = free + evictable tokens - running requests' remaining outputs x
        ``new_token_ratio`` - what this step's admissions reserved
        (:mod:`twin.engine.admission`). With nothing running the pool's own
        allocation decides (no reservation can be owed to anyone).
        """
        if not self.decoding and not self.prefilling:
            return True
        ratio = self.ratio
        assert ratio is not None
        room = (
            self.memory.headroom_tokens()
            - ratio.reserved(self._running_left())
            - self._step_reserved
        )
        return self._ratio_candidate(seq) < room

    def _ratio_cut(self, k: int) -> int:
        """Steps of a decode run after which the queue's head passes the ratio check.

        SGLang checks every step; while the run decodes, the ratio decays, the
        running requests' remaining outputs shrink and their pages grow, so the
        run stops at the first step where the check (:meth:`_ratio_admits`) would
        pass, and the loop admits there. Remaining outputs past the clip stay
        clipped (``CLIP_MAX_NEW_TOKENS``).
        """
        ratio = self.ratio
        assert ratio is not None
        left = self._running_left()
        batch = len(self.decoding)
        j = np.arange(1, k + 1, dtype=np.float64)
        shrinking = sum(1 for t in left if t <= ratio.clip)
        reserved = np.maximum(ratio.ratio - j * ratio.decay, ratio.min) * (
            sum(min(t, ratio.clip) for t in left) - j * shrinking
        )
        room = self.memory.headroom_tokens() - j * batch - reserved
        ok = np.flatnonzero(room > self._ratio_candidate(self.waiting[0]))
        return int(ok[0]) + 1 if ok.size else k
