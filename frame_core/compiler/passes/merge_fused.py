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

from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from ...ir.graph import Graph, Node, Value
from ..context import CompileContext
from ..fused import FUSED_OP
from ..rewrite import Rewriter

__all__ = ["merge_fused_groups", "merge_into_consumers", "merge_followers", "WINDOW"]


#: How many nodes after a fused node ``merge_followers`` looks at (constants aside).
WINDOW = 8


def merge_fused_groups(graph: Graph, ctx: CompileContext, fusable: dict[str, bool]) -> Graph:
    """``merge_into_consumers``, then ``merge_followers`` (see the module doc). ``fusable`` says, per op,
    whether a single node of it may join a group."""
    if not any(n.op == FUSED_OP for n in graph.nodes):
        return graph
    return merge_followers(merge_into_consumers(graph, ctx, fusable), ctx, fusable)


_op = attrgetter("op")
_inputs = attrgetter("inputs")


def _readers(graph: Graph) -> dict[Value, list[int]]:
    """The positions of each value's readers; the caller's (a graph output) counts as ``len(graph.nodes)``."""
    readers: dict[Value, list[int]] = {}
    get = readers.get
    for i, ins in enumerate(map(_inputs, graph.nodes)):
        for v in ins:
            at = get(v)
            if at is None:
                readers[v] = [i]
            else:
                at.append(i)
    end = len(graph.nodes)
    for v in graph.outputs:
        at = get(v)
        if at is None:
            readers[v] = [end]
        else:
            at.append(end)
    return readers


def _kinds(fusable: dict[str, bool]) -> Any:
    def kind(node: Node | None) -> Any:
        """The type of a node's elementwise group, or None when it cannot be merged."""
        if node is None:
            return None
        if node.op == FUSED_OP:
            return node.attrs["body"].outputs[0].type
        if fusable.get(node.op) and len(node.outputs) == 1 and node.inputs:
            return node.outputs[0].type
        return None
    return kind


def _strided(node: Node, shape: tuple[int, ...]) -> bool:
    """Whether ``node`` (a fused or single elementwise node of output shape ``shape``) reads an operand broadcast
    across inner axes (a column ``[n, 1]`` against ``[n, h]``), rather than only whole, single-element or
    repeated along leading axes. A group without such operands is one a flat loop can run (frame-native
    compiles those); a merge never brings the first one in."""
    for v in node.inputs:
        if v.type.shape == shape:  # (most operands: whole)
            continue
        dims = list(v.type.shape)
        while dims and dims[0] == 1:
            dims.pop(0)
        if len(dims) > len(shape) or tuple(dims) != shape[len(shape) - len(dims):]:
            return True
    return False


def merge_into_consumers(graph: Graph, ctx: CompileContext, fusable: dict[str, bool]) -> Graph:
    """``graph`` with elementwise producers merged into the fused nodes that consume them."""
    nodes = graph.nodes
    consumers = [i for i, op in enumerate(map(_op, nodes)) if op == FUSED_OP]
    readers: dict[Value, list[int]] | None = None  # made when the first candidate turns up
    taken: set[Node] = set()
    merged: dict[int, list[Node]] = {}  # consumer's position -> the producers it absorbs
    for here in reversed(consumers):  # the latest consumer first: it takes whole trees of producers
        node = nodes[here]
        if node in taken:
            continue
        t = node.attrs["body"].outputs[0].type
        shape = t.shape
        flat = not _strided(node, shape)
        chosen: list[Node] = []
        inside = {node}
        frontier = [v.producer for v in node.inputs]
        waiting: list[Node] = []  # producers with a reader outside: they qualify if that reader joins
        while frontier:  # a producer qualifies once every reader of it is inside or after `node`
            p = frontier.pop()
            if p is None:
                continue
            op = p.op
            if op == FUSED_OP:
                if p.attrs["body"].outputs[0].type is not t:
                    continue
            elif not fusable.get(op) or len(p.outputs) != 1 or not p.inputs or p.outputs[0].type is not t:
                continue
            if p in inside or p in taken or (flat and _strided(p, shape)):
                continue
            if readers is None:
                readers = _readers(graph)
            if _read_from(p, readers, here, nodes, inside):
                chosen.append(p)
                inside.add(p)
                frontier.extend([v.producer for v in p.inputs])
                frontier.extend(waiting)
                waiting.clear()
            else:
                waiting.append(p)
        if chosen:
            merged[here] = chosen
            taken.update(chosen)
    if not merged:
        return graph
    assert readers is not None  # (a merge needs a candidate)
    ctx.note("merge_into_consumers", f"merged {len(taken)} producers into {len(merged)} fused groups")
    ctx.dropped = [*taken, *map(nodes.__getitem__, merged)]
    position = dict(zip(nodes, range(len(nodes))))
    groups = {}
    for here, chosen in merged.items():
        at = sorted(map(position.__getitem__, chosen))
        at.append(here)
        groups[here] = at
    return _rewrite(graph, ctx, groups, readers, keep_last=True)


def _read_from(p: Node, readers: dict[Value, list[int]], here: int, nodes: list[Node], inside: set[Node]) -> bool:
    """Whether every reader of ``p``'s outputs runs after position ``here`` or is one of ``inside``."""
    for v in p.outputs:
        for r in readers.get(v, ()):
            if r <= here and nodes[r] not in inside:
                return False
    return True


def merge_followers(graph: Graph, ctx: CompileContext, fusable: dict[str, bool]) -> Graph:
    """``graph`` with each fused node merged with the elementwise nodes of its type that follow it closely
    (within ``WINDOW`` nodes) and read one of its values; the merged node runs at the last
    one's place, so the scan stops at the first other node that reads a value of the group."""
    nodes = graph.nodes
    kind = _kinds(fusable)
    taken: set[Node] = set()
    merged: dict[int, list[int]] = {}  # the position of a group's last node -> its nodes' positions, in order
    readers: dict[Value, list[int]] | None = None  # made when the first candidate turns up: most graphs have none
    for i, node in enumerate(nodes):
        if node.op != FUSED_OP or node in taken:
            continue
        t = kind(node)
        flat = not _strided(node, t.shape)
        group = [node]
        at = [i]
        made = set(node.outputs)
        seen = 0
        j = last = i  # (last: the position of the group's last node)
        while seen < WINDOW and j + 1 < len(nodes):
            j += 1
            other = nodes[j]
            if other.op == "constant":
                continue
            seen += 1
            uses_group = not made.isdisjoint(other.inputs)
            if uses_group and other not in taken and kind(other) == t and not (flat and _strided(other, t.shape)):
                group.append(other)
                at.append(j)
                made.update(other.outputs)
                last = j
            elif uses_group:  # it needs the group's values before the group's last member: stop here
                break
        if len(group) == 1:
            continue
        if readers is None:
            readers = _readers(graph)
        moved = group[:-1]
        if _stretched([v for p in moved for v in p.inputs], readers, last, set(group)) <= \
                sum(v.type.nbytes for p in moved for v in p.outputs):
            merged[last] = at
            taken.update(group)
    if not merged:
        return graph
    assert readers is not None  # (a merge needs a candidate)
    ctx.note("merge_followers", f"merged {len(taken) - len(merged)} nodes into {len(merged)} fused groups")
    ctx.dropped = list(taken)
    return _rewrite(graph, ctx, merged, readers, keep_last=False)


def _rewrite(graph: Graph, ctx: CompileContext, groups: dict[int, list[int]], readers: dict[Value, list[int]],
             keep_last: bool) -> Graph:
    """``graph`` with each group (``groups``: the position of the node at whose place it runs, its last part ->
    its parts' positions, in order) emitted as one fused node there, its other parts left out, and every other
    node kept. With ``keep_last`` the merged node returns the place node's outputs first, in order."""
    nodes = graph.nodes
    role = np.full(len(nodes), -1, np.intp)  # -1: kept; -2: a part, left out; 0: the place of a group
    role[list(chain.from_iterable(groups.values()))] = -2
    role[list(groups)] = 0
    rw = Rewriter(graph, ctx)
    bodies: dict[tuple, Graph] = {}
    copy, append = rw.copy, rw.new.nodes.append
    unchanged = rw.vmap.keys().isdisjoint
    for i, (node, r) in enumerate(zip(nodes, role.tolist())):
        if r == -1:
            if unchanged(node.inputs):
                append(node)
            else:
                copy(node)
        elif r == 0:
            _emit(nodes, groups[i], rw, readers, bodies, node.outputs if keep_last else ())
    return rw.finish()


def _stretched(values: Any, readers: dict[Value, list[int]], to: int, group: set[Node]) -> int:
    """Bytes of the planned values among ``values`` (neither graph inputs nor constants, nor made inside
    ``group``) whose last reader runs before ``to``: moving their readers to ``to`` keeps them alive longer.
    A merge is made only when this is at most the bytes of the moved nodes' outputs, which then exist only from
    ``to`` on (or not at all), so the planned peak does not grow."""
    total = 0
    for v in set(values):
        p = v.producer
        if p is None or p.op == "constant" or p in group:
            continue
        if max(readers.get(v, (0,))) < to:
            total += v.type.nbytes
    return total


def _emit(nodes: list[Node], positions: list[int], rw: Rewriter, readers: dict[Value, list[int]], bodies: dict,
          keep: tuple[Value, ...] = ()) -> None:
    """One fused node running the parts at ``positions`` (fused nodes or single elementwise nodes, in order). It
    returns the values of ``keep`` and every value a node outside the parts (or the caller) reads, in order.
    Merges of one structure (the layers of a network, the steps of an unrolled chain) share one body
    (``bodies``, by structure), as ``fuse_elementwise``'s groups do: the kernel builder and the cache key then
    see each structure once."""
    parts = list(map(nodes.__getitem__, positions))
    made: dict[Value, tuple[int, int]] = {}  # a graph value made inside the merge -> (part, output)
    made_get = made.get
    external: dict[Value, int] = {}  # a graph value read from outside -> its input position
    structure: list[Any] = []
    for k, p in enumerate(parts):
        wires: list[Any] = []  # (part, output) for a value made inside, an input position for one from outside
        for v in p.inputs:
            wire: Any = made_get(v)
            if wire is None:
                wire = external.get(v)
                if wire is None:
                    wire = external[v] = len(external)
            wires.append(wire)
        outs = p.outputs
        if p.op == FUSED_OP:
            structure.append((id(p.attrs["body"]), tuple(wires)))
        else:
            structure.append((p.op, id(p.attrs) if p.attrs else None, outs[0].type, tuple(wires)))
        if len(outs) == 1:
            made[outs[0]] = (k, 0)
        else:
            for j, v in enumerate(outs):
                made[v] = (k, j)
    outer = list(external)
    at = set(positions)
    superset = at.issuperset
    get = readers.get
    exports = [v for p in parts for v in p.outputs if v in keep or not superset(get(v, ()))]
    key = (tuple(structure), tuple([v.type for v in outer]), tuple([made[v] for v in exports]))
    body = bodies.get(key)
    if body is None:
        body = bodies[key] = _body(parts, outer, exports)
    fused = Node(FUSED_OP, rw.read(outer), {"body": body})
    fused.outputs = tuple([Value(v.type, fused, j) for j, v in enumerate(exports)])
    rw.new.nodes.append(fused)
    vmap = rw.vmap
    for old, new in zip(exports, fused.outputs):
        vmap[old] = new


def _body(parts: list[Node], outer: list[Value], exports: list[Value]) -> Graph:
    """The body of a merge: ``parts``' members in order, reading ``outer`` as its inputs, returning ``exports``."""
    body = Graph("fused")
    made: dict[Value, Value] = {v: body.add_input(v.type, v.name) for v in outer}
    for p in parts:
        if p.op == FUSED_OP:
            part = p.attrs["body"]
            bmap = {b: made[v] for b, v in zip(part.inputs, p.inputs)}
            for n in part.nodes:
                new = Node(n.op, tuple(bmap[v] for v in n.inputs), n.attrs)  # (constants too: no inputs)
                new.outputs = (Value(n.outputs[0].type, new, 0),)
                bmap[n.outputs[0]] = new.outputs[0]
                body.nodes.append(new)
            outs = [bmap[v] for v in part.outputs]
        else:
            new = Node(p.op, tuple(made[v] for v in p.inputs), p.attrs)
            new.outputs = (Value(p.outputs[0].type, new, 0),)
            body.nodes.append(new)
            outs = [new.outputs[0]]
        for v, b in zip(p.outputs, outs):
            made[v] = b
    body.outputs.extend(made[v] for v in exports)
    return body
