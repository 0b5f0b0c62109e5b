"""Token sequences the cache, policy and replay tests build their prompts from."""

from __future__ import annotations

import numpy as np

BIG = 10**12  # bytes: a capacity no test fills


def seq(start: int, n: int) -> np.ndarray:
    """The ``n`` token ids ``start, start + 1, ...`` (int32, as the caches take them)."""
    return np.arange(start, start + n, dtype=np.int32)


def a(*xs: int) -> np.ndarray:
    """The token ids ``xs`` (int32)."""
    return np.array(xs, np.int32)


def cache_bytes(tokens: int, states: int, model) -> int:
    """Bytes that hold ``tokens`` tokens' KV and ``states`` state checkpoints of ``model``."""
    return tokens * model.kv_bytes_per_token + states * model.ssm_checkpoint_bytes


def full_sequences(pairs) -> list[tuple[np.ndarray, int]]:
    """(full sequence, prompt length) of each (prompt, output) pair, as replays take them."""
    return [(np.r_[p, o].astype(np.int32), len(p)) for p, o in pairs]


def path_tokens(node) -> np.ndarray:
    """The tokens on the radix tree's path from the root to the end of ``node``."""
    parts = []
    while node.parent is not None:
        parts.append(node.tokens)
        node = node.parent
    return np.concatenate(parts[::-1]) if parts else np.zeros(0, np.int32)


def chat_sessions(
    seed: int, sessions: int, turns: int, systems: int, vocab: int, lengths: tuple[int, ...]
) -> list[tuple[np.ndarray, int]]:
    """(full sequence, prompt length) of ``turns`` turns of ``sessions`` chat sessions behind
    ``systems`` shared system prompts, interleaved, each turn extending the session's last
    sequence; ids below ``vocab``, lengths from ``lengths``' [lo, hi) of system, user, reply."""
    rng = np.random.default_rng(seed)
    shared = [rng.integers(0, vocab, int(rng.integers(*lengths[:2]))) for _ in range(systems)]
    history = {s: shared[s % systems] for s in range(sessions)}
    requests = []
    for _ in range(turns):
        for s in rng.permutation(sessions):
            prompt = np.r_[history[s], rng.integers(0, vocab, int(rng.integers(*lengths[2:4])))]
            reply = rng.integers(0, vocab, int(rng.integers(*lengths[4:])))
            history[s] = full = np.r_[prompt, reply].astype(np.int32)
            requests.append((full, len(prompt)))
    return requests
