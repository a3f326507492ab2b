"""layer_norm, batch_norm and group_norm: fused numpy kernels, gradients written with frame ops.

Each normalises ``x`` over some axes, ``xhat = (x - mean) / sqrt(var + eps)``
(biased variance, as torch), then applies a per-feature affine ``weight * xhat
+ bias``:

- ``layer_norm(x, weight, bias)`` over the last ``weight.rank`` axes (weight and
  bias have the shape of those axes, torch's ``normalized_shape``);
- ``batch_norm(x[N, C, ...], weight[C], bias[C], running_mean[C],
  running_var[C]; training)`` over every axis but the channel axis 1. In
  training mode it normalises with the batch statistics and its second and third
  outputs are the updated running averages ``(1 - momentum) running +
  momentum batch`` (the variance unbiased, as torch); in inference mode it
  normalises with the running statistics and returns them unchanged;
- ``group_norm(x[N, C, ...], weight[C], bias[C]; num_groups)`` over each group
  of ``C / num_groups`` channels and all spatial positions.

The GradientFns are written with frame-ops-basic's ops (mean, sum, mul, sqrt,
reshape), so they differentiate again to any order. With ``g = gy * weight``
the input gradient is ``rstd * (g - mean(g) - xhat * mean(g * xhat))`` over the
normalised axes; batch_norm adds the running averages' cotangents.
Computation is in float32 for float16/bfloat16 inputs. NaN and inf propagate
(a NaN in one position makes its whole normalisation group NaN).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._common import as_out, compute_dtype, same_float

_EPS = AttrSpec("float", 1e-5, "added to the variance before the square root")


def _normalize_rows(x: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` of each row of a 2-D ``x``, in a fresh array (few passes, no temporaries
    beyond the result: the variance is one ``einsum`` over the centred rows)."""
    xc = x - x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", xc, xc) / max(x.shape[1], 1)
    xc *= (1.0 / np.sqrt(var + eps))[:, None]
    return xc


# -- helpers traced into the gradient graphs ------------------------------------------------------------
def _traced_xhat(x, axes: list[int], eps: float):  # noqa: ANN001, ANN202 - traced tensors
    """(x - mean, xhat, rstd) over ``axes`` (keepdims), as frame ops."""
    xc = x - ops.mean(x, axes=axes, keepdims=True)
    rstd = 1.0 / ops.sqrt(ops.mean(xc * xc, axes=axes, keepdims=True) + eps)
    return xc, xc * rstd, rstd


def _traced_normalize_grad(g, xhat, rstd, axes: list[int]):  # noqa: ANN001, ANN202 - traced tensors
    """The gradient of xhat(x) over ``axes`` for the cotangent ``g`` of xhat."""
    return rstd * (g - ops.mean(g, axes=axes, keepdims=True) - xhat * ops.mean(g * xhat, axes=axes, keepdims=True))


def _summed(t, axes: list[int]):  # noqa: ANN001, ANN202 - traced tensors
    return ops.sum(t, axes=axes) if axes else t


# -- layer_norm ---------------------------------------------------------------------------------------
def _layer_axes(ctx: NodeContext) -> list[int]:
    x, w, b = same_float(ctx)
    k = w.rank
    if k == 0 or k > x.rank or x.shape[x.rank - k:] != w.shape:
        raise ctx.error(f"weight {w} must have the shape of x's last axes (normalized_shape), e.g. "
                        f"{list(x.shape[-1:])}; got x {x}")
    if b != w:
        raise ctx.error(f"bias must have weight's type {w}, got {b}")
    return list(range(x.rank - k, x.rank))


def _layer_kernel(ctx: NodeContext) -> Callable:
    axes, eps = tuple(_layer_axes(ctx)), ctx.attrs["eps"]
    acc, (y_t,) = compute_dtype(ctx.input_types[0]), ctx.output_types

    features = int(np.prod(y_t.shape[len(y_t.shape) - len(axes):], dtype=np.int64))

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        xhat = _normalize_rows(np.asarray(x, acc).reshape(-1, features), eps)
        xhat *= np.asarray(w, acc).reshape(-1)
        xhat += np.asarray(b, acc).reshape(-1)
        return as_out(xhat.reshape(y_t.shape), y_t)
    return kernel


def _layer_gradient(ctx: NodeContext):
    axes, eps = _layer_axes(ctx), ctx.attrs["eps"]
    batch_axes = list(range(ctx.input_types[0].rank - len(axes)))

    def grads(x, w, b, y, gy):  # noqa: ANN001, ANN202 - traced tensors
        _, xhat, rstd = _traced_xhat(x, axes, eps)
        gx = _traced_normalize_grad(gy * w, xhat, rstd, axes)
        return [gx, _summed(gy * xhat, batch_axes), _summed(gy, batch_axes)]
    return ctx.grad_graph(grads)


LAYER_NORM = OpSchema(
    "layer_norm",
    inputs=("x", "weight", "bias"),
    attrs={"eps": _EPS},
    shape_infer=lambda ctx: [_layer_axes(ctx) and ctx.input_types[0]],
    kernels={"cpu": _layer_kernel},
    gradient=_layer_gradient,
    doc="Normalises x over its last weight.rank axes (mean 0, variance 1, biased) and applies weight * xhat + "
        "bias (torch.nn.functional.layer_norm).",
    examples=[
        Example(["f32[4, 6]", "f32[6]", "f32[6]"]),
        Example(["f64[2, 3, 4, 5]", "f64[4, 5]", "f64[4, 5]"], {"eps": 1e-3}),
        Example(["f64[5]", "f64[5]", "f64[5]"], note="no batch axes"),
    ],
)


# -- batch_norm ---------------------------------------------------------------------------------------
def _batch_layout(ctx: NodeContext) -> tuple[list[int], int, tuple[int, ...]]:
    """(reduced axes, count per channel, broadcast shape of a per-channel vector)."""
    x, *per_channel = same_float(ctx)
    if x.rank < 2:
        raise ctx.error(f"x must be [N, C, ...], got {x}")
    c = x.shape[1]
    for name, t in zip(ctx.schema.inputs[1:], per_channel):
        if t.shape != (c,):
            raise ctx.error(f"{name} must be [C] = [{c}] (one value per channel of x {x}), got {t}")
    momentum = ctx.attrs["momentum"]
    if not 0.0 <= momentum <= 1.0:
        raise ctx.error(f"momentum must lie in [0, 1], got {momentum}")
    axes = [0, *range(2, x.rank)]
    count = x.size // c if c else 0
    if ctx.attrs["training"] and count < 2:
        raise ctx.error(f"training mode needs more than one value per channel to estimate a variance, got x {x}; "
                        "use a larger batch or training=False")
    return axes, count, (1, c) + (1,) * (x.rank - 2)


def _batch_shape(ctx: NodeContext) -> list[TensorType]:
    _batch_layout(ctx)
    x, _, _, rm, rv = ctx.input_types
    return [x, rm, rv]


def _batch_kernel(ctx: NodeContext) -> Callable:
    axes, count, bshape = _batch_layout(ctx)
    eps, momentum, training = ctx.attrs["eps"], ctx.attrs["momentum"], ctx.attrs["training"]
    acc, (y_t, rm_t, rv_t) = compute_dtype(ctx.input_types[0]), ctx.output_types

    n, c = y_t.shape[:2]

    def kernel(x, w, b, rm, rv):  # noqa: ANN001, ANN202
        x = np.asarray(x, acc)
        if training:
            x3 = x.reshape(n, c, -1)  # [N, C, S]: statistics over N and S
            mean = x3.mean(axis=(0, 2))
            xc3 = x3 - mean[:, None]
            var = np.einsum("ncs,ncs->c", xc3, xc3) / count
            xc = xc3.reshape(x.shape)
            new_rm = (1.0 - momentum) * np.asarray(rm, acc) + momentum * mean
            new_rv = (1.0 - momentum) * np.asarray(rv, acc) + momentum * var * (count / (count - 1))
        else:
            mean, var = np.asarray(rm, acc), np.asarray(rv, acc)
            xc = x - mean.reshape(bshape)
            new_rm, new_rv = np.array(rm), np.array(rv)  # fresh arrays: outputs never alias inputs
        scale = np.asarray(w, acc) / np.sqrt(var + eps)
        xc *= scale.reshape(bshape)
        xc += np.asarray(b, acc).reshape(bshape)
        return as_out(xc, y_t), as_out(new_rm, rm_t), as_out(new_rv, rv_t)
    return kernel


def _batch_gradient(ctx: NodeContext):
    axes, count, bshape = _batch_layout(ctx)
    eps, m, training = ctx.attrs["eps"], ctx.attrs["momentum"], ctx.attrs["training"]

    def per_channel(v):  # noqa: ANN001, ANN202 - [C] -> broadcastable against x
        return ops.reshape(v, shape=list(bshape))

    def train(x, w, b, rm, rv, y, new_rm, new_rv, gy, g_rm, g_rv):  # noqa: ANN001, ANN202
        xc, xhat, rstd = _traced_xhat(x, axes, eps)
        gx = _traced_normalize_grad(gy * per_channel(w), xhat, rstd, axes)
        # the running averages: d new_rm / dx = momentum / count, d new_rv / dx = momentum * 2 xc / (count - 1)
        gx = gx + per_channel(g_rm * (m / count)) + xc * per_channel(g_rv * (2.0 * m / (count - 1)))
        return [gx, ops.sum(gy * xhat, axes=axes), ops.sum(gy, axes=axes), g_rm * (1.0 - m), g_rv * (1.0 - m)]

    def infer(x, w, b, rm, rv, y, new_rm, new_rv, gy, g_rm, g_rv):  # noqa: ANN001, ANN202
        rstd = 1.0 / ops.sqrt(rv + eps)
        scaled = gy * per_channel(w * rstd)
        xc = x - per_channel(rm)
        g_w = ops.sum(gy * xc, axes=axes) * rstd
        g_mean = g_rm - ops.sum(scaled, axes=axes)
        g_var = g_rv - g_w * w * rstd * rstd * 0.5
        return [scaled, g_w, ops.sum(gy, axes=axes), g_mean, g_var]
    return ctx.grad_graph(train if training else infer)


BATCH_NORM = OpSchema(
    "batch_norm",
    inputs=("x", "weight", "bias", "running_mean", "running_var"),
    outputs=("y", "running_mean", "running_var"),
    attrs={"training": AttrSpec("bool", True, "normalise with the batch's statistics and update the running "
                                              "averages (true), or with the running statistics (false)"),
           "momentum": AttrSpec("float", 0.1, "weight of the batch statistics in the running averages"),
           "eps": _EPS},
    shape_infer=_batch_shape,
    kernels={"cpu": _batch_kernel},
    gradient=_batch_gradient,
    doc="Batch normalisation of x[N, C, ...] per channel (torch.nn.functional.batch_norm). Outputs y and the "
        "running mean and variance: updated from the batch in training mode, unchanged in inference mode.",
    examples=[
        Example(["f32[6, 3]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"]),
        Example(["f64[2, 3, 4, 2]", "f64[3]", "f64[3]", "f64[3]", "f64[3]"], {"momentum": 0.3}),
        Example(["f64[2, 3, 5]", "f64[3]", "f64[3]", "f64[3]", "f64[3]"], {"training": False}, low=0.5, high=1.5,
                note="inference: running statistics"),
    ],
)


# -- group_norm ---------------------------------------------------------------------------------------
def _group_layout(ctx: NodeContext) -> tuple[int, list[int], tuple[int, ...]]:
    x, w, b = same_float(ctx)
    if x.rank < 2:
        raise ctx.error(f"x must be [N, C, ...], got {x}")
    c, groups = x.shape[1], ctx.attrs["num_groups"]
    if groups < 1 or c % groups:
        raise ctx.error(f"num_groups = {groups} must be >= 1 and divide the {c} channels of x {x}")
    if w.shape != (c,) or b.shape != (c,):
        raise ctx.error(f"weight and bias must be [C] = [{c}], got {w} and {b}")
    return groups, [0, *range(2, x.rank)], (1, c) + (1,) * (x.rank - 2)


def _group_kernel(ctx: NodeContext) -> Callable:
    groups, _, bshape = _group_layout(ctx)
    eps, acc, (y_t,) = ctx.attrs["eps"], compute_dtype(ctx.input_types[0]), ctx.output_types
    shape = y_t.shape

    def kernel(x, w, b):  # noqa: ANN001, ANN202
        xhat = _normalize_rows(np.asarray(x, acc).reshape(shape[0] * groups, -1), eps).reshape(shape)
        xhat *= np.asarray(w, acc).reshape(bshape)
        xhat += np.asarray(b, acc).reshape(bshape)
        return as_out(xhat, y_t)
    return kernel


def _group_gradient(ctx: NodeContext):
    groups, axes, bshape = _group_layout(ctx)
    eps, shape = ctx.attrs["eps"], list(ctx.input_types[0].shape)
    grouped = [shape[0], groups, -1]

    def grads(x, w, b, y, gy):  # noqa: ANN001, ANN202 - traced tensors
        _, xhat, rstd = _traced_xhat(ops.reshape(x, shape=grouped), [2], eps)
        g = ops.reshape(gy * ops.reshape(w, shape=list(bshape)), shape=grouped)
        gx = ops.reshape(_traced_normalize_grad(g, xhat, rstd, [2]), shape=shape)
        return [gx, ops.sum(gy * ops.reshape(xhat, shape=shape), axes=axes), ops.sum(gy, axes=axes)]
    return ctx.grad_graph(grads)


GROUP_NORM = OpSchema(
    "group_norm",
    inputs=("x", "weight", "bias"),
    attrs={"num_groups": AttrSpec("int", doc="channel groups normalised together; must divide C"), "eps": _EPS},
    shape_infer=lambda ctx: [_group_layout(ctx) and ctx.input_types[0]],
    kernels={"cpu": _group_kernel},
    gradient=_group_gradient,
    doc="Normalises x[N, C, ...] over each group of C / num_groups channels and all positions, then applies a "
        "per-channel weight and bias (torch.nn.functional.group_norm).",
    examples=[
        Example(["f32[2, 6, 5]", "f32[6]", "f32[6]"], {"num_groups": 3}),
        Example(["f64[2, 4, 3, 3]", "f64[4]", "f64[4]"], {"num_groups": 2}),
        Example(["f64[3, 4]", "f64[4]", "f64[4]"], {"num_groups": 1}),
    ],
)

SCHEMAS = [LAYER_NORM, BATCH_NORM, GROUP_NORM]
