"""Matrix inverse and determinant of square matrices ``[..., n, n]`` (a batch of any rank in front): ``inv`` and
``det``, numpy's ``linalg.inv`` and ``linalg.det`` (LU with partial pivoting, LAPACK).

Gradients (ARCH-068: written with ops of this pack, so closed to any order):
- ``inv``: ``y = x^-1``, ``gx = -y^T gy y^T``; forward mode ``dy = -y dx y``.
- ``det``: ``gx = gy det(x) x^-T`` (Jacobi's formula); forward mode ``d det = det(x) trace(x^-1 dx)``.

A singular matrix has no inverse: ``inv`` raises ``DataError`` naming it, and so does ``det``'s gradient, which
goes through the inverse (its value is 0, as numpy's and torch's). float16 and bfloat16 compute in float32 and
round once (LAPACK has no half precision).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import DataError, Example, NodeContext, OpSchema, TensorType, ops

_WIDE = {2: np.float32}  # itemsize -> the dtype half precision computes in


def _square(ctx: NodeContext) -> TensorType:
    (t,) = ctx.input_types
    if not t.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {t}; cast it to a float dtype first")
    if len(t.shape) < 2 or t.shape[-1] != t.shape[-2]:
        raise ctx.error(f"needs square matrices [..., n, n], got {t}")
    return t


def _inv_shape(ctx: NodeContext) -> list[TensorType]:
    return [_square(ctx)]


def _det_shape(ctx: NodeContext) -> list[TensorType]:
    t = _square(ctx)
    return [TensorType(t.dtype, t.shape[:-2])]


def _singular(name: str, x: np.ndarray) -> DataError:
    where = ""
    if x.ndim > 2:
        bad = [i for i in np.ndindex(x.shape[:-2]) if np.linalg.matrix_rank(x[i]) < x.shape[-1]]
        where = f" (matrix {list(bad[0])} of the batch)" if bad else ""
    return DataError(f"{name}: a singular matrix has no inverse{where}; check the input, or regularise it "
                     "(x + eps * I) before inverting")


def _kernel(fn: Callable[[np.ndarray], np.ndarray], name: str) -> Callable[[NodeContext], Callable]:
    def build(ctx: NodeContext) -> Callable:
        (t,) = ctx.output_types
        dtype = t.dtype.np
        wide = _WIDE.get(t.dtype.itemsize, dtype)

        def kernel(x: np.ndarray) -> np.ndarray:
            try:
                y = fn(np.asarray(x, wide))
            except np.linalg.LinAlgError:
                raise _singular(name, np.asarray(x, wide)) from None
            return np.asarray(y, dtype) if t.shape else np.array(y, dtype)
        return kernel
    return build


def _mT(x):  # noqa: ANN001, ANN202 - a traced Tensor's matrices transposed
    rank = len(x.shape)
    return ops.transpose(x, perm=[*range(rank - 2), rank - 1, rank - 2])


def _inv_gradient(ctx: NodeContext):
    return ctx.grad_graph(lambda x, y, gy: -(_mT(y) @ gy @ _mT(y)))


def _inv_jvp(ctx: NodeContext):
    return ctx.jvp_graph(lambda x, y, dx: -(y @ dx @ y))


def _det_gradient(ctx: NodeContext):
    def grad(x, d, gy):
        scale = ops.expand_dims(gy * d, axes=[-1, -2]) if len(x.shape) > 2 else ops.reshape(gy * d, shape=[1, 1])
        return scale * _mT(ops.inv(x))
    return ctx.grad_graph(grad)


def _det_jvp(ctx: NodeContext):
    def jvp(x, d, dx):
        trace = ops.sum(_mT(ops.inv(x)) * dx, axes=[-2, -1])  # trace(x^-1 dx) = sum(x^-T * dx)
        return d * trace
    return ctx.jvp_graph(jvp)


def _well_conditioned(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """2 I plus scattered entries in [-0.5, 0.5]: invertible, with a condition number of a few. (A sine of a
    ramp, not numpy.random: importing that at every registry load costs about 16 ms.)"""
    entries = 0.5 * np.sin(np.arange(int(np.prod(shape)), dtype=np.float64) * 2.399 + seed)
    return entries.reshape(shape) + 2 * np.eye(shape[-1])


_EXAMPLES = [Example(["f64[3, 3]"], values=[_well_conditioned((3, 3), 0)]),
             Example(["f64[2, 4, 4]"], values=[_well_conditioned((2, 4, 4), 1)], note="a batch"),
             Example(["f32[2, 2]"], values=[_well_conditioned((2, 2), 2).astype(np.float32)]),
             Example(["f64[1, 1]"], values=[np.array([[-1.5]])], note="one element")]

INV = OpSchema(
    "inv",
    inputs=("x",),
    shape_infer=_inv_shape,
    kernels={"cpu": _kernel(np.linalg.inv, "inv")},
    gradient=_inv_gradient,
    jvp=_inv_jvp,
    traits=("any_shape_gradient",),
    doc="The inverse of each square matrix of x [..., n, n] (numpy.linalg.inv); a singular matrix is a DataError. "
        "Gradient -y^T gy y^T.",
    examples=_EXAMPLES,
)

DET = OpSchema(
    "det",
    inputs=("x",),
    shape_infer=_det_shape,
    kernels={"cpu": _kernel(np.linalg.det, "det")},
    gradient=_det_gradient,
    jvp=_det_jvp,
    traits=("any_shape_gradient",),
    doc="The determinant of each square matrix of x [..., n, n], shape [...] (numpy.linalg.det). Gradient "
        "gy det(x) x^-T: at a singular matrix it needs the inverse and raises DataError.",
    examples=_EXAMPLES,
)

SCHEMAS = [INV, DET]
