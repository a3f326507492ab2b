"""numpy's dispatch protocols on traced tensors: ``np.tanh(x)``, ``np.sum(x, axis=0)``, ``a @ x`` build frame ops.

A traced :class:`~frame_core.frontend.trace.Tensor` has no data, so numpy cannot compute on it; instead, as
array libraries do (NEP 13 ``__array_ufunc__``, NEP 18 ``__array_function__``), numpy hands the call back to
the tensor, which appends the frame op that computes the same thing. The tables below are the whole mapping:
a numpy function with a frame op is traced; one without gets an ``IRError`` naming what to write instead, never
"a traced Tensor has no data".

The ops come from frame-ops-basic (and frame-ops-sequence for ``cumsum``), looked up by name when called: a
registry without them answers with the usual ``UnknownOpError``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import IRError

__all__ = ["UFUNCS", "FUNCTIONS", "array_ufunc", "array_function"]

#: numpy ufunc -> the frame op computing it elementwise, with numpy's broadcasting.
UFUNCS: dict[str, str] = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
    "negative": "neg", "power": "pow", "float_power": "pow", "absolute": "abs", "fabs": "abs",
    "exp": "exp", "log": "log", "sqrt": "sqrt", "square": "square", "sin": "sin", "cos": "cos", "tanh": "tanh",
    "sign": "sign", "maximum": "maximum", "minimum": "minimum", "fmax": "maximum", "fmin": "minimum",
    "less": "less", "less_equal": "less_equal",
    "greater": "greater", "greater_equal": "greater_equal", "matmul": "matmul",
    # frame-ops-basic's newer ops: with an older pack installed, the hint below says what to write instead
    "log1p": "log1p", "expm1": "expm1", "logaddexp": "logaddexp",
}

#: numpy ufuncs without an op of their own: what to write instead (shown in the error). ``equal`` and
#: ``not_equal`` are what ``array == x`` calls: refused as ``x == array`` is (Tensor.__eq__), pointing to the ops.
UFUNC_HINTS: dict[str, str] = {
    "equal": "ops.equal(a, b) (`==` with a traced Tensor asks whether two tensors are the same object)",
    "not_equal": "ops.not_equal(a, b) (`!=` with a traced Tensor asks whether two tensors are the same object)",
    "positive": "+x (or x itself)",
    "reciprocal": "1.0 / x",
    "expm1": "ops.exp(x) - 1.0",
    "log1p": "ops.log(1.0 + x)",
    "log2": "ops.log(x) / math.log(2)",
    "log10": "ops.log(x) / math.log(10)",
    "exp2": "ops.exp(x * math.log(2))",
    "tan": "ops.sin(x) / ops.cos(x)",
    "sinh": "(ops.exp(x) - ops.exp(-x)) / 2",
    "cosh": "(ops.exp(x) + ops.exp(-x)) / 2",
    "cbrt": "ops.sign(x) * ops.abs(x) ** (1 / 3)",
    "heaviside": "ops.where(x > 0, 1.0, 0.0) (a step; ops.heaviside_surrogate for a surrogate gradient)",
    "logaddexp": "ops.logsumexp(ops.stack(a, b), axes=[0])",
}


def _axes(axis: Any) -> list[int] | None:
    if axis is None:
        return None
    return [int(a) for a in axis] if isinstance(axis, (tuple, list)) else [int(axis)]


def _ops() -> Any:
    from .. import ops

    return ops


def _reduction(op: str) -> Callable[..., Any]:
    """np.sum(a, axis, dtype, out, keepdims) and the others: the Tensor's own method says what a dtype= or out=
    cannot do."""
    if op in ("sum", "mean"):
        def reduce(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
            return a._reduce(op, None, bool(keepdims), _axes(axis), dtype, out)
    else:
        def reduce(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:  # type: ignore[misc]
            return a._reduce(op, None, bool(keepdims), _axes(axis), None, out)
    return reduce


def _arg_reduction(op: str) -> Callable[..., Any]:
    def reduce(a: Any, axis: int | None = None, keepdims: bool = False) -> Any:
        return getattr(_ops(), op)(a, axis=axis, keepdims=bool(keepdims))
    return reduce


def _bound(value: Any, name: str) -> float | None:
    if value is None or isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return None if value is None else float(value)
    raise IRError(f"np.clip on a traced Tensor takes numbers (or None) for {name}, got {type(value).__name__}; "
                  "for tensor bounds write ops.minimum(ops.maximum(x, lo), hi)")


def _dot(a: Any, b: Any) -> Any:
    if getattr(a, "ndim", 0) > 2 or getattr(b, "ndim", 0) > 2:
        raise IRError("np.dot of arrays of rank > 2 sums over the last axis of a and the second-to-last of b, "
                      "which no frame op does; use a @ b (np.matmul: batched matrix products)")
    return _ops().matmul(a, b)


#: numpy function -> a function of numpy's arguments that builds the frame op(s) (only the arguments listed are
#: taken: a keyword frame cannot honour, such as ``dtype=`` or ``out=``, is refused by name).
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sum": _reduction("sum"), "mean": _reduction("mean"), "max": _reduction("max"), "amax": _reduction("max"),
    "min": _reduction("min"), "amin": _reduction("min"),
    "argmax": _arg_reduction("argmax"), "argmin": _arg_reduction("argmin"),
    "matmul": lambda a, b: _ops().matmul(a, b),
    "dot": _dot,
    "transpose": lambda a, axes=None: _ops().transpose(a, perm=None if axes is None else [int(i) for i in axes]),
    "reshape": lambda a, shape=None, newshape=None: _reshape(a, shape if shape is not None else newshape),
    "concatenate": lambda arrays, axis=0: _ops().concat(*arrays, axis=int(axis)),
    "stack": lambda arrays, axis=0: _ops().stack(*arrays, axis=int(axis)),
    "where": lambda condition, x, y: _ops().where(condition, x, y),
    "clip": lambda a, a_min=None, a_max=None: _ops().clip(a, min=_bound(a_min, "a_min"), max=_bound(a_max, "a_max")),
    "expand_dims": lambda a, axis: _ops().expand_dims(a, axes=_axes(axis)),
    "squeeze": lambda a, axis=None: _ops().squeeze(a, axes=_axes(axis)),
    "broadcast_to": lambda array, shape: _ops().broadcast_to(array, shape=tuple(shape)),
    "cumsum": lambda a, axis=None: _cumsum(a, axis),
}

#: numpy functions without a frame op: what to write instead.
FUNCTION_HINTS: dict[str, str] = {
    "prod": "ops.exp(ops.sum(ops.log(x), axes=...)) for positive x, or a product of slices",
    "var": "ops.mean(ops.square(x - ops.mean(x, axes=[a], keepdims=True)), axes=[a])",
    "std": "ops.sqrt of the variance: ops.mean(ops.square(x - ops.mean(x, axes=[a], keepdims=True)), axes=[a])",
    "linalg.norm": "ops.sqrt(ops.sum(ops.square(x)))",
    "tensordot": "ops.matmul after ops.reshape / ops.transpose",
    "einsum": "ops.matmul after ops.reshape / ops.transpose, or ops.mul and ops.sum",
    "outer": "ops.expand_dims(a, axes=[1]) * ops.expand_dims(b, axes=[0])",
    "take": "ops.gather(x, indices, axis=...)",
    "pad": "ops.pad(x, before=[...], after=[...])",
    "sort": "no sorting op exists; compute on the arrays after running the compiled graph",
    "asarray": "a traced Tensor has no data: compile the traced graph and run it to get arrays",
    "array": "a traced Tensor has no data: compile the traced graph and run it to get arrays",
}


def _reshape(a: Any, shape: Any) -> Any:
    """np.reshape(a, shape): ``shape`` an int or a sequence (numpy's older ``newshape=`` keyword too)."""
    dims = shape if isinstance(shape, (tuple, list)) else [shape]
    return _ops().reshape(a, shape=[int(d) for d in dims])


def _cumsum(a: Any, axis: Any) -> Any:
    if axis is None:
        raise IRError("np.cumsum on a traced Tensor needs axis= (numpy's default flattens first): "
                      "ops.cumsum(ops.reshape(x, shape=[-1]), axis=0) for that")
    return _ops().cumsum(a, axis=int(axis))


def _registered(op: str) -> bool:
    from ..errors import FrameError
    from ..ir.schemas import default_source

    try:
        return default_source().get(op) is not None
    except FrameError:
        return False


def _name(func: Any) -> str:
    module = getattr(func, "__module__", "") or ""
    name = getattr(func, "__name__", repr(func))
    return f"linalg.{name}" if module.startswith("numpy.linalg") else name


def _no_op(what: str, hint: str | None) -> IRError:
    instead = f"write {hint}" if hint else "build it from ops (`frame ops list` shows them)"
    return IRError(f"np.{what} on a traced Tensor: frame maps no op to it; {instead}")


def _foreign(values: Sequence[Any]) -> bool:
    """Whether another library's array type takes part, so the call is theirs to answer (NotImplemented)."""
    for v in values:
        handler = getattr(type(v), "__array_ufunc__", None)
        if handler is not None and not isinstance(v, np.ndarray) and not getattr(v, "_frame_traced_tensor", False):
            return True
    return False


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``Tensor.__array_ufunc__``: numpy's ufunc ``ufunc`` called on traced tensors, as a frame op."""
    if _foreign(inputs):
        return NotImplemented
    name = ufunc.__name__
    if method != "__call__":
        hint = {"add.reduce": "ops.sum(x, axes=[axis])", "maximum.reduce": "ops.max(x, axes=[axis])",
                "minimum.reduce": "ops.min(x, axes=[axis])", "add.accumulate": "ops.cumsum(x, axis=...)",
                "multiply.outer": "ops.expand_dims(a, axes=[1]) * ops.expand_dims(b, axes=[0])"}.get(f"{name}.{method}")
        raise _no_op(f"{name}.{method}", hint)
    op = UFUNCS.get(name)
    if op is None or (name in UFUNC_HINTS and not _registered(op)):
        raise _no_op(name, UFUNC_HINTS.get(name))
    if kwargs:
        raise IRError(f"np.{name} on a traced Tensor takes no {', '.join(sorted(kwargs))}= (frame ops write no "
                      "out= arrays and take no where=/dtype=); call it without them, and ops.cast(x, to=...) for "
                      "another dtype")
    if len(inputs) != ufunc.nin:
        raise IRError(f"np.{name} takes {ufunc.nin} input(s), got {len(inputs)}")
    return getattr(_ops(), op)(*inputs)


def array_function(func: Any, types: Sequence[type], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``Tensor.__array_function__``: a numpy function called with traced tensors, as frame ops."""
    if any(t is not np.ndarray and not getattr(t, "_frame_traced_tensor", False) for t in types):
        return NotImplemented
    name = _name(func)
    build = FUNCTIONS.get(name)
    if build is None:
        raise _no_op(name, FUNCTION_HINTS.get(name))
    import inspect

    try:
        inspect.signature(build).bind(*args, **kwargs)
    except TypeError:
        accepted = ", ".join(p for p in inspect.signature(build).parameters)
        given = ", ".join([f"{len(args)} positional"] + [f"{k}=" for k in kwargs])
        raise IRError(f"np.{name} on a traced Tensor takes ({accepted}); got {given}. Other arguments (where=, "
                      "initial=, ...) have no frame equivalent: leave them out") from None
    return build(*args, **kwargs)
