"""Ops that select or assemble regions of tensors: slice, pad, concat, stack.

Their gradients stay inside this set, so each is closed (ARCH-068):
``slice`` with unit steps and ``pad`` are each other's adjoints; a strided
``slice`` has ``slice_grad_internal`` (scatter into zeros) as its adjoint, whose
adjoint is that ``slice`` again; ``concat`` and ``stack`` are undone by slices
(and a ``squeeze`` for ``stack``).

How axes are given (slice and pad alike): the per-axis lists (``starts``/
``stops``/``steps``, ``before``/``after``) name the axes in ``axes``, by
position; without ``axes`` they name the leading axes ``0, 1, ...`` in order
(ONNX's convention). Axes not named are kept whole (slice) or unpadded (pad).
Indices follow numpy and Python slices exactly: negative values count from
the end, out-of-range bounds are clamped, an empty range gives a size-0 axis.
A slice open at one end uses a bound past that end: ``stops=[2**62]`` runs to
the end, and with ``steps=[-1]`` ``stops=[-2**62]`` runs down to index 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from .shape import axis_in, distinct_axes

#: Per axis, the normalised slice: the first index, the step and the number of elements taken.
Span = tuple[int, int, int]


def _named_axes(ctx: NodeContext, lists: dict[str, Sequence[int] | None], rank: int) -> tuple[int, ...]:
    """The axes the per-axis attribute ``lists`` refer to; errors when their lengths differ from ``axes``."""
    given = {name: len(v) for name, v in lists.items() if v is not None}
    if len(set(given.values())) > 1:
        sizes = ", ".join(f"{name} has {n}" for name, n in given.items())
        raise ctx.error(f"the per-axis lists must have one entry per named axis, but {sizes}")
    count = next(iter(given.values()))
    entries = f"{count} entr{'y' if count == 1 else 'ies'}"
    axes = ctx.attrs["axes"]
    if axes is None:
        if count > rank:
            has = f"only {rank} axis" if rank == 1 else f"only {rank} axes" if rank else "no axes"
            raise ctx.error(f"{entries} per list but the input has {has}; give fewer entries or name the axes "
                            "with `axes`")
        return tuple(range(count))
    if len(axes) != count:
        raise ctx.error(f"`axes` names {len(axes)} ax{'i' if len(axes) == 1 else 'e'}s but the per-axis lists have "
                        f"{entries}")
    return distinct_axes(ctx, axes, rank)


def _as_slice(start: int, step: int, length: int) -> slice:
    """The numpy slice taking ``length`` elements from ``start`` by ``step`` (a stop below 0 becomes open)."""
    stop = start + step * length
    return slice(start, stop if stop >= 0 else None, step)


def _numpy_stop(start: int, step: int, length: int, size: int) -> int:
    """A ``stops`` entry that gives exactly ``length`` elements from ``start`` by ``step`` on an axis of ``size``."""
    stop = start + step * length
    return stop if stop >= 0 else -(size + 1)  # below -size clamps to "before index 0"


# slice(x; starts, stops, steps, axes) -> x[start:stop:step] on each named axis (numpy semantics, a view)
#   gx = slice_grad_like_internal(gy, x): compiled, pad(gy, before=start, after=n - start - len) for unit steps,
#   else slice_grad_internal(gy), with n read from x's shape
def _spans(ctx: NodeContext) -> list[Span]:
    (x,) = ctx.input_types
    starts, stops, steps = ctx.attrs["starts"], ctx.attrs["stops"], ctx.attrs["steps"]
    axes = _named_axes(ctx, {"starts": starts, "stops": stops, "steps": steps}, x.rank)
    steps = steps if steps is not None else (1,) * len(axes)
    spans = [(0, 1, d) for d in x.shape]
    for axis, start, stop, step in zip(axes, starts, stops, steps):
        if step == 0:
            raise ctx.error(f"the step for axis {axis} is 0; a step must be a non-zero int (negative walks backwards)")
        taken = range(*slice(start, stop, step).indices(x.shape[axis]))
        # an empty range may start at -1 (a backwards walk clamped below 0): start it at 0 so that it
        # stays empty when the span is written back as a slice or shifted into another op's attributes
        spans[axis] = (taken.start if len(taken) else 0, step, len(taken))
    return spans


def _slice_kernel(ctx: NodeContext) -> Callable:
    index = (*(_as_slice(*span) for span in _spans(ctx)), Ellipsis)  # the Ellipsis keeps a 0-d result an array
    return lambda x: x[index]


def _slice_gradient(ctx: NodeContext):
    # the spans are resolved against x's shape at run time: x[-1] at another batch size is another row
    attrs = {k: ctx.attrs[k] for k in ("starts", "stops", "steps", "axes")}
    return ctx.grad_graph(lambda x, y, gy: ops.slice_grad_like_internal(gy, x, **attrs))


_PER_AXIS = "one entry per axis named by `axes`"
SLICE = OpSchema(
    "slice",
    inputs=("x",),
    attrs={"starts": AttrSpec("ints", doc=f"first index, {_PER_AXIS} (negative counts from the end)"),
           "stops": AttrSpec("ints", doc=f"index to stop before, {_PER_AXIS} (clamped like numpy)"),
           "steps": AttrSpec("ints", None, f"non-zero step, {_PER_AXIS}; none: all 1"),
           "axes": AttrSpec("ints", None, "the axes the lists refer to; none: the leading axes 0, 1, ...")},
    shape_infer=lambda ctx: [ctx.input_types[0].with_shape(tuple(length for _, _, length in _spans(ctx)))],
    kernels={"cpu": _slice_kernel},
    gradient=_slice_gradient,
    traits=("view", "any_shape_gradient"),
    doc="x[start:stop:step] along each named axis with numpy's semantics (negative indices, clamping, "
        "negative steps); other axes are kept whole. Returns a view.",
    examples=[
        Example(["f32[5, 4]"], {"starts": [1], "stops": [4]}),
        Example(["f32[3, 6]"], {"starts": [-5, 0], "stops": [100, -1], "axes": [1, 0]}, note="negative, clamped"),
        Example(["f64[7, 3]"], {"starts": [6], "stops": [-100], "steps": [-2]}, note="strided backwards"),
        Example(["f32[2, 9]"], {"starts": [1], "stops": [9], "steps": [3], "axes": [-1]}, note="strided"),
        Example(["f32[4]"], {"starts": [3], "stops": [1]}, note="empty range"),
    ],
)


# slice_grad_internal(gy; input_shape, starts, steps) -> zeros(input_shape) with gy scattered at the slice
#   (starts and steps per axis, normalised; gy's shape gives the lengths). gradient: ggy = slice(ggx, same slice)
def _scatter_spans(ctx: NodeContext) -> list[Span]:
    (gy,) = ctx.input_types
    shape, starts, steps = ctx.attrs["input_shape"], ctx.attrs["starts"], ctx.attrs["steps"]
    if not len(shape) == len(starts) == len(steps) == gy.rank:
        raise ctx.error(f"input_shape {list(shape)}, starts {list(starts)} and steps {list(steps)} need one entry per "
                        f"axis of gy {gy}")
    for axis, (n, first, step, length) in enumerate(zip(shape, starts, steps, gy.shape)):
        last = first + step * (length - 1)
        if step == 0 or (length and not (0 <= first < n and 0 <= last < n)):
            raise ctx.error(f"axis {axis}: {length} elements from {first} by step {step} do not fit in size {n}")
    return list(zip(starts, steps, gy.shape))


def _scatter_shape(ctx: NodeContext) -> list[TensorType]:
    _scatter_spans(ctx)
    return [ctx.input_types[0].with_shape(tuple(ctx.attrs["input_shape"]))]


def _scatter_kernel(ctx: NodeContext) -> Callable:
    index = tuple(_as_slice(*span) for span in _scatter_spans(ctx))
    shape = tuple(ctx.attrs["input_shape"])
    dtype = ctx.input_types[0].dtype.np

    def kernel(gy: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.zeros(shape, dtype)
        else:
            out.fill(0)
        out[index] = gy
        return out
    return kernel


def _scatter_gradient(ctx: NodeContext):
    shape = ctx.attrs["input_shape"]
    spans = _scatter_spans(ctx)
    stops = [_numpy_stop(first, step, length, n) for n, (first, step, length) in zip(shape, spans)]
    return ctx.grad_graph(lambda gy, y, ggx: ops.slice(ggx, starts=ctx.attrs["starts"], stops=stops,
                                                       steps=ctx.attrs["steps"]))


SLICE_GRAD = OpSchema(
    "slice_grad_internal",
    inputs=("gy",),
    attrs={"input_shape": AttrSpec("shape", doc="shape of the sliced input"),
           "starts": AttrSpec("ints", doc="first index per axis, non-negative"),
           "steps": AttrSpec("ints", doc="step per axis, non-zero")},
    shape_infer=_scatter_shape,
    kernels={"cpu": _scatter_kernel},
    gradient=_scatter_gradient,
    traits=("accepts_out",),
    doc="The gradient of a strided slice: gy written at the sliced positions of a zero tensor of the input's shape.",
    examples=[Example(["f32[3, 3]"], {"input_shape": [7, 3], "starts": [6, 0], "steps": [-2, 1]}),
              Example(["f64[2, 3]"], {"input_shape": [2, 9], "starts": [0, 1], "steps": [1, 3]})],
)


# pad(x; before, after, axes) -> x inside zeros: `before` zeros ahead of and `after` zeros behind each named axis
#   gx = slice(gy, starts=before, stops=-after (to the end for after = 0))
def _pads(ctx: NodeContext) -> tuple[list[int], list[int]]:
    (x,) = ctx.input_types
    before, after = ctx.attrs["before"], ctx.attrs["after"]
    axes = _named_axes(ctx, {"before": before, "after": after}, x.rank)
    full_before, full_after = [0] * x.rank, [0] * x.rank
    for axis, b, a in zip(axes, before, after):
        if b < 0 or a < 0:
            raise ctx.error(f"pads must be non-negative, got before={b}, after={a} for axis {axis}; use slice to "
                            "remove elements")
        full_before[axis], full_after[axis] = b, a
    return full_before, full_after


def _pad_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    before, after = _pads(ctx)
    return [x.with_shape(tuple(b + n + a for n, b, a in zip(x.shape, before, after)))]


def _pad_kernel(ctx: NodeContext) -> Callable:
    (x_t,) = ctx.input_types
    before, _ = _pads(ctx)
    (y_t,) = ctx.output_types
    inner = tuple(slice(b, b + n) for b, n in zip(before, x_t.shape))
    shape, dtype = y_t.shape, y_t.dtype.np

    def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.zeros(shape, dtype)
        else:
            out.fill(0)
        out[inner] = x
        return out
    return kernel


_TO_THE_END = int(np.iinfo(np.int64).max)  # a slice stop meaning "to the end", as x[2:] is traced


def _pad_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    before, after = _pads(ctx)
    # counted from the end (to the end when nothing was added there), so that no size of x is written down
    stops = [-a if a else _TO_THE_END for a in after]
    return ctx.grad_graph(lambda x_, y, gy: ops.slice(gy, starts=before, stops=stops))


PAD = OpSchema(
    "pad",
    inputs=("x",),
    attrs={"before": AttrSpec("ints", doc=f"zeros ahead of the data, {_PER_AXIS}"),
           "after": AttrSpec("ints", doc=f"zeros behind the data, {_PER_AXIS}"),
           "axes": AttrSpec("ints", None, "the axes the lists refer to; none: the leading axes 0, 1, ...")},
    shape_infer=_pad_shape,
    kernels={"cpu": _pad_kernel},
    gradient=_pad_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="x surrounded by zeros: `before[i]` zeros ahead of and `after[i]` behind the data along each named axis.",
    examples=[Example(["f32[3, 4]"], {"before": [1, 0], "after": [2, 3]}),
              Example(["f64[2, 3]"], {"before": [2], "after": [0], "axes": [-1]}),
              Example(["f32[2, 2, 2]"], {"before": [0], "after": [1], "axes": [1]}),
              Example(["f32[]"], {"before": [], "after": []}, note="nothing to pad")],
)


# concat(x0, x1, ...; axis) -> the inputs joined along `axis`
#   gx_i = concat_grad_like_internal(gy, x0, x1, ...; axis, index=i), slice(gy, [off_i], [off_i + n_i]) once compiled
def _concat_axis(ctx: NodeContext, extra_rank: int) -> int:
    types = ctx.input_types
    if not types:
        raise ctx.error("needs at least one input")
    first = types[0]
    for i, t in enumerate(types[1:], 1):
        if t.dtype is not first.dtype:
            raise ctx.error(f"inputs must share a dtype, got {first} and {t} (input {i}); cast one of them first")
        if t.rank != first.rank:
            raise ctx.error(f"inputs must have the same rank, got {first} and {t} (input {i}); expand_dims or "
                            "reshape one of them first")
    if first.rank + extra_rank == 0:
        raise ctx.error("cannot join rank-0 tensors along an axis; stack them, or expand_dims them first")
    what = f"axis {ctx.attrs['axis']}" + (" (a position in the result)" if extra_rank else "")
    return axis_in(ctx, ctx.attrs["axis"], first.rank + extra_rank, what)


def _concat_shape(ctx: NodeContext) -> list[TensorType]:
    axis = _concat_axis(ctx, 0)
    first = ctx.input_types[0]
    for i, t in enumerate(ctx.input_types):
        if any(d != e for k, (d, e) in enumerate(zip(t.shape, first.shape)) if k != axis):
            raise ctx.error(f"inputs must agree on every axis but axis {axis}, got {first} and {t} (input {i})")
    size = sum(t.shape[axis] for t in ctx.input_types)
    return [first.with_shape(first.shape[:axis] + (size,) + first.shape[axis + 1:])]


def _joining_kernel(ctx: NodeContext, join: Callable, axis: int) -> Callable:
    n = len(ctx.input_types)

    def kernel(*arrays: np.ndarray) -> np.ndarray:  # the inputs, then an optional trailing `out`
        out = arrays[n] if len(arrays) > n else None
        return join(arrays[:n], axis=axis, out=out)
    return kernel


def _concat_gradient(ctx: NodeContext):
    axis = _concat_axis(ctx, 0)
    n = len(ctx.input_types)

    def gradient(*slots):
        xs, gy = slots[:n], slots[n + 1]  # each input's block of gy, its span read from the inputs' shapes
        return [ops.concat_grad_like_internal(gy, *xs, axis=axis, index=i) for i in range(n)]
    return ctx.grad_graph(gradient)


CONCAT = OpSchema(
    "concat",
    inputs=("xs",),
    variadic=True,
    attrs={"axis": AttrSpec("int", 0, "the axis to join along (negative counts from the end)",
                            none_refused="numpy's concatenate(axis=None) joins the inputs flattened; give an "
                            "axis, or reshape each input to one axis first")},
    shape_infer=_concat_shape,
    kernels={"cpu": lambda ctx: _joining_kernel(ctx, np.concatenate, _concat_axis(ctx, 0))},
    gradient=_concat_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="The inputs (one or more, passed positionally: concat(a, b, c, axis=1)) joined along an existing `axis`; "
        "they agree on every other axis.",
    examples=[Example(["f32[2, 3]", "f32[4, 3]"]),
              Example(["f32[2, 3]", "f32[2, 1]", "f32[2, 2]"], {"axis": -1}),
              Example(["f64[3]"], note="one input")],
)


# stack(x0, x1, ...; axis) -> the inputs joined along a new `axis`
#   gx_i = squeeze(slice(gy, [i], [i + 1], axes=[axis]), axes=[axis])
def _stack_shape(ctx: NodeContext) -> list[TensorType]:
    axis = _concat_axis(ctx, 1)
    first = ctx.input_types[0]
    for i, t in enumerate(ctx.input_types):
        if t.shape != first.shape:
            raise ctx.error(f"inputs must have one shape, got {first} and {t} (input {i})")
    return [first.with_shape(first.shape[:axis] + (len(ctx.input_types),) + first.shape[axis:])]


def _stack_gradient(ctx: NodeContext):
    axis = _concat_axis(ctx, 1)
    n = len(ctx.input_types)

    def gradient(*slots):
        gy = slots[n + 1]
        return [ops.squeeze(ops.slice(gy, starts=[i], stops=[i + 1], axes=[axis]), axes=[axis]) for i in range(n)]
    return ctx.grad_graph(gradient)


STACK = OpSchema(
    "stack",
    inputs=("xs",),
    variadic=True,
    attrs={"axis": AttrSpec("int", 0, "where the new axis stands in the output (negative counts from its end)")},
    shape_infer=_stack_shape,
    kernels={"cpu": lambda ctx: _joining_kernel(ctx, np.stack, _concat_axis(ctx, 1))},
    gradient=_stack_gradient,
    traits=("accepts_out", "any_shape_gradient"),
    doc="The inputs (one or more of one shape, passed positionally: stack(a, b, axis=-1)) joined along a new axis.",
    examples=[Example(["f32[2, 3]", "f32[2, 3]"]),
              Example(["f32[4]", "f32[4]", "f32[4]"], {"axis": -1}),
              Example(["f64[]", "f64[]"], note="scalars to a vector")],
)

SCHEMAS = [SLICE, SLICE_GRAD, PAD, CONCAT, STACK]
