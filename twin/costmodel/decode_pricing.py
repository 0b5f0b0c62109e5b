"""Pricing runs of pure-decode steps (``CostModel.decode_steps_s``'s short-run path).

A pure-decode step's price is its parts summed in ``_sum_parts``'s order; only the
full-attention decode kernel reads the context sum, and its features are affine in
the keys read, so a run's kernel prices come from one tight loop
(``latency.compile_affine``) and the steps from one comprehension each.
"""

from __future__ import annotations

from twin.costmodel import features as ft


def with_host(kernels: float, host_s: float, floor: bool) -> float:
    """A step's seconds from its kernels': the host's ``host_s`` added, or (``floor``: the
    profile's ``max`` mode) the step's floor, ``max(kernels, host_s)`` (Python's ``max``:
    ``kernels`` unless ``host_s`` is larger). ``CostModel`` calls it per step and
    ``compiled.step_seconds`` compiles it; :func:`decode_steps` applies it to a run's steps
    in one comprehension each (no call a step)."""
    if floor:
        return host_s if host_s > kernels else kernels
    return kernels + host_s


def decode_steps(
    dense: float,
    before: float,
    layers: int,
    after: list[float],
    head: float,
    kernel_s: list[float],
    host_s: float,
    host_mode: str,
) -> list[float]:
    """Each pure-decode step's seconds from its attention decode kernel's: ``_sum_parts``
    then :func:`with_host` (``host_s`` per step, added or a floor by ``host_mode``), the same
    additions in the same order (one comprehension for the usual few later parts)."""
    if len(after) == 2:
        t1, t2 = after
        steps = [dense + (before + layers * r + t1 + t2) + head for r in kernel_s]
    elif len(after) == 1:
        (t1,) = after
        steps = [dense + (before + layers * r + t1) + head for r in kernel_s]
    elif not after:
        steps = [dense + (before + layers * r) + head for r in kernel_s]
    else:
        steps = []
        for r in kernel_s:
            total = before + layers * r
            for term in after:
                total += term
            steps.append(dense + total + head)
    host = host_s
    if host_mode == "add":
        return [s + host for s in steps] if host else steps
    return [s if s >= host else host for s in steps]  # ``max(kernels, host_s)``


# ``features.attn_decode_sums``' arguments after the batch and the keys (``CostModel.
# _attn_heads``): heads, KV heads, head dim, element and K/V element bytes, SMs, launch rule.
DecodeHeads = tuple[int, int, int, int, int, "int | None", str]
# ``affine_in_keys``' coefficients: (fn, b0, bn, xn, y, z, zk).
AffineKeys = tuple[float, float, float, float, float, float, float]


def affine_in_keys(batch: int, heads: DecodeHeads) -> AffineKeys:
    """``(fn, b0, bn, xn, y, z, zk)``: the attention decode features of ``batch`` sequences
    reading ``n`` keys in all are ``fn n`` FLOPs, ``b0 + bn n`` bytes, ``xn n`` score
    elements, ``y`` tiles and the launch extra ``z`` from ``zk`` keys on, 0 below
    (``features.attn_decode_launch``: the FA3 grid's waves x head dim from 0 keys, or
    TensorRT-LLM Hopper's XQA CTAs from the keys at which XQA runs; ``latency.
    compile_affine``). Read off the features themselves at 0 and 1 key and checked at a
    third count and on both sides of ``zk``: every term is an integer."""
    f0, b0, x0, y, _ = ft.attn_decode_sums(batch, 0, *heads)
    f1, b1, x1, _, _ = ft.attn_decode_sums(batch, 1, *heads)
    fn, bn, xn = f1 - f0, b1 - b0, x1 - x0
    z, zk = ft.attn_decode_launch(batch, 0, heads[0], heads[1], heads[2], heads[5], heads[6])
    n = 1 << 24
    fx, bx, xx, yx, zx = ft.attn_decode_sums(batch, n, *heads)
    checks = [(n, zx)] + [(k, ft.attn_decode_sums(batch, k, *heads)[4]) for k in (zk - 1, zk)]
    if (
        (f0, x0) != (0.0, 0.0)
        or (fx, bx, xx, yx) != (fn * n, b0 + bn * n, xn * n, y)
        or any(got != (z if k >= zk else 0.0) for k, got in checks if 0 <= k < 1 << 53)
    ):
        raise AssertionError("attention decode features are no longer affine in the keys")
    return fn, b0, bn, xn, y, z, zk
