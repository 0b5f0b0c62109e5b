"""Fast prefill-FLOP counts for the cache's hot paths.

``ModelSpec.prefill_flops`` builds a dict per call; replays need it several
times per request (FLOPs saved by a hit, FLOP efficiency of every changed
node). Every layer kind's prefill FLOPs are ``linear x n_new`` except the
attention score/value products, which are ``quad x attended keys`` (MLA's prefill form
included: its full-attention keys join ``quad_full``). A model
may mix full-attention layers with sliding-window ones (gpt-oss, Gemma-3): their
keys differ once the context passes the window, so each group has its own
coefficient (``quad_full`` over causal keys, ``quad_window`` over keys capped at
``sliding_window``), all read off the model. Every term is an integer below
2**53 for realistic prompts, so the floats equal the model's own total exactly.
The decomposition is checked against the model at construction; if the model
ever grows a term of another shape, this falls back to calling it.
"""

from __future__ import annotations

from twin.mixers import FULL_KV_KINDS
from twin.model import ModelSpec, keys_upto

# (n_new, n_cached) pairs at which the decomposition is verified.
_PROBES = ((1, 0), (7, 0), (3, 5), (1000, 0), (333, 4000), (5000, 70000))


class PrefillFlops:
    """``total(n_new, n_cached)`` equal to ``model.prefill_flops(n_new, n_cached).total``."""

    def __init__(self, model: ModelSpec) -> None:
        self.model = model
        self.window = model.sliding_window
        one = model.prefill_flops(1, 0).total
        # One more cached token adds exactly one attended key to the new token, in a
        # full-attention layer and in a window of 2 or more (a window of 1 has no
        # such term: its one key per token is then part of ``linear``).
        base, more = model.prefill_flops_by_mixer(1, 0), model.prefill_flops_by_mixer(1, 1)
        self.quad_full = float(sum(more.get(k, 0) - base.get(k, 0) for k in FULL_KV_KINDS))
        self.quad_window = float(more.get("swa", 0) - base.get("swa", 0))
        self.linear = one - self.quad_full - self.quad_window
        self.exact = all(
            abs(self._formula(n, c) - model.prefill_flops(n, c).total)
            <= 1e-9 * max(1.0, model.prefill_flops(n, c).total)
            for n, c in _PROBES
        )

    def _formula(self, n_new: int, n_cached: int) -> float:
        out = self.linear * n_new
        if self.quad_full:
            out += self.quad_full * (keys_upto(n_cached + n_new, None) - keys_upto(n_cached, None))
        if self.quad_window:
            w = self.window
            out += self.quad_window * (keys_upto(n_cached + n_new, w) - keys_upto(n_cached, w))
        return out

    def recurrent(self, tokens: int) -> float:
        """FLOPs of the recurrent (SSM) layers alone over ``tokens`` tokens: what a prompt
        module reused out of prefix position still costs them (``Hit.recompute``)."""
        return float(self.model.prefill_flops(tokens, 0)["ssm"]) if tokens else 0.0

    def total(self, n_new: int, n_cached: int = 0) -> float:
        """FLOPs of prefilling ``n_new`` tokens after ``n_cached`` cached ones (all layers)."""
        if self.exact:
            return self._formula(n_new, n_cached)
        return self.model.prefill_flops(n_new, n_cached).total
