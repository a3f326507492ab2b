"""Layer helpers: parameters named as the design note says, outputs equal torch's layers with the same numbers,
gradients equal central differences, and the attention block is causal."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ArgumentError, ops
from frame_ops_nn import layers as nn
from frame_ops_nn.init import named_leaves


def _run(layer, params, *data):  # noqa: ANN001, ANN202
    graph, names = nn.trace_with_params(layer.apply, params, *[fc.TensorType(d.dtype, d.shape) for d in data])
    return fc.compile(graph).run([*named_leaves(params).values(), *data])[0]


def _loss_and_grads(fn, params, *data):  # noqa: ANN001, ANN202
    graph, names = nn.trace_with_params(fn, params, *[fc.TensorType(d.dtype, d.shape) for d in data])
    outs = fc.compile(fc.build_backward_graph(graph, 0, names)).run([*named_leaves(params).values(), *data])
    return outs[0], dict(zip(names, outs[1:]))


LAYERS = [
    (nn.Linear(5, 3, dtype="float64"), (2, 4, 5), {"b", "w"}),
    (nn.Conv1d(4, 6, 3, padding="same", groups=2, dtype="float64"), (2, 4, 7), {"b", "w"}),
    (nn.Conv2d(3, 4, (3, 2), stride=2, padding=1, dtype="float64"), (2, 3, 6, 5), {"b", "w"}),
    (nn.LayerNorm((5,), dtype="float64"), (2, 3, 5), {"b", "w"}),
    (nn.MLP((5, 8, 8, 2), activation="tanh", dtype="float64"), (4, 5), {"0.b", "0.w", "1.b", "1.w", "2.b", "2.w"}),
    (nn.CausalSelfAttention(8, 2, dtype="float64"), (2, 5, 8), {"qkv.b", "qkv.w", "proj.b", "proj.w"}),
]


@pytest.mark.parametrize("layer, x_shape, names", LAYERS, ids=[type(c[0]).__name__ for c in LAYERS])
def test_layer_gradients_match_central_differences(layer, x_shape, names):
    rng = np.random.default_rng(0)
    params = layer.init(rng)
    assert set(named_leaves(params)) == names
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(_run(layer, params, x).shape)
    loss_fn = lambda p, a: ops.sum(layer.apply(p, a) * w)  # noqa: E731
    _, grads = _loss_and_grads(loss_fn, params, x)
    graph, _ = nn.trace_with_params(loss_fn, params, fc.TensorType("f64", x_shape))
    exe = fc.compile(graph)
    for name, leaf in named_leaves(params).items():
        index = tuple(rng.integers(0, n) for n in leaf.shape)
        saved, eps = leaf[index], 1e-6
        leaf[index] = saved + eps
        up = exe.run([*named_leaves(params).values(), x])[0]
        leaf[index] = saved - eps
        down = exe.run([*named_leaves(params).values(), x])[0]
        leaf[index] = saved
        assert grads[name][index] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-7), name


def test_layers_equal_torch_layers_holding_the_same_numbers():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(1)
    conv = nn.Conv2d(3, 4, 3, padding="same", dtype="float64")
    p = conv.init(rng)
    x = rng.standard_normal((2, 3, 5, 5))
    tconv = torch.nn.Conv2d(3, 4, 3, padding="same").double()
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(p["w"]))
        tconv.bias.copy_(torch.tensor(p["b"]))
    np.testing.assert_allclose(_run(conv, p, x), tconv(torch.tensor(x)).detach().numpy(), rtol=1e-10, atol=1e-13)

    att = nn.CausalSelfAttention(8, 2, dtype="float64")
    p = att.init(rng)
    x = rng.standard_normal((2, 5, 8))
    tx = torch.tensor(x)
    q, k, v = (tx @ torch.tensor(p["qkv"]["w"]) + torch.tensor(p["qkv"]["b"])).split(8, dim=-1)
    heads = [t.reshape(2, 5, 2, 4).transpose(1, 2) for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(2, 5, 8)
    want = out @ torch.tensor(p["proj"]["w"]) + torch.tensor(p["proj"]["b"])
    np.testing.assert_allclose(_run(att, p, x), want.numpy(), rtol=1e-10, atol=1e-12)


def test_attention_is_causal_and_embedding_padding_row_never_trains():
    rng = np.random.default_rng(2)
    att = nn.CausalSelfAttention(8, 4, dtype="float64")
    p = att.init(rng)
    x = rng.standard_normal((1, 6, 8))
    later = x.copy()
    later[0, 4:] += 1.0
    a, b = _run(att, p, x), _run(att, p, later)
    np.testing.assert_array_equal(a[0, :4], b[0, :4])  # positions before 4 never see 4 and 5
    assert not np.allclose(a[0, 4:], b[0, 4:])

    emb = nn.Embedding(5, 3, padding_idx=0, dtype="float64")
    p = emb.init(rng)
    assert not p["table"][0].any()
    tokens = np.array([[0, 1, 0, 4]])
    _, grads = _loss_and_grads(lambda q, t: ops.sum(emb.apply(q, t) ** 2 + emb.apply(q, t)), p, tokens)
    assert not grads["table"][0].any() and grads["table"][1].any()


def test_negative_padding_idx_counts_from_the_end_as_torchs():
    emb = nn.Embedding(6, 3, padding_idx=-1, dtype="float64")
    params = emb.init(np.random.default_rng(0))
    assert not params["table"][5].any() and params["table"][4].any()
    idx = np.array([[5, 1, 5], [0, 2, 4]])
    vg = fc.value_and_grad(lambda p, i: ops.sum(ops.square(emb.apply(p, i))))
    _, g = vg(params, idx)  # ops.embedding itself refuses -1: the layer passes the row number
    assert not g["table"][5].any() and g["table"][1].any()
    with pytest.raises(ArgumentError, match=r"padding_idx must be a row of the table, an int in \[-6, 6\), got 6"):
        nn.Embedding(6, 3, padding_idx=6).init(np.random.default_rng(0))


def test_conv_groups_must_divide_the_channels():
    with pytest.raises(ArgumentError, match="groups=2 must be an int >= 1 dividing both in_channels=5"):
        nn.Conv2d(5, 6, 3, groups=2).init(np.random.default_rng(0))
    with pytest.raises(ArgumentError, match="groups=0"):
        nn.Conv1d(4, 4, 3, groups=0).init(np.random.default_rng(0))


def test_attention_runs_at_any_batch_size_from_one_trace():
    att = nn.CausalSelfAttention(8, 2, dtype="float64")
    params = att.init(np.random.default_rng(1))
    vg = fc.value_and_grad(lambda p, x: ops.sum(ops.square(att.apply(p, x))))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5, 8))
    loss3, g3 = vg(params, x)
    loss2, g2 = vg(params, x[:2])  # a new batch size: was a reshape ShapeError (the traced batch was baked in)
    loss1, g1 = vg(params, x[2:])
    assert vg.traces == 1
    np.testing.assert_allclose(float(loss2) + float(loss1), float(loss3), rtol=1e-12)
    np.testing.assert_allclose(g2["proj"]["w"] + g1["proj"]["w"], g3["proj"]["w"], rtol=1e-10, atol=1e-12)


def test_bad_sizes_and_kernels_are_named_and_a_one_tuple_kernel_works():
    rng = np.random.default_rng(0)
    for make, match in [(lambda: nn.Linear(-1, 3), "Linear: in_features is an int >= 0, got -1"),
                        (lambda: nn.Linear(2.5, 3), "in_features is an int >= 0, got 2.5"),
                        (lambda: nn.Conv2d(2, 3, 0), r"Conv2d: kernel_size is an int >= 1 or 2 of them, got 0"),
                        (lambda: nn.Conv2d(2, 3, (3, 2, 1)), "or 2 of them"),  # was ValueError: unpack
                        (lambda: nn.Conv1d(2, 3, -1), "Conv1d: kernel_size"),  # was math domain error
                        (lambda: nn.Embedding(-2, 3), "Embedding: num is an int >= 0")]:
        with pytest.raises(ArgumentError, match=match):
            make().init(rng)
    one = nn.Conv1d(2, 3, (3,)).init(np.random.default_rng(4))  # was TypeError: must be real number, not tuple
    same = nn.Conv1d(2, 3, 3).init(np.random.default_rng(4))
    assert all(np.array_equal(one[k], same[k]) for k in same)
