"""Helpers shared by the sequence ops: dtype checks, axes, the dtype kernels compute in."""

from __future__ import annotations

import numpy as np

from frame_core import NodeContext, TensorType, ops


def compute_dtype(t: TensorType) -> np.dtype:
    """The dtype a kernel computes in for inputs of type ``t``: float32 for float16/bfloat16, else ``t``'s own.

    Sums and recurrences in half precision stop growing once a term falls below
    the total's last bit, so 2-byte floats are computed in float32 and the
    result is rounded once.
    """
    if t.dtype.is_float and t.dtype.itemsize == 2:
        return np.dtype(np.float32)
    return t.dtype.np


def require_float(ctx: NodeContext, position: int) -> TensorType:
    """Input ``position`` if it is floating, else a ``ShapeError`` naming it."""
    t = ctx.input_types[position]
    if not t.dtype.is_float:
        raise ctx.error(f"input {position} ({ctx.schema.inputs[min(position, len(ctx.schema.inputs) - 1)]!r}) must be "
                        f"floating, got {t}; cast it to a float dtype first")
    return t


def require_numeric(ctx: NodeContext, position: int) -> TensorType:
    """Input ``position`` if it is an integer or float tensor (not bool), else a ``ShapeError``."""
    t = ctx.input_types[position]
    if not (t.dtype.is_float or t.dtype.is_int):
        raise ctx.error(f"input {position} ({ctx.schema.inputs[position]!r}) must be numeric (integer or float), "
                        f"got {t}")
    return t


def require_indices(ctx: NodeContext, position: int) -> TensorType:
    """Input ``position`` if it holds integer indices, else a ``ShapeError`` saying to cast."""
    t = ctx.input_types[position]
    if not t.dtype.is_int:
        raise ctx.error(f"indices (input {position}) must be integers (i32 or i64), got {t}; indices are positions, "
                        f"so a float or bool tensor is refused: cast it with astype(np.int64) (and round first)")
    return t


def normalize_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` as a non-negative int below ``rank``; a ``ShapeError`` naming the valid range otherwise."""
    if not -rank <= axis < rank:
        valid = f"{-rank}..{rank - 1}" if rank else "none: the input is a scalar"
        raise ctx.error(f"{what} {axis} is out of range for an input of rank {rank} (valid: {valid})")
    return axis % rank


def as_out(result: np.ndarray, t: TensorType) -> np.ndarray:
    """``result`` as an ndarray of exactly type ``t`` (rounded once when it was computed wider)."""
    if isinstance(result, np.ndarray) and result.dtype == t.dtype.np and result.shape == t.shape:
        return result
    out = np.empty(t.shape, t.dtype.np)
    out[...] = result
    return out


def shift(x, axis: int, by: int):  # noqa: ANN001, ANN201 - traced tensors
    """``x`` moved ``by`` places along ``axis`` (+1: ``out_t = x_{t-1}``, -1: ``out_t = x_{t+1}``), zero-filled.

    A slice and a pad (frame-ops-basic), each the other's gradient, so a shift keeps gradients closed. The slice
    is written over every axis and counted from the end, as pad's GradientFn writes it: the slice a shift makes
    and the one the gradient of the opposite shift's pad makes are then one node signature, which the closure
    audit instantiates once (and no length of x is written down).
    """
    n = x.shape[axis]
    by = max(-n, min(n, by))
    starts, stops = [0] * len(x.shape), [_TO_THE_END] * len(x.shape)
    if by > 0:
        stops[axis] = -by  # x[:n - by]
    else:
        starts[axis] = -by  # x[-by:]
    kept = ops.slice(x, starts=starts, stops=stops)
    return ops.pad(kept, before=[max(by, 0)], after=[max(-by, 0)], axes=[axis])


_TO_THE_END = int(np.iinfo(np.int64).max)  # a slice stop meaning "to the end", as x[2:] is traced
