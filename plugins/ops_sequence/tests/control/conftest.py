"""Fixtures for the control-flow tests: a registry with ``nograd``, a float op that declares no gradient
(for the missing-gradient path errors), on top of the installed packs."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Example, OpSchema


NOGRAD = OpSchema(
    "nograd", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: np.floor},
    not_differentiable="a step function", examples=[Example(["f64[3]"])],
)


@pytest.fixture(scope="session")
def registry():
    """The installed packs plus the test op ``nograd``."""
    reg = fc.load_registry(audit=False)
    NOGRAD.pack = "tests"
    reg.schemas[NOGRAD.name] = NOGRAD
    return reg


@pytest.fixture(autouse=True, scope="module")
def _use_registry(registry):
    with fc.use_registry(registry):
        yield
