"""Stage 4, constant folding: nodes whose inputs are all constants become constants, with exceptions."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import KernelError, ops
from frame_core.compiler.passes.fold import MAX_FOLD_ELEMENTS
from frame_core.frontend.trace import apply

from .fixture_pack import RECORDED


def op_names(exe) -> list[str]:
    return [n.op for n in exe.graph.nodes]


def test_an_all_constant_subgraph_is_folded_into_constants():
    def f(x):
        c = fc.constant(np.array([0.5, 1.0, 2.0], np.float32))
        k = ops.sqrt(ops.exp(c) * 2.0 + ops.square(c))  # only constants: folded
        return x * k
    exe = fc.compile(fc.trace(f, "f32[3]"), opt_level=1, cache=False)
    assert op_names(exe) == ["constant", "mul"]
    assert any(stage == "fold_constants" for stage, _ in exe.log)


def test_folded_values_equal_what_the_runtime_computes():
    def f():
        c = fc.constant(np.linspace(-1.0, 1.0, 12).reshape(3, 4))
        m = ops.tanh(c @ ops.transpose(c)) + ops.sum(c, axes=[1], keepdims=True)
        return [ops.mean(m), ops.reshape(m, shape=[9]), ops.sigmoid(ops.exp(c) / 3.0)]
    graph = fc.trace(f)
    folded = fc.compile(graph, opt_level=1, cache=False)
    assert set(op_names(folded)) == {"constant"}
    for got, want in zip(folded.run([]), fc.compile(graph, opt_level=0, cache=False).run([])):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_a_side_effect_op_is_never_folded_and_runs_every_time(fixture_registry):
    graph = fc.trace(lambda x: x + ops.exp(apply("record", fc.constant(np.ones(3, np.float32)))), "f32[3]")
    exe = fc.compile(graph, cache=False)
    assert "record" in op_names(exe)
    exe.run([np.zeros(3, np.float32)])
    exe.run([np.zeros(3, np.float32)])
    assert len(RECORDED) == 2


def test_outputs_larger_than_the_limit_are_not_folded():
    n = MAX_FOLD_ELEMENTS + 1
    big = fc.trace(lambda x: x + ops.broadcast_to_internal(fc.constant(np.float32(2.0)), shape=[n]), f"f32[{n}]")
    exe = fc.compile(big, opt_level=1, cache=False)
    assert "broadcast_to_internal" in op_names(exe)
    small = fc.trace(lambda x: x + ops.broadcast_to_internal(fc.constant(np.float32(2.0)), shape=[n - 1]), f"f32[{n - 1}]")
    assert "broadcast_to_internal" not in op_names(fc.compile(small, opt_level=1, cache=False))
    np.testing.assert_array_equal(exe.run([np.ones(n, np.float32)])[0], np.full(n, 3.0, np.float32))


def test_adding_a_negative_zero_is_removed_and_a_positive_zero_is_kept():
    # x + (-0.0) == x for every x; x + (+0.0) turns -0.0 into +0.0, so only the first may be dropped
    def f(x):
        minus = fc.constant(np.full(3, -0.0, np.float32))
        plus = fc.constant(np.zeros(3, np.float32))
        return [apply("accumulate_internal", x, minus), apply("accumulate_internal", minus, ops.exp(x)),
                apply("accumulate_internal", x, plus)]
    exe = fc.compile(fc.trace(f, "f32[3]"), opt_level=1, cache=False)
    assert op_names(exe).count("accumulate_internal") == 1
    x = np.array([-0.0, 2.0, 3.0], np.float32)
    a, b, c = exe.run([x])
    np.testing.assert_array_equal(a, x)
    assert np.signbit(a[0]) and not np.signbit(c[0])  # -0.0 kept where exact, +0.0 where IEEE says so
    np.testing.assert_array_equal(b, np.exp(x))


def test_a_kernel_that_fails_while_folding_is_left_to_fail_at_run_time_naming_the_node(fixture_registry):
    graph = fc.trace(lambda x: x + apply("fail_at_run", fc.constant(np.ones(3, np.float32))), "f32[3]")
    exe = fc.compile(graph, cache=False)
    assert "fail_at_run" in op_names(exe)
    with pytest.raises(KernelError, match=r"node \d+ \(%\d+ = fail_at_run\(%\d+\)\) failed: ValueError: fixture kernel failure"):
        exe.run([np.ones(3, np.float32)])
