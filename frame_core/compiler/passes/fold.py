"""Stage 4: constant folding.

A node whose inputs are all constants is evaluated once at compile time with
its CPU kernel and replaced by constants, unless it has a side effect (its
op's, or one in its bodies) or its outputs are larger than
``MAX_FOLD_ELEMENTS`` (folding would trade a cheap broadcast for a large
stored array). A kernel that fails here is left
in place, so the error surfaces at run time with the node's name.

Algebraic rewrites for a pack's ops come from that pack through the passes
hook (ops_basic contributes ``simplify_algebra``). The core's only rule:

    accumulate_internal(x, -0.0) -> x   # exact for every x, -0.0 included; x + (+0.0) is not (-0.0 + 0.0 = +0.0)
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ...ir.dtypes import as_dtype
from ...ir.graph import INSPECT_LIMIT, Graph, Value, constant_array
from ...ir.tensors import frozen
from ...ops_registry.schema import NodeContext, node_has_side_effect
from ..context import CompileContext
from ..rewrite import Rewriter

MAX_FOLD_ELEMENTS = 1 << 16


def _negative_zeros(v: Value) -> bool:
    array = constant_array(v)
    return array is not None and array.size <= INSPECT_LIMIT and not np.any(array) and bool(np.all(np.signbit(array)))


def _all_constant(values: tuple[Value, ...]) -> bool:
    for v in values:
        p = v.producer
        if p is None or p.op != "constant":
            return False
    return True


def fold_constants(graph: Graph, ctx: CompileContext) -> Graph:
    schemas = ctx.registry.schemas
    rw = Rewriter(graph)
    folded = 0
    for node in graph.nodes:
        op = node.op
        inputs = rw.read(node.inputs)
        if op == "accumulate_internal":
            a, b = inputs
            if _negative_zeros(b) or _negative_zeros(a):
                rw.alias(node.outputs[0], a if _negative_zeros(b) else b)
                folded += 1
                continue
        if op == "constant" or not inputs or not _all_constant(inputs):
            rw.copy(node, inputs)
            continue
        schema = schemas[op]
        if node_has_side_effect(node, schemas) or any(v.type.size > MAX_FOLD_ELEMENTS for v in node.outputs):
            rw.copy(node, inputs)
            continue
        arrays = [constant_array(v) for v in inputs]
        nctx = NodeContext(schema, [v.type for v in node.inputs], node.attrs, [v.type for v in node.outputs])
        try:
            result = schema.kernels["cpu"](nctx)(*arrays)
        except (Exception, SystemExit):  # surfaced at run time, with the node named
            rw.copy(node, inputs)
            continue
        results = result if isinstance(result, tuple) else (result,)
        for old, array in zip(node.outputs, results):
            array = frozen(np.asarray(array))
            if as_dtype(array.dtype) is not old.type.dtype or array.shape != old.type.shape:
                raise CompileError(
                    f"kernel of {node.op!r} returned {array.dtype}{list(array.shape)} for an output inferred as "
                    f"{old.type}; the pack's kernel and shape inference disagree"
                )
            const = rw.new.add_node("constant", (), {"value": array}, [old.type]).outputs[0]
            rw.alias(old, const)
        folded += 1
    if not folded:
        return graph
    ctx.note("fold_constants", f"folded {folded} nodes")
    return rw.finish()
