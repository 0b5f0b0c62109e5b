"""Exact CPU references of the Mamba-1, GDN and sliding-window kernels (issue 13)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from twin.torch_ops.recurrent_refs import (  # noqa: E402
    gdn_chunked,
    gdn_recurrent,
    selective_scan,
    sliding_window_attention,
)

F64 = torch.float64


def _gdn_inputs(length: int, h: int = 3, dk: int = 8, dv: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(length, h, dk, generator=g, dtype=F64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(length, h, dk, generator=g, dtype=F64), dim=-1)
    v = torch.randn(length, h, dv, generator=g, dtype=F64)
    decay = -torch.rand(length, h, generator=g, dtype=F64)  # log of a decay in (1/e, 1]
    beta = torch.sigmoid(torch.randn(length, h, generator=g, dtype=F64))
    return q, k, v, decay, beta


@pytest.mark.parametrize(("length", "chunk"), [(37, 8), (16, 16), (5, 64)])
def test_gdn_chunked_equals_recurrent(length: int, chunk: int) -> None:
    args = _gdn_inputs(length)
    s0 = torch.randn(3, 8, 5, dtype=F64, generator=torch.Generator().manual_seed(9))
    o1, s1 = gdn_recurrent(*args, initial=s0)
    o2, s2 = gdn_chunked(*args, chunk=chunk, initial=s0)
    assert torch.allclose(o1, o2, atol=1e-10) and torch.allclose(s1, s2, atol=1e-10)


def test_gdn_state_continues_exactly() -> None:
    q, k, v, g, b = _gdn_inputs(30)
    whole, s_whole = gdn_recurrent(q, k, v, g, b)
    o1, s1 = gdn_recurrent(q[:11], k[:11], v[:11], g[:11], b[:11])
    o2, s2 = gdn_chunked(q[11:], k[11:], v[11:], g[11:], b[11:], chunk=4, initial=s1)
    assert torch.allclose(torch.cat((o1, o2)), whole, atol=1e-12)
    assert torch.allclose(s2, s_whole, atol=1e-12)


def test_gdn_delta_rule_recalls_a_stored_value() -> None:
    """With no decay and beta 1, writing v under a unit key k makes k recall v exactly."""
    k = torch.nn.functional.normalize(torch.randn(1, 1, 4, dtype=F64), dim=-1)
    v = torch.randn(1, 1, 3, dtype=F64)
    zero, one = torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64)
    o, _ = gdn_recurrent(k, k, v, zero, one)
    assert torch.allclose(o, v, atol=1e-12)


def test_selective_scan_continues_from_its_state_and_matches_a_loop() -> None:
    g = torch.Generator().manual_seed(1)
    length, d, n = 20, 6, 4
    u = torch.randn(length, d, generator=g, dtype=F64)
    delta = torch.nn.functional.softplus(torch.randn(length, d, generator=g, dtype=F64))
    A = -torch.rand(d, n, generator=g, dtype=F64) * 4
    B, C = (
        torch.randn(length, n, generator=g, dtype=F64),
        torch.randn(length, n, generator=g, dtype=F64),
    )
    D = torch.randn(d, generator=g, dtype=F64)
    y, s = selective_scan(u, delta, A, B, C, D)
    y1, s1 = selective_scan(u[:7], delta[:7], A, B[:7], C[:7], D)
    y2, s2 = selective_scan(u[7:], delta[7:], A, B[7:], C[7:], D, initial=s1)
    assert torch.allclose(torch.cat((y1, y2)), y, atol=1e-12) and torch.allclose(s2, s, atol=1e-12)
    # One channel, one state element, by hand: h_t = exp(dt A) h + dt B u; y = C h + D u.
    h, want = 0.0, []
    for t in range(length):
        h = float(torch.exp(delta[t, 0] * A[0, 0])) * h + float(delta[t, 0] * B[t, 0] * u[t, 0])
        want.append(h)
    one = selective_scan(u[:, :1], delta[:, :1], A[:1, :1], B[:, :1], C[:, :1], D[:1] * 0)[0]
    assert torch.allclose(one[:, 0], torch.tensor(want, dtype=F64) * C[:, 0], atol=1e-12)


def test_sliding_window_attention_sees_the_last_w_keys() -> None:
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 5, 4, generator=g, dtype=F64)
    k = torch.randn(1, 2, 12, 4, generator=g, dtype=F64)
    v = torch.randn(1, 2, 12, 4, generator=g, dtype=F64)
    out = sliding_window_attention(q, k, v, window=3)
    for i in range(5):
        p = 7 + i  # absolute position of query i
        ks, vs = k[:, :, p - 2 : p + 1], v[:, :, p - 2 : p + 1]
        w = torch.softmax(q[:, :, i : i + 1] @ ks.transpose(-1, -2) / 2.0, dim=-1)
        assert torch.allclose(out[:, :, i : i + 1], w @ vs, atol=1e-12)
    # A window longer than the context is plain causal attention.
    full = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(5, 12, dtype=torch.bool).tril(7)
    )
    assert torch.allclose(sliding_window_attention(q, k, v, window=100), full, atol=1e-12)
