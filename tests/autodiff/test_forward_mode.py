"""Forward mode as a graph transform (``build_jvp_graph``) and the helpers built on it, checked against central
differences and against reverse mode (the dot-product test), without any outside reference."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.autodiff.jvp import derived_jvp_graph, direct_jvp_graph
from frame_core.errors import GradientError, MissingGradientError, TangentError

RNG = np.random.default_rng(7)


def _run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def _model(x, w):
    h = ops.tanh(x @ w)
    return ops.sum(h * ops.sin(x @ w)), ops.exp(x) / (1.0 + ops.square(x))


def _central(graph, inputs, tangents, wrt, eps=1e-6):
    plus = [a + eps * tangents[wrt.index(k)] if k in wrt else a for k, a in enumerate(inputs)]
    minus = [a - eps * tangents[wrt.index(k)] if k in wrt else a for k, a in enumerate(inputs)]
    return [(p - m) / (2 * eps) for p, m in zip(_run(graph, *plus), _run(graph, *minus))]


def test_jvp_graph_layout_names_and_values_match_central_differences():
    g = fc.trace(_model, "f64[3, 4]", "f64[4, 2]")
    j = fc.build_jvp_graph(g)
    assert [v.name for v in j.inputs] == ["x", "w", "tangent:x", "tangent:w"]
    assert j.output_names[2:] == ["tangent:output 0", "tangent:output 1"]
    x, w = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    dx, dw = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    outs = _run(j, x, w, dx, dw)
    for got, want in zip(outs[2:], _central(g, [x, w], [dx, dw], [0, 1])):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)
    for got, want in zip(outs[:2], _run(g, x, w)):  # the primal outputs are the graph's
        np.testing.assert_array_equal(got, want)


def test_jvp_with_respect_to_some_inputs_and_by_name():
    g = fc.trace(_model, "f64[3, 4]", "f64[4, 2]")
    j = fc.build_jvp_graph(g, ["w"])
    assert [v.name for v in j.inputs] == ["x", "w", "tangent:w"]
    x, w, dw = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal((4, 2))
    outs = _run(j, x, w, dw)
    for got, want in zip(outs[2:], _central(g, [x, w], [dw], [1])):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


def test_jvp_and_vjp_are_transposes_on_a_composition():
    g = fc.trace(lambda x, w: ops.softmax(ops.tanh(x @ w) * x[:, :2], axis=-1), "f64[3, 4]", "f64[4, 2]")
    j, v = fc.build_jvp_graph(g), fc.build_vjp_graph(g)
    x, w = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    dx, dw, u = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal((3, 2))
    jv = _run(j, x, w, dx, dw)[1]
    gx, gw = _run(v, x, w, u)
    assert abs(np.sum(jv * u) - (np.sum(dx * gx) + np.sum(dw * gw))) < 1e-12 * (1 + abs(np.sum(jv * u)))


def test_the_derived_jvp_equals_the_direct_jvp_for_every_op_with_a_jvpfn():
    reg = fc.registry()
    checked = 0
    for key, schema in reg.schemas.items():
        if schema.jvp is None or schema.gradient is None:
            continue
        for example in schema.examples[:1]:
            ctx = schema.context(example.inputs, example.attrs)
            direct = direct_jvp_graph(schema, ctx)
            derived = derived_jvp_graph(schema.gradient(ctx), ctx, reg)
            assert [v.type for v in direct.outputs] == [v.type for v in derived.outputs]
            checked += 1
    assert checked >= 15  # the elementwise ops, matmul, the FFTs, the control flow ops


def test_a_derived_jvp_alone_matches_the_direct_one_on_a_network():
    g = fc.trace(_model, "f64[3, 4]", "f64[4, 2]")
    reg = fc.registry()
    saved = {k: s.jvp for k, s in reg.schemas.items() if s.jvp is not None}
    x, w, dx, dw = (RNG.standard_normal(s) for s in [(3, 4), (4, 2), (3, 4), (4, 2)])
    direct = _run(fc.build_jvp_graph(g), x, w, dx, dw)
    try:
        for k in saved:
            reg.schemas[k].jvp = None
        derived = _run(fc.build_jvp_graph(g), x, w, dx, dw)
    finally:
        for k, fn in saved.items():
            reg.schemas[k].jvp = fn
    for a, b in zip(direct, derived):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


def test_second_order_by_reapplication_matches_central_differences_of_the_first():
    g = fc.trace(lambda x: ops.sum(ops.sin(x) * ops.exp(x * 0.3)), "f64[5]")
    j1 = fc.build_jvp_graph(g, ["x"])                    # (x, v) -> (f, f'v)
    j2 = fc.build_jvp_graph(j1, ["x"])                   # (x, v, t) -> (f, f'v, f't, v^T H t)
    assert [v.name for v in j2.inputs] == ["x", "tangent:x", "tangent2:x"]
    x, v, t = RNG.standard_normal(5), RNG.standard_normal(5), RNG.standard_normal(5)
    out = _run(j2, x, v, t)
    exact = np.sum(v * t * (np.exp(0.3 * x) * (-np.sin(x) + 0.6 * np.cos(x) + 0.09 * np.sin(x))))
    np.testing.assert_allclose(out[3], exact, rtol=1e-12)


def test_forward_over_reverse_hvp_equals_reverse_over_reverse():
    g = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w) ** 2.0), "f64[3, 4]", "f64[4, 2]")
    h = fc.hvp(g, "w")
    assert h.output_names[-2:] == ["grad(output 0, w)", "hvp(output 0, w)"]
    x, w, v = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal((4, 2))
    fwd = _run(h, x, w, v)[-1]
    grad = fc.build_backward_graph(g, 0, ["w"])
    contracted, k = fc.add_scalar_contraction(grad, 1, v)          # <grad, v>
    rev = _run(fc.build_backward_graph(contracted, k, ["w"]), x, w)[-1]
    np.testing.assert_allclose(fwd, rev, rtol=1e-12, atol=1e-14)


def test_reverse_over_forward_differentiates_a_jvp_graph():
    g = fc.trace(lambda x: ops.sum(ops.sin(x) * x), "f64[4]")
    j = fc.build_jvp_graph(g)                       # (x, v) -> (f, f'(x) v)
    r = fc.build_backward_graph(j, 1, ["x"])        # d(f'(x) v)/dx = H v
    x, v = RNG.standard_normal(4), RNG.standard_normal(4)
    hv = _run(r, x, v)[-1]
    np.testing.assert_allclose(hv, v * (2 * np.cos(x) - x * np.sin(x)), rtol=1e-12)


def test_jacfwd_jacrev_and_hessian_agree_with_each_other_and_the_closed_form():
    g = fc.trace(lambda x: [ops.sin(x) * ops.sum(x), ops.sum(ops.exp(x) * x)], "f64[3]")
    x = RNG.standard_normal(3)
    jf = _run(fc.jacfwd(g, "x", 0), x)[-1]
    jr = _run(fc.jacrev(g, "x", 0), x)[-1]
    want = np.diag(np.cos(x) * np.sum(x)) + np.sin(x)[:, None]
    np.testing.assert_allclose(jf, want, rtol=1e-13)
    np.testing.assert_allclose(jr, want, rtol=1e-13)
    hess = fc.hessian(g, "x", 1)
    assert hess.output_names[-1] == "hessian(output 1, x)"
    np.testing.assert_allclose(_run(hess, x)[-1], np.diag(np.exp(x) * (x + 2)), rtol=1e-13, atol=1e-15)


def test_jacobian_layout_is_output_shape_then_input_shape():
    g = fc.trace(lambda x: ops.reshape(x, shape=[3, 2]) * 2.0, "f64[2, 3]")
    jf, jr = fc.jacfwd(g, 0), fc.jacrev(g, 0)
    assert jf.outputs[-1].type.shape == (3, 2, 2, 3) == jr.outputs[-1].type.shape
    x = RNG.standard_normal((2, 3))
    np.testing.assert_array_equal(_run(jf, x)[-1], _run(jr, x)[-1])


def test_control_flow_forward_mode_matches_central_differences():
    def f(s, xs, w):
        carry, ys = ops.scan(lambda c, x: (ops.tanh(c * w + x), c * x), s, xs)

        def then(c):
            return ops.sin(c) * w
        out = ops.if_else(ops.greater(ops.sum(carry), 0.0), then, lambda c: c * c, carry)
        return [out, ys]
    g = fc.trace(f, "f64[2]", "f64[4, 2]", "f64[2]")
    j = fc.build_jvp_graph(g)
    assert "scan" in {n.op for n in j.nodes} and "if_else" in {n.op for n in j.nodes}
    xs = [RNG.standard_normal(2), RNG.standard_normal((4, 2)), RNG.standard_normal(2)]
    ts = [RNG.standard_normal(a.shape) for a in xs]
    outs = _run(j, *xs, *ts)
    for got, want in zip(outs[2:], _central(g, xs, ts, [0, 1, 2])):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


def test_loop_forward_mode_with_a_data_dependent_exit():
    def f(s, w):
        out = ops.loop(lambda i, c: (ops.less(ops.sum(c), 3.0), c * w + 0.5), 6, True, s)
        return out
    g = fc.trace(f, "f64[2]", "f64[2]")
    j = fc.build_jvp_graph(g)
    xs = [np.array([0.3, 0.2]), np.array([1.1, 0.9])]
    ts = [RNG.standard_normal(2), RNG.standard_normal(2)]
    outs = _run(j, *xs, *ts)
    want = _central(g, xs, ts, [0, 1], eps=1e-7)
    np.testing.assert_allclose(outs[len(g.outputs):][0], want[0], rtol=1e-6, atol=1e-8)


# -- bad input ---------------------------------------------------------------------------------------
def test_an_integer_input_in_wrt_is_a_tangent_error():
    g = fc.trace(lambda x, k: x * ops.cast(k, to="f64"), "f64[3]", "i64[3]")
    with pytest.raises(TangentError, match="integer and boolean inputs carry no tangent"):
        fc.build_jvp_graph(g, ["k"])
    assert [v.name for v in fc.build_jvp_graph(g).inputs] == ["x", "k", "tangent:x"]  # default: floating inputs


def test_tangents_that_do_not_match_their_primal_are_tangent_errors():
    g = fc.trace(lambda x: ops.sin(x), "f64[3]")
    with pytest.raises(TangentError, match="shape"):
        fc.jvp_inputs(g, [np.zeros(3)], [np.zeros(4)])
    with pytest.raises(TangentError, match="cast it"):
        fc.jvp_inputs(g, [np.zeros(3)], [np.zeros(3, np.float32)])
    with pytest.raises(TangentError, match="integer"):
        fc.jvp_inputs(g, [np.zeros(3)], [np.zeros(3, np.int64)])
    with pytest.raises(TangentError, match="one per wrt input"):
        fc.jvp_inputs(g, [np.zeros(3)], [])
    args = fc.jvp_inputs(g, [np.zeros(3)], [np.ones(3)])
    np.testing.assert_array_equal(_run(fc.build_jvp_graph(g), *args)[1], np.ones(3))


def test_an_op_without_any_forward_rule_is_named_with_every_other_on_the_chain(registry_with_nograd):
    with fc.use_registry(registry_with_nograd):
        g = fc.trace(lambda x: ops.nograd(ops.nograd(x) * 2.0) + ops.sin(x), "f64[3]")
        with pytest.raises(MissingGradientError) as info:
            fc.build_jvp_graph(g)
    assert len(info.value.paths) == 2
    assert all("(nograd)" in p and "declared not differentiable" in p for p in info.value.paths)


def test_bad_arguments_are_gradient_errors():
    g = fc.trace(lambda x: ops.sin(x), "f64[3]")
    with pytest.raises(GradientError, match="for one input write"):
        fc.build_jvp_graph(g, "x")
    with pytest.raises(GradientError, match="twice"):
        fc.build_jvp_graph(g, [0, "x"])
    with pytest.raises(GradientError, match="no input of that name"):
        fc.build_jvp_graph(g, ["y"])
    with pytest.raises(GradientError, match="needs a Graph"):
        fc.build_jvp_graph("g")
    with pytest.raises(TangentError, match="only floating inputs"):
        fc.hvp(fc.trace(lambda k: ops.cast(k, to="f64"), "i64[2]"), 0)


@pytest.mark.parametrize("jac", [fc.jacfwd, fc.jacrev])
@pytest.mark.parametrize("fn, sig, shape", [(ops.sin, "f64[0]", (0, 0)),
                                            (lambda v: ops.sum(ops.sin(v)), "f64[0, 2]", (0, 2)),
                                            (lambda v: ops.reshape(v, shape=[0]), "f64[2, 0]", (0, 2, 0))])
def test_the_jacobian_of_an_empty_input_or_output_is_empty(jac, fn, sig, shape):
    """A size-0 seed has no sweep to stack: the Jacobian is an empty constant of y.shape + x.shape."""
    x = np.zeros(fc.as_type(sig).shape)
    assert fc.compile(jac(fc.trace(fn, sig), 0)).run([x])[-1].shape == shape
