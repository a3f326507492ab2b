"""Ops whose gradient is deliberately not the derivative of their forward.

``stop_gradient(x)`` is the identity forward and has a zero gradient: it cuts
the dependency edge for differentiation and stays visible in printed graphs
(seed 003). ``heaviside_surrogate(x; alpha)`` is the step ``x > 0`` forward;
its GradientFn is the derivative of ``sigmoid(alpha * x)``, the one
documented exception to "gradient equals the derivative of the forward"
(ARCH-066). Higher orders differentiate that smooth surrogate micro-graph.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, ops

from ._shapes import float_unary

STOP_GRADIENT = OpSchema(
    "stop_gradient",
    inputs=("x",),
    shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={"cpu": lambda ctx: lambda x: x},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: None),  # gx = 0: the edge is cut
    # Its zero gradient is its definition (seed 003), not the derivative of the identity forward: numerical
    # checks compare it with the derivative of a constant.
    gradient_surrogate=lambda x: np.zeros_like(x),
    traits=("view", "any_shape_gradient"),
    doc="Identity forward, zero gradient: nothing upstream of it receives a gradient through it.",
    examples=[Example(["f32[3, 4]"]), Example(["f64[]"])],
)


def _heaviside_kernel(ctx: NodeContext) -> Callable:
    zero = ctx.input_types[0].dtype.np.type(0)

    def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        mask = np.greater(x, zero)
        if out is None:
            return np.asarray(mask, dtype=x.dtype)  # a 0-d input gives a numpy scalar mask: keep an array
        np.copyto(out, mask)
        return out
    return kernel


def _heaviside_gradient(ctx: NodeContext):
    alpha = ctx.attrs["alpha"]

    def grad(x, y, gy):
        s = ops.sigmoid(x * alpha)
        return gy * (s * (1.0 - s) * alpha)  # d/dx sigmoid(alpha x) = alpha s (1 - s)
    return ctx.grad_graph(grad)


def _surrogate(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """The smooth function whose derivative the GradientFn is (ARCH-066 exception)."""
    return 0.5 * (1.0 + np.tanh(0.5 * alpha * x))


HEAVISIDE_SURROGATE = OpSchema(
    "heaviside_surrogate",
    inputs=("x",),
    attrs={"alpha": AttrSpec("float", 1.0, "steepness of the sigmoid(alpha * x) surrogate")},
    shape_infer=float_unary,
    kernels={"cpu": _heaviside_kernel},
    gradient=_heaviside_gradient,
    gradient_surrogate=_surrogate,
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="Step function (1 where x > 0, else 0) whose gradient is that of sigmoid(alpha * x) "
        "(a surrogate gradient, as used for spiking networks).",
    examples=[Example(["f32[3, 4]"], min_abs=0.05), Example(["f64[6]"], {"alpha": 4.0}, min_abs=0.05)],
)

SCHEMAS = [STOP_GRADIENT, HEAVISIDE_SURROGATE]
