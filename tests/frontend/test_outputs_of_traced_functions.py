"""What a traced function (``trace``, ``extend_graph``) may return, and outputs found by name (found in QA).

Returning ``None`` (a forgotten ``return``), a dict or a nested list said "output: input 0 must be a Tensor ...",
naming an input that does not exist; a raw ``Value`` of another graph was marked as an output in silence (a
broken graph); ``extend_graph(name=5)`` made a graph with an int name that ``dumps`` wrote and ``loads`` refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import GradientError, IRError, ops


@pytest.fixture(scope="module")
def graph():
    return fc.trace(lambda x: ops.sum(x * x), "f32[3]")


@pytest.mark.parametrize("returned, words", [
    (lambda x: None, "is None (NoneType); a traced function returns tensors, Python numbers or numpy arrays"),
    (lambda x: {"y": x}, "(dict)"),
    (lambda x: [[x]], "(list)"),
])
def test_a_traced_function_returning_something_else_says_what_it_returned(returned, words):
    with pytest.raises(IRError, match="output 0 of the traced function") as info:
        fc.trace(returned, "f32[3]")
    assert words in str(info.value) and "input 0" not in str(info.value)
    with pytest.raises(IRError, match="did it forget to `return`"):
        fc.trace(lambda x: None, "f32[3]")


def test_a_value_of_another_graph_is_not_marked_as_an_output(graph):
    other = fc.trace(lambda y: ops.relu(y), "f32[3]")
    with pytest.raises(IRError, match="a Value of another graph"):
        fc.extend_graph(graph, lambda x, s: other.outputs[0])
    extended, k = fc.extend_graph(graph, lambda x, s: s.value)  # this graph's own Value is fine
    assert extended.outputs[k] is extended.outputs[0]


@pytest.mark.parametrize("name", [5, "", b"g"])
def test_extend_graph_refuses_a_graph_name_that_is_not_a_string(graph, name):
    with pytest.raises(IRError, match="extend_graph\\(name=\\)"):
        fc.extend_graph(graph, lambda x, s: s * 2.0, name=name)


def test_autodiff_takes_an_output_by_its_name():
    forward = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f64[2, 3]", "f64[3, 4]")
    forward.name_output(0, "loss")
    first = fc.build_backward_graph(forward, "loss", [1])
    by_name, k = fc.add_scalar_contraction(first, "grad(loss, w)")
    by_position, k2 = fc.add_scalar_contraction(first, 1)
    assert k == k2 and fc.dumps(by_name) == fc.dumps(by_position)
    second = fc.build_backward_graph(by_name, by_name.output_names[k], [1])
    assert second.output_names[-1] == "grad(sum(grad(loss, w)), w)"
    with pytest.raises(GradientError, match="no output is named 'los'"):
        fc.build_backward_graph(forward, "los", [1])
