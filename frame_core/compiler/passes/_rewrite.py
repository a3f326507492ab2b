"""Helpers for passes that build a new graph from an old one (passes never edit in place)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...ir.graph import Graph, Node, Value

__all__ = ["Rewriter", "consumers"]


class Rewriter:
    """Copies an old graph into a new one node by node, through a value map.

    ``copy(node)`` re-creates ``node`` on mapped inputs (types are kept, no
    re-inference); ``alias(old, new)`` makes later readers of ``old`` read
    ``new`` instead; ``finish()`` marks the mapped outputs and returns the graph.
    """

    __slots__ = ("old", "new", "vmap")

    def __init__(self, old: Graph) -> None:
        self.old = old
        self.new = Graph(old.name)
        self.vmap: dict[Value, Value] = {}
        for v in old.inputs:
            self.vmap[v] = self.new.add_input(v.type, v.name)

    def copy(self, node: Node, inputs: Sequence[Value] | None = None, attrs: dict[str, Any] | None = None) -> Node:
        vmap = self.vmap
        ins = tuple([vmap[v] for v in node.inputs]) if inputs is None else tuple(inputs)
        copy = Node(node.op, ins, node.attrs if attrs is None else attrs)
        copy.outputs = tuple([Value(v.type, copy, v.index, v.name) for v in node.outputs])
        for old, new in zip(node.outputs, copy.outputs):
            vmap[old] = new
        self.new.nodes.append(copy)
        return copy

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any], output_types: Sequence[Any]) -> Node:
        return self.new.add_node(op, inputs, attrs, output_types)

    def alias(self, old: Value, new: Value) -> None:
        self.vmap[old] = new

    def finish(self) -> Graph:
        for v in self.old.outputs:
            self.new.outputs.append(self.vmap[v])
        self.new._version += 1
        return self.new


def consumers(graph: Graph) -> dict[Value, list[Node]]:
    """For each value, the nodes that read it (in order, a node listed once per read)."""
    users: dict[Value, list[Node]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            users.setdefault(v, []).append(node)
    return users
