"""``sys.exit()`` in a pack's code is that pack's named error, never the end of the caller's process (issue 8 §1).

The loader already caught ``SystemExit`` from a pack's hooks; QA found every later call into pack code let it
through: a GradientFn on a type its examples did not cover, a kernel builder, a kernel, a DecomposeFn, a compile
pass and a kernel run by constant folding all ended the user's program with the pack's exit status.
(``os._exit()`` cannot be caught by anyone: see docs/writing-a-pack.md.)
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import frame_core as fc
from frame_core import CompileError, GradientError, KernelError, ops
from frame_core.compiler.passspec import PassSpec
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import use_registry
from frame_core.ops_registry.schema import AttrSpec, Example, OpSchema
from frame_core.runtime import executable

from ..fakes import FakeEntryPoint


def _gradient(ctx):
    if ctx.attrs["where"] == "gradient" and ctx.input_types[0].shape == (5,):  # not an example's type
        sys.exit(3)
    return ctx.grad_graph(lambda x, y, gy: gy)


def _builder(ctx):
    if ctx.attrs["where"] == "builder":
        sys.exit(4)
    where = ctx.attrs["where"]

    def kernel(x):
        if where == "kernel":
            sys.exit(5)
        return x.copy()
    return kernel


def _decomposition(ctx):
    sys.exit(6)


EXITING = OpSchema("ex_op", inputs=("x",), attrs={"where": AttrSpec("str", "nowhere")},
                   shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": _builder}, gradient=_gradient,
                   decomposition=_decomposition, examples=[Example(["f64[3]"])])


def _pack() -> types.ModuleType:
    module = types.ModuleType("exiting_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: [EXITING])

    def exiting_pass(graph, ctx):
        if any(n.op == "ex_op" and n.attrs["where"] == "pass" for n in graph.nodes):
            sys.exit(7)
        return graph

    module.frame_register_passes = hookimpl(lambda: [PassSpec("exiting_pass", exiting_pass, after="fold_constants")])
    return module


@pytest.fixture(scope="module")
def reg():
    basic = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    return load_registry([FakeEntryPoint("exiting", _pack()), *basic], environ={})


def _graph(reg, where: str, fn=None):
    with use_registry(reg):
        return fc.trace(fn or (lambda x: ops.sum(ops.ex_op(x, where=where))), "f64[5]")


def test_a_gradient_fn_calling_exit_is_a_gradient_error(reg):
    assert reg.packs["exiting"].status == "loaded"
    with pytest.raises(GradientError, match=r"GradientFn of node 0 \(ex_op\).*raised SystemExit: 3.*pack exiting"):
        fc.build_backward_graph(_graph(reg, "gradient"), 0, [0], registry=reg)


def test_a_kernel_builder_calling_exit_is_a_compile_error(reg):
    with pytest.raises(CompileError, match=r"kernel of node 0 \(ex_op\) failed: SystemExit: 4"):
        fc.compile(_graph(reg, "builder"), registry=reg, cache=False)


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "loop"])
def test_a_kernel_calling_exit_is_a_kernel_error_on_every_run(reg, codegen, monkeypatch):
    if not codegen:
        monkeypatch.setattr(executable, "CODEGEN_LIMIT", 0)
    exe = fc.compile(_graph(reg, "kernel"), registry=reg, cache=False)
    for _ in range(2):  # the checked first run and the plain later ones
        with pytest.raises(KernelError, match="ex_op.*SystemExit: 5"):
            exe.run([np.ones(5)])


def test_a_kernel_calling_exit_inside_a_control_flow_body_is_a_kernel_error(reg):
    sequence = [ep for ep in discover_entry_points() if ep.name in ("ops_basic", "ops_sequence")]
    flow = load_registry([FakeEntryPoint("exiting", _pack()), *sequence], environ={})
    with use_registry(flow):
        graph = fc.trace(lambda x: ops.if_else(True, lambda v: ops.ex_op(v, where="kernel"), lambda v: -v, x), "f64[5]")
    with pytest.raises(KernelError, match="SystemExit: 5"):
        fc.compile(graph, registry=flow, cache=False).run([np.ones(5)])


def test_a_decompose_fn_calling_exit_is_a_compile_error_naming_the_pack(reg):
    with pytest.raises(CompileError, match=r"DecomposeFn of 'ex_op' raised SystemExit: 6 \(a bug in pack exiting\)"):
        fc.compile(_graph(reg, "nowhere"), registry=reg, cache=False, decompose=["ex_op"])


def test_a_compile_pass_calling_exit_is_a_compile_error(reg):
    with pytest.raises(CompileError, match=r"exiting_pass \(pack exiting\).*SystemExit: 7"):
        fc.compile(_graph(reg, "pass"), registry=reg, cache=False)


def test_a_kernel_calling_exit_while_constants_fold_is_reported_at_run_time(reg):
    graph = _graph(reg, "kernel", lambda x: x + ops.sum(ops.ex_op(fc.constant(np.ones(5)), where="kernel")))
    exe = fc.compile(graph, registry=reg, cache=False)  # folding ran the kernel and left the node in place
    with pytest.raises(KernelError, match="SystemExit: 5"):
        exe.run([np.ones(5)])
