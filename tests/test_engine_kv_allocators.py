"""The shared pool's allocators (issue 15): exact bytes, PagedAttention pages, Jenga's pages.

Jenga's packing is visible in ``twin simulate``: at the same pool, a model with
sliding-window and full attention runs more requests at once with ``jenga``
than with ``paged``; a plain Transformer runs the same either way.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_helpers import LinearPricer, run, single_turns

from twin.engine import EngineConfig
from twin.engine.config import MemoryConfig
from twin.errors import TwinError
from twin.memory import JengaAllocator, PagedAllocator, kinds_of
from twin.memory.allocators import DEFAULT_PAGE_TOKENS
from twin.memory.footprint import KV_ALLOCATORS, allocator_for, get_kv_allocator
from twin.presets import get_model


def _run(tmp_path, model_name, allocator, pool, n=24, prompt=6000, out=20):
    model = get_model(model_name)
    path = tmp_path / f"w-{n}-{prompt}-{out}.parquet"  # one file: summaries name it
    if not path.exists():
        single_turns(path, [0.0] * n, prompt, out)
    summary, recs = run(
        path,
        LinearPricer(),
        model,
        policy="vanilla",
        kv_allocator=allocator,
        pool_bytes=pool,
    )
    return summary, recs


@pytest.mark.parametrize("model_name", ["gemma-3-4b", "gpt-oss-20b"])
def test_jenga_runs_more_requests_than_paged_pages_at_the_same_pool(tmp_path, model_name):
    model = get_model(model_name)
    pool = 8 * 6020 * model.kv_bytes_per_token  # eight requests, every layer every token
    peaks, ends = {}, {}
    for allocator in ("paged", "jenga"):
        summary, recs = _run(tmp_path, model_name, allocator, pool)
        assert len(recs) == 24 and not any(r.rejected for r in recs)
        rep = summary["replicas"][0]["pool"]
        assert rep["kv_allocator"] == allocator
        peaks[allocator] = rep["peak_running_requests"]
        ends[allocator] = max(r.completed_s for r in recs)
    # PagedAttention keeps every window layer's KV for every token (padded to the
    # largest page): at most the eight the pool was sized for.
    assert peaks["paged"] <= 8
    # Gemma-3: 29 of 34 layers keep 1040 tokens, not 6000 (24 fit, every request);
    # gpt-oss: half the layers keep 144 tokens (about twice as many fit).
    assert peaks["jenga"] >= {"gemma-3-4b": 3, "gpt-oss-20b": 1.8}[model_name] * peaks["paged"]
    assert ends["jenga"] < ends["paged"]  # more running at once: the work ends sooner


def test_a_plain_transformer_runs_the_same_with_either_page_allocator(tmp_path):
    model = get_model("tiny-transformer")
    pool = 6 * 6020 * model.kv_bytes_per_token
    results = {}
    for allocator in ("paged", "jenga"):
        summary, recs = _run(tmp_path, "tiny-transformer", allocator, pool)
        for rep in summary["replicas"]:
            rep["pool"].pop("kv_allocator")
        summary["config"].pop("kv_allocator")
        results[allocator] = (summary, [r.completed_s for r in recs])
    assert results["paged"] == results["jenga"]
    assert results["paged"][0]["replicas"][0]["pool"]["peak_running_requests"] == 6


def test_a_running_request_holds_only_its_window_of_sliding_window_kv(tmp_path):
    """Item 2 of the issue: bytes and jenga keep a window layer's last W tokens + a page;
    paged (the baseline) every token."""
    model = get_model("gemma-3-4b")
    window = model.sliding_window
    swa = model.kv_bytes_per_token_of("swa")
    full = model.kv_bytes_per_token - swa
    prompt, out = 6000, 20
    # The prompt and the decode tokens but the last (its KV is never written).
    exact = (prompt + out - 1) * full + (window + DEFAULT_PAGE_TOKENS) * swa
    peaks = {}
    for allocator in KV_ALLOCATORS:
        summary, _ = _run(tmp_path, "gemma-3-4b", allocator, 10**12, n=1, prompt=prompt, out=out)
        peaks[allocator] = summary["replicas"][0]["pool"]["peak_running_bytes"]
    assert peaks["bytes"] == exact  # was prompt x every layer's bytes
    # 6000 and 1040 tokens are whole 16-token pages; decode growth is charged per token.
    assert peaks["jenga"] == exact
    paged = get_kv_allocator("paged", model)
    assert peaks["paged"] == paged.tokens(prompt, prompt) + (out - 1) * paged.growth > 3 * exact


def test_footprints_follow_the_allocators_page_arithmetic():
    model = get_model("tiny-swa-hybrid")
    kinds = kinds_of(model)
    jenga, paged = JengaAllocator(kinds, 0), PagedAllocator(kinds, 0)
    for tokens in (1, 7, 8, 9, 16, 17, 100, 1000):
        j = get_kv_allocator("jenga", model)
        assert j.tokens(tokens, tokens) + j.state == sum(
            jenga.pages_for(k, tokens) * jenga.small_bytes[k.name] for k in kinds
        )
        p = get_kv_allocator("paged", model)
        assert p.tokens(tokens, tokens) + p.state == paged.pages_for(tokens) * paged.page_bytes
    # Exact bytes on a model without windows: issue 14's arithmetic.
    plain = get_model("tiny-hybrid")
    b = get_kv_allocator("bytes", plain, state_slots=3)
    assert b.tokens(123, 500) == 123 * plain.kv_bytes_per_token == b.handed(123)
    assert b.state == 3 * plain.ssm_checkpoint_bytes and b.growth == plain.kv_bytes_per_token


def test_the_allocator_is_the_policys_unless_named_and_needs_the_shared_pool():
    assert allocator_for("auto", "jenga") == "jenga"
    assert allocator_for("auto", "marconi") == "bytes"
    assert allocator_for("paged", "jenga") == "paged"
    with pytest.raises(TwinError, match="--kv-allocator: unknown allocator 'pages'"):
        EngineConfig(memory=MemoryConfig(shared_pool=True, kv_allocator="pages"))
    with pytest.raises(TwinError, match=r"--kv-allocator: .*--cache-gb auto"):
        EngineConfig(memory=MemoryConfig(kv_allocator="jenga"))
    assert "kv_allocator" not in EngineConfig().to_dict()  # dedicated summaries unchanged


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(["tiny-swa-hybrid", "tiny-swa", "tiny-hybrid", "gemma-3-4b"]),
    allocator=st.sampled_from(sorted(KV_ALLOCATORS)),
    lengths=st.lists(st.integers(1, 5000), min_size=3, max_size=3).map(sorted),
)
def test_a_request_never_holds_more_than_its_admission_bound(model, allocator, lengths):
    """Admitted (again) at n0 tokens and grown to n <= final: within ``most(final)``, the
    bound a request is rejected by at arrival (else it could be preempted forever)."""
    n0, n, final = lengths
    kv = get_kv_allocator(allocator, get_model(model), state_slots=2)
    assert kv.tokens(n0, final) + (n - n0) * kv.growth + kv.state <= kv.most(final)
