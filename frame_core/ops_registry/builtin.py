"""The core's own ops, registered through the same hook as any pack (ARCH-063).

``constant`` and ``accumulate_internal`` are what the core's transforms emit:
``build_backward_graph`` seeds the loss with ``constant(1)``, fills
unreachable ``wrt`` gradients with ``constant(0)`` and sums gradient
contributions with ``accumulate_internal``. With no pack installed, graphs made
of these ops can still be built, differentiated (to any order) and run.
"""

from __future__ import annotations

import numpy as np

from .hookspecs import hookimpl
from .schema import AttrSpec, Example, NodeContext, OpSchema
from ..ir.dtypes import as_dtype
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


ACCUMULATE = OpSchema(
    "accumulate_internal",
    inputs=("a", "b"),
    shape_infer=_accumulate_shape,
    kernels={"cpu": lambda ctx: np.add},
    gradient=lambda ctx: ctx.grad_graph(lambda a, b, y, gy: [gy, gy]),  # d(a+b) = (gy, gy)
    traits=("elementwise", "commutative", "accepts_out"),
    doc="Sum of two gradient contributions of the same type (emitted by build_backward_graph).",
    examples=[Example(["f32[3]", "f32[3]"]), Example(["f64[2, 2]", "f64[2, 2]"])],
)


@hookimpl
def frame_register_ops() -> list[OpSchema]:
    from ..compiler.fused import FUSED

    return [CONSTANT, ACCUMULATE, FUSED]
