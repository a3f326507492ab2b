"""Reductions and the internal ops that move gradients between shapes.

``sum``/``mean`` reduce over ``axes`` (``None``: all) with ``keepdims``.
``sum_grad_internal`` expands a reduced gradient back to the input shape,
carrying the input shape and the reduced axes as attributes (seed 000 §4: the
gradient alone cannot tell which of two equal-sized axes was reduced); it
accepts ``gy`` in both keepdims forms. ``reduce_to_shape_internal`` sums over
broadcast axes (the gradient of broadcasting) and ``broadcast_to_internal``
is its adjoint. Sums accumulate in ``accumulation_dtype``: float32 for
float16/bfloat16 (rounded once to the output), otherwise the input's own
dtype, so integer sums keep theirs. Bool inputs are refused: a bool sum would
be a logical any, not a count.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import accumulation_dtype, broadcast_axes, broadcast_shapes, normalize_axes, require_numeric, sum_into

_AXES = AttrSpec("ints", None, "axes to reduce (negative counts from the end); none: all axes")
_KEEPDIMS = AttrSpec("bool", False, "keep reduced axes with size 1")


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_shape(ctx: NodeContext) -> list[TensorType]:
    require_numeric(ctx)
    (x,) = ctx.input_types
    axes = normalize_axes(ctx, ctx.attrs["axes"], x.rank)
    return [TensorType(x.dtype, _reduced_shape(x.shape, axes, ctx.attrs["keepdims"]))]


def _reduce_kernel(mean: bool) -> Callable[[NodeContext], Callable]:
    """``np.add.reduce`` straight into the output (no ``np.sum``/``np.mean`` wrappers); a mean then divides by
    the count exactly as ``np.mean`` does (by a numpy ``intp``, computed in float64 for float32 and rounded
    once), so results are bitwise numpy's."""
    def build(ctx: NodeContext) -> Callable:
        (x,) = ctx.input_types
        axes = normalize_axes(ctx, ctx.attrs["axes"], x.rank)
        keepdims = ctx.attrs["keepdims"]
        shape = _reduced_shape(x.shape, axes, keepdims)
        dtype, acc = x.dtype.np, accumulation_dtype(x)
        count = np.intp(math.prod(x.shape[a] for a in axes))
        reduce, divide, empty = np.add.reduce, np.true_divide, np.empty
        # np.mean divides a float32 sum by an intp count in float64, rounding once to float32. Dividing by the
        # count as a float32 gives the same bits when the count is exact in float32 (at most 2**24): the
        # float64 quotient rounded to float32 is the correctly rounded float32 quotient, as 53 >= 2 * 24 + 2
        # (double rounding is innocuous for division); and it skips numpy's casting loop (a few us a call).
        exact = dtype in (np.float32, np.float64) and count <= 2 ** np.finfo(dtype).nmant + 1
        divisor = dtype.type(count) if exact else count

        def kernel(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            if out is None:
                out = empty(shape, dtype)
            # numpy takes keepdims by position too; its stub only by keyword
            reduce(a, axes, dtype, out, keepdims)  # type: ignore[call-overload]
            if mean:
                if exact:
                    divide(out, divisor, out=out)
                else:
                    divide(out, count, out=out, casting="unsafe")
            return out

        def widened(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:  # half precision
            total = empty(shape, acc)
            # numpy takes keepdims by position too; its stub only by keyword
            reduce(a, axes, acc, total, keepdims)  # type: ignore[call-overload]
            if mean:
                divide(total, count, out=total, casting="unsafe")
            if out is None:
                return total.astype(dtype)
            out[...] = total  # the float32 result, rounded once
            return out
        return kernel if acc == dtype else widened
    return build


def _sum_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    axes = normalize_axes(ctx, ctx.attrs["axes"], x.rank)
    # gx = gy copied along the reduced axes to x's shape (read from x at run time: any batch size)
    return ctx.grad_graph(lambda x_, y, gy: ops.sum_grad_like_internal(gy, x_, axes=axes))


def _mean_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    axes = normalize_axes(ctx, ctx.attrs["axes"], x.rank)
    # gx = expand(gy) * (1 / N), N counted from x's shape at run time (compiled: the constant 1/N, as before)
    return ctx.grad_graph(lambda x_, y, gy: ops.sum_grad_like_internal(gy, x_, axes=axes)
                          * ops.inverse_count_internal(x_, axes=axes, dtype=x.dtype))


_REDUCE_EXAMPLES = [
    Example(["f32[3, 4]"]),
    Example(["f32[2, 3, 4]"], {"axes": [0, 2]}),
    Example(["f32[2, 3, 4]"], {"axes": [1], "keepdims": True}),
    Example(["f64[4, 4]"], {"axes": [-1]}),
]

SUM = OpSchema(
    "sum",
    inputs=("x",),
    attrs={"axes": _AXES, "keepdims": _KEEPDIMS},
    shape_infer=_reduce_shape,
    kernels={"cpu": _reduce_kernel(mean=False)},
    gradient=_sum_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="Sum over `axes` (all axes by default), keeping reduced axes as size 1 with keepdims=True.",
    examples=_REDUCE_EXAMPLES,
)


def _mean_shape(ctx: NodeContext) -> list[TensorType]:
    (t,) = _reduce_shape(ctx)
    if not t.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {ctx.input_types[0]}")
    return [t]


MEAN = OpSchema(
    "mean",
    inputs=("x",),
    attrs={"axes": _AXES, "keepdims": _KEEPDIMS},
    shape_infer=_mean_shape,
    kernels={"cpu": _reduce_kernel(mean=True)},
    gradient=_mean_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="Mean over `axes` (all axes by default), keeping reduced axes as size 1 with keepdims=True.",
    examples=_REDUCE_EXAMPLES,
)


# sum_grad_internal(gy; input_shape, axes): gy expanded along `axes` to `input_shape`.
#   gy may have the reduced axes removed (sum with keepdims=False) or kept as size 1 (keepdims=True).
#   second order (seed 000 §5): ggy = sum(ggx, axes, keepdims recovered from gy's rank)
def _keepdims(ctx: NodeContext) -> bool:
    (gy,) = ctx.input_types
    shape, axes = ctx.attrs["input_shape"], ctx.attrs["axes"]
    for a in axes:
        if not 0 <= a < len(shape):
            raise ctx.error(f"axis {a} is out of range for input_shape {list(shape)}")
    if gy.shape == _reduced_shape(shape, axes, True) and len(shape) == gy.rank:
        return True
    if gy.shape == _reduced_shape(shape, axes, False):
        return False
    raise ctx.error(
        f"gy {gy} fits neither keepdims form of input_shape {list(shape)} reduced over axes {list(axes)}: expected "
        f"{list(_reduced_shape(shape, axes, False))} or {list(_reduced_shape(shape, axes, True))}"
    )


def _sum_grad_shape(ctx: NodeContext) -> list[TensorType]:
    _keepdims(ctx)
    return [TensorType(ctx.input_types[0].dtype, ctx.attrs["input_shape"])]


def _sum_grad_kernel(ctx: NodeContext) -> Callable:
    shape = ctx.attrs["input_shape"]
    kept = _reduced_shape(shape, ctx.attrs["axes"], True)
    dtype = ctx.input_types[0].dtype.np

    def kernel(gy: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(shape, dtype)
        np.copyto(out, gy.reshape(kept))
        return out
    return kernel


def _sum_grad_gradient(ctx: NodeContext):
    axes, keepdims = ctx.attrs["axes"], _keepdims(ctx)
    return ctx.grad_graph(lambda gy, y, ggx: ops.sum(ggx, axes=axes, keepdims=keepdims))


SUM_GRAD = OpSchema(
    "sum_grad_internal",
    inputs=("gy",),
    attrs={"input_shape": AttrSpec("shape", doc="shape of the summed input"),
           "axes": AttrSpec("ints", doc="the reduced axes, non-negative")},
    shape_infer=_sum_grad_shape,
    kernels={"cpu": _sum_grad_kernel},
    gradient=_sum_grad_gradient,
    traits=("accepts_out",),
    doc="The gradient of sum: gy copied along the reduced axes back to the input shape.",
    examples=[Example(["f32[4]"], {"input_shape": [3, 4], "axes": [0]}),
              Example(["f32[1, 4]"], {"input_shape": [3, 4], "axes": [0]}, note="keepdims form"),
              Example(["f32[]"], {"input_shape": [2, 3], "axes": [0, 1]})],
)


# reduce_to_shape_internal(x; shape): x summed over the axes numpy broadcasting added or stretched.
#   gradient: gx = broadcast_to_internal(gy, shape=x.shape)
def _reduce_to_shape(ctx: NodeContext) -> list[TensorType]:
    require_numeric(ctx)
    (x,) = ctx.input_types
    target = ctx.attrs["shape"]
    if len(target) > x.rank or broadcast_shapes(ctx, [x.shape, target]) != x.shape:
        raise ctx.error(f"cannot reduce {x} to shape {list(target)}: the target must broadcast to the input's shape")
    return [TensorType(x.dtype, target)]


def _reduce_to_kernel(ctx: NodeContext) -> Callable:
    (x_t,) = ctx.input_types
    target = tuple(ctx.attrs["shape"])
    axes = broadcast_axes(x_t.shape, target)
    dtype, acc = x_t.dtype.np, accumulation_dtype(x_t)
    if acc != dtype:
        return lambda x, out=None: sum_into(x, axes, out if out is not None else np.empty(target, dtype), acc)
    # The sum goes straight into out seen with the reduced axes kept (a view: it only inserts unit axes).
    kept = (1,) * (x_t.rank - len(target)) + target
    reduce, empty = np.add.reduce, np.empty

    def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = empty(target, dtype)
        # numpy takes keepdims by position too; its stub only by keyword
        reduce(x, axes, dtype, out.reshape(kept), True)  # type: ignore[call-overload]
        return out
    return kernel


REDUCE_TO_SHAPE = OpSchema(
    "reduce_to_shape_internal",
    inputs=("x",),
    attrs={"shape": AttrSpec("shape", doc="the target shape, which broadcasts to x's shape")},
    shape_infer=_reduce_to_shape,
    kernels={"cpu": _reduce_to_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.broadcast_to_internal(gy, shape=x.shape)),
    traits=("accepts_out",),
    doc="x summed over broadcast axes down to `shape`: the gradient of numpy broadcasting.",
    examples=[Example(["f32[2, 3, 4]"], {"shape": [4]}), Example(["f32[3, 4]"], {"shape": [3, 1]}),
              Example(["f64[2, 3]"], {"shape": []})],
)


# broadcast_to_internal(x; shape): x broadcast (and materialised) to `shape`.
#   gradient: gx = reduce_to_shape_internal(gy, shape=x.shape)
def _broadcast_to_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    target = ctx.attrs["shape"]
    if x.rank > len(target) or broadcast_shapes(ctx, [x.shape, target]) != tuple(target):
        raise ctx.error(f"cannot broadcast {x} to shape {list(target)}")
    return [TensorType(x.dtype, target)]


def _broadcast_to_kernel(ctx: NodeContext) -> Callable:
    target = ctx.attrs["shape"]
    dtype = ctx.input_types[0].dtype.np

    def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(target, dtype)
        np.copyto(out, x)
        return out
    return kernel


BROADCAST_TO = OpSchema(
    "broadcast_to_internal",
    inputs=("x",),
    attrs={"shape": AttrSpec("shape", doc="the target shape")},
    shape_infer=_broadcast_to_shape,
    kernels={"cpu": _broadcast_to_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.reduce_to_shape_internal(gy, shape=x.shape)),
    traits=("accepts_out",),
    doc="x broadcast to `shape` (numpy rules), materialised: the adjoint of reduce_to_shape_internal.",
    examples=[Example(["f32[4]"], {"shape": [2, 3, 4]}), Example(["f32[3, 1]"], {"shape": [3, 4]}),
              Example(["f64[]"], {"shape": [2, 3]})],
)

SCHEMAS = [SUM, MEAN, SUM_GRAD, REDUCE_TO_SHAPE, BROADCAST_TO]
