"""``marconi`` and ``sglang+`` against the rules of the Marconi authors' code.

The reference below is a brute-force re-statement of github.com/ruipeterpan/marconi
(``radix_cache_hybrid.py``: ``match_prefix``, ``insert``, ``evict_v2``;
``utils.py``: the FLOP formulas and ``_normalize``), written for these tests:
lists of tokens, a logical clock, every candidate scored by a tree walk.
"""

from __future__ import annotations

import numpy as np
import pytest
from marconi_oracle import tree_policy
from token_seqs import BIG

import twin.policies.alpha_tuning as tuning
from twin.cache import serve
from twin.policies.alpha_tuning import ALPHA_GRID, best_alpha
from twin.policies.structures import make_cache
from twin.presets import get_model

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")


# ----- the reference, brute force ----------------------------------------------------
def ref_attn(n, d):
    return 8 * n * d**2 + 4 * n**2 * d


def ref_mlp(n, d):
    return 16 * n * d**2


def ref_mamba(n, d, s):
    return 12 * n * d**2 + 16 * n * d * s + 10 * n * d


def ref_saved(model, hit):
    d, s = model.d_model, model.ssm_d_state
    return (
        model.n_ssm_layers * ref_mamba(hit, d, s)
        + model.n_attention_layers * ref_attn(hit, d)
        + model.n_mlp_layers * ref_mlp(hit, d)
    )


def ref_normalize(values):
    if len(values) > 1 and min(values) != max(values):
        lo, hi = min(values), max(values)
        return [(v - lo) / (hi - lo) for v in values]
    return [1] * len(values)


class RefNode:
    def __init__(self, key, parent, ts):
        self.key, self.parent, self.ts, self.children = list(key), parent, ts, {}

    def tokens(self):
        out, node = [], self
        while node.parent is not None:
            out = node.key + out
            node = node.parent
        return out


class RefCache:
    """The reference radix tree without eviction: clock, refreshes, splits, the score."""

    def __init__(self, model):
        self.model, self.root, self.ts = model, RefNode([], None, 0), 0

    def _walk(self, seq):
        node, i, whole = self.root, 0, []
        while i < len(seq) and seq[i] in node.children:
            child = node.children[seq[i]]
            k = 0
            while k < len(child.key) and i + k < len(seq) and child.key[k] == seq[i + k]:
                k += 1
            if k < len(child.key):
                return whole, child, i, k
            whole.append(child)
            node, i = child, i + k
        return whole, None, i, 0

    def match_prefix(self, seq):
        self.ts += 1
        whole, *_ = self._walk(seq)
        if whole:
            whole[-1].ts = self.ts  # versions 2/3: only the last node
        return sum(len(n.key) for n in whole)

    def insert(self, seq):
        self.ts += 1
        self.match_prefix(seq)
        whole, partial, i, k = self._walk(seq)
        parent = whole[-1] if whole else self.root
        if partial is not None:
            upper = RefNode(partial.key[:k], parent, self.ts)
            parent.children[partial.key[0]] = upper
            partial.key, partial.parent = partial.key[k:], upper
            upper.children[partial.key[0]] = partial
            parent, i = upper, i + k
        if i < len(seq):
            parent.children[seq[i]] = RefNode(seq[i:], parent, self.ts)

    def victim(self, alpha, now):
        nodes = []

        def dfs(node):
            if len(node.children) <= 1 and node.parent is not None:
                nodes.append(node)
            for c in node.children.values():
                dfs(c)

        dfs(self.root)
        m, d, s = self.model, self.model.d_model, self.model.ssm_d_state
        eff = []
        for node in nodes:
            total = len(node.tokens())
            own = len(node.key)
            parent = total - own
            saved = (
                m.n_ssm_layers * ref_mamba(own, d, s)
                + m.n_attention_layers * (ref_attn(total, d) - ref_attn(parent, d))
                + m.n_mlp_layers * (ref_mlp(total, d) - ref_attn(parent, d))
            )
            eff.append(saved / (m.ssm_checkpoint_bytes + m.kv_bytes_per_token * total))
        e = ref_normalize(eff)
        r = ref_normalize([1 / (now - n.ts) for n in nodes])
        utility = [alpha * a + b for a, b in zip(e, r, strict=True)]
        return nodes[utility.index(min(utility))].tokens()


def twin_tokens(node):
    out = []
    while node.parent is not None:
        out = node.tokens.tolist() + out
        node = node.parent
    return out


def sessions_trace(seed, n=60):
    """System prompts and multi-turn sessions over a vocabulary too big for chance matches."""
    rng = np.random.default_rng(seed)
    vocab = 10**6

    def draw(lo, hi):
        return rng.integers(0, vocab, int(rng.integers(lo, hi))).astype(np.int32)

    systems = [draw(5, 40) for _ in range(3)]
    history: dict[int, np.ndarray] = {}
    pairs = []
    for _ in range(n):
        sid = int(rng.integers(0, 10))
        base = history[sid] if sid in history and rng.random() < 0.7 else systems[sid % 3]
        prompt = np.r_[base, draw(1, 20)].astype(np.int32)
        output = draw(1, 10)
        history[sid] = np.r_[prompt, output].astype(np.int32)
        pairs.append((prompt, output))
    return pairs


# ----- the score, the clock and the refresh rules -----------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0, 2.0])
@pytest.mark.parametrize("seed", range(4))
def test_victim_equals_the_reference_score_at_every_step(alpha, seed):
    policy = tree_policy("marconi", alpha=alpha)
    cache = make_cache(policy, HYBRID, BIG)
    ref = RefCache(HYBRID)
    compared = 0
    for prompt, output in sessions_trace(seed):
        full = np.r_[prompt, output].astype(np.int32)
        got = serve(cache, prompt, full).length
        want = ref.match_prefix(prompt.tolist())
        ref.insert(full.tolist())
        assert got == want
        assert policy.now == ref.ts  # 1 tick per lookup, 2 per insert
        if cache.num_nodes > 2:
            assert twin_tokens(policy.victim_at(ref.ts + 1)) == ref.victim(alpha, ref.ts + 1)
            compared += 1
    assert compared > 40


def test_an_evicting_insert_ticks_the_clock_once_more():
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    policy = tree_policy("marconi", alpha=0.0)
    cache = make_cache(policy, HYBRID, 40 * kv + 2 * ck)
    ticks = []
    for i in range(4):
        before, evictions = policy.now, cache.evictions
        p = np.arange(100 * i, 100 * i + 18, dtype=np.int32)
        serve(cache, p, np.r_[p, 7].astype(np.int32))
        ticks.append((policy.now - before, cache.evictions > evictions))
    assert ticks == [(3, False), (3, False), (4, True), (4, True)]


def test_folding_keeps_the_later_stamp_and_a_hit_stamps_only_its_node():
    policy = tree_policy("marconi", alpha=0.0)
    cache = make_cache(policy, HYBRID, BIG)
    a = np.arange(0, 10, dtype=np.int32)
    serve(cache, a, np.r_[a, 50].astype(np.int32))  # X = a+50 at 3
    b = np.r_[a, 50, np.arange(60, 70)].astype(np.int32)
    serve(cache, b, np.r_[b, 80].astype(np.int32))  # hits X at 4, refreshes X at 6, Y at 6
    x = cache.tree.match(np.r_[a, 50].astype(np.int32)).node
    (y,) = x.children.values()
    assert policy._stamp[id(x)] == policy._stamp[id(y)] == 6
    c = np.arange(500, 510, dtype=np.int32)
    serve(cache, c, np.r_[c, 1].astype(np.int32))  # Z at 9
    d = np.r_[b, 80, 81].astype(np.int32)
    serve(cache, d, np.r_[d, 82].astype(np.int32))  # hits Y at 10, Y again at 12 (not X)
    assert policy._stamp[id(x)] == 6 and policy._stamp[id(y)] == 12
    cache.evict(x)  # X folds into Y: the later stamp stays
    assert policy._stamp[id(y)] == 12 and id(x) not in policy._stamp


def test_ties_go_to_the_first_node_in_pre_order():
    """``utility_scores.index(min(...))`` over a pre-order walk, not creation order."""
    policy = tree_policy("marconi", alpha=0.0)
    cache = make_cache(policy, HYBRID, BIG)
    a, b = np.arange(0, 10, dtype=np.int32), np.arange(100, 110, dtype=np.int32)
    serve(cache, a, np.r_[a, 11].astype(np.int32))  # leaf A
    serve(cache, b, np.r_[b, 12].astype(np.int32))  # leaf B
    c = np.r_[a[:5], 99].astype(np.int32)
    serve(cache, c, np.r_[c, 98].astype(np.int32))  # splits A: upper, A's tail, leaf C
    tail = cache.tree.match(np.r_[a, 11].astype(np.int32)).node
    leaf_b = cache.tree.match(np.r_[b, 12].astype(np.int32)).node
    leaf_c = cache.tree.match(np.r_[c, 98].astype(np.int32)).node
    assert leaf_b.nid < leaf_c.nid  # B was created first, but C comes first in pre-order
    policy.table.r[policy.table.slots[tail]] = 8
    policy.table.r[policy.table.slots[leaf_b]] = policy.table.r[policy.table.slots[leaf_c]] = 2
    assert policy.victim_at(10) is leaf_c


# ----- the bootstrap ---------------------------------------------------------------
def _bootstrap_run(multiplier, n=160, seed=3):
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    policy = tree_policy("marconi", bootstrap_multiplier=multiplier)
    cache = make_cache(policy, HYBRID, 300 * kv + 8 * ck)
    hits, alphas, first_eviction = [], [], None
    for i, (prompt, output) in enumerate(sessions_trace(seed, n)):
        hits.append(serve(cache, prompt, np.r_[prompt, output].astype(np.int32)).length)
        alphas.append(policy.alpha)
        if first_eviction is None and cache.evictions:
            first_eviction = i + 1
    return policy, hits, alphas, first_eviction


def test_bootstrap_follows_the_reference_window_and_metric():
    policy, hits, alphas, k = _bootstrap_run(2)
    boot = policy.stats()["bootstrap"]
    assert policy.stats()["rules"] == "reference"
    assert boot["requests_before_first_eviction"] == k  # the evicting request included
    window = 2 * k
    assert boot["completed"] and boot["window_requests"] == window
    assert boot["tuned_at_request"] == window
    # Tuned at the window's last insert: alpha is 0 before, the winner after.
    assert set(alphas[: window - 1]) == {0.0} and alphas[-1] == policy.alpha
    grid = {float(a): s for a, s in boot["grid"].items()}
    assert list(grid) == list(ALPHA_GRID)
    assert policy.alpha == best_alpha(grid)
    # The alpha = 0 replay from the empty cache is the live run (alpha was 0),
    # scored by the reference's FLOPs saved.
    assert grid[0.0] == sum(ref_saved(HYBRID, h) for h in hits[:window])


def test_bootstrap_scores_only_the_last_500_requests(monkeypatch):
    monkeypatch.setattr(tuning, "REFERENCE_LAST_N", 7)
    policy, hits, _, k = _bootstrap_run(2)
    grid = policy.stats()["bootstrap"]["grid"]
    assert grid["0.0"] == sum(ref_saved(HYBRID, h) for h in hits[2 * k - 7 : 2 * k])


def test_a_window_ending_at_the_first_eviction_is_never_tuned():
    policy, _, alphas, _ = _bootstrap_run(1)
    assert policy.stats()["alpha_source"] == "untuned" and set(alphas) == {0.0}


def test_grid_ties_go_to_the_smallest_alpha():
    assert best_alpha({0.0: 1, 0.1: 3, 0.2: 3, 0.3: 2}) == 0.1
    assert best_alpha({a: 5 for a in ALPHA_GRID}) == 0.0


# ----- sglang+: refresh on a partial match -------------------------------------------
def test_sglang_refreshes_the_node_a_prompt_diverges_inside():
    """An agent rewrites an old observation: the old branch stays warm (reference v1)."""
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    cache = make_cache(tree_policy("sglang+"), HYBRID, 60 * kv + 4 * ck)
    a = np.arange(0, 20, dtype=np.int32)
    serve(cache, a, np.r_[a, 900].astype(np.int32))  # t=0: leaf X = a+900
    b = np.arange(1000, 1015, dtype=np.int32)
    serve(cache, b, np.r_[b, 901].astype(np.int32))  # t=1: leaf Y
    rewrite = np.r_[a[:10], np.arange(2000, 2004)].astype(np.int32)
    serve(cache, rewrite, np.r_[rewrite, 902].astype(np.int32))  # t=2: splits X at 10
    c = np.arange(3000, 3012, dtype=np.int32)
    serve(cache, c, np.r_[c, 903].astype(np.int32))  # needs room: evicts one leaf
    # X's lower part was refreshed at t=2, so Y (t=1) went, X's tail stayed.
    assert cache.peek(np.r_[a, 900, 5].astype(np.int32)) == 21
    assert cache.peek(np.r_[b, 901, 5].astype(np.int32)) == 0


# ----- why the three differ on a pure Transformer (docs/decisions.md) -----------------
TRANSFORMER = get_model("tiny-transformer")


def test_transformer_marconi_at_alpha_zero_is_sglang_even_when_evicting():
    """Without SSM layers only alpha separates them: same admission, same leaves, same order."""
    kv = TRANSFORMER.kv_bytes_per_token
    for seed in range(4):
        caches = [
            make_cache(tree_policy(p, **o), TRANSFORMER, (150 + 40 * seed) * kv)
            for p, o in (("sglang+", {}), ("marconi", {"alpha": 0.0}))
        ]
        got = [[], []]
        for prompt, output in sessions_trace(seed, 120):
            full = np.r_[prompt, output].astype(np.int32)
            for cache, out in zip(caches, got, strict=True):
                out.append(serve(cache, prompt, full).length)
        assert got[0] == got[1] and caches[0].evictions > 0


def test_transformer_flop_efficiency_still_favours_long_contexts():
    """Attention FLOPs grow with context length, KV bytes only linearly: alpha > 0 keeps
    the long, old leaf and evicts the short, recent one."""
    victims = {}
    for alpha in (0.0, 0.5, 2.0):
        policy = tree_policy("marconi", alpha=alpha)
        cache = make_cache(policy, TRANSFORMER, BIG)
        long = np.arange(0, 200, dtype=np.int32)
        serve(cache, long[:-1], long)
        short = np.arange(1000, 1002, dtype=np.int32)
        serve(cache, short[:-1], short)
        victim = policy.victim_at(policy.now + 1)
        victims[alpha] = int(victim.depth)
    assert victims == {0.0: 200, 0.5: 200, 2.0: 2}


def test_transformer_vllm_evicts_blocks_sglang_whole_nodes():
    """On a Transformer any cached prefix hits: evicting a leaf block by block keeps
    its head usable, evicting the whole node (SGLang, Marconi) does not."""
    kv = TRANSFORMER.kv_bytes_per_token
    kept = {}
    for name, options in (
        ("sglang+", {}),
        ("marconi", {"alpha": 0.0}),
        ("vllm+", {"block_size": 1}),
    ):
        cache = make_cache(tree_policy(name, **options), TRANSFORMER, 30 * kv)
        a = np.arange(0, 20, dtype=np.int32)
        serve(cache, a, np.r_[a, 900].astype(np.int32))  # 21 tokens
        b = np.arange(1000, 1008, dtype=np.int32)
        serve(cache, b, np.r_[b, 901].astype(np.int32))  # 30 tokens: full
        c = np.arange(2000, 2005, dtype=np.int32)
        serve(cache, c, np.r_[c, 902].astype(np.int32))  # 6 more: the oldest goes
        kept[name] = cache.peek(np.r_[a, 900].astype(np.int32))
    assert kept == {"sglang+": 0, "marconi": 0, "vllm+": 15}
