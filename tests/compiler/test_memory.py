"""Stage 8, memory planning: liveness (views included), buffer reuse, in place, outputs that alias nothing."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from .plan_check import check_outputs_alias_nothing, check_plan

NO_FUSION = ["fuse_elementwise"]  # keep single ops, so the plan is visible node by node


def value_of(exe, op: str, k: int = 0):
    """The output of the ``k``-th node of ``op``."""
    return [n.outputs[0] for n in exe.graph.nodes if n.op == op][k]


def mlp_training_graph(batch: int = 16) -> fc.Graph:
    def mlp(x, t, w1, b1, w2, b2):
        return ops.mse_loss(ops.relu(x @ w1 + b1) @ w2 + b2, t)
    forward = fc.trace(mlp, f"f32[{batch}, 8]", f"f32[{batch}, 3]", "f32[8, 16]", "f32[16]", "f32[16, 3]", "f32[3]")
    return fc.build_backward_graph(forward, 0, [2, 3, 4, 5])


def mlp_inputs(seed: int, batch: int = 16) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(batch, 8), (batch, 3), (8, 16), (16,), (16, 3), (3,)]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_a_buffer_is_not_reused_while_a_view_of_its_value_is_live(basic_registry):
    def f(x, y):
        a = ops.exp(x)                      # planned
        view = ops.reshape(a, shape=[12])   # a's last direct read
        b = ops.sin(y)                      # same size as a: would take a's buffer if views were ignored
        return ops.sum(ops.cos(b) * view)
    graph = fc.trace(f, "f32[3, 4]", "f32[12]")
    exe = fc.compile(graph, disable=NO_FUSION, cache=False)
    a, b = value_of(exe, "exp"), value_of(exe, "sin")
    assert a in exe.plan.buffer_of and b in exe.plan.buffer_of
    assert exe.plan.buffer_of[a] != exe.plan.buffer_of[b]
    check_plan(exe, basic_registry)
    x, y = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4), np.linspace(-1, 1, 12, dtype=np.float32)
    np.testing.assert_allclose(exe.run([x, y])[0], np.sum(np.cos(np.sin(y)) * np.exp(x).reshape(12)), rtol=1e-6)


def test_a_dead_buffer_is_reused_and_in_place_writes_happen_only_for_elementwise_ops(basic_registry):
    def f(m, w):
        a = ops.exp(m)       # planned
        b = a @ w            # a dies here, but matmul is not elementwise: b gets another buffer
        c = ops.sin(b)       # b dies here and sin is elementwise: c may take b's buffer
        return ops.sum(c @ w)
    exe = fc.compile(fc.trace(f, "f32[3, 3]", "f32[3, 3]"), disable=NO_FUSION, cache=False)
    plan = exe.plan
    a, b, c = value_of(exe, "exp"), value_of(exe, "matmul"), value_of(exe, "sin")
    assert plan.buffer_of[b] != plan.buffer_of[a]
    assert plan.buffer_of[c] == plan.buffer_of[b]  # in place
    check_plan(exe, basic_registry)
    m, w = np.eye(3, dtype=np.float32), np.full((3, 3), 0.5, np.float32)
    np.testing.assert_allclose(exe.run([m, w])[0], np.sum(np.sin(np.exp(m) @ w) @ w), rtol=1e-6)


@pytest.mark.parametrize("level, disable", [(2, ()), (2, NO_FUSION), (1, ()), (0, ())])
def test_the_plan_of_an_mlp_training_graph_is_sound(level, disable, basic_registry):
    exe = fc.compile(mlp_training_graph(), opt_level=level, disable=disable, cache=False)
    check_plan(exe, basic_registry)
    if level == 2:
        assert exe.plan.buffer_of and exe.peak_bytes < exe.plan.unplanned_bytes
    else:
        assert not exe.plan.buffer_of and exe.memory["arena_bytes"] == 0


def test_memory_report_is_consistent():
    exe = fc.compile(mlp_training_graph(), cache=False)
    memory = exe.memory
    assert set(memory) == {"peak_bytes", "unplanned_bytes", "arena_bytes", "buffers", "planned_values"}
    assert memory["peak_bytes"] == exe.peak_bytes <= memory["unplanned_bytes"]
    assert memory["arena_bytes"] == sum(exe.plan.buffer_bytes) <= memory["peak_bytes"]
    assert memory["buffers"] == len(exe.plan.buffer_bytes) <= memory["planned_values"] == len(exe.plan.buffer_of)
    assert f"peak {exe.peak_bytes} B" in repr(exe)


# -- outputs -------------------------------------------------------------------------------------
ALIASING = {
    "input": lambda x: x,
    "input twice": lambda x: [x, x],
    "view of an input": lambda x: ops.reshape(x, shape=[-1]),
    "stop_gradient of an input": lambda x: ops.stop_gradient(x),
    "constant": lambda x: [x + 1.0, fc.constant(np.arange(6, dtype=np.float32).reshape(2, 3))],
    "folded view of a constant": lambda x: ops.transpose(fc.constant(np.ones((3, 2), np.float32))),
    "value and its view": lambda x: [ops.exp(x), ops.reshape(ops.exp(x), shape=[6]), ops.transpose(ops.exp(x))],
    "planned intermediates": lambda x: [ops.sin(ops.exp(x) @ ops.transpose(x)), ops.sum(ops.cos(x) * 2.0)],
    "fused exports": lambda x: [ops.sin(x) * 2.0, ops.tanh(ops.sin(x) * 2.0), ops.sum(ops.sin(x) * 2.0)],
    "rank 0": lambda x: [ops.sum(x), ops.sum(x) + 0.0, ops.mean(x)],
}


@pytest.mark.parametrize("case", ALIASING)
@pytest.mark.parametrize("level", [0, 2])
def test_outputs_never_alias_each_other_inputs_constants_or_planned_buffers(case, level):
    graph = fc.trace(ALIASING[case], "f32[2, 3]")
    exe = fc.compile(graph, opt_level=level, cache=False)
    first = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    second = -first[::-1].copy()
    reference = [np.array(a, copy=True) for a in fc.compile(graph, opt_level=0, cache=False).run([first])]

    outs = exe.run([first])
    check_outputs_alias_nothing(exe, [first], outs)
    kept = [np.array(a, copy=True) for a in outs]
    again = exe.run([second])                 # reuses the planned buffers
    check_outputs_alias_nothing(exe, [second], again + outs)
    for a, b in zip(outs, kept):              # ... without touching what the first run returned
        np.testing.assert_array_equal(a, b)
    for a in outs + again:                    # mutating results must not reach constants or buffers
        a[...] = 777.0
    for got, want in zip(exe.run([first]), reference):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(first, np.arange(6, dtype=np.float32).reshape(2, 3) / 7)  # inputs untouched


def test_training_runs_back_to_back_do_not_corrupt_earlier_results(basic_registry):
    graph = mlp_training_graph()
    exe = fc.compile(graph, cache=False)
    reference = fc.compile(graph, opt_level=0, cache=False)
    runs = [(inputs, exe.run(inputs)) for inputs in (mlp_inputs(seed) for seed in range(3))]
    for inputs, outs in runs:
        check_outputs_alias_nothing(exe, inputs, outs)
        for got, want in zip(outs, reference.run(inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
