"""The less common shapes of control flow, each against central differences: integer states, several
branch outputs, tuple carries, scans without xs or in reverse, and a loss that reads the stacked states
(a cotangent on the saved trajectory, at first and second order)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from .helpers import central_gradient


def check_gradients(fn, types, inputs, h=1e-6, rtol=1e-7):  # noqa: ANN001, ANN201
    forward = fc.compile(fc.trace(fn, *types))
    training = fc.compile(fc.build_backward_graph(fc.trace(fn, *types), 0, list(range(len(types)))))
    got = training.run(inputs)
    assert float(got[0]) == pytest.approx(float(forward.run(inputs)[0]), rel=1e-14)
    for i, g in enumerate(got[1:]):
        numeric = central_gradient(lambda xs: float(forward.run(xs)[0]), inputs, i, h=h)
        np.testing.assert_allclose(g, numeric, rtol=rtol, atol=1e-8, err_msg=f"input {i}")


def test_integer_state_branch_with_two_outputs_and_a_tuple_carry():
    def f(x, w):  # noqa: ANN001, ANN202
        n, s = ops.loop(lambda i, n, s: (True, n + 1, ops.sin(s * w)), 3, True, np.asarray(0, np.int64), x)
        a, b = ops.if_else(True,
                           lambda u: (u * 2.0, ops.exp(u)), lambda u: (u, u), s)
        rows = ops.reshape(x, shape=(3, 1)) * np.ones((1, 3))
        (c1, c2), ys = ops.scan(lambda c, r: ((c[0] + r, c[1] * r), r * 2.0), (a, b), rows)
        return ops.sum(c1) + ops.sum(c2) + ops.sum(ys)
    check_gradients(f, ["f64[3]", "f64[3]"], [np.array([0.1, 0.2, 0.3]), np.array([0.5, 1.0, 1.5])])


def test_the_integer_state_counts_the_steps():
    g = fc.trace(lambda x: ops.loop(lambda i, n, s: (True, n + i, s), 5, True, np.asarray(0, np.int64), x)[0],
                 "f64[2]")
    (n,) = fc.compile(g).run([np.zeros(2)])
    assert n.dtype == np.int64 and int(n) == 0 + 1 + 2 + 3 + 4


def test_scan_without_xs_and_in_reverse():
    def f(x, xs):  # noqa: ANN001, ANN202
        c, _ = ops.scan(lambda c, _: (ops.tanh(c) * 1.5, None), x, length=4)
        c2, ys = ops.scan(lambda c, r: (c * r + 0.1, c), c, xs, reverse=True)
        return ops.sum(c2) + ops.sum(ys * xs)
    rng = np.random.default_rng(5)
    check_gradients(f, ["f64[2]", "f64[5, 2]"], [rng.uniform(-1, 1, 2), rng.uniform(0.5, 1.5, (5, 2))])


def test_reverse_scan_runs_rows_backwards_and_keeps_their_positions():
    g = fc.trace(lambda c0, xs: ops.scan(lambda c, r: (c + r, c), c0, xs, reverse=True), "f64[]", "f64[4]")
    last, ys = fc.compile(g).run([np.array(0.0), np.array([1.0, 2.0, 3.0, 4.0])])
    assert float(last) == 10.0
    np.testing.assert_array_equal(ys, [9.0, 7.0, 4.0, 0.0])  # the carry entering each row, in row order


def trajectory_loss(x, r):  # noqa: ANN001, ANN201
    """The body also returns the state it was given: the stacked output is the trajectory itself."""
    final, states = ops.loop(lambda i, s: (True, s * s * 0.5 + 0.3, s), 4, True, x)
    return ops.sum(states * r) + ops.sum(final * final)


def test_a_cotangent_on_the_stacked_states_adds_to_each_steps_state_cotangent():
    x, r = np.array([0.4, -0.7]), np.array([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.3], [0.7, 0.9]])
    check_gradients(trajectory_loss, ["f64[2]", "f64[4, 2]"], [x, r])


def test_the_same_at_second_order():
    x, r = np.array([0.4, -0.7]), np.array([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.3], [0.7, 0.9]])
    first = fc.build_backward_graph(fc.trace(trajectory_loss, "f64[2]", "f64[4, 2]"), 0, [0])
    contracted, k = fc.add_scalar_contraction(first, 1, weights=np.array([0.6, -1.1]))
    second = fc.compile(fc.build_backward_graph(contracted, k, [0]))
    one = fc.compile(contracted)
    numeric = central_gradient(lambda xs: float(one.run(xs)[k]), [x, r], 0, h=1e-5)
    np.testing.assert_allclose(second.run([x, r])[-1], numeric, rtol=1e-7)


def test_empty_loops_and_scans_and_branches_without_inputs():
    g = fc.trace(lambda x, xs: ops.loop(lambda i, s, r: (True, s + r, s), 0, True, x, xs=[xs]), "f64[2]", "f64[0, 2]")
    final, ys = fc.compile(g).run([np.ones(2), np.zeros((0, 2))])
    np.testing.assert_array_equal(final, 1.0)
    assert ys.shape == (0, 2)
    empty = fc.trace(lambda x: ops.sum(ops.scan(lambda c, _: (c * 2.0, c), x, length=0)[0]), "f64[2]")
    np.testing.assert_array_equal(fc.compile(fc.build_backward_graph(empty, 0, [0])).run([np.ones(2)])[1], 1.0)

    def branches(c, x):  # noqa: ANN001, ANN202 - both branches read x from outside, take no argument
        return ops.sum(ops.if_else(c, lambda: x * 2.0, lambda: ops.sin(x)))
    check_gradients(lambda x: branches(True, x), ["f64[2]"], [np.array([0.3, 0.4])])
    check_gradients(lambda x: branches(False, x), ["f64[2]"], [np.array([0.3, 0.4])])


@pytest.mark.parametrize("every", [None, 2, 3])
def test_bodies_given_as_graphs_also_checkpoint(every):
    step = fc.trace(lambda i, s: (True, ops.sin(s) * 1.1), "i64[]", "f64[2]")
    cell = fc.trace(lambda c, x: (c * x, c + x), "f64[2]", "f64[2]")

    def f(x, xs):  # noqa: ANN001, ANN202
        c, ys = ops.scan(cell, ops.loop(step, 5, True, x, checkpoint_every=every), xs, checkpoint_every=every)
        return ops.sum(c) + ops.sum(ys)
    rng = np.random.default_rng(2)
    check_gradients(f, ["f64[2]", "f64[5, 2]"], [rng.uniform(0.2, 0.8, 2), rng.uniform(0.5, 1.2, (5, 2))])


def test_the_conformance_examples_exit_early_where_they_say():
    """The kit's loop example with a data-dependent exit really stops after 2 of 3 steps."""
    from frame_core.testing.opcheck import op_graph

    schema = fc.registry().get("loop")
    example = next(e for e in schema.examples if "exit" in e.note)
    outs = fc.compile(op_graph(schema, example.inputs, example.attrs)).run(list(example.values))
    assert int(outs[-1]) == 2
    assert not outs[1][2].any() and outs[1][1].any()  # the third row of the stacked output was never written
