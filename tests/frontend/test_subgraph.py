"""``trace_body`` and ``align_captures``: tracing control-flow bodies with closed-over values (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def test_a_body_traces_over_its_input_types_and_infers_its_outputs():
    body = fc.trace_body(lambda a, b: (a * b, ops.sum(a)), ["f64[3]", "f64[3]"], name="step")
    assert body.graph.name == "step" and body.captures == []
    assert [str(t) for t in body.graph.output_types] == ["f64[3]", "f64[]"]
    assert [v.name for v in body.graph.inputs] == ["a", "b"]  # named after the function's parameters


def test_a_closed_over_tensor_becomes_an_extra_input_listed_once():
    seen = {}

    def outer(x, w):  # noqa: ANN001, ANN202
        body = fc.trace_body(lambda a: a * w + w, ["f64[3]"])
        seen["body"] = body
        return x
    fc.trace(outer, "f64[3]", "f64[3]")
    body = seen["body"]
    assert len(body.graph.inputs) == 2 and body.graph.inputs[1].name == "w"
    assert len(body.captures) == 1 and body.captures[0].value.name == "w"


def test_captures_chain_through_nested_bodies():
    seen = {}

    def outer(x, w):  # noqa: ANN001, ANN202
        def middle(a):  # noqa: ANN001, ANN202
            seen["inner"] = fc.trace_body(lambda b: b * w, ["f64[3]"], name="inner")
            return a
        seen["middle"] = fc.trace_body(middle, ["f64[3]"], name="middle")
        return x
    g = fc.trace(outer, "f64[3]", "f64[3]")
    middle, inner = seen["middle"], seen["inner"]
    assert middle.captures[0].value is g.inputs[1]  # the middle body captured w from the traced graph...
    assert inner.captures[0].value is middle.graph.inputs[1]  # ...and the inner one from the middle body


def test_a_python_number_output_takes_the_expected_dtype():
    body = fc.trace_body(lambda s: (True, 0), ["f64[3]"], expect=[fc.TensorType("bool", ()), fc.TensorType("f64", ())])
    assert [str(t) for t in body.graph.output_types] == ["bool[]", "f64[]"]


def test_a_tensor_of_an_unrelated_graph_is_still_refused():
    other = fc.trace(lambda a: a, "f64[3]")
    stranger = fc.Tensor(other.inputs[0], other)
    with pytest.raises(fc.IRError, match="tensors from two different graphs cannot meet"):
        fc.trace(lambda x: fc.trace_body(lambda a: a + stranger, ["f64[3]"]).graph and x, "f64[3]")


def test_a_body_that_is_neither_callable_nor_graph_is_named():
    with pytest.raises(fc.IRError, match="the loop body must be a Python callable"):
        fc.trace_body(42, ["f64[3]"], role="loop body")
    with pytest.raises(fc.ShapeError, match="takes \\[f64\\[2\\]\\], but here it must take \\[f64\\[3\\]\\]"):
        fc.trace_body(fc.trace(lambda a: a, "f64[2]"), ["f64[3]"])


def test_align_captures_gives_every_body_the_union_in_one_order():
    seen = {}

    def outer(x, u, v):  # noqa: ANN001, ANN202
        one = fc.trace_body(lambda a: a * u, ["f64[3]"])
        two = fc.trace_body(lambda a: a * v + u, ["f64[3]"])
        seen["aligned"] = fc.align_captures([one, two])
        return x
    g = fc.trace(outer, "f64[3]", "f64[3]", "f64[3]")
    (one, two), shared = seen["aligned"]
    assert [t.value for t in shared] == [g.inputs[1], g.inputs[2]]
    for body in (one, two):
        assert [v.type for v in body.graph.inputs] == [fc.TensorType("f64", (3,))] * 3
    # the first body never read v: its input for v exists and is unused
    assert not any(one.graph.inputs[2] in n.inputs for n in one.graph.nodes)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(fc.compile(two.graph).run([x, x, 2 * x])[0], x * (2 * x) + x)
