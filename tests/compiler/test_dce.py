"""Stage 6, dead-node elimination: what no output needs goes, side effects stay (ARCH-061 clean-up)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.frontend.trace import apply

from .fixture_pack import RECORDED


def unused_nodes(graph: fc.Graph, registry) -> list[str]:
    """Nodes none of whose outputs is read or returned, and that have no side effect."""
    read = {v for n in graph.nodes for v in n.inputs} | set(graph.outputs)
    return [n.op for n in graph.nodes if not any(v in read for v in n.outputs)
            and not registry.get(n.op).has_side_effect]


def mlp_training_graph() -> fc.Graph:
    def mlp(x, t, w1, b1, w2, b2):
        return ops.mse_loss(ops.relu(x @ w1 + b1) @ w2 + b2, t)
    forward = fc.trace(mlp, "f32[8, 4]", "f32[8, 2]", "f32[4, 6]", "f32[6]", "f32[6, 2]", "f32[2]")
    return fc.build_backward_graph(forward, 0, [2, 3, 4, 5])


def test_unused_nodes_are_removed_and_chains_of_them_too():
    def f(x):
        ops.exp(ops.sin(x))  # a dead chain
        y = ops.cos(x)
        ops.tanh(y)          # dead, though it reads a live value
        return y
    exe = fc.compile(fc.trace(f, "f32[3]"), opt_level=1, cache=False)
    assert [n.op for n in exe.graph.nodes] == ["cos"]
    assert ("eliminate_dead_nodes", "removed 3 of 4 nodes") in exe.log


def test_side_effect_nodes_are_kept_though_nothing_reads_them(fixture_registry):
    def f(x):
        apply("record", ops.exp(x))
        return ops.sin(x)
    exe = fc.compile(fc.trace(f, "f32[3]"), cache=False)
    assert "record" in [n.op for n in exe.graph.nodes]
    x = np.array([0.0, 1.0, 2.0], np.float32)
    exe.run([x])
    np.testing.assert_array_equal(RECORDED[0], np.exp(x))


@pytest.mark.parametrize("level", [1, 2])
def test_the_optimised_training_graph_of_an_mlp_has_no_unused_node(level, basic_registry):
    training = mlp_training_graph()
    # build_backward_graph itself no longer leaves x's gradient behind (issue 17: dead nodes in `frame graph show`);
    # dead-node elimination on graphs that have some is tested above
    assert unused_nodes(training, basic_registry) == []
    exe = fc.compile(training, opt_level=level, cache=False)
    assert unused_nodes(exe.graph, basic_registry) == []
    for node in exe.graph.nodes:  # and inside fused bodies: every member is read or exported
        if node.op == "fused_elementwise_internal":
            assert unused_nodes(node.attrs["body"], basic_registry) == []


def test_a_graph_with_nothing_dead_is_returned_unchanged():
    exe = fc.compile(fc.trace(lambda x: ops.sin(x), "f32[3]"), opt_level=1, cache=False)
    assert "eliminate_dead_nodes" not in {stage for stage, _ in exe.log}
