"""conv2d, conv_transpose1d/2d: values and gradients to second order against torch, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

CONV2D_CASES = [
    # (x shape, w shape, attrs, torch padding (left, right, top, bottom))
    ((2, 3, 7, 6), (4, 3, 3, 3), {}, (0, 0, 0, 0)),
    ((2, 3, 7, 6), (4, 3, 3, 3), {"padding": "same"}, (1, 1, 1, 1)),
    ((2, 4, 8, 7), (2, 4, 2, 4), {"padding": "same"}, (1, 2, 0, 1)),          # even kernels: extra after
    ((1, 2, 9, 8), (3, 2, 3, 2), {"padding": [1, 0, 2, 1], "stride": [2, 3], "dilation": [2, 1]}, (2, 1, 1, 0)),
    ((2, 6, 7, 7), (4, 3, 3, 3), {"groups": 2, "padding": 1, "stride": 2}, (1, 1, 1, 1)),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"groups": 4, "padding": [1, 2]}, (2, 2, 1, 1)),  # depthwise
    ((2, 2, 3, 4), (3, 2, 3, 4), {}, (0, 0, 0, 0)),                           # kernel as large as the input
]


@pytest.mark.parametrize("case", CONV2D_CASES, ids=[str(c[2]) for c in CONV2D_CASES])
def test_conv2d_matches_torch_to_second_order(case, against_torch):
    import torch.nn.functional as F

    x_shape, w_shape, attrs, pad = case
    rng = np.random.default_rng(len(str(case)))
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    stride, dilation = attrs.get("stride", 1), attrs.get("dilation", 1)
    against_torch(lambda a, b: ops.conv2d(a, b, **attrs),
                  lambda a, b: F.conv2d(F.pad(a, pad), b, stride=stride, dilation=dilation,
                                        groups=attrs.get("groups", 1)),
                  [x, w], [0, 1])


TRANSPOSE_CASES = [
    ((2, 4, 3, 4), (4, 3, 3, 3), {}),
    ((2, 4, 3, 4), (4, 2, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    ((1, 3, 4, 3), (3, 2, 2, 3), {"stride": [2, 3], "padding": [1, 0], "dilation": [2, 1],
                                  "output_padding": [0, 2]}),
    # output_padding at or above the stride, below the dilation (torch allows it): windows past x read zeros
    ((2, 4, 3, 4), (4, 1, 2, 3), {"stride": [1, 2], "dilation": [3, 2], "output_padding": [2, 1], "groups": 4}),
    ((1, 2, 2, 3), (2, 3, 3, 2), {"stride": [2, 1], "dilation": [3, 3], "padding": [1, 2],
                                  "output_padding": [2, 2]}),
]


@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=[str(c[2]) for c in TRANSPOSE_CASES])
def test_conv_transpose2d_matches_torch_to_second_order(case, against_torch):
    import torch.nn.functional as F

    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(len(str(case)))
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    t_attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}
    against_torch(lambda a, b: ops.conv_transpose2d(a, b, **attrs),
                  lambda a, b: F.conv_transpose2d(a, b, **t_attrs), [x, w], [0, 1])


@pytest.mark.parametrize("attrs", [{}, {"stride": 3, "padding": 2, "output_padding": 2, "dilation": 2},
                                   {"stride": 2, "groups": 2, "padding": 1},
                                   {"stride": 1, "dilation": 3, "output_padding": 2, "padding": 1},
                                   {"stride": 2, "dilation": 4, "output_padding": 3, "groups": 2}])
def test_conv_transpose1d_matches_torch_to_second_order(attrs, against_torch):
    import torch.nn.functional as F

    rng = np.random.default_rng(len(str(attrs)))
    x, w = rng.standard_normal((2, 4, 5)), rng.standard_normal((4, 3, 3))
    against_torch(lambda a, b: ops.conv_transpose1d(a, b, **attrs),
                  lambda a, b: F.conv_transpose1d(a, b, **attrs), [x, w], [0, 1])


def test_conv2d_same_keeps_the_size_and_an_impulse_shows_the_kernel():
    x = np.zeros((1, 1, 5, 5), np.float32)
    x[0, 0, 2, 2] = 1.0
    w = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    exe = fc.compile(fc.trace(lambda a, b: ops.conv2d(a, b, padding="same"), "f32[1, 1, 5, 5]", "f32[1, 1, 3, 3]"))
    y = exe.run([x, w])[0]
    np.testing.assert_array_equal(y[0, 0, 1:4, 1:4], w[0, 0, ::-1, ::-1])  # correlation: the kernel flipped
    assert y.sum() == w.sum()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_conv2d_half_precision_matches_float32_rounded(dtype):
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    low = fc.compile(fc.trace(lambda a, b: ops.conv2d(a, b, padding=1), fc.TensorType(dtype, x.shape),
                              fc.TensorType(dtype, w.shape)))
    xl, wl = x.astype(dtype), w.astype(dtype)
    want = fc.compile(fc.trace(lambda a, b: ops.conv2d(a, b, padding=1), "f32[2, 3, 6, 6]", "f32[4, 3, 3, 3]")).run(
        [xl.astype(np.float32), wl.astype(np.float32)])[0].astype(dtype)
    got = low.run([xl, wl])[0]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_nan_and_inf_flow_through_conv2d():
    x = np.ones((1, 1, 4, 4))
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 3, 3] = np.inf
    exe = fc.compile(fc.trace(lambda a, b: ops.conv2d(a, b), "f64[1, 1, 4, 4]", "f64[1, 1, 2, 2]"))
    y = exe.run([x, np.ones((1, 1, 2, 2))])[0][0, 0]
    assert np.isnan(y[0, 0]) and np.isinf(y[2, 2]) and y[1, 1] == 4.0


@pytest.mark.parametrize("op, types, attrs, message", [
    ("conv2d", ["f32[1, 2, 4, 4]", "f32[3, 2, 5, 3]"], {}, "kernel covers 5 positions along spatial axis 0"),
    ("conv2d", ["f32[1, 2, 4, 4]", "f32[3, 2, 2, 2]"], {"stride": 0}, "stride must be >= 1, got [0, 0]"),
    ("conv2d", ["f32[1, 2, 4, 4]", "f32[3, 2, 2, 2]"], {"stride": [1, -2]}, "stride must be >= 1, got [1, -2]"),
    ("conv2d", ["f32[1, 4, 4, 4]", "f32[3, 2, 2, 2]"], {"groups": 2}, "groups = 2 must divide both C_in = 4 and "
                                                                        "C_out = 3"),
    ("conv2d", ["f32[1, 4, 4, 4]", "f32[4, 4, 2, 2]"], {"groups": 2}, "C_in / groups = 4 / 2 = 2"),
    ("conv2d", ["f32[1, 2, 4, 4]", "f32[3, 2, 2, 2]"], {"padding": "full"}, "padding 'full' is not a padding"),
    ("conv2d", ["f32[1, 2, 4, 4]", "f32[3, 2, 2, 2]"], {"padding": [1, 2, 3]}, "padding [1, 2, 3] must be one int"),
    ("conv2d", ["f32[2, 4, 4]", "f32[3, 2, 2, 2]"], {}, "x must be [batch, C_in, H, W]"),
    ("conv2d", ["f32[1, 2, 4, 4]", "f64[3, 2, 2, 2]"], {}, "floating tensors of one dtype"),
    ("conv_transpose2d", ["f32[1, 2, 4, 4]", "f32[2, 3, 2, 2]"], {"stride": 2, "output_padding": 2},
     "output_padding [2, 2] must be below the stride or the dilation on every axis (as torch's), but axis 0 has "
     "output_padding 2 with stride 2 and dilation 1"),
    ("conv_transpose1d", ["f32[1, 2, 4]", "f32[2, 3, 2]"], {"stride": 2, "dilation": 3, "output_padding": 3},
     "axis 0 has output_padding 3 with stride 2 and dilation 3; use an output_padding below 3"),
    ("conv_transpose2d", ["f32[1, 2, 1, 1]", "f32[2, 3, 2, 2]"], {"padding": 1}, "output would have spatial size"),
    ("conv_transpose1d", ["f32[1, 3, 4]", "f32[2, 3, 2]"], {}, "must have x's C_in = 3 rows"),
])
def test_bad_conv_input_is_a_named_shape_error(op, types, attrs, message):
    with pytest.raises(fc.ShapeError, match=None) as info:
        fc.trace(lambda a, b: getattr(ops, op)(a, b, **attrs), *types)
    assert message in str(info.value), str(info.value)
