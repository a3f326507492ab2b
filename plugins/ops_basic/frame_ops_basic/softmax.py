"""Numerically stable ``logsumexp`` (over axes), ``softmax`` and ``log_softmax`` (along one axis).

All three subtract the maximum before exponentiating, so logits of any
magnitude give finite results (``logsumexp([1000, 1000]) = 1000 + log 2``,
never ``inf``); a slice whose maximum is infinite is left unshifted, so
``logsumexp`` of all ``-inf`` is ``-inf`` and of a ``+inf`` is ``+inf``.
float16/bfloat16 inputs are computed in float32 and rounded once. Floating
inputs only; reducing over an axis of size 0 is refused at build time.

Gradients, all closed (they use ``exp``, ``softmax`` and sums, which are):

- ``logsumexp``: ``gx = gy * exp(x - y)`` (the softmax over the reduced axes);
- ``softmax``: ``gx = y * (gy - sum(gy * y, axis))``;
- ``log_softmax``: ``gx = gy - exp(y) * sum(gy, axis)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import accumulation_dtype
from .extrema import nonempty_axes, reduced_shape


def _float_input(ctx: NodeContext) -> TensorType:
    (x,) = ctx.input_types
    if not x.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {x}; cast it first (ops.cast(x, to='f32'))")
    return x


def shifted(x: np.ndarray, axes: tuple[int, ...] | int) -> tuple[np.ndarray, np.ndarray]:
    """``(x - m, m)`` with ``m`` the keepdims maximum over ``axes``, replaced by 0 where it is not finite."""
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype, copy=False)  # an array also for a 0-d x
    return x - m, m


def log_sum_exp(x: np.ndarray, axes: tuple[int, ...] | int) -> np.ndarray:
    """``log(sum(exp(x)))`` over ``axes`` with keepdims, without overflow (in ``x``'s dtype)."""
    z, m = shifted(x, axes)
    with np.errstate(divide="ignore"):  # log(0) = -inf for an all -inf slice, as intended
        return np.log(np.sum(np.exp(z), axis=axes, keepdims=True)) + m


def _store(result: np.ndarray, y: TensorType, out: np.ndarray | None) -> np.ndarray:
    """``result`` as a fresh array of exactly ``y``'s dtype and shape, or written into ``out``."""
    if out is None:
        return np.asarray(result, y.dtype.np).reshape(y.shape)
    out[...] = result.reshape(y.shape)
    return out


# -- logsumexp --------------------------------------------------------------------------------------
def _lse_shape(ctx: NodeContext) -> list[TensorType]:
    x = _float_input(ctx)
    axes = nonempty_axes(ctx, ctx.attrs["axes"], "logsumexp")
    return [x.with_shape(reduced_shape(x.shape, axes, ctx.attrs["keepdims"]))]


def _lse_kernel(ctx: NodeContext) -> Callable:
    (x_t,) = ctx.input_types
    (y,) = ctx.output_types
    axes = nonempty_axes(ctx, ctx.attrs["axes"], "logsumexp")
    acc = accumulation_dtype(x_t)

    def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return _store(log_sum_exp(x.astype(acc, copy=False), axes), y, out)
    return kernel


def _lse_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    axes = nonempty_axes(ctx, ctx.attrs["axes"], "logsumexp")

    def kept(t):  # noqa: ANN001, ANN202 - t with the reduced axes as size 1 (no size written down: any batch)
        return t if ctx.attrs["keepdims"] else ops.expand_dims(t, axes=list(axes))
    return ctx.grad_graph(lambda x_, y, gy: kept(gy) * ops.exp(x_ - kept(y)))


# logsumexp(x; axes, keepdims) = log sum exp x      gx = gy * exp(x - y)
LOGSUMEXP = OpSchema(
    "logsumexp",
    inputs=("x",),
    attrs={"axes": AttrSpec("ints", None, "axes to reduce (negative counts from the end); none: all axes"),
           "keepdims": AttrSpec("bool", False, "keep reduced axes with size 1")},
    shape_infer=_lse_shape,
    kernels={"cpu": _lse_kernel},
    gradient=_lse_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="log(sum(exp(x))) over `axes` (all by default), computed without overflow (the maximum is subtracted "
        "first). Gradient: gy * exp(x - y), the softmax over the reduced axes.",
    examples=[
        Example(["f32[3, 4]"]),
        Example(["f32[2, 3, 4]"], {"axes": [0, 2]}),
        Example(["f64[2, 3, 4]"], {"axes": [1], "keepdims": True}),
        Example(["f64[4, 5]"], {"axes": [-1]}, low=-30.0, high=30.0, note="wide logits"),
        Example(["f32[]"], note="rank 0: the identity"),
    ],
)


# -- softmax / log_softmax --------------------------------------------------------------------------
_AXIS = AttrSpec("int", -1, "the axis the probabilities sum over (negative counts from the end)",
                 none_refused="axis=None means every element in scipy.special.softmax and an implicit axis in "
                 "torch; give the axis (default -1), or reshape to one axis first for every element")


def _softmax_shape(ctx: NodeContext) -> list[TensorType]:
    x = _float_input(ctx)
    nonempty_axes(ctx, (ctx.attrs["axis"],), ctx.op)
    return [x]


def _softmax_kernel(log: bool) -> Callable[[NodeContext], Callable]:
    def build(ctx: NodeContext) -> Callable:
        (x_t,) = ctx.input_types
        (axis,) = nonempty_axes(ctx, (ctx.attrs["axis"],), ctx.op)
        acc = accumulation_dtype(x_t)

        def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            z, _ = shifted(x.astype(acc, copy=False), axis)
            if log:
                z -= np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
            else:
                np.exp(z, out=z)
                z /= np.sum(z, axis=axis, keepdims=True)
            return _store(z, x_t, out)
        return kernel
    return build


def _softmax_gradient(log: bool) -> Callable:
    def gradient(ctx: NodeContext):
        (axis,) = nonempty_axes(ctx, (ctx.attrs["axis"],), ctx.op)
        if log:
            return ctx.grad_graph(lambda x, y, gy: gy - ops.exp(y) * ops.sum(gy, axes=[axis], keepdims=True))
        return ctx.grad_graph(lambda x, y, gy: y * (gy - ops.sum(gy * y, axes=[axis], keepdims=True)))
    return gradient


_SOFTMAX_EXAMPLES = [
    Example(["f32[3, 4]"]),
    Example(["f64[2, 3, 4]"], {"axis": 1}),
    Example(["f32[5]"], {"axis": 0}),
    Example(["f64[4, 6]"], {"axis": 0}, low=-30.0, high=30.0, note="wide logits"),
]

# softmax(x; axis) = exp(x) / sum exp(x)            gx = y * (gy - sum(gy * y, axis))
SOFTMAX = OpSchema(
    "softmax",
    inputs=("x",),
    attrs={"axis": _AXIS},
    shape_infer=_softmax_shape,
    kernels={"cpu": _softmax_kernel(log=False)},
    gradient=_softmax_gradient(log=False),
    traits=("accepts_out", "any_shape_gradient"),
    doc="exp(x) / sum(exp(x)) along `axis` (default last), computed without overflow. "
        "Gradient: y * (gy - sum(gy * y, axis)).",
    examples=_SOFTMAX_EXAMPLES,
)

# log_softmax(x; axis) = x - logsumexp(x, axis)      gx = gy - exp(y) * sum(gy, axis)
LOG_SOFTMAX = OpSchema(
    "log_softmax",
    inputs=("x",),
    attrs={"axis": _AXIS},
    shape_infer=_softmax_shape,
    kernels={"cpu": _softmax_kernel(log=True)},
    gradient=_softmax_gradient(log=True),
    traits=("accepts_out", "any_shape_gradient"),
    doc="x - logsumexp(x, axis) along `axis` (default last), computed without overflow. "
        "Gradient: gy - exp(y) * sum(gy, axis).",
    examples=_SOFTMAX_EXAMPLES,
)

SCHEMAS = [LOGSUMEXP, SOFTMAX, LOG_SOFTMAX]
