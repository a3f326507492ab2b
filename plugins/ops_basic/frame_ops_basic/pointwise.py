"""Elementwise ops with kinks, ties and domains: maximum, minimum, abs, sign, clip, pow, floor, ceil and round.

Where the derivative does not exist the GradientFn takes a documented value,
the same as torch's, so both agree everywhere:

- ``maximum``/``minimum`` on a tie (``a == b``) split the gradient evenly:
  ``ga = gb = gy / 2`` (a symmetric subgradient; the two shares always sum to
  ``gy``). NaN propagates forward; where either input is NaN the whole gradient
  goes to ``b``.
- ``abs`` at ``x = 0`` has gradient 0 (``sign(0) = 0``); ``sign``'s own gradient
  is 0 everywhere (0 away from 0, taken as 0 at the jump); so is that of ``floor``,
  ``ceil`` and ``round`` (constant between whole numbers, or halves; the jumps taken as 0).
- ``clip`` passes the gradient where ``min <= x <= max``, bounds included, and
  gives 0 strictly outside.
- ``pow(a, b) = a ** b``: ``ga = b a^(b-1)``, taken as 0 where ``b == 0`` (so
  ``0 ** 0`` has gradient 0); ``gb = a^b log(a)``, taken as 0 where ``a == 0``.
  For a negative base ``a^b`` is real only for integral ``b`` (NaN otherwise,
  as numpy): ``ga`` is finite there and ``gb`` is NaN, since ``a^b`` is not
  differentiable in ``b`` for ``a < 0`` (torch agrees on all of this except
  ``0 ** b`` with ``b < 0``, whose forward is infinite anyway).

Every GradientFn is built from ops that are closed themselves (the masks come
from comparisons, which carry no gradient), so all of these are closed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, constant, ops

from ._shapes import broadcast, float_broadcast, float_unary, numeric_unary, unbroadcast
from .compare import zero_like
from .elementwise import ufunc_kernel

_BINARY_EXAMPLES = [
    Example(["f32[3, 4]", "f32[3, 4]"]),
    Example(["f32[2, 3, 4]", "f32[4]"], note="broadcast a row"),
    Example(["f64[3, 1]", "f64[1, 4]"], note="broadcast both ways"),
    Example(["f64[2, 3]", "f64[]"], note="scalar operand"),
    Example(["i32[5]", "i32[5]"], low=-9.0, high=9.0, note="integers (no gradient)"),
]


def _extremum_gradient(wins: str, wins_or_ties: str) -> Callable:
    def gradient(ctx: NodeContext):
        def grad(a, b, y, gy):
            if not gy.dtype.is_float:
                return [None, None]
            # a's share: 1 where a wins, 1/2 on a tie, 0 where b wins; b gets the rest
            share = (ops.cast(getattr(ops, wins)(a, b), to=gy.dtype) + ops.cast(getattr(ops, wins_or_ties)(a, b),
                                                                                 to=gy.dtype)) * 0.5
            ga = gy * share
            return [unbroadcast(ga, a), unbroadcast(gy - ga, b)]
        return ctx.grad_graph(grad)
    return gradient


def _out_keyword(ufunc: np.ufunc) -> Callable[[NodeContext], Callable]:
    """The binary ufunc with ``out`` passed by keyword (numpy deprecates a positional out for maximum/minimum)."""
    def build(ctx: NodeContext) -> Callable:
        (y,) = ctx.output_types

        def kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            return ufunc(a, b, out=out if out is not None else np.empty(y.shape, y.dtype.np))
        return kernel
    return build


def _extremum(name: str, ufunc: np.ufunc, wins: str, wins_or_ties: str, doc: str) -> OpSchema:
    return OpSchema(
        name,
        inputs=("a", "b"),
        shape_infer=broadcast,
        kernels={"cpu": _out_keyword(ufunc)},
        gradient=_extremum_gradient(wins, wins_or_ties),
        # not "commutative": on a tie of -0.0 and +0.0 numpy returns b, so op(a, b) and op(b, a) differ in the
        # sign of zero (1 / max(a, b) is +inf or -inf), and CSE would merge them
        traits=("elementwise", "broadcasting", "accepts_out", "any_shape_gradient"),
        doc=doc + " numpy broadcasting; NaN propagates. Gradient to the winner; a tie splits it evenly (gy/2 each).",
        examples=_BINARY_EXAMPLES,
    )


# maximum(a, b)              ga = gy * ([a > b] + [a >= b]) / 2, gb = gy - ga (a tie splits gy evenly)
MAXIMUM = _extremum("maximum", np.maximum, "greater", "greater_equal", "The larger of a and b elementwise.")
# minimum(a, b)              ga = gy * ([a < b] + [a <= b]) / 2, gb = gy - ga (a tie splits gy evenly)
MINIMUM = _extremum("minimum", np.minimum, "less", "less_equal", "The smaller of a and b elementwise.")


# -- abs and sign ----------------------------------------------------------------------------------
_UNARY_EXAMPLES = [Example(["f32[3, 4]"], min_abs=0.05), Example(["f64[6]"], min_abs=0.05), Example(["f32[]"], min_abs=0.05),
                   Example(["i64[5]"], low=-9.0, high=9.0, note="integers (no gradient)")]


def _unary(name: str, ufunc: np.ufunc, gradient: Callable, doc: str) -> OpSchema:
    return OpSchema(
        name,
        inputs=("x",),
        shape_infer=numeric_unary,
        kernels={"cpu": ufunc_kernel(ufunc)},
        gradient=gradient,
        traits=("elementwise", "accepts_out", "any_shape_gradient"),
        doc=doc,
        examples=_UNARY_EXAMPLES,
    )


def _abs_gradient(ctx: NodeContext):
    if not ctx.input_types[0].dtype.is_float:
        return ctx.grad_graph(lambda x, y, gy: None)
    return ctx.grad_graph(lambda x, y, gy: gy * ops.sign(x))


# abs(x)                     gx = gy * sign(x); 0 at the kink x = 0 (sign(0) = 0)
ABS = _unary("abs", np.absolute, _abs_gradient,
             "|x| elementwise. Its derivative at the kink x = 0 is taken as 0 (as torch).")
# sign(x)                    gx = 0 (0 away from 0; the jump at 0 is taken as 0 too)
SIGN = _unary("sign", np.sign, lambda ctx: ctx.grad_graph(lambda x, y, gy: None),
              "-1, 0 or 1 by the sign of x (NaN stays NaN). Its gradient is 0 everywhere, the jump at 0 included.")


# -- clip -----------------------------------------------------------------------------------------
def _bounds(ctx: NodeContext) -> tuple[float | None, float | None]:
    (x,) = ctx.input_types
    low, high = ctx.attrs["min"], ctx.attrs["max"]
    for label, bound in (("min", low), ("max", high)):
        if bound is None:
            continue
        if math.isnan(bound):
            raise ctx.error(f"{label} is NaN; give a number or leave it out (no bound)")
        if x.dtype.is_int and not (bound.is_integer() and np.iinfo(x.dtype.np).min <= bound <= np.iinfo(x.dtype.np).max):
            raise ctx.error(f"{label}={bound!r} is not a whole number in the range of {x.dtype}, the input's dtype; "
                            "give a whole number in range, or cast x to a float dtype first")
    if low is not None and high is not None and low > high:
        raise ctx.error(f"min={low!r} is greater than max={high!r}; give min <= max")
    return low, high


def _rounded(bound: float | None, dtype: np.dtype) -> np.ndarray | None:
    """``bound`` rounded to ``dtype`` (0-d); past the dtype's range it becomes +-inf, the documented rule."""
    if bound is None:
        return None
    with np.errstate(over="ignore"):
        return np.array(bound, dtype)


def _clip_shape(ctx: NodeContext) -> list[TensorType]:
    (t,) = numeric_unary(ctx)
    _bounds(ctx)
    return [t]


def _clip_kernel(ctx: NodeContext) -> Callable:
    (y,) = ctx.output_types
    dtype = y.dtype.np
    low, high = (_rounded(b, dtype) for b in _bounds(ctx))  # the dtype's rounding, as the gradient's

    def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(y.shape, dtype)
        if low is None and high is None:
            np.copyto(out, x)
            return out
        return np.clip(x, low, high, out=out)
    return kernel


def _clip_gradient(ctx: NodeContext):
    (x_t,) = ctx.input_types
    low, high = (_rounded(b, x_t.dtype.np) for b in _bounds(ctx))

    def grad(x, y, gy):
        if not gy.dtype.is_float:
            return None
        zero = zero_like(gy)
        g = gy
        if low is not None:
            g = ops.where(x < constant(low), zero, g)
        if high is not None:
            g = ops.where(x > constant(high), zero, g)
        return g
    return ctx.grad_graph(grad)


# clip(x; min, max)          gx = gy where min <= x <= max (bounds included), else 0
CLIP = OpSchema(
    "clip",
    inputs=("x",),
    attrs={"min": AttrSpec("float", None, "lower bound (none: unbounded below)"),
           "max": AttrSpec("float", None, "upper bound (none: unbounded above)")},
    shape_infer=_clip_shape,
    kernels={"cpu": _clip_kernel},
    gradient=_clip_gradient,
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="x limited to [min, max] (either bound may be left out; bounds are rounded to x's dtype). "
        "Gradient gy where min <= x <= max, bounds included (as torch), 0 outside.",
    examples=[Example(["f32[3, 4]"], {"min": -0.5, "max": 0.5}), Example(["f64[8]"], {"min": -0.25}),
              Example(["f64[2, 3]"], {"max": 0.0}), Example(["i32[6]"], {"min": -2.0, "max": 3.0}, low=-9, high=9)],
)


# -- pow ------------------------------------------------------------------------------------------
def _pow_gradient(ctx: NodeContext):
    def grad(a, b, y, gy):
        # b a^(b-1) with b = 0 replaced by 1 inside the power, so 0 ** 0 computes no 0 ** -1 to mask afterwards
        one = constant(np.ones((), gy.dtype.np))
        b_is_zero = ops.equal(b, 0.0)
        ga = gy * ops.where(b_is_zero, zero_like(gy), b * ops.pow(a, ops.where(b_is_zero, one, b) - 1.0))
        # log is taken of a where a > 0 and of 1 elsewhere, so that x ** 3 on negative x computes no log of a
        # negative number (no warning, nothing to mask); the exponent's NaN for a < 0 is put in explicitly
        log_a = ops.log(ops.where(a > 0.0, a, one))  # log a where a > 0, else 0
        gb = gy * ops.where(a < 0.0, constant(np.full((), np.nan, gy.dtype.np)), y * log_a)
        return [unbroadcast(ga, a), unbroadcast(gb, b)]
    return ctx.grad_graph(grad)


# pow(a, b) = a ** b         ga = gy b a^(b-1) (0 where b = 0), gb = gy a^b log a (0 where a = 0, NaN where a < 0)
POW = OpSchema(
    "pow",
    inputs=("a", "b"),
    shape_infer=float_broadcast,
    kernels={"cpu": ufunc_kernel(np.power)},
    gradient=_pow_gradient,
    traits=("elementwise", "broadcasting", "accepts_out", "any_shape_gradient"),
    doc="a ** b elementwise (floating inputs, numpy broadcasting). A negative base needs an integral exponent "
        "(NaN otherwise); there the exponent's gradient is NaN. See the module docstring for 0 ** b.",
    examples=[
        Example(["f32[3, 4]", "f32[3, 4]"], low=0.5, high=2.0),
        Example(["f32[2, 3, 4]", "f32[4]"], low=0.5, high=2.0, note="broadcast a row"),
        Example(["f64[2, 3]", "f64[]"], low=0.5, high=2.0, note="scalar exponent"),
        Example(["f64[]", "f64[5]"], low=0.5, high=2.0, note="scalar base"),
    ],
)


# -- rounding to integers -------------------------------------------------------------------------------
def _rounding(name: str, ufunc: np.ufunc, doc: str, low: float, high: float) -> OpSchema:
    # the examples keep clear of the jumps (integers for floor/ceil, halves for round), where central differences
    # would see a step; between the jumps the function is constant and its gradient is exactly 0
    return OpSchema(
        name,
        inputs=("x",),
        shape_infer=float_unary,
        kernels={"cpu": ufunc_kernel(ufunc)},
        gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: None),
        traits=("elementwise", "accepts_out", "any_shape_gradient"),
        doc=doc + " Floating input (an integer tensor is already whole: no op needed). Its gradient is 0 "
                  "everywhere, the jumps included (as torch).",
        examples=[Example(["f32[3, 4]"], low=low, high=high), Example(["f64[6]"], low=low - 2.0, high=high - 2.0),
                  Example(["f64[]"], low=low + 3.0, high=high + 3.0)],
    )


# floor(x), ceil(x), round(x)   gx = 0 (constant between the jumps; the jumps are taken as 0 too)
FLOOR = _rounding("floor", np.floor, "The largest whole number <= x, elementwise (NaN and infinities stay).", 0.1, 0.9)
CEIL = _rounding("ceil", np.ceil, "The smallest whole number >= x, elementwise (NaN and infinities stay).", 0.1, 0.9)
ROUND = _rounding("round", np.rint, "x rounded to the nearest whole number, halves to the even one (0.5 -> 0, "
                  "1.5 -> 2, -2.5 -> -2: IEEE 754's default, numpy's, torch's and ONNX Round's), elementwise.",
                  0.55, 1.45)

SCHEMAS = [MAXIMUM, MINIMUM, ABS, SIGN, CLIP, POW, FLOOR, CEIL, ROUND]
