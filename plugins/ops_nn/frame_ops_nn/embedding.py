"""embedding(table[V, d], indices[...]; padding_idx) -> [..., d], with a scatter-add gradient.

A lookup of rows of ``table`` (frame-ops-sequence's ``gather`` along axis 0)
whose table gradient is ``scatter_add(gy, indices)``: every row receives the
sum of the cotangents of the positions that looked it up. With ``padding_idx``
set, the positions holding that index send no gradient, so the padding row
never trains (torch.nn.functional.embedding's ``padding_idx``; the forward pass
still returns the row as stored). Indices are integers (i32 or i64), never
differentiated; every index must lie in ``0..V-1``, else the kernel raises a
``frame_core.DataError`` naming the first offending index and its position.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops
from frame_ops_sequence.gather import check_indices


def _layout(ctx: NodeContext) -> tuple[TensorType, TensorType]:
    table, indices = ctx.input_types
    if not table.dtype.is_float or table.rank != 2:
        raise ctx.error(f"table must be a floating [V, d] matrix (one row per index), got {table}")
    if not indices.dtype.is_int:
        raise ctx.error(f"indices must be integers (i32 or i64), got {indices}; cast them with astype(np.int64)")
    pad = ctx.attrs["padding_idx"]
    if pad is not None and not 0 <= pad < table.shape[0]:
        raise ctx.error(f"padding_idx {pad} must index a row of the table (0..{table.shape[0] - 1})")
    return table, indices


def _shape(ctx: NodeContext) -> list[TensorType]:
    table, indices = _layout(ctx)
    return [table.with_shape(indices.shape + table.shape[1:])]


def _kernel(ctx: NodeContext) -> Callable:
    table_t, _ = _layout(ctx)
    (y_t,) = ctx.output_types
    n = table_t.shape[0]

    def kernel(table: np.ndarray, indices: np.ndarray) -> np.ndarray:
        check_indices("embedding", indices, n, f"the table {table_t}", "enlarge the table")
        return np.take(table, indices, axis=0, out=np.empty(y_t.shape, y_t.dtype.np), mode="clip")
    return kernel


def _gradient(ctx: NodeContext):
    pad = ctx.attrs["padding_idx"]

    def grads(table, indices, y, gy):  # noqa: ANN001, ANN202 - traced tensors
        if pad is not None:  # positions holding the padding index send nothing
            keep = ops.expand_dims(ops.not_equal(indices, pad), axes=[-1])
            gy = ops.where(keep, gy, 0.0)
        return [ops.scatter_add_like_internal(gy, indices, table, axis=0), None]  # the table's size read from it
    return ctx.grad_graph(grads)


def _surrogate(table: np.ndarray, indices: np.ndarray, padding_idx: int | None = None) -> np.ndarray:
    """What the GradientFn is the derivative of (ARCH-066 exception): the padding row held constant (here 0)."""
    if padding_idx is not None:
        table = table.copy()
        table[padding_idx] = 0
    return np.take(table, indices, axis=0)


EMBEDDING = OpSchema(
    "embedding",
    inputs=("table", "indices"),
    attrs={"padding_idx": AttrSpec("int", None, "an index whose row receives no gradient; none: every row trains")},
    shape_infer=_shape,
    kernels={"cpu": _kernel},
    gradient=_gradient,
    nondiff_inputs=(1,),
    # padding_idx's zero gradient is a definition (torch's), not the derivative of the lookup: numerical checks
    # differentiate the lookup with that row held constant
    gradient_surrogate=_surrogate,
    traits=("any_shape_gradient",),
    doc="Rows of table[V, d] at integer indices (torch.nn.functional.embedding): output indices.shape + [d]. "
        "The table's gradient is a scatter-add; rows at padding_idx get none. Indices outside 0..V-1 raise "
        "DataError.",
    examples=[
        Example(["f32[5, 3]", "i64[4]"], low=0, high=4, note="duplicates likely"),
        Example(["f64[6, 4]", "i32[2, 3]"], {"padding_idx": 0}, low=0, high=5),
    ],
)

SCHEMAS = [EMBEDDING]
