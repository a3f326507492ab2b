"""Stage 1: structural verification (rules V1-V5, V7, V8; V6 is stage 2).

A graph that reaches ``compile`` is almost always valid, so the stage first
walks it once checking the rules in their cheapest form (set lookups, one
schema lookup per op) and calls the full ``check_graph`` only when that walk
finds something, or meets a sub-graph: the problems a user sees always come
from ``check_graph``, with its wording.
"""

from __future__ import annotations

from ...errors import FrameError, VerifyError
from ...ir.graph import Graph
from ...ir.verify import check_graph
from ...ops_registry.registry import Registry
from ..context import CompileContext


def verify_structure(graph: Graph, ctx: CompileContext) -> Graph:
    """Return ``graph`` unchanged, or raise ``VerifyError`` listing every problem but type mismatches."""
    if _certainly_valid(graph, ctx.registry):
        return graph
    problems = check_graph(graph, ctx.registry, types=False)
    if problems:
        raise VerifyError(problems)
    return graph


def _certainly_valid(graph: Graph, registry: Registry) -> bool:
    """True when ``graph`` satisfies V1-V5 and V7 and has no sub-graphs; False when ``check_graph`` must look.

    V1 inputs are distinct and unproduced, every output records its node and index, nothing is defined twice;
    V2 every input is defined earlier; V3 the op exists; V4 attributes normalise; V5 the arity fits;
    V7 the outputs are values of the graph.
    """
    defined = set(graph.inputs)
    if len(defined) != len(graph.inputs) or any(v.producer is not None for v in graph.inputs):
        return False
    schemas: dict = {}
    empty_ok: set[str] = set()  # ops whose schema accepts an empty attribute dict
    arities: set[tuple[str, int]] = set()  # (op, input count) pairs the schema accepts
    for node in graph.nodes:
        if not defined.issuperset(node.inputs):
            return False
        op = node.op
        schema = schemas.get(op)
        if schema is None:
            try:
                schema = schemas[op] = registry.lookup(op)  # a stored key: no pack scope applies
            except FrameError:
                return False
        arity = (op, len(node.inputs))
        if arity not in arities:
            try:
                schema.check_arity(arity[1])
            except FrameError:
                return False
            arities.add(arity)
        attrs = node.attrs
        if attrs or op not in empty_ok:
            if any(type(a) is Graph for a in attrs.values()):
                return False  # sub-graphs: check_graph knows their rules (V8)
            try:
                schema.normalize_attrs(attrs)
            except FrameError:
                return False
            if not attrs:
                empty_ok.add(op)
        for pos, v in enumerate(node.outputs):
            if v.producer is not node or v.index != pos or v in defined:
                return False
            defined.add(v)
    return defined.issuperset(graph.outputs)
