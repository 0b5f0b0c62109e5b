"""Pricing runs of pure-decode steps (``CostModel.decode_steps_s``'s short-run path).

A pure-decode step's price is its parts summed in ``_sum_parts``'s order; only the
full-attention decode kernel reads the context sum, and its features are affine in
the keys read, so a run's kernel prices come from one tight loop
(``latency.compile_affine``) and the steps from one comprehension each.
"""

from __future__ import annotations

from twin.costmodel import features as ft


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
    then ``_with_host`` (``host_s`` per step, added or a floor by ``host_mode``), the same
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


def affine_in_keys(
    batch: int, heads: tuple[int, int, int, int, int, int | None]
) -> tuple[float, float, float, float, float, float]:
    """``(fn, b0, bn, xn, y, z)``: the attention decode features of ``batch`` sequences
    reading ``n`` keys in all are ``fn n`` FLOPs, ``b0 + bn n`` bytes, ``xn n`` score
    elements, ``y`` tiles and ``z`` waves x head dim (``latency.compile_affine``). Read off
    the features themselves at 0 and 1 key and checked at a third count: every term is an
    integer."""
    f0, b0, x0, y, z = ft.attn_decode_sums(batch, 0, *heads)
    f1, b1, x1, _, _ = ft.attn_decode_sums(batch, 1, *heads)
    fn, bn, xn = f1 - f0, b1 - b0, x1 - x0
    n = 1 << 24
    fx, bx, xx, yx, zx = ft.attn_decode_sums(batch, n, *heads)
    if (f0, x0) != (0.0, 0.0) or (fx, bx, xx, yx, zx) != (fn * n, b0 + bn * n, xn * n, y, z):
        raise AssertionError("attention decode features are no longer affine in the keys")
    return fn, b0, bn, xn, y, z
