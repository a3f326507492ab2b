"""``retype_graph``: the same computation with its floating values in another dtype.

The numerical checks differentiate graphs in float64 (so that central
differences are accurate to about 1e-10) and compare float16/bfloat16
gradients against float32; both need a graph re-typed from the one the user
built. The copy is made node by node through the ops' own schemas:

- floating graph inputs get ``dtype``; integer and boolean inputs keep theirs;
- a ``constant`` whose value is floating is cast to ``dtype``;
- sub-graph attributes (control flow) are re-typed recursively;
- every node is re-added with ``Graph.add_node`` so its output types are
  inferred again by its schema's ``shape_infer``.

Limits: other attributes are kept as they are, so an op that pins a dtype
through an attribute (a cast to ``f32``, a tensor attribute other than a
constant's value) still produces that dtype, and an op whose shape inference
refuses ``dtype`` makes the re-typing fail with a ``ShapeError`` naming the
node. Casting a constant can round it (float64 -> float16).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FrameError, ShapeError
from ..ir.dtypes import DType, as_dtype, float64
from ..ir.graph import Graph, Value
from ..ir.types import TensorType
from ..ops_registry.registry import Registry, registry as current_registry

__all__ = ["retype_graph", "retype_type", "retype_array", "retype_attrs"]


def retype_type(t: TensorType, dtype: DType | str) -> TensorType:
    """``t`` with ``dtype`` if ``t`` is floating, else ``t`` unchanged."""
    return t.with_dtype(as_dtype(dtype)) if t.dtype.is_float else t


def retype_array(a: np.ndarray, dtype: DType | str) -> np.ndarray:
    """``a`` cast to ``dtype`` if it is floating, else ``a`` unchanged."""
    a = np.asarray(a)
    return a.astype(as_dtype(dtype).np) if as_dtype(a.dtype).is_float else a


def retype_graph(graph: Graph, dtype: DType | str = float64, *, registry: Registry | None = None) -> Graph:
    """A copy of ``graph`` computing in ``dtype`` (floating inputs and constants re-typed, nodes re-inferred).

    Raises ``ShapeError`` naming the node whose op rejects the new types.
    See the module docstring for what is and is not re-typed.
    """
    target = as_dtype(dtype)
    if not target.is_float:
        raise ShapeError(f"retype_graph needs a floating dtype, got {target}")
    reg = registry if registry is not None else current_registry()
    out = Graph(graph.name)
    vmap: dict[Value, Value] = {}
    for value in graph.inputs:
        vmap[value] = out.add_input(retype_type(value.type, target), value.name)
    for index, node in enumerate(graph.nodes):
        attrs = _retype_attrs(node.op, node.attrs, target, reg)
        inputs = [vmap[v] for v in node.inputs]
        try:
            copy = out.add_node(node.op, inputs, attrs, registry=reg)
        except FrameError as exc:
            types = ", ".join(str(v.type) for v in inputs)
            raise ShapeError(
                f"cannot re-type graph {graph.name!r} to {target}: node {index} ({node.op}) rejects [{types}]: {exc}"
            ) from exc
        for old, new in zip(node.outputs, copy.outputs):
            vmap[old] = new
    for value in graph.outputs:
        out.mark_output(vmap[value])
    return out


def retype_attrs(op: str, attrs: dict[str, Any], dtype: DType | str, *, registry: Registry | None = None) -> dict[str, Any]:
    """``attrs`` of an ``op`` node with its sub-graphs (control-flow bodies) re-typed to ``dtype``, as ``retype_graph``
    does for the nodes it copies (the same dict when nothing changes is not promised: always a copy)."""
    reg = registry if registry is not None else current_registry()
    return _retype_attrs(op, dict(attrs), as_dtype(dtype), reg)


def _retype_attrs(op: str, attrs: dict[str, Any], target: DType, reg: Registry) -> dict[str, Any]:
    changed: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, Graph):
            changed[key] = retype_graph(value, target, registry=reg)
        elif op == "constant" and key == "value" and isinstance(value, np.ndarray):
            changed[key] = retype_array(value, target)
    return {**attrs, **changed} if changed else dict(attrs)
