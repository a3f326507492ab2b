"""The conv1d kernels' paths (one sample per product, the padded grid over several samples, strided taps) against
torch, and the bound on how far float32 results may move from float64 (the summation order is BLAS's, per chunk)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_ops_sequence import conv

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")

PATHS = [
    # (x shape, w shape, attrs, torch padding (left, right)): which kernel path the shape takes
    ((3, 2, 530), (3, 2, 5), {"padding": "same"}, (2, 2)),                            # a sample per product
    ((3, 4, 520), (4, 2, 3), {"padding": "causal", "dilation": 2, "groups": 2}, (4, 0)),
    ((2, 2, 520), (3, 2, 2), {"padding": [3, 0]}, (3, 0)),     # padded beyond extent - 1: no correlation for gx
    ((5, 2, 40), (3, 2, 4), {"padding": [2, 1]}, (2, 1)),                              # the grid
    ((5, 6, 33), (4, 3, 3), {"padding": "causal", "dilation": 3, "groups": 2}, (6, 0)),
    ((3, 2, 40), (3, 2, 3), {"padding": 1, "stride": 2}, (1, 1)),                      # strided taps
    ((2, 2, 1030), (3, 2, 3), {"padding": 1, "stride": 2}, (1, 1)),                    # a strided sample per product
]


def _gradients(x: np.ndarray, w: np.ndarray, g: np.ndarray, attrs: dict) -> list[np.ndarray]:
    graph = fc.trace(lambda a, b, c: ops.sum(ops.conv1d(a, b, **attrs) * c), *(fc.TensorType(t.dtype, t.shape)
                                                                                for t in (x, w, g)))
    return fc.compile(fc.build_backward_graph(graph, 0, [0, 1]), cache=False).run([x, w, g])[1:]


def _forward(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    graph = fc.trace(lambda a, b: ops.conv1d(a, b, **attrs), fc.TensorType(x.dtype, x.shape),
                     fc.TensorType(w.dtype, w.shape))
    return fc.compile(graph, cache=False).run([x, w])[0]


@pytest.mark.parametrize("columns", [1, 2048], ids=["one sample per chunk", "several samples per chunk"])
@pytest.mark.parametrize("case", PATHS, ids=[str(c[:3]) for c in PATHS])
def test_every_conv1d_path_matches_torch(case, columns, monkeypatch):
    monkeypatch.setattr(conv, "_GRID_COLUMNS", columns)
    x_shape, w_shape, attrs, pad = case
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv1d(torch.nn.functional.pad(tx, pad), tw, stride=attrs.get("stride", 1),
                                   dilation=attrs.get("dilation", 1), groups=attrs.get("groups", 1))
    g = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(g))
    np.testing.assert_allclose(_forward(x, w, attrs), y.detach().numpy(), rtol=1e-12, atol=1e-12)
    gx, gw = _gradients(x, w, g, attrs)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", PATHS[::2], ids=[str(c[:3]) for c in PATHS[::2]])
def test_float32_stays_within_a_few_roundings_of_float64(case):
    """Each output is a BLAS dot product summed in an order that depends on the chunk; whatever the order, float32
    stays within 4 * sqrt(n) units of rounding (n terms) of the float64 result, relative to its largest entry."""
    x_shape, w_shape, attrs, _ = case
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    y = _forward(x, w, attrs)
    g = rng.standard_normal(y.shape)
    exact = [y, *_gradients(x, w, g, attrs)]
    single = [_forward(x.astype(np.float32), w.astype(np.float32), attrs),
              *_gradients(*(a.astype(np.float32) for a in (x, w, g)), attrs)]
    terms = [w.shape[1] * w.shape[2], w.shape[0] * w.shape[2], g.shape[0] * g.shape[2]]  # of a y, a gx, a gw
    for got, want, n in zip(single, exact, terms):
        assert np.abs(got - want).max() <= 4 * np.sqrt(n) * np.finfo(np.float32).eps * np.abs(want).max()


@pytest.mark.parametrize("x_shape, w_shape", [((2, 2, 30), (0, 2, 3)), ((2, 2, 1300), (0, 1, 3))],
                         ids=["grid", "window"])
def test_a_convolution_without_output_channels_is_empty_and_its_input_gradient_zero(x_shape, w_shape):
    x, w = np.ones(x_shape), np.ones(w_shape)
    groups = x_shape[1] // w_shape[1]
    graph = fc.trace(lambda a, b: ops.sum(ops.conv1d(a, b, groups=groups)), "f64" + str(list(x_shape)),
                     "f64" + str(list(w_shape)))
    _, gx, gw = fc.compile(fc.build_backward_graph(graph, 0, [0, 1]), cache=False).run([x, w])
    assert gx.shape == x_shape and not gx.any() and gw.shape == w_shape


@pytest.mark.parametrize("where", ["x", "w"])
@pytest.mark.parametrize("value", [np.inf, np.nan], ids=["inf", "nan"])
@pytest.mark.parametrize("length, padding", [(30, "valid"), (600, "same")], ids=["grid", "a sample per product"])
def test_a_non_finite_value_spreads_to_the_gradients_as_in_torch(value, where, length, padding):
    """The grid's dropped positions hold gy = 0 against values no window reads, and the input gradient as a
    correlation reads gy's zero padding: 0 * inf must not become a NaN in either."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 2, length)), rng.standard_normal((3, 2, 3))
    if where == "x":
        x[0, 0, -1] = value   # read by a single tap of a single window
    else:
        w[1, 1, 1] = value
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv1d(tx, tw, padding=padding)
    g = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(g))
    with np.errstate(invalid="ignore"):
        gx, gw = _gradients(x, w, g, {"padding": padding})
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)


def _training(attrs: dict, shapes: tuple, dtype: str = "f32", **compile_options) -> fc.Executable:
    x_shape, w_shape, y_shape = shapes
    graph = fc.trace(lambda a, b, c: ops.sum(ops.conv1d(a, b, **attrs) * c),
                     *(fc.TensorType(dtype, s) for s in (x_shape, w_shape, y_shape)))
    return fc.compile(fc.build_backward_graph(graph, 0, [0, 1]), cache=False, **compile_options)


def _ops(executable: fc.Executable) -> list[str]:
    return [node.op.rpartition("::")[2] for node in executable.graph.nodes]


def test_the_two_gradients_of_a_convolution_run_as_one_node_with_the_same_input_gradient():
    """merge_conv1d_gradients: gx keeps its bits (the same columns and product), gw is the same sum over x's
    positions instead of gy's, within a few roundings of the two-kernel result and of float64."""
    rng = np.random.default_rng(7)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4, 600), (6, 4, 5), (3, 6, 600)))
    merged = _training({"padding": "same"}, (x.shape, w.shape, g.shape))
    apart = _training({"padding": "same"}, (x.shape, w.shape, g.shape), disable=["merge_conv1d_gradients"])
    assert _ops(merged).count("conv1d_grads_internal") == 1 and "conv1d_grad_weight_internal" not in _ops(merged)
    assert "conv1d_grads_internal" not in _ops(apart)
    (_, gx, gw), (_, gx_apart, gw_apart) = merged.run([x, w, g]), apart.run([x, w, g])
    exact = _training({"padding": "same"}, (x.shape, w.shape, g.shape), "f64").run(
        [a.astype(np.float64) for a in (x, w, g)])[2]
    assert np.array_equal(gx, gx_apart)
    n = x.shape[0] * x.shape[2]  # terms of a gw entry
    bound = 4 * np.sqrt(n) * np.finfo(np.float32).eps * np.abs(exact).max()
    assert np.abs(gw - exact).max() <= bound and np.abs(gw_apart - exact).max() <= bound


def test_a_weight_gradient_alone_is_not_merged():
    graph = fc.trace(lambda a, b: ops.sum(ops.conv1d(a, b, padding="same")), "f32[2, 3, 600]", "f32[4, 3, 5]")
    executable = fc.compile(fc.build_backward_graph(graph, 0, [1]), cache=False)
    assert "conv1d_grad_weight_internal" in _ops(executable) and "conv1d_grads_internal" not in _ops(executable)


@pytest.mark.parametrize("case", PATHS, ids=[str(c[:3]) for c in PATHS])
def test_the_merged_node_matches_its_two_ops_on_every_path(case):
    """conv1d_grads_internal falls back to the two kernels off the correlation path: the same bits there."""
    x_shape, w_shape, attrs, _ = case
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    g = rng.standard_normal(_forward(x, w, attrs).shape)
    merged = _training(attrs, (x.shape, w.shape, g.shape), "f64")
    apart = _training(attrs, (x.shape, w.shape, g.shape), "f64", disable=["merge_conv1d_gradients"])
    assert "conv1d_grads_internal" in _ops(merged)
    (_, gx, gw), (_, gx_apart, gw_apart) = merged.run([x, w, g]), apart.run([x, w, g])
    assert np.array_equal(gx, gx_apart)
    np.testing.assert_allclose(gw, gw_apart, rtol=1e-12, atol=1e-12)
    stride, dilation, (left, right) = attrs.get("stride", 1), attrs.get("dilation", 1), case[3]
    extent = dilation * (w_shape[2] - 1) + 1
    geo = conv.ConvGeometry(x_shape[0], x_shape[1], w_shape[0], x_shape[2], w_shape[2], stride, dilation,
                            attrs.get("groups", 1), left, right, (x_shape[2] + left + right - extent) // stride + 1)
    if not conv._as_correlation(geo):
        assert np.array_equal(gw, gw_apart)


def test_convolutions_sharing_an_output_gradient_pair_only_matching_gradients():
    """Convolutions added together share gy: each merged node must pair gradients of matching shapes (an input
    gradient of 3 channels with a weight gradient of an x with 3 channels), whichever convolution they come
    from, and two convolutions of the same shapes make two merged nodes."""
    rng = np.random.default_rng(13)
    shapes = ((2, 3, 520), (4, 3, 5), (2, 5, 520), (4, 5, 5), (2, 3, 520), (4, 3, 5), (2, 4, 520))
    arrays = [rng.standard_normal(s) for s in shapes]

    def loss(x1, w1, x2, w2, x3, w3, g):  # noqa: ANN001, ANN202 - traced tensors
        y = ops.conv1d(x1, w1, padding="same") + ops.conv1d(x2, w2, padding="same")
        return ops.sum((y + ops.conv1d(x3, w3, padding="same")) * g)
    graph = fc.trace(loss, *(fc.TensorType("f64", s) for s in shapes))
    backward = fc.build_backward_graph(graph, 0, list(range(6)))
    merged = fc.compile(backward, cache=False)
    assert _ops(merged).count("conv1d_grads_internal") == 3
    got = merged.run(arrays)[1:]
    want = fc.compile(backward, cache=False, disable=["merge_conv1d_gradients"]).run(arrays)[1:]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_sample_columns_hold_the_padded_windows_for_every_stride_dilation_and_padding():
    """The columns copy each tap straight from the sample and leave the positions that read the padding at zero:
    they must equal the taps of the zero-padded sample, including paddings wider than the kernel's extent and
    windows that read no sample value at all."""
    rng = np.random.default_rng(5)
    for n in (1, 4, 9):
        for kernel in (1, 2, 3):
            for stride in (1, 2, 3):
                for dilation in (1, 2):
                    for left in (0, 1, 4, 7):
                        for right in (0, 2, 6):
                            extent = dilation * (kernel - 1) + 1
                            if left + n + right < extent:
                                continue
                            count = (left + n + right - extent) // stride + 1
                            columns = conv._SampleColumns(4, n, left, right, kernel, stride, dilation, count, 2,
                                                          np.dtype(np.float64))
                            for _ in range(2):  # the buffer is reused: the second sample overwrites the first
                                a = rng.standard_normal((4, n))
                                padded = np.pad(a, ((0, 0), (left, right)))
                                want = np.stack([padded[:, k * dilation:k * dilation + (count - 1) * stride + 1:stride]
                                                 for k in range(kernel)], axis=1)
                                got = columns.of(a)
                                assert got.shape == (2, 2 * kernel, count)
                                np.testing.assert_array_equal(got.reshape(4, kernel, count), want)


def _loss(attrs: dict, shapes, dtype: str = "f32", disable=()):  # noqa: ANN001, ANN202
    graph = fc.trace(lambda a, b, c: ops.sum(ops.conv1d(a, b, **attrs) * c),
                     *(fc.TensorType(dtype, s) for s in shapes))
    return fc.compile(fc.build_backward_graph(graph, 0, [0, 1]), cache=False, disable=list(disable))


@pytest.mark.parametrize("attrs, w_shape", [({"padding": "same"}, (6, 4, 5)),
                                            ({"padding": [3, 1], "dilation": 2, "groups": 2}, (6, 2, 3)),
                                            ({"padding": 1, "stride": 2}, (6, 4, 3))])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf])
def test_a_convolution_times_a_value_of_its_type_runs_as_one_node_with_the_same_bits(attrs, w_shape, bad):
    """merge_conv1d_multiply: the loss sum(conv1d(x, w) * g) and both gradients are bitwise those of the two
    ops, a NaN or an infinity in x, w or g included (it spreads as the product spreads it)."""
    rng = np.random.default_rng(17)
    x, w = rng.standard_normal((3, 4, 1100)).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    g = rng.standard_normal(_forward(x, w, attrs).shape).astype(np.float32)
    for where, array in enumerate((x, w, g)):
        if bad is not None:
            array = array.copy()
            array.flat[7 + where] = bad
        inputs = [array if i == where else a for i, a in enumerate((x, w, g))]
        merged = _loss(attrs, (x.shape, w.shape, g.shape))
        apart = _loss(attrs, (x.shape, w.shape, g.shape), disable=["merge_conv1d_multiply"])
        assert "conv1d_mul_internal" in _ops(merged) and "conv1d" not in _ops(merged)
        assert "conv1d_mul_internal" not in _ops(apart)
        with np.errstate(invalid="ignore"):
            pairs = list(zip(merged.run(inputs), apart.run(inputs)))
        for got, want in pairs:
            np.testing.assert_array_equal(got, want)
        if bad is None:
            break


def test_a_convolution_read_twice_or_broadcast_or_short_is_not_merged_with_its_product():
    rng = np.random.default_rng(19)
    x, w = rng.standard_normal((2, 3, 600)), rng.standard_normal((4, 3, 5))
    twice = fc.compile(fc.trace(lambda a, b, c: [ops.conv1d(a, b, padding="same") * c,
                                                 ops.conv1d(a, b, padding="same")],
                                "f64[2, 3, 600]", "f64[4, 3, 5]", "f64[2, 4, 600]"), cache=False)
    broadcast = fc.compile(fc.trace(lambda a, b, c: ops.conv1d(a, b, padding="same") * c,
                                    "f64[2, 3, 600]", "f64[4, 3, 5]", "f64[4, 600]"), cache=False)
    short = fc.compile(fc.trace(lambda a, b, c: ops.conv1d(a, b, padding="same") * c,
                                "f64[2, 3, 60]", "f64[4, 3, 5]", "f64[2, 4, 60]"), cache=False)
    for executable in (twice, broadcast, short):
        assert "conv1d_mul_internal" not in _ops(executable)
    g = rng.standard_normal((2, 4, 600))
    y = _forward(x, w, {"padding": "same"})
    np.testing.assert_array_equal(twice.run([x, w, g])[0], y * g)
    np.testing.assert_array_equal(broadcast.run([x, w, g[0]])[0], y * g[0])


def test_the_merged_product_has_the_gradient_of_the_two_ops():
    """conv1d_mul_internal's own GradientFn (second order, as in a Hessian-vector product) against the two ops."""
    rng = np.random.default_rng(23)
    x, w, g = rng.standard_normal((2, 3, 520)), rng.standard_normal((4, 3, 5)), rng.standard_normal((2, 4, 520))
    types = (fc.TensorType("f64", s) for s in ((2, 3, 520), (4, 3, 5), (2, 4, 520)))
    merged = fc.trace(lambda a, b, c: ops.sum(ops.conv1d_mul_internal(a, b, c, padding="same") ** 2), *types)
    types = (fc.TensorType("f64", s) for s in ((2, 3, 520), (4, 3, 5), (2, 4, 520)))
    apart = fc.trace(lambda a, b, c: ops.sum((ops.conv1d(a, b, padding="same") * c) ** 2), *types)
    got = fc.compile(fc.build_backward_graph(merged, 0, [0, 1, 2]), cache=False).run([x, w, g])
    want = fc.compile(fc.build_backward_graph(apart, 0, [0, 1, 2]), cache=False).run([x, w, g])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("length", [40, 520])
def test_the_merged_product_in_float16_rounds_the_convolution_once_then_multiplies_as_the_two_ops(length):
    rng = np.random.default_rng(29)
    x, w, g = (rng.standard_normal(s).astype(np.float16) for s in ((2, 3, length), (4, 3, 5), (2, 4, length)))
    types = [fc.TensorType("f16", a.shape) for a in (x, w, g)]
    merged = fc.compile(fc.trace(lambda a, b, c: ops.conv1d_mul_internal(a, b, c, padding="same"), *types),
                        cache=False)
    apart = fc.compile(fc.trace(lambda a, b, c: ops.conv1d(a, b, padding="same") * c, *types), cache=False)
    np.testing.assert_array_equal(merged.run([x, w, g])[0], apart.run([x, w, g])[0])
