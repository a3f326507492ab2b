"""Shape inference and kernel helpers shared by the pack's ops."""

from __future__ import annotations

import numpy as np

from frame_core import NodeContext, TensorType


def out_array(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``out``, or a fresh array like ``x``: kernels return ndarrays, never numpy scalars (rank 0 included)."""
    return np.empty_like(x) if out is None else out


def typed(ctx: NodeContext, value: float) -> np.generic:
    """``value`` as a scalar of the node's dtype: a Python float would promote bfloat16 to float32."""
    return ctx.input_types[0].dtype.np.type(value)


def float_unary(ctx: NodeContext) -> list[TensorType]:
    """One floating input; the output has its type."""
    (x,) = ctx.input_types
    if not x.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {x}; cast it to a float dtype first")
    return [x]


def float_pair(ctx: NodeContext) -> list[TensorType]:
    """Two floating inputs of one type (a value and its cotangent); the output has that type."""
    x, g = ctx.input_types
    if x != g or not x.dtype.is_float:
        raise ctx.error(f"needs two floating inputs of one type, got {x} and {g}")
    return [g]
