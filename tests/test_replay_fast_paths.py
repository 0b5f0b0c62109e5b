"""The replay's fast paths give exactly what their plain versions give (issue 16).

Each fast path keeps a plain version here as the oracle: the Marconi victims as
numpy passes (the reference's out-of-place ``alpha x normalise(eff) +
normalise(recency)``, ties found by comparing the rest of the rows; the twin's
``r_norm + alpha x f_norm``), where the package runs each rule once, compiled
(``policies.compiled.kernel.victims.reference_victim_row`` and ``twin_victim_row``, shared
by the compiled tree and the Python oracle's), and every match walked from the
root (no remembered matches), on the Python oracle (``marconi_oracle``: the radix
tree, not the compiled live cache). Whole replays under both must
agree on every number: hits and hit nodes per request, the chosen alpha, the
recorded grid scores and the cache counters, for ``marconi``, ``marconi-twin``
and ``oracle`` under every alpha metric, on random traces with ties (a
vocabulary of four tokens), with and without declared modules.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marconi_oracle import (
    FlopAwareEviction,
    ReferenceFlopAwareEviction,
    preorder_key,
    python_replay,
)
from test_policies_props import traces

from twin.cache import PrefixCache
from twin.policies.compiled.kernel import victims
from twin.presets import get_model
from twin.replay import Trace, replay

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
MODELS = [HYBRID, get_model("tiny-transformer")]
# (policy, options) runs: every alpha metric of every policy that tunes alpha.
RUNS = [
    ("marconi", {"bootstrap_multiplier": 2}),
    ("marconi", {"bootstrap_multiplier": 3}),
    ("marconi", {"bootstrap_multiplier": 5}),
    ("marconi-twin", {"bootstrap_multiplier": 2, "alpha_metric": "hit-rate"}),
    ("marconi-twin", {"bootstrap_multiplier": 3, "alpha_metric": "flops"}),
    ("oracle", {"alpha_metric": "hit-rate"}),
    ("oracle", {"alpha_metric": "flops"}),
    ("marconi", {"alpha": 0.7}),
    ("marconi-twin", {"alpha": 1.3}),
]


# ----- the plain versions ------------------------------------------------------------
def plain_normalise(x: np.ndarray) -> np.ndarray:
    """``utils._normalize`` out of place."""
    if len(x) > 1:
        lo, hi = x.min(), x.max()
        if lo != hi:
            return (x - lo) / (hi - lo)
    return np.ones(len(x))


def plain_tied_after(score: np.ndarray, i: int) -> bool:
    return bool((score[i + 1 :] == score[i]).any())


def plain_reference_scores(
    r: np.ndarray, f: np.ndarray, held: np.ndarray, now: int, alpha: float
) -> np.ndarray:
    """``evict_v2``'s scores as the reference writes them (held rows: infinity)."""
    score = plain_normalise(1.0 / (now - r))
    if alpha:
        score = alpha * plain_normalise(f) + score
    score[held] = np.inf  # pinned candidates count in the scaling, never win
    return score


def plain_victim_at(self: Any, now: int) -> Any:
    """``evict_v2``'s victim as the reference writes it."""
    t = self.table
    n = t.n
    if n == t.n_held:
        return None
    score = plain_reference_scores(t.r[:n], t.f[:n], t.held[:n], now, self.alpha)
    i = int(score.argmin())
    if plain_tied_after(score, i):
        tied = np.flatnonzero(score == score[i]).tolist()
        i = min(tied, key=lambda j: preorder_key(t.nodes[j]))
    return t.nodes[i]


def plain_reference_victim(self: Any) -> Any:
    """``ReferenceFlopAwareEviction.choose_victim``: ``evict``'s tick, then the victim."""
    t = self.table
    if t.n == t.n_held:
        return None
    if not self._evict_ticked or t.r[: t.n].max() >= self.now:
        self.now += 1
        self._evict_ticked = True
    return plain_victim_at(self, self.now)


def plain_twin_row(r: np.ndarray, f: np.ndarray, nid: np.ndarray, alpha: float) -> int:
    """``marconi-twin``'s victim row: the least ``r_norm + alpha x f_norm`` (recency
    alone unscaled), an exact tie to the older, then the first created."""
    a = 1.0 / (r.max() - r.min()) if r.max() > r.min() else 0.0
    b = alpha / (f.max() - f.min()) if alpha > 0 and f.max() > f.min() else 0.0
    score = r.copy() if b == 0.0 else (r - r.min()) * a + (f - f.min()) * b
    tied = np.flatnonzero(score == score.min()).tolist()
    return min(tied, key=lambda j: (r[j], nid[j]))


def plain_twin_victim(self: Any) -> Any:
    t = self.table
    if t.n == 0:
        return None
    return t.nodes[plain_twin_row(t.r[: t.n], t.f[: t.n], t.nid[: t.n], self.alpha)]


def plain_match(self: Any, seq: np.ndarray) -> Any:
    return self.tree.match(seq)


def plain_paths() -> ExitStack:
    stack = ExitStack()
    stack.enter_context(mock.patch.object(ReferenceFlopAwareEviction, "victim_at", plain_victim_at))
    stack.enter_context(
        mock.patch.object(ReferenceFlopAwareEviction, "choose_victim", plain_reference_victim)
    )
    stack.enter_context(mock.patch.object(FlopAwareEviction, "choose_victim", plain_twin_victim))
    stack.enter_context(mock.patch.object(PrefixCache, "_match", plain_match))
    return stack


# ----- whole replays -----------------------------------------------------------------
def _summary(result: Any) -> tuple[dict[str, Any], list[int], list[int]]:
    d = result.to_dict()
    d.pop("wall_s")
    per = result.per_request
    return d, per["hit_tokens"].tolist(), per["hit_node"].tolist()


@settings(max_examples=60, deadline=None)
@given(
    trace=traces(),
    run_i=st.integers(0, len(RUNS) - 1),
    model_i=st.integers(0, 1),
    tokens_cap=st.integers(0, 50),
    states_cap=st.integers(0, 6),
    with_modules=st.booleans(),
)
def test_fast_replay_equals_the_plain_one(
    trace, run_i, model_i, tokens_cap, states_cap, with_modules
):
    name, options = RUNS[run_i]
    model = MODELS[model_i]
    capacity = tokens_cap * model.kv_bytes_per_token + states_cap * model.ssm_checkpoint_bytes
    t = Trace.from_pairs(trace)
    if with_modules:  # prefix caches find reuse from the tokens alone: modules change nothing
        t.modules = [np.array([i % 3], np.int64) for i in range(t.num_requests)]
    fast = replay(t, model, capacity, name, options, per_request=True)
    with plain_paths():
        plain = python_replay(t, model, capacity, name, options, per_request=True)
    assert _summary(fast) == _summary(plain)


# ----- the pieces --------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 6), st.sampled_from([0.0, 0.25, 1.0, 1e-9, 3.0, 7.5, 1e6]), st.booleans()
        ),
        min_size=1,
        max_size=40,
    ),
    alpha=st.sampled_from([0.0, 0.1, 0.7, 1.0, 2.0]),
    ahead=st.integers(0, 2),
)
def test_reference_victim_row_is_the_plain_pass(rows, alpha, ahead):
    """The compiled rule picks the plain pass's first minimum, with the same scores, and
    says when another row ties it (stamps from a small range: ties are common)."""
    r = np.array([float(stamp) for stamp, _, _ in rows])
    f = np.array([eff for _, eff, _ in rows])
    held = np.array([h for _, _, h in rows])
    now = int(r.max()) + ahead  # ``ahead`` 0: a stamp reached the clock (``evict`` ticks)
    n, n_held = len(rows), int(held.sum())
    score = np.zeros(n)
    # -1: scored at ``now`` as given (``victim_at``, always after every stamp).
    for ticked in (-1, 0, 1) if ahead else (0, 1):
        row, tied, after = victims.reference_victim_row(
            r, f, held, n, n_held, now, ticked, alpha, score
        )
        if n_held == n:  # no victim: the clock does not tick
            assert (row, after) == (-1, now)
            continue
        ticks = ticked == 0 or (ticked == 1 and r.max() >= now)
        assert after == now + ticks
        expected = plain_reference_scores(r, f, held, after, alpha)
        assert np.array_equal(score, expected)
        assert row == int(expected.argmin())
        assert tied == plain_tied_after(expected, row)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from([0.0, 0.25, 1.0, 1e-9, 3.0, 7.5, 1e6])),
        min_size=1,
        max_size=40,
    ),
    alpha=st.sampled_from([0.0, 0.1, 0.7, 1.0, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_twin_victim_row_is_the_plain_pass(rows, alpha, seed):
    r = np.array([float(stamp) for stamp, _ in rows])
    f = np.array([eff for _, eff in rows])
    nid = np.random.default_rng(seed).permutation(len(rows)).astype(np.int64)
    expected = plain_twin_row(r, f, nid, alpha)
    assert victims.twin_victim_row(r, f, np.arange(len(rows)), nid, len(rows), alpha) == expected
    empty = np.zeros(0)
    assert victims.twin_victim_row(empty, empty, np.zeros(0, np.int64), nid, 0, alpha) == -1
