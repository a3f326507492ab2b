"""Gradient ops that read a shape from an operand, not an attribute: one training graph, any batch size.

Each ``*_like_internal`` op is an attribute op of this pack whose traced-shape attribute is taken from the
type of an operand instead (the forward value whose shape the gradient must have):

    sum_grad_like_internal(gy, x; axes)          sum_grad_internal(gy; input_shape=x.shape, axes)
    reduce_like_internal(g, x)                   reduce_to_shape_internal(g; shape=x.shape), or g itself
    broadcast_like_internal(g, x)                broadcast_to_internal(g; shape=x.shape), or g itself
    reshape_like_internal(g, x)                  reshape(g; shape=x.shape), or g itself
    matmul_grad_lhs_like_internal(gy, b, a)      matmul_grad_lhs_internal(gy, b; shape=a.shape)
    matmul_grad_rhs_like_internal(a, gy, b)      matmul_grad_rhs_internal(a, gy; shape=b.shape)
    slice_grad_like_internal(gy, x; slice attrs) slice's gradient at x's shape (a pad, or slice_grad_internal)
    concat_grad_like_internal(gy, xs..; axis, index) slice(gy; the span of xs[index] along axis): concat's gradient
    inverse_count_internal(x; axes, numerator, offset) the constant numerator / (elements of x over axes - offset):
                                                 mean's 1/N, an unbiased variance's 1/(N - 1)

``specialize`` re-infers them from the new operand types, so a training graph compiled with
``dynamic_shapes=True`` differentiates correctly at any batch size, where an attribute would keep the traced
size (or a constant the traced 1/N). The operand is read for its type only: the compile pass ``bind_shapes``
(every opt level, right after type inference) replaces each by its attribute form at the compiled types. The
compiled program is then the one the attribute forms gave, bit for bit, and no operand is kept alive for its
shape. The DecomposeFn is the same replacement (ONNX export uses it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import AttrSpec, Example, Graph, Node, NodeContext, OpSchema, PassSpec, Rewriter, ShapeError, \
    TensorType, Value, inline_graph, ops

from . import linalg, reductions, regions, shape
from ._shapes import normalize_axes

# A lowering is (schema, the input positions it reads, attrs) for a node of that op, an int k for input k
# itself, or an array for a constant.
def _lowering(schema: OpSchema, types: tuple[TensorType, ...], attrs: Any) -> Any:
    return _LOWER[schema.name](types, attrs, NodeContext(schema, types, attrs))


def _infer(ctx: NodeContext) -> list[TensorType]:
    low = _lowering(ctx.schema, ctx.input_types, ctx.attrs)
    if isinstance(low, int):
        return [ctx.input_types[low]]
    if isinstance(low, np.ndarray):
        return [TensorType(ctx.attrs["dtype"], ())]
    target, used, attrs = low
    types = [ctx.input_types[i] for i in used]
    try:
        if ctx.schema.name in _SHAPE_ONLY:  # attrs already canonical: the target's shape function itself
            return target.shape_infer(NodeContext(target, types, attrs))
        return target.infer(types, target.normalize_attrs(attrs))
    except ShapeError as exc:
        raise ctx.error(f"{exc}") from None


def _kernel(ctx: NodeContext) -> Callable:
    low = _lowering(ctx.schema, ctx.input_types, ctx.attrs)
    if isinstance(low, int):
        return lambda *arrays: np.array(arrays[low], copy=True)
    if isinstance(low, np.ndarray):
        return lambda *arrays: low.copy()
    target, used, attrs = low
    inner = target.kernels["cpu"](NodeContext(target, [ctx.input_types[i] for i in used],
                                              target.normalize_attrs(attrs)))
    return lambda *arrays: inner(*[arrays[i] for i in used])


def _decomposition(ctx: NodeContext) -> Graph:
    from frame_core import apply, constant

    low = _lowering(ctx.schema, ctx.input_types, ctx.attrs)

    def lowered(*xs: Any) -> Any:
        if isinstance(low, int):
            return xs[low]
        if isinstance(low, np.ndarray):
            return constant(low)
        target, used, attrs = low
        return apply(target.name, *[xs[i] for i in used], **attrs)
    return ctx.decomposition_graph(lowered)


def _like(name: str, inputs: tuple[str, ...], lower: Callable, gradient: Callable, doc: str,
          examples: list[Example], attrs: dict[str, AttrSpec] | None = None, view: bool = False) -> OpSchema:
    _LOWER[name] = lower
    if getattr(lower, "shape_only", False):
        _SHAPE_ONLY.add(name)
    return OpSchema(name, inputs=inputs, attrs=attrs or {}, shape_infer=_infer, kernels={"cpu": _kernel},
                    gradient=gradient, decomposition=_decomposition, nondiff_inputs=(len(inputs) - 1,),
                    traits=("any_shape_gradient", "shape_operand") + (("view",) if view else ()), doc=doc,
                    examples=examples)


_LOWER: dict[str, Callable] = {}
#: like ops whose lowering's attributes are its target's only attribute, a shape read off an operand's type (so
#: already canonical, with no default to fill): their shape inference calls the target's shape function directly,
#: without normalising and memoising attributes that are a new shape at nearly every call
_SHAPE_ONLY: set[str] = set()


def _same_shape_or(target: OpSchema, attr: str) -> Callable:
    """``g`` itself when it already has ``like``'s shape, else ``target(g; attr=like.shape)``."""
    def lower(types: tuple[TensorType, ...], attrs: Any, ctx: NodeContext) -> Any:
        g, like = types
        return 0 if g.shape == like.shape else (target, (0,), {attr: like.shape})
    setattr(lower, "shape_only", set(target.attrs) == {attr})  # (see _SHAPE_ONLY; a mark on the function)
    return lower


def _inverse_count(types: tuple[TensorType, ...], attrs: Any, ctx: NodeContext) -> np.ndarray:
    (x,) = types
    count = math.prod(x.shape[a] for a in normalize_axes(ctx, attrs["axes"], x.rank)) - attrs["offset"]
    if attrs["offset"] and count < 1:  # (an unbiased variance of one value: the op it serves refuses it too)
        raise ctx.error(f"needs more than offset = {attrs['offset']} elements of x {x} over axes {attrs['axes']}")
    return np.asarray(attrs["numerator"] / max(count, 1), attrs["dtype"].np)  # as a Python scalar's constant


_AXES = AttrSpec("ints", doc="the reduced axes of x, non-negative")

SUM_GRAD_LIKE = _like(
    "sum_grad_like_internal", ("gy", "x"),
    lambda types, attrs, ctx: (reductions.SUM_GRAD, (0,), {"input_shape": types[1].shape, "axes": attrs["axes"]}),
    # g_gy = sum(ggx over axes), in gy's keepdims form
    lambda ctx: ctx.grad_graph(lambda gy, x, y, ggx: [
        ops.sum(ggx, axes=ctx.attrs["axes"], keepdims=ctx.input_types[0].rank == ctx.input_types[1].rank
                and bool(ctx.attrs["axes"])), None]),
    "gy copied along `axes` to x's shape (x read for its shape only): the gradient of sum at any input size.",
    [Example(["f32[4]", "f32[3, 4]"], {"axes": [0]}), Example(["f32[1, 4]", "f32[3, 4]"], {"axes": [0]}),
     Example(["f64[]", "f64[2, 3]"], {"axes": [0, 1]})],
    attrs={"axes": _AXES},
)

REDUCE_LIKE = _like(
    "reduce_like_internal", ("g", "x"),
    _same_shape_or(reductions.REDUCE_TO_SHAPE, "shape"),
    lambda ctx: ctx.grad_graph(lambda g, x, y, gy: [ops.broadcast_like_internal(gy, g), None]),
    "g summed over the axes broadcasting added or stretched, down to x's shape (x read for its shape only).",
    [Example(["f32[2, 3, 4]", "f32[4]"]), Example(["f32[3, 4]", "f32[3, 1]"]), Example(["f64[2, 3]", "f64[2, 3]"])],
)

BROADCAST_LIKE = _like(
    "broadcast_like_internal", ("g", "x"),
    _same_shape_or(reductions.BROADCAST_TO, "shape"),
    lambda ctx: ctx.grad_graph(lambda g, x, y, gy: [ops.reduce_like_internal(gy, g), None]),
    "g broadcast to x's shape (x read for its shape only): the adjoint of reduce_like_internal.",
    [Example(["f32[4]", "f32[2, 3, 4]"]), Example(["f32[3, 1]", "f32[3, 4]"]), Example(["f64[]", "f64[2, 3]"])],
)

RESHAPE_LIKE = _like(
    "reshape_like_internal", ("g", "x"),
    _same_shape_or(shape.RESHAPE, "shape"),
    lambda ctx: ctx.grad_graph(lambda g, x, y, gy: [ops.reshape_like_internal(gy, g), None]),
    "g's elements in x's shape (x read for its shape only): the gradient of reshape at any input size.",
    [Example(["f32[2, 6]", "f32[3, 4]"]), Example(["f64[4, 6]", "f64[4, 2, 3]"], note="a batch axis kept")],
    view=True,
)

MATMUL_GRAD_LHS_LIKE = _like(
    "matmul_grad_lhs_like_internal", ("gy", "b", "a"),
    lambda types, attrs, ctx: (linalg.MATMUL_GRAD_LHS, (0, 1), {"shape": types[2].shape}),
    # g_gy = matmul(gga, b) reduced to gy, g_b = a-role gga against gy
    lambda ctx: ctx.grad_graph(lambda gy, b, a, ga, gga: [
        ops.reduce_like_internal(ops.matmul(gga, b), gy), ops.matmul_grad_rhs_like_internal(gga, gy, b), None]),
    "gy @ b^T reduced to a's shape (a read for its shape only): matmul's gradient for its left operand.",
    [Example(["f32[3, 5]", "f32[4, 5]", "f32[3, 4]"]), Example(["f32[2, 3, 5]", "f32[4, 5]", "f32[2, 3, 4]"]),
     Example(["f64[2, 3, 2]", "f64[2, 4, 2]", "f64[1, 3, 4]"])],
)

MATMUL_GRAD_RHS_LIKE = _like(
    "matmul_grad_rhs_like_internal", ("a", "gy", "b"),
    lambda types, attrs, ctx: (linalg.MATMUL_GRAD_RHS, (0, 1), {"shape": types[2].shape}),
    lambda ctx: ctx.grad_graph(lambda a, gy, b, gb, ggb: [
        ops.matmul_grad_lhs_like_internal(gy, ggb, a), ops.reduce_like_internal(ops.matmul(a, ggb), gy), None]),
    "a^T @ gy reduced to b's shape (b read for its shape only): matmul's gradient for its right operand.",
    [Example(["f32[3, 4]", "f32[3, 5]", "f32[4, 5]"]), Example(["f32[2, 3, 4]", "f32[2, 3, 5]", "f32[4, 5]"]),
     Example(["f64[2, 3, 4]", "f64[2, 3, 5]", "f64[2, 4, 5]"])],
)


def _slice_grad_lower(types: tuple[TensorType, ...], attrs: Any, ctx: NodeContext) -> Any:
    gy, x = types
    target = regions.SLICE
    spans = regions._spans(NodeContext(target, (x,), target.normalize_attrs(
        {k: attrs[k] for k in ("starts", "stops", "steps", "axes")})))
    if tuple(length for _, _, length in spans) != gy.shape:
        raise ctx.error(f"gy {gy} is not the shape of the slice of {x}, {[length for _, _, length in spans]}")
    if all(step == 1 for _, step, _ in spans):
        return (regions.PAD, (0,), {"before": [first for first, _, _ in spans],
                                    "after": [n - first - length for n, (first, _, length) in zip(x.shape, spans)]})
    return (regions.SLICE_GRAD, (0,), {"input_shape": x.shape, "starts": [first for first, _, _ in spans],
                                       "steps": [step for _, step, _ in spans]})


SLICE_GRAD_LIKE = _like(
    "slice_grad_like_internal", ("gy", "x"),
    _slice_grad_lower,
    lambda ctx: ctx.grad_graph(lambda gy, x, y, ggx: [
        ops.slice(ggx, **{k: ctx.attrs[k] for k in ("starts", "stops", "steps", "axes")}), None]),
    "Zeros of x's shape with gy where x[slice] was (x read for its shape only): slice's gradient at any size.",
    [Example(["f32[2, 4]", "f32[5, 4]"], {"starts": [1], "stops": [3]}),
     Example(["f32[3, 2]", "f32[3, 4]"], {"starts": [-2], "stops": [9223372036854775807], "axes": [1]}),
     Example(["f64[2, 3]", "f64[4, 3]"], {"starts": [0], "stops": [4], "steps": [2]})],
    attrs={k: regions.SLICE.attrs[k] for k in ("starts", "stops", "steps", "axes")},
)

def _concat_grad_lower(types: tuple[TensorType, ...], attrs: Any, ctx: NodeContext) -> Any:
    gy, *xs = types
    axis, index = attrs["axis"], attrs["index"]
    if not 0 <= index < len(xs) or not all(x.rank == gy.rank for x in xs) or not 0 <= axis < gy.rank:
        raise ctx.error(f"index {index} and axis {axis} must name one of the {len(xs)} joined inputs of gy's rank "
                        f"{gy.rank} and one of its axes, got gy {gy} and inputs {[str(x) for x in xs]}")
    start = sum(x.shape[axis] for x in xs[:index])
    if sum(x.shape[axis] for x in xs) != gy.shape[axis]:
        raise ctx.error(f"gy {gy} is not the concatenation of {[str(x) for x in xs]} along axis {axis}")
    return (regions.SLICE, (0,), {"starts": [start], "stops": [start + xs[index].shape[axis]], "axes": [axis]})


def _concat_grad_gradient(ctx: NodeContext) -> Graph:
    axis, index, n = ctx.attrs["axis"], ctx.attrs["index"], len(ctx.input_types) - 1

    def gradient(gy: Value, *rest: Value) -> list[Any]:
        # the adjoint of taking block `index` out: ggx in that block, zeros of the other inputs' shapes beside it
        xs, ggx = rest[:n], rest[n + 1]
        blocks = [ggx if i == index else ops.zeros_like(x) for i, x in enumerate(xs)]
        return [ops.concat(*blocks, axis=axis), *[None] * n]
    return ctx.grad_graph(gradient)


CONCAT_GRAD_LIKE = OpSchema(
    "concat_grad_like_internal",
    inputs=("gy", "xs"),
    variadic=True,
    attrs={"axis": AttrSpec("int", doc="the joined axis, non-negative"),
           "index": AttrSpec("int", doc="which of xs the block belongs to")},
    shape_infer=_infer,
    kernels={"cpu": _kernel},
    gradient=_concat_grad_gradient,
    decomposition=_decomposition,
    traits=("any_shape_gradient", "shape_operand", "view"),
    doc="The block of gy that xs[index] filled when xs were joined along axis (xs read for their shapes only): "
        "concat's gradient at any input size.",
    examples=[Example(["f32[6, 3]", "f32[2, 3]", "f32[4, 3]"], {"axis": 0, "index": 1}),
              Example(["f64[2, 6]", "f64[2, 3]", "f64[2, 1]", "f64[2, 2]"], {"axis": 1, "index": 1}),
              Example(["f64[3]", "f64[3]"], {"axis": 0, "index": 0}, note="one input")],
)
_LOWER["concat_grad_like_internal"] = _concat_grad_lower

INVERSE_COUNT = OpSchema(
    "inverse_count_internal",
    inputs=("x",),
    attrs={"axes": AttrSpec("ints", None, "the axes counted (none: all)"),
           "numerator": AttrSpec("float", 1.0, "the number divided by the count"),
           "offset": AttrSpec("int", 0, "subtracted from the count first (1: the N - 1 of an unbiased variance)"),
           "dtype": AttrSpec("dtype", doc="the dtype of the result")},
    shape_infer=_infer,
    kernels={"cpu": _kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: None),  # a function of x's shape only: zero
    decomposition=_decomposition,
    traits=("any_shape_gradient", "shape_operand"),
    doc="numerator / (the number of elements of x over axes, less offset; at least 1), a scalar of dtype, x read "
        "for its shape only: a mean's 1/N (or an unbiased variance's 1/(N - 1)) in a gradient that stays right at "
        "any input size.",
    examples=[Example(["f32[3, 4]"], {"axes": [0], "dtype": "f32"}),
              Example(["f64[2, 5]"], {"numerator": 2.0, "dtype": "f64"}),
              Example(["f64[6, 3]"], {"axes": [0], "numerator": 0.2, "offset": 1, "dtype": "f64"},
                      note="1/(N - 1)")],
)
_LOWER["inverse_count_internal"] = _inverse_count

SCHEMAS = [SUM_GRAD_LIKE, REDUCE_LIKE, BROADCAST_LIKE, RESHAPE_LIKE, MATMUL_GRAD_LHS_LIKE, MATMUL_GRAD_RHS_LIKE,
           SLICE_GRAD_LIKE, CONCAT_GRAD_LIKE, INVERSE_COUNT]
_SCHEMA = {s.name: s for s in SCHEMAS}
_PLAIN: set[str] = set()  # ops seen to be neither like ops nor able to carry bodies (names are registry keys)
#: other packs' ops that read a shape from an operand (trait shape_operand, a DecomposeFn): lowered through their
#: DecomposeFn, which writes that shape down (conv2d_grad_input_like_internal -> conv_transpose2d, say)
_DECOMPOSED: dict[str, OpSchema] = {}


# -- the pass -------------------------------------------------------------------------------------------------
def _short(op: str) -> str:
    return op.rpartition("::")[2]


def _carries_graph(node: Node) -> bool:
    return bool(node.attrs) and any(type(a) is Graph for a in node.attrs.values())


def _bind(graph: Graph, ctx: Any) -> Graph:
    """``graph`` with every ``*_like_internal`` node (bodies included) replaced by its attribute form."""
    kinds: dict[str, Any] = {}  # op -> its like schema, True for an op that may carry bodies, None otherwise
    for op in (ctx.ops(graph) if ctx is not None else {n.op for n in graph.nodes}):
        schema = _SCHEMA.get(_short(op))
        kinds[op] = schema if schema is not None else True if op not in _PLAIN and op not in _DECOMPOSED else None
    if not any(kinds.values()) and not any(op in _DECOMPOSED for op in kinds):
        return graph
    rw = Rewriter(graph, ctx)
    # (op, input types, attrs) -> its lowering: one per kind of node. A lowering to a node is (its op, the inputs
    # it reads, its attributes): every node made from it shares that one attribute dict (passes never edit a
    # node's attributes in place), so later stages meet one dict per kind, as they do fusion's
    lowered: dict[tuple, Any] = {}
    read, alias, append = rw.read, rw.alias, rw.new.nodes.append
    unchanged = rw.vmap.keys().isdisjoint  # reads nothing rewritten: kept as it is (what copy would do)
    # the input's nodes the result no longer holds (replaced, or copied onto new inputs): the pipeline then
    # releases just those, instead of comparing the node sets of both graphs (ctx.dropped)
    dropped = []
    decomposed = False
    for node in graph.nodes:
        schema = kinds[node.op]
        if schema is None:
            if node.op in _DECOMPOSED:
                _decompose(rw, node, lowered)
                dropped.append(node)
                decomposed = True
                continue
            if unchanged(node.inputs):
                append(node)
            elif rw.copy(node) is not node:
                dropped.append(node)
            continue
        if schema is True:
            if _carries_graph(node):
                attrs = {k: (_bind(a, None) if type(a) is Graph else a) for k, a in node.attrs.items()}
                if any(attrs[k] is not a for k, a in node.attrs.items()):
                    if rw.copy(node, attrs=attrs) is not node:
                        dropped.append(node)
                    continue
            if rw.copy(node) is not node:
                dropped.append(node)
            continue
        dropped.append(node)
        ins = read(node.inputs)
        types = tuple([v.type for v in node.inputs])
        key = (node.op, types, tuple(node.attrs.items()))
        low = lowered.get(key)
        if low is None:
            low = _lowering(schema, types, schema.normalize_attrs(node.attrs))
            if isinstance(low, tuple):
                target, used, low_attrs = low
                prefix = node.op[:len(node.op) - len(schema.name)]  # a qualified name stays qualified
                low = (prefix + target.name, used, target.normalize_attrs(low_attrs))
            lowered[key] = low
        old = node.outputs[0]
        if isinstance(low, int):
            alias(old, ins[low])
        elif isinstance(low, np.ndarray):
            alias(old, rw.new.constant(low))
        else:
            op, used, low_attrs = low
            made = Node(op, tuple([ins[i] for i in used]), low_attrs)
            made.outputs = (Value(old.type, made, 0, old.name),)
            append(made)
            alias(old, made.outputs[0])
    result = rw.finish()
    if ctx is not None:
        ctx.dropped = dropped
        if not decomposed:  # every node kept is of an op that is no like op; every node made is a lowering's
            ops = {op for op, kind in kinds.items() if kind is None or kind is True}
            ops.update([low[0] if isinstance(low, tuple) else "constant" for low in lowered.values()
                        if not isinstance(low, int)])
            ctx.know_ops(result, ops)
    return result


def _decompose(rw: Rewriter, node: Node, lowered: dict[tuple, Any]) -> None:
    """``node`` replaced by its op's DecomposeFn graph (one per kind of node), inlined on the mapped inputs."""
    types = tuple([v.type for v in node.inputs])
    key = (node.op, types, tuple(node.attrs.items()))
    sub = lowered.get(key)
    if sub is None:
        schema = _DECOMPOSED[node.op]
        assert schema.decomposition is not None  # bind_shapes keeps only schemas that declare one
        sub = lowered[key] = schema.decomposition(NodeContext(schema, types, node.attrs,
                                                              [v.type for v in node.outputs]))
    for old, new in zip(node.outputs, inline_graph(rw.new, sub, list(rw.read(node.inputs)))):
        rw.alias(old, new)


def bind_shapes(graph: Graph, ctx: Any) -> Graph:
    schemas = ctx.registry.schemas
    for op in ctx.ops(graph):  # (memoised) ops that can carry no body and are no like op: nothing to look at
        if op not in _PLAIN and _short(op) not in _SCHEMA and op in schemas:
            schema = schemas[op]
            if "shape_operand" in schema.traits and schema.decomposition is not None:
                _DECOMPOSED[op] = schema  # (this registry's schema, looked up again at every compile)
            elif not any("graph" in spec.kind for spec in schema.attrs.values()):
                _PLAIN.add(op)
    shaped = _bind(graph, ctx)
    if shaped is not graph:
        ctx.note("bind_shapes", "gradient ops given the compiled shapes as attributes")
    return shaped


PASSES = [PassSpec("bind_shapes", bind_shapes, after="infer_types", min_level=0,
                   doc="*_like_internal gradient ops -> their attribute forms at the compiled shapes")]
