"""One-pass differential operators (``build_laplacian_graph``, ``build_taylor_graph``) against nested reverse mode,
the Hessian, repeated forward mode and central differences: no outside reference needed."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.errors import TangentError

from .test_pinn import TYPES, build_training_graph, initial_state, network

RNG = np.random.default_rng(11)


def _run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def mlp(x, *params):
    h = x
    for w, b in zip(params[:-1:2], params[1:-1:2]):
        h = ops.tanh(h @ w + b)
    return h @ params[-1]


def mlp_params(d, width, depth, rng):
    sizes = [d] + [width] * depth
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [rng.standard_normal((a, b)) / np.sqrt(a), 0.1 * rng.standard_normal(b)]
    return params + [rng.standard_normal((width, 1)) / np.sqrt(width)]


def _types(params):
    return [f"f64{list(p.shape)}" for p in params]


# -- the seed's PINN: u'' through the Taylor pass equals the reverse-mode graph ---------------------------
def test_pinn_second_derivative_and_training_gradient_through_the_taylor_pass_equal_reverse_mode():
    x, xb, f, params = initial_state()
    reverse, loss_index = build_training_graph()
    want = _run(reverse, x, xb, f, *params)

    forward = fc.trace(lambda x, xb, f, *p: [network(x, *p), network(xb, *p)], *TYPES)
    taylor = fc.build_taylor_graph(forward, 0, order=2, outputs=[0])
    assert taylor.output_names[-2:] == ["d1(output 0, input 0)", "d2(output 0, input 0)"]

    def physics_graph(*v):
        x_, f_, ub, d2u = v[0], v[2], v[len(TYPES) + 1], v[-1]
        residual = d2u + ops.sin(x_ * np.pi) * np.pi**2   # u'' + pi^2 sin(pi x)
        return [ops.mse_loss(d2u, f_) + ops.mean(ops.square(ub)) * 10.0, residual]
    with_loss, (k_loss, k_res) = fc.extend_graph(taylor, physics_graph)
    training = fc.build_backward_graph(with_loss, k_loss, list(range(3, 8)))
    got = _run(training, x, xb, f, *params)
    d2u_reverse = want[4]
    np.testing.assert_allclose(got[k_res], d2u_reverse + np.pi**2 * np.sin(np.pi * x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[k_loss], want[loss_index], rtol=1e-12)
    for a, b in zip(got[-5:], want[-5:]):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12 * np.max(np.abs(b)))


# -- Poisson in d dimensions: residual and parameter gradient equal nested reverse mode ------------------
def _nested_reverse_laplacian(d, n, types):
    forward = fc.trace(lambda x, *p: ops.sum(mlp(x, *p)), f"f64[{n}, {d}]", *types)
    graph = fc.build_backward_graph(forward, 0, [0])
    grad_index = len(graph.outputs) - 1
    columns = []
    for j in range(d):
        mask = np.zeros((n, d))
        mask[:, j] = 1.0
        contracted, k = fc.add_scalar_contraction(graph, grad_index, mask)
        graph = fc.build_backward_graph(contracted, k, [0])
        columns.append((len(graph.outputs) - 1, j))
    n_in = len(graph.inputs)

    def laplacian(*v):
        total = None
        for position, j in columns:
            term = v[n_in + position][:, j:j + 1]
            total = term if total is None else total + term
        return total
    return fc.extend_graph(graph, laplacian)


@pytest.mark.parametrize("d, n, width, depth", [(2, 12, 16, 3), (8, 12, 16, 3), (32, 4, 8, 2)])
def test_poisson_residual_and_its_parameter_gradient_equal_nested_reverse_mode(d, n, width, depth):
    # d = 32 (the largest case) with fewer points and a narrower net: the nested reference is 32 reverse
    # passes of a gradient, so its graph grows with d
    params = mlp_params(d, width, depth, RNG)
    types = _types(params)
    x = RNG.uniform(-1, 1, (n, d))
    f = np.sum(np.sin(np.pi * x), axis=1, keepdims=True)

    def loss_on(graph, lap_index):
        def fn(*v):
            residual = v[len(graph.inputs) + lap_index] - v[1]
            return [residual, ops.mean(ops.square(residual))]
        return fn

    # one pass
    forward = fc.trace(lambda x, f, *p: mlp(x, *p), f"f64[{n}, {d}]", f"f64[{n}, 1]", *types)
    one = fc.build_laplacian_graph(forward, 0, batch_dims=1)
    assert one.output_names[1:] == ["jac(output 0, input 0)", "laplacian(output 0, input 0)"]
    one, (r1, l1) = fc.extend_graph(one, loss_on(one, 2))
    one = fc.build_backward_graph(one, l1, list(range(2, 2 + len(params))))
    got = _run(one, x, f, *params)

    # nested reverse: d reverse passes of a gradient
    nested, lap_index = _nested_reverse_laplacian(d, n, types)
    reverse_graph, _ = fc.extend_graph(nested, lambda *v: [v[len(nested.inputs) + lap_index] - 0.0])
    lap_nested = _run(reverse_graph, x, *params)[-1]
    np.testing.assert_allclose(got[2], lap_nested, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[r1], lap_nested - f, rtol=1e-10, atol=1e-12)

    def nested_loss(*v):
        residual = v[len(nested.inputs) + lap_index] - ops.reshape(ops.sum(ops.sin(v[0] * np.pi), axes=[1]),
                                                                   shape=[n, 1])
        return ops.mean(ops.square(residual))
    with_loss, k = fc.extend_graph(nested, nested_loss)
    want = _run(fc.build_backward_graph(with_loss, k, list(range(1, 1 + len(params)))), x, *params)
    np.testing.assert_allclose(got[l1], want[k], rtol=1e-10)
    for a, b in zip(got[-len(params):], want[-len(params):]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10 * np.max(np.abs(b)))


# -- generic rules, operators and orders -------------------------------------------------------------------
def test_laplacian_through_ops_without_special_rules_equals_the_trace_of_the_hessian():
    def f(x):
        y = ops.reshape(ops.sin(x) * x, shape=[6]) / (1.5 + ops.cos(ops.sum(x)))
        return ops.sum(ops.softmax(y, axis=-1) * ops.exp(y * 0.2))
    g = fc.trace(f, "f64[2, 3]")
    x = RNG.standard_normal((2, 3))
    lap = _run(fc.build_laplacian_graph(g, "x"), x)[-1]
    hess = _run(fc.hessian(g, "x"), x)[-1].reshape(6, 6)
    np.testing.assert_allclose(lap, np.trace(hess), rtol=1e-12)


def test_a_weighted_operator_equals_the_contraction_with_the_hessian():
    g = fc.trace(lambda x: ops.sum(ops.tanh(x @ np.array([[0.3, -1.2], [0.8, 0.5], [1.1, 0.4]])) ** 3.0), "f64[3]")
    a = RNG.standard_normal((3, 3))
    a = a + a.T                     # indefinite: negative weights too
    x = RNG.standard_normal(3)
    got = _run(fc.build_laplacian_graph(g, 0, operator=a), x)
    hess = _run(fc.hessian(g, 0), x)[-1]
    np.testing.assert_allclose(got[-1], np.sum(a * hess), rtol=1e-12)
    assert fc.build_laplacian_graph(g, 0, operator=a).output_names[-1] == "op(output 0, x)"


def test_batched_points_give_the_pointwise_gradient_and_laplacian():
    params = mlp_params(3, 8, 2, RNG)
    g = fc.trace(lambda x, *p: mlp(x, *p), "f64[4, 3]", *_types(params))
    x = RNG.standard_normal((4, 3))
    _, jac, lap = _run(fc.build_laplacian_graph(g, 0, batch_dims=1), x, *params)
    single = fc.trace(lambda x, *p: ops.sum(mlp(x, *p)), "f64[1, 3]", *_types(params))
    for n in range(4):
        point = x[n:n + 1]
        hess = _run(fc.hessian(single, 0), point, *params)[-1].reshape(3, 3)
        grad = _run(fc.build_backward_graph(single, 0, [0]), point, *params)[-1]
        np.testing.assert_allclose(lap[n, 0], np.trace(hess), rtol=1e-12)
        np.testing.assert_allclose(jac[:, n, 0], grad[0], rtol=1e-12)


def test_taylor_orders_up_to_four_equal_repeated_forward_mode():
    params = mlp_params(1, 6, 2, RNG)
    g = fc.trace(lambda x, *p: mlp(x, *p), "f64[5, 1]", *_types(params))
    x = RNG.standard_normal((5, 1))
    got = _run(fc.build_taylor_graph(g, 0, order=4), x, *params)[1:]
    # u^(k) by k applications of build_jvp_graph with the tangent of x set to ones each time
    graph, ones = g, np.ones((5, 1))
    derivatives = []
    for k in range(4):
        graph = fc.build_jvp_graph(graph, [0])
        count = len(graph.inputs) - len(g.inputs)
        derivatives.append(_run(graph, x, *params, *([ones] * count))[-1])
    for a, b in zip(got, derivatives):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
    # order 2 by the one-pass rules agrees with the generic order-4 series
    two = _run(fc.build_taylor_graph(g, 0, order=2), x, *params)[1:]
    np.testing.assert_allclose(two[1], got[1], rtol=1e-12)


# -- bad input ---------------------------------------------------------------------------------------------
def test_a_laplacian_with_respect_to_a_non_float_or_non_input_value_is_a_tangent_error():
    g = fc.trace(lambda x, k: [ops.sin(x) * ops.cast(k, to="f64"), ops.argmax(x, axis=0)], "f64[3]", "i64[3]")
    with pytest.raises(TangentError, match="floating inputs only"):
        fc.build_laplacian_graph(g, "k")
    with pytest.raises(TangentError, match="names no input"):
        fc.build_laplacian_graph(g, "y")
    with pytest.raises(TangentError, match="graph input"):
        fc.build_laplacian_graph(g, g.outputs[0])
    with pytest.raises(TangentError, match="only floating outputs"):
        fc.build_laplacian_graph(g, "x", outputs=[1])
    with pytest.raises(TangentError, match=r"\[3, 3\] matrix"):
        fc.build_laplacian_graph(g, "x", operator=np.eye(2))
    with pytest.raises(TangentError, match="batch_dims"):
        fc.build_laplacian_graph(g, "x", batch_dims=1)
    with pytest.raises(TangentError, match="order"):
        fc.build_taylor_graph(g, "x", order=0)


def test_an_op_without_a_forward_rule_on_the_chain_is_named(registry_with_nograd):
    from frame_core.errors import MissingGradientError

    with fc.use_registry(registry_with_nograd):
        g = fc.trace(lambda x: ops.sum(ops.nograd(x) * x), "f64[3]")
        with pytest.raises(MissingGradientError, match=r"node \d+ \(nograd\)"):
            fc.build_laplacian_graph(g, "x")


# -- Taylor recurrences above order 2 ------------------------------------------------------------------
SERIES_CASES = {
    "tanh_mlp": lambda x: ops.tanh(ops.tanh(x * 2.0 + 0.3) * 1.5 - 0.2) * 0.7,
    "exp_sin_div_sqrt_cos_log": lambda x: (ops.exp(ops.sin(x) * 0.5) / (1.0 + ops.square(x))
                                           + ops.sqrt(ops.cos(x) + 2.0) - ops.log(x * x + 1.0)),
    "sigmoid_expm1_log1p": lambda x: ops.sigmoid(x * 3.0) * ops.expm1(x) + ops.log1p(ops.square(x)),
    "shapes_and_a_generic_op": lambda x: ops.sum(ops.reshape(ops.concat(ops.softplus(x), x * x, axis=0),
                                                             shape=(2, 7)), axes=[0]) - ops.neg(x) / 3.0,
}


@pytest.mark.parametrize("name", sorted(SERIES_CASES))
@pytest.mark.parametrize("order", [3, 6])
def test_taylor_recurrences_equal_the_generic_rule(name, order, monkeypatch):
    from frame_core.autodiff import laplacian

    g = fc.trace(SERIES_CASES[name], "f64[7]")
    x = np.linspace(-0.9, 0.9, 7)
    fast = fc.compile(fc.build_taylor_graph(g, 0, order=order)).run([x])
    monkeypatch.setattr(laplacian, "_taylor_generic", lambda graph, chain, v, k, reg:
                        laplacian._Series(graph, reg, k, recurrences=False).run(chain, v))
    generic = fc.compile(fc.build_taylor_graph(g, 0, order=order)).run([x])
    for a, b in zip(fast, generic):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.max(np.abs(b)))


def test_taylor_order_twelve_of_a_matmul_mlp_matches_jax_jet_and_grows_quadratically():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(3)
    w1, b1, w2 = rng.standard_normal((1, 16)) * 0.7, rng.standard_normal(16) * 0.2, rng.standard_normal((16, 1))

    def u(x):
        return ops.sigmoid(ops.tanh(x @ w1 + b1) @ w2)
    g = fc.trace(u, "f64[9, 1]")
    x = np.linspace(-0.8, 0.8, 9).reshape(9, 1)
    got = fc.compile(fc.build_taylor_graph(g, 0, order=12)).run([x])[1:]

    from jax.experimental import jet

    def network(v):  # [9] -> [9]: each point on its own, as frame's graph
        return jax.nn.sigmoid(jax.numpy.tanh(v[:, None] * w1[0] + b1) @ w2[:, 0])
    _, series = jet.jet(network, (x[:, 0],), ((np.ones(9), *(np.zeros(9) for _ in range(11))),))
    for k, want in enumerate(series, start=1):  # jet's terms are the derivatives themselves
        np.testing.assert_allclose(got[k - 1][:, 0], want, rtol=1e-9, atol=1e-10 * float(np.max(np.abs(want))))
    sizes = [len(fc.build_taylor_graph(g, 0, order=k).nodes) for k in (4, 8, 16)]
    assert sizes[2] < 4.5 * sizes[1] < 4.5 ** 2 * sizes[0]  # K^2: 4x per doubling, not 2.8x per order
