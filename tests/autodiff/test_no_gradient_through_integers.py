"""Integer and boolean values carry no gradient: a node whose outputs are all integer or boolean is never on
the gradient chain (SPEC §5, TEAM decision with the basic-ops work), to any order (ARCH-067).

Before this rule ``where(greater(a, b), a, b)`` raised MissingGradientError (the comparison has no GradientFn)
and the closure audit counted comparisons inside a GradientFn as uses of an order-0 op.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema, ops
from frame_core.ops_registry.closure import CLOSED, run_closure_audit
from frame_core.testing import check_gradients

from ._fd import gradient, rel_error

RNG = np.random.default_rng(11)
A, B = RNG.uniform(-1.0, 1.0, 6), RNG.uniform(-1.0, 1.0, 6)


def test_where_of_a_comparison_differentiates_to_third_order():
    # a smooth function on each side of the switch, so every order has a non-zero derivative
    graph = fc.trace(lambda a, b: ops.sum(ops.where(ops.greater(a, b), a * a * a, ops.sin(a) * b)), "f64[6]", "f64[6]")
    report = check_gradients(graph, [A, B], order=3)
    report.assert_ok()
    assert [r.check for r in report.results] == ["gradient_order1", "gradient_order2", "gradient_order3"]


def test_the_max_written_as_where_has_the_expected_gradient_and_no_comparison_on_the_chain():
    graph = fc.trace(lambda a, b: ops.sum(ops.where(ops.greater(a, b), a, b) * 3.0), "f64[6]", "f64[6]")
    training = fc.build_backward_graph(graph, 0, [0, 1])
    _, ga, gb = fc.compile(training).run([A, B])
    np.testing.assert_array_equal(ga, np.where(A > B, 3.0, 0.0))
    np.testing.assert_array_equal(gb, np.where(A > B, 0.0, 3.0))
    # the inlined micro-graphs read the forward comparison; no comparison GradientFn was asked for
    assert sum(n.op == "greater" for n in training.nodes) == 1


def test_a_cast_of_a_comparison_used_as_a_mask_is_a_constant_for_the_gradient():
    # f(x) = sum(x^2 * [x > 0]); f' = 2x [x > 0], f'' = 2 [x > 0], f''' = 0 (away from 0)
    graph = fc.trace(lambda x: ops.sum(ops.square(x) * ops.cast(x > 0.0, to="f64")), "f64[6]")
    check_gradients(graph, [A], order=3).assert_ok()
    _, gx = fc.compile(fc.build_backward_graph(graph, 0, [0])).run([A])
    np.testing.assert_allclose(gx, np.where(A > 0, 2 * A, 0.0), rtol=1e-15)


def test_an_integer_output_in_the_middle_of_a_graph_cuts_nothing_that_carries_a_gradient():
    # argmax picks a column, one_hot turns it back into a float mask: the mask is a constant for the gradient
    def f(x):
        mask = ops.one_hot(ops.argmax(x, axis=1), depth=4, dtype="f64")
        return ops.sum(mask * ops.exp(x))
    graph = fc.trace(f, "f64[3, 4]")
    x = RNG.uniform(-1.0, 1.0, (3, 4))
    _, gx = fc.compile(fc.build_backward_graph(graph, 0, [0])).run([x])
    np.testing.assert_allclose(gx, gradient(lambda v: float(fc.compile(graph).run([v])[0]), x), rtol=1e-8)
    check_gradients(graph, [x], order=3).assert_ok()


def test_an_op_with_a_floating_output_and_no_gradient_is_still_refused_on_the_chain(registry_with_nograd):
    with fc.use_registry(registry_with_nograd):
        graph = fc.trace(lambda x: ops.sum(ops.nograd(x) * ops.cast(x > 0.0, to="f64")), "f64[3]")
        with pytest.raises(fc.MissingGradientError, match=r"\(nograd\) \(declared not differentiable") as info:
            fc.build_backward_graph(graph, 0, [0])
    assert "greater" not in str(info.value) and "cast" not in str(info.value)


def test_a_loss_that_only_reaches_the_input_through_integers_gets_a_zero_gradient():
    # y = argmax(x) cast to float: piecewise constant, and the rule says its derivative is 0
    graph = fc.trace(lambda x: ops.sum(ops.cast(ops.argmax(x), to="f64") * 1.0), "f64[5]")
    training = fc.build_backward_graph(graph, 0, [0])
    assert not any(n.op in ("argmax", "cast") for n in training.nodes[len(graph.nodes):])
    _, gx = fc.compile(training).run([A[:5]])
    assert gx.shape == (5,) and not gx.any()


# -- the closure audit --------------------------------------------------------------------------------------
def _same(ctx):
    return [ctx.input_types[0]]


def _is_positive_shape(ctx):
    return [ctx.input_types[0].with_dtype(fc.bool_)]


IS_POSITIVE = OpSchema("t_is_positive", inputs=("x",), shape_infer=_is_positive_shape,
                       kernels={"cpu": lambda ctx: lambda x: np.greater(x, 0)},
                       not_differentiable="outputs carry no gradient", examples=[Example(["f64[3]"])])
STEP = OpSchema("t_step", inputs=("x",), shape_infer=_same, kernels={"cpu": lambda ctx: lambda x: np.floor(x)},
                not_differentiable="piecewise constant", examples=[Example(["f64[3]"])])
# two relu-like ops: one masks through a boolean (closed), one through a float step op without a gradient (order 1)
MASKED = OpSchema("t_masked", inputs=("x",), shape_infer=_same, kernels={"cpu": lambda ctx: lambda x: np.maximum(x, 0)},
                  gradient=lambda ctx: ctx.grad_graph(
                      lambda x, y, gy: ops.where(ops.t_is_positive(x), gy, fc.constant(np.zeros(()))) * 1.0),
                  examples=[Example(["f64[3]"], min_abs=0.1)])
STEPPED = OpSchema("t_stepped", inputs=("x",), shape_infer=_same, kernels={"cpu": lambda ctx: lambda x: np.maximum(x, 0)},
                   gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.t_step(x)),
                   examples=[Example(["f64[3]"], min_abs=0.1)])


@pytest.mark.parametrize("deep", [False, True], ids=["start-up", "deep"])
def test_a_comparison_inside_a_gradient_does_not_limit_the_closure_order(deep):
    reg = fc.load_registry(audit=False)
    for schema in (IS_POSITIVE, STEP, MASKED, STEPPED):
        schema.pack = "tests"
        reg.schemas[schema.name] = schema
    closure = run_closure_audit(reg, deep=deep)
    assert closure["t_masked"].order == CLOSED and "t_is_positive" not in closure["t_masked"].uses
    assert closure["t_stepped"].order == 1 and closure["t_stepped"].chain == ("t_stepped", "t_step")
    assert closure["t_is_positive"].order == 0 and closure["t_is_positive"].differentiable == "no"
    with fc.use_registry(reg):
        graph = fc.trace(lambda x: ops.sum(ops.t_masked(ops.t_masked(x) * x)), "f64[4]")
        x = np.array([-1.5, -0.3, 0.4, 2.0])
        check_gradients(graph, [x], order=3, registry=reg).assert_ok()
        _, gx = fc.compile(fc.build_backward_graph(graph, 0, [0]), registry=reg).run([x])
    assert rel_error(gx, np.where(x > 0, 2 * x, 0.0)) < 1e-14
