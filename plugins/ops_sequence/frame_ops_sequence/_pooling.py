"""max_pool1d and avg_pool1d over the last axis of x[..., L], and their gradient ops.

Windows of ``kernel_size`` positions start every ``stride`` (default:
``kernel_size``) positions of the padded input (padding modes as conv1d's).

max_pool1d pads with -inf, so padding never wins. **Tie rule:** the first
maximum of a window (the lowest position) is its argmax and receives the whole
gradient (as in torch); a NaN counts as a maximum (it propagates, and the
window's first NaN receives the gradient: np.argmax's rule); padding never
receives it (a window of -inf values gives it to its first real position).
Between kinks the pool is piecewise linear, so its gradient ops have zero
gradient with respect to x:
``max_pool1d_grad_internal(x, gy)`` scatters gy to each window's argmax and
``max_pool1d_select_internal(x, g)`` reads g at those argmaxes; each is the
other's transpose, so the three ops close.

avg_pool1d pads with zeros and divides by ``kernel_size`` (``count_include_pad``,
torch's default) or by the number of real positions in the window. It is
linear: ``avg_pool1d_grad_internal(gy)`` spreads gy / divisor back over each
window, and its gradient is avg_pool1d again.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, Record, TensorType, ops

from ._common import as_out, compute_dtype, require_float
from ._windows import check_positive, output_length, padded, resolve_padding, tap, windows


class PoolGeometry(Record):
    __match_args__ = ("length", "kernel", "stride", "left", "right", "out_length")
    length: int
    kernel: int
    stride: int
    left: int
    right: int
    out_length: int

    def __init__(self, length: int, kernel: int, stride: int, left: int, right: int, out_length: int) -> None:
        self._store(length=length, kernel=kernel, stride=stride, left=left, right=right, out_length=out_length)

    def attrs(self) -> dict:
        return {"kernel_size": self.kernel, "stride": self.stride, "padding": (self.left, self.right)}


def _geometry(ctx: NodeContext, x: TensorType, length: int | None = None) -> PoolGeometry:
    if x.rank == 0:
        raise ctx.error(f"x must have a last axis to pool over ([..., L]), got the scalar {x}")
    kernel = ctx.attrs["kernel_size"]
    stride = kernel if ctx.attrs["stride"] is None else ctx.attrs["stride"]
    check_positive(ctx, kernel_size=kernel, stride=stride)
    length = x.shape[-1] if length is None else length
    left, right = resolve_padding(ctx, length, kernel, stride)
    if max(left, right) >= kernel:
        raise ctx.error(f"padding ({left}, {right}) must stay below kernel_size = {kernel}, so that no window is "
                        "made only of padding")
    out_length = output_length(ctx, length, left, right, kernel, stride, what="pooling window")
    return PoolGeometry(length, kernel, stride, left, right, out_length)


_POOL_ATTRS = {
    "kernel_size": AttrSpec("int", doc="window length"),
    "stride": AttrSpec("int", None, "step between windows; none: kernel_size"),
    "padding": AttrSpec("str|ints", "valid", "'valid', 'same', 'causal', one int (both sides) or [left, right]"),
}


def _gradient_attrs(ctx: NodeContext, geo: PoolGeometry) -> dict:
    """The window attributes a max-pool gradient op gets: padding resolved to sizes, except 'same', which stays
    'same' (its pads depend on the input size once stride > 1: a training graph at another size reads them again)."""
    attrs = geo.attrs()
    if ctx.attrs["padding"] == "same":
        attrs["padding"] = "same"
    return attrs


def _pooled_shape(ctx: NodeContext) -> list[TensorType]:
    x = require_float(ctx, 0)
    return [x.with_shape(x.shape[:-1] + (_geometry(ctx, x).out_length,))]


def _scatter_taps(values_by_tap: Callable[[int], np.ndarray], shape: tuple[int, ...], geo: PoolGeometry,
                  acc: np.dtype) -> np.ndarray:
    """sum over taps k of values_by_tap(k) added at positions k + t * stride, cropped to the unpadded input."""
    gxp = np.zeros(shape[:-1] + (geo.length + geo.left + geo.right,), acc)
    for k in range(geo.kernel):
        tap(gxp, k, geo.stride, 1, geo.out_length)[...] += values_by_tap(k)
    return gxp[..., geo.left:geo.left + geo.length]


def _argmax(x: np.ndarray, geo: PoolGeometry) -> np.ndarray:
    """Each window's first maximum (a NaN counts as one), as a tap index 0..kernel-1; never a padded tap.

    Padding is -inf, so in a window whose real values are all -inf np.argmax would pick a padded tap and the
    gradient would vanish with the padding: such a window takes its first real tap (every window has one, since
    padding < kernel_size), as torch does.
    """
    xp = padded(x, geo.left, geo.right, x.dtype, -np.inf)
    taps = windows(xp, geo.kernel, geo.stride, 1, geo.out_length)
    am = np.argmax(taps, axis=-1)
    if geo.left:  # only left padding comes before a real tap of its window
        first_real = np.maximum(geo.left - np.arange(geo.out_length) * geo.stride, 0)
        at_pad = am < first_real
        if at_pad.any():
            am = np.where(at_pad, first_real, am)
    return am


# -- max_pool1d ---------------------------------------------------------------------------------------
def _max_kernel(ctx: NodeContext) -> Callable:
    x_t, (y_t,) = ctx.input_types[0], ctx.output_types
    geo = _geometry(ctx, x_t)

    def kernel(x: np.ndarray) -> np.ndarray:
        xp = padded(x, geo.left, geo.right, x.dtype, -np.inf)
        return as_out(np.max(windows(xp, geo.kernel, geo.stride, 1, geo.out_length), axis=-1), y_t)
    return kernel


def _max_gradient(ctx: NodeContext):
    attrs = _gradient_attrs(ctx, _geometry(ctx, ctx.input_types[0]))
    # gx = gy scattered to each window's (first) argmax
    return ctx.grad_graph(lambda x, y, gy: ops.max_pool1d_grad_internal(x, gy, **attrs))


MAX_POOL1D = OpSchema(
    "max_pool1d",
    inputs=("x",),
    attrs=_POOL_ATTRS,
    shape_infer=_pooled_shape,
    kernels={"cpu": _max_kernel},
    gradient=_max_gradient,
    traits=("any_shape_gradient",),
    doc="Maximum over windows of the last axis (padding counts as -inf). Ties: the first maximum of a window "
        "receives the gradient; NaN propagates.",
    examples=[
        Example(["f32[2, 3, 8]"], {"kernel_size": 2}),
        Example(["f32[2, 7]"], {"kernel_size": 3, "stride": 2, "padding": "same"}, note="overlapping windows"),
        Example(["f64[1, 2, 9]"], {"kernel_size": 3, "stride": 1, "padding": [1, 2]}),
    ],
)


# max_pool1d_grad_internal(x, gy) = gy added at each window's argmax of x
#   second order: g_x = 0 (piecewise constant in x), g_gy = max_pool1d_select_internal(x, ggx)
def _pair_geometry(ctx: NodeContext) -> PoolGeometry:
    x, g = ctx.input_types
    require_float(ctx, 0)
    geo = _geometry(ctx, x)
    want = x.with_shape(x.shape[:-1] + (geo.out_length,))
    if g != want:
        raise ctx.error(f"the pooled tensor must be {want} (x pooled), got {g}")
    return geo


def _max_grad_shape(ctx: NodeContext) -> list[TensorType]:
    _pair_geometry(ctx)
    return [ctx.input_types[0]]


def _max_grad_kernel(ctx: NodeContext) -> Callable:
    geo, x_t = _pair_geometry(ctx), ctx.input_types[0]
    acc = compute_dtype(x_t)

    def kernel(x: np.ndarray, gy: np.ndarray) -> np.ndarray:
        am, g = _argmax(x, geo), np.asarray(gy, acc)
        return as_out(_scatter_taps(lambda k: np.where(am == k, g, 0), x.shape, geo, acc), x_t)
    return kernel


MAX_POOL1D_GRAD = OpSchema(
    "max_pool1d_grad_internal",
    inputs=("x", "gy"),
    attrs=_POOL_ATTRS,
    shape_infer=_max_grad_shape,
    kernels={"cpu": _max_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, gx, ggx: [
        None, ops.max_pool1d_select_internal(x, ggx, **_gradient_attrs(ctx, _pair_geometry(ctx)))]),
    traits=("any_shape_gradient",),
    doc="gy added at the argmax of each window of x: max_pool1d's gradient.",
    examples=[Example(["f32[2, 3, 8]", "f32[2, 3, 4]"], {"kernel_size": 2, "stride": 2, "padding": [0, 0]}),
              Example(["f64[2, 7]", "f64[2, 4]"], {"kernel_size": 3, "stride": 2, "padding": [1, 1]})],
)


# max_pool1d_select_internal(x, g) = g read at each window's argmax of x (the transpose of the grad op)
#   gradient: g_x = 0, g_g = max_pool1d_grad_internal(x, gy)
def _select_shape(ctx: NodeContext) -> list[TensorType]:
    x, g = ctx.input_types
    require_float(ctx, 0)
    if g != x:
        raise ctx.error(f"g must have x's type {x}, got {g}")
    return [x.with_shape(x.shape[:-1] + (_geometry(ctx, x).out_length,))]


def _select_kernel(ctx: NodeContext) -> Callable:
    geo, (y_t,) = _geometry(ctx, ctx.input_types[0]), ctx.output_types

    def kernel(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        am = _argmax(x, geo)[..., None]
        wg = windows(padded(g, geo.left, geo.right, g.dtype), geo.kernel, geo.stride, 1, geo.out_length)
        return as_out(np.take_along_axis(wg, am, axis=-1)[..., 0], y_t)
    return kernel


MAX_POOL1D_SELECT = OpSchema(
    "max_pool1d_select_internal",
    inputs=("x", "g"),
    attrs=_POOL_ATTRS,
    shape_infer=_select_shape,
    kernels={"cpu": _select_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, g, y, gy: [
        None, ops.max_pool1d_grad_internal(x, gy, **_gradient_attrs(ctx, _geometry(ctx, ctx.input_types[0])))]),
    traits=("any_shape_gradient",),
    doc="g read at the argmax of each window of x: the transpose of max_pool1d_grad_internal.",
    examples=[Example(["f32[2, 3, 8]", "f32[2, 3, 8]"], {"kernel_size": 2, "stride": 2, "padding": [0, 0]}),
              Example(["f64[2, 7]", "f64[2, 7]"], {"kernel_size": 3, "stride": 2, "padding": [1, 1]})],
)


# -- avg_pool1d ---------------------------------------------------------------------------------------
_AVG_ATTRS = {**_POOL_ATTRS, "count_include_pad": AttrSpec(
    "bool", True, "divide by kernel_size (true) or by the number of real positions in the window (false)")}


def _divisor(geo: PoolGeometry, include_pad: bool, dtype: np.dtype) -> np.ndarray:
    """What each window's sum is divided by: kernel_size, or the count of its unpadded positions."""
    if include_pad:
        return np.full(geo.out_length, geo.kernel, dtype)
    real = padded(np.ones(geo.length, dtype), geo.left, geo.right, dtype)
    return windows(real, geo.kernel, geo.stride, 1, geo.out_length).sum(axis=-1)


def _avg_kernel(ctx: NodeContext) -> Callable:
    x_t, (y_t,) = ctx.input_types[0], ctx.output_types
    geo, acc = _geometry(ctx, x_t), compute_dtype(x_t)
    div = _divisor(geo, ctx.attrs["count_include_pad"], acc)

    def kernel(x: np.ndarray) -> np.ndarray:
        sums = windows(padded(x, geo.left, geo.right, acc), geo.kernel, geo.stride, 1, geo.out_length).sum(axis=-1)
        return as_out(sums / div, y_t)
    return kernel


def _avg_gradient(ctx: NodeContext):
    # gx = gy / divisor spread back over each window: avg_pool1d_grad_internal, its length and pads read from x
    return ctx.grad_graph(lambda x, y, gy: ops.avg_pool1d_grad_like_internal(gy, x, **ctx.attrs))


AVG_POOL1D = OpSchema(
    "avg_pool1d",
    inputs=("x",),
    attrs=_AVG_ATTRS,
    shape_infer=_pooled_shape,
    kernels={"cpu": _avg_kernel},
    gradient=_avg_gradient,
    traits=("any_shape_gradient",),
    doc="Mean over windows of the last axis; zero padding counts in the mean unless count_include_pad=False.",
    examples=[
        Example(["f32[2, 3, 8]"], {"kernel_size": 2}),
        Example(["f32[2, 7]"], {"kernel_size": 3, "stride": 2, "padding": "same", "count_include_pad": False}),
        Example(["f64[1, 2, 9]"], {"kernel_size": 4, "stride": 1, "padding": "causal"}),
    ],
)


# avg_pool1d_grad_internal(gy) = gy / divisor spread over each window (the transpose of avg_pool1d)
#   gradient: g_gy = avg_pool1d(ggx) with the same attributes
def _avg_grad_geometry(ctx: NodeContext) -> PoolGeometry:
    gy = require_float(ctx, 0)
    if gy.rank == 0:
        raise ctx.error(f"gy must be pooled [..., L_out], got the scalar {gy}")
    check_positive(ctx, length=ctx.attrs["length"])
    geo = _geometry(ctx, gy, ctx.attrs["length"])
    if gy.shape[-1] != geo.out_length:
        raise ctx.error(f"gy's last axis must be the pooled length {geo.out_length} of an input of length "
                        f"{geo.length}, got {gy}")
    return geo


def _avg_grad_kernel(ctx: NodeContext) -> Callable:
    gy_t, (gx_t,) = ctx.input_types[0], ctx.output_types
    geo, acc = _avg_grad_geometry(ctx), compute_dtype(gy_t)
    div = _divisor(geo, ctx.attrs["count_include_pad"], acc)

    def kernel(gy: np.ndarray) -> np.ndarray:
        share = np.asarray(gy, acc) / div
        return as_out(_scatter_taps(lambda k: share, gx_t.shape, geo, acc), gx_t)
    return kernel


AVG_POOL1D_GRAD = OpSchema(
    "avg_pool1d_grad_internal",
    inputs=("gy",),
    attrs={**_AVG_ATTRS, "length": AttrSpec("int", doc="the input length L")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(ctx.input_types[0].shape[:-1] + (
        _avg_grad_geometry(ctx).length,))],
    kernels={"cpu": _avg_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, gx, ggx: ops.avg_pool1d(
        ggx, count_include_pad=ctx.attrs["count_include_pad"], **_avg_grad_geometry(ctx).attrs())),
    doc="gy divided by each window's divisor and spread over the window: avg_pool1d's gradient.",
    examples=[Example(["f32[2, 3, 4]"], {"kernel_size": 2, "length": 8}),
              Example(["f64[2, 4]"], {"kernel_size": 3, "stride": 2, "padding": [1, 1], "length": 7,
                                      "count_include_pad": False})],
)

# avg_pool1d_grad_like_internal(gy, x) = avg_pool1d_grad_internal(gy; length=x's L, pads resolved), x read for its
#   shape only (compiled or exported: that op, the DecomposeFn); second order: avg_pool1d(ggx)
def _avg_like_attrs(ctx: NodeContext) -> dict:
    gy, x = ctx.input_types
    geo = _geometry(ctx, x)
    if gy.shape != x.shape[:-1] + (geo.out_length,) or gy.dtype is not x.dtype:
        raise ctx.error(f"gy must be x {x} pooled, {x.dtype.name}{list(x.shape[:-1] + (geo.out_length,))}, got {gy}")
    return {**geo.attrs(), "length": geo.length, "count_include_pad": ctx.attrs["count_include_pad"]}


def _avg_like_kernel(ctx: NodeContext) -> Callable:
    attrs = AVG_POOL1D_GRAD.normalize_attrs(_avg_like_attrs(ctx))
    inner = _avg_grad_kernel(NodeContext(AVG_POOL1D_GRAD, ctx.input_types[:1], attrs, ctx.output_types))
    return lambda gy, x: inner(gy)


AVG_POOL1D_GRAD_LIKE = OpSchema(
    "avg_pool1d_grad_like_internal",
    inputs=("gy", "x"),
    attrs=_AVG_ATTRS,
    shape_infer=lambda ctx: (_avg_like_attrs(ctx), [ctx.input_types[1]])[1],
    kernels={"cpu": _avg_like_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, x, gx, ggx: [ops.avg_pool1d(ggx, **ctx.attrs), None]),
    decomposition=lambda ctx: ctx.decomposition_graph(
        lambda gy, x: ops.avg_pool1d_grad_internal(gy, **_avg_like_attrs(ctx))),
    nondiff_inputs=(1,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="avg_pool1d's gradient at x's length (x read for its shape only): gy spread over each window.",
    examples=[Example(["f32[2, 3, 4]", "f32[2, 3, 8]"], {"kernel_size": 2}),
              Example(["f64[2, 4]", "f64[2, 7]"], {"kernel_size": 3, "stride": 2, "padding": [1, 1],
                                                  "count_include_pad": False})],
)

SCHEMAS = [MAX_POOL1D, MAX_POOL1D_GRAD, MAX_POOL1D_SELECT, AVG_POOL1D, AVG_POOL1D_GRAD, AVG_POOL1D_GRAD_LIKE]
