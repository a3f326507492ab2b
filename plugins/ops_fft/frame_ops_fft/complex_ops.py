"""Complex arithmetic on packed tensors: complex_mul, conj, complex_matmul.

Gradients (packed gradients are (dL/dRe, dL/dIm), torch's ``view_as_real``):
for z = a b, dL/da = G conj(b) and dL/db = G conj(a) (each summed over its
broadcast axes); conj is its own adjoint; for Z = A @ B (per batch),
dL/dA = G @ B^H and dL/dB = A^H @ G. All are built from these three ops,
``transpose`` and ``reduce_to_shape_internal``, so each is closed (ARCH-068).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import Example, NodeContext, OpSchema, TensorType, ops

from ._packed import as_complex, as_packed, compute_dtype, require_packed, unbroadcast


def _broadcast(ctx: NodeContext, shapes: list[tuple[int, ...]], what: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(list(s)) for s in shapes)
        raise ctx.error(f"got {what} {listed}, which do not broadcast; expected equal sizes or 1 on each axis, "
                        "aligned from the end (numpy rules)") from None


def _same_dtype(ctx: NodeContext) -> None:
    a, b = ctx.input_types
    if a.dtype is not b.dtype:
        raise ctx.error(f"operands must share a dtype, got {a} and {b}; cast one of them first")


def _complex_result(ctx: NodeContext, fn: Callable[..., np.ndarray]) -> Callable:
    """A kernel applying ``fn`` to the complex views of its packed inputs, writing into ``out`` when given."""
    (y_t,) = ctx.output_types
    real, dtype = compute_dtype(y_t), y_t.dtype.np

    def kernel(*arrays: np.ndarray) -> np.ndarray:
        out = arrays[len(ctx.input_types)] if len(arrays) > len(ctx.input_types) else None
        args = [as_complex(a, real) for a in arrays[:len(ctx.input_types)]]
        if out is not None and out.dtype == real and out.flags.c_contiguous:
            fn(*args, out=as_complex(out, real))  # out is a planned buffer: contiguous, so this is a view
            return out
        result = as_packed(fn(*args), dtype)
        if out is None:
            return result
        out[...] = result
        return out
    return kernel


# complex_mul(a, b) -> a b, broadcasting              ga = G conj(b), gb = G conj(a) (summed to each shape)
def _complex_mul_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    require_packed(ctx, a, 0)
    require_packed(ctx, b, 1)
    _same_dtype(ctx)
    return [a.with_shape(_broadcast(ctx, [a.shape[:-1], b.shape[:-1]], "the complex shapes") + (2,))]


def _complex_mul_gradient(ctx: NodeContext):
    a, b = ctx.input_types
    return ctx.grad_graph(lambda a_, b_, y, gy: [unbroadcast(ops.complex_mul(gy, ops.conj(b_)), a),
                                                 unbroadcast(ops.complex_mul(gy, ops.conj(a_)), b)])


COMPLEX_MUL = OpSchema(
    "complex_mul",
    inputs=("a", "b"),
    shape_infer=_complex_mul_shape,
    kernels={"cpu": lambda ctx: _complex_result(ctx, np.multiply)},
    gradient=_complex_mul_gradient,
    traits=("accepts_out", "commutative"),
    doc="The complex product of packed a and b: (a_re b_re - a_im b_im, a_re b_im + a_im b_re); the complex "
        "axes broadcast as in numpy.",
    examples=[Example(["f32[3, 4, 2]", "f32[3, 4, 2]"]), Example(["f32[2, 5, 2]", "f32[5, 2]"], note="broadcast"),
              Example(["f64[3, 1, 2]", "f64[1, 4, 2]"], note="broadcast both ways")],
)


# conj(z) -> (re, -im)                                gz = conj(G)
def _conj_shape(ctx: NodeContext) -> list[TensorType]:
    (z,) = ctx.input_types
    require_packed(ctx, z, 0)
    return [z]


def _conj_kernel(ctx: NodeContext) -> Callable:
    (z_t,) = ctx.input_types
    sign = np.array([1, -1], z_t.dtype.np)
    return lambda z, out=None: np.multiply(z, sign, out=out if out is not None else np.empty(z_t.shape, z_t.dtype.np))


CONJ = OpSchema(
    "conj",
    inputs=("z",),
    shape_infer=_conj_shape,
    kernels={"cpu": _conj_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda z, y, gy: ops.conj(gy)),
    traits=("accepts_out",),
    doc="The complex conjugate of packed z: (re, -im).",
    examples=[Example(["f32[3, 2]"]), Example(["f64[2, 3, 2]"])],
)


# complex_matmul(a, b) -> a @ b per batch             ga = G @ b^H, gb = a^H @ G (summed to each shape)
def _complex_matmul_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    require_packed(ctx, a, 0)
    require_packed(ctx, b, 1)
    _same_dtype(ctx)
    if a.rank < 3 or b.rank < 3:
        raise ctx.error(f"operands must be packed complex matrices [..., rows, cols, 2], got {a} and {b}")
    if a.shape[-2] != b.shape[-3]:
        raise ctx.error(f"inner dimensions differ: got {a} @ {b}, expected a's columns ({a.shape[-2]}) to equal "
                        f"b's rows ({b.shape[-3]})")
    batch = _broadcast(ctx, [a.shape[:-3], b.shape[:-3]], "the batch shapes")
    return [a.with_shape(batch + (a.shape[-3], b.shape[-2], 2))]


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # numpy hands a stacked product to BLAS only when each matrix has a unit stride; transposed views
    # (per-mode mixing reads [modes, batch, channels] views of [batch, channels, modes] data) lack it
    a = a if a.flags.c_contiguous else np.ascontiguousarray(a)
    b = b if b.flags.c_contiguous else np.ascontiguousarray(b)
    return np.matmul(a, b, out=out)


def _adjoint(t):  # noqa: ANN001, ANN201 - a traced Tensor
    """The conjugate transpose of a packed matrix stack (axes -3 and -2 swapped)."""
    perm = list(range(t.ndim - 3)) + [t.ndim - 2, t.ndim - 3, t.ndim - 1]
    return ops.conj(ops.transpose(t, perm=perm))


def _complex_matmul_gradient(ctx: NodeContext):
    a, b = ctx.input_types
    return ctx.grad_graph(lambda a_, b_, y, gy: [unbroadcast(ops.complex_matmul(gy, _adjoint(b_)), a),
                                                 unbroadcast(ops.complex_matmul(_adjoint(a_), gy), b)])


COMPLEX_MATMUL = OpSchema(
    "complex_matmul",
    inputs=("a", "b"),
    shape_infer=_complex_matmul_shape,
    kernels={"cpu": lambda ctx: _complex_result(ctx, _matmul)},
    gradient=_complex_matmul_gradient,
    traits=("accepts_out",),
    doc="The complex matrix product of packed a [..., m, k, 2] and b [..., k, n, 2] -> [..., m, n, 2]; batch axes "
        "broadcast. With modes as the batch axis it mixes channels per Fourier mode (FNO).",
    examples=[Example(["f32[3, 4, 2]", "f32[4, 5, 2]"]), Example(["f32[6, 2, 3, 2]", "f32[6, 3, 4, 2]"], note="batched"),
              Example(["f64[2, 1, 3, 2, 2]", "f64[4, 2, 3, 2]"], note="batch broadcast")],
)

SCHEMAS = [COMPLEX_MUL, CONJ, COMPLEX_MATMUL]
