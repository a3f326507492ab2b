"""Seed 004's worked If and Loop examples, PyTensor's ``until`` case and the x^16 ladder (issue 10 acceptance).

The closed forms are written out here; each case also checks the structure
the seed prescribes where it says something about the graph (the backward
of an If is an If on the same cond; the backward of a Loop is a reverse Loop
of the forward's T steps that starts from dL/ds_T with cond true).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from .helpers import central_gradient, grad_graph, run


def seed_example(x, cond):  # noqa: ANN001, ANN201 - traced tensors
    """Seed 004: y = x*x if cond else sqrt(x); s = y; three times s = s + 1; loss = s."""
    y = ops.if_else(cond, lambda v: v * v, lambda v: ops.sqrt(v), x)
    return ops.loop(lambda i, s: (True, s + 1.0), 3, True, y)


@pytest.mark.parametrize("flag, value, slope", [(True, 19.0, 8.0), (False, 5.0, 0.25)])
def test_seed_if_then_loop_example(flag, value, slope):
    # x = 4: then y = 16, s = 19, dL/dx = 2x = 8; else y = 2, s = 5, dL/dx = 0.5/sqrt(x) = 0.25.
    # The loop adds 1 three times: its gradient is the identity (grad_s = grad_y, the seed's remark).
    training = grad_graph(seed_example, ["f64[]", "bool[]"], [0])
    loss, dx = run(training, np.array(4.0), np.array(flag))
    assert float(loss) == value
    assert float(dx) == slope


def test_seed_if_backward_is_an_if_on_the_same_cond():
    training = grad_graph(seed_example, ["f64[]", "bool[]"], [0])
    ifs = [n for n in training.nodes if n.op == "if_else"]
    assert len(ifs) == 2  # the forward If and its backward
    forward, backward = ifs
    assert backward.inputs[0] is forward.inputs[0] is training.inputs[1]  # the very same cond value


def test_seed_loop_backward_is_a_reverse_loop_of_T_steps_from_dL_dsT():
    training = grad_graph(seed_example, ["f64[]", "bool[]"], [0])
    loops = [n for n in training.nodes if n.op == "loop"]
    saving = next(n for n in loops if n.attrs["trip_count"])
    backward = next(n for n in loops if n.attrs["reverse"])
    assert backward.inputs[0] is saving.outputs[-1]  # trip limit = the forward's T
    assert bool(fc.ir.graph.constant_array(backward.inputs[1]))  # initial cond: true
    assert backward.attrs["max_trip"] == saving.attrs["max_trip"] == 3  # the same M
    cond_out = backward.attrs["body"].outputs[0].producer
    assert cond_out.op == "constant" and bool(cond_out.attrs["value"])  # every backward step continues
    # its first carried state is dL/ds_T: here the loss seed itself, a constant 1
    assert float(fc.ir.graph.constant_array(backward.inputs[2])) == 1.0


def until_loss(x0, y, a):  # noqa: ANN001, ANN201 - traced tensors
    """x_t = a x_{t-1} + y_t until a x + y > 5; loss = sum of the states after each step."""
    def body(i, x, y_t):  # noqa: ANN001, ANN202
        new = a * x + y_t
        return ops.less(new, 5.0), new, new
    _, states = ops.loop(body, 10, True, x0, xs=[y])
    return ops.sum(states)


def test_until_loop_matches_the_closed_form_gradients():
    a, x0 = 1.5, 0.5
    y = np.array([0.2, 0.4, 0.3, 0.6, 1.0, 2.0, 0.1, 0.3, 0.2, 0.4])
    # the reference trip count: the step whose new state exceeds 5 is the last one
    x, steps = x0, 0
    for yt in y:
        x, steps = a * x + yt, steps + 1
        if not x < 5.0:
            break
    assert 1 < steps < len(y)
    training = grad_graph(until_loss, ["f64[]", "f64[10]", "f64[]"], [0, 1])
    _, dx0, dy = run(training, np.array(x0), y, np.array(a))
    j = np.arange(len(y))
    want_dy = np.where(j < steps, (a ** (steps - j) - 1) / (a - 1), 0.0)
    np.testing.assert_allclose(dy, want_dy, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dx0, a * (a ** steps - 1) / (a - 1), rtol=1e-13)


@pytest.mark.parametrize("x", [1.1, 0.9])
def test_four_squarings_differentiate_to_order_four(x):
    """y = x^16 by a loop of four squarings: the n-th derivative is 16!/(16-n)! x^(16-n), n = 1..4.

    The third order is where PyTensor shipped a wrong answer (#1772): a cotangent on the saved trajectory
    must be added to the state cotangent of its step.
    """
    graph = fc.trace(lambda v: ops.loop(lambda i, s: (True, s * s), 4, True, v), "f64[]")
    index = 0
    for n in range(1, 5):
        graph = fc.build_backward_graph(graph, index, [0])
        index = len(graph.outputs) - 1
        got = float(run(graph, np.array(x))[index])
        want = math.factorial(16) / math.factorial(16 - n) * x ** (16 - n)
        assert got == pytest.approx(want, rel=1e-12), f"order {n}"


def test_four_squarings_third_order_matches_differences_of_the_second():
    graph = fc.trace(lambda v: ops.loop(lambda i, s: (True, s * s), 4, True, v), "f64[]")
    second = fc.build_backward_graph(fc.build_backward_graph(graph, 0, [0]), 1, [0])
    third = fc.build_backward_graph(second, 2, [0])
    exe2, exe3 = fc.compile(second), fc.compile(third)
    x = np.array(1.05)
    numeric = central_gradient(lambda xs: float(exe2.run(xs)[2]), [x], 0, h=1e-5)
    assert float(exe3.run([x])[3]) == pytest.approx(float(numeric), rel=1e-7)
