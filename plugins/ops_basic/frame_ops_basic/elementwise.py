"""Elementwise ops: binary arithmetic with numpy broadcasting, and unary math.

Kernels are numpy ufuncs (or short ufunc sequences), so each accepts a
trailing ``out`` array and is safe when ``out`` is one of its inputs. Binary
GradientFns reduce ``gy`` back to each input's shape with
``reduce_to_shape_internal`` when the input was broadcast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import ops
from frame_core.ops_registry.schema import Example, NodeContext, OpSchema

from ._shapes import broadcast, float_broadcast, float_unary


def unbroadcast(g, t):
    """``g`` summed back to type ``t`` (identity when nothing was broadcast)."""
    return g if g.shape == t.shape else ops.reduce_to_shape_internal(g, shape=t.shape)


_BINARY_EXAMPLES = [
    Example(["f32[3, 4]", "f32[3, 4]"]),
    Example(["f32[2, 3, 4]", "f32[4]"], note="broadcast a row"),
    Example(["f32[3, 1]", "f32[1, 4]"], note="broadcast both ways"),
    Example(["f64[2, 3]", "f64[]"], note="scalar operand"),
]
_POSITIVE_BINARY_EXAMPLES = [
    Example(["f32[3, 4]", "f32[3, 4]"], low=0.5, high=2.0),
    Example(["f32[2, 3, 4]", "f32[4]"], low=0.5, high=2.0, note="broadcast a row"),
    Example(["f64[2, 3]", "f64[]"], low=0.5, high=2.0, note="scalar operand"),
]


def _binary(name: str, ufunc: np.ufunc, gradient: Callable, doc: str, *, commutative: bool = False,
            float_only: bool = False, examples: list[Example] = _BINARY_EXAMPLES) -> OpSchema:
    return OpSchema(
        name,
        inputs=("a", "b"),
        shape_infer=float_broadcast if float_only else broadcast,
        kernels={"cpu": lambda ctx: ufunc},
        gradient=gradient,
        traits=("elementwise", "broadcasting", "accepts_out") + (("commutative",) if commutative else ()),
        doc=doc,
        examples=examples,
    )


# add(a, b) = a + b          ga = gy, gb = gy (each summed over its broadcast axes)
ADD = _binary("add", np.add, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy, a.type), unbroadcast(gy, b.type)]),
    "Elementwise a + b with numpy broadcasting.", commutative=True)

# sub(a, b) = a - b          ga = gy, gb = -gy
SUB = _binary("sub", np.subtract, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy, a.type), unbroadcast(-gy, b.type)]),
    "Elementwise a - b with numpy broadcasting.")

# mul(a, b) = a * b          ga = gy * b, gb = gy * a
MUL = _binary("mul", np.multiply, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy * b, a.type), unbroadcast(gy * a, b.type)]),
    "Elementwise a * b with numpy broadcasting.", commutative=True)

# div(a, b) = a / b          ga = gy / b, gb = -gy * y / b
DIV = _binary("div", np.divide, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy / b, a.type), unbroadcast(-(gy * y) / b, b.type)]),
    "Elementwise a / b with numpy broadcasting (floating inputs).", float_only=True,
    examples=_POSITIVE_BINARY_EXAMPLES)


# -- unary --------------------------------------------------------------------------------
_UNARY_EXAMPLES = [Example(["f32[3, 4]"]), Example(["f64[5]"]), Example(["f32[]"])]
_POSITIVE_EXAMPLES = [Example(["f32[3, 4]"], low=0.5, high=2.0), Example(["f64[5]"], low=0.5, high=2.0)]


def _sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # 0.5 * (1 + tanh(x / 2)): no overflow for large |x|, unlike 1 / (1 + exp(-x))
    out = np.multiply(x, 0.5, out)
    np.tanh(out, out)
    np.multiply(out, 0.5, out)
    return np.add(out, 0.5, out)


def _relu_kernel(ctx: NodeContext) -> Callable:
    zero = ctx.input_types[0].dtype.np.type(0)
    return lambda x, out=None: np.maximum(x, zero, out=out)


def _unary(name: str, kernel: Callable[[NodeContext], Callable], gradient: Callable, doc: str,
           examples: list[Example] = _UNARY_EXAMPLES, float_only: bool = True) -> OpSchema:
    return OpSchema(
        name,
        inputs=("x",),
        shape_infer=float_unary if float_only else (lambda ctx: [ctx.input_types[0]]),
        kernels={"cpu": kernel},
        gradient=gradient,
        traits=("elementwise", "accepts_out"),
        doc=doc,
        examples=examples,
    )


NEG = _unary("neg", lambda ctx: np.negative, lambda ctx: ctx.grad_graph(lambda x, y, gy: -gy),  # gx = -gy
             "Elementwise -x.", float_only=False)
SQUARE = _unary("square", lambda ctx: np.square, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (x * 2.0)),  # gx = gy * 2x
    "Elementwise x * x.")
EXP = _unary("exp", lambda ctx: np.exp, lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * y),  # gx = gy * exp(x)
             "Elementwise e ** x.")
LOG = _unary("log", lambda ctx: np.log, lambda ctx: ctx.grad_graph(lambda x, y, gy: gy / x),  # gx = gy / x
             "Elementwise natural logarithm (x > 0).", _POSITIVE_EXAMPLES)
SQRT = _unary("sqrt", lambda ctx: np.sqrt, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy / (y * 2.0)),  # gx = gy / (2 sqrt(x))
    "Elementwise square root (x > 0 for a finite gradient).", _POSITIVE_EXAMPLES)
TANH = _unary("tanh", lambda ctx: np.tanh, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (1.0 - ops.square(y))),  # gx = gy * (1 - tanh(x)^2)
    "Elementwise hyperbolic tangent.")
SIGMOID = _unary("sigmoid", lambda ctx: _sigmoid, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (y * (1.0 - y))),  # gx = gy * s * (1 - s)
    "Elementwise logistic function 1 / (1 + e ** -x), computed without overflow.")
SIN = _unary("sin", lambda ctx: np.sin, lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.cos(x)),  # gx = gy cos x
             "Elementwise sine.")
COS = _unary("cos", lambda ctx: np.cos, lambda ctx: ctx.grad_graph(lambda x, y, gy: -(gy * ops.sin(x))),  # -gy sin x
             "Elementwise cosine.")
RELU = _unary("relu", _relu_kernel, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: ops.relu_grad_internal(x, gy)),  # gx = gy where x > 0, else 0
    "Elementwise max(x, 0). Its derivative at 0 is taken as 0.",
    [Example(["f32[3, 4]"], min_abs=0.05), Example(["f64[6]"], min_abs=0.05)], float_only=False)


# relu_grad_internal(x, gy) = gy * (x > 0)
#   second order (seed 000 §5): g_x = 0 (zero away from the kink, and taken as zero at it), g_gy = relu_grad_internal(x, ggx)
def _relu_grad_shape(ctx: NodeContext):
    x, gy = ctx.input_types
    if x != gy:
        raise ctx.error(f"x and gy must have one type, got {x} and {gy}")
    return [gy]


def _relu_grad_kernel(ctx: NodeContext) -> Callable:
    zero = ctx.input_types[0].dtype.np.type(0)
    return lambda x, gy, out=None: np.multiply(gy, np.greater(x, zero), out)


RELU_GRAD = OpSchema(
    "relu_grad_internal",
    inputs=("x", "gy"),
    shape_infer=_relu_grad_shape,
    kernels={"cpu": _relu_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, y, ggx: [None, ops.relu_grad_internal(x, ggx)]),
    traits=("elementwise", "accepts_out"),
    doc="gy where x > 0, else 0: the gradient of relu.",
    examples=[Example(["f32[3, 4]", "f32[3, 4]"], min_abs=0.05), Example(["f64[5]", "f64[5]"], min_abs=0.05)],
)

SCHEMAS = [ADD, SUB, MUL, DIV, NEG, SQUARE, EXP, LOG, SQRT, TANH, SIGMOID, SIN, COS, RELU, RELU_GRAD]
