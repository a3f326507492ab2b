"""matmul (vectors, matrices and batches) and its gradient ops.

``matmul(a, b)`` follows numpy: ``a[..., m, k] @ b[..., k, n] -> [..., m, n]``
with broadcasting over the batch axes; a 1-D ``a`` is a row ``[1, k]`` and a
1-D ``b`` a column ``[k, 1]``, and the axis each adds is dropped from the
result (vector @ vector is a scalar).

``matmul_grad_lhs_internal(gy, b; shape) = gy @ b^T`` and
``matmul_grad_rhs_internal(a, gy; shape) = a^T @ gy``, summed over batch
axes that broadcasting added to the operand, down to ``shape`` (the
operand's shape); 1-D operands are promoted as in the forward product.
Transposes are strided views handed to BLAS, never copies. Products and batch
sums run in ``accumulation_dtype`` (float32 for half-precision operands),
rounded once to the operand dtype.

Products with a contraction length of 1 (outer products, common in
higher-order graphs: ``[n, 1] @ [1, h]``) run as a broadcast multiply plus
``+0.0``: numpy's matmul sums the single product into a zero, which turns a
``-0.0`` product into ``+0.0`` and changes nothing else, so the result is
bitwise numpy's, at a third of the cost.

A stack of matrices times one matrix (``a[..., m, k] @ b[k, n]``, and ``b[k]``)
runs as one 2-D product ``a.reshape(-1, k) @ b`` (a view of a C-contiguous
``a``; a strided ``a`` is copied first, so the result never depends on its
layout). So do its gradients: ``gy[..., m, n] @ b^T`` as one product, and
``a^T @ gy`` summed over the batch (same batch shapes, a 2-D ``b``) as the
single product ``a.reshape(-1, k)^T @ gy.reshape(-1, n)``. numpy's stacked
matmul calls BLAS once per matrix, which here runs up to 10x slower for the
forward product and 100x for the summed gradient (``[4096, 1, 64]``
operands), and OpenBLAS blocks one large product differently from many small
ones: results are not bitwise numpy's stacked ones but differ by float
rounding only, within the usual product bound ``|err| <= k eps (|a| @ |b|)``
(``plugins/ops_basic/tests/test_matmul_flat.py`` checks the bound and that the result is bitwise
the 2-D product). Integer operands keep numpy's stacked product (exact either
way).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import accumulation_dtype, broadcast_axes, broadcast_shapes, sum_into, unbroadcast


def _as_row(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A left operand's shape as matmul sees it: a vector [k] is the row [1, k]."""
    return (1,) + shape if len(shape) == 1 else shape


def _as_column(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A right operand's shape as matmul sees it: a vector [k] is the column [k, 1]."""
    return shape + (1,) if len(shape) == 1 else shape


def _product_axes(y_shape: tuple[int, ...], a_vector: bool, b_vector: bool) -> tuple[int, ...]:
    """The product's shape with the axes a vector operand dropped put back (size 1)."""
    s = tuple(y_shape)
    if b_vector:
        s = s + (1,)
    if a_vector:
        s = s[:-1] + (1,) + s[-1:]
    return s


def _check_operands(ctx: NodeContext, a: TensorType, b: TensorType, what: str,
                    given: tuple[TensorType, TensorType] | None = None) -> tuple[int, ...]:
    """Checks promoted operands (rank >= 2); returns the broadcast batch shape. Messages show ``given``, the
    operands as the caller wrote them (a vector, not the row or column it is promoted to), when given."""
    shown_a, shown_b = given or (a, b)
    if a.dtype is not b.dtype:
        raise ctx.error(f"operands must share a dtype, got {shown_a} and {shown_b}")
    if not (a.dtype.is_float or a.dtype.is_int):
        raise ctx.error(f"needs numeric operands, got {shown_a}")
    if a.rank < 2 or b.rank < 2:
        raise ctx.error(f"operands need rank >= 1, got {shown_a} and {shown_b}; use mul for a product with a scalar")
    if a.shape[-1] != b.shape[-2]:
        raise ctx.error(f"{what}: inner dimensions differ: {shown_a} @ {shown_b} ({a.shape[-1]} vs {b.shape[-2]})")
    return broadcast_shapes(ctx, [a.shape[:-2], b.shape[:-2]])


def _matmul_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    if a.rank == 0 or b.rank == 0:
        raise ctx.error(f"operands need rank >= 1, got {a} and {b}; use mul for a product with a scalar")
    a2, b2 = a.with_shape(_as_row(a.shape)), b.with_shape(_as_column(b.shape))
    batch = _check_operands(ctx, a2, b2, "a @ b", (a, b))
    return [TensorType(a.dtype, batch + a.shape[-2:-1] * (a.rank > 1) + b.shape[-1:] * (b.rank > 1))]


def _outer_product(a_view: Callable, b_view: Callable, out_view: Callable, shape: tuple[int, ...],
                   dtype: np.dtype) -> Callable:
    """``a @ b`` for a contraction length of 1: ``a * b + 0.0`` (bitwise numpy's matmul, see the module doc)."""
    zero = np.zeros((), dtype)
    multiply, add, empty = np.multiply, np.add, np.empty

    def kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = empty(shape, dtype)
        o = out_view(out)
        multiply(a_view(a), b_view(b), o)
        add(o, zero, o)
        return out
    return kernel


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _row(x: np.ndarray) -> np.ndarray:
    return x[None, :]


def _column(x: np.ndarray) -> np.ndarray:
    return x[:, None]


def _matmul_kernel(ctx: NodeContext) -> Callable:
    a_t, b_t = ctx.input_types
    (y_t,) = ctx.output_types if ctx.output_types else _matmul_shape(ctx)
    dtype, acc = a_t.dtype.np, accumulation_dtype(a_t)
    if acc == dtype and a_t.shape[-1] == 1 and a_t.dtype.is_float:
        a_view = _row if a_t.rank == 1 else _same
        b_view = _column if b_t.rank == 1 else _same
        full = _product_axes(y_t.shape, a_t.rank == 1, b_t.rank == 1)
        return _outer_product(a_view, b_view, _viewer(full), y_t.shape, dtype)
    if acc == dtype and a_t.dtype.is_float and a_t.rank >= 3 and b_t.rank <= 2:
        return _stack_as_matrix(a_t.shape, y_t.shape, dtype)
    if acc == dtype:
        if y_t.rank:
            return np.matmul  # accepts a trailing out
        empty = np.empty

        def scalar(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            return np.matmul(a, b, out if out is not None else empty((), dtype))  # an array, not a numpy scalar
        return scalar

    def widened(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        result = np.matmul(a.astype(acc), b.astype(acc))
        if out is None:
            return np.asarray(result).astype(dtype)
        out[...] = result  # rounded once
        return out
    return widened


def _stack_as_matrix(a_shape: tuple[int, ...], y_shape: tuple[int, ...], dtype: np.dtype) -> Callable:
    """``a[..., m, k] @ b`` (``b`` a matrix or a vector) as the one 2-D product ``a.reshape(-1, k) @ b`` (see the
    module doc: one GEMM instead of numpy's one per matrix)."""
    k = a_shape[-1]
    rows = int(np.prod(a_shape[:-1], dtype=np.int64))
    flat_y = (rows, *y_shape[len(a_shape) - 1:])  # [rows, n], or [rows] for a vector b
    matmul, contiguous = np.matmul, np.ascontiguousarray

    def kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if not a.flags.c_contiguous:
            a = contiguous(a)  # a strided view would reshape to strided rows, which BLAS does not take
        if out is None or not out.flags.c_contiguous:
            y = matmul(a.reshape(rows, k), b).reshape(y_shape)
            if out is None:
                return y
            out[...] = y
            return out
        matmul(a.reshape(rows, k), b, out.reshape(flat_y))  # a view of out: written in place
        return out
    return kernel


def _viewer(full: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """``x`` with the size-1 axes of ``full`` that it lacks: a reshape that only inserts unit axes is always a
    view (also of a strided array), so writing into it writes into ``x``."""
    def view(x: np.ndarray) -> np.ndarray:
        return x if x.shape == full else x.reshape(full)
    return view


def _swap(t: TensorType) -> TensorType:
    return t.with_shape(t.shape[:-2] + (t.shape[-1], t.shape[-2]))


def _matmul_gradient(ctx: NodeContext):
    # ga = gy @ b^T, gb = a^T @ gy (each summed over its broadcast batch axes, to the operand's shape at run time)
    return ctx.grad_graph(lambda a, b, y, gy: [ops.matmul_grad_lhs_like_internal(gy, b, a),
                                              ops.matmul_grad_rhs_like_internal(a, gy, b)])


MATMUL = OpSchema(
    "matmul",
    inputs=("a", "b"),
    shape_infer=_matmul_shape,
    kernels={"cpu": _matmul_kernel},
    gradient=_matmul_gradient,
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: ops.matmul(da, b) + ops.matmul(a, db)),  # da b + a db
    traits=("accepts_out", "any_shape_gradient"),
    doc="Matrix product a @ b as numpy defines it: leading (batch) axes broadcast; a 1-D a is a row, a 1-D b a "
        "column, and the axis each adds is dropped from the result.",
    examples=[
        Example(["f32[3, 4]", "f32[4, 5]"]),
        Example(["f32[2, 3, 4]", "f32[2, 4, 5]"], note="batched"),
        Example(["f32[2, 3, 4]", "f32[4, 5]"], note="batch broadcast on the right operand"),
        Example(["f64[1, 3, 4]", "f64[2, 4, 2]"], note="batch broadcast on the left operand"),
        Example(["f32[4]", "f32[4, 5]"], note="vector @ matrix"),
        Example(["f64[2, 3, 4]", "f64[4]"], note="batch of matrices @ vector"),
        Example(["f32[4]", "f32[4]"], note="vector @ vector: a scalar"),
        Example(["f32[3, 1]", "f32[1, 5]"], note="contraction length 1: an outer product"),
    ],
)


def _operands(ctx: NodeContext, transpose_first: bool) -> tuple[tuple[int, ...], tuple[int, ...], bool, bool]:
    """The promoted (rank >= 2) shapes of the gradient op's two inputs, and which forward operands are vectors.

    lhs (``transpose_first`` false): inputs (gy, b), the forward's left operand has ``shape``;
    rhs: inputs (a, gy), the forward's right operand has ``shape``.
    """
    x, y = ctx.input_types
    shape = tuple(ctx.attrs["shape"])
    if transpose_first:  # a^T @ gy
        a_vector, b_vector = x.rank == 1, len(shape) == 1
        return _as_row(x.shape), _product_axes(y.shape, a_vector, b_vector), a_vector, b_vector
    a_vector, b_vector = len(shape) == 1, y.rank == 1
    return _product_axes(x.shape, a_vector, b_vector), _as_column(y.shape), a_vector, b_vector
def _grad_kernel(ctx: NodeContext, transpose_first: bool) -> Callable:
    x_t = ctx.input_types[0]
    xs, ys, a_vector, b_vector = _operands(ctx, transpose_first)
    shape = tuple(ctx.attrs["shape"])
    target = (_as_column(shape) if b_vector else shape) if transpose_first else (_as_row(shape) if a_vector else shape)
    product = _product_shape(xs, ys, transpose_first)
    axes = broadcast_axes(product, target)  # batch axes broadcasting added to (or stretched in) the operand
    dtype, acc = x_t.dtype.np, accumulation_dtype(x_t)
    view_x, view_y, view_out = _viewer(xs), _viewer(ys), _viewer(target)
    contraction = xs[-2] if transpose_first else xs[-1]
    y_t = ctx.input_types[1]
    if acc == dtype and x_t.dtype.is_float and xs == x_t.shape and ys == y_t.shape and target == shape:
        if transpose_first and len(xs) >= 3 and xs[:-2] == ys[:-2] and len(shape) == 2:
            return _flat_grad_rhs(xs, ys, shape)  # also for one row per matrix: one GEMM, not outer products summed
        if not transpose_first and not axes and len(xs) >= 3 and len(ys) == 2 and contraction != 1:
            return _flat_grad_lhs(xs, ys[0], shape)
    if contraction == 1 and acc == dtype and x_t.dtype.is_float:
        # an outer product: x^T is x's own row/column seen the other way, a reshape
        xt_shape = xs[:-2] + (xs[-1], xs[-2]) if transpose_first else xs
        yt_shape = ys if transpose_first else ys[:-2] + (ys[-1], ys[-2])
        outer = _outer_product(_viewer(xt_shape), _viewer(yt_shape), _same, product, dtype)

        def outer_kernel(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            if out is None:
                out = np.empty(shape, dtype)
            if axes:
                sum_into(outer(x, y), axes, view_out(out), acc)
            else:
                outer(x, y, view_out(out))
            return out
        return outer_kernel

    if not axes and acc == dtype and xs == x_t.shape and ys == y_t.shape and target == shape:
        matmul = np.matmul  # the common case (matrices, nothing to sum): transposed views straight to BLAS

        if transpose_first:
            def plain(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
                return matmul(x.swapaxes(-1, -2), y, out if out is not None else np.empty(shape, dtype))
        else:
            def plain(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
                return matmul(x, y.swapaxes(-1, -2), out if out is not None else np.empty(shape, dtype))
        return plain

    def kernel(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if acc != dtype:
            x, y = x.astype(acc), y.astype(acc)
        x, y = view_x(x), view_y(y)
        xt = x.swapaxes(-1, -2) if transpose_first else x
        yt = y if transpose_first else y.swapaxes(-1, -2)
        if out is None:
            out = np.empty(shape, dtype)
        o = view_out(out)
        if not axes and acc == dtype:
            np.matmul(xt, yt, o)
        else:
            sum_into(np.matmul(xt, yt), axes, o, acc)
        return out
    return kernel


def _flat_grad_lhs(gy_shape: tuple[int, ...], k: int, shape: tuple[int, ...]) -> Callable:
    """``gy[..., m, n] @ b[k, n]^T`` as one 2-D product (see the module doc)."""
    n = gy_shape[-1]
    rows = int(np.prod(gy_shape[:-1], dtype=np.int64))
    matmul, contiguous = np.matmul, np.ascontiguousarray

    def kernel(gy: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if not gy.flags.c_contiguous:
            gy = contiguous(gy)
        product = matmul(gy.reshape(rows, n), b.T, None if out is None or not out.flags.c_contiguous
                         else out.reshape(rows, k))
        if out is None:
            return product.reshape(shape)
        if not out.flags.c_contiguous:
            out[...] = product.reshape(shape)
        return out
    return kernel


def _flat_grad_rhs(a_shape: tuple[int, ...], gy_shape: tuple[int, ...], shape: tuple[int, ...]) -> Callable:
    """``sum over the batch of a[..., m, k]^T @ gy[..., m, n]`` as the one 2-D product of the stacked rows (see
    the module doc)."""
    k, n = a_shape[-1], gy_shape[-1]
    rows = int(np.prod(a_shape[:-1], dtype=np.int64))
    matmul, contiguous = np.matmul, np.ascontiguousarray

    def kernel(a: np.ndarray, gy: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if not a.flags.c_contiguous:
            a = contiguous(a)
        if not gy.flags.c_contiguous:
            gy = contiguous(gy)
        if out is None:
            return matmul(a.reshape(rows, k).T, gy.reshape(rows, n))
        return matmul(a.reshape(rows, k).T, gy.reshape(rows, n), out)  # out is [k, n]
    return kernel


def _product_shape(xs: tuple[int, ...], ys: tuple[int, ...], transpose_first: bool) -> tuple[int, ...]:
    """Shape of x^T @ y (transpose_first) or x @ y^T for promoted shapes."""
    if transpose_first:
        xs = xs[:-2] + (xs[-1], xs[-2])
    else:
        ys = ys[:-2] + (ys[-1], ys[-2])
    batch = np.broadcast_shapes(xs[:-2], ys[:-2])
    return tuple(batch) + (xs[-2], ys[-1])


def _grad_shape(transpose_first: bool) -> Callable[[NodeContext], list[TensorType]]:
    def infer(ctx: NodeContext) -> list[TensorType]:
        x, y = ctx.input_types
        shape = tuple(ctx.attrs["shape"])
        operand = x if transpose_first else y  # the forward's other operand (gy is a scalar for vector @ vector)
        if operand.rank == 0 or not shape:
            raise ctx.error(f"matmul operands need rank >= 1, got {operand} and shape {list(shape)}")
        xs, ys, a_vector, b_vector = _operands(ctx, transpose_first)
        lhs = x.with_shape(xs[:-2] + (xs[-1], xs[-2])) if transpose_first else x.with_shape(xs)
        rhs = y.with_shape(ys) if transpose_first else y.with_shape(ys[:-2] + (ys[-1], ys[-2]))
        _check_operands(ctx, lhs, rhs, "gy @ b^T" if not transpose_first else "a^T @ gy")
        product = _product_shape(xs, ys, transpose_first)
        target = (_as_column(shape) if b_vector else shape) if transpose_first else (_as_row(shape) if a_vector else shape)
        if len(target) < 2 or target[-2:] != product[-2:] or broadcast_shapes(ctx, [target, product]) != product:
            raise ctx.error(f"shape {list(shape)} is not the product {list(product)} reduced over broadcast batch axes")
        return [TensorType(x.dtype, shape)]
    return infer


_SHAPE_ATTR = {"shape": AttrSpec("shape", doc="shape of the operand this gradient belongs to")}

# matmul_grad_lhs_internal(gy, b) = gy @ b^T
#   second order (seed 000 §5): g_gy = matmul(gga, b), g_b = matmul_grad_rhs_internal(gga, gy)
MATMUL_GRAD_LHS = OpSchema(
    "matmul_grad_lhs_internal",
    inputs=("gy", "b"),
    attrs=_SHAPE_ATTR,
    shape_infer=_grad_shape(False),
    kernels={"cpu": lambda ctx: _grad_kernel(ctx, False)},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, b, ga, gga: [
        unbroadcast(ops.matmul(gga, b), gy),
        ops.matmul_grad_rhs_internal(gga, gy, shape=b.shape)]),
    traits=("accepts_out",),
    doc="gy @ b^T reduced to `shape`: the gradient of matmul for its left operand.",
    examples=[Example(["f32[3, 5]", "f32[4, 5]"], {"shape": [3, 4]}),
              Example(["f32[2, 3, 5]", "f32[4, 5]"], {"shape": [2, 3, 4]}),
              Example(["f64[2, 3, 2]", "f64[2, 4, 2]"], {"shape": [1, 3, 4]})],
)

# matmul_grad_rhs_internal(a, gy) = a^T @ gy
#   second order (seed 000 §5): g_a = matmul_grad_lhs_internal(gy, ggb), g_gy = matmul(a, ggb)
MATMUL_GRAD_RHS = OpSchema(
    "matmul_grad_rhs_internal",
    inputs=("a", "gy"),
    attrs=_SHAPE_ATTR,
    shape_infer=_grad_shape(True),
    kernels={"cpu": lambda ctx: _grad_kernel(ctx, True)},
    gradient=lambda ctx: ctx.grad_graph(lambda a, gy, gb, ggb: [
        ops.matmul_grad_lhs_internal(gy, ggb, shape=a.shape),
        unbroadcast(ops.matmul(a, ggb), gy)]),
    traits=("accepts_out",),
    doc="a^T @ gy reduced to `shape`: the gradient of matmul for its right operand.",
    examples=[Example(["f32[3, 4]", "f32[3, 5]"], {"shape": [4, 5]}),
              Example(["f32[2, 3, 4]", "f32[2, 3, 5]"], {"shape": [4, 5]}, note="summed over the batch"),
              Example(["f64[2, 3, 4]", "f64[2, 3, 5]"], {"shape": [2, 4, 5]})],
)


SCHEMAS = [MATMUL, MATMUL_GRAD_LHS, MATMUL_GRAD_RHS]
