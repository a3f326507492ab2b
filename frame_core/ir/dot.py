"""Graphviz DOT export: ``to_dot(graph)``; render with ``dot -Tsvg``.

Inputs are ellipses, ops are boxes (``_internal`` ops dashed, constants grey),
outputs are double octagons; edges carry the value's type (and output position when a node
has several). Sub-graph
attributes are drawn as clusters beside their node.
"""

from __future__ import annotations

from .._text import printable
from ..errors import IRError
from .graph import Graph, Value, walking
from .printer import format_attr

__all__ = ["to_dot"]


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(graph: Graph) -> str:
    """DOT text for ``graph``; always encodable as UTF-8 (lone surrogates in names are escaped)."""
    if not isinstance(graph, Graph):
        raise IRError(f"to_dot takes a Graph, got {type(graph).__name__}; load a saved one with "
                      "frame_core.load_graph(path)")
    lines = [f'digraph "{_esc(graph.name)}" {{', "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    counter = [0]
    _emit(graph, lines, "  ", counter)
    lines.append("}")
    return printable("\n".join(lines))


def _emit(graph: Graph, lines: list[str], indent: str, counter: list[int]) -> None:
    with walking(graph):  # a body holding its own graph: an IRError, not a RecursionError
        _emit_lines(graph, lines, indent, counter)


def _emit_lines(graph: Graph, lines: list[str], indent: str, counter: list[int]) -> None:
    prefix = f"g{counter[0]}_"
    counter[0] += 1
    ids: dict[object, str] = {}
    for i, v in enumerate(graph.inputs):
        nid = f"{prefix}in{i}"
        ids[v] = nid
        lines.append(f'{indent}{nid} [shape=ellipse, label="{_esc(v.name or f"input {i}")}\\n{v.type}"];')
    for n, node in enumerate(graph.nodes):
        nid = f"{prefix}n{n}"
        label = _esc(node.op)  # a loaded document may hold any op name: escape it like every other text
        small = [f"{k}={format_attr(a)}" for k, a in node.attrs.items() if not isinstance(a, Graph)]
        if small:
            text = ", ".join(small)
            label += "\\n" + _esc(text if len(text) <= 80 else text[:77] + "...")  # cut before escaping
        style = 'style="filled", fillcolor="#eeeeee"' if node.op == "constant" else (
            'style="dashed"' if node.op.endswith("_internal") else 'style="solid"')
        lines.append(f'{indent}{nid} [shape=box, {style}, label="{label}"];')
        for v in node.inputs:
            src = ids.get(v, f"{prefix}undefined")
            lines.append(f'{indent}{src} -> {nid} [label="{_edge_label(v)}"];')
        for v in node.outputs:
            ids[v] = nid
        for k, a in node.attrs.items():
            if isinstance(a, Graph):
                lines.append(f'{indent}subgraph "cluster_{prefix}{n}_{_esc(k)}" {{')
                lines.append(f'{indent}  label="{_esc(node.op)}.{_esc(k)}"; style=dotted;')
                _emit(a, lines, indent + "  ", counter)
                lines.append(f"{indent}}}")
    for i, v in enumerate(graph.outputs):
        oid = f"{prefix}out{i}"
        lines.append(f'{indent}{oid} [shape=doubleoctagon, label="output {i}"];')
        lines.append(f'{indent}{ids.get(v, prefix + "undefined")} -> {oid} [label="{_edge_label(v)}"];')


def _edge_label(value: Value) -> str:
    """The value's type, led by its output position when its producer has several (a loop's states and stacked
    rows often share a type: without it, two edges from one box would be indistinguishable)."""
    node = value.producer
    if node is not None and len(node.outputs) > 1:
        return f"#{value.index} {value.type}"
    return str(value.type)
