"""mse_loss (ARCH-064): its own op with a scalar output, and its gradient op.

``mse_loss(pred, target) = mean((pred - target)^2)`` over all N elements;
``pred`` and ``target`` have one type.
``mse_loss_grad_internal(pred, target, gy) = 2 (pred - target) / N * gy`` is
the gradient for ``pred``; ``target`` gets its negation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import accumulation_dtype


def _mse_shape(ctx: NodeContext) -> list[TensorType]:
    pred, target = ctx.input_types
    if pred != target:
        raise ctx.error(f"pred and target must have one type, got {pred} and {target}")
    if not pred.dtype.is_float:
        raise ctx.error(f"needs floating inputs, got {pred}")
    return [TensorType(pred.dtype, ())]


def _mse_kernel(ctx: NodeContext) -> Callable:
    t = ctx.input_types[0]
    n = max(t.size, 1)
    dtype, wide = t.dtype.np, accumulation_dtype(t)

    def kernel(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
        d = np.subtract(pred, target, dtype=wide).reshape(-1)
        return np.asarray(np.dot(d, d) / n, dtype)
    return kernel


def _mse_gradient(p, t, y, gy):
    g = ops.mse_loss_grad_internal(p, t, gy)  # computed once: -g is the target's share
    return [g, -g]


MSE_LOSS = OpSchema(
    "mse_loss",
    inputs=("pred", "target"),
    shape_infer=_mse_shape,
    kernels={"cpu": _mse_kernel},
    # gpred = mse_loss_grad_internal(pred, target, gy), gtarget = -gpred
    gradient=lambda ctx: ctx.grad_graph(_mse_gradient),
    doc="Mean squared error mean((pred - target)^2) over all elements: a scalar.",
    examples=[Example(["f32[4, 3]", "f32[4, 3]"]), Example(["f64[5]", "f64[5]"]), Example(["f32[]", "f32[]"])],
)


# mse_loss_grad_internal(pred, target, gy) = (2/N) (pred - target) gy
#   second order (seed 000 §5): g_pred = (2/N) expand(gy) ggp, g_target = -g_pred,
#   g_gy = sum((2/N) (pred - target) ggp); expand(gy) reuses sum_grad_internal's all-axes expansion
def _mse_grad_shape(ctx: NodeContext) -> list[TensorType]:
    pred, target, gy = ctx.input_types
    if pred != target or gy != TensorType(pred.dtype, ()):
        raise ctx.error(f"expects pred and target of one type and a scalar gy of their dtype, got {pred}, {target}, {gy}")
    return [pred]


def _mse_grad_kernel(ctx: NodeContext) -> Callable:
    t = ctx.input_types[0]
    scale = 2.0 / max(t.size, 1)
    dtype = t.dtype.np

    def kernel(pred: np.ndarray, target: np.ndarray, gy: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        out = np.subtract(pred, target, out if out is not None else np.empty(t.shape, dtype))
        return np.multiply(out, (gy * scale).astype(dtype), out)
    return kernel


def _mse_grad_gradient(ctx: NodeContext):
    t = ctx.input_types[0]
    scale = 2.0 / max(t.size, 1)
    axes = tuple(range(t.rank))

    def grads(p, tg, gy, g, ggp):
        g_pred = ops.sum_grad_internal(gy, input_shape=t.shape, axes=axes) * ggp * scale
        g_gy = ops.sum((p - tg) * ggp * scale)
        return [g_pred, -g_pred, g_gy]
    return ctx.grad_graph(grads)


MSE_LOSS_GRAD = OpSchema(
    "mse_loss_grad_internal",
    inputs=("pred", "target", "gy"),
    shape_infer=_mse_grad_shape,
    kernels={"cpu": _mse_grad_kernel},
    gradient=_mse_grad_gradient,
    traits=("accepts_out",),
    doc="2 (pred - target) / N * gy: the gradient of mse_loss for pred.",
    examples=[Example(["f32[4, 3]", "f32[4, 3]", "f32[]"]), Example(["f64[5]", "f64[5]", "f64[]"])],
)

SCHEMAS = [MSE_LOSS, MSE_LOSS_GRAD]
