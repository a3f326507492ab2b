"""Stage 7, elementwise fusion: chains of elementwise ops become ``fused_elementwise_internal`` nodes."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import MissingGradientError, ops

FUSED = "fused_elementwise_internal"
X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
Y = np.array([0.3, -0.6, 0.9], np.float32)


def fused_nodes(exe) -> list:
    return [n for n in exe.graph.nodes if n.op == FUSED]


def body_ops(node) -> list[str]:
    """The body's members (its constants aside)."""
    return [n.op for n in node.attrs["body"].nodes if n.op != "constant"]


def agree(graph, inputs):
    """Compile with checks (verify after every stage), compare with opt_level 0, return the executable."""
    exe = fc.compile(graph, checks=True, cache=False)
    fc.verify(exe.graph)
    kept = [np.array(a, copy=True) for a in inputs]
    for got, want in zip(exe.run(inputs), fc.compile(graph, opt_level=0, cache=False).run(inputs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    for a, b in zip(inputs, kept):  # in-place members never write into the fused node's inputs
        np.testing.assert_array_equal(a, b)
    return exe


def test_a_chain_becomes_one_fused_node_that_allocates_only_its_result():
    graph = fc.trace(lambda x: ops.tanh(ops.exp(ops.sin(x) * 2.0) + 1.0), "f32[2, 3]")
    exe = agree(graph, [X])
    (node,) = fused_nodes(exe)
    assert body_ops(node) == ["sin", "mul", "exp", "add", "tanh"]
    # the two constants moved into the body: the graph holds the fused node alone, which takes x only
    assert [n.op for n in exe.graph.nodes] == [FUSED]
    assert [n.op for n in node.attrs["body"].nodes].count("constant") == 2
    (ins,) = exe.instructions
    assert ins.kernel.source.count("_empty(") == 1  # one register, used in place by every member
    out = np.empty((2, 3), np.float32)
    assert ins.kernel(X, out) is out
    np.testing.assert_allclose(out, np.tanh(np.exp(np.sin(X) * 2) + 1), rtol=1e-6)


def test_values_used_after_the_chain_are_exported_as_extra_outputs():
    def f(x):
        a = ops.sin(x) * 2.0
        b = ops.exp(a)
        c = ops.tanh(b)
        return [c, ops.sum(a), a @ ops.transpose(b)]  # a and b are read outside the chain
    exe = agree(fc.trace(f, "f32[2, 3]"), [X])
    (node,) = fused_nodes(exe)
    assert len(node.outputs) == 3  # a, b and c
    assert body_ops(node) == ["sin", "mul", "exp", "tanh"]


def test_a_graph_output_inside_a_chain_is_exported():
    exe = agree(fc.trace(lambda x: [ops.sin(x) * 2.0, ops.tanh(ops.sin(x) * 2.0)], "f32[2, 3]"), [X])
    (node,) = fused_nodes(exe)
    assert len(node.outputs) == 2



def test_a_chain_nothing_reads_fuses_when_dead_nodes_are_kept():
    """With eliminate_dead_nodes disabled (for the graph and, through compile_subgraph, every loop body), a
    chain whose values nothing reads still becomes a valid fused node (it exports its last value)."""
    def f(x):  # noqa: ANN001, ANN202
        ops.exp(ops.sin(x) * 2.0)  # read by nothing
        return ops.cos(x)
    exe = fc.compile(fc.trace(f, "f32[2, 3]"), disable=["eliminate_dead_nodes"], checks=True, cache=False)
    assert [len(n.outputs) for n in fused_nodes(exe)] == [1]
    np.testing.assert_allclose(exe.run([X])[0], np.cos(X), rtol=1e-6)

def test_fusion_never_creates_a_cycle():
    def f(x):
        a = ops.sin(x)
        b = ops.sum(a, axes=[1], keepdims=True)  # not fusable, reads the chain
        c = a * b                                # reads the chain and b: joining a's group would need b first
        return ops.exp(c) + a
    exe = agree(fc.trace(f, "f32[2, 3]"), [X])
    position = {v: i for i, n in enumerate(exe.graph.nodes) for v in n.outputs}
    for i, node in enumerate(exe.graph.nodes):
        assert all(position.get(v, -1) < i for v in node.inputs)


def test_broadcasting_inputs_enter_the_fused_chain_unexpanded():
    graph = fc.trace(lambda x, y: ops.tanh(x * y + 1.0) - y, "f32[2, 3]", "f32[3]")
    exe = agree(graph, [X, Y])
    (node,) = fused_nodes(exe)
    assert [str(v.type) for v in node.inputs if v.producer is None] == ["f32[2, 3]", "f32[3]"]


def test_a_type_change_ends_a_chain():
    graph = fc.trace(lambda x, y: ops.exp(ops.cos(ops.sin(y)) + x), "f32[2, 3]", "f32[3]")
    exe = agree(graph, [X, Y])
    assert sorted(body_ops(n) for n in fused_nodes(exe)) == [["add", "exp"], ["sin", "cos"]]


@pytest.mark.parametrize("type_, value", [("f64[4]", np.linspace(-1, 1, 4)), ("f32[]", np.float32(0.5)),
                                          ("f64[2, 2]", np.ones((2, 2)))])
def test_fused_chains_of_other_dtypes_and_ranks(type_, value):
    exe = agree(fc.trace(lambda x: ops.square(ops.sigmoid(x) * x) - x, type_), [np.asarray(value)])
    assert len(fused_nodes(exe)) == 1


def test_differentiating_a_fused_graph_is_an_error_saying_it_is_a_pipeline_product():
    forward = fc.trace(lambda x: ops.sum(ops.tanh(ops.sin(x) * 2.0)), "f32[2, 3]")
    exe = fc.compile(forward, cache=False)
    assert fused_nodes(exe)
    with pytest.raises(MissingGradientError, match="a compile-pipeline product: differentiate the graph before compiling it"):
        fc.build_backward_graph(exe.graph, 0, [0])


def test_fusion_of_a_training_graph_keeps_the_gradients():
    forward = fc.trace(lambda x, w: ops.mean(ops.square(ops.tanh(x @ w) * 0.5 - 1.0)), "f32[2, 3]", "f32[3, 3]")
    training = fc.build_backward_graph(forward, 0, [0, 1])
    exe = agree(training, [X, np.eye(3, dtype=np.float32) + 0.1])
    assert fused_nodes(exe)


def test_fusion_builds_member_kernels_from_the_registry_given_to_compile(fixture_registry, basic_registry):
    from frame_core.frontend.trace import apply

    graph = fc.trace(lambda x: apply("toy_double", apply("toy_add", x, x)), "f32[3]")
    with fc.use_registry(basic_registry):  # toy_* are unknown here; registry= must be enough
        exe = fc.compile(graph, registry=fixture_registry, cache=False)
    assert [n.op for n in exe.graph.nodes] == [FUSED]
    np.testing.assert_array_equal(exe.run([Y])[0], 4 * Y)


def test_groups_of_one_structure_share_one_body_and_different_ones_do_not():
    w, v = np.eye(3, dtype=np.float32), np.full((3, 3), 0.5, np.float32)

    def fn(x, y):  # four distinct unnamed values (a body's inputs take the names of the values they bind)
        a, b, c, d = x @ w, y @ w, x @ v, y @ v
        return [ops.tanh(ops.sin(a) * 2.0), ops.tanh(ops.sin(b) * 2.0), ops.tanh(ops.sin(c) * 3.0),
                ops.exp(ops.sin(d) * 2.0)]
    exe = agree(fc.trace(fn, "f32[2, 3]", "f32[2, 3]"), [X, X[::-1].copy()])
    bodies = [n.attrs["body"] for n in fused_nodes(exe)]
    assert [body_ops(n) for n in fused_nodes(exe)][0] == ["sin", "mul", "tanh"]
    assert len(bodies) == 4 and bodies[0] is bodies[1]  # same ops, wiring, types and constant (CSE merged the 2.0s)
    assert len({id(b) for b in bodies}) == 3  # another constant, another op: their own bodies
