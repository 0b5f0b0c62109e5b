"""Jenga's two-level allocator against PagedAttention's one-size pages (issue 15).

Rules (Jenga, arXiv 2503.18292, sec. 4; ``twin/memory/allocators.py``): the
large page is the LCM of the kinds' small pages; small pages of one kind are
carved from a large page given to that kind; a sliding-window kind keeps only
its window; request-aware allocation hands whole large pages back; a plain
Transformer is unchanged.
"""

from __future__ import annotations

import pytest

from twin.errors import TwinError
from twin.memory import (
    JengaAllocator,
    LayerKind,
    PagedAllocator,
    data_bytes,
    fit_requests,
    kinds_of,
    large_page,
)
from twin.presets import get_model

ATT = LayerKind("attention", token_bytes=6)  # small page 16 x 6 = 96 bytes
SWA = LayerKind("swa", token_bytes=4, window=32)  # small page 64 bytes
MAMBA = LayerKind("mamba", state_bytes=160)


def test_large_page_is_the_lcm_of_the_small_pages():
    large, small = large_page({"attention": 96, "swa": 64, "mamba": 160})
    assert large == 960  # lcm(96, 64, 160)
    assert small == {"attention": 96, "swa": 64, "mamba": 160}
    alloc = JengaAllocator([ATT, SWA, MAMBA], 10 * 960)
    assert alloc.slots == {"attention": 10, "swa": 15, "mamba": 6}


def test_an_oversized_lcm_pads_small_pages_to_the_largest():
    # lcm(97, 1000) = 97,000 > 8 x 1000: the large page is 1000 bytes, attention
    # pages are padded to 1000 // 10 = 100 bytes (10 per large page).
    large, small = large_page({"attention": 97, "mamba": 1000})
    assert (large, small) == (1000, {"attention": 100, "mamba": 1000})


def test_small_pages_of_one_kind_share_large_pages():
    alloc = JengaAllocator([ATT, MAMBA], 480 * 3)  # lcm(96, 160) = 480: 5 or 3 slots
    assert alloc.admit(0, 16 * 3)  # 3 attention pages + 1 state: two large pages
    assert alloc.admit(1, 16 * 2)  # fills the holes: no new large page
    assert alloc.free_large_pages == 1
    assert alloc.reserved_bytes == 2 * 480


def test_fragmentation_arithmetic_against_one_size_pages():
    kinds = [ATT, MAMBA]
    tokens = 20  # attention: 2 pages of 16 tokens; one state
    paged = PagedAllocator(kinds, 10**6)
    # One size: the largest page, 160 bytes; attention pages then hold 160 // 6 = 26 tokens.
    assert paged.page_bytes == 160
    assert paged.pages_for(tokens) == 1 + 1
    jenga = JengaAllocator(kinds, 10**6)
    assert jenga.pages_for(ATT, tokens) == 2 and jenga.pages_for(MAMBA, tokens) == 1
    need = data_bytes(kinds, tokens, 16)
    assert need == 20 * 6 + 160
    # Per request: paged wastes 2 x 160 - 280 = 40 bytes, Jenga 2 x 96 + 160 - 280 = 72,
    # but Jenga's small pages pack densely into large pages: per 960-byte large page
    # paged fits 960 // 320 = 3 requests' pages, Jenga 10 / 2 = 5 requests' attention.
    assert 2 * paged.page_bytes - need == 40


def test_a_window_keeps_only_its_last_tokens():
    alloc = JengaAllocator([SWA], 10**6)
    # 1000 tokens, window 32: the window plus one page of partly stale tokens.
    assert alloc.pages_for(SWA, 1000) == (32 + 16) // 16
    assert alloc.pages_for(SWA, 20) == 2
    # PagedAttention keeps every token.
    assert PagedAllocator([SWA], 10**6).pages_for(1000) == -(-1000 // 16)


def test_request_aware_allocation_grows_a_request_in_its_own_large_page():
    def grow(aware: bool) -> tuple[dict[int, int], int]:
        # lcm(96, 160) = 480: 5 attention slots a large page; states take large page L1.
        alloc = JengaAllocator([ATT, MAMBA], 480 * 6, request_aware=aware)
        assert alloc.admit(0, 16 * 3)  # P: 3 pages in large page L0
        assert alloc.admit(1, 16 * 2)  # A: fills L0 (others' holes before a fresh page)
        assert alloc.admit(2, 16 * 3)  # Q: 3 pages in L2
        alloc.free(0)  # L0 now holds A's 2 pages; L2 opened first among partly used ones
        assert alloc.admit(1, 16 * 5)  # A grows by 3 pages
        pages = dict(alloc.held[1]["attention"])
        alloc.free(1)
        return pages, alloc.free_large_pages

    aware, freed_aware = grow(True)
    blind, freed_blind = grow(False)
    assert aware == {0: 5}  # all of A in its own large page
    assert blind == {2: 2, 0: 3}  # A spread over Q's large page too
    assert freed_aware == freed_blind == 4  # Q keeps L1 (states) and L2


def test_admission_is_all_or_nothing():
    alloc = JengaAllocator([ATT, MAMBA], 480)
    assert alloc.admit(0, 16 * 4) is False  # attention and state need two large pages
    assert not alloc.held and alloc.free_large_pages == 1
    alloc = JengaAllocator([ATT, MAMBA], 960)
    assert alloc.admit(0, 16 * 5)  # attention fills one large page, the state the other
    assert not alloc.admit(1, 16)  # a state slot is left, but no attention page
    assert 1 not in alloc.held and alloc.free_large_pages == 0
    alloc.free(0)
    assert alloc.free_large_pages == 2 and alloc.reserved_bytes == 0


def test_plain_transformer_is_unchanged():
    kinds = kinds_of(get_model("llama-3-8b"))
    pool = 30 * 10**9
    for tokens in (100, 1000, 10000):
        lengths = [tokens] * 100_000
        assert fit_requests(PagedAllocator(kinds, pool), lengths) == fit_requests(
            JengaAllocator(kinds, pool), lengths
        )


@pytest.mark.parametrize("tokens", [4000, 16000])
def test_sliding_window_models_fit_more_requests(tokens):
    per_layer = 2 * 8 * 256 * 2  # Gemma-3-12B: 8 KV heads x 256 x bf16, K and V
    kinds = [
        LayerKind("swa", token_bytes=40 * per_layer, window=1024),
        LayerKind("attention", token_bytes=8 * per_layer),
    ]
    pool = 40 * 10**9
    paged, jenga = PagedAllocator(kinds, pool), JengaAllocator(kinds, pool)
    n_p = fit_requests(paged, [tokens] * 10_000)
    n_j = fit_requests(jenga, [tokens] * 10_000)
    assert n_j > 2 * n_p
    assert jenga.used_data_bytes / pool > 0.95 > paged.used_data_bytes / pool


def test_mamba_hybrid_fits_more_short_requests():
    kinds = kinds_of(get_model("nemotron-h-8b"))
    pool = 40 * 10**9
    lengths = [1000] * 10_000
    assert fit_requests(JengaAllocator(kinds, pool), lengths) > fit_requests(
        PagedAllocator(kinds, pool), lengths
    )


def test_bad_kinds_are_refused():
    with pytest.raises(TwinError, match="exactly one of token_bytes and state_bytes"):
        LayerKind("x")
    with pytest.raises(TwinError, match="a window needs a token kind"):
        LayerKind("x", state_bytes=5, window=3)
    with pytest.raises(TwinError, match="at least one layer kind"):
        JengaAllocator([], 100)
