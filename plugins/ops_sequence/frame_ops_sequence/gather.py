"""Gather(table, indices) and the scatter-add that is its gradient.

``gather(table, indices; axis=0)`` picks entries of ``table`` along ``axis``
(``np.take`` semantics): the output's shape is ``table.shape[:axis] +
indices.shape + table.shape[axis+1:]``, so an embedding lookup is
``gather(E[V, d], tokens[B, L]) -> [B, L, d]``.

``scatter_add(updates, indices; axis=0, size)`` is its adjoint: a zero tensor
with ``size`` entries along ``axis``, into which every slice of ``updates`` is
added at its index. Duplicate indices accumulate (seed 003: "several
consumers sum"), never overwrite.

Indices are integer tensors (i32 or i64) of any shape, non-differentiable;
a float or bool indices tensor is refused at build time (``ShapeError``). At
run time every index must lie in ``0 <= i < n`` (``n`` the table's size along
``axis``, or ``size``); negative indices are refused too, since a silent
wrap-around hides off-by-one bugs. The kernel raises ``frame_core.DataError``
naming the first offending index, its position and the valid range.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, DataError, Example, NodeContext, OpSchema, TensorType, ops

from ._common import as_out, compute_dtype, normalize_axis, require_indices, require_numeric


def check_indices(op: str, indices: np.ndarray, n: int, what: str, grow: str) -> None:
    """``DataError`` naming the first index outside ``0..n-1`` (``what`` says what the indices address, ``grow``
    how to make room)."""
    if indices.size == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    if low >= 0 and high < n:
        return
    bad = np.flatnonzero((indices < 0) | (indices >= n))
    first = np.unravel_index(int(bad[0]), indices.shape)
    value = int(indices[first])
    valid = f"0..{n - 1}" if n else "none: it is empty"
    raise DataError(
        f"{op}: index {value} at position {list(map(int, first))} of the indices is out of range for {what} of "
        f"size {n} (valid indices: {valid}; {bad.size} of {indices.size} indices are outside it); remap or clip "
        f"the indices, or {grow}"
    )


# -- gather ---------------------------------------------------------------------------------------
def _gather_shape(ctx: NodeContext) -> list[TensorType]:
    table = require_numeric(ctx, 0)
    indices = require_indices(ctx, 1)
    if table.rank == 0:
        raise ctx.error(f"the table must have rank >= 1 to index into, got {table}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], table.rank)
    return [table.with_shape(table.shape[:axis] + indices.shape + table.shape[axis + 1:])]


def _gather_kernel(ctx: NodeContext) -> Callable:
    table_t, indices_t = ctx.input_types
    axis = normalize_axis(ctx, ctx.attrs["axis"], table_t.rank)
    n = table_t.shape[axis]
    (y,) = ctx.output_types

    def kernel(table: np.ndarray, indices: np.ndarray) -> np.ndarray:
        check_indices("gather", indices, n, f"axis {axis} of the table {table_t}", "enlarge the table")
        out = np.empty(y.shape, y.dtype.np)
        return np.take(table, indices, axis=axis, out=out, mode="clip")  # in range: checked above
    return kernel


def _gather_gradient(ctx: NodeContext):
    axis = normalize_axis(ctx, ctx.attrs["axis"], ctx.input_types[0].rank)
    # g_table = scatter_add(gy, indices): each looked-up row receives the sum of its cotangents; the table's size
    # read from the table (scatter_add_like_internal), so a gather over a batch stays right at other batch sizes
    return ctx.grad_graph(lambda table, indices, y, gy: [ops.scatter_add_like_internal(gy, indices, table, axis=axis),
                                                         None])


_AXIS = AttrSpec("int", 0, "the axis of the table (of the output, for scatter_add) that the indices address",
                 none_refused="numpy's np.take(axis=None) reads the table flattened; give an axis, or reshape the "
                 "table to one axis first (ops.reshape(x, shape=[-1]))")

GATHER = OpSchema(
    "gather",
    inputs=("table", "indices"),
    attrs={"axis": _AXIS},
    shape_infer=_gather_shape,
    kernels={"cpu": _gather_kernel},
    gradient=_gather_gradient,
    nondiff_inputs=(1,),
    traits=("any_shape_gradient",),
    doc="Entries of `table` at integer `indices` along `axis` (np.take): an embedding lookup. Output shape "
        "table.shape[:axis] + indices.shape + table.shape[axis+1:]. Indices must lie in 0..n-1 (DataError otherwise).",
    examples=[
        Example(["f32[5, 3]", "i64[4]"], low=0, high=4, note="embedding rows; duplicates likely"),
        Example(["f32[2, 4, 3]", "i32[2, 3]"], {"axis": 1}, low=0, high=3, note="middle axis, 2-D indices"),
        Example(["f64[6]", "i64[]"], low=0, high=5, note="a scalar index"),
        Example(["f64[3, 4]", "i64[2, 2]"], {"axis": -1}, low=0, high=3),
    ],
)


# -- scatter_add ----------------------------------------------------------------------------------
def _scatter_layout(ctx: NodeContext) -> tuple[int, int, tuple[int, ...]]:
    """(axis, size, output shape) of scatter_add, or a ``ShapeError`` saying how updates and indices differ."""
    updates = require_numeric(ctx, 0)
    indices = require_indices(ctx, 1)
    size = ctx.attrs["size"]
    if size < 0:
        raise ctx.error(f"size must be >= 0, got {size}")
    k = indices.rank
    if updates.rank < k:
        raise ctx.error(f"updates {updates} has rank {updates.rank}, below the rank {k} of indices {indices}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], updates.rank - k + 1)
    if updates.shape[axis:axis + k] != indices.shape:
        raise ctx.error(
            f"updates {updates} must hold the indices' shape {list(indices.shape)} at axes {axis}..{axis + k - 1} "
            f"(the shape gather(table, indices, axis={axis}) produces), got {list(updates.shape[axis:axis + k])}"
        )
    return axis, size, updates.shape[:axis] + (size,) + updates.shape[axis + k:]


def _scatter_shape(ctx: NodeContext) -> list[TensorType]:
    return [ctx.input_types[0].with_shape(_scatter_layout(ctx)[2])]


#: Below this many rows np.add.at is as fast as anything (sorting costs more than it saves).
SMALL_SCATTER = 4096
#: A rank level (one vectorised add) is worth its call only with at least this many rows.
LEVEL_ROWS = 1024


def scatter_add_rows(indices: np.ndarray, rows: np.ndarray, size: int) -> np.ndarray:
    """``out[i] = sum of rows[j] with indices[j] == i`` for ``out`` of ``size`` rows (``rows`` is 2-D).

    np.add.at pays about a microsecond per row (one inner-loop call each). Above
    ``SMALL_SCATTER`` rows this sorts the indices instead and adds in *rank
    levels*: level r adds, in one fancy-indexed ``out[ids] += rows[...]``, the
    r-th occurrence of every index that occurs more than r times (no index twice
    in one level, so no write is lost). Levels run while at least ``LEVEL_ROWS``
    indices are that frequent; the rest of those few heavy indices' rows (long
    runs in sorted order) are summed with one ``sum(axis=0)`` per index. Cost:
    one sort and about two passes over the rows, with Python and ufunc calls per
    level and per heavy index, never per row, whatever the index distribution
    (uniform or Zipf). Sums run in the rows' dtype, one row after another in index order: the result is
    bit for bit np.add.at's.
    See benchmarks/sequence_ops.py for the measurements against np.add.at,
    bincount per column and sort + reduceat.
    """
    out = np.zeros((size, rows.shape[1]), rows.dtype)
    n = indices.shape[0]
    if n < SMALL_SCATTER:
        np.add.at(out, indices, rows)
        return out
    order = np.argsort(indices, kind="stable")  # stable: a fixed summation order for every run
    ordered = indices[order]
    starts = np.concatenate(([0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1))
    counts = np.diff(np.append(starts, n))
    ids = ordered[starts]
    level = 0
    frequent = counts > 0
    while True:
        frequent = counts > level if level else frequent
        taken = np.count_nonzero(frequent)
        if taken == 0:
            return out
        if taken < LEVEL_ROWS and level > 0:
            break
        out[ids[frequent]] += rows[order[starts[frequent] + level]]
        level += 1
    # the few indices still going: the rest of each one's rows is one contiguous run of `order`, added one row
    # after another onto what the levels summed (accumulate is sequential; sum(axis=0) may add pairwise, and
    # adding a partial sum rounds differently from np.add.at)
    for i, start, count in zip(ids[frequent], starts[frequent] + level, counts[frequent] - level):
        run = rows[order[start:start + count]]  # a copy: free to change
        run[0] += out[i]
        out[i] = np.add.accumulate(run, axis=0)[-1]
    return out


def _scatter_kernel(ctx: NodeContext) -> Callable:
    updates_t, indices_t = ctx.input_types
    axis, size, shape = _scatter_layout(ctx)
    (y,) = ctx.output_types
    lead = int(np.prod(updates_t.shape[:axis], dtype=np.int64))
    count = indices_t.size
    trail = int(np.prod(updates_t.shape[axis + indices_t.rank:], dtype=np.int64))
    acc = compute_dtype(updates_t)

    def kernel(updates: np.ndarray, indices: np.ndarray) -> np.ndarray:
        check_indices("scatter_add", indices, size, f"axis {axis} of the output", "raise the size attribute")
        # rows[j] holds every update that goes to indices.flat[j]: the lead axes move behind the indexed ones
        moved = np.moveaxis(updates.reshape(lead, count, trail), 1, 0).reshape(count, lead * trail)
        summed = scatter_add_rows(indices.reshape(-1), moved.astype(acc, copy=False), size)
        out = np.moveaxis(summed.reshape(size, lead, trail), 0, 1).reshape(shape)
        return as_out(np.ascontiguousarray(out) if out.dtype == y.dtype.np else out, y)
    return kernel


def _scatter_gradient(ctx: NodeContext):
    axis = _scatter_layout(ctx)[0]
    # g_updates = gather(gy, indices): each update's cotangent is the cotangent of the row it went to
    return ctx.grad_graph(lambda updates, indices, y, gy: [ops.gather(gy, indices, axis=axis), None])


SCATTER_ADD = OpSchema(
    "scatter_add",
    inputs=("updates", "indices"),
    attrs={"axis": _AXIS, "size": AttrSpec("int", doc="the output's size along axis (the gathered table's size)")},
    shape_infer=_scatter_shape,
    kernels={"cpu": _scatter_kernel},
    gradient=_scatter_gradient,
    nondiff_inputs=(1,),
    traits=("any_shape_gradient",),
    doc="Zeros with `size` entries along `axis`, plus each slice of `updates` added at its index; duplicate indices "
        "accumulate. The adjoint of gather (its gradient for the table). Indices must lie in 0..size-1.",
    examples=[
        Example(["f32[6, 3]", "i64[6]"], {"size": 4}, low=0, high=3, note="duplicates accumulate"),
        Example(["f32[2, 2, 3, 4]", "i32[2, 3]"], {"axis": 1, "size": 3}, low=0, high=2),
        Example(["f64[5]", "i64[5]"], {"size": 2}, low=0, high=1),
    ],
)



# scatter_add_like_internal(updates, indices, like; axis) = scatter_add(updates, indices; axis,
#   size=like.shape[axis]), like (the gathered table) read for its shape only: gather's and embedding's gradient
def _scatter_like_size(ctx: NodeContext) -> tuple[int, int]:
    updates, indices, like = ctx.input_types
    axis = normalize_axis(ctx, ctx.attrs["axis"], like.rank)
    size = like.shape[axis]
    inner = NodeContext(SCATTER_ADD, (updates, indices), {"axis": ctx.attrs["axis"], "size": size})
    if _scatter_shape(inner)[0] != like:
        raise ctx.error(f"scattering {updates} at {indices} along axis {axis} does not give like's type {like}")
    return axis, size


def _scatter_like_decomposition(ctx: NodeContext):
    axis, size = _scatter_like_size(ctx)
    return ctx.decomposition_graph(lambda updates, indices, like: ops.scatter_add(updates, indices, axis=axis,
                                                                                 size=size))


def _scatter_like_kernel(ctx: NodeContext) -> Callable:
    axis, size = _scatter_like_size(ctx)
    inner = _scatter_kernel(NodeContext(SCATTER_ADD, ctx.input_types[:2], {"axis": axis, "size": size},
                                        ctx.output_types))
    return lambda updates, indices, like: inner(updates, indices)


SCATTER_ADD_LIKE = OpSchema(
    "scatter_add_like_internal",
    inputs=("updates", "indices", "like"),
    attrs={"axis": _AXIS},
    shape_infer=lambda ctx: [_scatter_like_size(ctx) and ctx.input_types[2]],
    kernels={"cpu": _scatter_like_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda updates, indices, like, y, gy: [
        ops.gather(gy, indices, axis=_scatter_like_size(ctx)[0]), None, None]),
    decomposition=_scatter_like_decomposition,
    nondiff_inputs=(1, 2),
    traits=("any_shape_gradient", "shape_operand"),
    doc="scatter_add with the output's size along axis read from like (the gathered table, read for its shape "
        "only): gather's gradient at any table or batch size.",
    examples=[
        Example(["f32[6, 3]", "i64[6]", "f32[4, 3]"], low=0, high=3, note="duplicates accumulate"),
        Example(["f32[2, 2, 3, 4]", "i32[2, 3]", "f32[2, 3, 4]"], {"axis": 1}, low=0, high=2),
        Example(["f64[5]", "i64[5]", "f64[2]"], low=0, high=1),
    ],
)

SCHEMAS = [GATHER, SCATTER_ADD, SCATTER_ADD_LIKE]
