"""Checkpointed loops: keep every k-th state for the gradient and recompute the rest (``checkpoint_every=k``).

A loop of M steps is rewritten as an outer loop of S = ceil(M/k) segments
whose body runs an inner loop of at most k steps. Nothing else is needed:
differentiating the nest with the ordinary rule saves the outer trajectory
(the S states at segment starts) and, inside the outer backward body,
recomputes one segment at a time with its own k-row trajectory. Memory for
the trajectory falls from M to S + k states; the forward runs once more
during the backward; the gradients are the same (the same kernels on the
same values). Scanned inputs are padded to S*k rows and cut into
``[S, k, ...]`` blocks; stacked outputs come back ``[S, k, ...]`` and are
cut to M rows. The inner body's step ``i = m*k + j`` is the step of the
unrolled loop, and the last segment's trip limit is the remainder.

``pad_rows_internal`` and ``take_rows_internal`` (zero rows appended at the
end / the first rows) are each other's gradient, so the nest is closed to any
order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from frame_core import AttrSpec, Example, IRError, NodeContext, OpSchema, Tensor, TensorType, constant, ops
from frame_core.frontend.subgraph import flatten_result
from frame_core.frontend.trace import apply

__all__ = ["SCHEMAS", "checkpointed_loop", "checkpointed_scan"]


# pad_rows_internal(x; rows) -> x with zero rows appended up to `rows`     gx = take_rows_internal(gy; rows(x))
def _pad_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    rows = ctx.attrs["rows"]
    if x.rank == 0 or rows < x.shape[0]:
        raise ctx.error(f"pads the leading axis of {x} to {rows} rows; it needs a rank >= 1 input with at most "
                        f"{rows} rows")
    return [x.with_shape((rows, *x.shape[1:]))]


def _pad_kernel(ctx: NodeContext) -> Callable[..., Any]:
    (y,) = ctx.output_types
    n = ctx.input_types[0].shape[0]

    def kernel(x: np.ndarray) -> np.ndarray:
        out = np.zeros(y.shape, y.dtype.np)
        out[:n] = x
        return out
    return kernel


# take_rows_internal(x; rows) -> x[:rows]                                  gx = pad_rows_internal(gy; rows(x))
def _take_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    rows = ctx.attrs["rows"]
    if x.rank == 0 or not 0 <= rows <= x.shape[0]:
        raise ctx.error(f"takes the first {rows} rows of {x}; it needs a rank >= 1 input with at least {rows} rows")
    return [x.with_shape((rows, *x.shape[1:]))]


def _take_kernel(ctx: NodeContext) -> Callable[..., Any]:
    rows = ctx.attrs["rows"]
    return lambda x: np.array(x[:rows], copy=True)


_ROWS = {"rows": AttrSpec("int", doc="the number of rows of the output")}

PAD_ROWS = OpSchema(
    "pad_rows_internal", inputs=("x",), attrs=_ROWS, shape_infer=_pad_shape, kernels={"cpu": _pad_kernel},
    gradient=lambda ctx: ctx.grad_graph(
        lambda x, y, gy: apply("take_rows_internal", gy, rows=x.shape[0])),
    doc="x with zero rows appended to its leading axis, up to `rows` (checkpointed loops pad scanned inputs).",
    examples=[Example(["f32[3, 2]"], {"rows": 5}), Example(["f64[2]"], {"rows": 2})],
)

TAKE_ROWS = OpSchema(
    "take_rows_internal", inputs=("x",), attrs=_ROWS, shape_infer=_take_shape, kernels={"cpu": _take_kernel},
    gradient=lambda ctx: ctx.grad_graph(
        lambda x, y, gy: apply("pad_rows_internal", gy, rows=x.shape[0])),
    doc="The first `rows` rows of x (checkpointed loops cut stacked outputs back to max_trip rows).",
    examples=[Example(["f32[5, 2]"], {"rows": 3}), Example(["f64[2]"], {"rows": 0})],
)

SCHEMAS = [PAD_ROWS, TAKE_ROWS]


def _segments(k: Any, steps: int) -> tuple[int, int]:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise IRError(f"checkpoint_every must be an int >= 1 (keep every k-th state), got {k!r}")
    k = int(k)
    return k, math.ceil(steps / k)


def _as_flag(c: Any) -> Any:
    if isinstance(c, Tensor) and c.shape != ():
        return ops.reshape(c, shape=())
    return c


def checkpointed_loop(body_fn: Callable[..., Any], max_trip: int, cond: Any, init: Sequence[Tensor],
                      scanned: Sequence[Tensor], invs: Sequence[Tensor], every: Any, reverse: bool = False,
                      exits: bool = True) -> Any:
    """``loop(...)`` as an outer loop over segments of ``every`` steps (module docstring); same outputs.

    ``exits=False`` says the body's cond is always true (a scan): no flag is carried between segments, and
    the loops may run in ``reverse`` (their rows counted from each trip limit).
    """
    from .control import _as_list, build_loop

    k, segments = _segments(every, max_trip)
    if segments <= 1:  # one segment: nothing to save on
        return build_loop(body_fn, max_trip, np.asarray(max_trip, np.int64), cond, init, scanned, invs, reverse)
    ns, nx = len(init), len(scanned)
    limits = np.full(segments, k, np.int64)
    limits[-1] = max_trip - (segments - 1) * k
    blocks = []
    for x in scanned:
        padded = apply("pad_rows_internal", x, rows=segments * k) if segments * k != max_trip else x
        blocks.append(ops.reshape(padded, shape=(segments, k, *x.shape[1:])))

    flag = 1 if exits else 0  # the inner loop carries its last cond to the outer one

    def outer(m: Tensor, *args: Tensor) -> list[Any]:
        states, limit = args[:ns], args[ns]
        rows, inner_invs = args[ns + 1:ns + 1 + nx], args[ns + 1 + nx:]

        def inner(j: Tensor, *a: Tensor) -> list[Any]:
            out = flatten_result(body_fn(m * k + j, *a[:ns], *a[ns + flag:]))
            if len(out) < 1 + ns or not exits:
                return out  # (a malformed body: the loop's own checks say what is wrong)
            c = _as_flag(out[0])
            return [c, *out[1:1 + ns], c, *out[1 + ns:]]

        carried = [*states, constant(np.array(True))] if exits else list(states)
        result = _as_list(build_loop(inner, k, limit, True, carried, rows, inner_invs, reverse))
        cond_out = result[ns] if exits else constant(np.array(True))
        return [cond_out, *result[:ns], *result[ns + flag:]]

    nested = _as_list(build_loop(outer, segments, np.asarray(segments, np.int64), cond, init,
                                 [constant(limits), *blocks], invs, reverse))
    states, stacked = nested[:ns], nested[ns:]
    ys = []
    for y in stacked:
        flat = ops.reshape(y, shape=(segments * k, *y.shape[2:]))
        ys.append(apply("take_rows_internal", flat, rows=max_trip) if segments * k != max_trip else flat)
    outs = [*states, *ys]
    return outs[0] if len(outs) == 1 else tuple(outs)


def checkpointed_scan(body_fn: Callable[..., Any], carry0: Sequence[Tensor], carry_struct: bool,
                      scanned: Sequence[Tensor], xs_struct: bool, invs: Sequence[Tensor], length: int, reverse: bool,
                      every: Any) -> tuple[Any, Any]:
    """``scan(...)`` through ``checkpointed_loop`` (a scan is a loop whose cond stays true)."""
    nc, nx = len(carry0), len(scanned)
    y_struct: list[Any] = []

    def step(i: Tensor, *args: Tensor) -> list[Any]:
        c = tuple(args[:nc]) if carry_struct else args[0]
        x = (tuple(args[nc:nc + nx]) if xs_struct else args[nc]) if nx else None
        result = body_fn(c, x, *args[nc + nx:])
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise IRError(f"scan: the body must return a pair (carry, y), got {type(result).__name__}")
        new_carry, y = result
        carry_out = list(new_carry) if carry_struct and isinstance(new_carry, (tuple, list)) else [new_carry]
        y_struct.append(y)
        return [True, *carry_out, *([] if y is None else list(y) if isinstance(y, (tuple, list)) else [y])]

    outs = checkpointed_loop(step, length, True, carry0, scanned, invs, every, reverse, exits=False)
    outs = [outs] if isinstance(outs, Tensor) else list(outs)
    carry = tuple(outs[:nc]) if carry_struct else outs[0]
    y = y_struct[0]
    ys = outs[nc:]
    return carry, (None if y is None else tuple(ys) if isinstance(y, (tuple, list)) else ys[0])
