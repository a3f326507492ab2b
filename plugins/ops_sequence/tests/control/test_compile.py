"""Control flow through the compile pipeline and the runtime (issue 10).

Bodies are compiled once per executable through the whole pipeline, with
the options of the enclosing compile; the forward loop saves its trajectory
only in graphs that differentiate it; unread outputs, states and inputs are
pruned; ``checkpoint_every`` gives the same gradients with less memory.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def rnn(h0, xs, w, u):  # noqa: ANN001, ANN201 - traced tensors
    h, ys = ops.scan(lambda h, x: (ops.tanh(x @ w + h @ u), ops.sum(h * h)), h0, xs)
    return ops.sum(h) + ops.sum(ys)


TYPES = ["f64[4, 8]", "f64[6, 4, 3]", "f64[3, 8]", "f64[8, 8]"]


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((4, 8)) * 0.3, rng.standard_normal((6, 4, 3)), rng.standard_normal((3, 8)) * 0.5,
            rng.standard_normal((8, 8)) * 0.3]


@pytest.fixture
def compiled_bodies(monkeypatch):
    """Every executable ``compile_subgraph`` makes, in order."""
    made = []
    original = fc.compile_subgraph

    def recording(graph, backend=None):  # noqa: ANN001, ANN202
        exe = original(graph, backend)
        made.append(exe)
        return exe
    monkeypatch.setattr(fc, "compile_subgraph", recording)
    return made


def test_each_body_is_compiled_once_per_executable_not_per_iteration(compiled_bodies):
    g = fc.trace(lambda x: ops.loop(lambda i, s: (ops.less(ops.sum(s), 50.0), s * 1.5 + 0.1), 40, True, x), "f64[3]")
    exe = fc.compile(g, cache=False)
    assert len(compiled_bodies) == 1
    for _ in range(3):
        exe.run([np.ones(3)])
    assert len(compiled_bodies) == 1


def test_bodies_inherit_the_options_of_the_enclosing_compile(compiled_bodies):
    g = fc.trace(lambda x: ops.loop(lambda i, s: (True, ops.exp(ops.sin(s)) * 2.0), 3, True, x), "f64[3]")
    fc.compile(g, cache=False)
    fused = compiled_bodies[-1]
    assert any(n.op == "fused_elementwise_internal" for n in fused.graph.nodes)  # the body was optimised
    fc.compile(g, opt_level=0, cache=False)
    plain = compiled_bodies[-1]
    assert not any(n.op == "fused_elementwise_internal" for n in plain.graph.nodes)
    fc.compile(g, disable=["fuse_elementwise"], cache=False)
    assert not any(n.op == "fused_elementwise_internal" for n in compiled_bodies[-1].graph.nodes)


def test_the_forward_loop_runs_once_and_saves_its_trajectory_only_when_differentiated():
    forward = fc.trace(rnn, *TYPES)
    scans = [n for n in fc.compile(forward).graph.nodes if n.op == "scan"]
    assert len(scans) == 1 and len(scans[0].outputs) == 2  # final carry, stacked per-step output
    training = fc.build_backward_graph(forward, 0, [0, 2, 3])
    assert sum(n.op == "scan" for n in training.nodes) == 3  # forward, forward with a saving body, backward
    optimised = fc.compile(training).graph
    scans = [n for n in optimised.nodes if n.op == "scan"]
    assert len(scans) == 2  # the forward node runs the saving body; the second forward is gone
    forward_node, backward_node = scans
    # the forward also stacks the states entering each step and tanh's derivative: [6, 4, 8] each
    assert [str(v.type) for v in forward_node.outputs] == ["f64[4, 8]", "f64[6]", "f64[6, 4, 8]", "f64[6, 4, 8]"]
    body = backward_node.attrs["body"]
    assert not any(n.op == "tanh" for n in body.nodes)  # the backward reads the residual, recomputes nothing
    at0 = fc.compile(training, opt_level=0)  # no merge: the second forward runs, with the same results
    assert sum(n.op == "scan" for n in at0.graph.nodes) == 3
    for a, b in zip(at0.run(_inputs()), fc.compile(training).run(_inputs())):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def test_unread_gradients_are_pruned_from_the_backward_body():
    training = fc.build_backward_graph(fc.trace(rnn, *TYPES), 0, [3])  # only u: not h0, xs or w
    unsunk = fc.compile(training, disable=["sink_scan_accumulations"])
    backward = [n for n in unsunk.graph.nodes if n.op == "scan"][-1]
    # carried: the state cotangent and u's accumulator (w's is pruned); no stacked d/dxs output
    assert backward.attrs["n_carry"] == 2 and len(backward.outputs) == 2
    # summed after the loop instead: u's per-step contributions leave as one stacked output, the carry goes
    backward = [n for n in fc.compile(training).graph.nodes if n.op == "scan"][-1]
    assert backward.attrs["n_carry"] == 1 and len(backward.outputs) == 2
    full = fc.build_backward_graph(fc.trace(rnn, *TYPES), 0, [0, 1, 2, 3])
    want = fc.compile(full).run(_inputs())[4]
    np.testing.assert_allclose(fc.compile(training).run(_inputs())[1], want, rtol=1e-14)


def test_an_unread_branch_output_is_pruned():
    def f(c, x):  # noqa: ANN001, ANN202
        a, _ = ops.if_else(c, lambda v: (v * 2.0, ops.exp(v)), lambda v: (v * 3.0, ops.sin(v)), x)
        return a
    node = next(n for n in fc.compile(fc.trace(f, "bool[]", "f64[3]")).graph.nodes if n.op == "if_else")
    assert len(node.outputs) == 1
    assert not any(n.op in ("exp", "sin") for b in ("then_branch", "else_branch") for n in node.attrs[b].nodes)


def _peak(exe: fc.Executable, inputs: list[np.ndarray]) -> int:
    """Bytes a run needs: the most it allocates at once, plus the planned arena it keeps between runs."""
    exe.run(inputs)  # warm: caches
    tracemalloc.start()
    tracemalloc.reset_peak()
    exe.run(inputs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak + exe.plan.arena_bytes


@pytest.mark.parametrize("kind", ["loop", "scan"])
def test_checkpointing_gives_the_same_gradients_with_less_memory(kind):
    steps, width = 48, 64

    def f(every):  # noqa: ANN001, ANN202
        def fn(h0, xs, w):  # noqa: ANN001, ANN202
            if kind == "scan":
                h, ys = ops.scan(lambda h, x: (ops.tanh(h @ w + x), ops.sum(h)), h0, xs, checkpoint_every=every)
            else:
                h, ys = ops.loop(lambda i, h, x: (True, ops.tanh(h @ w + x), ops.sum(h)), steps, True, h0, xs=[xs],
                                 checkpoint_every=every)
            return ops.sum(h * h) + ops.sum(ys)
        return fc.compile(fc.build_backward_graph(fc.trace(fn, f"f64[{width}, {width}]",
                                                           f"f64[{steps}, {width}, {width}]",
                                                           f"f64[{width}, {width}]"), 0, [0, 2]))
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((width, width)) * 0.1, rng.standard_normal((steps, width, width)) * 0.1,
              rng.standard_normal((width, width)) * 0.1]
    plain, saved, uneven = f(None), f(8), f(7)  # 6 segments of 8 steps; 7 of 7 (the last one 6: 48 = 6*7 + 6)
    want = plain.run(inputs)
    for other in (saved, uneven):
        for a, b in zip(want, other.run(inputs)):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
    state = width * width * 8
    full, checkpointed = _peak(plain, inputs), _peak(saved, inputs)
    # the trajectory is 48 states; with checkpoints 6 segment starts plus one segment's 8 states
    assert full - checkpointed > 30 * state, (full / state, checkpointed / state)


def test_one_executable_run_from_several_threads_keeps_each_call_apart():
    """Bodies run through unchecked runners over the planned buffers of their executables; the enclosing
    executable's lock must keep concurrent calls (with different trip counts) from sharing them. (Without
    the lock, a few of these 400 runs come back wrong: the arrays are large enough for numpy to release
    the GIL.)"""
    import threading

    def model(x, w):  # noqa: ANN001, ANN202
        def body(i, s):  # noqa: ANN001, ANN202
            t = ops.if_else(ops.less(ops.sum(s), 1.0), lambda v: ops.sin(v @ w) + 0.3, lambda v: v * 0.7, s)
            return ops.less(ops.sum(t), 50.0), ops.tanh(t @ w) + t, ops.sum(t)
        s, ys = ops.loop(body, 8, True, x)
        return ops.sum(s) + ops.sum(ys)

    exe = fc.compile(fc.trace(model, "f64[64, 64]", "f64[64, 64]"), cache=False)
    rng = np.random.default_rng(0)
    cases = [[rng.uniform(-0.05, 0.05, (64, 64)), rng.uniform(-0.05, 0.05, (64, 64))] for _ in range(8)]
    want = [exe.run(c) for c in cases]
    wrong = []
    start = threading.Barrier(4)

    def work(k: int) -> None:
        start.wait()
        for rep in range(100):
            j = (k * 3 + rep) % len(cases)
            if not all(np.array_equal(a, b) for a, b in zip(exe.run(cases[j]), want[j])):
                wrong.append((k, rep))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
