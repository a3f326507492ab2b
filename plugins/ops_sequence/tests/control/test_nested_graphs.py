"""Nested graphs through the IR tools: JSON round trip, the printer, DOT clusters, ``frame graph show/dot``,
verify, and the closure order of a concrete graph (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import frame_core as fc
from frame_core import ops
from frame_core.ir.keys import graph_key
from frame_core.ops_registry.closure import graph_order, run_closure_audit


def nested(x, w):  # noqa: ANN001, ANN201 - traced tensors
    """A loop inside an if inside a scan, reading w from two levels out."""
    def step(h, row):  # noqa: ANN001, ANN202
        def deep(a):  # noqa: ANN001, ANN202
            return ops.loop(lambda i, s: (ops.less(ops.sum(s), 2.0), ops.tanh(s * w + row)), 3, True, a)
        return ops.if_else(ops.less(ops.sum(row), 0.0), deep, lambda a: ops.sin(a) * w, h), h * row
    h, ys = ops.scan(step, x, ops.reshape(x, shape=(1, 3)) * np.ones((4, 1)))
    return ops.sum(h) + ops.sum(ys)


@pytest.fixture(scope="module")
def graph():
    return fc.trace(nested, "f64[3]", "f64[3]")


def _bodies(g: fc.Graph) -> int:
    return sum(1 + _bodies(a) for n in g.nodes for a in n.attrs.values() if isinstance(a, fc.Graph))


def test_captures_are_chained_through_every_level(graph):
    scan = next(n for n in graph.nodes if n.op == "scan")
    assert scan.inputs[-1] is graph.inputs[1]  # w enters the scan as an invariant...
    step = scan.attrs["body"]
    branch = next(n for n in step.nodes if n.op == "if_else")
    assert step.inputs[-1] in branch.inputs  # ...the if_else as an input...
    loop = next(n for n in branch.attrs["then_branch"].nodes if n.op == "loop")
    assert branch.attrs["then_branch"].inputs[-1] in loop.inputs  # ...and the loop as an invariant
    assert _bodies(graph) == 4


def test_json_round_trip_keeps_structure_and_results(graph):
    loaded = fc.loads(fc.dumps(graph))
    assert graph_key(loaded) == graph_key(graph)
    fc.verify(loaded)
    x, w = np.array([0.3, -0.2, 0.1]), np.array([0.9, 1.1, 0.7])
    np.testing.assert_array_equal(fc.compile(loaded).run([x, w])[0], fc.compile(graph).run([x, w])[0])
    training = fc.build_backward_graph(graph, 0, [0, 1])
    again = fc.loads(fc.dumps(training))
    for a, b in zip(fc.compile(again).run([x, w]), fc.compile(training).run([x, w])):
        np.testing.assert_array_equal(a, b)


def test_printer_shows_bodies_nested_under_their_node(graph):
    text = fc.format_graph(graph)
    lines = text.splitlines()
    scan_line = next(i for i, line in enumerate(lines) if " = scan(" in line)
    assert lines[scan_line + 1].startswith("    graph body(")
    assert "graph then_branch(" in text and "graph else_branch(" in text
    loop_line = next(line for line in lines if " = loop(" in line)
    assert loop_line.startswith(" " * 10) and not loop_line.startswith(" " * 11)  # three bodies deep


def test_dot_draws_each_body_as_a_cluster(graph):
    dot = fc.to_dot(graph)
    assert dot.count("subgraph \"cluster_") == _bodies(graph) == 4
    assert 'label="scan.body"' in dot and 'label="if_else.then_branch"' in dot and 'label="loop.body"' in dot
    assert dot.count("{") == dot.count("}")


def installed_only(c, x, w):  # noqa: ANN001, ANN201 - traced tensors
    """Nested like ``nested`` but with installed ops only (the CLI loads the installed packs)."""
    def step(h, row):  # noqa: ANN001, ANN202
        deep = lambda a: ops.loop(lambda i, s: (True, ops.tanh(s * w + row)), 3, True, a)  # noqa: E731
        return ops.if_else(c, deep, lambda a: ops.sin(a) * w, h), h * row
    h, ys = ops.scan(step, x, ops.reshape(x, shape=(1, 3)) * np.ones((4, 1)))
    return ops.sum(h) + ops.sum(ys)


def test_frame_graph_show_and_dot_read_nested_graphs(tmp_path):
    from frame_core.cli.main import app

    graph = fc.trace(installed_only, "bool[]", "f64[3]", "f64[3]")
    path = tmp_path / "nested.json"
    fc.save_graph(graph, path)
    runner = CliRunner()
    shown = runner.invoke(app, ["graph", "show", str(path)])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == fc.format_graph(fc.load_graph(path)) + "\n"
    drawn = runner.invoke(app, ["graph", "dot", str(path)])
    assert drawn.exit_code == 0 and drawn.stdout.count("subgraph \"cluster_") == 4


def test_frame_graph_show_reports_a_broken_body(tmp_path):
    from frame_core.cli.main import app

    broken = fc.trace(installed_only, "bool[]", "f64[3]", "f64[3]")
    step = next(n for n in broken.nodes if n.op == "scan").attrs["body"]
    step.outputs.pop()  # the scan body no longer returns its per-step output: the node's recorded types break
    path = tmp_path / "broken.json"
    fc.save_graph(broken, path)
    result = CliRunner().invoke(app, ["graph", "show", str(path)])
    assert result.exit_code == 2
    assert "node 3 (scan): has 2 outputs, but shape inference gives 1 from its body and attributes" in result.stderr


def test_graph_order_follows_bodies(registry, graph):
    run_closure_audit(registry)
    assert registry.closure["loop"].bodies and registry.closure["loop"].closed
    assert graph_order(graph, registry) == ("closed", ())

    def with_nograd(x):  # noqa: ANN001, ANN202
        return ops.sum(ops.loop(lambda i, s: (True, ops.nograd(s) + s), 2, True, x))
    order, path = graph_order(fc.trace(with_nograd, "f64[3]"), registry)
    assert order == 0
    assert path[0].endswith("(loop)") and path[1] == "body node 0 (nograd)"
