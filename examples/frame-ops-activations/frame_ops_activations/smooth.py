"""Smooth activations: softplus and gelu_tanh (the tanh approximation of gelu).

Both gradients are written with ops of frame-ops-basic (``sigmoid``,
``tanh``, arithmetic), which are closed under differentiation, so these ops
are differentiable to any order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from frame_core import Example, NodeContext, OpSchema, ops

from ._shapes import float_unary, out_array, typed

_EXAMPLES = [
    Example(["f32[3, 4]"], low=-3.0, high=3.0),
    Example(["f64[7]"], low=-3.0, high=3.0),
    Example(["f32[]"]),
]


# softplus(x) = log(1 + e^x)          gx = gy * sigmoid(x)
def _softplus_kernel(ctx: NodeContext) -> Callable:
    zero = typed(ctx, 0.0)
    # logaddexp(0, x) = log(e^0 + e^x), without overflow for large x; elementwise, so out may be x
    return lambda x, out=None: np.logaddexp(zero, x, out=out_array(x, out))


SOFTPLUS = OpSchema(
    "softplus",
    inputs=("x",),
    shape_infer=float_unary,
    kernels={"cpu": _softplus_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.sigmoid(x)),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="Elementwise log(1 + e ** x), a smooth relu; computed without overflow.",
    examples=_EXAMPLES,
)


# gelu(x) = x/2 (1 + tanh(u)),  u = c (x + a x^3),  c = sqrt(2/pi), a = 0.044715
#   gx = gy * [(1 + t)/2 + x/2 (1 - t^2) c (1 + 3 a x^2)],  t = tanh(u)
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


def _gelu_kernel(ctx: NodeContext) -> Callable:
    a, c, one, half = typed(ctx, GELU_A), typed(ctx, GELU_C), typed(ctx, 1.0), typed(ctx, 0.5)

    def gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        t = np.tanh((x * x * a + one) * x * c)
        t = t + one  # computed in full before out (which may be x itself) is written
        return np.multiply(t, x * half, out=out_array(x, out))
    return gelu


def _gelu_gradient(ctx: NodeContext):
    def grad(x, y, gy):
        x2 = x * x
        t = ops.tanh(x * (x2 * GELU_A + 1.0) * GELU_C)
        dt = (x2 * (3.0 * GELU_A) + 1.0) * GELU_C
        return gy * ((t + 1.0) * 0.5 + x * (1.0 - t * t) * dt * 0.5)
    return ctx.grad_graph(grad)


GELU = OpSchema(
    "gelu_tanh",
    inputs=("x",),
    shape_infer=float_unary,
    kernels={"cpu": _gelu_kernel},
    gradient=_gelu_gradient,
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="Gaussian error linear unit, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).",
    examples=_EXAMPLES,
)

SCHEMAS = [SOFTPLUS, GELU]
