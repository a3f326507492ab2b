"""max_pool2d, avg_pool2d and adaptive_avg_pool2d over the last two axes of x[..., H, W], and their gradient ops.

Windows of ``kernel_size`` ``[kh, kw]`` start every ``stride`` (default:
``kernel_size``) positions of the padded input (``padding`` as conv2d's:
``"valid"``, ``"same"``, one int, ``[ph, pw]`` or ``[top, bottom, left,
right]``, each below the kernel so that no window is only padding).

max_pool2d pads with -inf. **Tie rule** (torch's): the first maximum of a
window in row-major order receives the whole gradient; a NaN counts as a
maximum (it propagates and its first NaN receives the gradient); padding never
receives it (a window of -inf values gives it to its first real position).
Between kinks the pool is piecewise linear: its gradient op's own gradient is
the select op below and the pair closes at every order.

avg_pool2d divides each window sum by ``kh * kw`` (``count_include_pad``) or by
the number of real positions. It is linear; its gradient op spreads ``gy``
back over the windows and has avg_pool2d as its own gradient.

adaptive_avg_pool2d(x; output_size) averages bin ``i`` over rows
``floor(i H / oh) .. ceil((i + 1) H / oh) - 1`` (torch's bins), so ``[1, 1]``
is global average pooling. It is ``A_h x A_w^T`` with two fixed averaging
matrices; its gradient ``A_h^T gy A_w`` is an internal op whose gradient is the
pool again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, Record, TensorType, ops

from ._common import as_out, compute_dtype, per_dim, require_float
from .conv import resolve_padding

if TYPE_CHECKING:
    from numpy.typing import DTypeLike


class PoolGeometry(Record):
    __match_args__ = ("size", "kernel", "stride", "before", "after", "out")
    size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    before: tuple[int, ...]
    after: tuple[int, ...]
    out: tuple[int, ...]

    def __init__(
        self, size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], before: tuple[int, ...],
        after: tuple[int, ...], out: tuple[int, ...]
    ) -> None:
        self._store(size=size, kernel=kernel, stride=stride, before=before, after=after, out=out)

    def attrs(self) -> dict:
        return {"kernel_size": self.kernel, "stride": self.stride,
                "padding": (self.before[0], self.after[0], self.before[1], self.after[1])}

    def pad(self, x: np.ndarray, dtype: DTypeLike, fill: float = 0.0) -> np.ndarray:
        (bh, bw), (ah, aw) = self.before, self.after
        x = np.asarray(x, dtype)
        if not (bh or bw or ah or aw):
            return x
        widths = [(0, 0)] * (x.ndim - 2) + [(bh, ah), (bw, aw)]
        return np.pad(x, widths, constant_values=fill)

    def windows(self, xp: np.ndarray) -> np.ndarray:
        """A strided view ``[..., oh, ow, kh, kw]`` of the windows of the padded ``xp`` (no copy)."""
        (sh, sw), (oh, ow) = self.stride, self.out
        view = np.lib.stride_tricks.sliding_window_view(xp, self.kernel, axis=(-2, -1))
        return view[..., :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, :, :]

    def scatter(self, by_tap: Callable[[int, int], np.ndarray], lead: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The sum over taps ``(i, j)`` of ``by_tap(i, j)`` (``[..., oh, ow]``) added where that tap read, cropped."""
        (sh, sw), (oh, ow), (h, w) = self.stride, self.out, self.size
        (bh, bw), (ah, aw) = self.before, self.after
        gxp = np.zeros(lead + (h + bh + ah, w + bw + aw), dtype)
        for i in range(self.kernel[0]):
            for j in range(self.kernel[1]):
                gxp[..., i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw] += by_tap(i, j)
        return gxp[..., bh:bh + h, bw:bw + w]


def pool_geometry(ctx: NodeContext, x: TensorType, size: tuple[int, ...] | None = None) -> PoolGeometry:
    if x.rank < 2:
        raise ctx.error(f"x must have two trailing axes to pool over ([..., H, W]), got {x}")
    kernel = per_dim(ctx, "kernel_size", 2)
    stride = kernel if ctx.attrs["stride"] is None else per_dim(ctx, "stride", 2)
    size = tuple(x.shape[-2:]) if size is None else tuple(size)
    before, after = resolve_padding(ctx, 2, size, kernel, stride)
    if any(max(b, a) >= k for b, a, k in zip(before, after, kernel)):
        raise ctx.error(f"padding (before {list(before)}, after {list(after)}) must stay below kernel_size "
                        f"{list(kernel)} on each axis, so that no window is made only of padding")
    out = []
    for axis, (n, b, a, k, s) in enumerate(zip(size, before, after, kernel, stride)):
        if n + b + a < k:
            raise ctx.error(f"the pooling window covers {k} positions along axis {axis - 2}, more than the padded "
                            f"input's {n + b + a} (size {n} + padding {b} + {a}); use a smaller kernel_size")
        out.append((n + b + a - k) // s + 1)
    return PoolGeometry(size, kernel, stride, before, after, tuple(out))


_POOL_ATTRS = {
    "kernel_size": AttrSpec("ints", doc="window size: one int or [kh, kw]"),
    "stride": AttrSpec("ints", None, "step between windows: one int or [sh, sw]; none: kernel_size"),
    "padding": AttrSpec("str|ints", 0, "'valid', 'same', one int, [ph, pw] or [top, bottom, left, right]"),
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
    return [x.with_shape(x.shape[:-2] + pool_geometry(ctx, x).out)]


# -- max_pool2d ---------------------------------------------------------------------------------------
def _taps(geo: PoolGeometry, xp: np.ndarray):  # noqa: ANN202
    """``(flat index i * kw + j, tap)`` for every tap of the windows: strided ``[..., oh, ow]`` views of ``xp``."""
    (sh, sw), (oh, ow) = geo.stride, geo.out
    for i in range(geo.kernel[0]):
        for j in range(geo.kernel[1]):
            yield i * geo.kernel[1] + j, xp[..., i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]


def _tiled(geo: PoolGeometry) -> bool:
    """Windows that tile the input (stride = kernel, no padding): every position is in at most one window."""
    return geo.stride == geo.kernel and not any(geo.before) and not any(geo.after)


def _tile_view(a: np.ndarray, geo: PoolGeometry) -> np.ndarray:
    """For tiled windows, ``a``'s covered part as a view ``[..., oh, kh, ow, kw]`` (splitting axes never copies)."""
    (kh, kw), (oh, ow) = geo.kernel, geo.out
    return a[..., :oh * kh, :ow * kw].reshape(a.shape[:-2] + (oh, kh, ow, kw))


def _tile_taps(x: np.ndarray, geo: PoolGeometry) -> np.ndarray:
    """For tiled windows, the taps as one contiguous ``[kh * kw, ..., oh, ow]`` copy: tap ``i * kw + j`` first.

    One transposing copy makes every later pass a long contiguous loop; the strided taps of a small pool
    (2x2 windows: rows of ``ow`` elements two apart) cost several times more per pass.
    """
    view = np.moveaxis(_tile_view(x, geo), (-3, -1), (0, 1))  # [kh, kw, ..., oh, ow]
    # (the tap count spelt out: for an empty x a -1 could stand for any size)
    return np.ascontiguousarray(view).reshape((geo.kernel[0] * geo.kernel[1],) + view.shape[2:])


def _argmax(x: np.ndarray, geo: PoolGeometry) -> np.ndarray:
    """Each window's first maximum (NaN counts as one) as a flat tap index ``i * kw + j``; never a padded tap.

    Taps are compared one at a time over whole ``[..., oh, ow]`` slices (a later tap wins only when strictly
    larger, or NaN where the best is not), which is far faster than an argmax over tiny window axes.
    """
    has_nan = bool(np.isnan(x).any())
    taps = iter(enumerate(_tile_taps(x, geo)) if _tiled(geo) else _taps(geo, geo.pad(x, x.dtype, -np.inf)))
    _, first = next(taps)  # (a window has at least one tap)
    best, am = first.copy(), np.zeros(first.shape, np.intp)
    for k, tap in taps:
        wins = tap > best
        if has_nan:
            wins |= np.isnan(tap) & ~np.isnan(best)
            np.copyto(best, tap, where=wins)
        else:
            np.maximum(best, tap, out=best)
        # a later tap wins with a larger index, so the winner so far is the largest k that won (branch-free:
        # masked copies of random comparisons cost several times more)
        np.maximum(am, np.multiply(wins, k, dtype=np.intp), out=am)
    if any(geo.before) or any(geo.after):
        real = geo.windows(geo.pad(np.ones(geo.size, bool), bool, False))
        real = real.reshape(real.shape[:-2] + (-1,))  # [oh, ow, kh kw]
        chosen_real = np.take_along_axis(np.broadcast_to(real, am.shape + real.shape[-1:]), am[..., None],
                                         axis=-1)[..., 0]
        if not chosen_real.all():  # an all -inf window picked padding: give it its first real tap
            am = np.where(chosen_real, am, np.argmax(real, axis=-1))
    return am


def _max_kernel(ctx: NodeContext) -> Callable:
    x_t, (y_t,) = ctx.input_types[0], ctx.output_types
    geo = pool_geometry(ctx, x_t)

    def kernel(x: np.ndarray) -> np.ndarray:
        if _tiled(geo):  # rows of windows first (contiguous rows), then within them; NaN propagates
            v = _tile_view(x, geo)  # [..., oh, kh, ow, kw]
            rows = v[..., 0, :, :] if geo.kernel[0] == 1 else np.maximum(v[..., 0, :, :], v[..., 1, :, :])
            for i in range(2, geo.kernel[0]):
                np.maximum(rows, v[..., i, :, :], out=rows)
            y = rows[..., 0] if geo.kernel[1] == 1 else np.maximum(rows[..., 0], rows[..., 1])
            for j in range(2, geo.kernel[1]):
                np.maximum(y, rows[..., j], out=y)
            return as_out(y, y_t)
        taps = _taps(geo, geo.pad(x, x.dtype, -np.inf))
        y = next(taps)[1].copy()  # (a window has at least one tap)
        for _, tap in taps:
            np.maximum(y, tap, out=y)  # NaN propagates
        return as_out(y, y_t)
    return kernel


MAX_POOL2D = OpSchema(
    "max_pool2d",
    inputs=("x",),
    attrs=_POOL_ATTRS,
    shape_infer=_pooled_shape,
    kernels={"cpu": _max_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.max_pool2d_grad_internal(
        x, gy, **_gradient_attrs(ctx, pool_geometry(ctx, ctx.input_types[0])))),
    traits=("any_shape_gradient",),
    doc="Maximum over 2-D windows of the last two axes (padding counts as -inf). Ties: the first maximum of a "
        "window receives the gradient; NaN propagates.",
    examples=[
        Example(["f32[2, 3, 6, 4]"], {"kernel_size": 2}),
        Example(["f32[2, 7, 5]"], {"kernel_size": 3, "stride": [2, 1], "padding": "same"}, note="overlapping"),
        Example(["f64[1, 2, 5, 5]"], {"kernel_size": [2, 3], "stride": 1, "padding": [1, 0, 1, 1]}),
    ],
)


def _pair_geometry(ctx: NodeContext) -> PoolGeometry:
    x, g = ctx.input_types
    require_float(ctx, 0)
    geo = pool_geometry(ctx, x)
    want = x.with_shape(x.shape[:-2] + geo.out)
    if g != want:
        raise ctx.error(f"the pooled tensor must be {want} (x pooled), got {g}")
    return geo


def _max_grad_kernel(ctx: NodeContext) -> Callable:
    geo, x_t = _pair_geometry(ctx), ctx.input_types[0]
    acc, kw = compute_dtype(x_t), geo.kernel[1]

    tiled = _tiled(geo)
    if tiled:  # each window's first position in the flattened x, and each tap's offset from it
        (kh, kw), (oh, ow), (h, w) = geo.kernel, geo.out, geo.size
        starts = (np.arange(int(np.prod(x_t.shape[:-2], dtype=np.int64)))[:, None, None] * (h * w)
                  + np.arange(oh)[:, None] * (kh * w) + np.arange(ow) * kw).reshape(-1)
        offsets = np.array([i * w + j for i in range(kh) for j in range(kw)])

    def kernel(x: np.ndarray, gy: np.ndarray) -> np.ndarray:
        am, g = _argmax(x, geo), np.asarray(gy, acc)
        if not tiled:
            return as_out(geo.scatter(lambda i, j: np.where(am == i * kw + j, g, 0), x.shape[:-2], acc), x_t)
        # windows tile the input: every position belongs to at most one window, so one scatter of gy to the
        # windows' argmax positions (distinct) is the whole gradient
        gx = np.zeros(x.shape, acc)
        gx.reshape(-1)[starts + offsets[am.reshape(-1)]] = g.reshape(-1)
        return as_out(gx, x_t)
    return kernel


def _max_grad_shape(ctx: NodeContext) -> list[TensorType]:
    _pair_geometry(ctx)
    return [ctx.input_types[0]]


# max_pool2d_grad_internal(x, gy) = gy added at each window's argmax; g_x = 0, g_gy = select(x, ggx)
MAX_POOL2D_GRAD = OpSchema(
    "max_pool2d_grad_internal",
    inputs=("x", "gy"),
    attrs=_POOL_ATTRS,
    shape_infer=_max_grad_shape,
    kernels={"cpu": _max_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, gx, ggx: [
        None, ops.max_pool2d_select_internal(x, ggx, **_gradient_attrs(ctx, _pair_geometry(ctx)))]),
    traits=("any_shape_gradient",),
    doc="gy added at the argmax of each window of x: max_pool2d's gradient.",
    examples=[Example(["f32[2, 3, 6, 4]", "f32[2, 3, 3, 2]"], {"kernel_size": [2, 2], "stride": [2, 2],
                                                             "padding": [0, 0, 0, 0]}),
              Example(["f64[2, 7, 5]", "f64[2, 4, 5]"], {"kernel_size": [3, 3], "stride": [2, 1],
                                                         "padding": [1, 1, 1, 1]})],
)


def _select_shape(ctx: NodeContext) -> list[TensorType]:
    x, g = ctx.input_types
    require_float(ctx, 0)
    if g != x:
        raise ctx.error(f"g must have x's type {x}, got {g}")
    return [x.with_shape(x.shape[:-2] + pool_geometry(ctx, x).out)]


def _select_kernel(ctx: NodeContext) -> Callable:
    geo, (y_t,) = pool_geometry(ctx, ctx.input_types[0]), ctx.output_types

    def kernel(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        am = _argmax(x, geo)[..., None]
        wg = geo.windows(geo.pad(g, g.dtype))
        taps = wg.reshape(wg.shape[:-2] + (wg.shape[-2] * wg.shape[-1],))  # (not -1: an empty batch allows any)
        return as_out(np.take_along_axis(taps, am, axis=-1)[..., 0], y_t)
    return kernel


# max_pool2d_select_internal(x, g) = g read at each window's argmax (the transpose of the grad op)
MAX_POOL2D_SELECT = OpSchema(
    "max_pool2d_select_internal",
    inputs=("x", "g"),
    attrs=_POOL_ATTRS,
    shape_infer=_select_shape,
    kernels={"cpu": _select_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, g, y, gy: [
        None, ops.max_pool2d_grad_internal(x, gy, **_gradient_attrs(ctx, pool_geometry(ctx, ctx.input_types[0])))]),
    traits=("any_shape_gradient",),
    doc="g read at the argmax of each window of x: the transpose of max_pool2d_grad_internal.",
    examples=[Example(["f32[2, 3, 6, 4]", "f32[2, 3, 6, 4]"], {"kernel_size": [2, 2], "stride": [2, 2],
                                                             "padding": [0, 0, 0, 0]}),
              Example(["f64[2, 7, 5]", "f64[2, 7, 5]"], {"kernel_size": [3, 3], "stride": [2, 1],
                                                         "padding": [1, 1, 1, 1]})],
)


# -- avg_pool2d ---------------------------------------------------------------------------------------
_AVG_ATTRS = {**_POOL_ATTRS, "count_include_pad": AttrSpec(
    "bool", True, "divide by kh * kw (true) or by the number of real positions in the window (false)")}


def _divisor(geo: PoolGeometry, include_pad: bool, dtype: np.dtype) -> np.ndarray:
    if include_pad:
        return np.full(geo.out, geo.kernel[0] * geo.kernel[1], dtype)
    return geo.windows(geo.pad(np.ones(geo.size, dtype), dtype)).sum(axis=(-2, -1))


def _avg_kernel(ctx: NodeContext) -> Callable:
    x_t, (y_t,) = ctx.input_types[0], ctx.output_types
    geo, acc = pool_geometry(ctx, x_t), compute_dtype(x_t)
    div = _divisor(geo, ctx.attrs["count_include_pad"], acc)

    def kernel(x: np.ndarray) -> np.ndarray:
        total = None
        for _, tap in _taps(geo, geo.pad(x, acc)):
            total = tap.copy() if total is None else np.add(total, tap, out=total)
        return as_out(total / div, y_t)
    return kernel


def _avg_gradient(ctx: NodeContext):
    # avg_pool2d_grad_internal(gy; size=x's [H, W]), its size and 'same' pads read from x
    return ctx.grad_graph(lambda x, y, gy: ops.avg_pool2d_grad_like_internal(gy, x, **ctx.attrs))


AVG_POOL2D = OpSchema(
    "avg_pool2d",
    inputs=("x",),
    attrs=_AVG_ATTRS,
    shape_infer=_pooled_shape,
    kernels={"cpu": _avg_kernel},
    gradient=_avg_gradient,
    traits=("any_shape_gradient",),
    doc="Mean over 2-D windows of the last two axes; zero padding counts in the mean unless "
        "count_include_pad=False.",
    examples=[
        Example(["f32[2, 3, 6, 4]"], {"kernel_size": 2}),
        Example(["f32[2, 7, 5]"], {"kernel_size": 3, "stride": [2, 1], "padding": "same", "count_include_pad": False}),
        Example(["f64[1, 2, 5, 5]"], {"kernel_size": [2, 3], "stride": 1, "padding": [1, 0, 1, 1]}),
    ],
)


def _avg_grad_geometry(ctx: NodeContext) -> PoolGeometry:
    gy = require_float(ctx, 0)
    size = per_dim(ctx, "size", 2)
    if gy.rank < 2:
        raise ctx.error(f"gy must be pooled [..., H_out, W_out], got {gy}")
    geo = pool_geometry(ctx, gy, size)
    if gy.shape[-2:] != geo.out:
        raise ctx.error(f"gy's last two axes must be the pooled size {list(geo.out)} of an input of size "
                        f"{list(size)}, got {gy}")
    return geo


def _avg_grad_kernel(ctx: NodeContext) -> Callable:
    gy_t, (gx_t,) = ctx.input_types[0], ctx.output_types
    geo, acc = _avg_grad_geometry(ctx), compute_dtype(gy_t)
    div = _divisor(geo, ctx.attrs["count_include_pad"], acc)

    def kernel(gy: np.ndarray) -> np.ndarray:
        share = np.asarray(gy, acc) / div
        return as_out(geo.scatter(lambda i, j: share, gy.shape[:-2], acc), gx_t)
    return kernel


AVG_POOL2D_GRAD = OpSchema(
    "avg_pool2d_grad_internal",
    inputs=("gy",),
    attrs={**_AVG_ATTRS, "size": AttrSpec("ints", doc="the input's [H, W]")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(ctx.input_types[0].shape[:-2]
                                                           + _avg_grad_geometry(ctx).size)],
    kernels={"cpu": _avg_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, gx, ggx: ops.avg_pool2d(
        ggx, count_include_pad=ctx.attrs["count_include_pad"], **_avg_grad_geometry(ctx).attrs())),
    doc="gy divided by each window's divisor and spread over the window: avg_pool2d's gradient.",
    examples=[Example(["f32[2, 3, 3, 2]"], {"kernel_size": 2, "size": [6, 4]}),
              Example(["f64[2, 4, 5]"], {"kernel_size": 3, "stride": [2, 1], "padding": 1, "size": [7, 5],
                                         "count_include_pad": False})],
)


# -- adaptive_avg_pool2d ------------------------------------------------------------------------------
def bins(n: int, m: int, dtype: np.dtype) -> np.ndarray:
    """The ``[m, n]`` matrix averaging bin ``i`` over ``floor(i n / m) .. ceil((i + 1) n / m) - 1``."""
    a = np.zeros((m, n), dtype)
    for i in range(m):
        start, stop = (i * n) // m, -(-((i + 1) * n) // m)
        a[i, start:stop] = 1.0 / (stop - start)
    return a


def _adaptive_sizes(ctx: NodeContext, x: TensorType) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if x.rank < 2:
        raise ctx.error(f"x must have two trailing axes to pool over ([..., H, W]), got {x}")
    out = per_dim(ctx, "output_size", 2)
    if 0 in x.shape[-2:]:
        raise ctx.error(f"x {x} has no positions to average along its last two axes; every bin needs at least one")
    return tuple(x.shape[-2:]), out


def _adaptive_kernel(ctx: NodeContext) -> Callable:
    x_t, (y_t,) = ctx.input_types[0], ctx.output_types
    (h, w), (oh, ow) = _adaptive_sizes(ctx, x_t)
    acc = compute_dtype(x_t)
    ah, awt = bins(h, oh, acc), bins(w, ow, acc).T

    def kernel(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, acc)
        y = np.matmul(np.matmul(ah, x), awt)
        if np.isnan(y).any():  # rare: the products' zero weights met an inf or NaN outside its bin (0 * inf)
            y = _bin_means(_bin_means(x, h, oh, -2), w, ow, -1)
        return as_out(y, y_t)
    return kernel


def _bin_ranges(n: int, m: int) -> list[tuple[int, int]]:
    return [((i * n) // m, -(-((i + 1) * n) // m)) for i in range(m)]


def _bin_means(a: np.ndarray, n: int, m: int, axis: int) -> np.ndarray:
    """The means of ``a`` over the ``m`` bins of its axis ``axis`` (of size ``n``), read from each bin only: a
    non-finite value reaches its own bins, as in torch, not every bin through a zero weight."""
    return np.stack([a[(Ellipsis, slice(start, stop)) + (slice(None),) * (-1 - axis)].mean(axis=axis)
                     for start, stop in _bin_ranges(n, m)], axis=axis)


def _bin_spread(a: np.ndarray, n: int, m: int, axis: int) -> np.ndarray:
    """The adjoint of ``_bin_means``: each bin's value divided by its size, added over the bin's positions."""
    shape = list(a.shape)
    shape[axis] = n
    out = np.zeros(shape, a.dtype)
    tail = (slice(None),) * (-1 - axis)
    for i, (start, stop) in enumerate(_bin_ranges(n, m)):
        out[(Ellipsis, slice(start, stop)) + tail] += a[(Ellipsis, slice(i, i + 1)) + tail] / (stop - start)
    return out


ADAPTIVE_AVG_POOL2D = OpSchema(
    "adaptive_avg_pool2d",
    inputs=("x",),
    attrs={"output_size": AttrSpec("ints", 1, "[oh, ow] (one int: square); [1, 1] is global average pooling")},
    shape_infer=lambda ctx: [require_float(ctx, 0).with_shape(
        ctx.input_types[0].shape[:-2] + _adaptive_sizes(ctx, ctx.input_types[0])[1])],
    kernels={"cpu": _adaptive_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.adaptive_avg_pool2d_grad_internal(
        gy, size=_adaptive_sizes(ctx, ctx.input_types[0])[0])),
    doc="Average of the last two axes over output_size bins (torch.nn.functional.adaptive_avg_pool2d); "
        "output_size 1 is global average pooling.",
    examples=[Example(["f32[2, 3, 5, 4]"]), Example(["f64[2, 7, 5]"], {"output_size": [3, 2]})],
)


def _adaptive_grad_sizes(ctx: NodeContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    gy = require_float(ctx, 0)
    if gy.rank < 2:
        raise ctx.error(f"gy must be [..., oh, ow], got {gy}")
    return per_dim(ctx, "size", 2), tuple(gy.shape[-2:])


def _adaptive_grad_kernel(ctx: NodeContext) -> Callable:
    gy_t, (gx_t,) = ctx.input_types[0], ctx.output_types
    (h, w), (oh, ow) = _adaptive_grad_sizes(ctx)
    acc = compute_dtype(gy_t)
    aht, aw = bins(h, oh, acc).T, bins(w, ow, acc)

    def kernel(gy: np.ndarray) -> np.ndarray:
        gy = np.asarray(gy, acc)
        gx = np.matmul(np.matmul(aht, gy), aw)
        if np.isnan(gx).any():  # as in the forward: an inf or NaN must reach its own bins only
            gx = _bin_spread(_bin_spread(gy, h, oh, -2), w, ow, -1)
        return as_out(gx, gx_t)
    return kernel


ADAPTIVE_AVG_POOL2D_GRAD = OpSchema(
    "adaptive_avg_pool2d_grad_internal",
    inputs=("gy",),
    attrs={"size": AttrSpec("ints", doc="the input's [H, W]")},
    shape_infer=lambda ctx: [require_float(ctx, 0).with_shape(
        ctx.input_types[0].shape[:-2] + _adaptive_grad_sizes(ctx)[0])],
    kernels={"cpu": _adaptive_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, gx, ggx: ops.adaptive_avg_pool2d(
        ggx, output_size=_adaptive_grad_sizes(ctx)[1])),
    doc="gy spread back over each bin (divided by the bin's size): adaptive_avg_pool2d's gradient.",
    examples=[Example(["f32[2, 3, 1, 1]"], {"size": [5, 4]}), Example(["f64[2, 3, 2]"], {"size": [7, 5]})],
)

# avg_pool2d_grad_like_internal(gy, x) = avg_pool2d_grad_internal(gy; size=x's [H, W], pads resolved), x read for
#   its shape only (compiled or exported: that op, the DecomposeFn); second order: avg_pool2d(ggx)
def _avg_like_attrs(ctx: NodeContext) -> dict:
    gy, x = ctx.input_types
    geo = pool_geometry(ctx, x)
    if gy.shape != x.shape[:-2] + geo.out or gy.dtype is not x.dtype:
        raise ctx.error(f"gy must be x {x} pooled, {x.dtype.name}{list(x.shape[:-2] + geo.out)}, got {gy}")
    return {**geo.attrs(), "size": geo.size, "count_include_pad": ctx.attrs["count_include_pad"]}


def _avg_like_kernel(ctx: NodeContext) -> Callable:
    attrs = AVG_POOL2D_GRAD.normalize_attrs(_avg_like_attrs(ctx))
    inner = _avg_grad_kernel(NodeContext(AVG_POOL2D_GRAD, ctx.input_types[:1], attrs, ctx.output_types))
    return lambda gy, x: inner(gy)


AVG_POOL2D_GRAD_LIKE = OpSchema(
    "avg_pool2d_grad_like_internal",
    inputs=("gy", "x"),
    attrs=_AVG_ATTRS,
    shape_infer=lambda ctx: (_avg_like_attrs(ctx), [ctx.input_types[1]])[1],
    kernels={"cpu": _avg_like_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, x, gx, ggx: [ops.avg_pool2d(ggx, **ctx.attrs), None]),
    decomposition=lambda ctx: ctx.decomposition_graph(
        lambda gy, x: ops.avg_pool2d_grad_internal(gy, **_avg_like_attrs(ctx))),
    nondiff_inputs=(1,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="avg_pool2d's gradient at x's size (x read for its shape only): gy spread over each window.",
    examples=[Example(["f32[2, 3, 3, 2]", "f32[2, 3, 6, 4]"], {"kernel_size": 2}),
              Example(["f32[2, 4, 5]", "f32[2, 7, 5]"], {"kernel_size": 3, "stride": [2, 1], "padding": "same",
                                                       "count_include_pad": False})],
)


SCHEMAS = [MAX_POOL2D, MAX_POOL2D_GRAD, MAX_POOL2D_SELECT, AVG_POOL2D, AVG_POOL2D_GRAD, AVG_POOL2D_GRAD_LIKE,
           ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_GRAD]
