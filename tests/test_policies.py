"""The policies on hand-made traces: the consequences the Marconi paper's design implies."""

from __future__ import annotations

import numpy as np
import pytest
from marconi_oracle import tree_policy
from token_seqs import BIG, seq

from twin.cache import serve
from twin.errors import TwinError
from twin.policies import ADMISSIONS, ALPHA_GRID, POLICIES, admission_rule, get_policy, options_for
from twin.policies.admissions import (
    EveryBlock,
    EveryInterval,
    Judicious,
    Nothing,
    PageAligned,
    WholePrompt,
)
from twin.policies.structures import make_cache
from twin.presets import get_model

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")


def hits(policy: str, model, pairs, capacity: int = BIG, **options) -> list[int]:
    cache = make_cache(tree_policy(policy, **options_for(policy, options)), model, capacity)
    out = []
    for prompt, output in pairs:
        full = np.r_[prompt, output].astype(np.int32)
        out.append(serve(cache, full[: len(prompt)], full).length)
    return out


def system_prompt_trace(n: int = 4, length: int = 30) -> list:
    system = seq(1000, length)
    return [(np.r_[system, seq(100 * i, 5)], seq(5000 + 10 * i, 3)) for i in range(n)]


def conversation(turns: int = 4) -> list:
    pairs, history = [], np.zeros(0, np.int32)
    for k in range(turns):
        prompt = np.r_[history, seq(100 * k, 7)].astype(np.int32)
        output = seq(9000 + 100 * k, 5)
        pairs.append((prompt, output))
        history = np.r_[prompt, output]
    return pairs


def random_trace(seed: int, n: int = 80) -> list:
    """Conversations and shared system prompts over a small vocabulary."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, 50, rng.integers(5, 40)) for _ in range(3)]
    sessions: dict[int, np.ndarray] = {}
    pairs = []
    for _ in range(n):
        sid = int(rng.integers(0, 12))
        if sid in sessions and rng.random() < 0.7:
            prompt = np.r_[sessions[sid], rng.integers(0, 50, rng.integers(1, 20))]
        else:
            prompt = np.r_[systems[sid % 3], rng.integers(0, 50, rng.integers(1, 20))]
        output = rng.integers(0, 50, rng.integers(1, 10))
        sessions[sid] = np.r_[prompt, output]
        pairs.append((prompt.astype(np.int32), output.astype(np.int32)))
    return pairs


@pytest.mark.parametrize("policy", ["sglang+", "marconi"])
def test_shared_input_prefix_hits_from_its_third_occurrence(policy):
    # The 2nd occurrence's speculative insertion finds the branch point and
    # checkpoints it (Marconi sec. 4.1); the 3rd resumes from that state.
    assert hits(policy, HYBRID, system_prompt_trace()) == [0, 0, 30, 30]


def test_fine_grained_checkpoints_hit_from_the_second_occurrence():
    assert hits("vllm+", HYBRID, system_prompt_trace(), block_size=4) == [0, 28, 28, 28]


@pytest.mark.parametrize("policy", ["sglang+", "marconi", "vllm+"])
def test_next_turn_hits_previous_input_and_output(policy):
    pairs = conversation()
    got = hits(policy, HYBRID, pairs, block_size=1)
    assert got == [0] + [len(p) + len(o) for p, o in pairs[:-1]]


def test_unbounded_sglang_and_marconi_agree():
    for seed in range(5):
        pairs = random_trace(seed)
        assert hits("sglang+", HYBRID, pairs) == hits("marconi", HYBRID, pairs)


def test_transformer_judicious_equals_vllm_block_one():
    # Paper Fig. 12a: on Transformers the policies perform the same.
    for seed in range(5):
        pairs = random_trace(seed)
        expect = hits("vllm+", TRANSFORMER, pairs, block_size=1)
        assert sum(expect) > 0
        assert hits("sglang+", TRANSFORMER, pairs) == expect
        assert hits("marconi", TRANSFORMER, pairs) == expect


@pytest.mark.parametrize("model", [HYBRID, TRANSFORMER])
def test_vanilla_caches_nothing(model):
    cache = make_cache(get_policy("vanilla"), model, BIG)
    for prompt, output in random_trace(1):
        assert serve(cache, prompt, np.r_[prompt, output]).length == 0
    assert cache.used_bytes == 0


def _two_leaves(alpha: float):
    """An old, long (FLOP-efficient) leaf and a recent, short one."""
    cache = make_cache(tree_policy("marconi-twin", alpha=alpha), HYBRID, BIG)
    cache.set_clock(0)
    cache.insert(seq(0, 200), [200])
    cache.set_clock(10)
    cache.insert(seq(1000, 2), [2])
    # tree.match, not lookup: a lookup is an access and would refresh them.
    long_leaf = cache.tree.match(seq(0, 200)).node
    short_leaf = cache.tree.match(seq(1000, 2)).node
    table = cache.policy.table
    assert table.f[table.slots[long_leaf]] > 10 * table.f[table.slots[short_leaf]]
    return cache, long_leaf, short_leaf


def test_marconi_twin_evicts_lru_at_alpha_zero_and_the_inefficient_node_at_large_alpha():
    cache, long_leaf, short_leaf = _two_leaves(0.0)
    assert cache.policy.choose_victim() is long_leaf
    cache, long_leaf, short_leaf = _two_leaves(2.0)
    assert cache.policy.choose_victim() is short_leaf
    cache, long_leaf, _ = _two_leaves(0.5)  # scores 0 + 0.5 vs 1 + 0
    assert cache.policy.choose_victim() is long_leaf


def test_marconi_refreshes_only_the_node_used_sglang_the_whole_path():
    """A conversation's earlier turn is an intermediate node: Marconi may drop its state."""
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    kept = {}
    for policy in ("sglang+", "marconi"):
        cache = make_cache(tree_policy(policy), HYBRID, 24 * kv + 3 * ck)
        turn1 = np.r_[seq(0, 6), seq(50, 2)]
        serve(cache, seq(0, 6), turn1)  # t=0: turn 1 (state X after it)
        serve(cache, seq(300, 4), np.r_[seq(300, 4), seq(60, 2)])  # t=1: another leaf Z
        turn2 = np.r_[turn1, seq(10, 4)]
        serve(cache, turn2, np.r_[turn2, seq(70, 2)])  # t=2: turn 2 hits X, adds Y under it
        # t=3: needs 14 tokens of room. Both evict Z first; then sglang+ evicts the
        # leaf Y (X is on its path), while Marconi drops X's state (same age as Y,
        # created first) and, still short, Y with X's KV.
        serve(cache, seq(400, 12), np.r_[seq(400, 12), seq(80, 2)])
        kept[policy] = cache.lookup(np.r_[turn1, seq(90, 3)]).length
        cache.verify()
    assert kept == {"sglang+": 8, "marconi": 0}


def test_marconi_twin_bootstrap_sets_alpha_after_the_window():
    pairs = random_trace(7, n=160)
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    capacity = 150 * kv + 6 * ck
    policy = tree_policy("marconi-twin", bootstrap_multiplier=2)
    cache = make_cache(policy, HYBRID, capacity)
    got = []
    alphas = []
    for prompt, output in pairs:
        full = np.r_[prompt, output].astype(np.int32)
        got.append(serve(cache, full[: len(prompt)], full).length)
        alphas.append(policy.alpha)
    boot = policy.stats()["bootstrap"]
    start, length = boot["window_start"], boot["window_requests"]
    assert boot["completed"] and length == 2 * boot["requests_before_first_eviction"]
    assert set(alphas[: start + length]) == {0.0}  # 0 until the window ends
    assert len(boot["grid"]) == len(ALPHA_GRID)
    best = max(ALPHA_GRID, key=lambda a: (boot["grid"][str(a)], -a))
    assert policy.alpha == best == alphas[-1]
    # The alpha = 0 replay from the snapshot is exactly what the live run did.
    assert boot["grid"]["0.0"] == sum(got[start : start + length])


def test_marconi_twin_bootstrap_grid_is_the_same_with_a_process_pool():
    pairs = random_trace(7, n=120)
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    stats = []
    for jobs in (1, 2):
        policy = get_policy("marconi-twin", bootstrap_multiplier=1, jobs=jobs)
        protocol = make_cache(policy, HYBRID, 150 * kv + 6 * ck).request_cache()
        for prompt, output in pairs:
            protocol.serve(prompt, np.r_[prompt, output].astype(np.int32))
        stats.append(policy.stats())
    assert stats[0]["bootstrap"]["completed"] and stats[0] == stats[1]


def test_registry_and_errors():
    first = ["vanilla", "vllm+", "sglang+", "marconi", "marconi-twin", "oracle"]
    assert list(POLICIES)[:6] == first
    assert "prompt-cache" in POLICIES
    with pytest.raises(TwinError, match="valid policies: vanilla, vllm\\+"):
        get_policy("lru")
    with pytest.raises(TwinError, match="unknown policy option"):
        get_policy("marconi", colour="red")
    with pytest.raises(TwinError, match="alpha metric"):
        get_policy("marconi-twin", alpha_metric="speed")
    # Shared flags (twin replay's) go through options_for: others' options are dropped there.
    assert get_policy("vllm+", **options_for("vllm+", {"block_size": 8, "jobs": 3})).block_size == 8


def test_each_python_structure_policy_admits_by_a_rule_of_the_registry():
    rules = {
        "vanilla": Nothing(),
        "vllm+": EveryBlock(32, None),
        "sglang+": Judicious(),
        "sglang": PageAligned(1),
        "jenga": EveryInterval(512),
        "prompt-cache": WholePrompt(),
    }
    for name, rule in rules.items():
        assert get_policy(name).admission == rule
        assert type(rule) in ADMISSIONS.values()
    assert get_policy("sglang", page_size=4).admission == admission_rule(
        "page-aligned", page_size=4
    )
    with pytest.raises(TwinError, match="unknown admission 'all'; valid: nothing, judicious"):
        admission_rule("all")


def test_an_option_of_another_policy_is_refused_naming_the_policy_and_its_options():
    # Regression (issue 17): sglang+ took alpha (a marconi option) and ignored it.
    with pytest.raises(TwinError, match=r"alpha for policy 'sglang\+'; sglang\+ takes: eviction"):
        get_policy("sglang+", alpha=0.7)
    with pytest.raises(TwinError, match=r"block_size for policy 'marconi'; marconi takes: alpha, "):
        get_policy("marconi", block_size=16)
    assert get_policy("marconi", alpha=None).stats()["alpha_source"] == "warmup"  # None: default


class _PathRefreshLRU(get_policy("sglang+").__class__):
    """Brute-force SGLang LRU: every access stamps the whole path; victims by full scan."""

    def on_hit(self, node):
        self.cache.touch(node)
        self._stamp_path(node, self.cache.clock)

    def on_node_changed(self, node):
        if node.t == self.cache.clock:
            self._stamp_path(node, node.t)

    def on_node_removed(self, node, into=None):
        pass  # nothing to hand up: ancestors were stamped at access time

    @staticmethod
    def _stamp_path(node, t):
        while node.parent is not None:
            node.t = max(node.t, t)
            node = node.parent

    def choose_victim(self):
        cache = self.cache
        leaves = [n for n in cache.tree.nodes() if cache.leaf_evictable(n)]
        return min(leaves, key=lambda n: (n.t, n.nid), default=None)


@pytest.mark.parametrize("model", [HYBRID, TRANSFORMER])
def test_lazy_path_refresh_equals_stamping_the_whole_path(model):
    kv, ck = model.kv_bytes_per_token, model.ssm_checkpoint_bytes
    for seed in range(6):
        pairs = random_trace(seed, n=120)
        capacity = (60 + 30 * seed) * kv + (2 + seed) * ck
        lazy = make_cache(get_policy("sglang+"), model, capacity)
        brute = make_cache(_PathRefreshLRU(), model, capacity)
        for prompt, output in pairs:
            full = np.r_[prompt, output].astype(np.int32)
            assert serve(lazy, prompt, full).length == serve(brute, prompt, full).length
        assert lazy.evictions == brute.evictions > 0


class _ScanMarconi(tree_policy("marconi-twin").__class__):
    """Brute-force marconi-twin eviction: score every evictable node of the tree."""

    def choose_victim(self):
        cache = self.cache
        nodes = [n for n in cache.tree.nodes() if cache.evictable(n)]
        if not nodes:
            return None
        r = [float(n.t) for n in nodes]
        f = [self.table.f[self.table.slots[n]] for n in nodes]
        a = 1.0 / (max(r) - min(r)) if max(r) > min(r) else 0.0
        b = self.alpha / (max(f) - min(f)) if self.alpha > 0 and max(f) > min(f) else 0.0
        eff = {n.nid: e for n, e in zip(nodes, f, strict=True)}
        return min(
            nodes, key=lambda n: ((n.t - min(r)) * a + (eff[n.nid] - min(f)) * b, n.t, n.nid)
        )


@pytest.mark.parametrize("alpha", [0.0, 0.4, 2.0])
def test_vectorised_marconi_twin_victim_equals_a_full_scan(alpha):
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    for seed in range(4):
        pairs = random_trace(seed + 10, n=120)
        capacity = (80 + 20 * seed) * kv + (3 + seed) * ck
        fast = make_cache(tree_policy("marconi-twin", alpha=alpha), HYBRID, capacity)
        slow = make_cache(_ScanMarconi(alpha=alpha), HYBRID, capacity)
        for prompt, output in pairs:
            full = np.r_[prompt, output].astype(np.int32)
            assert serve(fast, prompt, full).length == serve(slow, prompt, full).length
        assert fast.evictions == slow.evictions > 0
