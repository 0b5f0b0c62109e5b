"""The grid replays sharing requests equal one independent replay per alpha, exactly.

The exhaustive paths (``marconi_oracle.window_score`` per alpha on the radix tree,
``twin.replay._run_at`` per alpha) are the reference; the shared ones (the compiled
grid, ``marconi_oracle.replay_grid``) must give the same hits, hit nodes, scores,
chosen alpha and cache counters, on random traces with ties (a vocabulary of four
tokens) and every capacity.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marconi_oracle import ORACLES, python_grid_scores, replay_grid, restore, window_score
from test_policies_props import traces
from token_seqs import cache_bytes, chat_sessions, full_sequences

from twin.cache import serve
from twin.policies import policy_class
from twin.policies.alpha_tuning import (
    ALPHA_GRID,
    AlphaTuner,
    best_alpha,
    grid_scores,
    run_scores,
)
from twin.policies.compiled import CompiledTrace, GridStream, compiled_grid_runs
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.replay import Trace, _run_at, replay

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
MODELS = [HYBRID, get_model("tiny-transformer")]
TUNED = ("marconi", "marconi-twin")


def _start_snapshot(name: str, model, capacity: int, warm) -> object:
    """A cache after serving ``warm`` at alpha 0 (a mid-run start, like marconi-twin's)."""
    cache = make_cache(ORACLES[name](alpha=0.0), model, capacity)
    for full, n in full_sequences(warm):
        serve(cache, full[:n], full)
    return cache.snapshot()


@settings(max_examples=60, deadline=None)
@given(
    trace=traces(),
    warm=st.integers(0, 10),
    name_i=st.integers(0, 1),
    model_i=st.integers(0, 1),
    tokens_cap=st.integers(0, 50),
    states_cap=st.integers(0, 6),
)
def test_grid_replay_serves_like_one_replay_per_alpha(
    trace, warm, name_i, model_i, tokens_cap, states_cap
):
    name, model = TUNED[name_i], MODELS[model_i]
    capacity = cache_bytes(tokens_cap, states_cap, model)
    snap = _start_snapshot(name, model, capacity, trace[:warm])
    window = full_sequences(trace[warm:]) or full_sequences(trace)
    cls = ORACLES[name]
    for alpha, cache, served in replay_grid(
        ALPHA_GRID, lambda a: cls(alpha=a), model, window, start=snap
    ):
        alone = restore(snap, model, cls(alpha=alpha))
        hits = [serve(alone, full[:n], full) for full, n in window]
        assert served == [(h.length, getattr(h.node, "nid", -1), h.recompute) for h in hits], alpha
        assert sorted(n.nid for n in cache.tree.nodes()) == sorted(
            n.nid for n in alone.tree.nodes()
        )
        assert (cache.evictions, cache.used_bytes) == (alone.evictions, alone.used_bytes)
    for metric in ("reference", "hit-rate", "flops"):
        fast = grid_scores(snap, model, window, policy_class(name), metric)
        assert fast == {a: window_score(snap, model, window, a, cls, metric) for a in ALPHA_GRID}
        assert fast == python_grid_scores(snap, model, window, cls, metric)


@settings(max_examples=30, deadline=None)
@given(
    trace=traces(),
    name_i=st.integers(0, 1),
    multiplier=st.sampled_from([2, 3, 5]),
    tokens_cap=st.integers(3, 50),
    states_cap=st.integers(1, 6),
)
def test_tuned_policies_choose_the_exhaustive_alpha(
    trace, name_i, multiplier, tokens_cap, states_cap
):
    name = TUNED[name_i]
    capacity = cache_bytes(tokens_cap, states_cap, HYBRID)
    t = Trace.from_pairs(trace)
    options = {"bootstrap_multiplier": multiplier}
    fast = replay(t, HYBRID, capacity, name, options, per_request=True)

    def exhaustive(self, model):
        """Each alpha alone on the radix tree, from the live cache's own snapshot."""
        snap, window, cls, metric = self.snapshot, self.window, ORACLES[name], self.metric
        return {a: window_score(snap, model, window, a, cls, metric) for a in ALPHA_GRID}

    with mock.patch.object(AlphaTuner, "grid", exhaustive):
        slow = replay(t, HYBRID, capacity, name, options, per_request=True)
    assert fast.details.get("alpha_source") == slow.details.get("alpha_source")
    a, b = fast.to_dict(), slow.to_dict()
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    for key in ("hit_tokens", "hit_node"):
        assert np.array_equal(fast.per_request[key], slow.per_request[key])


@settings(max_examples=40, deadline=None)
@given(
    trace=traces(),
    model_i=st.integers(0, 1),
    metric=st.sampled_from(["hit-rate", "flops"]),
    tokens_cap=st.integers(0, 50),
    states_cap=st.integers(0, 6),
)
def test_oracle_equals_one_full_replay_per_alpha(trace, model_i, metric, tokens_cap, states_cap):
    model = MODELS[model_i]
    capacity = cache_bytes(tokens_cap, states_cap, model)
    t = Trace.from_pairs(trace)
    options = {"alpha_metric": metric}
    fast = replay(t, model, capacity, "oracle", options, per_request=True)
    runs = [_run_at(t, model, capacity, "oracle", True, a) for a in ALPHA_GRID]
    scores = [r.flops_saved if metric == "flops" else r.hit_tokens for r in runs]
    best = max(range(len(ALPHA_GRID)), key=lambda i: (scores[i], -ALPHA_GRID[i]))
    assert fast.alpha == ALPHA_GRID[best]
    assert fast.details["grid"] == {str(a): s for a, s in zip(ALPHA_GRID, scores, strict=True)}
    a, b = fast.to_dict(), runs[best].to_dict()
    for d in (a, b):
        d.pop("wall_s"), d.pop("details"), d.pop("alpha")
    assert a == b
    for key in ("hit_tokens", "hit_node"):
        assert np.array_equal(fast.per_request[key], runs[best].per_request[key])


def _sessions(seed: int, sessions: int = 24, turns: int = 5) -> list[tuple[np.ndarray, int]]:
    """Chat sessions behind two long system prompts (edges past the walk's blocks of 16
    tokens), interleaved, each turn extending the session's last full sequence."""
    return chat_sessions(seed, sessions, turns, 2, 40, (30, 80, 1, 40, 1, 30))


@pytest.mark.parametrize("name", TUNED)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_grid_on_threads_is_the_exhaustive_grid(name, threads, seed):
    """The grid's alphas after the shared requests, replayed side by side on ``threads``
    threads (one per core: ``policies.compiled.cores``), give each alpha exactly what its
    own replay alone gives (hits, hit nodes, victims, counters) and what the oracle's
    radix tree gives alone (hits, scores), so the chosen alpha is the exhaustive grid's."""
    window = _sessions(seed)
    tokens = sum(len(full) for full, _ in window)
    capacity = cache_bytes(tokens // 12, len(window) // 8, HYBRID)
    cls, oracle = policy_class(name), ORACLES[name]
    snap = _start_snapshot(name, HYBRID, capacity, [])
    with mock.patch("twin.policies.compiled.cores", return_value=threads):
        runs = compiled_grid_runs(HYBRID, capacity, window, ALPHA_GRID, cls, snap)
    assert [run.alpha for run in runs] == list(ALPHA_GRID)
    assert runs[0].counters["evictions"] > 0
    scores = _each_alpha_alone(runs, capacity, window, cls, oracle, snap)
    assert len({run.victims[:50] == runs[0].victims[:50] for run in runs}) == 2  # alphas differ
    grid = grid_scores(snap, HYBRID, window, cls, "hit-rate")
    assert grid == scores and best_alpha(grid) == best_alpha(scores)


@pytest.mark.parametrize("name", TUNED)
@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("warm", [0, 6])
def test_the_grid_streamed_as_requests_arrive_is_the_grid(name, background, warm):
    """The window's replays served in batches as its requests arrive (on a thread, or at
    the tuning), from an empty or a warm snapshot, are the grid's of the whole window
    (hits, hit nodes, victims, counters of every alpha): when a request is served moves
    nothing, as the tuner relies on (``AlphaTuner.record``)."""
    window = _sessions(warm)
    tokens = sum(len(full) for full, _ in window)
    capacity = cache_bytes(tokens // 12, len(window) // 8, HYBRID)
    cls = policy_class(name)
    earlier = [(full[:n], full[n:]) for full, n in _sessions(warm + 7)[:warm]]
    snap = _start_snapshot(name, HYBRID, capacity, earlier)
    whole = compiled_grid_runs(HYBRID, capacity, window, ALPHA_GRID, cls, snap)
    assert whole[0].counters["evictions"] > 0
    with mock.patch("twin.policies.compiled.STREAM_BATCH", 5):
        stream = GridStream(
            HYBRID, capacity, CompiledTrace(len(window), snap), ALPHA_GRID, cls, background
        )
        for full, n in window:
            stream.add(full, n)
        assert stream.runs() == whole
    _assert_agreements_true(stream)


@pytest.mark.parametrize("name", TUNED)
@pytest.mark.parametrize("seed", [0, 2])
def test_a_copy_at_the_first_eviction_reads_nothing_it_did_not_copy(name, seed):
    """``kernel.replay.copy`` copies only the node columns, candidate rows and victims its
    replay wrote and leaves the rest of each array uninitialised: with that rest filled
    with garbage, every alpha's replay from its copy is still its own replay alone (hits,
    hit nodes, victims, counters), and the oracle's tree gives the same hits and scores,
    so the chosen alpha is the exhaustive grid's."""
    from twin.policies.compiled.kernel import replay as kernel_replay
    from twin.policies.compiled.kernel import state as kernel_state

    copy = kernel_replay.copy
    poisoned = []

    def poisoned_copy(st, alpha):
        out = copy(st, alpha)
        sc = out[1]
        used, ncand = sc[kernel_state.S_NEXT], sc[kernel_state.S_NCAND]
        out[0][:, used:] = -7
        out[4][ncand:], out[5][ncand:] = np.nan, np.nan
        out[6][ncand:], out[7][ncand:] = True, -7
        out[10][sc[kernel_state.S_EVICTIONS] :] = -7
        out[11][:] = np.nan
        poisoned.append(alpha)
        return out

    window = _sessions(seed)
    tokens = sum(len(full) for full, _ in window)
    capacity = cache_bytes(tokens // 12, len(window) // 8, HYBRID)
    cls, oracle = policy_class(name), ORACLES[name]
    snap = _start_snapshot(name, HYBRID, capacity, [])
    with mock.patch.object(kernel_replay, "copy", poisoned_copy):
        runs = compiled_grid_runs(HYBRID, capacity, window, ALPHA_GRID, cls, snap)
    assert poisoned == list(ALPHA_GRID[1:])
    scores = _each_alpha_alone(runs, capacity, window, cls, oracle, snap)
    assert best_alpha(run_scores(runs, HYBRID, "hit-rate")) == best_alpha(scores)


def _each_alpha_alone(runs, capacity, window, cls, oracle, snap) -> dict[float, float]:
    """Assert every alpha's run of the grid is that alpha's compiled replay alone and gives
    the oracle tree's hits; return the oracle's window score of each alpha."""
    scores = {}
    for run in runs:
        (alone,) = compiled_grid_runs(HYBRID, capacity, window, (run.alpha,), cls, snap)
        assert run == alone, run.alpha
        tree = restore(snap, HYBRID, oracle(alpha=run.alpha))
        assert run.hits == [serve(tree, full[:n], full).length for full, n in window]
        scores[run.alpha] = window_score(snap, HYBRID, window, run.alpha, oracle, "hit-rate")
    return scores


def _assert_agreements_true(stream: GridStream) -> None:
    """What the replays learned of each request (``kernel.tree._agreement``) is so: the request
    and the creator agree on their first ``L`` tokens, and where exact, not on the next."""
    t, learned = stream.trace, 0
    for i in range(t.count):
        row = stream.known[i]
        for base, fact in zip(row[0::2].tolist(), row[1::2].tolist(), strict=True):
            if not base:
                continue
            agreed, s = fact >> 1, int(t.starts[i])
            assert np.array_equal(t.buf[s : s + agreed], t.buf[base - 1 : base - 1 + agreed])
            if fact & 1:
                assert t.buf[s + agreed] != t.buf[base - 1 + agreed]
            learned += 1
    assert learned > 0


@pytest.mark.parametrize("name", TUNED)
def test_a_tuned_replay_with_its_grid_in_the_background_is_the_same(name):
    """A tuned policy whose grid is streamed on a thread (where ``cores`` says another
    is free) reports what it reports with the grid replayed at the tuning alone."""
    window = _sessions(3)
    tokens = sum(len(full) for full, _ in window)
    capacity = cache_bytes(tokens // 12, len(window) // 8, HYBRID)
    t = Trace.from_pairs([(full[:n], full[n:]) for full, n in window])
    options = {"bootstrap_multiplier": 3}
    out = []
    for threads in (1, 4):
        with (
            mock.patch("twin.policies.compiled.cores", return_value=threads),
            mock.patch("twin.policies.compiled.STREAM_BATCH", 4),
        ):
            res = replay(t, HYBRID, capacity, name, options, per_request=True)
        assert res.details["alpha_source"] == "tuned"
        d = res.to_dict()
        d.pop("wall_s")
        out.append((d, res.per_request["hit_tokens"].tolist()))
    assert out[0] == out[1]


def _grid_hits(name: str, seed: int) -> list[list[int]]:
    window = _sessions(seed)
    tokens = sum(len(full) for full, _ in window)
    capacity = cache_bytes(tokens // 12, len(window) // 8, HYBRID)
    runs = compiled_grid_runs(HYBRID, capacity, window, ALPHA_GRID, policy_class(name))
    return [run.hits for run in runs]


def test_a_forked_worker_replays_the_grid_after_its_parent_did():
    """A process forked after its parent replayed a grid on threads (a sweep's worker,
    ``twin.workers``) replays one too: the parent's thread pools come without their
    threads, and a pool with idle threads on record starts none (work sent to it waited
    forever); the child makes its own pools (``compiled._forget_pools``)."""
    from twin.workers import guarded_executor

    with mock.patch("twin.policies.compiled.cores", return_value=2):
        parent = _grid_hits("marconi", 0)
        with guarded_executor(1) as pool:
            child = pool.submit(_grid_hits, "marconi", 0).result(timeout=120)
    assert child == parent


def test_an_error_in_the_background_replay_is_raised_at_the_tuning():
    """A batch that fails on the stream's thread is not lost: :meth:`GridStream.runs`
    (the tuning) raises it, and no later batch is started after it."""
    window = _sessions(0)
    tokens = sum(len(full) for full, _ in window)
    capacity = cache_bytes(tokens // 12, len(window) // 8, HYBRID)
    calls = []

    def broken(self, batch):
        calls.append(len(batch))
        raise RuntimeError("replay failed")

    with (
        mock.patch("twin.policies.compiled.STREAM_BATCH", 5),
        mock.patch.object(GridStream, "_serve", broken),
    ):
        stream = GridStream(
            HYBRID, capacity, CompiledTrace(len(window)), ALPHA_GRID, policy_class("marconi"), True
        )
        for full, n in window:
            stream.add(full, n)
        with pytest.raises(RuntimeError, match="replay failed"):
            stream.runs()
    assert len(calls) == 1
