"""A broken kernel is reported by every kit check as that kernel's fault, and never ends the test process.

Found by writing a third-party pack from the docs: a kernel returning float64 for a float32 op failed the
``gradient_contract`` check with "InputError: input 1 ('y') must have dtype float32", a kernel returning a list
with "run() expected 3 inputs, got 5" (the micro-graph was fed what the kernel returned), and a kernel calling
``sys.exit()`` raised ``SystemExit`` out of ``ConformanceCase.run()`` (which promises never to raise for the op's
faults), ending any script that runs the kit outside pytest.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import frame_ops_basic.plugin
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.schema import Example, OpSchema
from frame_core.testing import conformance_cases

from ..fakes import FakeEntryPoint


def _op(name: str, kernel) -> OpSchema:  # noqa: ANN001 - the kernel under test
    return OpSchema(name, inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                    kernels={"cpu": lambda ctx: kernel}, gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * 2.0),
                    doc="2x, with a broken kernel", examples=[Example(["f32[3]"])])


OPS = [_op("bk_wide", lambda x: (x * 2).astype(np.float64)), _op("bk_list", lambda x: (x * 2).tolist()),
       _op("bk_exits", lambda x: sys.exit(4))]


@pytest.fixture(scope="module")
def reg():
    module = types.ModuleType("bk_pack_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: OPS)
    entry_points = [FakeEntryPoint("ops_basic", frame_ops_basic.plugin, "frame-ops-basic"),
                    FakeEntryPoint("bk_pack", module, "frame-ops-bk")]
    return load_registry(entry_points, environ={}, strict=False)


def _result(reg, op: str, check: str):  # noqa: ANN001, ANN202
    (case,) = [c for c in conformance_cases("bk_pack", registry=reg) if c.op == op and c.check == check]
    return case.run(reg)


@pytest.mark.parametrize(("op", "says"), [("bk_wide", "returned ndarray float64[3] for output 0"),
                                          ("bk_list", "returned list")])
def test_gradient_contract_blames_a_kernel_result_of_the_wrong_type(reg, op, says):
    result = _result(reg, op, "gradient_contract")
    assert not result.ok
    assert result.detail.startswith(f"KernelError: the cpu kernel of op {op!r} (pack bk_pack)"), result.detail
    assert says in result.detail and "input 1 ('y')" not in result.detail and "expected 3 inputs" not in result.detail


def test_a_kernel_calling_exit_fails_its_checks_without_ending_the_process(reg):
    for check in ("kernel", "gradient_contract"):
        result = _result(reg, "bk_exits", check)  # raised SystemExit before
        assert not result.ok and "SystemExit: 4" in result.detail


def test_the_kernel_check_calls_a_list_a_list_not_several_outputs(reg):
    result = _result(reg, "bk_list", "kernel")
    assert not result.ok and "output 0 is a list, expected an ndarray f32[3]" in result.detail, result.detail
