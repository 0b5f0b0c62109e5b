"""The kernels the reference executor runs: the same implementations ``twin calibrate`` times.

A prediction is only as good as the match between what was calibrated and
what runs, so each op here is the one the harness measured on that device
(``twin/calibration/kernels*.py``): ``F.linear`` GEMMs, ``F.rms_norm``, SDPA with a
bottom-right causal mask (flash/efficient backends on a GPU), the causal
conv1d as K shifted multiply-adds on the CPU and ``F.conv1d`` on a GPU, and
the Mamba2 chunked scan from ``mamba_ssm``'s Triton kernels on a GPU or the
exact PyTorch SSD reference (``twin.torch_ops.ssd``) elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from twin.torch_ops.conv import causal_conv1d_taps
from twin.torch_ops.mamba_triton import import_mamba_triton
from twin.torch_ops.recurrent_refs import sliding_window_attention
from twin.torch_ops.ssd import ssd_chunked

Scan = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class Ops:
    """Device-specific attention, conv and scan; ``notes`` says which implementation runs."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device == "cuda"
        self.notes: dict[str, str] = {"gemm": "F.linear", "elementwise": "F.rms_norm + eager ops"}
        self._scan = self._pick_scan()
        if self.cuda:
            self.notes["attention"] = "SDPA (flash / memory-efficient backends)"
            self.notes["conv1d"] = "F.conv1d depthwise"
        else:
            self.notes["attention"] = "SDPA with an explicit bottom-right causal mask"
            self.notes["conv1d"] = "K shifted multiply-adds (calibration.kernels_mem)"

    # ------------------------------------------------------------------ attention
    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of q (1, h, n, d) over k, v (1, kvh, c + n, d), queries at the end."""
        n, total = q.shape[2], k.shape[2]
        c = total - n
        if k.shape[1] != q.shape[1]:  # GQA: heads share KV heads in consecutive groups
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        sdpa = F.scaled_dot_product_attention
        if not self.cuda:
            mask = torch.ones(n, total, dtype=torch.bool).tril(diagonal=c)
            return sdpa(q, k, v, attn_mask=mask)
        with _gpu_backends():
            if c == 0:
                return sdpa(q, k, v, is_causal=True)
            from torch.nn.attention.bias import causal_lower_right

            return sdpa(q, k, v, attn_mask=causal_lower_right(n, total))

    def window_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int
    ) -> torch.Tensor:
        """Sliding-window causal attention: each query sees the ``window`` keys ending at
        it (twin.torch_ops.recurrent_refs, an explicit band mask on every device)."""
        if k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return sliding_window_attention(q, k, v, window)

    # ------------------------------------------------------------------ conv
    def conv(self, xpad: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Depthwise causal conv of xpad (1, c, k - 1 + n) with w (c, k): the last n outputs."""
        k = w.shape[1]
        if self.cuda:
            return F.conv1d(xpad, w[:, None, :], bias, groups=w.shape[0])
        return causal_conv1d_taps(xpad, w, bias)[..., k - 1 :]

    # ------------------------------------------------------------------ scan
    def scan(
        self,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        chunk: int,
        D: torch.Tensor,
        dt_bias: torch.Tensor,
        initial: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mamba2 SSD scan of one segment: (y (1, l, h, p), final state (1, h, p, n))."""
        return self._scan(x, dt, A, B, C, chunk, D, dt_bias, initial)

    def _pick_scan(self) -> Scan:
        fn, note = (None, "no GPU")
        if self.cuda:
            fn, note = import_mamba_triton("ops.triton.ssd_combined", "mamba_chunk_scan_combined")
        if fn is not None:  # mamba_ssm's kernel returns its final state only when asked
            self.notes["ssm_scan"] = note
            kernel, flags = fn, {"dt_softplus": True, "return_final_states": True}
        else:
            self.notes["ssm_scan"] = f"PyTorch SSD reference (twin.torch_ops.ssd): {note}"
            kernel, flags = ssd_chunked, {"dt_softplus": True}

        def scan(
            x: Any, dt: Any, A: Any, B: Any, C: Any, q: int, D: Any, dt_bias: Any, initial: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            y, state = kernel(
                x, dt, A, B, C, q, D=D, dt_bias=dt_bias, initial_states=initial, **flags
            )
            return y, state

        return scan


def _gpu_backends() -> Any:
    """Flash, then memory-efficient attention: the backends ``twin calibrate`` timed."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - older torch
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])


def synchronize(device: str) -> None:
    """Wait for queued device work (a no-op on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()
