"""A kernel result that shares memory with an input is caught at the first run (issue 8 §2, found in QA).

A kernel of an op without the ``view`` trait that returns its input (or a view of it) looked right to the
dtype-and-shape check, but the memory planner then hands the input's buffer to a later node while the output
still lives: the run returned a wrong number in silence (and a graph output could be the caller's own array).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import frame_core as fc
from frame_core import KernelError, ops
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import use_registry
from frame_core.ops_registry.schema import Example, OpSchema
from frame_core.runtime import executable

from ..fakes import FakeEntryPoint

PASS_THROUGH = lambda ctx: ctx.grad_graph(lambda x, y, gy: gy)  # noqa: E731 - d(x) = gy


def _unary(name: str, kernel, traits=()) -> OpSchema:
    return OpSchema(name, inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: kernel},
                    gradient=PASS_THROUGH, traits=traits, examples=[Example(["f64[4]"])])


def _pick_second(ctx):  # a view op handing back a view of its *second* input
    return lambda x, y: y[...]


def _twice(ctx):
    return lambda x: (lambda z: (z, z))(x * 2.0)


def _pack() -> types.ModuleType:
    module = types.ModuleType("alias_plugin")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops():
        return [
            _unary("al_same", lambda x: x),
            _unary("al_view", lambda x: x[::1]),
            _unary("al_reshaped", lambda x: x.reshape(x.shape)),
            _unary("al_view_ok", lambda x: x[::1], traits=("view",)),
            OpSchema("al_view_second", inputs=("x", "y"), shape_infer=lambda ctx: [ctx.input_types[1]],
                     kernels={"cpu": _pick_second}, not_differentiable="a test op", traits=("view",),
                     examples=[Example(["f64[4]", "f64[4]"])]),
            OpSchema("al_pair", inputs=("x",), outputs=("a", "b"),
                     shape_infer=lambda ctx: [ctx.input_types[0]] * 2, kernels={"cpu": _twice},
                     not_differentiable="a test op", examples=[Example(["f64[4]"])]),
        ]

    module.frame_register_ops = frame_register_ops
    return module


@pytest.fixture(scope="module")
def reg():
    bundled = [ep for ep in discover_entry_points() if ep.name in ("ops_basic", "ops_sequence")]  # control flow
    return load_registry([FakeEntryPoint("al", _pack(), dist_name="frame-al", dist_version="0.1"), *bundled],
                         environ={})


def _compile(reg, fn, n=1, **options):
    with use_registry(reg):
        graph = fc.trace(fn, *["f64[4]"] * n)
        return fc.compile(graph, registry=reg, cache=False, **options)


X = np.array([0.0, 0.25, 0.5, 1.0])


def test_the_silent_wrong_answer_it_made_is_now_a_kernel_error(reg):
    """exp(x) sits in a planned buffer; al_same hands that buffer on as its output; mul then takes the freed buffer
    and overwrote the output: the run returned 2 sin(exp(2x)) where exp(x) + sin(exp(2x)) was asked."""
    def f(x):
        return ops.op("al_same")(ops.exp(x)) + ops.sin(ops.exp(x * 2.0))
    exe = _compile(reg, f, disable=["fuse_elementwise"])
    assert exe.plan.buffer_bytes  # buffers are reused: the situation in which the alias does harm
    with pytest.raises(KernelError, match=r"op 'al_same' \(pack al, frame-al\).*sharing memory with its input 0"):
        exe.run([X])


@pytest.mark.parametrize("op", ["al_same", "al_view", "al_reshaped"])
@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "loop"])
def test_an_input_or_a_view_of_it_as_the_result_of_a_non_view_op_is_refused(reg, op, codegen, monkeypatch):
    if not codegen:
        monkeypatch.setattr(executable, "CODEGEN_LIMIT", 0)
    exe = _compile(reg, lambda x: ops.op(op)(x))  # else the output would be the caller's own array
    with pytest.raises(KernelError, match=f"op '{op}'.*though the op has no view trait"):
        exe.run([X])


def test_frame_checks_checks_aliasing_on_every_run(reg):
    exe = _compile(reg, lambda x: ops.op("al_same")(ops.neg(x)), checks=True)
    with pytest.raises(KernelError, match="al_same"):
        exe.run([X])


def test_a_view_op_may_return_a_view_of_its_first_input_only(reg):
    out = _compile(reg, lambda x: ops.op("al_view_ok")(ops.neg(x))).run([X])[0]
    np.testing.assert_array_equal(out, -X)
    exe = _compile(reg, lambda x, y: ops.op("al_view_second")(x, ops.neg(y)), n=2)
    with pytest.raises(KernelError, match="input 1.*a view op may return a view of input 0 only"):
        exe.run([X, X])


def test_two_outputs_sharing_one_array_are_refused(reg):
    exe = _compile(reg, lambda x: ops.op("al_pair")(x))
    with pytest.raises(KernelError, match="output 1.*sharing memory with its output 0"):
        exe.run([X])


def test_a_kernel_in_a_control_flow_body_is_checked_on_its_first_call(reg):
    def f(x):
        return ops.if_else(True, lambda v: ops.op("al_same")(ops.neg(v)), lambda v: v * 2.0, x)
    exe = _compile(reg, f)
    with pytest.raises(KernelError, match="al_same"):
        exe.run([X])


def test_kernels_writing_into_out_in_place_still_pass(reg):
    """The planner writes an elementwise op into its dying input's buffer: the result is `out`, which is allowed."""
    exe = _compile(reg, lambda x: ops.sin(ops.exp(ops.neg(x)) * 3.0), disable=["fuse_elementwise"])
    np.testing.assert_allclose(exe.run([X])[0], np.sin(np.exp(-X) * 3.0))
    np.testing.assert_allclose(exe.run([X])[0], np.sin(np.exp(-X) * 3.0))


def test_the_conformance_kit_refuses_outputs_sharing_memory_as_the_runtime_does(reg):
    from frame_core.testing import run_conformance

    (report,) = [r for r in run_conformance("al", registry=reg, order=1, low_precision=()) if r.op == "al_pair"]
    kernel = [r for r in report.results if r.check == "kernel"]
    assert kernel and not kernel[0].ok and "output 1 shares memory with output 0" in kernel[0].detail


def _writer(ctx):
    return lambda x: np.maximum(x, 0.0, out=x).copy()  # right values, but x is now relu(x) for every later reader


def test_a_kernel_writing_into_its_input_is_caught_at_the_first_run(monkeypatch):
    from frame_core.runtime import executable as ex

    basic = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    module = type(executable)("writer_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: [_unary("wr_relu", None, traits=())])
    reg = load_registry([FakeEntryPoint("wr", module), *basic], environ={})
    reg.get("wr_relu").kernels["cpu"] = _writer
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.op("wr_relu")(ops.neg(x)) + ops.neg(x) * 0.0, "f64[4]")
    exe = fc.compile(graph, registry=reg, cache=False, disable=["eliminate_common_subexpressions"])
    with pytest.raises(KernelError, match=r"op 'wr_relu' \(pack wr, .*wrote into its input 0"):
        exe.run([X])
    monkeypatch.setattr(ex, "_SNAPSHOT_BYTES", 16)  # every 2nd element, not a copy, past the bound: still seen
    with pytest.raises(KernelError, match="wrote into its input 0"):
        fc.compile(graph, registry=reg, cache=False, disable=["eliminate_common_subexpressions"]).run([X])
