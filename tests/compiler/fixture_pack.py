"""A small op pack for the pipeline tests, loaded through the real loader from a fake entry point.

``toy_double``  2x, elementwise, kernels for ``cpu`` and the fake backend ``toy``
``toy_add``     a + b (one type), elementwise, kernels for ``cpu`` and ``toy``
``toy_quad``    4x, a ``cpu`` kernel only, DecomposeFn ``toy_double(toy_double(x))``
``cpu_only``    x + 1, a ``cpu`` kernel only and no DecomposeFn
``bad_decomp``  a ``cpu`` kernel only, a DecomposeFn returning the wrong type
``self_decomp`` a ``cpu`` kernel only, a DecomposeFn made of itself (never terminates)
``record``      identity that appends each input it sees to ``RECORDED`` (``has_side_effect``)
``fail_at_run`` a kernel that raises ``ValueError`` (for ``KernelError``)

The registry also holds ``core`` and ``ops_basic`` (the real pack), so graphs
can mix fixture and ordinary ops.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import Registry
from frame_core.ops_registry.schema import Example, NodeContext, OpSchema
from ..fakes import FakeEntryPoint

FIXTURE = "a pipeline-test fixture op"
#: Every array the ``record`` op saw, in order (tests clear it).
RECORDED: list[np.ndarray] = []


def _same_type(ctx: NodeContext) -> list[Any]:
    if len(set(ctx.input_types)) != 1:
        raise ctx.error(f"expects inputs of one type, got {', '.join(map(str, ctx.input_types))}")
    return [ctx.input_types[0]]


def _times(factor: float) -> Callable[[NodeContext], Callable[..., np.ndarray]]:
    def build(ctx: NodeContext) -> Callable[..., np.ndarray]:
        k = ctx.input_types[0].dtype.np.type(factor)
        return lambda x, out=None: np.multiply(x, k, out=out)
    return build


def _quad_decomposition(ctx: NodeContext):
    from frame_core.frontend.trace import apply

    return ctx.decomposition_graph(lambda x: apply("toy_double", apply("toy_double", x)))


def _bad_decomposition(ctx: NodeContext):
    from frame_core.frontend.trace import apply

    return ctx.decomposition_graph(lambda x: apply("reshape", x, shape=[1, -1]))


def _self_decomposition(ctx: NodeContext):
    from frame_core.frontend.trace import apply

    return ctx.decomposition_graph(lambda x: apply("self_decomp", x))


def _record_kernel(ctx: NodeContext) -> Callable[[np.ndarray], np.ndarray]:
    def kernel(x: np.ndarray) -> np.ndarray:
        RECORDED.append(np.array(x, copy=True))
        return x.copy()
    return kernel


def _failing_kernel(ctx: NodeContext) -> Callable[[np.ndarray], np.ndarray]:
    def kernel(x: np.ndarray) -> np.ndarray:
        raise ValueError("fixture kernel failure")
    return kernel


def make_schemas() -> list[OpSchema]:
    """Fresh schemas (the loader writes ``pack`` into them, so never share them between registries)."""
    one = [Example(["f32[3]"])]
    return [
        OpSchema("toy_double", inputs=("x",), shape_infer=_same_type, kernels={"cpu": _times(2.0), "toy": _times(2.0)},
                 traits=("elementwise", "accepts_out"), not_differentiable=FIXTURE, examples=one, doc="2x"),
        OpSchema("toy_add", inputs=("a", "b"), shape_infer=_same_type,
                 kernels={"cpu": lambda ctx: np.add, "toy": lambda ctx: np.add},
                 traits=("elementwise", "accepts_out", "commutative"), not_differentiable=FIXTURE,
                 examples=[Example(["f32[3]", "f32[3]"])], doc="a + b"),
        OpSchema("toy_quad", inputs=("x",), shape_infer=_same_type, kernels={"cpu": _times(4.0)},
                 decomposition=_quad_decomposition, not_differentiable=FIXTURE, examples=one, doc="4x"),
        OpSchema("cpu_only", inputs=("x",), shape_infer=_same_type, kernels={"cpu": lambda ctx: lambda x: x + 1},
                 not_differentiable=FIXTURE, examples=one, doc="x + 1"),
        OpSchema("bad_decomp", inputs=("x",), shape_infer=_same_type, kernels={"cpu": _times(1.0)},
                 decomposition=_bad_decomposition, not_differentiable=FIXTURE, examples=one, doc="x"),
        OpSchema("self_decomp", inputs=("x",), shape_infer=_same_type, kernels={"cpu": _times(1.0)},
                 decomposition=_self_decomposition, not_differentiable=FIXTURE, examples=one, doc="x"),
        OpSchema("record", inputs=("x",), shape_infer=_same_type, kernels={"cpu": _record_kernel},
                 traits=("has_side_effect",), not_differentiable=FIXTURE, examples=one, doc="x, recorded"),
        OpSchema("fail_at_run", inputs=("x",), shape_infer=_same_type, kernels={"cpu": _failing_kernel},
                 not_differentiable=FIXTURE, examples=one, doc="raises"),
    ]


def make_plugin() -> types.ModuleType:
    module = types.ModuleType("pipeline_fixture_plugin")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops() -> list[OpSchema]:
        return make_schemas()

    module.frame_register_ops = frame_register_ops
    return module


def basic_entry_points() -> list[Any]:
    """The installed ``ops_basic`` entry point (the pack every pipeline test relies on)."""
    found = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    if not found:
        raise RuntimeError("frame-ops-basic is not installed; run `make setup`")
    return found


def load_basic_registry() -> Registry:
    """core + ops_basic only: the tests do not depend on whichever other packs are installed."""
    return load_registry(entry_points=basic_entry_points(), environ={}, strict=True)


def registry_with_passes(*passes: Any, pack: str = "test_passes", strict: bool = True) -> Registry:
    """core + ops_basic + a pack named ``pack`` whose ``frame_register_passes`` returns ``passes``."""
    module = types.ModuleType(f"{pack}_plugin")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_passes() -> list[Any]:
        return list(passes)

    module.frame_register_passes = frame_register_passes
    return load_registry(entry_points=[*basic_entry_points(), FakeEntryPoint(pack, module)], environ={}, strict=strict,
                         audit=False)


def load_fixture_registry() -> Registry:
    """core + ops_basic + this fixture pack."""
    return load_registry(entry_points=[*basic_entry_points(), FakeEntryPoint("pipeline_fixture", make_plugin())],
                         environ={}, strict=True)
