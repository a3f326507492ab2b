"""Differentiating past an op's closure order names the op the user called (issue 17): the order-2
``MissingGradientError`` named only the op inside the first gradient (``step``, an ``_internal`` gradient op),
which the user never wrote."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema, ops
from frame_core.ops_registry.closure import run_closure_audit


def _same(ctx):
    return [ctx.input_types[0]]


STEP = OpSchema("o2_step_internal", inputs=("x",), shape_infer=_same,
                kernels={"cpu": lambda ctx: lambda x: np.asarray(x > 0, dtype=x.dtype)},
                examples=[Example(["f64[3]"])])
RAMP = OpSchema("o2_ramp", inputs=("x",), shape_infer=_same, kernels={"cpu": lambda ctx: lambda x: np.maximum(x, 0)},
                gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.o2_step_internal(x)),
                examples=[Example(["f64[3]"], min_abs=0.1)])


@pytest.fixture(scope="module")
def reg():
    registry = fc.load_registry(audit=False)
    for schema in (STEP, RAMP):
        schema.pack = "tests"
        registry.schemas[schema.name] = schema
    run_closure_audit(registry)
    assert registry.closure["o2_ramp"].order == 1
    return registry


def test_the_second_order_error_names_the_op_called(reg):
    with fc.use_registry(reg):
        forward = fc.trace(lambda x: ops.sum(ops.tanh(ops.o2_ramp(x))), "f64[3]")
        first = fc.build_backward_graph(forward, 0, [0])
        contracted, k = fc.add_scalar_contraction(first, 1)
        with pytest.raises(fc.MissingGradientError) as caught:
            fc.build_backward_graph(contracted, k, [0])
    message = str(caught.value)
    assert "(o2_step_internal) (no GradientFn registered)" in message
    assert "the gradient of o2_ramp uses it, so that op is differentiable to order 1 only " \
           "(o2_ramp -> o2_step_internal)" in message
    assert "tanh" not in message.split("no gradient:")[1]  # closed ops are not blamed


def test_first_order_errors_are_unchanged(reg):
    with fc.use_registry(reg):
        forward = fc.trace(lambda x: ops.sum(ops.o2_step_internal(x)), "f64[3]")
        with pytest.raises(fc.MissingGradientError) as caught:
            fc.build_backward_graph(forward, 0, [0])
    assert "uses it" not in str(caught.value)  # the user called the op themselves: nothing else to name
