"""Export rules of the creation ops (``zeros``, ``ones``, ``full``, ``zeros_like``, ``ones_like``, ``arange``,
``linspace``, ``eye``) and of ``max_pool1d/2d_select_internal`` (second-order pool gradients).

The creation ops give frame's kernels' bits on ONNX Runtime without storing their values: a fill is one scalar
``Expand``-ed to the (static) shape; ``arange`` and ``linspace`` repeat numpy's float64 arithmetic on a
``Range`` of indices (numpy's ``arange`` fills ``start + i * ((start + step) - start)``; ``linspace`` is
``i * step + start`` with ``step = (stop - start) / div``, or ``i / div * delta`` when that step underflows to 0,
its last value set to ``stop``, floored for an integer dtype) and round once to the output dtype; ``eye``
compares row and column indices. Only float16 and bfloat16 ``arange``/``linspace`` are stored as constants:
rounding float64 to them through ONNX's ``Cast`` may round twice (via float32) where numpy rounds once.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from frame_core import Node

from .export import Exporter, onnx_type
from .rules_export import RULES, rule
from .rules_export_grads import _x, max_pool_indices

__all__ = ["RULES"]


def _filled(ex: Exporter, node: Node, value: float) -> list[str]:
    out = node.outputs[0]
    scalar = ex.const(np.full((), value, out.dtype.np), out.dtype)  # np.full's conversion, as the kernel's
    return [ex.emit("Expand", [scalar, ex.ints(list(out.shape))])]


@rule("zeros", "zeros_like")
def _zeros(ex: Exporter, node: Node) -> list[str]:
    return _filled(ex, node, 0)


@rule("ones", "ones_like")
def _ones(ex: Exporter, node: Node) -> list[str]:
    return _filled(ex, node, 1)


@rule("full")
def _full(ex: Exporter, node: Node) -> list[str]:
    return _filled(ex, node, node.attrs["value"])


def _indices(ex: Exporter, n: int) -> str:
    """``[0, 1, ..., n - 1]`` as float64."""
    index = ex.emit("Range", [ex.const(np.int64(0)), ex.const(np.int64(n)), ex.const(np.int64(1))])
    return ex.emit("Cast", [index], to=TensorProto.DOUBLE)


def _rounded(ex: Exporter, node: Node, values: str) -> str:
    """float64 ``values`` as the output's dtype (numpy's ``astype``: round to nearest, or truncate to integers)."""
    out = node.outputs[0]
    return values if out.dtype.name == "float64" else ex.emit("Cast", [values], to=onnx_type(out))


@rule("arange")
def _arange(ex: Exporter, node: Node) -> list[str]:
    out = node.outputs[0]
    start, stop, step = (node.attrs[k] for k in ("start", "stop", "step"))
    n = out.shape[0]
    if out.dtype.is_int:  # start + step * i, exact in int64 (whole start and step)
        index = ex.emit("Range", [ex.const(np.int64(0)), ex.const(np.int64(n)), ex.const(np.int64(1))])
        values = ex.emit("Add", [ex.emit("Mul", [index, ex.const(np.int64(step))]), ex.const(np.int64(start))])
        return [values if out.dtype.name == "int64" else ex.emit("Cast", [values], to=onnx_type(out))]
    if n < 2 or out.dtype.name in ("float16", "bfloat16"):
        return [ex.const(np.arange(start, stop, step, dtype=np.float64)[:n].astype(out.dtype.np), out.dtype)]
    first = float(start)
    delta = (first + float(step)) - first  # numpy's fill: the step as the first two values give it
    values = ex.emit("Add", [ex.emit("Mul", [_indices(ex, n), ex.const(np.float64(delta))]),
                             ex.const(np.float64(first))])
    return [_rounded(ex, node, values)]


@rule("linspace")
def _linspace(ex: Exporter, node: Node) -> list[str]:
    out = node.outputs[0]
    a = node.attrs
    start, stop, num, endpoint = float(a["start"]), float(a["stop"]), int(a["num"]), bool(a["endpoint"])
    if num < 2 or out.dtype.name in ("float16", "bfloat16"):
        return [ex.const(np.linspace(start, stop, num, endpoint=endpoint, dtype=np.float64).astype(out.dtype.np)
                         if not out.dtype.is_int else
                         np.linspace(start, stop, num, endpoint=endpoint, dtype=out.dtype.np), out.dtype)]
    div = num - 1 if endpoint else num
    delta = np.float64(stop) - np.float64(start)
    step = delta / div
    i = _indices(ex, num)
    if step == 0:  # numpy's rule for a step that underflows: divide first, then scale
        y = ex.emit("Mul", [ex.emit("Div", [i, ex.const(np.float64(div))]), ex.const(delta)])
    else:
        y = ex.emit("Mul", [i, ex.const(np.float64(step))])
    y = ex.emit("Add", [y, ex.const(np.float64(start))])
    if endpoint:  # the last value is stop itself
        y = ex.emit("Concat", [ex.emit("Slice", [y, ex.ints([0]), ex.ints([num - 1])]),
                               ex.const(np.array([stop], np.float64))], axis=0)
    if out.dtype.is_int:
        y = ex.emit("Floor", [y])
    return [_rounded(ex, node, y)]


@rule("eye")
def _eye(ex: Exporter, node: Node) -> list[str]:
    out = node.outputs[0]
    n, m = out.shape
    rows = ex.const(np.arange(n, dtype=np.int64).reshape(n, 1) + int(node.attrs.get("k") or 0))
    cols = ex.const(np.arange(m, dtype=np.int64).reshape(1, m))
    return [ex.emit("Cast", [ex.emit("Equal", [rows, cols])], to=onnx_type(out))]


@rule("max_pool1d_select_internal", "max_pool2d_select_internal")
def _max_pool_select(ex: Exporter, node: Node) -> list[str]:
    """g read at the first maximum of each window of x: ``MaxPool``'s ``Indices`` (flat over x) into g."""
    indices, _ = max_pool_indices(ex, node)
    flat = ex.ints([-1])
    picked = ex.emit("GatherElements", [ex.emit("Reshape", [_x(ex, node, 1), flat]),
                                        ex.emit("Reshape", [indices, flat])], axis=0)
    return [ex.emit("Reshape", [picked, ex.ints(list(node.outputs[0].shape))])]
