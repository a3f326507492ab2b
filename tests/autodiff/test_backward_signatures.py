"""The reverse walk's per-signature memo: every node is still checked, and unasked gradients still dropped."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.errors import GradientError


def test_a_later_node_of_a_known_signature_recorded_wrongly_is_still_named():
    g = fc.Graph("hand_built")
    x = g.add_input("f32[3]")
    a = g.add_node("relu", [x], {}, ["f64[3]"]).outputs[0]  # recorded wrongly by hand
    b = g.add_node("relu", [x], {}).outputs[0]  # the same signature, right: the reverse walk meets it first
    s = g.add_node("add", [g.add_node("cast", [a], {"to": "f32"}).outputs[0], b], {}).outputs[0]
    g.mark_output(g.add_node("sum", [s], {"axes": None, "keepdims": False}).outputs[0])
    with pytest.raises(GradientError) as info:
        fc.build_backward_graph(g, 0, [0])
    message = str(info.value)
    assert "recorded as [f64[3]] but inference gives [f32[3]]" in message and "no pack is at fault" in message


def _chain(x, w):
    h = x
    for i in range(6):
        h = ops.tanh(h @ w) if i % 2 else ops.sin(h) + h
    return ops.sum(h)


@pytest.mark.parametrize("wrt", [[0], [1]])
def test_gradients_nobody_asked_for_are_dropped_and_the_rest_kept(wrt):
    forward = fc.trace(_chain, "f32[4, 8]", "f32[8, 8]")
    both = fc.build_backward_graph(forward, 0, [0, 1])
    one = fc.build_backward_graph(forward, 0, wrt)
    assert len(one.nodes) < len(both.nodes)
    if wrt == [0]:  # w's gradient is made by the reverse walk, then dropped
        assert "matmul_grad_rhs_like_internal" not in {n.op for n in one.nodes}
    live = set(one.outputs)  # every node left is needed by an output
    for node in reversed(one.nodes):
        assert any(v in live for v in node.outputs), node
        live.update(node.inputs)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32) * 0.3
    got = fc.compile(one, cache=False).run([x, w])[1]
    want = fc.compile(both, cache=False).run([x, w])[1 + wrt[0]]
    assert np.array_equal(got, want)
