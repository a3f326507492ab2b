"""The compile-time shortcuts of issue 13 give what the long way gives.

Each test checks a shortcut against the behaviour it replaces: a Rewriter given the compile context rewires
only the compile's own nodes; the verify walk's type record is taken only for the very graph it walked;
lowering names registers only when asked, the same names a full lowering gives; a large transform leaves
what it made in the oldest collector generation but never a program's own frozen objects; fusion's
groupings and peak check over positions agree with the rules stated in ``fuse.py``.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import frame_core as fc
from frame_core import Graph, ops
from frame_core._gc import PROMOTE_ABOVE, gc_paused
from frame_core.compiler.context import CompileContext
from frame_core.compiler.passes import fuse
from frame_core.compiler.passes.infer import infer_types
from frame_core.compiler.passes.verify import verify_structure
from frame_core.compiler.rewrite import Rewriter
from frame_core.runtime import executable as executable_mod


def _ctx(**kw) -> CompileContext:
    return CompileContext(backend="cpu", registry=fc.registry(), **kw)


def _sin_exp_graph() -> Graph:
    return fc.trace(lambda x: ops.exp(ops.sin(x) * 2.0) + ops.sin(x), "f32[3]")


def test_a_rewriter_with_the_context_rewires_only_nodes_the_compile_made():
    graph = _sin_exp_graph()
    mul = next(n for n in graph.nodes if n.op == "mul")
    exp = next(n for n in graph.nodes if n.op == "exp")
    mine = {exp}  # as if an earlier stage had made exp: everything else is the caller's
    ctx = _ctx(protected=set(graph.nodes) - mine)
    rw = Rewriter(graph, ctx)
    replacement = None
    for node in graph.nodes:
        if node is mul:  # replace mul(sin, 2) by a fresh neg(sin): its readers must read the new value
            replacement = rw.emit("neg", [rw.vmap[node.inputs[0]]], {}, [node.outputs[0].type]).outputs[0]
            rw.alias(node.outputs[0], replacement)
        else:
            rw.copy(node)
    new = rw.finish()
    assert exp in new.nodes and exp.inputs == (replacement,)  # rewired in place: same node, same output
    fc.verify(new)
    assert all(n in graph.nodes or n.op == "neg" for n in new.nodes)


def test_a_rewriter_without_the_context_copies_instead():
    graph = _sin_exp_graph()
    mul = next(n for n in graph.nodes if n.op == "mul")
    exp = next(n for n in graph.nodes if n.op == "exp")
    before = exp.inputs
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node is mul:
            rw.alias(node.outputs[0], rw.emit("neg", [node.inputs[0]], {}, [node.outputs[0].type]).outputs[0])
        else:
            rw.copy(node)
    new = rw.finish()
    assert exp.inputs == before and exp not in new.nodes  # the original is intact; the new graph has a copy
    fc.verify(graph)
    fc.verify(new)


def test_keep_appends_a_prefix_and_copies_once_something_was_remapped():
    graph = _sin_exp_graph()
    rw = Rewriter(graph)
    rw.keep(graph.nodes)
    assert rw.finish().nodes == graph.nodes
    rw = Rewriter(graph)
    sin = graph.nodes[0]
    other = rw.emit("cos", [graph.inputs[0]], {}, [sin.outputs[0].type]).outputs[0]
    rw.alias(sin.outputs[0], other)
    rw.keep(graph.nodes[1:])  # they read sin: copied onto the cos
    new = rw.finish()
    assert all(sin.outputs[0] not in n.inputs for n in new.nodes)
    fc.verify(new)


def test_stage_2_trusts_stage_1_only_for_the_graph_it_walked():
    graph = _sin_exp_graph()
    ctx = _ctx()
    assert verify_structure(graph, ctx) is graph and ctx.types_checked is not None
    other = _sin_exp_graph()
    other.nodes[0].outputs[0].type = fc.TensorType("f64", (3,))  # wrong, and a graph stage 1 never saw
    with pytest.raises(fc.VerifyError, match="V6"):
        infer_types(other, ctx)
    # the same graph object with a node added since (recorded with a wrong type): looked at again
    graph.add_node("sin", [graph.inputs[0]], {}, ["f64[3]"])
    with pytest.raises(fc.VerifyError, match="V6"):
        infer_types(graph, ctx)


def test_a_type_mismatch_leaves_no_record_and_stage_2_words_it():
    graph = _sin_exp_graph()
    next(n for n in graph.nodes if n.op == "exp").outputs[0].type = fc.TensorType("f32", (1,))
    ctx = _ctx()
    verify_structure(graph, ctx)
    assert ctx.types_checked is None
    with pytest.raises(fc.VerifyError, match=r"output 0 is recorded as f32\[1\] but inference gives f32\[3\]"):
        infer_types(graph, ctx)



def test_a_node_whose_inference_fails_leaves_no_record_and_stage_2_words_it():
    # one output recorded, but inference gives no type at all (add of f32[3] and f32[4]): stage 1's memo holds
    # no single expected type for the signature, so the graph is not recorded as typed
    graph = Graph("bad")
    x, y = graph.add_input("f32[3]", "x"), graph.add_input("f32[4]", "y")
    graph.outputs.append(graph.add_node("add", [x, y], {}, ["f32[3]"]).outputs[0])
    ctx = _ctx()
    assert verify_structure(graph, ctx) is graph
    assert ctx.types_checked is None
    with pytest.raises(fc.VerifyError, match="V6"):
        infer_types(graph, ctx)


def _chain(n: int):
    def fn(x, w):
        h = x
        for i in range(n):
            h = ops.tanh(h @ w) if i % 2 else ops.sin(h) + h
        return ops.sum(h)
    return fn


def test_a_long_program_names_its_registers_when_asked_as_a_short_one_does(monkeypatch):
    training = fc.build_backward_graph(fc.trace(_chain(12), "f32[2, 3]", "f32[3, 3]"), 0, [0, 1])
    short = fc.compile(training, cache=False)
    monkeypatch.setattr(executable_mod, "CODEGEN_LIMIT", 3)  # the loop interpreter, as above 4000 calls
    long = fc.compile(training, cache=False)
    assert long.source is None and short.source is not None
    assert long.program._named is None  # compiling named nothing
    x, w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), np.full((3, 3), 0.3, np.float32)
    for a, b in zip(long.run([x, w]), short.run([x, w])):
        np.testing.assert_array_equal(a, b)
    assert long.program._named is None  # nor did running
    fields = [(i.index, i.op, i.inputs, i.outputs, i.out_buffer, i.frees) for i in long.instructions]
    assert fields == [(i.index, i.op, i.inputs, i.outputs, i.out_buffer, i.frees) for i in short.instructions]
    assert long.program.output_names == short.program.output_names
    assert list(long.program.buffers) == list(short.program.buffers)
    assert long.program.slots == short.program.slots
    report = long.profile([x, w], repeat=2)
    assert [ins for ins, _ in report.rows] == long.instructions


def _collections_after_a_pause(size: int) -> list:
    """The collections that start right after a pause in which ``size`` lists were made."""
    events: list = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            events.append(info["generation"])
    gc.collect()
    try:
        with gc_paused():
            made = [[i] for i in range(size)]
            gc.callbacks.append(seen)  # (from here: the pause's end may already allocate)
        more = [[] for _ in range(50)]  # a few allocations: a pending young collection starts here
    finally:
        gc.callbacks.remove(seen)
    del made, more
    return events


def test_a_large_transform_leaves_no_young_collection_behind():
    assert _collections_after_a_pause(PROMOTE_ABOVE + 10_000) == []  # promoted to the oldest generation at once
    assert gc.isenabled()


def test_a_programs_own_frozen_objects_stay_frozen():
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        young = _collections_after_a_pause(PROMOTE_ABOVE + 10_000)
        assert gc.get_freeze_count() == frozen  # not unfrozen behind the program's back
        assert young  # nothing promoted: the young collection walks them as usual
    finally:
        gc.unfreeze()


def _second_order(n: int = 6):
    forward = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w) * ops.sin(x)), f"f64[{n}, {n}]", f"f64[{n}, {n}]")
    first = fc.build_backward_graph(forward, 0, [0, 1])
    contracted, k = fc.add_scalar_contraction(first, 1)
    return fc.build_backward_graph(contracted, k, [0, 1])


@pytest.mark.parametrize("make", [lambda: _second_order(),
                                  lambda: fc.build_backward_graph(fc.trace(_chain(10), "f32[2, 3]", "f32[3, 3]"),
                                                                  0, [0, 1])])
def test_both_groupings_follow_their_rules(make):
    graph = fc.compile(make(), opt_level=2, disable=["fuse_elementwise"], cache=False).graph
    ctx = _ctx()
    moving = fuse.find_groups(graph, ctx)
    adjacent = fuse.find_groups(graph, ctx, contiguous=True)
    position = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    ranks = {}
    for i, n in enumerate(graph.nodes):
        if n.op != "constant":
            ranks[i] = len(ranks)
    for groups, contiguous in ((moving, False), (adjacent, True)):
        seen = set()
        for g in groups:
            assert len(g.members) > 1 and g.positions[0] == g.first
            assert [graph.nodes[i] for i in g.positions] == g.members  # positions name the members
            assert not seen & set(g.positions)
            seen |= set(g.positions)
            produced = {m.outputs[0] for m in g.members}
            for node in g.members:
                assert node.outputs[0].type is g.type
                for v in node.inputs:  # every outside input is defined before the group starts
                    if v not in produced and v.producer is not None and v.producer.op != "constant":
                        assert position[v] < g.first
            if contiguous:
                assert [ranks[i] for i in g.positions] == list(range(ranks[g.first], ranks[g.first] + len(g.members)))


def test_fusion_keeps_the_planned_peak_and_the_values():
    graph = _second_order(30)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((30, 30)), rng.standard_normal((30, 30))]
    fused = fc.compile(graph, cache=False)
    unfused = fc.compile(graph, disable=["fuse_elementwise"], cache=False)
    assert fused.peak_bytes <= unfused.peak_bytes
    for a, b in zip(fused.run(inputs), fc.compile(graph, opt_level=0, cache=False).run(inputs)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_micro_graphs_constants_are_made_once_per_transform():
    forward = fc.trace(_chain(9), "f64[2, 3]", "f64[3, 3]")  # four tanh: four `1 - y**2`
    training = fc.build_backward_graph(forward, 0, [0, 1])
    ones = [n for n in training.nodes[len(forward.nodes):] if n.op == "constant" and n.outputs[0].type.shape == ()
            and float(n.attrs["value"]) == 1.0]
    subs = [n for n in training.nodes if n.op == "sub"]
    assert len(subs) == 4 and len({n.inputs[0] for n in subs}) == 1  # one constant, read by all four
    assert len(ones) == 2  # that one and the seed
    x, w = np.linspace(-1, 1, 6).reshape(2, 3), np.full((3, 3), 0.4)
    got = fc.compile(training, cache=False).run([x, w])
    eps = 1e-6

    def loss(x):  # central difference of the traced function, by hand
        h = x
        for i in range(9):
            h = np.tanh(h @ w) if i % 2 else np.sin(h) + h
        return h.sum()
    num = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        num[idx] = (loss(x + d) - loss(x - d)) / (2 * eps)
    np.testing.assert_allclose(got[1], num, rtol=1e-6, atol=1e-8)


def test_a_dead_constant_gives_way_to_its_live_twin():
    def fn(x):
        return ops.sum(x * 2.0) + ops.sum(ops.exp(x) * 2.0)
    graph = fc.trace(fn, "f32[3]")
    exe = fc.compile(graph, disable=["fuse_elementwise"], cache=False)
    assert sum(1 for n in exe.graph.nodes if n.op == "constant") == 1
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(exe.run([x])[0], np.sum(x * 2) + np.sum(np.exp(x) * 2), rtol=1e-6)


def test_tracing_infers_again_when_an_op_gets_another_shape_function(monkeypatch):
    schema = fc.registry().get("sin")
    fc.trace(lambda x: ops.sin(x), "f32[2]")  # memoised

    def refuse(ctx):
        raise ctx.error("refused on purpose")
    monkeypatch.setattr(schema, "shape_infer", refuse)
    with pytest.raises(fc.ShapeError, match="refused on purpose"):
        fc.trace(lambda x: ops.sin(x), "f32[2]")
