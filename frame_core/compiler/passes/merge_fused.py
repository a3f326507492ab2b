"""Fused groups absorb the elementwise producers that only they (or later nodes) read.

``fuse_elementwise`` grows a group by letting a node join the group of *one*
of its producers, so where two elementwise branches meet (``a*b + c*d``,
everywhere in derivative graphs: products of a cotangent with several saved
values) one branch stays outside as its own node or group, a full pass over
memory whose result is written out only to be read back by the next group.
``merge_into_consumers`` takes each fused node ``G`` in turn and moves into it
every producer ``P`` of the same type (a fused node, or a single fusable
node) whose outputs nothing reads before ``G``: ``P``'s members then run at
``G``'s place, first, and ``P``'s outputs that later nodes (or the caller)
still read become extra outputs of ``G``. Moving a node later past nodes that
do not read it changes no value, and each member runs the kernel it ran
before on the same inputs, so results keep their bits.
"""

from __future__ import annotations

from typing import Any

from ...ir.graph import Graph, Node, Value
from ..context import CompileContext
from ..fused import FUSED_OP
from ..rewrite import Rewriter

__all__ = ["merge_into_consumers"]


def merge_into_consumers(graph: Graph, ctx: CompileContext, fusable: dict[str, bool]) -> Graph:
    """``graph`` with producers merged into the fused nodes that consume them (see the module doc).
    ``fusable`` says, per op, whether a single node of it may join a group."""
    nodes = graph.nodes
    if not any(n.op == FUSED_OP for n in nodes):
        return graph
    position = {node: i for i, node in enumerate(nodes)}
    readers: dict[Value, list[int]] = {}
    end = len(nodes)
    for i, node in enumerate(nodes):
        for v in node.inputs:
            readers.setdefault(v, []).append(i)
    for v in graph.outputs:
        readers.setdefault(v, []).append(end)

    def kind(node: Node | None) -> Any:
        """The type of a node's elementwise group, or None when it cannot be merged."""
        if node is None:
            return None
        if node.op == FUSED_OP:
            return node.attrs["body"].outputs[0].type
        if fusable.get(node.op) and len(node.outputs) == 1 and node.inputs:
            return node.outputs[0].type
        return None

    taken: set[Node] = set()
    merged: dict[Node, list[Node]] = {}  # consumer -> the producers it absorbs, in graph order
    for node in reversed(nodes):  # the latest consumer first: it takes whole trees of producers
        if node.op != FUSED_OP or node in taken:
            continue
        t = kind(node)
        here = position[node]
        chosen: list[Node] = []
        inside = {node}
        frontier = [v.producer for v in node.inputs]
        changed = True
        while changed:  # a producer qualifies once every reader of it is inside or after `node`
            changed = False
            for p in list(frontier):
                if p is None or p in inside or p in taken or kind(p) != t:
                    continue
                if all(r > here or nodes[r] in inside for v in p.outputs for r in readers.get(v, ())):
                    chosen.append(p)
                    inside.add(p)
                    frontier.extend(v.producer for v in p.inputs)
                    changed = True
        if chosen:
            chosen.sort(key=position.__getitem__)
            merged[node] = chosen
            taken.update(chosen)
    if not merged:
        return graph
    rw = Rewriter(graph, ctx)
    copy, append = rw.copy, rw.new.nodes.append
    unchanged = rw.vmap.keys().isdisjoint
    for i, node in enumerate(nodes):
        if node in taken:
            continue
        group = merged.get(node)
        if group is None:
            if unchanged(node.inputs):
                append(node)
            else:
                copy(node)
            continue
        _emit(node, group, rw, readers, i)
    ctx.note("merge_into_consumers", f"merged {len(taken)} producers into {len(merged)} fused groups")
    ctx.dropped = [*taken, *merged]
    return rw.finish()


def _emit(consumer: Node, producers: list[Node], rw: Rewriter, readers: dict[Value, list[int]], here: int) -> None:
    """One fused node at ``consumer``'s place running ``producers`` (in order), then ``consumer``'s body."""
    body = Graph("fused")
    made: dict[Value, Value] = {}  # a graph value made inside the merged group -> its body value
    external: dict[Value, Value] = {}  # a graph value read from outside -> the body input for it
    outer: list[Value] = []

    def read(v: Value) -> Value:
        got = made.get(v)
        if got is None:
            got = external.get(v)
            if got is None:
                got = external[v] = body.add_input(v.type, v.name)
                outer.append(v)
        return got

    def copy_body(part: Graph, inputs: tuple[Value, ...]) -> list[Value]:
        bmap = {b: read(v) for b, v in zip(part.inputs, inputs)}
        for n in part.nodes:
            if n.op == "constant":
                const = Node("constant", (), n.attrs)
                const.outputs = (Value(n.outputs[0].type, const, 0),)
                bmap[n.outputs[0]] = const.outputs[0]
                body.nodes.append(const)
                continue
            new = Node(n.op, tuple(bmap[v] for v in n.inputs), n.attrs)
            new.outputs = (Value(n.outputs[0].type, new, 0),)
            bmap[n.outputs[0]] = new.outputs[0]
            body.nodes.append(new)
        return [bmap[v] for v in part.outputs]

    exports: list[Value] = []  # graph values the merged node returns, in order
    for p in producers:
        if p.op == FUSED_OP:
            outs = copy_body(p.attrs["body"], p.inputs)
        else:
            new = Node(p.op, tuple(read(v) for v in p.inputs), p.attrs)
            new.outputs = (Value(p.outputs[0].type, new, 0),)
            body.nodes.append(new)
            outs = [new.outputs[0]]
        for v, b in zip(p.outputs, outs):
            made[v] = b
    results = copy_body(consumer.attrs["body"], consumer.inputs)
    body.outputs.extend(results)
    exports.extend(consumer.outputs)
    for p in producers:  # values still read after the consumer's place (or returned by the graph)
        for v in p.outputs:
            if any(r > here for r in readers.get(v, ())):
                body.outputs.append(made[v])
                exports.append(v)
    fused = Node(FUSED_OP, rw.read(outer), {"body": body})
    fused.outputs = tuple([Value(v.type, fused, j) for j, v in enumerate(exports)])
    rw.new.nodes.append(fused)
    for old, new in zip(exports, fused.outputs):
        rw.alias(old, new)
