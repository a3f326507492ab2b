"""Export rules of the ops that gradients of convolutions, pools and strided slices emit, so that the training
graph of a CNN (``build_backward_graph``) runs on ONNX Runtime.

- The input gradient of a convolution (``conv1d_grad_input_internal``, frame-ops-nn's ``conv_transpose2d``) is
  ONNX's ``ConvTranspose``, with the ``output_padding`` that gives back the input's size.
- Its weight gradient (``conv1d/2d_grad_weight_internal``) is a ``Conv`` with the roles swapped: the input's
  batch axis becomes the channels, the output gradient the kernel, the stride the dilation and the dilation the
  stride (one ``Conv`` per group).
- A max pool's gradient (``max_pool1d/2d_grad_internal``) scatters the output gradient (``ScatterElements``,
  adding) at the ``Indices`` ONNX's ``MaxPool`` returns: the first maximum of each window, frame's tie rule.
- An average pool's gradient spreads ``gy / divisor`` over each window: a ``ConvTranspose`` with a kernel of ones.
- ``slice_grad_internal`` with steps other than 1 interleaves zeros between the rows (``Pad`` on a new axis, then
  ``Reshape``) before padding the slice back to the input's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from frame_core import Node

from .errors import OnnxError
from .export import Exporter
from .rules_export import RULES, rule

__all__ = ["RULES"]


def _x(ex: Exporter, node: Node, i: int = 0) -> str:
    return ex.input(node, i)


def _shape(node: Node, i: int = 0) -> tuple[int, ...]:
    return tuple(node.inputs[i].shape)


def _onnx_pads(padding: Any, n: int) -> list[int]:
    """frame's padding as ONNX's [befores..., afters...]: one int (every side), ``n`` ints (both sides of each
    axis) or ``2 n`` ints ((before, after) per spatial axis in order), as frame-ops-nn reads it."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * (2 * n)
        raise OnnxError(f"padding {padding!r} of a transposed convolution or a gradient has no export rule")
    values = [int(padding)] if isinstance(padding, (int, np.integer)) else [int(p) for p in padding]
    if len(values) == 1:
        return values * (2 * n)
    if len(values) == n:
        return values * 2
    return values[0::2][:n] + values[1::2][:n]


def _spatial(node: Node, n: int) -> tuple[list[int], list[int], list[int]]:
    """(strides, dilations, ONNX pads) of a frame conv/pool node with ``n`` spatial axes."""
    a = node.attrs
    return _per_axis(a.get("stride"), 1, n), _per_axis(a.get("dilation"), 1, n), _onnx_pads(a["padding"], n)


def _same_pads(size: Sequence[int], extent: Sequence[int], stride: Sequence[int]) -> list[int]:
    """'same' padding (output ceil(size / stride), the odd position after) as ONNX's [befores..., afters...]:
    a max-pool gradient keeps the mode (its pads follow the input's size), read here from x's shape."""
    total = [max((-(-s // t) - 1) * t + e - s, 0) for s, e, t in zip(size, extent, stride)]
    return [p // 2 for p in total] + [p - p // 2 for p in total]


def _per_axis(value: Any, default: int, n: int) -> list[int]:
    """An int or a list of ints (one for every axis, or ``n``) as ``n`` ints."""
    if value is None:
        return [default] * n
    values = [int(value)] if isinstance(value, (int, np.integer)) else [int(e) for e in value]
    return values * n if len(values) == 1 else values


def _as_channels_of_one(ex: Exporter, x: str, shape: Sequence[int], n: int) -> str:
    """``x[..., *spatial]`` as ``[M, 1, *spatial]`` (every leading position a sample of one channel)."""
    lead = int(np.prod(shape[:-n], dtype=np.int64)) if len(shape) > n else 1
    return ex.emit("Reshape", [x, ex.ints([lead, 1, *shape[-n:]])])


# -- convolutions --------------------------------------------------------------------------------------------
def _conv_transpose(ex: Exporter, gy: str, w: str, gy_shape: Sequence[int], w_shape: Sequence[int], out: Sequence[int],
                    strides: list[int], dilations: list[int], pads: list[int], groups: int) -> str:
    n = len(strides)
    extra = []
    for i in range(n):  # output_padding: what floor division dropped from the forward output size
        extent = dilations[i] * (w_shape[2 + i] - 1) + 1
        size = strides[i] * (gy_shape[2 + i] - 1) + extent - pads[i] - pads[n + i]
        extra.append(out[i] - size)
    if any(e < 0 for e in extra):
        raise OnnxError(f"a transposed convolution to size {list(out)} from {list(gy_shape)} cannot be written with "
                        "ONNX's output_padding")
    # ONNX Runtime refuses an output_padding of at least the stride (torch allows it below the dilation): such an
    # axis keeps that many positions of its after-padding instead, and what is left past the full output is zeros
    pads, tail = list(pads), [0] * n
    for i in range(n):
        if extra[i] >= strides[i]:
            kept = min(extra[i], pads[n + i])
            pads[n + i] -= kept
            tail[i], extra[i] = extra[i] - kept, 0
    y = ex.emit("ConvTranspose", [gy, w], strides=strides, dilations=dilations, pads=pads, group=groups,
                kernel_shape=list(w_shape[2:]), output_padding=extra if any(extra) else None)
    if any(tail):
        y = ex.emit("Pad", [y, ex.ints([0] * (n + 2) + [0, 0, *tail])])
    return y


@rule("conv1d_grad_input_internal")
def _conv1d_grad_input(ex: Exporter, node: Node) -> list[str]:
    strides, dilations, pads = _spatial(node, 1)
    return [_conv_transpose(ex, _x(ex, node, 0), _x(ex, node, 1), _shape(node, 0), _shape(node, 1),
                            [node.attrs["length"]], strides, dilations, pads, node.attrs.get("groups", 1))]


@rule("conv_transpose2d", "conv_transpose1d")
def _conv_transpose_nd(ex: Exporter, node: Node) -> list[str]:
    n = 2 if node.op == "conv_transpose2d" else 1
    strides, dilations, pads = _spatial(node, n)
    out = node.outputs[0].shape[2:]
    return [_conv_transpose(ex, _x(ex, node, 0), _x(ex, node, 1), _shape(node, 0), _shape(node, 1), out, strides,
                            dilations, pads, node.attrs.get("groups", 1))]


@rule("conv1d_grad_weight_internal", "conv2d_grad_weight_internal")
def _conv_grad_weight(ex: Exporter, node: Node) -> list[str]:
    """gw[o, c, k] = sum over b, t of gy[b, o, t] x_padded[b, c, t * stride + k * dilation]: a Conv of x (batch
    and channels swapped) with gy as its kernel, stride and dilation swapped, cut to the kernel's size."""
    n = 2 if node.op.startswith("conv2d") else 1
    strides, dilations, pads = _spatial(node, n)
    groups = node.attrs.get("groups", 1)
    x_shape, gy_shape = _shape(node, 0), _shape(node, 1)
    kernel = list(node.outputs[0].shape[2:])
    swap = [1, 0, *range(2, 2 + n)]
    x, gy = _x(ex, node, 0), _x(ex, node, 1)
    c_in, c_out = x_shape[1] // groups, gy_shape[1] // groups
    parts = []
    for g in range(groups):
        xg, gyg = x, gy
        if groups > 1:
            xg = ex.emit("Slice", [x, ex.ints([g * c_in]), ex.ints([(g + 1) * c_in]), ex.ints([1])])
            gyg = ex.emit("Slice", [gy, ex.ints([g * c_out]), ex.ints([(g + 1) * c_out]), ex.ints([1])])
        corr = ex.emit("Conv", [ex.emit("Transpose", [xg], perm=swap), ex.emit("Transpose", [gyg], perm=swap)],
                       strides=dilations, dilations=strides, pads=pads, kernel_shape=list(gy_shape[2:]))  # [C, O, K']
        corr = ex.emit("Slice", [corr, ex.ints([0] * n), ex.ints(kernel), ex.ints(list(range(2, 2 + n)))])
        parts.append(ex.emit("Transpose", [corr], perm=swap))                                             # [O, C, K]
    return [parts[0] if groups == 1 else ex.emit("Concat", parts, axis=0)]


# -- pools ---------------------------------------------------------------------------------------------------
def _pool_geometry(node: Node, n: int) -> tuple[list[int], list[int], list[int]]:
    a = node.attrs
    kernel = _per_axis(a["kernel_size"], 1, n)
    strides = kernel if a.get("stride") is None else _per_axis(a["stride"], 1, n)
    if a["padding"] == "same":  # (a max-pool gradient of x, input 0)
        return kernel, strides, _same_pads(_shape(node, 0)[-n:], kernel, strides)
    return kernel, strides, _onnx_pads(a["padding"], n)


def max_pool_indices(ex: Exporter, node: Node) -> tuple[str, Sequence[int]]:
    """``MaxPool``'s ``Indices`` of the pooled x (input 0) of a max-pool gradient node: per window, the flat
    position in x of its first maximum; and x's shape."""
    n = 2 if node.op.startswith("max_pool2d") else 1
    kernel, strides, pads = _pool_geometry(node, n)
    x_shape = _shape(node, 0)
    x = _as_channels_of_one(ex, _x(ex, node, 0), x_shape, n)
    _, indices = ex.emit("MaxPool", [x], n_out=2, kernel_shape=kernel, strides=strides, pads=pads)
    return indices, x_shape


@rule("max_pool1d_grad_internal", "max_pool2d_grad_internal")
def _max_pool_grad(ex: Exporter, node: Node) -> list[str]:
    indices, x_shape = max_pool_indices(ex, node)
    flat = ex.ints([-1])
    size = int(np.prod(x_shape, dtype=np.int64))
    zeros = ex.emit("Expand", [ex.const(0, node.inputs[1].dtype), ex.ints([size])])
    scattered = ex.emit("ScatterElements", [zeros, ex.emit("Reshape", [indices, flat]),
                                            ex.emit("Reshape", [_x(ex, node, 1), flat])], axis=0, reduction="add")
    return [ex.emit("Reshape", [scattered, ex.ints(list(x_shape))])]


@rule("avg_pool1d_grad_internal", "avg_pool2d_grad_internal")
def _avg_pool_grad(ex: Exporter, node: Node) -> list[str]:
    n = 2 if node.op.startswith("avg_pool2d") else 1
    a = node.attrs
    kernel, strides, pads = _pool_geometry(node, n)
    gy_shape = _shape(node, 0)
    size = [int(a["length"])] if n == 1 else [int(s) for s in a["size"]]
    dtype = node.inputs[0].dtype
    if a.get("count_include_pad", True):
        divisor = np.full([1] * n, float(np.prod(kernel)))
    else:  # the real (unpadded) positions of each window
        ones = np.pad(np.ones(size), [(pads[i], pads[n + i]) for i in range(n)])
        out = gy_shape[-n:]
        divisor = np.zeros(out)
        for tap in np.ndindex(*kernel):
            window = tuple(slice(tap[i], tap[i] + (out[i] - 1) * strides[i] + 1, strides[i]) for i in range(n))
            divisor += ones[window]
    gy = ex.emit("Div", [_x(ex, node, 0), ex.const(divisor, dtype)])
    gy = _as_channels_of_one(ex, gy, gy_shape, n)
    m = int(np.prod(gy_shape[:-n], dtype=np.int64)) if len(gy_shape) > n else 1
    spread = _conv_transpose(ex, gy, ex.const(np.ones([1, 1, *kernel]), dtype), [m, 1, *gy_shape[-n:]],
                             [1, 1, *kernel], size, strides, [1] * n, pads, 1)
    return [ex.emit("Reshape", [spread, ex.ints(list(node.outputs[0].shape))])]


# -- strided slices --------------------------------------------------------------------------------------------
@rule("slice_grad_internal")
def _slice_grad(ex: Exporter, node: Node) -> list[str]:
    """gy put back at the sliced positions of zeros shaped like the input, axis by axis."""
    a = node.attrs
    shape, gy_shape = list(a["input_shape"]), list(_shape(node))
    out = node.outputs[0]
    if any(d == 0 for d in gy_shape):  # an empty slice: the gradient is all zeros
        return [ex.emit("Expand", [ex.const(0, out.dtype), ex.ints(shape)])]
    y, cur = _x(ex, node), list(gy_shape)
    before, after = [0] * len(shape), [0] * len(shape)
    for ax, (start, step) in enumerate(zip(a["starts"], a["steps"])):
        count = cur[ax]
        if step < 0:  # the rows run backwards: reverse them, and start at the last one
            y = ex.emit("Slice", [y, ex.ints([-1]), ex.ints([-(2**62)]), ex.ints([ax]), ex.ints([-1])])
            start, step = start + (count - 1) * step, -step
        if step > 1:  # interleave step - 1 zero rows after each row, then drop the ones after the last
            cur_x = list(cur)
            y = ex.emit("Unsqueeze", [y, ex.ints([ax + 1])])
            pad = [0] * (len(cur) + 1) * 2
            pad[len(cur) + 1 + ax + 1] = step - 1
            y = ex.emit("Pad", [y, ex.ints(pad)])
            cur_x[ax] = count * step
            y = ex.emit("Reshape", [y, ex.ints(cur_x)])
            span = (count - 1) * step + 1
            y = ex.emit("Slice", [y, ex.ints([0]), ex.ints([span]), ex.ints([ax])])
            cur[ax] = span
        before[ax], after[ax] = start, shape[ax] - start - cur[ax]
    if any(before) or any(after):
        y = ex.emit("Pad", [y, ex.ints(before + after)])
    return [y]



# -- normalisations (frame-ops-nn), written with frame ops and exported through their rules ------------------
def _inline(ex: Exporter, node: Node, fn) -> list[str]:  # noqa: ANN001 - fn takes and returns traced tensors
    """The outputs of ``fn`` applied to the node's inputs, traced at their types and exported node by node."""
    import frame_core as fc

    graph = fc.trace(lambda *xs: list(fn(*xs)), *[v.type for v in node.inputs], name=f"{node.op}_onnx")
    for value, i in zip(graph.inputs, range(len(node.inputs))):
        ex.names[value] = ex.input(node, i)
    ex.run_nodes(graph)
    return [ex.emit("Identity", [ex.name_of(v)]) if v in graph.inputs else ex.name_of(v) for v in graph.outputs]


def _normalised(x, axes: list[int], eps: float):  # noqa: ANN001, ANN202 - traced tensors
    """(x - mean, xhat, 1 / std) over ``axes``, keeping them."""
    from frame_core import ops

    xc = x - ops.mean(x, axes=axes, keepdims=True)
    rstd = 1.0 / ops.sqrt(ops.mean(xc * xc, axes=axes, keepdims=True) + eps)
    return xc, xc * rstd, rstd


def _input_grad(g, xhat, rstd, axes: list[int]):  # noqa: ANN001, ANN202 - traced tensors
    """The gradient through xhat(x) over ``axes`` for the cotangent ``g`` of xhat."""
    from frame_core import ops

    return rstd * (g - ops.mean(g, axes=axes, keepdims=True) - xhat * ops.mean(g * xhat, axes=axes, keepdims=True))


@rule("layer_norm")
def _layer_norm(ex: Exporter, node: Node) -> list[str]:
    rank, k, eps = len(_shape(node)), len(_shape(node, 1)), node.attrs.get("eps", 1e-5)
    axes = list(range(rank - k, rank))
    return _inline(ex, node, lambda x, w, b: [_normalised(x, axes, eps)[1] * w + b])


@rule("layer_norm_grad_internal")
def _layer_norm_grad(ex: Exporter, node: Node) -> list[str]:
    from frame_core import ops

    rank, k, eps = len(_shape(node)), len(_shape(node, 1)), node.attrs.get("eps", 1e-5)
    axes, lead = list(range(rank - k, rank)), list(range(rank - k))

    def grads(x, w, gy):  # noqa: ANN001, ANN202
        _, xhat, rstd = _normalised(x, axes, eps)
        return [_input_grad(gy * w, xhat, rstd, axes), ops.sum(gy * xhat, axes=lead), ops.sum(gy, axes=lead)]
    return _inline(ex, node, grads)


def _per_channel(v, rank: int):  # noqa: ANN001, ANN202
    from frame_core import ops

    return ops.reshape(v, shape=[1, v.shape[0]] + [1] * (rank - 2))


@rule("batch_norm")
def _batch_norm(ex: Exporter, node: Node) -> list[str]:
    from frame_core import ops

    shape = _shape(node)
    rank, axes = len(shape), [0, *range(2, len(shape))]
    count = int(np.prod(shape, dtype=np.int64)) // shape[1]
    a = node.attrs
    eps, m = a.get("eps", 1e-5), a.get("momentum", 0.1)

    def training(x, w, b, rm, rv):  # noqa: ANN001, ANN202 - batch statistics; the running ones updated
        xc, xhat, _ = _normalised(x, axes, eps)
        mean = ops.mean(x, axes=axes)
        var = ops.mean(xc * xc, axes=axes)
        return [xhat * _per_channel(w, rank) + _per_channel(b, rank), rm * (1.0 - m) + mean * m,
                rv * (1.0 - m) + var * (m * count / (count - 1))]

    def inference(x, w, b, rm, rv):  # noqa: ANN001, ANN202 - the running statistics, returned unchanged
        scale = w / ops.sqrt(rv + eps)
        return [(x - _per_channel(rm, rank)) * _per_channel(scale, rank) + _per_channel(b, rank), rm, rv]
    return _inline(ex, node, training if a.get("training", True) else inference)


@rule("batch_norm_grad_internal")
def _batch_norm_grad(ex: Exporter, node: Node) -> list[str]:
    from frame_core import ops

    shape = _shape(node)
    rank, axes = len(shape), [0, *range(2, len(shape))]
    count = int(np.prod(shape, dtype=np.int64)) // shape[1]
    eps, m = node.attrs.get("eps", 1e-5), node.attrs.get("momentum", 0.1)

    def grads(x, w, gy, g_rm, g_rv):  # noqa: ANN001, ANN202 - the running averages' cotangents added
        xc, xhat, rstd = _normalised(x, axes, eps)
        gx = _input_grad(gy * _per_channel(w, rank), xhat, rstd, axes)
        gx = gx + _per_channel(g_rm * (m / count), rank) + xc * _per_channel(g_rv * (2.0 * m / (count - 1)), rank)
        return [gx, ops.sum(gy * xhat, axes=axes), ops.sum(gy, axes=axes)]
    return _inline(ex, node, grads)


def _groups_of(x, groups: int):  # noqa: ANN001, ANN202 - [N, C, ...] -> [N, groups, values per group]
    from frame_core import ops

    return ops.reshape(x, shape=[x.shape[0], groups, int(np.prod(x.shape[1:], dtype=np.int64)) // groups])


@rule("group_norm")
def _group_norm(ex: Exporter, node: Node) -> list[str]:
    """Each sample's channel groups normalised over their channels and positions, then a per-channel affine map
    (ONNX's GroupNormalization-18 scales per group, and opset 21 is newer than the default export opset)."""
    from frame_core import ops

    shape, groups, eps = _shape(node), node.attrs["num_groups"], node.attrs.get("eps", 1e-5)

    def forward(x, w, b):  # noqa: ANN001, ANN202 - traced tensors
        xhat = ops.reshape(_normalised(_groups_of(x, groups), [2], eps)[1], shape=list(shape))
        return [xhat * _per_channel(w, len(shape)) + _per_channel(b, len(shape))]
    return _inline(ex, node, forward)


@rule("group_norm_grad_internal")
def _group_norm_grad(ex: Exporter, node: Node) -> list[str]:
    from frame_core import ops

    shape, groups, eps = _shape(node), node.attrs["num_groups"], node.attrs.get("eps", 1e-5)
    axes = [0, *range(2, len(shape))]

    def grads(x, w, gy):  # noqa: ANN001, ANN202
        _, xhat, rstd = _normalised(_groups_of(x, groups), [2], eps)
        gx = _input_grad(_groups_of(gy * _per_channel(w, len(shape)), groups), xhat, rstd, [2])
        return [ops.reshape(gx, shape=list(shape)), ops.sum(gy * ops.reshape(xhat, shape=list(shape)), axes=axes),
                ops.sum(gy, axes=axes)]
    return _inline(ex, node, grads)


# -- frame-ops-nn's adaptive average pool: each bin's mean, and the gradient spread back over the bins -----------
def _bin_ranges(n: int, m: int) -> list[tuple[int, int]]:
    """Bin i of m over n positions: floor(i n / m) .. ceil((i + 1) n / m) - 1 (torch's bins, frame-ops-nn's)."""
    return [((i * n) // m, -(-((i + 1) * n) // m)) for i in range(m)]


def _bin_means(x, axis: int, m: int):  # noqa: ANN001, ANN202 - traced tensors
    from frame_core import ops

    n = x.shape[axis]
    if n == m:
        return x
    if m == 1:
        return ops.mean(x, axes=[axis], keepdims=True)
    return ops.concat(*(ops.mean(ops.slice(x, starts=[a], stops=[b], axes=[axis]), axes=[axis], keepdims=True)
                        for a, b in _bin_ranges(n, m)), axis=axis)


def _bin_spread(g, axis: int, n: int):  # noqa: ANN001, ANN202 - traced tensors
    """Each position's share of the bins holding it, read by ``gather`` (one per bin a position can be in: one or
    two when pooling down, more when the output is larger), so that a non-finite cotangent reaches only its own
    bin's positions, as frame's kernel does."""
    from frame_core import ops

    m, rank = g.shape[axis], len(g.shape)
    axis %= rank
    if n == m:
        return g
    ranges = _bin_ranges(n, m)
    sizes = np.array([b - a for a, b in ranges], np.dtype(g.dtype.np))
    scaled = g * (1.0 / sizes).reshape([m if k == axis else 1 for k in range(rank)])
    holders = [[i for i, (a, b) in enumerate(ranges) if a <= j < b] for j in range(n)]
    out = None
    for r in range(max(len(h) for h in holders)):
        rows = ops.gather(scaled, np.array([h[min(r, len(h) - 1)] for h in holders], np.int64), axis=axis)
        inside = np.array([r < len(h) for h in holders]).reshape([n if k == axis else 1 for k in range(rank)])
        if r:
            rows = ops.where(inside, rows, np.zeros((), np.dtype(g.dtype.np)))
        out = rows if out is None else out + rows
    return out


@rule("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(ex: Exporter, node: Node) -> list[str]:
    oh, ow = node.outputs[0].shape[-2:]
    return _inline(ex, node, lambda x: [_bin_means(_bin_means(x, -2, oh), -1, ow)])


@rule("adaptive_avg_pool2d_grad_internal")
def _adaptive_avg_pool2d_grad(ex: Exporter, node: Node) -> list[str]:
    h, w = node.outputs[0].shape[-2:]
    return _inline(ex, node, lambda gy: [_bin_spread(_bin_spread(gy, -2, h), -1, w)])


# -- frame-ops-sequence's recurrences: linear_scan as an ONNX Scan, selective_scan written with it ---------------
@rule("linear_scan")
def _linear_scan(ex: Exporter, node: Node) -> list[str]:
    """h_t = a_t h_{t-1} + b_t along ``axis`` (from the end with ``reverse``): a Scan over that axis whose state is
    h, starting at zeros."""
    from onnx import helper

    from .export import onnx_type

    shape = list(_shape(node))
    rank = len(shape)
    axis, reverse = node.attrs["axis"] % rank, int(bool(node.attrs.get("reverse")))
    if shape[axis] == 0:  # no step: ONNX Runtime's Scan cannot slice 0 rows; the empty result is known
        return [ex.const(np.zeros(shape, node.outputs[0].dtype.np), node.outputs[0].dtype)]
    perm = [axis, *(k for k in range(rank) if k != axis)]
    a, b = _x(ex, node, 0), _x(ex, node, 1)
    if axis:
        a, b = ex.emit("Transpose", [a], perm=perm), ex.emit("Transpose", [b], perm=perm)
    row = [shape[k] for k in perm[1:]]
    elem = onnx_type(node.outputs[0])
    h_in, a_t, b_t, h_out, y_t = (ex.fresh(n) for n in ("h_in", "a_t", "b_t", "h_out", "y_t"))
    body = helper.make_graph(
        [helper.make_node("Mul", [a_t, h_in], [ex.fresh("ah")], name=ex.fresh("n_Mul"))], ex.fresh("linear_scan_body"),
        [helper.make_tensor_value_info(n, elem, row) for n in (h_in, a_t, b_t)],
        [helper.make_tensor_value_info(n, elem, row) for n in (h_out, y_t)])
    body.node.append(helper.make_node("Add", [body.node[0].output[0], b_t], [h_out], name=ex.fresh("n_Add")))
    body.node.append(helper.make_node("Identity", [h_out], [y_t], name=ex.fresh("n_Identity")))
    zeros = ex.emit("Expand", [ex.const(0, node.outputs[0].dtype), ex.ints(row)])
    _, ys = ex.emit("Scan", [zeros, a, b], n_out=2, body=body, num_scan_inputs=2,
                    scan_input_directions=[reverse, reverse], scan_output_directions=[reverse])
    if not axis:
        return [ys]
    return [ex.emit("Transpose", [ys], perm=[perm.index(k) for k in range(rank)])]


_OPTIONAL = ("D", "z", "delta_bias")


@rule("selective_scan")
def _selective_scan(ex: Exporter, node: Node) -> list[str]:
    """Mamba's selective scan, time-major: a = exp(delta A), b = delta B u (both [L, batch, D, N]),
    h = linear_scan(a, b), y = sum_n h C + D u, out = y silu(z)."""
    from frame_core import ops

    names = node.attrs.get("optional_inputs")
    names = tuple(names) if names is not None else _OPTIONAL[:len(node.inputs) - 5]
    batch, dim, length = _shape(node)
    n = _shape(node, 2)[1]
    softplus = bool(node.attrs.get("delta_softplus"))

    def time_major(x):  # noqa: ANN001, ANN202 - [batch, D, L] -> [L, batch, D, 1]
        return ops.expand_dims(ops.transpose(x, perm=[2, 0, 1]), axes=[3])

    def per_channel(m):  # noqa: ANN001, ANN202 - B or C -> broadcastable to [L, batch, D, N]
        if m.shape == (dim, n):                                          # constant
            return ops.reshape(m, shape=[1, 1, dim, n])
        if len(m.shape) == 3:                                            # variable [batch, N, L]
            return ops.expand_dims(ops.transpose(m, perm=[2, 0, 1]), axes=[2])
        g = m.shape[1]                                                   # grouped [batch, G, N, L]: D/G channels each
        m = ops.expand_dims(ops.transpose(m, perm=[3, 0, 1, 2]), axes=[3])          # [L, batch, G, 1, N]
        return ops.reshape(ops.broadcast_to(m, shape=[length, batch, g, dim // g, n]), shape=[length, batch, dim, n])

    def forward(u, delta, A, B, C, *rest):  # noqa: ANN001, ANN202 - traced tensors
        extra = dict(zip(names, rest))
        if "delta_bias" in extra:
            delta = delta + ops.reshape(extra["delta_bias"], shape=[1, dim, 1])
        if softplus:  # log(1 + e^x) without overflow
            r = ops.relu(delta)
            delta = r + ops.log(ops.exp(delta - r * 2.0) + 1.0)
        d4 = time_major(delta)
        a = ops.exp(d4 * ops.reshape(A, shape=[1, 1, dim, n]))
        h = ops.linear_scan(a, d4 * time_major(u) * per_channel(B), axis=0)
        y = ops.transpose(ops.sum(h * per_channel(C), axes=[3]), perm=[1, 2, 0])    # [batch, D, L]
        if "D" in extra:
            y = y + u * ops.reshape(extra["D"], shape=[1, dim, 1])
        if "z" in extra:
            y = y * (extra["z"] * ops.sigmoid(extra["z"]))
        return [y]
    return _inline(ex, node, forward)
