"""Wrong arguments to the autodiff API are named errors that say what was expected (issue 8 §4), and a graph
that fails ``verify`` is the user's mistake, never "a bug in pack ..." (issue 8 §2)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import GradientError, ops


@pytest.fixture
def forward():
    return fc.trace(lambda x, w: ops.sum(ops.relu(x @ w)), "f32[2, 3]", "f32[3, 4]")


@pytest.mark.parametrize("wrt, words", [
    (0, "list of input positions or names such as [0, 2] or ['w'], got int 0; for one input write [0]"),
    ("w", "got str 'w'; for one input write ['w']"),
    (None, "got NoneType None"),
    ("01", "got str '01'"),
    (1.0, "got float"),
])
def test_wrt_must_be_a_list_of_positions(forward, wrt, words):
    with pytest.raises(GradientError, match=words.replace("[", r"\[").replace("]", r"\]")):
        fc.build_backward_graph(forward, 0, wrt)


def test_wrt_takes_input_names_as_it_takes_positions(forward):
    by_name = fc.build_backward_graph(forward, 0, ["w", "x"])
    by_position = fc.build_backward_graph(forward, 0, [1, 0])
    assert fc.dumps(by_name) == fc.dumps(by_position)
    assert by_name.output_names[1:] == ["grad(output 0, w)", "grad(output 0, x)"]
    with pytest.raises(GradientError, match=r"no input of that name \(named inputs: 0: 'x', 1: 'w'\)"):
        fc.build_backward_graph(forward, 0, ["q"])
    with pytest.raises(GradientError, match="listed twice"):
        fc.build_backward_graph(forward, 0, ["w", 1])


@pytest.mark.parametrize("registry", ["x", 5, {}])
def test_registry_must_be_a_registry(forward, registry):
    with pytest.raises(GradientError, match="registry= takes a frame_core Registry"):
        fc.build_backward_graph(forward, 0, [1], registry=registry)


def test_a_graph_that_fails_verify_is_blamed_not_the_pack():
    g = fc.Graph("hand_built")
    x = g.add_input("f32[3]")
    y = g.add_node("relu", [x], {}, ["f64[3]"]).outputs[0]  # recorded wrongly by hand
    g.mark_output(g.add_node("sum", [y], {"axes": None, "keepdims": False}, ["f64[]"]).outputs[0])
    with pytest.raises(GradientError) as info:
        fc.build_backward_graph(g, 0, [0])
    message = str(info.value)
    assert "the forward graph itself is invalid" in message and "no pack is at fault" in message
    assert "V6" in message and "recorded as [f64[3]] but inference gives [f32[3]]" in message
    assert "a bug in pack" not in message


def test_a_structurally_broken_graph_is_blamed_before_any_gradient_is_built():
    g = fc.Graph()
    x = g.add_input("f32[3]")
    late = fc.Graph().add_input("f32[3]")  # a value of another graph
    y = g.add_node("add", [x, late], {}, ["f32[3]"]).outputs[0]
    g.mark_output(g.add_node("sum", [y], {"axes": None, "keepdims": False}, ["f32[]"]).outputs[0])
    with pytest.raises(GradientError, match=r"(?s)V2 .*not defined in this graph.*no pack is at fault"):
        fc.build_backward_graph(g, 0, [0])


@pytest.mark.parametrize("weights", ["abc", [1.0, 2.0], object()])
def test_bad_contraction_weights_are_a_gradient_error(forward, weights):
    with pytest.raises(GradientError, match="weights"):
        fc.add_scalar_contraction(forward, 0, weights=weights)


def test_add_scalar_contraction_needs_a_graph():
    with pytest.raises(GradientError, match="needs a Graph, got str"):
        fc.add_scalar_contraction("graph", 0)


@pytest.mark.parametrize("types, words", [
    ("f32[3]", r"list of parameter types .*for one parameter write \['f32\[3\]'\]"),
    (fc.TensorType.parse("f32[3]"), r"for one parameter write \['f32\[3\]'\]"),
    (3, "got int"),
    (["f32[3]", "float99[2]"], r"parameter type 1 \('float99\[2\]'\) is not a tensor type"),
])
def test_sgd_parameter_types_must_be_a_list_of_types(types, words):
    with pytest.raises(GradientError, match=words):
        fc.build_sgd_update_graph(types, 0.1)


def test_sgd_takes_numpy_learning_rates():
    graph = fc.build_sgd_update_graph(["f32[2]"], np.float32(0.5))
    (new,) = fc.compile(graph).run([np.ones(2, np.float32), np.ones(2, np.float32)])
    np.testing.assert_allclose(new, [0.5, 0.5])


def test_vjp_graphs_take_input_names_as_build_backward_graph_does():
    g = fc.trace(lambda x, w: ops.tanh(x @ w), "f64[2, 3]", "f64[3, 4]")
    assert fc.dumps(fc.build_vjp_graph(g, ["w"])) == fc.dumps(fc.build_vjp_graph(g, [1]))
    by_name = fc.split_vjp_graph(g, ["x", "w"], invariant=["w"])
    by_position = fc.split_vjp_graph(g, [0, 1], invariant=[1])
    assert fc.dumps(by_name.forward) == fc.dumps(by_position.forward)
    assert fc.dumps(by_name.backward) == fc.dumps(by_position.backward)
    with pytest.raises(GradientError, match="no input of that name"):
        fc.split_vjp_graph(g, [0], invariant=["q"])


def test_an_input_named_and_numbered_in_wrt_is_reported_as_the_caller_wrote_it():
    # the message showed the resolved list, [0, 0], for wrt=['x', 0]
    graph = fc.trace(lambda x, w: ops.sum(x * w), "f32[2]", "f32[2]")
    with pytest.raises(fc.GradientError, match=r"wrt index 0 is listed twice in \['x', 0\] \('x' and 0 both name it\)"):
        fc.build_backward_graph(graph, 0, ["x", 0])
