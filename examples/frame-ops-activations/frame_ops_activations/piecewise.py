"""Piecewise activations with a kink at 0: leaky_relu and elu.

Their derivatives are piecewise too, so each gets small ``_internal`` ops
for its gradient (like relu's ``relu_grad_internal`` in frame-ops-basic),
each with its own GradientFn, so the pack stays closed under
differentiation. At the kink the derivative is taken from the left piece;
the examples keep inputs away from 0 (``min_abs``) so finite differences
never straddle it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, ops

from ._shapes import float_pair, float_unary, out_array, typed


def _attr(ctx: NodeContext, name: str) -> np.generic:
    """Attribute ``name`` as a scalar of the node's dtype (so float16 and bfloat16 stay what they are)."""
    return typed(ctx, ctx.attrs[name])


def _gated(ctx: NodeContext, positive: float, negative: Callable[[np.ndarray], np.ndarray | np.generic]
           ) -> Callable:
    """The kernel ``(x, g) -> g * (positive if x > 0 else negative(x))``: every piecewise op of this module."""
    zero, high = typed(ctx, 0.0), typed(ctx, positive)
    return lambda x, g, out=None: np.multiply(g, np.where(x > zero, high, negative(x)), out=out_array(g, out))


# -- leaky_relu(x; slope) = x if x > 0 else slope * x ----------------------------------------
#    gx = leaky_relu_grad_internal(x, gy) = gy * (1 if x > 0 else slope)
def _leaky_relu_kernel(ctx: NodeContext) -> Callable:
    slope = _attr(ctx, "slope")
    gated = _gated(ctx, 1.0, lambda x: slope)
    return lambda x, out=None: gated(x, x, out)


def _leaky_relu_grad_kernel(ctx: NodeContext) -> Callable:
    slope = _attr(ctx, "slope")
    return _gated(ctx, 1.0, lambda x: slope)


_SLOPE = {"slope": AttrSpec("float", 0.01, "the slope for x <= 0")}

LEAKY_RELU = OpSchema(
    "leaky_relu",
    inputs=("x",),
    attrs=_SLOPE,
    shape_infer=float_unary,
    kernels={"cpu": _leaky_relu_kernel},
    gradient=lambda ctx: ctx.grad_graph(
        lambda x, y, gy: ops.leaky_relu_grad_internal(x, gy, slope=ctx.attrs["slope"])),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="Elementwise x where x > 0, else slope * x.",
    examples=[
        Example(["f32[3, 4]"], min_abs=0.05),
        Example(["f64[6]"], {"slope": 0.2}, min_abs=0.05),
        Example(["f32[]"], {"slope": -0.5}, low=-1.0, high=-0.1, note="negative input, negative slope"),
    ],
)

# second order: d/dx = 0 on both pieces; d/dgy = leaky_relu_grad_internal(x, ggx)
LEAKY_RELU_GRAD = OpSchema(
    "leaky_relu_grad_internal",
    inputs=("x", "gy"),
    attrs=_SLOPE,
    shape_infer=float_pair,
    kernels={"cpu": _leaky_relu_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(
        lambda x, gy, y, ggx: [None, ops.leaky_relu_grad_internal(x, ggx, slope=ctx.attrs["slope"])]),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="gy where x > 0, else slope * gy: the gradient of leaky_relu.",
    examples=[Example(["f32[3, 4]", "f32[3, 4]"], {"slope": 0.2}, min_abs=0.05),
              Example(["f64[5]", "f64[5]"], min_abs=0.05)],
)


# -- elu(x; alpha) = x if x > 0 else alpha * (e^x - 1) ---------------------------------------
#    gx = elu_grad_internal(x, gy) = gy * d(x),  d(x) = 1 if x > 0 else alpha e^x
#    d'(x) = c(x) = 0 if x > 0 else alpha e^x, and c' = c: elu_curvature_internal closes the chain.
def _elu_kernel(ctx: NodeContext) -> Callable:
    zero, alpha = typed(ctx, 0.0), _attr(ctx, "alpha")

    def elu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        negative = alpha * np.expm1(np.minimum(x, zero))  # computed before out (which may be x) is written
        return np.add(np.maximum(x, zero), negative, out=out_array(x, out))
    return elu


def _elu_grad_kernel(ctx: NodeContext) -> Callable:
    zero, alpha = typed(ctx, 0.0), _attr(ctx, "alpha")
    return _gated(ctx, 1.0, lambda x: alpha * np.exp(np.minimum(x, zero)))


def _elu_curvature_kernel(ctx: NodeContext) -> Callable:
    zero, alpha = typed(ctx, 0.0), _attr(ctx, "alpha")
    return _gated(ctx, 0.0, lambda x: alpha * np.exp(np.minimum(x, zero)))


_ALPHA = {"alpha": AttrSpec("float", 1.0, "the saturation value -alpha for x -> -inf")}
_PAIR_EXAMPLES = [Example(["f32[3, 4]", "f32[3, 4]"], min_abs=0.05),
                  Example(["f64[5]", "f64[5]"], {"alpha": 0.5}, low=-2.0, high=2.0, min_abs=0.05)]

ELU = OpSchema(
    "elu",
    inputs=("x",),
    attrs=_ALPHA,
    shape_infer=float_unary,
    kernels={"cpu": _elu_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.elu_grad_internal(x, gy, alpha=ctx.attrs["alpha"])),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="Exponential linear unit: x where x > 0, else alpha * (e ** x - 1).",
    examples=[
        Example(["f32[3, 4]"], low=-2.0, high=2.0, min_abs=0.05),
        Example(["f64[6]"], {"alpha": 0.5}, low=-3.0, high=1.0, min_abs=0.05),
        Example(["f32[]"], {"alpha": 2.0}, low=-1.0, high=-0.1, note="negative input"),
    ],
)

# gradient of gy * d(x):  d/dx = elu_curvature_internal(x, ggx * gy),  d/dgy = elu_grad_internal(x, ggx)
ELU_GRAD = OpSchema(
    "elu_grad_internal",
    inputs=("x", "gy"),
    attrs=_ALPHA,
    shape_infer=float_pair,
    kernels={"cpu": _elu_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, y, ggx: [
        ops.elu_curvature_internal(x, ggx * gy, alpha=ctx.attrs["alpha"]),
        ops.elu_grad_internal(x, ggx, alpha=ctx.attrs["alpha"]),
    ]),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="gy where x > 0, else gy * alpha * e ** x: the gradient of elu.",
    examples=_PAIR_EXAMPLES,
)

# gradient of g * c(x):  d/dx = elu_curvature_internal(x, gy * g) (c' = c),  d/dg = elu_curvature_internal(x, gy)
ELU_CURVATURE = OpSchema(
    "elu_curvature_internal",
    inputs=("x", "g"),
    attrs=_ALPHA,
    shape_infer=float_pair,
    kernels={"cpu": _elu_curvature_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, g, y, gy: [
        ops.elu_curvature_internal(x, gy * g, alpha=ctx.attrs["alpha"]),
        ops.elu_curvature_internal(x, gy, alpha=ctx.attrs["alpha"]),
    ]),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="0 where x > 0, else g * alpha * e ** x: the second derivative of elu times g.",
    examples=_PAIR_EXAMPLES,
)

SCHEMAS = [LEAKY_RELU, LEAKY_RELU_GRAD, ELU, ELU_GRAD, ELU_CURVATURE]
