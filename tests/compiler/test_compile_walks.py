"""The compile's per-node shortcuts give what their rules say (issue 21: fewer walks at 100k nodes).

Each test states the rule a shortcut stands for, computed here the plain way, and compares: the set of ops that
verify's and bind_shapes' walks hand on, the calls, releases and steps of a lowered program, constants met after
folding's first candidate, and the outer-product test answered once per signature.
"""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_core.compiler.context import CompileContext
from frame_core.compiler.passes.dce import eliminate_dead_nodes
from frame_core.compiler.passes.verify import verify_structure
from frame_core.compiler.passes.lower import argument_slots
from ._graphs import chain_training


def _mean_mlp() -> fc.Graph:  # a mean's 1/N (a like op lowered to a constant) and broadcast gradients
    def loss(x, w, b):
        return ops.mean(ops.tanh(x @ w + b) ** 2)
    return fc.build_backward_graph(fc.trace(loss, "f32[5, 3]", "f32[3, 4]", "f32[4]"), 0, [1, 2])


def test_the_ops_verify_bind_shapes_and_dce_hand_on_are_the_graphs_own():
    reg = fc.registry()
    bind = next(p.fn for p in reg.passes if p.name == "bind_shapes")
    for graph in (chain_training(6), _mean_mlp()):
        ctx = CompileContext(backend="cpu", registry=reg)
        ctx.protected = set(graph.nodes)
        assert verify_structure(graph, ctx) is graph
        assert ctx.ops(graph) == {n.op for n in graph.nodes}
        bound = bind(graph, ctx)
        assert bound is not graph and any(n.op.endswith("_like_internal") for n in graph.nodes)
        assert ctx.ops(bound) == {n.op for n in bound.nodes}
        assert not any(op.endswith("_like_internal") for op in ctx.ops(bound))
    unused = fc.trace(lambda x: [ops.exp(x), x * 2.0][1], "f32[3]")  # exp is dead: its op leaves the set
    ctx = CompileContext(backend="cpu", registry=reg)
    ctx.protected = set(unused.nodes)
    live = eliminate_dead_nodes(unused, ctx)
    assert ctx.ops(live) == {n.op for n in live.nodes} and "exp" not in ctx.ops(live) and len(live.nodes) == 2


def test_a_lowered_program_calls_releases_and_steps_as_its_rules_say():
    x, w = np.full((4, 8), 0.1, np.float32), np.eye(8, dtype=np.float32) * 0.5
    for graph, level in ((chain_training(40), 0), (chain_training(40), 2), (_mean_mlp(), 2)):
        exe = fc.compile(graph, opt_level=level, cache=False)
        prog, plan, g = exe.program, exe.plan, exe.graph
        # registers: inputs, then per node its outputs and its planned buffer (constants: one each)
        slot = {v: i for i, v in enumerate(g.inputs)}
        n = len(slot)
        rows = iter(prog.rows)
        steps, _ = exe._steps()
        k = 0
        for index, node in enumerate(g.nodes):
            for v in node.outputs:
                slot[v] = n
                n += 1
            if node.op == "constant":
                continue
            row = next(rows)
            kernel, arguments, out, single, frees = row[4]
            buffered = any(v in plan.buffer_of for v in node.outputs)
            assert row[0] == index and row[1] is node and kernel is row[2] and (row[5] is not None) == buffered
            args = tuple(slot[v] for v in node.inputs) + ((n,) if buffered else ())
            assert argument_slots(arguments) == args and (type(arguments) is int) == (len(args) == 1)
            if len(args) > 1:
                assert arguments(list(range(n + 1))) == args
            assert out == (slot[node.outputs[0]] if len(node.outputs) == 1 else tuple(slot[v] for v in node.outputs))
            assert single == (len(node.outputs) == 1)
            n += buffered
            # released after the call: the unplanned node outputs last read here, in the order of last_use
            dying = [v for v, i in plan.last_use.items() if i == index and v not in plan.buffer_of
                     and v.producer is not None and v.producer.op != "constant"]
            assert list(row[6]) == dying and frees == tuple(slot[v] for v in dying)
            assert steps[k] is row[4]
            k += 1
        assert next(rows, None) is None and k == len(steps) and n == prog.n_slots
        inputs = [x, w] if len(g.inputs) == 2 else [np.full(v.type.shape, 0.3, np.float32) for v in g.inputs]
        np.testing.assert_array_equal(exe.run(inputs)[0], fc.compile(graph, opt_level=0, cache=False).run(inputs)[0])


def test_constants_after_the_first_fold_candidate_still_fold():
    def fn(x):
        early = ops.exp(fc.constant(np.float32(0.5)))  # the first candidate
        late = ops.sin(fc.constant(np.full((2,), 0.25, np.float32)))  # a constant met after it, read by a fold
        return x * early + late
    graph = fc.trace(fn, "f32[2]")
    exe = fc.compile(graph, disable=["fuse_elementwise"], cache=False)
    assert {"exp", "sin"}.isdisjoint(n.op for n in exe.graph.nodes)
    np.testing.assert_array_equal(exe.run([np.ones(2, np.float32)])[0],
                                  fc.compile(graph, opt_level=0, cache=False).run([np.ones(2, np.float32)])[0])


def test_the_outer_product_test_is_per_signature_not_per_graph():
    def fn(a, b, c):  # two outer products of one signature, and a matmul of the same op that is none
        return (a @ b) + (ops.sin(a) @ b), c @ ops.transpose(c)
    graph = fc.trace(fn, "f32[3, 1]", "f32[1, 4]", "f32[3, 2]")
    exe = fc.compile(graph, disable=["fuse_elementwise"], cache=False)
    assert [n.op for n in exe.graph.nodes].count("matmul") == 1
    args = [np.arange(3, dtype=np.float32).reshape(3, 1), np.ones((1, 4), np.float32), np.ones((3, 2), np.float32)]
    for got, want in zip(exe.run(args), fc.compile(graph, opt_level=0, cache=False).run(args)):
        np.testing.assert_array_equal(got, want)


def test_simplify_finds_an_expansion_of_ones_that_it_copied():
    def fn(x):
        ones = fc.constant(np.ones(4, np.float32))
        same = ones * fc.constant(np.float32(1.0))  # -> ones (x * 1), so the expansion below is copied onto it
        return x * ops.broadcast_to(same, shape=(3, 4))  # then x * (ones expanded) -> x
    graph = fc.trace(fn, "f32[3, 4]")
    exe = fc.compile(graph, disable=["fold_constants", "fuse_elementwise", "eliminate_dead_nodes"], cache=False)
    assert [n.op for n in exe.graph.nodes if n.op == "mul"] == []
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    np.testing.assert_array_equal(exe.run([x])[0], x)
