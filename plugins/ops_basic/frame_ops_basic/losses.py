"""Losses with a scalar output: mse_loss (ARCH-064) and cross_entropy.

``mse_loss(pred, target) = mean((pred - target)^2)`` over all N elements;
``pred`` and ``target`` have one type.
``mse_loss_grad_internal(pred, target, gy) = 2 (pred - target) / N * gy`` is
the gradient for ``pred``; ``target`` gets its negation.

``cross_entropy(logits[..., C], labels[...])`` is the mean over the N label
positions of ``logsumexp(logits[i]) - logits[i, labels[i]]`` (the negative
log-likelihood of the softmax), computed without overflow. Its gradient is
``(softmax(logits) - one_hot(labels)) * gy / N``, built from closed ops.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import accumulation_dtype
from .convert import check_indices
from .softmax import log_sum_exp


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

    def same_dtype(pred: np.ndarray, target: np.ndarray) -> np.ndarray:  # the same loop, without dtype= resolving
        d = subtract(pred, target).reshape(-1)
        return asarray(dot(d, d) / n, dtype)
    subtract, dot, asarray = np.subtract, np.dot, np.asarray
    return same_dtype if wide == dtype else kernel


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
    traits=("any_shape_gradient",),
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

    # float32/float64: gy * scale multiplies in gy's dtype (NEP 50: the Python float is cast to it first), so
    # one multiply by the scale already in that dtype gives the same bits without the weak-scalar promotion
    # and the astype (a few microseconds a call, on a [256, 1] residual more than the arithmetic)
    typed_scale = dtype.type(scale) if dtype in (np.float32, np.float64) else None
    if typed_scale is None:
        return kernel
    subtract, multiply, empty = np.subtract, np.multiply, np.empty

    def same_dtype(pred: np.ndarray, target: np.ndarray, gy: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        out = subtract(pred, target, out if out is not None else empty(t.shape, dtype))
        return multiply(out, multiply(gy, typed_scale), out)
    return same_dtype


def _mse_grad_gradient(ctx: NodeContext):
    t = ctx.input_types[0]
    axes = tuple(range(t.rank))

    def grads(p, tg, gy, g, ggp):
        scale = ops.inverse_count_internal(p, numerator=2.0, dtype=t.dtype)  # 2/N, N read from p's shape
        g_pred = ops.sum_grad_like_internal(gy, p, axes=axes) * ggp * scale
        g_gy = ops.sum((p - tg) * ggp * scale)
        return [g_pred, -g_pred, g_gy]
    return ctx.grad_graph(grads)


MSE_LOSS_GRAD = OpSchema(
    "mse_loss_grad_internal",
    inputs=("pred", "target", "gy"),
    shape_infer=_mse_grad_shape,
    kernels={"cpu": _mse_grad_kernel},
    gradient=_mse_grad_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="2 (pred - target) / N * gy: the gradient of mse_loss for pred.",
    examples=[Example(["f32[4, 3]", "f32[4, 3]", "f32[]"]), Example(["f64[5]", "f64[5]", "f64[]"])],
)



# -- cross_entropy ----------------------------------------------------------------------------------
def _ce_shape(ctx: NodeContext) -> list[TensorType]:
    logits, labels = ctx.input_types
    if not logits.dtype.is_float:
        raise ctx.error(f"logits must be floating, got {logits}; cast them first (ops.cast(logits, to='f32'))")
    if not labels.dtype.is_int:
        raise ctx.error(f"labels must be integer class indices (i32 or i64), got {labels}; "
                        "cast them (ops.cast(labels, to='i64')) or, for probabilities, use -sum(p * log_softmax(x))")
    if logits.rank < 1:
        raise ctx.error(f"logits need a class axis (rank >= 1, classes last), got {logits}")
    if logits.shape[:-1] != labels.shape:
        raise ctx.error(f"logits [..., C] and labels [...] must agree on the leading shape, got {logits} and {labels}; "
                        f"expected labels of shape {list(logits.shape[:-1])}")
    if logits.shape[-1] == 0 or labels.size == 0:
        raise ctx.error(f"needs at least one class and one label, got logits {logits} and labels {labels}")
    return [TensorType(logits.dtype, ())]


def _ce_kernel(ctx: NodeContext) -> Callable:
    logits_t, labels_t = ctx.input_types
    classes, n = logits_t.shape[-1], labels_t.size
    dtype, acc = logits_t.dtype.np, accumulation_dtype(logits_t)
    rows = np.arange(n)

    def kernel(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
        check_indices(labels, classes, "label")
        x = logits.astype(acc, copy=False).reshape(n, classes)
        lse = log_sum_exp(x, 1).reshape(n)
        return np.asarray(np.mean(lse - x[rows, labels.reshape(n)]), dtype)
    return kernel


def _ce_gradient(ctx: NodeContext):
    logits_t, labels_t = ctx.input_types

    def grad(logits, labels, y, gy):
        target = ops.one_hot(labels, depth=logits_t.shape[-1], dtype=logits_t.dtype)
        # the class count is traced: at another one, logits' shape refuses it (rather than broadcast against it)
        target = ops.reshape_like_internal(target, logits)
        scale = ops.inverse_count_internal(labels, dtype=logits_t.dtype)  # 1/N, N read from the labels' shape
        return [(ops.softmax(logits, axis=-1) - target) * (gy * scale), None]
    return ctx.grad_graph(grad)


# cross_entropy(logits, labels) = mean_i (logsumexp(logits_i) - logits_i[labels_i])
#   glogits = (softmax(logits) - one_hot(labels)) * gy / N; labels carry no gradient
CROSS_ENTROPY = OpSchema(
    "cross_entropy",
    inputs=("logits", "labels"),
    shape_infer=_ce_shape,
    kernels={"cpu": _ce_kernel},
    gradient=_ce_gradient,
    nondiff_inputs=(1,),
    traits=("any_shape_gradient",),
    doc="Mean softmax cross-entropy of logits [..., C] against integer labels [...] (classes on the last axis), "
        "computed without overflow: a scalar. A label outside 0..C-1 raises DataError at run time.",
    examples=[Example(["f32[4, 5]", "i64[4]"], low=0.0, high=4.0),
              Example(["f64[2, 3, 4]", "i32[2, 3]"], low=0.0, high=3.0, note="leading axes are the batch"),
              Example(["f64[6]", "i64[]"], low=0.0, high=5.0, note="a single example")],
)

SCHEMAS = [MSE_LOSS, MSE_LOSS_GRAD, CROSS_ENTROPY]
