"""Inverse trigonometric functions: atan, asin, acos and the two-argument atan2 (numpy 2's, torch's and ONNX's
names; the kernels are numpy's ``arctan``, ``arcsin``, ``arccos``, ``arctan2``).

Every GradientFn and JvpFn is written with ops of this pack (``sqrt``, ``square``, arithmetic), each closed
itself, so all four are differentiable to any order. At the ends of ``asin``'s and ``acos``'s domain (``|x| = 1``)
the derivative is infinite, as in torch; outside it the value is NaN. ``atan2`` at ``(0, 0)`` is 0 (numpy and torch)
and so is its gradient there, as torch's (jax's is NaN): the denominator ``x^2 + y^2`` is taken as 1 where it is 0,
and both numerators are then 0. Where ``x^2 + y^2`` underflows although the point is not 0 (``|x|, |y|`` below
about 1e-154 in float64, 1e-19 in float32), the gradient is not accurate (torch's is 0 there).
"""

from __future__ import annotations

import numpy as np

from frame_core import Example, OpSchema, ops

from ._shapes import float_broadcast, float_unary, unbroadcast
from .elementwise import ufunc_kernel

_EXAMPLES = [Example(["f32[3, 4]"], low=-3.0, high=3.0), Example(["f64[7]"], low=-3.0, high=3.0), Example(["f32[]"])]
#: inside (-1, 1), away from the ends where the derivative blows up
_UNIT_EXAMPLES = [Example(["f32[3, 4]"], low=-0.9, high=0.9), Example(["f64[7]"], low=-0.9, high=0.9),
                  Example(["f32[]"], low=-0.5, high=0.5)]


def _unary(name: str, ufunc: np.ufunc, gradient, jvp, doc: str, examples: list[Example]) -> OpSchema:  # noqa: ANN001
    return OpSchema(name, inputs=("x",), shape_infer=float_unary, kernels={"cpu": ufunc_kernel(ufunc)},
                    gradient=gradient, jvp=jvp, traits=("elementwise", "accepts_out", "any_shape_gradient"),
                    doc=doc, examples=examples)


def _one_plus_square(x):  # noqa: ANN001, ANN202 - a traced Tensor
    return ops.square(x) + 1.0


def _cos_of_asin(x):  # noqa: ANN001, ANN202 - sqrt(1 - x^2), written (1 - x)(1 + x) so it keeps its accuracy near |x| = 1
    return ops.sqrt((1.0 - x) * (x + 1.0))


# atan(x)                    gx = gy / (1 + x^2)
ATAN = _unary("atan", np.arctan,
              lambda ctx: ctx.grad_graph(lambda x, y, gy: gy / _one_plus_square(x)),
              lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx / _one_plus_square(x)),
              "Elementwise arctangent, in (-pi/2, pi/2) (numpy.arctan).", _EXAMPLES)

# asin(x)                    gx = gy / sqrt(1 - x^2)
ASIN = _unary("asin", np.arcsin,
              lambda ctx: ctx.grad_graph(lambda x, y, gy: gy / _cos_of_asin(x)),
              lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx / _cos_of_asin(x)),
              "Elementwise arcsine, in [-pi/2, pi/2], for x in [-1, 1] (NaN outside; numpy.arcsin).", _UNIT_EXAMPLES)

# acos(x)                    gx = -gy / sqrt(1 - x^2)
ACOS = _unary("acos", np.arccos,
              lambda ctx: ctx.grad_graph(lambda x, y, gy: -(gy / _cos_of_asin(x))),
              lambda ctx: ctx.jvp_graph(lambda x, y, dx: -(dx / _cos_of_asin(x))),
              "Elementwise arccosine, in [0, pi], for x in [-1, 1] (NaN outside; numpy.arccos).", _UNIT_EXAMPLES)


# atan2(y, x) = the angle of the point (x, y)     gy_ = g x / (x^2 + y^2),  gx_ = -g y / (x^2 + y^2)
def _radius_squared(y, x):  # noqa: ANN001, ANN202 - x^2 + y^2, or 1 where that is 0 (the numerators are 0 there too)
    r = ops.square(x) + ops.square(y)
    return ops.where(ops.equal(r, ops.zeros_like(r)), ops.ones_like(r), r)


def _atan2_gradient(ctx):  # noqa: ANN001, ANN202
    def grad(y, x, angle, g):
        scaled = g / _radius_squared(y, x)
        return [unbroadcast(scaled * x, y), unbroadcast(-(scaled * y), x)]
    return ctx.grad_graph(grad)


def _atan2_jvp(ctx):  # noqa: ANN001, ANN202
    return ctx.jvp_graph(lambda y, x, angle, dy, dx: (dy * x - dx * y) / _radius_squared(y, x))


ATAN2 = OpSchema(
    "atan2",
    inputs=("y", "x"),
    shape_infer=float_broadcast,
    kernels={"cpu": ufunc_kernel(np.arctan2)},
    gradient=_atan2_gradient,
    jvp=_atan2_jvp,
    traits=("elementwise", "broadcasting", "accepts_out", "any_shape_gradient"),
    doc="The angle in (-pi, pi] of the point (x, y), elementwise with numpy broadcasting (numpy.arctan2; "
        "torch.atan2(y, x)); y comes first. 0 at (0, 0), where its gradient is 0 as torch's.",
    examples=[Example(["f32[3, 4]", "f32[3, 4]"], low=-2.0, high=2.0, min_abs=0.1),
              Example(["f64[2, 3]", "f64[3]"], low=-2.0, high=2.0, min_abs=0.1, note="broadcast a row"),
              Example(["f64[2, 3]", "f64[]"], low=-2.0, high=2.0, min_abs=0.1, note="scalar operand")],
)

SCHEMAS = [ATAN, ASIN, ACOS, ATAN2]
