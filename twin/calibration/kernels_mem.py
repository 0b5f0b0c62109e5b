"""Memory-bound kernels of the harness: causal conv1d, element-wise passes, copies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from twin.calibration.kernels import Kernel, Runner, Shape, SweepContext
from twin.costmodel import features as ft
from twin.costmodel import ssm_features as ssm_ft
from twin.torch_ops.conv import causal_conv1d_taps


class Conv1d(Kernel):
    """Causal depthwise conv1d (Mamba2's, over x, B and C channels)."""

    name = "conv1d"
    axes: ClassVar = {
        "cpu-tiny": {"b": [1, 4], "l": [1, 64, 256], "c": [256, 1024], "k": [4]},
        "cpu": {"b": [1, 4], "l": [1, 64, 512, 2048], "c": [512, 2048, 4096], "k": [4]},
        "cuda": {"b": [1, 8], "l": [1, 256, 2048, 16384], "c": [4352, 8448, 16640], "k": [4]},
    }

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        m = ctx.model
        if not m.n_ssm_layers:
            return []
        return [
            {"b": 1, "l": n, "c": m.conv_channels, "k": m.ssm_conv_kernel}
            for n in self.axis(ctx, "l")
        ]

    def features(self, shape: Shape, e: int) -> ft.Features:
        return ssm_ft.conv1d_features(shape["b"], shape["l"], shape["c"], shape["k"], e)

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        t = ctx.torch
        b, length, c, k = shape["b"], shape["l"], shape["c"], shape["k"]
        g = ctx.generator(b * 31 + length * 7 + c)
        sets = ctx.rotating(
            (ctx.randn(b, c, length, gen=g), ctx.randn(c, k, gen=g), ctx.randn(c, gen=g)), nbuf
        )
        if ctx.device != "cuda":
            # torch's CPU conv1d picks among oneDNN paths whose speed swung 7x between
            # runs here; the tap-by-tap form is what causal-conv1d computes, steadily.
            ctx.notes["conv1d"] = "K shifted multiply-adds (twin.torch_ops.conv.causal_conv1d_taps)"
            return lambda i: causal_conv1d_taps(*sets[i % nbuf])
        fast = _causal_conv1d_fn(ctx)
        conv = t.nn.functional.conv1d

        def run(i: int) -> Any:
            x, w, bias = sets[i % nbuf]
            if fast is not None:
                return fast(x, w, bias, activation="silu")
            return conv(x, w[:, None, :], bias, padding=k - 1, groups=c)[..., :length]

        return run


def _causal_conv1d_fn(ctx: SweepContext) -> Callable[..., Any] | None:
    """``causal_conv1d_fn`` from the causal-conv1d package when importable, else None."""
    try:
        from causal_conv1d import causal_conv1d_fn
    except Exception as err:  # ImportError, or its CUDA extension failing to load
        ctx.notes["conv1d"] = f"torch conv1d (causal_conv1d unavailable: {type(err).__name__})"
        return None
    ctx.notes["conv1d"] = "causal_conv1d.causal_conv1d_fn"
    return causal_conv1d_fn


class Elementwise(Kernel):
    """RMSNorm over rows x width: the element-wise bandwidth of norms and activations."""

    name = "elementwise"
    axes: ClassVar = {
        "cpu-tiny": {"rows": [1, 16, 256, 1024], "width": [256, 1024]},
        "cpu": {"rows": [1, 16, 256, 2048, 8192], "width": [256, 1024, 4096]},
        "cuda": {"rows": [1, 64, 1024, 8192, 65536], "width": [1024, 4096, 8192, 16384]},
    }

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        m = ctx.model
        widths = sorted({m.d_model, m.d_inner} if m.n_ssm_layers else {m.d_model})
        return [{"rows": r, "width": w} for r in self.axis(ctx, "rows") for w in widths]

    def features(self, shape: Shape, e: int) -> ft.Features:
        return ft.elementwise_features(shape["rows"], shape["width"], e)

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        t = ctx.torch
        rows, width = shape["rows"], shape["width"]
        g = ctx.generator(rows * 7 + width)
        sets = ctx.rotating(ctx.randn(rows, width, gen=g), nbuf)
        weight = ctx.randn(width, gen=g)
        norm = t.nn.functional.rms_norm

        def run(i: int) -> Any:
            return norm(sets[i % nbuf], (width,), weight, 1e-6)

        return run


class _Copy(Kernel):
    """A copy of ``nbytes``; on the CPU all three directions are plain memcpys."""

    src_host: ClassVar[bool] = False
    dst_host: ClassVar[bool] = False
    axes: ClassVar = {
        "cpu-tiny": {"nbytes": [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]},
        "cpu": {"nbytes": [1 << s for s in range(12, 29, 2)]},  # 4 KB .. 256 MB
        "cuda": {"nbytes": [1 << s for s in range(12, 31)]},  # 4 KB .. 1 GB
    }

    def features(self, shape: Shape, e: int) -> ft.Features:
        return ft.copy_features(shape["nbytes"], self.name)

    def set_bytes(self, shape: Shape, e: int) -> int:
        return 2 * shape["nbytes"]

    max_buffers = 4096  # views into one arena: small copies rotate through MBs too

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        t, nbytes = ctx.torch, shape["nbytes"]
        g = ctx.generator(nbytes.bit_length())
        gpu = ctx.device == "cuda"

        def arena(host: bool) -> Any:
            if gpu and host:
                return t.empty(nbuf * nbytes, dtype=t.uint8, pin_memory=True)
            return t.empty(nbuf * nbytes, dtype=t.uint8, device=ctx.device)

        src, dst = arena(self.src_host), arena(self.dst_host)
        noise = t.randint(1, 255, (nbytes,), dtype=t.uint8, generator=g, device=ctx.device)
        srcs = [src[j * nbytes : (j + 1) * nbytes] for j in range(nbuf)]
        dsts = [dst[j * nbytes : (j + 1) * nbytes] for j in range(nbuf)]
        for s in srcs:
            s.copy_(noise)
        for d in dsts:  # touch every destination page now, not while timing
            d.fill_(1)
        del noise

        def run(i: int) -> Any:
            return dsts[i % nbuf].copy_(srcs[i % nbuf], non_blocking=gpu)

        return run


class CopyD2D(_Copy):
    name = "copy_d2d"


class CopyH2D(_Copy):
    name = "copy_h2d"
    src_host = True


class CopyD2H(_Copy):
    name = "copy_d2h"
    dst_host = True
