"""Re-specialise a graph for new input shapes: one trace, any batch size.

``specialize(graph, input_types)`` re-infers every node's output types through the packs' own shape
functions, without re-tracing any Python (docs/design-parameters-and-shapes.md, section 2). Inputs keep
their dtypes and ranks; any dimension may change. Attributes and constants keep their values.

A graph whose traced function read a tensor's shape (``x.shape[0]``, ``len(x)``, ``x.size``) is
refused: the sizes may have been baked in as numbers, and re-specialising could give a silently wrong
answer. Indexing (``x[-1]``, ``x[2:]``) keeps no size in the graph.

A graph built by a derivative transform carries type ties (``ir.graph.tie_types``): a VJP's cotangent input has
the type of the output it seeds, a JVP's tangent input its primal input's, a gradient output its input's. At the
traced shapes the input types say so; at new ones only the ties do, so they are checked here (a few type
comparisons: the tangents' before the walk, the rest after it, or when a node refuses the new types), and a seed
of another shape is refused by name rather than broadcast into a silently wrong answer.

Control-flow bodies (sub-graph attributes) are typed by their op's outer inputs: when the op's shape
function refuses the body as it is, the body is re-specialised with every dimension size that changed
outside (traced size -> new size) substituted in its input types, and the shape function asked again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FrameError, ShapeError
from ..ir.graph import Graph, Node, TypeTie, Value, carry_type_ties, tie_label, type_ties
from ..ir.types import TensorType, as_type

__all__ = ["specialize"]


def _changed_dims(graph: Graph, types: Sequence[TensorType]) -> tuple[dict[int, int], list[str]]:
    """traced size -> new size over every changed dimension, and labels of the changes for messages."""
    sizes: dict[int, int] = {}
    labels = []
    for i, (value, new) in enumerate(zip(graph.inputs, types)):
        for axis, (old, size) in enumerate(zip(value.type.shape, new.shape)):
            if old != size:
                labels.append(f"{tie_label(graph, i)} dimension {axis} is {size}, traced as {old}")
                sizes.setdefault(old, size)
    return sizes, labels


def _check_inputs(graph: Graph, types: Sequence[TensorType]) -> None:
    if len(types) != len(graph.inputs):
        raise ShapeError(f"specialize: graph {graph.name!r} has {len(graph.inputs)} inputs, {len(types)} types given")
    for i, (value, new) in enumerate(zip(graph.inputs, types)):
        old = value.type
        if old.dtype != new.dtype or old.rank != new.rank:
            raise ShapeError(f"{tie_label(graph, i)} was traced as {old}; a new shape may change its dimensions but "
                             f"not its dtype or rank, got {new}; trace the function again for this kind of input")


def _substituted(t: TensorType, sizes: Mapping[int, int]) -> TensorType:
    return t.with_shape(tuple(sizes.get(d, d) for d in t.shape))


def _retyped_attrs(node: Node, sizes: Mapping[int, int], reg: Any) -> dict[str, Any]:
    attrs = dict(node.attrs)
    for key, body in node.attrs.items():
        if type(body) is Graph:
            attrs[key] = _specialize(body, [_substituted(v.type, sizes) for v in body.inputs], reg, sizes)
    return attrs


def _value_label(graph: Graph, value: Value) -> str:
    if value.producer is None and value in graph.inputs:
        return tie_label(graph, graph.inputs.index(value))
    if value in graph.outputs:
        return tie_label(graph, graph.outputs.index(value), output=True)
    return f"value {value.name!r}" if value.name else "a value"


#: What a seed input is tied to, by the first word of its role ("the cotangent of output 0 ('y')").
_SEEDS = {"cotangent": "the output's", "tangent": "its primal's"}


def _check_ties(graph: Graph, ties: tuple[TypeTie, ...], vmap: Mapping[Value, Value]) -> None:
    """``ShapeError`` for the first tie of ``graph`` whose two values, both specialised already, differ in type."""
    for value, like, role in ties:
        new, want = vmap.get(value), vmap.get(like)
        if new is None or want is None or new.type == want.type:
            continue
        where = f"graph {graph.name!r}: {_value_label(graph, value)} is {role}"
        if value.producer is None:  # a seed input: the caller passed it
            kind = next((k for k in _SEEDS if role.startswith(f"the {k} ")), "seed")
            raise ShapeError(f"{where}, which is {want.type} at these input shapes; it was given as {new.type}: pass "
                             f"a {kind} of {_SEEDS.get(kind, 'that')} shape {list(want.type.shape)}")
        raise ShapeError(f"{where} and should have its type {want.type} at these input shapes, but came out "
                         f"{new.type}: an op's gradient or forward rule on the way does not follow the new shapes; "
                         "trace the function again for them, and report it to the op's pack")


def _specialize(graph: Graph, types: Sequence[TensorType], reg: Any, sizes: Mapping[int, int]) -> Graph:
    out = Graph(graph.name)
    vmap: dict[Value, Value] = {}
    for value, t in zip(graph.inputs, types):
        vmap[value] = out.add_input(t, value.name)
    ties = type_ties(graph)
    if ties:  # a tangent of a primal input that is tied to nothing itself is refused before any node is asked
        seeds = {t[0] for t in ties}  # (a tangent of a cotangent waits: the cotangent may be the wrong one)
        _check_ties(graph, tuple([t for t in ties if t[1] not in seeds]), vmap)
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
            if ties:  # a seed of the wrong shape is what the caller can fix, whatever node meets it first
                _check_ties(graph, ties, vmap)
            raise _Refused(position, node, exc) from None
        copy = Node(node.op, inputs, dict(attrs))
        copy.outputs = tuple(Value(t, copy, k, v.name) for k, (t, v) in enumerate(zip(new_types, node.outputs)))
        for old, new in zip(node.outputs, copy.outputs):
            vmap[old] = new
        out.nodes.append(copy)
    if ties:
        _check_ties(graph, ties, vmap)
        carry_type_ties(graph, out, vmap)  # (specialised again, it is checked again)
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
