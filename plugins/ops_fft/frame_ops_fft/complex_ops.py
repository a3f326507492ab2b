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

from ._packed import as_complex, as_packed, compute_dtype, require_float, require_packed, unbroadcast


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
    """A kernel applying ``fn`` to its inputs as numpy complex arrays (a real multiplier, last axis 1, as real),
    writing into ``out`` when given."""
    (y_t,) = ctx.output_types
    real, dtype = compute_dtype(y_t), y_t.dtype.np
    count = len(ctx.input_types)
    complex_out = y_t.shape[-1] == 2

    def numeric(a: np.ndarray) -> np.ndarray:
        return as_complex(a, real) if a.shape[-1] == 2 else a[..., 0].astype(real, copy=False)

    def repack(result: np.ndarray) -> np.ndarray:
        return as_packed(result, dtype) if complex_out else result[..., None].astype(dtype, copy=False)

    def kernel(*arrays: np.ndarray) -> np.ndarray:
        out = arrays[count] if len(arrays) > count else None
        args = [numeric(a) for a in arrays[:count]]
        if out is not None and out.dtype == real and out.flags.c_contiguous:
            fn(*args, out=as_complex(out, real) if complex_out else out[..., 0])  # views of the planned buffer
            return out
        result = repack(fn(*args))
        if out is None:
            return result
        out[...] = result
        return out
    return kernel


# complex_mul(a, b) -> a b, broadcasting; an operand with a last axis of 1 is real (a complex number with Im 0)
#   ga = G conj(b), gb = G conj(a), each summed to its operand's shape; a real operand takes the Re part
def _complex_mul_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    for i, t in enumerate((a, b)):
        require_float(ctx, t, i)
        if t.rank < 1 or t.shape[-1] not in (1, 2):
            raise ctx.error(f"got {t} for input {i} ({ctx.schema.inputs[i]}), expected packed complex [..., 2] or a "
                            "real multiplier [..., 1]")
    _same_dtype(ctx)
    last = max(a.shape[-1], b.shape[-1])
    return [a.with_shape(_broadcast(ctx, [a.shape[:-1], b.shape[:-1]], "the complex shapes") + (last,))]


def _complex_mul_gradient(ctx: NodeContext):
    a, b = ctx.input_types

    def part(g, operand: TensorType, value, other):  # noqa: ANN001, ANN202 - traced Tensors
        g = ops.complex_mul(g, ops.conj(other) if other.shape[-1] == 2 else other)
        if operand.shape[-1] == 1 and g.shape[-1] == 2:
            g = ops.slice(g, starts=[0], stops=[1], axes=[-1])  # dL/d(real operand) = Re(G conj(other))
        return unbroadcast(g, value)
    return ctx.grad_graph(lambda a_, b_, y, gy: [part(gy, a, a_, b_), part(gy, b, b_, a_)])


COMPLEX_MUL = OpSchema(
    "complex_mul",
    inputs=("a", "b"),
    shape_infer=_complex_mul_shape,
    kernels={"cpu": lambda ctx: _complex_result(ctx, np.multiply)},
    gradient=_complex_mul_gradient,
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: ops.complex_mul(da, b) + ops.complex_mul(a, db)),
    traits=("accepts_out", "commutative", "any_shape_gradient"),
    doc="The complex product of packed a and b: (a_re b_re - a_im b_im, a_re b_im + a_im b_re); the complex "
        "axes broadcast as in numpy. An operand whose last axis is 1 is real: it scales re and im alike "
        "(one pass over complex numbers, where a broadcast `mul` would loop over pairs).",
    examples=[Example(["f32[3, 4, 2]", "f32[3, 4, 2]"]), Example(["f32[2, 5, 2]", "f32[5, 2]"], note="broadcast"),
              Example(["f64[3, 1, 2]", "f64[1, 4, 2]"], note="broadcast both ways"),
              Example(["f32[2, 5, 2]", "f32[5, 1]"], note="a real multiplier"),
              Example(["f64[3, 1]", "f64[3, 2]"], note="a real operand first"),
              Example(["f64[2, 3, 1]", "f64[3, 1]"], note="both real"),
              Example(["f32[2]", "f32[3, 2]"], note="a complex scalar")],
)


# conj(z) -> (re, -im)                                gz = conj(G)
def _conj_shape(ctx: NodeContext) -> list[TensorType]:
    (z,) = ctx.input_types
    require_packed(ctx, z, 0, complex_axes=0)  # a complex scalar [2] too, as complex_mul takes one
    return [z]


def _conj_kernel(ctx: NodeContext) -> Callable:
    # numpy's conjugate on the complex view streams over complex numbers; multiplying the packed array by
    # (1, -1) would run numpy's inner loop over (re, im) pairs, several times slower
    return _complex_result(ctx, np.conjugate)


CONJ = OpSchema(
    "conj",
    inputs=("z",),
    shape_infer=_conj_shape,
    kernels={"cpu": _conj_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda z, y, gy: ops.conj(gy)),
    jvp=lambda ctx: ctx.jvp_graph(lambda z, y, dz: ops.conj(dz)),
    traits=("accepts_out", "any_shape_gradient"),
    doc="The complex conjugate of packed z: (re, -im).",
    examples=[Example(["f32[3, 2]"]), Example(["f64[2, 3, 2]"]), Example(["f32[2]"], note="a complex scalar")],
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
    """The conjugate transpose of a packed matrix stack (axes -3 and -2 swapped).

    conj first, on the contiguous input (one streaming pass), then the transpose as a free view.
    """
    perm = list(range(t.ndim - 3)) + [t.ndim - 2, t.ndim - 3, t.ndim - 1]
    return ops.transpose(ops.conj(t), perm=perm)


def _complex_matmul_gradient(ctx: NodeContext):
    return ctx.grad_graph(lambda a_, b_, y, gy: [unbroadcast(ops.complex_matmul(gy, _adjoint(b_)), a_),
                                                 unbroadcast(ops.complex_matmul(_adjoint(a_), gy), b_)])


COMPLEX_MATMUL = OpSchema(
    "complex_matmul",
    inputs=("a", "b"),
    shape_infer=_complex_matmul_shape,
    kernels={"cpu": lambda ctx: _complex_result(ctx, _matmul)},
    gradient=_complex_matmul_gradient,
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: ops.complex_matmul(da, b) + ops.complex_matmul(a, db)),
    traits=("accepts_out", "any_shape_gradient"),
    doc="The complex matrix product of packed a [..., m, k, 2] and b [..., k, n, 2] -> [..., m, n, 2]; batch axes "
        "broadcast. With modes as the batch axis it mixes channels per Fourier mode (FNO).",
    examples=[Example(["f32[3, 4, 2]", "f32[4, 5, 2]"]), Example(["f32[6, 2, 3, 2]", "f32[6, 3, 4, 2]"], note="batched"),
              Example(["f64[2, 1, 3, 2, 2]", "f64[4, 2, 3, 2]"], note="batch broadcast")],
)

SCHEMAS = [COMPLEX_MUL, CONJ, COMPLEX_MATMUL]
