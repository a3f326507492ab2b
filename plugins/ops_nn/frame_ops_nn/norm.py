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

With ``g = gy * weight`` the input gradient is ``rstd * (g - mean(g) - xhat *
mean(g * xhat))`` over the normalised axes; batch_norm adds the running
averages' cotangents. layer_norm, group_norm and training-mode batch_norm
compute it in one fused kernel (``*_grad_internal``) whose own gradient is the
VJP of the same formula written with frame-ops-basic ops (``inlined_vjp``), so
every order is exact and closed; inference-mode batch_norm writes its gradient
with frame-ops-basic ops directly. In a compiled training graph the pass
``reuse_norm_statistics`` (norm_passes.py) pairs layer_norm / batch_norm with
their gradient: ``*_train_internal`` also returns the normalised (or centred)
x and rstd, and ``*_grad_saved_internal`` starts from them (the same bits).
Row sums (layer_norm, group_norm) are numpy's pairwise sums and column sums add the rows in turn
(``_row_sums``, ``_column_sums``, also batch_norm's channel sums of x[N, C]): a fixed order that
frame-native's compiled kernels reproduce bit for bit. batch_norm's channel sums with spatial axes are BLAS
products with ones (``_channel_sums``).
Computation is in float32 for float16/bfloat16 inputs. NaN and inf propagate
(a NaN in one position makes its whole normalisation group NaN).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._common import as_out, compute_dtype, same_float

def _empty_safe(build: Callable[[NodeContext], Callable]) -> Callable[[NodeContext], Callable]:
    """``build``'s kernel, except that an empty x (no rows, features, channels or positions) gives zeros: the
    outputs are then empty too, or sums over nothing (the weight and bias gradients), or statistics nothing reads.
    (layer_norm's and group_norm's kernels only: inference-mode batch_norm returns its running statistics as
    given, and training mode rejects fewer than two values per channel when the graph is built.)"""
    def builder(ctx: NodeContext) -> Callable:
        if ctx.input_types[0].size:
            return build(ctx)
        outs = ctx.output_types

        def kernel(*_: np.ndarray):  # noqa: ANN202
            made = tuple(np.zeros(t.shape, t.dtype.np) for t in outs)
            return made if len(made) > 1 else made[0]
        return kernel
    return builder


_EPS = AttrSpec("float", 1e-5, "added to the variance before the square root; finite, >= 0")


def _check_eps(ctx: NodeContext) -> None:
    """A negative or NaN eps would turn rows of small variance into NaN, an infinite one every row into the bias:
    refused by name (torch takes any float)."""
    eps = ctx.attrs.get("eps", 0.0)
    if not 0.0 <= eps < float("inf"):
        raise ctx.error(f"eps must be a finite number >= 0, got {eps}; the usual values are 1e-5 (the default) to "
                        "1e-3")


def _normalize_rows(x: np.ndarray, eps: float, out: np.ndarray | None = None,
                    scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(xhat, rstd)``: ``(x - mean) * rstd`` of each row of a 2-D ``x``, with ``rstd = 1 / sqrt(var + eps)``
    per row. xhat is written to ``out`` (a 2-D view of an output, so that the output needs no copy: ``as_out``
    copies any view), else to a fresh array; the squares for the variance go to ``scratch`` when given.

    The order of every operation is fixed (``_row_sums``; one rounding per elementwise operation), so that
    frame-native's compiled row kernels can reproduce it bit for bit (docs/nn.md#normalisation)."""
    x = np.ascontiguousarray(x)
    features = max(x.shape[1], 1)
    xc = np.subtract(x, (_row_sums(x) / features)[:, None], out=out)
    var = _row_sums(np.multiply(xc, xc, out=scratch)) / features
    rstd = 1.0 / np.sqrt(var + eps)
    xc *= rstd[:, None]
    return xc, rstd


def _row_sums(x: np.ndarray) -> np.ndarray:
    """The sum of each row of a C-contiguous 2-D ``x``: numpy's pairwise summation of a contiguous row, a fixed
    order (blocks of up to 128 values summed in 8 interleaved partial sums, longer rows split in halves at a
    multiple of 8), which frame-native's kernels replicate and check (docs/native.md)."""
    return np.add.reduce(x, axis=1)


def _column_sums(x: np.ndarray) -> np.ndarray:
    """The sum of each column of a C-contiguous 2-D ``x`` of at least two columns: numpy adds the rows in
    order, starting from 0 (one column would be summed pairwise instead)."""
    return np.add.reduce(x, axis=0)


def _fresh(shape: tuple[int, ...], dtype: np.dtype, *rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A fresh array of ``shape`` and a view of it of shape ``rows`` (``-1`` allowed): kernels compute into the
    view and return the array itself."""
    whole = np.empty(shape, dtype)
    return whole, whole.reshape(rows)


def _channel_sums(x3: np.ndarray) -> np.ndarray:
    """The sum over axes 0 and 2 of ``x3[N, C, S]``. With one position per channel (``x[N, C]``, S = 1) the
    rows are added in turn (``_column_sums``: the order frame-native's batch_norm kernels reproduce); otherwise
    as products with ones: BLAS reads the data at memory speed, about four times as fast as numpy's pairwise
    sum, in its own order (docs/nn.md#normalisation)."""
    n, c, s = x3.shape
    if s == 1:
        return _column_sums(np.ascontiguousarray(x3).reshape(n, c))
    sums = np.dot(np.ones(n, x3.dtype), x3.reshape(n, c * s))
    return np.dot(sums.reshape(c, s), np.ones(s, x3.dtype))


def _channel_dots(a3: np.ndarray, b3: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """``sum(a3 * b3)`` over axes 0 and 2 of two ``[N, C, S]`` arrays: with S = 1 the products (into
    ``scratch`` when given) summed by ``_channel_sums``, otherwise one ``np.einsum``."""
    if a3.shape[2] == 1:
        return _channel_sums(np.multiply(a3, b3, out=scratch))
    return np.einsum("ncs,ncs->c", a3, b3)


def _channel_means(x3: np.ndarray) -> np.ndarray:
    return _channel_sums(x3) / max(x3.shape[0] * x3.shape[2], 1)


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


def inlined_vjp(formula: Callable, primals: list, cotangents: list) -> list:
    """The vector-Jacobian product of ``formula(*primals)`` (a list of tensors) with ``cotangents``, traced
    with frame ops into the graph being traced.

    The gradient ops below run a fused numpy kernel for the first-order gradient; their own gradient is this
    VJP of the same gradient written with frame-ops-basic ops (``build_vjp_graph`` of the formula, inlined),
    so every order after the first is exact and closed without a hand-written second derivative.
    """
    from frame_core import Tensor, build_vjp_graph, trace
    from frame_core import current_graph
    from frame_core import inline_graph

    n = len(primals)
    sub = trace(lambda *tensors: list(formula(*tensors)), *[t.type for t in primals], name="gradient_formula")
    vjp = build_vjp_graph(sub, list(range(n)))  # (primals..., one cotangent per output) -> one gradient per primal
    graph = current_graph()
    values = inline_graph(graph, vjp, [t.value for t in (*primals, *cotangents)])
    return [Tensor(v, graph) for v in values]


# -- layer_norm ---------------------------------------------------------------------------------------
def _layer_axes(ctx: NodeContext) -> list[int]:
    x, w, b = same_float(ctx)
    k = w.rank
    if k == 0 or k > x.rank or x.shape[x.rank - k:] != w.shape:
        raise ctx.error(f"weight {w} must have the shape of x's last axes (normalized_shape), e.g. "
                        f"{list(x.shape[-1:])}; got x {x}")
    if b != w:
        raise ctx.error(f"bias must have weight's type {w}, got {b}")
    _check_eps(ctx)
    return list(range(x.rank - k, x.rank))


def _layer_kernel(ctx: NodeContext) -> Callable:
    axes, eps = tuple(_layer_axes(ctx)), ctx.attrs["eps"]
    acc, (y_t,) = compute_dtype(ctx.input_types[0]), ctx.output_types

    features = int(np.prod(y_t.shape[len(y_t.shape) - len(axes):], dtype=np.int64))

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        y, rows = _fresh(y_t.shape, acc, -1, features)
        _normalize_rows(np.asarray(x, acc).reshape(-1, features), eps, out=rows)
        rows *= np.asarray(w, acc).reshape(-1)
        rows += np.asarray(b, acc).reshape(-1)
        return as_out(y, y_t)
    return kernel


def _layer_formula(rank: int, k: int, eps: float) -> Callable:
    """layer_norm's gradient ``(gx, gweight, gbias)`` for ``x`` of ``rank`` normalised over its last ``k`` axes,
    written with frame ops."""
    axes, batch_axes = list(range(rank - k, rank)), list(range(rank - k))

    def formula(x, w, gy):  # noqa: ANN001, ANN202 - traced tensors
        _, xhat, rstd = _traced_xhat(x, axes, eps)
        gx = _traced_normalize_grad(gy * w, xhat, rstd, axes)
        return [gx, _summed(gy * xhat, batch_axes), _summed(gy, batch_axes)]
    return formula


def _layer_gradient(ctx: NodeContext):
    _layer_axes(ctx)
    eps = ctx.attrs["eps"]
    # gx, gweight, gbias in one fused kernel; its own gradient is the VJP of _layer_formula
    return ctx.grad_graph(lambda x, w, b, y, gy: list(ops.layer_norm_grad_internal(x, w, gy, eps=eps)))


LAYER_NORM = OpSchema(
    "layer_norm",
    inputs=("x", "weight", "bias"),
    attrs={"eps": _EPS},
    shape_infer=lambda ctx: (_layer_axes(ctx), [ctx.input_types[0]])[1],
    kernels={"cpu": _empty_safe(_layer_kernel)},
    gradient=_layer_gradient,
    traits=("any_shape_gradient",),
    doc="Normalises x over its last weight.rank axes (mean 0, variance 1, biased) and applies weight * xhat + "
        "bias (torch.nn.functional.layer_norm).",
    examples=[
        Example(["f32[4, 6]", "f32[6]", "f32[6]"]),
        Example(["f64[2, 3, 4, 5]", "f64[4, 5]", "f64[4, 5]"], {"eps": 1e-3}),
        Example(["f64[5]", "f64[5]", "f64[5]"], note="no batch axes"),
    ],
)


# layer_norm_grad_internal(x, weight, gy) = (gx, gweight, gbias), fused; gradient: the VJP of _layer_formula
def _layer_grad_shape(ctx: NodeContext) -> list[TensorType]:
    x, w, gy = same_float(ctx)
    if gy != x:
        raise ctx.error(f"gy must have x's type {x}, got {gy}")
    if w.rank == 0 or w.rank > x.rank or x.shape[x.rank - w.rank:] != w.shape:
        raise ctx.error(f"weight {w} must have the shape of x's last axes, got x {x}")
    return [x, w, w]


def _layer_grad_kernel(ctx: NodeContext) -> Callable:
    x_t, w_t, _ = ctx.input_types
    eps, acc, (gx_t, gw_t, gb_t) = ctx.attrs["eps"], compute_dtype(x_t), ctx.output_types
    features = w_t.size

    def kernel(x: np.ndarray, w: np.ndarray, gy: np.ndarray):  # noqa: ANN202
        xhat, rstd = _normalize_rows(np.asarray(x, acc).reshape(-1, features), eps)
        gx, rows = _fresh(gx_t.shape, acc, -1, features)
        gw, gb = _layer_grad_rows(xhat, rstd, np.asarray(w, acc).reshape(-1),
                                  np.asarray(gy, acc).reshape(-1, features), rows)
        return as_out(gx, gx_t), as_out(gw.reshape(gw_t.shape), gw_t), \
            as_out(gb.reshape(gb_t.shape), gb_t)
    return kernel


def _layer_grad_rows(xhat: np.ndarray, rstd: np.ndarray, w: np.ndarray, g_rows: np.ndarray,
                     out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(gweight, gbias)`` of layer_norm over the rows of 2-D ``xhat`` (with ``rstd`` per row) for the
    cotangent rows ``g_rows``, with gx written to ``out``. Column sums add the rows in order
    (``_column_sums``), row sums are ``_row_sums``: the order frame-native's row kernels reproduce."""
    g_rows = np.ascontiguousarray(g_rows)
    gb = _column_sums(g_rows)
    gw = _column_sums(np.multiply(g_rows, xhat, out=out))
    _normalized_rows_grad(np.multiply(g_rows, w, out=out), xhat, rstd)
    return gw, gb


def _normalized_rows_grad(g: np.ndarray, xhat: np.ndarray, rstd: np.ndarray) -> None:
    """``g = rstd * (g - mean(g) - xhat * mean(g * xhat))`` over the rows of C-contiguous 2-D ``g`` and ``xhat``,
    in place: the gradient of the rows' normalisation for the cotangent ``g`` of xhat (means by ``_row_sums``)."""
    features = max(g.shape[1], 1)
    mean_g = _row_sums(g) / features
    t = np.multiply(g, xhat)
    mean_gx = _row_sums(t) / features
    g -= mean_g[:, None]
    g -= np.multiply(xhat, mean_gx[:, None], out=t)
    g *= rstd[:, None]


def _layer_grad_gradient(ctx: NodeContext):
    x_t, w_t, _ = ctx.input_types
    formula = _layer_formula(x_t.rank, w_t.rank, ctx.attrs["eps"])
    return ctx.grad_graph(lambda x, w, gy, gx, gw, gb, ggx, ggw, ggb: inlined_vjp(
        formula, [x, w, gy], [ggx, ggw, ggb]))


LAYER_NORM_GRAD = OpSchema(
    "layer_norm_grad_internal",
    inputs=("x", "weight", "gy"),
    outputs=("gx", "gweight", "gbias"),
    attrs={"eps": _EPS},
    shape_infer=_layer_grad_shape,
    kernels={"cpu": _empty_safe(_layer_grad_kernel)},
    gradient=_layer_grad_gradient,
    traits=("any_shape_gradient",),
    doc="layer_norm's gradients for x, weight and bias in one fused pass.",
    examples=[Example(["f32[4, 6]", "f32[6]", "f32[4, 6]"]),
              Example(["f64[2, 3, 4, 5]", "f64[4, 5]", "f64[2, 3, 4, 5]"], {"eps": 1e-3}),
              Example(["f64[5]", "f64[5]", "f64[5]"])],
)


# The training pair with saved statistics. In a training graph the forward layer_norm and its
# layer_norm_grad_internal both normalise the same x; the pass ``reuse_norm_statistics`` (norm_passes.py)
# turns the pair into layer_norm_train_internal, which also returns xhat and rstd, and
# layer_norm_grad_saved_internal, which starts from them. Each kernel does what the pair's kernels did, in
# the same order, so the results are the same bits.
def _layer_train_shape(ctx: NodeContext) -> list[TensorType]:
    x, w = ctx.input_types[:2]
    _layer_axes(ctx)
    return [x, x, TensorType(x.dtype, x.shape[:x.rank - w.rank])]


def _layer_train_kernel(ctx: NodeContext) -> Callable:
    eps, (x_t, w_t, _) = ctx.attrs["eps"], ctx.input_types
    acc, (y_t, xhat_t, rstd_t) = compute_dtype(x_t), ctx.output_types
    features = w_t.size

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray):  # noqa: ANN202
        y, y_rows = _fresh(y_t.shape, acc, -1, features)
        xhat, xhat_rows = _fresh(xhat_t.shape, acc, -1, features)
        _, rstd = _normalize_rows(np.asarray(x, acc).reshape(-1, features), eps, out=xhat_rows, scratch=y_rows)
        np.multiply(xhat_rows, np.asarray(w, acc).reshape(-1), out=y_rows)
        y_rows += np.asarray(b, acc).reshape(-1)
        return as_out(y, y_t), as_out(xhat, xhat_t), \
            as_out(rstd.reshape(rstd_t.shape), rstd_t)
    return kernel


def _layer_train_gradient(ctx: NodeContext):
    x_t, w_t, _ = ctx.input_types
    axes, eps = list(range(x_t.rank - w_t.rank, x_t.rank)), ctx.attrs["eps"]
    batch = list(x_t.shape[:x_t.rank - w_t.rank])

    def formula(x, w, b):  # noqa: ANN001, ANN202 - traced tensors
        _, xhat, rstd = _traced_xhat(x, axes, eps)
        return [xhat * w + b, xhat, ops.reshape(rstd, shape=batch)]
    return ctx.grad_graph(lambda x, w, b, y, xhat, rstd, gy, g_xhat, g_rstd: inlined_vjp(
        formula, [x, w, b], [gy, g_xhat, g_rstd]))


LAYER_NORM_TRAIN = OpSchema(
    "layer_norm_train_internal",
    inputs=("x", "weight", "bias"),
    outputs=("y", "xhat", "rstd"),
    attrs={"eps": _EPS},
    shape_infer=_layer_train_shape,
    kernels={"cpu": _empty_safe(_layer_train_kernel)},
    gradient=_layer_train_gradient,
    traits=("any_shape_gradient",),
    doc="layer_norm that also returns the normalised x (xhat) and 1 / sqrt(var + eps) per normalised group "
        "(rstd, x's batch shape), for layer_norm_grad_saved_internal.",
    examples=[Example(["f32[4, 6]", "f32[6]", "f32[6]"]),
              Example(["f64[2, 3, 4, 5]", "f64[4, 5]", "f64[4, 5]"], {"eps": 1e-3}),
              Example(["f64[5]", "f64[5]", "f64[5]"], note="no batch axes")],
)


def _layer_saved_shape(ctx: NodeContext) -> list[TensorType]:
    xhat, rstd, w, gy = same_float(ctx)
    k = w.rank
    if k == 0 or k > xhat.rank or xhat.shape[xhat.rank - k:] != w.shape or gy != xhat \
            or rstd.shape != xhat.shape[:xhat.rank - k]:
        raise ctx.error(f"expected xhat, rstd of xhat's batch shape, weight of xhat's last axes and gy of xhat's "
                        f"type, got {xhat}, {rstd}, {w}, {gy}")
    return [xhat, w, w]


def _layer_saved_kernel(ctx: NodeContext) -> Callable:
    _, _, w_t, _ = ctx.input_types
    gx_t, gw_t, gb_t = ctx.output_types
    acc, features = compute_dtype(w_t), w_t.size

    def kernel(xhat: np.ndarray, rstd: np.ndarray, w: np.ndarray, gy: np.ndarray):  # noqa: ANN202
        gx, rows = _fresh(gx_t.shape, acc, -1, features)
        gw, gb = _layer_grad_rows(np.ascontiguousarray(xhat, acc).reshape(-1, features),
                                  np.asarray(rstd, acc).reshape(-1), np.asarray(w, acc).reshape(-1),
                                  np.asarray(gy, acc).reshape(-1, features), rows)
        return as_out(gx, gx_t), as_out(gw.reshape(gw_t.shape), gw_t), \
            as_out(gb.reshape(gb_t.shape), gb_t)
    return kernel


def _layer_saved_gradient(ctx: NodeContext):
    xhat_t, _, w_t, _ = ctx.input_types
    k, rank = w_t.rank, xhat_t.rank
    axes, batch_axes = list(range(rank - k, rank)), list(range(rank - k))
    keep = list(xhat_t.shape[:rank - k]) + [1] * k

    def formula(xhat, rstd, w, gy):  # noqa: ANN001, ANN202 - traced tensors
        gx = _traced_normalize_grad(gy * w, xhat, ops.reshape(rstd, shape=keep), axes)
        return [gx, _summed(gy * xhat, batch_axes), _summed(gy, batch_axes)]
    return ctx.grad_graph(lambda xhat, rstd, w, gy, gx, gw, gb, ggx, ggw, ggb: inlined_vjp(
        formula, [xhat, rstd, w, gy], [ggx, ggw, ggb]))


LAYER_NORM_GRAD_SAVED = OpSchema(
    "layer_norm_grad_saved_internal",
    inputs=("xhat", "rstd", "weight", "gy"),
    outputs=("gx", "gweight", "gbias"),
    shape_infer=_layer_saved_shape,
    kernels={"cpu": _empty_safe(_layer_saved_kernel)},
    gradient=_layer_saved_gradient,
    doc="layer_norm's gradients for x, weight and bias from layer_norm_train_internal's xhat and rstd.",
    examples=[Example(["f32[4, 6]", "f32[4]", "f32[6]", "f32[4, 6]"], low=0.5, high=1.5),
              Example(["f64[2, 3, 4, 5]", "f64[2, 3]", "f64[4, 5]", "f64[2, 3, 4, 5]"], low=0.5, high=1.5),
              Example(["f64[5]", "f64[]", "f64[5]", "f64[5]"], low=0.5, high=1.5)],
)

# -- batch_norm ---------------------------------------------------------------------------------------
def _per_channel(x: TensorType) -> int:
    """How many values each channel of ``x[N, C, ...]`` holds: N times the spatial size (also when C is 0, as
    torch: a batch of no channels is empty, not one of too few values)."""
    return int(np.prod([d for i, d in enumerate(x.shape) if i != 1], dtype=np.int64))


def _ncs(x: TensorType) -> tuple[int, int, int]:
    """``x[N, C, ...]`` as ``[N, C, S]`` (spelt out: with no channels a -1 could stand for any S)."""
    return x.shape[0], x.shape[1], int(np.prod(x.shape[2:], dtype=np.int64))


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
    _check_eps(ctx)
    axes = [0, *range(2, x.rank)]
    count = _per_channel(x)
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

    n, c, s = _ncs(y_t)

    def kernel(x, w, b, rm, rv):  # noqa: ANN001, ANN202
        x = np.asarray(x, acc)
        if training:
            x3 = x.reshape(n, c, s)  # [N, C, S]: statistics over N and S
            mean = _channel_means(x3)
            xc, xc3 = _fresh(y_t.shape, acc, n, c, s)
            np.subtract(x3, mean[:, None], out=xc3)
            var = _channel_dots(xc3, xc3) / count
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


def _batch_formula(rank: int, momentum: float, eps: float) -> Callable:
    """batch_norm's training gradient ``(gx, gweight, gbias)`` for the cotangents of y and of the new running
    averages, written with frame ops."""
    axes, m = [0, *range(2, rank)], momentum

    def formula(x, w, gy, g_rm, g_rv):  # noqa: ANN001, ANN202 - traced tensors
        c = x.shape[1]
        per_channel = lambda v: ops.reshape(v, shape=[1, c] + [1] * (rank - 2))  # noqa: E731
        xc, xhat, rstd = _traced_xhat(x, axes, eps)
        gx = _traced_normalize_grad(gy * per_channel(w), xhat, rstd, axes)
        # the running averages: d new_rm / dx = momentum / count, d new_rv / dx = momentum * 2 xc / (count - 1)
        of_mean, of_var = _running_shares(x, axes, m, g_rm, g_rv, xc, per_channel)
        gx = gx + of_mean + of_var
        return [gx, ops.sum(gy * xhat, axes=axes), ops.sum(gy, axes=axes)]
    return formula


def _running_shares(x, axes: list[int], m: float, g_rm, g_rv, xc, per_channel: Callable):  # noqa: ANN001, ANN202
    """The running averages' shares of gx, ``g_rm m / count`` and ``xc g_rv 2 m / (count - 1)``, with the count
    read off x at run time (compiled: the constants m / count and 2 m / (count - 1), as a Python scalar's): the
    gradients of batch_norm's gradient then follow the batch."""
    mean_scale = ops.inverse_count_internal(x, axes=axes, numerator=m, dtype=x.dtype)
    var_scale = ops.inverse_count_internal(x, axes=axes, numerator=2.0 * m, offset=1, dtype=x.dtype)
    return per_channel(g_rm * mean_scale), xc * per_channel(g_rv * var_scale)


def _batch_grad_layout(ctx: NodeContext) -> int:
    x, w, gy, g_rm, g_rv = same_float(ctx)
    if x.rank < 2 or gy != x or not w.shape == g_rm.shape == g_rv.shape == (x.shape[1],):
        raise ctx.error(f"expected x [N, C, ...], gy of x's type and three [C] vectors, got {x}, {w}, {gy}, "
                        f"{g_rm}, {g_rv}")
    count = _per_channel(x)
    if count < 2:
        raise ctx.error(f"training mode needs more than one value per channel, got x {x}")
    return count


def _batch_grad_kernel(ctx: NodeContext) -> Callable:
    count = _batch_grad_layout(ctx)
    m, eps = ctx.attrs["momentum"], ctx.attrs["eps"]
    x_t = ctx.input_types[0]
    acc, (gx_t, gw_t, gb_t) = compute_dtype(x_t), ctx.output_types
    n, c, s = _ncs(x_t)

    def kernel(x, w, gy, g_rm, g_rv):  # noqa: ANN001, ANN202
        x3 = np.asarray(x, acc).reshape(n, c, s)
        xc = x3 - _channel_means(x3)[:, None]
        rstd = 1.0 / np.sqrt(_channel_dots(xc, xc) / count + eps)
        gx, gx3 = _fresh(gx_t.shape, acc, n, c, s)
        gw, gb = _batch_grad_channels(xc, rstd, np.asarray(w, acc), np.asarray(gy, acc).reshape(n, c, s),
                                      np.asarray(g_rm, acc), np.asarray(g_rv, acc), m, gx3)
        return as_out(gx, gx_t), as_out(gw, gw_t), as_out(gb, gb_t)
    return kernel


def _batch_grad_channels(xc: np.ndarray, rstd: np.ndarray, w: np.ndarray, gy3: np.ndarray, g_rm: np.ndarray,
                         g_rv: np.ndarray, m: float, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(gweight, gbias)`` of training-mode batch_norm from the centred ``xc[N, C, S]`` and ``rstd[C]`` for the
    cotangents ``gy3[N, C, S]`` of y and ``g_rm``, ``g_rv`` of the running averages (``m``: momentum), with gx
    written to ``out[N, C, S]``.

    Every factor of ``rstd * (g - mean(g) - xhat mean(g xhat))`` (``g = gy w``, ``xhat = xc rstd``) but gy and xc
    is per channel, so the means are ``w gbias / count`` and ``w gweight / count``, and gx is ``gy A - xc D - C``
    for three per-channel vectors: two reductions and four passes over the data.
    """
    count = xc.shape[0] * xc.shape[2]
    gb = _channel_sums(gy3)
    gw = _channel_dots(gy3, xc, scratch=out) * rstd
    mean_g, mean_gx = w * gb / count, w * gw / count
    # the running variance's share, 2 m g_rv xc / (count - 1)
    share = 2.0 * m * g_rv / (count - 1)
    gx = np.multiply(gy3, (rstd * w)[:, None], out=out)
    gx -= xc * (rstd * rstd * mean_gx - share)[:, None]
    gx -= (rstd * mean_g - m * g_rm / count)[:, None]
    return gw, gb


def _batch_grad_gradient(ctx: NodeContext):
    _batch_grad_layout(ctx)
    formula = _batch_formula(ctx.input_types[0].rank, ctx.attrs["momentum"], ctx.attrs["eps"])
    return ctx.grad_graph(lambda x, w, gy, g_rm, g_rv, gx, gw, gb, ggx, ggw, ggb: inlined_vjp(
        formula, [x, w, gy, g_rm, g_rv], [ggx, ggw, ggb]))


BATCH_NORM_GRAD = OpSchema(
    "batch_norm_grad_internal",
    inputs=("x", "weight", "gy", "g_running_mean", "g_running_var"),
    outputs=("gx", "gweight", "gbias"),
    attrs={"momentum": AttrSpec("float", 0.1, "the forward's momentum"), "eps": _EPS},
    shape_infer=lambda ctx: (_batch_grad_layout(ctx), [ctx.input_types[0], ctx.input_types[1],
                             ctx.input_types[1]])[1],
    kernels={"cpu": _batch_grad_kernel},
    gradient=_batch_grad_gradient,
    traits=("any_shape_gradient",),
    doc="batch_norm's training-mode gradients for x (including the running averages' share), weight and bias "
        "in one fused pass.",
    examples=[Example(["f32[6, 3]", "f32[3]", "f32[6, 3]", "f32[3]", "f32[3]"]),
              Example(["f64[2, 3, 4, 2]", "f64[3]", "f64[2, 3, 4, 2]", "f64[3]", "f64[3]"], {"momentum": 0.3})],
)


def _batch_gradient(ctx: NodeContext):
    axes, count, bshape = _batch_layout(ctx)
    eps, m, training = ctx.attrs["eps"], ctx.attrs["momentum"], ctx.attrs["training"]

    def per_channel(v):  # noqa: ANN001, ANN202 - [C] -> broadcastable against x
        return ops.reshape(v, shape=list(bshape))

    def train(x, w, b, rm, rv, y, new_rm, new_rv, gy, g_rm, g_rv):  # noqa: ANN001, ANN202
        # gx (with the running averages' share), gweight, gbias fused; its gradient is the VJP of _batch_formula
        gx, gw, gb = ops.batch_norm_grad_internal(x, w, gy, g_rm, g_rv, momentum=m, eps=eps)
        return [gx, gw, gb, g_rm * (1.0 - m), g_rv * (1.0 - m)]

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
           "momentum": AttrSpec("float", 0.1, "weight of the batch statistics in the running averages",
                                none_refused="torch's momentum=None (a cumulative average of every batch) needs a "
                                "count of the batches seen, which batch_norm does not keep; pass momentum=1/(k+1) "
                                "at batch k (k from 0) for the same averages, or a number in [0, 1]"),
           "eps": _EPS},
    shape_infer=_batch_shape,
    kernels={"cpu": _batch_kernel},
    gradient=_batch_gradient,
    traits=("any_shape_gradient",),
    doc="Batch normalisation of x[N, C, ...] per channel (torch.nn.functional.batch_norm). Outputs y and the "
        "running mean and variance: updated from the batch in training mode, unchanged in inference mode.",
    examples=[
        Example(["f32[6, 3]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"]),
        Example(["f64[2, 3, 4, 2]", "f64[3]", "f64[3]", "f64[3]", "f64[3]"], {"momentum": 0.3}),
        Example(["f64[2, 3, 5]", "f64[3]", "f64[3]", "f64[3]", "f64[3]"], {"training": False}, low=0.5, high=1.5,
                note="inference: running statistics"),
    ],
)



# The training pair with saved statistics (see layer_norm_train_internal): batch_norm_train_internal also
# returns the centred x and rstd[C], batch_norm_grad_saved_internal starts from them; the same bits as the pair.
def _batch_train_shape(ctx: NodeContext) -> list[TensorType]:
    if not ctx.attrs["training"]:
        raise ctx.error("batch_norm_train_internal is training mode only; got training=False")
    x, w = ctx.input_types[:2]
    return [*_batch_shape(ctx), x, w]


def _batch_train_kernel(ctx: NodeContext) -> Callable:
    _, count, _ = _batch_layout(ctx)
    eps, momentum = ctx.attrs["eps"], ctx.attrs["momentum"]
    acc, (y_t, rm_t, rv_t, xc_t, rstd_t) = compute_dtype(ctx.input_types[0]), ctx.output_types
    n, c, s = _ncs(y_t)

    def kernel(x, w, b, rm, rv):  # noqa: ANN001, ANN202
        x3 = np.asarray(x, acc).reshape(n, c, s)
        mean = _channel_means(x3)
        xc, xc3 = _fresh(xc_t.shape, acc, n, c, s)
        np.subtract(x3, mean[:, None], out=xc3)
        y, y3 = _fresh(y_t.shape, acc, n, c, s)
        var = _channel_dots(xc3, xc3, scratch=y3) / count  # (y's buffer holds the squares first)
        new_rm = (1.0 - momentum) * np.asarray(rm, acc) + momentum * mean
        new_rv = (1.0 - momentum) * np.asarray(rv, acc) + momentum * var * (count / (count - 1))
        np.multiply(xc3, (np.asarray(w, acc) / np.sqrt(var + eps))[:, None], out=y3)
        y3 += np.asarray(b, acc)[:, None]
        return as_out(y, y_t), as_out(new_rm, rm_t), as_out(new_rv, rv_t), as_out(xc, xc_t), \
            as_out(1.0 / np.sqrt(var + eps), rstd_t)
    return kernel


def _batch_train_gradient(ctx: NodeContext):
    axes, count, bshape = _batch_layout(ctx)
    eps, m = ctx.attrs["eps"], ctx.attrs["momentum"]

    def formula(x, w, b, rm, rv):  # noqa: ANN001, ANN202 - traced tensors
        per_channel = lambda v: ops.reshape(v, shape=list(bshape))  # noqa: E731
        xc = x - ops.mean(x, axes=axes, keepdims=True)
        var = ops.mean(xc * xc, axes=axes)
        rstd = 1.0 / ops.sqrt(var + eps)
        xhat = xc * per_channel(rstd)
        return [xhat * per_channel(w) + per_channel(b), rm * (1.0 - m) + ops.mean(x, axes=axes) * m,
                rv * (1.0 - m) + var * (m * count / (count - 1)), xc, rstd]
    return ctx.grad_graph(lambda x, w, b, rm, rv, y, new_rm, new_rv, xc, rstd, *cots: inlined_vjp(
        formula, [x, w, b, rm, rv], list(cots)))


BATCH_NORM_TRAIN = OpSchema(
    "batch_norm_train_internal",
    inputs=("x", "weight", "bias", "running_mean", "running_var"),
    outputs=("y", "running_mean", "running_var", "xc", "rstd"),
    attrs={"training": AttrSpec("bool", True, "must be true: training mode"),
           "momentum": AttrSpec("float", 0.1, "weight of the batch statistics in the running averages"),
           "eps": _EPS},
    shape_infer=_batch_train_shape,
    kernels={"cpu": _batch_train_kernel},
    gradient=_batch_train_gradient,
    doc="Training-mode batch_norm that also returns the centred x (xc = x - mean) and 1 / sqrt(var + eps) per "
        "channel (rstd), for batch_norm_grad_saved_internal.",
    examples=[Example(["f32[6, 3]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"]),
              Example(["f64[2, 3, 4, 2]", "f64[3]", "f64[3]", "f64[3]", "f64[3]"], {"momentum": 0.3})],
)


def _batch_saved_layout(ctx: NodeContext) -> int:
    xc, rstd, w, gy, g_rm, g_rv = same_float(ctx)
    if xc.rank < 2 or gy != xc or not rstd.shape == w.shape == g_rm.shape == g_rv.shape == (xc.shape[1],):
        raise ctx.error(f"expected xc [N, C, ...], gy of xc's type and four [C] vectors, got {xc}, {rstd}, "
                        f"{w}, {gy}, {g_rm}, {g_rv}")
    count = _per_channel(xc)
    if count < 2:
        raise ctx.error(f"training mode needs more than one value per channel, got xc {xc}")
    return count


def _batch_saved_kernel(ctx: NodeContext) -> Callable:
    _batch_saved_layout(ctx)
    m, xc_t = ctx.attrs["momentum"], ctx.input_types[0]
    acc, (gx_t, gw_t, gb_t) = compute_dtype(xc_t), ctx.output_types
    n, c, s = _ncs(xc_t)

    def kernel(xc, rstd, w, gy, g_rm, g_rv):  # noqa: ANN001, ANN202
        gx, gx3 = _fresh(gx_t.shape, acc, n, c, s)
        gw, gb = _batch_grad_channels(np.asarray(xc, acc).reshape(n, c, s), np.asarray(rstd, acc),
                                      np.asarray(w, acc), np.asarray(gy, acc).reshape(n, c, s),
                                      np.asarray(g_rm, acc), np.asarray(g_rv, acc), m, gx3)
        return as_out(gx, gx_t), as_out(gw, gw_t), as_out(gb, gb_t)
    return kernel


def _batch_saved_gradient(ctx: NodeContext):
    _batch_saved_layout(ctx)
    rank, m = ctx.input_types[0].rank, ctx.attrs["momentum"]
    axes = [0, *range(2, rank)]

    def formula(xc, rstd, w, gy, g_rm, g_rv):  # noqa: ANN001, ANN202 - traced tensors
        per_channel = lambda v: ops.reshape(v, shape=[1, xc.shape[1]] + [1] * (rank - 2))  # noqa: E731
        xhat = xc * per_channel(rstd)
        gx = _traced_normalize_grad(gy * per_channel(w), xhat, per_channel(rstd), axes)
        of_mean, of_var = _running_shares(xc, axes, m, g_rm, g_rv, xc, per_channel)
        gx = gx + of_mean + of_var
        return [gx, ops.sum(gy * xhat, axes=axes), ops.sum(gy, axes=axes)]
    return ctx.grad_graph(lambda xc, rstd, w, gy, g_rm, g_rv, gx, gw, gb, ggx, ggw, ggb: inlined_vjp(
        formula, [xc, rstd, w, gy, g_rm, g_rv], [ggx, ggw, ggb]))


BATCH_NORM_GRAD_SAVED = OpSchema(
    "batch_norm_grad_saved_internal",
    inputs=("xc", "rstd", "weight", "gy", "g_running_mean", "g_running_var"),
    outputs=("gx", "gweight", "gbias"),
    attrs={"momentum": AttrSpec("float", 0.1, "the forward's momentum")},
    shape_infer=lambda ctx: (_batch_saved_layout(ctx), [ctx.input_types[0], ctx.input_types[2],
                             ctx.input_types[2]])[1],
    kernels={"cpu": _batch_saved_kernel},
    gradient=_batch_saved_gradient,
    traits=("any_shape_gradient",),
    doc="Training-mode batch_norm's gradients for x (including the running averages' share), weight and bias "
        "from batch_norm_train_internal's xc and rstd.",
    examples=[Example(["f32[6, 3]", "f32[3]", "f32[3]", "f32[6, 3]", "f32[3]", "f32[3]"], low=0.5, high=1.5),
              Example(["f64[2, 3, 4, 2]", "f64[3]", "f64[3]", "f64[2, 3, 4, 2]", "f64[3]", "f64[3]"],
                      {"momentum": 0.3}, low=0.5, high=1.5)],
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
    _check_eps(ctx)
    return groups, [0, *range(2, x.rank)], (1, c) + (1,) * (x.rank - 2)


def _group_kernel(ctx: NodeContext) -> Callable:
    groups, _, bshape = _group_layout(ctx)
    eps, acc, (y_t,) = ctx.attrs["eps"], compute_dtype(ctx.input_types[0]), ctx.output_types
    shape = y_t.shape

    def kernel(x, w, b):  # noqa: ANN001, ANN202
        xhat, rows = _fresh(shape, acc, shape[0] * groups, -1)
        _normalize_rows(np.asarray(x, acc).reshape(shape[0] * groups, -1), eps, out=rows)
        xhat *= np.asarray(w, acc).reshape(bshape)
        xhat += np.asarray(b, acc).reshape(bshape)
        return as_out(xhat, y_t)
    return kernel


def _grouped(shape: list[int], groups: int) -> list[int]:
    """``[N, groups, values per group]`` as a reshape target, N as -1 (read off x at run time, so the gradient
    graphs follow the batch), spelt out only when a sample holds no values (a -1 could then stand for any size)."""
    per = int(np.prod(shape[1:], dtype=np.int64)) // groups
    return [-1 if per else shape[0], groups, per]


def _batched(shape: list[int]) -> list[int]:
    """``shape`` as a reshape target with the batch as -1, as ``_grouped``'s."""
    return [-1, *shape[1:]] if np.prod(shape[1:], dtype=np.int64) else list(shape)


def _group_formula(shape: list[int], groups: int, eps: float) -> Callable:
    """group_norm's gradient ``(gx, gweight, gbias)`` for x of ``shape``, written with frame ops."""
    grouped, axes, bshape = _grouped(shape, groups), [0, *range(2, len(shape))], [1, shape[1]] + [1] * (len(shape) - 2)

    def formula(x, w, gy):  # noqa: ANN001, ANN202 - traced tensors
        _, xhat, rstd = _traced_xhat(ops.reshape(x, shape=grouped), [2], eps)
        g = ops.reshape(gy * ops.reshape(w, shape=bshape), shape=grouped)
        gx = ops.reshape(_traced_normalize_grad(g, xhat, rstd, [2]), shape=_batched(shape))
        return [gx, ops.sum(gy * ops.reshape(xhat, shape=_batched(shape)), axes=axes), ops.sum(gy, axes=axes)]

    def empty(x, w, gy):  # noqa: ANN001, ANN202 - traced tensors: no values per sample, so no groups to reshape
        return [gy * ops.reshape(w, shape=bshape), ops.sum(gy * x, axes=axes), ops.sum(gy, axes=axes)]
    return formula if grouped[0] == -1 else empty


def _group_gradient(ctx: NodeContext):
    groups, _, _ = _group_layout(ctx)
    eps = ctx.attrs["eps"]
    # gx, gweight, gbias in one fused kernel; its own gradient is the VJP of _group_formula
    return ctx.grad_graph(lambda x, w, b, y, gy: list(ops.group_norm_grad_internal(x, w, gy, num_groups=groups,
                                                                                    eps=eps)))


def _group_grad_shape(ctx: NodeContext) -> list[TensorType]:
    x, w, gy = same_float(ctx)
    c, groups = (x.shape[1] if x.rank >= 2 else 0), ctx.attrs["num_groups"]
    if x.rank < 2 or gy != x or w.shape != (c,) or groups < 1 or c % groups:
        raise ctx.error(f"expected x [N, C, ...], weight [C], gy of x's type and num_groups dividing C, got {x}, "
                        f"{w}, {gy}, num_groups = {groups}")
    return [x, w, w]


def _group_grad_kernel(ctx: NodeContext) -> Callable:
    x_t, groups, eps = ctx.input_types[0], ctx.attrs["num_groups"], ctx.attrs["eps"]
    acc, (gx_t, gw_t, gb_t) = compute_dtype(x_t), ctx.output_types
    n, c = x_t.shape[:2]

    def kernel(x: np.ndarray, w: np.ndarray, gy: np.ndarray):  # noqa: ANN202
        xhat, rstd = _normalize_rows(np.asarray(x, acc).reshape(n * groups, -1), eps)
        gy3 = np.asarray(gy, acc).reshape(n, c, -1)
        gb = _channel_sums(gy3)
        gw = np.einsum("ncs,ncs->c", gy3, xhat.reshape(n, c, -1))
        gx, gx3 = _fresh(gx_t.shape, acc, n, c, -1)
        np.multiply(gy3, np.asarray(w, acc)[:, None], out=gx3)
        _normalized_rows_grad(gx.reshape(n * groups, -1), xhat, rstd)
        return as_out(gx, gx_t), as_out(gw, gw_t), as_out(gb, gb_t)
    return kernel


def _group_grad_gradient(ctx: NodeContext):
    formula = _group_formula(list(ctx.input_types[0].shape), ctx.attrs["num_groups"], ctx.attrs["eps"])
    return ctx.grad_graph(lambda x, w, gy, gx, gw, gb, ggx, ggw, ggb: inlined_vjp(
        formula, [x, w, gy], [ggx, ggw, ggb]))


GROUP_NORM_GRAD = OpSchema(
    "group_norm_grad_internal",
    inputs=("x", "weight", "gy"),
    outputs=("gx", "gweight", "gbias"),
    attrs={"num_groups": AttrSpec("int", doc="the forward's num_groups"), "eps": _EPS},
    shape_infer=_group_grad_shape,
    kernels={"cpu": _empty_safe(_group_grad_kernel)},
    gradient=_group_grad_gradient,
    traits=("any_shape_gradient",),
    doc="group_norm's gradients for x, weight and bias in one fused kernel.",
    examples=[Example(["f32[2, 6, 5]", "f32[6]", "f32[2, 6, 5]"], {"num_groups": 3}),
              Example(["f64[2, 4, 3, 3]", "f64[4]", "f64[2, 4, 3, 3]"], {"num_groups": 2}),
              Example(["f64[3, 4]", "f64[4]", "f64[3, 4]"], {"num_groups": 1})],
)


GROUP_NORM = OpSchema(
    "group_norm",
    inputs=("x", "weight", "bias"),
    attrs={"num_groups": AttrSpec("int", doc="channel groups normalised together; must divide C"), "eps": _EPS},
    shape_infer=lambda ctx: [_group_layout(ctx) and ctx.input_types[0]],
    kernels={"cpu": _empty_safe(_group_kernel)},
    gradient=_group_gradient,
    traits=("any_shape_gradient",),
    doc="Normalises x[N, C, ...] over each group of C / num_groups channels and all positions, then applies a "
        "per-channel weight and bias (torch.nn.functional.group_norm).",
    examples=[
        Example(["f32[2, 6, 5]", "f32[6]", "f32[6]"], {"num_groups": 3}),
        Example(["f64[2, 4, 3, 3]", "f64[4]", "f64[4]"], {"num_groups": 2}),
        Example(["f64[3, 4]", "f64[4]", "f64[4]"], {"num_groups": 1}),
    ],
)


# The training pair with saved statistics (see layer_norm_train_internal): group_norm_train_internal also
# returns xhat and rstd[N, num_groups], group_norm_grad_saved_internal starts from them; the same bits as the pair.
def _group_train_shape(ctx: NodeContext) -> list[TensorType]:
    groups, _, _ = _group_layout(ctx)
    x = ctx.input_types[0]
    return [x, x, TensorType(x.dtype, (x.shape[0], groups))]


def _group_train_kernel(ctx: NodeContext) -> Callable:
    groups, _, bshape = _group_layout(ctx)
    eps, acc, (y_t, xhat_t, rstd_t) = ctx.attrs["eps"], compute_dtype(ctx.input_types[0]), ctx.output_types
    shape = y_t.shape

    def kernel(x, w, b):  # noqa: ANN001, ANN202
        xhat, rows = _fresh(shape, acc, shape[0] * groups, -1)
        _, rstd = _normalize_rows(np.asarray(x, acc).reshape(shape[0] * groups, -1), eps, out=rows)
        y = xhat * np.asarray(w, acc).reshape(bshape)
        y += np.asarray(b, acc).reshape(bshape)
        return as_out(y, y_t), as_out(xhat, xhat_t), as_out(rstd.reshape(rstd_t.shape), rstd_t)
    return kernel


def _group_train_gradient(ctx: NodeContext):
    groups, _, bshape = _group_layout(ctx)
    eps, shape = ctx.attrs["eps"], list(ctx.input_types[0].shape)

    def formula(x, w, b):  # noqa: ANN001, ANN202 - traced tensors
        _, xhat, rstd = _traced_xhat(ops.reshape(x, shape=_grouped(shape, groups)), [2], eps)
        xhat = ops.reshape(xhat, shape=_batched(shape))
        y = xhat * ops.reshape(w, shape=list(bshape)) + ops.reshape(b, shape=list(bshape))
        return [y, xhat, ops.reshape(rstd, shape=[-1, groups])]
    return ctx.grad_graph(lambda x, w, b, y, xhat, rstd, gy, g_xhat, g_rstd: inlined_vjp(
        formula, [x, w, b], [gy, g_xhat, g_rstd]))


GROUP_NORM_TRAIN = OpSchema(
    "group_norm_train_internal",
    inputs=("x", "weight", "bias"),
    outputs=("y", "xhat", "rstd"),
    attrs={"num_groups": AttrSpec("int", doc="channel groups normalised together; must divide C"), "eps": _EPS},
    shape_infer=_group_train_shape,
    kernels={"cpu": _empty_safe(_group_train_kernel)},
    gradient=_group_train_gradient,
    doc="group_norm that also returns the normalised x (xhat) and 1 / sqrt(var + eps) per sample and group "
        "(rstd[N, num_groups]), for group_norm_grad_saved_internal.",
    examples=[Example(["f32[2, 6, 5]", "f32[6]", "f32[6]"], {"num_groups": 3}),
              Example(["f64[2, 4, 3, 3]", "f64[4]", "f64[4]"], {"num_groups": 2})],
)


def _group_saved_shape(ctx: NodeContext) -> list[TensorType]:
    xhat, rstd, w, gy = same_float(ctx)
    c, groups = (xhat.shape[1] if xhat.rank >= 2 else 0), ctx.attrs["num_groups"]
    if xhat.rank < 2 or gy != xhat or w.shape != (c,) or groups < 1 or c % groups \
            or rstd.shape != (xhat.shape[0], groups):
        raise ctx.error(f"expected xhat [N, C, ...], rstd [N, num_groups], weight [C] and gy of xhat's type, "
                        f"num_groups dividing C, got {xhat}, {rstd}, {w}, {gy}, num_groups = {groups}")
    return [xhat, w, w]


def _group_saved_kernel(ctx: NodeContext) -> Callable:
    xhat_t, groups = ctx.input_types[0], ctx.attrs["num_groups"]
    acc, (gx_t, gw_t, gb_t) = compute_dtype(xhat_t), ctx.output_types
    n, c = xhat_t.shape[:2]

    def kernel(xhat, rstd, w, gy):  # noqa: ANN001, ANN202
        xhat3, gy3 = np.asarray(xhat, acc).reshape(n, c, -1), np.asarray(gy, acc).reshape(n, c, -1)
        gb = _channel_sums(gy3)
        gw = np.einsum("ncs,ncs->c", gy3, xhat3)
        gx, gx3 = _fresh(gx_t.shape, acc, n, c, -1)
        np.multiply(gy3, np.asarray(w, acc)[:, None], out=gx3)
        _normalized_rows_grad(gx.reshape(n * groups, -1), xhat3.reshape(n * groups, -1),
                              np.asarray(rstd, acc).reshape(-1))
        return as_out(gx, gx_t), as_out(gw, gw_t), as_out(gb, gb_t)
    return kernel


def _group_saved_gradient(ctx: NodeContext):
    groups, shape = ctx.attrs["num_groups"], list(ctx.input_types[0].shape)
    grouped, axes = _grouped(shape, groups), [0, *range(2, len(shape))]
    bshape = [1, shape[1]] + [1] * (len(shape) - 2)

    def formula(xhat, rstd, w, gy):  # noqa: ANN001, ANN202 - traced tensors
        g = ops.reshape(gy * ops.reshape(w, shape=bshape), shape=grouped)
        gx = _traced_normalize_grad(g, ops.reshape(xhat, shape=grouped), ops.reshape(rstd, shape=[*grouped[:2], 1]),
                                    [2])
        return [ops.reshape(gx, shape=_batched(shape)), ops.sum(gy * xhat, axes=axes), ops.sum(gy, axes=axes)]
    return ctx.grad_graph(lambda xhat, rstd, w, gy, gx, gw, gb, ggx, ggw, ggb: inlined_vjp(
        formula, [xhat, rstd, w, gy], [ggx, ggw, ggb]))


GROUP_NORM_GRAD_SAVED = OpSchema(
    "group_norm_grad_saved_internal",
    inputs=("xhat", "rstd", "weight", "gy"),
    outputs=("gx", "gweight", "gbias"),
    attrs={"num_groups": AttrSpec("int", doc="the forward's num_groups")},
    shape_infer=_group_saved_shape,
    kernels={"cpu": _empty_safe(_group_saved_kernel)},
    gradient=_group_saved_gradient,
    doc="group_norm's gradients for x, weight and bias from group_norm_train_internal's xhat and rstd.",
    examples=[Example(["f32[2, 6, 5]", "f32[2, 3]", "f32[6]", "f32[2, 6, 5]"], {"num_groups": 3}, low=0.5, high=1.5),
              Example(["f64[2, 4, 3, 3]", "f64[2, 2]", "f64[4]", "f64[2, 4, 3, 3]"], {"num_groups": 2}, low=0.5,
                      high=1.5)],
)

SCHEMAS = [LAYER_NORM, LAYER_NORM_GRAD, LAYER_NORM_TRAIN, LAYER_NORM_GRAD_SAVED, BATCH_NORM, BATCH_NORM_GRAD,
           BATCH_NORM_TRAIN, BATCH_NORM_GRAD_SAVED, GROUP_NORM, GROUP_NORM_GRAD, GROUP_NORM_TRAIN,
           GROUP_NORM_GRAD_SAVED]
