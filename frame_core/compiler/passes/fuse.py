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

from itertools import accumulate, repeat
from operator import attrgetter
from typing import Any

from ...ir.graph import Graph, Node, Value
from ...ir.keys import attrs_key
from ..fused import FUSED_OP
from ..context import CompileContext
from ..rewrite import Rewriter
from .merge_fused import merge_fused_groups


_UNDEFINED = repeat(-1)  # (position.get's default for every input: a graph input)


class _Group:
    __slots__ = ("first", "last", "members", "positions", "type", "rank")

    def __init__(self, first: int, node: Node, type: Any, rank: int = 0) -> None:
        self.first = first
        self.last = first
        self.members: Any = node  # the lists of a group of one are made when a second member joins (``join``):
        self.positions: Any = None  # most groups never get one, and only groups of two or more are returned
        self.type = type
        self.rank = rank  # (adjacent grouping) the rank of its last member

    def join(self, node: Node, i: int) -> None:
        if self.positions is None:
            self.members = [self.members, node]
            self.positions = [self.first, i]  # each member's position in the graph
        else:
            self.members.append(node)
            self.positions.append(i)
        self.last = i


class _Lifetimes:
    """What the peak comparison needs, gathered while grouping, by the position of each value's producer: the
    last reader's position (``ends``, -1 for none) and the latest place a reader runs once groups run at their
    first member's place (``fused_ends``). Values of nodes with several outputs (never grouped) are kept
    apart, by value, in ``several`` as ``[end, fused end]``."""

    __slots__ = ("ends", "fused_ends", "several")

    def __init__(self, n: int) -> None:
        self.ends = [-1] * n
        self.fused_ends = [-1] * n
        self.several: dict[Value, list[int]] = {}


class _Grouping:
    """Both groupings of a graph (``_group``) with what the rewrite needs, by producer position: each
    grouping's group of a value (``group_at``; groups of one member included) and whether a node outside that
    group reads it (``shared``), the constants' positions, and the positions of nodes that read a constant."""

    __slots__ = ("moving", "adjacent", "group_at", "adjacent_at", "shared", "adjacent_shared", "constants",
                 "constant_readers")

    def __init__(self, n: int) -> None:
        self.moving: list[_Group] = []
        self.adjacent: list[_Group] = []
        self.group_at: list[Any] = [None] * n
        self.adjacent_at: list[Any] = [None] * n
        self.shared = bytearray(n)
        self.adjacent_shared = bytearray(n)
        self.constants: list[int] = []
        self.constant_readers: list[int] = []


def _fusable_ops(graph: Graph, ctx: CompileContext) -> dict[str, bool]:
    """Per op of ``graph``: elementwise, accepts_out, no side effect, and not a fused node itself."""
    schemas = ctx.registry.schemas
    fusable = {}
    for op in ctx.ops(graph):
        traits = schemas[op].traits
        fusable[op] = ("elementwise" in traits and "accepts_out" in traits and "has_side_effect" not in traits
                       and op != FUSED_OP)
    return fusable


def find_groups(graph: Graph, ctx: CompileContext, contiguous: bool = False) -> list[_Group]:
    """Groups of two or more fusable nodes, each a list of members in graph order.

    A node joins the group of one of its inputs when every input it reads from outside that group is defined
    before the group's first member. With ``contiguous`` it joins only when no other (non-constant) node
    lies between the group's last member and it, so no member is moved earlier past another node.
    """
    grouping = _group(graph.nodes, _fusable_ops(graph, ctx), None)
    return grouping.adjacent if contiguous else grouping.moving


def _group(nodes: list[Node], fusable: dict[str, bool], lifetimes: _Lifetimes | None) -> _Grouping:
    """Both groupings of ``find_groups`` in one walk: the groups of two or more members without
    (``moving``) and with ``contiguous`` (``adjacent``). Given ``lifetimes``, the walk also fills them in for
    the moving groups (``_raises_peak``).

    Values are found by their producer's position (one dictionary lookup per input; the rest are list
    reads): on graphs of 100k nodes, every further table keyed by values cost a cache miss per read.
    In the adjacent grouping, every non-member between a group's first member and a node joining it is a
    constant, so each outside input is defined before the group starts: adjacency is the only test.
    """
    n = len(nodes)
    out = _Grouping(n)
    position: dict[Value, int] = {}  # where each value is defined: -2 for constants (hoisted to the front)
    where = position.get  # (-1 for a graph input)
    group_at, adjacent_at = out.group_at, out.adjacent_at
    shared, adjacent_shared = out.shared, out.adjacent_shared
    groups, adjacent = out.moving, out.adjacent
    constants, constant_readers = out.constants, out.constant_readers
    rank = 0  # non-constant nodes so far: two nodes are adjacent when their ranks differ by one
    track = lifetimes is not None
    if track:
        ends, fused_ends, several = lifetimes.ends, lifetimes.fused_ends, lifetimes.several  # type: ignore[union-attr]
    for i, node in enumerate(nodes):
        op = node.op
        outs = node.outputs
        ins = node.inputs
        if op == "constant":
            for v in outs:
                position[v] = -2
            constants.append(i)
            continue
        rank += 1
        ps = list(map(where, ins, _UNDEFINED))  # each input's producer position, looked up once
        if not fusable[op] or len(outs) != 1 or not ins:
            for v in outs:
                position[v] = i
            if len(outs) != 1 and track:
                for v in outs:
                    several[v] = [-1, -1]
            chosen = near = None
            here = i  # runs in place, after every earlier reader: the latest so far
        else:
            value = outs[0]
            position[value] = i
            out_t = value.type
            chosen = None
            if len(ps) == 1:  # its one input is the group's own value
                p = ps[0]
                g = group_at[p] if p >= 0 else None
                if g is not None and g.type is out_t:
                    chosen = g
            else:
                for p in ps:
                    if p < 0:
                        continue
                    g = group_at[p]
                    if g is None or g.type is not out_t:
                        continue
                    first = g.first
                    for q in ps:  # every outside input is defined before the group starts
                        if q >= first and group_at[q] is not g:
                            break
                    else:
                        chosen = g
                        break
            if chosen is None:
                chosen = _Group(i, node, out_t)
                groups.append(chosen)
            else:
                chosen.join(node, i)
            group_at[i] = chosen
            near = None
            for p in ps:
                g = adjacent_at[p] if p >= 0 else None
                if g is not None and g.type is out_t and g.rank == rank - 1:
                    near = g
                    break
            if near is None:
                near = _Group(i, node, out_t, rank)
                adjacent.append(near)
            else:
                near.join(node, i)
                near.rank = rank
            adjacent_at[i] = near
            here = chosen.first
        for v, p in zip(ins, ps):  # every read, once: who reads each value from outside its group, and until when
            if p < 0:
                if p == -2:
                    constant_readers.append(i)
                continue
            if group_at[p] is not chosen:
                shared[p] = 1
            if adjacent_at[p] is not near:
                adjacent_shared[p] = 1
            if track:
                if several and v in several:
                    record = several[v]
                    record[0] = i
                    record[1] = max(record[1], here)
                    continue
                ends[p] = i
                if here > fused_ends[p]:
                    fused_ends[p] = here
    out.moving = [g for g in groups if g.positions is not None]
    out.adjacent = [g for g in adjacent if g.positions is not None]
    return out


def fuse_elementwise(graph: Graph, ctx: CompileContext) -> Graph:
    fused = ctx.registry.schemas.get(FUSED_OP)
    if fused is None or ctx.backend not in fused.kernels:  # nothing could run the fused node (it is cpu-only)
        return graph
    lifetimes = _Lifetimes(len(graph.nodes))
    fusable = _fusable_ops(graph, ctx)
    grouping = _group(graph.nodes, fusable, lifetimes)
    groups, shared = grouping.moving, grouping.shared
    if not groups:
        return graph
    # A member moved ahead of other nodes makes its value earlier and keeps it alive longer: over a whole
    # backward pass (a second-order graph recomputing 1 - tanh^2 far from the forward's tanh) that can raise the
    # peak memory above the unfused graph's. Then fuse only runs of adjacent nodes, which moves nothing.
    if any(g.last - g.first >= len(g.members) for g in groups) and _raises_peak(graph, lifetimes, grouping):
        groups, shared = grouping.adjacent, grouping.adjacent_shared
        ctx.note("fuse_elementwise", "fused adjacent runs only: moving members would raise the peak memory")
        if not groups:
            return graph
    ctx.note("fuse_elementwise", f"fused {sum(len(g.members) for g in groups)} nodes into {len(groups)} groups")
    return merge_fused_groups(_rewrite(graph, groups, shared, grouping, ctx), ctx, fusable)


def _peak(delta: list[int]) -> int:
    """The largest running sum of ``delta`` (0 at least)."""
    return max(0, max(accumulate(delta), default=0))


def _raises_peak(graph: Graph, lifetimes: _Lifetimes, grouping: _Grouping) -> bool:
    """Whether the intermediates hold more at their peak when the moving groups run as fused nodes (each at
    its first member's place) than when nothing is fused. Each value counts from where it is made to its last
    read (values a group uses only inside itself count nothing when fused; graph outputs and constants are
    left out, as the memory plan leaves them). A group of one member is no group: it runs in place, and no
    reader shares its group, so it counts as unfused."""
    nodes = graph.nodes
    ends, fused_ends, several = lifetimes.ends, lifetimes.fused_ends, lifetimes.several
    group_at, shared = grouping.group_at, grouping.shared
    outputs = set(graph.outputs)
    delta = [0] * (len(nodes) + 2)
    fused_delta = [0] * (len(nodes) + 2)
    for i, node in enumerate(nodes):
        if node.op == "constant":
            continue
        outs = node.outputs
        if len(outs) == 1:
            v = outs[0]
            if v in outputs:
                continue
            nbytes = v.type.nbytes
            delta[i] += nbytes
            e = ends[i]
            delta[(e if e > i else i) + 1] -= nbytes
            g = group_at[i]
            start = i if g is None else g.first
            e = fused_ends[i]
            if g is not None and not shared[i] and e >= 0:  # read only inside its group: never stored
                continue
            fused_delta[start] += nbytes
            fused_delta[(e if e > start else start) + 1] -= nbytes
            continue
        for v in outs:  # several outputs: never grouped, so made in place
            if v in outputs:
                continue
            nbytes = v.type.nbytes
            e, fe = several.get(v, (-1, -1))
            delta[i] += nbytes
            delta[(e if e > i else i) + 1] -= nbytes
            fused_delta[i] += nbytes
            fused_delta[(fe if fe > i else i) + 1] -= nbytes
    return _peak(fused_delta) > _peak(delta)


def _rewrite(graph: Graph, groups: list[_Group], shared: bytearray, grouping: _Grouping,
             ctx: CompileContext) -> Graph:
    """The graph with each group's members replaced by one fused node at its first member's place; ``shared``
    says (by position) which values a node outside their group reads."""
    nodes = graph.nodes
    role: list[Any] = [None] * len(nodes)  # a group at its first member's place, False at its other members'
    for g in groups:
        positions = g.positions
        for i in positions:
            role[i] = False
        role[positions[0]] = g
    outputs = set(graph.outputs)
    # constants first: a fused node may read one defined after its first member. One read only by groups
    # moves into their bodies; one a node outside the groups (or the caller) reads stays.
    kept: set[Value] = set()
    for i in grouping.constant_readers:
        if role[i] is None:
            kept.update(v for v in nodes[i].inputs if v.producer is not None and v.producer.op == "constant")
    rw = Rewriter(graph, ctx)
    append, copy = rw.new.nodes.append, rw.copy
    unchanged = rw.vmap.keys().isdisjoint
    dropped = [m for g in groups for m in g.members]  # (and the constants that move into bodies)
    for i in grouping.constants:
        node = nodes[i]
        if node.outputs[0] in kept or node.outputs[0] in outputs:
            append(node)
        else:
            dropped.append(node)
    bodies: dict[tuple, dict[str, Any]] = {}  # structure -> the attributes (the body) of its fused nodes
    attr_keys: dict[tuple, tuple] = {}
    for node, r in zip(nodes, role):
        if r is None:
            if node.op == "constant":
                continue
            if unchanged(node.inputs):
                append(node)
            else:
                copy(node)
        elif r is not False:
            _emit_fused(r, rw, shared, outputs, bodies, attr_keys)
    ctx.dropped = dropped
    return rw.finish()


def _emit_fused(group: _Group, rw: Rewriter, shared: bytearray, outputs: set[Value], bodies: dict[tuple, dict],
                attr_keys: dict[tuple, tuple]) -> None:
    """Append the group's fused node; a member's value is exported when something outside the group reads it
    (``shared``, by position) or it is a graph output.

    The constants the group reads become constant nodes of its body (the kernel binds them once). Groups
    of one structure (layers, unrolled chains) share one body graph: the structure is read first, as
    tuples, and a body is built only for a structure not met before in this pass (bodies are immutable,
    so sharing is safe, and the kernel builder and the keys then see each structure once). ``attr_keys``
    holds members' attribute keys by the identities of the values (every node is alive during the pass).
    """
    members = group.members
    ref: dict[Value, Any] = {}  # value -> its place: a parameter index, -1 - member, or the constant's own value
    ref_get = ref.get
    external: list[Value] = []
    shape: list[tuple] = []
    exports = []
    positions = group.positions
    for k, node in enumerate(members):
        refs = tuple(map(ref_get, node.inputs))
        if None in refs:  # a value met first here: a parameter, or a constant the body binds
            places = []
            for v, r in zip(node.inputs, refs):
                if r is None:
                    r = ref_get(v)  # (a value this node reads twice is placed once)
                    if r is None:
                        p = v.producer
                        if p is not None and p.op == "constant":
                            r = ref[v] = v  # (a value hashes and compares by identity, as its node's id would)
                        else:
                            r = ref[v] = len(external)
                            external.append(v)
                places.append(r)
            refs = tuple(places)
        out = node.outputs[0]
        ref[out] = -1 - k
        if shared[positions[k]] or out in outputs:
            exports.append(k)
        attrs = node.attrs
        if attrs:
            ident = (tuple(attrs), tuple(map(id, attrs.values())))
            akey = attr_keys.get(ident)
            if akey is None:
                akey = attr_keys[ident] = attrs_key(attrs)
            shape.append((node.op, refs, akey, out.type))
        else:
            shape.append((node.op, refs, out.type))
    if not exports:  # a chain nothing reads (dead-node elimination disabled): the node still has an output
        exports = [len(members) - 1]
    key = (tuple(shape), tuple(zip(map(_type, external), map(_name, external))), tuple(exports))
    fused_attrs = bodies.get(key)
    if fused_attrs is None:  # (nodes of one structure share their attribute dict too: attributes are never edited)
        fused_attrs = bodies[key] = {"body": _body(members, external, exports)}
    fused = Node(FUSED_OP, rw.read(external), fused_attrs)
    if len(exports) == 1:
        old = members[exports[0]].outputs[0]
        new = Value(old.type, fused, 0)
        fused.outputs = (new,)
        rw.new.nodes.append(fused)
        rw.vmap[old] = new
        return
    outs = [members[k].outputs[0] for k in exports]
    fused.outputs = tuple([Value(v.type, fused, i) for i, v in enumerate(outs)])
    rw.new.nodes.append(fused)
    vmap = rw.vmap
    for old, new in zip(outs, fused.outputs):
        vmap[old] = new


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


_type = attrgetter("type")
_name = attrgetter("name")
