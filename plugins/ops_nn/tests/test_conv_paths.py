"""The conv2d kernels' paths (window im2col, the padded grid, batch chunks, the strided input gradient) against
torch, and the bound on how far float32 results may move from float64 (the summation order is BLAS's, per chunk)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_ops_nn import conv

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")

PATHS = [
    # (x shape, w shape, attrs, torch padding (left, right, top, bottom)): which kernel path the shape takes
    ((3, 2, 5, 6), (4, 2, 3, 3), {"padding": "same"}, (1, 1, 1, 1)),                     # grid: short rows
    ((3, 4, 5, 6), (6, 2, 3, 2), {"padding": [2, 1, 1, 0], "dilation": [2, 1], "groups": 2}, (1, 0, 2, 1)),
    ((3, 2, 4, 18), (3, 2, 3, 3), {"padding": 1}, (1, 1, 1, 1)),                          # window: long rows
    ((2, 3, 5, 5), (40, 3, 2, 3), {"padding": "same"}, (1, 1, 0, 1)),                     # window: 40 outputs
    ((3, 2, 7, 9), (4, 2, 3, 3), {"padding": 1, "stride": [2, 1]}, (1, 1, 1, 1)),         # strided
    ((2, 16, 9, 18), (5, 16, 3, 3), {"padding": 1}, (1, 1, 1, 1)),                        # channels last
    ((2, 16, 20, 17), (4, 16, 2, 3), {"padding": [2, 1, 1, 0], "stride": 2, "dilation": [2, 1]}, (1, 0, 2, 1)),
    ((2, 3, 20, 20), (4, 3, 3, 3), {"padding": "same"}, (1, 1, 1, 1)),                    # a sample per product
]


def _frame(x: np.ndarray, w: np.ndarray, g: np.ndarray, attrs: dict) -> list[np.ndarray]:
    graph = fc.trace(lambda a, b, c: ops.sum(ops.conv2d(a, b, **attrs) * c), *(fc.TensorType(t.dtype, t.shape)
                                                                                for t in (x, w, g)))
    return fc.compile(fc.build_backward_graph(graph, 0, [0, 1]), cache=False).run([x, w, g])[1:]


@pytest.mark.parametrize("columns", [1, 2048], ids=["one sample per chunk", "whole batch per chunk"])
@pytest.mark.parametrize("case", PATHS, ids=[str(c[:3]) for c in PATHS])
def test_every_conv2d_path_matches_torch(case, columns, monkeypatch):
    monkeypatch.setattr(conv, "_COLUMNS", columns)
    x_shape, w_shape, attrs, pad = case
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(tx, pad), tw, stride=attrs.get("stride", 1),
                                   dilation=attrs.get("dilation", 1), groups=attrs.get("groups", 1))
    g = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(g))
    got = fc.compile(fc.trace(lambda a, b: ops.conv2d(a, b, **attrs), "f64" + str(list(x_shape)),
                              "f64" + str(list(w_shape))), cache=False).run([x, w])[0]
    np.testing.assert_allclose(got, y.detach().numpy(), rtol=1e-12, atol=1e-12)
    gx, gw = _frame(x, w, g, attrs)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", PATHS[::2], ids=[str(c[:3]) for c in PATHS[::2]])
def test_float32_stays_within_a_few_roundings_of_float64(case):
    """Each output is a BLAS dot product summed in an order that depends on the chunk; whatever the order, float32
    stays within 4 * sqrt(n) units of rounding (n terms) of the float64 result, relative to its largest entry."""
    x_shape, w_shape, attrs, _ = case
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    g = rng.standard_normal(fc.compile(fc.trace(lambda a, b: ops.conv2d(a, b, **attrs), "f64" + str(list(x_shape)),
                                                "f64" + str(list(w_shape)))).run([x, w])[0].shape)
    exact = _frame(x, w, g, attrs)
    single = _frame(*(a.astype(np.float32) for a in (x, w, g)), attrs)
    terms = [w.shape[0] * w.shape[2] * w.shape[3], g.shape[0] * g.shape[2] * g.shape[3]]  # terms of a gx, a gw
    for got, want, n in zip(single, exact, terms):
        bound = 4 * np.sqrt(n) * np.finfo(np.float32).eps * np.abs(want).max()
        assert np.abs(got - want).max() <= bound


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 2, 3, 3), (0, 2, 1, 1), {}),                         # no output channels: the grid path
    ((1, 2, 3, 30), (0, 1, 1, 1), {"groups": 2}),             # the window path, grouped
    ((1, 2, 9, 9), (0, 2, 3, 3), {"stride": 2}),              # the strided input gradient
], ids=["grid", "window", "strided"])
def test_a_convolution_without_output_channels_is_empty_and_its_input_gradient_zero(x_shape, w_shape, attrs):
    x, w = np.ones(x_shape), np.ones(w_shape)
    graph = fc.trace(lambda a, b: ops.sum(ops.conv2d(a, b, **attrs)), "f64" + str(list(x_shape)),
                     "f64" + str(list(w_shape)))
    _, gx, gw = fc.compile(fc.build_backward_graph(graph, 0, [0, 1]), cache=False).run([x, w])
    assert gx.shape == x_shape and not gx.any() and gw.shape == w_shape


@pytest.mark.parametrize("where", ["x", "w"])
@pytest.mark.parametrize("value", [np.inf, np.nan], ids=["inf", "nan"])
@pytest.mark.parametrize("shape", [(2, 2, 5, 6), (2, 2, 4, 20), (2, 16, 6, 20)], ids=["grid", "window",
                                                                                       "channels last"])
def test_a_non_finite_value_spreads_to_the_gradients_as_in_torch(shape, value, where):
    """The grid's dropped positions hold gy = 0 against values no window reads: 0 * inf must not become a NaN."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(shape), rng.standard_normal((3, shape[1], 3, 3))
    if where == "x":
        x[0, 0, 0, -1] = value   # read by a single tap of a single window
    else:
        w[1, 1, 1, 1] = value
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw)
    g = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(g))
    with np.errstate(invalid="ignore"):
        gx, gw = _frame(x, w, g, {})
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)
