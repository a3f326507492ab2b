"""A node whose attributes are valid but not in their schema's form compiles and differentiates (found in QA).

``verify`` accepts a node that leaves out an attribute with a default (a hand-built graph, or a document saved
before its op gained that attribute) or gives ``ints`` as a list and a ``dtype`` as a string; the kernel
builders, passes and GradientFns then read ``attrs["axes"]`` and got a KeyError: compile failed with "building
the cpu kernel ... failed: KeyError", and differentiation said "a bug in pack ops_basic". ``build_vjp_graph``
also blamed the pack for a graph that fails ``verify``, where ``build_backward_graph`` blames the graph.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import frame_core as fc
from frame_core import GradientError, ops
from frame_core.autodiff.vjp import split_vjp_graph

X = np.array([1.0, -2.0, 3.0], np.float32)


def _hand_built() -> fc.Graph:
    g = fc.Graph("hand")
    x = g.add_input("f32[3]", "x")
    c = g.add_node("cast", [x], {"to": "f64"}, ["f64[3]"]).outputs[0]         # a dtype as a string
    s = g.add_node("sum", [c], {"axes": [0]}, ["f64[]"]).outputs[0]            # ints as a list, keepdims left out
    t = g.add_node("sum", [g.add_node("tanh", [c], {}, ["f64[3]"]).outputs[0]], {}, ["f64[]"]).outputs[0]
    g.mark_output(g.add_node("add", [s, t], {}, ["f64[]"]).outputs[0])
    return g


def _old_document() -> str:
    """The document of ops.sum(x) with the `axes` and `keepdims` attributes taken out, as an older writer left them."""
    doc = json.loads(fc.dumps(fc.trace(lambda x: ops.sum(ops.square(x)), "f32[3]")))
    for node in doc["graph"]["nodes"]:
        node.pop("attrs", None)
    return json.dumps(doc)


@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_a_hand_built_graph_with_attributes_in_another_form_compiles_and_runs(opt_level):
    assert fc.check_graph(_hand_built()) == []
    got = fc.compile(_hand_built(), opt_level=opt_level, cache=False).run([X])[0]
    x = X.astype(np.float64)
    np.testing.assert_allclose(got, x.sum() + np.tanh(x).sum(), rtol=1e-12)


def test_it_differentiates_to_second_order_and_no_pack_is_blamed():
    grad = fc.build_backward_graph(_hand_built(), 0, [0])
    contracted, k = fc.add_scalar_contraction(grad, 1)
    second = fc.build_backward_graph(contracted, k, [0])
    got = fc.compile(second, cache=False).run([X])
    x = X.astype(np.float64)
    np.testing.assert_allclose(got[1], 1 + (1 - np.tanh(x) ** 2), rtol=1e-6)
    np.testing.assert_allclose(got[-1], -2 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-5)
    vjp = fc.build_vjp_graph(_hand_built(), [0])
    np.testing.assert_allclose(fc.compile(vjp, cache=False).run([X, np.float64(2.0)])[0],
                               2 * (1 + (1 - np.tanh(x) ** 2)), rtol=1e-6)


def test_a_document_saved_without_attributes_that_have_defaults_still_compiles():
    graph = fc.loads(_old_document())
    assert fc.check_graph(graph) == []
    np.testing.assert_allclose(fc.compile(graph, cache=False).run([X])[0], np.sum(X ** 2), rtol=1e-6)
    grad = fc.build_backward_graph(graph, 0, [0])
    np.testing.assert_allclose(fc.compile(grad, cache=False).run([X])[1], 2 * X, rtol=1e-6)


@pytest.mark.parametrize("build", [lambda g: fc.build_vjp_graph(g), lambda g: split_vjp_graph(g)],
                         ids=["build_vjp_graph", "split_vjp_graph"])
def test_a_vjp_of_an_invalid_graph_blames_the_graph_not_a_pack(build):
    g = fc.Graph("bad")
    x = g.add_input("f32[3]")
    y = g.add_node("relu", [x], {"bogus": 1}, ["f32[3]"]).outputs[0]
    g.mark_output(g.add_node("sum", [y], {}, ["f32[]"]).outputs[0])
    with pytest.raises(GradientError, match="forward graph itself is invalid") as info:
        build(g)
    assert "unknown attribute 'bogus'" in str(info.value) and "bug in pack" not in str(info.value)
