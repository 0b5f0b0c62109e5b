"""The causal depthwise conv1d of Mamba's mixer as K shifted multiply-adds (exact, any device)."""

from __future__ import annotations

from typing import Any


def causal_conv1d_taps(x: Any, w: Any, bias: Any) -> Any:
    """Causal depthwise conv of x (b, c, l) with w (c, k): y_t = bias + sum_j w_j x_{t-k+1+j}."""
    k, length = w.shape[1], x.shape[-1]
    y = (x * w[:, k - 1 : k]).add_(bias[:, None])
    for j in range(1, min(k, length)):
        y[..., j:].addcmul_(x[..., : length - j], w[:, k - 1 - j : k - j])
    return y
