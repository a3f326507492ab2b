"""Stage 3: decomposition.

A node whose op has no kernel for the target backend (or whose op is named
in ``compile(..., decompose=...)``) is replaced by its schema's DecomposeFn
graph, inlined and decomposed again recursively. An op with neither a kernel
nor a DecomposeFn is a ``CompileError`` naming the op and the backend.
The core's ``zeros_like_internal`` (zeros read off an operand's type) is always
replaced so: compiled, it is the constant it stands for.
"""

from __future__ import annotations

from collections import Counter

from ...errors import CompileError, FrameError
from ...ir.graph import Graph, inline_graph
from ...ops_registry.registry import op_scope
from ...ops_registry.schema import NodeContext, node_has_side_effect
from ..context import CompileContext
from ..rewrite import Rewriter

MAX_DEPTH = 16


def _needs(op: str, ctx: CompileContext) -> bool:
    if op == "constant":  # lowering preloads constants on every backend; they need no kernel
        return False
    if op == "zeros_like_internal":  # the core's shape-free zero cotangent: a constant once the shapes are compiled
        return True
    return op in ctx.decompose or ctx.backend not in ctx.registry.schemas[op].kernels


def decompose(graph: Graph, ctx: CompileContext, depth: int = 0) -> Graph:
    if not any(_needs(op, ctx) for op in ctx.ops(graph)):
        return graph
    if depth > MAX_DEPTH:
        raise CompileError(f"decomposition did not terminate after {MAX_DEPTH} rounds (a DecomposeFn uses its own op?)")
    rw = Rewriter(graph, ctx)
    shape_only = []  # the operands zeros_like_internal read for their type: maybe needed by nothing else now
    for node in graph.nodes:
        if not _needs(node.op, ctx):
            rw.copy(node)
            continue
        if node.op == "zeros_like_internal":
            shape_only.append(rw.vmap[node.inputs[0]])
        schema = ctx.registry.schemas[node.op]
        if schema.decomposition is None:
            raise CompileError(
                f"op {node.op!r} has no kernel for backend {ctx.backend!r} (it has: {', '.join(schema.kernels)}) "
                f"and no DecomposeFn; use a backend it supports or install a pack that provides one"
            )
        nctx = NodeContext(schema, [v.type for v in node.inputs], node.attrs, [v.type for v in node.outputs])
        try:
            with op_scope(schema.namespace):  # the pack's short names mean its own ops first
                sub = schema.decomposition(nctx)
        except FrameError:
            raise
        except (Exception, SystemExit) as exc:  # the pack's code, even exit(): this compile's error, not the process's
            raise CompileError(f"the DecomposeFn of {node.op!r} raised {type(exc).__name__}: {exc} (a bug in pack "
                               f"{schema.pack})") from exc
        if not isinstance(sub, Graph):
            raise CompileError(f"the DecomposeFn of {node.op!r} returned {type(sub).__name__}, expected a Graph (a bug "
                               f"in pack {schema.pack})")
        if [v.type for v in sub.inputs] != [v.type for v in node.inputs]:
            raise CompileError(f"the DecomposeFn of {node.op!r} (pack {schema.pack}) takes "
                               f"[{', '.join(str(v.type) for v in sub.inputs)}], but the node's inputs are "
                               f"[{', '.join(str(v.type) for v in node.inputs)}]; trace it with "
                               "ctx.decomposition_graph(fn)")
        if [v.type for v in sub.outputs] != [v.type for v in node.outputs]:
            raise CompileError(f"the DecomposeFn of {node.op!r} returns [{', '.join(str(v.type) for v in sub.outputs)}], "
                               f"expected [{', '.join(str(v.type) for v in node.outputs)}] (a bug in pack {schema.pack})")
        outs = inline_graph(rw.new, sub, [rw.vmap[v] for v in node.inputs])
        for old, new in zip(node.outputs, outs):
            rw.alias(old, new)
    ctx.note("decompose", "decomposed ops without a kernel")
    result = rw.finish()
    if shape_only:
        _drop_read_for_type_only(result, shape_only, ctx)
    return decompose(result, ctx, depth + 1)


def _drop_read_for_type_only(graph: Graph, values: list, ctx: CompileContext) -> None:
    """Remove (in place, from the graph this stage just made) the nodes that computed ``values`` only for a
    ``zeros_like_internal`` to read their type, and what only they read: at every opt level, a zero costs nothing."""
    uses = Counter(v for n in graph.nodes for v in n.inputs)
    uses.update(graph.outputs)
    schemas = ctx.registry.schemas
    todo = [v.producer for v in values if v.producer is not None]
    dead: set = set()
    while todo:
        node = todo.pop()
        if node in dead or any(uses[v] for v in node.outputs) or node_has_side_effect(node, schemas):
            continue
        dead.add(node)
        for v in node.inputs:
            uses[v] -= 1
            if v.producer is not None:
                todo.append(v.producer)
    if dead:
        graph.nodes = [n for n in graph.nodes if n not in dead]
