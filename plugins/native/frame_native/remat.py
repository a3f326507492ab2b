"""The ``recompute_in_readers`` pass: a compiled group recomputes a cheap value instead of reading it back.

A derivative graph's forward groups export values such as ``1 - y^2`` and ``y * (1 - y^2)`` that one compiled
group of the backward pass reads much later. Each such export costs a full write and a full read of an
``[n, h]`` array (the groups are memory-bound: a group writing five ``[256, 64]`` values runs about 2.5x as
long as one writing one), where the reader could compute it again from values it already reads. This pass
moves the computation: when an export of a compiled group ``P`` is read by exactly one other compiled group
``G`` (and is not a graph output), and the members computing it in ``P`` (at most ``MAX_MEMBERS``) read only
``P``'s inputs that ``G`` reads too (or small broadcast operands, rows of at most ``G``'s period), those members
are copied into ``G``'s body ahead of its own, ``G`` reads their inputs instead, and ``P`` stops exporting the
value (its members that nothing else needs are dropped). Each copied member runs the same operation on the
same values as in ``P``, so every result keeps its bits. A group that receives values keeps all its exports
in this pass (one step at a time, no chains), and a new body that does not compile leaves both groups alone.
"""

from __future__ import annotations

from typing import Any

from frame_core import Graph, Node, Rewriter, Value

from .tiered import NATIVE_OP

__all__ = ["MAX_MEMBERS", "recompute_in_readers"]

#: Most members copied for one value: a few cheap operations per element, against a write and a read.
MAX_MEMBERS = 6


def _cone(body: Graph, value: Value) -> list[Node]:
    """The members (and constants) of ``body`` that compute ``value``, in body order."""
    need: set[Node] = set()
    stack = [value.producer] if value.producer is not None else []
    while stack:
        node = stack.pop()
        if node in need:
            continue
        need.add(node)
        stack.extend(v.producer for v in node.inputs if v.producer is not None)
    return [n for n in body.nodes if n in need]


def _candidate(graph_outputs: set[Value], readers: dict[Value, list[Node]], p: Node,
               j: int) -> tuple[Node, list[Node]] | None:
    """(G, the members to copy) when ``p``'s export ``j`` can be recomputed by its one reader G, else None."""
    v = p.outputs[j]
    rs = readers.get(v, [])
    if v in graph_outputs or len(rs) != 1 or rs[0].op != NATIVE_OP or rs[0] is p:
        return None
    g = rs[0]
    body: Graph = p.attrs["body"]
    cone = _cone(body, body.outputs[j])
    if not cone or sum(1 for n in cone if n.op != "constant") > MAX_MEMBERS:
        return None
    position = {b: i for i, b in enumerate(body.inputs)}
    size = g.outputs[0].type.size
    for n in cone:
        for u in n.inputs:
            if u in position and p.inputs[position[u]] not in g.inputs and p.inputs[position[u]].type.size >= size:
                return None  # a new full-size stream for G: no saving
    return g, cone


def _grown_body(g: Node, gifts: list[tuple[Node, int, list[Node]]]) -> tuple[Graph, list[Value]]:
    """G's body computing the gifted values itself, and its new outer inputs."""
    old: Graph = g.attrs["body"]
    new = Graph(old.name)
    outer: list[Value] = []
    by_outer: dict[Value, Value] = {}

    def read(u: Value) -> Value:
        inner = by_outer.get(u)
        if inner is None:
            inner = by_outer[u] = new.add_input(u.type, u.name)
            outer.append(u)
        return inner

    gifted = {p.outputs[j] for p, j, _ in gifts}
    for u in g.inputs:  # G's own inputs first, in their order
        if u not in gifted:
            read(u)
    made: dict[Value, Value] = {}  # gifted outer value -> its value in the new body
    for p, j, cone in gifts:
        body: Graph = p.attrs["body"]
        position = {b: i for i, b in enumerate(body.inputs)}
        vmap: dict[Value, Value] = {}
        for n in cone:
            copy = Node(n.op, tuple(vmap[x] if x in vmap else read(p.inputs[position[x]]) for x in n.inputs), n.attrs)
            copy.outputs = (Value(n.outputs[0].type, copy, 0),)
            new.nodes.append(copy)
            vmap[n.outputs[0]] = copy.outputs[0]
        made[p.outputs[j]] = vmap[body.outputs[j]]
    inner_of = {b: (made[u] if u in made else by_outer[u]) for b, u in zip(old.inputs, g.inputs)}
    for n in old.nodes:
        copy = Node(n.op, tuple(inner_of[x] for x in n.inputs), n.attrs)
        copy.outputs = tuple([Value(o.type, copy, k) for k, o in enumerate(n.outputs)])
        new.nodes.append(copy)
        for o, c in zip(n.outputs, copy.outputs):
            inner_of[o] = c
    new.outputs.extend(inner_of[o] for o in old.outputs)
    return new, outer


def _shrunk_body(p: Node, dropped: set[int]) -> tuple[Graph, list[Value], list[int]]:
    """P's body without the exports ``dropped`` and the members only they needed; its outer inputs; the
    positions of the exports kept."""
    old: Graph = p.attrs["body"]
    kept = [j for j in range(len(old.outputs)) if j not in dropped]
    need: set[Node] = set()
    for j in kept:
        need.update(_cone(old, old.outputs[j]))
    new = Graph(old.name)
    vmap: dict[Value, Value] = {}
    outer: list[Value] = []
    read_inputs = {u for n in need for u in n.inputs}
    for b, u in zip(old.inputs, p.inputs):
        if b in read_inputs:
            vmap[b] = new.add_input(b.type, b.name)
            outer.append(u)
    for n in old.nodes:
        if n not in need:
            continue
        copy = Node(n.op, tuple(vmap[x] for x in n.inputs), n.attrs)
        copy.outputs = tuple([Value(o.type, copy, k) for k, o in enumerate(n.outputs)])
        new.nodes.append(copy)
        for o, c in zip(n.outputs, copy.outputs):
            vmap[o] = c
    new.outputs.extend(vmap[old.outputs[j]] for j in kept)
    return new, outer, kept


def recompute_in_readers(graph: Graph, ctx: Any) -> Graph:
    natives = [n for n in graph.nodes if n.op == NATIVE_OP]
    if len(natives) < 2:
        return graph
    # only the values of compiled groups with several outputs are looked at (``_candidate``): their readers
    # alone are gathered, each reader once per value, in graph order
    wanted = {v for p in natives if len(p.outputs) >= 2 for v in p.outputs}
    if not wanted:
        return graph
    disjoint = wanted.isdisjoint
    readers: dict[Value, list[Node]] = {}
    for node in graph.nodes:
        if disjoint(node.inputs):
            continue
        for u in dict.fromkeys(node.inputs):
            if u in wanted:
                readers.setdefault(u, []).append(node)
    graph_outputs = set(graph.outputs)
    gifts: dict[Node, list[tuple[Node, int, list[Node]]]] = {}
    for p in natives:
        if len(p.outputs) < 2:
            continue
        for j in range(len(p.outputs)):
            found = _candidate(graph_outputs, readers, p, j)
            if found is not None:
                gifts.setdefault(found[0], []).append((p, j, found[1]))
    givers = {p for gs in gifts.values() for p, _, _ in gs}
    gifts = {g: gs for g, gs in gifts.items() if g not in givers}  # a receiver gives nothing this pass
    if not gifts:
        return graph
    from .passes import _verdict

    packs: dict[str, str | None] = {}
    grown: dict[Node, tuple[Graph, list[Value]]] = {}
    for g, gs in gifts.items():
        body, outer = _grown_body(g, gs)
        if _verdict(body, packs, ctx.registry.schemas) is None:
            grown[g] = (body, outer)
    dropped: dict[Node, set[int]] = {}
    for g in grown:
        for p, j, _ in gifts[g]:
            dropped.setdefault(p, set()).add(j)
    dropped = {p: js for p, js in dropped.items() if len(js) < len(p.outputs)}
    if not grown:
        return graph
    rw = Rewriter(graph, ctx)
    moved = 0
    for node in graph.nodes:
        if node in grown:
            body, outer = grown[node]
            new = Node(NATIVE_OP, rw.read(outer), {**node.attrs, "body": body})
            new.outputs = tuple([Value(v.type, new, i) for i, v in enumerate(node.outputs)])
            rw.new.nodes.append(new)
            for old, value in zip(node.outputs, new.outputs):
                rw.alias(old, value)
            moved += len(gifts[node])
        elif node in dropped:
            body, outer, kept = _shrunk_body(node, dropped[node])
            new = Node(NATIVE_OP, rw.read(outer), {**node.attrs, "body": body})
            new.outputs = tuple([Value(node.outputs[j].type, new, k) for k, j in enumerate(kept)])
            rw.new.nodes.append(new)
            for k, j in enumerate(kept):
                rw.alias(node.outputs[j], new.outputs[k])
        else:
            rw.copy(node)
    ctx.note("recompute_in_readers", f"{moved} values recomputed by their one compiled reader instead of read back")
    ctx.dropped = [*grown, *dropped]
    return rw.finish()
