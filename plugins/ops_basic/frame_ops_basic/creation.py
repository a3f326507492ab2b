"""Creation ops: zeros, ones, full, arange, linspace, eye, zeros_like and ones_like.

They follow numpy: the same argument names, the same default dtypes (float64
for floats; ``arange`` and ``full`` give int64 when every number given is an
int) and the same element counts (``arange``'s ``ceil((stop - start) / step)``
with numpy's rules, ``linspace``'s ``num``). Floating values are computed in
float64 (int64 for integers) and rounded once to ``dtype``. The first six have
no inputs (an empty gradient, like ``constant``; the compile pipeline folds
them into constants); ``zeros_like``/``ones_like`` read only ``x``'s type, so
``x``'s gradient through them is zero.

The ``ops`` functions take numpy's positional arguments (``ops.arange(5)``,
``ops.zeros((2, 3), dtype="f32")``); the nodes hold them as attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import AttrSpec, DType, Example, NodeContext, OpSchema, TensorType, apply, float64, int64

_DTYPE = AttrSpec("dtype", None, "the output dtype (default: numpy's choice, float64 for floats)")
_SHAPE = AttrSpec("shape", doc="the output shape")


def _no_gradient(ctx: NodeContext):
    return ctx.grad_graph(lambda *_: [])  # no inputs, so no gradients


def _whole(ctx: NodeContext, label: str, value: float, dtype: DType) -> None:
    """Refuse a value an integer ``dtype`` cannot hold exactly."""
    if not math.isfinite(value):
        raise ctx.error(f"{label}={value!r} is not finite; give a finite number")
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        if float(value) != int(value) or not info.min <= int(value) <= info.max:
            raise ctx.error(f"{label}={value!r} is not a whole number in the range of {dtype} ({info.min}.."
                            f"{info.max}); give a whole number, or a float dtype (dtype='f64')")


def _float_default(ctx: NodeContext, *values: Any) -> DType:
    """The attribute ``dtype``, else numpy's choice: int64 when every value is an int, else float64."""
    chosen = ctx.attrs["dtype"]
    if chosen is not None:
        return chosen
    return int64 if values and all(isinstance(v, int) for v in values) else float64


def _filled_kernel(ctx: NodeContext, value: float) -> Callable:
    (t,) = ctx.output_types
    array = np.full(t.shape, value, t.dtype.np)

    def kernel(*like: np.ndarray) -> np.ndarray:  # zeros_like/ones_like read only their input's type
        return array.copy()  # a fresh array per run: the caller may write into what run returns
    return kernel


# -- zeros, ones, full ----------------------------------------------------------------------------------
def _fill_schema(name: str, value: float, doc: str) -> OpSchema:
    def shape(ctx: NodeContext) -> list[TensorType]:
        return [TensorType(ctx.attrs["dtype"] or float64, ctx.attrs["shape"])]

    def frontend(shape: Any, dtype: Any = None) -> Any:
        return apply(name, shape=shape, dtype=dtype)

    return OpSchema(name, inputs=(), attrs={"shape": _SHAPE, "dtype": _DTYPE}, shape_infer=shape,
                    kernels={"cpu": lambda ctx: _filled_kernel(ctx, value)}, gradient=_no_gradient, doc=doc,
                    examples=[Example([], {"shape": [2, 3]}), Example([], {"shape": [4], "dtype": "f32"}),
                              Example([], {"shape": [], "dtype": "i32"})],
                    frontend=frontend)


ZEROS = _fill_schema("zeros", 0.0, "A tensor of zeros of the given shape and dtype (default float64), as np.zeros.")
ONES = _fill_schema("ones", 1.0, "A tensor of ones of the given shape and dtype (default float64), as np.ones.")


def _full_shape(ctx: NodeContext) -> list[TensorType]:
    value = ctx.attrs["value"]
    dtype = _float_default(ctx, value)
    if dtype.is_int:
        _whole(ctx, "value", value, dtype)
    return [TensorType(dtype, ctx.attrs["shape"])]


FULL = OpSchema(
    "full",
    inputs=(),
    attrs={"shape": _SHAPE, "value": AttrSpec("int|float", doc="the fill value"), "dtype": _DTYPE},
    shape_infer=_full_shape,
    kernels={"cpu": lambda ctx: _filled_kernel(ctx, ctx.attrs["value"])},
    gradient=_no_gradient,
    doc="A tensor filled with value, as np.full (dtype default: int64 for an int value, else float64; an integer "
        "dtype needs a whole value in its range).",
    examples=[Example([], {"shape": [2, 3], "value": 2.5}), Example([], {"shape": [3], "value": 7, "dtype": "i32"})],
    frontend=lambda shape, value, dtype=None: apply("full", shape=shape, value=value, dtype=dtype),
)


# -- arange ---------------------------------------------------------------------------------------------
def arange_length(start: float, stop: float, step: float) -> int:
    """numpy's element count of ``arange(start, stop, step)``: ``ceil((stop - start) / step)``, at least 0
    (exact for ints; for floats the same double arithmetic as numpy, underflow rule included)."""
    if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
        return len(range(start, stop, step))
    delta = stop - start
    ratio = delta / step
    if ratio == 0.0 and delta != 0.0:  # the quotient underflowed: numpy counts one element if it is positive
        return 0 if math.copysign(1.0, ratio) < 0 else 1
    return max(math.ceil(ratio), 0)


def _arange_shape(ctx: NodeContext) -> list[TensorType]:
    start, stop, step = (ctx.attrs[k] for k in ("start", "stop", "step"))
    for label, v in (("start", start), ("stop", stop), ("step", step)):
        if not math.isfinite(v):
            raise ctx.error(f"{label}={v!r} is not finite (start={start!r}, stop={stop!r}, step={step!r}); "
                            "give finite numbers")
    if step == 0:
        raise ctx.error(f"step is 0 (start={start!r}, stop={stop!r}): the range would never reach stop; give a "
                        "non-zero step")
    dtype = _float_default(ctx, start, stop, step)
    if dtype.is_int:
        for label, v in (("start", start), ("step", step)):
            _whole(ctx, label, v, dtype)
    return [TensorType(dtype, (arange_length(start, stop, step),))]


def _arange_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    start, stop, step = (ctx.attrs[k] for k in ("start", "stop", "step"))
    n = t.shape[0]
    if t.dtype.is_int:
        values = start + step * np.arange(n, dtype=np.int64)  # exact: whole start and step
    else:
        values = np.arange(start, stop, step, dtype=np.float64)[:n]  # numpy's values (the same count)
    array = values.astype(t.dtype.np)
    return lambda: array.copy()


def _arange_frontend(start: Any = None, stop: Any = None, step: Any = 1, dtype: Any = None) -> Any:
    if stop is None:  # arange(stop), as numpy
        start, stop = 0, start
    elif start is None:  # arange(stop=5)
        start = 0
    return apply("arange", start=start, stop=stop, step=step, dtype=dtype)


ARANGE = OpSchema(
    "arange",
    inputs=(),
    attrs={"start": AttrSpec("int|float", 0, "the first value"),
           "stop": AttrSpec("int|float", doc="the end (not included)"),
           "step": AttrSpec("int|float", 1, "the spacing (not 0; negative counts down)"),
           "dtype": _DTYPE},
    shape_infer=_arange_shape,
    kernels={"cpu": _arange_kernel},
    gradient=_no_gradient,
    doc="Evenly spaced values start, start + step, ... before stop, as np.arange (ops.arange(5) counts 0..4). "
        "dtype default: int64 when start, stop and step are ints, else float64. A zero step is a ShapeError.",
    examples=[Example([], {"stop": 5}), Example([], {"start": 1.0, "stop": 2.0, "step": 0.25, "dtype": "f32"}),
              Example([], {"start": 3, "stop": -4, "step": -2, "dtype": "i32"})],
    frontend=_arange_frontend,
)


# -- linspace -------------------------------------------------------------------------------------------
def _linspace_shape(ctx: NodeContext) -> list[TensorType]:
    num = ctx.attrs["num"]
    if num < 0:
        raise ctx.error(f"num={num} is negative; give the number of values (0 or more)")
    for label in ("start", "stop"):
        if not math.isfinite(ctx.attrs[label]):
            raise ctx.error(f"{label}={ctx.attrs[label]!r} is not finite; give finite numbers")
    return [TensorType(ctx.attrs["dtype"] or float64, (num,))]


def _linspace_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    args = (ctx.attrs["start"], ctx.attrs["stop"], ctx.attrs["num"])
    if t.dtype.is_int:
        array = np.linspace(*args, endpoint=ctx.attrs["endpoint"], dtype=t.dtype.np)  # numpy rounds toward -inf
    else:
        array = np.linspace(*args, endpoint=ctx.attrs["endpoint"], dtype=np.float64).astype(t.dtype.np)
    return lambda: array.copy()


LINSPACE = OpSchema(
    "linspace",
    inputs=(),
    attrs={"start": AttrSpec("float", doc="the first value"), "stop": AttrSpec("float", doc="the last value"),
           "num": AttrSpec("int", 50, "how many values"),
           "endpoint": AttrSpec("bool", True, "whether stop is the last value"), "dtype": _DTYPE},
    shape_infer=_linspace_shape,
    kernels={"cpu": _linspace_kernel},
    gradient=_no_gradient,
    doc="num evenly spaced values from start to stop (stop included unless endpoint=False), as np.linspace; "
        "dtype default float64.",
    examples=[Example([], {"start": 0.0, "stop": 1.0, "num": 5}),
              Example([], {"start": -1.0, "stop": 1.0, "num": 4, "endpoint": False, "dtype": "f32"})],
    frontend=lambda start, stop, num=50, endpoint=True, dtype=None: apply(
        "linspace", start=start, stop=stop, num=num, endpoint=endpoint, dtype=dtype),
)


# -- eye ------------------------------------------------------------------------------------------------
def _eye_shape(ctx: NodeContext) -> list[TensorType]:
    n, m = ctx.attrs["n"], ctx.attrs["m"]
    for label, v in (("n", n), ("m", m)):
        if v is not None and v < 0:
            raise ctx.error(f"{label}={v} is negative; give a number of rows/columns (0 or more)")
    return [TensorType(ctx.attrs["dtype"] or float64, (n, n if m is None else m))]


def _eye_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    array = np.eye(t.shape[0], t.shape[1], k=ctx.attrs["k"], dtype=np.float64).astype(t.dtype.np)
    return lambda: array.copy()


EYE = OpSchema(
    "eye",
    inputs=(),
    attrs={"n": AttrSpec("int", doc="rows"), "m": AttrSpec("int", None, "columns (default n)"),
           "k": AttrSpec("int", 0, "the diagonal: 0 the main one, > 0 above it, < 0 below"), "dtype": _DTYPE},
    shape_infer=_eye_shape,
    kernels={"cpu": _eye_kernel},
    gradient=_no_gradient,
    doc="An n x m matrix with ones on diagonal k and zeros elsewhere, as np.eye (dtype default float64).",
    examples=[Example([], {"n": 3}), Example([], {"n": 2, "m": 4, "k": 1, "dtype": "f32"})],
    frontend=lambda n, m=None, k=0, dtype=None: apply("eye", n=n, m=m, k=k, dtype=dtype),
)


# -- zeros_like, ones_like ------------------------------------------------------------------------------
def _like_schema(name: str, value: float) -> OpSchema:
    def shape(ctx: NodeContext) -> list[TensorType]:
        (x,) = ctx.input_types
        return [x.with_dtype(ctx.attrs["dtype"]) if ctx.attrs["dtype"] is not None else x]

    return OpSchema(
        name,
        inputs=("x",),
        attrs={"dtype": AttrSpec("dtype", None, "the output dtype (default x's)")},
        shape_infer=shape,
        kernels={"cpu": lambda ctx: _filled_kernel(ctx, value)},
        gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: None),  # y does not depend on x's values
        traits=("any_shape_gradient",),  # a zero gradient: no size in it (Taylor's concat rule runs at any batch)
        doc=f"A tensor of {'zeros' if value == 0 else 'ones'} with x's shape and dtype (or dtype); only x's type "
            "is read, so x's gradient through it is zero.",
        examples=[Example(["f32[2, 3]"]), Example(["f64[4]"], {"dtype": "i64"}), Example(["i32[3]"])],
    )


ZEROS_LIKE = _like_schema("zeros_like", 0.0)
ONES_LIKE = _like_schema("ones_like", 1.0)

SCHEMAS = [ZEROS, ONES, FULL, ARANGE, LINSPACE, EYE, ZEROS_LIKE, ONES_LIKE]
