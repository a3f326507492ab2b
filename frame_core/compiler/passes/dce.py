"""Stage 6: dead-node elimination.

Keeps the nodes some output needs, and every node with the
``has_side_effect`` trait or a sub-graph holding one (``node_has_side_effect``);
drops the rest. This is what cleans up after ``build_backward_graph``, which
inlines whole micro-graphs (ARCH-061).
"""

from __future__ import annotations

from ...ir.graph import Graph, Node, Value
from ...ops_registry.schema import carries_graphs, node_has_side_effect
from ..context import CompileContext
from ..rewrite import Rewriter


def eliminate_dead_nodes(graph: Graph, ctx: CompileContext) -> Graph:
    schemas = ctx.registry.schemas
    live: set[Value] = set(graph.outputs)
    keep: list[Node] = []
    ops = ctx.ops(graph)
    effects = {op for op in ops if "has_side_effect" in schemas[op].traits}
    nested = {op for op in ops if carries_graphs(schemas[op])}  # a side effect may sit in a body
    isdisjoint = live.isdisjoint
    dropped: list[Node] = []
    kept_ops: set[str] | None = None  # the ops of the kept nodes, when the walk gathers them
    if not effects and not nested:  # (most graphs) a node is needed exactly when something needed reads it
        kept_ops = set()
        keep_node, drop_node, need, has_op = keep.append, dropped.append, live.update, kept_ops.add
        for node in reversed(graph.nodes):
            if isdisjoint(node.outputs):
                drop_node(node)
            else:
                keep_node(node)
                need(node.inputs)
                has_op(node.op)  # (the node is at hand: cheaper than a walk for the set later)
    else:
        for node in reversed(graph.nodes):
            if not isdisjoint(node.outputs) or node.op in effects or (node.op in nested
                                                                       and node_has_side_effect(node, schemas)):
                keep.append(node)
                live.update(node.inputs)
            else:
                dropped.append(node)
    if not dropped:
        return graph
    ctx.dropped = dropped
    # a kept node reads only kept values (what it reads is live), so nothing is remapped: the kept nodes
    # themselves, in order, are the new graph's
    rw = Rewriter(graph)
    keep.reverse()
    rw.keep(keep)
    ctx.note("eliminate_dead_nodes", f"removed {len(graph.nodes) - len(keep)} of {len(graph.nodes)} nodes")
    result = rw.finish()
    if kept_ops is not None:
        ctx.know_ops(result, kept_ops)
    return result
