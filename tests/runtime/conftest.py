"""Runtime tests run against core + ops_basic plus two test ops, made current for every test.

``explode(x)`` raises ``ValueError`` when an element is negative (a kernel failure) and
``DataError`` when one is above 1e6 (the caller's data at fault); ``call(x; body)``
runs its ``body`` graph through its own compiled executable (as a control-flow op would).
"""

from __future__ import annotations

import numpy as np
import pytest

from frame_core.errors import DataError

from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import Registry, use_registry
from frame_core.ops_registry.schema import AttrSpec, Example, OpSchema


def _explode_kernel(ctx):
    def kernel(x: np.ndarray) -> np.ndarray:
        if np.any(x < 0):
            raise ValueError("negative input")
        if np.any(x > 1e6):
            raise DataError(f"x holds {x.max()}, above the limit 1e6")
        return x.copy()
    return kernel


EXPLODE = OpSchema(
    "explode", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": _explode_kernel},
    not_differentiable="a runtime-test op", examples=[Example(["f32[3]"])],
    doc="x, or ValueError when an element is negative",
)


def _call_kernel(ctx):
    import frame_core

    body = frame_core.compile(ctx.attrs["body"], opt_level=0, cache=False)
    return lambda x: body.run([x])[0]


CALL = OpSchema(
    "call", inputs=("x",), attrs={"body": AttrSpec("graph")}, shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={"cpu": _call_kernel}, not_differentiable="a runtime-test op", doc="body(x)",
)


@pytest.fixture(scope="session")
def runtime_registry() -> Registry:
    basic = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    reg = load_registry(entry_points=basic, environ={}, strict=True, audit=False)
    for schema in (EXPLODE, CALL):
        schema.pack = "runtime_tests"
        reg.schemas[schema.name] = schema
    return reg


@pytest.fixture(autouse=True)
def _current_registry(runtime_registry: Registry):
    with use_registry(runtime_registry):
        yield runtime_registry
