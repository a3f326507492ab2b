"""Import rules of network layers: convolution, pooling, normalisation and recurrent cells.

Convolutions and pools of one spatial axis map to frame-ops-sequence's ``conv1d``/``max_pool1d``/
``avg_pool1d``; of two axes to frame-ops-nn's ``conv2d``/``max_pool2d``/``avg_pool2d`` when that pack is
installed, else (and for three or more axes) to an equivalent of strided slices and a matrix product (im2col), or
the maximum or mean of the window's slices, that differentiates like any graph. Normalisations map to frame-ops-nn's ``batch_norm``/``layer_norm`` when installed, else are written out
(mean, variance, scale). ``RNN``/``GRU``/``LSTM`` become a frame
``scan`` over time per direction whose body is the cell, with the input projection of all steps done before it
(``sequence_lens`` masks the body).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.helper import np_dtype_to_tensor_dtype

from frame_core import ops

from ._import import NodeContext, Unsupported, rule
from .rules_ops import invalid, like, norm_axis, np_dtype, rank_of, reshape_keeping_batch, shape_of

__all__: list[str] = []


def _have(op: str) -> bool:
    import frame_core as fc

    return op in fc.registry().schemas


def _spatial(cx: NodeContext, x: Any, kernel: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, pads before, pads after) per spatial axis, auto_pad resolved."""
    n = len(kernel)
    strides = cx.attr("strides", "ints") or [1] * n
    dilations = cx.attr("dilations", "ints") or [1] * n
    pads = cx.attr("pads", "ints") or [0] * (2 * n)
    auto = cx.attr("auto_pad", "string", "NOTSET")
    before, after = list(pads[:n]), list(pads[n:])
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(n):
            size = shape_of(x)[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
            small, big = total // 2, total - total // 2
            before[i], after[i] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        before, after = [0] * n, [0] * n
    return strides, dilations, before, after


def _bias(y: Any, cx: NodeContext, i: int, spatial: int) -> Any:
    if not cx.has(i):
        return y
    b = cx.input(i)
    return y + ops.reshape(b, shape=[shape_of(b)[0]] + [1] * spatial)


@rule("Conv")
def _conv(cx: NodeContext) -> Any:
    x, w = cx.input(0), cx.input(1)
    kernel = list(shape_of(w)[2:])
    n = len(kernel)
    strides, dilations, before, after = _spatial(cx, x, kernel)
    groups = cx.attr("group", "int", 1)
    if n == 1:
        y = ops.conv1d(x, w, stride=strides[0], padding=[before[0], after[0]], dilation=dilations[0], groups=groups)
    elif n == 2 and _have("conv2d"):
        y = ops.conv2d(x, w, stride=strides, padding=[before[0], after[0], before[1], after[1]], dilation=dilations,
                       groups=groups)
    elif groups != 1:
        raise Unsupported(f"a grouped {n}-D convolution" + (" without frame-ops-nn (pip install frame-ops-nn)"
                                                             if n == 2 else " (frame has grouped 1-D and 2-D)"))
    else:  # 2-D without frame-ops-nn, and 3-D or more: slices, a stack and one matmul (im2col)
        y = _conv_im2col(x, w, strides, dilations, before, after)
    return _bias(y, cx, 2, n)


@rule("ConvTranspose")
def _conv_transpose(cx: NodeContext) -> Any:
    """frame-ops-nn's ``conv_transpose1d``/``conv_transpose2d``: the adjoint of a convolution in its input, as
    frame-onnx exports a convolution's input gradient (explicit pads and ``output_padding``)."""
    x, w = cx.input(0), cx.input(1)
    kernel = list(shape_of(w)[2:])
    n = len(kernel)
    op = {1: "conv_transpose1d", 2: "conv_transpose2d"}.get(n)
    if op is None or not _have(op):
        raise Unsupported(f"a {n}-D transposed convolution" + (" without frame-ops-nn (pip install frame-ops-nn)"
                                                               if op else " (frame has 1-D and 2-D)"))
    if cx.attr("output_shape", "ints") is not None:
        raise Unsupported("ConvTranspose with output_shape (give pads and output_padding instead)")
    auto = cx.attr("auto_pad", "string", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"ConvTranspose with auto_pad={auto} (give explicit pads)")
    strides = cx.attr("strides", "ints") or [1] * n
    dilations = cx.attr("dilations", "ints") or [1] * n
    pads = [0] * (2 * n) if auto == "VALID" else (cx.attr("pads", "ints") or [0] * (2 * n))
    extra = cx.attr("output_padding", "ints") or [0] * n
    if any(e >= max(s, d) for e, s, d in zip(extra, strides, dilations)):
        raise Unsupported(f"output_padding {list(extra)} not smaller than the stride or dilation")
    padding = [p for i in range(n) for p in (pads[i], pads[n + i])]
    y = getattr(ops, op)(x, w, stride=list(strides), padding=padding, dilation=list(dilations),
                         groups=cx.attr("group", "int", 1), output_padding=list(extra))
    return _bias(y, cx, 2, n)


def _taps(x: Any, kernel: list[int], strides: list[int], dilations: list[int]) -> tuple[list[Any], list[int]]:
    """The prod(kernel) strided views of a padded ``x[B, C, *spatial]``, one per kernel tap (in row-major tap
    order), each ``[B, C, *out]``."""
    n = len(kernel)
    spatial = shape_of(x)[2:]
    out = [(size - (k - 1) * d - 1) // s + 1 for size, k, s, d in zip(spatial, kernel, strides, dilations)]
    if any(o <= 0 for o in out):
        raise Unsupported(f"a window larger than the padded input ({'x'.join(map(str, spatial))})")
    taps = []
    for tap in np.ndindex(*kernel):
        starts = [t * d for t, d in zip(tap, dilations)]
        taps.append(ops.slice(x, starts=starts, stops=[b + (o - 1) * s + 1 for b, o, s in zip(starts, out, strides)],
                              steps=list(strides), axes=list(range(2, 2 + n))))
    return taps, out


def _pad_spatial(x: Any, before: list[int], after: list[int]) -> Any:
    n = len(before)
    return ops.pad(x, before=before, after=after, axes=list(range(2, 2 + n))) if any(before) or any(after) else x


def _conv_im2col(x: Any, w: Any, strides: list[int], dilations: list[int], before: list[int],
                 after: list[int]) -> Any:
    """A convolution of any number of spatial axes as one matrix product: [O, C*K] @ [B, C*K, prod(out)]."""
    c = shape_of(x)[1]
    o, kernel = shape_of(w)[0], list(shape_of(w)[2:])
    taps, out = _taps(_pad_spatial(x, before, after), kernel, strides, dilations)
    k = int(np.prod(kernel))
    stacked = ops.stack(*taps, axis=2)
    cols = reshape_keeping_batch(stacked, [shape_of(stacked)[0], c * k, int(np.prod(out))])  # [B, C*K, prod(out)]
    y = ops.matmul(ops.reshape(w, shape=[o, c * k]), cols)                               # [B, O, prod(out)]
    return reshape_keeping_batch(y, [shape_of(y)[0], o, *out])


@rule("MaxPool", "AveragePool")
def _pool(cx: NodeContext) -> Any:
    """frame's pool ops for the plain cases; dilated windows, ``ceil_mode=1`` windows that hang past the padding,
    and the pools frame has no op for, as the maximum or the mean of the window's strided slices."""
    x = cx.input(0)
    if len(cx.node.output) > 1 and cx.node.output[1]:
        raise Unsupported("MaxPool's Indices output")
    kernel = cx.attr("kernel_shape", "ints")
    n = len(kernel)
    strides, dilations, before, after = _spatial(cx, x, kernel)
    is_max = cx.node.op_type == "MaxPool"
    include = bool(cx.attr("count_include_pad", "int", 0))
    ceil = bool(cx.attr("ceil_mode", "int", 0))
    sizes = shape_of(x)[2:]
    # ceil_mode: one more window where the last would start inside the input or its leading padding (ONNX
    # Runtime's and torch's rule); the positions it reads past the trailing padding are left out of it
    extra = [max(0, (_pooled_size(size, k, s, d, b, a, ceil) - 1) * s + (k - 1) * d + 1 - (size + b + a))
             for size, k, s, d, b, a in zip(sizes, kernel, strides, dilations, before, after)]
    padded = any(before) or any(after)
    if not any(extra) and all(d == 1 for d in dilations):
        if n == 1 and (is_max or include or not padded):
            if is_max:
                return ops.max_pool1d(x, kernel_size=kernel[0], stride=strides[0], padding=[before[0], after[0]])
            return ops.avg_pool1d(x, kernel_size=kernel[0], stride=strides[0], padding=[before[0], after[0]])
        if n == 2 and _have("max_pool2d"):
            pads = [before[0], after[0], before[1], after[1]]
            if is_max:
                return ops.max_pool2d(x, kernel_size=kernel, stride=strides, padding=pads)
            return ops.avg_pool2d(x, kernel_size=kernel, stride=strides, padding=pads, count_include_pad=include)
    return _window_pool(x, kernel, strides, dilations, before, [a + e for a, e in zip(after, extra)], is_max,
                        before if include else [0] * n, after if include else [0] * n)


def _pooled_size(size: int, k: int, s: int, d: int, before: int, after: int, ceil: bool) -> int:
    span = size + before + after - (k - 1) * d - 1
    if span < 0:
        raise Unsupported(f"a window of {(k - 1) * d + 1} positions larger than the padded input ({size + before + after})")
    out = (-(-span // s) if ceil else span // s) + 1
    return out - 1 if ceil and (out - 1) * s >= size + before else out


def _window_pool(x: Any, kernel: list[int], strides: list[int], dilations: list[int], before: list[int],
                 after: list[int], is_max: bool, counted_before: list[int], counted_after: list[int]) -> Any:
    """The maximum (padding at -inf) or the mean of the window's strided slices of ``x`` padded by ``before`` and
    ``after``; a mean divides by the number of positions in the window that lie inside ``x`` widened by
    ``counted_before``/``counted_after`` (the explicit padding when it counts, nothing otherwise)."""
    spatial = shape_of(x)[2:]
    xp = _pad_spatial(x, before, after)
    if is_max and (any(before) or any(after)):  # the padding never wins: -inf where it lies outside x
        outside = ~np.pad(np.ones(spatial, bool), list(zip(before, after)))
        xp = ops.where(outside, like(-np.inf, x), xp)
    taps, out_size = _taps(xp, kernel, strides, dilations)
    if is_max:
        out = taps[0]
        for t in taps[1:]:
            out = ops.maximum(out, t)
        return out
    total = taps[0]
    for t in taps[1:]:
        total = total + t
    counted = np.pad(np.pad(np.ones(spatial), list(zip(counted_before, counted_after)), constant_values=1.0),
                     [(b - cb, a - ca) for b, a, cb, ca in zip(before, after, counted_before, counted_after)])
    count = np.asarray(sum(counted[tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in
                                         zip(tap, dilations, out_size, strides))] for tap in np.ndindex(*kernel)))
    if np.all(count == count.flat[0]):
        return total * (1.0 / float(count.flat[0]))
    return total / like(count, x)


@rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: NodeContext) -> Any:
    x = cx.input(0)
    axes = list(range(2, rank_of(x)))
    return (ops.mean if cx.node.op_type == "GlobalAveragePool" else ops.max)(x, axes=axes, keepdims=True)


@rule("BatchNormalization")
def _batch_norm(cx: NodeContext) -> Any:
    if cx.attr("training_mode", "int", 0) or any(cx.node.output[1:]):
        raise Unsupported("batch normalisation in training mode (export the model in eval mode)")
    x, scale, bias, mean, var = (cx.input(i) for i in range(5))
    eps = cx.attr("epsilon", "float", 1e-5)
    if _have("batch_norm") and all(shape_of(v) == (shape_of(x)[1],) for v in (scale, bias, mean, var)):
        return ops.batch_norm(x, scale, bias, mean, var, training=False, eps=eps)[0]
    spatial = rank_of(x) - 2
    shape = [shape_of(scale)[0]] + [1] * spatial

    def per_channel(v: Any) -> Any:
        return ops.reshape(v, shape=shape)
    inv = per_channel(ops.div(scale, ops.sqrt(var + eps)))
    return (x - per_channel(mean)) * inv + per_channel(bias)


@rule("InstanceNormalization")
def _instance_norm(cx: NodeContext) -> Any:
    x, scale, bias = cx.input(0), cx.input(1), cx.input(2)
    eps = cx.attr("epsilon", "float", 1e-5)
    axes = list(range(2, rank_of(x)))  # each (sample, channel) over its spatial axes
    if not axes:
        raise Unsupported("an input without spatial axes (rank 2)")
    shape = [shape_of(scale)[0]] + [1] * len(axes)
    centred = x - ops.mean(x, axes=axes, keepdims=True)
    y = centred / ops.sqrt(ops.mean(ops.square(centred), axes=axes, keepdims=True) + eps)
    return y * ops.reshape(scale, shape=shape) + ops.reshape(bias, shape=shape)


@rule("GroupNormalization")
def _group_norm(cx: NodeContext) -> Any:
    """Each sample's channels in ``num_groups`` groups, each group normalised over its channels and positions,
    then scaled: per channel from opset 21 (scale and bias ``[C]``, torch's ``GroupNorm``), per group in opset
    18 (``[num_groups]``, each entry repeated over its group's channels). frame-ops-nn's ``group_norm`` when
    installed, else written out."""
    x, scale, bias = cx.input(0), cx.input(1), cx.input(2)
    groups = cx.attr("num_groups", "int")
    eps = cx.attr("epsilon", "float", 1e-5)
    if rank_of(x) < 2:
        raise invalid(cx, f"the input must be [N, C, ...], got rank {rank_of(x)}")
    c = shape_of(x)[1]
    if groups is None or groups < 1 or c % groups:
        raise invalid(cx, f"num_groups {groups} must divide the {c} channels")
    per_group = cx.opset < 21
    size = groups if per_group else c
    if shape_of(scale) != (size,) or shape_of(bias) != (size,):
        hint = ("; onnx.version_converter moves GroupNormalization to opset 21 without repeating its per-group "
                "scale and bias over the channels: import the opset-18 model as it is" if shape_of(scale) == (groups,)
                else "")
        raise invalid(cx, f"scale and bias must be [{size}] ({'num_groups' if per_group else 'C'} in opset "
                          f"{cx.opset}), got {list(shape_of(scale))} and {list(shape_of(bias))}{hint}")
    if per_group and groups != c:
        owner = np.arange(c) // (c // groups)  # the group of each channel
        scale, bias = (v[owner] if isinstance(v, np.ndarray) else ops.gather(v, owner, axis=0) for v in (scale, bias))
    if _have("group_norm"):
        return ops.group_norm(x, scale, bias, num_groups=groups, eps=eps)
    shape = list(shape_of(x))
    grouped = reshape_keeping_batch(x, [shape[0], groups, int(np.prod(shape[1:], dtype=np.int64)) // groups])
    centred = grouped - ops.mean(grouped, axes=[2], keepdims=True)
    y = centred / ops.sqrt(ops.mean(ops.square(centred), axes=[2], keepdims=True) + eps)
    channel = [c] + [1] * (len(shape) - 2)
    return (reshape_keeping_batch(y, shape) * ops.reshape(scale, shape=channel)
            + ops.reshape(bias, shape=channel))


@rule("LayerNormalization")
def _layer_norm(cx: NodeContext) -> Any:
    if any(cx.node.output[1:]):
        raise Unsupported("LayerNormalization's Mean/InvStdDev outputs")
    x = cx.input(0)
    axis = norm_axis(cx.attr("axis", "int", -1), rank_of(x), cx)
    eps = cx.attr("epsilon", "float", 1e-5)
    axes = list(range(axis, rank_of(x)))
    normalised = tuple(shape_of(x)[axis:])
    if (_have("layer_norm") and cx.has(2) and shape_of(cx.input(1)) == normalised
            and shape_of(cx.input(2)) == normalised):
        return ops.layer_norm(x, cx.input(1), cx.input(2), eps=eps)
    centred = x - ops.mean(x, axes=axes, keepdims=True)
    y = centred / ops.sqrt(ops.mean(ops.square(centred), axes=axes, keepdims=True) + eps)
    y = y * cx.input(1)
    return y + cx.input(2) if cx.has(2) else y


@rule("RMSNormalization")
def _rms_norm(cx: NodeContext) -> Any:
    """opset 23's ``RMSNormalization`` (torch's ``nn.RMSNorm``, the norm of LLaMA-style transformers):
    ``x / sqrt(mean(x², axes from axis on) + epsilon) * scale``, computed in float32 for 16-bit inputs
    (``stash_type`` 1, the default; other stash types are refused)."""
    x, scale = cx.input(0), cx.input(1)
    axis = norm_axis(cx.attr("axis", "int", -1), rank_of(x), cx)
    eps = cx.attr("epsilon", "float", 1e-5)
    if cx.attr("stash_type", "int", 1) != 1:
        raise Unsupported(f"RMSNormalization with stash_type {cx.attr('stash_type', 'int')} (frame computes in "
                          "float32, stash_type 1, or in the input's wider type)")
    dtype = np_dtype(x)
    wide = ops.cast(x, to="f32") if dtype.itemsize < 4 else x
    y = wide / ops.sqrt(ops.mean(ops.square(wide), axes=list(range(axis, rank_of(x))), keepdims=True)
                        + like(eps, wide))
    if dtype.itemsize < 4:
        y = ops.cast(y, to=str(x.dtype))
    return y * scale


def _negative_log_likelihood(cx: NodeContext, logp: Any, target: Any, weight: Any) -> Any:
    """ONNX's ``NegativeLogLikelihoodLoss`` of log-probabilities ``logp [N, C, d...]`` at class indices ``target
    [N, d...]``: ``-logp[n, target, d] * weight[target]``, 0 where ``target`` is ``ignore_index``, reduced by
    ``reduction`` (``mean`` divides by the summed weights of the targets kept, as torch's ``nll_loss``)."""
    reduction = cx.attr("reduction", "string", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise invalid(cx, f"reduction {reduction!r} is not one of none, sum, mean")
    ignore = cx.attr("ignore_index", "int")
    rank, classes = rank_of(logp), shape_of(logp)[1]
    if rank < 2 or tuple(shape_of(target)) != (shape_of(logp)[0], *shape_of(logp)[2:]):
        raise invalid(cx, f"target of shape {list(shape_of(target))} must be the input's {list(shape_of(logp))} "
                          "without its class axis 1")
    if ignore is not None:  # (the ignored positions read class 0, weighted 0)
        target = ops.where(ops.equal(target, np.int64(ignore)), np.int64(0), target)
    chosen = ops.one_hot(target, depth=classes, dtype=str(logp.dtype))  # [N, d..., C]
    last = ops.transpose(logp, perm=[0, *range(2, rank), 1]) if rank > 2 else logp
    picked = ops.sum(last * chosen, axes=[-1])
    weights = None if weight is None else ops.sum(chosen * weight, axes=[-1])
    if ignore is not None:
        kept = ops.where(ops.equal(cx.input(1), np.int64(ignore)), like(0, logp), like(1, logp))
        weights = kept if weights is None else weights * kept
    loss = ops.neg(picked) if weights is None else ops.neg(picked) * weights
    if reduction == "none":
        return loss
    if reduction == "sum" or weights is not None:
        total = ops.sum(loss, axes=list(range(rank - 1)))
        return total if reduction == "sum" else total / ops.sum(weights, axes=list(range(rank - 1)))
    return ops.mean(loss, axes=list(range(rank - 1)))


@rule("NegativeLogLikelihoodLoss")
def _nll_loss(cx: NodeContext) -> Any:
    """torch's ``nll_loss`` as ONNX writes it (any number of positions after the class axis, class weights,
    ``ignore_index``, every reduction)."""
    return _negative_log_likelihood(cx, cx.input(0), cx.input(1), cx.input(2) if cx.has(2) else None)


@rule("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(cx: NodeContext) -> Any:
    """torch's ``cross_entropy`` as ONNX writes it: the negative log-likelihood of ``log_softmax`` over the class
    axis 1, and that ``log_softmax`` as the optional second output."""
    logp = ops.log_softmax(cx.input(0), axis=1)
    loss = _negative_log_likelihood(cx, logp, cx.input(1), cx.input(2) if cx.has(2) else None)
    return [loss, logp] if len(cx.node.output) > 1 and cx.node.output[1] else loss


def _heads(x: Any, heads: int) -> Any:
    """``[B, L, heads * E]`` as ``[B, heads, L, E]``."""
    b, length, width = shape_of(x)
    return ops.transpose(ops.reshape(x, shape=[b, length, heads, width // heads]), perm=[0, 2, 1, 3])


@rule("Attention")
def _attention(cx: NodeContext) -> Any:
    """opset 23's ``Attention``, which torch's exporter writes for ``scaled_dot_product_attention`` from opset 23:
    ``softmax(softcap(Q K^T scale) + mask) V`` over inputs ``[B, heads, L, E]`` (or ``[B, L, heads * E]`` with
    ``q_num_heads``/``kv_num_heads``), fewer key/value heads shared by groups of query heads (GQA, MQA), a
    boolean (True attends) or additive mask, and ``is_causal`` (query i attends key j <= i). A query row with
    every key masked gives zeros, as the standard says. A key/value cache and the extra outputs are refused."""
    if any(cx.has(i) for i in (4, 5, 6)):
        raise Unsupported("Attention with a key/value cache (past_key, past_value or nonpad_kv_seqlen)")
    if any(cx.node.output[1:]):
        raise Unsupported("Attention's present_key, present_value or qk_matmul_output outputs")
    q, k, v = cx.input(0), cx.input(1), cx.input(2)
    precision = cx.attr("softmax_precision", "int")
    if precision is not None and precision != np_dtype_to_tensor_dtype(np_dtype(q)):
        raise Unsupported(f"Attention with softmax_precision {precision} (frame computes the softmax in the "
                          "inputs' type)")
    rank = rank_of(q)
    if rank == 3:
        hq, hk = cx.attr("q_num_heads", "int"), cx.attr("kv_num_heads", "int")
        if not hq or not hk:
            raise invalid(cx, "3-D inputs need the q_num_heads and kv_num_heads attributes")
        q, k, v = _heads(q, hq), _heads(k, hk), _heads(v, hk)
    elif rank == 4:
        hq, hk = shape_of(q)[1], shape_of(k)[1]
    else:
        raise invalid(cx, f"Q of shape {list(shape_of(q))} must be [B, heads, L, E] or [B, L, heads * E]")
    if hq % hk or shape_of(v)[1] != hk:
        raise invalid(cx, f"{hq} query heads cannot be shared by {hk} key heads and {shape_of(v)[1]} value heads")
    b, _, length, e = shape_of(q)
    s = shape_of(k)[2]
    if hk != hq:  # each key/value head serves hq / hk query heads in a row
        k, v = (ops.reshape(ops.broadcast_to(ops.expand_dims(t, axes=[2]), shape=[b, hk, hq // hk, s, shape_of(t)[3]]),
                            shape=[b, hq, s, shape_of(t)[3]]) for t in (k, v))
    root = like(np.sqrt(cx.attr("scale", "float", 1.0 / np.sqrt(e))), q)  # Q and K each scaled by sqrt(scale)
    scores = ops.matmul(q * root, ops.transpose(k * root, perm=[0, 1, 3, 2]))
    softcap = cx.attr("softcap", "float", 0.0)
    if softcap > 0:
        scores = ops.tanh(scores * like(1 / softcap, scores)) * like(softcap, scores)
    minus_inf = like(-np.inf, scores)
    if cx.has(3):
        mask = cx.input(3)
        scores = ops.where(mask, scores, minus_inf) if np_dtype(mask) == np.bool_ else scores + mask
    if cx.attr("is_causal", "int", 0):
        scores = ops.where(np.tril(np.ones((length, s), bool)), scores, minus_inf)
    if not cx.has(3) and not cx.attr("is_causal", "int", 0):
        weights = ops.softmax(scores, axis=-1)
    else:  # a row with every key masked attends to nothing: zeros, not softmax's NaN
        empty = ops.equal(ops.max(scores, axes=[-1], keepdims=True), minus_inf)
        weights = ops.where(empty, like(0, scores), ops.softmax(ops.where(empty, like(0, scores), scores), axis=-1))
    y = ops.matmul(weights, v)
    if rank == 3:
        y = ops.reshape(ops.transpose(y, perm=[0, 2, 1, 3]), shape=[b, length, hq * shape_of(v)[3]])
    return y


# -- recurrent layers ---------------------------------------------------------------------------------------
_ACT = {"Sigmoid": ops.sigmoid, "Tanh": ops.tanh, "Relu": ops.relu}


def _activations(cx: NodeContext, default: list[str], directions: int) -> list[list[Any]]:
    """The cell's activations, one list per direction (ONNX lists the forward ones, then the reverse ones)."""
    names = None
    for a in cx.node.attribute:
        if a.name == "activations":
            names = [s.decode() for s in a.strings]
    names = names or default * directions
    if any(n not in _ACT for n in names):
        raise Unsupported(f"activations {names} (frame maps Sigmoid, Tanh, Relu)")
    k = len(default)
    if len(names) == k:
        names = names * directions
    if len(names) != k * directions:
        raise Unsupported(f"{len(names)} activations for {directions} direction(s) of {k} each")
    return [[_ACT[n] for n in names[d * k:(d + 1) * k]] for d in range(directions)]


def _clipped(f: Any, clip: float) -> Any:
    return lambda v: f(ops.clip(v, min=-clip, max=clip))


def _direction(v: Any, d: int, directions: int) -> Any:
    """Direction ``d``'s slice of a ``[num_directions, ...]`` weight, bias or initial state."""
    if directions > 1:
        v = ops.slice(v, starts=[d], stops=[d + 1], axes=[0])
    return ops.squeeze(v, axes=[0])


def _steps_mask(cx: NodeContext, steps: int) -> Any:
    """``sequence_lens`` as a ``[T, B, 1]`` mask: whether step t is inside sequence b."""
    lens = cx.input(4)
    t = np.arange(steps, dtype=np_dtype(lens)).reshape(steps, 1, 1)
    known = cx.known(4)
    if known is not None:
        if known.size and (known.min() < 0 or known.max() > steps):
            raise Unsupported(f"sequence_lens {known.tolist()} outside [0, {steps}]")
        return t < known.reshape(1, -1, 1)
    return ops.less(t, ops.expand_dims(lens, axes=[0, 2]))


def _empty_sequences(cx: NodeContext) -> Any:
    """``[B, 1]``: whether sequence b has length 0."""
    known = cx.known(4)
    if known is not None:
        return known.reshape(-1, 1) == 0
    lens = cx.input(4)
    return ops.equal(ops.expand_dims(lens, axes=[1]), like(0, lens))


def _recurrent(cx: NodeContext, gates: int, step: Any, states: int, default: list[str],
               per_direction: bool = False) -> Any:
    """The common frame of RNN/GRU/LSTM: projections, a scan over time per direction, the outputs' layouts.
    ``step`` is the cell (``per_direction``: ``step(d, num_directions)`` gives direction d's cell).

    ``sequence_lens`` masks the steps past each sequence's end: there the state stays as it was (so the final
    state is the one at the sequence's last step) and the output row is 0, as ONNX defines; a reverse
    direction runs through the padding first, keeping its initial state, so it starts at each sequence's end.
    A sequence of length 0 ends in a zero state, as ONNX Runtime computes it.
    """
    x, w, r = cx.input(0), cx.input(1), cx.input(2)
    direction = cx.attr("direction", "string", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Unsupported(f"direction {direction!r} (ONNX defines forward, reverse, bidirectional)")
    runs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    nd = len(runs)
    acts = _activations(cx, default, nd)
    clip = cx.attr("clip", "float")
    if clip is not None:  # the gates' inputs are clipped to [-clip, clip] (ONNX Runtime's cell clipping; an
        if not clip > 0:  # LSTM's cell state itself is not)
            raise Unsupported(f"clip {clip} (a threshold above 0)")
        acts = [[_clipped(f, clip) if k < 2 else f for k, f in enumerate(per)] for per in acts]
    layout = cx.attr("layout", "int", 0)
    if layout == 1:
        x = ops.transpose(x, perm=[1, 0, 2])
    hidden = cx.attr("hidden_size", "int", shape_of(r)[-1])
    if shape_of(w)[0] != nd:
        raise Unsupported(f"W has {shape_of(w)[0]} directions, the node runs {nd}")
    features = shape_of(x)[-1]
    expected = {1: ("W", [nd, gates * hidden, features]), 2: ("R", [nd, gates * hidden, hidden]),
                3: ("B", [nd, 2 * gates * hidden])}
    for i, (label, want) in expected.items():  # ONNX's shapes, checked before they meet in a broadcast
        if cx.has(i) and list(shape_of(cx.input(i))) != want:
            raise invalid(cx, f"{label} is {list(shape_of(cx.input(i)))}, but {nd} direction(s) of {gates} gates of "
                              f"hidden_size {hidden} over {features} input features need {want}")
    mask = _steps_mask(cx, shape_of(x)[0]) if cx.has(4) else None
    empty = _empty_sequences(cx) if cx.has(4) else None
    ys, finals = [], []
    for d, run in enumerate(runs):
        w0 = _direction(w, d, nd)                             # [gates*H, I]
        r0 = _direction(r, d, nd)                             # [gates*H, H]
        xw = ops.matmul(x, ops.transpose(w0))                 # [T, B, gates*H]: every step's input projection
        rb = None
        if cx.has(3):
            b = _direction(cx.input(3), d, nd)                # [2*gates*H]: Wb then Rb
            wb = ops.slice(b, starts=[0], stops=[gates * hidden], axes=[0])
            rb = ops.slice(b, starts=[gates * hidden], stops=[2 * gates * hidden], axes=[0])
            xw = xw + wb
        init = []
        for i in (5, 6)[:states]:
            if cx.has(i):  # [D, B, H], or [B, D, H] in the batch-first layout
                given = cx.input(i) if layout == 0 else ops.transpose(cx.input(i), perm=[1, 0, 2])
                init.append(_direction(given, d, nd))
            else:  # zeros shaped like one step's [B, H] (the batch size stays the data's, never a number)
                row = ops.squeeze(ops.slice(xw, starts=[0, 0], stops=[1, hidden], axes=[0, 2]), axes=[0])
                init.append(ops.where(np.array(True), np.zeros((), np.dtype(x.dtype.np)), row))
        cell = _masked(step(d, nd) if per_direction else step, mask is not None, r0, rb, hidden, acts[d])
        carry, y = ops.scan(cell, tuple(init), xw if mask is None else (xw, mask), reverse=run == "reverse")
        if empty is not None:  # a sequence of length 0 ends in a zero state (ONNX Runtime's rule), not the initial one
            carry = tuple(ops.where(empty, like(0, c), c) for c in carry)
        ys.append(y)
        finals.append(carry)
    y = ops.expand_dims(ys[0], axes=[1]) if nd == 1 else ops.stack(*ys, axis=1)   # [T, D, B, H]
    states_out = [ops.expand_dims(fs[0], axes=[0]) if nd == 1 else ops.stack(*fs, axis=0)
                  for fs in zip(*finals)]                                         # each [D, B, H]
    if layout == 1:
        y = ops.transpose(y, perm=[2, 0, 1, 3])
        states_out = [ops.transpose(f, perm=[1, 0, 2]) for f in states_out]
    return [y, *states_out]


def _masked(step: Any, masked: bool, r0: Any, rb: Any, hidden: int, acts: list[Any]) -> Any:
    """The scan body: the cell, or (with ``sequence_lens``) the cell where the step is inside the sequence."""
    if not masked:
        return lambda c, xt: step(c, xt, r0, rb, hidden, acts)

    def body(c: tuple, rows: tuple) -> Any:
        xt, inside = rows
        new, h = step(c, xt, r0, rb, hidden, acts)
        kept = tuple(ops.where(inside, n, old) for n, old in zip(new, c))
        return kept, ops.where(inside, h, like(0, h))
    return body


def _split(v: Any, k: int, hidden: int) -> Any:
    return ops.slice(v, starts=[k * hidden], stops=[(k + 1) * hidden], axes=[-1])


@rule("RNN")
def _rnn(cx: NodeContext) -> Any:
    def step(c: tuple, xt: Any, r0: Any, rb: Any, hidden: int, acts: list[Any]) -> Any:
        (f,) = acts
        (h,) = c
        pre = xt + ops.matmul(h, ops.transpose(r0))
        h = f(pre + rb if rb is not None else pre)
        return (h,), h
    return _recurrent(cx, 1, step, 1, ["Tanh"])


@rule("GRU")
def _gru(cx: NodeContext) -> Any:
    before_reset = bool(cx.attr("linear_before_reset", "int", 0))

    def step(c: tuple, xt: Any, r0: Any, rb: Any, hidden: int, acts: list[Any]) -> Any:
        f, g = acts
        (h,) = c  # gates in ONNX order z, r, h
        z = f(_split(xt, 0, hidden) + _rec(h, r0, rb, 0, hidden))
        r = f(_split(xt, 1, hidden) + _rec(h, r0, rb, 1, hidden))
        if before_reset:
            cand = g(_split(xt, 2, hidden) + r * _rec(h, r0, rb, 2, hidden))
        else:
            cand = g(_split(xt, 2, hidden) + _rec(r * h, r0, rb, 2, hidden))
        h = (1.0 - z) * cand + z * h
        return (h,), h
    return _recurrent(cx, 3, step, 1, ["Sigmoid", "Tanh"])


def _rec(h: Any, r0: Any, rb: Any, k: int, hidden: int) -> Any:
    rk = ops.slice(r0, starts=[k * hidden], stops=[(k + 1) * hidden], axes=[0])   # [H, H]
    out = ops.matmul(h, ops.transpose(rk))
    return out + _split(rb, k, hidden) if rb is not None else out


@rule("LSTM")
def _lstm(cx: NodeContext) -> Any:
    """Gates in ONNX order i, o, f, c; with peepholes ``P[D, 3H]`` (p_i, p_o, p_f) the input and forget gates also
    read the previous cell and the output gate the new one; ``input_forget=1`` couples f = 1 - i."""
    coupled = bool(cx.attr("input_forget", "int", 0))
    peepholes = cx.input(7) if cx.has(7) else None

    def make_step(d: int, nd: int) -> Any:
        p = _direction(peepholes, d, nd) if peepholes is not None else None            # [3H]

        def step(c: tuple, xt: Any, r0: Any, rb: Any, hidden: int, acts: list[Any]) -> Any:
            f, g, hact = acts
            h, cell = c
            pre = xt + ops.matmul(h, ops.transpose(r0))
            if rb is not None:
                pre = pre + rb
            i, o, fg, cc = (_split(pre, k, hidden) for k in range(4))
            if p is not None:
                i = i + _split(p, 0, hidden) * cell
                fg = fg + _split(p, 2, hidden) * cell
            gate_i = f(i)
            gate_f = 1.0 - gate_i if coupled else f(fg)
            cell = gate_f * cell + gate_i * g(cc)
            if p is not None:
                o = o + _split(p, 1, hidden) * cell
            h = f(o) * hact(cell)
            return (h, cell), h
        return step
    return _recurrent(cx, 4, make_step, 2, ["Sigmoid", "Tanh", "Tanh"], per_direction=True)
