"""Output positions come in one form, and outputs carry names (issue 8 §5).

``extend_graph`` returns the position of one new output as ``add_scalar_contraction`` does (a list only for a
list), and every output the autodiff functions add is named, so "the gradient of w at order 2" is found by name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import frame_core as fc
from frame_core import IRError, ops


@pytest.fixture
def forward():
    return fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f64[2, 3]", "f64[3, 4]")


def test_one_new_output_is_one_position_in_both_functions(forward):
    g1, k1 = fc.add_scalar_contraction(forward, 0)
    g2, k2 = fc.extend_graph(forward, lambda x, w, loss: loss * 2.0)
    g3, ks = fc.extend_graph(forward, lambda x, w, loss: [loss * 2.0, loss * 3.0])
    assert (k1, k2, ks) == (1, 1, [1, 2])
    assert all(isinstance(k, int) for k in (k1, k2, *ks))
    fc.build_backward_graph(g2, k2, [1])  # a position goes straight back in


def test_gradients_are_named_and_order_two_is_found_by_name(forward):
    forward.name_output(0, "loss")
    first = fc.build_backward_graph(forward, 0, [1])
    assert first.output_names == ["loss", "grad(loss, w)"]
    contracted, k = fc.add_scalar_contraction(first, first.output_index("grad(loss, w)"))
    assert contracted.output_names[k] == "sum(grad(loss, w))"
    second = fc.build_backward_graph(contracted, k, [1])
    position = second.output_index("grad(sum(grad(loss, w)), w)")  # the gradient of w, order 2
    assert position == len(second.outputs) - 1
    x, w = np.random.default_rng(0).standard_normal((2, 3)), np.random.default_rng(1).standard_normal((3, 4))
    outs = fc.compile(second).run([x, w])
    # d/dw sum(d/dw sum(tanh(x w))) = x^T (-2 tanh(xw)(1 - tanh^2(xw)) * (x 1))  (a vector-Jacobian product)
    t = np.tanh(x @ w)
    want = x.T @ (-2 * t * (1 - t * t) * (x.sum(axis=1, keepdims=True) * np.ones((1, 4))))
    np.testing.assert_allclose(outs[position], want, rtol=1e-10)


def test_unnamed_outputs_and_inputs_get_positional_labels():
    g = fc.trace(lambda a, b: ops.sum(a * b), "f32[3]", "f32[3]")
    g.inputs[1].name = None
    grad = fc.build_backward_graph(g, 0, [0, 1])
    assert grad.output_names == [None, "grad(output 0, a)", "grad(output 0, input 1)"]


def test_names_can_be_chosen(forward):
    g = fc.build_backward_graph(forward, 0, [0, 1], names=["gx", "gw"])
    assert g.output_names[1:] == ["gx", "gw"]
    c, k = fc.add_scalar_contraction(g, 2, name="total_gw")
    e, ks = fc.extend_graph(c, lambda *v: [v[-1] * 2.0, v[-1] + 1.0], names=["twice", "plus_one"])
    assert e.output_names[k] == "total_gw" and [e.output_names[i] for i in ks] == ["twice", "plus_one"]
    with pytest.raises(fc.GradientError, match="one per wrt input"):
        fc.build_backward_graph(forward, 0, [0, 1], names=["only_one"])
    with pytest.raises(IRError, match="a list of 2 names"):
        fc.extend_graph(forward, lambda *v: [v[-1], v[-1]], names="one")


def test_output_index_says_which_names_exist(forward):
    g = fc.build_backward_graph(forward, 0, [1])
    with pytest.raises(IRError, match=r"no output is named 'grad\(loss, w\)'.*1: 'grad\(output 0, w\)'"):
        g.output_index("grad(loss, w)")
    g.mark_output(g.outputs[1], "grad(output 0, w)")
    with pytest.raises(IRError, match="several outputs are named"):
        g.output_index("grad(output 0, w)")


def test_names_survive_cloning_json_printing_and_compiling(forward):
    g = fc.build_backward_graph(forward, 0, [1])
    assert fc.clone_graph(g).output_names == g.output_names
    doc = json.loads(fc.dumps(g))
    assert doc["graph"]["output_names"] == [None, "grad(output 0, w)"]
    assert fc.loads(fc.dumps(g)).output_names == g.output_names
    assert "as 'grad(output 0, w)'" in fc.format_graph(g)
    assert fc.compile(g).output_names == g.output_names
    renamed = fc.clone_graph(g)
    renamed.name_output(1, "gw")
    assert fc.compile(renamed).output_names[1] == "gw"  # not the cached executable of the other names


def test_a_negative_output_position_names_the_real_output():
    # -1 counts from the end, as documented; the names built from it must say which output it is
    forward = fc.trace(lambda x: (ops.sum(x * 2.0), ops.sum(x * 3.0)), "f64[2]")
    assert fc.build_backward_graph(forward, -1, [0]).output_names[-1] == "grad(output 1, x)"
    contracted, k = fc.add_scalar_contraction(forward, -2)
    assert contracted.output_names[k] == "sum(output 0)"
