"""The reference executor: a real PyTorch hybrid model over a real prefix cache of real states.

It runs every layer kind of :mod:`twin.mixers` (full and sliding-window attention,
Mamba-1, Mamba-2, Gated DeltaNet, side by side in a parallel layer) and both FFN kinds
(dense MLP; top-k MoE with an optional shared expert), exactly: a prefill resumed from
cached states gives the logits of a full prefill. ``fits`` (no torch) refuses models
whose weights exceed the device's free memory.

It needs torch (``pip install 'twin[torch]'``); import its modules lazily.
"""
