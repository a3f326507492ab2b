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


def _first_candidate(nodes: list, constants: set[Value]) -> int | None:
    """The position of the first node that might fold: one reading only constants, or an accumulation
    reading one. Nothing before it changes, so the walk starts there (``None``: nothing folds). Files the
    outputs of the constants before it in ``constants`` on the way (the caller files the later ones)."""
    issuperset, isdisjoint, add = constants.issuperset, constants.isdisjoint, constants.add
    for i, node in enumerate(nodes):
        ins = node.inputs
        if ins:
            if issuperset(ins) or (node.op == "accumulate_internal" and not isdisjoint(ins)):
                return i
        elif node.op == "constant":
            add(node.outputs[0])
    return None


def fold_constants(graph: Graph, ctx: CompileContext) -> Graph:
    nodes = graph.nodes
    constants: set[Value] = set()  # the constants' outputs, filed as the walks meet them; grows as nodes fold
    first = _first_candidate(nodes, constants)
    if first is None:
        return graph
    schemas = ctx.registry.schemas
    rw = Rewriter(graph, ctx)
    rw.keep(nodes[:first])
    read, copy, append = rw.read, rw.copy, rw.new.nodes.append
    remapped = rw.vmap.keys()
    issuperset, isdisjoint = constants.issuperset, constants.isdisjoint
    dropped = []
    folded = 0
    for node in nodes[first:]:
        ins = node.inputs
        if not ins:
            if node.op == "constant":
                constants.add(node.outputs[0])
            append(node)
            continue
        op = node.op
        if remapped.isdisjoint(ins):  # reads nothing that changed: kept as it is unless it folds itself
            if not issuperset(ins) and (op != "accumulate_internal" or isdisjoint(ins)):
                append(node)
                continue
            inputs = ins
        else:
            inputs = read(ins)
        if not issuperset(inputs):
            if op == "accumulate_internal" and not isdisjoint(inputs):
                a, b = inputs
                if _negative_zeros(b) or _negative_zeros(a):
                    rw.alias(node.outputs[0], a if _negative_zeros(b) else b)
                    dropped.append(node)
                    folded += 1
                    continue
            copy(node, inputs)
            continue
        if op == "accumulate_internal":
            a, b = inputs
            if _negative_zeros(b) or _negative_zeros(a):
                rw.alias(node.outputs[0], a if _negative_zeros(b) else b)
                dropped.append(node)
                folded += 1
                continue
        schema = schemas[op]
        if node_has_side_effect(node, schemas) or any(v.type.size > MAX_FOLD_ELEMENTS for v in node.outputs):
            copy(node, inputs)
            continue
        arrays = [constant_array(v) for v in inputs]
        nctx = NodeContext(schema, [v.type for v in node.inputs], node.attrs, [v.type for v in node.outputs])
        try:
            result = schema.kernels["cpu"](nctx)(*arrays)
        except (Exception, SystemExit):  # surfaced at run time, with the node named
            copy(node, inputs)
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
            constants.add(const)
            rw.alias(old, const)
        dropped.append(node)
        folded += 1
    if not folded:
        return graph
    ctx.note("fold_constants", f"folded {folded} nodes")
    ctx.dropped = dropped  # (what the rewrite replaced; the rest was kept or, if the caller's, copied)
    return rw.finish()
