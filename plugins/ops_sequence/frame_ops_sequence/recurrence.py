"""Cumsum, linear_scan and selective_scan.

``linear_scan(a, b; axis, reverse=False)`` is the one recurrence primitive:
``h_t = a_t h_{t-1} + b_t`` along ``axis`` with ``h_{-1} = 0`` (with
``reverse`` the walk runs from the end: ``h_t = a_t h_{t+1} + b_t``). Its
gradient is again a linear scan, in the other direction, plus shifts and
products, so the op is closed under differentiation (research note §4.3).

``cumsum`` is the scan with ``a = 1``; it is its own op because its gradient
is simply the reverse cumsum (JAX's ``_cumsum_transpose_rule``).

``selective_scan`` follows Mamba's ``selective_scan_ref`` for real ``A``; its
forward kernel is fused (``_scan.selective_scan_forward``). Its GradientFn runs
the forward again saving ``a`` and ``h`` (``selective_scan_saving_internal``,
merged with the forward node by ``recurrence_passes``) and Mamba's backward as
one numpy kernel (``selective_scan_backward_internal``); both internal ops
differentiate the same mathematics written with ``linear_scan`` and elementwise
ops (``_selective._Math``), which half precision uses directly. See
``docs/sequence.md``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import (
    AttrSpec, Example, Graph, NodeContext, OpSchema, Tensor, TensorType, current_graph, inline_graph, ops,
)

from ._common import as_out, compute_dtype, normalize_axis, require_float, require_numeric, shift
from ._scan import linear_scan, selective_scan_backward, selective_scan_forward, selective_scan_saving
from ._selective import OPTIONAL, Layout, _Math, layout, selective_scan_gradient
from ._selective_jvp import selective_scan_jvp

_AXIS = AttrSpec("int", doc="the axis to scan along (negative counts from the end)")
_REVERSE = AttrSpec("bool", False, "scan from the last element to the first")


# -- cumsum -------------------------------------------------------------------------------------------
def _cumsum_shape(ctx: NodeContext) -> list[TensorType]:
    x = require_numeric(ctx, 0)
    normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    return [x]


def _cumsum_kernel(ctx: NodeContext) -> Callable:
    (x_t,) = ctx.input_types
    axis = normalize_axis(ctx, ctx.attrs["axis"], x_t.rank)
    reverse, exclusive = ctx.attrs["reverse"], ctx.attrs["exclusive"]
    acc = compute_dtype(x_t)
    n = x_t.shape[axis]

    def along(a: np.ndarray, start: int, stop: int) -> np.ndarray:
        index = [slice(None)] * a.ndim
        index[axis] = slice(start, stop)
        return a[tuple(index)]

    def kernel(x: np.ndarray) -> np.ndarray:
        out = np.empty(x_t.shape, acc)
        src, dst = (np.flip(x, axis), np.flip(out, axis)) if reverse else (x, out)
        if exclusive:  # y_t = sum of x_s for s < t: the inclusive sum shifted one place, 0 first
            along(dst, 0, 1)[...] = 0
            if n > 1:
                np.cumsum(along(src, 0, n - 1), axis=axis, dtype=acc, out=along(dst, 1, n))
        else:
            np.cumsum(src, axis=axis, dtype=acc, out=dst)
        return as_out(out, x_t)
    return kernel


def _cumsum_gradient(ctx: NodeContext):
    attrs = ctx.attrs
    # gx = cumsum(gy, reverse=not reverse): x_s reaches every y_t at or after s (before s, if reversed)
    return ctx.grad_graph(lambda x, y, gy: ops.cumsum(gy, axis=attrs["axis"], reverse=not attrs["reverse"],
                                                      exclusive=attrs["exclusive"]))


CUMSUM = OpSchema(
    "cumsum",
    inputs=("x",),
    attrs={"axis": _AXIS, "reverse": _REVERSE,
           "exclusive": AttrSpec("bool", False, "leave each element out of its own sum (the first sum is 0)")},
    shape_infer=_cumsum_shape,
    kernels={"cpu": _cumsum_kernel},
    gradient=_cumsum_gradient,
    traits=("any_shape_gradient",),
    doc="Running sum along `axis`: y_t = sum of x_s for s <= t (s < t if exclusive; s >= t or s > t if reverse). "
        "Half precision sums in float32.",
    examples=[
        Example(["f32[3, 5]"], {"axis": 1}),
        Example(["f32[4, 2, 3]"], {"axis": 0, "reverse": True}),
        Example(["f64[6]"], {"axis": 0, "exclusive": True}),
        Example(["f64[2, 5]"], {"axis": -1, "reverse": True, "exclusive": True}),
    ],
)


# -- linear_scan --------------------------------------------------------------------------------------
def _linear_scan_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = require_float(ctx, 0), require_float(ctx, 1)
    if a != b:
        raise ctx.error(f"a and b must have one type (the scan multiplies and adds them elementwise), got {a} and "
                        f"{b}; broadcast a to b's shape first")
    if a.rank == 0:
        raise ctx.error(f"needs an axis to scan along, got scalars {a}")
    normalize_axis(ctx, ctx.attrs["axis"], a.rank)
    return [b]


def _linear_scan_kernel(ctx: NodeContext) -> Callable:
    t = ctx.input_types[1]
    axis = normalize_axis(ctx, ctx.attrs["axis"], t.rank)
    reverse = ctx.attrs["reverse"]
    acc = compute_dtype(t)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return as_out(linear_scan(a, b, axis, reverse, acc), t)
    return kernel


def _linear_scan_gradient(ctx: NodeContext):
    axis = normalize_axis(ctx, ctx.attrs["axis"], ctx.input_types[1].rank)
    reverse = ctx.attrs["reverse"]
    step = -1 if reverse else 1  # h_t reads h_{t-step}

    def grad(a, b, h, gh):
        # lam_t = gh_t + a_{t+step} lam_{t+step}: a scan the other way over a shifted one place back
        lam = ops.linear_scan(shift(a, axis, -step), gh, axis=axis, reverse=not reverse)
        return [lam * shift(h, axis, step), lam]  # ga_t = lam_t h_{t-step}, gb = lam
    return ctx.grad_graph(grad)


LINEAR_SCAN = OpSchema(
    "linear_scan",
    inputs=("a", "b"),
    attrs={"axis": _AXIS, "reverse": _REVERSE},
    shape_infer=_linear_scan_shape,
    kernels={"cpu": _linear_scan_kernel},
    gradient=_linear_scan_gradient,
    doc="The linear recurrence h_t = a_t * h_{t-1} + b_t along `axis`, h_{-1} = 0 (h_t = a_t * h_{t+1} + b_t "
        "if reverse). a and b have one type. Half precision is computed in float32.",
    examples=[
        Example(["f32[6, 3]", "f32[6, 3]"], {"axis": 0}),
        Example(["f32[2, 5, 3]", "f32[2, 5, 3]"], {"axis": 1, "reverse": True}),
        Example(["f64[7]", "f64[7]"], {"axis": 0}, low=-1.5, high=1.5),
        Example(["f64[3, 4]", "f64[3, 4]"], {"axis": -1, "reverse": True}),
    ],
)


# -- selective_scan -----------------------------------------------------------------------------------
def _selective_shape(ctx: NodeContext) -> list[TensorType]:
    return [layout(ctx).u]


def _selective_kernel(ctx: NodeContext) -> Callable:
    lay = layout(ctx)
    acc = compute_dtype(lay.u)
    softplus = ctx.attrs["delta_softplus"]

    def kernel(*xs: np.ndarray) -> np.ndarray:
        u, delta, A, B, C = xs[:5]
        extra = dict(zip(lay.optional, xs[5:]))
        out = selective_scan_forward(u, delta, A, B, C, extra.get("D"), extra.get("z"), extra.get("delta_bias"),
                                     softplus, lay.groups, acc)
        return as_out(out, lay.u)
    return kernel


SELECTIVE_SCAN = OpSchema(
    "selective_scan",
    inputs=("u", "delta", "A", "B", "C", "optional"),
    outputs=("out",),
    attrs={
        "delta_softplus": AttrSpec("bool", False, "delta <- softplus(delta + delta_bias) before the scan"),
        "optional_inputs": AttrSpec("strs", None, "which of D, z, delta_bias follow C, in order; none: the first "
                                                  "k of (D, z, delta_bias) for k extra inputs"),
    },
    shape_infer=_selective_shape,
    kernels={"cpu": _selective_kernel},
    # Mamba's backward: adjoint lam = reverse linear_scan of C^T gy over exp(delta A) shifted one step; see _selective
    gradient=selective_scan_gradient,
    jvp=selective_scan_jvp,  # a second scan over the same decays, batch free (_selective_jvp)
    variadic=True,
    traits=("any_shape_gradient",),
    doc="Mamba's selective scan (selective_scan_ref, real A): h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t, "
        "y_t = C_t h_t + D u_t, out = y * silu(z). u, delta, z: [batch, D, L]; A: [D, N]; B, C: [batch, N, L], "
        "[batch, G, N, L] (each its own G dividing D) or [D, N]; D, delta_bias: [D]. D, z and delta_bias are "
        "optional (optional_inputs).",
    examples=[
        Example(["f32[2, 4, 5]", "f32[2, 4, 5]", "f32[4, 3]", "f32[2, 3, 5]", "f32[2, 3, 5]", "f32[4]", "f32[2, 4, 5]",
                 "f32[4]"], {"delta_softplus": True}, note="all inputs, variable B and C"),
        Example(["f64[1, 2, 6]", "f64[1, 2, 6]", "f64[2, 3]", "f64[1, 3, 6]", "f64[1, 3, 6]"],
                low=0.1, high=0.9, note="no optional inputs"),
        Example(["f64[2, 4, 4]", "f64[2, 4, 4]", "f64[4, 2]", "f64[2, 2, 2, 4]", "f64[4, 2]", "f64[2, 4, 4]"],
                {"optional_inputs": ["z"]}, note="grouped B, constant C, gate only"),
        Example(["f64[1, 4, 3]", "f64[1, 4, 3]", "f64[4, 2]", "f64[1, 2, 2, 3]", "f64[1, 4, 2, 3]", "f64[4]"],
                note="B and C grouped apart (2 and 4 groups)"),
    ],
)

# -- selective_scan's gradient kernels --------------------------------------------------------------------
# selective_scan's GradientFn (float32/float64) emits the pair below: the forward again, also returning a = exp(delta A)
# and the state h, and Mamba's backward over them in one numpy kernel. The pass merge_selective_scan_saving makes
# the forward node itself the saving one, so a training graph scans forward once and backward once. Their own
# GradientFns differentiate the same mathematics written with frame ops (_selective._Math), so selective_scan stays
# closed to any order.
def _types(types) -> str:  # noqa: ANN001
    return "[" + ", ".join(map(str, types)) + "]"


def _first_inputs(ctx: NodeContext, count: int) -> NodeContext:
    """``ctx`` seen through its first ``count`` inputs (the selective_scan inputs of a gradient op)."""
    return NodeContext(ctx.schema, ctx.input_types[:count], ctx.attrs)


def _state_type(lay: Layout) -> TensorType:
    return lay.u.with_shape((lay.length, lay.batch, lay.groups, lay.dim // lay.groups, lay.n))


def _fast_layout(ctx: NodeContext, count: int) -> Layout:
    lay = layout(_first_inputs(ctx, count))
    if lay.u.dtype.name not in ("float32", "float64"):
        raise ctx.error(f"computes in float32 or float64 only, got {lay.u}; half precision takes selective_scan's "
                        "composite gradient")
    return lay


def _saving_shape(ctx: NodeContext) -> list[TensorType]:
    lay = _fast_layout(ctx, len(ctx.input_types))
    return [lay.u, _state_type(lay), _state_type(lay), lay.u, lay.u]


def _backward_shape(ctx: NodeContext) -> list[TensorType]:
    n = len(ctx.input_types) - 5
    if n < 5:
        raise ctx.error(f"takes selective_scan's inputs, then a, h, dt, y and the output's cotangent; got "
                        f"{n + 5} inputs")
    lay = _fast_layout(ctx, n)
    state = _state_type(lay)
    want = [state, state, lay.u, lay.u, lay.u]
    if list(ctx.input_types[n:]) != want:
        raise ctx.error(f"a, h, dt, y and the cotangent must be {_types(want)}, got {_types(ctx.input_types[n:])}")
    return list(ctx.input_types[:n])


def _saving_kernel(ctx: NodeContext) -> Callable:
    lay = layout(ctx)
    softplus = ctx.attrs["delta_softplus"]
    dtype = lay.u.dtype.np

    def kernel(*xs: np.ndarray) -> tuple[np.ndarray, ...]:
        extra = dict(zip(lay.optional, xs[5:]))
        out, a, h, dt, y = selective_scan_saving(xs[0], xs[1], xs[2], xs[3], xs[4], extra.get("D"), extra.get("z"),
                                                 extra.get("delta_bias"), softplus, lay.groups, dtype)
        out = as_out(out, lay.u)
        return out, a, h, _own(dt, (*xs, out)), _own(y, (*xs, out))
    return kernel


def _own(x: np.ndarray, others: tuple[np.ndarray, ...]) -> np.ndarray:
    """``x`` C-contiguous and sharing memory with none of ``others`` (the kernel's inputs, its other outputs):
    itself when it already is (a fresh array), else a copy."""
    if x.flags.c_contiguous and not any(np.may_share_memory(x, o) for o in others):
        return x
    return np.array(x, order="C")


def _backward_kernel(ctx: NodeContext) -> Callable:
    n = len(ctx.input_types) - 5
    lay = layout(_first_inputs(ctx, n))
    softplus = ctx.attrs["delta_softplus"]
    forms = (lay.b_form, lay.c_form, lay.b_groups, lay.c_groups)
    dtype = lay.u.dtype.np
    types = ctx.input_types[:n]

    def kernel(*xs: np.ndarray) -> tuple[np.ndarray, ...]:
        a, h, dt, y_pre, gout = xs[n:]
        grads = selective_scan_backward(list(xs[:n]), a, h, dt, y_pre, gout, lay.optional, forms, softplus,
                                        lay.groups, dtype)
        return tuple(as_out(np.ascontiguousarray(g), t) for g, t in zip(grads, types))
    return kernel


def _by_composite(composite: Callable[[NodeContext], Callable[..., list]]) -> Callable[[NodeContext], Graph]:
    """A GradientFn: the VJP of ``composite(ctx)``, the op's outputs written with frame ops (closed to any order)."""
    def gradient(ctx: NodeContext):
        n_in, n_out = len(ctx.input_types), len(ctx.output_types)
        fn = composite(ctx)

        def grad(*args: Tensor) -> list:
            # (autodiff and body tracing load when a gradient is built, not with the pack)
            from frame_core import build_vjp_graph, trace_body

            body = trace_body(lambda *xs: fn(*xs), list(ctx.input_types), name=f"{ctx.op}_composite",
                              role=f"composite of {ctx.op}")
            graph = current_graph()
            arguments = [t.value for t in (*args[:n_in], *args[n_in + n_out:])]  # (xs.., gys..): the VJP's inputs
            outs = inline_graph(graph, build_vjp_graph(body.graph), arguments)
            return [Tensor(v, graph) for v in outs]
        return ctx.grad_graph(grad)
    return gradient


def _saving_composite(ctx: NodeContext) -> Callable[..., list]:
    lay = layout(ctx)
    fm = _Math(lay, ctx.attrs["delta_softplus"], list(ctx.input_types))
    attrs = {"delta_softplus": ctx.attrs["delta_softplus"], "optional_inputs": list(lay.optional)}
    return lambda *xs: [ops.selective_scan(*xs, **attrs), *fm.saved(xs)]


def _backward_composite(ctx: NodeContext) -> Callable[..., list]:
    n = len(ctx.input_types) - 5
    lay = layout(_first_inputs(ctx, n))
    fm = _Math(lay, ctx.attrs["delta_softplus"], list(ctx.input_types[:n]))
    return lambda *xs: fm.backward(xs[:n], xs[n], xs[n + 1], xs[n + 4], dt=xs[n + 2], y_pre=xs[n + 3])


def optional_names(node_attrs: dict, count: int) -> tuple[str, ...]:
    """The optional inputs of a selective_scan node with ``count`` inputs after C (its attribute, or the default)."""
    given = node_attrs.get("optional_inputs")
    return tuple(given) if given is not None else OPTIONAL[:count]


_SS_ATTRS = {
    "delta_softplus": AttrSpec("bool", False, "delta <- softplus(delta + delta_bias) before the scan"),
    "optional_inputs": AttrSpec("strs", None, "which of D, z, delta_bias follow C, in order; none: the first "
                                              "k of (D, z, delta_bias) for k extra inputs"),
}
_EX_ALL = ["f32[2, 4, 5]", "f32[2, 4, 5]", "f32[4, 3]", "f32[2, 3, 5]", "f32[2, 3, 5]", "f32[4]", "f32[2, 4, 5]",
           "f32[4]"]
# the attributes selective_scan's GradientFn gives these ops (it names the optional inputs): the examples are then
# the very nodes its own examples' gradients hold, which the closure audit instantiates once, not twice
_EX_ALL_ATTRS = {"delta_softplus": True, "optional_inputs": ["D", "z", "delta_bias"]}
_EX_GROUPED = ["f64[2, 4, 4]", "f64[2, 4, 4]", "f64[4, 2]", "f64[2, 2, 2, 4]", "f64[4, 2]", "f64[2, 4, 4]"]

SELECTIVE_SCAN_SAVING = OpSchema(
    "selective_scan_saving_internal",
    inputs=("u", "delta", "A", "B", "C", "optional"),
    outputs=("out", "a", "h", "dt", "y"),
    attrs=_SS_ATTRS,
    shape_infer=_saving_shape,
    kernels={"cpu": _saving_kernel},
    gradient=_by_composite(_saving_composite),
    decomposition=lambda ctx: ctx.decomposition_graph(_saving_composite(ctx)),  # (how frame-onnx exports it)
    variadic=True,
    doc="selective_scan's forward (float32/float64) that also returns a = exp(delta A) and the state h, time-major "
        "(L, batch, G, D/G, N), the step dt (softplus(delta + delta_bias) if delta_softplus) and y = C h + D u (the "
        "output before the gate), for selective_scan_backward_internal; made by selective_scan's GradientFn.",
    examples=[Example(_EX_ALL, _EX_ALL_ATTRS, note="all inputs, variable B and C"),
              Example(_EX_GROUPED, {"optional_inputs": ["z"]}, note="grouped B, constant C, gate only")],
)

SELECTIVE_SCAN_BACKWARD = OpSchema(
    "selective_scan_backward_internal",
    inputs=("values",),
    outputs=("grads",),
    attrs=_SS_ATTRS,
    shape_infer=_backward_shape,
    kernels={"cpu": _backward_kernel},
    gradient=_by_composite(_backward_composite),
    decomposition=lambda ctx: ctx.decomposition_graph(_backward_composite(ctx)),
    variadic=True,
    doc="Mamba's backward of selective_scan over the saved values: (selective_scan's inputs.., a, h, dt, y, g_out) "
        "-> one gradient per selective_scan input; made by selective_scan's GradientFn (float32/float64).",
    examples=[Example([*_EX_ALL, "f32[5, 2, 1, 4, 3]", "f32[5, 2, 1, 4, 3]", *["f32[2, 4, 5]"] * 3],
                      _EX_ALL_ATTRS, note="all inputs, variable B and C"),
              Example([*_EX_GROUPED, "f64[4, 2, 2, 2, 2]", "f64[4, 2, 2, 2, 2]", *["f64[2, 4, 4]"] * 3],
                      {"optional_inputs": ["z"]}, note="grouped B, constant C, gate only")],
)

SCHEMAS = [CUMSUM, LINEAR_SCAN, SELECTIVE_SCAN, SELECTIVE_SCAN_SAVING, SELECTIVE_SCAN_BACKWARD]
