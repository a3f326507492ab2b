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
graph lists them first. A constant a group reads becomes a ``constant`` node
of its body (the kernel binds it once instead of receiving it at every call);
one that nothing else reads leaves the graph. Fused nodes are a pipeline product: ``build_backward_graph`` refuses
them (ARCH-062).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

from ...ir.graph import Graph, Node, Value
from ..fused import FUSED_OP
from ..context import CompileContext
from ..rewrite import Rewriter


class _Group:
    __slots__ = ("first", "members", "type", "produced")

    def __init__(self, first: int, node: Node) -> None:
        self.first = first
        self.members = [node]
        self.type = node.outputs[0].type
        self.produced = {node.outputs[0]}


def find_groups(graph: Graph, ctx: CompileContext) -> list[_Group]:
    """Groups of two or more fusable nodes, each a list of members in graph order."""
    position: dict[Value, int] = {}  # where each value is defined: -1 for constants (hoisted to the front)
    group_of: dict[Value, _Group] = {}
    groups = []
    fusable: dict[str, bool] = {}  # per op: elementwise, accepts_out, no side effect
    schemas = ctx.registry.schemas
    where = position.get
    for i, node in enumerate(graph.nodes):
        op = node.op
        outs = node.outputs
        ok = fusable.get(op)
        if ok is None:
            traits = schemas[op].traits
            ok = fusable[op] = ("elementwise" in traits and "accepts_out" in traits
                                and "has_side_effect" not in traits and op != FUSED_OP)
        if not ok or len(outs) != 1 or not node.inputs:
            here = -1 if op == "constant" else i
            for v in outs:
                position[v] = here
            continue
        out = outs[0]
        position[out] = i
        out_t = out.type
        chosen = None
        for v in node.inputs:
            g = group_of.get(v)
            if g is None or g.type is not out_t or g is chosen:
                continue
            produced, first = g.produced, g.first
            for w in node.inputs:  # every outside input is defined before the group starts
                if w not in produced and where(w, -1) >= first:
                    break
            else:
                chosen = g
                break
        if chosen is None:
            chosen = _Group(i, node)
            groups.append(chosen)
        else:
            chosen.members.append(node)
            chosen.produced.add(out)
        group_of[out] = chosen
    return [g for g in groups if len(g.members) > 1]


def fuse_elementwise(graph: Graph, ctx: CompileContext) -> Graph:
    fused = ctx.registry.schemas.get(FUSED_OP)
    if fused is None or ctx.backend not in fused.kernels:  # nothing could run the fused node (it is cpu-only)
        return graph
    groups = find_groups(graph, ctx)
    if not groups:
        return graph
    reads = Counter(chain.from_iterable([n.inputs for n in graph.nodes]))  # every read of every value
    reads.update(graph.outputs)  # an output is read by the caller
    leader = {g.members[0]: g for g in groups}
    member = {n for g in groups for n in g.members}
    outside = Counter(chain.from_iterable([n.inputs for n in graph.nodes if n not in member]))
    outside.update(graph.outputs)
    rw = Rewriter(graph)
    for node in graph.nodes:  # constants first: a fused node may read one defined after its first member
        if node.op == "constant" and outside[node.outputs[0]]:  # (one read only by groups moves into them)
            rw.copy(node)
    for node in graph.nodes:
        if node.op == "constant":
            continue
        g = leader.get(node)
        if g is not None:
            _emit_fused(g, rw, reads)
        elif node not in member:
            rw.copy(node)
    ctx.note("fuse_elementwise", f"fused {sum(len(g.members) for g in groups)} nodes into {len(groups)} groups")
    return rw.finish()


def _emit_fused(group: _Group, rw: Rewriter, reads: Counter) -> None:
    """Append the group's fused node; a member's value is exported when something outside the group reads it.
    The constants the group reads become constant nodes of its body (the kernel binds them once)."""
    produced = group.produced
    body = Graph("fused")
    bmap: dict[Value, Value] = {}
    inside: dict[Value, int] = {}  # reads of each member value by later members
    external: list[Value] = []
    params = body.inputs
    nodes = body.nodes
    for node in group.members:
        ins = node.inputs
        for v in ins:
            if v in produced:
                inside[v] = inside.get(v, 0) + 1
            elif v not in bmap:
                p = v.producer
                if p is not None and p.op == "constant":
                    const = Node("constant", (), p.attrs)
                    const.outputs = (Value(v.type, const, 0),)
                    bmap[v] = const.outputs[0]
                    nodes.append(const)
                else:
                    bmap[v] = Value(v.type, None, -1, v.name)
                    params.append(bmap[v])
                    external.append(v)
        copy = Node(node.op, tuple(map(bmap.__getitem__, ins)), node.attrs)
        out = node.outputs[0]
        bmap[out] = value = Value(out.type, copy, 0)
        copy.outputs = (value,)
        nodes.append(copy)
    exports = [out for out in map(_first_output, group.members) if reads[out] > inside.get(out, 0)]
    if not exports:  # a chain nothing reads (dead-node elimination disabled): the node still has an output
        exports = [_first_output(group.members[-1])]
    body.outputs.extend(map(bmap.__getitem__, exports))
    fused = Node(FUSED_OP, rw.read(external), {"body": body})
    fused.outputs = tuple([Value(v.type, fused, i) for i, v in enumerate(exports)])
    rw.new.nodes.append(fused)
    for old, new in zip(exports, fused.outputs):
        rw.alias(old, new)


def _first_output(node: Node) -> Value:
    return node.outputs[0]
