"""Stage 2: type inference. Every node's output types are re-derived from its schema.

A recorded type that differs from the inferred one (a hand-built or loaded
graph) is an error naming the node (rule V6); inference errors name the node
and the op. A node whose attributes are not in their schema's form (a default
left out, a list for ``ints``, ``"f32"`` for a ``dtype``: a hand-built graph, or
a document written before the op gained an attribute) gets them normalised, so
passes and kernel builders always read every attribute in its canonical form.
Stage 1's walk infers the types too and records the graph when they all agree
and every attribute is canonical (``CompileContext.types_checked``): then this
stage returns at once.
"""

from __future__ import annotations

from operator import attrgetter

from ...errors import FrameError, VerifyError
from ...ir.graph import Graph, Node
from ...ir.verify import Problem, output_count_message
from ..context import CompileContext
from ..rewrite import Rewriter

_type = attrgetter("type")


def infer_types(graph: Graph, ctx: CompileContext) -> Graph:
    """Return ``graph`` (types already agree), the graph with its attributes normalised, or raise
    ``VerifyError`` with one V6 problem per mismatch."""
    checked = ctx.types_checked
    if checked is not None and checked[0] is graph and checked[1] == tuple(graph.nodes):  # nodes: by identity
        return graph
    problems = []
    schemas = ctx.registry.schemas
    # graphs repeat signatures (layers, chains): infer each once. Attributes count by identity (every node is
    # alive during the walk, so an id names one object), which is what inlined micro-graphs share.
    memo: dict[tuple, tuple] = {}
    renormed: dict[int, dict] = {}  # node index -> its attributes in canonical form, where they were not
    for index, node in enumerate(graph.nodes):
        op = node.op
        attrs = node.attrs
        in_types = tuple(map(_type, node.inputs))
        key = (op, in_types, tuple(attrs), tuple(map(id, attrs.values()))) if attrs else (op, in_types)
        hit = memo.get(key)
        if hit is None:
            schema = schemas[op]
            try:
                norm = schema.normalize_attrs(attrs)
                hit = memo[key] = (tuple(schema.infer(in_types, norm)), None if canonical(attrs, norm) else norm)
            except FrameError as exc:
                problems.append(Problem("V6", f"shape inference rejects the inputs: {exc}", op, index))
                continue
        inferred, norm = hit
        if norm is not None:
            renormed[index] = norm
        if tuple(map(_type, node.outputs)) != inferred:  # types are interned: this compares identities
            problems.extend(_mismatches(node, index, inferred))
    if problems:
        raise VerifyError(problems)
    if not renormed:
        return graph
    rw = Rewriter(graph)
    for index, node in enumerate(graph.nodes):
        rw.copy(node, attrs=renormed.get(index))
    ctx.note("infer_types", f"normalised the attributes of {len(renormed)} node(s)")
    return rw.finish()


def canonical(attrs: dict, norm: dict) -> bool:
    """Whether ``attrs`` already are their normalised form ``norm``: the same names, each value of the same type
    (a default left out, a list for ``ints`` or a string for a ``dtype`` is not)."""
    return len(attrs) == len(norm) and all(k in attrs and type(attrs[k]) is type(v) for k, v in norm.items())


def _mismatches(node: Node, index: int, inferred: tuple) -> list[Problem]:
    if len(node.outputs) != len(inferred):
        return [Problem("V5", output_count_message(node, inferred), node.op, index)]
    return [Problem("V6", f"output {pos} is recorded as {v.type} but inference gives {t}", node.op, index)
            for pos, (v, t) in enumerate(zip(node.outputs, inferred)) if v.type != t]
