"""Sizes read from ``Shape`` that follow the batch: where a shape the importer computes came from.

The importer computes shape sub-graphs while importing (``Shape -> Gather -> Unsqueeze -> Concat``), so a size
read from a traced tensor becomes a number. Where that number only moves a shape around (a reshape target), the
any-batch probe writes ``-1`` for it; where a model *materialises* it (torch's TorchScript exporter builds a
GRU's zero initial state ``[1, batch, hidden]`` with ``ConstantOfShape``, ``expand_as`` is an ``Expand`` to
``Shape(y)``), the number would be baked into a constant of the traced size.

So each known integer array computed from ``Shape`` carries, per element, its *source*: ``(tensor, axis)``
when the element is that traced tensor's size along ``axis``, ``None`` for a literal. ``track`` carries the
sources through the ops that only move elements (``Gather``, ``Slice``, ``Concat``, ``Unsqueeze``, ``Squeeze``,
``Reshape``, ``Flatten``, ``Identity``, an integer ``Cast``, and ``Where`` on a known mask, which torch writes
for ``expand(-1, n, -1)``); arithmetic on a size (``Mul``, ``Add``) drops them, and the probe judges the
result as before. Where the shape of a ``ConstantOfShape``, ``Expand`` or ``Tile`` (an axis of size 1
repeated), or the limit of an integer ``Range(0, n, 1)``, has sources, the node is not folded: ``filled``,
``expanded`` and ``counted`` (an exclusive ``cumsum`` of ones) build it from the source tensors' types
(``zeros_like``, which reads a type only, summed to the one axis: every size is the tensor's when the graph
runs), so the result follows the batch at re-specialisation. Nothing is trusted blindly: a source is used
only where its size equals the element's value while importing, and the any-batch probe still compares two
imports.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from frame_core import Tensor, ops

__all__ = ["track", "followable", "CONSUMERS", "filled", "expanded", "counted"]

#: ops that move the elements of a shape array without computing new ones: their sources follow
MOVERS = frozenset({"Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Cast",
                    "Where"})
#: the inputs whose elements a mover moves (default: the first; Where selects from its two values by a known mask,
#: as torch writes ``expand(-1, x.size(0), -1)``: the -1s replaced by 1)
_MOVED = {"Concat": slice(None), "Where": slice(1, 3)}
#: ops that materialise a shape (input position of the shape): with sources there, built to follow them
CONSUMERS = {"ConstantOfShape": 0, "Expand": 1, "Range": 1, "Tile": 1}
_LIMIT = 64  # shape arrays longer than this are not tracked (a shape has a few elements)
_CONSTANT_FILL = 1 << 16  # a followed fill's literal part up to this many elements is a constant


def followable(graph: Any) -> frozenset[str]:
    """The names of the values whose sources can matter: those that reach a ``CONSUMERS`` shape input through
    ``MOVERS`` only, in ``graph`` and its sub-graphs (ONNX names are unique across them). Nothing else is tracked,
    so a model that materialises no size read from ``Shape`` pays nothing."""
    producers: dict[str, Any] = {}
    wanted_inputs: list[str] = []

    def visit(g: Any) -> None:
        for node in g.node:
            for name in node.output:
                if name:
                    producers[name] = node
            at = CONSUMERS.get(node.op_type)
            if at is not None and len(node.input) > at and node.input[at]:
                wanted_inputs.append(node.input[at])
            for attr in node.attribute:
                for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    visit(body)

    visit(graph)
    found: set[str] = set()
    while wanted_inputs:
        name = wanted_inputs.pop()
        node = producers.get(name)
        if name in found or node is None or node.op_type not in MOVERS | {"Shape"}:
            continue
        found.add(name)
        if node.op_type != "Shape":
            wanted_inputs.extend(n for n in list(node.input)[_MOVED.get(node.op_type, slice(1))] if n)
    return frozenset(found)


def track(op_type: str, values: list[Any], sources: list[Any], attrs: dict[str, Any], output: Any,
          fixed: dict[int, set[int]]) -> np.ndarray | None:
    """The sources of ``output`` (an object array of its shape), or ``None`` when it has none.

    ``values``: the node's inputs; ``sources``: each input's object array of sources, or ``None``; ``fixed``:
    per graph-input tensor (by id), the axes the model declares with a fixed size (never a source)."""
    if not isinstance(output, np.ndarray) or output.dtype.kind not in "iu" or output.size > _LIMIT:
        return None
    if op_type == "Shape":
        x = values[0]
        if not isinstance(x, Tensor):
            return None
        rank = len(x.shape)
        static = fixed.get(id(x), set())
        every = np.empty(rank, object)
        for axis in range(rank):
            every[axis] = None if axis in static else (x, axis)
        start, end = attrs.get("start", 0), attrs.get("end")
        picked = every[slice(start, end)]
        return picked if picked.shape == output.shape and any(s is not None for s in picked) else None
    if op_type not in MOVERS or not any(s is not None for s in sources[_MOVED.get(op_type, slice(1))]):
        return None
    data = [s if s is not None else _literal(v) for s, v in zip(sources, values)]
    try:
        moved = _move(op_type, data, values, attrs, output.shape)
    except (ValueError, IndexError, TypeError):
        return None
    if not isinstance(moved, np.ndarray) or moved.shape != output.shape:
        return None
    return moved if any(s is not None for s in moved.reshape(-1)) else None


def _literal(value: Any) -> np.ndarray | None:
    if not isinstance(value, np.ndarray):
        return None
    out = np.empty(value.shape, object)
    out.fill(None)
    return out


def _move(op_type: str, data: list[Any], values: list[Any], attrs: dict[str, Any],
          shape: tuple[int, ...]) -> np.ndarray | None:
    """``op_type`` applied to the object arrays of sources, as the op moves the values."""
    src = data[0]
    if op_type in ("Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Cast"):
        return src.reshape(shape) if src.size == math.prod(shape) else None  # the elements keep their order
    if op_type == "Gather":
        idx = values[1]
        if not isinstance(idx, np.ndarray):
            return None
        axis = attrs.get("axis", 0)
        axis = axis % src.ndim if src.ndim else 0
        size = src.shape[axis]
        picked = np.take(src, np.where(idx < 0, idx + size, idx).reshape(-1), axis=axis)  # (1-D: an array, even
        return picked.reshape(src.shape[:axis] + idx.shape + src.shape[axis + 1:])      # of one tuple)
    if op_type == "Where":
        cond = values[0]
        if not isinstance(cond, np.ndarray) or cond.dtype != np.bool_ or data[1] is None or data[2] is None:
            return None
        return np.where(cond, data[1], data[2])
    if op_type == "Concat":
        if any(d is None for d in data):
            return None
        return np.concatenate(data, axis=attrs.get("axis", 0))
    if op_type == "Slice":
        known = [v for v in values[1:] if isinstance(v, np.ndarray)]
        if len(known) < 2 or len(known) != len(values) - 1:  # every bound given and known
            return None
        starts, ends = known[0].reshape(-1).tolist(), known[1].reshape(-1).tolist()
        axes = known[2].reshape(-1).tolist() if len(known) > 2 else list(range(len(starts)))
        steps = known[3].reshape(-1).tolist() if len(known) > 3 else [1] * len(starts)
        cut = [slice(None)] * src.ndim
        for s, e, a, t in zip(starts, ends, axes, steps):
            cut[a] = slice(int(s), int(e), int(t))
        return src[tuple(cut)]
    return None


def _shaper(source: tuple[Tensor, int], position: int, rank: int, dtype: str) -> Tensor:
    """A tensor of ``dtype`` of rank ``rank``, 1 everywhere but at ``position``, where it has the size of
    ``source``'s axis: ``zeros_like`` reads the tensor's type only, and the sum over its other axes keeps the
    axis's size even where another axis is empty."""
    t, axis = source
    others = [k for k in range(len(t.shape)) if k != axis]
    row = ops.zeros_like(t, dtype="i32")
    if others:
        row = ops.sum(row, axes=others)
    row = ops.zeros_like(row, dtype=dtype)
    spread = [k for k in range(rank) if k != position]
    return ops.expand_dims(row, axes=spread) if spread else row


def _followed(shape: list[int], sources: np.ndarray) -> list[tuple[int, tuple[Tensor, int]]]:
    """The positions of ``shape`` whose size comes from a source, checked against the traced size."""
    out = []
    for i, (size, s) in enumerate(zip(shape, sources.reshape(-1))):
        if s is not None and s[0].shape[s[1]] == size:
            out.append((i, s))
    return out


def _grow(base: Any, follow: list[tuple[int, tuple[Tensor, int]]], rank: int, dtype: str) -> Any:
    """``base`` broadcast against the followed sizes: one ``where`` per source axis (its value is ``base``'s), or
    one against ``zeros_like`` of the tensor when the sources are all its axes in order (``expand_as``)."""
    tensors = {id(t) for _, (t, _) in follow}
    if len(follow) == rank and len(tensors) == 1 and len(follow[0][1][0].shape) == rank \
            and all(i == a for i, (_, a) in follow):
        return ops.where(np.array(True), base, ops.zeros_like(follow[0][1][0], dtype=dtype))
    for i, s in follow:
        base = ops.where(np.array(True), base, _shaper(s, i, rank, dtype))
    return base


def filled(shape: list[int], sources: np.ndarray, value: np.ndarray) -> Any:
    """``ConstantOfShape(shape)`` filled with ``value``, its sourced sizes following their tensors, or ``None``
    when no size follows (the caller builds the fixed fill)."""
    follow = _followed(shape, sources)
    if not follow:
        return None
    dtype, scalar, rank = str(value.dtype), value.reshape(-1)[0], len(shape)
    if len(follow) == rank and len({id(t) for _, (t, _) in follow}) == 1 and len(follow[0][1][0].shape) == rank \
            and all(i == a for i, (_, a) in follow):  # zeros_like(x) / ones_like(x), as torch exports them
        like = follow[0][1][0]
        if scalar == 0 and not np.signbit(scalar):
            return ops.zeros_like(like, dtype=dtype)
        if scalar == 1:
            return ops.ones_like(like, dtype=dtype)
    static = list(shape)
    for i, _ in follow:
        static[i] = 1
    # a small fill is a constant (any value: frame's full refuses NaN and infinities, masks fill with -inf); a
    # large one is computed when the graph runs, as ConstantOfShape's rule does (nothing large while importing)
    fill = np.full(static, scalar, value.dtype) if math.prod(static) <= _CONSTANT_FILL else \
        ops.full(static, scalar.item(), dtype=dtype)
    return _grow(fill, follow, rank, dtype)


def expanded(x: Any, out: tuple[int, ...], sources: np.ndarray, dtype: np.dtype) -> Any:
    """``Expand(x, target)`` with the target's sourced sizes following their tensors (``out``: the broadcast
    shape; the target's sources align with its trailing axes), or ``None`` when no size follows."""
    rank = len(out)
    aligned = np.empty(rank, object)
    aligned.fill(None)
    aligned[rank - sources.size:] = sources.reshape(-1)
    follow = _followed(list(out), aligned)
    if not follow:
        return None
    xshape = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    static = [1 if aligned[i] is not None else d for i, d in enumerate(out)]
    base = x
    if any(d != 1 and d != xshape[i] for i, d in enumerate(static)) or len(x.shape) < rank:
        # the literal sizes x lacks: broadcast against a fill of them (no traced size is written)
        base = ops.where(np.array(True), x, ops.full(static, 0, dtype=str(dtype)))
    return _grow(base, follow, rank, str(dtype))


def counted(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, sources: np.ndarray | None) -> Any:
    """``Range(0, n, 1)`` of integers with ``n`` a size read from a tensor (``torch.arange(x.size(1))``): the
    exclusive running sum of ones along that axis, so it counts to the size the graph runs at; ``None`` for any
    other range (a start or step other than 0 and 1, a floating range, a literal limit)."""
    source = sources.reshape(-1)[0] if sources is not None and sources.size == 1 else None
    if source is None or start.dtype.kind != "i" or int(start.reshape(())) != 0 or int(delta.reshape(())) != 1 \
            or source[0].shape[source[1]] != int(limit.reshape(())):
        return None
    ones = ops.ones_like(_shaper(source, 0, 1, str(start.dtype)))
    return ops.cumsum(ones, axis=0, exclusive=True)
