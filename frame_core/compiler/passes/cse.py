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


def eliminate_common_subexpressions(graph: Graph, ctx: CompileContext) -> Graph:
    schemas = ctx.registry.schemas
    rw = Rewriter(graph)
    seen: dict[Any, Any] = {}
    merged = 0
    # per op: 0 never merged (side effect), 1 ordered inputs, 2 commutative, 3 ordered unless a body has a side effect
    kinds: dict[str, int] = {}
    for node in graph.nodes:
        op = node.op
        kind = kinds.get(op)
        if kind is None:
            schema = schemas[op]
            traits = schema.traits
            kind = kinds[op] = (0 if "has_side_effect" in traits else 3 if carries_graphs(schema)
                                else 2 if "commutative" in traits else 1)
        inputs = rw.read(node.inputs)
        if not kind or (kind == 3 and node_has_side_effect(node, schemas)) or \
                (op == "constant" and node.attrs["value"].nbytes > MAX_CONSTANT_BYTES):
            rw.copy(node, inputs)
            continue
        ins_key: tuple[Value, ...] = inputs  # values hash and compare by identity
        if kind == 2 and len(inputs) == 2 and id(inputs[0]) > id(inputs[1]):
            ins_key = (inputs[1], inputs[0])
        attrs = node.attrs
        key = (op, ins_key, attrs_key(attrs) if attrs else ())  # equal op, inputs and attributes: equal output types
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = rw.copy(node, inputs)
        else:
            for old, new in zip(node.outputs, earlier.outputs):
                rw.alias(old, new)
            merged += 1
    if not merged:
        return graph
    ctx.note("eliminate_common_subexpressions", f"merged {merged} nodes")
    return rw.finish()
