"""Elementwise special functions and smooth activations: erf, erfc, gelu, silu, log1p, expm1, logaddexp.

``erf`` and ``erfc`` run ``scipy.special`` (imported when a graph using them is
compiled, never at load); float16 and bfloat16 compute in float32 and round
once. ``gelu`` is exact by default, ``x/2 erfc(-x/sqrt 2)`` (the same function
as torch's ``x/2 (1 + erf(x/sqrt 2))``, without its cancellation for negative
``x``), or torch's tanh approximation with ``approximate="tanh"``.

Every GradientFn is written with ops of this pack (``exp``, ``sigmoid``,
``tanh``, ``erf``, arithmetic), each closed itself, so all of these are
differentiable to any order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from ._shapes import float_broadcast, float_unary, unbroadcast
from .elementwise import ufunc_kernel

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
TANH_C = math.sqrt(2.0 / math.pi)  # torch's gelu(approximate="tanh") constants
TANH_A = 0.044715

_EXAMPLES = [Example(["f32[3, 4]"], low=-2.5, high=2.5), Example(["f64[7]"], low=-3.0, high=3.0), Example(["f32[]"])]


def _out(t: TensorType, out: np.ndarray | None) -> np.ndarray:
    return out if out is not None else np.empty(t.shape, t.dtype.np)


ArrayFn = Callable[[np.ndarray], np.ndarray]


def _computed_wide(fn: Callable[[NodeContext], ArrayFn]) -> Callable[[NodeContext], Callable]:
    """A kernel builder around ``fn(ctx)(x) -> array``: half precision computes in float32 and rounds once into
    ``out``; other floats compute in their own dtype. ``out`` may be ``x`` (the result is complete before
    the copy)."""
    def build(ctx: NodeContext) -> Callable:
        (t,) = ctx.output_types
        f = fn(ctx)
        wide = np.float32 if t.dtype.itemsize == 2 else t.dtype.np

        def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            y = f(np.asarray(x, wide))
            if out is None and y.__class__ is np.ndarray and y.dtype == t.dtype.np:
                return y  # a new array of the output's type already (a 0-d input gives a numpy scalar: copied below)
            out = _out(t, out)
            np.copyto(out, y, casting="unsafe")
            return out
        return kernel
    return build


def _scipy(name: str) -> Callable[[NodeContext], Callable[[np.ndarray], np.ndarray]]:
    def fn(ctx: NodeContext) -> Callable[[np.ndarray], np.ndarray]:
        from scipy import special  # at compile time only: loading frame stays free of scipy

        return getattr(special, name)
    return fn


def _unary(name: str, kernel: Callable, gradient: Callable, doc: str, examples: list[Example] = _EXAMPLES,
           attrs: dict[str, AttrSpec] | None = None, shape_infer: Callable = float_unary) -> OpSchema:
    return OpSchema(name, inputs=("x",), attrs=attrs, shape_infer=shape_infer, kernels={"cpu": kernel},
                    gradient=gradient, traits=("elementwise", "accepts_out", "any_shape_gradient"), doc=doc, examples=examples)


# erf(x)                      gx = gy * 2/sqrt(pi) * exp(-x^2)
ERF = _unary("erf", _computed_wide(_scipy("erf")), lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (ops.exp(-ops.square(x)) * TWO_OVER_SQRT_PI)),
    "The error function 2/sqrt(pi) * integral_0^x exp(-t^2) dt, elementwise (scipy.special.erf).")

# erfc(x) = 1 - erf(x)        gx = -gy * 2/sqrt(pi) * exp(-x^2)
ERFC = _unary("erfc", _computed_wide(_scipy("erfc")), lambda ctx: ctx.grad_graph(
    lambda x, y, gy: gy * (ops.exp(-ops.square(x)) * -TWO_OVER_SQRT_PI)),
    "The complementary error function 1 - erf(x), accurate where erf(x) is close to 1 (scipy.special.erfc).",
    [Example(["f32[3, 4]"], low=-2.5, high=2.5), Example(["f64[7]"], low=-3.0, high=6.0)])


# -- gelu -------------------------------------------------------------------------------------------
def _gelu_shape(ctx: NodeContext) -> list[TensorType]:
    if ctx.attrs["approximate"] not in ("none", "tanh"):
        raise ctx.error(f"approximate must be 'none' (exact, with erf) or 'tanh' (torch's tanh approximation), "
                        f"got {ctx.attrs['approximate']!r}")
    return float_unary(ctx)


def _gelu_fn(ctx: NodeContext) -> Callable[[np.ndarray], np.ndarray]:
    if ctx.attrs["approximate"] == "tanh":
        def gelu_tanh(x: np.ndarray) -> np.ndarray:  # torch's order of operations, so the roundings agree
            t = np.tanh((x + x * x * x * TANH_A) * TANH_C)
            return x * 0.5 * (t + 1.0)
        return gelu_tanh
    from scipy import special

    def gelu(x: np.ndarray) -> np.ndarray:
        return special.erfc(x * -INV_SQRT_2) * (x * 0.5)  # x Phi(x), Phi(x) = erfc(-x/sqrt 2) / 2
    return gelu


def _gelu_gradient(ctx: NodeContext):
    if ctx.attrs["approximate"] == "tanh":
        # d/dx x/2 (1 + t), t = tanh(c (x + a x^3)):  (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 a x^2)
        def grad_tanh(x, y, gy):
            x2 = ops.square(x)
            t = ops.tanh(x * (x2 * TANH_A + 1.0) * TANH_C)
            return gy * ((t + 1.0) * 0.5 + x * (1.0 - ops.square(t)) * ((x2 * (3.0 * TANH_A) + 1.0) * (0.5 * TANH_C)))
        return ctx.grad_graph(grad_tanh)

    # d/dx x Phi(x) = Phi(x) + x phi(x),  Phi(x) = (1 + erf(x/sqrt 2))/2,  phi(x) = exp(-x^2/2)/sqrt(2 pi)
    def grad(x, y, gy):
        cdf = (ops.erf(x * INV_SQRT_2) + 1.0) * 0.5
        return gy * (cdf + x * (ops.exp(ops.square(x) * -0.5) * INV_SQRT_2PI))
    return ctx.grad_graph(grad)


GELU = _unary(
    "gelu", _computed_wide(_gelu_fn), _gelu_gradient,
    "Gaussian error linear unit x * Phi(x) (Phi the standard normal CDF), exact by default; "
    "approximate='tanh' gives x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch.",
    [*_EXAMPLES, Example(["f32[3, 4]"], {"approximate": "tanh"}, low=-2.5, high=2.5),
     Example(["f64[7]"], {"approximate": "tanh"}, low=-3.0, high=3.0)],
    attrs={"approximate": AttrSpec("str", "none", "'none' (exact, with erf) or 'tanh' (the tanh approximation)")},
    shape_infer=_gelu_shape)


# silu(x) = x sigmoid(x)      gx = gy * s (1 + x (1 - s)),  s = sigmoid(x)
def _silu_fn(ctx: NodeContext) -> Callable[[np.ndarray], np.ndarray]:
    def silu(x: np.ndarray) -> np.ndarray:
        # sigmoid from e = exp(-|x|) <= 1: 1/(1+e) for x >= 0, e/(1+e) below, so no overflow and full relative
        # accuracy in the negative tail (0.5 (1 + tanh(x/2)) rounds to 0 there, while x sigmoid(x) is not 0)
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, x, x * e) / (e + 1.0)
    return silu


def _silu_gradient(ctx: NodeContext):
    def grad(x, y, gy):
        s = ops.sigmoid(x)
        return gy * (s * (x * (1.0 - s) + 1.0))
    return ctx.grad_graph(grad)


SILU = _unary("silu", _computed_wide(_silu_fn), _silu_gradient,
    "Sigmoid linear unit (swish) x * sigmoid(x), elementwise, without overflow for large |x|.")

# log1p(x) = log(1 + x)       gx = gy / (1 + x)
LOG1P = _unary("log1p", ufunc_kernel(np.log1p), lambda ctx: ctx.grad_graph(lambda x, y, gy: gy / (x + 1.0)),
               "log(1 + x) elementwise, accurate for small |x| (x > -1).",
               [Example(["f32[3, 4]"], low=-0.5, high=2.0), Example(["f64[7]"], low=-0.9, high=3.0),
                Example(["f32[]"], low=-0.5, high=0.5)])

# expm1(x) = e^x - 1          gx = gy * (y + 1)
EXPM1 = _unary("expm1", ufunc_kernel(np.expm1), lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * (y + 1.0)),
               "e ** x - 1 elementwise, accurate for small |x|.")


# logaddexp(a, b) = log(e^a + e^b)     ga = gy * sigmoid(a - b), gb = gy * sigmoid(b - a)
def _logaddexp_gradient(ctx: NodeContext):
    def grad(a, b, y, gy):
        d = a - b
        return [unbroadcast(gy * ops.sigmoid(d), a), unbroadcast(gy * ops.sigmoid(-d), b)]
    return ctx.grad_graph(grad)


LOGADDEXP = OpSchema(
    "logaddexp",
    inputs=("a", "b"),
    shape_infer=float_broadcast,
    kernels={"cpu": ufunc_kernel(np.logaddexp)},
    gradient=_logaddexp_gradient,
    traits=("elementwise", "broadcasting", "accepts_out", "commutative", "any_shape_gradient"),
    doc="log(e ** a + e ** b) elementwise with numpy broadcasting, without overflow (floating inputs). "
        "Gradients gy * sigmoid(a - b) and gy * sigmoid(b - a).",
    examples=[Example(["f32[3, 4]", "f32[3, 4]"], low=-3.0, high=3.0),
              Example(["f64[2, 3]", "f64[3]"], low=-3.0, high=3.0, note="broadcast a row"),
              Example(["f64[2, 3]", "f64[]"], note="scalar operand")],
)

SCHEMAS = [ERF, ERFC, GELU, SILU, LOG1P, EXPM1, LOGADDEXP]
