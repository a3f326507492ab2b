"""The contract of build_backward_graph (ARCH-060 ... ARCH-062, SPEC §5)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema, ops
from frame_core.ir.keys import graph_key

from ._fd import gradient, rel_error


def run(graph, *arrays):
    return fc.compile(graph).run(list(arrays))


def test_outputs_are_forward_outputs_then_one_gradient_per_wrt_in_order():
    forward = fc.trace(lambda x, y: [ops.sum(x * y), x + y, ops.mean(y)], "f64[3]", "f64[3]")
    training = fc.build_backward_graph(forward, 0, [1, 0])
    assert len(training.outputs) == 3 + 2
    assert [v.type for v in training.outputs] == [*forward.output_types, forward.input_types[1], forward.input_types[0]]
    x, y = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 2.0])
    s, xy, m, gy, gx = run(training, x, y)
    np.testing.assert_allclose(xy, x + y)
    np.testing.assert_allclose(m, y.mean())
    np.testing.assert_allclose(gy, x)  # d/dy sum(x*y) = x
    np.testing.assert_allclose(gx, y)


def test_loss_may_be_any_scalar_output_and_the_forward_graph_is_untouched():
    forward = fc.trace(lambda x: [x * 2.0, ops.sum(ops.square(x))], "f64[4]")
    key, nodes, text = graph_key(fc.clone_graph(forward)), list(forward.nodes), str(forward)
    training = fc.build_backward_graph(forward, 1, [0])
    assert graph_key(fc.clone_graph(forward)) == key and forward.nodes == nodes and len(forward.outputs) == 2
    assert str(forward) == text  # the printer shows wiring and attributes
    x = np.arange(4.0)
    _, _, gx = run(training, x)
    np.testing.assert_allclose(gx, 2 * x)


def test_seed_is_a_constant_one_of_the_loss_dtype():
    forward = fc.trace(lambda x: ops.sum(x), "f32[3]")
    training = fc.build_backward_graph(forward, 0, [0])
    seeds = [n for n in training.nodes if n.op == "constant" and n.outputs[0].type == fc.TensorType("f32", ())]
    assert any(float(n.attrs["value"]) == 1.0 for n in seeds)


def test_contributions_of_several_consumers_are_summed():
    # y = x*x + x + sin(x): three uses of x; dy/dx = 2x + 1 + cos(x)
    forward = fc.trace(lambda x: ops.sum(x * x + x + ops.sin(x)), "f64[5]")
    training = fc.build_backward_graph(forward, 0, [0])
    assert any(n.op == "accumulate_internal" for n in training.nodes)
    x = np.linspace(-1, 1, 5)
    _, gx = run(training, x)
    np.testing.assert_allclose(gx, 2 * x + 1 + np.cos(x), rtol=1e-12)


def test_a_wrt_the_loss_does_not_reach_gets_a_zero_of_its_type():
    forward = fc.trace(lambda x, unused: ops.sum(x * 3.0), "f64[2]", "f32[2, 3]")
    training = fc.build_backward_graph(forward, 0, [1, 0])
    assert training.outputs[1].type == fc.TensorType("f32", (2, 3))
    _, g_unused, gx = run(training, np.ones(2), np.ones((2, 3), np.float32))
    assert g_unused.dtype == np.float32 and g_unused.shape == (2, 3) and not g_unused.any()
    np.testing.assert_allclose(gx, [3.0, 3.0])


def test_result_verifies_and_compiles_at_every_opt_level():
    forward = fc.trace(lambda x, w, b: ops.mse_loss(ops.relu(x @ w + b), x @ w), "f64[4, 3]", "f64[3, 3]", "f64[3]")
    training = fc.build_backward_graph(forward, 0, [1, 2])
    fc.verify(training)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(t.shape) for t in forward.input_types]
    results = [fc.compile(training, opt_level=level).run(args) for level in (0, 1, 2)]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_stop_gradient_cuts_the_edge():
    forward = fc.trace(lambda x: ops.sum(x * ops.stop_gradient(x)), "f64[3]")
    training = fc.build_backward_graph(forward, 0, [0])
    x = np.array([1.0, -2.0, 3.0])
    _, gx = run(training, x)
    np.testing.assert_allclose(gx, x)  # only the direct use of x carries a gradient


def test_stop_gradient_stays_visible_in_the_printed_graph():
    forward = fc.trace(lambda x: ops.sum(ops.stop_gradient(x)), "f64[3]")
    assert "stop_gradient" in str(fc.build_backward_graph(forward, 0, [0]))


def test_heaviside_surrogate_gradient_is_the_sigmoid_derivative():
    alpha = 3.0
    forward = fc.trace(lambda x: ops.sum(ops.heaviside_surrogate(x, alpha=alpha)), "f64[5]")
    training = fc.build_backward_graph(forward, 0, [0])
    x = np.array([-1.0, -0.2, 0.1, 0.5, 2.0])
    y, gx = run(training, x)
    assert y == 3.0  # the forward is the step
    s = 1.0 / (1.0 + np.exp(-alpha * x))
    np.testing.assert_allclose(gx, alpha * s * (1 - s), rtol=1e-12)  # closed form
    surrogate = lambda v: float(np.sum(1.0 / (1.0 + np.exp(-alpha * v))))  # noqa: E731
    assert rel_error(gx, gradient(surrogate, x)) < 1e-8  # and the surrogate's central difference (ARCH-066)


def test_broadcast_gradients_are_reduced_to_each_input_shape():
    forward = fc.trace(lambda x, w, b: ops.sum(ops.tanh(x @ w + b)), "f64[5, 3]", "f64[3, 4]", "f64[4]")
    training = fc.build_backward_graph(forward, 0, [2])
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(t.shape) for t in forward.input_types)
    _, gb = run(training, x, w, b)
    assert gb.shape == (4,)
    assert rel_error(gb, gradient(lambda bb: float(np.sum(np.tanh(x @ w + bb))), b)) < 1e-8


# -- errors ----------------------------------------------------------------------------------------------
def test_non_scalar_loss_is_refused_with_its_shape():
    forward = fc.trace(lambda x: x * 2.0, "f32[2, 3]")
    with pytest.raises(fc.NonScalarLossError, match=r"\[2, 3\]"):
        fc.build_backward_graph(forward, 0, [0])


def test_one_element_loss_is_accepted():
    forward = fc.trace(lambda x: ops.sum(x, axes=[1], keepdims=True), "f64[1, 3]")
    _, gx = run(fc.build_backward_graph(forward, 0, [0]), np.ones((1, 3)))
    np.testing.assert_allclose(gx, np.ones((1, 3)))


@pytest.mark.parametrize("loss, wrt, message", [
    (2, [0], "loss_output_index 2 is out of range"),
    (0, [3], "wrt index 3 is out of range"),
    (0, [0, 0], "listed twice"),
])
def test_bad_indices_are_refused(loss, wrt, message):
    forward = fc.trace(lambda x, y: [ops.sum(x), ops.sum(y)], "f64[2]", "f64[2]")
    with pytest.raises(fc.GradientError, match=message):
        fc.build_backward_graph(forward, loss, wrt)


def test_integer_wrt_is_refused():
    forward = fc.trace(lambda x, n: ops.sum(x), "f64[2]", "i64[2]")
    with pytest.raises(fc.GradientError, match="only floating inputs"):
        fc.build_backward_graph(forward, 0, [1])


def test_every_op_without_gradient_on_the_chain_is_named(registry_with_nograd):
    with fc.use_registry(registry_with_nograd):
        forward = fc.trace(lambda x: ops.sum(ops.nograd(ops.nograd(x) * 2.0) + ops.exp(x)), "f64[3]")
        with pytest.raises(fc.MissingGradientError) as info:
            fc.build_backward_graph(forward, 0, [0])
    message = str(info.value)
    positions = [i for i, n in enumerate(forward.nodes) if n.op == "nograd"]
    assert len(positions) == 2 and "have no gradient" in message and "ARCH-" not in message
    for i in positions:  # every offending node at once, not only the first
        assert f"node {i} (nograd)" in message


def test_an_op_without_gradient_off_the_chain_is_fine(registry_with_nograd):
    with fc.use_registry(registry_with_nograd):
        forward = fc.trace(lambda x, t: ops.mse_loss(x * 2.0, ops.nograd(t)), "f64[3]", "f64[3]")
        training = fc.build_backward_graph(forward, 0, [0])
        _, gx = fc.compile(training).run([np.ones(3), np.zeros(3)])
    np.testing.assert_allclose(gx, 2 * 2 * 2.0 / 3 * np.ones(3))


def test_a_fused_node_in_the_graph_is_refused_as_a_pipeline_product():
    forward = fc.trace(lambda x: ops.sum(ops.exp(ops.sin(x))), "f64[3]")
    optimised = fc.compile(forward).graph
    assert any(n.op == "fused_elementwise_internal" for n in optimised.nodes)
    with pytest.raises(fc.MissingGradientError, match="pipeline product"):
        fc.build_backward_graph(optimised, 0, [0])


def test_non_differentiable_input_positions_receive_no_gradient(registry_with_nograd):
    # scale_at(x, k): x * k with k declared non-differentiable (nondiff_inputs=(1,))
    with fc.use_registry(registry_with_nograd):
        forward = fc.trace(lambda x, k: ops.sum(ops.scale_at(x, k)), "f64[3]", "f64[3]")
        training = fc.build_backward_graph(forward, 0, [0, 1])
        _, gx, gk = fc.compile(training).run([np.ones(3), np.full(3, 4.0)])
    np.testing.assert_allclose(gx, 4.0)
    assert not gk.any()  # the rule: a declared non-differentiable input gets no contribution, so zero


def _registry_with(schema):
    reg = fc.load_registry(audit=False)
    schema.pack = "tests"
    reg.schemas[schema.name] = schema
    return reg


def _hand_built_bad_gradient(ctx):
    # a micro-graph that forgets to reduce the broadcast input b back to its shape
    g = fc.Graph("bad_grad")
    a, b, y, gy = (g.add_input(t) for t in ctx.gradient_input_types())
    g.mark_output(gy)
    g.mark_output(gy)  # wrong: b has fewer elements than gy
    return g


def test_a_gradient_of_the_wrong_type_for_this_node_is_refused_naming_the_node():
    # the start-up audit only sees the op's examples; the transform checks each node's own types
    bad = OpSchema("bad_add", inputs=("a", "b"), shape_infer=lambda ctx: [ctx.input_types[0]],
                   kernels={"cpu": lambda ctx: np.add}, gradient=_hand_built_bad_gradient,
                   examples=[Example(["f32[3]", "f32[3]"])])
    with fc.use_registry(_registry_with(bad)):
        forward = fc.trace(lambda a, b: ops.sum(ops.bad_add(a, b)), "f32[2, 3]", "f32[3]")
        with pytest.raises(fc.GradientError, match=r"node 0 \(bad_add\) on \[f32\[2, 3\], f32\[3\]\].*f32\[3\]"):
            fc.build_backward_graph(forward, 0, [0, 1])


def test_a_gradient_fn_that_raises_is_a_gradient_error_naming_the_node_and_pack():
    def explode(ctx):
        return 1 / 0
    bad = OpSchema("bad_grad_op", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                   kernels={"cpu": lambda ctx: np.negative}, gradient=explode, examples=[Example(["f32[3]"])])
    with fc.use_registry(_registry_with(bad)):
        forward = fc.trace(lambda x: ops.sum(ops.bad_grad_op(x)), "f32[3]")
        with pytest.raises(fc.GradientError, match=r"node 0 \(bad_grad_op\).*ZeroDivisionError.*pack tests"):
            fc.build_backward_graph(forward, 0, [0])


def test_numpy_integer_indices_are_accepted_and_bools_are_not():
    forward = fc.trace(lambda x, y: ops.sum(x * y), "f64[2]", "f64[2]")
    training = fc.build_backward_graph(forward, np.int64(0), np.array([1]))
    assert len(training.outputs) == 2
    with pytest.raises(fc.GradientError, match="input positions"):
        fc.build_backward_graph(forward, 0, [True])
    with pytest.raises(fc.GradientError, match=r"an output position \(an int\), got bool"):
        fc.build_backward_graph(forward, True, [0])
