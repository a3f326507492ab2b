"""Nested sub-graphs (found in QA): a 10 kB document of fused bodies nested 40 deep never finished `verify`
(the fused op's shape inference re-verified its body, and verify walked every body again: each level doubled
the work), and graphs nested 165-196 deep loaded but failed at run time with a RecursionError. Every walk is
linear in the document, counted here (no timings); nesting past MAX_NESTING is refused up front."""

from __future__ import annotations

import json

import pytest

import frame_core as fc
from frame_core import GraphFormatError, IRError, VerifyError
from frame_core.compiler.fused import FUSED_OP
from frame_core.ir import verify as verify_module
from frame_core.ir.graph import MAX_NESTING, Graph
from frame_core.ir.printer import format_graph
from frame_core.ir.serialize import dumps, loads


def nested(depth: int, op: str = "call") -> Graph:
    """``depth`` graphs, each the body of the one node of the next (``depth - 1`` levels of bodies)."""
    body = Graph("b0")
    x = body.add_input("f32[3]")
    body.mark_output(body.add_node("neg1", [x], {}, ["f32[3]"]).outputs[0])
    for d in range(1, depth):
        g = Graph(f"b{d}")
        x = g.add_input("f32[3]")
        g.mark_output(g.add_node(op, [x], {"body": body}, ["f32[3]"]).outputs[0])
        body = g
    return body


def test_each_body_of_a_nested_fused_document_is_checked_once(monkeypatch):
    calls = []
    inner = verify_module._check_graph
    monkeypatch.setattr(verify_module, "_check_graph", lambda g, *a: calls.append(g) or inner(g, *a))
    graph = loads(dumps(nested(40, FUSED_OP)))
    problems = fc.check_graph(graph)
    assert len(calls) == 40  # was about 2**40: shape inference of each fused node checked its body once more
    assert len({id(g) for g in calls}) == 40
    # what is wrong is still reported, at every level: a fused body may not hold a fused node
    assert problems and all("not an elementwise op" in p.message for p in problems)


def test_a_body_reached_twice_reports_its_problems_under_each_path():
    body = nested(2)
    body.nodes[0].op = "no_such_op"
    g = Graph("g")
    x = g.add_input("f32[3]")
    a = g.add_node("call", [x], {"body": body}, ["f32[3]"]).outputs[0]
    b = g.add_node("call", [a], {"body": body}, ["f32[3]"]).outputs[0]
    g.mark_output(b)
    paths = [p.path for p in fc.check_graph(g)]
    assert paths == ["node 0 (call).body: ", "node 1 (call).body: "]


def _document(levels: int) -> dict:
    """A document whose top graph holds bodies nested ``levels`` deep, written as JSON directly."""
    graph: dict = {"name": "leaf", "inputs": [{"id": 0, "type": "f32[3]"}],
                   "nodes": [{"op": "neg1", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]"}]}], "outputs": [1]}
    for d in range(levels):
        graph = {"name": f"b{d}", "inputs": [{"id": 0, "type": "f32[3]"}],
                 "nodes": [{"op": "call", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]"}],
                            "attrs": {"body": {"kind": "graph", "value": graph}}}], "outputs": [1]}
    return {"format": "frame-graph", "version": 1, "graph": graph}


def test_bodies_nested_to_the_limit_load_verify_print_and_save():
    graph = loads(json.dumps(_document(MAX_NESTING)))
    fc.verify(graph)
    assert format_graph(graph).count("\n") > 3 * MAX_NESTING
    assert dumps(loads(dumps(graph))) == dumps(graph)


def test_deeper_nesting_is_refused_at_load_naming_where():
    with pytest.raises(GraphFormatError) as info:
        loads(json.dumps(_document(MAX_NESTING + 1)))
    message = str(info.value)
    assert f"nested {MAX_NESTING + 1} deep" in message and f"at most {MAX_NESTING}" in message
    assert info.value.path.startswith("$.graph.nodes[0].attrs.body.value.nodes[0]")
    assert len(message) < 2000  # one line, not a RecursionError wrapped once per level


def test_deeper_nesting_built_in_memory_is_refused_by_verify_and_every_walk():
    graph = nested(MAX_NESTING + 2)
    with pytest.raises(VerifyError, match=f"nested {MAX_NESTING + 1} deep"):
        fc.verify(graph)
    for walk in (format_graph, dumps, fc.clone_graph):
        with pytest.raises(IRError, match=f"at most {MAX_NESTING} deep"):
            walk(graph)
