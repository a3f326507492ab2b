"""Elementwise ops: binary arithmetic with numpy broadcasting, and unary math.

Kernels are numpy ufuncs (or short ufunc sequences), so each accepts a
trailing ``out`` array and is safe when ``out`` is one of its inputs. Binary
GradientFns reduce ``gy`` back to each input's shape with
``reduce_to_shape_internal`` when the input was broadcast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import Example, NodeContext, OpSchema, ops

from ._shapes import broadcast, float_broadcast, float_unary, numeric_unary, unbroadcast


def ufunc_kernel(ufunc: np.ufunc) -> Callable[[NodeContext], Callable]:
    """The ufunc itself, or for a rank-0 output a wrapper that returns a 0-d array, not a numpy scalar."""
    def build(ctx: NodeContext) -> Callable:
        (y,) = ctx.output_types
        if y.shape:
            return ufunc
        dtype = y.dtype.np
        if ufunc.nin == 1:
            return lambda x, out=None: ufunc(x, out=out if out is not None else np.empty((), dtype))
        return lambda a, b, out=None: ufunc(a, b, out=out if out is not None else np.empty((), dtype))
    return build


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
            float_only: bool = False, examples: list[Example] = _BINARY_EXAMPLES, jvp: Callable | None = None) -> OpSchema:
    return OpSchema(
        name,
        inputs=("a", "b"),
        shape_infer=float_broadcast if float_only else broadcast,
        kernels={"cpu": ufunc_kernel(ufunc)},
        gradient=gradient,
        jvp=jvp,
        traits=("elementwise", "broadcasting", "accepts_out", "any_shape_gradient")
        + (("commutative",) if commutative else ()),
        doc=doc,
        examples=examples,
    )


# add(a, b) = a + b          ga = gy, gb = gy (each summed over its broadcast axes)
ADD = _binary("add", np.add, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy, a), unbroadcast(gy, b)]),
    "Elementwise a + b with numpy broadcasting.", commutative=True,
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: da + db))  # dy = da + db

# sub(a, b) = a - b          ga = gy, gb = -gy
SUB = _binary("sub", np.subtract, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy, a), unbroadcast(-gy, b)]),
    "Elementwise a - b with numpy broadcasting.",
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: da - db))  # dy = da - db

# mul(a, b) = a * b          ga = gy * b, gb = gy * a
MUL = _binary("mul", np.multiply, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy * b, a), unbroadcast(gy * a, b)]),
    "Elementwise a * b with numpy broadcasting.", commutative=True,
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: da * b + a * db))  # dy = da b + a db

# div(a, b) = a / b          ga = gy / b, gb = -gy * y / b
DIV = _binary("div", np.divide, lambda ctx: ctx.grad_graph(
    lambda a, b, y, gy: [unbroadcast(gy / b, a), unbroadcast(-(gy * y) / b, b)]),
    "Elementwise a / b with numpy broadcasting (floating inputs).", float_only=True,
    examples=_POSITIVE_BINARY_EXAMPLES,
    jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: (da - y * db) / b))  # dy = (da - y db) / b


# -- unary --------------------------------------------------------------------------------
_UNARY_EXAMPLES = [Example(["f32[3, 4]"]), Example(["f64[5]"]), Example(["f32[]"])]
_POSITIVE_EXAMPLES = [Example(["f32[3, 4]"], low=0.5, high=2.0), Example(["f64[5]"], low=0.5, high=2.0)]


def _sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # 0.5 * (1 + tanh(x / 2)): no overflow for large |x|, unlike 1 / (1 + exp(-x)).
    # `half` has x's dtype (a Python float would promote bfloat16 to float32); `out` is allocated
    # explicitly because ufuncs on 0-d arrays return scalars.
    half = x.dtype.type(0.5)
    out = np.multiply(x, half, out if out is not None else np.empty_like(x))
    np.tanh(out, out)
    np.multiply(out, half, out)
    return np.add(out, half, out)


def _relu_kernel(ctx: NodeContext) -> Callable:
    t = ctx.input_types[0]
    dtype = t.dtype.np
    zero = np.zeros((), dtype)  # a 0-d array: numpy's scalar conversion of a numpy scalar costs more than the max
    maximum, empty = np.maximum, np.empty
    if not t.shape:
        def relu0(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            return maximum(x, zero, out=out if out is not None else empty((), dtype))
        return relu0

    def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return maximum(x, zero, out=out)  # out by keyword: numpy 2.4 deprecates it positionally for maximum
    relu.ufunc_form = (maximum, (zero,))  # type: ignore[attr-defined]  # fused code calls maximum itself
    return relu


def _unary(name: str, kernel: Callable[[NodeContext], Callable], gradient: Callable, doc: str,
           examples: list[Example] = _UNARY_EXAMPLES, float_only: bool = True, jvp: Callable | None = None) -> OpSchema:
    return OpSchema(
        name,
        inputs=("x",),
        shape_infer=float_unary if float_only else numeric_unary,
        kernels={"cpu": kernel},
        gradient=gradient,
        jvp=jvp,
        traits=("elementwise", "accepts_out", "any_shape_gradient"),
        doc=doc,
        examples=examples,
    )


NEG = _unary("neg", ufunc_kernel(np.negative), lambda ctx: ctx.grad_graph(lambda x, y, gy: -gy),  # gx = -gy
             "Elementwise -x.", float_only=False,
             jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: -dx))
SQUARE = _unary("square", ufunc_kernel(np.square), lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (x * 2.0)),  # gx = gy * 2x
    "Elementwise x * x.", jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * (x * 2.0)))
EXP = _unary("exp", ufunc_kernel(np.exp), lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * y),  # gx = gy * exp(x)
             "Elementwise e ** x.", jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * y))
LOG = _unary("log", ufunc_kernel(np.log), lambda ctx: ctx.grad_graph(lambda x, y, gy: gy / x),  # gx = gy / x
             "Elementwise natural logarithm (x > 0).", _POSITIVE_EXAMPLES,
             jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx / x))
SQRT = _unary("sqrt", ufunc_kernel(np.sqrt), lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy / (y * 2.0)),  # gx = gy / (2 sqrt(x))
    "Elementwise square root (x > 0 for a finite gradient).", _POSITIVE_EXAMPLES,
    jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx / (y * 2.0)))
TANH = _unary("tanh", ufunc_kernel(np.tanh), lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (1.0 - ops.square(y))),  # gx = gy * (1 - tanh(x)^2)
    "Elementwise hyperbolic tangent.", jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * (1.0 - ops.square(y))))
SIGMOID = _unary("sigmoid", lambda ctx: _sigmoid, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (y * (1.0 - y))),  # gx = gy * s * (1 - s)
    "Elementwise logistic function 1 / (1 + e ** -x), computed without overflow.",
    jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * (y * (1.0 - y))))
SIN = _unary("sin", ufunc_kernel(np.sin), lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.cos(x)),  # gx = gy cos x
             "Elementwise sine.", jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * ops.cos(x)))
COS = _unary("cos", ufunc_kernel(np.cos), lambda ctx: ctx.grad_graph(lambda x, y, gy: -(gy * ops.sin(x))),  # -gy sin x
             "Elementwise cosine.", jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: -(dx * ops.sin(x))))
# The mask reads the output y (y > 0 exactly where x > 0), so the pre-activation x need not be kept
# for the backward pass: a fused `add + relu` then has a single output and a planned buffer.
RELU = _unary("relu", _relu_kernel, lambda ctx: ctx.grad_graph(
    lambda x, y, gy: ops.relu_grad_internal(y, gy)),  # gx = gy where x > 0 (equivalently y > 0), else 0
    "Elementwise max(x, 0). Its derivative at 0 is taken as 0.",
    [Example(["f32[3, 4]"], min_abs=0.05), Example(["f64[6]"], min_abs=0.05)], float_only=False,
    jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: ops.relu_grad_internal(y, dx)))


# relu_grad_internal(x, gy) = gy * (x > 0); relu's GradientFn passes relu's output as x (same mask)
#   second order (seed 000 §5): g_x = 0 (zero away from the kink, and taken as zero at it), g_gy = relu_grad_internal(x, ggx)
def _relu_grad_shape(ctx: NodeContext):
    x, gy = ctx.input_types
    if x != gy:
        raise ctx.error(f"x and gy must have one type, got {x} and {gy}")
    return [gy]


def _relu_grad_kernel(ctx: NodeContext) -> Callable:
    t = ctx.input_types[0]
    dtype = t.dtype.np
    zero = np.zeros((), dtype)
    multiply, greater, empty = np.multiply, np.greater, np.empty

    def kernel(x: np.ndarray, gy: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return multiply(gy, greater(x, zero), out if out is not None else empty(t.shape, dtype))
    return kernel


RELU_GRAD = OpSchema(
    "relu_grad_internal",
    inputs=("x", "gy"),
    shape_infer=_relu_grad_shape,
    kernels={"cpu": _relu_grad_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, gy, y, ggx: [None, ops.relu_grad_internal(x, ggx)]),
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="gy where x > 0, else 0: the gradient of relu.",
    examples=[Example(["f32[3, 4]", "f32[3, 4]"], min_abs=0.05), Example(["f64[5]", "f64[5]"], min_abs=0.05)],
)

SCHEMAS = [ADD, SUB, MUL, DIV, NEG, SQUARE, EXP, LOG, SQRT, TANH, SIGMOID, SIN, COS, RELU, RELU_GRAD]
