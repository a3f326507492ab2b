"""The kit checks an op's DecomposeFn against its kernel.

Found by writing a third-party pack from the docs: a DecomposeFn returning two outputs for a one-output op (or
computing something else) passed every conformance case and ``frame audit gradients --numeric``; the user met it
only as a CompileError from ``compile(..., decompose=[op])``, or as wrong values on a backend without the kernel.
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


def _hypot(name: str, decomposed) -> OpSchema:  # noqa: ANN001 - the DecomposeFn's body under test
    return OpSchema(name, inputs=("a", "b"), shape_infer=lambda ctx: [ctx.input_types[0]],
                    kernels={"cpu": lambda ctx: np.hypot}, not_differentiable="a fixture",
                    decomposition=lambda ctx: ctx.decomposition_graph(decomposed), doc="hypot",
                    examples=[Example(["f32[3, 4]", "f32[3, 4]"]), Example(["f64[5]", "f64[5]"])])


OPS = [_hypot("dc_right", lambda a, b: ops.sqrt(a * a + b * b)),
       _hypot("dc_two_outputs", lambda a, b: [ops.sqrt(a * a + b * b), a]),
       _hypot("dc_wrong_values", lambda a, b: a * a + b * b)]


@pytest.fixture(scope="module")
def reg():
    module = types.ModuleType("dc_pack_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: OPS)
    return load_registry([FakeEntryPoint("ops_basic", frame_ops_basic.plugin, "frame-ops-basic"),
                          FakeEntryPoint("dc_pack", module, "frame-ops-dc")], environ={}, strict=False)


def _results(reg, op: str):  # noqa: ANN001, ANN202
    return [c.run(reg) for c in conformance_cases("dc_pack", registry=reg) if c.op == op and c.check == "decomposition"]


def test_a_right_decomposition_passes_on_every_example(reg):
    results = _results(reg, "dc_right")
    assert len(results) == 2 and all(r.ok for r in results), results
    assert "decomposition" in CHECKS


def test_a_decomposition_with_the_wrong_outputs_fails_naming_the_pack(reg):
    results = _results(reg, "dc_two_outputs")
    assert len(results) == 2 and not any(r.ok for r in results)
    assert "returns [f32[3, 4], f32[3, 4]], expected [f32[3, 4]] (a bug in pack dc_pack)" in results[0].detail


def test_a_decomposition_with_the_wrong_values_fails(reg):
    results = _results(reg, "dc_wrong_values")
    assert len(results) == 2 and not any(r.ok for r in results)
    assert "output 0: the decomposition gives ndarray float32[3, 4] that differs" in results[0].detail

