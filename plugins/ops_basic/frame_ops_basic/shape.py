"""Shape ops: reshape and transpose. Both return views of their input (trait ``view``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, ops


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
    return lambda x: np.reshape(x, shape)


RESHAPE = OpSchema(
    "reshape",
    inputs=("x",),
    attrs={"shape": AttrSpec("ints", doc="the new shape; one entry may be -1")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(_target(ctx))],
    kernels={"cpu": _reshape_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.reshape(gy, shape=x.shape)),
    traits=("view",),
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
    traits=("view",),
    doc="Axes permuted by `perm` (reversed when omitted).",
    examples=[Example(["f32[3, 4]"]), Example(["f32[2, 3, 4]"], {"perm": [1, 2, 0]}), Example(["f64[2, 5]"], {"perm": [-1, 0]})],
)

SCHEMAS = [RESHAPE, TRANSPOSE]
