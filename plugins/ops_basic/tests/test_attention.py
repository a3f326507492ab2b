"""A one-layer causal self-attention block written with existing ops (batched matmul with transposes, a causal
mask through ``where``, softmax along the last axis), against PyTorch: forward, gradients and second order."""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import torch_value_gradient_hvp, value_gradient_hvp

B, T, D, H = 2, 5, 8, 2


def causal_self_attention(x, wq, wk, wv, wo, heads=H):
    """x [B, T, D] -> [B, T, D]: multi-head attention where position t attends to positions <= t."""
    b, t, d = x.shape
    dh = d // heads

    def split_heads(m):  # [B, T, D] -> [B, heads, T, dh]
        return ops.transpose(ops.reshape(m, shape=[b, t, heads, dh]), perm=[0, 2, 1, 3])

    q, k, v = split_heads(x @ wq), split_heads(x @ wk), split_heads(x @ wv)
    scores = (q @ ops.transpose(k, perm=[0, 1, 3, 2])) * (1.0 / math.sqrt(dh))  # [B, heads, T, T]
    causal = np.tril(np.ones((t, t), bool))
    scores = ops.where(causal, scores, -np.inf)
    attended = ops.softmax(scores, axis=-1) @ v  # [B, heads, T, dh]
    merged = ops.reshape(ops.transpose(attended, perm=[0, 2, 1, 3]), shape=[b, t, d])
    return merged @ wo


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, D))
    ws = [rng.standard_normal((D, D)) / math.sqrt(D) for _ in range(4)]
    return [x, *ws]


TYPES = [f"f64[{B}, {T}, {D}]"] + [f"f64[{D}, {D}]"] * 4


def torch_block(torch, x, wq, wk, wv, wo, fused=False):
    def split_heads(m):
        return m.reshape(B, T, H, D // H).transpose(1, 2)
    q, k, v = split_heads(x @ wq), split_heads(x @ wk), split_heads(x @ wv)
    if fused:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # torch's fused kernel has no second derivative on CPU: the same mathematics written out
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, D) @ wo


def test_forward_is_causal_and_each_row_is_a_weighted_mean():
    xs = inputs()
    exe = fc.compile(fc.trace(causal_self_attention, *TYPES))
    y = exe.run(xs)[0]
    changed = [a.copy() for a in xs]
    changed[0][:, -1, :] += 10.0  # the last position cannot influence earlier ones
    y2 = exe.run(changed)[0]
    np.testing.assert_array_equal(y[:, :-1], y2[:, :-1])
    assert not np.allclose(y[:, -1], y2[:, -1])


def test_forward_gradients_and_second_order_match_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    xs = inputs(1)
    rng = np.random.default_rng(2)
    w = rng.standard_normal((B, T, D))
    direction = [rng.standard_normal(a.shape) for a in xs]
    loss, grads, hvps = value_gradient_hvp(causal_self_attention, xs, w, direction)
    tloss, tgrads, thvps = torch_value_gradient_hvp(lambda *a: torch_block(torch, *a), xs, w, direction)
    np.testing.assert_allclose(loss, tloss, rtol=1e-12)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g, tg, rtol=1e-10, atol=1e-12)
    for h, th in zip(hvps, thvps):
        np.testing.assert_allclose(h, th, rtol=1e-9, atol=1e-11)


def test_forward_and_gradient_match_torchs_fused_attention():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    xs = inputs(3)
    forward = fc.trace(lambda *a: ops.sum(ops.square(causal_self_attention(*a))), *TYPES)
    outs = fc.compile(fc.build_backward_graph(forward, 0, list(range(5)))).run(xs)
    txs = [torch.tensor(a, requires_grad=True) for a in xs]
    tloss = torch_block(torch, *txs, fused=True).square().sum()
    tloss.backward()
    np.testing.assert_allclose(outs[0], tloss.item(), rtol=1e-12)
    for g, tx in zip(outs[1:], txs):
        np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
