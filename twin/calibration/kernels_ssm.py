"""The Mamba2 kernels: the chunked scan (prefill) and the one-token state update (decode).

On a GPU with ``mamba_ssm`` they time its Triton kernels, loaded by
``twin.torch_ops.mamba_triton`` (with or without the package ``__init__``).
If that fails (or there is no GPU) the exact PyTorch reference
(``twin.torch_ops.ssd``) is timed instead, and the reason is recorded in the
profile's provenance (``implementations``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from twin.calibration.kernels import Kernel, Runner, Shape, SweepContext
from twin.costmodel import features as ft
from twin.costmodel import ssm_features as ssm_ft
from twin.torch_ops.mamba_triton import import_mamba_triton


def _ssm_inputs(ctx: SweepContext, shape: Shape, gen: Any, tokens: tuple[int, ...]) -> dict:
    """Random x, dt, A, B, C, D, dt_bias of Mamba2's dtypes (A, D, dt_bias in fp32)."""
    t = ctx.torch
    h, p, n, g = shape["h"], shape["p"], shape["n"], shape["g"]
    f32 = t.float32
    return {
        "x": ctx.randn(*tokens, h, p, gen=gen),
        "dt": ctx.randn(*tokens, h, gen=gen) * 0.5 - 2.0,  # softplus -> dt ~ 0.1, as trained
        "B": ctx.randn(*tokens, g, n, gen=gen),
        "C": ctx.randn(*tokens, g, n, gen=gen),
        "A": -t.exp(ctx.randn(h, gen=gen, dtype=f32) * 0.5),  # A = -exp(A_log) < 0
        "D": ctx.randn(h, gen=gen, dtype=f32),
        "dt_bias": ctx.randn(h, gen=gen, dtype=f32) * 0.1,
    }


class _Mamba2Kernel(Kernel):
    """A Mamba2 kernel: its heads split evenly among its B/C groups."""

    def valid(self, shape: Shape, ctx: SweepContext) -> bool:
        return shape["h"] % shape["g"] == 0 and super().valid(shape, ctx)

    def implementation(
        self, ctx: SweepContext, triton: tuple[str, str], reference: tuple[str, str]
    ) -> tuple[Callable[..., Any], bool]:
        """mamba_ssm's Triton kernel ``triton`` (module, name) on a GPU; else the PyTorch
        reference ``reference`` (name in ``twin.torch_ops.ssd``, label; the Triton kernel's
        arguments) and True. Which, and why: ``ctx.notes`` (``implementations``)."""
        fn, note = import_mamba_triton(*triton) if ctx.device == "cuda" else (None, "no GPU")
        is_reference = fn is None
        if fn is None:
            from twin.torch_ops import ssd

            fn, note = getattr(ssd, reference[0]), f"{reference[1]}: {note}"
        ctx.notes[self.name] = note
        return fn, is_reference


class SsmScan(_Mamba2Kernel):
    """``mamba_chunk_scan_combined`` (GPU) or the PyTorch SSD reference, over one batch."""

    name = "ssm_scan"
    axes: ClassVar = {
        "cpu-tiny": {
            "b": [1],
            "l": [32, 128, 512],
            "h": [4, 8],
            "p": [32],
            "n": [16, 64],
            "g": [1],
            "q": [32, 64],
        },
        "cpu": {
            "b": [1, 2],
            "l": [64, 256, 1024, 2048],
            "h": [4, 16],
            "p": [64],
            "n": [16, 64, 128],
            "g": [1],
            "q": [64, 128],
        },
        "cuda": {
            "b": [1, 4],
            "l": [256, 1024, 4096, 16384],
            "h": [32, 64, 128],
            "p": [64],
            "n": [64, 128],
            "g": [1, 8],
            "q": [128, 256],
        },
    }

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        m = ctx.model
        if not m.n_ssm_layers:
            return []
        return [
            {
                "b": 1,
                "l": n,
                "h": m.n_ssm_heads,
                "p": m.ssm_head_dim,
                "n": m.ssm_d_state,
                "g": m.ssm_groups,
                "q": m.ssm_chunk_size,
            }
            for n in self.axis(ctx, "l")
        ]

    def features(self, shape: Shape, e: int) -> ft.Features:
        return ssm_ft.ssm_scan_features(
            shape["b"], shape["l"], shape["h"], shape["p"], shape["n"], shape["g"], shape["q"], e
        )

    def measured_features(self, shape: Shape, ctx: SweepContext) -> ft.Features:
        """The PyTorch reference materialises its (heads x chunk x chunk) decay and score
        tensors in fp32, about 8 passes over them (``ssd_chunked``); the Triton kernel
        keeps them on chip. Rows of the reference record those bytes too."""
        flops, nbytes, extras = self.features(shape, ctx.dtype_bytes)
        if not ctx.notes.get("ssm_scan", "").startswith("PyTorch"):
            return flops, nbytes, extras
        q = shape["q"]
        padded = shape["b"] * -(-shape["l"] // q) * q
        return flops, nbytes + 32.0 * shape["h"] * padded * q, extras

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        b, length, q = shape["b"], shape["l"], shape["q"]
        gen = ctx.generator(b * 131 + length * 17 + shape["h"] * 5 + shape["n"] + q)
        sets = ctx.rotating(_ssm_inputs(ctx, shape, gen, (b, length)), nbuf)
        scan, _ = self.implementation(
            ctx,
            ("ops.triton.ssd_combined", "mamba_chunk_scan_combined"),
            ("ssd_chunked", "PyTorch SSD reference (twin.torch_ops.ssd)"),
        )

        def run(i: int) -> Any:
            s = sets[i % nbuf]
            args = (s[k] for k in ("x", "dt", "A", "B", "C"))
            return scan(*args, q, D=s["D"], dt_bias=s["dt_bias"], dt_softplus=True)

        return run


class SsmStep(_Mamba2Kernel):
    """One decode token per sequence: ``selective_state_update`` (GPU) or ``ssd_step``."""

    name = "ssm_step"
    axes: ClassVar = {
        "cpu-tiny": {"b": [1, 8, 32], "h": [8, 32], "p": [32], "n": [16, 64], "g": [1]},
        "cpu": {"b": [1, 8, 32, 128], "h": [8, 32, 64], "p": [64], "n": [16, 64, 128], "g": [1]},
        "cuda": {
            "b": [1, 8, 32, 128, 512],
            "h": [32, 64, 128],
            "p": [64],
            "n": [64, 128],
            "g": [1, 8],
        },
    }

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        m = ctx.model
        if not m.n_ssm_layers:
            return []
        return [
            {"b": b, "h": m.n_ssm_heads, "p": m.ssm_head_dim, "n": m.ssm_d_state, "g": m.ssm_groups}
            for b in self.axis(ctx, "b")
        ]

    def features(self, shape: Shape, e: int) -> ft.Features:
        # Mamba2 keeps the recurrent state in the activation dtype by default.
        return ssm_ft.ssm_step_features(
            shape["b"], shape["h"], shape["p"], shape["n"], shape["g"], e, e
        )

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        b, h, p, n = shape["b"], shape["h"], shape["p"], shape["n"]
        gen = ctx.generator(b * 131 + h * 17 + n)
        one = _ssm_inputs(ctx, shape, gen, (b,))
        one["state"] = ctx.randn(b, h, p, n, gen=gen)
        sets = ctx.rotating(one, nbuf)
        step, reference = self.implementation(
            ctx,
            ("ops.triton.selective_state_update", "selective_state_update"),
            ("ssd_step", "PyTorch reference (twin.torch_ops.ssd.ssd_step)"),
        )
        if not reference:
            # selective_state_update's Mamba2 layout: per-channel dt, A, D, dt_bias broadcast
            # over headdim (and A over d_state) as stride-0 views, as Mamba2.step builds them.
            for s in sets:
                s["dt"] = s["dt"][..., None].expand(b, h, p)
                s["A"] = s["A"][:, None, None].expand(h, p, n)
                s["D"] = s["D"][:, None].expand(h, p)
                s["dt_bias"] = s["dt_bias"][:, None].expand(h, p)

        def run(i: int) -> Any:
            s = sets[i % nbuf]
            args = (s[k] for k in ("state", "x", "dt", "A", "B", "C"))
            return step(*args, D=s["D"], dt_bias=s["dt_bias"], dt_softplus=True)

        return run
