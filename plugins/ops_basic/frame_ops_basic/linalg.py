"""matmul (2-D and batched) and its gradient ops.

``matmul(a, b)``: ``a[..., m, k] @ b[..., k, n] -> [..., m, n]`` with numpy
broadcasting over the batch axes; both operands have rank >= 2.

``matmul_grad_lhs_internal(gy, b; shape) = gy @ b^T`` and
``matmul_grad_rhs_internal(a, gy; shape) = a^T @ gy``, summed over batch
axes that broadcasting added to the operand, down to ``shape`` (the
operand's shape). Transposes are strided views handed to BLAS, never copies.
Products and batch sums run in ``accumulation_dtype`` (float32 for
half-precision operands), rounded once to the operand dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import accumulation_dtype, broadcast_axes, broadcast_shapes, sum_into, unbroadcast


def _check_operands(ctx: NodeContext, a: TensorType, b: TensorType, what: str) -> tuple[int, ...]:
    if a.dtype is not b.dtype:
        raise ctx.error(f"operands must share a dtype, got {a} and {b}")
    if not (a.dtype.is_float or a.dtype.is_int):
        raise ctx.error(f"needs numeric operands, got {a}")
    if a.rank < 2 or b.rank < 2:
        raise ctx.error(f"operands need rank >= 2, got {a} and {b}; reshape a vector to [1, n] or [n, 1]")
    if a.shape[-1] != b.shape[-2]:
        raise ctx.error(f"{what}: inner dimensions differ: {a} @ {b} ({a.shape[-1]} vs {b.shape[-2]})")
    return broadcast_shapes(ctx, [a.shape[:-2], b.shape[:-2]])


def _matmul_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    batch = _check_operands(ctx, a, b, "a @ b")
    return [TensorType(a.dtype, batch + (a.shape[-2], b.shape[-1]))]


def _matmul_kernel(ctx: NodeContext) -> Callable:
    a_t = ctx.input_types[0]
    dtype, acc = a_t.dtype.np, accumulation_dtype(a_t)
    if acc == dtype:
        return np.matmul  # accepts a trailing out

    def widened(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        result = np.matmul(a.astype(acc), b.astype(acc))
        if out is None:
            return result.astype(dtype)
        out[...] = result  # rounded once
        return out
    return widened


def _swap(t: TensorType) -> TensorType:
    return t.with_shape(t.shape[:-2] + (t.shape[-1], t.shape[-2]))


def _matmul_gradient(ctx: NodeContext):
    a, b = ctx.input_types
    # ga = gy @ b^T, gb = a^T @ gy (each summed over its broadcast batch axes)
    return ctx.grad_graph(lambda a_, b_, y, gy: [ops.matmul_grad_lhs_internal(gy, b_, shape=a.shape),
                                                ops.matmul_grad_rhs_internal(a_, gy, shape=b.shape)])


MATMUL = OpSchema(
    "matmul",
    inputs=("a", "b"),
    shape_infer=_matmul_shape,
    kernels={"cpu": _matmul_kernel},
    gradient=_matmul_gradient,
    traits=("accepts_out",),
    doc="Matrix product a @ b of operands of rank >= 2; leading (batch) axes broadcast as in numpy.",
    examples=[
        Example(["f32[3, 4]", "f32[4, 5]"]),
        Example(["f32[2, 3, 4]", "f32[2, 4, 5]"], note="batched"),
        Example(["f32[2, 3, 4]", "f32[4, 5]"], note="batch broadcast on the right operand"),
        Example(["f64[1, 3, 4]", "f64[2, 4, 2]"], note="batch broadcast on the left operand"),
    ],
)


def _grad_kernel(ctx: NodeContext, transpose_first: bool) -> Callable:
    x_t, y_t = ctx.input_types
    shape = tuple(ctx.attrs["shape"])
    product = _product_shape(x_t, y_t, transpose_first)
    axes = broadcast_axes(product, shape)  # batch axes broadcasting added to (or stretched in) the operand
    dtype, acc = x_t.dtype.np, accumulation_dtype(x_t)

    def kernel(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if acc != dtype:
            x, y = x.astype(acc), y.astype(acc)
        xt = np.swapaxes(x, -1, -2) if transpose_first else x
        yt = y if transpose_first else np.swapaxes(y, -1, -2)
        if out is None:
            out = np.empty(shape, dtype)
        if not axes and acc == dtype:
            return np.matmul(xt, yt, out)
        return sum_into(np.matmul(xt, yt), axes, out, acc)
    return kernel


def _product_shape(x: TensorType, y: TensorType, transpose_first: bool) -> tuple[int, ...]:
    xs = _swap(x).shape if transpose_first else x.shape
    ys = y.shape if transpose_first else _swap(y).shape
    batch = np.broadcast_shapes(xs[:-2], ys[:-2])
    return tuple(batch) + (xs[-2], ys[-1])


def _grad_shape(transpose_first: bool) -> Callable[[NodeContext], list[TensorType]]:
    def infer(ctx: NodeContext) -> list[TensorType]:
        x, y = ctx.input_types
        lhs = _swap(x) if transpose_first else x
        rhs = y if transpose_first else _swap(y)
        _check_operands(ctx, lhs, rhs, "gy @ b^T" if not transpose_first else "a^T @ gy")
        product = _product_shape(x, y, transpose_first)
        shape = tuple(ctx.attrs["shape"])
        if len(shape) < 2 or shape[-2:] != product[-2:] or broadcast_shapes(ctx, [shape, product]) != product:
            raise ctx.error(f"shape {list(shape)} is not the product {list(product)} reduced over broadcast batch axes")
        return [TensorType(x.dtype, shape)]
    return infer


_SHAPE_ATTR = {"shape": AttrSpec("shape", doc="shape of the operand this gradient belongs to")}

# matmul_grad_lhs_internal(gy, b) = gy @ b^T
#   second order (seed 000 §5): g_gy = matmul(gga, b), g_b = matmul_grad_rhs_internal(gga, gy)
MATMUL_GRAD_LHS = OpSchema(
    "matmul_grad_lhs_internal",
    inputs=("gy", "b"),
    attrs=_SHAPE_ATTR,
    shape_infer=_grad_shape(False),
    kernels={"cpu": lambda ctx: _grad_kernel(ctx, False)},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, b, ga, gga: [
        unbroadcast(ops.matmul(gga, b), gy.type),
        ops.matmul_grad_rhs_internal(gga, gy, shape=b.shape)]),
    traits=("accepts_out",),
    doc="gy @ b^T reduced to `shape`: the gradient of matmul for its left operand.",
    examples=[Example(["f32[3, 5]", "f32[4, 5]"], {"shape": [3, 4]}),
              Example(["f32[2, 3, 5]", "f32[4, 5]"], {"shape": [2, 3, 4]}),
              Example(["f64[2, 3, 2]", "f64[2, 4, 2]"], {"shape": [1, 3, 4]})],
)

# matmul_grad_rhs_internal(a, gy) = a^T @ gy
#   second order (seed 000 §5): g_a = matmul_grad_lhs_internal(gy, ggb), g_gy = matmul(a, ggb)
MATMUL_GRAD_RHS = OpSchema(
    "matmul_grad_rhs_internal",
    inputs=("a", "gy"),
    attrs=_SHAPE_ATTR,
    shape_infer=_grad_shape(True),
    kernels={"cpu": lambda ctx: _grad_kernel(ctx, True)},
    gradient=lambda ctx: ctx.grad_graph(lambda a, gy, gb, ggb: [
        ops.matmul_grad_lhs_internal(gy, ggb, shape=a.shape),
        unbroadcast(ops.matmul(a, ggb), gy.type)]),
    traits=("accepts_out",),
    doc="a^T @ gy reduced to `shape`: the gradient of matmul for its right operand.",
    examples=[Example(["f32[3, 4]", "f32[3, 5]"], {"shape": [4, 5]}),
              Example(["f32[2, 3, 4]", "f32[2, 3, 5]"], {"shape": [4, 5]}, note="summed over the batch"),
              Example(["f64[2, 3, 4]", "f64[2, 3, 5]"], {"shape": [2, 4, 5]})],
)


SCHEMAS = [MATMUL, MATMUL_GRAD_LHS, MATMUL_GRAD_RHS]
