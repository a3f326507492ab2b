"""Stage 2: type inference. Every node's output types are re-derived from its schema.

A recorded type that differs from the inferred one (a hand-built or loaded
graph) is an error naming the node (rule V6), and so is a recorded output
count that differs (V5); inference errors name the node and the op.
"""

from __future__ import annotations

from ...errors import FrameError, VerifyError
from ...ir.graph import Graph
from ...ir.keys import attrs_key
from ...ir.verify import Problem
from ..context import CompileContext


def infer_types(graph: Graph, ctx: CompileContext) -> Graph:
    """Return ``graph`` (types already agree) or raise ``VerifyError`` with one V5/V6 problem per mismatch."""
    problems = []
    schemas = ctx.registry.schemas
    memo: dict[tuple, list] = {}  # graphs repeat signatures (layers, chains): infer each once
    for index, node in enumerate(graph.nodes):
        in_types = tuple([v.type for v in node.inputs])
        key = (node.op, in_types, attrs_key(node.attrs)) if node.op != "constant" else None
        inferred = memo.get(key) if key is not None else None
        if inferred is None:
            schema = schemas[node.op]
            try:
                inferred = schema.infer(in_types, schema.normalize_attrs(node.attrs))
            except FrameError as exc:
                problems.append(Problem("V6", f"shape inference rejects the inputs: {exc}", node.op, index))
                continue
            if key is not None:
                memo[key] = inferred
        if len(inferred) != len(node.outputs):  # a variadic op whose outputs follow an edited attribute (a body)
            problems.append(Problem("V5", f"has {len(node.outputs)} outputs, the schema gives {len(inferred)}", node.op,
                                    index))
            continue
        for pos, (v, t) in enumerate(zip(node.outputs, inferred)):
            if v.type != t:
                problems.append(Problem("V6", f"output {pos} is recorded as {v.type} but inference gives {t}", node.op, index))
    if problems:
        raise VerifyError(problems)
    return graph
