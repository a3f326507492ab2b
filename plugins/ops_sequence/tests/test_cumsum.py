"""cumsum: every (reverse, exclusive) variant against numpy and, to second order, against torch."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

VARIANTS = [(False, False), (True, False), (False, True), (True, True)]


def _numpy_cumsum(x, axis, reverse, exclusive):
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis)
    if exclusive:
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)], axis=axis)
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("reverse, exclusive", VARIANTS)
@pytest.mark.parametrize("shape, axis", [((7,), 0), ((3, 5), 1), ((4, 2, 3), 0), ((2, 3, 4), -2)])
def test_cumsum_matches_numpy(shape, axis, reverse, exclusive):
    x = np.random.default_rng(0).standard_normal(shape)
    graph = fc.trace(lambda a: ops.cumsum(a, axis=axis, reverse=reverse, exclusive=exclusive),
                     fc.TensorType("f64", shape))
    np.testing.assert_allclose(fc.compile(graph).run([x])[0], _numpy_cumsum(x, axis, reverse, exclusive), rtol=1e-14)


@pytest.mark.parametrize("reverse, exclusive", VARIANTS)
def test_cumsum_gradients_match_torch_to_second_order(reverse, exclusive, compare):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6))

    def reference(a):
        if reverse:
            a = torch.flip(a, [1])
        y = torch.cumsum(a, 1)
        if exclusive:
            y = torch.cat([torch.zeros_like(y[:, :1]), y[:, :-1]], 1)
        y = torch.flip(y, [1]) if reverse else y
        return y * y  # non-linear, so that the second order is not zero

    def frame_fn(a):
        y = ops.cumsum(a, axis=1, reverse=reverse, exclusive=exclusive)
        return y * y

    w, vs = compare.weights_for(rng, [x], [0], x.shape)
    compare.assert_same(compare.frame(frame_fn, [x], [0], w, vs), compare.torch(reference, [x], [0], w, vs),
                        rtol=1e-12, atol=1e-12)


def test_integer_cumsum_keeps_its_dtype():
    x = np.arange(6, dtype=np.int32)
    y = fc.compile(fc.trace(lambda a: ops.cumsum(a, axis=0), "i32[6]")).run([x])[0]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.cumsum(x))


@pytest.mark.parametrize("dtype, short", [("float16", "f16"), ("bfloat16", "bf16")])
def test_half_precision_cumsum_sums_in_float32(dtype, short):
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

    ones = np.ones(4096, dtype)
    y = fc.compile(fc.trace(lambda a: ops.cumsum(a, axis=0), f"{short}[4096]")).run([ones])[0]
    assert y.dtype == np.dtype(dtype)
    # a running total kept in half precision stops at 2048 (float16) or 256 (bfloat16)
    assert float(y[-1]) == 4096.0
    np.testing.assert_array_equal(y, np.arange(1, 4097, dtype=np.float32).astype(dtype))


@pytest.mark.parametrize("build, error, message", [
    (lambda: fc.trace(lambda a: ops.cumsum(a, axis=2), "f32[3, 4]"), fc.ShapeError, "axis 2 is out of range"),
    (lambda: fc.trace(lambda a: ops.cumsum(a, axis=0), "bool[3]"), fc.ShapeError, "must be numeric"),
    (lambda: fc.trace(lambda a: ops.cumsum(a), "f32[3]"), fc.AttributeSpecError, "'axis' (int) is required"),
])
def test_bad_cumsum_calls_are_named_errors(build, error, message):
    with pytest.raises(error) as info:
        build()
    assert message in str(info.value)
