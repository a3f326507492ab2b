"""Higher order by applying the same transform again (ARCH-067) and the second-order acceptance list (ARCH-069)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from ._fd import gradient, rel_error, second_difference


def grad_graph(forward, wrt, loss=0):
    return fc.build_backward_graph(forward, loss, wrt)


def second_order(forward, wrt, weights=None):
    """d/dx [sum(weights * d loss/dx)] by two applications of build_backward_graph."""
    first = grad_graph(forward, [wrt])
    contracted, index = fc.add_scalar_contraction(first, len(first.outputs) - 1, weights=weights)
    return grad_graph(contracted, [wrt], loss=index)


def test_analytic_polynomial_second_derivative_matches_the_central_second_difference():
    # p(x) = 3x^4 - 2x^3 + x - 5, elementwise on points; p''(x) = 36x^2 - 12x
    poly = lambda x: 3 * x**4 - 2 * x**3 + x - 5.0  # noqa: E731
    forward = fc.trace(lambda x: ops.sum(3.0 * ops.square(ops.square(x)) - 2.0 * x * x * x + x - 5.0), "f64[7]")
    x = np.linspace(-1.5, 1.5, 7)
    d2 = fc.compile(second_order(forward, 0)).run([x])[-1]
    np.testing.assert_allclose(d2, 36 * x**2 - 12 * x, rtol=1e-12, atol=1e-12)
    numeric = np.array([second_difference(poly, float(v)) for v in x])
    np.testing.assert_allclose(d2, numeric, rtol=1e-5, atol=1e-5)


def test_third_order_is_the_same_function_applied_three_times():
    forward = fc.trace(lambda x: ops.sum(ops.sin(x) * x), "f64[4]")
    g2 = second_order(forward, 0)
    contracted, index = fc.add_scalar_contraction(g2, len(g2.outputs) - 1)
    g3 = grad_graph(contracted, [0], loss=index)
    x = np.array([-1.0, 0.0, 0.3, 2.0])
    d3 = fc.compile(g3).run([x])[-1]
    # (x sin x)''' = -3 sin x - x cos x
    np.testing.assert_allclose(d3, -3 * np.sin(x) - x * np.cos(x), rtol=1e-12, atol=1e-12)


def test_matmul_sum_mse_chain_second_order_matches_finite_differences_of_the_gradient():
    def f(x, w, t):
        h = x @ w
        return ops.mse_loss(h, t) + ops.sum(h * h) * 0.1
    forward = fc.trace(f, "f64[4, 3]", "f64[3, 5]", "f64[4, 5]")  # a non-square matmul
    rng = np.random.default_rng(3)
    x, w, t = (rng.standard_normal(s.shape) for s in forward.input_types)
    v = rng.standard_normal(w.shape)  # a random direction: Hessian-vector product H v
    hvp_graph = second_order(forward, 1, weights=v)
    hvp = fc.compile(hvp_graph).run([x, w, t])[-1]
    first = fc.compile(grad_graph(forward, [1]))

    def directional(ww):
        return float(np.sum(v * first.run([x, ww, t])[-1]))
    assert rel_error(hvp, gradient(directional, w)) < 1e-7


def test_relu_has_zero_second_derivative_away_from_the_kink():
    forward = fc.trace(lambda x: ops.sum(ops.relu(x) * 3.0), "f64[6]")
    x = np.array([-2.0, -0.5, -0.1, 0.1, 0.5, 2.0])
    outs = fc.compile(second_order(forward, 0)).run([x])
    np.testing.assert_allclose(outs[1], np.where(x > 0, 3.0, 0.0))
    np.testing.assert_array_equal(outs[-1], np.zeros(6))


def test_a_disconnected_wrt_has_zero_first_and_second_derivatives():
    forward = fc.trace(lambda x, z: ops.sum(ops.exp(x)), "f64[3]", "f64[2]")
    first = grad_graph(forward, [1])
    contracted, index = fc.add_scalar_contraction(first, 1)
    second = grad_graph(contracted, [1], loss=index)
    outs = fc.compile(second).run([np.ones(3), np.ones(2)])
    assert not outs[1].any() and not outs[-1].any() and outs[-1].shape == (2,)


def test_mixed_second_derivative_across_inputs():
    # d/dw [sum(d/dx sum(x^2 w))] = d/dw sum(2 x w) = 2 x
    forward = fc.trace(lambda x, w: ops.sum(ops.square(x) * w), "f64[3]", "f64[3]")
    first = grad_graph(forward, [0])
    contracted, index = fc.add_scalar_contraction(first, 1)
    mixed = grad_graph(contracted, [1], loss=index)
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(fc.compile(mixed).run([x, np.ones(3)])[-1], 2 * x)


def test_full_ones_contraction_gives_hessian_row_sums_not_the_hessian():
    # f(x) = (sum x)^2 couples all entries: H = 2 * ones; the full-ones contraction yields H @ 1 = 2n, not diag(H) = 2
    forward = fc.trace(lambda x: ops.square(ops.sum(x)), "f64[4]")
    d2 = fc.compile(second_order(forward, 0)).run([np.arange(4.0)])[-1]
    np.testing.assert_allclose(d2, np.full(4, 8.0))
    # a basis-vector contraction recovers one Hessian row
    row = fc.compile(second_order(forward, 0, weights=np.eye(4)[1])).run([np.arange(4.0)])[-1]
    np.testing.assert_allclose(row, np.full(4, 2.0))


def test_composed_chain_matmul_add_relu_mse_first_order_matches_central_differences():
    forward = fc.trace(lambda x, w, b, t: ops.mse_loss(ops.relu(x @ w + b), t),
                       "f64[6, 4]", "f64[4, 3]", "f64[3]", "f64[6, 3]")
    rng = np.random.default_rng(4)
    x, w, b, t = (rng.standard_normal(s.shape) for s in forward.input_types)
    training = fc.compile(grad_graph(forward, [1, 2]))
    _, gw, gb = training.run([x, w, b, t])

    def loss(ww, bb):
        return float(np.mean((np.maximum(x @ ww + bb, 0) - t) ** 2))
    assert np.min(np.abs(x @ w + b)) > 1e-3  # away from relu's kink, so differences are valid
    assert rel_error(gw, gradient(lambda ww: loss(ww, b), w)) < 1e-8
    assert rel_error(gb, gradient(lambda bb: loss(w, bb), b)) < 1e-8


@pytest.mark.parametrize("dtype, tolerance", [("f32", 1e-5), ("f16", 2e-2), ("bf16", 6e-2)])
def test_composed_chain_in_low_precision_matches_a_float32_reference(dtype, tolerance):
    def f(x, w, b, t):
        return ops.mse_loss(ops.relu(x @ w + b), t)
    shapes = ("[6, 4]", "[4, 3]", "[3]", "[6, 3]")
    reference = fc.compile(grad_graph(fc.trace(f, *(f"f32{s}" for s in shapes)), [1, 2]))
    low = fc.compile(grad_graph(fc.trace(f, *(f"{dtype}{s}" for s in shapes)), [1, 2]))
    rng = np.random.default_rng(5)
    arrays = [rng.uniform(-1, 1, fc.TensorType.parse(f"f32{s}").shape).astype(np.float32) for s in shapes]
    np_dtype = fc.TensorType.parse(f"{dtype}[1]").dtype.np
    low_arrays = [a.astype(np_dtype) for a in arrays]
    ref = reference.run([a.astype(np_dtype).astype(np.float32) for a in arrays])  # same rounded inputs
    got = low.run(low_arrays)
    for r, g in zip(ref[1:], got[1:]):
        assert g.dtype == np_dtype
        assert rel_error(g.astype(np.float32), r) < tolerance
