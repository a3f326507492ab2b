"""A position list given as a set or a mapping is refused (found in QA: ``build_backward_graph(g, 0, {"x", "w"})``
returned gradients in hash order, different between runs; a dict was read as its keys)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import GradientError, IRError, ops
from frame_core.autodiff.sgd import build_sgd_update_graph
from frame_core.testing import check_gradients
from frame_core.testing.numeric import check_low_precision, check_random_direction


def graph() -> fc.Graph:
    return fc.trace(lambda x, w: ops.sum(x * w), "f32[3]", "f32[3]")


UNORDERED = [{"x", "w"}, frozenset({0, 1}), {"x": 0, "w": 1}, {0: "a", 1: "b"}.keys()]


@pytest.mark.parametrize("wrt", UNORDERED, ids=["set", "frozenset", "dict", "keys"])
@pytest.mark.parametrize("call", [
    lambda g, wrt: fc.build_backward_graph(g, 0, wrt),
    lambda g, wrt: fc.build_backward_graph(g, 0, [0, 1], names=wrt),
    lambda g, wrt: fc.build_vjp_graph(g, wrt),
    lambda g, wrt: fc.split_vjp_graph(g, [0], invariant=wrt),
    lambda g, wrt: check_gradients(g, [np.ones(3, np.float32)] * 2, wrt),
    lambda g, wrt: check_random_direction(g, [np.ones(3, np.float32)] * 2, wrt),
    lambda g, wrt: check_low_precision(g, [np.ones(3, np.float32)] * 2, wrt),
], ids=["backward", "backward-names", "vjp", "split-invariant", "check_gradients", "random-direction",
        "low-precision"])
def test_every_position_list_refuses_sets_and_mappings(call, wrt):
    with pytest.raises(GradientError, match="ordered list") as info:
        call(graph(), wrt)
    assert "sorted(...) or list(...)" in str(info.value)


def test_lists_tuples_and_generators_keep_their_order():
    g = graph()
    a = fc.build_backward_graph(g, 0, ["w", "x"])
    b = fc.build_backward_graph(g, 0, (i for i in (1, 0)))
    assert a.output_names[1:] == b.output_names[1:] == ["grad(output 0, w)", "grad(output 0, x)"]


def test_graph_building_refuses_unordered_inputs_and_types_too():
    g = fc.Graph()
    x = g.add_input("f32[3]")
    with pytest.raises(IRError, match="ordered list"):
        g.add_node("neg", {x})
    with pytest.raises(IRError, match="ordered list"):
        g.add_node("neg", [x], {}, {"f32[3]"})
    with pytest.raises(GradientError, match="ordered list"):
        build_sgd_update_graph({"f32[3]", "f32[2]"}, 0.1)
