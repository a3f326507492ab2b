"""Fixtures for the control-flow tests: derivative helpers, and a registry with two test ops.

``less`` is ``ops.less`` when frame-ops-basic provides comparisons, else a
test op with numpy's semantics (comparisons are another issue's work; the
data-dependent loops here only need one). ``nograd`` is a float op that
declares no gradient, for the missing-gradient path errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema, TensorType


def _less_shape(ctx):
    a, b = ctx.input_types
    if a != b:
        raise ctx.error(f"compares two values of one type, got {a} and {b}")
    return [TensorType("bool", a.shape)]


def _less_kernel(ctx):
    return lambda a, b: np.asarray(np.less(a, b))


TEST_LESS = OpSchema(
    "cf_less", inputs=("a", "b"), shape_infer=_less_shape, kernels={"cpu": _less_kernel},
    not_differentiable="outputs carry no gradient", examples=[Example(["f64[3]", "f64[3]"])],
)

NOGRAD = OpSchema(
    "nograd", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: np.floor},
    not_differentiable="a step function", examples=[Example(["f64[3]"])],
)


@pytest.fixture(scope="session")
def registry():
    """The installed packs plus the test ops (``cf_less``, ``nograd``)."""
    reg = fc.load_registry(audit=False)
    for schema in (TEST_LESS, NOGRAD):
        schema.pack = "tests"
        reg.schemas[schema.name] = schema
    return reg


@pytest.fixture(autouse=True, scope="module")
def _use_registry(registry):
    with fc.use_registry(registry):
        yield
