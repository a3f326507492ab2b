"""Extremum reductions: ``max``/``min`` over ``axes`` (``keepdims``), and ``argmax``/``argmin`` along one axis.

``max``/``min`` reduce like ``sum`` (``axes`` none: all axes) and propagate
NaN. Their gradient goes to the elements equal to the result; when several
tie, it is split evenly among them (``gy / count`` each, as torch's ``amax``):
a symmetric subgradient whose shares sum to ``gy``.

``argmax``/``argmin`` give the int64 position of the first extremum along
``axis`` (none: of the flattened input, as numpy); a NaN counts as the
extremum. Their output is an integer, which carries no gradient.

Reducing over an axis of size 0 is refused at build time (an empty set has no
maximum).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, int64, ops

from ._shapes import normalize_axes, require_numeric
from .compare import NO_GRADIENT

_AXES = AttrSpec("ints", None, "axes to reduce (negative counts from the end); none: all axes")
_KEEPDIMS = AttrSpec("bool", False, "keep reduced axes with size 1")


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """``shape`` reduced over ``axes`` (non-negative), keeping them as size 1 with ``keepdims``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def nonempty_axes(ctx: NodeContext, axes: tuple[int, ...] | None, what: str) -> tuple[int, ...]:
    """``axes`` normalised; a ShapeError when one of them has size 0 (``what`` names the reduction)."""
    (x,) = ctx.input_types
    axes = normalize_axes(ctx, axes, x.rank)
    empty = [a for a in axes if x.shape[a] == 0]
    if empty:
        raise ctx.error(f"cannot take the {what} over axis {empty[0]} of {x}: it has size 0")
    return axes


def _extremum_shape(ctx: NodeContext) -> list[TensorType]:
    require_numeric(ctx)
    (x,) = ctx.input_types
    axes = nonempty_axes(ctx, ctx.attrs["axes"], ctx.op)
    return [x.with_shape(reduced_shape(x.shape, axes, ctx.attrs["keepdims"]))]


def _extremum_kernel(fn: Callable) -> Callable[[NodeContext], Callable]:
    def build(ctx: NodeContext) -> Callable:
        (x,) = ctx.input_types
        (y,) = ctx.output_types
        axes = normalize_axes(ctx, ctx.attrs["axes"], x.rank)
        keepdims = ctx.attrs["keepdims"]

        def kernel(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            if out is None:
                out = np.empty(y.shape, y.dtype.np)
            return fn(a, axis=axes, keepdims=keepdims, out=out)  # exact: no accumulation, any dtype
        return kernel
    return build


def _extremum_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    axes = normalize_axes(ctx, ctx.attrs["axes"], x.rank)

    def kept(t):  # noqa: ANN001, ANN202 - t with the reduced axes as size 1 (no size written down: any batch)
        return t if ctx.attrs["keepdims"] or not axes else ops.expand_dims(t, axes=list(axes))

    def grad(x_, y, gy):
        if not gy.dtype.is_float:
            return None
        winners = ops.cast(ops.equal(x_, kept(y)), to=gy.dtype)  # 1 where x equals the result
        count = ops.sum(winners, axes=axes, keepdims=True)
        return winners * (kept(gy) / count)
    return ctx.grad_graph(grad)


_REDUCE_EXAMPLES = [
    Example(["f32[3, 4]"]),
    Example(["f32[2, 3, 4]"], {"axes": [0, 2]}),
    Example(["f32[2, 3, 4]"], {"axes": [1], "keepdims": True}),
    Example(["f64[4, 4]"], {"axes": [-1]}),
    Example(["f64[]"], note="rank 0: the identity"),
    Example(["i32[3, 5]"], {"axes": [1]}, low=-9.0, high=9.0, note="integers (no gradient)"),
]


def _extremum(name: str, fn: Callable, doc: str) -> OpSchema:
    return OpSchema(
        name,
        inputs=("x",),
        attrs={"axes": _AXES, "keepdims": _KEEPDIMS},
        shape_infer=_extremum_shape,
        kernels={"cpu": _extremum_kernel(fn)},
        gradient=_extremum_gradient,
        traits=("accepts_out", "any_shape_gradient"),
        doc=doc + " over `axes` (all by default); NaN propagates. The gradient goes to the elements equal to the "
                  "result, split evenly among ties.",
        examples=_REDUCE_EXAMPLES,
    )


# max(x; axes, keepdims)     gx = gy * [x == y] / count(x == y)  (ties share gy evenly)
MAX = _extremum("max", np.max, "The largest element")
# min(x; axes, keepdims)     gx = gy * [x == y] / count(x == y)  (ties share gy evenly)
MIN = _extremum("min", np.min, "The smallest element")


# -- argmax / argmin --------------------------------------------------------------------------------
def _arg_axis(ctx: NodeContext) -> int | None:
    (x,) = ctx.input_types
    axis = ctx.attrs["axis"]
    if axis is None:
        if x.size == 0:
            raise ctx.error(f"cannot take the {ctx.op} of {x}: it has no elements")
        return None
    (axis,) = nonempty_axes(ctx, (axis,), ctx.op)
    return axis


def _arg_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    axis, keepdims = _arg_axis(ctx), ctx.attrs["keepdims"]
    if axis is None:
        shape = (1,) * x.rank if keepdims else ()
    else:
        shape = reduced_shape(x.shape, (axis,), keepdims)
    return [TensorType(int64, shape)]


def _arg_kernel(fn: Callable) -> Callable[[NodeContext], Callable]:
    def build(ctx: NodeContext) -> Callable:
        (y,) = ctx.output_types
        axis, keepdims = _arg_axis(ctx), ctx.attrs["keepdims"]

        def kernel(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            if out is None:
                out = np.empty(y.shape, np.int64)
            return fn(a, axis=axis, keepdims=keepdims, out=out)
        return kernel
    return build


def _arg(name: str, fn: Callable, what: str) -> OpSchema:
    return OpSchema(
        name,
        inputs=("x",),
        attrs={"axis": AttrSpec("int", None, "the axis to search (negative counts from the end); none: the "
                                             "flattened input"),
               "keepdims": _KEEPDIMS},
        shape_infer=_arg_shape,
        kernels={"cpu": _arg_kernel(fn)},
        not_differentiable=NO_GRADIENT,
        traits=("accepts_out",),
        doc=f"The int64 position of the first {what} along `axis` (of the flattened input when none); "
            "a NaN counts as the extremum. No gradient: an integer carries none.",
        examples=[Example(["f32[3, 4]"], {"axis": 1}), Example(["f64[2, 3, 4]"], {"axis": 0, "keepdims": True}),
                  Example(["f32[5]"]), Example(["f32[]"]), Example(["i32[3, 4]"], {"axis": -1}, low=-9.0, high=9.0),
                  Example(["bool[2, 5]"], {"axis": 1}, note="the first true")],
    )


# argmax / argmin: integer outputs, never on the gradient chain
ARGMAX = _arg("argmax", np.argmax, "maximum")
ARGMIN = _arg("argmin", np.argmin, "minimum")

SCHEMAS = [MAX, MIN, ARGMAX, ARGMIN]
