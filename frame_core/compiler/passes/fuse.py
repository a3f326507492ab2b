"""Stage 7: elementwise fusion.

Chains of elementwise ops (traits ``elementwise`` and ``accepts_out``) whose
outputs all have one type become a single ``fused_elementwise_internal`` node
carrying the chain as its ``body`` sub-graph. Its kernel runs the members'
kernels into a few reused buffers, so intermediates cost no allocation
(:mod:`frame_core.compiler.fused`). Member values used after the chain become
extra outputs of the fused node.

Grouping walks nodes in order; a node joins the group of one of its
producers when every input it reads from outside that group is defined before
the group's first node (so placing the fused node there cannot create a
cycle); constants count as defined before everything, and the rewritten
graph lists them first. Fused nodes are a pipeline product: ``build_backward_graph`` refuses
them (ARCH-062).
"""

from __future__ import annotations

from ...ir.graph import Graph, Node, Value
from ..context import CompileContext
from ..rewrite import Rewriter, consumers

from ..fused import FUSED_OP


class _Group:
    __slots__ = ("first", "members", "type", "produced")

    def __init__(self, first: int, node: Node) -> None:
        self.first = first
        self.members = [node]
        self.type = node.outputs[0].type
        self.produced = {node.outputs[0]}


def find_groups(graph: Graph, ctx: CompileContext) -> list[_Group]:
    """Groups of two or more fusable nodes, each a list of members in graph order."""
    position = {}
    group_of: dict[Value, _Group] = {}
    groups = []
    fusable: dict[str, bool] = {}  # per op: elementwise, accepts_out, no side effect
    schemas = ctx.registry.schemas
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            position[v] = -1 if node.op == "constant" else i  # constants are hoisted to the front
        ok = fusable.get(node.op)
        if ok is None:
            traits = schemas[node.op].traits
            ok = fusable[node.op] = ("elementwise" in traits and "accepts_out" in traits
                                     and "has_side_effect" not in traits and node.op != FUSED_OP)
        if not ok or len(node.outputs) != 1 or not node.inputs:
            continue
        out_t = node.outputs[0].type
        chosen = None
        for v in node.inputs:
            g = group_of.get(v)
            if g is None or g.type != out_t or g is chosen:
                continue
            if all(w in g.produced or position.get(w, -1) < g.first for w in node.inputs):
                chosen = g
                break
        if chosen is None:
            chosen = _Group(i, node)
            groups.append(chosen)
        else:
            chosen.members.append(node)
            chosen.produced.add(node.outputs[0])
        group_of[node.outputs[0]] = chosen
    return [g for g in groups if len(g.members) > 1]


def fuse_elementwise(graph: Graph, ctx: CompileContext) -> Graph:
    fused = ctx.registry.schemas.get(FUSED_OP)
    if fused is None or ctx.backend not in fused.kernels:  # nothing could run the fused node (it is cpu-only)
        return graph
    groups = find_groups(graph, ctx)
    if not groups:
        return graph
    users = consumers(graph)
    outputs = set(graph.outputs)
    leader = {g.members[0]: g for g in groups}
    member = {n for g in groups for n in g.members}
    rw = Rewriter(graph)
    for node in graph.nodes:  # constants first: a fused node may read one defined after its first member
        if node.op == "constant":
            rw.copy(node)
    for node in graph.nodes:
        if node.op == "constant":
            continue
        g = leader.get(node)
        if g is not None:
            _emit_fused(g, rw, users, outputs)
        elif node not in member:
            rw.copy(node)
    ctx.note("fuse_elementwise", f"fused {sum(len(g.members) for g in groups)} nodes into {len(groups)} groups")
    return rw.finish()


def _emit_fused(group: _Group, rw: Rewriter, users: dict[Value, list[Node]], outputs: set[Value]) -> None:
    members = set(group.members)
    body = Graph("fused")
    bmap: dict[Value, Value] = {}
    external: list[Value] = []
    for node in group.members:
        for v in node.inputs:
            if v not in group.produced and v not in bmap:
                bmap[v] = param = Value(v.type, None, -1, v.name)
                body.inputs.append(param)
                external.append(v)
    exports = []
    for node in group.members:
        copy = Node(node.op, tuple([bmap[v] for v in node.inputs]), node.attrs)
        copy.outputs = (Value(node.outputs[0].type, copy, 0),)
        body.nodes.append(copy)
        bmap[node.outputs[0]] = copy.outputs[0]
        out = node.outputs[0]
        if out in outputs or any(u not in members for u in users.get(out, ())):
            exports.append(out)
    body.outputs.extend(bmap[v] for v in exports)
    fused = Node(FUSED_OP, tuple(map(rw.vmap.__getitem__, external)), {"body": body})
    fused.outputs = tuple(Value(v.type, fused, i) for i, v in enumerate(exports))
    rw.new.nodes.append(fused)
    for old, new in zip(exports, fused.outputs):
        rw.alias(old, new)
