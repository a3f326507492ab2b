"""Helpers shared by the pack's ops: shape inference, broadcast axes, the accumulation dtype, unbroadcast."""

from __future__ import annotations

import numpy as np

from frame_core import NodeContext, TensorType, ops


def require_numeric(ctx: NodeContext) -> None:
    """Refuse bool inputs: arithmetic and sums need integers or floats.

    numpy refuses boolean ``negative``/``subtract`` only at run time, and a bool
    sum is a logical any, not a count, so the refusal belongs in shape inference.
    """
    for i, t in enumerate(ctx.input_types):
        if not (t.dtype.is_float or t.dtype.is_int):
            raise ctx.error(
                f"needs numeric (integer or float) inputs, got {t} for input {i} ({ctx.schema.inputs[i]!r}); "
                f"cast it to an integer or float dtype first (e.g. feed x.astype(np.int32) to an i32 input)"
            )


def broadcast(ctx: NodeContext) -> list[TensorType]:
    """numpy broadcasting of all inputs, which must be numeric and share one dtype."""
    require_numeric(ctx)
    types = ctx.input_types
    first = types[0]
    for i, t in enumerate(types[1:], 1):
        if t.dtype is not first.dtype:
            raise ctx.error(f"inputs must share a dtype, got {first} and {t} (input {i}); cast one of them first")
    shape = broadcast_shapes(ctx, [t.shape for t in types])
    return [TensorType(first.dtype, shape)]


def broadcast_shapes(ctx: NodeContext, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes):  # the common case (most elementwise nodes): nothing broadcasts
        return first
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0}
        dims.discard(1)
        if len(dims) > 1:
            listed = " and ".join(f"[{', '.join(map(str, s))}]" for s in shapes)
            raise ctx.error(
                f"cannot broadcast shapes {listed}: at axis {axis - rank} (counting from the end) the sizes are "
                f"{sorted(dims)}; numpy broadcasting needs equal sizes or 1"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_axes(src: tuple[int, ...], dst: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of ``src`` that broadcasting ``dst`` to ``src`` added (leading) or stretched (size 1 in ``dst``).

    Summing over them with ``keepdims=True`` gives ``(1,) * (len(src) - len(dst)) + dst``.
    """
    lead = len(src) - len(dst)
    return tuple(range(lead)) + tuple(lead + i for i, d in enumerate(dst) if d == 1 and src[lead + i] != 1)


def unbroadcast(g, x):  # noqa: ANN001, ANN201 - traced Tensors
    """``g`` summed back to the shape of the operand ``x``: the gradient of broadcasting.

    The shape is read from ``x``'s type (``reduce_like_internal``), never written down, even where ``g`` has it
    already: a training graph re-specialised for another batch size then reduces where broadcasting now
    stretches (an operand traced at batch 1), and compiling drops the reduction where it is an identity."""
    return ops.reduce_like_internal(g, x)


def accumulation_dtype(t: TensorType) -> np.dtype:
    """The dtype in which kernels sum elements of type ``t``: float32 for 2-byte floats, else ``t``'s own.

    A float16/bfloat16 running total stops growing once the terms fall below its
    last bit (4096 bfloat16 ones sum to 256), so half precision accumulates in
    float32 and rounds the result once. Integer sums keep their dtype.
    """
    if t.dtype.is_float and t.dtype.itemsize == 2:
        return np.dtype(np.float32)
    return t.dtype.np


def sum_into(x: np.ndarray, axes: tuple[int, ...], out: np.ndarray, acc: np.dtype) -> np.ndarray:
    """``x`` summed over ``axes`` in dtype ``acc``, written into ``out`` and returned.

    ``out`` has the keepdims shape of the sum, less the leading axes it lacks
    (``broadcast_axes`` gives such axes). When ``acc`` is ``out``'s dtype the
    sum goes straight into ``out``; otherwise the ``acc`` total is rounded once.
    """
    if acc == out.dtype:  # reshaping only inserts size-1 axes, so it is a view of out
        np.sum(x, axis=axes, dtype=acc, keepdims=True, out=out.reshape((1,) * (x.ndim - out.ndim) + out.shape))
    else:
        out[...] = np.sum(x, axis=axes, dtype=acc, keepdims=True).reshape(out.shape)
    return out


def float_unary(ctx: NodeContext) -> list[TensorType]:
    """Same type as the input, which must be floating."""
    (t,) = ctx.input_types
    if not t.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {t}; cast it to a float dtype first")
    return [t]


def numeric_unary(ctx: NodeContext) -> list[TensorType]:
    """Same type as the input, which must be numeric (integer or float)."""
    require_numeric(ctx)
    return [ctx.input_types[0]]


def float_broadcast(ctx: NodeContext) -> list[TensorType]:
    (out,) = broadcast(ctx)
    if not out.dtype.is_float:
        raise ctx.error(f"needs floating inputs, got {', '.join(map(str, ctx.input_types))}; cast them to a float "
                        "dtype first (ops.cast(x, to='f32'))")
    return [out]


def valid_axes(rank: int) -> str:
    """What a message says about the axes of a rank-``rank`` tensor: their range, or that there are none."""
    return f"valid: {-rank}..{rank - 1}" if rank else "a rank-0 tensor has no axes"


def normalize_axes(ctx: NodeContext, axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """Axes as sorted non-negative ints (``None`` means all); errors name the bad axis."""
    if axes is None:
        return tuple(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.error(f"axis {a} is out of range for rank {rank} ({valid_axes(rank)})")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(out))
