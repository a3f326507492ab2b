"""Re-specialise a graph for new input shapes: one trace, any batch size.

``specialize(graph, input_types)`` re-infers every node's output types through the packs' own shape
functions, without re-tracing any Python (docs/design-parameters-and-shapes.md, section 2). Inputs keep
their dtypes and ranks; any dimension may change. Attributes and constants keep their values.

A graph whose traced function read a tensor's shape (``x.shape[0]``, ``len(x)``, ``x.size``) is
refused: the sizes may have been baked in as numbers, and re-specialising could give a silently wrong
answer. Indexing (``x[-1]``, ``x[2:]``) keeps no size in the graph.

Control-flow bodies (sub-graph attributes) are typed by their op's outer inputs: when the op's shape
function refuses the body as it is, the body is re-specialised with every dimension size that changed
outside (traced size -> new size) substituted in its input types, and the shape function asked again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FrameError, ShapeError
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType, as_type

__all__ = ["specialize"]


def _changed_dims(graph: Graph, types: Sequence[TensorType]) -> tuple[dict[int, int], list[str]]:
    """traced size -> new size over every changed dimension, and labels of the changes for messages."""
    sizes: dict[int, int] = {}
    labels = []
    for i, (value, new) in enumerate(zip(graph.inputs, types)):
        for axis, (old, size) in enumerate(zip(value.type.shape, new.shape)):
            if old != size:
                label = f"input {i}" + (f" ({value.name!r})" if value.name else "")
                labels.append(f"{label} dimension {axis} is {size}, traced as {old}")
                sizes.setdefault(old, size)
    return sizes, labels


def _check_inputs(graph: Graph, types: Sequence[TensorType]) -> None:
    if len(types) != len(graph.inputs):
        raise ShapeError(f"specialize: graph {graph.name!r} has {len(graph.inputs)} inputs, {len(types)} types given")
    for i, (value, new) in enumerate(zip(graph.inputs, types)):
        old = value.type
        if old.dtype != new.dtype or old.rank != new.rank:
            label = f"input {i}" + (f" ({value.name!r})" if value.name else "")
            raise ShapeError(f"{label} was traced as {old}; a new shape may change its dimensions but not its dtype "
                             f"or rank, got {new}; trace the function again for this kind of input")


def _substituted(t: TensorType, sizes: Mapping[int, int]) -> TensorType:
    return t.with_shape(tuple(sizes.get(d, d) for d in t.shape))


def _retyped_attrs(node: Node, sizes: Mapping[int, int], reg: Any) -> dict[str, Any]:
    attrs = dict(node.attrs)
    for key, body in node.attrs.items():
        if type(body) is Graph:
            attrs[key] = _specialize(body, [_substituted(v.type, sizes) for v in body.inputs], reg, sizes)
    return attrs


def _specialize(graph: Graph, types: Sequence[TensorType], reg: Any, sizes: Mapping[int, int]) -> Graph:
    out = Graph(graph.name)
    vmap: dict[Value, Value] = {}
    for value, t in zip(graph.inputs, types):
        vmap[value] = out.add_input(t, value.name)
    for position, node in enumerate(graph.nodes):
        inputs = tuple(vmap[v] for v in node.inputs)
        schema = reg.lookup(node.op)
        in_types = tuple(v.type for v in inputs)
        attrs = node.attrs
        try:
            if in_types == tuple(v.type for v in node.inputs) and not any(type(a) is Graph for a in attrs.values()):
                new_types = [v.type for v in node.outputs]  # nothing it reads changed
            else:
                try:
                    new_types = schema.infer(in_types, attrs)
                except ShapeError:
                    if not any(type(a) is Graph for a in attrs.values()) or not sizes:
                        raise
                    attrs = _retyped_attrs(node, sizes, reg)
                    new_types = schema.infer(in_types, attrs)
        except FrameError as exc:
            raise _Refused(position, node, exc) from None
        copy = Node(node.op, inputs, dict(attrs))
        copy.outputs = tuple(Value(t, copy, k, v.name) for k, (t, v) in enumerate(zip(new_types, node.outputs)))
        for old, new in zip(node.outputs, copy.outputs):
            vmap[old] = new
        out.nodes.append(copy)
    for k, value in enumerate(graph.outputs):
        out.mark_output(vmap[value], graph.output_names[k])
    return out


class _Refused(Exception):
    def __init__(self, position: int, node: Node, error: FrameError) -> None:
        self.position, self.node, self.error = position, node, error


def specialize(graph: Graph, input_types: Sequence[TensorType | str], *, registry: Any = None) -> Graph:
    """``graph`` with inputs of ``input_types`` and every node's output types inferred anew.

    Returns ``graph`` itself when the types are the traced ones. Raises ``ShapeError`` when an input's
    dtype or rank differs, and when an op's shape function refuses the new types: the message names the
    input dimensions that changed and the node that refused, with its own reason.
    """
    from ..ops_registry.registry import current_registry

    if not isinstance(graph, Graph):
        raise ShapeError(f"specialize() takes a Graph, got {type(graph).__name__}")
    types = [as_type(t) for t in input_types]
    _check_inputs(graph, types)
    if all(v.type is t for v, t in zip(graph.inputs, types)):
        return graph
    from ..ir.graph import traced_sizes

    sizes, changes = _changed_dims(graph, types)
    reason = traced_sizes(graph)
    if reason is not None:
        raise ShapeError(f"graph {graph.name!r} cannot be re-specialised ({'; '.join(changes[:6])}): {reason}, so "
                         "its traced sizes may be baked in as numbers. Use shape-free forms (-1 in reshapes, "
                         "ops.mean rather than sum / x.shape[0], x[-1] and x[2:] rather than sizes) or trace the "
                         "function again for these shapes")
    reg = registry if registry is not None else current_registry()
    try:
        return _specialize(graph, types, reg, sizes)
    except _Refused as refused:
        node = refused.node
        raise ShapeError(f"graph {graph.name!r} cannot run with these shapes: {'; '.join(changes[:6])}. Node "
                         f"{refused.position} ({node.op}) refuses them: {refused.error}. An attribute or constant "
                         "fixed at trace time (a reshape's target shape, say) may hold the traced size: write -1 "
                         "for the batch dimension in reshapes, or trace again for this shape") from None
