"""What a running request holds in the engine's shared KV pool, by allocator (issue 15).

The shared pool (:class:`twin.cache.pool.SharedPool`) counts bytes; how many
bytes a running request takes for its tokens depends on the allocator the
engine pages memory with. Each allocator here is found by name in
:data:`KV_ALLOCATORS` and answers four questions about one request:

- ``tokens(own, final)``: bytes of its token kinds when it holds ``own`` tokens
  of its own (prompt + output so far, less the cached hit) and will hold at
  most ``final``;
- ``growth``: bytes one more decode token adds;
- ``state``: bytes of its recurrent states (all its state slots);
- ``handed(tokens)``: bytes the prefix cache takes over when ``tokens`` of its
  prompt are cached at the end of its prefill;
- ``most(final)``: the most bytes it can ever hold with ``final`` tokens (a
  request past it is rejected at arrival: admitted, it could never finish).

Allocators:

- ``bytes`` (the default): exact bytes, no page rounding (issue 14's pool). A
  sliding-window kind holds only its last ``window`` tokens plus one page
  (:meth:`twin.memory.LayerKind.tokens_needed`), reserved at admission for the
  request's final length so decode growth stays one number per token; on a
  model without sliding-window layers it is issue 14's arithmetic, byte for byte.
- ``paged``: PagedAttention's one-size pages (:class:`twin.memory.PagedAllocator`,
  the Jenga paper's baseline, vLLM before its hybrid allocator): every kind keeps
  every token (a window is treated as full attention), each kind's tokens fill
  whole pages of the largest kind's page size, states are padded to pages.
- ``jenga``: Jenga's per-kind small pages (:class:`twin.memory.JengaAllocator`):
  each kind in its own small pages, windows kept to ``window`` + one page, states
  padded to their small page when the large page is not their LCM.

The page arithmetic is the allocators' own (``pages_for``, page sizes). What is
left out: the page rounding of decode growth (charged at a page's bytes per
token, so the rounding is counted once, at admission), Jenga's large-page level
(request-aware allocation keeps a request's small pages in few large pages;
``benchmarks/bench_jenga.py`` measures the full two-level packing), and pages
in the prefix cache, which the cache counts in its own bytes whatever the
allocator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from twin.errors import TwinError
from twin.memory.allocators import DEFAULT_PAGE_TOKENS, JengaAllocator, PagedAllocator
from twin.memory.kinds import LayerKind, kinds_of
from twin.model import ModelSpec


def _split(kinds: list[LayerKind]) -> tuple[list[LayerKind], list[LayerKind], list[LayerKind]]:
    """(full token kinds, windowed token kinds, state kinds)."""
    full = [k for k in kinds if not k.is_state and k.window is None]
    windowed = [k for k in kinds if not k.is_state and k.window is not None]
    return full, windowed, [k for k in kinds if k.is_state]


class ByteFootprint:
    """Exact bytes, sliding windows applied (module docstring)."""

    name = "bytes"

    def __init__(self, model: ModelSpec, state_slots: int) -> None:
        # The model's own totals (issue 14's arithmetic); only the windowed share is split off.
        windowed = (
            [k for k in kinds_of(model) if k.window is not None] if model.sliding_window else []
        )
        self.windowed = windowed
        self.growth = model.kv_bytes_per_token - sum(k.token_bytes for k in windowed)
        self.state = state_slots * model.ssm_checkpoint_bytes if model.n_ssm_layers else 0

    def tokens(self, own: int, final: int) -> int:
        if not self.windowed:
            return own * self.growth
        held = sum(
            k.tokens_needed(final, DEFAULT_PAGE_TOKENS) * k.token_bytes for k in self.windowed
        )
        return own * self.growth + held

    def handed(self, tokens: int) -> int:
        return tokens * self.growth

    def most(self, final: int) -> int:
        return self.tokens(final, final) + self.state


class PagedFootprint:
    """PagedAttention's one-size pages, every kind every token (module docstring)."""

    name = "paged"

    def __init__(self, model: ModelSpec, state_slots: int) -> None:
        kinds = kinds_of(model)
        self.pages = PagedAllocator(kinds, 0)
        self.token_kinds = [k for k in kinds if not k.is_state]
        page = self.pages.page_bytes
        # A page's bytes per token of each kind, summed: the page size over the tokens it holds.
        per_page = [page // k.token_bytes for k in self.token_kinds]
        self.growth = math.ceil(sum(Fraction(page, n) for n in per_page))
        self.state = state_slots * sum(
            -(-k.state_bytes // page) * page for k in kinds if k.is_state
        )

    def tokens(self, own: int, final: int) -> int:
        page = self.pages.page_bytes
        return sum(-(-own // (page // k.token_bytes)) * page for k in self.token_kinds)

    def handed(self, tokens: int) -> int:
        return self.tokens(tokens, tokens)

    def most(self, final: int) -> int:
        # Admitted at n0 tokens, it holds pages(n0) + (n - n0) x growth: at most one page
        # per kind more than pages(n), and growth rounds a page's bytes per token up (< 1 B).
        slack = len(self.token_kinds) * self.pages.page_bytes + final
        return self.tokens(final, final) + slack + self.state


class JengaFootprint:
    """Jenga's per-kind small pages, windows applied (module docstring)."""

    name = "jenga"

    def __init__(self, model: ModelSpec, state_slots: int) -> None:
        kinds = kinds_of(model)
        self.pages = JengaAllocator(kinds, 0)
        self.full, self.windowed, states = _split(kinds)
        small = self.pages.small_bytes
        pt = self.pages.page_tokens
        # A full kind's small page is exactly page_tokens tokens (twin.memory.small_page_bytes).
        self.growth = sum(small[k.name] // pt for k in self.full)
        self.state = state_slots * sum(small[k.name] for k in states)

    def _bytes(self, kinds: list[LayerKind], tokens: int) -> int:
        small = self.pages.small_bytes
        return sum(self.pages.pages_for(k, tokens) * small[k.name] for k in kinds)

    def tokens(self, own: int, final: int) -> int:
        return self._bytes(self.full, own) + self._bytes(self.windowed, final)

    def handed(self, tokens: int) -> int:
        return self._bytes(self.full, tokens)

    def most(self, final: int) -> int:
        # Admitted at n0 tokens it holds whole pages for n0, then growth per token:
        # at most one small page per full kind more than at admission.
        slack = sum(self.pages.small_bytes[k.name] for k in self.full)
        return self.tokens(final, final) + slack + self.state


KvFootprint = ByteFootprint | PagedFootprint | JengaFootprint
KV_ALLOCATORS: dict[str, Callable[[ModelSpec, int], KvFootprint]] = {
    c.name: c for c in (ByteFootprint, PagedFootprint, JengaFootprint)
}
# A cache policy whose paper names its allocator gets it unless --kv-allocator says otherwise.
POLICY_ALLOCATOR = {"jenga": "jenga"}
AUTO = "auto"


def allocator_for(name: str, policy: str) -> str:
    """The allocator ``name`` resolves to (``auto``: the policy's, else ``bytes``)."""
    if name == AUTO:
        return POLICY_ALLOCATOR.get(policy, ByteFootprint.name)
    if name not in KV_ALLOCATORS:
        raise TwinError(
            f"--kv-allocator: unknown allocator {name!r}; valid: {AUTO}, {', '.join(KV_ALLOCATORS)}"
        )
    return name


def get_kv_allocator(name: str, model: ModelSpec, state_slots: int = 1) -> KvFootprint:
    """The footprint of running requests of ``model`` under the allocator ``name``."""
    return KV_ALLOCATORS[allocator_for(name, "")](model, state_slots)
