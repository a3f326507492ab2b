"""Text printer and Graphviz DOT export."""

from __future__ import annotations

import re

import numpy as np
import pytest

from frame_core import Graph
from frame_core.ir.dot import to_dot
from frame_core.ir.printer import format_graph

from .fixture_ops import example_body
from .test_verify import cycle, foreign_output


def printed_graph() -> Graph:
    g = Graph("small")
    x = g.add_input("f32[3]", "x")
    y = g.add_input("f32[3]", "y")
    s = g.apply("add2", x, y)
    t = g.apply("scale", s, factor=3.0)
    c = g.apply("call", t, body=example_body())
    g.constant(np.array([1.5, np.nan], np.float32))
    g.constant(np.zeros((3, 3)))
    g.apply("attrs_all", x, i=1, f=0.5, b=True, s="q", ints=[1, 2], floats=[1.0], strs=["a"], dt="f32", shp=[2],
            t=np.arange(3, dtype=np.int64))
    g.mark_output(t)
    g.mark_output(s)
    g.mark_output(c)
    return g


EXPECTED = """\
graph small(%x: f32[3], %y: f32[3]) {
  %0 = add2(%x, %y) : f32[3]
  %1 = scale(%0) {factor=3.0} : f32[3]
  %2 = call(%1) {body=<graph body>} : f32[3]
    graph body(%x: f32[3]) {
      %0 = neg1(%x) : f32[3]
      return %0
    }
  %3 = constant() {value=[1.5, nan] : f32[2]} : f32[2]
  %4 = constant() {value=<f64[3, 3] tensor>} : f64[3, 3]
  %5 = attrs_all(%x) {i=1, f=0.5, b=true, s='q', ints=[1, 2], floats=[1.0], strs=['a'], dt=f32, shp=[2], \
t=[0, 1, 2] : i64[3], opt=7} : f32[3]
  return %1, %0, %2
}"""


def test_printer_output_is_exactly_the_documented_text_form():
    g = printed_graph()
    assert format_graph(g) == EXPECTED
    assert str(g) == EXPECTED


def test_printer_names_values_uniquely():
    g = Graph("names")
    a = g.add_input("f32[2]", "dup")
    b = g.add_input("f32[2]", "dup")  # a name used twice falls back to numbers
    c = g.add_input("f32[2]", "0")  # so does a name that looks like a number
    g.mark_output(g.apply("add2", a, b))
    g.mark_output(c)
    text = format_graph(g)
    params = re.findall(r"(%\w+): f32\[2\]", text.splitlines()[0])
    assert len(params) == 3 and len(set(params)) == 3 and "%dup" not in text
    (node_line,) = [line for line in text.splitlines() if "add2" in line]
    assert node_line.strip().startswith("%") and f"add2({params[0]}, {params[1]})" in node_line
    result = node_line.split(" =")[0].strip()
    assert result not in params and text.splitlines()[-2].strip() == f"return {result}, {params[2]}"


def test_printer_marks_values_of_another_graph_instead_of_crashing():
    assert "%<undefined f32[3]>" in format_graph(foreign_output())


# -- DOT ------------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r'\s*(?:(->)|([{}\[\];=,])|"((?:[^"\\]|\\.)*)"|([A-Za-z0-9_.#]+))', re.S)


def parse_dot(text: str) -> dict:
    """A strict reader for the DOT subset ``to_dot`` writes: returns declared nodes, edges and cluster names.

    Raises ``AssertionError`` on anything malformed (unbalanced braces, unterminated strings, stray tokens).
    """
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        assert m and m.end() > pos, f"cannot read DOT at {text[pos:pos + 40]!r}"
        arrow, punct, quoted, ident = m.groups()
        tokens.append(("->", None) if arrow else (punct, None) if punct else ("ID", quoted if quoted is not None else ident))
        pos = m.end()
    out = {"nodes": set(), "edges": [], "clusters": []}
    i = 0

    def take(kind: str) -> str | None:
        nonlocal i
        assert i < len(tokens) and tokens[i][0] == kind, f"expected {kind} at token {i}: {tokens[i:i + 3]}"
        i += 1
        return tokens[i - 1][1]

    def attrs() -> None:
        take("[")
        while tokens[i][0] != "]":
            take("ID")
            take("=")
            take("ID")
            if tokens[i][0] in (",", ";"):
                take(tokens[i][0])
        take("]")

    def stmts() -> None:
        nonlocal i
        take("{")
        while tokens[i][0] != "}":
            if tokens[i] == ("ID", "subgraph"):
                i += 1
                out["clusters"].append(take("ID"))
                stmts()
            else:
                first = take("ID")
                if first in ("node", "edge", "graph") and tokens[i][0] == "[":
                    attrs()
                elif tokens[i][0] == "=":
                    take("=")
                    take("ID")
                elif tokens[i][0] == "->":
                    take("->")
                    out["edges"].append((first, take("ID")))
                    if tokens[i][0] == "[":
                        attrs()
                else:
                    out["nodes"].add(first)
                    if tokens[i][0] == "[":
                        attrs()
            if tokens[i][0] == ";":
                take(";")
        take("}")

    assert tokens[0] == ("ID", "digraph")
    i = 1
    take("ID")
    stmts()
    assert i == len(tokens), "text after the closing brace"
    return out


def test_dot_is_well_formed_and_every_edge_joins_declared_nodes():
    dot = parse_dot(to_dot(printed_graph()))
    assert len(dot["nodes"]) == 2 + 6 + 3 + (1 + 1 + 1)  # inputs, nodes, outputs; the body's input, node, output
    for src, dst in dot["edges"]:
        assert src in dot["nodes"] and dst in dot["nodes"]
    assert ("g0_n0", "g0_n1") in dot["edges"]


def test_dot_draws_sub_graphs_as_nested_clusters():
    g = Graph("outer")
    x = g.add_input("f32[3]")
    mid = Graph("mid")
    m = mid.add_input("f32[3]")
    mid.mark_output(mid.apply("call", m, body=example_body()))
    g.mark_output(g.apply("call", x, body=mid))
    text = to_dot(g)
    dot = parse_dot(text)
    assert len(dot["clusters"]) == 2 and all(c.startswith("cluster_") for c in dot["clusters"])
    assert 'label="call.body"' in text
    # the inner cluster is inside the outer one
    outer_at, inner_at = (text.index(f'subgraph "{c}"') for c in dot["clusters"])
    assert outer_at < inner_at < text.rindex("  }")


@pytest.mark.parametrize("name, text", [
    ("quotes", 'say "hi"'),
    ("backslash", "C:\\dir\\"),
    ("newline", "two\nlines"),
    ("long with escapes at the cut", "\\" * 200),
    ("long with escapes, other parity", "x" + "\\" * 200),
    ("long quotes at the cut", '"' * 200),
    ("long quotes, other parity", 'x"' + '"' * 200),
])
def test_dot_escapes_names_and_attributes(name, text):
    g = Graph(text)
    x = g.add_input("f32[3]", text)
    g.mark_output(g.apply("attrs_all", x, i=1, f=0.5, b=True, s=text, ints=[1], floats=[1.0], strs=[text],
                          dt="f32", shp=[2]))
    parse_dot(to_dot(g))


@pytest.mark.parametrize("build", [cycle, foreign_output], ids=["cycle", "foreign-output"])
def test_dot_of_an_invalid_graph_is_still_readable(build):
    parse_dot(to_dot(build()))


def test_dot_edges_from_a_node_of_several_outputs_say_which_output():
    # a loop's final states and its stacked rows leave one box, often of one type: say which edge is which
    g = Graph("g")
    x = g.add_input("f32[3]")
    a, b, c = g.add_node("three_outputs", [x], {}, ["f32[3]", "f32[3]", "f32[2, 3]"]).outputs
    g.mark_output(a)
    g.mark_output(g.add_node("neg", [b], {}, ["f32[3]"]).outputs[0])
    g.mark_output(c)
    text = to_dot(g)
    labels = sorted(line.split('label="')[1].split('"')[0] for line in text.splitlines()
                    if line.strip().startswith("g0_n0 -> "))
    assert labels == ["#0 f32[3]", "#1 f32[3]", "#2 f32[2, 3]"]
    assert 'g0_in0 -> g0_n0 [label="f32[3]"]' in text and 'g0_n1 -> g0_out1 [label="f32[3]"]' in text


def test_a_body_holding_its_own_graph_is_a_named_error_for_every_walker():
    """A hand-built body that holds its enclosing graph (directly or two levels down) once ended printing,
    saving, DOT and cloning with a RecursionError; each now names the cycle as compile and verify do."""
    from frame_core import IRError, clone_graph, dumps

    outer = printed_graph()
    inner = example_body()
    for node in outer.nodes:
        if node.op == "call":
            node.attrs["body"] = inner
    inner_call = inner.apply("call", inner.inputs[0], body=example_body())
    inner_call.producer.attrs["body"] = outer  # outer -> inner -> outer
    inner.mark_output(inner_call)
    for walk in (format_graph, to_dot, dumps, clone_graph):
        with pytest.raises(IRError, match="graph 'small' holds itself through a sub-graph attribute"):
            walk(outer)
    inner.nodes.pop(), inner.outputs.pop()  # no cycle: every walker works again (the guard leaves no state)
    for walk in (format_graph, to_dot, dumps, clone_graph):
        walk(outer)
