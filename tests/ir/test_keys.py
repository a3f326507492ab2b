"""graph_key / attrs_key: equal for identical structure, different on any attribute, type or wiring change."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import Graph, clone_graph
from frame_core.ir.keys import attr_key, graph_key


def neg_body(in_type: str, op: str = "neg1") -> Graph:
    b = Graph("body")
    b.mark_output(b.apply(op, b.add_input(in_type)))
    return b


def build(*, factor=3.0, in_type="f32[3]", op="add2", swap=False, outputs=(0, 1), body=None, body_op="neg1",
          const=None) -> Graph:
    """Two graphs built by this function with the same arguments are identical in structure."""
    g = Graph("k")
    x = g.add_input(in_type, "x")
    y = g.add_input(in_type, "y")
    s = g.apply(op, *((y, x) if swap else (x, y)))
    t = g.apply("scale", s, factor=factor)
    c = g.apply("call", t, body=body if body is not None else neg_body(in_type, body_op))
    if const is not None:
        g.constant(const)
    values = [t, s, c]
    for i in outputs:
        g.mark_output(values[i])
    return g


def test_identical_structure_gives_equal_keys_whatever_the_value_objects():
    a, b = build(), build()
    assert graph_key(a) == graph_key(b) and hash(graph_key(a)) == hash(graph_key(b))
    assert graph_key(clone_graph(a)) == graph_key(a)


def test_value_names_and_graph_name_do_not_matter():
    a, b = build(), build()
    b.name = "other"
    b.inputs[0].name = "renamed"
    assert graph_key(a) == graph_key(b)


@pytest.mark.parametrize("change", [
    {"factor": 2.0},
    {"factor": -0.0},
    {"in_type": "f64[3]"},
    {"in_type": "f32[4]"},
    {"swap": True},
    {"outputs": (1, 0)},
    {"outputs": (0, 1, 1)},
    {"body_op": "scale"},
    {"const": np.array([1.0, 2.0])},
], ids=lambda c: next(iter(c)))
def test_any_change_of_attribute_type_wiring_or_outputs_changes_the_key(change):
    assert graph_key(build(**change)) != graph_key(build())


def test_change_inside_a_sub_graph_changes_the_key():
    body = neg_body("f32[3]")
    assert graph_key(build(body=body)) == graph_key(build())
    body.mark_output(body.inputs[0])  # the body now has two outputs; verify would object, the key must differ
    assert graph_key(build(body=body)) != graph_key(build())


@pytest.mark.parametrize("a, b", [
    (1, 1.0), (1, True), (0, False), ((1, 2), (2, 1)), ("1", 1), (np.float32(1.0), 1.0),
    (np.array([1.0], np.float32), np.array([1.0], np.float64)),
    (np.array([1.0, 2.0]), np.array([[1.0, 2.0]])),
    (np.zeros(100), np.concatenate([np.zeros(99), [1e-300]])),
])
def test_attribute_keys_distinguish_kind_dtype_shape_and_bits(a, b):
    assert attr_key(a) != attr_key(b)


@pytest.mark.parametrize("make", [
    lambda: float("nan"), lambda: float("inf"), lambda: -0.0, lambda: (1.0, float("nan")),
    lambda: np.array([np.nan, np.inf]),
], ids=["nan", "inf", "-0.0", "tuple-with-nan", "tensor-with-nan"])
def test_attribute_keys_are_equal_for_equal_bits_even_for_nan(make):
    a, b = make(), make()  # two distinct objects with the same bits
    assert attr_key(a) == attr_key(b)


def test_graph_keys_with_nan_attributes_are_equal():
    assert graph_key(build(factor=float("nan"))) == graph_key(build(factor=float("nan")))


def test_key_is_recomputed_after_an_edit():
    g = build()
    before = graph_key(g)
    g.apply("neg1", g.inputs[0])
    assert graph_key(g) != before


@pytest.mark.parametrize("edit", [
    lambda g: g.outputs.__setitem__(0, g.inputs[0]),
    lambda g: g.outputs.pop(),
    lambda g: g.outputs.append(g.outputs[0]),
    lambda g: g.nodes.reverse(),
    lambda g: g.nodes.pop(),
    lambda g: g.inputs.append(g.inputs[0]),
], ids=["outputs[0]=", "outputs.pop", "outputs.append", "nodes.reverse", "nodes.pop", "inputs.append"])
def test_key_is_recomputed_after_an_edit_of_the_lists_themselves(edit):
    # the compile cache reads the memoised key: a stale one would hand back another graph's executable
    g = build()
    before = graph_key(g)
    edit(g)
    assert graph_key(g) != before


def test_tensor_keys_ignore_byte_order():
    little = np.arange(4, dtype="<f8")
    assert attr_key(little.astype(">f8")) == attr_key(little)
