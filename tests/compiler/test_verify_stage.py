"""Stage 1 (verify) checks the rules in a fast walk and asks ``check_graph`` only when something is off.

The fast walk must never wave through a graph ``check_graph`` rejects: for every broken graph below the
stage raises exactly ``check_graph``'s problems (types aside, which are stage 2's), and for valid graphs it
returns the graph itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Graph, VerifyError, ops
from frame_core.compiler.context import CompileContext
from frame_core.compiler.passes.verify import verify_structure
from frame_core.ir.graph import Node, Value
from frame_core.ir.verify import check_graph
from frame_core.ops_registry.registry import use_registry


def valid() -> Graph:
    return fc.trace(lambda x, w: ops.sum(ops.relu(x @ w + 1.0), axes=[1]), "f32[2, 3]", "f32[3, 4]")


def duplicate_input(g: Graph) -> None:
    g.inputs.append(g.inputs[0])


def produced_input(g: Graph) -> None:
    g.inputs.append(g.nodes[0].outputs[0])


def read_before_defined(g: Graph) -> None:
    g.nodes.insert(0, g.nodes.pop())  # the last node (the sum) now reads a value defined later


def foreign_value(g: Graph) -> None:
    other = Graph("other").add_input("f32[2, 3]")
    node = g.nodes[-1]
    g.nodes[-1] = replaced = Node(node.op, (other,), node.attrs)
    replaced.outputs = tuple(Value(v.type, replaced, v.index) for v in node.outputs)
    g.outputs[0] = replaced.outputs[0]


def wrong_producer(g: Graph) -> None:
    node = g.nodes[-1]
    node.outputs = (Value(node.outputs[0].type, g.nodes[0], 0),)
    g.outputs[0] = node.outputs[0]


def defined_twice(g: Graph) -> None:
    first = g.nodes[1]
    twin = Node(first.op, first.inputs, first.attrs)
    twin.outputs = first.outputs
    g.nodes.insert(2, twin)


def unknown_op(g: Graph) -> None:
    node = g.nodes[-1]
    node.op = "no_such_op"


def bad_attribute(g: Graph) -> None:
    g.nodes[-1].attrs = {"axes": [1], "keepdims": False, "colour": "red"}


def wrong_arity(g: Graph) -> None:
    node = next(n for n in g.nodes if n.op == "add")
    node.inputs = node.inputs[:1]


def foreign_output(g: Graph) -> None:
    g.outputs.append(Graph("other").add_input("f32[2]"))


BROKEN = [duplicate_input, produced_input, read_before_defined, foreign_value, wrong_producer, defined_twice,
          unknown_op, bad_attribute, wrong_arity, foreign_output]


def stage(graph: Graph) -> Graph:
    return verify_structure(graph, CompileContext(backend="cpu", registry=fc.registry()))


@pytest.mark.parametrize("corrupt", BROKEN, ids=lambda f: f.__name__)
def test_a_broken_graph_gets_check_graphs_problems(corrupt):
    g = valid()
    corrupt(g)
    expected = check_graph(g, fc.registry(), types=False)
    assert expected, "the corruption must break a rule"
    with pytest.raises(VerifyError) as info:
        stage(g)
    assert [str(p) for p in info.value.problems] == [str(p) for p in expected]


def test_valid_graphs_pass_unchanged_including_defaults_constants_and_sub_graphs():
    g = valid()
    assert stage(g) is g
    g.nodes[-1].attrs = {}  # sum's attributes all have defaults
    assert stage(g) is g
    full = fc.load_registry()  # these tests run against core + ops_basic; scan comes from frame-ops-sequence
    if "scan" not in full.schemas:
        pytest.skip("frame-ops-sequence is not installed")
    with use_registry(full):
        looped = fc.trace(lambda h, xs: ops.scan(lambda c, x: (c + x, c * 2.0), h, xs)[0], "f32[3]", "f32[4, 3]")
        assert any(isinstance(a, Graph) for n in looped.nodes for a in n.attrs.values())
        assert stage(looped) is looped
        assert not check_graph(looped, full)


def test_compile_reports_the_problems_through_the_stage():
    g = valid()
    wrong_arity(g)
    with pytest.raises(VerifyError, match="V5"):
        fc.compile(g, cache=False)
    x, w = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    np.testing.assert_allclose(fc.compile(valid(), cache=False).run([x, w])[0], np.full(2, 16.0))
