"""Edge cases of forward mode and the one-pass operators found by hostile QA (issue 20): empty inputs and
outputs, operators with no direction left, small operators, and bad arguments. References are closed forms."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.errors import TangentError

RNG = np.random.default_rng(23)


def _run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


@pytest.mark.parametrize("helper", [fc.jacfwd, fc.jacrev])
def test_a_jacobian_with_an_empty_input_or_output_is_an_empty_array(helper):
    """No element of x (jacfwd) or of y (jacrev) left no sweep to stack: ``stack`` of nothing was a ShapeError."""
    g = fc.trace(lambda x, w: ops.sin(x) @ w, "f64[0, 3]", "f64[3, 2]")
    x, w = np.zeros((0, 3)), RNG.standard_normal((3, 2))
    for i, shape in ((0, (0, 2, 0, 3)), (1, (0, 2, 3, 2))):
        jac = _run(helper(g, i), x, w)[-1]
        assert jac.shape == shape and jac.dtype == np.float64
    # an empty input that the output does not need: a non-empty Jacobian of zeros
    g = fc.trace(lambda x, e: ops.sin(x) + ops.sum(e), "f64[2]", "f64[0]")
    x = RNG.standard_normal(2)
    np.testing.assert_array_equal(_run(helper(g, 1), x, np.zeros(0))[-1], np.zeros((2, 0)))
    np.testing.assert_allclose(_run(helper(g, 0), x, np.zeros(0))[-1], np.diag(np.cos(x)), rtol=1e-15)


def test_hessian_and_hvp_of_an_empty_input():
    g = fc.trace(lambda x: ops.sum(ops.sin(x)), "f64[0]")
    value, grad, hess = _run(fc.hessian(g, 0), np.zeros(0))
    assert value == 0.0 and grad.shape == (0,) and hess.shape == (0, 0)
    assert _run(fc.hvp(g, 0), np.zeros(0), np.zeros(0))[-1].shape == (0,)


def _points():
    g = fc.trace(lambda x, w: ops.sum(ops.sin(x * w) * x, axes=[-1]), "f64[4, 3]", "f64[3]")
    x, w = RNG.uniform(-1, 1, (4, 3)), RNG.uniform(-1, 1, 3)
    exact = np.sum(2 * w * np.cos(w * x) - w * w * x * np.sin(w * x), axis=-1)  # d2/dx2 of x sin(w x), per point
    return g, x, w, exact


def test_a_zero_operator_gives_zero_and_a_tiny_one_keeps_its_scale():
    """A = 0 left no eigen-direction (an IndexError); A = 1e-14 I lost every direction to an absolute cut-off and
    gave 0 instead of 1e-14 times the Laplacian."""
    g, x, w, exact = _points()
    u, jac, zero = _run(fc.build_laplacian_graph(g, 0, operator=np.zeros((3, 3)), batch_dims=1), x, w)
    np.testing.assert_array_equal(zero, np.zeros(4))
    assert jac.shape == (1, 4) and not np.any(jac)
    tiny = _run(fc.build_laplacian_graph(g, 0, operator=1e-14 * np.eye(3), batch_dims=1), x, w)[-1]
    np.testing.assert_allclose(tiny, 1e-14 * exact, rtol=1e-12)
    # a rank-one operator with one tiny and one large eigenvalue keeps both
    a = np.diag([1e-13, 0.0, 2.0])
    got = _run(fc.build_laplacian_graph(g, 0, operator=a, batch_dims=1), x, w)[-1]
    per_coordinate = 2 * w * np.cos(w * x) - w * w * x * np.sin(w * x)
    np.testing.assert_allclose(got, per_coordinate @ np.diag(a), rtol=1e-12)


def test_points_without_coordinates_have_a_zero_laplacian():
    g = fc.trace(lambda x, w: ops.sum(x * w, axes=[-1]) + 1.0, "f64[4, 0]", "f64[0]")
    u, jac, lap = _run(fc.build_laplacian_graph(g, 0, batch_dims=1), np.zeros((4, 0)), np.zeros(0))
    np.testing.assert_array_equal(lap, np.zeros(4))
    assert jac.shape == (1, 4)


def test_a_complex_operator_is_a_tangent_error_not_a_silently_dropped_imaginary_part():
    g, *_ = _points()
    with pytest.raises(TangentError, match="complex"):
        fc.build_laplacian_graph(g, 0, operator=np.eye(3) * 1j, batch_dims=1)


def test_jvp_inputs_checks_the_number_of_primals():
    g = fc.trace(lambda x, w: ops.sin(x) * w, "f64[3]", "f64[3]")
    with pytest.raises(TangentError, match="1 primals were given for the 2 inputs"):
        fc.jvp_inputs(g, [np.zeros(3)], [np.ones(3), np.ones(3)])


def test_a_second_derivative_that_is_the_same_for_every_point_feeds_ops_without_special_rules():
    """x * x of the Taylor seed (one row of ones) has u'' = 2 as a row; ``sum`` (the generic rule) and the right
    operand of a matmul needed it in full (an IRError and a ShapeError)."""
    x, m = RNG.uniform(-1, 1, (4, 3)), RNG.uniform(-1, 1, (4, 4))
    g = fc.trace(lambda x, m: ops.sum(x * x, axes=[-1]) + ops.sum(m @ (x * x), axes=[-1]), "f64[4, 3]", "f64[4, 4]")
    ones = np.ones((4, 3))
    u, d1, d2 = _run(fc.build_taylor_graph(g, 0, 2), x, m)   # along the all-ones direction of x
    np.testing.assert_allclose(d1, np.sum(2 * x + 2 * m @ x, axis=-1), rtol=1e-13)
    np.testing.assert_allclose(d2, np.sum(2 * ones + 2 * m @ ones, axis=-1), rtol=1e-13)
    for batch_dims in (0, 1):  # with batch_dims=1, m mixes points: the operator sums over every point's coordinates
        lap = _run(fc.build_laplacian_graph(g, 0, batch_dims=batch_dims), x, m)[-1]
        np.testing.assert_allclose(lap, np.sum(2 * ones + 2 * m @ ones, axis=-1), rtol=1e-13)


@pytest.mark.parametrize("build", [lambda g: fc.build_laplacian_graph(g, 0), lambda g: fc.build_taylor_graph(g, 0, 3)],
                         ids=["laplacian", "taylor3"])
def test_an_op_without_a_forward_rule_inside_a_loop_is_named_at_the_users_node(registry_with_nograd, build):
    """The one-pass operators build each node's rule on a one-node graph; the error named that graph's node 0."""
    from frame_core.errors import MissingGradientError

    with fc.use_registry(registry_with_nograd):
        g = fc.trace(lambda x: ops.sum(ops.loop(lambda i, s: (True, ops.nograd(s) * ops.sin(s)), 2, True, x * 2.0)),
                     "f64[3]")
        loop = next(i for i, n in enumerate(g.nodes) if n.op == "loop")
        with pytest.raises(MissingGradientError) as info:
            build(g)
    assert loop != 0 and info.value.paths[0].startswith(f"node {loop} (loop) > node 0 (nograd)")


@pytest.mark.parametrize("helper", ["jacfwd", "jacrev"])
def test_jacobian_helpers_say_what_they_were_building(registry_with_nograd, helper):
    from frame_core.errors import MissingGradientError

    with fc.use_registry(registry_with_nograd):
        g = fc.trace(lambda x: ops.nograd(x) * ops.sin(x), "f64[3]")
        with pytest.raises(MissingGradientError, match=rf"cannot build {helper}\(output 0, x\): 1 op\(s\)") as info:
            getattr(fc, helper)(g, 0)
    assert info.value.paths[0].startswith("node 0 (nograd)")


def test_a_taylor_order_above_the_cap_is_refused_at_once_not_built_for_ever():
    import time

    from frame_core.autodiff.laplacian import MAX_SERIES_ORDER, MAX_TAYLOR_ORDER

    graph = fc.trace(lambda x: ops.tanh(ops.tanh(x * 2.0) * 3.0), "f64[5]")
    generic = fc.trace(lambda x: ops.softplus(ops.tanh(x * 2.0)), "f64[5]")  # softplus has no recurrence
    start = time.process_time()
    for order in (MAX_SERIES_ORDER + 1, 10**9):
        with pytest.raises(fc.TangentError, match=f"order {order} is above {MAX_SERIES_ORDER}"):
            fc.build_taylor_graph(graph, 0, order=order)
    with pytest.raises(fc.TangentError, match=rf"order 9 is above {MAX_TAYLOR_ORDER} and node \d+ \(softplus\)"):
        fc.build_taylor_graph(generic, 0, order=MAX_TAYLOR_ORDER + 1)
    assert time.process_time() - start < 1.0  # refused before anything is built
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    x = np.linspace(-1, 1, 5)
    taylor = fc.compile(fc.build_taylor_graph(graph, 0, order=5)).run([x])

    def u(v):
        return jax.numpy.tanh(jax.numpy.tanh(v * 2.0) * 3.0)
    derivative = u
    for _ in range(5):
        derivative = jax.grad(derivative)
    np.testing.assert_allclose(taylor[-1], jax.vmap(derivative)(x), rtol=1e-9, atol=1e-6)
