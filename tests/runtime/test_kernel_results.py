"""Kernel results are checked (issue 8 §2): a kernel returning the wrong dtype, shape, a list, ``None`` or a numpy
scalar is a ``KernelError`` naming the op and its pack at the first run, never a silent wrong answer.

The fake pack ``badk`` has one op, ``badk_op(x; mode)``, whose kernel misbehaves as ``mode`` says.
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
from frame_core.ops_registry.schema import AttrSpec, Example, OpSchema
from frame_core.runtime import executable

from ..fakes import FakeEntryPoint

BEHAVIOURS = {
    "ok": lambda x: x * x.dtype.type(2),
    "wider": lambda x: (x * 2).astype(np.float32),  # float32 for a float16 graph
    "shape": lambda x: np.concatenate([x, x]),
    "list": lambda x: list(x),
    "none": lambda x: None,
    "scalar": lambda x: x.dtype.type(x.sum()),  # a numpy scalar for a rank-0 output
    "later": None,  # right on the first call, wrong afterwards
}


def _kernel(ctx):
    mode = ctx.attrs["mode"]
    if mode == "later":
        calls = []

        def kernel(x):
            calls.append(1)
            return x * x.dtype.type(2) if len(calls) == 1 else (x * 2).astype(np.float64)
        return kernel
    return BEHAVIOURS[mode]


def _op(name: str, *, shape=lambda ctx: [ctx.input_types[0]], traits=(), kernel=_kernel) -> OpSchema:
    return OpSchema(name, inputs=("x",), attrs={"mode": AttrSpec("str", "ok")}, shape_infer=shape,
                    kernels={"cpu": kernel}, not_differentiable="a test op", traits=traits,
                    examples=[Example(["f32[3]"])])


def _ignores_out(ctx):
    return lambda x, out=None: np.multiply(x, x.dtype.type(3))  # a fresh array, `out` left unwritten


def _pack() -> types.ModuleType:
    module = types.ModuleType("badk_plugin")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops():
        return [_op("badk_op"), _op("badk_sum", shape=lambda ctx: [fc.TensorType(ctx.input_types[0].dtype, ())]),
                _op("badk_lazy", traits=("elementwise", "accepts_out"), kernel=_ignores_out)]

    module.frame_register_ops = frame_register_ops
    return module


@pytest.fixture(scope="module")
def reg():
    basic = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    return load_registry([FakeEntryPoint("badk", _pack(), dist_name="frame-badk", dist_version="0.3"), *basic],
                         environ={})


def _run(reg, mode: str, dtype: str = "f16", op: str = "badk_op", codegen: bool = True, checks: bool = False):
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.neg(ops.op(op)(x, mode=mode)), f"{dtype}[4]")
        exe = fc.compile(graph, registry=reg, cache=False, checks=checks)
    if not codegen:
        exe._fast = exe._interpreter()
    return exe, np.arange(4).astype(fc.TensorType.parse(f"{dtype}[4]").dtype.np)


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "loop"])
@pytest.mark.parametrize("mode, words", [
    ("wider", "returned an array float32[4] for its output, but shape inference says f16[4]"),
    ("shape", "returned an array float16[8] for its output, but shape inference says f16[4]"),
    ("list", "returned list for its output"),
    ("none", "returned NoneType for its output"),
])
def test_a_wrong_result_is_a_kernel_error_naming_the_op_and_its_pack(reg, mode, words, codegen):
    exe, x = _run(reg, mode, codegen=codegen)
    with pytest.raises(KernelError) as info:
        exe.run([x])
    message = str(info.value)
    assert words in message
    assert "op 'badk_op' (pack badk, frame-badk)" in message and "node 0" in message
    assert "neg" not in message.split(";")[0]  # the op that returned it is blamed, not the next one


def test_a_numpy_scalar_for_a_rank_0_output_is_refused(reg):
    exe, x = _run(reg, "scalar", "f32", op="badk_sum")
    with pytest.raises(KernelError, match="returned a numpy scalar float32 for its output, but shape inference says f32"):
        exe.run([x])


def test_a_sound_kernel_passes_and_later_runs_use_the_unchecked_program(reg):
    exe, x = _run(reg, "ok")
    np.testing.assert_array_equal(exe.run([x])[0], -2 * x)
    assert exe._fn is exe._fast  # the first run checked; the rest pay nothing
    np.testing.assert_array_equal(exe.run([x])[0], -2 * x)


def test_frame_checks_checks_every_run(reg, monkeypatch):
    exe, x = _run(reg, "later")  # wrong from the second call on: only checking every run sees it
    exe.run([x])
    exe.run([x])  # unchecked: not noticed (the neg of a float64 array)
    monkeypatch.setenv("FRAME_CHECKS", "1")
    exe, x = _run(reg, "later", checks=None)
    exe.run([x])
    with pytest.raises(KernelError, match="float64"):
        exe.run([x])


def test_a_fused_member_that_ignores_out_is_refused(reg):
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.badk_lazy(ops.neg(x)) + 1.0, "f32[8]")
        exe = fc.compile(graph, registry=reg, cache=False)
        assert any(i.op == "fused_elementwise_internal" for i in exe.instructions)
    with pytest.raises(KernelError, match="badk_lazy.*did not return the `out` array"):
        exe.run([np.ones(8, np.float32)])


def test_codegen_limit_programs_check_their_first_run_too(reg, monkeypatch):
    monkeypatch.setattr(executable, "CODEGEN_LIMIT", 0)
    exe, x = _run(reg, "wider")
    assert exe.source is None
    with pytest.raises(KernelError, match="badk_op"):
        exe.run([x])
