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
from typing import Any

from ...ir.graph import Graph, Node, Value
from ...ir.keys import attrs_key
from ..fused import FUSED_OP
from ..context import CompileContext
from ..rewrite import Rewriter


class _Group:
    __slots__ = ("first", "last", "members", "type", "produced")

    def __init__(self, first: int, node: Node) -> None:
        self.first = first
        self.last = first
        self.members = [node]
        self.type = node.outputs[0].type
        self.produced = {node.outputs[0]}


def find_groups(graph: Graph, ctx: CompileContext, contiguous: bool = False) -> list[_Group]:
    """Groups of two or more fusable nodes, each a list of members in graph order.

    With ``contiguous`` a node joins a group only when no other (non-constant) node lies between the group's
    last member and it, so no member is moved earlier past another node.
    """
    position: dict[Value, int] = {}  # where each value is defined: -1 for constants (hoisted to the front)
    rank = 0  # non-constant nodes so far: two nodes are adjacent when their ranks differ by one
    rank_at: list[int] = []
    group_of: dict[Value, _Group] = {}
    groups = []
    fusable: dict[str, bool] = {}  # per op: elementwise, accepts_out, no side effect
    schemas = ctx.registry.schemas
    where = position.get
    for i, node in enumerate(graph.nodes):
        op = node.op
        if contiguous:
            rank += op != "constant"
            rank_at.append(rank)
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
            if g is None or g.type is not out_t or g is chosen or (contiguous and rank_at[i] - rank_at[g.last] != 1):
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
            chosen.last = i
        group_of[out] = chosen
    return [g for g in groups if len(g.members) > 1]


def fuse_elementwise(graph: Graph, ctx: CompileContext) -> Graph:
    fused = ctx.registry.schemas.get(FUSED_OP)
    if fused is None or ctx.backend not in fused.kernels:  # nothing could run the fused node (it is cpu-only)
        return graph
    groups = find_groups(graph, ctx)
    if not groups:
        return graph
    # A member moved ahead of other nodes makes its value earlier and keeps it alive longer: over a whole
    # backward pass (a second-order graph recomputing 1 - tanh^2 far from the forward's tanh) that can raise the
    # peak memory above the unfused graph's. Then fuse only runs of adjacent nodes, which moves nothing.
    if any(g.last - g.first >= len(g.members) for g in groups) and _peak(graph, groups) > _peak(graph, []):
        groups = find_groups(graph, ctx, contiguous=True)
        ctx.note("fuse_elementwise", "fused adjacent runs only: moving members would raise the peak memory")
        if not groups:
            return graph
    ctx.note("fuse_elementwise", f"fused {sum(len(g.members) for g in groups)} nodes into {len(groups)} groups")
    return _rewrite(graph, groups)


def _peak(graph: Graph, groups: list[_Group]) -> int:
    """The most the intermediates hold at once if ``groups`` run as fused nodes (each at its first member's
    place), counting every value from where it is made to its last read (values a group uses only inside
    itself count nothing; graph outputs and constants are left out, as the memory plan leaves them)."""
    nodes = graph.nodes
    at: dict[Node, int] = {}        # member -> where its group runs
    owner: dict[Node, _Group] = {}  # member -> its group
    for g in groups:
        for n in g.members:
            at[n] = g.first
            owner[n] = g
    ends: dict[Value, int] = {}
    shared: set[Value] = set()  # values some node outside their producer's group reads
    if groups:
        for i, node in enumerate(nodes):
            here = at.get(node, i)
            mine = owner.get(node)
            for v in node.inputs:
                if here > ends.get(v, -1):
                    ends[v] = here
                if mine is None or owner.get(v.producer) is not mine:  # type: ignore[arg-type]
                    shared.add(v)
    else:  # nothing moves: a value's end is its last reader's position (the last write wins)
        ends = {v: i for i, node in enumerate(nodes) for v in node.inputs}
    outputs = set(graph.outputs)
    delta = [0] * (len(nodes) + 2)
    for i, node in enumerate(nodes):
        if node.op == "constant":
            continue
        start = at.get(node, i)
        grouped = node in owner
        for v in node.outputs:
            if v in outputs or (grouped and v in ends and v not in shared):
                continue
            nbytes = v.type.nbytes
            delta[start] += nbytes
            delta[max(ends.get(v, start), start) + 1] -= nbytes
    peak = live = 0
    for d in delta:
        live += d
        if live > peak:
            peak = live
    return peak


def _rewrite(graph: Graph, groups: list[_Group]) -> Graph:
    reads = Counter(chain.from_iterable([n.inputs for n in graph.nodes]))  # every read of every value
    reads.update(graph.outputs)  # an output is read by the caller
    leader = {g.members[0]: g for g in groups}
    member = {n for g in groups for n in g.members}
    outside = Counter(chain.from_iterable([n.inputs for n in graph.nodes if n not in member]))
    outside.update(graph.outputs)
    rw = Rewriter(graph)
    bodies: dict[tuple, Graph] = {}
    for node in graph.nodes:  # constants first: a fused node may read one defined after its first member
        if node.op == "constant" and outside[node.outputs[0]]:  # (one read only by groups moves into them)
            rw.copy(node)
    for node in graph.nodes:
        if node.op == "constant":
            continue
        g = leader.get(node)
        if g is not None:
            _emit_fused(g, rw, reads, bodies)
        elif node not in member:
            rw.copy(node)
    return rw.finish()


def _emit_fused(group: _Group, rw: Rewriter, reads: Counter, bodies: dict[tuple, Graph]) -> None:
    """Append the group's fused node; a member's value is exported when something outside the group reads it.

    The constants the group reads become constant nodes of its body (the kernel binds them once). Groups
    of one structure (layers, unrolled chains) share one body graph: the structure is read first, as
    tuples, and a body is built only for a structure not met before in this pass (bodies are immutable,
    so sharing is safe, and the kernel builder and the keys then see each structure once).
    """
    produced = group.produced
    ref: dict[Value, Any] = {}      # value -> its place: param index, ("c", constant node id) or -1 - member
    external: list[Value] = []
    inside: dict[Value, int] = {}   # reads of each member value by later members
    shape = []
    for k, node in enumerate(group.members):
        refs = []
        for v in node.inputs:
            r = ref.get(v)
            if r is None:
                p = v.producer
                r = ref[v] = ("c", id(p)) if p is not None and p.op == "constant" else len(external)
                if type(r) is int:
                    external.append(v)
            elif v in produced:
                inside[v] = inside.get(v, 0) + 1
            refs.append(r)
        out = node.outputs[0]
        ref[out] = -1 - k
        attrs = node.attrs
        shape.append((node.op, tuple(refs), attrs_key(attrs) if attrs else (), id(out.type)))
    exports = [k for k, node in enumerate(group.members) if reads[node.outputs[0]] > inside.get(node.outputs[0], 0)]
    if not exports:  # a chain nothing reads (dead-node elimination disabled): the node still has an output
        exports = [len(group.members) - 1]
    key = (tuple(shape), tuple([(id(v.type), v.name) for v in external]), tuple(exports))
    body = bodies.get(key)
    if body is None:
        body = bodies[key] = _body(group.members, external, exports)
    fused = Node(FUSED_OP, rw.read(external), {"body": body})
    outs = [group.members[k].outputs[0] for k in exports]
    fused.outputs = tuple([Value(v.type, fused, i) for i, v in enumerate(outs)])
    rw.new.nodes.append(fused)
    for old, new in zip(outs, fused.outputs):
        rw.alias(old, new)


def _body(members: list[Node], external: list[Value], exports: list[int]) -> Graph:
    """The body graph of a group: its inputs in ``external`` order, its constants, its members, its exports."""
    body = Graph("fused")
    bmap: dict[Value, Value] = {}
    for v in external:
        bmap[v] = Value(v.type, None, -1, v.name)
        body.inputs.append(bmap[v])
    nodes = body.nodes
    for node in members:
        for v in node.inputs:
            if v not in bmap:  # a constant (everything else is an external or an earlier member)
                producer = v.producer
                assert producer is not None  # _emit_fused made every other value an external
                const = Node("constant", (), producer.attrs)
                const.outputs = (Value(v.type, const, 0),)
                bmap[v] = const.outputs[0]
                nodes.append(const)
        copy = Node(node.op, tuple(map(bmap.__getitem__, node.inputs)), node.attrs)
        out = node.outputs[0]
        bmap[out] = value = Value(out.type, copy, 0)
        copy.outputs = (value,)
        nodes.append(copy)
    body.outputs.extend(bmap[members[k].outputs[0]] for k in exports)
    return body


def _first_output(node: Node) -> Value:
    return node.outputs[0]
