"""verify: one failing case per rule V1..V8; each message names the rule, the node, the op and what differs."""

from __future__ import annotations

import pytest

from frame_core import FrameError, Graph, VerifyError
from frame_core.ir.graph import Node
from frame_core.ir.types import as_type
from frame_core.ir.verify import RULES, check_graph, verify

from .fixture_ops import example_body


def _with_outputs(g: Graph, node: Node, values) -> Node:
    node.outputs = tuple(values)
    g.nodes.append(node)
    return node


def duplicate_producer() -> Graph:
    g = Graph()
    x = g.add_input("f32[3]")
    a = g.apply("neg1", x)
    _with_outputs(g, Node("neg1", (x,), {}), [a])  # a second node claims `a`
    g.mark_output(a)
    return g


def use_before_define() -> Graph:
    g = Graph()
    x = g.add_input("f32[3]")
    a = g.apply("neg1", x)
    b = g.apply("scale", a)
    g.nodes.reverse()  # scale now reads `a` before neg1 defines it; no cycle
    g.mark_output(b)
    return g


def cycle() -> Graph:
    g = Graph()
    x = g.add_input("f32[3]")
    s = g.add_node("add2", [x, x])
    b = g.apply("neg1", s.outputs[0])
    s.inputs = (x, b)  # add2 now reads neg1's output, and neg1 reads add2's: a real cycle
    g.mark_output(b)
    return g


def foreign_input() -> Graph:
    other = Graph("other")
    g = Graph()
    g.add_input("f32[3]")
    g.mark_output(g.apply("neg1", other.add_input("f32[3]")))
    return g


def recorded(op, inputs, attrs, types) -> Graph:
    """One node recorded as given (no inference), so verify has to catch it."""
    g = Graph()
    values = [g.add_input(t) for t in inputs]
    node = g.add_node(op, values, attrs, types)
    for v in node.outputs:
        g.mark_output(v)
    return g


def foreign_output() -> Graph:
    other = Graph("other")
    g = Graph()
    g.add_input("f32[3]")
    g.mark_output(other.apply("neg1", other.add_input("f32[3]")))
    return g


def broken_body(body: Graph) -> Graph:
    g = Graph()
    x = g.add_input("f32[3]")
    node = g.add_node("call", [x], {"body": body}, ["f32[3]"])
    g.mark_output(node.outputs[0])
    return g


def body_with_unknown_op() -> Graph:
    b = Graph("body")
    x = b.add_input("f32[3]")
    b.mark_output(b.add_node("scal", [x], {}, ["f32[3]"]).outputs[0])
    return b


def body_reading_outer_value() -> Graph:
    outer = Graph("outer")
    b = Graph("body")
    b.add_input("f32[3]")
    b.mark_output(b.apply("neg1", outer.add_input("f32[3]")))
    return b


def _inner_call(body: Graph) -> Graph:
    mid = Graph("mid")
    x = mid.add_input("f32[3]")
    mid.mark_output(mid.add_node("call", [x], {"body": body}, ["f32[3]"]).outputs[0])
    return mid


# (case id, graph builder, rule, node index or None, op or None, fragments of the message)
CASES = [
    ("V1-duplicate-producer", duplicate_producer, "V1", 1, "neg1", ["does not record this node", "it records a neg1 node, index 0",
                                                                       "already defined by node 0 (neg1)"]),
    ("V1-duplicate-input", lambda: _dup_input(), "V1", None, None, ["graph input 1", "appears twice"]),
    ("V2-use-before-define", use_before_define, "V2", 0, "scale", ["produced by node 1 (neg1)", "topological order"]),
    ("V2-cycle", cycle, "V2", 0, "add2", ["input 1", "node 1 (neg1)", "cycle"]),
    ("V2-foreign-value", foreign_input, "V2", 0, "neg1", ["input 0", "not defined in this graph"]),
    ("V3-unknown-op", lambda: recorded("scal", ["f32[3]"], {}, ["f32[3]"]), "V3", 0, "scal",
     ["unknown op 'scal'", "did you mean 'scale'"]),
    ("V4-wrong-kind", lambda: recorded("scale", ["f32[3]"], {"factor": "big"}, ["f32[3]"]), "V4", 0, "scale",
     ["'factor'", "must be a float", "'big'"]),
    ("V4-unknown-attr", lambda: recorded("scale", ["f32[3]"], {"factor": 1.0, "bogus": 1}, ["f32[3]"]), "V4", 0,
     "scale", ["unknown attribute 'bogus'", "its attributes: factor"]),
    ("V4-missing-attr", lambda: recorded("cast", ["f32[3]"], {}, ["f64[3]"]), "V4", 0, "cast",
     ["'dtype'", "required"]),
    ("V4-tensor-kind", lambda: recorded("attrs_all", ["f32[3]"], dict(_ALL, t="not a tensor"), ["f32[3]"]), "V4", 0,
     "attrs_all", ["'t'", "numpy array"]),
    ("V5-input-count", lambda: recorded("add2", ["f32[3]"], {}, ["f32[3]"]), "V5", 0, "add2",
     ["takes 2 inputs (a, b)", "got 1"]),
    ("V5-output-count", lambda: recorded("split2", ["f32[4]"], {}, ["f32[2]"]), "V5", 0, "split2",
     ["has 1 outputs", "gives 2"]),
    ("V6-recorded-type", lambda: recorded("neg1", ["f32[3]"], {}, ["f64[3]"]), "V6", 0, "neg1",
     ["recorded as f64[3]", "inference gives f32[3]"]),
    ("V6-inference-rejects", lambda: recorded("add2", ["f32[3]", "f64[3]"], {}, ["f32[3]"]), "V6", 0, "add2",
     ["shape inference rejects", "f32[3] and f64[3]"]),
    ("V7-foreign-output", foreign_output, "V7", None, "neg1", ["output 0 (f32[3])", "of a neg1 node", "not in this graph"]),
    ("V8-unknown-op-in-body", lambda: broken_body(body_with_unknown_op()), "V8", 0, "scal",
     ["node 0 (call).body", "V3", "'scal'"]),
    ("V8-body-not-closed", lambda: broken_body(body_reading_outer_value()), "V8", 0, "neg1",
     ["node 0 (call).body", "V2", "not defined in this graph"]),
    ("V8-nested-twice", lambda: broken_body(_inner_call(body_with_unknown_op())), "V8", 0, "scal",
     ["node 0 (call).body: node 0 (call).body", ": V3: unknown op 'scal'"]),
]

_ALL = {"i": 1, "f": 0.5, "b": True, "s": "s", "ints": [1], "floats": [1.0], "strs": ["a"], "dt": "f32", "shp": [2]}


def _dup_input() -> Graph:
    g = Graph()
    x = g.add_input("f32[3]")
    g.inputs.append(x)
    g.mark_output(x)
    return g


@pytest.mark.parametrize("case, build, rule, index, op, fragments", CASES, ids=[c[0] for c in CASES])
def test_each_rule_has_a_failing_case_whose_message_says_rule_node_op(case, build, rule, index, op, fragments):
    graph = build()
    with pytest.raises(VerifyError) as info:
        verify(graph)
    message = str(info.value)
    problems = [p for p in info.value.problems if p.rule == rule]
    assert problems, f"no {rule} problem in:\n{message}"
    assert f"{rule} {RULES[rule]}" in message
    if index is not None:
        assert f"node {index} ({op})" in message
        assert any(p.node_index == index and p.op == op for p in problems)
    elif op is not None:
        assert op in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from:\n{message}"
    assert "V8: V" not in message  # nested sub-graphs name the innermost rule once



@pytest.mark.parametrize("case, build, rule, index, op, fragments", CASES, ids=[c[0] for c in CASES])
def test_each_failing_case_reports_the_same_inside_the_audits_memos(case, build, rule, index, op, fragments):
    """The closure audit verifies inside clean_node_memo and inference_memo, where a plain node is first asked as
    one infer_node question: a node that fails it is checked rule by rule, with the very problems verify gives
    outside the memos, also when its twin was found clean just before and when it comes again."""
    from frame_core.ir.verify import clean_node_memo
    from frame_core.ops_registry.schema import inference_memo

    expected = [str(p) for p in check_graph(build())]
    assert any(p.startswith(rule) for p in expected)
    with inference_memo(), clean_node_memo():
        first = [str(p) for p in check_graph(build())]
        again = [str(p) for p in check_graph(build())]
    assert first == again == expected


def test_verify_error_is_a_frame_error_holding_problem_objects():
    with pytest.raises(FrameError) as info:
        verify(recorded("neg1", ["f32[3]"], {}, ["f64[3]"]))
    assert isinstance(info.value, VerifyError)
    (problem,) = info.value.problems
    assert (problem.rule, problem.node_index, problem.op) == ("V6", 0, "neg1")


def test_check_graph_returns_every_problem_without_raising():
    g = Graph()
    x = g.add_input("f32[3]")
    g.add_node("scal", [x], {}, ["f32[3]"])
    g.add_node("neg1", [x], {}, ["f64[3]"])
    g.mark_output(Graph().add_input("f32[3]"))
    assert [p.rule for p in check_graph(g)] == ["V3", "V6", "V7"]


def test_many_problems_are_listed_up_to_twenty_then_counted():
    g = Graph()
    x = g.add_input("f32[3]")
    for _ in range(25):
        g.add_node("neg1", [x], {}, ["f64[3]"])
    with pytest.raises(VerifyError) as info:
        verify(g)
    message = str(info.value)
    assert "25 problems" in message and "and 5 more" in message
    assert message.count("V6 ") == 20


@pytest.mark.parametrize("build", [
    lambda: Graph("empty"),
    lambda: recorded("neg1", ["f32[3]"], {}, ["f32[3]"]),
    lambda: broken_body(example_body()),
    lambda: recorded("attrs_all", ["f32[3]"], _ALL, ["f32[3]"]),
])
def test_valid_graphs_pass(build):
    assert check_graph(build()) == []
    verify(build())


class _CountingSource:
    """The default schema source, counting lookups (how often verify checks a node against its schema)."""

    def __init__(self):
        from frame_core.ir.schemas import default_source

        self.inner, self.lookups = default_source(), 0

    def lookup(self, op):
        self.lookups += 1
        return self.inner.lookup(op)

    def resolve(self, op):
        return self.inner.resolve(op)


def test_clean_node_memo_checks_each_distinct_clean_node_once_and_every_broken_one_always():
    from frame_core.ir.verify import clean_node_memo

    source = _CountingSource()
    clean = [Graph() for _ in range(3)]
    for g in clean:
        g.mark_output(g.apply("scale", g.apply("neg1", g.add_input("f32[3]"))))
    broken = recorded("neg1", ["f32[3]"], {}, ["f32[4]"])  # recorded with a type inference does not give (V6)
    twin = recorded("neg1", ["f32[3]"], {}, ["f32[3]"])  # the same node recorded with the right type
    expected = [[str(p) for p in check_graph(g, source)] for g in [*clean, broken, twin, broken]]
    plain = source.lookups
    source.lookups = 0
    with clean_node_memo():
        got = [[str(p) for p in check_graph(g, source)] for g in [*clean, broken, twin, broken]]
    assert got == expected and any("V6" in p for p in got[3]) and got[3] == got[5]
    assert plain == 3 * 2 + 3  # every node, every time
    assert source.lookups == 2 + 2  # neg1 and scale once (the twin is the clean neg1); the broken one both times


def test_messages_number_unnamed_values_as_before():
    """verify names values only when it reports a problem (most graphs have none): the graph inputs take the
    first numbers, in order, then each other value as a message first names it (pinned messages)."""
    from frame_core.ir.graph import Value

    t = as_type("f32[2]")
    g = Graph("g")
    a, _, c = g.add_input(t), g.add_input(t, "b"), g.add_input(t)
    foreign = Graph("o").add_input(t)
    n1 = g.add_node("add2", [a, foreign])
    n2 = g.add_node("add2", [n1.outputs[0], c])
    g.inputs.append(a)  # a duplicate input
    g.inputs.append(Value(t, n2, 0))  # an input that claims a producer
    n3 = Node("neg1", (n2.outputs[0],), {})
    n3.outputs = (n2.outputs[0],)  # another node's output
    g.nodes.append(n3)
    later = Node("neg1", (c,), {})
    later.outputs = (Value(t, later, 0),)
    n4 = Node("neg1", (later.outputs[0],), {})
    n4.outputs = (Value(t, n4, 0),)
    g.nodes += [n4, later]  # reads a value of a later node
    g.mark_output(foreign)
    assert [str(p) for p in check_graph(g)] == [
        "V1 SSA: one producer per value, distinct graph inputs: graph input 3 (%0) appears twice in the input list",
        "V1 SSA: one producer per value, distinct graph inputs: graph input 4 (%3) claims to be produced by a add2 node",
        "V2 defined before use / acyclic: node 0 (add2): input 1 (%4: f32[2]) is not defined in this graph (a value "
        "from another graph or a removed node)",
        "V1 SSA: one producer per value, distinct graph inputs: node 2 (neg1): output 0 (%5) does not record this "
        "node as its producer at index 0 (it records a add2 node, index 0)",
        "V1 SSA: one producer per value, distinct graph inputs: node 2 (neg1): output 0 (%5) is already defined by "
        "node 1 (add2); a value has exactly one producer",
        "V2 defined before use / acyclic: node 3 (neg1): input 0 (%6) is produced by node 4 (neg1), which comes later; "
        "nodes must be in topological order",
        "V7 outputs belong to the graph: output 0 (f32[2]) must be a value of this graph, but it is an input of "
        "another graph; mark values of this graph only",
    ]
