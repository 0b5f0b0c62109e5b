"""SGLang's ``new_token_ratio`` admission control: room kept for running requests' future tokens.

SGLang does not admit a request just because its prompt's pages fit: its
``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``) first
subtracts from the pool's free + evictable tokens an estimate of what running
requests will still decode, ``min(max_new_tokens - len(output_ids),
CLIP_MAX_NEW_TOKENS) * new_token_ratio`` each
(``_get_running_request_total_token_offset``), and each request it admits in
the same batch reserves its extend tokens plus its whole clipped
``max_new_tokens`` (``_update_prefill_budget``); a candidate is admitted only
while ``extend + max_new + page`` stays under what is left (``add_one_req``:
``total_tokens >= rem_total_tokens`` answers ``NO_TOKEN``, and the batch stops).

The ratio moves (``python/sglang/srt/managers/scheduler.py``,
``Scheduler.__init__`` and ``update_running_batch``): it starts at
``init = min(SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness, 1)``,
falls by ``(init - min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` after every
decode step down to ``min = min(init x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1)``,
and after a retraction is set to what the remaining batch shows
(``ScheduleBatch.retract_decode``: ``(decoded + SGLANG_RETRACT_DECODE_STEPS x
reqs) / (sum max_new_tokens + 1)``, at most 1). The constants are SGLang's
defaults (``python/sglang/srt/environ.py``: 0.7, 0.14, 600, 20, 4096;
``server_args.py`` ``schedule_conservativeness`` 1.0).

The twin's requests carry their real output length, used as ``max_new_tokens``
(as a benchmark run with ``ignore_eos`` sets it). Evictable tokens are all
cached pages (the twin does not track which cached pages running requests
lock, which SGLang leaves out): the twin reserves a little less than SGLang
when running requests hold long cached prefixes; the pool's own allocation
stays the hard limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# SGLang's defaults (python/sglang/srt/environ.py; server_args.py for the first).
DEFAULTS: dict[str, float | int] = {
    "schedule_conservativeness": 1.0,
    "sglang_init_new_token_ratio": 0.7,
    "sglang_min_new_token_ratio_factor": 0.14,
    "sglang_new_token_ratio_decay_steps": 600,
    "sglang_retract_decode_steps": 20,
    "sglang_clip_max_new_tokens_estimation": 4096,
}


@dataclass
class NewTokenRatio:
    """The ratio's state and SGLang's admission rule over it (module docstring)."""

    init: float
    min: float
    decay: float
    retract_steps: int
    clip: int
    ratio: float

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> NewTokenRatio:
        """Built from SGLang's settings (``DEFAULTS`` where one is not given)."""
        o = {**DEFAULTS, **options}
        init = min(o["sglang_init_new_token_ratio"] * o["schedule_conservativeness"], 1.0)
        low = min(init * o["sglang_min_new_token_ratio_factor"], 1.0)
        return cls(
            init=init,
            min=low,
            decay=(init - low) / o["sglang_new_token_ratio_decay_steps"],
            retract_steps=int(o["sglang_retract_decode_steps"]),
            clip=int(o["sglang_clip_max_new_tokens_estimation"]),
            ratio=init,
        )

    def decayed(self, steps: int) -> None:
        """``steps`` decode steps ran without a retraction (``update_running_batch``)."""
        if steps > 0:
            self.ratio = max(self.ratio - steps * self.decay, self.min)

    def retracted(self, remaining: Iterable[tuple[int, int]]) -> None:
        """A retraction: the ratio from what the batch left shows, ``(decoded, max_new)`` each.

        ``ScheduleBatch.retract_decode``'s estimate over the requests it kept.
        """
        decoded = reqs = max_new = 0
        for out, total in remaining:
            decoded += out
            max_new += total
            reqs += 1
        self.ratio = min(1.0, (decoded + self.retract_steps * reqs) / (max_new + 1))

    def reserved(self, left: Iterable[int]) -> float:
        """Tokens kept for running requests with ``left`` output tokens still to come each."""
        clip = self.clip
        return sum(min(t, clip) for t in left) * self.ratio

    def candidate(self, extend: int, max_new: int, page: int = 1) -> int:
        """Tokens a candidate must find under what is left: extend + clipped max_new + a page."""
        return extend + min(max_new, self.clip) + page
