"""The kit checks the any_shape_gradient trait: a GradientFn that writes the traced batch size down fails.

A pack declaring the trait promises that a training graph through its op, re-specialised for another batch size,
differentiates correctly there; a false promise would be a silently wrong gradient in every dynamic training
graph through the op. Three ops centre x over its batch (y = x - mean(x, axis 0)), whose gradient is gy centred
the same way: one writes it shape-free, one bakes the traced 1/N as a constant, one reshapes to the traced shape.
Three more centre over the last axis: a 1/N baked there passes the batch resize yet is wrong at a new length (or a
vector's new size), so the kit resizes every size the inputs hold, not just the batch.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import frame_ops_basic.plugin
from frame_core import ops
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.schema import Example, OpSchema
from frame_core.testing import CHECKS, conformance_cases

from ..fakes import FakeEntryPoint


def _centre(name: str, gradient, traits=("any_shape_gradient",)) -> OpSchema:  # noqa: ANN001 - the GradientFn body
    return OpSchema(name, inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                    kernels={"cpu": lambda ctx: lambda x: x - x.mean(axis=0)},
                    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gradient(ctx, gy)), traits=traits,
                    doc="x centred over its first axis", examples=[Example(["f64[4, 3]"]), Example(["f32[5, 2, 2]"])])


def _centre_last(name: str, gradient, examples) -> OpSchema:  # noqa: ANN001 - the GradientFn body
    return OpSchema(name, inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                    kernels={"cpu": lambda ctx: lambda x: x - x.mean(axis=-1, keepdims=True)},
                    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gradient(ctx, gy)),
                    traits=("any_shape_gradient",), doc="x centred over its last axis", examples=examples)


def _baked_last(ctx, gy):  # noqa: ANN001, ANN202 - a GradientFn body writing the traced length down
    return gy - ops.sum(gy, axes=[-1], keepdims=True) * (1.0 / ctx.input_types[0].shape[-1])


OPS = [
    _centre("as_right", lambda ctx, gy: gy - ops.mean(gy, axes=[0])),
    _centre("as_baked", lambda ctx, gy: gy - ops.sum(gy, axes=[0]) * (1.0 / ctx.input_types[0].shape[0])),
    _centre("as_reshaped", lambda ctx, gy: ops.reshape(gy - ops.mean(gy, axes=[0]),
                                                       shape=list(ctx.input_types[0].shape))),
    _centre_last("as_right_last", lambda ctx, gy: gy - ops.mean(gy, axes=[-1], keepdims=True),
                 [Example(["f64[4, 3]"]), Example(["f64[5]"])]),
    _centre_last("as_baked_last", _baked_last, [Example(["f64[4, 3]"])]),  # the batch runs, a new length not
    _centre_last("as_baked_vector", _baked_last, [Example(["f64[5]"])]),  # no batch axis at all
    _centre("as_undeclared", lambda ctx, gy: gy - ops.sum(gy, axes=[0]) * (1.0 / ctx.input_types[0].shape[0]),
            traits=()),
]


@pytest.fixture(scope="module")
def reg():
    module = types.ModuleType("as_pack_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: OPS)
    return load_registry([FakeEntryPoint("ops_basic", frame_ops_basic.plugin, "frame-ops-basic"),
                          FakeEntryPoint("as_pack", module, "frame-ops-as")], environ={}, strict=False)


def _results(reg, op: str):  # noqa: ANN001, ANN202
    return [c.run(reg) for c in conformance_cases("as_pack", registry=reg)
            if c.op == op and c.check == "any_shape_gradient"]


def test_a_shape_free_gradient_passes_on_every_example(reg):
    results = _results(reg, "as_right")
    assert len(results) == 2 and all(r.ok for r in results), results
    assert "equals one traced at batch 4 -> 6, batch 4 -> 1, size 3 -> 5, size 3 -> 1" in results[0].detail
    assert "any_shape_gradient" in CHECKS


def test_a_baked_one_over_n_fails_naming_the_sizes(reg):
    results = _results(reg, "as_baked")
    assert len(results) == 2 and not any(r.ok for r in results)
    assert "batch 4 -> 6 (inputs f64[6, 3]): the gradient for input 0 traced at batch 4 gives" in results[0].detail
    assert "read it from an operand" in results[0].detail and "or remove the any_shape_gradient trait" in \
        results[0].detail


def test_a_traced_shape_attribute_fails_as_refused(reg):
    results = _results(reg, "as_reshaped")
    assert not any(r.ok for r in results)
    assert "batch 4 -> 6 (inputs f64[6, 3]): the gradient traced at batch 4 is refused" in results[0].detail


def test_a_gradient_shape_free_along_every_axis_passes(reg):
    results = _results(reg, "as_right_last")
    assert len(results) == 2 and all(r.ok for r in results), results
    assert results[1].detail.endswith("equals one traced at size 5 -> 7, size 5 -> 1")


@pytest.mark.parametrize("op, where", [("as_baked_last", "size 3 -> 5 (inputs f64[4, 5])"),
                                       ("as_baked_vector", "size 5 -> 7 (inputs f64[7])")])
def test_a_baked_size_of_another_axis_fails(reg, op, where):
    # a training graph re-specialised at a new sequence length (or a vector's) would differentiate wrongly
    # there, silently, though the batch resize alone passes
    [result] = _results(reg, op)
    assert not result.ok
    assert f"{where}: the gradient for input 0 traced at size" in result.detail


def test_an_op_without_the_trait_gets_no_case(reg):
    assert _results(reg, "as_undeclared") == []
