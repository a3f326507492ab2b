"""Creation ops against numpy (values, dtypes and element counts) and torch, their gradients, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops


def made(fn):
    return fc.compile(fc.trace(fn)).run([])[0]


@pytest.mark.parametrize("args", [
    (5,), (2, 7), (0, 1, 0.1), (1, 1.3, 0.1), (0.0, 1.0, 0.25), (10, 0, -3), (3, 3), (5, 0), (-1.5, 2.5, 0.7),
    (0, 5e-324, 1.0), (1e16, 1e16 + 8, 2.0), (0.5, 3, 1),
])
def test_arange_matches_numpy_in_count_dtype_and_values(args):
    y = made(lambda: ops.arange(*args))
    expected = np.arange(*args)
    assert y.dtype == expected.dtype and y.shape == expected.shape, (y, expected)
    np.testing.assert_array_equal(y, expected)


def test_arange_takes_numpys_keyword_forms():
    np.testing.assert_array_equal(made(lambda: ops.arange(stop=4)), np.arange(4))
    np.testing.assert_array_equal(made(lambda: ops.arange(2, step=-1, stop=-2)), np.arange(2, -2, -1))


def test_arange_with_a_dtype_rounds_once():
    np.testing.assert_array_equal(made(lambda: ops.arange(0.0, 1.0, 0.1, dtype="f32")),
                                  np.arange(0.0, 1.0, 0.1).astype(np.float32))
    np.testing.assert_array_equal(made(lambda: ops.arange(3, -4, -2, dtype="i32")),
                                  np.arange(3, -4, -2, dtype=np.int32))


@pytest.mark.parametrize("args, kwargs", [((0.0, 1.0, 5), {}), ((-1.0, 1.0, 4), {"endpoint": False}),
                                          ((2.0, 3.0, 1), {}), ((0.0, 1.0, 0), {}), ((0.0, 10.0, 7), {"dtype": "i64"})])
def test_linspace_matches_numpy(args, kwargs):
    y = made(lambda: ops.linspace(*args, **kwargs))
    expected = np.linspace(*args, endpoint=kwargs.get("endpoint", True),
                           dtype=np.int64 if kwargs.get("dtype") == "i64" else None)
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)


def test_fills_and_eye_match_numpy():
    for got, expected in [
        (made(lambda: ops.zeros((2, 3))), np.zeros((2, 3))),
        (made(lambda: ops.ones((4,), dtype="f32")), np.ones(4, np.float32)),
        (made(lambda: ops.full((2, 2), 7)), np.full((2, 2), 7)),
        (made(lambda: ops.full((3,), 2.5, dtype="f32")), np.full(3, 2.5, np.float32)),
        (made(lambda: ops.full((2,), float("nan"))), np.full(2, np.nan)),
        (made(lambda: ops.eye(3)), np.eye(3)),
        (made(lambda: ops.eye(2, 4, k=1, dtype="i32")), np.eye(2, 4, k=1, dtype=np.int32)),
        (made(lambda: ops.eye(3, k=-2)), np.eye(3, k=-2)),
    ]:
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def test_results_are_fresh_arrays():
    exe = fc.compile(fc.trace(lambda: ops.zeros((3,))))
    exe.run([])[0][:] = 5.0
    assert not exe.run([])[0].any()


def test_like_ops_take_the_type_and_pass_no_gradient():
    x = np.array([[1.0, -2.0], [3.0, 4.0]])
    forward = fc.trace(lambda x: ops.sum(x * ops.ones_like(x) * 3.0 + ops.zeros_like(x) * x), "f64[2, 2]")
    outs = fc.compile(fc.build_backward_graph(forward, 0, [0])).run([x])
    np.testing.assert_array_equal(outs[1], np.full((2, 2), 3.0))  # only the x * ones * 3 path carries a gradient
    z, o = fc.compile(fc.trace(lambda x: (ops.zeros_like(x), ops.ones_like(x, dtype="i32")), "f32[2, 3]")).run(
        [np.ones((2, 3), np.float32)])
    assert z.dtype == np.float32 and not z.any() and o.dtype == np.int32 and (o == 1).all()


def test_created_tensors_differentiate_as_constants():
    forward = fc.trace(lambda x: ops.sum(x * ops.arange(4, dtype="f64") + ops.linspace(0.0, 1.0, 4)), "f64[4]")
    outs = fc.compile(fc.build_backward_graph(forward, 0, [0])).run([np.ones(4)])
    np.testing.assert_array_equal(outs[1], np.arange(4.0))


def test_against_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    d = torch.float64
    pairs = [
        (made(lambda: ops.arange(0.0, 1.0, 0.1)), torch.arange(0.0, 1.0, 0.1, dtype=d)),
        (made(lambda: ops.arange(10, 0, -3)), torch.arange(10, 0, -3)),
        (made(lambda: ops.linspace(-1.0, 2.0, 7)), torch.linspace(-1.0, 2.0, 7, dtype=d)),
        (made(lambda: ops.eye(3, 5)), torch.eye(3, 5, dtype=d)),
        (made(lambda: ops.full((2, 3), -1.5)), torch.full((2, 3), -1.5, dtype=d)),
        (made(lambda: ops.zeros((2,))), torch.zeros(2, dtype=d)),
        (made(lambda: ops.ones((2, 1))), torch.ones(2, 1, dtype=d)),
    ]
    for got, expected in pairs:
        assert got.shape == tuple(expected.shape)
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-15, atol=1e-16)


# -- bad input ------------------------------------------------------------------------------------------
def test_arange_with_a_zero_step_names_the_values():
    with pytest.raises(ShapeError, match=r"arange: step is 0 \(start=1, stop=5\)"):
        fc.trace(lambda: ops.arange(1, 5, 0))
    with pytest.raises(ShapeError, match=r"arange: step is 0 \(start=0.5, stop=2.0\)"):
        fc.trace(lambda: ops.arange(0.5, 2.0, 0.0))


@pytest.mark.parametrize("fn, message", [
    (lambda: ops.arange(0, float("inf")), r"stop=inf is not finite"),
    (lambda: ops.arange(0.5, 3, dtype="i32"), r"start=0.5 is not a whole number in the range of i32"),
    (lambda: ops.full((2,), 2.5, dtype="i64"), r"value=2.5 is not a whole number"),
    (lambda: ops.full((2,), 2**40, dtype="i32"), r"range of i32"),
    (lambda: ops.linspace(0.0, 1.0, -1), r"num=-1 is negative"),
    (lambda: ops.eye(-2), r"n=-2 is negative"),
])
def test_bad_arguments_are_named_errors(fn, message):
    with pytest.raises(ShapeError, match=message):
        fc.trace(fn)
