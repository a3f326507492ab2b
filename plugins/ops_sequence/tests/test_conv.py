"""conv1d, max_pool1d and avg_pool1d: values and gradients to second order against torch, and bad input.

Second order here is the product d(sum_i v_i . g_i)/dx of the first-order
gradients g with random directions v (ARCH-067), computed by frame with two
applications of build_backward_graph and by torch with create_graph=True.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
F = torch.nn.functional


def _torch_padding(padding, extent, length, stride):  # -> (left, right) as ints, the way frame resolves them
    if padding == "valid":
        return 0, 0
    if padding == "causal":
        return extent - 1, 0
    if padding == "same":
        total = max((-(-length // stride) - 1) * stride + extent - length, 0)
        return total // 2, total - total // 2
    return (padding, padding) if isinstance(padding, int) else tuple(padding)


CONV_CASES = [
    # (batch, C_in, L, C_out, K, attrs)
    (2, 3, 11, 4, 3, {}),
    (2, 3, 11, 4, 3, {"padding": "same"}),
    (2, 4, 12, 2, 4, {"padding": "same"}),                      # even kernel: the extra position goes right
    (2, 3, 10, 4, 3, {"padding": "causal", "dilation": 2}),
    (1, 2, 13, 3, 3, {"padding": 2, "stride": 2}),
    (2, 2, 12, 2, 2, {"padding": [3, 1], "stride": 3, "dilation": 2}),
    (2, 6, 9, 4, 3, {"groups": 2, "padding": "same", "stride": 2}),
    (1, 4, 8, 4, 3, {"groups": 4, "padding": "causal"}),         # depthwise
    (2, 3, 5, 2, 5, {}),                                         # kernel as long as the input: one output
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(c[5]) for c in CONV_CASES])
def test_conv1d_matches_torch_to_second_order(case, compare):
    batch, c_in, length, c_out, k, attrs = case
    groups = attrs.get("groups", 1)
    rng = np.random.default_rng(len(str(case)))
    x = rng.standard_normal((batch, c_in, length))
    w = rng.standard_normal((c_out, c_in // groups, k))
    got_shape = fc.trace(lambda a, b: ops.conv1d(a, b, **attrs), fc.TensorType("f64", x.shape),
                         fc.TensorType("f64", w.shape)).outputs[0].type.shape
    stride, dilation = attrs.get("stride", 1), attrs.get("dilation", 1)
    left, right = _torch_padding(attrs.get("padding", "valid"), dilation * (k - 1) + 1, length, stride)

    def reference(a, b):
        return F.conv1d(F.pad(a, (left, right)), b, stride=stride, dilation=dilation, groups=groups)

    wy, vs = compare.weights_for(rng, [x, w], [0, 1], got_shape)
    want = compare.torch(reference, [x, w], [0, 1], wy, vs)
    got = compare.frame(lambda a, b: ops.conv1d(a, b, **attrs), [x, w], [0, 1], wy, vs)
    compare.assert_same(got, want, rtol=1e-10, atol=1e-10)


def test_conv1d_same_with_stride_one_keeps_the_length_and_causal_sees_no_future():
    x = np.zeros((1, 1, 8), np.float32)
    x[0, 0, 5] = 1.0  # an impulse at t = 5
    w = np.ones((1, 1, 3), np.float32)
    same = fc.compile(fc.trace(lambda a, b: ops.conv1d(a, b, padding="same"), "f32[1, 1, 8]", "f32[1, 1, 3]"))
    causal = fc.compile(fc.trace(lambda a, b: ops.conv1d(a, b, padding="causal"), "f32[1, 1, 8]", "f32[1, 1, 3]"))
    np.testing.assert_array_equal(same.run([x, w])[0][0, 0], [0, 0, 0, 0, 1, 1, 1, 0])
    np.testing.assert_array_equal(causal.run([x, w])[0][0, 0], [0, 0, 0, 0, 0, 1, 1, 1])  # t >= 5 only


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_conv1d_half_precision_is_computed_in_float32_and_rounded_once(dtype):
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 64)).astype(dtype)
    w = rng.standard_normal((4, 8, 5)).astype(dtype)
    t = "f16" if dtype == "float16" else "bf16"
    out = fc.compile(fc.trace(lambda a, b: ops.conv1d(a, b, padding="same"), f"{t}[2, 8, 64]", f"{t}[4, 8, 5]")).run([x, w])[0]
    exact = F.conv1d(torch.tensor(x.astype(np.float64)), torch.tensor(w.astype(np.float64)), padding="same").numpy()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, exact.astype(np.float32).astype(dtype))


POOL_CASES = [
    # (shape, attrs)
    ((2, 3, 10), {"kernel_size": 2}),
    ((2, 3, 11), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 9), {"kernel_size": 3, "stride": 1, "padding": [2, 0]}),
    ((1, 2, 9), {"kernel_size": 4, "stride": 3, "padding": "same"}),
]


def _pool_padding(attrs, length):
    k = attrs["kernel_size"]
    return _torch_padding(attrs.get("padding", "valid"), k, length, attrs.get("stride") or k)


@pytest.mark.parametrize("case", POOL_CASES, ids=[str(c[1]) for c in POOL_CASES])
def test_max_pool1d_matches_torch_to_second_order(case, compare):
    shape, attrs = case
    rng = np.random.default_rng(len(str(case)))
    x = rng.permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) / 7.0  # no ties
    left, right = _pool_padding(attrs, shape[-1])
    k = attrs["kernel_size"]

    def reference(a):
        return F.max_pool1d(F.pad(a, (left, right), value=-np.inf), k, stride=attrs.get("stride") or k)

    out_shape = reference(torch.tensor(x)).shape
    wy, vs = compare.weights_for(rng, [x], [0], tuple(out_shape))
    compare.assert_same(compare.frame(lambda a: ops.max_pool1d(a, **attrs), [x], [0], wy, vs),
                        compare.torch(reference, [x], [0], wy, vs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=[str(c[1]) for c in POOL_CASES])
def test_avg_pool1d_matches_torch_to_second_order(case, include_pad, compare):
    shape, attrs = case
    rng = np.random.default_rng(len(str(case)))
    x = rng.standard_normal(shape)
    left, right = _pool_padding(attrs, shape[-1])
    k = attrs["kernel_size"]
    stride = attrs.get("stride") or k

    def reference(a):
        sums = F.avg_pool1d(F.pad(a, (left, right)), k, stride=stride) * k
        if include_pad:
            return sums / k
        counts = F.avg_pool1d(F.pad(torch.ones(shape[-1], dtype=a.dtype)[None], (left, right)), k, stride=stride) * k
        return sums / counts[0]

    out_shape = reference(torch.tensor(x)).shape
    wy, vs = compare.weights_for(rng, [x], [0], tuple(out_shape))
    got = compare.frame(lambda a: ops.avg_pool1d(a, count_include_pad=include_pad, **attrs), [x], [0], wy, vs)
    compare.assert_same(got, compare.torch(reference, [x], [0], wy, vs), rtol=1e-12, atol=1e-12)


def test_max_pool1d_gives_a_tie_to_the_first_maximum_and_propagates_nan():
    x = np.array([[1.0, 3.0, 3.0, 2.0, np.nan, 5.0]], np.float64)
    g = fc.trace(lambda a: ops.max_pool1d(a, kernel_size=3, stride=3), "f64[1, 6]")
    g, loss = fc.extend_graph(g, lambda a, y: ops.sum(y * np.array([[1.0, 10.0]])))
    y, _, gx = fc.compile(fc.build_backward_graph(g, loss, [0])).run([x])
    assert y[0, 0] == 3.0 and np.isnan(y[0, 1])
    np.testing.assert_array_equal(gx, [[0.0, 1.0, 0.0, 0.0, 10.0, 0.0]])  # first 3 wins; the NaN takes the gradient


def test_a_max_pool1d_window_of_minus_infinity_gives_its_gradient_to_a_real_position_not_the_padding():
    # Padding is -inf too, so a window whose real values are all -inf used to pick its padded tap as argmax and
    # the gradient vanished with the padding; the window's output is its first real value, and torch (which pads
    # inside its kernel) gives the gradient there.
    x = np.array([[-np.inf, -np.inf, 1.0, -np.inf, -np.inf]])
    for k, stride, pad in [(2, 2, 1), (3, 1, 1), (3, 2, 1)]:
        tx = torch.tensor(x, requires_grad=True)
        ty = F.max_pool1d(tx[None], k, stride, padding=pad)[0]
        ty.backward(torch.ones_like(ty))
        attrs = {"kernel_size": k, "stride": stride, "padding": pad}
        graph = fc.build_backward_graph(fc.trace(lambda a: ops.sum(ops.max_pool1d(a, **attrs)), "f64[1, 5]"), 0, [0])
        np.testing.assert_array_equal(fc.compile(graph).run([x])[1], tx.grad.numpy(), err_msg=str(attrs))
    # asymmetric padding (torch has none): each window's first real position; the select op reads the same one
    attrs = {"kernel_size": 3, "stride": 1, "padding": [2, 2]}
    graph = fc.build_backward_graph(fc.trace(lambda a: ops.sum(ops.max_pool1d(a, **attrs)), "f64[1, 5]"), 0, [0])
    np.testing.assert_array_equal(fc.compile(graph).run([x])[1], [[2.0, 0.0, 3.0, 1.0, 1.0]])
    select = fc.trace(lambda a, g: ops.max_pool1d_select_internal(a, g, **attrs), "f64[1, 5]", "f64[1, 5]")
    np.testing.assert_array_equal(fc.compile(select).run([x, np.arange(5.0)[None]])[0], [[0, 0, 2, 2, 2, 3, 4]])


@pytest.mark.parametrize("build, message", [
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w), "f32[1, 2, 3]", "f32[4, 2, 5]"), "covers 5 positions, more than the padded input's 3"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w, dilation=3, padding=[0, 0]), "f32[1, 2, 6]", "f32[4, 2, 3]"), "covers 7 positions, more than the padded input's 6"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w, groups=2), "f32[1, 3, 8]", "f32[4, 1, 3]"), "groups = 2 must divide both C_in = 3"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w, groups=2), "f32[1, 4, 8]", "f32[4, 4, 3]"), "C_in / groups = 4 / 2 = 2 input channels"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w, padding="full"), "f32[1, 2, 8]", "f32[4, 2, 3]"), "padding 'full' is not a mode"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w, padding=[1, -1]), "f32[1, 2, 8]", "f32[4, 2, 3]"), "all >= 0"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w, stride=0), "f32[1, 2, 8]", "f32[4, 2, 3]"), "stride must be >= 1"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w), "f32[2, 8]", "f32[4, 2, 3]"), "x must be [batch, C_in, L]"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w), "f32[1, 2, 8]", "f64[4, 2, 3]"), "one dtype"),
    (lambda: fc.trace(lambda x, w: ops.conv1d(x, w), "i32[1, 2, 8]", "i32[4, 2, 3]"), "floating"),
    (lambda: fc.trace(lambda x: ops.max_pool1d(x, kernel_size=4), "f32[2, 3]"), "pooling window covers 4 positions"),
    # a pool has no dilation to lower, and its padding cannot grow past kernel_size: the advice must fit
    (lambda: fc.trace(lambda x: ops.avg_pool1d(x, kernel_size=4), "f32[2, 3]"),
     "use a smaller pooling window (kernel_size), or a longer input: pools have no dilation"),
    (lambda: fc.trace(lambda x: ops.max_pool1d(x, kernel_size=2, padding=2), "f32[2, 8]"), "must stay below kernel_size"),
    (lambda: fc.trace(lambda x: ops.avg_pool1d(x, kernel_size=0), "f32[2, 8]"), "kernel_size must be >= 1"),
    (lambda: fc.trace(lambda g, w: ops.conv1d_grad_input_internal(g, w, padding=[2, 2], length=-1),
                      "f32[1, 2, 2]", "f32[2, 1, 3]"), "length must be >= 1, got -1"),
    (lambda: fc.trace(lambda g: ops.avg_pool1d_grad_internal(g, kernel_size=3, padding=[2, 2], length=-1),
                      "f32[2, 2]"), "length must be >= 1, got -1"),
])
def test_bad_convolutions_and_pools_are_named_shape_errors(build, message):
    with pytest.raises(fc.ShapeError) as info:
        build()
    assert message in str(info.value)


def test_padding_of_the_wrong_kind_names_both_accepted_kinds():
    with pytest.raises(fc.AttributeSpecError, match="'str' or 'ints'"):
        fc.trace(lambda x, w: ops.conv1d(x, w, padding=1.5), "f32[1, 2, 8]", "f32[4, 2, 3]")


def test_a_conv_graph_round_trips_through_json_with_both_padding_kinds():
    g = fc.trace(lambda x, w: ops.conv1d(ops.conv1d(x, w, padding="same"), w, padding=[2, 0]),
                 "f32[1, 2, 8]", "f32[2, 2, 3]")
    back = fc.loads(fc.dumps(g))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 8)).astype(np.float32), rng.standard_normal((2, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(fc.compile(back).run([x, w])[0], fc.compile(g).run([x, w])[0])


def test_an_empty_batch_convolves_to_an_empty_output_and_zero_weight_gradient():
    g = fc.trace(lambda x, w: ops.sum(ops.conv1d(x, w, padding="same", stride=2)), "f32[0, 2, 5]", "f32[3, 2, 2]")
    loss, gx, gw = fc.compile(fc.build_backward_graph(g, 0, [0, 1])).run(
        [np.ones((0, 2, 5), np.float32), np.ones((3, 2, 2), np.float32)])
    assert loss == 0.0 and gx.shape == (0, 2, 5)
    np.testing.assert_array_equal(gw, np.zeros((3, 2, 2), np.float32))
