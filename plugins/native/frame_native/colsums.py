"""Column sums of ``x[N, C]``: ``reduce_to_shape_internal`` over axis 0, tiered to a compiled kernel.

A layer's bias gradient, and the weight gradient of a product with a
``[N, 1]`` operand, is ``reduce_to_shape_internal(g[N, C], shape=[C])``
(or ``[1, C]``). numpy's ``add.reduce`` over axis 0 of a C-contiguous array
adds the rows in turn, one row at a time through its inner loop: about 12 us
for a [256, 64] float32 array on one core here, where one pass of 8-lane
vector additions takes a few. The pass ``compile_column_sums`` turns such a
node on float32/float64 into ``native_column_sum_internal``, whose kernel runs
frame-ops-basic's numpy kernel at first and, once the background compiler
has built it, rows.py's ``colsum`` pass (zero the sums, then add every row in
turn: the order numpy uses, starting from its identity +0.0, so a column of
-0.0 sums to +0.0).

Same bits, checked: the compiled kernel is first run on the compiler thread
against the numpy kernel on random data of the node's shape (fewer rows when
it is large: the order does not depend on the number of rows) with a column
of -0.0, and stays on numpy (state ``failed``, one note) unless the bits agree.

Not compiled: other dtypes, other reductions (axes other than the leading
one, inputs of rank other than 2), a single column (numpy sums one column
pairwise), fewer than ``MIN_ROWS`` rows (8: not faster), and nodes whose op is not
frame-ops-basic's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import AttrSpec, Example, Graph, NodeContext, OpSchema, TensorType, registry

from .rows import PROBE_ELEMENTS, _TYPES, ColumnPlan, swap_ops
from .tiered import Tier, calls_before_compile, queue_plans

__all__ = ["COLUMN_SUM_OP", "COLUMN_SUM_SCHEMA", "compile_column_sums", "why_not"]

SOURCE_OP = "reduce_to_shape_internal"
COLUMN_SUM_OP = "native_column_sum_internal"
_PACK = "ops_basic"
#: Fewer rows stay on numpy: for x[2, 64] numpy's add.reduce takes ~1.9 us and the compiled call (its checks,
#: a fresh output) ~2.2 us; from 8 rows on the compiled sum is faster.
MIN_ROWS = 8


def why_not(types: list, shape: tuple[int, ...], pack: str | None) -> str | None:
    """Why a ``reduce_to_shape_internal`` node of input ``types`` to ``shape`` is not compiled, or None."""
    if pack != _PACK:
        return f"op from pack {pack}"
    (x,) = types
    if x.dtype.np not in _TYPES:
        return "not float32/float64"
    if x.rank != 2 or tuple(shape) not in ((x.shape[1],), (1, x.shape[1])):
        return "not a sum over the leading axis of x[N, C]"
    if x.shape[1] < 2:
        return "one column (numpy sums a single column pairwise, not in turn)"
    if x.shape[0] < MIN_ROWS:
        return f"fewer than {MIN_ROWS} rows (numpy's own call is as fast as the compiled one's)"
    return None


def _numpy_kernel(types: list, shape: tuple[int, ...]) -> Callable[..., Any]:
    schema = registry().schemas[SOURCE_OP]
    return schema.kernels["cpu"](NodeContext(schema, types, {"shape": list(shape)}, list(schema.infer(types, {
        "shape": list(shape)}))))


def _call(plan: ColumnPlan, fn: Callable[..., Any], shape: tuple[int, ...]) -> Callable[..., Any]:
    """``native(x)``: the sums in a fresh array of ``shape``; None when the compiled code refuses x."""
    dtype, descr, empty, ty, c = plan.dtype, np.dtype(plan.dtype), np.empty, np.ndarray, plan.columns

    def native(x: np.ndarray) -> np.ndarray | None:
        sums = empty(c, dtype)
        return None if fn(ty, descr, x, sums) else sums.reshape(shape)
    return native


def _probe(rows: int, columns: int, dtype: np.dtype) -> np.ndarray:
    """Random x[rows, columns] over several orders of magnitude, its last column -0.0 (which only a sum that
    starts from numpy's +0.0 gets right)."""
    rng = np.random.default_rng(rows * 7919 + columns)
    x = np.array(rng.standard_normal((rows, columns)) * 10.0 ** rng.uniform(-2, 2, (rows, columns)), dtype)
    x[:, -1] = -0.0
    return x


def _build(ctx: NodeContext) -> Callable[..., Any]:
    (x_t,) = ctx.input_types
    shape = tuple(ctx.attrs["shape"])
    numpy_kernel = _numpy_kernel(list(ctx.input_types), shape)
    rows, columns = x_t.shape
    plan = ColumnPlan("colsum", x_t.dtype.np, rows, columns)
    probe_rows = max(2, min(rows, PROBE_ELEMENTS // columns))
    check = plan if probe_rows == rows else ColumnPlan("colsum", x_t.dtype.np, probe_rows, columns)
    probe_type = x_t.with_shape((probe_rows, columns))
    tier = Tier()
    after, count = calls_before_compile(), [0]

    def promote() -> None:
        tier.slot[0] = numpy_kernel
        plans = [plan] if check is plan else [plan, check]
        queue_plans(tier, plans, lambda done: _install(tier, plans, done, shape, numpy_kernel, probe_type))

    def counting(x: np.ndarray) -> Any:
        count[0] += 1
        if count[0] >= after:
            promote()
        return numpy_kernel(x)

    tier.slot.append(counting)
    slot = tier.slot

    def tiered(x: np.ndarray) -> Any:
        return slot[0](x)
    tiered.native = tier  # type: ignore[attr-defined]
    tiered.numpy = numpy_kernel  # type: ignore[attr-defined]
    return tiered


def _install(tier: Tier, plans: list[ColumnPlan], done: dict, shape: tuple[int, ...],
             numpy_kernel: Callable[..., Any], probe_type: Any) -> None:
    """On the compiler thread: check the compiled sums against numpy's, then put them in the slot."""
    plan, check = plans[0], plans[-1]
    compiled = _call(plan, done[0][0], shape)
    checked = _call(check, done[len(plans) - 1][0], shape)
    x = _probe(check.rows, check.columns, np.dtype(check.dtype))
    reference = numpy_kernel if check is plan else _numpy_kernel([probe_type], shape)
    got, want = checked(x), reference(x)
    if got is None or np.asarray(got).tobytes() != np.asarray(want).tobytes():
        from . import jit

        jit.note(f"a compiled column sum does not give numpy's bits on this numpy {np.__version__} (its "
                 "summation order differs from adding the rows in turn)", then="those sums run on numpy")
        tier.state = "failed"
        return

    def native(x: np.ndarray) -> Any:
        result = compiled(x)
        if result is None:  # an argument the compiled code refuses (not C-contiguous, ...): numpy runs it
            tier.fallbacks += 1
            return numpy_kernel(x)
        return result
    tier.slot[0] = native
    tier.state, tier.how = "native", "compiled" if any(h == "compiled" for _, h in done.values()) else "cache"
    tier.swapped_at = time.perf_counter()


def _infer(ctx: Any) -> list[TensorType]:
    """[C] or [1, C] of x[N, C]'s dtype; on its own, so that the pack loads without frame-ops-basic (whose
    reduce_to_shape_internal the pass replaces)."""
    (x,) = ctx.input_types
    shape = tuple(ctx.attrs["shape"])
    if x.rank != 2 or shape not in ((x.shape[1],), (1, x.shape[1])):
        raise ctx.error(f"sums the columns of x[N, C] into [C] or [1, C], got x {x} and shape {list(shape)}")
    return [TensorType(x.dtype, shape)]


COLUMN_SUM_SCHEMA = OpSchema(
    COLUMN_SUM_OP,
    inputs=("x",),
    attrs={"shape": AttrSpec("shape", doc="[C] or [1, C]: the sums of x[N, C]'s columns")},
    shape_infer=_infer,
    kernels={"cpu": _build},
    not_differentiable="a compile-pipeline product made after differentiation; differentiate the graph before "
                       "compiling it",
    doc="frame-ops-basic's reduce_to_shape_internal of x[N, C] over its rows, run by the numpy kernel at first "
        "and by a compiled column sum once the background compiler has built it; both give the same bits. "
        "Produced by the compile_column_sums pass.",
    examples=[Example(["f32[6, 3]"], {"shape": [3]}), Example(["f64[5, 9]"], {"shape": [1, 9]})],
)


def compile_column_sums(graph: Graph, ctx: Any) -> Graph:
    """``reduce_to_shape_internal`` of x[N, C] to [C] or [1, C] on float32/float64 becomes
    ``native_column_sum_internal`` (the same input, attribute and output)."""
    if ctx.backend != "cpu" or SOURCE_OP not in ctx.ops(graph):
        return graph
    from .passes import enabled

    off = enabled()
    if off is not None:
        ctx.note("compile_column_sums", f"off: {off}")
        return graph
    pack = ctx.registry.schemas[SOURCE_OP].pack
    chosen = {n for n in graph.nodes if n.op == SOURCE_OP
              and why_not([v.type for v in n.inputs], tuple(n.attrs["shape"]), pack) is None}
    if not chosen:
        return graph
    return swap_ops(graph, ctx, list(chosen), lambda node: COLUMN_SUM_OP, "compile_column_sums",
                    f"{len(chosen)} column sum{'s' if len(chosen) > 1 else ''} tier up to compiled kernels")
