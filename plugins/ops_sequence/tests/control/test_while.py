"""A data-dependent while loop: repeat x = x * w + b while sum(x) < c (issue 10 acceptance).

The trip count T depends on the data: it differs across inputs, and the
gradients match central differences where T does not change within the
step. T = 0 (the initial cond is false: the state passes through, the
parameters get zero gradient) and T = M (the cond never fails) are edge cases.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from .helpers import central_gradient, run

M = 12
C = 6.0


def while_loss(x, w, b):  # noqa: ANN001, ANN201 - traced tensors
    def body(i, s):  # noqa: ANN001, ANN202
        new = s * w + b
        return ops.less(ops.sum(new), C), new
    out = ops.loop(body, M, ops.less(ops.sum(x), C), x)
    return ops.sum(out * out)


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    steps = 0
    go = x.sum() < C
    while go and steps < M:
        x = x * w + b
        go = x.sum() < C
        steps += 1
    return float((x * x).sum()), steps


@pytest.fixture(scope="module")
def executable():
    training = fc.build_backward_graph(fc.trace(while_loss, "f64[3]", "f64[3]", "f64[3]"), 0, [0, 1, 2])
    return fc.compile(training)


@pytest.mark.parametrize("x0", [[0.1, 0.2, 0.3], [0.5, 0.9, 1.2], [1.0, 1.5, 2.0]])
def test_trip_count_varies_and_gradients_match_differences(executable, x0):
    x, w, b = np.array(x0), np.array([1.1, 1.2, 1.05]), np.array([0.1, 0.05, 0.2])
    want, steps = reference(x, w, b)
    assert 0 < steps < M
    loss, *grads = executable.run([x, w, b])
    assert float(loss) == pytest.approx(want, rel=1e-13)
    h = 1e-7
    for i, g in enumerate(grads):
        inputs = [x, w, b]
        for k in np.ndindex(inputs[i].shape):  # T must not change within the step: the check is local
            for sign in (1, -1):
                moved = [v.copy() for v in inputs]
                moved[i][k] += sign * h
                assert reference(*moved)[1] == steps
        numeric = central_gradient(lambda vs: reference(*vs)[0], inputs, i, h=h)
        np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-7)


def test_different_inputs_take_different_trip_counts():
    w, b = np.array([1.1, 1.2, 1.05]), np.array([0.1, 0.05, 0.2])
    counts = {reference(np.array(x0), w, b)[1] for x0 in ([0.1, 0.2, 0.3], [0.5, 0.9, 1.2], [1.0, 1.5, 2.0])}
    assert len(counts) == 3


def test_zero_steps_pass_the_state_through(executable):
    x = np.array([2.0, 2.5, 3.0])  # sum 7.5 >= C: the initial cond is false
    w, b = np.array([1.1, 1.2, 1.05]), np.array([0.1, 0.05, 0.2])
    loss, gx, gw, gb = executable.run([x, w, b])
    assert float(loss) == pytest.approx(float((x * x).sum()))
    np.testing.assert_array_equal(gx, 2 * x)
    np.testing.assert_array_equal(gw, 0.0)
    np.testing.assert_array_equal(gb, 0.0)


def test_all_M_steps_when_the_cond_never_fails(executable):
    x, w, b = np.array([0.1, 0.1, 0.1]), np.array([0.5, 0.5, 0.5]), np.array([0.01, 0.02, 0.03])
    want, steps = reference(x, w, b)
    assert steps == M
    loss, *grads = executable.run([x, w, b])
    assert float(loss) == pytest.approx(want, rel=1e-13)
    for i, g in enumerate(grads):
        numeric = central_gradient(lambda vs: reference(*vs)[0], [x, w, b], i)
        np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-9)


def test_a_trip_limit_above_max_trip_is_a_data_error():
    g = fc.Graph("raw")
    limit, x = g.add_input("i64[]", "limit"), g.add_input("f64[2]", "x")
    body = fc.trace(lambda i, s: (True, s * 2.0), "i64[]", "f64[2]")
    g.mark_output(g.apply("loop", limit, g.constant(np.array(True)), x, body=body, max_trip=4, n_states=1))
    exe = fc.compile(g)
    np.testing.assert_array_equal(exe.run([np.array(3), np.ones(2)])[0], 8.0)
    with pytest.raises(fc.DataError, match=r"trip count limit is 5, outside \[0, max_trip = 4\]; pass a limit in that range"):
        exe.run([np.array(5), np.ones(2)])
    with pytest.raises(fc.DataError, match="limit is -1"):
        exe.run([np.array(-1), np.ones(2)])


def test_the_front_end_reports_the_trip_count_the_docs_describe():
    # docs/control-flow.md: "With trip_count=True the trip count T (i64[]) is a last output"
    def counted(x, w, b):  # noqa: ANN001, ANN202 - traced tensors
        def body(i, s):  # noqa: ANN001, ANN202
            new = s * w + b
            return ops.less(ops.sum(new), C), new
        return ops.loop(body, M, ops.less(ops.sum(x), C), x, trip_count=True)

    exe = fc.compile(fc.trace(counted, "f64[3]", "f64[3]", "f64[3]"))
    w, b = np.array([1.1, 1.2, 1.05]), np.array([0.1, 0.05, 0.2])
    for x0 in ([0.1, 0.2, 0.3], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]):
        final, steps = exe.run([np.array(x0), w, b])
        assert steps.dtype == np.int64 and int(steps) == reference(np.array(x0), w, b)[1]


@pytest.mark.parametrize("kwargs, message", [
    ({"trip_count": 1}, "trip_count must be a bool"),
    ({"trip_count": True, "checkpoint_every": 2}, "trip_count=True and checkpoint_every cannot be combined"),
])
def test_a_trip_count_the_front_end_cannot_give_is_refused(kwargs, message):
    with pytest.raises(fc.IRError, match=message):
        fc.trace(lambda x: ops.loop(lambda i, s: (True, s * 2.0), 4, True, x, **kwargs), "f64[]")
