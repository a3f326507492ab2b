"""``Rewriter``: how a pass builds its output graph from its input graph.

Passes never edit a graph in place; they return a new one. Nodes and values
are immutable once they are in a graph, so the new graph *reuses* every node
whose inputs did not change (copy-on-write) and copies only the nodes
downstream of a rewrite. A pass that changes a handful of nodes of a large
graph therefore costs a walk over the graph, not a copy of it. Public: packs
that contribute passes (hook ``frame_register_passes``) use it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..ir.graph import Graph, Node, Value

__all__ = ["Rewriter", "consumers"]


class _ValueMap(dict):
    """old value -> value to read instead; a value never remapped reads itself."""

    def __missing__(self, key: Value) -> Value:
        return key


class Rewriter:
    """Builds a new graph from ``old`` node by node, through a value map.

    ``copy(node)`` keeps ``node`` when its (mapped) inputs and attributes are
    unchanged and otherwise re-creates it on the mapped inputs (types are kept,
    no re-inference); ``keep(nodes)`` copies a run of nodes that read nothing
    remapped (the prefix before a pass's first change) in one step; ``alias(old, new)`` makes later readers of ``old`` read
    ``new`` instead; ``emit(...)`` appends a brand-new node; ``finish()`` marks
    the mapped outputs and returns the new graph, which shares its inputs and
    unchanged nodes with ``old``.

    Inside a compile, ``Rewriter(graph, ctx)`` may rewire nodes in place instead:
    a node that an earlier stage of this very compile made (not one of the
    caller's, ``ctx.protected``) is referenced by no graph that outlives the
    stage, so ``copy`` gives it the mapped inputs and keeps its outputs. Its
    readers then need no copy either, so a rewrite near the start of a long
    graph costs a walk rather than a copy of everything downstream. A pass that
    passes ``ctx`` must return the graph ``finish()`` gives once it has copied a
    node onto changed inputs (its input graph is no longer intact).
    """

    __slots__ = ("old", "new", "vmap", "_get", "_append", "_protected")

    def __init__(self, old: Graph, ctx: Any = None) -> None:
        self.old = old
        self.new = Graph(old.name)
        self.new.inputs = list(old.inputs)
        self.vmap: dict[Value, Value] = _ValueMap()
        self._get = self.vmap.get
        self._append = self.new.nodes.append
        self._protected = getattr(ctx, "protected", None)  # None: copy-on-write for every node

    def read(self, values: Sequence[Value]) -> tuple[Value, ...]:
        """``values`` read through the value map: what a copied node reading them gets."""
        return tuple(map(self._get, values, values)) if self.vmap else tuple(values)  # vmap.get(v, v), in C

    def copy(self, node: Node, inputs: Sequence[Value] | None = None, attrs: dict[str, Any] | None = None) -> Node:
        vmap = self.vmap
        if inputs is None:
            ins = node.inputs
            if vmap:
                ins = tuple(map(self._get, ins, ins))
        else:
            ins = tuple(inputs)
        if attrs is None and ins == node.inputs:  # nothing upstream changed: share the node
            self._append(node)
            return node
        protected = self._protected
        if protected is not None and node not in protected:  # this compile's own node: rewired in place
            node.inputs = ins
            if attrs is not None:
                node.attrs = attrs
            self._append(node)
            return node
        copy = Node(node.op, ins, node.attrs if attrs is None else attrs)
        outs = node.outputs
        if len(outs) == 1:
            old = outs[0]
            new = vmap[old] = Value(old.type, copy, 0, old.name)
            copy.outputs = (new,)
        else:
            copy.outputs = tuple([Value(v.type, copy, v.index, v.name) for v in outs])
            for old, new in zip(outs, copy.outputs):
                vmap[old] = new
        self._append(copy)
        return copy

    def keep(self, nodes: Sequence[Node]) -> None:
        """Append ``nodes`` unchanged, as ``copy`` would when none of them reads a remapped value: the prefix
        of the graph before a pass's first change, appended in one step instead of node by node."""
        if self.vmap:
            unchanged, append, copy = self.vmap.keys().isdisjoint, self._append, self.copy
            for node in nodes:
                if unchanged(node.inputs):  # (the common case, tested in C: shared as copy would share it)
                    append(node)
                else:
                    copy(node)
        else:
            self.new.nodes.extend(nodes)

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any], output_types: Sequence[Any]) -> Node:
        return self.new.add_node(op, inputs, attrs, output_types)

    def alias(self, old: Value, new: Value) -> None:
        self.vmap[old] = new

    def finish(self) -> Graph:
        for v in self.old.outputs:
            self.new.outputs.append(self.vmap[v])
        return self.new


def consumers(graph: Graph) -> dict[Value, list[Node]]:
    """For each value, the nodes that read it (in order, a node listed once per read)."""
    users: dict[Value, list[Node]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            users.setdefault(v, []).append(node)
    return users
