"""The PyTorch SSD chunked scan equals the naive sequential recurrence."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from twin.torch_ops.ssd import ssd_chunked, ssd_sequential, ssd_step  # noqa: E402


def _inputs(
    b: int,
    length: int,
    h: int,
    p: int,
    n: int,
    g: int,
    seed: int,
    dtype: torch.dtype = torch.float64,
) -> dict:
    gen = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    return {
        "x": r(b, length, h, p),
        "dt": r(b, length, h),
        "A": -torch.rand(h, generator=gen, dtype=dtype) - 0.1,
        "B": r(b, length, g, n),
        "C": r(b, length, g, n),
        "D": r(h),
        "dt_bias": r(h),
    }


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    ("b", "length", "h", "p", "n", "g", "chunk"),
    [
        (1, 64, 2, 4, 8, 1, 16),  # whole chunks
        (2, 37, 4, 8, 16, 2, 8),  # a partial last chunk, two groups
        (1, 5, 2, 4, 8, 1, 16),  # shorter than one chunk
        (3, 50, 8, 4, 8, 4, 7),  # odd chunk size, four groups
        (1, 33, 4, 2, 4, 4, 1),  # chunk of one token: pure state passing
    ],
)
def test_chunked_scan_equals_sequential_recurrence(b, length, h, p, n, g, chunk) -> None:
    s = _inputs(b, length, h, p, n, g, seed=length)
    init = torch.randn(b, h, p, n, dtype=torch.float64)
    for initial in (None, init):
        y_ref, st_ref = ssd_sequential(
            s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["dt_bias"], True, initial
        )
        y, st = ssd_chunked(
            s["x"], s["dt"], s["A"], s["B"], s["C"], chunk, s["D"], s["dt_bias"], True, initial
        )
        assert y.shape == y_ref.shape and st.shape == st_ref.shape
        assert _rel(y, y_ref) < 1e-12
        assert _rel(st, st_ref) < 1e-12


def test_chunked_scan_float32_is_close() -> None:
    s = _inputs(2, 100, 4, 16, 16, 1, seed=1, dtype=torch.float32)
    y_ref, _ = ssd_sequential(*(s[k].double() for k in ("x", "dt", "A", "B", "C", "D")))
    y, _ = ssd_chunked(s["x"], s["dt"], s["A"], s["B"], s["C"], 32, s["D"])
    assert _rel(y.double(), y_ref) < 1e-4


def test_state_is_resumable_across_calls() -> None:
    """Scanning a prefix, then the rest from its state, equals one scan: a checkpoint works."""
    s = _inputs(1, 48, 2, 4, 8, 1, seed=5)
    full, st_full = ssd_chunked(s["x"], s["dt"], s["A"], s["B"], s["C"], 16, dt_softplus=True)
    cut = 20
    first, st = ssd_chunked(
        *(s[k][:, :cut] for k in ("x", "dt")),
        s["A"],
        *(s[k][:, :cut] for k in ("B", "C")),
        16,
        dt_softplus=True,
    )
    rest, st2 = ssd_chunked(
        *(s[k][:, cut:] for k in ("x", "dt")),
        s["A"],
        *(s[k][:, cut:] for k in ("B", "C")),
        16,
        dt_softplus=True,
        initial_states=st,
    )
    assert _rel(torch.cat([first, rest], dim=1), full) < 1e-12
    assert _rel(st2, st_full) < 1e-12


def test_decode_step_continues_the_scan() -> None:
    s = _inputs(2, 12, 4, 4, 8, 2, seed=9)
    y_ref, st_ref = ssd_sequential(
        s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["dt_bias"], True
    )
    state = torch.zeros(2, 4, 4, 8, dtype=torch.float64)
    ys = [
        ssd_step(
            state,
            s["x"][:, t],
            s["dt"][:, t],
            s["A"],
            s["B"][:, t],
            s["C"][:, t],
            s["D"],
            s["dt_bias"],
            True,
        )
        for t in range(12)
    ]
    assert _rel(torch.stack(ys, dim=1), y_ref) < 1e-12
    assert _rel(state, st_ref) < 1e-12
