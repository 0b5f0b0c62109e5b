"""How many cached KV blocks vs SSM states are ever reused (Marconi sec. 3, Fig. 3a).

The paper's motivating measurement: with every block of ``block`` tokens
cached (vLLM+'s admission: a KV block and the SSM state after its last token)
and nothing evicted, which fraction of the cached entries does a later
request use? A hit on a prefix of ``k`` blocks reuses all ``k`` KV blocks but
only one SSM state, the one after block ``k`` (SSM states are all-or-nothing:
a request resumes from exactly one). Requests are taken in replay order; each
looks up its prompt, then its prompt + output is cached.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from twin.replay import Trace


@dataclass(frozen=True)
class BlockReuse:
    blocks: int  # distinct blocks cached (each one KV block + one SSM state)
    kv_reused: int  # blocks whose KV some later request's hit covered
    ssm_reused: int  # blocks whose SSM state some later request resumed from

    @property
    def kv_rate(self) -> float:
        return self.kv_reused / self.blocks if self.blocks else 0.0

    @property
    def ssm_rate(self) -> float:
        return self.ssm_reused / self.blocks if self.blocks else 0.0


def _chain(tokens, block: int, n_blocks: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    """The key of each of the first ``n_blocks`` full blocks: a hash of the whole prefix."""
    keys, prev = [], b""
    for i in range(n_blocks):
        prev = hashlib.blake2b(
            prev + tokens[i * block : (i + 1) * block].tobytes(), digest_size=16
        ).digest()
        keys.append(prev)
    return keys


def block_reuse(trace: Trace, block: int = 32) -> BlockReuse:
    """Reuse of KV blocks and SSM states at ``block`` tokens per block, unbounded cache."""
    kv: set[bytes] = set()
    ssm: set[bytes] = set()
    cached: set[bytes] = set()
    for full, n in zip(trace.fulls, trace.prompt_lens, strict=True):
        keys = _chain(full, block, len(full) // block)
        hit = 0
        # Only whole blocks of the prompt can hit (the block grid of vLLM+).
        while hit < n // block and keys[hit] in cached:
            hit += 1
        if hit:
            kv.update(keys[:hit])
            ssm.add(keys[hit - 1])
        cached.update(keys)
    return BlockReuse(len(cached), len(kv), len(ssm))
