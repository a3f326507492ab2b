"""Text form of a graph.

::

    graph mlp(%x: f32[16, 784], %w: f32[784, 256]) {
      %0 = matmul(%x, %w) : f32[16, 256]
      %1 = sum(%0) {axes=[0], keepdims=false} : f32[256]
      return %1
    }

Values print as ``%name`` when they have a unique name, else ``%N``.
Sub-graph attributes print nested and indented. Constants print their value
when small, else their type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._text import printable, short_repr
from ..errors import IRError
from .dtypes import DType
from .graph import Graph, Value, walking

__all__ = ["format_graph", "format_attr", "ValueNames"]


class ValueNames:
    """Stable printable names for the values of one graph."""

    def __init__(self, graph: Graph) -> None:
        self._names: dict[Value, str] = {}
        used: set[str] = set()
        counter = 0
        values = list(graph.inputs) + [v for n in graph.nodes for v in n.outputs]
        taken: dict[str, int] = {}
        for v in values:
            if v.name:
                taken[v.name] = taken.get(v.name, 0) + 1
        for v in values:
            if v in self._names:
                continue
            if v.name and taken[v.name] == 1 and not v.name.isdigit():
                name = v.name
            else:
                while str(counter) in used or str(counter) in taken:
                    counter += 1
                name = str(counter)
                counter += 1
            used.add(name)
            self._names[v] = f"%{name}"

    def __call__(self, v: Value) -> str:
        return self._names.get(v, f"%<undefined {v.type}>")


def format_attr(value: Any, indent: str = "") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, DType):
        return value.short
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            flat = ", ".join(repr(x.item()) if hasattr(x, "item") else repr(x) for x in value.reshape(-1))
            body = flat if value.ndim == 0 else f"[{flat}]"
            return f"{body} : {_dtype_short(value)}[{', '.join(map(str, value.shape))}]"
        return f"<{_dtype_short(value)}[{', '.join(map(str, value.shape))}] tensor>"
    if isinstance(value, Graph):
        return "\n" + _format_graph(value, indent + "    ")
    if value is None:
        return "none"
    return short_repr(value, 200)  # a string with lone surrogates, an int of thousands of digits: still shown


def _dtype_short(array: np.ndarray) -> str:
    from .dtypes import as_dtype

    try:
        return as_dtype(array.dtype).short
    except Exception:
        return str(array.dtype)


def format_graph(graph: Graph, indent: str = "") -> str:
    """The text form of ``graph``; always encodable as UTF-8 (lone surrogates in names are escaped)."""
    if not isinstance(graph, Graph):
        raise IRError(f"format_graph takes a Graph, got {type(graph).__name__}; load a saved one with "
                      "frame_core.load_graph(path)")
    if not isinstance(indent, str):
        raise IRError(f"format_graph(indent=) is a string put before each line, got {type(indent).__name__}")
    return printable(_format_graph(graph, indent))


def _format_graph(graph: Graph, indent: str = "") -> str:
    with walking(graph):
        return _format_lines(graph, indent)


def _format_lines(graph: Graph, indent: str) -> str:
    names = ValueNames(graph)
    params = ", ".join(f"{names(v)}: {v.type}" for v in graph.inputs)
    lines = [f"{indent}graph {graph.name}({params}) {{"]
    for node in graph.nodes:
        outs = ", ".join(names(v) for v in node.outputs)
        ins = ", ".join(names(v) for v in node.inputs)
        attrs = ""
        sub = []
        if node.attrs:
            flat = []
            for k, v in node.attrs.items():
                if isinstance(v, Graph):
                    flat.append(f"{k}=<graph {v.name}>")
                    sub.append(_format_graph(v, indent + "    "))
                else:
                    flat.append(f"{k}={format_attr(v)}")
            attrs = " {" + ", ".join(flat) + "}"
        types = ", ".join(str(v.type) for v in node.outputs)
        lhs = f"{outs} = " if outs else ""
        lines.append(f"{indent}  {lhs}{node.op}({ins}){attrs} : {types}")
        lines.extend(sub)
    labels = graph.output_names
    lines.append(f"{indent}  return " + ", ".join(names(v) + (f" as {labels[i]!r}" if labels[i] is not None else "")
                                                  for i, v in enumerate(graph.outputs)))
    lines.append(f"{indent}}}")
    return "\n".join(lines)
