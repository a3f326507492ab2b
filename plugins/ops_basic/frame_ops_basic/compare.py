"""Comparisons (``equal`` ... ``greater_equal``, boolean outputs) and ``where(cond, a, b)``.

Comparisons take two inputs of one dtype (any dtype, bool included), follow
numpy broadcasting and return ``bool``. They have no GradientFn: a boolean
value carries no gradient, so the backward transform never puts a node whose
outputs are all boolean on the gradient chain (``where(greater(a, b), a, b)``
differentiates to any order through ``where``). NaN compares unequal to
everything, itself included (IEEE 754, as numpy): ``not_equal(nan, nan)`` is
true and every other comparison with a NaN is false.

``where(cond, a, b)`` picks ``a`` where the boolean ``cond`` holds and ``b``
elsewhere; all three broadcast. ``cond`` is not differentiable (its slot in
the GradientFn is a zero, as for every input listed in ``nondiff_inputs``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import Example, NodeContext, OpSchema, Tensor, TensorType, bool_, constant, ops

from ._shapes import broadcast_shapes, unbroadcast
from .elementwise import ufunc_kernel

#: The reason every comparison gives for having no GradientFn (TEAM decision: one wording for all).
NO_GRADIENT = "outputs carry no gradient"


def _compare_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    if a.dtype is not b.dtype:
        raise ctx.error(f"inputs must share a dtype, got {a} and {b}; cast one of them first (ops.cast(x, to=...))")
    return [TensorType(bool_, broadcast_shapes(ctx, [a.shape, b.shape]))]


_COMPARE_EXAMPLES = [
    Example(["f32[3, 4]", "f32[3, 4]"]),
    Example(["f32[2, 3, 4]", "f32[4]"], note="broadcast a row"),
    Example(["f64[3, 1]", "f64[1, 4]"], note="broadcast both ways"),
    Example(["i32[5]", "i32[]"], note="integers against a scalar"),
    Example(["bool[2, 3]", "bool[2, 3]"]),
]


def _comparison(name: str, ufunc: np.ufunc, doc: str, *, commutative: bool = False) -> OpSchema:
    return OpSchema(
        name,
        inputs=("a", "b"),
        shape_infer=_compare_shape,
        kernels={"cpu": ufunc_kernel(ufunc)},
        not_differentiable=NO_GRADIENT,
        traits=("elementwise", "broadcasting", "accepts_out") + (("commutative",) if commutative else ()),
        doc=doc + " Boolean output, numpy broadcasting; no gradient (a boolean carries none).",
        examples=_COMPARE_EXAMPLES,
    )


# Comparisons: no GradientFn; a boolean output is never on the gradient chain.
EQUAL = _comparison("equal", np.equal, "a == b elementwise.", commutative=True)
NOT_EQUAL = _comparison("not_equal", np.not_equal, "a != b elementwise (true for NaN against anything).",
                        commutative=True)
LESS = _comparison("less", np.less, "a < b elementwise.")
LESS_EQUAL = _comparison("less_equal", np.less_equal, "a <= b elementwise.")
GREATER = _comparison("greater", np.greater, "a > b elementwise.")
GREATER_EQUAL = _comparison("greater_equal", np.greater_equal, "a >= b elementwise.")


# -- where ----------------------------------------------------------------------------------------
def _where_shape(ctx: NodeContext) -> list[TensorType]:
    cond, a, b = ctx.input_types
    if cond.dtype is not bool_:
        raise ctx.error(f"cond must be boolean, got {cond}; compare first (ops.greater(x, 0.0), x > 0.0) "
                        "or cast it (ops.cast(c, to='bool'))")
    if a.dtype is not b.dtype:
        raise ctx.error(f"a and b must share a dtype, got {a} and {b}; cast one of them first")
    return [a.with_shape(broadcast_shapes(ctx, [cond.shape, a.shape, b.shape]))]


def _where_kernel(ctx: NodeContext) -> Callable:
    (y,) = ctx.output_types

    def kernel(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(np.where(cond, a, b), y.dtype.np)  # 0-d stays an array; same dtype, no copy
    return kernel


def zero_like(t: Tensor) -> Tensor:
    """A rank-0 zero of ``t``'s dtype in the graph being traced (broadcasts against anything)."""
    return constant(np.zeros((), t.dtype.np))


def _where_gradient(ctx: NodeContext):
    def grad(cond, a, b, y, gy):
        if not gy.dtype.is_float:
            return [None, None, None]
        zero = zero_like(gy)
        return [None, unbroadcast(ops.where(cond, gy, zero), a), unbroadcast(ops.where(cond, zero, gy), b)]
    return ctx.grad_graph(grad)


# where(cond, a, b)          ga = where(cond, gy, 0), gb = where(cond, 0, gy) (each summed over its broadcast axes)
WHERE = OpSchema(
    "where",
    inputs=("cond", "a", "b"),
    shape_infer=_where_shape,
    kernels={"cpu": _where_kernel},
    gradient=_where_gradient,
    nondiff_inputs=(0,),
    traits=("elementwise", "broadcasting", "any_shape_gradient"),
    doc="a where the boolean cond holds, else b; cond, a and b broadcast (numpy). cond carries no gradient.",
    examples=[
        Example(["bool[3, 4]", "f32[3, 4]", "f32[3, 4]"]),
        Example(["bool[3, 1]", "f32[4]", "f32[]"], note="all three broadcast"),
        Example(["bool[2, 3]", "f64[2, 3]", "f64[1, 3]"]),
        Example(["bool[4]", "i64[4]", "i64[4]"], note="integer branches (no gradient)"),
    ],
)

SCHEMAS = [EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL, WHERE]
