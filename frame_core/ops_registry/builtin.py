"""The core's own ops, registered through the same hook as any pack (ARCH-063).

These are what the core's transforms emit: ``build_backward_graph`` seeds the
loss with ``constant(1)``, gives unreachable ``wrt`` gradients and the unused
outputs of a multi-output op ``zeros_like_internal`` (zeros of a value's type,
read from the value: shape-free, so a training graph runs at any batch size;
compiled, it is ``constant(0)`` again) and sums gradient contributions with
``accumulate_internal``;
``add_scalar_contraction`` (higher order, ARCH-067) and the numerical-check kit
contract a tensor to a scalar with ``weighted_sum_internal``, whose gradient
``weighted_broadcast_internal`` closes the pair. The compile pipeline emits
``fused_elementwise_internal``. With no pack installed, graphs made of these
ops can still be built, differentiated to any order and run, and a pack can be
checked by the conformance kit without any other pack.
"""

from __future__ import annotations

import numpy as np

from ..frontend.trace import apply
from .hookspecs import hookimpl
from .schema import AttrSpec, Example, NodeContext, OpSchema
from ..ir.dtypes import as_dtype
from ..ir.tensors import zeros as zero_array
from ..ir.types import TensorType

FRAME_PLUGIN_API = "1.0"


# constant() -> y : the tensor held in the `value` attribute.
def _constant_shape(ctx: NodeContext) -> list[TensorType]:
    value = ctx.attrs["value"]
    return [TensorType(as_dtype(value.dtype), value.shape)]


def _constant_kernel(ctx: NodeContext):
    value = ctx.attrs["value"]
    return lambda: value


CONSTANT = OpSchema(
    "constant",
    inputs=(),
    attrs={"value": AttrSpec("tensor", doc="the tensor to produce")},
    shape_infer=_constant_shape,
    kernels={"cpu": _constant_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda *_: []),  # no inputs, so no gradients
    doc="A tensor constant. Produces the array in its `value` attribute; it has no inputs, so its gradient is empty.",
    examples=[Example([], {"value": np.array([1.0, 2.0], np.float32)})],
)


# accumulate_internal(a, b) -> a + b, same types (gradient accumulation).
def _accumulate_shape(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    if a != b:
        raise ctx.error(f"sums two values of one type, got {a} and {b}")
    return [a]


def _accumulate_kernel(ctx: NodeContext):
    t = ctx.input_types[0]
    if t.shape:
        return np.add
    dtype = t.dtype.np  # np.add on 0-d arrays returns a numpy scalar; kernels return arrays
    return lambda a, b, out=None: np.add(a, b, out=out if out is not None else np.empty((), dtype))


ACCUMULATE = OpSchema(
    "accumulate_internal",
    inputs=("a", "b"),
    shape_infer=_accumulate_shape,
    kernels={"cpu": _accumulate_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda a, b, y, gy: [gy, gy]),  # d(a+b) = (gy, gy)
    traits=("elementwise", "commutative", "accepts_out", "any_shape_gradient"),
    doc="Sum of two gradient contributions of the same type (emitted by build_backward_graph).",
    examples=[Example(["f32[3]", "f32[3]"]), Example(["f64[2, 2]", "f64[2, 2]"])],
)


# zeros_like_internal(x) -> zeros of x's type; x is read for its type only.
#   compiled: the constant zeros of x's compiled type (the core's decompose stage lowers it at every level)
def _zeros_like_kernel(ctx: NodeContext):
    (x,) = ctx.input_types
    return lambda a: np.zeros(x.shape, x.dtype.np)


def _zeros_like_decomposition(ctx: NodeContext):
    zeros = zero_array(ctx.input_types[0])
    return ctx.decomposition_graph(lambda x: apply("core::constant", value=zeros))


ZEROS_LIKE = OpSchema(
    "zeros_like_internal",
    inputs=("x",),
    shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={"cpu": _zeros_like_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: [None]),  # y does not depend on x's values
    decomposition=_zeros_like_decomposition,
    traits=("any_shape_gradient",),  # (not shape_operand: the core's decompose stage lowers it, dropping what
                                     # computed its operand only for its type)
    doc="Zeros of x's type, x read for its type only: the zero cotangent the core's transforms give a value no "
        "loss reads (emitted by build_backward_graph); specialised, it follows x's new shape; compiled, it is a "
        "constant.",
    examples=[Example(["f32[3]"]), Example(["f64[2, 2]"]), Example(["i64[4]"])],
)


# weighted_sum_internal(x; weights) -> sum(weights * x): a scalar of x's dtype.
#   gradient: gx = weighted_broadcast_internal(gy; weights)
def _weights_of(ctx: NodeContext) -> np.ndarray:
    return ctx.attrs["weights"]


def _weighted_sum_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    w = _weights_of(ctx)
    if not x.dtype.is_float or tuple(w.shape) != x.shape:
        raise ctx.error(f"needs a floating input with the weights' shape {list(w.shape)}, got {x}")
    return [TensorType(x.dtype, ())]


def _weighted_sum_kernel(ctx: NodeContext):
    (x,) = ctx.input_types
    wide = np.float32 if x.dtype.itemsize == 2 else x.dtype.np  # half precision accumulates in float32
    w = np.ascontiguousarray(_weights_of(ctx), wide).reshape(-1)
    dtype = x.dtype.np
    return lambda a: np.asarray(np.dot(w, np.asarray(a, wide).reshape(-1)), dtype)


# weighted_broadcast_internal(g; weights) -> g * weights: g is a scalar, the result has the weights' shape.
#   gradient: gg = weighted_sum_internal(ggx; weights)
def _weighted_broadcast_shape(ctx: NodeContext) -> list[TensorType]:
    (g,) = ctx.input_types
    if g.shape != () or not g.dtype.is_float:
        raise ctx.error(f"needs a floating scalar, got {g}")
    return [TensorType(g.dtype, _weights_of(ctx).shape)]


def _weighted_broadcast_kernel(ctx: NodeContext):
    (g,) = ctx.input_types
    dtype = g.dtype.np
    w = np.asarray(_weights_of(ctx), dtype)

    def kernel(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.multiply(w, a, out if out is not None else np.empty(w.shape, dtype))
    return kernel


_WEIGHTS = AttrSpec("tensor", doc="the contraction weights (the shape of the contracted tensor)")

WEIGHTED_SUM = OpSchema(
    "weighted_sum_internal",
    inputs=("x",),
    attrs={"weights": _WEIGHTS},
    shape_infer=_weighted_sum_shape,
    kernels={"cpu": _weighted_sum_kernel},
    gradient=lambda ctx: ctx.grad_graph(
        lambda x, y, gy: apply("weighted_broadcast_internal", gy, weights=_weights_of(ctx))),
    doc="sum(weights * x): the scalar contraction the core's transforms and the check kit use.",
    examples=[Example(["f32[3, 2]"], {"weights": np.arange(6, dtype=np.float32).reshape(3, 2)}),
              Example(["f64[]"], {"weights": np.array(2.0)})],
)

WEIGHTED_BROADCAST = OpSchema(
    "weighted_broadcast_internal",
    inputs=("g",),
    attrs={"weights": _WEIGHTS},
    shape_infer=_weighted_broadcast_shape,
    kernels={"cpu": _weighted_broadcast_kernel},
    gradient=lambda ctx: ctx.grad_graph(
        lambda g, y, gy: apply("weighted_sum_internal", gy, weights=_weights_of(ctx))),
    traits=("accepts_out",),
    doc="g * weights for a scalar g: the gradient of weighted_sum_internal.",
    examples=[Example(["f32[]"], {"weights": np.arange(6, dtype=np.float32).reshape(3, 2)})],
)


@hookimpl
def frame_register_ops() -> list[OpSchema]:
    from ..compiler.fused import FUSED

    return [CONSTANT, ACCUMULATE, ZEROS_LIKE, WEIGHTED_SUM, WEIGHTED_BROADCAST, FUSED]


# The core's ops are `core::...` from the start (the loader sets it too), so `core::constant` resolves even in a
# registry assembled by hand.
for _schema in (CONSTANT, ACCUMULATE, ZEROS_LIKE, WEIGHTED_SUM, WEIGHTED_BROADCAST):
    _schema.namespace = "core"
