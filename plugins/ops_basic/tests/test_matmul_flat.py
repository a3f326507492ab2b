"""A stack of matrices times one matrix runs as one 2-D product (linalg's module doc), and so do its gradients.

The results are bitwise the 2-D product of the stacked rows, whatever the left operand's layout, and differ from
numpy's stacked matmul (one BLAS call per matrix) by float rounding only: within ``k eps (|a| @ |b|)`` per
element, the usual bound for a dot product of length ``k``.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import check_gradients

from .test_fast_kernels import assert_bitwise, kernel

# (a, b): a stack against a matrix or a vector
FORWARD = [((4, 256, 64), (64, 64)), ((3, 5, 7, 16), (16, 9)), ((2, 1, 33), (33, 65)), ((6, 4, 8), (8,)),
           ((1024, 2, 12), (12, 12))]


def _type(dtype, shape):
    return f"{'f32' if dtype is np.float32 else 'f64'}[{', '.join(map(str, shape))}]"


def _bound(a, b, k, dtype):
    """Elementwise bound on two float orderings of the same dot products: k eps (|a| @ |b|), each way."""
    return 2 * k * np.finfo(dtype).eps * np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape", FORWARD, ids=[f"{a}@{b}" for a, b in FORWARD])
def test_stacked_matmul_is_one_2d_product_within_rounding_of_numpys(a_shape, b_shape, dtype):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)
    k = a_shape[-1]
    want = np.matmul(a.reshape(-1, k), b).reshape(np.matmul(a, b).shape)
    run = kernel("matmul", [_type(dtype, a_shape), _type(dtype, b_shape)])
    assert_bitwise(run(a, b), want)
    out = np.full(want.shape, 7, dtype)
    assert run(a, b, out) is out
    assert_bitwise(out, want)
    strided = np.empty((*a_shape, 2), dtype)[..., 0]  # same values, another layout
    strided[...] = a
    assert not strided.flags.c_contiguous
    assert_bitwise(run(strided, b), want)
    column = np.empty(want.shape[::-1], dtype).T  # a non-contiguous out
    assert run(a, b, column) is column
    assert_bitwise(column, want)
    assert_bitwise(fc.compile(fc.trace(lambda x, y: x @ y, _type(dtype, a_shape), _type(dtype, b_shape)),
                              cache=False).run([a, b])[0], want)
    stacked = np.matmul(a, b)
    assert np.all(np.abs(want.astype(np.float64) - stacked) <= _bound(a, b, k, dtype))


# (x, y, shape) of the gradient ops that run as one product: lhs gy[..., m, n] @ b[k, n]^T, rhs summed a^T @ gy
GRADIENTS = [("lhs", (4, 256, 64), (32, 64), (4, 256, 32)), ("lhs", (3, 2, 5, 7), (6, 7), (3, 2, 5, 6)),
             ("rhs", (4, 256, 64), (4, 256, 32), (64, 32)), ("rhs", (3, 2, 5, 7), (3, 2, 5, 6), (7, 6)),
             ("rhs", (4096, 1, 16), (4096, 1, 8), (16, 8))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("side, x_shape, y_shape, shape", GRADIENTS)
def test_gradient_ops_of_a_stack_are_one_2d_product_within_rounding_of_numpys(side, x_shape, y_shape, shape, dtype):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(y_shape).astype(dtype)
    run = kernel(f"matmul_grad_{side}_internal", [_type(dtype, x_shape), _type(dtype, y_shape)], shape=list(shape))
    if side == "lhs":
        want = np.matmul(x.reshape(-1, x_shape[-1]), y.T).reshape(shape)
        stacked, bound = np.matmul(x, y.T), _bound(x, y.T, x_shape[-1], dtype)
    else:
        want = np.matmul(x.reshape(-1, x_shape[-1]).T, y.reshape(-1, y_shape[-1]))
        stacked = np.sum(np.matmul(np.swapaxes(x, -1, -2), y), axis=tuple(range(len(x_shape) - 2)))
        rows = int(np.prod(x_shape[:-1]))
        bound = _bound(x.reshape(rows, -1).T, y.reshape(rows, -1), rows, dtype)
    assert_bitwise(run(x, y), want)
    strided = np.empty((*x_shape, 2), dtype)[..., 0]  # same values, another layout
    strided[...] = x
    assert_bitwise(run(strided, y), want)
    out = np.empty(shape, dtype)
    assert run(x, y, out) is out
    assert_bitwise(out, want)
    assert np.all(np.abs(want.astype(np.float64) - stacked) <= bound)


def test_a_stack_against_a_matrix_has_gradients_to_second_order():
    rng = np.random.default_rng(2)
    graph = fc.trace(lambda a, b: ops.sum(ops.tanh(a @ b) ** 2.0), "f64[3, 4, 5]", "f64[5, 2]")
    check_gradients(graph, [rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 2))], order=2).assert_ok()


def test_integer_stacks_keep_numpys_product():
    rng = np.random.default_rng(3)
    a, b = rng.integers(-50, 50, (3, 4, 5)), rng.integers(-50, 50, (5, 2))
    np.testing.assert_array_equal(kernel("matmul", ["i64[3, 4, 5]", "i64[5, 2]"])(a, b), np.matmul(a, b))
