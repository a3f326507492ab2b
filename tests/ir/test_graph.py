"""Building graphs, clone_graph and inline_graph."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import AttributeSpecError, Graph, IRError, ShapeError, TensorType, UnknownOpError, Value, clone_graph
from frame_core.ir.graph import inline_graph
from frame_core.ir.keys import graph_key
from frame_core.ir.verify import verify

from .fixture_ops import example_body


def small_graph() -> Graph:
    """``f(x, y) = (scale(add2(x, y); 3), add2(x, y))`` plus a ``call`` node with a sub-graph."""
    g = Graph("small")
    x = g.add_input("f32[3]", "x")
    y = g.add_input("f32[3]", "y")
    s = g.apply("add2", x, y)
    t = g.apply("scale", s, factor=3.0)
    c = g.apply("call", t, body=example_body())
    g.mark_output(t)
    g.mark_output(s)
    g.mark_output(c)
    return g


def test_building_records_inputs_nodes_outputs_and_types():
    g = small_graph()
    assert [v.name for v in g.inputs] == ["x", "y"]
    assert [n.op for n in g.nodes] == ["add2", "scale", "call"]
    assert g.output_types == [TensorType.parse("f32[3]")] * 3
    assert g.nodes[1].attrs == {"factor": 3.0}
    for node in g.nodes:
        for i, v in enumerate(node.outputs):
            assert v.producer is node and v.index == i
    verify(g)


def test_apply_fills_attribute_defaults_and_normalises_kinds():
    g = Graph()
    x = g.add_input("f32[3]")
    g.apply("scale", x)
    g.apply("scale", x, factor=2)  # an int where a float is expected is widened
    assert g.nodes[0].attrs == {"factor": 1.0}
    assert type(g.nodes[1].attrs["factor"]) is float


def test_multi_output_apply_returns_a_tuple():
    g = Graph()
    lo, hi = g.apply("split2", g.add_input("f32[4]"))
    assert lo.type == hi.type == TensorType.parse("f32[2]")
    assert (lo.index, hi.index) == (0, 1)


def test_the_same_value_may_be_marked_as_output_twice():
    g = Graph()
    x = g.add_input("f32[2]")
    assert (g.mark_output(x), g.mark_output(x)) == (0, 1)
    assert g.outputs == [x, x]
    verify(g)


@pytest.mark.parametrize("value, dtype, expected", [
    (1.5, None, "f64[]"),
    (np.float32(1.5), None, "f32[]"),
    ([1, 2], "i32", "i32[2]"),
    (np.ones((2, 2), np.float16), None, "f16[2, 2]"),
    (True, None, "bool[]"),
])
def test_constant_types_follow_the_value_or_the_dtype(value, dtype, expected):
    g = Graph()
    v = g.constant(value, dtype)
    assert v.type == TensorType.parse(expected)
    assert g.nodes[0].op == "constant"


@pytest.mark.parametrize("build, error, fragments", [
    (lambda g, x: g.add_node("add2", [x, 1.0]), IRError, ["input 1", "add2", "float", "graph.constant"]),
    (lambda g, x: g.apply("nosuch", x), UnknownOpError, ["nosuch"]),
    (lambda g, x: g.apply("sacle", x), UnknownOpError, ["'sacle'", "did you mean 'scale'"]),
    (lambda g, x: g.apply("scale", x, factr=2.0), AttributeSpecError, ["scale", "'factr'", "did you mean 'factor'"]),
    (lambda g, x: g.apply("scale", x, factor="big"), AttributeSpecError, ["scale", "'factor'", "a float", "'big'"]),
    (lambda g, x: g.apply("cast", x), AttributeSpecError, ["cast", "'dtype'", "required"]),
    (lambda g, x: g.apply("add2", x, g.add_input("f64[3]")), ShapeError, ["add2", "f32[3]", "f64[3]"]),
    (lambda g, x: g.apply("add2", x), ShapeError, ["add2", "2 inputs", "got 1"]),
    (lambda g, x: g.mark_output("x"), IRError, ["mark_output", "str"]),
])
def test_bad_builds_raise_named_errors_that_say_what_and_where(build, error, fragments):
    g = Graph()
    x = g.add_input("f32[3]")
    with pytest.raises(error) as info:
        build(g, x)
    for fragment in fragments:
        assert fragment in str(info.value)


# -- clone_graph --------------------------------------------------------------------------------------------
def test_clone_fills_value_map_for_every_input_and_node_output():
    g = small_graph()
    vmap: dict[Value, Value] = {}
    c = clone_graph(g, vmap)
    sources = list(g.inputs) + [v for n in g.nodes for v in n.outputs]
    assert set(vmap) == set(sources)
    clones = list(c.inputs) + [v for n in c.nodes for v in n.outputs]
    assert [vmap[v] for v in sources] == clones
    assert [vmap[v] for v in g.outputs] == c.outputs
    for src, dst in vmap.items():
        assert dst is not src and dst.type == src.type and dst.name == src.name


def test_clone_is_structurally_equal_and_shares_no_graph_objects():
    g = small_graph()
    c = clone_graph(g)
    verify(c)
    assert graph_key(c) == graph_key(g)
    assert c is not g and c.name == g.name
    assert not {id(n) for n in c.nodes} & {id(n) for n in g.nodes}
    values = lambda h: {id(v) for v in h.inputs} | {id(v) for n in h.nodes for v in n.outputs}  # noqa: E731
    assert not values(c) & values(g)
    for node in c.nodes:
        assert all(v in c.inputs or v.producer in c.nodes for v in node.inputs)


def test_editing_a_clone_leaves_the_source_unchanged():
    g = small_graph()
    key, text = graph_key(g), str(g)
    c = clone_graph(g)
    c.apply("neg1", c.inputs[0])
    c.mark_output(c.inputs[1])
    c.nodes[1].attrs["factor"] = 5.0
    c.inputs[0].name = "renamed"
    assert graph_key(g) == key and str(g) == text
    assert g.nodes[1].attrs["factor"] == 3.0
    assert len(g.nodes) == 3 and len(g.outputs) == 3


def test_clone_deep_copies_sub_graph_attributes():
    g = small_graph()
    c = clone_graph(g)
    src_body, clone_body = g.nodes[2].attrs["body"], c.nodes[2].attrs["body"]
    assert clone_body is not src_body
    assert graph_key(clone_body) == graph_key(src_body)
    assert clone_body.inputs[0] is not src_body.inputs[0]
    clone_body.apply("neg1", clone_body.inputs[0])
    assert len(src_body.nodes) == 1


def test_clone_keeps_outputs_marked_twice_and_input_outputs():
    g = Graph()
    x = g.add_input("f32[2]")
    g.mark_output(x)
    g.mark_output(x)
    c = clone_graph(g)
    assert c.outputs == [c.inputs[0], c.inputs[0]]


def test_clone_of_a_graph_with_a_foreign_output_raises_irerror():
    other = Graph("other")
    g = Graph("g")
    g.add_input("f32[2]")
    g.mark_output(other.add_input("f32[2]"))
    with pytest.raises(IRError, match="not defined"):
        clone_graph(g)


# -- inline_graph -------------------------------------------------------------------------------------------
def test_inline_binds_arguments_and_returns_mapped_outputs():
    sub = example_body()
    g = Graph()
    x = g.add_input("f32[3]")
    (y,) = inline_graph(g, sub, [x])
    assert [n.op for n in g.nodes] == ["neg1"] and g.nodes[0].inputs == (x,) and y is g.nodes[0].outputs[0]
    assert len(sub.nodes) == 1 and sub.nodes[0] is not g.nodes[0]


@pytest.mark.parametrize("args, fragments", [
    ([], ["takes 1 inputs", "0 were given"]),
    (["f64[3]"], ["input 0", "f32[3]", "f64[3]"]),
])
def test_inline_refuses_wrong_arguments(args, fragments):
    g = Graph()
    values = [g.add_input(t) for t in args]
    with pytest.raises(IRError) as info:
        inline_graph(g, example_body(), values)
    for fragment in fragments:
        assert fragment in str(info.value)
