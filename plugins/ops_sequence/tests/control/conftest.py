"""Fixtures for the control-flow tests: a registry with ``nograd``, a float op that declares no gradient
(for the missing-gradient path errors), and ``record``, an identity with a side effect (it appends what it
sees to ``RECORDED``), on top of the installed packs."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema


NOGRAD = OpSchema(
    "nograd", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: np.floor},
    not_differentiable="a step function", examples=[Example(["f64[3]"])],
)


#: Every array ``record`` saw, in order (tests clear it).
RECORDED: list[np.ndarray] = []


def _record_kernel(ctx):  # noqa: ANN001, ANN202
    def kernel(x):  # noqa: ANN001, ANN202
        RECORDED.append(np.array(x, copy=True))
        return x.copy()
    return kernel


RECORD = OpSchema(
    "record", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": _record_kernel},
    traits=("has_side_effect",), not_differentiable="a side effect", examples=[Example(["f64[3]"])],
)


@pytest.fixture(scope="session")
def registry():
    """The installed packs plus the test ops ``nograd`` and ``record``."""
    reg = fc.load_registry(audit=False)
    for schema in (NOGRAD, RECORD):
        schema.pack = "tests"
        reg.schemas[schema.name] = schema
    return reg


@pytest.fixture
def recorded():
    """What ``record`` saw during the test."""
    RECORDED.clear()
    yield RECORDED
    RECORDED.clear()


@pytest.fixture(autouse=True, scope="module")
def _use_registry(registry):
    with fc.use_registry(registry):
        yield
