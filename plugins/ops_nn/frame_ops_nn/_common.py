"""Helpers shared by the nn ops: the dtype kernels compute in, exact output types, int-tuple attributes."""

from __future__ import annotations

import numpy as np

from frame_core import NodeContext, TensorType


def compute_dtype(t: TensorType) -> np.dtype:
    """float32 for float16/bfloat16 inputs (sums in 2-byte floats lose their small terms), else ``t``'s dtype."""
    if t.dtype.is_float and t.dtype.itemsize == 2:
        return np.dtype(np.float32)
    return t.dtype.np


def as_out(result: np.ndarray, t: TensorType) -> np.ndarray:
    """``result`` as a fresh ndarray of exactly type ``t`` (rounded once when it was computed wider)."""
    if isinstance(result, np.ndarray) and result.dtype == t.dtype.np and result.shape == t.shape \
            and result.flags.c_contiguous and result.base is None:
        return result
    out = np.empty(t.shape, t.dtype.np)
    out[...] = result
    return out


def require_float(ctx: NodeContext, position: int) -> TensorType:
    t = ctx.input_types[position]
    if not t.dtype.is_float:
        raise ctx.error(f"input {position} ({ctx.schema.inputs[position]!r}) must be floating, got {t}; cast it to "
                        "a float dtype first")
    return t


def same_float(ctx: NodeContext) -> tuple[TensorType, ...]:
    """All inputs, checked to be floating tensors of one dtype."""
    ts = ctx.input_types
    if not all(t.dtype.is_float for t in ts) or len({t.dtype for t in ts}) != 1:
        names = ", ".join(f"{n}={t}" for n, t in zip(ctx.schema.inputs, ts))
        raise ctx.error(f"inputs must be floating tensors of one dtype, got {names}; cast them to one float dtype")
    return ts


def per_dim(ctx: NodeContext, name: str, nd: int, minimum: int = 1) -> tuple[int, ...]:
    """Attribute ``name`` (one int, or one per spatial dim) as ``nd`` ints, each ``>= minimum``."""
    value = ctx.attrs[name]
    if len(value) == 1:
        value = value * nd
    if len(value) != nd:
        raise ctx.error(f"{name} must be one int or {nd} ints (one per spatial axis), got {list(value)}")
    if min(value) < minimum:
        raise ctx.error(f"{name} must be >= {minimum}, got {list(value)}")
    return tuple(value)
