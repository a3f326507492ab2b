"""Stage 5: common-subexpression elimination.

Two nodes with the same op, the same (already merged) inputs and equal
attributes compute the same values, so the second reads the first's outputs.
Nodes with a side effect (their op's, or one in their bodies) are never merged.
Constants merge when their values are byte-identical (and small enough to
compare cheaply).
"""

from __future__ import annotations

from typing import Any

from ...ir.graph import Graph, Value
from ...ir.keys import attrs_key
from ...ops_registry.schema import carries_graphs, node_has_side_effect
from ..context import CompileContext
from ..rewrite import Rewriter

#: Constants above this many bytes are not compared (hashing them costs more than it saves).
MAX_CONSTANT_BYTES = 1 << 16


#: Outputs up to this many bytes are merged even when that keeps them alive longer (memory does not matter there).
SMALL_BYTES = 1 << 12


def _last_uses(graph: Graph, schemas: Any) -> dict[Any, int]:
    """For each value, the position of the last node that reads it and is needed (past the end for graph
    outputs). Dead nodes, which dead-node elimination removes after this stage, do not count."""
    last: dict[Any, int] = {v: len(graph.nodes) for v in graph.outputs}
    for i in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[i]
        if any(v in last for v in node.outputs) or node_has_side_effect(node, schemas):
            for v in node.inputs:
                last.setdefault(v, i)
    return last


def eliminate_common_subexpressions(graph: Graph, ctx: CompileContext) -> Graph:
    """Merge identical nodes, except an elementwise node whose earlier twin is already dead where it stands.

    Merging such a pair would keep the twin's output alive across the gap between its last use and this node:
    recomputing an elementwise op costs about what reading its stored output does, while the stored copy raises
    the peak memory (a second-order graph recomputes sin(x), 1 - tanh^2, ... far from the forward pass). So
    those are left to recompute, as at opt level 1; everything else merges.
    """
    schemas = ctx.registry.schemas
    rw = Rewriter(graph)
    seen: dict[Any, Any] = {}
    merged = 0
    # per op: 0 never merged (side effect), 1 ordered inputs, 2 commutative, 3 ordered unless a body has a side
    # effect; +4 when elementwise (recomputed rather than kept alive over a gap)
    kinds: dict[str, int] = {}
    last_use = _last_uses(graph, schemas)
    live_until: dict[int, int] = {}  # id of a kept node -> the last position anything merged into it is read
    for position, node in enumerate(graph.nodes):
        op = node.op
        kind = kinds.get(op)
        if kind is None:
            schema = schemas[op]
            traits = schema.traits
            kind = kinds[op] = ((0 if "has_side_effect" in traits else 3 if carries_graphs(schema)
                                 else 2 if "commutative" in traits else 1)
                                + (4 if "elementwise" in traits and "has_side_effect" not in traits else 0))
        inputs = rw.read(node.inputs)
        if not kind & 3 or (kind & 3 == 3 and node_has_side_effect(node, schemas)) or \
                (op == "constant" and node.attrs["value"].nbytes > MAX_CONSTANT_BYTES):
            rw.copy(node, inputs)
            continue
        ins_key: tuple[Value, ...] = inputs  # values hash and compare by identity
        if kind & 3 == 2 and len(inputs) == 2 and id(inputs[0]) > id(inputs[1]):
            ins_key = (inputs[1], inputs[0])
        attrs = node.attrs
        key = (op, ins_key, attrs_key(attrs) if attrs else ())  # equal op, inputs and attributes: equal output types
        earlier = seen.get(key)
        ends = max([last_use.get(v, position) for v in node.outputs], default=position)
        if earlier is not None and kind & 4 and live_until[id(earlier)] < position \
                and sum(v.type.nbytes for v in node.outputs) > SMALL_BYTES:
            earlier = None  # its twin is dead here: recompute rather than keep it alive over the gap
        if earlier is None:
            seen[key] = copy = rw.copy(node, inputs)
            live_until[id(copy)] = ends
        else:
            for old, new in zip(node.outputs, earlier.outputs):
                rw.alias(old, new)
            if ends > live_until[id(earlier)]:
                live_until[id(earlier)] = ends
            merged += 1
    if not merged:
        return graph
    ctx.note("eliminate_common_subexpressions", f"merged {merged} nodes")
    return rw.finish()
