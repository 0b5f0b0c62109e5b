"""Marconi's eviction score exactly as the authors' code computes it (``marconi``, ``oracle``).

Every rule below follows github.com/ruipeterpan/marconi (``radix_cache_hybrid.py``
and ``utils.py``); each cites the function it follows. The twin's earlier
score, kept as ``marconi-twin``, is the compiled kernel's ``TWIN`` rules
(:mod:`policies.compiled.kernel`).

- Clock (``RadixCache.match_prefix``, ``insert``, ``evict``): a logical clock
  ticks once per lookup, twice per insert (``insert`` and the ``match_prefix``
  it calls) and once per ``evict`` call (one per insert that must make room).
  New nodes (leaves, split points) are stamped with the clock when created.
- Refresh (``match_prefix``, policy versions 2 and 3): a lookup stamps only the
  deepest fully matched node; so does the insert's own ``match_prefix`` of
  input + output, before any eviction. A folded node's child keeps the later
  of the two stamps (``_evict_intermediate_node``).
- Candidates (``_collect_leaf_and_single_child_nodes``): nodes with at most
  one child (``PrefixCache.candidate``). The reference has no pins; the twin
  pins a running request's hit node and an insert's attach point. A pinned
  candidate is still scored, so it counts in both normalisations as in the
  reference (the attach point, stamped by the insert's own match, is usually
  the most recent node and sets recency's maximum), but it is never the
  victim: the least utility among the unpinned goes (docs/decisions.md).
- Score (``evict_v2``): recency ``1 / (now - stamp)`` and FLOP efficiency, each
  min-max normalised over every candidate (``utils._normalize``: all equal,
  or one value, gives 1), utility ``alpha x eff + recency``; the victim is the
  first minimum in the tree's pre-order (children in insertion order), as
  ``list.index(min(...))``.
- FLOP efficiency (``evict_v2``): for a node ending at depth ``T`` holding
  ``C`` tokens under a parent at depth ``P = T - C``: SSM layers save
  ``mamba1(C)``, attention layers ``attn(T) - attn(P)`` and MLP layers
  ``mlp(T) - attn(P)`` (the reference subtracts the parent's *attention*
  FLOPs from the MLP term; kept as written), over the bytes of the whole
  sequence up to the node: one checkpoint plus the KV of all ``T`` tokens.
- FLOP formulas (``utils.get_attn_flops``, ``get_mlp_flops``,
  ``get_mamba1_flops``): per layer, ``8 L D^2 + 4 L^2 D``, ``16 L D^2`` and
  ``12 L D^2 + 16 L D N + 10 L D``, with ``D = d_model``, ``N = ssm_d_state``.
  MoE layers count as MLP layers (the reference has no MoE). Bytes are the
  model's own (equal to ``utils.get_model_state_size`` on the paper's 7B
  hybrid, and right for GQA models too).

The score runs compiled (``policies.compiled.kernel``: ``scores.reference_efficiency``,
``victims.reference_victim_row``); its Python transliteration on the radix tree is the
tests' oracle (``tests/marconi_oracle.py``). The efficiency's counts are float64
in a fixed order, then one division: the reference's exact integers while every
count stays below 2**53 (every preset below tens of thousands of tokens), each
step rounded as IEEE 754 says past it (docs/decisions.md, issue 33). Hits are
scored (:meth:`ReferenceFlops.saved_by_hit`) in exact Python ints.
"""

from __future__ import annotations

from twin.model import ModelSpec


def attn_flops(n: int, d: int) -> int:
    """One attention layer over ``n`` tokens (``utils.get_attn_flops``)."""
    return 8 * n * d * d + 4 * n * n * d


def mlp_flops(n: int, d: int) -> int:
    """One MLP layer over ``n`` tokens (``utils.get_mlp_flops``)."""
    return 16 * n * d * d


def mamba1_flops(n: int, d: int, d_state: int) -> int:
    """One SSM layer over ``n`` tokens (``utils.get_mamba1_flops``, the corrected version)."""
    return 12 * n * d * d + 16 * n * d * d_state + 10 * n * d


class ReferenceFlops:
    """The reference code's FLOP counts for one model (layer counts and D, N)."""

    def __init__(self, model: ModelSpec) -> None:
        self.d, self.n = model.d_model, model.ssm_d_state
        self.ssm, self.attn = model.n_ssm_layers, model.n_attention_layers
        self.mlp = model.n_mlp_layers + model.n_moe_layers
        self.ckpt_bytes = model.ssm_checkpoint_bytes
        self.kv_per_token = model.kv_bytes_per_token

    def saved_by_hit(self, hit: int) -> int:
        """FLOPs a hit of ``hit`` tokens saves (``RadixCache.get_cache_stats``)."""
        d = self.d
        return (
            self.ssm * mamba1_flops(hit, d, self.n)
            + self.attn * attn_flops(hit, d)
            + self.mlp * mlp_flops(hit, d)
        )
