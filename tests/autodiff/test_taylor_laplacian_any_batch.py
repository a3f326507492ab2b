"""Taylor and Laplacian graphs traced at N points run at any number of points (design note, section 2).

``build_taylor_graph`` seeds ``x`` with a row of ones broadcast like ``x``, and its zeros and broadcasts read the
shape of a value (``zeros_like_internal``, ``broadcast_like_internal``): compiled with ``dynamic_shapes=True``, the
graph traced at N runs at 1, N + 3 and 2N, bit for bit the graph built at that size, for the one-pass rules
(orders 1, 2), the recurrences (orders 3, 5) and the generic rule. A graph whose op rule holds the traced size is
still refused by name. ``build_laplacian_graph`` with ``batch_dims >= 1`` (directions on one point's coordinates)
runs at any number of points the same way; with ``batch_dims=0`` its directions span all of x and it is refused
(tests/autodiff/test_zero_cotangents_any_batch.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.ir.graph import traced_sizes

RNG = np.random.default_rng(5)
W1, B1, W2, W3 = RNG.standard_normal((2, 6)), RNG.standard_normal(6), RNG.standard_normal((6, 6)), \
    RNG.standard_normal((6, 1))
N = 4


def _mlp(x):
    h = ops.tanh(x @ W1 + B1)
    h = ops.sin(h @ W2) * ops.exp(h * 0.5) / (ops.square(h) + 2.0)
    return [ops.tanh(h) @ W3, ops.sum(ops.sqrt(ops.square(h) + 1.0), axes=[1]), ops.concat(h, x, axis=1)]


def _generic(x):  # atan and erf take the elementwise rule at order 2, the generic rule above it
    return ops.erf(ops.atan(x @ W1) * 0.5) @ W3


def _bitwise(got, want, label):
    assert len(got) == len(want), label
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes(), label


@pytest.mark.parametrize("fn", [_mlp, _generic], ids=["recurrences", "generic rule"])
@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_a_taylor_graph_traced_at_n_points_runs_at_any_number_bit_for_bit(fn, order):
    graph = fc.build_taylor_graph(fc.trace(fn, f"f64[{N}, 2]"), 0, order)
    assert traced_sizes(graph) is None
    exe = fc.compile(graph, dynamic_shapes=True)
    for n in (1, N + 3, 2 * N):
        x = RNG.standard_normal((n, 2))
        fresh = fc.compile(fc.build_taylor_graph(fc.trace(fn, f"f64[{n}, 2]"), 0, order))
        _bitwise(exe.run([x]), fresh.run([x]), f"order {order} at {n} points")


def test_the_derivatives_at_another_batch_match_finite_differences():
    # along the all-ones direction: u'(x) = d/dt u(x + t), per point
    graph = fc.build_taylor_graph(fc.trace(lambda x: ops.tanh(x @ W1[:1]) @ W3, f"f64[{N}, 1]"), 0, 2)
    exe = fc.compile(graph, dynamic_shapes=True)
    x = RNG.standard_normal((9, 1))
    forward = fc.compile(fc.trace(lambda x: ops.tanh(x @ W1[:1]) @ W3, "f64[9, 1]"))
    u, d1, d2 = exe.run([x])
    h = 1e-4
    up, um = forward.run([x + h])[0], forward.run([x - h])[0]
    np.testing.assert_allclose(d1, (up - um) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(d2, (up - 2 * u + um) / h ** 2, rtol=1e-4, atol=1e-5)


def test_a_pinn_trains_on_another_number_of_collocation_points():
    # the PINN loss of the Taylor graph, differentiated for the weights: one trace, two sizes
    def loss_graph(n):
        forward = fc.trace(lambda x, w: ops.tanh(x @ w) @ W3, f"f64[{n}, 1]", "f64[1, 6]")
        taylor = fc.build_taylor_graph(forward, 0, order=2)
        with_loss, k = fc.extend_graph(taylor, lambda x, w, u, d1, d2: ops.mean(ops.square(d2 + u)))
        return fc.build_backward_graph(with_loss, k, [1])
    exe = fc.compile(loss_graph(N), dynamic_shapes=True)
    w = RNG.standard_normal((1, 6))
    for n in (1, 2 * N + 1):
        x = RNG.standard_normal((n, 1))
        _bitwise(exe.run([x, w]), fc.compile(loss_graph(n)).run([x, w]), f"{n} points")


def test_a_rule_that_holds_the_traced_size_still_refuses_another_batch_by_name():
    # adaptive_avg_pool2d declares no any_shape_gradient (its rows: the six hidden units as a 2 x 3 image)
    def fn(x):
        h = ops.reshape(ops.tanh(x @ W1), shape=[-1, 1, 2, 3])
        return ops.reshape(ops.adaptive_avg_pool2d(h, output_size=[1, 3]), shape=[-1, 3]) @ W3[:3]
    graph = fc.build_taylor_graph(fc.trace(fn, f"f64[{N}, 2]"), 0, 3)
    reason = traced_sizes(graph)
    assert reason is not None and "adaptive_avg_pool2d" in reason
    exe = fc.compile(graph, dynamic_shapes=True)
    exe.run([RNG.standard_normal((N, 2))])
    with pytest.raises(fc.ShapeError, match="adaptive_avg_pool2d"):
        exe.run([RNG.standard_normal((N + 3, 2))])


def _points(x, c):
    h = ops.tanh(x @ W1[:, :3]) * ops.atan(x @ W1[:, 3:])
    return [ops.sin(h) @ W3[:3], ops.exp(c), ops.sum(ops.sin(x), axes=[1]), ops.concat(h, x, axis=1),
            x[:, :1] * 2.0]


@pytest.mark.parametrize("operator", [None, np.diag([1.0, -2.0]), np.ones((2, 2))],
                         ids=["laplacian", "indefinite", "rank one"])
def test_a_laplacian_of_points_traced_at_n_runs_at_any_number_bit_for_bit(operator):
    # batch_dims=1: the directions act on one point's coordinates; an output x does not reach (exp(c)), a row
    # (x[:, :1] * 2), a concat through the generic rule
    def build(n):
        return fc.build_laplacian_graph(fc.trace(_points, f"f64[{n}, 2]", f"f64[{n}, 3]"), 0, batch_dims=1,
                                        operator=operator)
    graph = build(N)
    assert traced_sizes(graph) is None
    exe = fc.compile(graph, dynamic_shapes=True)
    for n in (1, N + 3, 2 * N):
        args = [RNG.standard_normal((n, 2)), RNG.standard_normal((n, 3))]
        _bitwise(exe.run(args), fc.compile(build(n)).run(args), f"{n} points")
