"""Stage 5: common-subexpression elimination.

Two nodes with the same op, the same (already merged) inputs and equal
attributes compute the same values, so the second reads the first's outputs.
Nodes with a side effect (their op's, or one in their bodies) are never merged.
Constants merge when their values are byte-identical (and small enough to
compare cheaply); a constant that nothing live reads gives way to a later twin
(it is dead, so the later one's readers keep reading their own).
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter
from typing import Any

from ...ir.graph import Graph, Value
from ...ir.keys import attrs_key
from ...ops_registry.schema import carries_graphs, node_has_side_effect
from ..context import CompileContext
from ..rewrite import Rewriter

#: Constants above this many bytes are not compared (hashing them costs more than it saves).
MAX_CONSTANT_BYTES = 1 << 16


_inputs = attrgetter("inputs")

#: Outputs up to this many bytes are merged even when that keeps them alive longer (memory does not matter there).
SMALL_BYTES = 1 << 12


def _op_facts(ops: set[str], schemas: Any) -> tuple[set[str], set[str]]:
    """The ops (of ``ops``) with the ``has_side_effect`` trait, and those whose nodes carry sub-graphs (where a
    side effect may sit in a body: ``node_has_side_effect`` answers per node). Other ops' nodes have none."""
    effects = {op for op in ops if "has_side_effect" in schemas[op].traits}
    nested = {op for op in ops if carries_graphs(schemas[op])}
    return effects, nested


def _last_uses(graph: Graph, schemas: Any, effects: set[str], nested: set[str]) -> dict[Any, int]:
    """For each value, the position of the last node that reads it and is needed (past the end for graph
    outputs). Dead nodes, which dead-node elimination removes after this stage, do not count."""
    nodes = graph.nodes
    last: dict[Any, int] = {v: len(nodes) for v in graph.outputs}
    unread = last.keys().isdisjoint
    setdefault = last.setdefault
    for i in range(len(nodes) - 1, -1, -1):
        node = nodes[i]
        op = node.op
        if not unread(node.outputs) or op in effects or (op in nested and node_has_side_effect(node, schemas)):
            for v in node.inputs:
                setdefault(v, i)
    return last


def eliminate_common_subexpressions(graph: Graph, ctx: CompileContext) -> Graph:
    """Merge identical nodes, except an elementwise node whose earlier twin is already dead where it stands.

    Merging such a pair would keep the twin's output alive across the gap between its last use and this node:
    recomputing an elementwise op costs about what reading its stored output does, while the stored copy raises
    the peak memory (a second-order graph recomputes sin(x), 1 - tanh^2, ... far from the forward pass). So
    those are left to recompute, as at opt level 1; everything else merges.
    """
    schemas = ctx.registry.schemas
    nodes = graph.nodes
    graph_outputs = set(graph.outputs)
    ops = ctx.ops(graph)
    effects, nested = _op_facts(ops, schemas)
    # per op: 0 never merged (side effect), 1 ordered inputs, 2 commutative, 3 ordered unless a body has a side
    # effect; +4 when elementwise (recomputed rather than kept alive over a gap). With it, the op's table: its
    # nodes' inputs (with the attribute key, for a node with attributes) -> the position of the node kept for
    # them (an int: no object per node); a node without attributes is looked up by its inputs tuple itself.
    # One lookup per node gives both, and the table's setdefault files a node and finds its twin at once.
    seen: dict[str, dict[Any, int]] = {op: {} for op in ops}
    facts: dict[str, tuple[int, Any]] = {}
    for op in ops:
        traits = schemas[op].traits
        kind = ((0 if op in effects else 3 if op in nested else 2 if "commutative" in traits else 1)
                + (4 if "elementwise" in traits and op not in effects else 0))
        facts[op] = (kind, seen[op].setdefault)
    # the last uses are needed only once a twin turns up (most graphs have few or none): made on demand
    last_uses: list[dict[Any, int]] = []

    def last_use() -> dict[Any, int]:
        if not last_uses:
            last_uses.append(_last_uses(graph, schemas, effects, nested))
        return last_uses[0]

    read_values: list[set[Any]] = []

    def live(v: Any) -> bool:
        """Whether a needed node (or the caller) reads ``v``: ``v in last_use()``, answered without the backward
        walk when nothing reads ``v`` at all (a folded seed's unused twin: the walk cost 40% of the stage on a
        100k-node chain). The values read are gathered in one pass in C, on the first question."""
        if not read_values:
            read_values.append(set(chain.from_iterable(map(_inputs, nodes))))
        if v not in read_values[0] and v not in graph_outputs:
            return False
        return v in last_use()

    def ends_of(node: Any, position: int) -> int:
        """Where the outputs of ``node`` (a node of the input graph, at ``position``) are last read."""
        get = last_use().get
        outs = node.outputs
        if len(outs) == 1:
            return get(outs[0], position)
        return max([get(v, position) for v in outs], default=position)

    rw = Rewriter(graph, ctx)
    read, copy, append, alias = rw.read, rw.copy, rw.new.nodes.append, rw.alias
    unchanged = rw.vmap.keys().isdisjoint
    copies: dict[int, Any] = {}  # position -> the node kept there when it is not the input graph's own
    attr_keys: dict[tuple, tuple] = {}  # attribute keys by the values' identities (every node is alive meanwhile)
    # id of a kept elementwise node that absorbed a twin -> the last position it or a twin is read (a kept node
    # that absorbed none is read last where its own outputs are: ``ends_of``)
    live_until: dict[int, int] = {}
    dropped = []  # the nodes merged into an earlier twin
    vmap = rw.vmap  # empty until the first merge: till then every node reads its own inputs
    for position, node in enumerate(nodes):
        op = node.op
        kind, file = facts[op]
        order = kind & 3
        ins = node.inputs
        inputs = ins if not vmap or unchanged(ins) else read(ins)
        if not order or (order == 3 and node_has_side_effect(node, schemas)) or \
                (op == "constant" and node.attrs["value"].nbytes > MAX_CONSTANT_BYTES):
            if inputs is ins:
                append(node)
            else:
                copy(node, inputs)
            continue
        key: tuple[Any, ...] = inputs  # values hash and compare by identity
        if order == 2 and len(inputs) == 2 and id(inputs[0]) > id(inputs[1]):
            key = (inputs[1], inputs[0])
        attrs = node.attrs
        if attrs:
            ident = (tuple(attrs), tuple(map(id, attrs.values())))
            akey = attr_keys.get(ident)
            if akey is None:
                akey = attr_keys[ident] = attrs_key(attrs)
            key = (key, akey)  # equal op, inputs and attributes: equal output types
        # (values are never tuples: no inputs tuple equals an (inputs, attributes) pair)
        found = file(key, position)  # this node's position, unless an earlier node has its key
        if found != position:
            earlier = copies.get(found)
            if earlier is None:
                earlier = nodes[found]
            outs = node.outputs
            merge = True
            if kind & 4:  # elementwise: where its value is last read decides between merging and recomputing
                ends = ends_of(node, position)
                earlier_ends = live_until.get(id(earlier))
                if earlier_ends is None:
                    earlier_ends = ends_of(nodes[found], found)
                if earlier_ends < position and sum(v.type.nbytes for v in outs) > SMALL_BYTES:
                    merge = False  # its twin is dead here: recompute rather than keep it alive over the gap
                elif ends > earlier_ends:
                    live_until[id(earlier)] = ends
                else:
                    live_until[id(earlier)] = earlier_ends
            elif op == "constant" and not live(earlier.outputs[0]):
                merge = False  # a twin nothing live reads (dead-node elimination drops it): this one is kept instead,
                # so its readers need no rewiring (a gradient's `1 - y**2` constants once merged into a folded seed)
            if merge:
                for old, new in zip(outs, earlier.outputs):
                    alias(old, new)
                dropped.append(node)
                continue
            seen[op][key] = position  # kept: later twins find this one
        if inputs is ins:
            append(node)
        else:
            kept = copy(node, inputs)
            if kept is not node:
                copies[position] = kept
    if not dropped:
        return graph
    ctx.note("eliminate_common_subexpressions", f"merged {len(dropped)} nodes")
    ctx.dropped = dropped
    return rw.finish()
