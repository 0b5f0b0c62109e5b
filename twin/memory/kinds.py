"""What a memory allocator needs to know of a model: its layer kinds and their bytes.

A model's KV memory is described kind by kind (Jenga, Zhang et al., SOSP 2025,
arXiv 2503.18292, sec. 3: heterogeneous embeddings): a *token kind* keeps
``token_bytes`` per token (full attention keeps every token; a sliding-window
kind only the last ``window``), a *state kind* keeps ``state_bytes`` per
request whatever its length (Mamba's recurrent + conv state). Bytes are for
all the kind's layers together: the layers of one kind share one page table,
as vLLM's KV cache groups do (``vllm/v1/core/kv_cache_utils.py``,
``get_kv_cache_groups``: one block id indexes every layer of a group).

:func:`kinds_of` adapts a :class:`~twin.model.ModelSpec` through its per-layer
mixer kinds (``mixer_counts``, ``kv_bytes_per_token_of``, ``state_bytes_of``).
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.errors import TwinError
from twin.model import ModelSpec


@dataclass(frozen=True)
class LayerKind:
    """One kind of layer of a model, with the bytes its cache keeps (module docstring)."""

    name: str  # "attention", "swa", "mamba", ...
    token_bytes: int = 0  # per token, all the kind's layers (token kinds)
    state_bytes: int = 0  # per request, all the kind's layers (state kinds)
    window: int | None = None  # sliding window in tokens (token kinds); None = full

    def __post_init__(self) -> None:
        if (self.token_bytes > 0) == (self.state_bytes > 0):
            raise TwinError(
                f"layer kind {self.name!r}: exactly one of token_bytes and state_bytes is > 0"
            )
        if self.window is not None and (self.window < 1 or self.state_bytes):
            raise TwinError(f"layer kind {self.name!r}: a window needs a token kind, >= 1 token")

    @property
    def is_state(self) -> bool:
        return self.state_bytes > 0

    def tokens_needed(self, tokens: int, page_tokens: int) -> int:
        """Tokens whose KV a request of ``tokens`` tokens must hold now.

        A sliding-window kind needs the last ``window`` tokens; held in whole
        pages, the oldest of them may share a page with tokens already out of
        the window, so one page more is kept (vLLM's ``SlidingWindowManager``
        frees only whole blocks before the window: ``remove_skipped_blocks``).
        """
        if self.window is None or tokens <= self.window:
            return tokens
        return min(tokens, self.window + page_tokens)


# Recurrent mixer kinds of ModelSpec's layer pattern (twin.mixers): one state per request.
STATE_KINDS = ("mamba1", "mamba2", "gdn")


def kinds_of(model: ModelSpec) -> list[LayerKind]:
    """The layer kinds of ``model`` from its per-layer mixer kinds (``ModelSpec.mixer_counts``):
    full attention, sliding-window attention with the model's window, and each recurrent
    kind with its state bytes. The one adapter from a model to the allocators."""
    out = []
    for name, layers in model.mixer_counts.items():
        if not layers:
            continue
        if name in STATE_KINDS:
            out.append(LayerKind(name, state_bytes=model.state_bytes_of(name)))
        else:
            window = model.sliding_window if name == "swa" else None
            out.append(
                LayerKind(name, token_bytes=model.kv_bytes_per_token_of(name), window=window)
            )
    if not out:
        raise TwinError(f"model {model.name!r} holds no KV cache or state")
    return out
