"""``compile_subgraph`` and ``Executable.unchecked()``: how a control-flow kernel runs its body (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def test_unchecked_runs_the_same_program_without_input_checks():
    g = fc.trace(lambda x, w: (ops.tanh(x @ w), ops.sum(x)), "f64[2, 3]", "f64[3, 4]")
    exe = fc.compile(g)
    x, w = np.ones((2, 3)), np.full((3, 4), 0.5)
    fast = exe.unchecked()
    assert fast is exe.unchecked()  # generated once
    for a, b in zip(fast([x, w]), exe.run([x, w])):
        np.testing.assert_array_equal(a, b)
    assert isinstance(fast([x, w])[1], np.ndarray) and fast([x, w])[1].shape == ()  # 0-d outputs stay arrays


def test_unchecked_does_not_take_the_lock_but_names_a_failing_kernel():
    g = fc.trace(lambda x: ops.log(x), "f64[2]")
    exe = fc.compile(g, checks=False)  # unchecked: the kernel meets the strings (FRAME_CHECKS=1 refuses them first)
    with exe._lock:  # a caller that owns the executable: no lock churn, no deadlock
        np.testing.assert_allclose(exe.unchecked()([np.array([1.0, np.e])])[0], [0.0, 1.0])
    with pytest.raises(fc.KernelError, match="node 0"):
        exe.unchecked()([np.array(["a", "b"])])


def test_unchecked_leaves_outputs_that_alias_inputs_copied():
    g = fc.Graph("identity")
    x = g.add_input("f64[2]", "x")
    g.mark_output(x)
    data = np.array([1.0, 2.0])
    (out,) = fc.compile(g).unchecked()([data])
    assert out is not data and not np.shares_memory(out, data)


def test_compile_subgraph_outside_a_compile_uses_the_defaults_and_never_the_cache():
    g = fc.trace(lambda x: ops.exp(ops.sin(x)), "f64[3]")
    a, b = fc.compile_subgraph(g), fc.compile_subgraph(g)
    assert a is not b  # each kernel owns its body: no executable shared between threads
    assert any(n.op == "fused_elementwise_internal" for n in a.graph.nodes)  # opt_level 2
    with pytest.raises(fc.CompileError, match="takes a Graph"):
        fc.compile_subgraph("body")  # type: ignore[arg-type]


def test_compile_subgraph_inside_a_kernel_builder_inherits_the_compile_options():
    seen: list[fc.Executable] = []
    body = fc.trace(lambda x: ops.exp(ops.sin(x)), "f64[3]")

    def kernel(ctx):  # noqa: ANN001, ANN202
        exe = fc.compile_subgraph(ctx.attrs["body"])
        seen.append(exe)
        run = exe.unchecked()
        return lambda x: run([x])[0]
    runs = fc.OpSchema("runs_body", inputs=("x",), attrs={"body": fc.AttrSpec("graph")},
                       shape_infer=lambda ctx: ctx.attrs["body"].output_types, kernels={"cpu": kernel},
                       not_differentiable="a test op", examples=[fc.Example(["f64[3]"], {"body": body})])
    reg = fc.load_registry(audit=False)
    runs.pack = "tests"
    reg.schemas["runs_body"] = runs
    with fc.use_registry(reg):
        outer = fc.trace(lambda x: ops.runs_body(x, body=body), "f64[3]")
    for level, fused in ((0, False), (2, True)):
        exe = fc.compile(outer, opt_level=level, registry=reg, cache=False)
        assert any(n.op == "fused_elementwise_internal" for n in seen[-1].graph.nodes) is fused
        np.testing.assert_allclose(exe.run([np.zeros(3)])[0], 1.0)


def test_unchecked_without_output_copies_may_hand_back_inputs_and_constants():
    g = fc.Graph("aliases")
    x = g.add_input("f64[2]", "x")
    g.mark_output(x)
    g.mark_output(g.constant(np.array([1.0, 2.0])))
    data = np.array([3.0, 4.0])
    same, const = fc.compile(g).unchecked(copy_outputs=False)([data])
    assert same is data and not const.flags.writeable  # for a caller that only reads what it gets
