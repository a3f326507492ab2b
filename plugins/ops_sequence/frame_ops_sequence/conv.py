"""Conv1d, max_pool1d and avg_pool1d, and the internal ops their gradients are made of.

``conv1d(x[B, C_in, L], w[C_out, C_in / groups, K]; stride, padding, dilation,
groups) -> [B, C_out, L_out]`` is a cross-correlation (no kernel flip, as in
torch): ``y[b, o, t] = sum_{c, k} w[o, c, k] x_pad[b, g(o) * C_in/groups + c,
t * stride + k * dilation]``. Padding modes are in ``_windows``.

Its gradients are convolutions again, so the three ops close under
differentiation (JAX's ``_conv_general_dilated_transpose_lhs``/``_rhs``):
``conv1d_grad_input_internal(gy, w)`` is the transposed convolution and
``conv1d_grad_weight_internal(x, gy)`` correlates the input with the output
cotangent. All three are bilinear, and each one's gradient is the other two.

Kernels are im2col with one 2-D matrix product per group and batch chunk (numpy's stacked matmul is far
slower on OpenBLAS). Rows of at least 512 outputs take one sample per product, copying its K taps into
columns ``[C_in/groups * K, L_out]`` kept in buffers reused over the batch (``_SampleColumns``); shorter
stride-1 rows take several samples per product on a padded grid ``[C, nb * (L + left + right)]`` whose taps
are the grid shifted by ``k * dilation`` (the positions between samples are computed and dropped); shorter
strided rows take window columns of several samples. The input gradient of one sample per product and
stride 1 is the correlation of the padded gy with the flipped kernel (``_grad_input_correlation``: one
product of ``C_out/groups * K`` terms per output); elsewhere it multiplies first and adds each tap's rows
back where it read. When a graph needs both gradients, the pass merge_conv1d_gradients (``conv_passes``) runs
them as one ``conv1d_grads_internal`` node, which takes the weight gradient from the correlation's columns of gy
(``conv_grads``); the pass merge_conv1d_multiply runs a convolution whose output only a product by a value of
its type reads as one ``conv1d_mul_internal`` node (``conv_forward_times``: each sample multiplied while its
product is in cache). float16/bfloat16 are computed in float32 and rounded once.
Results agree with float64 to a few roundings per sum but are not bitwise those of the earlier per-tap
batched products (tests/test_conv_paths.py bounds float32 to ``4 sqrt(n)`` roundings of an ``n``-term sum).

Pools (over the last axis of ``x[..., L]``) are in ``_pooling`` and are
registered from here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, Record, TensorType, ops

from ._common import as_out, compute_dtype
from ._pooling import SCHEMAS as POOL_SCHEMAS
from ._windows import check_positive, output_length, padded, resolve_padding, tap


class ConvGeometry(Record):
    __match_args__ = ("batch", "c_in", "c_out", "length", "kernel", "stride", "dilation", "groups", "left", "right",
                      "out_length")
    batch: int
    c_in: int
    c_out: int
    length: int
    kernel: int
    stride: int
    dilation: int
    groups: int
    left: int
    right: int
    out_length: int

    def __init__(
        self, batch: int, c_in: int, c_out: int, length: int, kernel: int, stride: int, dilation: int, groups: int,
        left: int, right: int, out_length: int
    ) -> None:
        self._store(batch=batch, c_in=c_in, c_out=c_out, length=length, kernel=kernel, stride=stride,
                    dilation=dilation, groups=groups, left=left, right=right, out_length=out_length)

    @property
    def padding(self) -> tuple[int, int]:
        return (self.left, self.right)

    @property
    def padded_length(self) -> int:
        return self.length + self.left + self.right

    def attrs(self) -> dict:
        """The attributes of the gradient ops (padding resolved to sizes)."""
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}


def _geometry(ctx: NodeContext, x: TensorType, w_shape: tuple[int, ...], length: int | None = None) -> ConvGeometry:
    """Check a conv's x and weight shapes and attributes; ``length`` overrides x's (for the input gradient)."""
    stride, dilation, groups = ctx.attrs["stride"], ctx.attrs["dilation"], ctx.attrs["groups"]
    check_positive(ctx, stride=stride, dilation=dilation, groups=groups)
    if x.rank != 3:
        raise ctx.error(f"x must be [batch, C_in, L], got {x}; add a batch axis of size 1 with reshape")
    if len(w_shape) != 3:
        raise ctx.error(f"w must be [C_out, C_in / groups, K], got shape {list(w_shape)}")
    batch, c_in, x_len = x.shape
    c_out, c_per, kernel = w_shape
    if c_in % groups or c_out % groups:
        raise ctx.error(f"groups = {groups} must divide both C_in = {c_in} and C_out = {c_out}")
    if c_per != c_in // groups:
        raise ctx.error(f"w {list(w_shape)} must have C_in / groups = {c_in} / {groups} = {c_in // groups} input "
                        f"channels (axis 1), got {c_per}")
    check_positive(ctx, kernel_size=kernel)
    length = x_len if length is None else length
    extent = dilation * (kernel - 1) + 1
    left, right = resolve_padding(ctx, length, extent, stride)
    out_length = output_length(ctx, length, left, right, extent, stride)
    return ConvGeometry(batch, c_in, c_out, length, kernel, stride, dilation, groups, left, right, out_length)


def _float_pair(ctx: NodeContext, first: str, second: str) -> tuple[TensorType, TensorType]:
    a, b = ctx.input_types
    if not a.dtype.is_float or a.dtype is not b.dtype:
        raise ctx.error(f"{first} and {second} must be floating tensors of one dtype, got {a} and {b}")
    return a, b


# -- the three numpy kernels --------------------------------------------------------------------------
# Each kernel walks the batch in chunks of about _COLUMNS output positions: a chunk's im2col matrix
# [C_in/groups * K, nb * L_out] is one copy from a window view and every product is one 2-D GEMM per group
# (numpy's stacked matmul can be far slower than separate 2-D calls on OpenBLAS).
_COLUMNS = 512


_GRID_COLUMNS = 2048


def _chunks(geo: ConvGeometry, columns: int = _COLUMNS) -> list[tuple[int, int]]:
    """``(first, stop)`` batch ranges of about ``columns`` output positions each (at least one sample)."""
    per = max(1, columns // geo.out_length)
    return [(b, min(b + per, geo.batch)) for b in range(0, geo.batch, per)]


def _windows(x: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    """A read-only view ``[B, C_in, K, L_out]`` of the padded x: tap ``k`` of every window (no copy)."""
    return _taps(padded(x, geo.left, geo.right, acc), geo.kernel, geo.stride, geo.dilation, geo.out_length)


def _taps(xp: np.ndarray, kernel: int, stride: int, dilation: int, count: int) -> np.ndarray:
    """A read-only view ``[..., kernel, count]`` of the padded rows ``xp[..., length]``: tap ``k`` of ``count``
    windows ``stride`` apart (no copy)."""
    view = np.lib.stride_tricks.sliding_window_view(xp, (count - 1) * stride + 1, axis=-1)
    return view[..., :(kernel - 1) * dilation + 1:dilation, ::stride]


def _one_sample_per_product(geo: ConvGeometry) -> bool:
    """Rows of at least ``_COLUMNS`` outputs: every product is one sample's (the chunks hold one sample each)."""
    return geo.out_length >= _COLUMNS


class _SampleColumns:
    """im2col one sample at a time in a buffer reused over the batch: ``of(a[channels, n])`` copies the sample's
    taps into ``[groups, channels/groups * kernel, count]``, tap ``k`` straight from ``a`` into the positions whose
    window reads inside it. The positions that read the padding are zero from the start and no copy writes them.
    The buffer stays in cache, where a padded copy of the whole batch and a fresh column matrix per sample did not
    (B 32, 64 -> 64, L 512, K 5: the forward 13.0 ms against 16.6, the three products alone 13.3); copying each
    sample first between zero borders and then its taps from there cost one more pass over the sample (about 2% of
    conv1d's fwd+bwd). The columns hold the values the whole-batch copy held, so the products give the same
    bits."""

    def __init__(self, channels: int, n: int, left: int, right: int, kernel: int, stride: int, dilation: int,
                 count: int, groups: int, acc: np.dtype) -> None:
        self.cols = np.zeros((channels, kernel, count), acc)
        self.shape = (groups, channels // groups * kernel, count)  # sizes spelt out: no channels is no -1
        # tap k of window t reads a[:, k * dilation + t * stride - left]: inside a for t in [first, stop)
        self.copies = []
        for k in range(kernel):
            offset = k * dilation - left
            first = min(count, max(0, -(offset // stride)))  # the first t with offset + t * stride >= 0
            stop = max(first, min(count, (n - 1 - offset) // stride + 1 if n - 1 - offset >= 0 else 0))
            if stop > first:
                start = offset + first * stride
                self.copies.append((self.cols[:, k, first:stop], slice(start, start + (stop - first - 1) * stride + 1,
                                                                       stride)))

    def of(self, a: np.ndarray) -> np.ndarray:
        for target, window in self.copies:
            target[...] = a[:, window]
        return self.cols.reshape(self.shape)


def _input_columns(geo: ConvGeometry, acc: np.dtype) -> _SampleColumns:
    """Columns of x's samples: the convolution's own windows."""
    return _SampleColumns(geo.c_in, geo.length, geo.left, geo.right, geo.kernel, geo.stride, geo.dilation,
                          geo.out_length, geo.groups, acc)


def _columns(view: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    """im2col of one batch chunk of ``_windows``: ``[groups, C_in/groups * K, nb * L_out]``."""
    nb, g, cig = view.shape[0], geo.groups, geo.c_in // geo.groups
    cols = np.empty((g, cig, geo.kernel, nb, geo.out_length), acc)
    np.copyto(cols, view.reshape(nb, g, cig, geo.kernel, geo.out_length).transpose(1, 2, 3, 0, 4))
    return cols.reshape(g, cig * geo.kernel, nb * geo.out_length)


def _rows(gy: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """One batch chunk of gy[nb, C_out, L_out] as ``[groups, C_out/groups, nb * L_out]`` (a view for one sample)."""
    nb, g = gy.shape[0], geo.groups
    rows = gy.reshape(nb, g, geo.c_out // g, geo.out_length).transpose(1, 2, 0, 3)
    return rows.reshape(g, geo.c_out // g, nb * geo.out_length)


# Stride 1 with rows shorter than _COLUMNS (several samples per product): the batch chunk is laid out as one
# padded row per channel, [C, nb * (L + left + right)], so that every tap is that row shifted by k * dilation
# (one long contiguous copy per tap, and the product spans the whole chunk); the positions between samples are
# computed and dropped (left + right of every L + left + right).
def _grid(a: np.ndarray, geo: ConvGeometry, acc: np.dtype, at: int) -> np.ndarray:
    """A batch chunk ``a[nb, C, n]`` written at offset ``at`` into zeros ``[C, nb * padded_length]``."""
    nb, c, n = a.shape
    grid = np.zeros((c, nb, geo.padded_length), acc)
    grid[:, :, at:at + n] = a.transpose(1, 0, 2)
    return grid.reshape(c, nb * geo.padded_length)


def _on_grid(geo: ConvGeometry) -> bool:
    """The grid for stride 1 and rows shorter than ``_COLUMNS`` (measured: B 8, 16 channels, L 64, K 3 runs
    fwd+bwd in 0.28 ms against 0.77 ms per sample; at L 512 one sample per product is faster, 60 ms against 66)."""
    return geo.stride == 1 and geo.out_length < _COLUMNS


def _grid_columns(grid: np.ndarray, geo: ConvGeometry, acc: np.dtype, count: int) -> np.ndarray:
    """im2col on the grid: ``[groups, C_in/groups * K, count]``, tap ``k`` the grid shifted by ``k * dilation``."""
    cols = np.empty((geo.c_in, geo.kernel, count), acc)
    for k in range(geo.kernel):
        cols[:, k] = grid[:, k * geo.dilation:k * geo.dilation + count]
    return cols.reshape(geo.groups, -1, count)


def _group_weights(w: np.ndarray, g: int, cog: int, acc: np.dtype) -> np.ndarray:
    """w[C_out, C_in / g, K] as ``[g, C_out / g, C_in / g * K]`` (sizes spelt out: no output channels is no -1)."""
    return np.asarray(w, acc).reshape(g, cog, w.shape[1] * w.shape[2])


def _grid_count(geo: ConvGeometry, nb: int) -> int:
    return (nb - 1) * geo.padded_length + geo.out_length


def _grid_forward(x: np.ndarray, w: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    g, cog, lp = geo.groups, geo.c_out // geo.groups, geo.padded_length
    wg, y = _group_weights(w, g, cog, acc), np.empty((geo.batch, geo.c_out, geo.out_length), acc)
    for first, stop in _chunks(geo, _GRID_COLUMNS):
        nb, count = stop - first, _grid_count(geo, stop - first)
        cols = _grid_columns(_grid(x[first:stop], geo, acc, geo.left), geo, acc, count)
        part = np.empty((g, cog, nb * lp), acc)
        for k in range(g):
            np.matmul(wg[k], cols[k], out=part[k, :, :count])
        y[first:stop] = part.reshape(geo.c_out, nb, lp)[:, :, :geo.out_length].transpose(1, 0, 2)
    return y


def _grid_grad_input(gy: np.ndarray, w: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    g, cog, cig, lp = geo.groups, geo.c_out // geo.groups, geo.c_in // geo.groups, geo.padded_length
    wt = np.ascontiguousarray(np.asarray(w, acc).reshape(g, cog, cig * geo.kernel).transpose(0, 2, 1))
    gx = np.empty((geo.batch, geo.c_in, geo.length), acc)
    for first, stop in _chunks(geo, _GRID_COLUMNS):
        nb, count = stop - first, _grid_count(geo, stop - first)
        rows = _grid(gy[first:stop], geo, acc, 0).reshape(g, cog, nb * lp)
        gxp = np.zeros((g, cig, nb * lp), acc)
        part = np.empty((cig, geo.kernel, count), acc)
        for k in range(g):
            np.matmul(wt[k], rows[k, :, :count], out=part.reshape(cig * geo.kernel, count))
            for t in range(geo.kernel):
                gxp[k, :, t * geo.dilation:t * geo.dilation + count] += part[:, t]
        gx[first:stop] = gxp.reshape(geo.c_in, nb, lp)[:, :, geo.left:geo.left + geo.length].transpose(1, 0, 2)
    return gx


def _grid_grad_weight(x: np.ndarray, gy: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    g, cog, cig, lp = geo.groups, geo.c_out // geo.groups, geo.c_in // geo.groups, geo.padded_length
    gw = np.zeros((g, cog, cig * geo.kernel), acc)
    part = np.empty(gw.shape[1:], acc)
    for first, stop in _chunks(geo, _GRID_COLUMNS):
        nb, count = stop - first, _grid_count(geo, stop - first)
        cols = _grid_columns(_grid(x[first:stop], geo, acc, geo.left), geo, acc, count)
        rows = _grid(gy[first:stop], geo, acc, 0).reshape(g, cog, nb * lp)
        for k in range(g):
            np.matmul(rows[k, :, :count], cols[k].T, out=part)
            gw[k] += part
    return gw.reshape(geo.c_out, cig, geo.kernel)


def conv_forward(x: np.ndarray, w: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    """y[b, g, o, t] = sum_{c, k} w[g, o, c, k] x_pad[b, g, c, k * dilation + t * stride]: one product per chunk
    and group, written into y's layout (directly for one sample)."""
    if _on_grid(geo):
        return _grid_forward(np.asarray(x), w, geo, acc)
    g, cog = geo.groups, geo.c_out // geo.groups
    wg, y = _group_weights(w, g, cog, acc), np.empty((geo.batch, geo.c_out, geo.out_length), acc)
    if _one_sample_per_product(geo):
        columns = _input_columns(geo, acc)
        for b in range(geo.batch):
            cols = columns.of(x[b])
            for k in range(g):
                np.matmul(wg[k], cols[k], out=y[b, k * cog:(k + 1) * cog])
        return y
    view = _windows(x, geo, acc)
    for first, stop in _chunks(geo):
        cols = _columns(view[first:stop], geo, acc)
        if stop - first == 1:
            for k in range(g):
                np.matmul(wg[k], cols[k], out=y[first, k * cog:(k + 1) * cog])
            continue
        part = np.empty((g, cog, (stop - first) * geo.out_length), acc)
        for k in range(g):
            np.matmul(wg[k], cols[k], out=part[k])
        y[first:stop] = part.reshape(geo.c_out, stop - first, geo.out_length).transpose(1, 0, 2)
    return y


def conv_forward_times(x: np.ndarray, w: np.ndarray, g: np.ndarray, geo: ConvGeometry,
                       acc: np.dtype) -> np.ndarray:
    """conv_forward(x, w) * g for g of y's shape and dtype acc (``conv1d_mul_internal``). With one sample per
    product, each sample's product goes to a buffer reused over the batch and is multiplied from there while it is
    in cache: y is never written out and read back (B 32, 64 -> 64, L 512, K 5: 8 MB of traffic fewer, about 2% of
    the training step). The same products and the same multiplications as the two ops: the same bits."""
    if not _one_sample_per_product(geo):
        y = conv_forward(x, w, geo, acc)
        return np.multiply(y, g, out=y)
    g_, cog = geo.groups, geo.c_out // geo.groups
    wg, out = _group_weights(w, g_, cog, acc), np.empty((geo.batch, geo.c_out, geo.out_length), acc)
    columns, y = _input_columns(geo, acc), np.empty((geo.c_out, geo.out_length), acc)
    for b in range(geo.batch):
        cols = columns.of(x[b])
        for k in range(g_):
            np.matmul(wg[k], cols[k], out=y[k * cog:(k + 1) * cog])
        np.multiply(y, g[b], out=out[b])
    return out


def conv_grad_input(gy: np.ndarray, w: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    """The transposed convolution: per chunk and group, w^T @ gy, each tap's rows added back where the tap read."""
    if _on_grid(geo) and np.isfinite(w).all():  # (w^T @ gy also fills the grid's dropped columns: 0 * inf is NaN)
        return _grid_grad_input(np.asarray(gy), w, geo, acc)
    if _as_correlation(geo) and np.isfinite(w).all():  # (the same for the padding it reads)
        return _grad_input_correlation(gy, w, geo, acc)[0]
    g, cog, cig, n = geo.groups, geo.c_out // geo.groups, geo.c_in // geo.groups, geo.out_length
    wt = np.ascontiguousarray(np.asarray(w, acc).reshape(g, cog, cig * geo.kernel).transpose(0, 2, 1))
    gy = np.asarray(gy, acc)
    gxp = np.zeros((geo.batch, g, cig, geo.padded_length), acc)
    for first, stop in _chunks(geo):
        nb, rows = stop - first, _rows(gy[first:stop], geo)
        part = np.empty((g, cig * geo.kernel, nb * n), acc)
        for k in range(g):
            np.matmul(wt[k], rows[k], out=part[k])
        part = part.reshape(g, cig, geo.kernel, nb, n).transpose(3, 0, 1, 2, 4)  # [nb, G, cig, K, n]
        target = gxp[first:stop]
        for k in range(geo.kernel):
            tap(target, k, geo.stride, geo.dilation, n)[...] += part[:, :, :, k]
    return gxp[..., geo.left:geo.left + geo.length].reshape(geo.batch, geo.c_in, geo.length)


def _as_correlation(geo: ConvGeometry) -> bool:
    """Stride 1, one sample per product, and no side padded by more than ``extent - 1``: there the input gradient
    is itself a convolution (next function)."""
    extent = geo.dilation * (geo.kernel - 1) + 1
    return geo.stride == 1 and _one_sample_per_product(geo) and max(geo.left, geo.right) <= extent - 1


def _grad_input_correlation(gy: np.ndarray, w: np.ndarray, geo: ConvGeometry, acc: np.dtype,
                             x: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """gx[b, c, s] = sum_{o, k} w[o, c, K-1-k] gy_pad[b, o, s + k d], with gy padded by ``extent - 1 - left`` and
    ``extent - 1 - right``: a stride-1 convolution of gy with the flipped, transposed kernel, computed as the
    forward one is (one sample's columns, one product of ``C_out/groups * K`` terms per output). Multiplying
    first and adding the K taps back (col2im) cost 5 extra passes over the columns: B 32, 64 -> 64, L 512, K 5
    took 18.7 ms that way against 14.1 ms here (the product alone: 12.9 ms). Each gx is one BLAS sum of
    ``C_out/groups * K`` terms instead of K sums of C_out/groups added in turn: the last bits differ from that
    order (tests/test_conv_paths.py bounds them). The padding is read as zeros times w, so a non-finite w keeps
    the col2im path (0 * inf would be a NaN that torch does not have).

    With ``x``, the same columns also give the weight gradient (``conv_grads``): ``(gx, gw)``, where ``gw`` is None
    when it must be recomputed from x's windows."""
    g, cog, cig, kernel = geo.groups, geo.c_out // geo.groups, geo.c_in // geo.groups, geo.kernel
    extent = geo.dilation * (kernel - 1) + 1
    flipped = np.asarray(w, acc).reshape(g, cog, cig, kernel)[..., ::-1].transpose(0, 2, 1, 3)
    wf = np.ascontiguousarray(flipped).reshape(g, cig, cog * kernel)
    columns = _SampleColumns(geo.c_out, geo.out_length, extent - 1 - geo.left, extent - 1 - geo.right, kernel, 1,
                             geo.dilation, geo.length, g, acc)
    gx = np.empty((geo.batch, geo.c_in, geo.length), acc)
    if x is None:
        for b in range(geo.batch):
            cols = columns.of(gy[b])
            for k in range(g):
                np.matmul(wf[k], cols[k], out=gx[b, k * cig:(k + 1) * cig])
        return gx, None
    x = np.asarray(x, acc)
    gwf = np.zeros((g, cog * kernel, cig), acc)
    part = np.empty((cog * kernel, cig), acc)
    for b in range(geo.batch):
        cols = columns.of(gy[b])
        for k in range(g):
            np.matmul(wf[k], cols[k], out=gx[b, k * cig:(k + 1) * cig])
            np.matmul(cols[k], x[b, k * cig:(k + 1) * cig].T, out=part)
            gwf[k] += part
    if np.isnan(gwf).any():
        return gx, None
    gw = gwf.reshape(g, cog, kernel, cig)[:, :, ::-1].transpose(0, 1, 3, 2)  # [g, o, k', c] -> [g, o, c, k]
    return gx, np.ascontiguousarray(gw).reshape(geo.c_out, cig, kernel)


def conv_grads(x: np.ndarray, gy: np.ndarray, w: np.ndarray, geo: ConvGeometry,
               acc: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(gx, gw) of one convolution. Where the input gradient is a correlation (``_as_correlation``), its columns
    of the padded gy, cols[o, k', s] = gy[o, s + k' d - (extent - 1 - left)], hold for k = K-1-k' exactly the
    gy[o, t] that meets x[c, s] in gw[o, c, k] = sum_t gy[o, t] x_pad[c, t + k d - left] (s = t + k d - left); so
    gw[o, c, k] = cols[o, K-1-k, :] . x[c, :], one more product over the same columns (B 32, 64 -> 64, L 512, K 5:
    both gradients in 28.9 ms against 30.4 ms for the two kernels, which build columns twice). The sum runs over
    x's positions s instead of gy's t, so its last bits differ from conv_grad_weight's (tests/test_conv_paths.py
    bounds them). The columns also pair gy's zero padding with x values no window reads against that tap: 0 * inf
    there is a NaN that torch does not have, so a weight gradient with a NaN is recomputed from x's windows (which
    read only what the convolution reads). Elsewhere the two kernels run in turn, with their own bits."""
    if _as_correlation(geo) and np.isfinite(w).all():
        gx, gw = _grad_input_correlation(gy, w, geo, acc, x)
        return gx, conv_grad_weight(x, gy, geo, acc) if gw is None else gw
    return conv_grad_input(gy, w, geo, acc), conv_grad_weight(x, gy, geo, acc)


def conv_grad_weight(x: np.ndarray, gy: np.ndarray, geo: ConvGeometry, acc: np.dtype) -> np.ndarray:
    """gw[o, c, k] = sum_{b, t} gy[b, o, t] x_pad[b, c, k * dilation + t * stride]: one product per chunk and
    group, summed over the chunks."""
    if _on_grid(geo):
        gw = _grid_grad_weight(np.asarray(x), np.asarray(gy), geo, acc)
        if not np.isnan(gw).any():
            return gw
        # the grid's dropped columns hold gy = 0 against x values no window reads: 0 * inf or a NaN there made a
        # NaN that torch does not have; the windows read only what the convolution reads
    g, cog, cig = geo.groups, geo.c_out // geo.groups, geo.c_in // geo.groups
    gy = np.asarray(gy, acc)
    gw = np.zeros((g, cog, cig * geo.kernel), acc)
    part = np.empty((cog, cig * geo.kernel), acc)
    if _one_sample_per_product(geo):
        columns = _input_columns(geo, acc)
        for b in range(geo.batch):
            cols, rows = columns.of(x[b]), gy[b].reshape(g, cog, geo.out_length)
            for k in range(g):
                np.matmul(rows[k], cols[k].T, out=part)
                gw[k] += part
        return gw.reshape(geo.c_out, cig, geo.kernel)
    view = _windows(x, geo, acc)
    for first, stop in _chunks(geo):
        cols, rows = _columns(view[first:stop], geo, acc), _rows(gy[first:stop], geo)
        for k in range(g):
            np.matmul(rows[k], cols[k].T, out=part)
            gw[k] += part
    return gw.reshape(geo.c_out, cig, geo.kernel)


# -- conv1d ------------------------------------------------------------------------------------------
_CONV_ATTRS = {
    "stride": AttrSpec("int", 1, "step between windows"),
    "padding": AttrSpec("str|ints", "valid", "'valid', 'same', 'causal', one int (both sides) or [left, right]"),
    "dilation": AttrSpec("int", 1, "spacing between the kernel's taps"),
    "groups": AttrSpec("int", 1, "channel groups: output group g sees input group g only"),
}


def _conv_shape(ctx: NodeContext) -> list[TensorType]:
    x, w = _float_pair(ctx, "x", "w")
    geo = _geometry(ctx, x, w.shape)
    return [x.with_shape((geo.batch, geo.c_out, geo.out_length))]


def _check_temporaries(ctx: NodeContext, geo: ConvGeometry, acc: np.dtype) -> None:
    """Refuse, when the graph is compiled, a conv whose own temporaries exceed the machine's memory: the padded
    copy of x (or of the input gradient) and about two products of the output's size (found in QA: an absurd
    padding allocated a 16-24 GB copy for a minute before a MemoryError)."""
    item = np.dtype(acc).itemsize
    padded_bytes = geo.batch * geo.c_in * geo.padded_length * item
    products = 2 * geo.batch * max(geo.c_in, geo.c_out) * geo.out_length * item
    ctx.check_memory(padded_bytes + products,
                     f"padding {list(geo.padding)} on a length of {geo.length} makes temporaries (the padded copy of "
                     f"[{geo.batch}, {geo.c_in}, {geo.padded_length}] and the per-tap products)",
                     "use a smaller padding (or fewer channels, a smaller batch)")


def _conv_kernel(ctx: NodeContext) -> Callable:
    x_t, w_t = ctx.input_types
    geo, acc, (y_t,) = _geometry(ctx, x_t, w_t.shape), compute_dtype(x_t), ctx.output_types
    _check_temporaries(ctx, geo, acc)
    return lambda x, w: as_out(conv_forward(x, w, geo, acc), y_t)


def _as_given(ctx: NodeContext) -> dict:
    """The node's stride, padding, dilation and groups as written ('same' stays 'same', resolved at each size)."""
    return {k: ctx.attrs[k] for k in ("stride", "padding", "dilation", "groups")}


def _conv_gradient(ctx: NodeContext):
    attrs = _as_given(ctx)
    # gx = conv1d_grad_input_internal(gy, w) (the transposed conv), gw = conv1d_grad_weight_internal(x, gy), in
    # their forms that read x's length and w's kernel from the operands (any batch and length)
    return ctx.grad_graph(lambda x, w, y, gy: [
        ops.conv1d_grad_input_like_internal(gy, w, x, **attrs),
        ops.conv1d_grad_weight_like_internal(x, gy, w, **attrs)])


CONV1D = OpSchema(
    "conv1d",
    inputs=("x", "w"),
    attrs=_CONV_ATTRS,
    shape_infer=_conv_shape,
    kernels={"cpu": _conv_kernel},
    gradient=_conv_gradient,
    traits=("any_shape_gradient",),
    doc="1-D cross-correlation of x[B, C_in, L] with w[C_out, C_in/groups, K] (as torch.nn.functional.conv1d, "
        "no bias): stride, dilation, groups, and padding 'valid', 'same', 'causal' or sizes.",
    examples=[
        Example(["f32[2, 3, 7]", "f32[4, 3, 3]"]),
        Example(["f32[2, 4, 9]", "f32[6, 2, 3]"], {"stride": 2, "padding": "same", "groups": 2}),
        Example(["f64[1, 2, 8]", "f64[3, 2, 2]"], {"dilation": 3, "padding": "causal"}),
        Example(["f64[2, 2, 6]", "f64[2, 2, 4]"], {"padding": [2, 1], "stride": 3}),
    ],
)


# -- conv1d_mul_internal: conv1d(x, w) * g in one kernel -------------------------------------------------
#   made by the pass merge_conv1d_multiply (conv_passes) from a conv1d whose only reader multiplies it by a value of
#   its own type (frame's loss sum(y * g), a mask); bilinear in (x, w) times g, so its gradient is conv1d's with
#   gy = gout * g, and g's is gout * conv1d(x, w)
def _mul_geometry(ctx: NodeContext) -> ConvGeometry:
    x, w, g = ctx.input_types
    if not (x.dtype.is_float and x.dtype is w.dtype is g.dtype):
        raise ctx.error(f"x, w and g must be floating tensors of one dtype, got {x}, {w} and {g}")
    geo = _geometry(ctx, x, w.shape)
    if g.shape != (geo.batch, geo.c_out, geo.out_length):
        raise ctx.error(f"g must be conv1d's output shape {[geo.batch, geo.c_out, geo.out_length]}, got {g}; "
                        "multiply by a value of another shape with mul after conv1d")
    return geo


def _mul_shape(ctx: NodeContext) -> list[TensorType]:
    _mul_geometry(ctx)
    return [ctx.input_types[2]]


def _mul_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (out_t,) = _mul_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    _check_temporaries(ctx, geo, acc)
    if acc != out_t.dtype.np:  # float16/bfloat16: y rounded once, then multiplied in its own dtype, as the two ops
        return lambda x, w, g: np.multiply(as_out(conv_forward(x, w, geo, acc), out_t), g)
    return lambda x, w, g: conv_forward_times(x, w, np.asarray(g), geo, acc)


def _mul_gradient(ctx: NodeContext):
    geo = _mul_geometry(ctx)
    attrs = geo.attrs()
    return ctx.grad_graph(lambda x, w, g, out, gout: [
        ops.conv1d_grad_input_internal(gout * g, w, length=geo.length, **attrs),
        ops.conv1d_grad_weight_internal(x, gout * g, kernel_size=geo.kernel, **attrs),
        gout * ops.conv1d(x, w, **attrs)])


CONV1D_MUL = OpSchema(
    "conv1d_mul_internal",
    inputs=("x", "w", "g"),
    attrs=_CONV_ATTRS,
    shape_infer=_mul_shape,
    kernels={"cpu": _mul_kernel},
    gradient=_mul_gradient,
    decomposition=lambda ctx: ctx.decomposition_graph(lambda x, w, g: ops.conv1d(x, w, **_as_given(ctx)) * g),
    doc="conv1d(x, w) * g for g of the convolution's output shape, each sample multiplied while its product is in "
        "cache; made by the pass merge_conv1d_multiply.",
    examples=[
        Example(["f32[2, 3, 7]", "f32[4, 3, 3]", "f32[2, 4, 5]"]),
        Example(["f32[2, 4, 9]", "f32[6, 2, 3]", "f32[2, 6, 5]"], {"stride": 2, "padding": "same", "groups": 2}),
        Example(["f64[2, 2, 520]", "f64[3, 2, 5]", "f64[2, 3, 520]"], {"padding": "same"},
                note="one sample per product: multiplied from the per-sample buffer"),
        Example(["f64[1, 4, 530]", "f64[2, 2, 3]", "f64[1, 2, 528]"], {"dilation": 2, "groups": 2, "padding": [1, 1]}),
    ],
)


# -- conv1d_grad_input_internal: gx = conv^T(gy)  --------------------------------------------------------
#   second order (bilinear in gy, w): g_gy = conv1d(ggx, w), g_w = conv1d_grad_weight_internal(ggx, gy)
def _grad_input_geometry(ctx: NodeContext) -> ConvGeometry:
    gy, w = _float_pair(ctx, "gy", "w")
    length = ctx.attrs["length"]
    check_positive(ctx, length=length)
    if gy.rank != 3 or w.rank != 3:
        raise ctx.error(f"gy must be [batch, C_out, L_out] and w [C_out, C_in/groups, K], got {gy} and {w}")
    x = gy.with_shape((gy.shape[0], w.shape[1] * ctx.attrs["groups"], length))
    geo = _geometry(ctx, x, w.shape)
    if gy.shape != (geo.batch, geo.c_out, geo.out_length):
        raise ctx.error(f"gy must be conv1d's output shape {[geo.batch, geo.c_out, geo.out_length]} for an input of "
                        f"length {length}, got {gy}")
    return geo


def _grad_input_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (gx_t,) = _grad_input_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    _check_temporaries(ctx, geo, acc)
    return lambda gy, w: as_out(conv_grad_input(gy, w, geo, acc), gx_t)


def _grad_input_gradient(ctx: NodeContext):
    attrs = _grad_input_geometry(ctx).attrs()
    kernel = ctx.input_types[1].shape[2]
    return ctx.grad_graph(lambda gy, w, gx, ggx: [
        ops.conv1d(ggx, w, **attrs), ops.conv1d_grad_weight_internal(ggx, gy, kernel_size=kernel, **attrs)])


CONV1D_GRAD_INPUT = OpSchema(
    "conv1d_grad_input_internal",
    inputs=("gy", "w"),
    attrs={**_CONV_ATTRS, "length": AttrSpec("int", doc="the input length L")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(
        (ctx.input_types[0].shape[0], _grad_input_geometry(ctx).c_in, ctx.attrs["length"]))],
    kernels={"cpu": _grad_input_kernel},
    gradient=_grad_input_gradient,
    doc="The transposed 1-D convolution of gy with w: conv1d's gradient for x.",
    examples=[
        Example(["f32[2, 4, 5]", "f32[4, 3, 3]"], {"length": 7, "padding": [0, 0]}),
        Example(["f32[2, 6, 5]", "f32[6, 2, 3]"], {"length": 9, "stride": 2, "padding": [1, 1], "groups": 2}),
        Example(["f64[1, 3, 8]", "f64[3, 2, 2]"], {"length": 8, "dilation": 3, "padding": [3, 0]}),
        Example(["f64[2, 2, 2]", "f64[2, 2, 4]"], {"length": 6, "padding": [2, 1], "stride": 3}),
    ],
)


# -- conv1d_grad_weight_internal: gw = x (*) gy ------------------------------------------------------
#   second order (bilinear in x, gy): g_x = conv1d_grad_input_internal(gy, ggw), g_gy = conv1d(x, ggw)
def _grad_weight_geometry(ctx: NodeContext) -> ConvGeometry:
    x, gy = _float_pair(ctx, "x", "gy")
    if gy.rank != 3:
        raise ctx.error(f"gy must be [batch, C_out, L_out], got {gy}")
    groups = ctx.attrs["groups"]
    c_in = x.shape[1] if x.rank == 3 else 0
    geo = _geometry(ctx, x, (gy.shape[1], c_in // groups if groups >= 1 else 0, ctx.attrs["kernel_size"]))
    if gy.shape != (geo.batch, geo.c_out, geo.out_length):
        raise ctx.error(f"gy must be conv1d's output shape {[geo.batch, geo.c_out, geo.out_length]}, got {gy}")
    return geo


def _grad_weight_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (gw_t,) = _grad_weight_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    _check_temporaries(ctx, geo, acc)
    return lambda x, gy: as_out(conv_grad_weight(x, gy, geo, acc), gw_t)


def _grad_weight_gradient(ctx: NodeContext):
    geo = _grad_weight_geometry(ctx)
    attrs = geo.attrs()
    return ctx.grad_graph(lambda x, gy, gw, ggw: [
        ops.conv1d_grad_input_internal(gy, ggw, length=geo.length, **attrs), ops.conv1d(x, ggw, **attrs)])


def _grad_weight_shape(ctx: NodeContext) -> list[TensorType]:
    geo = _grad_weight_geometry(ctx)
    return [ctx.input_types[0].with_shape((geo.c_out, geo.c_in // geo.groups, geo.kernel))]


CONV1D_GRAD_WEIGHT = OpSchema(
    "conv1d_grad_weight_internal",
    inputs=("x", "gy"),
    attrs={**_CONV_ATTRS, "kernel_size": AttrSpec("int", doc="the kernel size K")},
    shape_infer=_grad_weight_shape,
    kernels={"cpu": _grad_weight_kernel},
    gradient=_grad_weight_gradient,
    doc="The correlation of x with gy over batch and positions: conv1d's gradient for w.",
    examples=[
        Example(["f32[2, 3, 7]", "f32[2, 4, 5]"], {"kernel_size": 3, "padding": [0, 0]}),
        Example(["f32[2, 4, 9]", "f32[2, 6, 5]"], {"kernel_size": 3, "stride": 2, "padding": [1, 1], "groups": 2}),
        Example(["f64[1, 2, 8]", "f64[1, 3, 8]"], {"kernel_size": 2, "dilation": 3, "padding": [3, 0]}),
        Example(["f64[2, 2, 6]", "f64[2, 2, 2]"], {"kernel_size": 4, "padding": [2, 1], "stride": 3}),
    ],
)

# -- conv1d_grads_internal: (gx, gw) of one convolution in one kernel --------------------------------------
#   made by the pass merge_conv1d_gradients (conv_passes) from a grad_input and a grad_weight node on the same
#   gy; its gradient is the two ops' gradients added (the composite below, differentiated)
def _grads_geometry(ctx: NodeContext) -> ConvGeometry:
    x, gy, w = ctx.input_types
    if not (x.dtype.is_float and x.dtype is gy.dtype is w.dtype):
        raise ctx.error(f"x, gy and w must be floating tensors of one dtype, got {x}, {gy} and {w}")
    geo = _geometry(ctx, x, w.shape)
    if gy.shape != (geo.batch, geo.c_out, geo.out_length):
        raise ctx.error(f"gy must be conv1d's output shape {[geo.batch, geo.c_out, geo.out_length]}, got {gy}")
    return geo


def _grads_shape(ctx: NodeContext) -> list[TensorType]:
    _grads_geometry(ctx)
    return [ctx.input_types[0], ctx.input_types[2]]


def _grads_composite(ctx: NodeContext) -> Callable[..., list]:
    geo = _grads_geometry(ctx)
    attrs = geo.attrs()
    return lambda x, gy, w: [ops.conv1d_grad_input_internal(gy, w, length=geo.length, **attrs),
                             ops.conv1d_grad_weight_internal(x, gy, kernel_size=geo.kernel, **attrs)]


def _grads_kernel(ctx: NodeContext) -> Callable:
    geo, acc, (gx_t, gw_t) = _grads_geometry(ctx), compute_dtype(ctx.input_types[0]), ctx.output_types
    _check_temporaries(ctx, geo, acc)

    def kernel(x: np.ndarray, gy: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gx, gw = conv_grads(x, gy, w, geo, acc)
        return as_out(gx, gx_t), as_out(gw, gw_t)
    return kernel


def _grads_gradient(ctx: NodeContext):
    geo = _grads_geometry(ctx)
    attrs = geo.attrs()
    # the sum of the two ops' rules: gx = T(gy, w) and gw = W(x, gy) are bilinear
    return ctx.grad_graph(lambda x, gy, w, gx, gw, ggx, ggw: [
        ops.conv1d_grad_input_internal(gy, ggw, length=geo.length, **attrs),
        ops.conv1d(ggx, w, **attrs) + ops.conv1d(x, ggw, **attrs),
        ops.conv1d_grad_weight_internal(ggx, gy, kernel_size=geo.kernel, **attrs)])


CONV1D_GRADS = OpSchema(
    "conv1d_grads_internal",
    inputs=("x", "gy", "w"),
    outputs=("gx", "gw"),
    attrs=_CONV_ATTRS,
    shape_infer=_grads_shape,
    kernels={"cpu": _grads_kernel},
    gradient=_grads_gradient,
    decomposition=lambda ctx: ctx.decomposition_graph(_grads_composite(ctx)),
    doc="conv1d's two gradients in one kernel: (conv1d_grad_input_internal(gy, w), conv1d_grad_weight_internal(x, "
        "gy)), the weight gradient from the columns of gy the input gradient reads; made by the pass "
        "merge_conv1d_gradients.",
    examples=[
        Example(["f32[2, 3, 7]", "f32[2, 4, 5]", "f32[4, 3, 3]"]),
        Example(["f32[2, 4, 9]", "f32[2, 6, 5]", "f32[6, 2, 3]"], {"stride": 2, "padding": [1, 1], "groups": 2}),
        Example(["f64[1, 2, 8]", "f64[1, 3, 8]", "f64[3, 2, 2]"], {"dilation": 3, "padding": [3, 0]}),
        Example(["f64[2, 2, 520]", "f64[2, 2, 520]", "f64[2, 2, 5]"], {"padding": [2, 2]},
                note="stride 1, one sample per product: the weight gradient from gy's columns"),
    ],
)


# -- the forms that read x's length and w's kernel from operands (read for their shapes only) ----------------------
#   conv1d_grad_input_like_internal(gy, w, x) = conv1d_grad_input_internal(gy, w; length=x's L, pads resolved)
#   conv1d_grad_weight_like_internal(x, gy, w) = conv1d_grad_weight_internal(x, gy; kernel_size=w's K, pads resolved)
#   Compiled or exported, they are those ops (their DecomposeFns, lowered by bind_shapes).
def _input_like_attrs(ctx: NodeContext) -> dict:
    gy, w, x = ctx.input_types
    geo = _geometry(ctx, x, w.shape)
    if gy.shape != (geo.batch, geo.c_out, geo.out_length) or gy.dtype is not x.dtype:
        raise ctx.error(f"gy must be conv1d's output {x.dtype.name}{[geo.batch, geo.c_out, geo.out_length]} for x {x}, "
                        f"got {gy}")
    return {**geo.attrs(), "length": geo.length}


def _weight_like_attrs(ctx: NodeContext) -> dict:
    x, gy, w = ctx.input_types
    geo = _geometry(ctx, x, w.shape)
    if gy.shape != (geo.batch, geo.c_out, geo.out_length) or gy.dtype is not x.dtype:
        raise ctx.error(f"gy must be conv1d's output {x.dtype.name}{[geo.batch, geo.c_out, geo.out_length]} for x {x} "
                        f"and w {w}, got {gy}")
    return {**geo.attrs(), "kernel_size": geo.kernel}


def _lowered_kernel(target: OpSchema, attrs_of: Callable, build: Callable) -> Callable:
    def kernel_of(ctx: NodeContext) -> Callable:
        inner = build(NodeContext(target, ctx.input_types[:2], target.normalize_attrs(attrs_of(ctx)), ctx.output_types))
        return lambda a, b, like: inner(a, b)
    return kernel_of


CONV1D_GRAD_INPUT_LIKE = OpSchema(
    "conv1d_grad_input_like_internal",
    inputs=("gy", "w", "x"),
    attrs=_CONV_ATTRS,
    shape_infer=lambda ctx: (_input_like_attrs(ctx), [ctx.input_types[2]])[1],
    kernels={"cpu": _lowered_kernel(CONV1D_GRAD_INPUT, _input_like_attrs, _grad_input_kernel)},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, w, x, gx, ggx: [
        ops.conv1d(ggx, w, **_as_given(ctx)), ops.conv1d_grad_weight_like_internal(ggx, gy, w, **_as_given(ctx)),
        None]),
    decomposition=lambda ctx: ctx.decomposition_graph(
        lambda gy, w, x: ops.conv1d_grad_input_internal(gy, w, **_input_like_attrs(ctx))),
    nondiff_inputs=(2,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="conv1d's gradient for x at x's length (x read for its shape only): the transposed convolution.",
    examples=[
        Example(["f32[2, 4, 5]", "f32[4, 3, 3]", "f32[2, 3, 7]"]),
        Example(["f32[2, 6, 5]", "f32[6, 2, 3]", "f32[2, 4, 9]"], {"stride": 2, "padding": "same", "groups": 2}),
        Example(["f64[1, 3, 8]", "f64[3, 2, 2]", "f64[1, 2, 8]"], {"dilation": 3, "padding": "causal"}),
    ],
)

CONV1D_GRAD_WEIGHT_LIKE = OpSchema(
    "conv1d_grad_weight_like_internal",
    inputs=("x", "gy", "w"),
    attrs=_CONV_ATTRS,
    shape_infer=lambda ctx: (_weight_like_attrs(ctx), [ctx.input_types[2]])[1],
    kernels={"cpu": _lowered_kernel(CONV1D_GRAD_WEIGHT, _weight_like_attrs, _grad_weight_kernel)},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, w, gw, ggw: [
        ops.conv1d_grad_input_like_internal(gy, ggw, x, **_as_given(ctx)), ops.conv1d(x, ggw, **_as_given(ctx)),
        None]),
    decomposition=lambda ctx: ctx.decomposition_graph(
        lambda x, gy, w: ops.conv1d_grad_weight_internal(x, gy, **_weight_like_attrs(ctx))),
    nondiff_inputs=(2,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="conv1d's gradient for w, of w's shape (w read for its shape only): x correlated with gy.",
    examples=[
        Example(["f32[2, 3, 7]", "f32[2, 4, 5]", "f32[4, 3, 3]"]),
        Example(["f32[2, 4, 9]", "f32[2, 6, 5]", "f32[6, 2, 3]"], {"stride": 2, "padding": "same", "groups": 2}),
        Example(["f64[1, 2, 8]", "f64[1, 3, 8]", "f64[3, 2, 2]"], {"dilation": 3, "padding": "causal"}),
    ],
)

SCHEMAS = [CONV1D, CONV1D_MUL, CONV1D_GRAD_INPUT, CONV1D_GRAD_WEIGHT, CONV1D_GRADS, CONV1D_GRAD_INPUT_LIKE,
           CONV1D_GRAD_WEIGHT_LIKE, *POOL_SCHEMAS]
