"""Fixtures for the autodiff tests: a registry with extra ops (one without a gradient, one with a
non-differentiable input) on top of the installed packs."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema, ops


def _same(ctx):
    return [ctx.input_types[0]]


NOGRAD = OpSchema(
    "nograd", inputs=("x",), shape_infer=_same, kernels={"cpu": lambda ctx: np.floor},
    not_differentiable="a step function: its derivative is zero almost everywhere and undefined at the steps",
    examples=[Example(["f64[3]"])],
)

SCALE_AT = OpSchema(
    "scale_at", inputs=("x", "k"), shape_infer=_same, kernels={"cpu": lambda ctx: np.multiply},
    gradient=lambda ctx: ctx.grad_graph(lambda x, k, y, gy: [gy * k, None]),
    nondiff_inputs=(1,),
    examples=[Example(["f64[3]", "f64[3]"])],
)


@pytest.fixture(scope="session")
def registry_with_nograd():
    reg = fc.load_registry(audit=False)
    for schema in (NOGRAD, SCALE_AT):
        schema.pack = "tests"
        reg.schemas[schema.name] = schema
    return reg


__all__ = ["ops"]
