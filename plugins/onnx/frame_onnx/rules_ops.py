"""Import rules of elementwise math, matrix products, reductions, softmax and shape plumbing.

Each rule maps one ONNX node onto frame ops (``frame_core.ops``) applied to the node's inputs, which are
traced tensors or, when known while importing, numpy arrays. Rules read as the ONNX operator's definition.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from frame_core import ops
from frame_core import Tensor

from ._follow import counted, expanded, filled
from ._import import NodeContext, Unsupported, rule
from .errors import OnnxFormatError

__all__ = ["shape_of", "rank_of", "np_dtype", "norm_axis", "like"]


# -- helpers -------------------------------------------------------------------------------------------
def shape_of(v: Any) -> tuple[int, ...]:
    return tuple(v.shape)


def rank_of(v: Any) -> int:
    return len(v.shape)


def np_dtype(v: Any) -> np.dtype:
    return v.dtype.np if isinstance(v, Tensor) else np.asarray(v).dtype


def like(value: Any, ref: Any) -> np.ndarray:
    """``value`` as an array of ``ref``'s dtype (for constants combined with ``ref``)."""
    return np.asarray(value, np_dtype(ref))


def norm_axis(axis: int, rank: int, cx: NodeContext) -> int:
    if not -rank <= axis < max(rank, 1):
        raise Unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def invalid(cx: NodeContext, problem: str) -> OnnxFormatError:
    """The error for a node the ONNX standard itself forbids (ONNX Runtime refuses it too)."""
    return OnnxFormatError(f"node {cx.name} ({cx.node.op_type}) is not valid ONNX: {problem}; fix the model")


def _is_float(v: Any) -> bool:
    return np.issubdtype(np_dtype(v), np.floating) or np_dtype(v).name == "bfloat16"


# -- elementwise -------------------------------------------------------------------------------------
_BINARY = {"Add": ops.add, "Sub": ops.sub, "Mul": ops.mul, "Equal": ops.equal, "Less": ops.less,
           "LessOrEqual": ops.less_equal, "Greater": ops.greater, "GreaterOrEqual": ops.greater_equal}


@rule(*_BINARY)
def _binary(cx: NodeContext) -> Any:
    return _BINARY[cx.node.op_type](cx.input(0), cx.input(1))


@rule("Div")
def _div(cx: NodeContext) -> Any:
    a, b = cx.input(0), cx.input(1)
    if not _is_float(a):
        raise Unsupported("integer division (frame's div is floating; cast to float first)")
    return ops.div(a, b)


@rule("Pow")
def _pow(cx: NodeContext) -> Any:
    a, b = cx.input(0), cx.input(1)
    if not _is_float(a):
        raise Unsupported("an integer base")
    known = cx.known(1)
    if known is not None and known.size == 1:
        e = float(known.reshape(()))
        if e == 2.0:
            return ops.square(a)
        if e == 1.0:
            return a
        if e == 0.5:
            return ops.sqrt(a)
        return ops.pow(a, like(known, a))
    if np_dtype(b) != np_dtype(a):
        b = ops.cast(b, to=a.dtype)
    return ops.pow(a, b)


def _variadic(fn: Any) -> Any:
    def apply(cx: NodeContext) -> Any:
        out = cx.input(0)
        for i in range(1, len(cx)):
            out = fn(out, cx.input(i))
        return out
    return apply


rule("Max")(_variadic(ops.maximum))
rule("Min")(_variadic(ops.minimum))
rule("Sum")(_variadic(ops.add))


@rule("Mean")
def _mean(cx: NodeContext) -> Any:
    return ops.div(_variadic(ops.add)(cx), like(len(cx), cx.input(0)))


_UNARY = {"Relu": ops.relu, "Sigmoid": ops.sigmoid, "Tanh": ops.tanh, "Exp": ops.exp, "Log": ops.log,
          "Sqrt": ops.sqrt, "Neg": ops.neg, "Abs": ops.abs, "Sin": ops.sin, "Cos": ops.cos, "Sign": ops.sign,
          "Erf": ops.erf, "Atan": ops.atan, "Asin": ops.asin, "Acos": ops.acos, "Det": ops.det}


@rule(*_UNARY)
def _unary(cx: NodeContext) -> Any:
    return _UNARY[cx.node.op_type](cx.input(0))


_ROUNDING = {"Floor": "floor", "Ceil": "ceil", "Round": "round"}  # ONNX Round: halves to even, as frame's round


@rule(*_ROUNDING)
def _rounding(cx: NodeContext) -> Any:
    x = cx.input(0)
    if not _is_float(x):
        raise Unsupported(f"{cx.node.op_type} of an integer tensor (ONNX defines it for floating types)")
    return getattr(ops, _ROUNDING[cx.node.op_type])(x)


@rule("Mod")
def _mod(cx: NodeContext) -> Any:
    a, b = cx.input(0), cx.input(1)
    if not _is_float(a):
        raise Unsupported("integer Mod (frame's division is floating; cast to float first)")
    q = ops.div(a, b)
    if cx.attr("fmod", "int", 0):  # C's fmod: the quotient truncated toward zero, the sign of a
        whole = ops.where(ops.less(q, 0.0), ops.ceil(q), ops.floor(q))
    else:  # Python's %: the quotient floored, the sign of b
        whole = ops.floor(q)
    return a - b * whole


@rule("IsNaN")
def _isnan(cx: NodeContext) -> Any:
    x = cx.input(0)
    return ops.not_equal(x, x)


@rule("IsInf")
def _isinf(cx: NodeContext) -> Any:
    x = cx.input(0)
    pos, neg = cx.attr("detect_positive", "int", 1), cx.attr("detect_negative", "int", 1)
    if pos and neg:
        return ops.equal(ops.abs(x), like(np.inf, x))
    if pos or neg:
        return ops.equal(x, like(np.inf if pos else -np.inf, x))
    return ops.less(x, like(-np.inf, x))  # neither detected: false everywhere


@rule("PRelu")
def _prelu(cx: NodeContext) -> Any:
    x, slope = cx.input(0), cx.input(1)  # slope broadcasts to x (torch writes [C, 1, 1] for channels)
    return ops.where(ops.less(x, 0.0), x * slope, x)


@rule("Mish")
def _mish(cx: NodeContext) -> Any:
    x = cx.input(0)
    return x * ops.tanh(_softplus(cx))


@rule("Swish")
def _swish(cx: NodeContext) -> Any:
    """opset 24's ``Swish``: ``x sigmoid(alpha x)`` (frame's ``silu`` when alpha is 1, torch's ``SiLU``)."""
    x, alpha = cx.input(0), cx.attr("alpha", "float", 1.0)
    return ops.silu(x) if alpha == 1.0 else x * ops.sigmoid(x * like(alpha, x))


@rule("LpNormalization")
def _lp_normalization(cx: NodeContext) -> Any:
    """``x`` divided by its L1 or L2 norm along ``axis`` (Keras' and scikit-learn's ``Normalizer`` exports). A
    zero vector stays zero, as ONNX Runtime's (its norm is taken as 1 there, so its gradient is the identity
    rather than torch's ``F.normalize`` 1/eps)."""
    x = cx.input(0)
    axis = norm_axis(cx.attr("axis", "int", -1), rank_of(x), cx)
    p = cx.attr("p", "int", 2)
    if p not in (1, 2):
        raise invalid(cx, f"p = {p}; LpNormalization takes p = 1 or 2")
    if p == 1:
        norm = ops.sum(ops.abs(x), axes=[axis], keepdims=True)
        return x / ops.where(ops.equal(norm, like(0, x)), like(1, x), norm)
    squares = ops.sum(ops.square(x), axes=[axis], keepdims=True)  # (the zero test before the root: no 1/0 in
    return x / ops.sqrt(ops.where(ops.equal(squares, like(0, x)), like(1, x), squares))  # its gradient)


@rule("Celu")
def _celu(cx: NodeContext) -> Any:
    x, alpha = cx.input(0), cx.attr("alpha", "float", 1.0)  # max(0, x) + min(0, alpha (e^(x/alpha) - 1))
    return ops.where(ops.greater(x, 0.0), x, (ops.exp(ops.minimum(x, 0.0) * (1.0 / alpha)) - 1.0) * alpha)


@rule("ThresholdedRelu")
def _thresholded_relu(cx: NodeContext) -> Any:
    x = cx.input(0)
    return ops.where(ops.greater(x, cx.attr("alpha", "float", 1.0)), x, like(0, x))


@rule("Shrink")
def _shrink(cx: NodeContext) -> Any:
    x = cx.input(0)
    if not _is_float(x):
        raise Unsupported("Shrink of an integer tensor")
    lambd, bias = cx.attr("lambd", "float", 0.5), cx.attr("bias", "float", 0.0)
    return ops.where(ops.less(x, -lambd), x + bias, ops.where(ops.greater(x, lambd), x - bias, like(0, x)))


@rule("MeanVarianceNormalization")
def _mvn(cx: NodeContext) -> Any:
    x = cx.input(0)
    axes = sorted({norm_axis(a, rank_of(x), cx) for a in cx.attr("axes", "ints", [0, 2, 3])})
    centred = x - ops.mean(x, axes=axes, keepdims=True)
    return centred / (ops.sqrt(ops.mean(ops.square(centred), axes=axes, keepdims=True)) + 1e-9)


@rule("Identity")
def _identity(cx: NodeContext) -> Any:
    return cx.input(0)


@rule("Reciprocal")
def _reciprocal(cx: NodeContext) -> Any:
    return ops.div(1.0, cx.input(0))


@rule("Softplus")
def _softplus(cx: NodeContext) -> Any:
    x = cx.input(0)  # log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), without overflow
    return ops.relu(x) + ops.log(ops.exp(ops.neg(ops.abs(x))) + 1.0)


@rule("Softsign")
def _softsign(cx: NodeContext) -> Any:
    x = cx.input(0)
    return x / (ops.abs(x) + 1.0)


@rule("LeakyRelu")
def _leaky_relu(cx: NodeContext) -> Any:
    x, alpha = cx.input(0), cx.attr("alpha", "float", 0.01)
    return ops.where(ops.greater_equal(x, 0.0), x, x * alpha)


@rule("Elu")
def _elu(cx: NodeContext) -> Any:
    x, alpha = cx.input(0), cx.attr("alpha", "float", 1.0)
    # exp of min(x, 0): the branch not taken never overflows, so its zero gradient stays zero
    return ops.where(ops.greater(x, 0.0), x, (ops.exp(ops.minimum(x, 0.0)) - 1.0) * alpha)


@rule("Selu")
def _selu(cx: NodeContext) -> Any:
    x = cx.input(0)
    alpha = cx.attr("alpha", "float", 1.67326319217681884765625)
    gamma = cx.attr("gamma", "float", 1.05070102214813232421875)
    return ops.where(ops.greater(x, 0.0), x, (ops.exp(ops.minimum(x, 0.0)) - 1.0) * alpha) * gamma


@rule("HardSigmoid")
def _hard_sigmoid(cx: NodeContext) -> Any:
    x = cx.input(0)
    return ops.clip(x * cx.attr("alpha", "float", 0.2) + cx.attr("beta", "float", 0.5), min=0.0, max=1.0)


@rule("HardSwish")
def _hard_swish(cx: NodeContext) -> Any:
    x = cx.input(0)
    return x * ops.clip(x * (1.0 / 6.0) + 0.5, min=0.0, max=1.0)


@rule("Gelu")
def _gelu(cx: NodeContext) -> Any:
    x = cx.input(0)
    approximate = cx.attr("approximate", "string", "none")
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"Gelu approximate={approximate!r}: ONNX defines 'none' and 'tanh'")
    return ops.gelu(x, approximate=approximate)  # frame-ops-basic's gelu: exact (via erf) or torch's tanh form


@rule("Clip")
def _clip(cx: NodeContext) -> Any:
    x = cx.input(0)
    bounds: dict[str, float] = {}
    out = x
    for i, key in ((1, "min"), (2, "max")):
        if not cx.has(i):
            continue
        known = cx.known(i)
        if known is not None:
            bounds[key] = float(known.reshape(()))
        else:
            out = (ops.maximum if key == "min" else ops.minimum)(out, cx.input(i))
    return ops.clip(out, **bounds) if bounds else out


@rule("Where")
def _where(cx: NodeContext) -> Any:
    return ops.where(cx.input(0), cx.input(1), cx.input(2))


@rule("Not")
def _not(cx: NodeContext) -> Any:
    return ops.equal(cx.input(0), np.array(False))


@rule("And")
def _and(cx: NodeContext) -> Any:
    return ops.where(cx.input(0), cx.input(1), np.array(False))


@rule("Or")
def _or(cx: NodeContext) -> Any:
    return ops.where(cx.input(0), np.array(True), cx.input(1))


@rule("Xor")
def _xor(cx: NodeContext) -> Any:
    return ops.not_equal(cx.input(0), cx.input(1))


@rule("Cast")
def _cast(cx: NodeContext) -> Any:
    from ._import import DTYPES

    to = cx.attr("to", "int")
    if to not in DTYPES:
        raise Unsupported(f"cast to element type {to}, which frame has no dtype for")
    x = cx.input(0)
    return x if np_dtype(x) == _np_of(DTYPES[to]) else ops.cast(x, to=DTYPES[to])


@rule("CastLike")
def _cast_like(cx: NodeContext) -> Any:
    x, target = cx.input(0), cx.input(1)
    return x if np_dtype(x) == np_dtype(target) else ops.cast(x, to=np_dtype(target))


def _np_of(short: str) -> np.dtype:
    from frame_core import as_dtype

    return as_dtype(short).np


@rule("Dropout")
def _dropout(cx: NodeContext) -> Any:
    if cx.has(2):
        training = cx.known(2)
        if training is None or bool(training):
            raise Unsupported("dropout in training mode (export the model in eval mode)")
    if len(cx.node.output) > 1 and cx.node.output[1]:
        raise Unsupported("dropout's mask output")
    return cx.input(0)


# -- products -------------------------------------------------------------------------------------------
@rule("MatMul")
def _matmul(cx: NodeContext) -> Any:
    return ops.matmul(cx.input(0), cx.input(1))


@rule("Gemm")
def _gemm(cx: NodeContext) -> Any:
    a, b = cx.input(0), cx.input(1)
    if rank_of(a) != 2 or rank_of(b) != 2:
        raise invalid(cx, f"A and B must be matrices, got shapes {list(shape_of(a))} and {list(shape_of(b))} (a "
                          "product of other ranks is a MatMul)")
    if cx.attr("transA", "int", 0):
        a = ops.transpose(a)
    if cx.attr("transB", "int", 0):
        b = ops.transpose(b)
    y = ops.matmul(a, b)
    alpha, beta = cx.attr("alpha", "float", 1.0), cx.attr("beta", "float", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if cx.has(2) and beta != 0.0:
        c = cx.input(2)
        y = y + (c if beta == 1.0 else c * beta)
    return y


# -- reductions --------------------------------------------------------------------------------------------
def _reduce_axes(cx: NodeContext, rank: int) -> list[int] | None:
    """The reduced axes (``None``: all), from the attribute (older opsets) or input 1 (newer ones)."""
    axes = cx.attr("axes", "ints")
    if axes is None and cx.has(1):
        axes = [int(a) for a in cx.need_known(1, "axes").reshape(-1)]
    if not axes:
        return [] if cx.attr("noop_with_empty_axes", "int", 0) else None
    return sorted({norm_axis(a, rank, cx) for a in axes})


def _reducer(op: Any, pre: Any = None, post: Any = None) -> Any:
    def apply(cx: NodeContext) -> Any:
        x = cx.input(0)
        axes = _reduce_axes(cx, rank_of(x))
        if axes == []:
            return x
        keep = bool(cx.attr("keepdims", "int", 1))
        y = op(pre(x) if pre else x, axes=axes, keepdims=keep)
        return post(y) if post else y
    return apply


rule("ReduceSum")(_reducer(ops.sum))
rule("ReduceMean")(_reducer(ops.mean))
rule("ReduceMax")(_reducer(ops.max))
rule("ReduceMin")(_reducer(ops.min))
rule("ReduceLogSumExp")(_reducer(ops.logsumexp))
rule("ReduceSumSquare")(_reducer(ops.sum, pre=ops.square))
rule("ReduceL2")(_reducer(ops.sum, pre=ops.square, post=ops.sqrt))
rule("ReduceL1")(_reducer(ops.sum, pre=ops.abs))
rule("ReduceLogSum")(_reducer(ops.sum, post=ops.log))


@rule("ArgMax", "ArgMin")
def _arg(cx: NodeContext) -> Any:
    if cx.attr("select_last_index", "int", 0):
        raise Unsupported("select_last_index=1 (frame returns the first extremum)")
    x = cx.input(0)
    fn = ops.argmax if cx.node.op_type == "ArgMax" else ops.argmin
    return fn(x, axis=norm_axis(cx.attr("axis", "int", 0), rank_of(x), cx), keepdims=bool(cx.attr("keepdims", "int", 1)))


@rule("Softmax", "LogSoftmax")
def _softmax(cx: NodeContext) -> Any:
    x = cx.input(0)
    axis = norm_axis(cx.attr("axis", "int", -1), rank_of(x), cx)
    return (ops.softmax if cx.node.op_type == "Softmax" else ops.log_softmax)(x, axis=axis)


@rule("CumSum")
def _cumsum(cx: NodeContext) -> Any:
    x = cx.input(0)
    axis = norm_axis(int(cx.need_known(1, "axis").reshape(())), rank_of(x), cx)
    return ops.cumsum(x, axis=axis, exclusive=bool(cx.attr("exclusive", "int", 0)),
                      reverse=bool(cx.attr("reverse", "int", 0)))


# -- shapes ----------------------------------------------------------------------------------------------
@rule("Constant")
def _constant(cx: NodeContext) -> Any:
    from onnx import numpy_helper

    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        for a in cx.node.attribute:
            if a.name == name:
                if name == "value":
                    return np.array(numpy_helper.to_array(a.t))
                kind = {"value_float": "float", "value_floats": "floats", "value_int": "int", "value_ints": "ints"}[name]
                dtype = np.float32 if "float" in name else np.int64
                return np.asarray(cx.attr(name, kind), dtype)
    raise Unsupported("a Constant that is not a dense numeric tensor (sparse or string)")


@rule("Shape")
def _shape(cx: NodeContext) -> Any:
    shape = np.asarray(shape_of(cx.input(0)), np.int64)
    start, end = cx.attr("start", "int", 0), cx.attr("end", "int", None)
    return shape[slice(start, end)]


@rule("Size")
def _size(cx: NodeContext) -> Any:
    return np.asarray(math.prod(shape_of(cx.input(0))), np.int64)


@rule("Reshape")
def _reshape(cx: NodeContext) -> Any:
    x = cx.input(0)
    target = [int(d) for d in cx.need_known(1, "the target shape").reshape(-1)]
    shape = resolve_reshape(shape_of(x), target, bool(cx.attr("allowzero", "int", 0)))
    return reshape_keeping_batch(x, shape)


def resolve_reshape(src: tuple[int, ...], target: list[int], allowzero: bool = False) -> list[int]:
    shape = [src[i] if d == 0 and not allowzero and i < len(src) else d for i, d in enumerate(target)]
    if shape.count(-1) > 1:
        raise Unsupported(f"a target shape {target} with more than one -1")
    if -1 in shape:  # the sizes copied with 0 cancel out: [5, 0, 2, 5] to [0, 0, -1] is [5, 0, 10] (an empty batch)
        copied = {i for i, d in enumerate(target) if d == 0 and not allowzero and i < len(src)}
        known = math.prod(d for i, d in enumerate(shape) if d != -1 and i not in copied)
        rest = math.prod(d for i, d in enumerate(src) if i not in copied)
        shape[shape.index(-1)] = rest // known if known else 0
    if math.prod(shape) != math.prod(src):
        raise Unsupported(f"reshape of {list(src)} to {target}: the sizes differ")
    return shape


def reshape_keeping_batch(x: Any, shape: list[int]) -> Any:
    """``reshape(x, shape)`` where a leading size equal to ``x``'s leading size is written -1: the batch axis
    stays the batch axis when the graph later runs at another batch size (dynamic shapes). Not where the rest
    holds a 0: -1 beside a 0 is ambiguous (any size fits 0 elements), so the sizes stay as given."""
    if list(shape) == list(shape_of(x)):
        return x
    if shape and rank_of(x) and shape[0] == shape_of(x)[0] and shape[0] > 0 and 0 not in shape[1:]:
        shape = [-1, *shape[1:]]
    return ops.reshape(x, shape=shape)


@rule("Flatten")
def _flatten(cx: NodeContext) -> Any:
    x = cx.input(0)
    axis = cx.attr("axis", "int", 1)
    if not -rank_of(x) <= axis <= rank_of(x):
        raise invalid(cx, f"axis {axis} is outside [-{rank_of(x)}, {rank_of(x)}] for a rank-{rank_of(x)} input")
    axis = axis % rank_of(x) if axis < 0 else axis
    src = shape_of(x)
    return reshape_keeping_batch(x, [math.prod(src[:axis]), math.prod(src[axis:])])


@rule("Transpose")
def _transpose(cx: NodeContext) -> Any:
    x = cx.input(0)
    perm = cx.attr("perm", "ints") or list(range(rank_of(x)))[::-1]
    return x if perm == list(range(rank_of(x))) else ops.transpose(x, perm=perm)


@rule("Squeeze")
def _squeeze(cx: NodeContext) -> Any:
    x = cx.input(0)
    axes = [int(a) for a in cx.need_known(1, "axes").reshape(-1)] if cx.has(1) else cx.attr("axes", "ints")
    if axes is None:
        axes = [i for i, d in enumerate(shape_of(x)) if d == 1]
    axes = sorted({norm_axis(a, rank_of(x), cx) for a in axes})
    return ops.squeeze(x, axes=axes) if axes else x


@rule("Unsqueeze")
def _unsqueeze(cx: NodeContext) -> Any:
    x = cx.input(0)
    axes = [int(a) for a in cx.need_known(1, "axes").reshape(-1)] if cx.has(1) else cx.attr("axes", "ints")
    out_rank = rank_of(x) + len(axes)
    return ops.expand_dims(x, axes=sorted(a % out_rank for a in axes))


@rule("Concat")
def _concat(cx: NodeContext) -> Any:
    xs = [cx.input(i) for i in range(len(cx)) if cx.has(i)]
    xs = [x for x in xs if not (isinstance(x, np.ndarray) and x.size == 0)] or xs
    if len(xs) == 1:
        return xs[0]
    axis = norm_axis(cx.attr("axis", "int"), rank_of(xs[0]), cx)
    dtype = next((np_dtype(x) for x in xs if isinstance(x, Tensor)), None)
    xs = [np.asarray(x, dtype) if isinstance(x, np.ndarray) and dtype is not None else x for x in xs]
    return ops.concat(*xs, axis=axis)


@rule("Slice")
def _slice(cx: NodeContext) -> Any:
    x = cx.input(0)
    shape = shape_of(x)
    starts = cx.need_known(1, "starts").reshape(-1).tolist()
    ends = cx.need_known(2, "ends").reshape(-1).tolist()
    axes = cx.need_known(3, "axes").reshape(-1).tolist() if cx.has(3) else list(range(len(starts)))
    steps = cx.need_known(4, "steps").reshape(-1).tolist() if cx.has(4) else [1] * len(starts)
    return slice_tensor(x, shape, starts, ends, axes, steps, cx)


def slice_tensor(x: Any, shape: tuple[int, ...], starts: list[int], ends: list[int], axes: list[int],
                 steps: list[int], cx: NodeContext) -> Any:
    # The bounds go in as written: ONNX and frame both clamp them as numpy does, so an open end (INT64_MAX)
    # stays open and the graph means the same at another batch size.
    out_s, out_e, out_a, out_t = [], [], [], []
    top = 2**63 - 1
    for s, e, a, t in zip(starts, ends, axes, steps):
        a = norm_axis(int(a), len(shape), cx)
        if t == 0:
            raise Unsupported("a slice step of 0")
        s, e, t = (max(min(int(v), top), -top - 1) for v in (s, e, t))
        if s == 0 and e >= 2**62 and t == 1:
            continue
        out_s.append(s)
        out_e.append(e)
        out_a.append(a)
        out_t.append(t)
    if not out_a:
        return x
    return ops.slice(x, starts=out_s, stops=out_e, steps=out_t, axes=out_a)


@rule("Gather")
def _gather(cx: NodeContext) -> Any:
    x, idx = cx.input(0), cx.input(1)
    axis = norm_axis(cx.attr("axis", "int", 0), rank_of(x), cx)
    known = cx.known(1)
    size = shape_of(x)[axis]
    if known is not None:
        if np.any((known < -size) | (known >= size)):
            raise Unsupported(f"constant indices outside -{size}..{size - 1}")
        idx = np.where(known < 0, known + size, known).astype(np.int64)
    else:  # ONNX counts negative indices from the end; frame's gather reads 0..size-1
        zero = like(0, idx)
        idx = ops.where(ops.less(idx, zero), ops.add(idx, like(size, idx)), idx)
    return ops.gather(x, idx, axis=axis)


@rule("GatherElements")
def _gather_elements(cx: NodeContext) -> Any:
    """``y[i, j, k] = x[i, idx[i, j, k], k]`` (for axis 1): a ``gather`` from the flattened ``x`` at flat
    positions computed from the indices (the offsets of the other axes are known while importing)."""
    x, idx = cx.input(0), cx.input(1)
    shape = shape_of(x)
    axis = norm_axis(cx.attr("axis", "int", 0), len(shape), cx)
    ishape = shape_of(idx)
    if len(ishape) != len(shape) or any(i > n for k, (i, n) in enumerate(zip(ishape, shape)) if k != axis):
        raise Unsupported(f"indices of shape {list(ishape)} for data of shape {list(shape)} (same rank, no larger)")
    strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]
    grid = np.indices(ishape, dtype=np.int64) if ishape else np.zeros((0,), np.int64)
    base = sum((grid[k] * strides[k] for k in range(len(shape)) if k != axis), np.zeros(ishape, np.int64))
    size = shape[axis]
    known = cx.known(1)
    if known is not None:
        if np.any((known < -size) | (known >= size)):
            raise Unsupported(f"constant indices outside -{size}..{size - 1}")
        flat = base + np.where(known < 0, known + size, known).astype(np.int64) * strides[axis]
    else:
        pos = ops.cast(idx, to="i64") if np_dtype(idx) != np.int64 else idx
        pos = ops.where(ops.less(pos, np.int64(0)), ops.add(pos, np.int64(size)), pos)
        flat = ops.add(ops.mul(pos, np.int64(strides[axis])), base)
    return ops.gather(ops.reshape(x, shape=[-1]), flat, axis=0)


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(cx: NodeContext) -> Any:
    """Blocks of channels moved to pixels (DepthToSpace, DCR or CRD order) or back: a reshape, a transpose and a
    reshape, the batch axis left as -1 (written where the other axes hold 0 elements: reshape_keeping_batch)."""
    x = cx.input(0)
    if rank_of(x) != 4:
        raise invalid(cx, f"the input must be [N, C, H, W], got rank {rank_of(x)}")
    bs = cx.attr("blocksize", "int")
    n, c, h, w = shape_of(x)
    if cx.node.op_type == "SpaceToDepth":
        if bs is None or bs < 1 or h % bs or w % bs:
            raise invalid(cx, f"blocksize {bs} must divide the height {h} and width {w}")
        y = reshape_keeping_batch(x, [n, c, h // bs, bs, w // bs, bs])
        return reshape_keeping_batch(ops.transpose(y, perm=[0, 3, 5, 1, 2, 4]), [n, c * bs * bs, h // bs, w // bs])
    if bs is None or bs < 1 or c % (bs * bs):
        raise invalid(cx, f"blocksize {bs} squared must divide the {c} channels")
    if cx.attr("mode", "string", "DCR") == "DCR":
        y = ops.transpose(reshape_keeping_batch(x, [n, bs, bs, c // (bs * bs), h, w]), perm=[0, 3, 4, 1, 5, 2])
    else:
        y = ops.transpose(reshape_keeping_batch(x, [n, c // (bs * bs), bs, bs, h, w]), perm=[0, 1, 4, 2, 5, 3])
    return reshape_keeping_batch(y, [n, c // (bs * bs), h * bs, w * bs])


@rule("OneHot")
def _one_hot(cx: NodeContext) -> Any:
    """``values[1]`` where ``indices == k`` (negative ones counted from the end), else ``values[0]``; indices
    outside ``[-depth, depth-1]`` give a row of ``values[0]``, as ONNX defines."""
    idx = cx.input(0)
    depth = int(cx.need_known(1, "depth").reshape(-1)[0])
    if depth < 1:
        raise invalid(cx, f"depth {depth} must be 1 or more")
    axis = cx.attr("axis", "int", -1)
    rank = rank_of(idx) + 1
    if not -rank <= axis < rank:
        raise invalid(cx, f"axis {axis} is outside [-{rank}, {rank - 1}] for a rank-{rank} result")
    classes = np.arange(depth, dtype=np.int64)
    known = cx.known(0)
    if known is not None:
        pos = np.where(known < 0, known + depth, known).astype(np.int64)
        hits = np.asarray(pos[..., None] == classes)
    else:
        pos = ops.cast(idx, to="i64") if np_dtype(idx) != np.int64 else idx
        pos = ops.where(ops.less(pos, np.int64(0)), ops.add(pos, np.int64(depth)), pos)
        hits = ops.equal(ops.expand_dims(pos, axes=[-1]), classes)
    values = cx.input(2)
    if isinstance(values, np.ndarray):
        off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    else:  # a floating initializer is a parameter: its two entries are read from the traced tensor
        off = ops.reshape(ops.slice(values, starts=[0], stops=[1], axes=[0]), shape=[])
        on = ops.reshape(ops.slice(values, starts=[1], stops=[2], axes=[0]), shape=[])
    y = ops.where(hits, on, off)
    axis %= rank
    if axis != rank - 1:
        y = ops.transpose(y, perm=[*range(axis), rank - 1, *range(axis, rank - 1)])
    return y


@rule("ScatterND")
def _scatter_nd(cx: NodeContext) -> Any:
    """Rows of ``data`` (indices ``[..., 1]``) added to (``reduction="add"``) or replaced by the updates: frame's
    ``scatter_add`` along axis 0, as frame-onnx exports it. Deeper index tuples and min/max/mul reductions are
    not imported."""
    data, idx, updates = cx.input(0), cx.input(1), cx.input(2)
    reduction = cx.attr("reduction", "string", "none")
    if reduction not in ("none", "add"):
        raise Unsupported(f"ScatterND with reduction={reduction!r} (frame imports none and add)")
    ishape = shape_of(idx)
    if not ishape or ishape[-1] != 1:
        raise Unsupported("ScatterND with index tuples longer than 1 (frame imports row scatters)")
    n = shape_of(data)[0]
    known = cx.known(1)
    if known is not None:
        if np.any((known < -n) | (known >= n)):
            raise invalid(cx, f"indices outside -{n}..{n - 1}")
        rows = np.where(known < 0, known + n, known).astype(np.int64)[..., 0]
    else:
        rows = ops.reshape(idx, shape=list(ishape[:-1]))
        rows = ops.where(ops.less(rows, like(0, rows)), ops.add(rows, like(n, rows)), rows)
    added = ops.scatter_add(updates, rows, axis=0, size=n)
    if reduction == "add":
        return ops.add(data, added)
    hit = ops.scatter_add(np.ones(shape_of(updates), np_dtype(updates)), rows, axis=0, size=n)
    return ops.where(ops.greater(hit, like(0, hit)), added, data)


@rule("ScatterElements")
def _scatter_elements(cx: NodeContext) -> Any:
    """torch's ``scatter`` (``reduction="none"``) and ``scatter_add`` (``"add"``) along any axis: each update's
    flat position in ``data`` (its own coordinates, the index along ``axis``) and one ``scatter_add`` over the
    flattened data. Under ``none``, updates that share a position are summed (ONNX leaves the result undefined);
    min/max/mul reductions are not imported."""
    data, idx, updates = cx.input(0), cx.input(1), cx.input(2)
    reduction = cx.attr("reduction", "string", "none")
    if reduction not in ("none", "add"):
        raise Unsupported(f"ScatterElements with reduction={reduction!r} (frame imports none and add)")
    dshape, ishape = shape_of(data), shape_of(idx)
    rank = len(dshape)
    axis = norm_axis(cx.attr("axis", "int", 0), rank, cx)
    if len(ishape) != rank or tuple(shape_of(updates)) != tuple(ishape):
        raise invalid(cx, f"indices {list(ishape)} and updates {list(shape_of(updates))} must have one shape, of "
                          f"data's rank {rank}")
    n, size = dshape[axis], int(np.prod(dshape, dtype=np.int64))
    strides = [int(np.prod(dshape[d + 1:], dtype=np.int64)) for d in range(rank)]
    grid = np.indices(ishape, dtype=np.int64)
    base = sum((grid[d] * strides[d] for d in range(rank) if d != axis), np.zeros(ishape, np.int64))
    known = cx.known(1)
    if known is not None:
        if np.any((known < -n) | (known >= n)):
            raise invalid(cx, f"indices outside -{n}..{n - 1} along axis {axis}")
        flat = (np.where(known < 0, known + n, known).astype(np.int64) * strides[axis] + base).reshape(-1)
    else:
        idx = ops.where(ops.less(idx, like(0, idx)), ops.add(idx, like(n, idx)), idx)
        flat = ops.reshape(ops.cast(idx, to="i64") * np.int64(strides[axis]) + base, shape=[-1])
    added = ops.reshape(ops.scatter_add(ops.reshape(updates, shape=[-1]), flat, axis=0, size=size),
                        shape=list(dshape))
    if reduction == "add":
        return ops.add(data, added)
    ones = np.ones(int(np.prod(ishape, dtype=np.int64)), np_dtype(updates))
    hit = ops.reshape(ops.scatter_add(ones, flat, axis=0, size=size), shape=list(dshape))
    return ops.where(ops.greater(hit, like(0, hit)), added, data)


@rule("Expand")
def _expand(cx: NodeContext) -> Any:
    x = cx.input(0)
    target = [int(d) for d in cx.need_known(1, "the shape").reshape(-1)]
    try:
        out = tuple(np.broadcast_shapes(shape_of(x), tuple(target)))
    except ValueError:
        raise invalid(cx, f"the input's shape {list(shape_of(x))} does not broadcast with the shape {target}") from None
    sources = cx.sources(1)
    if sources is not None and sources.size == len(target):  # expand_as: sizes read from a tensor follow it
        followed = expanded(x, out, sources, np_dtype(x))
        if followed is not None:
            return followed
    return x if out == shape_of(x) else ops.broadcast_to(x, shape=out)


@rule("ConstantOfShape")
def _constant_of_shape(cx: NodeContext) -> Any:
    """Reached for a shape too large to compute while importing (``FOLD_OUTPUT_LIMIT``): a ``full`` node, computed
    when the graph runs; and for a shape with sizes read from a tensor (``zeros_like``, a recurrent layer's
    initial state): built from that tensor's type, so it follows the batch. Shapes are always known."""
    from onnx import numpy_helper

    shape = [int(d) for d in cx.need_known(0, "the shape").reshape(-1)]
    if min(shape, default=0) < 0:
        raise invalid(cx, f"the shape {shape} has a negative dimension")
    value = next((numpy_helper.to_array(a.t) for a in cx.node.attribute if a.name == "value"), np.zeros(1, np.float32))
    sources = cx.sources(0)
    if sources is not None and sources.size == len(shape):
        followed = filled(shape, sources, value)
        if followed is not None:
            return followed
    return ops.full(shape, value.reshape(-1)[0].item(), dtype=str(value.dtype))


@rule("Split")
def _split(cx: NodeContext) -> Any:
    x = cx.input(0)
    axis = norm_axis(cx.attr("axis", "int", 0), rank_of(x), cx)
    size = shape_of(x)[axis]
    n = len(cx.node.output)
    if cx.has(1):
        sizes = [int(s) for s in cx.need_known(1, "split").reshape(-1)]
    elif cx.attr("split", "ints") is not None:
        sizes = cx.attr("split", "ints")
    else:
        chunk = -(-size // n)
        sizes = [min(chunk, size - k * chunk) for k in range(n)]
    if len(sizes) != n or sum(sizes) != size or min(sizes, default=0) < 0:
        raise invalid(cx, f"split sizes {list(sizes)} for {n} outputs must be {n} sizes of 0 or more adding up "
                          f"to the axis's {size}")
    outs, start = [], 0
    for s in sizes:
        outs.append(ops.slice(x, starts=[start], stops=[start + s], axes=[axis]))
        start += s
    return outs


@rule("Tile")
def _tile(cx: NodeContext) -> Any:
    x = cx.input(0)
    repeats = [int(r) for r in cx.need_known(1, "repeats").reshape(-1)]
    if len(repeats) != rank_of(x) or min(repeats, default=0) < 0:
        raise invalid(cx, f"repeats {repeats} must be one count of 0 or more per axis of the rank-{rank_of(x)} input")
    shape = list(shape_of(x))
    sources = cx.sources(1)
    if sources is not None and sources.size == len(repeats):  # x.repeat(x.size(0), 1): axes of size 1 repeated
        moved = np.empty(len(repeats), object)  # (element by element: a list of tuples would become a matrix)
        for i, (s, d) in enumerate(zip(sources.reshape(-1), shape)):
            moved[i] = s if d == 1 else None
        if any(s is not None for s in moved):  # a size read from a tensor follow it, as an Expand does
            literal = [1 if s is not None else r for s, r in zip(moved, repeats)]
            out = tuple(r * d for r, d in zip(repeats, shape))
            followed = expanded(_tiled(x, literal, shape), out, moved, np_dtype(x))
            if followed is not None:  # (None: no size matched the tensor it was read from; the literal repeats stand)
                return followed
    return _tiled(x, repeats, shape)


def _tiled(x: Any, repeats: list[int], shape: list[int]) -> Any:
    if all(r == 1 for r in repeats):
        return x
    # each axis gains a copies axis before it ([..., r, d, ...]), then the two merge: r copies of the axis in
    # a row; a fixed number of nodes whatever the repeats (a concat of r copies would build r of them)
    spread = ops.reshape(x, shape=[e for d in shape for e in (1, d)])
    spread = ops.broadcast_to(spread, shape=[e for r, d in zip(repeats, shape) for e in (r, d)])
    return ops.reshape(spread, shape=[r * d for r, d in zip(repeats, shape)])


@rule("Pad")
def _pad(cx: NodeContext) -> Any:
    x = cx.input(0)
    mode = cx.attr("mode", "string", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise Unsupported(f"pad mode {mode!r} (frame imports constant, reflect and edge)")
    pads = [int(p) for p in (cx.need_known(1, "pads").reshape(-1) if cx.has(1) else cx.attr("pads", "ints"))]
    fill: Any = 0.0
    if cx.has(2):
        value = cx.known(2)
        if value is None:  # a value stored as a (floating) initializer is a parameter: a traced scalar
            fill = ops.reshape(cx.input(2), shape=[])
        else:
            fill = like(value.reshape(-1)[0], x) if value.size else 0.0
    rank = rank_of(x)
    axes = ([norm_axis(int(a), rank, cx) for a in cx.need_known(3, "axes").reshape(-1)] if cx.has(3)
            else list(range(rank)))
    n = len(axes)
    before, after = pads[:n], pads[n:]
    if len(pads) != 2 * n:
        raise invalid(cx, f"pads {pads} must hold a before and an after for each of the {n} padded axes")
    if any(p < 0 for p in pads):  # negative pads crop: the crop first, then the (positive) padding
        for a, b, e in zip(axes, before, after):
            size = shape_of(x)[a]
            if -min(b, 0) - min(e, 0) > size:
                raise invalid(cx, f"pads crop {-min(b, 0)} + {-min(e, 0)} from an axis of {size}")
            if b < 0 or e < 0:
                x = ops.slice(x, starts=[-min(b, 0)], stops=[size + min(e, 0)], axes=[a])
        before, after = [max(b, 0) for b in before], [max(e, 0) for e in after]
        pads = before + after
    if not any(pads):
        return x
    if mode != "constant":
        for a, b, e in zip(axes, before, after):
            x = _pad_from_edges(x, a, b, e, mode)
        return x
    y = ops.pad(x, before=before, after=after, axes=axes)
    if isinstance(fill, float):
        return y
    # frame pads with zeros; the padding is then filled where a constant mask says it lies outside x
    full_before, full_after = [0] * rank, [0] * rank
    for a, b, e in zip(axes, before, after):
        full_before[a], full_after[a] = b, e
    # sized 1 along the axes not padded, so that it broadcasts (no batch size baked in)
    inside = np.ones([size if full_before[a] or full_after[a] else 1 for a, size in enumerate(shape_of(x))], bool)
    outside = ~np.pad(inside, list(zip(full_before, full_after)))
    return ops.where(outside, fill, y)


def _pad_from_edges(x: Any, axis: int, before: int, after: int, mode: str) -> Any:
    """``x`` padded along ``axis`` by reflection (without repeating the edge) or by repeating the edge."""
    n = shape_of(x)[axis]
    if not before and not after:
        return x
    if mode == "reflect" and max(before, after) > n - 1:
        raise Unsupported(f"a reflect pad of {max(before, after)} on an axis of {n} (at most {n - 1})")
    parts = []
    if before:
        if mode == "reflect":  # rows before, before - 1, ..., 1
            parts.append(ops.slice(x, starts=[before], stops=[0], steps=[-1], axes=[axis]))
        else:
            parts += [ops.slice(x, starts=[0], stops=[1], axes=[axis])] * before
    parts.append(x)
    if after:
        if mode == "reflect":  # rows n - 2, ..., n - 1 - after
            stop = n - 2 - after
            parts.append(ops.slice(x, starts=[n - 2], stops=[stop if stop >= 0 else -(n + 1)], steps=[-1], axes=[axis]))
        else:
            parts += [ops.slice(x, starts=[n - 1], stops=[n], axes=[axis])] * after
    return ops.concat(*parts, axis=axis)


@rule("Resize", "Upsample")
def _resize(cx: NodeContext) -> Any:
    """Resizing one axis at a time: nearest as a ``gather`` of source rows, linear and cubic as the weighted sum
    of the ``gather``s of the 2 or 4 neighbouring rows; rows and weights are computed while importing by ONNX's
    coordinate transformation (torch's ``nn.Upsample`` and ``F.interpolate`` in nearest, (bi)linear, bicubic and
    trilinear modes)."""
    x = cx.input(0)
    mode = cx.attr("mode", "string", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"resize mode {mode!r} (frame imports nearest, linear and cubic)")
    shape, rank = shape_of(x), rank_of(x)
    scales: np.ndarray | None
    if cx.node.op_type == "Upsample" or cx.opset < 11:  # Upsample, and Resize before opset 11: (X, scales)
        scales, sizes, transform, rounding = cx.need_known(1, "scales").astype(float), None, "asymmetric", "floor"
    else:
        transform = cx.attr("coordinate_transformation_mode", "string", "half_pixel")
        rounding = cx.attr("nearest_mode", "string", "round_prefer_floor")
        if cx.attr("axes", "ints") is not None or cx.attr("keep_aspect_ratio_policy", "string", "stretch") != "stretch":
            raise Unsupported("Resize with axes or keep_aspect_ratio_policy")
        scales = cx.need_known(2, "scales").astype(float) if cx.has(2) and cx.need_known(2, "scales").size else None
        sizes = [int(v) for v in cx.need_known(3, "sizes").reshape(-1)] if cx.has(3) else None
    if sizes is None:
        if scales is None or scales.size != rank:
            raise Unsupported("Resize without scales or sizes for every axis")
        if np.any(scales <= 0):
            raise invalid(cx, f"scales {scales.tolist()} must all be greater than 0")
        sizes = [int(np.floor(n * s)) for n, s in zip(shape, scales)]
    else:
        scales = np.array([m / n for m, n in zip(sizes, shape)])
    if mode != "nearest":
        if transform not in _LINEAR_TRANSFORMS:
            raise Unsupported(f"{mode} resizing with coordinate_transformation_mode {transform!r} (frame imports "
                              f"{', '.join(_LINEAR_TRANSFORMS)})")
        if cx.attr("antialias", "int", 0) and np.any(scales < 1):
            raise Unsupported(f"{mode} downscaling with antialias=1")
    a, exclude = cx.attr("cubic_coeff_a", "float", -0.75), bool(cx.attr("exclude_outside", "int", 0))
    for axis, (n, m, scale) in enumerate(zip(shape, sizes, scales)):
        if m == n and scale == 1.0:
            continue
        if mode == "nearest":
            x = ops.gather(x, _nearest_rows(n, m, float(scale), transform, rounding), axis=axis)
            continue
        if mode == "linear":
            lo, hi, w = _linear_rows(n, m, float(scale), transform)
            taps = [(lo, 1.0 - w), (hi, w)]
        else:
            taps = _cubic_rows(n, m, float(scale), transform, a, exclude)
        shape_w = [m if k == axis else 1 for k in range(rank)]
        terms = [ops.gather(x, rows, axis=axis) * like(w.reshape(shape_w), x) for rows, w in taps]
        x = terms[0]
        for term in terms[1:]:
            x = x + term
    return x


_LINEAR_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _source_coordinates(n: int, m: int, scale: float, transform: str) -> np.ndarray:
    """ONNX's coordinate transformation: where in the input (of ``n`` rows) output row ``0..m-1`` lies."""
    out = np.arange(m, dtype=np.float64)
    if transform == "half_pixel":
        return (out + 0.5) / scale - 0.5
    if transform == "pytorch_half_pixel":
        return (out + 0.5) / scale - 0.5 if m > 1 else np.zeros(m)
    if transform == "asymmetric":
        return out / scale
    if transform == "align_corners":
        return out * (n - 1) / (m - 1) if m > 1 else np.zeros(m)
    if transform == "tf_half_pixel_for_nn":
        return (out + 0.5) / scale
    raise Unsupported(f"coordinate_transformation_mode {transform!r}")


def _linear_rows(n: int, m: int, scale: float, transform: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower row, upper row, weight of the upper row) of each output row; coordinates outside the input are
    clamped to its first or last row."""
    src = np.clip(_source_coordinates(n, m, scale, transform), 0, n - 1)
    lo = np.floor(src).astype(np.int64)
    return lo, np.minimum(lo + 1, n - 1), src - lo


def _cubic_rows(n: int, m: int, scale: float, transform: str, a: float,
                exclude_outside: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """(rows, weights) of the 4 taps ``floor(s) - 1 .. floor(s) + 2`` around each output row's source coordinate
    ``s``, with Keys' cubic convolution weights of coefficient ``a`` (torch's bicubic: -0.75). Rows outside the
    input read its first or last row (edge padding, as ONNX and torch); with ``exclude_outside`` their weights
    are 0 instead and the others are scaled to add up to 1."""
    src = _source_coordinates(n, m, scale, transform)  # not clamped: taps beyond the edges repeat it
    base = np.floor(src)
    taps = []
    for k in (-1, 0, 1, 2):
        rows = base + k
        t = np.abs(src - rows)  # distance from the tap: < 1 for the inner two, in [1, 2) for the outer two
        w = np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a)
        if exclude_outside:
            w = np.where((rows < 0) | (rows > n - 1), 0.0, w)
        taps.append((np.clip(rows, 0, n - 1).astype(np.int64), w))
    if exclude_outside:
        total = sum(w for _, w in taps)
        taps = [(rows, w / total) for rows, w in taps]
    return taps


def _nearest_rows(n: int, m: int, scale: float, transform: str, rounding: str) -> np.ndarray:
    src = _source_coordinates(n, m, scale, transform)
    if rounding == "floor":
        idx = np.floor(src)
    elif rounding == "ceil":
        idx = np.ceil(src)
    elif rounding == "round_prefer_floor":
        idx = np.where(src - np.floor(src) == 0.5, np.floor(src), np.round(src))
    elif rounding == "round_prefer_ceil":
        idx = np.where(src - np.floor(src) == 0.5, np.ceil(src), np.round(src))
    else:
        raise Unsupported(f"nearest_mode {rounding!r}")
    return np.clip(idx, 0, n - 1).astype(np.int64)


@rule("Range")
def _range(cx: NodeContext) -> Any:
    """Known bounds too long to compute while importing (``FOLD_OUTPUT_LIMIT``) become an ``arange`` node; an
    integer ``Range(0, n, 1)`` with ``n`` read from a tensor's shape counts to that size when the graph runs."""
    known = [k for k in (cx.known(i) for i in range(3)) if k is not None]
    if len(known) == 3:
        followed = counted(known[0], known[1], known[2], cx.sources(1))  # arange(x.size(1)): counts at run time
        if followed is not None:
            return followed
        start, limit, delta = (k.reshape(()).item() for k in known)
        if delta == 0:
            raise invalid(cx, "delta is 0")
        return ops.arange(start, limit, delta, dtype=str(known[0].dtype))
    raise Unsupported("a Range whose start, limit or delta depends on the data: its length would be data-dependent "
                      "(compute the bounds from shapes or constants)")


@rule("Trilu")
def _trilu(cx: NodeContext) -> Any:
    x = cx.input(0)
    k = int(cx.need_known(1, "k").reshape(())) if cx.has(1) else 0
    if rank_of(x) < 2:
        raise invalid(cx, f"the input has shape {list(shape_of(x))}; Trilu takes matrices (rank 2 or more)")
    rows, cols = shape_of(x)[-2:]
    keep = (np.triu if cx.attr("upper", "int", 1) else np.tril)(np.ones((rows, cols), bool), k)
    return ops.where(keep, x, like(0, x))
