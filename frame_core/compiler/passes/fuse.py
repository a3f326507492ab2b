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

from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from ...ir.graph import Graph, Node, Value
from ...ir.keys import attrs_key
from ..fused import FUSED_OP
from ..context import CompileContext
from ..rewrite import Rewriter
from .merge_fused import merge_fused_groups


_inputs = attrgetter("inputs")
_outputs = attrgetter("outputs")
_first = itemgetter(0)
_nbytes = attrgetter("type.nbytes")
_UNDEFINED = repeat(-1)  # (position.get's default for every input: a graph input)


class _Group:
    """A group of ``find_groups``: its members in graph order, their positions, its first position and type."""

    __slots__ = ("first", "last", "members", "positions", "type")

    def __init__(self, nodes: list[Node], positions: list[int]) -> None:
        self.first = positions[0]
        self.last = positions[-1]
        self.members = [nodes[i] for i in positions]
        self.positions = positions
        self.type = self.members[0].outputs[0].type


class _Grouping:
    """Both groupings of a graph (``_group``), each as the lists of its groups' member positions (groups of two
    or more, ordered by their first member), with what the peak comparison and the rewrite need, by position
    (arrays of ``len(nodes)``): the first member of each node's moving group (``head``, -1 for a node in no
    group; a group of one counts), whether a node outside the value's group reads it (``shared``, and
    ``adjacent_shared`` for the adjacent grouping), the constants' positions, and the positions of nodes that
    read a constant (once per read).

    With ``track``, also the last reader's position of each value (``ends``, -1 for none) and the latest place a
    reader runs once moving groups run at their first member's place (``fused_ends``); the values of nodes with
    several outputs (never grouped) are kept apart, by value, in ``several`` as ``[end, fused end]``."""

    __slots__ = ("moving", "adjacent", "head", "shared", "adjacent_shared", "constants", "constant_readers",
                 "ends", "fused_ends", "several", "nodes", "single", "position")

    moving: list[list[int]]
    adjacent: list[list[int]]
    head: Any
    shared: Any
    adjacent_shared: Any
    constants: list[int]
    constant_readers: list[int]
    ends: Any
    fused_ends: Any
    several: dict[Value, list[int]]
    single: Any
    nodes: list[Node]
    position: dict[Value, int]


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
    grouping = _group(graph.nodes, _fusable_ops(graph, ctx), False)
    return [_Group(graph.nodes, g) for g in (grouping.adjacent if contiguous else grouping.moving)]


def _group(nodes: list[Node], fusable: dict[str, bool], track: bool) -> _Grouping:
    """Both groupings of ``find_groups`` in one walk: the groups of two or more members without
    (``moving``) and with ``contiguous`` (``adjacent``). With ``track``, also what the peak comparison needs
    (``_raises_peak``) for the moving groups.

    One walk over the nodes, each in a few list reads: a value is found by its producer's position (one
    dictionary lookup per input, made in C), a group by its first member's position
    (``head``, ``adjacent``; a node's own position when it starts a group), and a group's type is any member's.
    In the adjacent grouping, a node can join only the group of the node just before it (constants aside),
    and every non-member between a group's first member and a node joining it is a constant, so each outside
    input is defined before the group starts: adjacency is the only test. Who reads what (``shared``, the
    lifetimes) is then answered for all reads at once, on arrays, once the groups are known.
    """
    n = len(nodes)
    out = _Grouping()
    position: dict[Value, int] = {}  # where each value is defined: -2 for constants (hoisted to the front)
    where = position.get  # (-1 for a graph input)
    reads: list[int] = []  # every input's producer position, in order
    add_reads = reads.extend
    counts = [0] * n  # inputs per node
    one_output = [True] * n
    constants: list[int] = []
    # lists of n + 2: positions -1 (graph inputs) and -2 (constants) read the last two entries, in no group
    head, adjacent = [-1] * (n + 2), [-1] * (n + 2)
    type_at: list[Any] = [None] * (n + 2)
    members: list[Any] = [None] * n  # a group's member positions, at its first member's (made at the second)
    adjacent_members: list[Any] = [None] * n
    before = -1  # the node before this one, constants aside
    for i, node in enumerate(nodes):
        outs = node.outputs
        if node.op == "constant":
            for v in outs:
                position[v] = -2
            constants.append(i)
            continue
        ins = node.inputs
        ps = list(map(where, ins, _UNDEFINED))
        add_reads(ps)
        counts[i] = len(ps)
        if len(outs) != 1 or not ps or not fusable[node.op]:
            for v in outs:
                position[v] = i
            if len(outs) != 1:
                one_output[i] = False
            before = i
            continue
        value = outs[0]
        position[value] = i
        t = value.type
        type_at[i] = t
        near = adjacent[before]
        if near >= 0 and type_at[before] is not t:
            near = -1
        before = i
        if len(ps) == 1:  # its one input is the group's own value
            p = ps[0]
            chosen = head[p] if type_at[p] is t else i
            if near >= 0 and adjacent[p] != near:
                near = i
        else:
            chosen = i
            for p in ps:
                if type_at[p] is t:
                    first = head[p]
                    for q in ps:  # every outside input is defined before the group starts
                        if q >= first and head[q] != first:
                            break
                    else:
                        chosen = first
                        break
            if near >= 0:
                for p in ps:
                    if adjacent[p] == near:
                        break
                else:
                    near = i
        head[i] = chosen
        if chosen != i:
            group = members[chosen]
            if group is None:
                members[chosen] = [chosen, i]
            else:
                group.append(i)
        if near >= 0 and near != i:
            adjacent[i] = near
            group = adjacent_members[near]
            if group is None:
                adjacent_members[near] = [near, i]
            else:
                group.append(i)
        else:
            adjacent[i] = i
    n_in = np.array(counts, np.intp)
    out.position = position
    out.nodes = nodes
    out.moving = list(filter(None, members))
    out.adjacent = list(filter(None, adjacent_members))
    out.constants = constants
    out.single = single = np.array(one_output, bool)
    # every read at once: reader i, producer p (>= 0: a node; -1: a graph input; -2: a constant)
    p_all = np.array(reads, np.intp)
    i_all = np.repeat(np.arange(n), n_in)
    out.constant_readers = i_all[p_all == -2].tolist()
    node_read = p_all >= 0
    p_all, i_all = p_all[node_read], i_all[node_read]
    heads, adjacents = np.array(head[:n], np.intp), np.array(adjacent[:n], np.intp)
    out.head = heads
    shared = np.zeros(n, bool)  # read by a node outside its group (a node in no group: its head is -1)
    shared[p_all[heads[p_all] != heads[i_all]]] = True
    adjacent_shared = np.zeros(n, bool)
    adjacent_shared[p_all[adjacents[p_all] != adjacents[i_all]]] = True
    out.shared, out.adjacent_shared = shared, adjacent_shared
    out.several = {}
    if track:
        here = np.where(heads >= 0, heads, np.arange(n))  # where each node runs once groups run at their first
        several = ~single[p_all]  # reads of a value of a node with several outputs
        if several.any():
            records = out.several
            for i in np.flatnonzero(~single).tolist():
                for v in nodes[i].outputs:
                    records[v] = [-1, -1]
            values = list(chain.from_iterable(map(_inputs, nodes)))
            for k, i in zip(np.flatnonzero(node_read)[several].tolist(), i_all[several].tolist()):
                record = records[values[k]]
                record[0] = i
                record[1] = max(record[1], int(here[i]))
            p_all, i_all = p_all[~several], i_all[~several]
        ends = np.full(n, -1, np.intp)
        np.maximum.at(ends, p_all, i_all)
        fused_ends = np.full(n, -1, np.intp)
        np.maximum.at(fused_ends, p_all, here[i_all])
        out.ends, out.fused_ends = ends, fused_ends
    return out


def fuse_elementwise(graph: Graph, ctx: CompileContext) -> Graph:
    fused = ctx.registry.schemas.get(FUSED_OP)
    if fused is None or ctx.backend not in fused.kernels:  # nothing could run the fused node (it is cpu-only)
        return graph
    fusable = _fusable_ops(graph, ctx)
    grouping = _group(graph.nodes, fusable, True)
    groups, shared = grouping.moving, grouping.shared
    if not groups:
        return graph
    # A member moved ahead of other nodes makes its value earlier and keeps it alive longer: over a whole
    # backward pass (a second-order graph recomputing 1 - tanh^2 far from the forward's tanh) that can raise the
    # peak memory above the unfused graph's. Then fuse only runs of adjacent nodes, which moves nothing.
    if any(g[-1] - g[0] >= len(g) for g in groups) and _raises_peak(graph, grouping):
        groups, shared = grouping.adjacent, grouping.adjacent_shared
        ctx.note("fuse_elementwise", "fused adjacent runs only: moving members would raise the peak memory")
        if not groups:
            return graph
    ctx.note("fuse_elementwise", f"fused {sum(map(len, groups))} nodes into {len(groups)} groups")
    return merge_fused_groups(_rewrite(graph, groups, shared, grouping, ctx), ctx, fusable)


def _raises_peak(graph: Graph, grouping: _Grouping) -> bool:
    """Whether the intermediates hold more at their peak when the moving groups run as fused nodes (each at
    its first member's place) than when nothing is fused. Each value counts from where it is made to its last
    read (values a group uses only inside itself count nothing when fused; graph outputs and constants are
    left out, as the memory plan leaves them). A group of one member is no group: it runs in place, and no
    reader shares its group, so it counts as unfused."""
    nodes, single = grouping.nodes, grouping.single
    n = len(nodes)
    outputs = set(graph.outputs)
    counted = single.copy()
    counted[grouping.constants] = False
    position = grouping.position
    for v in outputs:  # (a value of a node with several outputs is looked up by value below)
        i = position.get(v, -1)
        if i >= 0:
            counted[i] = False
    at = np.flatnonzero(counted)
    nbytes = np.fromiter(map(_nbytes, map(_first, map(_outputs, map(nodes.__getitem__, at.tolist())))), np.int64,
                         len(at))
    ends, fused_ends, heads = grouping.ends[at], grouping.fused_ends[at], grouping.head[at]
    delta = np.zeros(n + 2, np.int64)
    fused_delta = np.zeros(n + 2, np.int64)
    delta[at] += nbytes
    np.add.at(delta, np.maximum(ends, at) + 1, -nbytes)
    stored = (heads < 0) | grouping.shared[at] | (fused_ends < 0)  # else read only inside its group: never stored
    start = np.where(heads >= 0, heads, at)[stored]
    nbytes = nbytes[stored]
    np.add.at(fused_delta, start, nbytes)
    np.add.at(fused_delta, np.maximum(fused_ends[stored], start) + 1, -nbytes)
    several = grouping.several
    for i in np.flatnonzero(~single).tolist():  # several outputs: never grouped, so made in place
        for v in nodes[i].outputs:
            if v in outputs:
                continue
            size = v.type.nbytes
            e, fe = several.get(v, (-1, -1))
            delta[i] += size
            delta[(e if e > i else i) + 1] -= size
            fused_delta[i] += size
            fused_delta[(fe if fe > i else i) + 1] -= size
    return _peak(fused_delta) > _peak(delta)


def _peak(delta: Any) -> int:
    """The largest running sum of ``delta`` (0 at least)."""
    return max(0, int(np.cumsum(delta).max())) if len(delta) else 0


def _rewrite(graph: Graph, groups: list[list[int]], shared: Any, grouping: _Grouping, ctx: CompileContext) -> Graph:
    """The graph with each group (its members' positions) replaced by one fused node at its first member's
    place; ``shared`` says (by position) which values a node outside their group reads."""
    nodes = graph.nodes
    n = len(nodes)
    outputs = set(graph.outputs)
    exported = shared.copy()  # read outside the group, or by the caller
    position = grouping.position
    for v in outputs:
        i = position.get(v, -1)
        if i >= 0:
            exported[i] = True
    role = np.full(n, -1, np.intp)  # -1: kept; -2: a member after its group's first; -3: a constant; k: group k
    role[list(chain.from_iterable(groups))] = -2
    role[[g[0] for g in groups]] = np.arange(len(groups))
    # constants first: a fused node may read one defined after its first member. One read only by groups
    # moves into their bodies; one a node outside the groups (or the caller) reads stays.
    constants = grouping.constants
    kept: set[Value] = set()
    readers = grouping.constant_readers
    if readers:
        for i in np.asarray(readers)[role[readers] == -1].tolist():
            kept.update(v for v in nodes[i].inputs if v.producer is not None and v.producer.op == "constant")
    role[constants] = -3
    rw = Rewriter(graph, ctx)
    append, copy = rw.new.nodes.append, rw.copy
    unchanged = rw.vmap.keys().isdisjoint
    dropped = list(map(nodes.__getitem__, chain.from_iterable(groups)))  # (and the constants that move into bodies)
    for i in constants:
        node = nodes[i]
        if node.outputs[0] in kept or node.outputs[0] in outputs:
            append(node)
        else:
            dropped.append(node)
    bodies: dict[tuple, dict[str, Any]] = {}  # structure -> the attributes (the body) of its fused nodes
    attr_keys: dict[tuple, tuple] = {}
    exported_at = exported.tolist()
    walked = np.flatnonzero(role >= -1)  # (the members after a group's first, and the constants, are placed)
    for node, r in zip(map(nodes.__getitem__, walked.tolist()), role[walked].tolist()):
        if r < 0:
            if unchanged(node.inputs):
                append(node)
            else:
                copy(node)
        else:
            _emit_fused(nodes, groups[r], rw, exported_at, bodies, attr_keys)
    ctx.dropped = dropped
    return rw.finish()


def _emit_fused(nodes: list[Node], positions: list[int], rw: Rewriter, exported: list[bool],
                bodies: dict[tuple, dict], attr_keys: dict[tuple, tuple]) -> None:
    """Append the fused node of the group of ``positions``; a member's value is exported when something outside
    the group (or the caller) reads it (``exported``, by position).

    The constants the group reads become constant nodes of its body (the kernel binds them once). Groups
    of one structure (layers, unrolled chains) share one body graph: the structure is read first, as
    tuples, and a body is built only for a structure not met before in this pass (bodies are immutable,
    so sharing is safe, and the kernel builder and the keys then see each structure once). ``attr_keys``
    holds members' attribute keys by the identities of the values (every node is alive during the pass).
    """
    ref: dict[Value, Any] = {}  # value -> its place: a parameter index, -1 - member, or the constant's own value
    ref_get = ref.get
    external: list[Value] = []
    shape: list[tuple] = []
    exports = []
    k = -1  # (-1 - the member's index)
    for at in positions:
        node = nodes[at]
        places = []
        for v in node.inputs:
            r = ref_get(v)
            if r is None:  # a value met first here: a parameter, or a constant the body binds
                p = v.producer
                if p is not None and p.op == "constant":
                    r = ref[v] = v  # (a value hashes and compares by identity, as its node's id would)
                else:
                    r = ref[v] = len(external)
                    external.append(v)
            places.append(r)
        out = node.outputs[0]
        ref[out] = k
        if exported[at]:
            exports.append(-1 - k)
        attrs = node.attrs
        if attrs:
            ident = (tuple(attrs), tuple(map(id, attrs.values())))
            akey = attr_keys.get(ident)
            if akey is None:
                akey = attr_keys[ident] = attrs_key(attrs)
            shape.append((node.op, tuple(places), akey, out.type))
        else:
            shape.append((node.op, tuple(places), out.type))
        k -= 1
    if not exports:  # a chain nothing reads (dead-node elimination disabled): the node still has an output
        exports = [len(positions) - 1]
    key = (tuple(shape), tuple(zip(map(_type, external), map(_name, external))), tuple(exports))
    fused_attrs = bodies.get(key)
    if fused_attrs is None:  # (nodes of one structure share their attribute dict too: attributes are never edited)
        fused_attrs = bodies[key] = {"body": _body(list(map(nodes.__getitem__, positions)), external, exports)}
    fused = Node(FUSED_OP, rw.read(external), fused_attrs)
    vmap = rw.vmap
    if len(exports) == 1:
        old = nodes[positions[exports[0]]].outputs[0]
        new = Value(old.type, fused, 0)
        fused.outputs = (new,)
        rw.new.nodes.append(fused)
        vmap[old] = new
        return
    outs = [nodes[positions[k]].outputs[0] for k in exports]
    fused.outputs = tuple([Value(v.type, fused, i) for i, v in enumerate(outs)])
    rw.new.nodes.append(fused)
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
