"""Shape ops that move no data: reshape, transpose, expand_dims, squeeze, broadcast_to.

Every one returns a view of its input (trait ``view``; the runtime copies a
view before it leaves ``run``). ``broadcast_to``'s view is read-only with
zero strides, which is sound because kernels never write their inputs.
``broadcast_to_internal`` (reductions.py) stays as the materialising adjoint
of ``reduce_to_shape_internal``; ``broadcast_to`` is the user-facing op.
Slicing, padding, concatenation and stacking copy data: see ``regions.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import broadcast_shapes, valid_axes


# reshape(x; shape) -> x with a new shape (one entry may be -1)      gx = reshape(gy, x.shape)
def _target(ctx: NodeContext) -> tuple[int, ...]:
    (x,) = ctx.input_types
    shape = tuple(ctx.attrs["shape"])
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ctx.error(f"shape {list(shape)} may hold at most one -1 and otherwise non-negative sizes")
    known = math.prod(d for d in shape if d != -1)
    if unknown:
        if known == 0 or x.size % known:
            raise ctx.error(f"cannot reshape {x} ({x.size} elements) to {list(shape)}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if math.prod(shape) != x.size:
        raise ctx.error(f"cannot reshape {x} ({x.size} elements) to {list(shape)} ({math.prod(shape)} elements)")
    return shape


def _reshape_kernel(ctx: NodeContext) -> Callable:
    shape = _target(ctx)
    # the method, not np.reshape: the same view, without np.reshape's argument handling (~1 us of ~1.3 a call)
    return lambda x: x.reshape(shape)


RESHAPE = OpSchema(
    "reshape",
    inputs=("x",),
    attrs={"shape": AttrSpec("ints", doc="the new shape; one entry may be -1")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(_target(ctx))],
    kernels={"cpu": _reshape_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.reshape_like_internal(gy, x)),  # x's shape at run time
    traits=("view", "any_shape_gradient"),
    doc="The same elements (row-major order) with a new shape; one size may be -1.",
    examples=[Example(["f32[3, 4]"], {"shape": [2, 6]}), Example(["f32[2, 3, 4]"], {"shape": [-1, 4]}),
              Example(["f64[6]"], {"shape": [2, 3]})],
)


# transpose(x; perm) -> axes permuted (reversed by default)       gx = transpose(gy, inverse(perm))
def _perm(ctx: NodeContext) -> tuple[int, ...]:
    (x,) = ctx.input_types
    perm = ctx.attrs["perm"]
    if perm is None:
        return tuple(reversed(range(x.rank)))
    if sorted(p % x.rank if x.rank else p for p in perm) != list(range(x.rank)) or any(not -x.rank <= p < x.rank for p in perm):
        raise ctx.error(f"perm {list(perm)} is not a permutation of the {x.rank} axes of {x}")
    return tuple(p % x.rank for p in perm)


def _transpose_gradient(ctx: NodeContext):
    inverse = tuple(np.argsort(_perm(ctx)).tolist())
    return ctx.grad_graph(lambda x, y, gy: ops.transpose(gy, perm=inverse))


def _transpose_kernel(ctx: NodeContext) -> Callable:
    perm = _perm(ctx)
    return lambda x: np.transpose(x, perm)


TRANSPOSE = OpSchema(
    "transpose",
    inputs=("x",),
    attrs={"perm": AttrSpec("ints", None, "the axis order; none: reversed")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(tuple(ctx.input_types[0].shape[p] for p in _perm(ctx)))],
    kernels={"cpu": _transpose_kernel},
    gradient=_transpose_gradient,
    traits=("view", "any_shape_gradient"),
    doc="Axes permuted by `perm` (reversed when omitted).",
    examples=[Example(["f32[3, 4]"]), Example(["f32[2, 3, 4]"], {"perm": [1, 2, 0]}), Example(["f64[2, 5]"], {"perm": [-1, 0]})],
)


def axis_in(ctx: NodeContext, axis: int, rank: int, what: str = "") -> int:
    """``axis`` made non-negative for a tensor of ``rank`` axes; a ShapeError naming the valid range otherwise."""
    if not -rank <= axis < rank:
        raise ctx.error(f"{what or f'axis {axis}'} is out of range for rank {rank} ({valid_axes(rank)})")
    return axis % rank


def distinct_axes(ctx: NodeContext, axes: tuple[int, ...], rank: int, what: str = "axes") -> tuple[int, ...]:
    """``axes`` made non-negative, in the order given; errors for an axis out of range or listed twice."""
    out = tuple(axis_in(ctx, a, rank, f"axis {a} in {what}") for a in axes)
    if len(set(out)) != len(out):
        raise ctx.error(f"{what} {list(axes)} name an axis twice (for rank {rank})")
    return out


# expand_dims(x; axes) -> x with size-1 axes inserted at `axes` (positions in the output)
#   gx = squeeze(gy, axes)
def _inserted(ctx: NodeContext) -> tuple[int, ...]:
    (x,) = ctx.input_types
    return tuple(sorted(distinct_axes(ctx, ctx.attrs["axes"], x.rank + len(ctx.attrs["axes"]),
                                      "axes (positions in the result)")))


def _expand_dims_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    inserted = _inserted(ctx)
    dims = iter(x.shape)
    return [x.with_shape(tuple(1 if i in inserted else next(dims) for i in range(x.rank + len(inserted))))]


def _expand_dims_kernel(ctx: NodeContext) -> Callable:
    shape = ctx.output_types[0].shape
    return lambda x: x.reshape(shape)  # a view: inserting size-1 axes never needs a copy


EXPAND_DIMS = OpSchema(
    "expand_dims",
    inputs=("x",),
    attrs={"axes": AttrSpec("ints", doc="where the new size-1 axes stand in the output (negative counts from "
                                        "the output's end)")},
    shape_infer=_expand_dims_shape,
    kernels={"cpu": _expand_dims_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.squeeze(gy, axes=_inserted(ctx))),
    traits=("view", "any_shape_gradient"),
    doc="x with new size-1 axes at `axes`, positions in the result as numpy.expand_dims counts them.",
    examples=[Example(["f32[3, 4]"], {"axes": [0]}), Example(["f32[3, 4]"], {"axes": [-1, 1]}),
              Example(["f64[]"], {"axes": [0, 1]}), Example(["f32[2, 3]"], {"axes": []}, note="no axis")],
)


# squeeze(x; axes) -> x without the size-1 axes `axes` (all size-1 axes when omitted)
#   gx = expand_dims(gy, axes)
def _squeezed(ctx: NodeContext) -> tuple[int, ...]:
    (x,) = ctx.input_types
    if ctx.attrs["axes"] is None:
        return tuple(i for i, d in enumerate(x.shape) if d == 1)
    axes = tuple(sorted(distinct_axes(ctx, ctx.attrs["axes"], x.rank)))
    wide = [a for a in axes if x.shape[a] != 1]
    if wide:
        raise ctx.error(f"can only remove axes of size 1, but axis {wide[0]} of {x} has size {x.shape[wide[0]]}; "
                        "slice it to size 1 first or leave it out of `axes`")
    return axes


def _squeeze_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    removed = _squeezed(ctx)
    return [x.with_shape(tuple(d for i, d in enumerate(x.shape) if i not in removed))]


def _squeeze_kernel(ctx: NodeContext) -> Callable:
    shape = ctx.output_types[0].shape
    return lambda x: x.reshape(shape)  # a view: removing size-1 axes never needs a copy


SQUEEZE = OpSchema(
    "squeeze",
    inputs=("x",),
    attrs={"axes": AttrSpec("ints", None, "the size-1 axes to remove (negative counts from the end); none: all "
                                          "size-1 axes")},
    shape_infer=_squeeze_shape,
    kernels={"cpu": _squeeze_kernel},
    # gx = gy in x's shape, read at run time: squeeze() of every size-1 axis drops other axes at other sizes
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.reshape_like_internal(gy, x)),
    traits=("view", "any_shape_gradient"),
    doc="x without the size-1 axes listed in `axes` (every size-1 axis when omitted), as numpy.squeeze.",
    examples=[Example(["f32[3, 1, 4]"], {"axes": [1]}), Example(["f32[1, 3, 1]"]),
              Example(["f64[1, 1]"], {"axes": [-1, 0]}), Example(["f32[2, 3]"], note="nothing to remove")],
)


# broadcast_to(x; shape) -> x broadcast to `shape` by numpy's rules (a read-only view)
#   gx = reduce_to_shape_internal(gy, shape=x.shape): gy summed over the axes broadcasting added or stretched
def _broadcast_to_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    target = tuple(ctx.attrs["shape"])
    if x.rank > len(target) or broadcast_shapes(ctx, [x.shape, target]) != target:
        raise ctx.error(f"cannot broadcast {x} to shape {list(target)}: aligned from the end, each size of x must "
                        "equal the target's or be 1, and x may not have more axes than the target")
    return [x.with_shape(target)]


def _broadcast_to_kernel(ctx: NodeContext) -> Callable:
    target = tuple(ctx.attrs["shape"])
    return lambda x: np.broadcast_to(x, target)


def _broadcast_to_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    return ctx.grad_graph(lambda x_, y, gy: ops.reduce_like_internal(gy, x_))  # to x's shape at run time


BROADCAST_TO = OpSchema(
    "broadcast_to",
    inputs=("x",),
    attrs={"shape": AttrSpec("shape", doc="the target shape")},
    shape_infer=_broadcast_to_shape,
    kernels={"cpu": _broadcast_to_kernel},
    gradient=_broadcast_to_gradient,
    traits=("view", "any_shape_gradient"),
    doc="x broadcast to `shape` by numpy's rules (new leading axes, size-1 axes stretched), without a copy.",
    examples=[Example(["f32[4]"], {"shape": [2, 3, 4]}), Example(["f32[3, 1]"], {"shape": [3, 4]}),
              Example(["f64[]"], {"shape": [2, 3]}), Example(["f32[2, 3]"], {"shape": [2, 3]}, note="same shape")],
)

SCHEMAS = [RESHAPE, TRANSPOSE, EXPAND_DIMS, SQUEEZE, BROADCAST_TO]
