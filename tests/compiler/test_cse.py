"""Stage 5, common-subexpression elimination: same op, same inputs, same attributes -> one node."""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_core.frontend.trace import apply

from .fixture_pack import RECORDED

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [3.0, -2.0, 1.0]], np.float32)
Y = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0], [2.0, 2.0, -3.0]], np.float32)


def cse_only(graph):
    """Compile with CSE as the only optional stage that changes node counts (and check the values)."""
    exe = fc.compile(graph, disable=["fold_constants", "simplify_algebra", "fuse_elementwise"], cache=False)
    want = fc.compile(graph, opt_level=0, cache=False).run([X, Y][: len(graph.inputs)])
    for got, ref in zip(exe.run([X, Y][: len(graph.inputs)]), want):
        np.testing.assert_array_equal(got, ref)
    return [n.op for n in exe.graph.nodes]


def test_identical_nodes_are_merged_and_the_merge_cascades():
    found = cse_only(fc.trace(lambda x: [ops.exp(ops.sin(x)), ops.exp(ops.sin(x))], "f32[3, 3]"))
    assert found == ["sin", "exp"]


def test_commutative_ops_merge_with_swapped_inputs_and_other_ops_do_not():
    assert cse_only(fc.trace(lambda x, y: [x + y, y + x], "f32[3, 3]", "f32[3, 3]")) == ["add"]
    assert cse_only(fc.trace(lambda x, y: [x * y, y * x], "f32[3, 3]", "f32[3, 3]")) == ["mul"]
    assert cse_only(fc.trace(lambda x, y: [x - y, y - x], "f32[3, 3]", "f32[3, 3]")) == ["sub", "sub"]
    assert cse_only(fc.trace(lambda x, y: [x @ y, y @ x], "f32[3, 3]", "f32[3, 3]")) == ["matmul", "matmul"]


def test_nodes_with_different_attributes_are_not_merged():
    def f(x):
        # equal output types f32[3]; attributes compare as written (perm None and [1, 0] are not merged)
        return [ops.sum(x, axes=[0]), ops.sum(x, axes=[1]), ops.sum(x, axes=[0]), ops.mean(x, axes=[0]),
                ops.transpose(x, perm=[1, 0]), ops.transpose(x, perm=[0, 1]), ops.transpose(x, perm=[1, 0])]
    found = cse_only(fc.trace(f, "f32[3, 3]"))
    assert found.count("sum") == 2 and found.count("mean") == 1
    assert found.count("transpose") == 2


def test_side_effect_nodes_are_never_merged(fixture_registry):
    graph = fc.trace(lambda x: [apply("record", x), apply("record", x)], "f32[3, 3]")
    exe = fc.compile(graph, cache=False)
    assert [n.op for n in exe.graph.nodes] == ["record", "record"]
    exe.run([X])
    assert len(RECORDED) == 2


def test_constants_are_merged_by_value_dtype_and_shape():
    def f(x):
        a = fc.constant(np.array([1.0, 2.0, 3.0], np.float32))
        b = fc.constant(np.array([1.0, 2.0, 3.0], np.float32))   # same value: merged with a
        c = fc.constant(np.array([1.0, 2.0, 4.0], np.float32))   # other value
        return [x * a, x * b, x * c]
    found = cse_only(fc.trace(f, "f32[3, 3]"))
    assert found.count("constant") == 2 and found.count("mul") == 2


def test_constants_of_equal_bytes_but_different_rank_are_not_merged():
    graph = fc.Graph("ranks")
    graph.mark_output(graph.constant(np.float32(0.0)))
    graph.mark_output(graph.constant(np.zeros(1, np.float32)))
    graph.mark_output(graph.constant(np.zeros((1, 1), np.float32)))
    graph.mark_output(graph.constant(np.float64(0.0)))
    outs = fc.compile(graph, cache=False).run([])
    assert [(o.dtype, o.shape) for o in outs] == [(np.float32, ()), (np.float32, (1,)), (np.float32, (1, 1)),
                                                  (np.float64, ())]


def test_merged_gradient_graph_values_are_unchanged():
    forward = fc.trace(lambda x, y: ops.sum(ops.tanh(x * y) + ops.tanh(y * x) + ops.square(x * y)), "f32[3, 3]",
                       "f32[3, 3]")
    training = fc.build_backward_graph(forward, 0, [0, 1])
    found = cse_only(training)
    assert found.count("tanh") == 1


def _constant_twins(earlier_read_by: str):
    """x * c2 with an earlier twin c1 of c2 that nothing reads, only a dead node reads, or a live node reads;
    returns the constant the multiply by c2 reads after CSE, and c1, c2."""
    from frame_core.compiler.context import CompileContext
    from frame_core.compiler.passes.cse import eliminate_common_subexpressions

    graph = fc.Graph("twins")
    x = graph.add_input("f32[3]")
    c1 = graph.constant(np.array([2.0, 3.0, 4.0], np.float32))
    if earlier_read_by == "dead":
        graph.add_node("add", [x, c1], {}, ["f32[3]"])  # read by a node no output needs
    elif earlier_read_by == "live":
        graph.mark_output(graph.add_node("add", [x, c1], {}, ["f32[3]"]).outputs[0])
    c2 = graph.constant(np.array([2.0, 3.0, 4.0], np.float32))
    product = graph.add_node("mul", [x, c2], {}, ["f32[3]"])
    graph.mark_output(product.outputs[0])
    ctx = CompileContext(backend="cpu", registry=fc.registry())
    ctx.protected = set(graph.nodes)
    result = eliminate_common_subexpressions(graph, ctx)
    mul = next(n for n in result.nodes if n.op == "mul")
    return mul.inputs[1], c1, c2


def test_a_constant_twin_nothing_live_reads_gives_way_to_the_later_one():
    # unread, or read only by a dead node: the later twin is kept (its readers need no rewiring); read by a
    # live node: the later twin merges into it (the cheap unread test and the liveness walk agree)
    for read_by, kept in (("nothing", "later"), ("dead", "later"), ("live", "earlier")):
        read, c1, c2 = _constant_twins(read_by)
        assert read is (c2 if kept == "later" else c1), read_by
