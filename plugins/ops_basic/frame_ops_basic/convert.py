"""Dtype conversion: ``cast(x; to)`` between any two dtypes, and ``one_hot(indices; depth, dtype)``.

``cast`` follows numpy's ``astype`` where that is well defined and refuses,
at run time with a ``DataError``, what numpy would turn into an
unspecified value:

- float -> float rounds to nearest (ties to even), once; values beyond the
  target's range become +-inf, NaN stays NaN. The rounding to bfloat16 is frame's
  own (``to_bfloat16``): torch and some ml_dtypes versions go through float32 and
  can round twice, which frame does not;
- float -> integer truncates toward zero (``2.7 -> 2``, ``-2.7 -> -2``, as numpy,
  C and torch do; round first with your own ops for another rule); NaN, +-inf and
  values whose truncation does not fit the integer type raise ``DataError``;
- integer -> narrower integer raises ``DataError`` when a value does not fit
  (numpy would wrap around silently); integer -> float rounds to nearest;
- anything -> bool is ``x != 0`` (NaN is true); bool -> number is 0 or 1.

Gradients: between two floating dtypes the gradient is ``gy`` cast back to
the input's dtype; an integer or boolean input carries none, and a cast to an
integer or boolean dtype has no floating output, so it is never on the
gradient chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import AttrSpec, DataError, DType, Example, NodeContext, OpSchema, TensorType, bfloat16, bool_, ops


def _cast_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    return [x.with_dtype(ctx.attrs["to"])]


def _first_bad(bad: np.ndarray, a: np.ndarray) -> tuple[Any, tuple[int, ...]]:
    index = np.unravel_index(int(np.argmax(bad)), a.shape) if a.ndim else ()
    return a[index], tuple(int(i) for i in index)


def _range_check(src: DType, dst: DType) -> Callable[[np.ndarray], None] | None:
    """A function raising ``DataError`` for values that ``src -> dst`` cannot represent, or None if all fit."""
    if not dst.is_int or (src.is_int and src.itemsize <= dst.itemsize) or src is bool_:
        return None
    info = np.iinfo(dst.np)
    low, high = float(info.min), float(info.max) + 1.0  # both exact in float64: -2^(b-1) and 2^(b-1)

    def check(a: np.ndarray) -> None:
        if src.is_float:
            t = np.trunc(a.astype(np.float64))
            with np.errstate(invalid="ignore"):
                bad = ~((t >= low) & (t < high))  # NaN fails both comparisons
        else:
            bad = (a < info.min) | (a > info.max)
        if bad.any():
            value, where = _first_bad(bad, a)
            what = "after truncation toward zero; NaN and infinities have no integer value" if src.is_float else ""
            raise DataError(
                f"cast from {src} to {dst}: the value {value!s} at index {list(where)} does not fit in {dst} "
                f"(valid {info.min}..{info.max}{', ' + what if what else ''}); clip the values first (ops.clip)")
    return check


def _float32_to_bfloat16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 rounded to nearest, ties to even (the top 16 bits of the float32 pattern)."""
    bits = np.require(a, np.float32, "C").reshape(-1).view(np.uint32)  # 1-D: np.require keeps rank 0
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))) >> 16  # carries into the exponent: up to inf
    nan = np.isnan(a).reshape(-1)
    if nan.any():  # keep NaN a (quiet) NaN: the rounding carry could turn a small payload into inf
        rounded[nan] = (bits[nan] >> 16) | 0x0040
    return rounded.astype(np.uint16).view(bfloat16.np).reshape(np.shape(a))


def _float64_to_float32_odd(a: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd: truncate toward zero and set the last bit when inexact.

    Rounding to odd into a format with at least two more bits than the final one makes the second
    rounding (float32 -> bfloat16, 24 against 8 bits) give the once-rounded result.
    """
    with np.errstate(over="ignore"):
        t = a.astype(np.float32)
    back = t.astype(np.float64)
    inexact = (back != a) & ~np.isnan(a)
    if not inexact.any():
        return t
    overshot = inexact & (np.abs(back) > np.abs(a))  # nearest rounding went away from zero: step back
    t[overshot] = np.nextafter(t[overshot], np.float32(0))
    bits = t.view(np.uint32)
    bits[inexact] |= 1
    return t


def _int_to_float64_sticky(a: np.ndarray) -> np.ndarray:
    """Integers -> float64 exactly, or for |v| >= 2**53 keeping a sticky bit below bfloat16's rounding point."""
    if a.dtype.itemsize < 8:
        return a.astype(np.float64)
    magnitude = np.abs(a.astype(np.int64)).view(np.uint64)  # |int64 min| wraps to 2**63 as uint64: right
    wide = magnitude >= np.uint64(2**53)
    if wide.any():
        low = magnitude & np.uint64(0xFFF)
        sticky = (low != 0).astype(np.uint64) << np.uint64(11)
        magnitude = np.where(wide, (magnitude & ~np.uint64(0xFFF)) | sticky, magnitude)
    return np.where(a < 0, -magnitude.astype(np.float64), magnitude.astype(np.float64))


def to_bfloat16(a: np.ndarray) -> np.ndarray:
    """``a`` (any float, integer or bool array) as bfloat16, rounded once to nearest, ties to even.

    Independent of the installed ``ml_dtypes``: its float64 -> bfloat16 cast rounded through
    float32 (twice) before 0.7 and once since, and torch rounds twice.
    """
    kind = a.dtype.kind
    if a.dtype == bfloat16.np:
        return a.copy()
    if kind == "b" or (kind == "f" and a.dtype.itemsize <= 2):  # exact in float32
        return _float32_to_bfloat16(a.astype(np.float32))
    if kind == "f" and a.dtype.itemsize == 4:
        return _float32_to_bfloat16(a)
    wide = _int_to_float64_sticky(a) if kind in "iu" else a.astype(np.float64)
    return _float32_to_bfloat16(_float64_to_float32_odd(wide))


def _cast_kernel(ctx: NodeContext) -> Callable:
    (x,) = ctx.input_types
    dst = ctx.attrs["to"]
    check = _range_check(x.dtype, dst)

    def kernel(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if check is not None:
            check(a)
        if dst is bfloat16:
            if out is None:
                return to_bfloat16(a)
            np.copyto(out, to_bfloat16(a))
            return out
        with np.errstate(over="ignore"):  # overflowing to +-inf is the documented float rule, not an accident
            if out is None:
                return a.astype(dst.np)  # always a fresh array, also when the dtype does not change
            np.copyto(out, a, casting="unsafe")
        return out
    return kernel


def _cast_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    if x.dtype.is_float and ctx.attrs["to"].is_float:
        return ctx.grad_graph(lambda x_, y, gy: ops.cast(gy, to=x.dtype))
    return ctx.grad_graph(lambda x_, y, gy: None)  # integers and bools carry no gradient


# cast(x; to)                gx = cast(gy, to=x.dtype) between floats; none from or to integers and bools
CAST = OpSchema(
    "cast",
    inputs=("x",),
    attrs={"to": AttrSpec("dtype", doc="the output dtype (any of f16, bf16, f32, f64, i32, i64, bool)")},
    shape_infer=_cast_shape,
    kernels={"cpu": _cast_kernel},
    gradient=_cast_gradient,
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="x converted to dtype `to`. float -> int truncates toward zero; values an integer type cannot hold "
        "(NaN, inf, overflow) raise DataError; anything -> bool is x != 0. Gradient: gy cast back, between floats.",
    examples=[
        Example(["f32[3, 4]"], {"to": "f64"}),
        Example(["f16[5]"], {"to": "f64"}),
        Example(["f64[2, 3]"], {"to": "f64"}, note="same dtype: a copy"),
        Example(["f32[3, 4]"], {"to": "i32"}, low=-100.0, high=100.0, note="truncates toward zero"),
        Example(["i64[6]"], {"to": "f32"}, low=-50.0, high=50.0),
        Example(["i64[6]"], {"to": "i32"}, low=-50.0, high=50.0),
        Example(["bool[2, 3]"], {"to": "f32"}),
        Example(["f64[4]"], {"to": "bool"}),
    ],
)


# -- one_hot --------------------------------------------------------------------------------------
def _one_hot_shape(ctx: NodeContext) -> list[TensorType]:
    (indices,) = ctx.input_types
    depth = ctx.attrs["depth"]
    if not indices.dtype.is_int:
        raise ctx.error(f"indices must be integers, got {indices}; cast them (ops.cast(x, to='i64'))")
    if depth < 1:
        raise ctx.error(f"depth (the number of classes) must be at least 1, got {depth}")
    return [TensorType(ctx.attrs["dtype"], indices.shape + (depth,))]


def check_indices(indices: np.ndarray, count: int, what: str) -> None:
    """``DataError`` naming the first of ``indices`` outside ``0..count-1`` (``what`` names them: 'label')."""
    bad = (indices < 0) | (indices >= count)
    if bad.any():
        value, where = _first_bad(bad, indices)
        raise DataError(f"{what} {int(value)} at position {list(where)} is out of range: valid {what} values are "
                        f"0..{count - 1} ({count} classes)")


def _one_hot_kernel(ctx: NodeContext) -> Callable:
    (y,) = ctx.output_types
    depth = ctx.attrs["depth"]
    classes = np.arange(depth)

    def kernel(indices: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        check_indices(indices, depth, "index")
        if out is None:
            out = np.empty(y.shape, y.dtype.np)
        np.copyto(out, np.equal(indices[..., None], classes), casting="unsafe")
        return out
    return kernel


# one_hot(indices; depth, dtype): integer indices carry no gradient (and an integer input is never on the chain)
ONE_HOT = OpSchema(
    "one_hot",
    inputs=("indices",),
    attrs={"depth": AttrSpec("int", doc="the number of classes: the size of the new last axis"),
           "dtype": AttrSpec("dtype", "f32", "the output dtype")},
    shape_infer=_one_hot_shape,
    kernels={"cpu": _one_hot_kernel},
    not_differentiable="integer indices carry no gradient",
    traits=("accepts_out",),
    doc="y[..., k] = 1 where indices[...] == k, else 0; a new last axis of size `depth`. An index outside "
        "0..depth-1 raises DataError at run time.",
    examples=[Example(["i64[4]"], {"depth": 5}, low=0.0, high=4.0),
              Example(["i32[2, 3]"], {"depth": 3, "dtype": "f64"}, low=0.0, high=2.0)],
)

SCHEMAS = [CAST, ONE_HOT]
