"""max_pool2d, avg_pool2d, adaptive_avg_pool2d: values and gradients to second order against torch; ties, NaN,
bad input."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

POOL_CASES = [
    ({"kernel_size": 2}, {"kernel_size": 2}),
    ({"kernel_size": 3, "stride": [2, 1], "padding": 1}, {"kernel_size": 3, "stride": (2, 1), "padding": 1}),
    ({"kernel_size": [2, 3], "stride": 2, "padding": [1, 0]}, {"kernel_size": (2, 3), "stride": 2,
                                                               "padding": (1, 0)}),
]


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("case", POOL_CASES, ids=[str(c[0]) for c in POOL_CASES])
def test_pools_match_torch_to_second_order(op, case, against_torch):
    import torch.nn.functional as F

    attrs, t_attrs = case
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 6))  # distinct values: no ties
    against_torch(lambda a: getattr(ops, op)(a, **attrs), lambda a: getattr(F, op)(a, **t_attrs), [x], [0])


def test_avg_pool2d_without_padding_in_the_count_matches_torch(against_torch):
    import torch.nn.functional as F

    x = np.random.default_rng(4).standard_normal((2, 2, 5, 5))
    against_torch(lambda a: ops.avg_pool2d(a, kernel_size=3, stride=2, padding=1, count_include_pad=False),
                  lambda a: F.avg_pool2d(a, 3, 2, 1, count_include_pad=False), [x], [0])


@pytest.mark.parametrize("size", [[1, 1], [3, 2], [4, 7]])
def test_adaptive_avg_pool2d_matches_torch_to_second_order(size, against_torch):
    import torch.nn.functional as F

    x = np.random.default_rng(5).standard_normal((2, 3, 7, 5))
    against_torch(lambda a: ops.adaptive_avg_pool2d(a, output_size=size),
                  lambda a: F.adaptive_avg_pool2d(a, tuple(size)), [x], [0])


def _grad(fn, x):
    graph = fc.trace(fn, fc.TensorType(x.dtype, x.shape))
    graph, loss = fc.extend_graph(graph, lambda *t: ops.sum(t[1]))
    return fc.compile(fc.build_backward_graph(graph, loss, [0])).run([x])


def test_max_pool2d_tie_gives_the_gradient_to_the_first_maximum_and_nan_propagates():
    x = np.array([[[[1.0, 3.0], [3.0, 0.0]]]])  # a tie of 3s: the first in row-major order wins
    y, _, gx = _grad(lambda a: ops.max_pool2d(a, kernel_size=2), x)
    np.testing.assert_array_equal(gx, [[[[0.0, 1.0], [0.0, 0.0]]]])
    x[0, 0, 1, 1] = np.nan
    y, _, gx = _grad(lambda a: ops.max_pool2d(a, kernel_size=2), x)
    assert np.isnan(y).all()
    np.testing.assert_array_equal(gx, [[[[0.0, 0.0], [0.0, 1.0]]]])


def test_max_pool2d_window_of_minus_inf_gives_its_gradient_to_a_real_position():
    x = np.full((1, 1, 2, 2), -np.inf)
    y, _, gx = _grad(lambda a: ops.max_pool2d(a, kernel_size=2, stride=1, padding=1), x)
    assert np.isneginf(y).all()
    assert gx.sum() == 9.0  # every one of the 3x3 windows sends its gradient to a real position


@pytest.mark.parametrize("op, attrs, message", [
    ("max_pool2d", {"kernel_size": 5}, "pooling window covers 5 positions along axis -2"),
    ("avg_pool2d", {"kernel_size": 2, "stride": 0}, "stride must be >= 1, got [0, 0]"),
    ("max_pool2d", {"kernel_size": 2, "padding": 2}, "must stay below kernel_size [2, 2]"),
    ("avg_pool2d", {"kernel_size": [0, 2]}, "kernel_size must be >= 1, got [0, 2]"),
    ("adaptive_avg_pool2d", {"output_size": [0, 1]}, "output_size must be >= 1, got [0, 1]"),
])
def test_bad_pool_input_is_a_named_shape_error(op, attrs, message):
    with pytest.raises(fc.ShapeError) as info:
        fc.trace(lambda a: getattr(ops, op)(a, **attrs), "f32[1, 2, 4, 4]")
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize("attrs", [{"kernel_size": 2}, {"kernel_size": [3, 2]}, {"kernel_size": 2, "stride": 1}],
                         ids=["tiled 2x2", "tiled 3x2", "overlapping"])
def test_max_pool2d_ties_and_nans_follow_the_rule_on_every_path(attrs):
    """Many ties and a few NaNs: each window's gradient goes to its first maximum in row-major order (its first
    NaN if any), checked against a loop over the windows."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, (2, 3, 7, 8)).astype(np.float64)
    x[rng.random(x.shape) < 0.05] = np.nan
    y, _, gx = _grad(lambda a: ops.max_pool2d(a, **attrs), x)
    (kh, kw), (sh, sw) = np.broadcast_to(attrs["kernel_size"], 2), np.broadcast_to(attrs.get("stride",
                                                                                              attrs["kernel_size"]), 2)
    want = np.zeros_like(x)
    for idx in np.ndindex(*y.shape):
        *lead, i, j = idx
        window = x[(*lead, slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw))].ravel()
        nan = np.flatnonzero(np.isnan(window))
        k = nan[0] if nan.size else int(np.argmax(window))
        want[(*lead, i * sh + k // kw, j * sw + k % kw)] += 1.0
        assert np.isnan(y[idx]) if nan.size else y[idx] == window[k]
    np.testing.assert_array_equal(gx, want)


def test_max_pool2d_of_an_empty_batch_has_an_empty_gradient_on_the_tiled_path():
    graph = fc.trace(lambda a: ops.sum(ops.max_pool2d(a, kernel_size=2)), "f64[0, 2, 4, 4]")
    _, gx = fc.compile(fc.build_backward_graph(graph, 0, [0]), cache=False).run([np.zeros((0, 2, 4, 4))])
    assert gx.shape == (0, 2, 4, 4)


def test_adaptive_avg_pool2d_of_an_empty_image_is_a_named_shape_error():
    with pytest.raises(fc.ShapeError, match="no positions to average"):
        fc.trace(lambda a: ops.adaptive_avg_pool2d(a, output_size=1), "f64[1, 1, 0, 4]")


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("size", [[2, 3], [4, 5]], ids=["apart", "overlapping"])
def test_adaptive_avg_pool2d_keeps_a_non_finite_value_in_its_own_bins(size, value):
    """The kernels are products with averaging matrices; their zero weights must not turn inf into NaN elsewhere."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 7))
    x[0, 0, 0, 0] = x[1, 2, 5, 6] = value
    gy = rng.standard_normal((2, 3, *size))
    gy[0, 1, 0, 0] = value
    tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(gy, requires_grad=True)
    y = torch.nn.functional.adaptive_avg_pool2d(tx, tuple(size))
    (gx,) = torch.autograd.grad(y, tx, tg)
    graph = fc.trace(lambda a, g: ops.sum(ops.adaptive_avg_pool2d(a, output_size=size) * g),
                     fc.TensorType("f64", x.shape), fc.TensorType("f64", gy.shape))
    with np.errstate(invalid="ignore"):
        got = fc.compile(fc.build_backward_graph(graph, 0, [0]), cache=False).run([x, gy])[1]
        pooled = fc.compile(fc.trace(lambda a: ops.adaptive_avg_pool2d(a, output_size=size), "f64[2, 3, 6, 7]"),
                            cache=False).run([x])[0]
    np.testing.assert_allclose(pooled, y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, gx.numpy(), rtol=1e-12, atol=1e-12)
