"""Stage 5: common-subexpression elimination.

Two nodes with the same op, the same (already merged) inputs and equal
attributes compute the same values, so the second reads the first's outputs.
Nodes with a side effect (or a body holding one) are never merged. Constants merge when their values are
byte-identical (and small enough to compare cheaply).
"""

from __future__ import annotations

from typing import Any

from ...ir.graph import Graph
from ...ir.keys import attrs_key
from ...ops_registry.schema import node_has_side_effect
from ..context import CompileContext
from ..rewrite import Rewriter

#: Constants above this many bytes are not compared (hashing them costs more than it saves).
MAX_CONSTANT_BYTES = 1 << 16


def eliminate_common_subexpressions(graph: Graph, ctx: CompileContext) -> Graph:
    schemas = ctx.registry.schemas
    rw = Rewriter(graph)
    seen: dict[Any, Any] = {}
    merged = 0
    for node in graph.nodes:
        schema = schemas[node.op]
        inputs = tuple([rw.vmap[v] for v in node.inputs])
        if node_has_side_effect(node, schemas) or (node.op == "constant" and node.attrs["value"].nbytes > MAX_CONSTANT_BYTES):
            rw.copy(node, inputs)
            continue
        ins_key = tuple(map(id, inputs))
        if len(ins_key) == 2 and ins_key[0] > ins_key[1] and "commutative" in schema.traits:
            ins_key = (ins_key[1], ins_key[0])
        key = (node.op, ins_key, attrs_key(node.attrs))  # equal op, inputs and attributes: equal output types
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
