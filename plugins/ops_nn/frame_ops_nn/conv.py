"""conv2d, conv_transpose1d and conv_transpose2d, and the op their weight gradients share.

``conv2d(x[B, C_in, H, W], w[C_out, C_in / groups, kh, kw]; stride, padding,
dilation, groups) -> [B, C_out, H_out, W_out]`` is a cross-correlation (no
kernel flip, as torch.nn.functional.conv2d without bias). ``padding`` is
``"valid"``, ``"same"`` (output ``ceil(size / stride)``, the extra position
after, as TensorFlow), one int (every side), ``[ph, pw]`` (both sides of each
axis) or ``[top, bottom, left, right]``. Output size per axis:
``(size + before + after - extent) // stride + 1`` with ``extent = dilation *
(k - 1) + 1``.

``conv_transpose2d(x[B, C_in, H, W], w[C_in, C_out / groups, kh, kw]; stride,
padding, output_padding, dilation, groups)`` is the adjoint of conv2d in x
(torch's layout and output size ``(H - 1) stride - before - after + extent +
output_padding``, ``0 <= output_padding < max(stride, dilation)`` as torch's: an output_padding of at least
the stride makes room for windows past x's last ones, which read zeros); conv_transpose1d is the same in one
spatial axis.

The three 2-D ops close under differentiation, as conv1d's do (JAX's
``_conv_general_dilated_transpose_lhs/rhs``): conv2d's gradients are
``conv_transpose2d(gy, w)`` and ``conv2d_grad_weight_internal(x, gy)``; all three
are bilinear, and each one's gradient is made of the other two.
conv_transpose1d's are frame-ops-sequence's ``conv1d`` and
``conv1d_grad_weight_internal``.

Kernels are im2col over chunks of the batch (about 2,048 output positions each), with one 2-D matrix
product per group and chunk (numpy's stacked matmul is far slower on OpenBLAS): the forward and the
weight gradient copy the chunk's ``kh * kw`` taps into columns ``[C_in/groups * kh * kw, nb * oh * ow]``.
Stride-1 convolutions with short output rows (at most 16) and at most 32 output channels per group lay
the chunk out as a padded grid ``[C, nb * hp * wp]`` instead, where every tap is the grid shifted by
``i d_h wp + j d_w``: one long contiguous copy per tap, at the price of computing (and dropping) the
padding positions. The stride-1 input gradient multiplies first on that grid and adds each tap back as
one shifted contiguous slice; strided ones add back strided taps (col2im). The forward takes one sample per
product where that is faster (``_forward_channels_last`` for one group and at least 16 input channels,
``_forward_by_sample`` from 256 outputs per sample), its columns in buffers reused over the batch and the
product written straight into y. float16/bfloat16 compute in
float32 and round once. Results agree with a float64 computation to a few roundings per sum; they are not
bitwise those of the single whole-batch product used before (BLAS sums each chunk in its own order), and
tests/test_conv_paths.py bounds the float32 difference to ``4 sqrt(n)`` roundings of an ``n``-term sum (the
channels-last columns also sum over ``(i, j, c)`` rather than ``(c, i, j)``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, Record, TensorType, ops

from ._common import as_out, compute_dtype, per_dim, same_float

_MODES = ("valid", "same")


class Geometry(Record):
    """One convolution, in conv terms: x[B, c_in, *size] (*) w[c_out, c_in/groups, *kernel] -> [B, c_out, *out]."""

    __match_args__ = ("batch", "c_in", "c_out", "groups", "size", "kernel", "stride", "dilation", "before", "after",
                      "out")
    batch: int
    c_in: int
    c_out: int
    groups: int
    size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    before: tuple[int, ...]
    after: tuple[int, ...]
    out: tuple[int, ...]

    def __init__(
        self, batch: int, c_in: int, c_out: int, groups: int, size: tuple[int, ...], kernel: tuple[int, ...],
        stride: tuple[int, ...], dilation: tuple[int, ...], before: tuple[int, ...], after: tuple[int, ...],
        out: tuple[int, ...]
    ) -> None:
        self._store(batch=batch, c_in=c_in, c_out=c_out, groups=groups, size=size, kernel=kernel, stride=stride,
                    dilation=dilation, before=before, after=after, out=out)

    @property
    def extent(self) -> tuple[int, ...]:
        return tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel))

    @property
    def padding(self) -> tuple[int, ...]:
        """Explicit padding: ``[left, right]`` in 1-D, ``[top, bottom, left, right]`` in 2-D."""
        return tuple(p for pair in zip(self.before, self.after) for p in pair)

    @property
    def output_padding(self) -> tuple[int, ...]:
        """What a transposed convolution adds to reach ``size`` again (the positions no window reaches)."""
        return tuple((n + b + a - e) % s for n, b, a, e, s in zip(self.size, self.before, self.after, self.extent,
                                                                  self.stride))

    def attrs(self) -> dict:
        """Attributes shared by the ops of a gradient (padding resolved to sizes)."""
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}

    @property
    def padded_size(self) -> tuple[int, ...]:
        return tuple(n + b + a for n, b, a in zip(self.size, self.before, self.after))

    def as_2d(self) -> Geometry:
        """The same convolution with a unit height axis in front, for 1-D inputs (the kernels are 2-D)."""
        if len(self.size) == 2:
            return self
        return self.replace(size=(1, *self.size), kernel=(1, *self.kernel), stride=(1, *self.stride),
                            dilation=(1, *self.dilation), before=(0, *self.before), after=(0, *self.after),
                            out=(1, *self.out))


def resolve_padding(ctx: NodeContext, nd: int, size: tuple[int, ...], extent: tuple[int, ...],
                    stride: tuple[int, ...], modes: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(before, after)`` per spatial axis for the node's ``padding`` attribute."""
    padding = ctx.attrs["padding"]
    if isinstance(padding, str):
        if modes and padding == "valid":
            return (0,) * nd, (0,) * nd
        if modes and padding == "same":
            total = [max((-(-n // s) - 1) * s + e - n, 0) for n, s, e in zip(size, stride, extent)]
            return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
        allowed = "'valid', 'same', " if modes else ""
        raise ctx.error(f"padding {padding!r} is not a padding; use {allowed}one int (every side), "
                        f"{nd} ints (both sides of each axis) or {2 * nd} ints (before and after each axis)")
    if min(padding, default=0) < 0:
        raise ctx.error(f"padding {list(padding)} must be >= 0 everywhere")
    if len(padding) == 1:
        return padding * nd, padding * nd
    if len(padding) == nd:
        return tuple(padding), tuple(padding)
    if len(padding) == 2 * nd:
        return tuple(padding[0::2]), tuple(padding[1::2])
    raise ctx.error(f"padding {list(padding)} must be one int, {nd} ints (both sides of each axis) or {2 * nd} ints "
                    f"({'[top, bottom, left, right]' if nd == 2 else '[left, right]'})")


def _out_sizes(ctx: NodeContext, size, before, after, extent, stride) -> tuple[int, ...]:
    out = []
    for axis, (n, b, a, e, s) in enumerate(zip(size, before, after, extent, stride)):
        if n + b + a < e:
            raise ctx.error(f"the kernel covers {e} positions along spatial axis {axis}, more than the padded "
                            f"input's {n + b + a} (size {n} + padding {b} + {a}); use a smaller kernel or dilation, "
                            "or more padding")
        out.append((n + b + a - e) // s + 1)
    return tuple(out)


def conv_geometry(ctx: NodeContext, nd: int, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                  modes: bool = True) -> Geometry:
    """Check a convolution of ``x_shape`` with ``w_shape`` (conv layout) and the node's attributes."""
    stride, dilation = per_dim(ctx, "stride", nd), per_dim(ctx, "dilation", nd)
    groups = ctx.attrs["groups"]
    if groups < 1:
        raise ctx.error(f"groups must be >= 1, got {groups}")
    axes = "H, W" if nd == 2 else "L"
    if len(x_shape) != nd + 2:
        raise ctx.error(f"x must be [batch, C_in, {axes}], got shape {list(x_shape)}; add a batch axis of size 1 "
                        "with reshape")
    if len(w_shape) != nd + 2:
        raise ctx.error(f"w must be [C_out, C_in / groups, {'kh, kw' if nd == 2 else 'K'}], got shape "
                        f"{list(w_shape)}")
    batch, c_in, size = x_shape[0], x_shape[1], tuple(x_shape[2:])
    c_out, c_per, kernel = w_shape[0], w_shape[1], tuple(w_shape[2:])
    if c_in % groups or c_out % groups:
        raise ctx.error(f"groups = {groups} must divide both C_in = {c_in} and C_out = {c_out}")
    if c_per != c_in // groups:
        raise ctx.error(f"w {list(w_shape)} must have C_in / groups = {c_in} / {groups} = {c_in // groups} input "
                        f"channels (axis 1), got {c_per}")
    if min(kernel) < 1:
        raise ctx.error(f"kernel sizes must be >= 1, got {list(kernel)}")
    extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
    before, after = resolve_padding(ctx, nd, size, extent, stride, modes)
    out = _out_sizes(ctx, size, before, after, extent, stride)
    return Geometry(batch, c_in, c_out, groups, size, kernel, stride, dilation, before, after, out)


def transpose_geometry(ctx: NodeContext, nd: int, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> Geometry:
    """The convolution whose input gradient a transposed convolution of ``x_shape`` with ``w_shape`` is."""
    stride, dilation = per_dim(ctx, "stride", nd), per_dim(ctx, "dilation", nd)
    out_pad = per_dim(ctx, "output_padding", nd, minimum=0)
    groups = ctx.attrs["groups"]
    if groups < 1:
        raise ctx.error(f"groups must be >= 1, got {groups}")
    if len(x_shape) != nd + 2 or len(w_shape) != nd + 2:
        raise ctx.error(f"x must be [batch, C_in, {'H, W' if nd == 2 else 'L'}] and w [C_in, C_out / groups, "
                        f"{'kh, kw' if nd == 2 else 'K'}], got shapes {list(x_shape)} and {list(w_shape)}")
    if x_shape[1] != w_shape[0]:
        raise ctx.error(f"w {list(w_shape)} must have x's C_in = {x_shape[1]} rows (axis 0), got {w_shape[0]}")
    bad = [i for i, (p, s, d) in enumerate(zip(out_pad, stride, dilation)) if p >= max(s, d)]
    if bad:
        raise ctx.error(f"output_padding {list(out_pad)} must be below the stride or the dilation on every axis "
                        f"(as torch's), but axis {bad[0]} has output_padding {out_pad[bad[0]]} with stride "
                        f"{stride[bad[0]]} and dilation {dilation[bad[0]]}; use an output_padding below "
                        f"{max(stride[bad[0]], dilation[bad[0]])} there, or pad the output with pad")
    kernel = tuple(w_shape[2:])
    if min(kernel) < 1:
        raise ctx.error(f"kernel sizes must be >= 1, got {list(kernel)}")
    extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
    before, after = resolve_padding(ctx, nd, (0,) * nd, extent, stride, modes=False)
    size = tuple((n - 1) * s + e - b - a + p for n, s, e, b, a, p in zip(x_shape[2:], stride, extent, before, after,
                                                                         out_pad))
    if min(size) < 1:
        raise ctx.error(f"the output would have spatial size {list(size)} ((size - 1) * stride + extent - padding + "
                        f"output_padding per axis for input {list(x_shape[2:])}); use less padding")
    conv_x = (x_shape[0], w_shape[1] * groups, *size)
    geo = conv_geometry(ctx, nd, conv_x, tuple(w_shape), modes=False)
    # an output_padding of at least the stride (allowed below the dilation) makes room for windows past x's last
    # ones: out = size(x) + output_padding // stride, and those windows read zeros (see unread_windows)
    return geo


def unread_windows(geo: Geometry, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per spatial axis, the windows of a transposed convolution's matching conv past x's (``output_padding //
    stride``, whatever x's size): x is read as if it had that many zeros after each spatial axis."""
    return tuple(o - n for o, n in zip(geo.out, x_shape[2:]))


# -- the three numpy kernels (2-D; 1-D inputs get a unit height axis) ------------------------------------
# Every kernel walks the batch in chunks of about _COLUMNS output positions: each chunk's im2col matrix (or its
# col2im product) stays small enough for the cache, and every product is one 2-D GEMM per group (numpy's stacked
# matmul can be far slower than separate 2-D calls on OpenBLAS).
_COLUMNS = 2048


def _chunks(geo: Geometry) -> list[tuple[int, int]]:
    """``(first, stop)`` batch ranges of about ``_COLUMNS`` output positions each (at least one sample)."""
    per = max(1, _COLUMNS // (geo.out[0] * geo.out[1]))
    return [(b, min(b + per, geo.batch)) for b in range(0, geo.batch, per)]


def _padded(x: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """x in ``acc`` with zeros around its spatial axes (x itself when there is no padding and no cast)."""
    (bh, bw), (ah, aw) = geo.before, geo.after
    if not (bh or bw or ah or aw):
        return np.asarray(x, acc)
    h, w = x.shape[2:]
    xp = np.empty(x.shape[:2] + (h + bh + ah, w + bw + aw), acc)
    xp[:, :, :bh] = 0  # the borders only: writing zeros everywhere first would pass over the whole array twice
    xp[:, :, bh + h:] = 0
    xp[:, :, bh:bh + h, :bw] = 0
    xp[:, :, bh:bh + h, bw + w:] = 0
    xp[:, :, bh:bh + h, bw:bw + w] = x
    return xp


def _windows(xp: np.ndarray, geo: Geometry) -> np.ndarray:
    """A read-only view ``[B, C, kh, kw, oh, ow]`` of the padded ``xp``: tap ``(i, j)`` of every window (no copy)."""
    (sh, sw), (dh, dw), (oh, ow) = geo.stride, geo.dilation, geo.out
    view = np.lib.stride_tricks.sliding_window_view(xp, geo.extent, axis=(2, 3))  # [B, C, H', W', eh, ew]
    view = view[:, :, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, ::dh, ::dw]
    return view.transpose(0, 1, 4, 5, 2, 3)


def _tap(xp: np.ndarray, geo: Geometry, i: int, j: int) -> np.ndarray:
    """Positions ``(i d_h + h s_h, j d_w + w s_w)`` of the padded ``xp`` for every output ``(h, w)``: one tap."""
    (sh, sw), (dh, dw), (oh, ow) = geo.stride, geo.dilation, geo.out
    return xp[..., i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]


def _columns(view: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """im2col of one batch chunk of ``_windows``: ``[groups, C_in/groups * kh * kw, nb * oh * ow]`` (one copy)."""
    nb, g = view.shape[0], geo.groups
    cg, (kh, kw), (oh, ow) = geo.c_in // g, geo.kernel, geo.out
    cols = np.empty((g, cg, kh, kw, nb, oh, ow), acc)
    np.copyto(cols, view.reshape(nb, g, cg, kh, kw, oh, ow).transpose(1, 2, 3, 4, 0, 5, 6))
    return cols.reshape(g, cg * kh * kw, nb * oh * ow)


def _rows(gy: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """One batch chunk of gy[nb, C_out, oh, ow] as ``[groups, C_out/groups, nb * oh * ow]`` (a view for one sample)."""
    nb, g, n = gy.shape[0], geo.groups, geo.out[0] * geo.out[1]
    rows = np.asarray(gy, acc).reshape(nb, g, geo.c_out // g, n).transpose(1, 2, 0, 3)
    return rows.reshape(g, geo.c_out // g, nb * n)


def _weights(w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    # [G, og, cg kh kw], sizes spelt out: with no output channels a -1 could stand for any size
    return np.asarray(w, acc).reshape(geo.groups, geo.c_out // geo.groups, w.shape[1] * w.shape[2] * w.shape[3])


def _on_grid(a: np.ndarray, geo: Geometry, acc: np.dtype, at: tuple[int, ...]) -> np.ndarray:
    """A batch chunk ``a[nb, C, h, w]`` written at offset ``at`` into zeros ``[C, nb * hp * wp]`` (the padded grid)."""
    nb, c, h, w = a.shape
    hp, wp = geo.padded_size
    grid = np.zeros((c, nb, hp, wp), acc)
    grid[:, :, at[0]:at[0] + h, at[1]:at[1] + w] = a.transpose(1, 0, 2, 3)
    return grid.reshape(c, nb * hp * wp)


def _grid_columns(grid: np.ndarray, geo: Geometry, acc: np.dtype, count: int) -> np.ndarray:
    """im2col on the padded grid (stride 1): tap ``(i, j)`` is the grid shifted by ``i d_h wp + j d_w``, one long
    contiguous copy per channel: ``[groups, C_in/groups * kh * kw, count]``."""
    (kh, kw), (dh, dw), wp = geo.kernel, geo.dilation, geo.padded_size[1]
    cols = np.empty((geo.c_in, kh, kw, count), acc)
    for i in range(kh):
        for j in range(kw):
            start = i * dh * wp + j * dw
            cols[:, i, j] = grid[:, start:start + count]
    return cols.reshape(geo.groups, -1, count)


def _grid_forward(x: np.ndarray, w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    g, og, (hp, wp), (oh, ow) = geo.groups, geo.c_out // geo.groups, geo.padded_size, geo.out
    wg, y = _weights(w, geo, acc), np.empty((geo.batch, geo.c_out, oh, ow), acc)
    for first, stop in _chunks(geo):
        nb = stop - first
        count = (nb - 1) * hp * wp + (oh - 1) * wp + ow
        cols = _grid_columns(_on_grid(x[first:stop], geo, acc, geo.before), geo, acc, count)
        part = np.empty((g, og, nb * hp * wp), acc)
        for k in range(g):
            np.matmul(wg[k], cols[k], out=part[k, :, :count])
        y[first:stop] = part.reshape(geo.c_out, nb, hp, wp)[:, :, :oh, :ow].transpose(1, 0, 2, 3)
    return y


def _grid_grad_weight(x: np.ndarray, gy: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    g, og, (hp, wp), (oh, ow) = geo.groups, geo.c_out // geo.groups, geo.padded_size, geo.out
    gw = np.zeros((g, og, (geo.c_in // g) * geo.kernel[0] * geo.kernel[1]), acc)
    part = np.empty(gw.shape[1:], acc)
    for first, stop in _chunks(geo):
        nb = stop - first
        count = (nb - 1) * hp * wp + (oh - 1) * wp + ow
        cols = _grid_columns(_on_grid(x[first:stop], geo, acc, geo.before), geo, acc, count)
        rows = _on_grid(gy[first:stop], geo, acc, (0, 0)).reshape(g, og, nb * hp * wp)
        for k in range(g):
            np.matmul(rows[k, :, :count], cols[k].T, out=part)
            gw[k] += part
    return gw.reshape(geo.c_out, geo.c_in // g, *geo.kernel)


def _on_short_rows(geo: Geometry) -> bool:
    """Stride 1, output rows of at most 16 positions and at most 32 output channels per group: there the grid's
    long copies beat the window view's short rows (conv(1 -> 16) on 8x8 images: 0.17 ms against 0.26 ms), while
    wider outputs make its padding columns cost more in the product than they save (64 -> 128 on 8x8: 4.4 ms
    against 3.6 ms)."""
    return geo.stride == (1, 1) and geo.out[1] <= 16 and geo.c_out // geo.groups <= 32


# The forward takes one sample per product from this many output positions on: its columns then stay in cache
# and the product writes straight into y, with no transposing copy of a chunk's result (batch 16, 3 -> 32 on
# 32x32: 1.40 ms against 1.72 in chunks of two samples; 32 -> 64 on 16x16: 4.34 against 4.86).
_SAMPLE_POSITIONS = 256


class _SampleColumns:
    """im2col of one sample at a time in buffers reused over the batch: ``of(a[C, H, W])`` writes the sample
    between zero borders ``[C, hp, wp]`` and copies its taps into ``[groups, C/groups * kh * kw, oh * ow]``."""

    def __init__(self, geo: Geometry, acc: np.dtype) -> None:
        (bh, bw), (h, w) = geo.before, geo.size
        self.padded = np.zeros((1, geo.c_in, *geo.padded_size), acc)
        self.inner = self.padded[0, :, bh:bh + h, bw:bw + w]
        self.view = _windows(self.padded, geo)[0]  # [C, kh, kw, oh, ow]
        self.cols = np.empty(self.view.shape, acc)
        self.shape = (geo.groups, geo.c_in // geo.groups * geo.kernel[0] * geo.kernel[1], geo.out[0] * geo.out[1])

    def of(self, a: np.ndarray) -> np.ndarray:
        self.inner[...] = a
        np.copyto(self.cols, self.view)
        return self.cols.reshape(self.shape)


def _forward_by_sample(x: np.ndarray, w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    wg, og, n = _weights(w, geo, acc), geo.c_out // geo.groups, geo.out[0] * geo.out[1]
    y4 = np.empty((geo.batch, geo.c_out, *geo.out), acc)
    y, columns = y4.reshape(geo.batch, geo.c_out, n), _SampleColumns(geo, acc)
    for b in range(geo.batch):
        cols = columns.of(x[b])
        for k in range(geo.groups):
            np.matmul(wg[k], cols[k], out=y[b, k * og:(k + 1) * og])
    return y4


def _channels_last(geo: Geometry) -> bool:
    """One group, no dilation along W, at least 16 input channels and 64 output positions per sample: there the
    channels-last columns win (batch 16, 32 -> 64 on 16x16: 4.07 ms against 4.98 in chunks; 64 -> 128 on
    8x8: 4.03 against 4.80). With fewer channels the rows of ``kw * C`` values are too short (3 -> 32 on
    32x32: 2.03 against 1.60 for the NCHW columns of one sample)."""
    return geo.groups == 1 and geo.dilation[1] == 1 and geo.c_in >= 16 and geo.out[0] * geo.out[1] >= 64


def _forward_channels_last(x: np.ndarray, w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """One sample at a time, laid out channels last ``[hp, wp, C]`` in a zero-bordered buffer: the ``kw`` taps
    of a kernel row are then one contiguous run of ``kw * C`` values, so the columns ``[oh, ow, kh, kw * C]``
    are ``kh`` copies of long runs (the NCHW windows copy runs of ``ow`` values), and the product ``w[C_out,
    (i, j, c)] @ columns^T`` writes the sample's ``y[C_out, oh * ow]`` directly. Each output sums its
    ``C * kh * kw`` terms in BLAS's order over ``(i, j, c)`` rather than ``(c, i, j)``: the last bits differ from
    the other paths (tests/test_conv_paths.py bounds them)."""
    (kh, kw), (sh, sw), (oh, ow), c = geo.kernel, geo.stride, geo.out, geo.c_in
    (bh, bw), (h, w_), (hp, wp) = geo.before, geo.size, geo.padded_size
    padded = np.zeros((hp, wp, c), acc)
    inner = padded[bh:bh + h, bw:bw + w_].transpose(2, 0, 1)  # [C, h, w]: where a sample goes
    row, col, item = padded.strides
    rows = [np.lib.stride_tricks.as_strided(padded[i * geo.dilation[0]:], (oh, ow, kw * c), (sh * row, sw * col, item),
                                            writeable=False) for i in range(kh)]
    cols = np.empty((oh, ow, kh, kw * c), acc)
    wm = np.ascontiguousarray(np.asarray(w, acc).transpose(0, 2, 3, 1)).reshape(geo.c_out, kh * kw * c)
    y = np.empty((geo.batch, geo.c_out, oh, ow), acc)
    flat = y.reshape(geo.batch, geo.c_out, oh * ow)
    for b in range(geo.batch):
        inner[...] = x[b]
        for i in range(kh):
            cols[:, :, i] = rows[i]
        np.matmul(wm, cols.reshape(oh * ow, kh * kw * c).T, out=flat[b])
    return y


def conv_forward(x: np.ndarray, w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """y = w @ cols per group and batch chunk, written into y's layout (directly for one sample)."""
    if _on_short_rows(geo):
        return _grid_forward(np.asarray(x), w, geo, acc)
    if _channels_last(geo):
        return _forward_channels_last(x, w, geo, acc)
    if geo.out[0] * geo.out[1] >= _SAMPLE_POSITIONS:
        return _forward_by_sample(x, w, geo, acc)
    view, wg, n = _windows(_padded(x, geo, acc), geo), _weights(w, geo, acc), geo.out[0] * geo.out[1]
    y4 = np.empty((geo.batch, geo.c_out, *geo.out), acc)  # returned as allocated: no copy to the output type
    y, og = y4.reshape(geo.batch, geo.c_out, n), geo.c_out // geo.groups
    for first, stop in _chunks(geo):
        cols = _columns(view[first:stop], geo, acc)
        if stop - first == 1:
            for k in range(geo.groups):
                np.matmul(wg[k], cols[k], out=y[first, k * og:(k + 1) * og])
            continue
        part = np.empty((geo.groups, og, (stop - first) * n), acc)
        for k in range(geo.groups):
            np.matmul(wg[k], cols[k], out=part[k])
        y[first:stop] = part.reshape(geo.c_out, stop - first, n).transpose(1, 0, 2)
    return y4


def conv_grad_weight(x: np.ndarray, gy: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """gw[o, c, i, j] = sum_{b, h, w} gy[b, o, h, w] x_pad[b, c, h s + i d, w s + j d]: per chunk and group,
    one product, summed over the chunks."""
    if _on_short_rows(geo):
        gw = _grid_grad_weight(np.asarray(x), np.asarray(gy), geo, acc)
        if not np.isnan(gw).any():
            return gw
        # the grid's dropped columns hold gy = 0 against x values no window reads: 0 * inf or a NaN there made a
        # NaN that torch does not have; the windows read only what the convolution reads
    view = _windows(_padded(x, geo, acc), geo)
    gw = np.zeros((geo.groups, geo.c_out // geo.groups, (geo.c_in // geo.groups) * geo.kernel[0] * geo.kernel[1]),
                  acc)
    part = np.empty(gw.shape[1:], acc)
    gy = np.asarray(gy, acc)
    for first, stop in _chunks(geo):
        cols, rows = _columns(view[first:stop], geo, acc), _rows(gy[first:stop], geo, acc)
        for k in range(geo.groups):
            np.matmul(rows[k], cols[k].T, out=part)
            gw[k] += part
    return gw.reshape(geo.c_out, geo.c_in // geo.groups, *geo.kernel)


def conv_grad_input(gy: np.ndarray, w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """The transposed convolution: per chunk and group, columns = w^T @ gy, each tap's column added back where it
    was read (col2im)."""
    if geo.stride != (1, 1) or not np.isfinite(w).all():
        # (on the grid, w^T @ gy also fills the dropped columns, where 0 * inf is a NaN torch does not have)
        return _grad_input_strided(gy, w, geo, acc)
    g, cg, og = geo.groups, geo.c_in // geo.groups, geo.c_out // geo.groups
    (kh, kw), (oh, ow), (dh, dw) = geo.kernel, geo.out, geo.dilation
    (bh, bw), (h, w_) = geo.before, geo.size
    hp, wp = h + bh + geo.after[0], w_ + bw + geo.after[1]
    wt = np.ascontiguousarray(_weights(w, geo, acc).transpose(0, 2, 1))  # [G, cg kh kw, og]
    gx = np.empty((geo.batch, geo.c_in, h, w_), acc)
    for first, stop in _chunks(geo):
        nb = stop - first
        count = (nb - 1) * hp * wp + (oh - 1) * wp + ow
        grid = np.zeros((g, og, nb, hp, wp), acc)
        grid[:, :, :, :oh, :ow] = np.asarray(gy[first:stop]).reshape(nb, g, og, oh, ow).transpose(1, 2, 0, 3, 4)
        grid = grid.reshape(g, og, nb * hp * wp)
        gxp = np.zeros((g, cg, nb * hp * wp), acc)
        cols = np.empty((cg, kh, kw, count), acc)
        for k in range(g):
            np.matmul(wt[k], grid[k, :, :count], out=cols.reshape(cg * kh * kw, count))
            for i in range(kh):
                for j in range(kw):
                    start = i * dh * wp + j * dw
                    gxp[k, :, start:start + count] += cols[:, i, j]
        gx[first:stop] = gxp.reshape(geo.c_in, nb, hp, wp)[:, :, bh:bh + h, bw:bw + w_].transpose(1, 0, 2, 3)
    return gx


def _grad_input_strided(gy: np.ndarray, w: np.ndarray, geo: Geometry, acc: np.dtype) -> np.ndarray:
    """conv_grad_input for strides above 1 (or a non-finite w): each tap's columns added back where it read."""
    g, cg = geo.groups, geo.c_in // geo.groups
    (kh, kw), (oh, ow) = geo.kernel, geo.out
    (bh, bw), (h, w_) = geo.before, geo.size
    wt = _weights(w, geo, acc).transpose(0, 2, 1)  # [G, cg kh kw, og]
    gy = np.asarray(gy, acc)
    gxp = np.zeros((geo.batch, g, cg, h + bh + geo.after[0], w_ + bw + geo.after[1]), acc)
    for first, stop in _chunks(geo):
        nb, rows = stop - first, _rows(gy[first:stop], geo, acc)
        cols = np.empty((g, cg * kh * kw, nb * oh * ow), acc)
        for k in range(g):
            np.matmul(wt[k], rows[k], out=cols[k])
        cols = cols.reshape(g, cg, kh, kw, nb, oh, ow).transpose(4, 0, 1, 2, 3, 5, 6)  # [nb, G, cg, kh, kw, ...]
        target = gxp[first:stop]
        for i in range(kh):
            for j in range(kw):
                _tap(target, geo, i, j)[...] += cols[:, :, :, i, j]
    return gxp[..., bh:bh + h, bw:bw + w_].reshape(geo.batch, geo.c_in, h, w_)


def _lift(a: np.ndarray, nd: int) -> np.ndarray:
    return a if nd == 2 else a[:, :, None, :]


def _drop(a: np.ndarray, nd: int) -> np.ndarray:
    return a if nd == 2 else a[:, :, 0, :]


# -- attributes --------------------------------------------------------------------------------------
def _conv_attrs(nd: int) -> dict[str, AttrSpec]:
    sides = "[top, bottom, left, right]" if nd == 2 else "[left, right]"
    return {
        "stride": AttrSpec("ints", 1, "step between windows: one int or one per spatial axis"),
        "padding": AttrSpec("str|ints", "valid", f"'valid', 'same', one int (every side), {nd} ints (both sides "
                                                 f"of each axis) or {sides}"),
        "dilation": AttrSpec("ints", 1, "spacing between the kernel's taps: one int or one per spatial axis"),
        "groups": AttrSpec("int", 1, "channel groups: output group g sees input group g only"),
    }


def _transpose_attrs(nd: int) -> dict[str, AttrSpec]:
    sides = "[top, bottom, left, right]" if nd == 2 else "[left, right]"
    return {
        **_conv_attrs(nd),
        "padding": AttrSpec("ints", 0, f"what the matching conv pads: one int, {nd} ints or {sides}; the output "
                                       "is that much smaller"),
        "output_padding": AttrSpec("ints", 0, "positions added after each spatial axis (below the stride or the "
                                              "dilation, as torch's), to reach "
                                              "the size of a strided conv's input"),
    }


# -- conv2d ------------------------------------------------------------------------------------------
def _conv2d_geometry(ctx: NodeContext) -> Geometry:
    x, w = same_float(ctx)
    return conv_geometry(ctx, 2, x.shape, w.shape)


def _conv2d_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (y_t,) = _conv2d_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    return lambda x, w: as_out(conv_forward(x, w, geo, acc), y_t)


def _as_given(ctx: NodeContext) -> dict:
    """The node's stride, padding, dilation and groups as written ('same' stays 'same', resolved at each size)."""
    return {k: ctx.attrs[k] for k in ("stride", "padding", "dilation", "groups")}


def _conv2d_gradient(ctx: NodeContext):
    attrs = _as_given(ctx)
    # gx = conv_transpose2d(gy, w) back to x's size, gw = conv2d_grad_weight_internal(x, gy), in their forms that
    # read x's and w's shapes (pads for 'same', output_padding, the kernel) from the operands
    return ctx.grad_graph(lambda x, w, y, gy: [
        ops.conv2d_grad_input_like_internal(gy, w, x, **attrs),
        ops.conv2d_grad_weight_like_internal(x, gy, w, **attrs)])


CONV2D = OpSchema(
    "conv2d",
    inputs=("x", "w"),
    attrs=_conv_attrs(2),
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(
        (ctx.input_types[0].shape[0], _conv2d_geometry(ctx).c_out, *_conv2d_geometry(ctx).out))],
    kernels={"cpu": _conv2d_kernel},
    gradient=_conv2d_gradient,
    traits=("any_shape_gradient",),
    doc="2-D cross-correlation of x[B, C_in, H, W] with w[C_out, C_in/groups, kh, kw] (torch.nn.functional.conv2d "
        "without bias): stride, dilation, groups, and padding 'valid', 'same' or sizes.",
    examples=[
        Example(["f32[2, 3, 6, 5]", "f32[4, 3, 3, 3]"]),
        Example(["f32[2, 4, 7, 6]", "f32[6, 2, 3, 2]"], {"stride": [2, 1], "padding": "same", "groups": 2}),
        Example(["f64[1, 2, 7, 7]", "f64[3, 2, 2, 3]"], {"dilation": [2, 1], "padding": [1, 0, 2, 1], "stride": 2}),
    ],
)


# -- conv_transpose2d --------------------------------------------------------------------------------
def _transpose2d_geometry(ctx: NodeContext) -> Geometry:
    x, w = same_float(ctx)
    return transpose_geometry(ctx, 2, x.shape, w.shape)


def _transpose_kernel(geometry: Callable[[NodeContext], Geometry], nd: int) -> Callable:
    def build(ctx: NodeContext) -> Callable:
        geo, acc, (y_t,) = geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
        geo2, extra = geo.as_2d(), unread_windows(geo, ctx.input_types[0].shape)
        if any(extra):
            pads = ((0, 0), (0, 0), *((0, e) for e in extra))
            return lambda x, w: as_out(_drop(conv_grad_input(_lift(np.pad(x, pads), nd), _lift(w, nd), geo2, acc), nd),
                                       y_t)
        return lambda x, w: as_out(_drop(conv_grad_input(_lift(x, nd), _lift(w, nd), geo2, acc), nd), y_t)
    return build


def _with_unread_windows(geo: Geometry, x_shape: tuple[int, ...]) -> tuple[Callable, Callable]:
    """``(pad_x, crop_gx)``: x with zeros for the windows past it (unread_windows), and the conv's input gradient
    without them; identities when there are none. Both read no size but the constant number of windows, so the
    gradient stays right at other sizes."""
    extra = unread_windows(geo, x_shape)
    if not any(extra):
        return (lambda x: x), (lambda gx: gx)
    axes = [2 + i for i, e in enumerate(extra) if e]
    after = [e for e in extra if e]
    return (lambda x: ops.pad(x, before=[0] * len(axes), after=after, axes=axes),
            lambda gx: ops.slice(gx, starts=[0] * len(axes), stops=[-e for e in after], axes=axes))


def _transpose2d_gradient(ctx: NodeContext):
    geo = _transpose2d_geometry(ctx)
    attrs = geo.attrs()
    pad_x, crop_gx = _with_unread_windows(geo, ctx.input_types[0].shape)
    # x is a conv output's cotangent and y a conv input's: gx = conv2d(gy, w), gw = grad_weight(gy, x), the kernel
    # read from w (w is that conv's weight), so the rules built on this gradient (its own gradient, forward mode)
    # hold no traced size either
    return ctx.grad_graph(lambda x, w, y, gy: [
        crop_gx(ops.conv2d(gy, w, **attrs)),
        ops.conv2d_grad_weight_like_internal(gy, pad_x(x), w, **attrs)])


def _transposed_shape(geometry: Callable[[NodeContext], Geometry]) -> Callable:
    def infer(ctx: NodeContext) -> list[TensorType]:
        geo = geometry(ctx)
        return [ctx.input_types[0].with_shape((geo.batch, geo.c_in, *geo.size))]
    return infer


CONV_TRANSPOSE2D = OpSchema(
    "conv_transpose2d",
    inputs=("x", "w"),
    attrs=_transpose_attrs(2),
    shape_infer=_transposed_shape(_transpose2d_geometry),
    kernels={"cpu": _transpose_kernel(_transpose2d_geometry, 2)},
    gradient=_transpose2d_gradient,
    traits=("any_shape_gradient",),
    doc="Transposed 2-D convolution of x[B, C_in, H, W] with w[C_in, C_out/groups, kh, kw] "
        "(torch.nn.functional.conv_transpose2d without bias): the adjoint of conv2d in its input.",
    examples=[
        Example(["f32[2, 4, 4, 3]", "f32[4, 3, 3, 3]"]),
        Example(["f32[2, 6, 4, 6]", "f32[6, 2, 3, 2]"], {"stride": [2, 1], "padding": [1, 1, 0, 1], "groups": 2,
                                                        "output_padding": [1, 0]}),
        Example(["f64[1, 3, 3, 3]", "f64[3, 2, 2, 3]"], {"dilation": [2, 1], "padding": 1, "stride": 2}),
        Example(["f64[1, 2, 3, 2]", "f64[2, 2, 2, 2]"], {"dilation": [3, 2], "output_padding": [2, 1]}),
    ],
)


# -- conv2d_grad_weight_internal(x, gy) = gw ---------------------------------------------------------
#   second order (bilinear in x, gy): g_x = conv_transpose2d(gy, ggw), g_gy = conv2d(x, ggw)
def _grad_weight_geometry(ctx: NodeContext) -> Geometry:
    x, gy = same_float(ctx)
    if x.rank != 4 or gy.rank != 4:
        raise ctx.error(f"x must be [batch, C_in, H, W] and gy [batch, C_out, H_out, W_out], got {x} and {gy}")
    groups = ctx.attrs["groups"]
    kernel = per_dim(ctx, "kernel_size", 2)
    geo = conv_geometry(ctx, 2, x.shape, (gy.shape[1], x.shape[1] // max(groups, 1), *kernel))
    if gy.shape != (geo.batch, geo.c_out, *geo.out):
        raise ctx.error(f"gy must be conv2d's output shape {[geo.batch, geo.c_out, *geo.out]}, got {gy}")
    return geo


def _grad_weight_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (gw_t,) = _grad_weight_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    return lambda x, gy: as_out(conv_grad_weight(x, gy, geo, acc), gw_t)


def _grad_weight_gradient(ctx: NodeContext):
    geo = _grad_weight_geometry(ctx)
    attrs = geo.attrs()
    return ctx.grad_graph(lambda x, gy, gw, ggw: [
        ops.conv_transpose2d(gy, ggw, output_padding=geo.output_padding, **attrs), ops.conv2d(x, ggw, **attrs)])


CONV2D_GRAD_WEIGHT = OpSchema(
    "conv2d_grad_weight_internal",
    inputs=("x", "gy"),
    attrs={**_conv_attrs(2), "kernel_size": AttrSpec("ints", doc="the kernel size [kh, kw]")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(
        (ctx.input_types[1].shape[1], _grad_weight_geometry(ctx).c_in // ctx.attrs["groups"],
         *_grad_weight_geometry(ctx).kernel))],
    kernels={"cpu": _grad_weight_kernel},
    gradient=_grad_weight_gradient,
    doc="The correlation of x with gy over batch and positions: conv2d's gradient for w.",
    examples=[
        Example(["f32[2, 3, 6, 5]", "f32[2, 4, 4, 3]"], {"kernel_size": [3, 3], "stride": [1, 1],
                                                        "padding": [0, 0, 0, 0], "dilation": [1, 1]}),
        Example(["f32[2, 4, 7, 6]", "f32[2, 6, 4, 6]"], {"kernel_size": [3, 2], "stride": [2, 1],
                                                        "padding": [1, 1, 0, 1], "groups": 2, "dilation": [1, 1]}),
        Example(["f64[1, 2, 7, 7]", "f64[1, 3, 3, 4]"], {"kernel_size": [2, 3], "dilation": [2, 1],
                                                        "padding": [1, 0, 2, 1], "stride": [2, 2]}),
    ],
)


# -- conv2d_grad_input_like_internal(gy, w, x) = conv2d's gradient for x ----------------------------------
#   x is read for its shape only: the pads ('same') and output_padding a strided conv dropped come from it, so a
#   training graph re-specialised at other sizes stays right. Compiled or exported, it is conv_transpose2d (the
#   DecomposeFn); second order: g_gy = conv2d(ggx, w), g_w = conv2d_grad_weight_internal(ggx, gy)
def _grad_input_geometry(ctx: NodeContext) -> Geometry:
    gy, w, x = ctx.input_types
    same_float(NodeContext(ctx.schema, (gy, w), ctx.attrs))
    if x.rank != 4 or gy.rank != 4:
        raise ctx.error(f"gy must be [batch, C_out, H_out, W_out] and x [batch, C_in, H, W], got {gy} and {x}")
    geo = conv_geometry(ctx, 2, x.shape, w.shape)
    if gy.shape != (geo.batch, geo.c_out, *geo.out):
        raise ctx.error(f"gy must be conv2d's output shape {[geo.batch, geo.c_out, *geo.out]} for x {x}, got {gy}")
    return geo


def _grad_input_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (gx_t,) = _grad_input_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    return lambda gy, w, x: as_out(conv_grad_input(gy, w, geo, acc), gx_t)


def _grad_input_gradient(ctx: NodeContext):
    attrs = _as_given(ctx)
    return ctx.grad_graph(lambda gy, w, x, gx, ggx: [
        ops.conv2d(ggx, w, **attrs), ops.conv2d_grad_weight_like_internal(ggx, gy, w, **attrs), None])


def _grad_input_decomposition(ctx: NodeContext):
    geo = _grad_input_geometry(ctx)
    return ctx.decomposition_graph(lambda gy, w, x: ops.conv_transpose2d(
        gy, w, output_padding=geo.output_padding, **geo.attrs()))


CONV2D_GRAD_INPUT_LIKE = OpSchema(
    "conv2d_grad_input_like_internal",
    inputs=("gy", "w", "x"),
    attrs=_conv_attrs(2),
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(
        (ctx.input_types[2].shape[0], _grad_input_geometry(ctx).c_in, *ctx.input_types[2].shape[2:]))],
    kernels={"cpu": _grad_input_kernel},
    gradient=_grad_input_gradient,
    decomposition=_grad_input_decomposition,
    nondiff_inputs=(2,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="conv2d's gradient for x: conv_transpose2d(gy, w) back to x's shape (x read for its shape only, so 'same' "
        "pads and the positions a strided conv dropped follow x's size).",
    examples=[
        Example(["f32[2, 4, 4, 3]", "f32[4, 3, 3, 3]", "f32[2, 3, 6, 5]"]),
        Example(["f32[2, 6, 4, 6]", "f32[6, 2, 3, 2]", "f32[2, 4, 7, 6]"], {"stride": [2, 1], "padding": "same",
                                                                          "groups": 2}),
        Example(["f64[1, 3, 3, 4]", "f64[3, 2, 2, 3]", "f64[1, 2, 7, 7]"], {"dilation": [2, 1],
                                                                          "padding": [1, 0, 2, 1], "stride": 2}),
    ],
)


# -- conv2d_grad_weight_like_internal(x, gy, w) = conv2d's gradient for w ----------------------------------
#   conv2d_grad_weight_internal with the kernel size read from w (and 'same' pads from x): compiled or exported,
#   that op (the DecomposeFn); second order: g_x = conv2d_grad_input_like_internal(gy, ggw, x), g_gy = conv2d(x, ggw)
def _weight_like_geometry(ctx: NodeContext) -> Geometry:
    x, gy, w = ctx.input_types
    if w.rank != 4:
        raise ctx.error(f"w must be [C_out, C_in/groups, kh, kw], got {w}")
    inner = NodeContext(CONV2D_GRAD_WEIGHT, (x, gy), {**ctx.attrs, "kernel_size": w.shape[2:]})
    geo = _grad_weight_geometry(inner)
    if w.shape[:2] != (geo.c_out, geo.c_in // geo.groups):
        raise ctx.error(f"w {w} is not the weight of a conv2d from x {x} to gy {gy} with groups={geo.groups}")
    return geo


def _weight_like_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (gw_t,) = _weight_like_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    return lambda x, gy, w: as_out(conv_grad_weight(x, gy, geo, acc), gw_t)


def _weight_like_decomposition(ctx: NodeContext):
    geo = _weight_like_geometry(ctx)
    return ctx.decomposition_graph(lambda x, gy, w: ops.conv2d_grad_weight_internal(
        x, gy, kernel_size=geo.kernel, **geo.attrs()))


CONV2D_GRAD_WEIGHT_LIKE = OpSchema(
    "conv2d_grad_weight_like_internal",
    inputs=("x", "gy", "w"),
    attrs=_conv_attrs(2),
    shape_infer=lambda ctx: (_weight_like_geometry(ctx), [ctx.input_types[0].with_shape(ctx.input_types[2].shape)])[1],
    kernels={"cpu": _weight_like_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, w, gw, ggw: [
        ops.conv2d_grad_input_like_internal(gy, ggw, x, **_as_given(ctx)), ops.conv2d(x, ggw, **_as_given(ctx)), None]),
    decomposition=_weight_like_decomposition,
    nondiff_inputs=(2,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="conv2d's gradient for w: the correlation of x with gy over batch and positions, of w's shape (w read for "
        "its shape only).",
    examples=[
        Example(["f32[2, 3, 6, 5]", "f32[2, 4, 4, 3]", "f32[4, 3, 3, 3]"]),
        Example(["f32[2, 4, 7, 6]", "f32[2, 6, 4, 6]", "f32[6, 2, 3, 2]"], {"stride": [2, 1], "padding": "same",
                                                                          "groups": 2}),
        Example(["f64[1, 2, 7, 7]", "f64[1, 3, 3, 4]", "f64[3, 2, 2, 3]"], {"dilation": [2, 1],
                                                                          "padding": [1, 0, 2, 1], "stride": 2}),
    ],
)


# -- conv_transpose1d ---------------------------------------------------------------------------------
def _transpose1d_geometry(ctx: NodeContext) -> Geometry:
    x, w = same_float(ctx)
    return transpose_geometry(ctx, 1, x.shape, w.shape)


def _transpose1d_gradient(ctx: NodeContext):
    geo = _transpose1d_geometry(ctx)
    attrs = {"stride": geo.stride[0], "padding": geo.padding, "dilation": geo.dilation[0], "groups": geo.groups}
    pad_x, crop_gx = _with_unread_windows(geo, ctx.input_types[0].shape)
    # frame-ops-sequence's conv1d family: gx = conv1d(gy, w), gw = conv1d_grad_weight_like_internal(gy, x, w)
    return ctx.grad_graph(lambda x, w, y, gy: [
        crop_gx(ops.conv1d(gy, w, **attrs)),
        ops.conv1d_grad_weight_like_internal(gy, pad_x(x), w, **attrs)])


CONV_TRANSPOSE1D = OpSchema(
    "conv_transpose1d",
    inputs=("x", "w"),
    attrs=_transpose_attrs(1),
    shape_infer=_transposed_shape(_transpose1d_geometry),
    kernels={"cpu": _transpose_kernel(_transpose1d_geometry, 1)},
    gradient=_transpose1d_gradient,
    traits=("any_shape_gradient",),
    doc="Transposed 1-D convolution of x[B, C_in, L] with w[C_in, C_out/groups, K] "
        "(torch.nn.functional.conv_transpose1d without bias): the adjoint of conv1d in its input.",
    examples=[
        Example(["f32[2, 4, 5]", "f32[4, 3, 3]"]),
        Example(["f32[2, 6, 5]", "f32[6, 2, 3]"], {"stride": 2, "padding": [1, 1], "groups": 2,
                                                  "output_padding": 1}),
        Example(["f64[1, 3, 4]", "f64[3, 2, 2]"], {"dilation": 3, "padding": 1, "stride": 3}),
        Example(["f64[1, 2, 3]", "f64[2, 2, 3]"], {"dilation": 3, "output_padding": 2}),
    ],
)

SCHEMAS = [CONV2D, CONV_TRANSPOSE2D, CONV2D_GRAD_WEIGHT, CONV2D_GRAD_INPUT_LIKE, CONV2D_GRAD_WEIGHT_LIKE,
           CONV_TRANSPOSE1D]
