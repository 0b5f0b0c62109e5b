"""The kernels the harness times, one small class each, in one registry.

Each kernel knows its shape grid (per device class and sweep level), the FLOPs
and bytes of a shape (``twin.costmodel.features``, the same functions the cost
model prices with), and how to build a callable over rotating random input
buffers. Torch is only touched inside ``build``: this module imports without it.

Attention is swept with as many KV heads as query heads (plain MHA): PyTorch's
SDPA dispatch for grouped KV heads differs across backends, and the fitted
model is in FLOPs and bytes, so a GQA model's smaller KV reads are priced
through its bytes. The Mamba2 kernels live in ``calibration.kernels_ssm``, the
memory-bound ones (conv1d, element-wise, copies) in ``calibration.kernels_mem``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.model import ModelSpec

LEVELS = ("tiny", "quick", "full")
DEFAULT_SHAPE_MODEL = "marconi-hybrid-7b"  # the paper's hybrid: its GEMMs seed the GPU grid
# Shapes per kernel at each level (None: the whole grid). tiny is the test
# suite's (seconds), quick is CI's (under a minute on 2 cores).
LEVEL_COUNTS: dict[str, int | None] = {"tiny": 8, "quick": 16, "full": None}

# Largest (FLOPs, bytes) of one call on a CPU at the short levels: a few tens of
# milliseconds at the ~90 GFLOP/s and ~15 GB/s one core of this machine kind does.
CPU_WORK_CAP: dict[str, tuple[float, float]] = {"tiny": (3e8, 6e7), "quick": (2e9, 3e8)}

Shape = dict[str, int]
Runner = Callable[[int], Any]


@dataclass
class SweepContext:
    """What a kernel needs to build its grid and inputs."""

    torch: Any  # the torch module (imported by the caller)
    device: str  # "cpu" or "cuda"
    dtype: Any  # torch dtype of activations and weights
    dtype_bytes: int
    level: str
    model: ModelSpec  # its projection shapes seed the GPU GEMM grid
    seed: int = 0
    cache_bytes: int = 64 << 20  # rotate inputs through at least 2x this (L2 / LLC)
    mem_cap_bytes: int = 1 << 30  # most bytes one shape's buffers may take
    notes: dict[str, str] = field(default_factory=dict)  # implementation notes -> provenance
    model_only: bool = False  # sweep only the model's own shapes (kernels that have them)
    # GPU: time eagerly (host launch gaps included) instead of CUDA-graph replay; only
    # for describing an eager executor (``twin validate``), never production profiles.
    eager: bool = False
    # The GPU's SMs (``twin.hardware.SM_COUNTS``; None on a CPU or where not tabulated):
    # a GEMM row's waves of output tiles (``features.gemm_wave_k``), as serving prices them
    # from the profile's GPU.
    sms: int | None = None

    @property
    def grid_key(self) -> str:
        """Which axis lists to use: cpu-tiny, cpu or cuda."""
        if self.device == "cuda":
            return "cuda"
        return "cpu-tiny" if self.level == "tiny" else "cpu"

    def randn(self, *shape: int, dtype: Any = None, gen: Any = None) -> Any:
        """Random normal tensor on the device (never zeros: METHOD.md)."""
        t = self.torch
        return t.randn(*shape, generator=gen, device=self.device, dtype=dtype or self.dtype)

    def rotating(self, one: Any, nbuf: int) -> list[Any]:
        """``one`` input set (tensor, tuple or dict of tensors) and nbuf - 1 copies of it.

        The copies sit at other addresses, which is all rotation needs against the
        cache; cloning is much faster than drawing fresh random numbers.
        """

        def clone(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: clone(v) for k, v in x.items()}
            if isinstance(x, tuple):
                return tuple(clone(v) for v in x)
            return x.clone()

        return [one] + [clone(one) for _ in range(nbuf - 1)]

    def generator(self, salt: int) -> Any:
        """A seeded generator on the device for one shape."""
        g = self.torch.Generator(device=self.device)
        g.manual_seed(self.seed * 1_000_003 + salt)
        return g


class Kernel:
    """One timed kernel: grid, features, inputs."""

    name: ClassVar[str]
    axes: ClassVar[dict[str, dict[str, list[int]]]]  # grid_key -> axis -> values

    def valid(self, shape: Shape, ctx: SweepContext) -> bool:
        """Drop shapes that do not fit the memory cap, or the level's work cap on a CPU."""
        if self.set_bytes(shape, ctx.dtype_bytes) * 2 > ctx.mem_cap_bytes:
            return False
        cap = CPU_WORK_CAP.get(ctx.level) if ctx.device == "cpu" else None
        if cap is None:
            return True
        flops, nbytes, _ = self.features(shape, ctx.dtype_bytes)
        return flops <= cap[0] and nbytes <= cap[1]

    def full_grid(self, ctx: SweepContext) -> list[Shape]:
        """The Cartesian product of this device class's axes, filtered."""
        axes = self.axes[ctx.grid_key]
        names = list(axes)
        shapes = [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(axes[n] for n in names))
        ]
        return [s for s in shapes if self.valid(s, ctx)]

    def grid(self, ctx: SweepContext) -> list[Shape]:
        """The shapes of this level: a seeded sample of the full grid, plus every shape
        the context's model runs (at the grid's token counts), so that the fit is
        anchored where the model will be priced whatever the level."""
        own = self.model_grid(ctx)
        shapes = [] if ctx.model_only and own else self.full_grid(ctx)
        count = LEVEL_COUNTS[ctx.level]
        if count is not None and len(shapes) > count:
            rng = random.Random(f"{self.name}-{ctx.seed}")
            keep = sorted(rng.sample(range(len(shapes)), count))
            shapes = [shapes[i] for i in keep]
        cap = CPU_WORK_CAP["quick"] if ctx.device == "cpu" else None
        for s in own:
            if s in shapes or not self.valid(s, ctx):
                continue
            flops, nbytes, _ = self.features(s, ctx.dtype_bytes)
            if cap is None or (flops <= cap[0] and nbytes <= cap[1]):
                shapes.append(s)
        return shapes

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        """The shapes ``ctx.model`` runs through this kernel ([]: none, or in the grid)."""
        return []

    def axis(self, ctx: SweepContext, name: str) -> list[int]:
        """One axis of this device class's grid (the token counts model shapes use)."""
        return list(self.axes[ctx.grid_key][name])

    def features(self, shape: Shape, e: int) -> ft.Features:
        """FLOPs, bytes and extra features of one shape."""
        raise NotImplementedError

    def measured_features(self, shape: Shape, ctx: SweepContext) -> ft.Features:
        """Features of the work this device's implementation does (what rows record)."""
        return self.features(shape, ctx.dtype_bytes)

    def set_bytes(self, shape: Shape, e: int) -> int:
        """Bytes of one input set (what rotating buffers multiply)."""
        return int(self.features(shape, e)[1])

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        """A callable ``run(i)`` over ``nbuf`` random input sets."""
        raise NotImplementedError

    max_buffers: ClassVar[int] = 64  # clones are cheap, Python lists of them too

    def n_buffers(self, shape: Shape, ctx: SweepContext) -> int:
        """Enough input sets to spill the cache (twice over), within the memory cap."""
        one = max(self.set_bytes(shape, ctx.dtype_bytes), 1)
        want = math.ceil(2 * ctx.cache_bytes / one)
        fits = max(ctx.mem_cap_bytes // one, 1)
        return int(max(1, min(self.max_buffers, max(2, want), fits)))


# ---------------------------------------------------------------- GEMM
def model_gemm_shapes(m: ModelSpec, tps: tuple[int, ...] = (1, 2)) -> list[tuple[int, int]]:
    """(k, n) of the model's projections and MLP, split for tensor parallelism."""
    d = m.d_model
    out: set[tuple[int, int]] = set()
    for tp in tps:
        if m.n_attention_layers:
            q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
            out |= {(d, (q + 2 * kv) // tp), (q // tp, d)}
        if m.n_ssm_layers:
            width = 2 * m.d_inner + 2 * m.ssm_groups * m.ssm_d_state + m.n_ssm_heads
            out |= {(d, width // tp), (m.d_inner // tp, d)}
        if m.n_mlp_layers:
            out |= {(d, (2 if m.mlp_gated else 1) * m.mlp_d_ff // tp), (m.mlp_d_ff // tp, d)}
    return sorted(out)


class Gemm(Kernel):
    """(m x k) @ (k x n)^T as ``F.linear`` computes it, over token counts m."""

    name = "gemm"
    axes: ClassVar = {
        "cpu-tiny": {"m": [1, 8, 64, 256], "k": [256, 512], "n": [256, 1024]},
        "cpu": {"m": [1, 4, 16, 64, 256, 1024], "k": [256, 1024, 2048], "n": [256, 1024, 3072]},
        "cuda": {"m": [1, 4, 16, 64, 256, 1024, 4096, 16384]},  # (k, n) from the model
    }

    def full_grid(self, ctx: SweepContext) -> list[Shape]:
        if ctx.grid_key != "cuda":
            return super().full_grid(ctx)
        kn = model_gemm_shapes(ctx.model)
        shapes = [{"m": m, "k": k, "n": n} for m in self.axes["cuda"]["m"] for k, n in kn]
        return [s for s in shapes if self.valid(s, ctx)]

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        if ctx.grid_key == "cuda":  # the full grid is the model's already
            return []
        return [
            {"m": m, "k": k, "n": n}
            for m in self.axis(ctx, "m")
            for k, n in model_gemm_shapes(ctx.model, (1,))
        ]

    def features(self, shape: Shape, e: int) -> ft.Features:
        return ft.gemm_features(shape["m"], shape["k"], shape["n"], e)

    def measured_features(self, shape: Shape, ctx: SweepContext) -> ft.Features:
        # With the GPU's SMs: the fit reads the waves a serving step passes (``wave_k``).
        return ft.gemm_features(shape["m"], shape["k"], shape["n"], ctx.dtype_bytes, ctx.sms)

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        t, (m, k, n) = ctx.torch, (shape["m"], shape["k"], shape["n"])
        g = ctx.generator(m * 7 + k * 13 + n)
        sets = ctx.rotating((ctx.randn(m, k, gen=g), ctx.randn(n, k, gen=g) / math.sqrt(k)), nbuf)
        outs = [t.empty(m, n, device=ctx.device, dtype=ctx.dtype) for _ in range(nbuf)]

        def run(i: int) -> Any:
            a, w = sets[i % nbuf]
            return t.mm(a, w.t(), out=outs[i % nbuf])

        return run


# ---------------------------------------------------------------- attention
class AttnPrefill(Kernel):
    """Causal SDPA of n new tokens over c cached + n new keys (flash backend on GPU)."""

    name = "attn_prefill"
    axes: ClassVar = {
        "cpu-tiny": {"n": [16, 64, 128], "c": [0, 128], "h": [4], "d": [32, 64]},
        "cpu": {
            "n": [16, 64, 256, 512, 2048],
            "c": [0, 256, 1024, 4096],
            "h": [4, 8],
            "d": [64, 128],
        },
        "cuda": {"n": [128, 512, 2048, 8192], "c": [0, 2048, 16384], "h": [8, 32], "d": [64, 128]},
    }

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        m = ctx.model
        if not m.n_attention_layers:
            return []
        return [
            {"n": n, "c": c, "h": m.n_heads, "d": m.head_dim}
            for n in self.axis(ctx, "n")
            for c in self.axis(ctx, "c")
        ]

    def features(self, shape: Shape, e: int) -> ft.Features:
        h = shape["h"]
        return ft.attn_prefill_features(shape["n"], shape["c"], h, h, shape["d"], e)

    def measured_features(self, shape: Shape, ctx: SweepContext) -> ft.Features:
        """On the CPU the causal mask is materialised (see ``build``) and SDPA's CPU
        kernel computes every query-key block: the rows record that rectangle. GPUs
        run flash attention, which skips the masked blocks."""
        flops, nbytes, extras = self.features(shape, ctx.dtype_bytes)
        if ctx.device == "cuda":
            return flops, nbytes, extras
        n, c, h, d = shape["n"], shape["c"], shape["h"], shape["d"]
        pairs = n * (n + c)
        return 4.0 * h * d * pairs, nbytes, {**extras, "score_elems": float(h * pairs)}

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        t = ctx.torch
        sdpa = t.nn.functional.scaled_dot_product_attention
        n, c, h, d = shape["n"], shape["c"], shape["h"], shape["d"]
        g = ctx.generator(n * 31 + c * 7 + h * 3 + d)
        sets = ctx.rotating(
            tuple(ctx.randn(1, h, length, d, gen=g) for length in (n, c + n, c + n)), nbuf
        )
        mask: Any = None
        if ctx.device != "cuda":
            # One code path on the CPU, with or without a cached prefix: an explicit
            # bottom-right causal mask (its `is_causal` kernel skips blocks at a tile
            # granularity the features cannot see; the mask path computes them all).
            mask = t.ones(n, c + n, dtype=t.bool).tril(diagonal=c)
        elif c:  # queries aligned to the end of the keys: the cached-prefix case
            from torch.nn.attention.bias import causal_lower_right

            mask = causal_lower_right(n, c + n)
        backends = _flash_backends(t) if ctx.device == "cuda" else None

        def run(i: int) -> Any:
            q, k, v = sets[i % nbuf]
            with _maybe_backends(t, backends):
                if mask is None:
                    return sdpa(q, k, v, is_causal=True)
                return sdpa(q, k, v, attn_mask=mask)

        return run


class AttnDecode(Kernel):
    """One query token per sequence over a context of c keys (batch b)."""

    name = "attn_decode"
    axes: ClassVar = {
        "cpu-tiny": {"b": [1, 4, 16], "c": [64, 256, 1024], "h": [4], "d": [64]},
        "cpu": {"b": [1, 4, 16, 32], "c": [128, 512, 2048, 4096], "h": [8], "d": [64, 128]},
        "cuda": {"b": [1, 8, 32, 128], "c": [512, 4096, 32768], "h": [8, 32], "d": [128]},
    }

    def model_grid(self, ctx: SweepContext) -> list[Shape]:
        m = ctx.model
        if not m.n_attention_layers:
            return []
        return [
            {"b": b, "c": c, "h": m.n_heads, "d": m.head_dim}
            for b in self.axis(ctx, "b")
            for c in self.axis(ctx, "c")
        ]

    def features(self, shape: Shape, e: int) -> ft.Features:
        h = shape["h"]
        return ft.attn_decode_features(shape["b"], shape["c"], h, h, shape["d"], e)

    def measured_features(self, shape: Shape, ctx: SweepContext) -> ft.Features:
        # With the GPU's SMs: the fit reads the launch's waves a serving step passes
        # (``waves_d``; none on a CPU).
        h = shape["h"]
        return ft.attn_decode_features(
            shape["b"], shape["c"], h, h, shape["d"], ctx.dtype_bytes, sms=ctx.sms
        )

    def build(self, shape: Shape, ctx: SweepContext, nbuf: int) -> Runner:
        t = ctx.torch
        sdpa = t.nn.functional.scaled_dot_product_attention
        b, c, h, d = shape["b"], shape["c"], shape["h"], shape["d"]
        g = ctx.generator(b * 31 + c * 7 + h * 3 + d)
        sets = ctx.rotating(
            (
                ctx.randn(b, h, 1, d, gen=g),
                ctx.randn(b, h, c, d, gen=g),
                ctx.randn(b, h, c, d, gen=g),
            ),
            nbuf,
        )
        backends = _flash_backends(t) if ctx.device == "cuda" else None

        def run(i: int) -> Any:
            q, k, v = sets[i % nbuf]
            with _maybe_backends(t, backends):
                return sdpa(q, k, v)

        return run


def _flash_backends(torch: Any) -> list[Any]:
    from torch.nn.attention import SDPBackend

    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


def _maybe_backends(torch: Any, backends: list[Any] | None) -> Any:
    import contextlib

    if backends is None:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(backends)


def registry() -> dict[str, Kernel]:
    """Every kernel the harness times, by name, in formula order."""
    from twin.calibration.kernels_mem import Conv1d, CopyD2D, CopyD2H, CopyH2D, Elementwise
    from twin.calibration.kernels_ssm import SsmScan, SsmStep

    kernels: list[Kernel] = [
        Gemm(),
        AttnPrefill(),
        AttnDecode(),
        SsmScan(),
        SsmStep(),
        Conv1d(),
        Elementwise(),
        CopyD2D(),
        CopyH2D(),
        CopyD2H(),
    ]
    out = {k.name: k for k in kernels}
    assert set(out) == set(fm.KERNELS), "every kernel needs a formula and vice versa"
    return out
