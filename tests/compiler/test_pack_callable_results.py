"""What a pack's callables return is checked where it is returned, and the pack is named (found in QA).

A kernel builder returning ``None`` failed at the first run as "the kernel of node 0 failed: TypeError: 'NoneType'
object is not callable", naming no pack; a shape function returning ``None`` for an input its examples do not
cover was a raw TypeError when the graph was built; a DecomposeFn traced over the wrong inputs was an IRError
from ``inline_graph``.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import CompileError, ShapeError, ops
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import use_registry

from ..fakes import FakeEntryPoint
from ..ops_registry.fakepacks import plugin, unary

PASS_THROUGH = lambda ctx: ctx.grad_graph(lambda x, y, gy: gy)  # noqa: E731


def _shape(ctx):  # sound on the example's f32[3]; a bug on any other length
    return [ctx.input_types[0]] if ctx.input_types[0].shape == (3,) else None


def _ops():
    return [unary("cr_builder_none", PASS_THROUGH, kernels={"cpu": lambda ctx: None}),
            unary("cr_shape", PASS_THROUGH, shape_infer=_shape),
            unary("cr_decompose", PASS_THROUGH,
                  decomposition=lambda ctx: fc.trace(lambda a, b: a + b, "f32[3]", "f32[3]"))]


@pytest.fixture(scope="module")
def reg():
    basic = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    registry = load_registry([FakeEntryPoint("cr", plugin("cr", _ops)), *basic], environ={})
    assert registry.packs["cr"].status == "loaded", registry.packs["cr"].error
    return registry


def test_a_kernel_builder_returning_no_function_is_a_compile_error_naming_the_pack(reg):
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.cr_builder_none(x), "f32[3]")
    with pytest.raises(CompileError, match=r"kernel builder of op 'cr_builder_none' \(pack cr\) returned NoneType"):
        fc.compile(graph, registry=reg, cache=False)


def test_a_shape_function_returning_none_is_a_shape_error_naming_the_pack(reg):
    with use_registry(reg):
        fc.trace(lambda x: ops.cr_shape(x), "f32[3]")
        with pytest.raises(ShapeError, match=r"cr_shape: shape inference returned None, expected a list of TensorType"
                                             r".*bug in pack cr"):
            fc.trace(lambda x: ops.cr_shape(x), "f32[4]")


def test_a_decompose_fn_over_other_inputs_is_a_compile_error_naming_the_pack(reg):
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.cr_decompose(x), "f32[3]")
    with pytest.raises(CompileError, match=r"DecomposeFn of 'cr_decompose' \(pack cr\) takes \[f32\[3\], f32\[3\]\]"):
        fc.compile(graph, registry=reg, cache=False, decompose=["cr_decompose"])
    np.testing.assert_array_equal(fc.compile(graph, registry=reg, cache=False).run([np.ones(3, np.float32)])[0],
                                  np.ones(3, np.float32))
