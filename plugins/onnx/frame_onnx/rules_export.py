"""Export rules: one function per frame op, writing the op's definition in ONNX nodes.

A rule takes the ``Exporter`` and the frame node and returns the ONNX names of the node's outputs. Shapes
are static in frame, so shape arguments are constants; gradients' internal ops (``*_internal``) are
written out too, so a training graph from ``build_backward_graph`` runs on any ONNX runtime.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from frame_core import Node, Value

from .errors import OnnxError
from .export import Exporter, onnx_type

__all__ = ["RULES"]

RULES: dict[str, Callable[[Exporter, Node], Sequence[str]]] = {}

#: Ops left out on purpose, with the reason the UnmappedOpError gives.
NOT_EXPORTED = {
    "fused_elementwise_internal": "a compiled graph's fusion: export the graph before compiling it",
    "native_fused_internal": "a compiled graph's native kernel: export the graph before compiling it",
    **{f"{norm}_{kind}_internal": "a compiled graph's pairing of a norm with its gradient (pass "
       "reuse_norm_statistics): export the graph before compiling it"
       for norm in ("batch_norm", "layer_norm", "group_norm") for kind in ("train", "grad_saved")},
    "inv": "ONNX has no matrix inverse (ONNX Runtime's com.microsoft Inverse is outside the standard), so neither "
           "inv nor det's gradient (which inverts) exports; det itself exports as Det",
}


def not_exported_reason(op: str) -> str | None:
    """Why ``op`` is left out on purpose, or None: the ops above, and every kernel frame-native compiled
    (``native_*``: a compiled twin of an op that has a rule before compiling)."""
    if op in NOT_EXPORTED:
        return NOT_EXPORTED[op]
    if op.startswith("native_"):
        return NOT_EXPORTED["native_fused_internal"]
    return None


def rule(*names: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for n in names:
            RULES[n] = fn
        return fn
    return register


def _in(ex: Exporter, node: Node, i: int = 0) -> str:
    return ex.input(node, i)


def _t(node: Node, i: int = 0) -> Value:
    return node.inputs[i]


def _reduce(ex: Exporter, op: str, x: str, axes: Sequence[int] | None, keepdims: bool) -> str:
    if axes is None:
        return ex.emit(op, [x], keepdims=int(keepdims))
    if not axes:
        return ex.emit("Identity", [x])
    if op != "ReduceSum" and ex.opset < 18:  # the other reductions take axes as an input from opset 18 only
        return ex.emit(op, [x], axes=list(axes), keepdims=int(keepdims))
    return ex.emit(op, [x, ex.ints(axes)], keepdims=int(keepdims))


def _axes(axes: Any, rank: int) -> list[int] | None:
    if axes is None:
        return None
    axes = [axes] if isinstance(axes, int) else list(axes)
    return sorted(a % rank for a in axes) if rank else []


def reduce_to_shape(ex: Exporter, x: str, src: Sequence[int], target: Sequence[int]) -> str:
    """Sum ``x`` (of shape ``src``) over the axes broadcasting stretched, to ``target``."""
    src, target = tuple(src), tuple(target)
    if src == target:
        return x
    lead = len(src) - len(target)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(target) if d == 1 and src[lead + i] != 1]
    y = _reduce(ex, "ReduceSum", x, axes, True) if axes else x
    return ex.emit("Reshape", [y, ex.ints(target)])


# -- elementwise ------------------------------------------------------------------------------------------
_SIMPLE = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "neg": "Neg", "exp": "Exp", "log": "Log",
           "sqrt": "Sqrt", "tanh": "Tanh", "sigmoid": "Sigmoid", "sin": "Sin", "cos": "Cos", "relu": "Relu",
           "abs": "Abs", "sign": "Sign", "maximum": "Max", "minimum": "Min", "pow": "Pow", "equal": "Equal",
           "less": "Less", "less_equal": "LessOrEqual", "greater": "Greater", "greater_equal": "GreaterOrEqual",
           "matmul": "MatMul", "stop_gradient": "Identity", "accumulate_internal": "Add",
           "floor": "Floor", "ceil": "Ceil", "round": "Round", "erf": "Erf",  # ONNX Round: halves to even too
           "atan": "Atan", "asin": "Asin", "acos": "Acos", "det": "Det"}


def _simple(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit(_SIMPLE[node.op], [ex.input(node, i) for i in range(len(node.inputs))])]


for _name in _SIMPLE:
    RULES[_name] = _simple


@rule("where")
def _where(ex: Exporter, node: Node) -> list[str]:
    """``Where``; between booleans (which ONNX Runtime's ``Where`` has no kernel for) ``(c and a) or (not c and
    b)``, the same values."""
    c, a, b = (_in(ex, node, i) for i in range(3))
    if node.outputs[0].dtype.name != "bool":
        return [ex.emit("Where", [c, a, b])]
    return [ex.emit("Or", [ex.emit("And", [c, a]), ex.emit("And", [ex.emit("Not", [c]), b])])]


@rule("atan2")
def _atan2(ex: Exporter, node: Node) -> list[str]:
    """ONNX has no Atan2: ``atan(y / x)``, plus or minus pi where ``x`` is negative (or -0) by the sign of ``y``.

    A sign is read as ``v < 0 or 1 / v < 0``, so -0 counts as negative, as numpy's quadrants want. Where both are
    0 the ratio is ``y`` itself (so the angle is a signed 0, or pi with y's sign), and where both are infinite it is
    ``sign(y) sign(x)`` (the diagonals). Values agree with numpy's to a few ulp and in every quadrant, but ONNX
    Runtime's ``Where`` returns a selected -0 as +0, so a -0 angle may come back as +0."""
    y, x = _in(ex, node, 0), _in(ex, node, 1)
    dtype = _t(node).dtype
    zero, one, pi = ex.const(0, dtype), ex.const(1, dtype), ex.const(math.pi, dtype)

    def negative(v: str) -> str:
        return ex.emit("Or", [ex.emit("Less", [v, zero]), ex.emit("Less", [ex.emit("Div", [one, v]), zero])])

    zeros = ex.emit("And", [ex.emit("Equal", [y, zero]), ex.emit("Equal", [x, zero])])
    infinities = ex.emit("And", [ex.emit("IsInf", [y]), ex.emit("IsInf", [x])])
    diagonal = ex.emit("Mul", [ex.emit("Sign", [y]), ex.emit("Sign", [x])])
    ratio = ex.emit("Where", [zeros, y, ex.emit("Where", [infinities, diagonal, ex.emit("Div", [y, x])])])
    turn = ex.emit("Where", [negative(y), ex.emit("Neg", [pi]), pi])
    angle = ex.emit("Atan", [ratio])
    return [ex.emit("Where", [negative(x), ex.emit("Add", [angle, turn]), angle])]


@rule("square")
def _square(ex: Exporter, node: Node) -> list[str]:
    x = _in(ex, node)
    return [ex.emit("Mul", [x, x])]


@rule("not_equal")
def _not_equal(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Not", [ex.emit("Equal", [_in(ex, node, 0), _in(ex, node, 1)])])]


@rule("clip")
def _clip(ex: Exporter, node: Node) -> list[str]:
    dtype = _t(node).dtype
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    return [ex.emit("Clip", [_in(ex, node), "" if lo is None else ex.const(lo, dtype),
                             "" if hi is None else ex.const(hi, dtype)])]


@rule("cast")
def _cast(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Cast", [_in(ex, node)], to=onnx_type(node.outputs[0]))]


@rule("heaviside_surrogate")
def _heaviside(ex: Exporter, node: Node) -> list[str]:
    x = _in(ex, node)
    return [ex.emit("Cast", [ex.emit("Greater", [x, ex.const(0, _t(node).dtype)])], to=onnx_type(node.outputs[0]))]


@rule("relu_grad_internal")
def _relu_grad(ex: Exporter, node: Node) -> list[str]:
    x, gy = _in(ex, node, 0), _in(ex, node, 1)
    zero = ex.const(0, node.outputs[0].dtype)
    mask = ex.emit("Greater", [x, ex.const(0, _t(node).dtype)])
    out = ex.emit("Where", [mask, gy, zero])
    if node.outputs[0].shape != node.inputs[1].shape:
        out = ex.emit("Expand", [out, ex.ints(node.outputs[0].shape)])
    return [out]


# -- reductions and losses ---------------------------------------------------------------------------------
_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
           "logsumexp": "ReduceLogSumExp"}


def _reduction(ex: Exporter, node: Node) -> list[str]:
    rank = len(_t(node).shape)
    return [_reduce(ex, _REDUCE[node.op], _in(ex, node), _axes(node.attrs.get("axes"), rank),
                    bool(node.attrs.get("keepdims", False)))]


for _name in _REDUCE:
    RULES[_name] = _reduction


@rule("argmax", "argmin")
def _arg(ex: Exporter, node: Node) -> list[str]:
    x, axis = _in(ex, node), node.attrs.get("axis")
    op = "ArgMax" if node.op == "argmax" else "ArgMin"
    keep = int(bool(node.attrs.get("keepdims", False)))
    if axis is None:
        flat = ex.emit("Reshape", [x, ex.ints([-1])])
        out = ex.emit(op, [flat], axis=0, keepdims=0)
        if keep:
            out = ex.emit("Reshape", [out, ex.ints(node.outputs[0].shape)])
        return [out]
    return [ex.emit(op, [x], axis=axis % len(_t(node).shape), keepdims=keep)]


@rule("softmax", "log_softmax")
def _softmax(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Softmax" if node.op == "softmax" else "LogSoftmax", [_in(ex, node)],
                    axis=node.attrs.get("axis", -1))]


@rule("mse_loss")
def _mse(ex: Exporter, node: Node) -> list[str]:
    d = ex.emit("Sub", [_in(ex, node, 0), _in(ex, node, 1)])
    return [ex.emit("ReduceMean", [ex.emit("Mul", [d, d])], keepdims=0)]


@rule("mse_loss_grad_internal")
def _mse_grad(ex: Exporter, node: Node) -> list[str]:
    pred = _t(node)
    n = max(1, math.prod(pred.shape))
    d = ex.emit("Sub", [_in(ex, node, 0), _in(ex, node, 1)])
    scaled = ex.emit("Mul", [d, ex.const(2.0 / n, pred.dtype)])
    return [ex.emit("Mul", [scaled, _in(ex, node, 2)])]


@rule("cross_entropy")
def _cross_entropy(ex: Exporter, node: Node) -> list[str]:
    logits, labels = _in(ex, node, 0), _in(ex, node, 1)
    if _t(node, 1).dtype.name != "int64":
        labels = ex.emit("Cast", [labels], to=TensorProto.INT64)
    ls = ex.emit("LogSoftmax", [logits], axis=-1)
    picked = ex.emit("GatherElements", [ls, ex.emit("Unsqueeze", [labels, ex.ints([-1])])], axis=-1)
    return [ex.emit("Neg", [ex.emit("ReduceMean", [picked], keepdims=0)])]


@rule("sum_grad_internal")
def _sum_grad(ex: Exporter, node: Node) -> list[str]:
    shape = list(node.attrs["input_shape"])
    axes = sorted(a % len(shape) for a in node.attrs["axes"]) if shape else []
    gy = _in(ex, node)
    if len(_t(node).shape) != len(shape) and axes:
        gy = ex.emit("Unsqueeze", [gy, ex.ints(axes)])
    elif len(_t(node).shape) != len(shape):
        gy = ex.emit("Reshape", [gy, ex.ints([1] * len(shape))])
    return [ex.emit("Expand", [gy, ex.ints(shape)])]


@rule("reduce_to_shape_internal")
def _reduce_to_shape(ex: Exporter, node: Node) -> list[str]:
    return [reduce_to_shape(ex, _in(ex, node), _t(node).shape, node.attrs["shape"])]


@rule("broadcast_to", "broadcast_to_internal")
def _broadcast(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Expand", [_in(ex, node), ex.ints(node.attrs["shape"])])]


@rule("weighted_sum_internal")
def _weighted_sum(ex: Exporter, node: Node) -> list[str]:
    w = ex.const(node.attrs["weights"], _t(node).dtype)
    return [ex.emit("ReduceSum", [ex.emit("Mul", [_in(ex, node), w])], keepdims=0)]


@rule("weighted_broadcast_internal")
def _weighted_broadcast(ex: Exporter, node: Node) -> list[str]:
    w = ex.const(node.attrs["weights"], _t(node).dtype)
    return [ex.emit("Mul", [_in(ex, node), w])]


@rule("matmul_grad_lhs_internal", "matmul_grad_rhs_internal")
def _matmul_grad(ex: Exporter, node: Node) -> list[str]:
    a, b = _t(node, 0), _t(node, 1)
    if len(a.shape) < 2 or len(b.shape) < 2 or len(node.attrs["shape"]) < 2:
        raise OnnxError(f"{node.op} of a vector operand has no export rule yet; keep matmul operands 2-D or more")
    x, y = _in(ex, node, 0), _in(ex, node, 1)
    if node.op == "matmul_grad_lhs_internal":  # gy @ b^T
        prod = ex.emit("MatMul", [x, _swap_last(ex, y, len(b.shape))])
    else:  # a^T @ gy
        prod = ex.emit("MatMul", [_swap_last(ex, x, len(a.shape)), y])
    product = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    rows = a.shape[-2] if node.op == "matmul_grad_lhs_internal" else a.shape[-1]
    cols = b.shape[-2] if node.op == "matmul_grad_lhs_internal" else b.shape[-1]
    return [reduce_to_shape(ex, prod, (*product, rows, cols), node.attrs["shape"])]


def _swap_last(ex: Exporter, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return ex.emit("Transpose", [x], perm=perm)


# -- shapes -------------------------------------------------------------------------------------------------
@rule("constant")
def _constant(ex: Exporter, node: Node) -> list[str]:
    value = node.outputs[0]
    array = np.asarray(node.attrs["value"])
    if array.shape != value.shape:  # zeros are stored as one broadcast element
        array = np.broadcast_to(array, value.shape)
    return [ex.const(np.array(array), value.dtype)]


@rule("reshape")
def _reshape(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Reshape", [_in(ex, node), ex.ints(node.outputs[0].shape)])]


@rule("transpose")
def _transpose(ex: Exporter, node: Node) -> list[str]:
    rank = len(_t(node).shape)
    perm = node.attrs.get("perm")
    perm = [p % rank for p in perm] if perm is not None else list(range(rank))[::-1]
    return [ex.emit("Transpose", [_in(ex, node)], perm=perm)]


@rule("expand_dims")
def _expand_dims(ex: Exporter, node: Node) -> list[str]:
    rank = len(node.outputs[0].shape)
    return [ex.emit("Unsqueeze", [_in(ex, node), ex.ints(sorted(a % rank for a in node.attrs["axes"]))])]


@rule("squeeze")
def _squeeze(ex: Exporter, node: Node) -> list[str]:
    x = _t(node)
    axes = node.attrs.get("axes")
    axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else [a % len(x.shape) for a in axes]
    return [ex.emit("Squeeze", [_in(ex, node), ex.ints(sorted(axes))]) if axes else ex.emit("Identity", [_in(ex, node)])]


@rule("concat")
def _concat(ex: Exporter, node: Node) -> list[str]:
    rank = len(_t(node).shape)
    return [ex.emit("Concat", [ex.input(node, i) for i in range(len(node.inputs))], axis=node.attrs["axis"] % rank)]


def _unary_of(fn: Callable[[Exporter, str, Any], str]) -> Callable[[Exporter, Node], list[str]]:
    def apply(ex: Exporter, node: Node) -> list[str]:
        return [fn(ex, ex.input(node, 0), node)]
    return apply


def _one(ex: Exporter, node: Node) -> str:
    return ex.const(1.0, node.inputs[0].dtype)


def _gelu_onnx(ex: Exporter, x: str, node: Node, tanh: bool = False) -> str:
    dtype = node.inputs[0].dtype
    half_x = ex.emit("Mul", [x, ex.const(0.5, dtype)])
    if tanh or node.attrs.get("approximate", "none") == "tanh":  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = ex.emit("Mul", [ex.emit("Mul", [x, x]), x])
        inner = ex.emit("Add", [x, ex.emit("Mul", [cube, ex.const(0.044715, dtype)])])
        t = ex.emit("Tanh", [ex.emit("Mul", [inner, ex.const(math.sqrt(2.0 / math.pi), dtype)])])
    else:  # x/2 (1 + erf(x / sqrt(2)))
        t = ex.emit("Erf", [ex.emit("Mul", [x, ex.const(1.0 / math.sqrt(2.0), dtype)])])
    return ex.emit("Mul", [half_x, ex.emit("Add", [t, _one(ex, node)])])


RULES.update({
    "gelu": _unary_of(_gelu_onnx),
    "erfc": _unary_of(lambda ex, x, n: ex.emit("Sub", [_one(ex, n), ex.emit("Erf", [x])])),
    "silu": _unary_of(lambda ex, x, n: ex.emit("Mul", [x, ex.emit("Sigmoid", [x])])),
    "log1p": _unary_of(lambda ex, x, n: ex.emit("Log", [ex.emit("Add", [x, _one(ex, n)])])),
    "expm1": _unary_of(lambda ex, x, n: ex.emit("Sub", [ex.emit("Exp", [x]), _one(ex, n)])),
})


def _where_positive(ex: Exporter, x: str, node: Node, positive: str, other: str) -> str:
    return ex.emit("Where", [ex.emit("Greater", [x, ex.const(0, node.inputs[0].dtype)]), positive, other])


def _elu_onnx(ex: Exporter, x: str, node: Node) -> str:
    return ex.emit("Elu", [x], alpha=float(node.attrs.get("alpha", 1.0)))


def _softplus_onnx(ex: Exporter, x: str, node: Node) -> str:  # max(x, 0) + log(1 + e^-|x|): no overflow
    dtype = node.inputs[0].dtype
    tail = ex.emit("Log", [ex.emit("Add", [ex.emit("Exp", [ex.emit("Neg", [ex.emit("Abs", [x])])]), _one(ex, node)])])
    return ex.emit("Add", [ex.emit("Max", [x, ex.const(0, dtype)]), tail])


RULES.update({
    "elu": _unary_of(_elu_onnx),
    "leaky_relu": _unary_of(lambda ex, x, n: ex.emit("LeakyRelu", [x], alpha=float(n.attrs.get("slope", 0.01)))),
    "softplus": _unary_of(_softplus_onnx),
    "gelu_tanh": _unary_of(lambda ex, x, n: _gelu_onnx(ex, x, n, tanh=True)),
})


@rule("elu_grad_internal", "elu_curvature_internal", "leaky_relu_grad_internal")
def _activation_grad(ex: Exporter, node: Node) -> list[str]:
    """gy (0 for the curvature) where x > 0, else gy alpha e^x (leaky_relu: slope gy)."""
    x, gy = _in(ex, node, 0), _in(ex, node, 1)
    dtype = node.outputs[0].dtype
    if node.op == "leaky_relu_grad_internal":
        below = ex.emit("Mul", [gy, ex.const(float(node.attrs.get("slope", 0.01)), dtype)])
    else:
        below = ex.emit("Mul", [gy, ex.emit("Mul", [ex.emit("Exp", [x]), ex.const(float(node.attrs.get("alpha", 1.0)),
                                                                                 dtype)])])
    above = ex.const(0, dtype) if node.op == "elu_curvature_internal" else gy
    out = _where_positive(ex, x, node, above, below)
    if node.outputs[0].shape != tuple(node.inputs[1].shape):
        out = ex.emit("Expand", [out, ex.ints(node.outputs[0].shape)])
    return [out]


@rule("logaddexp")
def _logaddexp(ex: Exporter, node: Node) -> list[str]:
    a, b = ex.input(node, 0), ex.input(node, 1)  # max(a, b) + log(1 + e^-|a - b|): no overflow
    gap = ex.emit("Exp", [ex.emit("Neg", [ex.emit("Abs", [ex.emit("Sub", [a, b])])])])
    return [ex.emit("Add", [ex.emit("Max", [a, b]), ex.emit("Log", [ex.emit("Add", [gap, _one(ex, node)])])])]


@rule("stack")
def _stack(ex: Exporter, node: Node) -> list[str]:
    rank = len(node.outputs[0].shape)
    axis = node.attrs["axis"] % rank
    parts = [ex.emit("Unsqueeze", [ex.input(node, i), ex.ints([axis])]) for i in range(len(node.inputs))]
    return [ex.emit("Concat", parts, axis=axis) if len(parts) > 1 else ex.emit("Identity", parts)]


@rule("slice")
def _slice(ex: Exporter, node: Node) -> list[str]:
    shape = _t(node).shape
    a = node.attrs
    axes = a.get("axes")
    axes = list(range(len(a["starts"]))) if axes is None else [x % len(shape) for x in axes]
    steps = a.get("steps") or [1] * len(axes)
    starts, ends = [], []
    for s, e, ax, st in zip(a["starts"], a["stops"], axes, steps):
        start, stop, step = slice(s, e, st).indices(shape[ax])
        starts.append(start)
        ends.append(stop if stop >= 0 else -(2**62))  # a reverse slice through index 0
    return [ex.emit("Slice", [_in(ex, node), ex.ints(starts), ex.ints(ends), ex.ints(axes), ex.ints(steps)])]


@rule("pad")
def _pad(ex: Exporter, node: Node) -> list[str]:
    x = _t(node)
    rank = len(x.shape)
    axes = node.attrs.get("axes")
    axes = list(range(rank)) if axes is None else [v % rank for v in axes]
    before, after = [0] * rank, [0] * rank
    for ax, b, e in zip(axes, node.attrs["before"], node.attrs["after"]):
        before[ax], after[ax] = b, e
    return [ex.emit("Pad", [_in(ex, node), ex.ints(before + after)])]


@rule("gather")
def _gather(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Gather", [_in(ex, node, 0), _in(ex, node, 1)], axis=node.attrs.get("axis", 0) % len(_t(node).shape))]


@rule("scatter_add")
def _scatter_add(ex: Exporter, node: Node) -> list[str]:
    """A ``ScatterND`` with ``reduction="add"`` into zeros; along another axis than 0 the updates are transposed
    so that the indices' axes lead, and the result back."""
    out = node.outputs[0]
    rank = len(out.shape)
    axis = node.attrs.get("axis", 0) % rank
    k = len(_t(node, 1).shape)
    updates = _in(ex, node, 0)
    target = list(out.shape)
    if axis:
        u_rank = len(_t(node, 0).shape)
        updates = ex.emit("Transpose", [updates],
                          perm=[*range(axis, axis + k), *range(axis), *range(axis + k, u_rank)])
        target = [out.shape[axis], *out.shape[:axis], *out.shape[axis + 1:]]
    zeros = ex.emit("Expand", [ex.const(0, out.dtype), ex.ints(target)])
    idx = ex.emit("Unsqueeze", [_in(ex, node, 1), ex.ints([-1])])
    if _t(node, 1).dtype.name != "int64":
        idx = ex.emit("Cast", [idx], to=TensorProto.INT64)
    y = ex.emit("ScatterND", [zeros, idx, updates], reduction="add")
    if axis:
        y = ex.emit("Transpose", [y], perm=[*range(1, axis + 1), 0, *range(axis + 1, rank)])
    return [y]


@rule("embedding")
def _embedding(ex: Exporter, node: Node) -> list[str]:  # the rows of the table (padding_idx only stops gradients)
    idx = _in(ex, node, 1)
    if _t(node, 1).dtype.name not in ("int64", "int32"):
        idx = ex.emit("Cast", [idx], to=TensorProto.INT64)
    return [ex.emit("Gather", [_in(ex, node, 0), idx], axis=0)]


@rule("one_hot")
def _one_hot(ex: Exporter, node: Node) -> list[str]:
    depth = node.attrs["depth"]
    idx = ex.emit("Unsqueeze", [_in(ex, node), ex.ints([-1])])
    hits = ex.emit("Equal", [idx, ex.const(np.arange(depth), _t(node).dtype)])
    return [ex.emit("Cast", [hits], to=onnx_type(node.outputs[0]))]


@rule("cumsum")
def _cumsum(ex: Exporter, node: Node) -> list[str]:
    axis = node.attrs["axis"] % len(_t(node).shape)
    return [ex.emit("CumSum", [_in(ex, node), ex.const(axis, np.int64)],
                    exclusive=int(bool(node.attrs.get("exclusive"))), reverse=int(bool(node.attrs.get("reverse"))))]


# -- convolution and pooling of one axis ------------------------------------------------------------------
def _pads_1d(node: Node, length: int, extent: int, stride: int) -> list[int]:
    p = node.attrs.get("padding", "valid")
    if isinstance(p, str):
        if p == "valid":
            return [0, 0]
        if p == "causal":
            return [extent - 1, 0]
        if p == "same":
            out = -(-length // stride)
            total = max(0, (out - 1) * stride + extent - length)
            return [total // 2, total - total // 2]
        raise OnnxError(f"{node.op}: padding {p!r} has no export rule")
    p = [p] if isinstance(p, int) else list(p)
    return [p[0], p[0]] if len(p) == 1 else p[:2]


@rule("conv1d")
def _conv1d(ex: Exporter, node: Node) -> list[str]:
    x, w = _t(node, 0), _t(node, 1)
    a = node.attrs
    stride, dilation = a.get("stride", 1), a.get("dilation", 1)
    pads = _pads_1d(node, x.shape[-1], dilation * (w.shape[-1] - 1) + 1, stride)
    return [ex.emit("Conv", [_in(ex, node, 0), _in(ex, node, 1)], strides=[stride], dilations=[dilation],
                    pads=[pads[0], pads[1]], group=a.get("groups", 1), kernel_shape=[w.shape[-1]])]


@rule("max_pool1d", "avg_pool1d")
def _pool1d(ex: Exporter, node: Node) -> list[str]:
    a = node.attrs
    k = a["kernel_size"]
    stride = a.get("stride") or k
    shape = _t(node).shape
    pads = _pads_1d(node, shape[-1], k, stride)
    x = _in(ex, node)
    if len(shape) != 3:  # frame pools [..., L] of any rank; ONNX's pools want [N, C, L]
        x = ex.emit("Reshape", [x, ex.ints([int(np.prod(shape[:-1], dtype=np.int64)), 1, shape[-1]])])
    if node.op == "max_pool1d":
        y = ex.emit("MaxPool", [x], kernel_shape=[k], strides=[stride], pads=pads)
    else:
        y = ex.emit("AveragePool", [x], kernel_shape=[k], strides=[stride], pads=pads,
                    count_include_pad=int(bool(a.get("count_include_pad", True))))
    return [y if len(shape) == 3 else ex.emit("Reshape", [y, ex.ints(list(node.outputs[0].shape))])]


from . import rules_export_more  # noqa: E402,F401 - complex, FFT and control-flow rules register themselves


# -- 2-D convolution and pooling of frame-ops-nn (used when that pack is installed) ------------------------
def _pair(value: Any, default: int) -> list[int]:
    if value is None:
        return [default, default]
    values = [value] if isinstance(value, int) else list(value)
    return values * 2 if len(values) == 1 else values[:2]


def _pads_2d(padding: Any, size: tuple[int, ...], extent: list[int], stride: list[int]) -> list[int]:
    """frame-ops-nn's padding ('valid', 'same', p, [ph, pw], [top, bottom, left, right]) as ONNX pads
    [top, left, bottom, right]."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0, 0, 0, 0]
        if padding != "same":
            raise OnnxError(f"2-D padding {padding!r} has no export rule")
        before, after = [], []
        for n, e, s in zip(size, extent, stride):
            total = max(0, (-(-n // s) - 1) * s + e - n)
            before.append(total // 2)
            after.append(total - total // 2)
        return [before[0], before[1], after[0], after[1]]
    values = [padding] if isinstance(padding, int) else list(padding)
    if len(values) == 1:
        return values * 4
    if len(values) == 2:
        return [values[0], values[1], values[0], values[1]]
    top, bottom, left, right = values
    return [top, left, bottom, right]


@rule("conv2d")
def _conv2d(ex: Exporter, node: Node) -> list[str]:
    x, w = _t(node, 0), _t(node, 1)
    a = node.attrs
    stride, dilation = _pair(a.get("stride"), 1), _pair(a.get("dilation"), 1)
    kernel = list(w.shape[2:])
    extent = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    pads = _pads_2d(a.get("padding", "valid"), x.shape[2:], extent, stride)
    return [ex.emit("Conv", [_in(ex, node, 0), _in(ex, node, 1)], strides=stride, dilations=dilation, pads=pads,
                    group=a.get("groups", 1), kernel_shape=kernel)]


@rule("max_pool2d", "avg_pool2d")
def _pool2d(ex: Exporter, node: Node) -> list[str]:
    a = node.attrs
    kernel = _pair(a["kernel_size"], 1)
    stride = _pair(a.get("stride"), 1) if a.get("stride") is not None else kernel
    shape = _t(node).shape
    pads = _pads_2d(a.get("padding", 0), shape[-2:], kernel, stride)
    x = _in(ex, node)
    if len(shape) != 4:  # frame pools [..., H, W] of any rank; ONNX's pools want [N, C, H, W]
        x = ex.emit("Reshape", [x, ex.ints([int(np.prod(shape[:-2], dtype=np.int64)), 1, *shape[-2:]])])
    if node.op == "max_pool2d":
        y = ex.emit("MaxPool", [x], kernel_shape=kernel, strides=stride, pads=pads)
    else:
        y = ex.emit("AveragePool", [x], kernel_shape=kernel, strides=stride, pads=pads,
                    count_include_pad=int(bool(a.get("count_include_pad", True))))
    return [y if len(shape) == 4 else ex.emit("Reshape", [y, ex.ints(list(node.outputs[0].shape))])]


from . import rules_export_grads  # noqa: E402,F401 - the gradients of convolutions, pools and strided slices
from . import rules_export_random  # noqa: E402,F401 - Philox in 64-bit integer ops: random ops draw frame's bits
from . import rules_export_creation  # noqa: E402,F401 - zeros/ones/full/arange/linspace/eye, max-pool select
